//! An in-process cluster for tests (a `LocalCluster`): the router's, the workers' and the
//! collector's cores and policies, and an injector, in one thread, over in-memory links, on a
//! virtual clock. Links can drop, duplicate, delay and reorder frames; members can be killed or
//! paused at a chosen point. Everything follows from the spec and its seed, so a failing case
//! replays exactly; tests run until a condition holds, never for a time.
//!
//! The harness is the drivers' twin: where a driver owns sockets and the wall clock, the
//! harness owns [`Link`]s and the virtual time, and feeds the same cores the same frames.
//! Every link is first in, first out, as a ZeroMQ connection is, unless a fault says
//! otherwise. With [`ClusterSpec::sequenced`], frames to the collector travel as the
//! transport sends them (in envelopes, kept by their senders until the collector saved them),
//! and a killed collector can be started again ([`LocalCluster::restart_collector`]).
//!
//! - [`spec`]: the cluster to build and the faults to inject.
//! - [`cluster`]: the simulation.
//! - [`sweep`]: runs drawn from seeds, with invariants checked after every event.
//!
//! ```
//! use cep_testkit::{Action, ClusterSpec, FrameKind, Fault, LinkKind, LocalCluster, Member};
//!
//! // Lose the 3rd tick batch the router sends worker 1: the run says where it went missing.
//! let lose = Fault::on(LinkKind::RouterToWorker, Action::Drop).only(1).kind(FrameKind::Ticks).nth(2);
//! let outcome = LocalCluster::new(ClusterSpec { count: 5_000, ..ClusterSpec::default() }, vec![lose]).run();
//! let lost = outcome.summary.events_lost.unwrap();
//! assert!(lost > 0);
//! assert_eq!(outcome.summary.lost_by_cause["not_processed_by_worker"], lost);
//!
//! // Kill worker 0 once it has processed 1,000 ticks: its symbols fail over, restored from
//! // its last checkpoint, and the run completes with nothing lost.
//! let mut cluster = LocalCluster::new(ClusterSpec::default(), vec![]);
//! assert!(cluster.run_until(|c| c.processed_by(0) >= 1_000));
//! cluster.kill(Member::Worker(0));
//! let summary = cluster.run().summary;
//! assert!(summary.complete && summary.failovers[0].recovered);
//! assert_eq!(summary.events_lost, Some(0));
//! ```

pub mod cluster;
pub mod spec;
pub mod sweep;

pub use cep_core::wire::FrameKind;
pub use cluster::{LocalCluster, Outcome};
pub use spec::{Action, ClusterSpec, Fault, LinkKind, Member};
