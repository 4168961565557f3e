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
