//! The router's run: rendezvous, then the data path until every stream has ended.

use crate::config::RouterConfig;
use crate::deploying::Deployments;
use crate::rendezvous::{Rendezvous, Verdict, WorkerCount};
use cep_core::clock::now_ns;
use cep_core::control::{Deploy, Refused, Register, RulesText};
use cep_core::partition::Partitioner;
use cep_core::report::{ClockReport, EndOfStream, Rejections, RouterReport};
use cep_core::tick::TickRecord;
use cep_core::wire::{decode_message, decode_ticks, encode_message, read_header, FrameKind, TickBatchWriter};
use cep_transport::clock::synchronise;
use cep_transport::control::{ClientId, ControlServer};
use cep_transport::{Context, Pull, Push, SocketOptions, TransportError};
use rustc_hash::FxHashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// Sender id the router puts on its frames.
pub const ROUTER_SENDER: u32 = 0;

/// How far ahead of the answers the run starts.
const START_DELAY_NS: u64 = 100_000_000;

/// Errors that stop the router.
#[derive(Debug, thiserror::Error)]
pub enum RouterError {
    #[error("invalid router configuration: {0}")]
    Config(String),
    #[error("{0}")]
    Rules(String),
    #[error(transparent)]
    Transport(#[from] TransportError),
    #[error("cannot write the announce file {0}")]
    Announce(String),
    #[error("the cluster was not complete within {waited:?}: {missing}")]
    Incomplete { waited: Duration, missing: String },
    #[error("shut down before the cluster was complete ({0})")]
    ShutdownBeforeStart(String),
}

/// Runs the router until every stream has ended (or `shutdown` is raised) and returns the
/// report it also sent to the collector.
pub fn run(config: RouterConfig, shutdown: Arc<AtomicBool>) -> Result<RouterReport, RouterError> {
    config.validate().map_err(RouterError::Config)?;
    let source = cep_query::RulesSource::load(config.rules.as_deref()).map_err(RouterError::Rules)?;
    let context = Context::new();
    let options = SocketOptions { high_water_mark: config.hwm, ..SocketOptions::default() };
    let control = ControlServer::bind(&context, &config.control)?;
    let input = Pull::bind(&context, &config.listen, &options)?;
    if let Some(path) = &config.announce {
        announce(path, input.endpoint(), control.endpoint())?;
    }
    info!(
        data = input.endpoint(),
        control = control.endpoint(),
        workers = config.workers,
        streams = config.streams,
        "router listening"
    );

    let metrics = crate::metrics::RouterMetrics::register(config.workers, config.streams);
    let expected = match config.workers {
        0 => WorkerCount::Settle(config.settle),
        n => WorkerCount::Exactly(n),
    };
    let mut served = Served {
        rendezvous: Rendezvous::<ClientId>::new(expected, config.streams),
        ending: Ending::default(),
        deployments: Deployments::start(&source).map_err(RouterError::Rules)?,
    };
    let mut last_log = Instant::now();
    let listening_since = Instant::now();
    while !served.rendezvous.is_complete(Instant::now()) {
        if shutdown.load(Ordering::Relaxed) {
            return Err(RouterError::ShutdownBeforeStart(served.rendezvous.waiting_for()));
        }
        if !config.start_timeout.is_zero() && listening_since.elapsed() > config.start_timeout {
            return Err(RouterError::Incomplete {
                waited: config.start_timeout,
                missing: served.rendezvous.waiting_for(),
            });
        }
        if let Some((client, body)) = control.recv(Duration::from_millis(100))? {
            served.serve(&control, None, client, &body, &shutdown)?;
            metrics.registered(served.rendezvous.registered());
        }
        if last_log.elapsed() > Duration::from_secs(5) {
            info!("waiting for {}", served.rendezvous.waiting_for());
            last_log = Instant::now();
        }
    }
    // Stamps are taken in the collector's time: measure this host's offset to it first.
    let clock = synchronise(&context, served.rendezvous.collector_clock().unwrap_or_default(), &shutdown)?;
    // Far enough ahead for every node to measure its own clock offset first.
    let allowed_lateness =
        config.allowed_lateness.map(|lateness| u64::try_from(lateness.as_nanos()).unwrap_or(u64::MAX));
    let start = served.rendezvous.start(now_ns() + START_DELAY_NS, served.deployments.current(), allowed_lateness);
    let worker_ids: Vec<String> = start.workers.iter().map(|w| w.id.clone()).collect();
    let outputs: Vec<Push> =
        start.workers.iter().map(|w| Push::connect(&context, &w.endpoint, &options)).collect::<Result<_, _>>()?;
    let collector = Push::connect(&context, &start.collector, &options)?;
    if let Some(estimate) = clock {
        let report = ClockReport { node: "router".into(), estimate };
        collector.send(&encode_message(FrameKind::ClockReport, ROUTER_SENDER, &report), &shutdown)?;
    }
    for (client, ready) in &start.answers {
        control.reply(client, &encode_message(FrameKind::Ready, ROUTER_SENDER, ready))?;
    }
    info!(workers = ?worker_ids, collector = start.collector, "cluster complete, run started");
    metrics.started(&worker_ids, config.streams);

    let mut path = DataPath::new(&config, Partitioner::new(&worker_ids, config.vnodes), outputs);
    let mut message = cep_transport::Message::new();
    let mut last_control = Instant::now();
    while !path.all_ended() && !shutdown.load(Ordering::Relaxed) {
        if input.recv(&mut message, Duration::from_millis(50))? {
            path.handle(&message, &shutdown)?;
            if !input.has_pending() {
                path.flush_all(&shutdown)?;
            }
        } else {
            path.flush_all(&shutdown)?;
        }
        if last_control.elapsed() > Duration::from_millis(100) {
            while let Some((client, body)) = control.recv(Duration::ZERO)? {
                served.serve(&control, Some(&mut path), client, &body, &shutdown)?;
            }
            path.publish(&metrics, &served.deployments);
            last_control = Instant::now();
        }
    }
    path.flush_all(&shutdown)?;
    path.publish(&metrics, &served.deployments);
    let report = RouterReport {
        received: path.received.iter().enumerate().map(|(stream, count)| (stream as u32, *count)).collect(),
        rules: served.deployments.history().to_vec(),
        routed: path.routed_total,
        rejected: path.rejections.counts().clone(),
        workers: worker_ids,
    };
    if let Err(error) = collector.send(&encode_message(FrameKind::RouterReport, ROUTER_SENDER, &report), &shutdown) {
        warn!(%error, "router report not delivered");
    }
    // Keep every socket open until the collector has everything (see `Ending`).
    let ending_since = Instant::now();
    while !served.ending.finished && !shutdown.load(Ordering::Relaxed) && ending_since.elapsed() < config.end_timeout {
        if let Some((client, body)) = control.recv(Duration::from_millis(100))? {
            served.serve(&control, Some(&mut path), client, &body, &shutdown)?;
        }
    }
    if !served.ending.finished && !shutdown.load(Ordering::Relaxed) {
        warn!(waited = ?config.end_timeout, "the collector never said it had everything; ending anyway");
    }
    served.ending.release(&control);
    if shutdown.load(Ordering::Relaxed) {
        for push in path.outputs.iter().chain([&collector]) {
            push.shorten_linger(Duration::from_millis(500));
        }
    }
    info!(routed = report.routed, rejected = path.rejections.total(), "router done");
    Ok(report)
}

/// The end of a run. ZeroMQ (4.3) can drop messages a peer had already sent when that peer
/// disconnects while the receiver's queue is full, so no node closes its data sockets before
/// the collector has everything: nodes that are done ask the router to be told (AwaitEnd), the
/// collector says when it is done (RunFinished), and the router then answers them all.
#[derive(Default)]
struct Ending {
    waiting: Vec<ClientId>,
    finished: bool,
}

impl Ending {
    fn release(&mut self, control: &ControlServer) {
        for client in self.waiting.drain(..) {
            if let Err(error) = control.reply(&client, &encode_message(FrameKind::EndAck, ROUTER_SENDER, &())) {
                warn!(%error, "could not release a node at the end of the run");
            }
        }
    }
}

/// What control requests change: who registered, the end of the run, the rules.
struct Served {
    rendezvous: Rendezvous<ClientId>,
    ending: Ending,
    deployments: Deployments,
}

impl Served {
    /// Serves one control request: a registration, a deployment, or the end-of-run exchange.
    /// `path` is the data path once the run has started.
    fn serve(
        &mut self,
        control: &ControlServer,
        path: Option<&mut DataPath>,
        client: ClientId,
        body: &[u8],
        shutdown: &AtomicBool,
    ) -> Result<(), TransportError> {
        match read_header(body) {
            Ok((header, _)) if header.kind == FrameKind::AwaitEnd => self.ending.waiting.push(client),
            Ok((header, _)) if header.kind == FrameKind::RunFinished => {
                self.ending.finished = true;
                self.ending.waiting.push(client);
            }
            Ok((header, rest)) if header.kind == FrameKind::Deploy => {
                let answer = match decode_message::<Deploy>(&header, rest, FrameKind::Deploy) {
                    Ok(deploy) => self.deploy(path, deploy, shutdown)?,
                    Err(error) => Err(format!("bad deploy frame: {error}")),
                };
                let frame = match answer {
                    Ok(deployed) => encode_message(FrameKind::Deployed, ROUTER_SENDER, &deployed),
                    Err(reason) => {
                        warn!("deployment refused: {}", reason.lines().next().unwrap_or_default());
                        encode_message(FrameKind::Refused, ROUTER_SENDER, &Refused { reason })
                    }
                };
                if let Err(error) = control.reply(&client, &frame) {
                    warn!(%error, "could not answer a deployment");
                }
            }
            _ => serve_registration(control, &mut self.rendezvous, client, body),
        }
        if self.ending.finished {
            self.ending.release(control);
        }
        Ok(())
    }

