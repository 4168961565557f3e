//! The collector's core: a state machine that takes every frame the workers and the router
//! send (outputs, rules announcements, progress, reports, clock offsets), records latency per
//! hop, writes outputs.csv rows to its sink and keeps the accounting. It owns no socket and
//! reads no clock: the driver ([`crate::driver`]) feeds it frames with their arrival time, and
//! unit tests and the in-process harness drive it the same way.
//!
//! Who may send it what is in `senders`; what it does with each output (duplicates, replays,
//! latency, rows) in `outputs`; the state it saves, and resuming from it, in `saving`.

use crate::accounting::{summarize, Observed};
use crate::csv::{CsvMode, OutputsCsv};
use crate::failovers::FailoverWatch;
use crate::intervals::IntervalRecorder;
use crate::latency::HopHistograms;
use crate::progress::{saturating_sum, Figures, Lineup};
use crate::rules::RuleTable;
use cep_core::control::Ready;
use cep_core::delivery::{Arrival, Positions};
use cep_core::failover::{CheckpointMark, OutputsConfirmed, Restored, WorkerFailed};
use cep_core::identity::{Role, Sender, ROUTER_ID};
use cep_core::report::{
    ClockReport, Rejections, RouterProgress, RouterReport, RulesInstalled, WorkerProgress, WorkerReport,
};
use cep_core::rescale::{RescaleStarted, Rescaled, WorkerJoined, MAX_STREAMS};
use cep_core::results::{ClockOffset, Summary};
use cep_core::tick::OutputRecord;
use cep_core::wire::FrameKind;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{self, Write};

mod outputs;
mod saving;
mod senders;

pub use outputs::LastTicks;
pub use saving::{SavedState, SinkFailed, SinkMarks};
use senders::{known_id, names_a_worker, source_may_send, unnamed_worker, Admission, Senders};

/// How often the collector saves its state while frames arrive (ns): its driver and the
/// simulation both keep this cadence; senders hold what it has not saved.
pub const SAVE_EVERY_NS: u64 = 100_000_000;

/// The run as the collector learned it from the router's Ready answer.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunShape {
    /// The run's worker ids, by index.
    pub workers: Vec<String>,
    /// Injector streams in the run.
    pub streams: u32,
    /// When injectors start sending (collector time).
    pub start_ns: u64,
    /// Outputs of ticks intended before `start_ns + warmup_ns` stay out of the latency figures.
    pub warmup_ns: u64,
}

impl RunShape {
    /// The shape of the run `ready` starts.
    pub fn of(ready: &Ready) -> Self {
        RunShape {
            workers: ready.workers.iter().map(|w| w.id.clone()).collect(),
            streams: ready.streams,
            start_ns: ready.start_ns,
            warmup_ns: ready.warmup_ns,
        }
    }
}

/// What the collector writes besides the summary: outputs.csv rows, and the per-second
/// latency intervals (`intervals.csv`, `latency.hlog`).
pub struct Sinks<W: Write> {
    /// outputs.csv.
    pub csv: OutputsCsv<W>,
    /// intervals.csv and latency.hlog.
    pub intervals: IntervalRecorder<W>,
}

/// More workers than any cluster has: a frame naming a higher index is refused, so no
/// sender id read off the wire sizes the collector's tables.
const MAX_WORKERS: usize = 4096;

/// How far ahead of the collector's clock a progress report's instant may be (clock error).
const MAX_AHEAD_NS: u64 = 1_000_000_000;

/// A progress report's instant `at_ns`, received at `now`: one further ahead than clocks can
/// be apart is taken at that bound, so that it cannot hold that node's figures back.
fn reported_at(at_ns: u64, now: u64) -> u64 {
    at_ns.min(now.saturating_add(MAX_AHEAD_NS))
}

