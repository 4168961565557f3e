//! The collector: receives every output with its timestamp chain, records latency per hop and
//! end to end, writes `outputs.csv`, and accounts for every event from the workers' and the
//! router's end-of-run reports. It knows it has everything when every report has arrived.
//!
//! - [`config`]: the command-line flags.
//! - [`latency`]: the per-hop HdrHistograms.
//! - [`csv`]: the `outputs.csv` writer (no allocation per row).
//! - [`rules`]: resolves each output's rule index against its worker's announced rules.
//! - [`intervals`]: latency per second, as CSV and as an HdrHistogram interval log.
//! - [`metrics`]: what the collector exposes to Prometheus.
//! - [`progress`]: the progress line's figures, every node's counts taken at one instant.
//! - [`rescales`]: the summary's record of workers joining and leaving, and what the moves cost.
//! - [`failovers`]: the summary's record of workers that died, and outputs exactly once across
//!   their symbols' replay.
//! - [`accounting`]: turns the reports and counts into `summary.json`.
//! - [`collector`]: the core, a state machine from received frames to rows and accounting.
//! - [`lifecycle`]: the policy around the core: saves, watching the router, the end.
//! - [`driver`]: sockets, clock, the run loop and the results folder; `storing` writes the
//!   saved state on a thread of its own; `disk_full` leaves whole lines and a clear cause
//!   when the disk fills; `error` says why the collector stops.

pub mod accounting;
pub mod collector;
#[cfg(feature = "driver")]
pub mod config;
pub mod csv;
#[cfg(feature = "driver")]
mod disk_full;
#[cfg(feature = "driver")]
pub mod driver;
#[cfg(feature = "driver")]
mod error;
pub mod failovers;
mod histogram_serde;
pub mod intervals;
pub mod latency;
pub mod lifecycle;
pub mod metrics;
pub mod progress;
pub mod rescales;
pub mod rules;
#[cfg(feature = "driver")]
mod storing;
pub mod throughput;

pub use collector::Collector;
#[cfg(feature = "driver")]
pub use config::CollectorConfig;
pub use csv::CsvMode;
#[cfg(feature = "driver")]
pub use driver::{run, run_in, write_results, write_summary};
#[cfg(feature = "driver")]
pub use error::CollectorError;
