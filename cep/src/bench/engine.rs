//! `cep bench engine`: the engine alone on one core, per rule set, in events per second and
//! nanoseconds per event. Rule sets whose costs are compared run interleaved (slices of the
//! input in turn, each engine with its own state), so the ratios hold on a noisy host; their
//! own figures include sharing the caches with the partner.

use super::overview::{bench_interleaved, reference_ticks_over, EngineUnderTest};
use crate::html::chart::{bar_chart, Axis, Bar, Unit};
use crate::html::report::{table, Report};
use cep_core::reference::SYMBOLS;
use clap::Args;
use serde::Serialize;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct EngineBenchArgs {
    /// Ticks of the reference stream per rule set.
    #[arg(long, env = "CEP_BENCH_ENGINE_TICKS", default_value_t = 10_000_000)]
    pub ticks: u64,
    /// The event time the ticks carry, as if they arrived at this rate (ev/s): at 1 M the
    /// 10 s windows hold ~6,800 prices per symbol (160 MB in all), at 10k ~68 (fits the caches).
    #[arg(long, default_value_t = 1e6)]
    pub event_rate: f64,
    /// Symbols in the stream (fewer keep every symbol's state in the caches), 1 to 1,470.
    #[arg(long, default_value_t = SYMBOLS as u16, value_parser = clap::value_parser!(u16).range(1..=SYMBOLS as i64))]
    pub symbols: u16,
    /// Measure only these rule sets (by name, as printed; repeatable). Default: all.
    #[arg(long)]
    pub only: Vec<String>,
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

/// Names of the rule sets whose costs the ratios compare.
pub const COMPILED_REFERENCE: &str = "R1+R2+R3";
pub const BASELINE_REFERENCE: &str = "R1+R2+R3 hand-written";
pub const ORACLE: &str = "Oracle 400 queries";
pub const ORACLE_UNINDEXED: &str = "Oracle 400 queries, no filter index";
pub const TWO_QUERIES: &str = "R1+R2 as 2 queries on the 200 symbols";

/// The rule sets measured: the compiled reference rules alone and together, the Oracle
/// workload (R1 and R2 on 200 monitored symbols of 1,470 = 400 queries, the rest filtered
/// out) with and without filter indexing, the same two rules as two queries over the same
/// 200 symbols, and the hand-written rules the language replaced.
pub fn rule_sets() -> Vec<(&'static str, EngineUnderTest)> {
    use cep_engine::baseline::RulesConfig;
    let reference = cep_engine::reference_rules();
    let only = |names: &[&str]| EngineUnderTest::Compiled(cep_engine::select_queries(&reference, names));
    let monitored: Vec<String> = (0..200).map(|s| format!("'S{s:04}'")).collect();
    let filter = format!("WHERE symbol IN ({})", monitored.join(", "));
    let two_queries = cep_query::REFERENCE[..cep_query::REFERENCE.find("-- R3").expect("R3 in the reference")]
        .replace("FROM StockTick", &format!("FROM StockTick {filter}"));
    let two_queries = cep_engine::compile(&two_queries, "two queries").expect("the two-query rules check");
    let hand_written = |perc, trend, volatility| {
        EngineUnderTest::Baseline(RulesConfig { perc, trend, volatility, ..RulesConfig::default() })
    };
    vec![
        ("R1 perc", only(&["perc"])),
        ("R1 hand-written", hand_written(true, false, false)),
        ("R2 trend", only(&["trend"])),
        ("R2 hand-written", hand_written(false, true, false)),
        ("R3 volatility", only(&["volatility"])),
        ("R3 hand-written", hand_written(false, false, true)),
        ("R1+R2", only(&["perc", "trend"])),
        (COMPILED_REFERENCE, EngineUnderTest::Compiled(reference.clone())),
        (BASELINE_REFERENCE, EngineUnderTest::Baseline(RulesConfig::default())),
        (ORACLE, EngineUnderTest::Compiled(cep_engine::oracle_rules())),
        (ORACLE_UNINDEXED, EngineUnderTest::Unindexed(cep_engine::oracle_rules())),
        (TWO_QUERIES, EngineUnderTest::Compiled(two_queries)),
        ("Oracle hand-written", EngineUnderTest::Baseline(RulesConfig::oracle(200))),
    ]
}

/// Rule sets compared with each other, measured together (interleaved, so both see the same
/// machine): each compiled rule against its hand-written self, and the 400 Oracle queries
/// against the same rules as two.
pub const COMPARED: [(&str, &str); 5] = [
    ("R1 perc", "R1 hand-written"),
    ("R2 trend", "R2 hand-written"),
    ("R3 volatility", "R3 hand-written"),
    (COMPILED_REFERENCE, BASELINE_REFERENCE),
    (ORACLE, TWO_QUERIES),
];

/// Cost ratios between rule sets of one run.
#[derive(Serialize, Debug, Clone, Default)]
pub struct Ratios {
    /// Compiled reference rules' cost per event over the hand-written rules' (target <= 1.5).
    pub compiled_over_hand_written: Option<f64>,
    /// The 400-query Oracle workload's cost over the same two rules as two queries.
    pub oracle_400_over_two_queries: Option<f64>,
    /// What filter indexing saves: the Oracle workload's cost without it over with it.
    pub unindexed_over_indexed: Option<f64>,
    /// Every compared pair measured (interleaved) in this run: each compiled rule over its
    /// hand-written self, and the two above.
    pub pairs: Vec<PairRatio>,
}

/// One rule set's cost per event over another's, measured in the same run.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct PairRatio {
    pub rule_set: String,
    pub over: String,
    pub cost_ratio: f64,
}

