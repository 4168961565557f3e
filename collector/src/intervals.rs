//! End-to-end latency per one-second interval (by arrival at the collector): `intervals.csv`
//! for plots of latency over time, and `latency.hlog` in HdrHistogram's standard interval-log
//! format, which users' existing HdrHistogram tools read.
//!
//! Nothing is recorded here per output: the run's end-to-end histogram already holds every
//! latency, so an interval is that histogram minus its state at the previous boundary.

use hdrhistogram::serialization::interval_log::IntervalLogWriterBuilder;
use hdrhistogram::serialization::V2DeflateSerializer;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

/// The first line of `intervals.csv`: each interval's start (seconds since the run's start),
/// its number of outputs, and their end-to-end latency in µs.
pub const INTERVALS_HEADER: &str = "interval_start_s,count,mean_us,p50_us,p99_us,p999_us,max_us";

const CSV_FILE: &str = "intervals.csv";
const LOG_FILE: &str = "latency.hlog";

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
    /// Bytes written to `csv` and `log` (see [`IntervalRecorder::bytes_written`]): counted here
    /// rather than read off the files, so it works for any sink and costs no system call.
    csv_len: u64,
    log_len: u64,
    serializer: V2DeflateSerializer,
}

/// What an [`IntervalRecorder`] needs to go on where it was (the files' contents aside).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct IntervalState {
    /// The run's start (collector time), where the intervals are counted from.
    pub start_ns: u64,
    /// An interval's length, ns.
    pub interval_ns: u64,
    /// The start of the interval not yet closed.
    pub current_start_ns: u64,
    /// The run's end-to-end histogram as it was at `current_start_ns`.
    #[serde(with = "crate::histogram_serde")]
    pub at_interval_start: Histogram<u64>,
}

impl IntervalRecorder {
    /// Intervals of `interval` from `start_ns` (the run's start, collector time).
    pub fn create(out: &Path, start_ns: u64, interval: Duration) -> io::Result<IntervalRecorder> {
        let csv = BufWriter::new(File::create(out.join(CSV_FILE))?);
        let log = BufWriter::new(File::create(out.join(LOG_FILE))?);
        IntervalRecorder::new(csv, log, start_ns, interval)
    }

    /// Goes on with the `intervals.csv` and `latency.hlog` in `out` from `state`: each file is
    /// cut to its length when `state` was taken (`csv_len`, `log_len`: [`Self::bytes_written`]
    /// after a [`Self::flush`]), dropping what was written after, and written on from there. A
    /// file shorter than that lost what the state counts on: an error.
    pub fn reopen(out: &Path, state: IntervalState, csv_len: u64, log_len: u64) -> io::Result<IntervalRecorder> {
        let csv = BufWriter::new(crate::csv::reopen_truncated(&out.join(CSV_FILE), csv_len)?);
        let log = BufWriter::new(crate::csv::reopen_truncated(&out.join(LOG_FILE), log_len)?);
        Ok(IntervalRecorder::resume(csv, log, state, (csv_len, log_len)))
    }
}

/// Writes `bytes` to `sink`, counting them in `len`.
fn put<W: Write>(sink: &mut W, len: &mut u64, bytes: &[u8]) -> io::Result<()> {
    sink.write_all(bytes)?;
    *len += bytes.len() as u64;
    Ok(())
}

impl<W: Write> IntervalRecorder<W> {
    /// Intervals of `interval` from `start_ns`, written to `csv` and `log`.
    pub fn new(mut csv: W, mut log: W, start_ns: u64, interval: Duration) -> io::Result<IntervalRecorder<W>> {
        let (mut csv_len, mut log_len) = (0, 0);
        put(&mut csv, &mut csv_len, format!("{INTERVALS_HEADER}\n").as_bytes())?;
        let start_s = start_ns as f64 / 1e9;
        let header = format!(
            "#[Histogram log format version 1.3]\n\
             #[End-to-end latency in nanoseconds, from each tick's intended send time]\n\
             #[StartTime: {start_s:.3} (seconds since epoch)]\n\
             #[BaseTime: {start_s:.3} (seconds since epoch)]\n\
             \"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"\n"
        );
        put(&mut log, &mut log_len, header.as_bytes())?;
        let state = IntervalState {
            start_ns,
            interval_ns: interval.as_nanos().max(1) as u64,
            current_start_ns: start_ns,
            at_interval_start: Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("static bounds are valid"),
        };
        Ok(IntervalRecorder::resume(csv, log, state, (csv_len, log_len)))
    }

    /// Goes on from `state`, writing to `csv` and `log` after what they hold (`written`: their
    /// lengths, as [`Self::bytes_written`] said): no header (they have one).
    pub fn resume(csv: W, log: W, state: IntervalState, written: (u64, u64)) -> IntervalRecorder<W> {
        IntervalRecorder {
            start_ns: state.start_ns,
            interval_ns: state.interval_ns.max(1),
            current_start_ns: state.current_start_ns,
            at_interval_start: state.at_interval_start,
            csv,
            log,
            csv_len: written.0,
            log_len: written.1,
            serializer: V2DeflateSerializer::new(),
        }
    }

    /// What [`Self::resume`] needs to go on from here.
    pub fn state(&self) -> IntervalState {
        IntervalState {
            start_ns: self.start_ns,
            interval_ns: self.interval_ns,
            current_start_ns: self.current_start_ns,
            at_interval_start: self.at_interval_start.clone(),
        }
    }

    /// Bytes written to (`intervals.csv`, `latency.hlog`): from the files' start for a recorder
    /// made by `new`, `create` or `reopen` (after [`Self::flush`], the files' lengths), from
    /// the resume for one made by [`Self::resume`]. Buffered bytes count: flush first.
    pub fn bytes_written(&self) -> (u64, u64) {
        (self.csv_len, self.log_len)
    }

