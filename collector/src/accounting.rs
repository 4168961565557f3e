//! From the end-of-run reports and the collector's own counts to `summary.json`: every event
//! sent is either processed or counted as lost, by the stage where it went missing. The counts
//! are never bent to balance: a contradiction (more processed than sent) is an error, said in
//! one line, and the run is not complete.

use cep_core::failover::WorkerFailed;
use cep_core::report::{CauseCounts, RouterReport, WorkerProgress, WorkerReport};
use cep_core::results::{
    ClockOffset, FailoverSummary, HopLatencies, OutputCounts, StreamSummary, Summary, WorkerSummary,
};
use std::collections::BTreeMap;

/// What the collector itself observed.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Observed {
    /// Outputs received per rule (duplicates included, replayed outputs not).
    pub outputs: OutputCounts,
    /// Outputs of a tick at or before the last tick of its symbol whose outputs had arrived from
    /// the same worker: counted, not skipped.
    pub output_duplicates: u64,
    /// Outputs whose tick was intended during the warm-up: counted, not in the histograms.
    pub warmup_outputs: u64,
    /// Outputs of windows the end of input closed (in `outputs`, no latency).
    pub final_outputs: u64,
    /// Frames and outputs the collector rejected, by cause.
    pub rejected: CauseCounts,
    /// From the start signal (warm-up included) to the last worker's report, or to the last
    /// frame received when not every worker reported, in seconds.
    pub duration_s: f64,
    /// Latency per hop and end to end, µs.
    pub latency: HopLatencies,
    /// The clock offsets the nodes reported, in the order they arrived.
    pub clock_offsets: Vec<ClockOffset>,
    /// Workers that joined or left while the run went on.
    pub rescales: Vec<cep_core::results::RescaleSummary>,
    /// Workers that died, and how their symbols were recovered.
    pub failovers: Vec<FailoverSummary>,
    /// Outputs received twice across a failover: dropped (not in `outputs`).
    pub replayed_outputs: u64,
    /// Frames a sender sent again to a restarted collector that it already had (or sent to
    /// the collector before it): dropped.
    pub resent_frames: u64,
    /// Why the run ended by a failure, if it did.
    pub failure: Option<String>,
    /// Per worker (by index), the ticks whose outputs were kept (each tick once): what its
    /// outputs prove it processed.
    #[serde(default)]
    pub ticks_with_outputs: Vec<u64>,
}

