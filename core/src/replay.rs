//! Tick files: what `--replay` sends and `cep engine --input` reads. One tick per line, in
//! the order they are to be sent; the timestamp is the tick's event time.
//!
//! - Fields are separated by `;`, `,` or a tab (the first of these in the first line).
//! - Without a header the columns are `symbol;price;timestamp` (OCTO's format), the
//!   timestamp in milliseconds unless told otherwise.
//! - A header line names the columns, in any order, any others ignored (case-insensitive):
//!   `symbol` (or `sym`, `ticker`), `price` (or `last`, `lastprice`, `value`, `spot`) and a
//!   timestamp: `t_event`, `event_time`, `timestamp`, `ts`, `time`, `t_inject` (the first of
//!   these names present wins), with an optional unit suffix `_ns`, `_us`, `_ms`, `_s`
//!   (`timestamp_ms`, `t_event_ns`). `injector` and `seq` columns, as a recorded `input.csv`
//!   has them, give each tick its stream and sequence number.
//! - Timestamps are non-negative decimal numbers (`1700000000123`, `12.5`), exact to the
//!   nanosecond, below 2^63 ns (the year 2262).
//! - Blank lines and lines starting with `#` are skipped.

use std::collections::HashMap;
use std::path::Path;

/// The unit of a file's timestamps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeUnit {
    /// Seconds (`s`).
    Seconds,
    /// Milliseconds (`ms`): OCTO's unit, and the default when neither the header nor the
    /// caller names one.
    Millis,
    /// Microseconds (`us`).
    Micros,
    /// Nanoseconds (`ns`), the unit event times are kept in.
    Nanos,
}

impl TimeUnit {
    /// Nanoseconds in one of this unit.
    pub fn nanos(self) -> u64 {
        match self {
            TimeUnit::Seconds => 1_000_000_000,
            TimeUnit::Millis => 1_000_000,
            TimeUnit::Micros => 1_000,
            TimeUnit::Nanos => 1,
        }
    }

    /// The unit's short name, as `--time-unit` takes it.
    pub fn name(self) -> &'static str {
        match self {
            TimeUnit::Seconds => "s",
            TimeUnit::Millis => "ms",
            TimeUnit::Micros => "us",
            TimeUnit::Nanos => "ns",
        }
    }

    /// `s`, `ms`, `us` or `ns`.
    pub fn parse(text: &str) -> Result<TimeUnit, String> {
        match text {
            "s" => Ok(TimeUnit::Seconds),
            "ms" => Ok(TimeUnit::Millis),
            "us" => Ok(TimeUnit::Micros),
            "ns" => Ok(TimeUnit::Nanos),
            other => Err(format!("`{other}` is not a time unit (s, ms, us, ns)")),
        }
    }
}

/// One tick of a file.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FileTick {
    /// Index into [`TickFile::names`].
    pub symbol: u32,
    /// The price, positive and finite.
    pub price: f64,
    /// Event time, ns.
    pub t_event: u64,
    /// Stream and sequence number, when the file records them (a recorded `input.csv`).
    pub origin: Option<(u32, u64)>,
}

/// A parsed tick file.
#[derive(Clone, Debug, PartialEq)]
pub struct TickFile {
    /// Symbols in order of first appearance.
    pub names: Vec<String>,
    /// The ticks in file order (the order they are sent in).
    pub ticks: Vec<FileTick>,
    /// The unit the timestamps were read in.
    pub unit: TimeUnit,
}

impl TickFile {
    /// Which of `connections` streams each symbol goes to: in order of first appearance,
    /// round robin, so every symbol belongs to one stream.
    pub fn stream_of(symbol: u32, connections: usize) -> usize {
        symbol as usize % connections
    }
}

/// Where the columns are.
struct Columns {
    symbol: usize,
    price: usize,
    time: usize,
    origin: Option<(usize, usize)>,
    unit: Option<TimeUnit>,
    /// The header's name of the time column, for messages.
    time_name: Option<String>,
}