/// One run of the collector.
pub struct Collector<W: Write> {
    shape: RunShape,
    csv_mode: CsvMode,
    max_frame_bytes: usize,
    hops: HopHistograms,
    sinks: Sinks<W>,
    decoded: Vec<OutputRecord>,
    /// Per sending worker (by index), per stream: each symbol's last tick whose outputs
    /// arrived ([`LastTicks`]). Memory grows with symbols, never with events.
    last_ticks: Vec<Vec<LastTicks>>,
    rules: RuleTable,
    observed: Observed,
    progress: Vec<WorkerProgress>,
    /// The progress line's counts, every node's at one instant.
    lineup: Lineup,
    reports: BTreeMap<u32, WorkerReport>,
    router: Option<RouterReport>,
    rescales: crate::rescales::RescaleWatch,
    failovers: FailoverWatch,
    /// Why the run ended by a failure ([`Self::fail`]).
    failure: Option<String>,
    last_report_ns: u64,
    last_frame_ns: u64,
    rejections: Rejections,
    /// Checkpoints whose outputs all arrived, for the router (the driver sends them).
    confirmations: Vec<OutputsConfirmed>,
    /// This collector's incarnation (1: the run's first; more: restarted, resumed).
    incarnation: u64,
    /// Per sender, the last frame taken.
    positions: Positions,
    /// Senders as their CURVE keys prove them ([`Self::authenticating`]).
    senders: Senders,
    /// Connections the collector's earlier incarnations refused (a resumed one's context
    /// counts its own from 0).
    earlier_refusals: BTreeMap<String, u64>,
}

impl<W: Write> Collector<W> {
    /// The collector of the run `shape` describes, from `now`, writing to `sinks`.
    pub fn new(shape: RunShape, csv_mode: CsvMode, max_frame_bytes: usize, sinks: Sinks<W>, now: u64) -> Self {
        Collector {
            csv_mode,
            max_frame_bytes,
            hops: HopHistograms::default(),
            sinks,
            decoded: Vec::with_capacity(1024),
            last_ticks: Vec::new(),
            rules: RuleTable::default(),
            observed: Observed::default(),
            progress: vec![WorkerProgress { at_ns: 0, processed: 0, outputs: 0, rejected: 0 }; shape.workers.len()],
            lineup: Lineup::default(),
            reports: BTreeMap::new(),
            router: None,
            rescales: crate::rescales::RescaleWatch::default(),
            failovers: FailoverWatch::default(),
            failure: None,
            last_report_ns: now,
            last_frame_ns: now,
            rejections: Rejections::new("collector"),
            confirmations: Vec::new(),
            incarnation: 1,
            positions: Positions::default(),
            senders: Senders::default(),
            earlier_refusals: BTreeMap::new(),
            shape,
        }
    }

    /// Takes from now on only what its senders may send: every frame but an injector's clock
    /// report in an envelope, and on a secure socket each source's frames only from its key
    /// (the router's from the router, worker `i`'s from the key worker `i` registered with:
    /// `worker_keys`, by index). Others are rejected as `unauthorized_sender` or `unsequenced`.
    pub fn authenticating(mut self, worker_keys: Vec<String>) -> Self {
        self.senders = Senders::authenticating(worker_keys);
        self
    }

    /// Whether every worker and the router have reported: the collector has everything. The
    /// router's report lists every worker of the run, those that joined or left included;
    /// workers that died send no report and are not waited for.
    pub fn has_everything(&self) -> bool {
        self.router.is_some() && self.every_worker_reported()
    }

    /// The checkpoints confirmed since the last call: every output of that worker before its
    /// barrier arrived, so the router may restore it from that checkpoint. A collector that
    /// saves sends them in its saves ([`Self::save`]); this is for one that keeps no state (the
    /// simulation without delivery), which confirms at once.
    pub fn take_confirmations(&mut self) -> Vec<OutputsConfirmed> {
        std::mem::take(&mut self.confirmations)
    }

    /// Whether the router's end-of-run report arrived (the router may go after it).
    pub fn router_reported(&self) -> bool {
        self.router.is_some()
    }

