//! The cluster under faults, in one process: each fault on each kind of link, a worker killed
//! or paused mid-stream, and seeded random faults that replay exactly. Every test checks the
//! accounting against today's contracts: nothing lost silently, duplicates counted, per-key
//! order checked; where the product cannot survive a fault yet (a killed worker), the test
//! checks the clear failure it reports.

mod common;

use cep_core::outbox::Event;
use cep_core::wire::FrameKind;
use cep_testkit::{Action, ClusterSpec, Fault, LinkKind, LocalCluster, Member, Outcome};
use common::reference_rows;
use std::time::Duration;

const DATA_LINKS: [LinkKind; 4] =
    [LinkKind::InjectorToRouter, LinkKind::RouterToWorker, LinkKind::WorkerToCollector, LinkKind::RouterToCollector];

fn run(faults: Vec<Fault>) -> Outcome {
    LocalCluster::new(ClusterSpec::default(), faults).run()
}

/// A run of 400 ms: a worker silenced for 150-200 ms mid-run wakes while it goes on.
fn slow_spec() -> ClusterSpec {
    ClusterSpec { rate: 50_000.0, ..ClusterSpec::default() }
}

fn assert_whole(outcome: &Outcome) {
    common::assert_whole(outcome, ClusterSpec::default().count);
}

#[test]
fn an_undisturbed_cluster_gives_the_engines_outputs() {
    let outcome = run(vec![]);
    assert_whole(&outcome);
    assert_eq!(outcome.output_rows(), reference_rows(&outcome.sent));
    assert!(outcome.links.values().all(|link| link.dropped + link.duplicated + link.delayed == 0));
    // What the router's driver would log: every stream ended, all of it received.
    let ended: Vec<&Event> =
        outcome.events.iter().filter(|(member, _)| *member == Member::Router).map(|(_, e)| e).collect();
    let registered = ended.iter().filter(|e| matches!(e, Event::Registered { .. })).count();
    assert_eq!(registered, ClusterSpec::default().workers + 2, "the workers, the collector, the injector");
    for stream in 0..ClusterSpec::default().streams {
        let sent = ClusterSpec::default().count / 2;
        assert!(ended.contains(&&Event::StreamEnded { stream, sent, received: sent }), "{ended:?}");
    }
}

#[test]
fn a_delay_under_the_failure_timeout_on_any_link_changes_nothing_but_time() {
    // 200 ms late, within a failure time-out of 1 s: slow, not dead.
    let spec = ClusterSpec { failure_timeout_ns: 1_000_000_000, ..ClusterSpec::default() };
    for link in DATA_LINKS.into_iter().chain([LinkKind::Control]) {
        let outcome = LocalCluster::new(spec.clone(), vec![Fault::on(link, Action::Delay(200_000_000)).nth(0)]).run();
        // The n-th frame of each link of that kind: one per stream, worker or client.
        assert!(outcome.links[&link].delayed >= 1, "{link:?}");
        assert_whole(&outcome);
        assert!(outcome.summary.failovers.is_empty() && outcome.fenced.is_empty(), "{link:?}");
        assert_eq!(outcome.output_rows(), reference_rows(&outcome.sent), "{link:?}");
    }
}

#[test]
fn a_worker_whose_control_link_is_late_beyond_the_failure_timeout_is_fenced_and_changes_no_output() {
    // Its heartbeats wait behind the late frame: to the router it is silent, so it is failed
    // over; the late frames arrive after that, are refused, and it learns it was fenced.
    let fault = Fault::on(LinkKind::Control, Action::Delay(200_000_000)).only(1).kind(FrameKind::Heartbeat).nth(2);
    let outcome = LocalCluster::new(slow_spec(), vec![fault]).run();
    let failovers = &outcome.summary.failovers;
    assert_eq!(failovers.len(), 1, "{failovers:?}");
    assert_eq!(failovers[0].worker, "worker-1");
    assert!(failovers[0].reason.contains("nothing heard from it"), "{}", failovers[0].reason);
    assert_eq!(outcome.fenced, vec![1]);
    assert_eq!(outcome.output_rows(), reference_rows(&outcome.sent));
}

