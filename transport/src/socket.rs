//! Data sockets.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub use crate::context::Context;
use crate::security::{Role, Server};
pub use zmq::Message;

/// Socket errors a user can cause (a bad or busy address) or meet (a peer gone at shutdown).
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// Binding failed: the address is in use, malformed, or not local.
    #[error("cannot bind {endpoint}: {source}")]
    Bind {
        /// The endpoint asked for.
        endpoint: String,
        /// ZeroMQ's error.
        source: zmq::Error,
    },
    /// Connecting failed: the endpoint is malformed or its host does not resolve.
    #[error("cannot connect to {endpoint}: {source}")]
    Connect {
        /// The endpoint asked for.
        endpoint: String,
        /// ZeroMQ's error.
        source: zmq::Error,
    },
    /// Any other ZeroMQ failure.
    #[error("{what}: {source}")]
    Socket {
        /// What was being done (`"set linger"`, `"receive control"`, ...).
        what: &'static str,
        /// ZeroMQ's error.
        source: zmq::Error,
    },
    /// A blocking send was abandoned because the process is shutting down.
    #[error("send to {peer} abandoned at shutdown")]
    ShutdownWhileSending {
        /// The endpoint of the peer the send was for.
        peer: String,
    },
    /// The peer's host name does not resolve.
    #[error("the host of {endpoint} does not resolve: {reason}")]
    Unresolvable {
        /// The endpoint whose host was looked up.
        endpoint: String,
        /// The resolver's last error.
        reason: String,
    },
    /// A secure process was to reach a peer whose key nobody passed on: the router runs open.
    #[error("no CURVE key is known for {peer}: is the router running without --key?")]
    NoPeerKey {
        /// The peer's endpoint.
        peer: String,
    },
    /// The key passed on for a peer is not a key.
    #[error("the CURVE key given for {peer} is unusable: {reason}")]
    BadPeerKey {
        /// The peer's endpoint.
        peer: String,
        /// Why.
        reason: String,
    },
    /// The peer answered with something that is not the expected frame.
    #[error("bad answer from {peer}: {reason}")]
    BadAnswer {
        /// The peer's endpoint.
        peer: String,
        /// Why the answer was rejected.
        reason: String,
    },
    /// The connection to the peer dropped and stayed down (or never came up within ten failure
    /// time-outs): it is dead.
    #[error("{}", lost_line(peer, *down_for, *reached))]
    PeerLost {
        /// The endpoint of the peer.
        peer: String,
        /// How long it had been unreachable.
        down_for: Duration,
        /// Whether it had ever been reached.
        reached: bool,
    },
    /// This process was told to stop while it waited for the peer's answer.
    #[error("stopped while waiting for an answer from {peer} (after {waited:.1?})")]
    Stopped {
        /// The peer's endpoint.
        peer: String,
        /// How long this process had waited.
        waited: Duration,
    },
    /// The peer turned this process's connection away in the handshake: its key is not
    /// admitted, one side runs CURVE and the other does not, or it closed every handshake.
    #[error("{peer} refused the handshake: {reason}")]
    HandshakeRefused {
        /// The peer's endpoint.
        peer: String,
        /// Why, and what to do about it.
        reason: String,
    },
    /// The peer did not answer in time.
    #[error("no answer from {peer} within {timeout:?}")]
    Timeout {
        /// The peer's endpoint.
        peer: String,
        /// How long this process waited.
        timeout: Duration,
    },
}

/// What a dead peer's error says.
fn lost_line(peer: &str, down_for: Duration, reached: bool) -> String {
    match reached {
        true => format!("the connection to {peer} dropped {down_for:.1?} ago: it is taken for dead"),
        false => format!("{peer} was never reached in {down_for:.1?}: it is taken for dead"),
    }
}

/// Maps a ZeroMQ error to what was being done when it happened.
pub(crate) fn socket_err(what: &'static str) -> impl FnOnce(zmq::Error) -> TransportError {
    move |source| TransportError::Socket { what, source }
}

