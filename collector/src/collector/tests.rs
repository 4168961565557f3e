//! The collector core's tests: frame by frame, through its entry points.

use super::*;
use cep_core::frame::Body;
use cep_core::report::{RuleInfo, StreamAtWorker};
use cep_core::wire::OutputBatchWriter;
use std::time::Duration;

fn collector(csv_mode: CsvMode) -> Collector<Vec<u8>> {
    let shape = RunShape { workers: vec!["w0".into()], streams: 1, start_ns: 1_000, warmup_ns: 0 };
    let sinks = Sinks {
        csv: OutputsCsv::new(Vec::new()).unwrap(),
        intervals: IntervalRecorder::new(Vec::new(), Vec::new(), 1_000, Duration::from_secs(1)).unwrap(),
    };
    Collector::new(shape, csv_mode, 1 << 20, sinks, 1_000)
}

fn rules() -> Vec<u8> {
    rules_of(0)
}

fn rules_of(worker: u32) -> Vec<u8> {
    let queries =
        vec![RuleInfo { name: "perc".into(), alert: true }, RuleInfo { name: "volatility".into(), alert: false }];
    RulesInstalled { epoch: 0, queries }.encode(worker)
}

/// Outputs of worker 0 for tick `seq` of stream 0: one per rule index given.
fn outputs(seq: u64, rules: &[u32]) -> Vec<u8> {
    let mut writer = OutputBatchWriter::new(0);
    for &rule in rules {
        writer.push(rule, b"S1", false, 10.0, 2.5, 0, seq, 2_000, 2_100);
    }
    writer.seal(2_200, 2_300, 2_400).to_vec()
}

fn report(processed: u64, outputs: u64) -> Vec<u8> {
    WorkerReport {
        id: "w0".into(),
        index: 0,
        processed,
        symbols: 1,
        outputs,
        streams: vec![StreamAtWorker { stream: 0, sent: Some(processed), routed: Some(processed), processed }],
        duplicates: 0,
        out_of_order: 0,
        late: 0,
        late_dropped: 0,
        rejected: Default::default(),
    }
    .encode(0)
}

fn router_report(received: u64) -> Vec<u8> {
    RouterReport {
        received: BTreeMap::from([(0, received)]),
        rules: vec![],
        routed: received,
        rejected: Default::default(),
        workers: vec!["w0".into()],
        failed: vec![],
        lost_streams: BTreeMap::new(),
        cut_streams: BTreeMap::new(),
        checkpoints: Default::default(),
    }
    .encode(0)
}

#[test]
fn rows_latency_and_accounting_from_frames() {
    let mut collector = collector(CsvMode::Alerts);
    collector.handle(&rules(), 1_500).unwrap();
    collector.handle(&outputs(0, &[0, 1]), 3_000).unwrap();
    collector.handle(&outputs(1, &[1]), 3_100).unwrap();
    assert!(!collector.has_everything());
    collector.handle(&report(2, 3), 3_200).unwrap();
    collector.handle(&router_report(2), 3_300).unwrap();
    assert!(collector.has_everything());
    let finished = collector.finish(|_| {}).unwrap();
    let csv = String::from_utf8(finished.csv).unwrap();
    assert_eq!(
        csv.lines().collect::<Vec<_>>(),
        [crate::csv::OUTPUTS_HEADER, "perc,S1,10.0,2.5,0,0,2000,2100,2200,2300,2400,3000"],
        "alerts only"
    );
    let summary = finished.summary;
    assert!(summary.complete, "{summary:?}");
    assert_eq!((summary.events_sent, summary.events_processed, summary.events_lost), (Some(2), 2, Some(0)));
    assert_eq!(summary.outputs.get("perc"), Some(&1));
    assert_eq!(summary.outputs.get("volatility"), Some(&2));
    // End to end: 3,000 - 2,000 ns for the first two outputs, 1,100 ns for the third.
    assert_eq!(summary.latency_us.end_to_end.count, 3);
    assert_eq!(summary.latency_us.end_to_end.max, 1.1);
    assert_eq!(summary.duration_s, (3_200 - 1_000) as f64 / 1e9);
}

