//! The worker's core: a state machine that takes the frames the router sends (tick batches,
//! end-of-stream markers, rule switches) and puts the outputs, the rules announcements, the
//! progress and the final report in an [`Outbox`]. It owns no socket and reads no clock: the
//! driver ([`crate::driver`]) does both, and unit tests drive it frame by frame.

use cep_core::control::{Ready, RulesText};
use cep_core::failover::{Checkpoint, CheckpointMark, Restore, Restored};
use cep_core::frame::{Body, TickBatch};
use cep_core::identity::ROUTER_ID;
use cep_core::outbox::{Event, Outbox, Peer};

/// How often a worker reports its progress to the collector (ns): its driver and the
/// simulation both keep this cadence.
pub const PROGRESS_EVERY_NS: u64 = 500_000_000;
use cep_core::report::{
    EndOfStream, Rejections, RuleInfo, RulesInstalled, StreamAtWorker, SwitchRules, WorkerProgress, WorkerReport,
};
use cep_core::rescale::{HandOff, MovedSymbol, Reached, Retire, StreamsOpened, SymbolState, Welcome, MAX_STREAMS};
use cep_core::store::{CheckpointStore, Expected, PartKey};
use cep_core::tick::TickRecord;
use cep_core::wire::{FrameKind, OutputBatchWriter};
use cep_engine::{Engine, RuleSet};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

mod snapshot;

/// What the worker keeps per symbol besides the engine's state (it moves with the symbol).
/// Ticks of one symbol arrive in order (per-key order), so one past the highest sequence
/// number processed is all it takes to skip duplicates: memory grows with the symbols, never
/// with the events.
#[derive(Clone, Copy)]
struct SymbolTrack {
    /// One past the highest sequence number processed; a tick below it is not processed.
    next_seq: u64,
    /// The stream its ticks come on ([`VACANT`] for an engine id not in use).
    stream: u32,
}

/// The stream of a [`SymbolTrack`] whose symbol left (the engine may reuse its id).
const VACANT: u32 = u32::MAX;

#[derive(Default)]
struct StreamState {
    processed: u64,
    end: Option<EndOfStream>,
}

/// Checks the rules text the router sent.
pub fn compile_rules(rules: &RulesText) -> Result<RuleSet, String> {
    cep_engine::compile(&rules.text, &rules.origin).map_err(|error| error.to_string())
}

/// One worker's run, from the router's Ready answer to its report.
pub struct Worker {
    id: String,
    engine: Engine,
    /// The rules' version in the run.
    epoch: u32,
    index: u32,
    outputs: OutputBatchWriter,
    batch_limit: usize,
    max_frame_bytes: usize,
    decoded: Vec<TickRecord>,
    /// Per symbol (by engine id): its order check and its stream.
    symbols: Vec<SymbolTrack>,
    /// When the last end-of-stream marker arrived (the final outputs' arrival stamp).
    last_end_ns: u64,
    streams: Vec<StreamState>,
    duplicates: u64,
    out_of_order: u64,
    rejections: Rejections,
    finished: bool,
    /// Set when the router retired this worker (it left): what it was routed, per stream.
    retired: Option<BTreeMap<u32, u64>>,
    /// Whether the router has reached it: always for the first workers, after its Welcome
    /// for one that joins a running cluster.
    welcomed: bool,
    /// The snapshot the engine's marks are at (0: none, or one a part of which could not be
    /// stored): a barrier naming it as its base gets only the changes since.
    last_snapshot: u64,
    /// Where snapshot parts are written, and read back when a dead worker's symbols come here.
    store: Box<dyn CheckpointStore>,
    /// Buffers of snapshot parts' engine state (written or read), kept for the next.
    part_buffers: Vec<Vec<u8>>,
    /// Their capacities' sum.
    part_buffer_bytes: usize,
    /// The snapshot under way, and per engine id whether its state at the barrier is still to
    /// be taken ([`snapshot`]).
    snapshotting: Option<snapshot::Snapshotting>,
    untaken: Vec<bool>,
    /// Parts given to the store, oldest first: the router is told of each once it is stored.
    storing: VecDeque<snapshot::Storing>,
    /// A checkpoint one of whose parts could not be stored: its later parts are not announced.
    unstored_snapshot: u64,
    /// Per dead worker, the symbols a failover gave here whose state could not be restored.
    unrestored: BTreeMap<u32, BTreeSet<String>>,
}

