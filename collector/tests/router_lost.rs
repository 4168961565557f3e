//! The collector driver against a router that dies: it notices within the failure time-out,
//! writes what it has and fails. (A process of its own: the driver registers the collector's
//! metrics, which the unit tests' process shares.)

use cep_collector::{run_in, CollectorConfig, CollectorError};
use cep_core::clock::now_ns;
use cep_core::control::{Ready, RulesText};
use cep_core::frame::Body;
use cep_core::results::Summary;
use cep_transport::control::ControlServer;
use cep_transport::Context;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// A router that starts the run, then dies: the collector notices, writes what it has and
/// fails, naming the router.
#[test]
fn a_lost_router_ends_the_run_with_partial_results_and_an_error() {
    let context = Context::new();
    let server = ControlServer::bind(&context, "tcp://127.0.0.1:*").unwrap();
    let router = server.endpoint().to_string();
    let out = tempfile::tempdir().unwrap();
    let config = CollectorConfig {
        listen: "tcp://127.0.0.1:*".into(),
        clock_listen: "tcp://127.0.0.1:*".into(),
        router: router.clone(),
        advertise: "127.0.0.1".into(),
        out: out.path().to_path_buf(),
        start_timeout: Duration::from_secs(30),
        failure_timeout: Duration::from_millis(400),
        ..CollectorConfig::default()
    };
    let collector = std::thread::spawn({
        let context = context.clone();
        move || run_in(&context, config, Arc::new(AtomicBool::new(false)))
    });
    // Answers the registration with Ready, then goes.
    let client = loop {
        if let Some(request) = server.recv(Duration::from_millis(100)).unwrap() {
            break request.client;
        }
    };
    let ready = Ready {
        assigned: 0,
        workers: vec![],
        collector: String::new(),
        streams: 1,
        start_ns: now_ns(),
        warmup_ns: 0,
        collector_clock: String::new(),
        rules: RulesText { epoch: 0, origin: "test".into(), text: String::new() },
        allowed_lateness_ns: None,
        joining: false,
        collector_incarnation: 1,
        collector_key: String::new(),
        failure_timeout_ns: 2_000_000_000,
        checkpoint_dir: String::new(),
    };
    server.reply(&client, &ready.encode(0)).unwrap();
    drop(server);
    let error = collector.join().unwrap().unwrap_err();
    assert!(matches!(&error, CollectorError::RouterLost(cause) if cause.contains(&router)), "{error}");
    // The collector's line to the router may have connected before the router went (its
    // connection then dropped) or not (never reached): either way it is named, as dead.
    let message = error.to_string();
    assert!(message.starts_with("the run failed: the router is lost: "), "{message}");
    assert!(message.contains(&router) && message.contains("taken for dead"), "{message}");
    let summary: Summary =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("summary.json")).unwrap()).unwrap();
    assert!(!summary.complete && !summary.running, "{summary:?}");
    assert!(summary.failure.as_deref().is_some_and(|cause| cause.contains(&router)), "{summary:?}");
}
