//! The collector's saved state: what it writes next to its results so that a restarted
//! collector cuts its files back and resumes as if it had never stopped.

use super::{Collector, LastTicks, RunShape, Senders, Sinks};
use crate::accounting::Observed;
use crate::csv::CsvMode;
use crate::failovers::FailoverWatch;
use crate::intervals::IntervalState;
use crate::latency::HopHistograms;
use crate::rules::RuleTable;
use cep_core::delivery::{Positions, Saved};
use cep_core::failover::OutputsConfirmed;
use cep_core::report::{CauseCounts, Rejections, RouterReport, WorkerProgress, WorkerReport};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{self, Write};

/// Where the sinks stood when a state was saved: a resumed collector cuts its files back to
/// these lengths and writes on from there.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SinkMarks {
    /// Rows in outputs.csv.
    pub csv_rows: u64,
    /// Bytes of outputs.csv.
    pub csv_len: u64,
    /// Rows outputs.csv did not take, at its bound.
    pub csv_not_written: u64,
    /// The interval recorder's own state.
    pub intervals: IntervalState,
    /// Bytes of intervals.csv and latency.hlog.
    pub intervals_len: (u64, u64),
}

/// Everything a collector knows, as saved ([`Collector::save`]); the same fields, owned, are
/// read back as a [`SavedState`].
#[derive(Serialize)]
struct SavedRef<'a> {
    shape: &'a RunShape,
    hops: &'a HopHistograms,
    last_ticks: &'a [Vec<LastTicks>],
    rules: &'a RuleTable,
    observed: &'a Observed,
    progress: &'a [WorkerProgress],
    reports: &'a BTreeMap<u32, WorkerReport>,
    router: &'a Option<RouterReport>,
    rescales: &'a crate::rescales::RescaleWatch,
    failovers: &'a FailoverWatch,
    failure: &'a Option<String>,
    last_report_ns: u64,
    last_frame_ns: u64,
    rejected: &'a CauseCounts,
    confirmations: &'a [OutputsConfirmed],
    positions: &'a Positions,
    sinks: SinkMarks,
}

/// A collector's saved state, read back.
#[derive(Deserialize)]
pub struct SavedState {
    shape: RunShape,
    hops: HopHistograms,
    last_ticks: Vec<Vec<LastTicks>>,
    rules: RuleTable,
    observed: Observed,
    progress: Vec<WorkerProgress>,
    reports: BTreeMap<u32, WorkerReport>,
    router: Option<RouterReport>,
    rescales: crate::rescales::RescaleWatch,
    failovers: FailoverWatch,
    failure: Option<String>,
    last_report_ns: u64,
    last_frame_ns: u64,
    rejected: CauseCounts,
    confirmations: Vec<OutputsConfirmed>,
    positions: Positions,
    /// Where the files stood.
    pub sinks: SinkMarks,
}

impl SavedState {
    /// Reads a saved state.
    pub fn read(bytes: &[u8]) -> Result<SavedState, String> {
        rmp_serde::from_slice(bytes).map_err(|error| format!("not a saved collector state of this version: {error}"))
    }

    /// The start of the run it belongs to (`Ready::start_ns`).
    pub fn run_start_ns(&self) -> u64 {
        self.shape.start_ns
    }
}

/// A sink that could not be written while the state was taken: which file of the results
/// folder (its [`io::Error`] keeps the cause's kind, a full disk for one).
#[derive(Debug)]
pub struct SinkFailed {
    /// The file's name in the results folder.
    pub file: &'static str,
    source: io::Error,
}

impl SinkFailed {
    fn at(file: &'static str) -> impl FnOnce(io::Error) -> io::Error {
        move |source| io::Error::new(source.kind(), SinkFailed { file, source })
    }

    /// The file of the results folder `error` failed to write, when a sink's.
    pub fn file_of(error: &io::Error) -> Option<&'static str> {
        error.get_ref().and_then(|inner| inner.downcast_ref::<SinkFailed>()).map(|sink| sink.file)
    }
}

