//! Latency per hop and end to end, in HdrHistograms of nanoseconds.

use cep_core::results::{HopLatencies, LatencySummary};
use cep_core::tick::Stamps;
use hdrhistogram::Histogram;

/// Longest latency recorded exactly (one hour); longer values are clamped to it.
const MAX_NS: u64 = 3_600_000_000_000;

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_NS, 3).expect("static histogram bounds are valid")
}

/// Six latency histograms, in ns: one end to end (a tick's intended send time to its output's
/// arrival at the collector), and one per hop on the way, from the stamps each output carries
/// (injector to router, inside the router, router to worker, inside the worker's engine,
/// worker to collector).
#[derive(serde::Serialize, serde::Deserialize)]
pub struct HopHistograms {
    /// From the tick's intended send time to the output's arrival at the collector.
    #[serde(with = "crate::histogram_serde")]
    pub end_to_end: Histogram<u64>,
    /// Intended send time to the router's receipt (includes the injector's own delay).
    #[serde(with = "crate::histogram_serde")]
    pub injector_to_router: Histogram<u64>,
    /// Inside the router: receipt to departure.
    #[serde(with = "crate::histogram_serde")]
    pub router: Histogram<u64>,
    /// Router departure to the worker's receipt.
    #[serde(with = "crate::histogram_serde")]
    pub router_to_worker: Histogram<u64>,
    /// Inside the worker: receipt to the engine's exit.
    #[serde(with = "crate::histogram_serde")]
    pub engine: Histogram<u64>,
    /// Engine exit to the collector's receipt.
    #[serde(with = "crate::histogram_serde")]
    pub worker_to_collector: Histogram<u64>,
    /// Consecutive outputs usually share their router hop (one router batch): record a run once.
    router_run: (u64, u64),
}

impl Default for HopHistograms {
    fn default() -> Self {
        HopHistograms {
            end_to_end: histogram(),
            injector_to_router: histogram(),
            router: histogram(),
            router_to_worker: histogram(),
            engine: histogram(),
            worker_to_collector: histogram(),
            router_run: (0, 0),
        }
    }
}

/// A hop's latency. Every stamp is in the collector's clock (each node corrects its own by
/// the offset it measured), so a negative hop is the offset estimate's uncertainty or stamps
/// taken in a different order than recorded; it counts as the smallest value.
#[inline]
fn hop(from: u64, to: u64) -> u64 {
    to.saturating_sub(from).clamp(1, MAX_NS)
}

impl HopHistograms {
    /// Records one output's own hops (those that differ from output to output).
    #[inline]
    pub fn record_output(&mut self, stamps: &Stamps, t_collector: u64) {
        self.end_to_end.saturating_record(hop(stamps.t_inject, t_collector));
        self.injector_to_router.saturating_record(hop(stamps.t_inject, stamps.t_router_in));
        let router = hop(stamps.t_router_in, stamps.t_router_out);
        if router == self.router_run.0 {
            self.router_run.1 += 1;
        } else {
            self.flush_router_run();
            self.router_run = (router, 1);
        }
    }

    /// Records the hops a whole output batch shares (`count` outputs of it were measured).
    pub fn record_batch(&mut self, stamps: &Stamps, t_collector: u64, count: u64) {
        if count == 0 {
            return;
        }
        self.router_to_worker.saturating_record_n(hop(stamps.t_router_out, stamps.t_worker_in), count);
        self.engine.saturating_record_n(hop(stamps.t_worker_in, stamps.t_engine_out), count);
        self.worker_to_collector.saturating_record_n(hop(stamps.t_engine_out, t_collector), count);
    }

    /// Records one output completely.
    pub fn record(&mut self, stamps: &Stamps, t_collector: u64) {
        self.record_output(stamps, t_collector);
        self.record_batch(stamps, t_collector, 1);
    }

    fn flush_router_run(&mut self) {
        let (value, count) = std::mem::take(&mut self.router_run);
        if count > 0 {
            self.router.saturating_record_n(value, count);
        }
    }

    /// Each histogram's summary, in µs (records the pending router run first).
    pub fn summary(&mut self) -> HopLatencies {
        self.flush_router_run();
        HopLatencies {
            end_to_end: summarize(&self.end_to_end),
            injector_to_router: summarize(&self.injector_to_router),
            router: summarize(&self.router),
            router_to_worker: summarize(&self.router_to_worker),
            engine: summarize(&self.engine),
            worker_to_collector: summarize(&self.worker_to_collector),
        }
    }
}

