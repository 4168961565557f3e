//! Checkpoints and failover, the router's side (the frames: [`cep_core::failover`]).
//!
//! Every `--checkpoint-every` the router sends each active worker a [`Checkpoint`] barrier
//! behind everything it routed to it; the worker answers with a [`Snapshot`] of all its
//! symbols. Per worker the router keeps its latest snapshot and its replay log: every batch
//! routed to it since the barrier of that snapshot. A completed snapshot releases the log up
//! to its barrier. The logs are bounded in bytes: beyond `--max-replay` the router reads no
//! input (back-pressure on the injectors, never a drop) until a checkpoint completes.
//!
//! A worker's snapshot is *current* when it was taken under the membership and rules in
//! force: a rescale or a rule switch makes every snapshot stale until the next checkpoint
//! (the logs do not record state moving between workers, nor rule switches). A dead worker
//! with a current snapshot, while every stream is still open, fails over exactly: its symbols
//! go to the survivors with their state and their logged ticks. Otherwise they go on from
//! empty state, and the symbols whose state is lost are named.
//!
//! A snapshot is used only once the collector confirmed it has every output of the ticks
//! before its barrier ([`cep_core::failover::OutputsConfirmed`]); until then the log is kept
//! from the previous confirmed one, so a restore never skips an output that was lost with
//! the dead worker.

use cep_core::failover::{Snapshot, MAX_SNAPSHOT_PARTS};
use std::collections::BTreeMap;
use std::collections::{BTreeSet, VecDeque};

/// Snapshots of one worker kept while they await the collector's confirmation.
const MAX_UNCONFIRMED: usize = 8;

/// One worker's replay log: batches routed to it, and the barriers between them.
#[derive(Default)]
pub struct ReplayLog {
    entries: VecDeque<Entry>,
    bytes: usize,
    ticks: u64,
}

enum Entry {
    /// A checkpoint barrier went out here.
    Barrier(u64),
    /// A batch of ticks as sent.
    Batch(Vec<u8>, u64),
}

impl ReplayLog {
    /// Records a batch as it was sent.
    #[inline]
    pub fn batch(&mut self, frame: &[u8], ticks: usize) {
        self.bytes += frame.len();
        self.ticks += ticks as u64;
        self.entries.push_back(Entry::Batch(frame.to_vec(), ticks as u64));
    }

    /// Records that checkpoint `id`'s barrier went out here.
    pub fn barrier(&mut self, id: u64) {
        self.entries.push_back(Entry::Barrier(id));
    }

    /// Checkpoint `id` completed: everything before its barrier is released. Returns the
    /// bytes released.
    pub fn release_until(&mut self, id: u64) -> usize {
        let before = self.bytes;
        while let Some(entry) = self.entries.pop_front() {
            match entry {
                Entry::Barrier(barrier) if barrier == id => break,
                Entry::Barrier(_) => {}
                Entry::Batch(frame, ticks) => {
                    self.bytes -= frame.len();
                    self.ticks -= ticks;
                }
            }
        }
        before - self.bytes
    }

    /// Empties the log (it cannot be replayed, or was).
    pub fn clear(&mut self) -> usize {
        let bytes = self.bytes;
        self.entries.clear();
        self.bytes = 0;
        self.ticks = 0;
        bytes
    }

