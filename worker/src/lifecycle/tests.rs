//! Tests of `lifecycle`: each policy decision from the time and the links, with no socket.

use super::*;
use cep_core::control::{Ready, RulesText};
use cep_core::identity::ROUTER_ID;
use cep_core::liveness::{Abandoned, Fenced};
use cep_core::outbox::Recorded;
use cep_core::report::EndOfStream;

const PERC: &str = "@name('perc') SELECT symbol, price, perc(price) AS value FROM StockTick \
                    PARTITION BY symbol RETAIN 2 EVENTS HAVING perc(price) > 2.0;";
const START_TIMEOUT: Duration = Duration::from_secs(10);
const END_TIMEOUT: Duration = Duration::from_secs(3);

fn ready(joining: bool) -> Ready {
    Ready {
        assigned: 2,
        workers: vec![],
        collector: "c".into(),
        streams: 1,
        start_ns: 0,
        warmup_ns: 0,
        collector_clock: String::new(),
        rules: RulesText { epoch: 0, origin: "test".into(), text: PERC.into() },
        allowed_lateness_ns: None,
        joining,
        collector_incarnation: 1,
        collector_key: "key".into(),
        failure_timeout_ns: 2_000_000_000,
        checkpoint_dir: String::new(),
    }
}

fn at(ms: u64) -> Monotonic {
    Monotonic::from_ns(ms * 1_000_000)
}

fn started(joining: bool) -> (Worker, Lifecycle, Recorded) {
    let mut out = Recorded::default();
    let worker = Worker::start(
        "w2".into(),
        &ready(joining),
        64,
        1 << 20,
        Box::new(cep_core::store::MemoryStore::default()),
        &mut out,
    )
    .unwrap();
    out.take();
    let life = Lifecycle::new("w2".into(), &ready(joining), (START_TIMEOUT, END_TIMEOUT), at(0));
    (worker, life, out)
}

/// The kinds of the frames sent to the router so far, all of them.
fn all_to_router(out: &mut Recorded) -> Vec<FrameKind> {
    out.take()
        .into_iter()
        .filter(|(to, _)| *to == Peer::Router)
        .map(|(_, frame)| Frame::read(&frame, usize::MAX).unwrap().kind())
        .collect()
}

/// The kinds of the requests sent to the router so far (its heartbeats left out).
fn to_router(out: &mut Recorded) -> Vec<FrameKind> {
    all_to_router(out).into_iter().filter(|kind| *kind != FrameKind::Heartbeat).collect()
}

const FREE: Links = Links { collector_full: false, all_saved: false };

/// Links of a worker whose every frame the collector has saved.
const ALL_SAVED: Links = Links { collector_full: false, all_saved: true };

/// Links of a worker holding as many unsaved frames as it may.
const FULL: Links = Links { collector_full: true, all_saved: false };

/// What the router says of the collector "c" (incarnation 1): saved up to `position`.
fn saved_up_to(position: u64) -> DeliveryStatus {
    DeliveryStatus { incarnation: 1, endpoint: "c".into(), saved: position, resend: false }
}

/// A started worker whose first question was answered at 5 ms: nothing saved yet.
fn told_nothing_saved() -> (Worker, Lifecycle, Recorded) {
    let (mut worker, mut life, mut out) = started(false);
    life.turn(at(0), false, &mut worker, FREE, &mut out);
    let status = saved_up_to(0);
    life.answer(Some(FrameKind::DeliveryQuery), &status.encode(ROUTER_ID), at(5), &mut out);
    to_router(&mut out);
    (worker, life, out)
}

