//! The `cep` command: the user's entry point.
//!
//! - [`cli`]: the command line (one subcommand per role, plus `run`, `engine` and `bench`).
//! - [`telemetry`]: the shutdown flag raised by Ctrl-C / SIGTERM and the error line (logs and
//!   metrics themselves are the `cep-telemetry` crate's).
//! - [`launcher`]: `cep run`, a whole cluster as local processes on loopback.
//! - [`metrics_plan`]: `cep run --metrics-listen`: each process's metrics port and the
//!   Prometheus targets file.
//! - [`rules`]: `cep rules check|deploy|oracle`.
//! - [`node`]: `cep node`, one role of a multi-host cluster from the shared cluster file.
//! - [`standalone`]: `cep engine`, the engine alone over a recorded input (the sources'
//!   "standalone mode"), also the reference the integration tests compare against.
//! - [`bench`]: `cep bench`, engine vs raw transport vs the whole pipeline, in one run.

pub mod bench;
pub mod cli;
pub mod inprocess;
pub mod launcher;
pub mod metrics_plan;
pub mod node;
pub mod rules;
pub mod standalone;
pub mod telemetry;