impl Ratios {
    pub fn of(results: &[RuleSetResult]) -> Self {
        let cost = |name: &str| results.iter().find(|r| r.rule_set == name).map(|r| r.ns_per_event);
        let ratio = |a: &str, b: &str| Some(cost(a)? / cost(b)?);
        Ratios {
            compiled_over_hand_written: ratio(COMPILED_REFERENCE, BASELINE_REFERENCE),
            oracle_400_over_two_queries: ratio(ORACLE, TWO_QUERIES),
            unindexed_over_indexed: ratio(ORACLE_UNINDEXED, ORACLE),
            pairs: COMPARED
                .iter()
                .filter_map(|&(a, b)| {
                    Some(PairRatio { rule_set: a.to_string(), over: b.to_string(), cost_ratio: ratio(a, b)? })
                })
                .collect(),
        }
    }
}

pub fn run(args: EngineBenchArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out)?;
    if !(args.event_rate.is_finite() && args.event_rate > 0.0) {
        anyhow::bail!("--event-rate must be a positive number of events per second");
    }
    let input = reference_ticks_over(args.ticks, args.event_rate, args.symbols as usize);
    let mut sets = rule_sets();
    if !args.only.is_empty() {
        let known: Vec<&str> = sets.iter().map(|(name, _)| *name).collect();
        if let Some(unknown) = args.only.iter().find(|name| !known.contains(&name.as_str())) {
            anyhow::bail!("--only `{unknown}`: the rule sets are {}", known.join(", "));
        }
        sets.retain(|(name, _)| args.only.iter().any(|only| only == name));
    }
    let bar = super::progress(sets.len() as u64, "engine");
    let stop = super::stop_flag();
    let mut results: Vec<RuleSetResult> = Vec::new();
    for (at, (name, rules)) in sets.iter().enumerate() {
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            break;
        }
        if results.iter().any(|r| r.rule_set == *name) {
            continue; // measured with its partner
        }
        // A compared pair is measured together when both are selected.
        let partner = COMPARED
            .iter()
            .find_map(|&(a, b)| (a == *name).then_some(b).or((b == *name).then_some(a)))
            .and_then(|partner| sets[at + 1..].iter().find(|(other, _)| *other == partner));
        let mut measured = vec![(*name, rules)];
        measured.extend(partner.map(|(other, rules)| (*other, rules)));
        bar.set_message(measured.iter().map(|(name, _)| *name).collect::<Vec<_>>().join(" | "));
        let engines: Vec<&EngineUnderTest> = measured.iter().map(|(_, rules)| *rules).collect();
        for ((name, _), run) in measured.iter().zip(bench_interleaved(&input, &engines)) {
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
    }
    results.sort_by_key(|r| sets.iter().position(|(name, _)| *name == r.rule_set));
    bar.finish_and_clear();
    write(&args, &results)?;
    cep_telemetry::out!("{}", summary_text(&results));
    Ok(())
}

fn summary_text(results: &[RuleSetResult]) -> String {
    let mut text = String::new();
    for r in results {
        text += &format!("[ENGINE {}], Throughput(ops/sec), {:.0}\n", r.rule_set, r.events_per_s);
        text += &format!("[ENGINE {}], CostPerEvent(ns), {:.1}\n", r.rule_set, r.ns_per_event);
        text += &format!("[ENGINE {}], Outputs, {}\n", r.rule_set, r.outputs);
    }
    let ratios = Ratios::of(results);
    let mut ratio = |name: &str, value: Option<f64>| {
        if let Some(value) = value {
            text += &format!("[RATIO], {name}, {value:.2}\n");
        }
    };
    ratio("CompiledOverHandWritten(R1+R2+R3 cost, target <= 1.5)", ratios.compiled_over_hand_written);
    ratio("Oracle400OverTwoQueries(cost)", ratios.oracle_400_over_two_queries);
    ratio("UnindexedOverIndexed(Oracle 400 cost)", ratios.unindexed_over_indexed);
    // Each rule alone (the pairs the lines above do not cover).
    for pair in ratios.pairs.iter().filter(|p| p.rule_set.starts_with("R") && p.rule_set != COMPILED_REFERENCE) {
        ratio(&format!("CompiledOverHandWritten({} cost)", pair.rule_set), Some(pair.cost_ratio));
    }
    text
}

