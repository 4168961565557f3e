//! The compiled rule files reproduce the hand-written rules exactly, output for output and
//! bit for bit, over the reference GBM stream; a rule switch keeps the state of unchanged
//! queries.

use cep_core::gbm::{symbol_names, GbmStream};
use cep_core::reference::{SEED, SYMBOLS};
use cep_engine::baseline::{Baseline, Rule, RulesConfig};
use cep_engine::{compile, oracle_rules, reference_rules, Engine};

/// (tick index, rule, price bits, value bits)
type Output = (usize, String, u64, u64);

/// Ticks 1 ms of event time apart per round, so R3's 10 s window holds about 10 ticks of a
/// symbol with 1,470 symbols... and many more with fewer.
fn stream(count: usize, symbols: usize) -> Vec<(usize, f64, u64)> {
    GbmStream::all(SEED, symbols).take(count).map(|t| (t.symbol, t.price, t.index * 700_000)).collect()
}

fn baseline(config: RulesConfig, ticks: &[(usize, f64, u64)], names: &[String]) -> Vec<Output> {
    let mut engine = Baseline::new(config);
    let mut out = Vec::new();
    for (i, &(symbol, price, ts)) in ticks.iter().enumerate() {
        engine.process_symbol(&names[symbol], price, ts, |rule: Rule, value| {
            out.push((i, rule.name().to_string(), price.to_bits(), value.to_bits()))
        });
    }
    out
}

fn compiled(
    engine: &mut Engine,
    ticks: &[(usize, f64, u64)],
    names: &[String],
    rename: fn(&str) -> String,
) -> Vec<Output> {
    let mut out = Vec::new();
    let queries: Vec<String> = engine.queries().map(|q| rename(&q.name)).collect();
    for (i, &(symbol, price, ts)) in ticks.iter().enumerate() {
        engine.process_symbol(&names[symbol], price, ts, |query, p, value| {
            out.push((i, queries[query as usize].clone(), p.to_bits(), value.to_bits()))
        });
    }
    out
}

#[test]
fn reference_file_reproduces_the_hand_written_rules() {
    let names = symbol_names(SYMBOLS);
    for symbols in [SYMBOLS, 40] {
        let ticks = stream(400_000, symbols);
        let want = baseline(RulesConfig::default(), &ticks, &names);
        let got = compiled(&mut Engine::new(reference_rules()), &ticks, &names, str::to_string);
        assert!(want.len() > 400_000);
        assert_eq!(got.len(), want.len());
        assert!(got == want, "first difference at {:?}", got.iter().zip(&want).find(|(a, b)| a != b));
    }
}

#[test]
fn late_ticks_give_the_hand_written_r3_outputs() {
    let names = symbol_names(SYMBOLS);
    // 21 ms of event time between a symbol's ticks: windows of about 480 ticks slide.
    let mut ticks = stream(200_000, 30);
    // Every seventh tick arrives 3 s of event time late.
    for tick in ticks.iter_mut().step_by(7) {
        tick.2 = tick.2.saturating_sub(3_000_000_000);
    }
    let want = baseline(RulesConfig::default(), &ticks, &names);
    let got = compiled(&mut Engine::new(reference_rules()), &ticks, &names, str::to_string);
    assert!(got == want, "first difference at {:?}", got.iter().zip(&want).find(|(a, b)| a != b));
}

#[test]
fn oracle_file_reproduces_the_hand_written_oracle_variant() {
    let names = symbol_names(SYMBOLS);
    let ticks = stream(600_000, SYMBOLS);
    let want = baseline(RulesConfig::oracle(200), &ticks, &names);
    let mut engine = Engine::new(oracle_rules());
    assert_eq!(engine.queries().count(), 400);
    // perc_S0001 -> perc
    let got = compiled(&mut engine, &ticks, &names, |name| name.split('_').next().unwrap().to_string());
    assert!(want.len() > 10_000);
    assert!(got == want, "{} vs {} outputs", got.len(), want.len());
    // Filter indexing: only the 200 monitored symbols carry queries, two each.
    assert_eq!(engine.symbols(), SYMBOLS);
}

#[test]
fn generated_oracle_file_is_current() {
    assert_eq!(cep_query::ORACLE_400, cep_query::generate::oracle_rules(200));
}

#[test]
fn unindexed_engine_gives_the_same_outputs() {
    let names = symbol_names(SYMBOLS);
    let ticks = stream(100_000, SYMBOLS);
    let indexed = compiled(&mut Engine::new(oracle_rules()), &ticks, &names, str::to_string);
    let unindexed = compiled(&mut Engine::unindexed(oracle_rules()), &ticks, &names, str::to_string);
    assert_eq!(indexed, unindexed);
}

