//! The line from a worker or the router to the collector, which outlives the collector: every
//! frame goes into a [`DeliveryLog`] (held until the collector has saved it) and then to the
//! socket while the collector lives. A dead collector is no error here: frames are held, and
//! when a restarted collector takes over ([`CollectorLink::moved`]) the line connects to it and
//! sends it everything held, in order.

use crate::socket::{Context, Push, SocketOptions, TransportError};
use cep_core::delivery::DeliveryLog;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// A sender's line to the collector.
pub struct CollectorLink {
    context: Context,
    options: SocketOptions,
    endpoint: String,
    /// `None` while the collector is lost.
    push: Option<Push>,
    log: DeliveryLog,
    /// Why the collector was taken for dead, until a new one takes over.
    lost: Option<String>,
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
        })
    }

    /// Holds `frame` and sends it if the collector lives. Fails only on a socket error or a
    /// shutdown; a dead collector is noted ([`Self::lost`]).
    pub fn send(&mut self, frame: &[u8], shutdown: &AtomicBool) -> Result<(), TransportError> {
        let envelope = self.log.push(frame);
        let Some(push) = &self.push else { return Ok(()) };
        match push.send(envelope, shutdown) {
            Err(error @ TransportError::PeerLost { .. }) => {
                self.lose(error);
                Ok(())
            }
            other => other,
        }
    }

    /// Asks whether the collector is alive (see [`Push::check_alive`]); a dead one is noted.
    pub fn check_alive(&mut self) {
        if let Some(Err(error)) = self.push.as_ref().map(Push::check_alive) {
            self.lose(error);
        }
    }

    fn lose(&mut self, error: TransportError) {
        if let Some(push) = self.push.take() {
            // Nothing queued for the dead one is wanted: it is all held and goes to the next.
            push.shorten_linger(Duration::ZERO);
        }
        tracing::warn!(
            collector = self.endpoint,
            "the collector is lost ({error}): holding its frames until one takes over"
        );
        self.lost = Some(error.to_string());
    }

    /// Why the collector was taken for dead, while no other has taken over.
    pub fn lost(&self) -> Option<&str> {
        self.lost.as_deref()
    }

    /// The collector saved every frame up to `position`.
    pub fn saved(&mut self, position: u64) {
        self.log.saved(position);
    }

    /// Collector incarnation `incarnation` at `endpoint` takes over (nothing changes for one
    /// already served): connects to it and sends it every frame it has not saved, in order.
    pub fn moved(&mut self, endpoint: &str, incarnation: u64, shutdown: &AtomicBool) -> Result<(), TransportError> {
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
        self.log.readdress(incarnation);
        let push = Push::connect(&self.context, endpoint, &self.options)?;
        let failed = self.log.held().find_map(|envelope| push.send(envelope, shutdown).err());
        match failed {
            None => self.push = Some(push),
            Some(error @ TransportError::PeerLost { .. }) => {
                push.shorten_linger(Duration::ZERO);
                self.lose(error);
            }
            Some(error) => return Err(error),
        }
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
