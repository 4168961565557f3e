//! The command line.

use cep_telemetry::args::Flags;
use cep_telemetry::{LogFormat, MetricsArgs, MetricsServer};
use clap::{Parser, Subcommand};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A mistake in the command line or its files, found before anything started: `cep` exits
/// with status 2, as for a flag clap rejects.
#[derive(Debug)]
pub struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

impl Usage {
    /// An error as one usage line (exit status 2).
    pub fn of(error: &anyhow::Error) -> anyhow::Error {
        Usage(crate::telemetry::one_line(error)).into()
    }
}

/// The exit status of a collector stopped by a full disk: `cep run` does not start it again
/// (it would fail the same way) and its verdict says "disk full".
pub const DISK_FULL_STATUS: i32 = 3;

/// The exit status of a collector that wrote the results of a run that did not complete (its
/// summary says why): `cep run` takes its results as it does a complete run's, and does not
/// start it again.
pub const INCOMPLETE_STATUS: i32 = 4;

/// A collector's run ended incomplete; its results are written, the cause in its summary.
#[derive(Debug)]
pub struct RunIncomplete(pub String);

impl std::fmt::Display for RunIncomplete {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RunIncomplete {}

/// The exit status for `error`: 2 for a usage mistake, [`DISK_FULL_STATUS`] for a full disk at
/// the collector, [`INCOMPLETE_STATUS`] for a collector's incomplete run, 1 for any other
/// failure.
pub fn exit_status(error: &anyhow::Error) -> i32 {
    use cep_collector::CollectorError;
    if let Some(said) = error.downcast_ref::<crate::launcher::AlreadySaid>() {
        said.status
    } else if error.is::<Usage>() {
        2
    } else if error.is::<RunIncomplete>() {
        INCOMPLETE_STATUS
    } else if matches!(error.downcast_ref::<CollectorError>(), Some(CollectorError::DiskFull { .. })) {
        DISK_FULL_STATUS
    } else {
        1
    }
}

/// A role's error as `cep` reports it: a usage error when `is_usage` says the user's flags
/// or files are at fault, else the error as it is.
fn role_error<E: std::error::Error + Send + Sync + 'static>(
    error: E,
    is_usage: impl FnOnce(&E) -> bool,
) -> anyhow::Error {
    if is_usage(&error) {
        Usage(error.to_string()).into()
    } else {
        error.into()
    }
}

/// Ends the process for arguments clap did not accept: help and version as clap prints
/// them; a mistake as its one line (`error: ...`, without the usage block), exit status 2.
pub fn refuse_arguments(error: clap::Error) -> ! {
    use clap::error::ErrorKind;
    if matches!(
        error.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        error.exit();
    }
    // The message is what comes before the first blank line (then tips and usage follow).
    let text = error.render().to_string();
    let message: Vec<&str> =
        text.lines().map(str::trim).skip_while(|line| line.is_empty()).take_while(|line| !line.is_empty()).collect();
    cep_telemetry::errln!("{} (`--help` explains the flags)", message.join(" "));
    std::process::exit(2);
}

/// A partitioned complex-event-processing cluster over ZeroMQ.
#[derive(Parser, Debug)]
#[command(name = "cep", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Test hook: run this process with its clock this far off (e.g. `-50ms`).
    #[arg(long, global = true, hide = true, env = "CEP_CLOCK_SKEW", allow_hyphen_values = true, value_parser = cep_core::clock::parse_skew)]
    pub clock_skew: Option<i64>,
    /// How log lines are written to stderr: `text` (colour only on a terminal, never with
    /// NO_COLOR set) or `json` (one object per line, for log shippers).
    #[arg(long, global = true, env = "CEP_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a whole cluster (router, workers, collector, injector) as local processes.
    Run(crate::launcher::LaunchArgs),
    /// Run the router.
    Router {
        #[command(flatten)]
        config: cep_router::RouterConfig,
        #[command(flatten)]
        metrics: MetricsArgs,
    },
    /// Run one worker.
    Worker {
        #[command(flatten)]
        config: cep_worker::WorkerConfig,
        #[command(flatten)]
        metrics: MetricsArgs,
    },
    /// Run the collector.
    Collector {
        #[command(flatten)]
        config: cep_collector::CollectorConfig,
        #[command(flatten)]
        metrics: MetricsArgs,
        /// Print the report (report.txt) on stdout at the end, e.g. into a service's journal.
        #[arg(long, env = "CEP_PRINT_REPORT")]
        print_report: bool,
    },
    /// Run an injector.
    Injector {
        #[command(flatten)]
        config: cep_injector::InjectorConfig,
        #[command(flatten)]
        metrics: MetricsArgs,
    },
    /// Check, deploy or generate rules files.
    Rules(crate::rules::RulesArgs),
    /// Watch a running cluster's members, or drain a worker out of it.
    Cluster(crate::cluster::ClusterArgs),
    /// Run the engine alone over a recorded input.csv (standalone mode).
    Engine(crate::standalone::EngineArgs),
    /// Measure the engine alone, one raw ZeroMQ hop and the whole pipeline, side by side.
    Bench(crate::bench::BenchArgs),
    /// Make CURVE key pairs for a secure cluster.
    Keys(crate::keys::KeysArgs),
    /// Run this host's role of a multi-host cluster, from the shared cluster file.
    Node(crate::node::NodeArgs),
    /// Health check: exit 0 if something accepts TCP connections at the endpoint.
    Probe {
        /// A `tcp://host:port` endpoint.
        endpoint: String,
    },
}

