//! The worker: registers with the router, receives the ticks of the symbols it owns, runs
//! the engine over them and pushes outputs, stamped, to the collector.
//!
//! - [`config`]: flags and their validation.
//! - [`worker`]: the core, a state machine from the router's frames to the collector's.
//! - [`lifecycle`]: the policy around the core: holding, leaving, ending, and its cadences.
//! - [`driver`]: sockets, clock and the run loop around the two.
//! - [`metrics`]: what the worker exposes to Prometheus.

#[cfg(feature = "driver")]
pub mod config;
#[cfg(feature = "driver")]
pub mod driver;
pub mod lifecycle;
pub mod metrics;
pub mod worker;

#[cfg(feature = "driver")]
pub use config::WorkerConfig;
#[cfg(feature = "driver")]
pub use driver::{run, run_in, WorkerError};
pub use worker::Worker;
