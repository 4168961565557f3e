//! What the collector stores: its state, written whole by a thread of its own (a slow disk
//! never holds up the outputs; the router is told once it is stored), and the summary.

use crate::collector::{Collector, SinkFailed};
use crate::error::{write_err, CollectorError};
use cep_core::delivery::Saved;
use cep_core::frame::Body;
use cep_core::results::Summary;
use cep_transport::control::ControlLink;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use tracing::warn;

/// Writes `bytes` to `path` whole: into `temporary` (in the same folder), then renamed over
/// it, so that a reader (or a restart after a crash) finds the old file or the new, never half.
pub(crate) fn write_whole(path: &Path, temporary: &Path, bytes: &[u8]) -> Result<(), CollectorError> {
    std::fs::write(temporary, bytes).map_err(write_err(temporary))?;
    std::fs::rename(temporary, path).map_err(write_err(path))
}

/// Tells the router this collector lives while a save is still being stored: a notice that
/// names no position and confirms nothing, which changes nothing there.
pub(crate) fn tell_alive(router: &ControlLink, shutdown: &AtomicBool) -> Result<(), CollectorError> {
    router.send(&Saved::default().encode(0), shutdown)?;
    while router.try_recv()?.is_some() {}
    Ok(())
}

/// What the saving thread writes.
enum Job {
    /// The state's bytes, and what to tell the router once stored.
    Save { bytes: Vec<u8>, saved: Saved },
    /// The rolling summary waits in its slot.
    Summary,
}

/// The latest rolling summary not written yet (its bytes and the results folder): a newer one
/// replaces it, so at most one summary job is ever queued beside a save.
type SummarySlot = Arc<Mutex<Option<(Vec<u8>, PathBuf)>>>;

/// What the router is told once a save is stored.
type Stored = Result<Saved, CollectorError>;

