//! Metrics flags a user can get wrong: one clear line saying what and where, non-zero exit.

use std::process::{Command, Output};

fn cep(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cep")).args(args).env("RUST_LOG", "off").output().expect("cep runs")
}

fn error_lines(output: &Output) -> Vec<String> {
    assert!(!output.status.success(), "expected failure, got {:?}", output.status);
    String::from_utf8_lossy(&output.stderr).lines().filter(|l| !l.trim().is_empty()).map(String::from).collect()
}

#[test]
fn a_taken_metrics_port_is_one_line() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap();
    let lines = error_lines(&cep(&[
        "router",
        "--listen",
        "tcp://127.0.0.1:*",
        "--control",
        "tcp://127.0.0.1:*",
        "--metrics-listen",
        &address.to_string(),
    ]));
    assert_eq!(lines, vec![format!("error: cannot serve metrics on {address}: Address already in use")]);

    // cep run: worker-1 gets PORT+4; nothing starts, one line names the address and the process.
    let base = format!("127.0.0.1:{}", address.port() - 4);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let lines = error_lines(&cep(&["run", "--count", "1000", "--quiet", "--metrics-listen", &base, "--out", out]));
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with("error: cannot serve metrics on 127.0.0.1:")
            && lines[0].ends_with(": Address already in use"),
        "{lines:?}"
    );
    // Usually it is worker-1's (unless another of the ports happens to be taken too).
    let mine = format!("error: cannot serve metrics on {address} (worker-1's port): Address already in use");
    assert!(lines[0] == mine || !lines[0].contains(&address.to_string()), "{lines:?}");
}

#[test]
fn a_bad_metrics_address_is_one_line() {
    let lines = error_lines(&cep(&["injector", "--count", "10", "--metrics-listen", "nowhere"]));
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].starts_with("error: cannot serve metrics on nowhere: not a HOST:PORT address"), "{lines:?}");
    let lines = error_lines(&cep(&["run", "--count", "10", "--metrics-listen", "127.0.0.1:http"]));
    assert_eq!(lines, vec!["error: --metrics-listen `127.0.0.1:http`: `http` is not a port number"]);
}
