//! The router's data path: each tick is hashed by symbol to the worker that owns it and
//! appended, as it came plus the router's arrival stamp, to that worker's batch. A batch
//! leaves when it is full or when no more input is waiting (smart batching); end-of-stream
//! and rule-switch markers leave behind everything routed before them. Owns no socket: the
//! frames go to the [`Outbox`] it is given.
//!
//! Membership can change while it routes (live rescaling, [`crate::rescaling`]): a worker that
//! joins gets the next index; the ring then covers the new members, symbols seen for the first
//! time go by it at once (no state exists for them anywhere), and the symbols already owned move
//! part by part. While a part's state moves, the ticks of its symbols are held, and they leave
//! for the new owner right behind the state.

use crate::replay_log::ReplayLog;
use cep_core::control::RulesText;
use cep_core::failover::{Checkpoint, Restore, RestoredPart, Snapshot};
use cep_core::frame::{Body, TickBatch};
use cep_core::identity::ROUTER_ID;
use cep_core::outbox::{Event, Outbox, Peer};
use cep_core::partition::Partitioner;
use cep_core::report::{bounded_reason, EndOfStream, LostStream, Rejections};
use cep_core::rescale::{MovedSymbol, Retire, StreamsOpened};
use cep_core::symbol_map::SymbolMap;
use cep_core::tick::TickRecord;
use cep_core::wire::{FrameKind, TickBatchWriter};
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;

/// Per-run routing state.
pub struct DataPath {
    partitioner: Partitioner,
    /// The worker index of each of the ring's members, in the ring's order.
    ring_members: Vec<usize>,
    /// Per symbol: the worker that owns it, and the one stream its ticks may come on (per-key
    /// order holds within one stream only).
    owners: SymbolMap<Route>,
    /// Symbols whose state is moving, with their move part: their ticks are held.
    moving: SymbolMap<u32>,
    /// The ticks held per move part, in arrival order.
    held: FxHashMap<u32, Held>,
    held_ticks: usize,
    /// Workers that left: they take no more ticks nor markers.
    retired: Vec<bool>,
    /// End markers that arrived while state was moving: they wait for the held ticks.
    deferred_ends: Vec<EndOfStream>,
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
    /// The streams the router ended itself, their injector taken for dead, with why.
    lost_streams: BTreeMap<u32, LostStream>,
    /// Streams their injector ended before their course, with why (their marker's `cut`).
    cut_streams: BTreeMap<u32, String>,
    /// Per ended stream, what its injector said it sent (for workers that join later).
    end_sent: Vec<u64>,
    /// Per stream, the CURVE key of the injector that registered it (empty when open): on a
    /// secure socket its ticks and end marker are taken from that key only.
    stream_keys: Vec<String>,
    rejections: Rejections,
    /// Per worker, the batches routed to it since its last checkpoint (when checkpoints are on).
    logs: Vec<ReplayLog>,
    logging: bool,
}

/// The `cut` of the end markers the router sends for a stream it ended itself: the workers
/// report its `sent` as unknown.
pub const LOST_STREAM_MARK: &str = "its injector was taken for dead: ended by the router";

/// How far ahead of its stream a tick's sequence number may be: an injector numbers every
/// tick it sends, so a gap is only ticks the router rejected; a number further ahead is not
/// its injector's, and trusting it would make the stream's later ticks look behind.
pub const MAX_SEQ_AHEAD: u64 = 1 << 20;

/// A frame's sender checked against the streams its ticks claim: once per run of ticks of one
/// stream (a batch is usually one stream's), not once per tick.
struct SenderCheck<'k> {
    /// The sender's CURVE key on a secure socket (`None` when open: no check).
    key: Option<&'k str>,
    /// The last stream checked, and whether the sender registered it.
    last: Option<(u32, bool)>,
}

impl SenderCheck<'_> {
    /// Whether the sender may send `stream`'s ticks (`keys`: each stream's registering key).
    #[inline]
    fn owns(&mut self, stream: u32, keys: &[String]) -> bool {
        let Some(key) = self.key else { return true };
        match self.last {
            Some((last, owned)) if last == stream => owned,
            _ => {
                let owned = keys.get(stream as usize).is_some_and(|owner| owner == key);
                self.last = Some((stream, owned));
                owned
            }
        }
    }
}