impl std::fmt::Display for SinkFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.source.fmt(f)
    }
}

impl std::error::Error for SinkFailed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

impl<W: Write> Collector<W> {
    /// Flushes the sinks and returns the whole state, with the notice for the router once the
    /// bytes are stored ([`Saved`]: what it has taken of each sender, and the checkpoints
    /// confirmed by it). The driver stores the bytes, then tells the router: so every frame the
    /// senders drop, and every checkpoint the router may restore from, is in a stored state.
    pub fn save(&mut self) -> io::Result<(Vec<u8>, Saved)> {
        self.sinks.csv.flush().map_err(SinkFailed::at("outputs.csv"))?;
        self.sinks.intervals.flush().map_err(SinkFailed::at("intervals.csv"))?;
        let sinks = SinkMarks {
            csv_rows: self.sinks.csv.rows(),
            csv_len: self.sinks.csv.bytes_written(),
            csv_not_written: self.sinks.csv.not_written(),
            intervals: self.sinks.intervals.state(),
            intervals_len: self.sinks.intervals.bytes_written(),
        };
        let saved = SavedRef {
            shape: &self.shape,
            hops: &self.hops,
            last_ticks: &self.last_ticks,
            rules: &self.rules,
            observed: &self.observed,
            progress: &self.progress,
            reports: &self.reports,
            router: &self.router,
            rescales: &self.rescales,
            failovers: &self.failovers,
            failure: &self.failure,
            last_report_ns: self.last_report_ns,
            last_frame_ns: self.last_frame_ns,
            rejected: self.rejections.counts(),
            confirmations: &self.confirmations,
            positions: &self.positions,
            sinks,
        };
        let bytes = rmp_serde::to_vec(&saved).map_err(io::Error::other)?;
        let confirmed = std::mem::take(&mut self.confirmations);
        Ok((bytes, Saved { confirmed, ..self.positions.saved() }))
    }

    /// A restarted collector, incarnation `incarnation`, going on from `state` with `sinks`
    /// reopened where the state left them. Checkpoint confirmations the dead one had not sent
    /// go with the first save.
    pub fn resume(
        state: SavedState,
        incarnation: u64,
        csv_mode: CsvMode,
        max_frame_bytes: usize,
        sinks: Sinks<W>,
    ) -> Self {
        // The progress line goes on from the counts the dead one last had.
        let mut lineup = crate::progress::Lineup::default();
        // (A worker that never reported has nothing to go on from.)
        for (index, progress) in state.progress.iter().enumerate().filter(|(_, progress)| progress.at_ns != 0) {
            let finished = state.reports.contains_key(&(index as u32));
            lineup.worker(index, progress.at_ns, (progress.processed, progress.outputs), finished);
        }
        if let Some(router) = &state.router {
            lineup.router(state.last_frame_ns, crate::progress::saturating_sum(router.received.values()), true);
        }
        Collector {
            lineup,
            shape: state.shape,
            csv_mode,
            max_frame_bytes,
            hops: state.hops,
            sinks,
            decoded: Vec::with_capacity(1024),
            last_ticks: state.last_ticks,
            rules: state.rules,
            observed: state.observed,
            progress: state.progress,
            reports: state.reports,
            router: state.router,
            rescales: state.rescales,
            failovers: state.failovers,
            failure: state.failure,
            last_report_ns: state.last_report_ns,
            last_frame_ns: state.last_frame_ns,
            earlier_refusals: state
                .rejected
                .iter()
                .filter(|(cause, _)| cep_core::identity::is_refusal(cause))
                .map(|(cause, count)| (cause.clone(), *count))
                .collect(),
            rejections: Rejections::restore("collector", state.rejected),
            confirmations: state.confirmations,
            incarnation,
            positions: state.positions,
            senders: Senders::default(),
        }
    }
}