    fn deploy(
        &mut self,
        path: Option<&mut DataPath>,
        deploy: Deploy,
        shutdown: &AtomicBool,
    ) -> Result<Result<cep_core::control::Deployed, String>, TransportError> {
        let queries = match self.deployments.check(&deploy) {
            Ok(queries) => queries,
            Err(reason) => return Ok(Err(reason)),
        };
        let origin = deploy.origin.clone();
        let deployed = match path {
            // Not started yet: the run starts with these rules.
            None => self.deployments.accept(deploy, queries, Default::default()).1,
            Some(path) if path.all_ended() => return Ok(Err("the run is over: every stream has ended".into())),
            Some(path) => {
                let at = path.switch_point();
                let (marker, deployed) = self.deployments.accept(deploy, queries, at);
                path.switch_rules(&marker, shutdown)?;
                deployed
            }
        };
        info!(epoch = deployed.epoch, origin, at = ?deployed.at, "rules deployed");
        Ok(Ok(deployed))
    }
}

/// Writes the bound endpoints for whoever started the router; written whole, then renamed,
/// so a reader never sees half a file.
fn announce(path: &std::path::Path, data: &str, control: &str) -> Result<(), RouterError> {
    let partial = path.with_extension("partial");
    std::fs::write(&partial, format!("data={data}\ncontrol={control}\n"))
        .and_then(|()| std::fs::rename(&partial, path))
        .map_err(|error| RouterError::Announce(format!("{}: {error}", path.display())))
}

fn serve_registration(control: &ControlServer, rendezvous: &mut Rendezvous<ClientId>, client: ClientId, body: &[u8]) {
    let verdict = match read_header(body)
        .and_then(|(header, rest)| decode_message::<Register>(&header, rest, FrameKind::Register))
    {
        Ok(registration) => {
            let who = format!("{:?} `{}` at {}", registration.role, registration.id, registration.endpoint);
            let verdict = rendezvous.offer(client.clone(), registration, Instant::now());
            match &verdict {
                Verdict::Hold => info!("registered {who}; waiting for {}", rendezvous.waiting_for()),
                Verdict::Refuse(reason) => warn!("refused {who}: {reason}"),
            }
            verdict
        }
        Err(error) => {
            warn!(%error, "bad registration frame");
            Verdict::Refuse(format!("bad registration frame: {error}"))
        }
    };
    if let Verdict::Refuse(reason) = verdict {
        let frame = encode_message(FrameKind::Refused, ROUTER_SENDER, &Refused { reason });
        if let Err(error) = control.reply(&client, &frame) {
            warn!(%error, "could not answer a refused registration");
        }
    }
}

/// Per-run routing state.
struct DataPath {
    partitioner: Partitioner,
    owners: FxHashMap<Box<[u8]>, usize>,
    outputs: Vec<Push>,
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
    fn new(config: &RouterConfig, partitioner: Partitioner, outputs: Vec<Push>) -> Self {
        let workers = outputs.len();
        let streams = config.streams as usize;
        DataPath {
            partitioner,
            owners: FxHashMap::default(),
            batches: (0..workers).map(|_| TickBatchWriter::new(ROUTER_SENDER)).collect(),
            outputs,
            batch_limit: config.batch,
            max_frame_bytes: config.max_frame_bytes,
            streams: config.streams,
            decoded: Vec::with_capacity(config.batch),
            received: vec![0; streams],
            routed: vec![vec![0; workers]; streams],
            next_seq: vec![0; streams],
            routed_total: 0,
            ended: vec![false; streams],
            rejections: Rejections::new("router"),
        }
    }