impl Worker {
    /// The worker `id` of the run `ready` describes, with outputs in batches of at most
    /// `batch_limit` and frames above `max_frame_bytes` rejected, its checkpoints written to
    /// `store`. Announces its rules (the
    /// collector must know them before the first output). Fails if the router's rules do not
    /// compile here.
    pub fn start(
        id: String,
        ready: &Ready,
        batch_limit: usize,
        max_frame_bytes: usize,
        store: Box<dyn CheckpointStore>,
        out: &mut impl Outbox,
    ) -> Result<Worker, String> {
        let mut engine = Engine::new(compile_rules(&ready.rules)?);
        engine.set_allowed_lateness(ready.allowed_lateness_ns);
        let worker = Worker {
            id,
            engine,
            epoch: ready.rules.epoch,
            index: ready.assigned,
            outputs: OutputBatchWriter::new(ready.assigned),
            batch_limit: batch_limit.max(1),
            max_frame_bytes,
            decoded: Vec::with_capacity(1024),
            symbols: Vec::new(),
            last_end_ns: 0,
            streams: (0..ready.streams).map(|_| StreamState::default()).collect(),
            duplicates: 0,
            out_of_order: 0,
            rejections: Rejections::new("worker"),
            finished: false,
            retired: None,
            welcomed: !ready.joining,
            last_snapshot: 0,
            store,
            part_buffers: Vec::new(),
            part_buffer_bytes: 0,
            snapshotting: None,
            untaken: Vec::new(),
            storing: VecDeque::new(),
            unstored_snapshot: 0,
            unrestored: BTreeMap::new(),
        };
        worker.announce_rules(out);
        Ok(worker)
    }

    /// This worker's index in the run.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Whether every stream has ended.
    pub fn all_ended(&self) -> bool {
        self.streams.iter().all(|stream| stream.end.is_some())
    }

    /// Whether the router retired this worker: it left the cluster, and nothing more comes.
    pub fn retired(&self) -> bool {
        self.retired.is_some()
    }

    /// Whether the router has reached this worker (a joining one: its Welcome arrived).
    pub fn welcomed(&self) -> bool {
        self.welcomed
    }

    /// Whether the worker's run is over: every stream ended, or it was retired.
    pub fn done(&self) -> bool {
        self.all_ended() || self.retired()
    }

