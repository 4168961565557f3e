//! The control channel: the router binds a ROUTER socket; every other process asks it
//! questions over REQ. ROUTER lets the router hold an answer back (until the cluster is
//! complete) while it keeps serving other clients.

use crate::context::SocketRole;
use crate::monitor::{
    Event, EVENT_CONNECTED, EVENT_DISCONNECTED, EVENT_HANDSHAKE_FAILED_AUTH, EVENT_HANDSHAKE_FAILED_NO_DETAIL,
    EVENT_HANDSHAKE_FAILED_PROTOCOL, MECHANISM_MISMATCH,
};
use crate::security::{identity_of, Identity, Role, Server};
use crate::socket::{socket_err, TransportError};
use crate::Context;
use cep_core::control::MAX_CONTROL_FRAME_BYTES;
use cep_core::wire::FrameKind;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A client's identity on the control socket, used to address the answer.
pub type ClientId = Vec<u8>;

/// The router's end of the control channel.
pub struct ControlServer {
    socket: crate::context::Socket,
    endpoint: String,
    /// Whether it runs CURVE: then every request names its sender, and one that does not is
    /// dropped (never served as if the socket were open).
    secure: bool,
}

impl ControlServer {
    /// The socket, to wait on it with others.
    pub(crate) fn raw(&self) -> &zmq::Socket {
        &self.socket
    }

    /// Binds the ROUTER socket at `endpoint`. On a secure context it admits every role but the
    /// router's; what each may ask is the router's to decide, by the [`Identity`] of each request.
    pub fn bind(context: &Context, endpoint: &str) -> Result<ControlServer, TransportError> {
        const ADMITS: &[Role] = &[Role::Worker, Role::Collector, Role::Injector, Role::Operator];
        let socket = context.socket(zmq::ROUTER, SocketRole::Binds(ADMITS))?;
        socket.set_linger(1000).map_err(socket_err("set linger"))?;
        // A request larger than any control frame is cut off by ZeroMQ before it is buffered
        // (a worker's state hand-off is the largest legitimate one).
        socket.set_maxmsgsize(MAX_CONTROL_FRAME_BYTES as i64).map_err(socket_err("set maximum message size"))?;
        // A standing link that reconnects keeps its identity: its new connection takes over the
        // old one's, so what the router pushes to it still arrives.
        socket.set_router_handover(true).map_err(socket_err("set router handover"))?;
        crate::socket::bind(&socket, endpoint)?;
        let endpoint = socket
            .get_last_endpoint()
            .map_err(socket_err("read bound endpoint"))?
            .unwrap_or_else(|raw| String::from_utf8_lossy(&raw).into_owned());
        Ok(ControlServer { socket, endpoint, secure: context.is_secure() })
    }

    /// The endpoint actually bound (with the port chosen for `*`).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The next request, if one arrives within `timeout`: the client, the body, and on a
    /// secure context who sent it. Requests that are not a REQ envelope (`identity, empty,
    /// body`) are returned with an empty body.
    pub fn recv(&self, timeout: Duration) -> Result<Option<Request>, TransportError> {
        match self.socket.poll(zmq::POLLIN, timeout.as_millis() as i64) {
            Ok(0) | Err(zmq::Error::EINTR) => return Ok(None),
            Ok(_) => {}
            Err(source) => return Err(TransportError::Socket { what: "poll control", source }),
        }
        // The identity ROUTER puts first, then the REQ envelope: only the first and the last
        // part are kept, however many a client sends.
        let mut identity = zmq::Message::new();
        self.socket.recv(&mut identity, zmq::DONTWAIT).map_err(socket_err("receive control"))?;
        let mut body = zmq::Message::new();
        let mut more = identity.get_more();
        while more {
            self.socket.recv(&mut body, zmq::DONTWAIT).map_err(socket_err("receive control"))?;
            more = body.get_more();
        }
        let peer = identity_of(&mut body);
        if self.secure && peer.is_none() {
            tracing::warn!("dropped a control request that names no authenticated sender");
            return Ok(None);
        }
        let client = identity.to_vec();
        Ok(Some(Request { client, body: body.to_vec(), peer }))
    }

    /// Answers one client.
    pub fn reply(&self, client: &[u8], body: &[u8]) -> Result<(), TransportError> {
        self.socket.send_multipart([client, &[][..], body], zmq::DONTWAIT).map_err(socket_err("answer control request"))
    }
}

/// One control request.
#[derive(Debug)]
pub struct Request {
    /// Who to answer.
    pub client: ClientId,
    /// The frame.
    pub body: Vec<u8>,
    /// The sender as authenticated, on a secure context (`None` when open).
    pub peer: Option<Identity>,
}

