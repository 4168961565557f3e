//! Mistakes a user can make: one clear line saying what and where, and a non-zero exit.

use std::process::{Command, Output};

fn cep(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cep")).args(args).env("RUST_LOG", "off").output().expect("cep runs")
}

fn error_line(output: &Output) -> String {
    assert!(!output.status.success(), "expected failure, got {:?}", output.status);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    lines.first().map(|l| l.to_string()).unwrap_or_default()
}

#[test]
fn bad_flag_values() {
    assert_eq!(error_line(&cep(&["run", "--workers", "0"])), "error: --workers must be at least 1");
    let line = error_line(&cep(&["run", "--duration", "soon"]));
    assert!(line.contains("invalid value 'soon' for '--duration"), "{line}");
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("bad.rules");
    std::fs::write(&rules, "@name('x')\nSELECT symbol, volume AS value FROM StockTick;\n").unwrap();
    let line = error_line(&cep(&["run", "--count", "10", "--rules", rules.to_str().unwrap()]));
    assert_eq!(
        line,
        format!("error: {}:2:16: unknown field `volume`: a StockTick has `symbol` and `price`", rules.display())
    );
    let line = error_line(&cep(&["router", "--rules", "/nonexistent.rules"]));
    assert!(line.starts_with("error: cannot read the rules file /nonexistent.rules: "), "{line}");
    let line = error_line(&cep(&["injector", "--connections", "3", "--symbols", "2", "--count", "5"]));
    assert!(line.contains("--connections 3 exceeds --symbols 2"), "{line}");
    // A negative number is the flag's value, checked as such (not taken for a flag).
    let line = error_line(&cep(&["injector", "--rate", "-5", "--count", "10"]));
    assert!(line.ends_with("--rate must be a non-negative number, got -5"), "{line}");
}

#[test]
fn a_bad_endpoint_is_a_usage_error_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let refused = |args: &[&str]| {
        let output = cep(&[&["run", "--count", "10", "--out", out.to_str().unwrap()], args].concat());
        assert_eq!(output.status.code(), Some(2), "cep run {args:?}");
        let written = std::fs::read_dir(&out).map_or(0, |files| files.count());
        assert_eq!(written, 0, "nothing written for {args:?}");
        error_line(&output)
    };
    assert_eq!(
        refused(&["--control", "foo://bar"]),
        "error: invalid router configuration: --control `foo://bar`: not an endpoint: use tcp://HOST:PORT, ipc://PATH or inproc://NAME"
    );
    assert!(refused(&["--control", "tcp://999.1.1.1:1"]).ends_with("`999.1.1.1` is not an IPv4 address"));
    let missing = dir.path().join("no-such-folder").join("control");
    assert_eq!(
        refused(&["--control", &format!("ipc://{}", missing.display())]),
        format!(
            "error: --control `ipc://{}`: no folder {} to make the socket in",
            missing.display(),
            missing.parent().unwrap().display()
        )
    );
    let line = error_line(&cep(&["worker", "--listen", "tcp://0.0.0.0"]));
    assert!(line.ends_with("a TCP endpoint needs a port: tcp://HOST:PORT"), "{line}");
}

#[test]
fn address_in_use() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("tcp://127.0.0.1:{}", taken.local_addr().unwrap().port());
    let line = error_line(&cep(&["router", "--listen", &endpoint, "--control", "tcp://127.0.0.1:*"]));
    assert_eq!(line, format!("error: cannot bind {endpoint}: Address already in use"));
}

#[test]
fn unreachable_router() {
    // A socket that accepts connections but never speaks ZeroMQ, held for the whole test.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let router = format!("tcp://{}", silent.local_addr().unwrap());
    let line = error_line(&cep(&["worker", "--router", &router, "--start-timeout", "300ms"]));
    assert_eq!(
        line,
        format!("error: cannot register with the router at {router}: no answer from {router} within 300ms")
    );
}

#[test]
fn a_router_address_where_nothing_listens_is_said_while_it_waits() {
    // Nothing listens on port 1: every connection is refused, and the worker says so once,
    // at 5 s, then goes on trying until its start time-out.
    let output = Command::new(env!("CARGO_BIN_EXE_cep"))
        .args(["worker", "--router", "tcp://127.0.0.1:1", "--start-timeout", "6s"])
        .env("RUST_LOG", "warn")
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    let warned = "nothing at tcp://127.0.0.1:1 has accepted a connection for 5s: is a router running there?";
    assert_eq!(stderr.matches(warned).count(), 1, "{stderr}");
    assert!(stderr.contains("error: cannot register with the router at tcp://127.0.0.1:1: no answer"), "{stderr}");
}

