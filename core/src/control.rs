//! Start-up rendezvous over the router's control socket (ZeroMQ ROUTER; clients use REQ).
//!
//! Every process sends one [`Register`]. The router answers nobody until the whole cluster is
//! present (the expected workers, the collector and the expected injector streams); then it
//! answers everyone at once with [`Ready`]. This removes ZeroMQ's slow-joiner problem: no
//! tick is sent before every peer is known. A process arriving after the start is answered
//! [`Refused`] with the reason.

use crate::identity::Role;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Most bytes of a control frame anyone reads (a Deploy or a Ready frame carries a rules file).
pub const MAX_CONTROL_FRAME_BYTES: usize = 16 << 20;

/// A process asks to join the next run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Register {
    /// The role the process takes in the run.
    pub role: Role,
    /// Worker id (unique), or a free-form name for the other roles.
    pub id: String,
    /// Where the process's data socket is bound, as peers should connect to it (workers and
    /// the collector); empty for injectors.
    pub endpoint: String,
    /// Number of streams (connections) an injector will send; 0 for other roles.
    pub streams: u32,
    /// Warm-up an injector sends before the measured part, in ns; 0 for other roles.
    pub warmup_ns: u64,
    /// The collector's clock socket, where nodes sample its time; empty for other roles.
    pub clock_endpoint: String,
    /// A restarted collector: the start time (`Ready::start_ns`) of the run whose saved state
    /// it resumes; the router takes it over its lost collector only for that run. 0 otherwise.
    pub resuming: u64,
}

/// A worker as every process learns it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerInfo {
    /// The worker's id, as it registered.
    pub id: String,
    /// Where its data socket is bound, as the router connects to it.
    pub endpoint: String,
    /// Its CURVE public key (Z85) as the router authenticated it at registration, which the
    /// router's connection to `endpoint` requires of the other end; empty when the router runs
    /// open.
    pub key: String,
}

/// The cluster is complete: the run starts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ready {
    /// For a worker its index in `workers`; for an injector the id of its first stream.
    pub assigned: u32,
    /// Every worker, ordered by id (the ring's order); a worker's index is its place here.
    pub workers: Vec<WorkerInfo>,
    /// The collector's data endpoint, where workers and the router send to it.
    pub collector: String,
    /// Total injector streams in the run.
    pub streams: u32,
    /// Wall-clock ns at which injectors start sending (shared so the schedule is common).
    pub start_ns: u64,
    /// Longest warm-up of any injector: outputs of ticks intended before
    /// `start_ns + warmup_ns` are counted but kept out of the latency histograms.
    pub warmup_ns: u64,
    /// The collector's clock socket: every node measures its clock offset against it.
    pub collector_clock: String,
    /// The rules the run starts with (workers run them; the router checked them).
    pub rules: RulesText,
    /// How far (ns) a tick may be behind its symbol's latest event time and still be
    /// processed; later ones are dropped and counted. `None`: every late tick is processed
    /// at its symbol's latest time.
    pub allowed_lateness_ns: Option<u64>,
    /// True for a worker joining the running cluster: the router sends it Welcome on its data
    /// socket first, which it answers (Reached) to prove the router can reach it.
    pub joining: bool,
    /// The collector's incarnation: 1 for the one the run started with, one more for each
    /// restarted collector that took over ([`crate::delivery`]). A collector told more than 1
    /// resumes from its saved state.
    pub collector_incarnation: u64,
    /// The collector's CURVE public key (Z85) as the router authenticated it: every
    /// connection to `collector` and `collector_clock` requires it of the other end. Empty
    /// when the router runs open.
    pub collector_key: String,
    /// The router's failure time-out (ns): a worker it hears nothing from for this long is
    /// taken for dead, so a worker sends a [`crate::liveness::Heartbeat`] at least every
    /// quarter of it.
    pub failure_timeout_ns: u64,
    /// The cluster's checkpoint store, as the router was told it (`--checkpoint-dir`, an
    /// absolute path): a worker not given a folder of its own stores its snapshots there, so
    /// that workers started by hand meet the others' in one store. Empty: the router was told
    /// none, and such a worker uses its default.
    pub checkpoint_dir: String,
}

impl Ready {
    /// How often a peer must be heard from: a quarter of the router's failure time-out
    /// (`None` when the router names none).
    pub fn liveness_every(&self) -> Option<std::time::Duration> {
        (self.failure_timeout_ns > 0).then(|| std::time::Duration::from_nanos(self.failure_timeout_ns / 4))
    }
}

/// A rules file as it travels: its version in the run, where it came from, its text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RulesText {
    /// 0 for the rules a run starts with, then 1, 2, ... per deployment.
    pub epoch: u32,
    /// A path or `built-in:reference`, to name the file in messages.
    pub origin: String,
    /// The rules, as written.
    pub text: String,
}

/// `cep rules deploy`: new rules for the running cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deploy {
    /// Where the rules came from (a path), to name them in messages.
    pub origin: String,
    /// The rules, as written.
    pub text: String,
}

/// The router's answer to an accepted [`Deploy`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deployed {
    /// The new rules' version in the run.
    pub epoch: u32,
    /// Where the stream switches: per injector stream, the first sequence number the new
    /// rules process (empty when the run had not started: the run starts with them).
    pub at: BTreeMap<u32, u64>,
}

/// Registration refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refused {
    /// Why, in one line for the refused process to print.
    pub reason: String,
}
