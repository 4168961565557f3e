//! The CEP engine: executes checked rules ([`cep_query`] plans) over per-symbol state, with
//! no I/O and no clock (time arrives as each tick's own timestamp), so it runs the same
//! standalone, inside a worker, or in a test loop.
//!
//! - [`engine`]: symbol interning, filter indexing, the per-tick loop, rule switches.
//! - [`group`]: the states of the symbols that carry the same queries, row by row.
//! - [`handoff`]: the format symbols' states move between engines in, and its errors.
//! - [`state`]: one query's window and incremental aggregates for one symbol.
//! - [`symbols`]: symbol interning, shared by the engine and the baseline.
//! - [`program`]: conditions and output columns in the flat shapes the per-event loop runs.
//! - [`window`]: numerically stable moments of a sliding window.
//!
//! With the `baseline` feature (off by default; the `cep` benchmarks turn it on), `baseline`
//! holds the hand-written R1/R2/R3 the rule language replaced: no role runs it, it is only the
//! oracle the tests compare the compiled reference rules with and the benchmarks' baseline.

#[cfg(any(test, feature = "baseline"))]
pub mod baseline;
pub mod engine;
pub mod group;
pub mod handoff;
pub mod program;
pub mod state;
pub mod symbols;
pub mod window;

pub use cep_query::{compile, RuleSet, RulesSource};
pub use engine::{CheckpointPart, Engine, QueryId, SymbolId};
pub use handoff::StateError;

/// The compiled built-in reference rules (R1, R2, R3).
pub fn reference_rules() -> RuleSet {
    cep_query::compile(cep_query::REFERENCE, "built-in:reference").expect("the built-in reference rules check")
}

/// The compiled built-in Oracle 400-query rules.
pub fn oracle_rules() -> RuleSet {
    cep_query::compile(cep_query::ORACLE_400, "built-in:oracle-400").expect("the built-in Oracle rules check")
}

/// Only the named queries of a rule set, in its order.
pub fn select_queries(rules: &RuleSet, names: &[&str]) -> RuleSet {
    RuleSet { queries: rules.queries.iter().filter(|q| names.contains(&q.name.as_str())).cloned().collect() }
}
