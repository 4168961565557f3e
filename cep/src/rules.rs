//! `cep rules`: check rule files, deploy one to a running cluster, generate the Oracle file.

use anyhow::{bail, Context as _};
use cep_core::control::{Deploy, Deployed, Refused};
use cep_core::frame::{Body, Frame};
use cep_core::wire::FrameKind;
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct RulesArgs {
    #[command(subcommand)]
    pub command: RulesCommand,
}

#[derive(Subcommand, Debug)]
pub enum RulesCommand {
    /// Check rules files: every error with its line, column and a caret; non-zero exit if any.
    Check {
        /// The files to check.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Send a rules file to a running cluster's router, which checks it and switches every
    /// worker to it at the same point of the stream. A file that does not check is refused
    /// and the running rules stay.
    Deploy {
        /// The rules file.
        file: PathBuf,
        /// The router's control endpoint.
        #[arg(long, env = "CEP_ROUTER", default_value = "tcp://127.0.0.1:5556")]
        router: String,
        /// How long to wait for the router's answer.
        #[arg(long, env = "CEP_DEPLOY_TIMEOUT", default_value = "10s", value_parser = cep_core::duration::parse_duration)]
        timeout: Duration,
        /// An operator's key (with `--keys`), for a secure cluster.
        #[command(flatten)]
        security: cep_transport::security::SecurityArgs,
    },
    /// Print the Oracle white paper's workload as a rules file: R1 and R2 for each of the
    /// first N symbols, one query each (`rules/oracle-400.rules` is N = 200).
    Oracle {
        /// Monitored symbols (S0000, S0001, ...), at least 1.
        #[arg(long, default_value_t = 200)]
        symbols: usize,
    },
}

pub fn run(args: RulesArgs) -> anyhow::Result<()> {
    match args.command {
        RulesCommand::Check { files } => check(&files),
        RulesCommand::Deploy { file, router, timeout, security } => {
            deploy(&file, &crate::cluster::Asking::new(&router, timeout, &security)?)
        }
        RulesCommand::Oracle { symbols } => {
            // Zero symbols would print a file of no queries, which `rules check` refuses.
            if symbols == 0 {
                return Err(crate::cli::Usage(
                    "--symbols must be at least 1: a rules file needs at least one query".into(),
                )
                .into());
            }
            cep_telemetry::out!("{}", cep_query::generate::oracle_rules(symbols));
            Ok(())
        }
    }
}

fn check(files: &[PathBuf]) -> anyhow::Result<()> {
    let mut failed = 0;
    for file in files {
        let source = cep_query::RulesSource::load(Some(file)).map_err(anyhow::Error::msg)?;
        match source.compile() {
            Ok(rules) => cep_telemetry::outln!("{}: ok, {}", file.display(), queries(rules.queries.len())),
            Err(error) => {
                cep_telemetry::errln!("{}", error.render());
                failed += 1;
            }
        }
    }
    if failed > 0 {
        bail!("{failed} of {} rules files do not check", files.len());
    }
    Ok(())
}

fn deploy(file: &std::path::Path, asking: &crate::cluster::Asking<'_>) -> anyhow::Result<()> {
    let router = asking.router();
    let source = cep_query::RulesSource::load(Some(file)).map_err(anyhow::Error::msg)?;
    // Checked here first for the quick answer; the router checks again, as the authority.
    let rules = source.compile().map_err(|error| anyhow::anyhow!("{}\nnot deployed", error.render()))?;
    let deploy = Deploy { origin: source.origin.clone(), text: source.text };
    let answer = asking.raw(&deploy.encode(0)).context("cannot deploy")?;
    let frame = Frame::read(&answer, cep_core::control::MAX_CONTROL_FRAME_BYTES)
        .with_context(|| format!("bad answer from the router at {router}"))?;
    if frame.kind() == FrameKind::Refused {
        let refused: Refused = frame.body()?;
        bail!("the router at {router} refused {}: {}", file.display(), refused.reason);
    }
    let deployed: Deployed = frame.body().with_context(|| format!("bad answer from the router at {router}"))?;
    let at: Vec<String> = deployed.at.iter().map(|(stream, seq)| format!("stream {stream} from seq {seq}")).collect();
    cep_telemetry::outln!(
        "deployed {} ({}) as rules version {}; switch: {}",
        file.display(),
        queries(rules.queries.len()),
        deployed.epoch,
        if at.is_empty() { "the run starts with them".to_string() } else { at.join(", ") }
    );
    Ok(())
}

/// "1 query", "3 queries".
fn queries(count: usize) -> String {
    match count {
        1 => "1 query".to_string(),
        count => format!("{count} queries"),
    }
}
