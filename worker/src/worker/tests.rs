//! Tests of `worker`.

use super::*;
use cep_core::failover::{RestoredPart, Snapshot};
use cep_core::frame::Frame;
use cep_core::outbox::Recorded;
use cep_core::store::{Done, MemoryStore};
use cep_core::tick::OutputRecord;
use cep_core::wire::TickBatchWriter;
use std::collections::VecDeque;

const PERC: &str = "@name('perc') SELECT symbol, price, perc(price) AS value FROM StockTick \
                    PARTITION BY symbol RETAIN 2 EVENTS HAVING perc(price) > 2.0 OR perc(price) < -2.0;";

fn ready(streams: u32) -> Ready {
    Ready {
        assigned: 1,
        workers: vec![],
        collector: "c".into(),
        streams,
        start_ns: 0,
        warmup_ns: 0,
        collector_clock: String::new(),
        rules: RulesText { epoch: 0, origin: "test".into(), text: PERC.into() },
        allowed_lateness_ns: None,
        joining: false,
        collector_incarnation: 1,
        collector_key: String::new(),
        failure_timeout_ns: 2_000_000_000,
        checkpoint_dir: String::new(),
    }
}

/// A tick batch from the router (ROUTER_ID) sent at `t_sent`: (symbol, price, stream, seq).
fn ticks(t_sent: u64, ticks: &[(&str, f64, u32, u64)]) -> Vec<u8> {
    let mut writer = TickBatchWriter::new(ROUTER_ID);
    for &(symbol, price, stream, seq) in ticks {
        writer.push(symbol.as_bytes(), price, 1_000 + seq, 1_000 + seq, stream, seq, 2_000 + seq);
    }
    writer.seal(t_sent).to_vec()
}

fn kinds(sent: &[(Peer, Vec<u8>)]) -> Vec<FrameKind> {
    sent.iter()
        .map(|(to, frame)| {
            assert_eq!(*to, Peer::Collector);
            Frame::read(frame, usize::MAX).unwrap().kind()
        })
        .collect()
}

fn outputs(frame: &[u8]) -> (Vec<OutputRecord>, bool) {
    let mut records = Vec::new();
    let closed_by_end = Frame::read(frame, usize::MAX).unwrap().outputs(&mut records).unwrap().closed_by_end;
    (records, closed_by_end)
}

fn started(streams: u32) -> (Worker, Recorded) {
    let mut out = Recorded { clock: 7_000, ..Default::default() };
    let worker =
        Worker::start("w".into(), &ready(streams), 4096, 1 << 20, Box::new(MemoryStore::default()), &mut out).unwrap();
    assert_eq!(kinds(&out.take()), vec![FrameKind::Rules]);
    (worker, out)
}

#[test]
fn one_output_frame_per_input_batch_with_the_batch_stamps() {
    let (mut worker, mut out) = started(1);
    worker.handle(&ticks(5_000, &[("A", 100.0, 0, 0), ("B", 50.0, 0, 1), ("A", 103.0, 0, 2)]), 6_000, &mut out);
    let sent = out.take();
    assert_eq!(kinds(&sent), vec![FrameKind::Outputs]);
    let (records, final_) = outputs(&sent[0].1);
    assert!(!final_);
    assert_eq!(records.len(), 1, "A rose 3 %: one perc output");
    let output = &records[0];
    assert_eq!((output.rule, output.seq, output.injector, output.price), (0, 2, 0, 103.0));
    assert_eq!(output.stamps.t_router_out, 5_000);
    assert_eq!(output.stamps.t_worker_in, 6_000);
    assert_eq!(output.stamps.t_engine_out, 7_000, "engine exit: the outbox's clock at send");
    assert_eq!((output.stamps.t_inject, output.stamps.t_router_in), (1_002, 2_002));
    // A batch without outputs sends nothing.
    worker.handle(&ticks(5_001, &[("B", 50.1, 0, 3)]), 6_001, &mut out);
    assert!(out.take().is_empty());
    assert_eq!(worker.report().processed, 4);
}

#[test]
fn duplicates_order_and_bad_input_are_counted_not_processed() {
    let (mut worker, mut out) = started(1);
    worker.handle(&ticks(1, &[("A", 100.0, 0, 5), ("A", 100.0, 0, 5), ("A", 101.0, 0, 3)]), 1, &mut out);
    worker.handle(&ticks(1, &[("A", 100.0, 7, 0), ("A", -1.0, 0, 9)]), 1, &mut out);
    worker.handle(b"garbage", 1, &mut out);
    worker.handle(&EndOfStream { stream: 3, sent: 1, routed: 1, cut: None }.encode(ROUTER_ID), 1, &mut out);
    let report = worker.report();
    assert_eq!((report.processed, report.duplicates, report.out_of_order), (1, 1, 1));
    let rejected: Vec<(&str, u64)> = report.rejected.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    assert_eq!(rejected, vec![("malformed", 1), ("non_positive_price", 1), ("unknown_stream", 2)]);
}

