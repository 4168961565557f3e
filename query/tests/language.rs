//! The rule language from text: what good queries compile to, and for bad ones every error
//! with its line, column and message.

use cep_query::plan::{AggregateKind, Expr, Window};
use cep_query::{compile, RulesError};

fn errors(source: &str) -> Vec<(usize, usize, String)> {
    let error: RulesError = compile(source, "t.rules").expect_err("should not check");
    error
        .diagnostics
        .iter()
        .map(|d| {
            let (line, col) = d.line_col(source);
            (line, col, d.message.clone())
        })
        .collect()
}

fn one_error(source: &str) -> (usize, usize, String) {
    let mut all = errors(source);
    assert_eq!(all.len(), 1, "{all:?}");
    all.pop().unwrap()
}

#[test]
fn shipped_files_check() {
    let reference = compile(cep_query::REFERENCE, "reference").unwrap();
    assert_eq!(reference.names().collect::<Vec<_>>(), ["perc", "trend", "volatility"]);
    let [perc, trend, volatility] = &reference.queries[..] else { panic!() };
    assert_eq!(perc.window, Window::Events(2));
    assert_eq!(trend.window, Window::Events(3));
    assert_eq!(volatility.window, Window::Time(10_000_000_000));
    assert_eq!(perc.aggregates.len(), 1, "perc(price) appears three times, computed once");
    assert_eq!(perc.aggregates[0].kind, AggregateKind::Perc);
    assert!(perc.is_alert() && trend.is_alert() && !volatility.is_alert());
    let oracle = compile(cep_query::ORACLE_400, "oracle").unwrap();
    assert_eq!(oracle.queries.len(), 400);
    assert!(oracle.queries.iter().all(|q| q.symbol_filter.is_some() && q.event_filter.is_none()));
}

#[test]
fn the_issue_examples_and_every_feature_check() {
    let source = "
        /* block comment */ // line comment
        @name('a') SELECT symbol, price, perc(price) AS value FROM StockTick PARTITION BY symbol RETAIN 2 EVENTS
            HAVING perc(price) > 2.0 OR perc(price) < -2.0;
        @name('b') SELECT symbol, stddev(price) AS value FROM StockTick PARTITION BY symbol RETAIN 10 SECONDS;
        @NAME('c') select avg(price) from stocktick where symbol in ('S1', 'S2') and price >= 10
            partition by symbol retain tumbling 1 minute having count(*) > 3 and not (max(price) - min(price) = 0);
        @name('d') SELECT symbol, prev(2, price) AS value FROM StockTick RETAIN 500ms PARTITION BY symbol
            WHERE symbol != 'X' HAVING first(price) <> last(price);
        @name('e') SELECT *, sum(price * 2) / count(price) AS value FROM StockTick PARTITION BY symbol RETAIN 3 events
            HAVING stddev_samp(price) >= 0 AND stddev_pop(price) >= 0 AND abs(-1.5) = 1.5 AND trend(price) >= 0;
        @name('f') SELECT * FROM StockTick WHERE symbol NOT IN ('A') AND price % 2 > 1;
    ";
    let rules = compile(source, "t").unwrap();
    assert_eq!(rules.queries.len(), 6);
    let c = &rules.queries[2];
    assert_eq!(c.window, Window::Tumbling(60_000_000_000));
    assert!(c.symbol_filter.is_some() && c.event_filter.is_some(), "WHERE split into symbol and event parts");
    assert_eq!(rules.queries[3].window, Window::Time(500_000_000));
    assert_eq!(rules.queries[5].window, Window::Events(1));
    assert_eq!(rules.queries[5].value, Expr::Price);
    // abs(-1.5) folded at check time.
    let e = &rules.queries[4];
    assert!(format!("{:?}", e.having).contains("Number(1.5), Number(1.5)"), "{:?}", e.having);
}

