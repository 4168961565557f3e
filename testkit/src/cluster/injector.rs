//! The injector's streams: each sends its share of the ticks in batches at its pace, then its
//! end marker.

use super::{LocalCluster, Payload, Scheduled, SentTick};
use crate::spec::Member;
use cep_core::frame::{AwaitEnd, Body};
use cep_core::report::EndOfStream;
use cep_core::wire::TickBatchWriter;
use cep_injector::source::StreamSource;

/// One injector stream: its tick source, what it sent, whether it ended.
pub(super) struct Stream {
    pub(super) source: StreamSource,
    pub(super) sent: u64,
    pub(super) ended: bool,
}

impl LocalCluster {
    pub(super) fn start_injector(&mut self, start_ns: u64) {
        if self.injector_started {
            return;
        }
        self.injector_started = true;
        for stream in 0..self.spec.streams {
            self.schedule(start_ns, Scheduled::InjectorStep(stream));
        }
    }

    /// One batch of a stream, at the pace of its share of the rate; the end marker after
    /// its last tick.
    pub(super) fn injector_step(&mut self, stream: u32) {
        let member = Member::Injector(stream);
        if self.dead.contains(&member) {
            return;
        }
        let streams = u64::from(self.spec.streams);
        let quota = self.spec.count / streams + u64::from(u64::from(stream) < self.spec.count % streams);
        let state = &mut self.streams[stream as usize];
        if state.ended {
            return;
        }
        let mut writer = TickBatchWriter::new(stream);
        let per_stream_rate = self.spec.rate / streams as f64;
        while writer.len() < self.spec.batch && state.sent < quota {
            let tick = state.source.next_tick().expect("the model never ends");
            let name = &self.names[tick.symbol as usize];
            writer.push(name.as_bytes(), tick.price, self.now, self.now, stream, state.sent, 0);
            self.sent.push(SentTick {
                stream,
                seq: state.sent,
                symbol: name.clone(),
                price: tick.price,
                t_event: self.now,
            });
            state.sent += 1;
        }
        let sent = state.sent;
        let batch_len = writer.len() as f64;
        if !writer.is_empty() {
            let frame = writer.seal(self.now).to_vec();
            self.send(member, Member::Router, Payload::Data(frame));
        }
        if sent >= quota {
            self.streams[stream as usize].ended = true;
            let marker = EndOfStream { stream, sent, routed: 0 };
            self.send(member, Member::Router, Payload::Data(marker.encode(stream)));
            if self.streams.iter().all(|s| s.ended) {
                let first = Member::Injector(0);
                self.send(first, Member::Router, Payload::Request(first, AwaitEnd.encode(0)));
            }
        } else {
            let gap = (batch_len / per_stream_rate * 1e9).max(1.0) as u64;
            self.schedule(self.now + gap, Scheduled::InjectorStep(stream));
        }
    }
}
