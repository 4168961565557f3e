//! Who the router has heard from lately. A worker proves that its loop turns by what it sends
//! on its control link (a [`cep_core::liveness::Heartbeat`] at least every quarter of the
//! failure time-out, or any other request); one the router hears nothing from for the whole
//! time-out while it is a member is taken for dead, whatever its connection says (a stopped
//! process keeps its connections up). A router that was itself stopped or starved does not
//! blame the workers for its own gap: the time it did not look is not counted against them.
//! Injectors are watched the same way, per stream (an [`cep_core::liveness::InjectorHeartbeat`]
//! speaks for all of its streams): a stream not ended whose injector falls silent is named.

use cep_core::clock::Monotonic;
use std::time::Duration;

/// How many failure time-outs a member that was never heard from has to start.
const STARTING_ALLOWANCE: u32 = 10;

/// What the router knows of one worker's heartbeats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Beat {
    /// Not looked at yet: its time starts at the next look.
    Unseen,
    /// Not heard from yet since this instant: it is still starting (connecting, measuring its
    /// clock, compiling its rules), and is given ten times the time-out for that, as a peer
    /// never connected is.
    Starting(Monotonic),
    /// Last heard from at this instant.
    Heard(Monotonic),
    /// Its run is over and it went quiet on purpose (or it is fenced): not watched.
    Quiet,
}

/// The workers' heartbeats, by index, the injectors' by stream, and the collector's (what it
/// tells of its saves).
#[derive(Debug)]
pub struct Heartbeats {
    timeout: Duration,
    beats: Vec<Beat>,
    streams: Vec<Beat>,
    collector: Beat,
    /// When the router last looked ([`Heartbeats::silent`]).
    last_look: Option<Monotonic>,
}

impl Heartbeats {
    /// `workers` workers and `streams` injector streams, each allowed `timeout` of silence.
    pub fn new(workers: usize, streams: u32, timeout: Duration) -> Heartbeats {
        Heartbeats {
            timeout,
            beats: vec![Beat::Unseen; workers],
            streams: vec![Beat::Unseen; streams as usize],
            collector: Beat::Unseen,
            last_look: None,
        }
    }

    /// `count` more streams opened (an injector joined the running cluster).
    pub fn open_streams(&mut self, count: u32) {
        self.streams.extend(std::iter::repeat_n(Beat::Unseen, count as usize));
    }

    /// The injector of `streams` was heard from at `now`.
    pub fn heard_streams(&mut self, streams: std::ops::Range<u32>, now: Monotonic) {
        for stream in streams {
            if let Some(beat) = self.streams.get_mut(stream as usize).filter(|beat| **beat != Beat::Quiet) {
                *beat = Beat::Heard(now);
            }
        }
    }

    /// A worker joined, with the next index.
    pub fn add_worker(&mut self) {
        self.beats.push(Beat::Unseen);
    }

    /// How long `beat`'s member has been silent at `now`, and how long its stage allows.
    fn silence(&self, beat: Beat, now: Monotonic) -> Option<(Duration, Duration)> {
        match beat {
            Beat::Heard(at) => Some((now.since(at), self.timeout)),
            Beat::Starting(since) => Some((now.since(since), self.timeout * STARTING_ALLOWANCE)),
            Beat::Unseen | Beat::Quiet => None,
        }
    }

    /// How long `beat`'s member has been silent at `now` beyond what its stage allows, if it has.
    fn overdue(&self, beat: Beat, now: Monotonic) -> Option<Duration> {
        let (silent, allowed) = self.silence(beat, now)?;
        (silent > allowed).then_some(silent)
    }

    /// Worker `worker` was heard from at `now`.
    pub fn heard(&mut self, worker: usize, now: Monotonic) {
        if let Some(beat) = self.beats.get_mut(worker).filter(|beat| **beat != Beat::Quiet) {
            *beat = Beat::Heard(now);
        }
    }

    /// The collector was heard from at `now` (it tells what it saved at least every quarter
    /// of the failure time-out, new frames or not).
    pub fn heard_collector(&mut self, now: Monotonic) {
        self.collector = Beat::Heard(now);
    }

    /// How long the collector has been silent, when that is beyond the time-out at the last
    /// look ([`Heartbeats::silent`]): it is taken for lost while so (and back when heard).
    pub fn collector_silent(&self) -> Option<Duration> {
        self.overdue(self.collector, self.last_look?)
    }