    fn every_worker_reported(&self) -> bool {
        // Once the router has reported, its list of members is the authority (a stray frame
        // naming a higher index does not make the collector wait for it).
        // An empty id there is a worker the router never reached: it never ran, nothing to wait for.
        let awaited = |index: u32| !self.reports.contains_key(&index) && !self.failovers.is_dead(index);
        match &self.router {
            Some(router) => {
                router.workers.iter().enumerate().all(|(index, id)| {
                    id.is_empty() || router.failed.contains(&(index as u32)) || !awaited(index as u32)
                })
            }
            None => (0..self.shape.workers.len() as u32).all(|index| !awaited(index)),
        }
    }

    /// The run ends by a failure (`cause`, e.g. the router lost): the summary says so and is
    /// not complete. The first cause stays.
    pub fn fail(&mut self, cause: String) {
        self.failure.get_or_insert(cause);
    }

    /// Makes room for stream `stream` (an injector may join the running cluster); false, and
    /// counted, for a stream beyond any run's.
    #[inline]
    fn admit_stream(&mut self, stream: u32) -> bool {
        if stream < self.shape.streams {
            return true;
        }
        if stream >= cep_core::rescale::MAX_STREAMS {
            self.rejections.reject("unknown_stream", None, &format_args!("output of stream {stream}"));
            return false;
        }
        self.shape.streams = stream + 1;
        true
    }

    /// Makes room for worker `index` (one that joined the running cluster); false, and
    /// counted, for an index beyond any cluster's size.
    fn admit_worker(&mut self, index: u32) -> bool {
        if index as usize >= MAX_WORKERS {
            let detail = format_args!("worker index {index} (at most {MAX_WORKERS} workers)");
            self.rejections.reject("unknown_worker", Some(index), &detail);
            return false;
        }
        let index = index as usize;
        if index >= self.progress.len() {
            self.progress.resize(index + 1, WorkerProgress { at_ns: 0, processed: 0, outputs: 0, rejected: 0 });
        }
        while self.shape.workers.len() <= index {
            self.shape.workers.push(unnamed_worker(self.shape.workers.len()));
        }
        true
    }

    /// The run's worker ids.
    pub fn workers(&self) -> &[String] {
        &self.shape.workers
    }

    /// The progress line's figures at `now` (reference ns): ticks sent and processed so far,
    /// every node's count at one instant ([`crate::progress`]).
    pub fn progress_figures(&mut self, now: u64) -> Figures {
        self.lineup.figures(now, self.shape.workers.len())
    }

    /// Handles one frame received at `now`; fails only if outputs.csv cannot be written.
    /// Frames of workers and the router come in a Sequenced envelope ([`cep_core::delivery`]):
    /// each is taken once, in its sender's order, across restarts of the collector.
    pub fn handle(&mut self, bytes: &[u8], now: u64) -> io::Result<()> {
        self.handle_from(bytes, None, now)
    }

