//! The progress line's figures, lined up at one instant. The router reports what it has
//! received from the injectors and each worker what it has processed and output, every half
//! second, each with the instant its counts held (the run's reference time). Taken as they
//! arrive, the counts are of different ages, and "sent minus processed" would mostly measure
//! how old the workers' reports are. So the figures are taken at the latest instant that
//! every node's reports reach, each count interpolated between the two reports around it: the
//! backlog is then what was in the cluster at that instant.

use std::collections::VecDeque;

/// Reports kept per node: enough to find two around the line's instant.
const KEPT: usize = 4;

/// A node whose last report is older than this no longer holds the line's instant back (a
/// dead worker, one whose reports wait behind its outputs): its last count stands.
const STALE_NS: u64 = 1_500_000_000;

/// One node's recent reports: (instant, count), in order of instant.
#[derive(Clone, Debug, Default)]
struct Reports {
    samples: VecDeque<(u64, u64)>,
    /// Its last report was its final one: its count no longer changes.
    finished: bool,
}

impl Reports {
    fn push(&mut self, at: u64, count: u64, finished: bool) {
        // A final count holds from its report on, even stamped (by the collector's clock)
        // before the node's own last report.
        let at = match finished {
            true => self.last_at().map_or(at, |last| last.max(at)),
            false => at,
        };
        self.finished |= finished;
        // A report older than the last (reordered, or from a node whose clock stepped) adds
        // nothing the line can use.
        if self.samples.back().is_some_and(|&(last, _)| at < last) {
            return;
        }
        if self.samples.len() == KEPT {
            self.samples.pop_front();
        }
        self.samples.push_back((at, count));
    }

    fn last_at(&self) -> Option<u64> {
        self.samples.back().map(|&(at, _)| at)
    }

    /// Its last report's instant, while it holds the line's instant back at `now`: it still
    /// reports.
    fn live_at(&self, now: u64) -> Option<u64> {
        self.last_at().filter(|&at| !self.finished && at.saturating_add(STALE_NS) >= now)
    }

    /// The count at `instant`: on the line between the reports around it; before the first,
    /// the first's count; after the last, the last's.
    fn at(&self, instant: u64) -> u64 {
        let Some(&(first_at, first)) = self.samples.front() else { return 0 };
        if instant <= first_at {
            return first;
        }
        let mut before = (first_at, first);
        for &(at, count) in &self.samples {
            if at >= instant {
                let (before_at, before_count) = before;
                // A count that fell (never on the wire, but a report is hostile input) is taken
                // as it stands.
                if at == before_at || count <= before_count {
                    return count;
                }
                let span = u128::from(at - before_at);
                let part = u128::from(instant - before_at);
                return before_count.saturating_add((u128::from(count - before_count) * part / span) as u64);
            }
            before = (at, count);
        }
        before.1
    }
}

/// The figures of one progress line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Figures {
    /// The instant they hold at (reference ns).
    pub at_ns: u64,
    /// Ticks the router had received from the injectors; `None` before its first report.
    pub sent: Option<u64>,
    /// Ticks each worker (by index) had processed.
    pub processed: Vec<u64>,
    /// Outputs the workers had sent, all rules.
    pub outputs: u64,
}

impl Figures {
    /// Ticks processed, all workers.
    pub fn processed_total(&self) -> u64 {
        saturating_sum(&self.processed)
    }

    /// Ticks sent and not yet processed (none where replays processed some twice).
    pub fn backlog(&self) -> Option<u64> {
        self.sent.map(|sent| sent.saturating_sub(self.processed_total()))
    }
}

/// A sum of counts read off the wire, which may be anything.
pub fn saturating_sum<'a>(counts: impl IntoIterator<Item = &'a u64>) -> u64 {
    counts.into_iter().fold(0, |total, count| total.saturating_add(*count))
}

/// One worker's recent counts.
#[derive(Clone, Debug, Default)]
struct WorkerReports {
    processed: Reports,
    outputs: Reports,
}

/// Every node's recent counts.
#[derive(Clone, Debug, Default)]
pub struct Lineup {
    router: Reports,
    /// By worker index.
    workers: Vec<WorkerReports>,
    /// The last figures' instant: a line never goes back in time (a node silent for a while
    /// may report again, from before it).
    last_at: u64,
}

impl Lineup {
    /// The router had received `received` ticks at `at`; `finished`: its final count.
    pub fn router(&mut self, at: u64, received: u64, finished: bool) {
        self.router.push(at, received, finished);
    }

    /// Worker `index` had processed `processed` ticks and sent `outputs` at `at`; `finished`:
    /// its final counts. The caller bounds `index` (the run's workers).
    pub fn worker(&mut self, index: usize, at: u64, (processed, outputs): (u64, u64), finished: bool) {
        if index >= self.workers.len() {
            self.workers.resize_with(index + 1, Default::default);
        }
        let worker = &mut self.workers[index];
        worker.processed.push(at, processed, finished);
        worker.outputs.push(at, outputs, finished);
    }

    /// Worker `index` died and its symbols went on from a checkpoint at which it had
    /// processed `processed` ticks and sent `outputs` (the survivors process the rest again):
    /// those are its counts from `at` on.
    pub fn worker_failed(&mut self, index: usize, at: u64, (processed, outputs): (u64, u64)) {
        if let Some(worker) = self.workers.get_mut(index) {
            *worker = WorkerReports::default();
        }
        self.worker(index, at, (processed, outputs), true);
    }

