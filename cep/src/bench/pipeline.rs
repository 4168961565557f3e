//! `cep bench transport --pipeline`: the whole product over every local transport, beside
//! the engine alone, on one workload (the OCTO article's table, measured by the product).
//!
//! The workload is the reference one: the reference rules (R1+R2+R3) over the reference
//! model ([`cep_core::reference`]: 1,470 symbols, seed 42, batches of up to 4,096 ticks),
//! the same number of ticks for every row.
//!
//! - **Engine alone**: the compiled rules on one thread of this process over the ticks
//!   prepared in memory ([`super::overview::bench_rules`]). Its throughput, and as its
//!   latency figure its cost per event (1 / throughput): the engine has no end to end.
//! - **Cluster over inproc, ipc, tcp** ([`crate::launcher::run_cluster`]): an unpaced run of
//!   the same ticks for throughput (`events_processed / duration_s`), then a paced run (a
//!   warm-up, then `--latency-rate` ticks/s for `--latency-duration`) for the end-to-end
//!   latency, from each tick's intended send time to its output at the collector. A run
//!   that did not complete, or lost, duplicated or left anything unaccounted, says so in its
//!   row.
//!
//! So that noise does not favour one transport, the throughput runs go in the given order
//! and the latency runs in the reverse one; with `--repeat N` the orders alternate from one
//! round to the next and each row keeps its median.

use super::overview::{bench_rules, reference_ticks, EngineUnderTest};
use super::transport::Kind;
use crate::cli::Usage;
use crate::html::chart::{bar_chart, micros, number, Axis, Bar, Unit};
use crate::html::report::{table, Report};
use crate::launcher::{LaunchArgs, LocalTransport};
use anyhow::Context as _;
use cep_core::duration::parse_duration;
use cep_core::results::{LatencySummary, Summary};
use clap::Args;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The defaults of `--pipeline`: about 50 s on two cores.
pub const DEFAULT_COUNT: u64 = 5_000_000;
pub const DEFAULT_TRANSPORTS: [Kind; 3] = [Kind::Inproc, Kind::Ipc, Kind::Tcp];
pub const DEFAULT_LATENCY_RATE: f64 = 200_000.0;
pub const DEFAULT_LATENCY_DURATION: Duration = Duration::from_secs(10);
pub const DEFAULT_LATENCY_WARMUP: Duration = Duration::from_secs(1);
pub const DEFAULT_OUT: &str = "bench-results/pipeline";

/// The event time the engine's ticks carry, as if they arrived at this rate (ev/s), as
/// `cep bench` gives them. Up to 10 M ticks this spans at most the 10 s volatility window,
/// so the windows hold every tick of the run, as in a cluster run that lasts under 10 s.
pub const ENGINE_EVENT_RATE: f64 = 1e6;

/// The flags only `--pipeline` takes (the transports, the latency rate and the results
/// folder are `cep bench transport`'s own flags).
#[derive(Args, Debug, Default, Clone, PartialEq)]
pub struct PipelineFlags {
    /// With --pipeline: ticks of every throughput run, the engine alone's included [default: 5000000].
    #[arg(long, requires = "pipeline")]
    pub count: Option<u64>,
    /// With --pipeline: how long each paced (latency) run sends after its warm-up [default: 10s].
    #[arg(long, value_parser = parse_duration, requires = "pipeline")]
    pub latency_duration: Option<Duration>,
    /// With --pipeline: the warm-up of each paced run, kept out of the latency figures [default: 1s].
    #[arg(long, value_parser = parse_duration, requires = "pipeline")]
    pub latency_warmup: Option<Duration>,
    /// With --pipeline: workers in every cluster run [default: 2].
    #[arg(long, requires = "pipeline")]
    pub workers: Option<usize>,
    /// With --pipeline: measure every row this many times (the orders alternating between
    /// rounds) and keep each row's median [default: 1].
    #[arg(long, requires = "pipeline")]
    pub repeat: Option<usize>,
}

