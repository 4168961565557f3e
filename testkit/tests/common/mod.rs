//! What the harness tests compare a cluster's run with.

use cep_testkit::cluster::SentTick;
use cep_testkit::Outcome;

/// The rows the engine alone gives over the ticks the injector sent (rule, symbol, price,
/// value, stream, seq), sorted: what the cluster must give whatever the timing.
pub fn reference_rows(sent: &[SentTick]) -> Vec<String> {
    let rules = cep_engine::compile(cep_query::REFERENCE, "reference").unwrap();
    let mut engine = cep_engine::Engine::new(rules);
    let names: Vec<String> = engine.queries().map(|q| q.name.clone()).collect();
    let (mut prices, mut values) = (ryu::Buffer::new(), ryu::Buffer::new());
    let mut rows = Vec::new();
    for tick in sent {
        let symbol = engine.intern(&tick.symbol);
        engine.process(symbol, tick.price, tick.t_event, |query, price, value| {
            let (price, value) = (prices.format(price).to_string(), values.format(value).to_string());
            rows.push(format!(
                "{},{},{price},{value},{},{}",
                names[query as usize], tick.symbol, tick.stream, tick.seq
            ));
        });
    }
    rows.sort();
    rows
}

/// Sent = processed = `count`, nothing lost, no duplicate, per-key order kept, every report in.
pub fn assert_whole(outcome: &Outcome, count: u64) {
    let summary = &outcome.summary;
    assert!(summary.complete, "{summary:#?}");
    assert_eq!(summary.events_sent, Some(count));
    assert_eq!(summary.events_processed, count);
    assert_eq!(summary.events_lost, Some(0), "{:?}", summary.lost_by_cause);
    assert_eq!((summary.duplicates, summary.out_of_order, summary.outputs_lost), (0, 0, 0));
}

/// `rows` are `expected` (both sorted); if not, says how many rows differ and shows a few,
/// not every row.
pub fn assert_same_rows(rows: Vec<String>, expected: Vec<String>, context: &str) {
    if rows == expected {
        return;
    }
    // Both sorted: the rows one has more of than the other, by a merge.
    let (mut extra, mut missing) = (Vec::new(), Vec::new());
    let (mut a, mut b) = (rows.iter().peekable(), expected.iter().peekable());
    loop {
        match (a.peek(), b.peek()) {
            (Some(x), Some(y)) if x == y => {
                a.next();
                b.next();
            }
            (Some(x), Some(y)) if x < y => extra.push(a.next().expect("peeked")),
            (Some(_), Some(_)) | (None, Some(_)) => missing.push(b.next().expect("peeked")),
            (Some(_), None) => extra.push(a.next().expect("peeked")),
            (None, None) => break,
        }
    }
    panic!(
        "{context}: {} rows, {} expected; {} extra (first: {:?}), {} missing (first: {:?})",
        rows.len(),
        expected.len(),
        extra.len(),
        &extra[..extra.len().min(5)],
        missing.len(),
        &missing[..missing.len().min(5)]
    );
}
