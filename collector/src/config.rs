//! The collector's flags.

use cep_core::duration::parse_duration;
use clap::{Args, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;

/// Which outputs go to `outputs.csv`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum CsvMode {
    /// Every output, those of queries that emit on every tick included (volatility): for
    /// correctness runs.
    All,
    /// Outputs of queries that emit on a condition (HAVING, or WHERE on the event: perc and
    /// trend), not those without one (volatility on every tick, a tumbling window's every pane).
    Alerts,
    /// No rows (header only): for throughput runs.
    None,
}

/// Collector settings; every flag can also be set from the environment.
#[derive(Args, Clone, Debug)]
pub struct CollectorConfig {
    /// Where workers send outputs (PULL, bound).
    #[arg(long, env = "CEP_COLLECTOR_LISTEN", default_value = "tcp://0.0.0.0:5557")]
    pub listen: String,
    /// The router's control endpoint.
    #[arg(long, env = "CEP_ROUTER", default_value = "tcp://127.0.0.1:5556")]
    pub router: String,
    /// The host name or address the router should use to reach this collector; `auto` picks
    /// this host's address on the route to the router.
    #[arg(long, env = "CEP_ADVERTISE", default_value = "auto")]
    pub advertise: String,
    /// The collector's clock service (REP, bound): every node measures its offset here.
    #[arg(long, env = "CEP_CLOCK_LISTEN", default_value = "tcp://0.0.0.0:5558")]
    pub clock_listen: String,
    /// The results folder.
    #[arg(long, env = "CEP_OUT", default_value = "results")]
    pub out: PathBuf,
    /// Which outputs to write to outputs.csv.
    #[arg(long, env = "CEP_CSV", value_enum, default_value_t = CsvMode::Alerts)]
    pub csv: CsvMode,
    /// Give up (and report what is missing as lost) after this long without any message.
    #[arg(long, env = "CEP_IDLE_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub idle_timeout: Duration,
    /// How long to wait for the run to start.
    #[arg(long, env = "CEP_START_TIMEOUT", default_value = "120s", value_parser = parse_duration)]
    pub start_timeout: Duration,
    /// Print a progress line every second.
    #[arg(long, env = "CEP_PROGRESS")]
    pub progress: bool,
    /// Frames larger than this many bytes are rejected.
    #[arg(long, env = "CEP_MAX_FRAME_BYTES", default_value_t = cep_core::wire::DEFAULT_MAX_FRAME_BYTES)]
    pub max_frame_bytes: usize,
}
