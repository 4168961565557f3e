//! `cep node`: one role of a multi-host cluster, configured from the cluster file that every
//! host shares (`deploy/hosts/cluster.toml`), so hosts differ only in `--role` (and `--id`).
//! The file becomes the role's typed configuration, which runs as `cep <role>` runs it.

use crate::cli::{RoleConfig, Usage};
use anyhow::{bail, Context as _};
use cep_collector::{CollectorConfig, CsvMode};
use cep_core::identity::Role;
use cep_injector::InjectorConfig;
use cep_router::RouterConfig;
use cep_telemetry::MetricsArgs;
use cep_worker::WorkerConfig;
use clap::Args;
use serde::{Deserialize, Deserializer};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct NodeArgs {
    /// The cluster file.
    #[arg(long, env = "CEP_CLUSTER", default_value = "/etc/cep/cluster.toml")]
    pub config: PathBuf,
    /// Which role this process plays.
    #[arg(long, env = "CEP_ROLE", value_parser = node_role)]
    pub role: Role,
    /// For a worker: its id in the cluster file.
    #[arg(long, env = "CEP_WORKER_ID")]
    pub id: Option<String>,
}

/// A role `cep node` can run (every role but the operator's).
fn node_role(name: &str) -> Result<Role, String> {
    match Role::from_name(name) {
        Some(Role::Operator) | None => {
            Err(format!("`{name}` is not a role a node runs (router, collector, worker, injector)"))
        }
        Some(role) => Ok(role),
    }
}

/// The cluster file.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct ClusterFile {
    pub router: RouterHost,
    pub collector: CollectorHost,
    pub workers: Vec<WorkerHost>,
    pub injector: InjectorHost,
    #[serde(default)]
    pub metrics: MetricsSection,
    #[serde(default)]
    pub security: SecuritySection,
}

/// CURVE on every socket, by default (docs/SECURITY.md): each host holds its own key pair in
/// `keys` (`router.key`, `collector.key`, `injector.key`, `<worker id>.key`) and the cluster's
/// public keys in `keys/public` (`cep keys init DIR --worker <id>...` writes them all).
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct SecuritySection {
    /// The folder of this host's key pair and the public keys.
    #[serde(default = "default_keys_dir")]
    pub keys: PathBuf,
    /// Run open: no encryption, no authentication (the explicit opt-out).
    #[serde(default)]
    pub insecure: bool,
}

impl Default for SecuritySection {
    fn default() -> Self {
        SecuritySection { keys: default_keys_dir(), insecure: false }
    }
}

fn default_keys_dir() -> PathBuf {
    PathBuf::from("/etc/cep/keys")
}

impl SecuritySection {
    /// The security flags of the process holding `name`'s key.
    fn args(&self, name: &str) -> cep_transport::security::SecurityArgs {
        cep_transport::security::SecurityArgs {
            key: Some(self.keys.join(format!("{name}.key"))),
            keys: Some(self.keys.join("public")),
            insecure: self.insecure,
        }
    }
}

/// Prometheus metrics: each host section's `metrics_port` turns them on for its process.
#[derive(Deserialize, Debug, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct MetricsSection {
    /// After a run, keep serving until a scrape has read the final values, at most this long.
    #[serde(default, deserialize_with = "some_duration")]
    pub linger: Option<Duration>,
}

#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct RouterHost {
    /// The address the other hosts use to reach the router.
    pub host: String,
    #[serde(default = "default_data_port")]
    pub data_port: u16,
    #[serde(default = "default_control_port")]
    pub control_port: u16,
    /// The rules file the run starts with, on the router's host (default: the built-in
    /// reference rules). `cep rules deploy` replaces them while the cluster runs.
    #[serde(default)]
    pub rules: Option<PathBuf>,
    /// Where the router serves Prometheus metrics (`/metrics` on every address); none if unset.
    #[serde(default)]
    pub metrics_port: Option<u16>,
}

#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct CollectorHost {
    pub host: String,
    #[serde(default = "default_collector_port")]
    pub port: u16,
    #[serde(default = "default_out")]
    pub out: PathBuf,
    #[serde(default = "default_csv", deserialize_with = "csv_mode")]
    pub csv: CsvMode,
    #[serde(default = "default_idle", deserialize_with = "duration")]
    pub idle_timeout: Duration,
    #[serde(default)]
    pub metrics_port: Option<u16>,
}

#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct WorkerHost {
    pub id: String,
    pub host: String,
    #[serde(default = "default_worker_port")]
    pub port: u16,
    #[serde(default)]
    pub metrics_port: Option<u16>,
}

