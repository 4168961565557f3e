//! The router core's tests: frame by frame, through its entry points.

use super::*;
use crate::admission::check_endpoint;
use cep_core::control::{Deploy, Deployed, Register};
use cep_core::frame::{AwaitEnd, EndAck, Frame, RunFinished};
use cep_core::identity::Role;
use cep_core::identity::SHARED_WORKER_KEY;
use cep_core::outbox::{Event, Recorded};
use cep_core::partition::Partitioner;
use cep_core::report::EndOfStream;
use cep_core::rescale::WorkerJoined;
use cep_core::wire::{FrameKind, TickBatchWriter};

/// A registration of `role` as `id`, opening `streams` streams (the lifecycle's tests use it too).
pub(crate) fn register(role: Role, id: &str, streams: u32) -> Vec<u8> {
    Register {
        role,
        id: id.into(),
        endpoint: format!("inproc://{id}"),
        streams,
        warmup_ns: 0,
        clock_endpoint: String::new(),
        resuming: 0,
    }
    .encode(0)
}

/// The collector's notice that its save holds checkpoint `id` of `worker`'s outputs.
fn confirming(worker: u32, id: u64) -> Vec<u8> {
    use cep_core::failover::OutputsConfirmed;
    Saved { confirmed: vec![OutputsConfirmed { worker, id }], ..Saved::default() }.encode(0)
}

/// A router with workers `a` and `b`, the collector and one injector stream registered,
/// started, its Ready answers taken.
fn running(batch: usize) -> (Router, Recorded) {
    running_with(batch, 0)
}

/// A router of 2 workers and 1 stream on the reference rules, nobody registered yet.
fn unstarted(batch: usize, checkpoint_every_ns: u64) -> Router {
    let settings = RouterSettings {
        workers: WorkerCount::Exactly(2),
        streams: 1,
        vnodes: 64,
        batch,
        max_frame_bytes: 1 << 20,
        allowed_lateness_ns: Some(5),
        slice_symbols: 2,
        max_held_ticks: 1000,
        move_timeout_ns: 1_000,
        checkpoint_every_ns,
        checkpoints_retained: 1,
        checkpoint_dir: "/cluster/checkpoints".into(),
        max_replay_bytes: 1 << 30,
        failure_timeout: std::time::Duration::from_secs(3600),
    };
    Router::new(settings, Deployments::start(&cep_query::RulesSource::reference()).unwrap())
}

/// [`running`], with checkpoints every `checkpoint_every_ns` (0: none).
fn running_with(batch: usize, checkpoint_every_ns: u64) -> (Router, Recorded) {
    let mut router = unstarted(batch, checkpoint_every_ns);
    let mut out = Recorded { clock: 777, ..Default::default() };
    router.control(b"b".to_vec(), &register(Role::Worker, "b", 0), Monotonic::from_ns(1), &mut out);
    router.control(b"c".to_vec(), &register(Role::Collector, "c", 0), Monotonic::from_ns(1), &mut out);
    router.control(b"i".to_vec(), &register(Role::Injector, "i", 1), Monotonic::from_ns(1), &mut out);
    assert!(!router.can_start(Monotonic::from_ns(2)));
    router.control(b"a".to_vec(), &register(Role::Worker, "a", 0), Monotonic::from_ns(2), &mut out);
    assert!(out.take().is_empty(), "nobody is answered before the start");
    assert!(router.can_start(Monotonic::from_ns(2)));
    let start = router.start(1_000);
    assert_eq!(start.workers.iter().map(|w| w.id.as_str()).collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(start.collector, "inproc://c");
    router.announce(None, &mut out);
    let answers: Vec<(Peer, u32, u64, Option<u64>, String)> = out
        .take()
        .into_iter()
        .map(|(to, frame)| {
            let ready: Ready = Frame::read(&frame, usize::MAX).unwrap().body().unwrap();
            (to, ready.assigned, ready.start_ns, ready.allowed_lateness_ns, ready.checkpoint_dir)
        })
        .collect();
    let client = |id: &[u8]| Peer::Client(id.to_vec());
    // The workers are told the cluster's checkpoint store (those given none store there).
    let store = || "/cluster/checkpoints".to_string();
    assert_eq!(
        answers,
        [
            (client(b"a"), 0, 1_000, Some(5), store()),
            (client(b"b"), 1, 1_000, Some(5), store()),
            (client(b"c"), 0, 1_000, Some(5), String::new()),
            (client(b"i"), 0, 1_000, Some(5), String::new())
        ]
    );
    (router, out)
}

fn ticks(symbols: &[&str], first_seq: u64) -> Vec<u8> {
    let mut writer = TickBatchWriter::new(0);
    for (i, symbol) in symbols.iter().enumerate() {
        let seq = first_seq + i as u64;
        writer.push(symbol.as_bytes(), 10.0, 100 + seq, 100 + seq, 0, seq, 0);
    }
    writer.seal(50).to_vec()
}

/// Every tick sent to each worker: (worker, symbol, seq, t_router_in, batch t_sent).
fn routed(sent: &[(Peer, Vec<u8>)]) -> Vec<(u32, String, u64, u64, u64)> {
    let mut records = Vec::new();
    let mut all = Vec::new();
    for (to, bytes) in sent {
        let Peer::Worker(worker) = to else { panic!("data to {to:?}") };
        let frame = Frame::read(bytes, usize::MAX).unwrap();
        if frame.kind() != FrameKind::Ticks {
            continue;
        }
        let batch = frame.ticks(&mut records).unwrap();
        for tick in batch.records {
            let symbol = String::from_utf8(batch.symbol(tick).to_vec()).unwrap();
            all.push((*worker, symbol, tick.seq, tick.t_router_in, batch.t_sent));
        }
    }
    all
}

#[test]
fn each_symbol_goes_to_its_owner_in_batches_and_the_end_follows_the_ticks() {
    let (mut router, mut out) = running(3);
    let symbols = ["S1", "S2", "S3", "S4", "S5", "S6", "S7", "S8"];
    router.data(&ticks(&symbols, 0), 40, &mut out);
    let full_batches = out.take();
    assert!(!full_batches.is_empty() && routed(&full_batches).iter().all(|tick| tick.3 == 40));
    router.flush(&mut out);
    let rest = out.take();
    let mut all = routed(&full_batches);
    all.extend(routed(&rest));
    assert_eq!(all.len(), symbols.len(), "every tick once");
    let ring = Partitioner::new(&["a".to_string(), "b".to_string()], 64);
    for (worker, symbol, _, t_router_in, t_sent) in &all {
        assert_eq!(*worker as usize, ring.owner(symbol), "{symbol}");
        assert_eq!((*t_router_in, *t_sent), (40, 777));
    }
    router.data(&EndOfStream { stream: 0, sent: 8, routed: 0, cut: None }.encode(0), 41, &mut out);
    let markers: Vec<(Peer, EndOfStream)> = out
        .take()
        .into_iter()
        .map(|(to, frame)| (to, Frame::read(&frame, usize::MAX).unwrap().body().unwrap()))
        .collect();
    let to_a = all.iter().filter(|tick| tick.0 == 0).count() as u64;
    assert_eq!(
        markers,
        [
            (Peer::Worker(0), EndOfStream { stream: 0, sent: 8, routed: to_a, cut: None }),
            (Peer::Worker(1), EndOfStream { stream: 0, sent: 8, routed: 8 - to_a, cut: None })
        ]
    );
    assert!(router.all_ended());
    assert_eq!(out.events.last(), Some(&Event::StreamEnded { stream: 0, sent: 8, received: 8 }));
    // Its progress: what came in so far, and when.
    router.progress(50, &mut out);
    let progress = out.take();
    assert_eq!(progress[0].0, Peer::Collector);
    let body = Frame::read(&progress[0].1, usize::MAX).unwrap().body::<RouterProgress>().unwrap();
    assert_eq!(body, RouterProgress { at_ns: 50, received: 8 });
    let report = router.finish(&mut out);
    assert_eq!((report.routed, report.received.get(&0)), (8, Some(&8)));
    let sent = out.take();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].0, Peer::Collector);
    assert_eq!(Frame::read(&sent[0].1, usize::MAX).unwrap().body::<RouterReport>().unwrap(), report);
    // Nothing follows the report: the collector may have ended at it.
    router.progress(60, &mut out);
    assert!(out.take().is_empty());
}

