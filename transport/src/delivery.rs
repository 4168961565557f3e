//! The line from a worker or the router to the collector, which outlives the collector: every
//! frame goes into a [`DeliveryLog`] (held until the collector has saved it) and then to the
//! socket while the collector is reachable. A dead collector is no error here: frames are
//! held; the line tries its endpoint again now and then ([`CollectorLink::poll`]), and when
//! it is reached again, or a restarted collector takes over ([`CollectorLink::moved`]), sends
//! it everything held, in order.

use crate::socket::{Context, Push, SocketOptions, TransportError};
use cep_core::delivery::DeliveryLog;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// How long after losing the collector a line tries its endpoint again (a collector that
/// lived through a dropped connection is reached again; a restarted one is taken over).
const RETRY_AFTER: Duration = Duration::from_secs(2);

/// A sender's line to the collector.
pub struct CollectorLink {
    context: Context,
    options: SocketOptions,
    endpoint: String,
    /// `None` while the collector is lost and not tried again yet.
    push: Option<Push>,
    log: DeliveryLog,
    /// Why the collector was taken for dead, until it is reached again or another takes over.
    lost: Option<String>,
    /// Held frames go out again, in order, once `push` is connected (a collector that took
    /// over, a connection made again, or a collector that missed some).
    resend_due: bool,
    /// When a lost collector's endpoint is tried again.
    retry_at: Option<Instant>,
}

impl CollectorLink {
    /// Connects to the collector at `endpoint` (incarnation `incarnation`) as source `source`,
    /// holding at most `max_held` bytes of unsaved frames before [`Self::full`].
    pub fn connect(
        context: &Context,
        endpoint: &str,
        options: &SocketOptions,
        source: u32,
        incarnation: u64,
        max_held: usize,
    ) -> Result<CollectorLink, TransportError> {
        Ok(CollectorLink {
            context: context.clone(),
            options: options.clone(),
            endpoint: endpoint.to_string(),
            push: Some(Push::connect(context, endpoint, options)?),
            log: DeliveryLog::new(source, incarnation, max_held),
            lost: None,
            resend_due: false,
            retry_at: None,
        })
    }

    /// Holds `frame` and sends it if the collector is reachable (otherwise it goes with the
    /// next resend). Fails only on a socket error or a shutdown; a dead collector is noted
    /// ([`Self::lost`]).
    pub fn send(&mut self, frame: &[u8], shutdown: &AtomicBool) -> Result<(), TransportError> {
        let envelope = self.log.push(frame);
        let Some(push) = self.push.as_ref().filter(|_| !self.resend_due) else { return Ok(()) };
        match push.send(envelope, shutdown) {
            Err(error @ TransportError::PeerLost { .. }) => {
                self.lose(error);
                Ok(())
            }
            other => other,
        }
    }

    /// Call often: notes a dead collector, tries a lost one's endpoint again after
    /// [`RETRY_AFTER`], and sends every held frame again once a new connection is up.
    pub fn poll(&mut self, shutdown: &AtomicBool) -> Result<(), TransportError> {
        if let Some(Err(error)) = self.push.as_ref().map(Push::check_alive) {
            self.lose(error);
        }
        if self.push.is_none() && self.retry_at.is_some_and(|at| Instant::now() >= at) {
            self.retry_at = None;
            self.push = Some(Push::connect(&self.context, &self.endpoint, &self.options)?);
            self.resend_due = true;
        }
        let Some(push) = self.push.as_ref().filter(|push| self.resend_due && push.connected()) else {
            return Ok(());
        };
        let failed = self.log.held().find_map(|envelope| push.send(envelope, shutdown).err());
        match failed {
            None => {
                self.resend_due = false;
                if self.lost.take().is_some() {
                    tracing::info!(
                        collector = self.endpoint,
                        "the collector is reachable again: sent it what it had not saved"
                    );
                }
                Ok(())
            }
            Some(error @ TransportError::PeerLost { .. }) => {
                self.lose(error);
                Ok(())
            }
            Some(error) => Err(error),
        }
    }