#[test]
fn answers_are_looked_for_at_every_idle_turn_and_each_millisecond_while_frames_stream_in() {
    let (mut worker, mut life, mut out) = started(false);
    let at_us = |us: u64| Monotonic::from_ns(us * 1_000);
    assert!(life.turn(at_us(1_000), true, &mut worker, FREE, &mut out).read_answers, "a millisecond after the start");
    assert!(!life.turn(at_us(1_300), true, &mut worker, FREE, &mut out).read_answers);
    assert!(!life.turn(at_us(1_999), true, &mut worker, FREE, &mut out).read_answers);
    assert!(life.turn(at_us(2_000), true, &mut worker, FREE, &mut out).read_answers);
    assert!(life.turn(at_us(2_100), false, &mut worker, FREE, &mut out).read_answers, "an idle turn looks");
    // Once it holds its input for the collector, every turn looks.
    life.turn(at_us(2_200), true, &mut worker, FULL, &mut out);
    assert!(life.turn(at_us(2_300), true, &mut worker, FULL, &mut out).read_answers);
    assert!(life.turn(at_us(2_400), true, &mut worker, FULL, &mut out).read_answers);
}

#[test]
fn cadences_fire_on_the_monotonic_clock_and_delivery_is_asked_once_then_pushed() {
    let (mut worker, mut life, mut out) = started(false);
    let turn = life.turn(at(50), false, &mut worker, FREE, &mut out);
    assert_eq!(turn, Turn { check_liveness: false, report_progress: false, read_input: true, read_answers: true });
    assert_eq!(to_router(&mut out), vec![FrameKind::DeliveryQuery], "asked once, at the first turn");
    let turn = life.turn(at(100), false, &mut worker, FREE, &mut out);
    assert!(turn.check_liveness && !turn.report_progress);
    let status = saved_up_to(7);
    life.answer(Some(FrameKind::DeliveryQuery), &status.encode(ROUTER_ID), at(110), &mut out);
    // Then the router pushes: nothing more is asked, however long the run.
    let pushed = Committed(DeliveryStatus { incarnation: 2, endpoint: "c2".into(), saved: 9, resend: true });
    life.answer(None, &pushed.encode(ROUTER_ID), at(200), &mut out);
    // What they say reaches the link: drop what is saved, send again, the collector that took over.
    assert_eq!(out.saved, vec![(7, false), (9, true)]);
    assert_eq!(out.moved, vec![("c".into(), "key".into(), 1), ("c2".into(), "key".into(), 2)]);
    let turn = life.turn(at(500), false, &mut worker, FREE, &mut out);
    assert!(turn.report_progress, "every 500 ms");
    life.turn(at(60_000), false, &mut worker, FREE, &mut out);
    assert!(to_router(&mut out).is_empty());
}

#[test]
fn a_worker_waiting_on_the_collector_without_news_for_a_second_asks_again_and_sends_again_what_is_not_saved() {
    let (mut worker, mut life, mut out) = told_nothing_saved();
    life.turn(at(10), false, &mut worker, FULL, &mut out);
    life.turn(at(1_009), false, &mut worker, FULL, &mut out);
    assert!(to_router(&mut out).is_empty(), "a second without news since it began to wait not yet over");
    assert!(
        life.turn(at(1_010), false, &mut worker, FULL, &mut out).check_liveness,
        "its links looked after at every turn"
    );
    assert_eq!(to_router(&mut out), vec![FrameKind::DeliveryQuery]);
    // The collector saved more since the last news (a notice lost): it is slow, not missing
    // frames, and nothing goes again yet.
    let status = saved_up_to(3);
    life.answer(Some(FrameKind::DeliveryQuery), &status.encode(ROUTER_ID), at(1_011), &mut out);
    assert_eq!(out.saved, vec![(0, false), (3, false)]);
    life.turn(at(2_011), false, &mut worker, FULL, &mut out);
    assert_eq!(to_router(&mut out), vec![FrameKind::DeliveryQuery]);
    // A second more and nothing more saved: what is held and not saved was lost on the way (a
    // broken connection's last frames, which no later frame shows as a gap): sent again.
    life.answer(Some(FrameKind::DeliveryQuery), &status.encode(ROUTER_ID), at(2_012), &mut out);
    assert_eq!(out.saved, vec![(0, false), (3, false), (3, true)]);
    life.turn(at(3_012), false, &mut worker, FULL, &mut out);
    assert_eq!(to_router(&mut out), vec![FrameKind::DeliveryQuery]);
    // Not while the question is out, unless its answer is taken as lost after 5 s.
    life.turn(at(4_000), false, &mut worker, FULL, &mut out);
    assert!(to_router(&mut out).is_empty());
    life.turn(at(8_012), false, &mut worker, FULL, &mut out);
    assert_eq!(to_router(&mut out), vec![FrameKind::DeliveryQuery]);
}

