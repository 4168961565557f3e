//! What a run leaves: the ticks sent, what the faults did, the collector's results.

use crate::spec::{LinkKind, Member};
use cep_core::outbox::Event;
use cep_core::report::{RouterReport, WorkerReport};
use cep_core::results::Summary;
use std::collections::BTreeMap;

/// A tick as the injector sent it: what a reference evaluation needs.
#[derive(Clone, Debug, PartialEq)]
pub struct SentTick {
    /// Its stream.
    pub stream: u32,
    /// Its sequence number in the stream.
    pub seq: u64,
    /// Its symbol.
    pub symbol: String,
    /// Its price.
    pub price: f64,
    /// Its event time (its send time: the ticks are generated).
    pub t_event: u64,
}

/// What the faults did to the frames of one link kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Frames offered to the links.
    pub frames: u64,
    /// Frames lost by a fault.
    pub dropped: u64,
    /// Frames delivered twice by a fault.
    pub duplicated: u64,
    /// Frames delayed by a fault.
    pub delayed: u64,
    /// Frames that overtook, or were overtaken, by a fault.
    pub reordered: u64,
    /// Frames sent to a member that was dead.
    pub to_the_dead: u64,
}

/// How a run ended.
#[derive(Debug)]
pub struct Outcome {
    /// The collector's summary (what `summary.json` would hold).
    pub summary: Summary,
    /// The collector's outputs.csv.
    pub outputs_csv: String,
    /// Every tick the injector sent, in order per stream.
    pub sent: Vec<SentTick>,
    /// What the faults did, per link kind.
    pub links: BTreeMap<LinkKind, LinkStats>,
    /// The reports the workers sent (a killed worker sends none).
    pub worker_reports: Vec<WorkerReport>,
    /// The report the router sent, if it did.
    pub router_report: Option<RouterReport>,
    /// Virtual time from the start of the run to the collector's end, in ns.
    pub elapsed_ns: u64,
    /// What the cores reported (what their drivers would log), by member, in order.
    pub events: Vec<(Member, Event)>,
    /// Control requests the router refused, by asker, with the reason.
    pub refusals: Vec<(Member, String)>,
    /// The workers (by member index) the router took for dead while they lived, and which
    /// exited on learning it.
    pub fenced: Vec<usize>,
    /// Why the router fenced the injector, if it took it for dead and told it when it woke.
    pub injector_fenced: Option<String>,
}

impl Outcome {
    /// outputs.csv's rows without the timestamps (rule, symbol, price, value, injector,
    /// seq), sorted: what must not depend on timing.
    pub fn output_rows(&self) -> Vec<String> {
        let mut rows: Vec<String> =
            self.outputs_csv.lines().skip(1).map(|row| row.split(',').take(6).collect::<Vec<_>>().join(",")).collect();
        rows.sort();
        rows
    }
}
