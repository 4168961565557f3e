//! Clock-offset sampling: the collector answers time requests on a REQ/REP socket of its own
//! (served by a thread, so a busy data path does not delay the answers); every other node
//! takes several samples and keeps the best ([`cep_core::clock::estimate_offset`]).

use crate::context::SocketRole;
use crate::security::{Role, Server};
use crate::socket::{socket_err, TransportError};
use crate::Context;
use cep_core::clock::{estimate_offset, local_ns, now_ns, ClockSample, OffsetEstimate};
use cep_core::frame::{Body, ClockReply, ClockRequest, Frame};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Clock requests and answers are a few bytes: anything longer is cut off unread.
const CLOCK_MESSAGE_BYTES: i64 = 1024;

/// The collector's time service.
pub struct ClockServer {
    endpoint: String,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ClockServer {
    /// Binds a REP socket at `bind` (admitting the router, workers and injectors) and answers
    /// time requests on a thread of its own until the server is dropped.
    pub fn start(context: &Context, bind: &str) -> Result<ClockServer, TransportError> {
        const ADMITS: &[Role] = &[Role::Router, Role::Worker, Role::Injector];
        let socket = context.socket(zmq::REP, SocketRole::Binds(ADMITS))?;
        socket.set_linger(0).map_err(socket_err("set linger"))?;
        socket.set_maxmsgsize(CLOCK_MESSAGE_BYTES).map_err(socket_err("set maximum message size"))?;
        crate::socket::bind(&socket, bind)?;
        let endpoint = socket
            .get_last_endpoint()
            .map_err(socket_err("read bound endpoint"))?
            .unwrap_or_else(|raw| String::from_utf8_lossy(&raw).into_owned());
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                if !matches!(socket.poll(zmq::POLLIN, 100), Ok(n) if n > 0) {
                    continue;
                }
                if socket.recv_bytes(zmq::DONTWAIT).is_err() {
                    continue;
                }
                // REP must answer every request; the time is read as late as possible.
                let _ = socket.send(ClockReply { now_ns: now_ns() }.encode(0), 0);
            }
        });
        Ok(ClockServer { endpoint, stop, thread: Some(thread) })
    }

    /// The endpoint actually bound (with the port chosen for `*`), as nodes should sample it.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }
}

impl Drop for ClockServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Takes `samples` exchanges with the clock server at `endpoint` and returns the best
/// estimate of this node's offset to it.
pub fn sample_offset(
    context: &Context,
    endpoint: &str,
    server: Server<'_>,
    samples: usize,
    timeout: Duration,
    shutdown: &AtomicBool,
) -> Result<OffsetEstimate, TransportError> {
    let socket = context.socket(zmq::REQ, SocketRole::Connects { server, endpoint })?;
    socket.set_linger(0).map_err(socket_err("set linger"))?;
    socket.set_maxmsgsize(CLOCK_MESSAGE_BYTES).map_err(socket_err("set maximum message size"))?;
    socket.connect(endpoint).map_err(|source| TransportError::Connect { endpoint: endpoint.to_string(), source })?;
    let request = ClockRequest.encode(0);
    let deadline = Instant::now() + timeout;
    let mut taken = Vec::with_capacity(samples);
    while taken.len() < samples {
        let sent = local_ns();
        socket.send(&request, 0).map_err(socket_err("send clock request"))?;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || shutdown.load(Ordering::Relaxed) {
                return Err(TransportError::Timeout { peer: endpoint.to_string(), timeout });
            }
            if socket
                .poll(zmq::POLLIN, left.min(Duration::from_millis(100)).as_millis() as i64)
                .map_err(socket_err("poll clock"))?
                > 0
            {
                break;
            }
        }
        let answer = socket.recv_bytes(0).map_err(socket_err("receive clock answer"))?;
        let received = local_ns();
        let reference = Frame::read(&answer, cep_core::control::MAX_CONTROL_FRAME_BYTES)
            .and_then(|frame| frame.body::<ClockReply>())
            .map_err(|error| TransportError::BadAnswer { peer: endpoint.to_string(), reason: error.to_string() })?
            .now_ns;
        taken.push(ClockSample { sent, reference, received });
    }
    Ok(estimate_offset(&taken).expect("at least one sample was taken"))
}

/// Clock samples each node takes against the collector; the best one counts.
pub const CLOCK_SAMPLES: usize = 16;

/// Measures this node's offset to the collector's clock (none if the collector runs no clock
/// service) and applies it to every later stamp of this process.
pub fn synchronise(
    context: &Context,
    collector_clock: &str,
    collector_key: &str,
    shutdown: &AtomicBool,
) -> Result<Option<OffsetEstimate>, TransportError> {
    // No clock service, or the collector's own process (an in-process cluster): one clock.
    if collector_clock.is_empty() || collector_clock.starts_with("inproc://") {
        return Ok(None);
    }
    let estimate = sample_offset(
        context,
        collector_clock,
        Server::Key(collector_key),
        CLOCK_SAMPLES,
        Duration::from_secs(10),
        shutdown,
    )?;
    cep_core::clock::set_offset(estimate.offset_ns);
    Ok(Some(estimate))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_on_the_same_clock_finds_an_offset_within_its_uncertainty() {
        let context = Context::new();
        let server = ClockServer::start(&context, "tcp://127.0.0.1:*").unwrap();
        let estimate = sample_offset(
            &context,
            server.endpoint(),
            Server::Router,
            8,
            Duration::from_secs(5),
            &AtomicBool::new(false),
        )
        .unwrap();
        assert!(estimate.offset_ns.unsigned_abs() <= estimate.uncertainty_ns + 1, "{estimate:?}");
        assert!(estimate.uncertainty_ns < 50_000_000, "{estimate:?}");
    }
}
