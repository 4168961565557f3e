//! The injector's signs of life: a thread of its own sends the router an
//! [`InjectorHeartbeat`] with every stream's count at least every quarter of the router's
//! failure time-out, on a standing control link, from the start of the run to its end. An
//! injector the router hears nothing from for the time-out (stopped, paused, its host gone) has
//! its streams ended where the router has them, and is fenced: told so when it speaks again,
//! it stops at once. A router that gives the run up says why on the same link.

use cep_core::control::MAX_CONTROL_FRAME_BYTES;
use cep_core::frame::{Body, Frame};
use cep_core::liveness::{Abandoned, Fenced, InjectorHeartbeat};
use cep_core::wire::FrameKind;
use cep_transport::control::ControlLink;
use cep_transport::{Context, TransportError};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the thread looks at the link and the stop flags between two heartbeats.
const LOOK_EVERY: Duration = Duration::from_millis(20);

/// What the router said that ends the injector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It took this injector for dead and ended its streams without it.
    Fenced(String),
    /// It gave the run up, for this reason.
    Abandoned(String),
}

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
    /// that arrived before the link closed is read first).
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
    let mut verdict = None;
    loop {
        if stop_now.load(Ordering::Relaxed) {
            halt.store(true, Ordering::Relaxed);
        }
        let over = done.load(Ordering::Relaxed);
        if !over && verdict.is_none() && Instant::now() >= next_beat {
            let beat =
                InjectorHeartbeat { first, sent: sent.iter().map(|count| count.load(Ordering::Relaxed)).collect() };
            // A router that is gone is the senders' to notice (their sockets watch it).
            if let Err(error) = link.send(&beat.encode(first), halt) {
                tracing::debug!(%error, "heartbeat not sent");
            }
            next_beat += every;
        }
        while let Ok(Some((_, answer))) = link.try_recv() {
            if verdict.is_none() {
                verdict = read_verdict(&answer);
                if verdict.is_some() {
                    halt.store(true, Ordering::Relaxed);
                }
            }
        }
        if over {
            return verdict;
        }
        std::thread::sleep(LOOK_EVERY);
    }
}

/// The router's word on the link, if it ends the injector.
fn read_verdict(answer: &[u8]) -> Option<Verdict> {
    let frame = Frame::read(answer, MAX_CONTROL_FRAME_BYTES).ok()?;
    let unreadable = |error: cep_core::wire::WireError| format!("(unreadable: {error})");
    match frame.kind() {
        FrameKind::Fenced => Some(Verdict::Fenced(frame.body::<Fenced>().map_or_else(unreadable, |f| f.reason))),
        FrameKind::Abandoned => {
            Some(Verdict::Abandoned(frame.body::<Abandoned>().map_or_else(unreadable, |a| a.reason)))
        }
        kind => {
            tracing::warn!(?kind, "unexpected answer from the router on the heartbeat link");
            None
        }
    }
}
