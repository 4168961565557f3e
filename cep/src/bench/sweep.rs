//! `cep bench sweep`: the Oracle white paper's two sweeps on the whole pipeline, and a
//! saturation search. (a) 1..N connections at a fixed rate per connection; (b) N connections
//! with the rate per connection rising in steps. Per point: the insert rate achieved, the
//! output rate, end-to-end and per-hop latency, and the events lost (which must be 0).
//! Latency is measured from each tick's intended send time (no coordinated omission).

use super::{pipeline_run, PipelinePoint};
use crate::html::chart::{line_chart, Axis, Series, Unit};
use crate::html::report::{pipeline_charts, table, Report};
use cep_core::duration::parse_duration;
use cep_core::results::{HopLatencies, LatencySummary, Summary};
use clap::Args;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct SweepArgs {
    /// Connections: sweep (a) runs 1..=N of them, sweep (b) all N.
    #[arg(long, default_value_t = 4)]
    pub connections: usize,
    /// Sweep (a): ticks per second per connection.
    #[arg(long, default_value_t = 50_000.0)]
    pub rate_per_connection: f64,
    /// Sweep (b): the rising rates per connection.
    #[arg(long, value_delimiter = ',', default_value = "25000,50000,100000,200000")]
    pub rate_steps: Vec<f64>,
    /// Workers in every run.
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// How long each point measures (after its warm-up).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub point_duration: Duration,
    /// Warm-up of each point, kept out of the latency figures.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub warmup: Duration,
    /// Saturation search: the highest total rate with nothing lost and end-to-end p99 under
    /// this bound (0s skips the search).
    #[arg(long, default_value = "2ms", value_parser = parse_duration)]
    pub p99_bound: Duration,
    /// Where to write results.json, sweep.csv, report.html and each point's results folder.
    #[arg(long, env = "CEP_OUT", default_value = "bench-results/sweep")]
    pub out: PathBuf,
}

/// One measured point.
#[derive(Serialize, Debug, Clone)]
pub struct SweepPoint {
    pub sweep: String,
    pub connections: usize,
    pub rate_per_connection: f64,
    pub target_rate: f64,
    pub insert_rate: f64,
    pub output_rate: f64,
    /// `None` if the run did not complete (its loss is unknown).
    pub events_lost: Option<u64>,
    pub complete: bool,
    pub end_to_end_us: LatencySummary,
    /// Every hop's distribution (and end to end again), as in the point's summary.json.
    pub hops_us: HopLatencies,
    pub folder: String,
}

impl SweepPoint {
    fn from_summary(sweep: &str, connections: usize, rate_per_connection: f64, folder: &str, s: &Summary) -> Self {
        let outputs: u64 = s.outputs.values().sum();
        let l = &s.latency_us;
        SweepPoint {
            sweep: sweep.to_string(),
            connections,
            rate_per_connection,
            target_rate: connections as f64 * rate_per_connection,
            insert_rate: s.throughput_eps,
            output_rate: if s.duration_s > 0.0 { outputs as f64 / s.duration_s } else { 0.0 },
            events_lost: s.events_lost,
            complete: s.complete,
            end_to_end_us: l.end_to_end.clone(),
            hops_us: l.clone(),
            folder: folder.to_string(),
        }
    }

    /// Sustained: nothing lost, the rate held, the latency bound kept.
    fn sustained(&self, p99_bound_us: f64) -> bool {
        self.complete
            && self.events_lost == Some(0)
            && self.insert_rate >= 0.9 * self.target_rate
            && self.end_to_end_us.p99 <= p99_bound_us
    }
}

/// Everything a sweep measured.
#[derive(Serialize, Debug, Default)]
pub struct SweepResults {
    pub points: Vec<SweepPoint>,
    /// The saturation search's answer: the highest total rate sustained within the bound.
    pub saturation_rate: Option<f64>,
    pub p99_bound_us: f64,
}

fn measure(
    args: &SweepArgs,
    sweep: &str,
    connections: usize,
    rate_per_connection: f64,
    duration: Duration,
) -> anyhow::Result<SweepPoint> {
    let folder = format!("{sweep}-{connections}x{rate_per_connection:.0}");
    let point = PipelinePoint {
        workers: args.workers,
        connections,
        rate: connections as f64 * rate_per_connection,
        count: None,
        duration: Some(duration),
        warmup: args.warmup,
    };
    let summary = pipeline_run(&point, &args.out.join(&folder))?;
    Ok(SweepPoint::from_summary(sweep, connections, rate_per_connection, &folder, &summary))
}

