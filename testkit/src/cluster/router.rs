//! The simulation's router: its core and its run policy ([`cep_router::lifecycle`]) as its
//! driver runs them: the policy turns after every frame, request and timer, and says when the
//! run starts, when the report goes, when the nodes are released, and when a collector lost
//! for longer than its retention ends the run.

use super::{LocalCluster, Member, Payload, Scheduled, ROUTER_TIMER_NS, START_DELAY_NS};
use cep_core::clock::{Monotonic, OffsetEstimate};
use cep_core::outbox::{Event, Outbox, Recorded};
use cep_router::lifecycle::{Change, Observed};

/// How the router's process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum End {
    /// The run went its course: it released every node.
    Released,
    /// It gave the run up: its last worker was failed over.
    OutOfWorkers,
    /// It gave the run up: the collector was lost beyond its retention.
    CollectorLost,
}

/// The end of the router's process: how, why (its error, as the process says it), and when.
pub(super) struct RouterExit {
    pub(super) end: End,
    pub(super) why: String,
    pub(super) at: u64,
}

impl LocalCluster {
    /// A turn of the router's run policy, as its driver's loop turns after each frame, request
    /// and timer: the start once the cluster is complete, the report once every stream ended,
    /// the release at the end; at the policy's cadence, the collector watched (a connection
    /// that drops, or silence), and the run given up when it is lost beyond its retention.
    pub(super) fn router_turn(&mut self) {
        if self.router_exit.is_some() || self.dead.contains(&Member::Router) {
            return;
        }
        let now = self.monotonic();
        let turn = self
            .router_policy
            .turn(now, &self.router, Observed::default())
            .expect("the simulation has no start time-out and no stop");
        let mut out = self.outbox();
        match turn.change {
            Some(Change::Start) => return self.start_run(),
            Some(Change::Finish) => {
                self.router.flush(&mut out);
                self.router_report = Some(self.router.finish(&mut out));
            }
            Some(Change::Release) => {
                self.router.release(&mut out);
                self.router_exits(End::Released, "released every node".into());
            }
            None => {}
        }
        if turn.report_progress {
            self.router.progress(self.now, &mut out);
        }
        if turn.watch_collector {
            // A killed collector's connection drops; a paused one's stays up, and only its
            // silence tells.
            let dropped = self.dead.contains(&Member::Collector).then(|| "its connection dropped".to_string());
            let lost = dropped.or_else(|| self.router.collector_silent());
            if let Err(stop) = self.router_policy.collector(now, lost.as_deref()) {
                let reason = stop.to_string();
                self.router.abandon(&reason, &mut out);
                out.event(Event::Refused { who: "the run".into(), reason: reason.clone() });
                self.router_exits(End::CollectorLost, reason);
            }
        }
        self.route_from(Member::Router, out);
    }

    /// Whether another data frame reaches the router at this very instant.
    pub(super) fn router_has_input_now(&self) -> bool {
        self.queue
            .range((self.now, 0)..(self.now + 1, 0))
            .any(|(_, event)| matches!(event, Scheduled::Deliver { to: Member::Router, payload: Payload::Data(_), .. }))
    }

    /// The cluster is complete: the router announces the start.
    fn start_run(&mut self) {
        let start = self.router.start(self.now + START_DELAY_NS);
        self.start_ns = self.now + START_DELAY_NS;
        self.ring = start
            .workers
            .iter()
            .map(|w| (0..self.spec.workers).find(|&i| self.worker_ids[i] == w.id).expect("a spec worker"))
            .collect();
        let mut out = self.outbox();
        // One clock for everyone: the router's offset to the collector is 0, reported as its
        // driver reports a measured one (the router's first frame to the collector).
        self.router.announce(Some(OffsetEstimate { offset_ns: 0, uncertainty_ns: 0 }), &mut out);
        self.route_from(Member::Router, out);
        self.schedule(self.now + ROUTER_TIMER_NS, Scheduled::Timer(Member::Router));
    }

    /// The router's timer: the core gives up overdue moves, starts checkpoints due and fails
    /// over workers it has not heard from.
    pub(super) fn router_timer_turn(&mut self) {
        let mut out = self.outbox();
        if let Err(reason) = self.router.tick(Monotonic::from_ns(self.now), &mut out) {
            self.no_worker_left(reason, &mut out);
        }
        self.route_from(Member::Router, out);
        self.router_turn();
    }

    /// The router notices that worker `index` died, as a dropped connection tells its driver:
    /// it fails the worker over, also once every stream ended (the collector must not wait
    /// for its report). A router gone notices nothing.
    pub(super) fn router_detects_death(&mut self, index: usize) {
        if self.router_exit.is_some() {
            return;
        }
        // The router knows it by its index in the run, not the harness's.
        let Some(index) = self.router_index(index) else { return };
        let mut out = self.outbox();
        if let Err(reason) = self.router.worker_lost(index as u32, "killed by the test", &mut out) {
            self.no_worker_left(reason, &mut out);
        }
        self.route_from(Member::Router, out);
        self.router_turn();
    }

    /// The router's process ends (`why`): what is sent to it from now on is lost.
    fn router_exits(&mut self, end: End, why: String) {
        self.router_exit = Some(RouterExit { end, why, at: self.now });
        self.dead.insert(Member::Router);
    }

    /// The last worker is gone (`reason`): the core has sent its report; as the driver does
    /// with any error, the router tells every standing link it gives the run up, and exits.
    fn no_worker_left(&mut self, reason: String, out: &mut Recorded) {
        self.router.abandon(&reason, out);
        out.event(Event::Refused { who: "the run".into(), reason: reason.clone() });
        self.router_report.get_or_insert_with(|| self.router.report());
        self.router_exits(End::OutOfWorkers, reason);
    }
}
