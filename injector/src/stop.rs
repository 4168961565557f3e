//! How an injector is told to stop: gracefully (stop generating, end every stream with its
//! marker, so the cluster drains and nothing is lost) or at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The injector's two stop flags. A graceful stop ends each stream after the batch it is
/// sending, with an end-of-stream marker carrying the true count, then waits for the end of
/// the run as a stream that ran its course does: the run completes with nothing lost. A
/// hard stop also gives up on blocked sends and on that wait (the run is then incomplete).
#[derive(Clone, Debug, Default)]
pub struct Stop {
    /// Raised: stop generating and end every stream gracefully.
    pub graceful: Arc<AtomicBool>,
    /// Raised: stop at once (blocked sends and the wait for the end of the run give up).
    pub now: Arc<AtomicBool>,
}

impl Stop {
    /// A stop raised by either flag.
    pub fn new(graceful: Arc<AtomicBool>, now: Arc<AtomicBool>) -> Stop {
        Stop { graceful, now }
    }

    /// A stop that only `now` raises, and at once: what a role sharing one shutdown flag with
    /// the rest of its cluster gets.
    pub fn hard(now: Arc<AtomicBool>) -> Stop {
        Stop { graceful: Arc::new(AtomicBool::new(false)), now }
    }

    /// Whether a stop of either kind was asked for: no further tick is generated.
    #[inline]
    pub fn requested(&self) -> bool {
        self.graceful.load(Ordering::Relaxed) || self.now.load(Ordering::Relaxed)
    }

    /// Whether the hard stop was asked for.
    #[inline]
    pub fn is_hard(&self) -> bool {
        self.now.load(Ordering::Relaxed)
    }
}

/// Either stop ends a wait that comes before anything was sent (the registration).
#[cfg(feature = "driver")]
impl cep_transport::control::StopFlag for Stop {
    fn raised(&self) -> bool {
        self.requested()
    }
}
