//! The router: receives ticks from injectors, hashes each symbol on the consistent-hash ring
//! and forwards the tick to the one worker that owns it, over one PUSH socket per worker
//! (a single PUSH would round-robin and break key affinity). It keeps no per-symbol state
//! beyond a cache of the ring's answers.
//!
//! - [`config`]: command-line flags and their validation.
//! - [`router`]: the core, a state machine over the run's phases (gathering, running).
//! - [`admission`]: who may ask the router what, by the roles of its key; endpoints it can reach.
//! - [`control`]: control and membership: registrations, deployments, the end of the run.
//! - [`rendezvous`]: who has registered, and when the run may start.
//! - [`deploying`]: the run's rules, checked deployments and their switch points.
//! - [`data_path`]: routing ticks to their owners, in batches.
//! - [`rescaling`]: workers joining and leaving the running cluster, their symbols moving with their state.
//! - [`delivery`]: the collector's incarnations, what it saved, a restarted one taking over.
//! - [`lifecycle`]: the policy around the core: gathering's time-out, a lost collector's
//!   retention, the end's steps.
//! - [`driver`]: sockets, clock and the run loop around the two, and the errors that stop it.
//! - [`failover`]: checkpoints of each worker's state, and a dead worker's symbols restored.
//! - [`replay_log`]: what was routed to each worker since its last checkpoint, for a failover.
//! - [`heartbeats`]: who the router has heard from: a silent worker is taken for dead and fenced.
//! - [`metrics`]: what the router exposes to Prometheus.

pub mod admission;
#[cfg(feature = "driver")]
pub mod config;
pub mod control;
pub mod data_path;
pub mod delivery;
pub mod deploying;
#[cfg(feature = "driver")]
pub mod driver;
#[cfg(feature = "driver")]
mod error;
pub mod failover;
pub mod heartbeats;
pub mod lifecycle;
pub mod metrics;
pub mod rendezvous;
pub mod replay_log;
pub mod rescaling;
pub mod router;

#[cfg(feature = "driver")]
pub use config::RouterConfig;
#[cfg(feature = "driver")]
pub use driver::{run, run_in, RouterError};
pub use router::Router;