    /// Worker `worker` goes quiet on purpose (its run is over), or is no longer a member.
    pub fn quiet(&mut self, worker: usize) {
        if let Some(beat) = self.beats.get_mut(worker) {
            *beat = Beat::Quiet;
        }
    }

    /// The workers, among those `member` says are members, and the streams, among those `open`
    /// says have not ended, silent for longer than the time-out at `now`, with how long. Each
    /// is named once (it goes quiet here; an ended stream goes quiet without being named).
    pub fn silent(&mut self, now: Monotonic, member: impl Fn(usize) -> bool, open: impl Fn(usize) -> bool) -> Silent {
        // A gap in the router's own looking (it was stopped, or starved of CPU) is not the
        // workers' silence: their heartbeats of that time wait unread in its socket.
        let last_look = self.last_look.replace(now);
        let gap = last_look.map_or(Duration::ZERO, |last| now.since(last));
        // Keep the silence each had when the router last looked, and drop the gap. At the first
        // look there is no earlier one: every silence starts now.
        let rebase = last_look.is_none() || gap > self.timeout / 2;
        let rebased = |beat: &mut Beat| match *beat {
            Beat::Unseen => *beat = Beat::Starting(now),
            Beat::Heard(at) | Beat::Starting(at) if rebase => {
                let before = last_look.map_or(Duration::ZERO, |last| last.since(at));
                let at = Monotonic::from_ns(now.as_ns().saturating_sub(before.as_nanos() as u64));
                *beat = if matches!(beat, Beat::Heard(_)) { Beat::Heard(at) } else { Beat::Starting(at) };
            }
            _ => {}
        };
        rebased(&mut self.collector);
        let mut silent = Silent::default();
        for index in 0..self.beats.len() {
            rebased(&mut self.beats[index]);
            if let Some(quiet) = self.overdue(self.beats[index], now).filter(|_| member(index)) {
                self.beats[index] = Beat::Quiet;
                silent.workers.push((index, quiet));
            }
        }
        for stream in 0..self.streams.len() {
            if !open(stream) {
                self.streams[stream] = Beat::Quiet;
            }
            rebased(&mut self.streams[stream]);
            if let Some(quiet) = self.overdue(self.streams[stream], now) {
                self.streams[stream] = Beat::Quiet;
                silent.streams.push((stream as u32, quiet));
            }
        }
        silent
    }
}

