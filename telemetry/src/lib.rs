//! What every process shows its operators, kept out of the roles' data paths.
//!
//! - [`console`]: writing to the terminal, where a closed pipe (`cep ... | head`) is not an error.
//! - [`identity`]: who this process is (role and id); every log line and metric carries it.
//! - [`logging`]: one init for all processes: text lines that name the process (colour only
//!   on a terminal) or JSON lines for log shippers.
//! - [`metrics`]: what a role exposes ([`metrics::Source`]), written at scrape time from
//!   counters the role already keeps; the process's sources and the exposition text.
//! - [`buckets`]: an HdrHistogram as cumulative Prometheus buckets.
//! - [`server`]: the thin HTTP driver serving `/metrics`.
//! - [`args`]: the `--metrics-*` flags and the `--log-format` choice, shared by every role.

pub mod args;
pub mod buckets;
pub mod console;
pub mod identity;
pub mod logging;
pub mod metrics;
pub mod server;

pub use args::{LogFormat, MetricsArgs};
pub use metrics::{Scrape, Source};
pub use server::MetricsServer;