#[test]
fn forged_rescale_markers_are_counted_and_change_nothing() {
    use cep_core::rescale::{StreamsOpened, Welcome};
    let (mut worker, mut out) = started(1);
    // A Welcome for another worker, streams opened out of order or beyond the limit.
    worker.handle(&Welcome { index: 7 }.encode(ROUTER_ID), 1, &mut out);
    worker.handle(&StreamsOpened { first: 5, count: 1 }.encode(ROUTER_ID), 1, &mut out);
    worker.handle(&StreamsOpened { first: 1, count: u32::MAX }.encode(ROUTER_ID), 1, &mut out);
    assert!(out.take().is_empty(), "nothing answered to the router");
    let report = worker.report();
    let rejected: Vec<(&str, u64)> = report.rejected.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    assert_eq!(rejected, vec![("unexpected_kind", 1), ("unknown_stream", 2)]);
    assert_eq!(report.streams.len(), 1);
    // The right ones are taken: streams 1 and 2 open, the Welcome is answered.
    worker.handle(&StreamsOpened { first: 1, count: 2 }.encode(ROUTER_ID), 1, &mut out);
    worker.handle(&Welcome { index: 1 }.encode(ROUTER_ID), 1, &mut out);
    assert_eq!(worker.report().streams.len(), 3);
    assert_eq!(out.take().iter().map(|(to, _)| to.clone()).collect::<Vec<_>>(), [Peer::Router]);
}

#[test]
fn frames_not_from_the_router_are_counted_and_change_nothing() {
    use cep_core::failover::{Checkpoint, Restore};
    let (mut worker, mut out) = started(1);
    worker.handle(&ticks(0, &[("AAA", 10.0, 0, 0)]), 1, &mut out);
    out.take();
    // Senders 3 and 0 (a worker's index) are not the router: no export, no import.
    worker.handle(&Checkpoint { id: 1, base: 0, retain_from: 0 }.encode(3), 2, &mut out);
    worker.handle(&Restore { from: 2, symbols: vec![], state: None }.encode(3), 2, &mut out);
    worker.handle(&Checkpoint { id: 1, base: 0, retain_from: 0 }.encode(0), 2, &mut out);
    // An injector pointed at this worker's port: its ticks (sender = its stream) and its end
    // are not processed, so the run's accounts never hold ticks the router did not see.
    let mut writer = TickBatchWriter::new(0);
    writer.push(b"AAA", 11.0, 1_001, 1_001, 0, 1, 2_001);
    worker.handle(writer.seal(2), 2, &mut out);
    worker.handle(&EndOfStream { stream: 0, sent: 2, routed: 2, cut: None }.encode(0), 2, &mut out);
    assert!(out.take().is_empty(), "nothing sent");
    assert_eq!(worker.report().rejected.get("not_from_router"), Some(&5));
    assert_eq!(worker.processed(), 1);
    assert!(!worker.done(), "the stream is still open");
    // From the router, a checkpoint's mark goes to the collector at once, its snapshot to
    // the router once copied (here, when the worker idles).
    worker.handle(&Checkpoint { id: 1, base: 0, retain_from: 0 }.encode(ROUTER_ID), 3, &mut out);
    worker.idle(&mut out);
    let to: Vec<Peer> = out.take().into_iter().map(|(to, _)| to).collect();
    assert_eq!(to, [Peer::Collector, Peer::Router]);
}

/// Checkpoint `id` over `base` at `worker`: what it told the router of its snapshot's parts.
fn snapshot_parts(worker: &mut Worker, id: u64, base: u64, out: &mut Recorded) -> Vec<Snapshot> {
    worker.handle(&Checkpoint { id, base, retain_from: 0 }.encode(ROUTER_ID), 1, out);
    worker.idle(out);
    parts_sent(out)
}

/// Ticks of symbols S0..S99 (a stream's seq from `first`), 1 ms apart, prices wandering.
fn many_ticks(first: u64, count: u64) -> Vec<u8> {
    ticks_apart(first, count, 1_000_000)
}

