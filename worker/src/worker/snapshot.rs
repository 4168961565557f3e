//! Copy-on-write snapshots: a checkpoint's state is taken a symbol at a time, so no batch
//! waits for the whole copy.
//!
//! At the barrier the worker notes every symbol it owns as untaken and records the counts.
//! A symbol's state is copied into the snapshot (the engine's checkpoint format, one part per
//! [`SNAPSHOT_PART_SYMBOLS`] symbols) either just before a tick would change it, or in the
//! background, in the order of the symbols: after a batch, as many bytes as the time since
//! the last step earns at [`BACKGROUND_BYTES_PER_SEC`], so that the copies of a whole snapshot
//! do not all come between two batches (at 200k ticks/s a batch comes every few microseconds,
//! and a part's worth of whole windows, over a megabyte, after each of them held up the next
//! ones by milliseconds); the rest when the worker idles. A symbol that takes no tick keeps its
//! state from the barrier, so each copy is the state at the barrier: what a copy of all at once
//! would be. Every frame other than ticks and barriers (an end of stream, a hand-off, a
//! restore, a rule switch) finishes the snapshot first: those change state without a tick. A
//! barrier that comes before the copy is done (a large state at full speed) drops it instead:
//! the router begins a round only once the last is over, so that snapshot's round was given
//! up, and finishing it there would hold the batches up for the rest of the copy.
//! Each part goes to the checkpoint store as it fills, written by the store's own thread, which
//! also computes its checksum, and the router is told what it holds once it is stored.

use super::{Worker, VACANT};
use cep_core::failover::{Snapshot, StoredPart, SNAPSHOT_PART_SYMBOLS};
use cep_core::frame::Body;
use cep_core::outbox::{Event, Outbox, Peer};
use cep_core::rescale::MovedSymbol;
use cep_core::store::{Done, PartKey, MAX_STORED_PART_BYTES};
use cep_engine::{CheckpointPart, SymbolId};
use std::collections::BTreeMap;

/// Part buffers come back from the store and are kept for the next snapshot's parts, up to
/// this many bytes in all, each at most [`KEPT_PART_BUFFER`] (a whole part may take more while
/// it is written). A buffer freed and allocated again costs its pages zeroed by the kernel: at
/// full speed that was 14 % of a worker's time while a whole snapshot's parts were in flight,
/// so the pool holds as many as a snapshot of a few tens of MB needs.
const KEPT_PART_BYTES: usize = 128 << 20;
const KEPT_PART_BUFFER: usize = 16 << 20;

/// The background copies' pace: a step after a batch copies what the time since the last
/// step earns at this rate (a symbol is never split: the one that crosses it goes whole).
/// About a quarter of a core's copying speed, so a snapshot of a few tens of megabytes is
/// taken within tens of milliseconds while the batches go on.
const BACKGROUND_BYTES_PER_SEC: u128 = 1 << 30;

/// No step copies less (batches that come closer together than this takes at the pace wait
/// for the next), nor more: one step between two batches never holds the next up for long,
/// and batches a few milliseconds apart still take a snapshot of hundreds of MB in seconds.
const STEP_BYTES: usize = 64 << 10;
const MAX_STEP_BYTES: usize = 4 << 20;

/// What a symbol counts for in a step's bytes at least (its name, its order check, its
/// part's bookkeeping), so that symbols with little state are not taken by the thousand.
const SYMBOL_STEP_BYTES: usize = 256;

/// A part handed to the store: what the router is told once the store says it holds it.
pub(super) struct Storing {
    frame: Snapshot,
    /// Whether the store's answer is still to come (no: the part was not given to it).
    awaiting: bool,
    /// Whether it is the snapshot's last part, and the snapshot's figures then.
    last: bool,
    symbols: u64,
    bytes: u64,
}