#[test]
fn a_tick_batch_lost_before_the_router_is_counted_there() {
    let outcome = run(vec![Fault::on(LinkKind::InjectorToRouter, Action::Drop).only(0).kind(FrameKind::Ticks).nth(3)]);
    let summary = &outcome.summary;
    let batch = ClusterSpec::default().batch as u64;
    assert!(summary.complete, "every report arrived");
    assert_eq!(summary.events_lost, Some(batch));
    assert_eq!(summary.lost_by_cause.get("not_received_by_router"), Some(&batch));
    assert_eq!(summary.events_processed + batch, ClusterSpec::default().count);
}

#[test]
fn a_tick_batch_lost_after_the_router_is_counted_at_the_worker() {
    let outcome = run(vec![Fault::on(LinkKind::RouterToWorker, Action::Drop).only(1).kind(FrameKind::Ticks).nth(2)]);
    let summary = &outcome.summary;
    let lost = ClusterSpec::default().count - summary.events_processed;
    assert!(lost > 0);
    assert_eq!(summary.events_lost, Some(lost));
    assert_eq!(summary.lost_by_cause.get("not_processed_by_worker"), Some(&lost));
    let worker = &outcome.worker_reports.iter().find(|r| r.id == "worker-1").unwrap().streams;
    let routed: u64 = worker.iter().map(|s| s.routed.unwrap()).sum();
    let processed: u64 = worker.iter().map(|s| s.processed).sum();
    assert_eq!(routed - processed, lost, "the router's count says what the worker missed");
}

#[test]
fn an_output_batch_lost_is_counted_as_outputs_lost() {
    let outcome = run(vec![Fault::on(LinkKind::WorkerToCollector, Action::Drop).kind(FrameKind::Outputs).nth(4)]);
    let summary = &outcome.summary;
    assert_eq!(summary.events_lost, Some(0));
    assert!(summary.outputs_lost > 0);
    let reference = reference_rows(&outcome.sent);
    assert_eq!(reference.len() - outcome.output_rows().len(), summary.outputs_lost as usize);
}

#[test]
fn a_lost_router_report_leaves_the_run_incomplete_after_the_idle_time_out() {
    let outcome = run(vec![Fault::on(LinkKind::RouterToCollector, Action::Drop).kind(FrameKind::RouterReport).nth(0)]);
    let summary = &outcome.summary;
    assert!(!summary.complete);
    assert!(summary.streams.iter().all(|stream| stream.received_by_router.is_none()), "{:?}", summary.streams);
    assert_eq!(summary.events_processed, ClusterSpec::default().count, "the workers still processed everything");
    assert!(outcome.elapsed_ns >= ClusterSpec::default().idle_timeout_ns);
}

#[test]
fn duplicated_ticks_are_counted_and_processed_once() {
    for link in [LinkKind::InjectorToRouter, LinkKind::RouterToWorker] {
        let outcome = run(vec![Fault::on(link, Action::Duplicate).kind(FrameKind::Ticks).only(0).nth(2)]);
        let summary = &outcome.summary;
        assert_eq!(outcome.links[&link].duplicated, 1, "{link:?}");
        assert!(summary.duplicates > 0, "{link:?}");
        assert_eq!(summary.events_processed, ClusterSpec::default().count, "{link:?}");
        assert_eq!(summary.events_lost, Some(0), "{link:?}");
        assert_eq!(outcome.output_rows(), reference_rows(&outcome.sent), "{link:?}: processed once");
    }
}

