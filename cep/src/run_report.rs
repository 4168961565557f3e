//! Every run's `report.html`, written beside its results from the files the collector left:
//! the verdict and counts (summary.json), throughput over time (throughput.csv), latency per
//! hop (summary.json), latency over time (intervals.csv), outputs per rule and load per
//! worker, with rescales, failovers and collector restarts marked on the time axes. One
//! self-contained page, no scripts: it opens from the folder, on any machine.

use crate::html::chart::{bar_chart, line_chart_marked, micros, number, Axis, Bar, Mark, Series, Unit};
use crate::html::report::{read_csv, table, Report};
use cep_collector::throughput::THROUGHPUT_FILE;
use cep_core::results::{grouped, known_grouped, LatencySummary, Summary};
use std::path::{Path, PathBuf};

/// The page's name in the results folder.
pub const REPORT_HTML: &str = "report.html";

/// The headings of the page's charts, in order: what a reader (and the test) looks for.
pub const CHARTS: [&str; 5] =
    ["Throughput over time", "Latency per hop", "Latency over time", "Outputs per rule", "Load per worker"];

/// Writes `out/report.html` from the results in `out`; returns its path. Fails only when
/// `out` holds no readable summary.json or the page cannot be written.
pub fn write(out: &Path) -> anyhow::Result<PathBuf> {
    let path = out.join("summary.json");
    let text = std::fs::read_to_string(&path).map_err(|error| anyhow::anyhow!("{}: {error}", path.display()))?;
    let summary: Summary =
        serde_json::from_str(&text).map_err(|error| anyhow::anyhow!("{}: {error}", path.display()))?;
    let page = out.join(REPORT_HTML);
    std::fs::write(&page, page_of(out, &summary).to_html())
        .map_err(|error| anyhow::anyhow!("{}: {error}", page.display()))?;
    Ok(page)
}

/// Writes the report of a run that wrote its summary at `since` or later (an earlier run's
/// summary gets no page from this one), and says why not where it could not. Returns whether
/// the page is there.
pub fn write_or_warn(out: &Path, since: std::time::SystemTime) -> bool {
    if !summary_written_since(out, since) {
        return false;
    }
    match write(out) {
        Ok(_) => true,
        Err(error) => {
            tracing::warn!(%error, "cannot write the run's report.html");
            false
        }
    }
}

/// Whether `out` holds a summary.json written at `since` or later: this run's.
pub fn summary_written_since(out: &Path, since: std::time::SystemTime) -> bool {
    std::fs::metadata(out.join("summary.json")).and_then(|meta| meta.modified()).is_ok_and(|written| written >= since)
}

fn page_of(out: &Path, summary: &Summary) -> Report {
    let mut report = Report::new("cep run report");
    report.note(&summary.verdict_figures());
    if summary.running {
        report.note("The run was still going when this page was written: its figures are the ones so far.");
    }
    report.section("Counts", counts_table(summary));
    let (rates, restarts) = throughput(out);
    let marks: Vec<Mark> = moves(summary).chain(restarts).collect();
    let seconds = || Axis::linear("seconds since the start", Unit::Number);
    report.chart(
        CHARTS[0],
        "Ticks sent (received by the router) and processed by the workers per second, and outputs per second of all rules together (throughput.csv: cumulative counts once a second, from the router's and the workers' progress reports every half second, taken at one instant). Dashed lines mark rescales, failovers and collector restarts. After a failover the survivors process again the ticks the dead worker had processed since its checkpoint: they show here twice (summary.json counts each tick once).",
        line_chart_marked(
            "throughput",
            &seconds(),
            &Axis::linear("per second", Unit::Number),
            &rates,
            &marks,
        ),
    );
    report.chart(
        CHARTS[1],
        "p50, p99 and p99.9 of each hop, one value per output after the warm-up, log scale. End to end runs from the tick's intended send time to the output's arrival at the collector; the hops below split that path.",
        hop_chart(summary),
    );
    let intervals = read_csv(&out.join("intervals.csv"));
    let over_time = |column: usize| -> Vec<(f64, f64)> {
        intervals.iter().filter(|r| r.len() >= 7).map(|r| (r[0], r[column])).collect()
    };
    report.chart(
        CHARTS[2],
        "End-to-end p50, p99 and max of the outputs that reached the collector in each second (intervals.csv), log scale: a stall shows as a step.",
        line_chart_marked(
            "latency per second",
            &seconds(),
            &Axis::log("end-to-end latency", Unit::Micros),
            &[Series::new("p50", over_time(3)), Series::new("p99", over_time(4)), Series::new("max", over_time(6))],
            &marks,
        ),
    );
    report.chart(CHARTS[3], &rules_about(summary), rules_chart(summary));
    report.chart(
        CHARTS[4],
        "Ticks each worker processed. A worker that died counts what it had processed at the checkpoint its symbols were restored from; the ticks after it count at the survivors.",
        workers_chart(summary),
    );
    if !summary.rescales.is_empty() || !summary.failovers.is_empty() {
        report.section("Rescales and failovers", moves_table(summary));
    }
    report
}

