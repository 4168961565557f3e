//! What a [`crate::LocalCluster`] is made of, and the faults its links suffer.

use cep_collector::CsvMode;
use cep_core::wire::FrameKind;

/// One process of the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Member {
    /// The router.
    Router,
    /// The worker with this index in the spec (id `worker-<index>`).
    Worker(usize),
    /// The collector.
    Collector,
    /// The injector's connection for this stream (stream 0 also registers the injector).
    Injector(u32),
    /// An operator's `cep cluster` command.
    Operator,
}

impl Member {
    /// The member's identity on the router's control socket.
    pub fn client_id(self) -> Vec<u8> {
        format!("{self:?}").into_bytes()
    }
}

/// The kinds of link between members.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LinkKind {
    /// An injector stream's ticks and end marker to the router.
    InjectorToRouter,
    /// The router's batches and markers to one worker.
    RouterToWorker,
    /// A worker's outputs, rules, progress and report to the collector.
    WorkerToCollector,
    /// The router's clock report and final report to the collector.
    RouterToCollector,
    /// Requests to the router's control socket and its answers.
    Control,
}

impl LinkKind {
    /// The kind of the link from `from` to `to` (`control`: over the control socket).
    pub fn of(from: Member, to: Member, control: bool) -> LinkKind {
        match (from, to) {
            _ if control => LinkKind::Control,
            (Member::Injector(_), Member::Router) => LinkKind::InjectorToRouter,
            (Member::Router, Member::Worker(_)) => LinkKind::RouterToWorker,
            (Member::Worker(_), Member::Collector) => LinkKind::WorkerToCollector,
            (Member::Router, Member::Collector) => LinkKind::RouterToCollector,
            _ => panic!("no data link from {from:?} to {to:?}"),
        }
    }
}

/// What a fault does to the frame it hits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// The frame is lost.
    Drop,
    /// The frame arrives twice, one copy right after the other.
    Duplicate,
    /// The frame arrives this many ns late; the link being first in, first out, the frames
    /// behind it wait too.
    Delay(u64),
    /// The frame arrives after the next frame on its link.
    Reorder,
}

/// A fault on the links of one kind: which frames it hits and what it does to them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fault {
    /// The links it applies to.
    pub link: LinkKind,
    /// Only the link to or from this worker (by index), or this stream's link.
    pub only: Option<usize>,
    /// Only frames of this kind.
    pub frame_kind: Option<FrameKind>,
    /// Hits the n-th matching frame (from 0) on each matching link ...
    pub nth: Option<u64>,
    /// ... or each matching frame with this probability (drawn from the cluster's seed).
    pub probability: f64,
    /// What happens to a frame it hits.
    pub action: Action,
}

impl Fault {
    /// A fault on links of `link` kind hitting nothing yet: say which frames with
    /// [`Self::nth`] or [`Self::probability`].
    pub fn on(link: LinkKind, action: Action) -> Fault {
        Fault { link, only: None, frame_kind: None, nth: None, probability: 0.0, action }
    }

    /// Hits the n-th matching frame of each matching link.
    pub fn nth(mut self, n: u64) -> Fault {
        self.nth = Some(n);
        self
    }

    /// Hits each matching frame with probability `p`.
    pub fn probability(mut self, p: f64) -> Fault {
        self.probability = p;
        self
    }

    /// Only frames of `kind` match (and count towards `nth`).
    pub fn kind(mut self, kind: FrameKind) -> Fault {
        self.frame_kind = Some(kind);
        self
    }

    /// Only the link of this worker index or stream.
    pub fn only(mut self, index: usize) -> Fault {
        self.only = Some(index);
        self
    }
}

/// The cluster to build.
#[derive(Clone, Debug)]
pub struct ClusterSpec {
    /// Workers.
    pub workers: usize,
    /// Injector streams.
    pub streams: u32,
    /// Symbols of the reference price model.
    pub symbols: usize,
    /// Ticks sent in all.
    pub count: u64,
    /// Ticks per second of virtual time, over all streams.
    pub rate: f64,
    /// Most ticks (and outputs) per batch, on every hop.
    pub batch: usize,
    /// Seed of the price model and of the probabilistic faults.
    pub seed: u64,
    /// The rules text (default: the reference rules).
    pub rules: Option<String>,
    /// Which outputs the collector writes to its outputs.csv.
    pub csv: CsvMode,
    /// Virtual ns a frame takes on any link.
    pub link_latency_ns: u64,
    /// The collector gives up after this long (virtual) without a frame.
    pub idle_timeout_ns: u64,
    /// Symbols moved at a time when a worker joins or leaves.
    pub move_slice: usize,
    /// How long the router waits for a slice's state before it gives the move up.
    pub move_timeout_ns: u64,
    /// Checkpoint interval (virtual ns; 0: none).
    pub checkpoint_every_ns: u64,
    /// How long after a worker dies the router notices (virtual ns), as heartbeats would.
    pub failure_timeout_ns: u64,
    /// Frames to the collector go in Sequenced envelopes, kept by their senders until the
    /// collector saved them (it saves every 100 ms), as the transport sends them: a killed
    /// collector can be started again and resume ([`crate::LocalCluster::restart_collector`]).
    /// Off, the collector takes the frames bare, so faults on its links show as losses.
    pub sequenced: bool,
    /// How long the router waits for a lost collector, or a restarted one, to take over before
    /// it gives the run up (`--collector-retention`), virtual ns.
    pub collector_retention_ns: u64,
    /// With [`Self::sequenced`]: the bytes a worker holds for the collector before it stops
    /// taking input until the collector saved them (`--max-unsaved`).
    pub max_unsaved_bytes: usize,
}

impl Default for ClusterSpec {
    fn default() -> Self {
        ClusterSpec {
            workers: 3,
            streams: 2,
            symbols: 64,
            count: 20_000,
            rate: 200_000.0,
            batch: 64,
            seed: cep_core::reference::SEED,
            rules: None,
            csv: CsvMode::All,
            link_latency_ns: 20_000,
            idle_timeout_ns: 30_000_000_000,
            move_slice: 8,
            move_timeout_ns: 1_000_000_000,
            checkpoint_every_ns: 20_000_000,
            failure_timeout_ns: 50_000_000,
            sequenced: false,
            max_unsaved_bytes: usize::MAX,
            collector_retention_ns: 5_000_000_000,
        }
    }
}
