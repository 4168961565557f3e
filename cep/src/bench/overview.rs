//! `cep bench` (overview): in one run on this machine, the engine alone, one raw ZeroMQ PUSH/PULL hop
//! (unbatched and batched), and the whole pipeline at full speed and at a fixed rate, side by
//! side with the ratios. Absolute figures drift on shared machines; the ratios are the point.

use anyhow::Context as _;
use cep_core::gbm::{symbol_names, GbmStream};
use cep_core::identity::Role;
use cep_core::reference::{SEED, SYMBOLS};
use cep_core::results::Summary;
use cep_core::wire::TickBatchWriter;
use cep_engine::Engine;
use cep_transport::{Context, Message, Pull, Push, Server, SocketOptions};
use clap::Args;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct OverviewArgs {
    /// Ticks through the engine alone.
    #[arg(long, env = "CEP_BENCH_ENGINE_TICKS", default_value_t = 10_000_000)]
    pub engine_ticks: u64,
    /// Messages through the raw transport, unbatched.
    #[arg(long, env = "CEP_BENCH_TRANSPORT_MESSAGES", default_value_t = 2_000_000)]
    pub transport_messages: u64,
    /// Ticks through the whole pipeline at full speed.
    #[arg(long, env = "CEP_BENCH_PIPELINE_TICKS", default_value_t = 10_000_000)]
    pub pipeline_ticks: u64,
    /// The fixed rate of the latency run (ev/s).
    #[arg(long, env = "CEP_BENCH_LATENCY_RATE", default_value_t = 200_000.0)]
    pub latency_rate: f64,
    /// How long the latency run measures.
    #[arg(long, env = "CEP_BENCH_LATENCY_DURATION", default_value = "10s", value_parser = cep_core::duration::parse_duration)]
    pub latency_duration: Duration,
    /// Workers in the pipeline runs.
    #[arg(long, env = "CEP_WORKERS", default_value_t = 2)]
    pub workers: usize,
    /// Where to write bench.json and each pipeline run's results.
    #[arg(long, env = "CEP_OUT", default_value = "bench-results")]
    pub out: PathBuf,
    /// Skip the pipeline runs (engine and transport only).
    #[arg(long, env = "CEP_BENCH_NO_PIPELINE")]
    pub no_pipeline: bool,
}

/// Everything one bench run measured.
#[derive(Serialize, Debug, Default)]
pub struct BenchResults {
    pub engine_eps: f64,
    pub engine_ns_per_event: f64,
    pub transport_unbatched_msgs_per_s: f64,
    pub transport_batched_eps: f64,
    pub transport_hop_latency_us: cep_core::results::LatencySummary,
    pub pipeline_eps: Option<f64>,
    pub pipeline_lost: Option<u64>,
    pub latency_rate_eps: Option<f64>,
    pub latency_end_to_end_us: Option<cep_core::results::LatencySummary>,
}

/// Ticks of the reference stream as (symbol index, price, event time), made before timing;
/// event time as if the ticks arrived at `rate` (at 1 M ev/s the 10 s windows hold ~6,800
/// prices each).
pub fn reference_ticks(count: u64, rate: f64) -> Vec<(u32, f64, u64)> {
    reference_ticks_over(count, rate, SYMBOLS)
}

/// [`reference_ticks`] over the first `symbols` symbols (at most [`SYMBOLS`], 1,470).
pub fn reference_ticks_over(count: u64, rate: f64, symbols: usize) -> Vec<(u32, f64, u64)> {
    GbmStream::all(SEED, symbols.min(SYMBOLS))
        .take(count as usize)
        .map(|t| (t.symbol as u32, t.price, (t.index as f64 * 1e9 / rate) as u64))
        .collect()
}

/// The engine alone, R1+R2+R3 (the compiled reference rules), one core: symbols looked up
/// by name as a worker does.
pub fn bench_engine(ticks: u64) -> (f64, f64) {
    let run = bench_rules(&reference_ticks(ticks, 1e6), &EngineUnderTest::Compiled(cep_engine::reference_rules()));
    (run.events as f64 / run.seconds, run.seconds * 1e9 / run.events as f64)
}

