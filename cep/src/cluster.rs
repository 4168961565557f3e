//! `cep cluster`: watch a running cluster's membership, and drain a worker out of it.

use anyhow::{bail, Context as _};
use cep_core::control::{Refused, MAX_CONTROL_FRAME_BYTES};
use cep_core::frame::{Body, Frame};
use cep_core::rescale::{ClusterStatus, Leave, RescaleAccepted, StatusRequest};
use cep_core::wire::FrameKind;
use cep_transport::security::SecurityArgs;
use clap::{Args, Subcommand};
use serde::de::DeserializeOwned;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct ClusterArgs {
    #[command(subcommand)]
    pub command: ClusterCommand,
}

#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    /// Print the members (state, symbols owned, events/s routed to each), the move in
    /// progress and how many streams have ended. Rates are measured over `--interval`.
    Status {
        /// The router's control endpoint.
        #[arg(long, env = "CEP_ROUTER", default_value = "tcp://127.0.0.1:5556")]
        router: String,
        /// How long to measure each worker's events/s over (0: counts only).
        #[arg(long, default_value = "1s", value_parser = cep_core::duration::parse_duration)]
        interval: Duration,
        /// How long to wait for each answer of the router.
        #[arg(long, env = "CEP_CLUSTER_TIMEOUT", default_value = "10s", value_parser = cep_core::duration::parse_duration)]
        timeout: Duration,
        /// An operator's key (with `--keys`), for a secure cluster.
        #[command(flatten)]
        security: SecurityArgs,
    },
    /// Drain a worker: its symbols move to the others with their state, then it exits 0.
    /// The last worker cannot be removed.
    Remove {
        /// The worker's id (as `cep cluster status` lists it).
        worker: String,
        /// The router's control endpoint.
        #[arg(long, env = "CEP_ROUTER", default_value = "tcp://127.0.0.1:5556")]
        router: String,
        /// How long to wait for the router's answer.
        #[arg(long, env = "CEP_CLUSTER_TIMEOUT", default_value = "10s", value_parser = cep_core::duration::parse_duration)]
        timeout: Duration,
        /// An operator's key (with `--keys`), for a secure cluster.
        #[command(flatten)]
        security: SecurityArgs,
    },
}

pub fn run(args: ClusterArgs) -> anyhow::Result<()> {
    match args.command {
        ClusterCommand::Status { router, interval, timeout, security } => {
            status(&Asking::new(&router, timeout, &security)?, interval)
        }
        ClusterCommand::Remove { worker, router, timeout, security } => {
            remove(&worker, &Asking::new(&router, timeout, &security)?)
        }
    }
}

/// An operator's line to the router's control socket: open, or secure with the operator's key.
pub struct Asking<'a> {
    router: &'a str,
    timeout: Duration,
    context: cep_transport::Context,
}

impl<'a> Asking<'a> {
    /// Asks `router`, waiting `timeout` for each answer, as `security` says (a bad key file is
    /// a usage error).
    pub fn new(router: &'a str, timeout: Duration, security: &SecurityArgs) -> anyhow::Result<Asking<'a>> {
        let context = security.context().map_err(|error| crate::cli::Usage(error.to_string()))?;
        Ok(Asking { router, timeout, context })
    }

    /// The router's control endpoint.
    pub fn router(&self) -> &'a str {
        self.router
    }

    /// One request; the answer as it came.
    pub fn raw(&self, request: &[u8]) -> anyhow::Result<Vec<u8>> {
        let router = self.router;
        cep_transport::control::request_once(&self.context, router, request, self.timeout).map_err(|error| {
            // A refused handshake says why itself; silence needs the hint.
            let hint = match &error {
                cep_transport::TransportError::Timeout { .. } => " (is the endpoint right?)",
                _ => "",
            };
            anyhow::Error::new(error).context(format!("cannot reach the router at {router}{hint}"))
        })
    }

