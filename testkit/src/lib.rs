//! An in-process cluster for tests (a `LocalCluster`): the router's, the workers' and the
//! collector's cores, and an injector, in one thread, over in-memory links, on a virtual
//! clock. Links can drop, duplicate, delay and reorder frames; members can be killed or
//! paused at a chosen point. Everything follows from the spec and its seed, so a failing case
//! replays exactly; tests run until a condition holds, never for a time.
//!
//! The harness is the drivers' twin: where a driver owns sockets and the wall clock, the
//! harness owns [`Link`]s and the virtual time, and feeds the same cores the same frames.
//! Every link is first in, first out, as a ZeroMQ connection is, unless a fault says
//! otherwise.
//!
//! - [`spec`]: the cluster to build and the faults to inject.
//! - [`cluster`]: the simulation.

pub mod cluster;
pub mod spec;

pub use cluster::{LocalCluster, Outcome};
pub use spec::{Action, ClusterSpec, Fault, LinkKind, Member};
