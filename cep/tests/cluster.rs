//! The whole cluster as real processes on loopback: every tick processed exactly once, per
//! symbol in order, and the outputs identical to the standalone engine's over the same input.
//! The same assertions at 1, 2 and 3 workers.

use cep::standalone::{evaluate, read_input};
use cep_core::results::Summary;
use cep_engine::RuleSet;
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

/// One cluster run to check.
struct Scenario {
    workers: usize,
    /// Ticks the run sends.
    count: u64,
    connections: usize,
    /// Distinct symbols in the stream.
    symbols: u64,
    /// The rules file (`None`: the built-in reference rules).
    rules: Option<&'static str>,
    /// More `cep run` arguments (rules, a replay file).
    extra: Vec<String>,
    /// Ticks per second (0: unpaced).
    rate: u64,
    /// At most this many injector frames may carry the ticks (told by their router stamps).
    max_frames: Option<usize>,
}

impl Scenario {
    fn new(workers: usize, count: u64, connections: usize) -> Self {
        Scenario {
            workers,
            count,
            connections,
            symbols: 1470,
            rules: None,
            extra: Vec::new(),
            rate: 0,
            max_frames: None,
        }
    }
}

fn run_cluster(out: &Path, scenario: &Scenario) -> Summary {
    let mut command = Command::new(env!("CARGO_BIN_EXE_cep"));
    command
        .args(["run", "--rate", &scenario.rate.to_string(), "--csv", "all", "--record-input", "--quiet"])
        .args(["--workers", &scenario.workers.to_string(), "--connections", &scenario.connections.to_string()])
        .args(&scenario.extra);
    if let Some(rules) = scenario.rules {
        command.arg(format!("--rules={}/../{rules}", env!("CARGO_MANIFEST_DIR")));
    }
    if !scenario.extra.iter().any(|arg| arg.starts_with("--replay")) {
        command.args(["--count", &scenario.count.to_string()]);
    }
    let status = command.arg("--out").arg(out).env("RUST_LOG", "warn").status().expect("cep runs");
    assert!(status.success(), "cep run failed: {status}");
    let text = std::fs::read_to_string(out.join("summary.json")).expect("summary.json written");
    serde_json::from_str(&text).expect("summary.json parses")
}

/// (rule, injector, seq) -> (symbol, price bits, value bits)
type Outputs = HashMap<(String, u32, u64), (String, u64, u64)>;

fn read_outputs(path: &Path) -> (Outputs, Vec<String>) {
    let text = std::fs::read_to_string(path).expect("outputs.csv written");
    let mut lines = text.lines();
    let header = lines.next().expect("header");
    assert_eq!(
        header,
        "rule,symbol,price,value,injector,seq,t_inject_ns,t_router_in_ns,t_router_out_ns,t_worker_in_ns,t_engine_out_ns,t_collector_ns"
    );
    let mut outputs = Outputs::new();
    let mut rows = Vec::new();
    for line in lines {
        let f: Vec<&str> = line.split(',').collect();
        assert_eq!(f.len(), 12, "{line}");
        let stamps: Vec<u64> = f[6..].iter().map(|s| s.parse().unwrap()).collect();
        assert!(stamps.windows(2).all(|w| w[0] > 0 && w[1] > 0), "{line}");
        let key = (f[0].to_string(), f[4].parse().unwrap(), f[5].parse().unwrap());
        let value = (f[1].to_string(), f[2].parse::<f64>().unwrap().to_bits(), f[3].parse::<f64>().unwrap().to_bits());
        assert!(outputs.insert(key, value).is_none(), "duplicate output {line}");
        rows.push(line.to_string());
    }
    (outputs, rows)
}