#[test]
fn nodes_wait_for_the_collector_before_closing() {
    let (mut router, mut out) = running(10);
    router.data(&EndOfStream { stream: 0, sent: 0, routed: 0, cut: None }.encode(0), 1, &mut out);
    router.finish(&mut out);
    out.take();
    router.control(b"a".to_vec(), &AwaitEnd.encode(0), Monotonic::from_ns(2), &mut out);
    router.control(b"i".to_vec(), &AwaitEnd.encode(0), Monotonic::from_ns(2), &mut out);
    assert!(out.take().is_empty() && !router.collector_finished());
    router.control(b"c".to_vec(), &RunFinished.encode(0), Monotonic::from_ns(3), &mut out);
    assert!(router.collector_finished());
    let released: Vec<Peer> = out
        .take()
        .into_iter()
        .map(|(to, frame)| {
            Frame::read(&frame, usize::MAX).unwrap().body::<EndAck>().unwrap();
            to
        })
        .collect();
    assert_eq!(released, [Peer::Client(b"a".to_vec()), Peer::Client(b"i".to_vec()), Peer::Client(b"c".to_vec())]);
    // Worker b asks after the collector finished: answered at once, and then everyone has.
    assert!(!router.every_node_asked());
    router.control(b"b".to_vec(), &AwaitEnd.encode(0), Monotonic::from_ns(4), &mut out);
    let late = out.take();
    assert_eq!(late.len(), 1);
    assert_eq!(late[0].0, Peer::Client(b"b".to_vec()));
    assert!(router.every_node_asked());
}

#[test]
fn a_deployment_switches_every_worker_between_the_same_ticks() {
    let (mut router, mut out) = running(100);
    router.data(&ticks(&["S1", "S2", "S3"], 0), 1, &mut out);
    let deploy = Deploy { origin: "new.rules".into(), text: "@name('all') SELECT * FROM StockTick;".into() };
    router.control(b"ops".to_vec(), &deploy.encode(0), Monotonic::from_ns(2), &mut out);
    let sent = out.take();
    let kinds: Vec<(Peer, FrameKind)> =
        sent.iter().map(|(to, frame)| (to.clone(), Frame::read(frame, usize::MAX).unwrap().kind())).collect();
    // The held batches leave first, then the marker to each worker, then the answer.
    let markers = &kinds[kinds.len() - 3..];
    assert_eq!(
        markers,
        [
            (Peer::Worker(0), FrameKind::SwitchRules),
            (Peer::Worker(1), FrameKind::SwitchRules),
            (Peer::Client(b"ops".to_vec()), FrameKind::Deployed)
        ]
    );
    assert_eq!(routed(&sent[..kinds.len() - 3]).len(), 3);
    let deployed: Deployed = Frame::read(&sent.last().unwrap().1, usize::MAX).unwrap().body().unwrap();
    assert_eq!((deployed.epoch, deployed.at.get(&0)), (1, Some(&3)));
    let at = std::collections::BTreeMap::from([(0, 3)]);
    assert_eq!(out.events.last(), Some(&Event::Deployed { epoch: 1, origin: "new.rules".into(), at }));
    // A file that does not check is refused, and the rules stay.
    let bad = Deploy { origin: "bad.rules".into(), text: "SELECT nope;".into() };
    router.control(b"ops".to_vec(), &bad.encode(0), Monotonic::from_ns(3), &mut out);
    let sent = out.take();
    assert_eq!(sent.len(), 1);
    assert_eq!(Frame::read(&sent[0].1, usize::MAX).unwrap().kind(), FrameKind::Refused);
    assert_eq!(router.report().rules.len(), 2);
}

#[test]
fn a_forged_or_oversized_control_frame_is_refused_with_its_cause() {
    let (mut router, mut out) = running(10);
    let oversized = vec![0x94; cep_core::control::MAX_CONTROL_FRAME_BYTES + 1];
    for (body, cause) in [(&b"junk"[..], "malformed"), (&oversized[..], "oversized")] {
        router.control(b"x".to_vec(), body, Monotonic::from_ns(1), &mut out);
        let sent = out.take();
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].0, Peer::Client(b"x".to_vec()));
        let refused: cep_core::control::Refused = Frame::read(&sent[0].1, usize::MAX).unwrap().body().unwrap();
        assert!(refused.reason.starts_with(&format!("bad control frame: {cause}")), "{}", refused.reason);
        assert!(matches!(out.events.pop(), Some(Event::BadControlFrame { .. })));
    }
    // A well-formed frame of a kind the control socket does not take: refused, not served.
    router.control(
        b"x".to_vec(),
        &EndOfStream { stream: 0, sent: 0, routed: 0, cut: None }.encode(0),
        Monotonic::from_ns(1),
        &mut out,
    );
    let refused: cep_core::control::Refused = Frame::read(&out.take()[0].1, usize::MAX).unwrap().body().unwrap();
    assert!(refused.reason.contains("unexpected frame kind"), "{}", refused.reason);
    assert!(!router.all_ended(), "a forged end marker on the control socket ends nothing");
}

#[test]
fn refused_connections_and_requests_reach_the_metrics_before_and_after_the_start() {
    let metrics = crate::metrics::RouterMetrics::register(2, 1);
    let line =
        |cause: &str, count: u64| format!("cep_rejected_total{{role=\"cep\",id=\"cep\",cause=\"{cause}\"}} {count}\n");
    let scrape = || cep_telemetry::metrics::encode(false).unwrap();
    let mut router = unstarted(10, 0);
    router.refused_connections(&[("unauthenticated_operators".to_string(), 2)].into());
    router.publish(&metrics);
    assert!(scrape().contains(&line("unauthenticated_operators", 2)), "{}", scrape());

    let (mut router, mut out) = running(10);
    router.refused_connections(&[("handshake_failed_operators".to_string(), 3)].into());
    router.control(b"x".to_vec(), b"junk", Monotonic::from_ns(1), &mut out);
    router.data(b"junk", 1, &mut out);
    router.publish(&metrics);
    let text = scrape();
    for expected in [line("handshake_failed_operators", 3), line("malformed", 1), line("malformed_control", 1)] {
        assert!(text.contains(&expected), "{expected} missing from:\n{text}");
    }
}

