//! Noticing a dead peer. ZeroMQ reconnects in the background and never says a peer is gone,
//! so a process blocked sending to a killed peer would wait for ever. A socket monitor
//! reports when the connection to the peer drops: a peer whose connection stays down for an
//! eighth of the failure time-out (250 ms by default) is dead (a killed process's kernel
//! closes its connections at once, and the reconnections fail; a connection that drops loses
//! the frames in flight, so it is not given long). A peer never reached is dead after ten
//! failure time-outs (connecting takes resolving and a handshake).
//!
//! ZeroMQ's own heartbeats (PING/PONG) are not used: a receiver that applies back-pressure
//! stops reading its connection, PINGs go unanswered, and the connection is closed with the
//! frames in flight: a loss. TCP keepalive is used instead (answered by the peer's kernel,
//! whatever its application does), so a host that vanishes without closing its connections is
//! noticed once its connection has been idle for a second and two probes went unanswered.
//!
//! A watched socket's owner stops the watch before the socket closes ([`PeerWatch::detach`]):
//! libzmq sends each event with a blocking send from its I/O thread, and one event for a
//! watch already dropped stalls that thread, and every socket of the process with it (seen as
//! a restarted collector's senders all falling silent at once).

use crate::monitor::{Event, EVENT_CONNECTED, EVENT_DISCONNECTED};
use crate::socket::{socket_err, TransportError};
use std::cell::Cell;
use std::time::{Duration, Instant};

/// How long a peer may be unreachable before it counts as dead, by default.
pub const DEFAULT_FAILURE_TIMEOUT: Duration = Duration::from_secs(2);

/// The longest keepalive interval Linux takes (seconds); a longer one fails the connection.
const MAX_KEEPALIVE_INTERVAL_S: u64 = 32_767;

/// TCP keepalive on `socket`: probes after a second idle, every quarter of the failure
/// time-out (at least a second: the kernel counts in seconds; at most what it takes), two
/// unanswered ones close it.
fn keepalive(socket: &zmq::Socket, timeout: Duration) -> Result<(), TransportError> {
    let interval = (timeout.as_secs() / 4).clamp(1, MAX_KEEPALIVE_INTERVAL_S) as i32;
    socket.set_tcp_keepalive(1).map_err(socket_err("set TCP keepalive"))?;
    socket.set_tcp_keepalive_idle(1).map_err(socket_err("set TCP keepalive idle time"))?;
    socket.set_tcp_keepalive_intvl(interval).map_err(socket_err("set TCP keepalive interval"))?;
    socket.set_tcp_keepalive_cnt(2).map_err(socket_err("set TCP keepalive probes"))?;
    Ok(())
}

/// A peer never connected is taken for dead after this many failure time-outs.
const NEVER_REACHED_FACTOR: u32 = 10;

/// Whether the connection to the peer is up, from the monitor's events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Link {
    /// Not yet connected since this instant (the socket was created).
    Never(Instant),
    Up,
    /// Down since this instant.
    Down(Instant),
}

/// Watches the one peer a connecting socket talks to.
pub struct PeerWatch {
    /// `None` for in-process peers (`inproc://`): threads of this process, which cannot die
    /// alone.
    monitor: Option<zmq::Socket>,
    link: Cell<Link>,
    /// Connections made so far (a dropped connection that ZeroMQ makes again counts again).
    connections: Cell<u64>,
    /// The failure time-out.
    timeout: Duration,
}

impl PeerWatch {
    /// Starts watching `socket`, which connects (or is about to connect) to `endpoint`; call
    /// it before `connect`, so the first connection's events are seen.
    pub(crate) fn attach(
        context: &zmq::Context,
        socket: &zmq::Socket,
        endpoint: &str,
        timeout: Duration,
    ) -> Result<PeerWatch, TransportError> {
        let link = Cell::new(Link::Never(Instant::now()));

        if endpoint.starts_with("inproc://") {
            return Ok(PeerWatch { monitor: None, link, connections: Cell::new(1), timeout });
        }
        keepalive(socket, timeout)?;
        let monitor = crate::monitor::watch(context, socket, "monitor", EVENT_CONNECTED | EVENT_DISCONNECTED)?;
        Ok(PeerWatch { monitor: Some(monitor), link, connections: Cell::new(0), timeout })
    }

    /// Connections made so far: one more each time ZeroMQ makes a dropped connection again
    /// (frames in flight on the dropped one are lost).
    pub fn connections(&self) -> u64 {
        self.read_events();
        self.connections.get()
    }

    /// Whether the connection is up now (an in-process peer always is).
    pub fn connected(&self) -> bool {
        self.read_events();
        self.monitor.is_none() || self.link.get() == Link::Up
    }

    /// How long the peer has been unreachable and whether it was ever reached, once it is
    /// dead (`None`: alive, or not yet known dead).
    pub fn lost(&self) -> Option<(Duration, bool)> {
        self.monitor.as_ref()?;
        self.read_events();
        match self.link.get() {
            // Not at once: a loaded host has been seen to drop and remake a live connection.
            Link::Down(since) if since.elapsed() > self.timeout / 8 => Some((since.elapsed(), true)),
            // A peer never reached gets longer: connecting takes resolving and a handshake.
            Link::Never(since) if since.elapsed() > self.timeout * NEVER_REACHED_FACTOR => {
                Some((since.elapsed(), false))
            }
            _ => None,
        }
    }

