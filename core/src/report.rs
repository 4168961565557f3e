//! In-band markers and end-of-run reports (cold frames, `rmp-serde` bodies).

use crate::frame::Frame;
use crate::wire::WireError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// End of one injector stream. The injector sends it with `routed = 0` after its last tick;
/// the router forwards it to every worker behind that stream's ticks, with `routed` set to
/// the number of that stream's ticks it sent to that worker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndOfStream {
    /// The stream's id in the run.
    pub stream: u32,
    /// Ticks the injector sent on this stream, in all.
    pub sent: u64,
    /// Ticks of this stream the router sent to the receiving worker (0 as the injector sends it).
    pub routed: u64,
    /// Why its injector ended it before its course (its replay file has a bad line, say):
    /// `sent` is still its true count, but the run's input is short of what was meant. At
    /// most [`MAX_REASON_BYTES`]. The router keeps it; it does not forward it.
    #[serde(default)]
    pub cut: Option<String>,
}

/// The longest reason a peer's frame may carry and be kept (cut to this at a char boundary).
pub const MAX_REASON_BYTES: usize = 512;

/// `reason`, at most [`MAX_REASON_BYTES`] long (cut at a char boundary, marked with `...`).
pub fn bounded_reason(reason: &str) -> String {
    if reason.len() <= MAX_REASON_BYTES {
        return reason.to_string();
    }
    let mut end = MAX_REASON_BYTES - 3;
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &reason[..end])
}

/// A stream the router ended itself, its injector taken for dead.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LostStream {
    /// Why its injector was taken for dead.
    pub reason: String,
    /// What it sent at least: the larger of what the router received of it and what its last
    /// heartbeat said.
    pub sent_at_least: u64,
}

/// Counters by cause (`"malformed"`, `"bad_version"`, `"non_finite_price"`, ...).
pub type CauseCounts = BTreeMap<String, u64>;

/// Adds one to a cause's counter without allocating once the cause has been seen.
pub fn count_cause(counts: &mut CauseCounts, cause: &str) {
    match counts.get_mut(cause) {
        Some(count) => *count += 1,
        None => {
            counts.insert(cause.to_string(), 1);
        }
    }
}

/// Periodic progress of a worker, for the live display.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerProgress {
    /// When the counts held, in the run's reference time (ns): the collector lines up every
    /// node's counts at one instant.
    pub at_ns: u64,
    /// Ticks processed so far, all streams.
    pub processed: u64,
    /// Outputs so far, all rules.
    pub outputs: u64,
    /// Frames and ticks rejected so far.
    pub rejected: u64,
}

/// One stream as one worker saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamAtWorker {
    /// The stream's id in the run.
    pub stream: u32,
    /// What the injector said it sent (from the end-of-stream marker; `None` if it never came).
    pub sent: Option<u64>,
    /// What the router said it routed to this worker (from the same marker).
    pub routed: Option<u64>,
    /// Ticks of this stream the worker processed.
    pub processed: u64,
}

/// A worker's final accounting, sent after the last stream's end-of-stream marker.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerReport {
    /// The worker's id, as it registered.
    pub id: String,
    /// The worker's index in the run (its sender id on the wire).
    pub index: u32,
    /// Ticks processed, all streams (late ones, dropped or not, included).
    pub processed: u64,
    /// Distinct symbols the worker saw (those it owns that had a tick).
    pub symbols: u64,
    /// Outputs sent, all rules.
    pub outputs: u64,
    /// Per stream, in stream id order: what was sent, routed here and processed.
    pub streams: Vec<StreamAtWorker>,
    /// Ticks whose (stream, seq) the worker had already processed: skipped, not reprocessed.
    pub duplicates: u64,
    /// Ticks of a symbol that arrived with a lower sequence number than one already seen.
    pub out_of_order: u64,
    /// Ticks behind their symbol's latest event time, processed at that time.
    pub late: u64,
    /// Ticks later than the allowed lateness: counted as processed, dropped by the engine.
    pub late_dropped: u64,
    /// Frames and ticks rejected by the worker, by cause.
    pub rejected: CauseCounts,
}

/// One query of a rule set, as the collector needs it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleInfo {
    /// The query's name (its `@name`), as outputs and summaries show it.
    pub name: String,
    /// Emits only when a condition holds (written by `--csv alerts`).
    pub alert: bool,
}

/// The rule set a worker now runs: its outputs' rule indexes point into `queries` until
/// the next such frame from the same worker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RulesInstalled {
    /// The rules' version in the run (0 for the rules it started with).
    pub epoch: u32,
    /// The rule set's queries, in the order of the outputs' rule indexes.
    pub queries: Vec<RuleInfo>,
}

/// The marker a rule switch travels as, router -> workers, between two ticks.
pub type SwitchRules = crate::control::RulesText;

/// A node's clock offset to the collector, measured when the run started.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockReport {
    /// The node's name (`router`, `injector-0`, or a worker's id).
    pub node: String,
    /// Its clock's offset to the collector's, as measured.
    pub estimate: crate::clock::OffsetEstimate,
}