#[test]
fn duplicated_outputs_are_counted_and_reports_taken_once() {
    let outcome = run(vec![
        Fault::on(LinkKind::WorkerToCollector, Action::Duplicate).kind(FrameKind::Outputs).nth(3),
        Fault::on(LinkKind::RouterToCollector, Action::Duplicate).kind(FrameKind::RouterReport).nth(0),
    ]);
    let summary = &outcome.summary;
    assert!(summary.duplicates > 0);
    assert_eq!((summary.events_lost, summary.outputs_lost), (Some(0), 0));
    let rows = outcome.output_rows();
    let mut distinct = rows.clone();
    distinct.dedup();
    assert_eq!(rows.len() - distinct.len(), summary.duplicates as usize, "each duplicate written once more");
    assert_eq!(distinct, reference_rows(&outcome.sent));
}

#[test]
fn reordered_tick_batches_are_counted_as_out_of_order_skipped_and_accounted_as_lost() {
    // Per-key order is the contract: a tick behind its symbol's latest cannot be processed
    // without changing the outputs, so the worker skips it and counts it; the collector then
    // finds it missing at the worker.
    for link in [LinkKind::InjectorToRouter, LinkKind::RouterToWorker] {
        let outcome = run(vec![Fault::on(link, Action::Reorder).kind(FrameKind::Ticks).only(0).nth(1)]);
        let summary = &outcome.summary;
        assert_eq!(outcome.links[&link].reordered, 1, "{link:?}");
        assert!(summary.out_of_order > 0, "{link:?}: {summary:#?}");
        let lost = summary.events_lost.unwrap();
        assert_eq!(summary.events_processed + lost, ClusterSpec::default().count, "{link:?}");
        assert_eq!(lost, summary.out_of_order + summary.duplicates, "{link:?}: every skipped tick is counted");
        assert_eq!(summary.lost_by_cause.get("not_processed_by_worker"), Some(&lost), "{link:?}");
    }
}

#[test]
fn reordered_frames_towards_the_collector_change_nothing() {
    // Not within a worker's link: that is one ZeroMQ connection, first in, first out, and the
    // collector, which keeps one sequence number per worker and symbol (not a bit per event),
    // takes an output behind its symbol's latest from that worker for a duplicate.
    let faults = [Fault::on(LinkKind::RouterToCollector, Action::Reorder).nth(0)];
    for fault in faults {
        let link = fault.link;
        let outcome = run(vec![fault]);
        assert!(outcome.links[&link].reordered >= 1, "{link:?}");
        assert_whole(&outcome);
        assert_eq!(outcome.output_rows(), reference_rows(&outcome.sent), "{link:?}");
    }
}

#[test]
fn a_worker_killed_at_any_point_fails_over_with_the_outputs_of_an_undisturbed_run() {
    // Twelve kill points across the run (ticks the victim had processed), each with its own
    // seed and victim: before the first checkpoint, between checkpoints, near the end.
    // Long enough that the victim dies before the input ends (then no stream has closed).
    const COUNT: u64 = 60_000;
    let points = [1, 150, 700, 1_100, 1_500, 2_000, 2_600, 3_100, 3_500, 3_900, 4_400, 4_800];
    let mut checkpoints = std::collections::BTreeSet::new();
    for (i, kill_at) in points.into_iter().enumerate() {
        // Every other run has enough symbols that a snapshot takes several parts.
        let symbols = if i % 2 == 0 { 64 } else { 400 };
        let spec = ClusterSpec { seed: 100 + i as u64, count: COUNT, symbols, ..ClusterSpec::default() };
        let victim = i % spec.workers;
        let mut cluster = LocalCluster::new(spec, vec![]);
        assert!(cluster.run_until(|c| c.processed_by(victim) >= kill_at), "point {i}: worker-{victim} got there");
        cluster.kill(Member::Worker(victim));
        let outcome = cluster.run();
        common::assert_whole(&outcome, COUNT);
        common::assert_same_rows(outcome.output_rows(), reference_rows(&outcome.sent), &format!("point {i}"));
        let failover = &outcome.summary.failovers;
        assert_eq!(failover.len(), 1, "point {i}");
        assert!(failover[0].recovered && failover[0].state_lost.is_empty(), "point {i}: {failover:?}");
        checkpoints.insert(failover[0].checkpoint);
        assert_eq!(outcome.worker_reports.len(), 2, "point {i}: the survivors reported");
        assert!(outcome.summary.workers.iter().any(|w| w.failed && w.id == format!("worker-{victim}")));
    }
    assert!(checkpoints.len() >= 3, "restored from several checkpoints, the start included: {checkpoints:?}");
}

