//! Failures on real processes: a worker killed with SIGKILL at 200k ticks/s, at several
//! points of the run; the router fails it over (its symbols restored from its last
//! checkpoint on the survivors, its ticks since replayed) and the outputs are the standalone
//! engine's over the recorded input, row for row, with sent = processed.

mod common;

use common::{
    announced, cep, cep_run_recorded, child_pid, sigkill, sorted_rows, standalone_rows, wait_for_summary, Running,
    EPHEMERAL_COLLECTOR, SUMMARY_EVERY,
};

use cep_core::results::Summary;
use std::time::{Duration, Instant};

/// A run of `count` ticks at 200k/s over `workers` workers; `victim` is killed once the run
/// has processed `after_processed` ticks (its rolling summary says so).
fn kill_one_worker(
    count: u64,
    workers: u32,
    victim: &str,
    after_processed: u64,
) -> (Summary, std::path::PathBuf, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let mut cluster = cep_run_recorded(workers, count, &out);
    let deadline = Instant::now() + Duration::from_secs(30);
    let pid = loop {
        let is_victim =
            |args: &[String]| args.iter().any(|a| a == "worker") && args.iter().any(|a| a == &format!("--id={victim}"));
        if let Some(pid) = child_pid(cluster.0.id(), is_victim) {
            break pid;
        }
        assert!(Instant::now() < deadline, "{victim} never started");
        std::thread::sleep(Duration::from_millis(20));
    };
    let reached = |s: &Summary| s.events_processed >= after_processed;
    wait_for_summary(&out, &format!("{after_processed} ticks processed"), Duration::from_secs(60), reached);
    sigkill(pid);
    let finished = cluster.0.wait().unwrap();
    assert!(finished.success(), "cep run failed: {finished}");
    let summary: Summary = common::read_summary(&out);
    (summary, out, dir)
}

#[test]
fn a_worker_killed_under_load_fails_over_with_the_standalone_outputs() {
    // Early (before or at the first checkpoints, 1 s apart); between two checkpoints; and
    // once the 10-second windows are full (two workers: each snapshot takes many control
    // frames). Points in ticks processed, at 200k ticks/s.
    let cases = [
        (1_200_000, 3, "worker-1", 100_000),
        (1_200_000, 3, "worker-2", 500_000),
        (2_800_000, 2, "worker-0", 2_200_000),
    ];
    for (count, workers, victim, after) in cases {
        let (summary, out, _dir) = kill_one_worker(count, workers, victim, after);
        assert!(summary.complete, "{victim}: {summary:#?}");
        assert_eq!((summary.events_sent, summary.events_processed, summary.events_lost), (Some(count), count, Some(0)));
        assert_eq!((summary.duplicates, summary.out_of_order, summary.outputs_lost), (0, 0, 0));
        assert!(summary.errors.is_empty() && summary.failure.is_none(), "{:?} {:?}", summary.errors, summary.failure);
        assert_eq!(summary.failovers.len(), 1, "{:?}", summary.failovers);
        let failover = &summary.failovers[0];
        assert_eq!(failover.worker, victim);
        assert!(failover.recovered && failover.state_lost.is_empty() && failover.symbols > 0, "{failover:?}");
        assert!(failover.reason.contains("taken for dead"), "{}", failover.reason);
        assert!(summary.workers.iter().any(|w| w.id == victim && w.failed));

        let (expected, got) = (standalone_rows(&out), sorted_rows(&out.join("outputs.csv")));
        assert_eq!(got.len(), expected.len(), "{victim}: rows");
        assert!(got == expected, "{victim}: the cluster's outputs differ from the standalone engine's");
    }
}

