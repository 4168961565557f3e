//! The simulation: members, links, faults and the virtual clock.

use crate::spec::{ClusterSpec, Fault, LinkKind, Member};
use cep_collector::collector::Collector;
use cep_collector::lifecycle::Lifecycle as CollectorLifecycle;
use cep_core::clock::Monotonic;
use cep_core::control::{Ready, Refused, Register};
use cep_core::delivery::DeliveryLog;
use cep_core::frame::{Body, Frame};
use cep_core::identity::Role;
use cep_core::liveness::Fenced;
use cep_core::outbox::{Event, Peer, Recorded};
use cep_core::report::{RouterReport, WorkerReport};
use cep_core::wire::FrameKind;
use cep_injector::source::model;
use cep_router::deploying::Deployments;
use cep_router::lifecycle::RunPolicy;
use cep_router::rendezvous::WorkerCount;
use cep_router::router::{Router, RouterSettings};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

mod collector;
mod disk;
mod injector;
mod links;
mod outcome;
mod router;
mod workers;

use disk::{CollectorDisk, SharedFile};
use injector::Stream;
use links::LinkState;
pub use outcome::{LinkStats, Outcome, SentTick};
use workers::SimWorker;

/// Virtual time starts here (ns since the epoch, a realistic wall clock).
const EPOCH_NS: u64 = 1_700_000_000_000_000_000;
/// How far ahead of the Ready answers the run starts (the router's driver leaves 100 ms for the
/// nodes' clock samples; the harness has one clock and needs none).
const START_DELAY_NS: u64 = 1_000_000;
/// How often the collector's policy gets a turn without a frame: its save cadence.
const TIMER_NS: u64 = cep_collector::collector::SAVE_EVERY_NS;
/// How often the router's timer runs (moves given up, checkpoints due).
const ROUTER_TIMER_NS: u64 = 10_000_000;
/// How long a frame held back for a reorder waits for a frame to overtake it.
const HOLD_NS: u64 = 1_000_000_000;
/// A run that has not ended after this many events is stuck: the harness says so.
const MAX_EVENTS: u64 = 50_000_000;

/// What travels on a link.
#[derive(Clone, Debug)]
enum Payload {
    /// A data frame.
    Data(Vec<u8>),
    /// A control request from `client`.
    Request(Member, Vec<u8>),
    /// The router's answer to a control request.
    Answer(Vec<u8>),
}

#[derive(Clone, Debug)]
enum Scheduled {
    Deliver {
        from: Member,
        to: Member,
        payload: Payload,
    },
    Timer(Member),
    InjectorStep(u32),
    /// The router notices that this worker died.
    Detect(usize),
    /// A paused member goes on (unless its pause was made longer): what arrived meanwhile,
    /// in order.
    Unpause(Member),
    /// A frame held back for a reorder is sent anyway if no frame overtook it by now.
    Release {
        from: Member,
        to: Member,
        control: bool,
    },
}

/// A worker member: registering, then running its core.
enum WorkerState {
    /// Frames that arrived before its Ready answer wait in its socket's queue, as they do
    /// for a real worker (it binds before it registers).
    Registering(Vec<Vec<u8>>),
    Running(Box<SimWorker>),
    Done,
}

enum CollectorState {
    /// Frames that arrive before its Ready answer wait in its socket's queue (it binds before
    /// it registers): a restarted one is sent what it missed as the router takes it over.
    Registering(Vec<(Member, Vec<u8>)>),
    Running(Box<Collector<SharedFile>>),
    Done,
}

