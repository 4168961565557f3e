//! The checkpoint store: where workers write the parts of their snapshots and where a
//! survivor reads a dead worker's parts back. The router never holds state: it learns from
//! each worker only what was stored (a part's checkpoint, number, size and checksum) and
//! names those parts in the restores it sends.
//!
//! A part is addressed by its checkpoint, its worker and its number ([`PartKey`]). The store
//! keeps parts until told that no checkpoint below some id will be read again
//! ([`CheckpointStore::remove_below`]): the router computes that bound from the checkpoints it
//! retains and every worker applies it at its next barrier.
//!
//! Writes and removals are queued ([`CheckpointStore::put`]) and their outcomes come back in
//! order ([`CheckpointStore::poll`]): a worker goes on processing while its parts are
//! written, and tells the router of a part only once it is stored.
//!
//! [`DirectoryStore`] is the default: one folder per run, one per checkpoint in it
//! (`run-<start>/chk-<id>/worker-<index>-part-<n>`), on a local disk, or on a mount every
//! worker shares (NFS, EFS) so that a worker on one host restores what a worker on another
//! wrote; a thread of its own writes and removes. [`MemoryStore`] serves the simulation, done
//! at once. Another backend (an object store) implements the same trait.

use crate::io_text::plain;
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};

/// The most bytes one stored part may take: a worker refuses to store a larger one (that
/// snapshot cannot be restored from), and a reader refuses to read one.
pub const MAX_STORED_PART_BYTES: u64 = 256 << 20;

/// Where one part of one worker's snapshot lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartKey {
    /// The checkpoint the snapshot answers.
    pub checkpoint: u64,
    /// The worker that took it (its index).
    pub worker: u32,
    /// The part's number in the snapshot.
    pub part: u32,
}

/// What a reader checks a stored part against: its size and its CRC-32.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expected {
    /// Bytes.
    pub bytes: u64,
    /// CRC-32 ([`checksum`]).
    pub checksum: u32,
}