#[test]
fn news_between_a_question_asked_in_silence_and_its_answer_sends_nothing_again() {
    let (mut worker, mut life, mut out) = told_nothing_saved();
    life.turn(at(10), false, &mut worker, FULL, &mut out);
    life.turn(at(1_010), false, &mut worker, FULL, &mut out);
    assert_eq!(to_router(&mut out).last(), Some(&FrameKind::DeliveryQuery));
    // A notice comes first: the collector lives and saves; the answer then shows no more.
    let notice = Committed(saved_up_to(2));
    life.answer(None, &notice.encode(ROUTER_ID), at(1_011), &mut out);
    let status = saved_up_to(2);
    life.answer(Some(FrameKind::DeliveryQuery), &status.encode(ROUTER_ID), at(1_012), &mut out);
    assert_eq!(out.saved, vec![(0, false), (2, false), (2, false)]);
}

#[test]
fn the_silence_that_makes_a_waiting_worker_ask_again_counts_from_the_start_of_its_wait() {
    let (mut worker, mut life, mut out) = told_nothing_saved();
    // Running with no news for five seconds asks nothing; the wait starts at 5,000 ms.
    life.turn(at(4_000), false, &mut worker, FREE, &mut out);
    life.turn(at(5_000), false, &mut worker, FULL, &mut out);
    life.turn(at(5_999), false, &mut worker, FULL, &mut out);
    assert!(to_router(&mut out).is_empty(), "what it sent just before it began to wait is not taken for lost");
    life.turn(at(6_000), false, &mut worker, FULL, &mut out);
    assert_eq!(to_router(&mut out), vec![FrameKind::DeliveryQuery]);
    // Free again, then waiting anew: the second counts from the new wait.
    let status = saved_up_to(0);
    life.answer(Some(FrameKind::DeliveryQuery), &status.encode(ROUTER_ID), at(6_001), &mut out);
    assert_eq!(out.saved.last(), Some(&(0, true)), "asked after a second of silence: sent again");
    life.turn(at(6_100), false, &mut worker, FREE, &mut out);
    life.turn(at(9_000), false, &mut worker, FULL, &mut out);
    life.turn(at(9_999), false, &mut worker, FULL, &mut out);
    assert!(to_router(&mut out).is_empty());
    life.turn(at(10_000), false, &mut worker, FULL, &mut out);
    assert_eq!(to_router(&mut out), vec![FrameKind::DeliveryQuery]);
}

#[test]
fn heartbeats_go_every_quarter_of_the_failure_timeout_in_every_phase_and_a_last_one_says_finished() {
    let (mut worker, mut life, mut out) = started(false);
    assert_eq!(life.heartbeat_every(), Duration::from_millis(500), "2 s / 4");
    let beats = |out: &mut Recorded| {
        out.take()
            .into_iter()
            .filter_map(|(_, frame)| Frame::read(&frame, usize::MAX).unwrap().body::<Heartbeat>().ok())
            .collect::<Vec<_>>()
    };
    life.turn(at(499), false, &mut worker, FREE, &mut out);
    assert!(beats(&mut out).is_empty(), "not due before 500 ms");
    life.turn(at(500), false, &mut worker, FREE, &mut out);
    assert_eq!(beats(&mut out), vec![Heartbeat { worker: 2, processed: 0, finished: false }]);
    // Holding on a full collector link is a phase like any other: the loop still turns.
    life.turn(at(1_000), false, &mut worker, FULL, &mut out);
    assert_eq!(beats(&mut out).len(), 1);
    worker.handle(&EndOfStream { stream: 0, sent: 0, routed: 0, cut: None }.encode(ROUTER_ID), 1, &mut out);
    life.turn(at(1_100), false, &mut worker, FREE, &mut out);
    assert!(beats(&mut out).is_empty());
    life.turn(at(1_200), false, &mut worker, ALL_SAVED, &mut out);
    assert_eq!(life.ended(), Some(Ended::Finished));
    assert_eq!(
        beats(&mut out),
        vec![Heartbeat { worker: 2, processed: 0, finished: true }],
        "it goes quiet, said once"
    );
    life.turn(at(5_000), false, &mut worker, FREE, &mut out);
    assert!(beats(&mut out).is_empty());
}