fn check(scenario: Scenario) {
    let Scenario { workers, count, .. } = scenario;
    let dir = tempfile::tempdir().unwrap();
    let summary = run_cluster(dir.path(), &scenario);
    assert!(summary.complete);
    assert_eq!(summary.events_sent, Some(count));
    assert_eq!(summary.events_processed, count);
    assert_eq!(
        (summary.events_lost, summary.duplicates, summary.out_of_order, summary.outputs_lost),
        (Some(0), 0, 0, 0)
    );
    assert!(summary.rejected.is_empty(), "{:?}", summary.rejected);
    assert_eq!(summary.workers.len(), workers);
    assert_eq!(summary.workers.iter().map(|w| w.events).sum::<u64>(), count);
    assert_eq!(summary.workers.iter().map(|w| w.symbols).sum::<Option<u64>>(), Some(scenario.symbols));
    assert!(summary.workers.iter().all(|w| w.events > 0));
    let rules: RuleSet = match scenario.rules {
        None => cep_engine::reference_rules(),
        Some(_) => cep_engine::oracle_rules(),
    };
    // Every query is listed, fired or not.
    let mut names: Vec<&str> = rules.names().collect();
    names.sort();
    assert_eq!(summary.outputs.keys().map(String::as_str).collect::<Vec<_>>(), names);
    if scenario.rules.is_none() {
        assert_eq!(summary.outputs["volatility"], count);
    }
    assert_eq!(summary.latency_us.end_to_end.count, summary.outputs.values().sum::<u64>());
    assert_eq!(summary.rules.len(), 1);
    assert_eq!(summary.rules[0].queries.len(), rules.queries.len());

    // The standalone engine over the recorded input gives exactly the cluster's outputs.
    let input = read_input(&dir.path().join("input.csv")).unwrap();
    assert_eq!(input.len() as u64, count);
    let expected = evaluate(&input, rules);
    assert!(!expected.is_empty());
    let (outputs, rows) = read_outputs(&dir.path().join("outputs.csv"));
    assert_eq!(outputs.len(), expected.len());
    for o in &expected {
        let got = outputs.get(&(o.rule.clone(), o.injector, o.seq));
        assert_eq!(got, Some(&(o.symbol.clone(), o.price.to_bits(), o.value.to_bits())), "{o:?}");
    }

    // The ticks of one injector frame share its router stamp: a tick's volatility output
    // (one per tick) tells its frame.
    if let Some(max_frames) = scenario.max_frames {
        let frames: std::collections::HashSet<(&str, &str)> = rows
            .iter()
            .map(|row| row.split(',').collect::<Vec<_>>())
            .filter(|f| f[0] == "volatility")
            .map(|f| (f[4], f[7]))
            .collect();
        assert!(frames.len() <= max_frames, "{} frames carried {count} ticks", frames.len());
    }

    // Per-symbol order: each rule's outputs of a symbol arrive in sequence order.
    let mut last: HashMap<(String, String), u64> = HashMap::new();
    for row in rows {
        let f: Vec<&str> = row.split(',').collect();
        let seq: u64 = f[5].parse().unwrap();
        if let Some(previous) = last.insert((f[0].to_string(), f[1].to_string()), seq) {
            assert!(previous < seq, "{} {} out of order: {previous} then {seq}", f[0], f[1]);
        }
    }

    let report = std::fs::read_to_string(dir.path().join("report.txt")).unwrap();
    assert!(report.contains("[OVERALL], Throughput(ops/sec), "));
    assert!(report.contains("[END_TO_END], 99thPercentileLatency(us), "));
}

#[test]
fn two_workers_few_hundred_thousand_ticks() {
    check(Scenario::new(2, 300_000, 1));
}

#[test]
fn one_worker() {
    check(Scenario::new(1, 50_000, 1));
}

#[test]
fn three_workers_three_connections() {
    check(Scenario::new(3, 100_000, 3));
}

/// Paced at 100k ticks/s over two connections with a 2 ms linger: a stream sends at most one
/// frame per 2 ms (about 500 per stream over the second), and the outputs are still the
/// engine's, in order.
#[test]
fn a_paced_injector_with_a_linger_sends_fewer_frames_and_the_same_outputs() {
    let extra = vec!["--linger".into(), "2ms".into()];
    check(Scenario { rate: 100_000, extra, max_frames: Some(1_500), ..Scenario::new(2, 100_000, 2) });
}