/// A standing line to the router's control socket (DEALER) for requests the sender must not
/// wait on: a worker's state hand-off and its leave request go out at once, the worker goes on
/// reading its input (the router may be blocked sending to it), and the answers are read when
/// the worker looks. Answers come back in the order of the requests.
pub struct ControlLink {
    watch: Option<crate::liveness::PeerWatch>,
    socket: crate::context::Socket,
    endpoint: String,
    /// The kind byte of each request not answered yet, oldest first.
    pending: std::cell::RefCell<std::collections::VecDeque<u8>>,
}

impl ControlLink {
    /// Connects to the router's control endpoint; with a `failure_timeout`, the router is
    /// watched ([`ControlLink::check_alive`]).
    pub fn connect(
        context: &Context,
        endpoint: &str,
        failure_timeout: Option<Duration>,
    ) -> Result<ControlLink, TransportError> {
        let socket = context.socket(zmq::DEALER, SocketRole::Connects { server: Server::Router, endpoint })?;
        socket.set_linger(1000).map_err(socket_err("set linger"))?;
        // An identity of its own that outlives a reconnection: the router pushes notices to it
        // (see `ControlServer::bind`).
        socket.set_identity(&link_identity()).map_err(socket_err("set routing id"))?;
        socket.set_maxmsgsize(MAX_CONTROL_FRAME_BYTES as i64).map_err(socket_err("set maximum message size"))?;
        let watch = failure_timeout
            .map(|timeout| crate::liveness::PeerWatch::attach(context.zmq(), &socket, endpoint, timeout))
            .transpose()?;
        // Made before it connects: if connecting fails, dropping it stops the watch.
        let link = ControlLink { socket, endpoint: endpoint.to_string(), watch, pending: Default::default() };
        link.socket
            .connect(endpoint)
            .map_err(|source| TransportError::Connect { endpoint: endpoint.to_string(), source })?;
        Ok(link)
    }

    /// Fails with [`TransportError::PeerLost`] once the router is dead: its connection down
    /// for longer than the failure time-out allows ([`crate::liveness`]).
    pub fn check_alive(&self) -> Result<(), TransportError> {
        match self.watch.as_ref().and_then(crate::liveness::PeerWatch::lost) {
            Some((down_for, reached)) => {
                Err(TransportError::PeerLost { peer: self.endpoint.clone(), down_for, reached })
            }
            None => Ok(()),
        }
    }

    /// Sends one request (as a REQ envelope, so the router serves it like any other); blocks
    /// only while the link's queue is full, giving up when `stop` is raised.
    pub fn send(&self, body: &[u8], stop: &AtomicBool) -> Result<(), TransportError> {
        loop {
            match self.socket.send_multipart([&[][..], body], zmq::DONTWAIT) {
                Ok(()) => break,
                Err(zmq::Error::EAGAIN) if !stop.load(Ordering::Relaxed) => {
                    self.check_alive()?;
                    std::thread::sleep(Duration::from_millis(1))
                }
                Err(source) => return Err(TransportError::Socket { what: "send control request", source }),
            }
        }
        let kind = body.get(2).copied().unwrap_or(0);
        if !FrameKind::is_notice_byte(kind) {
            self.pending.borrow_mut().push_back(kind);
        }
        Ok(())
    }

    /// Sends one notice (a frame the router answers no request for, such as a heartbeat) if the
    /// link's queue takes it now; false, and nothing sent, when it is full. Never blocks.
    pub fn try_send_notice(&self, body: &[u8]) -> Result<bool, TransportError> {
        debug_assert!(FrameKind::is_notice_byte(body.get(2).copied().unwrap_or(0)));
        match self.socket.send_multipart([&[][..], body], zmq::DONTWAIT) {
            Ok(()) => Ok(true),
            Err(zmq::Error::EAGAIN) => Ok(false),
            Err(source) => Err(TransportError::Socket { what: "send control notice", source }),
        }
    }

    /// The next answer if one has arrived: (the kind byte of the request it answers, the answer).
    /// A notice the router pushes unasked ([`FrameKind::is_notice`]) answers no request: 0.
    pub fn try_recv(&self) -> Result<Option<(u8, Vec<u8>)>, TransportError> {
        match self.socket.recv_multipart(zmq::DONTWAIT) {
            Ok(mut parts) => {
                let answer = parts.pop().unwrap_or_default();
                if answer.get(2).is_some_and(|&kind| FrameKind::is_notice_byte(kind)) {
                    return Ok(Some((0, answer)));
                }
                let asked = self.pending.borrow_mut().pop_front().unwrap_or(0);
                Ok(Some((asked, answer)))
            }
            Err(zmq::Error::EAGAIN) => Ok(None),
            Err(source) => Err(TransportError::Socket { what: "receive control answer", source }),
        }
    }
}

