//! When the router starts, reads its input, waits for a lost collector and ends: the policy
//! around its core ([`crate::router`]) on a monotonic clock, with no socket. The driver hands
//! [`RunPolicy`] the time and what it observes at every turn of its one loop, and carries out
//! the [`Turn`] that comes back.
//!
//! ```text
//!  Gathering ─complete─▶ Running ─every stream ended─▶ Ending ─collector has everything─▶
//!   │ start time-out     │ collector lost > retention    (end time-out; restarted on a
//!   ▼                    ▼                               collector back)
//!  Incomplete          CollectorLost          Late asks (grace) ─▶ Draining (grace) ─▶ Released
//! ```

use crate::router::Router;
use cep_core::clock::{Every, Monotonic};
use std::time::Duration;
use tracing::{info, warn};

/// How long the router, once the collector has everything, still answers nodes that have not
/// asked for the end yet (a dead one never will), and then at most waits for a worker to take
/// the frames a failover during the end left for it.
const LATE_ASK_GRACE: Duration = Duration::from_secs(5);

/// How often the router says whom it is waiting for while it gathers.
const WAITING_LOG_EVERY: Duration = Duration::from_secs(5);

/// How often the router looks around while it runs: asks whether its peers are alive, watches
/// the collector, counts refused connections, publishes its metrics.
const LOOK_EVERY: Duration = Duration::from_millis(50);

/// How often the router tells the collector how many ticks it received (its progress lines).
const PROGRESS_EVERY: Duration = Duration::from_millis(500);

/// The longest the driver waits for a socket while it gathers, reads or waits for the
/// collector at the end, so that it turns at least this often.
const READ_WAIT: Duration = Duration::from_millis(50);

/// The longest the driver waits while it reads no input but waits for room in a worker's
/// queue or for the state of moving symbols (both also wake it).
const HOLD_WAIT: Duration = Duration::from_millis(10);

/// The phase of a run.
enum Phase {
    /// Registrations, until the cluster is complete.
    Gathering(Gathering),
    /// Routing the streams.
    Running,
    /// Every stream ended and the report is sent: waiting for the collector.
    Ending(Ending),
    /// Every node released.
    Released,
}

/// What the driver observes at a turn.
#[derive(Clone, Copy, Debug, Default)]
pub struct Observed {
    /// Frames wait for a worker's full queue.
    pub pending: bool,
    /// A stop was asked for.
    pub shutdown: bool,
}

/// A change of phase the driver carries out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// The cluster is complete: measure the clock, connect the workers and the collector, announce
    /// the start.
    Start,
    /// Every stream ended and nothing waits for a worker (or a stop was asked for, which
    /// waits for nothing): send the report.
    Finish,
    /// Release every node and stop.
    Release,
}

/// What the driver does at a turn of its loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Turn {
    /// Read input frames.
    pub read_input: bool,
    /// The longest to wait for a socket when nothing is ready.
    pub wait: Duration,
    /// Ask whether the peers are alive, count refusals, publish the metrics.
    pub look_around: bool,
    /// Tell the collector what has entered the cluster so far ([`Router::progress`]).
    pub report_progress: bool,
    /// Serve control requests even if none was seen waiting (while it reads, the driver
    /// waits on its input alone): at the look-around's cadence, and at every turn while
    /// symbols move (their state arrives on the control socket).
    pub serve_control: bool,
    /// Give the core its timers (a move overdue, a checkpoint due): at the look-around's
    /// cadence, and at every turn while symbols move or the input is held (a checkpoint
    /// frees full replay logs).
    pub timers: bool,
    /// Watch the collector (not once it has everything: it then leaves).
    pub watch_collector: bool,
    /// Fail over the workers found dead (not once the collector has everything: the workers
    /// then leave).
    pub fail_over: bool,
    /// A change of phase to carry out first.
    pub change: Option<Change>,
}

/// The router's run policy: its phases, the collector's watch and the cadence of looking
/// around. Decides at every turn of the driver's loop what the driver does.
pub struct RunPolicy {
    phase: Phase,
    end_timeout: Duration,
    watch: CollectorWatch,
    look: Every,
    progress: Every,
}

impl RunPolicy {
    /// A run from `now`: gathering within `start_timeout`, a lost collector waited for
    /// `retention`, the collector waited for `end_timeout` at the end.
    pub fn new(start_timeout: Duration, end_timeout: Duration, retention: Duration, now: Monotonic) -> RunPolicy {
        RunPolicy {
            phase: Phase::Gathering(Gathering::new(start_timeout, now)),
            end_timeout,
            watch: CollectorWatch::new(retention),
            look: Every::new(LOOK_EVERY, now),
            progress: Every::new(PROGRESS_EVERY, now),
        }
    }

