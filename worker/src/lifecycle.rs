//! When a worker asks, holds, leaves and stops: the policy around its core
//! ([`crate::worker`]), as a state machine of its own. It owns no socket and reads no clock:
//! the driver ([`crate::driver`]) and the simulation each hand it the time ([`Monotonic`]),
//! what they see of the collector's link ([`Links`]) and the router's answers, and carry out
//! the [`Turn`] it returns. Its requests to the router go through the [`Outbox`]; what the
//! collector commits of its frames it asks once (again if it waits on the collector and hears
//! nothing), and the router pushes each change.
//!
//! ```text
//!  Running ──collector full──▶ Holding ──saved below the bound──▶ Running
//!     │ shutdown: Leave ──▶ accepted: draining ──▶ retired ─┐
//!     │ every stream ended ──────────────────────────────────┤
//!     ▼                                                      ▼
//!  Ending (report sent; waits until the collector saved all, at most end_timeout)
//!     ──▶ Over(Finished)
//!  Leave refused, unanswered or not drained in time ──▶ Over(Stopped): the driver stops its
//!     sends, then sends the report. A joiner never reached ──▶ Over(Unreached): an error.
//!  The router says it took this worker for dead (any phase) ──▶ Over(Fenced): an error.
//!  The router says it gives the run up (any phase) ──▶ Over(Abandoned): an error, its reason.
//! ```
//!
//! At every phase until its run is over it sends the router a [`Heartbeat`] at least every
//! quarter of the router's failure time-out, from the loop that reads its input: a worker whose
//! loop stops turning (stopped, paused, stuck) falls silent, and the router fails it over.

use crate::worker::{Worker, PROGRESS_EVERY_NS};
use cep_core::clock::{Every, Monotonic};
use cep_core::control::Ready;
use cep_core::control::{Refused, MAX_CONTROL_FRAME_BYTES};
use cep_core::delivery::{Committed, DeliveryQuery, DeliveryStatus};
use cep_core::frame::{Body, Frame};
use cep_core::liveness::{Heartbeat, Verdict};
use cep_core::outbox::{Outbox, Peer};
use cep_core::rescale::{Leave, RescaleAccepted};
use cep_core::wire::FrameKind;
use std::time::Duration;
use tracing::{debug, info, warn};

/// How often the worker reports its progress to the collector (and publishes its metrics).
const PROGRESS_EVERY: Duration = Duration::from_nanos(PROGRESS_EVERY_NS);

/// How often the worker asks whether the router and the collector are alive.
const LIVENESS_EVERY: Duration = Duration::from_millis(100);

/// How often the router's answers and notices are looked for while frames stream in: each
/// look is a system call, which at one tick per frame cost as much as a tenth of a worker's
/// CPU. Idle turns, and turns while it waits on the collector, look every time.
const ANSWERS_EVERY: Duration = Duration::from_millis(1);

/// The heartbeat's cadence when the router names no failure time-out.
const DEFAULT_HEARTBEAT_EVERY: Duration = Duration::from_millis(500);

/// How long a worker that waits on the collector (holding its input, or at the end) goes
/// without news of what it saved, counted from the later of its last news and the start of
/// its wait, before it asks the router again; the answer to that question also sends again
/// what the collector has not saved (the tail of a dropped connection shows no gap).
const ASK_AGAIN_AFTER: Duration = Duration::from_secs(1);

/// How long a question about the collector may go unanswered before it is taken as lost.
const UNANSWERED_AFTER: Duration = Duration::from_secs(5);

/// How long a worker asked to stop waits for the router to accept that it leaves (a router
/// that is stopping too never answers): then it stops at once.
const LEAVE_ANSWER_TIMEOUT: Duration = Duration::from_secs(2);

/// What the driver sees of its link to the collector at a turn.
#[derive(Clone, Copy, Debug, Default)]
pub struct Links {
    /// It holds as many unsaved frames as `--max-unsaved` allows.
    pub collector_full: bool,
    /// The collector has saved every frame sent.
    pub all_saved: bool,
}