#[test]
fn duplicates_unknown_rules_and_lost_outputs_are_counted() {
    let mut collector = collector(CsvMode::All);
    collector.handle(&outputs(0, &[0]), 2_500).unwrap();
    collector.handle(&rules(), 2_600).unwrap();
    collector.handle(&outputs(1, &[0, 1]), 3_000).unwrap();
    collector.handle(&outputs(1, &[0, 1]), 3_001).unwrap();
    collector.handle(b"junk", 3_002).unwrap();
    // The worker says it sent 5 outputs: 1 never announced, 4 received (2 duplicates).
    collector.handle(&report(2, 5), 3_100).unwrap();
    collector.handle(&router_report(2), 3_200).unwrap();
    let finished = collector.finish(|_| {}).unwrap();
    assert_eq!(finished.rows, 4);
    let summary = finished.summary;
    assert_eq!(summary.duplicates, 2);
    assert_eq!(summary.rejected["collector"]["unknown_rule"], 1);
    assert_eq!(summary.rejected["collector"]["malformed"], 1);
    // 5 reported, 2 distinct received.
    assert_eq!(summary.outputs_lost, 3);
}

/// Outputs of worker `worker` for tick `seq` of stream 0, symbol `symbol`, one per rule.
fn outputs_of(worker: u32, symbol: &[u8], seq: u64, rules: &[u32]) -> Vec<u8> {
    let mut writer = OutputBatchWriter::new(worker);
    for &rule in rules {
        writer.push(rule, symbol, false, 10.0, 2.5, 0, seq, 2_000, 2_100);
    }
    writer.seal(2_200, 2_300, 2_400).to_vec()
}

#[test]
fn duplicates_are_told_per_worker_and_symbol() {
    let shape = RunShape { workers: vec!["w0".into(), "w1".into()], streams: 1, start_ns: 1_000, warmup_ns: 0 };
    let sinks = Sinks {
        csv: OutputsCsv::new(Vec::new()).unwrap(),
        intervals: IntervalRecorder::new(Vec::new(), Vec::new(), 1_000, Duration::from_secs(1)).unwrap(),
    };
    let mut collector = Collector::new(shape, CsvMode::None, 1 << 20, sinks, 1_000);
    let queries = vec![RuleInfo { name: "perc".into(), alert: true }];
    for worker in [0, 1] {
        collector.handle(&RulesInstalled { epoch: 0, queries: queries.clone() }.encode(worker), 1_100).unwrap();
    }
    let duplicates = |collector: &Collector<Vec<u8>>| collector.observed.output_duplicates;
    // One worker, two symbols of one stream: each symbol's ticks in order, the symbols
    // interleaved in any order (A's tick 5 before B's tick 3).
    for (symbol, seq) in [(b"A", 1), (b"A", 5), (b"B", 3), (b"B", 4), (b"A", 6)] {
        collector.handle(&outputs_of(0, symbol, seq, &[0]), 2_500).unwrap();
    }
    assert_eq!(duplicates(&collector), 0);
    // Again, or an earlier tick of the symbol, from the same worker: duplicates, each
    // output of the group counted.
    collector.handle(&outputs_of(0, b"A", 6, &[0, 0]), 2_600).unwrap();
    collector.handle(&outputs_of(0, b"B", 2, &[0]), 2_600).unwrap();
    assert_eq!(duplicates(&collector), 3);
    // The same symbol from another worker (it moved during a rescale): that worker's
    // ticks interleave with the first one's, and are not duplicates.
    collector.handle(&outputs_of(1, b"A", 2, &[0]), 2_700).unwrap();
    collector.handle(&outputs_of(1, b"A", 7, &[0]), 2_700).unwrap();
    collector.handle(&outputs_of(0, b"A", 8, &[0]), 2_700).unwrap();
    assert_eq!(duplicates(&collector), 3);
    collector.handle(&outputs_of(1, b"A", 7, &[0]), 2_800).unwrap();
    assert_eq!(duplicates(&collector), 4);
    // One entry per (worker, stream, symbol), whatever the number of ticks.
    let entries: Vec<usize> = collector.last_ticks.iter().map(|streams| streams[0].len()).collect();
    assert_eq!(entries, [2, 1]);
    for seq in 100..10_000 {
        collector.handle(&outputs_of(0, b"A", seq, &[0]), 3_000).unwrap();
    }
    assert_eq!(collector.last_ticks[0][0].len(), 2);
    assert_eq!(duplicates(&collector), 4);
}

#[test]
fn final_outputs_are_not_taken_for_duplicates() {
    let mut collector = collector(CsvMode::None);
    collector.handle(&rules(), 1_500).unwrap();
    collector.handle(&outputs(1, &[0]), 2_500).unwrap();
    // Windows the end of input closed carry the stream's count as seq; more of them than
    // one frame holds go out in further frames, with the same symbol and seq.
    for rule in [0, 1] {
        let mut writer = OutputBatchWriter::final_outputs(0);
        writer.push(rule, b"S1", false, 10.0, 2.5, 0, 2, 0, 0);
        collector.handle(writer.seal(0, 0, 2_600), 2_700).unwrap();
    }
    collector.handle(&report(2, 3), 2_800).unwrap();
    collector.handle(&router_report(2), 2_900).unwrap();
    let summary = collector.finish(|_| {}).unwrap().summary;
    assert_eq!((summary.final_outputs, summary.duplicates, summary.outputs_lost), (2, 0, 0));
}

