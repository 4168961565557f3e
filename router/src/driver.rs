//! The router's driver: binds the data and control sockets, feeds the core
//! ([`crate::router`]) what they receive with its arrival time, and sends what the core puts
//! out, through the three phases of a run (gathering, routing, ending).

use crate::config::RouterConfig;
use crate::deploying::Deployments;
pub use crate::error::RouterError;
use crate::lifecycle::{CollectorWatch, EndObserved, EndStep, Ending, Gathering};
use crate::router::Router;
use cep_core::clock::{now_ns, Monotonic};
use cep_core::identity::{Role, ROUTER_ID};
use cep_core::report::RouterReport;
use cep_transport::clock::synchronise;
use cep_transport::control::ControlServer;
use cep_transport::delivery::CollectorLink;
use cep_transport::driving::{receive_loop, Flow, Received, SocketOutbox};
use cep_transport::{Context, Pull, Push, Server, SocketOptions};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// How far ahead of the answers the run starts: far enough for every node to measure its
/// clock offset first.
const START_DELAY_NS: u64 = 100_000_000;

/// Control requests served between two data frames at most.
const CONTROL_PER_TURN: usize = 16;

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
    let mut router = Router::new(config.settings(), Deployments::start(&source).map_err(RouterError::Rules)?);
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
    let mut collector_watch = CollectorWatch::new(config.collector_retention);
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
            router.tick(Monotonic::now(), &mut out);
            serve(&mut router, &control, &mut out, Duration::ZERO)?;

            if last_control.elapsed() > Duration::from_millis(100) {
                out.check_peers();
                watch_collector(&mut collector_watch, &mut out)?;
                // Refused connections are rejections like any other, in the metrics as they come.
                router.refused_connections(&context.refusals());
                router.publish(&metrics);
                last_control = Instant::now();
            }
        }
        fail_over(&mut router, &mut out)?;
        out.check()?;
        // Read no input while too many ticks are held for moving symbols (until their state
        // arrives) or a worker's queue is full (until it takes what waits for it); control
        // requests are served meanwhile, so state hand-offs, the collector's saves (and the
        // notices they push to waiting workers) and a restarted collector are taken.
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
    // Keep every socket open until the collector has everything (see `lifecycle::Ending`).
    let mut ending = Ending::new(config.end_timeout, Monotonic::now());
    loop {
        let observed = EndObserved {
            collector_lost: collector_watch.is_lost(),
            pending: out.has_pending(),
            shutdown: shutdown.load(Ordering::Relaxed),
        };
        match ending.turn(Monotonic::now(), &router, observed) {
            EndStep::Release => break,
            EndStep::Drain => {
                out.wait_for_room(Duration::from_millis(10));
                out.flush_pending();
                out.check_peers();
                continue;
            }
            EndStep::AnswerLate => {
                serve(&mut router, &control, &mut out, Duration::from_millis(50))?;
                continue;
            }
            EndStep::Wait => serve(&mut router, &control, &mut out, Duration::from_millis(50))?,
        };
        // Frames a failover sent a survivor whose queue was full; a worker that dies now (the
        // collector must not wait for its report); a collector lost or back.
        out.flush_pending();
        out.check_peers();
        if watch_collector(&mut collector_watch, &mut out)? {
            ending.collector_back(Monotonic::now());
        }
        fail_over(&mut router, &mut out)?;
        out.check()?;
    }
    if out.has_pending() {
        warn!("frames for a worker that took none were not delivered (stopped before the drain ended)");
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
        serve(router, control, out, wait)?;
        router.tick(Monotonic::now(), out);
        if last_look.elapsed() > Duration::from_millis(50) {
            // The worker whose snapshot or queue is awaited may be the one that died.
            out.check_peers();
            watch_collector(collector_watch, out)?;
            fail_over(router, out)?;
            last_look = Instant::now();
        }
    }
}

/// Serves the control requests waiting (the first waited for up to `wait`), a bounded number
/// per turn so that a client flooding requests cannot stall routing; true if any came.
fn serve(
    router: &mut Router,
    control: &ControlServer,
    out: &mut SocketOutbox<'_>,
    wait: Duration,
) -> Result<bool, RouterError> {
    for served in 0..CONTROL_PER_TURN {
        let Some(request) = control.recv(if served == 0 { wait } else { Duration::ZERO })? else {
            return Ok(served > 0);
        };
        router.control_from(request.client, request.peer.as_ref(), &request.body, Monotonic::now(), out);
        out.check()?;
    }
    Ok(true)
}

/// Fails over every worker found dead (failing one over sends to the others, which may be
/// found dead in turn); an error when none is left (the core has sent its report).
fn fail_over(router: &mut Router, out: &mut SocketOutbox<'_>) -> Result<(), RouterError> {
    loop {
        let lost = out.take_lost();
        if lost.is_empty() {
            return Ok(());
        }
        for (worker, reason) in lost {
            router.worker_lost(worker, &reason, out).map_err(RouterError::NoWorkerLeft)?;
        }
    }
}

/// Bytes of frames for the collector the router holds (reported by `full()`, which the router
/// does not wait on): its own frames are few and small (reports, rescale and failover records).
const ROUTER_MAX_UNSAVED: usize = 64 << 20;

/// What the transport says of the collector, to the watch; true when a lost one is back.
fn watch_collector(watch: &mut CollectorWatch, out: &mut SocketOutbox<'_>) -> Result<bool, RouterError> {
    let lost = out.collector().and_then(|collector| collector.lost());
    watch.observe(Monotonic::now(), lost).map_err(RouterError::from)
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
    let mut gathering = Gathering::new(config.start_timeout, Monotonic::now());
    while !gathering.turn(Monotonic::now(), router, shutdown.load(Ordering::Relaxed))? {
        if serve(router, control, &mut out, Duration::from_millis(100))? {
            metrics.registered(router.registered());
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