/// What the driver does at this turn, besides sending what went into the outbox.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Turn {
    /// Ask the transport whether the router and the collector are alive.
    pub check_liveness: bool,
    /// Report the progress so far ([`Worker::progress`]) and publish the metrics.
    pub report_progress: bool,
    /// Read the next frame of input; false while holding (the collector must save first) and
    /// once the run is ending.
    pub read_input: bool,
    /// Take the router's answers and notices that arrived.
    pub read_answers: bool,
}

/// How the run ended, once [`Lifecycle::is_over`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// Every stream ended (or the worker was retired) and the report went out.
    Finished,
    /// Stopped before its course: asked to stop and not drained in time, or the router would
    /// not let it leave. What is queued for the collector gets a short linger only.
    Stopped,
    /// It joined a running cluster and the router never reached it within the start time-out.
    Unreached,
    /// The router took it for dead (it was silent for the failure time-out) and moved its
    /// symbols: it must not act any more ([`Lifecycle::fenced`] says why).
    Fenced,
    /// The router gave the run up and said why ([`Lifecycle::abandoned`]): the collector was
    /// lost, say. Nothing this worker does can reach the results any more.
    Abandoned,
}

/// The phases of a worker's run.
#[derive(Clone, Copy, Debug)]
enum Phase {
    /// Taking ticks.
    Running,
    /// Taking no ticks until the collector saves below the bound.
    Holding,
    /// The report is out; waiting since this instant for the collector to save everything.
    Ending(Monotonic),
    Over(Ended),
}

/// A worker asked to stop (SIGTERM, Ctrl-C) asks the router to drain it and goes on until it
/// is retired; bounded at each step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Leaving {
    /// Not asked to stop.
    No,
    /// Asked to stop; the Leave goes at the next turn.
    Requested,
    /// Asked the router at this instant; no answer yet.
    Asked(Monotonic),
    /// The router accepted at this instant: symbols are moving away.
    Draining(Monotonic),
}

/// The worker's run policy. See the module docs.
pub struct Lifecycle {
    id: String,
    index: u32,
    /// The collector's CURVE key, from the start (empty when open): a collector that takes
    /// over holds the key of the one before (the router makes sure).
    collector_key: String,
    start_timeout: Duration,
    end_timeout: Duration,
    started: Monotonic,
    phase: Phase,
    leaving: Leaving,
    liveness: Every,
    answers: Every,
    progress: Every,
    /// When the next [`Heartbeat`] is due.
    heartbeat: Every,
    /// Why the router fenced this worker, once it did.
    fenced: Option<String>,
    /// Why the router gave the run up, once it said so.
    abandoned: Option<String>,
    /// When the [`DeliveryQuery`] out, not answered yet, was asked. The worker asks once (and
    /// again when it waits and hears nothing); the router answers, then pushes each change
    /// ([`Committed`]).
    asking: Option<Monotonic>,
    /// Whether the question out was asked after a silence while frames waited on the collector.
    asked_after_silence: bool,
    /// When it last heard what the collector committed (an answer or a notice); `None`: never
    /// asked yet. A worker that waits on the collector and hears nothing for
    /// [`ASK_AGAIN_AFTER`] asks again (a notice can be lost while its link reconnects).
    last_news: Option<Monotonic>,
    /// Since when it waits on the collector (holding its input, or at the end): the silence
    /// that makes it ask again counts from here at the earliest, so that frames sent just
    /// before it began to wait are not taken for lost.
    waiting_since: Option<Monotonic>,
    /// How far the collector had saved at the last news.
    last_saved: Option<u64>,
    /// Whether reaching `--max-unsaved` was logged already.
    warned_full: bool,
}