#[test]
fn bad_frames_and_ticks_are_counted_by_cause() {
    let (mut router, mut out) = running(100);
    router.data(b"junk", 1, &mut out);
    let mut writer = TickBatchWriter::new(0);
    writer.push(b"S1", f64::NAN, 1, 1, 0, 0, 0);
    writer.push(b"S1", 1.0, 1, 1, 4, 0, 0);
    writer.push(b"S1", 1.0, 1, 1, 0, 1, 0);
    router.data(writer.seal(0), 1, &mut out);
    router.data(&EndOfStream { stream: 9, sent: 0, routed: 0, cut: None }.encode(0), 1, &mut out);
    router.flush(&mut out);
    assert_eq!(routed(&out.take()).len(), 1);
    let report = router.report();
    let causes: Vec<(&str, u64)> = report.rejected.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    assert_eq!(causes, [("malformed", 1), ("non_finite_price", 1), ("unknown_stream", 2)]);
    // A collector registering after the start is refused with the reason.
    router.control(b"late".to_vec(), &register(Role::Collector, "late", 0), Monotonic::from_ns(5), &mut out);
    let refused: cep_core::control::Refused = Frame::read(&out.take()[0].1, usize::MAX).unwrap().body().unwrap();
    assert!(refused.reason.contains("already started"), "{}", refused.reason);
}

#[test]
fn an_injector_that_registers_while_the_run_goes_opens_streams_of_its_own() {
    use cep_core::rescale::StreamsOpened;
    let (mut router, mut out) = running(100);
    router.data(&ticks(&["S1", "S2"], 0), 1, &mut out);
    router.flush(&mut out);
    out.take();
    router.control(b"late".to_vec(), &register(Role::Injector, "late", 2), Monotonic::from_ns(5), &mut out);
    let sent = out.take();
    let opened: Vec<(Peer, StreamsOpened)> = sent[..2]
        .iter()
        .map(|(to, frame)| (to.clone(), Frame::read(frame, usize::MAX).unwrap().body().unwrap()))
        .collect();
    let marker = StreamsOpened { first: 1, count: 2 };
    assert_eq!(opened, [(Peer::Worker(0), marker), (Peer::Worker(1), marker)]);
    let ready: Ready = Frame::read(&sent[2].1, usize::MAX).unwrap().body().unwrap();
    assert_eq!((sent[2].0.clone(), ready.assigned, ready.streams), (Peer::Client(b"late".to_vec()), 1, 3));
    assert_eq!(ready.start_ns, 777 + LATE_START_DELAY_NS, "it starts after its clock samples");
    // Its ticks route; a tick of a symbol that another stream carries is refused.
    let mut writer = TickBatchWriter::new(1);
    writer.push(b"X1", 10.0, 1, 1, 1, 0, 0);
    writer.push(b"S1", 10.0, 1, 1, 2, 0, 0);
    router.data(writer.seal(0), 6, &mut out);
    router.flush(&mut out);
    assert_eq!(routed(&out.take()).iter().map(|t| t.1.as_str()).collect::<Vec<_>>(), ["X1"]);
    assert_eq!(router.report().rejected.get("symbol_of_another_stream"), Some(&1));
    // The run ends when every stream, its own included, has.
    for stream in 0..3 {
        let sent = router.report().received.get(&stream).copied().unwrap_or(0);
        router.data(&EndOfStream { stream, sent, routed: 0, cut: None }.encode(0), 7, &mut out);
    }
    assert!(router.all_ended());
    assert_eq!(router.report().received.get(&1), Some(&1));
    out.take();
    // It asks for the end: its streams have ended, so it is released at once.
    router.control(b"late".to_vec(), &AwaitEnd.encode(0), Monotonic::from_ns(8), &mut out);
    let answer = out.take();
    assert_eq!(
        (answer[0].0.clone(), Frame::read(&answer[0].1, usize::MAX).unwrap().kind()),
        (Peer::Client(b"late".to_vec()), FrameKind::EndAck)
    );
}

