//! The engine alone over a recorded `input.csv`: what the cluster must reproduce exactly.

use anyhow::{bail, Context as _};
use cep_core::replay::{TickFile, TimeUnit};
use cep_engine::{Engine, RuleSet};
use clap::Args;
use std::collections::BTreeMap;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

#[derive(Args, Debug)]
pub struct EngineArgs {
    /// A tick file: a recorded input (`cep run --record-input` writes `input.csv`) or a file
    /// `--replay` takes (`symbol;price;timestamp` lines, or CSV with a header).
    #[arg(long, env = "CEP_INPUT")]
    pub input: PathBuf,
    /// Where to write the outputs (`rule,symbol,price,value,injector,seq`); default
    /// `standalone-outputs.csv` beside the input.
    #[arg(long, env = "CEP_OUTPUT")]
    pub output: Option<PathBuf>,
    /// The rules file (default: the built-in reference rules).
    #[arg(long, env = "CEP_RULES")]
    pub rules: Option<PathBuf>,
    /// The unit of the input's timestamps when its header does not name one (s, ms, us, ns;
    /// default ms).
    #[arg(long, env = "CEP_TIME_UNIT", value_parser = cep_core::replay::TimeUnit::parse)]
    pub time_unit: Option<TimeUnit>,
    /// For a file without `injector,seq` columns: the streams it was replayed over (`cep run
    /// --replay FILE --connections N`), so that outputs name the same stream and sequence
    /// number as the cluster's.
    #[arg(long, env = "CEP_CONNECTIONS", default_value_t = 1)]
    pub connections: usize,
    /// As the router's `--allowed-lateness`: ticks further behind their symbol's latest event
    /// time are dropped (default: processed at that time).
    #[arg(long, env = "CEP_ALLOWED_LATENESS", value_parser = cep_core::duration::parse_duration)]
    pub allowed_lateness: Option<std::time::Duration>,
}

/// One tick of the input, with its stream and sequence number.
#[derive(Clone, Debug, PartialEq)]
pub struct InputRow {
    pub injector: u32,
    pub seq: u64,
    pub symbol: String,
    pub price: f64,
    /// Event time, ns.
    pub t_event: u64,
}

/// One output of the standalone engine.
#[derive(Clone, Debug, PartialEq)]
pub struct StandaloneOutput {
    pub rule: String,
    pub symbol: String,
    pub price: f64,
    pub value: f64,
    pub injector: u32,
    pub seq: u64,
}

/// Reads a recorded `input.csv` (`injector,seq,symbol,price,t_inject_ns[,t_event_ns]`).
pub fn read_input(path: &Path) -> anyhow::Result<Vec<InputRow>> {
    read_ticks(path, None, 1)
}

/// Reads any tick file (see [`cep_core::replay`]). Rows without a recorded stream and
/// sequence number get those the injector gives them over `connections` streams.
pub fn read_ticks(path: &Path, unit: Option<TimeUnit>, connections: usize) -> anyhow::Result<Vec<InputRow>> {
    if connections == 0 {
        bail!("--connections must be at least 1");
    }
    let file = cep_core::replay::read(path, unit).map_err(anyhow::Error::msg)?;
    let mut next_seq = vec![0u64; connections];
    let rows = file
        .ticks
        .iter()
        .map(|tick| {
            let (injector, seq) = tick.origin.unwrap_or_else(|| {
                let stream = TickFile::stream_of(tick.symbol, connections);
                next_seq[stream] += 1;
                (stream as u32, next_seq[stream] - 1)
            });
            InputRow {
                injector,
                seq,
                symbol: file.names[tick.symbol as usize].clone(),
                price: tick.price,
                t_event: tick.t_event,
            }
        })
        .collect();
    Ok(rows)
}

/// How the engine treats the input beyond its rules.
#[derive(Clone, Copy, Debug, Default)]
pub struct EventTime {
    /// As [`cep_engine::Engine::set_allowed_lateness`].
    pub allowed_lateness_ns: Option<u64>,
}

/// Runs one engine over the rows in order (each symbol's rows are in its stream's order).
pub fn evaluate(rows: &[InputRow], rules: RuleSet) -> Vec<StandaloneOutput> {
    evaluate_deployments(rows, rules, &[], EventTime::default()).outputs
}

/// What the engine alone made of an input.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Evaluation {
    pub outputs: Vec<StandaloneOutput>,
    /// As `summary.json`'s fields of the same names.
    pub late: u64,
    pub late_dropped: u64,
    pub final_outputs: u64,
}