#[test]
fn a_snapshot_is_the_running_summary_and_changes_nothing() {
    let mut collector = collector(CsvMode::None);
    collector.handle(&rules(), 1_500).unwrap();
    collector.handle(&outputs(0, &[0, 1]), 3_000).unwrap();
    let snapshot = collector.snapshot(5_000);
    assert!(snapshot.running && !snapshot.complete, "{snapshot:?}");
    assert_eq!(snapshot.outputs.get("perc"), Some(&1));
    assert_eq!(snapshot.latency_us.end_to_end.count, 2);
    assert_eq!(snapshot.duration_s, (5_000 - 1_000) as f64 / 1e9);
    assert_eq!(snapshot.events_sent, None, "no stream has ended: sent is unknown");
    // The run goes on and completes: the final summary is not a snapshot.
    collector.handle(&outputs(1, &[1]), 3_100).unwrap();
    collector.handle(&report(2, 3), 3_200).unwrap();
    collector.handle(&router_report(2), 3_300).unwrap();
    let summary = collector.finish(|_| {}).unwrap().summary;
    assert!(summary.complete && !summary.running, "{summary:?}");
    assert_eq!(summary.latency_us.end_to_end.count, 3);
    assert_eq!(summary.outputs.get("volatility"), Some(&2));
}

/// Two workers (w0 dies, w1 takes its symbol A over), one stream, one rule (perc).
fn two_workers(csv_mode: CsvMode) -> Collector<Vec<u8>> {
    let shape = RunShape { workers: vec!["w0".into(), "w1".into()], streams: 1, start_ns: 1_000, warmup_ns: 0 };
    let sinks = Sinks {
        csv: OutputsCsv::new(Vec::new()).unwrap(),
        intervals: IntervalRecorder::new(Vec::new(), Vec::new(), 1_000, Duration::from_secs(1)).unwrap(),
    };
    let mut collector = Collector::new(shape, csv_mode, 1 << 20, sinks, 1_000);
    let queries = vec![RuleInfo { name: "perc".into(), alert: true }];
    for worker in [0, 1] {
        collector.handle(&RulesInstalled { epoch: 0, queries: queries.clone() }.encode(worker), 1_100).unwrap();
    }
    collector
}

/// The router's record that w0 died: A moved to w1, restored from checkpoint 1 (4 ticks
/// processed and 4 outputs sent by then), or (`recovered` false) started afresh there.
fn w0_failed(recovered: bool) -> Vec<u8> {
    WorkerFailed {
        worker: "w0".into(),
        index: 0,
        reason: "tcp://127.0.0.1:6000 has been unreachable for 1.0s: it is taken for dead".into(),
        detected_ns: 2_001_000,
        recovered,
        checkpoint: 1,
        processed: [(0, 4)].into(),
        outputs: 4,
        replayed: if recovered { 2 } else { 0 },
        moved: vec![("A".into(), 0, 1)],
        state_lost: if recovered { vec![] } else { vec!["A".into()] },
    }
    .encode(0)
}

fn report_of(index: u32, processed: u64, outputs: u64, sent: u64) -> Vec<u8> {
    WorkerReport {
        id: format!("w{index}"),
        index,
        processed,
        symbols: 1,
        outputs,
        streams: vec![StreamAtWorker { stream: 0, sent: Some(sent), routed: Some(processed), processed }],
        duplicates: 0,
        out_of_order: 0,
        late: 0,
        late_dropped: 0,
        rejected: Default::default(),
    }
    .encode(index)
}

fn router_report_failed(received: u64, failed: Vec<u32>) -> Vec<u8> {
    RouterReport {
        received: BTreeMap::from([(0, received)]),
        rules: vec![],
        routed: received,
        rejected: Default::default(),
        workers: vec!["w0".into(), "w1".into()],
        failed,
        lost_streams: BTreeMap::new(),
        cut_streams: BTreeMap::new(),
        checkpoints: Default::default(),
    }
    .encode(0)
}

/// Feeds `frames` (worker, seq) of symbol A, or the failover record (`None`), all at the
/// same instant, and returns what the collector kept.
fn feed(frames: &[Option<(u32, u64)>]) -> Finished<Vec<u8>> {
    let mut collector = two_workers(CsvMode::All);
    for frame in frames {
        let bytes = match frame {
            Some((worker, seq)) => outputs_of(*worker, b"A", *seq, &[0]),
            None => w0_failed(true),
        };
        collector.handle(&bytes, 3_000).unwrap();
    }
    collector.finish(|_| {}).unwrap()
}

