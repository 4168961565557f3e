//! The engine for the symbols one worker owns: symbols are interned on first sight, and each
//! symbol carries the queries whose symbol filters admit it, with their state (filter
//! indexing: an event is offered only to the queries that can match it); symbols carrying the
//! same queries share a [`Group`]. Rules can be switched between two events; unchanged
//! queries keep their state.
//!
//! Event time runs forward per symbol: a tick earlier than its symbol's latest event time is
//! *late*. It is processed at that latest time (its price enters the windows as the newest
//! value, so it never reopens a closed tumbling window; Flink would put it in the window of
//! its own time) and counted, or, with an allowed lateness set, dropped and counted if it is
//! later than that. The end of input closes every open tumbling window
//! ([`Engine::close_windows`], Flink's final watermark).

use crate::group::{lay_out, Cells, Compiled, Group, Signature};
pub use crate::symbols::SymbolId;
use crate::symbols::SymbolTable;
use cep_query::plan::{Query, RuleSet};
use rustc_hash::FxHashMap;

/// A query's index in the engine's current rule set.
pub type QueryId = u32;

/// The engine of one worker (or of `cep engine`): the rules in force, every symbol's state,
/// and counts of what it processed, was late and emitted.
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
    /// Per symbol: where its states are and its latest event time.
    slots: Vec<Slot>,
    aggregates: Vec<f64>,
    /// Ticks later than this (ns) behind their symbol's latest are dropped; `None` keeps all.
    allowed_lateness: Option<u64>,
    processed: u64,
    late: u64,
    late_dropped: u64,
    outputs_total: u64,
}

/// A symbol's place: its group, its row there, and its latest event time.
#[derive(Clone, Copy, Debug)]
struct Slot {
    group: u32,
    row: u32,
    latest: u64,
}

impl Engine {
    /// An engine running `rules`, with filter indexing.
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
            allowed_lateness: None,
            processed: 0,
            late: 0,
            late_dropped: 0,
            outputs_total: 0,
        };
        engine.install(rules);
        engine
    }

    fn install(&mut self, rules: RuleSet) {
        self.compiled = rules.queries.into_iter().map(Compiled::new).collect();
        self.aggregates = vec![0.0; self.compiled.iter().map(|c| c.query.aggregates.len()).max().unwrap_or(0)];
    }

    /// Sets how late (ns behind its symbol's latest event time) a tick may be and still be
    /// processed; later ones are dropped and counted. `None` (the default) processes every
    /// late tick at its symbol's latest time.
    pub fn set_allowed_lateness(&mut self, allowed: Option<u64>) {
        self.allowed_lateness = allowed;
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
            let Slot { group, row, latest } = self.slots[id];
            let cells = rows[group as usize][row as usize].take().expect("each row moves once");
            let previous = Some((&members[group as usize][..], cells));
            let (signature, cells) =
                lay_out(&self.compiled, &self.symbols.names()[id], self.unindexed, &kept, previous);
            let (group, row) = self.place(signature, cells);
            self.slots[id] = Slot { group, row, latest };
        }
    }

    /// The queries of the rules in force, in order (a [`QueryId`] indexes them).
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
        let (group, row) = self.place(signature, cells);
        self.slots.push(Slot { group, row, latest: 0 });
        id
    }

    /// Number of distinct symbols seen.
    pub fn symbols(&self) -> usize {
        self.symbols.len()
    }

    /// Ticks processed so far (late ones, dropped or not, included).
    pub fn processed(&self) -> u64 {
        self.processed
    }

    /// Late ticks processed at their symbol's latest event time.
    pub fn late(&self) -> u64 {
        self.late
    }

    /// Late ticks dropped for being later than the allowed lateness.
    pub fn late_dropped(&self) -> u64 {
        self.late_dropped
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
        let slot = &mut self.slots[id as usize];
        let (group, row) = (slot.group, slot.row);
        let ts = if ts >= slot.latest {
            slot.latest = ts;
            ts
        } else {
            match self.late_tick(id, ts) {
                Some(ts) => ts,
                None => return,
            }
        };
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

    /// A tick behind its symbol's latest event time: the time it is processed at, or `None`
    /// if it is dropped.
    #[cold]
    fn late_tick(&mut self, id: SymbolId, ts: u64) -> Option<u64> {
        let latest = self.slots[id as usize].latest;
        if self.allowed_lateness.is_some_and(|allowed| latest - ts > allowed) {
            self.late_dropped += 1;
            None
        } else {
            self.late += 1;
            Some(latest)
        }
    }

    /// The end of input (Flink's final watermark): every open tumbling window emits what it
    /// holds, in symbol order (by id, i.e. first appearance) then query order, through
    /// `emit(symbol, query, price, value)`, and is left empty.
    pub fn close_windows(&mut self, mut emit: impl FnMut(SymbolId, QueryId, f64, f64)) {
        let total = &mut self.outputs_total;
        for (id, slot) in self.slots.iter().enumerate() {
            let id = id as SymbolId;
            self.groups[slot.group as usize].close_windows(
                &self.compiled,
                slot.row,
                &self.symbols.names()[id as usize],
                &mut self.aggregates,
                |query, price, value| {
                    *total += 1;
                    emit(id, query, price, value);
                },
            );
        }
    }

    /// The name of an interned symbol.
    pub fn symbol_name(&self, id: SymbolId) -> &str {
        &self.symbols.names()[id as usize]
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
