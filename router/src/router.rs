//! The router's core: a state machine over the run's phases ([`Phase`]). Until the cluster is
//! complete it gathers registrations ([`Control`]); then, running, the data path routes ticks
//! ([`DataPath`]), and what exists only then (membership, the collector's delivery) lives in
//! the running phase's own struct; once every stream has ended it reports to the collector and waits for the
//! collector to have everything before releasing the nodes. It owns no socket and reads no
//! clock: the driver ([`crate::driver`]) feeds it frames with their arrival time and sends
//! what it puts in the [`Outbox`].

use crate::admission::authorize;
use crate::control::{ClientId, Control};
use crate::data_path::DataPath;
use crate::delivery::CollectorDelivery;
use crate::deploying::Deployments;
use crate::failover::{not_stored, Checkpoints};
use crate::heartbeats::{Heartbeats, Silent};
use crate::rendezvous::{Rendezvous, WorkerCount};
use crate::rescaling::Rescaling;
use cep_core::clock::Monotonic;
use cep_core::clock::OffsetEstimate;
use cep_core::control::{Ready, Refused, Register, WorkerInfo, MAX_CONTROL_FRAME_BYTES};
use cep_core::delivery::{DeliveryQuery, Saved};
use cep_core::failover::Snapshot;
use cep_core::frame::{Body, EndAck, Frame};
use cep_core::identity::{Identity, Role, Sender, ROUTER_ID};
use cep_core::liveness::{Fenced, Heartbeat, InjectorHeartbeat};
use cep_core::outbox::{Event, Outbox, Peer};
use cep_core::report::{CauseCounts, ClockReport, RouterProgress, RouterReport};
use cep_core::rescale::{Leave, Reached, StateTaken, SymbolState, MAX_STREAMS};
use cep_core::wire::FrameKind;
use std::collections::BTreeMap;
use std::time::Duration;

/// The largest InjectorHeartbeat read: one count (9 bytes at most) per stream a run can have.
const MAX_INJECTOR_HEARTBEAT_BYTES: usize = 64 + 9 * MAX_STREAMS as usize;

/// The answer to a request that needs the running phase before it.
const NOT_STARTED: &str = "the run has not started";

/// How far ahead an injector that registers while the run goes starts: time for it to
/// measure its clock offset to the collector first.
const LATE_START_DELAY_NS: u64 = 100_000_000;

/// What shapes a run, from the router's configuration.
#[derive(Clone, Debug)]
pub struct RouterSettings {
    /// How many workers the run waits for.
    pub workers: WorkerCount,
    /// Injector streams the run waits for.
    pub streams: u32,
    /// Virtual nodes per worker on the hash ring.
    pub vnodes: usize,
    /// Most ticks in one batch to a worker.
    pub batch: usize,
    /// Frames larger than this are rejected.
    pub max_frame_bytes: usize,
    /// How late (ns) a tick may be and still be processed; `None`: every late tick is.
    pub allowed_lateness_ns: Option<u64>,
    /// Symbols moved at a time when a worker joins or leaves.
    pub slice_symbols: usize,
    /// Ticks held for moving symbols beyond which the router stops reading its input
    /// (back-pressure on the injectors) until the move catches up.
    pub max_held_ticks: usize,
    /// How long (ns) a slice's state may take before the router gives it up.
    pub move_timeout_ns: u64,
    /// Checkpoint interval (ns); 0: no checkpoints, and a dead worker's state is lost.
    pub checkpoint_every_ns: u64,
    /// Confirmed checkpoints of each worker the checkpoint store keeps.
    pub checkpoints_retained: usize,
    /// The cluster's checkpoint store (absolute), told in Ready to workers not given one of
    /// their own; empty: none.
    pub checkpoint_dir: String,
    /// Bytes of replay logs beyond which the router reads no input until a checkpoint
    /// completes.
    pub max_replay_bytes: usize,
    /// A worker silent this long (no heartbeat, no request) is taken for dead and fenced.
    pub failure_timeout: Duration,
}