#[test]
fn a_survivors_restore_mark_tells_replays_apart_before_the_routers_record() {
    // A restarted collector may get w1's frames (its mark, then its replay) before the
    // router's record: the replayed outputs are dropped all the same.
    let mut collector = two_workers(CsvMode::All);
    for seq in 1..=5 {
        collector.handle(&outputs_of(0, b"A", seq, &[0]), 3_000).unwrap();
    }
    collector.handle(&Restored { from: 0, symbols: vec![("A".into(), 0)], lost: vec![] }.encode(1), 3_000).unwrap();
    for seq in 3..=8 {
        collector.handle(&outputs_of(1, b"A", seq, &[0]), 3_000).unwrap();
    }
    collector.handle(&w0_failed(true), 3_000).unwrap();
    let finished = collector.finish(|_| {}).unwrap();
    let summary = &finished.summary;
    assert_eq!((finished.rows, summary.replayed_outputs, summary.duplicates), (8, 3, 0), "ticks 3, 4 and 5 again");
    assert_eq!(summary.failovers.len(), 1);
}

#[test]
fn symbols_a_survivor_could_not_restore_are_lost_and_the_failover_did_not_recover() {
    // The router restored from a checkpoint; the survivor could not read A's part from the
    // store: its mark says so, whichever of the two comes first.
    for mark_first in [true, false] {
        let mut collector = two_workers(CsvMode::All);
        collector.handle(&outputs_of(0, b"A", 1, &[0]), 3_000).unwrap();
        let mark = Restored { from: 0, symbols: vec![("A".into(), 0)], lost: vec!["A".into()] }.encode(1);
        let order = if mark_first { [mark, w0_failed(true)] } else { [w0_failed(true), mark] };
        for frame in order {
            collector.handle(&frame, 3_000).unwrap();
        }
        let summary = collector.finish(|_| {}).unwrap().summary;
        let failover = &summary.failovers[0];
        assert!(!failover.recovered && failover.state_lost == ["A"], "{failover:?}");
        assert!(
            summary.failure.as_deref().is_some_and(|f| f.contains("could not be restored")),
            "{:?}",
            summary.failure
        );
        assert!(!summary.complete);
    }
}

#[test]
fn a_forged_restore_mark_naming_its_own_sender_is_refused_and_drops_nothing() {
    let mut collector = two_workers(CsvMode::All);
    for seq in 1..=3 {
        collector.handle(&outputs_of(1, b"A", seq, &[0]), 3_000).unwrap();
    }
    // w1 claims to have taken A over from itself: its next outputs would look like replays.
    collector.handle(&Restored { from: 1, symbols: vec![("A".into(), 0)], lost: vec![] }.encode(1), 3_000).unwrap();
    for seq in 2..=5 {
        collector.handle(&outputs_of(1, b"A", seq, &[0]), 3_000).unwrap();
    }
    let finished = collector.finish(|_| {}).unwrap();
    let summary = &finished.summary;
    assert_eq!(summary.rejected["collector"]["restored_from_itself"], 1);
    // 2 and 3 again are duplicates, as without the mark (their rows written, counted): none a replay.
    assert_eq!((finished.rows, summary.replayed_outputs, summary.duplicates), (7, 0, 2));
}

#[test]
fn outputs_replayed_after_a_failover_are_kept_once() {
    let undisturbed = feed(&(1..=8).map(|seq| Some((0, seq))).collect::<Vec<_>>());
    assert_eq!((undisturbed.rows, undisturbed.summary.replayed_outputs), (8, 0));
    let rows = |finished: &Finished<Vec<u8>>| String::from_utf8(finished.csv.clone()).unwrap();

    // w0's outputs of ticks 1..5 arrived, then it died; w1 replays from tick 3 on.
    let mut frames: Vec<Option<(u32, u64)>> = (1..=5).map(|seq| Some((0, seq))).collect();
    frames.push(None);
    frames.extend((3..=8).map(|seq| Some((1, seq))));
    let replayed = feed(&frames);
    assert_eq!(rows(&replayed), rows(&undisturbed));
    let summary = &replayed.summary;
    assert_eq!((summary.replayed_outputs, summary.duplicates), (3, 0), "ticks 3, 4 and 5 again");
    assert_eq!(summary.outputs.get("perc"), Some(&8));
    assert_eq!(summary.latency_us.end_to_end.count, 8, "replayed outputs are not measured");
    assert_eq!(summary.latency_us.worker_to_collector.count, 8);
    assert_eq!(summary.failovers.len(), 1);
    let failover = &summary.failovers[0];
    assert_eq!((failover.worker.as_str(), failover.symbols, failover.replayed), ("w0", 1, 2));
    assert_eq!(failover.at_s, 0.002);

    // w0's outputs of ticks 4 and 5 arrive late, after w1's replay of them.
    let mut frames: Vec<Option<(u32, u64)>> = (1..=3).map(|seq| Some((0, seq))).collect();
    frames.push(None);
    frames.extend((3..=8).map(|seq| Some((1, seq))));
    frames.extend([Some((0, 4)), Some((0, 5))]);
    let late = feed(&frames);
    assert_eq!(rows(&late), rows(&undisturbed));
    assert_eq!((late.summary.replayed_outputs, late.summary.duplicates), (3, 0), "3 from w1, 4 and 5 from w0");
    assert_eq!(late.summary.outputs.get("perc"), Some(&8));
}