#[test]
fn without_checkpoints_a_killed_workers_symbols_go_on_empty_and_the_run_says_what_it_lost() {
    let spec = ClusterSpec { checkpoint_every_ns: 0, count: 60_000, ..ClusterSpec::default() };
    let mut cluster = LocalCluster::new(spec, vec![]);
    assert!(cluster.run_until(|c| c.processed_by(1) >= 2_000), "worker-1 reached 2,000 ticks");
    cluster.kill(Member::Worker(1));
    let outcome = cluster.run();
    let summary = &outcome.summary;
    assert!(!summary.complete);
    assert!(summary.failure.as_deref().is_some_and(|f| f.contains("could not be restored")), "{:?}", summary.failure);
    let failover = &summary.failovers[0];
    assert!(!failover.recovered && failover.state_lost.len() as u64 == failover.symbols && failover.symbols > 0);
    assert!(outcome.links[&LinkKind::RouterToWorker].to_the_dead > 0);
    assert_eq!(outcome.worker_reports.len(), 2, "the survivors reported");
    // Every tick was sent, and the run ended without waiting for the dead worker; what the
    // dead worker processed is known only from its progress: the rest is counted as lost.
    assert_eq!(summary.events_sent, Some(60_000));
    assert!(outcome.elapsed_ns < ClusterSpec::default().idle_timeout_ns);
    let lost = summary.events_lost.unwrap();
    assert_eq!(lost, summary.lost_by_cause.values().sum::<u64>());
    assert_eq!(summary.events_processed + lost, 60_000);
}

#[test]
fn a_worker_paused_within_the_failure_timeout_catches_up_with_nothing_lost() {
    let mut cluster = LocalCluster::new(ClusterSpec::default(), vec![]);
    assert!(cluster.run_until(|c| c.processed_by(0) >= 1_000));
    let paused_at = cluster.now();
    let pause = ClusterSpec::default().failure_timeout_ns * 4 / 5;
    cluster.pause(Member::Worker(0), Duration::from_nanos(pause));
    assert!(cluster.run_until(|c| c.now() >= paused_at + pause / 2));
    let processed_while_paused = cluster.processed_by(0);
    assert!(cluster.run_until(|c| c.now() >= paused_at + pause - 1_000_000));
    assert_eq!(cluster.processed_by(0), processed_while_paused, "nothing is handled during the pause");
    let outcome = cluster.run();
    assert!(outcome.summary.failovers.is_empty() && outcome.fenced.is_empty());
    assert_whole(&outcome);
    assert_eq!(outcome.output_rows(), reference_rows(&outcome.sent));
}

#[test]
fn a_worker_paused_beyond_the_failure_timeout_is_failed_over_then_fenced_when_it_wakes() {
    let mut cluster = LocalCluster::new(slow_spec(), vec![]);
    let began = cluster.now();
    assert!(cluster.run_until(|c| c.processed_by(0) >= 1_000));
    let paused_at = cluster.now();
    cluster.pause(Member::Worker(0), Duration::from_millis(150));
    let outcome = cluster.run();
    let failovers = &outcome.summary.failovers;
    assert_eq!(failovers.len(), 1, "{failovers:?}");
    assert_eq!(failovers[0].worker, "worker-0");
    assert!(failovers[0].recovered, "{:?}", failovers[0]);
    // Noticed within the failure time-out, plus the heartbeat period and one look of the router.
    let noticed_ns = began + (failovers[0].at_s * 1e9) as u64 - paused_at;
    assert!(noticed_ns <= ClusterSpec::default().failure_timeout_ns * 3 / 2, "{noticed_ns}");
    assert_eq!(outcome.fenced, vec![0], "it woke, was told, and exited");
    assert_eq!(outcome.output_rows(), reference_rows(&outcome.sent), "its symbols went on elsewhere, nothing twice");
}