    /// [`Self::handle`] for a frame from `sender` on a secure socket (`None`: open).
    pub fn handle_from(&mut self, bytes: &[u8], sender: Option<Sender<'_>>, now: u64) -> io::Result<()> {
        self.last_frame_ns = now;
        let Some(frame) = self.rejections.accept(bytes, self.max_frame_bytes) else { return Ok(()) };
        if frame.kind() != FrameKind::Sequenced {
            if self.senders.envelopes_required && frame.kind() != FrameKind::ClockReport {
                let detail =
                    format_args!("a bare {:?} frame (only a clock report comes outside an envelope)", frame.kind());
                self.rejections.reject("unsequenced", Some(frame.sender()), &detail);
                return Ok(());
            }
            if let Some(sender) = sender.filter(|sender| !sender.is(Role::Injector)) {
                let detail = format_args!("a clock report from `{}`, not an injector key", sender.name());
                self.rejections.reject("unauthorized_sender", Some(frame.sender()), &detail);
                return Ok(());
            }
            // A bare clock report is an injector's, about itself: it cannot replace the router's
            // or a worker's offset (those come in their senders' envelopes).
            if self.senders.envelopes_required {
                let named = frame.body::<ClockReport>().ok().map(|report| report.node);
                // (An injector's name is its first stream's: there are at most MAX_STREAMS.)
                let itself =
                    frame.sender() < MAX_STREAMS && named.as_deref() == Some(&format!("injector-{}", frame.sender()));
                if !itself {
                    let detail = format_args!("a bare clock report of {named:?} from sender {}", frame.sender());
                    self.rejections.reject("unsequenced", Some(frame.sender()), &detail);
                    return Ok(());
                }
            }
            return self.handle_frame(frame, now);
        }
        let Some(sequenced) =
            frame.sequenced().map_err(|error| self.rejections.reject(error.cause(), Some(frame.sender()), &error)).ok()
        else {
            return Ok(());
        };
        if let Some(sender) = sender {
            match self.senders.check(sequenced.source, sender) {
                Admission::Take => {}
                Admission::Refuse(reason) => {
                    self.rejections.reject("unauthorized_sender", Some(sequenced.source), &reason);
                    return Ok(());
                }
                Admission::Later => {
                    self.positions.ask_again(sequenced.source);
                    return Ok(());
                }
            }
        }
        if sequenced.source != ROUTER_ID && self.failovers.is_fenced(sequenced.source) {
            // Taken for dead and restored elsewhere: whatever it still sends (sent late, or
            // after it woke from a pause) is the survivors' to produce from the replay.
            let detail = format_args!("a frame of worker {}, which was failed over", sequenced.source);
            self.rejections.reject("fenced", Some(sequenced.source), &detail);
            return Ok(());
        }
        let inner = cep_core::frame::Frame::read(sequenced.frame, self.max_frame_bytes);
        // A worker speaks for itself only (the router's frames carry ROUTER_ID), and each sends
        // only its own kinds: a frame that does not takes no place in the source's stream.
        if let Ok(inner) = &inner {
            if inner.sender() != sequenced.source && sequenced.source != ROUTER_ID {
                let detail = format_args!("a frame of sender {} from source {}", inner.sender(), sequenced.source);
                self.rejections.reject("sender_mismatch", Some(sequenced.source), &detail);
                return Ok(());
            }
            if let Err(reason) = source_may_send(sequenced.source, inner, &self.shape.workers) {
                self.rejections.reject("unauthorized_sender", Some(sequenced.source), &reason);
                return Ok(());
            }
        }
        match self.positions.arrive(&sequenced, self.incarnation, MAX_WORKERS) {
            None => {
                let detail = format_args!("frames of source {} (at most {MAX_WORKERS} workers)", sequenced.source);
                self.rejections.reject("unknown_worker", Some(sequenced.source), &detail);
                Ok(())
            }
            // (Its sender sends it again, in turn, or already did.)
            Some(Arrival::Again | Arrival::Stale | Arrival::OutOfTurn) => {
                self.observed.resent_frames += 1;
                Ok(())
            }
            Some(Arrival::Next) => match inner {
                Ok(inner) if inner.kind() == FrameKind::Sequenced => {
                    self.rejections.unexpected(&inner);
                    Ok(())
                }
                Ok(inner) => self.handle_frame(inner, now),
                Err(error) => {
                    self.rejections.reject(error.cause(), Some(sequenced.source), &error);
                    Ok(())
                }
            },
        }
    }

