//! Tests of `lifecycle`: the time-outs and the end's steps, with no socket.

use super::*;
use crate::deploying::Deployments;
use crate::rendezvous::WorkerCount;
use crate::router::tests::register;
use crate::router::RouterSettings;

fn obs(collector_lost: bool, pending: bool, shutdown: bool) -> EndObserved {
    EndObserved { collector_lost, pending, shutdown }
}

fn at(ms: u64) -> Monotonic {
    Monotonic::from_ns(ms * 1_000_000)
}

fn router() -> Router {
    let settings = RouterSettings {
        workers: WorkerCount::Exactly(1),
        streams: 1,
        vnodes: 16,
        batch: 8,
        max_frame_bytes: 1 << 20,
        allowed_lateness_ns: None,
        slice_symbols: 16,
        max_held_ticks: 1_000,
        move_timeout_ns: 1_000_000_000,
        checkpoint_every_ns: 0,
        checkpoints_retained: 1,
        checkpoint_dir: String::new(),
        max_replay_bytes: 1 << 20,
        failure_timeout: std::time::Duration::from_secs(3600),
    };
    Router::new(settings, Deployments::start(&cep_query::RulesSource::reference()).unwrap())
}

#[test]
fn gathering_gives_up_after_the_start_timeout_naming_who_is_missing_and_on_shutdown() {
    let router = router();
    let mut gathering = Gathering::new(Duration::from_secs(2), at(0));
    assert_eq!(gathering.turn(at(2_000), &router, false), Ok(false));
    match gathering.turn(at(2_001), &router, false) {
        Err(Stop::Incomplete { waited, missing }) => {
            assert_eq!(waited, Duration::from_secs(2));
            assert!(missing.contains("worker"), "{missing}");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(gathering.turn(at(1), &router, true), Err(Stop::ShutdownBeforeStart(_))));
    // Zero: no time-out.
    let mut gathering = Gathering::new(Duration::ZERO, at(0));
    assert_eq!(gathering.turn(at(3_600_000), &router, false), Ok(false));
}

#[test]
fn a_lost_collector_has_the_retention_time_to_come_back() {
    let mut watch = CollectorWatch::new(Duration::from_secs(10));
    assert_eq!(watch.observe(at(0), None), Ok(false));
    assert_eq!(watch.observe(at(100), Some("gone")), Ok(false));
    assert!(watch.is_lost());
    assert_eq!(watch.observe(at(10_100), Some("gone")), Ok(false), "lost since 100 ms");
    assert_eq!(watch.observe(at(10_200), None), Ok(true), "back");
    assert!(!watch.is_lost());
    watch.observe(at(20_000), Some("gone")).unwrap();
    assert_eq!(
        watch.observe(at(30_001), Some("gone again")),
        Err(Stop::CollectorLost { cause: "gone again".into(), retention: Duration::from_secs(10) })
    );
}

#[test]
fn the_end_waits_for_the_collector_for_the_end_timeout_unless_it_is_lost_then_drains_and_releases() {
    // (This router has no node: every node has asked, so the late asks pass at once.)
    let router = router();
    let mut ending = Ending::new(Duration::from_secs(3), at(0));
    assert_eq!(ending.turn(at(2_999), &router, obs(false, false, false)), EndStep::Wait);
    // A lost collector may come back: the end waits.
    assert_eq!(ending.turn(at(5_000), &router, obs(true, false, false)), EndStep::Wait);
    ending.collector_back(at(5_000));
    assert_eq!(ending.turn(at(7_999), &router, obs(false, false, false)), EndStep::Wait, "a whole end time-out again");
    // Ending anyway; frames wait for a worker: drained, then released.
    assert_eq!(ending.turn(at(8_001), &router, obs(false, true, false)), EndStep::Drain);
    assert_eq!(ending.turn(at(8_002), &router, obs(false, false, false)), EndStep::Release);
}

#[test]
fn a_drain_is_bounded_and_a_shutdown_releases_at_once() {
    let router = router();
    let mut ending = Ending::new(Duration::ZERO, at(0));
    assert_eq!(ending.turn(at(1), &router, obs(false, true, false)), EndStep::Drain);
    assert_eq!(ending.turn(at(5_000), &router, obs(false, true, false)), EndStep::Drain);
    assert_eq!(
        ending.turn(at(5_002), &router, obs(false, true, false)),
        EndStep::Release,
        "a worker that takes nothing"
    );
    let mut ending = Ending::new(Duration::from_secs(60), at(0));
    assert_eq!(ending.turn(at(1), &router, obs(false, false, true)), EndStep::Release);
}

#[test]
fn late_asks_are_answered_for_the_grace_while_a_node_has_not_asked() {
    use cep_core::identity::Role;
    use cep_core::outbox::Recorded;
    let mut router = router();
    // A worker registered: it will ask for the end, and has not yet.
    router.control(b"w".to_vec(), &register(Role::Worker, "w", 0), at(0), &mut Recorded::default());
    assert!(!router.every_node_asked());
    let mut ending = Ending::new(Duration::ZERO, at(0));
    assert_eq!(ending.turn(at(1), &router, obs(false, false, false)), EndStep::AnswerLate);
    assert_eq!(ending.turn(at(5_000), &router, obs(false, false, false)), EndStep::AnswerLate, "within the grace");
    assert_eq!(ending.turn(at(5_002), &router, obs(false, false, false)), EndStep::Release, "a dead node never asks");
}

#[test]
fn a_run_gathers_starts_reads_until_every_stream_ended_and_nothing_waits_then_finishes_and_ends() {
    use cep_core::frame::Body;
    use cep_core::identity::Role;
    use cep_core::outbox::Recorded;
    use cep_core::report::EndOfStream;
    let (mut router, mut out) = (router(), Recorded::default());
    let mut policy = RunPolicy::new(Duration::from_secs(10), Duration::from_secs(3), Duration::from_secs(1), at(0));
    let idle = Observed::default();
    let gathering = policy.turn(at(1), &router, idle).unwrap();
    assert_eq!((gathering.read_input, gathering.change), (false, None));
    for (role, id, streams) in [(Role::Worker, "w", 0), (Role::Collector, "c", 0), (Role::Injector, "i", 1)] {
        router.control(id.as_bytes().to_vec(), &register(role, id, streams), at(2), &mut out);
    }
    assert_eq!(policy.turn(at(3), &router, idle).unwrap().change, Some(Change::Start));
    assert!(policy.started());
    router.start(1_000);
    router.announce(None, &mut out);

    let reading = policy.turn(at(4), &router, idle).unwrap();
    assert_eq!((reading.read_input, reading.wait, reading.change), (true, READ_WAIT, None));
    // Frames wait for a worker's full queue: no input is read, and the driver wakes on room.
    let held = policy.turn(at(5), &router, Observed { pending: true, shutdown: false }).unwrap();
    assert_eq!((held.read_input, held.wait, held.change), (false, HOLD_WAIT, None));
    router.data(&EndOfStream { stream: 0, sent: 0, routed: 0, cut: None }.encode(0), 6, &mut out);
    assert!(router.all_ended());
    // The stream ended, but the report waits for what waits for the worker.
    let ended = policy.turn(at(7), &router, Observed { pending: true, shutdown: false }).unwrap();
    assert_eq!((ended.read_input, ended.change), (false, None));
    assert_eq!(policy.turn(at(8), &router, idle).unwrap().change, Some(Change::Finish));

    // The end: the collector is watched while it takes the last frames, and may be lost for
    // its retention time; a stop releases at once.
    let waiting = policy.turn(at(60), &router, idle).unwrap();
    assert_eq!(
        (waiting.read_input, waiting.look_around, waiting.watch_collector, waiting.fail_over),
        (false, true, true, true)
    );
    assert_eq!(policy.collector(at(60), Some("gone")), Ok(()));
    assert!(matches!(policy.collector(at(1_061), Some("gone")), Err(Stop::CollectorLost { .. })));
    let stop = Observed { pending: false, shutdown: true };
    assert_eq!(policy.turn(at(1_100), &router, stop).unwrap().change, Some(Change::Release));
}

#[test]
fn a_stop_while_running_finishes_at_once_and_the_look_around_keeps_its_cadence() {
    let router = router();
    let mut policy = RunPolicy::new(Duration::ZERO, Duration::from_secs(3), Duration::from_secs(1), at(0));
    policy.phase = Phase::Running;
    assert!(!policy.turn(at(10), &router, Observed::default()).unwrap().look_around);
    assert!(policy.turn(at(50), &router, Observed::default()).unwrap().look_around);
    assert!(!policy.turn(at(60), &router, Observed::default()).unwrap().look_around);
    let stop = Observed { pending: true, shutdown: true };
    assert_eq!(policy.turn(at(61), &router, stop).unwrap().change, Some(Change::Finish));
    assert_eq!(policy.turn(at(62), &router, stop).unwrap().change, Some(Change::Release));
}