/// Which engine a benchmark runs.
pub enum EngineUnderTest {
    /// Checked rules, as every worker runs them.
    Compiled(cep_engine::RuleSet),
    /// The same without filter indexing: every query offered every event.
    Unindexed(cep_engine::RuleSet),
    /// The hand-written rules the language replaced (the baseline of the ratios).
    Baseline(cep_engine::baseline::RulesConfig),
}

/// One engine run over prepared ticks.
pub struct EngineRun {
    pub events: u64,
    pub seconds: f64,
    pub outputs: u64,
}

/// The engine alone over `input`, looking symbols up by name as a worker does.
pub fn bench_rules(input: &[(u32, f64, u64)], engine: &EngineUnderTest) -> EngineRun {
    bench_interleaved(input, &[engine]).remove(0)
}

/// Ticks each engine takes in turn in [`bench_interleaved`] (5–10 ms of work).
pub const SLICE: usize = 100_000;

/// Engines over the same input, each with its own state, taking it in turns slice by slice
/// and timed separately: on a shared host the speed changes from second to second, and
/// engines measured one after the other see different machines, so their cost ratio
/// wanders; interleaved, they see the same one.
pub fn bench_interleaved(input: &[(u32, f64, u64)], engines: &[&EngineUnderTest]) -> Vec<EngineRun> {
    let names = symbol_names(SYMBOLS);
    let mut running: Vec<Running> = engines.iter().map(|engine| Running::new(engine)).collect();
    let mut seconds = vec![0.0; engines.len()];
    let mut checksum = 0.0;
    for slice in input.chunks(SLICE) {
        for (engine, seconds) in running.iter_mut().zip(&mut seconds) {
            let start = Instant::now();
            engine.run(slice, &names, &mut checksum);
            *seconds += start.elapsed().as_secs_f64();
        }
    }
    std::hint::black_box(checksum);
    running
        .iter()
        .zip(seconds)
        .map(|(engine, seconds)| EngineRun {
            events: input.len() as u64,
            seconds: seconds.max(1e-9),
            outputs: engine.outputs(),
        })
        .collect()
}

/// An engine being measured.
enum Running {
    Compiled(Engine),
    Baseline(cep_engine::baseline::Baseline),
}

impl Running {
    fn new(engine: &EngineUnderTest) -> Self {
        match engine {
            EngineUnderTest::Compiled(rules) => Running::Compiled(Engine::new(rules.clone())),
            EngineUnderTest::Unindexed(rules) => Running::Compiled(Engine::unindexed(rules.clone())),
            EngineUnderTest::Baseline(config) => Running::Baseline(cep_engine::baseline::Baseline::new(config.clone())),
        }
    }

    fn run(&mut self, ticks: &[(u32, f64, u64)], names: &[String], checksum: &mut f64) {
        match self {
            Running::Compiled(engine) => {
                for &(symbol, price, ts) in ticks {
                    engine.process_symbol(&names[symbol as usize], price, ts, |_, _, value| *checksum += value);
                }
            }
            Running::Baseline(engine) => {
                for &(symbol, price, ts) in ticks {
                    engine.process_symbol(&names[symbol as usize], price, ts, |_, value| *checksum += value);
                }
            }
        }
    }

    fn outputs(&self) -> u64 {
        match self {
            Running::Compiled(engine) => engine.outputs_total(),
            Running::Baseline(engine) => engine.outputs().iter().sum(),
        }
    }
}

