//! Long seed sweeps of the simulation, on every core: `sweep --from 0 --seeds 1000000`, or one
//! seed again (`sweep --seed 42`, what a failure prints). Exits non-zero if any seed fails,
//! each failure on its own lines with its reproduction.

use cep_testkit::sweep::{sweep, Scenario};
use clap::Parser;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Runs simulated clusters drawn from seeds and checks their invariants after every event.
#[derive(Parser, Debug)]
struct Args {
    /// Run this one seed and print its scenario.
    #[arg(long, env = "CEP_SWEEP_SEED", conflicts_with_all = ["from", "seeds"])]
    seed: Option<u64>,
    /// The first seed of the sweep.
    #[arg(long, env = "CEP_SWEEP_FROM", default_value_t = 0)]
    from: u64,
    /// How many seeds.
    #[arg(long, env = "CEP_SWEEP_SEEDS", default_value_t = 10_000)]
    seeds: u64,
    /// Threads (default: every core).
    #[arg(long, env = "CEP_SWEEP_THREADS")]
    threads: Option<usize>,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    if let Some(seed) = args.seed {
        let scenario = Scenario::from_seed(seed);
        println!("{scenario:#?}");
        return match scenario.run() {
            Ok(verdict) => {
                println!("seed {seed}: every invariant held ({verdict:?})");
                std::process::ExitCode::SUCCESS
            }
            Err(failure) => {
                eprintln!("{failure}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    let threads = args.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let started = Instant::now();
    let done = AtomicU64::new(0);
    let (failures, total) = sweep(args.from, args.seeds, threads, |outcome| {
        if let Err(failure) = outcome {
            eprintln!("{failure}");
        }
        let done = done.fetch_add(1, Ordering::Relaxed) + 1;
        if done % 10_000 == 0 {
            eprintln!("{done} seeds in {:.0} s", started.elapsed().as_secs_f64());
        }
    });
    println!(
        "sweep: seeds {}..{}: {} passed, {} failed in {:.1} s ({} ticks, {} outputs, {} events, {} failovers of which {} recovered, {} deployments, {} killed workers started again, {} worker turns held at --max-unsaved, {} runs with a move that lost state, {} runs given up with no worker left, at most {} collector restarts in one run)",
        args.from,
        args.from.saturating_add(args.seeds),
        args.seeds - failures.len() as u64,
        failures.len(),
        started.elapsed().as_secs_f64(),
        total.sent,
        total.outputs,
        total.steps,
        total.failovers.0,
        total.failovers.1,
        total.deployments,
        total.rejoins,
        total.turns_at_max_unsaved,
        total.moves_lost_state,
        total.given_up,
        total.collector_resumes
    );
    match failures.is_empty() {
        true => std::process::ExitCode::SUCCESS,
        false => std::process::ExitCode::FAILURE,
    }
}
