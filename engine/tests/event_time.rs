//! Event time: late ticks follow the documented rule (processed at the symbol's latest time,
//! or dropped beyond the allowed lateness, and counted either way), and the end of input
//! closes the tumbling windows still open.

use cep_engine::{compile, Engine};

const SECOND: u64 = 1_000_000_000;

fn engine(text: &str) -> Engine {
    Engine::new(compile(text, "test").unwrap_or_else(|error| panic!("{}", error.render())))
}

const COUNT_PER_MINUTE: &str = "@name('per_minute') SELECT symbol, price, count(*) AS value \
     FROM StockTick PARTITION BY symbol RETAIN TUMBLING 1 MINUTE;";

const SPAN_10S: &str = "@name('span') SELECT symbol, price, count(*) AS value \
     FROM StockTick PARTITION BY symbol RETAIN 10 SECONDS;";

/// Feeds (symbol, price, event time in s) and returns (symbol, price, value) per output.
fn feed(engine: &mut Engine, ticks: &[(&str, f64, u64)]) -> Vec<(String, f64, f64)> {
    let mut out = Vec::new();
    for &(symbol, price, seconds) in ticks {
        engine.process_symbol(symbol, price, seconds * SECOND, |_, p, v| out.push((symbol.to_string(), p, v)));
    }
    out
}

#[test]
fn the_end_of_input_closes_every_open_tumbling_window_once() {
    let mut engine = engine(COUNT_PER_MINUTE);
    let ticks = [("A", 1.0, 0), ("B", 5.0, 30), ("A", 2.0, 59), ("A", 3.0, 61), ("B", 6.0, 50), ("C", 7.0, 200)];
    // Only A's first minute is closed by a later tick of A.
    assert_eq!(feed(&mut engine, &ticks), vec![("A".to_string(), 2.0, 2.0)]);
    let mut closed = Vec::new();
    engine.close_windows(|symbol, _, price, value| closed.push((engine_name(symbol), price, value)));
    // Symbols in order of first appearance; each open pane's last price and its count.
    assert_eq!(closed, vec![("A".into(), 3.0, 1.0), ("B".into(), 6.0, 2.0), ("C".into(), 7.0, 1.0)]);
    assert_eq!(engine.outputs_total(), 4);
    // Closed windows are empty: a second end emits nothing.
    let mut again = 0;
    engine.close_windows(|_, _, _, _| again += 1);
    assert_eq!(again, 0);
}

fn engine_name(symbol: u32) -> String {
    ["A", "B", "C"][symbol as usize].to_string()
}

#[test]
fn windows_that_do_not_tumble_emit_nothing_at_the_end() {
    let mut engine = engine(SPAN_10S);
    feed(&mut engine, &[("A", 1.0, 0), ("A", 2.0, 5)]);
    let mut closed = 0;
    engine.close_windows(|_, _, _, _| closed += 1);
    assert_eq!(closed, 0);
}

#[test]
fn a_late_tick_counts_at_its_symbols_latest_time() {
    let mut engine = engine(SPAN_10S);
    // The tick at 2 s comes after one at 20 s: it is processed at 20 s, so the window
    // (10 s, 20 s] holds both, and the tick at 25 s still sees it.
    let out = feed(&mut engine, &[("A", 1.0, 20), ("A", 2.0, 2), ("A", 3.0, 25), ("B", 4.0, 1)]);
    assert_eq!(out.iter().map(|o| o.2).collect::<Vec<_>>(), vec![1.0, 2.0, 3.0, 1.0]);
    assert_eq!((engine.late(), engine.late_dropped(), engine.processed()), (1, 0, 4));
}

#[test]
fn ticks_later_than_the_allowed_lateness_are_dropped_and_counted() {
    let mut engine = engine(SPAN_10S);
    engine.set_allowed_lateness(Some(5 * SECOND));
    // 20 s, then 17 s (3 s late: kept), then 10 s (10 s late: dropped), then 26 s.
    let out = feed(&mut engine, &[("A", 1.0, 20), ("A", 2.0, 17), ("A", 3.0, 10), ("A", 4.0, 26)]);
    assert_eq!(out.iter().map(|o| o.2).collect::<Vec<_>>(), vec![1.0, 2.0, 3.0]);
    assert_eq!((engine.late(), engine.late_dropped(), engine.processed()), (1, 1, 4));
    // A late tick cannot reopen a closed tumbling window either: it joins the open one.
    let mut engine = engine_with(COUNT_PER_MINUTE, Some(SECOND * 3600));
    let out = feed(&mut engine, &[("A", 1.0, 10), ("A", 2.0, 70), ("A", 3.0, 30), ("A", 4.0, 130)]);
    assert_eq!(out, vec![("A".to_string(), 1.0, 1.0), ("A".to_string(), 3.0, 2.0)]);
}

fn engine_with(text: &str, allowed: Option<u64>) -> Engine {
    let mut engine = engine(text);
    engine.set_allowed_lateness(allowed);
    engine
}