/// One raw PUSH/PULL hop over TCP loopback between two threads with a ZeroMQ context (and
/// so an I/O thread) each, as two processes have: `per_message` ticks in each message,
/// encoded as the pipeline encodes them. Returns events per second. (`cep bench transport`
/// measures the full matrix between two processes.)
pub fn bench_transport(messages: u64, per_message: usize) -> anyhow::Result<f64> {
    let options = SocketOptions::default();
    let pull = Pull::bind(&Context::new(), "tcp://127.0.0.1:*", &options, &Role::ALL)?;
    let push = Push::connect(&Context::new(), pull.endpoint(), Server::Router, &options)?;
    let mut batch = TickBatchWriter::new(0);
    for seq in 0..per_message as u64 {
        batch.push(b"S0001", 100.0, 1_700_000_000_000_000_000, 1_700_000_000_000_000_000, 0, seq, 0);
    }
    let frame = batch.seal(0).to_vec();
    let sender = std::thread::spawn(move || -> anyhow::Result<()> {
        let shutdown = AtomicBool::new(false);
        for _ in 0..messages {
            push.send(&frame, &shutdown)?;
        }
        Ok(())
    });
    let mut message = Message::new();
    let mut received = 0;
    let mut start = None;
    while received < messages {
        if pull.recv(&mut message, Duration::from_secs(10))? {
            start.get_or_insert_with(Instant::now);
            received += 1;
        } else {
            anyhow::bail!("raw transport stalled after {received} messages");
        }
    }
    let elapsed = start.map_or(1.0, |s| s.elapsed().as_secs_f64());
    sender.join().map_err(|_| anyhow::anyhow!("sender panicked"))??;
    Ok(((received - 1) * per_message as u64) as f64 / elapsed)
}

/// One-way latency of one raw PUSH/PULL hop between two ZeroMQ contexts (each with its own
/// I/O thread, as two processes have), at a gentle fixed rate: the floor under each of the
/// pipeline's three hops on this machine.
pub fn bench_hop_latency(messages: u64, rate: f64) -> anyhow::Result<cep_core::results::LatencySummary> {
    let receiving = Context::new();
    let options = SocketOptions::default();
    let pull = Pull::bind(&receiving, "tcp://127.0.0.1:*", &options, &Role::ALL)?;
    let push = Push::connect(&Context::new(), pull.endpoint(), Server::Router, &options)?;
    let sender = std::thread::spawn(move || -> anyhow::Result<()> {
        let shutdown = AtomicBool::new(false);
        let period = Duration::from_secs_f64(1.0 / rate);
        for _ in 0..messages {
            std::thread::sleep(period);
            push.send(&cep_core::clock::now_ns().to_le_bytes(), &shutdown)?;
        }
        Ok(())
    });
    let mut histogram = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3)?;
    let mut message = Message::new();
    for received in 0..messages {
        if !pull.recv(&mut message, Duration::from_secs(10))? {
            anyhow::bail!("raw transport stalled after {received} messages");
        }
        let sent = u64::from_le_bytes(message[..8].try_into()?);
        histogram.saturating_record(cep_core::clock::now_ns().saturating_sub(sent).max(1));
    }
    sender.join().map_err(|_| anyhow::anyhow!("sender panicked"))??;
    Ok(cep_collector::latency::summarize(&histogram))
}

fn pipeline(
    args: &OverviewArgs,
    name: &str,
    rate: f64,
    count: Option<u64>,
    duration: Option<Duration>,
) -> anyhow::Result<Summary> {
    let warmup = if rate > 0.0 { Duration::from_secs(1) } else { Duration::ZERO };
    super::pipeline_run(
        &super::PipelinePoint { workers: args.workers, connections: 1, rate, count, duration, warmup },
        &args.out.join(name),
    )
}

pub fn run(args: OverviewArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out).with_context(|| format!("cannot create {}", args.out.display()))?;
    let mut results = BenchResults::default();
    cep_telemetry::errln!("engine alone: {} ticks, R1+R2+R3 ...", args.engine_ticks);
    (results.engine_eps, results.engine_ns_per_event) = bench_engine(args.engine_ticks);
    cep_telemetry::errln!(
        "raw ZeroMQ hop: {} single-tick messages, then {}-tick batches ...",
        args.transport_messages,
        cep_core::wire::DEFAULT_BATCH
    );
    results.transport_unbatched_msgs_per_s = bench_transport(args.transport_messages, 1)?;
    results.transport_batched_eps =
        bench_transport((args.transport_messages / 100).max(100), cep_core::wire::DEFAULT_BATCH)?;
    cep_telemetry::errln!("raw ZeroMQ hop latency: 20000 messages at 10k msg/s ...");
    results.transport_hop_latency_us = bench_hop_latency(20_000, 10_000.0)?;
    if !args.no_pipeline {
        cep_telemetry::errln!("pipeline at full speed: {} ticks, {} workers ...", args.pipeline_ticks, args.workers);
        let full = pipeline(&args, "pipeline-full-speed", 0.0, Some(args.pipeline_ticks), None)?;
        results.pipeline_eps = Some(full.throughput_eps);
        results.pipeline_lost = full.events_lost;
        cep_telemetry::errln!("pipeline at {} ev/s for {:?} ...", args.latency_rate, args.latency_duration);
        let paced = pipeline(&args, "pipeline-latency", args.latency_rate, None, Some(args.latency_duration))?;
        results.latency_rate_eps = Some(paced.throughput_eps);
        results.latency_end_to_end_us = Some(paced.latency_us.end_to_end.clone());
    }
    let json = serde_json::to_string_pretty(&results)?;
    std::fs::write(args.out.join("bench.json"), json + "\n")?;
    write(&args, &results)?;
    cep_telemetry::out!("{}", render(&results));
    Ok(())
}

