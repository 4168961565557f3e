//! The thin HTTP driver: `/metrics` on a thread of its own (`tiny_http`: small, synchronous,
//! no async runtime in processes whose data paths are plain threads). All it does is ask
//! [`crate::metrics::encode`] for the text; scrapes never touch a role's data path.

use crate::args::MetricsArgs;
use std::io;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tiny_http::{Header, Method, Request, Response};

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Why metrics cannot be served (each says what and where, on one line).
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot serve metrics on {listen}: {reason}")]
    Bind { listen: String, reason: String },
    #[error("cannot write the metrics announce file {path}: {reason}")]
    Announce { path: String, reason: String },
}

/// Scrapes begun and finished, for [`MetricsServer::linger`].
#[derive(Default)]
struct Scrapes {
    begun: u64,
    done: u64,
}

/// Serves `/metrics` until dropped.
pub struct MetricsServer {
    server: Arc<tiny_http::Server>,
    address: SocketAddr,
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
        let server =
            Arc::new(tiny_http::Server::from_listener(listener, None).map_err(|error| bind_error(error.to_string()))?);
        let scrapes = Arc::new((Mutex::new(Scrapes::default()), Condvar::new()));
        let thread = {
            let (server, scrapes) = (server.clone(), scrapes.clone());
            std::thread::Builder::new()
                .name("metrics".into())
                .spawn(move || {
                    for request in server.incoming_requests() {
                        serve(request, &scrapes);
                    }
                })
                .map_err(|error| bind_error(format!("cannot start its thread: {error}")))?
        };
        crate::metrics::set_served();
        Ok(MetricsServer { server, address, scrapes, thread: Some(thread) })
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
        self.server.unblock();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve(request: Request, scrapes: &(Mutex<Scrapes>, Condvar)) {
    let path = request.url().split('?').next().unwrap_or_default();
    let response = match (request.method(), path) {
        (Method::Get | Method::Head, "/metrics") => {
            let (lock, changed) = scrapes;
            lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).begun += 1;
            // Prometheus asks for OpenMetrics; curl and older scrapers get the 0.0.4 text.
            let openmetrics = request.headers().iter().any(|header| {
                header.field.equiv("Accept") && header.value.as_str().contains("application/openmetrics-text")
            });
            let response = match crate::metrics::encode(openmetrics) {
                Ok(text) => {
                    let content_type = if openmetrics {
                        OPENMETRICS
                    } else {
                        prometheus_client::encoding::prometheus_text::CONTENT_TYPE
                    };
                    text_response(200, text, content_type)
                }
                Err(_) => text_response(500, "cannot encode the metrics\n".into(), "text/plain; charset=utf-8"),
            };
            let _ = request.respond(response);
            lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).done += 1;
            changed.notify_all();
            return;
        }
        (Method::Get | Method::Head, "/") => {
            text_response(200, "cep metrics: see /metrics\n".into(), "text/plain; charset=utf-8")
        }
        (Method::Get | Method::Head, _) => {
            text_response(404, "not found: try /metrics\n".into(), "text/plain; charset=utf-8")
        }
        _ => text_response(405, "only GET\n".into(), "text/plain; charset=utf-8"),
    };
    let _ = request.respond(response);
}

fn text_response(status: u16, body: String, content_type: &str) -> Response<io::Cursor<Vec<u8>>> {
    let header = Header::from_bytes(&b"Content-Type"[..], content_type.as_bytes()).expect("a valid header");
    Response::from_string(body).with_status_code(status).with_header(header)
}

/// An I/O error's text without its `(os error N)` tail: `Address already in use`.
fn plain(error: &io::Error) -> String {
    cep_core::io_text::plain(error)
}
