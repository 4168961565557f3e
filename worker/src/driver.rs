//! The worker's driver: registers with the router, then feeds the core ([`crate::worker`])
//! every frame its PULL socket receives and sends what the core puts out, until every stream
//! has ended (or `shutdown`).

use crate::config::WorkerConfig;
use crate::worker::Worker;
use cep_core::clock::now_ns;
use cep_core::control::Register;
use cep_core::control::{Refused, MAX_CONTROL_FRAME_BYTES};
use cep_core::delivery::{DeliveryQuery, DeliveryStatus};
use cep_core::frame::Body;
use cep_core::frame::Frame;
use cep_core::identity::Role;
use cep_core::outbox::{Outbox, Peer};
use cep_core::report::{ClockReport, WorkerReport};
use cep_core::rescale::{Leave, RescaleAccepted};
use cep_core::wire::FrameKind;
use cep_transport::clock::synchronise;
use cep_transport::control::{end_of_run, register, ControlLink, EndOfRun, RegistrationError};
use cep_transport::delivery::CollectorLink;
use cep_transport::driving::{receive_loop, Flow, Received, SocketOutbox};
use cep_transport::{advertise_host, advertised_endpoint, Context, Pull, SocketOptions, TransportError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the worker reports its progress to the collector (and publishes its metrics).
const PROGRESS_EVERY: Duration = Duration::from_nanos(crate::worker::PROGRESS_EVERY_NS);

/// How often the worker asks whether the router and the collector are alive.
const LIVENESS_EVERY: Duration = Duration::from_millis(100);

/// How often the worker asks the router what the collector saved (and which collector serves).
const DELIVERY_EVERY: Duration = Duration::from_millis(100);
use tracing::info;

/// Errors that stop a worker.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The configuration does not hold.
    #[error("invalid worker configuration: {0}")]
    Config(String),
    /// The rules the router sent do not compile in this build.
    #[error("the router's rules do not check here (another version?): {0}")]
    Rules(String),
    /// No address to advertise to the router.
    #[error("cannot find the address to advertise: {0}")]
    Advertise(String),
    /// A socket failed.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The router refused this worker or could not be reached.
    #[error(transparent)]
    Registration(#[from] RegistrationError),
    /// The router died (a dead collector is waited for: its frames are held).
    #[error("the router is lost: {0}")]
    RouterLost(#[source] TransportError),
    /// It joined a running cluster, but the router never reached its data endpoint.
    #[error(
        "the router accepted this worker but never reached its data endpoint {endpoint} within {waited:?}: \
         is --advertise an address the router can reach?"
    )]
    Unreached {
        /// The endpoint it advertised.
        endpoint: String,
        /// How long it waited for the router's Welcome.
        waited: Duration,
    },
}