/// The ratios one run measures: (name, value, target), those whose inputs were measured.
pub fn ratios(r: &BenchResults) -> Vec<(&'static str, f64, &'static str)> {
    let mut ratios = Vec::new();
    if let Some(eps) = r.pipeline_eps {
        ratios.push(("pipeline at full speed / raw batched hop (ev/s)", eps / r.transport_batched_eps, ">= 0.4"));
        ratios.push(("pipeline at full speed / engine alone (ev/s)", eps / r.engine_eps, ""));
    }
    if let Some(h) = &r.latency_end_to_end_us {
        ratios.push((
            "paced pipeline p50 / (3 x raw hop p50)",
            h.p50 / (3.0 * r.transport_hop_latency_us.p50.max(0.001)),
            "<= 1.5 (over tcp)",
        ));
    }
    ratios
}

/// The overview's bar colours, the same in both charts.
const GROUPS: [&str; 3] = ["engine alone", "raw ZeroMQ hop (tcp)", "whole pipeline"];

/// Writes overview.csv (one row per figure), summary.txt (the printed table) and report.html.
fn write(args: &OverviewArgs, r: &BenchResults) -> anyhow::Result<()> {
    use crate::html::chart::{bar_chart, number, Axis, Bar, Unit};
    use crate::html::report::{pipeline_charts, table, Report};
    let hop = &r.transport_hop_latency_us;
    let mut figures: Vec<(String, f64, &str)> = vec![
        ("engine_alone".into(), r.engine_eps, "ev/s"),
        ("engine_alone_cost".into(), r.engine_ns_per_event, "ns/event"),
        ("raw_hop_1_tick_per_message".into(), r.transport_unbatched_msgs_per_s, "msg/s"),
        (format!("raw_hop_{}_ticks_per_message", cep_core::wire::DEFAULT_BATCH), r.transport_batched_eps, "ev/s"),
        ("raw_hop_latency_p50".into(), hop.p50, "us"),
        ("raw_hop_latency_p99".into(), hop.p99, "us"),
    ];
    if let Some(eps) = r.pipeline_eps {
        figures.push(("pipeline_full_speed".into(), eps, "ev/s"));
        // An incomplete run's loss is unknown: NaN, not a guess.
        figures.push(("pipeline_full_speed_lost".into(), r.pipeline_lost.map_or(f64::NAN, |l| l as f64), "events"));
    }
    if let (Some(rate), Some(h)) = (r.latency_rate_eps, &r.latency_end_to_end_us) {
        figures.push(("pipeline_paced_rate".into(), rate, "ev/s"));
        for (name, value) in [("p50", h.p50), ("p99", h.p99), ("p999", h.p999), ("p9999", h.p9999), ("max", h.max)] {
            figures.push((format!("pipeline_paced_end_to_end_{name}"), value, "us"));
        }
    }
    let mut csv = String::from("figure,value,unit\n");
    for (name, value, unit) in &figures {
        csv += &format!("{name},{value:.3},{unit}\n");
    }
    for (name, value, _) in ratios(r) {
        csv += &format!("{},{value:.4},ratio\n", name.replace(',', ";"));
    }
    std::fs::write(args.out.join("overview.csv"), csv)?;
    std::fs::write(args.out.join("summary.txt"), render(r))?;

    let mut report = Report::new("Overview: engine, raw hop and pipeline in one run");
    report.note(&format!(
        "On this machine, one after the other: the engine alone ({} ticks, R1+R2+R3, one thread), one raw ZeroMQ PUSH/PULL hop over tcp loopback ({} single-tick messages, then batches of {} ticks; latency from 20,000 messages at 10k msg/s), the whole pipeline with {} workers at full speed ({} ticks) and paced at {} ev/s for {:?}. Absolute figures drift on a shared host; the ratios, measured in the same run, are the point.",
        args.engine_ticks,
        args.transport_messages,
        cep_core::wire::DEFAULT_BATCH,
        args.workers,
        args.pipeline_ticks,
        number(args.latency_rate),
        args.latency_duration,
    ));
    if args.no_pipeline {
        report.note("Pipeline runs skipped (--no-pipeline).");
    }
    let ratio_rows: Vec<Vec<String>> = ratios(r)
        .into_iter()
        .map(|(name, value, target)| vec![name.to_string(), format!("{value:.2}"), target.to_string()])
        .collect();
    if !ratio_rows.is_empty() {
        report.chart(
            "Ratios",
            "Each ratio divides two figures of this run (targets: docs/BENCHMARKS.md).",
            table(&["ratio", "value", "target"], &ratio_rows),
        );
    }
    let rate = |eps: f64| format!("{} ev/s", number(eps));
    let mut throughput = vec![
        Bar { name: "engine alone, one thread".into(), value: r.engine_eps, group: 0, text: rate(r.engine_eps) },
        Bar {
            name: format!("raw hop, {} ticks/message", cep_core::wire::DEFAULT_BATCH),
            value: r.transport_batched_eps,
            group: 1,
            text: rate(r.transport_batched_eps),
        },
        Bar {
            name: "raw hop, 1 tick/message".into(),
            value: r.transport_unbatched_msgs_per_s,
            group: 1,
            text: rate(r.transport_unbatched_msgs_per_s),
        },
    ];
    if let Some(eps) = r.pipeline_eps {
        let name = format!("pipeline, {} workers, full speed", args.workers);
        throughput.push(Bar { name, value: eps, group: 2, text: rate(eps) });
    }
    if let Some(eps) = r.latency_rate_eps {
        let name = format!("pipeline paced at {} ev/s", number(args.latency_rate));
        throughput.push(Bar { name, value: eps, group: 2, text: rate(eps) });
    }
    report.chart(
        "Throughput",
        "Ticks per second each part sustained (longer is faster): the engine over ticks prepared in memory, the raw hop counting ticks received, the pipeline counting ticks processed by the workers over the run's time.",
        bar_chart(
            "ticks per second",
            &Axis::linear("ticks per second", Unit::Number),
            &throughput,
            &GROUPS,
        ),
    );
    let us = |value: f64| crate::html::chart::micros(value);
    let mut latency = vec![
        Bar { name: "raw hop p50".into(), value: hop.p50, group: 1, text: us(hop.p50) },
        Bar { name: "raw hop p99".into(), value: hop.p99, group: 1, text: us(hop.p99) },
        Bar { name: "3 x raw hop p50 (the floor)".into(), value: 3.0 * hop.p50, group: 1, text: us(3.0 * hop.p50) },
    ];
    if let Some(h) = &r.latency_end_to_end_us {
        latency.push(Bar { name: "pipeline p50".into(), value: h.p50, group: 2, text: us(h.p50) });
        latency.push(Bar { name: "pipeline p99".into(), value: h.p99, group: 2, text: us(h.p99) });
    }
    report.chart(
        "Latency",
        "One-way latency of one raw hop (send stamp to receipt, 10k msg/s) against the paced pipeline's end to end (intended send time to the output at the collector, one value per output; three hops), on a log scale so the tens of microseconds show beside the milliseconds.",
        bar_chart("latency", &Axis::log("latency", Unit::Micros), &latency, &GROUPS),
    );
    let run = args.out.join("pipeline-latency");
    if r.latency_end_to_end_us.is_some() && run.join("percentiles.csv").exists() {
        for (heading, about, chart) in
            pipeline_charts(&run, &format!("paced pipeline ({} ev/s)", number(args.latency_rate)))
        {
            report.chart(&heading, &about, chart);
        }
    }
    let rows: Vec<Vec<String>> = render(r)
        .lines()
        .skip(1)
        .map(|line| {
            let (measurement, rest) = line.split_at(44.min(line.len()));
            let rest = rest.trim_start();
            let (result, target) = split_result(rest);
            vec![measurement.trim_end().to_string(), result, target]
        })
        .collect();
    report.section("All figures (as printed)", table(&["measurement", "result", "target / peers"], &rows));
    report.write(&args.out)
}

