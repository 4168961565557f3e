//! What every role's driver shares: one receive loop over a PULL socket, and the [`Outbox`]
//! that sends a core's frames over ZeroMQ.

use crate::control::ControlServer;
use crate::delivery::CollectorLink;
use crate::socket::{Message, Pull, Push, TransportError};
use cep_core::outbox::{Outbox, Peer};
use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// What the receive loop hands its caller at each turn.
pub enum Received<'m> {
    /// A frame arrived.
    Frame {
        /// The frame's bytes, valid for this turn only.
        bytes: &'m [u8],
        /// On a secure socket, who sent it: the authentication's `User-Id`
        /// ([`crate::security::Sender`] reads it); `None` when open.
        sender: Option<crate::security::Sender<'m>>,
    },
    /// Nothing arrived within the poll interval: time for periodic work and flushes.
    Idle,
}

/// Whether the receive loop goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Receive the next frame.
    Continue,
    /// Read no input at the next turn (the core holds it back): wait a moment, then turn
    /// with [`Received::Idle`].
    Hold,
    /// Leave the loop.
    Stop,
}

/// Receives frames from `input` and hands each to `step` (or [`Received::Idle`] when none
/// came within `poll`), until `step` says stop; a `step` that says hold is turned again after
/// [`HOLD_WAIT`] without reading. The one receive loop of the worker and the collector (the
/// router, which also serves control requests in its loop, turns a [`Receiver`] itself).
pub fn receive_loop<E: From<TransportError>>(
    input: &Pull,
    poll: Duration,
    mut step: impl FnMut(Received<'_>) -> Result<Flow, E>,
) -> Result<(), E> {
    let mut receiver = Receiver::new();
    let mut flow = Flow::Continue;
    loop {
        let received = if flow == Flow::Hold {
            std::thread::sleep(HOLD_WAIT);
            Received::Idle
        } else {
            receiver.recv(input, poll)?.unwrap_or(Received::Idle)
        };
        flow = step(received)?;
        if flow == Flow::Stop {
            return Ok(());
        }
    }
}

/// Takes frames off a PULL socket into one message reused for every frame.
pub struct Receiver {
    message: Message,
    /// The sender's identity, copied out of each message (ZeroMQ lends it only with the
    /// message itself mutably borrowed).
    user_id: String,
}

impl Receiver {
    /// A receiver with an empty message.
    pub fn new() -> Receiver {
        Receiver { message: Message::new(), user_id: String::new() }
    }

    /// The next frame from `input`, waiting at most `timeout` for one; `None` when none came.
    pub fn recv<'m>(&'m mut self, input: &'m Pull, timeout: Duration) -> Result<Option<Received<'m>>, TransportError> {
        if !input.recv(&mut self.message, timeout)? {
            return Ok(None);
        }
        Ok(Some(self.received(input)))
    }

    /// The next frame from `input` if one is already queued (never waits).
    pub fn try_recv<'m>(&'m mut self, input: &'m Pull) -> Result<Option<Received<'m>>, TransportError> {
        if !input.try_recv(&mut self.message)? {
            return Ok(None);
        }
        Ok(Some(self.received(input)))
    }

    /// The frame just received, with its sender.
    fn received<'m>(&'m mut self, input: &'m Pull) -> Received<'m> {
        let sender = if input.is_secure() {
            self.user_id.clear();
            self.user_id.push_str(self.message.gets("User-Id").unwrap_or_default());
            Some(crate::security::Sender::new(&self.user_id))
        } else {
            None
        };
        Received::Frame { bytes: &self.message, sender }
    }
}

impl Default for Receiver {
    fn default() -> Self {
        Receiver::new()
    }
}

/// How long the receive loop waits between turns while a core holds its input.
pub const HOLD_WAIT: Duration = Duration::from_millis(10);

/// Sends a core's frames over the process's sockets: a frame for a worker whose queue is full
/// waits in the outbox ([`SocketOutbox::has_pending`]: the driver reads no input meanwhile,
/// lossless back-pressure, but still serves control); frames for the collector and the router
/// block while their queue is full, until `shutdown`. The first failure is kept for the
/// driver ([`SocketOutbox::check`]) and later data sends are skipped. A control answer that
/// cannot be delivered is logged: its client is gone, the run is not.
pub struct SocketOutbox<'s> {
    workers: Vec<Push>,
    collector: Option<CollectorLink>,
    control: Option<&'s ControlServer>,
    router: Option<&'s crate::control::ControlLink>,
    connector: Option<(&'s crate::Context, crate::SocketOptions)>,
    shutdown: &'s AtomicBool,
    failed: Option<TransportError>,
    /// Workers found dead (by index, with the reason), not yet taken by the driver; nothing
    /// more is sent to them.
    lost: Vec<(u32, String)>,
    dead: Vec<bool>,
    /// Per worker, frames its full queue did not take yet, in order ([`Self::flush_pending`]).
    pending: Vec<VecDeque<Vec<u8>>>,
}

impl<'s> SocketOutbox<'s> {
    /// An outbox over the given sockets; a frame for a peer without one is a bug in the core.
    pub fn new(
        workers: Vec<Push>,
        collector: Option<CollectorLink>,
        control: Option<&'s ControlServer>,
        shutdown: &'s AtomicBool,
    ) -> Self {
        let dead = vec![false; workers.len()];
        let pending = vec![VecDeque::new(); workers.len()];
        SocketOutbox {
            workers,
            collector,
            control,
            router: None,
            connector: None,
            shutdown,
            failed: None,
            lost: Vec::new(),
            dead,
            pending,
        }
    }

    /// Sends [`Peer::Router`] frames as requests on `link`, without waiting for the answers
    /// (the driver reads them from the link).
    pub fn with_router(mut self, link: &'s crate::control::ControlLink) -> Self {
        self.router = Some(link);
        self
    }

    /// Lets the core connect to workers that join while the run goes on.
    pub fn connecting(mut self, context: &'s crate::Context, options: crate::SocketOptions) -> Self {
        self.connector = Some((context, options));
        self
    }

    /// The workers' sockets, by index.
    pub fn workers(&self) -> &[Push] {
        &self.workers
    }

    /// The line to the collector.
    pub fn collector(&mut self) -> Option<&mut CollectorLink> {
        self.collector.as_mut()
    }

    /// Asks whether each worker and the collector are alive ([`Push::check_alive`]): a dead
    /// worker is set aside for [`Self::take_lost`]; a dead collector's frames are held, and
    /// sent again once it is reached ([`CollectorLink::poll`]).
    pub fn check_peers(&mut self) {
        for index in 0..self.workers.len() {
            if !self.dead[index] {
                if let Err(error) = self.workers[index].check_alive() {
                    self.worker_lost(index, error);
                }
            }
        }
        if let Some(collector) = &mut self.collector {
            if let Err(error) = collector.poll() {
                self.failed.get_or_insert(error);
            }
        }
    }

    /// Whether a worker's queue is full with frames still to give it: the driver then reads
    /// no input (back-pressure) but goes on serving control requests, and flushes.
    pub fn has_pending(&self) -> bool {
        self.pending.iter().any(|frames| !frames.is_empty())
    }

    /// Waits at most `timeout` until a control request arrives or a worker with frames waiting
    /// has room for one (the driver's wait while it reads no input); true when a control
    /// request waits.
    pub fn wait(&self, timeout: Duration) -> bool {
        let millis = timeout.as_millis().min(i64::MAX as u128) as i64;
        if !self.has_pending() {
            let Some(control) = self.control else {
                std::thread::sleep(timeout);
                return false;
            };
            // No allocation at the common turn.
            let mut items = [control.raw().as_poll_item(zmq::POLLIN)];
            let _ = zmq::poll(&mut items, millis);
            return items[0].is_readable();
        }
        let mut items: Vec<zmq::PollItem<'_>> = Vec::with_capacity(self.workers.len() + 1);
        items.extend(self.control.map(|control| control.raw().as_poll_item(zmq::POLLIN)));
        for (index, frames) in self.pending.iter().enumerate() {
            if !frames.is_empty() && !self.dead[index] {
                items.push(self.workers[index].raw().as_poll_item(zmq::POLLOUT));
            }
        }
        let _ = zmq::poll(&mut items, millis);
        self.control.is_some() && items[0].is_readable()
    }

    /// Gives each worker the frames its queue did not take, as far as it takes them now, in
    /// order. A worker found dead meanwhile is set aside ([`Self::take_lost`]).
    pub fn flush_pending(&mut self) {
        for index in 0..self.workers.len() {
            while let Some(frame) = self.pending[index].front() {
                match self.workers[index].try_send(frame) {
                    Ok(true) => {
                        self.pending[index].pop_front();
                    }
                    Ok(false) => break,
                    Err(error) => {
                        self.failed.get_or_insert(error);
                        break;
                    }
                }
            }
        }
    }

    fn worker_lost(&mut self, index: usize, error: TransportError) {
        self.mark_dead(index);
        self.lost.push((index as u32, error.to_string()));
    }

    /// Nothing more goes to worker `index`. Whatever it did not take is in the router's replay
    /// log, as what its queue held. Disconnected, not left to reconnect: a process started
    /// again at its address (a supervisor's restart, as a member of its own) must not get what
    /// was queued for it.
    fn mark_dead(&mut self, index: usize) {
        self.dead[index] = true;
        self.pending[index].clear();
        self.workers[index].disconnect();
    }

    /// The workers found dead since the last call: (index, why).
    pub fn take_lost(&mut self) -> Vec<(u32, String)> {
        std::mem::take(&mut self.lost)
    }

    /// The first send that failed since the last check, if one did.
    pub fn check(&mut self) -> Result<(), TransportError> {
        match self.failed.take() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
}

impl Outbox for SocketOutbox<'_> {
    fn send(&mut self, to: Peer, frame: &[u8]) {
        let push = match &to {
            Peer::Worker(index) => self.workers.get(*index as usize),
            Peer::Collector => {
                let collector = self.collector.as_mut().expect("a core sent to the collector without a line to it");
                if self.failed.is_none() {
                    if let Err(error) = collector.send(frame) {
                        self.failed = Some(error);
                    }
                }
                return;
            }
            Peer::Router => {
                let link = self.router.expect("a core sent to the router without a link to it");
                if self.failed.is_none() {
                    if let Err(error) = link.send(frame, self.shutdown) {
                        self.failed = Some(error);
                    }
                }
                return;
            }
            Peer::Client(client) => {
                let control = self.control.expect("a core answered a control request without a control socket");
                if let Err(error) = control.reply(client, frame) {
                    tracing::warn!(%error, "could not answer a control request");
                }
                return;
            }
        };
        if self.failed.is_some() {
            return;
        }
        let push = push.unwrap_or_else(|| panic!("a core sent to {to:?}, which has no socket here"));
        let Peer::Worker(index) = to else { unreachable!("only workers are left") };
        let index = index as usize;
        if self.dead[index] {
            return;
        }
        // A full queue does not block the router: the frame waits here, behind any other that
        // waits, and the driver reads no input until they are all given.
        if !self.pending[index].is_empty() {
            self.pending[index].push_back(frame.to_vec());
            return;
        }
        match push.try_send(frame) {
            Ok(true) => {}
            Ok(false) => self.pending[index].push_back(frame.to_vec()),
            Err(error) => self.failed = Some(error),
        }
    }

    fn disconnect_worker(&mut self, index: u32) {
        let index = index as usize;
        if index < self.workers.len() && !self.dead[index] {
            self.mark_dead(index);
        }
    }

    fn collector_moved(&mut self, endpoint: &str, key: &str, incarnation: u64) {
        if let Some(collector) = &mut self.collector {
            if let Err(error) = collector.moved(endpoint, key, incarnation) {
                self.failed.get_or_insert(error);
            }
        }
    }

    fn collector_saved(&mut self, position: u64, resend: bool) {
        if let Some(collector) = &mut self.collector {
            collector.saved(position);
            if resend {
                collector.resend();
            }
        }
    }

    fn now(&self) -> u64 {
        cep_core::clock::now_ns()
    }

    fn connect_worker(&mut self, index: u32, endpoint: &str, key: &str) {
        let (context, options) = self.connector.as_ref().expect("a core connected a worker without a connector");
        assert_eq!(index as usize, self.workers.len(), "workers join with the next index");
        match Push::connect(context, endpoint, crate::Server::Key(key), options) {
            Ok(push) => {
                self.workers.push(push);
                self.dead.push(false);
                self.pending.push(VecDeque::new());
            }
            Err(error) => {
                if self.failed.is_none() {
                    self.failed = Some(error);
                }
            }
        }
    }
}