fn counts_table(summary: &Summary) -> String {
    let mut rows = vec![
        vec!["ticks sent".to_string(), known_grouped(summary.events_sent)],
        vec!["ticks processed".to_string(), grouped(summary.events_processed)],
        vec!["ticks lost".to_string(), format!("{}{}", known_grouped(summary.events_lost), summary.lost_causes())],
        vec!["duplicates".to_string(), grouped(summary.duplicates)],
        vec!["outputs, all rules".to_string(), grouped(summary.outputs.values().sum())],
        vec!["outputs lost".to_string(), grouped(summary.outputs_lost)],
        vec!["duration".to_string(), format!("{:.1} s", summary.duration_s)],
        vec!["throughput".to_string(), format!("{} ticks/s", grouped(summary.throughput_eps as u64))],
        vec!["complete".to_string(), summary.complete.to_string()],
        vec!["secure (CURVE)".to_string(), summary.secure.to_string()],
    ];
    if summary.late > 0 || summary.late_dropped > 0 {
        rows.push(vec![
            "late ticks (processed, dropped)".to_string(),
            format!("{}, {}", summary.late, summary.late_dropped),
        ]);
    }
    if let Some(failure) = &summary.failure {
        rows.push(vec!["failure".to_string(), failure.clone()]);
    }
    table(&["", "value"], &rows)
}

/// From throughput.csv's cumulative rows: the rates, (ticks sent, ticks processed, outputs)
/// per second, each over at least half a second, and the collector's restarts. A shorter span
/// (the run's last row, just after the one before it) would divide half a second of
/// unreported ticks by a sliver of time.
fn throughput(out: &Path) -> (Vec<Series>, Vec<Mark>) {
    let rows: Vec<Vec<f64>> = read_csv(&out.join(THROUGHPUT_FILE)).into_iter().filter(|r| r.len() >= 4).collect();
    let (mut sent, mut ticks, mut outputs, mut restarts) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // A fresh run counts from nothing at its start; a row without the router's count (before
    // its first report, or a file of an earlier version) has none to draw.
    let sent_of = |row: &[f64]| row.get(4).copied().filter(|sent| sent.is_finite());
    let mut base = vec![0.0, 0.0, 0.0, 1.0, 0.0];
    for row in rows {
        if row[3] != base[3] {
            // A restarted collector's first row: its counts go on, its rate starts afresh.
            restarts.push(Mark { at: row[0], label: "collector restarted".to_string() });
            base = row;
            continue;
        }
        let span = row[0] - base[0];
        if span >= 0.5 {
            let rate = |now: f64, then: f64| ((now - then) / span).max(0.0);
            if let (Some(now), Some(then)) = (sent_of(&row), sent_of(&base)) {
                sent.push((row[0], rate(now, then)));
            }
            ticks.push((row[0], rate(row[1], base[1])));
            outputs.push((row[0], rate(row[2], base[2])));
            base = row;
        }
    }
    let sent = (!sent.is_empty()).then(|| Series::new("ticks sent", sent));
    let series = sent.into_iter().chain([Series::new("ticks processed", ticks), Series::new("outputs", outputs)]);
    (series.collect(), restarts)
}

/// Rescales and failovers, at their time since the run's start.
fn moves(summary: &Summary) -> impl Iterator<Item = Mark> + '_ {
    let rescales = summary.rescales.iter().map(|r| Mark { at: r.at_s, label: format!("{} {}", r.kind, r.worker) });
    rescales.chain(summary.failovers.iter().map(|f| Mark { at: f.at_s, label: format!("failover {}", f.worker) }))
}

const PERCENTILES: [&str; 3] = ["p50", "p99", "p99.9"];

fn hop_chart(summary: &Summary) -> String {
    let hops = &summary.latency_us;
    let named: [(&str, &LatencySummary); 6] = [
        ("end to end", &hops.end_to_end),
        ("injector to router", &hops.injector_to_router),
        ("router", &hops.router),
        ("router to worker", &hops.router_to_worker),
        ("engine", &hops.engine),
        ("worker to collector", &hops.worker_to_collector),
    ];
    let mut bars = Vec::new();
    for (name, hop) in named.iter().filter(|(_, hop)| hop.count > 0) {
        for (group, value) in [hop.p50, hop.p99, hop.p999].into_iter().enumerate() {
            bars.push(Bar { name: format!("{name} {}", PERCENTILES[group]), value, group, text: micros(value) });
        }
    }
    bar_chart("latency per hop", &Axis::log("latency", Unit::Micros), &bars, &PERCENTILES)
}

/// Charts hold this many rules at most; the page says how many more there are.
const RULES_SHOWN: usize = 40;

