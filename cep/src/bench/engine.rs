//! `cep bench engine`: the engine alone on one core, per rule set, in events per second and
//! nanoseconds per event.

use super::overview::{bench_rules, reference_ticks};
use super::report::{bar_chart, table, Report};
use cep_engine::RulesConfig;
use clap::Args;
use serde::Serialize;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct EngineBenchArgs {
    /// Ticks of the reference stream per rule set.
    #[arg(long, env = "CEP_BENCH_ENGINE_TICKS", default_value_t = 10_000_000)]
    pub ticks: u64,
    /// Where to write results.json, engine.csv, summary.txt and report.html.
    #[arg(long, env = "CEP_OUT", default_value = "bench-results/engine")]
    pub out: PathBuf,
}

/// One rule set's figures.
#[derive(Serialize, Debug, Clone)]
pub struct RuleSetResult {
    pub rule_set: String,
    pub events: u64,
    pub seconds: f64,
    pub events_per_s: f64,
    pub ns_per_event: f64,
    pub outputs: u64,
}

/// The rule sets measured: the reference rules alone and together, and the Oracle workload
/// (R1 and R2 on 200 monitored symbols of 1,470 = 400 queries, the rest filtered out).
pub fn rule_sets() -> Vec<(&'static str, RulesConfig)> {
    let only = |perc, trend, volatility| RulesConfig { perc, trend, volatility, ..RulesConfig::default() };
    vec![
        ("R1 perc", only(true, false, false)),
        ("R2 trend", only(false, true, false)),
        ("R3 volatility", only(false, false, true)),
        ("R1+R2", only(true, true, false)),
        ("R1+R2+R3", RulesConfig::default()),
        ("Oracle 400 queries", RulesConfig::oracle(200)),
    ]
}

pub fn run(args: EngineBenchArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out)?;
    let input = reference_ticks(args.ticks, 1e6);
    let sets = rule_sets();
    let bar = super::progress(sets.len() as u64, "engine");
    let stop = super::stop_flag();
    let mut results = Vec::new();
    for (name, rules) in sets {
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            break;
        }
        bar.set_message(name);
        let run = bench_rules(&input, rules);
        results.push(RuleSetResult {
            rule_set: name.to_string(),
            events: run.events,
            seconds: run.seconds,
            events_per_s: run.events as f64 / run.seconds,
            ns_per_event: run.seconds * 1e9 / run.events as f64,
            outputs: run.outputs,
        });
        bar.inc(1);
    }
    bar.finish_and_clear();
    write(&args.out, &results)?;
    print!("{}", summary_text(&results));
    Ok(())
}

fn summary_text(results: &[RuleSetResult]) -> String {
    let mut text = String::new();
    for r in results {
        text += &format!("[ENGINE {}], Throughput(ops/sec), {:.0}\n", r.rule_set, r.events_per_s);
        text += &format!("[ENGINE {}], CostPerEvent(ns), {:.1}\n", r.rule_set, r.ns_per_event);
        text += &format!("[ENGINE {}], Outputs, {}\n", r.rule_set, r.outputs);
    }
    text
}

/// Writes results.json, engine.csv, summary.txt and report.html.
pub fn write(out: &std::path::Path, results: &[RuleSetResult]) -> anyhow::Result<()> {
    super::write_json(out, "results.json", &results)?;
    let mut csv = String::from("rule_set,events,seconds,events_per_s,ns_per_event,outputs\n");
    for r in results {
        csv += &format!(
            "{},{},{:.6},{:.1},{:.2},{}\n",
            r.rule_set, r.events, r.seconds, r.events_per_s, r.ns_per_event, r.outputs
        );
    }
    std::fs::write(out.join("engine.csv"), csv)?;
    std::fs::write(out.join("summary.txt"), summary_text(results))?;
    let bars: Vec<(String, f64)> = results.iter().map(|r| (r.rule_set.clone(), r.events_per_s)).collect();
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|r| {
            vec![
                r.rule_set.clone(),
                r.events.to_string(),
                format!("{:.2} M", r.events_per_s / 1e6),
                format!("{:.1}", r.ns_per_event),
                r.outputs.to_string(),
            ]
        })
        .collect();
    let mut report = Report::new("Engine alone, one core");
    report
        .note("The reference stream (1,470 symbols, seed 42), event time as if at 1 M ev/s; symbols looked up by name as a worker does. Target: >= 10 M ev/s for R1+R2+R3 (Flink 2.3 one JVM p=1: 2.0 M; Esper standalone: 240k).")
        .section("Events per second by rule set", bar_chart("engine alone", "events/s", &bars))
        .section("Figures", table(&["rule set", "events", "events/s", "ns/event", "outputs"], &rows));
    report.write(out)
}