/// Who fell silent at a look ([`Heartbeats::silent`]).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Silent {
    /// Workers: (index, how long).
    pub workers: Vec<(usize, Duration)>,
    /// Injector streams not ended: (stream, how long).
    pub streams: Vec<(u32, Duration)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Monotonic {
        Monotonic::from_ns(ms * 1_000_000)
    }

    #[test]
    fn a_member_silent_for_the_timeout_is_named_once() {
        let mut beats = Heartbeats::new(3, 0, Duration::from_millis(100));
        assert_eq!(beats.silent(at(0), |_| true, |_| true), Silent::default(), "times start at the first look");
        for ms in (20..=200).step_by(20) {
            beats.heard(0, at(ms));
            if ms <= 40 {
                beats.heard(1, at(ms));
            }
            let silent = beats.silent(at(ms), |index| index != 2, |_| true).workers;
            match ms {
                140 => assert!(silent.is_empty(), "100 ms exactly is not beyond the time-out"),
                // Worker 2 is not a member (it left): never named.
                160 => assert_eq!(silent, vec![(1, Duration::from_millis(120))]),
                _ => assert!(silent.is_empty(), "{ms}: {silent:?}"),
            }
        }
        beats.heard(1, at(210));
        assert!(
            beats.silent(at(400), |_| true, |_| true).workers.iter().all(|(index, _)| *index != 1),
            "named once: quiet now"
        );
    }

    #[test]
    fn the_routers_own_gap_is_not_the_workers_silence() {
        let mut beats = Heartbeats::new(2, 0, Duration::from_millis(100));
        beats.silent(at(0), |_| true, |_| true);
        beats.heard(0, at(10));
        beats.heard(1, at(10));
        // The router stops for 3 s: nobody is blamed when it looks again.
        assert!(beats.silent(at(3_010), |_| true, |_| true).workers.is_empty());
        // Worker 0 is heard from (its heartbeats waited in the socket); worker 1 stays silent
        // and is named once the time-out has passed in the router's own looking.
        for ms in (3_030..=3_110).step_by(20) {
            beats.heard(0, at(ms));
            assert!(beats.silent(at(ms), |_| true, |_| true).workers.is_empty(), "{ms}");
        }
        assert_eq!(beats.silent(at(3_111), |_| true, |_| true).workers, vec![(1, Duration::from_millis(101))]);
    }

    #[test]
    fn a_worker_that_finished_is_not_watched() {
        let mut beats = Heartbeats::new(1, 0, Duration::from_millis(100));
        beats.silent(at(0), |_| true, |_| true);
        beats.quiet(0);
        beats.heard(0, at(5));
        assert!(beats.silent(at(1_000), |_| true, |_| true).workers.is_empty());
    }

    #[test]
    fn a_silent_collector_is_lost_while_silent_and_back_once_heard() {
        let mut beats = Heartbeats::new(1, 0, Duration::from_millis(100));
        beats.silent(at(0), |_| true, |_| true);
        beats.heard_collector(at(50));
        // The router looks every 10 ms; the collector is heard at 50 ms, then not until 200.
        for ms in (10..=250).step_by(10) {
            if ms == 200 {
                beats.heard_collector(at(ms));
            }
            beats.silent(at(ms), |_| true, |_| true);
            let expected = match ms {
                160..=190 => Some(Duration::from_millis(ms - 50)),
                _ => None,
            };
            assert_eq!(beats.collector_silent(), expected, "{ms}: lost while silent, back once heard");
        }
    }

    #[test]
    fn a_member_never_heard_from_has_ten_time_outs_to_start() {
        let mut beats = Heartbeats::new(2, 0, Duration::from_millis(100));
        for ms in (0..=1_000).step_by(20) {
            beats.heard(0, at(ms));
            assert!(beats.silent(at(ms), |_| true, |_| true).workers.is_empty(), "{ms}: still starting");
        }
        beats.heard(0, at(1_020));
        assert_eq!(beats.silent(at(1_020), |_| true, |_| true).workers, vec![(1, Duration::from_millis(1_020))]);
    }

    #[test]
    fn the_first_look_starts_every_silence_even_after_a_gap_before_it() {
        // The router was stopped before its first look (seed 7763 of the sweep): the workers
        // heard before that are not silent for the gap.
        let mut beats = Heartbeats::new(2, 0, Duration::from_millis(50));
        beats.heard(0, at(1));
        beats.heard(1, at(1));
        assert!(beats.silent(at(188), |_| true, |_| true).workers.is_empty());
        for ms in (198..=238).step_by(10) {
            beats.heard(0, at(ms));
            assert!(
                beats.silent(at(ms), |_| true, |_| true).workers.is_empty(),
                "{ms}: 50 ms from the first look at most"
            );
        }
        assert_eq!(beats.silent(at(239), |_| true, |_| true).workers, vec![(1, Duration::from_millis(51))]);
    }

    #[test]
    fn an_injector_silent_for_the_timeout_has_each_open_stream_named_once() {
        // Streams 0-1 are one injector's, 2 another's; stream 3 opens later (a late injector).
        let mut beats = Heartbeats::new(0, 3, Duration::from_millis(100));
        beats.silent(at(0), |_| true, |_| true);
        for ms in (20..=300).step_by(20) {
            if ms <= 60 {
                beats.heard_streams(0..2, at(ms));
            }
            beats.heard_streams(2..3, at(ms));
            if ms == 100 {
                beats.open_streams(1);
            }
            if ms >= 120 {
                beats.heard_streams(3..4, at(ms));
            }
            // Stream 1 ends at 140 ms (its marker came): no longer watched.
            let silent = beats.silent(at(ms), |_| true, |stream| stream != 1 || ms < 140);
            assert!(silent.workers.is_empty());
            match ms {
                180 => assert_eq!(silent.streams, vec![(0, Duration::from_millis(120))], "once, stream 1 ended"),
                _ => assert!(silent.streams.is_empty(), "{ms}: {silent:?}"),
            }
        }
        beats.heard_streams(0..2, at(320));
        assert!(
            beats.silent(at(1_000), |_| true, |_| true).streams.iter().all(|(stream, _)| *stream >= 2),
            "quiet now"
        );
    }
}