/// A cluster in one process on a virtual clock. See the crate docs.
pub struct LocalCluster {
    spec: ClusterSpec,
    faults: Vec<Fault>,
    /// Random draws made so far (for the probabilistic faults).
    drawn: u64,
    now: u64,
    queue: BTreeMap<(u64, u64), Scheduled>,
    next_event: u64,
    links: BTreeMap<(Member, Member, bool), LinkState>,
    stats: BTreeMap<LinkKind, LinkStats>,
    dead: BTreeSet<Member>,
    paused_until: BTreeMap<Member, u64>,
    /// What arrived for a paused member, in order.
    parked: BTreeMap<Member, Vec<(Member, Payload)>>,
    router: Router,
    /// The router's run policy, as its driver runs it: start, report, the collector's watch, release.
    router_policy: RunPolicy,
    /// How and when the router's process ended, once it did.
    router_exit: Option<router::RouterExit>,
    ring: Vec<usize>,
    router_report: Option<RouterReport>,
    workers: Vec<WorkerState>,
    /// Each worker member's id: `worker-N` for member N, or the id of the killed member a
    /// restarted one took back ([`Self::restart_worker`]).
    worker_ids: Vec<String>,
    worker_reports: Vec<WorkerReport>,
    collector: CollectorState,
    /// The running collector's policy (its saves, its idle time-out, its end).
    collector_life: Option<CollectorLifecycle>,
    collector_disk: CollectorDisk,
    /// How many times a restarted collector cut its files back to its saved state.
    collector_resumes: u64,
    /// Members started again under the id of a killed one, and how many of them the router
    /// took in (a Ready answer).
    restarted_members: BTreeSet<usize>,
    restarted_workers: u64,
    /// The checkpoint store every worker writes to and restores from, as workers share a
    /// mount.
    store: cep_core::store::MemoryStore,
    /// Worker turns taken at the bound of unsaved frames (input held).
    turns_at_max_unsaved: u64,
    /// With [`ClusterSpec::sequenced`]: the frames each sender sent the collector and it has
    /// not saved, and the collector they are addressed to.
    delivery: BTreeMap<Member, DeliveryLog>,
    collector_incarnation: u64,
    streams: Vec<Stream>,
    names: Vec<String>,
    injector_started: bool,
    /// Why the router fenced the injector, once it told it.
    fenced_injector: Option<String>,
    /// When the injector's next heartbeat is due (a timer before it does nothing).
    injector_beat_due: u64,
    start_ns: u64,
    sent: Vec<SentTick>,
    events: Vec<(Member, Event)>,
    /// Control requests the router refused, by asker.
    refusals: Vec<(Member, String)>,
    /// Workers that exited on learning they were fenced, by member index.
    fenced: Vec<usize>,
    outcome: Option<Outcome>,
    steps: u64,
}

impl LocalCluster {
    /// Builds the cluster; every member registers at once (the run starts when the router
    /// has them all, as in a real cluster).
    pub fn new(spec: ClusterSpec, faults: Vec<Fault>) -> LocalCluster {
        let source = match &spec.rules {
            Some(text) => cep_query::RulesSource { origin: "test.rules".into(), text: text.clone() },
            None => cep_query::RulesSource::reference(),
        };
        let settings = RouterSettings {
            workers: WorkerCount::Exactly(spec.workers),
            streams: spec.streams,
            vnodes: cep_core::partition::DEFAULT_VNODES,
            batch: spec.batch,
            max_frame_bytes: cep_core::wire::DEFAULT_MAX_FRAME_BYTES,
            allowed_lateness_ns: None,
            slice_symbols: spec.move_slice,
            max_held_ticks: usize::MAX,
            move_timeout_ns: spec.move_timeout_ns,
            checkpoint_every_ns: spec.checkpoint_every_ns,
            checkpoints_retained: 1,
            checkpoint_dir: String::new(),
            max_replay_bytes: usize::MAX,
            failure_timeout: Duration::from_nanos(spec.failure_timeout_ns),
        };
        let router = Router::new(settings, Deployments::start(&source).expect("the spec's rules check"));
        // No start time-out (every member registers at once); the end waits as long as the
        // collector waits for frames.
        let router_policy = RunPolicy::new(
            Duration::ZERO,
            Duration::from_nanos(spec.idle_timeout_ns),
            Duration::from_nanos(spec.collector_retention_ns),
            Monotonic::from_ns(EPOCH_NS),
        );
        let sources = model(spec.seed, spec.symbols, spec.streams as usize, None);
        let mut cluster = LocalCluster {
            faults,
            drawn: 0,
            now: EPOCH_NS,
            queue: BTreeMap::new(),
            next_event: 0,
            links: BTreeMap::new(),
            stats: BTreeMap::new(),
            dead: BTreeSet::new(),
            paused_until: BTreeMap::new(),
            parked: BTreeMap::new(),
            router,
            router_policy,
            router_exit: None,
            ring: Vec::new(),
            router_report: None,
            workers: (0..spec.workers).map(|_| WorkerState::Registering(Vec::new())).collect(),
            worker_ids: (0..spec.workers).map(worker_id).collect(),
            worker_reports: Vec::new(),
            collector: CollectorState::Registering(Vec::new()),
            collector_life: None,
            collector_disk: CollectorDisk::default(),
            collector_resumes: 0,
            restarted_members: BTreeSet::new(),
            store: Default::default(),
            restarted_workers: 0,
            turns_at_max_unsaved: 0,
            delivery: BTreeMap::new(),
            collector_incarnation: 1,
            streams: sources.streams.into_iter().map(|source| Stream::Waiting(Some(source))).collect(),
            names: sources.names.to_vec(),
            injector_started: false,
            fenced_injector: None,
            injector_beat_due: 0,
            start_ns: 0,
            sent: Vec::new(),
            events: Vec::new(),
            refusals: Vec::new(),
            fenced: Vec::new(),
            outcome: None,
            steps: 0,
            spec,
        };
        for index in 0..cluster.spec.workers {
            cluster.register(Member::Worker(index), Role::Worker, 0);
        }
        cluster.register(Member::Collector, Role::Collector, 0);
        let streams = cluster.spec.streams;
        cluster.register(Member::Injector(0), Role::Injector, streams);
        cluster
    }

