//! Logs as an operator reads them: every line names its process (under `cep run` they all
//! share one stderr), no colour escapes unless stderr is a terminal (and not even then with
//! NO_COLOR), and `--log-format json` gives one parseable object per line.

use serde_json::Value;
use std::process::{Command, Output};

fn cep(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_cep"));
    command.args(args).env("RUST_LOG", "info").env_remove("NO_COLOR").env_remove("CEP_LOG_FORMAT");
    command
}

fn stderr_lines(output: &Output) -> Vec<String> {
    String::from_utf8_lossy(&output.stderr).lines().filter(|line| !line.trim().is_empty()).map(String::from).collect()
}

/// A worker that cannot reach its router: a few log lines, then the error line.
/// A socket that accepts connections but never speaks ZeroMQ: a router that never answers.
/// The caller holds it until the worker is done.
fn silent_router() -> (std::net::TcpListener, String) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("tcp://{}", listener.local_addr().unwrap());
    (listener, endpoint)
}

fn unreachable_worker(router: &str, extra: &[&str]) -> Command {
    let mut command = cep(extra);
    command.args(["worker", "--id", "worker-7", "--advertise", "127.0.0.1", "--start-timeout", "300ms"]);
    command.args(["--router", router]);
    command
}

#[test]
fn text_lines_name_the_process_and_carry_no_colour_into_a_pipe() {
    let (_silent, router) = silent_router();
    let output = unreachable_worker(&router, &[]).output().unwrap();
    assert!(!output.status.success());
    let lines = stderr_lines(&output);
    let (error, logs) = lines.split_last().unwrap();
    assert!(error.starts_with("error: cannot register with the router at tcp://127.0.0.1:"), "{error}");
    assert!(!logs.is_empty());
    for line in &lines {
        assert!(!line.contains('\u{1b}'), "escape bytes in {line:?}");
    }
    for line in logs {
        assert!(line.contains(" INFO worker-7: ") || line.contains(" WARN worker-7: "), "{line}");
    }
}

#[test]
fn colour_only_on_a_terminal_and_never_with_no_color() {
    // `script` gives the command a pseudo-terminal for its stderr.
    let (_silent, router) = silent_router();
    let worker = format!(
        "'{}' worker --id worker-7 --advertise 127.0.0.1 --start-timeout 300ms --router {router}",
        env!("CARGO_BIN_EXE_cep")
    );
    let on_terminal = |no_color: Option<&str>| {
        let mut command = Command::new("script");
        command.args(["-qec", &format!("{worker} 2>&1"), "/dev/null"]).env("RUST_LOG", "info");
        match no_color {
            Some(value) => command.env("NO_COLOR", value),
            None => command.env_remove("NO_COLOR"),
        };
        String::from_utf8_lossy(&command.output().expect("script (util-linux) runs").stdout).to_string()
    };
    let coloured = on_terminal(None);
    assert!(coloured.contains("\u{1b}[32m INFO\u{1b}[0m"), "{coloured:?}");
    let plain = on_terminal(Some("1"));
    assert!(plain.contains(" INFO worker-7: ") && !plain.contains('\u{1b}'), "{plain:?}");
}

#[test]
fn json_lines_parse_and_say_who_wrote_them() {
    let (_silent, router) = silent_router();
    let output = unreachable_worker(&router, &["--log-format", "json"]).output().unwrap();
    assert!(!output.status.success());
    let lines = stderr_lines(&output);
    assert!(lines.len() >= 2, "{lines:?}");
    for line in &lines {
        let object: Value = serde_json::from_str(line).unwrap_or_else(|error| panic!("{error}: {line}"));
        assert_eq!((object["role"].as_str(), object["id"].as_str()), (Some("worker"), Some("worker-7")), "{line}");
        assert!(object["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')), "{line}");
        assert!(object["message"].is_string() && object["fields"].is_object(), "{line}");
    }
    let registering: Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(registering["level"], "INFO");
    assert_eq!(registering["message"], "worker registering");
    assert_eq!(registering["fields"]["id"], "worker-7");
    let error: Value = serde_json::from_str(lines.last().unwrap()).unwrap();
    assert_eq!(error["level"], "ERROR");
    assert!(error["message"].as_str().unwrap().starts_with("cannot register with the router at tcp://"), "{error}");
}

/// Every process of a local run, one stderr: each line says which process wrote it.
#[test]
fn a_local_run_names_every_process_on_the_shared_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let run = |format: &str| {
        // Not quiet: the launcher's own lines and the collector's progress lines too.
        let output = cep(&["run", "--count", "20000", "--rate", "0", "--csv", "none"])
            .args(["--log-format", format, "--out"])
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        stderr_lines(&output)
    };
    let names = ["launcher", "router", "collector", "worker-0", "worker-1", "injector", "injector-0"];
    let text = run("text");
    assert!(!text.is_empty());
    let mut seen = std::collections::BTreeSet::new();
    for line in &text {
        assert!(!line.contains('\u{1b}'), "escape bytes in {line:?}");
        let name = line.split_whitespace().nth(2).and_then(|name| name.strip_suffix(':'));
        assert!(name.is_some_and(|name| names.contains(&name)), "{line}");
        seen.insert(name.unwrap().to_string());
    }
    for name in ["launcher", "router", "collector", "worker-0", "worker-1", "injector-0"] {
        assert!(seen.contains(name), "no line from {name}: {text:?}");
    }

    let json = run("json");
    let mut roles = std::collections::BTreeSet::new();
    for line in &json {
        let object: Value = serde_json::from_str(line).unwrap_or_else(|error| panic!("{error}: {line}"));
        let (role, id) = (object["role"].as_str().unwrap(), object["id"].as_str().unwrap());
        assert!(id.starts_with(role), "{line}");
        roles.insert(role.to_string());
    }
    assert_eq!(roles.into_iter().collect::<Vec<_>>(), vec!["collector", "injector", "launcher", "router", "worker"]);
}