/// A snapshot under way: the state at its barrier, taken a symbol at a time.
pub(super) struct Snapshotting {
    id: u64,
    /// The snapshot it holds the changes since (0: the whole state).
    base: u64,
    /// The counts at the barrier.
    processed: BTreeMap<u32, u64>,
    outputs: u64,
    /// Every symbol owned at the barrier, in order: the background pace takes them from
    /// `next` on (skipping those a tick took first).
    order: Vec<SymbolId>,
    next: usize,
    /// Symbols taken so far, all parts together.
    taken: usize,
    parts: u32,
    /// The part being filled, its number, and its symbols' order checks.
    part: u32,
    filling: Option<CheckpointPart>,
    symbols: Vec<MovedSymbol>,
    /// Bytes of engine state stored so far.
    bytes: u64,
    /// When the last background step went (the driver's clock, in nanoseconds): the next
    /// copies what the time since earns. None before the first.
    last_step_ns: Option<u64>,
}

impl Storing {
    /// The checkpoint the part belongs to.
    pub(super) fn checkpoint(&self) -> u64 {
        self.frame.id
    }
}

impl Worker {
    /// Drops the snapshot still being copied, if one is (its round is over at the router):
    /// no more of its parts are copied, and no later snapshot builds on it. Its parts already
    /// with the store are stored and announced all the same (the router ignores them).
    pub(super) fn abandon_snapshot(&mut self) {
        let Some(snapshot) = self.snapshotting.take() else { return };
        self.untaken.clear();
        if let Some(filling) = snapshot.filling {
            self.return_buffer(filling.finish());
        }
        if self.last_snapshot == snapshot.id {
            self.last_snapshot = 0;
        }
    }

    /// Refuses checkpoint `id` at once, with one part that says why: the store still writes
    /// checkpoint `behind`.
    pub(super) fn refuse_snapshot(&mut self, id: u64, behind: u64, out: &mut impl Outbox) {
        let unstored = format!("checkpoint {id} not taken: the store is still writing checkpoint {behind}");
        let frame = Snapshot {
            id,
            base: 0,
            from: self.index,
            part: 0,
            parts: 1,
            symbols: Vec::new(),
            stored: StoredPart::default(),
            processed: BTreeMap::new(),
            outputs: 0,
            unstored,
        };
        out.send(Peer::Router, &frame.encode(self.index));
        out.event(Event::CheckpointTrouble { reason: frame.unstored });
        // The engine's marks stay those of the snapshot being written.
    }

    /// Starts the snapshot of checkpoint `id` over `base` (0: whole): every symbol owned now
    /// is untaken.
    pub(super) fn start_snapshot(&mut self, id: u64, base: u64, out: &mut impl Outbox) {
        let order: Vec<SymbolId> = self.engine.symbol_ids().collect();
        let slots = order.iter().map(|&id| id as usize + 1).max().unwrap_or(0);
        self.untaken.clear();
        self.untaken.resize(slots, false);
        for &symbol in &order {
            self.untaken[symbol as usize] = true;
        }
        let processed =
            self.streams.iter().enumerate().map(|(stream, state)| (stream as u32, state.processed)).collect();
        let parts = order.len().div_ceil(SNAPSHOT_PART_SYMBOLS).max(1) as u32;
        // The engine's marks are this snapshot's from now on: the next changes are over it,
        // whether or not its parts are stored yet (a part that fails undoes this).
        self.last_snapshot = id;
        self.snapshotting = Some(Snapshotting {
            id,
            base,
            processed,
            outputs: self.engine.outputs_total(),
            order,
            next: 0,
            taken: 0,
            parts,
            part: 0,
            filling: None,
            symbols: Vec::with_capacity(SNAPSHOT_PART_SYMBOLS),
            bytes: 0,
            last_step_ns: None,
        });
        if self.snapshotting.as_ref().is_some_and(|snapshot| snapshot.order.is_empty()) {
            // Nothing to take: one empty part says so.
            self.close_part(out);
        }
    }

    /// Before a tick changes symbol `id`: its state at the barrier goes into the snapshot,
    /// if it has not yet.
    #[inline]
    pub(super) fn copy_before_write(&mut self, id: SymbolId, out: &mut impl Outbox) {
        if self.untaken.get(id as usize).copied().unwrap_or(false) {
            self.take_symbol(id, out);
        }
    }

