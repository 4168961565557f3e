//! What an earlier run left in a results folder, and its removal before a new run writes
//! there: its result files, and the keys a `cep run --secure` wrote (by their mark only, so
//! keys someone put there are never lost). `cep run` clears the folder before it starts its
//! processes; a collector started on its own (docker-compose, hosts) clears it when its run
//! starts afresh.

use std::path::Path;

/// Written into `<out>/keys` with a `--secure` run's keys: a later run into the same folder
/// removes a keys folder only if it holds this file.
pub const RUN_KEYS_MARK: &str = "RUN-KEYS.txt";

/// What `<out>/keys` is before a run.
#[derive(Debug, PartialEq, Eq)]
pub enum RunKeys {
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
    /// What `out/keys` holds.
    pub fn in_folder(out: &Path) -> RunKeys {
        let dir = out.join("keys");
        match dir.symlink_metadata() {
            Err(_) => RunKeys::None,
            Ok(meta) if !meta.is_dir() => RunKeys::NotAFolder,
            Ok(_) if dir.join(RUN_KEYS_MARK).is_file() => RunKeys::OfARun,
            Ok(_) => match std::fs::read_dir(&dir).map(|mut entries| entries.next().is_none()) {
                Ok(true) => RunKeys::None,
                _ => RunKeys::NotARun,
            },
        }
    }
}

/// Removes the files an earlier run left in `out`, so none passes for this run's: its results
/// ([`super::RUN_FILES`]) and, if a `--secure` run wrote them, its keys. The error names the
/// file and says why.
pub fn clear_earlier_run(out: &Path) -> Result<(), String> {
    clear(out, &[], &[])
}

/// What a collector started on its own (docker-compose, hosts) removes when its run starts
/// afresh: every file of an earlier run but `input.csv` (an injector of this very run may be
/// recording it already), and a run's marked keys unless `keys_in_use` (this collector's
/// `--key` and `--keys`) lie in them: a cluster started by hand on an earlier `cep run
/// --secure`'s keys keeps them.
pub fn clear_for_collector(out: &Path, keys_in_use: &[&Path]) -> Result<(), String> {
    clear(out, &[RECORDED_INPUT], keys_in_use)
}

/// Removes the run files but `kept`, and a run's marked keys unless `keys_in_use` lie in them.
fn clear(out: &Path, kept: &[&str], keys_in_use: &[&Path]) -> Result<(), String> {
    let stale: Vec<&str> = super::RUN_FILES.iter().copied().filter(|name| !kept.contains(name)).collect();
    super::remove_files(out, &stale).map_err(|(path, error)| {
        format!("cannot remove {} of an earlier run: {}", path.display(), crate::io_text::plain(&error))
    })?;
    let keys = out.join("keys");
    let in_use = |dir: &Path| {
        let Ok(dir) = dir.canonicalize() else { return false };
        keys_in_use.iter().any(|path| path.canonicalize().is_ok_and(|path| path.starts_with(&dir)))
    };
    if RunKeys::in_folder(out) == RunKeys::OfARun && !in_use(&keys) {
        remove_run_keys(&keys).map_err(|error| {
            format!("cannot remove the keys of an earlier run in {}: {}", keys.display(), crate::io_text::plain(&error))
        })?;
    }
    Ok(())
}

/// The recorded input's name in a results folder (`cep run --record-input`).
const RECORDED_INPUT: &str = "input.csv";

/// Removes a run's keys folder, its mark last: a removal that fails half-way leaves a folder
/// still marked as a run's, which the next run removes (never one that looks like a user's).
fn remove_run_keys(keys: &Path) -> std::io::Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn folder_of_an_earlier_run(keys_marked: bool) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for name in super::super::RUN_FILES {
            std::fs::write(dir.path().join(name), "EARLIER RUN\n").unwrap();
        }
        std::fs::write(dir.path().join("notes.txt"), "the user's own\n").unwrap();
        let keys = dir.path().join("keys");
        std::fs::create_dir_all(keys.join("public")).unwrap();
        std::fs::write(keys.join("collector.key"), "secret\n").unwrap();
        std::fs::write(keys.join("public").join("collector.pub"), "public\n").unwrap();
        if keys_marked {
            std::fs::write(keys.join(RUN_KEYS_MARK), "a run's\n").unwrap();
        }
        dir
    }

    #[test]
    fn an_earlier_runs_files_and_marked_keys_go_and_the_users_stay() {
        let dir = folder_of_an_earlier_run(true);
        assert_eq!(RunKeys::in_folder(dir.path()), RunKeys::OfARun);
        clear_earlier_run(dir.path()).unwrap();
        for name in super::super::RUN_FILES {
            assert!(!dir.path().join(name).exists(), "{name}");
        }
        assert!(!dir.path().join("keys").exists());
        assert!(dir.path().join("notes.txt").exists());

        // Keys without the mark are someone's own: they stay.
        let dir = folder_of_an_earlier_run(false);
        assert_eq!(RunKeys::in_folder(dir.path()), RunKeys::NotARun);
        clear_earlier_run(dir.path()).unwrap();
        assert!(dir.path().join("keys").join("collector.key").exists());
        assert!(!dir.path().join("summary.json").exists());
    }

    #[test]
    fn a_collector_on_its_own_leaves_the_recording_and_the_keys_it_runs_on() {
        let dir = folder_of_an_earlier_run(true);
        let keys = dir.path().join("keys");
        // Its own key in the marked folder: a cluster started by hand on a run's keys.
        clear_for_collector(dir.path(), &[&keys.join("collector.key")]).unwrap();
        assert!(keys.join("collector.key").exists() && dir.path().join(RECORDED_INPUT).exists());
        assert!(!dir.path().join("summary.json").exists() && !dir.path().join("prometheus-targets.json").exists());
        // Keys elsewhere (compose's volumes): the earlier run's go.
        let elsewhere = tempfile::tempdir().unwrap();
        std::fs::write(elsewhere.path().join("collector.key"), "secret\n").unwrap();
        clear_for_collector(dir.path(), &[&elsewhere.path().join("collector.key")]).unwrap();
        assert!(!keys.exists() && dir.path().join(RECORDED_INPUT).exists());
    }
}
