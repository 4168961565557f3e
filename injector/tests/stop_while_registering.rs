//! An injector told to stop before the run starts has sent nothing, so even a graceful stop
//! ends its wait to register at once, and says it stopped (not that the router timed out).

use cep_injector::{run, InjectorConfig, Stop};
use std::sync::atomic::Ordering;
use std::time::Duration;

#[test]
fn a_graceful_stop_ends_the_wait_to_register() {
    // A socket that accepts connections but never speaks ZeroMQ: the router never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let router = format!("tcp://{}", silent.local_addr().unwrap());
    let stop = Stop::default();
    stop.graceful.store(true, Ordering::Relaxed);
    let config =
        InjectorConfig { router: router.clone(), start_timeout: Duration::from_secs(600), ..Default::default() };
    let error = run(config, stop).unwrap_err().to_string();
    let expected =
        format!("cannot register with the router at {router}: stopped while waiting for an answer from {router}");
    assert!(error.starts_with(&expected), "{error}");
}
