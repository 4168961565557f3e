//! `cep bench`: benchmarks that write their results where people and tools can read them.
//!
//! - [`overview`]: (the default) the engine alone, one raw ZeroMQ hop and the whole pipeline
//!   side by side, with the ratios measured in one run.
//! - [`transport`]: raw PUSH/PULL over tcp, ipc and inproc, by events per message; with
//!   `--pipeline`, [`pipeline`]: the whole product over each transport beside the engine alone.
//! - [`engine`]: the engine alone per rule set.
//! - [`sweep`]: the Oracle white paper's sweeps on the whole pipeline, and a saturation search.
//! - [`scale`]: throughput and latency against the number of workers.
//!
//! Every kind writes a self-contained HTML report ([`crate::html`]).

pub mod engine;
pub mod overview;
pub mod pipeline;
pub mod scale;
pub mod sweep;
pub mod transport;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use std::path::Path;

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub kind: Option<BenchKind>,
    #[command(flatten)]
    pub overview: overview::OverviewArgs,
}

#[derive(Subcommand, Debug)]
pub enum BenchKind {
    /// Engine alone, raw hop and whole pipeline side by side (what `cep bench` runs).
    Overview(overview::OverviewArgs),
    /// Raw ZeroMQ PUSH/PULL between two processes (tcp, ipc) and two threads (inproc); with
    /// --pipeline, the whole pipeline over each transport beside the engine alone.
    Transport(transport::TransportArgs),
    /// The engine alone, one core, per rule set.
    Engine(engine::EngineBenchArgs),
    /// The Oracle white paper's sweeps on the whole pipeline, and a saturation search.
    Sweep(sweep::SweepArgs),
    /// Throughput and latency at saturation against the number of workers.
    Scale(scale::ScaleArgs),
    /// Hidden: the sending side of a transport measurement, in its own process.
    #[command(hide = true)]
    TransportPeer(transport::PeerArgs),
}

pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    match args.kind {
        None => overview::run(args.overview),
        Some(BenchKind::Overview(overview)) => overview::run(overview),
        Some(BenchKind::Transport(transport)) => transport::run(transport),
        Some(BenchKind::Engine(engine)) => engine::run(engine),
        Some(BenchKind::Sweep(sweep)) => sweep::run(sweep),
        Some(BenchKind::Scale(scale)) => scale::run(scale),
        Some(BenchKind::TransportPeer(peer)) => transport::peer(peer),
    }
}

/// One run of the whole pipeline, as the sweeps and the overview make them.
#[derive(Clone, Debug)]
pub struct PipelinePoint {
    pub workers: usize,
    pub connections: usize,
    /// Total ticks per second; 0 = as fast as possible.
    pub rate: f64,
    pub count: Option<u64>,
    /// How long to send after the warm-up (`cep run --duration` counts the warm-up in).
    pub duration: Option<std::time::Duration>,
    pub warmup: std::time::Duration,
}

/// Runs a local cluster for `point` (results into `out`) and returns its summary.
pub fn pipeline_run(point: &PipelinePoint, out: &Path) -> anyhow::Result<cep_core::results::Summary> {
    let program = std::env::current_exe().context("cannot find the cep executable")?;
    let launch = crate::launcher::LaunchArgs {
        workers: point.workers,
        rate: point.rate,
        connections: point.connections,
        duration: point.duration.map(|measured| measured + point.warmup),
        count: point.count,
        warmup: Some(point.warmup),
        csv: cep_collector::CsvMode::None,
        out: out.to_path_buf(),
        quiet: true,
        // The reference workload: 1,470 symbols, seed 42, the default batch.
        ..Default::default()
    };
    crate::launcher::run_cluster(&program, &launch)
}

/// Writes `value` as pretty JSON to `dir/name`.
pub fn write_json<T: serde::Serialize>(dir: &Path, name: &str, value: &T) -> anyhow::Result<()> {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_string_pretty(value)? + "\n")
        .with_context(|| format!("cannot write {}", path.display()))
}

/// A progress bar for `len` steps, on stderr.
pub fn progress(len: u64, what: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(len);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg}")
            .expect("static template")
            .progress_chars("=> "),
    );
    bar.set_prefix(what.to_string());
    bar
}

/// Ctrl-C during a long bench: stop after the current point and keep what was measured.
pub fn stop_flag() -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let _ = signal_hook::flag::register_conditional_shutdown(signal, 130, flag.clone());
        let _ = signal_hook::flag::register(signal, flag.clone());
    }
    flag
}