impl Command {
    /// Who a process running this command is (role, id), for its logs and metrics.
    pub fn identity(&self) -> (String, String) {
        let named = |role: &str| (role.to_string(), role.to_string());
        match self {
            Command::Run(_) => named("launcher"),
            Command::Router { .. } => named("router"),
            Command::Collector { .. } => named("collector"),
            Command::Worker { config, .. } => ("worker".into(), config.worker_id()),
            // Numbered once the router assigns its streams.
            Command::Injector { .. } => named("injector"),
            Command::Node(node) => match (node.role, &node.id) {
                (cep_core::identity::Role::Worker, Some(id)) => ("worker".into(), id.clone()),
                (role, _) => named(role.name()),
            },
            _ => named("cep"),
        }
    }
}

/// The global flags of a `cep` process as arguments: how it logs and (a test hook) how far
/// off its clock runs.
pub fn global_args(log_format: LogFormat, clock_skew: Option<i64>) -> Vec<String> {
    Flags::new()
        .choice("log-format", &log_format)
        .some("clock-skew", clock_skew.map(|ns| format!("{ns}ns")))
        .into_args()
}

/// A role's settings when no flag says anything: each from its environment variable
/// (`CEP_...`), else its default, as `cep <role>` given no flag takes them. A bad value in
/// the environment is one usage line.
pub fn from_environment<T: clap::Args + clap::FromArgMatches>() -> anyhow::Result<T> {
    let command = T::augment_args(clap::Command::new("cep").no_binary_name(true));
    command
        .try_get_matches_from(std::iter::empty::<String>())
        .and_then(|matches| T::from_arg_matches(&matches))
        .map_err(|error| {
            let text = error.render().to_string();
            Usage(text.lines().next().unwrap_or_default().trim_start_matches("error: ").to_string()).into()
        })
}

/// One role of the cluster and everything it runs with: what `cep router|worker|collector|
/// injector` make of their flags, what `cep node` makes of the cluster file, and what `cep
/// run` starts as processes ([`RoleConfig::to_args`]). [`run_role`] runs it here.
#[derive(Clone, Debug, PartialEq)]
pub enum RoleConfig {
    Router(cep_router::RouterConfig),
    Worker(cep_worker::WorkerConfig),
    /// `print_report`: the report on stdout at the end (`--print-report`).
    Collector {
        config: cep_collector::CollectorConfig,
        print_report: bool,
    },
    Injector(cep_injector::InjectorConfig),
}

