//! `cep bench scale`: throughput and latency at saturation against the number of workers.
//! Each worker is a process; with the injector, the router and the collector that makes
//! `workers + 3` busy processes (plus a ZeroMQ I/O thread each), so once they outnumber the
//! cores, adding workers adds contention, not capacity. The report says where that is.

use super::{pipeline_run, PipelinePoint};
use crate::html::chart::{line_chart, Axis, Series, Unit};
use crate::html::report::{table, Report};
use cep_core::results::LatencySummary;
use clap::Args;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct ScaleArgs {
    /// Runs with 1..=N workers.
    #[arg(long, default_value_t = 4)]
    pub max_workers: usize,
    /// Ticks per run (sent as fast as possible).
    #[arg(long, default_value_t = 5_000_000)]
    pub ticks: u64,
    /// Where to write results.json, scale.csv, report.html and each run's results folder.
    #[arg(long, env = "CEP_OUT", default_value = "bench-results/scale")]
    pub out: PathBuf,
}

#[derive(Serialize, Debug, Clone)]
pub struct ScalePoint {
    pub workers: usize,
    pub throughput_eps: f64,
    /// `None` if the run did not complete (its loss is unknown).
    pub events_lost: Option<u64>,
    pub end_to_end_us: LatencySummary,
    /// Busy processes (workers + injector + router + collector) outnumber the cores.
    pub core_bound: bool,
}

#[derive(Serialize, Debug, Default)]
pub struct ScaleResults {
    pub cores: usize,
    pub points: Vec<ScalePoint>,
}

pub fn run(args: ScaleArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out)?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let stop = super::stop_flag();
    let bar = super::progress(args.max_workers as u64, "scale");
    let mut results = ScaleResults { cores, points: Vec::new() };
    for workers in 1..=args.max_workers {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        bar.set_message(format!("{workers} workers"));
        let point = PipelinePoint {
            workers,
            connections: 1,
            rate: 0.0,
            count: Some(args.ticks),
            duration: None,
            warmup: Duration::ZERO,
        };
        let summary = match pipeline_run(&point, &args.out.join(format!("workers-{workers}"))) {
            Ok(summary) => summary,
            // Interrupted: keep what was measured.
            Err(_) if stop.load(Ordering::Relaxed) => break,
            Err(error) => return Err(error),
        };
        results.points.push(ScalePoint {
            workers,
            throughput_eps: summary.throughput_eps,
            events_lost: summary.events_lost,
            end_to_end_us: summary.latency_us.end_to_end.clone(),
            core_bound: workers + 3 > cores,
        });
        bar.set_message(format!("last: {:.2} M ticks/s", summary.throughput_eps / 1e6));
        bar.inc(1);
    }
    bar.finish_and_clear();
    write(&args.out, &results)?;
    cep_telemetry::out!("{}", summary_text(&results));
    Ok(())
}

/// The YCSB-style lines and the verdict, printed and saved as summary.txt.
fn summary_text(results: &ScaleResults) -> String {
    let mut text = String::new();
    for p in &results.points {
        text += &format!(
            "[SCALE {} workers], Throughput(ops/sec), {:.0}, 99thPercentileLatency(us), {:.1}, Lost, {}, CoreBound, {}\n",
            p.workers,
            p.throughput_eps,
            p.end_to_end_us.p99,
            cep_core::results::known(p.events_lost),
            p.core_bound
        );
    }
    text + &verdict(results) + "\n"
}

/// Says whether the cores or the design limit scaling.
pub fn verdict(results: &ScaleResults) -> String {
    let first_bound = results.points.iter().find(|p| p.core_bound).map(|p| p.workers);
    match first_bound {
        Some(1) => format!(
            "This machine has {} cores: even one worker makes 4 busy processes, so the cores, not the design, limit every point; scaling needs a machine with at least workers + 3 cores.",
            results.cores
        ),
        Some(n) => format!("This machine has {} cores: from {n} workers on the busy processes outnumber them, so the cores, not the design, limit those points.", results.cores),
        None => format!("This machine has {} cores, enough for every point: the figures show the design's scaling.", results.cores),
    }
}

pub fn write(out: &Path, results: &ScaleResults) -> anyhow::Result<()> {
    super::write_json(out, "results.json", results)?;
    let mut csv = String::from("workers,throughput_eps,events_lost,p50_us,p99_us,max_us,core_bound\n");
    for p in &results.points {
        let l = &p.end_to_end_us;
        csv += &format!(
            "{},{:.1},{},{:.2},{:.2},{:.2},{}\n",
            p.workers,
            p.throughput_eps,
            p.events_lost.map_or(String::new(), |lost| lost.to_string()),
            l.p50,
            l.p99,
            l.max,
            p.core_bound
        );
    }
    std::fs::write(out.join("scale.csv"), csv)?;
    std::fs::write(out.join("summary.txt"), summary_text(results))?;
    let by_workers = |value: &dyn Fn(&ScalePoint) -> f64| -> Vec<(f64, f64)> {
        results.points.iter().map(|p| (p.workers as f64, value(p))).collect()
    };
    let workers = Axis::linear("workers", Unit::Whole);
    let rows: Vec<Vec<String>> = results
        .points
        .iter()
        .map(|p| {
            vec![
                p.workers.to_string(),
                format!("{:.2} M", p.throughput_eps / 1e6),
                format!("{:.1}", p.end_to_end_us.p50),
                format!("{:.1}", p.end_to_end_us.p99),
                cep_core::results::known(p.events_lost),
                p.core_bound.to_string(),
            ]
        })
        .collect();
    let mut report = Report::new("Scaling with workers");
    report
        .note("One run of the whole pipeline (injector, router, workers and collector as processes on loopback, R1+R2+R3) per number of workers, the same ticks each time, sent as fast as possible.")
        .note(&verdict(results))
        .chart(
            "Throughput",
            "Ticks processed per second of the run (ticks / time from the start to the last worker's report), one point per run.",
            line_chart(
                "throughput against workers",
                &workers,
                &Axis::linear("ticks per second", Unit::Number),
                &[Series::new("throughput", by_workers(&|p| p.throughput_eps))],
            ),
        )
        .chart(
            "Latency",
            "End-to-end p50 and p99 of each run, from each tick's send time (unpaced, the injector stamps a tick when it batches it) to its output's arrival at the collector, one value per output: in a saturated pipeline this is mostly time spent queueing.",
            line_chart(
                "end-to-end latency against workers",
                &workers,
                &Axis::log("end-to-end latency", Unit::Micros),
                &[
                    Series::new("p50", by_workers(&|p| p.end_to_end_us.p50)),
                    Series::new("p99", by_workers(&|p| p.end_to_end_us.p99)),
                ],
            ),
        )
        .section("Figures", table(&["workers", "throughput", "p50 us", "p99 us", "lost", "core-bound"], &rows));
    report.write(out)
}