/// Options shared by data sockets.
#[derive(Clone, Debug)]
pub struct SocketOptions {
    /// Messages (batches) queued per peer before a send blocks: back-pressure, never loss.
    pub high_water_mark: i32,
    /// How long a closing socket may keep trying to deliver what it still holds.
    pub linger: Duration,
    /// Watches the peer ([`crate::liveness`]): dead once its connection drops, or when it was
    /// never reached within ten of these; sets TCP keepalive's pace. `None`: never (a send
    /// then waits for it as long as it takes).
    pub failure_timeout: Option<Duration>,
    /// ZeroMQ's maximum message size: a longer message is cut off, with its connection, before
    /// it is buffered ([`message_limit`]).
    pub max_message_bytes: usize,
}

/// The largest message a data socket takes, for a receiver rejecting frames above
/// `max_frame_bytes`: twice that (a frame a little too large is still read, rejected and
/// counted as `oversized`), and at least a control frame and its envelope (the router sends a
/// worker a dead worker's state in its data stream).
pub fn message_limit(max_frame_bytes: usize) -> usize {
    max_frame_bytes.saturating_mul(2).max(cep_core::control::MAX_CONTROL_FRAME_BYTES) + (64 << 10)
}

impl Default for SocketOptions {
    fn default() -> Self {
        SocketOptions {
            max_message_bytes: message_limit(cep_core::wire::DEFAULT_MAX_FRAME_BYTES),
            high_water_mark: 1000,
            linger: Duration::from_secs(10),
            failure_timeout: Some(crate::liveness::DEFAULT_FAILURE_TIMEOUT),
        }
    }
}

fn apply(socket: &zmq::Socket, options: &SocketOptions) -> Result<(), TransportError> {
    socket.set_sndhwm(options.high_water_mark).map_err(socket_err("set send high-water mark"))?;
    socket.set_rcvhwm(options.high_water_mark).map_err(socket_err("set receive high-water mark"))?;
    socket.set_linger(options.linger.as_millis().min(i32::MAX as u128) as i32).map_err(socket_err("set linger"))?;
    // Big socket buffers let the kernel absorb bursts between two batches.
    socket.set_sndbuf(4 << 20).map_err(socket_err("set send buffer"))?;
    socket.set_rcvbuf(4 << 20).map_err(socket_err("set receive buffer"))?;
    let max_message = i64::try_from(options.max_message_bytes).unwrap_or(i64::MAX);
    socket.set_maxmsgsize(max_message).map_err(socket_err("set maximum message size"))?;
    Ok(())
}

/// Binds `socket` at `endpoint`. An `ipc://` path where a live process listens is refused as
/// in use, as a taken TCP port is (ZeroMQ would unlink the path and take the address over,
/// silently cutting that process off); a file left by a dead one is replaced.
pub(crate) fn bind(socket: &zmq::Socket, endpoint: &str) -> Result<(), TransportError> {
    let in_use = |path: &str| std::os::unix::net::UnixStream::connect(path).is_ok();
    if endpoint.strip_prefix("ipc://").is_some_and(in_use) {
        return Err(TransportError::Bind { endpoint: endpoint.to_string(), source: zmq::Error::EADDRINUSE });
    }
    socket.bind(endpoint).map_err(|source| TransportError::Bind { endpoint: endpoint.to_string(), source })
}

/// The receiving end of a pipeline stage (one thread owns it).
pub struct Pull {
    socket: crate::context::Socket,
    endpoint: String,
    /// Whether it runs CURVE (each message then names its sender).
    secure: bool,
}

impl Pull {
    /// Binds a PULL socket that admits `admits` (on a secure context). `tcp://host:*` picks a
    /// free port; see [`Pull::endpoint`].
    pub fn bind(
        context: &Context,
        endpoint: &str,
        options: &SocketOptions,
        admits: &[Role],
    ) -> Result<Pull, TransportError> {
        let socket = context.socket(zmq::PULL, crate::context::SocketRole::Binds(admits))?;
        apply(&socket, options)?;
        bind(&socket, endpoint)?;
        let endpoint = socket
            .get_last_endpoint()
            .map_err(socket_err("read bound endpoint"))?
            .unwrap_or_else(|raw| String::from_utf8_lossy(&raw).into_owned());
        Ok(Pull { socket, endpoint, secure: context.is_secure() })
    }