/// What one `--pipeline` run does, its defaults filled in.
#[derive(Debug, Clone, PartialEq)]
pub struct PipelineArgs {
    pub transports: Vec<Kind>,
    pub count: u64,
    pub latency_rate: f64,
    pub latency_duration: Duration,
    pub latency_warmup: Duration,
    pub workers: usize,
    pub repeat: usize,
    pub out: PathBuf,
}

impl PipelineArgs {
    pub fn new(
        transports: Option<Vec<Kind>>,
        latency_rate: Option<f64>,
        flags: PipelineFlags,
        out: Option<PathBuf>,
    ) -> Self {
        PipelineArgs {
            transports: transports.unwrap_or_else(|| DEFAULT_TRANSPORTS.to_vec()),
            count: flags.count.unwrap_or(DEFAULT_COUNT),
            latency_rate: latency_rate.unwrap_or(DEFAULT_LATENCY_RATE),
            latency_duration: flags.latency_duration.unwrap_or(DEFAULT_LATENCY_DURATION),
            latency_warmup: flags.latency_warmup.unwrap_or(DEFAULT_LATENCY_WARMUP),
            workers: flags.workers.unwrap_or(2),
            repeat: flags.repeat.unwrap_or(1),
            out: out.unwrap_or_else(|| PathBuf::from(DEFAULT_OUT)),
        }
    }

    /// Mistakes found before anything runs (one usage line, exit status 2).
    fn check(&self) -> anyhow::Result<()> {
        let refuse = |text: &str| Err(Usage(text.to_string()).into());
        if self.transports.is_empty() {
            return refuse("--transports: name at least one of inproc, ipc, tcp");
        }
        if self.transports.iter().enumerate().any(|(i, kind)| self.transports[..i].contains(kind)) {
            return refuse("--transports: each transport once");
        }
        if self.count == 0 {
            return refuse("--count must be at least 1");
        }
        if !(self.latency_rate.is_finite() && self.latency_rate > 0.0) {
            return refuse("--latency-rate must be a positive number of ticks per second");
        }
        if self.latency_duration.is_zero() {
            return refuse("--latency-duration must be longer than 0");
        }
        if self.workers == 0 {
            return refuse("--workers must be at least 1");
        }
        if self.repeat == 0 {
            return refuse("--repeat must be at least 1");
        }
        Ok(())
    }

    /// The launcher's arguments for one cluster run of `measure` over `transport`.
    fn launch(&self, transport: Kind, measure: Measure, out: PathBuf) -> LaunchArgs {
        let secure = transport == Kind::Curve;
        let transport = match transport {
            Kind::Inproc => LocalTransport::Inproc,
            Kind::Ipc => LocalTransport::Ipc,
            Kind::Tcp | Kind::Curve => LocalTransport::Tcp,
        };
        let (rate, count, duration, warmup) = match measure {
            Measure::Throughput => (0.0, Some(self.count), None, Duration::ZERO),
            // `cep run --duration` counts the warm-up in; --latency-duration does not.
            Measure::Latency => {
                (self.latency_rate, None, Some(self.latency_duration + self.latency_warmup), self.latency_warmup)
            }
        };
        LaunchArgs {
            transport,
            workers: self.workers,
            connections: 1,
            rate,
            count,
            duration,
            warmup: Some(warmup),
            csv: cep_collector::CsvMode::None,
            quiet: true,
            out,
            secure,
            // The reference workload: symbols, seed, batch and rules as every run has them.
            ..Default::default()
        }
    }
}

/// What a cluster run measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Measure {
    /// Unpaced, `--count` ticks: throughput.
    Throughput,
    /// Paced at `--latency-rate` after a warm-up: end-to-end latency.
    Latency,
}

impl Measure {
    fn name(self) -> &'static str {
        match self {
            Measure::Throughput => "throughput",
            Measure::Latency => "latency",
        }
    }
}

/// The workload every row ran.
#[derive(Serialize, Debug, Clone)]
pub struct Workload {
    pub rules: String,
    pub symbols: usize,
    pub seed: u64,
    pub batch: usize,
    pub workers: usize,
    pub connections: usize,
    /// Ticks of every throughput measurement (engine alone and each cluster).
    pub count: u64,
    /// The event time of the engine's ticks, as if they arrived at this rate.
    pub engine_event_rate_eps: f64,
    pub latency_rate_eps: f64,
    pub latency_duration_s: f64,
    pub latency_warmup_s: f64,
    pub transports: Vec<Kind>,
    pub repeat: usize,
    /// The cores this machine offers (five busy threads or processes share them).
    pub cores: usize,
}