#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct InjectorHost {
    pub host: String,
    #[serde(default)]
    pub rate: f64,
    #[serde(default, deserialize_with = "some_duration")]
    pub duration: Option<Duration>,
    pub count: Option<u64>,
    #[serde(default = "default_warmup", deserialize_with = "duration")]
    pub warmup: Duration,
    #[serde(default = "default_connections")]
    pub connections: usize,
    #[serde(default = "default_symbols")]
    pub symbols: usize,
    #[serde(default = "default_seed")]
    pub seed: u64,
    #[serde(default)]
    pub metrics_port: Option<u16>,
}

fn default_data_port() -> u16 {
    5555
}
fn default_control_port() -> u16 {
    5556
}
fn default_collector_port() -> u16 {
    5557
}
fn default_worker_port() -> u16 {
    5560
}
fn default_out() -> PathBuf {
    "/var/lib/cep/results".into()
}
fn default_csv() -> CsvMode {
    CollectorConfig::default().csv
}
fn default_idle() -> Duration {
    CollectorConfig::default().idle_timeout
}
fn default_warmup() -> Duration {
    Duration::from_secs(1)
}
fn default_connections() -> usize {
    InjectorConfig::default().connections
}
fn default_symbols() -> usize {
    cep_core::reference::SYMBOLS
}
fn default_seed() -> u64 {
    cep_core::reference::SEED
}

/// A duration as the flags write it (`30s`, `500ms`); a mistake says where in the file.
fn duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(deserializer)?;
    cep_core::duration::parse_duration(&text).map_err(serde::de::Error::custom)
}

fn some_duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Duration>, D::Error> {
    duration(deserializer).map(Some)
}

/// `all`, `alerts` or `none`, as `--csv` takes them.
fn csv_mode<'de, D: Deserializer<'de>>(deserializer: D) -> Result<CsvMode, D::Error> {
    let text = String::deserialize(deserializer)?;
    <CsvMode as clap::ValueEnum>::from_str(&text, false)
        .map_err(|_| serde::de::Error::custom(format!("`{text}` is not a csv mode (all, alerts, none)")))
}

/// Where the settings come from that the cluster file does not give.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unsaid {
    /// Each role's defaults.
    Defaults,
    /// What the role takes given no flag: its environment variable, else its default (so a
    /// unit's `Environment=CEP_...` applies, as to `cep <role>`). What `cep node` uses.
    Environment,
}

impl Unsaid {
    fn settings<T: clap::Args + clap::FromArgMatches + Default>(self) -> anyhow::Result<T> {
        match self {
            Unsaid::Defaults => Ok(T::default()),
            Unsaid::Environment => crate::cli::from_environment(),
        }
    }
}

impl ClusterFile {
    pub fn load(path: &std::path::Path) -> anyhow::Result<ClusterFile> {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        let file: ClusterFile = toml::from_str(&text).map_err(|error| {
            // toml's message spans several lines with a caret; one line says what and where.
            let message = error.message().to_string();
            let at = error.span().map(|span| line_of(&text, span.start)).unwrap_or(0);
            anyhow::anyhow!("{}:{at}: {message}", path.display())
        })?;
        if file.workers.is_empty() {
            bail!("{}: the cluster has no [[workers]]", path.display());
        }
        let mut ids: Vec<&str> = file.workers.iter().map(|w| w.id.as_str()).collect();
        ids.sort();
        if let Some(pair) = ids.windows(2).find(|pair| pair[0] == pair[1]) {
            bail!("{}: worker id `{}` appears twice", path.display(), pair[0]);
        }
        Ok(file)
    }

    fn router_control(&self) -> String {
        format!("tcp://{}:{}", self.router.host, self.router.control_port)
    }

    /// One role of this cluster as its typed configuration, with its metrics; the settings
    /// the file does not give come from `unsaid`.
    pub fn role(&self, role: Role, id: Option<&str>, unsaid: Unsaid) -> anyhow::Result<(RoleConfig, MetricsArgs)> {
        let config = self.role_config(role, id, unsaid)?;
        let metrics_port = match role {
            Role::Router => self.router.metrics_port,
            Role::Collector => self.collector.metrics_port,
            Role::Worker => self.workers.iter().find(|w| Some(w.id.as_str()) == id).and_then(|w| w.metrics_port),
            Role::Injector => self.injector.metrics_port,
            Role::Operator => None,
        };
        let mut metrics: MetricsArgs = unsaid.settings()?;
        if let Some(port) = metrics_port {
            metrics.metrics_listen = Some(format!("0.0.0.0:{port}"));
            if let Some(linger) = self.metrics.linger {
                metrics.metrics_linger = linger;
            }
        }
        Ok((config, metrics))
    }