/// Where the started run's data goes: the driver connects to these before
/// [`Router::announce`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Start {
    /// The workers in ring order; a worker's index here is its [`Peer::Worker`] index.
    pub workers: Vec<WorkerInfo>,
    /// The collector's data endpoint.
    pub collector: String,
    /// The collector's CURVE key (empty when open).
    pub collector_key: String,
}

/// The router's phases: gathering registrations until the cluster is complete, then running
/// (the end of the run is the running phase's: every stream ended, the collector finishing).
// One router a process, changing phase once: the size of the variants does not matter.
#[allow(clippy::large_enum_variant)]
enum Phase {
    Gathering,
    Running(Running),
}

/// What exists only once the run has started.
struct Running {
    /// Routes the ticks.
    path: DataPath,
    /// The membership, and the rescale in progress.
    rescaling: Rescaling,
    /// What a worker or injector that joins later is told (its index and the members filled
    /// in); `None` only for a run that started with nobody to answer.
    joiner_ready: Option<Ready>,
    /// The collector serving the run (restarted ones take over).
    delivery: CollectorDelivery,
    /// What the router hears from each worker and injector: a silent one is taken for dead.
    heartbeats: Heartbeats,
    /// Each injector's standing link, by its first stream (from its heartbeats): where the
    /// router's last word goes if it gives the run up.
    injector_links: BTreeMap<u32, ClientId>,
}

/// One run of the router.
pub struct Router {
    settings: RouterSettings,
    control: Control,
    phase: Phase,
    answers: Vec<(ClientId, Ready)>,
    /// Injectors that joined the running cluster: (client, first stream, streams).
    late_injectors: Vec<(ClientId, u32, u32)>,
    workers: Vec<WorkerInfo>,
    checkpoints: Checkpoints,
    /// The run's collector's CURVE key (empty when open): one that resumes must hold it.
    collector_key: String,
    /// Control requests refused for who sent them, and connections the authentication refused,
    /// by cause: reported with the data path's rejections.
    denied: BTreeMap<String, u64>,
    /// Why each worker taken for dead was: what it is told, fenced, when it speaks again.
    fenced: BTreeMap<u32, String>,
    /// Per stream, the count its injector's last heartbeat gave.
    heard_sent: BTreeMap<u32, u64>,
    /// Whether the report went to the collector (once, whoever ends the run).
    report_sent: bool,
}

impl Router {
    /// A router waiting for the cluster `settings` describes, starting with `deployments`.
    pub fn new(settings: RouterSettings, deployments: Deployments) -> Self {
        let rendezvous = Rendezvous::new(settings.workers, settings.streams);
        Router {
            control: Control::new(rendezvous, deployments),
            settings,
            phase: Phase::Gathering,
            answers: Vec::new(),
            late_injectors: Vec::new(),
            workers: Vec::new(),
            checkpoints: Checkpoints::new(0, Duration::ZERO, Duration::ZERO, 1),
            collector_key: String::new(),
            denied: BTreeMap::new(),
            fenced: BTreeMap::new(),
            heard_sent: BTreeMap::new(),
            report_sent: false,
        }
    }

    /// Handles one control request from `peer`, the sender as the authentication admitted it
    /// (`None`: an open socket, where anyone may ask anything): a request its key's roles do
    /// not allow, or that names another process than the one holding the key, is refused
    /// and counted as `unauthorized_control`.
    pub fn control_from(
        &mut self,
        client: ClientId,
        peer: Option<&Identity>,
        body: &[u8],
        now: Monotonic,
        out: &mut impl Outbox,
    ) {
        if let Some(peer) = peer {
            if let Err(reason) = authorize(peer, body, &self.workers, &self.collector_key) {
                *self.denied.entry("unauthorized_control".into()).or_insert(0) += 1;
                out.event(Event::Refused { who: format!("a request from {peer}"), reason: reason.clone() });
                return out.send(Peer::Client(client), &Refused { reason }.encode(ROUTER_ID));
            }
        }
        let caller_key = peer.map_or("", |peer| peer.key.as_str());
        self.serve_control(client, caller_key, body, now, out);
    }