#[test]
fn a_recovered_failover_balances_without_the_dead_workers_report() {
    let mut collector = two_workers(CsvMode::None);
    // w0: checkpoint after tick 4, then ticks 5 and 6 processed and their outputs sent.
    collector.handle(&WorkerProgress { at_ns: 0, processed: 6, outputs: 6, rejected: 0 }.encode(0), 2_000).unwrap();
    for seq in 1..=6 {
        collector.handle(&outputs_of(0, b"A", seq, &[0]), 2_500).unwrap();
    }
    collector.handle(&w0_failed(true), 2_600).unwrap();
    // w1 replays ticks 5 and 6, then takes 7..10: 6 ticks, 6 outputs.
    for seq in 5..=10 {
        collector.handle(&outputs_of(1, b"A", seq, &[0]), 2_700).unwrap();
    }
    collector.handle(&report_of(1, 6, 6, 10), 2_800).unwrap();
    assert!(!collector.has_everything());
    collector.handle(&router_report_failed(10, vec![0]), 2_900).unwrap();
    assert!(collector.has_everything(), "the dead worker's report is not awaited");
    let summary = collector.finish(|_| {}).unwrap().summary;
    assert!(summary.complete, "{summary:?}");
    assert_eq!((summary.events_sent, summary.events_processed, summary.events_lost), (Some(10), 10, Some(0)));
    assert!(summary.lost_by_cause.is_empty() && summary.errors.is_empty() && summary.failure.is_none());
    assert_eq!((summary.replayed_outputs, summary.outputs_lost, summary.outputs["perc"]), (2, 0, 10));
    let workers: Vec<(&str, u64, bool)> = summary.workers.iter().map(|w| (w.id.as_str(), w.events, w.failed)).collect();
    assert_eq!(workers, [("w0", 4, true), ("w1", 6, false)]);
    assert_eq!(summary.duration_s, (2_800 - 1_000) as f64 / 1e9, "ends with the last report");
}

#[test]
fn progress_figures_take_every_nodes_counts_at_one_instant_and_only_the_router_says_what_came_in() {
    let mut collector = two_workers(CsvMode::None);
    collector.handle(&RouterProgress { at_ns: 1_000, received: 100 }.encode(ROUTER_ID), 1_100).unwrap();
    collector.handle(&RouterProgress { at_ns: 2_000, received: 200 }.encode(ROUTER_ID), 2_100).unwrap();
    collector
        .handle(&WorkerProgress { at_ns: 1_500, processed: 70, outputs: 7, rejected: 0 }.encode(0), 1_600)
        .unwrap();
    collector
        .handle(&WorkerProgress { at_ns: 1_500, processed: 60, outputs: 6, rejected: 0 }.encode(1), 1_600)
        .unwrap();
    // A worker cannot say what entered the cluster.
    let forged = RouterProgress { at_ns: 1_500, received: 1_000_000 }.encode(1);
    collector.handle(cep_core::delivery::DeliveryLog::new(1, 1, 1 << 20).push(&forged), 1_700).unwrap();
    let figures = collector.progress_figures(2_200);
    assert_eq!(figures, Figures { at_ns: 1_500, sent: Some(150), processed: vec![70, 60], outputs: 13 });
    assert_eq!(figures.backlog(), Some(20));
    // Worker 0 dies; its symbols go on from its checkpoint (4 ticks, 4 outputs).
    collector.handle(&w0_failed(true), 2_300).unwrap();
    collector
        .handle(&WorkerProgress { at_ns: 2_400, processed: 90, outputs: 9, rejected: 0 }.encode(1), 2_450)
        .unwrap();
    collector.handle(&RouterProgress { at_ns: 2_400, received: 240 }.encode(ROUTER_ID), 2_450).unwrap();
    let figures = collector.progress_figures(2_500);
    assert_eq!((figures.at_ns, figures.processed.as_slice(), figures.outputs), (2_400, &[4, 90][..], 13));
    let summary = collector.finish(|_| {}).unwrap().summary;
    assert_eq!(summary.rejected["collector"].get("unauthorized_sender"), Some(&1), "{:?}", summary.rejected);
}

