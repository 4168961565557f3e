//! Random queries from a small grammar give the same outputs in the engine as in a simple
//! reference evaluator that keeps every event and recomputes each window from scratch
//! (two-pass statistics), written from the language's definition and sharing no code with
//! the engine or the compiler.

use cep_engine::{compile, Engine};
use proptest::prelude::*;

const SECOND: u64 = 1_000_000_000;

#[derive(Clone, Copy, Debug)]
enum WindowKind {
    Events(u64),
    Time(u64),
    Tumbling(u64),
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Agg {
    CountAll,
    Count,
    Sum,
    Avg,
    Min,
    Max,
    Stddev,
    StddevSamp,
    First,
    Last,
    Prev1,
    Perc,
    Trend,
    /// sum(price * 2 - 1): an aggregate over an expression.
    SumExpr,
    /// max(abs(price - 100))
    MaxAbs,
}

impl Agg {
    fn text(self) -> &'static str {
        match self {
            Agg::CountAll => "count(*)",
            Agg::Count => "count(price)",
            Agg::Sum => "sum(price)",
            Agg::Avg => "avg(price)",
            Agg::Min => "min(price)",
            Agg::Max => "max(price)",
            Agg::Stddev => "stddev(price)",
            Agg::StddevSamp => "stddev_samp(price)",
            Agg::First => "first(price)",
            Agg::Last => "last(price)",
            Agg::Prev1 => "prev(1, price)",
            Agg::Perc => "perc(price)",
            Agg::Trend => "trend(price)",
            Agg::SumExpr => "sum(price * 2 - 1)",
            Agg::MaxAbs => "max(abs(price - 100))",
        }
    }
}

#[derive(Clone, Debug)]
enum Value {
    Agg(Agg),
    Diff(Agg, Agg),
}

#[derive(Clone, Debug)]
enum Cond {
    Gt(Value, f64),
    Lt(Value, f64),
    And(Box<Cond>, Box<Cond>),
    Or(Box<Cond>, Box<Cond>),
    Not(Box<Cond>),
}

#[derive(Clone, Copy, Debug)]
enum Filter {
    None,
    SymbolIs(u8),
    SymbolIn(u8, u8),
    PriceAbove(f64),
    NotSymbolAndPriceBelow(u8, f64),
}

#[derive(Clone, Debug)]
struct Spec {
    window: WindowKind,
    filter: Filter,
    value: Value,
    having: Option<Cond>,
}

fn value_text(value: &Value) -> String {
    match value {
        Value::Agg(a) => a.text().into(),
        Value::Diff(a, b) => format!("({} - {})", a.text(), b.text()),
    }
}

fn cond_text(cond: &Cond) -> String {
    match cond {
        Cond::Gt(v, c) => format!("{} > {c:?}", value_text(v)),
        Cond::Lt(v, c) => format!("{} < {c:?}", value_text(v)),
        Cond::And(a, b) => format!("({} AND {})", cond_text(a), cond_text(b)),
        Cond::Or(a, b) => format!("({} OR {})", cond_text(a), cond_text(b)),
        Cond::Not(a) => format!("NOT ({})", cond_text(a)),
    }
}

fn query_text(name: &str, spec: &Spec) -> String {
    let window = match spec.window {
        WindowKind::Events(n) => format!("RETAIN {n} EVENTS"),
        WindowKind::Time(t) => format!("RETAIN {} MS", t / 1_000_000),
        WindowKind::Tumbling(t) => format!("RETAIN TUMBLING {} MS", t / 1_000_000),
    };
    let filter = match spec.filter {
        Filter::None => String::new(),
        Filter::SymbolIs(s) => format!("WHERE symbol = 'S{s}'"),
        Filter::SymbolIn(a, b) => format!("WHERE symbol IN ('S{a}', 'S{b}')"),
        Filter::PriceAbove(p) => format!("WHERE price > {p:?}"),
        Filter::NotSymbolAndPriceBelow(s, p) => format!("WHERE NOT symbol = 'S{s}' AND price < {p:?}"),
    };
    let having = spec.having.as_ref().map(|c| format!("HAVING {}", cond_text(c))).unwrap_or_default();
    format!(
        "@name('{name}') SELECT symbol, price, {} AS value FROM StockTick {filter} PARTITION BY symbol {window} {having};\n",
        value_text(&spec.value)
    )
}