    fn all_ended(&self) -> bool {
        self.ended.iter().all(|ended| *ended)
    }

    /// Copies the counters to the metrics (every 100 ms and at the end, never per tick).
    fn publish(&self, metrics: &crate::metrics::RouterMetrics, deployments: &Deployments) {
        let epoch = deployments.current().epoch;
        metrics.observe(&self.received, &self.routed, &self.ended, self.rejections.counts(), epoch);
    }

    fn handle(&mut self, frame: &[u8], shutdown: &AtomicBool) -> Result<(), TransportError> {
        let t_in = now_ns();
        let Some((header, rest)) = self.rejections.accept(frame, self.max_frame_bytes) else {
            return Ok(());
        };
        match header.kind {
            FrameKind::Ticks => {
                let mut decoded = std::mem::take(&mut self.decoded);
                match decode_ticks(frame, &header, rest, &mut decoded) {
                    Ok(_) => {
                        for tick in &decoded {
                            self.route(frame, tick, header.sender, t_in, shutdown)?;
                        }
                    }
                    Err(error) => self.rejections.reject(error.cause(), Some(header.sender), &error),
                }
                self.decoded = decoded;
            }
            FrameKind::EndOfStream => match decode_message::<EndOfStream>(&header, rest, FrameKind::EndOfStream) {
                Ok(eos) => self.end_stream(eos, header.sender, shutdown)?,
                Err(error) => self.rejections.reject(error.cause(), Some(header.sender), &error),
            },
            _ => self.rejections.unexpected(&header),
        }
        Ok(())
    }