/// Where a symbol's ticks go, and where they come from.
#[derive(Clone, Copy, Debug)]
struct Route {
    worker: usize,
    stream: u32,
}

/// The ticks of one move part's symbols that arrived while its state moved.
#[derive(Default)]
struct Held {
    batches: Vec<TickBatchWriter>,
    per_stream: BTreeMap<u32, u64>,
}

impl DataPath {
    /// Routing over `workers` (ring order) for `streams` injector streams, in batches of at
    /// most `batch_limit` ticks; frames above `max_frame_bytes` are rejected.
    pub fn new(workers: &[String], vnodes: usize, streams: u32, batch_limit: usize, max_frame_bytes: usize) -> Self {
        let stream_count = streams as usize;
        DataPath {
            partitioner: Partitioner::new(workers, vnodes),
            ring_members: (0..workers.len()).collect(),
            owners: SymbolMap::default(),
            moving: SymbolMap::default(),
            held: FxHashMap::default(),
            held_ticks: 0,
            retired: vec![false; workers.len()],
            deferred_ends: Vec::new(),
            batches: (0..workers.len()).map(|_| TickBatchWriter::new(ROUTER_ID)).collect(),
            batch_limit: batch_limit.max(1),
            max_frame_bytes,
            streams,
            decoded: Vec::with_capacity(batch_limit),
            received: vec![0; stream_count],
            routed: vec![vec![0; workers.len()]; stream_count],
            next_seq: vec![0; stream_count],
            routed_total: 0,
            ended: vec![false; stream_count],
            lost_streams: BTreeMap::new(),
            cut_streams: BTreeMap::new(),
            end_sent: vec![0; stream_count],
            stream_keys: vec![String::new(); stream_count],
            rejections: Rejections::new("router"),
            logs: (0..workers.len()).map(|_| ReplayLog::default()).collect(),
            logging: false,
        }
    }

    /// Keeps every batch routed to a worker until its next checkpoint (failover replays them).
    pub fn keep_replay_logs(&mut self) {
        self.logging = true;
    }

    /// Bytes held in the replay logs.
    pub fn replay_bytes(&self) -> usize {
        self.logs.iter().map(ReplayLog::bytes).sum()
    }

    /// Whether the holder of `key` (empty: an open run) registered every stream of `streams`.
    pub fn owns_streams(&self, streams: std::ops::Range<u32>, key: &str) -> bool {
        !streams.is_empty()
            && streams.end as usize <= self.stream_keys.len()
            && self.stream_keys[streams.start as usize..streams.end as usize].iter().all(|owner| owner == key)
    }

    /// What a worker's end marker of `stream` says of how it ended: for a stream the router
    /// ended itself, that its `sent` is the router's count, not its injector's.
    fn lost_marker(&self, stream: usize) -> Option<String> {
        self.is_lost(stream).then(|| LOST_STREAM_MARK.to_string())
    }

    /// Whether the router ended `stream` itself, its injector taken for dead.
    fn is_lost(&self, stream: usize) -> bool {
        self.lost_streams.contains_key(&(stream as u32))
    }

    /// The streams the router ended itself, with why and what each sent at least.
    pub fn lost_streams(&self) -> &BTreeMap<u32, LostStream> {
        &self.lost_streams
    }

    /// The streams their injector ended before their course, with why.
    pub fn cut_streams(&self) -> &BTreeMap<u32, String> {
        &self.cut_streams
    }

    /// Whether any stream has ended (a dead worker can then no longer be replayed: the
    /// survivors may have closed the stream).
    pub fn any_ended(&self) -> bool {
        self.ended.iter().any(|ended| *ended)
    }

    /// Sends checkpoint `id`'s barrier to `worker`, behind everything routed to it (`base`:
    /// the snapshot of its the router builds on, [`Checkpoint::base`]).
    pub fn barrier(&mut self, worker: usize, checkpoint: Checkpoint, out: &mut impl Outbox) {
        self.flush(worker, out);
        self.logs[worker].barrier(checkpoint.id);
        out.send(Peer::Worker(worker as u32), &checkpoint.encode(ROUTER_ID));
    }

    /// `worker`'s checkpoint `id` completed: its log before the barrier is released.
    pub fn release_log(&mut self, worker: usize, id: u64) -> usize {
        self.logs[worker].release_until(id)
    }