#[test]
fn a_killed_router_ends_every_other_role_with_the_cause_in_the_summary() {
    let dir = tempfile::tempdir().unwrap();
    let announce = dir.path().join("router.endpoints");
    let out = dir.path().join("run");
    let mut router = Running(
        cep()
            .args(["router", "--workers", "2", "--listen", "tcp://127.0.0.1:*", "--control", "tcp://127.0.0.1:*"])
            .arg("--announce")
            .arg(&announce)
            .spawn()
            .unwrap(),
    );
    let (data, control) = announced(&announce);
    let mut others = vec![(
        "collector",
        Running(
            cep()
                .args(["collector", "--router", &control, "--summary-every", SUMMARY_EVERY])
                .args(EPHEMERAL_COLLECTOR)
                .arg("--out")
                .arg(&out)
                .spawn()
                .unwrap(),
        ),
    )];
    for id in ["w0", "w1"] {
        let worker = cep().args(["worker", "--router", &control, "--id", id, "--listen", "tcp://127.0.0.1:*"]).spawn();
        others.push(("worker", Running(worker.unwrap())));
    }
    // Runs until stopped: the router's death is what ends it.
    let injector = cep().args(["injector", "--router", &control, "--router-data", &data, "--rate", "200000"]).spawn();
    others.push(("injector", Running(injector.unwrap())));
    // Killed once the run has processed a second's worth of ticks.
    wait_for_summary(&out, "200,000 ticks processed", Duration::from_secs(60), |s| s.events_processed >= 200_000);
    router.0.kill().unwrap();
    let killed = Instant::now();
    for (role, process) in &mut others {
        // Noticed within the failure time-out (2 s); a generous bound for a loaded machine.
        let status = loop {
            if let Some(status) = process.0.try_wait().unwrap() {
                break status;
            }
            assert!(killed.elapsed() < Duration::from_secs(30), "the {role} did not stop after the router died");
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(!status.success(), "the {role} exited 0 after the router died");
    }
    let summary: Summary = common::read_summary(&out);
    assert!(!summary.complete && !summary.running);
    let failure = summary.failure.expect("the cause is in the summary");
    assert!(failure.contains(&control) && failure.contains("taken for dead"), "{failure}");
    assert!(summary.events_processed > 0);
}

/// The checkpoint store keeps what a restore may read, no more: runs with a checkpoint every
/// 100 ms (dozens of them on an idle machine) leave in the results folder their run's folder
/// only (the next run into the folder removes the one before, and nothing else), holding the
/// last checkpoints only, each part whole (none half-written).
#[test]
fn the_checkpoint_store_keeps_the_retained_checkpoints_only() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    // A folder of the user's in there stays.
    std::fs::create_dir_all(out.join("checkpoints/mine")).unwrap();
    std::fs::write(out.join("checkpoints/mine/notes.txt"), "mine").unwrap();
    let mut runs = Vec::new();
    for _ in 0..2 {
        let status = cep()
            .env("CEP_CHECKPOINT_EVERY", "100ms")
            .args(["run", "--workers", "2", "--rate", "200000", "--count", "1600000", "--csv", "none", "--quiet"])
            .arg("--out")
            .arg(&out)
            .status()
            .unwrap();
        assert!(status.success(), "cep run failed: {status}");
        let summary = common::read_summary(&out);
        assert!(summary.complete && summary.errors.is_empty(), "{:?}", summary.errors);
        let names = |dir: &std::path::Path| -> Vec<String> {
            let mut names: Vec<String> = std::fs::read_dir(dir)
                .unwrap()
                .map(|entry| entry.unwrap().file_name().into_string().unwrap())
                .collect();
            names.sort();
            names
        };
        let mut folders = names(&out.join("checkpoints"));
        assert_eq!(folders.remove(0), "mine");
        assert_eq!(std::fs::read_to_string(out.join("checkpoints/mine/notes.txt")).unwrap(), "mine");
        assert_eq!(folders.len(), 1, "one run's folder: {folders:?}");
        assert!(folders[0].starts_with("run-") && !runs.contains(&folders[0]), "{folders:?} after {runs:?}");
        runs.push(folders[0].clone());
        let run = out.join("checkpoints").join(&folders[0]);
        let mut ids: Vec<u64> =
            names(&run).iter().map(|name| name.strip_prefix("chk-").unwrap().parse().unwrap()).collect();
        ids.sort();
        // 8 s at one every 100 ms: dozens taken on an idle machine, fewer on a loaded one
        // (a round lasts until every part is stored). Kept: at most a chain (16 snapshots),
        // the unconfirmed ones (8) and the one in flight, none further below the last.
        let (first, last) = (ids[0], *ids.last().unwrap());
        assert!(ids.len() <= 25 && first + 25 > last, "kept {ids:?}");
        for id in ids {
            for part in names(&run.join(format!("chk-{id}"))) {
                let (worker, number) = part.strip_prefix("worker-").unwrap().split_once("-part-").unwrap();
                assert!(["0", "1"].contains(&worker) && number.parse::<u32>().is_ok(), "chk-{id}/{part}");
            }
        }
    }
}