    /// The figures at the latest instant, up to `now`, that every node still reporting has
    /// reported (never before the last figures'); `workers`: how many the line names.
    pub fn figures(&mut self, now: u64, workers: usize) -> Figures {
        let nodes = || std::iter::once(&self.router).chain(self.workers.iter().map(|worker| &worker.processed));
        let at_ns = nodes().filter_map(|node| node.live_at(now)).min().unwrap_or(now).min(now).max(self.last_at);
        self.last_at = at_ns;
        let processed =
            (0..workers).map(|index| self.workers.get(index).map_or(0, |worker| worker.processed.at(at_ns))).collect();
        let outputs = self.workers.iter().fold(0u64, |total, worker| total.saturating_add(worker.outputs.at(at_ns)));
        let sent = self.router.last_at().map(|_| self.router.at(at_ns));
        Figures { at_ns, sent, processed, outputs }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn counts_are_taken_at_the_instant_every_node_reached() {
        let mut lineup = Lineup::default();
        // 200 ticks per ms; the router reports at 500 and 1000 ms, the workers in other phases.
        lineup.router(500 * MS, 100_000, false);
        lineup.router(1000 * MS, 200_000, false);
        lineup.worker(0, 300 * MS, (30_000, 3_000), false);
        lineup.worker(0, 800 * MS, (80_000, 8_000), false);
        lineup.worker(1, 600 * MS, (59_000, 5_900), false);
        lineup.worker(1, 1100 * MS, (109_000, 10_900), false);
        let figures = lineup.figures(1150 * MS, 2);
        // Worker 0's last report (800 ms) is the oldest: everything as of then.
        assert_eq!(figures.at_ns, 800 * MS);
        assert_eq!(figures.sent, Some(160_000));
        assert_eq!(figures.processed, [80_000, 79_000]);
        assert_eq!(figures.outputs, 15_900);
        assert_eq!(figures.backlog(), Some(1_000));
    }

    #[test]
    fn a_silent_or_finished_node_holds_nothing_back() {
        let mut lineup = Lineup::default();
        lineup.router(1000 * MS, 200_000, false);
        lineup.router(1500 * MS, 300_000, false);
        lineup.worker(0, 1500 * MS, (150_000, 10), false);
        // Worker 1 died at 400 ms; worker 2 finished at 1000 ms.
        lineup.worker(1, 400 * MS, (40_000, 20), false);
        lineup.worker(2, 900 * MS, (45_000, 30), false);
        lineup.worker(2, 1000 * MS, (50_000, 40), true);
        let figures = lineup.figures(2000 * MS, 3);
        assert_eq!(figures.at_ns, 1500 * MS);
        assert_eq!(figures.processed, [150_000, 40_000, 50_000]);
        assert_eq!(figures.outputs, 70);
        assert_eq!(figures.backlog(), Some(60_000));
        // Once every node finished, the line holds at the collector's now.
        lineup.router(1600 * MS, 300_000, true);
        lineup.worker(0, 1600 * MS, (160_000, 11), true);
        assert_eq!(lineup.figures(2000 * MS, 3).at_ns, 2000 * MS);
    }

    #[test]
    fn before_any_report_nothing_is_sent_and_nothing_processed() {
        let figures = Lineup::default().figures(7, 2);
        assert_eq!(figures, Figures { at_ns: 7, sent: None, processed: vec![0, 0], outputs: 0 });
        assert_eq!(figures.backlog(), None);
    }

    #[test]
    fn a_report_older_than_the_last_is_ignored_and_a_count_that_fell_is_taken_as_it_stands() {
        let mut reports = Reports::default();
        reports.push(10, 100, false);
        reports.push(5, 50, false);
        reports.push(20, 90, false);
        assert_eq!(reports.samples, [(10, 100), (20, 90)]);
        assert_eq!(reports.at(15), 90);
        for at in 0..KEPT as u64 + 2 {
            reports.push(30 + at, at, false);
        }
        assert_eq!(reports.samples.len(), KEPT);
        // A final count stamped before the last report still counts, from the last one on.
        reports.push(1, 500, true);
        assert_eq!((reports.at(u64::MAX), reports.last_at(), reports.finished), (500, Some(35), true));
    }

    #[test]
    fn the_line_never_goes_back_and_a_failed_worker_counts_what_its_checkpoint_holds() {
        let mut lineup = Lineup::default();
        lineup.router(3000 * MS, 600_000, false);
        lineup.worker(0, 3000 * MS, (300_000, 30), false);
        // Worker 1's reports waited behind its outputs: silent long enough to hold nothing back.
        lineup.worker(1, 1000 * MS, (100_000, 10), false);
        assert_eq!(lineup.figures(3100 * MS, 2).at_ns, 3000 * MS);
        // It reports again, from before the last line's instant: the next line holds there.
        lineup.worker(1, 2000 * MS, (200_000, 20), false);
        let figures = lineup.figures(3200 * MS, 2);
        assert_eq!((figures.at_ns, figures.processed.as_slice()), (3000 * MS, &[300_000, 200_000][..]));
        // It died; its symbols went on from a checkpoint where it had processed 180,000.
        lineup.router(3500 * MS, 700_000, false);
        lineup.worker(0, 3500 * MS, (350_000, 35), false);
        lineup.worker_failed(1, 3400 * MS, (180_000, 18));
        let figures = lineup.figures(3600 * MS, 2);
        assert_eq!(
            (figures.at_ns, figures.processed.as_slice(), figures.outputs),
            (3500 * MS, &[350_000, 180_000][..], 53)
        );
    }

    #[test]
    fn more_processed_than_sent_is_no_backlog() {
        let figures = Figures { at_ns: 0, sent: Some(10), processed: vec![8, 4], outputs: 0 };
        assert_eq!(figures.backlog(), Some(0));
    }
}