    /// What the faults did so far to the frames of one link kind.
    pub fn link_stats(&self, link: LinkKind) -> LinkStats {
        self.stats.get(&link).cloned().unwrap_or_default()
    }

    /// The virtual time now, ns since the epoch.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Kills `member` now: it handles nothing more, and what is sent to it is lost. A dead
    /// worker is noticed by the router after the spec's failure time-out, as its heartbeats
    /// would.
    pub fn kill(&mut self, member: Member) {
        self.dead.insert(member);
        // What it held for the collector dies with it.
        self.delivery.remove(&member);
        if let Member::Worker(index) = member {
            self.schedule(self.now + self.spec.failure_timeout_ns, Scheduled::Detect(index));
        }
    }

    /// Pauses `member` for `pause` of virtual time: what arrives meanwhile waits, in order.
    pub fn pause(&mut self, member: Member, pause: Duration) {
        let until = self.now + pause.as_nanos() as u64;
        let until = self.paused_until.get(&member).map_or(until, |&already| already.max(until));
        self.paused_until.insert(member, until);
        self.schedule(until, Scheduled::Unpause(member));
    }

    /// Wakes a paused `member` now (SIGCONT): what waited for it is handled, and the injector's
    /// heartbeat and streams go on at once (another member's timers fire at the end its pause
    /// was planned for).
    pub fn wake(&mut self, member: Member) {
        if self.paused_until.contains_key(&member) {
            self.paused_until.insert(member, self.now);
            self.schedule(self.now, Scheduled::Unpause(member));
            if member == Member::Injector(0) && self.injector_started {
                self.schedule(self.now, Scheduled::Timer(member));
                for stream in 0..self.spec.streams {
                    self.schedule(self.now, Scheduled::InjectorStep(stream));
                }
            }
        }
    }

    /// Whether every injector stream has ended at the router (its marker came, or the router
    /// ended it without its injector).
    pub fn all_streams_ended(&self) -> bool {
        self.router.all_ended()
    }

    /// Starts another worker, which registers with the running cluster (a join); returns it.
    pub fn join(&mut self) -> Member {
        self.start_member(worker_id(self.workers.len()))
    }

    /// Starts killed `worker` again under its own id, as a supervisor restarts a process: a
    /// new member that registers with the running cluster (a join, which the router refuses
    /// while it still counts the old one as a member). Returns it.
    pub fn restart_worker(&mut self, worker: usize) -> Member {
        assert!(self.dead.contains(&Member::Worker(worker)), "only a killed worker is started again");
        let member = self.start_member(self.worker_ids[worker].clone());
        if let Member::Worker(index) = member {
            self.restarted_members.insert(index);
        }
        member
    }

    fn start_member(&mut self, id: String) -> Member {
        let member = Member::Worker(self.workers.len());
        self.workers.push(WorkerState::Registering(Vec::new()));
        self.worker_ids.push(id);
        self.register(member, Role::Worker, 0);
        member
    }

    /// Why the router's process ended, once it did: it released every node at the end, or
    /// gave the run up (no worker left, the collector lost beyond its retention).
    pub fn router_exit(&self) -> Option<&str> {
        self.router_exit.as_ref().map(|exit| exit.why.as_str())
    }

