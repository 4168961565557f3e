//! The router's driver: binds the data and control sockets and, in one loop over every
//! socket, feeds the core ([`crate::router`]) what they receive with its arrival time, sends
//! what the core puts out, and carries out what its run policy ([`crate::lifecycle`]) decides
//! at each turn (start, finish, release).

use crate::config::RouterConfig;
use crate::deploying::Deployments;
pub use crate::error::RouterError;
use crate::lifecycle::{Change, Observed, RunPolicy};
use crate::router::Router;
use cep_core::clock::{now_ns, Monotonic};
use cep_core::identity::{Role, ROUTER_ID};
use cep_core::report::RouterReport;
use cep_transport::clock::synchronise;
use cep_transport::control::ControlServer;
use cep_transport::delivery::CollectorLink;
use cep_transport::driving::{Received, Receiver, SocketOutbox};
use cep_transport::{Context, Pull, Push, Server, SocketOptions};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tracing::{info, warn};

/// How far ahead of the answers the run starts: far enough for every node to measure its
/// clock offset first.
const START_DELAY_NS: u64 = 100_000_000;

/// Control requests served at a turn at most.
const CONTROL_PER_TURN: usize = 16;

/// Input frames read at a turn at most (each a batch of ticks): control requests and timers
/// are looked at between two turns.
const FRAMES_PER_TURN: usize = 64;

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
    let mut out = SocketOutbox::new(Vec::new(), None, Some(&control), &shutdown);
    let sockets = Sockets { context, control: &control, input: &input, options: &options, shutdown: &shutdown };
    let report = match serve_run(&config, &sockets, &mut router, &mut out, &metrics) {
        Ok(report) => report,
        Err(error) => {
            // Every process with a standing link learns the cause before the router's end
            // (the control socket's linger delivers it): the collector lost, say.
            router.abandon(&error.to_string(), &mut out);
            return Err(error);
        }
    };
    if out.has_pending() {
        warn!("frames for a worker that took none were not delivered (stopped before the drain ended)");
    }
    router.release(&mut out);
    let stopping = shutdown.load(Ordering::Relaxed);
    if let Some(collector) = out.collector() {
        // Its frames not yet taken by the socket go to it now (its linger delivers them).
        if let Err(error) = collector.hand_over(Duration::from_millis(if stopping { 500 } else { 5_000 })) {
            warn!(%error, "frames for the collector not handed over");
        }
    }
    if stopping {
        for push in out.workers() {
            push.shorten_linger(Duration::from_millis(500));
        }
        if let Some(collector) = out.collector() {
            collector.shorten_linger(Duration::from_millis(500));
        }
    }
    let report = report.unwrap_or_else(|| router.report());
    let rejected: u64 = report.rejected.values().sum();
    info!(routed = report.routed, rejected, "router done");
    Ok(report)
}

/// The sockets a run is served on, bound before it.
struct Sockets<'s> {
    context: &'s Context,
    control: &'s ControlServer,
    input: &'s Pull,
    options: &'s SocketOptions,
    shutdown: &'s AtomicBool,
}