    /// Connections the authentication refused so far, by cause ([`cep_transport::Context::refusals`]):
    /// reported with the rejections.
    pub fn refused_connections(&mut self, refusals: &BTreeMap<String, u64>) {
        self.denied.extend(refusals.iter().map(|(cause, count)| (cause.clone(), *count)));
    }

    /// Handles one control request received at `now` (any phase; the move and settle timers
    /// read it).
    pub fn control(&mut self, client: ClientId, body: &[u8], now: Monotonic, out: &mut impl Outbox) {
        self.serve_control(client, "", body, now, out);
    }

    /// Serves a request from the holder of `caller_key` (empty when open).
    fn serve_control(
        &mut self,
        client: ClientId,
        caller_key: &str,
        body: &[u8],
        now: Monotonic,
        out: &mut impl Outbox,
    ) {
        let Phase::Running(Running { path, rescaling, delivery, heartbeats, injector_links, .. }) = &mut self.phase
        else {
            let kind = Frame::read(body, MAX_CONTROL_FRAME_BYTES).map(|frame| frame.kind());
            if matches!(
                kind,
                Ok(FrameKind::StatusRequest
                    | FrameKind::Leave
                    | FrameKind::SymbolState
                    | FrameKind::Reached
                    | FrameKind::Snapshot
                    | FrameKind::Saved
                    | FrameKind::DeliveryQuery
                    | FrameKind::Heartbeat
                    | FrameKind::InjectorHeartbeat)
            ) {
                let reason = format!("the run has not started: waiting for {}", self.waiting_for());
                self.control.count_refused("refused_control");
                return out.send(Peer::Client(client), &Refused { reason }.encode(ROUTER_ID));
            }
            return self.control.serve(client, caller_key, body, now, None, out);
        };
        let Ok(frame) = Frame::read(body, MAX_CONTROL_FRAME_BYTES) else {
            return self.control.serve(client, caller_key, body, now, Some(path), out);
        };
        if frame.kind().from_a_worker() {
            let worker = frame.sender() as usize;
            if rescaling.is_failed(worker) {
                // Taken for dead: whatever it asks is refused, and it learns why.
                *self.denied.entry("fenced".into()).or_insert(0) += 1;
                let reason =
                    self.fenced.get(&frame.sender()).cloned().unwrap_or_else(|| "its connection was lost".into());
                return out.send(Peer::Client(client), &Fenced { reason }.encode(ROUTER_ID));
            }
            heartbeats.heard(worker, now);
        }
        let answer = match frame.kind() {
            FrameKind::InjectorHeartbeat => {
                // No larger than one count per stream a run can have, before it is decoded.
                let bounded = body.len() <= MAX_INJECTOR_HEARTBEAT_BYTES;
                let beat = bounded.then(|| frame.body::<InjectorHeartbeat>().ok()).flatten().and_then(|beat| {
                    let streams = beat.first..beat.first.checked_add(u32::try_from(beat.sent.len()).ok()?)?;
                    path.owns_streams(streams.clone(), caller_key).then_some((streams, beat.sent))
                });
                let Some((streams, sent)) = beat else {
                    // Not answered (a heartbeat never is): counted and told.
                    self.control.count_refused("refused_control");
                    let reason = "an injector's heartbeat must name streams it registered".to_string();
                    return out.event(Event::Refused { who: "an InjectorHeartbeat".into(), reason });
                };
                if let Some(lost) = streams.clone().find_map(|stream| path.lost_streams().get(&stream)) {
                    // Taken for dead: its streams were ended without it, and it learns why.
                    *self.denied.entry("fenced".into()).or_insert(0) += 1;
                    let fenced = Fenced { reason: lost.reason.clone() };
                    return out.send(Peer::Client(client), &fenced.encode(ROUTER_ID));
                }
                heartbeats.heard_streams(streams.clone(), now);
                for (stream, count) in streams.clone().zip(sent) {
                    let heard = self.heard_sent.entry(stream).or_insert(0);
                    *heard = (*heard).max(count);
                }
                injector_links.insert(streams.start, client);
                return;
            }
            FrameKind::Heartbeat => {
                match frame.body::<Heartbeat>() {
                    Ok(beat) if beat.worker == frame.sender() => {
                        if beat.finished {
                            heartbeats.quiet(beat.worker as usize);
                        }
                    }
                    // Not answered (a heartbeat never is): counted and told.
                    Ok(_) | Err(_) => {
                        self.control.count_refused("refused_control");
                        let reason = "a heartbeat must name the worker that sends it".to_string();
                        out.event(Event::Refused { who: "a Heartbeat".into(), reason });
                    }
                }
                return;
            }
            FrameKind::Register => match frame.body::<Register>() {
                Ok(register) if register.role == Role::Worker => self.join(register, caller_key, now, out),
                Ok(register) if register.role == Role::Injector => {
                    self.open_streams(&client, register, caller_key, out)
                }
                Ok(register) if register.role == Role::Collector => self.collector_restarted(register, caller_key, out),
                _ => return self.control.serve(client, caller_key, body, now, Some(path), out),
            },
            FrameKind::SymbolState => frame
                .body::<SymbolState>()
                .map_err(|error| format!("bad state frame: {error}"))
                .and_then(|state| rescaling.state_arrived(frame.sender(), &state, path, out))
                .map(|()| StateTaken.encode(ROUTER_ID)),
            FrameKind::Leave => frame
                .body::<Leave>()
                .map_err(|error| format!("bad leave frame: {error}"))
                .and_then(|leave| self.leave(&leave.worker, out)),
            FrameKind::Reached => match frame.body::<Reached>() {
                Ok(reached) if reached.index == frame.sender() => rescaling.reached(reached.index).map(|()| {
                    rescaling.step(path, out);
                    StateTaken.encode(ROUTER_ID)
                }),
                Ok(_) => Err("a Reached frame must come from the worker it names".into()),
                Err(error) => Err(format!("bad reached frame: {error}")),
            },
            FrameKind::Snapshot => {
                frame.body::<Snapshot>().map_err(|error| format!("bad snapshot frame: {error}")).and_then(|snapshot| {
                    let (worker, id) = (snapshot.from as usize, snapshot.id);
                    if frame.sender() != snapshot.from {
                        return Err("a snapshot must come from the worker it names".into());
                    }
                    // A sender that is no member owes no snapshot: refused before anything.
                    let name = self.workers.get(worker).map(|w| w.id.clone()).ok_or("a snapshot from no worker")?;
                    let unstored = (!snapshot.unstored.is_empty()).then(|| not_stored(&name, id, &snapshot.unstored));
                    if let Some(confirmed) = self.checkpoints.snapshot(worker, &name, snapshot, now)? {
                        path.release_log(worker, confirmed);
                    }
                    if let Some(why) = unstored {
                        // Not restorable: the log is of no use, and must not stall the input.
                        path.release_log(worker, id);
                        let reason = format!("{why}: it cannot fail over exactly");
                        out.event(Event::CheckpointTrouble { reason });
                    }
                    Ok(StateTaken.encode(ROUTER_ID))
                })
            }
            FrameKind::Saved => {
                frame.body::<Saved>().map_err(|error| format!("bad saved frame: {error}")).map(|saved| {
                    heartbeats.heard_collector(now);
                    // Checkpoints whose outputs are saved may be restored from; their logs
                    // before the barrier go.
                    for confirmed in &saved.confirmed {
                        let worker = confirmed.worker as usize;
                        let taken = self.checkpoints.confirmed(worker, confirmed.id);
                        let released = if taken { path.release_log(worker, confirmed.id) } else { 0 };
                        tracing::debug!(
                            worker,
                            id = confirmed.id,
                            taken,
                            released,
                            left = path.replay_bytes(),
                            "outputs confirmed"
                        );
                    }
                    if let (Some(position), resend) = delivery.saved(&saved, self.workers.len()) {
                        out.collector_saved(position, resend);
                    }
                    // Each worker that asked learns what is committed of its frames now.
                    for (worker, committed) in delivery.changes() {
                        out.send(Peer::Client(worker), &committed.encode(ROUTER_ID));
                    }
                    StateTaken.encode(ROUTER_ID)
                })
            }
            FrameKind::DeliveryQuery => match frame.body::<DeliveryQuery>() {
                Ok(query) if query.worker == frame.sender() && (query.worker as usize) < self.workers.len() => {
                    Ok(delivery.subscribe(query.worker, client.clone()).encode(ROUTER_ID))
                }
                Ok(_) => Err("a delivery query must come from a worker of the run, naming itself".into()),
                Err(error) => Err(format!("bad delivery query: {error}")),
            },
            FrameKind::StatusRequest => {
                let status = rescaling.status(Some(path), now, self.settings.streams);
                Ok(status.encode(ROUTER_ID))
            }
            // An injector that joined is released as soon as its streams have ended at the
            // router (all it sent has arrived), not at the end of a run that may go on for days.
            FrameKind::AwaitEnd
                if self.late_injectors.iter().any(|(id, first, count)| {
                    *id == client && (*first..first + count).all(|s| path.ended().get(s as usize) == Some(&true))
                }) =>
            {
                self.control.asked_and_answered();
                Ok(EndAck.encode(ROUTER_ID))
            }
            FrameKind::Deploy if rescaling.busy() => {
                Err("a worker is joining or leaving; deploy again once the rescale has finished".into())
            }
            FrameKind::Deploy => {
                let epoch = self.control.deployments.current().epoch;
                self.control.serve(client, caller_key, body, now, Some(path), out);
                // The replay logs do not record a rule switch: every checkpoint is stale.
                if self.control.deployments.current().epoch != epoch {
                    self.checkpoints.invalidate();
                }
                return;
            }
            _ => return self.control.serve(client, caller_key, body, now, Some(path), out),
        };
        let answer = answer.unwrap_or_else(|reason| {
            self.control.count_refused("refused_control");
            out.event(Event::Refused { who: format!("a {:?} request", frame.kind()), reason: reason.clone() });
            Refused { reason }.encode(ROUTER_ID)
        });
        out.send(Peer::Client(client), &answer);
        self.count_retirements();
        self.note_rescaling();
    }

