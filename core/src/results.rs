//! The results folder's `summary.json` (docs/RESULTS.md explains every field). Field names
//! here are a contract: more may be added, none renamed.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub mod earlier_run;
mod verdict;
pub use verdict::{grouped, known_grouped, readable_micros};

/// What `cep engine` writes beside its input by default.
pub const STANDALONE_OUTPUTS: &str = "standalone-outputs.csv";

/// The files a run leaves in its results folder (the collector's, the recorded input, and
/// the standalone engine's outputs beside it). A new `cep run` removes them first, so no file
/// of an earlier run stays beside a new run's.
pub const RUN_FILES: &[&str] = &[
    "summary.json",
    "report.txt",
    "outputs.csv",
    "input.csv",
    "intervals.csv",
    "throughput.csv",
    "report.html",
    "latency.hlog",
    "percentiles.csv",
    "latency_histogram.csv",
    STANDALONE_OUTPUTS,
    // Written by `cep run --metrics-listen` for Prometheus's file_sd.
    "prometheus-targets.json",
];

/// What the collector writes when a run ends; it removes them when the next starts, so they
/// cannot pass for the running one's.
pub const COLLECTOR_END_FILES: &[&str] = &["summary.json", "report.txt", "percentiles.csv", "latency_histogram.csv"];

/// Removes the files `names` from `dir` where they exist; the error names the file.
pub fn remove_files(dir: &std::path::Path, names: &[&str]) -> Result<(), (std::path::PathBuf, std::io::Error)> {
    for name in names {
        let path = dir.join(name);
        match std::fs::remove_file(&path) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => return Err((path, error)),
            _ => {}
        }
    }
    Ok(())
}

/// Latency distribution of one hop, in microseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    /// Outputs measured (outputs, not events).
    pub count: u64,
    /// Mean latency.
    pub mean: f64,
    /// Smallest latency.
    pub min: f64,
    /// Median.
    pub p50: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// 99.99th percentile.
    pub p9999: f64,
    /// Largest latency.
    pub max: f64,
}

/// Output counts per rule (query name), e.g. `perc`, `trend`, `volatility` for the reference
/// rules; every query that ran is listed, with 0 if it never fired.
pub type OutputCounts = BTreeMap<String, u64>;

/// One rule set of a run: the one it started with (epoch 0) or a deployment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RulesEpoch {
    /// 0 for the rules the run started with, then one more per deployment.
    pub epoch: u32,
    /// The file's path, or `built-in:reference`.
    pub origin: String,
    /// The names of its queries, in order.
    pub queries: Vec<String>,
    /// Per injector stream, the first sequence number processed under these rules (empty
    /// for the rules the run started with).
    pub at: BTreeMap<u32, u64>,
}

/// Latency per hop and end to end.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HopLatencies {
    /// From the tick's intended send time to the output's arrival at the collector.
    pub end_to_end: LatencySummary,
    /// Intended send time to the router's receipt (includes the injector's own delay).
    pub injector_to_router: LatencySummary,
    /// Inside the router: receipt to departure.
    pub router: LatencySummary,
    /// Router departure to the worker's receipt.
    pub router_to_worker: LatencySummary,
    /// Inside the worker: receipt to the engine's exit.
    pub engine: LatencySummary,
    /// Engine exit to the collector's receipt.
    pub worker_to_collector: LatencySummary,
}

/// One worker's share of the run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerSummary {
    /// The worker's id (`worker-0`, ...).
    pub id: String,
    /// Ticks processed: from the worker's report, or (a worker that never reported) at least
    /// what its last progress said.
    pub events: u64,
    /// Symbols the worker owns, from its report; `None` if it never reported.
    pub symbols: Option<u64>,
    /// True for a worker that died during the run (it sent no report; see `failovers`): its
    /// `events` are what it had processed at the checkpoint its symbols were restored from
    /// (the ticks after it were replayed to the survivors, who count them), or, if nothing
    /// could be restored, at least what its last progress said.
    #[serde(default)]
    pub failed: bool,
    /// Ticks of this worker whose outputs the collector kept (each tick once, duplicates and
    /// replays aside): it processed at least these, so `events` is never below them (a worker
    /// without a report counts the larger of its last progress and this).
    #[serde(default)]
    pub ticks_with_outputs: u64,
}

