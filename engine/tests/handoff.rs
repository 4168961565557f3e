//! The state hand-off format (`cep_engine::handoff`): its bytes are fixed (a golden export),
//! and bytes that are not a valid export for these rules are refused with their cause,
//! never misread and never a panic.

use cep_engine::{compile, Engine, RuleSet, StateError};

/// The reference rules (small histories, a time window) and a tumbling min/max query (a
/// general window with its rare part).
fn rules() -> RuleSet {
    rules_with(cep_query::REFERENCE)
}

fn rules_with(reference: &str) -> RuleSet {
    let text = reference.to_string()
        + "@name('range') SELECT symbol, max(price) - min(price) AS value FROM StockTick PARTITION BY symbol RETAIN TUMBLING 5 SECONDS;";
    compile(&text, "test").unwrap()
}

const SECOND: u64 = 1_000_000_000;

/// An engine that took a few ticks of `A` and `B`.
fn engine() -> Engine {
    let mut engine = Engine::new(rules());
    for (symbol, price, ts) in
        [("A", 100.0, SECOND), ("B", 50.0, SECOND), ("A", 102.5, 2 * SECOND), ("A", 101.0, 7 * SECOND)]
    {
        engine.process_symbol(symbol, price, ts, |_, _, _| {});
    }
    engine
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `A`'s export, field by field: header (magic, version 1, fingerprint), one symbol (name,
/// latest time 7 s), its four members (perc and trend share history 0, volatility in line 1,
/// range in window 0), the shared history (3 prices, no rise), the time window (moments, 3
/// pairs), the tumbling window (1 event, its argument state, latest 7 s, 3 pushed, pane 1,
/// last price 101, a max and a min candidate).
const GOLDEN: &str = concat!(
    "43455053010051e3460d4244ecf401000000010000004100863ba1010000000400000000000000000000000001000000",
    "00000000000200000002010000000300000003000000000300000000000000000000f87f000000000000594000000000",
    "00a059400000000000405940030000000000000000000000000059400000000000000c400000000000001d4003000000",
    "00ca9a3b00000000000000000000594000943577000000000000000000a0594000863ba1010000000000000000405940",
    "010000000000000000000000000000000040594000000000000000000000000000000000000000000000000000000000",
    "00000000000000000000f87f0000000000863ba101000000030000000000000001000000000000000000000000405940",
    "01000000030000000000000000000000004059400100000003000000000000000000000000405940",
);

#[test]
fn the_export_format_is_fixed() {
    let bytes = engine().export_symbols(&[b"A", b"unknown", b"A"]);
    assert_eq!(hex(&bytes), GOLDEN, "the format changed: bump handoff::VERSION and update the golden bytes");
}

/// Every tick after the import, and the end of input, give what the exporter would have.
#[test]
fn the_golden_export_imports_and_carries_on() {
    let mut exporter = engine();
    let mut importer = Engine::new(rules());
    importer.process_symbol("C", 10.0, SECOND, |_, _, _| {});
    let ids = importer.import_symbols(&exporter.export_symbols(&[b"A"])).unwrap();
    assert_eq!(ids.len(), 1);
    assert_eq!(importer.symbol_name(ids[0]), "A");
    assert_eq!(importer.symbols(), 2);
    let mut names: Vec<&str> = importer.symbol_names().collect();
    names.sort();
    assert_eq!(names, ["A", "C"]);
    let run = |engine: &mut Engine| {
        let mut out = Vec::new();
        for (price, ts) in [(104.0, 8 * SECOND), (106.5, 8 * SECOND), (99.0, 6 * SECOND), (108.0, 12 * SECOND)] {
            engine.process_symbol("A", price, ts, |q, p, v| out.push((q, p.to_bits(), v.to_bits())));
        }
        let a = engine.intern("A");
        engine.close_windows(|id, q, p, v| {
            if id == a {
                out.push((q + 100, p.to_bits(), v.to_bits()))
            }
        });
        out
    };
    let (want, got) = (run(&mut exporter), run(&mut importer));
    assert!(want.iter().any(|o| o.0 == 103), "the end of input closes A's pane");
    assert_eq!(got, want);
}

fn import(bytes: &[u8]) -> Result<Vec<u32>, StateError> {
    Engine::new(rules()).import_symbols(bytes)
}

#[test]
fn bytes_that_are_not_this_rules_export_are_refused_with_their_cause() {
    let bytes = engine().export_symbols(&[b"A", b"B"]);
    assert_eq!(import(&bytes).unwrap().len(), 2);

    let mut other = bytes.clone();
    other[4] = 2;
    assert_eq!(import(&other), Err(StateError::Version { found: 2 }));
    other = bytes.clone();
    other[0] = b'X';
    assert_eq!(import(&other), Err(StateError::BadMagic));
    other = bytes.clone();
    other[6] ^= 1;
    assert!(matches!(import(&other), Err(StateError::Rules { .. })));
    // Other rules (one threshold changed): an engine that switched to them refuses what
    // it exported before the switch.
    let changed = rules_with(&cep_query::REFERENCE.replace("> 2.0", "> 2.5"));
    assert_ne!(changed, rules());
    let mut switched = engine();
    let before = switched.export_symbols(&[b"A"]);
    switched.switch(changed);
    assert!(matches!(switched.import_symbols(&before), Err(StateError::Rules { .. })));

    for len in 0..bytes.len() {
        match import(&bytes[..len]) {
            Err(StateError::BadMagic) if len < 4 => {}
            Err(StateError::Truncated { .. }) if len >= 4 => {}
            other => panic!("truncated to {len} bytes: {other:?}"),
        }
    }
    let mut trailing = bytes.clone();
    trailing.push(0);
    assert_eq!(import(&trailing), Err(StateError::Trailing { count: 1 }));

    let mut owner = Engine::new(rules());
    owner.intern("B");
    assert_eq!(owner.import_symbols(&bytes), Err(StateError::AlreadyOwned("B".into())));
    assert_eq!(owner.symbols(), 1, "a refused import installs nothing");
    // The body of a one-symbol export twice, under a count of two.
    let one = engine().export_symbols(&[b"A"]);
    let mut twice = one.clone();
    twice[14] = 2;
    twice.extend_from_slice(&one[18..]);
    assert_eq!(import(&twice), Err(StateError::Repeated("A".into())));

    // A's name, then the first member's place (shared) made an own history.
    let name = 18 + 4;
    other = one.clone();
    other[name] = 0xff;
    assert_eq!(import(&other), Err(StateError::Name));
    let first_place = name + 1 + 8 + 4 + 4;
    other = one.clone();
    assert_eq!(other[first_place], 0);
    other[first_place] = 1;
    assert_eq!(import(&other), Err(StateError::Layout("A".into())));
    // The shared history's length (after the four 9-byte members) made 5.
    other = one.clone();
    other[first_place + 4 * 9 - 4] = 5;
    assert!(matches!(import(&other), Err(StateError::Inconsistent { symbol, .. }) if symbol == "A"));
    // A count far beyond the bytes.
    other = one.clone();
    other[14..18].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(import(&other), Err(StateError::Truncated { .. })));
}

/// Any byte of an export changed to any of a few values: the import is refused or, if the
/// bytes still read as a state, the engine runs on without a panic.
#[test]
fn corrupted_exports_never_panic() {
    let bytes = engine().export_symbols(&[b"A", b"B"]);
    for at in 0..bytes.len() {
        for value in [0u8, 1, 2, 3, 4, 5, 0x7f, 0x80, 0xff, bytes[at] ^ 1] {
            let mut corrupt = bytes.clone();
            corrupt[at] = value;
            let mut engine = Engine::new(rules());
            if engine.import_symbols(&corrupt).is_ok() {
                for (i, symbol) in ["A", "B", "A", "B", "A"].into_iter().enumerate() {
                    engine.process_symbol(symbol, 100.0 + i as f64, (6 + i as u64) * SECOND, |_, _, _| {});
                }
                engine.close_windows(|_, _, _, _| {});
            }
        }
    }
}