    fn handle_frame(&mut self, frame: cep_core::frame::Frame<'_>, now: u64) -> io::Result<()> {
        match frame.kind() {
            FrameKind::Outputs | FrameKind::FinalOutputs => {
                let mut decoded = std::mem::take(&mut self.decoded);
                let result = match frame.outputs(&mut decoded) {
                    Ok(batch) if batch.closed_by_end => self.record_final(&batch, now),
                    Ok(batch) => self.record(&batch, now),
                    Err(error) => {
                        self.rejections.reject(error.cause(), Some(frame.sender()), &error);
                        Ok(())
                    }
                };
                self.decoded = decoded;
                result?;
            }
            FrameKind::WorkerProgress => {
                if let Some(progress) = self.rejections.decode::<WorkerProgress>(&frame) {
                    if let Some(slot) = self.progress.get_mut(frame.sender() as usize) {
                        let at = reported_at(progress.at_ns, now);
                        self.lineup.worker(frame.sender() as usize, at, (progress.processed, progress.outputs), false);
                        *slot = progress;
                    }
                }
            }
            FrameKind::RouterProgress => {
                if let Some(progress) = self.rejections.decode::<RouterProgress>(&frame) {
                    self.lineup.router(reported_at(progress.at_ns, now), progress.received, false);
                }
            }
            FrameKind::WorkerReport => {
                let Some(report) = self.rejections.decode::<WorkerReport>(&frame) else { return Ok(()) };
                if report.index != frame.sender() {
                    let detail = format_args!("worker {}'s report sent as worker {}", report.index, frame.sender());
                    self.rejections.reject("sender_mismatch", Some(frame.sender()), &detail);
                    return Ok(());
                }
                if self.admit_worker(report.index) {
                    if let Some(last) = report.streams.iter().map(|s| s.stream).max() {
                        self.admit_stream(last);
                    }
                    self.shape.workers[report.index as usize] = report.id.clone();
                    self.lineup.worker(report.index as usize, now, (report.processed, report.outputs), true);
                    if let Some(slot) = self.progress.get_mut(report.index as usize) {
                        *slot = WorkerProgress {
                            at_ns: now,
                            processed: report.processed,
                            outputs: report.outputs,
                            rejected: report.rejected.values().sum(),
                        };
                    }
                    self.last_report_ns = now;
                    self.reports.insert(report.index, report);
                }
            }
            FrameKind::Rules => {
                if let Some(installed) = self.rejections.decode::<RulesInstalled>(&frame) {
                    if self.admit_worker(frame.sender()) {
                        self.rules.install(frame.sender(), &installed);
                    }
                }
            }
            FrameKind::RouterReport => {
                if let Some(report) = self.rejections.decode::<RouterReport>(&frame) {
                    if let Some(last) = report.received.keys().max() {
                        self.admit_stream(*last);
                    }
                    // An empty id: a worker the router never reached; it is left out of the summary.
                    for (index, id) in report.workers.iter().enumerate() {
                        if self.admit_worker(index as u32) {
                            self.shape.workers[index].clone_from(id);
                        }
                    }
                    self.lineup.router(now, saturating_sum(report.received.values()), true);
                    self.router = Some(report);
                }
            }
            FrameKind::RescaleStarted => {
                if let Some(started) = self.rejections.decode::<RescaleStarted>(&frame) {
                    // Progress lines and rolling summaries name a worker that joins at once.
                    if started.kind == "join" && self.admit_worker(started.index) {
                        self.shape.workers[started.index as usize].clone_from(&started.worker);
                    }
                    self.rescales.started(started, now, self.shape.start_ns);
                }
            }
            FrameKind::WorkerJoined => {
                if let Some(joined) = self.rejections.decode::<WorkerJoined>(&frame) {
                    if self.admit_worker(joined.index) {
                        self.shape.workers[joined.index as usize].clone_from(&joined.id);
                        let (again, forged) = self.senders.bind(joined.index, &joined.key);
                        // Its own held-back frames come again; those of any other key were forged.
                        self.observed.resent_frames += again;
                        let detail =
                            format_args!("frames of worker {} from another key, before it joined", joined.index);
                        self.rejections.reject_many("unauthorized_sender", forged, Some(joined.index), &detail);
                    }
                }
            }
            FrameKind::Rescaled => {
                if let Some(record) = self.rejections.decode::<Rescaled>(&frame) {
                    self.rescales.finished(record, now, self.shape.start_ns);
                }
            }
            FrameKind::CheckpointMark => {
                // Every output of that worker before its checkpoint barrier is here.
                if let Some(mark) = self.rejections.decode::<CheckpointMark>(&frame) {
                    if self.admit_worker(frame.sender()) {
                        self.confirmations.push(OutputsConfirmed { worker: frame.sender(), id: mark.id });
                    }
                }
            }
            FrameKind::Restored => {
                if let Some(mut restored) = self.rejections.decode::<Restored>(&frame) {
                    let owner = frame.sender();
                    // No entry read off the wire sizes a table beyond any run's.
                    restored.symbols.retain(|&(_, stream)| self.admit_stream(stream));
                    if restored.from == owner {
                        let detail = format_args!("worker {owner} names itself as the dead worker it restored");
                        self.rejections.reject("restored_from_itself", Some(owner), &detail);
                    } else if self.admit_worker(owner) && self.admit_worker(restored.from) {
                        self.failovers.restored(owner, &restored, &self.last_ticks);
                    }
                }
            }
            FrameKind::WorkerFailed => {
                if let Some(mut record) =
                    self.rejections.decode::<WorkerFailed>(&frame).filter(|r| self.admit_worker(r.index))
                {
                    // No entry read off the wire sizes a table beyond any run's.
                    record.moved.retain(|&(_, stream, owner)| self.admit_stream(stream) && self.admit_worker(owner));
                    let (index, id) = (record.index, record.worker.clone());
                    if record.recovered {
                        let processed = saturating_sum(record.processed.values());
                        self.lineup.worker_failed(index as usize, now, (processed, record.outputs));
                    }
                    if self.failovers.failed(record, &self.last_ticks) {
                        self.shape.workers[index as usize] = id;
                    } else {
                        let detail = format_args!("a second failover record for worker {index}");
                        self.rejections.reject("repeated_failover", Some(frame.sender()), &detail);
                    }
                }
            }
            FrameKind::ClockReport => {
                if let Some(report) = self.rejections.decode::<ClockReport>(&frame) {
                    // A worker not yet known by its id is by the name it reports (checked by
                    // `source_may_send`), so that it cannot report under a second one.
                    if names_a_worker(&report.node) && self.admit_worker(frame.sender()) {
                        let index = frame.sender() as usize;
                        if known_id(&self.shape.workers, index).is_none() {
                            self.shape.workers[index].clone_from(&report.node);
                        }
                    }
                    let offset = ClockOffset {
                        node: report.node,
                        offset_us: report.estimate.offset_ns as f64 / 1000.0,
                        uncertainty_us: report.estimate.uncertainty_ns as f64 / 1000.0,
                    };
                    // A node that measures again replaces its estimate: one entry per node.
                    let offsets = &mut self.observed.clock_offsets;
                    match offsets.iter_mut().find(|known| known.node == offset.node) {
                        Some(known) => *known = offset,
                        None => offsets.push(offset),
                    }
                }
            }
            _ => self.rejections.unexpected(&frame),
        }
        Ok(())
    }