#[test]
fn a_router_gone_after_its_connection_was_made_is_said_while_it_waits() {
    // Something accepts the first connection, then closes it and stops listening: the worker
    // says the connection dropped and is not back, once, and goes on trying.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let router = format!("tcp://{}", listener.local_addr().unwrap());
    let closer = std::thread::spawn(move || drop(listener.accept()));
    let output = Command::new(env!("CARGO_BIN_EXE_cep"))
        .args(["worker", "--router", &router, "--start-timeout", "7s"])
        .env("RUST_LOG", "warn")
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    closer.join().unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    let warned = format!(
        "the connection to {router} dropped before it answered and is not back after 5s: has the router stopped?"
    );
    assert_eq!(stderr.matches(&warned).count(), 1, "{stderr}");
    assert!(!stderr.contains("has accepted a connection"), "it was reached once: {stderr}");
}

#[test]
fn router_host_that_does_not_resolve() {
    // Found while choosing the address to advertise (the route to the router)...
    let line = error_line(&cep(&["worker", "--router", "tcp://no-such-host.invalid:5556", "--start-timeout", "300ms"]));
    assert!(
        line.starts_with("error: cannot find the address to advertise: cannot resolve `no-such-host.invalid:5556`"),
        "{line}"
    );
    // ... or while registering, when the address is given.
    let line = error_line(&cep(&[
        "worker",
        "--router",
        "tcp://no-such-host.invalid:5556",
        "--advertise",
        "127.0.0.1",
        "--start-timeout",
        "300ms",
    ]));
    let expected = "error: cannot register with the router at tcp://no-such-host.invalid:5556: the host of tcp://no-such-host.invalid:5556 does not resolve";
    assert!(line.starts_with(expected), "{line}");
}

#[test]
fn bad_value_from_the_environment() {
    let output = Command::new(env!("CARGO_BIN_EXE_cep"))
        .args(["injector", "--count", "10"])
        .env("CEP_RATE", "fast")
        .env("RUST_LOG", "off")
        .output()
        .unwrap();
    let line = error_line(&output);
    assert!(line.contains("invalid value 'fast' for '--rate <RATE>'"), "{line}");
}

#[test]
fn incomplete_cluster_times_out() {
    let line = error_line(&cep(&[
        "router",
        "--listen",
        "tcp://127.0.0.1:*",
        "--control",
        "tcp://127.0.0.1:*",
        "--start-timeout",
        "200ms",
    ]));
    assert_eq!(
        line,
        "error: the cluster was not complete within 200ms: workers 0/2, collector 0/1, injector streams 0/1"
    );
}

#[test]
fn bad_replay_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ticks.txt");
    std::fs::write(&file, "AAA;1.0;1\nAAA;abc;2\n").unwrap();
    let line = error_line(&cep(&["injector", "--replay", file.to_str().unwrap(), "--start-timeout", "300ms"]));
    assert_eq!(line, format!("error: cannot read the replay file: {}:2: price `abc` is not a number", file.display()));
}

#[test]
fn rules_check_reports_every_error_with_a_caret_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.rules");
    std::fs::write(
        &bad,
        "-- two mistakes\n@name('a')\nSELECT symbol, percent(price) AS value FROM StockTick;\n\
         @name('b') SELECT symbol, price FROM StockTick WHERE symbol > 3;\n",
    )
    .unwrap();
    let output = cep(&["rules", "check", bad.to_str().unwrap()]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    let path = bad.display();
    assert!(stderr.contains(&format!("{path}:3:16: unknown function `percent`")), "{stderr}");
    assert!(
        stderr.contains("3 | SELECT symbol, percent(price) AS value FROM StockTick;\n  |                ^^^^^^^"),
        "{stderr}"
    );
    assert!(stderr.contains(&format!("{path}:4:54: cannot compare text with a number")), "{stderr}");
    assert!(stderr.contains(&format!("{path}: 2 errors")), "{stderr}");
    assert!(stderr.contains("error: 1 of 1 rules files do not check"), "{stderr}");

    let shipped = concat!(env!("CARGO_MANIFEST_DIR"), "/../rules/");
    let output = cep(&["rules", "check", &format!("{shipped}reference.rules"), &format!("{shipped}oracle-400.rules")]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("reference.rules: ok, 3 queries") && stdout.contains("oracle-400.rules: ok, 400 queries"));

    let output = cep(&["rules", "oracle", "--symbols", "200"]);
    assert_eq!(String::from_utf8_lossy(&output.stdout), cep_query::ORACLE_400);
    let line = error_line(&cep(&["rules", "check", "/nonexistent.rules"]));
    assert!(line.starts_with("error: cannot read the rules file /nonexistent.rules: "), "{line}");
}

#[test]
fn csv_help_says_what_alerts_writes() {
    // The help of every command that takes --csv, as the collector decides it (query/src/plan.rs
    // Query::is_alert): a condition, not a rule's name.
    for command in ["run", "collector"] {
        let output = cep(&[command, "--help"]);
        let help = String::from_utf8_lossy(&output.stdout).split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            help.contains("- alerts: Outputs of queries that emit on a condition (HAVING, or WHERE on the event: perc and trend), not those without one (volatility on every tick, a tumbling window's every pane)"),
            "{command}: {help}"
        );
        assert!(!help.contains("perc and trend outputs only"), "{command}: {help}");
    }
}

