//! The collector's run: register, receive until every report is in, write the results.

use crate::accounting::{summarize, Observed};
use crate::config::{CollectorConfig, CsvMode};
use crate::csv::OutputsCsv;
use crate::intervals::IntervalRecorder;
use crate::latency::HopHistograms;
use crate::rules::RuleTable;
use cep_core::clock::now_ns;
use cep_core::control::{Register, Role};
use cep_core::report::{ClockReport, Rejections, RouterReport, RulesInstalled, WorkerProgress, WorkerReport};
use cep_core::results::ClockOffset;
use cep_core::results::Summary;
use cep_core::seen::{Arrival, SeenSet};
use cep_core::tick::OutputRecord;
use cep_core::wire::{decode_message, decode_outputs, FrameHeader, FrameKind};
use cep_transport::clock::ClockServer;
use cep_transport::control::{end_of_run, register, RegistrationError};
use cep_transport::{advertise_host, advertised_endpoint, Context, Message, Pull, SocketOptions, TransportError};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// How long a stopping collector still takes the reports of the processes stopping with it.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// Errors that stop the collector.
#[derive(Debug, thiserror::Error)]
pub enum CollectorError {
    #[error("invalid collector configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Transport(#[from] TransportError),
    #[error(transparent)]
    Registration(#[from] RegistrationError),
    #[error("cannot find the address to advertise: {0}")]
    Advertise(String),
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
}

fn write_err(path: &Path) -> impl FnOnce(std::io::Error) -> CollectorError + '_ {
    move |source| CollectorError::Write { path: path.to_path_buf(), source }
}