    /// Copies what the collector knows to the metrics (the driver calls it once a second and
    /// at the end).
    pub fn publish(&self, metrics: &crate::metrics::CollectorMetrics) {
        metrics.observe(crate::metrics::Snapshot {
            outputs: &self.rules,
            output_duplicates: self.observed.output_duplicates,
            warmup_outputs: self.observed.warmup_outputs,
            final_outputs: self.observed.final_outputs,
            hops: &self.hops,
            workers: self.shape.workers.len(),
            workers_reported: self.reports.len(),
            router_reported: self.router.is_some(),
            clock_offsets: &self.observed.clock_offsets,
            rejected: self.rejections.counts(),
        });
    }

    /// The summary of the run so far, at `now`: what [`Self::finish`] would say, marked
    /// `running` and not complete (the driver writes it every `--summary-every`). Costs a pass
    /// over the histograms, nothing per event.
    pub fn snapshot(&mut self, now: u64) -> Summary {
        let mut summary = self.summary_until(now.max(self.last_frame_ns));
        summary.complete = false;
        summary.running = true;
        summary
    }

    /// The summary of what arrived, the run's duration ending at `end_ns`.
    fn summary_until(&mut self, end_ns: u64) -> Summary {
        let observed = Observed {
            outputs: self.rules.counts(),
            output_duplicates: self.observed.output_duplicates,
            warmup_outputs: self.observed.warmup_outputs,
            final_outputs: self.observed.final_outputs,
            rejected: self.rejections.counts().clone(),
            duration_s: end_ns.saturating_sub(self.shape.start_ns) as f64 / 1e9,
            // (Records the pending run of router hops first.)
            latency: self.hops.summary(),
            clock_offsets: self.observed.clock_offsets.clone(),
            rescales: self.rescales.summaries(),
            failovers: self.failovers.summaries(self.shape.start_ns),
            replayed_outputs: self.observed.replayed_outputs,
            resent_frames: self.observed.resent_frames,
            failure: self.failure.clone(),
            ticks_with_outputs: self.observed.ticks_with_outputs.clone(),
        };
        Summary { outputs_not_written: self.sinks.csv.not_written(), ..self.summarize(observed) }
    }