/// Splits "12.34 M ev/s  target" at the first double space.
fn split_result(text: &str) -> (String, String) {
    match text.find("  ") {
        Some(at) => (text[..at].to_string(), text[at..].trim().to_string()),
        None => (text.to_string(), String::new()),
    }
}

/// The side-by-side table.
pub fn render(r: &BenchResults) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let m = |eps: f64| format!("{:.2} M ev/s", eps / 1e6);
    let _ = writeln!(out, "{:<44} {:>16}  target / peers", "measurement", "result");
    let _ = writeln!(
        out,
        "{:<44} {:>16}  >= 10 M ev/s; Flink p=1 2.0 M, Esper 240k",
        "engine alone, R1+R2+R3, one core",
        m(r.engine_eps)
    );
    let _ = writeln!(out, "{:<44} {:>13.1} ns", "  cost per event", r.engine_ns_per_event);
    let _ = writeln!(
        out,
        "{:<44} {:>16}  ~2.6 M msg/s on this box",
        "raw ZeroMQ hop, 1 tick per message",
        format!("{:.2} M msg/s", r.transport_unbatched_msgs_per_s / 1e6)
    );
    let _ = writeln!(
        out,
        "{:<44} {:>16}  ~7-11 M ev/s",
        "raw ZeroMQ hop, 4096 ticks per message",
        m(r.transport_batched_eps)
    );
    let hop = &r.transport_hop_latency_us;
    let _ = writeln!(
        out,
        "{:<44} {:>13.1} us  p99 {:.1} us (the floor under each of 3 hops)",
        "raw ZeroMQ hop latency p50, 10k msg/s", hop.p50, hop.p99
    );
    if let Some(eps) = r.pipeline_eps {
        let _ = writeln!(
            out,
            "{:<44} {:>16}  >= 4 M ev/s; Flink p=2 2.9-3.15 M; OCTO 70k",
            "pipeline, 2 workers, full speed",
            m(eps)
        );
        let _ = writeln!(out, "{:<44} {:>16}  must be 0", "  events lost", cep_core::results::known(r.pipeline_lost));
        let _ = writeln!(
            out,
            "{:<44} {:>15.1}%  >= 40 %",
            "  pipeline / raw batched hop",
            100.0 * eps / r.transport_batched_eps
        );
        let _ = writeln!(out, "{:<44} {:>15.1}%", "  pipeline / engine alone", 100.0 * eps / r.engine_eps);
    }
    if let (Some(rate), Some(h)) = (r.latency_rate_eps, &r.latency_end_to_end_us) {
        let _ = writeln!(out, "{:<44} {:>16}", "paced pipeline, achieved rate", m(rate));
        let _ = writeln!(out, "{:<44} {:>13.1} us  Flink 22 us", "  end to end p50", h.p50);
        let _ = writeln!(out, "{:<44} {:>13.1} us  <= 120 us; Flink 122-134 us", "  end to end p99", h.p99);
        let _ = writeln!(out, "{:<44} {:>13.1} us  Flink 1.8 ms", "  end to end p99.9", h.p999);
        let _ = writeln!(out, "{:<44} {:>13.1} us  <= 2 ms", "  end to end p99.99", h.p9999);
        let _ = writeln!(out, "{:<44} {:>13.1} us  Flink 6-12 ms", "  end to end max", h.max);
        let _ = writeln!(out, "{:<44} {:>15.1}x", "  p50 / (3 x raw hop p50)", h.p50 / (3.0 * hop.p50.max(0.001)));
    }
    out
}
