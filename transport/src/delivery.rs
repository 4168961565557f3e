//! The line from a worker or the router to the collector, which outlives the collector: every
//! frame goes into a [`DeliveryLog`] (held until the collector has saved it) and then to the
//! socket while the collector is reachable. A dead collector is no error here: frames are
//! held; ZeroMQ makes the connection again by itself, and when it is made again, or a
//! restarted collector takes over ([`CollectorLink::moved`]), the line sends it everything
//! held, in order ([`CollectorLink::poll`]).

use crate::socket::{Context, Push, SocketOptions, TransportError};
use cep_core::delivery::DeliveryLog;
use std::time::Duration;

/// A sender's line to the collector.
pub struct CollectorLink {
    context: Context,
    options: SocketOptions,
    endpoint: String,
    /// One socket per collector endpoint: ZeroMQ makes a dropped connection again by itself.
    push: Push,
    log: DeliveryLog,
    /// Why the collector was taken for dead, until it is reached again or another takes over.
    lost: Option<String>,
    /// The next held position to send again, while held frames go out again (after a
    /// connection was made again, to a collector that took over, or that missed some); new
    /// frames wait behind them.
    resend_from: Option<u64>,
    /// Connections of `push` seen so far: one more means the connection dropped and frames
    /// in flight on it may be lost.
    connections: u64,
}

impl CollectorLink {
    /// Connects to the collector at `endpoint` with CURVE key `key` (empty when open;
    /// incarnation `incarnation`) as source `source`, holding at most `max_held` bytes of
    /// unsaved frames before [`Self::full`].
    pub fn connect(
        context: &Context,
        endpoint: &str,
        key: &str,
        options: &SocketOptions,
        source: u32,
        incarnation: u64,
        max_held: usize,
    ) -> Result<CollectorLink, TransportError> {
        Ok(CollectorLink {
            context: context.clone(),
            options: options.clone(),
            endpoint: endpoint.to_string(),
            push: Push::connect(context, endpoint, crate::Server::Key(key), options)?,
            log: DeliveryLog::new(source, incarnation, max_held),
            lost: None,
            resend_from: None,
            connections: 0,
        })
    }

    /// Holds `frame` and sends it, behind any frame that waits to go out again, as far as the
    /// socket takes them without waiting: a collector that does not read (stopped, stuck)
    /// must not stop the sender's loop, which proves to the router that it is alive. What the
    /// socket does not take waits in the log (bounded: [`Self::full`]) for the next send or
    /// [`Self::poll`]. Fails only on a socket error; a dead collector is noted ([`Self::lost`]).
    pub fn send(&mut self, frame: &[u8]) -> Result<(), TransportError> {
        self.log.push(frame);
        let position = self.log.last_position();
        if self.lost.is_some() {
            return Ok(());
        }
        self.resend_from.get_or_insert(position);
        self.send_waiting()
    }

    /// Call often: notes a dead collector; once the connection is made again (ZeroMQ retries
    /// it by itself) or a resend is due, sends every held frame again, in order, as far as
    /// the socket takes them without waiting (the rest at the next call).
    pub fn poll(&mut self) -> Result<(), TransportError> {
        if let Err(error) = self.push.check_alive() {
            self.lose(error);
        }
        let connections = self.push.connections();
        if connections != self.connections {
            // A connection made again: what was in flight on the dropped one may be lost.
            if self.connections > 0 {
                self.resend_from = Some(self.log.first_position());
            }
            self.connections = connections;
        }
        if self.resend_from.is_none() || !self.push.connected() {
            return Ok(());
        }
        self.send_waiting()?;
        if self.resend_from.is_none() && self.lost.take().is_some() {
            tracing::info!(
                collector = self.endpoint,
                "the collector is reachable again: sent it what it had not saved"
            );
        }
        Ok(())
    }

