//! The worker's run: register, then process ticks until every stream has ended.

use crate::config::WorkerConfig;
use cep_core::clock::now_ns;
use cep_core::control::RulesText;
use cep_core::control::{Register, Role};
use cep_core::report::{
    ClockReport, EndOfStream, Rejections, RuleInfo, RulesInstalled, StreamAtWorker, SwitchRules, WorkerProgress,
    WorkerReport,
};
use cep_core::seen::{Arrival, SeenSet};
use cep_core::tick::TickRecord;
use cep_core::wire::{decode_message, decode_ticks, encode_message, FrameKind, OutputBatchWriter};
use cep_engine::{Engine, RuleSet};
use cep_transport::clock::synchronise;
use cep_transport::control::{end_of_run, register, RegistrationError};
use cep_transport::{advertise_host, advertised_endpoint, Context, Message, Pull, Push, SocketOptions, TransportError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::info;

/// Errors that stop a worker.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("the router's rules do not check here (another version?): {0}")]
    Rules(String),
    #[error("cannot find the address to advertise: {0}")]
    Advertise(String),
    #[error("invalid worker configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Transport(#[from] TransportError),
    #[error(transparent)]
    Registration(#[from] RegistrationError),
}

/// Runs one worker until every stream has ended (or `shutdown`), returning its report.
pub fn run(config: WorkerConfig, shutdown: Arc<AtomicBool>) -> Result<WorkerReport, WorkerError> {
    config.validate().map_err(WorkerError::Config)?;
    let id = config.worker_id();
    let context = Context::new();
    let options = SocketOptions { high_water_mark: config.hwm, ..SocketOptions::default() };
    let input = Pull::bind(&context, &config.listen, &options)?;
    let host = advertise_host(&config.advertise, &config.router).map_err(WorkerError::Advertise)?;
    let endpoint = advertised_endpoint(input.endpoint(), &host);
    let registration = Register {
        role: Role::Worker,
        id: id.clone(),
        endpoint: endpoint.clone(),
        streams: 0,
        warmup_ns: 0,
        clock_endpoint: String::new(),
    };
    info!(id, endpoint, router = config.router, "worker registering");
    let ready = register(&context, &config.router, &registration, config.start_timeout, &shutdown)?;
    let collector = Push::connect(&context, &ready.collector, &options)?;
    if let Some(estimate) = synchronise(&context, &ready.collector_clock, &shutdown)? {
        let report = ClockReport { node: id.clone(), estimate };
        collector.send(&encode_message(FrameKind::ClockReport, ready.assigned, &report), &shutdown)?;
    }
    let rules = compile_rules(&ready.rules).map_err(WorkerError::Rules)?;
    info!(id, index = ready.assigned, workers = ready.workers.len(), rules = ready.rules.origin, "run started");

    let mut engine = Engine::new(rules);
    engine.set_allowed_lateness(ready.allowed_lateness_ns);
    let mut state = WorkerState {
        engine,
        epoch: ready.rules.epoch,
        index: ready.assigned,
        outputs: OutputBatchWriter::new(ready.assigned),
        batch_limit: config.batch,
        max_frame_bytes: config.max_frame_bytes,
        decoded: Vec::with_capacity(1024),
        symbols: Vec::new(),
        last_end_ns: 0,
        streams: (0..ready.streams).map(|_| StreamState::default()).collect(),
        duplicates: 0,
        out_of_order: 0,
        rejections: Rejections::new("worker"),
    };
    state.announce_rules(&collector, &shutdown)?;
    let metrics = crate::metrics::WorkerMetrics::register(ready.streams);
    let mut message = Message::new();
    let mut last_progress = Instant::now();
    while !state.all_ended() && !shutdown.load(Ordering::Relaxed) {
        if input.recv(&mut message, Duration::from_millis(50))? {
            state.handle(&message, &collector, &shutdown)?;
        }
        if last_progress.elapsed() >= Duration::from_millis(500) {
            let progress = WorkerProgress {
                processed: state.engine.processed(),
                outputs: state.engine.outputs_total(),
                rejected: state.rejections.total(),
            };
            collector.send(&encode_message(FrameKind::WorkerProgress, state.index, &progress), &shutdown)?;
            state.publish(&metrics);
            last_progress = Instant::now();
        }
    }
    if state.all_ended() {
        // The end of input: the windows still open emit now, before the report counts them.
        state.close_windows(&collector, &shutdown)?;
    }
    state.publish(&metrics);
    let report = state.report(id);
    collector.send(&encode_message(FrameKind::WorkerReport, report.index, &report), &shutdown)?;
    if shutdown.load(Ordering::Relaxed) {
        collector.shorten_linger(Duration::from_millis(500));
    } else if let Err(error) = end_of_run(&context, &config.router, FrameKind::AwaitEnd, config.end_timeout, &shutdown)
    {
        // Everything was sent; the end signal only guards delivery, so this is a warning.
        tracing::warn!(%error, "no end-of-run signal from the router");
    }
    info!(processed = report.processed, symbols = report.symbols, "worker done");
    Ok(report)
}

/// What the worker keeps per symbol besides the engine's state.
#[derive(Clone, Copy)]
struct SymbolTrack {
    /// One past the highest sequence number seen, for the per-key order check.
    next_seq: u64,
    /// The stream its ticks come on.
    stream: u32,
}

#[derive(Default)]
struct StreamState {
    seen: SeenSet,
    processed: u64,
    end: Option<EndOfStream>,
}

/// Checks the rules text the router sent.
fn compile_rules(rules: &RulesText) -> Result<RuleSet, String> {
    cep_engine::compile(&rules.text, &rules.origin).map_err(|error| error.to_string())
}

struct WorkerState {
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
}

impl WorkerState {
    fn all_ended(&self) -> bool {
        self.streams.iter().all(|stream| stream.end.is_some())
    }

    /// Copies the counters to the metrics (with each progress report and at the end).
    fn publish(&self, metrics: &crate::metrics::WorkerMetrics) {
        let processed: Vec<u64> = self.streams.iter().map(|stream| stream.processed).collect();
        metrics.observe(&crate::metrics::Snapshot {
            processed: &processed,
            streams_ended: self.streams.iter().filter(|stream| stream.end.is_some()).count(),
            outputs: self.engine.outputs_total(),
            duplicates: self.duplicates,
            out_of_order: self.out_of_order,
            late: self.engine.late(),
            late_dropped: self.engine.late_dropped(),
            symbols: self.engine.symbols(),
            epoch: self.epoch,
            rejected: self.rejections.counts(),
        });
    }

    fn handle(&mut self, frame: &[u8], collector: &Push, shutdown: &AtomicBool) -> Result<(), TransportError> {
        let t_worker_in = now_ns();
        let Some((header, rest)) = self.rejections.accept(frame, self.max_frame_bytes) else {
            return Ok(());
        };
        match header.kind {
            FrameKind::Ticks => {
                let mut decoded = std::mem::take(&mut self.decoded);
                match decode_ticks(frame, &header, rest, &mut decoded) {
                    Ok(t_router_out) => {
                        for tick in &decoded {
                            self.process(frame, tick, header.sender);
                            if self.outputs.len() >= self.batch_limit {
                                self.send_outputs(t_router_out, t_worker_in, collector, shutdown)?;
                            }
                        }
                        // One input batch, one output batch: the stamps are the batch's.
                        self.send_outputs(t_router_out, t_worker_in, collector, shutdown)?;
                    }
                    Err(error) => self.rejections.reject(error.cause(), Some(header.sender), &error),
                }
                self.decoded = decoded;
            }
            FrameKind::EndOfStream => match decode_message::<EndOfStream>(&header, rest, FrameKind::EndOfStream) {
                Ok(eos) => match self.streams.get_mut(eos.stream as usize) {
                    Some(stream) if stream.end.is_none() => {
                        stream.end = Some(eos);
                        self.last_end_ns = t_worker_in;
                    }
                    _ => self.rejections.reject(
                        "unknown_stream",
                        Some(header.sender),
                        &format_args!("end of stream {}", eos.stream),
                    ),
                },
                Err(error) => self.rejections.reject(error.cause(), Some(header.sender), &error),
            },
            FrameKind::SwitchRules => match decode_message::<SwitchRules>(&header, rest, FrameKind::SwitchRules) {
                // Outputs go out after every input frame, so none of the old rules is pending.
                Ok(marker) => match compile_rules(&marker) {
                    Ok(rules) => {
                        self.engine.switch(rules);
                        self.epoch = marker.epoch;
                        info!(epoch = marker.epoch, origin = marker.origin, "rules switched");
                        self.announce_rules(collector, shutdown)?;
                    }
                    Err(error) => self.rejections.reject("bad_rules", Some(header.sender), &error),
                },
                Err(error) => self.rejections.reject(error.cause(), Some(header.sender), &error),
            },
            _ => self.rejections.unexpected(&header),
        }
        Ok(())
    }

    /// Tells the collector which rules the next outputs are under (their rule indexes).
    fn announce_rules(&self, collector: &Push, shutdown: &AtomicBool) -> Result<(), TransportError> {
        let installed = RulesInstalled {
            epoch: self.epoch,
            queries: self.engine.queries().map(|q| RuleInfo { name: q.name.clone(), alert: q.is_alert() }).collect(),
        };
        collector.send(&encode_message(FrameKind::Rules, self.index, &installed), shutdown)
    }

    #[inline]
    fn process(&mut self, frame: &[u8], tick: &TickRecord, sender: u32) {
        if let Some(cause) = tick.invalid_reason() {
            self.rejections.reject(
                cause,
                Some(sender),
                &format_args!("tick seq {} of stream {}", tick.seq, tick.injector),
            );
            return;
        }
        let Some(stream) = self.streams.get_mut(tick.injector as usize).filter(|s| s.end.is_none()) else {
            self.rejections.reject("unknown_stream", Some(sender), &format_args!("tick of stream {}", tick.injector));
            return;
        };
        match stream.seen.insert(tick.seq) {
            Arrival::Duplicate => {
                self.duplicates += 1;
                return;
            }
            // Late within its stream is allowed (other symbols may overtake); only the
            // per-symbol order below is a contract.
            Arrival::Late | Arrival::InOrder => {}
        }
        stream.processed += 1;
        let symbol = self.engine.intern_bytes(tick.symbol_bytes(frame));
        let slot = symbol as usize;
        if slot >= self.symbols.len() {
            // A symbol comes on one stream only (the injector splits symbols, not ticks).
            self.symbols.resize(slot + 1, SymbolTrack { next_seq: 0, stream: tick.injector });
        }
        let track = &mut self.symbols[slot];
        if tick.seq < track.next_seq {
            self.out_of_order += 1;
        }
        track.next_seq = track.next_seq.max(tick.seq + 1);
        let outputs = &mut self.outputs;
        let symbol_bytes = tick.symbol_bytes(frame);
        let (price, stream_id, seq, t_inject, t_router_in) =
            (tick.price, tick.injector, tick.seq, tick.t_inject, tick.t_router_in);
        self.engine.process(symbol, price, tick.t_event, |query, price, value| {
            outputs.push(query, symbol_bytes, price, value, stream_id, seq, t_inject, t_router_in);
        });
    }

    /// Sends the outputs of the ticks processed since the last send, stamped with their
    /// batch's router exit, worker arrival and engine exit (now).
    fn send_outputs(
        &mut self,
        t_router_out: u64,
        t_worker_in: u64,
        collector: &Push,
        shutdown: &AtomicBool,
    ) -> Result<(), TransportError> {
        if !self.outputs.is_empty() {
            collector.send(self.outputs.seal(t_router_out, t_worker_in, now_ns()), shutdown)?;
            self.outputs.clear();
        }
        Ok(())
    }

    /// The end of input: every open tumbling window emits, as FinalOutputs. No tick caused
    /// these outputs; each names its symbol's stream and that stream's end marker (`seq` =
    /// the stream's `sent`), and carries no tick stamps.
    fn close_windows(&mut self, collector: &Push, shutdown: &AtomicBool) -> Result<(), TransportError> {
        let mut outputs = OutputBatchWriter::final_outputs(self.index);
        let mut closed = Vec::new();
        self.engine.close_windows(|symbol, query, price, value| closed.push((symbol, query, price, value)));
        for (symbol, query, price, value) in closed {
            let stream = self.symbols[symbol as usize].stream;
            let end = self.streams.get(stream as usize).and_then(|s| s.end.as_ref()).map_or(0, |end| end.sent);
            let name = self.engine.symbol_name(symbol).as_bytes();
            outputs.push(query, name, price, value, stream, end, 0, 0);
            if outputs.len() >= self.batch_limit {
                collector.send(outputs.seal(0, self.last_end_ns, now_ns()), shutdown)?;
                outputs.clear();
            }
        }
        if !outputs.is_empty() {
            collector.send(outputs.seal(0, self.last_end_ns, now_ns()), shutdown)?;
        }
        Ok(())
    }

    fn report(&self, id: String) -> WorkerReport {
        WorkerReport {
            id,
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
                    StreamAtWorker {
                        stream: stream as u32,
                        sent: end.map(|e| e.sent),
                        routed: end.map(|e| e.routed),
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
