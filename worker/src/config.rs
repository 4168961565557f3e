//! The worker's flags.

use cep_core::duration::parse_duration;
use cep_engine::RulesConfig;
use clap::Args;
use std::time::Duration;

/// Which rules run and how (DESIGN section 2). Shared by the worker, the launcher and the
/// benchmarks so that the same flags mean the same everywhere.
#[derive(Args, Clone, Debug)]
pub struct RulesArgs {
    /// Rules to evaluate, comma-separated: perc, trend, volatility.
    #[arg(long, env = "CEP_RULES", value_delimiter = ',', default_value = "perc,trend,volatility")]
    pub rules: Vec<RuleName>,
    /// R1: emit when the change since the previous tick exceeds this many percent either way.
    #[arg(long, env = "CEP_PERC_THRESHOLD", default_value_t = 2.0)]
    pub perc_threshold: f64,
    /// R2: emit from this many consecutive rises on.
    #[arg(long, env = "CEP_TREND_RISES", default_value_t = 3)]
    pub trend_rises: u32,
    /// R3: the volatility window, in event time (e.g. 10s, 500ms).
    #[arg(long, env = "CEP_WINDOW", default_value = "10s", value_parser = parse_duration)]
    pub window: Duration,
    /// The Oracle variant: evaluate only the first N symbols (S0000..), filter out the rest.
    #[arg(long, env = "CEP_MONITOR_FIRST", conflicts_with = "monitor")]
    pub monitor_first: Option<usize>,
    /// The Oracle variant with an explicit list of monitored symbols, comma-separated.
    #[arg(long, env = "CEP_MONITOR", value_delimiter = ',')]
    pub monitor: Option<Vec<String>>,
}

/// A rule's name on the command line.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleName {
    Perc,
    Trend,
    Volatility,
}

impl Default for RulesArgs {
    fn default() -> Self {
        RulesArgs {
            rules: vec![RuleName::Perc, RuleName::Trend, RuleName::Volatility],
            perc_threshold: 2.0,
            trend_rises: 3,
            window: Duration::from_secs(10),
            monitor_first: None,
            monitor: None,
        }
    }
}

impl RulesArgs {
    /// The engine configuration these flags describe, validated.
    pub fn to_config(&self) -> Result<RulesConfig, String> {
        let monitored = match (&self.monitor_first, &self.monitor) {
            (Some(first), _) => Some((0..*first).map(cep_core::gbm::symbol_name).collect()),
            (None, Some(list)) => Some(list.iter().cloned().collect()),
            (None, None) => None,
        };
        let config = RulesConfig {
            perc: self.rules.contains(&RuleName::Perc),
            perc_threshold: self.perc_threshold,
            trend: self.rules.contains(&RuleName::Trend),
            trend_rises: self.trend_rises,
            volatility: self.rules.contains(&RuleName::Volatility),
            window_ns: self.window.as_nanos().min(u64::MAX as u128) as u64,
            monitored,
        };
        config.validate().map_err(|error| error.to_string())?;
        Ok(config)
    }

    /// The same flags as command-line arguments, to start a worker process with them.
    pub fn to_args(&self) -> Vec<String> {
        let names: Vec<&str> = self
            .rules
            .iter()
            .map(|rule| match rule {
                RuleName::Perc => "perc",
                RuleName::Trend => "trend",
                RuleName::Volatility => "volatility",
            })
            .collect();
        let mut args = vec![
            format!("--rules={}", names.join(",")),
            format!("--perc-threshold={}", self.perc_threshold),
            format!("--trend-rises={}", self.trend_rises),
            format!("--window={}ns", self.window.as_nanos()),
        ];
        if let Some(first) = self.monitor_first {
            args.push(format!("--monitor-first={first}"));
        }
        if let Some(list) = &self.monitor {
            args.push(format!("--monitor={}", list.join(",")));
        }
        args
    }
}

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
    #[command(flatten)]
    pub rules: RulesArgs,
}

impl WorkerConfig {
    pub fn worker_id(&self) -> String {
        self.id.clone().unwrap_or_else(|| {
            // In containers every process is pid 1: the host name tells them apart.
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
            let host = host.trim();
            format!("{}-{}", if host.is_empty() { "worker" } else { host }, std::process::id())
        })
    }
}