#[test]
fn a_worker_that_joins_takes_its_share_with_the_state_ahead_of_the_held_ticks() {
    use cep_core::rescale::{HandOff, RescaleStarted, Rescaled, SymbolState};
    let (mut router, mut out) = running(100);
    let symbols: Vec<String> = (0..40).map(|i| format!("S{i}")).collect();
    let names: Vec<&str> = symbols.iter().map(String::as_str).collect();
    router.data(&ticks(&names, 0), 1, &mut out);
    router.flush(&mut out);
    out.take();
    router.control(b"c".to_vec(), &register(Role::Worker, "c", 0), Monotonic::from_ns(2), &mut out);
    // The collector is told who joined, it is answered (joining) and welcomed on its data
    // socket; nothing moves before it answers the Welcome.
    let sent = out.take();
    let kinds: Vec<(Peer, FrameKind)> =
        sent.iter().map(|(to, frame)| (to.clone(), Frame::read(frame, usize::MAX).unwrap().kind())).collect();
    assert_eq!(
        kinds,
        [
            (Peer::Collector, FrameKind::WorkerJoined),
            (Peer::Worker(2), FrameKind::Welcome),
            (Peer::Client(b"c".to_vec()), FrameKind::Ready)
        ]
    );
    let joined: WorkerJoined = Frame::read(&sent[0].1, usize::MAX).unwrap().body().unwrap();
    assert_eq!(joined, WorkerJoined { index: 2, id: "c".into(), key: String::new() });
    let ready: Ready = Frame::read(&sent[2].1, usize::MAX).unwrap().body().unwrap();
    assert!(ready.joining);
    assert_eq!(ready.checkpoint_dir, "/cluster/checkpoints", "a joiner is told the store too");
    assert!(!router.rescaling());
    router.control(b"c".to_vec(), &cep_core::rescale::Reached { index: 2 }.encode(2), Monotonic::from_ns(2), &mut out);
    let ring = Partitioner::new(&["a".to_string(), "b".to_string(), "c".to_string()], 64);
    let mut moving: Vec<&str> = names.iter().copied().filter(|s| ring.owner(s) == 2).collect();
    moving.sort();
    assert!(moving.len() >= 3, "the test needs a few symbols that move: {moving:?}");
    let sent = out.take();
    let read = |bytes: &[u8]| Frame::read(bytes, usize::MAX).unwrap().kind();
    // The joiner is answered with the next index, the collector told what moves, and the
    // first slice (2 symbols) is handed off by its owners.
    assert_eq!((ready.assigned, ready.workers.len()), (2, 3));
    assert_eq!(
        sent.last().map(|(to, frame)| (to.clone(), read(frame))),
        Some((Peer::Client(b"c".to_vec()), FrameKind::StateTaken))
    );
    let started = &sent.iter().find(|(_, frame)| read(frame) == FrameKind::RescaleStarted).unwrap().1;
    let started: RescaleStarted = Frame::read(started, usize::MAX).unwrap().body().unwrap();
    assert_eq!(started.symbols.iter().map(|(s, _)| s.as_str()).collect::<Vec<_>>(), moving);
    let hand_offs: Vec<(Peer, HandOff)> = sent
        .iter()
        .filter(|(_, frame)| read(frame) == FrameKind::HandOff)
        .map(|(to, frame)| (to.clone(), Frame::read(frame, usize::MAX).unwrap().body().unwrap()))
        .collect();
    let first_slice: Vec<String> = hand_offs.iter().flat_map(|(_, h)| h.symbols.clone()).collect();
    assert_eq!(first_slice, moving[..2]);
    assert!(router.rescaling());
    // A tick of a moving symbol is held; one of a symbol staying put is routed.
    let staying = names.iter().copied().find(|s| ring.owner(s) != 2).unwrap();
    router.data(&ticks(&[moving[0], staying], 100), 3, &mut out);
    router.flush(&mut out);
    let routed_now = routed(&out.take());
    assert_eq!(routed_now.len(), 1);
    assert_eq!(routed_now[0].1, staying);
    // Holding as many ticks as it may (1,000 here), the router reads no more input.
    assert!(router.accepting_input());
    router.data(&ticks(&[moving[0]; 999], 1_000), 3, &mut out);
    assert!(!router.accepting_input(), "back-pressure on the injectors while state moves");
    // A deployment waits for the rescale.
    let deploy = Deploy { origin: "x".into(), text: "@name('all') SELECT * FROM StockTick;".into() };
    router.control(b"ops".to_vec(), &deploy.encode(0), Monotonic::from_ns(4), &mut out);
    let refused: cep_core::control::Refused = Frame::read(&out.take()[0].1, usize::MAX).unwrap().body().unwrap();
    assert!(refused.reason.contains("rescale"), "{}", refused.reason);
    // State from the wrong worker is refused; from the owner it goes to c, then the held tick.
    let mut slices = 0;
    let mut pending = hand_offs;
    while !pending.is_empty() {
        slices += 1;
        for (from, hand_off) in std::mem::take(&mut pending) {
            let Peer::Worker(from) = from else { panic!() };
            let state = SymbolState { part: hand_off.part, from, symbols: vec![], engine: vec![1, 2, 3] };
            let forged = SymbolState { from: from + 1, ..state.clone() };
            router.control(b"x".to_vec(), &forged.encode(from + 1), Monotonic::from_ns(5), &mut out);
            assert_eq!(read(&out.take()[0].1), FrameKind::Refused);
            router.control(b"w".to_vec(), &state.encode(from), Monotonic::from_ns(5), &mut out);
            let sent = out.take();
            assert_eq!(sent[0].0, Peer::Worker(2));
            assert_eq!(Frame::read(&sent[0].1, usize::MAX).unwrap().body::<SymbolState>().unwrap(), state);
            if slices == 1 && hand_off.symbols.contains(&moving[0].to_string()) {
                let released = routed(&sent[1..2]);
                assert_eq!((released[0].0, released[0].1.as_str(), released[0].2), (2, moving[0], 100));
            }
            assert!(sent
                .iter()
                .any(|(to, frame)| *to == Peer::Client(b"w".to_vec()) && read(frame) == FrameKind::StateTaken));
            pending.extend(
                sent.iter().filter(|(_, frame)| read(frame) == FrameKind::HandOff).map(|(to, frame)| {
                    (to.clone(), Frame::read(frame, usize::MAX).unwrap().body::<HandOff>().unwrap())
                }),
            );
            if let Some((_, frame)) = sent.iter().find(|(_, frame)| read(frame) == FrameKind::Rescaled) {
                let record: Rescaled = Frame::read(frame, usize::MAX).unwrap().body().unwrap();
                assert_eq!(record.symbols as usize, moving.len());
            }
        }
    }
    assert_eq!(slices, moving.len().div_ceil(2));
    assert!(!router.rescaling());
    assert!(router.accepting_input(), "the held ticks went to their new owner");
    // One whose data endpoint never answers is dropped after the move time-out.
    router.control(b"e".to_vec(), &register(Role::Worker, "e", 0), Monotonic::from_ns(8), &mut out);
    out.take();
    router.tick(Monotonic::from_ns(8), &mut out).unwrap();
    router.tick(Monotonic::from_ns(8 + 2_000), &mut out).unwrap();
    assert!(out.events.iter().any(|e| matches!(e, Event::Refused { who, .. } if who == "worker e")));
    router.control(b"e".to_vec(), &cep_core::rescale::Reached { index: 3 }.encode(3), Monotonic::from_ns(9), &mut out);
    assert_eq!(read(&out.take()[0].1), FrameKind::Refused, "too late");
    // From now on the moved symbols go to c directly.
    router.data(&ticks(&[moving[1]], 200), 6, &mut out);
    router.flush(&mut out);
    assert_eq!(routed(&out.take())[0].0, 2);
    // The end marker reaches all three, and the report names them.
    router.data(&EndOfStream { stream: 0, sent: 2_000, routed: 0, cut: None }.encode(0), 7, &mut out);
    assert_eq!(out.take().len(), 3, "not to e, which never answered");
    assert_eq!(router.report().workers, ["a", "b", "c", ""], "e never joined");
    // A second worker with a taken id is refused.
    router.control(b"d".to_vec(), &register(Role::Worker, "c", 0), Monotonic::from_ns(8), &mut out);
    assert_eq!(read(&out.take()[0].1), FrameKind::Refused);
}

