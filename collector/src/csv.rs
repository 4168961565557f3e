//! `outputs.csv`: one row per output, written through a buffer with `itoa`/`ryu` so a row
//! costs no allocation. Floats use the shortest text that parses back to the same bits.

use cep_core::tick::OutputRecord;
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Seek, SeekFrom, Write};
use std::path::Path;

/// Which outputs go to `outputs.csv`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum CsvMode {
    /// Every output, those of queries that emit on every tick included (volatility): for
    /// correctness runs.
    All,
    /// Outputs of queries that emit on a condition (HAVING, or WHERE on the event: perc and
    /// trend), not those without one (volatility on every tick, a tumbling window's every pane).
    Alerts,
    /// No rows (header only): for throughput runs.
    None,
}

/// The first line of `outputs.csv`: the output, its tick's place in its stream, then every
/// hop's timestamp in ns (empty where the hop does not apply).
pub const OUTPUTS_HEADER: &str =
    "rule,symbol,price,value,injector,seq,t_inject_ns,t_router_in_ns,t_router_out_ns,t_worker_in_ns,t_engine_out_ns,t_collector_ns";

/// Writes outputs.csv rows to `W` (a buffered file, or memory in tests and the harness).
pub struct OutputsCsv<W: Write = BufWriter<File>> {
    out: W,
    ints: itoa::Buffer,
    floats: ryu::Buffer,
    /// Rows written so far, the header not counted.
    rows: u64,
    /// Bytes written to `out` (see [`OutputsCsv::bytes_written`]): counted here rather than
    /// read off the file, so it works for any sink and costs no system call.
    len: u64,
    /// No row is written once `len` reaches this (`--outputs-max-size`; `u64::MAX`: none).
    limit: u64,
    /// Rows not written because the file reached `limit`.
    not_written: u64,
}

/// Opens the existing file at `path` to write on after its first `len` bytes, cutting off
/// what follows (written after a saved state was taken, or a row torn by a crash). A file
/// shorter than `len` lost what the saved state counts on: an error.
pub(crate) fn reopen_truncated(path: &Path, len: u64) -> io::Result<File> {
    let mut file = OpenOptions::new().write(true).open(path)?;
    let found = file.metadata()?.len();
    if found < len {
        let message = format!("{}: {found} bytes, but the saved state counts {len}", path.display());
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, message));
    }
    file.set_len(len)?;
    file.seek(SeekFrom::Start(len))?;
    Ok(file)
}

impl OutputsCsv {
    /// Creates the file at `path` and writes its header.
    pub fn create(path: &Path) -> io::Result<OutputsCsv> {
        OutputsCsv::new(BufWriter::with_capacity(1 << 20, File::create(path)?))
    }

    /// Goes on with the file at `path`, which held `rows` rows in its first `len` bytes when
    /// the state was saved ([`Self::rows`] and [`Self::bytes_written`] after a
    /// [`Self::flush`]): what follows is cut off, and rows are written on from there.
    pub fn reopen(path: &Path, rows: u64, len: u64) -> io::Result<OutputsCsv> {
        Ok(OutputsCsv::resume(BufWriter::with_capacity(1 << 20, reopen_truncated(path, len)?), rows, len))
    }
}

/// Writes `bytes` to `out`, counting them in `len`.
#[inline]
fn put<W: Write>(out: &mut W, len: &mut u64, bytes: &[u8]) -> io::Result<()> {
    out.write_all(bytes)?;
    *len += bytes.len() as u64;
    Ok(())
}

impl<W: Write> OutputsCsv<W> {
    /// Rows written to `out`, after the header.
    pub fn new(mut out: W) -> io::Result<OutputsCsv<W>> {
        let mut len = 0;
        put(&mut out, &mut len, OUTPUTS_HEADER.as_bytes())?;
        put(&mut out, &mut len, b"\n")?;
        Ok(OutputsCsv::resume(out, 0, len))
    }