/// Microsecond summary of a nanosecond histogram.
pub fn summarize(histogram: &Histogram<u64>) -> LatencySummary {
    if histogram.is_empty() {
        return LatencySummary::default();
    }
    let us = |ns: u64| ns as f64 / 1000.0;
    LatencySummary {
        count: histogram.len(),
        mean: histogram.mean() / 1000.0,
        min: us(histogram.min()),
        p50: us(histogram.value_at_quantile(0.50)),
        p95: us(histogram.value_at_quantile(0.95)),
        p99: us(histogram.value_at_quantile(0.99)),
        p999: us(histogram.value_at_quantile(0.999)),
        p9999: us(histogram.value_at_quantile(0.9999)),
        max: us(histogram.max()),
    }
}

/// Writes the end-to-end distribution of the whole run: `percentiles.csv`, the HdrHistogram
/// percentile spectrum, and `latency_histogram.csv`, counts in logarithmic buckets.
pub fn write_distribution(out: &std::path::Path, histogram: &Histogram<u64>) -> std::io::Result<()> {
    use std::fmt::Write;
    let mut percentiles = String::from("percentile,value_us,count_below\n");
    let mut histo = String::from("bucket_upper_us,count\n");
    if !histogram.is_empty() {
        let mut below = 0;
        for step in histogram.iter_quantiles(4) {
            below += step.count_since_last_iteration();
            let _ = writeln!(
                percentiles,
                "{:.6},{:.3},{below}",
                step.quantile_iterated_to() * 100.0,
                step.value_iterated_to() as f64 / 1000.0
            );
        }
        for step in histogram.iter_log(1_000, 1.25) {
            let _ = writeln!(
                histo,
                "{:.3},{}",
                step.value_iterated_to() as f64 / 1000.0,
                step.count_since_last_iteration()
            );
        }
    }
    std::fs::write(out.join("percentiles.csv"), percentiles)?;
    std::fs::write(out.join("latency_histogram.csv"), histo)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hops_are_the_differences_of_consecutive_stamps() {
        let mut hops = HopHistograms::default();
        let mut other = HopHistograms::default();
        let stamps = Stamps {
            t_inject: 1_000,
            t_router_in: 3_000,
            t_router_out: 4_000,
            t_worker_in: 9_000,
            t_engine_out: 10_000,
        };
        hops.record(&stamps, 21_000);
        // The same output recorded per output and per batch gives the same figures.
        other.record_output(&stamps, 21_000);
        other.record_output(&stamps, 21_000);
        other.record_batch(&stamps, 21_000, 2);
        let summary = hops.summary();
        let doubled = other.summary();
        assert_eq!(doubled.router.count, 2);
        assert_eq!(doubled.engine.count, 2);
        assert_eq!((doubled.end_to_end.p50, doubled.router.max), (summary.end_to_end.p50, summary.router.max));
        assert_eq!(summary.end_to_end.count, 1);
        assert!((summary.end_to_end.p50 - 20.0).abs() < 0.05);
        assert!((summary.injector_to_router.max - 2.0).abs() < 0.01);
        assert!((summary.router.min - 1.0).abs() < 0.01);
        assert!((summary.router_to_worker.mean - 5.0).abs() < 0.01);
        assert!((summary.engine.p99 - 1.0).abs() < 0.01);
        assert!((summary.worker_to_collector.p9999 - 11.0).abs() < 0.02);
    }

    #[test]
    fn a_saved_copy_records_and_summarizes_as_the_original() {
        let mut hops = HopHistograms::default();
        let stamps = |i: u64| Stamps {
            t_inject: 1_000 * i,
            t_router_in: 1_000 * i + 2_000,
            t_router_out: 1_000 * i + 2_000 + i % 3 * 500,
            t_worker_in: 1_000 * i + 9_000,
            t_engine_out: 1_000 * i + 10_000 + i * 7,
        };
        for i in 0..500 {
            hops.record(&stamps(i), 1_000 * i + 20_000 + i * i);
        }
        // Saved mid-run, with a router run still pending.
        let mut back: HopHistograms = rmp_serde::from_slice(&rmp_serde::to_vec(&hops).unwrap()).unwrap();
        for i in 500..800 {
            hops.record(&stamps(i), 1_000 * i + 20_000 + i * i);
            back.record(&stamps(i), 1_000 * i + 20_000 + i * i);
        }
        assert_eq!(back.summary(), hops.summary());
        assert_eq!(back.end_to_end, hops.end_to_end);
        assert_eq!((back.router.high(), back.router.sigfig()), (MAX_NS, 3));
    }
}
