//! When the collector saves, looks, reports and ends: the policy around its core
//! ([`crate::collector`]), as a state machine of its own. It owns no socket, file or clock: the
//! driver ([`crate::driver`]) and the simulation hand it the time ([`Monotonic`]) and what they
//! observe, and carry out the [`Turn`] it returns.
//!
//! ```text
//!  Running ─every report in──────────────────────────▶ Over(HasEverything)  ┐ the router is
//!     │ ─no frame for the idle time-out──────────────▶ Over(Idle)           ┘ told: RunFinished
//!     │ ─the router unreachable (while it owes its report)▶ Over(RouterLost)
//!     └─shutdown─▶ Stopping (the others' last reports, for a grace) ─▶ Over(Shutdown)
//! ```

use crate::collector::SAVE_EVERY_NS;
use cep_core::clock::{Every, Monotonic};
use std::time::Duration;
use tracing::warn;

/// How long a stopping collector still takes the reports of the processes stopping with it.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// How often the collector asks whether the router is still there.
const ROUTER_CHECK_EVERY: Duration = Duration::from_millis(100);

/// How often the collector saves its state, when frames arrived since the last save.
const SAVE_EVERY: Duration = Duration::from_nanos(SAVE_EVERY_NS);

/// How often the metrics are published and the progress line printed.
const PUBLISH_EVERY: Duration = Duration::from_secs(1);

/// How many liveness periods (a failure time-out, by default) one save may be in flight while
/// the collector still tells the router it lives.
pub const STUCK_SAVE_PERIODS: u32 = 4;

/// How the collector's run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ended {
    /// Every report arrived.
    HasEverything,
    /// No frame came for the idle time-out: what is missing is reported as lost.
    Idle,
    /// Asked to stop: the results are partial.
    Shutdown,
    /// The router died while it still owed its report.
    RouterLost(String),
}

impl Ended {
    /// Whether the router is told that the run is over (it keeps everyone's sockets open until
    /// then): not when it is stopping with the collector, nor when it is dead.
    pub fn tells_router(&self) -> bool {
        matches!(self, Ended::HasEverything | Ended::Idle)
    }

    /// Whether the run ran its course; a stopped one is not complete, whatever balanced.
    pub fn ran_its_course(&self) -> bool {
        !matches!(self, Ended::Shutdown)
    }

    /// Whether the saved state is removed once the results are written: kept when the run may
    /// still go on without this collector (a stop, a lost router), so that it can resume.
    pub fn removes_state(&self) -> bool {
        matches!(self, Ended::HasEverything | Ended::Idle)
    }
}

/// What the collector observes at a turn.
#[derive(Clone, Copy, Debug, Default)]
pub struct Observed {
    /// Every report has arrived ([`crate::Collector::has_everything`]).
    pub has_everything: bool,
    /// The router has sent its report: it may go, and is not watched any more.
    pub router_reported: bool,
    /// A stop was asked for (a signal).
    pub shutdown: bool,
    /// A save is being stored and not confirmed yet: the next waits.
    pub save_in_flight: bool,
}

/// What the driver does at this turn.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Turn {
    /// Save the state (hand it to the storing thread).
    pub save: bool,
    /// Tell the router this collector lives, with nothing saved: a save is still being
    /// stored (a slow disk) past the liveness cadence, and the router must not take the
    /// collector for lost while it waits. Only for [`STUCK_SAVE_PERIODS`] liveness periods
    /// of one save: one stuck longer (a hung mount) lets the router take the collector for
    /// lost, as one whose loop stopped, rather than stall the run.
    pub tell_alive: bool,
    /// Ask the transport whether the router is alive ([`Lifecycle::router_lost`] if not).
    pub check_router: bool,
    /// Rewrite the rolling `summary.json`.
    pub write_summary: bool,
    /// Publish the metrics (and print the progress line, when asked for).
    pub publish: bool,
}

#[derive(Clone, Debug)]
enum Phase {
    Running,
    /// Asked to stop at this instant: taking the last reports for [`SHUTDOWN_GRACE`].
    Stopping(Monotonic),
    Over(Ended),
}