/// One injector stream's accounting.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamSummary {
    /// The stream's id (the injector connection).
    pub stream: u32,
    /// From the stream's end-of-stream marker; `None` if it never arrived.
    pub sent: Option<u64>,
    /// From the router's report; `None` if it never arrived.
    pub received_by_router: Option<u64>,
    /// Processed by the workers that reported, and by each dead worker up to the checkpoint
    /// its symbols were restored from.
    pub processed: u64,
    /// `sent - processed`; `None` while `sent` is unknown, when `processed` is more than
    /// `sent` (an error, in `errors`), and when a worker whose report never came processed
    /// ticks (only its total progress is known) and the run has several streams: how those
    /// split over the streams cannot be known (with one stream they are its own, in
    /// `processed`).
    pub lost: Option<u64>,
}

/// One node's clock offset.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClockOffset {
    /// The node's name (`router`, a worker id, `injector-0`, ...).
    pub node: String,
    /// What the node adds to its clock to read the collector's, µs.
    pub offset_us: f64,
    /// How far the true offset may be from `offset_us`, µs.
    pub uncertainty_us: f64,
}

/// `summary.json`. A run that did not complete (interrupted, or a process that never
/// reported) says what it does not know: `None` (null) where a count is unknown, never a guess.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// The sum of every stream's end-of-stream count; `None` if any stream's is unknown.
    pub events_sent: Option<u64>,
    /// Exact in a complete run; otherwise at least this many (reports and last progress).
    /// The streams' `processed`, plus what workers processed that no stream is known for
    /// (the last progress of a worker whose report never came). Never raised to match
    /// `events_sent`: more processed than sent is an error (in `errors`).
    pub events_processed: u64,
    /// Always the sum of `lost_by_cause`; `None` while `events_sent` is unknown. Per stream,
    /// `sent - processed` split by cause (a stream that processed more than it sent is an
    /// error and adds nothing); then the ticks processed by workers whose report never came
    /// (known only in total) are taken off `not_processed_by_worker`, then
    /// `unknown_router_report_missing`, then `not_received_by_router`. When nothing is in
    /// `errors`, this is exactly `events_sent - events_processed`.
    pub events_lost: Option<u64>,
    /// Ticks a worker had already processed and outputs the collector had already received:
    /// skipped, and counted here.
    pub duplicates: u64,
    /// From the start signal (warm-up included) to the last worker's report, seconds.
    pub duration_s: f64,
    /// `events_processed / duration_s`.
    pub throughput_eps: f64,
    /// Outputs received per query, duplicates included.
    pub outputs: OutputCounts,
    /// Latency per hop and end to end, µs.
    pub latency_us: HopLatencies,
    /// Each worker's events and symbols.
    pub workers: Vec<WorkerSummary>,
    /// Lost events by cause: `not_received_by_router`, `not_processed_by_worker`,
    /// `unknown_router_report_missing`, and two lower bounds (only while `events_lost` is
    /// unknown): `stream_never_ended`, ticks of a stream without its end marker that the router
    /// received and no worker processed, and `injector_lost`, the same for a stream the router
    /// ended itself because its injector fell silent or died (what it sent beyond is unknown).
    /// Causes with nothing lost are left out.
    pub lost_by_cause: BTreeMap<String, u64>,
    /// Rejected frames and ticks by place (`router`, `worker:<id>`, `collector`) and cause.
    pub rejected: BTreeMap<String, BTreeMap<String, u64>>,
    /// Ticks that reached a worker behind a later tick of the same symbol.
    pub out_of_order: u64,
    /// Ticks whose event time was behind their symbol's latest: processed at that latest time.
    pub late: u64,
    /// Ticks more than the allowed lateness behind their symbol's latest event time: counted
    /// in `events_processed`, dropped by the engine (no output).
    pub late_dropped: u64,
    /// Each injector stream's accounting.
    pub streams: Vec<StreamSummary>,
    /// True when every stream, worker and the router reported their end (a dead worker whose
    /// symbols were restored and replayed needs no report), the counts balance (`errors` is
    /// empty) and no `failure` ended the run; false when the collector stopped on its idle
    /// timeout or a shutdown signal, lost the router, or a dead worker's state was lost.
    pub complete: bool,
    /// True when the collector's sockets ran under CURVE, so the whole cluster did (an open
    /// peer cannot talk to a CURVE one): every frame encrypted and every peer authenticated.
    #[serde(default)]
    pub secure: bool,
    /// True in a snapshot the collector writes while the run goes (`--summary-every`): the
    /// figures so far, `complete` false; false in the summary written at the end.
    #[serde(default)]
    pub running: bool,
    /// Outputs whose tick was intended during the warm-up: counted, not in the histograms.
    pub warmup_outputs: u64,
    /// Outputs of tumbling windows the end of input closed (no tick caused them): counted in
    /// `outputs`, not in the latency histograms.
    pub final_outputs: u64,
    /// Outputs the workers reported sending that never reached the collector.
    pub outputs_lost: u64,
    /// Outputs the collector received but did not write to outputs.csv, which had reached
    /// `--outputs-max-size` (counted in `outputs` all the same).
    #[serde(default)]
    pub outputs_not_written: u64,
    /// Each node's clock offset to the collector (whose clock all stamps are in), and the
    /// uncertainty of that estimate, in microseconds.
    pub clock_offsets: Vec<ClockOffset>,
    /// The rules the run started with and each deployment, with where the stream switched.
    pub rules: Vec<RulesEpoch>,
    /// Each time a worker joined or left the running cluster, and what moving its symbols cost.
    #[serde(default)]
    pub rescales: Vec<RescaleSummary>,
    /// Each worker that died during the run, and how its symbols were recovered.
    #[serde(default)]
    pub failovers: Vec<FailoverSummary>,
    /// The checkpoint rounds, as the router counted them.
    #[serde(default)]
    pub checkpoints: CheckpointSummary,
    /// Outputs that arrived twice across a failover (from a dead worker and from the survivor
    /// that replayed its ticks, in either order): the second is dropped, counted here only
    /// (not in `outputs`, `duplicates`, outputs.csv or the latency figures).
    #[serde(default)]
    pub replayed_outputs: u64,
    /// Frames dropped because they come again: sent again to a restarted collector that
    /// already had them (saved before it died), sent before the collector (queued in a socket
    /// that reconnected; sent again after), or a joining worker's frames that came before the
    /// router's word on its key (held back and asked again; a frame held back twice counts
    /// twice). Counted here only.
    #[serde(default)]
    pub resent_frames: u64,
    /// Counts that contradict each other (e.g. `stream 0: 120 ticks processed but its
    /// injector sent 100`), one line each; any makes the run incomplete.
    #[serde(default)]
    pub errors: Vec<String>,
    /// Why the run failed (the router lost, a dead worker whose state could not be restored,
    /// an injector taken for dead, a stream its injector cut short); `null` when none did.
    #[serde(default)]
    pub failure: Option<String>,
}

