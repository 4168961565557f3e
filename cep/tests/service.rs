//! A cluster that runs until it is stopped: `cep run` without `--duration` or `--count` sends
//! until the first Ctrl-C, which ends the injector's streams with their true counts, lets the
//! rest drain and writes complete results; meanwhile the collector keeps a rolling
//! summary.json up to date, which the final one replaces.

use cep_core::results::Summary;
use nix::sys::signal::Signal;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// summary.json as it is now, if there is one (it is replaced atomically: never half written).
fn summary(out: &Path) -> Option<Summary> {
    let text = std::fs::read_to_string(out.join("summary.json")).ok()?;
    Some(serde_json::from_str(&text).unwrap_or_else(|error| panic!("summary.json does not parse: {error}\n{text}")))
}

/// Waits for `child` to exit, killing it after `limit`.
fn wait(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let since = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if since.elapsed() > limit {
            let _ = child.kill();
            panic!("cep run did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn signal(child: &Child, signal: Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), signal).unwrap();
}

/// A run without an end, stopped by `stop` (a second signal sent as soon as the first is taken).
fn stopped_gracefully(transport: &str, stop: &[Signal]) {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_cep"))
        .args(["run", "--rate", "20000", "--csv", "alerts", "--workers", "2", "--quiet", "--transport", transport])
        .args(["--summary-every", "200ms"])
        .arg("--out")
        .arg(dir.path())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let (lines, logged) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in stderr.lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    // A rolling summary appears while the cluster runs, and keeps being replaced.
    let since = Instant::now();
    let rolling = loop {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("cep run ended on its own ({status}) without --duration or --count");
        }
        match summary(dir.path()) {
            Some(rolling) if rolling.events_processed > 0 => break rolling,
            _ if since.elapsed() > Duration::from_secs(90) => {
                let _ = child.kill();
                panic!("no rolling summary with processed events within 90 s");
            }
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    assert!(rolling.running && !rolling.complete, "{rolling:?}");
    assert_eq!(rolling.events_sent, None, "no stream has ended yet: {rolling:?}");
    let later = loop {
        let later = summary(dir.path()).unwrap();
        if later.events_processed > rolling.events_processed {
            break later;
        }
        assert!(since.elapsed() < Duration::from_secs(90), "the rolling summary is not replaced");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(later.running && later.duration_s > rolling.duration_s, "{later:?}");
    // One stop: the injector ends its streams, the cluster drains, nothing is lost. A signal
    // sent again goes once the first is taken (the launcher says it stops).
    for (index, &sent) in stop.iter().enumerate() {
        signal(&child, sent);
        if index == 0 && stop.len() > 1 {
            assert!(logged.iter().any(|line| line.contains("stopping: the injector ends its streams")));
        }
    }
    let status = wait(&mut child, Duration::from_secs(60));
    assert!(status.success(), "a graceful stop is a good end: {status}");
    let last = summary(dir.path()).unwrap();
    assert!(last.complete && !last.running, "{last:?}");
    let sent = last.events_sent.expect("every stream ended with its count");
    assert!(sent >= later.events_processed, "{last:?}");
    assert_eq!((last.events_lost, last.events_processed, last.duplicates), (Some(0), sent, 0), "{last:?}");
    assert_eq!(last.outputs_lost, 0);
    assert!(!dir.path().join(".summary.json.tmp").exists(), "the temporary summary is renamed, not left");
    let report = std::fs::read_to_string(dir.path().join("report.txt")).unwrap();
    assert!(report.contains("[OVERALL], Complete, true\n"), "{report}");
}

#[test]
fn a_run_without_an_end_stops_gracefully_on_ctrl_c_with_complete_results() {
    stopped_gracefully("tcp", &[Signal::SIGINT]);
}

#[test]
fn a_stop_delivered_twice_at_once_as_timeout_sends_it_is_one_graceful_stop() {
    // `timeout` signals the process, then its whole group: two SIGTERMs within microseconds
    // (sent here a moment apart, as the launcher may also take both at once).
    stopped_gracefully("tcp", &[Signal::SIGTERM, Signal::SIGTERM]);
}

#[test]
fn an_in_process_run_without_an_end_stops_gracefully_too() {
    stopped_gracefully("inproc", &[Signal::SIGINT]);
}