/// Runs the collector until every worker and the router have reported (or the idle
/// time-out or `shutdown`), writes the results folder and returns the summary.
pub fn run(config: CollectorConfig, shutdown: Arc<AtomicBool>) -> Result<Summary, CollectorError> {
    config.validate().map_err(CollectorError::Config)?;
    std::fs::create_dir_all(&config.out).map_err(write_err(&config.out))?;
    cep_core::results::remove_files(&config.out, cep_core::results::COLLECTOR_END_FILES)
        .map_err(|(path, source)| CollectorError::Write { path, source })?;
    let csv_path = config.out.join("outputs.csv");
    let mut csv = OutputsCsv::create(&csv_path).map_err(write_err(&csv_path))?;
    let context = Context::new();
    let input = Pull::bind(&context, &config.listen, &SocketOptions::default())?;
    let host = advertise_host(&config.advertise, &config.router).map_err(CollectorError::Advertise)?;
    let endpoint = advertised_endpoint(input.endpoint(), &host);
    // The collector's clock is the run's reference: it serves it to every other node.
    let clock = ClockServer::start(&context, &config.clock_listen)?;
    let registration = Register {
        role: Role::Collector,
        id: "collector".into(),
        endpoint: endpoint.clone(),
        streams: 0,
        warmup_ns: 0,
        clock_endpoint: advertised_endpoint(clock.endpoint(), &host),
    };
    info!(endpoint, router = config.router, "collector registering");
    let ready = register(&context, &config.router, &registration, config.start_timeout, &shutdown)?;
    let worker_ids: Vec<String> = ready.workers.iter().map(|w| w.id.clone()).collect();
    info!(workers = ?worker_ids, streams = ready.streams, "run started");

    let mut state = Collecting {
        csv_mode: config.csv,
        max_frame_bytes: config.max_frame_bytes,
        warmup_end_ns: ready.start_ns + ready.warmup_ns,
        hops: HopHistograms::default(),
        intervals: IntervalRecorder::create(&config.out, ready.start_ns, Duration::from_secs(1))
            .map_err(write_err(&config.out))?,
        decoded: Vec::with_capacity(1024),
        seen: (0..ready.streams).map(|_| Default::default()).collect(),
        rules: RuleTable::default(),
        observed: Observed::default(),
        progress: vec![WorkerProgress { processed: 0, outputs: 0, rejected: 0 }; worker_ids.len()],
        reports: BTreeMap::new(),
        router: None,
        last_report_ns: now_ns(),
        last_frame_ns: now_ns(),
        rejections: Rejections::new("collector"),
    };
    let metrics = crate::metrics::CollectorMetrics::register();
    let mut last_publish = Instant::now();
    let mut message = Message::new();
    let started = Instant::now();
    let mut last_message = Instant::now();
    let mut last_progress = (Instant::now(), 0u64);
    let mut stopping: Option<Instant> = None;
    loop {
        if state.reports.len() == worker_ids.len() && state.router.is_some() {
            break;
        }
        // The other processes stop with us and send their reports as they go: wait a moment
        // for them, so that a partial summary holds what they knew.
        if shutdown.load(Ordering::Relaxed) {
            let since = *stopping.get_or_insert_with(|| {
                warn!(grace = ?SHUTDOWN_GRACE, "shutdown requested: taking the last reports, then writing partial results");
                Instant::now()
            });
            if since.elapsed() >= SHUTDOWN_GRACE {
                break;
            }
        }
        if input.recv(&mut message, Duration::from_millis(100))? {
            state.handle(&message, &mut csv).map_err(write_err(&csv_path))?;
            state.last_frame_ns = now_ns();
            last_message = Instant::now();
        } else if last_message.elapsed() > config.idle_timeout {
            warn!(idle = ?config.idle_timeout, "no message for the idle time-out: what is missing is reported as lost");
            break;
        }
        if config.progress && last_progress.0.elapsed() >= Duration::from_secs(1) {
            let processed: u64 = state.progress.iter().map(|p| p.processed).sum();
            let rate = (processed - last_progress.1) as f64 / last_progress.0.elapsed().as_secs_f64();
            let per_worker: Vec<String> =
                worker_ids.iter().zip(&state.progress).map(|(id, p)| format!("{id} {}", p.processed)).collect();
            cep_telemetry::logging::progress(format_args!(
                "{:>5.1}s  processed {processed}  ({rate:.0} ev/s)  outputs {}  | {}",
                started.elapsed().as_secs_f64(),
                state.rules.total(),
                per_worker.join(" | ")
            ));
            last_progress = (Instant::now(), processed);
        }
        if last_publish.elapsed() >= Duration::from_secs(1) {
            state.publish(&metrics, worker_ids.len());
            last_publish = Instant::now();
        }
    }
    drop(clock);
    // Everyone keeps their sockets open until the collector has everything: say so now.
    if !shutdown.load(Ordering::Relaxed) {
        if let Err(error) =
            end_of_run(&context, &config.router, FrameKind::RunFinished, Duration::from_secs(5), &shutdown)
        {
            warn!(%error, "could not tell the router the run is over");
        }
    }
    let rows = csv.finish().map_err(write_err(&csv_path))?;
    // Final values for a last scrape (summary() first: it records the router hop's last run).
    let latency = state.hops.summary();
    state.publish(&metrics, worker_ids.len());
    state.intervals.finish(&state.hops.end_to_end).map_err(write_err(&config.out))?;
    crate::latency::write_distribution(&config.out, &state.hops.end_to_end).map_err(write_err(&config.out))?;
    // A complete run ends with the last report; an interrupted one with the last frame.
    let end_ns = if state.reports.len() == worker_ids.len() { state.last_report_ns } else { state.last_frame_ns };
    state.observed.duration_s = end_ns.saturating_sub(ready.start_ns) as f64 / 1e9;
    state.observed.latency = latency;
    state.observed.rejected = state.rejections.counts().clone();
    state.observed.outputs = state.rules.counts();
    let summary =
        summarize(ready.streams, &worker_ids, &state.reports, &state.progress, state.router.as_ref(), state.observed);
    write_results(&config.out, &summary)?;
    metrics.complete(summary.complete);
    info!(
        rows,
        sent = summary.events_sent,
        processed = summary.events_processed,
        lost = summary.events_lost,
        complete = summary.complete,
        "collector done"
    );
    Ok(summary)
}