impl RoleConfig {
    /// The subcommand that runs it.
    pub fn command(&self) -> &'static str {
        match self {
            RoleConfig::Router(_) => "router",
            RoleConfig::Worker(_) => "worker",
            RoleConfig::Collector { .. } => "collector",
            RoleConfig::Injector(_) => "injector",
        }
    }

    /// Its configuration's checks, the reason in the error.
    pub fn validate(&self) -> Result<(), String> {
        match self {
            RoleConfig::Router(config) => config.validate(),
            RoleConfig::Worker(config) => config.validate(),
            RoleConfig::Collector { config, .. } => config.validate(),
            RoleConfig::Injector(config) => config.validate(),
        }
    }

    /// The arguments of a `cep` process that runs this role with `metrics`: the subcommand,
    /// then its flags.
    pub fn to_args(&self, metrics: &MetricsArgs) -> Vec<String> {
        let flags = match self {
            RoleConfig::Router(config) => config.to_args(),
            RoleConfig::Worker(config) => config.to_args(),
            RoleConfig::Collector { config, print_report } => {
                Flags::new().extend(config.to_args()).switch("print-report", *print_report).into_args()
            }
            RoleConfig::Injector(config) => config.to_args(),
        };
        [vec![self.command().to_string()], flags, metrics.to_args()].concat()
    }
}

impl Command {
    /// Whether this command runs a cluster's roles as threads of this process (`cep run
    /// --transport inproc`, `cep bench transport --pipeline`): their log lines then default
    /// to warnings, as those of separate processes under `cep run` do.
    pub fn runs_roles_in_process(&self) -> bool {
        use crate::bench::BenchKind;
        match self {
            Command::Run(args) => args.transport == crate::launcher::LocalTransport::Inproc,
            Command::Bench(bench) => {
                matches!(&bench.kind, Some(BenchKind::Transport(transport)) if transport.pipeline)
            }
            _ => false,
        }
    }
}

/// Runs the chosen command.
pub fn dispatch(cli: Cli) -> anyhow::Result<()> {
    if let Some(skew) = cli.clock_skew {
        cep_core::clock::set_skew(skew);
    }
    match cli.command {
        Command::Run(args) => crate::launcher::launch(args),
        Command::Router { config, metrics } => run_role(RoleConfig::Router(config), &metrics),
        Command::Worker { config, metrics } => run_role(RoleConfig::Worker(config), &metrics),
        Command::Collector { config, metrics, print_report } => {
            run_role(RoleConfig::Collector { config, print_report }, &metrics)
        }
        Command::Injector { config, metrics } => run_role(RoleConfig::Injector(config), &metrics),
        Command::Rules(args) => crate::rules::run(args),
        Command::Cluster(args) => crate::cluster::run(args),
        Command::Engine(args) => crate::standalone::run(args),
        Command::Bench(args) => crate::bench::run(args),
        Command::Node(args) => crate::node::run(args),
        Command::Keys(args) => crate::keys::run(args),
        Command::Probe { endpoint } => probe(&endpoint),
    }
}

/// Runs one role in this process, its metrics served as `metrics` says: what `cep <role>`
/// and `cep node` do. A mistake in the configuration is a usage error (exit status 2).
pub fn run_role(role: RoleConfig, metrics: &MetricsArgs) -> anyhow::Result<()> {
    match role {
        RoleConfig::Router(config) => observed(metrics, crate::telemetry::shutdown_flag()?, |shutdown| {
            use cep_router::RouterError;
            cep_router::run(config, shutdown)
                .map_err(|e| role_error(e, |e| matches!(e, RouterError::Config(_) | RouterError::Rules(_))))?;
            Ok(())
        }),
        RoleConfig::Worker(config) => observed(metrics, crate::telemetry::shutdown_flag()?, |shutdown| {
            use cep_worker::WorkerError;
            cep_worker::run(config, shutdown).map_err(|e| role_error(e, |e| matches!(e, WorkerError::Config(_))))?;
            Ok(())
        }),
        RoleConfig::Collector { config, print_report } => {
            let (out, started) = (config.out.clone(), std::time::SystemTime::now());
            let summary = observed(metrics, crate::telemetry::shutdown_flag()?, |shutdown| {
                use cep_collector::CollectorError;
                let ran = cep_collector::run(config, shutdown);
                // Every run's report.html, partial results included.
                crate::run_report::write_or_warn(&out, started);
                let summary = ran.map_err(|e| role_error(e, |e| matches!(e, CollectorError::Config(_))))?;
                if print_report {
                    cep_telemetry::out!("{}", summary.ycsb_report());
                }
                Ok(summary)
            })?;
            match summary.incomplete() {
                Some(why) => Err(RunIncomplete(why).into()),
                None => Ok(()),
            }
        }
        RoleConfig::Injector(config) => {
            // The first SIGINT/SIGTERM ends the streams gracefully (nothing lost), a second
            // stops at once.
            let stop = crate::telemetry::stop_flags()?;
            observed(metrics, stop.now.clone(), |_| {
                use cep_injector::sending::InjectorError;
                cep_injector::run(config, stop)
                    .map_err(|e| role_error(e, |e| matches!(e, InjectorError::Config(_) | InjectorError::Replay(_))))?;
                Ok(())
            })
        }
    }
}