    /// The batches logged since the last completed checkpoint, oldest first.
    pub fn batches(&self) -> impl Iterator<Item = &[u8]> {
        self.entries.iter().filter_map(|entry| match entry {
            Entry::Batch(frame, _) => Some(frame.as_slice()),
            Entry::Barrier(_) => None,
        })
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Ticks held.
    pub fn ticks(&self) -> u64 {
        self.ticks
    }
}

/// A checkpoint whose barriers went out and whose snapshots are not all in.
struct Round {
    id: u64,
    /// Workers (by index) whose snapshot has not all come.
    waiting: BTreeSet<usize>,
    /// The parts of each worker's snapshot come so far.
    parts: BTreeMap<usize, Vec<Snapshot>>,
    /// When the barriers went out (monotonic ns).
    started: u64,
}

/// The checkpoint schedule and each worker's latest snapshot.
pub struct Checkpoints {
    /// Interval (ns); 0: checkpoints are off.
    every_ns: u64,
    /// How long (ns) a round may wait for its snapshots before it is given up.
    timeout_ns: u64,
    next_due: Option<u64>,
    next_id: u64,
    round: Option<Round>,
    /// Per worker: its latest confirmed snapshot (its parts), and whether it is current.
    latest: Vec<Option<Vec<Snapshot>>>,
    current: Vec<bool>,
    /// Per worker: snapshots taken, awaiting the collector's confirmation, oldest first.
    unconfirmed: Vec<VecDeque<Vec<Snapshot>>>,
    /// Per worker: the latest checkpoint the collector confirmed before its snapshot was all
    /// here (the mark takes a short way, the snapshot a long one).
    confirmed_early: Vec<u64>,
}

impl Checkpoints {
    /// A schedule for `workers` workers, every `every_ns` (0: off); a round not complete
    /// within `timeout_ns` is given up.
    pub fn new(workers: usize, every_ns: u64, timeout_ns: u64) -> Self {
        Checkpoints {
            every_ns,
            timeout_ns,
            next_due: None,
            next_id: 1,
            round: None,
            latest: vec![None; workers],
            unconfirmed: vec![VecDeque::new(); workers],
            confirmed_early: vec![0; workers],
            // At the start every worker's (empty) state is known: the log holds all since.
            current: vec![true; workers],
        }
    }

    /// Whether checkpoints are taken (and logs kept).
    pub fn enabled(&self) -> bool {
        self.every_ns > 0
    }

    /// A worker joined (index = the next one): it starts empty, but its state will come from
    /// another worker, which the log does not record.
    pub fn add_worker(&mut self) {
        self.latest.push(None);
        self.current.push(false);
        self.unconfirmed.push(VecDeque::new());
        self.confirmed_early.push(0);
    }

    /// The membership or the rules changed: no snapshot is current until the next round, and
    /// the round in flight (taken before the change) is dropped.
    pub fn invalidate(&mut self) {
        self.current.iter_mut().for_each(|current| *current = false);
        self.unconfirmed.iter_mut().for_each(VecDeque::clear);
        self.round = None;
    }

    /// Whether a round is due at `now` (monotonic ns): none is in flight, and the interval
    /// has passed or the replay logs are `full`. Starts the clock on the first call.
    pub fn due(&mut self, now: u64, full: bool) -> bool {
        if !self.enabled() || self.round.is_some() {
            return false;
        }
        let due = *self.next_due.get_or_insert(now.saturating_add(self.every_ns));
        full || now >= due
    }

    /// The next round starts at the next chance (a failover made every snapshot stale).
    pub fn due_now(&mut self) {
        if self.enabled() {
            self.next_due = Some(0);
        }
    }

    /// Starts round `id` for `workers` at `now`; the caller sends the barriers.
    pub fn start_round(&mut self, workers: BTreeSet<usize>, now: u64) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.next_due = Some(now.saturating_add(self.every_ns));
        self.round = Some(Round { id, waiting: workers, parts: BTreeMap::new(), started: now });
        id
    }