    /// Empties `worker`'s log (it can no longer be replayed exactly).
    pub fn drop_log(&mut self, worker: usize) -> usize {
        self.logs[worker].clear()
    }

    /// Gives the symbols of dead `worker` to their owners on the (already updated) ring; it
    /// takes nothing more. Returns each moved symbol: (symbol, stream, new owner), in order.
    pub fn reassign(&mut self, worker: usize, out: &mut impl Outbox) -> Vec<(String, u32, u32)> {
        // What was batched for it goes to its log (the send itself goes nowhere: it is dead).
        self.flush(worker, out);
        self.retired[worker] = true;
        let mut moved = Vec::new();
        for (symbol, route) in self.owners.iter_mut().filter(|(_, route)| route.worker == worker) {
            // UTF-8 was checked when the frame was decoded.
            let name = std::str::from_utf8(symbol).unwrap_or_default();
            route.worker = self.ring_members[self.partitioner.owner(name)];
            moved.push((name.to_string(), route.stream, route.worker as u32));
        }
        moved.sort();
        moved
    }

    /// Ticks in `worker`'s replay log.
    pub fn logged_ticks(&self, worker: usize) -> u64 {
        self.logs[worker].ticks()
    }

    /// Restores the symbols of dead `worker` (already [`Self::reassign`]ed: `moved`) at their
    /// new owners: each first gets the snapshot parts of the symbols it takes (none: the
    /// worker had no checkpoint yet, its log holds everything), then a Restore without state
    /// listing every symbol it takes (those first seen since the checkpoint start empty; it
    /// marks them all for the collector), then their logged ticks, in order, behind what it
    /// was already sent. Returns the ticks replayed.
    pub fn replay(
        &mut self,
        worker: usize,
        snapshot: &[Snapshot],
        moved: &[(String, u32, u32)],
        out: &mut impl Outbox,
    ) -> u64 {
        let log = std::mem::take(&mut self.logs[worker]);
        self.flush_all(out);
        let from = worker as u32;
        for part in snapshot {
            let owned = part.symbols.iter().filter_map(|symbol| {
                let owner = self.owners.get(symbol.symbol.as_bytes())?.worker as u32;
                Some((owner, symbol.clone()))
            });
            let state = RestoredPart { checkpoint: part.id, part: part.part, stored: part.stored };
            send_restores(from, owned, Some(state), out);
        }
        let every = moved.iter().map(|(symbol, stream, owner)| {
            (*owner, MovedSymbol { symbol: symbol.clone(), stream: *stream, next_seq: 0 })
        });
        send_restores(from, every, None, out);
        let mut replayed = 0;
        let mut decoded = std::mem::take(&mut self.decoded);
        for frame in log.batches() {
            // The router wrote these frames itself.
            let Ok(frame) = cep_core::frame::Frame::read(frame, usize::MAX) else { continue };
            let Ok(batch) = frame.ticks(&mut decoded) else { continue };
            for tick in batch.records {
                let Some(to) = self.owners.get(batch.symbol(tick)).map(|route| route.worker) else { continue };
                self.routed[tick.injector as usize][to] += 1;
                replayed += 1;
                let writer = &mut self.batches[to];
                writer.push_encoded(batch.encoded(tick), tick, tick.t_router_in);
                if writer.is_full(self.batch_limit) {
                    self.flush(to, out);
                }
            }
        }
        self.decoded = decoded;
        self.flush_all(out);
        replayed
    }

    /// Whether every stream has ended (and its end markers went out).
    pub fn all_ended(&self) -> bool {
        self.deferred_ends.is_empty() && self.ended.iter().all(|ended| *ended)
    }

    /// Whether every stream's injector has ended it (its markers may still wait for a move).
    pub fn input_ended(&self) -> bool {
        self.ended.iter().all(|ended| *ended)
    }

    /// Opens `count` more injector streams (an injector registered while the run goes) and
    /// tells every worker, ahead of any of their ticks; returns the first new stream's id.
    pub fn add_streams(&mut self, count: u32, out: &mut impl Outbox) -> u32 {
        let first = self.streams;
        self.streams += count;
        let total = self.streams as usize;
        let workers = self.batches.len();
        self.received.resize(total, 0);
        self.routed.resize_with(total, || vec![0; workers]);
        self.next_seq.resize(total, 0);
        self.ended.resize(total, false);
        self.end_sent.resize(total, 0);
        self.stream_keys.resize(total, String::new());
        let marker = StreamsOpened { first, count }.encode(ROUTER_ID);
        for worker in (0..workers).filter(|worker| !self.retired[*worker]) {
            out.send(Peer::Worker(worker as u32), &marker);
        }
        first
    }