#[test]
fn an_unrecovered_failover_is_a_failure() {
    let mut collector = two_workers(CsvMode::None);
    collector.handle(&WorkerProgress { at_ns: 0, processed: 6, outputs: 6, rejected: 0 }.encode(0), 2_000).unwrap();
    collector.handle(&w0_failed(false), 2_600).unwrap();
    collector.handle(&report_of(1, 4, 4, 10), 2_800).unwrap();
    collector.handle(&router_report_failed(10, vec![0]), 2_900).unwrap();
    assert!(collector.has_everything());
    let summary = collector.finish(|_| {}).unwrap().summary;
    assert!(!summary.complete, "{summary:?}");
    assert_eq!(
        summary.failure.as_deref(),
        Some("worker w0 died; its state could not be restored: 1 symbols started afresh")
    );
    // Its last progress counts for what it processed: 6 + 4 of 10.
    assert_eq!((summary.events_sent, summary.events_processed, summary.events_lost), (Some(10), 10, Some(0)));
    assert_eq!(summary.events_lost, Some(summary.lost_by_cause.values().sum()));
    assert_eq!((summary.workers[0].events, summary.workers[0].failed), (6, true));
    assert!(!summary.failovers[0].recovered && summary.failovers[0].state_lost == ["A"]);
}

#[test]
fn a_failure_makes_the_summary_incomplete_and_says_why() {
    let mut collector = collector(CsvMode::None);
    collector.handle(&rules(), 1_500).unwrap();
    collector.handle(&outputs(1, &[0]), 2_500).unwrap();
    collector.handle(&report(2, 1), 2_800).unwrap();
    let cause = "tcp://127.0.0.1:5556 has been unreachable for 1.0s: it is taken for dead";
    collector.fail(cause.to_string());
    collector.fail("a later cause".to_string());
    assert_eq!(collector.snapshot(3_000).failure.as_deref(), Some(cause));
    let summary = collector.finish(|_| {}).unwrap().summary;
    assert!(!summary.complete && !summary.running);
    assert_eq!(summary.failure.as_deref(), Some(cause));
    let json = serde_json::to_value(&summary).unwrap();
    assert_eq!(json["failure"], cause);
}

#[test]
fn a_collector_without_reports_says_the_run_is_incomplete() {
    let mut collector = collector(CsvMode::None);
    collector.handle(&rules(), 5_000).unwrap();
    let summary = collector.finish(|_| {}).unwrap().summary;
    assert!(!summary.complete);
    assert_eq!(summary.events_sent, None, "no report: what was sent is unknown");
}

