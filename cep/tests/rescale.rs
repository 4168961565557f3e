//! Live rescaling on real processes: a run at 200k ticks/s starts with one worker, grows to
//! two and three as workers start and register, shrinks to two as one is removed, and its
//! outputs are the standalone engine's over the recorded input, row for row.

mod common;

use common::{cep, Running};

use cep_core::results::Summary;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn run(command: &mut Command) -> Output {
    command.output().expect("cep runs")
}

/// `cep cluster status` until `ready` holds for its output (at most a minute).
fn wait_for_status(control: &str, what: &str, ready: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = run(cep().args(["cluster", "status", "--interval", "0", "--router", control]));
        let text = String::from_utf8_lossy(&status.stdout).into_owned();
        if status.status.success() && ready(&text) {
            return text;
        }
        assert!(Instant::now() < deadline, "waited a minute for {what}; last status:\n{text}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The states `cep cluster status` lists for the members with id `id`, in the order they
/// registered (a worker started again under its id is a member of its own).
fn states(status: &str, id: &str) -> Vec<String> {
    let prefix = format!("{id} ");
    status
        .lines()
        .filter(|line| line.starts_with(&prefix))
        .filter_map(|line| line.split_whitespace().nth(2))
        .map(str::to_string)
        .collect()
}

/// `cep run` with one worker at 200k ticks/s for `count` ticks, recording its input, every
/// output written, its control endpoint at `control`.
fn one_worker_run(count: u64, control: &str, out: &Path) -> Running {
    Running(
        cep()
            .args(["run", "--workers", "1", "--rate", "200000", "--count", &count.to_string()])
            .args(["--csv", "all", "--record-input", "--quiet", "--control", control])
            .arg("--out")
            .arg(out)
            .spawn()
            .unwrap(),
    )
}

/// The standalone engine over the run's recorded input gives the same rows as its outputs.csv.
fn assert_standalone_outputs(scratch: &Path, out: &Path) {
    let standalone = scratch.join("standalone.csv");
    let engine = run(cep().args(["engine", "--input"]).arg(out.join("input.csv")).arg("--output").arg(&standalone));
    assert!(engine.status.success(), "{}", String::from_utf8_lossy(&engine.stderr));
    let expected = sorted_rows(&standalone, 6, None);
    let got = sorted_rows(&out.join("outputs.csv"), 6, None);
    assert_eq!(got.len(), expected.len());
    assert!(got == expected, "the cluster's outputs differ from the standalone engine's");
}

/// The state of the first member with id `id`.
fn member_state(status: &str, id: &str) -> Option<String> {
    states(status, id).into_iter().next()
}

/// The rows of `path` (outputs.csv or a standalone output), their first `columns` columns,
/// sorted; with `stream`, only that stream's rows.
fn sorted_rows(path: &Path, columns: usize, stream: Option<&str>) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut rows: Vec<String> = text
        .lines()
        .skip(1)
        .filter(|line| stream.is_none_or(|stream| line.split(',').nth(4) == Some(stream)))
        .map(|line| line.split(',').take(columns).collect::<Vec<_>>().join(","))
        .collect();
    rows.sort();
    rows
}

#[test]
fn a_run_that_grows_from_one_to_three_workers_and_back_to_two_gives_the_standalone_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let control = format!("ipc://{}", dir.path().join("control").display());
    let count: u64 = 1_600_000;
    let mut cluster = one_worker_run(count, &control, &out);
    // Joins once worker-0 owns symbols (ticks have flowed), so that each join moves some.
    wait_for_status(&control, "worker-0 to own symbols", |s| {
        member_state(s, "worker-0").as_deref() == Some("active")
            && s.lines().any(|l| l.starts_with("worker-0 ") && l.split_whitespace().nth(3).is_some_and(|n| n != "0"))
    });
    let mut joined = Vec::new();
    for id in ["joiner-1", "joiner-2"] {
        joined.push(Running(
            // No checkpoint folder of its own: the router names the run's (its state is then
            // restorable by the others, and theirs by it).
            cep().args(["worker", "--router", &control, "--id", id, "--listen", "tcp://127.0.0.1:*"]).spawn().unwrap(),
        ));
        wait_for_status(&control, &format!("{id} to join"), |s| {
            member_state(s, id).as_deref() == Some("active") && s.contains("moving: nothing")
        });
    }
    // A duplicate id is refused, as is removing a worker that is not there.
    let duplicate =
        run(cep().args(["worker", "--router", &control, "--id", "joiner-1", "--listen", "tcp://127.0.0.1:*"]));
    assert!(!duplicate.status.success());
    let stderr = String::from_utf8_lossy(&duplicate.stderr);
    assert!(stderr.contains("worker id `joiner-1` is already a member"), "{stderr}");
    let unknown = run(cep().args(["cluster", "remove", "nobody", "--router", &control]));
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no worker `nobody`"));
    // worker-0 leaves: its symbols move to the two joiners, then it exits.
    let removed = run(cep().args(["cluster", "remove", "worker-0", "--router", &control]));
    assert!(removed.status.success(), "{}", String::from_utf8_lossy(&removed.stderr));
    let status =
        wait_for_status(&control, "worker-0 to leave", |s| member_state(s, "worker-0").as_deref() == Some("left"));
    assert!(status.lines().any(|l| l.starts_with("worker-0 ") && l.split_whitespace().nth(3) == Some("0")), "{status}");

    let finished = cluster.0.wait().unwrap();
    assert!(finished.success(), "cep run failed: {finished}");
    for mut worker in joined {
        assert!(worker.0.wait().unwrap().success());
    }
    let summary: Summary = common::read_summary(&out);
    assert!(summary.complete);
    assert_eq!((summary.events_sent, summary.events_processed, summary.events_lost), (Some(count), count, Some(0)));
    assert_eq!((summary.duplicates, summary.out_of_order, summary.outputs_lost), (0, 0, 0));
    // Only refused control requests: the registration with a taken id and the leave of an
    // unknown worker (above), and the status asked before the start, as often as it was.
    let causes: Vec<(&str, &str)> = summary
        .rejected
        .iter()
        .flat_map(|(place, causes)| causes.keys().map(move |cause| (place.as_str(), cause.as_str())))
        .collect();
    assert_eq!(causes, [("router", "refused_control")], "{:?}", summary.rejected);
    assert!(summary.rejected["router"]["refused_control"] >= 2, "{:?}", summary.rejected);
    let ids: Vec<&str> = summary.workers.iter().map(|w| w.id.as_str()).collect();
    assert_eq!(ids, ["worker-0", "joiner-1", "joiner-2"]);
    assert!(summary.workers.iter().all(|w| w.events > 0), "{:?}", summary.workers);
    assert_eq!(summary.workers[0].symbols, Some(0), "worker-0 kept nothing");
    let rescales: Vec<(&str, &str)> = summary.rescales.iter().map(|r| (r.kind.as_str(), r.worker.as_str())).collect();
    assert_eq!(rescales, [("join", "joiner-1"), ("join", "joiner-2"), ("leave", "worker-0")]);
    for rescale in &summary.rescales {
        assert!(rescale.finished && rescale.symbols > 0 && rescale.state_bytes > 0, "{rescale:?}");
    }

    assert_standalone_outputs(dir.path(), &out);
}