    /// The router's timer at `now`: gives up a move whose state is overdue, starts a
    /// checkpoint round when one is due, and fails over (and fences) every worker silent for
    /// the failure time-out (the driver calls it between turns of its loop). An error when no
    /// worker is left ([`Self::worker_lost`]).
    pub fn tick(&mut self, now: Monotonic, out: &mut impl Outbox) -> Result<(), String> {
        let mut silent = Silent::default();
        if let Phase::Running(Running { path, rescaling, heartbeats, .. }) = &mut self.phase {
            rescaling.tick(now, path, out);
            if rescaling.busy() {
                // State moving between workers is not in the replay logs.
                self.checkpoints.invalidate();
            } else {
                self.checkpoints.turn(now, path, rescaling, self.settings.max_replay_bytes, out);
            }
            silent = heartbeats.silent(now, |worker| rescaling.is_member(worker), |stream| !path.ended()[stream]);
        }
        self.count_retirements();
        // Workers first: once a stream has ended, a dead worker's state can no longer be
        // restored (the survivors may close windows it is part of).
        for (worker, quiet) in silent.workers {
            let reason = self.silence_reason(quiet);
            // Nothing more goes to it: its queue may be full and would hold the router up.
            out.disconnect_worker(worker as u32);
            self.worker_lost(worker as u32, &reason, out)?;
        }
        for (stream, quiet) in silent.streams {
            self.stream_lost(stream, &self.silence_reason(quiet), out);
        }
        Ok(())
    }

