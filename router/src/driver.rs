//! The router's driver: binds the data and control sockets, feeds the core
//! ([`crate::router`]) what they receive with its arrival time, and sends what the core puts
//! out, through the three phases of a run (gathering, routing, ending).

use crate::config::RouterConfig;
use crate::deploying::Deployments;
use crate::rendezvous::WorkerCount;
use crate::router::{Router, RouterSettings};
use cep_core::clock::now_ns;
use cep_core::identity::{Role, ROUTER_ID};
use cep_core::report::RouterReport;
use cep_transport::clock::synchronise;
use cep_transport::control::ControlServer;
use cep_transport::delivery::CollectorLink;
use cep_transport::driving::{receive_loop, Flow, Received, SocketOutbox};
use cep_transport::{Context, Pull, Push, Server, SocketOptions, TransportError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// How far ahead of the answers the run starts: far enough for every node to measure its
/// clock offset first.
const START_DELAY_NS: u64 = 100_000_000;

/// Control requests served between two data frames at most.
const CONTROL_PER_TURN: usize = 16;

/// How long the router, once the collector has everything, still answers nodes that have
/// not asked for the end yet (a dead one never will).
const LATE_ASK_GRACE: Duration = Duration::from_secs(5);

/// Errors that stop the router.
#[derive(Debug, thiserror::Error)]
pub enum RouterError {
    /// The configuration does not hold.
    #[error("invalid router configuration: {0}")]
    Config(String),
    /// The rules file is missing or does not check.
    #[error("{0}")]
    Rules(String),
    /// A socket failed.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The announce file could not be written.
    #[error("cannot write the announce file {0}")]
    Announce(String),
    /// The cluster did not assemble within the start time-out.
    #[error("the cluster was not complete within {waited:?}: {missing}")]
    Incomplete {
        /// How long the router waited.
        waited: Duration,
        /// Who was still missing.
        missing: String,
    },
    /// Every worker died.
    #[error("{0}")]
    NoWorkerLeft(String),
    /// The collector died and no restarted one took over within the retention time.
    #[error("the collector is lost ({cause}) and none took over within {retention:?} (--collector-retention)")]
    CollectorLost {
        /// How it was noticed.
        cause: String,
        /// How long the router waited for a restarted one.
        retention: Duration,
    },
    /// Asked to stop before the run started.
    #[error("shut down before the cluster was complete ({0})")]
    ShutdownBeforeStart(String),
}

/// Runs the router in its own ZeroMQ context until every stream has ended (or `shutdown` is
/// raised) and returns the report it also sent to the collector.
pub fn run(config: RouterConfig, shutdown: Arc<AtomicBool>) -> Result<RouterReport, RouterError> {
    let context = config.security.context().map_err(|error| RouterError::Config(error.to_string()))?;
    run_in(&context, config, shutdown)
}

/// Runs the router on `context` (shared by every role of an in-process cluster).
pub fn run_in(context: &Context, config: RouterConfig, shutdown: Arc<AtomicBool>) -> Result<RouterReport, RouterError> {
    config.validate().map_err(RouterError::Config)?;
    let source = cep_query::RulesSource::load(config.rules.as_deref()).map_err(RouterError::Rules)?;
    let options = SocketOptions {
        high_water_mark: config.hwm,
        failure_timeout: Some(config.failure_timeout),
        max_message_bytes: cep_transport::socket::message_limit(config.max_frame_bytes),
        ..SocketOptions::default()
    };
    let control = ControlServer::bind(context, &config.control)?;
    let input = Pull::bind(context, &config.listen, &options, &[Role::Injector])?;
    if let Some(path) = &config.announce {
        announce(path, input.endpoint(), control.endpoint())?;
    }
    info!(
        data = input.endpoint(),
        control = control.endpoint(),
        workers = config.workers,
        streams = config.streams,
        "router listening"
    );

    let metrics = crate::metrics::RouterMetrics::register(config.workers, config.streams);
    let settings = RouterSettings {
        workers: match config.workers {
            0 => WorkerCount::Settle(config.settle),
            n => WorkerCount::Exactly(n),
        },
        streams: config.streams,
        vnodes: config.vnodes,
        batch: config.batch,
        max_frame_bytes: config.max_frame_bytes,
        allowed_lateness_ns: config.allowed_lateness.map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        slice_symbols: config.move_slice,
        max_held_ticks: config.max_held,
        move_timeout_ns: u64::try_from(config.move_timeout.as_nanos()).unwrap_or(u64::MAX),
        checkpoint_every_ns: u64::try_from(config.checkpoint_every.as_nanos()).unwrap_or(u64::MAX),
        max_replay_bytes: config.max_replay,
    };
    let mut router = Router::new(settings, Deployments::start(&source).map_err(RouterError::Rules)?);
    gather(&mut router, &control, &config, &shutdown, &metrics)?;

    // Stamps are taken in the collector's time: measure this host's offset to it first.
    let (clock_endpoint, collector_key) = router.collector_clock().unwrap_or_default();
    let clock = synchronise(context, clock_endpoint, collector_key, &shutdown)?;
    let start = router.start(now_ns() + START_DELAY_NS);
    let workers: Vec<Push> = start
        .workers
        .iter()
        .map(|w| Push::connect(context, &w.endpoint, Server::Key(&w.key), &options))
        .collect::<Result<_, _>>()?;
    let collector = CollectorLink::connect(
        context,
        &start.collector,
        &start.collector_key,
        &options,
        ROUTER_ID,
        1,
        ROUTER_MAX_UNSAVED,
    )?;
    let mut out = SocketOutbox::new(workers, Some(collector), Some(&control), &shutdown).connecting(context, options);
    let mut collector_watch = CollectorWatch { retention: config.collector_retention, lost_since: None };
    router.announce(clock, &mut out);
    out.check()?;
    info!(workers = ?router.worker_ids(), collector = start.collector, "cluster complete, run started");
    metrics.started(&router.worker_ids(), config.streams);

    let mut last_control = Instant::now();
    receive_loop(&input, Duration::from_millis(50), |received| {
        match received {
            Received::Frame { bytes, input, sender } => {
                router.data_from(bytes, sender, now_ns(), &mut out);
                if !input.more_waiting() {
                    router.flush(&mut out);
                }
            }
            Received::Idle => router.flush(&mut out),
        }
        // While symbols move, their state arrives on the control socket: serve it at once.
        if router.rescaling() || last_control.elapsed() > Duration::from_millis(100) {
            router.tick(monotonic_ns(), &mut out);
            // A bounded number per turn, so a client flooding requests cannot stall routing.
            for _ in 0..CONTROL_PER_TURN {
                let Some(request) = control.recv(Duration::ZERO)? else { break };
                router.control_from(request.client, request.peer.as_ref(), &request.body, monotonic_ns(), &mut out);
                out.check()?;
            }

            if last_control.elapsed() > Duration::from_millis(100) {
                out.check_peers();
                collector_watch.check(&mut out)?;
                // Refused connections are rejections like any other, in the metrics as they come.
                router.refused_connections(&context.refusals());
                router.publish(&metrics);
                last_control = Instant::now();
            }
        }
        fail_over(&mut router, &mut out, Report::Send)?;
        out.check()?;
        // Read no input while too many ticks are held for moving symbols (until their state
        // arrives) or a worker's queue is full (until it takes what waits for it); control
        // requests are served meanwhile, so a worker waiting for the collector to save, or a
        // restarted collector, is answered.
        hold_input(&mut router, &mut out, &control, &shutdown, &mut collector_watch)?;
        let done = router.all_ended() || shutdown.load(Ordering::Relaxed);
        Ok::<_, RouterError>(if done { Flow::Stop } else { Flow::Continue })
    })?;
    // What is batched must reach the workers (a failure here fails the run); the report is
    // then only the collector's to miss.
    router.flush(&mut out);
    hold_input(&mut router, &mut out, &control, &shutdown, &mut collector_watch)?;
    out.check()?;
    router.refused_connections(&context.refusals());
    let report = router.finish(&mut out);
    router.publish(&metrics);
    if let Err(error) = out.check() {
        warn!(%error, "router report not delivered");
    }
    // Keep every socket open until the collector has everything (see `control::Ending`).
    let mut ending_since = Instant::now();
    // (A lost collector has its retention time to come back, however long the end takes.)
    while !router.collector_finished()
        && !shutdown.load(Ordering::Relaxed)
        && (ending_since.elapsed() < config.end_timeout || collector_watch.lost_since.is_some())
    {
        if let Some(request) = control.recv(Duration::from_millis(100))? {
            router.control_from(request.client, request.peer.as_ref(), &request.body, monotonic_ns(), &mut out);
        }
        // Frames a failover sent a survivor whose queue was full.
        out.flush_pending();
        // A worker that dies now: the collector must not wait for its report.
        out.check_peers();
        if collector_watch.check(&mut out)? {
            // A collector back (or a restarted one): it gets the whole end time-out to finish.
            ending_since = Instant::now();
        }
        fail_over(&mut router, &mut out, Report::Sent)?;
        out.check()?;
    }
    if !router.collector_finished() && !shutdown.load(Ordering::Relaxed) {
        warn!(waited = ?config.end_timeout, "the collector never said it had everything; ending anyway");
    }
    // A node that sent its report just before the collector finished may ask a moment later:
    // answer it too, rather than leave it waiting for its end time-out.
    let released_at = Instant::now();
    while !router.every_node_asked() && !shutdown.load(Ordering::Relaxed) && released_at.elapsed() < LATE_ASK_GRACE {
        if let Some(request) = control.recv(Duration::from_millis(50))? {
            router.control_from(request.client, request.peer.as_ref(), &request.body, monotonic_ns(), &mut out);
        }
    }
    // What failovers during the end left waiting for a worker goes before the nodes are
    // released (bounded: a worker that takes nothing is dead or stuck).
    let draining_since = Instant::now();
    while out.has_pending() && !shutdown.load(Ordering::Relaxed) && draining_since.elapsed() < LATE_ASK_GRACE {
        out.wait_for_room(Duration::from_millis(10));
        out.flush_pending();
        out.check_peers();
    }
    if out.has_pending() {
        warn!("frames for a worker that took none in {LATE_ASK_GRACE:?} were not delivered");
    }
    router.release(&mut out);
    if shutdown.load(Ordering::Relaxed) {
        for push in out.workers() {
            push.shorten_linger(Duration::from_millis(500));
        }
        if let Some(collector) = out.collector() {
            collector.shorten_linger(Duration::from_millis(500));
        }
    }
    let rejected: u64 = report.rejected.values().sum();
    info!(routed = report.routed, rejected, "router done");
    Ok(report)
}

/// While the router reads no input (ticks held for moving symbols, or a worker's full queue):
/// serves control requests, gives the workers what waits for them, watches the peers.
fn hold_input(
    router: &mut Router,
    out: &mut SocketOutbox<'_>,
    control: &ControlServer,
    shutdown: &AtomicBool,
    collector_watch: &mut CollectorWatch,
) -> Result<(), RouterError> {
    if router.accepting_input() && !out.has_pending() {
        return Ok(());
    }
    let mut last_look = Instant::now();
    loop {
        if shutdown.load(Ordering::Relaxed) {
            return Ok(());
        }
        out.flush_pending();
        out.check()?;
        if router.accepting_input() && !out.has_pending() {
            return Ok(());
        }
        // Woken by room in a waiting worker's queue or by a control request.
        let wait = if out.has_pending() {
            out.wait_for_room(Duration::from_millis(10));
            Duration::ZERO
        } else {
            Duration::from_millis(10)
        };
        for _ in 0..CONTROL_PER_TURN {
            let Some(request) = control.recv(wait)? else { break };
            router.control_from(request.client, request.peer.as_ref(), &request.body, monotonic_ns(), out);
            out.check()?;
        }
        router.tick(monotonic_ns(), out);
        if last_look.elapsed() > Duration::from_millis(50) {
            // The worker whose snapshot or queue is awaited may be the one that died.
            out.check_peers();
            collector_watch.check(out)?;
            fail_over(router, out, Report::Send)?;
            last_look = Instant::now();
        }
    }
}

/// Fails over every worker found dead (failing one over sends to the others, which may be
/// found dead in turn); an error when none is left.
fn fail_over(router: &mut Router, out: &mut SocketOutbox<'_>, report: Report) -> Result<(), RouterError> {
    loop {
        let lost = out.take_lost();
        if lost.is_empty() {
            return Ok(());
        }
        for (worker, reason) in lost {
            if let Err(error) = router.worker_lost(worker, &reason, out) {
                if report == Report::Send {
                    router.finish(out);
                }
                return Err(RouterError::NoWorkerLeft(error));
            }
        }
    }
}

/// Bytes of frames for the collector the router holds (reported by `full()`, which the router
/// does not wait on): its own frames are few and small (reports, rescale and failover records).
const ROUTER_MAX_UNSAVED: usize = 64 << 20;

/// How long the collector has been lost, against the time a restarted one has to take over.
struct CollectorWatch {
    retention: Duration,
    lost_since: Option<Instant>,
}

impl CollectorWatch {
    /// An error once the collector has been lost for longer than the retention time; true
    /// when a lost one is back (reached again, or a restarted one took over).
    fn check(&mut self, out: &mut SocketOutbox<'_>) -> Result<bool, RouterError> {
        let Some(cause) = out.collector().and_then(|collector| collector.lost().map(str::to_string)) else {
            return Ok(self.lost_since.take().is_some());
        };
        let since = *self.lost_since.get_or_insert_with(|| {
            warn!(retention = ?self.retention, "waiting for a restarted collector to take over (the run goes on)");
            Instant::now()
        });
        if since.elapsed() > self.retention {
            return Err(RouterError::CollectorLost { cause, retention: self.retention });
        }
        Ok(false)
    }
}

/// Whether the router's report has gone to the collector yet.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Report {
    /// Not yet: a run that ends now sends it first.
    Send,
    /// Already.
    Sent,
}