/// One measurement of the engine alone.
#[derive(Serialize, Debug, Clone)]
pub struct EngineMeasurement {
    pub round: usize,
    pub events: u64,
    pub seconds: f64,
    pub events_per_s: f64,
    pub ns_per_event: f64,
    pub outputs: u64,
}

/// One cluster run, as its summary.json has it.
#[derive(Serialize, Debug, Clone)]
pub struct ClusterRun {
    pub transport: Kind,
    pub measure: Measure,
    pub round: usize,
    /// Its results folder, under the bench's.
    pub folder: String,
    /// Seconds from launching to the summary (start-up and shutdown included).
    pub wall_s: f64,
    /// Why the run failed, if it did (its figures are then what the collector wrote, if anything).
    pub error: Option<String>,
    pub complete: bool,
    pub events_sent: Option<u64>,
    pub events_processed: u64,
    pub events_lost: Option<u64>,
    pub outputs: u64,
    pub outputs_lost: u64,
    pub duplicates: u64,
    pub duration_s: f64,
    pub throughput_eps: f64,
    pub end_to_end_us: LatencySummary,
}

impl ClusterRun {
    fn new(transport: Kind, measure: Measure, round: usize, folder: String, wall_s: f64) -> Self {
        ClusterRun {
            transport,
            measure,
            round,
            folder,
            wall_s,
            error: None,
            complete: false,
            events_sent: None,
            events_processed: 0,
            events_lost: None,
            outputs: 0,
            outputs_lost: 0,
            duplicates: 0,
            duration_s: 0.0,
            throughput_eps: 0.0,
            end_to_end_us: LatencySummary::default(),
        }
    }

    fn with_summary(self, s: &Summary) -> Self {
        ClusterRun {
            complete: s.complete,
            events_sent: s.events_sent,
            events_processed: s.events_processed,
            events_lost: s.events_lost,
            outputs: s.outputs.values().sum(),
            outputs_lost: s.outputs_lost,
            duplicates: s.duplicates,
            duration_s: s.duration_s,
            throughput_eps: s.throughput_eps,
            end_to_end_us: s.latency_us.end_to_end.clone(),
            ..self
        }
    }

    /// What is wrong with this run, if anything: failed, incomplete, or something lost or
    /// duplicated.
    fn problem(&self) -> Option<String> {
        let what = format!("{} run over {} ({})", self.measure.name(), self.transport.name(), self.folder);
        if let Some(error) = &self.error {
            return Some(format!("{what} failed: {error}"));
        }
        if !self.complete {
            return Some(format!("{what} incomplete: {}", counts(self)));
        }
        if self.events_lost != Some(0) || self.outputs_lost > 0 || self.duplicates > 0 {
            return Some(format!(
                "{what}: {}, {} outputs lost, {} duplicates",
                counts(self),
                self.outputs_lost,
                self.duplicates
            ));
        }
        None
    }
}

fn counts(run: &ClusterRun) -> String {
    match (run.events_sent, run.events_lost) {
        (Some(sent), Some(lost)) => format!("{} of {sent} events processed, {lost} lost", run.events_processed),
        _ => format!("at least {} events processed, sent and lost unknown", run.events_processed),
    }
}