/// The Oracle white paper's workload from `rules/oracle-400.rules`: R1 and R2 on 200
/// monitored symbols as 400 queries, the rest filtered.
#[test]
fn oracle_400_queries() {
    check(Scenario { rules: Some("rules/oracle-400.rules"), ..Scenario::new(2, 100_000, 2) });
}

/// A replayed file of `symbol;price;timestamp` lines goes through the cluster like the model.
#[test]
fn replay_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ticks.txt");
    let mut text = String::from("# symbol;price;timestamp\n");
    for tick in cep_core::gbm::GbmStream::all(7, 40).take(20_000) {
        text.push_str(&format!("R{:02};{};{}\n", tick.symbol, tick.price, 1_700_000_000_000 + tick.index));
    }
    std::fs::write(&file, text).unwrap();
    check(Scenario { symbols: 40, extra: vec![format!("--replay={}", file.display())], ..Scenario::new(2, 20_000, 2) });
}

/// A worker whose clock is 250 ms ahead: its offset to the collector is measured within the
/// reported uncertainty and its stamps are corrected, so the hops on either side of it stay
/// true (uncorrected, half the outputs would show +250 ms on one hop and nothing on the other).
#[test]
fn a_skewed_worker_clock_is_measured_and_corrected() {
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new(env!("CARGO_BIN_EXE_cep"))
        .args(["run", "--rate", "50000", "--count", "50000", "--csv", "none", "--quiet", "--workers", "2"])
        .arg("--worker0-clock-skew=250ms")
        .arg("--out")
        .arg(dir.path())
        .env("RUST_LOG", "warn")
        .status()
        .unwrap();
    assert!(status.success());
    let summary: Summary =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("summary.json")).unwrap()).unwrap();
    assert!(summary.complete && summary.events_lost == Some(0));
    let mut nodes: Vec<&str> = summary.clock_offsets.iter().map(|c| c.node.as_str()).collect();
    nodes.sort();
    assert_eq!(nodes, vec!["injector-0", "router", "worker-0", "worker-1"]);
    for clock in &summary.clock_offsets {
        let truth = if clock.node == "worker-0" { -250_000.0 } else { 0.0 };
        assert!(
            (clock.offset_us - truth).abs() <= clock.uncertainty_us + 1.0,
            "{}: offset {} us, uncertainty {} us, truth {truth} us",
            clock.node,
            clock.offset_us,
            clock.uncertainty_us
        );
    }
    let hops = &summary.latency_us;
    assert!(hops.router_to_worker.p99 < 100_000.0, "router -> worker p99 {} us", hops.router_to_worker.p99);
    assert!(hops.worker_to_collector.p99 < 100_000.0, "worker -> collector p99 {} us", hops.worker_to_collector.p99);
    assert!(hops.end_to_end.p99 < 100_000.0, "end to end p99 {} us", hops.end_to_end.p99);
}

/// The pid of the child of `parent` whose command line has the argument `needle` (from /proc).
fn child_with(parent: u32, needle: &str) -> Option<i32> {
    std::fs::read_dir("/proc").ok()?.filter_map(Result::ok).find_map(|entry| {
        let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
        // pid (comm) state ppid ...: the command name may hold spaces, the fields after it not.
        let ppid: u32 = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()?;
        let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
        (ppid == parent && String::from_utf8_lossy(&cmdline).split('\0').any(|arg| arg == needle)).then_some(pid)
    })
}