/// Ticks of symbols S0..S99 from stream seq `first`, `apart_ns` apart, prices wandering.
fn ticks_apart(first: u64, count: u64, apart_ns: u64) -> Vec<u8> {
    let mut writer = TickBatchWriter::new(ROUTER_ID);
    for seq in first..first + count {
        let (symbol, price) = (format!("S{}", seq % 100), 100.0 + ((seq * 37) % 11) as f64);
        writer.push(symbol.as_bytes(), price, seq * apart_ns, seq * apart_ns, 0, seq, 0);
    }
    writer.seal(1).to_vec()
}

/// A worker running perc and a 10-second volatility window, its checkpoints in `store`.
fn with_window(store: &MemoryStore) -> Worker {
    Worker::start("w".into(), &window_ready(), 4096, 1 << 20, Box::new(store.clone()), &mut Recorded::default())
        .unwrap()
}

/// The run's start of [`with_window`].
fn window_ready() -> Ready {
    let text = format!(
        "{PERC} @name('vol') SELECT symbol, price, stddev(price) AS value FROM StockTick PARTITION BY symbol \
         RETAIN 10 SECONDS;"
    );
    Ready { rules: RulesText { epoch: 0, origin: "t".into(), text }, ..ready(1) }
}

/// The Restore of `part` (its symbols, its place in the store).
fn restore_of(part: &Snapshot) -> Restore {
    let state = RestoredPart { checkpoint: part.id, part: part.part, stored: part.stored };
    Restore { from: part.from, symbols: part.symbols.clone(), state: Some(state) }
}

/// A barrier naming the worker's last snapshot gets the changes since, any other its
/// whole state; a survivor restoring the whole snapshot then the changes, part by part,
/// goes on exactly as the worker would have.
#[test]
fn checkpoints_send_changes_over_the_named_base_and_restore_exactly() {
    let store = MemoryStore::default();
    let (mut worker, mut out) = (with_window(&store), Recorded::default());
    worker.handle(&many_ticks(0, 3_000), 2, &mut out);
    let whole = snapshot_parts(&mut worker, 1, 0, &mut out);
    assert_eq!(whole.len(), 2, "100 symbols: two parts");
    assert!(whole.iter().all(|part| part.base == 0));
    worker.handle(&many_ticks(3_000, 300), 2, &mut out);
    let changes = snapshot_parts(&mut worker, 2, 1, &mut out);
    assert!(changes.iter().all(|part| part.base == 1));
    let bytes = |parts: &[Snapshot]| parts.iter().map(|part| part.stored.bytes).sum::<u64>();
    assert!(bytes(&changes) * 3 < bytes(&whole), "changes {} bytes, whole {}", bytes(&changes), bytes(&whole));
    // The router does not hold checkpoint 2: it names 1 again, and gets the whole state.
    let mut other = with_window(&MemoryStore::default());
    other.handle(&many_ticks(0, 3_000), 2, &mut out);
    snapshot_parts(&mut other, 1, 0, &mut out);
    other.handle(&many_ticks(3_000, 300), 2, &mut out);
    snapshot_parts(&mut other, 2, 1, &mut out);
    assert!(snapshot_parts(&mut other, 3, 1, &mut out).iter().all(|part| part.base == 0));

    // A survivor takes every symbol from the chain.
    let mut survivor = with_window(&store);
    for part in whole.iter().chain(&changes) {
        survivor.handle(&restore_of(part).encode(ROUTER_ID), 3, &mut out);
    }
    out.take();
    assert!(survivor.report().rejected.is_empty(), "{:?}", survivor.report().rejected);
    let next = many_ticks(3_300, 2_000);
    worker.handle(&next, 4, &mut out);
    let expected: Vec<Vec<u8>> = out.take().into_iter().map(|(_, frame)| frame).collect();
    survivor.handle(&next, 4, &mut out);
    let got: Vec<Vec<u8>> = out.take().into_iter().map(|(_, frame)| frame).collect();
    assert!(!expected.is_empty());
    assert_eq!(got, expected);
    assert_eq!((survivor.report().duplicates, survivor.report().out_of_order), (0, 0));
}