fn agg_strategy() -> impl Strategy<Value = Agg> {
    use Agg::*;
    prop::sample::select(vec![
        CountAll, Count, Sum, Avg, Min, Max, Stddev, StddevSamp, First, Last, Prev1, Perc, Trend, SumExpr, MaxAbs,
    ])
}

fn value_strategy() -> impl Strategy<Value = Value> {
    prop_oneof![
        agg_strategy().prop_map(Value::Agg),
        (agg_strategy(), agg_strategy()).prop_map(|(a, b)| Value::Diff(a, b)),
    ]
}

fn cond_strategy() -> impl Strategy<Value = Cond> {
    // Thresholds off the grid the prices and counts live on, so no comparison sits on a tie.
    let leaf = prop_oneof![
        (value_strategy(), -3.3f64..150.0).prop_map(|(v, c)| Cond::Gt(v, (c * 8.0).round() / 8.0 + 0.0625)),
        (value_strategy(), -3.3f64..150.0).prop_map(|(v, c)| Cond::Lt(v, (c * 8.0).round() / 8.0 + 0.0625)),
    ];
    leaf.prop_recursive(2, 6, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Cond::And(Box::new(a), Box::new(b))),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Cond::Or(Box::new(a), Box::new(b))),
            inner.prop_map(|a| Cond::Not(Box::new(a))),
        ]
    })
}

fn spec_strategy() -> impl Strategy<Value = Spec> {
    let window = prop_oneof![
        (1u64..6).prop_map(WindowKind::Events),
        (1u64..6).prop_map(|s| WindowKind::Time(s * SECOND)),
        (1u64..6).prop_map(|s| WindowKind::Tumbling(s * SECOND)),
    ];
    let filter = prop_oneof![
        Just(Filter::None),
        (0u8..4).prop_map(Filter::SymbolIs),
        (0u8..4, 0u8..4).prop_map(|(a, b)| Filter::SymbolIn(a, b)),
        (60.0f64..140.0).prop_map(|p| Filter::PriceAbove(p.round() + 0.5)),
        (0u8..4, 60.0f64..140.0).prop_map(|(s, p)| Filter::NotSymbolAndPriceBelow(s, p.round() + 0.5)),
    ];
    (window, filter, value_strategy(), prop::option::of(cond_strategy()))
        .prop_map(|(window, filter, value, having)| Spec { window, filter, value, having })
}

/// Ticks: (symbol index, price, event time), time never decreasing.
fn ticks_strategy() -> impl Strategy<Value = Vec<(u8, f64, u64)>> {
    prop::collection::vec((0u8..4, -4i32..5, 0u64..1_500), 1..250).prop_map(|steps| {
        let mut prices = [100.0f64; 4];
        let mut ts = 0;
        steps
            .into_iter()
            .map(|(symbol, step, gap_ms)| {
                let p = &mut prices[symbol as usize];
                *p = (*p + step as f64 * 0.75).max(1.0);
                ts += gap_ms * 1_000_000;
                (symbol, *p, ts)
            })
            .collect()
    })
}

// ---- the reference evaluator ----

/// One event of a symbol that passed the filter.
#[derive(Clone, Copy)]
struct Ev {
    price: f64,
    ts: u64,
}

fn aggregate(agg: Agg, window: &[Ev], history: &[Ev]) -> Option<f64> {
    let prices: Vec<f64> = window.iter().map(|e| e.price).collect();
    let n = prices.len() as f64;
    let mean = || prices.iter().sum::<f64>() / n;
    let variance = || {
        let m = mean();
        prices.iter().map(|p| (p - m) * (p - m)).sum::<f64>()
    };
    match agg {
        Agg::CountAll | Agg::Count => Some(n),
        Agg::Sum => Some(prices.iter().sum()),
        Agg::Avg => Some(mean()),
        Agg::Min => prices.iter().copied().reduce(f64::min),
        Agg::Max => prices.iter().copied().reduce(f64::max),
        Agg::Stddev => Some((variance() / n).sqrt()),
        Agg::StddevSamp if prices.len() >= 2 => Some((variance() / (n - 1.0)).sqrt()),
        Agg::First => prices.first().copied(),
        Agg::Last => prices.last().copied(),
        Agg::Prev1 if prices.len() >= 2 => Some(prices[prices.len() - 2]),
        Agg::Perc if prices.len() >= 2 => Some((prices[prices.len() - 1] - prices[0]) / prices[0] * 100.0),
        Agg::Trend => {
            // Consecutive rises ending at the window's last event, over the whole history.
            let rises = history.windows(2).rev().take_while(|w| w[1].price > w[0].price).count();
            Some(rises as f64)
        }
        Agg::SumExpr => Some(prices.iter().map(|p| p * 2.0 - 1.0).sum()),
        Agg::MaxAbs => prices.iter().map(|p| (p - 100.0).abs()).reduce(f64::max),
        Agg::StddevSamp | Agg::Prev1 | Agg::Perc => None,
    }
}

