//! The metrics endpoint as a scraper sees it: a real HTTP server in this process, read over
//! TCP, in both text formats.

use cep_telemetry::buckets::{Buckets, LATENCY_SECONDS};
use cep_telemetry::{identity, metrics, MetricsServer, Scrape, Source};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

struct Example {
    ticks: AtomicU64,
    latency: Buckets,
}

impl Source for Example {
    fn scrape(&self, out: &mut Scrape<'_>) -> std::fmt::Result {
        out.counter("cep_example_ticks", "Ticks seen.", self.ticks.load(Ordering::Relaxed))?;
        out.counters("cep_rejected", "Rejected, by cause.", "cause", [("malformed", 2), ("bad_version", 1)])?;
        out.gauges("cep_example_symbols", "Symbols per worker.", "worker", [("worker-0", 7.0)])?;
        out.histograms("cep_example_latency_seconds", "Latency.", "hop", [("end_to_end", &self.latency)])
    }
}

/// (status line, headers, body) of a GET.
fn get(address: std::net::SocketAddr, path: &str, accept: &str) -> (String, String, String) {
    let mut stream = TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: test\r\nAccept: {accept}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    (status.to_string(), headers.to_lowercase(), body.to_string())
}

#[test]
fn a_scrape_reads_every_source_with_the_process_labels() {
    identity::set("worker", "worker-3");
    let mut histogram = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
    histogram.record_n(150_000, 4).unwrap();
    let latency = Buckets::from_hdr(&histogram, LATENCY_SECONDS, 1e-9);
    let example = Arc::new(Example { ticks: AtomicU64::new(41), latency });
    metrics::register("example", example.clone());
    let server = MetricsServer::start("127.0.0.1:0").unwrap();
    let address = server.address();
    assert!(metrics::is_served());
    example.ticks.fetch_add(1, Ordering::Relaxed);

    // Prometheus asks for OpenMetrics.
    let (status, headers, body) = get(address, "/metrics", "application/openmetrics-text;version=1.0.0,*/*;q=0.1");
    assert!(status.ends_with("200 OK"), "{status}");
    assert!(headers.contains("content-type: application/openmetrics-text"), "{headers}");
    assert!(body.contains("# TYPE cep_example_ticks counter\n"), "{body}");
    assert!(body.contains("cep_example_ticks_total{role=\"worker\",id=\"worker-3\"} 42\n"), "{body}");
    assert!(body.contains("cep_rejected_total{role=\"worker\",id=\"worker-3\",cause=\"malformed\"} 2\n"), "{body}");
    assert!(body.contains("# TYPE cep_example_symbols gauge\n"), "{body}");
    assert!(body.contains("# TYPE cep_example_latency_seconds histogram\n"), "{body}");
    let bucket = |le: &str| format!("_bucket{{role=\"worker\",id=\"worker-3\",le=\"{le}\",hop=\"end_to_end\"}}");
    assert!(body.contains(&format!("{} 0\n", bucket("0.0001"))), "{body}");
    assert!(body.contains(&format!("{} 4\n", bucket("0.00015"))), "{body}");
    assert!(body.contains(&format!("{} 4\n", bucket("+Inf"))), "{body}");
    assert!(body.contains("cep_example_latency_seconds_count{role=\"worker\",id=\"worker-3\",hop=\"end_to_end\"} 4\n"));
    assert!(body.contains("# TYPE cep_build_info gauge\n"), "{body}");
    assert!(body.contains(&format!(
        "cep_build_info{{role=\"worker\",id=\"worker-3\",version=\"{}\"}} 1.0\n",
        env!("CARGO_PKG_VERSION")
    )));
    assert!(body.ends_with("# EOF\n"), "{body}");

    // Anything else gets the 0.0.4 text format.
    let (_, headers, body) = get(address, "/metrics", "*/*");
    assert!(headers.contains("content-type: text/plain; version=0.0.4"), "{headers}");
    assert!(body.contains("# TYPE cep_example_ticks_total counter\n"), "{body}");
    assert!(!body.contains("# EOF"), "{body}");

    let (status, _, _) = get(address, "/nothing", "*/*");
    assert!(status.ends_with("404 Not Found"), "{status}");

    // Lingering ends with the first scrape after it began.
    let scraper = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        get(address, "/metrics", "*/*")
    });
    assert!(server.linger(Duration::from_secs(30), &AtomicBool::new(false)));
    scraper.join().unwrap();
    assert!(!server.linger(Duration::from_millis(1), &AtomicBool::new(false)), "no scrape came");

    // The port is taken now: one line saying what and where.
    let taken = MetricsServer::start(&address.to_string()).err().unwrap().to_string();
    assert_eq!(taken, format!("cannot serve metrics on {address}: Address already in use"));
    let bad = MetricsServer::start("localhost").err().unwrap().to_string();
    assert!(bad.starts_with("cannot serve metrics on localhost: not a HOST:PORT address"), "{bad}");
}

/// A hostile client: a header that never ends, or a line that is not HTTP, is answered with an
/// error within its bound (no memory grows with what it sends), and scrapes go on.
#[test]
fn forged_requests_are_bounded_and_refused() {
    let server = MetricsServer::start("127.0.0.1:0").unwrap();
    let address = server.address();
    let answer = |request: &[u8]| {
        let mut stream = TcpStream::connect(address).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        // The server may close before taking all of it: only what it answers matters.
        let _ = stream.write_all(request);
        let mut response = String::new();
        let _ = stream.read_to_string(&mut response);
        response.lines().next().unwrap_or_default().to_string()
    };
    let mut endless = b"GET /metrics HTTP/1.1\r\nX-Junk: ".to_vec();
    endless.extend(std::iter::repeat_n(b'a', 64 * 1024));
    assert_eq!(answer(&endless), "HTTP/1.1 431 Request Header Fields Too Large");
    let many: String = (0..40).map(|i| format!("X-{i}: y\r\n")).collect();
    assert_eq!(
        answer(format!("GET /metrics HTTP/1.1\r\n{many}\r\n").as_bytes()),
        "HTTP/1.1 431 Request Header Fields Too Large"
    );
    assert_eq!(answer(b"\x00\x01 not http\r\n\r\n"), "HTTP/1.1 400 Bad Request");
    assert_eq!(answer(b"POST /metrics HTTP/1.1\r\n\r\n"), "HTTP/1.1 405 Method Not Allowed");
    // HEAD: the head of the answer, no body.
    let mut stream = TcpStream::connect(address).unwrap();
    stream.write_all(b"HEAD /metrics HTTP/1.1\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200 OK") && response.ends_with("\r\n\r\n"), "{response}");
    let (status, _, _) = get(address, "/metrics", "*/*");
    assert!(status.ends_with("200 OK"), "{status}");
}
