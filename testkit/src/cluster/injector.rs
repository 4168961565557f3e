//! The injector's streams: each runs the injector's own stream core
//! ([`cep_injector::stream`]) on the virtual clock: ticks batched as they fall due, the end
//! marker with the true count after the last.

use super::{LocalCluster, Payload, Scheduled, SentTick};
use crate::spec::Member;
use cep_core::frame::{AwaitEnd, Body};
use cep_core::liveness::InjectorHeartbeat;
use cep_injector::pacing::{Pace, Schedule};
use cep_injector::source::StreamSource;
use cep_injector::stream::{Step, StreamCore, StreamPlan};

/// One injector stream: its source until the run starts, then its core.
pub(super) enum Stream {
    Waiting(Option<StreamSource>),
    Sending(Box<StreamCore>),
}

impl Stream {
    /// Ticks it has sent.
    pub(super) fn sent(&self) -> u64 {
        match self {
            Stream::Waiting(_) => 0,
            Stream::Sending(core) => core.sent(),
        }
    }

    fn is_over(&self) -> bool {
        matches!(self, Stream::Sending(core) if core.is_over())
    }
}

impl LocalCluster {
    pub(super) fn start_injector(&mut self, start_ns: u64) {
        if self.injector_started {
            return;
        }
        self.injector_started = true;
        let streams = u64::from(self.spec.streams);
        let rate = self.spec.rate / streams as f64;
        for stream in 0..self.spec.streams {
            // The spec's count split as the model splits it; each stream at its share of the rate.
            let quota = self.spec.count / streams + u64::from(u64::from(stream) < self.spec.count % streams);
            let plan = StreamPlan {
                stream,
                pace: Pace::Rate(Schedule::new(start_ns, rate)),
                limit: quota,
                deadline_ns: None,
                batch: self.spec.batch,
                linger_ns: 0,
            };
            let Stream::Waiting(source) = &mut self.streams[stream as usize] else { continue };
            let source = source.take().expect("a waiting stream has its source");
            self.streams[stream as usize] = Stream::Sending(Box::new(StreamCore::new(plan, source, start_ns)));
            self.schedule(start_ns, Scheduled::InjectorStep(stream));
        }
        // Its heartbeats, from the answer on, as the driver's thread sends them.
        self.schedule(self.now, Scheduled::Timer(Member::Injector(0)));
    }

    /// The injector's heartbeat, every quarter of the failure time-out until the run is over
    /// (the collector's end):
    /// one for all its streams, with each one's count.
    pub(super) fn injector_heartbeat(&mut self) {
        let member = Member::Injector(0);
        if self.dead.contains(&member) || self.now < self.injector_beat_due {
            return;
        }
        self.injector_beat_due = self.now + self.spec.failure_timeout_ns / 4;
        let beat = InjectorHeartbeat { first: 0, sent: self.streams.iter().map(Stream::sent).collect() };
        self.send(member, Member::Router, Payload::Request(member, beat.encode(0)));
        self.schedule(self.injector_beat_due, Scheduled::Timer(member));
    }

    /// A stream wakes up: it sends what is due, then sleeps until the next tick falls due. A
    /// thread's wake-ups are not exact: this one wakes when a batch's worth is due.
    pub(super) fn injector_step(&mut self, stream: u32) {
        let member = Member::Injector(stream);
        if self.dead.contains(&Member::Injector(0)) || self.dead.contains(&member) {
            return;
        }
        if self.fenced_injector.is_some() {
            // Told it was taken for dead: it stops at once.
            return;
        }
        if let Some(&until) = self.paused_until.get(&Member::Injector(0)) {
            // A stopped process sends nothing: its streams go on when it wakes.
            return self.schedule(until, Scheduled::InjectorStep(stream));
        }
        let Stream::Sending(core) = &mut self.streams[stream as usize] else { return };
        let (now, names, sent) = (self.now, &self.names, &mut self.sent);
        let mut frames = Vec::new();
        let wake_at = loop {
            let record = |tick: cep_injector::stream::Batched<'_>| {
                let (seq, symbol, price, t_event) = (tick.seq, tick.symbol.to_string(), tick.price, tick.t_event);
                sent.push(SentTick { stream, seq, symbol, price, t_event });
            };
            match core.step(now, names, record) {
                Step::WaitUntil(due) => break Some(due),
                Step::Send(batch) => frames.push(batch.seal(now).to_vec()),
                Step::End(marker) => {
                    frames.push(marker.to_vec());
                    break None;
                }
                Step::Over => break None,
            }
        };
        for frame in frames {
            self.send(member, Member::Router, Payload::Data(frame));
        }
        match wake_at {
            Some(due) => {
                let period = 1e9 * self.spec.streams as f64 / self.spec.rate;
                let gathering = (period * self.spec.batch.saturating_sub(1) as f64) as u64;
                self.schedule(due.saturating_add(gathering), Scheduled::InjectorStep(stream));
            }
            None if self.streams.iter().all(Stream::is_over) => {
                let first = Member::Injector(0);
                self.send(first, Member::Router, Payload::Request(first, AwaitEnd.encode(0)));
            }
            None => {}
        }
    }
}