    /// Stops watching `socket`, the socket it was attached to: its owner calls it before the
    /// socket closes, at any time in the run ([`crate::monitor::stop`]).
    pub(crate) fn detach(&self, socket: &zmq::Socket) {
        if self.monitor.is_some() {
            // Read first: libzmq holds the lock that stopping takes while it waits on a full
            // queue of events.
            self.read_events();
            crate::monitor::stop(socket);
        }
    }

    fn read_events(&self) {
        let Some(monitor) = self.monitor.as_ref() else { return };
        while let Some(event) = Event::next(monitor) {
            tracing::trace!(event = event.kind, "connection event");
            match event.kind {
                EVENT_CONNECTED => {
                    self.connections.set(self.connections.get() + 1);
                    if let Link::Never(since) = self.link.get() {
                        tracing::debug!(after = ?since.elapsed(), "first connection");
                    }
                    self.link.set(Link::Up)
                }
                EVENT_DISCONNECTED if self.link.get() == Link::Up => self.link.set(Link::Down(Instant::now())),
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::security::{Role, Server};
    use crate::socket::{Pull, Push, SocketOptions, TransportError};
    use std::sync::atomic::AtomicBool;
    use std::time::{Duration, Instant};

    #[test]
    fn a_send_to_a_peer_that_died_fails_naming_it_instead_of_waiting_for_ever() {
        let options = SocketOptions {
            high_water_mark: 4,
            failure_timeout: Some(Duration::from_millis(400)),
            ..SocketOptions::default()
        };
        let peer_context = crate::Context::new();
        let pull = Pull::bind(&peer_context, "tcp://127.0.0.1:*", &options, &Role::ALL).unwrap();
        let context = crate::Context::new();
        let push = Push::connect(&context, pull.endpoint(), Server::Router, &options).unwrap();
        let never = AtomicBool::new(false);
        push.send(b"hello", &never).unwrap();
        let mut message = zmq::Message::new();
        assert!(pull.recv(&mut message, Duration::from_secs(5)).unwrap(), "connected");
        assert!(push.check_alive().is_ok());
        // The peer dies: its connection closes; the queue fills; the send gives up.
        drop(pull);
        drop(peer_context);
        let died = Instant::now();
        let error = loop {
            if let Err(error) = push.send(&[0; 1024], &never) {
                break error;
            }
            assert!(died.elapsed() < Duration::from_secs(10), "never noticed");
        };
        assert!(matches!(error, TransportError::PeerLost { .. }), "{error}");
        assert!(error.to_string().contains("taken for dead"), "{error}");
        assert!(push.check_alive().is_err());
    }

    /// libzmq sends each monitor event with a blocking send from its I/O thread: a watched
    /// socket closed while its first connection is being made (a collector's old socket
    /// replaced when a restarted one takes over) must not leave an event for a reader already
    /// gone, which would stall that thread and every socket of the process with it.
    #[test]
    fn closing_watched_sockets_as_they_connect_leaves_the_context_moving() {
        let options = SocketOptions { failure_timeout: Some(Duration::from_secs(2)), ..SocketOptions::default() };
        let context = crate::Context::new();
        let pull = Pull::bind(&context, "tcp://127.0.0.1:*", &options, &Role::ALL).unwrap();
        let mut message = zmq::Message::new();
        for round in 0..300 {
            // Closed at once: its connection, and the event that says so, race the close.
            drop(Push::connect(&context, pull.endpoint(), Server::Router, &options).unwrap());
            if round % 30 == 29 {
                let push = Push::connect(&context, pull.endpoint(), Server::Router, &options).unwrap();
                push.send(b"still moving", &AtomicBool::new(false)).unwrap();
                assert!(
                    pull.recv(&mut message, Duration::from_secs(5)).unwrap(),
                    "round {round}: the context stopped moving frames"
                );
            }
        }
    }

    #[test]
    fn a_busy_peer_is_alive() {
        let options = SocketOptions {
            high_water_mark: 2,
            failure_timeout: Some(Duration::from_millis(400)),
            ..SocketOptions::default()
        };
        let context = crate::Context::new();
        let pull = Pull::bind(&context, "tcp://127.0.0.1:*", &options, &Role::ALL).unwrap();
        let push = Push::connect(&context, pull.endpoint(), Server::Router, &options).unwrap();
        let stop = AtomicBool::new(false);
        push.send(b"x", &stop).unwrap();
        // Nobody reads: the queue is full, but the connection stands.
        let since = Instant::now();
        while since.elapsed() < Duration::from_millis(1200) {
            assert!(push.check_alive().is_ok());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[cfg(test)]
mod link_tests {
    use crate::control::{ControlLink, ControlServer};
    use std::time::{Duration, Instant};

    #[test]
    fn a_control_link_to_a_live_router_stays_alive() {
        let context = crate::Context::new();
        let server = ControlServer::bind(&context, "tcp://127.0.0.1:*").unwrap();
        let link = ControlLink::connect(&context, server.endpoint(), Some(Duration::from_millis(400))).unwrap();
        let since = Instant::now();
        while since.elapsed() < Duration::from_millis(1200) {
            assert!(link.check_alive().is_ok(), "{:?}", link.check_alive());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