/// Runs a role with its metrics served (when asked) and, once a run has ended well, keeps
/// serving until a last scrape has read the final values (`--metrics-linger`) or `shutdown`.
fn observed<T>(
    metrics: &MetricsArgs,
    shutdown: Arc<AtomicBool>,
    run: impl FnOnce(Arc<AtomicBool>) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let server = MetricsServer::from_args(metrics)?;
    let outcome = run(shutdown.clone())?;
    if let Some(server) = server.filter(|_| !metrics.metrics_linger.is_zero() && !shutdown.load(Ordering::Relaxed)) {
        if !server.linger(metrics.metrics_linger, &shutdown) {
            tracing::warn!(waited = ?metrics.metrics_linger, "no scrape read the final metrics");
        }
    }
    Ok(outcome)
}

fn probe(endpoint: &str) -> anyhow::Result<()> {
    use std::net::{TcpStream, ToSocketAddrs};
    let host_port =
        endpoint.strip_prefix("tcp://").ok_or_else(|| anyhow::anyhow!("`{endpoint}` is not a tcp:// endpoint"))?;
    let address = host_port
        .to_socket_addrs()
        .map_err(|error| anyhow::anyhow!("cannot resolve `{host_port}`: {error}"))?
        .next()
        .ok_or_else(|| anyhow::anyhow!("`{host_port}` resolves to no address"))?;
    TcpStream::connect_timeout(&address, std::time::Duration::from_secs(1))
        .map_err(|error| anyhow::anyhow!("nothing accepts connections at {endpoint}: {error}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A role's command back as the role it runs.
    fn parsed_role(args: Vec<String>) -> (RoleConfig, MetricsArgs) {
        let cli = Cli::try_parse_from(std::iter::once("cep".to_string()).chain(args.clone()))
            .unwrap_or_else(|error| panic!("{args:?}: {error}"));
        match cli.command {
            Command::Router { config, metrics } => (RoleConfig::Router(config), metrics),
            Command::Worker { config, metrics } => (RoleConfig::Worker(config), metrics),
            Command::Collector { config, metrics, print_report } => {
                (RoleConfig::Collector { config, print_report }, metrics)
            }
            Command::Injector { config, metrics } => (RoleConfig::Injector(config), metrics),
            other => panic!("{args:?} is not a role: {other:?}"),
        }
    }

    #[test]
    fn a_role_as_process_arguments_is_the_same_role() {
        let metrics = MetricsArgs {
            metrics_listen: Some("0.0.0.0:9100".into()),
            metrics_linger: Duration::from_secs(10),
            metrics_announce: None,
        };
        let roles = [
            RoleConfig::Router(cep_router::RouterConfig { workers: 3, streams: 2, ..Default::default() }),
            RoleConfig::Worker(cep_worker::WorkerConfig { id: Some("worker-2".into()), ..Default::default() }),
            RoleConfig::Collector {
                config: cep_collector::CollectorConfig { progress: true, ..Default::default() },
                print_report: true,
            },
            RoleConfig::Injector(cep_injector::InjectorConfig { count: Some(1000), ..Default::default() }),
        ];
        for role in roles {
            assert_eq!(role.validate(), Ok(()), "{role:?}");
            assert_eq!(parsed_role(role.to_args(&metrics)), (role.clone(), metrics.clone()));
            assert_eq!(parsed_role(role.to_args(&MetricsArgs::default())), (role, MetricsArgs::default()));
        }
    }

    #[test]
    fn global_flags_parse_back() {
        let args =
            [vec!["probe".to_string(), "tcp://127.0.0.1:1".into()], global_args(LogFormat::Json, Some(-250_000))];
        let cli = Cli::try_parse_from(std::iter::once("cep".to_string()).chain(args.concat())).unwrap();
        assert_eq!((cli.log_format, cli.clock_skew), (LogFormat::Json, Some(-250_000)));
        assert!(global_args(LogFormat::Text, None).iter().all(|arg| !arg.starts_with("--clock-skew")));
    }
}
