//! The summary's `rescales`: each worker that joined or left the running cluster, what the
//! move cost (from the router's record), and the worst end-to-end latency of a moved
//! symbol's outputs from the start of the move to that symbol's first output at its new
//! owner: the wait its held ticks saw. A symbol that gives no output at its new owner (an
//! alert rule that rarely fires) stops being watched [`WATCH_AFTER_NS`] after its move ended,
//! so the watch costs nothing for the rest of the run.

use cep_core::rescale::{RescaleStarted, Rescaled};
use cep_core::results::RescaleSummary;
use cep_core::symbol_map::SymbolMap;

/// How long after a move ended its symbols are still watched for their first output at the
/// new owner (collector clock).
pub const WATCH_AFTER_NS: u64 = 1_000_000_000;

/// Rescales seen so far, and the moved symbols still watched.
#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct RescaleWatch {
    /// By the router's rescale id (0, 1, ...): a record that does not follow in order is
    /// ignored, so a lost or forged frame cannot shift the others.
    rescales: Vec<RescaleSummary>,
    /// Per rescale, how many symbols it set out to move.
    planned: Vec<u64>,
    /// Per moved symbol still watched: its rescale and its new owner's index.
    watched: SymbolMap<(usize, u32)>,
    /// When the watch ends (collector clock), once every watched rescale has ended.
    watch_until: Option<u64>,
}

impl RescaleWatch {
    /// A rescale began at `now` (the collector's clock) in a run that started at `start_ns`.
    pub fn started(&mut self, started: RescaleStarted, now: u64, start_ns: u64) {
        let index = self.rescales.len();
        if started.id as usize != index {
            return;
        }
        self.watch_until = None;
        self.planned.push(started.symbols.len() as u64);
        self.rescales.push(RescaleSummary {
            kind: started.kind,
            worker: started.worker,
            at_s: now.saturating_sub(start_ns) as f64 / 1e9,
            ..RescaleSummary::default()
        });
        for (symbol, to) in started.symbols {
            self.watched.insert(symbol.as_bytes(), (index, to));
        }
    }

    /// The router's record of a finished rescale.
    pub fn finished(&mut self, record: Rescaled, now: u64, start_ns: u64) {
        let Some(summary) = self.rescales.get_mut(record.id as usize).filter(|s| !s.finished && s.duration_ms == 0.0)
        else {
            return;
        };
        self.watch_until = Some(now.saturating_add(WATCH_AFTER_NS));
        summary.at_s = record.started_ns.saturating_sub(start_ns) as f64 / 1e9;
        summary.duration_ms = record.duration_ns as f64 / 1e6;
        summary.symbols = record.symbols;
        summary.state_bytes = record.state_bytes;
        summary.slices = record.slices;
        summary.held_ticks = record.held_ticks;
        summary.longest_slice_ms = record.longest_slice_ns as f64 / 1e6;
        summary.finished = record.state_lost.is_empty() && record.symbols == self.planned[record.id as usize];
        summary.state_lost = record.state_lost;
    }

    /// Whether some moved symbol is still watched (outputs need a look).
    #[inline]
    pub fn watching(&self) -> bool {
        !self.watched.is_empty()
    }

    /// An output of `symbol` from worker `sender`, `latency_ns` end to end, arriving at `now`.
    #[cold]
    pub fn output(&mut self, sender: u32, symbol: &[u8], latency_ns: u64, now: u64) {
        if self.watch_until.is_some_and(|until| now > until) {
            self.watched.clear();
            self.watch_until = None;
            return;
        }
        let Some(&(index, new_owner)) = self.watched.get(symbol) else { return };
        let summary = &mut self.rescales[index];
        let latency_us = latency_ns as f64 / 1e3;
        summary.max_moved_latency_us = Some(summary.max_moved_latency_us.map_or(latency_us, |max| max.max(latency_us)));
        if sender == new_owner {
            // Its first output at its new owner: the move is behind it.
            self.watched.remove(symbol);
        }
    }

