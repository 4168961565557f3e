//! Checkpoints and failover, the router's side (the frames: [`cep_core::failover`]).
//!
//! One checkpoint round, end to end:
//!
//! ```text
//!  router: Checkpoints::turn, from the router's timer: due ─▶ start_round(id): per worker,
//!          mark the barrier in its replay log, send Checkpoint{id, base, retain_from}
//!          behind its ticks
//!  worker: takes the barrier in order ─▶ CheckpointMark{id} behind its outputs (to the
//!          collector) ─▶ copies its state a symbol at a time into parts, which the store
//!          writes ─▶ Snapshot{id, part: symbols, size, checksum} (control) per stored part
//!  router: Snapshot parts ─▶ take(): the chain grows; the round completes when every worker
//!          answered; overdue (no answer in time) ─▶ the round is given up, the next counts
//!  collector: the mark, once a stored save holds it ─▶ Saved{.., confirmed: [worker, id]}
//!  router: confirm(): the snapshot becomes the one to restore from; the log before its
//!          barrier is released
//!  failover: restorable(worker) ─▶ Restore{stored part} per part to the survivors, which
//!          read it from the store, then the logged ticks
//! ```
//!
//! The router holds no state of any worker: a snapshot here is what the worker stored, per
//! part its symbols (name, stream, next sequence number), size and checksum. Each barrier
//! tells the workers below which checkpoint the store may forget
//! ([`Checkpoints::retain_from`]): the router retains, per worker, the chains of its last
//! `--checkpoints-retained` confirmed checkpoints and whatever awaits confirmation, and a
//! chain a failover restores until every survivor has passed a barrier after it.
//!
//! Every `--checkpoint-every` the router sends each active worker a [`Checkpoint`] barrier
//! behind everything it routed to it; the worker stores the state of all its symbols and
//! answers with a [`Snapshot`] per stored part. Snapshots are incremental: the barrier names
//! the worker's last snapshot the router holds (its base), and the worker stores only what
//! changed since (the symbols that took ticks; of a time window, its new events). Per worker
//! the router keeps a chain, the
//! last whole snapshot and the changes after it, and asks for a whole one again (base 0)
//! once the changes take as many bytes as it (or the chain holds [`MAX_CHAIN`] snapshots): a
//! restore reads about twice the state at most, and
//! at full speed a snapshot costs the events of one interval instead of every window. It
//! keeps its replay log too: every batch routed to it since the barrier of its latest
//! snapshot. A completed snapshot releases the log up to its barrier. The logs are bounded in bytes: beyond `--max-replay` the router reads no
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
//! before its barrier ([`cep_core::failover::OutputsConfirmed`], in a Saved); until then the log is kept
//! from the previous confirmed one, so a restore never skips an output that was lost with
//! the dead worker.

use crate::data_path::DataPath;
use crate::rescaling::Rescaling;
use cep_core::clock::Monotonic;
use cep_core::failover::{Checkpoint, Snapshot, MAX_SNAPSHOT_PARTS};
use cep_core::outbox::{Event, Outbox};
use cep_core::report::bounded_reason;
use cep_core::results::CheckpointSummary;
use cep_core::store::MAX_STORED_PART_BYTES;
use std::collections::BTreeMap;
use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

/// Snapshots of one worker kept while they await the collector's confirmation.
const MAX_UNCONFIRMED: usize = 8;

/// The most snapshots in a chain (a whole one and the changes after it): a restore sends
/// every part of each.
const MAX_CHAIN: usize = 16;

/// One snapshot: its parts, in order.
type Parts = Vec<Snapshot>;

/// About the bytes a snapshot takes: its engine state (in the store) and its list of
/// symbols.
fn snapshot_bytes(parts: &Parts) -> usize {
    let symbols = |part: &Snapshot| part.symbols.iter().map(|moved| moved.symbol.len() + 16).sum::<usize>();
    parts.iter().map(|part| (part.stored.bytes as usize).saturating_add(symbols(part))).fold(0, usize::saturating_add)
}

