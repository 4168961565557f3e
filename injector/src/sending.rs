//! The injector's run: register, wait for the start, carry out every stream's core
//! ([`crate::stream`]) on a thread of its own.

use crate::config::InjectorConfig;
use crate::liveness::{Liveness, Verdict};
use crate::pacing::{Pace, Schedule, Speed};
use crate::source::{self, StreamSource};
use crate::stop::Stop;
use crate::stream::{Batched, Step, StreamCore, StreamPlan};
use cep_core::clock::now_ns;
use cep_core::control::Register;
use cep_core::frame::Body;
use cep_core::identity::Role;
use cep_core::report::ClockReport;
use cep_transport::clock::synchronise;
use cep_transport::control::{end_of_run, register, EndOfRun, RegistrationError, StopOrLost};
use cep_transport::{Context, Push, Server, SocketOptions, TransportError};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tracing::info;

/// Errors that stop the injector.
#[derive(Debug, thiserror::Error)]
pub enum InjectorError {
    /// The flags or settings cannot run.
    #[error("invalid injector configuration: {0}")]
    Config(String),
    /// The replay file cannot be read or has a bad line.
    #[error("cannot read the replay file: {0}")]
    Replay(String),
    /// A bad line met while sending a replay taken as checked (`--replay-checked`): the file
    /// changed since, or was not checked. Its stream ended there, with its true count.
    #[error("the replay file has a bad line, met while sending it: {0}")]
    ReplayStopped(String),
    #[error("cannot write {path}: {source}")]
    /// The recorded input (`--record-input`) cannot be written.
    Record {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A socket failed.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The router died.
    #[error("the router is lost: {0}")]
    RouterLost(TransportError),
    /// The router took this injector for dead (it heard nothing from it for its failure
    /// time-out) and ended its streams without it.
    #[error(
        "this injector was taken for dead by the router and fenced ({0}): its streams were ended without it and \
         the router takes nothing more from it"
    )]
    Fenced(String),
    /// The router gave the run up and said why (the collector lost, say).
    #[error("the router gave the run up: {0}")]
    Abandoned(String),
    /// The router refused or did not answer the registration.
    #[error(transparent)]
    Registration(#[from] RegistrationError),
    /// A stream's thread panicked.
    #[error("a sending thread panicked")]
    Panicked,
}

/// What was sent, per stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InjectorReport {
    /// (stream id, ticks sent).
    pub streams: Vec<(u32, u64)>,
}

impl InjectorReport {
    /// Ticks sent over all streams.
    pub fn total(&self) -> u64 {
        self.streams.iter().map(|(_, sent)| sent).sum()
    }
}

type Recorder = Arc<Mutex<BufWriter<File>>>;

/// The heartbeat's cadence when the router names no failure time-out.
const DEFAULT_HEARTBEAT_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

/// How long an interrupted injector still tries to deliver its end-of-stream markers.
const SHUTDOWN_LINGER: std::time::Duration = std::time::Duration::from_millis(500);

/// Runs the injector: every stream is sent to its end (its source's, `--count`'s or
/// `--duration`'s; without them, until `stop`) and closed with its end-of-stream marker
/// carrying its true count. A graceful stop then waits for the end of the run as a bounded
/// run does, so the cluster drains and loses nothing; a hard stop does not wait.
pub fn run(config: InjectorConfig, stop: Stop) -> Result<InjectorReport, InjectorError> {
    let context = config.security.context().map_err(|error| InjectorError::Config(error.to_string()))?;
    run_in(&context, config, stop)
}

