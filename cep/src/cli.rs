//! The command line.

use clap::{Parser, Subcommand};

/// A partitioned complex-event-processing cluster over ZeroMQ.
#[derive(Parser, Debug)]
#[command(name = "cep", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
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
    /// Run the engine alone over a recorded input.csv (standalone mode).
    Engine(crate::standalone::EngineArgs),
    /// Measure the engine alone, one raw ZeroMQ hop and the whole pipeline, side by side.
    Bench(crate::bench::BenchArgs),
}

/// Runs the chosen command.
pub fn dispatch(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Run(args) => crate::launcher::launch(args),
        Command::Router(config) => {
            cep_router::run(config, crate::telemetry::shutdown_flag()?)?;
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
                    "run incomplete: {} of {} events processed",
                    summary.events_processed,
                    summary.events_sent
                );
            }
            Ok(())
        }
        Command::Injector(config) => {
            cep_injector::run(config, crate::telemetry::shutdown_flag()?)?;
            Ok(())
        }
        Command::Engine(args) => crate::standalone::run(args),
        Command::Bench(args) => crate::bench::run(args),
    }
}
