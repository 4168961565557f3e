//! Every timestamp in the system is nanoseconds since the Unix epoch, read from the wall clock
//! so that stamps taken by different processes are comparable.
//!
//! Hosts' clocks differ. Each node measures its offset to the collector's clock when a run
//! starts ([`estimate_offset`] over samples taken by the transport) and [`set_offset`]s it,
//! so that every stamp it takes from then on is in the collector's time. For tests, a node can
//! be given an artificial skew ([`set_skew`]) that the estimate must then cancel.
//!
//! Timers are another matter: a deadline must not fire or hold because the wall clock stepped.
//! Cores take the time their timers run on as a [`Monotonic`], a point on the process's
//! monotonic clock (in the simulation, the virtual clock); stamps stay wall-clock nanoseconds.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A point on a monotonic clock, nanoseconds from an origin of the driver's choosing (the first
/// reading in the process; the simulation's start). What every timer and deadline of a core
/// runs on; never compared with a wall-clock stamp.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Monotonic(u64);

impl Monotonic {
    /// The point `ns` nanoseconds after the origin.
    pub const fn from_ns(ns: u64) -> Monotonic {
        Monotonic(ns)
    }

    /// Nanoseconds since the origin.
    pub const fn as_ns(self) -> u64 {
        self.0
    }

    /// The process's monotonic clock now (its origin: the first call).
    pub fn now() -> Monotonic {
        static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        Monotonic(u64::try_from(ORIGIN.get_or_init(std::time::Instant::now).elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    /// The point `duration` after this one (the latest point there is, if past it).
    pub fn after(self, duration: std::time::Duration) -> Monotonic {
        Monotonic(self.0.saturating_add(u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)))
    }

    /// How long after `earlier` this is (zero if it is not after).
    pub fn since(self, earlier: Monotonic) -> std::time::Duration {
        std::time::Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

/// A cadence on the monotonic clock: due once `period` has passed since it last fired.
#[derive(Clone, Copy, Debug)]
pub struct Every {
    period: std::time::Duration,
    last: Monotonic,
}

impl Every {
    /// A cadence of `period`, first due `period` after `start`.
    pub fn new(period: std::time::Duration, start: Monotonic) -> Every {
        Every { period, last: start }
    }

    /// Its period.
    pub fn period(&self) -> std::time::Duration {
        self.period
    }

    /// Whether it is due at `now`; if so, it fires (the next one is `period` later).
    pub fn fire(&mut self, now: Monotonic) -> bool {
        let due = now.since(self.last) >= self.period;
        if due {
            self.last = now;
        }
        due
    }
}

static SKEW_NS: AtomicI64 = AtomicI64::new(0);
static OFFSET_NS: AtomicI64 = AtomicI64::new(0);

fn system_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

/// This host's clock (with any artificial skew), before offset correction.
#[inline]
pub fn local_ns() -> u64 {
    system_ns().wrapping_add_signed(SKEW_NS.load(Ordering::Relaxed))
}

/// Nanoseconds since the Unix epoch in the run's reference time (the collector's clock, once
/// this node has estimated its offset).
#[inline]
pub fn now_ns() -> u64 {
    local_ns().wrapping_add_signed(OFFSET_NS.load(Ordering::Relaxed))
}

/// Makes this process's clock run `skew_ns` off (tests of the offset estimate).
pub fn set_skew(skew_ns: i64) {
    SKEW_NS.store(skew_ns, Ordering::Relaxed);
}

/// Applies an estimated offset to every later [`now_ns`].
pub fn set_offset(offset_ns: i64) {
    OFFSET_NS.store(offset_ns, Ordering::Relaxed);
}

/// One NTP-style exchange: local send time, the reference's time, local receive time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockSample {
    /// Local clock when the request left, ns.
    pub sent: u64,
    /// The reference's clock when it answered, ns.
    pub reference: u64,
    /// Local clock when the answer came back, ns.
    pub received: u64,
}

/// An offset estimate: add `offset_ns` to local time to get reference time; the true offset
/// lies within `uncertainty_ns` of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct OffsetEstimate {
    /// Add to local time to get the reference's time, ns.
    pub offset_ns: i64,
    /// How far the true offset may be from `offset_ns`: half the round trip, ns.
    pub uncertainty_ns: u64,
}

/// The best of several samples: the one with the shortest round trip, whose reference reading
/// is the most tightly bracketed (NTP's clock filter, in its simplest form).
pub fn estimate_offset(samples: &[ClockSample]) -> Option<OffsetEstimate> {
    samples.iter().filter(|s| s.received >= s.sent).min_by_key(|s| s.received - s.sent).map(|s| {
        let midpoint = s.sent as i128 + (s.received - s.sent) as i128 / 2;
        OffsetEstimate {
            offset_ns: (s.reference as i128 - midpoint) as i64,
            uncertainty_ns: (s.received - s.sent).div_ceil(2),
        }
    })
}

/// Parses a signed duration such as `-50ms` or `2s` into nanoseconds.
pub fn parse_skew(text: &str) -> Result<i64, String> {
    let (sign, magnitude) = match text.trim().strip_prefix('-') {
        Some(rest) => (-1, rest),
        None => (1, text.trim()),
    };
    let duration = crate::duration::parse_duration(magnitude)?;
    Ok(sign * duration.as_nanos() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shortest_round_trip_wins() {
        // True offset +1000 ns; the second sample has the tightest bracket.
        let samples = [
            ClockSample { sent: 100, reference: 1_400, received: 700 },
            ClockSample { sent: 1_000, reference: 2_050, received: 1_100 },
            ClockSample { sent: 2_000, reference: 3_500, received: 2_900 },
        ];
        let estimate = estimate_offset(&samples).unwrap();
        assert_eq!(estimate, OffsetEstimate { offset_ns: 1_000, uncertainty_ns: 50 });
        assert!(estimate_offset(&[]).is_none());
    }

    #[test]
    fn skews_parse_with_a_sign() {
        assert_eq!(parse_skew("-50ms").unwrap(), -50_000_000);
        assert_eq!(parse_skew("2s").unwrap(), 2_000_000_000);
        assert!(parse_skew("-soon").is_err());
    }
}
