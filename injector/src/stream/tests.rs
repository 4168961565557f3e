//! Tests of `stream`: pacing, batching and the end, step by step on a given clock.

use super::*;
use crate::pacing::Schedule;
use crate::source::model;
use cep_core::frame::Frame;
use cep_core::tick::TickRecord;
use cep_core::wire::FrameKind;

fn plan(pace: Pace, limit: u64, deadline_ns: Option<u64>) -> StreamPlan {
    StreamPlan { stream: 0, pace, limit, deadline_ns, batch: 4, linger_ns: 0 }
}

/// A stream of the model's ticks (seed 7, 20 symbols) at `rate` a second from t = 1 s, so tick
/// k is due at 1 s + k / rate, up to `limit` ticks, batches at least `linger_ns` apart; and the
/// symbols' names.
fn paced_stream(rate: f64, limit: u64, linger_ns: u64) -> (StreamCore, std::sync::Arc<Vec<String>>) {
    let sources = model(7, 20, 1, None);
    let source = sources.streams.into_iter().next().unwrap();
    let pace = Pace::Rate(Schedule::new(1_000_000_000, rate));
    (StreamCore::new(StreamPlan { linger_ns, ..plan(pace, limit, None) }, source, 1_000_000_000), sources.names)
}

/// Steps at `now` until the stream waits or ends: what it sent (sequence numbers per batch),
/// and the wait or the marker's count.
fn run_to_wait(core: &mut StreamCore, names: &[String], now: u64) -> (Vec<Vec<u64>>, Result<u64, u64>) {
    let mut batches = Vec::new();
    loop {
        let mut seqs = Vec::new();
        match core.step(now, names, |tick| seqs.push(tick.seq)) {
            Step::WaitUntil(due) => return (batches, Ok(due)),
            Step::Send(batch) => {
                let bytes = batch.seal(now).to_vec();
                let mut ticks: Vec<TickRecord> = Vec::new();
                Frame::read(&bytes, usize::MAX).unwrap().ticks(&mut ticks).unwrap();
                assert_eq!(ticks.iter().map(|t| t.seq).collect::<Vec<_>>(), seqs, "the batch holds what was batched");
                batches.push(seqs);
            }
            Step::End(marker) => {
                let frame = Frame::read(marker, usize::MAX).unwrap();
                assert_eq!(frame.kind(), FrameKind::EndOfStream);
                return (batches, Err(frame.body::<EndOfStream>().unwrap().sent));
            }
            Step::Over => panic!("stepped after the end"),
        }
    }
}

#[test]
fn a_paced_stream_sends_what_is_due_in_batches_and_waits_for_the_next_due_time() {
    // 1,000 ticks a second from t = 1 s: tick k is due at 1 s + k ms.
    let (mut core, names) = paced_stream(1_000.0, 10, 0);
    assert_eq!(run_to_wait(&mut core, &names, 999_000_000), (vec![], Ok(1_000_000_000)));
    // At 1.0055 s ticks 0..=5 are due: a full batch, then the rest, then a wait for tick 6.
    assert_eq!(run_to_wait(&mut core, &names, 1_005_500_000), (vec![vec![0, 1, 2, 3], vec![4, 5]], Ok(1_006_000_000)));
    // The limit ends it with its true count, once.
    assert_eq!(run_to_wait(&mut core, &names, 2_000_000_000), (vec![vec![6, 7, 8, 9]], Err(10)));
    assert!(core.is_over());
    assert!(matches!(core.step(3_000_000_000, &names, |_| {}), Step::Over));
}

#[test]
fn a_linger_sends_the_ticks_due_meanwhile_together_and_a_full_batch_at_once() {
    // Tick k due at 1 s + k ms; at most one batch per 2.5 ms unless one fills (4 ticks).
    let (mut core, names) = paced_stream(1_000.0, 20, 2_500_000);
    assert_eq!(run_to_wait(&mut core, &names, 1_000_000_000), (vec![vec![0]], Ok(1_002_500_000)));
    // Ticks 1 and 2 fell due meanwhile: they leave together, then the linger again.
    assert_eq!(run_to_wait(&mut core, &names, 1_002_500_000), (vec![vec![1, 2]], Ok(1_005_000_000)));
    // Late (the thread woke at 1.012 s): a full batch goes, the rest due with it at once.
    let (batches, wait) = run_to_wait(&mut core, &names, 1_012_000_000);
    assert_eq!(batches, vec![vec![3, 4, 5, 6], vec![7, 8, 9, 10], vec![11, 12]]);
    assert_eq!(wait, Ok(1_014_500_000));
    // Slower than the linger, ticks go one by one at their due times.
    let (mut core, _) = paced_stream(100.0, 20, 2_500_000);
    assert_eq!(run_to_wait(&mut core, &names, 1_000_000_000), (vec![vec![0]], Ok(1_010_000_000)));
    assert_eq!(run_to_wait(&mut core, &names, 1_010_000_000), (vec![vec![1]], Ok(1_020_000_000)));
}

