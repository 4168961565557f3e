//! What the run has done so far, once a second: `throughput.csv`, the run's ticks sent and
//! processed and its outputs over time (cumulative; a rate is the difference of two rows over
//! their time). The run's report.html draws throughput over time and marks collector restarts
//! from it.
//!
//! The figures are the ones the progress line shows: the router's and the workers' counts from
//! their progress reports (every half second), taken at one instant ([`crate::progress`]), the
//! row's time. A row is a picture, not an account: the run's accounts are summary.json's. A
//! collector that resumes appends (its incarnation column changes there); a write that fails
//! is logged once and the file left as it is, since nothing depends on it.

use crate::progress::Figures;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::Path;
use tracing::warn;

/// The file's name in the results folder.
pub const THROUGHPUT_FILE: &str = "throughput.csv";

/// Its first line: seconds since the run's start (collector time), ticks processed by all
/// workers so far, outputs they sent so far, which collector wrote the row (1, then 2 after a
/// restart, ...), and ticks sent so far (received by the router; empty before its first
/// report).
pub const THROUGHPUT_HEADER: &str = "elapsed_s,ticks_processed,outputs,collector_incarnation,ticks_sent";

/// Appends a row to `throughput.csv` each time it is asked.
pub struct ThroughputLog {
    file: Option<BufWriter<File>>,
    incarnation: u64,
}

impl ThroughputLog {
    /// A new run's file (`fresh`, written with its header) or a resumed collector's (appended
    /// to; made with a header if it is missing).
    pub fn open(out: &Path, fresh: bool, incarnation: u64) -> ThroughputLog {
        let path = out.join(THROUGHPUT_FILE);
        let opened = (|| {
            let header = fresh || !path.exists();
            let file = OpenOptions::new().create(true).append(!fresh).write(true).truncate(fresh).open(&path)?;
            let mut file = BufWriter::new(file);
            if header {
                writeln!(file, "{THROUGHPUT_HEADER}")?;
            }
            Ok::<_, std::io::Error>(file)
        })();
        let file = opened
            .inspect_err(|error| warn!(path = %path.display(), %error, "cannot write throughput.csv; the report will lack throughput over time"))
            .ok();
        ThroughputLog { file, incarnation }
    }

    /// One row: `elapsed_s` since the run's start, the cumulative counts.
    pub fn record(&mut self, elapsed_s: f64, figures: &Figures) {
        let Some(file) = &mut self.file else { return };
        let (processed, outputs) = (figures.processed_total(), figures.outputs);
        let sent = figures.sent.map(|sent| sent.to_string()).unwrap_or_default();
        let written = writeln!(file, "{elapsed_s:.3},{processed},{outputs},{},{sent}", self.incarnation)
            .and_then(|()| file.flush());
        if let Err(error) = written {
            warn!(%error, "cannot write throughput.csv; the report will lack throughput over time from here");
            self.file = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resumed_collector_appends_under_its_incarnation() {
        let figures = |sent: Option<u64>, processed: u64, outputs: u64| Figures {
            at_ns: 0,
            sent,
            processed: vec![processed / 2, processed / 2],
            outputs,
        };
        let dir = tempfile::tempdir().unwrap();
        let mut first = ThroughputLog::open(dir.path(), true, 1);
        first.record(1.0, &figures(None, 200_000, 500));
        first.record(2.0, &figures(Some(410_000), 400_000, 900));
        drop(first);
        let mut second = ThroughputLog::open(dir.path(), false, 2);
        second.record(3.5, &figures(Some(700_000), 700_000, 1_400));
        drop(second);
        let text = std::fs::read_to_string(dir.path().join(THROUGHPUT_FILE)).unwrap();
        assert_eq!(
            text,
            format!(
                "{THROUGHPUT_HEADER}\n1.000,200000,500,1,\n2.000,400000,900,1,410000\n3.500,700000,1400,2,700000\n"
            )
        );
        // A new run starts the file again.
        let mut again = ThroughputLog::open(dir.path(), true, 1);
        again.record(1.0, &figures(Some(2), 2, 1));
        drop(again);
        let text = std::fs::read_to_string(dir.path().join(THROUGHPUT_FILE)).unwrap();
        assert_eq!(text, format!("{THROUGHPUT_HEADER}\n1.000,2,1,1,2\n"));
    }
}