    /// After a batch, at `now`: takes the next untaken symbols, as many bytes as the time since
    /// the last step earns at [`BACKGROUND_BYTES_PER_SEC`] (the first step after the barrier
    /// takes [`STEP_BYTES`]). A clock that went back starts the count again from `now`.
    pub(super) fn snapshot_step(&mut self, now: u64, out: &mut impl Outbox) {
        let Some(snapshot) = self.snapshotting.as_mut() else { return };
        let budget = match snapshot.last_step_ns {
            None => STEP_BYTES,
            Some(last) if now < last => {
                snapshot.last_step_ns = Some(now);
                return;
            }
            Some(last) => {
                let earned = u128::from(now - last) * BACKGROUND_BYTES_PER_SEC / 1_000_000_000;
                if earned < STEP_BYTES as u128 {
                    return;
                }
                earned.min(MAX_STEP_BYTES as u128) as usize
            }
        };
        snapshot.last_step_ns = Some(now);
        self.take_next(budget, out);
    }

    /// Takes every symbol not taken yet: the snapshot is complete when this returns.
    pub(super) fn finish_snapshot(&mut self, out: &mut impl Outbox) {
        while self.snapshotting.is_some() {
            self.take_next(usize::MAX, out);
        }
    }

    /// Takes untaken symbols in order until they took `budget` bytes (each at least
    /// [`SYMBOL_STEP_BYTES`]), or none is left.
    fn take_next(&mut self, budget: usize, out: &mut impl Outbox) {
        let mut copied = 0;
        while copied < budget {
            let Some(snapshot) = self.snapshotting.as_mut() else { break };
            let Some(&id) = snapshot.order.get(snapshot.next) else { break };
            snapshot.next += 1;
            if self.untaken[id as usize] {
                copied += self.take_symbol(id, out).max(SYMBOL_STEP_BYTES);
            }
        }
    }

    /// Copies symbol `id`'s state into the snapshot; returns the bytes it took.
    fn take_symbol(&mut self, id: SymbolId, out: &mut impl Outbox) -> usize {
        self.untaken[id as usize] = false;
        if self.snapshotting.as_ref().is_some_and(|snapshot| snapshot.filling.is_none()) {
            let buffer = self.part_buffer();
            let snapshot = self.snapshotting.as_mut().expect("checked above");
            snapshot.filling = Some(self.engine.begin_checkpoint_part(snapshot.base != 0, buffer));
        }
        let Some(snapshot) = self.snapshotting.as_mut() else { return 0 };
        let Some(part) = snapshot.filling.as_mut() else { return 0 };
        let copied = self.engine.checkpoint_symbol(part, id);
        if let Some(track) = self.symbols.get(id as usize).filter(|track| track.stream != VACANT) {
            let symbol = self.engine.symbol_name(id).to_string();
            snapshot.symbols.push(MovedSymbol { symbol, stream: track.stream, next_seq: track.next_seq });
        }
        snapshot.taken += 1;
        if snapshot.taken % SNAPSHOT_PART_SYMBOLS == 0 || snapshot.taken == snapshot.order.len() {
            self.close_part(out);
        }
        copied
    }

