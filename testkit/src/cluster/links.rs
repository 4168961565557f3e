//! Links between members: first in, first out, through the faults of the spec.

use super::{LocalCluster, Payload, Scheduled, HOLD_NS};
use crate::spec::{Action, LinkKind, Member};
use std::collections::BTreeMap;

/// Per-link fault state and FIFO order.
#[derive(Default)]
pub(super) struct LinkState {
    /// Frames of each kind seen on this link, for `nth`.
    pub(super) seen: BTreeMap<u8, u64>,
    pub(super) seen_any: u64,
    /// No frame on this link arrives before this time (first in, first out).
    pub(super) last_at: u64,
    /// A frame held back to arrive after the next one (Reorder).
    pub(super) held: Option<Payload>,
}

impl LocalCluster {
    pub(super) fn random(&mut self) -> f64 {
        // Deterministic from the seed: SplitMix64 outputs 0, 1, 2, ...
        self.drawn += 1;
        cep_core::gbm::splitmix64(self.spec.seed ^ 0x9e37_79b9_7f4a_7c15, self.drawn - 1) as f64 / u64::MAX as f64
    }

    /// Sends a frame on the link from `from` to `to`, through the faults.
    pub(super) fn send(&mut self, from: Member, to: Member, payload: Payload) {
        let control = !matches!(payload, Payload::Data(_));
        let kind = LinkKind::of(from, to, control);
        let bytes = match &payload {
            Payload::Data(bytes) | Payload::Request(_, bytes) | Payload::Answer(bytes) => bytes,
        };
        let frame_kind = bytes.get(2).copied().unwrap_or(0);
        let endpoint_index = match (from, to) {
            (_, Member::Worker(i)) | (Member::Worker(i), _) => Some(i),
            (Member::Injector(s), _) => Some(s as usize),
            _ => None,
        };
        let link = self.links.entry((from, to, control)).or_default();
        let nth_of_kind = *link.seen.entry(frame_kind).and_modify(|n| *n += 1).or_insert(0);
        let nth_any = link.seen_any;
        link.seen_any += 1;
        self.stats.entry(kind).or_default().frames += 1;
        let mut action = None;
        for index in 0..self.faults.len() {
            let fault = self.faults[index];
            let matches = fault.link == kind
                && fault.only.is_none_or(|only| endpoint_index == Some(only))
                && fault.frame_kind.is_none_or(|k| k as u8 == frame_kind);
            if !matches {
                continue;
            }
            let nth = if fault.frame_kind.is_some() { nth_of_kind } else { nth_any };
            let hit = match fault.nth {
                Some(n) => n == nth,
                None => fault.probability > 0.0 && self.random() < fault.probability,
            };
            if hit {
                action = Some(fault.action);
                break;
            }
        }
        let stats = self.stats.entry(kind).or_default();
        if self.dead.contains(&to) {
            stats.to_the_dead += 1;
            return;
        }
        let mut at = self.now + self.spec.link_latency_ns;
        match action {
            Some(Action::Drop) => {
                stats.dropped += 1;
                return;
            }
            Some(Action::Delay(delay)) => {
                stats.delayed += 1;
                at += delay;
            }
            Some(Action::Duplicate) => stats.duplicated += 1,
            Some(Action::Reorder) => stats.reordered += 1,
            None => {}
        }
        let link = self.links.get_mut(&(from, to, control)).expect("created above");
        if action == Some(Action::Reorder) && link.held.is_none() {
            link.held = Some(payload);
            self.schedule(at + HOLD_NS, Scheduled::Release { from, to, control });
            return;
        }
        let at = at.max(link.last_at);
        link.last_at = at;
        let held = link.held.take();
        if action == Some(Action::Duplicate) {
            self.schedule(at, Scheduled::Deliver { from, to, payload: payload.clone() });
        }
        self.schedule(at, Scheduled::Deliver { from, to, payload });
        if let Some(held) = held {
            self.schedule(at, Scheduled::Deliver { from, to, payload: held });
        }
    }
}