/// Writes `summary.json` and `report.txt`.
pub fn write_results(out: &Path, summary: &Summary) -> Result<(), CollectorError> {
    let json_path = out.join("summary.json");
    let json = serde_json::to_string_pretty(summary).expect("the summary serialises");
    std::fs::write(&json_path, json + "\n").map_err(write_err(&json_path))?;
    let report_path = out.join("report.txt");
    std::fs::write(&report_path, summary.ycsb_report()).map_err(write_err(&report_path))?;
    Ok(())
}

struct Collecting {
    csv_mode: CsvMode,
    max_frame_bytes: usize,
    warmup_end_ns: u64,
    hops: HopHistograms,
    intervals: IntervalRecorder,
    decoded: Vec<OutputRecord>,
    /// Per stream: which ticks' outputs have arrived. A tick's outputs (one per query that
    /// fired) leave its worker together, in one frame, so a tick seen in an earlier group
    /// means the whole group is a duplicate.
    seen: Vec<SeenSet>,
    rules: RuleTable,
    observed: Observed,
    progress: Vec<WorkerProgress>,
    reports: BTreeMap<u32, WorkerReport>,
    router: Option<RouterReport>,
    last_report_ns: u64,
    last_frame_ns: u64,
    rejections: Rejections,
}

impl Collecting {
    /// Copies what the collector knows to the metrics (once a second and at the end).
    fn publish(&self, metrics: &crate::metrics::CollectorMetrics, workers: usize) {
        metrics.observe(crate::metrics::Snapshot {
            outputs: &self.rules,
            output_duplicates: self.observed.output_duplicates,
            warmup_outputs: self.observed.warmup_outputs,
            final_outputs: self.observed.final_outputs,
            hops: &self.hops,
            workers,
            workers_reported: self.reports.len(),
            router_reported: self.router.is_some(),
            clock_offsets: &self.observed.clock_offsets,
            rejected: self.rejections.counts(),
        });
    }

    fn handle(&mut self, frame: &[u8], csv: &mut OutputsCsv) -> std::io::Result<()> {
        let t_collector = now_ns();
        let Some((header, rest)) = self.rejections.accept(frame, self.max_frame_bytes) else {
            return Ok(());
        };
        match header.kind {
            FrameKind::Outputs | FrameKind::FinalOutputs => {
                let mut decoded = std::mem::take(&mut self.decoded);
                let result = match decode_outputs(frame, &header, rest, &mut decoded) {
                    Ok(()) if header.kind == FrameKind::FinalOutputs => {
                        self.record_final(frame, header.sender, &decoded, t_collector, csv)
                    }
                    Ok(()) => self.record(frame, header.sender, &decoded, t_collector, csv),
                    Err(error) => {
                        self.rejections.reject(error.cause(), Some(header.sender), &error);
                        Ok(())
                    }
                };
                self.decoded = decoded;
                result?;
            }
            FrameKind::WorkerProgress => {
                if let Some(progress) = self.decode_cold::<WorkerProgress>(&header, rest) {
                    if let Some(slot) = self.progress.get_mut(header.sender as usize) {
                        *slot = progress;
                    }
                }
            }
            FrameKind::WorkerReport => {
                if let Some(report) = self.decode_cold::<WorkerReport>(&header, rest) {
                    if let Some(slot) = self.progress.get_mut(report.index as usize) {
                        *slot = WorkerProgress {
                            processed: report.processed,
                            outputs: report.outputs,
                            rejected: report.rejected.values().sum(),
                        };
                    }
                    self.last_report_ns = t_collector;
                    self.reports.insert(report.index, report);
                }
            }
            FrameKind::Rules => {
                if let Some(installed) = self.decode_cold::<RulesInstalled>(&header, rest) {
                    self.rules.install(header.sender, &installed);
                }
            }
            FrameKind::RouterReport => {
                if let Some(report) = self.decode_cold::<RouterReport>(&header, rest) {
                    self.router = Some(report);
                }
            }
            FrameKind::ClockReport => {
                if let Some(report) = self.decode_cold::<ClockReport>(&header, rest) {
                    self.observed.clock_offsets.push(ClockOffset {
                        node: report.node,
                        offset_us: report.estimate.offset_ns as f64 / 1000.0,
                        uncertainty_us: report.estimate.uncertainty_ns as f64 / 1000.0,
                    });
                }
            }
            _ => self.rejections.unexpected(&header),
        }
        Ok(())
    }

