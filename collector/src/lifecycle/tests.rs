//! Tests of `lifecycle`: each decision from the time and what is observed, with no socket.

use super::*;

fn at(ms: u64) -> Monotonic {
    Monotonic::from_ns(ms * 1_000_000)
}

const IDLE: Duration = Duration::from_secs(5);
const ALIVE: Duration = Duration::from_secs(1);
const RUNNING: Observed =
    Observed { has_everything: false, router_reported: false, shutdown: false, save_in_flight: false };

#[test]
fn saves_at_its_cadence_only_when_frames_arrived_and_none_is_in_flight() {
    let mut life = Lifecycle::new(IDLE, Duration::ZERO, ALIVE, at(0));
    assert!(!life.turn(at(100), RUNNING).save, "nothing arrived");
    life.frame_arrived(at(120));
    let in_flight = Observed { save_in_flight: true, ..RUNNING };
    assert!(!life.turn(at(130), in_flight).save, "one save at a time");
    assert!(life.turn(at(131), RUNNING).save);
    life.frame_arrived(at(140));
    assert!(!life.turn(at(230), RUNNING).save, "less than 100 ms since the last save");
    assert!(life.turn(at(231), RUNNING).save);
    assert!(!life.turn(at(400), RUNNING).save, "nothing arrived since");
}

#[test]
fn with_nothing_new_it_still_saves_at_the_liveness_cadence_so_the_router_hears_from_it() {
    let mut life = Lifecycle::new(IDLE, Duration::ZERO, ALIVE, at(0));
    assert!(!life.turn(at(999), RUNNING).save);
    assert!(life.turn(at(1_000), RUNNING).save, "nothing arrived, but a second passed");
    assert!(!life.turn(at(1_500), RUNNING).save);
    assert!(life.turn(at(2_000), RUNNING).save);
}

#[test]
fn a_save_stuck_on_a_slow_disk_still_tells_the_router_it_lives_for_a_failure_time_out() {
    let mut life = Lifecycle::new(IDLE, Duration::ZERO, ALIVE, at(0));
    life.frame_arrived(at(50));
    let turn = life.turn(at(100), RUNNING);
    assert!(turn.save && !turn.tell_alive);
    let in_flight = Observed { save_in_flight: true, ..RUNNING };
    assert!(!life.turn(at(1_099), in_flight).tell_alive, "within the cadence of the save's start");
    let turn = life.turn(at(1_100), in_flight);
    assert!(turn.tell_alive && !turn.save, "a second after the save began, still storing");
    assert!(!life.turn(at(1_500), in_flight).tell_alive);
    assert!(life.turn(at(2_100), in_flight).tell_alive, "and every second while it is stuck");
    let turn = life.turn(at(2_200), RUNNING);
    assert!(!turn.tell_alive && !turn.save, "stored: the next save waits for its cadence");
    assert!(life.turn(at(3_100), RUNNING).save);
    // One stuck for four periods (a hung mount): the router is left to take it for lost.
    assert!(life.turn(at(4_100), in_flight).tell_alive);
    assert!(life.turn(at(6_099), in_flight).tell_alive);
    assert!(!life.turn(at(7_100), in_flight).tell_alive, "four seconds stuck: silent");
    assert!(!life.turn(at(9_100), in_flight).tell_alive);
}

#[test]
fn the_router_is_watched_only_while_it_owes_its_report_and_the_summary_only_when_asked_for() {
    let mut life = Lifecycle::new(IDLE, Duration::from_millis(200), ALIVE, at(0));
    let turn = life.turn(at(100), RUNNING);
    assert!(turn.check_router && !turn.write_summary && !turn.publish);
    assert!(life.turn(at(200), RUNNING).write_summary);
    assert!(!life.turn(at(300), Observed { router_reported: true, ..RUNNING }).check_router);
    assert!(life.turn(at(1_000), RUNNING).publish);
    let mut life = Lifecycle::new(IDLE, Duration::ZERO, ALIVE, at(0));
    assert!(!life.turn(at(60_000), RUNNING).write_summary, "zero: no rolling summary");
}

#[test]
fn every_report_in_ends_with_a_last_save_and_the_router_told() {
    let mut life = Lifecycle::new(IDLE, Duration::ZERO, ALIVE, at(0));
    let turn = life.turn(at(1), Observed { has_everything: true, save_in_flight: true, ..RUNNING });
    assert!(turn.save);
    let ended = life.ended().unwrap();
    assert_eq!(ended, &Ended::HasEverything);
    assert!(ended.tells_router() && ended.ran_its_course() && ended.removes_state());
    assert_eq!(life.turn(at(2), RUNNING), Turn::default(), "over: nothing more");
}

#[test]
fn the_idle_timeout_counts_from_the_last_frame() {
    let mut life = Lifecycle::new(IDLE, Duration::ZERO, ALIVE, at(0));
    life.frame_arrived(at(4_000));
    life.turn(at(9_000), RUNNING);
    assert_eq!(life.ended(), None);
    life.turn(at(9_001), RUNNING);
    let ended = life.ended().unwrap();
    assert_eq!(ended, &Ended::Idle);
    assert!(ended.tells_router() && ended.ran_its_course());
}

#[test]
fn a_shutdown_takes_the_last_reports_for_the_grace_then_ends_partial_and_keeps_the_state() {
    let mut life = Lifecycle::new(IDLE, Duration::ZERO, ALIVE, at(0));
    let stopping = Observed { shutdown: true, ..RUNNING };
    assert!(!life.turn(at(10), stopping).check_router, "a router stopping with us is not watched");
    life.turn(at(1_009), stopping);
    assert_eq!(life.ended(), None, "within the grace");
    life.turn(at(1_010), stopping);
    let ended = life.ended().unwrap();
    assert_eq!(ended, &Ended::Shutdown);
    assert!(!ended.tells_router() && !ended.ran_its_course() && !ended.removes_state());
    // Every report in during the grace: saved, but still a stopped run.
    let mut life = Lifecycle::new(IDLE, Duration::ZERO, ALIVE, at(0));
    life.turn(at(10), stopping);
    assert!(life.turn(at(20), Observed { has_everything: true, ..stopping }).save);
    assert_eq!(life.ended(), Some(&Ended::Shutdown));
}

#[test]
fn a_lost_router_ends_the_run_with_its_cause() {
    let mut life = Lifecycle::new(IDLE, Duration::ZERO, ALIVE, at(0));
    life.router_lost("the router is lost: gone".into());
    let ended = life.ended().unwrap();
    assert_eq!(ended, &Ended::RouterLost("the router is lost: gone".into()));
    assert!(!ended.tells_router() && ended.ran_its_course() && !ended.removes_state());
}
