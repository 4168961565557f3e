//! Where a stream's ticks come from: the reference GBM model or a replay file, split so that
//! each symbol belongs to exactly one stream.

use cep_core::gbm::{connection_symbols, symbol_names, GbmStream};
use cep_core::replay::{FileTick, TickFile, TickReader, TimeUnit};
use std::path::Path;
use std::sync::Arc;

/// One tick of a stream: a symbol (index into the names), its price, and its event time
/// when the source has one (a replay); a generated tick's event time is its intended send time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SourceTick {
    /// Index into the sources' symbol names.
    pub symbol: u32,
    /// The price.
    pub price: f64,
    /// Event time (ns) from a replay file; `None` for a generated tick.
    pub t_event: Option<u64>,
}

/// The ticks of one stream.
pub enum StreamSource {
    /// The reference model, for the stream's symbols.
    Model {
        /// The model's ticks of the stream's symbols.
        stream: GbmStream,
        /// With `--count`: the stream ends at the first tick whose index in the whole model's
        /// stream is this or more.
        below_index: Option<u64>,
    },
    /// The stream's ticks of a replay file, read as they are sent: memory does not grow with
    /// the file. Each stream reads the whole file and keeps its own symbols' ticks.
    Replay(Box<ReplayStream>),
}

/// One stream's reading of a replay file.
pub struct ReplayStream {
    reader: TickReader,
    /// This stream, of `connections`.
    stream: usize,
    connections: usize,
    /// The stream's next tick, read ahead (its event time paces it).
    next: Option<FileTick>,
    /// A bad line met on the way: the stream ends there.
    error: Option<String>,
}

impl ReplayStream {
    /// Stream `stream` of `connections` over `reader`.
    pub fn new(reader: TickReader, stream: usize, connections: usize) -> ReplayStream {
        let mut replay = ReplayStream { reader, stream, connections, next: None, error: None };
        replay.read_ahead();
        replay
    }

    /// Reads this stream's next tick into `next`.
    fn read_ahead(&mut self) {
        self.next = None;
        while self.error.is_none() {
            match self.reader.next_tick() {
                Ok(Some(tick)) if TickFile::stream_of(tick.symbol, self.connections) == self.stream => {
                    self.next = Some(tick);
                    return;
                }
                Ok(Some(_)) => {}
                Ok(None) => return,
                Err(error) => self.error = Some(error),
            }
        }
    }
}

impl StreamSource {
    /// The stream's next tick; `None` when it has sent all.
    #[inline]
    pub fn next_tick(&mut self) -> Option<SourceTick> {
        match self {
            StreamSource::Model { stream, below_index } => {
                let tick = stream.next()?;
                if below_index.is_some_and(|limit| tick.index >= limit) {
                    return None;
                }
                Some(SourceTick { symbol: tick.symbol as u32, price: tick.price, t_event: None })
            }
            StreamSource::Replay(replay) => {
                let tick = replay.next?;
                replay.read_ahead();
                Some(SourceTick { symbol: tick.symbol, price: tick.price, t_event: Some(tick.t_event) })
            }
        }
    }

    /// Whether a replay has read its stream's last tick (the model's end is its limit).
    #[inline]
    pub fn replay_ended(&self) -> bool {
        matches!(self, StreamSource::Replay(replay) if replay.next.is_none())
    }

    /// The name of `symbol`: from `names` (the model's), or as the replay file spells it.
    #[inline]
    pub fn name<'a>(&'a self, symbol: u32, names: &'a [String]) -> &'a str {
        match self {
            StreamSource::Model { .. } => &names[symbol as usize],
            StreamSource::Replay(replay) => &replay.reader.names()[symbol as usize],
        }
    }

    /// The bad line a replay met, which ended its stream early.
    pub fn error(&self) -> Option<&str> {
        match self {
            StreamSource::Model { .. } => None,
            StreamSource::Replay(replay) => replay.error.as_deref(),
        }
    }

    /// The event time of the tick [`Self::next_tick`] returns next, for a replay.
    #[inline]
    pub fn next_event_time(&self) -> Option<u64> {
        match self {
            StreamSource::Model { .. } => None,
            StreamSource::Replay(replay) => replay.next.map(|tick| tick.t_event),
        }
    }
}

/// Symbol names and one source per connection.
pub struct Sources {
    /// The model's symbol names, which a generated tick's `symbol` indexes (a replay's are
    /// its streams' own: [`StreamSource::name`]; empty here).
    pub names: Arc<Vec<String>>,
    /// One source per stream (injector connection).
    pub streams: Vec<StreamSource>,
    /// Each stream's share of all ticks (for splitting the rate).
    pub shares: Vec<f64>,
    /// A replay's first tick's event time: replayed at its recorded pace, that tick is sent
    /// at the start.
    pub first_event_time: Option<u64>,
}