#[test]
fn an_injector_that_registers_while_the_run_goes_adds_its_streams_and_its_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let control = format!("ipc://{}", dir.path().join("control").display());
    let data = format!("ipc://{}", dir.path().join("data").display());
    // The late injector replays symbols of its own (a symbol belongs to one stream).
    let replay = dir.path().join("late.txt");
    let mut text = String::new();
    let mut price = [100.0f64; 20];
    for i in 0..20_000u64 {
        let s = (i % 20) as usize;
        price[s] *= 1.0 + (((i * 7919) % 41) as f64 - 20.0) / 1000.0;
        text += &format!("X{s:02};{:.4};{}\n", price[s], 1_700_000_000_000 + i);
    }
    std::fs::write(&replay, text).unwrap();
    let count: u64 = 400_000;
    let mut cluster = Running(
        cep()
            .args(["run", "--workers", "2", "--rate", "50000", "--count", &count.to_string()])
            .args(["--csv", "all", "--record-input", "--quiet", "--control", &control, "--data", &data])
            .arg("--out")
            .arg(&out)
            .spawn()
            .unwrap(),
    );
    wait_for_status(&control, "the run to start", |s| s.contains("streams ended: 0 of 1"));
    let late = run(cep().args(["injector", "--router", &control, "--router-data", &data, "--replay"]).arg(&replay));
    assert!(late.status.success(), "{}", String::from_utf8_lossy(&late.stderr));
    let finished = cluster.0.wait().unwrap();
    assert!(finished.success(), "cep run failed: {finished}");

    let summary: Summary = common::read_summary(&out);
    assert!(summary.complete);
    let total = count + 20_000;
    assert_eq!((summary.events_sent, summary.events_processed, summary.events_lost), (Some(total), total, Some(0)));
    assert_eq!(summary.streams.len(), 2);
    assert_eq!(summary.streams[1].sent, Some(20_000));
    // Stream 0 gives the standalone engine's outputs over its recorded input; stream 1 those
    // of the standalone engine over the replayed file.
    for (input, stream) in [(out.join("input.csv"), "0"), (replay.clone(), "1")] {
        let standalone = dir.path().join(format!("standalone-{stream}.csv"));
        let engine = run(cep().args(["engine", "--input"]).arg(&input).arg("--output").arg(&standalone));
        assert!(engine.status.success(), "{}", String::from_utf8_lossy(&engine.stderr));
        // (rule, symbol, price, value): the standalone engine numbers its own stream 0.
        let expected = sorted_rows(&standalone, 4, Some("0"));
        assert!(!expected.is_empty());
        assert!(sorted_rows(&out.join("outputs.csv"), 4, Some(stream)) == expected, "stream {stream} differs");
    }
}

