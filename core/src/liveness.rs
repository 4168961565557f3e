//! Liveness at the application level: a connection that stays up proves nothing of the process
//! behind it (one stopped by SIGSTOP, a long pause or a deadlock keeps its TCP connections
//! up). Every worker sends the router a [`Heartbeat`] from its own loop at least every quarter
//! of the router's failure time-out; a worker the router hears nothing from for the whole
//! time-out is taken for dead and failed over like a killed one, and fenced: whatever it sends
//! afterwards is refused and counted, and it is told [`Fenced`], on which it exits.
//!
//! Injectors do the same with an [`InjectorHeartbeat`]: one the router hears nothing from for
//! the time-out has its streams ended where the router has them (their true counts are then
//! unknown), and is fenced. A router that gives the run up tells every process it has a link
//! to why ([`Abandoned`]), so that each names the peer actually lost, not the router.

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

/// "Still here, and this far": injector -> router (control), at least every quarter of the
/// router's failure time-out. Never answered, unless the injector was fenced ([`Fenced`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InjectorHeartbeat {
    /// Its first stream: its streams are `first..first + sent.len()`.
    pub first: u32,
    /// Ticks each of its streams has sent so far.
    pub sent: Vec<u64>,
}

/// "The run is given up, because...": router -> every process on a standing link (workers,
/// injectors), pushed just before the router exits with an error, so that each says the
/// cause (the collector lost, say) rather than only that the router went.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Abandoned {
    /// The router's error, in its words.
    pub reason: String,
}

/// The router's word that ends a process, as a control frame carries it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It took the process for dead ([`Fenced`]), for this reason.
    Fenced(String),
    /// It gave the run up ([`Abandoned`]), for this reason.
    Abandoned(String),
}

impl Verdict {
    /// The verdict `frame` carries, if it is one (a body that does not read still ends the
    /// process: its reason says so).
    pub fn of(frame: &crate::frame::Frame<'_>) -> Option<Verdict> {
        let unreadable = |error: crate::wire::WireError| format!("(unreadable: {error})");
        match frame.kind() {
            crate::wire::FrameKind::Fenced => {
                Some(Verdict::Fenced(frame.body::<Fenced>().map_or_else(unreadable, |fenced| fenced.reason)))
            }
            crate::wire::FrameKind::Abandoned => Some(Verdict::Abandoned(
                frame.body::<Abandoned>().map_or_else(unreadable, |abandoned| abandoned.reason),
            )),
            _ => None,
        }
    }
}