/// A checkpoint whose barriers went out and whose snapshots are not all in.
struct Round {
    id: u64,
    /// Workers (by index) whose snapshot has not all come.
    waiting: BTreeSet<usize>,
    /// The parts of each worker's snapshot come so far.
    parts: BTreeMap<usize, Vec<Snapshot>>,
    /// When the barriers went out.
    started: Monotonic,
    /// Bytes stored for it so far, all workers.
    bytes: u64,
    /// Why it failed, if it did (a part not stored): it completes, but counts as failed.
    failure: Option<String>,
}

/// Why worker `name`'s checkpoint `id` failed: a part it could not store (`why`, as the
/// worker said it, bounded).
pub fn not_stored(name: &str, id: u64, why: &str) -> String {
    format!("{name}'s checkpoint {id} was not stored ({})", bounded_reason(why))
}

/// The checkpoint schedule and each worker's latest snapshot.
pub struct Checkpoints {
    /// Interval; zero: checkpoints are off.
    every: Duration,
    /// How long a round may wait for its snapshots before it is given up.
    timeout: Duration,
    next_due: Option<Monotonic>,
    next_id: u64,
    round: Option<Round>,
    /// Per worker: its confirmed chain (a whole snapshot, then the changes after it, oldest
    /// first; empty: none yet), and whether it is current.
    latest: Vec<Vec<Parts>>,
    current: Vec<bool>,
    /// Per worker: snapshots taken, awaiting the collector's confirmation, oldest first
    /// (changes continue the snapshot before them, the first the confirmed chain).
    unconfirmed: Vec<VecDeque<Parts>>,
    /// Per worker: the latest checkpoint the collector confirmed before its snapshot was all
    /// here (the mark takes a short way, the snapshot a long one).
    confirmed_early: Vec<u64>,
    /// How many confirmed checkpoints of each worker the store retains.
    retained: usize,
    /// Per worker: the first snapshot of the chain of each of its last `retained` confirmed
    /// checkpoints, oldest first.
    retained_chains: Vec<VecDeque<u64>>,
    /// Chains a failover restored from (their first snapshot), kept in the store until a
    /// round started after it completes (`.1`: the first such round): a survivor reads them
    /// before it takes that round's barrier.
    restoring: Vec<(u64, u64)>,
    /// Rounds completed and failed so far, for the metrics and the report.
    summary: CheckpointSummary,
}

impl Checkpoints {
    /// A schedule for `workers` workers, every `every` (zero: off); a round not complete
    /// within `timeout` is given up; the store keeps the last `retained` (at least 1)
    /// confirmed checkpoints of each worker.
    pub fn new(workers: usize, every: Duration, timeout: Duration, retained: usize) -> Self {
        Checkpoints {
            every,
            timeout,
            next_due: None,
            next_id: 1,
            round: None,
            latest: vec![Vec::new(); workers],
            unconfirmed: vec![VecDeque::new(); workers],
            confirmed_early: vec![0; workers],
            retained: retained.max(1),
            retained_chains: vec![VecDeque::new(); workers],
            restoring: Vec::new(),
            // At the start every worker's (empty) state is known: the log holds all since.
            current: vec![true; workers],
            summary: CheckpointSummary::default(),
        }
    }

    /// Rounds completed and failed so far.
    pub fn summary(&self) -> &CheckpointSummary {
        &self.summary
    }

    /// The round in flight, if any, fails (`reason` given its id): a worker died during it.
    /// It counts as failed when it completes or is dropped.
    pub fn fail_round_in_flight(&mut self, reason: impl FnOnce(u64) -> String) {
        if let Some(round) = self.round.as_mut() {
            let id = round.id;
            round.failure.get_or_insert_with(|| reason(id));
        }
    }

    fn count_failure(&mut self, reason: String) {
        self.summary.failed += 1;
        self.summary.last_failure = reason;
    }

    /// Whether checkpoints are taken (and logs kept).
    pub fn enabled(&self) -> bool {
        !self.every.is_zero()
    }

