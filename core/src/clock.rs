//! Every timestamp in the system is nanoseconds since the Unix epoch, read from the wall clock
//! so that stamps taken by different processes on one host are comparable.

use std::time::{SystemTime, UNIX_EPOCH};

/// Nanoseconds since the Unix epoch.
#[inline]
pub fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}