#[test]
fn a_switch_keeps_unchanged_queries_state_and_starts_changed_ones_empty() {
    let names = symbol_names(3);
    let ticks = stream(3_000, 3);
    let (before, after) = ticks.split_at(1_000);
    let old = reference_rules();
    // R1 changed (threshold), R2 unchanged, R3 dropped, a new query added.
    let without_r3 = &cep_query::REFERENCE[..cep_query::REFERENCE.find("-- R3").unwrap()];
    let new_text = without_r3.replace("> 2.0 OR", "> 1.0 OR").replace("< -2.0", "< -1.0")
        + "@name('count') SELECT symbol, count(*) AS value FROM StockTick PARTITION BY symbol RETAIN 5 EVENTS;";
    let new = compile(&new_text, "new").unwrap();

    let mut switched = Engine::new(old.clone());
    compiled(&mut switched, before, &names, str::to_string);
    switched.switch(new.clone());
    let got = compiled(&mut switched, after, &names, str::to_string);

    // Expected: each query over exactly the ticks it saw, from its own start.
    let mut continuous = Engine::new(old);
    let all = compiled(&mut continuous, &ticks, &names, str::to_string);
    let trend_want: Vec<&Output> = all.iter().filter(|o| o.1 == "trend" && o.0 >= 1_000).collect();
    let trend_got: Vec<Output> =
        got.iter().filter(|o| o.1 == "trend").map(|o| (o.0 + 1_000, o.1.clone(), o.2, o.3)).collect();
    assert_eq!(trend_got.iter().collect::<Vec<_>>(), trend_want);

    let mut fresh = Engine::new(new);
    let fresh_out = compiled(&mut fresh, after, &names, str::to_string);
    for rule in ["perc", "count"] {
        let want: Vec<&Output> = fresh_out.iter().filter(|o| o.1 == rule).collect();
        let got: Vec<&Output> = got.iter().filter(|o| o.1 == rule).collect();
        assert_eq!(got, want, "{rule}");
    }
    assert!(!got.iter().any(|o| o.1 == "volatility"));
    // The count window starts empty: 1, 2, 3, 4, 5, 5, ... per symbol.
    let counts: Vec<f64> = got.iter().filter(|o| o.1 == "count").take(6).map(|o| f64::from_bits(o.3)).collect();
    assert_eq!(counts, vec![1.0, 1.0, 1.0, 2.0, 2.0, 2.0]);
}

/// Small-window queries share a symbol's price history; a query deployed next to an
/// unchanged one of the same shape must still start from its own first event, and a query
/// that filters events keeps a history of its own.
#[test]
fn a_query_deployed_beside_an_unchanged_one_sharing_its_history_starts_empty() {
    let names = symbol_names(4);
    let ticks = stream(4_000, 4);
    let (before, after) = ticks.split_at(1_500);
    let trend = "@name('trend') SELECT symbol, trend(price) AS value FROM StockTick PARTITION BY symbol RETAIN 3 EVENTS HAVING trend(price) > 1;";
    let filtered = "@name('cheap') SELECT symbol, prev(1, price) AS value FROM StockTick WHERE price < 100 PARTITION BY symbol RETAIN 2 EVENTS;";
    let added = "@name('trend2') SELECT symbol, trend(price) AS value FROM StockTick PARTITION BY symbol RETAIN 3 EVENTS HAVING trend(price) > 1;\n\
                 @name('first') SELECT symbol, first(price) AS value FROM StockTick PARTITION BY symbol RETAIN 4 EVENTS;";
    let old = compile(&format!("{trend}\n{filtered}"), "old").unwrap();
    let new = compile(&format!("{added}\n{trend}\n{filtered}"), "new").unwrap();

    let mut switched = Engine::new(old.clone());
    compiled(&mut switched, before, &names, str::to_string);
    switched.switch(new.clone());
    let got = compiled(&mut switched, after, &names, str::to_string);

    let shifted = |outputs: Vec<Output>, by: usize| -> Vec<Output> {
        outputs.into_iter().map(|o| (o.0 + by, o.1, o.2, o.3)).collect()
    };
    let of =
        |outputs: &[Output], rule: &str| -> Vec<Output> { outputs.iter().filter(|o| o.1 == rule).cloned().collect() };
    let continuous = compiled(&mut Engine::new(old), &ticks, &names, str::to_string);
    let fresh = compiled(&mut Engine::new(new), after, &names, str::to_string);
    for kept in ["trend", "cheap"] {
        let want: Vec<Output> = of(&continuous, kept).into_iter().filter(|o| o.0 >= before.len()).collect();
        assert_eq!(shifted(of(&got, kept), before.len()), want, "{kept}");
        assert!(!want.is_empty());
    }
    for new_rule in ["trend2", "first"] {
        assert_eq!(of(&got, new_rule), of(&fresh, new_rule), "{new_rule}");
    }
    // The kept and the new trend differ right after the switch (the kept one's streaks go
    // back before it), which is what makes the comparison above meaningful.
    let kept_trend: Vec<(usize, u64)> = of(&got, "trend").iter().map(|o| (o.0, o.3)).collect();
    let new_trend: Vec<(usize, u64)> = of(&got, "trend2").iter().map(|o| (o.0, o.3)).collect();
    assert_ne!(kept_trend, new_trend);
}