impl Drop for ControlLink {
    fn drop(&mut self) {
        if let Some(watch) = &self.watch {
            watch.detach(&self.socket);
        }
    }
}

/// A routing identity for a standing link: 16 bytes from the operating system's random
/// source, so that no other client of the control socket can guess it and, by the handover,
/// take the link's answers and notices (a process and time stamp only if that source fails).
fn link_identity() -> Vec<u8> {
    use std::io::Read;
    let mut random = [0u8; 16];
    if std::fs::File::open("/dev/urandom").and_then(|mut source| source.read_exact(&mut random)).is_ok() {
        // ZeroMQ reserves identities that start with a zero byte.
        random[0] |= 1;
        return random.to_vec();
    }
    static LINKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let count = LINKS.fetch_add(1, Ordering::Relaxed);
    format!("link-{}-{nanos}-{count}", std::process::id()).into_bytes()
}

/// ZeroMQ resolves host names in the background and retries silently, so a name that never
/// resolves would look like a peer that never answers. Resolve it here first, retrying until
/// the deadline (a container's name appears only once it runs), and say so if it never does.
fn wait_until_resolvable(endpoint: &str, deadline: Instant, shutdown: &dyn StopFlag) -> Result<(), TransportError> {
    use std::net::ToSocketAddrs;
    let Some(host_port) = endpoint.strip_prefix("tcp://") else {
        return Ok(());
    };
    loop {
        let error = match host_port.to_socket_addrs().map(|mut addresses| addresses.next()) {
            Ok(Some(_)) => return Ok(()),
            Ok(None) => "no address".to_string(),
            Err(error) => error.to_string(),
        };
        if Instant::now() >= deadline || shutdown.raised() {
            return Err(TransportError::Unresolvable { endpoint: endpoint.to_string(), reason: error });
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Sends one request to the router's control socket and waits for the answer, at most
/// `timeout`, giving up early if `shutdown` is raised. A router that turns the connection
/// away in the handshake (a key it does not admit, CURVE on one side only, a handshake it
/// does not accept) is said at once ([`TransportError::HandshakeRefused`]), and one that
/// closed every handshake is said at the time-out, not as silence.
pub fn request(
    context: &Context,
    endpoint: &str,
    body: &[u8],
    timeout: Duration,
    shutdown: &dyn StopFlag,
) -> Result<Vec<u8>, TransportError> {
    request_until(context, endpoint, body, timeout, shutdown, OnRefusal::TryAgain)
}

/// An operator's one-off request (`cep cluster`, `cep rules deploy`): as [`request`], but the
/// first refusal (a handshake the server closes, a key it does not admit) is its answer. A
/// process registering keeps trying, since a router may still be starting or about to read
/// a key just listed; a refused command is refused once. Without keys it reads the server's
/// greeting first ([`crate::greeting`]), which a CURVE server counts as exactly one refusal
/// (then it stops there); with keys it connects once.
pub fn request_once(
    context: &Context,
    endpoint: &str,
    body: &[u8],
    timeout: Duration,
) -> Result<Vec<u8>, TransportError> {
    // Without keys, the server's greeting says first whether it runs CURVE, in a way it
    // counts as one refusal ([`crate::greeting`]); libzmq's client may leave it uncounted.
    if !context.is_secure()
        && crate::greeting::server_answer(endpoint, timeout.min(GREETING_WAIT))
            == Some(crate::greeting::Answer::Refused)
    {
        let reason = KEYLESS_TO_CURVE.to_string();
        return Err(TransportError::HandshakeRefused { peer: endpoint.to_string(), reason });
    }
    let never = std::sync::atomic::AtomicBool::new(false);
    request_until(context, endpoint, body, timeout, &never, OnRefusal::GiveUp)
}

/// What a request does when the server closes its handshake without a word, or refuses its
/// key.
#[derive(Clone, Copy, PartialEq, Eq)]
enum OnRefusal {
    /// Connect again: a closed handshake until the time-out (ZeroMQ connects again by
    /// itself), a refused key once more after the server reloads its keys.
    TryAgain,
    /// Take the first as the server's answer.
    GiveUp,
}

fn request_until(
    context: &Context,
    endpoint: &str,
    body: &[u8],
    timeout: Duration,
    shutdown: &dyn StopFlag,
    on_refusal: OnRefusal,
) -> Result<Vec<u8>, TransportError> {
    let started = Instant::now();
    let deadline = started + timeout;
    wait_until_resolvable(endpoint, deadline, shutdown)?;
    let stopped = || TransportError::Stopped { peer: endpoint.to_string(), waited: started.elapsed() };
    let refused = |reason: String| TransportError::HandshakeRefused { peer: endpoint.to_string(), reason };
    let mut asked_again = false;
    loop {
        match ask_once(context, endpoint, body, deadline, shutdown, on_refusal)? {
            Asked::Answer(answer) => return Ok(answer),
            Asked::Stopped => return Err(stopped()),
            Asked::TimedOut { closed_handshakes: 0 } => {
                return Err(TransportError::Timeout { peer: endpoint.to_string(), timeout })
            }
            Asked::TimedOut { closed_handshakes } => {
                let hint = match context.is_secure() {
                    // A CURVE server that cannot read the HELLO (a client told another
                    // server key) closes the connection without a word.
                    true => "does --keys hold its current public key (router/router.pub)?",
                    // So does one that reads a greeting without CURVE in it.
                    false => "if it runs under CURVE, give this process --key and --keys; if not, is it a cep router's control endpoint?",
                };
                let tries = match on_refusal {
                    OnRefusal::TryAgain => {
                        format!("in every handshake ({closed_handshakes} tries in {timeout:?})")
                    }
                    OnRefusal::GiveUp => "in the handshake".to_string(),
                };
                return Err(refused(format!("it closed the connection {tries}: {hint}")));
            }
            // The server reads its public keys again at most once a second: a key listed a
            // moment ago is admitted when asked again after that (the request never reached
            // the server, so asking again repeats nothing). A second refusal is the answer.
            Asked::TurnedAway(TurnedAway::Key(reason)) if !asked_again && on_refusal == OnRefusal::TryAgain => {
                asked_again = true;
                let again = Instant::now() + KEY_RELOAD_WAIT;
                while Instant::now() < again.min(deadline) && !shutdown.raised() {
                    std::thread::sleep(Duration::from_millis(50));
                }
                if shutdown.raised() {
                    return Err(stopped());
                }
                if Instant::now() >= deadline {
                    return Err(refused(reason));
                }
            }
            Asked::TurnedAway(TurnedAway::Key(reason) | TurnedAway::Handshake(reason)) => return Err(refused(reason)),
        }
    }
}

/// How one attempt at a request ended.
enum Asked {
    Answer(Vec<u8>),
    TurnedAway(TurnedAway),
    /// No answer by the deadline; the server closed this many handshakes meanwhile.
    TimedOut {
        closed_handshakes: u32,
    },
    Stopped,
}

/// One connection's attempt at a request, until `deadline`. libzmq does not connect again
/// after a handshake the server refused (a protocol error), so a refusal ends the attempt.
fn ask_once(
    context: &Context,
    endpoint: &str,
    body: &[u8],
    deadline: Instant,
    shutdown: &dyn StopFlag,
    on_refusal: OnRefusal,
) -> Result<Asked, TransportError> {
    let socket = context.socket(zmq::REQ, SocketRole::Connects { server: Server::Router, endpoint })?;
    socket.set_linger(0).map_err(socket_err("set linger"))?;
    socket.set_maxmsgsize(MAX_CONTROL_FRAME_BYTES as i64).map_err(socket_err("set maximum message size"))?;
    let mut socket = WatchedRequest::watch(context, socket)?;
    socket.connect(endpoint).map_err(|source| TransportError::Connect { endpoint: endpoint.to_string(), source })?;
    socket.send(body, 0).map_err(socket_err("send control request"))?;
    // A request may wait long for its answer (a worker's, until the cluster is complete), but
    // one without a connection to its server (never made, or dropped: the server stopped) is
    // said, once each, while it goes on trying (in-process peers cannot be unreachable and
    // have no connection events).
    let watched = !endpoint.starts_with("inproc://");
    let (mut up_at, mut said_unreached, mut said_dropped) = (Instant::now(), false, false);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if shutdown.raised() {
            return Ok(Asked::Stopped);
        }
        if let Some(turned_away) = socket.turned_away(context.is_secure()) {
            return Ok(Asked::TurnedAway(turned_away));
        }
        if socket.connected {
            up_at = Instant::now();
        } else if watched && up_at.elapsed() >= UNREACHED_WARNING {
            if !socket.ever_connected && !std::mem::replace(&mut said_unreached, true) {
                tracing::warn!(
                    "nothing at {endpoint} has accepted a connection for {UNREACHED_WARNING:?}: is a router running \
                     there? (still trying, for {left:.0?} more)"
                );
            } else if socket.ever_connected && !std::mem::replace(&mut said_dropped, true) {
                tracing::warn!(
                    "the connection to {endpoint} dropped before it answered and is not back after \
                     {UNREACHED_WARNING:?}: has the router stopped? (still trying, for {left:.0?} more)"
                );
            }
        }
        let give_up = on_refusal == OnRefusal::GiveUp && socket.closed_handshakes > 0;
        if left.is_zero() || give_up {
            return Ok(Asked::TimedOut { closed_handshakes: socket.closed_handshakes });
        }
        match socket.wait(left.min(Duration::from_millis(100))) {
            Ok(false) | Err(zmq::Error::EINTR) => continue,
            Ok(true) => return socket.recv_bytes(0).map(Asked::Answer).map_err(socket_err("receive control answer")),
            Err(source) => return Err(TransportError::Socket { what: "poll control", source }),
        }
    }
}

/// Why a server under CURVE turns a client without keys away.
const KEYLESS_TO_CURVE: &str = "it runs under CURVE: give this process --key and --keys";

/// The longest an operator's request without keys waits for the server's greeting.
const GREETING_WAIT: Duration = Duration::from_secs(2);

/// How long a request goes without a connection to its server before it says so (once).
const UNREACHED_WARNING: Duration = Duration::from_secs(5);

/// How long a request whose key was refused waits before it asks again: a little more than
/// the second within which a server's authentication handler reads its public keys again.
const KEY_RELOAD_WAIT: Duration = Duration::from_millis(1_200);

/// Why the server turned a request's connection away in the handshake.
#[derive(Debug, PartialEq, Eq)]
enum TurnedAway {
    /// Its authentication handler refused this process's key (a key listed since is admitted
    /// when asked again).
    Key(String),
    /// The handshake itself failed (CURVE on one side only, another socket type, a malformed
    /// command): asking again changes nothing.
    Handshake(String),
}

/// A request's socket with a monitor of its connection and handshakes, so that a server that
/// turns it away is said at once instead of as a time-out, and one not reached is said too.
/// The monitor is stopped before either socket closes ([`crate::monitor::stop`]).
struct WatchedRequest {
    /// The reader of the socket's events (dropped before the socket: fields drop in order).
    events: zmq::Socket,
    socket: crate::context::Socket,
    /// Handshakes the server closed without a word (ZeroMQ connects again after each).
    closed_handshakes: u32,
    /// Whether a connection to the server is up.
    connected: bool,
    /// Whether one ever was.
    ever_connected: bool,
}

impl WatchedRequest {
    fn watch(context: &Context, socket: crate::context::Socket) -> Result<WatchedRequest, TransportError> {
        let watched = EVENT_HANDSHAKE_FAILED_AUTH
            | EVENT_HANDSHAKE_FAILED_PROTOCOL
            | EVENT_HANDSHAKE_FAILED_NO_DETAIL
            | EVENT_CONNECTED
            | EVENT_DISCONNECTED;
        let events = crate::monitor::watch(context.zmq(), &socket, "request-handshakes", watched)?;
        Ok(WatchedRequest { events, socket, closed_handshakes: 0, connected: false, ever_connected: false })
    }

    /// Waits up to `timeout` for the answer (true) or a connection or handshake event (false):
    /// woken by the event at once, a refused request ends before ZeroMQ connects again, so the
    /// server counts one refusal for it, not two.
    fn wait(&self, timeout: Duration) -> Result<bool, zmq::Error> {
        let mut items = [self.socket.as_poll_item(zmq::POLLIN), self.events.as_poll_item(zmq::POLLIN)];
        zmq::poll(&mut items, timeout.as_millis() as i64)?;
        Ok(items[0].is_readable())
    }

    /// The first refusal among the handshake events so far (`secure`: this process runs
    /// CURVE); counts the handshakes closed without one, and notes whether a connection is up.
    fn turned_away(&mut self, secure: bool) -> Option<TurnedAway> {
        while let Some(Event { kind, value, .. }) = Event::next(&self.events) {
            match kind {
                EVENT_HANDSHAKE_FAILED_AUTH => {
                    return Some(TurnedAway::Key(match value {
                        400 => "this process's key is not admitted there: not listed among the cluster's public keys, \
                                or not for a role that endpoint admits (is it the router's control endpoint, and the \
                                right --key?)"
                            .to_string(),
                        status => format!("its authentication handler answered status {status}"),
                    }));
                }
                EVENT_HANDSHAKE_FAILED_PROTOCOL => {
                    return Some(TurnedAway::Handshake(match (value, secure) {
                        (MECHANISM_MISMATCH, true) => {
                            "it runs open (no CURVE): give it --key and --keys too, or run this process with --insecure"
                                .to_string()
                        }
                        (MECHANISM_MISMATCH, false) => KEYLESS_TO_CURVE.to_string(),
                        (code, _) => format!(
                            "ZeroMQ protocol error {code:#x} (another kind of socket, or not ZeroMQ): is it the router's \
                             control endpoint?"
                        ),
                    }));
                }
                EVENT_HANDSHAKE_FAILED_NO_DETAIL => self.closed_handshakes += 1,
                EVENT_CONNECTED => (self.connected, self.ever_connected) = (true, true),
                EVENT_DISCONNECTED => self.connected = false,
                _ => {}
            }
        }
        None
    }
}

impl std::ops::Deref for WatchedRequest {
    type Target = zmq::Socket;

    fn deref(&self) -> &zmq::Socket {
        &self.socket
    }
}

impl Drop for WatchedRequest {
    fn drop(&mut self) {
        crate::monitor::stop(&self.socket);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_larger_than_any_control_frame_never_reaches_the_server() {
        let context = Context::new();
        let server = ControlServer::bind(&context, "tcp://127.0.0.1:*").unwrap();
        let link = ControlLink::connect(&context, server.endpoint(), None).unwrap();
        let never = AtomicBool::new(false);
        link.send(&vec![0u8; MAX_CONTROL_FRAME_BYTES + 1], &never).unwrap();
        link.send(b"small", &never).unwrap();
        // The oversized one is cut off with its connection; whatever arrives is within the limit.
        let mut received = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && received.is_empty() {
            if let Some(request) = server.recv(Duration::from_millis(100)).unwrap() {
                received.push(request.body.len());
            }
        }
        assert!(received.iter().all(|len| *len <= MAX_CONTROL_FRAME_BYTES), "{received:?}");
    }

    #[test]
    fn held_answers_reach_their_clients() {
        let context = Context::new();
        let server = ControlServer::bind(&context, "tcp://127.0.0.1:*").unwrap();
        let endpoint = server.endpoint().to_string();
        let shutdown = AtomicBool::new(false);
        let clients: Vec<_> = (0..3u8)
            .map(|i| {
                let (context, endpoint) = (context.clone(), endpoint.clone());
                std::thread::spawn(move || {
                    request(&context, &endpoint, &[i], Duration::from_secs(10), &AtomicBool::new(false)).unwrap()
                })
            })
            .collect();
        let mut held = Vec::new();
        while held.len() < 3 {
            if let Some(request) = server.recv(Duration::from_secs(5)).unwrap() {
                held.push(request);
            }
        }
        for request in &held {
            server.reply(&request.client, &[request.body[0] + 10]).unwrap();
        }
        let mut answers: Vec<u8> = clients.into_iter().map(|c| c.join().unwrap()[0]).collect();
        answers.sort();
        assert_eq!(answers, vec![10, 11, 12]);
        let silent = ControlServer::bind(&context, "tcp://127.0.0.1:*").unwrap();
        let error = request(&context, silent.endpoint(), b"x", Duration::from_millis(200), &shutdown).unwrap_err();
        assert!(error.to_string().starts_with("no answer from"), "{error}");
        // Told to stop while it waits: it gives up at once, and says so (not a time-out).
        shutdown.store(true, Ordering::Relaxed);
        let error = request(&context, silent.endpoint(), b"x", Duration::from_secs(60), &shutdown).unwrap_err();
        assert!(matches!(error, TransportError::Stopped { waited, .. } if waited < Duration::from_secs(60)), "{error}");
        assert!(error.to_string().starts_with("stopped while waiting for an answer from tcp://127.0.0.1:"), "{error}");
    }

    /// A server answering every request that reaches it with `answer`, in a thread, until
    /// `stop`; its endpoint.
    fn answering(context: Context, stop: std::sync::Arc<AtomicBool>) -> (String, std::thread::JoinHandle<()>) {
        let (endpoint_tx, endpoint_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let server = ControlServer::bind(&context, "tcp://127.0.0.1:*").unwrap();
            endpoint_tx.send(server.endpoint().to_string()).unwrap();
            while !stop.load(Ordering::Relaxed) {
                if let Some(request) = server.recv(Duration::from_millis(50)).unwrap() {
                    server.reply(&request.client, b"answer").unwrap();
                }
            }
        });
        (endpoint_rx.recv().unwrap(), thread)
    }

    #[test]
    fn a_router_that_turns_the_connection_away_is_said_at_once_and_a_key_listed_since_gets_in() {
        use crate::security::{write_public, Credentials, KeyPair};
        let dir = tempfile::tempdir().unwrap();
        let [router, operator, stranger, late] = [(); 4].map(|()| KeyPair::generate().unwrap());
        write_public(router.public(), &dir.path().join("router/router.pub")).unwrap();
        write_public(operator.public(), &dir.path().join("operator/operator.pub")).unwrap();
        let secure = |own: &KeyPair| {
            let credentials =
                Credentials { own: own.clone(), keys_dir: dir.path().to_path_buf(), router: router.public().clone() };
            Context::secure(credentials).unwrap()
        };
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let server_context = secure(&router);
        let (endpoint, server) = answering(server_context.clone(), stop.clone());
        let (open_endpoint, open_server) = answering(Context::new(), stop.clone());
        let never = AtomicBool::new(false);
        let ask = |context: &Context, endpoint: &str| request(context, endpoint, b"x", Duration::from_secs(60), &never);
        let refusals = || {
            server_context
                .refusals()
                .iter()
                .filter(|(cause, _)| cause.starts_with("unauthenticated_"))
                .map(|(_, n)| n)
                .sum::<u64>()
        };

        assert_eq!(ask(&secure(&operator), &endpoint).unwrap(), b"answer");
        // A key nobody listed: refused, asked once more after the handler could have read the
        // keys again, refused again, and said (not a time-out).
        let error = ask(&secure(&stranger), &endpoint).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "{endpoint} refused the handshake: this process's key is not admitted there: not listed among the \
                 cluster's public keys, or not for a role that endpoint admits (is it the router's control endpoint, \
                 and the right --key?)"
            )
        );
        assert_eq!(refusals(), 2, "{:?}", server_context.refusals());
        // CURVE on one side only: said at once.
        let error = ask(&Context::new(), &endpoint).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!("{endpoint} refused the handshake: it runs under CURVE: give this process --key and --keys")
        );
        let error = ask(&secure(&operator), &open_endpoint).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!("{open_endpoint} refused the handshake: it runs open (no CURVE): give it --key and --keys too, or run this process with --insecure")
        );
        // A client told another router key: the router cannot read its HELLO and closes every
        // handshake without a word; said at the time-out, not as silence.
        let misinformed = Context::secure(Credentials {
            own: operator.clone(),
            keys_dir: dir.path().to_path_buf(),
            router: KeyPair::generate().unwrap().public().clone(),
        })
        .unwrap();
        let error = request(&misinformed, &endpoint, b"x", Duration::from_secs(2), &never).unwrap_err();
        let TransportError::HandshakeRefused { reason, .. } = &error else { panic!("{error}") };
        assert!(reason.starts_with("it closed the connection in every handshake ("), "{reason}");
        assert!(reason.ends_with("does --keys hold its current public key (router/router.pub)?"), "{reason}");
        // A key listed just after its first refusal gets in when it asks again.
        let late_context = secure(&late);
        let asking = std::thread::spawn({
            let endpoint = endpoint.clone();
            move || request(&late_context, &endpoint, b"x", Duration::from_secs(60), &AtomicBool::new(false))
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        while refusals() < 3 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(refusals(), 3, "the late key was refused once");
        write_public(late.public(), &dir.path().join("operator/late.pub")).unwrap();
        assert_eq!(asking.join().unwrap().unwrap(), b"answer");
        assert_eq!(refusals(), 3);
        stop.store(true, Ordering::Relaxed);
        server.join().unwrap();
        open_server.join().unwrap();
    }

    #[test]
    fn an_operator_without_keys_is_refused_by_a_curve_router_and_counted_once_each_time() {
        use crate::security::{write_public, Credentials, KeyPair};
        let dir = tempfile::tempdir().unwrap();
        let router = KeyPair::generate().unwrap();
        write_public(router.public(), &dir.path().join("router/router.pub")).unwrap();
        let credentials =
            Credentials { own: router.clone(), keys_dir: dir.path().into(), router: router.public().clone() };
        let server_context = Context::secure(credentials).unwrap();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let (endpoint, server) = answering(server_context.clone(), stop.clone());
        let (open_endpoint, open_server) = answering(Context::new(), stop.clone());
        let failed = || server_context.refusals().get("handshake_failed_worker_collector_injector_operator").copied();
        for tries in 1..=5 {
            let error = request_once(&Context::new(), &endpoint, b"x", Duration::from_secs(10)).unwrap_err();
            assert_eq!(
                error.to_string(),
                format!("{endpoint} refused the handshake: it runs under CURVE: give this process --key and --keys")
            );
            // Counted by the router's handler thread as it reads the failure: wait for it.
            let deadline = Instant::now() + Duration::from_secs(10);
            while failed() < Some(tries) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            assert_eq!(failed(), Some(tries), "{:?}", server_context.refusals());
        }
        // A router without CURVE answers the same client; nothing more was counted meanwhile.
        assert_eq!(request_once(&Context::new(), &open_endpoint, b"x", Duration::from_secs(10)).unwrap(), b"answer");
        assert_eq!(server_context.refusals().values().sum::<u64>(), 5, "{:?}", server_context.refusals());
        stop.store(true, Ordering::Relaxed);
        server.join().unwrap();
        open_server.join().unwrap();
    }
}

