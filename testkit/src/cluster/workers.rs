//! The simulation's workers: each runs the worker's core and its policy
//! ([`cep_worker::lifecycle`]) as the process does; the harness only carries their frames and
//! hands them the virtual time.

use super::{LocalCluster, Payload, Scheduled, WorkerState};
use crate::spec::Member;
use cep_core::clock::Monotonic;
use cep_core::control::{Ready, Refused};
use cep_core::frame::{AwaitEnd, Body, Frame};
use cep_core::wire::FrameKind;
use cep_worker::lifecycle::{Ended, Lifecycle, Links};
use cep_worker::Worker;
use std::collections::VecDeque;
use std::time::Duration;

/// How often a worker's policy gets a turn without a frame at most: its liveness check's
/// cadence, or its heartbeat's if that is shorter.
const WORKER_TIMER_NS: u64 = 100_000_000;
/// How soon a worker that holds its input turns again (the driver's wait while it holds).
const HOLD_WAIT_NS: u64 = 10_000_000;

/// A running worker member.
pub(super) struct SimWorker {
    core: Worker,
    life: Lifecycle,
    /// The kinds of its requests to the router not answered yet, in order: the router answers
    /// each in turn (the end-of-run request, answered last, is sent after the policy's last).
    asked: VecDeque<u8>,
    /// When its next turn is due (a timer for another time is stale).
    next_turn: u64,
    /// Whether its report went (kept as the collector got it).
    reported: bool,
    /// Whether it was asked to stop (its leave may not have reached the router yet).
    stop_asked: bool,
    /// Whether its last turn read input; frames that arrive while it does not wait, in order,
    /// as they do in its socket's queue.
    reading: bool,
    unread: VecDeque<Vec<u8>>,
}

impl SimWorker {
    pub(super) fn processed(&self) -> u64 {
        self.core.report().processed
    }

    pub(super) fn stop_asked(&self) -> bool {
        self.stop_asked
    }
}

impl LocalCluster {
    /// Starts worker `index` on the router's Ready answer.
    pub(super) fn start_worker(&mut self, index: usize, ready: &Ready) {
        let mut out = self.outbox();
        let id = self.worker_ids[index].clone();
        self.restarted_workers += u64::from(self.restarted_members.contains(&index));
        let store = Box::new(self.store.clone());
        let core =
            Worker::start(id.clone(), ready, self.spec.batch, usize::MAX, store, &mut out).expect("the rules compile");
        // A joiner the router never reaches gives up after ten failure time-outs; the end waits
        // for the collector's saves as long as the collector waits for frames.
        let timeouts = (
            Duration::from_nanos(self.spec.failure_timeout_ns.saturating_mul(10)),
            Duration::from_nanos(self.spec.idle_timeout_ns),
        );
        let life = Lifecycle::new(id, ready, timeouts, self.monotonic());
        let next_turn = self.now + turn_every(&life);
        let worker = SimWorker {
            core,
            life,
            asked: VecDeque::new(),
            next_turn,
            reported: false,
            stop_asked: false,
            reading: true,
            unread: VecDeque::new(),
        };
        let queued = match std::mem::replace(&mut self.workers[index], WorkerState::Running(Box::new(worker))) {
            WorkerState::Registering(queued) => queued,
            _ => Vec::new(),
        };
        self.route_from(Member::Worker(index), out);
        for bytes in queued {
            self.deliver(Member::Router, Member::Worker(index), Payload::Data(bytes));
        }
        self.schedule(next_turn, Scheduled::Timer(Member::Worker(index)));
    }

    /// A frame from the router for worker `index`.
    pub(super) fn worker_data(&mut self, index: usize, bytes: &[u8]) {
        let mut out = self.outbox();
        if let WorkerState::Running(worker) = &mut self.workers[index] {
            if !worker.reading {
                worker.unread.push_back(bytes.to_vec());
                return;
            }
            worker.core.handle(bytes, self.now, &mut out);
            self.route_from(Member::Worker(index), out);
            if self.workers_core_done(index) {
                self.worker_turn(index);
            }
        }
    }

    fn workers_core_done(&self, index: usize) -> bool {
        matches!(&self.workers[index], WorkerState::Running(worker) if worker.core.done())
    }

    /// The router's answer to a request of worker `index`.
    pub(super) fn worker_answer(&mut self, index: usize, answer: &[u8]) {
        let frame = Frame::read(answer, usize::MAX).expect("the router answers with frames");
        if frame.kind() == FrameKind::Ready {
            return self.start_worker(index, &frame.body().expect("a Ready frame"));
        }
        if frame.kind() == FrameKind::Refused {
            self.refusals.push((Member::Worker(index), frame.body::<Refused>().expect("a reason").reason));
        }
        let now = self.monotonic();
        let mut out = self.outbox();
        match &mut self.workers[index] {
            // A notice the router pushes answers no request.
            WorkerState::Running(worker) if frame.kind().is_notice() => {
                worker.life.answer(None, answer, now, &mut out);
            }
            WorkerState::Running(worker) => {
                let asked = worker.asked.pop_front().and_then(FrameKind::from_byte);
                worker.life.answer(asked, answer, now, &mut out);
            }
            _ => assert!(
                matches!(
                    frame.kind(),
                    FrameKind::EndAck
                        | FrameKind::StateTaken
                        | FrameKind::Refused
                        | FrameKind::DeliveryStatus
                        | FrameKind::Committed
                        | FrameKind::Fenced
                        | FrameKind::Abandoned
                        | FrameKind::RescaleAccepted
                ),
                "worker {index}: unexpected answer {:?}",
                frame.kind()
            ),
        }
        self.route_from(Member::Worker(index), out);
    }