/// The checkpoint rounds of a run. A round is the barrier the router sends every worker and
/// the snapshots they store for it; one a rescale or a deployment dropped counts in neither
/// `completed` nor `failed`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CheckpointSummary {
    /// Rounds for which every worker stored its snapshot: a failover restores from one once
    /// the collector has confirmed the outputs up to it.
    pub completed: u64,
    /// Rounds a worker could not store a part of (a full disk, a part too large), whose
    /// snapshot built on one the router does not hold, during which a worker died, or that did
    /// not complete within the move time-out: until a later round completes, those workers
    /// cannot fail over exactly.
    pub failed: u64,
    /// Why the last failed round failed; empty when none did.
    pub last_failure: String,
    /// The last completed round: its id (0: none), the time from its barriers to the last
    /// snapshot stored (ms), and the bytes stored for it by all workers.
    pub last_completed: u64,
    /// See `last_completed`.
    pub last_duration_ms: f64,
    /// See `last_completed`.
    pub last_bytes: u64,
}

/// A worker died and its symbols moved to the survivors.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FailoverSummary {
    /// The dead worker's id.
    pub worker: String,
    /// When the router noticed, seconds after the run's start.
    pub at_s: f64,
    /// Whether its symbols were restored from a checkpoint and their ticks since replayed
    /// (outputs stay exactly once); if not, `state_lost` names those that started afresh.
    pub recovered: bool,
    /// The checkpoint restored (0: the start of the run).
    pub checkpoint: u64,
    /// Symbols moved to the survivors.
    pub symbols: u64,
    /// Ticks replayed to the survivors (those routed to it since the checkpoint).
    pub replayed: u64,
    /// Symbols whose state could not be restored: their outputs after it come from empty
    /// windows.
    pub state_lost: Vec<String>,
    /// Why the router took it for dead.
    pub reason: String,
}

