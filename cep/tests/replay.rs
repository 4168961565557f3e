//! A user's own file, replayed in event time: its timestamps, not the send times, drive the
//! windows. Through the cluster and through `cep engine`, a 10-second volatility and
//! one-minute tumbling windows equal a direct computation over the file's own timestamps,
//! late ticks follow the documented rule, and intended send times follow the recorded pace.

mod common;

use common::cep;

use cep_core::results::Summary;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Command;

const RULES: &str = "
@name('volatility') SELECT symbol, price, stddev(price) AS value
FROM StockTick PARTITION BY symbol RETAIN 10 SECONDS;
@name('minute_avg') SELECT symbol, price, avg(price) AS value
FROM StockTick PARTITION BY symbol RETAIN TUMBLING 1 MINUTE;
@name('minute_count') SELECT symbol, price, count(*) AS value
FROM StockTick PARTITION BY symbol RETAIN TUMBLING 1 MINUTE;
";

const SYMBOLS: [&str; 6] = ["AAPL", "MSFT", "GOOG", "IBM", "ORCL", "SAP"];

/// A file tick: symbol index, price, event time in ms.
type Tick = (usize, f64, u64);

/// An output's identity: (rule, symbol, stream, seq).
type Key = (String, String, u32, u64);

/// 1,500 ticks over about 15 minutes of event time, with uneven gaps: bursts at one
/// timestamp, sub-second gaps, and pauses longer than the 10 s window; `late` ticks are
/// placed 3 s behind their symbol's latest time.
fn ticks(late: usize) -> Vec<Tick> {
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move |below: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % below
    };
    let mut time_ms: u64 = 1_262_304_000_000;
    let mut prices = [100.0f64; SYMBOLS.len()];
    let mut latest = [0u64; SYMBOLS.len()];
    let mut out = Vec::new();
    for i in 0..1_500 {
        time_ms += match next(20) {
            0..=2 => 0,
            3 => 20_000 + next(20_000),
            _ => 50 + next(900),
        };
        let symbol = next(SYMBOLS.len() as u64) as usize;
        prices[symbol] = (prices[symbol] * (1.0 + (next(2001) as f64 - 1000.0) / 50_000.0)).max(1.0);
        // Two decimals, as a price file has them.
        let price = (prices[symbol] * 100.0).round() / 100.0;
        let at = if i % 300 == 150 && out.len() / 300 < late { latest[symbol].saturating_sub(3_000) } else { time_ms };
        latest[symbol] = latest[symbol].max(at);
        out.push((symbol, price, at));
    }
    out
}

/// What the cluster must output, computed directly: (rule, symbol, stream, seq) -> value.
/// Ticks go to streams by first appearance of their symbol, round robin; a late tick counts
/// at its symbol's latest time, or is dropped if later than `allowed_ms`.
fn expected(ticks: &[Tick], connections: usize, allowed_ms: Option<u64>) -> BTreeMap<Key, f64> {
    let mut stream_of: HashMap<usize, usize> = HashMap::new();
    let mut next_seq = vec![0u64; connections];
    let mut history: HashMap<usize, Vec<(u64, f64)>> = HashMap::new();
    let mut pane: HashMap<usize, (u64, Vec<f64>, u32)> = HashMap::new();
    let mut out = BTreeMap::new();
    for &(symbol, price, ms) in ticks {
        let appeared = stream_of.len();
        let stream = *stream_of.entry(symbol).or_insert(appeared % connections);
        let seq = next_seq[stream];
        next_seq[stream] += 1;
        let events = history.entry(symbol).or_default();
        let latest = events.last().map_or(0, |e| e.0);
        if ms < latest && allowed_ms.is_some_and(|allowed| latest - ms > allowed) {
            continue;
        }
        let t = ms.max(latest);
        events.push((t, price));
        let name = SYMBOLS[symbol].to_string();
        let key = |rule: &str, seq| (rule.to_string(), name.clone(), stream as u32, seq);
        // Population standard deviation of the prices in (t - 10 s, t], two passes.
        let window: Vec<f64> = events.iter().filter(|e| e.0 + 10_000 > t).map(|e| e.1).collect();
        let mean = window.iter().sum::<f64>() / window.len() as f64;
        let variance = window.iter().map(|p| (p - mean) * (p - mean)).sum::<f64>() / window.len() as f64;
        out.insert(key("volatility", seq), variance.sqrt());
        let minute = t / 60_000;
        let open = pane.entry(symbol).or_insert((minute, Vec::new(), stream as u32));
        if open.0 != minute {
            // A tick of a later minute closes the symbol's open one.
            let prices = std::mem::take(&mut open.1);
            out.insert(key("minute_avg", seq), prices.iter().sum::<f64>() / prices.len() as f64);
            out.insert(key("minute_count", seq), prices.len() as f64);
            open.0 = minute;
        }
        open.1.push(price);
    }
    // The end of input closes the open minutes; each names its stream's end (its count).
    for (symbol, (_, prices, stream)) in pane {
        let key = |rule: &str| (rule.to_string(), SYMBOLS[symbol].to_string(), stream, next_seq[stream as usize]);
        out.insert(key("minute_avg"), prices.iter().sum::<f64>() / prices.len() as f64);
        out.insert(key("minute_count"), prices.len() as f64);
    }
    out
}