/// Asks the router (`kind`: AwaitEnd or RunFinished) and waits for its EndAck, at most
/// `timeout`. Nodes keep their data sockets open until then: ZeroMQ can drop what a peer had
/// already sent if the peer disconnects while the receiver's queue is full, so nobody
/// disconnects before the collector has everything.
pub fn end_of_run(
    context: &Context,
    router: &str,
    ask: EndOfRun,
    timeout: Duration,
    shutdown: &dyn StopFlag,
) -> Result<(), TransportError> {
    use cep_core::frame::{AwaitEnd, Body, EndAck, Frame, RunFinished};
    let body = match ask {
        EndOfRun::AwaitEnd => AwaitEnd.encode(0),
        EndOfRun::RunFinished => RunFinished.encode(0),
    };
    let answer = request(context, router, &body, timeout, shutdown)?;
    Frame::read(&answer, MAX_CONTROL_FRAME_BYTES)
        .and_then(|frame| frame.body::<EndAck>())
        .map(|EndAck| ())
        .map_err(|error| TransportError::BadAnswer { peer: router.to_string(), reason: error.to_string() })
}

/// What a node tells the router at the end of its run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndOfRun {
    /// "I have sent everything; tell me when the run is over" (workers, injectors).
    AwaitEnd,
    /// "I have everything" (the collector): the router releases everyone.
    RunFinished,
}

