//! From the end-of-run reports and the collector's own counts to `summary.json`: every event
//! sent is either processed or counted as lost, by the stage where it went missing.

use cep_core::report::{CauseCounts, RouterReport, WorkerProgress, WorkerReport};
use cep_core::results::{ClockOffset, HopLatencies, OutputCounts, StreamSummary, Summary, WorkerSummary};
use std::collections::BTreeMap;

/// What the collector itself observed.
#[derive(Debug, Default)]
pub struct Observed {
    /// Outputs received per rule (duplicates included).
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
}

/// Builds the summary. `workers` are the run's worker ids (from the start), `reports` the
/// reports that arrived (by worker index), `progress` the last progress of each worker (what
/// an interrupted run knows of a worker that never reported).
pub fn summarize(
    streams: u32,
    workers: &[String],
    reports: &BTreeMap<u32, WorkerReport>,
    progress: &[WorkerProgress],
    router: Option<&RouterReport>,
    observed: Observed,
) -> Summary {
    let mut summary = Summary {
        duration_s: observed.duration_s,
        latency_us: observed.latency,
        warmup_outputs: observed.warmup_outputs,
        final_outputs: observed.final_outputs,
        clock_offsets: observed.clock_offsets,
        rescales: observed.rescales,
        ..Summary::default()
    };
    let mut lost_by_cause: BTreeMap<String, u64> = BTreeMap::new();
    let mut all_sent = Some(0u64);
    for stream in 0..streams {
        let at_workers = reports.values().filter_map(|r| r.streams.iter().find(|s| s.stream == stream));
        let (mut sent, mut processed) = (None, 0);
        for seen in at_workers {
            processed += seen.processed;
            sent = sent.max(seen.sent);
        }
        let received_by_router = router.and_then(|r| r.received.get(&stream).copied());
        let lost = sent.map(|sent| sent.saturating_sub(processed));
        match (sent, lost) {
            (Some(sent), Some(lost)) if router.is_some() => {
                let before_router = sent.saturating_sub(received_by_router.unwrap_or(0)).min(lost);
                *lost_by_cause.entry("not_received_by_router".into()).or_default() += before_router;
                *lost_by_cause.entry("not_processed_by_worker".into()).or_default() += lost - before_router;
            }
            (Some(_), Some(lost)) => {
                *lost_by_cause.entry("unknown_router_report_missing".into()).or_default() += lost;
            }
            _ => {
                // Without its end marker a stream's count is unknown: what the router saw and
                // the workers did not process is the least that was lost.
                let at_least = received_by_router.unwrap_or(0).saturating_sub(processed);
                *lost_by_cause.entry("stream_never_ended".into()).or_default() += at_least;
            }
        }
        all_sent = all_sent.zip(sent).map(|(all, sent)| all + sent);
        summary.events_processed += processed;
        summary.streams.push(StreamSummary { stream, sent, received_by_router, processed, lost });
    }
    // Workers that never reported still told their progress: at least that much was processed.
    let progressed: u64 = (0..workers.len() as u32)
        .map(|index| {
            reports.get(&index).map_or_else(|| progress.get(index as usize).map_or(0, |p| p.processed), |r| r.processed)
        })
        .sum();
    summary.events_processed = summary.events_processed.max(progressed);
    // Sent is known only when every stream's end marker arrived; then so is what was lost.
    summary.events_sent = all_sent.map(|sent| sent.max(summary.events_processed));
    summary.events_lost = summary.events_sent.map(|sent| sent - summary.events_processed);
    lost_by_cause.retain(|_, count| *count > 0);
    summary.lost_by_cause = lost_by_cause;

    let reported_outputs: u64 = reports.values().map(|r| r.outputs).sum();
    let received_outputs: u64 = observed.outputs.values().sum::<u64>();
    summary.outputs_lost = reported_outputs.saturating_sub(received_outputs.saturating_sub(observed.output_duplicates));
    summary.outputs = observed.outputs;
    summary.rules = router.map(|r| r.rules.clone()).unwrap_or_default();
    summary.duplicates = observed.output_duplicates + reports.values().map(|r| r.duplicates).sum::<u64>();
    summary.out_of_order = reports.values().map(|r| r.out_of_order).sum();
    summary.late = reports.values().map(|r| r.late).sum();
    summary.late_dropped = reports.values().map(|r| r.late_dropped).sum();

    // An empty id is a worker that never ran (the router never reached it): not a member.
    for (index, id) in workers.iter().enumerate().filter(|(_, id)| !id.is_empty()) {
        let report = reports.get(&(index as u32));
        let progressed = progress.get(index).map_or(0, |p| p.processed);
        summary.workers.push(WorkerSummary {
            id: id.clone(),
            events: report.map_or(progressed, |r| r.processed),
            symbols: report.map(|r| r.symbols),
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
    let every_report =
        workers.iter().enumerate().all(|(index, id)| id.is_empty() || reports.contains_key(&(index as u32)));
    summary.complete = router.is_some() && every_report && summary.streams.iter().all(|s| s.sent.is_some());
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
        let summary = summarize(2, &ids, &reports, &[], Some(&router([20, 9])), observed(29));
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
    fn a_worker_the_router_never_reached_is_not_a_member() {
        let reports: BTreeMap<u32, WorkerReport> =
            [(0, worker(0, [10, 5], [Some(20), Some(9)])), (1, worker(1, [10, 4], [Some(20), Some(9)]))]
                .into_iter()
                .collect();
        let ids = vec!["w0".to_string(), "w1".to_string(), String::new()];
        let summary = summarize(2, &ids, &reports, &[], Some(&router([20, 9])), observed(29));
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
        let summary = summarize(2, &ids, &reports, &[], Some(&router([18, 9])), observed(20));
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
        let summary = summarize(2, &ids, &reports, &[], Some(&router([20, 9])), observed(15));
        assert!(!summary.complete);
        assert_eq!(summary.events_lost, Some(14));
        assert_eq!((summary.workers[1].events, summary.workers[1].symbols), (0, None));
        // Its last progress counts for what it processed.
        let progress = [
            WorkerProgress { processed: 15, outputs: 0, rejected: 0 },
            WorkerProgress { processed: 10, outputs: 0, rejected: 0 },
        ];
        let summary = summarize(2, &ids, &reports, &progress, Some(&router([20, 9])), observed(15));
        assert_eq!((summary.events_processed, summary.events_lost, summary.workers[1].events), (25, Some(4), 10));
    }

    #[test]
    fn an_interrupted_run_says_what_it_does_not_know() {
        let ids = vec!["w0".to_string(), "w1".to_string()];
        // Interrupted before any end report arrived: only the workers' progress is known.
        let progress = [
            WorkerProgress { processed: 175, outputs: 0, rejected: 0 },
            WorkerProgress { processed: 165, outputs: 0, rejected: 0 },
        ];
        let summary = summarize(2, &ids, &BTreeMap::new(), &progress, None, observed(15));
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
        let summary = summarize(2, &ids, &reports, &progress, Some(&router([25, 9])), observed(15));
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
}