    #[inline]
    fn route(
        &mut self,
        frame: &[u8],
        tick: &TickRecord,
        sender: u32,
        t_in: u64,
        shutdown: &AtomicBool,
    ) -> Result<(), TransportError> {
        if let Some(cause) = tick.invalid_reason() {
            self.rejections.reject(
                cause,
                Some(sender),
                &format_args!("tick seq {} of stream {}", tick.seq, tick.injector),
            );
            return Ok(());
        }
        if tick.injector >= self.streams || self.ended[tick.injector as usize] {
            let detail = format_args!(
                "tick of stream {} (run has {} streams; ended streams take no ticks)",
                tick.injector, self.streams
            );
            self.rejections.reject("unknown_stream", Some(sender), &detail);
            return Ok(());
        }
        let symbol = tick.symbol_bytes(frame);
        let owner = match self.owners.get(symbol) {
            Some(&owner) => owner,
            None => {
                let owner = self.partitioner.owner(tick.symbol(frame));
                self.owners.insert(symbol.into(), owner);
                owner
            }
        };
        self.received[tick.injector as usize] += 1;
        let next = &mut self.next_seq[tick.injector as usize];
        *next = (*next).max(tick.seq + 1);
        self.routed[tick.injector as usize][owner] += 1;
        self.routed_total += 1;
        let batch = &mut self.batches[owner];
        batch.push_encoded(tick.encoded(frame), t_in);
        if batch.len() >= self.batch_limit {
            self.flush(owner, shutdown)?;
        }
        Ok(())
    }

    fn end_stream(&mut self, eos: EndOfStream, sender: u32, shutdown: &AtomicBool) -> Result<(), TransportError> {
        let stream = eos.stream as usize;
        if stream >= self.ended.len() || self.ended[stream] {
            let detail = format_args!("end of stream {} (run has {} streams)", eos.stream, self.streams);
            self.rejections.reject("unknown_stream", Some(sender), &detail);
            return Ok(());
        }
        self.ended[stream] = true;
        // The marker must follow the stream's last ticks on every worker's socket.
        self.flush_all(shutdown)?;
        for worker in 0..self.outputs.len() {
            let marker = EndOfStream { stream: eos.stream, sent: eos.sent, routed: self.routed[stream][worker] };
            self.outputs[worker].send(&encode_message(FrameKind::EndOfStream, ROUTER_SENDER, &marker), shutdown)?;
        }
        info!(stream = eos.stream, sent = eos.sent, received = self.received[stream], "stream ended");
        Ok(())
    }

    /// Per stream, the first sequence number after everything routed so far.
    fn switch_point(&self) -> std::collections::BTreeMap<u32, u64> {
        self.next_seq.iter().enumerate().map(|(stream, next)| (stream as u32, *next)).collect()
    }

    /// Sends the rule-switch marker to every worker behind everything routed so far.
    fn switch_rules(&mut self, marker: &RulesText, shutdown: &AtomicBool) -> Result<(), TransportError> {
        self.flush_all(shutdown)?;
        let frame = encode_message(FrameKind::SwitchRules, ROUTER_SENDER, marker);
        for output in &self.outputs {
            output.send(&frame, shutdown)?;
        }
        Ok(())
    }

    fn flush(&mut self, worker: usize, shutdown: &AtomicBool) -> Result<(), TransportError> {
        let batch = &mut self.batches[worker];
        if batch.is_empty() {
            return Ok(());
        }
        let frame = batch.seal(now_ns());
        self.outputs[worker].send(frame, shutdown)?;
        batch.clear();
        Ok(())
    }

    fn flush_all(&mut self, shutdown: &AtomicBool) -> Result<(), TransportError> {
        for worker in 0..self.batches.len() {
            self.flush(worker, shutdown)?;
        }
        Ok(())
    }
}
