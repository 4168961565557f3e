//! The engine for the symbols one worker owns: symbols are interned on first sight, and each
//! symbol carries the queries whose symbol filters admit it, with their state (filter
//! indexing: an event is offered only to the queries that can match it). Rules can be
//! switched between two events; unchanged queries keep their state.

use crate::state::{Layout, States};
use cep_query::plan::{Query, Row, RuleSet};
use rustc_hash::FxHashMap;

/// A symbol's dense index inside one engine.
pub type SymbolId = u32;

/// A query's index in the engine's current rule set.
pub type QueryId = u32;

/// One query, ready to run, with its states for the symbols it is attached to.
#[derive(Debug)]
struct Runner {
    query: Query,
    layout: Layout,
    states: States,
    /// The symbol of each state.
    symbols: Vec<SymbolId>,
}

impl Runner {
    fn new(query: Query) -> Self {
        let layout = Layout::new(&query);
        Runner { states: States::new(&layout), query, layout, symbols: Vec::new() }
    }

    /// Whether the query's symbol filter admits the symbol.
    fn admits(&self, symbol: &str, unindexed: bool) -> bool {
        let row = Row { symbol, price: f64::NAN, aggregates: &[] };
        unindexed || self.query.symbol_filter.as_ref().is_none_or(|f| f.truth(&row) == Some(true))
    }

    /// A fresh state for the symbol; returns its slot.
    fn attach(&mut self, id: SymbolId) -> u32 {
        self.symbols.push(id);
        self.states.add(&self.query, &self.layout)
    }
}

#[derive(Debug)]
pub struct Engine {
    runners: Vec<Runner>,
    /// Offer events to every query and decide symbol filters per event (for measuring what
    /// the index saves); normally false.
    unindexed: bool,
    ids: FxHashMap<Box<[u8]>, SymbolId>,
    names: Vec<Box<str>>,
    /// Per symbol: (query, slot of its state) for each query attached to it, in query order.
    attached: Vec<Vec<(QueryId, u32)>>,
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
            runners: Vec::new(),
            unindexed,
            ids: FxHashMap::default(),
            names: Vec::new(),
            attached: Vec::new(),
            aggregates: Vec::new(),
            processed: 0,
            outputs_total: 0,
        };
        engine.install(rules.queries.into_iter().map(Runner::new).collect());
        engine
    }

    fn install(&mut self, runners: Vec<Runner>) {
        self.runners = runners;
        self.aggregates = vec![0.0; self.runners.iter().map(|r| r.query.aggregates.len()).max().unwrap_or(0)];
    }

    /// Switches to new rules between two events. A query with the same name and the same
    /// plan as a running one keeps its states; new and changed ones start empty.
    pub fn switch(&mut self, rules: RuleSet) {
        let mut old: Vec<Option<Runner>> = std::mem::take(&mut self.runners).into_iter().map(Some).collect();
        let mut runners = Vec::with_capacity(rules.queries.len());
        for query in rules.queries {
            let kept = old.iter().position(|o| o.as_ref().is_some_and(|o| o.query == query));
            match kept.and_then(|at| old[at].take()) {
                Some(runner) => runners.push(runner),
                None => {
                    let mut runner = Runner::new(query);
                    for (id, name) in self.names.iter().enumerate() {
                        if runner.admits(name, self.unindexed) {
                            runner.attach(id as SymbolId);
                        }
                    }
                    runners.push(runner);
                }
            }
        }
        self.attached = vec![Vec::new(); self.names.len()];
        for (query, runner) in runners.iter().enumerate() {
            for (slot, &id) in runner.symbols.iter().enumerate() {
                self.attached[id as usize].push((query as QueryId, slot as u32));
            }
        }
        self.install(runners);
    }

    pub fn queries(&self) -> impl Iterator<Item = &Query> {
        self.runners.iter().map(|r| &r.query)
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
        let id = self.names.len() as SymbolId;
        let name: Box<str> = String::from_utf8_lossy(bytes).into();
        let mut attached = Vec::new();
        for (query, runner) in self.runners.iter_mut().enumerate() {
            if runner.admits(&name, self.unindexed) {
                attached.push((query as QueryId, runner.attach(id)));
            }
        }
        self.ids.insert(bytes.into(), id);
        self.names.push(name);
        self.attached.push(attached);
        id
    }

    /// Number of distinct symbols seen.
    pub fn symbols(&self) -> usize {
        self.names.len()
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
        let symbol: &str = &self.names[id as usize];
        for &(query_id, slot) in &self.attached[id as usize] {
            let Runner { query, layout, states, .. } = &mut self.runners[query_id as usize];
            let row = Row { symbol, price, aggregates: &[] };
            if self.unindexed && query.symbol_filter.as_ref().is_some_and(|f| f.truth(&row) != Some(true)) {
                continue;
            }
            if query.event_filter.as_ref().is_some_and(|f| f.truth(&row) != Some(true)) {
                continue;
            }
            let total = &mut self.outputs_total;
            states.on_event(slot, query, layout, symbol, price, ts, &mut self.aggregates, |p, v| {
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
