//! Where a role's core puts what it sends and what it reports. The cores (router, worker,
//! collector) are state machines that own no socket, read no clock and write no log: the
//! driver that runs one hands it an [`Outbox`], which sends each frame on (a ZeroMQ socket, or
//! an in-memory link in the test harness), tells the time a frame leaves, and takes the
//! [`Event`]s worth reporting (a driver logs them; a test asserts them).

use std::collections::BTreeMap;

/// Who a frame goes to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Peer {
    /// The worker with this index in the run's worker list (the router's data path).
    Worker(u32),
    /// The collector.
    Collector,
    /// The router's control socket, as a request (a worker handing off state).
    Router,
    /// A client of the router's control socket, by its identity: the answer to its request.
    Client(Vec<u8>),
}

/// What a core sends through, and the clock it stamps departures with.
pub trait Outbox {
    /// Sends one frame to `to`. A send that cannot complete (the process is shutting down, the
    /// peer is gone) is the driver's to report: the core carries on, the driver stops it.
    fn send(&mut self, to: Peer, frame: &[u8]);

    /// Connects to a worker that joined the running cluster, as [`Peer::Worker`] `index` (the
    /// next one), whose CURVE key is `key` (empty when open): frames sent to it afterwards go
    /// there.
    fn connect_worker(&mut self, index: u32, endpoint: &str, key: &str) {
        let _ = (index, endpoint, key);
    }

    /// Worker `index` was taken for dead while its connection may still be up (it went
    /// silent): nothing more is sent to it, and what waits for it is dropped (its ticks are in
    /// the router's replay log).
    fn disconnect_worker(&mut self, index: u32) {
        let _ = index;
    }

    /// A restarted collector, incarnation `incarnation` at `endpoint` with CURVE key `key`
    /// (empty when open), takes over: frames to [`Peer::Collector`] go there, those it has not
    /// saved first ([`crate::delivery`]).
    fn collector_moved(&mut self, endpoint: &str, key: &str, incarnation: u64) {
        let _ = (endpoint, key, incarnation);
    }

    /// The collector saved this sender's frames up to `position`: they need not be kept. With
    /// `resend`, it missed some after that: every frame kept goes to it again.
    fn collector_saved(&mut self, position: u64, resend: bool) {
        let _ = (position, resend);
    }

    /// The time now, in ns since the epoch: read when a frame leaves, for its exit stamp.
    fn now(&self) -> u64;

    /// Takes an event worth reporting; by default it is logged.
    fn event(&mut self, event: Event) {
        event.log();
    }
}

/// What a core reports besides its frames.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A process registered with the router; who is still missing before the start.
    Registered {
        /// Its role, id and endpoint.
        who: String,
        /// Who the run still waits for.
        waiting_for: String,
    },
    /// A registration was refused.
    Refused {
        /// Its role, id and endpoint, or what could be read of it.
        who: String,
        /// Why.
        reason: String,
    },
    /// A control request that is not a frame this build reads.
    BadControlFrame {
        /// Why.
        reason: String,
    },
    /// New rules were accepted and switch every worker at `at`.
    Deployed {
        /// Their version in the run.
        epoch: u32,
        /// Where they came from.
        origin: String,
        /// Per stream, the first sequence number under them.
        at: BTreeMap<u32, u64>,
    },
    /// A deployment was refused; the running rules stay.
    DeploymentRefused {
        /// The first line of the reason.
        reason: String,
    },
    /// An injector stream ended at the router.
    StreamEnded {
        /// The stream.
        stream: u32,
        /// What its injector said it sent.
        sent: u64,
        /// What the router received of it.
        received: u64,
    },
    /// The router ended a stream itself: its injector fell silent or died.
    StreamLost {
        /// The stream.
        stream: u32,
        /// What the router received of it (what its injector sent is unknown).
        received: u64,
        /// Why its injector was taken for dead.
        reason: String,
    },
    /// A worker switched to new rules.
    RulesSwitched {
        /// Their version in the run.
        epoch: u32,
        /// Where they came from.
        origin: String,
    },
    /// A rescale began: `worker` joins or leaves, `symbols` move in `slices`.
    RescaleStarted {
        /// `join` or `leave`.
        kind: &'static str,
        /// The worker joining or leaving.
        worker: String,
        /// Symbols that move.
        symbols: u64,
        /// Slices they move in.
        slices: u32,
    },
    /// A rescale ended.
    RescaleFinished {
        /// `join` or `leave`.
        kind: &'static str,
        /// The worker that joined or left.
        worker: String,
        /// Symbols moved.
        symbols: u64,
        /// State bytes moved.
        state_bytes: u64,
        /// How long it took, ns.
        duration_ns: u64,
    },
    /// A rescale was given up: the input ended first (the symbols not yet moved stay).
    RescaleAbandoned {
        /// The worker joining or leaving.
        worker: String,
        /// Why.
        reason: String,
    },
    /// A worker exported symbols for another (`to`) or imported them from one (`from`).
    StateMoved {
        /// Symbols in the hand-off.
        symbols: u64,
        /// Bytes of engine state.
        bytes: u64,
        /// `exported` or `imported`.
        direction: &'static str,
    },
    /// A worker died and its symbols went to the others.
    WorkerFailed {
        /// The dead worker.
        worker: String,
        /// Why it was taken for dead.
        reason: String,
        /// Symbols it owned.
        symbols: u64,
        /// Whether they were restored from its checkpoint and its ticks replayed.
        recovered: bool,
        /// Ticks replayed.
        replayed: u64,
    },
    /// A worker took a checkpoint of its state.
    Checkpointed {
        /// The checkpoint.
        id: u64,
        /// Symbols in it.
        symbols: u64,
        /// Bytes of engine state.
        bytes: u64,
        /// Whether it holds only the changes since the worker's snapshot before.
        incremental: bool,
    },
    /// Something went wrong with checkpoints (the run goes on, with less protection).
    CheckpointTrouble {
        /// What.
        reason: String,
    },
}