/// What the router answered to this worker's own requests (state hand-offs, leaving, where
/// the collector is), read between frames: nothing here waits for the router. True once the
/// router has accepted this worker's leave.
fn read_answers(
    link: &ControlLink,
    id: &str,
    stop: &AtomicBool,
    out: &mut SocketOutbox<'_>,
    delivery: &mut DeliveryPoll,
) -> Result<bool, TransportError> {
    let mut accepted = false;
    while let Some((asked, answer)) = link.try_recv()? {
        // Whatever the answer, the question is answered: the next one may go.
        if FrameKind::from_byte(asked) == Some(FrameKind::DeliveryQuery) {
            delivery.asking = false;
        }
        let frame = match Frame::read(&answer, MAX_CONTROL_FRAME_BYTES) {
            Ok(frame) => frame,
            Err(error) => {
                tracing::warn!(%error, "bad answer from the router");
                continue;
            }
        };
        let refused = || frame.body::<Refused>().map(|refused| refused.reason).unwrap_or_default();
        match (FrameKind::from_byte(asked), frame.kind()) {
            (Some(FrameKind::SymbolState | FrameKind::Reached | FrameKind::Snapshot), FrameKind::StateTaken) => {}
            (Some(FrameKind::Snapshot), FrameKind::Refused) => {
                // A checkpoint the router dropped (a rescale began): the next one counts.
                tracing::debug!(id, "the router did not take this worker's snapshot: {}", refused());
            }
            (Some(FrameKind::Reached), FrameKind::Refused) => {
                tracing::warn!(id, "the router did not take this worker's answer to its Welcome: {}", refused());
            }
            (Some(FrameKind::SymbolState), FrameKind::Refused) => {
                // The symbols are gone from here already; the router names them as lost.
                tracing::warn!(id, "the router did not take this worker's hand-off: {}", refused());
            }
            (Some(FrameKind::DeliveryQuery), FrameKind::DeliveryStatus) => match frame.body::<DeliveryStatus>() {
                Ok(status) => {
                    // A collector that takes over holds the key of the one before (the router
                    // makes sure), so the key the run started with still applies.
                    out.collector_moved(&status.endpoint, &delivery.collector_key, status.incarnation);
                    out.collector_saved(status.saved, status.resend);
                }
                Err(error) => tracing::warn!(id, %error, "bad delivery status from the router"),
            },
            (Some(FrameKind::DeliveryQuery), FrameKind::Refused) => {
                tracing::warn!(id, "the router did not answer where the collector is: {}", refused());
            }
            (Some(FrameKind::Leave), FrameKind::RescaleAccepted) => {
                let symbols = frame.body::<RescaleAccepted>().map_or(0, |accepted| accepted.symbols);
                info!(id, symbols, "leaving the cluster: its symbols move to the other workers");
                accepted = true;
            }
            (Some(FrameKind::Leave), FrameKind::Refused) => {
                tracing::warn!(id, "the router would not let this worker leave ({}): stopping", refused());
                stop.store(true, Ordering::Relaxed);
            }
            (_, kind) => tracing::warn!(id, ?kind, "unexpected answer from the router"),
        }
    }
    Ok(accepted)
}

/// This worker's questions to the router about the collector ([`DeliveryQuery`]): one at a
/// time, every [`DELIVERY_EVERY`].
struct DeliveryPoll {
    index: u32,
    /// The collector's CURVE key, from the start (empty when open).
    collector_key: String,
    asking: bool,
    last: Instant,
    /// Whether reaching `--max-unsaved` was logged already.
    warned_full: bool,
}

impl DeliveryPoll {
    /// Asks again if it is time and no question is pending.
    fn ask(&mut self, link: &ControlLink, stop: &AtomicBool) -> Result<(), TransportError> {
        if !self.asking && self.last.elapsed() >= DELIVERY_EVERY {
            link.send(&DeliveryQuery { worker: self.index }.encode(self.index), stop)?;
            self.asking = true;
            self.last = Instant::now();
        }
        Ok(())
    }
}

/// How long a worker asked to stop waits for the router to accept that it leaves (a router
/// that is stopping too never answers): then it stops at once.
const LEAVE_ANSWER_TIMEOUT: Duration = Duration::from_secs(2);

/// A worker asked to stop (SIGTERM, Ctrl-C) asks the router to drain it and goes on until it
/// is retired; bounded at each step.
enum Leaving {
    /// Not asked to stop.
    No,
    /// Asked the router at this instant; no answer yet.
    Asked(Instant),
    /// The router accepted at this instant: symbols are moving away.
    Draining(Instant),
}

/// What [`wait_for_saves`] waits for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Saves {
    /// The frames held back under the bound.
    BelowBound,
    /// Every frame saved (the end of the run).
    All,
}