    /// Injector streams of the run so far.
    pub fn streams(&self) -> u32 {
        self.streams
    }

    /// Adds a worker that joined (already connected as the next index): it takes nothing
    /// until [`Self::set_ring`] includes it, and is told at once of the streams that have
    /// already ended (the others' markers will reach it with everyone's).
    pub fn add_worker(&mut self, out: &mut impl Outbox) -> usize {
        self.batches.push(TickBatchWriter::new(ROUTER_ID));
        self.retired.push(false);
        self.logs.push(ReplayLog::default());
        for routed in &mut self.routed {
            routed.push(0);
        }
        let worker = self.batches.len() - 1;
        let deferred: Vec<u32> = self.deferred_ends.iter().map(|eos| eos.stream).collect();
        for stream in 0..self.ended.len() {
            if self.ended[stream] && !deferred.contains(&(stream as u32)) {
                let cut = self.lost_marker(stream);
                let marker = EndOfStream { stream: stream as u32, sent: self.end_sent[stream], routed: 0, cut };
                out.send(Peer::Worker(worker as u32), &marker.encode(ROUTER_ID));
            }
        }
        worker
    }

    /// The ring is now over `members` (worker index, id): symbols seen from now on go by it;
    /// those already owned stay with their owner until they move ([`Self::moves`]).
    pub fn set_ring(&mut self, members: &[(usize, String)], vnodes: usize) {
        let ids: Vec<String> = members.iter().map(|(_, id)| id.clone()).collect();
        self.partitioner = Partitioner::new(&ids, vnodes);
        self.ring_members = members.iter().map(|(index, _)| *index).collect();
    }

    /// Every owned symbol the ring now gives to another worker: (symbol, owner, new owner),
    /// in symbol order.
    pub fn moves(&self) -> Vec<(Box<[u8]>, usize, usize)> {
        let mut moves: Vec<(Box<[u8]>, usize, usize)> = self
            .owners
            .iter()
            .filter_map(|(symbol, route)| {
                let to = self.ring_owner(symbol);
                (to != route.worker).then(|| (symbol.into(), route.worker, to))
            })
            .collect();
        moves.sort();
        moves
    }

    fn ring_owner(&self, symbol: &[u8]) -> usize {
        // UTF-8 was checked when the frame was decoded.
        self.ring_members[self.partitioner.owner(std::str::from_utf8(symbol).unwrap_or_default())]
    }

    /// Starts moving `symbols` away from `from` as move part `part`: what was routed to `from`
    /// leaves now (its hand-off marker must follow it), and their ticks are held from here on.
    pub fn begin_part(&mut self, part: u32, symbols: &[Box<[u8]>], from: usize, out: &mut impl Outbox) {
        self.flush(from, out);
        for symbol in symbols {
            self.moving.insert(symbol, part);
        }
        self.held.insert(part, Held::default());
    }

    /// The part's state reached `to`: its symbols belong to `to` now, and their held ticks
    /// leave for it, in order, behind the state. Returns how many were held.
    pub fn complete_part(&mut self, part: u32, symbols: &[Box<[u8]>], to: usize, out: &mut impl Outbox) -> u64 {
        for symbol in symbols {
            self.moving.remove(symbol);
            if let Some(route) = self.owners.get_mut(symbol) {
                route.worker = to;
            }
        }
        let Some(held) = self.held.remove(&part) else { return 0 };
        // What was batched for `to` before goes out now (behind the state, which the caller
        // sent first; other symbols' ticks), then the held ticks.
        self.flush(to, out);
        let mut total = 0;
        for mut batch in held.batches {
            let ticks = batch.len();
            total += ticks as u64;
            let frame = batch.seal(out.now());
            if self.logging {
                self.logs[to].batch(frame, ticks);
            }
            out.send(Peer::Worker(to as u32), frame);
        }
        for (stream, count) in held.per_stream {
            self.routed[stream as usize][to] += count;
            self.routed_total += count;
        }
        self.held_ticks -= total as usize;
        total
    }