/// What the accounting takes of one worker.
enum Share<'a> {
    /// Its end-of-run report.
    Report(&'a WorkerReport),
    /// It died and its symbols were restored from a checkpoint: what it had processed and
    /// output at that checkpoint (what it did after was replayed to the survivors).
    Checkpoint(&'a WorkerFailed),
    /// Neither: its last progress, or the ticks its outputs prove if more, a lower bound and
    /// per stream unknown.
    Progress(u64),
}

/// Builds the summary. `workers` are the run's worker ids (from the start), `reports` the
/// reports that arrived (by worker index), `progress` the last progress of each worker (what
/// an interrupted run knows of a worker that never reported), `failed` the router's record of
/// each worker that died.
pub fn summarize(
    streams: u32,
    workers: &[String],
    reports: &BTreeMap<u32, WorkerReport>,
    progress: &[WorkerProgress],
    router: Option<&RouterReport>,
    failed: &[WorkerFailed],
    observed: Observed,
) -> Summary {
    let mut summary = Summary {
        duration_s: observed.duration_s,
        latency_us: observed.latency,
        warmup_outputs: observed.warmup_outputs,
        final_outputs: observed.final_outputs,
        clock_offsets: observed.clock_offsets,
        rescales: observed.rescales,
        failovers: observed.failovers,
        replayed_outputs: observed.replayed_outputs,
        resent_frames: observed.resent_frames,
        failure: observed.failure,
        checkpoints: router.map(|router| router.checkpoints.clone()).unwrap_or_default(),
        ..Summary::default()
    };
    let failed_record = |index: u32| failed.iter().find(|record| record.index == index);
    let proven = |index: u32| observed.ticks_with_outputs.get(index as usize).copied().unwrap_or(0);
    // A dead worker restored from its checkpoint counts as that checkpoint, even if a report
    // of its came after all (one taken for dead that was not): the survivors replayed the rest.
    let share = |index: u32| match (failed_record(index).filter(|r| r.recovered), reports.get(&index)) {
        (Some(record), _) => Share::Checkpoint(record),
        (None, Some(report)) => Share::Report(report),
        (None, None) => Share::Progress(progress.get(index as usize).map_or(0, |p| p.processed).max(proven(index))),
    };
    // Every worker with a report or a record, and every one of the run's: each counts once.
    let mut indexes: Vec<u32> = (0..workers.len() as u32)
        .chain(reports.keys().copied())
        .chain(failed.iter().map(|record| record.index))
        .collect();
    indexes.sort_unstable();
    indexes.dedup();
    let shares: Vec<(u32, Share<'_>)> = indexes.iter().map(|&index| (index, share(index))).collect();

    // Ticks processed that no stream is known for: the last progress of a worker without a
    // report (or a report whose total is above its streams').
    let mut unattributed = 0u64;
    let mut processed_by_stream: BTreeMap<u32, u64> = BTreeMap::new();
    let mut sent_by_stream: BTreeMap<u32, Option<u64>> = BTreeMap::new();
    for (_, share) in &shares {
        match share {
            Share::Report(report) => {
                let mut attributed = 0;
                for seen in &report.streams {
                    *processed_by_stream.entry(seen.stream).or_default() += seen.processed;
                    let sent = sent_by_stream.entry(seen.stream).or_default();
                    *sent = (*sent).max(seen.sent);
                    attributed += seen.processed;
                }
                unattributed += report.processed.saturating_sub(attributed);
            }
            Share::Checkpoint(record) => {
                for (stream, processed) in &record.processed {
                    *processed_by_stream.entry(*stream).or_default() += processed;
                }
            }
            Share::Progress(processed) => unattributed += processed,
        }
    }

    let mut lost_by_cause: BTreeMap<String, u64> = BTreeMap::new();
    let mut add = |cause: &str, count: u64| *lost_by_cause.entry(cause.into()).or_default() += count;
    let mut all_sent = Some(0u64);
    let mut attributed = 0u64;
    // A stream the router ended itself, its injector taken for dead: what it sent is unknown
    // (its markers at the workers count what the router received).
    let lost_stream = |stream: u32| router.and_then(|r| r.lost_streams.get(&stream));
    for stream in 0..streams {
        let sent = sent_by_stream.get(&stream).copied().flatten().filter(|_| lost_stream(stream).is_none());
        let processed = processed_by_stream.get(&stream).copied().unwrap_or(0);
        let received_by_router = router.and_then(|r| r.received.get(&stream).copied());
        // Workers take ticks from the router alone: more processed than it received means ticks
        // reached a worker some other way (an injector pointed at a worker's port).
        let beyond_router = received_by_router.filter(|received| processed > *received);
        if let Some(received) = beyond_router {
            summary
                .errors
                .push(format!("stream {stream}: {processed} ticks processed but the router received {received}"));
        }
        let lost = match sent {
            Some(sent) if processed > sent => {
                // One fact, said once: beyond what the router received says more.
                if beyond_router.is_none() {
                    summary
                        .errors
                        .push(format!("stream {stream}: {processed} ticks processed but its injector sent {sent}"));
                }
                None
            }
            Some(sent) => Some(sent - processed),
            None => None,
        };
        match (sent, lost) {
            (Some(sent), Some(lost)) if router.is_some() => {
                let before_router = sent.saturating_sub(received_by_router.unwrap_or(0)).min(lost);
                add("not_received_by_router", before_router);
                add("not_processed_by_worker", lost - before_router);
            }
            (Some(_), Some(lost)) => add("unknown_router_report_missing", lost),
            // More processed than sent: an error above, nothing lost.
            (Some(_), None) => {}
            (None, _) => {
                // Without its end marker a stream's count is unknown: what the router saw and
                // the workers did not process is the least that was lost.
                let received = received_by_router.unwrap_or(0);
                match lost_stream(stream) {
                    // What its injector said it sent, or the router received, and no worker processed.
                    Some(lost) => add("injector_lost", lost.sent_at_least.max(received).saturating_sub(processed)),
                    None => add("stream_never_ended", received.saturating_sub(processed)),
                }
            }
        }
        all_sent = all_sent.zip(sent).map(|(all, sent)| all + sent);
        attributed += processed;
        summary.streams.push(StreamSummary { stream, sent, received_by_router, processed, lost });
    }
    summary.events_processed = attributed + unattributed;
    summary.events_sent = all_sent;
    if unattributed > 0 {
        match summary.streams.as_mut_slice() {
            // One stream: what no stream is known for is that stream's.
            [only] => {
                only.processed += unattributed;
                // More processed than sent: an error (in `errors`), nothing known lost.
                only.lost = only.lost.and_then(|lost| lost.checked_sub(unattributed));
            }
            // Several: how it splits over them cannot be known, and so neither can what each
            // lost (the run's total still is, by cause).
            streams => streams.iter_mut().for_each(|stream| stream.lost = None),
        }
    }
    // What workers without a report processed (per stream unknown) was counted lost above:
    // it was not. Taken off the causes in this order, the likeliest first.
    let mut left = unattributed;
    for cause in [
        "not_processed_by_worker",
        "unknown_router_report_missing",
        "stream_never_ended",
        "injector_lost",
        "not_received_by_router",
    ] {
        if let Some(count) = lost_by_cause.get_mut(cause) {
            let taken = left.min(*count);
            *count -= taken;
            left -= taken;
        }
    }
    lost_by_cause.retain(|_, count| *count > 0);
    if let Some(sent) = all_sent {
        if summary.events_processed > sent {
            let processed = summary.events_processed;
            summary.errors.push(format!("{processed} ticks processed in all but the injectors sent {sent}"));
        }
        // By definition, so that the two always agree.
        summary.events_lost = Some(lost_by_cause.values().sum());
    }
    summary.lost_by_cause = lost_by_cause;

    // Outputs the workers said they sent (a dead worker restored from a checkpoint: those it
    // had sent at the checkpoint; its later ones were replayed by the survivors, whose reports
    // count them, and the collector kept each once).
    let reported_outputs: u64 = shares
        .iter()
        .map(|(_, share)| match share {
            Share::Report(report) => report.outputs,
            Share::Checkpoint(record) => record.outputs,
            Share::Progress(_) => 0,
        })
        .sum();
    let received_outputs: u64 = observed.outputs.values().sum::<u64>();
    summary.outputs_lost = reported_outputs.saturating_sub(received_outputs.saturating_sub(observed.output_duplicates));
    summary.outputs = observed.outputs;
    summary.rules = router.map(|r| r.rules.clone()).unwrap_or_default();
    let counted_reports = || {
        shares.iter().filter_map(|(_, share)| match share {
            Share::Report(report) => Some(*report),
            _ => None,
        })
    };
    summary.duplicates = observed.output_duplicates + counted_reports().map(|r| r.duplicates).sum::<u64>();
    summary.out_of_order = counted_reports().map(|r| r.out_of_order).sum();
    summary.late = counted_reports().map(|r| r.late).sum();
    summary.late_dropped = counted_reports().map(|r| r.late_dropped).sum();

    // An empty id is a worker that never ran (the router never reached it): not a member.
    for (index, id) in workers.iter().enumerate().filter(|(_, id)| !id.is_empty()) {
        let index = index as u32;
        let report = reports.get(&index);
        let (events, symbols) = match share(index) {
            Share::Report(report) => (report.processed, Some(report.symbols)),
            Share::Checkpoint(record) => (record.processed.values().sum(), None),
            Share::Progress(processed) => (processed, None),
        };
        summary.workers.push(WorkerSummary {
            id: id.clone(),
            events,
            symbols,
            failed: failed_record(index).is_some() || router.is_some_and(|r| r.failed.contains(&index)),
            ticks_with_outputs: proven(index),
        });
        if let Some(report) = report.filter(|r| !r.rejected.is_empty()) {
            summary.rejected.insert(format!("worker:{}", report.id), report.rejected.clone());
        }
    }
    if let Some(router) = router.filter(|r| !r.rejected.is_empty()) {
        summary.rejected.insert("router".into(), router.rejected.clone());
    }
    if !observed.rejected.is_empty() {
        summary.rejected.insert("collector".into(), observed.rejected);
    }
    // Streams ended without their injector (the run's input is not known in full), and streams
    // their injector ended early (their counts exact, the input short): every cause said.
    let mut causes = Vec::new();
    if let Some(router) = router.filter(|r| !r.lost_streams.is_empty()) {
        let streams: Vec<String> = router.lost_streams.keys().map(u32::to_string).collect();
        let first = router.lost_streams.values().next().map_or("", |lost| lost.reason.as_str());
        causes.push(format!(
            "{first}; stream(s) {} ended where the router had them: what their injector sent is unknown",
            streams.join(", ")
        ));
    }
    for (stream, reason) in router.map(|r| &r.cut_streams).into_iter().flatten() {
        causes.push(format!("stream {stream} was cut short by its injector: {reason}"));
    }
    if !causes.is_empty() {
        summary.failure.get_or_insert_with(|| causes.join("; "));
    }
    // A dead worker whose state could not be restored ends the run as a failure.
    if let Some(record) = failed.iter().find(|record| !record.recovered || !record.state_lost.is_empty()) {
        let symbols = if record.state_lost.is_empty() { record.moved.len() } else { record.state_lost.len() };
        summary.failure.get_or_insert_with(|| {
            format!("worker {} died; its state could not be restored: {symbols} symbols started afresh", record.worker)
        });
    }
    // Every member reported, or died and was restored from a checkpoint.
    let every_report = workers.iter().enumerate().all(|(index, id)| {
        let index = index as u32;
        id.is_empty() || reports.contains_key(&index) || failed_record(index).is_some_and(|r| r.recovered)
    });
    summary.complete = router.is_some()
        && every_report
        && summary.streams.iter().all(|s| s.sent.is_some())
        && summary.errors.is_empty()
        && summary.failure.is_none();
    summary.throughput_eps =
        if summary.duration_s > 0.0 { summary.events_processed as f64 / summary.duration_s } else { 0.0 };
    summary
}

#[cfg(test)]
mod tests {
    use super::*;
    use cep_core::report::StreamAtWorker;

    fn worker(index: u32, processed: [u64; 2], sent: [Option<u64>; 2]) -> WorkerReport {
        WorkerReport {
            id: format!("w{index}"),
            index,
            processed: processed.iter().sum(),
            symbols: 3,
            outputs: 1 + processed.iter().sum::<u64>(),
            streams: (0..2)
                .map(|s| StreamAtWorker {
                    stream: s as u32,
                    sent: sent[s],
                    routed: Some(processed[s]),
                    processed: processed[s],
                })
                .collect(),
            duplicates: 0,
            out_of_order: 0,
            late: 0,
            late_dropped: 0,
            rejected: CauseCounts::new(),
        }
    }

    fn router(received: [u64; 2]) -> RouterReport {
        RouterReport {
            rules: Vec::new(),
            received: [(0, received[0]), (1, received[1])].into_iter().collect(),
            routed: received.iter().sum(),
            rejected: [("malformed".to_string(), 2)].into_iter().collect(),
            workers: vec!["w0".into(), "w1".into()],
            failed: vec![],
            lost_streams: BTreeMap::new(),
            cut_streams: BTreeMap::new(),
            checkpoints: Default::default(),
        }
    }

    fn observed(outputs: u64) -> Observed {
        Observed {
            outputs: [("perc".to_string(), 2), ("volatility".to_string(), outputs)].into(),
            duration_s: 2.0,
            ..Observed::default()
        }
    }

    #[test]
    fn balanced_run_has_nothing_lost() {
        let reports: BTreeMap<u32, WorkerReport> =
            [(0, worker(0, [10, 5], [Some(20), Some(9)])), (1, worker(1, [10, 4], [Some(20), Some(9)]))]
                .into_iter()
                .collect();
        let ids = vec!["w0".to_string(), "w1".to_string()];
        let summary = summarize(2, &ids, &reports, &[], Some(&router([20, 9])), &[], observed(29));
        assert_eq!((summary.events_sent, summary.events_processed, summary.events_lost), (Some(29), 29, Some(0)));
        assert_eq!(summary.streams[0].received_by_router, Some(20));
        assert_eq!(summary.workers[0].symbols, Some(3));
        assert!(summary.complete);
        assert_eq!(summary.throughput_eps, 14.5);
        assert_eq!(summary.workers[1].events, 14);
        assert_eq!(summary.rejected["router"]["malformed"], 2);
        assert_eq!(summary.outputs_lost, 0);
        assert!(summary.lost_by_cause.is_empty());
    }

    #[test]
    fn a_saved_copy_of_the_observed_counts_gives_the_same_summary() {
        use cep_core::results::{ClockOffset, RescaleSummary};
        let mut seen = observed(29);
        seen.output_duplicates = 3;
        seen.warmup_outputs = 4;
        seen.final_outputs = 1;
        seen.rejected = [("malformed".to_string(), 2)].into();
        seen.latency.end_to_end.p99 = 12.5;
        seen.clock_offsets = vec![ClockOffset { node: "router".into(), offset_us: -3.25, uncertainty_us: 0.5 }];
        seen.rescales = vec![RescaleSummary { kind: "join".into(), worker: "w2".into(), ..RescaleSummary::default() }];
        seen.failovers = vec![FailoverSummary { worker: "w1".into(), ..FailoverSummary::default() }];
        seen.replayed_outputs = 7;
        seen.failure = Some("lost".into());
        let back: Observed = rmp_serde::from_slice(&rmp_serde::to_vec(&seen).unwrap()).unwrap();
        let reports: BTreeMap<u32, WorkerReport> = [(0, worker(0, [10, 5], [Some(20), Some(9)]))].into();
        let ids = vec!["w0".to_string(), "w1".to_string()];
        let summarize = |seen| summarize(2, &ids, &reports, &[], Some(&router([20, 9])), &[], seen);
        assert_eq!(summarize(back), summarize(seen));
    }

    #[test]
    fn a_worker_the_router_never_reached_is_not_a_member() {
        let reports: BTreeMap<u32, WorkerReport> =
            [(0, worker(0, [10, 5], [Some(20), Some(9)])), (1, worker(1, [10, 4], [Some(20), Some(9)]))]
                .into_iter()
                .collect();
        let ids = vec!["w0".to_string(), "w1".to_string(), String::new()];
        let summary = summarize(2, &ids, &reports, &[], Some(&router([20, 9])), &[], observed(29));
        assert!(summary.complete, "no report is awaited from it");
        assert_eq!(summary.workers.iter().map(|w| w.id.as_str()).collect::<Vec<_>>(), ["w0", "w1"]);
    }

    #[test]
    fn losses_are_attributed_to_the_stage_that_lost_them() {
        // Stream 0: 20 sent, router got 18, workers processed 17.
        let reports: BTreeMap<u32, WorkerReport> =
            [(0, worker(0, [9, 5], [Some(20), Some(9)])), (1, worker(1, [8, 4], [Some(20), Some(9)]))]
                .into_iter()
                .collect();
        let ids = vec!["w0".to_string(), "w1".to_string()];
        let summary = summarize(2, &ids, &reports, &[], Some(&router([18, 9])), &[], observed(20));
        assert_eq!(summary.events_lost, Some(3));
        assert_eq!((summary.streams[0].lost, summary.streams[1].lost), (Some(3), Some(0)));
        assert_eq!(summary.lost_by_cause["not_received_by_router"], 2);
        assert_eq!(summary.lost_by_cause["not_processed_by_worker"], 1);
        assert_eq!(summary.outputs_lost, 6);
    }

    #[test]
    fn a_missing_worker_report_makes_the_run_incomplete() {
        let reports: BTreeMap<u32, WorkerReport> = [(0, worker(0, [10, 5], [Some(20), Some(9)]))].into_iter().collect();
        let ids = vec!["w0".to_string(), "w1".to_string()];
        let summary = summarize(2, &ids, &reports, &[], Some(&router([20, 9])), &[], observed(15));
        assert!(!summary.complete);
        assert_eq!(summary.events_lost, Some(14));
        assert_eq!((summary.workers[1].events, summary.workers[1].symbols), (0, None));
        // Its last progress counts for what it processed.
        let progress = [
            WorkerProgress { at_ns: 0, processed: 15, outputs: 0, rejected: 0 },
            WorkerProgress { at_ns: 0, processed: 10, outputs: 0, rejected: 0 },
        ];
        let summary = summarize(2, &ids, &reports, &progress, Some(&router([20, 9])), &[], observed(15));
        assert_eq!((summary.events_processed, summary.events_lost, summary.workers[1].events), (25, Some(4), 10));
    }

    #[test]
    fn ticks_of_a_worker_without_a_report_are_its_one_streams_or_leave_each_streams_loss_unknown() {
        // Two streams: w1 never reported; its 10 ticks cannot be split over the streams.
        let reports: BTreeMap<u32, WorkerReport> = [(0, worker(0, [10, 5], [Some(20), Some(9)]))].into_iter().collect();
        let ids = vec!["w0".to_string(), "w1".to_string()];
        let progress = [
            WorkerProgress { at_ns: 0, processed: 15, outputs: 0, rejected: 0 },
            WorkerProgress { at_ns: 0, processed: 10, outputs: 0, rejected: 0 },
        ];
        let summary = summarize(2, &ids, &reports, &progress, Some(&router([20, 9])), &[], observed(15));
        assert_eq!((summary.events_processed, summary.events_lost), (25, Some(4)));
        assert_eq!((summary.streams[0].lost, summary.streams[1].lost), (None, None), "not a guess");
        assert_eq!(summary.broken_identities(), Vec::<String>::new());
        // One stream: they are its own.
        let mut report = worker(0, [10, 0], [Some(20), None]);
        report.streams.truncate(1);
        let reports: BTreeMap<u32, WorkerReport> = [(0, report)].into_iter().collect();
        let summary = summarize(1, &ids, &reports, &progress, Some(&router([20, 0])), &[], observed(15));
        assert_eq!((summary.events_processed, summary.events_lost), (20, Some(0)));
        assert_eq!((summary.streams[0].processed, summary.streams[0].lost), (20, Some(0)));
        assert_eq!(summary.broken_identities(), Vec::<String>::new());
    }

    #[test]
    fn more_processed_than_the_router_received_is_an_error() {
        // An injector pointed at a worker's port: stream 0's 20 ticks all processed (and sent),
        // but only 12 went through the router.
        let reports: BTreeMap<u32, WorkerReport> =
            [(0, worker(0, [12, 9], [Some(20), Some(9)])), (1, worker(1, [8, 0], [Some(20), Some(9)]))]
                .into_iter()
                .collect();
        let ids = vec!["w0".to_string(), "w1".to_string()];
        let summary = summarize(2, &ids, &reports, &[], Some(&router([12, 9])), &[], observed(29));
        assert!(!summary.complete);
        assert_eq!(summary.errors, ["stream 0: 20 ticks processed but the router received 12"]);
        assert_eq!(summary.streams[0].received_by_router, Some(12));
    }

    #[test]
    fn more_processed_than_sent_is_an_error_never_hidden() {
        // Stream 0: 20 sent, 22 processed; stream 1: 9 sent, 8 processed.
        let reports: BTreeMap<u32, WorkerReport> =
            [(0, worker(0, [12, 4], [Some(20), Some(9)])), (1, worker(1, [10, 4], [Some(20), Some(9)]))]
                .into_iter()
                .collect();
        let ids = vec!["w0".to_string(), "w1".to_string()];
        let summary = summarize(2, &ids, &reports, &[], Some(&router([20, 9])), &[], observed(30));
        assert!(!summary.complete);
        assert_eq!(
            summary.errors,
            [
                "stream 0: 22 ticks processed but the router received 20",
                "30 ticks processed in all but the injectors sent 29"
            ]
        );
        assert_eq!((summary.events_sent, summary.events_processed), (Some(29), 30), "neither raised nor clamped");
        assert_eq!((summary.streams[0].lost, summary.streams[1].lost), (None, Some(1)));
        assert_eq!(summary.events_lost, Some(1));
        assert_eq!(summary.events_lost, Some(summary.lost_by_cause.values().sum()));
        // Without the router's report (it died), the injector's count is what it is held to.
        let summary = summarize(2, &ids, &reports, &[], None, &[], observed(30));
        assert_eq!(summary.errors[0], "stream 0: 22 ticks processed but its injector sent 20");
        // A worker without a report whose progress is more than what is unaccounted for.
        let reports: BTreeMap<u32, WorkerReport> = [(0, worker(0, [10, 5], [Some(20), Some(9)]))].into_iter().collect();
        let progress = [
            WorkerProgress { at_ns: 0, processed: 15, outputs: 0, rejected: 0 },
            WorkerProgress { at_ns: 0, processed: 20, outputs: 0, rejected: 0 },
        ];
        let summary = summarize(2, &ids, &reports, &progress, Some(&router([20, 9])), &[], observed(15));
        assert_eq!(summary.errors, ["35 ticks processed in all but the injectors sent 29"]);
        assert_eq!((summary.events_processed, summary.events_lost), (35, Some(0)));
        assert!(summary.lost_by_cause.is_empty() && !summary.complete);
    }

    #[test]
    fn a_dead_worker_counts_as_its_checkpoint() {
        let failed = |recovered| WorkerFailed {
            worker: "w1".into(),
            index: 1,
            reason: "unreachable".into(),
            detected_ns: 0,
            recovered,
            checkpoint: 2,
            // At the checkpoint: 6 ticks of stream 0 and 3 of stream 1 processed, 9 outputs.
            processed: [(0, 6), (1, 3)].into(),
            outputs: 9,
            replayed: 5,
            moved: vec![("A".into(), 0, 0), ("B".into(), 1, 0)],
            state_lost: vec![],
        };
        // w0 took the rest, replayed ticks included: 14 of stream 0, 6 of stream 1.
        let reports: BTreeMap<u32, WorkerReport> = [(0, worker(0, [14, 6], [Some(20), Some(9)]))].into_iter().collect();
        let ids = vec!["w0".to_string(), "w1".to_string()];
        let mut router = router([20, 9]);
        router.failed = vec![1];
        // w1 had gone further than its checkpoint: its progress is not counted.
        let progress = [
            WorkerProgress { at_ns: 0, processed: 0, outputs: 0, rejected: 0 },
            WorkerProgress { at_ns: 0, processed: 12, outputs: 0, rejected: 0 },
        ];
        let summary = summarize(2, &ids, &reports, &progress, Some(&router), &[failed(true)], observed(28));
        assert!(summary.complete, "{summary:?}");
        assert_eq!((summary.events_sent, summary.events_processed, summary.events_lost), (Some(29), 29, Some(0)));
        assert_eq!((summary.streams[0].processed, summary.streams[1].processed), (20, 9));
        assert_eq!(summary.outputs_lost, 0, "w0's 21 and w1's 9 at its checkpoint, 30 kept");
        let workers: Vec<(u64, Option<u64>, bool)> =
            summary.workers.iter().map(|w| (w.events, w.symbols, w.failed)).collect();
        assert_eq!(workers, [(20, Some(3), false), (9, None, true)]);
        // Not restored: its progress is a lower bound, and the run failed.
        let summary = summarize(2, &ids, &reports, &progress, Some(&router), &[failed(false)], observed(28));
        assert!(!summary.complete);
        assert_eq!(
            summary.failure.as_deref(),
            Some("worker w1 died; its state could not be restored: 2 symbols started afresh")
        );
        assert_eq!((summary.events_processed, summary.workers[1].events), (32, 12));
        assert_eq!(summary.errors, ["32 ticks processed in all but the injectors sent 29"]);
    }

    #[test]
    fn an_interrupted_run_says_what_it_does_not_know() {
        let ids = vec!["w0".to_string(), "w1".to_string()];
        // Interrupted before any end report arrived: only the workers' progress is known.
        let progress = [
            WorkerProgress { at_ns: 0, processed: 175, outputs: 0, rejected: 0 },
            WorkerProgress { at_ns: 0, processed: 165, outputs: 0, rejected: 0 },
        ];
        let summary = summarize(2, &ids, &BTreeMap::new(), &progress, None, &[], observed(15));
        assert!(!summary.complete);
        assert_eq!((summary.events_sent, summary.events_processed, summary.events_lost), (None, 340, None));
        assert_eq!(
            summary.streams[0],
            StreamSummary { stream: 0, sent: None, received_by_router: None, processed: 0, lost: None }
        );
        let workers: Vec<(u64, Option<u64>)> = summary.workers.iter().map(|w| (w.events, w.symbols)).collect();
        assert_eq!(workers, [(175, None), (165, None)]);
        assert!(summary.lost_by_cause.is_empty(), "{:?}", summary.lost_by_cause);
        let report = summary.ycsb_report();
        assert!(
            report.contains("[OVERALL], EventsSent, unknown\n") && report.contains("[OVERALL], EventsLost, unknown\n")
        );
        assert!(report.contains("[WORKER w0], Symbols, unknown\n") && report.contains("# PARTIAL RUN"), "{report}");

        // Interrupted, and the stopping workers and router reported what they had: no stream
        // ended, so sent stays unknown; what the router received and no worker processed was
        // lost at least.
        let reports: BTreeMap<u32, WorkerReport> =
            [(0, worker(0, [10, 5], [None, None])), (1, worker(1, [10, 4], [None, None]))].into_iter().collect();
        let summary = summarize(2, &ids, &reports, &progress, Some(&router([25, 9])), &[], observed(15));
        assert!(!summary.complete);
        assert_eq!((summary.events_sent, summary.events_processed, summary.events_lost), (None, 29, None));
        assert_eq!(
            summary.streams[0],
            StreamSummary { stream: 0, sent: None, received_by_router: Some(25), processed: 20, lost: None }
        );
        assert_eq!(summary.lost_by_cause, [("stream_never_ended".to_string(), 5)].into());
        assert_eq!(
            summary.workers.iter().map(|w| (w.events, w.symbols)).collect::<Vec<_>>(),
            [(15, Some(3)), (14, Some(3))]
        );
    }

    #[test]
    fn a_stream_whose_injector_was_lost_has_an_unknown_count_and_fails_the_run() {
        let ids = vec!["w0".to_string(), "w1".to_string()];
        // Stream 1's injector fell silent: the router ended it at the 9 ticks it had, and told
        // the workers so; one of them is still in flight (processed 8).
        let reports: BTreeMap<u32, WorkerReport> =
            [(0, worker(0, [10, 5], [Some(20), Some(9)])), (1, worker(1, [10, 3], [Some(20), Some(9)]))]
                .into_iter()
                .collect();
        let mut router = router([20, 9]);
        let reason = "the injector of stream 1 was taken for dead: silent".into();
        router.lost_streams.insert(1, cep_core::report::LostStream { reason, sent_at_least: 10 });
        let summary = summarize(2, &ids, &reports, &[], Some(&router), &[], observed(28));
        assert!(!summary.complete);
        assert_eq!((summary.events_sent, summary.events_processed, summary.events_lost), (None, 28, None));
        assert_eq!(
            summary.streams[1],
            StreamSummary { stream: 1, sent: None, received_by_router: Some(9), processed: 8, lost: None }
        );
        assert_eq!(summary.streams[0].lost, Some(0));
        // Its last heartbeat said 10 sent: 2 at least never processed.
        assert_eq!(summary.lost_by_cause, [("injector_lost".to_string(), 2)].into());
        assert_eq!(
            summary.failure.as_deref(),
            Some(
                "the injector of stream 1 was taken for dead: silent; stream(s) 1 ended where the router had them: \
                 what their injector sent is unknown"
            )
        );
        assert!(summary.broken_identities().is_empty(), "{:?}", summary.broken_identities());
    }

    #[test]
    fn a_worker_without_a_report_counts_at_least_the_ticks_its_outputs_prove() {
        let ids = vec!["w0".to_string(), "w1".to_string()];
        // Its last progress is older than its last outputs (the router died, say).
        let progress = [
            WorkerProgress { at_ns: 0, processed: 175, outputs: 0, rejected: 0 },
            WorkerProgress { at_ns: 0, processed: 165, outputs: 0, rejected: 0 },
        ];
        let seen = Observed { ticks_with_outputs: vec![200, 100], ..observed(15) };
        let summary = summarize(2, &ids, &BTreeMap::new(), &progress, None, &[], seen);
        let workers: Vec<(u64, u64)> = summary.workers.iter().map(|w| (w.events, w.ticks_with_outputs)).collect();
        assert_eq!(workers, [(200, 200), (165, 100)]);
        assert_eq!(summary.events_processed, 365);
        assert!(summary.broken_identities().is_empty(), "{:?}", summary.broken_identities());
        // A report that says less than its outputs prove contradicts them: the identity says so.
        let reports: BTreeMap<u32, WorkerReport> =
            [(0, worker(0, [10, 5], [Some(20), Some(9)])), (1, worker(1, [10, 4], [Some(20), Some(9)]))]
                .into_iter()
                .collect();
        let seen = Observed { ticks_with_outputs: vec![16, 14], ..observed(29) };
        let summary = summarize(2, &ids, &reports, &[], Some(&router([20, 9])), &[], seen);
        assert_eq!(summary.broken_identities(), ["worker w0: events 15 < 16 ticks whose outputs arrived"]);
    }

    #[test]
    fn a_stream_its_injector_cut_short_balances_and_fails_the_run() {
        let ids = vec!["w0".to_string(), "w1".to_string()];
        let reports: BTreeMap<u32, WorkerReport> =
            [(0, worker(0, [10, 5], [Some(20), Some(9)])), (1, worker(1, [10, 4], [Some(20), Some(9)]))]
                .into_iter()
                .collect();
        let mut router = router([20, 9]);
        router.cut_streams.insert(1, "its replay file has a bad line: f:10: price `x` is not a number".into());
        let summary = summarize(2, &ids, &reports, &[], Some(&router), &[], observed(29));
        assert_eq!((summary.events_sent, summary.events_processed, summary.events_lost), (Some(29), 29, Some(0)));
        assert!(!summary.complete);
        assert_eq!(
            summary.failure.as_deref(),
            Some("stream 1 was cut short by its injector: its replay file has a bad line: f:10: price `x` is not a number")
        );
    }
}
