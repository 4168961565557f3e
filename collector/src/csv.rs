//! `outputs.csv`: one row per output, written through a buffer with `itoa`/`ryu` so a row
//! costs no allocation. Floats use the shortest text that parses back to the same bits.

use cep_core::tick::OutputRecord;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

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
    pub rows: u64,
}

impl OutputsCsv {
    /// Creates the file at `path` and writes its header.
    pub fn create(path: &Path) -> io::Result<OutputsCsv> {
        OutputsCsv::new(BufWriter::with_capacity(1 << 20, File::create(path)?))
    }
}

impl<W: Write> OutputsCsv<W> {
    /// Rows written to `out`, after the header.
    pub fn new(mut out: W) -> io::Result<OutputsCsv<W>> {
        writeln!(out, "{OUTPUTS_HEADER}")?;
        Ok(OutputsCsv { out, ints: itoa::Buffer::new(), floats: ryu::Buffer::new(), rows: 0 })
    }

    #[inline]
    fn int(&mut self, value: u64) -> io::Result<()> {
        self.out.write_all(self.ints.format(value).as_bytes())?;
        self.out.write_all(b",")
    }

    #[inline]
    fn float(&mut self, value: f64) -> io::Result<()> {
        self.out.write_all(self.floats.format(value).as_bytes())?;
        self.out.write_all(b",")
    }

    /// Writes one output's row: `rule` is its query's name, `symbol` its symbol (UTF-8),
    /// `t_collector` when it arrived at the collector (ns).
    #[inline]
    pub fn write(&mut self, rule: &str, output: &OutputRecord, symbol: &[u8], t_collector: u64) -> io::Result<()> {
        self.out.write_all(rule.as_bytes())?;
        self.out.write_all(b",")?;
        self.out.write_all(symbol)?;
        self.out.write_all(b",")?;
        self.float(output.price)?;
        self.float(output.value)?;
        self.int(output.injector as u64)?;
        self.int(output.seq)?;
        let s = &output.stamps;
        for stamp in [s.t_inject, s.t_router_in, s.t_router_out, s.t_worker_in, s.t_engine_out] {
            // 0: the stamp does not apply (the output of a window the end of input closed
            // passed no injector or router); written empty.
            if stamp == 0 {
                self.out.write_all(b",")?;
            } else {
                self.int(stamp)?;
            }
        }
        self.out.write_all(self.ints.format(t_collector).as_bytes())?;
        self.out.write_all(b"\n")?;
        self.rows += 1;
        Ok(())
    }

    /// Flushes what is buffered and returns the sink with the number of rows written.
    pub fn finish(mut self) -> io::Result<(W, u64)> {
        self.out.flush()?;
        Ok((self.out, self.rows))
    }
}
