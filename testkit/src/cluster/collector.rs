//! The simulation's collector: its core and its policy ([`cep_collector::lifecycle`]) as the
//! process runs them, resumed from its saved state when restarted; and the senders' side of its
//! link, which keeps every frame until the collector saved it.

use super::outcome::Outcome;
use super::{CollectorState, LocalCluster, Payload, Scheduled, TIMER_NS};
use crate::spec::Member;
use cep_collector::collector::{Collector, RunShape, SavedState, Sinks};
use cep_collector::csv::OutputsCsv;
use cep_collector::intervals::IntervalRecorder;
use cep_collector::lifecycle::{Ended as CollectorEnded, Lifecycle as CollectorLifecycle, Observed};
use cep_core::clock::Monotonic;
use cep_core::control::Ready;
use cep_core::delivery::DeliveryLog;
use cep_core::frame::{Body, Frame, RunFinished};
use cep_core::identity::{Role, ROUTER_ID};
use cep_core::wire::FrameKind;
use std::time::Duration;

impl LocalCluster {
    /// Starts the killed collector again, with what it left on disk: it registers to resume
    /// (needs [`ClusterSpec::sequenced`] and a state it saved).
    pub fn restart_collector(&mut self) {
        assert!(self.spec.sequenced, "a collector resumes only from frames kept by their senders");
        let state = self.collector_disk.state.as_ref().expect("the collector saved its state");
        let resuming = SavedState::read(state).expect("the saved state reads back").run_start_ns();
        self.dead.remove(&Member::Collector);
        self.collector = CollectorState::Registering(Vec::new());
        self.register_as(Member::Collector, Role::Collector, 0, resuming);
    }

    /// Puts a frame to the collector in its envelope and keeps it until the collector saved
    /// it, as the senders' transport does ([`cep_core::delivery`]).
    pub(super) fn sequence(&mut self, from: Member, frame: &[u8]) -> Vec<u8> {
        let source = self.source_of(from);
        let incarnation = self.collector_incarnation;
        // The router does not wait on its log (its own frames are few), a worker holds its input.
        let max_bytes = if from == Member::Router { usize::MAX } else { self.spec.max_unsaved_bytes };
        let log = self.delivery.entry(from).or_insert_with(|| DeliveryLog::new(source, incarnation, max_bytes));
        log.push(frame).to_vec()
    }

    /// The source a sender's envelopes name: a worker's index in the run, or the router's.
    pub(super) fn source_of(&self, member: Member) -> u32 {
        match member {
            Member::Router => ROUTER_ID,
            Member::Worker(index) => self.ring.iter().position(|&m| m == index).expect("a worker of the ring") as u32,
            other => panic!("{other:?} sends the collector nothing"),
        }
    }

    /// Sends every frame `from` holds to the collector again, in order.
    pub(super) fn resend(&mut self, from: Member) {
        let held: Vec<Vec<u8>> = self.delivery[&from].held().map(<[u8]>::to_vec).collect();
        for envelope in held {
            self.send(from, Member::Collector, Payload::Data(envelope));
        }
    }

    /// The collector saves its state, when its policy says: the bytes go to disk, then the
    /// router learns what it saved and which checkpoints that confirms (it passes the rest on
    /// to the senders: [`Self::route_from`]).
    pub(super) fn save_collector(&mut self) {
        let CollectorState::Running(collector) = &mut self.collector else { return };
        let (bytes, saved) = collector.save().expect("memory takes every row");
        self.collector_disk.state = Some(bytes);
        let member = Member::Collector;
        self.send(member, Member::Router, Payload::Request(member, saved.encode(0)));
    }