#[test]
fn leaving_is_refused_for_unknown_or_last_workers_and_drains_a_member() {
    use cep_core::rescale::{HandOff, Leave, Retire, SymbolState};
    let (mut router, mut out) = running(100);
    router.data(&ticks(&["S1", "S2", "S3", "S4"], 0), 1, &mut out);
    router.flush(&mut out);
    out.take();
    fn read(bytes: &[u8]) -> Frame<'_> {
        Frame::read(bytes, usize::MAX).unwrap()
    }
    router.control(b"op".to_vec(), &Leave { worker: "zz".into() }.encode(0), Monotonic::from_ns(2), &mut out);
    let refused: cep_core::control::Refused = read(&out.take()[0].1).body().unwrap();
    assert!(refused.reason.contains("no worker `zz`"), "{}", refused.reason);
    router.control(b"op".to_vec(), &Leave { worker: "a".into() }.encode(0), Monotonic::from_ns(2), &mut out);
    let sent = out.take();
    let hand_offs: Vec<HandOff> = sent
        .iter()
        .filter(|(_, f)| read(f).kind() == FrameKind::HandOff)
        .map(|(_, f)| read(f).body().unwrap())
        .collect();
    assert!(sent
        .iter()
        .any(|(to, f)| *to == Peer::Client(b"op".to_vec()) && read(f).kind() == FrameKind::RescaleAccepted));
    router.control(b"op".to_vec(), &Leave { worker: "b".into() }.encode(0), Monotonic::from_ns(2), &mut out);
    let refused: cep_core::control::Refused = read(&out.take()[0].1).body().unwrap();
    assert!(refused.reason.contains("last one"), "{}", refused.reason);
    let mut pending = hand_offs;
    let mut retired = None;
    while let Some(hand_off) = pending.pop() {
        assert_eq!(hand_off.to, 1);
        let state = SymbolState { part: hand_off.part, from: 0, symbols: vec![], engine: vec![] };
        router.control(b"a".to_vec(), &state.encode(0), Monotonic::from_ns(3), &mut out);
        for (to, frame) in out.take() {
            match read(&frame).kind() {
                FrameKind::HandOff => pending.push(read(&frame).body().unwrap()),
                FrameKind::Retire => retired = Some((to, read(&frame).body::<Retire>().unwrap())),
                _ => {}
            }
        }
    }
    let (to, retire) = retired.expect("a is retired once its symbols moved");
    assert_eq!(to, Peer::Worker(0));
    let routed_to_a = retire.routed.get(&0).copied().unwrap();
    router.data(&ticks(&["S1", "S2", "S3", "S4"], 4), 4, &mut out);
    router.flush(&mut out);
    assert!(routed(&out.take()).iter().all(|tick| tick.0 == 1), "everything goes to b now");
    router.data(&EndOfStream { stream: 0, sent: 8, routed: 0, cut: None }.encode(0), 5, &mut out);
    let markers: Vec<(Peer, EndOfStream)> =
        out.take().into_iter().map(|(to, f)| (to, read(&f).body().unwrap())).collect();
    assert_eq!(markers, [(Peer::Worker(1), EndOfStream { stream: 0, sent: 8, routed: 8 - routed_to_a, cut: None })]);
}

/// A dead worker's symbol first routed to it after its checkpoint is in no snapshot part:
/// its new owner still gets it listed, in the Restore without state that ends the
/// failover (and marks every symbol it takes for the collector), before its replay.
#[test]
fn every_moved_symbol_is_listed_for_its_new_owner_ahead_of_the_replay() {
    use cep_core::failover::{Restore, RestoredPart, Snapshot, StoredPart};
    use cep_core::rescale::MovedSymbol;
    let (mut router, mut out) = running_with(100, 10);
    let ring = Partitioner::new(&["a".to_string(), "b".to_string()], 64);
    let of_a: Vec<String> = (0..64).map(|k| format!("S{k}")).filter(|s| ring.owner(s) == 0).take(2).collect();
    let (old, new) = (of_a[0].as_str(), of_a[1].as_str());
    router.data(&ticks(&[old], 0), 5, &mut out);
    router.tick(Monotonic::from_ns(100), &mut out).unwrap();
    router.tick(Monotonic::from_ns(200), &mut out).unwrap();
    assert!(out.take().iter().any(|(_, f)| Frame::read(f, usize::MAX).unwrap().kind() == FrameKind::Checkpoint));
    let moved = MovedSymbol { symbol: old.into(), stream: 0, next_seq: 1 };
    for (worker, symbols) in [(0, vec![moved.clone()]), (1, vec![])] {
        let snapshot = Snapshot {
            id: 1,
            base: 0,
            from: worker,
            part: 0,
            parts: 1,
            symbols,
            stored: StoredPart { bytes: 3, checksum: 7 },
            processed: [(0, 1 - u64::from(worker))].into(),
            outputs: 0,
            unstored: String::new(),
        };
        let client = if worker == 0 { b"a".to_vec() } else { b"b".to_vec() };
        router.control(client, &snapshot.encode(worker), Monotonic::from_ns(300), &mut out);
    }
    router.control(b"c".to_vec(), &confirming(0, 1), Monotonic::from_ns(300), &mut out);
    router.data(&ticks(&[new], 1), 400, &mut out);
    router.flush(&mut out);
    out.take();
    router.worker_lost(0, "killed", &mut out).unwrap();
    let sent = out.take();
    let to_b: Vec<Frame<'_>> = sent
        .iter()
        .filter(|(to, _)| *to == Peer::Worker(1))
        .map(|(_, frame)| Frame::read(frame, usize::MAX).unwrap())
        .collect();
    let restores: Vec<Restore> =
        to_b.iter().filter(|f| f.kind() == FrameKind::Restore).map(|f| f.body().unwrap()).collect();
    let listed = |restore: &Restore| restore.symbols.iter().map(|m| m.symbol.clone()).collect::<Vec<_>>();
    assert_eq!(restores.len(), 2, "the part with state, then every symbol without");
    // The router names the stored part; the survivor reads it from the store.
    let stored = RestoredPart { checkpoint: 1, part: 0, stored: StoredPart { bytes: 3, checksum: 7 } };
    assert_eq!((listed(&restores[0]), restores[0].state), (vec![old.to_string()], Some(stored)));
    let mut every = vec![old.to_string(), new.to_string()];
    every.sort();
    assert_eq!((listed(&restores[1]), restores[1].state), (every, None));
    // Then the replay: the tick of the new symbol, routed after the checkpoint.
    let last_restore = to_b.iter().rposition(|f| f.kind() == FrameKind::Restore).unwrap();
    let data: Vec<(Peer, Vec<u8>)> = sent.iter().filter(|(to, _)| matches!(to, Peer::Worker(_))).cloned().collect();
    let replayed: Vec<_> = routed(&data).into_iter().filter(|tick| tick.0 == 1).collect();
    assert_eq!(replayed.iter().map(|t| (t.1.as_str(), t.2)).collect::<Vec<_>>(), [(new, 1)]);
    assert!(to_b[last_restore + 1..].iter().any(|f| f.kind() == FrameKind::Ticks));
}

#[test]
fn a_round_with_a_part_not_stored_counts_as_failed_and_a_whole_one_as_completed() {
    use cep_core::failover::{Snapshot, StoredPart};
    let (mut router, mut out) = running_with(100, 10);
    let mut round = |id: u64, at: u64, unstored: &str, out: &mut Recorded| {
        router.tick(Monotonic::from_ns(at), out).unwrap();
        router.tick(Monotonic::from_ns(at + 100), out).unwrap();
        for worker in [0u32, 1] {
            let snapshot = Snapshot {
                id,
                base: 0,
                from: worker,
                part: 0,
                parts: 1,
                symbols: vec![],
                stored: StoredPart { bytes: 5, checksum: 0 },
                processed: Default::default(),
                outputs: 0,
                unstored: if worker == 1 { unstored.to_string() } else { String::new() },
            };
            let client = if worker == 0 { b"a".to_vec() } else { b"b".to_vec() };
            router.control(client, &snapshot.encode(worker), Monotonic::from_ns(at + 150), out);
        }
        out.take();
        router.report().checkpoints
    };
    let first = round(1, 100, "", &mut out);
    assert_eq!((first.completed, first.failed, first.last_completed, first.last_bytes), (1, 0, 1, 10));
    let second = round(2, 1_000, "No space left on device", &mut out);
    assert_eq!((second.completed, second.failed, second.last_completed), (1, 1, 1));
    assert_eq!(second.last_failure, "b's checkpoint 2 was not stored (No space left on device)");
}

