//! Who may send the collector what: each worker's key, bound by the router's word, envelopes
//! required of every worker and the router, and which frames a source may send at all.

use super::MAX_WORKERS;
use cep_core::identity::{Role, Sender, ROUTER_ID};
use cep_core::report::ClockReport;
use cep_core::wire::FrameKind;
use std::collections::BTreeMap;

/// Who may send the collector what, once it runs as a real process ([`Collector::authenticating`]).
#[derive(Debug, Default)]
pub(super) struct Senders {
    /// Every worker and the router put their frames in envelopes; only an injector's clock
    /// report comes bare. Off for a harness that feeds the core bare frames.
    pub(super) envelopes_required: bool,
    /// On a secure socket, each worker's key by index: the workers of the start's from
    /// `Ready`, a joined worker's from the router's [`WorkerJoined`] (empty: open, or not
    /// known yet).
    worker_keys: Vec<String>,
    /// Frames held back because no key was known yet for their worker index, by (index, the
    /// sender's key): they come again once asked. Once the index is bound, those of any other
    /// key were spoken by a key that is not that worker's; so are all of an index never bound.
    unbound: BTreeMap<(u32, String), u64>,
}

/// What the collector does with a frame of a source on a secure socket.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Admission {
    Take,
    Refuse(String),
    /// Not yet: the source's key is not known (a worker that joined, whose frames came ahead
    /// of the router's word on it). Its sender is asked to send again.
    Later,
}

impl Senders {
    /// Envelopes required of every worker and the router; the start's workers' keys by index.
    pub(super) fn authenticating(worker_keys: Vec<String>) -> Senders {
        Senders { envelopes_required: true, worker_keys, unbound: BTreeMap::new() }
    }

    /// Whether `sender` may send source `source`'s frames.
    pub(super) fn check(&mut self, source: u32, sender: Sender<'_>) -> Admission {
        if source == ROUTER_ID {
            return match sender.is(Role::Router) {
                true => Admission::Take,
                false => Admission::Refuse(format!("the router's frames from `{}`, not a router key", sender.name())),
            };
        }
        if !sender.is(Role::Worker) {
            return Admission::Refuse(format!("worker {source}'s frames from `{}`, not a worker key", sender.name()));
        }
        match self.worker_keys.get(source as usize).map(String::as_str).filter(|key| !key.is_empty()) {
            Some(key) if key == sender.key() => Admission::Take,
            Some(_) => Admission::Refuse(format!(
                "worker {source}'s frames from `{}`, not the key it registered with",
                sender.name()
            )),
            // (A higher index is refused with its frame's position, as for any sender.)
            None if (source as usize) < MAX_WORKERS => {
                *self.unbound.entry((source, sender.key().to_string())).or_insert(0) += 1;
                Admission::Later
            }
            None => Admission::Take,
        }
    }

    /// Worker `index` registered with `key` (empty: the router runs open). Returns the frames
    /// held back for that index: (those of this key, which come again; those of other keys).
    /// A key once bound stays: a worker's index is never given to another.
    pub(super) fn bind(&mut self, index: u32, key: &str) -> (u64, u64) {
        let at = index as usize;
        if key.is_empty() || at >= MAX_WORKERS {
            return (0, 0);
        }
        if self.worker_keys.len() <= at {
            self.worker_keys.resize(at + 1, String::new());
        }
        if !self.worker_keys[at].is_empty() {
            if self.worker_keys[at] != key {
                tracing::warn!(worker = index, "a second key for worker {index} is ignored: the first stays");
            }
            return (0, 0);
        }
        self.worker_keys[at] = key.to_string();
        let held: Vec<(u32, String)> = self
            .unbound
            .range((index, String::new())..)
            .take_while(|((i, _), _)| *i == index)
            .map(|(k, _)| k.clone())
            .collect();
        let (mut own, mut others) = (0, 0);
        for entry in held {
            let frames = self.unbound.remove(&entry).unwrap_or(0);
            match entry.1 == key {
                true => own += frames,
                false => others += frames,
            }
        }
        (own, others)
    }

    /// Frames held back for indexes no worker joined as, by index: every one spoken by a
    /// worker key for a worker it is not.
    pub(super) fn never_bound(&mut self) -> BTreeMap<u32, u64> {
        let mut frames = BTreeMap::new();
        for ((index, _), count) in std::mem::take(&mut self.unbound) {
            *frames.entry(index).or_insert(0) += count;
        }
        frames
    }
}

/// The name a worker index has until the worker is known by its id.
pub(super) fn unnamed_worker(index: usize) -> String {
    format!("worker #{index}")
}

/// The id worker `index` is known by, if it is known yet.
pub(super) fn known_id(workers: &[String], index: usize) -> Option<&String> {
    workers.get(index).filter(|id| **id != unnamed_worker(index))
}

/// Whether a clock report's node is a worker's (not the router's or an injector's name).
pub(super) fn names_a_worker(node: &str) -> bool {
    node != "router" && !node.starts_with("injector-")
}

/// Whether the frame `frame`, in an envelope of `source`, is one that source sends: the
/// router's records (reports, rescales, failovers, joins) only from the router, a worker's
/// frames only from a worker, and a clock report only about the process that sends it (a
/// worker's under the id the collector knows for its index, or, before it knows one, under a
/// name no other worker has).
pub(super) fn source_may_send(
    source: u32,
    frame: &cep_core::frame::Frame<'_>,
    workers: &[String],
) -> Result<(), String> {
    let kind = frame.kind();
    let from_router = source == ROUTER_ID;
    let routers = matches!(
        kind,
        FrameKind::RouterReport
            | FrameKind::RouterProgress
            | FrameKind::RescaleStarted
            | FrameKind::Rescaled
            | FrameKind::WorkerFailed
            | FrameKind::WorkerJoined
    );
    if kind == FrameKind::ClockReport {
        let node = frame.body::<ClockReport>().map(|report| report.node).unwrap_or_default();
        let not_that_process = || Err(format!("a clock report of `{node}` from source {source}, not that process"));
        return match (from_router, names_a_worker(&node)) {
            (true, _) if node == "router" => Ok(()),
            (false, true) => match known_id(workers, source as usize) {
                Some(id) if *id != node => not_that_process(),
                None if workers.contains(&node) => not_that_process(),
                _ => Ok(()),
            },
            _ => not_that_process(),
        };
    }
    match (routers, from_router) {
        (true, false) => Err(format!("a {kind:?} frame from worker {source}: only the router sends it")),
        (false, true) => Err(format!("a {kind:?} frame from the router: only workers send it")),
        _ => Ok(()),
    }
}