pub fn run(args: SweepArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out)?;
    let stop = super::stop_flag();
    let bound_us = args.p99_bound.as_secs_f64() * 1e6;
    let mut results = SweepResults { p99_bound_us: bound_us, ..SweepResults::default() };
    let planned = args.connections + args.rate_steps.len();
    let bar = super::progress(planned as u64, "sweep");
    for connections in 1..=args.connections {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        bar.set_message(format!("(a) {connections} x {:.0}/s", args.rate_per_connection));
        match measure(&args, "a", connections, args.rate_per_connection, args.point_duration) {
            Ok(point) => {
                bar.set_message(format!(
                    "last: {:.0} ticks/s, p99 {:.0} us",
                    point.insert_rate, point.end_to_end_us.p99
                ));
                results.points.push(point)
            }
            // Interrupted: keep what was measured.
            Err(_) if stop.load(Ordering::Relaxed) => break,
            Err(error) => return Err(error),
        }
        bar.inc(1);
    }
    for &rate in &args.rate_steps {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        bar.set_message(format!("(b) {} x {rate:.0}/s", args.connections));
        match measure(&args, "b", args.connections, rate, args.point_duration) {
            Ok(point) => results.points.push(point),
            Err(_) if stop.load(Ordering::Relaxed) => break,
            Err(error) => return Err(error),
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    if !args.p99_bound.is_zero() && !stop.load(Ordering::Relaxed) {
        results.saturation_rate = saturation_search(&args, bound_us, &mut results.points, &stop)?;
    }
    write(&args.out, &results)?;
    cep_telemetry::out!("{}", summary_text(&results));
    Ok(())
}

/// The YCSB-style lines, printed and saved as summary.txt.
fn summary_text(results: &SweepResults) -> String {
    let mut text = String::new();
    for p in &results.points {
        text += &format!(
            "[SWEEP {} {}x{:.0}], InsertRate(ops/sec), {:.0}, OutputRate(ops/sec), {:.0}, AverageLatency(us), {:.1}, 99thPercentileLatency(us), {:.1}, 99.99thPercentileLatency(us), {:.1}, MaxLatency(us), {:.1}, Lost, {}\n",
            p.sweep, p.connections, p.rate_per_connection, p.insert_rate, p.output_rate, p.end_to_end_us.mean, p.end_to_end_us.p99, p.end_to_end_us.p9999, p.end_to_end_us.max, cep_core::results::known(p.events_lost)
        );
    }
    if let Some(rate) = results.saturation_rate {
        text += &format!(
            "[SATURATION], Throughput(ops/sec), {rate:.0}, 99thPercentileBound(us), {:.0}\n",
            results.p99_bound_us
        );
    }
    text
}

/// Doubles the total rate until a point is not sustained, then bisects (four steps) between
/// the last sustained rate and the first that was not.
fn saturation_search(
    args: &SweepArgs,
    bound_us: f64,
    points: &mut Vec<SweepPoint>,
    stop: &std::sync::atomic::AtomicBool,
) -> anyhow::Result<Option<f64>> {
    let probe = |rate: f64, points: &mut Vec<SweepPoint>| -> anyhow::Result<bool> {
        match measure(args, "saturation", 1, rate, args.point_duration.min(Duration::from_secs(3))) {
            Ok(point) => {
                let ok = point.sustained(bound_us);
                points.push(point);
                Ok(ok)
            }
            // Interrupted: the search ends with what it knows.
            Err(_) if stop.load(Ordering::Relaxed) => Ok(false),
            Err(error) => Err(error),
        }
    };
    let (mut good, mut bad) = (None::<f64>, None::<f64>);
    let mut rate = 100_000.0;
    while bad.is_none() && rate <= 16e6 && !stop.load(Ordering::Relaxed) {
        if probe(rate, points)? {
            good = Some(rate);
            rate *= 2.0;
        } else {
            bad = Some(rate);
        }
    }
    if let (Some(mut low), Some(mut high)) = (good, bad) {
        for _ in 0..4 {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let middle = (low + high) / 2.0;
            if probe(middle, points)? {
                low = middle;
            } else {
                high = middle;
            }
        }
        good = Some(low);
    }
    Ok(good)
}

/// Writes results.json, sweep.csv and report.html.
pub fn write(out: &Path, results: &SweepResults) -> anyhow::Result<()> {
    super::write_json(out, "results.json", results)?;
    let hop_names = ["end_to_end", "injector_to_router", "router", "router_to_worker", "engine", "worker_to_collector"];
    let mut csv = String::from("sweep,connections,rate_per_connection,target_rate,insert_rate,output_rate,events_lost");
    for hop in hop_names {
        for stat in ["mean", "p50", "p99", "p999", "p9999", "max"] {
            csv += &format!(",{hop}_{stat}_us");
        }
    }
    csv.push('\n');
    for p in &results.points {
        csv += &format!(
            "{},{},{:.0},{:.0},{:.1},{:.1},{}",
            p.sweep,
            p.connections,
            p.rate_per_connection,
            p.target_rate,
            p.insert_rate,
            p.output_rate,
            p.events_lost.map_or(String::new(), |lost| lost.to_string())
        );
        let h = &p.hops_us;
        for l in
            [&h.end_to_end, &h.injector_to_router, &h.router, &h.router_to_worker, &h.engine, &h.worker_to_collector]
        {
            csv += &format!(",{:.2},{:.2},{:.2},{:.2},{:.2},{:.2}", l.mean, l.p50, l.p99, l.p999, l.p9999, l.max);
        }
        csv.push('\n');
    }
    std::fs::write(out.join("sweep.csv"), csv)?;
    std::fs::write(out.join("summary.txt"), summary_text(results))?;
    let mut report = Report::new("Pipeline sweeps");
    report.note("Whole pipeline (injector, router, workers, collector as processes on loopback), R1+R2+R3. Latency is measured end to end from each tick's intended send time, so a stalled pipeline cannot hide its stall (no coordinated omission).");
    if let Some(rate) = results.saturation_rate {
        report.note(&format!(
            "Saturation: {rate:.0} ticks/s sustained with nothing lost and end-to-end p99 under {:.0} us.",
            results.p99_bound_us
        ));
    }
    for sweep in ["a", "b", "saturation"] {
        let points: Vec<&SweepPoint> = results.points.iter().filter(|p| p.sweep == sweep).collect();
        if points.is_empty() {
            continue;
        }
        let by_rate = |value: &dyn Fn(&SweepPoint) -> f64| -> Vec<(f64, f64)> {
            let mut v: Vec<(f64, f64)> = points.iter().map(|p| (p.target_rate, value(p))).collect();
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            v
        };
        let name = match sweep {
            "a" => "(a) connections at a fixed rate each",
            "b" => "(b) rising rate per connection",
            _ => "saturation search",
        };
        let rate_axis = Axis::linear("target insert rate (ticks per second)", Unit::Number).spanning_data();
        report.chart(
            &format!("{name}: throughput"),
            "Per point, against the total rate asked for: ticks processed and outputs received by the collector per second of the run (warm-up included); below the target means the pipeline could not keep up.",
            line_chart(
                "throughput against insert rate",
                &rate_axis,
                &Axis::linear("per second", Unit::Number),
                &[
                    Series::new("achieved insert rate (ticks/s)", by_rate(&|p| p.insert_rate)),
                    Series::new("output rate (outputs/s)", by_rate(&|p| p.output_rate)),
                ],
            ),
        );
        report.chart(
            &format!("{name}: latency"),
            "Mean, p99 and max end-to-end latency of each point (from each tick's intended send time to its output at the collector, one value per output, warm-up excluded), log scale.",
            line_chart(
                "end-to-end latency against insert rate",
                &rate_axis,
                &Axis::log("end-to-end latency", Unit::Micros),
                &[
                    Series::new("mean", by_rate(&|p| p.end_to_end_us.mean)),
                    Series::new("p99", by_rate(&|p| p.end_to_end_us.p99)),
                    Series::new("max", by_rate(&|p| p.end_to_end_us.max)),
                ],
            ),
        );
    }
    if let Some(heaviest) =
        results.points.iter().filter(|p| p.sweep != "saturation").max_by(|a, b| a.target_rate.total_cmp(&b.target_rate))
    {
        for (heading, about, chart) in pipeline_charts(
            &out.join(&heaviest.folder),
            &format!("heaviest point ({} ticks/s)", crate::html::chart::number(heaviest.target_rate)),
        ) {
            report.chart(&heading, &about, chart);
        }
    }
    let rows: Vec<Vec<String>> = results
        .points
        .iter()
        .map(|p| {
            let l = &p.end_to_end_us;
            vec![
                p.sweep.clone(),
                p.connections.to_string(),
                format!("{:.0}", p.target_rate),
                format!("{:.0}", p.insert_rate),
                format!("{:.0}", p.output_rate),
                format!("{:.1}", l.mean),
                format!("{:.1}", l.p50),
                format!("{:.1}", l.p99),
                format!("{:.1}", l.p999),
                format!("{:.1}", l.p9999),
                format!("{:.1}", l.max),
                cep_core::results::known(p.events_lost),
            ]
        })
        .collect();
    report.section(
        "Points",
        table(
            &[
                "sweep", "conns", "target/s", "insert/s", "output/s", "mean us", "p50", "p99", "p99.9", "p99.99",
                "max", "lost",
            ],
            &rows,
        ),
    );
    report.write(out)
}
