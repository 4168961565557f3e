//! ZeroMQ socket monitors, as every watcher here reads them: an inproc endpoint of its own for
//! each, and the events it sends, read as the numbers zmq.h gives them (the binding's
//! `SocketEvent::from_raw` panics on a value it does not know).

use std::sync::atomic::{AtomicU64, Ordering};

/// zmq.h's `ZMQ_EVENT_*` this crate watches.
pub(crate) const EVENT_CONNECTED: u32 = 0x0001;
pub(crate) const EVENT_DISCONNECTED: u32 = 0x0200;
pub(crate) const EVENT_MONITOR_STOPPED: u32 = 0x0400;
/// The connection closed mid-handshake.
pub(crate) const EVENT_HANDSHAKE_FAILED_NO_DETAIL: u32 = 0x0800;
/// Its value is a `ZMQ_PROTOCOL_ERROR_*`.
pub(crate) const EVENT_HANDSHAKE_FAILED_PROTOCOL: u32 = 0x2000;
/// Its value is the ZAP status code.
pub(crate) const EVENT_HANDSHAKE_FAILED_AUTH: u32 = 0x4000;
/// zmq.h's `ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH`: the peers' greetings name different
/// security mechanisms (CURVE on one side only).
pub(crate) const MECHANISM_MISMATCH: u32 = 0x1100_0002;

/// A name of its own for a monitor's inproc endpoint (two monitors cannot share one).
pub(crate) fn endpoint(purpose: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("inproc://cep-{purpose}-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Starts a monitor of `events` on `socket` and returns its reader, connected before any event
/// can be sent (a monitor's events reach only a reader already connected). If a step fails,
/// nothing is left watching.
pub(crate) fn watch(
    context: &zmq::Context,
    socket: &zmq::Socket,
    purpose: &str,
    events: u32,
) -> Result<zmq::Socket, crate::TransportError> {
    use crate::socket::socket_err;
    let name = endpoint(purpose);
    socket.monitor(&name, events as i32).map_err(socket_err("monitor a socket"))?;
    let reader = context
        .socket(zmq::PAIR)
        .and_then(|reader| reader.set_linger(0).and_then(|()| reader.connect(&name)).map(|()| reader))
        .map_err(socket_err("connect a socket monitor"));
    if reader.is_err() {
        stop(socket);
    }
    reader
}

/// Stops `socket`'s monitor: call it before the socket, or the monitor's reader, closes.
/// libzmq sends each event with a blocking send from its I/O thread, so an event for a
/// reader already closed stalls that thread, and every socket of the process with it. A
/// monitor of no events replaces the old one (libzmq stops one for a null endpoint, which the
/// zmq crate cannot pass): no event is sent from here on, whichever closes first.
pub(crate) fn stop(socket: &zmq::Socket) {
    let _ = socket.monitor(&endpoint("off"), 0);
}

/// One event a monitor sent.
pub(crate) struct Event {
    /// Its `ZMQ_EVENT_*`.
    pub kind: u32,
    /// Its value (an error code, a status, a file descriptor: the kind says).
    pub value: u32,
    parts: Vec<Vec<u8>>,
}

impl Event {
    /// The next event the monitor holds, without waiting (a malformed one is skipped).
    pub(crate) fn next(monitor: &zmq::Socket) -> Option<Event> {
        // Each event is two frames: (event u16 LE, value u32 LE), then the peer's address.
        loop {
            let parts = monitor.recv_multipart(zmq::DONTWAIT).ok()?;
            let Some(head) = parts.first().and_then(|head| head.get(..6)) else { continue };
            let kind = u32::from(u16::from_le_bytes([head[0], head[1]]));
            let value = u32::from_le_bytes([head[2], head[3], head[4], head[5]]);
            return Some(Event { kind, value, parts });
        }
    }

    /// The peer's address, as the monitor wrote it.
    pub(crate) fn address(&self) -> String {
        self.parts.get(1).map(|address| String::from_utf8_lossy(address).into_owned()).unwrap_or_default()
    }
}