/// One live rescale: a worker joined or left, and its symbols moved with their state.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RescaleSummary {
    /// `join` or `leave`.
    pub kind: String,
    /// The worker that joined or left.
    pub worker: String,
    /// When it started, seconds after the run's start.
    pub at_s: f64,
    /// How long the move took (first hand-off to the last state delivered), ms.
    pub duration_ms: f64,
    /// Symbols moved.
    pub symbols: u64,
    /// State moved (the engines' exports), bytes.
    pub state_bytes: u64,
    /// Slices the move went in.
    pub slices: u32,
    /// Ticks held while their symbol moved.
    pub held_ticks: u64,
    /// The longest any one slice's symbols waited, ms.
    pub longest_slice_ms: f64,
    /// The largest end-to-end latency of a moved symbol's output from the start of the move
    /// to that symbol's first output at its new owner, us; `None` if none was measured (or
    /// the router's record of the move never arrived).
    pub max_moved_latency_us: Option<f64>,
    /// Whether the move finished: every symbol it set out to move did, with its state (false
    /// if the router's record never came, the input ended first, or state was lost).
    pub finished: bool,
    /// Symbols whose state was lost in the move (their old owner never handed it off within
    /// the router's `--move-timeout`): their outputs after it come from empty windows.
    #[serde(default)]
    pub state_lost: Vec<String>,
}

/// What report.txt's figures mean, at its top: tools read only the `[SECTION], Metric, value`
/// lines, people need to know that latency is counted per output, not per tick.
const LEGEND: &str = "\
# cep run report: [SECTION], Metric, value lines (YCSB style); summary.json has the same and more.
# OVERALL: events are the ticks the injector sent. RunTime runs from the start (warm-up included)
#   to the last worker's report (a partial run: to the last frame received); Throughput(ops/sec) = EventsProcessed / RunTime.
#   Secure: every socket ran under CURVE, encrypted and authenticated (`cep run --secure`).
# OUTPUTS: what the rules emitted, duplicates included. A tick gives one output per query that
#   fires on it (none, one or several), so outputs and events differ. Total = Measured +
#   DuringWarmup + ClosedByEndOfInput (tumbling windows still open when the input ended: no
#   tick caused them, so no latency); Lost = outputs the workers sent that never arrived;
#   Replayed = outputs received twice across a failover (a dead worker's, then its survivor's
#   replay, or the other way round): dropped, not in Total. NotWrittenToCsv = outputs counted
#   here but not written to outputs.csv, which had reached --outputs-max-size.
# LateEvents: ticks behind their symbol's latest event time, processed at that time;
#   LateDropped: later than the allowed lateness, dropped by the engine (counted processed).
# Latency sections count OUTPUTS, not events: Operations = the outputs measured (ticks intended
#   after the warm-up), one latency each, in microseconds. END_TO_END runs from the tick's
#   intended send time to the output's arrival at the collector; INJECTOR_TO_ROUTER, ROUTER,
#   ROUTER_TO_WORKER, ENGINE and WORKER_TO_COLLECTOR split that path hop by hop.
# CLOCK: each node's measured offset to the collector's clock, which every stamp is in.
# WORKER: the ticks each worker processed (Events) and the symbols it owns (Symbols).
# FAILOVER: each worker that died: when (s after the start), whether its symbols were restored
#   from a checkpoint and replayed, how many moved, ticks replayed, symbols whose state was lost.
";

/// Added when the run did not complete: which figures are bounds and which are unknown.
const PARTIAL: &str = "\
# PARTIAL RUN (Complete, false): interrupted, or a stream, a worker or the router never sent its
#   end. A figure written `unknown` was never reported (EventsSent needs every stream's end
#   marker). EventsProcessed, Throughput, OUTPUTS, latency Operations and each WORKER's Events
#   count what arrived: the run did at least that much. LOST stream_never_ended and injector_lost
#   (a stream the router ended itself, its injector silent or dead) are lower bounds.
";