/// Rows of outputs.csv (or the standalone engine's file): key -> (value, t_inject_ns if any).
fn read_outputs(path: &Path) -> BTreeMap<Key, (f64, Option<u64>)> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut rows = BTreeMap::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let key = (f[0].to_string(), f[1].to_string(), f[4].parse().unwrap(), f[5].parse().unwrap());
        let t_inject = f.get(6).and_then(|t| t.parse().ok());
        assert!(rows.insert(key, (f[3].parse::<f64>().unwrap(), t_inject)).is_none(), "duplicate {line}");
    }
    rows
}

fn assert_same(got: &BTreeMap<Key, (f64, Option<u64>)>, want: &BTreeMap<Key, f64>) {
    let missing: Vec<_> = want.keys().filter(|k| !got.contains_key(*k)).take(3).collect();
    let extra: Vec<_> = got.keys().filter(|k| !want.contains_key(*k)).take(3).collect();
    assert!(missing.is_empty() && extra.is_empty(), "missing {missing:?}, unexpected {extra:?}");
    for (key, want) in want {
        let got = got[key].0;
        assert!((got - want).abs() <= 1e-9 * want.abs().max(1.0), "{key:?}: got {got}, want {want}");
    }
}

/// `ticks` in OCTO's format (`symbol;price;timestamp` in ms, no header), in `dir`.
fn octo_file(dir: &Path, ticks: &[Tick]) -> std::path::PathBuf {
    let file = dir.join("ticks.txt");
    let text: String = ticks.iter().map(|(s, p, ms)| format!("{};{p};{ms}\n", SYMBOLS[*s])).collect();
    std::fs::write(&file, text).unwrap();
    file
}

/// The event-time rules, in `dir`.
fn rules_file(dir: &Path) -> std::path::PathBuf {
    let rules = dir.join("event-time.rules");
    std::fs::write(&rules, RULES).unwrap();
    rules
}

/// `cep run` replaying `file` as fast as possible under `rules`, every output written to `out`.
fn replay_run(file: &Path, rules: &Path, out: &Path) -> Command {
    let mut command = cep();
    command.args(["run", "--speed", "max", "--csv", "all", "--quiet", "--replay"]).arg(file);
    command.arg("--rules").arg(rules).arg("--out").arg(out);
    command
}

fn summary(out: &Path) -> Summary {
    common::read_summary(out)
}

