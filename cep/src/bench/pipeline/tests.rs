//! Tests of `pipeline`.

use super::*;

#[test]
fn dates_are_utc_calendar_dates() {
    assert_eq!(utc_date(0), "1970-01-01T00:00:00Z");
    assert_eq!(utc_date(951_782_400), "2000-02-29T00:00:00Z");
    assert_eq!(utc_date(1_700_000_000), "2023-11-14T22:13:20Z");
    assert_eq!(utc_date(4_107_542_399), "2100-02-28T23:59:59Z");
}

#[test]
fn the_median_of_odd_and_even_counts() {
    assert_eq!(median(&mut []), None);
    assert_eq!(median(&mut [3.0, 1.0, 2.0]), Some(2.0));
    assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), Some(2.5));
}

fn run(kind: Kind, measure: Measure, eps: f64, p99: f64, lost: Option<u64>) -> ClusterRun {
    let mut run = ClusterRun::new(kind, measure, 0, format!("{}-{}", measure.name(), kind.name()), 1.0);
    run.complete = lost.is_some();
    run.events_lost = lost;
    run.events_sent = Some(100);
    run.events_processed = 100 - lost.unwrap_or(0);
    run.throughput_eps = eps;
    run.end_to_end_us.p99 = p99;
    run.end_to_end_us.mean = p99 / 2.0;
    run
}

#[test]
fn rows_take_medians_and_ratios_and_say_what_was_lost() {
    let args = PipelineArgs {
        transports: vec![Kind::Inproc, Kind::Tcp],
        repeat: 3,
        ..PipelineArgs::new(None, None, PipelineFlags::default(), None)
    };
    let engine: Vec<EngineMeasurement> = [8e6, 10e6, 12e6]
        .iter()
        .enumerate()
        .map(|(round, &eps)| EngineMeasurement {
            round,
            events: 100,
            seconds: 100.0 / eps,
            events_per_s: eps,
            ns_per_event: 1e9 / eps,
            outputs: 123,
        })
        .collect();
    let runs = vec![
        run(Kind::Inproc, Measure::Throughput, 2e6, 0.0, Some(0)),
        run(Kind::Inproc, Measure::Throughput, 4e6, 0.0, Some(0)),
        run(Kind::Inproc, Measure::Throughput, 3e6, 0.0, Some(0)),
        run(Kind::Inproc, Measure::Latency, 2e5, 900.0, Some(0)),
        run(Kind::Inproc, Measure::Latency, 2e5, 100.0, Some(0)),
        run(Kind::Inproc, Measure::Latency, 2e5, 500.0, Some(0)),
        run(Kind::Tcp, Measure::Throughput, 1e6, 0.0, Some(7)),
        run(Kind::Tcp, Measure::Latency, 2e5, 300.0, None),
    ];
    let rows = rows(&args, &engine, &runs);
    assert_eq!(rows.iter().map(|r| r.row.as_str()).collect::<Vec<_>>(), ["engine alone", "inproc", "tcp"]);
    assert_eq!(
        (rows[0].throughput_eps, rows[0].throughput_ratio, rows[0].cost_per_event_us),
        (Some(10e6), Some(1.0), Some(0.1))
    );
    let inproc = &rows[1];
    assert_eq!((inproc.throughput_eps, inproc.throughput_ratio), (Some(3e6), Some(0.3)));
    assert_eq!(inproc.latency_us.as_ref().unwrap().p99, 500.0);
    assert!((inproc.latency_mean_over_engine_cost.unwrap() - 2500.0).abs() < 1e-9);
    assert!(inproc.complete && inproc.events_lost == Some(0) && inproc.problems.is_empty());
    let tcp = &rows[2];
    assert_eq!((tcp.throughput_eps, tcp.events_lost, tcp.complete), (Some(1e6), None, false));
    assert_eq!(tcp.problems.len(), 2, "{:?}", tcp.problems);
    assert!(tcp.problems[0].contains("93 of 100 events processed, 7 lost"), "{:?}", tcp.problems);
    assert!(tcp.problems[1].contains("incomplete"), "{:?}", tcp.problems);
    // The text says so on the row and under the table.
    let results = PipelineResults {
        date: utc_date(0),
        unix_time_s: 0,
        workload: Workload {
            rules: "reference".into(),
            symbols: 1470,
            seed: 42,
            batch: 4096,
            workers: 2,
            connections: 1,
            count: 100,
            engine_event_rate_eps: ENGINE_EVENT_RATE,
            latency_rate_eps: 2e5,
            latency_duration_s: 1.0,
            latency_warmup_s: 1.0,
            transports: args.transports.clone(),
            repeat: 3,
            cores: 2,
        },
        order: vec!["round 1: engine alone".into()],
        engine_runs: engine,
        rows,
        interrupted: false,
        wall_s: 1.0,
    };
    let text = summary_text(&results);
    assert!(text.contains(HEADER), "{text}");
    let tcp_line = text.lines().find(|line| line.starts_with("tcp ")).unwrap();
    assert!(tcp_line.contains("1.00 M ev/s!") && tcp_line.contains("unknown!"), "{tcp_line}");
    assert!(text.contains("! tcp: throughput run over tcp"), "{text}");
    assert!(!text.contains("CURVE"), "no curve row, no CURVE line");
}

#[test]
fn curve_is_the_cluster_over_tcp_secure_and_its_cost_a_ratio_to_tcp() {
    let args = PipelineArgs {
        transports: vec![Kind::Tcp, Kind::Curve],
        ..PipelineArgs::new(None, None, PipelineFlags::default(), None)
    };
    let launch = args.launch(Kind::Curve, Measure::Throughput, PathBuf::from("x"));
    assert_eq!((launch.transport, launch.secure), (LocalTransport::Tcp, true));
    assert!(!args.launch(Kind::Tcp, Measure::Throughput, PathBuf::from("x")).secure);
    let runs = vec![
        run(Kind::Tcp, Measure::Throughput, 2e6, 0.0, Some(0)),
        run(Kind::Tcp, Measure::Latency, 2e5, 400.0, Some(0)),
        run(Kind::Curve, Measure::Throughput, 1.8e6, 0.0, Some(0)),
        run(Kind::Curve, Measure::Latency, 2e5, 500.0, Some(0)),
    ];
    let mut rows = rows(&args, &[], &runs);
    for row in &mut rows[1..] {
        row.latency_us.as_mut().unwrap().p50 = if row.transport == Some(Kind::Tcp) { 100.0 } else { 120.0 };
    }
    assert_eq!(
        curve_cost(&rows).as_deref(),
        Some(
            "CURVE (every socket encrypted and authenticated): throughput x0.900 of tcp's (10.0 % cost), p50 x1.20 \
             and p99 x1.25 of tcp's."
        )
    );
    assert_eq!(curve_cost(&rows[..2]), None);
}