#[test]
fn an_injector_paused_beyond_the_failure_timeout_has_its_streams_ended_and_is_fenced_when_it_wakes() {
    for wakes in [false, true] {
        let mut cluster = LocalCluster::new(slow_spec(), vec![]);
        assert!(cluster.run_until(|c| c.sent_so_far() >= 5_000));
        cluster.pause(Member::Injector(0), Duration::from_secs(3_600));
        if wakes {
            // SIGCONT once the router has ended its streams without it, with the run still
            // going (the collector stalls a moment: the run would be over at once otherwise).
            assert!(cluster.run_until(LocalCluster::all_streams_ended));
            cluster.pause(Member::Collector, Duration::from_millis(20));
            cluster.wake(Member::Injector(0));
        }
        let outcome = cluster.run();
        let summary = &outcome.summary;
        // The run ends without it, says why and what it does not know, and its accounts agree.
        assert!(!summary.complete);
        let failure = summary.failure.as_deref().unwrap_or_default();
        assert!(
            failure.starts_with("the injector of stream 0 was taken for dead: nothing heard from it for"),
            "{failure}"
        );
        assert!(
            failure.ends_with("stream(s) 0, 1 ended where the router had them: what their injector sent is unknown")
        );
        assert_eq!((summary.events_sent, summary.events_lost), (None, None));
        assert!(summary.streams.iter().all(|stream| stream.sent.is_none() && stream.received_by_router.is_some()));
        assert!(summary.broken_identities().is_empty(), "{:?}", summary.broken_identities());
        let router = outcome.router_report.as_ref().expect("the router reported");
        assert_eq!(router.lost_streams.keys().copied().collect::<Vec<_>>(), [0, 1]);
        // Everything of it that reached the router before its streams ended was processed and
        // gave the engine's outputs; what it sent on waking, before it was told, was refused
        // (after the router's report: counted in its log and metrics only).
        let received: u64 = router.received.values().sum();
        assert_eq!(summary.events_processed, received);
        let accepted: Vec<_> =
            outcome.sent.iter().filter(|tick| tick.seq < router.received[&tick.stream]).cloned().collect();
        assert_eq!(accepted.len() as u64, received);
        assert_eq!(outcome.output_rows(), reference_rows(&accepted));
        match wakes {
            false => assert_eq!(outcome.injector_fenced, None),
            true => {
                let told = outcome.injector_fenced.as_deref().unwrap_or_default();
                assert!(told.starts_with("the injector of stream 0 was taken for dead"), "{told}");
            }
        }
    }
}

fn random_faults(seed: u64) -> Outcome {
    let spec = ClusterSpec { seed, count: 10_000, ..ClusterSpec::default() };
    let faults = vec![
        Fault::on(LinkKind::RouterToWorker, Action::Drop).kind(FrameKind::Ticks).probability(0.02),
        Fault::on(LinkKind::InjectorToRouter, Action::Duplicate).kind(FrameKind::Ticks).probability(0.02),
        Fault::on(LinkKind::WorkerToCollector, Action::Delay(5_000_000)).probability(0.05),
        Fault::on(LinkKind::WorkerToCollector, Action::Reorder).kind(FrameKind::Outputs).probability(0.05),
    ];
    LocalCluster::new(spec, faults).run()
}

#[test]
fn seeded_random_faults_replay_exactly_and_balance() {
    let (first, again, other) = (random_faults(7), random_faults(7), random_faults(8));
    assert_eq!(format!("{:?}", first.summary), format!("{:?}", again.summary));
    assert_eq!(first.outputs_csv, again.outputs_csv);
    assert_eq!(first.links, again.links);
    assert_ne!(first.links, other.links, "another seed, other faults");
    for outcome in [&first, &other] {
        let summary = &outcome.summary;
        let lost = summary.events_lost.expect("every report arrived");
        assert_eq!(summary.events_processed + lost, 10_000, "every tick processed or counted as lost");
        assert_eq!(Some(&lost), summary.lost_by_cause.get("not_processed_by_worker").or(Some(&0)));
        assert!(summary.duplicates > 0 || outcome.links[&LinkKind::InjectorToRouter].duplicated == 0);
    }
}