#[test]
fn a_file_replays_in_its_own_event_time_through_the_cluster_and_the_engine_alone() {
    let dir = tempfile::tempdir().unwrap();
    let ticks = ticks(5);
    let span_ms = ticks.last().unwrap().2 - ticks[0].2;
    assert!(span_ms > 5 * 60_000, "several minutes of event time: {span_ms} ms");
    // OCTO's format: symbol;price;timestamp in milliseconds, no header.
    let file = octo_file(dir.path(), &ticks);
    let rules = rules_file(dir.path());
    let want = expected(&ticks, 2, None);
    assert!(want.keys().filter(|k| k.0 == "minute_count").count() > 60);

    let out = dir.path().join("run");
    let before = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    let status = replay_run(&file, &rules, &out)
        .args(["--workers", "2", "--connections", "2", "--record-input"])
        .status()
        .unwrap();
    let after = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    assert!(status.success());
    let run = summary(&out);
    assert!(run.complete);
    assert_eq!((run.events_sent, run.events_processed, run.events_lost), (Some(1_500), 1_500, Some(0)));
    assert_eq!((run.late, run.late_dropped), (5, 0));
    let closed_at_end =
        want.keys().filter(|k| k.0 == "minute_count" && k.3 == run.streams[k.2 as usize].sent.unwrap()).count();
    assert_eq!(run.final_outputs, 2 * closed_at_end as u64);
    let outputs = read_outputs(&out.join("outputs.csv"));
    assert_same(&outputs, &want);
    // Latency starts at each tick's send time in this run, never at its event time (2010).
    for ((rule, ..), (_, t_inject)) in &outputs {
        match t_inject {
            Some(t) => assert!((before..after).contains(t), "{rule}: t_inject {t} outside the run"),
            None => assert!(rule.starts_with("minute_")),
        }
    }
    assert_eq!(run.latency_us.end_to_end.count, run.outputs.values().sum::<u64>() - run.final_outputs);

    // The engine alone, over the file itself and over the input the run recorded.
    for (input, connections) in [(&file, "2"), (&out.join("input.csv"), "1")] {
        let status = cep()
            .args(["engine", "--connections", connections, "--rules"])
            .arg(&rules)
            .arg("--input")
            .arg(input)
            .status()
            .unwrap();
        assert!(status.success());
        let standalone = input.parent().unwrap().join("standalone-outputs.csv");
        assert_same(&read_outputs(&standalone), &want);
        std::fs::remove_file(standalone).unwrap();
    }
}

#[test]
fn ticks_later_than_the_allowed_lateness_are_dropped_and_counted_the_same_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let ticks = ticks(5);
    // A header naming the columns, times in seconds with a fraction.
    let file = dir.path().join("ticks.csv");
    let mut text = String::from("time_s,symbol,price\n");
    for (s, p, ms) in &ticks {
        text.push_str(&format!("{}.{:03},{},{p}\n", ms / 1000, ms % 1000, SYMBOLS[*s]));
    }
    std::fs::write(&file, text).unwrap();
    let rules = rules_file(dir.path());
    let want = expected(&ticks, 1, Some(2_000));

    let out = dir.path().join("run");
    let status = replay_run(&file, &rules, &out).args(["--workers", "3", "--allowed-lateness", "2s"]).status().unwrap();
    assert!(status.success());
    let run = summary(&out);
    assert_eq!((run.events_processed, run.events_lost, run.late, run.late_dropped), (1_500, Some(0), 0, 5));
    assert_same(&read_outputs(&out.join("outputs.csv")), &want);
    let report = std::fs::read_to_string(out.join("report.txt")).unwrap();
    assert!(report.contains("[OVERALL], LateDropped, 5"), "{report}");

    let standalone = dir.path().join("alone.csv");
    let status = cep()
        .args(["engine", "--allowed-lateness", "2s", "--rules"])
        .arg(&rules)
        .arg("--input")
        .arg(&file)
        .arg("--output")
        .arg(&standalone)
        .status()
        .unwrap();
    assert!(status.success());
    assert_same(&read_outputs(&standalone), &want);
}