impl Event {
    /// Logs the event as the processes do.
    pub fn log(&self) {
        match self {
            Event::Registered { who, waiting_for } => tracing::info!("registered {who}; waiting for {waiting_for}"),
            Event::Refused { who, reason } => tracing::warn!("refused {who}: {reason}"),
            Event::BadControlFrame { reason } => tracing::warn!("bad control frame: {reason}"),
            Event::Deployed { epoch, origin, at } => tracing::info!(epoch, origin, ?at, "rules deployed"),
            Event::DeploymentRefused { reason } => tracing::warn!("deployment refused: {reason}"),
            Event::StreamEnded { stream, sent, received } => tracing::info!(stream, sent, received, "stream ended"),
            Event::StreamLost { stream, received, reason } => tracing::error!(
                stream,
                received,
                "stream {stream} ended by the router, its injector taken for dead ({reason}): what it sent \
                 beyond the {received} ticks received is unknown"
            ),
            Event::RulesSwitched { epoch, origin } => tracing::info!(epoch, origin, "rules switched"),
            Event::RescaleStarted { kind, worker, symbols, slices } => {
                tracing::info!(worker, symbols, slices, "rescale started: {kind} of {worker}")
            }
            Event::RescaleFinished { kind, worker, symbols, state_bytes, duration_ns } => tracing::info!(
                worker,
                symbols,
                state_bytes,
                duration_ms = *duration_ns as f64 / 1e6,
                "rescale finished: {kind} of {worker}"
            ),
            Event::RescaleAbandoned { worker, reason } => tracing::warn!(worker, "rescale given up: {reason}"),
            // One line per slice: the move's summary is the router's (rescale finished, worker
            // failed), at INFO; the slices at DEBUG.
            Event::StateMoved { symbols, bytes, direction } => tracing::debug!(symbols, bytes, "state {direction}"),
            Event::WorkerFailed { worker, reason, symbols, recovered: true, replayed } => tracing::error!(
                worker,
                symbols,
                replayed,
                "worker {worker} failed ({reason}): its symbols were restored from its last checkpoint on the \
                 other workers and its ticks since replayed"
            ),
            Event::WorkerFailed { worker, reason, symbols, recovered: false, .. } => tracing::error!(
                worker,
                symbols,
                "worker {worker} failed ({reason}): its symbols go on at the other workers from empty state \
                 (no current checkpoint)"
            ),
            Event::Checkpointed { id, symbols, bytes, incremental } => {
                tracing::debug!(id, symbols, bytes, incremental, "checkpoint taken")
            }
            Event::CheckpointTrouble { reason } => tracing::warn!("checkpoint: {reason}"),
        }
    }
}

/// Frames and events kept in memory with a fixed clock: what unit tests drive a core with.
#[derive(Debug, Default)]
pub struct Recorded {
    /// Every frame sent, in order.
    pub sent: Vec<(Peer, Vec<u8>)>,
    /// Every event reported, in order.
    pub events: Vec<Event>,
    /// What [`Outbox::now`] answers.
    pub clock: u64,
    /// Workers connected to, in order: (index, endpoint).
    pub connected: Vec<(u32, String)>,
    /// What the collector saved, as the core passed it on: (position, resend), in order.
    pub saved: Vec<(u64, bool)>,
    /// Collectors that took over, as the core passed them on: (endpoint, key, incarnation).
    pub moved: Vec<(String, String, u64)>,
}

impl Recorded {
    /// Takes the frames sent so far.
    pub fn take(&mut self) -> Vec<(Peer, Vec<u8>)> {
        std::mem::take(&mut self.sent)
    }
}

impl Outbox for Recorded {
    fn send(&mut self, to: Peer, frame: &[u8]) {
        self.sent.push((to, frame.to_vec()));
    }

    fn now(&self) -> u64 {
        self.clock
    }

    fn event(&mut self, event: Event) {
        self.events.push(event);
    }

    fn connect_worker(&mut self, index: u32, endpoint: &str, _key: &str) {
        self.connected.push((index, endpoint.to_string()));
    }

    fn collector_moved(&mut self, endpoint: &str, key: &str, incarnation: u64) {
        self.moved.push((endpoint.to_string(), key.to_string(), incarnation));
    }

    fn collector_saved(&mut self, position: u64, resend: bool) {
        self.saved.push((position, resend));
    }
}
