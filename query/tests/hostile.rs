//! Rules text as an attacker writes it: deep nesting, a flood of errors, lines of junk, bytes
//! that are not UTF-8. Each gets a bounded, positioned answer, never a crash.

use cep_query::{compile, RulesSource};

fn query_with(expression: &str) -> String {
    format!("@name('q') SELECT symbol, price FROM StockTick PARTITION BY symbol RETAIN 2 EVENTS HAVING {expression};")
}

#[test]
fn nesting_is_bounded_not_a_stack_overflow() {
    let shallow = format!("{}price{} > 1", "(".repeat(60), ")".repeat(60));
    assert!(compile(&query_with(&shallow), "ok.rules").is_ok());
    // A long flat chain is fine: 400 alternatives.
    let alternatives = vec!["price > 1"; 400].join(" OR ");
    assert!(compile(&query_with(&alternatives), "ok.rules").is_ok());
    for deep in [
        format!("{}price{} > 1", "(".repeat(10_000), ")".repeat(10_000)),
        format!("{}price > 1", "- ".repeat(10_000)),
        format!("{}price > 1", "NOT ".repeat(10_000)),
        format!("{}price{} > 1", "abs(".repeat(10_000), ")".repeat(10_000)),
        // A flat chain nests too: `a + b + c` is `(a + b) + c`.
        format!("{}price > 1", "price + ".repeat(100_000)),
        format!("price > 1{}", " OR price > 1".repeat(100_000)),
    ] {
        let error = compile(&query_with(&deep), "deep.rules").unwrap_err();
        assert!(error.first_line().contains("the expression is too deep"), "{}", error.first_line());
    }
}

#[test]
fn a_flood_of_errors_is_shown_first_hundred_then_counted() {
    let junk = "#".repeat(20_000);
    let error = compile(&junk, "junk.rules").unwrap_err();
    assert!(error.diagnostics.len() >= 20_000);
    let report = error.render();
    assert!(report.ends_with(&format!("junk.rules: {} errors (the first 100 shown)", error.diagnostics.len())));
    assert_eq!(report.matches("junk.rules:1:").count(), 100);
    // Each shows at most a window of its line.
    assert!(report.len() < 100 * 400, "{} bytes", report.len());
    let caret_line = report.lines().find(|line| line.contains('^')).unwrap();
    assert!(caret_line.len() < 200, "{caret_line}");
}

#[test]
fn a_huge_token_is_quoted_in_part() {
    let text = format!("@name('q') SELECT symbol, {}(price) FROM StockTick;", "f".repeat(100_000));
    let error = compile(&text, "huge.rules").unwrap_err();
    let (line, report) = (error.first_line(), error.render());
    assert!(line.len() < 400 && line.contains("bytes in all)"), "{} bytes: {}", line.len(), &line[..200]);
    assert!(report.len() < 1000, "{} bytes", report.len());
}

#[test]
fn a_long_line_is_shown_around_its_caret() {
    let text = format!("-- {}\n{}#", "x".repeat(5_000), " ".repeat(3_000));
    let error = compile(&text, "long.rules").unwrap_err();
    let rendered = error.diagnostics[0].render(&text, "long.rules");
    let lines: Vec<&str> = rendered.lines().collect();
    assert!(lines[0].starts_with("long.rules:2:3001:"), "{}", lines[0]);
    let (shown, caret) = (lines[2], lines[3]);
    assert!(shown.contains("...") && shown.len() < 200, "{shown}");
    // The caret is under the word it names.
    let at = caret.find('^').unwrap();
    assert_eq!(&shown[at..at + 1], "#", "{shown}\n{caret}");
}

#[test]
fn bytes_that_are_not_utf8_are_placed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.rules");
    std::fs::write(&path, b"-- fine\n-- caf\xc3\xa9 \xff here\n").unwrap();
    let error = RulesSource::load(Some(&path)).unwrap_err();
    assert_eq!(error, format!("{}:2:9: not UTF-8 text (a rules file is UTF-8)", path.display()));
}