/// A snapshot is copied a symbol at a time while batches go on: a symbol's state goes in
/// before its next tick changes it, some in the background after a batch, the rest when the
/// worker idles. What it stores is the state at the barrier, exactly: survivors restored from it
/// and from a snapshot copied all at once go on alike, as the worker itself would have.
#[test]
fn a_snapshot_copied_while_ticks_go_on_holds_the_state_at_its_barrier() {
    let store = MemoryStore::default();
    let mut out = Recorded::default();
    // 16 KB of window per symbol: the background's first step takes only a few.
    let fill = |worker: &mut Worker, out: &mut Recorded| {
        for batch in 0..10 {
            worker.handle(&dense_ticks(batch * 10_000, 10_000), 1, out);
        }
    };
    // At once: the barrier, then idle before any tick.
    let mut still = with_window(&store);
    fill(&mut still, &mut out);
    let at_once = snapshot_parts(&mut still, 1, 0, &mut out);
    // Copy on write: ticks of every symbol right behind the barrier, before it idles.
    let moving_store = MemoryStore::default();
    let mut moving = with_window(&moving_store);
    fill(&mut moving, &mut out);
    out.take();
    moving.handle(&Checkpoint { id: 1, base: 0, retain_from: 0 }.encode(ROUTER_ID), 2, &mut out);
    moving.handle(&dense_ticks(100_000, 70), 3, &mut out);
    let mid: Vec<Snapshot> = parts_sent(&mut out);
    assert!(!mid.is_empty() && mid.len() < at_once.len(), "some parts went after the batch, not all: {}", mid.len());
    moving.handle(&dense_ticks(100_070, 400), 3, &mut out);
    moving.idle(&mut out);
    let copied: Vec<Snapshot> = mid.into_iter().chain(parts_sent(&mut out)).collect();
    assert_eq!(copied.len(), at_once.len());
    assert_eq!(copied.iter().map(|part| part.part).collect::<Vec<_>>(), (0..at_once.len() as u32).collect::<Vec<_>>());
    let listed = |parts: &[Snapshot]| {
        let mut names: Vec<(String, u64)> =
            parts.iter().flat_map(|part| part.symbols.iter().map(|m| (m.symbol.clone(), m.next_seq))).collect();
        names.sort();
        names
    };
    assert_eq!(listed(&copied), listed(&at_once), "every symbol once, with its order check at the barrier");
    // Survivors of each go on alike, from the barrier.
    let next = dense_ticks(100_000, 2_000);
    let mut outputs = Vec::new();
    for (parts, store) in [(&at_once, &store), (&copied, &moving_store)] {
        let mut survivor = with_window(store);
        for part in parts.iter() {
            survivor.handle(&restore_of(part).encode(ROUTER_ID), 5, &mut out);
        }
        out.take();
        assert!(survivor.report().rejected.is_empty(), "{:?}", survivor.report().rejected);
        survivor.handle(&next, 6, &mut out);
        outputs.push(out.take().into_iter().map(|(_, frame)| frame).collect::<Vec<_>>());
    }
    still.handle(&next, 6, &mut out);
    let reference: Vec<Vec<u8>> = out.take().into_iter().map(|(_, frame)| frame).collect();
    assert!(!reference.is_empty());
    assert_eq!(outputs[0], reference);
    assert_eq!(outputs[1], reference);
}

/// Ticks of symbols S0..S99 from stream seq `first`, 10 us apart: a second of them fills
/// each symbol's 10-second window with a thousand prices (16 KB of state).
fn dense_ticks(first: u64, count: u64) -> Vec<u8> {
    ticks_apart(first, count, 10_000)
}

/// A worker whose 100 symbols hold 16 KB of window each, just past checkpoint 1's barrier;
/// `one_tick(now)` hands it a batch of one tick of S0 at `now` and returns the parts sent.
fn paced_snapshot() -> (Worker, impl FnMut(&mut Worker, u64) -> Vec<Snapshot>) {
    let (mut worker, mut out) = (with_window(&MemoryStore::default()), Recorded::default());
    for batch in 0..10 {
        worker.handle(&dense_ticks(batch * 10_000, 10_000), 1, &mut out);
    }
    worker.handle(&Checkpoint { id: 1, base: 0, retain_from: 0 }.encode(ROUTER_ID), 2, &mut out);
    out.take();
    let mut seq = 100_000;
    let one_tick = move |worker: &mut Worker, now: u64| {
        let mut writer = TickBatchWriter::new(ROUTER_ID);
        writer.push(b"S0", 100.0, seq * 10_000, seq * 10_000, 0, seq, 0);
        seq += 100;
        worker.handle(writer.seal(1), now, &mut out);
        parts_sent(&mut out)
    };
    (worker, one_tick)
}