    /// The part being filled is full (or the last): it goes to the store, and the router is
    /// told once it is stored. A part too large to store ends the snapshot (it cannot be
    /// restored from).
    fn close_part(&mut self, out: &mut impl Outbox) {
        let Some(snapshot) = self.snapshotting.as_mut() else { return };
        let (changes, filling) = (snapshot.base != 0, snapshot.filling.take());
        let engine = match filling {
            Some(filling) => filling.finish(),
            None => {
                let buffer = self.part_buffer();
                self.engine.begin_checkpoint_part(changes, buffer).finish()
            }
        };
        let Some(snapshot) = self.snapshotting.as_mut() else { return };
        let (id, part, size) = (snapshot.id, snapshot.part, engine.len() as u64);
        let oversize = (size > MAX_STORED_PART_BYTES).then(|| {
            format!("part {part} of checkpoint {id} takes {size} bytes, more than a stored part may ({MAX_STORED_PART_BYTES})")
        });
        snapshot.bytes += size;
        snapshot.part += 1;
        let last = snapshot.part == snapshot.parts;
        let frame = Snapshot {
            id,
            base: snapshot.base,
            from: self.index,
            part,
            parts: snapshot.parts,
            symbols: std::mem::take(&mut snapshot.symbols),
            // The store computes the checksum on its thread; the router hears of the part
            // only once it is stored, with it.
            stored: StoredPart { bytes: size, checksum: 0 },
            processed: snapshot.processed.clone(),
            outputs: snapshot.outputs,
            unstored: oversize.clone().unwrap_or_default(),
        };
        let (symbols, bytes) = (snapshot.order.len() as u64, snapshot.bytes);
        let awaiting = oversize.is_none();
        match awaiting {
            true => self.store.put(PartKey { checkpoint: id, worker: self.index, part }, engine),
            false => self.return_buffer(engine),
        }
        self.storing.push_back(Storing { frame, awaiting, last, symbols, bytes });
        if last || !awaiting {
            self.snapshotting = None;
            self.untaken.clear();
        }
        self.pump_store(out);
    }

    /// Tells the router of each part the store now holds, in order (and of one it could not
    /// store, which ends that snapshot: the parts after it are not announced).
    pub(super) fn pump_store(&mut self, out: &mut impl Outbox) {
        loop {
            let awaiting = match self.storing.front() {
                Some(front) => front.awaiting,
                // Only removals can be under way: their outcomes are read as they come.
                None => false,
            };
            if awaiting || self.storing.is_empty() {
                match self.store.poll() {
                    None => return,
                    Some(Done::Removed(Ok(()))) => continue,
                    Some(Done::Removed(Err(reason))) => {
                        out.event(Event::CheckpointTrouble { reason });
                        continue;
                    }
                    Some(Done::Stored { result, buffer, .. }) => {
                        self.return_buffer(buffer);
                        let Some(front) = self.storing.front_mut() else { continue };
                        match result {
                            Ok(checksum) => front.frame.stored.checksum = checksum,
                            Err(reason) => front.frame.unstored = reason,
                        }
                        front.awaiting = false;
                    }
                }
            }
            let Some(stored) = self.storing.pop_front() else { continue };
            self.announce_part(stored, out);
        }
    }

    fn announce_part(&mut self, stored: Storing, out: &mut impl Outbox) {
        let id = stored.frame.id;
        if self.unstored_snapshot == id {
            return;
        }
        out.send(Peer::Router, &stored.frame.encode(self.index));
        if !stored.frame.unstored.is_empty() {
            // The router takes this part as the snapshot's end: nothing to build on.
            out.event(Event::CheckpointTrouble { reason: stored.frame.unstored });
            self.unstored_snapshot = id;
            if self.last_snapshot == id {
                self.last_snapshot = 0;
            }
        } else if stored.last {
            let incremental = stored.frame.base != 0;
            out.event(Event::Checkpointed { id, symbols: stored.symbols, bytes: stored.bytes, incremental });
        }
    }

    /// A buffer for a part (one the store gave back, or a new one).
    pub(super) fn part_buffer(&mut self) -> Vec<u8> {
        let buffer = self.part_buffers.pop().unwrap_or_default();
        self.part_buffer_bytes -= buffer.capacity();
        buffer
    }

    /// Keeps `buffer` for a later part, while the kept ones stay within [`KEPT_PART_BYTES`].
    pub(super) fn return_buffer(&mut self, mut buffer: Vec<u8>) {
        buffer.clear();
        buffer.shrink_to(KEPT_PART_BUFFER);
        if self.part_buffer_bytes + buffer.capacity() <= KEPT_PART_BYTES {
            self.part_buffer_bytes += buffer.capacity();
            self.part_buffers.push(buffer);
        }
    }
}
