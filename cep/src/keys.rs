//! `cep keys`: CURVE key pairs for a secure cluster (docs/SECURITY.md).

use crate::cli::Usage;
use anyhow::{bail, Context as _};
use cep_transport::security::{write_public, KeyPair, Role, SHARED_WORKER_KEY};
use clap::{Args, Subcommand};
use std::path::{Path, PathBuf};

#[derive(Args, Debug)]
pub struct KeysArgs {
    #[command(subcommand)]
    pub command: KeysCommand,
}

#[derive(Subcommand, Debug)]
pub enum KeysCommand {
    /// Write a new key pair: FILE (secret, readable by its owner only) and its public half
    /// beside it (FILE with `.pub` for `.key`). Existing files are never overwritten.
    Generate {
        /// The key pair file to write, e.g. `worker-3.key`.
        file: PathBuf,
    },
    /// Write a key pair for each role of a cluster into DIR (`router.key`, `worker.key`,
    /// `collector.key`, `injector.key`, `operator.key`) and the public keys folder every
    /// process is given (`DIR/public/<role>/<name>.pub`). Every worker may share `worker.key`;
    /// give each its own (`--worker ID`: `ID.key`) for the router to tell them apart.
    Init {
        /// The folder to write (created; it must not hold keys already).
        dir: PathBuf,
        /// If DIR holds a cluster's keys already, keep them and succeed (what the compose
        /// file's `keys` service does at every `up`).
        #[arg(long)]
        keep: bool,
        /// A key pair of its own for this worker (`<id>.key`), instead of one `worker.key` for
        /// every worker; repeat it for each (the hosts' cluster file names them).
        #[arg(long = "worker", value_name = "ID")]
        workers: Vec<String>,
        /// Each key pair in a folder of its own, `DIR/<name>/<name>.key`, so that each can be
        /// mounted alone (the compose file: one volume per role; the public keys in
        /// `DIR/public`). Folders that are there already and empty (mount points) are used.
        #[arg(long)]
        folders: bool,
    },
}

/// Writes the keys asked for. A refusal (a name, a file in the way, a missing folder: nothing
/// written) is a usage error, exit status 2, as a bad `--key` given to a role is; a failure
/// while writing is not.
pub fn run(args: KeysArgs) -> anyhow::Result<()> {
    match args.command {
        KeysCommand::Generate { file } => {
            check_generate(&file)?;
            let public = public_path(&file);
            let pair = KeyPair::generate()?;
            pair.write(&file)?;
            write_public(pair.public(), &public)?;
            cep_telemetry::outln!("wrote {} (secret: keep it private) and {}", file.display(), public.display());
            cep_telemetry::outln!(
                "admit it by copying {} into the public keys folder of every process, under its role",
                public.display()
            );
            Ok(())
        }
        KeysCommand::Init { dir, keep, workers, folders } => {
            let layout = if folders { Layout::Folders } else { Layout::Flat };
            // (The public folder may be an empty mount point: what was written is its router key.)
            if keep && dir.join("public").join(Role::Router.name()).exists() {
                ClusterKeys::check_complete(&dir, &workers, layout)?;
                cep_telemetry::outln!("keeping the keys in {}", dir.display());
                return Ok(());
            }
            let keys = ClusterKeys::check_creatable(&dir, &workers, layout).map_err(|error| Usage::of(&error))?;
            keys.write_pairs(&workers)?;
            cep_telemetry::outln!("wrote one key pair per role into {}", dir.display());
            cep_telemetry::outln!(
                "every process takes --keys {} and --key {} (a worker given --worker: <id> for <role>)",
                keys.public.display(),
                keys.key("<role>").display()
            );
            Ok(())
        }
    }
}

/// What `cep keys generate FILE` refuses before writing anything, as usage errors: a `.pub`
/// name, a file in the way, or a folder that is not there (a mistyped path is not made into
/// folders). A folder it cannot look at is a plain error.
fn check_generate(file: &Path) -> anyhow::Result<()> {
    let refuse = |message: String| -> anyhow::Result<()> { Err(Usage(message).into()) };
    if file.extension().is_some_and(|extension| extension == "pub") {
        return refuse(format!(
            "{}: a key pair file is not a .pub file (name it NAME.key; NAME.pub is its public half)",
            file.display()
        ));
    }
    let folder = file.parent().filter(|parent| !parent.as_os_str().is_empty()).unwrap_or(Path::new("."));
    match std::fs::metadata(folder) {
        Ok(metadata) if metadata.is_dir() => {}
        Ok(_) => return refuse(format!("{}: {} is not a folder", file.display(), folder.display())),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return refuse(format!(
                "{}: no folder {} to write it in (create it first)",
                file.display(),
                folder.display()
            ))
        }
        Err(error) => bail!("{}: cannot look at {}: {error}", file.display(), folder.display()),
    }
    refuse_existing(&[file, &public_path(file)], &[]).map_err(|error| Usage::of(&error))
}