    /// Rows written to `out` after what it holds (`rows` rows, the header before them, `len`
    /// bytes in all): no header.
    pub fn resume(out: W, rows: u64, len: u64) -> OutputsCsv<W> {
        OutputsCsv {
            out,
            ints: itoa::Buffer::new(),
            floats: ryu::Buffer::new(),
            rows,
            len,
            limit: u64::MAX,
            not_written: 0,
        }
    }

    /// Rows written so far, the header not counted (those of the run before a resume included).
    #[inline]
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Bytes written to the sink: from the file's start for one made by `new`, `create` or
    /// `reopen` (after [`Self::flush`], the file's length), from the resume for one made by
    /// [`Self::resume`]. Buffered bytes count: flush first.
    #[inline]
    pub fn bytes_written(&self) -> u64 {
        self.len
    }

    /// Flushes the sink.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The sink, e.g. to sync the file behind it.
    pub fn writer(&self) -> &W {
        &self.out
    }

    #[inline]
    fn int(&mut self, value: u64) -> io::Result<()> {
        put(&mut self.out, &mut self.len, self.ints.format(value).as_bytes())?;
        put(&mut self.out, &mut self.len, b",")
    }

    #[inline]
    fn float(&mut self, value: f64) -> io::Result<()> {
        put(&mut self.out, &mut self.len, self.floats.format(value).as_bytes())?;
        put(&mut self.out, &mut self.len, b",")
    }

    /// Takes no row once the file holds `max_bytes` (0: no limit); `not_written`: the rows it
    /// already did not take (a resumed collector's, from its saved state).
    pub fn bounded(mut self, max_bytes: u64, not_written: u64) -> OutputsCsv<W> {
        self.limit = if max_bytes == 0 { u64::MAX } else { max_bytes };
        self.not_written = not_written;
        self
    }

    /// Rows not written because the file reached its bound.
    pub fn not_written(&self) -> u64 {
        self.not_written
    }

    /// Writes one output's row: `rule` is its query's name, `symbol` its symbol (UTF-8),
    /// `t_collector` when it arrived at the collector (ns). A file at its bound takes none:
    /// the row is counted instead.
    #[inline]
    pub fn write(&mut self, rule: &str, output: &OutputRecord, symbol: &[u8], t_collector: u64) -> io::Result<()> {
        if self.len >= self.limit {
            self.skip_row();
            return Ok(());
        }
        put(&mut self.out, &mut self.len, rule.as_bytes())?;
        put(&mut self.out, &mut self.len, b",")?;
        put(&mut self.out, &mut self.len, symbol)?;
        put(&mut self.out, &mut self.len, b",")?;
        self.float(output.price)?;
        self.float(output.value)?;
        self.int(output.injector as u64)?;
        self.int(output.seq)?;
        let s = &output.stamps;
        for stamp in [s.t_inject, s.t_router_in, s.t_router_out, s.t_worker_in, s.t_engine_out] {
            // 0: the stamp does not apply (the output of a window the end of input closed
            // passed no injector or router); written empty.
            if stamp == 0 {
                put(&mut self.out, &mut self.len, b",")?;
            } else {
                self.int(stamp)?;
            }
        }
        put(&mut self.out, &mut self.len, self.ints.format(t_collector).as_bytes())?;
        put(&mut self.out, &mut self.len, b"\n")?;
        self.rows += 1;
        Ok(())
    }

    /// Counts a row the file no longer takes, saying so the first time (out of the inlined
    /// hot path).
    #[cold]
    fn skip_row(&mut self) {
        if self.not_written == 0 {
            tracing::warn!(
                bytes = self.len,
                rows = self.rows,
                "outputs.csv reached --outputs-max-size: it takes no more rows (they are counted in outputs_not_written)"
            );
        }
        self.not_written += 1;
    }

