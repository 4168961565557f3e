//! The disturbances a sweep applies to a run, each at a point the run reaches.

use crate::spec::Member;
use crate::LocalCluster;
use std::time::Duration;

/// A disturbance of a run, applied once the cluster reached a point it can observe.
#[derive(Clone, Debug, PartialEq)]
pub enum Disruption {
    /// Kill the worker once it has processed this many ticks.
    KillWorker {
        /// Its index.
        worker: usize,
        /// Ticks it processed first.
        after_processed: u64,
    },
    /// Start killed worker `worker` again under its own id once the router failed it over, as
    /// a supervisor would: it joins the running cluster.
    Rejoin {
        /// Its index.
        worker: usize,
    },
    /// Pause the worker once it has processed this many ticks.
    PauseWorker {
        /// Its index.
        worker: usize,
        /// Ticks it processed first.
        after_processed: u64,
        /// For how long (virtual ns).
        pause_ns: u64,
    },
    /// Pause the router (`router`) or the collector once this many ticks were sent: a stopped
    /// process whose connections stay up. Its own gap must not be taken for its peers' silence.
    PauseRouterOrCollector {
        /// The router if true, else the collector.
        router: bool,
        /// Ticks sent first.
        after_sent: u64,
        /// For how long (virtual ns).
        pause_ns: u64,
    },
    /// Pause the injector once this many ticks were sent. Beyond the failure time-out the
    /// router ends its streams without it (the run then loses what it had not sent).
    PauseInjector {
        /// Ticks sent first.
        after_sent: u64,
        /// For how long (virtual ns).
        pause_ns: u64,
    },
    /// Kill the collector once this many ticks were sent (and it saved a state), and start
    /// it again `down_ns` later.
    RestartCollector {
        /// Ticks sent first.
        after_sent: u64,
        /// How long it stays down (virtual ns).
        down_ns: u64,
    },
    /// A worker joins once this many ticks were sent.
    Join {
        /// Ticks sent first.
        after_sent: u64,
    },
    /// The worker is drained once this many ticks were sent.
    Leave {
        /// Its index.
        worker: usize,
        /// Ticks sent first.
        after_sent: u64,
    },
    /// Rules from [`DEPLOYABLE`] are deployed once this many ticks were sent.
    Deploy {
        /// Which of them.
        rules: usize,
        /// Ticks sent first.
        after_sent: u64,
    },
}

/// Applies `disruption` if its point is reached; true once applied.
pub(super) fn apply(cluster: &mut LocalCluster, disruption: &Disruption, collector_back_at: &mut Option<u64>) -> bool {
    match *disruption {
        Disruption::KillWorker { worker, after_processed } => {
            let reached = cluster.is_running(worker) && cluster.processed_by(worker) >= after_processed;
            if reached {
                cluster.kill(Member::Worker(worker));
            }
            reached
        }
        Disruption::Rejoin { worker } => {
            let reached = cluster.failed_over(worker) && !cluster.rescaling();
            if reached {
                cluster.restart_worker(worker);
            }
            reached
        }
        Disruption::PauseWorker { worker, after_processed, pause_ns } => {
            let reached = cluster.is_running(worker) && cluster.processed_by(worker) >= after_processed;
            if reached {
                cluster.pause(Member::Worker(worker), Duration::from_nanos(pause_ns));
            }
            reached
        }
        Disruption::PauseRouterOrCollector { router, after_sent, pause_ns } => {
            // The collector only while it runs (not while a restart has it down).
            let reached = cluster.sent_so_far() >= after_sent && (router || cluster.collector_running());
            if reached {
                let member = if router { Member::Router } else { Member::Collector };
                cluster.pause(member, Duration::from_nanos(pause_ns));
            }
            reached
        }
        Disruption::PauseInjector { after_sent, pause_ns } => {
            let reached = cluster.sent_so_far() >= after_sent;
            if reached {
                cluster.pause(Member::Injector(0), Duration::from_nanos(pause_ns));
            }
            reached
        }
        Disruption::RestartCollector { after_sent, down_ns } => {
            // Only once it has saved a state to resume from, and not while it is down or
            // still taking over (a restarted one saves as soon as it runs).
            let reached = cluster.sent_so_far() >= after_sent
                && cluster.collector_saved()
                && cluster.collector_running()
                && collector_back_at.is_none();
            if reached {
                cluster.kill(Member::Collector);
                *collector_back_at = Some(cluster.now() + down_ns);
            }
            reached
        }
        Disruption::Join { after_sent } => {
            let reached = cluster.sent_so_far() >= after_sent && !cluster.rescaling();
            if reached {
                cluster.join();
            }
            reached
        }
        Disruption::Deploy { rules, after_sent } => {
            let reached = cluster.sent_so_far() >= after_sent && !cluster.rescaling();
            if reached {
                let (origin, text) = super::DEPLOYABLE[rules];
                cluster.deploy(origin, text);
            }
            reached
        }
        Disruption::Leave { worker, after_sent } => {
            // A stopped worker drains to the others, as an operator stops one: once another is
            // active to take its share. (One stopped as the last, or while the only other still
            // joins, is refused the leave and stops: what is routed to it after is lost, counted.)
            let reached = cluster.sent_so_far() >= after_sent
                && !cluster.rescaling()
                && cluster.is_active(worker)
                && cluster.active_workers() > 1;
            if reached {
                cluster.leave(worker);
            }
            reached
        }
    }
}