/// A count, or `unknown` when it was never reported.
pub fn known(count: Option<u64>) -> String {
    count.map_or_else(|| "unknown".to_string(), |count| count.to_string())
}

impl Summary {
    /// The identities every summary keeps, complete or not, rolling or final: the run's figures
    /// are the sums of the per-stream, per-cause and per-worker ones wherever those are known.
    /// Each broken one, in a line (none: they all hold).
    pub fn broken_identities(&self) -> Vec<String> {
        let mut broken = Vec::new();
        let mut check = |holds: bool, what: String| {
            if !holds {
                broken.push(what);
            }
        };
        if let Some(lost) = self.events_lost {
            let by_cause: u64 = self.lost_by_cause.values().sum();
            check(lost == by_cause, format!("events_lost {lost} != {by_cause}, the sum of lost_by_cause"));
        }
        let streams_lost: Option<u64> = self.streams.iter().map(|s| s.lost).sum();
        if let (Some(lost), Some(streams_lost)) = (self.events_lost, streams_lost) {
            check(lost == streams_lost, format!("events_lost {lost} != {streams_lost}, the sum of the streams' lost"));
        }
        let streams_sent: Option<u64> = self.streams.iter().map(|s| s.sent).sum();
        if let Some(sent) = self.events_sent {
            check(
                streams_sent == Some(sent),
                format!("events_sent {sent} != {streams_sent:?}, the sum of the streams' sent"),
            );
        }
        let streams_processed: u64 = self.streams.iter().map(|s| s.processed).sum();
        let processed = self.events_processed;
        check(
            processed >= streams_processed,
            format!("events_processed {processed} < {streams_processed}, the sum of the streams' processed"),
        );
        if self.streams.len() == 1 {
            check(
                processed == streams_processed,
                format!("events_processed {processed} != {streams_processed}, its one stream's processed"),
            );
        }
        // What its outputs prove it processed (a dead worker's counts are its checkpoint's, and
        // its later ticks the survivors').
        for worker in self.workers.iter().filter(|w| !w.failed) {
            check(
                worker.events >= worker.ticks_with_outputs,
                format!(
                    "worker {}: events {} < {} ticks whose outputs arrived",
                    worker.id, worker.events, worker.ticks_with_outputs
                ),
            );
        }
        let by_worker: u64 = self.workers.iter().map(|w| w.events).sum();
        check(
            processed == by_worker,
            format!("events_processed {processed} != {by_worker}, the sum of the workers' events"),
        );
        // (A run whose counts contradict each other says so in `errors`.)
        if let (Some(sent), Some(lost), true) = (self.events_sent, self.events_lost, self.errors.is_empty()) {
            check(
                processed + lost == sent,
                format!("events_processed {processed} + events_lost {lost} != events_sent {sent}"),
            );
        }
        for stream in &self.streams {
            if let (Some(sent), Some(lost)) = (stream.sent, stream.lost) {
                check(
                    stream.processed + lost == sent,
                    format!("stream {}: processed {} + lost {lost} != sent {sent}", stream.stream, stream.processed),
                );
            }
        }
        broken
    }

    /// The event counts in one phrase, e.g. `340532 of 400000 events processed, 59468 lost`, or
    /// for a run whose streams never ended `at least 340532 events processed, sent and lost
    /// Why the run is not complete, in a few words: the failure that ended it, else the
    /// first contradiction in its counts, else what never arrived.
    pub fn incomplete_because(&self) -> String {
        self.failure
            .clone()
            .or_else(|| self.errors.first().cloned())
            .unwrap_or_else(|| "a stream, a worker or the router never sent its end".to_string())
    }

    /// unknown`.
    pub fn counts(&self) -> String {
        match (self.events_sent, self.events_lost) {
            (Some(sent), Some(lost)) => format!("{} of {sent} events processed, {lost} lost", self.events_processed),
            _ => format!("at least {} events processed, sent and lost unknown", self.events_processed),
        }
    }