    /// The endpoint actually bound (with the port chosen for `*`).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Whether it runs CURVE: each message then names its sender.
    pub fn is_secure(&self) -> bool {
        self.secure
    }

    /// Receives the next message into `message` if one is already queued (never waits).
    pub fn try_recv(&self, message: &mut zmq::Message) -> Result<bool, TransportError> {
        match self.socket.recv(message, zmq::DONTWAIT) {
            Ok(()) => Ok(true),
            Err(zmq::Error::EAGAIN | zmq::Error::EINTR) => Ok(false),
            Err(source) => Err(TransportError::Socket { what: "receive", source }),
        }
    }

    /// Receives the next message into `message`, waiting at most `timeout`. Returns false
    /// when nothing arrived in time.
    pub fn recv(&self, message: &mut zmq::Message, timeout: Duration) -> Result<bool, TransportError> {
        if self.try_recv(message)? {
            return Ok(true);
        }
        match self.socket.poll(zmq::POLLIN, timeout.as_millis().min(i64::MAX as u128) as i64) {
            Ok(0) | Err(zmq::Error::EINTR) => Ok(false),
            Ok(_) => self.try_recv(message),
            Err(source) => Err(TransportError::Socket { what: "poll", source }),
        }
    }
}

/// The sending end towards one peer (one thread owns it).
pub struct Push {
    watch: Option<crate::liveness::PeerWatch>,
    socket: crate::context::Socket,
    peer: String,
}

impl Push {
    /// Connects a PUSH socket to a bound peer (`server`, on a secure context). ZeroMQ connects
    /// in the background, queueing up to the high-water mark meanwhile.
    pub fn connect(
        context: &Context,
        endpoint: &str,
        server: Server<'_>,
        options: &SocketOptions,
    ) -> Result<Push, TransportError> {
        let socket = context.socket(zmq::PUSH, crate::context::SocketRole::Connects { server, endpoint })?;
        apply(&socket, options)?;
        // A finite send time-out lets a blocked send notice a shutdown request.
        socket.set_sndtimeo(100).map_err(socket_err("set send time-out"))?;
        let watch = options
            .failure_timeout
            .map(|timeout| crate::liveness::PeerWatch::attach(context.zmq(), &socket, endpoint, timeout))
            .transpose()?;
        // Made before it connects: if connecting fails, dropping it stops the watch.
        let push = Push { socket, peer: endpoint.to_string(), watch };
        push.socket
            .connect(endpoint)
            .map_err(|source| TransportError::Connect { endpoint: endpoint.to_string(), source })?;
        Ok(push)
    }

    /// Binds a PUSH socket that admits `admits` (used by tests and benchmarks that play a fixed
    /// peer).
    pub fn bind(
        context: &Context,
        endpoint: &str,
        options: &SocketOptions,
        admits: &[Role],
    ) -> Result<Push, TransportError> {
        let socket = context.socket(zmq::PUSH, crate::context::SocketRole::Binds(admits))?;
        apply(&socket, options)?;
        socket.set_sndtimeo(100).map_err(socket_err("set send time-out"))?;
        bind(&socket, endpoint)?;
        Ok(Push { socket, peer: endpoint.to_string(), watch: None })
    }

    /// Fails with [`TransportError::PeerLost`] once the peer is dead ([`crate::liveness`]; the
    /// driver asks at its cadence, a blocked send asks too).
    pub fn check_alive(&self) -> Result<(), TransportError> {
        match self.watch.as_ref().and_then(crate::liveness::PeerWatch::lost) {
            Some((down_for, reached)) => Err(TransportError::PeerLost { peer: self.peer.clone(), down_for, reached }),
            None => Ok(()),
        }
    }

    /// Connections made to the peer so far (see [`crate::liveness::PeerWatch::connections`]);
    /// an unwatched socket counts one.
    pub fn connections(&self) -> u64 {
        self.watch.as_ref().map_or(1, crate::liveness::PeerWatch::connections)
    }

