//! A collector killed with SIGKILL under load (200k ticks/s) and started again with the same
//! `--out` and endpoint: it resumes from its saved state, the workers and the router send it
//! again every frame it had not saved, and the run completes as if nothing happened: sent =
//! processed, outputs.csv row for row the standalone engine's over the recorded input. Also
//! with the collector killed while a dead worker's ticks are being replayed to the survivors.

mod common;

use common::{
    announced, cep, cep_run_recorded, child_pid, sigkill, sorted_rows, standalone_rows, wait_for_summary, Running,
    SUMMARY_EVERY,
};

use cep_core::results::Summary;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// A port nothing listens on now (the collector's endpoint, the same for both of its lives,
/// as in docker-compose).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn collector(control: &str, port: u16, out: &Path) -> Command {
    let mut command = cep();
    command
        .args(["collector", "--router", control, "--csv", "all", "--advertise", "127.0.0.1"])
        .args(["--summary-every", SUMMARY_EVERY])
        .args(["--listen", &format!("tcp://127.0.0.1:{port}"), "--clock-listen", "tcp://127.0.0.1:*"])
        .arg("--out")
        .arg(out);
    command
}

fn wait(process: &mut Running, what: &str, within: Duration) -> std::process::ExitStatus {
    let since = Instant::now();
    loop {
        if let Some(status) = process.0.try_wait().unwrap() {
            return status;
        }
        assert!(since.elapsed() < within, "the {what} did not finish");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// SIGKILL, and the process reaped.
fn kill(process: &mut Running) {
    process.0.kill().unwrap();
    process.0.wait().unwrap();
}

#[test]
fn a_killed_collector_started_again_resumes_and_the_outputs_are_the_standalone_engines() {
    kill_collector(None, None, Duration::from_millis(1_500));
}

#[test]
fn a_collector_killed_during_a_failovers_replay_resumes_with_the_standalone_outputs() {
    kill_collector(Some("w1"), None, Duration::from_millis(1_500));
}

/// Down for longer than the workers may hold its frames (2 MiB here): they stop taking ticks,
/// the router holds its input but still serves control, and the restarted collector takes
/// over.
#[test]
fn a_collector_down_for_longer_than_the_workers_can_hold_resumes_once_restarted() {
    kill_collector(None, Some("2097152"), Duration::from_secs(4));
}

/// A run of two workers at 200k ticks/s whose collector is killed mid-run and started again
/// after `down`; with `worker_first`, that worker is killed first and the collector dies while
/// its ticks are replayed to the other; `max_unsaved` is the workers' `--max-unsaved`.
fn kill_collector(worker_first: Option<&str>, max_unsaved: Option<&str>, down: Duration) {
    let count: u64 = 1_400_000;
    let dir = tempfile::tempdir().unwrap();
    let announce = dir.path().join("router.endpoints");
    let out = dir.path().join("run");
    // The injector records its input there, maybe before the collector has made the folder.
    std::fs::create_dir_all(&out).unwrap();
    let mut router = Running(
        cep()
            .args(["router", "--workers", "2", "--listen", "tcp://127.0.0.1:*", "--control", "tcp://127.0.0.1:*"])
            .arg("--announce")
            .arg(&announce)
            .spawn()
            .unwrap(),
    );
    let (data, control) = announced(&announce);
    let port = free_port();
    let mut first = Running(collector(&control, port, &out).spawn().unwrap());
    let mut others = Vec::new();
    let mut victim = None;
    for id in ["w0", "w1"] {
        let mut worker = cep();
        worker.args(["worker", "--router", &control, "--id", id, "--listen", "tcp://127.0.0.1:*"]);
        if let Some(bytes) = max_unsaved {
            worker.args(["--max-unsaved", bytes]);
        }
        let worker = Running(worker.spawn().unwrap());
        if worker_first == Some(id) {
            victim = Some(worker);
        } else {
            others.push(("worker", worker));
        }
    }
    let injector = cep()
        .args(["injector", "--router", &control, "--router-data", &data, "--rate", "200000"])
        .args(["--count", &count.to_string(), "--record"])
        .arg(out.join("input.csv"))
        .spawn();
    others.push(("injector", Running(injector.unwrap())));

    // Killed mid-run, once it has saved its state many times (every 100 ms).
    wait_for_summary(&out, "500,000 ticks processed", Duration::from_secs(60), |s| s.events_processed >= 500_000);
    if let Some(worker) = &mut victim {
        // Noticed within 250 ms, then restored and replayed: the collector dies once the
        // failover has reached it, while the replayed ticks' outputs come.
        kill(worker);
        wait_for_summary(&out, "the failover", Duration::from_secs(30), |s| !s.failovers.is_empty());
    }
    kill(&mut first);
    // Down for longer than the failure time-out's detection (250 ms): the senders notice.
    std::thread::sleep(down);
    let log = dir.path().join("collector-2.log");
    let mut second = collector(&control, port, &out);
    second.env("RUST_LOG", "info").stderr(std::fs::File::create(&log).unwrap());
    let mut second = Running(second.spawn().unwrap());

    if !wait(&mut second, "restarted collector", Duration::from_secs(120)).success() {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(40).collect();
        panic!(
            "the restarted collector failed; the last lines of its log:\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    for (role, process) in &mut others {
        assert!(wait(process, role, Duration::from_secs(30)).success(), "the {role} failed");
    }
    assert!(wait(&mut router, "router", Duration::from_secs(30)).success(), "the router failed");
    assert!(!std::fs::exists(out.join("collector.state")).unwrap(), "a finished run leaves no state to resume");
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(log.contains("resumed from the saved state"), "{log}");

    let summary: Summary = common::read_summary(&out);
    assert!(summary.complete, "{summary:#?}");
    assert_eq!((summary.events_sent, summary.events_processed, summary.events_lost), (Some(count), count, Some(0)));
    assert_eq!((summary.duplicates, summary.out_of_order, summary.outputs_lost), (0, 0, 0));
    assert!(summary.errors.is_empty() && summary.failure.is_none(), "{:?} {:?}", summary.errors, summary.failure);
    // The killed worker's last frames may reach the collector after its failover record: the
    // collector's socket takes from each connection in turn, not in the order they were sent.
    // They are refused as a fenced worker's (the survivor replays their ticks) and counted.
    let mut rejected = summary.rejected.clone();
    let mut fenced = 0;
    if worker_first.is_some() {
        if let Some(causes) = rejected.get_mut("collector") {
            fenced = causes.remove("fenced").unwrap_or(0);
        }
        rejected.retain(|_, causes| !causes.is_empty());
    }
    assert!(rejected.is_empty(), "{:?}", summary.rejected);
    if let Some(victim) = worker_first {
        assert_eq!(summary.failovers.len(), 1, "{:?}", summary.failovers);
        let failover = &summary.failovers[0];
        assert!(failover.worker == victim && failover.recovered && failover.state_lost.is_empty(), "{failover:?}");
        // Each refused frame carries the outputs of at least one replayed tick.
        assert!(fenced <= failover.replayed, "{fenced} frames refused as fenced, {} ticks replayed", failover.replayed);
    }

    let (expected, got) = (standalone_rows(&out), sorted_rows(&out.join("outputs.csv")));
    assert_eq!(got.len(), expected.len(), "rows");
    assert!(got == expected, "the cluster's outputs differ from the standalone engine's");
}

/// Under `cep run`, a collector that dies is started again by the launcher and resumes.
#[test]
fn cep_run_starts_a_killed_collector_again_and_the_run_completes_with_the_standalone_outputs() {
    let count: u64 = 1_400_000;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let mut cluster = cep_run_recorded(2, count, &out);
    // Mid-run, once it has saved its state many times (every 100 ms).
    wait_for_summary(&out, "500,000 ticks processed", Duration::from_secs(60), |s| s.events_processed >= 500_000);
    let pid = child_pid(cluster.0.id(), |args| args.get(1).is_some_and(|role| role == "collector"))
        .expect("the collector runs");
    sigkill(pid);
    assert!(wait(&mut cluster, "cep run", Duration::from_secs(120)).success(), "cep run failed");

    let summary: Summary = common::read_summary(&out);
    assert!(summary.complete, "{summary:#?}");
    assert_eq!((summary.events_sent, summary.events_processed, summary.events_lost), (Some(count), count, Some(0)));
    assert_eq!((summary.duplicates, summary.out_of_order, summary.outputs_lost), (0, 0, 0));
    assert!(
        sorted_rows(&out.join("outputs.csv")) == standalone_rows(&out),
        "outputs differ from the standalone engine's"
    );
}
