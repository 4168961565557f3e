//! The router's flags.

use clap::Args;

/// Router settings; every flag can also be set from the environment.
#[derive(Args, Clone, Debug)]
pub struct RouterConfig {
    /// Where injectors send ticks (PULL, bound).
    #[arg(long, env = "CEP_ROUTER_LISTEN", default_value = "tcp://0.0.0.0:5555")]
    pub listen: String,
    /// Control endpoint where workers, the collector and injectors register (ROUTER, bound).
    #[arg(long, env = "CEP_ROUTER_CONTROL", default_value = "tcp://0.0.0.0:5556")]
    pub control: String,
    /// Workers that must register before the run starts; 0 takes every worker that registers
    /// until none has arrived for `--settle` (how `docker compose up --scale worker=N` works).
    #[arg(long, env = "CEP_WORKERS", default_value_t = 2)]
    pub workers: usize,
    /// With `--workers 0`: how long registrations must pause before the run starts.
    #[arg(long, env = "CEP_SETTLE", default_value = "3s", value_parser = cep_core::duration::parse_duration)]
    pub settle: std::time::Duration,
    /// Injector streams (connections, over all injectors) that must register before the run starts.
    #[arg(long, env = "CEP_STREAMS", default_value_t = 1)]
    pub streams: u32,
    /// Virtual nodes per worker on the hash ring.
    #[arg(long, env = "CEP_VNODES", default_value_t = cep_core::partition::DEFAULT_VNODES)]
    pub vnodes: usize,
    /// Most ticks in one batch to a worker (batches are sent early when no input is waiting).
    #[arg(long, env = "CEP_BATCH", default_value_t = cep_core::wire::DEFAULT_BATCH)]
    pub batch: usize,
    /// Frames larger than this many bytes are rejected.
    #[arg(long, env = "CEP_MAX_FRAME_BYTES", default_value_t = cep_core::wire::DEFAULT_MAX_FRAME_BYTES)]
    pub max_frame_bytes: usize,
    /// Batches queued per worker before sending blocks (back-pressure; nothing is dropped).
    #[arg(long, env = "CEP_HWM", default_value_t = 1000)]
    pub hwm: i32,
    /// Give up if the cluster is not complete this long after the router started (0: wait
    /// for ever).
    #[arg(long, env = "CEP_START_TIMEOUT", default_value = "0s", value_parser = cep_core::duration::parse_duration)]
    pub start_timeout: std::time::Duration,
    /// After the last stream ended: how long to keep the sockets open waiting for the collector
    /// to say it has everything.
    #[arg(long, env = "CEP_END_TIMEOUT", default_value = "60s", value_parser = cep_core::duration::parse_duration)]
    pub end_timeout: std::time::Duration,
    /// The rules file the run starts with (default: the built-in reference rules, the same
    /// as `rules/reference.rules`). Checked at start; workers get it from the router.
    #[arg(long, env = "CEP_RULES")]
    pub rules: Option<std::path::PathBuf>,
    /// How far behind its symbol's latest event time a tick may be and still be processed
    /// (e.g. `5s`); later ticks are dropped and counted as `late_dropped`. Default: every
    /// late tick is processed at its symbol's latest event time (and counted as `late`).
    #[arg(long, env = "CEP_ALLOWED_LATENESS", value_parser = cep_core::duration::parse_duration)]
    pub allowed_lateness: Option<std::time::Duration>,
    /// Write the endpoints actually bound (`data=...`, `control=...`) to this file once
    /// listening, so that `*` ports can be used and found (the launcher does).
    #[arg(long, env = "CEP_ANNOUNCE")]
    pub announce: Option<std::path::PathBuf>,
}

impl RouterConfig {
    /// Checks what clap cannot.
    pub fn validate(&self) -> Result<(), String> {
        if self.streams == 0 {
            return Err("--streams must be at least 1".into());
        }
        if self.batch == 0 {
            return Err("--batch must be at least 1".into());
        }
        if self.vnodes == 0 {
            return Err("--vnodes must be at least 1".into());
        }
        Ok(())
    }
}
