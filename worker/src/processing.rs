//! The worker's run: register, then process ticks until every stream has ended.

use crate::config::WorkerConfig;
use cep_core::clock::now_ns;
use cep_core::control::{Register, Role};
use cep_core::report::{EndOfStream, Rejections, StreamAtWorker, WorkerProgress, WorkerReport};
use cep_core::seen::{Arrival, SeenSet};
use cep_core::tick::{Rule, Stamps, TickRecord};
use cep_core::wire::{
    check_frame, decode_message, decode_ticks, encode_message, FrameKind, OutputBatchWriter, WireError,
};
use cep_engine::{Engine, SymbolId};
use cep_transport::control::{register, RegistrationError};
use cep_transport::{advertised_endpoint, Context, Message, Pull, Push, SocketOptions, TransportError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::info;

/// Errors that stop a worker.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("invalid rules: {0}")]
    Rules(String),
    #[error("--batch must be at least 1")]
    Batch,
    #[error(transparent)]
    Transport(#[from] TransportError),
    #[error(transparent)]
    Registration(#[from] RegistrationError),
}

/// Runs one worker until every stream has ended (or `shutdown`), returning its report.
pub fn run(config: WorkerConfig, shutdown: Arc<AtomicBool>) -> Result<WorkerReport, WorkerError> {
    let rules = config.rules.to_config().map_err(WorkerError::Rules)?;
    if config.batch == 0 {
        return Err(WorkerError::Batch);
    }
    let id = config.worker_id();
    let context = Context::new();
    let options = SocketOptions { high_water_mark: config.hwm, ..SocketOptions::default() };
    let input = Pull::bind(&context, &config.listen, &options)?;
    let endpoint = advertised_endpoint(input.endpoint(), &config.advertise);
    let registration =
        Register { role: Role::Worker, id: id.clone(), endpoint: endpoint.clone(), streams: 0, warmup_ns: 0 };
    info!(id, endpoint, router = config.router, "worker registering");
    let ready = register(&context, &config.router, &registration, config.start_timeout, &shutdown)?;
    let collector = Push::connect(&context, &ready.collector, &options)?;
    info!(id, index = ready.assigned, workers = ready.workers.len(), "run started");

    let mut state = WorkerState {
        engine: Engine::new(rules),
        index: ready.assigned,
        outputs: OutputBatchWriter::new(ready.assigned),
        batch_limit: config.batch,
        max_frame_bytes: config.max_frame_bytes,
        decoded: Vec::with_capacity(1024),
        pending: Vec::with_capacity(2048),
        symbol_last_seq: Vec::new(),
        streams: (0..ready.streams).map(|_| StreamState::default()).collect(),
        duplicates: 0,
        out_of_order: 0,
        rejections: Rejections::new("worker"),
    };
    let mut message = Message::new();
    let mut last_progress = Instant::now();
    while !state.all_ended() && !shutdown.load(Ordering::Relaxed) {
        if input.recv(&mut message, Duration::from_millis(50))? {
            state.handle(&message, &collector, &shutdown)?;
            if !input.has_pending() {
                state.flush(&collector, &shutdown)?;
            }
        } else {
            state.flush(&collector, &shutdown)?;
        }
        if last_progress.elapsed() >= Duration::from_millis(500) {
            let progress = WorkerProgress {
                processed: state.engine.processed(),
                outputs: state.engine.outputs().iter().sum(),
                rejected: state.rejections.total(),
            };
            collector.send(&encode_message(FrameKind::WorkerProgress, state.index, &progress), &shutdown)?;
            last_progress = Instant::now();
        }
    }
    state.flush(&collector, &shutdown)?;
    let report = state.report(id);
    collector.send(&encode_message(FrameKind::WorkerReport, report.index, &report), &shutdown)?;
    info!(processed = report.processed, symbols = report.symbols, "worker done");
    Ok(report)
}

#[derive(Default)]
struct StreamState {
    seen: SeenSet,
    processed: u64,
    end: Option<EndOfStream>,
}

/// An output waiting for its engine-exit stamp (taken once per input batch).
struct PendingOutput {
    rule: Rule,
    symbol: SymbolId,
    price: f64,
    value: f64,
    stream: u32,
    seq: u64,
    t_inject: u64,
    t_router_in: u64,
}

struct WorkerState {
    engine: Engine,
    index: u32,
    outputs: OutputBatchWriter,
    batch_limit: usize,
    max_frame_bytes: usize,
    decoded: Vec<TickRecord>,
    pending: Vec<PendingOutput>,
    /// One past the highest sequence number seen per symbol, for the per-key order check.
    symbol_last_seq: Vec<u64>,
    streams: Vec<StreamState>,
    duplicates: u64,
    out_of_order: u64,
    rejections: Rejections,
}

impl WorkerState {
    fn all_ended(&self) -> bool {
        self.streams.iter().all(|stream| stream.end.is_some())
    }

    fn handle(&mut self, frame: &[u8], collector: &Push, shutdown: &AtomicBool) -> Result<(), TransportError> {
        let t_worker_in = now_ns();
        let (header, rest) = match check_frame(frame, self.max_frame_bytes) {
            Ok(parsed) => parsed,
            Err(error) => {
                self.rejections.reject(error.cause(), None, &error);
                return Ok(());
            }
        };
        match header.kind {
            FrameKind::Ticks => {
                let mut decoded = std::mem::take(&mut self.decoded);
                match decode_ticks(frame, &header, rest, &mut decoded) {
                    Ok(t_router_out) => {
                        for tick in &decoded {
                            self.process(frame, tick, header.sender);
                        }
                        let t_engine_out = now_ns();
                        self.emit_pending(t_router_out, t_worker_in, t_engine_out, collector, shutdown)?;
                    }
                    Err(error) => self.rejections.reject(error.cause(), Some(header.sender), &error),
                }
                self.decoded = decoded;
            }
            FrameKind::EndOfStream => match decode_message::<EndOfStream>(&header, rest, FrameKind::EndOfStream) {
                Ok(eos) => match self.streams.get_mut(eos.stream as usize) {
                    Some(stream) if stream.end.is_none() => stream.end = Some(eos),
                    _ => self.rejections.reject(
                        "unknown_stream",
                        Some(header.sender),
                        &format_args!("end of stream {}", eos.stream),
                    ),
                },
                Err(error) => self.rejections.reject(error.cause(), Some(header.sender), &error),
            },
            other => {
                let error = WireError::UnexpectedKind(other as u64);
                self.rejections.reject(error.cause(), Some(header.sender), &error);
            }
        }
        Ok(())
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
        if slot >= self.symbol_last_seq.len() {
            self.symbol_last_seq.resize(slot + 1, 0);
        }
        // Stored as seq + 1 so that 0 means "none yet".
        if tick.seq < self.symbol_last_seq[slot] {
            self.out_of_order += 1;
        }
        self.symbol_last_seq[slot] = self.symbol_last_seq[slot].max(tick.seq + 1);
        let pending = &mut self.pending;
        let (price, stream_id, seq, t_inject, t_router_in) =
            (tick.price, tick.injector, tick.seq, tick.t_inject, tick.t_router_in);
        self.engine.process(symbol, price, t_inject, |rule, value| {
            pending.push(PendingOutput { rule, symbol, price, value, stream: stream_id, seq, t_inject, t_router_in });
        });
    }

    fn emit_pending(
        &mut self,
        t_router_out: u64,
        t_worker_in: u64,
        t_engine_out: u64,
        collector: &Push,
        shutdown: &AtomicBool,
    ) -> Result<(), TransportError> {
        for index in 0..self.pending.len() {
            let output = &self.pending[index];
            let stamps = Stamps {
                t_inject: output.t_inject,
                t_router_in: output.t_router_in,
                t_router_out,
                t_worker_in,
                t_engine_out,
            };
            let symbol = self.engine.symbol_bytes(output.symbol);
            self.outputs.push(output.rule, symbol, output.price, output.value, output.stream, output.seq, &stamps);
            if self.outputs.len() >= self.batch_limit {
                collector.send(self.outputs.seal(), shutdown)?;
                self.outputs.clear();
            }
        }
        self.pending.clear();
        Ok(())
    }

    fn flush(&mut self, collector: &Push, shutdown: &AtomicBool) -> Result<(), TransportError> {
        if !self.outputs.is_empty() {
            collector.send(self.outputs.seal(), shutdown)?;
            self.outputs.clear();
        }
        Ok(())
    }

    fn report(&self, id: String) -> WorkerReport {
        WorkerReport {
            id,
            index: self.index,
            processed: self.engine.processed(),
            symbols: self.engine.symbols() as u64,
            outputs: self.engine.outputs(),
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
            rejected: self.rejections.counts().clone(),
        }
    }
}