/// The background copies after each batch keep to their pace: a step copies what the time
/// since the last one earns at BACKGROUND_BYTES_PER_SEC, at least STEP_BYTES (batches closer
/// together wait) and at most MAX_STEP_BYTES. Batches that come all at once (the same clock)
/// leave the rest to later ones: a snapshot's whole state never lands between two batches.
#[test]
fn background_copies_keep_to_their_pace() {
    let (mut worker, mut one_tick) = paced_snapshot();
    // The first step: S0 (before its tick) and 64 KB of others, far from a part's 64 symbols.
    for _ in 0..100 {
        assert!(one_tick(&mut worker, 3).is_empty(), "batches at one instant took one step, not the snapshot");
    }
    let (mut parts, mut now, mut batches) = (Vec::new(), 3, 0);
    while parts.len() < 2 {
        // 50 us earns 53 KB, less than a step: every other batch steps, with about 107 KB.
        now += 50_000;
        batches += 1;
        parts.extend(one_tick(&mut worker, now));
        assert!(batches < 200, "the snapshot is taken in the background, batch by batch");
    }
    // 99 symbols of 16 KB, about 7 a step, a step every other batch: about 30 batches.
    assert!((24..=40).contains(&batches), "{batches} batches");
    assert_eq!(parts.iter().map(|part| part.symbols.len()).sum::<usize>(), 100);
}

/// Batches far apart earn large steps (up to MAX_STEP_BYTES: the 1.6 MB here at the second
/// batch); a clock that goes back stops nothing for longer than it takes to earn a step again.
#[test]
fn background_copies_go_on_after_a_pause_and_after_the_clock_goes_back() {
    let (mut worker, mut one_tick) = paced_snapshot();
    assert!(one_tick(&mut worker, 3).is_empty());
    assert_eq!(one_tick(&mut worker, 3 + 10_000_000).len(), 2, "10 ms earns the rest at once");

    let (mut worker, mut one_tick) = paced_snapshot();
    assert!(one_tick(&mut worker, 1_000_000_000).is_empty());
    // The clock steps back by most of a second: the pace counts from there.
    assert!(one_tick(&mut worker, 5).is_empty());
    assert_eq!(one_tick(&mut worker, 5 + 10_000_000).len(), 2);
}

/// A frame other than ticks and barriers finishes the snapshot under way before it is
/// handled: a rule switch's announcement (it changes every symbol's state) comes after every
/// part.
#[test]
fn any_frame_but_ticks_and_barriers_finishes_the_snapshot_first() {
    let mut out = Recorded::default();
    let mut worker = with_window(&MemoryStore::default());
    worker.handle(&many_ticks(0, 3_000), 1, &mut out);
    worker.handle(&Checkpoint { id: 1, base: 0, retain_from: 0 }.encode(ROUTER_ID), 2, &mut out);
    out.take();
    let rules = RulesText { epoch: 1, origin: "next".into(), text: PERC.into() };
    worker.handle(&rules.encode(ROUTER_ID), 3, &mut out);
    let kinds: Vec<FrameKind> =
        out.take().iter().map(|(_, frame)| Frame::read(frame, usize::MAX).unwrap().kind()).collect();
    let switched = kinds.iter().position(|kind| *kind == FrameKind::Rules).expect("the new rules announced");
    let parts: Vec<usize> = (0..kinds.len()).filter(|&at| kinds[at] == FrameKind::Snapshot).collect();
    assert_eq!(parts.len(), 2, "100 symbols, both parts: {kinds:?}");
    assert!(parts.iter().all(|&at| at < switched), "{kinds:?}");
}

/// A barrier that comes while the last snapshot is still being copied (its round given up at
/// the router, and a new one begun) drops that copy unfinished, and the new snapshot is
/// whole whatever base the barrier names: nothing builds on the dropped one. No batch waits
/// for the rest of the old copy.
#[test]
fn a_barrier_during_the_copy_drops_it_and_the_next_snapshot_is_whole() {
    let (mut worker, mut one_tick) = paced_snapshot();
    assert!(one_tick(&mut worker, 3).is_empty(), "the first step leaves most symbols untaken");
    let mut out = Recorded::default();
    worker.handle(&Checkpoint { id: 2, base: 1, retain_from: 0 }.encode(ROUTER_ID), 4, &mut out);
    assert!(parts_sent(&mut out).is_empty(), "no part of checkpoint 1 was finished at the barrier");
    let mut parts = Vec::new();
    let mut now = 4;
    while parts.len() < 2 {
        now += 50_000;
        parts.extend(one_tick(&mut worker, now));
        assert!(now < 200 * 50_000, "checkpoint 2 is taken in the background");
    }
    assert!(parts.iter().all(|part| part.id == 2 && part.base == 0 && part.unstored.is_empty()), "{parts:?}");
    assert_eq!(parts.iter().map(|part| part.symbols.len()).sum::<usize>(), 100);
}