    /// Whether the connection to the peer is up now (always, for an unwatched socket).
    pub fn connected(&self) -> bool {
        self.watch.as_ref().is_none_or(crate::liveness::PeerWatch::connected)
    }

    /// Drops the connection to the peer and whatever is still queued for it (a peer taken for
    /// dead gets nothing more, even if it wakes).
    pub fn disconnect(&self) {
        let _ = self.socket.set_linger(0);
        // Failing, the socket would reconnect and a process at that address get the queue.
        if let Err(error) = self.socket.disconnect(&self.peer) {
            tracing::warn!(peer = %self.peer, %error, "cannot disconnect from a peer taken for dead");
        }
    }

    /// Limits how long closing may wait to deliver what is still queued: on an interrupted
    /// run the peer may be gone, and a shutdown must not wait the full linger for it.
    pub fn shorten_linger(&self, linger: Duration) {
        let _ = self.socket.set_linger(linger.as_millis().min(i32::MAX as u128) as i32);
    }

    /// The socket, to wait on it with others.
    pub(crate) fn raw(&self) -> &zmq::Socket {
        &self.socket
    }

    /// Sends one message if the peer's queue has room: false (nothing sent) when it is full.
    pub fn try_send(&self, bytes: &[u8]) -> Result<bool, TransportError> {
        match self.socket.send(bytes, zmq::DONTWAIT) {
            Ok(()) => Ok(true),
            Err(zmq::Error::EAGAIN) | Err(zmq::Error::EINTR) => Ok(false),
            Err(source) => Err(TransportError::Socket { what: "send", source }),
        }
    }

    /// Sends one message, blocking while the peer's queue is full (lossless back-pressure).
    /// Gives up when `shutdown` is raised or the peer is dead ([`Push::check_alive`]).
    pub fn send(&self, bytes: &[u8], shutdown: &AtomicBool) -> Result<(), TransportError> {
        loop {
            match self.socket.send(bytes, 0) {
                Ok(()) => return Ok(()),
                Err(zmq::Error::EAGAIN) | Err(zmq::Error::EINTR) => {
                    if shutdown.load(Ordering::Relaxed) {
                        // Whatever is still queued for this peer will not be delivered either:
                        // do not let closing wait for it.
                        let _ = self.socket.set_linger(0);
                        return Err(TransportError::ShutdownWhileSending { peer: self.peer.clone() });
                    }
                    if let Err(lost) = self.check_alive() {
                        let _ = self.socket.set_linger(0);
                        return Err(lost);
                    }
                }
                Err(source) => return Err(TransportError::Socket { what: "send", source }),
            }
        }
    }
}

impl Drop for Push {
    fn drop(&mut self) {
        if let Some(watch) = &self.watch {
            watch.detach(&self.socket);
        }
    }
}