/// Runs the injector on `context` (shared by every role of an in-process cluster).
pub fn run_in(context: &Context, config: InjectorConfig, stop: Stop) -> Result<InjectorReport, InjectorError> {
    // Blocking waits (registration, sends, the end of the run) give up on a hard stop only:
    // a graceful stop still delivers every tick it generated and its stream's marker.
    let shutdown = stop.now.clone();
    config.validate().map_err(InjectorError::Config)?;
    let sources = match &config.replay {
        Some(path) => source::replay(path, config.time_unit, config.connections, config.count, config.replay_checked)
            .map_err(InjectorError::Replay)?,
        None => source::model(config.seed, config.symbols, config.connections, config.count),
    };
    let recorder: Option<Recorder> = match &config.record {
        Some(path) => {
            let file = File::create(path).map_err(|source| InjectorError::Record { path: path.clone(), source })?;
            let mut out = BufWriter::with_capacity(1 << 20, file);
            writeln!(out, "injector,seq,symbol,price,t_inject_ns,t_event_ns")
                .map_err(|source| InjectorError::Record { path: path.clone(), source })?;
            Some(Arc::new(Mutex::new(out)))
        }
        None => None,
    };
    let registration = Register {
        role: Role::Injector,
        id: format!("injector-{}", std::process::id()),
        endpoint: String::new(),
        streams: config.connections as u32,
        warmup_ns: config.warmup.as_nanos() as u64,
        clock_endpoint: String::new(),
        resuming: 0,
    };
    info!(router = config.router, streams = config.connections, "injector registering");
    // Before the run starts nothing has been sent, so a graceful stop need not wait either.
    let ready = register(context, &config.router, &registration, config.start_timeout, &stop)?;
    cep_telemetry::identity::set_id(&format!("injector-{}", ready.assigned));
    info!(first_stream = ready.assigned, "run started");
    // From now on the injector stops at once on its own flag, which the caller's raises too
    // (passed on by the heartbeat thread), and the router's word that ends it.
    let halt = Arc::new(AtomicBool::new(stop.now.load(Ordering::Relaxed)));
    let stop = Stop::new(stop.graceful.clone(), halt.clone());
    let sent: Arc<[AtomicU64]> = (0..config.connections).map(|_| AtomicU64::new(0)).collect();
    let every = ready.liveness_every().unwrap_or(DEFAULT_HEARTBEAT_EVERY);
    let liveness = Liveness::start(context, &config.router, ready.assigned, sent.clone(), every, shutdown, halt)?;
    let result = send_streams(context, &config, &ready, sources, recorder, &sent, stop);
    // The router's word explains an end that looks like its loss or a stop (and overrides a
    // success: what was sent was not taken); an error of the injector's own stays.
    let own_error =
        matches!(&result, Err(error) if !matches!(error, InjectorError::RouterLost(_) | InjectorError::Transport(_)));
    match liveness.finish() {
        Some(Verdict::Fenced(reason)) if !own_error => Err(InjectorError::Fenced(reason)),
        Some(Verdict::Abandoned(reason)) if !own_error => Err(InjectorError::Abandoned(reason)),
        _ => result,
    }
}

