//! When each tick is due: at a fixed rate, tick `k` of a stream at `start + k / rate`; a
//! replay at its recorded pace, at `start + (t_event - first t_event) / speed`. Waiting
//! sleeps; without a linger it yields for the last stretch, because a plain sleep overshoots
//! by tens of microseconds, which would show up as latency.

use crate::stop::Stop;
use cep_core::clock::now_ns;
use std::time::Duration;

/// The last stretch of a wait that is yielded rather than slept (a sleep can overshoot).
const SPIN_NS: u64 = 20_000;

/// The longest single sleep: how soon a waiting stream sees a shutdown.
const MAX_SLEEP: Duration = Duration::from_millis(100);

/// The latest intended send time a tick can have (2^63 ns, the year 2262): the wire carries
/// event time as a signed offset from it.
const LATEST_DUE_NS: u64 = i64::MAX as u64;

/// A fixed rate: tick `k` of a stream is due at `start + k / rate`.
#[derive(Clone, Copy, Debug)]
pub struct Schedule {
    start_ns: u64,
    /// Nanoseconds between ticks; 0 = as fast as possible.
    period_ns: f64,
}

impl Schedule {
    /// A schedule from `start_ns` (wall clock) at `rate` ticks per second; 0 or less: unpaced.
    pub fn new(start_ns: u64, rate: f64) -> Self {
        Schedule { start_ns, period_ns: if rate > 0.0 { 1e9 / rate } else { 0.0 } }
    }

    /// Whether ticks have due times (a rate above 0).
    pub fn is_paced(&self) -> bool {
        self.period_ns > 0.0
    }

    /// When tick `k` is due.
    #[inline]
    pub fn due(&self, k: u64) -> u64 {
        self.start_ns + (k as f64 * self.period_ns) as u64
    }

    /// How many ticks are due by `now_ns` (a paced schedule; 0 before the start).
    pub fn due_by(&self, now_ns: u64) -> u64 {
        match now_ns.checked_sub(self.start_ns) {
            Some(elapsed) if self.is_paced() => (elapsed as f64 / self.period_ns) as u64 + 1,
            _ => 0,
        }
    }

    /// Waits until `deadline_ns` (wall clock) or a stop: sleeps (in slices, so a long gap of
    /// a replay still sees a Ctrl-C); with `spin`, only for all but the last few microseconds,
    /// then yields until the deadline. Spinning keeps a core busy: on a virtual machine whose
    /// CPU time is capped, that time is taken from the pipeline, which then stalls whole.
    pub fn wait_until(deadline_ns: u64, spin: bool, stop: &Stop) {
        let spin_ns = if spin { SPIN_NS } else { 0 };
        loop {
            let now = now_ns();
            if now >= deadline_ns || stop.requested() {
                return;
            }
            let left = deadline_ns - now;
            if left > spin_ns {
                std::thread::sleep(Duration::from_nanos(left - spin_ns).min(MAX_SLEEP));
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Asks the kernel to wake this thread's sleeps on time: the default timer slack (50 us)
    /// would show up as latency. Best effort: without it pacing is only coarser.
    pub fn tighten_timer_slack() {
        #[cfg(target_os = "linux")]
        let _ = nix::sys::prctl::set_timerslack(1_000);
    }
}

/// How fast a replay goes: its recorded pace times a factor, or as fast as possible.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Speed {
    /// Event time passes this many times faster than at recording.
    Times(f64),
    /// As fast as possible.
    Max,
}

impl Speed {
    /// `max`, or a factor from 0.000001 to 1,000,000,000 (`1`, `10`, `0.5`, also written `10x`).
    pub fn parse(text: &str) -> Result<Speed, String> {
        if text.eq_ignore_ascii_case("max") {
            return Ok(Speed::Max);
        }
        let factor: f64 = text.strip_suffix(['x', 'X']).unwrap_or(text).parse().map_err(|_| {
            format!("`{text}` is not a speed: a positive factor of the recorded pace (1, 10, 0.5) or `max`")
        })?;
        if !(1e-6..=1e9).contains(&factor) {
            return Err(format!("speed {factor} must be from 0.000001 to 1000000000 (or `max`)"));
        }
        Ok(Speed::Times(factor))
    }
}

/// When each tick of a stream is due.
#[derive(Clone, Copy, Debug)]
pub enum Pace {
    /// As fast as possible: a tick's intended send time is when it is sent.
    Unpaced,
    /// A fixed rate.
    Rate(Schedule),
    /// A replay at its recorded pace: a tick is due `(t_event - first) / speed` after the start
    /// (never before the stream's previous tick, if the file's times go backwards).
    Recorded {
        /// When the stream starts (wall clock, ns): the file's first tick is due then.
        start_ns: u64,
        /// The event time of the replay file's first tick, ns.
        first_event_ns: u64,
        /// How many times faster than recorded.
        speed: f64,
    },
}

impl Pace {
    /// Whether ticks have due times.
    pub fn is_paced(&self) -> bool {
        !matches!(self, Pace::Unpaced)
    }

    /// When tick `k` is due, its event time being `t_event`; `previous` is when tick `k - 1`
    /// was due. `None` when unpaced.
    #[inline]
    pub fn due(&self, k: u64, t_event: Option<u64>, previous: u64) -> Option<u64> {
        match *self {
            Pace::Unpaced => None,
            Pace::Rate(schedule) => Some(schedule.due(k)),
            Pace::Recorded { start_ns, first_event_ns, speed } => {
                let offset = t_event.map_or(0, |t| t.saturating_sub(first_event_ns));
                // Float to integer saturates; a slow replay of a long file stops at 2^63.
                let due = start_ns.saturating_add((offset as f64 / speed) as u64).min(LATEST_DUE_NS);
                Some(due.max(previous))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_times_follow_the_rate() {
        let schedule = Schedule::new(1_000, 1_000_000.0);
        assert_eq!(schedule.due(0), 1_000);
        assert_eq!(schedule.due(3), 4_000);
        assert!(!Schedule::new(0, 0.0).is_paced());
        assert_eq!((schedule.due_by(999), schedule.due_by(1_000), schedule.due_by(4_500)), (0, 1, 4));
    }

    #[test]
    fn a_replay_keeps_its_recorded_gaps_times_the_speed() {
        let pace = Pace::Recorded { start_ns: 1_000, first_event_ns: 5_000, speed: 2.0 };
        assert_eq!(pace.due(0, Some(5_000), 0), Some(1_000));
        assert_eq!(pace.due(1, Some(9_000), 1_000), Some(3_000));
        // Times that go backwards do not send a tick before the one before it.
        assert_eq!(pace.due(2, Some(6_000), 3_000), Some(3_000));
        assert_eq!(Pace::Unpaced.due(0, Some(1), 0), None);
        assert_eq!(Speed::parse("max"), Ok(Speed::Max));
        assert_eq!(Speed::parse("10x"), Ok(Speed::Times(10.0)));
        assert!(Speed::parse("0").unwrap_err().contains("must be from 0.000001"));
        assert!(Speed::parse("1e-300").unwrap_err().contains("must be from 0.000001"));
        // The slowest replay of the longest file still has an intended send time on the wire.
        let slow = Pace::Recorded { start_ns: 1 << 62, first_event_ns: 0, speed: 1e-6 };
        assert_eq!(slow.due(0, Some(i64::MAX as u64), 0), Some(i64::MAX as u64));
        assert!(Speed::parse("fast").unwrap_err().contains("is not a speed"));
    }
}
