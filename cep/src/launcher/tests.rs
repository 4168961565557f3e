//! Tests of `launcher`.

use super::*;
use cep_telemetry::args::parse_flags;
use cep_telemetry::MetricsArgs;

#[test]
fn default_is_what_no_flags_give() {
    assert_eq!(parse_flags::<LaunchArgs>(&[]).unwrap(), LaunchArgs::default());
}

/// A role's process arguments, parsed as `cep` parses them.
fn parsed(role: &RoleConfig) -> crate::cli::Command {
    let args = std::iter::once("cep".to_string()).chain(role.to_args(&MetricsArgs::default()));
    <crate::cli::Cli as clap::Parser>::try_parse_from(args).unwrap().command
}

#[test]
fn every_process_gets_what_the_run_says() {
    let args = LaunchArgs {
        workers: 3,
        connections: 2,
        rate: 0.0,
        count: Some(5000),
        batch: 64,
        quiet: true,
        record_input: true,
        out: PathBuf::from("/tmp/somewhere"),
        ..LaunchArgs::default()
    };
    let endpoints = Endpoints::new(LocalTransport::Ipc);
    check_roles(&args, &endpoints).unwrap();
    let router = router_config(&args, &endpoints).unwrap();
    assert_eq!((router.workers, router.streams, router.batch), (3, 2, 64));
    assert_eq!(router.announce, Some(endpoints.announce_file()));
    let processes = role_configs(&args, &endpoints, "ipc:///data", "ipc:///control").unwrap();
    let names: Vec<&str> = processes.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["collector", "worker-0", "worker-1", "worker-2", "injector"]);
    for process in &processes {
        // What the process parses is what the launcher decided.
        match (&process.role, parsed(&process.role)) {
            (RoleConfig::Collector { config, .. }, crate::cli::Command::Collector { config: got, .. }) => {
                assert_eq!(&got, config);
                assert!(!got.progress && got.out == args.out);
            }
            (RoleConfig::Worker(config), crate::cli::Command::Worker { config: got, .. }) => {
                assert_eq!(&got, config);
                assert_eq!((got.id.as_deref(), got.batch), (Some(process.name.as_str()), 64));
            }
            (RoleConfig::Injector(config), crate::cli::Command::Injector { config: got, .. }) => {
                assert_eq!(&got, config);
                assert_eq!((got.count, got.duration, got.warmup), (Some(5000), None, Duration::ZERO));
                assert_eq!(got.record, Some(args.out.join("input.csv")));
                assert_eq!(got.router_data, "ipc:///data");
            }
            (role, command) => panic!("{role:?} became {command:?}"),
        }
    }
    // Without a duration or a count the injector sends until stopped, after a 1 s warm-up.
    let endless = role_configs(&LaunchArgs::default(), &endpoints, "ipc:///data", "ipc:///control").unwrap();
    let Some(RoleConfig::Injector(injector)) = endless.last().map(|p| &p.role) else { panic!() };
    assert_eq!((injector.duration, injector.count, injector.warmup), (None, None, Duration::from_secs(1)));
    assert_eq!(injector.validate(), Ok(()));
    // The duration includes the warm-up: 1 s, or a fifth of a run shorter than 5 s.
    for (duration, warmup) in
        [(Duration::from_secs(10), Duration::from_secs(1)), (Duration::from_secs(3), Duration::from_millis(600))]
    {
        let timed = LaunchArgs { duration: Some(duration), ..LaunchArgs::default() };
        let timed = role_configs(&timed, &endpoints, "ipc:///data", "ipc:///control").unwrap();
        let Some(RoleConfig::Injector(injector)) = timed.last().map(|p| &p.role) else { panic!() };
        assert_eq!((injector.duration, injector.warmup), (Some(duration), warmup));
        assert_eq!(injector.validate(), Ok(()));
    }
}

#[test]
fn a_run_stopped_before_any_summary_gets_one_that_says_why_and_counts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    record_failure(dir.path(), "interrupted");
    let read = || -> Summary {
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("summary.json")).unwrap()).unwrap()
    };
    let summary = read();
    assert_eq!(summary.failure.as_deref(), Some("cep run stopped the run: interrupted"));
    assert!(!summary.complete && !summary.running);
    assert_eq!((summary.events_sent, summary.events_lost, summary.events_processed), (None, None, 0));
    assert!(std::fs::read_to_string(dir.path().join("report.txt")).unwrap().contains("[OVERALL], Complete, false"));
    // The first cause stays; a complete run is never marked failed.
    record_failure(dir.path(), "another");
    assert_eq!(read().failure.as_deref(), Some("cep run stopped the run: interrupted"));
    let complete = Summary { complete: true, ..Summary::default() };
    cep_collector::write_results(dir.path(), &complete).unwrap();
    record_failure(dir.path(), "interrupted");
    assert_eq!(read(), complete);
}
