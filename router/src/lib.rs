//! The router: receives ticks from injectors, hashes each symbol on the consistent-hash ring
//! and forwards the tick to the one worker that owns it, over one PUSH socket per worker
//! (a single PUSH would round-robin and break key affinity). It keeps no per-symbol state
//! beyond a cache of the ring's answers.
//!
//! - [`config`]: command-line flags and their validation.
//! - [`deploying`]: the run's rules, checked deployments and their switch points.
//! - [`metrics`]: what the router exposes to Prometheus.
//! - [`rendezvous`]: who has registered, and when the run may start.
//! - [`routing`]: the data path.

pub mod config;
pub mod deploying;
pub mod metrics;
pub mod rendezvous;
pub mod routing;

pub use config::RouterConfig;
pub use routing::run;
