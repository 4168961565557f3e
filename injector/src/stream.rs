//! One stream's sending, sans I/O: which ticks are due, how they are batched, when the stream
//! ends and with what marker. It owns no socket and reads no clock: the process
//! ([`crate::sending`]) and the simulation each hand it the time, wait, send and record what it
//! says.
//!
//! ```text
//!  step(now) ──nothing due──▶ WaitUntil(due)
//!            ──ticks due────▶ Send(every tick due by now, at least one, at most a batch)
//!            ──limit, source's end, deadline or stop──▶ End(marker with the true count), then Over
//! ```

use crate::pacing::Pace;
use crate::source::StreamSource;
use cep_core::frame::Body;
use cep_core::report::{bounded_reason, EndOfStream};
use cep_core::wire::TickBatchWriter;

/// What a stream sends, and until when.
#[derive(Clone, Copy, Debug)]
pub struct StreamPlan {
    /// The stream's id in the run.
    pub stream: u32,
    /// When each tick is due.
    pub pace: Pace,
    /// Ticks it sends at most.
    pub limit: u64,
    /// With a duration: no tick intended at or after this wall-clock time is sent.
    pub deadline_ns: Option<u64>,
    /// Ticks per batch at most.
    pub batch: usize,
    /// Paced, the least time between two batches (ns): the ticks that fall due meanwhile go
    /// out together. 0: each tick leaves when it is due.
    pub linger_ns: u64,
}

/// A tick as it went into a batch: what `--record-input` writes and the simulation keeps.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Batched<'a> {
    /// Its sequence number in the stream.
    pub seq: u64,
    /// Its symbol.
    pub symbol: &'a str,
    /// Its price.
    pub price: f64,
    /// Its intended send time.
    pub t_inject: u64,
    /// Its event time.
    pub t_event: u64,
}

/// What the stream does next.
pub enum Step<'s> {
    /// Nothing is due before this wall-clock time: wait until then (or a stop).
    WaitUntil(u64),
    /// A batch to send: seal it with the time it leaves.
    Send(Batch<'s>),
    /// The stream is over: send this end-of-stream marker, which carries its true count.
    End(&'s [u8]),
    /// The marker went already: nothing more.
    Over,
}

/// A batch ready to leave.
pub struct Batch<'s>(&'s mut TickBatchWriter);

impl<'s> Batch<'s> {
    /// The batch's bytes, stamped with the time it leaves.
    pub fn seal(self, t_sent: u64) -> &'s [u8] {
        let writer: &'s mut TickBatchWriter = self.0;
        writer.seal(t_sent)
    }
}

/// One stream's sending. See the module docs.
pub struct StreamCore {
    plan: StreamPlan,
    source: StreamSource,
    writer: TickBatchWriter,
    /// The writer holds a batch handed out last step (cleared at the next).
    handed_out: bool,
    sent: u64,
    /// When the previous tick was due (a replay's times may go backwards; sending does not).
    previous_due: u64,
    /// No batch leaves before this (wall clock, ns): the previous one's time plus the linger.
    send_after: u64,
    exhausted: bool,
    stopped: bool,
    marker: Option<Vec<u8>>,
    over: bool,
}

impl StreamCore {
    /// The stream of `plan` over `source`, starting at `start_ns` (wall clock).
    pub fn new(plan: StreamPlan, source: StreamSource, start_ns: u64) -> StreamCore {
        StreamCore {
            writer: TickBatchWriter::new(plan.stream),
            plan,
            source,
            handed_out: false,
            sent: 0,
            previous_due: start_ns,
            send_after: 0,
            exhausted: false,
            stopped: false,
            marker: None,
            over: false,
        }
    }

    /// The bad line a replay met, which ended the stream early.
    pub fn source_error(&self) -> Option<&str> {
        self.source.error()
    }

    /// Ticks sent (batched) so far.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// Whether its end marker has been handed out.
    pub fn is_over(&self) -> bool {
        self.over
    }

    /// Asked to stop: the next step ends the stream with what it sent (nothing is lost).
    pub fn stop(&mut self) {
        self.stopped = true;
    }

    /// The next step at `now` (wall clock, ns); `batched` sees every tick that goes into a batch.
    pub fn step(&mut self, now: u64, names: &[String], mut batched: impl FnMut(Batched<'_>)) -> Step<'_> {
        if self.over {
            return Step::Over;
        }
        if std::mem::take(&mut self.handed_out) {
            self.writer.clear();
        }
        let plan = self.plan;
        let next_due = plan.pace.due(self.sent, self.source.next_event_time(), self.previous_due);
        let past_deadline = plan.deadline_ns.is_some_and(|deadline| next_due.unwrap_or(now) >= deadline);
        if self.exhausted || self.stopped || self.sent >= plan.limit || past_deadline {
            self.over = true;
            // A replay that met a bad line says so: its count is true, its input short.
            let cut =
                self.source.error().map(|error| bounded_reason(&format!("its replay file has a bad line: {error}")));
            let marker = EndOfStream { stream: plan.stream, sent: self.sent, routed: 0, cut };
            return Step::End(self.marker.insert(marker.encode(plan.stream)));
        }
        // A replay whose file is over ends now: no linger before its marker.
        let send_after = if self.source.replay_ended() { 0 } else { self.send_after };
        if let Some(ready) = next_due.map(|due| due.max(send_after)).filter(|ready| *ready > now) {
            return Step::WaitUntil(ready);
        }
        // Everything already due goes out in one batch (at least one tick).
        while !self.writer.is_full(plan.batch) && self.sent < plan.limit {
            // Unpaced, a tick is intended when it is batched (the deadline was checked above).
            let t_inject = if plan.pace.is_paced() {
                let due = plan.pace.due(self.sent, self.source.next_event_time(), self.previous_due).unwrap_or(now);
                if (due > now && !self.writer.is_empty()) || plan.deadline_ns.is_some_and(|deadline| due >= deadline) {
                    break;
                }
                due
            } else {
                now
            };
            let Some(tick) = self.source.next_tick() else {
                self.exhausted = true;
                break;
            };
            self.previous_due = t_inject;
            let t_event = tick.t_event.unwrap_or(t_inject);
            let symbol = self.source.name(tick.symbol, names);
            self.writer.push(symbol.as_bytes(), tick.price, t_inject, t_event, plan.stream, self.sent, 0);
            batched(Batched { seq: self.sent, symbol, price: tick.price, t_inject, t_event });
            self.sent += 1;
        }
        if self.writer.is_empty() {
            // The source ended with nothing due: the next step sends the marker.
            return self.step(now, names, batched);
        }
        self.handed_out = true;
        // A full batch bounds the message rate by itself: what is still due goes at once.
        self.send_after = if self.writer.is_full(plan.batch) { 0 } else { now.saturating_add(plan.linger_ns) };
        Step::Send(Batch(&mut self.writer))
    }
}

#[cfg(test)]
mod tests;