    /// A worker joined (index = the next one): it starts empty, but its state will come from
    /// another worker, which the log does not record.
    pub fn add_worker(&mut self) {
        self.latest.push(Vec::new());
        self.current.push(false);
        self.unconfirmed.push(VecDeque::new());
        self.confirmed_early.push(0);
        self.retained_chains.push(VecDeque::new());
    }

    /// The membership or the rules changed: no snapshot is current until the next round, and
    /// the round in flight (taken before the change) is dropped.
    pub fn invalidate(&mut self) {
        self.current.iter_mut().for_each(|current| *current = false);
        self.unconfirmed.iter_mut().for_each(VecDeque::clear);
        // Stale chains are never restored: the store need not keep them.
        self.retained_chains.iter_mut().for_each(VecDeque::clear);
        // A round that had failed already (a part not stored, a worker that died during it)
        // counts as failed; one dropped only because of the change counts in neither.
        if let Some(reason) = self.round.take().and_then(|round| round.failure) {
            self.count_failure(reason);
        }
    }

    /// The checkpoint turn at `now`: gives up a round whose snapshots are overdue (dropping
    /// the silent workers' logs when the replay logs are over `max_replay_bytes`), then starts
    /// a round when one is due (or the logs are full) and the input goes on: a barrier to
    /// every active worker.
    pub fn turn(
        &mut self,
        now: Monotonic,
        path: &mut DataPath,
        rescaling: &Rescaling,
        max_replay_bytes: usize,
        out: &mut impl Outbox,
    ) {
        if let Some((id, silent)) = self.overdue(now) {
            let full = path.replay_bytes() >= max_replay_bytes;
            let names: Vec<&str> = silent.iter().map(|worker| rescaling.id(*worker)).collect();
            let reason = format!(
                "checkpoint {id} given up: no snapshot from {}{}",
                names.join(", "),
                if full {
                    "; their replay logs are full and dropped: they cannot fail over exactly until the next checkpoint"
                } else {
                    ""
                }
            );
            self.count_failure(reason.clone());
            out.event(Event::CheckpointTrouble { reason });
            if full {
                for worker in silent {
                    path.drop_log(worker);
                    self.forget(worker, now);
                }
            }
        }
        let full = path.replay_bytes() >= max_replay_bytes;
        if !self.due(now, full) || path.input_ended() {
            return;
        }
        let workers = rescaling.active();
        let id = self.start_round(workers.clone(), now);
        let retain_from = self.retain_from(&workers, id);
        for worker in workers {
            path.barrier(worker, Checkpoint { id, base: self.base(worker), retain_from }, out);
        }
    }

    /// The lowest checkpoint the store must keep, as round `round` starts among `workers`
    /// (the active ones; a departed worker's snapshots are of no more use once the chains
    /// restored from them are read): the first snapshot of each worker's oldest retained
    /// chain, of what awaits confirmation, and of every chain being restored.
    pub fn retain_from(&self, workers: &BTreeSet<usize>, round: u64) -> u64 {
        let first_of = |parts: &Parts| parts.first().map(|first| first.id);
        let per_worker = workers.iter().filter_map(|&worker| {
            let retained = self.retained_chains.get(worker)?.front().copied();
            let unconfirmed = self.unconfirmed.get(worker)?.front().and_then(first_of);
            retained.into_iter().chain(unconfirmed).min()
        });
        let restoring = self.restoring.iter().map(|(first, _)| *first);
        per_worker.chain(restoring).fold(round, u64::min)
    }

    /// A failover restores `worker`'s chain (from [`Self::restorable`]): its parts stay in
    /// the store until a round started after now completes.
    pub fn restoring(&mut self, chain: &[Snapshot]) {
        if let Some(first) = chain.first() {
            self.restoring.push((first.id, self.next_id));
        }
    }

    /// Whether a round is due at `now`: none is in flight, and the interval has passed or
    /// the replay logs are `full`. Starts the clock on the first call.
    pub fn due(&mut self, now: Monotonic, full: bool) -> bool {
        if !self.enabled() || self.round.is_some() {
            return false;
        }
        let due = *self.next_due.get_or_insert(now.after(self.every));
        full || now >= due
    }