    /// Takes `worker`'s snapshot for the round in flight (used once the collector confirms
    /// it); refused (with the reason) if it answers no barrier that worker is waiting on. A
    /// snapshot too large to be sent leaves that worker without a current one.
    /// Returns the checkpoint it makes the one to restore from at once, when the collector
    /// confirmed it already.
    pub fn snapshot(&mut self, worker: usize, snapshot: Snapshot) -> Result<Option<u64>, String> {
        let Some(round) = self.round.as_mut().filter(|round| round.id == snapshot.id) else {
            // A round dropped by a rescale or a deployment: its late parts are of no use.
            tracing::debug!(worker, id = snapshot.id, "snapshot of a checkpoint no longer in flight");
            return Ok(None);
        };
        if !round.waiting.contains(&worker) {
            return Err(format!("worker {worker} owes no snapshot for checkpoint {}", snapshot.id));
        }
        let parts = round.parts.entry(worker).or_default();
        // Parts come in order on the worker's one control line.
        if snapshot.part as usize != parts.len()
            || snapshot.parts == 0
            || snapshot.parts > MAX_SNAPSHOT_PARTS
            || parts.first().is_some_and(|first| first.parts != snapshot.parts)
        {
            return Err(format!(
                "part {} of {} of checkpoint {} from worker {worker} does not follow the {} before it",
                snapshot.part,
                snapshot.parts,
                snapshot.id,
                parts.len()
            ));
        }
        let (id, oversize, last) = (snapshot.id, snapshot.oversize > 0, snapshot.part + 1 == snapshot.parts);
        parts.push(snapshot);
        if !last && !oversize {
            return Ok(None);
        }
        round.waiting.remove(&worker);
        let parts = round.parts.remove(&worker).unwrap_or_default();
        if oversize {
            self.current[worker] = false;
            self.unconfirmed[worker].clear();
        } else {
            // Confirmations come in order; a few at most are in flight.
            if self.unconfirmed[worker].len() >= MAX_UNCONFIRMED {
                self.unconfirmed[worker].pop_front();
            }
            self.unconfirmed[worker].push_back(parts);
        }
        if round.waiting.is_empty() {
            self.round = None;
        }
        let early = !oversize && self.confirmed_early[worker] >= id && self.confirmed(worker, id);
        Ok(early.then_some(id))
    }

    /// The collector has every output of `worker` up to checkpoint `id`: that snapshot is
    /// the one to restore from. False if no such snapshot awaits confirmation.
    pub fn confirmed(&mut self, worker: usize, id: u64) -> bool {
        let Some(waiting) = self.unconfirmed.get_mut(worker) else { return false };
        let Some(at) = waiting.iter().position(|parts| parts.first().is_some_and(|part| part.id == id)) else {
            // Its snapshot may still be on its way: taken when it is all here.
            let in_flight = self.round.as_ref().is_some_and(|round| round.id == id && round.waiting.contains(&worker));
            if in_flight {
                self.confirmed_early[worker] = self.confirmed_early[worker].max(id);
            }
            return false;
        };
        let snapshot = waiting.drain(..=at).next_back().expect("position found");
        self.latest[worker] = Some(snapshot);
        self.current[worker] = true;
        true
    }

    /// A worker is gone: no snapshot is awaited from it.
    pub fn forget(&mut self, worker: usize) {
        if let Some(round) = self.round.as_mut() {
            round.waiting.remove(&worker);
            if round.waiting.is_empty() {
                self.round = None;
            }
        }
        self.current[worker] = false;
    }

    /// Gives up a round whose snapshots have not all come within the time-out at `now`:
    /// returns the workers that did not answer.
    pub fn overdue(&mut self, now: u64) -> Option<(u64, Vec<usize>)> {
        let round = self.round.as_ref()?;
        if now.saturating_sub(round.started) < self.timeout_ns {
            return None;
        }
        let round = self.round.take().expect("checked above");
        Some((round.id, round.waiting.into_iter().collect()))
    }

    /// The snapshot a dead worker's symbols are restored from: `Some(None)` when its state is
    /// known and empty (no checkpoint yet: its log holds everything), `None` when it cannot
    /// be restored exactly.
    pub fn restorable(&self, worker: usize) -> Option<Option<&[Snapshot]>> {
        let current = self.enabled() && self.current.get(worker).copied().unwrap_or(false);
        current.then(|| self.latest[worker].as_deref())
    }
}
