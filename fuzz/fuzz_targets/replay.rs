//! The replay file reader (OCTO's `symbol;price;timestamp`, headers, recorded input.csv), with
//! and without a time unit given.
#![no_main]

use cep_core::replay::{parse, TimeUnit};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for unit in [None, Some(TimeUnit::Micros)] {
        if let Ok(file) = parse(&text, unit) {
            for tick in &file.ticks {
                let name = &file.names[tick.symbol as usize];
                assert!(!name.is_empty() && name.len() <= cep_core::wire::MAX_SYMBOL_BYTES);
                assert!(tick.price.is_finite() && tick.price > 0.0);
            }
        }
    }
});