    pub(super) fn collector_answer(&mut self, answer: &[u8]) {
        let frame = Frame::read(answer, usize::MAX).expect("the router answers with frames");
        match frame.kind() {
            FrameKind::Ready => {
                let ready: Ready = frame.body().expect("a Ready frame");
                let disk = &self.collector_disk;
                let collector = match &disk.state {
                    // Taken over: the files are cut back to the saved state, which goes on.
                    Some(state) if ready.collector_incarnation > 1 => {
                        let state = SavedState::read(state).expect("the saved state reads back");
                        let marks = state.sinks.clone();
                        disk.csv.truncate(marks.csv_len);
                        disk.intervals.truncate(marks.intervals_len.0);
                        disk.log.truncate(marks.intervals_len.1);
                        self.collector_resumes += 1;
                        let sinks = Sinks {
                            csv: OutputsCsv::resume(disk.csv.clone(), marks.csv_rows, marks.csv_len),
                            intervals: IntervalRecorder::resume(
                                disk.intervals.clone(),
                                disk.log.clone(),
                                marks.intervals,
                                marks.intervals_len,
                            ),
                        };
                        Collector::resume(state, ready.collector_incarnation, self.spec.csv, usize::MAX, sinks)
                    }
                    _ => {
                        let start = ready.start_ns;
                        let sinks = Sinks {
                            csv: OutputsCsv::new(disk.csv.clone()).expect("memory"),
                            intervals: IntervalRecorder::new(
                                disk.intervals.clone(),
                                disk.log.clone(),
                                start,
                                Duration::from_secs(1),
                            )
                            .expect("memory"),
                        };
                        Collector::new(RunShape::of(&ready), self.spec.csv, usize::MAX, sinks, self.now)
                    }
                };
                let queued = match std::mem::replace(&mut self.collector, CollectorState::Running(Box::new(collector)))
                {
                    CollectorState::Registering(queued) => queued,
                    _ => Vec::new(),
                };
                let idle = Duration::from_nanos(self.spec.idle_timeout_ns);
                self.collector_life = Some(CollectorLifecycle::new(
                    idle,
                    Duration::ZERO,
                    Duration::from_nanos(self.spec.failure_timeout_ns / 4),
                    self.monotonic(),
                ));
                self.schedule(self.now + TIMER_NS, Scheduled::Timer(Member::Collector));
                if self.spec.sequenced {
                    // Saved once at the start; a new incarnation gets every frame not saved.
                    self.save_collector();
                    // The senders learn of it from the router, each on its own (the router
                    // as it answers, the workers by the notices it pushes them).
                    self.collector_incarnation = ready.collector_incarnation;
                }
                for (from, bytes) in queued {
                    self.deliver(from, Member::Collector, Payload::Data(bytes));
                }
            }
            FrameKind::EndAck | FrameKind::StateTaken => {}
            other => panic!("collector: unexpected answer {other:?}"),
        }
    }

    /// A turn of the collector's policy at the virtual time: a save when due (the harness keeps
    /// state only with [`ClusterSpec::sequenced`]), the end when it says.
    pub(super) fn collector_turn(&mut self) {
        let (CollectorState::Running(collector), Some(life)) = (&self.collector, &mut self.collector_life) else {
            return;
        };
        let observed = Observed {
            has_everything: collector.has_everything(),
            router_reported: collector.router_reported(),
            shutdown: false,
            save_in_flight: false,
        };
        // Its watch of the router (`turn.check_router`) is not modelled: a router that gives
        // up sends its report first, and the collector ends on it or on its idle time-out.
        let turn = life.turn(Monotonic::from_ns(self.now), observed);
        if turn.save && self.spec.sequenced {
            self.save_collector();
        }
        if let Some(ended) = self.collector_life.as_ref().and_then(|life| life.ended().cloned()) {
            self.finish_collector(&ended);
        }
    }

    pub(super) fn finish_collector(&mut self, ended: &CollectorEnded) {
        let CollectorState::Running(collector) = std::mem::replace(&mut self.collector, CollectorState::Done) else {
            return;
        };
        self.collector_life = None;
        // The others may close.
        if ended.tells_router() {
            let member = Member::Collector;
            self.send(member, Member::Router, Payload::Request(member, RunFinished.encode(0)));
        }
        let finished = collector.finish(|_| {}).expect("memory takes every row");
        self.outcome = Some(Outcome {
            summary: finished.summary,
            outputs_csv: String::from_utf8(finished.csv.contents()).expect("outputs.csv is UTF-8"),
            sent: std::mem::take(&mut self.sent),
            links: self.stats.clone(),
            worker_reports: self.worker_reports.clone(),
            router_report: self.router_report.clone(),
            elapsed_ns: self.now.saturating_sub(self.start_ns),
            events: std::mem::take(&mut self.events),
            refusals: std::mem::take(&mut self.refusals),
            fenced: std::mem::take(&mut self.fenced),
            injector_fenced: self.fenced_injector.take(),
        });
    }
}
