//! A real Prometheus scrapes a real local cluster (`cep run --metrics-listen`, every process
//! on loopback, found through the run's file_sd targets file); the series it stored must
//! balance against the run's summary.json. Needs the `prometheus` binary (Debian package
//! `prometheus`); without it the test fails saying how to install it.

use cep_core::results::Summary;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Kills the process when the test ends, however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts Prometheus on a free port, scraping every second whatever `targets` lists; returns
/// it and the address it announced.
fn start_prometheus(dir: &Path, targets: &Path) -> (Killed, String) {
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n\
             scrape_configs:\n  - job_name: cep\n    file_sd_configs:\n      - files: [\"{}\"]\n        refresh_interval: 1s\n",
            targets.display()
        ),
    )
    .unwrap();
    let spawned = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
        .arg("--web.listen-address=127.0.0.1:0")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            panic!("prometheus is not installed: `apt-get install -y prometheus` (Debian) puts it on the PATH")
        }
        Err(error) => panic!("cannot start prometheus: {error}"),
    };
    // It logs the address it bound; the rest of its log is drained so it never blocks.
    let (found, address) = std::sync::mpsc::channel();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if line.contains("msg=\"Listening on\"") {
                if let Some(at) = line.split("address=").nth(1) {
                    let _ = found.send(at.split_whitespace().next().unwrap_or_default().to_string());
                }
            }
        }
    });
    let address = address.recv_timeout(Duration::from_secs(60)).expect("prometheus announced its address");
    let deadline = Instant::now() + Duration::from_secs(60);
    while get(&address, "/-/ready").split_whitespace().nth(1) != Some("200") {
        assert!(Instant::now() < deadline, "prometheus at {address} not ready within 60 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    (Killed(child), address)
}

/// The whole HTTP response to a GET (empty if the connection fails).
fn get(address: &str, path_and_query: &str) -> String {
    let Ok(mut stream) = TcpStream::connect(address) else { return String::new() };
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut response = String::new();
    let _ = write!(stream, "GET {path_and_query} HTTP/1.0\r\nHost: prometheus\r\n\r\n")
        .and_then(|()| stream.read_to_string(&mut response));
    response
}

fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (byte as char).to_string(),
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

/// An instant query: each series' labels and value.
fn query(prometheus: &str, promql: &str) -> Vec<(BTreeMap<String, String>, f64)> {
    let response = get(prometheus, &format!("/api/v1/query?query={}", percent_encode(promql)));
    let body = response.split_once("\r\n\r\n").map(|(_, body)| body).unwrap_or_default();
    let answer: Value = serde_json::from_str(body).unwrap_or_else(|_| panic!("{promql}: {response}"));
    assert_eq!(answer["status"], "success", "{promql}: {answer}");
    answer["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|series| {
            let labels = series["metric"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(key, value)| (key.clone(), value.as_str().unwrap_or_default().to_string()))
                .collect();
            (labels, series["value"][1].as_str().unwrap().parse().unwrap())
        })
        .collect()
}

/// The one value of a query that sums to a scalar (NaN if it has none yet).
fn scalar(prometheus: &str, promql: &str) -> f64 {
    query(prometheus, promql).first().map_or(f64::NAN, |(_, value)| *value)
}

/// The last value each series had in the run (stale markers after a process exits skip).
fn last(metric: &str) -> String {
    format!("last_over_time({metric}[10m])")
}

