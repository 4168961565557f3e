//! Why the collector stops: each cause a user can meet, in one line that says what and where.

use cep_transport::control::RegistrationError;
use cep_transport::TransportError;
use std::path::{Path, PathBuf};

/// Errors that stop the collector.
#[derive(Debug, thiserror::Error)]
pub enum CollectorError {
    /// The configuration does not hold.
    #[error("invalid collector configuration: {0}")]
    Config(String),
    /// A socket failed.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The router refused this collector or could not be reached.
    #[error(transparent)]
    Registration(#[from] RegistrationError),
    /// No address to advertise to the router.
    #[error("cannot find the address to advertise: {0}")]
    Advertise(String),
    /// The router has been unreachable for longer than the failure time-out; the results
    /// were written all the same (`complete: false`, the cause in `failure`).
    #[error("the run failed: {0} (partial results written)")]
    RouterLost(String),
    /// The saved state could not be read.
    #[error("cannot resume from {path}: {reason} (remove it to start a new run)")]
    State {
        /// The state file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The disk holding the results is full. The files it appends to end at their last
    /// whole line and its saved state is kept: started again with room, it resumes.
    #[error(
        "disk full: cannot write {path}: {source}; {free} bytes free on its file system \
         ({out} holds outputs.csv cut back to its last whole row and the saved state: free some \
         space and start the collector again, while its router still runs the run, to resume)"
    )]
    DiskFull {
        /// The file whose write failed.
        path: PathBuf,
        /// Why (no space left).
        source: std::io::Error,
        /// Bytes free on its file system, as far as it can be known.
        free: u64,
        /// The results folder.
        out: PathBuf,
    },
    /// An earlier run's files in the results folder could not be removed (the message names
    /// the file and why).
    #[error("{0}")]
    Clear(String),
    /// A results file could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Maps a failed write of `path` to [`CollectorError::Write`].
pub(crate) fn write_err(path: &Path) -> impl FnOnce(std::io::Error) -> CollectorError + '_ {
    move |source| CollectorError::Write { path: path.to_path_buf(), source }
}
