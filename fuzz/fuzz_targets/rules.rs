//! The rules language: lexer, parser, checker and planner over any text, and the report of
//! its errors (bounded however many there are).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Err(error) = cep_query::compile(&text, "fuzz.rules") {
        let report = error.render();
        assert!(report.len() <= 120 * 1024 + text.len().min(64 * 1024), "a report of {} bytes", report.len());
        let _ = error.first_line();
    }
});
