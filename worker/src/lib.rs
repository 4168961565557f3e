//! The worker: registers with the router, receives the ticks of the symbols it owns, runs
//! the engine over them and pushes outputs, stamped, to the collector.
//!
//! - [`config`]: flags, including the rule flags shared with the launcher and benchmarks.
//! - [`metrics`]: what the worker exposes to Prometheus.
//! - [`processing`]: the data path.

pub mod config;
pub mod metrics;
pub mod processing;

pub use config::WorkerConfig;
pub use processing::run;
