//! What the collector does with each output: told apart as a duplicate or a failover's
//! replay, its latency recorded past the warm-up, counted under its rule and written to
//! outputs.csv as the mode asks.

use super::Collector;
use crate::csv::CsvMode;
use crate::failovers::Replay;
use cep_core::frame::OutputBatch;
use cep_core::symbol_map::SymbolMap;
use cep_core::tick::OutputRecord;
use serde::{Deserialize, Serialize};
use std::io::{self, Write};

impl<W: Write> Collector<W> {
    /// Outputs of windows the end of input closed: counted and written like any output, but
    /// no tick caused them, so they have no latency and no place in the per-tick duplicate
    /// check.
    pub(super) fn record_final(&mut self, batch: &OutputBatch<'_>, t_collector: u64) -> io::Result<()> {
        for output in batch.records {
            let Some(slot) = self.rule_slot(batch.sender, output.rule) else { continue };
            self.observed.final_outputs += 1;
            self.keep(slot, output, batch.symbol(output), t_collector)?;
        }
        Ok(())
    }

    /// The rule slot of an output of `sender`'s, or `None` (counted as `unknown_rule`) when
    /// that worker never announced the rule index.
    pub(super) fn rule_slot(&mut self, sender: u32, rule: u32) -> Option<usize> {
        let slot = self.rules.slot(sender, rule);
        if slot.is_none() {
            self.rejections.reject(
                "unknown_rule",
                Some(sender),
                &format_args!("output of rule index {rule} (not in the worker's announced rules)"),
            );
        }
        slot
    }

    /// Counts an output under its rule and writes it to outputs.csv if the mode asks.
    pub(super) fn keep(
        &mut self,
        slot: usize,
        output: &OutputRecord,
        symbol: &[u8],
        t_collector: u64,
    ) -> io::Result<()> {
        self.rules.count(slot);
        let writes = match self.csv_mode {
            CsvMode::All => true,
            CsvMode::Alerts => self.rules.is_alert(slot),
            CsvMode::None => false,
        };
        if writes {
            self.sinks.csv.write(self.rules.name(slot), output, symbol, t_collector)?;
        }
        Ok(())
    }

    pub(super) fn record(&mut self, batch: &OutputBatch<'_>, t_collector: u64) -> io::Result<()> {
        // Every output of a frame arrived at the same instant: close a finished interval first.
        self.sinks.intervals.advance(t_collector, &self.hops.end_to_end)?;
        let warmup_end_ns = self.shape.start_ns + self.shape.warmup_ns;
        let mut measured = 0;
        // The outputs of one tick (same stream and seq, consecutive in a batch) are told
        // apart once: (stream, seq, duplicate, replayed).
        let mut group: Option<(u32, u64, bool, bool)> = None;
        // Ticks whose outputs are kept, counted for the sender once per frame.
        let mut kept_ticks = 0;
        for output in batch.records {
            if !self.admit_stream(output.injector) {
                continue;
            }
            let Some(slot) = self.rule_slot(batch.sender, output.rule) else { continue };
            let (duplicate, replayed) = match group {
                Some((injector, seq, duplicate, replayed)) if (injector, seq) == (output.injector, output.seq) => {
                    (duplicate, replayed)
                }
                _ => {
                    let symbol = batch.symbol(output);
                    // Only a run that had a failover pays for a second look.
                    let replay = if self.failovers.is_empty() {
                        Replay::NotConcerned
                    } else {
                        self.failovers.arrived(batch.sender, output.injector, symbol, output.seq)
                    };
                    let arrived = self.arrived(batch.sender, output.injector, symbol, output.seq);
                    let (duplicate, replayed) = match replay {
                        Replay::NotConcerned => (!arrived, false),
                        Replay::First => (false, false),
                        Replay::Again => (false, true),
                    };
                    group = Some((output.injector, output.seq, duplicate, replayed));
                    kept_ticks += u64::from(!duplicate && !replayed);
                    if self.rescales.watching() && !replayed {
                        let latency_ns = t_collector.saturating_sub(output.stamps.t_inject);
                        self.rescales.output(batch.sender, symbol, latency_ns, t_collector);
                    }
                    (duplicate, replayed)
                }
            };
            if replayed {
                // Already kept from the dead worker or the survivor's replay: not again.
                self.observed.replayed_outputs += 1;
                continue;
            }
            if duplicate {
                self.observed.output_duplicates += 1;
            }
            if output.stamps.t_inject < warmup_end_ns {
                self.observed.warmup_outputs += 1;
            } else {
                self.hops.record_output(&output.stamps, t_collector);
                measured += 1;
            }
            self.keep(slot, output, batch.symbol(output), t_collector)?;
        }
        // The batch's own hops are the same for every output in it.
        if let Some(first) = batch.records.first() {
            self.hops.record_batch(&first.stamps, t_collector, measured);
        }
        if kept_ticks > 0 {
            self.count_ticks_with_outputs(batch.sender, kept_ticks);
        }
        Ok(())
    }

    /// `ticks` more ticks of `sender` whose outputs were kept: what it processed at least.
    /// Call it once `sender` has announced its rules (its table grows with the run's workers).
    pub(super) fn count_ticks_with_outputs(&mut self, sender: u32, ticks: u64) {
        let counts = &mut self.observed.ticks_with_outputs;
        if counts.len() <= sender as usize {
            counts.resize(sender as usize + 1, 0);
        }
        counts[sender as usize] += ticks;
    }

    /// Records that the outputs of tick `seq` of `symbol` on `stream` arrived from `sender`;
    /// false if they (or a later tick's) already had: a duplicate. Call it once `sender` has
    /// announced its rules, so its table grows with the run's workers, not with frames.
    pub(super) fn arrived(&mut self, sender: u32, stream: u32, symbol: &[u8], seq: u64) -> bool {
        let (sender, stream) = (sender as usize, stream as usize);
        if sender >= self.last_ticks.len() {
            self.last_ticks.resize_with(sender + 1, Vec::new);
        }
        let by_stream = &mut self.last_ticks[sender];
        if by_stream.len() <= stream {
            by_stream.resize_with(self.shape.streams as usize, LastTicks::default);
        }
        by_stream[stream].arrived(symbol, seq)
    }
}

/// The last tick of each symbol whose outputs arrived from one worker on one stream. Outputs
/// of a symbol from one worker arrive in tick order (one FIFO connection, and a worker
/// processes a symbol's ticks in order), so a tick at or below its symbol's last is a
/// duplicate; outputs of one symbol from two workers (a symbol moving during a rescale) may
/// interleave, so each worker has its own table. One entry, allocated once, per symbol.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct LastTicks {
    last: SymbolMap<u64>,
}

impl LastTicks {
    /// Records that the outputs of tick `seq` of `symbol` arrived; false if that tick's (or a
    /// later tick's) outputs already had: a duplicate.
    #[inline]
    pub fn arrived(&mut self, symbol: &[u8], seq: u64) -> bool {
        match self.last.get_mut(symbol) {
            Some(last) if seq <= *last => false,
            Some(last) => {
                *last = seq;
                true
            }
            None => {
                self.last.insert(symbol, seq);
                true
            }
        }
    }

    /// The last tick of `symbol` whose outputs arrived; `None` if none did.
    pub fn last(&self, symbol: &[u8]) -> Option<u64> {
        self.last.get(symbol).copied()
    }

    /// Symbols with an entry.
    pub fn len(&self) -> usize {
        self.last.len()
    }

    /// Whether no output arrived yet.
    pub fn is_empty(&self) -> bool {
        self.last.is_empty()
    }
}