    /// Handles one frame from the router, received at `now`.
    pub fn handle(&mut self, bytes: &[u8], now: u64, out: &mut impl Outbox) {
        let Some(frame) = self.rejections.accept(bytes, self.max_frame_bytes) else { return };
        // Everything here comes from the router, a symbol's state it forwards included.
        // Anything else is someone else's (an injector pointed at this worker's port) and is
        // never processed.
        if frame.sender() != ROUTER_ID {
            let detail = format_args!("a {:?} frame from sender {}", frame.kind(), frame.sender());
            return self.rejections.reject("not_from_router", Some(frame.sender()), &detail);
        }
        if !matches!(frame.kind(), FrameKind::Ticks | FrameKind::Checkpoint) {
            // Only a tick changes a symbol's state in step with the snapshot; anything else
            // may change any symbol's: the snapshot under way is finished first. A barrier
            // changes none, and ends a snapshot under way otherwise (see take_checkpoint).
            self.finish_snapshot(out);
        }
        match frame.kind() {
            FrameKind::Ticks => {
                let mut decoded = std::mem::take(&mut self.decoded);
                match frame.ticks(&mut decoded) {
                    Ok(batch) => self.process_batch(&batch, now, out),
                    Err(error) => self.rejections.reject(error.cause(), Some(frame.sender()), &error),
                }
                self.decoded = decoded;
                self.snapshot_step(now, out);
            }
            FrameKind::EndOfStream => {
                if let Some(eos) = self.rejections.decode::<EndOfStream>(&frame) {
                    self.end_stream(eos, frame.sender(), now);
                }
            }
            FrameKind::SwitchRules => {
                if let Some(marker) = self.rejections.decode::<SwitchRules>(&frame) {
                    self.switch_rules(&marker, frame.sender(), out);
                }
            }
            FrameKind::HandOff => {
                if let Some(hand_off) = self.rejections.decode::<HandOff>(&frame) {
                    self.hand_off(&hand_off, out);
                }
            }
            FrameKind::SymbolState => {
                if let Some(state) = self.rejections.decode::<SymbolState>(&frame) {
                    self.take_state(&state, frame.sender(), out);
                }
            }
            FrameKind::Welcome => {
                if let Some(welcome) = self.rejections.decode::<Welcome>(&frame) {
                    self.welcome(welcome, frame.sender(), out);
                }
            }
            FrameKind::StreamsOpened => {
                if let Some(opened) = self.rejections.decode::<StreamsOpened>(&frame) {
                    self.open_streams(opened, frame.sender());
                }
            }
            FrameKind::Checkpoint => {
                if let Some(checkpoint) = self.rejections.decode::<Checkpoint>(&frame) {
                    self.take_checkpoint(checkpoint, out);
                }
            }
            FrameKind::Restore => {
                if let Some(restore) = self.rejections.decode::<Restore>(&frame) {
                    self.restore(&restore, frame.sender(), out);
                }
            }
            FrameKind::Retire => {
                if let Some(retire) = self.rejections.decode::<Retire>(&frame) {
                    self.retired = Some(retire.routed);
                }
            }
            _ => self.rejections.unexpected(&frame),
        }
        // Parts the store finished since are announced to the router.
        self.pump_store(out);
    }

    /// Nothing waits to be read: a snapshot under way is finished now (while batches come, it
    /// takes what its background pace allows after each).
    pub fn idle(&mut self, out: &mut impl Outbox) {
        self.finish_snapshot(out);
        self.pump_store(out);
    }

    /// Ticks processed so far.
    pub fn processed(&self) -> u64 {
        self.engine.processed()
    }

    /// Sends the progress so far, as it holds at `now` (reference ns), to the collector, at the
    /// cadence its policy keeps ([`crate::lifecycle`]), until its report.
    pub fn progress(&mut self, now: u64, out: &mut impl Outbox) {
        // After the report, nothing: the collector may have everything and end (a frame behind
        // it would then never be saved, and its sender would wait for it in vain).
        if self.finished {
            return;
        }
        let progress = WorkerProgress {
            at_ns: now,
            processed: self.engine.processed(),
            outputs: self.engine.outputs_total(),
            rejected: self.rejections.total(),
        };
        out.send(Peer::Collector, &progress.encode(self.index));
    }

    /// Connections the authentication refused so far, by cause
    /// ([`cep_transport::Context::refusals`]): reported with the rejections.
    pub fn refused_connections(&mut self, refusals: &std::collections::BTreeMap<String, u64>) {
        for (cause, count) in refusals {
            self.rejections.set(cause, *count);
        }
    }

    /// Ends the run: if every stream ended, the windows still open emit (the end of input);
    /// then the report goes to the collector. Returns the report.
    pub fn finish(&mut self, out: &mut impl Outbox) -> WorkerReport {
        // One report: a second would follow the first, which the collector may have ended at.
        if self.finished {
            return self.report();
        }
        self.finish_snapshot(out);
        if self.all_ended() {
            self.close_windows(out);
        }
        self.finished = true;
        let report = self.report();
        out.send(Peer::Collector, &report.encode(self.index));
        report
    }