    /// One request; its answer decoded as `B`, or the router's refusal as the error.
    pub fn ask<B: Body + DeserializeOwned>(&self, request: &[u8]) -> anyhow::Result<B> {
        let router = self.router;
        let answer = self.raw(request)?;
        let frame = Frame::read(&answer, MAX_CONTROL_FRAME_BYTES)
            .with_context(|| format!("bad answer from the router at {router}"))?;
        if frame.kind() == FrameKind::Refused {
            let refused: Refused = frame.body()?;
            bail!("the router at {router} refused: {}", refused.reason);
        }
        frame.body::<B>().with_context(|| format!("bad answer from the router at {router} (another version?)"))
    }
}

fn status(router: &Asking<'_>, interval: Duration) -> anyhow::Result<()> {
    let request = StatusRequest.encode(0);
    let first: ClusterStatus = router.ask(&request)?;
    let (status, rates) = if interval.is_zero() {
        (first, None)
    } else {
        std::thread::sleep(interval);
        let second: ClusterStatus = router.ask(&request)?;
        let seconds = second.now_ns.saturating_sub(first.now_ns) as f64 / 1e9;
        let rates: Vec<f64> = second
            .members
            .iter()
            .map(|member| {
                let before = first.members.iter().find(|m| m.index == member.index).map_or(0, |m| m.routed);
                if seconds > 0.0 {
                    member.routed.saturating_sub(before) as f64 / seconds
                } else {
                    0.0
                }
            })
            .collect();
        (second, Some(rates))
    };
    cep_telemetry::out!("{}", render(&status, rates.as_deref()));
    Ok(())
}

/// The status as a table, then the move in progress and the streams.
fn render(status: &ClusterStatus, rates: Option<&[f64]>) -> String {
    let mut text = format!(
        "{:<20} {:>5} {:<8} {:>8} {:>12} {:>12}\n",
        "worker", "index", "state", "symbols", "routed", "events/s"
    );
    for (i, member) in status.members.iter().enumerate() {
        let rate = rates.map_or("-".to_string(), |rates| format!("{:.0}", rates[i]));
        text += &format!(
            "{:<20} {:>5} {:<8} {:>8} {:>12} {:>12}\n",
            member.id, member.index, member.state, member.symbols, member.routed, rate
        );
    }
    match &status.moving {
        Some(moving) => {
            text += &format!(
                "moving: {} of {}, {} symbols, slice {} of {} done",
                moving.kind, moving.worker, moving.symbols, moving.slices_done, moving.slices
            );
            if status.queued > 0 {
                text += &format!(", {} more rescales queued", status.queued);
            }
            text += "\n";
        }
        None => text += "moving: nothing\n",
    }
    text += &format!("streams ended: {} of {}\n", status.streams_ended, status.streams);
    text
}

fn remove(worker: &str, router: &Asking<'_>) -> anyhow::Result<()> {
    let request = Leave { worker: worker.to_string() }.encode(0);
    let accepted: RescaleAccepted = router.ask(&request).with_context(|| format!("cannot remove worker `{worker}`"))?;
    cep_telemetry::outln!(
        "removing {worker}: {} symbols move to the other workers in {} slices; it exits once they have",
        accepted.symbols,
        accepted.slices
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cep_core::rescale::{MemberStatus, MoveProgress};

    #[test]
    fn the_status_reads_as_a_table() {
        let member = |index: u32, id: &str, state: &str, symbols, routed| MemberStatus {
            index,
            id: id.into(),
            state: state.into(),
            symbols,
            routed,
        };
        let status = ClusterStatus {
            now_ns: 0,
            members: vec![member(0, "worker-0", "active", 735, 1000), member(1, "worker-1", "joining", 12, 5)],
            moving: Some(MoveProgress {
                kind: "join".into(),
                worker: "worker-1".into(),
                slices_done: 1,
                slices: 8,
                symbols: 490,
            }),
            queued: 1,
            streams_ended: 0,
            streams: 2,
        };
        let text = render(&status, Some(&[100_000.4, 12.0]));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[1].split_whitespace().collect::<Vec<_>>(),
            ["worker-0", "0", "active", "735", "1000", "100000"]
        );
        assert_eq!(lines[2].split_whitespace().collect::<Vec<_>>(), ["worker-1", "1", "joining", "12", "5", "12"]);
        assert_eq!(lines[3], "moving: join of worker-1, 490 symbols, slice 1 of 8 done, 1 more rescales queued");
        assert_eq!(lines[4], "streams ended: 0 of 2");
    }
}