const SYMBOL_NAMES: &[&str] = &["symbol", "sym", "ticker"];
const PRICE_NAMES: &[&str] = &["price", "last", "lastprice", "value", "spot"];
const TIME_NAMES: &[&str] = &["t_event", "event_time", "timestamp", "ts", "time", "t_inject"];

/// A time column's name without its unit suffix, and the unit.
fn split_unit(name: &str) -> (&str, Option<TimeUnit>) {
    for (suffix, unit) in
        [("_ns", TimeUnit::Nanos), ("_us", TimeUnit::Micros), ("_ms", TimeUnit::Millis), ("_s", TimeUnit::Seconds)]
    {
        if let Some(base) = name.strip_suffix(suffix) {
            if TIME_NAMES.contains(&base) {
                return (base, Some(unit));
            }
        }
    }
    (name, None)
}

impl Columns {
    /// OCTO's `symbol;price;timestamp`.
    fn octo() -> Columns {
        Columns { symbol: 0, price: 1, time: 2, origin: None, unit: None, time_name: None }
    }

    /// The columns a header names, or why it cannot be used.
    fn from_header(line: &str, fields: &[&str]) -> Result<Columns, String> {
        let names: Vec<String> = fields.iter().map(|f| f.trim().to_ascii_lowercase()).collect();
        let find = |wanted: &[&str]| wanted.iter().find_map(|w| names.iter().position(|n| n == w));
        let symbol = find(SYMBOL_NAMES);
        let price = find(PRICE_NAMES);
        let time = TIME_NAMES.iter().find_map(|wanted| names.iter().position(|n| split_unit(n).0 == *wanted));
        let (Some(symbol), Some(price), Some(time)) = (symbol, price, time) else {
            return Err(format!(
                "the header `{}` must name a symbol column ({}), a price column ({}) and a timestamp column ({}, with an optional unit suffix _s, _ms, _us, _ns)",
                line,
                SYMBOL_NAMES.join(", "),
                PRICE_NAMES.join(", "),
                TIME_NAMES.join(", ")
            ));
        };
        let origin = match (names.iter().position(|n| n == "injector"), names.iter().position(|n| n == "seq")) {
            (Some(injector), Some(seq)) => Some((injector, seq)),
            _ => None,
        };
        Ok(Columns {
            symbol,
            price,
            time,
            origin,
            unit: split_unit(&names[time]).1,
            time_name: Some(names[time].clone()),
        })
    }

    fn width(&self) -> usize {
        [self.symbol, self.price, self.time, self.origin.map_or(0, |o| o.0), self.origin.map_or(0, |o| o.1)]
            .into_iter()
            .max()
            .unwrap_or(0)
            + 1
    }
}

/// A timestamp in `unit` as ns, exactly: digits with an optional fraction.
pub fn parse_timestamp(text: &str, unit: TimeUnit) -> Result<u64, String> {
    let bad = || format!("timestamp `{text}` is not a non-negative decimal number");
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() && fraction.is_empty() || !digits(whole) || !digits(fraction) {
        return Err(bad());
    }
    let too_large = || format!("timestamp `{text}` {} is beyond the year 2262 (2^63 ns)", unit.name());
    let whole: u64 = if whole.is_empty() { 0 } else { whole.parse().map_err(|_| too_large())? };
    let mut ns = whole.checked_mul(unit.nanos()).ok_or_else(too_large)?;
    // Each fraction digit is worth a tenth of the one before; beyond the nanosecond, cut.
    let mut place = unit.nanos();
    for digit in fraction.bytes() {
        place /= 10;
        ns = ns.checked_add(u64::from(digit - b'0') * place).ok_or_else(too_large)?;
    }
    if ns > i64::MAX as u64 {
        return Err(too_large());
    }
    Ok(ns)
}

