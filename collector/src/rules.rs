//! Which rule each output belongs to. Outputs carry their query's index in the rule set their
//! worker ran; each worker announces its rule set (and every switch) on the same socket
//! ahead of the outputs under it, so the index is resolved against that worker's latest
//! announcement. Rules are counted by name across switches.

use cep_core::report::RulesInstalled;
use cep_core::results::OutputCounts;
use rustc_hash::FxHashMap;

/// Every rule announced in the run, by name (a slot each), with its output count, and each
/// worker's current query indexes into those slots.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct RuleTable {
    names: Vec<String>,
    alert: Vec<bool>,
    counts: Vec<u64>,
    slot_of: FxHashMap<String, usize>,
    /// Per worker index: the slot of each query index of its current rules.
    by_worker: Vec<Vec<usize>>,
}

impl RuleTable {
    /// A worker's rule set, in force for its outputs from now on.
    pub fn install(&mut self, worker: u32, installed: &RulesInstalled) {
        let slots = installed
            .queries
            .iter()
            .map(|query| {
                let slot = *self.slot_of.entry(query.name.clone()).or_insert_with(|| {
                    self.names.push(query.name.clone());
                    self.alert.push(query.alert);
                    self.counts.push(0);
                    self.names.len() - 1
                });
                self.alert[slot] = query.alert;
                slot
            })
            .collect();
        let worker = worker as usize;
        if worker >= self.by_worker.len() {
            self.by_worker.resize(worker + 1, Vec::new());
        }
        self.by_worker[worker] = slots;
    }

    /// The slot of a worker's output with query index `rule`; `None` if its rules do not
    /// have that index (or it never announced any).
    #[inline]
    pub fn slot(&self, worker: u32, rule: u32) -> Option<usize> {
        self.by_worker.get(worker as usize)?.get(rule as usize).copied()
    }

    /// Counts one output of the rule in `slot`.
    #[inline]
    pub fn count(&mut self, slot: usize) {
        self.counts[slot] += 1;
    }

    /// The rule's name (its query's `@name`).
    #[inline]
    pub fn name(&self, slot: usize) -> &str {
        &self.names[slot]
    }

    /// Whether the rule emits only when a condition holds (its outputs go to `--csv alerts`),
    /// as its latest announcement said.
    #[inline]
    pub fn is_alert(&self, slot: usize) -> bool {
        self.alert[slot]
    }

    /// Outputs counted, all rules.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Outputs per rule name, every announced rule listed.
    pub fn counts(&self) -> OutputCounts {
        self.names.iter().cloned().zip(self.counts.iter().copied()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cep_core::report::RuleInfo;

    fn rules(epoch: u32, names: &[&str]) -> RulesInstalled {
        RulesInstalled { epoch, queries: names.iter().map(|n| RuleInfo { name: n.to_string(), alert: true }).collect() }
    }

    #[test]
    fn indexes_resolve_per_worker_and_counts_follow_names_across_switches() {
        let mut table = RuleTable::default();
        table.install(0, &rules(0, &["perc", "trend"]));
        table.install(1, &rules(0, &["perc", "trend"]));
        let trend = table.slot(0, 1).unwrap();
        table.count(trend);
        // Worker 1 switches first: index 0 is now `count`, index 1 `perc`.
        table.install(1, &rules(1, &["count", "perc"]));
        table.count(table.slot(1, 1).unwrap());
        table.count(table.slot(0, 0).unwrap());
        assert_eq!(table.slot(1, 2), None);
        assert_eq!(table.slot(5, 0), None);
        let counts = table.counts();
        assert_eq!(counts["perc"], 2);
        assert_eq!(counts["trend"], 1);
        assert_eq!(counts["count"], 0);
        assert_eq!(table.total(), 3);
    }

    #[test]
    fn a_saved_copy_resolves_and_counts_as_the_original() {
        let mut table = RuleTable::default();
        table.install(0, &rules(0, &["perc", "trend"]));
        table.install(2, &rules(1, &["count", "perc"]));
        table.count(table.slot(2, 1).unwrap());
        let mut back: RuleTable = rmp_serde::from_slice(&rmp_serde::to_vec(&table).unwrap()).unwrap();
        for (worker, rule) in [(0, 0), (0, 1), (0, 2), (1, 0), (2, 0), (2, 1), (3, 0)] {
            assert_eq!(back.slot(worker, rule), table.slot(worker, rule), "worker {worker} rule {rule}");
        }
        for slot in 0..3 {
            assert_eq!((back.name(slot), back.is_alert(slot)), (table.name(slot), table.is_alert(slot)));
        }
        assert_eq!((back.counts(), back.total()), (table.counts(), table.total()));
        // A rule announced after the resume gets the next slot in both.
        for table in [&mut table, &mut back] {
            table.install(1, &rules(2, &["new", "perc"]));
            table.count(table.slot(1, 0).unwrap());
            table.count(table.slot(1, 1).unwrap());
        }
        assert_eq!((back.slot(1, 0), back.counts()), (table.slot(1, 0), table.counts()));
    }
}