#[test]
fn a_forged_snapshot_or_confirmation_is_refused_or_changes_nothing() {
    use cep_core::failover::Snapshot;
    let (mut router, mut out) = running(100);
    let snapshot = Snapshot {
        id: 1,
        base: 0,
        from: 1,
        part: 0,
        parts: 1,
        symbols: vec![],
        stored: Default::default(),
        processed: Default::default(),
        outputs: 0,
        unstored: String::new(),
    };
    // Sent as worker 0, naming worker 1.
    router.control(b"x".to_vec(), &snapshot.encode(0), Monotonic::from_ns(1), &mut out);
    let refused: Refused = Frame::read(&out.take()[0].1, usize::MAX).unwrap().body().unwrap();
    assert!(refused.reason.contains("must come from the worker it names"), "{}", refused.reason);
    // From no member at all, saying its part was not stored: refused, nothing counted.
    let stranger = Snapshot { from: 9, unstored: "a reason".into(), ..snapshot.clone() };
    router.control(b"x".to_vec(), &stranger.encode(9), Monotonic::from_ns(1), &mut out);
    let refused: Refused = Frame::read(&out.take()[0].1, usize::MAX).unwrap().body().unwrap();
    assert_eq!(refused.reason, "a snapshot from no worker");
    assert_eq!(router.report().checkpoints, Default::default());
    // A confirmation of a checkpoint nobody took releases nothing and breaks nothing.
    router.control(b"c".to_vec(), &confirming(9, 42), Monotonic::from_ns(1), &mut out);
    assert_eq!(Frame::read(&out.take()[0].1, usize::MAX).unwrap().kind(), FrameKind::StateTaken);
    router.data(&ticks(&["S1"], 0), 2, &mut out);
    router.flush(&mut out);
    assert_eq!(routed(&out.take()).len(), 1, "routing goes on");
}

#[test]
fn a_joining_workers_endpoint_must_be_one_the_router_can_connect_to() {
    for good in ["tcp://10.0.1.12:5560", "tcp://worker-3.local:5560", "tcp://[::1]:7", "ipc:///tmp/w", "inproc://w"] {
        assert_eq!(check_endpoint(good), Ok(()), "{good}");
    }
    for bad in [
        "",
        "foo",
        "tcp://host",
        "tcp://:5",
        "tcp://not a host!:5000",
        "tcp://tcp://1.2.3.4:5:6",
        "tcp://h:0",
        "udp://h:1",
        "ipc://",
    ] {
        assert!(check_endpoint(bad).is_err(), "{bad}");
    }
}

#[test]
fn a_key_may_ask_only_what_its_role_allows_and_send_only_its_own_streams() {
    use cep_core::identity::{PublicKey, Roles};
    // A distinct key per name: 40 Z85 digits of the name's first letter.
    let peer = |role: Role, name: &str| Identity {
        roles: Roles::of(&[role]),
        name: name.into(),
        key: PublicKey::parse(&name[..1].repeat(40)).unwrap(),
    };
    let (a, b, c, i) =
        (peer(Role::Worker, "a"), peer(Role::Worker, "b"), peer(Role::Collector, "c"), peer(Role::Injector, "i"));
    let ops = peer(Role::Operator, "ops");
    let sender = |peer: &Identity, role: &str| format!("{role} {} {}", peer.name, peer.key);
    let settings = RouterSettings {
        workers: WorkerCount::Exactly(2),
        streams: 1,
        vnodes: 64,
        batch: 8,
        max_frame_bytes: 1 << 20,
        allowed_lateness_ns: None,
        slice_symbols: 2,
        max_held_ticks: 1000,
        move_timeout_ns: 1_000,
        checkpoint_every_ns: 0,
        checkpoints_retained: 1,
        checkpoint_dir: String::new(),
        max_replay_bytes: 1 << 30,
        failure_timeout: std::time::Duration::from_secs(3600),
    };
    let mut router = Router::new(settings, Deployments::start(&cep_query::RulesSource::reference()).unwrap());
    let mut out = Recorded { clock: 777, ..Default::default() };
    let refused = |router: &mut Router, from: &Identity, body: &[u8], out: &mut Recorded| {
        router.control_from(b"x".to_vec(), Some(from), body, Monotonic::from_ns(2), out);
        let answer = out.take().pop().unwrap().1;
        let frame = Frame::read(&answer, usize::MAX).unwrap();
        assert_eq!(frame.kind(), FrameKind::Refused);
        frame.body::<Refused>().unwrap().reason
    };
    let reason = refused(&mut router, &i, &register(Role::Worker, "x", 0), &mut out);
    assert_eq!(reason, "injector `i` may not send Register: its key is not listed under worker/");
    // A worker's own key registers the id it is named after; the shared key any id.
    let reason = refused(&mut router, &a, &register(Role::Worker, "b", 0), &mut out);
    assert!(reason.starts_with("worker `a` may register only as worker `a`, not `b`"), "{reason}");
    let shared = peer(Role::Worker, SHARED_WORKER_KEY);
    let any_id = register(Role::Worker, "any-id", 0);
    assert_eq!(authorize(&shared, &any_id, &router.workers, &router.collector_key), Ok(()));
    for (client, from, body) in [
        (b"a", &a, register(Role::Worker, "a", 0)),
        (b"b", &b, register(Role::Worker, "b", 0)),
        (b"c", &c, register(Role::Collector, "c", 0)),
        (b"i", &i, register(Role::Injector, "i", 1)),
    ] {
        router.control_from(client.to_vec(), Some(from), &body, Monotonic::from_ns(1), &mut out);
    }
    let start = router.start(1_000);
    assert_eq!((start.workers[0].key.as_str(), start.collector_key.as_str()), (a.key.as_str(), c.key.as_str()));
    router.announce(None, &mut out);
    out.take();

    // Worker b cannot speak for worker a, nor ask it to leave; an operator may.
    let reason = refused(&mut router, &b, &DeliveryQuery { worker: 0 }.encode(0), &mut out);
    assert!(reason.contains("is not worker 0"), "{reason}");
    let reason = refused(&mut router, &b, &Leave { worker: "a".into() }.encode(1), &mut out);
    assert!(reason.contains("may ask only itself to leave"), "{reason}");
    let reason = refused(&mut router, &i, &cep_core::rescale::StatusRequest.encode(0), &mut out);
    assert!(reason.contains("not listed under operator/"), "{reason}");
    let reason = refused(&mut router, &b, &Saved::default().encode(1), &mut out);
    assert!(reason.contains("not listed under collector/"), "{reason}");
    router.control_from(
        b"ops".to_vec(),
        Some(&ops),
        &cep_core::rescale::StatusRequest.encode(0),
        Monotonic::from_ns(2),
        &mut out,
    );
    assert_eq!(Frame::read(&out.take()[0].1, usize::MAX).unwrap().kind(), FrameKind::ClusterStatus);
    // Only an injector beats for streams, and only for those its key registered.
    let beat = cep_core::liveness::InjectorHeartbeat { first: 0, sent: vec![1] }.encode(0);
    let reason = refused(&mut router, &b, &beat, &mut out);
    assert!(reason.contains("not listed under injector/"), "{reason}");
    let j = peer(Role::Injector, "j");
    let before = router.report().rejected.get("refused_control").copied().unwrap_or(0);
    router.control_from(b"j".to_vec(), Some(&j), &beat, Monotonic::from_ns(2), &mut out);
    assert!(out.take().is_empty(), "a heartbeat is never answered");
    assert_eq!(router.report().rejected.get("refused_control"), Some(&(before + 1)));
    router.control_from(b"i".to_vec(), Some(&i), &beat, Monotonic::from_ns(2), &mut out);
    assert!(out.take().is_empty());
    assert_eq!(router.report().rejected.get("refused_control"), Some(&(before + 1)), "its own: heard");

    // Stream 0 is i's: a worker's key cannot send its ticks or end it; i can. A tick
    // numbered far beyond the stream is not trusted, nor an end marker behind it.
    let (as_a, as_i) = (sender(&a, "worker"), sender(&i, "injector"));
    router.data_from(&ticks(&["S1"], 0), Some(Sender::new(&as_a)), 3, &mut out);
    router.data_from(
        &EndOfStream { stream: 0, sent: 9, routed: 0, cut: None }.encode(0),
        Some(Sender::new(&as_a)),
        3,
        &mut out,
    );
    router.data_from(&ticks(&["S1", "S2"], 0), Some(Sender::new(&as_i)), 3, &mut out);
    router.data_from(&ticks(&["S3"], 3 + crate::data_path::MAX_SEQ_AHEAD), Some(Sender::new(&as_i)), 3, &mut out);
    router.data_from(
        &EndOfStream { stream: 0, sent: 1, routed: 0, cut: None }.encode(0),
        Some(Sender::new(&as_i)),
        3,
        &mut out,
    );
    assert!(!router.all_ended());
    router.data_from(
        &EndOfStream { stream: 0, sent: 2, routed: 0, cut: None }.encode(0),
        Some(Sender::new(&as_i)),
        3,
        &mut out,
    );
    assert!(router.all_ended(), "{:?}", router.report());
    let report = router.report();
    assert_eq!(report.received.get(&0), Some(&2));
    let causes: Vec<(&str, u64)> = report.rejected.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    assert_eq!(
        causes,
        [
            ("end_behind_stream", 1),
            ("refused_control", 1),
            ("seq_far_ahead", 1),
            ("stream_of_another_key", 2),
            ("unauthorized_control", 7)
        ]
    );
}

