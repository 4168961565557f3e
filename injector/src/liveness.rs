//! The injector's signs of life: a thread of its own sends the router an
//! [`InjectorHeartbeat`] with every stream's count at least every quarter of the router's
//! failure time-out, on a standing control link, from the start of the run to its end. An
//! injector the router hears nothing from for the time-out (stopped, paused, its host gone) has
//! its streams ended where the router has them, and is fenced: told so when it speaks again,
//! it stops at once. A router that gives the run up says why on the same link.

use cep_core::control::MAX_CONTROL_FRAME_BYTES;
use cep_core::frame::{Body, Frame};
use cep_core::liveness::InjectorHeartbeat;
pub use cep_core::liveness::Verdict;
use cep_transport::control::ControlLink;
use cep_transport::{Context, TransportError};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the thread looks at the link and the stop flags between two heartbeats.
const LOOK_EVERY: Duration = Duration::from_millis(20);

/// How long an injector that was stopped and woke waits at its end for the router's answer to
/// the beat it sent on waking (Fenced, if its streams were ended without it).
const ANSWER_AFTER_WAKING: Duration = Duration::from_secs(1);

/// The heartbeat thread, running until [`Liveness::finish`].
pub struct Liveness {
    done: Arc<AtomicBool>,
    thread: JoinHandle<Option<Verdict>>,
}

impl Liveness {
    /// Starts beating for streams `first..first + sent.len()` (`sent`: each stream's count,
    /// kept by its sender) every `every` over a link to the router's control endpoint. The
    /// thread raises `halt` when the router's word ends the injector, and passes `stop_now`
    /// (the caller's stop at once) on to it.
    pub fn start(
        context: &Context,
        router: &str,
        first: u32,
        sent: Arc<[AtomicU64]>,
        every: Duration,
        stop_now: Arc<AtomicBool>,
        halt: Arc<AtomicBool>,
    ) -> Result<Liveness, TransportError> {
        let link = ControlLink::connect(context, router, None)?;
        let done = Arc::new(AtomicBool::new(false));
        let finished = done.clone();
        let identity = cep_telemetry::identity::current();
        let thread = std::thread::spawn(move || {
            cep_telemetry::identity::set_for_thread(&identity.role, &identity.id);
            beat(&link, first, &sent, every, &stop_now, &halt, &finished)
        });
        Ok(Liveness { done, thread })
    }

    /// Stops beating and returns what the router said, if it ended the injector (a notice
    /// that arrived before the link closed is read first; one woken from a stop waits up to
    /// a second for the answer to its beat).
    pub fn finish(self) -> Option<Verdict> {
        self.done.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or(None)
    }
}

fn beat(
    link: &ControlLink,
    first: u32,
    sent: &[AtomicU64],
    every: Duration,
    stop_now: &AtomicBool,
    halt: &AtomicBool,
    done: &AtomicBool,
) -> Option<Verdict> {
    let mut next_beat = Instant::now();
    let mut last_turn = Instant::now();
    // When it last beat after a gap in its own turning (it was stopped): the router may answer
    // that beat with Fenced, which the end waits a moment for.
    let mut woken_at: Option<Instant> = None;
    let mut verdict = None;
    loop {
        if stop_now.load(Ordering::Relaxed) {
            halt.store(true, Ordering::Relaxed);
        }
        let now = Instant::now();
        if now.duration_since(last_turn) > every * 2 {
            woken_at = Some(now);
        }
        last_turn = now;
        let over = done.load(Ordering::Relaxed);
        if !over && verdict.is_none() && now >= next_beat {
            let beat =
                InjectorHeartbeat { first, sent: sent.iter().map(|count| count.load(Ordering::Relaxed)).collect() };
            // Never blocks: a beat the link cannot take now is dropped (a router that does not
            // read is the senders' to notice: their sockets watch it).
            if let Err(error) = link.try_send_notice(&beat.encode(first)) {
                tracing::debug!(%error, "heartbeat not sent");
            }
            next_beat = now + every;
        }
        while let Ok(Some((_, answer))) = link.try_recv() {
            let word = Frame::read(&answer, MAX_CONTROL_FRAME_BYTES).ok().and_then(|frame| Verdict::of(&frame));
            if verdict.is_none() && word.is_some() {
                verdict = word;
                halt.store(true, Ordering::Relaxed);
            }
        }
        let awaiting_answer = woken_at.is_some_and(|at| at.elapsed() < ANSWER_AFTER_WAKING);
        if over && (verdict.is_some() || !awaiting_answer) {
            return verdict;
        }
        std::thread::sleep(LOOK_EVERY);
    }
}
