//! The router's core: a state machine over the run's three phases. Until the cluster is
//! complete it gathers registrations ([`Control`]); then the data path routes ticks
//! ([`DataPath`]); once every stream has ended it reports to the collector and waits for the
//! collector to have everything before releasing the nodes. It owns no socket and reads no
//! clock: the driver ([`crate::driver`]) feeds it frames with their arrival time and sends
//! what it puts in the [`Outbox`].

use crate::control::{ClientId, Control};
use crate::data_path::DataPath;
use crate::delivery::CollectorDelivery;
use crate::deploying::Deployments;
use crate::failover::Checkpoints;
use crate::rendezvous::{Rendezvous, WorkerCount};
use crate::rescaling::Rescaling;
use cep_core::clock::OffsetEstimate;
use cep_core::control::{Ready, Refused, Register, WorkerInfo, MAX_CONTROL_FRAME_BYTES};
use cep_core::delivery::{DeliveryQuery, Saved};
use cep_core::failover::{OutputsConfirmed, Snapshot, WorkerFailed};
use cep_core::frame::{Body, EndAck, Frame};
use cep_core::identity::{Identity, Role, Sender, ROUTER_ID, SHARED_WORKER_KEY};
use cep_core::outbox::{Event, Outbox, Peer};
use cep_core::report::{CauseCounts, ClockReport, RouterReport};
use cep_core::rescale::{Leave, Reached, RescaleAccepted, StateTaken, SymbolState, Welcome, WorkerJoined, MAX_STREAMS};
use cep_core::wire::FrameKind;
use std::collections::BTreeMap;

/// A joining worker's advertised endpoint must be one the router can connect to
/// (`tcp://host:port`, `ipc://path`, `inproc://name`): a bad one is refused, not fatal.
fn check_endpoint(endpoint: &str) -> Result<(), String> {
    let bad =
        || format!("the advertised data endpoint `{endpoint}` is not tcp://HOST:PORT, ipc://PATH or inproc://NAME");
    match endpoint.split_once("://") {
        Some(("tcp", address)) => match address.rsplit_once(':') {
            Some((host, port)) if valid_host(host) && port.parse::<u16>().is_ok_and(|port| port > 0) => Ok(()),
            _ => Err(bad()),
        },
        Some(("ipc" | "inproc", name)) if !name.is_empty() => Ok(()),
        _ => Err(bad()),
    }
}

/// A host name, an IPv4 address, or an IPv6 address in brackets.
fn valid_host(host: &str) -> bool {
    match host.strip_prefix('[').and_then(|rest| rest.strip_suffix(']')) {
        Some(v6) => !v6.is_empty() && v6.chars().all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.'),
        None => {
            !host.is_empty()
                && host.len() <= 253
                && host.chars().all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_')
        }
    }
}

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
    /// Bytes of replay logs beyond which the router reads no input until a checkpoint
    /// completes.
    pub max_replay_bytes: usize,
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

/// One run of the router.
pub struct Router {
    settings: RouterSettings,
    control: Control,
    path: Option<DataPath>,
    answers: Vec<(ClientId, Ready)>,
    /// The membership once the run started, and the rescale in progress.
    rescaling: Option<Rescaling>,
    /// What a worker that joins later is told (its index and the members filled in).
    joiner_ready: Option<Ready>,
    /// Injectors that joined the running cluster: (client, first stream, streams).
    late_injectors: Vec<(ClientId, u32, u32)>,
    workers: Vec<WorkerInfo>,
    checkpoints: Checkpoints,
    /// The collector serving the run (restarted ones take over).
    delivery: Option<CollectorDelivery>,
    /// The run's collector's CURVE key (empty when open): one that resumes must hold it.
    collector_key: String,
    /// The CURVE key of the request being served (empty when open).
    caller_key: String,
    /// Control requests refused for who sent them, and connections the authentication refused,
    /// by cause: reported with the data path's rejections.
    denied: BTreeMap<String, u64>,
}

