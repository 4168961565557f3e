//! The command line.

use crate::launcher::Usage;
use clap::{Parser, Subcommand};

/// A partitioned complex-event-processing cluster over ZeroMQ.
#[derive(Parser, Debug)]
#[command(name = "cep", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Test hook: run this process with its clock this far off (e.g. `-50ms`).
    #[arg(long, global = true, hide = true, env = "CEP_CLOCK_SKEW", allow_hyphen_values = true, value_parser = cep_core::clock::parse_skew)]
    pub clock_skew: Option<i64>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a whole cluster (router, workers, collector, injector) as local processes.
    Run(crate::launcher::LaunchArgs),
    /// Run the router.
    Router(cep_router::RouterConfig),
    /// Run one worker.
    Worker(cep_worker::WorkerConfig),
    /// Run the collector.
    Collector(cep_collector::CollectorConfig),
    /// Run an injector.
    Injector(cep_injector::InjectorConfig),
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

/// Runs the chosen command.
pub fn dispatch(cli: Cli) -> anyhow::Result<()> {
    if let Some(skew) = cli.clock_skew {
        cep_core::clock::set_skew(skew);
    }
    match cli.command {
        Command::Run(args) => crate::launcher::launch(args),
        Command::Router(config) => {
            cep_router::run(config, crate::telemetry::shutdown_flag()?).map_err(|error| match error {
                cep_router::routing::RouterError::Config(_) | cep_router::routing::RouterError::Rules(_) => {
                    Usage(error.to_string()).into()
                }
                error => anyhow::Error::from(error),
            })?;
            Ok(())
        }
        Command::Worker(config) => {
            cep_worker::run(config, crate::telemetry::shutdown_flag()?)?;
            Ok(())
        }
        Command::Collector(config) => {
            let summary = cep_collector::run(config, crate::telemetry::shutdown_flag()?)?;
            if !summary.complete {
                anyhow::bail!(
                    "run incomplete (a stream, a worker or the router never sent its end): {}",
                    summary.counts()
                );
            }
            Ok(())
        }
        Command::Injector(config) => {
            cep_injector::run(config, crate::telemetry::shutdown_flag()?).map_err(|error| match error {
                cep_injector::sending::InjectorError::Config(_) | cep_injector::sending::InjectorError::Replay(_) => {
                    Usage(error.to_string()).into()
                }
                error => anyhow::Error::from(error),
            })?;
            Ok(())
        }
        Command::Rules(args) => crate::rules::run(args),
        Command::Engine(args) => crate::standalone::run(args),
        Command::Bench(args) => crate::bench::run(args),
        Command::Node(args) => crate::node::run(args),
        Command::Probe { endpoint } => probe(&endpoint),
    }
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
