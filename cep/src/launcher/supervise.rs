//! The processes of a local run: started, watched, restarted (the collector), stopped, in
//! order; a role that fails stops the rest, and the cause is the run's.

use super::{
    default_worker_id, role_configs, router_config, Endpoints, LaunchArgs, Process, RoleConfig, Usage, FINISH_GRACE,
    SIGNAL_ECHO, STOP_GRACE,
};
use anyhow::{bail, Context as _};
use cep_telemetry::MetricsArgs;
use std::path::Path;
use std::process::ExitStatus;
use std::time::Duration;
use tokio::process::Command;
use tokio::task::JoinSet;

/// Stops every process at once: SIGTERM. An injector takes its first signal for a graceful
/// stop and its second for this one: it gets SIGTERM (unless it already had it, stopping
/// gracefully), then SIGINT, a signal of another kind, so that the two cannot merge into one
/// while pending.
fn stop_at_once(pids: &[(String, u32)], injector_stopping: bool) {
    use nix::sys::signal::Signal;
    for process in pids {
        let injector = process.0 == "injector";
        if !(injector && injector_stopping) {
            terminate(std::slice::from_ref(process), Signal::SIGTERM);
        }
        if injector {
            terminate(std::slice::from_ref(process), Signal::SIGINT);
        }
    }
}

fn terminate(pids: &[(String, u32)], signal: nix::sys::signal::Signal) {
    for (_, pid) in pids {
        // The process may already have exited; nothing to do then.
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid as i32), signal);
    }
}

type Children = JoinSet<(String, std::io::Result<ExitStatus>)>;

/// Starts one role in its own process group (so a terminal's Ctrl-C reaches only the
/// launcher, which then stops every role once, in order).
fn spawn(
    program: &Path,
    name: String,
    args: Vec<String>,
    children: &mut Children,
    pids: &mut Vec<(String, u32)>,
) -> anyhow::Result<()> {
    let mut command = Command::new(program);
    command.args(&args).kill_on_drop(true).process_group(0);
    if std::env::var_os("RUST_LOG").is_none() {
        command.env("RUST_LOG", "warn");
    }
    let mut child = command.spawn().with_context(|| format!("cannot start the {name} process"))?;
    pids.push((name.clone(), child.id().unwrap_or(0)));
    children.spawn(async move {
        let status = child.wait().await;
        (name, status)
    });
    Ok(())
}

/// How many times a run starts its collector again after it died (one that keeps dying is a
/// fault of its own: the run then fails).
const COLLECTOR_RESTARTS: u32 = 3;