    fn end_stream(&mut self, eos: EndOfStream, sender: u32, now: u64) {
        match self.streams.get_mut(eos.stream as usize) {
            Some(stream) if stream.end.is_none() => {
                stream.end = Some(eos);
                self.last_end_ns = now;
            }
            _ => self.rejections.reject("unknown_stream", Some(sender), &format_args!("end of stream {}", eos.stream)),
        }
    }

    /// The router reaches this joining worker: it says so, and its share moves here.
    fn welcome(&mut self, welcome: Welcome, sender: u32, out: &mut impl Outbox) {
        if welcome.index != self.index {
            let detail = format_args!("a Welcome for worker {} (this is worker {})", welcome.index, self.index);
            return self.rejections.reject("unexpected_kind", Some(sender), &detail);
        }
        self.welcomed = true;
        out.send(Peer::Router, &Reached { index: self.index }.encode(self.index));
    }

    /// Streams opened after the start (an injector joined): they come next in order.
    fn open_streams(&mut self, opened: StreamsOpened, sender: u32) {
        let end = opened.first.saturating_add(opened.count);
        if opened.first as usize != self.streams.len() || end > MAX_STREAMS {
            let detail = format_args!(
                "streams {}+{} opened (this worker has {})",
                opened.first,
                opened.count,
                self.streams.len()
            );
            return self.rejections.reject("unknown_stream", Some(sender), &detail);
        }
        self.streams.resize_with(end as usize, StreamState::default);
    }

    /// The router moves these symbols to another worker: their state (engine and order
    /// checks) goes back to the router, and this worker forgets them. Symbols it never saw
    /// are simply absent from the state.
    fn hand_off(&mut self, hand_off: &HandOff, out: &mut impl Outbox) {
        let names: Vec<&[u8]> = hand_off.symbols.iter().map(|s| s.as_bytes()).collect();
        let engine = self.engine.export_symbols(&names);
        let mut symbols = Vec::with_capacity(names.len());
        for name in &names {
            let Some(id) = self.engine.symbol_id(name) else { continue };
            let track = std::mem::replace(&mut self.symbols[id as usize], SymbolTrack { next_seq: 0, stream: VACANT });
            symbols.push(MovedSymbol {
                symbol: String::from_utf8_lossy(name).into_owned(),
                stream: track.stream,
                next_seq: track.next_seq,
            });
        }
        self.engine.remove_symbols(&names);
        out.event(Event::StateMoved {
            symbols: symbols.len() as u64,
            bytes: engine.len() as u64,
            direction: "exported",
        });
        let state = SymbolState { part: hand_off.part, from: self.index, symbols, engine };
        out.send(Peer::Router, &state.encode(self.index));
    }

    /// Symbols moved here with their state: the engine takes it, and the order checks go on
    /// from where the old owner left them.
    fn take_state(&mut self, state: &SymbolState, sender: u32, out: &mut impl Outbox) {
        let imported = match self.engine.import_symbols(&state.engine) {
            Ok(imported) => imported,
            Err(error) => return self.rejections.reject("bad_state", Some(sender), &error),
        };
        // The engine's symbols and the order checks must name the same symbols, in order.
        let names: Vec<&str> = imported.iter().map(|id| self.engine.symbol_name(*id)).collect();
        if names.len() != state.symbols.len()
            || names.iter().zip(&state.symbols).any(|(name, moved)| *name != moved.symbol)
        {
            let removed: Vec<Vec<u8>> = names.iter().map(|name| name.as_bytes().to_vec()).collect();
            let removed: Vec<&[u8]> = removed.iter().map(Vec::as_slice).collect();
            self.engine.remove_symbols(&removed);
            let detail = "the engine's state and the order checks name different symbols";
            return self.rejections.reject("bad_state", Some(sender), &detail);
        }
        for (id, moved) in imported.into_iter().zip(&state.symbols) {
            *self.track(id, moved.stream) = SymbolTrack { next_seq: moved.next_seq, stream: moved.stream };
        }
        out.event(Event::StateMoved {
            symbols: state.symbols.len() as u64,
            bytes: state.engine.len() as u64,
            direction: "imported",
        });
    }

