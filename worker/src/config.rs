//! The worker's flags.

use cep_core::duration::parse_duration;
use clap::Args;
use std::time::Duration;

/// Worker settings; every flag can also be set from the environment.
#[derive(Args, Clone, Debug)]
pub struct WorkerConfig {
    /// The router's control endpoint.
    #[arg(long, env = "CEP_ROUTER", default_value = "tcp://127.0.0.1:5556")]
    pub router: String,
    /// This worker's id, unique in the cluster (default: <host name>-<pid>).
    #[arg(long, env = "CEP_WORKER_ID")]
    pub id: Option<String>,
    /// Where to receive ticks (PULL, bound; `*` picks a free port).
    #[arg(long, env = "CEP_WORKER_LISTEN", default_value = "tcp://0.0.0.0:*")]
    pub listen: String,
    /// The host name or address the router should use to reach this worker; `auto` picks
    /// this host's address on the route to the router.
    #[arg(long, env = "CEP_ADVERTISE", default_value = "auto")]
    pub advertise: String,
    /// Most outputs in one batch to the collector.
    #[arg(long, env = "CEP_BATCH", default_value_t = cep_core::wire::DEFAULT_BATCH)]
    pub batch: usize,
    /// Frames larger than this many bytes are rejected.
    #[arg(long, env = "CEP_MAX_FRAME_BYTES", default_value_t = cep_core::wire::DEFAULT_MAX_FRAME_BYTES)]
    pub max_frame_bytes: usize,
    /// Batches queued towards the collector before sending blocks.
    #[arg(long, env = "CEP_HWM", default_value_t = 1000)]
    pub hwm: i32,
    /// How long to wait for the run to start.
    #[arg(long, env = "CEP_START_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub start_timeout: Duration,
    /// After its report: how long to keep the sockets open waiting for the end of the run.
    #[arg(long, env = "CEP_END_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub end_timeout: Duration,
}

impl WorkerConfig {
    /// Checks what clap cannot.
    pub fn validate(&self) -> Result<(), String> {
        if self.batch == 0 {
            return Err("--batch must be at least 1".into());
        }
        Ok(())
    }

    pub fn worker_id(&self) -> String {
        self.id.clone().unwrap_or_else(|| {
            // In containers every process is pid 1: the host name tells them apart.
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
            let host = host.trim();
            format!("{}-{}", if host.is_empty() { "worker" } else { host }, std::process::id())
        })
    }
}