    fn lose(&mut self, error: TransportError) {
        if let Some(push) = self.push.take() {
            // Nothing queued for the dead one is wanted: it is all held and goes out again.
            push.shorten_linger(Duration::ZERO);
        }
        if self.lost.is_none() {
            tracing::warn!(
                collector = self.endpoint,
                "the collector is lost ({error}): holding its frames until it is back or one takes over"
            );
            self.lost = Some(error.to_string());
        }
        self.resend_due = false;
        self.retry_at = Some(Instant::now() + RETRY_AFTER);
    }

    /// Why the collector was taken for dead, while it is not reached again.
    pub fn lost(&self) -> Option<&str> {
        self.lost.as_deref()
    }

    /// The collector saved every frame up to `position`.
    pub fn saved(&mut self, position: u64) {
        self.log.saved(position);
    }

    /// The collector missed some frames: every held one goes out again (it drops those it has).
    pub fn resend(&mut self) {
        self.resend_due = true;
    }

    /// Collector incarnation `incarnation` at `endpoint` takes over (nothing changes for one
    /// already served): connects to it and sends it every frame it has not saved, in order.
    pub fn moved(&mut self, endpoint: &str, incarnation: u64) -> Result<(), TransportError> {
        if incarnation <= self.log.incarnation() {
            return Ok(());
        }
        if let Some(old) = self.push.take() {
            old.shorten_linger(Duration::ZERO);
        }
        tracing::info!(
            collector = endpoint,
            incarnation,
            held = self.log.held_bytes(),
            "a restarted collector took over: sending it what it has not saved"
        );
        self.endpoint = endpoint.to_string();
        self.lost = None;
        self.retry_at = None;
        self.log.readdress(incarnation);
        self.push = Some(Push::connect(&self.context, endpoint, &self.options)?);
        self.resend_due = true;
        Ok(())
    }

    /// Whether it holds its bound of unsaved frames: the sender stops taking work.
    pub fn full(&self) -> bool {
        self.log.full()
    }

    /// Whether the collector has saved everything sent.
    pub fn all_saved(&self) -> bool {
        self.log.is_empty()
    }

    /// Limits how long closing may wait to deliver what is queued (see [`Push::shorten_linger`]).
    pub fn shorten_linger(&self, linger: Duration) {
        if let Some(push) = &self.push {
            push.shorten_linger(linger);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::socket::{Message, Pull};
    use cep_core::frame::Frame;

    /// The positions of the sequenced frames waiting at `pull`, until none comes for 300 ms.
    fn positions(pull: &Pull) -> Vec<u64> {
        let mut message = Message::new();
        let mut positions = Vec::new();
        while pull.recv(&mut message, Duration::from_millis(300)).unwrap() {
            positions.push(Frame::read(&message, usize::MAX).unwrap().sequenced().unwrap().position);
        }
        positions
    }

    #[test]
    fn a_collector_reached_again_after_its_connection_dropped_gets_every_unsaved_frame_in_order() {
        let context = Context::new();
        let options = SocketOptions { failure_timeout: Some(Duration::from_millis(400)), ..SocketOptions::default() };
        let pull = Pull::bind(&context, "tcp://127.0.0.1:*", &options).unwrap();
        let endpoint = pull.endpoint().to_string();
        let mut link = CollectorLink::connect(&context, &endpoint, &options, 0, 1, 1 << 20).unwrap();
        let never = AtomicBool::new(false);
        let frame = cep_core::frame::Body::encode(&cep_core::failover::CheckpointMark { id: 1 }, 0);
        for _ in 0..3 {
            link.send(&frame, &never).unwrap();
        }
        assert_eq!(positions(&pull), [1, 2, 3]);
        link.saved(1);
        // The connection drops (the collector's socket goes) and stays down: the line notices.
        drop(pull);
        let since = Instant::now();
        while link.lost().is_none() {
            assert!(since.elapsed() < Duration::from_secs(5), "the dropped connection was never noticed");
            link.send(&frame, &never).unwrap();
            link.poll(&never).unwrap();
            std::thread::sleep(Duration::from_millis(20));
        }
        let sent = link.log.last_position();
        // Back at the same endpoint: reached again, it gets every frame not saved, in order.
        let pull = Pull::bind(&context, &endpoint, &options).unwrap();
        while link.lost().is_some() {
            assert!(since.elapsed() < Duration::from_secs(15), "the collector was never reached again");
            link.poll(&never).unwrap();
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(positions(&pull), (2..=sent).collect::<Vec<_>>());
    }
}