    /// Ticks held for moving symbols now.
    pub fn held_ticks(&self) -> usize {
        self.held_ticks
    }

    /// Whether state is moving now (some part has not completed).
    pub fn parts_in_flight(&self) -> bool {
        !self.held.is_empty()
    }

    /// Sends the end markers that waited for a move (call once no part is in flight).
    pub fn release_deferred_ends(&mut self, out: &mut impl Outbox) {
        for eos in std::mem::take(&mut self.deferred_ends) {
            self.send_end(eos, out);
        }
    }

    /// Retires `worker`, which owns nothing any more: what was batched for it leaves, then the
    /// marker that tells it to report and exit, with what it was routed per stream.
    pub fn retire(&mut self, worker: usize, out: &mut impl Outbox) {
        self.flush(worker, out);
        self.retired[worker] = true;
        let routed =
            self.routed.iter().enumerate().map(|(stream, per_worker)| (stream as u32, per_worker[worker])).collect();
        out.send(Peer::Worker(worker as u32), &Retire { routed }.encode(ROUTER_ID));
    }

    /// Forgets `worker`, which never owned anything (a joiner the router cannot reach): no
    /// marker goes to it any more.
    pub fn forget(&mut self, worker: usize) {
        self.batches[worker].clear();
        self.retired[worker] = true;
    }

