//! `cep node`: one role of a multi-host cluster, configured from the cluster file that every
//! host shares (`deploy/hosts/cluster.toml`), so hosts differ only in `--role` (and `--id`).

use anyhow::{bail, Context as _};
use clap::{Args, Parser};
use serde::Deserialize;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct NodeArgs {
    /// The cluster file.
    #[arg(long, env = "CEP_CLUSTER", default_value = "/etc/cep/cluster.toml")]
    pub config: PathBuf,
    /// Which role this process plays.
    #[arg(long, env = "CEP_ROLE", value_enum)]
    pub role: NodeRole,
    /// For a worker: its id in the cluster file.
    #[arg(long, env = "CEP_WORKER_ID")]
    pub id: Option<String>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeRole {
    Router,
    Collector,
    Worker,
    Injector,
}

impl NodeRole {
    pub fn name(self) -> &'static str {
        match self {
            NodeRole::Router => "router",
            NodeRole::Collector => "collector",
            NodeRole::Worker => "worker",
            NodeRole::Injector => "injector",
        }
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
}

/// Prometheus metrics: each host section's `metrics_port` turns them on for its process.
#[derive(Deserialize, Debug, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct MetricsSection {
    /// After a run, keep serving until a scrape has read the final values, at most this long.
    pub linger: Option<String>,
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
    pub rules: Option<String>,
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
    pub out: String,
    #[serde(default = "default_csv")]
    pub csv: String,
    #[serde(default = "default_idle")]
    pub idle_timeout: String,
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
    pub duration: Option<String>,
    pub count: Option<u64>,
    #[serde(default = "default_warmup")]
    pub warmup: String,
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
fn default_out() -> String {
    "/var/lib/cep/results".into()
}
fn default_csv() -> String {
    "alerts".into()
}
fn default_idle() -> String {
    "30s".into()
}
fn default_warmup() -> String {
    "1s".into()
}
fn default_connections() -> usize {
    1
}
fn default_symbols() -> usize {
    cep_core::reference::SYMBOLS
}
fn default_seed() -> u64 {
    cep_core::reference::SEED
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

    /// The command-line arguments of one role, as `cep <role>` takes them.
    pub fn role_args(&self, role: NodeRole, id: Option<&str>) -> anyhow::Result<Vec<String>> {
        let mut args = self.data_args(role, id)?;
        let metrics_port = match role {
            NodeRole::Router => self.router.metrics_port,
            NodeRole::Collector => self.collector.metrics_port,
            NodeRole::Worker => self.workers.iter().find(|w| Some(w.id.as_str()) == id).and_then(|w| w.metrics_port),
            NodeRole::Injector => self.injector.metrics_port,
        };
        if let Some(port) = metrics_port {
            args.push(format!("--metrics-listen=0.0.0.0:{port}"));
            if let Some(linger) = &self.metrics.linger {
                args.push(format!("--metrics-linger={linger}"));
            }
        }
        Ok(args)
    }

    fn data_args(&self, role: NodeRole, id: Option<&str>) -> anyhow::Result<Vec<String>> {
        let router = self.router_control();
        Ok(match role {
            NodeRole::Router => {
                let mut args = vec![
                    "router".into(),
                    format!("--listen=tcp://0.0.0.0:{}", self.router.data_port),
                    format!("--control=tcp://0.0.0.0:{}", self.router.control_port),
                    format!("--workers={}", self.workers.len()),
                    format!("--streams={}", self.injector.connections),
                ];
                if let Some(rules) = &self.router.rules {
                    args.push(format!("--rules={rules}"));
                }
                args
            }
            NodeRole::Collector => vec![
                "collector".into(),
                format!("--listen=tcp://0.0.0.0:{}", self.collector.port),
                format!("--router={router}"),
                format!("--advertise={}", self.collector.host),
                format!("--out={}", self.collector.out),
                format!("--csv={}", self.collector.csv),
                format!("--idle-timeout={}", self.collector.idle_timeout),
                // A service's output is its journal: progress every second, the report at the end.
                "--progress".into(),
                "--print-report".into(),
            ],
            NodeRole::Worker => {
                let Some(id) = id else {
                    bail!("--role worker needs --id (one of the cluster file's [[workers]] ids)")
                };
                let Some(worker) = self.workers.iter().find(|w| w.id == id) else {
                    let known: Vec<&str> = self.workers.iter().map(|w| w.id.as_str()).collect();
                    bail!("worker id `{id}` is not in the cluster file (it has {})", known.join(", "));
                };
                vec![
                    "worker".into(),
                    format!("--router={router}"),
                    format!("--id={id}"),
                    format!("--listen=tcp://0.0.0.0:{}", worker.port),
                    format!("--advertise={}", worker.host),
                ]
            }
            NodeRole::Injector => {
                let i = &self.injector;
                let mut args = vec![
                    "injector".into(),
                    format!("--router={router}"),
                    format!("--router-data=tcp://{}:{}", self.router.host, self.router.data_port),
                    format!("--rate={}", i.rate),
                    format!("--warmup={}", i.warmup),
                    format!("--connections={}", i.connections),
                    format!("--symbols={}", i.symbols),
                    format!("--seed={}", i.seed),
                ];
                match (i.count, &i.duration) {
                    (Some(count), _) => args.push(format!("--count={count}")),
                    (None, Some(duration)) => args.push(format!("--duration={duration}")),
                    (None, None) => bail!("[injector] needs `duration` or `count`"),
                }
                args
            }
        })
    }
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].lines().count().max(1)
}