/// The checksum of a part as stored.
pub fn checksum(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

/// Where snapshot parts are written and read. Errors are one line, naming where.
pub trait CheckpointStore: Send {
    /// Queues `bytes` to be stored under `key`, whole or not at all (a reader never sees half
    /// a part). The outcome, with the buffer back, comes from [`Self::poll`].
    fn put(&mut self, key: PartKey, bytes: Vec<u8>);

    /// Queues the removal of every part of the checkpoints below `checkpoint`, of any worker
    /// (behind the puts queued before).
    fn remove_below(&mut self, checkpoint: u64);

    /// The next queued operation that finished, in the order they were queued; none while
    /// the oldest is still under way.
    fn poll(&mut self) -> Option<Done>;

    /// Reads `key` into `into` (replacing its contents), checked against `expected`.
    fn get(&self, key: PartKey, expected: Expected, into: &mut Vec<u8>) -> Result<(), String>;
}

/// A queued operation that finished.
#[derive(Debug)]
pub enum Done {
    /// A put.
    Stored {
        /// Where.
        key: PartKey,
        /// The part's checksum ([`checksum`]) once it is stored, or where and why it is
        /// not. The store's thread computes it, so the writer's own never reads its part again.
        result: Result<u32, String>,
        /// The part's buffer, back for the next.
        buffer: Vec<u8>,
    },
    /// A removal, and whether it went through.
    Removed(Result<(), String>),
}

/// Checks `bytes` read for `key` against what its writer said.
fn verify(key: PartKey, expected: Expected, bytes: &[u8], at: &dyn std::fmt::Display) -> Result<(), String> {
    if bytes.len() as u64 != expected.bytes {
        return Err(format!(
            "checkpoint {} part {} of worker {} at {at} holds {} bytes, not the {} its writer stored",
            key.checkpoint,
            key.part,
            key.worker,
            bytes.len(),
            expected.bytes
        ));
    }
    if checksum(bytes) != expected.checksum {
        return Err(format!(
            "checkpoint {} part {} of worker {} at {at} does not match its writer's checksum",
            key.checkpoint, key.part, key.worker
        ));
    }
    Ok(())
}

/// Parts as files: `<root>/chk-<checkpoint>/worker-<index>-part-<n>`, each written to a
/// temporary name and renamed, so a part is whole or absent. A thread writes and removes;
/// reads are the caller's.
pub struct DirectoryStore {
    folder: Arc<Folder>,
    /// To the writer thread, which ends when this goes (not waited for: a part the router
    /// heard of is written already, and a hung mount must not hold the process's exit).
    jobs: mpsc::Sender<Job>,
    done: mpsc::Receiver<Done>,
}

/// What the writer thread is asked to do.
enum Job {
    Put(PartKey, Vec<u8>),
    RemoveBelow(u64),
}

impl DirectoryStore {
    /// Whether `dir` can take checkpoints: it exists (made if missing, readable by its owner
    /// only) and this process may write in it.
    pub fn check(dir: &Path) -> Result<(), String> {
        let failed =
            |error: std::io::Error| format!("cannot use the checkpoint folder {}: {}", dir.display(), plain(&error));
        private_dirs(dir).map_err(failed)?;
        // A name of this process and thread alone: workers of one process, or containers that
        // are all pid 1, check one folder at once.
        let probe = dir.join(format!(".probe-{}-{:?}-{}", std::process::id(), std::thread::current().id(), nanos()));
        private_file(&probe).map_err(failed)?;
        match std::fs::remove_file(&probe) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(failed(error)),
            _ => Ok(()),
        }
    }

    /// The store of run `run` (the run's start, so runs never share a folder) under `dir`,
    /// created if missing, with its writer thread.
    pub fn open(dir: &Path, run: u64) -> Result<DirectoryStore, String> {
        let root = dir.join(format!("run-{run}"));
        private_dirs(&root)
            .map_err(|error| format!("cannot create the checkpoint folder {}: {}", root.display(), plain(&error)))?;
        let folder = Arc::new(Folder { root });
        let (jobs, queued) = mpsc::channel::<Job>();
        let (finished, done) = mpsc::channel();
        let writing = Arc::clone(&folder);
        std::thread::Builder::new()
            .name("checkpoint-writer".into())
            .spawn(move || {
                // Writing yields to the pipeline: on busy cores a burst of state written at
                // full priority shows in the latency of the ticks behind it. Without the
                // right to lower it, it writes at the process's priority.
                let _ = thread_priority::set_current_thread_priority(thread_priority::ThreadPriority::Min);
                let mut cache = CacheDrop::default();
                loop {
                    let job = match queued.try_recv() {
                        Ok(job) => job,
                        Err(mpsc::TryRecvError::Disconnected) => return,
                        Err(mpsc::TryRecvError::Empty) => {
                            let now = std::time::Instant::now();
                            cache.between_jobs(now, true);
                            let waited = match cache.next_due(now) {
                                Some(due) => queued.recv_timeout(due),
                                None => queued.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
                            };
                            match waited {
                                Ok(job) => job,
                                Err(mpsc::RecvTimeoutError::Timeout) => continue,
                                Err(mpsc::RecvTimeoutError::Disconnected) => return,
                            }
                        }
                    };
                    let outcome = match job {
                        Job::Put(key, buffer) => {
                            let result = writing.put(key, &buffer).map(|file| {
                                cache.wrote(file, buffer.len());
                                checksum(&buffer)
                            });
                            Done::Stored { key, result, buffer }
                        }
                        Job::RemoveBelow(checkpoint) => Done::Removed(writing.remove_below(checkpoint)),
                    };
                    if finished.send(outcome).is_err() {
                        return;
                    }
                    cache.between_jobs(std::time::Instant::now(), false);
                }
            })
            .map_err(|error| format!("cannot start the checkpoint writer: {}", plain(&error)))?;
        Ok(DirectoryStore { folder, jobs, done })
    }

    /// The run's folder.
    pub fn root(&self) -> &Path {
        &self.folder.root
    }

    fn queue(&mut self, job: Job) {
        // The thread ends only when the store drops its sender: it is there.
        let _ = self.jobs.send(job);
    }
}

impl CheckpointStore for DirectoryStore {
    fn put(&mut self, key: PartKey, bytes: Vec<u8>) {
        self.queue(Job::Put(key, bytes));
    }

    fn remove_below(&mut self, checkpoint: u64) {
        self.queue(Job::RemoveBelow(checkpoint));
    }

    fn poll(&mut self) -> Option<Done> {
        self.done.try_recv().ok()
    }

    fn get(&self, key: PartKey, expected: Expected, into: &mut Vec<u8>) -> Result<(), String> {
        self.folder.get(key, expected, into)
    }
}