    /// Whether `member`'s process is gone: killed, exited on an error (fenced, told the run
    /// was given up), or, for the router, ended. A worker that finished its run is not.
    pub fn exited(&self, member: Member) -> bool {
        self.dead.contains(&member)
    }

    /// Whether killed `worker` has been failed over: the router counts it no more.
    pub fn failed_over(&self, worker: usize) -> bool {
        self.dead.contains(&Member::Worker(worker))
            && self.router_index(worker).is_some_and(|i| !self.router.is_member(i))
    }

    /// Whether the run can no longer end with the collector's summary: the router gave it up
    /// (an error, not the end of a run that went its course) and no collector runs to write
    /// what it has (a real run ends there, every process with its error).
    pub fn given_up(&self) -> bool {
        self.router_exit.as_ref().is_some_and(|exit| exit.end != router::End::Released) && !self.collector_running()
    }

    /// Whether the router's process is gone for longer than the failure time-out: what a
    /// node's watch of its connection to the router reports as lost (the transport's liveness
    /// watch, which the harness stands in for).
    pub(super) fn router_lost(&self) -> bool {
        self.router_exit.as_ref().is_some_and(|exit| self.now.saturating_sub(exit.at) > self.spec.failure_timeout_ns)
    }

    /// Whether the router gave the run up because its last worker was failed over.
    pub fn out_of_workers(&self) -> bool {
        self.router_exit.as_ref().is_some_and(|exit| exit.end == router::End::OutOfWorkers)
    }

    /// The router's index of worker member `worker` (its place in the run), once it has one.
    pub(super) fn router_index(&self, worker: usize) -> Option<usize> {
        self.ring.iter().position(|&member| member == worker)
    }

    /// Stops `worker` as SIGTERM does: its policy asks the router to drain it, its symbols
    /// move to the others, then it is retired.
    pub fn leave(&mut self, worker: usize) {
        self.stop_worker(worker);
    }

    /// Asks the router to remove `worker`, as `cep cluster remove` does: the answer goes to
    /// the operator, and refusals are kept with the others.
    pub fn remove(&mut self, worker: usize) {
        let leave = cep_core::rescale::Leave { worker: self.worker_ids[worker].clone() };
        self.send(Member::Operator, Member::Router, Payload::Request(Member::Operator, leave.encode(0)));
    }

    /// Deploys rules (`text`, named after `origin`) as `cep deploy` does: the router switches
    /// every worker between the same ticks; the answer, or the refusal, goes to the operator.
    pub fn deploy(&mut self, origin: &str, text: &str) {
        let deploy = cep_core::control::Deploy { origin: origin.into(), text: text.into() };
        self.send(Member::Operator, Member::Router, Payload::Request(Member::Operator, deploy.encode(0)));
    }

    /// The rules the run started with and every deployment the router made, with where each
    /// stream switches.
    pub fn rules_history(&self) -> &[cep_core::results::RulesEpoch] {
        self.router.rules_history()
    }

    /// A stored part a failover would restore from that the checkpoint store lacks (removed
    /// too early, or never written), named; none when the store holds every one.
    pub fn missing_checkpoint_part(&self) -> Option<String> {
        self.router.restorable_parts().into_iter().find_map(|part| {
            let key = cep_core::store::PartKey { checkpoint: part.id, worker: part.from, part: part.part };
            let held = self.store.holds(key, part.stored.bytes);
            (!held).then(|| format!("checkpoint {} part {} of worker {}", part.id, part.part, part.from))
        })
    }

    /// Whether the worker with this index is running (registered, not finished, not killed).
    pub fn is_running(&self, worker: usize) -> bool {
        matches!(self.workers.get(worker), Some(WorkerState::Running(_)))
            && !self.dead.contains(&Member::Worker(worker))
    }

    /// Whether the worker with this index is running and active at the router (on the ring,
    /// neither joining nor leaving), and not asked to stop.
    pub fn is_active(&self, worker: usize) -> bool {
        let stopping = matches!(&self.workers[worker], WorkerState::Running(w) if w.stop_asked());
        self.is_running(worker) && self.router_index(worker).is_some_and(|i| self.router.is_active(i)) && !stopping
    }

    /// How many workers are running and active at the router ([`Self::is_active`]).
    pub fn active_workers(&self) -> usize {
        (0..self.workers.len()).filter(|&index| self.is_active(index)).count()
    }