    /// Worker `index` is asked to stop (a signal): its policy asks the router to drain it.
    pub(super) fn stop_worker(&mut self, index: usize) {
        if let WorkerState::Running(worker) = &mut self.workers[index] {
            worker.stop_asked = true;
            worker.life.stop_requested();
            self.worker_turn(index);
        }
    }

    /// The worker's timer: a turn of its policy, unless a turn since has moved it.
    pub(super) fn worker_timer(&mut self, index: usize) {
        let now = self.now;
        let paused_until = self.paused_until.get(&Member::Worker(index)).copied();
        let WorkerState::Running(worker) = &mut self.workers[index] else { return };
        if worker.next_turn != now {
            return;
        }
        match paused_until {
            // A stopped process does nothing, its timers included: the turn comes when it wakes.
            Some(until) => {
                worker.next_turn = until;
                self.schedule(until, Scheduled::Timer(Member::Worker(index)));
            }
            None => self.worker_turn(index),
        }
    }

    /// A turn of worker `index`'s policy at the virtual time; what it asks of the sockets the
    /// harness does: progress reported, and once over, the end-of-run request.
    fn worker_turn(&mut self, index: usize) {
        let member = Member::Worker(index);
        let log = self.delivery.get(&member);
        let links = Links {
            collector_full: log.is_some_and(|log| log.full()),
            all_saved: log.is_none_or(|log| log.is_empty()),
        };
        self.turns_at_max_unsaved += u64::from(links.collector_full);
        let now = self.monotonic();
        let router_lost = self.router_lost();
        let mut out = self.outbox();
        let WorkerState::Running(worker) = &mut self.workers[index] else { return };
        // The driver's loop wakes without input: a snapshot under way is finished (batches
        // in between took their share at its pace, copying symbols before their ticks).
        worker.core.idle(&mut out);
        let turn = worker.life.turn(now, false, &mut worker.core, links, &mut out);
        // A dead router: nothing this worker does can reach the results; the process exits
        // with its loss (and what it held for the collector goes with it).
        if turn.check_liveness && router_lost {
            self.workers[index] = WorkerState::Done;
            return self.worker_exits_on_error(member);
        }
        if turn.report_progress {
            worker.core.progress(self.now, &mut out);
        }
        if worker.core.done() && !std::mem::replace(&mut worker.reported, true) {
            self.worker_reports.push(worker.core.report());
        }
        let over = worker.life.is_over();
        // The next turn: soon while it holds its input, as the driver's loop turns then.
        let cadence = turn_every(&worker.life);
        worker.next_turn = self.now + if turn.read_input { cadence } else { HOLD_WAIT_NS.min(cadence) };
        let next_turn = worker.next_turn;
        worker.reading = turn.read_input;
        let unread: Vec<Vec<u8>> = if worker.reading { worker.unread.drain(..).collect() } else { Vec::new() };
        self.route_from(member, out);
        if over {
            self.finish_worker(index);
        } else {
            self.schedule(next_turn, Scheduled::Timer(member));
        }
        for bytes in unread {
            self.worker_data(index, &bytes);
        }
    }

    /// A worker whose run is over, as its process ends: finished, its report is kept and, unless
    /// retired, it waits for the end of the run; stopped, it reports what it processed and
    /// leaves; never reached or fenced, it exits with an error and reports nothing.
    fn finish_worker(&mut self, index: usize) {
        let WorkerState::Running(mut worker) = std::mem::replace(&mut self.workers[index], WorkerState::Done) else {
            return;
        };
        let member = Member::Worker(index);
        match worker.life.ended() {
            Some(Ended::Finished) => {
                if !worker.reported {
                    self.worker_reports.push(worker.core.report());
                }
                if !worker.core.retired() {
                    self.send(member, Member::Router, Payload::Request(member, AwaitEnd.encode(0)));
                }
            }
            Some(Ended::Stopped) => {
                let mut out = self.outbox();
                let report = worker.core.finish(&mut out);
                if !worker.reported {
                    self.worker_reports.push(report);
                }
                self.route_from(member, out);
            }
            // The process exits with an error: what it held for the collector goes with it.
            Some(Ended::Fenced) => {
                self.worker_exits_on_error(member);
                self.fenced.push(index);
            }
            // Told the router gave the run up: the process exits with its reason.
            Some(Ended::Abandoned) => self.worker_exits_on_error(member),
            Some(Ended::Unreached) | None => {}
        }
    }

    /// Worker `member`'s process exits with an error: what it held for the collector goes with it.
    fn worker_exits_on_error(&mut self, member: Member) {
        self.dead.insert(member);
        self.delivery.remove(&member);
    }

    /// Records a request worker `from` sends the router, to pair the answer with it.
    pub(super) fn worker_asks(&mut self, from: Member, frame: &[u8]) {
        if let (Member::Worker(index), Some(&kind)) = (from, frame.get(2)) {
            if FrameKind::is_notice_byte(kind) {
                return;
            }
            if let WorkerState::Running(worker) = &mut self.workers[index] {
                worker.asked.push_back(kind);
            }
        }
    }

    /// The virtual time as the monotonic clock the cores' timers run on.
    pub(super) fn monotonic(&self) -> Monotonic {
        Monotonic::from_ns(self.now)
    }
}

/// How often a worker's policy turns at most without a frame, ns ([`WORKER_TIMER_NS`], or its
/// heartbeat's cadence if shorter).
fn turn_every(life: &Lifecycle) -> u64 {
    (life.heartbeat_every().as_nanos() as u64).min(WORKER_TIMER_NS)
}