/// Makes `dir` and its missing parents, readable by their owner only: a checkpoint holds
/// the state of every symbol.
fn private_dirs(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

/// Creates `path`, which must not exist (a link planted there is not followed), readable and
/// writable by its owner only.
fn private_file(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)
}

/// Drops the parts written from the page cache, in two steps that never wait for the disk.
/// Parts are read back only by a failover, so the cache would only fill with them: at full
/// speed workers write 100 MB/s and more, into fresh pages each time (on a virtual machine the
/// first touch of such a page costs the hypervisor's fault too: those copies took 13 % of both
/// cores), while pages dropped are reused, still warm, by the next parts. The advice on a part
/// just written starts its write-back (dirty pages cannot be dropped yet); the same advice
/// [`FLUSH_TIME`] later drops its pages, clean by then. Done when the writer has nothing else
/// to do (or [`DROP_WRITTEN_BYTES`] wait), after the worker was told the parts are stored: it
/// promises nothing (a part is written to the operating system; it survives its worker's
/// process, and its host only on storage that does). Only advice: a file system that ignores
/// it changes nothing but the cost.
#[derive(Default)]
struct CacheDrop {
    written: Vec<std::fs::File>,
    written_bytes: usize,
    /// Parts whose write-back was started, and when.
    flushing: VecDeque<(std::time::Instant, std::fs::File)>,
}

/// How long after its write-back began a part's pages are dropped.
const FLUSH_TIME: std::time::Duration = std::time::Duration::from_millis(100);

/// The bytes of parts written and not yet advised beyond which the writer advises, busy or not.
const DROP_WRITTEN_BYTES: usize = 64 << 20;

impl CacheDrop {
    fn wrote(&mut self, file: std::fs::File, bytes: usize) {
        self.written.push(file);
        self.written_bytes += bytes;
    }

    fn advise(file: &std::fs::File) {
        use nix::fcntl::{posix_fadvise, PosixFadviseAdvice};
        let _ = posix_fadvise(file, 0, 0, PosixFadviseAdvice::POSIX_FADV_DONTNEED);
    }

    /// Between jobs, at `now`: `idle` (no job waits) or many bytes written, the parts written
    /// start their write-back; the parts flushing for [`FLUSH_TIME`] are dropped.
    fn between_jobs(&mut self, now: std::time::Instant, idle: bool) {
        while self.flushing.front().is_some_and(|(since, _)| now.duration_since(*since) >= FLUSH_TIME) {
            let (_, file) = self.flushing.pop_front().expect("checked above");
            Self::advise(&file);
        }
        if idle || self.written_bytes >= DROP_WRITTEN_BYTES {
            for file in self.written.drain(..) {
                Self::advise(&file);
                self.flushing.push_back((now, file));
            }
            self.written_bytes = 0;
        }
    }

    /// How long an idle writer may wait for a job before parts are due to be dropped.
    fn next_due(&self, now: std::time::Instant) -> Option<std::time::Duration> {
        self.flushing.front().map(|(since, _)| FLUSH_TIME.saturating_sub(now.duration_since(*since)))
    }
}

/// Nanoseconds of the wall clock (a probe's name).
fn nanos() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |since| since.as_nanos())
}

/// The run's folder: what the writer thread and readers do to it.
struct Folder {
    root: PathBuf,
}

impl Folder {
    fn checkpoint_dir(&self, checkpoint: u64) -> PathBuf {
        self.root.join(format!("chk-{checkpoint}"))
    }

    fn path(&self, key: PartKey) -> PathBuf {
        self.checkpoint_dir(key.checkpoint).join(format!("worker-{}-part-{}", key.worker, key.part))
    }

    /// Writes part `key`; returns the file, for [`CacheDrop`].
    fn put(&self, key: PartKey, bytes: &[u8]) -> Result<std::fs::File, String> {
        let dir = self.checkpoint_dir(key.checkpoint);
        let path = self.path(key);
        let failed = |what: &str, at: &Path, error: std::io::Error| {
            format!("cannot {what} checkpoint part {}: {}", at.display(), plain(&error))
        };
        private_dirs(&dir).map_err(|error| failed("create the folder of", &dir, error))?;
        let partial = path.with_extension("partial");
        // One left by a writer that died is removed first: the part is written afresh.
        let _ = std::fs::remove_file(&partial);
        let mut file = private_file(&partial).map_err(|error| failed("create", &partial, error))?;
        std::io::Write::write_all(&mut file, bytes).map_err(|error| failed("write", &partial, error))?;
        std::fs::rename(&partial, &path).map_err(|error| failed("rename", &partial, error))?;
        Ok(file)
    }

