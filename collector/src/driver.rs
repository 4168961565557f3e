//! The collector's driver: registers, serves the run's clock, feeds the core
//! ([`crate::collector`]) every frame with its arrival time until every report is in (or the
//! idle time-out, or a shutdown), then writes the results folder.

use crate::collector::{Collector, RunShape, SavedState, Sinks};
use crate::config::CollectorConfig;
use crate::csv::OutputsCsv;
use crate::error::write_err;
use crate::error::CollectorError;
use crate::intervals::IntervalRecorder;
use crate::lifecycle::{Ended, Lifecycle, Observed};
use crate::progress::Figures;
use crate::storing::StateWriter;
pub use crate::storing::{write_results, write_summary};
use crate::throughput::ThroughputLog;
use cep_core::clock::{now_ns, Monotonic};
use cep_core::control::Register;
use cep_core::identity::Role;
use cep_core::results::{grouped, Summary};
use cep_transport::clock::ClockServer;
use cep_transport::control::{end_of_run, register, ControlLink, EndOfRun};
use cep_transport::driving::{receive_loop, Flow, Received};
use cep_transport::{advertise_host, advertised_endpoint, Context, Pull, SocketOptions};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tracing::{error, info, warn};

/// Runs the collector in its own ZeroMQ context until every worker and the router have
/// reported (or the idle time-out or `shutdown`), writes the results folder and returns the
/// summary.
pub fn run(config: CollectorConfig, shutdown: Arc<AtomicBool>) -> Result<Summary, CollectorError> {
    let context = config.security.context().map_err(|error| CollectorError::Config(error.to_string()))?;
    run_in(&context, config, shutdown)
}

/// Runs the collector on `context` (shared by every role of an in-process cluster). A full
/// disk ends it with [`CollectorError::DiskFull`], its files cut back to their last whole line
/// and its saved state kept: started again once there is room, it resumes.
pub fn run_in(
    context: &Context,
    config: CollectorConfig,
    shutdown: Arc<AtomicBool>,
) -> Result<Summary, CollectorError> {
    let out = config.out.clone();
    // Every writer is closed when `collect` returns: nothing is written after the cut.
    match collect(context, config, shutdown) {
        Err(CollectorError::Write { path, source }) if source.kind() == std::io::ErrorKind::StorageFull => {
            Err(crate::disk_full::after_a_full_disk(&out, path, source))
        }
        other => other,
    }
}

