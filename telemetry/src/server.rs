//! The thin HTTP driver: `/metrics` on a thread of its own (plain `std::net`, no async
//! runtime in processes whose data paths are plain threads), requests parsed by `httparse`
//! from a buffer of fixed size. All it does is ask [`crate::metrics::encode`] for the text;
//! scrapes never touch a role's data path.
//!
//! The port is open to the network, so what a client sends is bounded: a request (line and
//! headers) of at most [`MAX_REQUEST_BYTES`], sent within [`REQUEST_TIMEOUT`], or it is
//! answered with an error and closed; a body is never read. Clients are served one at a time
//! (scrapes are small and rare), so a slow one delays the next by the time-out at most.

use crate::args::MetricsArgs;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const PLAIN: &str = "text/plain; charset=utf-8";

/// The most a request line and its headers may take.
pub const MAX_REQUEST_BYTES: usize = 8 * 1024;

/// How long a client may take to send its request, and to read the answer.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// How often the accepting thread looks whether it should stop.
const POLL: Duration = Duration::from_millis(20);

/// Why metrics cannot be served (each says what and where, on one line).
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot serve metrics on {listen}: {reason}")]
    /// The listening address cannot be bound.
    Bind {
        /// The address asked for.
        listen: String,
        /// Why, on one line.
        reason: String,
    },
    #[error("cannot write the metrics announce file {path}: {reason}")]
    /// The file that tells where metrics are served cannot be written.
    Announce {
        /// The file.
        path: String,
        /// Why, on one line.
        reason: String,
    },
}

/// Scrapes begun and finished, for [`MetricsServer::linger`].
#[derive(Default)]
struct Scrapes {
    begun: u64,
    done: u64,
}

