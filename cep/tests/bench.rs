//! The bench code paths at tiny sizes, so the suite cannot rot: each kind runs and writes
//! well-formed results (valid JSON, the CSV header, an HTML report holding its charts).

use std::path::Path;
use std::process::Command;

fn bench(args: &[&str], out: &Path) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_cep"))
        .arg("bench")
        .args(args)
        .arg("--out")
        .arg(out)
        .env("RUST_LOG", "warn")
        .output()
        .expect("cep runs");
    assert!(output.status.success(), "cep bench {args:?} failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn assert_report(dir: &Path, charts: usize) -> String {
    let summary = std::fs::read_to_string(dir.join("summary.txt")).expect("summary.txt written");
    assert!(summary.lines().all(|line| line.starts_with('[') || line.starts_with("This machine")), "{summary}");
    assert_page(dir, charts)
}

/// The page is whole, holds `charts` charts, and says above each what it shows.
fn assert_page(dir: &Path, charts: usize) -> String {
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>") && html.trim_end().ends_with("</html>"));
    assert_eq!(html.matches("<svg").count(), charts, "charts in the report");
    assert!(
        !html.contains("http://")
            || html.matches("http://").all(|_| html.contains("xmlns=\"http://www.w3.org/2000/svg\""))
    );
    for section in html.split("<h2>").filter(|section| section.contains("<svg")) {
        assert!(section.contains("<p class=\"about\">"), "a chart without its description: {}", &section[..80]);
    }
    html
}

/// The labels an SVG chart writes (one text element each).
fn labelled(html: &str, label: &str) -> usize {
    html.matches(&format!(">\n{label}\n<")).count()
}

#[test]
fn engine_kind() {
    let dir = tempfile::tempdir().unwrap();
    let stdout = bench(&["engine", "--ticks", "20000"], dir.path());
    assert!(stdout.contains("[ENGINE R1+R2+R3], Throughput(ops/sec), "), "{stdout}");
    let json = json(&dir.path().join("results.json"));
    let results = &json["rule_sets"];
    let sets: Vec<&str> = results.as_array().unwrap().iter().map(|r| r["rule_set"].as_str().unwrap()).collect();
    assert_eq!(
        sets,
        [
            "R1 perc",
            "R1 hand-written",
            "R2 trend",
            "R2 hand-written",
            "R3 volatility",
            "R3 hand-written",
            "R1+R2",
            "R1+R2+R3",
            "R1+R2+R3 hand-written",
            "Oracle 400 queries",
            "Oracle 400 queries, no filter index",
            "R1+R2 as 2 queries on the 200 symbols",
            "Oracle hand-written"
        ]
    );
    // The same rules compiled and hand-written give the same outputs.
    for (compiled, hand_written) in [(0, 1), (2, 3), (4, 5), (7, 8), (9, 12)] {
        assert_eq!(results[compiled]["outputs"], results[hand_written]["outputs"], "{compiled}");
    }
    assert_eq!(results[9]["outputs"], results[10]["outputs"]);
    for ratio in ["compiled_over_hand_written", "oracle_400_over_two_queries", "unindexed_over_indexed"] {
        assert!(json["ratios"][ratio].as_f64().unwrap() > 0.0, "{ratio}");
    }
    assert!(stdout.contains("[RATIO], CompiledOverHandWritten"), "{stdout}");
    assert!(results
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["events"] == 20000 && r["events_per_s"].as_f64().unwrap() > 0.0));
    let csv = std::fs::read_to_string(dir.path().join("engine.csv")).unwrap();
    assert!(csv.starts_with("rule_set,events,seconds,events_per_s,ns_per_event,outputs\n"));
    assert_eq!(csv.lines().count(), 14);
    let html = assert_report(dir.path(), 1);
    // Every bar named, compiled and hand-written told apart, the ratios on the page.
    for set in &sets {
        assert_eq!(labelled(&html, set), 1, "{set}");
    }
    for group in ["compiled rule language", "hand-written (baseline)", "compiled, no filter index"] {
        assert_eq!(labelled(&html, group), 1, "{group}");
    }
    for ratio in [
        "R1 perc / R1 hand-written",
        "R1+R2+R3 / R1+R2+R3 hand-written",
        "Oracle 400 queries / R1+R2 as 2 queries on the 200 symbols",
        "Oracle 400 queries, no filter index / Oracle 400 queries (not interleaved)",
    ] {
        assert!(html.contains(&format!("<td>{ratio}</td>")), "{ratio}");
    }
    assert_eq!(json["ratios"]["pairs"].as_array().unwrap().len(), 5);
}