fn value(v: &Value, window: &[Ev], history: &[Ev]) -> Option<f64> {
    match v {
        Value::Agg(a) => aggregate(*a, window, history),
        Value::Diff(a, b) => Some(aggregate(*a, window, history)? - aggregate(*b, window, history)?),
    }
}

/// SQL's three-valued logic: `None` is unknown.
fn truth(c: &Cond, window: &[Ev], history: &[Ev]) -> Option<bool> {
    match c {
        Cond::Gt(v, k) => value(v, window, history).map(|x| x > *k),
        Cond::Lt(v, k) => value(v, window, history).map(|x| x < *k),
        Cond::And(a, b) => match (truth(a, window, history), truth(b, window, history)) {
            (Some(false), _) | (_, Some(false)) => Some(false),
            (Some(true), Some(true)) => Some(true),
            _ => None,
        },
        Cond::Or(a, b) => match (truth(a, window, history), truth(b, window, history)) {
            (Some(true), _) | (_, Some(true)) => Some(true),
            (Some(false), Some(false)) => Some(false),
            _ => None,
        },
        Cond::Not(a) => truth(a, window, history).map(|x| !x),
    }
}

fn passes(filter: Filter, symbol: u8, price: f64) -> bool {
    match filter {
        Filter::None => true,
        Filter::SymbolIs(s) => symbol == s,
        Filter::SymbolIn(a, b) => symbol == a || symbol == b,
        Filter::PriceAbove(p) => price > p,
        Filter::NotSymbolAndPriceBelow(s, p) => symbol != s && price < p,
    }
}

/// (tick index, query, price, value) of every output.
type Output = (usize, usize, f64, f64);

/// Symbols in order of first appearance: the order the engine numbers them in.
fn appearance(ticks: &[(u8, f64, u64)]) -> Vec<u8> {
    let mut order: Vec<u8> = Vec::new();
    for &(symbol, _, _) in ticks {
        if !order.contains(&symbol) {
            order.push(symbol);
        }
    }
    order
}

/// The outputs of `specs` over `ticks`, and at position `ticks.len()` those of the windows
/// the end of input closes, symbol by symbol in `order`.
fn reference(specs: &[Spec], ticks: &[(u8, f64, u64)], order: &[u8]) -> Vec<Output> {
    let mut out = Vec::new();
    for (q, spec) in specs.iter().enumerate() {
        let mut history: Vec<Vec<Ev>> = vec![Vec::new(); 4];
        let mut pane_start: Vec<usize> = vec![0; 4];
        for (i, &(symbol, price, ts)) in ticks.iter().enumerate() {
            if !passes(spec.filter, symbol, price) {
                continue;
            }
            let events = &mut history[symbol as usize];
            let emit = |window: &[Ev], history: &[Ev], row_price: f64, out: &mut Vec<Output>| {
                if spec.having.as_ref().is_none_or(|c| truth(c, window, history) == Some(true)) {
                    out.push((i, q, row_price, value(&spec.value, window, history).unwrap_or(f64::NAN)));
                }
            };
            match spec.window {
                WindowKind::Tumbling(length) => {
                    let start = pane_start[symbol as usize];
                    if let Some(last) = events.last() {
                        if last.ts / length != ts / length {
                            emit(&events[start..], events, last.price, &mut out);
                            pane_start[symbol as usize] = events.len();
                        }
                    }
                    events.push(Ev { price, ts });
                }
                WindowKind::Events(n) => {
                    events.push(Ev { price, ts });
                    let from = events.len().saturating_sub(n as usize);
                    emit(&events[from..], events, price, &mut out);
                }
                WindowKind::Time(length) => {
                    events.push(Ev { price, ts });
                    let from = events.iter().position(|e| ts < length || e.ts > ts - length).unwrap_or(events.len());
                    emit(&events[from..], events, price, &mut out);
                }
            }
        }
        if let WindowKind::Tumbling(_) = spec.window {
            for &symbol in order {
                let events = &history[symbol as usize];
                let window = &events[pane_start[symbol as usize]..];
                if let Some(last) = window.last() {
                    if spec.having.as_ref().is_none_or(|c| truth(c, window, events) == Some(true)) {
                        out.push((ticks.len(), q, last.price, value(&spec.value, window, events).unwrap_or(f64::NAN)));
                    }
                }
            }
        }
    }
    out.sort_by_key(|o| (o.0, o.1));
    out
}