    /// A checkpoint barrier: the state of every symbol (engine and order checks) goes to the
    /// checkpoint store, in parts of [`cep_core::failover::SNAPSHOT_PART_SYMBOLS`] symbols, and
    /// the router is told what each part holds (symbols, counts, size and checksum), which it
    /// keeps in case this worker dies. The state is copied a symbol at a time, as the batches after the barrier
    /// go on ([`snapshot`]). When the router holds this worker's previous snapshot (the
    /// barrier's base), a part holds only what changed since: the symbols that took ticks,
    /// their time windows' new events. Parts of checkpoints the router no longer retains are
    /// removed first.
    fn take_checkpoint(&mut self, checkpoint: Checkpoint, out: &mut impl Outbox) {
        // The router begins a round only once the last one is over: a snapshot still being
        // copied (a large state at full speed) belongs to a round it gave up, or dropped for a
        // rescale, and none of its parts will be used. Finishing it here would hold every
        // batch, and the heartbeats, up for the rest of the copy (seconds at worst): it is
        // dropped, and nothing builds on it.
        self.abandon_snapshot();
        let base = if checkpoint.base != 0 && checkpoint.base == self.last_snapshot { checkpoint.base } else { 0 };
        self.store.remove_below(checkpoint.retain_from);
        match self.storing.front() {
            // The store has not written the last snapshot yet (a slow disk, a hung mount): no
            // second copy queues behind it; this one is refused at once.
            Some(behind) => self.refuse_snapshot(checkpoint.id, behind.checkpoint(), out),
            None => self.start_snapshot(checkpoint.id, base, out),
        }
        // Behind every output of the ticks before the barrier: the collector confirms it.
        out.send(Peer::Collector, &CheckpointMark { id: checkpoint.id }.encode(self.index));
    }

    /// A dead worker's symbols, restored here from one stored part of its snapshot (the parts
    /// come in order, changes after the state they change), read from the checkpoint store:
    /// the engine restores the symbols given to this worker; their order checks go on from
    /// the snapshot's. The last Restore, without state, lists every symbol this worker takes
    /// (those in no part start empty): they are marked for the collector. Their ticks since
    /// the snapshot follow.
    fn restore(&mut self, restore: &Restore, sender: u32, out: &mut impl Outbox) {
        let Some(state) = restore.state else {
            // Ahead of the outputs of their replayed ticks, which follow.
            let symbols = restore.symbols.iter().map(|moved| (moved.symbol.clone(), moved.stream)).collect();
            let lost = self.unrestored.remove(&restore.from).unwrap_or_default().into_iter().collect();
            return out.send(Peer::Collector, &Restored { from: restore.from, symbols, lost }.encode(self.index));
        };
        let key = PartKey { checkpoint: state.checkpoint, worker: restore.from, part: state.part };
        let expected = Expected { bytes: state.stored.bytes, checksum: state.stored.checksum };
        let mut engine = self.part_buffer();
        let restored = self.store.get(key, expected, &mut engine).and_then(|()| {
            let keep: BTreeSet<&str> = restore.symbols.iter().map(|m| m.symbol.as_str()).collect();
            self.engine.restore_symbols(&engine, |name| keep.contains(name)).map_err(|error| error.to_string())
        });
        let bytes = engine.len() as u64;
        self.return_buffer(engine);
        if let Err(error) = restored {
            // Their state is lost: the collector is told with the failover's last Restore.
            let lost = self.unrestored.entry(restore.from).or_default();
            lost.extend(restore.symbols.iter().map(|moved| moved.symbol.clone()));
            return self.rejections.reject("bad_state", Some(sender), &error);
        }
        // Symbols unchanged since an earlier part are not in this one's engine state.
        let mut missing = 0;
        for moved in &restore.symbols {
            match self.engine.symbol_id(moved.symbol.as_bytes()) {
                Some(id) => {
                    *self.track(id, moved.stream) = SymbolTrack { next_seq: moved.next_seq, stream: moved.stream }
                }
                None => {
                    missing += 1;
                    self.unrestored.entry(restore.from).or_default().insert(moved.symbol.clone());
                }
            }
        }
        if missing > 0 {
            let detail =
                format_args!("{missing} of {} restored symbols are not in the snapshot", restore.symbols.len());
            self.rejections.reject("bad_state", Some(sender), &detail);
        }
        out.event(Event::StateMoved {
            symbols: (restore.symbols.len() - missing) as u64,
            bytes,
            direction: "restored",
        });
    }