    /// The next round starts at the next chance (a failover made every snapshot stale).
    pub fn due_now(&mut self) {
        if self.enabled() {
            self.next_due = Some(Monotonic::default());
        }
    }

    /// The snapshot `worker`'s next one may build on, its barrier's base (0: it sends its
    /// whole state): the last one taken, when it continues a current chain, the changes since
    /// that chain's whole snapshot take fewer bytes than it, and the chain is not at
    /// [`MAX_CHAIN`] snapshots.
    pub fn base(&self, worker: usize) -> u64 {
        let chain = match self.current[worker] {
            true => self.latest[worker].as_slice(),
            false => &[],
        };
        let (mut last, mut whole, mut changes, mut length) = (0, 0, 0, 0);
        for parts in chain.iter().chain(&self.unconfirmed[worker]) {
            let Some(first) = parts.first() else { continue };
            match first.base {
                0 => (whole, changes, length) = (snapshot_bytes(parts), 0, 1),
                _ => (changes, length) = (changes + snapshot_bytes(parts), length + 1),
            }
            last = first.id;
        }
        if changes < whole.max(1) && length < MAX_CHAIN {
            last
        } else {
            0
        }
    }

    /// The snapshot a snapshot of `worker`'s taken now would follow (0: none).
    fn tail(&self, worker: usize) -> u64 {
        let confirmed = self.latest[worker].last().filter(|_| self.current[worker]);
        self.unconfirmed[worker].back().or(confirmed).and_then(|parts| parts.first()).map_or(0, |first| first.id)
    }

