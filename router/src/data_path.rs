//! The router's data path: each tick is hashed by symbol to the worker that owns it and
//! appended, as it came plus the router's arrival stamp, to that worker's batch. A batch
//! leaves when it is full or when no more input is waiting (smart batching); end-of-stream
//! and rule-switch markers leave behind everything routed before them. Owns no socket: the
//! frames go to the [`Outbox`] it is given.

use cep_core::control::RulesText;
use cep_core::frame::{Body, TickBatch};
use cep_core::outbox::{Event, Outbox, Peer};
use cep_core::partition::Partitioner;
use cep_core::report::{EndOfStream, Rejections};
use cep_core::tick::TickRecord;
use cep_core::wire::{FrameKind, TickBatchWriter};
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;

/// Sender id the router puts on its frames.
pub const ROUTER_SENDER: u32 = 0;

/// Per-run routing state.
pub struct DataPath {
    partitioner: Partitioner,
    owners: FxHashMap<Box<[u8]>, usize>,
    batches: Vec<TickBatchWriter>,
    batch_limit: usize,
    max_frame_bytes: usize,
    streams: u32,
    decoded: Vec<TickRecord>,
    /// Valid ticks received per stream.
    received: Vec<u64>,
    /// Ticks routed per stream and worker (for the end-of-stream markers).
    routed: Vec<Vec<u64>>,
    /// Per stream, one past the highest sequence number routed: where a rule switch happens.
    next_seq: Vec<u64>,
    routed_total: u64,
    ended: Vec<bool>,
    rejections: Rejections,
}

impl DataPath {
    /// Routing over `workers` (ring order) for `streams` injector streams, in batches of at
    /// most `batch_limit` ticks; frames above `max_frame_bytes` are rejected.
    pub fn new(workers: &[String], vnodes: usize, streams: u32, batch_limit: usize, max_frame_bytes: usize) -> Self {
        let stream_count = streams as usize;
        DataPath {
            partitioner: Partitioner::new(workers, vnodes),
            owners: FxHashMap::default(),
            batches: (0..workers.len()).map(|_| TickBatchWriter::new(ROUTER_SENDER)).collect(),
            batch_limit: batch_limit.max(1),
            max_frame_bytes,
            streams,
            decoded: Vec::with_capacity(batch_limit),
            received: vec![0; stream_count],
            routed: vec![vec![0; workers.len()]; stream_count],
            next_seq: vec![0; stream_count],
            routed_total: 0,
            ended: vec![false; stream_count],
            rejections: Rejections::new("router"),
        }
    }

    /// Whether every stream has ended.
    pub fn all_ended(&self) -> bool {
        self.ended.iter().all(|ended| *ended)
    }

    /// Valid ticks received, per stream.
    pub fn received(&self) -> &[u64] {
        &self.received
    }

    /// Ticks routed, per stream and worker.
    pub fn routed(&self) -> &[Vec<u64>] {
        &self.routed
    }

    /// Which streams have ended.
    pub fn ended(&self) -> &[bool] {
        &self.ended
    }

    /// Ticks routed in all.
    pub fn routed_total(&self) -> u64 {
        self.routed_total
    }

    /// Frames and ticks rejected, by cause.
    pub fn rejections(&self) -> &Rejections {
        &self.rejections
    }

    /// Handles one frame from an injector, received at `now`.
    pub fn handle(&mut self, bytes: &[u8], now: u64, out: &mut impl Outbox) {
        let Some(frame) = self.rejections.accept(bytes, self.max_frame_bytes) else { return };
        match frame.kind() {
            FrameKind::Ticks => {
                let mut decoded = std::mem::take(&mut self.decoded);
                match frame.ticks(&mut decoded) {
                    Ok(batch) => {
                        for tick in batch.records {
                            self.route(&batch, tick, now, out);
                        }
                    }
                    Err(error) => self.rejections.reject(error.cause(), Some(frame.sender()), &error),
                }
                self.decoded = decoded;
            }
            FrameKind::EndOfStream => match frame.body::<EndOfStream>() {
                Ok(eos) => self.end_stream(eos, frame.sender(), out),
                Err(error) => self.rejections.reject(error.cause(), Some(frame.sender()), &error),
            },
            _ => self.rejections.unexpected(&frame),
        }
    }

    #[inline]
    fn route(&mut self, batch: &TickBatch<'_>, tick: &TickRecord, t_in: u64, out: &mut impl Outbox) {
        if self.rejections.reject_invalid(tick, batch.sender) {
            return;
        }
        if tick.injector >= self.streams || self.ended[tick.injector as usize] {
            let detail = format_args!(
                "tick of stream {} (run has {} streams; ended streams take no ticks)",
                tick.injector, self.streams
            );
            self.rejections.reject("unknown_stream", Some(batch.sender), &detail);
            return;
        }
        let symbol = batch.symbol(tick);
        let owner = match self.owners.get(symbol) {
            Some(&owner) => owner,
            None => {
                // UTF-8 was checked when the frame was decoded.
                let owner = self.partitioner.owner(std::str::from_utf8(symbol).unwrap_or_default());
                self.owners.insert(symbol.into(), owner);
                owner
            }
        };
        self.received[tick.injector as usize] += 1;
        let next = &mut self.next_seq[tick.injector as usize];
        *next = (*next).max(tick.seq.saturating_add(1));
        self.routed[tick.injector as usize][owner] += 1;
        self.routed_total += 1;
        let writer = &mut self.batches[owner];
        writer.push_encoded(batch.encoded(tick), t_in);
        if writer.len() >= self.batch_limit {
            self.flush(owner, out);
        }
    }

    fn end_stream(&mut self, eos: EndOfStream, sender: u32, out: &mut impl Outbox) {
        let stream = eos.stream as usize;
        if stream >= self.ended.len() || self.ended[stream] {
            let detail = format_args!("end of stream {} (run has {} streams)", eos.stream, self.streams);
            self.rejections.reject("unknown_stream", Some(sender), &detail);
            return;
        }
        self.ended[stream] = true;
        // The marker must follow the stream's last ticks on every worker's socket.
        self.flush_all(out);
        for worker in 0..self.batches.len() {
            let marker = EndOfStream { stream: eos.stream, sent: eos.sent, routed: self.routed[stream][worker] };
            out.send(Peer::Worker(worker as u32), &marker.encode(ROUTER_SENDER));
        }
        out.event(Event::StreamEnded { stream: eos.stream, sent: eos.sent, received: self.received[stream] });
    }

    /// Per stream, the first sequence number after everything routed so far.
    pub fn switch_point(&self) -> BTreeMap<u32, u64> {
        self.next_seq.iter().enumerate().map(|(stream, next)| (stream as u32, *next)).collect()
    }

    /// Sends the rule-switch marker to every worker behind everything routed so far.
    pub fn switch_rules(&mut self, marker: &RulesText, out: &mut impl Outbox) {
        self.flush_all(out);
        let frame = marker.encode(ROUTER_SENDER);
        for worker in 0..self.batches.len() {
            out.send(Peer::Worker(worker as u32), &frame);
        }
    }

    fn flush(&mut self, worker: usize, out: &mut impl Outbox) {
        let batch = &mut self.batches[worker];
        if batch.is_empty() {
            return;
        }
        out.send(Peer::Worker(worker as u32), batch.seal(out.now()));
        batch.clear();
    }

    /// Sends every batch that holds ticks (nothing more is waiting, or a marker must follow).
    pub fn flush_all(&mut self, out: &mut impl Outbox) {
        for worker in 0..self.batches.len() {
            self.flush(worker, out);
        }
    }
}