fn close(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn engine_matches_the_reference_evaluator(
        specs in prop::collection::vec(spec_strategy(), 1..4),
        ticks in ticks_strategy(),
    ) {
        let text: String = specs.iter().enumerate().map(|(q, spec)| query_text(&format!("q{q}"), spec)).collect();
        let rules = compile(&text, "random").map_err(|e| TestCaseError::fail(e.render()))?;
        let mut engine = Engine::new(rules);
        let mut got: Vec<Output> = Vec::new();
        for (i, &(symbol, price, ts)) in ticks.iter().enumerate() {
            engine.process_symbol(&format!("S{symbol}"), price, ts, |query, p, v| got.push((i, query as usize, p, v)));
        }
        engine.close_windows(|_, query, p, v| got.push((ticks.len(), query as usize, p, v)));
        // The end emits symbol by symbol; the reference lists it query by query.
        got.sort_by_key(|o| (o.0, o.1));
        let want = reference(&specs, &ticks, &appearance(&ticks));
        prop_assert_eq!(got.len(), want.len(), "{}\ngot {:?}\nwant {:?}", text, got, want);
        for (g, w) in got.iter().zip(&want) {
            prop_assert!(g.0 == w.0 && g.1 == w.1 && g.2 == w.2 && close(g.3, w.3), "{}\ngot {:?}, want {:?}", text, g, w);
        }
    }
}

/// Specs for the switch test: half of them small windows over the price without a filter,
/// the shape whose state a symbol's queries share.
fn switch_spec_strategy() -> impl Strategy<Value = Spec> {
    let small_aggregate = prop_oneof![
        Just(Agg::CountAll),
        Just(Agg::First),
        Just(Agg::Last),
        Just(Agg::Prev1),
        Just(Agg::Perc),
        Just(Agg::Trend)
    ];
    let small = (1u64..5, small_aggregate, prop::option::of(cond_strategy())).prop_map(|(n, aggregate, having)| Spec {
        window: WindowKind::Events(n),
        filter: Filter::None,
        value: Value::Agg(aggregate),
        having,
    });
    prop_oneof![spec_strategy(), small]
}