    /// Starts round `id` for `workers` at `now`; the caller sends the barriers.
    pub fn start_round(&mut self, workers: BTreeSet<usize>, now: Monotonic) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.next_due = Some(now.after(self.every));
        self.round =
            Some(Round { id, waiting: workers, parts: BTreeMap::new(), started: now, bytes: 0, failure: None });
        id
    }

    /// Takes `worker`'s snapshot for the round in flight (used once the collector confirms
    /// it); refused (with the reason) if it answers no barrier that worker is waiting on. A
    /// snapshot with a part that could not be stored leaves that worker without a current one.
    /// Returns the checkpoint it makes the one to restore from at once, when the collector
    /// confirmed it already. `name`: the worker's id, for the reason a round fails; `now`: when
    /// the part came (the round's duration ends at its last part).
    pub fn snapshot(
        &mut self,
        worker: usize,
        name: &str,
        snapshot: Snapshot,
        now: Monotonic,
    ) -> Result<Option<u64>, String> {
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
        if snapshot.stored.bytes > MAX_STORED_PART_BYTES {
            return Err(format!(
                "part {} of checkpoint {} from worker {worker} claims {} bytes, more than a stored part may",
                snapshot.part, snapshot.id, snapshot.stored.bytes
            ));
        }
        if snapshot.part as usize != parts.len()
            || snapshot.parts == 0
            || snapshot.parts > MAX_SNAPSHOT_PARTS
            || parts.first().is_some_and(|first| first.parts != snapshot.parts || first.base != snapshot.base)
        {
            return Err(format!(
                "part {} of {} of checkpoint {} from worker {worker} does not follow the {} before it",
                snapshot.part,
                snapshot.parts,
                snapshot.id,
                parts.len()
            ));
        }
        let (id, oversize, last) = (snapshot.id, !snapshot.unstored.is_empty(), snapshot.part + 1 == snapshot.parts);
        round.bytes += snapshot.stored.bytes;
        if oversize {
            round.failure.get_or_insert_with(|| not_stored(name, id, &snapshot.unstored));
        }
        parts.push(snapshot);
        if !last && !oversize {
            return Ok(None);
        }
        round.waiting.remove(&worker);
        let parts = round.parts.remove(&worker).unwrap_or_default();
        let base = parts.first().map_or(0, |first| first.base);
        let unlinked = base != 0 && base != self.tail(worker);
        let unlinked_reason =
            || format!("{name}'s checkpoint {id} holds changes since {base}, which the router does not hold");
        if let Some(round) = self.round.as_mut().filter(|round| unlinked && round.id == id) {
            round.failure.get_or_insert_with(unlinked_reason);
        }
        if self.round.as_ref().is_some_and(|round| round.waiting.is_empty()) {
            self.round_complete(now);
        }
        if oversize || unlinked {
            // Nothing to restore from until a whole snapshot is stored (the next barrier asks).
            self.current[worker] = false;
            self.unconfirmed[worker].clear();
            self.retained_chains[worker].clear();
            if unlinked {
                return Err(unlinked_reason());
            }
        } else {
            // Confirmations come in order; a few at most are in flight. Changes whose
            // snapshot before is dropped are of no use either.
            let waiting = &mut self.unconfirmed[worker];
            if waiting.len() >= MAX_UNCONFIRMED {
                waiting.pop_front();
                while waiting.front().is_some_and(|parts| parts.first().is_some_and(|first| first.base != 0)) {
                    waiting.pop_front();
                }
                if base != 0 && base != self.tail(worker) {
                    // This one's chain is gone too.
                    return Ok(None);
                }
            }
            self.unconfirmed[worker].push_back(parts);
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
        for parts in waiting.drain(..=at) {
            if parts.first().is_some_and(|first| first.base == 0) {
                self.latest[worker].clear();
            }
            self.latest[worker].push(parts);
            let chains = &mut self.retained_chains[worker];
            chains.extend(self.latest[worker].first().and_then(|parts| parts.first()).map(|first| first.id));
            while chains.len() > self.retained {
                chains.pop_front();
            }
        }
        self.current[worker] = true;
        true
    }

    /// A worker is gone (at `now`): no snapshot is awaited from it.
    pub fn forget(&mut self, worker: usize, now: Monotonic) {
        if let Some(round) = self.round.as_mut().filter(|round| round.waiting.contains(&worker)) {
            round.waiting.remove(&worker);
            let id = round.id;
            round.failure.get_or_insert_with(|| format!("checkpoint {id}: a worker was gone before its snapshot"));
            if round.waiting.is_empty() {
                self.round_complete(now);
            }
        }
        self.current[worker] = false;
        // Its log may be dropped: a later confirmation must not make these current.
        self.unconfirmed[worker].clear();
        self.retained_chains[worker].clear();
    }

    /// Every worker of the round in flight answered (the last at `now`): the survivors of a
    /// failover before it have read what they restore. It counts as completed or failed.
    fn round_complete(&mut self, now: Monotonic) {
        let Some(round) = self.round.take() else { return };
        self.restoring.retain(|(_, until)| *until > round.id);
        match round.failure {
            Some(reason) => self.count_failure(reason),
            None => {
                self.summary.completed += 1;
                self.summary.last_completed = round.id;
                self.summary.last_duration_ms = now.since(round.started).as_secs_f64() * 1e3;
                self.summary.last_bytes = round.bytes;
            }
        }
    }

    /// Gives up a round whose snapshots have not all come within the time-out at `now`:
    /// returns the workers that did not answer.
    pub fn overdue(&mut self, now: Monotonic) -> Option<(u64, Vec<usize>)> {
        let round = self.round.as_ref()?;
        if now.since(round.started) < self.timeout {
            return None;
        }
        let round = self.round.take().expect("checked above");
        Some((round.id, round.waiting.into_iter().collect()))
    }

    /// The snapshot parts a dead worker's symbols are restored from, in order (its whole
    /// snapshot's, then each of its changes'): `Some(None)` when its state is known and
    /// empty (no checkpoint yet: its log holds everything), `None` when it cannot be
    /// restored exactly.
    pub fn restorable(&self, worker: usize) -> Option<Option<Vec<Snapshot>>> {
        let current = self.enabled() && self.current.get(worker).copied().unwrap_or(false);
        let chain = &self.latest[worker];
        current.then(|| (!chain.is_empty()).then(|| chain.iter().flatten().cloned().collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Worker 0's snapshot for checkpoint `id` over `base`, of `bytes` bytes of state.
    fn snapshot(id: u64, base: u64, bytes: usize) -> Snapshot {
        Snapshot {
            id,
            base,
            from: 0,
            part: 0,
            parts: 1,
            symbols: Vec::new(),
            stored: cep_core::failover::StoredPart { bytes: bytes as u64, checksum: 0 },
            processed: [(0, id)].into(),
            outputs: id,
            unstored: String::new(),
        }
    }

    /// Takes round `id`: its snapshot over the base the barrier named, and the collector's
    /// confirmation when `confirm`. Returns the base.
    fn round(checkpoints: &mut Checkpoints, id: u64, bytes: usize, confirm: bool) -> u64 {
        let base = checkpoints.base(0);
        assert_eq!(checkpoints.start_round([0].into(), Monotonic::from_ns(id)), id);
        checkpoints.snapshot(0, "w", snapshot(id, base, bytes), Monotonic::from_ns(0)).unwrap();
        if confirm {
            assert!(checkpoints.confirmed(0, id));
        }
        base
    }

    #[test]
    fn rounds_count_as_completed_with_their_figures_or_as_failed_with_the_reason() {
        let ms = |ms: u64| Monotonic::from_ns(ms * 1_000_000);
        let mut checkpoints = Checkpoints::new(2, Duration::from_secs(1), Duration::from_secs(5), 1);
        // Round 1: both workers store theirs, the last 40 ms after the barriers.
        checkpoints.start_round([0, 1].into(), ms(1_000));
        checkpoints.snapshot(0, "w", part_of(0, 1, 0, 100), ms(1_010)).unwrap();
        assert_eq!(checkpoints.summary().completed, 0, "not before every worker answered");
        checkpoints.snapshot(1, "w", part_of(1, 1, 0, 50), ms(1_040)).unwrap();
        let expected = CheckpointSummary {
            completed: 1,
            last_completed: 1,
            last_duration_ms: 40.0,
            last_bytes: 150,
            ..Default::default()
        };
        assert_eq!(checkpoints.summary(), &expected);
        // Round 2: worker 1 could not store its part.
        checkpoints.start_round([0, 1].into(), ms(2_000));
        checkpoints.snapshot(0, "worker-0", part_of(0, 2, 1, 10), ms(2_010)).unwrap();
        let unstored = Snapshot { unstored: "disk full".into(), ..part_of(1, 2, 0, 0) };
        checkpoints.snapshot(1, "worker-1", unstored, ms(2_020)).unwrap();
        assert_eq!((checkpoints.summary().completed, checkpoints.summary().failed), (1, 1));
        assert_eq!(checkpoints.summary().last_failure, "worker-1's checkpoint 2 was not stored (disk full)");
        // Round 3: a worker dies during it (the round is dropped, as failed).
        checkpoints.start_round([0, 1].into(), ms(2_500));
        checkpoints.fail_round_in_flight(|id| format!("checkpoint {id}: worker-1 died"));
        checkpoints.invalidate();
        assert_eq!(checkpoints.summary().failed, 2);
        assert_eq!(checkpoints.summary().last_failure, "checkpoint 3: worker-1 died");
        // A round a rescale drops counts in neither.
        checkpoints.start_round([0, 1].into(), ms(2_600));
        checkpoints.invalidate();
        assert_eq!((checkpoints.summary().completed, checkpoints.summary().failed), (1, 2));
        assert_eq!(checkpoints.summary().last_completed, 1, "the last completed one stays");
        // Round 5: given up (the time-out).
        checkpoints.start_round([0, 1].into(), ms(3_000));
        let ids = ["a".to_string(), "b".to_string()];
        let mut path = DataPath::new(&ids, 16, 1, 10, 1 << 20);
        let rescaling = Rescaling::new(&ids, 4, 16, Duration::from_secs(1));
        let mut out = cep_core::outbox::Recorded::default();
        checkpoints.turn(ms(9_000), &mut path, &rescaling, usize::MAX, &mut out);
        assert_eq!(checkpoints.summary().failed, 3);
        assert!(checkpoints.summary().last_failure.starts_with("checkpoint 5 given up: no snapshot from a, b"));
    }

    /// The ids of the snapshots a restore would read, in order.
    fn chain(checkpoints: &Checkpoints) -> Vec<u64> {
        checkpoints.restorable(0).unwrap().unwrap().iter().map(|part| part.id).collect()
    }

    #[test]
    fn changes_build_on_the_last_snapshot_until_they_outgrow_the_whole_one() {
        let mut checkpoints = Checkpoints::new(1, Duration::from_nanos(1), Duration::MAX, 1);
        assert_eq!(checkpoints.restorable(0), Some(None), "nothing yet: the log holds everything");
        assert_eq!(round(&mut checkpoints, 1, 100, true), 0, "the first is whole");
        assert_eq!(round(&mut checkpoints, 2, 40, true), 1);
        assert_eq!(round(&mut checkpoints, 3, 40, true), 2);
        assert_eq!(chain(&checkpoints), [1, 2, 3]);
        // 80 bytes of changes on a 100-byte state: one more.
        assert_eq!(round(&mut checkpoints, 4, 40, true), 3);
        assert_eq!(chain(&checkpoints), [1, 2, 3, 4]);
        // 120 bytes of changes: the next is whole, and the chain starts again from it.
        assert_eq!(round(&mut checkpoints, 5, 90, true), 0);
        assert_eq!(chain(&checkpoints), [5]);
        // Unconfirmed snapshots are built on too, and confirmed in order.
        assert_eq!(round(&mut checkpoints, 6, 10, false), 5);
        assert_eq!(round(&mut checkpoints, 7, 10, false), 6);
        assert_eq!(chain(&checkpoints), [5]);
        assert!(checkpoints.confirmed(0, 7));
        assert_eq!(chain(&checkpoints), [5, 6, 7]);
    }

    /// Worker `worker`'s part of round `id` over `base`.
    fn part_of(worker: u32, id: u64, base: u64, bytes: usize) -> Snapshot {
        Snapshot { from: worker, ..snapshot(id, base, bytes) }
    }

    #[test]
    fn the_store_keeps_what_a_restore_may_read_and_no_more() {
        let mut checkpoints = Checkpoints::new(2, Duration::from_nanos(1), Duration::MAX, 1);
        let both: BTreeSet<usize> = [0, 1].into();
        // Round 1: both whole, confirmed. Round 2: worker 0 changes, worker 1 whole again.
        let id = checkpoints.start_round(both.clone(), Monotonic::from_ns(1));
        assert_eq!(checkpoints.retain_from(&both, id), 1, "nothing retained yet: all below the round");
        for worker in 0..2 {
            checkpoints.snapshot(worker, "w", part_of(worker as u32, 1, 0, 100), Monotonic::from_ns(0)).unwrap();
            assert!(checkpoints.confirmed(worker, 1));
        }
        checkpoints.start_round(both.clone(), Monotonic::from_ns(2));
        checkpoints.snapshot(0, "w", part_of(0, 2, 1, 10), Monotonic::from_ns(0)).unwrap();
        checkpoints.snapshot(1, "w", part_of(1, 2, 0, 100), Monotonic::from_ns(0)).unwrap();
        assert!(checkpoints.confirmed(0, 2) && checkpoints.confirmed(1, 2));
        // Worker 0 restores from 1 and 2; worker 1 from 2 alone.
        assert_eq!(checkpoints.retain_from(&both, 3), 1);
        assert_eq!(checkpoints.retain_from(&[1].into(), 3), 2, "a departed worker holds nothing back");
        // Worker 0 dies: a failover reads its chain until a round after it completes.
        let chain = checkpoints.restorable(0).unwrap().unwrap();
        checkpoints.restoring(&chain);
        checkpoints.invalidate();
        let survivor: BTreeSet<usize> = [1].into();
        assert_eq!(checkpoints.retain_from(&survivor, 3), 1, "the restored chain is kept");
        let id = checkpoints.start_round(survivor.clone(), Monotonic::from_ns(3));
        assert_eq!(checkpoints.retain_from(&survivor, id), 1, "its survivors have not all passed a barrier after it");
        checkpoints.snapshot(1, "w", part_of(1, id, 0, 100), Monotonic::from_ns(0)).unwrap();
        assert_eq!(checkpoints.retain_from(&survivor, 4), 3, "the round after it completed; stale chains go");
        assert!(checkpoints.confirmed(1, 3));
        assert_eq!(checkpoints.retain_from(&survivor, 4), 3);
    }

    #[test]
    fn more_retained_checkpoints_keep_their_chains() {
        let mut checkpoints = Checkpoints::new(1, Duration::from_nanos(1), Duration::MAX, 2);
        let one: BTreeSet<usize> = [0].into();
        round(&mut checkpoints, 1, 100, true);
        round(&mut checkpoints, 2, 10, true);
        assert_eq!(checkpoints.retain_from(&one, 3), 1);
        // A whole one starts a new chain: the one before is still one of the last two.
        checkpoints.start_round(one.clone(), Monotonic::from_ns(3));
        checkpoints.snapshot(0, "w", snapshot(3, 0, 100), Monotonic::from_ns(0)).unwrap();
        assert!(checkpoints.confirmed(0, 3));
        assert_eq!(checkpoints.retain_from(&one, 4), 1, "checkpoint 2 (chain 1, 2) is retained");
        round(&mut checkpoints, 4, 10, true);
        assert_eq!(checkpoints.retain_from(&one, 5), 3, "the last two (3, 4) need 3 on");
    }

    #[test]
    fn a_chain_of_tiny_changes_ends_at_its_most_snapshots() {
        let mut checkpoints = Checkpoints::new(1, Duration::from_nanos(1), Duration::MAX, 1);
        round(&mut checkpoints, 1, 1_000_000, true);
        for id in 2..=MAX_CHAIN as u64 {
            assert_eq!(round(&mut checkpoints, id, 1, true), id - 1);
        }
        assert_eq!(chain(&checkpoints).len(), MAX_CHAIN);
        assert_eq!(checkpoints.base(0), 0, "a whole one next");
    }

    #[test]
    fn a_change_of_membership_or_a_lost_link_asks_for_a_whole_snapshot() {
        let mut checkpoints = Checkpoints::new(1, Duration::from_nanos(1), Duration::MAX, 1);
        round(&mut checkpoints, 1, 100, true);
        round(&mut checkpoints, 2, 10, true);
        checkpoints.invalidate();
        assert_eq!(checkpoints.base(0), 0);
        assert_eq!(checkpoints.restorable(0), None);
        // Taken, not yet confirmed: the next builds on it.
        assert_eq!(round(&mut checkpoints, 3, 100, false), 0);
        assert_eq!(checkpoints.base(0), 3);
        assert!(checkpoints.confirmed(0, 3));
        assert_eq!(chain(&checkpoints), [3]);
        // Changes over a snapshot the router does not hold are refused, and the next is whole.
        checkpoints.start_round([0].into(), Monotonic::from_ns(4));
        let error = checkpoints.snapshot(0, "w", snapshot(4, 2, 10), Monotonic::from_ns(0)).unwrap_err();
        assert!(error.contains("does not hold"), "{error}");
        assert_eq!(checkpoints.base(0), 0);
        assert_eq!(checkpoints.restorable(0), None);
    }

    #[test]
    fn changes_whose_snapshot_before_was_dropped_are_dropped_too() {
        let mut checkpoints = Checkpoints::new(1, Duration::from_nanos(1), Duration::MAX, 1);
        round(&mut checkpoints, 1, 1000, true);
        // The collector confirms nothing for a while (it is down): a few are kept.
        for id in 2..2 + MAX_UNCONFIRMED as u64 {
            assert_eq!(round(&mut checkpoints, id, 1, false), id - 1);
        }
        // One more drops the oldest, and with it every change that built on it.
        let id = 2 + MAX_UNCONFIRMED as u64;
        round(&mut checkpoints, id, 1, false);
        assert!(checkpoints.unconfirmed[0].is_empty());
        assert!(!checkpoints.confirmed(0, id));
        assert_eq!(chain(&checkpoints), [1], "the confirmed chain is still good");
        // The barrier names 1, not the worker's last snapshot: it sends its whole state.
        assert_eq!(checkpoints.base(0), 1);
    }
}
