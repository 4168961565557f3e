//! The one line a run ends with: `OK:` and what it did, or `FAILED:` and why. The YCSB lines
//! stay in report.txt for tools; a person reads this.

use super::Summary;

impl Summary {
    /// What makes the run fail, in one phrase: incomplete, events or outputs lost, duplicates.
    /// `None` when every event was processed exactly once and every output delivered.
    pub fn problem(&self) -> Option<String> {
        if let Some(incomplete) = self.incomplete() {
            return Some(incomplete);
        }
        if self.events_lost != Some(0) || self.outputs_lost > 0 || self.duplicates > 0 {
            return Some(format!(
                "{} events lost{}, {} outputs lost, {} duplicates",
                known_grouped(self.events_lost),
                self.lost_causes(),
                grouped(self.outputs_lost),
                grouped(self.duplicates)
            ));
        }
        None
    }

    /// `run incomplete (<why>): <counts>` for a run that did not complete.
    pub fn incomplete(&self) -> Option<String> {
        (!self.complete).then(|| format!("run incomplete ({}): {}", self.incomplete_because(), self.counts()))
    }

    /// The causes of lost events with their counts, ` (worker_died 1,000, ...)`, or nothing.
    pub fn lost_causes(&self) -> String {
        let causes: Vec<String> =
            self.lost_by_cause.iter().map(|(cause, count)| format!("{cause} {}", grouped(*count))).collect();
        if causes.is_empty() {
            String::new()
        } else {
            format!(" ({})", causes.join(", "))
        }
    }

    /// The verdict line, e.g. `OK: 2,000,000 ticks, 0 lost, complete; p50 455 us, p99 11.4 ms;
    /// 2 workers; report: results/report.html`, or `FAILED: ` and [`Summary::problem`].
    /// `report` is where the run's report.html is.
    pub fn verdict(&self, report: &str) -> String {
        format!("{}; report: {report}", self.verdict_figures())
    }

    /// The verdict without where its report is: `OK: ...` or `FAILED: ...`.
    pub fn verdict_figures(&self) -> String {
        if let Some(problem) = self.problem() {
            return format!("FAILED: {problem}");
        }
        let latency = &self.latency_us.end_to_end;
        let latency = match latency.count {
            0 => "no output measured".to_string(),
            _ => format!("p50 {}, p99 {}", readable_micros(latency.p50), readable_micros(latency.p99)),
        };
        // At the end: neither dead nor gone with `cep cluster remove`.
        let left = |id: &str| self.rescales.iter().any(|r| r.kind == "leave" && r.finished && r.worker == id);
        let alive = self.workers.iter().filter(|worker| !worker.failed && !left(&worker.id)).count();
        let workers = match (alive, self.failovers.len()) {
            (1, 0) => "1 worker".to_string(),
            (alive, 0) => format!("{alive} workers"),
            (alive, 1) => format!("{alive} workers after 1 failover"),
            (alive, failovers) => format!("{alive} workers after {failovers} failovers"),
        };
        let bounded = match self.outputs_not_written {
            0 => String::new(),
            rows => format!("; outputs.csv full: {} rows not written", grouped(rows)),
        };
        // The outputs are right, but a worker that had died would not have failed over exactly.
        let checkpoints = match (self.checkpoints.failed, self.checkpoints.last_failure.as_str()) {
            (0, _) => String::new(),
            (1, last) => format!("; 1 checkpoint failed ({last})"),
            (failed, last) => format!("; {failed} checkpoints failed (the last: {last})"),
        };
        format!(
            "OK: {} ticks, 0 lost, complete; {latency}; {workers}{bounded}{checkpoints}",
            grouped(self.events_processed)
        )
    }
}

/// A count with thousands separated by commas: 2,200,000.
pub fn grouped(count: u64) -> String {
    let digits = count.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// A count with its thousands grouped, or `unknown` when it was never reported.
pub fn known_grouped(count: Option<u64>) -> String {
    count.map_or_else(|| super::known(None), grouped)
}

/// A latency in the unit that reads best: `455 us`, `11.4 ms`, `2.31 s`.
pub fn readable_micros(micros: f64) -> String {
    match micros {
        m if m < 1_000.0 => format!("{m:.0} us"),
        m if m < 100_000.0 => format!("{:.1} ms", m / 1_000.0),
        m if m < 1_000_000.0 => format!("{:.0} ms", m / 1_000.0),
        m => format!("{:.2} s", m / 1_000_000.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{LatencySummary, WorkerSummary};

    fn complete_run() -> Summary {
        let worker = |id: &str| WorkerSummary {
            id: id.to_string(),
            events: 1_100_000,
            symbols: None,
            failed: false,
            ticks_with_outputs: 0,
        };
        let mut summary = Summary {
            events_sent: Some(2_200_000),
            events_processed: 2_200_000,
            events_lost: Some(0),
            complete: true,
            workers: vec![worker("worker-0"), worker("worker-1")],
            ..Summary::default()
        };
        summary.latency_us.end_to_end =
            LatencySummary { count: 10, p50: 455.2, p99: 11_412.0, ..LatencySummary::default() };
        summary
    }

    #[test]
    fn a_complete_run_reads_ok_with_its_figures() {
        assert_eq!(
            complete_run().verdict("results/report.html"),
            "OK: 2,200,000 ticks, 0 lost, complete; p50 455 us, p99 11.4 ms; 2 workers; report: results/report.html"
        );
    }

    #[test]
    fn failed_checkpoints_are_named_on_a_good_runs_verdict() {
        let mut summary = complete_run();
        summary.checkpoints.completed = 4;
        summary.checkpoints.failed = 1;
        summary.checkpoints.last_failure = "worker-0's checkpoint 3 was not stored (disk full)".into();
        assert_eq!(
            summary.verdict_figures(),
            "OK: 2,200,000 ticks, 0 lost, complete; p50 455 us, p99 11.4 ms; 2 workers; 1 checkpoint failed \
             (worker-0's checkpoint 3 was not stored (disk full))"
        );
        summary.checkpoints.failed = 3;
        assert!(summary
            .verdict_figures()
            .ends_with("; 3 checkpoints failed (the last: worker-0's checkpoint 3 was not stored (disk full))"));
    }

    #[test]
    fn a_run_that_lost_events_reads_failed_with_the_cause() {
        let mut summary = complete_run();
        summary.events_processed = 2_199_000;
        summary.events_lost = Some(1_000);
        summary.lost_by_cause.insert("worker_died".to_string(), 1_000);
        assert_eq!(
            summary.verdict("out/report.html"),
            "FAILED: 1,000 events lost (worker_died 1,000), 0 outputs lost, 0 duplicates; report: out/report.html"
        );
    }

    #[test]
    fn an_incomplete_run_reads_failed_with_what_never_came() {
        let mut summary = complete_run();
        summary.complete = false;
        summary.failure = Some("the router was lost".to_string());
        let verdict = summary.verdict("r/report.html");
        assert!(verdict.starts_with("FAILED: run incomplete (the router was lost): "), "{verdict}");
    }

    #[test]
    fn counts_and_latencies_read_in_their_best_unit() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1_000), "1,000");
        assert_eq!(grouped(12_345_678), "12,345,678");
        assert_eq!(readable_micros(78.4), "78 us");
        assert_eq!(readable_micros(45_600.0), "45.6 ms");
        assert_eq!(readable_micros(250_000.0), "250 ms");
        assert_eq!(readable_micros(2_310_000.0), "2.31 s");
    }
}