#[test]
fn the_last_query_needs_its_semicolon_too() {
    // docs/RULES.md: every query ends with `;`. The caret goes just after the last word.
    let source =
        "@name('a') SELECT price FROM StockTick;\n@name('b') SELECT price FROM StockTick\n  HAVING price > 1\n";
    assert_eq!(one_error(source), (3, 19, "expected `;` after the query, found the end of the file".to_string()));
    let rendered = compile(source, "t.rules").unwrap_err().render();
    assert_eq!(
        rendered,
        "t.rules:3:19: expected `;` after the query, found the end of the file\n  |\n3 |   HAVING price > 1\n  |                   ^\n\nt.rules: 1 error"
    );
    // Other errors are still found, and a last query with its `;` and a comment after it checks.
    assert_eq!(
        errors("@name('a') SELECT nope FROM StockTick"),
        vec![
            (1, 19, "unknown field `nope`: a StockTick has `symbol` and `price`".to_string()),
            (1, 38, "expected `;` after the query, found the end of the file".to_string()),
        ]
    );
    assert!(compile("@name('a') SELECT price FROM StockTick; -- done\n", "t").is_ok());
}

#[test]
fn syntax_errors_point_at_the_token_and_later_statements_are_still_checked() {
    let source = "@name('a') SELECT price FROM StockTick HAVING;\n@name('b') SELECT FROM StockTick;\n@name('c') SELECT nope FROM StockTick;";
    assert_eq!(
        errors(source),
        vec![
            (1, 46, "expected an expression, found `;`".to_string()),
            (2, 19, "expected an expression, found `FROM`".to_string()),
            (3, 19, "unknown field `nope`: a StockTick has `symbol` and `price`".to_string()),
        ]
    );
    assert_eq!(
        one_error("@name('a') SELECT price FROM StockTick RETAIN 2 PARSECS;").2,
        "unknown unit `parsecs`: use EVENTS or a time unit (ns, us, ms, s, sec, seconds, min, minutes, h, hours)"
    );
    assert_eq!(
        one_error("@name('a') SELECT price FROM StockTick RETAIN 2.5 EVENTS;").2,
        "an event window holds a whole number of events, 1 or more"
    );
    assert_eq!(
        one_error("@name('a') SELECT price FROM StockTick WHERE price > 1 WHERE price < 2;"),
        (1, 56, "a query has one WHERE clause".to_string())
    );
    assert_eq!(
        one_error("@name('a') SELECT price FROM StockTick x"),
        (1, 40, "expected `;` or a clause (WHERE, PARTITION BY, RETAIN, HAVING), found `x`".to_string())
    );
    // A stray character is reported, and parsing goes on without it.
    assert_eq!(
        errors("@name('a') SELECT price # 2 FROM StockTick;"),
        vec![(1, 25, "unexpected character `#`".to_string()), (1, 27, "expected FROM, found a number".to_string())]
    );
    assert_eq!(
        errors("@name('a) SELECT price FROM StockTick;")[0],
        (1, 7, "unterminated string: no closing quote on this line".to_string())
    );
    assert_eq!(
        one_error("@label('a') SELECT price FROM StockTick;"),
        (1, 2, "unknown annotation `@label`: the one annotation is @name('...')".to_string())
    );
    assert_eq!(
        one_error("-- nothing here\n").2,
        "no queries in the file: write at least one `@name('...') SELECT ... FROM StockTick`"
    );
}