#[test]
fn transport_kind() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "transport",
        "--transports",
        "tcp,ipc,inproc",
        "--events-per-message",
        "1,16",
        "--duration",
        "100ms",
        "--latency-rate",
        "2000",
    ];
    let stdout = bench(&args, dir.path());
    assert_eq!(stdout.lines().filter(|l| l.starts_with("[TRANSPORT ")).count(), 6, "{stdout}");
    let points = json(&dir.path().join("results.json"));
    let points = points.as_array().unwrap();
    assert_eq!(points.len(), 6);
    for p in points {
        assert!(p["messages_per_s"].as_f64().unwrap() > 0.0, "{p}");
        assert!(p["latency_us"]["count"].as_u64().unwrap() > 0, "{p}");
    }
    let csv = std::fs::read_to_string(dir.path().join("transport.csv")).unwrap();
    assert!(csv.starts_with("transport,events_per_message,message_bytes,messages_per_s,"));
    assert_report(dir.path(), 4);
}

#[test]
fn overview_kind_with_a_small_pipeline() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--engine-ticks",
        "20000",
        "--transport-messages",
        "2000",
        "--pipeline-ticks",
        "20000",
        "--latency-rate",
        "20000",
        "--latency-duration",
        "500ms",
    ];
    let stdout = bench(&args, dir.path());
    assert!(stdout.contains("pipeline, 2 workers, full speed"), "{stdout}");
    let results = json(&dir.path().join("bench.json"));
    assert_eq!(results["pipeline_lost"], 0);
    assert!(results["pipeline_eps"].as_f64().unwrap() > 0.0);
    for run in ["pipeline-full-speed", "pipeline-latency"] {
        let summary = json(&dir.path().join(run).join("summary.json"));
        assert_eq!(summary["complete"], true, "{run}");
        assert!(dir.path().join(run).join("latency.hlog").exists());
    }
    // The printed table, one row per figure and ratio, and the page: the ratios, the
    // throughput and latency bars, the paced run's four latency charts.
    assert_eq!(std::fs::read_to_string(dir.path().join("summary.txt")).unwrap(), stdout);
    let csv = std::fs::read_to_string(dir.path().join("overview.csv")).unwrap();
    assert!(csv.starts_with("figure,value,unit\nengine_alone,"), "{csv}");
    assert_eq!(csv.lines().count(), 1 + 14 + 3, "{csv}");
    let html = assert_page(dir.path(), 6);
    assert!(html.contains("<td>pipeline at full speed / raw batched hop (ev/s)</td>"), "{html}");
    assert!(html.contains("<td>paced pipeline p50 / (3 x raw hop p50)</td>"), "{html}");
}

#[test]
fn sweep_kind_two_points_and_a_search() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "sweep",
        "--connections",
        "1",
        "--rate-per-connection",
        "20000",
        "--rate-steps",
        "40000",
        "--point-duration",
        "400ms",
        "--warmup",
        "0s",
        // A bound no run can keep: the search stops at its first probe.
        "--p99-bound",
        "1us",
    ];
    let stdout = bench(&args, dir.path());
    assert_eq!(stdout.lines().filter(|l| l.starts_with("[SWEEP ")).count(), 3, "{stdout}");
    let results = json(&dir.path().join("results.json"));
    let points = results["points"].as_array().unwrap();
    let sweeps: Vec<&str> = points.iter().map(|p| p["sweep"].as_str().unwrap()).collect();
    assert_eq!(sweeps, ["a", "b", "saturation"]);
    assert!(points.iter().all(|p| p["events_lost"] == 0 && p["complete"] == true), "{points:?}");
    assert!(results["saturation_rate"].is_null());
    let csv = std::fs::read_to_string(dir.path().join("sweep.csv")).unwrap();
    assert!(csv.starts_with("sweep,connections,rate_per_connection,target_rate,insert_rate,output_rate,events_lost,"));
    assert_eq!(csv.lines().count(), 4);
    // Throughput and latency per sweep (3 x 2), and the heaviest point's four latency charts.
    assert_report(dir.path(), 10);
}

#[test]
fn scale_kind_one_and_two_workers() {
    let dir = tempfile::tempdir().unwrap();
    let stdout = bench(&["scale", "--max-workers", "2", "--ticks", "20000"], dir.path());
    assert!(stdout.contains("[SCALE 2 workers], Throughput(ops/sec), "), "{stdout}");
    assert!(stdout.contains("the cores, not the design") || stdout.contains("the design's scaling"), "{stdout}");
    let results = json(&dir.path().join("results.json"));
    assert_eq!(results["points"].as_array().unwrap().len(), 2);
    let csv = std::fs::read_to_string(dir.path().join("scale.csv")).unwrap();
    assert!(csv.starts_with("workers,throughput_eps,events_lost,p50_us,p99_us,max_us,core_bound\n"));
    let html = assert_report(dir.path(), 2);
    // Worker counts are whole: ticks at 1 and 2 on both charts, nothing in between.
    assert_eq!((labelled(&html, "1"), labelled(&html, "2"), labelled(&html, "1.5")), (2, 2, 0));
}