#[test]
fn a_worker_killed_and_started_again_under_its_id_at_its_address_joins_again_with_the_standalone_outputs() {
    // What a supervisor does (systemd's Restart=, a container's restart policy): the same id,
    // the same port. The router fails the dead one over (its symbols restored on the others),
    // the new process joins as a member of its own, and nothing queued for the dead one
    // reaches it (the router's socket to that address was disconnected, not left to reconnect).
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let control = format!("ipc://{}", dir.path().join("control").display());
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let listen = format!("tcp://127.0.0.1:{port}");
    // Sixteen seconds of stream: the failover must come while it is open, even on a loaded machine.
    let count: u64 = 3_200_000;
    let mut cluster = one_worker_run(count, &control, &out);
    let worker = || {
        let mut command = cep();
        command.args(["worker", "--router", &control, "--id", "phoenix", "--listen", &listen]);
        command
    };
    // A joiner: it registers once the run has started (before, it would take worker-0's place).
    wait_for_status(&control, "the run to start", |s| s.contains("streams ended: 0 of 1"));
    // The first one says when it takes its part of a checkpoint (a debug line).
    let mut first =
        Running(worker().env("RUST_LOG", "warn,cep_core::outbox=debug").stderr(Stdio::piped()).spawn().unwrap());
    let (checkpoints, taken) = mpsc::channel();
    let stderr = BufReader::new(first.0.stderr.take().unwrap());
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if line.contains("checkpoint taken") {
                let _ = checkpoints.send(());
            }
        }
    });
    wait_for_status(&control, "phoenix to join and own symbols", |s| {
        states(s, "phoenix") == ["active"]
            && s.contains("moving: nothing")
            && s.lines().any(|l| l.starts_with("phoenix ") && l.split_whitespace().nth(3).is_some_and(|n| n != "0"))
    });
    // Three checkpoints after its join (a rescale voids the ones before): by the third, the
    // first is confirmed (the collector saves every 100 ms, checkpoints go every second).
    while taken.try_recv().is_ok() {}
    for n in 1..=3 {
        taken.recv_timeout(Duration::from_secs(60)).unwrap_or_else(|_| panic!("checkpoint {n} after the join"));
    }
    common::sigkill(first.0.id() as i32);
    first.0.wait().unwrap();
    wait_for_status(&control, "phoenix to be failed over", |s| states(s, "phoenix") == ["failed"]);
    let mut second = Running(worker().spawn().unwrap());
    wait_for_status(&control, "phoenix to join again", |s| {
        states(s, "phoenix") == ["failed", "active"] && s.contains("moving: nothing")
    });

    let finished = cluster.0.wait().unwrap();
    assert!(finished.success(), "cep run failed: {finished}");
    assert!(second.0.wait().unwrap().success());
    let summary: Summary = common::read_summary(&out);
    assert!(summary.complete, "{summary:#?}");
    assert_eq!((summary.events_sent, summary.events_processed, summary.events_lost), (Some(count), count, Some(0)));
    assert_eq!((summary.duplicates, summary.out_of_order, summary.outputs_lost), (0, 0, 0));
    assert!(summary.errors.is_empty(), "{:?}", summary.errors);
    assert_eq!(summary.failovers.len(), 1, "{:?}", summary.failovers);
    assert!(summary.failovers[0].worker == "phoenix" && summary.failovers[0].recovered, "{:?}", summary.failovers);
    let rescales: Vec<(&str, &str)> = summary.rescales.iter().map(|r| (r.kind.as_str(), r.worker.as_str())).collect();
    assert_eq!(rescales, [("join", "phoenix"), ("join", "phoenix")]);

    assert_standalone_outputs(dir.path(), &out);
}