#[test]
fn type_errors_are_found_at_check_time() {
    assert_eq!(
        one_error("@name('a') SELECT price FROM StockTick WHERE symbol > 3;"),
        (1, 46, "cannot compare text with a number".to_string())
    );
    assert_eq!(
        one_error("@name('a') SELECT price FROM StockTick WHERE symbol > 'A';"),
        (1, 46, "text compares with = and != only, not `>`".to_string())
    );
    assert_eq!(one_error("@name('a') SELECT percent(price) FROM StockTick;").0..=1, 1..=1);
    let (line, col, message) = one_error("@name('a')\nSELECT symbol, percent(price) AS value FROM StockTick;");
    assert_eq!((line, col), (2, 16));
    assert!(message.starts_with("unknown function `percent`: aggregates are count, sum"), "{message}");
    assert_eq!(
        one_error("@name('a') SELECT price FROM StockTick WHERE perc(price) > 1 PARTITION BY symbol RETAIN 2 EVENTS;"),
        (
            1,
            46,
            "aggregate `perc` is not allowed in WHERE: WHERE picks events before they enter the window; use HAVING"
                .to_string()
        )
    );
    assert_eq!(
        one_error("@name('a') SELECT sum(avg(price)) AS value FROM StockTick PARTITION BY symbol RETAIN 2 EVENTS;").2,
        "aggregate `avg` inside another aggregate: aggregates take per-event values"
    );
    assert_eq!(
        one_error("@name('a') SELECT price FROM StockTick HAVING price;"),
        (1, 47, "HAVING needs a condition, this is a number".to_string())
    );
    assert_eq!(
        one_error("@name('a') SELECT price FROM StockTick HAVING price > 1 AND 'x';").2,
        "`AND` needs a condition on both sides, this is text"
    );
    assert_eq!(
        one_error("@name('a') SELECT symbol AS value FROM StockTick;").2,
        "the value column must be a number, this is text"
    );
    assert_eq!(
        one_error("@name('a') SELECT price AS volume FROM StockTick;").2,
        "an output has the columns symbol, price and value; `volume` is not one"
    );
    assert_eq!(
        one_error("@name('a') SELECT avg(price), max(price) FROM StockTick PARTITION BY symbol RETAIN 2 EVENTS;"),
        (1, 31, "an output has one value column: name it `AS value`, or drop it".to_string())
    );
    assert_eq!(
        one_error("@name('a') SELECT prev(price) AS value FROM StockTick PARTITION BY symbol RETAIN 2 EVENTS;").2,
        "prev takes two arguments: prev(n, expression), n events back in the window"
    );
    assert_eq!(
        one_error("@name('a') SELECT sum(*) AS value FROM StockTick PARTITION BY symbol RETAIN 2 EVENTS;").2,
        "only count takes `*`: sum(*) is not defined"
    );
    assert_eq!(
        one_error("@name('a') SELECT price FROM StockTick WHERE symbol IN ('A', 2);"),
        (1, 62, "the IN list holds literals of the tested type (text)".to_string())
    );
}

#[test]
fn clause_and_name_rules() {
    assert_eq!(
        one_error("SELECT price FROM StockTick;"),
        (
            1,
            1,
            "a query needs a name: put @name('...') before SELECT (it becomes the `rule` of its outputs)".to_string()
        )
    );
    assert_eq!(
        one_error("@name('a') SELECT price FROM StockTick;\n@name('a') SELECT price FROM StockTick;"),
        (2, 7, "a query named `a` is already defined above".to_string())
    );
    assert_eq!(
        one_error("@name('a b') SELECT price FROM StockTick;").2,
        "a query name is 1 to 64 letters, digits, `_`, `-`, `.` or `:`"
    );
    assert_eq!(
        one_error("@name('a') SELECT price FROM Trades;"),
        (1, 30, "unknown stream `Trades`: the input stream is StockTick".to_string())
    );
    assert_eq!(one_error("@name('a') SELECT avg(price) AS value FROM StockTick RETAIN 5 EVENTS;"),
        (1, 54, "a query with state (RETAIN, trend, prev) needs PARTITION BY symbol: each symbol's events live on one worker".to_string()));
    assert_eq!(
        one_error("@name('a') SELECT price FROM StockTick PARTITION BY price RETAIN 5 EVENTS;").2,
        "cannot partition by `price`: the cluster partitions the stream by symbol (PARTITION BY symbol)"
    );
    assert_eq!(
        one_error("@name('a') SELECT price FROM StockTick RETAIN TUMBLING 5 EVENTS PARTITION BY symbol;").2,
        "tumbling windows are windows of time: RETAIN TUMBLING 10 SECONDS"
    );
}

#[test]
fn rendered_errors_show_the_line_and_a_caret() {
    let source =
        "-- r\n@name('a')\nSELECT symbol, price, perc(price) AS value FROM StockTick\nHAVING perc(price) > 'two';\n";
    let error = compile(source, "bad.rules").unwrap_err();
    assert_eq!(
        error.render(),
        "bad.rules:4:8: cannot compare a number with text\n  |\n4 | HAVING perc(price) > 'two';\n  |        ^^^^^^^^^^^^^^^^^^^\n\nbad.rules: 1 error"
    );
}
