//! Hot deployment under load: a running cluster takes a new rules file; every worker
//! switches between the same two ticks of each stream, so the outputs are exactly those of
//! the old rules up to the switch point and of the new rules after it (unchanged queries
//! keep their state), nothing lost or doubled. A file that does not check is refused with
//! its errors and the running rules stay.

mod common;

use common::{cep, Running};

use cep::standalone::{evaluate_deployments, read_input};
use cep_core::control::{Deploy, Refused};
use cep_core::frame::{Body, Frame};
use cep_core::results::Summary;
use cep_core::wire::FrameKind;
use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// R1 with another threshold (a changed query: starts empty), R2 as it was (keeps its
/// state), R3 dropped, and a new query.
fn new_rules() -> String {
    let reference = cep_query::REFERENCE;
    let without_r3 = &reference[..reference.find("-- R3").unwrap()];
    without_r3.replace("> 2.0 OR", "> 1.5 OR").replace("< -2.0", "< -1.5")
        + "@name('busy') SELECT symbol, price, count(*) AS value FROM StockTick\n\
           PARTITION BY symbol RETAIN TUMBLING 200 MS HAVING count(*) >= 3;\n"
}

#[test]
fn deploy_under_load_switches_every_worker_at_the_same_point() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let good = dir.path().join("new.rules");
    std::fs::write(&good, new_rules()).unwrap();
    let bad = dir.path().join("bad.rules");
    std::fs::write(&bad, "@name('x')\nSELECT symbol, price, avg(volume) AS value FROM StockTick;\n").unwrap();
    // A Unix socket in the test's own folder: no port to race for.
    let control = format!("ipc://{}", dir.path().join("control").display());

    let mut run = Running(
        cep()
            .args(["run", "--workers", "2", "--connections", "2", "--rate", "50000", "--count", "500000"])
            .args(["--csv", "all", "--record-input", "--quiet", "--control", &control])
            .args(["--summary-every", common::SUMMARY_EVERY])
            .arg("--out")
            .arg(&out)
            .spawn()
            .unwrap(),
    );
    // Deployed under load: once the rolling summary shows a fifth of the ticks processed, which
    // leaves 8 s of the run for the three commands below on a busy machine.
    common::wait_for_summary(&out, "a fifth of the ticks processed", Duration::from_secs(60), |summary| {
        summary.events_processed >= 100_000
    });

    // The command checks first: a bad file never leaves this host.
    let refused = cep().args(["rules", "deploy", "--router", &control]).arg(&bad).output().unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("bad.rules:2:27: unknown field `volume`"), "{stderr}");
    assert!(stderr.contains("not deployed"), "{stderr}");
    // The router checks too, and refuses with the errors.
    let frame = Deploy { origin: "raw.rules".into(), text: "@name('y') SELECT;".into() }.encode(0);
    let context = cep_transport::Context::new();
    let answer =
        cep_transport::control::request(&context, &control, &frame, Duration::from_secs(10), &AtomicBool::new(false))
            .unwrap();
    let frame = Frame::read(&answer, usize::MAX).unwrap();
    assert_eq!(frame.kind(), FrameKind::Refused);
    let refused: Refused = frame.body().unwrap();
    assert!(refused.reason.contains("raw.rules:1:18: expected an expression, found `;`"), "{}", refused.reason);

    let deployed = cep().args(["rules", "deploy", "--router", &control]).arg(&good).output().unwrap();
    let stdout = String::from_utf8_lossy(&deployed.stdout);
    assert!(deployed.status.success(), "{}", String::from_utf8_lossy(&deployed.stderr));
    assert!(stdout.contains("(3 queries) as rules version 1; switch: stream 0 from seq "), "{stdout}");

    assert!(run.0.wait().unwrap().success());
    let summary: Summary = common::read_summary(&out);
    assert!(summary.complete);
    assert_eq!((summary.events_sent, summary.events_processed), (Some(500_000), 500_000));
    assert_eq!((summary.events_lost, summary.duplicates, summary.outputs_lost), (Some(0), 0, 0));
    assert!(summary.rejected.is_empty(), "{:?}", summary.rejected);

    // Only the good file was deployed, and it switched in the middle of both streams.
    assert_eq!(summary.rules.len(), 2, "{:?}", summary.rules);
    let at = summary.rules[1].at.clone();
    assert_eq!(summary.rules[1].queries, ["perc", "trend", "busy"]);
    assert_eq!(at.len(), 2);
    for (stream, first) in &at {
        assert!(*first > 0 && *first < 250_000, "stream {stream} switched at {first}: not under load");
    }

    // Exactly the outputs of the old rules before the switch and the new ones after it.
    let input = read_input(&out.join("input.csv")).unwrap();
    let old = cep_engine::reference_rules();
    let new = cep_engine::compile(&new_rules(), "new").unwrap();
    let expected = evaluate_deployments(&input, old, &[(new, at.clone())], Default::default()).outputs;
    let text = std::fs::read_to_string(out.join("outputs.csv")).unwrap();
    // Keyed by symbol too: the windows the end of input closes all name their stream's end.
    let mut got: HashMap<(String, String, u32, u64), (u64, u64)> = HashMap::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let key = (f[0].to_string(), f[1].to_string(), f[4].parse().unwrap(), f[5].parse().unwrap());
        let value = (f[2].parse::<f64>().unwrap().to_bits(), f[3].parse::<f64>().unwrap().to_bits());
        assert!(got.insert(key, value).is_none(), "duplicate output {line}");
    }
    assert_eq!(got.len(), expected.len());
    for o in &expected {
        assert_eq!(
            got.get(&(o.rule.clone(), o.symbol.clone(), o.injector, o.seq)),
            Some(&(o.price.to_bits(), o.value.to_bits())),
            "{o:?}"
        );
    }
    // The busy windows still open at the end of input emitted then (those with 3 ticks: how
    // many depends on where the last 200 ms window began), once per symbol.
    let end_of = |stream: u32| summary.streams[stream as usize].sent.unwrap();
    let closed_at_end = expected.iter().filter(|o| o.rule == "busy" && o.seq == end_of(o.injector)).count() as u64;
    assert_eq!(summary.final_outputs, closed_at_end);
    // Every rule of either set is counted; volatility stops at the switch, busy starts there.
    let count = |rule: &str| expected.iter().filter(|o| o.rule == rule).count() as u64;
    for rule in ["perc", "trend", "volatility", "busy"] {
        assert_eq!(summary.outputs[rule], count(rule), "{rule}");
        assert!(count(rule) > 0, "{rule}");
    }
    let before_switch = at.values().sum::<u64>();
    assert_eq!(summary.outputs["volatility"], before_switch);
    assert!(expected.iter().filter(|o| o.rule == "busy").all(|o| o.seq >= at[&o.injector]));
    assert_eq!(summary.latency_us.end_to_end.count, summary.outputs.values().sum::<u64>() - summary.final_outputs);
}