#[test]
fn a_joined_workers_frames_are_taken_from_its_own_key_only_even_when_they_come_first() {
    use cep_core::delivery::DeliveryLog;
    use cep_core::identity::ROUTER_ID;
    let key = |digit: char| digit.to_string().repeat(40);
    let (w0, w1, forger) = (key('0'), key('1'), key('9'));
    let id = |name: &str, key: &str| format!("worker {name} {key}");
    let (w0_id, w1_id, forger_id, router_id) =
        (id("w0", &w0), id("w1", &w1), id("w9", &forger), format!("router router {}", key('r')));
    let mut collector = collector(CsvMode::All).authenticating(vec![w0.clone()]);
    let mut router = DeliveryLog::new(ROUTER_ID, 1, 1 << 20);
    let mut joiner = DeliveryLog::new(1, 1, 1 << 20);
    let from = |id| Some(Sender::new(id));
    // Worker 1's first frames arrive before the router's word on it: held back, asked again.
    let early = [joiner.push(&rules_of(1)).to_vec(), joiner.push(&outputs_of(1, b"S7", 0, &[0])).to_vec()];
    for frame in &early {
        collector.handle_from(frame, from(&w1_id), 2_000).unwrap();
    }
    // Another worker key speaking for index 1 before it joined, and for index 2, which no
    // worker joins as; worker 0 naming its own key for index 1 (only the router says who
    // joined) and filing a report as worker 1.
    let mut early_forger = DeliveryLog::new(1, 1, 1 << 20);
    collector.handle_from(early_forger.push(&rules_of(1)), from(&forger_id), 2_010).unwrap();
    let mut stray = DeliveryLog::new(2, 1, 1 << 20);
    collector.handle_from(stray.push(&outputs_of(2, b"S8", 0, &[0])), from(&forger_id), 2_050).unwrap();
    // (A frame refused before its position is read takes no place in its source's stream.)
    let rebind = WorkerJoined { index: 1, id: "w1".into(), key: w0.clone() }.encode(0);
    collector.handle_from(DeliveryLog::new(0, 1, 1 << 20).push(&rebind), from(&w0_id), 2_060).unwrap();
    let mut start = DeliveryLog::new(0, 1, 1 << 20);
    let mut as_other = report_of(1, 0, 0, 0);
    as_other[3] = 0; // sent as worker 0 (the header's sender), reporting for worker 1
    collector.handle_from(start.push(&as_other), from(&w0_id), 2_070).unwrap();
    let (_, saved) = collector.save().unwrap();
    assert_eq!(saved.resend, [1, 2], "both asked to send again");
    assert!(
        saved.positions.iter().all(|&(source, position)| position == 0 || source == 0),
        "nothing of 1 or 2 was taken"
    );
    let joined = WorkerJoined { index: 1, id: "w1".into(), key: w1.clone() }.encode(0);
    collector.handle_from(router.push(&joined), from(&router_id), 2_100).unwrap();
    // Now the forger is refused for index 1, and the real worker's resend is taken.
    let mut forged = DeliveryLog::new(1, 1, 1 << 20);
    collector.handle_from(forged.push(&rules_of(1)), from(&forger_id), 2_150).unwrap();
    for frame in &early {
        collector.handle_from(frame, from(&w1_id), 2_200).unwrap();
    }
    collector.handle_from(start.push(&rules()), from(&w0_id), 2_250).unwrap();
    collector.handle_from(start.push(&outputs(0, &[0])), from(&w1_id), 2_300).unwrap();
    assert_eq!(collector.workers()[1], "w1");
    let summary = collector.finish(|_| {}).unwrap().summary;
    assert_eq!(summary.outputs.get("perc"), Some(&1), "worker 1's one output, once");
    assert_eq!(summary.resent_frames, 2, "worker 1's own two frames came again");
    // The forger for index 1 (before and after the join), worker 0's WorkerJoined, worker
    // 1's key for worker 0, and the frame for index 2; worker 0's report as worker 1.
    let expected = [("sender_mismatch".to_string(), 1), ("unauthorized_sender".to_string(), 5)];
    assert_eq!(summary.rejected["collector"], BTreeMap::from(expected));
}

#[test]
fn a_resumed_collector_adds_its_refusals_to_its_earlier_incarnations() {
    let cause = "unauthenticated_router_worker_injector";
    let mut first = collector(CsvMode::All);
    first.refused_connections(&BTreeMap::from([(cause.to_string(), 3)]));
    let (bytes, _) = first.save().unwrap();
    let sinks = Sinks {
        csv: OutputsCsv::new(Vec::new()).unwrap(),
        intervals: IntervalRecorder::new(Vec::new(), Vec::new(), 1_000, Duration::from_secs(1)).unwrap(),
    };
    let mut second = Collector::resume(SavedState::read(&bytes).unwrap(), 2, CsvMode::All, 1 << 20, sinks);
    // Its own context counts from 0.
    second.refused_connections(&BTreeMap::from([(cause.to_string(), 2)]));
    second.refused_connections(&BTreeMap::from([(cause.to_string(), 2)]));
    let summary = second.finish(|_| {}).unwrap().summary;
    assert_eq!(summary.rejected["collector"].get(cause), Some(&5));
}