impl Lifecycle {
    /// The policy of worker `id`, started at `now` on the router's answer `ready` (its index,
    /// the collector's key, the router's failure time-out).
    pub fn new(
        id: String,
        ready: &Ready,
        (start_timeout, end_timeout): (Duration, Duration),
        now: Monotonic,
    ) -> Lifecycle {
        let heartbeat_every = ready.liveness_every().unwrap_or(DEFAULT_HEARTBEAT_EVERY);
        Lifecycle {
            id,
            index: ready.assigned,
            collector_key: ready.collector_key.clone(),
            start_timeout,
            end_timeout,
            started: now,
            phase: Phase::Running,
            leaving: Leaving::No,
            liveness: Every::new(LIVENESS_EVERY, now),
            answers: Every::new(ANSWERS_EVERY, now),
            progress: Every::new(PROGRESS_EVERY, now),
            heartbeat: Every::new(heartbeat_every, now),
            fenced: None,
            abandoned: None,
            asking: None,
            asked_after_silence: false,
            last_news: None,
            waiting_since: None,
            last_saved: None,
            warned_full: false,
        }
    }

    /// Asked to stop (a signal): the worker asks the router to drain it at the next turn.
    pub fn stop_requested(&mut self) {
        if self.leaving == Leaving::No {
            self.leaving = Leaving::Requested;
        }
    }

    /// Whether the run is over, and how.
    pub fn ended(&self) -> Option<Ended> {
        match self.phase {
            Phase::Over(ended) => Some(ended),
            _ => None,
        }
    }

    /// Why the router fenced this worker ([`Ended::Fenced`]).
    pub fn fenced(&self) -> Option<&str> {
        self.fenced.as_deref()
    }

    /// Why the router gave the run up ([`Ended::Abandoned`]).
    pub fn abandoned(&self) -> Option<&str> {
        self.abandoned.as_deref()
    }

    /// How often it sends its [`Heartbeat`]: the longest its loop may wait between two turns.
    pub fn heartbeat_every(&self) -> Duration {
        self.heartbeat.period()
    }

    /// Whether the run is over.
    pub fn is_over(&self) -> bool {
        self.ended().is_some()
    }

    /// One turn at `now` (`frame`: one of input arrived at it): decides what is due, sends the
    /// requests due through `out`, and, once the worker is done, sends its report
    /// ([`Worker::finish`]) and waits for the collector.
    pub fn turn(
        &mut self,
        now: Monotonic,
        frame: bool,
        worker: &mut Worker,
        links: Links,
        out: &mut impl Outbox,
    ) -> Turn {
        if self.is_over() {
            return Turn::default();
        }
        let waiting = matches!(self.phase, Phase::Holding | Phase::Ending(_));
        let mut turn = Turn {
            // While it waits on the collector its link is looked after at every turn (a
            // restarted collector gets what it holds at once).
            check_liveness: self.liveness.fire(now) || waiting,
            report_progress: matches!(self.phase, Phase::Running | Phase::Holding) && self.progress.fire(now),
            read_input: false,
            read_answers: self.answers.fire(now) || waiting || !frame,
        };
        if self.heartbeat.fire(now) {
            self.heartbeat(worker, false, out);
        }
        let silent = self.last_news.is_none_or(|heard| {
            self.waiting_since.is_some_and(|since| now.since(heard).min(now.since(since)) >= ASK_AGAIN_AFTER)
        });
        // A question whose answer was lost (its link reconnected) does not block the next.
        let free = self.asking.is_none_or(|asked| now.since(asked) >= UNANSWERED_AFTER);
        if free && silent {
            out.send(Peer::Router, &DeliveryQuery { worker: self.index }.encode(self.index));
            self.asking = Some(now);
            self.asked_after_silence = self.last_news.is_some();
            self.last_news.get_or_insert(now);
        }
        self.leave(now, worker, out);
        // A joining worker the router never reaches (its Welcome does not come): a wrong
        // --advertise. Say so and stop rather than wait for ever.
        if !worker.welcomed() && !self.is_over() && now.since(self.started) > self.start_timeout {
            self.phase = Phase::Over(Ended::Unreached);
        }
        if worker.done() && matches!(self.phase, Phase::Running | Phase::Holding) {
            // Every stream ended, or retired: the report goes, then everything must be saved,
            // as the links tell at the next turn (not the ones read before the report went).
            worker.finish(out);
            self.phase = Phase::Ending(now);
            self.note_waiting(now);
            // Nothing goes to the collector after the report: it may have everything then.
            turn.report_progress = false;
            return turn;
        }
        self.phase = match self.phase {
            Phase::Running if links.collector_full && self.leaving == Leaving::No => {
                // Once in the log; a small bound is reached at every save.
                if std::mem::replace(&mut self.warned_full, true) {
                    debug!(id = self.id, "at --max-unsaved: waiting for the collector to save");
                } else {
                    warn!(
                        id = self.id,
                        "holding as many frames as --max-unsaved allows: waiting for the collector to save them (said once)"
                    );
                }
                Phase::Holding
            }
            Phase::Holding if !links.collector_full => Phase::Running,
            // Asked to stop while holding: it leaves, which takes its input again.
            Phase::Holding if self.leaving != Leaving::No => Phase::Running,
            Phase::Ending(_) if links.all_saved => Phase::Over(Ended::Finished),
            Phase::Ending(since) if now.since(since) > self.end_timeout => {
                warn!(
                    id = self.id,
                    waited = ?self.end_timeout,
                    "the collector has not saved every frame of this worker: ending anyway"
                );
                Phase::Over(Ended::Finished)
            }
            phase => phase,
        };
        if self.ended() == Some(Ended::Finished) {
            // It goes quiet now (it waits for the end of the run): no longer to be watched.
            self.heartbeat(worker, true, out);
        }
        self.note_waiting(now);
        turn.read_input = matches!(self.phase, Phase::Running);
        turn
    }

