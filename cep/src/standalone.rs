//! The engine alone over a recorded `input.csv`: what the cluster must reproduce exactly.

use anyhow::{bail, Context as _};
use cep_engine::{Engine, RuleSet};
use clap::Args;
use std::collections::BTreeMap;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

#[derive(Args, Debug)]
pub struct EngineArgs {
    /// A recorded input (`cep run --record-input` writes `input.csv`).
    #[arg(long, env = "CEP_INPUT")]
    pub input: PathBuf,
    /// Where to write the outputs (`rule,symbol,price,value,injector,seq`).
    #[arg(long, env = "CEP_OUTPUT", default_value = "standalone-outputs.csv")]
    pub output: PathBuf,
    /// The rules file (default: the built-in reference rules).
    #[arg(long, env = "CEP_RULES")]
    pub rules: Option<PathBuf>,
}

/// One recorded tick.
#[derive(Clone, Debug, PartialEq)]
pub struct InputRow {
    pub injector: u32,
    pub seq: u64,
    pub symbol: String,
    pub price: f64,
    pub t_inject: u64,
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

/// Reads `input.csv` (`injector,seq,symbol,price,t_inject_ns`).
pub fn read_input(path: &Path) -> anyhow::Result<Vec<InputRow>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut rows = Vec::new();
    for (number, line) in text.lines().enumerate().skip(1) {
        let fields: Vec<&str> = line.split(',').collect();
        let parsed = (|| -> Option<InputRow> {
            if fields.len() != 5 {
                return None;
            }
            Some(InputRow {
                injector: fields[0].parse().ok()?,
                seq: fields[1].parse().ok()?,
                symbol: fields[2].to_string(),
                price: fields[3].parse().ok()?,
                t_inject: fields[4].parse().ok()?,
            })
        })();
        match parsed {
            Some(row) => rows.push(row),
            None => bail!(
                "{}:{}: expected `injector,seq,symbol,price,t_inject_ns`, got `{line}`",
                path.display(),
                number + 1
            ),
        }
    }
    Ok(rows)
}

/// Runs one engine over the rows in order (each symbol's rows are in its stream's order).
pub fn evaluate(rows: &[InputRow], rules: RuleSet) -> Vec<StandaloneOutput> {
    evaluate_deployments(rows, rules, &[])
}

/// Like [`evaluate`], with rule switches as a cluster makes them: each deployment's rules
/// process, per stream, the rows from its switch point on (`at`: stream -> first sequence
/// number). Rows are processed phase by phase; each symbol's rows keep their order, and a
/// symbol's state depends on its own rows only, so this is what every worker computes.
pub fn evaluate_deployments(
    rows: &[InputRow],
    rules: RuleSet,
    deployments: &[(RuleSet, BTreeMap<u32, u64>)],
) -> Vec<StandaloneOutput> {
    let phase_of = |row: &InputRow| {
        deployments.iter().take_while(|(_, at)| at.get(&row.injector).is_some_and(|&first| row.seq >= first)).count()
    };
    let mut engine = Engine::new(rules);
    let mut outputs = Vec::new();
    for phase in 0..=deployments.len() {
        if phase > 0 {
            engine.switch(deployments[phase - 1].0.clone());
        }
        let names: Vec<String> = engine.queries().map(|q| q.name.clone()).collect();
        for row in rows.iter().filter(|row| phase_of(row) == phase) {
            engine.process_symbol(&row.symbol, row.price, row.t_inject, |query, price, value| {
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
    outputs
}

pub fn run(args: EngineArgs) -> anyhow::Result<()> {
    let source = cep_query::RulesSource::load(args.rules.as_deref()).map_err(anyhow::Error::msg)?;
    let rules = source.compile()?;
    let rows = read_input(&args.input)?;
    let outputs = evaluate(&rows, rules);
    let file =
        std::fs::File::create(&args.output).with_context(|| format!("cannot write {}", args.output.display()))?;
    let mut out = BufWriter::new(file);
    writeln!(out, "rule,symbol,price,value,injector,seq")?;
    for o in &outputs {
        writeln!(out, "{},{},{},{},{},{}", o.rule, o.symbol, o.price, o.value, o.injector, o.seq)?;
    }
    out.flush()?;
    eprintln!("{} ticks in, {} outputs written to {}", rows.len(), outputs.len(), args.output.display());
    Ok(())
}