    /// Whether the run has started (the router routes or ends).
    pub fn started(&self) -> bool {
        matches!(self.phase, Phase::Running | Phase::Ending(_))
    }

    /// What the transport says of the collector at `now` (`lost`: why it is taken for lost);
    /// an error once it has been lost for longer than the retention time. A collector back
    /// during the end gets the whole end time-out to finish.
    pub fn collector(&mut self, now: Monotonic, lost: Option<&str>) -> Result<(), Stop> {
        if self.watch.observe(now, lost)? {
            if let Phase::Ending(ending) = &mut self.phase {
                ending.collector_back(now);
            }
        }
        Ok(())
    }

    /// The turn at `now`, given the router's state and what the driver observes; an error
    /// when the run cannot go on.
    pub fn turn(&mut self, now: Monotonic, router: &Router, observed: Observed) -> Result<Turn, Stop> {
        let Observed { pending, shutdown } = observed;
        let look_around = self.look.fire(now);
        let mut turn = Turn {
            read_input: false,
            wait: READ_WAIT,
            look_around,
            report_progress: false,
            serve_control: false,
            timers: false,
            watch_collector: false,
            fail_over: false,
            change: None,
        };
        match &mut self.phase {
            Phase::Gathering(gathering) => {
                if gathering.turn(now, router, shutdown)? {
                    self.phase = Phase::Running;
                    turn.change = Some(Change::Start);
                }
            }
            Phase::Running => {
                let held = !router.accepting_input() || pending;
                // Ticks held for moving symbols, and frames waiting for a worker, go out before
                // the report (a stop does not wait).
                if shutdown || (router.all_ended() && !held) {
                    self.phase = Phase::Ending(Ending::new(self.end_timeout, now));
                    turn.change = Some(Change::Finish);
                } else {
                    turn.read_input = !held;
                    turn.wait = if held { HOLD_WAIT } else { READ_WAIT };
                    turn.report_progress = self.progress.fire(now);
                }
                turn.watch_collector = look_around;
                turn.fail_over = true;
            }
            Phase::Ending(ending) => {
                let observed = EndObserved { collector_lost: self.watch.is_lost(), pending, shutdown };
                match ending.turn(now, router, observed) {
                    EndStep::Release => {
                        self.phase = Phase::Released;
                        turn.change = Some(Change::Release);
                    }
                    EndStep::Drain => turn.wait = HOLD_WAIT,
                    // The collector has everything and leaves: its link is not asked after.
                    EndStep::AnswerLate => turn.look_around = false,
                    // The collector is still taking the last frames: it may be lost or come back.
                    EndStep::Wait => {
                        turn.watch_collector = look_around;
                        turn.fail_over = true;
                    }
                }
            }
            Phase::Released => turn.change = Some(Change::Release),
        }
        turn.serve_control = turn.look_around || router.rescaling();
        turn.timers = turn.serve_control || !turn.read_input;
        Ok(turn)
    }
}

/// Why the policy ends the run early.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Stop {
    /// The cluster did not assemble within the start time-out.
    #[error("the cluster was not complete within {waited:?}: {missing}")]
    Incomplete {
        /// How long the router waited.
        waited: Duration,
        /// Who was still missing.
        missing: String,
    },
    /// Asked to stop before the cluster was complete; who was missing.
    #[error("shut down before the cluster was complete ({0})")]
    ShutdownBeforeStart(String),
    /// The collector was lost for longer than the retention time.
    #[error("the collector is lost ({cause}) and none took over within {retention:?} (--collector-retention)")]
    CollectorLost {
        /// How it was noticed.
        cause: String,
        /// How long the router waited for a restarted one.
        retention: Duration,
    },
}

/// Registrations until the cluster is complete, bounded by the start time-out (zero: none).
pub struct Gathering {
    start_timeout: Duration,
    since: Monotonic,
    log: Every,
}

impl Gathering {
    /// Gathering from `now`.
    pub fn new(start_timeout: Duration, now: Monotonic) -> Gathering {
        Gathering { start_timeout, since: now, log: Every::new(WAITING_LOG_EVERY, now) }
    }

    /// True once the run can start; an error when it never will.
    pub fn turn(&mut self, now: Monotonic, router: &Router, shutdown: bool) -> Result<bool, Stop> {
        if router.can_start(now) {
            return Ok(true);
        }
        if shutdown {
            return Err(Stop::ShutdownBeforeStart(router.waiting_for()));
        }
        if !self.start_timeout.is_zero() && now.since(self.since) > self.start_timeout {
            return Err(Stop::Incomplete { waited: self.start_timeout, missing: router.waiting_for() });
        }
        if self.log.fire(now) {
            info!("waiting for {}", router.waiting_for());
        }
        Ok(false)
    }
}