    /// Whether the router is moving symbols (a worker joining or leaving).
    pub fn rescaling(&self) -> bool {
        self.router.rescaling()
    }

    /// Ticks processed so far by the worker with this index (0 before it starts).
    pub fn processed_by(&self, worker: usize) -> u64 {
        match &self.workers[worker] {
            WorkerState::Running(worker) => worker.processed(),
            _ => self.worker_reports.iter().find(|r| r.id == self.worker_ids[worker]).map_or(0, |r| r.processed),
        }
    }

    /// Ticks the injector has sent so far.
    pub fn sent_so_far(&self) -> u64 {
        self.streams.iter().map(Stream::sent).sum()
    }

    /// Runs until `condition` holds (true) or the run is over (false).
    pub fn run_until(&mut self, mut condition: impl FnMut(&LocalCluster) -> bool) -> bool {
        loop {
            if condition(self) {
                return true;
            }
            if self.outcome.is_some() || !self.step() {
                return condition(self);
            }
        }
    }

    /// Runs to the end: the collector has everything, or gives up after its idle time-out.
    pub fn run(mut self) -> Outcome {
        while self.outcome.is_none() {
            assert!(self.step(), "the simulation ran out of events before the collector finished");
        }
        self.outcome.take().expect("checked above")
    }

    /// Whether the run is over (the collector finished; [`Self::run`] returns at once).
    pub fn is_over(&self) -> bool {
        self.outcome.is_some()
    }

    /// Every tick the injector sent so far, in order per stream.
    pub fn sent(&self) -> &[SentTick] {
        match &self.outcome {
            Some(outcome) => &outcome.sent,
            None => &self.sent,
        }
    }