    /// Flushes both sinks.
    pub fn flush(&mut self) -> io::Result<()> {
        self.csv.flush()?;
        self.log.flush()
    }

    /// The sinks (`intervals.csv`, `latency.hlog`), e.g. to sync the files behind them.
    pub fn writers(&self) -> (&W, &W) {
        (&self.csv, &self.log)
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
        let row = format!(
            "{:.3},{},{:.2},{:.2},{:.2},{:.2},{:.2}\n",
            offset.as_secs_f64(),
            h.len(),
            h.mean() / 1000.0,
            us(h.value_at_quantile(0.5)),
            us(h.value_at_quantile(0.99)),
            us(h.value_at_quantile(0.999)),
            us(h.max())
        );
        put(&mut self.csv, &mut self.csv_len, row.as_bytes())?;
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
        let mut rows = String::new();
        for row in text.lines().filter(|row| !row.starts_with('#')) {
            let _ = writeln!(rows, "{row}");
        }
        put(&mut self.log, &mut self.log_len, rows.as_bytes())?;
        self.at_interval_start = total.clone();
        Ok(())
    }

    /// Closes the last interval; `total` is the run's end-to-end histogram.
    pub fn finish(mut self, total: &Histogram<u64>) -> io::Result<(W, W)> {
        self.flush_interval(total)?;
        self.flush()?;
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

    /// Outputs (latency, arrival) over several intervals, some of them empty.
    fn arrivals(start: u64) -> Vec<(u64, u64)> {
        (0..400u64).map(|i| (1_000 + i * i * 37 % 900_000, start + i * 17_000_000 + i % 7 * 1_000)).collect()
    }

    fn histogram() -> Histogram<u64> {
        Histogram::new_with_bounds(1, 3_600_000_000_000, 3).unwrap()
    }

    fn feed<W: Write>(recorder: &mut IntervalRecorder<W>, total: &mut Histogram<u64>, arrivals: &[(u64, u64)]) {
        for &(latency, arrival) in arrivals {
            recorder.advance(arrival, total).unwrap();
            total.record(latency).unwrap();
        }
    }

    #[test]
    fn a_resumed_recorder_writes_what_an_uninterrupted_one_does() {
        let start = 1_700_000_000_000_000_000;
        let arrivals = arrivals(start);
        let (before, after) = arrivals.split_at(150);
        let mut total = histogram();
        let mut whole = IntervalRecorder::new(Vec::new(), Vec::new(), start, Duration::from_secs(1)).unwrap();
        feed(&mut whole, &mut total, &arrivals);
        let (whole_csv, whole_log) = whole.finish(&total).unwrap();
        assert!(whole_csv.iter().filter(|&&b| b == b'\n').count() > 4, "several intervals");

        // In memory: saved after `before`, resumed on copies of what the sinks held.
        let mut total = histogram();
        let mut first = IntervalRecorder::new(Vec::new(), Vec::new(), start, Duration::from_secs(1)).unwrap();
        feed(&mut first, &mut total, before);
        first.flush().unwrap();
        let (csv, log) = first.writers();
        assert_eq!(first.bytes_written(), (csv.len() as u64, log.len() as u64));
        let state: IntervalState = rmp_serde::from_slice(&rmp_serde::to_vec(&first.state()).unwrap()).unwrap();
        let written = (csv.len() as u64, log.len() as u64);
        let mut resumed = IntervalRecorder::resume(csv.clone(), log.clone(), state, written);
        feed(&mut resumed, &mut total, after);
        let (csv, log) = resumed.finish(&total).unwrap();
        assert_eq!(String::from_utf8(csv).unwrap(), String::from_utf8(whole_csv.clone()).unwrap());
        assert_eq!(log, whole_log);

        // In files: saved after `before`, then more written before the crash; the reopened
        // recorder drops that tail and goes on from the save.
        let dir = tempfile::tempdir().unwrap();
        let mut total = histogram();
        let mut first = IntervalRecorder::create(dir.path(), start, Duration::from_secs(1)).unwrap();
        feed(&mut first, &mut total, before);
        first.flush().unwrap();
        let (csv_len, log_len) = first.bytes_written();
        assert_eq!(std::fs::metadata(dir.path().join("intervals.csv")).unwrap().len(), csv_len);
        assert_eq!(std::fs::metadata(dir.path().join("latency.hlog")).unwrap().len(), log_len);
        let state = rmp_serde::to_vec(&first.state()).unwrap();
        let saved_total = total.clone();
        feed(&mut first, &mut total, &after[..100]);
        first.flush().unwrap();
        drop(first);
        assert!(std::fs::metadata(dir.path().join("intervals.csv")).unwrap().len() > csv_len);

        let mut total = saved_total;
        let state = rmp_serde::from_slice(&state).unwrap();
        let mut resumed = IntervalRecorder::reopen(dir.path(), state, csv_len, log_len).unwrap();
        assert_eq!(resumed.bytes_written(), (csv_len, log_len));
        feed(&mut resumed, &mut total, after);
        resumed.finish(&total).unwrap();
        assert_eq!(std::fs::read(dir.path().join("intervals.csv")).unwrap(), whole_csv);
        assert_eq!(std::fs::read(dir.path().join("latency.hlog")).unwrap(), whole_log);

        // A file shorter than the state says lost what it counts on.
        let state = IntervalState {
            start_ns: start,
            interval_ns: 1_000_000_000,
            current_start_ns: start,
            at_interval_start: histogram(),
        };
        let error = IntervalRecorder::reopen(dir.path(), state, 1 << 30, 0).err().unwrap();
        assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
    }
}
