//! The injector's flags.

use cep_core::duration::parse_duration;
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

/// Injector settings; every flag can also be set from the environment.
#[derive(Args, Clone, Debug)]
pub struct InjectorConfig {
    /// The router's control endpoint.
    #[arg(long, env = "CEP_ROUTER", default_value = "tcp://127.0.0.1:5556")]
    pub router: String,
    /// The router's data endpoint.
    #[arg(long, env = "CEP_ROUTER_DATA", default_value = "tcp://127.0.0.1:5555")]
    pub router_data: String,
    /// Number of symbols (S0000, S0001, ...).
    #[arg(long, env = "CEP_SYMBOLS", default_value_t = cep_core::reference::SYMBOLS)]
    pub symbols: usize,
    /// Connections (streams), one PUSH socket each; symbols are split evenly between them.
    #[arg(long, env = "CEP_CONNECTIONS", default_value_t = 1)]
    pub connections: usize,
    /// Total ticks per second over all connections; 0 sends as fast as possible. A replay
    /// given --speed is paced by its own timestamps instead.
    #[arg(long, env = "CEP_RATE", default_value_t = 0.0)]
    pub rate: f64,
    /// How long to send after the warm-up (e.g. 30s, 500ms).
    #[arg(long, env = "CEP_DURATION", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Total ticks to send (the first N ticks of the reference stream, or of the replay file);
    /// overrides --duration.
    #[arg(long, env = "CEP_COUNT")]
    pub count: Option<u64>,
    /// Sent before the measured part; its outputs are kept out of the latency histograms.
    #[arg(long, env = "CEP_WARMUP", default_value = "0s", value_parser = parse_duration)]
    pub warmup: Duration,
    /// Seed of the price model.
    #[arg(long, env = "CEP_SEED", default_value_t = cep_core::reference::SEED)]
    pub seed: u64,
    /// Replay ticks from a file instead of generating them: `symbol;price;timestamp` lines
    /// (timestamps in ms unless --time-unit says otherwise) or CSV with a header naming the
    /// columns; each tick's timestamp is its event time (README, "Replaying your own data").
    #[arg(long, env = "CEP_REPLAY")]
    pub replay: Option<PathBuf>,
    /// The unit of the replay file's timestamps when its header does not name one: s, ms, us, ns
    /// (default ms).
    #[arg(long, env = "CEP_TIME_UNIT", value_parser = cep_core::replay::TimeUnit::parse, requires = "replay")]
    pub time_unit: Option<cep_core::replay::TimeUnit>,
    /// Replay at the file's recorded pace times this factor (1, 10, 0.5) or `max` for as fast
    /// as possible; without it a replay is paced by --rate.
    #[arg(long, env = "CEP_SPEED", value_parser = crate::pacing::Speed::parse, requires = "replay")]
    pub speed: Option<crate::pacing::Speed>,
    /// Record every tick sent to this CSV file (`injector,seq,symbol,price,t_inject_ns,t_event_ns`).
    #[arg(long, env = "CEP_RECORD")]
    pub record: Option<PathBuf>,
    /// Most ticks in one batch.
    #[arg(long, env = "CEP_BATCH", default_value_t = cep_core::wire::DEFAULT_BATCH)]
    pub batch: usize,
    /// How long to wait for the run to start.
    #[arg(long, env = "CEP_START_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub start_timeout: Duration,
    /// After the last end-of-stream marker: how long to keep the sockets open waiting for the
    /// end of the run.
    #[arg(long, env = "CEP_END_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub end_timeout: Duration,
    /// Batches queued per connection before sending blocks.
    #[arg(long, env = "CEP_HWM", default_value_t = 1000)]
    pub hwm: i32,
}

impl InjectorConfig {
    /// Checks what clap cannot.
    pub fn validate(&self) -> Result<(), String> {
        if self.replay.is_none() && self.symbols == 0 {
            return Err("--symbols must be at least 1".into());
        }
        if self.connections == 0 {
            return Err("--connections must be at least 1".into());
        }
        if self.replay.is_none() && self.connections > self.symbols {
            return Err(format!(
                "--connections {} exceeds --symbols {}: each connection needs a symbol",
                self.connections, self.symbols
            ));
        }
        if !(self.rate.is_finite() && self.rate >= 0.0) {
            return Err(format!("--rate must be a non-negative number, got {}", self.rate));
        }
        if self.batch == 0 {
            return Err("--batch must be at least 1".into());
        }
        if self.replay.is_none() && self.count.is_none() && self.duration.is_none() {
            return Err("give --duration or --count (or --replay a file)".into());
        }
        Ok(())
    }
}