/// How long the collector has been lost, against the time a restarted one has to take over.
pub struct CollectorWatch {
    retention: Duration,
    lost_since: Option<Monotonic>,
}

impl CollectorWatch {
    /// A watch that waits `retention` for a restarted collector.
    pub fn new(retention: Duration) -> CollectorWatch {
        CollectorWatch { retention, lost_since: None }
    }

    /// Whether the collector is lost now.
    pub fn is_lost(&self) -> bool {
        self.lost_since.is_some()
    }

    /// What the transport says of the collector at `now` (`lost`: why it is taken for lost).
    /// True when a lost one is back (reached again, or a restarted one took over); an error
    /// once it has been lost for longer than the retention time.
    pub fn observe(&mut self, now: Monotonic, lost: Option<&str>) -> Result<bool, Stop> {
        let Some(cause) = lost else {
            let Some(since) = self.lost_since.take() else { return Ok(false) };
            info!(after = ?now.since(since), "the collector is back (heard from again, or a restarted one took over)");
            return Ok(true);
        };
        let since = *self.lost_since.get_or_insert_with(|| {
            warn!(
                retention = ?self.retention,
                "the collector is lost ({cause}): waiting for it, or a restarted one, to take over (the run goes on)"
            );
            now
        });
        if now.since(since) > self.retention {
            return Err(Stop::CollectorLost { cause: cause.to_string(), retention: self.retention });
        }
        Ok(false)
    }
}

/// What the driver observes at a turn of the end.
#[derive(Clone, Copy, Debug, Default)]
pub struct EndObserved {
    /// The collector is lost and may still come back (within its retention).
    pub collector_lost: bool,
    /// Frames wait for a worker's full queue.
    pub pending: bool,
    /// A stop was asked for.
    pub shutdown: bool,
}

/// What the router does at a turn of its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndStep {
    /// Serve control requests, watch the peers: the collector is still taking the last frames.
    Wait,
    /// The collector has everything (or the end time-out passed): answer the nodes that ask
    /// for the end late.
    AnswerLate,
    /// Give the workers what failovers during the end left waiting for them.
    Drain,
    /// Release every node and stop.
    Release,
}

/// The end of a run: every socket stays open until the collector has everything (a lost
/// collector has its retention time to come back, however long that takes), then late asks
/// are answered and what waits for a worker is drained, each for at most [`LATE_ASK_GRACE`].
pub struct Ending {
    end_timeout: Duration,
    step: EndStep,
    since: Monotonic,
}

impl Ending {
    /// The end, from `now`.
    pub fn new(end_timeout: Duration, now: Monotonic) -> Ending {
        Ending { end_timeout, step: EndStep::Wait, since: now }
    }

    /// A lost collector is back (or a restarted one took over): it gets the whole end
    /// time-out to finish.
    pub fn collector_back(&mut self, now: Monotonic) {
        if self.step == EndStep::Wait {
            self.since = now;
        }
    }

    /// The step at `now`, given what the driver observes.
    pub fn turn(&mut self, now: Monotonic, router: &Router, observed: EndObserved) -> EndStep {
        let EndObserved { collector_lost, pending, shutdown } = observed;
        if shutdown {
            self.step = EndStep::Release;
        }
        let elapsed = now.since(self.since);
        let next = match self.step {
            EndStep::Wait if router.collector_finished() => Some(EndStep::AnswerLate),
            EndStep::Wait if elapsed >= self.end_timeout && !collector_lost => {
                warn!(waited = ?self.end_timeout, "the collector never said it had everything; ending anyway");
                Some(EndStep::AnswerLate)
            }
            // A node that sent its report just before the collector finished may ask a moment
            // later: answer it too, rather than leave it waiting for its end time-out.
            EndStep::AnswerLate if router.every_node_asked() || elapsed >= LATE_ASK_GRACE => Some(EndStep::Drain),
            // Bounded: a worker that takes nothing is dead or stuck.
            EndStep::Drain if !pending => Some(EndStep::Release),
            EndStep::Drain if elapsed >= LATE_ASK_GRACE => {
                warn!("frames for a worker that took none in {LATE_ASK_GRACE:?} were not delivered");
                Some(EndStep::Release)
            }
            _ => None,
        };
        if let Some(next) = next {
            self.step = next;
            self.since = now;
            // A step whose condition already holds is passed at once.
            return self.turn(now, router, observed);
        }
        self.step
    }
}

#[cfg(test)]
mod tests;