    fn get(&self, key: PartKey, expected: Expected, into: &mut Vec<u8>) -> Result<(), String> {
        let path = self.path(key);
        let failed =
            |error: std::io::Error| format!("cannot read checkpoint part {}: {}", path.display(), plain(&error));
        // The size comes from the router: bounded before anything is allocated for it.
        if expected.bytes > MAX_STORED_PART_BYTES {
            return Err(format!(
                "checkpoint part {} would take {} bytes, more than a part may ({MAX_STORED_PART_BYTES})",
                path.display(),
                expected.bytes
            ));
        }
        let file = std::fs::File::open(&path).map_err(failed)?;
        let length = file.metadata().map_err(failed)?.len();
        if length != expected.bytes {
            return Err(format!(
                "checkpoint part {} holds {length} bytes, not the {} its writer stored",
                path.display(),
                expected.bytes
            ));
        }
        into.clear();
        into.reserve(length as usize);
        use std::io::Read;
        file.take(MAX_STORED_PART_BYTES).read_to_end(into).map_err(failed)?;
        verify(key, expected, into, &path.display())
    }

    fn remove_below(&self, checkpoint: u64) -> Result<(), String> {
        let entries = std::fs::read_dir(&self.root)
            .map_err(|error| format!("cannot list the checkpoint folder {}: {}", self.root.display(), plain(&error)))?;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(id) =
                name.to_str().and_then(|name| name.strip_prefix("chk-")).and_then(|id| id.parse::<u64>().ok())
            else {
                continue;
            };
            if id >= checkpoint {
                continue;
            }
            // Workers sharing a mount remove the same folders: one already gone is no error.
            match std::fs::remove_dir_all(entry.path()) {
                Ok(()) => {}
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => {
                    return Err(format!("cannot remove old checkpoint {}: {}", entry.path().display(), plain(&error)))
                }
            }
        }
        Ok(())
    }
}

/// Parts in memory, shared by every clone (the simulation's workers share one, as workers
/// share a mount); each operation is done when queued.
#[derive(Default)]
pub struct MemoryStore {
    parts: Arc<Mutex<BTreeMap<PartKey, Vec<u8>>>>,
    /// This handle's finished operations, not yet polled.
    done: VecDeque<Done>,
}

impl Clone for MemoryStore {
    /// Another handle on the same parts, with no operation of its own yet.
    fn clone(&self) -> MemoryStore {
        MemoryStore { parts: Arc::clone(&self.parts), done: VecDeque::new() }
    }
}

impl MemoryStore {
    /// The checkpoints that have parts stored, lowest first.
    pub fn checkpoints(&self) -> Vec<u64> {
        let parts = self.parts.lock().expect("the store's lock");
        let mut ids: Vec<u64> = parts.keys().map(|key| key.checkpoint).collect();
        ids.dedup();
        ids
    }

    /// Whether it holds `key` with `bytes` bytes.
    pub fn holds(&self, key: PartKey, bytes: u64) -> bool {
        self.parts.lock().expect("the store's lock").get(&key).is_some_and(|part| part.len() as u64 == bytes)
    }
}

impl CheckpointStore for MemoryStore {
    fn put(&mut self, key: PartKey, bytes: Vec<u8>) {
        self.parts.lock().expect("the store's lock").insert(key, bytes.clone());
        self.done.push_back(Done::Stored { key, result: Ok(checksum(&bytes)), buffer: bytes });
    }

    fn remove_below(&mut self, checkpoint: u64) {
        self.parts.lock().expect("the store's lock").retain(|key, _| key.checkpoint >= checkpoint);
        self.done.push_back(Done::Removed(Ok(())));
    }

    fn poll(&mut self) -> Option<Done> {
        self.done.pop_front()
    }