    /// Before the process ends: hands every held frame not yet given to the socket over to it
    /// (the socket's linger then delivers them), waiting at most `within` for room. What
    /// is still left then is lost with the process (counted by the collector as frames that
    /// never came).
    pub fn hand_over(&mut self, within: Duration) -> Result<(), TransportError> {
        let deadline = std::time::Instant::now() + within;
        self.poll()?;
        while self.resend_from.is_some() && self.lost.is_none() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
            self.poll()?;
        }
        Ok(())
    }

    /// Sends the held frames from [`Self::resend_from`] on, in order, until the socket takes
    /// no more without waiting.
    fn send_waiting(&mut self) -> Result<(), TransportError> {
        let Some(from) = self.resend_from else { return Ok(()) };
        let mut position = from.max(self.log.first_position());
        while let Some(envelope) = self.log.get(position) {
            if !self.push.try_send(envelope)? {
                self.resend_from = Some(position);
                return Ok(());
            }
            position += 1;
        }
        self.resend_from = None;
        Ok(())
    }

    fn lose(&mut self, error: TransportError) {
        if self.lost.is_none() {
            tracing::warn!(
                collector = self.endpoint,
                "the collector is lost ({error}): holding its frames until it is back or one takes over"
            );
            self.lost = Some(error.to_string());
        }
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
        self.resend_from.get_or_insert(self.log.first_position());
    }

    /// Collector incarnation `incarnation` at `endpoint` takes over (nothing changes for one
    /// already served): connects to it and sends it every frame it has not saved, in order.
    pub fn moved(&mut self, endpoint: &str, key: &str, incarnation: u64) -> Result<(), TransportError> {
        if incarnation <= self.log.incarnation() {
            return Ok(());
        }
        tracing::info!(
            collector = endpoint,
            incarnation,
            held = self.log.held_bytes(),
            "a restarted collector took over: sending it what it has not saved"
        );
        let push = Push::connect(&self.context, endpoint, crate::Server::Key(key), &self.options)?;
        // Nothing queued for the one before is wanted: it is all held and goes out again.
        std::mem::replace(&mut self.push, push).shorten_linger(Duration::ZERO);
        self.endpoint = endpoint.to_string();
        self.lost = None;
        self.connections = 0;
        self.log.readdress(incarnation);
        self.resend_from = Some(self.log.first_position());
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
        self.push.shorten_linger(linger);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::Role;
    use crate::socket::{Message, Pull};
    use cep_core::delivery::{Arrival, Positions};
    use cep_core::frame::Frame;
    use std::time::Instant;

    /// The positions a collector takes (each once, in order) of the frames waiting at `pull`,
    /// until none comes for 300 ms.
    fn taken(pull: &Pull, positions: &mut Positions) -> Vec<u64> {
        let mut message = Message::new();
        let mut taken = Vec::new();
        while pull.recv(&mut message, Duration::from_millis(300)).unwrap() {
            let sequenced = Frame::read(&message, usize::MAX).unwrap().sequenced().unwrap();
            if positions.arrive(&sequenced, 1, 8) == Some(Arrival::Next) {
                taken.push(sequenced.position);
            }
        }
        taken
    }

    #[test]
    fn a_collector_reached_again_after_its_connection_dropped_gets_every_unsaved_frame_in_order() {
        let context = Context::new();
        let options = SocketOptions { failure_timeout: Some(Duration::from_millis(400)), ..SocketOptions::default() };
        let pull = Pull::bind(&context, "tcp://127.0.0.1:*", &options, &Role::ALL).unwrap();
        let endpoint = pull.endpoint().to_string();
        let mut link = CollectorLink::connect(&context, &endpoint, "", &options, 0, 1, 1 << 20).unwrap();
        let frame = cep_core::frame::Body::encode(&cep_core::failover::CheckpointMark { id: 1 }, 0);
        for _ in 0..3 {
            link.send(&frame).unwrap();
        }
        let mut positions = Positions::default();
        assert_eq!(taken(&pull, &mut positions), [1, 2, 3]);
        link.saved(1);
        // The connection drops (the collector's socket goes) and stays down: the line notices.
        drop(pull);
        let since = Instant::now();
        while link.lost().is_none() {
            assert!(since.elapsed() < Duration::from_secs(5), "the dropped connection was never noticed");
            link.send(&frame).unwrap();
            link.poll().unwrap();
            std::thread::sleep(Duration::from_millis(20));
        }
        let sent = link.log.last_position();
        // Back at the same endpoint: reached again, it gets every frame not saved, in order.
        let pull = Pull::bind(&context, &endpoint, &options, &Role::ALL).unwrap();
        while link.lost().is_some() {
            assert!(since.elapsed() < Duration::from_secs(15), "the collector was never reached again");
            link.poll().unwrap();
            std::thread::sleep(Duration::from_millis(20));
        }
        // (Frames queued before the drop may come first, out of turn: dropped, sent again.)
        assert_eq!(taken(&pull, &mut positions), (4..=sent).collect::<Vec<_>>());
    }

    #[test]
    fn a_collector_that_reads_nothing_never_stops_the_sender_and_gets_everything_in_order_once_it_reads() {
        let context = Context::new();
        let options = SocketOptions::default();
        let pull = Pull::bind(&context, "tcp://127.0.0.1:*", &options, &Role::ALL).unwrap();
        let mut link = CollectorLink::connect(&context, pull.endpoint(), "", &options, 0, 1, 64 << 20).unwrap();
        let frame = cep_core::frame::Body::encode(&cep_core::failover::CheckpointMark { id: 1 }, 0);
        // Far beyond both queues and the kernel's buffers: a blocking send would wait here
        // for ever, as the collector reads nothing yet.
        let sent = 200_000;
        for _ in 0..sent {
            link.send(&frame).unwrap();
        }
        assert!(link.resend_from.is_some(), "the socket took only part of it: the rest waits in the log");
        let mut positions = Positions::default();
        let mut message = Message::new();
        let mut taken = 0;
        let since = Instant::now();
        while taken < sent {
            assert!(since.elapsed() < Duration::from_secs(60), "{taken} of {sent} arrived");
            link.poll().unwrap();
            while pull.recv(&mut message, Duration::from_millis(10)).unwrap() {
                let sequenced = Frame::read(&message, usize::MAX).unwrap().sequenced().unwrap();
                assert_eq!(positions.arrive(&sequenced, 1, 8), Some(Arrival::Next), "in order, each once");
                taken += 1;
            }
        }
        assert_eq!(link.resend_from, None, "nothing waits");
    }
}