#[test]
fn transport_kind_pipeline_over_every_transport() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "transport",
        "--pipeline",
        "--count",
        "20000",
        "--latency-rate",
        "20000",
        "--latency-duration",
        "1s",
        "--latency-warmup",
        "200ms",
    ];
    let stdout = bench(&args, dir.path());
    // The table, printed and saved.
    let summary = std::fs::read_to_string(dir.path().join("summary.txt")).expect("summary.txt written");
    assert_eq!(summary, stdout);
    assert!(summary.lines().any(|line| line.starts_with("row ") && line.contains("x engine")), "{summary}");
    let results = json(&dir.path().join("results.json"));
    assert!(results["date"].as_str().unwrap().ends_with('Z'));
    assert_eq!(results["workload"]["count"], 20000);
    assert_eq!(results["workload"]["symbols"], 1470);
    let rows = results["rows"].as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["row"].as_str().unwrap()).collect();
    assert_eq!(names, ["engine alone", "inproc", "ipc", "tcp"]);
    let engine = rows[0]["throughput_eps"].as_f64().unwrap();
    assert!(engine > 0.0 && rows[0]["cost_per_event_us"].as_f64().unwrap() > 0.0);
    for row in rows {
        let name = row["row"].as_str().unwrap();
        // Every ratio is the row's figure over the engine alone's.
        let eps = row["throughput_eps"].as_f64().unwrap();
        let ratio = row["throughput_ratio"].as_f64().unwrap();
        assert!((ratio - eps / engine).abs() <= 1e-9 * ratio.abs().max(1.0), "{name}: {ratio} vs {eps} / {engine}");
        // The same ticks through every row give the same outputs.
        assert_eq!(row["outputs"], rows[0]["outputs"], "{name}");
        if name == "engine alone" {
            continue;
        }
        assert_eq!(row["complete"], true, "{row}");
        assert_eq!(row["events_lost"], 0, "{row}");
        assert!(row["problems"].as_array().unwrap().is_empty(), "{row}");
        assert!(row["latency_us"]["count"].as_u64().unwrap() > 0, "{row}");
        let runs = row["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 2, "{row}");
        for run in runs {
            assert_eq!((&run["complete"], &run["events_lost"]), (&serde_json::json!(true), &serde_json::json!(0)));
            let folder = dir.path().join(run["folder"].as_str().unwrap());
            assert_eq!(json(&folder.join("summary.json"))["complete"], true, "{}", folder.display());
        }
        assert_eq!(runs[0]["events_sent"], 20000, "{row}");
    }
    // Throughput over inproc, ipc, tcp, then latency the other way round.
    let order: Vec<&str> = results["order"].as_array().unwrap().iter().map(|o| o.as_str().unwrap()).collect();
    assert_eq!(
        order,
        [
            "round 1: engine alone",
            "round 1: throughput over inproc",
            "round 1: throughput over ipc",
            "round 1: throughput over tcp",
            "round 1: latency over tcp",
            "round 1: latency over ipc",
            "round 1: latency over inproc",
        ]
    );
    let csv = std::fs::read_to_string(dir.path().join("pipeline.csv")).unwrap();
    assert!(csv.starts_with("row,events,throughput_eps,throughput_ratio,"), "{csv}");
    assert_eq!(csv.lines().count(), 5);
    // The page: the table, the throughput bars (one per row, each named) and the latency bars.
    let html = assert_page(dir.path(), 2);
    for bar in ["engine alone", "pipeline over inproc", "pipeline over ipc", "pipeline over tcp"] {
        assert_eq!(labelled(&html, bar), 1, "{bar}");
    }
    assert!(html.contains("<th>x engine</th>"), "{html}");
}

#[test]
fn transport_kind_refuses_pipeline_flags_without_pipeline() {
    let output = Command::new(env!("CARGO_BIN_EXE_cep"))
        .args(["bench", "transport", "--count", "10"])
        .output()
        .expect("cep runs");
    assert_eq!(output.status.code(), Some(2), "{}", String::from_utf8_lossy(&output.stderr));
    let output = Command::new(env!("CARGO_BIN_EXE_cep"))
        .args(["bench", "transport", "--pipeline", "--events-per-message", "1"])
        .output()
        .expect("cep runs");
    assert_eq!(output.status.code(), Some(2), "{}", String::from_utf8_lossy(&output.stderr));
}
