//! The observability flags every role takes.

use cep_core::duration::parse_duration;
use clap::{Args, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;

/// How log lines are written to stderr.
#[derive(ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// One human line per event: time, level, the process's name, message, fields.
    #[default]
    Text,
    /// One JSON object per line (timestamp, level, role, id, target, message, fields), for
    /// log shippers.
    Json,
}

impl LogFormat {
    /// The flag value, as `--log-format` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

/// Prometheus metrics of one process (docs/METRICS.md lists them).
#[derive(Args, Clone, Debug, Default)]
pub struct MetricsArgs {
    /// Serve Prometheus metrics over HTTP at this address, at `/metrics` (e.g. `0.0.0.0:9100`;
    /// port 0 picks a free port). Off when not given.
    #[arg(long, env = "CEP_METRICS_LISTEN", value_name = "HOST:PORT")]
    pub metrics_listen: Option<String>,
    /// When the run is over: keep serving metrics until one more scrape has read the final
    /// values, waiting at most this long (0s: exit at once).
    #[arg(long, env = "CEP_METRICS_LINGER", default_value = "0s", value_parser = parse_duration)]
    pub metrics_linger: Duration,
    /// Write the address actually serving metrics (`HOST:PORT`) to this file once listening,
    /// so that a free port (0) can be used and found; the launcher does.
    #[arg(long, env = "CEP_METRICS_ANNOUNCE", value_name = "FILE")]
    pub metrics_announce: Option<PathBuf>,
}