    fn role_config(&self, role: Role, id: Option<&str>, unsaid: Unsaid) -> anyhow::Result<RoleConfig> {
        let router = self.router_control();
        Ok(match role {
            Role::Operator => anyhow::bail!("an operator is not a role a node runs"),
            Role::Router => {
                let base: RouterConfig = unsaid.settings()?;
                let streams = self.injector.connections;
                RoleConfig::Router(RouterConfig {
                    listen: format!("tcp://0.0.0.0:{}", self.router.data_port),
                    control: format!("tcp://0.0.0.0:{}", self.router.control_port),
                    workers: self.workers.len(),
                    streams: u32::try_from(streams).map_err(|_| {
                        anyhow::anyhow!("[injector] connections = {streams} is more than a router takes")
                    })?,
                    rules: self.router.rules.clone().or(base.rules),
                    security: self.security.args("router"),
                    ..base
                })
            }
            Role::Collector => {
                let base: CollectorConfig = unsaid.settings()?;
                RoleConfig::Collector {
                    config: CollectorConfig {
                        listen: format!("tcp://0.0.0.0:{}", self.collector.port),
                        router,
                        advertise: self.collector.host.clone(),
                        out: self.collector.out.clone(),
                        csv: self.collector.csv,
                        idle_timeout: self.collector.idle_timeout,
                        // A service's output is its journal: progress every second, the report
                        // at the end.
                        progress: true,
                        security: self.security.args("collector"),
                        ..base
                    },
                    print_report: true,
                }
            }
            Role::Worker => {
                let Some(id) = id else {
                    bail!("--role worker needs --id (one of the cluster file's [[workers]] ids)")
                };
                let Some(worker) = self.workers.iter().find(|w| w.id == id) else {
                    let known: Vec<&str> = self.workers.iter().map(|w| w.id.as_str()).collect();
                    bail!("worker id `{id}` is not in the cluster file (it has {})", known.join(", "));
                };
                RoleConfig::Worker(WorkerConfig {
                    router,
                    id: Some(id.to_string()),
                    listen: format!("tcp://0.0.0.0:{}", worker.port),
                    advertise: worker.host.clone(),
                    security: self.security.args(id),
                    ..unsaid.settings()?
                })
            }
            Role::Injector => {
                let i = &self.injector;
                if i.count.is_none() && i.duration.is_none() {
                    bail!("[injector] needs `duration` or `count`");
                }
                let base: InjectorConfig = unsaid.settings()?;
                RoleConfig::Injector(InjectorConfig {
                    router,
                    router_data: format!("tcp://{}:{}", self.router.host, self.router.data_port),
                    rate: i.rate,
                    warmup: i.warmup,
                    connections: i.connections,
                    symbols: i.symbols,
                    seed: i.seed,
                    // A count overrides a duration.
                    count: i.count.or(base.count),
                    duration: i.duration.or(base.duration),
                    security: self.security.args("injector"),
                    ..base
                })
            }
        })
    }
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].lines().count().max(1)
}

