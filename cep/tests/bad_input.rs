//! Bad frames and bad ticks fed to a running router and worker: each is counted under its
//! cause, nothing crashes, and the valid traffic around them is processed in full. The test
//! plays the injector and the collector itself, so it controls the order of every frame.

use cep_core::control::{Ready, Register};
use cep_core::delivery::Saved;
use cep_core::frame::{Body, Frame};
use cep_core::identity::{Role, ROUTER_ID};
use cep_core::report::{CauseCounts, EndOfStream, RouterReport, WorkerProgress, WorkerReport};
use cep_core::wire::{FrameKind, OutputBatchWriter, TickBatchWriter};
use cep_router::RouterConfig;
use cep_transport::control::{register, EndOfRun};
use cep_transport::{Context, Message, Pull, Push, SocketOptions};
use cep_worker::WorkerConfig;
mod common;

use common::announced;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

const MAX_FRAME: usize = cep_core::wire::MIN_MAX_FRAME_BYTES;

/// Ticks `from..to` of stream 0, as `sender` (0: the stream's injector; ROUTER_ID: the router).
fn valid_ticks(sender: u32, from: u64, to: u64) -> Vec<u8> {
    let mut batch = TickBatchWriter::new(sender);
    for seq in from..to {
        batch.push(
            format!("S{:04}", seq % 50).as_bytes(),
            100.0 + (seq % 7) as f64,
            1_000_000 + seq,
            1_000_000 + seq,
            0,
            seq,
            0,
        );
    }
    batch.seal(0).to_vec()
}

fn bad_ticks() -> Vec<u8> {
    let mut batch = TickBatchWriter::new(0);
    batch.push(b"S0001", f64::NAN, 1, 1, 0, 90_000, 0);
    batch.push(b"S0001", f64::INFINITY, 1, 1, 0, 90_001, 0);
    batch.push(b"S0001", -1.0, 1, 1, 0, 90_002, 0);
    batch.push(b"S0001", 0.0, 1, 1, 0, 90_003, 0);
    batch.push(b"", 10.0, 1, 1, 0, 90_004, 0);
    batch.push(b"S0001", 10.0, 1, 1, 7, 0, 0);
    batch.seal(0).to_vec()
}

/// One of each kind of bad frame, as `sender`.
fn bad_frames(sender: u32) -> Vec<Vec<u8>> {
    let mut other_version = valid_ticks(sender, 0, 3);
    other_version[1] = 1;
    let mut outputs = OutputBatchWriter::new(sender);
    outputs.push(0, b"S0001", false, 1.0, 3.0, 0, 1, 1, 1);
    let truncated = valid_ticks(sender, 0, 3);
    vec![
        b"definitely not MessagePack".to_vec(),
        other_version,
        vec![0x90; MAX_FRAME + 1],
        outputs.seal(0, 0, 0).to_vec(),
        truncated[..truncated.len() - 4].to_vec(),
    ]
}

fn counts(pairs: &[(&str, u64)]) -> CauseCounts {
    pairs.iter().map(|(cause, n)| (cause.to_string(), *n)).collect()
}

fn register_as(
    context: &Context,
    control: &str,
    role: Role,
    endpoint: &str,
    streams: u32,
) -> std::thread::JoinHandle<Ready> {
    let (context, control) = (context.clone(), control.to_string());
    let registration = Register {
        role,
        id: format!("{role:?}"),
        endpoint: endpoint.to_string(),
        streams,
        warmup_ns: 0,
        clock_endpoint: String::new(),
        resuming: 0,
    };
    std::thread::spawn(move || {
        register(&context, &control, &registration, Duration::from_secs(30), &AtomicBool::new(false)).unwrap()
    })
}

