//! State that crosses the network: an engine's export and checkpoint changes (restored on
//! another worker) and the collector's saved state (read back after a restart).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let rules = cep_query::RulesSource::reference().compile().expect("the reference rules compile");
    let mut engine = cep_engine::Engine::new(rules);
    let _ = engine.import_symbols(data);
    let _ = engine.restore_symbols(data, |_| true);
    let _ = cep_collector::collector::SavedState::read(data);
});