/// Runs the role this host plays, as `cep <role>` runs it. A mistake in the file, the
/// flags or the environment is one usage line (exit status 2).
pub fn run(args: NodeArgs) -> anyhow::Result<()> {
    let cluster = ClusterFile::load(&args.config).map_err(|error| Usage::of(&error))?;
    let (role, metrics) =
        cluster.role(args.role, args.id.as_deref(), Unsaid::Environment).map_err(|error| Usage::of(&error))?;
    role.validate().map_err(|reason| {
        Usage(format!("{}: invalid {} configuration: {reason}", args.config.display(), role.command()))
    })?;
    crate::cli::run_role(role, &metrics)
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = include_str!("../../deploy/hosts/cluster.toml");

    fn example() -> ClusterFile {
        toml::from_str(EXAMPLE).unwrap()
    }

    fn role(cluster: &ClusterFile, role: Role, id: Option<&str>) -> anyhow::Result<(RoleConfig, MetricsArgs)> {
        cluster.role(role, id, Unsaid::Defaults)
    }

    #[test]
    fn the_shipped_example_gives_every_role_a_valid_configuration() {
        let cluster = example();
        let roles = [
            (Role::Router, None),
            (Role::Collector, None),
            (Role::Worker, Some(cluster.workers[0].id.as_str())),
            (Role::Injector, None),
        ];
        for (node_role, id) in roles {
            let (role, _) = role(&cluster, node_role, id).unwrap();
            assert_eq!(role.command(), node_role.name());
            assert_eq!(role.validate(), Ok(()), "{role:?}");
        }
        assert!(role(&cluster, Role::Worker, Some("nobody")).is_err());
        assert!(role(&cluster, Role::Worker, None).is_err());
    }

    #[test]
    fn the_file_says_what_each_role_runs_with() {
        let cluster = example();
        let RoleConfig::Router(router) = role(&cluster, Role::Router, None).unwrap().0 else { panic!() };
        assert_eq!(
            router,
            RouterConfig {
                listen: "tcp://0.0.0.0:5555".into(),
                control: "tcp://0.0.0.0:5556".into(),
                workers: 2,
                streams: 1,
                security: cep_transport::security::SecurityArgs {
                    key: Some("/etc/cep/keys/router.key".into()),
                    keys: Some("/etc/cep/keys/public".into()),
                    insecure: false,
                },
                ..RouterConfig::default()
            }
        );
        let RoleConfig::Worker(worker) = role(&cluster, Role::Worker, Some("worker-1")).unwrap().0 else { panic!() };
        assert_eq!(
            worker,
            WorkerConfig {
                router: "tcp://10.0.1.10:5556".into(),
                id: Some("worker-1".into()),
                listen: "tcp://0.0.0.0:5560".into(),
                advertise: "10.0.1.13".into(),
                security: cep_transport::security::SecurityArgs {
                    key: Some("/etc/cep/keys/worker-1.key".into()),
                    keys: Some("/etc/cep/keys/public".into()),
                    insecure: false,
                },
                ..WorkerConfig::default()
            }
        );
        let RoleConfig::Injector(injector) = role(&cluster, Role::Injector, None).unwrap().0 else { panic!() };
        assert_eq!(
            injector,
            InjectorConfig {
                router: "tcp://10.0.1.10:5556".into(),
                router_data: "tcp://10.0.1.10:5555".into(),
                rate: 200_000.0,
                duration: Some(Duration::from_secs(30)),
                warmup: Duration::from_secs(2),
                security: cep_transport::security::SecurityArgs {
                    key: Some("/etc/cep/keys/injector.key".into()),
                    keys: Some("/etc/cep/keys/public".into()),
                    insecure: false,
                },
                ..InjectorConfig::default()
            }
        );
        let mut counted = cluster.clone();
        counted.injector.duration = None;
        assert!(role(&counted, Role::Injector, None).unwrap_err().to_string().contains("`duration` or `count`"));
        counted.injector.count = Some(5_000_000);
        let RoleConfig::Injector(injector) = role(&counted, Role::Injector, None).unwrap().0 else { panic!() };
        assert_eq!((injector.count, injector.duration), (Some(5_000_000), None));
        // The explicit opt-out.
        let mut open = cluster.clone();
        open.security.insecure = true;
        let RoleConfig::Router(router) = role(&open, Role::Router, None).unwrap().0 else { panic!() };
        assert!(router.security.insecure);
    }

    #[test]
    fn metrics_ports_and_the_collector_journal() {
        let cluster = example();
        let (_, metrics) = role(&cluster, Role::Worker, Some("worker-1")).unwrap();
        assert_eq!(metrics.metrics_listen.as_deref(), Some("0.0.0.0:9100"));
        assert_eq!(metrics.metrics_linger, Duration::from_secs(10));
        let (collector, _) = role(&cluster, Role::Collector, None).unwrap();
        let RoleConfig::Collector { config, print_report } = collector else { panic!("{collector:?}") };
        assert!(config.progress && print_report);
        assert_eq!((config.csv, config.idle_timeout), (CsvMode::Alerts, Duration::from_secs(30)));
        // Without metrics_port, no metrics.
        let mut quiet = cluster.clone();
        quiet.router.metrics_port = None;
        assert_eq!(role(&quiet, Role::Router, None).unwrap().1, MetricsArgs::default());
    }

    #[test]
    fn errors_say_where() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster.toml");
        let line_of_example = |needle: &str| EXAMPLE.lines().position(|line| line.starts_with(needle)).unwrap() + 1;
        for (from, to, line) in [
            ("control_port = 5556", "control_port = \"x\"", line_of_example("control_port")),
            ("csv = \"alerts\"", "csv = \"some\"", line_of_example("csv")),
            ("idle_timeout = \"30s\"", "idle_timeout = \"soon\"", line_of_example("idle_timeout")),
            ("linger = \"10s\"", "linger = \"-1\"", line_of_example("linger")),
        ] {
            std::fs::write(&path, EXAMPLE.replace(from, to)).unwrap();
            let error = ClusterFile::load(&path).unwrap_err().to_string();
            assert!(error.starts_with(&format!("{}:{line}: ", path.display())), "{error}");
            assert!(!error.contains('\n'), "{error}");
        }
    }
}