/// One row of the table: the engine alone, or the cluster over one transport.
#[derive(Serialize, Debug, Clone)]
pub struct Row {
    /// `engine alone`, or the transport's name.
    pub row: String,
    /// `null` for the engine alone.
    pub transport: Option<Kind>,
    /// Ticks of each throughput measurement.
    pub events: u64,
    /// Ticks per second: the engine's over ticks in memory; a cluster's `events_processed /
    /// duration_s` of its unpaced run (the median over rounds); `null` if every run failed.
    pub throughput_eps: Option<f64>,
    /// `throughput_eps` / the engine alone's.
    pub throughput_ratio: Option<f64>,
    /// The engine alone only: its cost per event in µs (1 / throughput). A cost, not a latency.
    pub cost_per_event_us: Option<f64>,
    /// Cluster rows: end-to-end latency of the paced run (the round with the median p99), µs.
    pub latency_us: Option<LatencySummary>,
    /// Cluster rows: the paced run's achieved rate (`events_processed / duration_s`, warm-up included).
    pub paced_rate_eps: Option<f64>,
    /// Cluster rows: mean end-to-end latency / the engine alone's cost per event.
    pub latency_mean_over_engine_cost: Option<f64>,
    /// Outputs of the (first) throughput measurement: the same workload gives the same count.
    pub outputs: Option<u64>,
    /// Every run of the row completed.
    pub complete: bool,
    /// Events lost over all of the row's runs; `null` when a run's loss is unknown.
    pub events_lost: Option<u64>,
    /// Every run's problem, if any (empty: nothing failed, lost or duplicated).
    pub problems: Vec<String>,
    /// The cluster runs behind the row.
    pub runs: Vec<ClusterRun>,
}

/// Everything one `--pipeline` run measured.
#[derive(Serialize, Debug, Clone)]
pub struct PipelineResults {
    /// When the bench started, UTC (RFC 3339).
    pub date: String,
    pub unix_time_s: u64,
    pub workload: Workload,
    /// The measurements in the order they were made.
    pub order: Vec<String>,
    pub engine_runs: Vec<EngineMeasurement>,
    /// The engine alone first, then one row per transport, in `--transports` order.
    pub rows: Vec<Row>,
    /// Stopped by Ctrl-C: the rows hold what was measured.
    pub interrupted: bool,
    pub wall_s: f64,
}

/// The median of `values` (the mean of the middle two for an even count).
fn median(values: &mut [f64]) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}

/// The runs' rows: the engine alone's median, each transport's median throughput and its
/// median-p99 latency run, every ratio from these figures.
pub fn rows(args: &PipelineArgs, engine_runs: &[EngineMeasurement], runs: &[ClusterRun]) -> Vec<Row> {
    let engine_eps = median(&mut engine_runs.iter().map(|r| r.events_per_s).collect::<Vec<_>>());
    let engine_cost_us = engine_eps.map(|eps| 1e6 / eps);
    let ratio = |eps: Option<f64>| Some(eps? / engine_eps?);
    let mut rows = vec![Row {
        row: "engine alone".into(),
        transport: None,
        events: args.count,
        throughput_eps: engine_eps,
        throughput_ratio: ratio(engine_eps),
        cost_per_event_us: engine_cost_us,
        latency_us: None,
        paced_rate_eps: None,
        latency_mean_over_engine_cost: None,
        outputs: engine_runs.first().map(|r| r.outputs),
        complete: !engine_runs.is_empty(),
        events_lost: Some(0),
        problems: Vec::new(),
        runs: Vec::new(),
    }];
    for &kind in &args.transports {
        let mine: Vec<ClusterRun> = runs.iter().filter(|r| r.transport == kind).cloned().collect();
        let measured = |measure: Measure| mine.iter().filter(move |r| r.measure == measure && r.error.is_none());
        let throughput = median(&mut measured(Measure::Throughput).map(|r| r.throughput_eps).collect::<Vec<_>>());
        let mut paced: Vec<&ClusterRun> = measured(Measure::Latency).collect();
        paced.sort_by(|a, b| a.end_to_end_us.p99.total_cmp(&b.end_to_end_us.p99));
        let paced = paced.get(paced.len().saturating_sub(1) / 2).copied();
        let lost = mine.iter().try_fold(0u64, |sum, run| Some(sum + run.events_lost?));
        rows.push(Row {
            row: kind.name().into(),
            transport: Some(kind),
            events: args.count,
            throughput_eps: throughput,
            throughput_ratio: ratio(throughput),
            cost_per_event_us: None,
            latency_us: paced.map(|run| run.end_to_end_us.clone()),
            paced_rate_eps: paced.map(|run| run.throughput_eps),
            latency_mean_over_engine_cost: paced.and_then(|run| Some(run.end_to_end_us.mean / engine_cost_us?)),
            outputs: measured(Measure::Throughput).next().map(|r| r.outputs),
            complete: !mine.is_empty() && mine.iter().all(|run| run.complete && run.error.is_none()),
            events_lost: if mine.is_empty() { None } else { lost },
            problems: mine.iter().filter_map(ClusterRun::problem).collect(),
            runs: mine,
        });
    }
    rows
}

/// Seconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ` (the proleptic Gregorian calendar).
pub fn utc_date(unix_s: u64) -> String {
    let (days, seconds) = ((unix_s / 86_400) as i64, unix_s % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 { shifted_month + 3 } else { shifted_month - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", seconds / 3600, seconds / 60 % 60, seconds % 60)
}

pub fn run(args: PipelineArgs) -> anyhow::Result<()> {
    args.check()?;
    std::fs::create_dir_all(&args.out).with_context(|| format!("cannot create {}", args.out.display()))?;
    let started = Instant::now();
    let unix_time_s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let program = std::env::current_exe().context("cannot find the cep executable")?;
    let stop = super::stop_flag();
    let per_round = 1 + 2 * args.transports.len() as u64;
    let bar = super::progress(per_round * args.repeat as u64, "pipeline");
    let ticks = reference_ticks(args.count, ENGINE_EVENT_RATE);
    let rules = cep_engine::reference_rules();
    let (mut order, mut engine_runs, mut runs) = (Vec::new(), Vec::new(), Vec::new());
    let mut interrupted = false;
    'rounds: for round in 0..args.repeat {
        bar.set_message("engine alone");
        let engine = bench_rules(&ticks, &EngineUnderTest::Compiled(rules.clone()));
        engine_runs.push(EngineMeasurement {
            round,
            events: engine.events,
            seconds: engine.seconds,
            events_per_s: engine.events as f64 / engine.seconds,
            ns_per_event: engine.seconds * 1e9 / engine.events as f64,
            outputs: engine.outputs,
        });
        order.push(format!("round {}: engine alone", round + 1));
        bar.inc(1);
        // Throughput in the given order, latency in the reverse one; every other round the other way.
        let mut forward = args.transports.clone();
        if round % 2 == 1 {
            forward.reverse();
        }
        let backward: Vec<Kind> = forward.iter().rev().copied().collect();
        for (measure, kinds) in [(Measure::Throughput, forward), (Measure::Latency, backward)] {
            for kind in kinds {
                if stop.load(Ordering::Relaxed) {
                    interrupted = true;
                    break 'rounds;
                }
                let folder = match args.repeat {
                    1 => format!("{}-{}", measure.name(), kind.name()),
                    _ => format!("{}-{}-{}", measure.name(), kind.name(), round + 1),
                };
                bar.set_message(format!("{} over {}", measure.name(), kind.name()));
                let launch = args.launch(kind, measure, args.out.join(&folder));
                let start = Instant::now();
                let outcome = crate::launcher::run_cluster(&program, &launch);
                let run = ClusterRun::new(kind, measure, round, folder, start.elapsed().as_secs_f64());
                let run = match outcome {
                    Ok(summary) => run.with_summary(&summary),
                    Err(error) if error.is::<Usage>() => return Err(error),
                    Err(_) if stop.load(Ordering::Relaxed) => {
                        interrupted = true;
                        break 'rounds;
                    }
                    // Keep what the collector wrote, if anything, beside the error.
                    Err(error) => {
                        let written = std::fs::read_to_string(launch.out.join("summary.json"))
                            .ok()
                            .and_then(|text| serde_json::from_str::<Summary>(&text).ok());
                        let run = ClusterRun { error: Some(crate::telemetry::one_line(&error)), ..run };
                        match written {
                            Some(summary) => run.with_summary(&summary),
                            None => run,
                        }
                    }
                };
                order.push(format!("round {}: {} over {}", round + 1, measure.name(), kind.name()));
                bar.set_message(format!(
                    "last: {} over {}, {} ev/s",
                    measure.name(),
                    kind.name(),
                    number(run.throughput_eps)
                ));
                runs.push(run);
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();
    drop(ticks);
    let results = PipelineResults {
        date: utc_date(unix_time_s),
        unix_time_s,
        workload: Workload {
            rules: "the reference rules, R1 perc + R2 trend + R3 volatility (rules/reference.rules)".into(),
            symbols: cep_core::reference::SYMBOLS,
            seed: cep_core::reference::SEED,
            batch: cep_core::reference::BATCH,
            workers: args.workers,
            connections: 1,
            count: args.count,
            engine_event_rate_eps: ENGINE_EVENT_RATE,
            latency_rate_eps: args.latency_rate,
            latency_duration_s: args.latency_duration.as_secs_f64(),
            latency_warmup_s: args.latency_warmup.as_secs_f64(),
            transports: args.transports.clone(),
            repeat: args.repeat,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        },
        order,
        rows: rows(&args, &engine_runs, &runs),
        engine_runs,
        interrupted,
        wall_s: started.elapsed().as_secs_f64(),
    };
    write(&args.out, &results)?;
    let text = summary_text(&results);
    cep_telemetry::out!("{text}");
    let failed: Vec<&str> = results.rows.iter().filter(|r| !r.problems.is_empty()).map(|r| r.row.as_str()).collect();
    if interrupted {
        anyhow::bail!("interrupted: {} holds what was measured", args.out.display());
    }
    if !failed.is_empty() {
        anyhow::bail!("not every run completed with nothing lost: {} (see {})", failed.join(", "), args.out.display());
    }
    Ok(())
}

/// The table's header line.
pub const HEADER: &str =
    "row                 throughput  x engine      lost    p50 us    p99 us  p99.9 us      mean us";

/// The table as text, printed and saved as summary.txt.
pub fn summary_text(results: &PipelineResults) -> String {
    use std::fmt::Write;
    let w = &results.workload;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "The pipeline over each transport, {}: {}, {} symbols (seed {}), {} workers, {} injector stream, batches of up to {} ticks.",
        results.date, w.rules, w.symbols, w.seed, w.workers, w.connections, w.batch
    );
    let _ = writeln!(
        out,
        "Throughput: {} ticks per row, unpaced. Latency: paced at {} ticks/s for {} after a {} warm-up, end to end per output.",
        w.count,
        number(w.latency_rate_eps),
        seconds(w.latency_duration_s),
        seconds(w.latency_warmup_s)
    );
    let _ = writeln!(out);
    let _ = writeln!(out, "{HEADER}");
    let figure = |value: Option<f64>, decimals: usize| value.map_or("-".to_string(), |v| format!("{v:.decimals$}"));
    for row in &results.rows {
        let flag = if row.problems.is_empty() { "" } else { "!" };
        let throughput = row.throughput_eps.map_or("failed".to_string(), |eps| format!("{:.2} M ev/s", eps / 1e6));
        let lost = cep_core::results::known(row.events_lost) + flag;
        let latency = row.latency_us.as_ref();
        let (p50, p99, p999, mean) = match (row.transport, latency) {
            (None, _) => ("-".into(), "-".into(), "-".into(), format!("cost {}", figure(row.cost_per_event_us, 3))),
            (Some(_), Some(l)) => {
                (figure(Some(l.p50), 1), figure(Some(l.p99), 1), figure(Some(l.p999), 1), figure(Some(l.mean), 1))
            }
            (Some(_), None) => ("-".into(), "-".into(), "-".into(), "-".into()),
        };
        let _ = writeln!(
            out,
            "{:<14} {:>15}{flag:1} {:>8} {:>9} {:>9} {:>9} {:>9} {:>12}",
            row.row,
            throughput,
            figure(row.throughput_ratio, 3),
            lost,
            p50,
            p99,
            p999,
            mean
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "x engine = the row's throughput / the engine alone's (one thread over ticks in memory, no I/O); the cluster rows are the whole product: injector, router, {} workers and collector.",
        w.workers
    );
    let _ = writeln!(
        out,
        "The engine alone has no end to end: its figure is its cost per event in us (1 / its throughput), not a latency. The cluster rows' latency runs from each tick's intended send time to its output at the collector."
    );
    if let Some(line) = curve_cost(&results.rows) {
        let _ = writeln!(out, "{line}");
    }
    let _ = writeln!(out, "Order of the measurements: {}.", results.order.join("; "));
    for row in &results.rows {
        for problem in &row.problems {
            let _ = writeln!(out, "! {}: {problem}", row.row);
        }
    }
    if results.interrupted {
        let _ = writeln!(out, "! interrupted: the rows hold what was measured before Ctrl-C.");
    }
    out
}

/// What CURVE costs, when both `tcp` and `curve` were measured: their ratios in this run.
fn curve_cost(rows: &[Row]) -> Option<String> {
    let row = |kind: Kind| rows.iter().find(|row| row.transport == Some(kind));
    let (tcp, curve) = (row(Kind::Tcp)?, row(Kind::Curve)?);
    let throughput = curve.throughput_eps? / tcp.throughput_eps?;
    let mut line = format!(
        "CURVE (every socket encrypted and authenticated): throughput x{throughput:.3} of tcp's ({:.1} % cost)",
        (1.0 - throughput) * 100.0
    );
    if let (Some(open), Some(secure)) = (&tcp.latency_us, &curve.latency_us) {
        line += &format!(", p50 x{:.2} and p99 x{:.2} of tcp's", secure.p50 / open.p50, secure.p99 / open.p99);
    }
    Some(line + ".")
}

/// `1.5 s`, `10 s`, `500 ms`.
fn seconds(value: f64) -> String {
    if value < 1.0 {
        format!("{} ms", number(value * 1e3))
    } else {
        format!("{} s", number(value))
    }
}

/// The bar colours.
const GROUPS: [&str; 2] = ["engine alone, one thread", "whole pipeline"];
const PERCENTILES: [&str; 3] = ["p50", "p99", "p99.9"];

/// Writes results.json, pipeline.csv, summary.txt and report.html.
pub fn write(out: &Path, results: &PipelineResults) -> anyhow::Result<()> {
    super::write_json(out, "results.json", results)?;
    let mut csv = String::from(
        "row,events,throughput_eps,throughput_ratio,cost_per_event_us,paced_rate_eps,p50_us,p99_us,p999_us,mean_us,events_lost,complete\n",
    );
    let cell = |value: Option<f64>| value.map_or(String::new(), |v| format!("{v:.4}"));
    for row in &results.rows {
        let l = row.latency_us.as_ref();
        csv += &format!(
            "{},{},{},{},{},{},{},{},{},{},{},{}\n",
            row.row,
            row.events,
            cell(row.throughput_eps),
            cell(row.throughput_ratio),
            cell(row.cost_per_event_us),
            cell(row.paced_rate_eps),
            cell(l.map(|l| l.p50)),
            cell(l.map(|l| l.p99)),
            cell(l.map(|l| l.p999)),
            cell(l.map(|l| l.mean)),
            row.events_lost.map_or(String::new(), |lost| lost.to_string()),
            row.complete
        );
    }
    std::fs::write(out.join("pipeline.csv"), csv)?;
    std::fs::write(out.join("summary.txt"), summary_text(results))?;
    let w = &results.workload;
    let mut report = Report::new("The pipeline over every transport");
    report
        .note(&format!(
            "{}: the same workload through the engine alone and through the whole product over each transport: {}, {} symbols of the reference model (seed {}), {} ticks per throughput measurement; {} workers and one injector stream; {} cores on this machine.",
            results.date, w.rules, w.symbols, w.seed, w.count, w.workers, w.cores
        ))
        .note("Engine alone: the compiled rules on one thread of the bench over ticks prepared in memory, no I/O. inproc: every role a thread of one process over ZeroMQ's in-memory transport; ipc: one process per role over Unix domain sockets; tcp: one process per role over TCP loopback, as a multi-host cluster runs.")
        .note(&format!(
            "Each cluster row is two runs: {} ticks sent as fast as possible (throughput = ticks processed / the run's time), then ticks paced at {} per second for {} after a {} warm-up (latency from each tick's intended send time to its output at the collector, one value per output). Throughput runs go in the order given, latency runs in the reverse order, so that a slower moment of the machine does not always hit the same transport.",
            w.count,
            number(w.latency_rate_eps),
            seconds(w.latency_duration_s),
            seconds(w.latency_warmup_s)
        ));
    let figure = |value: Option<f64>, decimals: usize| value.map_or("-".to_string(), |v| format!("{v:.decimals$}"));
    let rows: Vec<Vec<String>> = results
        .rows
        .iter()
        .map(|row| {
            let l = row.latency_us.as_ref();
            let latency = |pick: fn(&LatencySummary) -> f64| figure(l.map(pick), 1);
            vec![
                row.row.clone(),
                row.throughput_eps.map_or("failed".into(), |eps| format!("{:.2} M", eps / 1e6)),
                figure(row.throughput_ratio, 3),
                cep_core::results::known(row.events_lost),
                if row.complete { "yes".into() } else { "NO".into() },
                latency(|l| l.p50),
                latency(|l| l.p99),
                latency(|l| l.p999),
                match row.transport {
                    None => format!("{} (cost per event)", figure(row.cost_per_event_us, 3)),
                    Some(_) => latency(|l| l.mean),
                },
                row.paced_rate_eps.map_or("-".into(), |eps| format!("{:.0}", eps)),
            ]
        })
        .collect();
    report.section(
        "The table",
        table(
            &[
                "row",
                "ticks/s",
                "x engine",
                "lost",
                "complete",
                "p50 us",
                "p99 us",
                "p99.9 us",
                "mean us",
                "paced run, ticks/s",
            ],
            &rows,
        ),
    );
    let bars: Vec<Bar> = results
        .rows
        .iter()
        .filter_map(|row| {
            let eps = row.throughput_eps?;
            let ratio = row.throughput_ratio.map_or(String::new(), |r| format!(" ({r:.3} x engine)"));
            let lost = if row.problems.is_empty() { "" } else { ", NOT COMPLETE" };
            Some(Bar {
                name: match row.transport {
                    None => "engine alone".into(),
                    Some(kind) => format!("pipeline over {}", kind.name()),
                },
                value: eps,
                group: usize::from(row.transport.is_some()),
                text: format!("{} ticks/s{ratio}{lost}", number(eps)),
            })
        })
        .collect();
    report.chart(
        "Throughput",
        "Ticks per second each row sustained over the same ticks (longer is faster; linear from zero): the engine alone over ticks in memory, the pipeline counting the ticks its workers processed over the run's time. The text at each bar's end gives its ratio to the engine alone.",
        bar_chart("ticks per second", &Axis::linear("ticks per second", Unit::Number), &bars, &GROUPS),
    );
    let latency: Vec<Bar> = results
        .rows
        .iter()
        .filter_map(|row| Some((row.transport?, row.latency_us.as_ref()?)))
        .flat_map(|(kind, l)| {
            [l.p50, l.p99, l.p999].into_iter().enumerate().map(move |(group, value)| Bar {
                name: format!("{} {}", kind.name(), PERCENTILES[group]),
                value,
                group,
                text: micros(value),
            })
        })
        .collect();
    if !latency.is_empty() {
        report.chart(
            "End-to-end latency",
            &format!(
                "p50, p99 and p99.9 of each transport's paced run ({} ticks/s), from each tick's intended send time to its output's arrival at the collector (log scale: p50 and p99.9 side by side). The engine alone has no such figure: its cost per event is in the table.",
                number(w.latency_rate_eps)
            ),
            bar_chart("end-to-end latency", &Axis::log("end-to-end latency", Unit::Micros), &latency, &PERCENTILES),
        );
    }
    let problems: Vec<Vec<String>> =
        results.rows.iter().flat_map(|row| row.problems.iter().map(|p| vec![row.row.clone(), p.clone()])).collect();
    if !problems.is_empty() {
        report.section("Runs that did not complete with nothing lost", table(&["row", "problem"], &problems));
    }
    report.section(
        "Order of the measurements",
        table(
            &["#", "measurement"],
            &results.order.iter().enumerate().map(|(i, m)| vec![(i + 1).to_string(), m.clone()]).collect::<Vec<_>>(),
        ),
    );
    report.write(out)
}

#[cfg(test)]
mod tests;