/// Serves registrations (and deployments) until the cluster is complete.
fn gather(
    router: &mut Router,
    control: &ControlServer,
    config: &RouterConfig,
    shutdown: &AtomicBool,
    metrics: &crate::metrics::RouterMetrics,
) -> Result<(), RouterError> {
    let mut out = SocketOutbox::new(Vec::new(), None, Some(control), shutdown);
    let mut last_log = Instant::now();
    let listening_since = Instant::now();
    while !router.can_start(monotonic_ns()) {
        if shutdown.load(Ordering::Relaxed) {
            return Err(RouterError::ShutdownBeforeStart(router.waiting_for()));
        }
        if !config.start_timeout.is_zero() && listening_since.elapsed() > config.start_timeout {
            return Err(RouterError::Incomplete { waited: config.start_timeout, missing: router.waiting_for() });
        }
        if let Some(request) = control.recv(Duration::from_millis(100))? {
            router.control_from(request.client, request.peer.as_ref(), &request.body, monotonic_ns(), &mut out);
            metrics.registered(router.registered());
        }
        if last_log.elapsed() > Duration::from_secs(5) {
            info!("waiting for {}", router.waiting_for());
            last_log = Instant::now();
        }
    }
    Ok(())
}

/// Writes the bound endpoints for whoever started the router; written whole, then renamed,
/// so a reader never sees half a file.
fn announce(path: &std::path::Path, data: &str, control: &str) -> Result<(), RouterError> {
    let partial = path.with_extension("partial");
    std::fs::write(&partial, format!("data={data}\ncontrol={control}\n"))
        .and_then(|()| std::fs::rename(&partial, path))
        .map_err(|error| RouterError::Announce(format!("{}: {error}", path.display())))
}

/// Nanoseconds on a monotonic clock (from the first call in this process): what the settle
/// timer runs on, so that a step of the wall clock cannot start or hold a run.
fn monotonic_ns() -> u64 {
    static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    u64::try_from(ORIGIN.get_or_init(Instant::now).elapsed().as_nanos()).unwrap_or(u64::MAX)
}
