//! An HdrHistogram as a Prometheus histogram: cumulative counts at fixed bounds. Computed from
//! the histogram the collector already keeps (no value is recorded twice), once a second at
//! most, on the collector's own thread.

use hdrhistogram::Histogram;

/// Upper bounds, in seconds, of the latency buckets: fine where this cluster's hops and
/// end-to-end latencies lie (tens of microseconds to a few milliseconds), coarse beyond.
pub const LATENCY_SECONDS: &[f64] = &[
    0.000_01, 0.000_02, 0.000_05, 0.000_1, 0.000_15, 0.000_2, 0.000_3, 0.000_5, 0.000_75, 0.001, 0.001_5, 0.002, 0.003,
    0.005, 0.007_5, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// A histogram as the exposition writes it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Buckets {
    /// (upper bound, count of values above the previous bound and at most this one); the
    /// encoder accumulates them. The last bound is +Inf.
    pub buckets: Vec<(f64, u64)>,
    /// Number of values.
    pub count: u64,
    /// Sum of the values, from the HdrHistogram's mean (within its precision).
    pub sum: f64,
}

impl Buckets {
    /// `histogram`'s values times `scale` (e.g. 1e-9 for nanoseconds to seconds), counted at
    /// `bounds` (ascending). A value counts by the lowest value the HdrHistogram keeps it as
    /// (values closer than its precision, 3 significant digits here, are one value to it).
    pub fn from_hdr(histogram: &Histogram<u64>, bounds: &[f64], scale: f64) -> Buckets {
        let mut counts = vec![0u64; bounds.len() + 1];
        for step in histogram.iter_recorded() {
            let value = histogram.lowest_equivalent(step.value_iterated_to()) as f64 * scale;
            counts[bounds.partition_point(|bound| *bound < value)] += step.count_at_value();
        }
        let buckets = bounds.iter().copied().chain([f64::INFINITY]).zip(counts).collect();
        let count = histogram.len();
        Buckets { buckets, count, sum: if count == 0 { 0.0 } else { histogram.mean() * count as f64 * scale } }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_land_below_their_bound_and_add_up() {
        let mut histogram = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
        histogram.record_n(40_000, 3).unwrap(); // 40 us
        histogram.record(100_000).unwrap(); // 100 us: on the bound, counts below it
        histogram.record(2_000_000).unwrap(); // 2 ms
        histogram.record(60_000_000_000).unwrap(); // 60 s: beyond the last bound
        let buckets = Buckets::from_hdr(&histogram, LATENCY_SECONDS, 1e-9);
        let at = |bound: f64| buckets.buckets.iter().find(|(b, _)| *b == bound).unwrap().1;
        assert_eq!(at(0.000_05), 3);
        assert_eq!(at(0.000_1), 1);
        assert_eq!(at(0.002), 1);
        assert_eq!(at(f64::INFINITY), 1);
        assert_eq!(buckets.buckets.iter().map(|(_, n)| n).sum::<u64>(), 6);
        assert_eq!(buckets.count, 6);
        let exact = (3.0 * 40e-6) + 100e-6 + 2e-3 + 60.0;
        assert!((buckets.sum - exact).abs() < exact * 1e-3, "{}", buckets.sum);
        assert_eq!(
            Buckets::from_hdr(&Histogram::<u64>::new(3).unwrap(), &[1.0], 1.0).buckets,
            vec![(1.0, 0), (f64::INFINITY, 0)]
        );
    }
}