/// Reads a tick file whole. `unit` overrides the default unit (ms) of a file whose header
/// does not name one; a header that names another unit is an error. Errors name the file and
/// line. Its memory grows with the file: a replay reads it as a stream ([`TickReader`]).
pub fn read(path: &Path, unit: Option<TimeUnit>) -> Result<TickFile, String> {
    let mut reader = TickReader::open(path, unit, None)?;
    let mut ticks = Vec::new();
    while let Some(tick) = reader.next_tick()? {
        ticks.push(tick);
    }
    let unit = reader.parser.unit();
    Ok(TickFile { names: reader.parser.names, ticks, unit })
}

/// [`read`] on text; errors carry their line number.
pub fn parse(text: &str, unit: Option<TimeUnit>) -> Result<TickFile, (Option<usize>, String)> {
    let mut parser = TickParser::new(unit);
    let mut ticks = Vec::new();
    for (number, line) in text.lines().enumerate() {
        if let Some(tick) = parser.line(line).map_err(|message| (Some(number + 1), message))? {
            ticks.push(tick);
        }
    }
    if ticks.is_empty() {
        return Err((None, NO_TICKS.into()));
    }
    let unit = parser.unit();
    Ok(TickFile { names: parser.names, ticks, unit })
}

const NO_TICKS: &str = "no ticks in the file";

/// The longest line of a tick file.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// Tick lines, one at a time: the format is found on the first line that is not blank or a
/// comment (a header, or OCTO's columns), and symbols are numbered in order of first
/// appearance. Memory grows with the symbols, not the lines.
pub struct TickParser {
    unit: Option<TimeUnit>,
    layout: Option<(char, Columns)>,
    chosen: Option<TimeUnit>,
    names: Vec<String>,
    index: HashMap<String, u32>,
}

impl TickParser {
    /// A parser with `unit` for a file whose header names none (default: ms).
    pub fn new(unit: Option<TimeUnit>) -> TickParser {
        TickParser { unit, layout: None, chosen: unit, names: Vec::new(), index: HashMap::new() }
    }

    /// The symbols seen so far, in order of first appearance: a tick's `symbol` indexes them.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The unit the timestamps are read in.
    pub fn unit(&self) -> TimeUnit {
        self.chosen.unwrap_or(TimeUnit::Millis)
    }

    /// The tick on the next line (`None` for a header, a blank or a comment line), or what is
    /// wrong with it.
    pub fn line(&mut self, line: &str) -> Result<Option<FileTick>, String> {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            return Ok(None);
        }
        let (separator, columns) = match &self.layout {
            Some(layout) => layout,
            None => {
                let Some(separator) = [';', ',', '\t'].into_iter().find(|c| line.contains(*c)) else {
                    return Err(format!("no field separator (`;`, `,` or a tab) in `{line}`"));
                };
                let fields: Vec<&str> = line.split(separator).collect();
                // A first line whose price field is not a number is a header.
                let header = fields.get(1).is_none_or(|price| price.trim().parse::<f64>().is_err());
                let columns = if header { Columns::from_header(line, &fields)? } else { Columns::octo() };
                if let (Some(named), Some(given)) = (columns.unit, self.unit) {
                    if named != given {
                        return Err(format!(
                            "the header names the unit {} (column `{}`) but the unit given is {}",
                            named.name(),
                            columns.time_name.as_deref().unwrap_or_default(),
                            given.name()
                        ));
                    }
                }
                self.chosen = columns.unit.or(self.unit);
                self.layout = Some((separator, columns));
                if header {
                    return Ok(None);
                }
                self.layout.as_ref().expect("just set")
            }
        };
        let fields: Vec<&str> = line.split(*separator).map(str::trim).collect();
        // A header may name more columns than are used; without one a line is exactly OCTO's.
        let width_ok =
            if columns.time_name.is_some() { fields.len() >= columns.width() } else { fields.len() == columns.width() };
        if !width_ok {
            let expected = if columns.time_name.is_some() {
                format!("{} fields as the header names", columns.width())
            } else {
                "`symbol;price;timestamp`".to_string()
            };
            return Err(format!("expected {expected}, got `{line}`"));
        }
        let symbol = fields[columns.symbol];
        if symbol.is_empty() {
            return Err("empty symbol".into());
        }
        if symbol.len() > crate::wire::MAX_SYMBOL_BYTES {
            let limit = crate::wire::MAX_SYMBOL_BYTES;
            return Err(format!("the symbol takes {} bytes, more than the {limit} a symbol may", symbol.len()));
        }
        let price_text = fields[columns.price];
        let price: f64 = price_text.parse().map_err(|_| format!("price `{price_text}` is not a number"))?;
        if !(price.is_finite() && price > 0.0) {
            return Err(format!("price {price} must be a positive finite number"));
        }
        let t_event = parse_timestamp(fields[columns.time], self.chosen.unwrap_or(TimeUnit::Millis))?;
        let origin = match columns.origin {
            Some((injector, seq)) => {
                let injector = fields[injector]
                    .parse()
                    .map_err(|_| format!("injector `{}` is not a stream id", fields[injector]))?;
                let seq = fields[seq].parse().map_err(|_| format!("seq `{}` is not a whole number", fields[seq]))?;
                Some((injector, seq))
            }
            None => None,
        };
        let id = match self.index.get(symbol) {
            Some(&id) => id,
            None => {
                self.names.push(symbol.to_string());
                self.index.insert(symbol.to_string(), self.names.len() as u32 - 1);
                self.names.len() as u32 - 1
            }
        };
        Ok(Some(FileTick { symbol: id, price, t_event, origin }))
    }
}