    /// Keeps when the wait on the collector began, as the phase now says.
    fn note_waiting(&mut self, now: Monotonic) {
        let waiting = matches!(self.phase, Phase::Holding | Phase::Ending(_));
        self.waiting_since = waiting.then(|| self.waiting_since.unwrap_or(now));
        // No longer waiting: no silence to answer for.
        self.asked_after_silence &= waiting;
    }

    fn heartbeat(&self, worker: &Worker, finished: bool, out: &mut impl Outbox) {
        let beat = Heartbeat { worker: self.index, processed: worker.processed(), finished };
        out.send(Peer::Router, &beat.encode(self.index));
    }

    /// The leave of a worker asked to stop, bounded at each step.
    fn leave(&mut self, now: Monotonic, worker: &Worker, out: &mut impl Outbox) {
        if worker.done() || self.is_over() {
            return;
        }
        let stop = match self.leaving {
            Leaving::Requested => {
                out.send(Peer::Router, &Leave { worker: self.id.clone() }.encode(self.index));
                self.leaving = Leaving::Asked(now);
                false
            }
            Leaving::Asked(at) if now.since(at) > LEAVE_ANSWER_TIMEOUT => {
                warn!(id = self.id, "asked to stop; the router did not answer the leave: stopping");
                true
            }
            Leaving::Draining(at) if now.since(at) > self.end_timeout => {
                warn!(id = self.id, waited = ?self.end_timeout, "asked to stop; not drained in time: stopping");
                true
            }
            _ => false,
        };
        if stop {
            self.phase = Phase::Over(Ended::Stopped);
        }
    }