#[test]
fn the_oracle_generator_writes_only_files_that_check() {
    let output = cep(&["rules", "oracle", "--symbols", "0"]);
    assert_eq!(error_line(&output), "error: --symbols must be at least 1: a rules file needs at least one query");
    assert!(output.stdout.is_empty(), "nothing written: {}", String::from_utf8_lossy(&output.stdout));
    // The smallest file it writes checks.
    let dir = tempfile::tempdir().unwrap();
    let one = dir.path().join("oracle-2.rules");
    let output = cep(&["rules", "oracle", "--symbols", "1"]);
    assert!(output.status.success());
    std::fs::write(&one, &output.stdout).unwrap();
    let output = cep(&["rules", "check", one.to_str().unwrap()]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(String::from_utf8_lossy(&output.stdout), format!("{}: ok, 2 queries\n", one.display()));
    let single = dir.path().join("one.rules");
    std::fs::write(&single, "@name('p') SELECT symbol, price AS value FROM StockTick;\n").unwrap();
    let output = cep(&["rules", "check", single.to_str().unwrap()]);
    assert_eq!(String::from_utf8_lossy(&output.stdout), format!("{}: ok, 1 query\n", single.display()));
}

#[test]
fn rules_check_requires_the_last_semicolon() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("last.rules");
    std::fs::write(&file, "@name('a')\nSELECT symbol, price AS value FROM StockTick\n").unwrap();
    let output = cep(&["rules", "check", file.to_str().unwrap()]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    let expected = format!(
        "{}:2:45: expected `;` after the query, found the end of the file\n  |\n2 | SELECT symbol, price AS value FROM StockTick\n  |                                             ^\n",
        file.display()
    );
    assert!(stderr.starts_with(&expected), "{stderr}");
    assert!(stderr.contains("error: 1 of 1 rules files do not check"), "{stderr}");
}

#[test]
fn key_refusals_are_usage_errors_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let refused = |args: &[&str]| {
        let output = cep(args);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {output:?}");
        error_line(&output)
    };
    let missing = dir.path().join("no-such-dir").join("a.key");
    assert_eq!(
        refused(&["keys", "generate", missing.to_str().unwrap()]),
        format!(
            "error: {}: no folder {} to write it in (create it first)",
            missing.display(),
            missing.parent().unwrap().display()
        )
    );
    assert!(!missing.parent().unwrap().exists(), "a mistyped path is not made into folders");
    let public = dir.path().join("a.pub");
    let line = refused(&["keys", "generate", public.to_str().unwrap()]);
    assert!(
        line.ends_with("a key pair file is not a .pub file (name it NAME.key; NAME.pub is its public half)"),
        "{line}"
    );
    let key = dir.path().join("a.key");
    let output = cep(&["keys", "generate", key.to_str().unwrap()]);
    assert!(output.status.success(), "{output:?}");
    assert!(key.is_file() && public.is_file());
    assert_eq!(
        refused(&["keys", "generate", key.to_str().unwrap()]),
        format!("error: {} exists: keys are never overwritten", key.display())
    );
    let cluster = dir.path().join("cluster");
    let line = refused(&["keys", "init", cluster.to_str().unwrap(), "--worker", "../w"]);
    assert!(line.starts_with("error: --worker `../w`: a worker id for a key file is letters"), "{line}");
    assert!(!cluster.exists());
    assert!(cep(&["keys", "init", cluster.to_str().unwrap()]).status.success());
    let line = refused(&["keys", "init", cluster.to_str().unwrap()]);
    assert_eq!(line, format!("error: {} exists: keys are never overwritten", cluster.join("router.key").display()));
}

#[test]
fn a_reader_that_closed_its_pipe_leaves_each_command_its_usual_status() {
    // `cep rules check x.rules 2>&1 | head -0`, with the reader gone before the first write:
    // every line meets a closed pipe. The command ends as it would have, never with a panic.
    let dir = tempfile::tempdir().unwrap();
    let (broken, ok) = (dir.path().join("broken.rules"), dir.path().join("ok.rules"));
    std::fs::write(&broken, "SELECT nonsense FROM;\n").unwrap();
    std::fs::write(
        &ok,
        "@name('x') SELECT symbol, price, perc(price) AS value FROM StockTick PARTITION BY symbol RETAIN 2 EVENTS;\n",
    )
    .unwrap();
    for (args, usual) in [
        (vec!["rules", "check", broken.to_str().unwrap()], 1),
        (vec!["rules", "check", ok.to_str().unwrap()], 0),
        (vec!["rules", "oracle", "--symbols", "5000"], 0),
        (vec!["--help"], 0),
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let status = Command::new(env!("CARGO_BIN_EXE_cep"))
            .args(&args)
            .stdout(writer.try_clone().unwrap())
            .stderr(writer)
            .status()
            .expect("cep runs");
        assert_eq!(status.code(), Some(usual), "cep {args:?}");
    }
}