#[test]
fn prometheus_scrapes_every_role_and_the_series_balance_with_the_summary() {
    if !on_path("prometheus") {
        // .ci/run installs it and says the tools are required: there this fails.
        assert!(
            std::env::var_os("CEP_TEST_TOOLS_REQUIRED").is_none(),
            "prometheus is not installed: `apt-get install -y prometheus` (Debian) puts it on the PATH"
        );
        eprintln!("skipped: prometheus is not on the PATH (apt-get install -y prometheus)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    std::fs::create_dir_all(&out).unwrap();
    let (_prometheus, prometheus) = start_prometheus(dir.path(), &out.join("prometheus-targets.json"));

    // Long enough for a few scrapes; each process then waits for one more scrape after its end.
    let mut run = Killed(
        Command::new(env!("CARGO_BIN_EXE_cep"))
            .args(["run", "--workers", "2", "--connections", "2", "--rate", "20000", "--duration", "3s"])
            .args(["--warmup", "500ms", "--csv", "none", "--quiet"])
            .args(["--metrics-listen", "127.0.0.1:0", "--metrics-linger", "30s"])
            .arg("--out")
            .arg(&out)
            .env("RUST_LOG", "warn")
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(180);
    let status = loop {
        if let Some(status) = run.0.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "cep run did not finish within 180 s");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "cep run failed: {status}");
    let summary: Summary = serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert!(summary.complete && summary.events_lost == Some(0));
    let sent = summary.events_sent.expect("a complete run knows what was sent");
    assert!(sent > 0);
    let outputs: u64 = summary.outputs.values().sum();

    // What must balance, and what Prometheus says; the last scrapes may still be ingesting.
    let expected: Vec<(String, f64)> = vec![
        (format!("sum({})", last("cep_injector_ticks_sent_total")), sent as f64),
        (format!("sum({})", last("cep_router_ticks_received_total")), sent as f64),
        (format!("sum({})", last("cep_router_ticks_routed_total")), summary.events_processed as f64),
        (format!("sum({})", last("cep_worker_ticks_processed_total")), summary.events_processed as f64),
        (format!("sum({})", last("cep_worker_outputs_sent_total")), outputs as f64),
        (format!("sum({})", last("cep_collector_outputs_received_total")), outputs as f64),
        (last("cep_collector_latency_seconds_count{hop=\"end_to_end\"}"), summary.latency_us.end_to_end.count as f64),
        (last("cep_collector_latency_seconds_count{hop=\"engine\"}"), summary.latency_us.engine.count as f64),
        (
            last("cep_collector_latency_seconds_bucket{hop=\"end_to_end\",le=\"+Inf\"}"),
            summary.latency_us.end_to_end.count as f64,
        ),
        (last("cep_collector_run_complete"), 1.0),
        (last("cep_router_run_ended"), 1.0),
        (last("cep_router_registered{kind=\"worker\"}"), 2.0),
        (format!("count({})", last("cep_build_info")), 5.0),
        // Every process was up when scraped.
        ("count(max_over_time(up{job=\"cep\"}[10m]) == 1)".into(), 5.0),
    ];
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got: Vec<f64> = expected.iter().map(|(promql, _)| scalar(&prometheus, promql)).collect();
        if expected.iter().zip(&got).all(|((_, want), got)| want == got) {
            break;
        }
        if Instant::now() > deadline {
            let report: Vec<String> = expected
                .iter()
                .zip(&got)
                .map(|((promql, want), got)| format!("{promql}: {got} (summary: {want})"))
                .collect();
            panic!("the series do not balance with summary.json:\n{}", report.join("\n"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }

    // Per worker, by the labels every series carries.
    for worker in &summary.workers {
        let symbols = scalar(&prometheus, &last(&format!("cep_worker_symbols{{id=\"{}\"}}", worker.id)));
        assert_eq!(Some(symbols as u64), worker.symbols, "{}", worker.id);
        let processed = scalar(
            &prometheus,
            &format!("sum({})", last(&format!("cep_worker_ticks_processed_total{{id=\"{}\"}}", worker.id))),
        );
        assert_eq!(processed, worker.events as f64, "{}", worker.id);
    }
    let processes: Vec<String> = query(&prometheus, "max_over_time(up{job=\"cep\"}[10m])")
        .into_iter()
        .map(|(labels, _)| labels["process"].clone())
        .collect();
    assert_eq!(processes.len(), 5, "{processes:?}");
    for name in ["router", "collector", "injector", "worker-0", "worker-1"] {
        assert!(processes.iter().any(|process| process == name), "{name} was never scraped: {processes:?}");
    }
    let roles: Vec<String> = query(&prometheus, &format!("count by (role) ({})", last("cep_build_info")))
        .into_iter()
        .map(|(l, _)| l["role"].clone())
        .collect();
    assert_eq!(roles.len(), 4, "{roles:?}");
}

/// Whether `program` is on the PATH.
fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}
