//! Live rescaling: the frames that move symbols, with their state, from one worker to another
//! while the cluster runs, and the requests that ask for it or watch it.
//!
//! A move goes in slices of symbols. For each slice the router holds the new ticks of the
//! slice's symbols and sends each current owner a [`HandOff`] in its data stream, behind every
//! tick it routed to it before; the owner exports the symbols' state and sends it back as a
//! [`SymbolState`] (control socket, answered with [`StateTaken`]); the router forwards it to
//! the new owner in its data stream, then the held ticks behind it. So a symbol's ticks reach
//! its state in order, wherever it lives, and none is lost or processed twice.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Hand these symbols' state to worker `to`: router -> their current owner, in its data stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandOff {
    /// The move's part this answers to (one per slice and pair of owners).
    pub part: u32,
    /// The new owner's index.
    pub to: u32,
    /// The symbols to export and forget (ones the worker never saw are simply absent).
    pub symbols: Vec<String>,
}

/// What a worker keeps of a symbol besides the engine's state: it moves with the symbol.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MovedSymbol {
    /// The symbol.
    pub symbol: String,
    /// The injector stream its ticks come on.
    pub stream: u32,
    /// One past the highest sequence number processed: duplicates and order are checked
    /// against it.
    pub next_seq: u64,
}

/// The state of a hand-off's symbols: old owner -> router (control socket), then router -> new
/// owner (data stream, ahead of the ticks held for them).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SymbolState {
    /// The [`HandOff::part`] this answers.
    pub part: u32,
    /// The old owner's index.
    pub from: u32,
    /// The worker's own per-symbol state, one entry per exported symbol.
    pub symbols: Vec<MovedSymbol>,
    /// The engine's export of the symbols (`cep_engine`'s versioned state format).
    #[serde(with = "serde_bytes")]
    pub engine: Vec<u8>,
}

/// The router took a [`SymbolState`] (no body: nil).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StateTaken;

/// No more ticks will come: every symbol of this worker has moved. Router -> a leaving worker,
/// in its data stream behind its last hand-off; the worker reports and exits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retire {
    /// Ticks the router routed to this worker, per stream (what its report balances against).
    pub routed: BTreeMap<u32, u64>,
}

/// Drain a worker: its symbols move to the others, then it retires. Operator (`cep cluster
/// remove`) or the worker itself (on SIGTERM) -> router (control socket).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leave {
    /// The worker's id.
    pub worker: String,
}

/// A rescale was accepted: router -> the client that asked (control socket).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RescaleAccepted {
    /// Symbols that move.
    pub symbols: u64,
    /// In how many slices.
    pub slices: u32,
}

/// Asks the router for the cluster's membership (no body: nil). `cep cluster status` ->
/// router (control socket).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatusRequest;

/// A member's place in the cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberStatus {
    /// Its index in the run (frames' sender id).
    pub index: u32,
    /// Its id.
    pub id: String,
    /// `active`, `joining` (symbols still moving to it), `leaving` or `left`.
    pub state: String,
    /// Symbols the router has routed to it and that it still owns.
    pub symbols: u64,
    /// Ticks routed to it so far.
    pub routed: u64,
}

/// A rescale in progress.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoveProgress {
    /// `join` or `leave`.
    pub kind: String,
    /// The worker joining or leaving.
    pub worker: String,
    /// Slices done, of `slices`.
    pub slices_done: u32,
    /// Slices in the move.
    pub slices: u32,
    /// Symbols in the move.
    pub symbols: u64,
}

/// The cluster as the router sees it: router -> `cep cluster status` (control socket).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterStatus {
    /// The router's monotonic clock (ns): two answers give rates.
    pub now_ns: u64,
    /// Every worker that has been a member, by index.
    pub members: Vec<MemberStatus>,
    /// The rescale in progress, if any.
    pub moving: Option<MoveProgress>,
    /// Rescales waiting behind it.
    pub queued: u32,
    /// Injector streams that have ended, of `streams`.
    pub streams_ended: u32,
    /// Injector streams of the run.
    pub streams: u32,
}

/// A rescale began: router -> collector. The collector watches the moved symbols' outputs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RescaleStarted {
    /// The rescale's number in the run (0, 1, ...).
    pub id: u32,
    /// `join` or `leave`.
    pub kind: String,
    /// The worker joining or leaving.
    pub worker: String,
    /// Its index.
    pub index: u32,
    /// Every symbol that moves, with its new owner's index.
    pub symbols: Vec<(String, u32)>,
}

/// A worker joined the running cluster: router -> collector, sent as the router answers its
/// registration (on another connection than the worker's, so it may arrive after the worker's
/// first frames: the collector holds those back and asks them again). On a secure cluster the
/// collector takes that index's frames from this key only, as it does for the workers of the
/// start (theirs come in `Ready`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerJoined {
    /// Its index.
    pub index: u32,
    /// Its id.
    pub id: String,
    /// The CURVE public key (Z85) the router authenticated its registration by; empty when
    /// the router runs open.
    pub key: String,
}

/// A rescale ended: router -> collector, for the summary's `rescales`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rescaled {
    /// The [`RescaleStarted::id`].
    pub id: u32,
    /// When it started (wall clock, ns since the epoch).
    pub started_ns: u64,
    /// How long it took, from the first hand-off to the last state delivered (ns).
    pub duration_ns: u64,
    /// Symbols moved.
    pub symbols: u64,
    /// State moved, in bytes (the engines' exports).
    pub state_bytes: u64,
    /// Slices it went in.
    pub slices: u32,
    /// Ticks held while their symbol moved.
    pub held_ticks: u64,
    /// The longest any slice's symbols waited (first hand-off sent to state delivered, ns).
    pub longest_slice_ns: u64,
    /// Symbols whose state never came (their owner died or hung during the move): they went
    /// on at their new owner from empty windows.
    pub state_lost: Vec<String>,
}

/// Injector streams `first..first + count` now exist (an injector registered with the running
/// cluster): router -> every worker, in its data stream, ahead of any of their ticks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamsOpened {
    /// The first new stream's id.
    pub first: u32,
    /// How many streams opened.
    pub count: u32,
}

/// The most injector streams a run takes, all injectors together: no count read off the wire
/// sizes a table beyond it.
pub const MAX_STREAMS: u32 = 4096;

/// The first frame a joining worker gets on its data socket: router -> worker. The worker
/// answers [`Reached`]; until then the router routes nothing to it (an unreachable one, a
/// wrong `--advertise`, is dropped after the move time-out instead of stalling the router).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Welcome {
    /// The worker's index.
    pub index: u32,
}

/// A joining worker got [`Welcome`]: worker -> router (control, answered StateTaken).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reached {
    /// The worker's index.
    pub index: u32,
}
