//! The worker's flags.

use cep_core::duration::parse_duration;
use cep_telemetry::args::{at_least_one, failure_timeout, high_water_mark, Flags};
use clap::Args;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Worker settings; every flag can also be set from the environment. `Default` is the flags'
/// defaults.
#[derive(Args, Clone, Debug, PartialEq)]
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
    /// Bytes of frames to the collector held until the collector has saved them (a restarted
    /// collector is sent them again); at this bound the worker stops taking ticks until the
    /// collector saves (or a lost one is replaced), and the router and injectors wait.
    #[arg(long, env = "CEP_MAX_UNSAVED", default_value_t = DEFAULT_MAX_UNSAVED)]
    pub max_unsaved: usize,
    /// The checkpoint store: the folder this worker writes its snapshots to (in `run-<start>`
    /// of its own per run) and reads a dead worker's back from. Every worker of a cluster
    /// must see the same folder (on several hosts: a shared mount, NFS or EFS) for a dead
    /// worker's state to be restored elsewhere. Without it: the folder the router names (its
    /// `--checkpoint-dir`; `cep run` names `<out>/checkpoints`), or else `cep-checkpoints` in
    /// the system's temporary folder.
    #[arg(long, env = "CEP_CHECKPOINT_DIR")]
    pub checkpoint_dir: Option<PathBuf>,
    /// Failure detection of the router (this worker then stops, exit status non-zero, naming
    /// it) and of the collector (its frames are held until a restarted one takes over): a peer whose connection drops and stays down for an eighth of this
    /// is dead, one never reached after ten times this; TCP keepalive probes at a quarter of
    /// it (at least 1 s).
    #[arg(long, env = "CEP_FAILURE_TIMEOUT", default_value = "2s", value_parser = parse_duration)]
    pub failure_timeout: Duration,
    /// CURVE: this process's key pair and the cluster's public keys (docs/SECURITY.md).
    #[command(flatten)]
    pub security: cep_transport::security::SecurityArgs,
}

/// Default bound of the frames held for the collector: about ten seconds of outputs at full
/// speed, longer than a restarted collector takes to come back.
pub const DEFAULT_MAX_UNSAVED: usize = 256 << 20;

/// The checkpoint store's folder when neither the worker nor the router names one:
/// `cep-checkpoints` in the system's temporary folder, which every worker of one host shares.
pub fn default_checkpoint_dir() -> PathBuf {
    std::env::temp_dir().join("cep-checkpoints")
}

/// The smallest bound allowed: below it a run without failures crawls.
pub const MIN_MAX_UNSAVED: usize = 1 << 20;

impl Default for WorkerConfig {
    fn default() -> WorkerConfig {
        WorkerConfig {
            router: "tcp://127.0.0.1:5556".into(),
            id: None,
            listen: "tcp://0.0.0.0:*".into(),
            advertise: "auto".into(),
            batch: cep_core::wire::DEFAULT_BATCH,
            max_frame_bytes: cep_core::wire::DEFAULT_MAX_FRAME_BYTES,
            hwm: 1000,
            start_timeout: Duration::from_secs(60),
            end_timeout: Duration::from_secs(60),
            max_unsaved: DEFAULT_MAX_UNSAVED,
            checkpoint_dir: None,
            failure_timeout: Duration::from_secs(2),
            security: Default::default(),
        }
    }
}

impl WorkerConfig {
    /// Checks what clap cannot; the error says which flag and why.
    pub fn validate(&self) -> Result<(), String> {
        if self.id.as_deref().is_some_and(|id| id.trim().is_empty()) {
            return Err("--id must not be empty".into());
        }
        cep_telemetry::args::endpoint("router", &self.router)?;
        cep_telemetry::args::endpoint("listen", &self.listen)?;
        at_least_one("batch", self.batch)?;
        cep_telemetry::args::max_frame_bytes(self.max_frame_bytes)?;
        if self.max_unsaved < MIN_MAX_UNSAVED {
            return Err(format!(
                "--max-unsaved must be at least {MIN_MAX_UNSAVED} bytes (1 MiB): the worker holds its frames until the \
                 collector saves them, a few times a second, and a smaller bound stalls the run"
            ));
        }
        failure_timeout(self.failure_timeout)?;
        high_water_mark(self.hwm)
    }

    /// The flags that give this configuration back (`cep worker` followed by them).
    pub fn to_args(&self) -> Vec<String> {
        Flags::new()
            .value("router", &self.router)
            .some("id", self.id.as_ref())
            .value("listen", &self.listen)
            .value("advertise", &self.advertise)
            .value("batch", self.batch)
            .value("max-frame-bytes", self.max_frame_bytes)
            .value("hwm", self.hwm)
            .duration("start-timeout", self.start_timeout)
            .duration("end-timeout", self.end_timeout)
            .value("max-unsaved", self.max_unsaved)
            .some_path("checkpoint-dir", self.checkpoint_dir.as_deref())
            .duration("failure-timeout", self.failure_timeout)
            .extend(self.security.to_args())
            .into_args()
    }

