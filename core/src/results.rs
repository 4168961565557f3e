//! The results folder's `summary.json` (DESIGN section 4). Field names here are a contract:
//! more may be added, none renamed.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Latency distribution of one hop, in microseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub count: u64,
    pub mean: f64,
    pub min: f64,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub p999: f64,
    pub p9999: f64,
    pub max: f64,
}

/// Output counts per rule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputCounts {
    pub perc: u64,
    pub trend: u64,
    pub volatility: u64,
}

/// Latency per hop and end to end.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HopLatencies {
    pub end_to_end: LatencySummary,
    pub injector_to_router: LatencySummary,
    pub router: LatencySummary,
    pub router_to_worker: LatencySummary,
    pub engine: LatencySummary,
    pub worker_to_collector: LatencySummary,
}

/// One worker's share of the run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerSummary {
    pub id: String,
    pub events: u64,
    pub symbols: u64,
}

/// One injector stream's accounting.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamSummary {
    pub stream: u32,
    /// From the stream's end-of-stream marker; `None` if it never arrived.
    pub sent: Option<u64>,
    pub received_by_router: u64,
    pub processed: u64,
    pub lost: u64,
}

/// `summary.json`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub events_sent: u64,
    pub events_processed: u64,
    pub events_lost: u64,
    pub duplicates: u64,
    pub duration_s: f64,
    pub throughput_eps: f64,
    pub outputs: OutputCounts,
    pub latency_us: HopLatencies,
    pub workers: Vec<WorkerSummary>,
    /// Lost events by cause: `rejected` (invalid ticks of a registered stream), `missing`
    /// (sent but never seen, e.g. a process died), `incomplete` (a stream never ended).
    pub lost_by_cause: BTreeMap<String, u64>,
    /// Rejected frames and ticks by place (`router`, `worker:<id>`, `collector`) and cause.
    pub rejected: BTreeMap<String, BTreeMap<String, u64>>,
    /// Ticks that reached a worker behind a later tick of the same symbol.
    pub out_of_order: u64,
    pub streams: Vec<StreamSummary>,
    /// True when every stream, worker and the router reported their end; false when the
    /// collector stopped on its idle timeout or a shutdown signal.
    pub complete: bool,
    /// Outputs whose tick was intended during the warm-up: counted, not in the histograms.
    pub warmup_outputs: u64,
}