/// The run once started: every stream on a thread of its own, then the wait for the end.
fn send_streams(
    context: &Context,
    config: &InjectorConfig,
    ready: &cep_core::control::Ready,
    sources: source::Sources,
    recorder: Option<Recorder>,
    sent_so_far: &Arc<[AtomicU64]>,
    stop: Stop,
) -> Result<InjectorReport, InjectorError> {
    let shutdown = stop.now.clone();
    // Intended send times are in the collector's clock, like every other stamp.
    if let Some(estimate) = synchronise(context, &ready.collector_clock, &ready.collector_key, &shutdown)? {
        // One frame, then closed: its fresh queue takes it at once, so no watch is needed.
        let once = SocketOptions { failure_timeout: None, ..SocketOptions::default() };
        let collector = Push::connect(context, &ready.collector, Server::Key(&ready.collector_key), &once)?;
        let report = ClockReport { node: format!("injector-{}", ready.assigned), estimate };
        collector.send(&report.encode(ready.assigned), &shutdown)?;
    }

    let options = SocketOptions {
        high_water_mark: config.hwm,
        failure_timeout: Some(config.failure_timeout),
        ..SocketOptions::default()
    };
    // A replay given --speed is not paced by --rate: its target rate is not a rate (0).
    let metrics = crate::metrics::InjectorMetrics::register(if config.speed.is_some() { 0.0 } else { config.rate });
    let mut threads = Vec::new();
    for (c, (source, share)) in sources.streams.into_iter().zip(sources.shares).enumerate() {
        let push = Push::connect(context, &config.router_data, Server::Router, &options)?;
        let rate = config.rate * share;
        let pace = match (config.speed, sources.first_event_time) {
            (Some(Speed::Max), _) => Pace::Unpaced,
            (Some(Speed::Times(speed)), Some(first_event_ns)) => {
                Pace::Recorded { start_ns: ready.start_ns, first_event_ns, speed }
            }
            _ if rate > 0.0 => Pace::Rate(Schedule::new(ready.start_ns, rate)),
            _ => Pace::Unpaced,
        };
        let (stream, limit) = (ready.assigned + c as u32, tick_limit(config, pace, rate));
        // The backlog gauge follows a fixed rate only.
        let schedule = match pace {
            Pace::Rate(schedule) => Some(schedule),
            Pace::Unpaced | Pace::Recorded { .. } => None,
        };
        let plan = Plan {
            stream: StreamPlan {
                stream,
                pace,
                limit,
                deadline_ns: config.time_limit().map(|d| ready.start_ns + d.as_nanos() as u64),
                batch: config.batch,
                linger_ns: config.linger.as_nanos() as u64,
            },
            start_ns: ready.start_ns,
            metrics: metrics.stream(stream, schedule, limit),
            sent_so_far: sent_so_far.clone(),
            index: c,
        };
        let (names, recorder, stop) = (sources.names.clone(), recorder.clone(), stop.clone());
        // A stream's thread logs as the injector does (a thread of its own in one process).
        let identity = cep_telemetry::identity::current();
        // Each thread hands its socket back so that it stays open until the run is over.
        threads.push(std::thread::spawn(move || {
            cep_telemetry::identity::set_for_thread(&identity.role, &identity.id);
            send_stream(plan, source, &names, &push, recorder.as_ref(), &stop).map(|sent| (sent, push))
        }));
    }
    let mut report = InjectorReport { streams: Vec::new() };
    let mut sockets = Vec::new();
    for thread in threads {
        let (sent, push) = thread.join().map_err(|_| InjectorError::Panicked)??;
        report.streams.push(sent);
        sockets.push(push);
    }
    if !shutdown.load(Ordering::Relaxed) {
        // The wait for the end watches the router too: its streams' connections stay up
        // while it lives, and drop when it dies (within the failure time-out).
        let alive = || sockets.iter().try_for_each(Push::check_alive);
        let watch = StopOrLost::new(&shutdown, alive);
        if let Err(error) = end_of_run(context, &config.router, EndOfRun::AwaitEnd, config.end_timeout, &watch) {
            if let Some(lost) = watch.lost() {
                return Err(InjectorError::RouterLost(lost));
            }
            // (Stopped by the router's word, the caller says why.)
            if !shutdown.load(Ordering::Relaxed) {
                tracing::warn!(%error, "no end-of-run signal from the router");
            }
        }
    }
    if shutdown.load(Ordering::Relaxed) {
        // Stopped at once (perhaps after a graceful stop whose markers are still queued for
        // a router that is stopping too): closing must not wait for them.
        for push in &sockets {
            push.shorten_linger(SHUTDOWN_LINGER);
        }
    }
    drop(sockets);
    if let (Some(recorder), Some(path)) = (recorder, &config.record) {
        let mut out = recorder.lock().expect("no sender panicked");
        out.flush().map_err(|source| InjectorError::Record { path: path.clone(), source })?;
    }
    info!(sent = report.total(), "injector done");
    Ok(report)
}

/// How many ticks a stream sends at most: `--count` and a replay's end are the source's; a
/// run paced at a rate with a duration sends `rate x duration` (the warm-up is part of it).
fn tick_limit(config: &InjectorConfig, pace: Pace, rate: f64) -> u64 {
    match (config.count, config.time_limit(), pace) {
        (None, Some(duration), Pace::Rate(_)) => (rate * duration.as_secs_f64()).round() as u64,
        _ => u64::MAX,
    }
}

struct Plan {
    stream: StreamPlan,
    start_ns: u64,
    metrics: Arc<crate::metrics::StreamMetrics>,
    /// Every stream's count so far, which the heartbeats carry; this one's at `index`.
    sent_so_far: Arc<[AtomicU64]>,
    index: usize,
}