    /// outputs.csv as the collector has written it so far (cut back when a restarted
    /// collector resumes).
    pub fn outputs_csv(&self) -> std::cell::Ref<'_, Vec<u8>> {
        self.collector_disk.csv.0.borrow()
    }

    /// How many times a restarted collector cut outputs.csv back to its last save (what a
    /// reader of the file read since may be gone, and written over in the same event).
    pub fn collector_resumes(&self) -> u64 {
        self.collector_resumes
    }

    /// How many workers started again under a killed one's id the router took in.
    pub fn restarted_workers(&self) -> u64 {
        self.restarted_workers
    }

    /// How many turns workers took holding their input at their bound of unsaved frames.
    pub fn turns_at_max_unsaved(&self) -> u64 {
        self.turns_at_max_unsaved
    }

    /// Whether the collector has saved a state it could resume from.
    pub fn collector_saved(&self) -> bool {
        self.collector_disk.state.is_some()
    }

    /// Whether the collector is running (registered, and not finished or dead).
    pub fn collector_running(&self) -> bool {
        matches!(self.collector, CollectorState::Running(_)) && !self.dead.contains(&Member::Collector)
    }

    /// The running collector's accounts now: its rolling summary.json's counts.
    pub fn accounts(&self) -> Option<cep_core::results::Summary> {
        match &self.collector {
            CollectorState::Running(collector) if !self.dead.contains(&Member::Collector) => Some(collector.accounts()),
            _ => None,
        }
    }

    /// Events handled so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Handles the next event; false when there is none left. A test that checks invariants
    /// between events drives the run with this ([`crate::sweep`]).
    pub fn step(&mut self) -> bool {
        self.steps += 1;
        assert!(self.steps < MAX_EVENTS, "the run did not end within {MAX_EVENTS} events");
        let Some(((at, _), event)) = self.queue.pop_first() else {
            return false;
        };
        self.now = self.now.max(at);
        match event {
            Scheduled::Deliver { from, to, payload } => self.deliver(from, to, payload),
            Scheduled::Timer(member) => self.timer(member),
            Scheduled::InjectorStep(stream) => self.injector_step(stream),
            Scheduled::Detect(index) => self.router_detects_death(index),
            Scheduled::Unpause(member) => {
                if self.paused_until.get(&member).is_some_and(|&until| until <= self.now) {
                    self.paused_until.remove(&member);
                    // The worst order for a router that wakes: its timers run before it reads
                    // what waited in its sockets (the workers' heartbeats among it).
                    if member == Member::Router && self.outcome.is_none() && self.router_exit.is_none() {
                        self.router_timer_turn();
                    }
                    for (from, payload) in self.parked.remove(&member).unwrap_or_default() {
                        self.deliver(from, member, payload);
                    }
                }
            }
            Scheduled::Release { from, to, control } => {
                let link = self.links.get_mut(&(from, to, control)).expect("a held frame's link exists");
                if let Some(payload) = link.held.take() {
                    let at = link.last_at.max(self.now);
                    link.last_at = at;
                    self.schedule(at, Scheduled::Deliver { from, to, payload });
                }
            }
        }
        true
    }

    fn schedule(&mut self, at: u64, event: Scheduled) {
        self.next_event += 1;
        self.queue.insert((at, self.next_event), event);
    }

    fn register(&mut self, member: Member, role: Role, streams: u32) {
        self.register_as(member, role, streams, 0);
    }

    fn register_as(&mut self, member: Member, role: Role, streams: u32, resuming: u64) {
        let registration = Register {
            role,
            id: match member {
                Member::Worker(index) => self.worker_ids[index].clone(),
                _ => format!("{member:?}").to_lowercase(),
            },
            endpoint: format!("inproc://{member:?}"),
            streams,
            warmup_ns: 0,
            clock_endpoint: String::new(),
            resuming,
        };
        self.send(member, Member::Router, Payload::Request(member, registration.encode(0)));
    }

    fn deliver(&mut self, from: Member, to: Member, payload: Payload) {
        if self.dead.contains(&to) {
            self.stats.entry(LinkKind::of(from, to, !matches!(payload, Payload::Data(_)))).or_default().to_the_dead +=
                1;
            return;
        }
        if self.paused_until.contains_key(&to) {
            // Waits in its queue, in arrival order, for the end of the pause. (Scheduling each
            // frame again for the pause's end would put a frame that was delayed, and so
            // arrives during the pause, behind frames sent after it: the seed sweep found that.)
            self.parked.entry(to).or_default().push((from, payload));
            return;
        }
        match (to, payload) {
            (Member::Router, Payload::Request(client, body)) => {
                let mut out = self.outbox();
                self.router.control(client.client_id(), &body, Monotonic::from_ns(self.now), &mut out);
                self.route_from(Member::Router, out);
                // The cluster may be complete, or the last end markers may have waited for a
                // move that this request finished.
                self.router_turn();
            }
            (Member::Router, Payload::Data(bytes)) => {
                let mut out = self.outbox();
                self.router.data(&bytes, self.now, &mut out);
                // Smart batching: flush when nothing more is waiting for the router now.
                if !self.router_has_input_now() {
                    self.router.flush(&mut out);
                }
                self.route_from(Member::Router, out);
                self.router_turn();
            }
            (Member::Worker(index), Payload::Answer(answer)) => self.worker_answer(index, &answer),
            (Member::Worker(index), Payload::Data(bytes)) => {
                if let WorkerState::Registering(queued) = &mut self.workers[index] {
                    queued.push(bytes);
                    return;
                }
                self.worker_data(index, &bytes);
            }
            (Member::Collector, Payload::Answer(answer)) => self.collector_answer(&answer),
            (Member::Collector, Payload::Data(bytes)) => {
                if let CollectorState::Registering(queued) = &mut self.collector {
                    queued.push((from, bytes));
                    return;
                }
                if let (CollectorState::Running(collector), Some(life)) =
                    (&mut self.collector, &mut self.collector_life)
                {
                    life.frame_arrived(Monotonic::from_ns(self.now));
                    collector.handle(&bytes, self.now).expect("memory takes every row");
                    // With delivery, checkpoints are confirmed in the saves (the policy saves);
                    // without, at once, in a notice that saves nothing else.
                    let confirmed = if self.spec.sequenced { Vec::new() } else { collector.take_confirmations() };
                    if !confirmed.is_empty() {
                        let notice = cep_core::delivery::Saved { confirmed, ..Default::default() };
                        self.send(
                            Member::Collector,
                            Member::Router,
                            Payload::Request(Member::Collector, notice.encode(0)),
                        );
                    }
                    self.collector_turn();
                }
            }
            (Member::Operator, Payload::Answer(answer)) => {
                let frame = Frame::read(&answer, usize::MAX).expect("the router answers with frames");
                if frame.kind() == FrameKind::Refused {
                    let reason = frame.body::<Refused>().expect("a reason").reason;
                    self.refusals.push((Member::Operator, reason));
                }
            }
            (Member::Injector(stream), Payload::Answer(answer)) => {
                let frame = Frame::read(&answer, usize::MAX).expect("the router answers with frames");
                if frame.kind() == FrameKind::Ready {
                    let ready: Ready = frame.body().expect("a Ready frame");
                    self.start_injector(ready.start_ns);
                } else if frame.kind() == FrameKind::Fenced {
                    // Taken for dead: it stops at once, as the process exits.
                    let reason = frame.body::<Fenced>().expect("a reason").reason;
                    self.fenced_injector.get_or_insert(reason);
                } else if frame.kind() == FrameKind::Abandoned {
                    // The router gave the run up: the process exits with its reason.
                    self.dead.insert(Member::Injector(0));
                } else if frame.kind() != FrameKind::EndAck {
                    panic!("{stream}: the router refused the injector: {:?}", frame.body::<Refused>());
                }
            }
            (to, payload) => panic!("{to:?} cannot take {payload:?}"),
        }
    }

    fn outbox(&self) -> Recorded {
        Recorded { clock: self.now, ..Default::default() }
    }

    /// Sends what a member's core put out, each frame to its member.
    fn route_from(&mut self, from: Member, mut out: Recorded) {
        self.events.extend(out.events.drain(..).map(|event| (from, event)));
        // What the core passed on of the collector (the router its own, a worker the notices
        // it was pushed): the sender's log follows a collector that took over, drops what is
        // saved and sends again what the collector missed, as the transport does.
        let mut resend = false;
        if let Some(log) = self.delivery.get_mut(&from) {
            for (_, _, incarnation) in out.moved.drain(..) {
                if incarnation > log.incarnation() {
                    log.readdress(incarnation);
                    resend = true;
                }
            }
            for (position, asked) in out.saved.drain(..) {
                log.saved(position);
                resend |= asked;
            }
        }
        if resend {
            self.resend(from);
        }
        for (index, endpoint) in out.connected.drain(..) {
            let member = (0..self.workers.len())
                .find(|&i| format!("inproc://{:?}", Member::Worker(i)) == endpoint)
                .expect("a joining worker is a member");
            assert_eq!(index as usize, self.ring.len(), "workers join with the next index");
            self.ring.push(member);
        }
        for (peer, frame) in out.take() {
            match peer {
                Peer::Worker(index) => self.send(from, Member::Worker(self.ring[index as usize]), Payload::Data(frame)),
                Peer::Collector => {
                    let frame = if self.spec.sequenced { self.sequence(from, &frame) } else { frame };
                    self.send(from, Member::Collector, Payload::Data(frame))
                }
                Peer::Router => {
                    self.worker_asks(from, &frame);
                    self.send(from, Member::Router, Payload::Request(from, frame))
                }
                Peer::Client(client) => {
                    let to = self.member_of_client(&client);
                    self.send(from, to, Payload::Answer(frame));
                }
            }
        }
    }

    fn member_of_client(&self, client: &[u8]) -> Member {
        let members = (0..self.workers.len())
            .map(Member::Worker)
            .chain([Member::Collector, Member::Router, Member::Operator])
            .chain((0..self.spec.streams).map(Member::Injector));
        members.into_iter().find(|m| m.client_id() == client).expect("every client is a member")
    }

    fn timer(&mut self, member: Member) {
        if self.dead.contains(&member) || self.outcome.is_some() {
            return;
        }
        match member {
            Member::Worker(index) => self.worker_timer(index),
            // A stopped process does nothing, its timers included: they fire when it wakes.
            _ if self.paused_until.contains_key(&member) => {
                self.schedule(self.paused_until[&member], Scheduled::Timer(member));
            }
            Member::Router => {
                self.router_timer_turn();
                if self.router_exit.is_none() {
                    self.schedule(self.now + ROUTER_TIMER_NS, Scheduled::Timer(member));
                }
            }
            Member::Collector => {
                self.collector_turn();
                if let CollectorState::Running(_) = &self.collector {
                    self.schedule(self.now + TIMER_NS, Scheduled::Timer(member));
                }
            }
            Member::Injector(_) if self.fenced_injector.is_none() => self.injector_heartbeat(),
            _ => {}
        }
    }
}

/// The id of the spec's worker `index`.
pub fn worker_id(index: usize) -> String {
    format!("worker-{index}")
}
