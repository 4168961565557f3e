//! What stops the router, as its driver reports it.

use crate::lifecycle::Stop;
use cep_transport::TransportError;

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
    /// Every worker died.
    #[error("{0}")]
    NoWorkerLeft(String),
    /// The run policy gave the run up: incomplete, stopped before the start, or the collector
    /// lost beyond its retention.
    #[error(transparent)]
    Stopped(#[from] Stop),
}