#[test]
fn a_replay_at_ten_times_its_recorded_pace_keeps_its_gaps() {
    let dir = tempfile::tempdir().unwrap();
    // 300 ticks over about 12 s of event time, with a late one: sent in about 1.2 s.
    let mut text = String::new();
    let mut ms = 1_000_000u64;
    for i in 0..300u64 {
        ms += (i * 7919) % 80;
        let stamp = if i == 200 { ms - 2_000 } else { ms };
        text.push_str(&format!("S{};{};{stamp}\n", i % 4, 10.0 + (i % 13) as f64));
    }
    let file = dir.path().join("ticks.txt");
    std::fs::write(&file, &text).unwrap();
    let out = dir.path().join("run");
    let status = cep()
        .args(["run", "--workers", "1", "--speed", "10", "--csv", "none", "--quiet", "--record-input"])
        .arg("--replay")
        .arg(&file)
        .arg("--out")
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    let recorded = std::fs::read_to_string(out.join("input.csv")).unwrap();
    let rows: Vec<(u64, u64)> = recorded
        .lines()
        .skip(1)
        .map(|line| {
            let f: Vec<&str> = line.split(',').collect();
            (f[4].parse().unwrap(), f[5].parse().unwrap())
        })
        .collect();
    assert_eq!(rows.len(), 300);
    let (start, first_event) = rows[0];
    let mut previous = start;
    for &(t_inject, t_event) in &rows {
        // Due (event time since the first) / 10 after the start, never before the tick before.
        let due = start + (t_event - first_event) / 10;
        assert!(t_inject == due.max(previous) || t_inject.abs_diff(due.max(previous)) <= 1, "{t_inject} vs {due}");
        previous = t_inject;
    }
    assert_eq!(summary(&out).late, 1);
}

/// outputs.csv's rows without their timestamps (rule, symbol, price, value, stream, seq),
/// sorted: the bytes a run must give whatever its timing.
fn rows_without_times(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut rows: Vec<String> =
        text.lines().skip(1).map(|row| row.split(',').take(6).collect::<Vec<_>>().join(",")).collect();
    rows.sort();
    rows
}

#[test]
fn one_process_over_inproc_gives_the_outputs_of_processes_over_tcp() {
    let dir = tempfile::tempdir().unwrap();
    let ticks = ticks(5);
    let file = octo_file(dir.path(), &ticks);
    let rules = rules_file(dir.path());
    let mut runs = Vec::new();
    for transport in ["inproc", "tcp"] {
        let out = dir.path().join(transport);
        let status = replay_run(&file, &rules, &out)
            .args(["--workers", "3", "--connections", "2", "--transport", transport])
            .status()
            .unwrap();
        assert!(status.success(), "{transport}");
        for file in [
            "summary.json",
            "report.txt",
            "outputs.csv",
            "intervals.csv",
            "latency.hlog",
            "latency_histogram.csv",
            "percentiles.csv",
        ] {
            assert!(out.join(file).exists(), "{transport}: {file}");
        }
        runs.push((summary(&out), rows_without_times(&out.join("outputs.csv"))));
    }
    let ((inproc, inproc_rows), (tcp, tcp_rows)) = (&runs[0], &runs[1]);
    assert!(inproc.complete && tcp.complete);
    let accounting = |s: &Summary| {
        (s.events_sent, s.events_processed, s.events_lost, s.duplicates, s.late, s.final_outputs, s.outputs.clone())
    };
    assert_eq!(accounting(inproc), accounting(tcp));
    assert_eq!((inproc.events_sent, inproc.events_lost), (Some(1_500), Some(0)));
    assert_eq!(inproc_rows, tcp_rows, "the same outputs, bit for bit");
    assert_same(&read_outputs(&dir.path().join("inproc").join("outputs.csv")), &expected(&ticks, 2, None));
    // One process, one clock: nothing to measure between the roles.
    assert!(inproc.clock_offsets.is_empty(), "{:?}", inproc.clock_offsets);
}
