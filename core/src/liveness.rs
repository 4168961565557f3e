//! Liveness at the application level: a connection that stays up proves nothing of the process
//! behind it (one stopped by SIGSTOP, a long pause or a deadlock keeps its TCP connections
//! up). Every worker sends the router a [`Heartbeat`] from its own loop at least every quarter
//! of the router's failure time-out; a worker the router hears nothing from for the whole
//! time-out is taken for dead and failed over like a killed one, and fenced: whatever it sends
//! afterwards is refused and counted, and it is told [`Fenced`], on which it exits.

use serde::{Deserialize, Serialize};

/// "Still here, and this far": worker -> router (control), from the worker's loop, so that it
/// proves the loop turns, not only that a thread lives. Never answered, unless the worker was
/// fenced ([`Fenced`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    /// The worker's index.
    pub worker: u32,
    /// Ticks it processed so far.
    pub processed: u64,
    /// Its run is over (its report is out): it goes quiet now, and is no longer watched.
    pub finished: bool,
}

/// "You were taken for dead": router -> a fenced worker (control: the answer to each of its
/// requests and heartbeats from then on, taken as a notice). Its symbols are with the other
/// workers; the worker must stop at once and exit with an error.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fenced {
    /// Why, as the router saw it.
    pub reason: String,
}
