//! The run's keys in its results folder: `cep run --secure` writes fresh ones there, marked as
//! a run's, and the next run into the folder removes them (never keys it did not write).

use anyhow::Context as _;
use cep_core::partition::default_worker_id;
use std::path::Path;

pub(super) use cep_core::results::earlier_run::{RunKeys, RUN_KEYS_MARK};

/// Removes the files an earlier run left in `out` (its results, its keys if a `--secure` run
/// wrote them): see [`cep_core::results::earlier_run::clear_earlier_run`].
pub(super) fn clear_previous_run(out: &Path) -> anyhow::Result<()> {
    cep_core::results::earlier_run::clear_earlier_run(out).map_err(anyhow::Error::msg)
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
