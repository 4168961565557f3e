//! The worker's metrics (docs/METRICS.md): ticks processed per stream, outputs sent,
//! duplicates and late ticks, symbols owned, the rules' epoch, rejections by cause. The data
//! path copies the counters it keeps anyway into these atomics with its progress report
//! (every 500 ms) and at the end: nothing per tick.

use cep_core::report::CauseCounts;
use cep_telemetry::metrics::Rejected;
use cep_telemetry::{Scrape, Source};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// What the data path knows at one moment.
pub struct Snapshot<'a> {
    /// Ticks processed, per stream id.
    pub processed: Vec<u64>,
    /// Streams whose end-of-stream marker has arrived.
    pub streams_ended: usize,
    /// Outputs so far, all rules.
    pub outputs: u64,
    /// Ticks skipped because their (stream, seq) was already processed.
    pub duplicates: u64,
    /// Ticks of a symbol that arrived with a lower sequence number than one already seen.
    pub out_of_order: u64,
    /// Ticks behind their symbol's latest event time, processed at that time.
    pub late: u64,
    /// Ticks later than the allowed lateness: counted as processed, dropped by the engine.
    pub late_dropped: u64,
    /// Distinct symbols seen (those this worker owns that had a tick).
    pub symbols: usize,
    /// The rules' version the worker runs.
    pub epoch: u32,
    /// Frames and ticks rejected so far, by cause.
    pub rejected: &'a CauseCounts,
}

/// The worker's metrics source: the last [`Snapshot`], in atomics that scrapes read.
pub struct WorkerMetrics {
    streams: Vec<String>,
    processed: Vec<AtomicU64>,
    streams_ended: AtomicU64,
    outputs: AtomicU64,
    duplicates: AtomicU64,
    out_of_order: AtomicU64,
    late: AtomicU64,
    late_dropped: AtomicU64,
    symbols: AtomicU64,
    epoch: AtomicU64,
    rejected: Rejected,
}

impl WorkerMetrics {
    /// This process's worker metrics for a run of `streams` streams, registered for scraping.
    pub fn register(streams: u32) -> Arc<WorkerMetrics> {
        let metrics = Arc::new(WorkerMetrics {
            streams: (0..streams).map(|stream| stream.to_string()).collect(),
            processed: (0..streams).map(|_| AtomicU64::new(0)).collect(),
            streams_ended: AtomicU64::new(0),
            outputs: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
            out_of_order: AtomicU64::new(0),
            late: AtomicU64::new(0),
            late_dropped: AtomicU64::new(0),
            symbols: AtomicU64::new(0),
            epoch: AtomicU64::new(0),
            rejected: Rejected::default(),
        });
        cep_telemetry::metrics::register("worker", metrics.clone());
        metrics
    }

    /// Copies a snapshot for the next scrapes.
    pub fn observe(&self, now: &Snapshot<'_>) {
        for (slot, count) in self.processed.iter().zip(&now.processed) {
            slot.store(*count, Relaxed);
        }
        self.streams_ended.store(now.streams_ended as u64, Relaxed);
        self.outputs.store(now.outputs, Relaxed);
        self.duplicates.store(now.duplicates, Relaxed);
        self.out_of_order.store(now.out_of_order, Relaxed);
        self.late.store(now.late, Relaxed);
        self.late_dropped.store(now.late_dropped, Relaxed);
        self.symbols.store(now.symbols as u64, Relaxed);
        self.epoch.store(now.epoch as u64, Relaxed);
        self.rejected.observe(now.rejected);
    }
}

impl Source for WorkerMetrics {
    fn scrape(&self, out: &mut Scrape<'_>) -> fmt::Result {
        let get = |value: &AtomicU64| value.load(Relaxed);
        out.counters(
            "cep_worker_ticks_processed",
            "Ticks run through the engine, per injector stream (each exactly once).",
            "stream",
            self.streams.iter().zip(&self.processed).map(|(stream, count)| (stream.as_str(), get(count))),
        )?;
        out.counter("cep_worker_outputs_sent", "Outputs sent to the collector, all rules.", get(&self.outputs))?;
        out.counter(
            "cep_worker_duplicates",
            "Ticks skipped because their (stream, seq) was already processed.",
            get(&self.duplicates),
        )?;
        out.counter(
            "cep_worker_out_of_order",
            "Ticks of a symbol that arrived after a later tick of the same symbol.",
            get(&self.out_of_order),
        )?;
        out.counter(
            "cep_worker_late",
            "Ticks behind their symbol's latest event time, processed at that time.",
            get(&self.late),
        )?;
        out.counter(
            "cep_worker_late_dropped",
            "Ticks later than the allowed lateness, dropped by the engine.",
            get(&self.late_dropped),
        )?;
        out.gauge("cep_worker_symbols", "Symbols this worker owns (has seen).", get(&self.symbols) as f64)?;
        out.gauge("cep_worker_streams_ended", "Streams whose end-of-stream marker has arrived.", {
            get(&self.streams_ended) as f64
        })?;
        out.gauge("cep_worker_rules_epoch", "The rules' version this worker runs.", get(&self.epoch) as f64)?;
        self.rejected.scrape(out)
    }
}
