//! Live rescaling in one process: workers join and leave while ticks flow, and the outputs
//! are the engine's alone over the same input, with faults on the links during the moves.

mod common;

use cep_core::outbox::Event;
use cep_testkit::{Action, ClusterSpec, Fault, LinkKind, LocalCluster, Member, Outcome};
use common::{assert_same_rows, assert_whole, reference_rows};
use std::time::Duration;

const COUNT: u64 = 60_000;

fn spec() -> ClusterSpec {
    ClusterSpec { workers: 1, count: COUNT, ..ClusterSpec::default() }
}

/// 1 worker, then 2 and 3 (two joins), then 2 (worker 0 leaves), while ticks flow.
fn grow_and_shrink(faults: Vec<Fault>) -> Outcome {
    let mut cluster = LocalCluster::new(spec(), faults);
    assert!(cluster.run_until(|c| c.sent_so_far() >= COUNT / 6));
    assert_eq!(cluster.join(), Member::Worker(1));
    assert!(cluster.run_until(|c| c.sent_so_far() >= COUNT * 2 / 6));
    assert_eq!(cluster.join(), Member::Worker(2));
    assert!(cluster.run_until(|c| c.sent_so_far() >= COUNT * 4 / 6));
    cluster.leave(0);
    assert!(cluster.run_until(|c| c.sent_so_far() >= COUNT * 5 / 6 && !c.rescaling()));
    assert!(!cluster.is_running(0), "worker 0 left once its symbols moved");
    cluster.run()
}