#[test]
fn a_worker_that_asks_once_is_pushed_what_the_collector_saves_of_its_frames() {
    use cep_core::delivery::{DeliveryQuery, DeliveryStatus};
    let (mut router, mut out) = running(8);
    let now = Monotonic::from_ns(10);
    // Worker 1 asks from its standing link "w1-link"; worker 0 never asks.
    router.control(b"w1-link".to_vec(), &DeliveryQuery { worker: 1 }.encode(1), now, &mut out);
    let status = |saved, resend| DeliveryStatus { incarnation: 1, endpoint: "inproc://c".into(), saved, resend };
    let sent = out.take();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].0, Peer::Client(b"w1-link".to_vec()));
    assert_eq!(Frame::read(&sent[0].1, usize::MAX).unwrap().body::<DeliveryStatus>().unwrap(), status(0, false));
    // The collector saved: the router drops its own, and pushes worker 1 its position unasked.
    let saved = Saved { positions: vec![(0, 3), (1, 7), (ROUTER_ID, 2)], resend: vec![], confirmed: vec![] };
    router.control(b"c".to_vec(), &saved.encode(0), now, &mut out);
    assert_eq!(out.saved, vec![(2, false)], "the router's own frames");
    let pushed: Vec<(Peer, FrameKind)> =
        out.take().iter().map(|(to, frame)| (to.clone(), Frame::read(frame, usize::MAX).unwrap().kind())).collect();
    assert_eq!(
        pushed,
        [
            (Peer::Client(b"w1-link".to_vec()), FrameKind::Committed),
            (Peer::Client(b"c".to_vec()), FrameKind::StateTaken)
        ]
    );
    // Nothing changed for it: nothing pushed.
    router.control(
        b"c".to_vec(),
        &Saved { positions: vec![(0, 4), (1, 7)], resend: vec![], confirmed: vec![] }.encode(0),
        now,
        &mut out,
    );
    assert!(out.take().iter().all(|(to, _)| *to != Peer::Client(b"w1-link".to_vec())));
    // An empty one (the collector lives, its save still being stored) changes nothing either,
    // not even the router's own position; only a StateTaken answers it.
    router.control(b"c".to_vec(), &Saved::default().encode(0), now, &mut out);
    assert!(out.saved.len() == 1, "no position of the router's own: {:?}", out.saved);
    let answered: Vec<Peer> = out.take().into_iter().map(|(to, _)| to).collect();
    assert_eq!(answered, [Peer::Client(b"c".to_vec())]);
    // Dead, it is told nothing more.
    router.worker_lost(1, "killed", &mut out).unwrap();
    out.take();
    router.control(
        b"c".to_vec(),
        &Saved { positions: vec![(1, 9)], resend: vec![1], confirmed: vec![] }.encode(0),
        now,
        &mut out,
    );
    assert!(out.take().iter().all(|(_, frame)| Frame::read(frame, usize::MAX).unwrap().kind() != FrameKind::Committed));
}

#[test]
fn a_forged_or_unreadable_heartbeat_is_counted_and_never_answered() {
    use cep_core::liveness::Heartbeat;
    let (mut router, mut out) = running(100);
    // Sent as worker 0, naming worker 1; then a heartbeat whose body is not one.
    let forged = Heartbeat { worker: 1, processed: 5, finished: true }.encode(0);
    router.control(b"a".to_vec(), &forged, Monotonic::from_ns(1), &mut out);
    let mut unreadable = forged.clone();
    unreadable.truncate(unreadable.len() - 2);
    router.control(b"a".to_vec(), &unreadable, Monotonic::from_ns(1), &mut out);
    assert!(out.sent.is_empty(), "a heartbeat is never answered: {:?}", out.sent);
    let refusals =
        out.events.iter().filter(|event| matches!(event, Event::Refused { who, .. } if who == "a Heartbeat"));
    assert_eq!(refusals.count(), 2);
    assert_eq!(router.report().rejected.get("refused_control"), Some(&2));
    // A true one, finished: worker 1 is no longer watched, and nothing is answered either.
    router.control(
        b"b".to_vec(),
        &Heartbeat { worker: 1, processed: 5, finished: true }.encode(1),
        Monotonic::from_ns(2),
        &mut out,
    );
    assert!(out.sent.is_empty());
}