/// Waits, taking no tick, until the collector has saved enough of this worker's frames (asking
/// the router, and sending everything again to a collector that takes over), while the router
/// lives and until `stop` (below the bound: or `shutdown`; all of them: at most `end_timeout`).
/// True if the router accepted this worker's leave meanwhile.
fn wait_for_saves(
    link: &ControlLink,
    id: &str,
    stop: &AtomicBool,
    out: &mut SocketOutbox<'_>,
    delivery: &mut DeliveryPoll,
    until: Saves,
    (shutdown, end_timeout): (&AtomicBool, Duration),
) -> Result<bool, WorkerError> {
    let mut accepted = false;
    let mut waiting_since: Option<Instant> = None;
    loop {
        let Some(collector) = out.collector() else { return Ok(accepted) };
        let done = match until {
            Saves::BelowBound => !collector.full(),
            Saves::All => collector.all_saved(),
        };
        if done || stop.load(Ordering::Relaxed) {
            return Ok(accepted);
        }
        // Asked to stop: the caller leaves the cluster (which takes the ticks' input).
        if until == Saves::BelowBound && shutdown.load(Ordering::Relaxed) {
            return Ok(accepted);
        }
        if until == Saves::All && waiting_since.is_some_and(|since| since.elapsed() > end_timeout) {
            tracing::warn!(id, waited = ?end_timeout, "the collector has not saved every frame of this worker: ending anyway");
            return Ok(accepted);
        }
        if waiting_since.is_none() && until == Saves::BelowBound {
            // Once in the log; a small bound is reached at every save.
            if std::mem::replace(&mut delivery.warned_full, true) {
                tracing::debug!(id, "at --max-unsaved: waiting for the collector to save");
            } else {
                tracing::warn!(id, "holding as many frames as --max-unsaved allows: waiting for the collector to save them (said once)");
            }
        }
        waiting_since.get_or_insert_with(Instant::now);
        link.check_alive().map_err(WorkerError::RouterLost)?;
        out.check_peers();
        delivery.ask(link, stop)?;
        accepted |= read_answers(link, id, stop, out, delivery)?;
        out.check()?;
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs one worker in its own ZeroMQ context until every stream has ended (or `shutdown`),
/// returning its report.
pub fn run(config: WorkerConfig, shutdown: Arc<AtomicBool>) -> Result<WorkerReport, WorkerError> {
    let context = config.security.context().map_err(|error| WorkerError::Config(error.to_string()))?;
    run_in(&context, config, shutdown)
}

/// Runs one worker on `context` (shared by every role of an in-process cluster, whose
/// `inproc://` endpoints live in one context).
pub fn run_in(context: &Context, config: WorkerConfig, shutdown: Arc<AtomicBool>) -> Result<WorkerReport, WorkerError> {
    config.validate().map_err(WorkerError::Config)?;
    let id = config.worker_id();
    let options = SocketOptions {
        high_water_mark: config.hwm,
        failure_timeout: Some(config.failure_timeout),
        max_message_bytes: cep_transport::socket::message_limit(config.max_frame_bytes),
        ..SocketOptions::default()
    };
    let input = Pull::bind(context, &config.listen, &options, &[Role::Router])?;
    let host = advertise_host(&config.advertise, &config.router).map_err(WorkerError::Advertise)?;
    let endpoint = advertised_endpoint(input.endpoint(), &host);
    let registration = Register {
        role: Role::Worker,
        id: id.clone(),
        endpoint: endpoint.clone(),
        streams: 0,
        warmup_ns: 0,
        clock_endpoint: String::new(),
        resuming: 0,
    };
    info!(id, endpoint, router = config.router, "worker registering");
    let ready = register(context, &config.router, &registration, config.start_timeout, &shutdown)?;
    // Sockets give up on `stop`, not on the signal: a worker asked to stop first leaves the
    // cluster (its symbols move to the others), which takes sending.
    let stop = AtomicBool::new(false);
    let collector = CollectorLink::connect(
        context,
        &ready.collector,
        &ready.collector_key,
        &options,
        ready.assigned,
        ready.collector_incarnation,
        config.max_unsaved,
    )?;
    let link = ControlLink::connect(context, &config.router, options.failure_timeout)?;
    let mut out = SocketOutbox::new(Vec::new(), Some(collector), None, &stop).with_router(&link);
    if let Some(estimate) = synchronise(context, &ready.collector_clock, &ready.collector_key, &shutdown)? {
        let report = ClockReport { node: id.clone(), estimate };
        out.send(Peer::Collector, &report.encode(ready.assigned));
    }
    let mut delivery = DeliveryPoll {
        index: ready.assigned,
        collector_key: ready.collector_key.clone(),
        asking: false,
        last: Instant::now(),
        warned_full: false,
    };
    let mut worker = Worker::start(id.clone(), &ready, config.batch, config.max_frame_bytes, &mut out)
        .map_err(WorkerError::Rules)?;
    out.check()?;
    info!(id, index = ready.assigned, workers = ready.workers.len(), rules = ready.rules.origin, "run started");

    let metrics = crate::metrics::WorkerMetrics::register(ready.streams);
    let mut last_progress = Instant::now();
    let mut leaving = Leaving::No;
    let mut unreached = false;
    let started = Instant::now();
    let mut last_look = Instant::now();
    receive_loop(&input, Duration::from_millis(50), |received| {
        if let Received::Frame { bytes, .. } = received {
            worker.handle(bytes, now_ns(), &mut out);
        }
        // A dead router: nothing this worker does can reach the results. A dead collector:
        // its frames are held until a restarted one takes over.
        if last_look.elapsed() >= LIVENESS_EVERY {
            link.check_alive().map_err(WorkerError::RouterLost)?;
            out.check_peers();
            last_look = Instant::now();
        }
        delivery.ask(&link, &stop)?;
        if last_progress.elapsed() >= PROGRESS_EVERY {
            // Refused connections are rejections like any other, reported as they come.
            worker.refused_connections(&context.refusals());
            worker.progress(&mut out);
            metrics.observe(&worker.snapshot());
            last_progress = Instant::now();
        }
        out.check()?;
        if read_answers(&link, &id, &stop, &mut out, &mut delivery)? {
            leaving = Leaving::Draining(Instant::now());
        }
        // As many unsaved frames as it may hold: no more ticks until the collector saves.
        if out.collector().is_some_and(|collector| collector.full()) {
            let accepted = wait_for_saves(
                &link,
                &id,
                &stop,
                &mut out,
                &mut delivery,
                Saves::BelowBound,
                (&shutdown, config.end_timeout),
            )?;
            if accepted {
                leaving = Leaving::Draining(Instant::now());
            }
        }
        if shutdown.load(Ordering::Relaxed) && !worker.done() {
            match leaving {
                Leaving::No => {
                    leaving = Leaving::Asked(Instant::now());
                    link.send(&Leave { worker: id.clone() }.encode(worker.index()), &stop)?;
                }
                Leaving::Asked(at) if at.elapsed() > LEAVE_ANSWER_TIMEOUT => {
                    tracing::warn!(id, "asked to stop; the router did not answer the leave: stopping");
                    stop.store(true, Ordering::Relaxed);
                }
                Leaving::Draining(at) if at.elapsed() > config.end_timeout => {
                    tracing::warn!(id, waited = ?config.end_timeout, "asked to stop; not drained in time: stopping");
                    stop.store(true, Ordering::Relaxed);
                }
                _ => {}
            }
        }
        // A joining worker the router never reaches (its Welcome does not come): a wrong
        // --advertise. Say so and stop rather than wait for ever.
        if !worker.welcomed() && started.elapsed() > config.start_timeout {
            unreached = true;
            stop.store(true, Ordering::Relaxed);
        }
        let done = worker.done() || stop.load(Ordering::Relaxed);
        Ok::<_, WorkerError>(if done { Flow::Stop } else { Flow::Continue })
    })?;
    if unreached {
        return Err(WorkerError::Unreached { endpoint, waited: config.start_timeout });
    }
    worker.refused_connections(&context.refusals());
    let report = worker.finish(&mut out);
    out.check()?;
    if !stop.load(Ordering::Relaxed) {
        // Everything goes to the collector before the end: a collector restarted now still
        // gets it all.
        wait_for_saves(&link, &id, &stop, &mut out, &mut delivery, Saves::All, (&shutdown, config.end_timeout))?;
        out.check()?;
    }
    metrics.observe(&worker.snapshot());
    if stop.load(Ordering::Relaxed) {
        if let Some(collector) = out.collector() {
            collector.shorten_linger(Duration::from_millis(500));
        }
    } else if worker.retired() {
        info!(id, "left the cluster: every symbol moved to the other workers");
    } else if let Err(error) = end_of_run(context, &config.router, EndOfRun::AwaitEnd, config.end_timeout, &shutdown) {
        // Everything was sent; the end signal only guards delivery, so this is a warning.
        tracing::warn!(%error, "no end-of-run signal from the router");
    }
    info!(processed = report.processed, symbols = report.symbols, "worker done");
    Ok(report)
}