#[test]
fn a_worker_reports_its_clock_under_its_own_name_only() {
    use cep_core::clock::OffsetEstimate;
    use cep_core::delivery::DeliveryLog;
    let clock = |node: &str, sender: u32| {
        ClockReport { node: node.into(), estimate: OffsetEstimate { offset_ns: 1_000, uncertainty_ns: 10 } }
            .encode(sender)
    };
    let mut collector = collector(CsvMode::All);
    // (A refused frame takes no place in its source's stream: each comes in an envelope of
    // its own; those taken in their source's next.)
    let refused = |source: u32, node: &str| DeliveryLog::new(source, 1, 1 << 20).push(&clock(node, source)).to_vec();
    let (mut w0, mut w3) = (DeliveryLog::new(0, 1, 1 << 20), DeliveryLog::new(3, 1, 1 << 20));
    // Worker 0 is known as w0: it may not report as another worker, the router or an injector.
    collector.handle(w0.push(&clock("w0", 0)), 2_000).unwrap();
    for node in ["w1", "router", "injector-0"] {
        collector.handle(&refused(0, node), 2_000).unwrap();
    }
    // Worker 3 is not known yet: not under a known worker's name; under a new one once, and
    // then it is known by it.
    collector.handle(&refused(3, "w0"), 2_100).unwrap();
    collector.handle(w3.push(&clock("w3", 3)), 2_100).unwrap();
    collector.handle(&refused(3, "w3b"), 2_100).unwrap();
    collector.handle(w3.push(&clock("w3", 3)), 2_100).unwrap();
    collector.handle(DeliveryLog::new(ROUTER_ID, 1, 1 << 20).push(&clock("router", 0)), 2_200).unwrap();
    assert_eq!(collector.workers()[3], "w3");
    let summary = collector.finish(|_| {}).unwrap().summary;
    let nodes: Vec<&str> = summary.clock_offsets.iter().map(|offset| offset.node.as_str()).collect();
    assert_eq!(nodes, ["w0", "w3", "router"], "one entry per process, none forged");
    assert_eq!(summary.rejected["collector"].get("unauthorized_sender"), Some(&5));
}

#[test]
fn envelopes_are_taken_once_in_order_and_forged_ones_change_nothing() {
    use cep_core::delivery::DeliveryLog;
    let mut collector = collector(CsvMode::All);
    let mut worker = DeliveryLog::new(0, 1, 1 << 20);
    collector.handle(worker.push(&rules()), 1_500).unwrap();
    let first = worker.push(&outputs(1, &[0])).to_vec();
    collector.handle(&first, 2_000).unwrap();
    // The same frame again (a resend): dropped.
    collector.handle(&first, 2_100).unwrap();
    // A source beyond any cluster's workers, a worker speaking for another, an envelope
    // in an envelope: refused, counted, no table grows.
    collector.handle(DeliveryLog::new(5_000, 1, 1 << 20).push(&outputs_of(5_000, b"S1", 2, &[0])), 2_200).unwrap();
    collector.handle(DeliveryLog::new(1, 1, 1 << 20).push(&outputs(2, &[0])), 2_300).unwrap();
    let nested = DeliveryLog::new(0, 1, 1 << 20).push(&outputs(2, &[0])).to_vec();
    collector.handle(worker.push(&nested), 2_400).unwrap();
    // A frame beyond the next (the one before it lost on the way): dropped, asked again.
    let lost = worker.push(&outputs(3, &[0])).to_vec();
    collector.handle(worker.push(&outputs(4, &[0])), 2_500).unwrap();
    let (_, saved) = collector.save().unwrap();
    assert_eq!(saved.resend, [0]);
    assert_eq!(saved.positions, [(0, 3), (cep_core::identity::ROUTER_ID, 0)], "the forged ones took no place");
    let summary = collector.finish(|_| {}).unwrap().summary;
    assert_eq!(summary.outputs.get("perc"), Some(&1), "one output, once");
    assert_eq!(summary.resent_frames, 2);
    let rejected = &summary.rejected["collector"];
    assert_eq!(
        (rejected.get("unknown_worker"), rejected.get("sender_mismatch"), rejected.get("unexpected_kind")),
        (Some(&1), Some(&1), Some(&1))
    );
    assert_eq!(rejected.get("frames_lost"), Some(&1), "a gap never closed: {lost:?}");
}

#[test]
fn a_checkpoint_mark_is_confirmed_in_the_next_save_and_by_a_resumed_collector_if_unsent() {
    use cep_core::failover::{CheckpointMark, OutputsConfirmed};
    let sinks = || Sinks {
        csv: OutputsCsv::new(Vec::new()).unwrap(),
        intervals: IntervalRecorder::new(Vec::new(), Vec::new(), 1_000, Duration::from_secs(1)).unwrap(),
    };
    let mut first = collector(CsvMode::All);
    first.handle(&rules(), 1_100).unwrap();
    first.handle(&CheckpointMark { id: 4 }.encode(0), 1_200).unwrap();
    // Taken into the state, and into the notice the router gets once that state is stored.
    let (bytes, saved) = first.save().unwrap();
    assert_eq!(saved.confirmed, [OutputsConfirmed { worker: 0, id: 4 }]);
    assert!(first.save().unwrap().1.confirmed.is_empty(), "confirmed once");
    // A collector that died before that notice went resumes from the state that holds it,
    // and confirms it again.
    let mut second = Collector::resume(SavedState::read(&bytes).unwrap(), 2, CsvMode::All, 1 << 20, sinks());
    assert_eq!(second.save().unwrap().1.confirmed, [OutputsConfirmed { worker: 0, id: 4 }]);
}