/// Ctrl-C twice in the middle of a run: the first one stops the injector gracefully, but the
/// cluster cannot drain (a worker is paused), so the second one stops every process at once.
/// The partial results agree with themselves. What was never reported (a stream's sent count
/// without its end marker) is null in summary.json and `unknown` in report.txt, never a
/// guess; every figure report.txt shows is summary.json's.
#[test]
fn an_interrupted_run_writes_partial_results_that_agree() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_cep"))
        .args(["run", "--rate", "50000", "--duration", "60s", "--csv", "none", "--workers", "2"])
        .arg("--out")
        .arg(dir.path())
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Interrupt once ticks flow: a progress line (one per second) counts some processed.
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let (lines, progress) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in stderr.lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let flowing = |line: &str| line.starts_with("[progress]") && !line.contains("processed 0 ");
    // (The channel ends when cep does.)
    if !progress.iter().any(|line| flowing(&line)) {
        let _ = child.kill();
        panic!("cep run ended before processing anything");
    }
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    // A paused worker never reports: the graceful stop cannot finish the run.
    let worker = Pid::from_raw(child_with(child.id(), "--id=worker-0").expect("worker-0 runs under cep run"));
    kill(worker, Signal::SIGSTOP).unwrap();
    let launcher = Pid::from_raw(child.id() as i32);
    kill(launcher, Signal::SIGINT).unwrap();
    if !progress.iter().any(|line| line.contains("stopping: the injector ends its streams")) {
        let _ = kill(worker, Signal::SIGCONT);
        let _ = child.kill();
        panic!("cep run did not start a graceful stop");
    }
    kill(launcher, Signal::SIGINT).unwrap();
    if !progress.iter().any(|line| line.contains("interrupted: stopping every process")) {
        let _ = kill(worker, Signal::SIGCONT);
        panic!("cep run did not stop at once on the second Ctrl-C");
    }
    // It gets the launcher's SIGTERM once it runs again.
    kill(worker, Signal::SIGCONT).unwrap();
    let output = child.wait_with_output().unwrap();
    // Every process stopped on its signal: none had to be killed.
    let killed: Vec<String> = progress.iter().filter(|line| line.contains("did not stop in time")).collect();
    assert!(killed.is_empty(), "{killed:?}");
    assert!(!output.status.success());
    // It ends with its verdict, one line: FAILED, why, and where its partial results are.
    let printed = String::from_utf8(output.stdout).unwrap();
    let page = dir.path().join("report.html");
    assert_eq!(printed.lines().count(), 1, "{printed}");
    assert!(printed.starts_with("FAILED: ") && printed.contains("interrupted"), "{printed}");
    assert!(printed.ends_with(&format!("; partial results: {}\n", page.display())), "{printed}");
    assert!(std::fs::read_to_string(&page).unwrap().contains("FAILED: run incomplete (cep run stopped the run: "));
    let report = std::fs::read_to_string(dir.path().join("report.txt")).unwrap();
    let summary: Summary =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("summary.json")).unwrap()).unwrap();
    assert!(!summary.complete && report.contains("[OVERALL], Complete, false\n") && report.contains("# PARTIAL RUN"));
    // The run was cut short: a stream whose end marker did not arrive (the injector sends it
    // on its way out, so it may) has its sent and lost counts unknown, and so has the run.
    assert!(summary.streams.iter().all(|s| s.sent.is_none() == s.lost.is_none()), "{:?}", summary.streams);
    let every_end = summary.streams.iter().all(|s| s.sent.is_some());
    assert_eq!(summary.events_sent.is_some(), every_end, "{summary:?}");
    assert_eq!(summary.events_lost.is_some(), every_end, "{summary:?}");
    let known = cep_core::results::known;
    let line = |section: &str, metric: &str, value: String| format!("[{section}], {metric}, {value}\n");
    for expected in [
        line("OVERALL", "EventsSent", known(summary.events_sent)),
        line("OVERALL", "EventsProcessed", summary.events_processed.to_string()),
        line("OVERALL", "EventsLost", known(summary.events_lost)),
    ] {
        assert!(report.contains(&expected), "{expected} in {report}");
    }
    assert_eq!(summary.workers.len(), 2);
    for worker in &summary.workers {
        let section = format!("WORKER {}", worker.id);
        assert!(report.contains(&line(&section, "Events", worker.events.to_string())), "{report}");
        assert!(report.contains(&line(&section, "Symbols", known(worker.symbols))), "{report}");
    }
    assert!(summary.events_processed > 0);
    assert!(summary.events_processed >= summary.workers.iter().map(|w| w.events).sum::<u64>());
}
