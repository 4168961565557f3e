//! End-to-end latency per one-second interval (by arrival at the collector): `intervals.csv`
//! for plots of latency over time, and `latency.hlog` in HdrHistogram's standard interval-log
//! format, which users' existing HdrHistogram tools read.
//!
//! Nothing is recorded here per output: the run's end-to-end histogram already holds every
//! latency, so an interval is that histogram minus its state at the previous boundary.

use hdrhistogram::serialization::interval_log::IntervalLogWriterBuilder;
use hdrhistogram::serialization::V2DeflateSerializer;
use hdrhistogram::Histogram;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

/// The first line of `intervals.csv`: each interval's start (seconds since the run's start),
/// its number of outputs, and their end-to-end latency in µs.
pub const INTERVALS_HEADER: &str = "interval_start_s,count,mean_us,p50_us,p99_us,p999_us,max_us";

/// Closes one-second intervals of the run's end-to-end histogram into `intervals.csv` and
/// `latency.hlog` (files, or memory in tests and the harness).
pub struct IntervalRecorder<W: Write = BufWriter<File>> {
    start_ns: u64,
    interval_ns: u64,
    current_start_ns: u64,
    /// The run's histogram as it was at the start of the current interval.
    at_interval_start: Histogram<u64>,
    csv: W,
    log: W,
    serializer: V2DeflateSerializer,
}

impl IntervalRecorder {
    /// Intervals of `interval` from `start_ns` (the run's start, collector time).
    pub fn create(out: &Path, start_ns: u64, interval: Duration) -> io::Result<IntervalRecorder> {
        let csv = BufWriter::new(File::create(out.join("intervals.csv"))?);
        let log = BufWriter::new(File::create(out.join("latency.hlog"))?);
        IntervalRecorder::new(csv, log, start_ns, interval)
    }
}

impl<W: Write> IntervalRecorder<W> {
    /// Intervals of `interval` from `start_ns`, written to `csv` and `log`.
    pub fn new(mut csv: W, mut log: W, start_ns: u64, interval: Duration) -> io::Result<IntervalRecorder<W>> {
        writeln!(csv, "{INTERVALS_HEADER}")?;
        let start_s = start_ns as f64 / 1e9;
        writeln!(log, "#[Histogram log format version 1.3]")?;
        writeln!(log, "#[End-to-end latency in nanoseconds, from each tick's intended send time]")?;
        writeln!(log, "#[StartTime: {start_s:.3} (seconds since epoch)]")?;
        writeln!(log, "#[BaseTime: {start_s:.3} (seconds since epoch)]")?;
        writeln!(log, "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"")?;
        Ok(IntervalRecorder {
            start_ns,
            interval_ns: interval.as_nanos().max(1) as u64,
            current_start_ns: start_ns,
            at_interval_start: Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("static bounds are valid"),
            csv,
            log,
            serializer: V2DeflateSerializer::new(),
        })
    }

    /// Call before recording what arrived at `t_collector` into `total` (the run's end-to-end
    /// histogram): closes the current interval once `t_collector` is past it.
    #[inline]
    pub fn advance(&mut self, t_collector: u64, total: &Histogram<u64>) -> io::Result<()> {
        if t_collector >= self.current_start_ns + self.interval_ns {
            self.flush_interval(total)?;
            let elapsed = t_collector.saturating_sub(self.start_ns);
            self.current_start_ns = self.start_ns + elapsed / self.interval_ns * self.interval_ns;
        }
        Ok(())
    }

    fn flush_interval(&mut self, total: &Histogram<u64>) -> io::Result<()> {
        let mut interval = total.clone();
        interval.subtract(&self.at_interval_start).map_err(|error| io::Error::other(format!("{error:?}")))?;
        if interval.is_empty() {
            return Ok(());
        }
        let h = &interval;
        let us = |ns: u64| ns as f64 / 1000.0;
        let offset = Duration::from_nanos(self.current_start_ns.saturating_sub(self.start_ns));
        writeln!(
            self.csv,
            "{:.3},{},{:.2},{:.2},{:.2},{:.2},{:.2}",
            offset.as_secs_f64(),
            h.len(),
            h.mean() / 1000.0,
            us(h.value_at_quantile(0.5)),
            us(h.value_at_quantile(0.99)),
            us(h.value_at_quantile(0.999)),
            us(h.max())
        )?;
        // The log writer borrows its sink: one short-lived writer per interval line.
        let mut line = Vec::new();
        let mut writer = IntervalLogWriterBuilder::new()
            .with_base_time(UNIX_EPOCH + Duration::from_nanos(self.start_ns))
            .begin_log_with(&mut line, &mut self.serializer)?;
        writer
            .write_histogram(h, offset, Duration::from_nanos(self.interval_ns), None)
            .map_err(|error| io::Error::other(format!("{error:?}")))?;
        let text = String::from_utf8_lossy(&line);
        // Keep only the histogram line (the builder writes its own BaseTime comment first).
        for row in text.lines().filter(|row| !row.starts_with('#')) {
            writeln!(self.log, "{row}")?;
        }
        self.at_interval_start = total.clone();
        Ok(())
    }

    /// Closes the last interval; `total` is the run's end-to-end histogram.
    pub fn finish(mut self, total: &Histogram<u64>) -> io::Result<(W, W)> {
        self.flush_interval(total)?;
        self.csv.flush()?;
        self.log.flush()?;
        Ok((self.csv, self.log))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};

    #[test]
    fn writes_one_row_and_one_log_line_per_interval() {
        let dir = tempfile::tempdir().unwrap();
        let start = 1_700_000_000_000_000_000;
        let mut recorder = IntervalRecorder::create(dir.path(), start, Duration::from_secs(1)).unwrap();
        let mut total = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
        for (latency, arrival) in [(1_000, start + 10), (3_000, start + 500_000_000), (9_000, start + 2_100_000_000)] {
            recorder.advance(arrival, &total).unwrap();
            total.record(latency).unwrap();
        }
        recorder.finish(&total).unwrap();
        let csv = std::fs::read_to_string(dir.path().join("intervals.csv")).unwrap();
        let rows: Vec<&str> = csv.lines().collect();
        assert_eq!(rows.len(), 3, "{csv}");
        assert!(rows[1].starts_with("0.000,2,"), "{}", rows[1]);
        assert!(rows[2].starts_with("2.000,1,"), "{}", rows[2]);
        let log = std::fs::read(dir.path().join("latency.hlog")).unwrap();
        let histograms: Vec<_> = IntervalLogIterator::new(&log)
            .filter_map(|entry| match entry.unwrap() {
                LogEntry::Interval(interval) => Some(interval.start_timestamp()),
                _ => None,
            })
            .collect();
        assert_eq!(histograms, vec![Duration::ZERO, Duration::from_secs(2)]);
    }
}