/// The collector's run policy. See the module docs.
pub struct Lifecycle {
    idle_timeout: Duration,
    phase: Phase,
    last_frame: Monotonic,
    /// Frames arrived since the last save.
    dirty: bool,
    save: Every,
    /// A save even with nothing new: what tells the router that this collector's loop turns.
    alive: Every,
    /// When the save in flight was handed over.
    saving_since: Option<Monotonic>,
    router_check: Every,
    summary: Option<Every>,
    publish: Every,
}

impl Lifecycle {
    /// The policy of a collector started at `now`, ending after `idle_timeout` without a frame,
    /// rewriting the rolling summary every `summary_every` (zero: never) and telling the router
    /// what it saved at least every `alive_every` (a quarter of the router's failure time-out:
    /// a collector the router hears nothing from for that long is taken for lost).
    pub fn new(idle_timeout: Duration, summary_every: Duration, alive_every: Duration, now: Monotonic) -> Lifecycle {
        Lifecycle {
            idle_timeout,
            phase: Phase::Running,
            last_frame: now,
            dirty: false,
            save: Every::new(SAVE_EVERY, now),
            alive: Every::new(alive_every, now),
            saving_since: None,
            router_check: Every::new(ROUTER_CHECK_EVERY, now),
            summary: (!summary_every.is_zero()).then(|| Every::new(summary_every, now)),
            publish: Every::new(PUBLISH_EVERY, now),
        }
    }

    /// A frame arrived at `now`.
    pub fn frame_arrived(&mut self, now: Monotonic) {
        self.last_frame = now;
        self.dirty = true;
    }

    /// The router did not answer: the run fails with this cause (partial results).
    pub fn router_lost(&mut self, cause: String) {
        self.phase = Phase::Over(Ended::RouterLost(cause));
    }

    /// How the run ended, once it has.
    pub fn ended(&self) -> Option<&Ended> {
        match &self.phase {
            Phase::Over(ended) => Some(ended),
            _ => None,
        }
    }

    /// One turn at `now`.
    pub fn turn(&mut self, now: Monotonic, observed: Observed) -> Turn {
        if self.ended().is_some() {
            return Turn::default();
        }
        // The other processes stop with us and send their reports as they go: wait a moment
        // for them, so that a partial summary holds what they knew.
        if observed.shutdown {
            if let Phase::Running = self.phase {
                warn!(grace = ?SHUTDOWN_GRACE, "shutdown requested: taking the last reports, then writing partial results");
                self.phase = Phase::Stopping(now);
            }
        }
        if observed.has_everything {
            // The last save goes before the end, whatever the cadence. A run asked to stop did
            // not run its course, even if every report came in the grace.
            let ended = if let Phase::Stopping(_) = self.phase { Ended::Shutdown } else { Ended::HasEverything };
            self.phase = Phase::Over(ended);
            return Turn { save: true, ..Turn::default() };
        }
        // The cadence is only consulted (and so only restarts) when there is something to save;
        // with nothing new, a save goes at the liveness cadence all the same.
        let save = !observed.save_in_flight && ((self.dirty && self.save.fire(now)) || self.alive.fire(now));
        if save {
            // Any save tells the router this collector lives: the liveness cadence starts again.
            self.alive = Every::new(self.alive.period(), now);
            self.dirty = false;
            self.saving_since = Some(now);
        }
        let stuck_for = self.saving_since.filter(|_| observed.save_in_flight).map(|since| now.since(since));
        let tell_alive =
            stuck_for.is_some_and(|stuck| stuck < self.alive.period() * STUCK_SAVE_PERIODS) && self.alive.fire(now);
        let turn = Turn {
            save,
            tell_alive,
            // A router that has reported, or is stopping with us, may go: only a router still
            // due to report is watched.
            check_router: !observed.router_reported && !observed.shutdown && self.router_check.fire(now),
            write_summary: self.summary.as_mut().is_some_and(|summary| summary.fire(now)),
            publish: self.publish.fire(now),
        };
        match self.phase {
            Phase::Stopping(since) if now.since(since) >= SHUTDOWN_GRACE => self.phase = Phase::Over(Ended::Shutdown),
            Phase::Running if now.since(self.last_frame) > self.idle_timeout => {
                warn!(idle = ?self.idle_timeout, "no message for the idle time-out: what is missing is reported as lost");
                self.phase = Phase::Over(Ended::Idle);
            }
            _ => {}
        }
        turn
    }
}

#[cfg(test)]
mod tests;