    fn get(&self, key: PartKey, expected: Expected, into: &mut Vec<u8>) -> Result<(), String> {
        let parts = self.parts.lock().expect("the store's lock");
        let Some(bytes) = parts.get(&key) else {
            return Err(format!(
                "checkpoint {} part {} of worker {} is not in the store",
                key.checkpoint, key.part, key.worker
            ));
        };
        verify(key, expected, bytes, &"memory")?;
        into.clear();
        into.extend_from_slice(bytes);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(checkpoint: u64, part: u32) -> PartKey {
        PartKey { checkpoint, worker: 1, part }
    }

    fn expected(bytes: &[u8]) -> Expected {
        Expected { bytes: bytes.len() as u64, checksum: checksum(bytes) }
    }

    /// The outcomes of the next `count` queued operations, in order (a writer thread's may
    /// take a moment).
    fn finished(store: &mut dyn CheckpointStore, count: usize) -> Vec<Done> {
        let mut done = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while done.len() < count {
            match store.poll() {
                Some(outcome) => done.push(outcome),
                None if std::time::Instant::now() < deadline => std::thread::sleep(std::time::Duration::from_millis(1)),
                None => panic!("{} of {count} operations finished", done.len()),
            }
        }
        done
    }

    fn stored(done: &Done) -> Option<(PartKey, &[u8])> {
        match done {
            Done::Stored { key, result: Ok(_), buffer } => Some((*key, buffer.as_slice())),
            _ => None,
        }
    }

    /// Every store keeps what it was given, answers in order with the buffers back, checks
    /// what it reads, and forgets what is below the bound.
    fn behaves(store: &mut dyn CheckpointStore) {
        store.put(key(3, 0), b"three".to_vec());
        store.put(key(4, 0), b"four".to_vec());
        store.put(key(4, 1), b"four, one".to_vec());
        let done = finished(store, 3);
        let keys: Vec<(PartKey, &[u8])> = done.iter().filter_map(stored).collect();
        assert_eq!(keys, [(key(3, 0), &b"three"[..]), (key(4, 0), b"four"), (key(4, 1), b"four, one")]);
        for done in &done {
            let Done::Stored { result, buffer, .. } = done else { panic!("{done:?}") };
            assert_eq!(result, &Ok(checksum(buffer)), "a stored part comes back with its checksum");
        }
        assert!(store.poll().is_none());
        let mut read = vec![9; 100];
        store.get(key(4, 1), expected(b"four, one"), &mut read).unwrap();
        assert_eq!(read, b"four, one");
        let wrong = store.get(key(4, 1), expected(b"four, 1!!"), &mut read).unwrap_err();
        assert!(wrong.contains("checksum"), "{wrong}");
        let short = store.get(key(4, 1), expected(b"four"), &mut read).unwrap_err();
        assert!(short.contains("holds 9 bytes, not the 4"), "{short}");
        store.remove_below(4);
        assert!(matches!(finished(store, 1)[..], [Done::Removed(Ok(()))]));
        assert!(store.get(key(3, 0), expected(b"three"), &mut read).is_err());
        store.get(key(4, 0), expected(b"four"), &mut read).unwrap();
        assert_eq!(read, b"four");
        store.remove_below(4);
        store.remove_below(100);
        assert_eq!(finished(store, 2).len(), 2);
        assert!(store.get(key(4, 0), expected(b"four"), &mut read).is_err());
    }

    #[test]
    fn a_directory_store_keeps_checks_and_removes_parts() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = DirectoryStore::open(dir.path(), 7).unwrap();
        behaves(&mut store);
        assert_eq!(std::fs::read_dir(store.root()).unwrap().count(), 0, "every checkpoint folder went");
    }

    #[test]
    fn a_memory_store_keeps_checks_and_removes_parts() {
        let mut store = MemoryStore::default();
        behaves(&mut store);
        assert!(store.checkpoints().is_empty());
    }