fn spec_of_old(old: &[Spec], q: usize) -> Spec {
    old[q % old.len()].clone()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// A rule switch at a random point: kept queries (same name and text) go on with their
    /// state, as if nothing happened; new ones see only the events after the switch.
    #[test]
    fn a_switch_keeps_unchanged_queries_and_starts_new_ones_empty(
        old in prop::collection::vec(switch_spec_strategy(), 1..4),
        added in prop::collection::vec(prop_oneof![switch_spec_strategy().prop_map(Some), Just(None)], 1..3),
        keep in prop::collection::vec(any::<bool>(), 3),
        ticks in ticks_strategy(),
        at in 0.0f64..1.0,
    ) {
        let at = (ticks.len() as f64 * at) as usize;
        // The new set: the kept old queries (under their names) interleaved with the added.
        let mut new: Vec<(String, Spec, Option<usize>)> = Vec::new();
        for (q, spec) in old.iter().enumerate() {
            if keep[q] {
                new.push((format!("q{q}"), spec.clone(), Some(q)));
            }
            // An added query is new, or a copy of an old one under a new name (same shape:
            // it must not share the kept one's history).
            if let Some(spec) = added.get(q) {
                new.push((format!("n{q}"), spec.clone().unwrap_or_else(|| spec_of_old(&old, q)), None));
            }
        }
        let old_text: String = old.iter().enumerate().map(|(q, spec)| query_text(&format!("q{q}"), spec)).collect();
        let new_text: String = new.iter().map(|(name, spec, _)| query_text(name, spec)).collect();
        let mut engine = Engine::new(compile(&old_text, "old").map_err(|e| TestCaseError::fail(e.render()))?);
        let mut got: Vec<Output> = Vec::new();
        for (i, &(symbol, price, ts)) in ticks.iter().enumerate() {
            if i == at {
                engine.switch(compile(&new_text, "new").map_err(|e| TestCaseError::fail(e.render()))?);
            }
            engine.process_symbol(&format!("S{symbol}"), price, ts, |query, p, v| {
                if i >= at {
                    got.push((i, query as usize, p, v));
                }
            });
        }
        engine.close_windows(|_, query, p, v| got.push((ticks.len(), query as usize, p, v)));
        got.sort_by_key(|o| (o.0, o.1));
        let order = appearance(&ticks);
        let mut want: Vec<Output> = Vec::new();
        for (q, (_, spec, kept)) in new.iter().enumerate() {
            let outputs = match kept {
                Some(_) => reference(std::slice::from_ref(spec), &ticks, &order).into_iter().filter(|o| o.0 >= at).collect(),
                None => reference(std::slice::from_ref(spec), &ticks[at..], &order)
                    .into_iter()
                    .map(|o| (o.0 + at, o.1, o.2, o.3))
                    .collect::<Vec<_>>(),
            };
            want.extend(outputs.into_iter().map(|o| (o.0, q, o.2, o.3)));
        }
        want.sort_by_key(|o| (o.0, o.1));
        prop_assert_eq!(got.len(), want.len(), "{}\n-- switch at {}\n{}\ngot {:?}\nwant {:?}", old_text, at, new_text, got, want);
        for (g, w) in got.iter().zip(&want) {
            prop_assert!(g.0 == w.0 && g.1 == w.1 && g.2 == w.2 && close(g.3, w.3), "{}\n-- switch at {}\n{}\ngot {:?}, want {:?}", old_text, at, new_text, g, w);
        }
    }
}

/// Ticks with late ones: (symbol index, price, event time); a tick may lie up to 3 s behind
/// the stream's latest time (late for its symbol if that symbol has seen a later one).
fn late_ticks_strategy() -> impl Strategy<Value = Vec<(u8, f64, u64)>> {
    let step = (0u8..4, -4i32..5, 0u64..1_500, prop::option::weighted(0.2, 1u64..3_000));
    prop::collection::vec(step, 1..250).prop_map(|steps| {
        let mut prices = [100.0f64; 4];
        let mut ts = 0;
        steps
            .into_iter()
            .map(|(symbol, step, gap_ms, back_ms)| {
                let p = &mut prices[symbol as usize];
                *p = (*p + step as f64 * 0.75).max(1.0);
                ts += gap_ms * 1_000_000;
                (symbol, *p, ts.saturating_sub(back_ms.unwrap_or(0) * 1_000_000))
            })
            .collect()
    })
}

