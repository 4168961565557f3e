//! The collector's core: a state machine that takes every frame the workers and the router
//! send (outputs, rules announcements, progress, reports, clock offsets), records latency per
//! hop, writes outputs.csv rows to its sink and keeps the accounting. It owns no socket and
//! reads no clock: the driver ([`crate::driver`]) feeds it frames with their arrival time, and
//! unit tests and the in-process harness drive it the same way.

use crate::accounting::{summarize, Observed};
use crate::csv::{CsvMode, OutputsCsv};
use crate::failovers::{FailoverWatch, Replay};
use crate::intervals::{IntervalRecorder, IntervalState};
use crate::latency::HopHistograms;
use crate::rules::RuleTable;
use cep_core::control::Ready;
use cep_core::delivery::{Arrival, Positions, Saved};
use cep_core::failover::{CheckpointMark, OutputsConfirmed, Restored, WorkerFailed};
use cep_core::frame::OutputBatch;
use cep_core::identity::{Role, Sender, ROUTER_ID};
use cep_core::report::{
    CauseCounts, ClockReport, Rejections, RouterReport, RulesInstalled, WorkerProgress, WorkerReport,
};
use cep_core::rescale::{RescaleStarted, Rescaled, WorkerJoined, MAX_STREAMS};
use cep_core::results::{ClockOffset, Summary};
use cep_core::tick::OutputRecord;
use cep_core::wire::FrameKind;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{self, Write};

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

/// Who may send the collector what, once it runs as a real process ([`Collector::authenticating`]).
#[derive(Debug, Default)]
struct Senders {
    /// Every worker and the router put their frames in envelopes; only an injector's clock
    /// report comes bare. Off for a harness that feeds the core bare frames.
    envelopes_required: bool,
    /// On a secure socket, each worker's key by index: the workers of the start's from
    /// `Ready`, a joined worker's from the router's [`WorkerJoined`] (empty: open, or not
    /// known yet).
    worker_keys: Vec<String>,
    /// Frames held back because no key was known yet for their worker index, by (index, the
    /// sender's key): they come again once asked. Once the index is bound, those of any other
    /// key were spoken by a key that is not that worker's; so are all of an index never bound.
    unbound: BTreeMap<(u32, String), u64>,
}

/// What the collector does with a frame of a source on a secure socket.
#[derive(Debug, PartialEq, Eq)]
enum Admission {
    Take,
    Refuse(String),
    /// Not yet: the source's key is not known (a worker that joined, whose frames came ahead
    /// of the router's word on it). Its sender is asked to send again.
    Later,
}

impl Senders {
    /// Whether `sender` may send source `source`'s frames.
    fn check(&mut self, source: u32, sender: Sender<'_>) -> Admission {
        if source == ROUTER_ID {
            return match sender.is(Role::Router) {
                true => Admission::Take,
                false => Admission::Refuse(format!("the router's frames from `{}`, not a router key", sender.name())),
            };
        }
        if !sender.is(Role::Worker) {
            return Admission::Refuse(format!("worker {source}'s frames from `{}`, not a worker key", sender.name()));
        }
        match self.worker_keys.get(source as usize).map(String::as_str).filter(|key| !key.is_empty()) {
            Some(key) if key == sender.key() => Admission::Take,
            Some(_) => Admission::Refuse(format!(
                "worker {source}'s frames from `{}`, not the key it registered with",
                sender.name()
            )),
            // (A higher index is refused with its frame's position, as for any sender.)
            None if (source as usize) < MAX_WORKERS => {
                *self.unbound.entry((source, sender.key().to_string())).or_insert(0) += 1;
                Admission::Later
            }
            None => Admission::Take,
        }
    }

    /// Worker `index` registered with `key` (empty: the router runs open). Returns the frames
    /// held back for that index: (those of this key, which come again; those of other keys).
    /// A key once bound stays: a worker's index is never given to another.
    fn bind(&mut self, index: u32, key: &str) -> (u64, u64) {
        let at = index as usize;
        if key.is_empty() || at >= MAX_WORKERS {
            return (0, 0);
        }
        if self.worker_keys.len() <= at {
            self.worker_keys.resize(at + 1, String::new());
        }
        if !self.worker_keys[at].is_empty() {
            if self.worker_keys[at] != key {
                tracing::warn!(worker = index, "a second key for worker {index} is ignored: the first stays");
            }
            return (0, 0);
        }
        self.worker_keys[at] = key.to_string();
        let held: Vec<(u32, String)> = self
            .unbound
            .range((index, String::new())..)
            .take_while(|((i, _), _)| *i == index)
            .map(|(k, _)| k.clone())
            .collect();
        let (mut own, mut others) = (0, 0);
        for entry in held {
            let frames = self.unbound.remove(&entry).unwrap_or(0);
            match entry.1 == key {
                true => own += frames,
                false => others += frames,
            }
        }
        (own, others)
    }

    /// Frames held back for indexes no worker joined as, by index: every one spoken by a
    /// worker key for a worker it is not.
    fn never_bound(&mut self) -> BTreeMap<u32, u64> {
        let mut frames = BTreeMap::new();
        for ((index, _), count) in std::mem::take(&mut self.unbound) {
            *frames.entry(index).or_insert(0) += count;
        }
        frames
    }
}

/// The name a worker index has until the worker is known by its id.
fn unnamed_worker(index: usize) -> String {
    format!("worker #{index}")
}

/// The id worker `index` is known by, if it is known yet.
fn known_id(workers: &[String], index: usize) -> Option<&String> {
    workers.get(index).filter(|id| **id != unnamed_worker(index))
}

/// Whether a clock report's node is a worker's (not the router's or an injector's name).
fn names_a_worker(node: &str) -> bool {
    node != "router" && !node.starts_with("injector-")
}