    /// The checkpoint store's folder before the router has named one: `--checkpoint-dir`, else
    /// the default. Checked before registering, so a worker that cannot store never joins.
    pub fn own_checkpoint_dir(&self) -> PathBuf {
        self.checkpoint_dir.clone().unwrap_or_else(default_checkpoint_dir)
    }

    /// The folder the router named in Ready (`named`, empty if none), when this worker takes
    /// it: only when given no `--checkpoint-dir`, and only an absolute path with no `..` (the
    /// router cannot know this worker's working folder, and names a store, not a way out of
    /// one). The reason when it is refused.
    pub fn router_checkpoint_dir(&self, named: &str) -> Result<Option<PathBuf>, String> {
        if self.checkpoint_dir.is_some() || named.is_empty() {
            return Ok(None);
        }
        let path = Path::new(named);
        if !path.is_absolute() || path.components().any(|part| part == std::path::Component::ParentDir) {
            return Err(format!("the router named the checkpoint folder {named:?}: not an absolute path without `..`"));
        }
        Ok(Some(path.to_path_buf()))
    }

    /// The id to register with: `--id`, or else `<host name>-<pid>`.
    pub fn worker_id(&self) -> String {
        self.id.clone().unwrap_or_else(|| {
            // In containers every process is pid 1: the host name tells them apart.
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
            let host = host.trim();
            format!("{}-{}", if host.is_empty() { "worker" } else { host }, std::process::id())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cep_telemetry::args::parse_flags;

    #[test]
    fn default_is_what_no_flags_give() {
        assert_eq!(parse_flags::<WorkerConfig>(&[]).unwrap(), WorkerConfig::default());
        assert_eq!(WorkerConfig::default().validate(), Ok(()));
    }

    #[test]
    fn to_args_parses_back() {
        let config = WorkerConfig {
            router: "tcp://10.0.1.10:5556".into(),
            id: Some("worker-7".into()),
            listen: "ipc:///tmp/worker-7".into(),
            advertise: "127.0.0.1".into(),
            batch: 1,
            max_frame_bytes: 1 << 21,
            hwm: 0,
            start_timeout: Duration::from_millis(300),
            end_timeout: Duration::from_secs(2),
            max_unsaved: 1 << 20,
            checkpoint_dir: Some("/mnt/shared/checkpoints".into()),
            failure_timeout: Duration::from_millis(900),
            security: cep_transport::security::SecurityArgs {
                key: Some("/etc/cep/worker.key".into()),
                keys: Some("/etc/cep/public".into()),
                insecure: false,
            },
        };
        assert_eq!(parse_flags::<WorkerConfig>(&config.to_args()).unwrap(), config);
    }

    #[test]
    fn the_checkpoint_folder_is_the_workers_own_else_the_routers_else_the_default() {
        let own = WorkerConfig { checkpoint_dir: Some("/own".into()), ..WorkerConfig::default() };
        assert_eq!(own.own_checkpoint_dir(), PathBuf::from("/own"));
        assert_eq!(own.router_checkpoint_dir("/cluster"), Ok(None), "its own wins");
        let unset = WorkerConfig::default();
        assert_eq!(unset.own_checkpoint_dir(), default_checkpoint_dir());
        assert_eq!(unset.router_checkpoint_dir("/cluster"), Ok(Some("/cluster".into())));
        assert_eq!(unset.router_checkpoint_dir(""), Ok(None));
        for refused in ["relative/dir", "/cluster/../etc"] {
            assert!(unset.router_checkpoint_dir(refused).unwrap_err().contains("not an absolute path without `..`"));
        }
    }

    #[test]
    fn validate_says_which_flag() {
        let error = |config: WorkerConfig| config.validate().unwrap_err();
        assert_eq!(error(WorkerConfig { batch: 0, ..WorkerConfig::default() }), "--batch must be at least 1");
        assert_eq!(error(WorkerConfig { id: Some(" ".into()), ..WorkerConfig::default() }), "--id must not be empty");
        assert!(error(WorkerConfig { max_frame_bytes: 0, ..WorkerConfig::default() }).starts_with("--max-frame-bytes"));
        assert!(error(WorkerConfig { hwm: -5, ..WorkerConfig::default() }).starts_with("--hwm"));
        assert!(error(WorkerConfig { max_unsaved: 1000, ..WorkerConfig::default() })
            .starts_with("--max-unsaved must be at least 1048576"));
    }
}