    /// Symbols owned per worker (by index).
    pub fn owned(&self) -> Vec<u64> {
        let mut owned = vec![0; self.batches.len()];
        for route in self.owners.values() {
            owned[route.worker] += 1;
        }
        owned
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

    /// Streams `first..first + keys.len()` belong to the injectors holding these CURVE keys.
    pub fn bind_streams(&mut self, first: u32, keys: &[String]) {
        for (stream, key) in (first as usize..).zip(keys) {
            if let Some(slot) = self.stream_keys.get_mut(stream) {
                slot.clone_from(key);
            }
        }
    }

    /// Handles one frame from an injector, received at `now`; `from`: the sender's CURVE key
    /// on a secure socket (`None` when open).
    pub fn handle(&mut self, bytes: &[u8], from: Option<&str>, now: u64, out: &mut impl Outbox) {
        let Some(frame) = self.rejections.accept(bytes, self.max_frame_bytes) else { return };
        match frame.kind() {
            FrameKind::Ticks => {
                let mut decoded = std::mem::take(&mut self.decoded);
                match frame.ticks(&mut decoded) {
                    Ok(batch) => {
                        let mut sender = SenderCheck { key: from, last: None };
                        for tick in batch.records {
                            self.route(&batch, tick, &mut sender, now, out);
                        }
                    }
                    Err(error) => self.rejections.reject(error.cause(), Some(frame.sender()), &error),
                }
                self.decoded = decoded;
            }
            FrameKind::EndOfStream => {
                if let Some(eos) = self.rejections.decode::<EndOfStream>(&frame) {
                    self.end_stream(eos, frame.sender(), from, out);
                }
            }
            _ => self.rejections.unexpected(&frame),
        }
    }

    #[inline]
    fn route(
        &mut self,
        batch: &TickBatch<'_>,
        tick: &TickRecord,
        sender: &mut SenderCheck<'_>,
        t_in: u64,
        out: &mut impl Outbox,
    ) {
        if self.rejections.reject_invalid(tick, batch.sender) {
            return;
        }
        if tick.injector >= self.streams || self.ended[tick.injector as usize] {
            return self.reject_closed_stream(tick.injector, batch.sender, sender);
        }
        let stream = tick.injector as usize;
        if !sender.owns(tick.injector, &self.stream_keys) {
            let detail = format_args!("tick of stream {} from a key that did not register it", tick.injector);
            self.rejections.reject("stream_of_another_key", Some(batch.sender), &detail);
            return;
        }
        // A tick behind its stream goes on: the worker counts it as a duplicate or out of order.
        let next = self.next_seq[stream];
        if tick.seq.saturating_sub(next) > MAX_SEQ_AHEAD {
            let detail = format_args!("tick {} of stream {} (next expected: {next})", tick.seq, tick.injector);
            self.rejections.reject("seq_far_ahead", Some(batch.sender), &detail);
            return;
        }
        let symbol = batch.symbol(tick);
        let owner = match self.owners.get(symbol) {
            Some(route) if route.stream == tick.injector => route.worker,
            Some(route) => {
                let detail = format_args!("a tick of stream {} for a symbol of stream {}", tick.injector, route.stream);
                self.rejections.reject("symbol_of_another_stream", Some(batch.sender), &detail);
                return;
            }
            None => {
                let worker = self.ring_owner(symbol);
                self.owners.insert(symbol, Route { worker, stream: tick.injector });
                worker
            }
        };
        self.received[tick.injector as usize] += 1;
        let next = &mut self.next_seq[tick.injector as usize];
        *next = (*next).max(tick.seq.saturating_add(1));
        if !self.moving.is_empty() {
            if let Some(&part) = self.moving.get(symbol) {
                return self.hold(part, batch, tick, t_in);
            }
        }
        self.routed[tick.injector as usize][owner] += 1;
        self.routed_total += 1;
        let writer = &mut self.batches[owner];
        writer.push_encoded(batch.encoded(tick), tick, t_in);
        if writer.is_full(self.batch_limit) {
            self.flush(owner, out);
        }
    }

    /// A tick of a stream the run does not have, or that has ended (counted as `fenced` when
    /// the router ended it, its injector taken for dead, and its own injector sent it).
    #[cold]
    #[inline(never)]
    fn reject_closed_stream(&mut self, stream: u32, sender: u32, key: &mut SenderCheck<'_>) {
        if self.is_lost(stream as usize) && key.owns(stream, &self.stream_keys) {
            let detail = format_args!("tick of stream {stream}, ended as lost: its injector is fenced");
            return self.rejections.reject("fenced", Some(sender), &detail);
        }
        let detail =
            format_args!("tick of stream {stream} (run has {} streams; ended streams take no ticks)", self.streams);
        self.rejections.reject("unknown_stream", Some(sender), &detail);
    }

    #[cold]
    fn hold(&mut self, part: u32, batch: &TickBatch<'_>, tick: &TickRecord, t_in: u64) {
        let held = self.held.get_mut(&part).expect("a moving symbol's part holds its ticks");
        if held.batches.last().is_none_or(|last| last.is_full(self.batch_limit)) {
            held.batches.push(TickBatchWriter::new(ROUTER_ID));
        }
        held.batches.last_mut().expect("pushed above").push_encoded(batch.encoded(tick), tick, t_in);
        *held.per_stream.entry(tick.injector).or_default() += 1;
        self.held_ticks += 1;
    }

    /// Ends stream `stream` for its injector, which was taken for dead (`reason`; its last
    /// heartbeat said it had sent `heard`): as if its marker had come, counting what arrived of
    /// it (what it sent in truth is unknown). Whatever of it arrives later is refused as
    /// `fenced`. Returns what it received, or `None` when the stream had ended already.
    pub fn end_lost(&mut self, stream: u32, reason: String, heard: u64, out: &mut impl Outbox) -> Option<u64> {
        let index = stream as usize;
        if self.ended.get(index) != Some(&false) {
            return None;
        }
        let received = self.received[index];
        self.lost_streams.insert(stream, LostStream { reason, sent_at_least: heard.max(received) });
        // At least one past the highest number that arrived, as a marker would have to say.
        self.close_stream(EndOfStream { stream, sent: self.next_seq[index], routed: 0, cut: None }, out);
        Some(received)
    }

    fn end_stream(&mut self, mut eos: EndOfStream, sender: u32, from: Option<&str>, out: &mut impl Outbox) {
        let stream = eos.stream as usize;
        if stream >= self.ended.len() {
            let detail = format_args!("end of stream {} (run has {} streams)", eos.stream, self.streams);
            self.rejections.reject("unknown_stream", Some(sender), &detail);
            return;
        }
        if from.is_some_and(|key| key != self.stream_keys[stream]) {
            let detail = format_args!("end of stream {} from a key that did not register it", eos.stream);
            self.rejections.reject("stream_of_another_key", Some(sender), &detail);
            return;
        }
        if self.is_lost(stream) {
            let detail = format_args!("end of stream {}, ended as lost: its injector is fenced", eos.stream);
            self.rejections.reject("fenced", Some(sender), &detail);
            return;
        }
        if self.ended[stream] {
            let detail = format_args!("end of stream {} (it has ended)", eos.stream);
            self.rejections.reject("unknown_stream", Some(sender), &detail);
            return;
        }
        // Its injector numbers its ticks 0, 1, ...: it sent at least one past the highest number
        // that arrived, and a marker saying less is not its own.
        if eos.sent < self.next_seq[stream] {
            let detail = format_args!(
                "end of stream {} claims {} sent, yet its tick {} arrived: not its injector's",
                eos.stream,
                eos.sent,
                self.next_seq[stream] - 1
            );
            self.rejections.reject("end_behind_stream", Some(sender), &detail);
            return;
        }
        // Kept bounded here; the marker goes on without it (it may wait in `deferred_ends`).
        if let Some(reason) = eos.cut.take() {
            self.cut_streams.insert(eos.stream, bounded_reason(&reason));
        }
        self.close_stream(eos, out);
    }

    /// The stream of `eos` has ended: its marker goes to every worker behind its last ticks.
    fn close_stream(&mut self, eos: EndOfStream, out: &mut impl Outbox) {
        let stream = eos.stream as usize;
        self.ended[stream] = true;
        self.end_sent[stream] = eos.sent;
        if self.parts_in_flight() {
            // Held ticks of this stream must reach their new owner before its end marker.
            self.deferred_ends.push(eos);
            return;
        }
        self.send_end(eos, out);
    }

    fn send_end(&mut self, eos: EndOfStream, out: &mut impl Outbox) {
        let stream = eos.stream as usize;
        // The marker must follow the stream's last ticks on every worker's socket.
        self.flush_all(out);
        for worker in (0..self.batches.len()).filter(|worker| !self.retired[*worker]) {
            let routed = self.routed[stream][worker];
            let marker = EndOfStream { stream: eos.stream, sent: eos.sent, routed, cut: self.lost_marker(stream) };
            out.send(Peer::Worker(worker as u32), &marker.encode(ROUTER_ID));
        }
        // (A stream the router ended itself has its own event: what its injector sent is unknown.)
        if !self.is_lost(stream) {
            out.event(Event::StreamEnded { stream: eos.stream, sent: eos.sent, received: self.received[stream] });
        }
    }

    /// Per stream, the first sequence number after everything routed so far.
    pub fn switch_point(&self) -> BTreeMap<u32, u64> {
        self.next_seq.iter().enumerate().map(|(stream, next)| (stream as u32, *next)).collect()
    }

    /// Sends the rule-switch marker to every worker behind everything routed so far.
    pub fn switch_rules(&mut self, marker: &RulesText, out: &mut impl Outbox) {
        self.flush_all(out);
        let frame = marker.encode(ROUTER_ID);
        for worker in (0..self.batches.len()).filter(|worker| !self.retired[*worker]) {
            out.send(Peer::Worker(worker as u32), &frame);
        }
    }

    fn flush(&mut self, worker: usize, out: &mut impl Outbox) {
        let batch = &mut self.batches[worker];
        if batch.is_empty() {
            return;
        }
        let ticks = batch.len();
        let frame = batch.seal(out.now());
        if self.logging {
            self.logs[worker].batch(frame, ticks);
        }
        out.send(Peer::Worker(worker as u32), frame);
        batch.clear();
    }

    /// Sends every batch that holds ticks (nothing more is waiting, or a marker must follow).
    pub fn flush_all(&mut self, out: &mut impl Outbox) {
        for worker in 0..self.batches.len() {
            if !self.retired[worker] {
                self.flush(worker, out);
            }
        }
    }
}

/// Sends each owner a Restore of dead worker `from` with its share of `symbols` ((owner,
/// symbol) pairs) and the stored part that holds their state (none: the last Restore).
fn send_restores(
    from: u32,
    symbols: impl Iterator<Item = (u32, MovedSymbol)>,
    state: Option<RestoredPart>,
    out: &mut impl Outbox,
) {
    let mut per_owner: BTreeMap<u32, Vec<MovedSymbol>> = BTreeMap::new();
    for (owner, symbol) in symbols {
        per_owner.entry(owner).or_default().push(symbol);
    }
    for (to, symbols) in per_owner {
        let restore = Restore { from, symbols, state };
        out.send(Peer::Worker(to), &restore.encode(ROUTER_ID));
    }
}