/// The groups the chart colours: compiled (as every worker runs), hand-written, and compiled
/// without filter indexing.
const GROUPS: [&str; 3] = ["compiled rule language", "hand-written (baseline)", "compiled, no filter index"];

fn group(rule_set: &str) -> usize {
    if rule_set.ends_with("hand-written") {
        1
    } else if rule_set == ORACLE_UNINDEXED {
        2
    } else {
        0
    }
}

/// Writes results.json, engine.csv, summary.txt and report.html.
pub fn write(args: &EngineBenchArgs, results: &[RuleSetResult]) -> anyhow::Result<()> {
    let out = args.out.as_path();
    #[derive(Serialize)]
    struct Results<'a> {
        rule_sets: &'a [RuleSetResult],
        ratios: Ratios,
    }
    let ratios = Ratios::of(results);
    super::write_json(out, "results.json", &Results { rule_sets: results, ratios: ratios.clone() })?;
    let mut csv = String::from("rule_set,events,seconds,events_per_s,ns_per_event,outputs\n");
    for r in results {
        csv += &format!(
            "{},{},{:.6},{:.1},{:.2},{}\n",
            r.rule_set, r.events, r.seconds, r.events_per_s, r.ns_per_event, r.outputs
        );
    }
    std::fs::write(out.join("engine.csv"), csv)?;
    std::fs::write(out.join("summary.txt"), summary_text(results))?;
    let bars: Vec<Bar> = results
        .iter()
        .map(|r| Bar {
            name: r.rule_set.clone(),
            value: r.events_per_s,
            group: group(&r.rule_set),
            text: format!("{:.2} M ev/s, {:.1} ns/event", r.events_per_s / 1e6, r.ns_per_event),
        })
        .collect();
    let ratio_rows: Vec<Vec<String>> = ratios
        .pairs
        .iter()
        .map(|p| {
            let target = match p.rule_set.as_str() {
                COMPILED_REFERENCE => "<= 1.5",
                ORACLE => "about 1: filter indexing",
                _ => "",
            };
            vec![format!("{} / {}", p.rule_set, p.over), format!("{:.2}x", p.cost_ratio), target.to_string()]
        })
        .chain(ratios.unindexed_over_indexed.map(|r| {
            vec![
                format!("{ORACLE_UNINDEXED} / {ORACLE} (not interleaved)"),
                format!("{r:.0}x"),
                "what filter indexing saves".to_string(),
            ]
        }))
        .collect();
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
        .note(&format!(
            "Each rule set runs over the same {} ticks of the reference stream ({} symbols, seed {}; event time as if the ticks arrived at {} ev/s) in one thread, symbols looked up by name as a worker does. Rule sets that are compared run interleaved, {} ticks each in turn, so both see the same machine; absolute figures drift on a shared host, the ratios are the point.",
            args.ticks,
            args.symbols,
            cep_core::reference::SEED,
            crate::html::chart::number(args.event_rate),
            super::overview::SLICE
        ))
        .note("Target: >= 10 M ev/s for R1+R2+R3 on one core (Flink 2.3 one JVM p=1: 2.0 M; Esper standalone: 240k).");
    if !ratio_rows.is_empty() {
        report.chart(
            "Cost ratios",
            "Cost per event of one rule set over another's, measured in this run: above 1 the first is slower. Pairs are measured interleaved.",
            table(&["ratio", "cost ratio", "target"], &ratio_rows),
        );
    }
    report
        .chart(
            "Events per second by rule set",
            "Ticks processed per second of engine time (longer is faster), with the cost per tick at the end of each bar. Blue bars run the compiled rule language as workers do, orange ones the hand-written rules it replaced, the green one the Oracle queries without filter indexing (every query offered every tick).",
            bar_chart("engine alone, one core", &Axis::linear("events per second", Unit::Number), &bars, &GROUPS),
        )
        .section("Figures", table(&["rule set", "events", "events/s", "ns/event", "outputs"], &rows));
    report.write(out)
}