    /// The order check of an engine symbol id (a new or reused id starts on `stream`).
    #[inline]
    fn track(&mut self, id: cep_engine::SymbolId, stream: u32) -> &mut SymbolTrack {
        let slot = id as usize;
        if slot >= self.symbols.len() {
            self.symbols.resize(slot + 1, SymbolTrack { next_seq: 0, stream: VACANT });
        }
        let track = &mut self.symbols[slot];
        if track.stream == VACANT {
            *track = SymbolTrack { next_seq: 0, stream };
        }
        track
    }

    fn process_batch(&mut self, batch: &TickBatch<'_>, t_worker_in: u64, out: &mut impl Outbox) {
        for tick in batch.records {
            self.process(batch, tick, out);
            if self.outputs.is_full(self.batch_limit) {
                self.send_outputs(batch.t_sent, t_worker_in, out);
            }
        }
        // One input batch, one output batch: the stamps are the batch's.
        self.send_outputs(batch.t_sent, t_worker_in, out);
    }

    fn switch_rules(&mut self, marker: &SwitchRules, sender: u32, out: &mut impl Outbox) {
        // Outputs go out after every input frame, so none of the old rules is pending.
        match compile_rules(marker) {
            Ok(rules) => {
                self.engine.switch(rules);
                self.epoch = marker.epoch;
                out.event(Event::RulesSwitched { epoch: marker.epoch, origin: marker.origin.clone() });
                self.announce_rules(out);
            }
            Err(error) => self.rejections.reject("bad_rules", Some(sender), &error),
        }
    }

    /// Tells the collector which rules the next outputs are under (their rule indexes).
    fn announce_rules(&self, out: &mut impl Outbox) {
        let installed = RulesInstalled {
            epoch: self.epoch,
            queries: self.engine.queries().map(|q| RuleInfo { name: q.name.clone(), alert: q.is_alert() }).collect(),
        };
        out.send(Peer::Collector, &installed.encode(self.index));
    }

    #[inline]
    fn process(&mut self, batch: &TickBatch<'_>, tick: &TickRecord, out: &mut impl Outbox) {
        if self.rejections.reject_invalid(tick, batch.sender) {
            return;
        }
        if self.streams.get(tick.injector as usize).is_none_or(|s| s.end.is_some()) {
            self.rejections.reject(
                "unknown_stream",
                Some(batch.sender),
                &format_args!("tick of stream {}", tick.injector),
            );
            return;
        }
        let symbol_bytes = batch.symbol(tick);
        let symbol = self.engine.intern_bytes(symbol_bytes);
        self.copy_before_write(symbol, out);
        // A symbol comes on one stream only (the injector splits symbols, not ticks).
        let track = self.track(symbol, tick.injector);
        if tick.seq < track.next_seq {
            // Behind its symbol's latest: the latest again is a duplicate, an earlier one came
            // out of order. Either way the state has moved past it: skipped and counted.
            if tick.seq.saturating_add(1) == track.next_seq {
                self.duplicates += 1;
            } else {
                self.out_of_order += 1;
            }
            return;
        }
        track.next_seq = tick.seq.saturating_add(1);
        self.streams[tick.injector as usize].processed += 1;
        let outputs = &mut self.outputs;
        let (price, stream_id, seq, t_inject, t_router_in) =
            (tick.price, tick.injector, tick.seq, tick.t_inject, tick.t_router_in);
        // The outputs of one tick share its symbol: the first names it, the others say so.
        let mut symbol_as_before = false;
        self.engine.process(symbol, price, tick.t_event, |query, price, value| {
            outputs.push(query, symbol_bytes, symbol_as_before, price, value, stream_id, seq, t_inject, t_router_in);
            symbol_as_before = true;
        });
    }

