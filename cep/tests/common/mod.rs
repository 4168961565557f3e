//! What the `cep` integration tests share: the binary under test, and a guard that kills a
//! process left running when a test fails half-way.
#![allow(dead_code)]

use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// `cep`, logging warnings only.
/// A collector's endpoints on ports the kernel picks: tests that run at once never share
/// the defaults (5557, 5558).
pub const EPHEMERAL_COLLECTOR: [&str; 4] = ["--listen", "tcp://127.0.0.1:*", "--clock-listen", "tcp://127.0.0.1:*"];

pub fn cep() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_cep"));
    command.env("RUST_LOG", "warn");
    command
}

/// `cep run` of `workers` workers and `count` ticks at 200k ticks/s, every output and the
/// input recorded in `out`: the cluster the failure tests kill parts of.
pub fn cep_run_recorded(workers: u32, count: u64, out: &std::path::Path) -> Running {
    Running(
        cep()
            .args(["run", "--workers", &workers.to_string(), "--rate", "200000", "--count", &count.to_string()])
            .args(["--csv", "all", "--record-input", "--quiet", "--summary-every", SUMMARY_EVERY])
            .arg("--out")
            .arg(out)
            .spawn()
            .unwrap(),
    )
}

/// How often the runs the failure tests start rewrite their rolling summary.json: what those
/// tests watch to strike at a point of the run.
pub const SUMMARY_EVERY: &str = "200ms";

/// Waits until the rolling `summary.json` in `out` shows what `ready` looks for (the collector
/// rewrites it atomically every [`SUMMARY_EVERY`]): a test strikes on what the run did, not
/// after a time that a slow machine stretches.
pub fn wait_for_summary(
    out: &std::path::Path,
    what: &str,
    within: Duration,
    ready: impl Fn(&cep_core::results::Summary) -> bool,
) -> cep_core::results::Summary {
    let deadline = Instant::now() + within;
    loop {
        let text = std::fs::read_to_string(out.join("summary.json")).unwrap_or_default();
        if let Ok(summary) = serde_json::from_str::<cep_core::results::Summary>(&text) {
            assert_accounts_agree(&summary);
            if ready(&summary) {
                return summary;
            }
        }
        assert!(Instant::now() < deadline, "{what}: not seen in {}/summary.json within {within:?}", out.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The summary's figures are the sums of its parts wherever those are known (every summary a
/// test reads, rolling or final, complete or not).
pub fn assert_accounts_agree(summary: &cep_core::results::Summary) {
    let broken = summary.broken_identities();
    assert!(broken.is_empty(), "the summary's accounts disagree: {broken:?}\n{summary:#?}");
}

/// The final summary.json in `out`, its accounts checked.
pub fn read_summary(out: &std::path::Path) -> cep_core::results::Summary {
    let path = out.join("summary.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    let summary = serde_json::from_str(&text).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    assert_accounts_agree(&summary);
    summary
}

/// SIGKILL to process `pid`.
pub fn sigkill(pid: i32) {
    signal(pid, nix::sys::signal::Signal::SIGKILL);
}

/// `signal` to process `pid`.
pub fn signal(pid: i32, signal: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal).unwrap();
}

/// Kills the process if the test fails half-way.
pub struct Running(pub Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The endpoints a router announced in `file` (`data=...`, `control=...`; it binds
/// kernel-chosen ports first).
pub fn announced(file: &std::path::Path) -> (String, String) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(text) = std::fs::read_to_string(file) {
            let field = |key: &str| text.lines().find_map(|line| line.strip_prefix(key)).map(str::to_string);
            if let (Some(data), Some(control)) = (field("data="), field("control=")) {
                return (data, control);
            }
        }
        assert!(Instant::now() < deadline, "the router never announced its endpoints");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The rows of a CSV file, their first six columns (an output's rule, symbol, price, value,
/// stream and sequence number), sorted.
pub fn sorted_rows(path: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut rows: Vec<String> =
        text.lines().skip(1).map(|line| line.split(',').take(6).collect::<Vec<_>>().join(",")).collect();
    rows.sort();
    rows
}

/// The standalone engine's outputs over the input a run recorded (`out/input.csv`), as
/// [`sorted_rows`] (written to `out/standalone.csv`).
pub fn standalone_rows(out: &std::path::Path) -> Vec<String> {
    let standalone = out.join("standalone.csv");
    let engine = cep().args(["engine", "--input"]).arg(out.join("input.csv")).arg("--output").arg(&standalone).output();
    let engine = engine.unwrap();
    assert!(engine.status.success(), "{}", String::from_utf8_lossy(&engine.stderr));
    sorted_rows(&standalone)
}

/// The pid of a child of process `parent` whose arguments `matches` accepts (other tests
/// running at the same time have processes of the same roles and ids).
pub fn child_pid(parent: u32, matches: impl Fn(&[String]) -> bool) -> Option<i32> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        // /proc/PID/stat: "pid (comm) state ppid ...", comm may hold spaces: read after ')'.
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        let ppid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
        if ppid != Some(parent) {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let args: Vec<String> = cmdline.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        if matches(&args) {
            return Some(pid);
        }
    }
    None
}

/// The lines `stream` gives, as they come (read on a thread of their own).
pub fn lines_of(stream: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let (lines, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stream).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    receiver
}

/// Waits for a line holding `what` among `lines` (a hang guard: `within`).
pub fn wait_for_line(lines: &std::sync::mpsc::Receiver<String>, what: &str, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) if line.contains(what) => return,
            Ok(_) => {}
            Err(error) => panic!("no line with `{what}` within {within:?} ({error})"),
        }
    }
}

/// Every line `lines` still gives, until its stream closes.
pub fn rest_of(lines: &std::sync::mpsc::Receiver<String>) -> String {
    lines.iter().collect::<Vec<_>>().join("\n")
}
