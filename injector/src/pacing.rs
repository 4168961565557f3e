//! The send schedule: tick `k` of a stream is due at `start + k / rate`. Waiting sleeps for
//! long gaps and yields for the last stretch, because a plain sleep overshoots by tens of
//! microseconds, which would show up as latency.

use cep_core::clock::now_ns;
use std::time::Duration;

/// The last stretch of a wait that is yielded rather than slept (a sleep can overshoot).
const SPIN_NS: u64 = 20_000;

#[derive(Clone, Copy, Debug)]
pub struct Schedule {
    start_ns: u64,
    /// Nanoseconds between ticks; 0 = as fast as possible.
    period_ns: f64,
}

impl Schedule {
    pub fn new(start_ns: u64, rate: f64) -> Self {
        Schedule { start_ns, period_ns: if rate > 0.0 { 1e9 / rate } else { 0.0 } }
    }

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

    /// Waits until `deadline_ns` (wall clock): sleeps for all but the last few microseconds,
    /// then yields until the deadline.
    pub fn wait_until(deadline_ns: u64) {
        loop {
            let now = now_ns();
            if now >= deadline_ns {
                return;
            }
            let left = deadline_ns - now;
            if left > SPIN_NS {
                std::thread::sleep(Duration::from_nanos(left - SPIN_NS));
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
}