#[test]
fn outputs_that_overtake_their_rules_are_rejected_and_counted() {
    // A worker announces its rules before its first output; links are first in, first out.
    // If that order broke, the outputs could not be named: each is rejected and counted.
    let outcome = run(vec![Fault::on(LinkKind::WorkerToCollector, Action::Reorder).kind(FrameKind::Rules).nth(0)]);
    let summary = &outcome.summary;
    let unknown = summary.rejected["collector"]["unknown_rule"];
    assert!(unknown > 0);
    assert_eq!(summary.outputs_lost, unknown, "nothing lost silently");
    assert_eq!(summary.events_lost, Some(0));
}

#[test]
fn a_worker_that_dies_during_its_snapshot_fails_over_from_the_one_before() {
    // The snapshot is taken, but the worker dies before it reaches the router (its control
    // link drops it): the router restores the previous confirmed checkpoint and replays more.
    let spec = ClusterSpec { count: 60_000, ..ClusterSpec::default() };
    let faults = vec![Fault::on(LinkKind::Control, Action::Drop).kind(FrameKind::Snapshot).only(2).nth(1)];
    let mut cluster = LocalCluster::new(spec, faults);
    assert!(cluster.run_until(|c| c.link_stats(LinkKind::Control).dropped > 0), "the snapshot was lost");
    cluster.kill(Member::Worker(2));
    let outcome = cluster.run();
    common::assert_whole(&outcome, 60_000);
    assert_eq!(outcome.output_rows(), reference_rows(&outcome.sent));
    assert!(outcome.summary.failovers[0].recovered);
}

#[test]
fn a_second_worker_that_dies_during_a_failover_says_what_it_lost() {
    let spec = ClusterSpec { count: 60_000, ..ClusterSpec::default() };
    let mut cluster = LocalCluster::new(spec, vec![]);
    assert!(cluster.run_until(|c| c.processed_by(0) >= 3_000));
    cluster.kill(Member::Worker(0));
    // worker-1 dies right after the router noticed worker-0's death and restored its symbols
    // (on worker-1 too), before the next checkpoint could cover them.
    let noticed = cluster.now() + ClusterSpec::default().failure_timeout_ns + 1_000;
    assert!(cluster.run_until(|c| c.now() >= noticed));
    cluster.kill(Member::Worker(1));
    let outcome = cluster.run();
    let summary = &outcome.summary;
    let failovers: Vec<(&str, bool)> = summary.failovers.iter().map(|f| (f.worker.as_str(), f.recovered)).collect();
    assert_eq!(failovers, [("worker-0", true), ("worker-1", false)]);
    assert!(!summary.complete && summary.failure.as_deref().is_some_and(|f| f.contains("worker-1")));
    assert!(summary.failovers[1].state_lost.len() as u64 == summary.failovers[1].symbols);
    // Never a hang: the run ended, every tick sent is processed or counted as lost.
    let lost = summary.events_lost.unwrap();
    assert_eq!(summary.events_processed + lost, 60_000);
    assert_eq!(lost, summary.lost_by_cause.values().sum::<u64>());
}