/// A tick file read as a stream, a line at a time: memory does not grow with the file. Errors
/// name the file and line.
pub struct TickReader {
    path: std::path::PathBuf,
    file: std::io::BufReader<std::fs::File>,
    parser: TickParser,
    line: Vec<u8>,
    number: usize,
    /// Ticks read so far.
    read: u64,
    /// Stops after this many ticks (`--count`).
    limit: Option<u64>,
}

impl TickReader {
    /// Opens the file at `path` (`unit` as for [`read`]), to read at most `limit` ticks.
    pub fn open(path: &Path, unit: Option<TimeUnit>, limit: Option<u64>) -> Result<TickReader, String> {
        let file = std::fs::File::open(path)
            .map_err(|error| format!("{}: cannot read it: {}", path.display(), crate::io_text::plain(&error)))?;
        Ok(TickReader {
            path: path.to_path_buf(),
            file: std::io::BufReader::with_capacity(1 << 16, file),
            parser: TickParser::new(unit),
            line: Vec::new(),
            number: 0,
            read: 0,
            limit,
        })
    }

    /// The symbols seen so far (a tick's `symbol` indexes them).
    pub fn names(&self) -> &[String] {
        self.parser.names()
    }

    /// The next tick; `None` at the end of the file (or of `limit`). A file without a tick is
    /// an error.
    pub fn next_tick(&mut self) -> Result<Option<FileTick>, String> {
        use std::io::{BufRead, Read};
        if self.limit.is_some_and(|limit| self.read >= limit) {
            return Ok(None);
        }
        loop {
            self.line.clear();
            let at = |number: usize, message: String| format!("{}:{number}: {message}", self.path.display());
            // A line is bounded: a file without line ends must not be read whole.
            let mut bounded = (&mut self.file).take(MAX_LINE_BYTES as u64 + 1);
            let taken = bounded.read_until(b'\n', &mut self.line).map_err(|error| {
                format!("{}: cannot read it: {}", self.path.display(), crate::io_text::plain(&error))
            })?;
            if self.line.len() > MAX_LINE_BYTES {
                return Err(at(self.number + 1, format!("a line longer than {MAX_LINE_BYTES} bytes")));
            }
            if taken == 0 {
                if self.read == 0 {
                    return Err(format!("{}: {NO_TICKS}", self.path.display()));
                }
                return Ok(None);
            }
            self.number += 1;
            let text = std::str::from_utf8(&self.line).map_err(|_| at(self.number, "not UTF-8 text".into()))?;
            if let Some(tick) = self.parser.line(text).map_err(|message| at(self.number, message))? {
                self.read += 1;
                return Ok(Some(tick));
            }
        }
    }
}