    fn decode_cold<T: serde::de::DeserializeOwned>(&mut self, header: &FrameHeader, rest: &[u8]) -> Option<T> {
        decode_message::<T>(header, rest, header.kind)
            .map_err(|error| self.rejections.reject(error.cause(), Some(header.sender), &error))
            .ok()
    }

    /// Outputs of windows the end of input closed: counted and written like any output, but
    /// no tick caused them, so they have no latency and no place in the per-tick duplicate
    /// check.
    fn record_final(
        &mut self,
        frame: &[u8],
        sender: u32,
        outputs: &[OutputRecord],
        t_collector: u64,
        csv: &mut OutputsCsv,
    ) -> std::io::Result<()> {
        for output in outputs {
            let Some(slot) = self.rule_slot(sender, output.rule) else { continue };
            self.observed.final_outputs += 1;
            self.keep(slot, output, frame, t_collector, csv)?;
        }
        Ok(())
    }

    /// The rule slot of an output of `sender`'s, or `None` (counted as `unknown_rule`) when
    /// that worker never announced the rule index.
    fn rule_slot(&mut self, sender: u32, rule: u32) -> Option<usize> {
        let slot = self.rules.slot(sender, rule);
        if slot.is_none() {
            self.rejections.reject(
                "unknown_rule",
                Some(sender),
                &format_args!("output of rule index {rule} (not in the worker's announced rules)"),
            );
        }
        slot
    }

    /// Counts an output under its rule and writes it to outputs.csv if the mode asks.
    fn keep(
        &mut self,
        slot: usize,
        output: &OutputRecord,
        frame: &[u8],
        t_collector: u64,
        csv: &mut OutputsCsv,
    ) -> std::io::Result<()> {
        self.rules.count(slot);
        let writes = match self.csv_mode {
            CsvMode::All => true,
            CsvMode::Alerts => self.rules.is_alert(slot),
            CsvMode::None => false,
        };
        if writes {
            csv.write(self.rules.name(slot), output, output.symbol_bytes(frame), t_collector)?;
        }
        Ok(())
    }

    fn record(
        &mut self,
        frame: &[u8],
        sender: u32,
        outputs: &[OutputRecord],
        t_collector: u64,
        csv: &mut OutputsCsv,
    ) -> std::io::Result<()> {
        // Every output of a frame arrived at the same instant: close a finished interval first.
        self.intervals.advance(t_collector, &self.hops.end_to_end)?;
        let mut measured = 0;
        let mut group: Option<(u32, u64, bool)> = None;
        for output in outputs {
            let stream = output.injector as usize;
            if stream >= self.seen.len() {
                self.rejections.reject("unknown_stream", None, &format_args!("output of stream {}", output.injector));
                continue;
            }
            let Some(slot) = self.rule_slot(sender, output.rule) else { continue };
            let duplicate = match group {
                Some((injector, seq, duplicate)) if (injector, seq) == (output.injector, output.seq) => duplicate,
                _ => {
                    let duplicate = self.seen[stream].insert(output.seq) == Arrival::Duplicate;
                    group = Some((output.injector, output.seq, duplicate));
                    duplicate
                }
            };
            if duplicate {
                self.observed.output_duplicates += 1;
            }
            if output.stamps.t_inject < self.warmup_end_ns {
                self.observed.warmup_outputs += 1;
            } else {
                self.hops.record_output(&output.stamps, t_collector);
                measured += 1;
            }
            self.keep(slot, output, frame, t_collector, csv)?;
        }
        // The batch's own hops are the same for every output in it.
        if let Some(first) = outputs.first() {
            self.hops.record_batch(&first.stamps, t_collector, measured);
        }
        Ok(())
    }
}