/// Whether the frame `frame`, in an envelope of `source`, is one that source sends: the
/// router's records (reports, rescales, failovers, joins) only from the router, a worker's
/// frames only from a worker, and a clock report only about the process that sends it (a
/// worker's under the id the collector knows for its index, or, before it knows one, under a
/// name no other worker has).
fn source_may_send(source: u32, frame: &cep_core::frame::Frame<'_>, workers: &[String]) -> Result<(), String> {
    let kind = frame.kind();
    let from_router = source == ROUTER_ID;
    let routers = matches!(
        kind,
        FrameKind::RouterReport
            | FrameKind::RescaleStarted
            | FrameKind::Rescaled
            | FrameKind::WorkerFailed
            | FrameKind::WorkerJoined
    );
    if kind == FrameKind::ClockReport {
        let node = frame.body::<ClockReport>().map(|report| report.node).unwrap_or_default();
        let not_that_process = || Err(format!("a clock report of `{node}` from source {source}, not that process"));
        return match (from_router, names_a_worker(&node)) {
            (true, _) if node == "router" => Ok(()),
            (false, true) => match known_id(workers, source as usize) {
                Some(id) if *id != node => not_that_process(),
                None if workers.contains(&node) => not_that_process(),
                _ => Ok(()),
            },
            _ => not_that_process(),
        };
    }
    match (routers, from_router) {
        (true, false) => Err(format!("a {kind:?} frame from worker {source}: only the router sends it")),
        (false, true) => Err(format!("a {kind:?} frame from the router: only workers send it")),
        _ => Ok(()),
    }
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
            progress: vec![WorkerProgress { processed: 0, outputs: 0, rejected: 0 }; shape.workers.len()],
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
        self.senders = Senders { envelopes_required: true, worker_keys, unbound: BTreeMap::new() };
        self
    }

    /// Whether every worker and the router have reported: the collector has everything. The
    /// router's report lists every worker of the run, those that joined or left included;
    /// workers that died send no report and are not waited for.
    pub fn has_everything(&self) -> bool {
        self.router.is_some() && self.every_worker_reported()
    }

    /// The checkpoints confirmed since the last call: every output of that worker before its
    /// barrier arrived, so the router may restore it from that checkpoint.
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
            self.progress.resize(index + 1, WorkerProgress { processed: 0, outputs: 0, rejected: 0 });
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

    /// Ticks processed so far, per worker (from their progress and reports).
    pub fn processed_by_worker(&self) -> Vec<u64> {
        self.progress.iter().map(|p| p.processed).collect()
    }

    /// Outputs received so far, all rules.
    pub fn outputs_total(&self) -> u64 {
        self.rules.total()
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
                        *slot = progress;
                    }
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
                    if let Some(slot) = self.progress.get_mut(report.index as usize) {
                        *slot = WorkerProgress {
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

    /// Outputs of windows the end of input closed: counted and written like any output, but
    /// no tick caused them, so they have no latency and no place in the per-tick duplicate
    /// check.
    fn record_final(&mut self, batch: &OutputBatch<'_>, t_collector: u64) -> io::Result<()> {
        for output in batch.records {
            let Some(slot) = self.rule_slot(batch.sender, output.rule) else { continue };
            self.observed.final_outputs += 1;
            self.keep(slot, output, batch.symbol(output), t_collector)?;
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
    fn keep(&mut self, slot: usize, output: &OutputRecord, symbol: &[u8], t_collector: u64) -> io::Result<()> {
        self.rules.count(slot);
        let writes = match self.csv_mode {
            CsvMode::All => true,
            CsvMode::Alerts => self.rules.is_alert(slot),
            CsvMode::None => false,
        };
        if writes {
            self.sinks.csv.write(self.rules.name(slot), output, symbol, t_collector)?;
        }
        Ok(())
    }

    fn record(&mut self, batch: &OutputBatch<'_>, t_collector: u64) -> io::Result<()> {
        // Every output of a frame arrived at the same instant: close a finished interval first.
        self.sinks.intervals.advance(t_collector, &self.hops.end_to_end)?;
        let warmup_end_ns = self.shape.start_ns + self.shape.warmup_ns;
        let mut measured = 0;
        // The outputs of one tick (same stream and seq, consecutive in a batch) are told
        // apart once: (stream, seq, duplicate, replayed).
        let mut group: Option<(u32, u64, bool, bool)> = None;
        for output in batch.records {
            if !self.admit_stream(output.injector) {
                continue;
            }
            let Some(slot) = self.rule_slot(batch.sender, output.rule) else { continue };
            let (duplicate, replayed) = match group {
                Some((injector, seq, duplicate, replayed)) if (injector, seq) == (output.injector, output.seq) => {
                    (duplicate, replayed)
                }
                _ => {
                    let symbol = batch.symbol(output);
                    // Only a run that had a failover pays for a second look.
                    let replay = if self.failovers.is_empty() {
                        Replay::NotConcerned
                    } else {
                        self.failovers.arrived(batch.sender, output.injector, symbol, output.seq)
                    };
                    let arrived = self.arrived(batch.sender, output.injector, symbol, output.seq);
                    let (duplicate, replayed) = match replay {
                        Replay::NotConcerned => (!arrived, false),
                        Replay::First => (false, false),
                        Replay::Again => (false, true),
                    };
                    group = Some((output.injector, output.seq, duplicate, replayed));
                    if self.rescales.watching() && !replayed {
                        let latency_ns = t_collector.saturating_sub(output.stamps.t_inject);
                        self.rescales.output(batch.sender, symbol, latency_ns, t_collector);
                    }
                    (duplicate, replayed)
                }
            };
            if replayed {
                // Already kept from the dead worker or the survivor's replay: not again.
                self.observed.replayed_outputs += 1;
                continue;
            }
            if duplicate {
                self.observed.output_duplicates += 1;
            }
            if output.stamps.t_inject < warmup_end_ns {
                self.observed.warmup_outputs += 1;
            } else {
                self.hops.record_output(&output.stamps, t_collector);
                measured += 1;
            }
            self.keep(slot, output, batch.symbol(output), t_collector)?;
        }
        // The batch's own hops are the same for every output in it.
        if let Some(first) = batch.records.first() {
            self.hops.record_batch(&first.stamps, t_collector, measured);
        }
        Ok(())
    }

    /// Records that the outputs of tick `seq` of `symbol` on `stream` arrived from `sender`;
    /// false if they (or a later tick's) already had: a duplicate. Call it once `sender` has
    /// announced its rules, so its table grows with the run's workers, not with frames.
    fn arrived(&mut self, sender: u32, stream: u32, symbol: &[u8], seq: u64) -> bool {
        let (sender, stream) = (sender as usize, stream as usize);
        if sender >= self.last_ticks.len() {
            self.last_ticks.resize_with(sender + 1, Vec::new);
        }
        let by_stream = &mut self.last_ticks[sender];
        if by_stream.len() <= stream {
            by_stream.resize_with(self.shape.streams as usize, LastTicks::default);
        }
        by_stream[stream].arrived(symbol, seq)
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
        };
        summarize(
            self.shape.streams,
            &self.shape.workers,
            &self.reports,
            &self.progress,
            self.router.as_ref(),
            self.failovers.records(),
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

/// Where the sinks stood when a state was saved: a resumed collector cuts its files back to
/// these lengths and writes on from there.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SinkMarks {
    /// Rows in outputs.csv.
    pub csv_rows: u64,
    /// Bytes of outputs.csv.
    pub csv_len: u64,
    /// The interval recorder's own state.
    pub intervals: IntervalState,
    /// Bytes of intervals.csv and latency.hlog.
    pub intervals_len: (u64, u64),
}

/// Everything a collector knows, as saved ([`Collector::save`]); the same fields, owned, are
/// read back as a [`SavedState`].
#[derive(Serialize)]
struct SavedRef<'a> {
    shape: &'a RunShape,
    hops: &'a HopHistograms,
    last_ticks: &'a [Vec<LastTicks>],
    rules: &'a RuleTable,
    observed: &'a Observed,
    progress: &'a [WorkerProgress],
    reports: &'a BTreeMap<u32, WorkerReport>,
    router: &'a Option<RouterReport>,
    rescales: &'a crate::rescales::RescaleWatch,
    failovers: &'a FailoverWatch,
    failure: &'a Option<String>,
    last_report_ns: u64,
    last_frame_ns: u64,
    rejected: &'a CauseCounts,
    confirmations: &'a [OutputsConfirmed],
    positions: &'a Positions,
    sinks: SinkMarks,
}

/// A collector's saved state, read back.
#[derive(Deserialize)]
pub struct SavedState {
    shape: RunShape,
    hops: HopHistograms,
    last_ticks: Vec<Vec<LastTicks>>,
    rules: RuleTable,
    observed: Observed,
    progress: Vec<WorkerProgress>,
    reports: BTreeMap<u32, WorkerReport>,
    router: Option<RouterReport>,
    rescales: crate::rescales::RescaleWatch,
    failovers: FailoverWatch,
    failure: Option<String>,
    last_report_ns: u64,
    last_frame_ns: u64,
    rejected: CauseCounts,
    confirmations: Vec<OutputsConfirmed>,
    positions: Positions,
    /// Where the files stood.
    pub sinks: SinkMarks,
}

impl SavedState {
    /// Reads a saved state.
    pub fn read(bytes: &[u8]) -> Result<SavedState, String> {
        rmp_serde::from_slice(bytes).map_err(|error| format!("not a saved collector state of this version: {error}"))
    }

    /// The start of the run it belongs to (`Ready::start_ns`).
    pub fn run_start_ns(&self) -> u64 {
        self.shape.start_ns
    }
}

impl<W: Write> Collector<W> {
    /// Flushes the sinks and returns the whole state, with what it has taken of each sender
    /// ([`Saved`], for the router once the bytes are stored) and the checkpoints confirmed
    /// by it. The driver stores the bytes, then tells the router: so every frame the senders
    /// drop is in a stored state.
    pub fn save(&mut self) -> io::Result<(Vec<u8>, Saved, Vec<OutputsConfirmed>)> {
        self.sinks.csv.flush()?;
        self.sinks.intervals.flush()?;
        let sinks = SinkMarks {
            csv_rows: self.sinks.csv.rows(),
            csv_len: self.sinks.csv.bytes_written(),
            intervals: self.sinks.intervals.state(),
            intervals_len: self.sinks.intervals.bytes_written(),
        };
        let saved = SavedRef {
            shape: &self.shape,
            hops: &self.hops,
            last_ticks: &self.last_ticks,
            rules: &self.rules,
            observed: &self.observed,
            progress: &self.progress,
            reports: &self.reports,
            router: &self.router,
            rescales: &self.rescales,
            failovers: &self.failovers,
            failure: &self.failure,
            last_report_ns: self.last_report_ns,
            last_frame_ns: self.last_frame_ns,
            rejected: self.rejections.counts(),
            confirmations: &self.confirmations,
            positions: &self.positions,
            sinks,
        };
        let bytes = rmp_serde::to_vec(&saved).map_err(io::Error::other)?;
        Ok((bytes, self.positions.saved(), std::mem::take(&mut self.confirmations)))
    }

    /// A restarted collector, incarnation `incarnation`, going on from `state` with `sinks`
    /// reopened where the state left them. Checkpoint confirmations the dead one had not sent
    /// go with the first save.
    pub fn resume(
        state: SavedState,
        incarnation: u64,
        csv_mode: CsvMode,
        max_frame_bytes: usize,
        sinks: Sinks<W>,
    ) -> Self {
        Collector {
            shape: state.shape,
            csv_mode,
            max_frame_bytes,
            hops: state.hops,
            sinks,
            decoded: Vec::with_capacity(1024),
            last_ticks: state.last_ticks,
            rules: state.rules,
            observed: state.observed,
            progress: state.progress,
            reports: state.reports,
            router: state.router,
            rescales: state.rescales,
            failovers: state.failovers,
            failure: state.failure,
            last_report_ns: state.last_report_ns,
            last_frame_ns: state.last_frame_ns,
            earlier_refusals: state
                .rejected
                .iter()
                .filter(|(cause, _)| cep_core::identity::is_refusal(cause))
                .map(|(cause, count)| (cause.clone(), *count))
                .collect(),
            rejections: Rejections::restore("collector", state.rejected),
            confirmations: state.confirmations,
            incarnation,
            positions: state.positions,
            senders: Senders::default(),
        }
    }
}

/// The last tick of each symbol whose outputs arrived from one worker on one stream. Outputs
/// of a symbol from one worker arrive in tick order (one FIFO connection, and a worker
/// processes a symbol's ticks in order), so a tick at or below its symbol's last is a
/// duplicate; outputs of one symbol from two workers (a symbol moving during a rescale) may
/// interleave, so each worker has its own table. One entry, allocated once, per symbol.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct LastTicks {
    #[serde(with = "crate::histogram_serde::byte_keys")]
    last: FxHashMap<Box<[u8]>, u64>,
}

impl LastTicks {
    /// Records that the outputs of tick `seq` of `symbol` arrived; false if that tick's (or a
    /// later tick's) outputs already had: a duplicate.
    #[inline]
    pub fn arrived(&mut self, symbol: &[u8], seq: u64) -> bool {
        match self.last.get_mut(symbol) {
            Some(last) if seq <= *last => false,
            Some(last) => {
                *last = seq;
                true
            }
            None => {
                self.last.insert(symbol.into(), seq);
                true
            }
        }
    }

    /// The last tick of `symbol` whose outputs arrived; `None` if none did.
    pub fn last(&self, symbol: &[u8]) -> Option<u64> {
        self.last.get(symbol).copied()
    }

    /// Symbols with an entry.
    pub fn len(&self) -> usize {
        self.last.len()
    }

    /// Whether no output arrived yet.
    pub fn is_empty(&self) -> bool {
        self.last.is_empty()
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
mod tests {
    use super::*;
    use cep_core::frame::Body;
    use cep_core::report::{RuleInfo, StreamAtWorker};
    use cep_core::wire::OutputBatchWriter;
    use std::time::Duration;

    fn collector(csv_mode: CsvMode) -> Collector<Vec<u8>> {
        let shape = RunShape { workers: vec!["w0".into()], streams: 1, start_ns: 1_000, warmup_ns: 0 };
        let sinks = Sinks {
            csv: OutputsCsv::new(Vec::new()).unwrap(),
            intervals: IntervalRecorder::new(Vec::new(), Vec::new(), 1_000, Duration::from_secs(1)).unwrap(),
        };
        Collector::new(shape, csv_mode, 1 << 20, sinks, 1_000)
    }

    fn rules() -> Vec<u8> {
        rules_of(0)
    }

    fn rules_of(worker: u32) -> Vec<u8> {
        let queries =
            vec![RuleInfo { name: "perc".into(), alert: true }, RuleInfo { name: "volatility".into(), alert: false }];
        RulesInstalled { epoch: 0, queries }.encode(worker)
    }

    /// Outputs of worker 0 for tick `seq` of stream 0: one per rule index given.
    fn outputs(seq: u64, rules: &[u32]) -> Vec<u8> {
        let mut writer = OutputBatchWriter::new(0);
        for &rule in rules {
            writer.push(rule, b"S1", 10.0, 2.5, 0, seq, 2_000, 2_100);
        }
        writer.seal(2_200, 2_300, 2_400).to_vec()
    }

    fn report(processed: u64, outputs: u64) -> Vec<u8> {
        WorkerReport {
            id: "w0".into(),
            index: 0,
            processed,
            symbols: 1,
            outputs,
            streams: vec![StreamAtWorker { stream: 0, sent: Some(processed), routed: Some(processed), processed }],
            duplicates: 0,
            out_of_order: 0,
            late: 0,
            late_dropped: 0,
            rejected: Default::default(),
        }
        .encode(0)
    }

    fn router_report(received: u64) -> Vec<u8> {
        RouterReport {
            received: BTreeMap::from([(0, received)]),
            rules: vec![],
            routed: received,
            rejected: Default::default(),
            workers: vec!["w0".into()],
            failed: vec![],
        }
        .encode(0)
    }

    #[test]
    fn rows_latency_and_accounting_from_frames() {
        let mut collector = collector(CsvMode::Alerts);
        collector.handle(&rules(), 1_500).unwrap();
        collector.handle(&outputs(0, &[0, 1]), 3_000).unwrap();
        collector.handle(&outputs(1, &[1]), 3_100).unwrap();
        assert!(!collector.has_everything());
        collector.handle(&report(2, 3), 3_200).unwrap();
        collector.handle(&router_report(2), 3_300).unwrap();
        assert!(collector.has_everything());
        let finished = collector.finish(|_| {}).unwrap();
        let csv = String::from_utf8(finished.csv).unwrap();
        assert_eq!(
            csv.lines().collect::<Vec<_>>(),
            [crate::csv::OUTPUTS_HEADER, "perc,S1,10.0,2.5,0,0,2000,2100,2200,2300,2400,3000"],
            "alerts only"
        );
        let summary = finished.summary;
        assert!(summary.complete, "{summary:?}");
        assert_eq!((summary.events_sent, summary.events_processed, summary.events_lost), (Some(2), 2, Some(0)));
        assert_eq!(summary.outputs.get("perc"), Some(&1));
        assert_eq!(summary.outputs.get("volatility"), Some(&2));
        // End to end: 3,000 - 2,000 ns for the first two outputs, 1,100 ns for the third.
        assert_eq!(summary.latency_us.end_to_end.count, 3);
        assert_eq!(summary.latency_us.end_to_end.max, 1.1);
        assert_eq!(summary.duration_s, (3_200 - 1_000) as f64 / 1e9);
    }

    #[test]
    fn duplicates_unknown_rules_and_lost_outputs_are_counted() {
        let mut collector = collector(CsvMode::All);
        collector.handle(&outputs(0, &[0]), 2_500).unwrap();
        collector.handle(&rules(), 2_600).unwrap();
        collector.handle(&outputs(1, &[0, 1]), 3_000).unwrap();
        collector.handle(&outputs(1, &[0, 1]), 3_001).unwrap();
        collector.handle(b"junk", 3_002).unwrap();
        // The worker says it sent 5 outputs: 1 never announced, 4 received (2 duplicates).
        collector.handle(&report(2, 5), 3_100).unwrap();
        collector.handle(&router_report(2), 3_200).unwrap();
        let finished = collector.finish(|_| {}).unwrap();
        assert_eq!(finished.rows, 4);
        let summary = finished.summary;
        assert_eq!(summary.duplicates, 2);
        assert_eq!(summary.rejected["collector"]["unknown_rule"], 1);
        assert_eq!(summary.rejected["collector"]["malformed"], 1);
        // 5 reported, 2 distinct received.
        assert_eq!(summary.outputs_lost, 3);
    }

    /// Outputs of worker `worker` for tick `seq` of stream 0, symbol `symbol`, one per rule.
    fn outputs_of(worker: u32, symbol: &[u8], seq: u64, rules: &[u32]) -> Vec<u8> {
        let mut writer = OutputBatchWriter::new(worker);
        for &rule in rules {
            writer.push(rule, symbol, 10.0, 2.5, 0, seq, 2_000, 2_100);
        }
        writer.seal(2_200, 2_300, 2_400).to_vec()
    }

    #[test]
    fn duplicates_are_told_per_worker_and_symbol() {
        let shape = RunShape { workers: vec!["w0".into(), "w1".into()], streams: 1, start_ns: 1_000, warmup_ns: 0 };
        let sinks = Sinks {
            csv: OutputsCsv::new(Vec::new()).unwrap(),
            intervals: IntervalRecorder::new(Vec::new(), Vec::new(), 1_000, Duration::from_secs(1)).unwrap(),
        };
        let mut collector = Collector::new(shape, CsvMode::None, 1 << 20, sinks, 1_000);
        let queries = vec![RuleInfo { name: "perc".into(), alert: true }];
        for worker in [0, 1] {
            collector.handle(&RulesInstalled { epoch: 0, queries: queries.clone() }.encode(worker), 1_100).unwrap();
        }
        let duplicates = |collector: &Collector<Vec<u8>>| collector.observed.output_duplicates;
        // One worker, two symbols of one stream: each symbol's ticks in order, the symbols
        // interleaved in any order (A's tick 5 before B's tick 3).
        for (symbol, seq) in [(b"A", 1), (b"A", 5), (b"B", 3), (b"B", 4), (b"A", 6)] {
            collector.handle(&outputs_of(0, symbol, seq, &[0]), 2_500).unwrap();
        }
        assert_eq!(duplicates(&collector), 0);
        // Again, or an earlier tick of the symbol, from the same worker: duplicates, each
        // output of the group counted.
        collector.handle(&outputs_of(0, b"A", 6, &[0, 0]), 2_600).unwrap();
        collector.handle(&outputs_of(0, b"B", 2, &[0]), 2_600).unwrap();
        assert_eq!(duplicates(&collector), 3);
        // The same symbol from another worker (it moved during a rescale): that worker's
        // ticks interleave with the first one's, and are not duplicates.
        collector.handle(&outputs_of(1, b"A", 2, &[0]), 2_700).unwrap();
        collector.handle(&outputs_of(1, b"A", 7, &[0]), 2_700).unwrap();
        collector.handle(&outputs_of(0, b"A", 8, &[0]), 2_700).unwrap();
        assert_eq!(duplicates(&collector), 3);
        collector.handle(&outputs_of(1, b"A", 7, &[0]), 2_800).unwrap();
        assert_eq!(duplicates(&collector), 4);
        // One entry per (worker, stream, symbol), whatever the number of ticks.
        let entries: Vec<usize> = collector.last_ticks.iter().map(|streams| streams[0].len()).collect();
        assert_eq!(entries, [2, 1]);
        for seq in 100..10_000 {
            collector.handle(&outputs_of(0, b"A", seq, &[0]), 3_000).unwrap();
        }
        assert_eq!(collector.last_ticks[0][0].len(), 2);
        assert_eq!(duplicates(&collector), 4);
    }

    #[test]
    fn final_outputs_are_not_taken_for_duplicates() {
        let mut collector = collector(CsvMode::None);
        collector.handle(&rules(), 1_500).unwrap();
        collector.handle(&outputs(1, &[0]), 2_500).unwrap();
        // Windows the end of input closed carry the stream's count as seq; more of them than
        // one frame holds go out in further frames, with the same symbol and seq.
        for rule in [0, 1] {
            let mut writer = OutputBatchWriter::final_outputs(0);
            writer.push(rule, b"S1", 10.0, 2.5, 0, 2, 0, 0);
            collector.handle(writer.seal(0, 0, 2_600), 2_700).unwrap();
        }
        collector.handle(&report(2, 3), 2_800).unwrap();
        collector.handle(&router_report(2), 2_900).unwrap();
        let summary = collector.finish(|_| {}).unwrap().summary;
        assert_eq!((summary.final_outputs, summary.duplicates, summary.outputs_lost), (2, 0, 0));
    }

    #[test]
    fn a_snapshot_is_the_running_summary_and_changes_nothing() {
        let mut collector = collector(CsvMode::None);
        collector.handle(&rules(), 1_500).unwrap();
        collector.handle(&outputs(0, &[0, 1]), 3_000).unwrap();
        let snapshot = collector.snapshot(5_000);
        assert!(snapshot.running && !snapshot.complete, "{snapshot:?}");
        assert_eq!(snapshot.outputs.get("perc"), Some(&1));
        assert_eq!(snapshot.latency_us.end_to_end.count, 2);
        assert_eq!(snapshot.duration_s, (5_000 - 1_000) as f64 / 1e9);
        assert_eq!(snapshot.events_sent, None, "no stream has ended: sent is unknown");
        // The run goes on and completes: the final summary is not a snapshot.
        collector.handle(&outputs(1, &[1]), 3_100).unwrap();
        collector.handle(&report(2, 3), 3_200).unwrap();
        collector.handle(&router_report(2), 3_300).unwrap();
        let summary = collector.finish(|_| {}).unwrap().summary;
        assert!(summary.complete && !summary.running, "{summary:?}");
        assert_eq!(summary.latency_us.end_to_end.count, 3);
        assert_eq!(summary.outputs.get("volatility"), Some(&2));
    }

    /// Two workers (w0 dies, w1 takes its symbol A over), one stream, one rule (perc).
    fn two_workers(csv_mode: CsvMode) -> Collector<Vec<u8>> {
        let shape = RunShape { workers: vec!["w0".into(), "w1".into()], streams: 1, start_ns: 1_000, warmup_ns: 0 };
        let sinks = Sinks {
            csv: OutputsCsv::new(Vec::new()).unwrap(),
            intervals: IntervalRecorder::new(Vec::new(), Vec::new(), 1_000, Duration::from_secs(1)).unwrap(),
        };
        let mut collector = Collector::new(shape, csv_mode, 1 << 20, sinks, 1_000);
        let queries = vec![RuleInfo { name: "perc".into(), alert: true }];
        for worker in [0, 1] {
            collector.handle(&RulesInstalled { epoch: 0, queries: queries.clone() }.encode(worker), 1_100).unwrap();
        }
        collector
    }

    /// The router's record that w0 died: A moved to w1, restored from checkpoint 1 (4 ticks
    /// processed and 4 outputs sent by then), or (`recovered` false) started afresh there.
    fn w0_failed(recovered: bool) -> Vec<u8> {
        WorkerFailed {
            worker: "w0".into(),
            index: 0,
            reason: "tcp://127.0.0.1:6000 has been unreachable for 1.0s: it is taken for dead".into(),
            detected_ns: 2_001_000,
            recovered,
            checkpoint: 1,
            processed: [(0, 4)].into(),
            outputs: 4,
            replayed: if recovered { 2 } else { 0 },
            moved: vec![("A".into(), 0, 1)],
            state_lost: if recovered { vec![] } else { vec!["A".into()] },
        }
        .encode(0)
    }

    fn report_of(index: u32, processed: u64, outputs: u64, sent: u64) -> Vec<u8> {
        WorkerReport {
            id: format!("w{index}"),
            index,
            processed,
            symbols: 1,
            outputs,
            streams: vec![StreamAtWorker { stream: 0, sent: Some(sent), routed: Some(processed), processed }],
            duplicates: 0,
            out_of_order: 0,
            late: 0,
            late_dropped: 0,
            rejected: Default::default(),
        }
        .encode(index)
    }

    fn router_report_failed(received: u64, failed: Vec<u32>) -> Vec<u8> {
        RouterReport {
            received: BTreeMap::from([(0, received)]),
            rules: vec![],
            routed: received,
            rejected: Default::default(),
            workers: vec!["w0".into(), "w1".into()],
            failed,
        }
        .encode(0)
    }

    /// Feeds `frames` (worker, seq) of symbol A, or the failover record (`None`), all at the
    /// same instant, and returns what the collector kept.
    fn feed(frames: &[Option<(u32, u64)>]) -> Finished<Vec<u8>> {
        let mut collector = two_workers(CsvMode::All);
        for frame in frames {
            let bytes = match frame {
                Some((worker, seq)) => outputs_of(*worker, b"A", *seq, &[0]),
                None => w0_failed(true),
            };
            collector.handle(&bytes, 3_000).unwrap();
        }
        collector.finish(|_| {}).unwrap()
    }

    #[test]
    fn a_survivors_restore_mark_tells_replays_apart_before_the_routers_record() {
        // A restarted collector may get w1's frames (its mark, then its replay) before the
        // router's record: the replayed outputs are dropped all the same.
        let mut collector = two_workers(CsvMode::All);
        for seq in 1..=5 {
            collector.handle(&outputs_of(0, b"A", seq, &[0]), 3_000).unwrap();
        }
        collector.handle(&Restored { from: 0, symbols: vec![("A".into(), 0)] }.encode(1), 3_000).unwrap();
        for seq in 3..=8 {
            collector.handle(&outputs_of(1, b"A", seq, &[0]), 3_000).unwrap();
        }
        collector.handle(&w0_failed(true), 3_000).unwrap();
        let finished = collector.finish(|_| {}).unwrap();
        let summary = &finished.summary;
        assert_eq!((finished.rows, summary.replayed_outputs, summary.duplicates), (8, 3, 0), "ticks 3, 4 and 5 again");
        assert_eq!(summary.failovers.len(), 1);
    }

    #[test]
    fn a_forged_restore_mark_naming_its_own_sender_is_refused_and_drops_nothing() {
        let mut collector = two_workers(CsvMode::All);
        for seq in 1..=3 {
            collector.handle(&outputs_of(1, b"A", seq, &[0]), 3_000).unwrap();
        }
        // w1 claims to have taken A over from itself: its next outputs would look like replays.
        collector.handle(&Restored { from: 1, symbols: vec![("A".into(), 0)] }.encode(1), 3_000).unwrap();
        for seq in 2..=5 {
            collector.handle(&outputs_of(1, b"A", seq, &[0]), 3_000).unwrap();
        }
        let finished = collector.finish(|_| {}).unwrap();
        let summary = &finished.summary;
        assert_eq!(summary.rejected["collector"]["restored_from_itself"], 1);
        // 2 and 3 again are duplicates, as without the mark (their rows written, counted): none a replay.
        assert_eq!((finished.rows, summary.replayed_outputs, summary.duplicates), (7, 0, 2));
    }

    #[test]
    fn outputs_replayed_after_a_failover_are_kept_once() {
        let undisturbed = feed(&(1..=8).map(|seq| Some((0, seq))).collect::<Vec<_>>());
        assert_eq!((undisturbed.rows, undisturbed.summary.replayed_outputs), (8, 0));
        let rows = |finished: &Finished<Vec<u8>>| String::from_utf8(finished.csv.clone()).unwrap();

        // w0's outputs of ticks 1..5 arrived, then it died; w1 replays from tick 3 on.
        let mut frames: Vec<Option<(u32, u64)>> = (1..=5).map(|seq| Some((0, seq))).collect();
        frames.push(None);
        frames.extend((3..=8).map(|seq| Some((1, seq))));
        let replayed = feed(&frames);
        assert_eq!(rows(&replayed), rows(&undisturbed));
        let summary = &replayed.summary;
        assert_eq!((summary.replayed_outputs, summary.duplicates), (3, 0), "ticks 3, 4 and 5 again");
        assert_eq!(summary.outputs.get("perc"), Some(&8));
        assert_eq!(summary.latency_us.end_to_end.count, 8, "replayed outputs are not measured");
        assert_eq!(summary.latency_us.worker_to_collector.count, 8);
        assert_eq!(summary.failovers.len(), 1);
        let failover = &summary.failovers[0];
        assert_eq!((failover.worker.as_str(), failover.symbols, failover.replayed), ("w0", 1, 2));
        assert_eq!(failover.at_s, 0.002);

        // w0's outputs of ticks 4 and 5 arrive late, after w1's replay of them.
        let mut frames: Vec<Option<(u32, u64)>> = (1..=3).map(|seq| Some((0, seq))).collect();
        frames.push(None);
        frames.extend((3..=8).map(|seq| Some((1, seq))));
        frames.extend([Some((0, 4)), Some((0, 5))]);
        let late = feed(&frames);
        assert_eq!(rows(&late), rows(&undisturbed));
        assert_eq!((late.summary.replayed_outputs, late.summary.duplicates), (3, 0), "3 from w1, 4 and 5 from w0");
        assert_eq!(late.summary.outputs.get("perc"), Some(&8));
    }

    #[test]
    fn a_recovered_failover_balances_without_the_dead_workers_report() {
        let mut collector = two_workers(CsvMode::None);
        // w0: checkpoint after tick 4, then ticks 5 and 6 processed and their outputs sent.
        collector.handle(&WorkerProgress { processed: 6, outputs: 6, rejected: 0 }.encode(0), 2_000).unwrap();
        for seq in 1..=6 {
            collector.handle(&outputs_of(0, b"A", seq, &[0]), 2_500).unwrap();
        }
        collector.handle(&w0_failed(true), 2_600).unwrap();
        // w1 replays ticks 5 and 6, then takes 7..10: 6 ticks, 6 outputs.
        for seq in 5..=10 {
            collector.handle(&outputs_of(1, b"A", seq, &[0]), 2_700).unwrap();
        }
        collector.handle(&report_of(1, 6, 6, 10), 2_800).unwrap();
        assert!(!collector.has_everything());
        collector.handle(&router_report_failed(10, vec![0]), 2_900).unwrap();
        assert!(collector.has_everything(), "the dead worker's report is not awaited");
        let summary = collector.finish(|_| {}).unwrap().summary;
        assert!(summary.complete, "{summary:?}");
        assert_eq!((summary.events_sent, summary.events_processed, summary.events_lost), (Some(10), 10, Some(0)));
        assert!(summary.lost_by_cause.is_empty() && summary.errors.is_empty() && summary.failure.is_none());
        assert_eq!((summary.replayed_outputs, summary.outputs_lost, summary.outputs["perc"]), (2, 0, 10));
        let workers: Vec<(&str, u64, bool)> =
            summary.workers.iter().map(|w| (w.id.as_str(), w.events, w.failed)).collect();
        assert_eq!(workers, [("w0", 4, true), ("w1", 6, false)]);
        assert_eq!(summary.duration_s, (2_800 - 1_000) as f64 / 1e9, "ends with the last report");
    }

    #[test]
    fn an_unrecovered_failover_is_a_failure() {
        let mut collector = two_workers(CsvMode::None);
        collector.handle(&WorkerProgress { processed: 6, outputs: 6, rejected: 0 }.encode(0), 2_000).unwrap();
        collector.handle(&w0_failed(false), 2_600).unwrap();
        collector.handle(&report_of(1, 4, 4, 10), 2_800).unwrap();
        collector.handle(&router_report_failed(10, vec![0]), 2_900).unwrap();
        assert!(collector.has_everything());
        let summary = collector.finish(|_| {}).unwrap().summary;
        assert!(!summary.complete, "{summary:?}");
        assert_eq!(
            summary.failure.as_deref(),
            Some("worker w0 died; its state could not be restored: 1 symbols started afresh")
        );
        // Its last progress counts for what it processed: 6 + 4 of 10.
        assert_eq!((summary.events_sent, summary.events_processed, summary.events_lost), (Some(10), 10, Some(0)));
        assert_eq!(summary.events_lost, Some(summary.lost_by_cause.values().sum()));
        assert_eq!((summary.workers[0].events, summary.workers[0].failed), (6, true));
        assert!(!summary.failovers[0].recovered && summary.failovers[0].state_lost == ["A"]);
    }

    #[test]
    fn a_failure_makes_the_summary_incomplete_and_says_why() {
        let mut collector = collector(CsvMode::None);
        collector.handle(&rules(), 1_500).unwrap();
        collector.handle(&outputs(1, &[0]), 2_500).unwrap();
        collector.handle(&report(2, 1), 2_800).unwrap();
        let cause = "tcp://127.0.0.1:5556 has been unreachable for 1.0s: it is taken for dead";
        collector.fail(cause.to_string());
        collector.fail("a later cause".to_string());
        assert_eq!(collector.snapshot(3_000).failure.as_deref(), Some(cause));
        let summary = collector.finish(|_| {}).unwrap().summary;
        assert!(!summary.complete && !summary.running);
        assert_eq!(summary.failure.as_deref(), Some(cause));
        let json = serde_json::to_value(&summary).unwrap();
        assert_eq!(json["failure"], cause);
    }

    #[test]
    fn a_collector_without_reports_says_the_run_is_incomplete() {
        let mut collector = collector(CsvMode::None);
        collector.handle(&rules(), 5_000).unwrap();
        let summary = collector.finish(|_| {}).unwrap().summary;
        assert!(!summary.complete);
        assert_eq!(summary.events_sent, None, "no report: what was sent is unknown");
    }

    #[test]
    fn a_joined_workers_frames_are_taken_from_its_own_key_only_even_when_they_come_first() {
        use cep_core::delivery::DeliveryLog;
        use cep_core::identity::ROUTER_ID;
        let key = |digit: char| digit.to_string().repeat(40);
        let (w0, w1, forger) = (key('0'), key('1'), key('9'));
        let id = |name: &str, key: &str| format!("worker {name} {key}");
        let (w0_id, w1_id, forger_id, router_id) =
            (id("w0", &w0), id("w1", &w1), id("w9", &forger), format!("router router {}", key('r')));
        let mut collector = collector(CsvMode::All).authenticating(vec![w0.clone()]);
        let mut router = DeliveryLog::new(ROUTER_ID, 1, 1 << 20);
        let mut joiner = DeliveryLog::new(1, 1, 1 << 20);
        let from = |id| Some(Sender::new(id));
        // Worker 1's first frames arrive before the router's word on it: held back, asked again.
        let early = [joiner.push(&rules_of(1)).to_vec(), joiner.push(&outputs_of(1, b"S7", 0, &[0])).to_vec()];
        for frame in &early {
            collector.handle_from(frame, from(&w1_id), 2_000).unwrap();
        }
        // Another worker key speaking for index 1 before it joined, and for index 2, which no
        // worker joins as; worker 0 naming its own key for index 1 (only the router says who
        // joined) and filing a report as worker 1.
        let mut early_forger = DeliveryLog::new(1, 1, 1 << 20);
        collector.handle_from(early_forger.push(&rules_of(1)), from(&forger_id), 2_010).unwrap();
        let mut stray = DeliveryLog::new(2, 1, 1 << 20);
        collector.handle_from(stray.push(&outputs_of(2, b"S8", 0, &[0])), from(&forger_id), 2_050).unwrap();
        // (A frame refused before its position is read takes no place in its source's stream.)
        let rebind = WorkerJoined { index: 1, id: "w1".into(), key: w0.clone() }.encode(0);
        collector.handle_from(DeliveryLog::new(0, 1, 1 << 20).push(&rebind), from(&w0_id), 2_060).unwrap();
        let mut start = DeliveryLog::new(0, 1, 1 << 20);
        let mut as_other = report_of(1, 0, 0, 0);
        as_other[3] = 0; // sent as worker 0 (the header's sender), reporting for worker 1
        collector.handle_from(start.push(&as_other), from(&w0_id), 2_070).unwrap();
        let (_, saved, _) = collector.save().unwrap();
        assert_eq!(saved.resend, [1, 2], "both asked to send again");
        assert!(
            saved.positions.iter().all(|&(source, position)| position == 0 || source == 0),
            "nothing of 1 or 2 was taken"
        );
        let joined = WorkerJoined { index: 1, id: "w1".into(), key: w1.clone() }.encode(0);
        collector.handle_from(router.push(&joined), from(&router_id), 2_100).unwrap();
        // Now the forger is refused for index 1, and the real worker's resend is taken.
        let mut forged = DeliveryLog::new(1, 1, 1 << 20);
        collector.handle_from(forged.push(&rules_of(1)), from(&forger_id), 2_150).unwrap();
        for frame in &early {
            collector.handle_from(frame, from(&w1_id), 2_200).unwrap();
        }
        collector.handle_from(start.push(&rules()), from(&w0_id), 2_250).unwrap();
        collector.handle_from(start.push(&outputs(0, &[0])), from(&w1_id), 2_300).unwrap();
        assert_eq!(collector.workers()[1], "w1");
        let summary = collector.finish(|_| {}).unwrap().summary;
        assert_eq!(summary.outputs.get("perc"), Some(&1), "worker 1's one output, once");
        assert_eq!(summary.resent_frames, 2, "worker 1's own two frames came again");
        // The forger for index 1 (before and after the join), worker 0's WorkerJoined, worker
        // 1's key for worker 0, and the frame for index 2; worker 0's report as worker 1.
        let expected = [("sender_mismatch".to_string(), 1), ("unauthorized_sender".to_string(), 5)];
        assert_eq!(summary.rejected["collector"], BTreeMap::from(expected));
    }

    #[test]
    fn a_resumed_collector_adds_its_refusals_to_its_earlier_incarnations() {
        let cause = "unauthenticated_router_worker_injector";
        let mut first = collector(CsvMode::All);
        first.refused_connections(&BTreeMap::from([(cause.to_string(), 3)]));
        let (bytes, _, _) = first.save().unwrap();
        let sinks = Sinks {
            csv: OutputsCsv::new(Vec::new()).unwrap(),
            intervals: IntervalRecorder::new(Vec::new(), Vec::new(), 1_000, Duration::from_secs(1)).unwrap(),
        };
        let mut second = Collector::resume(SavedState::read(&bytes).unwrap(), 2, CsvMode::All, 1 << 20, sinks);
        // Its own context counts from 0.
        second.refused_connections(&BTreeMap::from([(cause.to_string(), 2)]));
        second.refused_connections(&BTreeMap::from([(cause.to_string(), 2)]));
        let summary = second.finish(|_| {}).unwrap().summary;
        assert_eq!(summary.rejected["collector"].get(cause), Some(&5));
    }

    #[test]
    fn a_worker_reports_its_clock_under_its_own_name_only() {
        use cep_core::clock::OffsetEstimate;
        use cep_core::delivery::DeliveryLog;
        let clock = |node: &str, sender: u32| {
            ClockReport { node: node.into(), estimate: OffsetEstimate { offset_ns: 1_000, uncertainty_ns: 10 } }
                .encode(sender)
        };
        let mut collector = collector(CsvMode::All);
        // (A refused frame takes no place in its source's stream: each comes in an envelope of
        // its own; those taken in their source's next.)
        let refused =
            |source: u32, node: &str| DeliveryLog::new(source, 1, 1 << 20).push(&clock(node, source)).to_vec();
        let (mut w0, mut w3) = (DeliveryLog::new(0, 1, 1 << 20), DeliveryLog::new(3, 1, 1 << 20));
        // Worker 0 is known as w0: it may not report as another worker, the router or an injector.
        collector.handle(w0.push(&clock("w0", 0)), 2_000).unwrap();
        for node in ["w1", "router", "injector-0"] {
            collector.handle(&refused(0, node), 2_000).unwrap();
        }
        // Worker 3 is not known yet: not under a known worker's name; under a new one once, and
        // then it is known by it.
        collector.handle(&refused(3, "w0"), 2_100).unwrap();
        collector.handle(w3.push(&clock("w3", 3)), 2_100).unwrap();
        collector.handle(&refused(3, "w3b"), 2_100).unwrap();
        collector.handle(w3.push(&clock("w3", 3)), 2_100).unwrap();
        collector.handle(DeliveryLog::new(ROUTER_ID, 1, 1 << 20).push(&clock("router", 0)), 2_200).unwrap();
        assert_eq!(collector.workers()[3], "w3");
        let summary = collector.finish(|_| {}).unwrap().summary;
        let nodes: Vec<&str> = summary.clock_offsets.iter().map(|offset| offset.node.as_str()).collect();
        assert_eq!(nodes, ["w0", "w3", "router"], "one entry per process, none forged");
        assert_eq!(summary.rejected["collector"].get("unauthorized_sender"), Some(&5));
    }

    #[test]
    fn envelopes_are_taken_once_in_order_and_forged_ones_change_nothing() {
        use cep_core::delivery::DeliveryLog;
        let mut collector = collector(CsvMode::All);
        let mut worker = DeliveryLog::new(0, 1, 1 << 20);
        collector.handle(worker.push(&rules()), 1_500).unwrap();
        let first = worker.push(&outputs(1, &[0])).to_vec();
        collector.handle(&first, 2_000).unwrap();
        // The same frame again (a resend): dropped.
        collector.handle(&first, 2_100).unwrap();
        // A source beyond any cluster's workers, a worker speaking for another, an envelope
        // in an envelope: refused, counted, no table grows.
        collector.handle(DeliveryLog::new(5_000, 1, 1 << 20).push(&outputs_of(5_000, b"S1", 2, &[0])), 2_200).unwrap();
        collector.handle(DeliveryLog::new(1, 1, 1 << 20).push(&outputs(2, &[0])), 2_300).unwrap();
        let nested = DeliveryLog::new(0, 1, 1 << 20).push(&outputs(2, &[0])).to_vec();
        collector.handle(worker.push(&nested), 2_400).unwrap();
        // A frame beyond the next (the one before it lost on the way): dropped, asked again.
        let lost = worker.push(&outputs(3, &[0])).to_vec();
        collector.handle(worker.push(&outputs(4, &[0])), 2_500).unwrap();
        let (_, saved, _) = collector.save().unwrap();
        assert_eq!(saved.resend, [0]);
        assert_eq!(saved.positions, [(0, 3), (cep_core::identity::ROUTER_ID, 0)], "the forged ones took no place");
        let summary = collector.finish(|_| {}).unwrap().summary;
        assert_eq!(summary.outputs.get("perc"), Some(&1), "one output, once");
        assert_eq!(summary.resent_frames, 2);
        let rejected = &summary.rejected["collector"];
        assert_eq!(
            (rejected.get("unknown_worker"), rejected.get("sender_mismatch"), rejected.get("unexpected_kind")),
            (Some(&1), Some(&1), Some(&1))
        );
        assert_eq!(rejected.get("frames_lost"), Some(&1), "a gap never closed: {lost:?}");
    }
}
