//! `cep run --transport inproc`: the whole cluster as threads of this process, over ZeroMQ
//! `inproc://` endpoints in one shared context (no TCP stack, no Unix socket, no copy through
//! the kernel). The roles are the same library code the separate processes run, given the
//! same typed configurations; only the context and the endpoints differ, so the results
//! folder, the accounting and the outputs are those of a run over tcp.

use crate::cli::RoleConfig;
use crate::launcher::{FINISH_GRACE, STOP_GRACE};
use cep_injector::Stop;
use cep_transport::Context;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Runs `roles` (name, role) as threads sharing one ZeroMQ context until the collector has
/// written its results; the first role to fail stops the others. `stop.graceful` (the first
/// Ctrl-C) stops the injector only: it ends its streams, the rest drain and finish, nothing is
/// lost; if they have not within [`STOP_GRACE`], or on `stop.now` (a second Ctrl-C), every
/// role stops at once (results so far are still written).
pub fn run(roles: Vec<(String, RoleConfig)>, stop: Stop) -> anyhow::Result<()> {
    let context = Context::new();
    let shutdown = stop.now.clone();
    let (done, finished) = mpsc::channel::<(String, anyhow::Result<()>)>();
    let mut running: Vec<String> = Vec::new();
    for (name, role) in roles {
        let (context, stop, done, thread_name) = (context.clone(), stop.clone(), done.clone(), name.clone());
        running.push(name.clone());
        std::thread::Builder::new().name(name.clone()).spawn(move || {
            // A role that panics is a failure to report, like one that returns an error.
            let outcome =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_role(&context, &thread_name, role, stop)))
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("panicked")));
            let _ = done.send((thread_name, outcome));
        })?;
    }
    drop(done);
    let mut failures = Vec::new();
    let mut deadline: Option<Instant> = None;
    let mut interrupted = false;
    // When a graceful stop turns into a hard one, if the roles have not finished by then.
    let mut graceful_deadline: Option<Instant> = None;
    while !running.is_empty() {
        if graceful_deadline.is_none() && stop.graceful.load(Ordering::Relaxed) {
            tracing::warn!("stopping: the injector ends its streams, the rest drain (Ctrl-C again to stop at once)");
            graceful_deadline = Some(Instant::now() + STOP_GRACE);
        }
        if graceful_deadline.is_some_and(|at| deadline.is_none() && Instant::now() >= at) {
            tracing::warn!(grace = ?STOP_GRACE, "the cluster did not drain in time: stopping every role");
            shutdown.store(true, Ordering::Relaxed);
        }
        if !interrupted && failures.is_empty() && shutdown.load(Ordering::Relaxed) {
            interrupted = true;
            tracing::warn!("interrupted: stopping every role (results so far are kept)");
            deadline.get_or_insert(Instant::now() + STOP_GRACE);
        }
        let wait = deadline.map_or(Duration::from_secs(3600), |at| at.saturating_duration_since(Instant::now()));
        // Short waits: a Ctrl-C is noticed and said at once.
        let (name, outcome) = match finished.recv_timeout(wait.min(Duration::from_millis(100))) {
            Ok(finished) => finished,
            Err(mpsc::RecvTimeoutError::Timeout) if deadline.is_none_or(|at| Instant::now() < at) => continue,
            Err(_) => {
                failures.extend(running.iter().map(|name| format!("{name} did not stop in time")));
                break;
            }
        };
        running.retain(|running| running != &name);
        match outcome {
            Err(error) if !shutdown.load(Ordering::Relaxed) => {
                failures.push(format!("{name}: {}", crate::telemetry::one_line(&error)));
                // One role failing means the run cannot complete: stop the rest now.
                shutdown.store(true, Ordering::Relaxed);
                deadline.get_or_insert(Instant::now() + STOP_GRACE);
            }
            _ if name == "collector" => {
                deadline.get_or_insert(Instant::now() + FINISH_GRACE);
            }
            _ => {}
        }
    }
    if !failures.is_empty() {
        anyhow::bail!("{}", failures.join("; "));
    }
    if shutdown.load(Ordering::Relaxed) {
        anyhow::bail!("interrupted");
    }
    Ok(())
}

fn run_role(context: &Context, name: &str, role: RoleConfig, stop: Stop) -> anyhow::Result<()> {
    let shutdown = stop.now.clone();
    cep_telemetry::identity::set_for_thread(role.command(), name);
    match role {
        RoleConfig::Router(config) => cep_router::run_in(context, config, shutdown).map(drop)?,
        RoleConfig::Worker(config) => cep_worker::run_in(context, config, shutdown).map(drop)?,
        RoleConfig::Collector { config, .. } => {
            let (out, started) = (config.out.clone(), std::time::SystemTime::now());
            let ran = cep_collector::run_in(context, config, shutdown).map(drop);
            crate::run_report::write_or_warn(&out, started);
            ran?
        }
        RoleConfig::Injector(config) => cep_injector::run_in(context, config, stop).map(drop)?,
    }
    Ok(())
}