/// Runs the role this host plays.
pub fn run(args: NodeArgs) -> anyhow::Result<()> {
    let cluster = ClusterFile::load(&args.config)?;
    let role_args = cluster.role_args(args.role, args.id.as_deref())?;
    let cli =
        crate::cli::Cli::try_parse_from(std::iter::once("cep".to_string()).chain(role_args)).map_err(|error| {
            let message = error.to_string();
            anyhow::anyhow!("{}: {}", args.config.display(), message.lines().next().unwrap_or_default())
        })?;
    crate::cli::dispatch(cli)
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = include_str!("../../deploy/hosts/cluster.toml");

    #[test]
    fn the_shipped_example_gives_every_role_valid_flags() {
        let cluster: ClusterFile = toml::from_str(EXAMPLE).unwrap();
        let roles = [
            (NodeRole::Router, None),
            (NodeRole::Collector, None),
            (NodeRole::Worker, Some(cluster.workers[0].id.as_str())),
            (NodeRole::Injector, None),
        ];
        for (role, id) in roles {
            let args = cluster.role_args(role, id).unwrap();
            let parsed = crate::cli::Cli::try_parse_from(std::iter::once("cep".to_string()).chain(args.clone()));
            assert!(parsed.is_ok(), "{role:?}: {args:?}: {:?}", parsed.err());
        }
        assert!(cluster.role_args(NodeRole::Worker, Some("nobody")).is_err());
        assert!(cluster.role_args(NodeRole::Worker, None).is_err());
    }

    #[test]
    fn metrics_ports_and_the_collector_journal() {
        let cluster: ClusterFile = toml::from_str(EXAMPLE).unwrap();
        let worker = cluster.role_args(NodeRole::Worker, Some("worker-1")).unwrap();
        assert!(worker.contains(&"--metrics-listen=0.0.0.0:9100".to_string()), "{worker:?}");
        assert!(worker.contains(&"--metrics-linger=10s".to_string()), "{worker:?}");
        let collector = cluster.role_args(NodeRole::Collector, None).unwrap();
        assert!(collector.contains(&"--progress".into()) && collector.contains(&"--print-report".into()));
        // Without metrics_port, no metrics.
        let mut quiet = cluster.clone();
        quiet.router.metrics_port = None;
        let router = quiet.role_args(NodeRole::Router, None).unwrap();
        assert!(!router.iter().any(|arg| arg.starts_with("--metrics")), "{router:?}");
    }

    #[test]
    fn errors_say_where() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster.toml");
        std::fs::write(&path, EXAMPLE.replace("control_port = 5556", "control_port = \"x\"")).unwrap();
        let error = ClusterFile::load(&path).unwrap_err().to_string();
        assert!(error.starts_with(&format!("{}:", path.display())), "{error}");
        assert!(!error.contains('\n'), "{error}");
    }
}