/// The key pairs of a cluster: one per role, one per named worker (or one `worker` for all).
fn key_names(workers: &[String]) -> anyhow::Result<Vec<(Role, String)>> {
    let mut names: Vec<(Role, String)> =
        [Role::Router, Role::Collector, Role::Injector, Role::Operator].map(|role| (role, role.name().into())).into();
    match workers {
        [] => names.push((Role::Worker, Role::Worker.name().into())),
        named => names.extend(named.iter().map(|name| (Role::Worker, name.clone()))),
    }
    if workers.iter().any(|name| name == SHARED_WORKER_KEY) {
        bail!(
            "--worker `{SHARED_WORKER_KEY}`: the name of the workers' shared key (it may register as any id); \
             give this worker a name of its own"
        );
    }
    for (at, (_, name)) in names.iter().enumerate() {
        if name == "public" {
            bail!("--worker `public`: the name of the public keys' folder");
        }
        if !is_plain_name(name) {
            bail!("--worker `{name}`: a worker id for a key file is letters, digits, `-`, `_` and `.`, not starting with `.`");
        }
        if names[..at].iter().any(|(_, earlier)| earlier == name) {
            bail!("--worker `{name}`: the name of another key (each key pair is <name>.key)");
        }
    }
    Ok(names)
}

/// Keys are never overwritten: fails naming the first of `files` that exists (as anything: a
/// folder where a key file goes would fail the writing half-way), or of `folders` that is not
/// an empty folder (an empty one, a mount point waiting for them, is not in the way).
fn refuse_existing(files: &[&Path], folders: &[&Path]) -> anyhow::Result<()> {
    let folder_in_the_way = |path: &Path| match std::fs::read_dir(path) {
        Ok(mut entries) => entries.next().is_some(),
        Err(_) => path.exists(),
    };
    let in_the_way = files.iter().find(|path| path.symlink_metadata().is_ok());
    match in_the_way.or_else(|| folders.iter().find(|path| folder_in_the_way(path))) {
        Some(path) => bail!("{} exists: keys are never overwritten", path.display()),
        None => Ok(()),
    }
}

/// A name that is one file name in its folder, never a path out of it.
fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// The public half's file beside a key pair file: `w1.key` -> `w1.pub`, `w1` -> `w1.pub`.
fn public_path(file: &Path) -> PathBuf {
    match file.extension() {
        Some(extension) if extension == "key" => file.with_extension("pub"),
        _ => PathBuf::from(format!("{}.pub", file.display())),
    }
}

/// Where a cluster's key pairs lie in its folder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// `DIR/<name>.key` (the hosts' layout, `cep run --secure`).
    Flat,
    /// `DIR/<name>/<name>.key`: a folder each, to be mounted alone.
    Folders,
}

/// A cluster's keys, as [`ClusterKeys::create`] lays them out.
#[derive(Clone, Debug)]
pub struct ClusterKeys {
    /// The folder of key pairs.
    pub dir: PathBuf,
    /// The public keys folder (`dir/public`).
    pub public: PathBuf,
    layout: Layout,
}

impl ClusterKeys {
    /// Writes a key pair per role, and one per named worker (`workers`, each listed under
    /// `worker/`); with no names, one `worker.key` for every worker.
    pub fn create(dir: &Path, workers: &[String]) -> anyhow::Result<ClusterKeys> {
        ClusterKeys::create_as(dir, workers, Layout::Flat)
    }

    /// [`Self::create`], laid out as `layout` says.
    pub fn create_as(dir: &Path, workers: &[String], layout: Layout) -> anyhow::Result<ClusterKeys> {
        // Every name is checked before any file is written: a refusal leaves nothing behind.
        let keys = ClusterKeys::check_creatable(dir, workers, layout)?;
        keys.write_pairs(workers)?;
        Ok(keys)
    }

    /// Writes the key pairs [`Self::check_creatable`] found room for.
    fn write_pairs(&self, workers: &[String]) -> anyhow::Result<()> {
        for (role, name) in key_names(workers)? {
            let pair = KeyPair::generate()?;
            pair.write(&self.key(&name))
                .and_then(|()| write_public(pair.public(), &self.public.join(role.name()).join(format!("{name}.pub"))))
                .with_context(|| format!("cannot write the {name} key"))?;
        }
        Ok(())
    }

    /// Fails, naming why, where [`Self::create_as`] would refuse: a bad worker name, `dir` not
    /// a folder, or a key file (or a public keys folder that is not empty) in the way.
    pub fn check_creatable(dir: &Path, workers: &[String], layout: Layout) -> anyhow::Result<ClusterKeys> {
        let keys = ClusterKeys { dir: dir.to_path_buf(), public: dir.join("public"), layout };
        let names = key_names(workers)?;
        if dir.exists() && !dir.is_dir() {
            bail!("{}: not a folder", dir.display());
        }
        let files: Vec<PathBuf> = names.iter().map(|(_, name)| keys.key(name)).collect();
        refuse_existing(&files.iter().map(PathBuf::as_path).collect::<Vec<_>>(), &[&keys.public])?;
        Ok(keys)
    }