    /// The run's accounts so far (what was sent, processed and lost, by stream, worker and
    /// cause), without the costlier figures (latency, clock offsets, rescales): what a check
    /// of the summary's identities after every step of a simulation needs.
    pub fn accounts(&self) -> Summary {
        let observed = Observed {
            outputs: self.rules.counts(),
            output_duplicates: self.observed.output_duplicates,
            failovers: self.failovers.summaries(self.shape.start_ns),
            failure: self.failure.clone(),
            ticks_with_outputs: self.observed.ticks_with_outputs.clone(),
            ..Observed::default()
        };
        self.summarize(observed)
    }

    /// The summary of the reports, progress and failovers held, with what it `observed`.
    fn summarize(&self, observed: Observed) -> Summary {
        summarize(
            self.shape.streams,
            &self.shape.workers,
            &self.reports,
            &self.progress,
            self.router.as_ref(),
            &self.failovers.records(),
            observed,
        )
    }

    /// Connections the authentication refused so far, by cause
    /// ([`cep_transport::Context::refusals`]): reported with the rejections.
    pub fn refused_connections(&mut self, refusals: &std::collections::BTreeMap<String, u64>) {
        for (cause, count) in refusals {
            let earlier = self.earlier_refusals.get(cause).copied().unwrap_or(0);
            self.rejections.set(cause, earlier + count);
        }
    }

    /// Ends the run: closes the sinks and builds the summary. A complete run ends with its
    /// last report, an interrupted one with its last frame. `last_look` sees the final state
    /// (for a last publication of the metrics).
    pub fn finish(mut self, last_look: impl FnOnce(&Self)) -> io::Result<Finished<W>> {
        // Frames that came out of turn and were never sent again: lost on the way.
        for (source, last) in self.positions.open_gaps() {
            let detail = format_args!("frames after position {last} never came again");
            self.rejections.reject("frames_lost", Some(source), &detail);
        }
        // Frames for an index no worker joined as: a worker key spoke for a worker it is not.
        for (source, frames) in self.senders.never_bound() {
            let detail = format_args!("frames of worker {source} from a worker key, and no worker joined as {source}");
            self.rejections.reject_many("unauthorized_sender", frames, Some(source), &detail);
        }
        let end_ns = if self.every_worker_reported() { self.last_report_ns } else { self.last_frame_ns };
        let summary = self.summary_until(end_ns);
        last_look(&self);
        let (csv, rows) = self.sinks.csv.finish()?;
        let (intervals_csv, latency_log) = self.sinks.intervals.finish(&self.hops.end_to_end)?;
        Ok(Finished { summary, rows, csv, intervals_csv, latency_log, hops: self.hops })
    }
}

/// What a finished collector leaves.
pub struct Finished<W: Write> {
    /// The accounting of the run.
    pub summary: Summary,
    /// Rows written to outputs.csv.
    pub rows: u64,
    /// The outputs.csv sink.
    pub csv: W,
    /// The intervals.csv sink.
    pub intervals_csv: W,
    /// The latency.hlog sink.
    pub latency_log: W,
    /// The latency histograms (the driver writes the end-to-end distribution).
    pub hops: HopHistograms,
}

#[cfg(test)]
mod tests;
