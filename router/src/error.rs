//! What stops the router, as its driver reports it.

use crate::lifecycle::Stop;
use cep_transport::TransportError;
use std::time::Duration;

/// Errors that stop the router.
#[derive(Debug, thiserror::Error)]
pub enum RouterError {
    /// The configuration does not hold.
    #[error("invalid router configuration: {0}")]
    Config(String),
    /// The rules file is missing or does not check.
    #[error("{0}")]
    Rules(String),
    /// A socket failed.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The announce file could not be written.
    #[error("cannot write the announce file {0}")]
    Announce(String),
    /// The cluster did not assemble within the start time-out.
    #[error("the cluster was not complete within {waited:?}: {missing}")]
    Incomplete {
        /// How long the router waited.
        waited: Duration,
        /// Who was still missing.
        missing: String,
    },
    /// Every worker died.
    #[error("{0}")]
    NoWorkerLeft(String),
    /// The collector died and no restarted one took over within the retention time.
    #[error("the collector is lost ({cause}) and none took over within {retention:?} (--collector-retention)")]
    CollectorLost {
        /// How it was noticed.
        cause: String,
        /// How long the router waited for a restarted one.
        retention: Duration,
    },
    /// Asked to stop before the run started.
    #[error("shut down before the cluster was complete ({0})")]
    ShutdownBeforeStart(String),
}

impl From<Stop> for RouterError {
    fn from(stop: Stop) -> RouterError {
        match stop {
            Stop::Incomplete { waited, missing } => RouterError::Incomplete { waited, missing },
            Stop::ShutdownBeforeStart(missing) => RouterError::ShutdownBeforeStart(missing),
            Stop::CollectorLost { cause, retention } => RouterError::CollectorLost { cause, retention },
        }
    }
}