/// Serves `/metrics` until dropped.
pub struct MetricsServer {
    address: SocketAddr,
    stop: Arc<AtomicBool>,
    scrapes: Arc<(Mutex<Scrapes>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Listens on `listen` (`HOST:PORT`; port 0 picks a free one) and serves from a thread.
    pub fn start(listen: &str) -> Result<MetricsServer, ServeError> {
        let bind_error = |reason: String| ServeError::Bind { listen: listen.to_string(), reason };
        let address = listen
            .to_socket_addrs()
            .map_err(|error| bind_error(format!("not a HOST:PORT address ({})", plain(&error))))?
            .next()
            .ok_or_else(|| bind_error("the host resolves to no address".into()))?;
        let listener = TcpListener::bind(address).map_err(|error| bind_error(plain(&error)))?;
        let address = listener.local_addr().map_err(|error| bind_error(plain(&error)))?;
        // Non-blocking accepts, so that the thread sees a stop request.
        listener.set_nonblocking(true).map_err(|error| bind_error(plain(&error)))?;
        let stop = Arc::new(AtomicBool::new(false));
        let scrapes = Arc::new((Mutex::new(Scrapes::default()), Condvar::new()));
        let thread = {
            let (stop, scrapes) = (stop.clone(), scrapes.clone());
            std::thread::Builder::new()
                .name("metrics".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        match listener.accept() {
                            Ok((stream, _)) => serve(stream, &scrapes),
                            Err(error) if error.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(POLL),
                            // A connection that failed before it was accepted: nothing to answer.
                            Err(_) => std::thread::sleep(POLL),
                        }
                    }
                })
                .map_err(|error| bind_error(format!("cannot start its thread: {error}")))?
        };
        crate::metrics::set_served();
        Ok(MetricsServer { address, stop, scrapes, thread: Some(thread) })
    }

    /// What `args` asks for: a server (announced if asked) or none.
    pub fn from_args(args: &MetricsArgs) -> Result<Option<MetricsServer>, ServeError> {
        let Some(listen) = &args.metrics_listen else { return Ok(None) };
        let server = MetricsServer::start(listen)?;
        if let Some(path) = &args.metrics_announce {
            server.announce(path)?;
        }
        tracing::info!(address = %server.address(), "serving metrics at /metrics");
        Ok(Some(server))
    }

    /// The address actually listening.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Writes the address to `path`, whole (written aside, then renamed).
    pub fn announce(&self, path: &std::path::Path) -> Result<(), ServeError> {
        let partial = path.with_extension("partial");
        std::fs::write(&partial, format!("{}\n", self.address))
            .and_then(|()| std::fs::rename(&partial, path))
            .map_err(|error| ServeError::Announce { path: path.display().to_string(), reason: plain(&error) })
    }

    /// Waits until a scrape that began after this call has been answered (so the values as
    /// they are now have been read), at most `max` and no longer than `stop` stays down;
    /// true if one was.
    pub fn linger(&self, max: Duration, stop: &AtomicBool) -> bool {
        let (lock, changed) = &*self.scrapes;
        let deadline = Instant::now() + max;
        let mut scrapes = lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // One may be under way with older values: the one after it is the first that counts.
        let wanted = scrapes.begun + 1;
        while scrapes.done < wanted {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || stop.load(Ordering::Relaxed) {
                return false;
            }
            // Woken by each scrape; the slice bounds how late a stop request is seen.
            let slice = left.min(Duration::from_millis(100));
            scrapes = changed.wait_timeout(scrapes, slice).unwrap_or_else(|poisoned| poisoned.into_inner()).0;
        }
        true
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What a client asked for, read within the bounds.
enum Asked {
    /// `GET` or `HEAD` (`head`: no body) of a path; whether it accepts OpenMetrics.
    Get { path: String, openmetrics: bool, head: bool },
    /// Another method.
    Other,
    /// More than [`MAX_REQUEST_BYTES`] or too many headers.
    TooLarge,
    /// Not HTTP.
    Bad,
}

/// Reads the request line and headers into a buffer of fixed size.
fn read_request(stream: &mut TcpStream) -> io::Result<Asked> {
    let mut buf = [0u8; MAX_REQUEST_BYTES];
    let mut len = 0;
    loop {
        let read = stream.read(&mut buf[len..])?;
        if read == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        len += read;
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut request = httparse::Request::new(&mut headers);
        match request.parse(&buf[..len]) {
            Ok(httparse::Status::Complete(_)) => {
                let (Some(method), Some(path)) = (request.method, request.path) else { return Ok(Asked::Bad) };
                if method != "GET" && method != "HEAD" {
                    return Ok(Asked::Other);
                }
                // Prometheus asks for OpenMetrics; curl and older scrapers get the 0.0.4 text.
                let openmetrics = request.headers.iter().any(|header| {
                    header.name.eq_ignore_ascii_case("accept")
                        && String::from_utf8_lossy(header.value).contains("application/openmetrics-text")
                });
                let path = path.split('?').next().unwrap_or_default().to_string();
                return Ok(Asked::Get { path, openmetrics, head: method == "HEAD" });
            }
            Ok(httparse::Status::Partial) if len == buf.len() => return Ok(Asked::TooLarge),
            Ok(httparse::Status::Partial) => {}
            Err(httparse::Error::TooManyHeaders) => return Ok(Asked::TooLarge),
            Err(_) => return Ok(Asked::Bad),
        }
    }
}

/// Answers one client and closes the connection.
fn serve(mut stream: TcpStream, scrapes: &(Mutex<Scrapes>, Condvar)) {
    let bounded = stream
        .set_nonblocking(false)
        .and_then(|()| stream.set_read_timeout(Some(REQUEST_TIMEOUT)))
        .and_then(|()| stream.set_write_timeout(Some(REQUEST_TIMEOUT)));
    if bounded.is_err() {
        return;
    }
    // A client that sent nothing whole in time, or went away: nothing to answer.
    let Ok(asked) = read_request(&mut stream) else { return };
    let head = matches!(asked, Asked::Get { head: true, .. });
    let (status, body, content_type) = match asked {
        Asked::Get { path, openmetrics, .. } if path == "/metrics" => {
            let (lock, changed) = scrapes;
            lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).begun += 1;
            let answer = match crate::metrics::encode(openmetrics) {
                Ok(text) => {
                    let content_type = if openmetrics {
                        OPENMETRICS
                    } else {
                        prometheus_client::encoding::prometheus_text::CONTENT_TYPE
                    };
                    ("200 OK", text, content_type)
                }
                Err(_) => ("500 Internal Server Error", "cannot encode the metrics\n".into(), PLAIN),
            };
            respond(&mut stream, answer, head);
            lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).done += 1;
            changed.notify_all();
            return;
        }
        Asked::Get { path, .. } if path == "/" => ("200 OK", "cep metrics: see /metrics\n".into(), PLAIN),
        Asked::Get { .. } => ("404 Not Found", "not found: try /metrics\n".into(), PLAIN),
        Asked::Other => ("405 Method Not Allowed", "only GET\n".into(), PLAIN),
        Asked::TooLarge => ("431 Request Header Fields Too Large", "request too large\n".into(), PLAIN),
        Asked::Bad => ("400 Bad Request", "not an HTTP request\n".into(), PLAIN),
    };
    respond(&mut stream, (status, body, content_type), head);
}

/// Writes a whole answer (its head only for `HEAD`); the connection closes after it.
fn respond(stream: &mut TcpStream, (status, body, content_type): (&str, String, &str), head_only: bool) {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    // The client may have gone: nothing to do about it.
    let body = if head_only { &b""[..] } else { body.as_bytes() };
    let _ = stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(body));
}

/// An I/O error's text without its `(os error N)` tail: `Address already in use`.
fn plain(error: &io::Error) -> String {
    cep_core::io_text::plain(error)
}