/// What a blocking wait polls to give up early: a shutdown flag, or a role's own stop.
pub trait StopFlag {
    /// Whether the wait should give up now.
    fn raised(&self) -> bool;
}

impl StopFlag for AtomicBool {
    fn raised(&self) -> bool {
        self.load(Ordering::Relaxed)
    }
}

/// A stop flag that also gives up when a peer is found dead: `alive` is asked at each look
/// (a wait for the end of the run watches the router's connections with it).
pub struct StopOrLost<'a> {
    stop: &'a dyn StopFlag,
    alive: Box<dyn Fn() -> Result<(), TransportError> + 'a>,
    lost: std::cell::RefCell<Option<TransportError>>,
}

impl<'a> StopOrLost<'a> {
    /// Raised by `stop`, or once `alive` fails.
    pub fn new(stop: &'a dyn StopFlag, alive: impl Fn() -> Result<(), TransportError> + 'a) -> StopOrLost<'a> {
        StopOrLost { stop, alive: Box::new(alive), lost: std::cell::RefCell::new(None) }
    }

    /// Why the peer was found dead, if it was.
    pub fn lost(self) -> Option<TransportError> {
        self.lost.into_inner()
    }
}

impl StopFlag for StopOrLost<'_> {
    fn raised(&self) -> bool {
        if self.lost.borrow().is_none() {
            if let Err(error) = (self.alive)() {
                *self.lost.borrow_mut() = Some(error);
            }
        }
        self.stop.raised() || self.lost.borrow().is_some()
    }
}