    /// Whether the router may read more input: false while too many ticks are held for
    /// moving symbols (the injectors then wait: lossless back-pressure).
    pub fn accepting_input(&self) -> bool {
        self.running().is_none_or(|Running { path, .. }| {
            // Once the input ended no checkpoint comes to release the logs; nothing more
            // comes in either.
            let replay_full = self.checkpoints.enabled()
                && !path.input_ended()
                && path.replay_bytes() >= self.settings.max_replay_bytes;
            path.held_ticks() < self.settings.max_held_ticks && !replay_full
        })
    }

    /// Whether a worker is joining or leaving (the driver then serves control requests at
    /// every turn: the state of moving symbols arrives there).
    pub fn rescaling(&self) -> bool {
        self.running().is_some_and(|run| run.rescaling.busy())
    }

    /// Why the collector is taken for lost, when the router has heard nothing from it (it tells
    /// what it saved at least every quarter of the failure time-out) for longer than that
    /// time-out at its last timer turn: stopped, paused or stuck, whatever its connection says.
    pub fn collector_silent(&self) -> Option<String> {
        let silent = self.running()?.heartbeats.collector_silent()?;
        Some(self.silence_reason(silent))
    }

    /// Why a peer silent for `silent` is taken for dead, whatever its connection says.
    fn silence_reason(&self, silent: Duration) -> String {
        format!(
            "nothing heard from it for {silent:.2?}, beyond the failure time-out of {:?}: stopped, paused or stuck",
            self.settings.failure_timeout
        )
    }