#[test]
fn a_fenced_worker_is_over_with_the_routers_reason_whatever_it_was_doing() {
    let (mut worker, mut life, mut out) = started(false);
    life.turn(at(0), false, &mut worker, FREE, &mut out);
    assert_eq!(all_to_router(&mut out), vec![FrameKind::DeliveryQuery]);
    let fenced = Fenced { reason: "silent for 2.1 s".into() };
    life.answer(Some(FrameKind::DeliveryQuery), &fenced.encode(ROUTER_ID), at(10), &mut out);
    assert_eq!(life.ended(), Some(Ended::Fenced));
    assert_eq!(life.fenced(), Some("silent for 2.1 s"));
    assert_eq!(life.turn(at(600), false, &mut worker, FREE, &mut out), Turn::default());
    assert!(all_to_router(&mut out).is_empty(), "nothing more is sent, not even a heartbeat");
}

#[test]
fn a_worker_told_the_run_is_given_up_is_over_with_the_routers_reason_unless_fenced_first() {
    let (mut worker, mut life, mut out) = started(false);
    life.turn(at(0), false, &mut worker, FREE, &mut out);
    let abandoned = Abandoned { reason: "the collector is lost".into() };
    life.answer(None, &abandoned.encode(ROUTER_ID), at(10), &mut out);
    assert_eq!((life.ended(), life.abandoned()), (Some(Ended::Abandoned), Some("the collector is lost")));
    // Fenced first: that is how it ended, whatever comes after.
    let (mut worker, mut life, mut out) = started(false);
    life.turn(at(0), false, &mut worker, FREE, &mut out);
    life.answer(None, &Fenced { reason: "silent".into() }.encode(ROUTER_ID), at(10), &mut out);
    life.answer(None, &abandoned.encode(ROUTER_ID), at(20), &mut out);
    assert_eq!(life.ended(), Some(Ended::Fenced));
}

#[test]
fn a_full_collector_link_holds_the_input_until_it_saves() {
    let (mut worker, mut life, mut out) = started(false);
    assert!(!life.turn(at(1), false, &mut worker, FULL, &mut out).read_input);
    assert!(!life.turn(at(2), false, &mut worker, FULL, &mut out).read_input);
    assert!(life.turn(at(3), false, &mut worker, FREE, &mut out).read_input);
}

#[test]
fn the_end_sends_the_report_and_waits_for_every_save_at_most_the_end_timeout() {
    let (mut worker, mut life, mut out) = started(false);
    worker.handle(&EndOfStream { stream: 0, sent: 0, routed: 0, cut: None }.encode(ROUTER_ID), 1, &mut out);
    out.take();
    // The links read before the report went say nothing of it: all saved then is not enough.
    // Nor does a progress report follow it, even when one is due (the collector may end at the
    // report, and a frame behind it would never be saved).
    let turn = life.turn(at(600), false, &mut worker, ALL_SAVED, &mut out);
    assert!(!turn.read_input && !turn.report_progress);
    let sent: Vec<FrameKind> = out.take().iter().map(|(_, f)| Frame::read(f, usize::MAX).unwrap().kind()).collect();
    assert!(sent.contains(&FrameKind::WorkerReport), "{sent:?}");
    assert_eq!(life.ended(), None, "waits for the collector to save");
    life.turn(at(602), false, &mut worker, ALL_SAVED, &mut out);
    assert_eq!(life.ended(), Some(Ended::Finished));

    // Never saved: it ends all the same after the end time-out, and sends one report only.
    let (mut worker, mut life, mut out) = started(false);
    worker.handle(&EndOfStream { stream: 0, sent: 0, routed: 0, cut: None }.encode(ROUTER_ID), 1, &mut out);
    life.turn(at(1), false, &mut worker, FREE, &mut out);
    out.take();
    life.turn(at(3_000), false, &mut worker, FREE, &mut out);
    assert_eq!(life.ended(), None);
    life.turn(at(3_002), false, &mut worker, FREE, &mut out);
    assert_eq!(life.ended(), Some(Ended::Finished));
    assert!(out.take().iter().all(|(_, f)| Frame::read(f, usize::MAX).unwrap().kind() != FrameKind::WorkerReport));
}