    #[test]
    fn parts_stored_by_one_store_are_read_by_another_and_are_private() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = DirectoryStore::open(dir.path(), 1).unwrap();
        let parts: Vec<Vec<u8>> = (0..20u8).map(|n| vec![n; 100_000]).collect();
        for (part, bytes) in parts.iter().enumerate() {
            store.put(key(1, part as u32), bytes.clone());
        }
        assert_eq!(finished(&mut store, parts.len()).iter().filter_map(stored).count(), parts.len());
        drop(store);
        let reader = DirectoryStore::open(dir.path(), 1).unwrap();
        let mut read = Vec::new();
        for (part, bytes) in parts.iter().enumerate() {
            reader.get(key(1, part as u32), expected(bytes), &mut read).unwrap();
        }
        use std::os::unix::fs::PermissionsExt;
        let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(reader.root()), 0o700);
        assert_eq!(mode(&reader.root().join("chk-1")), 0o700);
        assert_eq!(mode(&reader.root().join("chk-1/worker-1-part-0")), 0o600);
    }

    #[test]
    fn a_part_the_folder_refuses_comes_back_as_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = DirectoryStore::open(dir.path(), 1).unwrap();
        // A file where the checkpoint's folder would go.
        std::fs::write(store.root().join("chk-2"), b"").unwrap();
        store.put(key(2, 0), b"state".to_vec());
        let done = finished(&mut store, 1);
        let Done::Stored { result: Err(error), buffer, .. } = &done[0] else { panic!("{done:?}") };
        assert!(error.starts_with("cannot create the folder of checkpoint part "), "{error}");
        assert!(error.contains("chk-2"), "{error}");
        assert_eq!(buffer, b"state", "the buffer comes back either way");
    }

    #[test]
    fn two_directory_stores_on_one_folder_share_parts_and_removals() {
        let dir = tempfile::tempdir().unwrap();
        let (mut writer, mut other) =
            (DirectoryStore::open(dir.path(), 1).unwrap(), DirectoryStore::open(dir.path(), 1).unwrap());
        writer.put(key(2, 0), b"state".to_vec());
        finished(&mut writer, 1);
        let mut read = Vec::new();
        other.get(key(2, 0), expected(b"state"), &mut read).unwrap();
        // The other removes it (it wrote nothing itself: the folder is shared), then the
        // writer finds it gone, which is no error.
        other.remove_below(3);
        assert!(matches!(finished(&mut other, 1)[..], [Done::Removed(Ok(()))]));
        writer.remove_below(3);
        assert!(matches!(finished(&mut writer, 1)[..], [Done::Removed(Ok(()))]));
        assert!(other.get(key(2, 0), expected(b"state"), &mut read).is_err());
    }

    /// Parts written start their write-back when the writer idles (or many bytes wait), and
    /// are dropped from the cache FLUSH_TIME later; an idle writer waits no longer than that.
    #[test]
    fn written_parts_are_flushed_when_idle_and_dropped_a_flush_time_later() {
        let dir = tempfile::tempdir().unwrap();
        let file = || std::fs::File::create(dir.path().join(format!("{}", nanos()))).unwrap();
        let (mut cache, start) = (CacheDrop::default(), std::time::Instant::now());
        cache.wrote(file(), 1 << 20);
        cache.between_jobs(start, false);
        assert_eq!((cache.written.len(), cache.next_due(start)), (1, None), "busy, and few bytes: kept");
        cache.wrote(file(), DROP_WRITTEN_BYTES);
        cache.between_jobs(start, false);
        assert_eq!((cache.written.len(), cache.flushing.len()), (0, 2), "many bytes: flushing though busy");
        cache.wrote(file(), 1);
        let later = start + FLUSH_TIME / 2;
        cache.between_jobs(later, true);
        assert_eq!((cache.written.len(), cache.flushing.len()), (0, 3), "idle: flushing");
        assert_eq!(cache.next_due(later), Some(FLUSH_TIME / 2));
        cache.between_jobs(start + FLUSH_TIME, true);
        assert_eq!(cache.flushing.len(), 1, "the first two dropped");
        cache.between_jobs(later + FLUSH_TIME, true);
        assert_eq!((cache.flushing.len(), cache.next_due(later + FLUSH_TIME)), (0, None));
    }

    #[test]
    fn a_size_beyond_the_bound_is_refused_before_reading() {
        let dir = tempfile::tempdir().unwrap();
        let store = DirectoryStore::open(dir.path(), 1).unwrap();
        let error = store.get(key(1, 0), Expected { bytes: u64::MAX, checksum: 0 }, &mut Vec::new()).unwrap_err();
        assert!(error.contains("more than a part may"), "{error}");
    }

    #[test]
    fn a_folder_that_takes_no_file_is_refused_naming_it() {
        let error = DirectoryStore::check(Path::new("/proc/self")).unwrap_err();
        assert!(error.starts_with("cannot use the checkpoint folder /proc/self: "), "{error}");
        let dir = tempfile::tempdir().unwrap();
        DirectoryStore::check(&dir.path().join("new")).unwrap();
        assert_eq!(std::fs::read_dir(dir.path().join("new")).unwrap().count(), 0, "the probe is gone");
    }

    #[test]
    fn an_unwritable_folder_is_one_line_naming_it() {
        let Err(error) = DirectoryStore::open(Path::new("/proc/cep-no-such"), 1) else {
            panic!("/proc takes no folder")
        };
        assert!(error.starts_with("cannot create the checkpoint folder /proc/cep-no-such/run-1:"), "{error}");
    }
}