    /// Whether worker `worker` (by index) is a member the run counts on: started, not gone,
    /// not taken for dead.
    pub fn is_member(&self, worker: usize) -> bool {
        self.running().is_some_and(|run| run.rescaling.is_member(worker))
    }

    /// Whether worker `worker` (by index) is active: on the ring, neither joining nor leaving.
    pub fn is_active(&self, worker: usize) -> bool {
        self.running().is_some_and(|run| run.rescaling.is_active(worker))
    }

    /// Every stored part a failover of an active worker would restore from now (what the
    /// checkpoint store must still hold).
    pub fn restorable_parts(&self) -> Vec<Snapshot> {
        let Some(run) = self.running() else { return Vec::new() };
        let active = run.rescaling.active();
        let chains = active.into_iter().filter_map(|worker| self.checkpoints.restorable(worker).flatten());
        chains.flatten().collect()
    }

    /// The running phase's state, once the run has started.
    fn running(&self) -> Option<&Running> {
        match &self.phase {
            Phase::Running(run) => Some(run),
            Phase::Gathering => None,
        }
    }

    /// Whether the run can start at `now`: every expected process has registered.
    pub fn can_start(&self, now: Monotonic) -> bool {
        matches!(self.phase, Phase::Gathering) && self.control.rendezvous.is_complete(now)
    }

    /// The collector's clock endpoint (empty if it serves none) and CURVE key (empty when
    /// open), once it has registered.
    pub fn collector_clock(&self) -> Option<(&str, &str)> {
        self.control.rendezvous.collector_clock()
    }

    /// What is still missing before the start, for the log.
    pub fn waiting_for(&self) -> String {
        self.control.rendezvous.waiting_for()
    }

    /// Who has registered: (workers, whether the collector has, injector streams).
    pub fn registered(&self) -> (usize, bool, u32) {
        self.control.rendezvous.registered()
    }