/// The address this host uses to reach `peer` (a `tcp://host:port` endpoint): the local end
/// of a UDP socket connected towards it (nothing is sent). This is how a worker in a
/// container or on another host finds the address to advertise.
pub fn local_address_towards(peer: &str) -> Result<String, String> {
    use std::net::{ToSocketAddrs, UdpSocket};
    let host_port = peer.strip_prefix("tcp://").ok_or_else(|| format!("`{peer}` is not a tcp:// endpoint"))?;
    let target = host_port
        .to_socket_addrs()
        .map_err(|error| format!("cannot resolve `{host_port}`: {error}"))?
        .next()
        .ok_or_else(|| format!("`{host_port}` resolves to no address"))?;
    let probe = UdpSocket::bind(if target.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" })
        .and_then(|socket| socket.connect(target).map(|()| socket))
        .and_then(|socket| socket.local_addr())
        .map_err(|error| format!("no route to {target}: {error}"))?;
    Ok(probe.ip().to_string())
}

/// The host to advertise: `auto` means the local address towards `peer`.
pub fn advertise_host(advertise: &str, peer: &str) -> Result<String, String> {
    if advertise != "auto" {
        return Ok(advertise.to_string());
    }
    if !peer.starts_with("tcp://") {
        return Ok("127.0.0.1".to_string());
    }
    local_address_towards(peer)
}

/// Replaces the host of a bound endpoint (`tcp://0.0.0.0:4123`) with the host peers should
/// use (`tcp://worker-3:4123`).
pub fn advertised_endpoint(bound: &str, host: &str) -> String {
    match (bound.strip_prefix("tcp://"), bound.rfind(':')) {
        (Some(_), Some(colon)) => format!("tcp://{host}{}", &bound[colon..]),
        _ => bound.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::{Role, Server};

    #[test]
    fn push_pull_round_trip_and_pending_probe() {
        let context = Context::new();
        let options = SocketOptions::default();
        let pull = Pull::bind(&context, "tcp://127.0.0.1:*", &options, &Role::ALL).unwrap();
        let push = Push::connect(&context, pull.endpoint(), Server::Router, &options).unwrap();
        let shutdown = AtomicBool::new(false);
        push.send(b"one", &shutdown).unwrap();
        push.send(b"two", &shutdown).unwrap();
        let mut message = zmq::Message::new();
        assert!(pull.recv(&mut message, Duration::from_secs(5)).unwrap());
        assert_eq!(&message[..], b"one");
        assert!(pull.recv(&mut message, Duration::from_secs(5)).unwrap());
        assert_eq!(&message[..], b"two");
        assert!(!pull.recv(&mut message, Duration::from_millis(10)).unwrap());
    }

    #[test]
    fn an_ipc_path_a_live_process_listens_at_is_in_use_and_a_stale_one_is_taken() {
        let dir = tempfile::tempdir().unwrap();
        let endpoint = format!("ipc://{}", dir.path().join("data").display());
        let (context, options) = (Context::new(), SocketOptions::default());
        let first = Pull::bind(&context, &endpoint, &options, &Role::ALL).unwrap();
        let error = Pull::bind(&context, &endpoint, &options, &Role::ALL).err().unwrap().to_string();
        assert_eq!(error, format!("cannot bind {endpoint}: Address already in use"));
        // The first still takes what is sent to the address.
        let push = Push::connect(&context, &endpoint, Server::Router, &options).unwrap();
        push.send(b"still here", &AtomicBool::new(false)).unwrap();
        let mut message = zmq::Message::new();
        assert!(first.recv(&mut message, Duration::from_secs(5)).unwrap());
        assert_eq!(&message[..], b"still here");
        // A socket file nobody listens at (its process died) is replaced.
        let stale = dir.path().join("stale");
        drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
        assert!(stale.exists());
        Pull::bind(&context, &format!("ipc://{}", stale.display()), &options, &Role::ALL).unwrap();
    }

    #[test]
    fn address_in_use_is_a_clear_error() {
        let context = Context::new();
        let options = SocketOptions::default();
        let first = Pull::bind(&context, "tcp://127.0.0.1:*", &options, &Role::ALL).unwrap();
        let error = Pull::bind(&context, first.endpoint(), &options, &Role::ALL).err().unwrap().to_string();
        assert!(error.starts_with(&format!("cannot bind {}", first.endpoint())), "{error}");
        assert!(error.contains("in use"), "{error}");
    }

    #[test]
    fn auto_advertise_finds_the_local_address() {
        assert_eq!(advertise_host("auto", "tcp://127.0.0.1:5556").unwrap(), "127.0.0.1");
        assert_eq!(advertise_host("worker-3", "tcp://127.0.0.1:5556").unwrap(), "worker-3");
        let error = advertise_host("auto", "tcp://no-such-host.invalid:1").unwrap_err();
        assert!(error.starts_with("cannot resolve `no-such-host.invalid:1`"), "{error}");
    }

    #[test]
    fn advertised_endpoint_swaps_the_host() {
        assert_eq!(advertised_endpoint("tcp://0.0.0.0:4123", "worker-3"), "tcp://worker-3:4123");
        assert_eq!(advertised_endpoint("ipc:///tmp/x", "h"), "ipc:///tmp/x");
    }
}