#[test]
fn bad_frames_are_counted_and_valid_traffic_survives() {
    let shutdown = Arc::new(AtomicBool::new(false));
    let scratch = tempfile::tempdir().unwrap();
    let announce = scratch.path().join("router.endpoints");
    let router_config = RouterConfig {
        listen: "tcp://127.0.0.1:*".into(),
        control: "tcp://127.0.0.1:*".into(),
        workers: 1,
        settle: Duration::from_secs(1),
        streams: 1,
        vnodes: 16,
        batch: 64,
        max_frame_bytes: MAX_FRAME,
        hwm: 1000,
        announce: Some(announce.clone()),
        rules: None,
        allowed_lateness: None,
        start_timeout: Duration::ZERO,
        end_timeout: Duration::from_secs(30),
        ..RouterConfig::default()
    };
    let router = {
        let shutdown = shutdown.clone();
        std::thread::spawn(move || cep_router::run(router_config, shutdown))
    };
    let (data, control) = announced(&announce);
    let worker_config = WorkerConfig {
        router: control.clone(),
        id: Some("worker-0".into()),
        listen: "tcp://127.0.0.1:*".into(),
        advertise: "127.0.0.1".into(),
        batch: 64,
        max_frame_bytes: MAX_FRAME,
        hwm: 1000,
        start_timeout: Duration::from_secs(30),
        end_timeout: Duration::from_secs(30),
        ..WorkerConfig::default()
    };
    let worker = {
        let shutdown = shutdown.clone();
        std::thread::spawn(move || cep_worker::run(worker_config, shutdown))
    };
    let context = Context::new();
    let options = SocketOptions::default();
    let collector = Pull::bind(&context, "tcp://127.0.0.1:*", &options, &cep_core::identity::Role::ALL).unwrap();
    let as_collector = register_as(&context, &control, Role::Collector, collector.endpoint(), 0);
    let as_injector = register_as(&context, &control, Role::Injector, "", 1);
    let ready = as_injector.join().unwrap();
    as_collector.join().unwrap();
    let never = AtomicBool::new(false);

    // A second collector arriving after the start is refused with the reason, and the run goes
    // on (a worker or an injector arriving late joins: tests/rescale.rs); so is one claiming to
    // resume another run (a restarted collector of this run takes over: collector_restart.rs).
    let late = Register {
        role: Role::Collector,
        id: "late".into(),
        endpoint: "tcp://127.0.0.1:1".into(),
        streams: 0,
        warmup_ns: 0,
        clock_endpoint: String::new(),
        resuming: 0,
    };
    let refused = register(&context, &control, &late, Duration::from_secs(10), &AtomicBool::new(false)).unwrap_err();
    assert!(
        refused.to_string().contains("the run has already started; a collector can only join it to resume"),
        "{refused}"
    );
    let other_run = Register { resuming: 12_345, ..late };
    let refused =
        register(&context, &control, &other_run, Duration::from_secs(10), &AtomicBool::new(false)).unwrap_err();
    assert!(refused.to_string().contains("saved state is of another run"), "{refused}");

    // Straight to the worker, as a broken router would: every bad frame plus one bad tick; and
    // as an injector pointed at the worker's port would: ticks it must not process. Wait until
    // it has counted them.
    let to_worker =
        Push::connect(&context, &ready.workers[0].endpoint, cep_transport::Server::Router, &options).unwrap();
    let mut direct = bad_frames(ROUTER_ID);
    let mut nan_tick = TickBatchWriter::new(ROUTER_ID);
    nan_tick.push(b"S0001", f64::NAN, 1, 1, 0, 99_999, 0);
    direct.push(nan_tick.seal(0).to_vec());
    direct.push(valid_ticks(0, 0, 10));
    for frame in &direct {
        to_worker.send(frame, &never).unwrap();
    }
    let mut message = Message::new();
    // What a collector would save and tell the router: the last position of each sender.
    let mut saved = Saved::default();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut outputs_received = 0u64;
    loop {
        assert!(Instant::now() < deadline, "the worker never reported its rejections");
        if !collector.recv(&mut message, Duration::from_millis(100)).unwrap() {
            continue;
        }
        let frame = unwrapped(&message, &mut saved);
        if frame.kind() == FrameKind::WorkerProgress {
            let progress: WorkerProgress = frame.body().unwrap();
            if progress.rejected == direct.len() as u64 {
                break;
            }
        }
    }

    // Through the router, on the injector's own connection: valid, bad, valid, end.
    let to_router = Push::connect(&context, &data, cep_transport::Server::Router, &options).unwrap();
    to_router.send(&valid_ticks(0, 0, 500), &never).unwrap();
    for frame in bad_frames(0) {
        to_router.send(&frame, &never).unwrap();
    }
    to_router.send(&bad_ticks(), &never).unwrap();
    // A forged end marker claiming fewer ticks than arrived, and a tick numbered far beyond
    // its stream: neither is trusted.
    to_router.send(&EndOfStream { stream: 0, sent: 5, routed: 0, cut: None }.encode(0), &never).unwrap();
    let mut far_ahead = TickBatchWriter::new(0);
    far_ahead.push(b"S0001", 10.0, 1, 1, 0, 500 + cep_router::data_path::MAX_SEQ_AHEAD + 1, 0);
    to_router.send(far_ahead.seal(0), &never).unwrap();
    to_router.send(&valid_ticks(0, 500, 1000), &never).unwrap();
    to_router.send(&EndOfStream { stream: 0, sent: 1000, routed: 0, cut: None }.encode(0), &never).unwrap();

    let (mut worker_report, mut router_report): (Option<WorkerReport>, Option<RouterReport>) = (None, None);
    let mut decoded = Vec::new();
    while worker_report.is_none() || router_report.is_none() {
        assert!(Instant::now() < deadline, "reports never arrived");
        if !collector.recv(&mut message, Duration::from_millis(100)).unwrap() {
            continue;
        }
        let frame = unwrapped(&message, &mut saved);
        match frame.kind() {
            FrameKind::Outputs => outputs_received += frame.outputs(&mut decoded).unwrap().records.len() as u64,
            FrameKind::WorkerReport => worker_report = Some(frame.body().unwrap()),
            FrameKind::RouterReport => router_report = Some(frame.body().unwrap()),
            _ => {}
        }
    }
    let (worker_report, router_report) = (worker_report.unwrap(), router_report.unwrap());

    let frame_causes = [("malformed", 2), ("bad_version", 1), ("oversized", 1), ("unexpected_kind", 1)];
    let mut router_expected = frame_causes.to_vec();
    router_expected.extend([
        ("non_finite_price", 2),
        ("non_positive_price", 2),
        ("empty_symbol", 1),
        ("unknown_stream", 1),
        ("end_behind_stream", 1),
        ("seq_far_ahead", 1),
        // The late collector and the one claiming another run.
        ("refused_control", 2),
    ]);
    assert_eq!(router_report.rejected, counts(&router_expected));
    let mut worker_expected = frame_causes.to_vec();
    worker_expected.extend([("non_finite_price", 1), ("not_from_router", 1)]);
    assert_eq!(worker_report.rejected, counts(&worker_expected));

    assert_eq!(router_report.received.get(&0), Some(&1000));
    assert_eq!(worker_report.processed, 1000);
    assert_eq!(worker_report.streams[0].sent, Some(1000));
    assert_eq!(worker_report.streams[0].routed, Some(1000));
    assert_eq!(worker_report.streams[0].processed, 1000);
    assert_eq!(worker_report.duplicates, 0);
    assert_eq!(outputs_received, worker_report.outputs);
    // The volatility query fires on every valid tick.
    assert!(worker_report.outputs >= 1000);

    // As the collector would: everything is saved (the worker then asks for the end), the run
    // is over, everyone may close.
    cep_transport::control::request(&context, &control, &saved.encode(0), Duration::from_secs(10), &never).unwrap();
    cep_transport::control::end_of_run(&context, &control, EndOfRun::RunFinished, Duration::from_secs(10), &never)
        .unwrap();
    router.join().unwrap().unwrap();
    assert!(worker.join().unwrap().is_ok());
}

/// A frame as the collector gets it: workers' and the router's come in a Sequenced envelope,
/// whose position is noted in `saved`.
fn unwrapped<'m>(message: &'m [u8], saved: &mut Saved) -> Frame<'m> {
    let frame = Frame::read(message, usize::MAX).unwrap();
    if frame.kind() != FrameKind::Sequenced {
        return frame;
    }
    let sequenced = frame.sequenced().unwrap();
    saved.positions.retain(|(source, _)| *source != sequenced.source);
    saved.positions.push((sequenced.source, sequenced.position));
    Frame::read(sequenced.frame, usize::MAX).unwrap()
}
