use cep_core::gbm::{symbol_names, GbmStream};
use cep_engine::baseline::{Baseline, RulesConfig};
use cep_engine::{reference_rules, select_queries, Engine};
use std::time::Instant;
fn main() {
    let symbols: usize = std::env::args().nth(1).unwrap().parse().unwrap();
    let window_ns: u64 = std::env::args().nth(2).map_or(1000, |s| s.parse().unwrap());
    let names = symbol_names(symbols);
    let ticks: Vec<(usize, f64, u64)> =
        GbmStream::all(42, symbols).take(10_000_000).map(|t| (t.symbol, t.price, t.index * window_ns)).collect();
    for round in 0..2 {
        if std::env::var("ONLY_COMPILED").is_ok() {
            let mut sum = 0.0;
            let only = std::env::var("ONLY_COMPILED").unwrap();
            let names_set: Vec<&str> = only.split(',').collect();
            let mut e = Engine::new(select_queries(&reference_rules(), &names_set));
            let t = Instant::now();
            for &(s, p, ts) in &ticks {
                e.process_symbol(&names[s], p, ts, |_, _, v| sum += v);
            }
            println!("compiled {:.1} {sum}", t.elapsed().as_secs_f64() * 1e9 / ticks.len() as f64);
            continue;
        }
        let config = match std::env::var("BASE").ok().as_deref() {
            Some("volatility") => RulesConfig { perc: false, trend: false, ..RulesConfig::default() },
            Some("perc") => RulesConfig { volatility: false, trend: false, ..RulesConfig::default() },
            Some("trend") => RulesConfig { volatility: false, perc: false, ..RulesConfig::default() },
            _ => RulesConfig::default(),
        };
        let mut b = Baseline::new(config);
        let mut sum = 0.0;
        let t = Instant::now();
        for &(s, p, ts) in &ticks {
            b.process_symbol(&names[s], p, ts, |_, v| sum += v);
        }
        let base = t.elapsed().as_secs_f64() * 1e9 / ticks.len() as f64;
        let mut results = vec![];
        for names_set in [&["perc", "trend", "volatility"][..], &["perc"], &["trend"], &["volatility"]] {
            let mut e = Engine::new(select_queries(&reference_rules(), names_set));
            let t = Instant::now();
            for &(s, p, ts) in &ticks {
                e.process_symbol(&names[s], p, ts, |_, _, v| sum += v);
            }
            results.push(t.elapsed().as_secs_f64() * 1e9 / ticks.len() as f64);
        }
        println!(
            "round {round} symbols {symbols}: baseline {base:.1} ns, compiled all/R1/R2/R3 {:?} ratio {:.2} {sum}",
            results.iter().map(|r| format!("{r:.1}")).collect::<Vec<_>>(),
            results[0] / base
        );
    }
}
