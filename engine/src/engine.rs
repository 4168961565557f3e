//! The engine for the symbols one worker owns: symbols are interned on first sight, and each
//! symbol carries the queries whose symbol filters admit it, with their state (filter
//! indexing: an event is offered only to the queries that can match it). Rules can be
//! switched between two events; unchanged queries keep their state.

use crate::state::{Layout, QueryState};
use cep_query::plan::{Query, Row, RuleSet};
use rustc_hash::FxHashMap;

/// A symbol's dense index inside one engine.
pub type SymbolId = u32;

/// A query's index in the engine's current rule set.
pub type QueryId = u32;

#[derive(Debug)]
struct Compiled {
    query: Query,
    layout: Layout,
}

#[derive(Debug)]
pub struct Engine {
    queries: Vec<Compiled>,
    /// Offer events to every query and decide symbol filters per event (for measuring what
    /// the index saves); normally false.
    unindexed: bool,
    ids: FxHashMap<Box<[u8]>, SymbolId>,
    names: Vec<Box<str>>,
    /// Per symbol: the states of the queries attached to it.
    attached: Vec<Vec<QueryState>>,
    aggregates: Vec<f64>,
    processed: u64,
    outputs: Vec<u64>,
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
            queries: Vec::new(),
            unindexed,
            ids: FxHashMap::default(),
            names: Vec::new(),
            attached: Vec::new(),
            aggregates: Vec::new(),
            processed: 0,
            outputs: Vec::new(),
            outputs_total: 0,
        };
        engine.install(rules);
        engine
    }

    fn install(&mut self, rules: RuleSet) {
        self.queries = rules.queries.into_iter().map(|query| Compiled { layout: Layout::new(&query), query }).collect();
        self.aggregates = vec![0.0; self.queries.iter().map(|c| c.query.aggregates.len()).max().unwrap_or(0)];
        self.outputs = vec![0; self.queries.len()];
    }

    /// Switches to new rules between two events. A query with the same name and the same
    /// plan as a running one keeps its state per symbol; new and changed ones start empty.
    pub fn switch(&mut self, rules: RuleSet) {
        let old: Vec<Compiled> = std::mem::take(&mut self.queries);
        self.install(rules);
        let kept: Vec<Option<QueryId>> = self
            .queries
            .iter()
            .map(|new| old.iter().position(|o| o.query == new.query).map(|at| at as QueryId))
            .collect();
        for id in 0..self.names.len() {
            let mut previous = std::mem::take(&mut self.attached[id]);
            let mut attached = self.attach(id);
            for entry in &mut attached {
                if let Some(old_id) = kept[entry.query as usize] {
                    if let Some(at) = previous.iter().position(|p| p.query == old_id) {
                        let query = entry.query;
                        *entry = previous.swap_remove(at);
                        entry.query = query;
                    }
                }
            }
            self.attached[id] = attached;
        }
    }

    pub fn queries(&self) -> impl Iterator<Item = &Query> {
        self.queries.iter().map(|c| &c.query)
    }

    /// The queries whose symbol filters admit symbol `id`, with fresh state.
    fn attach(&self, id: usize) -> Vec<QueryState> {
        let symbol: &str = &self.names[id];
        let row = Row { symbol, price: f64::NAN, aggregates: &[] };
        self.queries
            .iter()
            .enumerate()
            .filter(|(_, c)| {
                self.unindexed || c.query.symbol_filter.as_ref().is_none_or(|f| f.truth(&row) == Some(true))
            })
            .map(|(at, c)| QueryState::new(at as QueryId, &c.query, &c.layout))
            .collect()
    }

    /// The symbol's id, interning it on first sight (the only allocation, once per symbol).
    #[inline]
    pub fn intern(&mut self, symbol: &str) -> SymbolId {
        self.intern_bytes(symbol.as_bytes())
    }

    /// [`Self::intern`] for a symbol already known to be UTF-8 (as decoded frames are).
    #[inline]
    pub fn intern_bytes(&mut self, symbol: &[u8]) -> SymbolId {
        if let Some(&id) = self.ids.get(symbol) {
            return id;
        }
        self.insert(symbol)
    }

    #[cold]
    fn insert(&mut self, bytes: &[u8]) -> SymbolId {
        let id = self.names.len();
        self.ids.insert(bytes.into(), id as SymbolId);
        self.names.push(String::from_utf8_lossy(bytes).into());
        let attached = self.attach(id);
        self.attached.push(attached);
        id as SymbolId
    }

    pub fn symbol_bytes(&self, id: SymbolId) -> &[u8] {
        self.names[id as usize].as_bytes()
    }

    /// Number of distinct symbols seen.
    pub fn symbols(&self) -> usize {
        self.names.len()
    }

    /// Ticks processed so far.
    pub fn processed(&self) -> u64 {
        self.processed
    }

    /// Outputs so far per query of the current rules (since they were installed).
    pub fn outputs(&self) -> &[u64] {
        &self.outputs
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
        let symbol: &str = &self.names[id as usize];
        for state in &mut self.attached[id as usize] {
            let compiled = &self.queries[state.query as usize];
            let query = &compiled.query;
            let row = Row { symbol, price, aggregates: &[] };
            if self.unindexed && query.symbol_filter.as_ref().is_some_and(|f| f.truth(&row) != Some(true)) {
                continue;
            }
            if query.event_filter.as_ref().is_some_and(|f| f.truth(&row) != Some(true)) {
                continue;
            }
            let outputs = &mut self.outputs;
            let total = &mut self.outputs_total;
            let query_id = state.query;
            state.on_event(query, &compiled.layout, symbol, price, ts, &mut self.aggregates, |p, v| {
                outputs[query_id as usize] += 1;
                *total += 1;
                emit(query_id, p, v);
            });
        }
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