/// Serves the run until the policy releases the nodes; returns the report, if the run got
/// that far. An error is the run given up (the caller tells everyone why).
fn serve_run<'s>(
    config: &RouterConfig,
    sockets: &Sockets<'s>,
    router: &mut Router,
    out: &mut SocketOutbox<'s>,
    metrics: &crate::metrics::RouterMetrics,
) -> Result<Option<RouterReport>, RouterError> {
    let mut policy =
        RunPolicy::new(config.start_timeout, config.end_timeout, config.collector_retention, Monotonic::now());
    let mut receiver = Receiver::new();
    let mut report = None;
    // One loop over every socket: input frames (a turn's worth at most), control requests,
    // room in a full worker queue, the timers; the policy says what each turn does.
    loop {
        let observed = Observed { pending: out.has_pending(), shutdown: sockets.shutdown.load(Ordering::Relaxed) };
        let turn = policy.turn(Monotonic::now(), router, observed)?;
        match turn.change {
            Some(Change::Start) => {
                *out = start(sockets.context, config, router, sockets.control, sockets.options, sockets.shutdown)?;
                metrics.started(&router.worker_ids(), config.streams);
            }
            Some(Change::Finish) => {
                // What is batched reaches the workers (a failure here fails the run); the
                // report is then only the collector's to miss.
                router.flush(out);
                out.check()?;
                router.refused_connections(&sockets.context.refusals());
                report = Some(router.finish(out));
                router.publish(metrics);
                if let Err(error) = out.check() {
                    warn!(%error, "router report not delivered");
                }
            }
            Some(Change::Release) => return Ok(report),
            None => {}
        }
        // Reading: the first frame waited for on the input alone (a wait that also watched the
        // control socket costs each wake-up more system calls: 16 % of the throughput at 8
        // workers on 16 cores); control requests are then served at the look-around's cadence.
        // Otherwise: a wait on the control socket and on room in full worker queues.
        let mut control_waits = false;
        if turn.read_input {
            for taken in 0..FRAMES_PER_TURN {
                let next = if taken == 0 {
                    receiver.recv(sockets.input, turn.wait)?
                } else {
                    receiver.try_recv(sockets.input)?
                };
                let Some(Received::Frame { bytes, sender }) = next else {
                    break;
                };
                router.data_from(bytes, sender, now_ns(), out);
                if !router.accepting_input() || out.has_pending() {
                    break;
                }
            }
            // What is batched goes once nothing more waits (batching never adds latency) or
            // the turn is over. The receive that found nothing is the probe: asking the socket
            // whether a frame waits would cost a system call per frame besides.
            router.flush(out);
        } else {
            control_waits = out.wait(turn.wait);
        }
        if out.has_pending() {
            out.flush_pending();
        }
        if (control_waits || turn.serve_control) && serve(router, sockets.control, out)? && !policy.started() {
            metrics.registered(router.registered());
        }
        if turn.timers {
            router.tick(Monotonic::now(), out).map_err(RouterError::NoWorkerLeft)?;
            out.check()?;
        }
        if turn.report_progress {
            router.progress(now_ns(), out);
        }
        if turn.look_around {
            out.check_peers();
            // Refused connections are rejections like any other, in the metrics as they come.
            router.refused_connections(&sockets.context.refusals());
            router.publish(metrics);
        }
        if turn.watch_collector {
            // Its connection dropped, or it fell silent (its connection may stay up).
            let dropped = out.collector().and_then(|collector| collector.lost()).map(str::to_string);
            let lost = dropped.or_else(|| router.collector_silent());
            policy.collector(Monotonic::now(), lost.as_deref())?;
        }
        // Once the collector has everything, a send that fails (a worker gone after its end)
        // no longer fails the run.
        if turn.fail_over {
            fail_over(router, out)?;
            out.check()?;
        }
    }
}

/// The cluster is complete: measures this host's clock against the collector's (stamps are
/// taken in the collector's time), connects to the workers and the collector, and announces
/// the start. Returns the outbox over the run's sockets.
fn start<'s>(
    context: &'s Context,
    config: &RouterConfig,
    router: &mut Router,
    control: &'s ControlServer,
    options: &SocketOptions,
    shutdown: &'s AtomicBool,
) -> Result<SocketOutbox<'s>, RouterError> {
    let (clock_endpoint, collector_key) = router.collector_clock().unwrap_or_default();
    let clock = synchronise(context, clock_endpoint, collector_key, shutdown)?;
    let start = router.start(now_ns() + START_DELAY_NS);
    let workers: Vec<Push> = start
        .workers
        .iter()
        .map(|w| Push::connect(context, &w.endpoint, Server::Key(&w.key), options))
        .collect::<Result<_, _>>()?;
    let collector = CollectorLink::connect(
        context,
        &start.collector,
        &start.collector_key,
        options,
        ROUTER_ID,
        1,
        ROUTER_MAX_UNSAVED,
    )?;
    let mut out =
        SocketOutbox::new(workers, Some(collector), Some(control), shutdown).connecting(context, options.clone());
    router.announce(clock, &mut out);
    out.check()?;
    info!(workers = ?router.worker_ids(), collector = start.collector, streams = config.streams, "cluster complete, run started");
    Ok(out)
}

/// Serves the control requests waiting, a bounded number per turn so that a client flooding
/// requests cannot stall routing; true if any came.
fn serve(router: &mut Router, control: &ControlServer, out: &mut SocketOutbox<'_>) -> Result<bool, RouterError> {
    for served in 0..CONTROL_PER_TURN {
        let Some(request) = control.recv(Duration::ZERO)? else {
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

/// Writes the bound endpoints for whoever started the router; written whole, then renamed,
/// so a reader never sees half a file.
fn announce(path: &std::path::Path, data: &str, control: &str) -> Result<(), RouterError> {
    let partial = path.with_extension("partial");
    std::fs::write(&partial, format!("data={data}\ncontrol={control}\n"))
        .and_then(|()| std::fs::rename(&partial, path))
        .map_err(|error| RouterError::Announce(format!("{}: {error}", path.display())))
}