/// How often a stream asks whether the router is alive while it is not blocked.
const LIVENESS_EVERY_NS: u64 = 100_000_000;

/// Carries out one stream's core ([`crate::stream`]) on the wall clock and its socket: waits,
/// sends, records (`--record-input`), watches the router.
fn send_stream(
    plan: Plan,
    source: StreamSource,
    names: &[String],
    push: &Push,
    recorder: Option<&Recorder>,
    stop: &Stop,
) -> Result<(u32, u64), InjectorError> {
    let shutdown = stop.now.as_ref();
    let stream = plan.stream.stream;
    let mut core = StreamCore::new(plan.stream, source, plan.start_ns);
    let mut rows = String::new();
    let (mut ints, mut floats) = (itoa::Buffer::new(), ryu::Buffer::new());
    // Without a linger each tick leaves when due: the last microseconds of a wait are spun.
    let spin = plan.stream.linger_ns == 0;
    Schedule::wait_until(plan.start_ns, spin, stop);
    // A dead router is noticed by a blocked send, and between batches at this interval.
    let mut next_look = now_ns() + LIVENESS_EVERY_NS;
    Schedule::tighten_timer_slack();
    loop {
        if stop.requested() {
            core.stop();
        }
        let now = now_ns();
        let record = |tick: Batched<'_>| {
            if recorder.is_some() {
                rows.push_str(ints.format(stream));
                rows.push(',');
                rows.push_str(ints.format(tick.seq));
                rows.push(',');
                rows.push_str(tick.symbol);
                rows.push(',');
                rows.push_str(floats.format(tick.price));
                rows.push(',');
                rows.push_str(ints.format(tick.t_inject));
                rows.push(',');
                rows.push_str(ints.format(tick.t_event));
                rows.push('\n');
            }
        };
        match core.step(now, names, record) {
            Step::WaitUntil(due) => Schedule::wait_until(due, spin, stop),
            Step::Send(batch) => {
                push.send(batch.seal(now_ns()), shutdown)?;
                plan.metrics.sent(core.sent());
                plan.sent_so_far[plan.index].store(core.sent(), Ordering::Relaxed);
            }
            Step::End(marker) => {
                push.send(marker, shutdown)?;
                break;
            }
            Step::Over => break,
        }
        if now >= next_look {
            push.check_alive().map_err(InjectorError::RouterLost)?;
            next_look = now + LIVENESS_EVERY_NS;
        }
        if let Some(recorder) = recorder.filter(|_| rows.len() > 1 << 16) {
            recorder.lock().expect("no sender panicked").write_all(rows.as_bytes()).map_err(record_err)?;
            rows.clear();
        }
    }
    if let Some(recorder) = recorder {
        recorder.lock().expect("no sender panicked").write_all(rows.as_bytes()).map_err(record_err)?;
    }
    if let Some(error) = core.source_error() {
        // Its marker went with the true count; the run is short of the file's ticks.
        return Err(InjectorError::ReplayStopped(error.to_string()));
    }
    let sent = core.sent();
    plan.metrics.ended(sent);
    if shutdown.load(Ordering::Relaxed) {
        push.shorten_linger(SHUTDOWN_LINGER);
    }
    info!(stream, sent, "stream ended");
    Ok((stream, sent))
}

fn record_err(source: std::io::Error) -> InjectorError {
    InjectorError::Record { path: PathBuf::from("input.csv"), source }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pacing::Schedule;
    use std::time::Duration;

    #[test]
    fn a_timed_run_sends_rate_times_its_duration_the_warm_up_included() {
        let config = InjectorConfig {
            duration: Some(Duration::from_secs(10)),
            warmup: Duration::from_secs(1),
            ..InjectorConfig::default()
        };
        let paced = Pace::Rate(Schedule::new(0, 200_000.0));
        assert_eq!(tick_limit(&config, paced, 200_000.0), 2_000_000);
        // Unpaced, or counted, the duration is a deadline, not a count.
        assert_eq!(tick_limit(&config, Pace::Unpaced, 0.0), u64::MAX);
    }
}
