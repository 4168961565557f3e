//! The router's flags.

use crate::rendezvous::WorkerCount;
use crate::router::RouterSettings;
use cep_telemetry::args::{at_least_one, failure_timeout, high_water_mark, Flags};
use clap::Args;
use std::time::Duration;

/// Symbols moved at a time by default when a worker joins or leaves (measured: 16 keeps the
/// worst moved-symbol output within 5x the steady p99 at 200k ticks/s; 64 went to 11x).
pub const DEFAULT_MOVE_SLICE: usize = 16;
/// Ticks held for moving symbols, by default, before the router stops reading input.
pub const DEFAULT_MAX_HELD: usize = 100_000;

/// Replay-log bytes (all workers) the router keeps by default: at 1 M ev/s (about 50 bytes a
/// tick in a batch) some five seconds of ticks, several default checkpoint intervals.
pub const DEFAULT_MAX_REPLAY: usize = 256 << 20;

/// The least `--max-replay`.
pub const MIN_MAX_REPLAY: usize = 1 << 20;

/// Router settings; every flag can also be set from the environment. `Default` is the flags'
/// defaults.
#[derive(Args, Clone, Debug, PartialEq)]
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
    /// When a worker joins or leaves the running cluster: how many symbols move at a time
    /// (their ticks wait while their state moves; smaller slices, shorter waits).
    #[arg(long, env = "CEP_MOVE_SLICE", default_value_t = DEFAULT_MOVE_SLICE)]
    pub move_slice: usize,
    /// Ticks of moving symbols the router holds before it stops reading input until the move
    /// catches up (the injectors then wait: nothing is dropped).
    #[arg(long, env = "CEP_MAX_HELD", default_value_t = DEFAULT_MAX_HELD)]
    pub max_held: usize,
    /// How long the state of one slice of moving symbols may take to arrive before the router
    /// gives the move up (the old owner died or hangs): the symbols then go on at their new
    /// owners from empty windows, named in the log and in the summary's `rescales`.
    #[arg(long, env = "CEP_MOVE_TIMEOUT", default_value = "10s", value_parser = cep_core::duration::parse_duration)]
    pub move_timeout: Duration,
    /// How often each worker's state is checkpointed (0: never; a dead worker's symbols then
    /// go on from empty state). A dead worker's symbols are restored from its last checkpoint
    /// and its ticks since then replayed.
    #[arg(long, env = "CEP_CHECKPOINT_EVERY", default_value = "1s", value_parser = cep_core::duration::parse_duration)]
    pub checkpoint_every: Duration,
    /// How many confirmed checkpoints of each worker the checkpoint store keeps, each with
    /// what a restore of it reads (its last whole snapshot and the changes since); the
    /// workers remove older parts at each barrier. A failover restores the latest. At least 1.
    #[arg(long, env = "CEP_CHECKPOINTS_RETAINED", default_value_t = 1)]
    pub checkpoints_retained: usize,
    /// The cluster's checkpoint store: every worker not given a folder of its own (`cep
    /// worker --checkpoint-dir`) is told to store its snapshots here, so that workers started
    /// by hand store where the others do. The router itself never reads or writes it. Without
    /// it, such a worker uses its own default.
    #[arg(long, env = "CEP_CHECKPOINT_DIR")]
    pub checkpoint_dir: Option<std::path::PathBuf>,
    /// Bytes of ticks kept for replay (all workers together, since their last checkpoints)
    /// beyond which the router reads no input until a checkpoint completes (the injectors
    /// then wait: nothing is dropped). At least 1 MiB.
    #[arg(long, env = "CEP_MAX_REPLAY", default_value_t = DEFAULT_MAX_REPLAY)]
    pub max_replay: usize,
    /// How long a lost collector may take to come back (restarted with the same --out, it
    /// resumes from its saved state): meanwhile the run goes on and every frame for it is
    /// held; after this the run ends with an error (0: at once).
    #[arg(long, env = "CEP_COLLECTOR_RETENTION", default_value = "60s", value_parser = cep_core::duration::parse_duration)]
    pub collector_retention: Duration,
    /// Failure detection of the workers and the collector (a dead worker fails over and is
    /// fenced; a dead collector has --collector-retention to come back): a peer whose
    /// connection drops and stays down for an eighth of this is dead, one never reached after
    /// ten times this, and one not heard from for this long (each sends a heartbeat every
    /// quarter of it) is taken for dead whatever its connection says; TCP keepalive probes at
    /// a quarter of it (at least 1 s).
    #[arg(long, env = "CEP_FAILURE_TIMEOUT", default_value = "2s", value_parser = cep_core::duration::parse_duration)]
    pub failure_timeout: Duration,
    /// Write the endpoints actually bound (`data=...`, `control=...`) to this file once
    /// listening, so that `*` ports can be used and found (the launcher does).
    #[arg(long, env = "CEP_ANNOUNCE")]
    pub announce: Option<std::path::PathBuf>,
    /// CURVE: this process's key pair and the cluster's public keys (docs/SECURITY.md).
    #[command(flatten)]
    pub security: cep_transport::security::SecurityArgs,
}