pub(super) async fn supervise(program: &Path, args: &LaunchArgs, endpoints: &Endpoints) -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate_signal = signal(SignalKind::terminate())?;
    let mut children = Children::new();
    let mut pids: Vec<(String, u32)> = Vec::new();
    let metrics = match &args.metrics.metrics_listen {
        Some(listen) => Some(crate::metrics_plan::MetricsPlan::new(
            listen,
            args.metrics.metrics_linger,
            args.workers,
            &endpoints.scratch,
        )?),
        None => None,
    };
    let unobserved: MetricsArgs = crate::cli::from_environment()?;
    // A process's arguments: its role, its metrics, and the global flags (every process logs
    // the way the launcher does; worker-0 may run with its clock off, a test hook).
    let process_args = |name: &str, role: &RoleConfig| {
        let observed = metrics.as_ref().map(|plan| plan.metrics(name));
        let clock_skew = args.worker0_clock_skew.filter(|_| name == default_worker_id(0));
        let globals = crate::cli::global_args(cep_telemetry::logging::format(), clock_skew);
        [role.to_args(observed.as_ref().unwrap_or(&unobserved)), globals].concat()
    };
    // The replay file whole, checked while the run starts (its first ticks were, before), on a
    // thread of its own that nothing waits for: a run that ends first ends the launcher.
    let mut replay_check = args.replay.clone().map(|file| {
        let (unit, count) = (args.time_unit, args.count);
        let (tell, told) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let _ = tell.send(cep_core::replay::scan(&file, unit, 1, count).map(|_| ()));
        });
        told
    });
    let mut bad_replay: Option<String> = None;
    let router = RoleConfig::Router(router_config(args, endpoints)?);
    spawn(program, "router".into(), process_args("router", &router), &mut children, &mut pids)?;
    let started = tokio::time::Instant::now();
    let (data, control) = loop {
        if let Some(announced) = endpoints.announced() {
            break announced;
        }
        if started.elapsed() > Duration::from_secs(30) {
            bail!("the router did not start listening within 30 s");
        }
        if let Some(finished) = children.try_join_next() {
            let (_, status) = finished?;
            bail!("the router exited before listening ({})", status?);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    if !args.quiet {
        // Kernel-chosen unless --control fixed it: how `cep cluster` and `cep rules deploy` reach this run.
        let operator = match &endpoints.keys {
            Some(keys) => format!(" --key {} --keys {}", keys.key("operator").display(), keys.public.display()),
            None => String::new(),
        };
        tracing::info!("the router's control endpoint is {control}: `cep cluster status --router {control}{operator}` reaches this run");
    }
    // A collector that dies is started again with the same flags: it resumes from its saved
    // state while the others hold what it had not saved.
    let mut collector_args: Option<Vec<String>> = None;
    let mut collector_restarts = 0;
    for Process { name, role } in role_configs(args, endpoints, &data, &control)? {
        let role_args = process_args(&name, &role);
        if name == "collector" {
            collector_args = Some(role_args.clone());
        }
        spawn(program, name, role_args, &mut children, &mut pids)?;
    }
    let targets = metrics.map(|plan| tokio::spawn(plan.write_targets(args.out.clone())));
    let mut failures: Vec<String> = Vec::new();
    let mut interrupted = false;
    let mut kill_deadline: Option<tokio::time::Instant> = None;
    // A graceful stop (the first Ctrl-C or SIGTERM): when it turns into a hard one if the
    // collector has not finished by then.
    let mut graceful_deadline: Option<tokio::time::Instant> = None;
    let mut last_terminate: Option<tokio::time::Instant> = None;
    let far = || tokio::time::Instant::now() + Duration::from_secs(86_400 * 365);
    loop {
        let deadline = kill_deadline.unwrap_or_else(far);
        let drained = graceful_deadline.filter(|_| kill_deadline.is_none() && !interrupted).unwrap_or_else(far);
        // The first signal stops the injector; the second (or a drain that takes too long)
        // stops everyone.
        let signalled = async {
            tokio::select! {
                _ = interrupt.recv() => false,
                _ = terminate_signal.recv() => true,
            }
        };
        tokio::select! {
            finished = children.join_next() => {
                let Some(finished) = finished else { break };
                let (name, status) = finished?;
                let status: ExitStatus = status?;
                pids.retain(|(pid_name, _)| pid_name != &name);
                let workers_left = pids.iter().any(|(pid_name, _)| pid_name.starts_with("worker"));
                let disk_full = name == "collector" && status.code() == Some(crate::cli::DISK_FULL_STATUS);
                // Its results are written, the cause in its summary: as a finished run's.
                let collector_done = name == "collector"
                    && (status.success() || status.code() == Some(crate::cli::INCOMPLETE_STATUS));
                if !status.success() && !interrupted && name.starts_with("worker") && workers_left {
                    // The router fails its symbols over to the others; the summary says
                    // whether its state was restored.
                    tracing::warn!("{name} exited with {status}; the router moves its symbols to the other workers");
                } else if !status.success()
                    && !interrupted
                    && kill_deadline.is_none()
                    && name == "collector"
                    && !disk_full
                    && !collector_done
                    && collector_restarts < COLLECTOR_RESTARTS
                {
                    collector_restarts += 1;
                    tracing::warn!("the collector exited with {status}; starting it again: it resumes from its saved state");
                    let role_args = collector_args.clone().expect("the collector was started");
                    spawn(program, name, role_args, &mut children, &mut pids)?;
                } else if !status.success() && !interrupted && !collector_done {
                    failures.push(match disk_full {
                        // Started again it would fail the same way: the run ends here.
                        true => format!(
                            "disk full: the collector cannot write its results in {} (its error above says which \
                             file and how much room is left; outputs.csv ends at a whole row)",
                            args.out.display()
                        ),
                        false => format!("{name} exited with {status}"),
                    });
                    // One role failing means the run cannot complete: stop the rest now.
                    if kill_deadline.is_none() {
                        stop_at_once(&pids, graceful_deadline.is_some());
                        kill_deadline = Some(tokio::time::Instant::now() + STOP_GRACE);
                    }
                } else if name == "collector" && kill_deadline.is_none() {
                    // The collector has everything; the others are finishing (or waiting for a
                    // last scrape of their metrics) or stuck.
                    let grace = FINISH_GRACE + args.metrics.metrics_linger;
                    kill_deadline = Some(tokio::time::Instant::now() + grace);
                }
            }
            checked = async { replay_check.as_mut().expect("guarded").await }, if replay_check.is_some() => {
                replay_check = None;
                let error = match checked {
                    Ok(Ok(())) => continue,
                    Ok(Err(error)) => error,
                    Err(_) => "the check of the file stopped unexpectedly".to_string(),
                };
                if kill_deadline.is_some() {
                    // The run is over (the collector has everything) or stopping already.
                    continue;
                }
                // Nothing past a bad line can be sent: the run stops here, with what it did.
                bad_replay = Some(format!(
                    "--replay {error}; the run was stopped (what it did so far is in {})",
                    args.out.display()
                ));
                interrupted = true;
                stop_at_once(&pids, graceful_deadline.is_some());
                kill_deadline.get_or_insert(tokio::time::Instant::now() + STOP_GRACE);
            }
            terminated = signalled => {
                if terminated && last_terminate.is_some_and(|at| at.elapsed() < SIGNAL_ECHO) {
                    // The same SIGTERM sent twice: `timeout` signals the process, then its group.
                    continue;
                }
                if terminated {
                    last_terminate = Some(tokio::time::Instant::now());
                }
                if graceful_deadline.is_none() {
                    tracing::warn!(
                        "stopping: the injector ends its streams, the rest drain and finish (Ctrl-C again to stop at once)"
                    );
                    graceful_deadline = Some(tokio::time::Instant::now() + STOP_GRACE);
                    let injectors: Vec<_> = pids.iter().filter(|(name, _)| name == "injector").cloned().collect();
                    terminate(&injectors, nix::sys::signal::Signal::SIGTERM);
                } else {
                    tracing::warn!("interrupted: stopping every process (results so far are kept)");
                    interrupted = true;
                    stop_at_once(&pids, true);
                    kill_deadline.get_or_insert(tokio::time::Instant::now() + STOP_GRACE);
                }
            }
            _ = tokio::time::sleep_until(drained) => {
                tracing::warn!(grace = ?STOP_GRACE, "the cluster did not drain in time: stopping every process");
                interrupted = true;
                stop_at_once(&pids, true);
                kill_deadline.get_or_insert(tokio::time::Instant::now() + STOP_GRACE);
            }
            _ = tokio::time::sleep_until(deadline) => {
                for (name, _) in &pids {
                    failures.push(format!("{name} did not stop in time and was killed"));
                }
                terminate(&pids, nix::sys::signal::Signal::SIGKILL);
                kill_deadline = Some(tokio::time::Instant::now() + Duration::from_secs(86_400));
            }
        }
    }
    if let Some(targets) = targets {
        match targets.is_finished() {
            true => targets.await??,
            false => targets.abort(),
        }
    }
    let cause = match (bad_replay, interrupted, failures.is_empty()) {
        (Some(error), _, _) => Usage(error).into(),
        (None, true, false) => anyhow::anyhow!("interrupted; {}", failures.join("; ")),
        (None, true, true) => anyhow::anyhow!("interrupted"),
        (None, false, false) => anyhow::anyhow!("{}", failures.join("; ")),
        (None, false, true) => return Ok(()),
    };
    Err(cause)
}
