//! The command line.

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
    eprintln!("{} (`--help` explains the flags)", message.join(" "));
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
    /// Run the engine alone over a recorded input.csv (standalone mode).
    Engine(crate::standalone::EngineArgs),
    /// Measure the engine alone, one raw ZeroMQ hop and the whole pipeline, side by side.
    Bench(crate::bench::BenchArgs),
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
                (crate::node::NodeRole::Worker, Some(id)) => ("worker".into(), id.clone()),
                (role, _) => named(role.name()),
            },
            _ => named("cep"),
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
        Command::Router { config, metrics } => observed(&metrics, |shutdown| {
            use cep_router::routing::RouterError;
            cep_router::run(config, shutdown)
                .map_err(|e| role_error(e, |e| matches!(e, RouterError::Config(_) | RouterError::Rules(_))))?;
            Ok(())
        }),
        Command::Worker { config, metrics } => observed(&metrics, |shutdown| {
            use cep_worker::processing::WorkerError;
            cep_worker::run(config, shutdown).map_err(|e| role_error(e, |e| matches!(e, WorkerError::Config(_))))?;
            Ok(())
        }),
        Command::Collector { config, metrics, print_report } => {
            let summary = observed(&metrics, |shutdown| {
                use cep_collector::collecting::CollectorError;
                let summary = cep_collector::run(config, shutdown)
                    .map_err(|e| role_error(e, |e| matches!(e, CollectorError::Config(_))))?;
                if print_report {
                    print!("{}", summary.ycsb_report());
                }
                Ok(summary)
            })?;
            if !summary.complete {
                anyhow::bail!(
                    "run incomplete (a stream, a worker or the router never sent its end): {}",
                    summary.counts()
                );
            }
            Ok(())
        }
        Command::Injector { config, metrics } => observed(&metrics, |shutdown| {
            use cep_injector::sending::InjectorError;
            cep_injector::run(config, shutdown)
                .map_err(|e| role_error(e, |e| matches!(e, InjectorError::Config(_) | InjectorError::Replay(_))))?;
            Ok(())
        }),
        Command::Rules(args) => crate::rules::run(args),
        Command::Engine(args) => crate::standalone::run(args),
        Command::Bench(args) => crate::bench::run(args),
        Command::Node(args) => crate::node::run(args),
        Command::Probe { endpoint } => probe(&endpoint),
    }
}

/// Runs a role with its metrics served (when asked) and, once a run has ended well, keeps
/// serving until a last scrape has read the final values (`--metrics-linger`).
fn observed<T>(metrics: &MetricsArgs, run: impl FnOnce(Arc<AtomicBool>) -> anyhow::Result<T>) -> anyhow::Result<T> {
    let server = MetricsServer::from_args(metrics)?;
    let shutdown = crate::telemetry::shutdown_flag()?;
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