/// Like [`evaluate`], with rule switches as a cluster makes them: each deployment's rules
/// process, per stream, the rows from its switch point on (`at`: stream -> first sequence
/// number). Rows are processed phase by phase; each symbol's rows keep their order, and a
/// symbol's state depends on its own rows only, so this is what every worker computes. At the
/// end of the rows (the end of input) the open tumbling windows emit, as a worker's do: each
/// such output names its symbol's stream and that stream's tick count as `seq`.
pub fn evaluate_deployments(
    rows: &[InputRow],
    rules: RuleSet,
    deployments: &[(RuleSet, BTreeMap<u32, u64>)],
    event_time: EventTime,
) -> Evaluation {
    let phase_of = |row: &InputRow| {
        deployments.iter().take_while(|(_, at)| at.get(&row.injector).is_some_and(|&first| row.seq >= first)).count()
    };
    let mut engine = Engine::new(rules);
    engine.set_allowed_lateness(event_time.allowed_lateness_ns);
    let mut outputs = Vec::new();
    for phase in 0..=deployments.len() {
        if phase > 0 {
            engine.switch(deployments[phase - 1].0.clone());
        }
        let names: Vec<String> = engine.queries().map(|q| q.name.clone()).collect();
        for row in rows.iter().filter(|row| phase_of(row) == phase) {
            engine.process_symbol(&row.symbol, row.price, row.t_event, |query, price, value| {
                outputs.push(StandaloneOutput {
                    rule: names[query as usize].clone(),
                    symbol: row.symbol.clone(),
                    price,
                    value,
                    injector: row.injector,
                    seq: row.seq,
                });
            });
        }
    }
    // Per symbol its stream; per stream its tick count (where its end marker would be).
    let mut stream_of: BTreeMap<&str, u32> = BTreeMap::new();
    let mut sent: BTreeMap<u32, u64> = BTreeMap::new();
    for row in rows {
        stream_of.insert(&row.symbol, row.injector);
        let count = sent.entry(row.injector).or_default();
        *count = (*count).max(row.seq + 1);
    }
    let names: Vec<String> = engine.queries().map(|q| q.name.clone()).collect();
    let mut closed = Vec::new();
    engine.close_windows(|symbol, query, price, value| closed.push((symbol, query, price, value)));
    let final_outputs = closed.len() as u64;
    for (symbol, query, price, value) in closed {
        let symbol = engine.symbol_name(symbol).to_string();
        let injector = stream_of[symbol.as_str()];
        let seq = sent[&injector];
        outputs.push(StandaloneOutput { rule: names[query as usize].clone(), symbol, price, value, injector, seq });
    }
    Evaluation { late: engine.late(), late_dropped: engine.late_dropped(), final_outputs, outputs }
}

pub fn run(args: EngineArgs) -> anyhow::Result<()> {
    // A bad rules file or input is the user's to fix: one line, exit 2.
    let usage = |error: anyhow::Error| crate::cli::Usage::of(&error);
    let source = cep_query::RulesSource::load(args.rules.as_deref()).map_err(|error| usage(anyhow::anyhow!(error)))?;
    let rules = source.compile().map_err(|error| usage(anyhow::anyhow!(error.first_line())))?;
    let rows = read_ticks(&args.input, args.time_unit, args.connections).map_err(usage)?;
    let allowed_lateness_ns = args.allowed_lateness.map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    let event_time = EventTime { allowed_lateness_ns };
    let evaluation = evaluate_deployments(&rows, rules, &[], event_time);
    let output = args
        .output
        .clone()
        .unwrap_or_else(|| args.input.parent().unwrap_or(Path::new(".")).join(cep_core::results::STANDALONE_OUTPUTS));
    let file = std::fs::File::create(&output).with_context(|| format!("cannot write {}", output.display()))?;
    let mut out = BufWriter::new(file);
    writeln!(out, "rule,symbol,price,value,injector,seq")?;
    // Floats as outputs.csv writes them (the shortest text that reads back the same bits).
    let mut floats = (ryu::Buffer::new(), ryu::Buffer::new());
    for o in &evaluation.outputs {
        let (price, value) = (floats.0.format(o.price), floats.1.format(o.value));
        writeln!(out, "{},{},{price},{value},{},{}", o.rule, o.symbol, o.injector, o.seq)?;
    }
    out.flush()?;
    tracing::info!(
        late = evaluation.late,
        late_dropped = evaluation.late_dropped,
        final_outputs = evaluation.final_outputs,
        "{} ticks in, {} outputs written to {}",
        rows.len(),
        evaluation.outputs.len(),
        output.display()
    );
    Ok(())
}