fn rules_about(summary: &Summary) -> String {
    let about = "Outputs of each rule over the whole run, warm-up included.";
    match summary.outputs.len() {
        n if n > RULES_SHOWN => {
            format!("{about} The {RULES_SHOWN} rules with the most of {n}; summary.json lists every one.")
        }
        _ => about.to_string(),
    }
}

fn rules_chart(summary: &Summary) -> String {
    let mut rules: Vec<(&String, &u64)> = summary.outputs.iter().collect();
    rules.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let bars: Vec<Bar> = rules
        .into_iter()
        .take(RULES_SHOWN)
        .map(|(rule, count)| Bar { name: rule.clone(), value: *count as f64, group: 0, text: number(*count as f64) })
        .collect();
    bar_chart("outputs per rule", &Axis::linear("outputs", Unit::Number), &bars, &["outputs"])
}

fn workers_chart(summary: &Summary) -> String {
    let bars: Vec<Bar> = summary
        .workers
        .iter()
        .map(|w| Bar {
            name: w.id.clone(),
            value: w.events as f64,
            group: usize::from(w.failed),
            text: format!("{}{}", number(w.events as f64), if w.failed { " (died)" } else { "" }),
        })
        .collect();
    bar_chart("ticks per worker", &Axis::linear("ticks processed", Unit::Number), &bars, &["running", "died"])
}

fn moves_table(summary: &Summary) -> String {
    // Each move at its time, then the rows in the order they happened.
    let mut moves: Vec<(f64, Vec<String>)> = summary
        .rescales
        .iter()
        .map(|r| {
            let state = match r.state_lost.is_empty() {
                true => "kept".to_string(),
                false => format!("lost for {}", r.state_lost.join(" ")),
            };
            let moved = format!("{} symbols in {:.0} ms", r.symbols, r.duration_ms);
            (r.at_s, vec![r.kind.clone(), r.worker.clone(), moved, state])
        })
        .chain(summary.failovers.iter().map(|f| {
            let state = match (f.recovered, f.state_lost.is_empty()) {
                (true, true) => "restored".to_string(),
                _ => format!("lost for {} ({})", f.state_lost.join(" "), f.reason),
            };
            let moved =
                format!("{} symbols from checkpoint {}, {} ticks replayed", f.symbols, f.checkpoint, f.replayed);
            (f.at_s, vec!["failover".to_string(), f.worker.clone(), moved, state])
        }))
        .collect();
    moves.sort_by(|a, b| a.0.total_cmp(&b.0));
    let rows: Vec<Vec<String>> =
        moves.into_iter().map(|(at, row)| std::iter::once(format!("{at:.1}")).chain(row).collect()).collect();
    table(&["at (s)", "what", "worker", "moved", "state"], &rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cep_core::results::{FailoverSummary, WorkerSummary};

    #[test]
    fn the_page_names_its_figures_and_marks_what_happened() {
        let dir = tempfile::tempdir().unwrap();
        let worker = |id: &str, failed: bool| WorkerSummary {
            id: id.to_string(),
            events: 1_000,
            symbols: None,
            failed,
            ticks_with_outputs: 0,
        };
        let mut summary = Summary {
            events_sent: Some(2_000),
            events_processed: 2_000,
            events_lost: Some(0),
            complete: true,
            workers: vec![worker("worker-0", false), worker("worker-1", true)],
            failovers: vec![FailoverSummary {
                worker: "worker-1".into(),
                at_s: 1.5,
                recovered: true,
                ..Default::default()
            }],
            ..Summary::default()
        };
        summary.outputs.insert("perc".into(), 300);
        summary.latency_us.end_to_end =
            LatencySummary { count: 5, p50: 80.0, p99: 12_000.0, p999: 30_000.0, ..Default::default() };
        std::fs::write(dir.path().join("summary.json"), serde_json::to_string(&summary).unwrap()).unwrap();
        std::fs::write(
            dir.path().join(THROUGHPUT_FILE),
            "elapsed_s,ticks_processed,outputs,collector_incarnation,ticks_sent\n1.0,500,60,1,\n2.0,1200,150,1,1300\n2.0,1200,150,2,1300\n3.0,2000,300,2,2000\n",
        )
        .unwrap();
        let page = std::fs::read_to_string(write(dir.path()).unwrap()).unwrap();
        for heading in CHARTS {
            assert!(page.contains(&format!("<h2>{heading}</h2>")), "{heading}");
        }
        assert!(page.contains("OK: 2,000 ticks, 0 lost, complete; p50 80 us"), "{page}");
        for mark in ["failover worker-1", "collector restarted", "worker-1", "perc", "(died)", "12 ms", "ticks sent"] {
            assert!(page.contains(mark), "{mark}");
        }
    }

    #[test]
    fn no_summary_no_page_and_the_error_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let error = write(dir.path()).unwrap_err().to_string();
        assert!(error.contains("summary.json"), "{error}");
        assert!(!dir.path().join(REPORT_HTML).exists());
    }
}
