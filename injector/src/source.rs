//! Where a stream's ticks come from: the reference GBM model or a replay file, split so that
//! each symbol belongs to exactly one stream.

use cep_core::gbm::{connection_symbols, symbol_names, GbmStream};
use std::path::Path;
use std::sync::Arc;

/// The ticks of one stream, as (symbol index into the names, price).
pub enum StreamSource {
    Model { stream: GbmStream, below_index: Option<u64> },
    Replay { ticks: Vec<(u32, f64)>, next: usize },
}

impl StreamSource {
    #[inline]
    pub fn next_tick(&mut self) -> Option<(u32, f64)> {
        match self {
            StreamSource::Model { stream, below_index } => {
                let tick = stream.next()?;
                if below_index.is_some_and(|limit| tick.index >= limit) {
                    return None;
                }
                Some((tick.symbol as u32, tick.price))
            }
            StreamSource::Replay { ticks, next } => {
                let tick = ticks.get(*next).copied()?;
                *next += 1;
                Some(tick)
            }
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
    pub names: Arc<Vec<String>>,
    pub streams: Vec<StreamSource>,
    /// Each stream's share of all symbols (for splitting the rate).
    pub shares: Vec<f64>,
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
    Sources { names: Arc::new(symbol_names(symbols)), streams, shares }
}

/// A replay file of `symbol;price;timestamp` lines (OCTO's format; `#` comments and blank
/// lines skipped). Symbols go to connections in order of first appearance.
pub fn replay(path: &Path, connections: usize) -> Result<Sources, String> {
    let text = std::fs::read_to_string(path).map_err(|error| format!("{}: {error}", path.display()))?;
    let mut names: Vec<String> = Vec::new();
    let mut index: std::collections::HashMap<String, u32> = std::collections::HashMap::new();
    let mut per_stream: Vec<Vec<(u32, f64)>> = vec![Vec::new(); connections];
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = |what: String| format!("{}:{}: {what}", path.display(), number + 1);
        let fields: Vec<&str> = line.split(';').collect();
        if fields.len() != 3 {
            return Err(at(format!("expected `symbol;price;timestamp`, got `{line}`")));
        }
        let symbol = fields[0].trim();
        if symbol.is_empty() {
            return Err(at("empty symbol".into()));
        }
        let price: f64 = fields[1].trim().parse().map_err(|_| at(format!("price `{}` is not a number", fields[1])))?;
        if !(price.is_finite() && price > 0.0) {
            return Err(at(format!("price {price} must be a positive finite number")));
        }
        fields[2].trim().parse::<u64>().map_err(|_| at(format!("timestamp `{}` is not a whole number", fields[2])))?;
        let id = *index.entry(symbol.to_string()).or_insert_with(|| {
            names.push(symbol.to_string());
            (names.len() - 1) as u32
        });
        per_stream[id as usize % connections].push((id, price));
    }
    if names.is_empty() {
        return Err(format!("{}: no ticks in the file", path.display()));
    }
    let total: usize = per_stream.iter().map(Vec::len).sum();
    let shares = per_stream.iter().map(|ticks| ticks.len() as f64 / total as f64).collect();
    let streams = per_stream.into_iter().map(|ticks| StreamSource::Replay { ticks, next: 0 }).collect();
    Ok(Sources { names: Arc::new(names), streams, shares })
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
    fn replay_reports_the_bad_line() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let good = dir.join("good.txt");
        std::fs::write(&good, "# comment\nAAA;10.5;1000\nBBB;20;1001\nAAA;10.6;1002\n").unwrap();
        let mut sources = replay(&good, 2).unwrap();
        assert_eq!(*sources.names, vec!["AAA".to_string(), "BBB".to_string()]);
        assert_eq!(sources.streams[0].next_tick(), Some((0, 10.5)));
        assert_eq!(sources.streams[0].next_tick(), Some((0, 10.6)));
        assert_eq!(sources.streams[1].next_tick(), Some((1, 20.0)));
        let bad = dir.join("bad.txt");
        std::fs::write(&bad, "AAA;10.5;1000\nBBB;NaN;1001\n").unwrap();
        let error = replay(&bad, 1).err().unwrap();
        assert!(error.ends_with("bad.txt:2: price NaN must be a positive finite number"), "{error}");
    }
}