fn collect(context: &Context, config: CollectorConfig, shutdown: Arc<AtomicBool>) -> Result<Summary, CollectorError> {
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
    let resumed = saved.is_some() && ready.collector_incarnation > 1;
    let mut collector = match saved {
        // The router took this collector over its lost one: go on from the saved state.
        Some(state) if resumed => {
            let marks = state.sinks.clone();
            let sinks = Sinks {
                csv: OutputsCsv::reopen(&csv_path, marks.csv_rows, marks.csv_len)
                    .map_err(write_err(&csv_path))?
                    .bounded(config.outputs_max_size, marks.csv_not_written),
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
            if config.launched {
                cep_core::results::remove_files(&config.out, cep_core::results::COLLECTOR_END_FILES)
                    .map_err(|(path, source)| CollectorError::Write { path, source })?;
            } else {
                // As `cep run` does before it starts: no file (and no key) of an earlier run
                // stays beside this one's results.
                let own_keys: Vec<&Path> =
                    [config.security.key.as_deref(), config.security.keys.as_deref()].into_iter().flatten().collect();
                cep_core::results::earlier_run::clear_for_collector(&config.out, &own_keys)
                    .map_err(CollectorError::Clear)?;
            }
            remove_state(&config.out)?;
            let csv = OutputsCsv::create(&csv_path).map_err(write_err(&csv_path))?.bounded(config.outputs_max_size, 0);
            let shape = RunShape::of(&ready);
            info!(workers = ?shape.workers, streams = shape.streams, "run started");
            let intervals = IntervalRecorder::create(&config.out, ready.start_ns, Duration::from_secs(1))
                .map_err(write_err(&config.out))?;
            Collector::new(shape, config.csv, config.max_frame_bytes, Sinks { csv, intervals }, now_ns())
                .authenticating(worker_keys(&ready))
        }
    };
    // Opened once an earlier run's files are gone.
    let mut throughput = ThroughputLog::open(&config.out, !resumed, ready.collector_incarnation.max(1));
    // Saved at once: a collector that dies before its first frames can resume too.
    let mut saving = StateWriter::start(state_path.clone());
    saving.save_now(&mut collector, &router_link, &shutdown)?;

    let metrics = crate::metrics::CollectorMetrics::register();
    // The router hears from this collector at least every quarter of its failure time-out.
    let alive_every = ready.liveness_every().unwrap_or(config.failure_timeout / 4);
    let mut life = Lifecycle::new(config.idle_timeout, config.summary_every, alive_every, Monotonic::now());
    let mut progress = config.progress.then(|| Progress::start(ready.start_ns));
    // The loop turns at least as often as the router must hear from it, frames or not.
    receive_loop(&input, alive_every.min(Duration::from_millis(100)), |received| {
        let now = Monotonic::now();
        if let Received::Frame { bytes, sender } = received {
            collector.handle_from(bytes, sender, now_ns()).map_err(write_err(&csv_path))?;
            life.frame_arrived(now);
        }
        // What arrived is saved, then the router is told: senders drop what is saved, and
        // checkpoints whose outputs are all saved may be restored from.
        saving.tell(&router_link, &shutdown, false)?;
        let observed = Observed {
            has_everything: collector.has_everything(),
            router_reported: collector.router_reported(),
            shutdown: shutdown.load(Ordering::Relaxed),
            save_in_flight: saving.in_flight(),
        };
        let turn = life.turn(now, observed);
        if turn.save && life.ended().is_some() {
            saving.save_now(&mut collector, &router_link, &shutdown)?;
        } else if turn.save {
            saving.save(&mut collector)?;
        } else if turn.tell_alive {
            crate::storing::tell_alive(&router_link, &shutdown)?;
        }
        if turn.check_router {
            if let Err(lost) = router_link.check_alive() {
                let cause = format!("the router is lost: {lost}");
                error!("{cause}: writing partial results");
                collector.fail(cause.clone());
                life.router_lost(cause);
            }
        }
        // A look at the running cluster: the figures so far, replaced by the final ones.
        if turn.write_summary {
            let snapshot = Summary { secure: context.is_secure(), ..collector.snapshot(now_ns()) };
            saving.write_summary(&config.out, &snapshot);
        }
        if turn.publish {
            let figures = collector.progress_figures(now_ns());
            throughput.record(since(&ready, figures.at_ns), &figures);
            if let Some(progress) = &mut progress {
                progress.print(collector.workers(), &figures, since(&ready, figures.at_ns));
            }
            // Refused connections are rejections like any other, in the metrics as they come.
            collector.refused_connections(&context.refusals());
            collector.publish(&metrics);
        }
        Ok::<_, CollectorError>(if life.ended().is_some() { Flow::Stop } else { Flow::Continue })
    })?;
    // The last moment's figures too.
    let figures = collector.progress_figures(now_ns());
    throughput.record(since(&ready, figures.at_ns), &figures);
    let ended = life.ended().cloned().unwrap_or(Ended::Shutdown);
    if let Err(error) = saving.finish(&router_link, &shutdown) {
        warn!(%error, "the last save of the state did not complete");
    }
    drop(clock);
    drop(router_link);
    // Everyone keeps their sockets open until the collector has everything: say so now.
    if ended.tells_router() {
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
    if !ended.ran_its_course() {
        // Stopped before it had everything: whatever balanced, the run did not run its course.
        summary.complete = false;
    }
    write_results(&config.out, &summary)?;
    // The results are written: nothing is left to resume.
    if ended.removes_state() {
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
    match ended {
        Ended::RouterLost(cause) => Err(CollectorError::RouterLost(cause)),
        _ => Ok(summary),
    }
}

/// Seconds from the run's start to `at_ns`, on the collector's clock (the run's reference).
fn since(ready: &cep_core::control::Ready, at_ns: u64) -> f64 {
    at_ns.saturating_sub(ready.start_ns) as f64 / 1e9
}

/// The progress line of `--progress`, once a second, as of the instant every node's counts
/// reach ([`crate::progress`]): ticks sent (received by the router), processed (and the rate
/// since the last line), the backlog between them, outputs, and each worker's count.
struct Progress {
    /// The last line's instant (at first, the run's start), its ticks processed and its rate.
    last_at: u64,
    last_processed: u64,
    rate: u64,
}

impl Progress {
    fn start(start_ns: u64) -> Progress {
        Progress { last_at: start_ns, last_processed: 0, rate: 0 }
    }

    fn print(&mut self, workers: &[String], figures: &Figures, since_start_s: f64) {
        let processed = figures.processed_total();
        // Over the time between the two lines' instants (the last rate while it stands still).
        if let Some(span) = figures.at_ns.checked_sub(self.last_at).filter(|span| *span > 0) {
            self.rate = (processed.saturating_sub(self.last_processed) as f64 / (span as f64 / 1e9)) as u64;
        }
        (self.last_at, self.last_processed) = (figures.at_ns, processed);
        let rate = self.rate;
        let per_worker: Vec<String> =
            workers.iter().zip(&figures.processed).map(|(id, count)| format!("{id} {}", grouped(*count))).collect();
        let (sent, backlog) = match (figures.sent, figures.backlog()) {
            (Some(sent), Some(backlog)) => {
                (format!("sent {}, ", grouped(sent)), format!(", backlog {}", grouped(backlog)))
            }
            _ => Default::default(),
        };
        cep_telemetry::logging::progress(format_args!(
            "{since_start_s:>5.1}s  ticks {sent}processed {} ({}/s){backlog}  | outputs {}, all rules  | {}",
            grouped(processed),
            grouped(rate),
            grouped(figures.outputs),
            per_worker.join(" | ")
        ));
    }
}

/// The collector's saved state, in the results folder: a collector started again with the same
/// `--out` while its run goes on resumes from it.
pub const STATE_FILE: &str = "collector.state";

fn remove_state(out: &Path) -> Result<(), CollectorError> {
    cep_core::results::remove_files(out, &[STATE_FILE]).map_err(|(path, source)| CollectorError::Write { path, source })
}

/// The CURVE key each worker of the run registered with, by index (empty when open).
fn worker_keys(ready: &cep_core::control::Ready) -> Vec<String> {
    ready.workers.iter().map(|worker| worker.key.clone()).collect()
}
