//! The CEP engine: per-symbol state machines for the reference rules, with no I/O and no
//! clock (time arrives as each tick's own timestamp), so it runs the same standalone, inside
//! a worker, or in a test loop.
//!
//! - [`config`]: which rules run, their thresholds, the Oracle variant's monitored symbols.
//! - [`window`]: the event-time sliding window with an incremental, numerically stable stddev.
//! - [`engine`]: symbol interning and the per-tick evaluation of R1, R2 and R3.

pub mod config;
pub mod engine;
pub mod window;

pub use cep_core::tick::Rule;
pub use config::{ConfigError, RulesConfig};
pub use engine::{Engine, SymbolId};