#[test]
fn asked_to_stop_it_asks_to_leave_once_and_stops_if_the_router_never_answers() {
    let (mut worker, mut life, mut out) = started(false);
    life.stop_requested();
    life.turn(at(1), false, &mut worker, FREE, &mut out);
    assert_eq!(to_router(&mut out), vec![FrameKind::DeliveryQuery, FrameKind::Leave]);
    life.stop_requested();
    life.turn(at(2_001), false, &mut worker, FREE, &mut out);
    assert!(!to_router(&mut out).contains(&FrameKind::Leave), "one Leave");
    assert_eq!(life.ended(), None);
    life.turn(at(2_002), false, &mut worker, FREE, &mut out);
    assert_eq!(life.ended(), Some(Ended::Stopped));
}

#[test]
fn a_leave_accepted_drains_until_retired_or_the_end_timeout_and_a_refused_one_stops() {
    let (mut worker, mut life, mut out) = started(false);
    life.stop_requested();
    // Even a full link: it goes on taking input, which is how it drains.
    assert!(life.turn(at(1), false, &mut worker, FULL, &mut out).read_input);
    let accepted = RescaleAccepted { symbols: 4, slices: 1 };
    life.answer(Some(FrameKind::Leave), &accepted.encode(ROUTER_ID), at(10), &mut out);
    life.turn(at(3_000), false, &mut worker, FREE, &mut out);
    assert_eq!(life.ended(), None, "draining, within the end time-out");
    life.turn(at(3_011), false, &mut worker, FREE, &mut out);
    assert_eq!(life.ended(), Some(Ended::Stopped));

    let (mut worker, mut life, mut out) = started(false);
    life.stop_requested();
    life.turn(at(1), false, &mut worker, FREE, &mut out);
    let refused = Refused { reason: "the last worker".into() };
    life.answer(Some(FrameKind::Leave), &refused.encode(ROUTER_ID), at(2), &mut out);
    assert_eq!(life.ended(), Some(Ended::Stopped), "at once: it reads no more input");
}

#[test]
fn a_joining_worker_never_reached_ends_unreached_after_the_start_timeout() {
    let (mut worker, mut life, mut out) = started(true);
    life.turn(at(10_000), false, &mut worker, FREE, &mut out);
    assert_eq!(life.ended(), None);
    life.turn(at(10_001), false, &mut worker, FREE, &mut out);
    assert_eq!(life.ended(), Some(Ended::Unreached));
    // A worker of the first set is reached by definition.
    let (mut worker, mut life, mut out) = started(false);
    life.turn(at(60_000), false, &mut worker, FREE, &mut out);
    assert_eq!(life.ended(), None);
}

#[test]
fn a_leave_refused_after_the_streams_ended_changes_nothing_of_the_end() {
    let (mut worker, mut life, mut out) = started(false);
    life.stop_requested();
    life.turn(at(1), false, &mut worker, FREE, &mut out);
    worker.handle(&EndOfStream { stream: 0, sent: 0, routed: 0, cut: None }.encode(ROUTER_ID), 2, &mut out);
    life.turn(at(3), false, &mut worker, FREE, &mut out);
    let refused = Refused { reason: "the last worker".into() };
    life.answer(Some(FrameKind::Leave), &refused.encode(ROUTER_ID), at(4), &mut out);
    assert_eq!(life.ended(), None, "it waits for the collector as any worker at its end");
    life.turn(at(5), false, &mut worker, ALL_SAVED, &mut out);
    assert_eq!(life.ended(), Some(Ended::Finished));
    let reports = out
        .take()
        .iter()
        .filter(|(_, f)| Frame::read(f, usize::MAX).unwrap().kind() == FrameKind::WorkerReport)
        .count();
    assert_eq!(reports, 1);
}
