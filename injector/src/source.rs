//! Where a stream's ticks come from: the reference GBM model or a replay file, split so that
//! each symbol belongs to exactly one stream.

use cep_core::gbm::{connection_symbols, symbol_names, GbmStream};
use cep_core::replay::{FileTick, TickFile, TimeUnit};
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
    /// The stream's ticks of a replay file.
    Replay {
        /// The ticks, in file order.
        ticks: Vec<FileTick>,
        /// The index of the next tick to send.
        next: usize,
    },
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
            StreamSource::Replay { ticks, next } => {
                let tick = ticks.get(*next).copied()?;
                *next += 1;
                Some(SourceTick { symbol: tick.symbol, price: tick.price, t_event: Some(tick.t_event) })
            }
        }
    }

    /// The event time of the tick [`Self::next_tick`] returns next, for a replay.
    #[inline]
    pub fn next_event_time(&self) -> Option<u64> {
        match self {
            StreamSource::Model { .. } => None,
            StreamSource::Replay { ticks, next } => ticks.get(*next).map(|tick| tick.t_event),
        }
    }

    /// Ticks this stream will send at most, when known.
    pub fn len_hint(&self) -> Option<u64> {
        match self {
            StreamSource::Model { .. } => None,
            StreamSource::Replay { ticks, .. } => Some(ticks.len() as u64),
        }
    }
}

/// Symbol names and one source per connection.
pub struct Sources {
    /// Every symbol's name; a tick's `symbol` indexes it.
    pub names: Arc<Vec<String>>,
    /// One source per stream (injector connection).
    pub streams: Vec<StreamSource>,
    /// Each stream's share of all ticks (for splitting the rate).
    pub shares: Vec<f64>,
    /// A replay's earliest event time: replayed at its recorded pace, it is sent at the start.
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
/// file's first `count` ticks.
pub fn replay(path: &Path, unit: Option<TimeUnit>, connections: usize, count: Option<u64>) -> Result<Sources, String> {
    let mut file = cep_core::replay::read(path, unit)?;
    if let Some(count) = count {
        file.ticks.truncate(usize::try_from(count).unwrap_or(usize::MAX));
    }
    Ok(split(file, connections))
}

/// A parsed tick file split over `connections`.
pub fn split(file: TickFile, connections: usize) -> Sources {
    let first_event_time = file.first_event_time();
    let mut per_stream: Vec<Vec<FileTick>> = vec![Vec::new(); connections];
    for tick in file.ticks {
        per_stream[TickFile::stream_of(tick.symbol, connections)].push(tick);
    }
    let total: usize = per_stream.iter().map(Vec::len).sum();
    let shares = per_stream.iter().map(|ticks| ticks.len() as f64 / total.max(1) as f64).collect();
    let streams = per_stream.into_iter().map(|ticks| StreamSource::Replay { ticks, next: 0 }).collect();
    Sources { names: Arc::new(file.names), streams, shares, first_event_time }
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
    fn a_replay_splits_symbols_over_streams_with_their_event_times() {
        let tmp = tempfile::tempdir().unwrap();
        let good = tmp.path().join("good.txt");
        std::fs::write(&good, "# comment\nAAA;10.5;1000\nBBB;20;1001\nAAA;10.6;999\n").unwrap();
        let mut sources = replay(&good, None, 2, None).unwrap();
        assert_eq!(*sources.names, vec!["AAA".to_string(), "BBB".to_string()]);
        assert_eq!(sources.first_event_time, Some(999_000_000));
        let tick = |symbol, price, ms: u64| Some(SourceTick { symbol, price, t_event: Some(ms * 1_000_000) });
        assert_eq!(sources.streams[0].next_event_time(), Some(1_000_000_000));
        assert_eq!(sources.streams[0].next_tick(), tick(0, 10.5, 1000));
        assert_eq!(sources.streams[0].next_tick(), tick(0, 10.6, 999));
        assert_eq!(sources.streams[0].next_tick(), None);
        assert_eq!(sources.streams[1].next_tick(), tick(1, 20.0, 1001));
        // --count takes the file's first ticks.
        let sources = replay(&good, None, 1, Some(2)).unwrap();
        assert_eq!(sources.streams[0].len_hint(), Some(2));
        let bad = tmp.path().join("bad.txt");
        std::fs::write(&bad, "AAA;10.5;1000\nBBB;NaN;1001\n").unwrap();
        let error = replay(&bad, None, 1, None).err().unwrap();
        assert!(error.ends_with("bad.txt:2: price NaN must be a positive finite number"), "{error}");
    }
}