    /// Sends the outputs of the ticks processed since the last send, stamped with their
    /// batch's router exit, worker arrival and engine exit (read from the outbox's clock).
    fn send_outputs(&mut self, t_router_out: u64, t_worker_in: u64, out: &mut impl Outbox) {
        if !self.outputs.is_empty() {
            out.send(Peer::Collector, self.outputs.seal(t_router_out, t_worker_in, out.now()));
            self.outputs.clear();
        }
    }

    /// The end of input: every open tumbling window emits, as FinalOutputs. No tick caused
    /// these outputs; each names its symbol's stream and that stream's end marker (`seq` =
    /// the stream's `sent`), and carries no tick stamps.
    fn close_windows(&mut self, out: &mut impl Outbox) {
        let mut outputs = OutputBatchWriter::final_outputs(self.index);
        let mut closed = Vec::new();
        self.engine.close_windows(|symbol, query, price, value| closed.push((symbol, query, price, value)));
        let mut previous = None;
        for (symbol, query, price, value) in closed {
            let stream = self.symbols.get(symbol as usize).map_or(VACANT, |track| track.stream);
            let end = self.streams.get(stream as usize).and_then(|s| s.end.as_ref()).map_or(0, |end| end.sent);
            let name = self.engine.symbol_name(symbol).as_bytes();
            outputs.push(query, name, previous == Some(symbol), price, value, stream, end, 0, 0);
            previous = Some(symbol);
            if outputs.is_full(self.batch_limit) {
                out.send(Peer::Collector, outputs.seal(0, self.last_end_ns, out.now()));
                outputs.clear();
            }
        }
        if !outputs.is_empty() {
            out.send(Peer::Collector, outputs.seal(0, self.last_end_ns, out.now()));
        }
    }

    /// What the worker knows now, for its metrics.
    pub fn snapshot(&self) -> crate::metrics::Snapshot<'_> {
        crate::metrics::Snapshot {
            processed: self.streams.iter().map(|stream| stream.processed).collect(),
            streams_ended: self.streams.iter().filter(|stream| stream.end.is_some()).count(),
            outputs: self.engine.outputs_total(),
            duplicates: self.duplicates,
            out_of_order: self.out_of_order,
            late: self.engine.late(),
            late_dropped: self.engine.late_dropped(),
            symbols: self.engine.symbols(),
            epoch: self.epoch,
            rejected: self.rejections.counts(),
        }
    }

    /// The worker's accounting so far.
    pub fn report(&self) -> WorkerReport {
        WorkerReport {
            id: self.id.clone(),
            index: self.index,
            processed: self.engine.processed(),
            symbols: self.engine.symbols() as u64,
            outputs: self.engine.outputs_total(),
            streams: self
                .streams
                .iter()
                .enumerate()
                .map(|(stream, state)| {
                    let end = state.end.as_ref();
                    // A retired worker knows what it was routed from its retirement marker.
                    let retired = self.retired.as_ref().and_then(|routed| routed.get(&(stream as u32)));
                    StreamAtWorker {
                        stream: stream as u32,
                        // A marker with a `cut` from the router is of a stream it ended
                        // itself: its count is the router's, what was sent is unknown.
                        sent: end.filter(|e| e.cut.is_none()).map(|e| e.sent),
                        routed: end.map(|e| e.routed).or(retired.copied()),
                        processed: state.processed,
                    }
                })
                .collect(),
            duplicates: self.duplicates,
            out_of_order: self.out_of_order,
            late: self.engine.late(),
            late_dropped: self.engine.late_dropped(),
            rejected: self.rejections.counts().clone(),
        }
    }
}

#[cfg(test)]
mod tests;