    /// The router's answer, at `now`, to this worker's request of kind `asked` (state
    /// hand-offs, snapshots, leaving, where the collector is), or a notice it pushed unasked
    /// (`asked`: `None`).
    pub fn answer(&mut self, asked: Option<FrameKind>, answer: &[u8], now: Monotonic, out: &mut impl Outbox) {
        let frame = match Frame::read(answer, MAX_CONTROL_FRAME_BYTES) {
            Ok(frame) => frame,
            Err(error) => {
                warn!(%error, "bad answer from the router");
                return;
            }
        };
        let id = &self.id.clone();
        let refused = || frame.body::<Refused>().map(|refused| refused.reason).unwrap_or_default();
        match (asked, frame.kind()) {
            // Whatever it asked: the router no longer counts it as a member.
            // (Said once: each request still out is answered so.)
            (_, FrameKind::Fenced | FrameKind::Abandoned) => match Verdict::of(&frame) {
                // Said once: each request still out is answered so.
                Some(Verdict::Fenced(reason)) if self.fenced.is_none() => {
                    tracing::error!(id, "the router took this worker for dead and moved its symbols: {reason}");
                    self.fenced = Some(reason);
                    self.phase = Phase::Over(Ended::Fenced);
                }
                Some(Verdict::Abandoned(reason)) if self.abandoned.is_none() => {
                    tracing::error!(id, "the router gave the run up: {reason}");
                    self.abandoned = Some(reason);
                    if self.fenced.is_none() {
                        self.phase = Phase::Over(Ended::Abandoned);
                    }
                }
                _ => {}
            },
            (Some(FrameKind::SymbolState | FrameKind::Reached | FrameKind::Snapshot), FrameKind::StateTaken) => {}
            (Some(FrameKind::Snapshot), FrameKind::Refused) => {
                // A checkpoint the router dropped (a rescale began): the next one counts.
                debug!(id, "the router did not take this worker's snapshot: {}", refused());
            }
            (Some(FrameKind::Reached), FrameKind::Refused) => {
                warn!(id, "the router did not take this worker's answer to its Welcome: {}", refused());
            }
            (Some(FrameKind::SymbolState), FrameKind::Refused) => {
                // The symbols are gone from here already; the router names them as lost.
                warn!(id, "the router did not take this worker's hand-off: {}", refused());
            }
            (Some(FrameKind::DeliveryQuery), FrameKind::DeliveryStatus) => {
                self.asking = None;
                // Asked after a second without news while frames wait: what the collector has
                // not saved by now was lost on the way (the last frames of a connection that
                // broke: no later frame shows it the gap), and goes again.
                // Only if the collector saved nothing more since the last news: one that still
                // saves is slow, not missing frames (a save slower than a second would
                // otherwise bring every unsaved frame again each second).
                let asked_after_silence = std::mem::take(&mut self.asked_after_silence);
                match frame.body::<DeliveryStatus>() {
                    Ok(status) => {
                        let lost_tail = asked_after_silence && self.last_saved == Some(status.saved);
                        self.committed(&DeliveryStatus { resend: status.resend || lost_tail, ..status }, now, out)
                    }
                    Err(error) => warn!(id, %error, "bad delivery status from the router"),
                }
            }
            (_, FrameKind::Committed) => match frame.body::<Committed>() {
                Ok(Committed(status)) => self.committed(&status, now, out),
                Err(error) => warn!(id, %error, "bad delivery notice from the router"),
            },
            (Some(FrameKind::DeliveryQuery), FrameKind::Refused) => {
                // Asked again once it waits on the collector and hears nothing.
                self.asking = None;
                warn!(id, "the router did not answer where the collector is: {}", refused());
            }
            (Some(FrameKind::Leave), FrameKind::RescaleAccepted) => {
                let symbols = frame.body::<RescaleAccepted>().map_or(0, |accepted| accepted.symbols);
                info!(id, symbols, "leaving the cluster: its symbols move to the other workers");
                self.leaving = Leaving::Draining(now);
            }
            (Some(FrameKind::Leave), FrameKind::Refused) => {
                // Its streams may have ended meanwhile: then its end goes on as any other's.
                if matches!(self.phase, Phase::Running | Phase::Holding) {
                    warn!(id, "the router would not let this worker leave ({}): stopping", refused());
                    self.phase = Phase::Over(Ended::Stopped);
                }
            }
            (_, kind) => warn!(id, ?kind, "unexpected answer from the router"),
        }
    }

    /// What the collector has committed of this worker's frames, and where it is: the link
    /// drops what is saved, sends again when asked, readdresses a collector that took over.
    fn committed(&mut self, status: &DeliveryStatus, now: Monotonic, out: &mut impl Outbox) {
        self.last_news = Some(now);
        self.last_saved = Some(status.saved);
        // News breaks the silence the question out was asked in.
        self.asked_after_silence = false;
        out.collector_moved(&status.endpoint, &self.collector_key, status.incarnation);
        out.collector_saved(status.saved, status.resend);
    }
}

#[cfg(test)]
mod tests;