#[test]
fn a_collector_that_dies_during_a_replay_resumes_with_the_outputs_of_an_undisturbed_run() {
    // A worker dies; the collector dies at points of the failover (as the router notices,
    // while the replayed ticks and their outputs are on their way, and after), stays down
    // 40 ms and is started again: it resumes from its last save, the senders send again what
    // it had not saved, and outputs.csv is the engine's, each row once.
    const COUNT: u64 = 60_000;
    let latency = ClusterSpec::default().link_latency_ns;
    let points = [0, latency + latency / 4, 2 * latency + latency / 4, 3_000_000];
    for (i, after_noticed) in points.into_iter().enumerate() {
        let spec = ClusterSpec { seed: 300 + i as u64, count: COUNT, sequenced: true, ..ClusterSpec::default() };
        let victim = i % spec.workers;
        let mut cluster = LocalCluster::new(spec.clone(), vec![]);
        assert!(cluster.run_until(|c| c.processed_by(victim) >= 1_500), "point {i}");
        cluster.kill(Member::Worker(victim));
        let kill_at = cluster.now() + spec.failure_timeout_ns + after_noticed;
        assert!(cluster.run_until(|c| c.now() >= kill_at), "point {i}");
        cluster.kill(Member::Collector);
        let back = cluster.now() + 40_000_000;
        assert!(cluster.run_until(|c| c.now() >= back), "point {i}");
        cluster.restart_collector();
        let outcome = cluster.run();
        common::assert_whole(&outcome, COUNT);
        common::assert_same_rows(outcome.output_rows(), reference_rows(&outcome.sent), &format!("point {i}"));
        let failover = &outcome.summary.failovers;
        assert!(failover.len() == 1 && failover[0].recovered, "point {i}: {failover:?}");
        let lost = outcome.links[&LinkKind::WorkerToCollector].to_the_dead;
        assert!(lost > 0, "point {i}: outputs went to the dead collector and came again");
        assert_eq!(outcome.summary.rejected.get("collector").map_or(0, |r| r.values().sum::<u64>()), 0);
    }
}

#[test]
fn a_collector_lost_beyond_its_retention_gives_the_run_up_and_every_node_is_told() {
    // The collector is killed for good while the streams run: the router holds on for its
    // retention (a restarted one could take over), then gives the run up and tells the
    // workers and the injector, which exit with its reason instead of waiting for ever.
    let retention = 300_000_000;
    let spec = ClusterSpec {
        rate: 50_000.0,
        count: 60_000,
        sequenced: true,
        collector_retention_ns: retention,
        ..ClusterSpec::default()
    };
    let mut cluster = LocalCluster::new(spec.clone(), vec![]);
    assert!(cluster.run_until(|c| c.sent_so_far() >= 5_000));
    cluster.kill(Member::Collector);
    let killed_at = cluster.now();
    assert!(cluster.run_until(|c| c.router_exit().is_some()), "the router gave the run up");
    let reason = cluster.router_exit().expect("checked").to_string();
    assert_eq!(
        reason,
        "the collector is lost (its connection dropped) and none took over within 300ms (--collector-retention)"
    );
    // It waited the retention, no more than two looks (50 ms apart: the one that saw the loss,
    // the one that judged it) beyond it, and the streams were still open: the workers were
    // running when told.
    let waited = cluster.now() - killed_at;
    assert!((retention..retention + 110_000_000).contains(&waited), "gave up {waited} ns after the kill");
    assert!(!cluster.all_streams_ended());
    let everyone_out =
        |c: &LocalCluster| (0..spec.workers).all(|i| c.exited(Member::Worker(i))) && c.exited(Member::Injector(0));
    assert!(cluster.run_until(everyone_out), "every worker and the injector exited on the router's word");
    assert!(!cluster.is_over(), "no collector, no summary");
}

#[test]
fn frames_the_collector_missed_are_sent_again_with_delivery() {
    // With envelopes, an output batch lost on the way is noticed by the gap after it, asked
    // for again, and counted once: nothing lost.
    let spec = ClusterSpec { sequenced: true, ..ClusterSpec::default() };
    let faults = vec![Fault::on(LinkKind::WorkerToCollector, Action::Drop).only(1).nth(40)];
    let outcome = LocalCluster::new(spec, faults).run();
    assert_eq!(outcome.links[&LinkKind::WorkerToCollector].dropped, 1);
    assert_whole(&outcome);
    assert_eq!(outcome.output_rows(), reference_rows(&outcome.sent));
    assert!(outcome.summary.resent_frames > 0, "the frames after the gap came twice");
}