/// What one pass over a tick file found, keeping nothing but counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scan {
    /// Ticks (at most the limit asked for).
    pub ticks: u64,
    /// Ticks per stream, the symbols split over `connections` streams
    /// ([`TickFile::stream_of`]).
    pub per_stream: Vec<u64>,
}

/// Checks the file at `path` whole, in one pass that keeps only counts (and the symbols'
/// names): every line as a replay would read it, the first error named by file and line.
pub fn scan(path: &Path, unit: Option<TimeUnit>, connections: usize, limit: Option<u64>) -> Result<Scan, String> {
    let mut reader = TickReader::open(path, unit, limit)?;
    let connections = connections.max(1);
    let mut per_stream = vec![0; connections];
    while let Some(tick) = reader.next_tick()? {
        per_stream[TickFile::stream_of(tick.symbol, connections)] += 1;
    }
    Ok(Scan { ticks: reader.read, per_stream })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn octo_lines_are_milliseconds_by_default() {
        let file = parse("# comment\nAAA;10.5;1000\n\nBBB;20;1001.25\nAAA;10.6;1002\n", None).unwrap();
        assert_eq!(file.names, vec!["AAA", "BBB"]);
        assert_eq!(file.unit, TimeUnit::Millis);
        let times: Vec<u64> = file.ticks.iter().map(|t| t.t_event).collect();
        assert_eq!(times, vec![1_000_000_000, 1_001_250_000, 1_002_000_000]);
        assert_eq!(file.ticks[1], FileTick { symbol: 1, price: 20.0, t_event: 1_001_250_000, origin: None });
        let seconds = parse("AAA;10.5;2\n", Some(TimeUnit::Seconds)).unwrap();
        assert_eq!(seconds.ticks[0].t_event, 2_000_000_000);
    }

    #[test]
    fn a_header_names_columns_and_unit() {
        let file = parse("time_us,venue,price,symbol\n15,X,1.5,AAA\n16,X,2.5,BBB\n", None).unwrap();
        assert_eq!(file.unit, TimeUnit::Micros);
        assert_eq!(file.ticks[1], FileTick { symbol: 1, price: 2.5, t_event: 16_000, origin: None });
        // A recorded input.csv: the event time column wins over the send time.
        let recorded = parse("injector,seq,symbol,price,t_inject_ns,t_event_ns\n1,7,S1,3.0,900,5\n", None).unwrap();
        assert_eq!(recorded.ticks[0], FileTick { symbol: 0, price: 3.0, t_event: 5, origin: Some((1, 7)) });
        let older = parse("injector,seq,symbol,price,t_inject_ns\n0,0,S1,3.0,900\n", None).unwrap();
        assert_eq!(older.ticks[0].t_event, 900);
        // Tabs.
        let tabs = parse("SYMBOL\tPRICE\tTS_S\nAAA\t1\t3\n", None).unwrap();
        assert_eq!(tabs.ticks[0].t_event, 3_000_000_000);
    }

    #[test]
    fn errors_name_the_line() {
        let error = |text: &str, unit| parse(text, unit).unwrap_err();
        assert_eq!(error("AAA;1;5\nBBB;NaN;6\n", None), (Some(2), "price NaN must be a positive finite number".into()));
        let long = format!("AAA;1;5\n{};1;6\n", "S".repeat(256));
        assert_eq!(error(&long, None), (Some(2), "the symbol takes 256 bytes, more than the 255 a symbol may".into()));
        assert_eq!(error("AAA;1;5\nBBB;2\n", None).0, Some(2));
        assert_eq!(
            error("AAA;1;5\nBBB;2;6;extra\n", None),
            (Some(2), "expected `symbol;price;timestamp`, got `BBB;2;6;extra`".into())
        );
        assert_eq!(error("AAA;1;-5\n", None), (Some(1), "timestamp `-5` is not a non-negative decimal number".into()));
        assert!(error("AAA;1;99999999999999999\n", None).1.contains("beyond the year 2262"));
        assert!(error("name;when\nA;1\n", None).1.starts_with("the header `name;when` must name a symbol column"));
        assert_eq!(
            error("symbol,price,ts_ns\nA,1,2\n", Some(TimeUnit::Millis)),
            (Some(1), "the header names the unit ns (column `ts_ns`) but the unit given is ms".into())
        );
        assert_eq!(error("# nothing\n\n", None), (None, "no ticks in the file".into()));
        assert_eq!(
            error("AAA 1.5 1000\n", None),
            (Some(1), "no field separator (`;`, `,` or a tab) in `AAA 1.5 1000`".into())
        );
    }

    #[test]
    fn timestamps_are_exact() {
        assert_eq!(parse_timestamp("1700000000123", TimeUnit::Millis), Ok(1_700_000_000_123_000_000));
        assert_eq!(parse_timestamp("0.000000001", TimeUnit::Seconds), Ok(1));
        assert_eq!(parse_timestamp(".5", TimeUnit::Seconds), Ok(500_000_000));
        assert_eq!(parse_timestamp("1.23456789", TimeUnit::Micros), Ok(1_234));
        assert!(parse_timestamp(".", TimeUnit::Seconds).is_err());
        assert!(parse_timestamp("1e3", TimeUnit::Seconds).is_err());
        assert!(parse_timestamp("9223372037", TimeUnit::Seconds).is_err());
        assert_eq!(parse_timestamp("9223372036", TimeUnit::Seconds), Ok(9_223_372_036_000_000_000));
    }

    #[test]
    fn a_reader_streams_the_ticks_read_gives_and_a_scan_counts_them_by_stream() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ticks.csv");
        std::fs::write(&path, "# c\nAAA;10.5;1000\nBBB;20;1001\n\nAAA;10.6;1002\nCCC;1;1003\n").unwrap();
        let whole = read(&path, None).unwrap();
        let mut reader = TickReader::open(&path, None, None).unwrap();
        let streamed: Vec<FileTick> = std::iter::from_fn(|| reader.next_tick().unwrap()).collect();
        assert_eq!((streamed, reader.names()), (whole.ticks.clone(), whole.names.as_slice()));
        let mut limited = TickReader::open(&path, None, Some(2)).unwrap();
        assert_eq!(std::iter::from_fn(|| limited.next_tick().unwrap()).count(), 2);
        // AAA and CCC (symbols 0 and 2) on stream 0, BBB on stream 1.
        assert_eq!(scan(&path, None, 2, None).unwrap(), Scan { ticks: 4, per_stream: vec![3, 1] });
        assert_eq!(scan(&path, None, 2, Some(2)).unwrap(), Scan { ticks: 2, per_stream: vec![1, 1] });
        std::fs::write(&path, "AAA;10.5;1000\nAAA;x;1001\n").unwrap();
        let error = scan(&path, None, 1, None).unwrap_err();
        assert_eq!(error, format!("{}:2: price `x` is not a number", path.display()));
        std::fs::write(&path, format!("AAA;1;1\n{}", "x".repeat(MAX_LINE_BYTES + 1))).unwrap();
        let error = scan(&path, None, 1, None).unwrap_err();
        assert_eq!(error, format!("{}:2: a line longer than {MAX_LINE_BYTES} bytes", path.display()));
        std::fs::write(&path, "# nothing\n").unwrap();
        assert_eq!(scan(&path, None, 1, None).unwrap_err(), format!("{}: no ticks in the file", path.display()));
    }
}