fn rescale_events(outcome: &Outcome) -> Vec<(&'static str, String, u64)> {
    outcome
        .events
        .iter()
        .filter_map(|(_, event)| match event {
            Event::RescaleFinished { kind, worker, symbols, .. } => Some((*kind, worker.clone(), *symbols)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_cluster_that_grows_and_shrinks_gives_the_outputs_of_one_engine() {
    let outcome = grow_and_shrink(vec![]);
    assert_whole(&outcome, COUNT);
    assert_eq!(outcome.output_rows(), reference_rows(&outcome.sent));
    let kinds: Vec<(&str, String)> =
        rescale_events(&outcome).into_iter().map(|(kind, worker, _)| (kind, worker)).collect();
    let expected = [("join", "worker-1"), ("join", "worker-2"), ("leave", "worker-0")].map(|(k, w)| (k, w.to_string()));
    assert_eq!(kinds, expected);
    // Every symbol moved once per rescale that gave it another owner; all of worker 0's left.
    let rescales = &outcome.summary.rescales;
    assert_eq!(rescales.len(), 3);
    for rescale in rescales {
        assert!(rescale.finished && rescale.symbols > 0 && rescale.state_bytes > 0, "{rescale:?}");
        assert_eq!(rescale.slices as u64, rescale.symbols.div_ceil(spec().move_slice as u64), "{rescale:?}");
        assert!(rescale.max_moved_latency_us.is_some(), "{rescale:?}");
    }
    let left = outcome.worker_reports.iter().find(|r| r.id == "worker-0").unwrap();
    assert_eq!(left.symbols, 0, "worker 0 kept nothing");
    // Each worker's share of the processing adds up to what was sent.
    let processed: u64 = outcome.worker_reports.iter().map(|r| r.processed).sum();
    assert_eq!(processed, COUNT);
    assert!(outcome.worker_reports.iter().all(|r| r.processed > 0), "every worker took a share");
}

#[test]
fn faults_on_the_links_during_the_moves_change_nothing_but_time_and_counted_duplicates() {
    let delay = Action::Delay(2_000_000);
    let faults = vec![
        Fault::on(LinkKind::Control, delay).probability(0.5),
        Fault::on(LinkKind::RouterToWorker, delay).probability(0.2),
        Fault::on(LinkKind::InjectorToRouter, delay).probability(0.2),
        Fault::on(LinkKind::WorkerToCollector, Action::Duplicate).probability(0.02),
        Fault::on(LinkKind::RouterToWorker, Action::Duplicate).kind(cep_core::wire::FrameKind::Ticks).probability(0.02),
        Fault::on(LinkKind::InjectorToRouter, Action::Duplicate).probability(0.02),
    ];
    let outcome = grow_and_shrink(faults);
    let summary = &outcome.summary;
    assert!(summary.complete, "{summary:#?}");
    assert_eq!((summary.events_sent, summary.events_processed, summary.events_lost), (Some(COUNT), COUNT, Some(0)));
    assert!(summary.duplicates > 0, "duplicated ticks are counted");
    assert_eq!(summary.outputs_lost, 0);
    for link in [LinkKind::Control, LinkKind::RouterToWorker, LinkKind::WorkerToCollector] {
        let stats = &outcome.links[&link];
        assert!(stats.delayed + stats.duplicated > 0, "{link:?}: {stats:?}");
    }
    // Duplicated output frames write their rows again; without them, the engine's rows.
    let mut rows = outcome.output_rows();
    rows.dedup();
    assert_same_rows(rows, reference_rows(&outcome.sent), "after the moves");
    assert_eq!(rescale_events(&outcome).len(), 3);
}

#[test]
fn a_join_a_duplicate_id_and_a_bad_leave_are_answered_clearly() {
    let mut cluster = LocalCluster::new(ClusterSpec { workers: 2, ..spec() }, vec![]);
    assert!(cluster.run_until(|c| c.sent_so_far() >= COUNT / 4));
    // The last worker cannot leave; a second leave of one leaving is refused.
    cluster.remove(1);
    cluster.remove(1);
    assert!(cluster.run_until(|c| !c.is_running(1)));
    cluster.remove(0);
    cluster.pause(Member::Worker(0), Duration::from_millis(1));
    let outcome = cluster.run();
    assert_whole(&outcome, COUNT);
    assert_eq!(outcome.output_rows(), reference_rows(&outcome.sent));
    let reasons: Vec<&str> = outcome.refusals.iter().map(|(_, reason)| reason.as_str()).collect();
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert!(reasons[0].contains("already leaving"), "{reasons:?}");
    assert!(reasons[1].contains("last one"), "{reasons:?}");
}

#[test]
fn a_worker_that_dies_during_a_move_gives_a_clear_error_naming_the_lost_state_never_a_hang() {
    let mut cluster = LocalCluster::new(ClusterSpec { workers: 2, ..spec() }, vec![]);
    assert!(cluster.run_until(|c| c.sent_so_far() >= COUNT / 3));
    cluster.join();
    assert!(cluster.run_until(|c| c.rescaling()));
    cluster.kill(Member::Worker(0));
    let outcome = cluster.run();
    let summary = &outcome.summary;
    // Worker 0 never reports: the run is incomplete, and what it took with it is counted.
    assert!(!summary.complete);
    let lost = summary.events_lost.unwrap();
    assert!(lost > 0);
    assert_eq!(summary.events_processed + lost, COUNT);
    let rescale = &summary.rescales[0];
    assert!(!rescale.finished && !rescale.state_lost.is_empty(), "{rescale:?}");
    let reason = outcome
        .events
        .iter()
        .find_map(|(_, event)| match event {
            Event::RescaleAbandoned { reason, .. } => Some(reason.clone()),
            _ => None,
        })
        .expect("the router says it gave the move up");
    assert!(reason.starts_with("worker-0 did not hand off the state of"), "{reason}");
    assert!(reason.contains(&rescale.state_lost[0]), "{reason}");
    // Noticed dead, its own symbols went to the others; with a move in progress its state
    // could not be restored exactly, and the summary says so.
    let failover = summary.failovers.iter().find(|f| f.worker == "worker-0").expect("worker-0 failed over");
    assert!(!failover.recovered && !failover.state_lost.is_empty(), "{failover:?}");
    assert!(summary.failure.as_deref().is_some_and(|f| f.contains("worker-0")), "{:?}", summary.failure);
}