    /// The human summary in YCSB's style (`[SECTION], Metric, value`) under a legend (`#`).
    pub fn ycsb_report(&self) -> String {
        use std::fmt::Write;
        let mut out = String::from(LEGEND);
        if !self.complete {
            out.push_str(PARTIAL);
        }
        // One line each, whatever the text holds: tools read only the `[SECTION]` lines.
        let one_line = |text: &str| text.replace(['\n', '\r'], " ");
        if let Some(failure) = &self.failure {
            let _ = writeln!(out, "# FAILURE: {}", one_line(failure));
        }
        for error in &self.errors {
            let _ = writeln!(out, "# ERROR: {}", one_line(error));
        }
        let mut line = |section: &str, metric: &str, value: String| {
            let _ = writeln!(out, "[{section}], {metric}, {value}");
        };
        line("OVERALL", "RunTime(ms)", format!("{:.0}", self.duration_s * 1000.0));
        line("OVERALL", "Throughput(ops/sec)", format!("{:.1}", self.throughput_eps));
        line("OVERALL", "EventsSent", known(self.events_sent));
        line("OVERALL", "EventsProcessed", self.events_processed.to_string());
        line("OVERALL", "EventsLost", known(self.events_lost));
        line("OVERALL", "Duplicates", self.duplicates.to_string());
        line("OVERALL", "OutOfOrder", self.out_of_order.to_string());
        line("OVERALL", "LateEvents", self.late.to_string());
        line("OVERALL", "LateDropped", self.late_dropped.to_string());
        line("OVERALL", "Complete", self.complete.to_string());
        line("OVERALL", "Secure", self.secure.to_string());
        for (cause, count) in &self.lost_by_cause {
            line("LOST", cause, count.to_string());
        }
        for (place, causes) in &self.rejected {
            for (cause, count) in causes {
                line("REJECTED", &format!("{place}:{cause}"), count.to_string());
            }
        }
        line("OUTPUTS", "Total", self.outputs.values().sum::<u64>().to_string());
        line("OUTPUTS", "Measured", self.latency_us.end_to_end.count.to_string());
        line("OUTPUTS", "DuringWarmup", self.warmup_outputs.to_string());
        line("OUTPUTS", "ClosedByEndOfInput", self.final_outputs.to_string());
        line("OUTPUTS", "Lost", self.outputs_lost.to_string());
        line("OUTPUTS", "NotWrittenToCsv", self.outputs_not_written.to_string());
        line("OUTPUTS", "Replayed", self.replayed_outputs.to_string());
        line("FRAMES", "ResentToRestartedCollector", self.resent_frames.to_string());
        // Many-query rule sets (the Oracle 400) list their counts in summary.json only.
        if self.outputs.len() <= 16 {
            for (rule, count) in &self.outputs {
                line("OUTPUTS", rule, count.to_string());
            }
        }
        for rules in &self.rules {
            let at: Vec<String> = rules.at.iter().map(|(stream, seq)| format!("{stream}:{seq}")).collect();
            let at = if at.is_empty() { "start".to_string() } else { at.join(" ") };
            line(
                &format!("RULES {}", rules.epoch),
                &rules.origin,
                match rules.queries.len() {
                    1 => format!("1 query from {at}"),
                    queries => format!("{queries} queries from {at}"),
                },
            );
        }
        let hops = [
            ("END_TO_END", &self.latency_us.end_to_end),
            ("INJECTOR_TO_ROUTER", &self.latency_us.injector_to_router),
            ("ROUTER", &self.latency_us.router),
            ("ROUTER_TO_WORKER", &self.latency_us.router_to_worker),
            ("ENGINE", &self.latency_us.engine),
            ("WORKER_TO_COLLECTOR", &self.latency_us.worker_to_collector),
        ];
        for (section, h) in hops {
            line(section, "Operations", h.count.to_string());
            line(section, "AverageLatency(us)", format!("{:.2}", h.mean));
            line(section, "MinLatency(us)", format!("{:.2}", h.min));
            line(section, "MaxLatency(us)", format!("{:.2}", h.max));
            line(section, "50thPercentileLatency(us)", format!("{:.2}", h.p50));
            line(section, "95thPercentileLatency(us)", format!("{:.2}", h.p95));
            line(section, "99thPercentileLatency(us)", format!("{:.2}", h.p99));
            line(section, "99.9thPercentileLatency(us)", format!("{:.2}", h.p999));
            line(section, "99.99thPercentileLatency(us)", format!("{:.2}", h.p9999));
        }
        for clock in &self.clock_offsets {
            line(&format!("CLOCK {}", clock.node), "OffsetToCollector(us)", format!("{:.1}", clock.offset_us));
            line(&format!("CLOCK {}", clock.node), "Uncertainty(us)", format!("{:.1}", clock.uncertainty_us));
        }
        for worker in &self.workers {
            line(&format!("WORKER {}", worker.id), "Events", worker.events.to_string());
            line(&format!("WORKER {}", worker.id), "Symbols", known(worker.symbols));
            if worker.failed {
                line(&format!("WORKER {}", worker.id), "Failed", "true".into());
            }
        }
        if self.checkpoints != CheckpointSummary::default() {
            let checkpoints = &self.checkpoints;
            line("CHECKPOINTS", "Completed", checkpoints.completed.to_string());
            line("CHECKPOINTS", "Failed", checkpoints.failed.to_string());
            if checkpoints.last_completed != 0 {
                line("CHECKPOINTS", "LastCompleted", checkpoints.last_completed.to_string());
                line("CHECKPOINTS", "LastDuration(ms)", format!("{:.1}", checkpoints.last_duration_ms));
                line("CHECKPOINTS", "LastBytes", checkpoints.last_bytes.to_string());
            }
        }
        for failover in &self.failovers {
            let section = format!("FAILOVER {}", failover.worker);
            line(&section, "AtS", format!("{:.3}", failover.at_s));
            line(&section, "Recovered", failover.recovered.to_string());
            line(&section, "Checkpoint", failover.checkpoint.to_string());
            line(&section, "Symbols", failover.symbols.to_string());
            line(&section, "Replayed", failover.replayed.to_string());
            line(&section, "StateLost", failover.state_lost.len().to_string());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary() -> Summary {
        Summary {
            events_sent: Some(2_200_000),
            events_lost: Some(0),
            events_processed: 2_200_000,
            duration_s: 11.0,
            throughput_eps: 200_000.0,
            outputs: [("perc".to_string(), 200_000), ("volatility".to_string(), 2_200_000)].into(),
            warmup_outputs: 200_000,
            latency_us: HopLatencies {
                end_to_end: LatencySummary { count: 2_200_000, p99: 850.0, ..LatencySummary::default() },
                ..HopLatencies::default()
            },
            workers: vec![WorkerSummary {
                id: "worker-0".into(),
                events: 2_200_000,
                symbols: Some(1470),
                failed: false,
                ticks_with_outputs: 2_200_000,
            }],
            complete: true,
            ..Summary::default()
        }
    }

    #[test]
    fn a_new_run_removes_what_the_collector_writes_at_the_end() {
        assert!(COLLECTOR_END_FILES.iter().all(|name| RUN_FILES.contains(name)));
    }

    #[test]
    fn the_report_says_what_its_figures_count() {
        let report = summary().ycsb_report();
        // Every line is a comment of the legend or a `[SECTION], Metric, value` line.
        for line in report.lines() {
            assert!(line.starts_with("# ") || line.starts_with("#   ") || line.split(", ").count() == 3, "{line}");
        }
        assert!(report.starts_with("# cep run report") && !report.contains("PARTIAL"), "{report}");
        assert!(report.contains("Latency sections count OUTPUTS, not events"), "{report}");
        for expected in [
            "[OVERALL], EventsSent, 2200000\n",
            "[OUTPUTS], Total, 2400000\n",
            "[OUTPUTS], Measured, 2200000\n",
            "[OUTPUTS], DuringWarmup, 200000\n",
            "[OUTPUTS], ClosedByEndOfInput, 0\n",
            "[OUTPUTS], Lost, 0\n",
            "[END_TO_END], Operations, 2200000\n",
            "[END_TO_END], 99thPercentileLatency(us), 850.00\n",
            "[WORKER worker-0], Symbols, 1470\n",
        ] {
            assert!(report.contains(expected), "{expected} in {report}");
        }
    }

    #[test]
    fn a_partial_report_says_what_is_unknown_and_what_is_a_least() {
        let partial = Summary {
            events_sent: None,
            events_lost: None,
            complete: false,
            workers: vec![WorkerSummary {
                id: "worker-1".into(),
                events: 170_000,
                symbols: None,
                failed: false,
                ticks_with_outputs: 0,
            }],
            ..summary()
        };
        let report = partial.ycsb_report();
        assert!(report.contains("# PARTIAL RUN (Complete, false)"), "{report}");
        for expected in [
            "[OVERALL], EventsSent, unknown\n",
            "[OVERALL], EventsProcessed, 2200000\n",
            "[OVERALL], EventsLost, unknown\n",
            "[OVERALL], Complete, false\n",
            "[WORKER worker-1], Events, 170000\n",
            "[WORKER worker-1], Symbols, unknown\n",
        ] {
            assert!(report.contains(expected), "{expected} in {report}");
        }
        // summary.json says the same: unknown is null.
        let json: serde_json::Value = serde_json::to_value(&partial).unwrap();
        assert!(
            json["events_sent"].is_null() && json["events_lost"].is_null() && json["workers"][0]["symbols"].is_null()
        );
    }

    #[test]
    fn the_report_gives_the_checkpoint_rounds_when_there_were_any() {
        assert!(!summary().ycsb_report().contains("[CHECKPOINTS]"), "none without checkpoints");
        let checkpoints = CheckpointSummary {
            completed: 9,
            failed: 1,
            last_failure: "w1's checkpoint 4 was not stored (disk full)".into(),
            last_completed: 10,
            last_duration_ms: 12.34,
            last_bytes: 4096,
        };
        let report = Summary { checkpoints: checkpoints.clone(), ..summary() }.ycsb_report();
        for expected in [
            "[CHECKPOINTS], Completed, 9\n",
            "[CHECKPOINTS], Failed, 1\n",
            "[CHECKPOINTS], LastCompleted, 10\n",
            "[CHECKPOINTS], LastDuration(ms), 12.3\n",
            "[CHECKPOINTS], LastBytes, 4096\n",
        ] {
            assert!(report.contains(expected), "{expected} in {report}");
        }
        let json = serde_json::to_value(Summary { checkpoints: checkpoints.clone(), ..summary() }).unwrap();
        assert_eq!(json["checkpoints"]["last_failure"], "w1's checkpoint 4 was not stored (disk full)");
        assert_eq!(serde_json::from_value::<Summary>(json).unwrap().checkpoints, checkpoints);
    }

    #[test]
    fn a_failed_run_says_why_and_what_failed_over() {
        let failed = Summary {
            complete: false,
            failure: Some("worker w1 died; its state could not be restored:\n3 symbols started afresh".into()),
            errors: vec!["stream 0: 120 ticks processed but its injector sent 100".into()],
            replayed_outputs: 7,
            workers: vec![WorkerSummary {
                id: "w1".into(),
                events: 10,
                symbols: None,
                failed: true,
                ticks_with_outputs: 0,
            }],
            failovers: vec![FailoverSummary {
                worker: "w1".into(),
                at_s: 1.5,
                recovered: false,
                checkpoint: 2,
                symbols: 3,
                replayed: 0,
                state_lost: vec!["A".into(), "B".into(), "C".into()],
                reason: "unreachable".into(),
            }],
            ..summary()
        };
        let report = failed.ycsb_report();
        for line in report.lines() {
            assert!(line.starts_with("# ") || line.starts_with("#   ") || line.split(", ").count() == 3, "{line}");
        }
        for expected in [
            "# FAILURE: worker w1 died; its state could not be restored: 3 symbols started afresh\n",
            "# ERROR: stream 0: 120 ticks processed but its injector sent 100\n",
            "[OUTPUTS], Replayed, 7\n",
            "[WORKER w1], Failed, true\n",
            "[FAILOVER w1], Recovered, false\n",
            "[FAILOVER w1], StateLost, 3\n",
        ] {
            assert!(report.contains(expected), "{expected} in {report}");
        }
        let json = serde_json::to_value(&failed).unwrap();
        assert_eq!(serde_json::from_value::<Summary>(json).unwrap(), failed);
        // No failure: `failure` is null, not left out; a summary from before these fields reads.
        let mut json = serde_json::to_value(summary()).unwrap();
        assert!(json["failure"].is_null() && json.get("failure").is_some());
        for field in ["failovers", "checkpoints", "replayed_outputs", "resent_frames", "errors", "failure"] {
            json.as_object_mut().unwrap().remove(field);
        }
        json["workers"][0].as_object_mut().unwrap().remove("failed");
        assert_eq!(serde_json::from_value::<Summary>(json).unwrap(), summary());
    }
}
