//! The engine for the symbols one worker owns: symbols are interned on first sight, and each
//! symbol carries the queries whose symbol filters admit it, with their state (filter
//! indexing: an event is offered only to the queries that can match it); symbols carrying the
//! same queries share a [`Group`]. Rules can be switched between two events; unchanged
//! queries keep their state.

use crate::group::{lay_out, Cells, Compiled, Group, Signature};
pub use crate::symbols::SymbolId;
use crate::symbols::SymbolTable;
use cep_query::plan::{Query, RuleSet};
use rustc_hash::FxHashMap;

/// A query's index in the engine's current rule set.
pub type QueryId = u32;

#[derive(Debug)]
pub struct Engine {
    compiled: Vec<Compiled>,
    /// Offer events to every query and decide symbol filters per event (for measuring what
    /// the index saves); normally false.
    unindexed: bool,
    symbols: SymbolTable,
    /// The symbols grouped by the queries they carry, with their states.
    groups: Vec<Group>,
    group_of: FxHashMap<Signature, u32>,
    /// Per symbol: its group and its row there.
    slots: Vec<(u32, u32)>,
    aggregates: Vec<f64>,
    processed: u64,
    outputs_total: u64,
}

impl Engine {
    pub fn new(rules: RuleSet) -> Self {
        Self::build(rules, false)
    }

    /// An engine without filter indexing: every query sees every event (benchmarks only).
    pub fn unindexed(rules: RuleSet) -> Self {
        Self::build(rules, true)
    }

    fn build(rules: RuleSet, unindexed: bool) -> Self {
        let mut engine = Engine {
            compiled: Vec::new(),
            unindexed,
            symbols: SymbolTable::default(),
            groups: Vec::new(),
            group_of: FxHashMap::default(),
            slots: Vec::new(),
            aggregates: Vec::new(),
            processed: 0,
            outputs_total: 0,
        };
        engine.install(rules);
        engine
    }

    fn install(&mut self, rules: RuleSet) {
        self.compiled = rules.queries.into_iter().map(Compiled::new).collect();
        self.aggregates = vec![0.0; self.compiled.iter().map(|c| c.query.aggregates.len()).max().unwrap_or(0)];
    }

    /// Puts a symbol's row in the group of its signature; returns (group, row).
    fn place(&mut self, signature: Signature, cells: Cells) -> (u32, u32) {
        let (groups, compiled, unindexed) = (&mut self.groups, &self.compiled, self.unindexed);
        let group = *self.group_of.entry(signature).or_insert_with_key(|signature| {
            groups.push(Group::new(signature.clone(), compiled, unindexed));
            groups.len() as u32 - 1
        });
        (group, self.groups[group as usize].add(cells))
    }

    /// Switches to new rules between two events. A query with the same name and the same
    /// plan as a running one keeps its states; new and changed ones start empty.
    pub fn switch(&mut self, rules: RuleSet) {
        let old_compiled = std::mem::take(&mut self.compiled);
        let kept: Vec<Option<QueryId>> = rules
            .queries
            .iter()
            .map(|query| old_compiled.iter().position(|old| old.query == *query).map(|at| at as QueryId))
            .collect();
        self.install(rules);
        let old_groups = std::mem::take(&mut self.groups);
        self.group_of.clear();
        let members: Vec<Signature> = old_groups.iter().map(|g| g.members().to_vec()).collect();
        let mut rows: Vec<Vec<Option<Cells>>> =
            old_groups.into_iter().map(|g| g.into_rows().into_iter().map(Some).collect()).collect();
        for id in 0..self.symbols.len() {
            let (group, row) = self.slots[id];
            let cells = rows[group as usize][row as usize].take().expect("each row moves once");
            let previous = Some((&members[group as usize][..], cells));
            let (signature, cells) =
                lay_out(&self.compiled, &self.symbols.names()[id], self.unindexed, &kept, previous);
            self.slots[id] = self.place(signature, cells);
        }
    }

    pub fn queries(&self) -> impl Iterator<Item = &Query> {
        self.compiled.iter().map(|c| &c.query)
    }

    /// The symbol's id, interning it on first sight (the only allocation, once per symbol).
    #[inline]
    pub fn intern(&mut self, symbol: &str) -> SymbolId {
        self.intern_bytes(symbol.as_bytes())
    }

    /// [`Self::intern`] for a symbol already known to be UTF-8 (as decoded frames are).
    #[inline]
    pub fn intern_bytes(&mut self, symbol: &[u8]) -> SymbolId {
        match self.symbols.get(symbol) {
            Some(id) => id,
            None => self.insert(symbol),
        }
    }

    #[cold]
    fn insert(&mut self, bytes: &[u8]) -> SymbolId {
        let id = self.symbols.insert(bytes);
        let name = &self.symbols.names()[id as usize];
        let (signature, cells) = lay_out(&self.compiled, name, self.unindexed, &[], None);
        let slot = self.place(signature, cells);
        self.slots.push(slot);
        id
    }

    /// Number of distinct symbols seen.
    pub fn symbols(&self) -> usize {
        self.symbols.len()
    }

    /// Ticks processed so far.
    pub fn processed(&self) -> u64 {
        self.processed
    }

    /// Outputs so far, all rules.
    pub fn outputs_total(&self) -> u64 {
        self.outputs_total
    }

    /// Processes one tick of an interned symbol at event time `ts` (ns); calls
    /// `emit(query, price, value)` for each output, in query order. Price validity is the
    /// caller's contract (finite, > 0).
    #[inline]
    pub fn process(&mut self, id: SymbolId, price: f64, ts: u64, mut emit: impl FnMut(QueryId, f64, f64)) {
        self.processed += 1;
        let (group, row) = self.slots[id as usize];
        let total = &mut self.outputs_total;
        self.groups[group as usize].on_event(
            &self.compiled,
            row,
            self.symbols.names(),
            id,
            price,
            ts,
            &mut self.aggregates,
            |query, p, v| {
                *total += 1;
                emit(query, p, v);
            },
        );
    }

    /// Interns and processes in one call.
    #[inline]
    pub fn process_symbol(
        &mut self,
        symbol: &str,
        price: f64,
        ts: u64,
        emit: impl FnMut(QueryId, f64, f64),
    ) -> SymbolId {
        let id = self.intern(symbol);
        self.process(id, price, ts, emit);
        id
    }
}
