//! The `cep` command: the user's entry point.
//!
//! - [`cli`]: the command line (one subcommand per role, plus `run`, `engine` and `bench`).
//! - [`telemetry`]: the shutdown flag raised by Ctrl-C / SIGTERM and the error line (logs and
//!   metrics themselves are the `cep-telemetry` crate's).
//! - [`launcher`]: `cep run`, a whole cluster as local processes on loopback.
//! - [`metrics_plan`]: `cep run --metrics-listen`: each process's metrics port and the
//!   Prometheus targets file.
//! - [`rules`]: `cep rules check|deploy|oracle`.
//! - [`cluster`]: `cep cluster status|remove`: a running cluster's members, and draining a worker.
//! - [`node`]: `cep node`, one role of a multi-host cluster from the shared cluster file.
//! - [`standalone`]: `cep engine`, the engine alone over a recorded input (the sources'
//!   "standalone mode"), also the reference the integration tests compare against.
//! - [`inprocess`]: `cep run --transport inproc`, the whole cluster as threads of one process.
//! - [`bench`]: `cep bench`, engine vs raw transport vs the whole pipeline, in one run.
//!
//! This crate is the command line's implementation, not a library for others: its public
//! items exist for its own integration tests, and what users read is `cep --help` and the
//! README. The library crates (core, transport, router, worker, collector, ...) document
//! every public item.
#![allow(missing_docs)]

pub mod bench;
pub mod cli;
pub mod cluster;
pub mod html;
pub mod inprocess;
pub mod keys;
pub mod launcher;
pub mod metrics_plan;
pub mod node;
pub mod rules;
pub mod run_report;
pub mod standalone;
pub mod telemetry;