/// The snapshot parts sent to the router so far (other frames are dropped).
fn parts_sent(out: &mut Recorded) -> Vec<Snapshot> {
    out.take()
        .into_iter()
        .filter(|(to, _)| *to == Peer::Router)
        .map(|(_, frame)| Frame::read(&frame, usize::MAX).unwrap().body::<Snapshot>().unwrap())
        .collect()
}

/// The router holds no state: every part's engine state is in the store under its
/// checkpoint, worker and part, with the size and checksum the router was told; a barrier's
/// `retain_from` removes the parts of older checkpoints.
#[test]
fn snapshot_parts_go_to_the_store_and_older_checkpoints_leave_it() {
    let store = MemoryStore::default();
    let (mut worker, mut out) = (with_window(&store), Recorded::default());
    worker.handle(&many_ticks(0, 3_000), 2, &mut out);
    let parts = snapshot_parts(&mut worker, 1, 0, &mut out);
    let mut read = Vec::new();
    for part in &parts {
        let key = PartKey { checkpoint: 1, worker: part.from, part: part.part };
        let expected = Expected { bytes: part.stored.bytes, checksum: part.stored.checksum };
        store.get(key, expected, &mut read).unwrap();
        assert!(read.len() > 1_000, "a part of 50 symbols with windows");
    }
    snapshot_parts(&mut worker, 2, 1, &mut out);
    assert_eq!(store.checkpoints(), [1, 2]);
    worker.handle(&Checkpoint { id: 3, base: 0, retain_from: 2 }.encode(ROUTER_ID), 1, &mut out);
    assert_eq!(store.checkpoints(), [2], "below 2 went at the barrier");
    worker.idle(&mut out);
    assert_eq!(store.checkpoints(), [2, 3], "below 2 went; 3 was written");
}

/// A part the store does not hold as the router said (missing, or changed) restores nothing:
/// the Restore is rejected and counted, the worker goes on.
#[test]
fn a_restore_whose_part_is_missing_or_altered_is_rejected_and_counted() {
    let store = MemoryStore::default();
    let (mut worker, mut out) = (with_window(&store), Recorded::default());
    worker.handle(&many_ticks(0, 500), 2, &mut out);
    let parts = snapshot_parts(&mut worker, 1, 0, &mut out);
    let mut survivor = with_window(&store);
    let mut altered = restore_of(&parts[0]);
    altered.state.as_mut().unwrap().stored.checksum ^= 1;
    survivor.handle(&altered.encode(ROUTER_ID), 3, &mut out);
    let mut missing = restore_of(&parts[0]);
    missing.state.as_mut().unwrap().checkpoint = 9;
    survivor.handle(&missing.encode(ROUTER_ID), 3, &mut out);
    assert_eq!(survivor.report().rejected.get("bad_state"), Some(&2));
    assert_eq!(survivor.engine.symbol_names().count(), 0, "nothing restored");
    // The failover's last Restore: the mark to the collector names them as lost.
    out.take();
    survivor.handle(
        &Restore { from: parts[0].from, symbols: parts[0].symbols.clone(), state: None }.encode(ROUTER_ID),
        3,
        &mut out,
    );
    let sent = out.take();
    let mark: Restored = Frame::read(&sent[0].1, usize::MAX).unwrap().body().unwrap();
    let mut expected: Vec<String> = parts[0].symbols.iter().map(|moved| moved.symbol.clone()).collect();
    expected.sort();
    assert_eq!(mark.lost, expected);
    // A later failover of the same worker starts with nothing lost.
    survivor.handle(&restore_of(&parts[0]).encode(ROUTER_ID), 3, &mut out);
    assert_eq!(survivor.engine.symbol_names().count(), parts[0].symbols.len());
}

/// A store that refuses every write.
#[derive(Default)]
struct FullDisk {
    done: VecDeque<Done>,
}

impl CheckpointStore for FullDisk {
    fn put(&mut self, key: PartKey, buffer: Vec<u8>) {
        let error =
            format!("cannot write checkpoint part chk-{}/{}: No space left on device", key.checkpoint, key.part);
        self.done.push_back(Done::Stored { key, result: Err(error), buffer });
    }
    fn remove_below(&mut self, _: u64) {
        self.done.push_back(Done::Removed(Ok(())));
    }
    fn poll(&mut self) -> Option<Done> {
        self.done.pop_front()
    }
    fn get(&self, _: PartKey, _: Expected, _: &mut Vec<u8>) -> Result<(), String> {
        Err("empty".into())
    }
}

