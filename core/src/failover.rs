//! Failover: the frames that checkpoint each worker's state and move a dead worker's symbols
//! to the survivors, restored and replayed.
//!
//! Every `--checkpoint-every` the router puts a [`Checkpoint`] barrier in each worker's data
//! stream, behind every tick it routed to it before. A worker that reaches the barrier exports
//! the state of all its symbols, writes it in parts to the checkpoint store
//! ([`crate::store`]), and tells the router what it stored in a [`Snapshot`] (control): each
//! part's symbols, size and checksum, never the state itself. The router keeps every batch it
//! routed to a worker since that worker's last snapshot (its replay log). When a worker dies,
//! its symbols go to the survivors by the ring: each gets a [`Restore`] per stored part that
//! holds symbols it keeps, in its data stream, reads that part from the store, then takes the
//! logged ticks of those symbols, then their new ticks. The collector is told in a
//! [`WorkerFailed`] record, which names what moved.
//!
//! A snapshot counts only once the collector has every output of the ticks before its
//! barrier: the worker sends a [`CheckpointMark`] behind them in its output stream, and the
//! collector confirms it to the router
//! ([`OutputsConfirmed`], in its next [`crate::delivery::Saved`]). Outputs a dead worker had
//! produced but not delivered are then all produced again by the replay, and those it had
//! delivered are dropped as replayed: each output exactly once.

use crate::rescale::MovedSymbol;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// "Snapshot your state here": router -> worker, in its data stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The checkpoint's number (increasing over the run).
    pub id: u64,
    /// The worker's last snapshot the router holds and can build on (0: none): a worker
    /// whose last snapshot was that one stores only what changed since (incremental); any
    /// other stores its whole state.
    pub base: u64,
    /// Every stored part of a checkpoint below this one (of any worker) may be removed from
    /// the store: no restore will read it (the router retains the rest).
    pub retain_from: u64,
}

/// What a worker stored of its state at a [`Checkpoint`] barrier, one part per frame: worker
/// -> router (control, answered with `StateTaken`). The state is in the store, under this
/// checkpoint, worker and part ([`crate::store::PartKey`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The [`Checkpoint::id`] this answers.
    pub id: u64,
    /// 0: the whole state; else the checkpoint this snapshot holds the changes since (the
    /// barrier's [`Checkpoint::base`]), its engine part in the engine's changes format.
    pub base: u64,
    /// The worker's index.
    pub from: u32,
    /// This part's place among the snapshot's parts (each holds some of the symbols), from 0.
    pub part: u32,
    /// How many parts the snapshot takes.
    pub parts: u32,
    /// The worker's own per-symbol state (order check and stream), one entry per symbol of
    /// this part.
    pub symbols: Vec<MovedSymbol>,
    /// The size and checksum of the engine's export of this part's symbols (the hand-off
    /// format), as stored.
    pub stored: StoredPart,
    /// Ticks processed so far, per stream.
    pub processed: BTreeMap<u32, u64>,
    /// Outputs produced so far.
    pub outputs: u64,
    /// Not empty: why this part could not be stored (too large, or the store failed). It
    /// ends the snapshot, and the worker cannot fail over exactly until its next one.
    pub unstored: String,
}

/// One part of a snapshot as it lies in the store: its size and checksum, which a reader
/// checks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredPart {
    /// Bytes.
    pub bytes: u64,
    /// CRC-32 of the bytes ([`crate::store::checksum`]).
    pub checksum: u32,
}

/// Symbols per snapshot part: a restore reads a part whole, and a survivor restores the
/// symbols it takes from it, so parts are small enough that survivors read little besides
/// their own.
pub const SNAPSHOT_PART_SYMBOLS: usize = 64;

/// The most parts a snapshot may take (the router refuses more).
pub const MAX_SNAPSHOT_PARTS: u32 = 1 << 16;

/// Every output of the ticks before checkpoint `id`'s barrier was sent before this: worker ->
/// collector, in its output stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointMark {
    /// The checkpoint.
    pub id: u64,
}

/// The collector has every output of worker `worker` up to checkpoint `id`'s barrier: an
/// entry of [`crate::delivery::Saved`] (collector -> router, control).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputsConfirmed {
    /// The worker's index.
    pub worker: u32,
    /// The checkpoint.
    pub id: u64,
}

/// A dead worker's symbols restored here: router -> survivor, in its data stream, ahead of
/// their replayed ticks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Restore {
    /// The dead worker's index.
    pub from: u32,
    /// The symbols this worker takes, with their order checks (a subset of the part's; all
    /// it takes, when `state` is none).
    pub symbols: Vec<MovedSymbol>,
    /// One stored part of the dead worker's snapshot (the engine's export, or its changes
    /// since the snapshot before, which then came first): the receiver reads it from the
    /// store and restores `symbols` from it. None: the last Restore of a failover.
    pub state: Option<RestoredPart>,
}

/// Where a [`Restore`]'s state lies in the store, and what to check it against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoredPart {
    /// The checkpoint of the snapshot the part belongs to.
    pub checkpoint: u64,
    /// Its number in that snapshot.
    pub part: u32,
    /// Its size and checksum.
    pub stored: StoredPart,
}

/// A survivor took these symbols of dead worker `from` over (the [`Restore`] without state
/// that ends a failover's restores): worker ->
/// collector, in its output stream, ahead of any output of their replayed ticks. The router's
/// [`WorkerFailed`] says the same on another line, which may come later (a restarted
/// collector gets every sender's frames again at once): from this mark on, the collector
/// tells replayed outputs apart without it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Restored {
    /// The dead worker's index.
    pub from: u32,
    /// The symbols taken over here: (symbol, stream).
    pub symbols: Vec<(String, u32)>,
    /// Those of them whose state could not be restored here (a stored part missing, or not
    /// as its writer stored it): they went on from what could be read, and are lost.
    pub lost: Vec<String>,
}

/// A worker died and its symbols moved: router -> collector.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerFailed {
    /// The dead worker's id.
    pub worker: String,
    /// Its index.
    pub index: u32,
    /// Why the router took it for dead.
    pub reason: String,
    /// When the router noticed (wall clock, ns).
    pub detected_ns: u64,
    /// Whether its symbols were restored from a checkpoint and replayed (outputs stay
    /// exactly once); if not, `state_lost` names the symbols that start afresh.
    pub recovered: bool,
    /// The checkpoint restored (0: the start of the run).
    pub checkpoint: u64,
    /// What it had processed at that checkpoint, per stream (counted as processed).
    pub processed: BTreeMap<u32, u64>,
    /// Outputs it had produced at that checkpoint.
    pub outputs: u64,
    /// Ticks replayed to the survivors.
    pub replayed: u64,
    /// Each symbol that moved: (symbol, stream, new owner's index).
    pub moved: Vec<(String, u32, u32)>,
    /// Symbols whose state could not be restored.
    pub state_lost: Vec<String>,
}