    /// Starts the run (once [`Self::can_start`]): injectors start sending at `start_ns`. The
    /// answers wait for [`Self::announce`], after the driver has connected to the peers.
    pub fn start(&mut self, start_ns: u64) -> Start {
        let start = self.control.rendezvous.start(
            start_ns,
            self.control.deployments.current(),
            self.settings.allowed_lateness_ns,
            self.settings.failure_timeout.as_nanos() as u64,
        );
        // The workers (the first answers) are told the store; no other role needs to know it.
        let mut start = start;
        for (_, ready) in start.answers.iter_mut().take(start.workers.len()) {
            ready.checkpoint_dir.clone_from(&self.settings.checkpoint_dir);
        }
        self.workers = start.workers.clone();
        let ids = self.worker_ids();
        let rescaling = Rescaling::new(
            &ids,
            self.settings.slice_symbols,
            self.settings.vnodes,
            Duration::from_nanos(self.settings.move_timeout_ns),
        );
        let joiner_ready = start.answers.first().map(|(_, ready)| ready.clone());
        let delivery = CollectorDelivery::new(start.collector.clone(), start_ns);
        let mut path = DataPath::new(
            &ids,
            self.settings.vnodes,
            self.settings.streams,
            self.settings.batch,
            self.settings.max_frame_bytes,
        );
        self.checkpoints = Checkpoints::new(
            ids.len(),
            Duration::from_nanos(self.settings.checkpoint_every_ns),
            Duration::from_nanos(self.settings.move_timeout_ns),
            self.settings.checkpoints_retained,
        );
        if self.checkpoints.enabled() {
            path.keep_replay_logs();
        }
        path.bind_streams(0, &start.stream_keys);
        let heartbeats = Heartbeats::new(ids.len(), self.settings.streams, self.settings.failure_timeout);
        let injector_links = BTreeMap::new();
        self.phase = Phase::Running(Running { path, rescaling, joiner_ready, delivery, heartbeats, injector_links });
        self.answers = start.answers;
        self.collector_key.clone_from(&start.collector_key);
        Start { workers: start.workers, collector: start.collector, collector_key: start.collector_key }
    }

    /// Tells the collector this host's clock offset (if measured), then answers every
    /// registered process: the run starts.
    pub fn announce(&mut self, clock: Option<OffsetEstimate>, out: &mut impl Outbox) {
        if let Some(estimate) = clock {
            out.send(Peer::Collector, &ClockReport { node: "router".into(), estimate }.encode(ROUTER_ID));
        }
        for (client, ready) in self.answers.drain(..) {
            out.send(Peer::Client(client), &ready.encode(ROUTER_ID));
        }
    }

    /// The run's workers by index: those it started with in ring order, then those that
    /// joined (empty before the start).
    pub fn worker_ids(&self) -> Vec<String> {
        self.workers.iter().map(|w| w.id.clone()).collect()
    }

    /// Handles one data frame from an injector, received at `now` (a wall-clock stamp, in the
    /// collector's time: the router's stamp on each tick). Frames before the start
    /// cannot arrive: no injector knows the start before the answers go out.
    pub fn data(&mut self, bytes: &[u8], now: u64, out: &mut impl Outbox) {
        self.data_from(bytes, None, now, out);
    }

    /// [`Self::data`] from `sender` on a secure socket: a stream's ticks and end marker are
    /// taken only from the key that registered it.
    pub fn data_from(&mut self, bytes: &[u8], sender: Option<Sender<'_>>, now: u64, out: &mut impl Outbox) {
        if let Phase::Running(Running { path, .. }) = &mut self.phase {
            path.handle(bytes, sender.map(|sender| sender.key()), now, out);
        }
    }

    /// Sends every batch that holds ticks: at the end of the driver's reading turn (nothing
    /// more queued, the turn's frames taken, or input held).
    pub fn flush(&mut self, out: &mut impl Outbox) {
        if let Phase::Running(Running { path, .. }) = &mut self.phase {
            path.flush_all(out);
        }
    }

