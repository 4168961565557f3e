//! The worker's driver: registers with the router, then feeds the core ([`crate::worker`])
//! every frame its PULL socket receives and its policy ([`crate::lifecycle`]) the time and the
//! router's answers, and carries out what they decide, until the run is over.

use crate::config::WorkerConfig;
use crate::lifecycle::{Ended, Lifecycle, Links};
use crate::worker::Worker;
use cep_core::clock::{now_ns, Monotonic};
use cep_core::control::Register;
use cep_core::frame::Body;
use cep_core::identity::Role;
use cep_core::outbox::{Outbox, Peer};
use cep_core::report::{ClockReport, WorkerReport};
use cep_core::store::DirectoryStore;
use cep_core::wire::FrameKind;
use cep_transport::clock::synchronise;
use cep_transport::control::{end_of_run, register, ControlLink, EndOfRun, RegistrationError, StopOrLost};
use cep_transport::delivery::CollectorLink;
use cep_transport::driving::{receive_loop, Flow, Received, SocketOutbox};
use cep_transport::{advertise_host, advertised_endpoint, Context, Pull, SocketOptions, TransportError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tracing::{info, warn};

/// Errors that stop a worker.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The configuration does not hold.
    #[error("invalid worker configuration: {0}")]
    Config(String),
    /// The rules the router sent do not compile in this build.
    #[error("the router's rules do not check here (another version?): {0}")]
    Rules(String),
    /// The checkpoint store's folder cannot be used.
    #[error("{0}")]
    Store(String),
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
    /// The router took this worker for dead (it heard nothing from it for its failure time-out:
    /// a stopped or stuck process) and moved its symbols to the other workers.
    #[error(
        "worker {id} was taken for dead by the router and fenced ({reason}): its symbols are with the other \
         workers and the router takes nothing more from it (restart it to join again)"
    )]
    Fenced {
        /// This worker's id.
        id: String,
        /// Why, as the router said.
        reason: String,
    },
    /// The router gave the run up and said why (the collector lost, say).
    #[error("the router gave the run up: {0}")]
    Abandoned(String),
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
    // Checked before registering: a worker that cannot store its checkpoints never joins.
    let own_checkpoint_dir = config.own_checkpoint_dir();
    DirectoryStore::check(&own_checkpoint_dir).map_err(WorkerError::Store)?;
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
    // The folder the router names, if this worker takes it and can use it; else its own (it
    // has joined: it stays, its state restorable only by workers that see that folder).
    let named = config.router_checkpoint_dir(&ready.checkpoint_dir).and_then(|named| match named {
        Some(dir) => DirectoryStore::check(&dir).map(|()| Some(dir)),
        None => Ok(None),
    });
    let checkpoint_dir = match named {
        Ok(Some(dir)) => dir,
        Ok(None) => own_checkpoint_dir,
        Err(reason) => {
            warn!(
                "{reason}: checkpoints go to {} instead, where only workers that see that folder can restore this \
                 worker's symbols",
                own_checkpoint_dir.display()
            );
            own_checkpoint_dir
        }
    };
    info!(folder = %checkpoint_dir.display(), "checkpoint store");
    let store = DirectoryStore::open(&checkpoint_dir, ready.start_ns).map_err(WorkerError::Store)?;
    let mut worker = Worker::start(id.clone(), &ready, config.batch, config.max_frame_bytes, Box::new(store), &mut out)
        .map_err(WorkerError::Rules)?;
    let timeouts = (config.start_timeout, config.end_timeout);
    let mut life = Lifecycle::new(id.clone(), &ready, timeouts, Monotonic::now());
    out.check()?;
    info!(id, index = ready.assigned, workers = ready.workers.len(), rules = ready.rules.origin, "run started");

    let metrics = crate::metrics::WorkerMetrics::register(ready.streams);
    // The loop turns at least as often as its heartbeat is due, input or not.
    let wait = life.heartbeat_every().min(Duration::from_millis(50));
    receive_loop(&input, wait, |received| {
        let frame = match received {
            Received::Frame { bytes, .. } => {
                worker.handle(bytes, now_ns(), &mut out);
                true
            }
            // A snapshot under way is copied at its pace while batches come, the rest now.
            Received::Idle => {
                worker.idle(&mut out);
                false
            }
        };
        if shutdown.load(Ordering::Relaxed) {
            life.stop_requested();
        }
        if worker.done() {
            // Refused connections are rejections like any other, in the report it sends now.
            worker.refused_connections(&context.refusals());
        }
        let links = out.collector().map_or(Links::default(), |collector| Links {
            collector_full: collector.full(),
            all_saved: collector.all_saved(),
        });
        let now = Monotonic::now();
        let turn = life.turn(now, frame, &mut worker, links, &mut out);
        // A dead router: nothing this worker does can reach the results. A dead collector:
        // its frames are held until a restarted one takes over.
        if turn.check_liveness {
            if let Err(lost) = link.check_alive() {
                return Err(router_lost(&link, &id, lost));
            }
            out.check_peers();
            worker.refused_connections(&context.refusals());
        }
        if turn.report_progress {
            worker.progress(now_ns(), &mut out);
            metrics.observe(&worker.snapshot());
        }
        if turn.read_answers {
            while let Some((asked, answer)) = link.try_recv()? {
                life.answer((asked != 0).then_some(asked).and_then(FrameKind::from_byte), &answer, now, &mut out);
            }
        }
        out.check()?;
        Ok::<_, WorkerError>(match life.ended() {
            Some(Ended::Finished) => Flow::Stop,
            Some(Ended::Stopped | Ended::Unreached | Ended::Fenced | Ended::Abandoned) => {
                stop.store(true, Ordering::Relaxed);
                Flow::Stop
            }
            None if turn.read_input => Flow::Continue,
            None => Flow::Hold,
        })
    })?;
    if let Some(reason) = life.abandoned().filter(|_| life.ended() == Some(Ended::Abandoned)) {
        return Err(WorkerError::Abandoned(reason.to_string()));
    }
    if life.ended() == Some(Ended::Unreached) {
        return Err(WorkerError::Unreached { endpoint, waited: config.start_timeout });
    }
    if let Some(reason) = life.fenced() {
        // Whatever it still holds for the collector would be refused there: dropped now.
        if let Some(collector) = out.collector() {
            collector.shorten_linger(Duration::ZERO);
        }
        return Err(WorkerError::Fenced { id, reason: reason.to_string() });
    }
    // Stopped before its course: its sends give up at once now; what it processed is reported.
    let report = if life.ended() == Some(Ended::Stopped) { worker.finish(&mut out) } else { worker.report() };
    metrics.observe(&worker.snapshot());
    let stopping = stop.load(Ordering::Relaxed);
    if let Some(collector) = out.collector() {
        // What waits in the log, not yet taken by the socket (a collector slow to read), goes
        // to the socket now, whose linger delivers it.
        collector.hand_over(if stopping { Duration::from_millis(500) } else { config.end_timeout })?;
        if stopping {
            collector.shorten_linger(Duration::from_millis(500));
        }
    }
    if !stopping && worker.retired() {
        info!(id, "left the cluster: every symbol moved to the other workers");
    } else if !stopping {
        // The wait watches the router: dead, it ends no run, and this worker says so.
        let watch = StopOrLost::new(&shutdown, || link.check_alive());
        if let Err(error) = end_of_run(context, &config.router, EndOfRun::AwaitEnd, config.end_timeout, &watch) {
            if let Some(lost) = watch.lost() {
                return Err(router_lost(&link, &id, lost));
            }
            // Everything was sent; the end signal only guards delivery, so this is a warning.
            tracing::warn!(%error, "no end-of-run signal from the router");
        }
    }
    info!(processed = report.processed, symbols = report.symbols, "worker done");
    Ok(report)
}

/// The router is lost: if it said why before it went (its word waits on the link, ahead of
/// the connection's end: it gave the run up, or took this worker for dead), that is the error,
/// else its loss.
fn router_lost(link: &ControlLink, id: &str, lost: TransportError) -> WorkerError {
    use cep_core::control::MAX_CONTROL_FRAME_BYTES;
    use cep_core::frame::Frame;
    use cep_core::liveness::Verdict;
    while let Ok(Some((_, answer))) = link.try_recv() {
        match Frame::read(&answer, MAX_CONTROL_FRAME_BYTES).ok().and_then(|frame| Verdict::of(&frame)) {
            Some(Verdict::Abandoned(reason)) => return WorkerError::Abandoned(reason),
            Some(Verdict::Fenced(reason)) => return WorkerError::Fenced { id: id.to_string(), reason },
            None => {}
        }
    }
    WorkerError::RouterLost(lost)
}