impl<T: StopFlag + ?Sized> StopFlag for std::sync::Arc<T> {
    fn raised(&self) -> bool {
        (**self).raised()
    }
}

/// Why a process could not join the run.
#[derive(Debug, thiserror::Error)]
pub enum RegistrationError {
    /// The router could not be reached or did not answer in time.
    #[error("cannot register with the router at {router}: {source}")]
    Unreachable {
        /// The router's control endpoint.
        router: String,
        /// What went wrong (a refused handshake says why).
        source: TransportError,
    },
    /// The router refused this process.
    #[error("the router at {router} refused this process: {reason}")]
    Refused {
        /// The router's control endpoint.
        router: String,
        /// The router's reason.
        reason: String,
    },
    /// The router's answer did not decode.
    #[error("the router at {router} answered with a bad frame: {source}")]
    BadAnswer {
        /// The router's control endpoint.
        router: String,
        /// Why the answer was rejected.
        source: cep_core::wire::WireError,
    },
}

/// Registers with the router and waits until the run starts (the router answers once the
/// whole cluster is present).
pub fn register(
    context: &Context,
    router: &str,
    registration: &cep_core::control::Register,
    timeout: Duration,
    shutdown: &dyn StopFlag,
) -> Result<cep_core::control::Ready, RegistrationError> {
    use cep_core::control::{Ready, Refused};
    use cep_core::frame::{Body, Frame};
    use cep_core::wire::FrameKind;
    let answer = request(context, router, &registration.encode(0), timeout, shutdown)
        .map_err(|source| RegistrationError::Unreachable { router: router.to_string(), source })?;
    let bad = |source| RegistrationError::BadAnswer { router: router.to_string(), source };
    let frame = Frame::read(&answer, MAX_CONTROL_FRAME_BYTES).map_err(bad)?;
    if frame.kind() == FrameKind::Refused {
        let refused: Refused = frame.body().map_err(bad)?;
        return Err(RegistrationError::Refused { router: router.to_string(), reason: refused.reason });
    }
    frame.body::<Ready>().map_err(bad)
}