/// Periodic progress of the router, for the live display: what has entered the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouterProgress {
    /// When the count held, in the run's reference time (ns).
    pub at_ns: u64,
    /// Valid ticks received from the injectors so far, all streams.
    pub received: u64,
}

/// The router's final accounting, sent to the collector once every stream has ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RouterReport {
    /// Valid ticks received, per stream id.
    pub received: BTreeMap<u32, u64>,
    /// The rules the run started with and every deployment after, with its switch point.
    pub rules: Vec<crate::results::RulesEpoch>,
    /// Ticks forwarded to workers.
    pub routed: u64,
    /// Frames and ticks rejected by the router, by cause.
    pub rejected: CauseCounts,
    /// Worker ids in ring order (ordered by id; a worker's index is its place here).
    pub workers: Vec<String>,
    /// Indexes of the workers that died (they send no report; see `WorkerFailed`).
    pub failed: Vec<u32>,
    /// Streams the router ended itself because their injector fell silent or died: what each
    /// sent in truth is unknown.
    pub lost_streams: BTreeMap<u32, LostStream>,
    /// Streams their injector ended before their course, with why (their end marker's `cut`):
    /// their counts are exact, the run's input is short of what was meant.
    pub cut_streams: BTreeMap<u32, String>,
    /// The checkpoint rounds: completed, failed and the last of each.
    pub checkpoints: crate::results::CheckpointSummary,
}

/// Counts rejected frames and ticks by cause and logs them with their sender: the first few
/// of each cause in full, then one line per 10,000, so a flood cannot drown the log.
#[derive(Clone, Debug, Default)]
pub struct Rejections {
    counts: CauseCounts,
    place: &'static str,
}

impl Rejections {
    /// No rejection yet; `place` names the receiver in the log lines (`"router"`, `"worker"`, ...).
    pub fn new(place: &'static str) -> Self {
        Rejections { counts: CauseCounts::new(), place }
    }

    /// Rejections resumed from saved [`Self::counts`] (a restarted receiver's): the log keeps
    /// thinning from where it was.
    pub fn restore(place: &'static str, counts: CauseCounts) -> Self {
        Rejections { counts, place }
    }

    /// Sets `cause`'s count to a total kept elsewhere (connections the authentication refused:
    /// no frame of theirs arrives).
    pub fn set(&mut self, cause: &str, count: u64) {
        if count > 0 {
            self.counts.insert(cause.to_string(), count);
        }
    }

    /// Counts one rejection; `sender` is the frame's sender id (or `None` if unreadable).
    pub fn reject(&mut self, cause: &str, sender: Option<u32>, detail: &dyn std::fmt::Display) {
        count_cause(&mut self.counts, cause);
        let seen = self.counts[cause];
        if seen <= 5 || seen % 10_000 == 0 {
            let sender = sender.map_or_else(|| "unknown".to_string(), |id| id.to_string());
            tracing::warn!(place = self.place, cause, sender, seen, "rejected: {detail}");
        }
    }

    /// Counts `count` rejections of one cause at once (logged once, if any).
    pub fn reject_many(&mut self, cause: &str, count: u64, sender: Option<u32>, detail: &dyn std::fmt::Display) {
        if count == 0 {
            return;
        }
        *self.counts.entry(cause.to_string()).or_insert(0) += count;
        let sender = sender.map_or_else(|| "unknown".to_string(), |id| id.to_string());
        tracing::warn!(place = self.place, cause, sender, count, "rejected: {detail}");
    }

    /// Checks a received frame's size and header; a frame that fails is counted and `None`.
    pub fn accept<'a>(&mut self, frame: &'a [u8], max_bytes: usize) -> Option<Frame<'a>> {
        match Frame::read(frame, max_bytes) {
            Ok(parsed) => Some(parsed),
            Err(error) => {
                self.reject(error.cause(), None, &error);
                None
            }
        }
    }

    /// Counts `tick` (of a frame from `sender`) if it cannot be processed (an empty symbol, a
    /// price that is not a positive number); true if it was rejected.
    #[inline]
    pub fn reject_invalid(&mut self, tick: &crate::tick::TickRecord, sender: u32) -> bool {
        let Some(cause) = tick.invalid_reason() else { return false };
        self.reject(cause, Some(sender), &format_args!("tick seq {} of stream {}", tick.seq, tick.injector));
        true
    }

    /// Counts a well-formed frame of a kind this receiver does not take.
    pub fn unexpected(&mut self, frame: &Frame<'_>) {
        let error = WireError::UnexpectedKind(frame.kind() as u64);
        self.reject(error.cause(), Some(frame.sender()), &error);
    }

    /// The body of a cold frame, or `None` with the decoding error counted against its sender.
    pub fn decode<B: crate::frame::Body>(&mut self, frame: &Frame<'_>) -> Option<B> {
        frame.body::<B>().map_err(|error| self.reject(error.cause(), Some(frame.sender()), &error)).ok()
    }

    /// Rejections so far, by cause.
    pub fn counts(&self) -> &CauseCounts {
        &self.counts
    }

    /// Rejections so far, all causes.
    pub fn total(&self) -> u64 {
        self.counts.values().sum()
    }
}