impl Default for RouterConfig {
    fn default() -> RouterConfig {
        RouterConfig {
            listen: "tcp://0.0.0.0:5555".into(),
            control: "tcp://0.0.0.0:5556".into(),
            workers: 2,
            settle: Duration::from_secs(3),
            streams: 1,
            vnodes: cep_core::partition::DEFAULT_VNODES,
            batch: cep_core::wire::DEFAULT_BATCH,
            max_frame_bytes: cep_core::wire::DEFAULT_MAX_FRAME_BYTES,
            hwm: 1000,
            start_timeout: Duration::ZERO,
            end_timeout: Duration::from_secs(60),
            rules: None,
            allowed_lateness: None,
            move_slice: DEFAULT_MOVE_SLICE,
            max_held: DEFAULT_MAX_HELD,
            move_timeout: Duration::from_secs(10),
            checkpoint_every: Duration::from_secs(1),
            checkpoints_retained: 1,
            checkpoint_dir: None,
            max_replay: DEFAULT_MAX_REPLAY,
            collector_retention: Duration::from_secs(60),
            failure_timeout: Duration::from_secs(2),
            announce: None,
            security: Default::default(),
        }
    }
}

impl RouterConfig {
    /// What the core needs of the flags.
    pub fn settings(&self) -> RouterSettings {
        let ns = |duration: Duration| u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        RouterSettings {
            workers: match self.workers {
                0 => WorkerCount::Settle(self.settle),
                n => WorkerCount::Exactly(n),
            },
            streams: self.streams,
            vnodes: self.vnodes,
            batch: self.batch,
            max_frame_bytes: self.max_frame_bytes,
            allowed_lateness_ns: self.allowed_lateness.map(ns),
            slice_symbols: self.move_slice,
            max_held_ticks: self.max_held,
            move_timeout_ns: ns(self.move_timeout),
            checkpoint_every_ns: ns(self.checkpoint_every),
            checkpoints_retained: self.checkpoints_retained,
            // Absolute: the workers' working folders are not the router's (checked UTF-8).
            checkpoint_dir: self
                .checkpoint_dir
                .as_deref()
                .map(|dir| {
                    std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf()).to_string_lossy().into_owned()
                })
                .unwrap_or_default(),
            max_replay_bytes: self.max_replay,
            failure_timeout: self.failure_timeout,
        }
    }

    /// Checks what clap cannot; the error says which flag and why.
    pub fn validate(&self) -> Result<(), String> {
        cep_telemetry::args::endpoint("listen", &self.listen)?;
        cep_telemetry::args::endpoint("control", &self.control)?;
        at_least_one("streams", self.streams as usize)?;
        at_least_one("batch", self.batch)?;
        at_least_one("vnodes", self.vnodes)?;
        cep_telemetry::args::max_frame_bytes(self.max_frame_bytes)?;
        at_least_one("move-slice", self.move_slice)?;
        at_least_one("max-held", self.max_held)?;
        at_least_one("checkpoints-retained", self.checkpoints_retained)?;
        if let Some(dir) = &self.checkpoint_dir {
            if dir.to_str().is_none_or(str::is_empty) {
                return Err(format!("--checkpoint-dir {}: must be a non-empty UTF-8 path", dir.display()));
            }
        }
        if self.move_timeout.is_zero() {
            return Err("--move-timeout must be longer than 0: every move would be given up at once".into());
        }
        if self.max_replay < MIN_MAX_REPLAY {
            // A few bytes would take input one batch per checkpoint: a run slowed to a crawl.
            return Err(format!(
                "--max-replay must be at least {MIN_MAX_REPLAY} bytes (1 MiB): the router keeps every tick since \
                 the last checkpoint, and at the bound reads no input until the next one"
            ));
        }
        failure_timeout(self.failure_timeout)?;
        high_water_mark(self.hwm)
    }

    /// The flags that give this configuration back (`cep router` followed by them).
    pub fn to_args(&self) -> Vec<String> {
        Flags::new()
            .value("listen", &self.listen)
            .value("control", &self.control)
            .value("workers", self.workers)
            .duration("settle", self.settle)
            .value("streams", self.streams)
            .value("vnodes", self.vnodes)
            .value("batch", self.batch)
            .value("max-frame-bytes", self.max_frame_bytes)
            .value("hwm", self.hwm)
            .duration("start-timeout", self.start_timeout)
            .duration("end-timeout", self.end_timeout)
            .some_path("rules", self.rules.as_deref())
            .some_duration("allowed-lateness", self.allowed_lateness)
            .value("move-slice", self.move_slice)
            .value("max-held", self.max_held)
            .duration("move-timeout", self.move_timeout)
            .duration("checkpoint-every", self.checkpoint_every)
            .value("checkpoints-retained", self.checkpoints_retained)
            .some_path("checkpoint-dir", self.checkpoint_dir.as_deref())
            .value("max-replay", self.max_replay)
            .duration("collector-retention", self.collector_retention)
            .duration("failure-timeout", self.failure_timeout)
            .some_path("announce", self.announce.as_deref())
            .extend(self.security.to_args())
            .into_args()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cep_telemetry::args::parse_flags;

    #[test]
    fn default_is_what_no_flags_give() {
        assert_eq!(parse_flags::<RouterConfig>(&[]).unwrap(), RouterConfig::default());
        assert_eq!(RouterConfig::default().validate(), Ok(()));
    }

    #[test]
    fn to_args_parses_back() {
        let config = RouterConfig {
            listen: "ipc:///tmp/router-data".into(),
            control: "tcp://127.0.0.1:*".into(),
            workers: 0,
            settle: Duration::from_millis(1500),
            streams: 4,
            vnodes: 16,
            batch: 64,
            max_frame_bytes: 1 << 20,
            hwm: 0,
            start_timeout: Duration::from_secs(5),
            end_timeout: Duration::from_nanos(1),
            rules: Some("rules/oracle-400.rules".into()),
            allowed_lateness: Some(Duration::from_micros(2500)),
            move_slice: 7,
            max_held: 99,
            move_timeout: Duration::from_millis(1500),
            checkpoint_every: Duration::from_millis(250),
            checkpoints_retained: 3,
            checkpoint_dir: Some("/mnt/shared/checkpoints".into()),
            max_replay: 1 << 20,
            collector_retention: Duration::from_secs(7),
            failure_timeout: Duration::from_millis(700),
            announce: Some("/tmp/router.endpoints".into()),
            security: cep_transport::security::SecurityArgs {
                key: Some("/etc/cep/router.key".into()),
                keys: Some("/etc/cep/public".into()),
                insecure: false,
            },
        };
        assert_eq!(parse_flags::<RouterConfig>(&config.to_args()).unwrap(), config);
        let default = RouterConfig::default();
        assert_eq!(parse_flags::<RouterConfig>(&default.to_args()).unwrap(), default);
    }

    #[test]
    fn validate_says_which_flag() {
        let error = |config: RouterConfig| config.validate().unwrap_err();
        assert!(error(RouterConfig { max_replay: 1_000, ..RouterConfig::default() })
            .starts_with("--max-replay must be at least 1048576 bytes"));
        assert_eq!(error(RouterConfig { streams: 0, ..RouterConfig::default() }), "--streams must be at least 1");
        assert_eq!(error(RouterConfig { batch: 0, ..RouterConfig::default() }), "--batch must be at least 1");
        assert_eq!(error(RouterConfig { vnodes: 0, ..RouterConfig::default() }), "--vnodes must be at least 1");
        assert!(error(RouterConfig { max_frame_bytes: 0, ..RouterConfig::default() }).starts_with("--max-frame-bytes"));
        assert!(error(RouterConfig { hwm: -1, ..RouterConfig::default() }).starts_with("--hwm"));
    }
}