impl Router {
    /// A router waiting for the cluster `settings` describes, starting with `deployments`.
    pub fn new(settings: RouterSettings, deployments: Deployments) -> Self {
        let rendezvous = Rendezvous::new(settings.workers, settings.streams);
        Router {
            control: Control::new(rendezvous, deployments),
            settings,
            path: None,
            answers: Vec::new(),
            rescaling: None,
            joiner_ready: None,
            late_injectors: Vec::new(),
            workers: Vec::new(),
            checkpoints: Checkpoints::new(0, 0, 0),
            delivery: None,
            collector_key: String::new(),
            caller_key: String::new(),
            denied: BTreeMap::new(),
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
        now: u64,
        out: &mut impl Outbox,
    ) {
        if let Some(peer) = peer {
            if let Err(reason) = self.authorize(peer, body) {
                *self.denied.entry("unauthorized_control".into()).or_insert(0) += 1;
                out.event(Event::Refused { who: format!("a request from {peer}"), reason: reason.clone() });
                return out.send(Peer::Client(client), &Refused { reason }.encode(ROUTER_ID));
            }
        }
        self.caller_key = peer.map(|peer| peer.key.as_str().to_string()).unwrap_or_default();
        self.serve_control(client, body, now, out);
    }

    /// Whether `peer` may send `body`: its roles, and for frames a worker or the collector
    /// sends about itself, whether it is that worker or that collector. Frames that do not
    /// decode pass here and are refused where they are read.
    fn authorize(&self, peer: &Identity, body: &[u8]) -> Result<(), String> {
        let Ok(frame) = Frame::read(body, MAX_CONTROL_FRAME_BYTES) else { return Ok(()) };
        let kind = frame.kind();
        let needs = |role: Role| match peer.is(role) {
            true => Ok(()),
            false => Err(format!("{peer} may not send {kind:?}: its key is not listed under {}/", role.name())),
        };
        let worker_key = |index: u32| self.workers.get(index as usize).map(|worker| worker.key.as_str());
        let is_worker = |index: u32| match worker_key(index) {
            Some(key) if key == peer.key.as_str() => Ok(()),
            _ => Err(format!("{peer} is not worker {index}, which this {kind:?} names")),
        };
        match kind {
            FrameKind::Register => {
                let register = frame.body::<Register>().map_err(|error| format!("bad registration frame: {error}"))?;
                needs(register.role)?;
                // A worker's own key names it; only the workers' shared key takes any id.
                match register.role == Role::Worker && peer.name != SHARED_WORKER_KEY && peer.name != register.id {
                    true => Err(format!(
                        "{peer} may register only as worker `{}`, not `{}` (a worker's own key names it; only the \
                         shared `{SHARED_WORKER_KEY}` key takes any id)",
                        peer.name, register.id
                    )),
                    false => Ok(()),
                }
            }
            FrameKind::Deploy | FrameKind::StatusRequest => needs(Role::Operator),
            FrameKind::Leave if peer.is(Role::Operator) => Ok(()),
            FrameKind::Leave => {
                needs(Role::Worker)?;
                let leave = frame.body::<Leave>().map_err(|error| format!("bad leave frame: {error}"))?;
                match self.workers.iter().find(|worker| worker.id == leave.worker) {
                    Some(worker) if worker.key == peer.key.as_str() => Ok(()),
                    _ => Err(format!("{peer} may ask only itself to leave, not `{}`", leave.worker)),
                }
            }
            FrameKind::SymbolState | FrameKind::Reached | FrameKind::Snapshot | FrameKind::DeliveryQuery => {
                needs(Role::Worker)?;
                is_worker(frame.sender())
            }
            FrameKind::OutputsConfirmed | FrameKind::Saved | FrameKind::RunFinished => {
                needs(Role::Collector)?;
                match self.collector_key.as_str() {
                    "" => Ok(()),
                    key if key == peer.key.as_str() => Ok(()),
                    _ => Err(format!("{peer} is not the run's collector")),
                }
            }
            FrameKind::AwaitEnd if peer.is(Role::Worker) || peer.is(Role::Injector) => Ok(()),
            FrameKind::AwaitEnd => needs(Role::Injector),
            _ => Ok(()),
        }
    }

    /// Connections the authentication refused so far, by cause ([`cep_transport::Context::refusals`]):
    /// reported with the rejections.
    pub fn refused_connections(&mut self, refusals: &BTreeMap<String, u64>) {
        self.denied.extend(refusals.iter().map(|(cause, count)| (cause.clone(), *count)));
    }

    /// Handles one control request received at `now` (any phase): a monotonic time in ns,
    /// which only the settle timer of `--workers 0` reads.
    pub fn control(&mut self, client: ClientId, body: &[u8], now: u64, out: &mut impl Outbox) {
        self.caller_key.clear();
        self.serve_control(client, body, now, out);
    }

    fn serve_control(&mut self, client: ClientId, body: &[u8], now: u64, out: &mut impl Outbox) {
        let (Some(path), Some(rescaling)) = (self.path.as_mut(), self.rescaling.as_mut()) else {
            let kind = Frame::read(body, MAX_CONTROL_FRAME_BYTES).map(|frame| frame.kind());
            if matches!(
                kind,
                Ok(FrameKind::StatusRequest
                    | FrameKind::Leave
                    | FrameKind::SymbolState
                    | FrameKind::Reached
                    | FrameKind::Snapshot
                    | FrameKind::OutputsConfirmed
                    | FrameKind::Saved
                    | FrameKind::DeliveryQuery)
            ) {
                let reason = format!("the run has not started: waiting for {}", self.waiting_for());
                self.control.count_refused("refused_control");
                return out.send(Peer::Client(client), &Refused { reason }.encode(ROUTER_ID));
            }
            return self.control.serve(client, &self.caller_key, body, now, self.path.as_mut(), out);
        };
        let Ok(frame) = Frame::read(body, MAX_CONTROL_FRAME_BYTES) else {
            return self.control.serve(client, &self.caller_key, body, now, Some(path), out);
        };
        let answer = match frame.kind() {
            FrameKind::Register => match frame.body::<Register>() {
                Ok(register) if register.role == Role::Worker => self.join(register, now, out),
                Ok(register) if register.role == Role::Injector => self.open_streams(&client, register, out),
                Ok(register) if register.role == Role::Collector => self.collector_restarted(register, out),
                _ => return self.control.serve(client, &self.caller_key, body, now, Some(path), out),
            },
            FrameKind::SymbolState => frame
                .body::<SymbolState>()
                .map_err(|error| format!("bad state frame: {error}"))
                .and_then(|state| rescaling.state_arrived(frame.sender(), &state, body, path, out))
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
                    let (worker, id, oversize) = (snapshot.from as usize, snapshot.id, snapshot.oversize);
                    if frame.sender() != snapshot.from {
                        return Err("a snapshot must come from the worker it names".into());
                    }
                    if let Some(confirmed) = self.checkpoints.snapshot(worker, snapshot)? {
                        path.release_log(worker, confirmed);
                    }
                    if oversize > 0 {
                        // Not restorable: the log is of no use, and must not stall the input.
                        path.release_log(worker, id);
                        let reason = format!(
                            "worker {}'s state takes {oversize} bytes, more than a control frame carries \
                             ({MAX_CONTROL_FRAME_BYTES}): it cannot fail over exactly",
                            rescaling.id(worker)
                        );
                        out.event(Event::CheckpointTrouble { reason });
                    }
                    Ok(StateTaken.encode(ROUTER_ID))
                })
            }
            FrameKind::OutputsConfirmed => frame
                .body::<OutputsConfirmed>()
                .map_err(|error| format!("bad confirmation frame: {error}"))
                .map(|confirmed| {
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
                    StateTaken.encode(ROUTER_ID)
                }),
            FrameKind::Saved => {
                frame.body::<Saved>().map_err(|error| format!("bad saved frame: {error}")).map(|saved| {
                    let delivery = self.delivery.as_mut().expect("running");
                    if let (Some(position), resend) = delivery.saved(&saved, self.workers.len()) {
                        out.collector_saved(position, resend);
                    }
                    StateTaken.encode(ROUTER_ID)
                })
            }
            FrameKind::DeliveryQuery => match frame.body::<DeliveryQuery>() {
                Ok(query) if query.worker == frame.sender() && (query.worker as usize) < self.workers.len() => {
                    Ok(self.delivery.as_mut().expect("running").status(query.worker).encode(ROUTER_ID))
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
                self.control.serve(client, &self.caller_key, body, now, Some(path), out);
                // The replay logs do not record a rule switch: every checkpoint is stale.
                if self.control.deployments.current().epoch != epoch {
                    self.checkpoints.invalidate();
                }
                return;
            }
            _ => return self.control.serve(client, &self.caller_key, body, now, Some(path), out),
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

    /// A collector registers while the run goes on: a restarted one resuming this run takes
    /// over (its answer is the run's Ready, with its incarnation); frames to the collector go
    /// to it from now on, and workers learn of it when they next ask.
    fn collector_restarted(&mut self, register: Register, out: &mut impl Outbox) -> Result<Vec<u8>, String> {
        let delivery = self.delivery.as_mut().expect("running");
        check_endpoint(&register.endpoint)?;
        if self.collector_key != self.caller_key {
            return Err("a collector that resumes the run must hold the key of the one it replaces".into());
        }
        let incarnation = delivery.take_over(&register)?;
        let ready = self.joiner_ready.as_mut().expect("running");
        ready.collector.clone_from(&register.endpoint);
        ready.collector_clock.clone_from(&register.clock_endpoint);
        ready.collector_incarnation = incarnation;
        let mut answer = ready.clone();
        answer.assigned = 0;
        answer.workers = self.workers.clone();
        answer.rules = self.control.deployments.current().clone();
        out.event(Event::Registered {
            who: format!("collector {} at {} (incarnation {incarnation})", register.id, register.endpoint),
            waiting_for: "nothing: it resumes from its saved state, and every sender sends it what it had not saved"
                .into(),
        });
        out.collector_moved(&register.endpoint, &self.collector_key, incarnation);
        Ok(answer.encode(ROUTER_ID))
    }

    /// State moving between workers is not in the replay logs: once a rescale starts, no
    /// checkpoint is current until the next one after it.
    fn note_rescaling(&mut self) {
        if self.rescaling.as_ref().is_some_and(Rescaling::busy) {
            self.checkpoints.invalidate();
        }
    }

    /// Workers that retired will not ask for the end of the run.
    fn count_retirements(&mut self) {
        let retired = self.rescaling.as_mut().map_or(0, Rescaling::take_retired);
        for _ in 0..retired {
            self.control.node_retiring();
        }
    }

    /// A worker registered while the run goes on: it joins, and its share of the symbols
    /// moves to it.
    fn join(&mut self, register: Register, now: u64, out: &mut impl Outbox) -> Result<Vec<u8>, String> {
        let (path, rescaling) = (self.path.as_mut().expect("running"), self.rescaling.as_mut().expect("running"));
        if path.input_ended() {
            return Err("every stream has ended: there is nothing left to take a share of".into());
        }
        check_endpoint(&register.endpoint)?;
        rescaling.join(&register.id, now)?;
        let index = self.workers.len();
        let key = self.caller_key.clone();
        // Before the worker is answered, so ahead of anything it sends the collector (which
        // holds that index's frames until it knows the key, should they come first).
        let joined = WorkerJoined { index: index as u32, id: register.id.clone(), key: key.clone() };
        out.send(Peer::Collector, &joined.encode(ROUTER_ID));
        self.workers.push(WorkerInfo { id: register.id.clone(), endpoint: register.endpoint.clone(), key });
        out.connect_worker(index as u32, &register.endpoint, &self.caller_key);
        // First on its socket: the Welcome it must answer before anything is routed to it.
        out.send(Peer::Worker(index as u32), &Welcome { index: index as u32 }.encode(ROUTER_ID));
        let added = path.add_worker(out);
        debug_assert_eq!(added, index);
        self.checkpoints.add_worker();
        self.control.node_joined();
        let mut ready = self.joiner_ready.clone().expect("running");
        ready.assigned = index as u32;
        ready.workers = self.workers.clone();
        ready.rules = self.control.deployments.current().clone();
        ready.joining = true;
        out.event(Event::Registered {
            who: format!("worker {} at {}", register.id, register.endpoint),
            waiting_for: "its answer to the Welcome on its data socket, then it joins the running cluster".into(),
        });
        Ok(ready.encode(ROUTER_ID))
    }

    /// An injector registered while the run goes on: its streams open (every worker is told,
    /// ahead of their ticks) and it starts at once.
    fn open_streams(&mut self, client: &[u8], register: Register, out: &mut impl Outbox) -> Result<Vec<u8>, String> {
        let path = self.path.as_mut().expect("running");
        if path.input_ended() {
            return Err("every stream has ended: the run is finishing".into());
        }
        if register.streams == 0 || path.streams().saturating_add(register.streams) > MAX_STREAMS {
            return Err(format!(
                "{} more streams: a run takes 1 to {MAX_STREAMS} streams in all (it has {})",
                register.streams,
                path.streams()
            ));
        }
        let first = path.add_streams(register.streams, out);
        path.bind_streams(first, &vec![self.caller_key.clone(); register.streams as usize]);
        self.late_injectors.push((client.to_vec(), first, register.streams));
        self.settings.streams = path.streams();
        self.control.node_joined();
        let ready = self.joiner_ready.as_mut().expect("running");
        ready.streams = self.settings.streams;
        let ready = Ready {
            assigned: first,
            workers: self.workers.clone(),
            rules: self.control.deployments.current().clone(),
            // Time for its clock samples, as at the start.
            start_ns: out.now() + LATE_START_DELAY_NS,
            ..ready.clone()
        };
        out.event(Event::Registered {
            who: format!("injector {} with streams {first}..{}", register.id, first + register.streams),
            waiting_for: "nothing: its streams join the running cluster".into(),
        });
        Ok(ready.encode(ROUTER_ID))
    }

    /// Asks a worker to leave: its symbols move to the others, then it retires.
    fn leave(&mut self, worker: &str, out: &mut impl Outbox) -> Result<Vec<u8>, String> {
        let (path, rescaling) = (self.path.as_mut().expect("running"), self.rescaling.as_mut().expect("running"));
        if path.input_ended() {
            return Err("every stream has ended: the run is finishing".into());
        }
        let index = rescaling.leave(worker)?;
        let symbols = path.owned().get(index).copied().unwrap_or(0);
        rescaling.step(path, out);
        Ok(RescaleAccepted { symbols, slices: symbols.div_ceil(self.settings.slice_symbols.max(1) as u64) as u32 }
            .encode(ROUTER_ID))
    }

    /// Gives up a move whose state is overdue at `now` (monotonic ns; the driver calls it
    /// between frames).
    pub fn tick(&mut self, now: u64, out: &mut impl Outbox) {
        if let (Some(path), Some(rescaling)) = (self.path.as_mut(), self.rescaling.as_mut()) {
            rescaling.tick(now, path, out);
            if rescaling.busy() {
                // State moving between workers is not in the replay logs.
                self.checkpoints.invalidate();
            } else {
                self.checkpoint(now, out);
            }
        }
        self.count_retirements();
    }

    /// Starts a checkpoint round when one is due (or the replay logs are full), and gives up
    /// one whose snapshots are overdue.
    fn checkpoint(&mut self, now: u64, out: &mut impl Outbox) {
        let (Some(path), Some(rescaling)) = (self.path.as_mut(), self.rescaling.as_ref()) else { return };
        if let Some((id, silent)) = self.checkpoints.overdue(now) {
            let full = path.replay_bytes() >= self.settings.max_replay_bytes;
            let names: Vec<&str> = silent.iter().map(|worker| rescaling.id(*worker)).collect();
            out.event(Event::CheckpointTrouble {
                reason: format!(
                    "checkpoint {id} given up: no snapshot from {}{}",
                    names.join(", "),
                    if full { "; their replay logs are full and dropped: they cannot fail over exactly until the next checkpoint" } else { "" }
                ),
            });
            if full {
                for worker in silent {
                    path.drop_log(worker);
                    self.checkpoints.forget(worker);
                }
            }
        }
        let full = path.replay_bytes() >= self.settings.max_replay_bytes;
        if !self.checkpoints.due(now, full) || path.input_ended() {
            return;
        }
        let workers = rescaling.active();
        let id = self.checkpoints.start_round(workers.clone(), now);
        for worker in workers {
            path.barrier(worker, id, self.checkpoints.base(worker), out);
        }
    }

    /// Worker `worker` is dead (`reason`): its symbols go to the others, restored from its
    /// last checkpoint and replayed when that is current, from empty state otherwise; the
    /// collector is told first. An error when no worker is left to take them.
    pub fn worker_lost(&mut self, worker: u32, reason: &str, out: &mut impl Outbox) -> Result<(), String> {
        let (Some(path), Some(rescaling)) = (self.path.as_mut(), self.rescaling.as_mut()) else { return Ok(()) };
        let worker = worker as usize;
        let why = format!("because worker {} died ({reason})", self.workers.get(worker).map_or("?", |w| &w.id));
        // Its state is known only if no stream ended (survivors may have closed it) and no
        // rescale or rule switch since its snapshot.
        let restore = if path.any_ended() || rescaling.busy() { None } else { self.checkpoints.restorable(worker) };
        // What the collector is told when nothing could be moved or restored.
        let unrecovered = WorkerFailed {
            worker: rescaling.id(worker).to_string(),
            index: worker as u32,
            reason: reason.to_string(),
            detected_ns: out.now(),
            recovered: false,
            checkpoint: 0,
            processed: Default::default(),
            outputs: 0,
            replayed: 0,
            moved: Vec::new(),
            state_lost: Vec::new(),
        };
        let failed = match rescaling.fail(worker, &why, path, out) {
            Ok(failed) => failed,
            Err(reason) => {
                // No worker left: the collector is told what was lost, and the run ends.
                let record = WorkerFailed { reason: format!("{reason} ({why})"), ..unrecovered };
                out.send(Peer::Collector, &record.encode(ROUTER_ID));
                return Err(reason);
            }
        };
        if !failed {
            return Ok(());
        }
        // The survivors' snapshots do not hold what they take now, nor do their logs: no
        // snapshot is current until the next round, which starts at once.
        self.checkpoints.invalidate();
        self.checkpoints.due_now();
        let moved = path.reassign(worker, out);
        // Every part carries the counts at its barrier: the last, the newest snapshot's.
        let snapshot = restore.as_ref().and_then(Option::as_ref).and_then(|parts| parts.last());
        let record = WorkerFailed {
            recovered: restore.is_some(),
            checkpoint: snapshot.map_or(0, |s| s.id),
            processed: snapshot.map(|s| s.processed.clone()).unwrap_or_default(),
            outputs: snapshot.map_or(0, |s| s.outputs),
            replayed: if restore.is_some() { path.logged_ticks(worker) } else { 0 },
            state_lost: if restore.is_some() { Vec::new() } else { moved.iter().map(|(s, _, _)| s.clone()).collect() },
            moved,
            ..unrecovered
        };
        // Before any replayed output can exist.
        out.send(Peer::Collector, &record.encode(ROUTER_ID));
        let replayed = match &restore {
            Some(parts) => path.replay(worker, parts.as_deref().unwrap_or_default(), &record.moved, out),
            None => {
                path.drop_log(worker);
                0
            }
        };
        out.event(Event::WorkerFailed {
            worker: record.worker,
            reason: reason.to_string(),
            symbols: record.moved.len() as u64,
            recovered: record.recovered,
            replayed,
        });
        rescaling.step(path, out);
        self.count_retirements();
        self.note_rescaling();
        Ok(())
    }

    /// Whether the router may read more input: false while too many ticks are held for
    /// moving symbols (the injectors then wait: lossless back-pressure).
    pub fn accepting_input(&self) -> bool {
        self.path.as_ref().is_none_or(|path| {
            // Once the input ended no checkpoint comes to release the logs; nothing more
            // comes in either.
            let replay_full = self.checkpoints.enabled()
                && !path.input_ended()
                && path.replay_bytes() >= self.settings.max_replay_bytes;
            path.held_ticks() < self.settings.max_held_ticks && !replay_full
        })
    }

    /// Whether a worker is joining or leaving (the driver then serves control requests
    /// between every frame: the state of moving symbols arrives there).
    pub fn rescaling(&self) -> bool {
        self.rescaling.as_ref().is_some_and(Rescaling::busy)
    }

    /// Whether the run can start at `now` (monotonic ns): every expected process has
    /// registered.
    pub fn can_start(&self, now: u64) -> bool {
        self.path.is_none() && self.control.rendezvous.is_complete(now)
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
        );
        self.workers = start.workers.clone();
        let ids = self.worker_ids();
        self.rescaling = Some(Rescaling::new(
            &ids,
            self.settings.slice_symbols,
            self.settings.vnodes,
            self.settings.move_timeout_ns,
        ));
        self.joiner_ready = start.answers.first().map(|(_, ready)| ready.clone());
        self.delivery = Some(CollectorDelivery::new(start.collector.clone(), start_ns));
        let mut path = DataPath::new(
            &ids,
            self.settings.vnodes,
            self.settings.streams,
            self.settings.batch,
            self.settings.max_frame_bytes,
        );
        self.checkpoints =
            Checkpoints::new(ids.len(), self.settings.checkpoint_every_ns, self.settings.move_timeout_ns);
        if self.checkpoints.enabled() {
            path.keep_replay_logs();
        }
        path.bind_streams(0, &start.stream_keys);
        self.path = Some(path);
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

    /// Handles one data frame from an injector, received at `now`. Frames before the start
    /// cannot arrive: no injector knows the start before the answers go out.
    pub fn data(&mut self, bytes: &[u8], now: u64, out: &mut impl Outbox) {
        self.data_from(bytes, None, now, out);
    }

    /// [`Self::data`] from `sender` on a secure socket: a stream's ticks and end marker are
    /// taken only from the key that registered it.
    pub fn data_from(&mut self, bytes: &[u8], sender: Option<Sender<'_>>, now: u64, out: &mut impl Outbox) {
        if let Some(path) = self.path.as_mut() {
            path.handle(bytes, sender.map(|sender| sender.key()), now, out);
        }
    }

    /// Sends every batch that holds ticks: nothing more is waiting.
    pub fn flush(&mut self, out: &mut impl Outbox) {
        if let Some(path) = self.path.as_mut() {
            path.flush_all(out);
        }
    }

    /// Whether every stream has ended.
    pub fn all_ended(&self) -> bool {
        self.path.as_ref().is_some_and(DataPath::all_ended)
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

    /// The router's accounting so far.
    pub fn report(&self) -> RouterReport {
        let path = self.path.as_ref();
        RouterReport {
            received: path
                .map(|p| p.received().iter().enumerate().map(|(stream, count)| (stream as u32, *count)).collect())
                .unwrap_or_default(),
            rules: self.control.deployments.history().to_vec(),
            routed: path.map_or(0, DataPath::routed_total),
            rejected: self.rejected(),
            workers: self.rescaling.as_ref().map(Rescaling::reported_ids).unwrap_or_default(),
            failed: self.rescaling.as_ref().map(Rescaling::failed).unwrap_or_default(),
        }
    }

    /// Sends the report to the collector and returns it. Call it once nothing is batched: after
    /// every stream ended (each end marker flushes what came before it) or after [`Self::flush`].
    pub fn finish(&mut self, out: &mut impl Outbox) -> RouterReport {
        let report = self.report();
        if self.path.is_some() {
            out.send(Peer::Collector, &report.encode(ROUTER_ID));
        }
        report
    }

    /// Every frame, request and connection rejected so far, by cause: the data path's, the
    /// control requests refused, and the connections the authentication refused.
    fn rejected(&self) -> CauseCounts {
        let mut rejected = self.path.as_ref().map(|p| p.rejections().counts().clone()).unwrap_or_default();
        for (cause, count) in self.denied.iter().chain(&self.control.refused) {
            *rejected.entry(cause.clone()).or_insert(0) += count;
        }
        rejected
    }

    /// Copies the counters to the metrics (the driver calls it every 100 ms and at the end);
    /// before the start only the rejections, which strangers can already cause.
    pub fn publish(&self, metrics: &crate::metrics::RouterMetrics) {
        let rejected = self.rejected();
        match (&self.path, &self.rescaling) {
            (Some(path), Some(rescaling)) => {
                let epoch = self.control.deployments.current().epoch;
                let membership = rescaling.membership(path);
                metrics.observe(path.received(), path.ended(), &rejected, epoch, membership);
            }
            _ => metrics.observe_rejections(&rejected),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cep_core::control::{Deploy, Deployed, Register};
    use cep_core::frame::{AwaitEnd, EndAck, Frame, RunFinished};
    use cep_core::identity::Role;
    use cep_core::outbox::{Event, Recorded};
    use cep_core::partition::Partitioner;
    use cep_core::report::EndOfStream;
    use cep_core::wire::{FrameKind, TickBatchWriter};

    fn register(role: Role, id: &str, streams: u32) -> Vec<u8> {
        Register {
            role,
            id: id.into(),
            endpoint: format!("inproc://{id}"),
            streams,
            warmup_ns: 0,
            clock_endpoint: String::new(),
            resuming: 0,
        }
        .encode(0)
    }

    /// A router with workers `a` and `b`, the collector and one injector stream registered,
    /// started, its Ready answers taken.
    fn running(batch: usize) -> (Router, Recorded) {
        running_with(batch, 0)
    }

    /// A router of 2 workers and 1 stream on the reference rules, nobody registered yet.
    fn unstarted(batch: usize, checkpoint_every_ns: u64) -> Router {
        let settings = RouterSettings {
            workers: WorkerCount::Exactly(2),
            streams: 1,
            vnodes: 64,
            batch,
            max_frame_bytes: 1 << 20,
            allowed_lateness_ns: Some(5),
            slice_symbols: 2,
            max_held_ticks: 1000,
            move_timeout_ns: 1_000,
            checkpoint_every_ns,
            max_replay_bytes: 1 << 30,
        };
        Router::new(settings, Deployments::start(&cep_query::RulesSource::reference()).unwrap())
    }

    /// [`running`], with checkpoints every `checkpoint_every_ns` (0: none).
    fn running_with(batch: usize, checkpoint_every_ns: u64) -> (Router, Recorded) {
        let mut router = unstarted(batch, checkpoint_every_ns);
        let mut out = Recorded { clock: 777, ..Default::default() };
        router.control(b"b".to_vec(), &register(Role::Worker, "b", 0), 1, &mut out);
        router.control(b"c".to_vec(), &register(Role::Collector, "c", 0), 1, &mut out);
        router.control(b"i".to_vec(), &register(Role::Injector, "i", 1), 1, &mut out);
        assert!(!router.can_start(2));
        router.control(b"a".to_vec(), &register(Role::Worker, "a", 0), 2, &mut out);
        assert!(out.take().is_empty(), "nobody is answered before the start");
        assert!(router.can_start(2));
        let start = router.start(1_000);
        assert_eq!(start.workers.iter().map(|w| w.id.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(start.collector, "inproc://c");
        router.announce(None, &mut out);
        let answers: Vec<(Peer, u32, u64, Option<u64>)> = out
            .take()
            .into_iter()
            .map(|(to, frame)| {
                let ready: Ready = Frame::read(&frame, usize::MAX).unwrap().body().unwrap();
                (to, ready.assigned, ready.start_ns, ready.allowed_lateness_ns)
            })
            .collect();
        let client = |id: &[u8]| Peer::Client(id.to_vec());
        assert_eq!(
            answers,
            [
                (client(b"a"), 0, 1_000, Some(5)),
                (client(b"b"), 1, 1_000, Some(5)),
                (client(b"c"), 0, 1_000, Some(5)),
                (client(b"i"), 0, 1_000, Some(5))
            ]
        );
        (router, out)
    }

    fn ticks(symbols: &[&str], first_seq: u64) -> Vec<u8> {
        let mut writer = TickBatchWriter::new(0);
        for (i, symbol) in symbols.iter().enumerate() {
            let seq = first_seq + i as u64;
            writer.push(symbol.as_bytes(), 10.0, 100 + seq, 100 + seq, 0, seq, 0);
        }
        writer.seal(50).to_vec()
    }

    /// Every tick sent to each worker: (worker, symbol, seq, t_router_in, batch t_sent).
    fn routed(sent: &[(Peer, Vec<u8>)]) -> Vec<(u32, String, u64, u64, u64)> {
        let mut records = Vec::new();
        let mut all = Vec::new();
        for (to, bytes) in sent {
            let Peer::Worker(worker) = to else { panic!("data to {to:?}") };
            let frame = Frame::read(bytes, usize::MAX).unwrap();
            if frame.kind() != FrameKind::Ticks {
                continue;
            }
            let batch = frame.ticks(&mut records).unwrap();
            for tick in batch.records {
                let symbol = String::from_utf8(batch.symbol(tick).to_vec()).unwrap();
                all.push((*worker, symbol, tick.seq, tick.t_router_in, batch.t_sent));
            }
        }
        all
    }

    #[test]
    fn each_symbol_goes_to_its_owner_in_batches_and_the_end_follows_the_ticks() {
        let (mut router, mut out) = running(3);
        let symbols = ["S1", "S2", "S3", "S4", "S5", "S6", "S7", "S8"];
        router.data(&ticks(&symbols, 0), 40, &mut out);
        let full_batches = out.take();
        assert!(!full_batches.is_empty() && routed(&full_batches).iter().all(|tick| tick.3 == 40));
        router.flush(&mut out);
        let rest = out.take();
        let mut all = routed(&full_batches);
        all.extend(routed(&rest));
        assert_eq!(all.len(), symbols.len(), "every tick once");
        let ring = Partitioner::new(&["a".to_string(), "b".to_string()], 64);
        for (worker, symbol, _, t_router_in, t_sent) in &all {
            assert_eq!(*worker as usize, ring.owner(symbol), "{symbol}");
            assert_eq!((*t_router_in, *t_sent), (40, 777));
        }
        router.data(&EndOfStream { stream: 0, sent: 8, routed: 0 }.encode(0), 41, &mut out);
        let markers: Vec<(Peer, EndOfStream)> = out
            .take()
            .into_iter()
            .map(|(to, frame)| (to, Frame::read(&frame, usize::MAX).unwrap().body().unwrap()))
            .collect();
        let to_a = all.iter().filter(|tick| tick.0 == 0).count() as u64;
        assert_eq!(
            markers,
            [
                (Peer::Worker(0), EndOfStream { stream: 0, sent: 8, routed: to_a }),
                (Peer::Worker(1), EndOfStream { stream: 0, sent: 8, routed: 8 - to_a })
            ]
        );
        assert!(router.all_ended());
        assert_eq!(out.events.last(), Some(&Event::StreamEnded { stream: 0, sent: 8, received: 8 }));
        let report = router.finish(&mut out);
        assert_eq!((report.routed, report.received.get(&0)), (8, Some(&8)));
        let sent = out.take();
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].0, Peer::Collector);
        assert_eq!(Frame::read(&sent[0].1, usize::MAX).unwrap().body::<RouterReport>().unwrap(), report);
    }

    #[test]
    fn nodes_wait_for_the_collector_before_closing() {
        let (mut router, mut out) = running(10);
        router.data(&EndOfStream { stream: 0, sent: 0, routed: 0 }.encode(0), 1, &mut out);
        router.finish(&mut out);
        out.take();
        router.control(b"a".to_vec(), &AwaitEnd.encode(0), 2, &mut out);
        router.control(b"i".to_vec(), &AwaitEnd.encode(0), 2, &mut out);
        assert!(out.take().is_empty() && !router.collector_finished());
        router.control(b"c".to_vec(), &RunFinished.encode(0), 3, &mut out);
        assert!(router.collector_finished());
        let released: Vec<Peer> = out
            .take()
            .into_iter()
            .map(|(to, frame)| {
                Frame::read(&frame, usize::MAX).unwrap().body::<EndAck>().unwrap();
                to
            })
            .collect();
        assert_eq!(released, [Peer::Client(b"a".to_vec()), Peer::Client(b"i".to_vec()), Peer::Client(b"c".to_vec())]);
        // Worker b asks after the collector finished: answered at once, and then everyone has.
        assert!(!router.every_node_asked());
        router.control(b"b".to_vec(), &AwaitEnd.encode(0), 4, &mut out);
        let late = out.take();
        assert_eq!(late.len(), 1);
        assert_eq!(late[0].0, Peer::Client(b"b".to_vec()));
        assert!(router.every_node_asked());
    }

    #[test]
    fn a_deployment_switches_every_worker_between_the_same_ticks() {
        let (mut router, mut out) = running(100);
        router.data(&ticks(&["S1", "S2", "S3"], 0), 1, &mut out);
        let deploy = Deploy { origin: "new.rules".into(), text: "@name('all') SELECT * FROM StockTick;".into() };
        router.control(b"ops".to_vec(), &deploy.encode(0), 2, &mut out);
        let sent = out.take();
        let kinds: Vec<(Peer, FrameKind)> =
            sent.iter().map(|(to, frame)| (to.clone(), Frame::read(frame, usize::MAX).unwrap().kind())).collect();
        // The held batches leave first, then the marker to each worker, then the answer.
        let markers = &kinds[kinds.len() - 3..];
        assert_eq!(
            markers,
            [
                (Peer::Worker(0), FrameKind::SwitchRules),
                (Peer::Worker(1), FrameKind::SwitchRules),
                (Peer::Client(b"ops".to_vec()), FrameKind::Deployed)
            ]
        );
        assert_eq!(routed(&sent[..kinds.len() - 3]).len(), 3);
        let deployed: Deployed = Frame::read(&sent.last().unwrap().1, usize::MAX).unwrap().body().unwrap();
        assert_eq!((deployed.epoch, deployed.at.get(&0)), (1, Some(&3)));
        let at = std::collections::BTreeMap::from([(0, 3)]);
        assert_eq!(out.events.last(), Some(&Event::Deployed { epoch: 1, origin: "new.rules".into(), at }));
        // A file that does not check is refused, and the rules stay.
        let bad = Deploy { origin: "bad.rules".into(), text: "SELECT nope;".into() };
        router.control(b"ops".to_vec(), &bad.encode(0), 3, &mut out);
        let sent = out.take();
        assert_eq!(sent.len(), 1);
        assert_eq!(Frame::read(&sent[0].1, usize::MAX).unwrap().kind(), FrameKind::Refused);
        assert_eq!(router.report().rules.len(), 2);
    }

    #[test]
    fn a_forged_or_oversized_control_frame_is_refused_with_its_cause() {
        let (mut router, mut out) = running(10);
        let oversized = vec![0x94; cep_core::control::MAX_CONTROL_FRAME_BYTES + 1];
        for (body, cause) in [(&b"junk"[..], "malformed"), (&oversized[..], "oversized")] {
            router.control(b"x".to_vec(), body, 1, &mut out);
            let sent = out.take();
            assert_eq!(sent.len(), 1);
            assert_eq!(sent[0].0, Peer::Client(b"x".to_vec()));
            let refused: cep_core::control::Refused = Frame::read(&sent[0].1, usize::MAX).unwrap().body().unwrap();
            assert!(refused.reason.starts_with(&format!("bad control frame: {cause}")), "{}", refused.reason);
            assert!(matches!(out.events.pop(), Some(Event::BadControlFrame { .. })));
        }
        // A well-formed frame of a kind the control socket does not take: refused, not served.
        router.control(b"x".to_vec(), &EndOfStream { stream: 0, sent: 0, routed: 0 }.encode(0), 1, &mut out);
        let refused: cep_core::control::Refused = Frame::read(&out.take()[0].1, usize::MAX).unwrap().body().unwrap();
        assert!(refused.reason.contains("unexpected frame kind"), "{}", refused.reason);
        assert!(!router.all_ended(), "a forged end marker on the control socket ends nothing");
    }

    #[test]
    fn refused_connections_and_requests_reach_the_metrics_before_and_after_the_start() {
        let metrics = crate::metrics::RouterMetrics::register(2, 1);
        let line = |cause: &str, count: u64| {
            format!("cep_rejected_total{{role=\"cep\",id=\"cep\",cause=\"{cause}\"}} {count}\n")
        };
        let scrape = || cep_telemetry::metrics::encode(false).unwrap();
        let mut router = unstarted(10, 0);
        router.refused_connections(&[("unauthenticated_operators".to_string(), 2)].into());
        router.publish(&metrics);
        assert!(scrape().contains(&line("unauthenticated_operators", 2)), "{}", scrape());

        let (mut router, mut out) = running(10);
        router.refused_connections(&[("handshake_failed_operators".to_string(), 3)].into());
        router.control(b"x".to_vec(), b"junk", 1, &mut out);
        router.data(b"junk", 1, &mut out);
        router.publish(&metrics);
        let text = scrape();
        for expected in [line("handshake_failed_operators", 3), line("malformed", 1), line("malformed_control", 1)] {
            assert!(text.contains(&expected), "{expected} missing from:\n{text}");
        }
    }

    #[test]
    fn bad_frames_and_ticks_are_counted_by_cause() {
        let (mut router, mut out) = running(100);
        router.data(b"junk", 1, &mut out);
        let mut writer = TickBatchWriter::new(0);
        writer.push(b"S1", f64::NAN, 1, 1, 0, 0, 0);
        writer.push(b"S1", 1.0, 1, 1, 4, 0, 0);
        writer.push(b"S1", 1.0, 1, 1, 0, 1, 0);
        router.data(writer.seal(0), 1, &mut out);
        router.data(&EndOfStream { stream: 9, sent: 0, routed: 0 }.encode(0), 1, &mut out);
        router.flush(&mut out);
        assert_eq!(routed(&out.take()).len(), 1);
        let report = router.report();
        let causes: Vec<(&str, u64)> = report.rejected.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(causes, [("malformed", 1), ("non_finite_price", 1), ("unknown_stream", 2)]);
        // A collector registering after the start is refused with the reason.
        router.control(b"late".to_vec(), &register(Role::Collector, "late", 0), 5, &mut out);
        let refused: cep_core::control::Refused = Frame::read(&out.take()[0].1, usize::MAX).unwrap().body().unwrap();
        assert!(refused.reason.contains("already started"), "{}", refused.reason);
    }

    #[test]
    fn an_injector_that_registers_while_the_run_goes_opens_streams_of_its_own() {
        use cep_core::rescale::StreamsOpened;
        let (mut router, mut out) = running(100);
        router.data(&ticks(&["S1", "S2"], 0), 1, &mut out);
        router.flush(&mut out);
        out.take();
        router.control(b"late".to_vec(), &register(Role::Injector, "late", 2), 5, &mut out);
        let sent = out.take();
        let opened: Vec<(Peer, StreamsOpened)> = sent[..2]
            .iter()
            .map(|(to, frame)| (to.clone(), Frame::read(frame, usize::MAX).unwrap().body().unwrap()))
            .collect();
        let marker = StreamsOpened { first: 1, count: 2 };
        assert_eq!(opened, [(Peer::Worker(0), marker), (Peer::Worker(1), marker)]);
        let ready: Ready = Frame::read(&sent[2].1, usize::MAX).unwrap().body().unwrap();
        assert_eq!((sent[2].0.clone(), ready.assigned, ready.streams), (Peer::Client(b"late".to_vec()), 1, 3));
        assert_eq!(ready.start_ns, 777 + LATE_START_DELAY_NS, "it starts after its clock samples");
        // Its ticks route; a tick of a symbol that another stream carries is refused.
        let mut writer = TickBatchWriter::new(1);
        writer.push(b"X1", 10.0, 1, 1, 1, 0, 0);
        writer.push(b"S1", 10.0, 1, 1, 2, 0, 0);
        router.data(writer.seal(0), 6, &mut out);
        router.flush(&mut out);
        assert_eq!(routed(&out.take()).iter().map(|t| t.1.as_str()).collect::<Vec<_>>(), ["X1"]);
        assert_eq!(router.report().rejected.get("symbol_of_another_stream"), Some(&1));
        // The run ends when every stream, its own included, has.
        for stream in 0..3 {
            let sent = router.report().received.get(&stream).copied().unwrap_or(0);
            router.data(&EndOfStream { stream, sent, routed: 0 }.encode(0), 7, &mut out);
        }
        assert!(router.all_ended());
        assert_eq!(router.report().received.get(&1), Some(&1));
        out.take();
        // It asks for the end: its streams have ended, so it is released at once.
        router.control(b"late".to_vec(), &AwaitEnd.encode(0), 8, &mut out);
        let answer = out.take();
        assert_eq!(
            (answer[0].0.clone(), Frame::read(&answer[0].1, usize::MAX).unwrap().kind()),
            (Peer::Client(b"late".to_vec()), FrameKind::EndAck)
        );
    }

    #[test]
    fn a_worker_that_joins_takes_its_share_with_the_state_ahead_of_the_held_ticks() {
        use cep_core::rescale::{HandOff, RescaleStarted, Rescaled, SymbolState};
        let (mut router, mut out) = running(100);
        let symbols: Vec<String> = (0..40).map(|i| format!("S{i}")).collect();
        let names: Vec<&str> = symbols.iter().map(String::as_str).collect();
        router.data(&ticks(&names, 0), 1, &mut out);
        router.flush(&mut out);
        out.take();
        router.control(b"c".to_vec(), &register(Role::Worker, "c", 0), 2, &mut out);
        // The collector is told who joined, it is answered (joining) and welcomed on its data
        // socket; nothing moves before it answers the Welcome.
        let sent = out.take();
        let kinds: Vec<(Peer, FrameKind)> =
            sent.iter().map(|(to, frame)| (to.clone(), Frame::read(frame, usize::MAX).unwrap().kind())).collect();
        assert_eq!(
            kinds,
            [
                (Peer::Collector, FrameKind::WorkerJoined),
                (Peer::Worker(2), FrameKind::Welcome),
                (Peer::Client(b"c".to_vec()), FrameKind::Ready)
            ]
        );
        let joined: WorkerJoined = Frame::read(&sent[0].1, usize::MAX).unwrap().body().unwrap();
        assert_eq!(joined, WorkerJoined { index: 2, id: "c".into(), key: String::new() });
        let ready: Ready = Frame::read(&sent[2].1, usize::MAX).unwrap().body().unwrap();
        assert!(ready.joining);
        assert!(!router.rescaling());
        router.control(b"c".to_vec(), &cep_core::rescale::Reached { index: 2 }.encode(2), 2, &mut out);
        let ring = Partitioner::new(&["a".to_string(), "b".to_string(), "c".to_string()], 64);
        let mut moving: Vec<&str> = names.iter().copied().filter(|s| ring.owner(s) == 2).collect();
        moving.sort();
        assert!(moving.len() >= 3, "the test needs a few symbols that move: {moving:?}");
        let sent = out.take();
        let read = |bytes: &[u8]| Frame::read(bytes, usize::MAX).unwrap().kind();
        // The joiner is answered with the next index, the collector told what moves, and the
        // first slice (2 symbols) is handed off by its owners.
        assert_eq!((ready.assigned, ready.workers.len()), (2, 3));
        assert_eq!(
            sent.last().map(|(to, frame)| (to.clone(), read(frame))),
            Some((Peer::Client(b"c".to_vec()), FrameKind::StateTaken))
        );
        let started = &sent.iter().find(|(_, frame)| read(frame) == FrameKind::RescaleStarted).unwrap().1;
        let started: RescaleStarted = Frame::read(started, usize::MAX).unwrap().body().unwrap();
        assert_eq!(started.symbols.iter().map(|(s, _)| s.as_str()).collect::<Vec<_>>(), moving);
        let hand_offs: Vec<(Peer, HandOff)> = sent
            .iter()
            .filter(|(_, frame)| read(frame) == FrameKind::HandOff)
            .map(|(to, frame)| (to.clone(), Frame::read(frame, usize::MAX).unwrap().body().unwrap()))
            .collect();
        let first_slice: Vec<String> = hand_offs.iter().flat_map(|(_, h)| h.symbols.clone()).collect();
        assert_eq!(first_slice, moving[..2]);
        assert!(router.rescaling());
        // A tick of a moving symbol is held; one of a symbol staying put is routed.
        let staying = names.iter().copied().find(|s| ring.owner(s) != 2).unwrap();
        router.data(&ticks(&[moving[0], staying], 100), 3, &mut out);
        router.flush(&mut out);
        let routed_now = routed(&out.take());
        assert_eq!(routed_now.len(), 1);
        assert_eq!(routed_now[0].1, staying);
        // Holding as many ticks as it may (1,000 here), the router reads no more input.
        assert!(router.accepting_input());
        router.data(&ticks(&[moving[0]; 999], 1_000), 3, &mut out);
        assert!(!router.accepting_input(), "back-pressure on the injectors while state moves");
        // A deployment waits for the rescale.
        let deploy = Deploy { origin: "x".into(), text: "@name('all') SELECT * FROM StockTick;".into() };
        router.control(b"ops".to_vec(), &deploy.encode(0), 4, &mut out);
        let refused: cep_core::control::Refused = Frame::read(&out.take()[0].1, usize::MAX).unwrap().body().unwrap();
        assert!(refused.reason.contains("rescale"), "{}", refused.reason);
        // State from the wrong worker is refused; from the owner it goes to c, then the held tick.
        let mut slices = 0;
        let mut pending = hand_offs;
        while !pending.is_empty() {
            slices += 1;
            for (from, hand_off) in std::mem::take(&mut pending) {
                let Peer::Worker(from) = from else { panic!() };
                let state = SymbolState { part: hand_off.part, from, symbols: vec![], engine: vec![1, 2, 3] };
                let forged = SymbolState { from: from + 1, ..state.clone() };
                router.control(b"x".to_vec(), &forged.encode(from + 1), 5, &mut out);
                assert_eq!(read(&out.take()[0].1), FrameKind::Refused);
                router.control(b"w".to_vec(), &state.encode(from), 5, &mut out);
                let sent = out.take();
                assert_eq!(sent[0].0, Peer::Worker(2));
                assert_eq!(Frame::read(&sent[0].1, usize::MAX).unwrap().body::<SymbolState>().unwrap(), state);
                if slices == 1 && hand_off.symbols.contains(&moving[0].to_string()) {
                    let released = routed(&sent[1..2]);
                    assert_eq!((released[0].0, released[0].1.as_str(), released[0].2), (2, moving[0], 100));
                }
                assert!(sent
                    .iter()
                    .any(|(to, frame)| *to == Peer::Client(b"w".to_vec()) && read(frame) == FrameKind::StateTaken));
                pending.extend(sent.iter().filter(|(_, frame)| read(frame) == FrameKind::HandOff).map(
                    |(to, frame)| (to.clone(), Frame::read(frame, usize::MAX).unwrap().body::<HandOff>().unwrap()),
                ));
                if let Some((_, frame)) = sent.iter().find(|(_, frame)| read(frame) == FrameKind::Rescaled) {
                    let record: Rescaled = Frame::read(frame, usize::MAX).unwrap().body().unwrap();
                    assert_eq!(record.symbols as usize, moving.len());
                }
            }
        }
        assert_eq!(slices, moving.len().div_ceil(2));
        assert!(!router.rescaling());
        assert!(router.accepting_input(), "the held ticks went to their new owner");
        // One whose data endpoint never answers is dropped after the move time-out.
        router.control(b"e".to_vec(), &register(Role::Worker, "e", 0), 8, &mut out);
        out.take();
        router.tick(8, &mut out);
        router.tick(8 + 2_000, &mut out);
        assert!(out.events.iter().any(|e| matches!(e, Event::Refused { who, .. } if who == "worker e")));
        router.control(b"e".to_vec(), &cep_core::rescale::Reached { index: 3 }.encode(3), 9, &mut out);
        assert_eq!(read(&out.take()[0].1), FrameKind::Refused, "too late");
        // From now on the moved symbols go to c directly.
        router.data(&ticks(&[moving[1]], 200), 6, &mut out);
        router.flush(&mut out);
        assert_eq!(routed(&out.take())[0].0, 2);
        // The end marker reaches all three, and the report names them.
        router.data(&EndOfStream { stream: 0, sent: 2_000, routed: 0 }.encode(0), 7, &mut out);
        assert_eq!(out.take().len(), 3, "not to e, which never answered");
        assert_eq!(router.report().workers, ["a", "b", "c", ""], "e never joined");
        // A second worker with a taken id is refused.
        router.control(b"d".to_vec(), &register(Role::Worker, "c", 0), 8, &mut out);
        assert_eq!(read(&out.take()[0].1), FrameKind::Refused);
    }

    #[test]
    fn leaving_is_refused_for_unknown_or_last_workers_and_drains_a_member() {
        use cep_core::rescale::{HandOff, Leave, Retire, SymbolState};
        let (mut router, mut out) = running(100);
        router.data(&ticks(&["S1", "S2", "S3", "S4"], 0), 1, &mut out);
        router.flush(&mut out);
        out.take();
        fn read(bytes: &[u8]) -> Frame<'_> {
            Frame::read(bytes, usize::MAX).unwrap()
        }
        router.control(b"op".to_vec(), &Leave { worker: "zz".into() }.encode(0), 2, &mut out);
        let refused: cep_core::control::Refused = read(&out.take()[0].1).body().unwrap();
        assert!(refused.reason.contains("no worker `zz`"), "{}", refused.reason);
        router.control(b"op".to_vec(), &Leave { worker: "a".into() }.encode(0), 2, &mut out);
        let sent = out.take();
        let hand_offs: Vec<HandOff> = sent
            .iter()
            .filter(|(_, f)| read(f).kind() == FrameKind::HandOff)
            .map(|(_, f)| read(f).body().unwrap())
            .collect();
        assert!(sent
            .iter()
            .any(|(to, f)| *to == Peer::Client(b"op".to_vec()) && read(f).kind() == FrameKind::RescaleAccepted));
        router.control(b"op".to_vec(), &Leave { worker: "b".into() }.encode(0), 2, &mut out);
        let refused: cep_core::control::Refused = read(&out.take()[0].1).body().unwrap();
        assert!(refused.reason.contains("last one"), "{}", refused.reason);
        let mut pending = hand_offs;
        let mut retired = None;
        while let Some(hand_off) = pending.pop() {
            assert_eq!(hand_off.to, 1);
            let state = SymbolState { part: hand_off.part, from: 0, symbols: vec![], engine: vec![] };
            router.control(b"a".to_vec(), &state.encode(0), 3, &mut out);
            for (to, frame) in out.take() {
                match read(&frame).kind() {
                    FrameKind::HandOff => pending.push(read(&frame).body().unwrap()),
                    FrameKind::Retire => retired = Some((to, read(&frame).body::<Retire>().unwrap())),
                    _ => {}
                }
            }
        }
        let (to, retire) = retired.expect("a is retired once its symbols moved");
        assert_eq!(to, Peer::Worker(0));
        let routed_to_a = retire.routed.get(&0).copied().unwrap();
        router.data(&ticks(&["S1", "S2", "S3", "S4"], 4), 4, &mut out);
        router.flush(&mut out);
        assert!(routed(&out.take()).iter().all(|tick| tick.0 == 1), "everything goes to b now");
        router.data(&EndOfStream { stream: 0, sent: 8, routed: 0 }.encode(0), 5, &mut out);
        let markers: Vec<(Peer, EndOfStream)> =
            out.take().into_iter().map(|(to, f)| (to, read(&f).body().unwrap())).collect();
        assert_eq!(markers, [(Peer::Worker(1), EndOfStream { stream: 0, sent: 8, routed: 8 - routed_to_a })]);
    }

    /// A dead worker's symbol first routed to it after its checkpoint is in no snapshot part:
    /// its new owner still gets it listed, in the Restore without state that ends the
    /// failover (and marks every symbol it takes for the collector), before its replay.
    #[test]
    fn every_moved_symbol_is_listed_for_its_new_owner_ahead_of_the_replay() {
        use cep_core::failover::{OutputsConfirmed, Restore, Snapshot};
        use cep_core::rescale::MovedSymbol;
        let (mut router, mut out) = running_with(100, 10);
        let ring = Partitioner::new(&["a".to_string(), "b".to_string()], 64);
        let of_a: Vec<String> = (0..64).map(|k| format!("S{k}")).filter(|s| ring.owner(s) == 0).take(2).collect();
        let (old, new) = (of_a[0].as_str(), of_a[1].as_str());
        router.data(&ticks(&[old], 0), 5, &mut out);
        router.tick(100, &mut out);
        router.tick(200, &mut out);
        assert!(out.take().iter().any(|(_, f)| Frame::read(f, usize::MAX).unwrap().kind() == FrameKind::Checkpoint));
        let moved = MovedSymbol { symbol: old.into(), stream: 0, next_seq: 1 };
        for (worker, symbols) in [(0, vec![moved.clone()]), (1, vec![])] {
            let snapshot = Snapshot {
                id: 1,
                base: 0,
                from: worker,
                part: 0,
                parts: 1,
                symbols,
                engine: vec![1, 2, 3],
                processed: [(0, 1 - u64::from(worker))].into(),
                outputs: 0,
                oversize: 0,
            };
            let client = if worker == 0 { b"a".to_vec() } else { b"b".to_vec() };
            router.control(client, &snapshot.encode(worker), 300, &mut out);
        }
        router.control(b"c".to_vec(), &OutputsConfirmed { worker: 0, id: 1 }.encode(0), 300, &mut out);
        router.data(&ticks(&[new], 1), 400, &mut out);
        router.flush(&mut out);
        out.take();
        router.worker_lost(0, "killed", &mut out).unwrap();
        let sent = out.take();
        let to_b: Vec<Frame<'_>> = sent
            .iter()
            .filter(|(to, _)| *to == Peer::Worker(1))
            .map(|(_, frame)| Frame::read(frame, usize::MAX).unwrap())
            .collect();
        let restores: Vec<Restore> =
            to_b.iter().filter(|f| f.kind() == FrameKind::Restore).map(|f| f.body().unwrap()).collect();
        let listed = |restore: &Restore| restore.symbols.iter().map(|m| m.symbol.clone()).collect::<Vec<_>>();
        assert_eq!(restores.len(), 2, "the part with state, then every symbol without");
        assert_eq!((listed(&restores[0]), restores[0].engine.as_slice()), (vec![old.to_string()], &[1, 2, 3][..]));
        let mut every = vec![old.to_string(), new.to_string()];
        every.sort();
        assert_eq!((listed(&restores[1]), restores[1].engine.is_empty()), (every, true));
        // Then the replay: the tick of the new symbol, routed after the checkpoint.
        let last_restore = to_b.iter().rposition(|f| f.kind() == FrameKind::Restore).unwrap();
        let data: Vec<(Peer, Vec<u8>)> = sent.iter().filter(|(to, _)| matches!(to, Peer::Worker(_))).cloned().collect();
        let replayed: Vec<_> = routed(&data).into_iter().filter(|tick| tick.0 == 1).collect();
        assert_eq!(replayed.iter().map(|t| (t.1.as_str(), t.2)).collect::<Vec<_>>(), [(new, 1)]);
        assert!(to_b[last_restore + 1..].iter().any(|f| f.kind() == FrameKind::Ticks));
    }

    #[test]
    fn a_forged_snapshot_or_confirmation_is_refused_or_changes_nothing() {
        use cep_core::failover::{OutputsConfirmed, Snapshot};
        let (mut router, mut out) = running(100);
        let snapshot = Snapshot {
            id: 1,
            base: 0,
            from: 1,
            part: 0,
            parts: 1,
            symbols: vec![],
            engine: vec![],
            processed: Default::default(),
            outputs: 0,
            oversize: 0,
        };
        // Sent as worker 0, naming worker 1.
        router.control(b"x".to_vec(), &snapshot.encode(0), 1, &mut out);
        let refused: Refused = Frame::read(&out.take()[0].1, usize::MAX).unwrap().body().unwrap();
        assert!(refused.reason.contains("must come from the worker it names"), "{}", refused.reason);
        // A confirmation of a checkpoint nobody took releases nothing and breaks nothing.
        router.control(b"c".to_vec(), &OutputsConfirmed { worker: 9, id: 42 }.encode(0), 1, &mut out);
        assert_eq!(Frame::read(&out.take()[0].1, usize::MAX).unwrap().kind(), FrameKind::StateTaken);
        router.data(&ticks(&["S1"], 0), 2, &mut out);
        router.flush(&mut out);
        assert_eq!(routed(&out.take()).len(), 1, "routing goes on");
    }

    #[test]
    fn a_joining_workers_endpoint_must_be_one_the_router_can_connect_to() {
        for good in ["tcp://10.0.1.12:5560", "tcp://worker-3.local:5560", "tcp://[::1]:7", "ipc:///tmp/w", "inproc://w"]
        {
            assert_eq!(check_endpoint(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "foo",
            "tcp://host",
            "tcp://:5",
            "tcp://not a host!:5000",
            "tcp://tcp://1.2.3.4:5:6",
            "tcp://h:0",
            "udp://h:1",
            "ipc://",
        ] {
            assert!(check_endpoint(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_key_may_ask_only_what_its_role_allows_and_send_only_its_own_streams() {
        use cep_core::identity::{PublicKey, Roles};
        // A distinct key per name: 40 Z85 digits of the name's first letter.
        let peer = |role: Role, name: &str| Identity {
            roles: Roles::of(&[role]),
            name: name.into(),
            key: PublicKey::parse(&name[..1].repeat(40)).unwrap(),
        };
        let (a, b, c, i) =
            (peer(Role::Worker, "a"), peer(Role::Worker, "b"), peer(Role::Collector, "c"), peer(Role::Injector, "i"));
        let ops = peer(Role::Operator, "ops");
        let sender = |peer: &Identity, role: &str| format!("{role} {} {}", peer.name, peer.key);
        let settings = RouterSettings {
            workers: WorkerCount::Exactly(2),
            streams: 1,
            vnodes: 64,
            batch: 8,
            max_frame_bytes: 1 << 20,
            allowed_lateness_ns: None,
            slice_symbols: 2,
            max_held_ticks: 1000,
            move_timeout_ns: 1_000,
            checkpoint_every_ns: 0,
            max_replay_bytes: 1 << 30,
        };
        let mut router = Router::new(settings, Deployments::start(&cep_query::RulesSource::reference()).unwrap());
        let mut out = Recorded { clock: 777, ..Default::default() };
        let refused = |router: &mut Router, from: &Identity, body: &[u8], out: &mut Recorded| {
            router.control_from(b"x".to_vec(), Some(from), body, 2, out);
            let answer = out.take().pop().unwrap().1;
            let frame = Frame::read(&answer, usize::MAX).unwrap();
            assert_eq!(frame.kind(), FrameKind::Refused);
            frame.body::<Refused>().unwrap().reason
        };
        let reason = refused(&mut router, &i, &register(Role::Worker, "x", 0), &mut out);
        assert_eq!(reason, "injector `i` may not send Register: its key is not listed under worker/");
        // A worker's own key registers the id it is named after; the shared key any id.
        let reason = refused(&mut router, &a, &register(Role::Worker, "b", 0), &mut out);
        assert!(reason.starts_with("worker `a` may register only as worker `a`, not `b`"), "{reason}");
        let shared = peer(Role::Worker, SHARED_WORKER_KEY);
        assert_eq!(router.authorize(&shared, &register(Role::Worker, "any-id", 0)), Ok(()));
        for (client, from, body) in [
            (b"a", &a, register(Role::Worker, "a", 0)),
            (b"b", &b, register(Role::Worker, "b", 0)),
            (b"c", &c, register(Role::Collector, "c", 0)),
            (b"i", &i, register(Role::Injector, "i", 1)),
        ] {
            router.control_from(client.to_vec(), Some(from), &body, 1, &mut out);
        }
        let start = router.start(1_000);
        assert_eq!((start.workers[0].key.as_str(), start.collector_key.as_str()), (a.key.as_str(), c.key.as_str()));
        router.announce(None, &mut out);
        out.take();

        // Worker b cannot speak for worker a, nor ask it to leave; an operator may.
        let reason = refused(&mut router, &b, &DeliveryQuery { worker: 0 }.encode(0), &mut out);
        assert!(reason.contains("is not worker 0"), "{reason}");
        let reason = refused(&mut router, &b, &Leave { worker: "a".into() }.encode(1), &mut out);
        assert!(reason.contains("may ask only itself to leave"), "{reason}");
        let reason = refused(&mut router, &i, &cep_core::rescale::StatusRequest.encode(0), &mut out);
        assert!(reason.contains("not listed under operator/"), "{reason}");
        let reason = refused(&mut router, &b, &Saved::default().encode(1), &mut out);
        assert!(reason.contains("not listed under collector/"), "{reason}");
        router.control_from(b"ops".to_vec(), Some(&ops), &cep_core::rescale::StatusRequest.encode(0), 2, &mut out);
        assert_eq!(Frame::read(&out.take()[0].1, usize::MAX).unwrap().kind(), FrameKind::ClusterStatus);

        // Stream 0 is i's: a worker's key cannot send its ticks or end it; i can. A tick
        // numbered far beyond the stream is not trusted, nor an end marker behind it.
        let (as_a, as_i) = (sender(&a, "worker"), sender(&i, "injector"));
        router.data_from(&ticks(&["S1"], 0), Some(Sender::new(&as_a)), 3, &mut out);
        router.data_from(
            &EndOfStream { stream: 0, sent: 9, routed: 0 }.encode(0),
            Some(Sender::new(&as_a)),
            3,
            &mut out,
        );
        router.data_from(&ticks(&["S1", "S2"], 0), Some(Sender::new(&as_i)), 3, &mut out);
        router.data_from(&ticks(&["S3"], 3 + crate::data_path::MAX_SEQ_AHEAD), Some(Sender::new(&as_i)), 3, &mut out);
        router.data_from(
            &EndOfStream { stream: 0, sent: 1, routed: 0 }.encode(0),
            Some(Sender::new(&as_i)),
            3,
            &mut out,
        );
        assert!(!router.all_ended());
        router.data_from(
            &EndOfStream { stream: 0, sent: 2, routed: 0 }.encode(0),
            Some(Sender::new(&as_i)),
            3,
            &mut out,
        );
        assert!(router.all_ended(), "{:?}", router.report());
        let report = router.report();
        assert_eq!(report.received.get(&0), Some(&2));
        let causes: Vec<(&str, u64)> = report.rejected.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(
            causes,
            [("end_behind_stream", 1), ("seq_far_ahead", 1), ("stream_of_another_key", 2), ("unauthorized_control", 6)]
        );
    }
}