    /// Flushes what is buffered and returns the sink with the number of rows written.
    pub fn finish(mut self) -> io::Result<(W, u64)> {
        self.out.flush()?;
        Ok((self.out, self.rows))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cep_core::tick::Stamps;

    fn output(i: u64) -> OutputRecord {
        OutputRecord {
            rule: 0,
            symbol: 0..0,
            price: 100.0 + i as f64 / 8.0,
            value: -(i as f64) * 0.1,
            injector: (i % 3) as u32,
            seq: i,
            stamps: Stamps {
                t_inject: 1_000 + i,
                t_router_in: 2_000 + i,
                t_router_out: if i % 5 == 0 { 0 } else { 3_000 + i },
                t_worker_in: 4_000 + i,
                t_engine_out: 5_000 + i,
            },
        }
    }

    fn write_rows<W: Write>(csv: &mut OutputsCsv<W>, rows: std::ops::Range<u64>) {
        for i in rows {
            let symbol = format!("S{}", i % 7);
            csv.write(if i % 2 == 0 { "perc" } else { "trend" }, &output(i), symbol.as_bytes(), 9_000 + i).unwrap();
        }
    }

    #[test]
    fn a_reopened_file_ends_with_the_rows_of_an_uninterrupted_run() {
        let dir = tempfile::tempdir().unwrap();
        let whole_path = dir.path().join("whole.csv");
        let mut whole = OutputsCsv::create(&whole_path).unwrap();
        write_rows(&mut whole, 0..300);
        assert_eq!(whole.finish().unwrap().1, 300);
        let whole = std::fs::read(&whole_path).unwrap();

        // Saved after 120 rows; 50 more and half a row reached the file before the crash.
        let path = dir.path().join("outputs.csv");
        let mut csv = OutputsCsv::create(&path).unwrap();
        write_rows(&mut csv, 0..120);
        csv.flush().unwrap();
        let (rows, len) = (csv.rows(), csv.bytes_written());
        assert_eq!((rows, len), (120, std::fs::metadata(&path).unwrap().len()));
        write_rows(&mut csv, 120..170);
        csv.flush().unwrap();
        csv.writer().get_ref().write_all(b"perc,S3,101.5,-1").unwrap();
        drop(csv);

        let mut csv = OutputsCsv::reopen(&path, rows, len).unwrap();
        assert_eq!((csv.rows(), csv.bytes_written()), (120, len));
        write_rows(&mut csv, 120..300);
        csv.flush().unwrap();
        assert_eq!(csv.bytes_written(), whole.len() as u64);
        assert_eq!(csv.finish().unwrap().1, 300);
        let resumed = std::fs::read(&path).unwrap();
        assert_eq!(String::from_utf8(resumed).unwrap(), String::from_utf8(whole.clone()).unwrap());

        // In memory: the same from a copy of what the sink held.
        let mut first = OutputsCsv::new(Vec::new()).unwrap();
        write_rows(&mut first, 0..120);
        let mut resumed = OutputsCsv::resume(first.writer().clone(), first.rows(), first.bytes_written());
        write_rows(&mut resumed, 120..300);
        assert_eq!(resumed.finish().unwrap(), (whole, 300));

        // A bounded file stops after the row that reaches its bound and counts the rest.
        let mut bounded = OutputsCsv::new(Vec::new()).unwrap().bounded(1_000, 0);
        write_rows(&mut bounded, 0..300);
        let written = bounded.rows();
        assert!(written > 0 && written < 300 && bounded.bytes_written() >= 1_000);
        assert!(bounded.bytes_written() < 1_000 + 200, "one row past the bound at most");
        assert_eq!(bounded.not_written(), 300 - written);
        let (text, rows) = bounded.finish().unwrap();
        assert_eq!((rows, String::from_utf8(text).unwrap().lines().count() as u64), (written, written + 1));
        // Resumed, it goes on counting.
        let mut resumed = OutputsCsv::resume(Vec::new(), written, 1_000).bounded(1_000, 300 - written);
        write_rows(&mut resumed, 0..10);
        assert_eq!(resumed.not_written(), 310 - written);

        // A file shorter than the saved length lost rows the state counts.
        let error = OutputsCsv::reopen(&path, 300, 1 << 30).err().unwrap();
        assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
    }
}