/// An output tagged by where it came from: (tick index or `usize::MAX` for the end of input,
/// symbol, query, price bits, value bits).
type Tagged = (usize, u8, u32, u64, u64);

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Symbols moved between two engines at random points (exported, removed, imported; some
    /// back and forth) give bit for bit the outputs of one engine that kept them all, tick by
    /// tick and at the end of input, and the same counts; without late ticks, the reference
    /// evaluator's too.
    #[test]
    fn moving_symbols_between_engines_changes_no_output(
        specs in prop::collection::vec(spec_strategy(), 1..4),
        late in any::<bool>(),
        late_ticks in late_ticks_strategy(),
        in_order in ticks_strategy(),
        lateness in prop::option::of(0u64..2_000),
        first_owners in 0u8..16,
        moves in prop::collection::vec((prop_oneof![Just(0.0), Just(1.0), 0.0f64..1.0], 0u8..16), 1..5),
    ) {
        let ticks = if late { late_ticks } else { in_order };
        let text: String = specs.iter().enumerate().map(|(q, spec)| query_text(&format!("q{q}"), spec)).collect();
        let rules = compile(&text, "random").map_err(|e| TestCaseError::fail(e.render()))?;
        let new_engine = || {
            let mut engine = Engine::new(rules.clone());
            engine.set_allowed_lateness(lateness.map(|ms| ms * 1_000_000));
            engine
        };
        let name = |symbol: u8| format!("S{symbol}");
        let symbol_of = |name: &str| name[1..].parse::<u8>().expect("S<n>");

        let mut single = new_engine();
        let mut want: Vec<Tagged> = Vec::new();
        for (i, &(symbol, price, ts)) in ticks.iter().enumerate() {
            single.process_symbol(&name(symbol), price, ts, |q, p, v| want.push((i, symbol, q, p.to_bits(), v.to_bits())));
        }
        let mut closed = Vec::new();
        single.close_windows(|id, q, p, v| closed.push((id, q, p, v)));
        for (id, q, p, v) in closed {
            want.push((usize::MAX, symbol_of(single.symbol_name(id)), q, p.to_bits(), v.to_bits()));
        }

        // Engines 0 and 1; bit s of `owner` is symbol s's engine.
        let mut engines = [new_engine(), new_engine()];
        let mut owner = first_owners;
        let mut cuts: Vec<(usize, u8)> = moves.iter().map(|&(at, mask)| ((ticks.len() as f64 * at) as usize, mask)).collect();
        cuts.sort_by_key(|c| c.0);
        let mut cuts = cuts.into_iter().peekable();
        let mut got: Vec<Tagged> = Vec::new();
        for i in 0..=ticks.len() {
            while let Some((_, mask)) = cuts.next_if(|c| c.0 == i) {
                for from in 0..2 {
                    let moving: Vec<String> =
                        (0..4u8).filter(|s| mask >> s & 1 == 1 && (owner >> s & 1) as usize == from).map(name).collect();
                    let moving: Vec<&[u8]> = moving.iter().map(|s| s.as_bytes()).collect();
                    let bytes = engines[from].export_symbols(&moving);
                    let before = engines[from].symbols();
                    engines[from].remove_symbols(&moving);
                    let imported = engines[1 - from].import_symbols(&bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
                    prop_assert_eq!(engines[from].symbols() + imported.len(), before);
                }
                owner ^= mask;
            }
            let Some(&(symbol, price, ts)) = ticks.get(i) else { break };
            let engine = &mut engines[(owner >> symbol & 1) as usize];
            engine.process_symbol(&name(symbol), price, ts, |q, p, v| got.push((i, symbol, q, p.to_bits(), v.to_bits())));
        }
        for engine in &mut engines {
            let mut closed = Vec::new();
            engine.close_windows(|id, q, p, v| closed.push((id, q, p, v)));
            for (id, q, p, v) in closed {
                got.push((usize::MAX, symbol_of(engine.symbol_name(id)), q, p.to_bits(), v.to_bits()));
            }
        }
        // Ticks' outputs by tick (each tick's in query order); the end's by symbol.
        want.sort_by_key(|o| (o.0, o.1, o.2));
        got.sort_by_key(|o| (o.0, o.1, o.2));
        prop_assert_eq!(&got, &want, "{}", text);
        let sum = |count: fn(&Engine) -> u64| count(&engines[0]) + count(&engines[1]);
        prop_assert_eq!(sum(Engine::processed), single.processed());
        prop_assert_eq!(sum(Engine::late), single.late());
        prop_assert_eq!(sum(Engine::late_dropped), single.late_dropped());
        prop_assert_eq!(sum(Engine::outputs_total), single.outputs_total());
        for (e, engine) in engines.iter().enumerate() {
            let mut names: Vec<u8> = engine.symbol_names().map(symbol_of).collect();
            names.sort();
            let owned: Vec<u8> = (0..4u8)
                .filter(|&s| (owner >> s & 1) as usize == e && ticks.iter().any(|t| t.0 == s))
                .collect();
            prop_assert_eq!(engine.symbols(), names.len());
            // A symbol is known where it was processed or imported, and leaves with its state.
            prop_assert!(names.iter().all(|s| owned.contains(s)), "{:?} {:?}", names, owned);
        }
        if !late {
            let reference = reference(&specs, &ticks, &appearance(&ticks));
            let ticked: Vec<&Tagged> = got.iter().filter(|o| o.0 != usize::MAX).collect();
            let expected: Vec<&Output> = reference.iter().filter(|o| o.0 != ticks.len()).collect();
            prop_assert_eq!(ticked.len(), expected.len());
            for (g, w) in ticked.iter().zip(&expected) {
                let (p, v) = (f64::from_bits(g.3), f64::from_bits(g.4));
                prop_assert!(g.0 == w.0 && g.2 as usize == w.1 && p == w.2 && close(v, w.3), "{}\ngot {:?}, want {:?}", text, g, w);
            }
        }
    }
}
