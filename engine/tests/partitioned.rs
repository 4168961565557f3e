//! Partitioning by symbol does not change what the rules emit: for random tick streams,
//! engines over the ring's partitions give exactly the outputs of one engine over the whole
//! stream, for any number of workers.

use cep_core::partition::{default_worker_id, Partitioner};
use cep_engine::{compile, Engine, QueryId, RuleSet};
use proptest::prelude::*;

type Output = (usize, QueryId, u64);

fn tick_stream() -> impl Strategy<Value = Vec<(usize, f64, u64)>> {
    prop::collection::vec((0usize..12, 1.0f64..200.0, 0u64..4_000_000_000), 1..400).prop_map(|mut ticks| {
        // Event time never runs backwards within the stream.
        let mut ts = 0;
        for tick in &mut ticks {
            ts += tick.2;
            tick.2 = ts;
        }
        ticks
    })
}

fn run(engine: &mut Engine, ticks: &[(usize, usize, f64, u64)], out: &mut Vec<Output>) {
    for &(index, symbol, price, ts) in ticks {
        engine.process_symbol(&format!("S{symbol:04}"), price, ts, |query, _, value| {
            out.push((index, query, value.to_bits()))
        });
    }
}

/// The reference rules with another trend length, and a tumbling-window query.
fn rules(trend_rises: u32) -> RuleSet {
    let text = cep_query::REFERENCE.replace("trend(price) > 2", &format!("trend(price) > {}", trend_rises - 1))
        + "@name('range') SELECT symbol, max(price) - min(price) AS value FROM StockTick PARTITION BY symbol RETAIN TUMBLING 5 SECONDS;";
    compile(&text, "test").unwrap()
}

proptest! {
    #[test]
    fn partitioned_equals_single(ticks in tick_stream(), workers in 1usize..6, trend_rises in 1u32..4) {
        let config = rules(trend_rises);
        let indexed: Vec<(usize, usize, f64, u64)> = ticks.iter().enumerate().map(|(i, &(s, p, t))| (i, s, p, t)).collect();
        let mut single = Vec::new();
        run(&mut Engine::new(config.clone()), &indexed, &mut single);

        let ids: Vec<String> = (0..workers).map(default_worker_id).collect();
        let partitioner = Partitioner::with_default_vnodes(&ids);
        let mut merged = Vec::new();
        for worker in 0..workers {
            let mine: Vec<_> = indexed.iter().copied().filter(|t| partitioner.owner(&format!("S{:04}", t.1)) == worker).collect();
            run(&mut Engine::new(config.clone()), &mine, &mut merged);
        }
        merged.sort_by_key(|o| (o.0, o.1));
        single.sort_by_key(|o| (o.0, o.1));
        prop_assert_eq!(merged, single);
    }
}
