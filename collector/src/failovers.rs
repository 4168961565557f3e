//! The summary's `failovers`, and outputs exactly once across them. When a worker dies, the
//! router restores its symbols at the survivors from its last checkpoint and replays the ticks
//! routed to it since: the outputs of those ticks may then arrive twice, once from the dead
//! worker (sent before it died, possibly arriving late) and once from the survivor's replay,
//! in either order. The router's [`WorkerFailed`] record is sent before any replayed output
//! can exist, and each survivor puts a [`Restored`] mark in its own stream ahead of its
//! replayed outputs (the record comes on another line, so it may come after them: a
//! restarted collector gets every sender's frames again at once). From whichever comes
//! first, each moved symbol has one last tick whose outputs arrived (from the dead worker or
//! its new owner, whichever came first), and an output of the symbol from either at or below
//! it is a replay: dropped, and counted.

use crate::collector::LastTicks;
use cep_core::failover::{Restored, WorkerFailed};
use cep_core::results::FailoverSummary;
use cep_core::symbol_map::SymbolMap;
use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, BTreeSet};

/// A moved symbol whose outputs may come twice.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Recovering {
    /// Its owner now (the survivor that replays its ticks).
    owner: u32,
    /// The dead workers that owned it before (their late outputs are checked too).
    dead: Vec<u32>,
    /// The last tick whose outputs arrived from any of them; `None`: none yet.
    last: Option<u64>,
}

/// The failovers seen so far, and the symbols they moved.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct FailoverWatch {
    /// The router's records, in the order they came (one per dead worker).
    records: Vec<WorkerFailed>,
    /// Per stream, per moved symbol: who may send its outputs and the last that arrived.
    /// Memory grows with the moved symbols, never with events.
    moved: FxHashMap<u32, SymbolMap<Recovering>>,
    /// Per dead worker, the symbols a survivor could not restore from its checkpoint (a
    /// stored part missing or altered): its failover lost their state.
    #[serde(default)]
    unrestored: BTreeMap<u32, BTreeSet<String>>,
}

/// What the outputs of one tick are, across a failover.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replay {
    /// Not a moved symbol's output from its dead owner or new owner: the usual check applies.
    NotConcerned,
    /// Their first arrival: kept.
    First,
    /// They had already arrived (from the dead worker or from the replay): dropped.
    Again,
}