    /// The rescales so far, in order.
    pub fn summaries(&self) -> Vec<RescaleSummary> {
        self.rescales.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn started(id: u32, kind: &str, worker: &str, index: u32, symbols: &[(&str, u32)]) -> RescaleStarted {
        let symbols = symbols.iter().map(|(symbol, to)| (symbol.to_string(), *to)).collect();
        RescaleStarted { id, kind: kind.into(), worker: worker.into(), index, symbols }
    }

    fn record(id: u32, started_ns: u64, duration_ns: u64, symbols: u64) -> Rescaled {
        Rescaled {
            id,
            started_ns,
            duration_ns,
            symbols,
            state_bytes: 100,
            slices: 1,
            held_ticks: 3,
            longest_slice_ns: 1_000_000,
            state_lost: vec![],
        }
    }

    #[test]
    fn watches_moved_symbols_until_their_first_output_at_the_new_owner() {
        let mut watch = RescaleWatch::default();
        watch.started(started(0, "join", "w2", 2, &[("A", 2), ("B", 2)]), 3_000_000_000, 1_000_000_000);
        assert!(watch.watching());
        watch.output(0, b"A", 5_000, 1);
        watch.output(0, b"C", 900_000, 1);
        watch.output(2, b"A", 7_000, 1);
        watch.output(2, b"A", 99_000, 1);
        watch.output(2, b"B", 1_000, 1);
        assert!(!watch.watching());
        watch.finished(record(0, 2_000_000_000, 4_000_000, 2), 2, 1_000_000_000);
        let summary = &watch.summaries()[0];
        assert_eq!(summary.max_moved_latency_us, Some(7.0), "after A's first output at w2, A is no longer watched");
        assert_eq!((summary.at_s, summary.duration_ms, summary.symbols), (1.0, 4.0, 2));
        assert!(summary.finished);
        // A record for a rescale never announced is ignored.
        watch.finished(record(9, 2_000_000_000, 4_000_000, 2), 3, 0);
        // A second record for the same rescale changes nothing; a start out of order is ignored.
        watch.finished(record(0, 2_000_000_000, 1, 2), 3, 0);
        assert_eq!(watch.summaries()[0].duration_ms, 4.0);
        watch.started(started(5, "join", "x", 1, &[]), 4, 0);
        assert_eq!(watch.summaries().len(), 1);
    }

    #[test]
    fn symbols_without_an_output_at_their_new_owner_stop_being_watched_after_the_move() {
        let mut watch = RescaleWatch::default();
        watch.started(started(0, "leave", "w0", 0, &[("RARE", 1)]), 10, 0);
        watch.finished(record(0, 10, 5, 1), 20, 0);
        watch.output(0, b"OTHER", 1_000, 21);
        assert!(watch.watching(), "within the grace, still watched");
        watch.output(0, b"OTHER", 1_000, 21 + WATCH_AFTER_NS);
        assert!(!watch.watching());
    }

    #[test]
    fn a_saved_copy_watches_and_summarizes_as_the_original() {
        let mut watch = RescaleWatch::default();
        watch.started(started(0, "join", "w2", 2, &[("A", 2), ("B", 2), ("\u{e9}", 2)]), 3_000, 1_000);
        watch.output(0, b"A", 5_000, 3_001);
        watch.output(2, b"B", 6_000, 3_002);
        let saved = rmp_serde::to_vec(&watch).unwrap();
        let back: RescaleWatch = rmp_serde::from_slice(&saved).unwrap();
        assert_eq!(back.watching(), watch.watching());
        let mut both = [watch, back];
        for watch in &mut both {
            watch.output(0, b"A", 9_000, 3_003);
            watch.output(2, b"B", 50_000, 3_004);
            watch.output(2, "\u{e9}".as_bytes(), 8_000, 3_005);
            watch.finished(record(0, 2_000, 4_000_000, 3), 3_006, 1_000);
            watch.started(started(1, "leave", "w0", 0, &[("C", 1)]), 4_000, 1_000);
        }
        let [watch, back] = both;
        assert_eq!(back.summaries(), watch.summaries());
        assert_eq!(back.summaries()[0].max_moved_latency_us, Some(9.0));
        assert_eq!((back.watching(), back.watched.len()), (watch.watching(), 2));
    }
}