    /// Whether every stream has ended.
    pub fn all_ended(&self) -> bool {
        self.running().is_some_and(|run| run.path.all_ended())
    }

    /// Whether the collector said it has everything: the nodes may be released.
    pub fn collector_finished(&self) -> bool {
        self.control.collector_finished()
    }

    /// Whether every worker and injector has asked to be told the end (and was answered, once
    /// the collector finished).
    pub fn every_node_asked(&self) -> bool {
        self.control.every_node_asked()
    }

    /// Answers every node still waiting for the end of the run.
    pub fn release(&mut self, out: &mut impl Outbox) {
        self.control.release(out);
    }

    /// The rules the run started with and every deployment since, with its switch points.
    pub fn rules_history(&self) -> &[cep_core::results::RulesEpoch] {
        self.control.deployments.history()
    }

    /// The router's accounting so far.
    pub fn report(&self) -> RouterReport {
        let run = self.running();
        let path = run.map(|run| &run.path);
        RouterReport {
            received: path
                .map(|p| p.received().iter().enumerate().map(|(stream, count)| (stream as u32, *count)).collect())
                .unwrap_or_default(),
            rules: self.control.deployments.history().to_vec(),
            routed: path.map_or(0, DataPath::routed_total),
            rejected: self.rejected(),
            workers: run.map(|run| run.rescaling.reported_ids()).unwrap_or_default(),
            failed: run.map(|run| run.rescaling.failed()).unwrap_or_default(),
            lost_streams: path.map(|p| p.lost_streams().clone()).unwrap_or_default(),
            cut_streams: path.map(|p| p.cut_streams().clone()).unwrap_or_default(),
            checkpoints: self.checkpoints.summary().clone(),
        }
    }

    /// Sends what has entered the cluster so far, as it holds at `now` (reference ns), to the
    /// collector, for its progress lines (while it runs, until its report).
    pub fn progress(&self, now: u64, out: &mut impl Outbox) {
        if let Some(Running { path, .. }) = self.running().filter(|_| !self.report_sent) {
            let progress = RouterProgress { at_ns: now, received: path.received().iter().sum() };
            out.send(Peer::Collector, &progress.encode(ROUTER_ID));
        }
    }

    /// Sends the report to the collector (the first call only) and returns it. Call it once
    /// nothing is batched: after
    /// every stream ended (each end marker flushes what came before it) or after [`Self::flush`].
    pub fn finish(&mut self, out: &mut impl Outbox) -> RouterReport {
        let report = self.report();
        if self.running().is_some() && !std::mem::replace(&mut self.report_sent, true) {
            out.send(Peer::Collector, &report.encode(ROUTER_ID));
        }
        report
    }

    /// Every frame, request and connection rejected so far, by cause: the data path's, the
    /// control requests refused, and the connections the authentication refused.
    fn rejected(&self) -> CauseCounts {
        let mut rejected = self.running().map(|run| run.path.rejections().counts().clone()).unwrap_or_default();
        for (cause, count) in self.denied.iter().chain(&self.control.refused) {
            *rejected.entry(cause.clone()).or_insert(0) += count;
        }
        rejected
    }

    /// Copies the counters to the metrics (the driver calls it every 50 ms and at the end);
    /// before the start only the rejections, which strangers can already cause.
    pub fn publish(&self, metrics: &crate::metrics::RouterMetrics) {
        let rejected = self.rejected();
        match self.running() {
            Some(Running { path, rescaling, .. }) => {
                let epoch = self.control.deployments.current().epoch;
                let membership = rescaling.membership(path);
                metrics.observe(path.received(), path.ended(), &rejected, epoch, membership);
                metrics.observe_checkpoints(self.checkpoints.summary());
            }
            None => metrics.observe_rejections(&rejected),
        }
    }
}

mod losses;
mod membership;

#[cfg(test)]
pub(crate) mod tests;