impl FailoverWatch {
    /// Whether no worker has failed: outputs need no look here.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.records.is_empty() && self.moved.is_empty()
    }

    /// Whether worker `index` died (a record named it).
    pub fn is_dead(&self, index: u32) -> bool {
        self.records.iter().any(|record| record.index == index)
    }

    /// Whether worker `index` is fenced: it died and its symbols were restored elsewhere from a
    /// checkpoint whose outputs are all here, so every tick it processed after that is
    /// replayed by the survivors; nothing more of it is taken. (A worker whose state was lost
    /// is not: its late outputs are the only ones of its last ticks.)
    pub fn is_fenced(&self, index: u32) -> bool {
        self.records.iter().any(|record| record.index == index && record.recovered)
    }

    /// The router's records, in the order they came, each with the symbols survivors could
    /// not restore among its lost ones (its ticks were still replayed: `recovered` stays the
    /// router's, which the counts follow).
    pub fn records(&self) -> Vec<WorkerFailed> {
        self.records.iter().map(|record| self.with_unrestored(record)).collect()
    }

    /// `record` with the symbols survivors could not restore among its lost ones.
    fn with_unrestored(&self, record: &WorkerFailed) -> WorkerFailed {
        let mut record = record.clone();
        if let Some(lost) = self.unrestored.get(&record.index).filter(|lost| !lost.is_empty()) {
            let mut state_lost: BTreeSet<String> = record.state_lost.drain(..).collect();
            state_lost.extend(lost.iter().cloned());
            record.state_lost = state_lost.into_iter().collect();
        }
        record
    }

    /// The router's record that worker `record.index` died; `last_ticks` are the collector's
    /// tables of the last tick whose outputs arrived, per sender and stream. False (and
    /// nothing changes) for a second record of the same worker.
    pub fn failed(&mut self, record: WorkerFailed, last_ticks: &[Vec<LastTicks>]) -> bool {
        if self.is_dead(record.index) {
            return false;
        }
        // Without a restore nothing is replayed: a late output of the dead worker is new.
        if record.recovered {
            for (symbol, stream, owner) in &record.moved {
                self.moved_symbol(record.index, symbol.as_bytes(), *stream, *owner, last_ticks);
            }
        }
        self.records.push(record);
        true
    }

    /// Survivor `owner`'s mark that it restored `restored.symbols` of dead worker
    /// `restored.from`: its outputs of them that follow may be replays (whether the router's
    /// record came yet or not).
    pub fn restored(&mut self, owner: u32, restored: &Restored, last_ticks: &[Vec<LastTicks>]) {
        // A survivor that died itself before it restored (a paused one that wakes, fenced, to
        // find the chain gone) lost nothing of the run: its symbols moved on with its own
        // failover.
        if !restored.lost.is_empty() && !self.is_dead(owner) {
            self.unrestored.entry(restored.from).or_default().extend(restored.lost.iter().cloned());
        }
        for (symbol, stream) in &restored.symbols {
            self.moved_symbol(restored.from, symbol.as_bytes(), *stream, owner, last_ticks);
        }
    }

    /// `symbol` of `stream` moved from dead worker `dead` to `owner`.
    fn moved_symbol(&mut self, dead: u32, symbol: &[u8], stream: u32, owner: u32, last_ticks: &[Vec<LastTicks>]) {
        let arrived = last_ticks.get(dead as usize).and_then(|streams| streams.get(stream as usize));
        let last = arrived.and_then(|ticks| ticks.last(symbol));
        let symbols = self.moved.entry(stream).or_default();
        match symbols.get_mut(symbol) {
            // It had moved here from an earlier dead worker (or the other of the record and
            // the mark told it first): keep their last too.
            Some(recovering) => {
                recovering.owner = owner;
                if !recovering.dead.contains(&dead) {
                    recovering.dead.push(dead);
                }
                recovering.last = recovering.last.max(last);
            }
            None => {
                let recovering = Recovering { owner, dead: vec![dead], last };
                symbols.insert(symbol, recovering);
            }
        }
    }

    /// The outputs of tick `seq` of `symbol` on `stream` arrived from `sender`.
    #[cold]
    pub fn arrived(&mut self, sender: u32, stream: u32, symbol: &[u8], seq: u64) -> Replay {
        let Some(recovering) = self.moved.get_mut(&stream).and_then(|symbols| symbols.get_mut(symbol)) else {
            return Replay::NotConcerned;
        };
        if sender != recovering.owner && !recovering.dead.contains(&sender) {
            return Replay::NotConcerned;
        }
        match recovering.last {
            Some(last) if seq <= last => Replay::Again,
            _ => {
                recovering.last = Some(seq);
                Replay::First
            }
        }
    }

    /// The summary's `failovers`, in order; `start_ns` is the run's start.
    pub fn summaries(&self, start_ns: u64) -> Vec<FailoverSummary> {
        self.records()
            .iter()
            .map(|record| FailoverSummary {
                worker: record.worker.clone(),
                at_s: record.detected_ns.saturating_sub(start_ns) as f64 / 1e9,
                // Some symbols' state not restored: not an exact recovery.
                recovered: record.recovered && record.state_lost.is_empty(),
                checkpoint: record.checkpoint,
                symbols: record.moved.len() as u64,
                replayed: record.replayed,
                state_lost: record.state_lost.clone(),
                reason: record.reason.clone(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(index: u32, moved: &[(&str, u32)]) -> WorkerFailed {
        WorkerFailed {
            worker: format!("w{index}"),
            index,
            reason: "unreachable".into(),
            detected_ns: 3_000_000_000,
            recovered: true,
            checkpoint: 1,
            processed: [(0, 4)].into(),
            outputs: 4,
            replayed: 2,
            moved: moved.iter().map(|(symbol, to)| (symbol.to_string(), 0, *to)).collect(),
            state_lost: vec![],
        }
    }

    #[test]
    fn a_moved_symbol_is_checked_from_its_dead_owner_and_its_new_one_only() {
        let mut arrived = LastTicks::default();
        arrived.arrived(b"A", 5);
        let last_ticks = vec![vec![arrived]];
        let mut watch = FailoverWatch::default();
        assert!(watch.is_empty());
        assert!(watch.failed(record(0, &[("A", 1), ("B", 2)]), &last_ticks));
        assert!(!watch.failed(record(0, &[]), &last_ticks), "one record per worker");
        assert!(!watch.is_empty() && watch.is_dead(0) && !watch.is_dead(1));
        // A: outputs up to 5 had arrived from w0.
        assert_eq!(watch.arrived(1, 0, b"A", 5), Replay::Again);
        assert_eq!(watch.arrived(1, 0, b"A", 6), Replay::First);
        assert_eq!(watch.arrived(0, 0, b"A", 6), Replay::Again, "w0's late output");
        assert_eq!(watch.arrived(2, 0, b"A", 3), Replay::NotConcerned, "another worker's");
        assert_eq!(watch.arrived(1, 0, b"C", 3), Replay::NotConcerned, "a symbol that did not move");
        assert_eq!(watch.arrived(1, 1, b"A", 3), Replay::NotConcerned, "another stream");
        // B: none had arrived, whoever sends first wins.
        assert_eq!(watch.arrived(0, 0, b"B", 0), Replay::First);
        assert_eq!(watch.arrived(2, 0, b"B", 0), Replay::Again);
        // w1 dies in turn: A moves on with what arrived from w0 and w1.
        assert!(watch.failed(record(1, &[("A", 2)]), &[]));
        assert_eq!(watch.arrived(2, 0, b"A", 6), Replay::Again);
        assert_eq!(watch.arrived(0, 0, b"A", 7), Replay::First);
        assert_eq!(watch.arrived(1, 0, b"A", 7), Replay::Again);
        let summaries = watch.summaries(1_000_000_000);
        assert_eq!((summaries[0].at_s, summaries[0].symbols, summaries[1].symbols), (2.0, 2, 1));
    }

    #[test]
    fn a_saved_copy_tells_replays_as_the_original() {
        let mut arrived = LastTicks::default();
        arrived.arrived(b"A", 5);
        let last_ticks = vec![vec![arrived]];
        let mut watch = FailoverWatch::default();
        assert!(watch.failed(record(0, &[("A", 1), ("B", 2)]), &last_ticks));
        assert_eq!(watch.arrived(0, 0, b"B", 0), Replay::First);
        let mut back: FailoverWatch = rmp_serde::from_slice(&rmp_serde::to_vec(&watch).unwrap()).unwrap();
        assert_eq!(back.records(), watch.records());
        assert!(!back.is_empty() && back.is_dead(0) && !back.is_dead(1));
        assert!(!back.failed(record(0, &[]), &last_ticks), "one record per worker, after a resume too");
        let mut both = [&mut watch, &mut back];
        let answers = both.each_mut().map(|watch| {
            let mut answers = vec![
                watch.arrived(1, 0, b"A", 5),
                watch.arrived(1, 0, b"A", 6),
                watch.arrived(0, 0, b"A", 6),
                watch.arrived(2, 0, b"B", 0),
                watch.arrived(2, 0, b"B", 1),
                watch.arrived(2, 0, b"C", 1),
                watch.arrived(1, 1, b"A", 9),
            ];
            assert!(watch.failed(record(1, &[("A", 2)]), &[]));
            answers.extend([watch.arrived(2, 0, b"A", 6), watch.arrived(1, 0, b"A", 7)]);
            answers
        });
        assert_eq!(answers[0], answers[1]);
        assert_eq!(answers[1][..4], [Replay::Again, Replay::First, Replay::Again, Replay::Again]);
        assert_eq!(back.summaries(1_000_000_000), watch.summaries(1_000_000_000));
    }
}