/// A part the store refuses ends the snapshot: the router is told why, the run goes on, and
/// the next barrier over it gets the whole state.
#[test]
fn a_part_the_store_refuses_ends_the_snapshot_with_the_reason() {
    let mut out = Recorded::default();
    let mut worker =
        Worker::start("w".into(), &window_ready(), 4096, 1 << 20, Box::new(FullDisk::default()), &mut out).unwrap();
    worker.handle(&many_ticks(0, 3_000), 2, &mut out);
    let parts = snapshot_parts(&mut worker, 1, 0, &mut out);
    assert_eq!(parts.len(), 1, "the first part ends it");
    assert_eq!(parts[0].unstored, "cannot write checkpoint part chk-1/0: No space left on device");
    assert!(out
        .events
        .iter()
        .any(|event| matches!(event, Event::CheckpointTrouble { reason } if reason.contains("No space"))));
    assert!(snapshot_parts(&mut worker, 2, 1, &mut out).iter().all(|part| part.base == 0), "nothing to build on");
    assert_eq!(worker.processed(), 3_000);
}

#[test]
fn the_end_of_every_stream_closes_windows_then_reports() {
    let mut out = Recorded::default();
    let rules = RulesText {
        epoch: 0,
        origin: "t".into(),
        text: "@name('avg') SELECT symbol, price, avg(price) AS value FROM StockTick PARTITION BY symbol \
               RETAIN TUMBLING 10 SECONDS;"
            .into(),
    };
    let ready = Ready { rules, ..ready(2) };
    let mut worker =
        Worker::start("w".into(), &ready, 4096, 1 << 20, Box::new(MemoryStore::default()), &mut out).unwrap();
    out.take();
    worker.handle(&ticks(1, &[("A", 100.0, 1, 0), ("A", 102.0, 1, 1)]), 1, &mut out);
    assert!(out.take().is_empty(), "the window is still open");
    worker.handle(&EndOfStream { stream: 1, sent: 2, routed: 2, cut: None }.encode(ROUTER_ID), 9, &mut out);
    assert!(!worker.all_ended());
    worker.handle(&EndOfStream { stream: 0, sent: 0, routed: 0, cut: None }.encode(ROUTER_ID), 10, &mut out);
    assert!(worker.all_ended());
    let report = worker.finish(&mut out);
    let sent = out.take();
    assert_eq!(kinds(&sent), vec![FrameKind::FinalOutputs, FrameKind::WorkerReport]);
    let (records, final_) = outputs(&sent[0].1);
    assert!(final_);
    assert_eq!((records[0].value, records[0].injector, records[0].seq), (101.0, 1, 2));
    assert_eq!(records[0].stamps.t_worker_in, 10, "arrival of the last end marker");
    let decoded: WorkerReport = Frame::read(&sent[1].1, usize::MAX).unwrap().body().unwrap();
    assert_eq!(decoded, report);
    assert_eq!(report.streams[1], StreamAtWorker { stream: 1, sent: Some(2), routed: Some(2), processed: 2 });
}

#[test]
fn a_rule_switch_is_announced_and_progress_is_periodic() {
    let (mut worker, mut out) = started(1);
    let switch = RulesText { epoch: 1, origin: "new".into(), text: PERC.replace("'perc'", "'jump'") };
    worker.handle(&switch.encode(ROUTER_ID), 1, &mut out);
    let sent = out.take();
    let installed: RulesInstalled = Frame::read(&sent[0].1, usize::MAX).unwrap().body().unwrap();
    assert_eq!((installed.epoch, installed.queries[0].name.as_str()), (1, "jump"));
    assert_eq!(std::mem::take(&mut out.events), [Event::RulesSwitched { epoch: 1, origin: "new".into() }]);
    let broken = RulesText { epoch: 2, origin: "bad".into(), text: "SELECT".into() };
    worker.handle(&broken.encode(ROUTER_ID), 1, &mut out);
    assert!(out.take().is_empty());
    assert_eq!(worker.report().rejected.get("bad_rules"), Some(&1));
    worker.progress(1_000, &mut out);
    let sent = out.take();
    assert_eq!(kinds(&sent), vec![FrameKind::WorkerProgress]);
    let progress: WorkerProgress = Frame::read(&sent[0].1, usize::MAX).unwrap().body().unwrap();
    assert_eq!(progress, WorkerProgress { at_ns: 1_000, processed: 0, outputs: 0, rejected: 1 });
}