    /// Fails unless `dir` holds every key pair [`Self::create`] would write for `workers`, and the
    /// public keys folder with the router's key: a folder left half-written is not kept.
    pub fn check_complete(dir: &Path, workers: &[String], layout: Layout) -> anyhow::Result<()> {
        let keys = ClusterKeys { dir: dir.to_path_buf(), public: dir.join("public"), layout };
        for (_, name) in key_names(workers)? {
            KeyPair::read(&keys.key(&name)).with_context(|| format!("{} holds no whole set of keys", dir.display()))?;
        }
        let public = cep_transport::security::PublicKeys::read(&keys.public)?;
        public.router(&keys.public)?;
        Ok(())
    }

    /// The key pair file of `name` (a role, or a worker's name).
    pub fn key(&self, name: &str) -> PathBuf {
        match self.layout {
            Layout::Flat => self.dir.join(format!("{name}.key")),
            Layout::Folders => self.dir.join(name).join(format!("{name}.key")),
        }
    }

    /// The flags of a process holding `name`'s key.
    pub fn security(&self, name: &str) -> cep_transport::security::SecurityArgs {
        cep_transport::security::SecurityArgs {
            key: Some(self.key(name)),
            keys: Some(self.public.clone()),
            insecure: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cep_transport::security::{PublicKeys, Roles};

    #[test]
    fn init_writes_a_pair_per_role_and_the_public_folder_lists_them() {
        let dir = tempfile::tempdir().unwrap();
        let keys = ClusterKeys::create(&dir.path().join("keys"), &["w1".into(), "w2".into()]).unwrap();
        let public = PublicKeys::read(&keys.public).unwrap();
        assert_eq!(public.len(), 6);
        for (name, role) in [("router", Role::Router), ("w2", Role::Worker), ("operator", Role::Operator)] {
            let pair = KeyPair::read(&keys.key(name)).unwrap();
            assert_eq!(public.lookup(pair.public()), Some((Roles::of(&[role]), name)));
        }
        let again = ClusterKeys::create(&keys.dir, &[]).unwrap_err().to_string();
        assert!(again.contains("keys are never overwritten"), "{again}");
        let escape = ClusterKeys::create(&dir.path().join("other"), &["../x".into()]).unwrap_err().to_string();
        assert!(escape.starts_with("--worker `../x`"), "{escape}");
        // Refused before anything is written.
        let other = dir.path().join("other");
        for (workers, expected) in [
            (vec!["router".to_string()], "the name of another key"),
            (vec!["w0".into(), "w0".into()], "the name of another key"),
            (vec!["public".into()], "the name of the public keys' folder"),
            (vec!["w0".into(), "worker".into()], "the name of the workers' shared key"),
        ] {
            let error = ClusterKeys::create(&other, &workers).unwrap_err().to_string();
            assert!(error.contains(expected), "{error}");
            assert!(!other.exists(), "nothing written");
        }
        // Kept only when whole.
        ClusterKeys::check_complete(&keys.dir, &["w1".into(), "w2".into()], Layout::Flat).unwrap();
        std::fs::remove_file(keys.key("injector")).unwrap();
        let half = ClusterKeys::check_complete(&keys.dir, &["w1".into(), "w2".into()], Layout::Flat).unwrap_err();
        assert!(format!("{half:#}").contains("holds no whole set of keys"), "{half:#}");
    }

    #[test]
    fn in_folders_each_key_pair_has_one_of_its_own_and_empty_mount_points_are_used() {
        let dir = tempfile::tempdir().unwrap();
        // As the compose file mounts them: a volume per role and one for the public keys.
        for folder in ["router", "worker", "public"] {
            std::fs::create_dir(dir.path().join(folder)).unwrap();
        }
        let keys = ClusterKeys::create_as(dir.path(), &[], Layout::Folders).unwrap();
        assert_eq!(keys.key("router"), dir.path().join("router/router.key"));
        let public = PublicKeys::read(&keys.public).unwrap();
        for name in ["router", "worker", "collector", "injector", "operator"] {
            let pair = KeyPair::read(&dir.path().join(name).join(format!("{name}.key"))).unwrap();
            let entries: Vec<_> = std::fs::read_dir(dir.path().join(name)).unwrap().collect();
            assert_eq!(entries.len(), 1, "{name}'s folder holds its key pair only");
            assert!(public.lookup(pair.public()).is_some());
        }
        ClusterKeys::check_complete(dir.path(), &[], Layout::Folders).unwrap();
        let again = ClusterKeys::create_as(dir.path(), &[], Layout::Folders).unwrap_err().to_string();
        assert!(again.contains("keys are never overwritten"), "{again}");
    }

    #[test]
    fn a_folder_where_a_key_file_goes_is_refused_before_anything_is_written() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("worker.key")).unwrap();
        let error = ClusterKeys::create(dir.path(), &[]).unwrap_err().to_string();
        assert!(error.contains("worker.key exists"), "{error}");
        let entries: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|entry| entry.unwrap().file_name()).collect();
        assert_eq!(entries, ["worker.key"], "nothing written");
    }

    #[test]
    fn the_public_half_goes_beside_the_key_pair() {
        assert_eq!(public_path(Path::new("a/w1.key")), PathBuf::from("a/w1.pub"));
        assert_eq!(public_path(Path::new("w1")), PathBuf::from("w1.pub"));
    }
}
