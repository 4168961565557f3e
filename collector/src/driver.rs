//! The collector's driver: registers, serves the run's clock, feeds the core
//! ([`crate::collector`]) every frame with its arrival time until every report is in (or the
//! idle time-out, or a shutdown), then writes the results folder.

use crate::collector::{Collector, RunShape, SavedState, Sinks};
use crate::config::CollectorConfig;
use crate::csv::OutputsCsv;
use crate::intervals::IntervalRecorder;
use cep_core::clock::now_ns;
use cep_core::control::Register;
use cep_core::delivery::Saved;
use cep_core::failover::OutputsConfirmed;
use cep_core::frame::Body;
use cep_core::identity::Role;
use cep_core::results::Summary;
use cep_transport::clock::ClockServer;
use cep_transport::control::{end_of_run, register, ControlLink, EndOfRun, RegistrationError};
use cep_transport::driving::{receive_loop, Flow, Received};
use cep_transport::{advertise_host, advertised_endpoint, Context, Pull, SocketOptions, TransportError};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{error, info, warn};

/// How long a stopping collector still takes the reports of the processes stopping with it.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// How often the receive loop asks whether the router is still there.
const ROUTER_CHECK_EVERY: Duration = Duration::from_millis(100);

/// Errors that stop the collector.
#[derive(Debug, thiserror::Error)]
pub enum CollectorError {
    /// The configuration does not hold.
    #[error("invalid collector configuration: {0}")]
    Config(String),
    /// A socket failed.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The router refused this collector or could not be reached.
    #[error(transparent)]
    Registration(#[from] RegistrationError),
    /// No address to advertise to the router.
    #[error("cannot find the address to advertise: {0}")]
    Advertise(String),
    /// The router has been unreachable for longer than the failure time-out; the results
    /// were written all the same (`complete: false`, the cause in `failure`).
    #[error("the run failed: {0} (partial results written)")]
    RouterLost(String),
    /// The saved state could not be read.
    #[error("cannot resume from {path}: {reason} (remove it to start a new run)")]
    State {
        /// The state file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A results file could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

fn write_err(path: &Path) -> impl FnOnce(std::io::Error) -> CollectorError + '_ {
    move |source| CollectorError::Write { path: path.to_path_buf(), source }
}

/// Runs the collector in its own ZeroMQ context until every worker and the router have
/// reported (or the idle time-out or `shutdown`), writes the results folder and returns the
/// summary.
pub fn run(config: CollectorConfig, shutdown: Arc<AtomicBool>) -> Result<Summary, CollectorError> {
    let context = config.security.context().map_err(|error| CollectorError::Config(error.to_string()))?;
    run_in(&context, config, shutdown)
}

/// Runs the collector on `context` (shared by every role of an in-process cluster).
pub fn run_in(
    context: &Context,
    config: CollectorConfig,
    shutdown: Arc<AtomicBool>,
) -> Result<Summary, CollectorError> {
    config.validate().map_err(CollectorError::Config)?;
    std::fs::create_dir_all(&config.out).map_err(write_err(&config.out))?;
    let csv_path = config.out.join("outputs.csv");
    let state_path = config.out.join(STATE_FILE);
    // A state saved by a collector that died: if the router still runs that run, it resumes.
    let saved = match std::fs::read(&state_path) {
        Ok(bytes) => Some(
            SavedState::read(&bytes).map_err(|reason| CollectorError::State { path: state_path.clone(), reason })?,
        ),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
        Err(error) => return Err(CollectorError::State { path: state_path, reason: error.to_string() }),
    };
    // Workers and the router send outputs and reports; injectors their clock reports.
    const ADMITS: &[Role] = &[Role::Worker, Role::Router, Role::Injector];
    let options = SocketOptions {
        max_message_bytes: cep_transport::socket::message_limit(config.max_frame_bytes),
        ..SocketOptions::default()
    };
    let input = Pull::bind(context, &config.listen, &options, ADMITS)?;
    let host = advertise_host(&config.advertise, &config.router).map_err(CollectorError::Advertise)?;
    let endpoint = advertised_endpoint(input.endpoint(), &host);
    // The collector's clock is the run's reference: it serves it to every other node.
    let clock = ClockServer::start(context, &config.clock_listen)?;
    let registration = Register {
        role: Role::Collector,
        id: "collector".into(),
        endpoint: endpoint.clone(),
        streams: 0,
        warmup_ns: 0,
        clock_endpoint: advertised_endpoint(clock.endpoint(), &host),
        resuming: saved.as_ref().map_or(0, SavedState::run_start_ns),
    };
    info!(endpoint, router = config.router, resuming = saved.is_some(), "collector registering");
    let ready = register(context, &config.router, &registration, config.start_timeout, &shutdown)?;
    // From now on the router is watched: if it dies, the collector says so and ends.
    let router_link = ControlLink::connect(context, &config.router, Some(config.failure_timeout))?;
    let mut router_checked = Instant::now();
    let mut router_lost: Option<String> = None;
    let mut collector = match saved {
        // The router took this collector over its lost one: go on from the saved state.
        Some(state) if ready.collector_incarnation > 1 => {
            let marks = state.sinks.clone();
            let sinks = Sinks {
                csv: OutputsCsv::reopen(&csv_path, marks.csv_rows, marks.csv_len).map_err(write_err(&csv_path))?,
                intervals: IntervalRecorder::reopen(
                    &config.out,
                    marks.intervals,
                    marks.intervals_len.0,
                    marks.intervals_len.1,
                )
                .map_err(write_err(&config.out))?,
            };
            let collector =
                Collector::resume(state, ready.collector_incarnation, config.csv, config.max_frame_bytes, sinks)
                    .authenticating(worker_keys(&ready));
            info!(
                incarnation = ready.collector_incarnation,
                rows = marks.csv_rows,
                "resumed from the saved state: the senders send again what it had not saved"
            );
            collector
        }
        _ => {
            if saved.is_some() {
                warn!(path = %state_path.display(), "the saved state is of an earlier run; this is a new run: starting afresh");
            }
            cep_core::results::remove_files(&config.out, cep_core::results::COLLECTOR_END_FILES)
                .map_err(|(path, source)| CollectorError::Write { path, source })?;
            remove_state(&config.out)?;
            let csv = OutputsCsv::create(&csv_path).map_err(write_err(&csv_path))?;
            let shape = RunShape::of(&ready);
            info!(workers = ?shape.workers, streams = shape.streams, "run started");
            let intervals = IntervalRecorder::create(&config.out, ready.start_ns, Duration::from_secs(1))
                .map_err(write_err(&config.out))?;
            Collector::new(shape, config.csv, config.max_frame_bytes, Sinks { csv, intervals }, now_ns())
                .authenticating(worker_keys(&ready))
        }
    };
    // Saved at once: a collector that dies before its first frames can resume too.
    let mut saving = Saving::start(state_path.clone());
    saving.save_now(&mut collector, &router_link, &shutdown)?;

    let metrics = crate::metrics::CollectorMetrics::register();
    let mut last_publish = Instant::now();
    let started = Instant::now();
    let mut last_progress = (Instant::now(), 0u64);
    let mut stopping: Option<Instant> = None;
    let mut last_frame = Instant::now();
    let mut last_summary = Instant::now();
    receive_loop(&input, Duration::from_millis(100), |received| {
        if let Received::Frame { bytes, sender, .. } = received {
            collector.handle_from(bytes, sender, now_ns()).map_err(write_err(&csv_path))?;
            last_frame = Instant::now();
            saving.dirty = true;
        }
        // What arrived is saved, then the router is told: senders drop what is saved, and
        // checkpoints whose outputs are all saved may be restored from.
        saving.tell(&router_link, &shutdown, false)?;
        if saving.due() {
            saving.save(&mut collector)?;
        }
        if collector.has_everything() {
            saving.save_now(&mut collector, &router_link, &shutdown)?;
            return Ok(Flow::Stop);
        }
        // A router that has reported, or is stopping with us, may go: only a router still due
        // to report is watched.
        if router_checked.elapsed() >= ROUTER_CHECK_EVERY
            && !collector.router_reported()
            && !shutdown.load(Ordering::Relaxed)
        {
            router_checked = Instant::now();
            if let Err(lost) = router_link.check_alive() {
                let cause = format!("the router is lost: {lost}");
                error!("{cause}: writing partial results");
                collector.fail(cause.clone());
                router_lost = Some(cause);
                return Ok(Flow::Stop);
            }
        }
        // A look at the running cluster: the figures so far, replaced by the final ones.
        if !config.summary_every.is_zero() && last_summary.elapsed() >= config.summary_every {
            let snapshot = Summary { secure: context.is_secure(), ..collector.snapshot(now_ns()) };
            if let Err(error) = write_summary(&config.out, &snapshot) {
                warn!(%error, "cannot write the rolling summary");
            }
            last_summary = Instant::now();
        }
        // The other processes stop with us and send their reports as they go: wait a moment
        // for them, so that a partial summary holds what they knew.
        if shutdown.load(Ordering::Relaxed) {
            let since = *stopping.get_or_insert_with(|| {
                warn!(grace = ?SHUTDOWN_GRACE, "shutdown requested: taking the last reports, then writing partial results");
                Instant::now()
            });
            if since.elapsed() >= SHUTDOWN_GRACE {
                return Ok(Flow::Stop);
            }
        }
        if last_frame.elapsed() > config.idle_timeout {
            warn!(idle = ?config.idle_timeout, "no message for the idle time-out: what is missing is reported as lost");
            return Ok(Flow::Stop);
        }
        if config.progress && last_progress.0.elapsed() >= Duration::from_secs(1) {
            let by_worker = collector.processed_by_worker();
            let processed: u64 = by_worker.iter().sum();
            let rate = (processed - last_progress.1) as f64 / last_progress.0.elapsed().as_secs_f64();
            let per_worker: Vec<String> =
                collector.workers().iter().zip(&by_worker).map(|(id, count)| format!("{id} {count}")).collect();
            cep_telemetry::logging::progress(format_args!(
                "{:>5.1}s  processed {processed}  ({rate:.0} ev/s)  outputs {}  | {}",
                started.elapsed().as_secs_f64(),
                collector.outputs_total(),
                per_worker.join(" | ")
            ));
            last_progress = (Instant::now(), processed);
        }
        if last_publish.elapsed() >= Duration::from_secs(1) {
            // Refused connections are rejections like any other, in the metrics as they come.
            collector.refused_connections(&context.refusals());
            collector.publish(&metrics);
            last_publish = Instant::now();
        }
        Ok::<_, CollectorError>(Flow::Continue)
    })?;
    if let Err(error) = saving.finish(&router_link, &shutdown) {
        warn!(%error, "the last save of the state did not complete");
    }
    drop(clock);
    drop(router_link);
    // Everyone keeps their sockets open until the collector has everything: say so now.
    if !shutdown.load(Ordering::Relaxed) && router_lost.is_none() {
        if let Err(error) =
            end_of_run(context, &config.router, EndOfRun::RunFinished, Duration::from_secs(5), &shutdown)
        {
            warn!(%error, "could not tell the router the run is over");
        }
    }
    collector.refused_connections(&context.refusals());
    let finished = collector.finish(|collector| collector.publish(&metrics)).map_err(write_err(&csv_path))?;
    crate::latency::write_distribution(&config.out, &finished.hops.end_to_end).map_err(write_err(&config.out))?;
    let mut summary = Summary { secure: context.is_secure(), ..finished.summary };
    if stopping.is_some() {
        // Stopped before it had everything: whatever balanced, the run did not run its course.
        summary.complete = false;
    }
    write_results(&config.out, &summary)?;
    // The results are written: nothing is left to resume.
    if router_lost.is_none() && !shutdown.load(Ordering::Relaxed) {
        remove_state(&config.out)?;
    }
    metrics.complete(summary.complete);
    info!(
        rows = finished.rows,
        sent = summary.events_sent,
        processed = summary.events_processed,
        lost = summary.events_lost,
        complete = summary.complete,
        "collector done"
    );
    match router_lost {
        Some(cause) => Err(CollectorError::RouterLost(cause)),
        None => Ok(summary),
    }
}

/// The collector's saved state, in the results folder: a collector started again with the same
/// `--out` while its run goes on resumes from it.
pub const STATE_FILE: &str = "collector.state";

/// How often the collector saves its state (when frames arrived since the last save).
const SAVE_EVERY: Duration = Duration::from_nanos(crate::collector::SAVE_EVERY_NS);

fn remove_state(out: &Path) -> Result<(), CollectorError> {
    cep_core::results::remove_files(out, &[STATE_FILE]).map_err(|(path, source)| CollectorError::Write { path, source })
}

/// Writes `bytes` to `path` whole: into `temporary` (in the same folder), then renamed over
/// it, so that a reader (or a restart after a crash) finds the old file or the new, never half.
fn write_whole(path: &Path, temporary: &Path, bytes: &[u8]) -> Result<(), CollectorError> {
    std::fs::write(temporary, bytes).map_err(write_err(temporary))?;
    std::fs::rename(temporary, path).map_err(write_err(path))
}

/// A save for the saving thread: the state's bytes, and what to tell the router once stored.
struct SaveJob {
    bytes: Vec<u8>,
    saved: Saved,
    confirmations: Vec<OutputsConfirmed>,
}

/// What the router is told once a save is stored.
type Stored = Result<(Saved, Vec<OutputsConfirmed>), CollectorError>;

/// Saving the collector's state every [`SAVE_EVERY`] while frames arrive. The state is taken
/// on the receive thread (it is small and quick to encode) and stored by a thread of its own,
/// so a slow disk never holds up the outputs; the router is told once it is stored.
struct Saving {
    path: PathBuf,
    last: Instant,
    /// Frames arrived since the last save.
    dirty: bool,
    /// A save handed to the thread and not stored yet.
    in_flight: bool,
    jobs: Option<std::sync::mpsc::SyncSender<SaveJob>>,
    stored: std::sync::mpsc::Receiver<Stored>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Saving {
    /// Starts the saving thread, storing into `path` ([`write_whole`]).
    fn start(path: PathBuf) -> Saving {
        let (jobs, incoming) = std::sync::mpsc::sync_channel::<SaveJob>(1);
        let state = path.clone();
        let (done, stored) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let temporary = path.with_extension("state.tmp");
            for job in incoming {
                let result = write_whole(&path, &temporary, &job.bytes).map(|()| (job.saved, job.confirmations));
                if done.send(result).is_err() {
                    break;
                }
            }
        });
        Saving {
            path: state,
            last: Instant::now(),
            dirty: false,
            in_flight: false,
            jobs: Some(jobs),
            stored,
            thread: Some(thread),
        }
    }

    fn due(&self) -> bool {
        self.dirty && !self.in_flight && self.last.elapsed() >= SAVE_EVERY
    }

    /// Takes the state and hands it to the saving thread (one save at a time).
    fn save(&mut self, collector: &mut Collector<std::io::BufWriter<std::fs::File>>) -> Result<(), CollectorError> {
        let (bytes, saved, confirmations) = collector.save().map_err(write_err(&self.path))?;
        let job = SaveJob { bytes, saved, confirmations };
        let sent = self.jobs.as_ref().is_some_and(|jobs| jobs.send(job).is_ok());
        if !sent {
            return Err(self.thread_gone());
        }
        self.in_flight = true;
        self.last = Instant::now();
        self.dirty = false;
        Ok(())
    }

    /// Once a save is stored (`wait`: waits for it), tells the router what the state holds and
    /// which checkpoints it confirms.
    fn tell(&mut self, router: &ControlLink, shutdown: &AtomicBool, wait: bool) -> Result<(), CollectorError> {
        if !self.in_flight {
            return Ok(());
        }
        let stored =
            if wait { Some(self.stored.recv().map_err(|_| self.thread_gone())?) } else { self.stored.try_recv().ok() };
        let Some(stored) = stored else { return Ok(()) };
        self.in_flight = false;
        let (saved, confirmations) = stored?;
        router.send(&saved.encode(0), shutdown)?;
        for confirmed in &confirmations {
            router.send(&confirmed.encode(0), shutdown)?;
        }
        // The router's answers (nothing to act on) are read so they do not pile up.
        while router.try_recv()?.is_some() {}
        Ok(())
    }

    /// Saves now, and waits until it is stored and the router told.
    fn save_now(
        &mut self,
        collector: &mut Collector<std::io::BufWriter<std::fs::File>>,
        router: &ControlLink,
        shutdown: &AtomicBool,
    ) -> Result<(), CollectorError> {
        self.tell(router, shutdown, true)?;
        self.save(collector)?;
        self.tell(router, shutdown, true)
    }

    fn thread_gone(&self) -> CollectorError {
        write_err(&self.path)(std::io::Error::other("the thread that stores the state stopped"))
    }

    /// Waits for the save in flight, tells the router, and stops the thread: call it before
    /// the results are written (and the state removed).
    fn finish(mut self, router: &ControlLink, shutdown: &AtomicBool) -> Result<(), CollectorError> {
        self.tell(router, shutdown, true)
    }
}

impl Drop for Saving {
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Writes `summary.json` and `report.txt`.
pub fn write_results(out: &Path, summary: &Summary) -> Result<(), CollectorError> {
    write_summary(out, summary)?;
    let report_path = out.join("report.txt");
    std::fs::write(&report_path, summary.ycsb_report()).map_err(write_err(&report_path))?;
    Ok(())
}

/// Writes `summary.json` atomically: into a temporary file in the same folder, then renamed
/// over it, so that a reader sees the previous summary or this one, never half of one.
pub fn write_summary(out: &Path, summary: &Summary) -> Result<(), CollectorError> {
    let json_path = out.join("summary.json");
    let temporary = out.join(".summary.json.tmp");
    let json = serde_json::to_string_pretty(summary).expect("the summary serialises");
    write_whole(&json_path, &temporary, (json + "\n").as_bytes())
}

/// The CURVE key each worker of the run registered with, by index (empty when open).
fn worker_keys(ready: &cep_core::control::Ready) -> Vec<String> {
    ready.workers.iter().map(|worker| worker.key.clone()).collect()
}