#[test]
fn an_injector_silent_for_the_timeout_has_its_stream_ended_where_the_router_has_it_and_is_fenced() {
    use cep_core::liveness::{Abandoned, InjectorHeartbeat};
    let (mut router, mut out) = running(100);
    let timeout = Duration::from_millis(100);
    router.settings.failure_timeout = timeout;
    if let Phase::Running(run) = &mut router.phase {
        run.heartbeats = Heartbeats::new(2, 1, timeout);
    }
    let ms = |ms: u64| Monotonic::from_ns(ms * 1_000_000);
    let beat = |sent: u64| InjectorHeartbeat { first: 0, sent: vec![sent] }.encode(0);
    router.tick(ms(0), &mut out).unwrap();
    router.control(b"i-link".to_vec(), &beat(0), ms(10), &mut out);
    router.data(&ticks(&["S1", "S2", "S3"], 0), 100, &mut out);
    // Beats naming a stream it does not have, or none: counted, never answered.
    for forged in [InjectorHeartbeat { first: 1, sent: vec![0] }, InjectorHeartbeat { first: 0, sent: vec![] }] {
        router.control(b"i-link".to_vec(), &forged.encode(0), ms(20), &mut out);
    }
    assert_eq!(router.report().rejected.get("refused_control"), Some(&2));
    // The router looks every 10 ms (a longer gap in its looking would be its own, not counted).
    for at in (10..=110).step_by(10) {
        router.tick(ms(at), &mut out).unwrap();
    }
    assert!(router.report().lost_streams.is_empty(), "100 ms of silence is within the time-out");
    out.take();
    router.tick(ms(111), &mut out).unwrap();
    // Every worker gets the stream's end behind its ticks, counting what arrived.
    let ends: Vec<(Peer, EndOfStream)> = out
        .take()
        .into_iter()
        .filter_map(|(to, bytes)| {
            let frame = Frame::read(&bytes, usize::MAX).unwrap();
            (frame.kind() == FrameKind::EndOfStream).then(|| (to, frame.body::<EndOfStream>().unwrap()))
        })
        .collect();
    assert_eq!(ends.len(), 2, "{ends:?}");
    assert!(ends.iter().all(|(_, end)| end.stream == 0 && end.sent == 3), "{ends:?}");
    assert_eq!(ends.iter().map(|(_, end)| end.routed).sum::<u64>(), 3);
    assert!(router.all_ended());
    let report = router.report();
    let reason = &report.lost_streams[&0].reason;
    assert_eq!(report.lost_streams[&0].sent_at_least, 3, "its heartbeat said 0, the router had 3");
    assert!(reason.starts_with("the injector of stream 0 was taken for dead: nothing heard from it for"), "{reason}");
    assert!(out.events.iter().any(|event| matches!(event, Event::StreamLost { stream: 0, received: 3, .. })));
    // Woken, it is fenced: its heartbeat answered so, its ticks and marker refused.
    router.control(b"i-link".to_vec(), &beat(5), ms(300), &mut out);
    let answer = out.take().pop().unwrap();
    assert_eq!(answer.0, Peer::Client(b"i-link".to_vec()));
    let fenced: Fenced = Frame::read(&answer.1, usize::MAX).unwrap().body().unwrap();
    assert_eq!(&fenced.reason, reason);
    router.data(&ticks(&["S4"], 3), 300, &mut out);
    router.data(&EndOfStream { stream: 0, sent: 5, routed: 0, cut: None }.encode(0), 300, &mut out);
    assert!(out.take().is_empty());
    let rejected = router.report().rejected;
    assert_eq!((rejected.get("fenced"), rejected.get("unknown_stream")), (Some(&3), None), "{rejected:?}");
    // Given up, the router tells every standing link it knows why: the injector's, a worker's.
    router.control(b"a-link".to_vec(), &DeliveryQuery { worker: 0 }.encode(0), ms(310), &mut out);
    out.take();
    router.abandon("the collector is lost", &mut out);
    let told: Vec<Peer> = out.take().into_iter().map(|(to, _)| to).collect();
    assert_eq!(told, [Peer::Client(b"a-link".to_vec()), Peer::Client(b"i-link".to_vec())]);
    let notice = Abandoned { reason: "the collector is lost".into() }.encode(ROUTER_ID);
    router.abandon("the collector is lost", &mut out);
    assert_eq!(out.sent.len(), 2);
    assert!(out.sent.iter().all(|(_, bytes)| *bytes == notice));
}

#[test]
fn a_worker_and_an_injector_silent_at_the_same_look_fail_the_worker_over_first() {
    use cep_core::liveness::InjectorHeartbeat;
    // Once a stream has ended, a dead worker's state can no longer be restored: the worker goes
    // first.
    let (mut router, mut out) = running(100);
    let timeout = Duration::from_millis(100);
    if let Phase::Running(run) = &mut router.phase {
        run.heartbeats = Heartbeats::new(2, 1, timeout);
    }
    let ms = |ms: u64| Monotonic::from_ns(ms * 1_000_000);
    for at in (0..=150).step_by(10) {
        if at <= 20 {
            let beat = InjectorHeartbeat { first: 0, sent: vec![0] }.encode(0);
            router.control(b"i-link".to_vec(), &beat, ms(at), &mut out);
            router.control(
                b"a".to_vec(),
                &Heartbeat { worker: 0, processed: 0, finished: false }.encode(0),
                ms(at),
                &mut out,
            );
        }
        router.control(
            b"b".to_vec(),
            &Heartbeat { worker: 1, processed: 0, finished: false }.encode(1),
            ms(at),
            &mut out,
        );
        router.tick(ms(at), &mut out).unwrap();
    }
    let order: Vec<&str> = out
        .events
        .iter()
        .filter_map(|event| match event {
            Event::WorkerFailed { .. } => Some("worker"),
            Event::StreamLost { .. } => Some("stream"),
            _ => None,
        })
        .collect();
    assert_eq!(order, ["worker", "stream"]);
}

#[test]
fn a_cut_reason_is_kept_bounded_whatever_length_a_marker_claims() {
    let (mut router, mut out) = running(100);
    // A forged marker with a reason of 100 kB (and a multi-byte char across the bound).
    let reason = format!("{}é{}", "x".repeat(cep_core::report::MAX_REASON_BYTES - 4), "y".repeat(100_000));
    let marker = EndOfStream { stream: 0, sent: 0, routed: 0, cut: Some(reason) };
    router.data(&marker.encode(0), 1, &mut out);
    assert!(router.all_ended());
    let kept = &router.report().cut_streams[&0];
    assert!(kept.len() <= cep_core::report::MAX_REASON_BYTES && kept.ends_with("..."), "{} bytes", kept.len());
    // The markers the workers get carry none of it.
    let forwarded: Vec<EndOfStream> = out
        .take()
        .into_iter()
        .filter_map(|(_, bytes)| Frame::read(&bytes, usize::MAX).unwrap().body::<EndOfStream>().ok())
        .collect();
    assert_eq!(forwarded.len(), 2);
    assert!(forwarded.iter().all(|marker| marker.cut.is_none()));
}