#[test]
fn intended_send_times_are_the_due_times_not_the_time_of_the_step() {
    let sources = model(7, 20, 1, None);
    let names = sources.names.clone();
    let pace = Pace::Rate(Schedule::new(1_000, 1_000_000.0));
    let mut core = StreamCore::new(plan(pace, 3, None), sources.streams.into_iter().next().unwrap(), 1_000);
    let mut stamps = Vec::new();
    let Step::Send(_) = core.step(10_000, &names, |tick| stamps.push((tick.t_inject, tick.t_event))) else {
        panic!("ticks are due")
    };
    assert_eq!(stamps, vec![(1_000, 1_000), (2_000, 2_000), (3_000, 3_000)]);
}

#[test]
fn a_deadline_a_stop_and_the_sources_end_each_end_the_stream_with_what_it_sent() {
    let names = model(7, 20, 1, None).names;
    let fresh = || model(7, 20, 1, None).streams.into_iter().next().unwrap();
    let pace = Pace::Rate(Schedule::new(0, 1_000.0));
    // No tick intended at or after the deadline (5 ms: ticks 0..=4).
    let mut core = StreamCore::new(plan(pace, u64::MAX, Some(5_000_000)), fresh(), 0);
    assert_eq!(run_to_wait(&mut core, &names, 60_000_000_000), (vec![vec![0, 1, 2, 3], vec![4]], Err(5)));
    // A stop: what was sent, and nothing after.
    let mut core = StreamCore::new(plan(pace, u64::MAX, None), fresh(), 0);
    assert_eq!(run_to_wait(&mut core, &names, 1_500_000), (vec![vec![0, 1]], Ok(2_000_000)));
    core.stop();
    assert_eq!(run_to_wait(&mut core, &names, 9_000_000), (vec![], Err(2)));
    // Unpaced, a source of 6 ticks: batches as fast as asked, then the marker.
    let source = model(7, 20, 1, Some(6)).streams.into_iter().next().unwrap();
    let mut core = StreamCore::new(plan(Pace::Unpaced, u64::MAX, None), source, 0);
    assert_eq!(run_to_wait(&mut core, &names, 1), (vec![vec![0, 1, 2, 3], vec![4, 5]], Err(6)));
}

/// A replay of `lines` (taken as checked: sent as it is read), from a file in a folder of its
/// own (kept while the returned guard lives); and the file's path.
fn replay_of(lines: &str) -> (tempfile::TempDir, std::path::PathBuf, StreamSource) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ticks.txt");
    std::fs::write(&file, lines).unwrap();
    let source = crate::source::replay(&file, None, 1, None, true).unwrap().streams.into_iter().next().unwrap();
    (dir, file, source)
}

#[test]
fn a_replay_that_meets_a_bad_line_ends_with_its_true_count_and_says_it_was_cut_short() {
    // Sent as it is read, up to the bad line.
    let (_dir, file, source) = replay_of("AAA;1.5;1\nBBB;2.5;2\nAAA;oops;3\nAAA;1.5;4\n");
    let mut core = StreamCore::new(plan(Pace::Unpaced, u64::MAX, None), source, 0);
    let mut marker = None;
    while marker.is_none() {
        match core.step(1, &[], |_| {}) {
            Step::End(bytes) => marker = Some(Frame::read(bytes, usize::MAX).unwrap().body::<EndOfStream>().unwrap()),
            Step::Send(_) | Step::WaitUntil(_) => {}
            Step::Over => panic!("over before its marker"),
        }
    }
    let marker = marker.unwrap();
    assert_eq!(marker.sent, 2);
    let cut = marker.cut.unwrap_or_default();
    assert_eq!(cut, format!("its replay file has a bad line: {}:3: price `oops` is not a number", file.display()));
}

#[test]
fn a_replay_at_its_recorded_pace_with_a_linger_ends_without_waiting_it_out() {
    // Event times in ms: 0, 1 and 5 ms after the first.
    let (_dir, _, source) = replay_of("AAA;1.5;1000\nBBB;2.5;1001\nAAA;1.6;1005\n");
    let pace = Pace::Recorded { start_ns: 1_000_000_000, first_event_ns: 1_000_000_000, speed: 1.0 };
    let linger = StreamPlan { linger_ns: 3_000_000, ..plan(pace, u64::MAX, None) };
    let mut core = StreamCore::new(linger, source, 1_000_000_000);
    assert_eq!(run_to_wait(&mut core, &[], 1_000_000_000), (vec![vec![0]], Ok(1_003_000_000)));
    assert_eq!(run_to_wait(&mut core, &[], 1_003_000_000), (vec![vec![1]], Ok(1_006_000_000)));
    // Its last tick sent, the file is over: the marker goes at once, not a linger later.
    assert_eq!(run_to_wait(&mut core, &[], 1_006_000_000), (vec![vec![2]], Err(3)));
}