/// The reference model split over `connections`; with `count`, only the first `count`
/// ticks of the whole stream are sent (each connection sends its symbols' part of them).
pub fn model(seed: u64, symbols: usize, connections: usize, count: Option<u64>) -> Sources {
    let streams = (0..connections)
        .map(|c| StreamSource::Model {
            stream: GbmStream::new(seed, symbols, connection_symbols(symbols, connections, c)),
            below_index: count,
        })
        .collect();
    let shares =
        (0..connections).map(|c| connection_symbols(symbols, connections, c).len() as f64 / symbols as f64).collect();
    Sources { names: Arc::new(symbol_names(symbols)), streams, shares, first_event_time: None }
}

/// A tick file (see [`cep_core::replay`]) split over `connections`: symbols go to streams in
/// order of first appearance, round robin ([`TickFile::stream_of`]); with `count`, only the
/// file's first `count` ticks. Read as it is sent, in constant memory. Unless `checked` (the
/// launcher checked it), a first pass that keeps only counts checks it whole before anything
/// is sent; so does one with several connections (their shares of the rate are its counts).
pub fn replay(
    path: &Path,
    unit: Option<TimeUnit>,
    connections: usize,
    count: Option<u64>,
    checked: bool,
) -> Result<Sources, String> {
    let shares = if checked && connections == 1 {
        vec![1.0]
    } else {
        let scan = cep_core::replay::scan(path, unit, connections, count)?;
        scan.per_stream.iter().map(|&ticks| ticks as f64 / scan.ticks.max(1) as f64).collect()
    };
    let first_event_time = TickReader::open(path, unit, count)?.next_tick()?.map(|tick| tick.t_event);
    let streams = (0..connections)
        .map(|stream| {
            let reader = TickReader::open(path, unit, count)?;
            Ok(StreamSource::Replay(Box::new(ReplayStream::new(reader, stream, connections))))
        })
        .collect::<Result<_, String>>()?;
    Ok(Sources { names: Arc::new(Vec::new()), streams, shares, first_event_time })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_limits_the_whole_stream_not_each_connection() {
        let mut sources = model(42, 10, 3, Some(25));
        let sent: usize = sources.streams.iter_mut().map(|s| std::iter::from_fn(|| s.next_tick()).count()).sum();
        assert_eq!(sent, 25);
    }

    #[test]
    fn a_replay_splits_symbols_over_streams_with_their_event_times_as_it_reads() {
        let tmp = tempfile::tempdir().unwrap();
        let good = tmp.path().join("good.txt");
        std::fs::write(&good, "# comment\nAAA;10.5;1000\nBBB;20;1001\nAAA;10.6;999\n").unwrap();
        for checked in [false, true] {
            let mut sources = replay(&good, None, 2, None, checked).unwrap();
            assert_eq!(sources.shares, vec![2.0 / 3.0, 1.0 / 3.0], "a first pass counts: several connections");
            assert_eq!(sources.first_event_time, Some(1_000_000_000), "the file's first tick's");
            let tick = |symbol, price, ms: u64| Some(SourceTick { symbol, price, t_event: Some(ms * 1_000_000) });
            assert_eq!(sources.streams[0].next_event_time(), Some(1_000_000_000));
            assert_eq!(sources.streams[0].next_tick(), tick(0, 10.5, 1000));
            assert_eq!(sources.streams[0].next_tick(), tick(0, 10.6, 999));
            assert_eq!(sources.streams[0].next_tick(), None);
            assert_eq!(sources.streams[1].next_tick(), tick(1, 20.0, 1001));
            assert_eq!((sources.streams[1].name(1, &[]), sources.streams[0].name(0, &[])), ("BBB", "AAA"));
        }
        // --count takes the file's first ticks.
        let mut sources = replay(&good, None, 1, Some(2), true).unwrap();
        assert_eq!(sources.shares, vec![1.0]);
        assert_eq!(std::iter::from_fn(|| sources.streams[0].next_tick()).count(), 2);
        // Unchecked, a bad line is found before anything is sent; checked (by the launcher, or
        // so the caller says), it ends the stream where it is met.
        let bad = tmp.path().join("bad.txt");
        std::fs::write(&bad, "AAA;10.5;1000\nBBB;NaN;1001\n").unwrap();
        let error = replay(&bad, None, 1, None, false).err().unwrap();
        assert!(error.ends_with("bad.txt:2: price NaN must be a positive finite number"), "{error}");
        let mut sources = replay(&bad, None, 1, None, true).unwrap();
        assert_eq!(std::iter::from_fn(|| sources.streams[0].next_tick()).count(), 1);
        assert!(sources.streams[0].error().unwrap().ends_with("bad.txt:2: price NaN must be a positive finite number"));
    }
}