/// Saving the collector's state when its policy says ([`crate::lifecycle`]). The state is taken
/// on the receive thread (it is small and quick to encode) and stored by a thread of its own,
/// so a slow disk never holds up the outputs; the router is told once it is stored. The same
/// thread writes the rolling summary: a file renamed over another can wait for the file
/// system's journal (tens of milliseconds, 160 once, while checkpoints were written), and on
/// the receive thread that wait held up every output behind it.
pub(crate) struct StateWriter {
    path: PathBuf,
    /// A save handed to the thread and not stored yet.
    in_flight: bool,
    jobs: Option<std::sync::mpsc::SyncSender<Job>>,
    summary: SummarySlot,
    stored: std::sync::mpsc::Receiver<Stored>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl StateWriter {
    /// Starts the saving thread, storing into `path` ([`write_whole`]).
    pub(crate) fn start(path: PathBuf) -> StateWriter {
        // Room for a save and a summary: a save is handed over only when none is in flight,
        // and a summary job only when the slot was empty (the thread empties it).
        let (jobs, incoming) = std::sync::mpsc::sync_channel::<Job>(2);
        let summary = SummarySlot::default();
        let waiting = Arc::clone(&summary);
        let state = path.clone();
        let (done, stored) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let temporary = path.with_extension("state.tmp");
            for job in incoming {
                match job {
                    Job::Save { bytes, saved } => {
                        if done.send(write_whole(&path, &temporary, &bytes).map(|()| saved)).is_err() {
                            break;
                        }
                    }
                    Job::Summary => {
                        let Some((bytes, out)) = waiting.lock().expect("the summary's lock").take() else { continue };
                        if let Err(error) = write_summary_bytes(&out, &bytes) {
                            warn!(%error, "cannot write the rolling summary");
                        }
                    }
                }
            }
        });
        StateWriter { path: state, in_flight: false, jobs: Some(jobs), summary, stored, thread: Some(thread) }
    }

    /// Whether a save is being stored and the router not told yet.
    pub(crate) fn in_flight(&self) -> bool {
        self.in_flight
    }

    /// Takes the state and hands it to the saving thread (one save at a time).
    pub(crate) fn save(
        &mut self,
        collector: &mut Collector<std::io::BufWriter<std::fs::File>>,
    ) -> Result<(), CollectorError> {
        let (bytes, saved) = collector.save().map_err(|error| {
            // A sink flushed for the save names itself: the state file is not the one at fault.
            let file =
                SinkFailed::file_of(&error).map_or_else(|| self.path.clone(), |file| self.path.with_file_name(file));
            write_err(&file)(error)
        })?;
        let job = Job::Save { bytes, saved };
        let sent = self.jobs.as_ref().is_some_and(|jobs| jobs.send(job).is_ok());
        if !sent {
            return Err(self.thread_gone());
        }
        self.in_flight = true;
        Ok(())
    }

    /// Hands the rolling summary to the saving thread; one still waiting there is replaced.
    pub(crate) fn write_summary(&self, out: &Path, summary: &Summary) {
        let newer = Some((summary_bytes(summary), out.to_path_buf()));
        let waiting = std::mem::replace(&mut *self.summary.lock().expect("the summary's lock"), newer);
        if let (None, Some(jobs)) = (waiting, &self.jobs) {
            // Never full here: beside a save, this is the only summary job.
            let _ = jobs.try_send(Job::Summary);
        }
    }

    /// Once a save is stored (`wait`: waits for it), tells the router what the state holds and
    /// which checkpoints it confirms.
    pub(crate) fn tell(
        &mut self,
        router: &ControlLink,
        shutdown: &AtomicBool,
        wait: bool,
    ) -> Result<(), CollectorError> {
        if !self.in_flight {
            return Ok(());
        }
        let stored =
            if wait { Some(self.stored.recv().map_err(|_| self.thread_gone())?) } else { self.stored.try_recv().ok() };
        let Some(stored) = stored else { return Ok(()) };
        self.in_flight = false;
        router.send(&stored?.encode(0), shutdown)?;
        // The router's answers (nothing to act on) are read so they do not pile up.
        while router.try_recv()?.is_some() {}
        Ok(())
    }

    /// Saves now, and waits until it is stored and the router told.
    pub(crate) fn save_now(
        &mut self,
        collector: &mut Collector<std::io::BufWriter<std::fs::File>>,
        router: &ControlLink,
        shutdown: &AtomicBool,
    ) -> Result<(), CollectorError> {
        self.tell(router, shutdown, true)?;
        self.save(collector)?;
        self.tell(router, shutdown, true)
    }

    fn thread_gone(&self) -> CollectorError {
        write_err(&self.path)(std::io::Error::other("the thread that stores the state stopped"))
    }

    /// Waits for the save in flight, tells the router, and stops the thread: call it before
    /// the results are written (and the state removed).
    pub(crate) fn finish(mut self, router: &ControlLink, shutdown: &AtomicBool) -> Result<(), CollectorError> {
        self.tell(router, shutdown, true)
    }
}

impl Drop for StateWriter {
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Writes `summary.json` and `report.txt`.
pub fn write_results(out: &Path, summary: &Summary) -> Result<(), CollectorError> {
    write_summary(out, summary)?;
    let report_path = out.join("report.txt");
    std::fs::write(&report_path, summary.ycsb_report()).map_err(write_err(&report_path))?;
    Ok(())
}

/// Writes `summary.json` atomically: into a temporary file in the same folder, then renamed
/// over it, so that a reader sees the previous summary or this one, never half of one.
pub fn write_summary(out: &Path, summary: &Summary) -> Result<(), CollectorError> {
    write_summary_bytes(out, &summary_bytes(summary))
}

/// `summary.json`'s bytes.
fn summary_bytes(summary: &Summary) -> Vec<u8> {
    let json = serde_json::to_string_pretty(summary).expect("the summary serialises");
    (json + "\n").into_bytes()
}

fn write_summary_bytes(out: &Path, bytes: &[u8]) -> Result<(), CollectorError> {
    write_whole(&out.join("summary.json"), &out.join(".summary.json.tmp"), bytes)
}
