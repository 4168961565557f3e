//! The run's keys in its results folder: `cep run --secure` writes fresh ones there, marked as
//! a run's, and the next run into the folder removes them (never keys it did not write).

use anyhow::Context as _;
use cep_core::partition::default_worker_id;
use std::path::Path;

/// Written into `<out>/keys` with a `--secure` run's keys: a later run into the same folder
/// removes a keys folder only if it holds this file, so keys someone put there are never lost.
pub(super) const RUN_KEYS_MARK: &str = "RUN-KEYS.txt";

/// What `<out>/keys` is before a run.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum RunKeys {
    /// Nothing there (or an empty folder).
    None,
    /// An earlier `--secure` run's keys (marked with [`RUN_KEYS_MARK`]).
    OfARun,
    /// A folder of files no run wrote.
    NotARun,
    /// A file or a link where the folder goes.
    NotAFolder,
}

impl RunKeys {
    pub(super) fn in_folder(out: &Path) -> RunKeys {
        let dir = out.join("keys");
        match dir.symlink_metadata() {
            Err(_) => RunKeys::None,
            Ok(metadata) if !metadata.is_dir() => RunKeys::NotAFolder,
            Ok(_) if dir.join(RUN_KEYS_MARK).is_file() => RunKeys::OfARun,
            Ok(_) => match std::fs::read_dir(&dir).map(|mut entries| entries.next().is_none()) {
                Ok(true) => RunKeys::None,
                _ => RunKeys::NotARun,
            },
        }
    }
}

/// Removes the files an earlier run left in `out`, so none passes for this run's: its results
/// and, if a `--secure` run wrote them, its keys (a run open or secure never leaves another
/// run's keys beside its results).
pub(super) fn clear_previous_run(out: &Path) -> anyhow::Result<()> {
    cep_core::results::remove_files(out, cep_core::results::RUN_FILES).map_err(|(path, error)| {
        anyhow::anyhow!("cannot remove {} of an earlier run: {}", path.display(), cep_core::io_text::plain(&error))
    })?;
    let keys = out.join("keys");
    match RunKeys::in_folder(out) {
        RunKeys::OfARun => remove_run_keys(&keys).map_err(|error| {
            anyhow::anyhow!(
                "cannot remove the keys of an earlier run in {}: {}",
                keys.display(),
                cep_core::io_text::plain(&error)
            )
        }),
        RunKeys::None | RunKeys::NotARun | RunKeys::NotAFolder => Ok(()),
    }
}

/// Removes a run's keys folder, its mark last: a removal that fails half-way leaves a folder
/// still marked as a run's, which the next run removes (never one that looks like a user's).
pub(super) fn remove_run_keys(keys: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(keys)? {
        let entry = entry?;
        if entry.file_name() == RUN_KEYS_MARK {
            continue;
        }
        match entry.file_type()?.is_dir() {
            true => std::fs::remove_dir_all(entry.path())?,
            false => std::fs::remove_file(entry.path())?,
        }
    }
    std::fs::remove_file(keys.join(RUN_KEYS_MARK))?;
    std::fs::remove_dir(keys)
}

/// New keys for a `--secure` run in `dir` (an earlier run's were removed with its results):
/// one per role and one per worker, and the mark that says a run wrote them.
pub(super) fn fresh_keys(dir: &Path, workers: usize) -> anyhow::Result<crate::keys::ClusterKeys> {
    let names: Vec<String> = (0..workers).map(default_worker_id).collect();
    // The mark first: keys written half-way (a kill, a full disk) are still a run's.
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mark = dir.join(RUN_KEYS_MARK);
    std::fs::write(
        &mark,
        "The keys of one `cep run --secure` (a key pair per process, operator.key for `cep rules deploy`\n\
         and `cep cluster`, the public keys in public/). The next `cep run` into this results folder\n\
         removes this folder; keys of your own belong elsewhere.\n",
    )
    .with_context(|| format!("cannot write {}", mark.display()))?;
    crate::keys::ClusterKeys::create(dir, &names)
}