#[test]
fn handed_off_symbols_carry_on_at_their_new_owner_as_if_they_never_moved() {
    use cep_core::rescale::{HandOff, Retire, SymbolState};
    let (mut stay, mut out) = started(1);
    let (mut old, mut old_out) = started(1);
    let (mut new, mut new_out) = started(1);
    // `stay` sees every tick; `old` then `new` see them with a move of A in between.
    let first = ticks(1, &[("A", 100.0, 0, 0), ("B", 50.0, 0, 1), ("A", 101.0, 0, 2)]);
    stay.handle(&first, 1, &mut out);
    old.handle(&first, 1, &mut old_out);
    let hand_off = HandOff { part: 7, to: 2, symbols: vec!["A".into(), "never-seen".into()] };
    old.handle(&hand_off.encode(ROUTER_ID), 2, &mut old_out);
    let sent = old_out.take();
    let state_frame = sent.iter().find(|(to, _)| *to == Peer::Router).expect("the state goes to the router");
    let state: SymbolState = Frame::read(&state_frame.1, usize::MAX).unwrap().body().unwrap();
    assert_eq!((state.part, state.from, state.symbols.len()), (7, 1, 1));
    assert_eq!((state.symbols[0].symbol.as_str(), state.symbols[0].next_seq), ("A", 3));
    assert_eq!(old.report().symbols, 1, "A is forgotten, B stays");
    // As the old owner sent it, it is not the router's: refused, nothing imported.
    new.handle(&state_frame.1, 3, &mut new_out);
    assert_eq!(new.report().symbols, 0, "a state from a worker is never taken");
    assert_eq!(new.report().rejected.get("not_from_router"), Some(&1), "{:?}", new.report().rejected);
    // As the router forwards it.
    new.handle(&state.encode(ROUTER_ID), 3, &mut new_out);
    // A jumps 3 % at its new owner: the output needs A's history from the old one.
    let second = ticks(4, &[("A", 104.03, 0, 3)]);
    stay.handle(&second, 4, &mut out);
    new.handle(&second, 4, &mut new_out);
    let strip = |sent: Vec<(Peer, Vec<u8>)>| -> Vec<(u32, u64, u64, u64)> {
        sent.iter()
            .filter(|(_, f)| Frame::read(f, usize::MAX).unwrap().kind() == FrameKind::Outputs)
            .flat_map(|(_, f)| outputs(f).0)
            .map(|o| (o.rule, o.seq, o.price.to_bits(), o.value.to_bits()))
            .collect()
    };
    let (expected, moved) = (strip(out.take()), strip(new_out.take()));
    assert_eq!(expected.len(), 1);
    assert_eq!(moved, expected);
    // The order check moved too: A's ticks 3 and 2 again are a duplicate and out of order.
    new.handle(&ticks(5, &[("A", 104.03, 0, 3), ("A", 101.0, 0, 2)]), 5, &mut new_out);
    assert_eq!((new.report().duplicates, new.report().out_of_order), (1, 1));
    // Retired: nothing more comes; the report says what the router routed here.
    let retire = Retire { routed: [(0, 3)].into() };
    old.handle(&retire.encode(ROUTER_ID), 6, &mut old_out);
    assert!(old.retired() && old.done() && !old.all_ended());
    let report = old.finish(&mut old_out);
    assert_eq!(report.streams[0], StreamAtWorker { stream: 0, sent: None, routed: Some(3), processed: 3 });
    // State that does not import (another rule set's) is counted, never a crash.
    let mut bad = state.clone();
    bad.engine[8] ^= 0xff;
    let (mut other, mut other_out) = started(1);
    other.handle(&bad.encode(ROUTER_ID), 7, &mut other_out);
    assert_eq!(other.report().rejected.get("bad_state"), Some(&1));
}

#[test]
fn nothing_follows_the_report() {
    let (mut worker, mut out) = started(1);
    worker.progress(1_000, &mut out);
    assert_eq!(kinds(&out.take()), vec![FrameKind::WorkerProgress]);
    worker.handle(&EndOfStream { stream: 0, sent: 0, routed: 0, cut: None }.encode(ROUTER_ID), 1, &mut out);
    worker.finish(&mut out);
    assert_eq!(kinds(&out.take()).last(), Some(&FrameKind::WorkerReport));
    worker.progress(1_000, &mut out);
    worker.finish(&mut out);
    assert!(out.take().is_empty(), "the collector may have ended at the report");
}
