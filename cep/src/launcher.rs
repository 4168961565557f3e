//! `cep run`: a whole cluster as separate OS processes on loopback, with free ports, progress
//! while it runs, one verdict line at the end, and a non-zero exit if anything was lost. Without
//! `--duration`, `--count` or `--replay` it runs until stopped. The first Ctrl-C (or SIGTERM)
//! stops the injector, which ends its streams with their true counts: the rest drain and
//! finish, and the results are complete. A second one stops every process at once (the
//! collector still writes what it measured, marked incomplete).
//!
//! Everything a user can get wrong (flags, rules, the replay file, the results folder) is
//! checked before any process starts, and reported as one line with exit status 2.

use crate::cli::{RoleConfig, Usage};
use anyhow::{bail, Context as _};
use cep_collector::{CollectorConfig, CsvMode};
use cep_core::duration::parse_duration;
use cep_core::partition::default_worker_id;
use cep_core::results::Summary;
use cep_injector::InjectorConfig;
use cep_router::RouterConfig;
use cep_worker::WorkerConfig;
use clap::Args;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `cep run` flags; every flag can also be set from the environment. `Default` is the flags'
/// defaults.
#[derive(Args, Clone, Debug, PartialEq)]
pub struct LaunchArgs {
    /// Number of workers.
    #[arg(long, env = "CEP_WORKERS", default_value_t = 2)]
    pub workers: usize,
    /// Total ticks per second; 0 sends as fast as possible.
    #[arg(long, env = "CEP_RATE", default_value_t = 200_000.0, allow_negative_numbers = true)]
    pub rate: f64,
    /// Injector connections (streams); symbols are split evenly between them.
    #[arg(long, env = "CEP_CONNECTIONS", default_value_t = 1)]
    pub connections: usize,
    /// Number of symbols.
    #[arg(long, env = "CEP_SYMBOLS", default_value_t = cep_core::reference::SYMBOLS)]
    pub symbols: usize,
    /// How long to send, the warm-up included (e.g. 30s), as for `cep injector`. Without it
    /// (or 0), --count or --replay,
    /// the cluster runs until stopped: the first Ctrl-C or SIGTERM ends the injector's streams
    /// and lets the rest drain (complete results, nothing lost), a second stops at once
    /// (partial results).
    #[arg(long, env = "CEP_DURATION", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Total ticks to send instead of a duration.
    #[arg(long, env = "CEP_COUNT", conflicts_with = "duration")]
    pub count: Option<u64>,
    /// Warm-up sent before the measured part, kept out of the latency histograms (default 1s,
    /// or a fifth of a shorter --duration than 5s; none with --count or --replay).
    #[arg(long, env = "CEP_WARMUP", value_parser = parse_duration)]
    pub warmup: Option<Duration>,
    /// Seed of the price model.
    #[arg(long, env = "CEP_SEED", default_value_t = cep_core::reference::SEED)]
    pub seed: u64,
    /// Replay a tick file instead of generating ticks: `symbol;price;timestamp` lines
    /// (timestamps in ms unless --time-unit says otherwise) or CSV with a header naming the
    /// columns. Each tick's timestamp is its event time; the file is sent paced by --rate, or
    /// by its own timestamps with --speed.
    #[arg(long, env = "CEP_REPLAY", conflicts_with_all = ["symbols", "seed"])]
    pub replay: Option<PathBuf>,
    /// Replay at the file's recorded pace times this factor (1, 10, 0.5), or `max` for as
    /// fast as possible (instead of --rate).
    #[arg(
        long,
        env = "CEP_SPEED",
        value_parser = cep_injector::pacing::Speed::parse,
        requires = "replay",
        conflicts_with = "rate"
    )]
    pub speed: Option<cep_injector::pacing::Speed>,
    /// The unit of the replay file's timestamps when its header does not name one: s, ms, us,
    /// ns (default ms).
    #[arg(long, env = "CEP_TIME_UNIT", value_parser = cep_core::replay::TimeUnit::parse, requires = "replay")]
    pub time_unit: Option<cep_core::replay::TimeUnit>,
    /// How far behind its symbol's latest event time a tick may be and still be processed
    /// (e.g. 5s); later ones are dropped and counted (`late_dropped`). Default: every late
    /// tick is processed at its symbol's latest time and counted (`late`).
    #[arg(long, env = "CEP_ALLOWED_LATENESS", value_parser = parse_duration, requires = "replay")]
    pub allowed_lateness: Option<Duration>,
    /// Also write input.csv, every tick sent.
    #[arg(long, env = "CEP_RECORD_INPUT")]
    pub record_input: bool,
    /// outputs.csv takes no more rows once it is this big (e.g. 1GiB, 500MB; 0: no limit); the
    /// rows it no longer takes are counted (`outputs_not_written`). Default 1GiB.
    #[arg(long, env = "CEP_OUTPUTS_MAX_SIZE", value_parser = cep_collector::config::parse_size)]
    pub outputs_max_size: Option<u64>,
    /// Which outputs to write to outputs.csv.
    #[arg(long, env = "CEP_CSV", value_enum, default_value_t = CsvMode::Alerts)]
    pub csv: CsvMode,
    /// The results folder.
    #[arg(long, env = "CEP_OUT", default_value = "results")]
    pub out: PathBuf,
    /// Most events per batch on every hop.
    #[arg(long, env = "CEP_BATCH", default_value_t = cep_core::reference::BATCH)]
    pub batch: usize,
    /// Paced: the least time between two of the injector's batches on a connection (e.g.
    /// 100us); the ticks that fall due meanwhile leave together, each with its own intended
    /// send time, from which latency is measured. 0 (the default): each tick leaves when due
    /// (a core spins for it).
    #[arg(long, env = "CEP_LINGER", default_value = "0s", value_parser = parse_duration)]
    pub linger: Duration,
    /// The collector gives up after this long without any message.
    #[arg(long, env = "CEP_IDLE_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub idle_timeout: Duration,
    /// While the run goes, the collector rewrites summary.json this often with the figures so
    /// far (`"running": true`, `"complete": false`; the final one replaces it); 0 turns it off.
    #[arg(long, env = "CEP_SUMMARY_EVERY", default_value = "10s", value_parser = parse_duration)]
    pub summary_every: Duration,
    /// How the roles talk: tcp on loopback, ipc (Unix domain sockets), or inproc (every role
    /// a thread of this process, over ZeroMQ's in-memory transport).
    #[arg(long, env = "CEP_TRANSPORT", value_enum, default_value_t = LocalTransport::Tcp)]
    pub transport: LocalTransport,
    /// Run every socket under CURVE, encrypted and authenticated: a key pair per process is
    /// written to `<out>/keys` first (new keys each run; the next run into `--out` removes
    /// them, and a `keys` folder no run wrote is refused, never replaced), and
    /// `<out>/keys/operator.key` with `--keys <out>/keys/public` lets `cep rules deploy` and
    /// `cep cluster` reach the run. Needs a process per role (not `--transport inproc`).
    #[arg(long, env = "CEP_SECURE")]
    pub secure: bool,
    /// Test hook: run worker 0 with its clock this far off (the offset estimate must cancel it).
    #[arg(long, hide = true, allow_hyphen_values = true, value_parser = cep_core::clock::parse_skew)]
    pub worker0_clock_skew: Option<i64>,
    /// No progress lines.
    #[arg(long, env = "CEP_QUIET")]
    pub quiet: bool,
    /// Also print the report (report.txt's YCSB-style lines) before the verdict.
    #[arg(long, env = "CEP_PRINT_REPORT")]
    pub print_report: bool,
    /// The rules file the run starts with (default: the built-in reference rules, the same
    /// as `rules/reference.rules`; `rules/oracle-400.rules` is the Oracle workload).
    #[arg(long, env = "CEP_RULES")]
    pub rules: Option<PathBuf>,
    /// Where the router takes control requests, for `cep rules deploy` while the run goes
    /// (default: a free port on loopback).
    #[arg(long, env = "CEP_ROUTER_CONTROL")]
    pub control: Option<String>,
    /// Where the router takes ticks, for another injector to join the running cluster
    /// (`cep injector --router CONTROL --router-data DATA`; default: a free port on loopback).
    #[arg(long, env = "CEP_ROUTER_LISTEN")]
    pub data: Option<String>,
    #[command(flatten)]
    pub metrics: crate::metrics_plan::LaunchMetrics,
}

impl Default for LaunchArgs {
    fn default() -> LaunchArgs {
        LaunchArgs {
            workers: 2,
            rate: 200_000.0,
            connections: 1,
            symbols: cep_core::reference::SYMBOLS,
            duration: None,
            count: None,
            warmup: None,
            seed: cep_core::reference::SEED,
            replay: None,
            speed: None,
            time_unit: None,
            allowed_lateness: None,
            record_input: false,
            print_report: false,
            outputs_max_size: None,
            csv: CsvMode::Alerts,
            out: PathBuf::from("results"),
            batch: cep_core::reference::BATCH,
            linger: cep_injector::config::DEFAULT_LINGER,
            idle_timeout: Duration::from_secs(30),
            summary_every: Duration::from_secs(10),
            transport: LocalTransport::Tcp,
            secure: false,
            worker0_clock_skew: None,
            quiet: false,
            rules: None,
            control: None,
            data: None,
            metrics: Default::default(),
        }
    }
}

impl LaunchArgs {
    /// Everything the processes would refuse, checked before any starts; the error is a
    /// [`Usage`] error (exit status 2).
    fn validate(&self) -> anyhow::Result<()> {
        self.check().map_err(|error| Usage::of(&error))
    }

    fn check(&self) -> anyhow::Result<()> {
        if self.workers == 0 {
            bail!("--workers must be at least 1");
        }
        if self.replay.is_none() {
            if self.symbols == 0 {
                bail!("--symbols must be at least 1");
            }
            if self.connections == 0 || self.connections > self.symbols {
                bail!("--connections must be between 1 and --symbols ({})", self.symbols);
            }
        } else if self.connections == 0 {
            bail!("--connections must be at least 1");
        }
        if !(self.rate.is_finite() && self.rate >= 0.0) {
            bail!("--rate must be a non-negative number, got {}", self.rate);
        }
        if self.count == Some(0) {
            bail!("--count must be at least 1");
        }
        if self.batch == 0 {
            bail!("--batch must be at least 1");
        }
        let source = cep_query::RulesSource::load(self.rules.as_deref()).map_err(anyhow::Error::msg)?;
        source.compile().map_err(|error| anyhow::anyhow!(error.first_line()))?;
        if let Some(file) = &self.replay {
            refuse_replaying_a_run_file(file, &self.out)?;
            // Checked here, in a pass that keeps only counts, before anything starts: the whole
            // file for one process, else its first ticks (its columns, its unit, a file of the
            // wrong kind), the rest while the run starts ([`supervise`]: the first ticks leave
            // at once, and a bad line further on stops the run). The injector sends the file
            // as it reads it.
            let checked = match self.transport {
                LocalTransport::Inproc => self.count,
                _ => Some(self.count.map_or(CHECKED_BEFORE_START, |count| count.min(CHECKED_BEFORE_START))),
            };
            cep_core::replay::scan(file, self.time_unit, 1, checked)
                .map_err(|error| anyhow::anyhow!("--replay {error}"))?;
        }
        if self.transport == LocalTransport::Inproc {
            if self.secure {
                bail!("--secure needs a process per role (ZeroMQ has no CURVE in process): use --transport tcp or ipc");
            }
            if self.metrics.metrics_listen.is_some() {
                bail!("--metrics-listen needs a process per role: use --transport tcp or ipc");
            }
            if self.worker0_clock_skew.is_some() {
                bail!("--worker0-clock-skew needs a process per role: use --transport tcp or ipc");
            }
        }
        if let Some(listen) = &self.metrics.metrics_listen {
            let plan = crate::metrics_plan::MetricsPlan::new(
                listen,
                self.metrics.metrics_linger,
                self.workers,
                Path::new("."),
            )?;
            plan.check_ports()?;
        }
        check_out_folder(&self.out)?;
        if self.secure {
            match RunKeys::in_folder(&self.out) {
                RunKeys::None | RunKeys::OfARun => {}
                RunKeys::NotAFolder => bail!(
                    "--out {}: keys is not a folder (--secure writes the run's keys there)",
                    self.out.display()
                ),
                RunKeys::NotARun => bail!(
                    "--out {}: keys holds files no `cep run --secure` marked as its own (no {RUN_KEYS_MARK}: keys of yours, or of a cep older than the mark); they are not replaced: move them or choose another --out",
                    self.out.display()
                ),
            }
        }
        Ok(())
    }
}

/// Ticks of a replay file checked before a run of processes starts (blank and comment lines
/// aside); the rest is checked while it starts (about 15 ms of reading: a file's format and
/// first lines are refused before anything is touched).
const CHECKED_BEFORE_START: u64 = 100_000;

/// The results folder exists (or can be made) and takes files.
fn check_out_folder(out: &Path) -> anyhow::Result<()> {
    if out.exists() && !out.is_dir() {
        bail!("--out {}: not a folder", out.display());
    }
    std::fs::create_dir_all(out)
        .map_err(|error| anyhow::anyhow!("--out {}: cannot create it: {error}", out.display()))?;
    let probe = out.join(format!(".cep-write-check-{}", std::process::id()));
    std::fs::write(&probe, b"")
        .map_err(|error| anyhow::anyhow!("--out {}: cannot write there: {error}", out.display()))?;
    let _ = std::fs::remove_file(probe);
    Ok(())
}

/// A replay of a file this run is about to remove or rewrite (a recorded `input.csv` in the
/// results folder) would lose its input.
fn refuse_replaying_a_run_file(file: &Path, out: &Path) -> anyhow::Result<()> {
    let (Ok(file_path), Ok(out_path)) = (file.canonicalize(), out.canonicalize()) else { return Ok(()) };
    let name = file_path.file_name().and_then(|name| name.to_str()).unwrap_or_default();
    if file_path.parent() == Some(out_path.as_path()) && cep_core::results::RUN_FILES.contains(&name) {
        bail!(
            "--replay {}: a run replaces its results folder's {name}; copy it elsewhere or choose another --out",
            file.display()
        );
    }
    Ok(())
}

/// `cep run`: launches, then ends with the verdict, one line (`OK: ...` or `FAILED: ...`);
/// the YCSB lines stay in report.txt unless `--print-report`. Fails if anything was lost.
pub fn launch(args: LaunchArgs) -> anyhow::Result<()> {
    let program = std::env::current_exe().context("cannot find the cep executable")?;
    let report = args.out.join(crate::run_report::REPORT_HTML);
    let started = std::time::SystemTime::now();
    let summary = match run_cluster(&program, &args) {
        Ok(summary) => summary,
        // A mistake found before anything started is one line and nothing else.
        Err(error) if error.is::<Usage>() && !crate::run_report::summary_written_since(&args.out, started) => {
            return Err(error)
        }
        Err(error) => {
            // A run that started and failed (a bad replay line, an interrupt, a process that
            // died) may still have written what it measured, and the launcher has added why
            // it stopped.
            let page = crate::run_report::write_or_warn(&args.out, started);
            print_report_if_asked(&args);
            let place = match page {
                true => format!("partial results: {}", report.display()),
                false => format!("results: {}", args.out.display()),
            };
            cep_telemetry::outln!("FAILED: {}; {place}", crate::telemetry::one_line(&error));
            return Err(AlreadySaid { status: crate::cli::exit_status(&error) }.into());
        }
    };
    print_report_if_asked(&args);
    if summary.secure {
        cep_telemetry::outln!("secure: every socket under CURVE; keys in {}", args.out.join("keys").display());
    }
    let verdict = match report.exists() {
        true => summary.verdict(&report.display().to_string()),
        false => format!("{}; results: {}", summary.verdict_figures(), args.out.display()),
    };
    cep_telemetry::outln!("{verdict}");
    match summary.problem() {
        Some(_) => Err(AlreadySaid { status: 1 }.into()),
        None => Ok(()),
    }
}

fn print_report_if_asked(args: &LaunchArgs) {
    if args.print_report {
        if let Ok(report) = std::fs::read_to_string(args.out.join("report.txt")) {
            cep_telemetry::out!("{report}");
        }
    }
}

/// A failure already told in the verdict line: `cep` exits with `status` and prints nothing
/// more.
#[derive(Debug)]
pub struct AlreadySaid {
    /// The exit status the failure has (see [`crate::cli::exit_status`]).
    pub status: i32,
}

impl std::fmt::Display for AlreadySaid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the run failed (see its verdict line)")
    }
}

impl std::error::Error for AlreadySaid {}

/// A SIGTERM this soon after another is the same one delivered twice (`timeout` signals the
/// process and then its whole group), not a second stop; a Ctrl-C (SIGINT) always counts.
const SIGNAL_ECHO: Duration = Duration::from_millis(200);

/// How long the roles still running may take to stop once one failed or the run was
/// interrupted.
pub const STOP_GRACE: Duration = Duration::from_secs(10);

/// How long the other roles may take to finish once the collector has everything.
pub const FINISH_GRACE: Duration = Duration::from_secs(15);

/// How the local processes talk to each other.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalTransport {
    /// TCP on 127.0.0.1, ports chosen by the kernel: what a multi-host cluster uses.
    Tcp,
    /// Unix domain sockets: no TCP stack between the processes of one machine.
    Ipc,
    /// One process: every role a thread, over ZeroMQ's in-memory transport (one shared
    /// context). `--metrics-listen` needs a process per role.
    Inproc,
}

/// Where the processes of one local cluster bind. TCP endpoints use `*` ports, which the
/// kernel picks without races; the router announces its ports in a file the launcher reads.
struct Endpoints {
    transport: LocalTransport,
    scratch: PathBuf,
    /// Under `--secure`, the keys each process proves itself with.
    keys: Option<crate::keys::ClusterKeys>,
}

impl Endpoints {
    fn new(transport: LocalTransport) -> Endpoints {
        let scratch = std::env::temp_dir().join(format!("cep-{}", std::process::id()));
        Endpoints { transport, scratch, keys: None }
    }

    /// The security flags of process `name` (open unless `--secure`).
    fn security(&self, name: &str) -> Option<cep_transport::security::SecurityArgs> {
        self.keys.as_ref().map(|keys| keys.security(name))
    }

    /// Makes the scratch folder (ipc sockets, announce files).
    fn create(&self) -> anyhow::Result<()> {
        std::fs::create_dir_all(&self.scratch).with_context(|| format!("cannot create {}", self.scratch.display()))
    }

    fn bind(&self, name: &str) -> String {
        match self.transport {
            LocalTransport::Tcp => "tcp://127.0.0.1:*".into(),
            LocalTransport::Ipc => format!("ipc://{}", self.scratch.join(name).display()),
            LocalTransport::Inproc => format!("inproc://{name}"),
        }
    }

    fn announce_file(&self) -> PathBuf {
        self.scratch.join("router.endpoints")
    }

    /// The router's (data, control) endpoints, once it has announced them.
    fn announced(&self) -> Option<(String, String)> {
        let text = std::fs::read_to_string(self.announce_file()).ok()?;
        let field = |key: &str| text.lines().find_map(|line| line.strip_prefix(key)).map(str::to_string);
        Some((field("data=")?, field("control=")?))
    }
}

/// The folder of a results folder where `cep run`'s workers keep their checkpoints.
pub const CHECKPOINTS_DIR: &str = "checkpoints";

/// Removes the checkpoints earlier runs left in `dir` (their `run-<start>` folders), nothing
/// else: a folder of the user's that happens to be there stays.
fn remove_earlier_checkpoints(dir: &Path) -> anyhow::Result<()> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Ok(()) };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let of_a_run = name
            .to_str()
            .and_then(|name| name.strip_prefix("run-"))
            .is_some_and(|start| !start.is_empty() && start.bytes().all(|b| b.is_ascii_digit()));
        if of_a_run && entry.path().is_dir() {
            std::fs::remove_dir_all(entry.path()).with_context(|| {
                format!("cannot remove the checkpoints of an earlier run in {}", entry.path().display())
            })?;
        }
    }
    Ok(())
}

/// Runs a cluster of `program` processes and returns the collector's summary.
pub fn run_cluster(program: &Path, args: &LaunchArgs) -> anyhow::Result<Summary> {
    args.validate()?;
    let mut endpoints = Endpoints::new(args.transport);
    check_roles(args, &endpoints).map_err(|error| Usage::of(&error))?;
    check_checkpoint_store(args, &endpoints).map_err(|error| Usage::of(&error))?;
    clear_previous_run(&args.out)?;
    remove_earlier_checkpoints(&args.out.join(CHECKPOINTS_DIR))?;
    if args.secure {
        endpoints.keys = Some(fresh_keys(&args.out.join("keys"), args.workers)?);
    }
    if !args.quiet {
        tracing::info!("writing results to {}", args.out.display());
        if let Some(keys) = &endpoints.keys {
            tracing::info!("secure: every socket under CURVE, the run's keys in {}", keys.dir.display());
        }
    }
    let outcome = if args.transport == LocalTransport::Inproc {
        let router = RouterConfig { announce: None, ..router_config(args, &endpoints)? };
        let (data, control) = (router.listen.clone(), router.control.clone());
        let mut roles = vec![("router".to_string(), RoleConfig::Router(router))];
        roles.extend(role_configs(args, &endpoints, &data, &control)?.into_iter().map(|p| (p.name, p.role)));
        crate::inprocess::run(roles, crate::telemetry::stop_flags()?)
    } else {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        endpoints.create()?;
        let outcome = runtime.block_on(supervise(program, args, &endpoints));
        let _ = std::fs::remove_dir_all(&endpoints.scratch);
        outcome
    };
    outcome.inspect_err(|cause| record_failure(&args.out, &cause.to_string()))?;
    let path = args.out.join("summary.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("the collector wrote no {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("cannot parse {}", path.display()))
}

/// Writes why this launcher stopped the run into the collector's summary, where the collector
/// could not know it (a bad replay line, a role that died, an interrupt): an incomplete run's
/// `failure` is never left null, and it no longer says it is running. Stopped before the
/// collector wrote any summary (the cluster still assembling), the summary says only that:
/// nothing counted, nothing known sent or lost. A complete run's results stay as they are.
fn record_failure(out: &Path, cause: &str) {
    let path = out.join("summary.json");
    let summary = match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str::<Summary>(&text).ok(),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound && out.is_dir() => Some(Summary::default()),
        Err(_) => None,
    };
    let Some(mut summary) = summary.filter(|summary| !summary.complete && summary.failure.is_none()) else {
        return;
    };
    summary.failure = Some(format!("cep run stopped the run: {cause}"));
    summary.running = false;
    if let Err(error) = cep_collector::write_results(out, &summary) {
        tracing::warn!("cannot write the run's failure into {}: {error}", path.display());
    }
}

/// Every process's configuration as its role checks it, before any starts (the router's
/// endpoints as they will be bound stand in for the ones it will announce).
fn check_roles(args: &LaunchArgs, endpoints: &Endpoints) -> anyhow::Result<()> {
    // A socket file of the user's goes in a folder that must exist (the launcher's own go in
    // the scratch folder it makes as the run starts).
    for (flag, endpoint) in [("control", &args.control), ("data", &args.data)] {
        let Some(endpoint) = endpoint.as_deref() else { continue };
        let folder = endpoint.strip_prefix("ipc://").and_then(|path| Path::new(path).parent());
        if let Some(folder) = folder.filter(|folder| !folder.as_os_str().is_empty() && !folder.is_dir()) {
            bail!("--{flag} `{endpoint}`: no folder {} to make the socket in", folder.display());
        }
    }
    let router = router_config(args, endpoints)?;
    let (data, control) = (router.listen.clone(), router.control.clone());
    let others = role_configs(args, endpoints, &data, &control)?.into_iter().map(|process| process.role);
    for role in std::iter::once(RoleConfig::Router(router)).chain(others) {
        role.validate().map_err(|reason| anyhow::anyhow!("invalid {} configuration: {reason}", role.command()))?;
    }
    Ok(())
}

/// The checkpoint folder the router names to every worker: one they cannot use stops the run
/// before it starts. Its parent is made as any folder (the results folder stays readable by
/// others); the store's own folder is the owner's only.
fn check_checkpoint_store(args: &LaunchArgs, endpoints: &Endpoints) -> anyhow::Result<()> {
    let Some(dir) = router_config(args, endpoints)?.checkpoint_dir else { return Ok(()) };
    let named_by = match std::env::var_os("CEP_CHECKPOINT_DIR") {
        Some(_) => "CEP_CHECKPOINT_DIR".to_string(),
        None => format!("--out {}", args.out.display()),
    };
    let failed = |reason: String| anyhow::anyhow!("{named_by}: {reason}");
    if let Some(parent) = dir.parent().filter(|parent| !parent.as_os_str().is_empty() && !parent.exists()) {
        std::fs::create_dir_all(parent).map_err(|error| {
            failed(format!("cannot make {}: {}", parent.display(), cep_core::io_text::plain(&error)))
        })?;
    }
    cep_core::store::DirectoryStore::check(&dir).map_err(failed)
}

/// The router's configuration: what `cep run` decides, the rest as the router takes it
/// given no flag (its environment variable, else its default).
fn router_config(args: &LaunchArgs, endpoints: &Endpoints) -> anyhow::Result<RouterConfig> {
    let base =
        secured(crate::cli::from_environment::<RouterConfig>()?, endpoints.security("router"), |c| &mut c.security);
    Ok(RouterConfig {
        listen: args.data.clone().unwrap_or_else(|| endpoints.bind("router-data")),
        control: args.control.clone().unwrap_or_else(|| endpoints.bind("router-control")),
        announce: Some(endpoints.announce_file()),
        workers: args.workers,
        streams: u32::try_from(args.connections)
            .map_err(|_| anyhow::anyhow!("--connections {} is more than the router takes", args.connections))?,
        batch: args.batch,
        rules: args.rules.clone(),
        allowed_lateness: args.allowed_lateness,
        // Unless told otherwise (CEP_CHECKPOINT_DIR), a run's checkpoints lie with its results,
        // and the router tells every worker to store there, one started by hand to join too.
        checkpoint_dir: Some(base.checkpoint_dir.clone().unwrap_or_else(|| args.out.join(CHECKPOINTS_DIR))),
        ..base
    })
}

/// `config` with `security` when there is one.
fn secured<T>(
    mut config: T,
    security: Option<cep_transport::security::SecurityArgs>,
    field: impl FnOnce(&mut T) -> &mut cep_transport::security::SecurityArgs,
) -> T {
    if let Some(security) = security {
        *field(&mut config) = security;
    }
    config
}

/// One process of the local cluster: its name and the role it runs.
struct Process {
    name: String,
    role: RoleConfig,
}

/// The other roles, given where the router listens: what `cep run` decides, the rest as each
/// role takes it given no flag.
fn role_configs(args: &LaunchArgs, endpoints: &Endpoints, data: &str, router: &str) -> anyhow::Result<Vec<Process>> {
    let mut processes = Vec::new();
    let base = secured(crate::cli::from_environment::<CollectorConfig>()?, endpoints.security("collector"), |c| {
        &mut c.security
    });
    let collector = CollectorConfig {
        listen: endpoints.bind("collector"),
        clock_listen: endpoints.bind("collector-clock"),
        router: router.to_string(),
        advertise: "127.0.0.1".into(),
        out: args.out.clone(),
        csv: args.csv,
        idle_timeout: args.idle_timeout,
        summary_every: args.summary_every,
        progress: !args.quiet,
        launched: true,
        outputs_max_size: args.outputs_max_size.unwrap_or(base.outputs_max_size),
        ..base
    };
    processes.push(Process {
        name: "collector".into(),
        role: RoleConfig::Collector { config: collector, print_report: false },
    });
    let worker: WorkerConfig = crate::cli::from_environment()?;
    for index in 0..args.workers {
        let id = default_worker_id(index);
        let config = WorkerConfig {
            router: router.to_string(),
            listen: endpoints.bind(&id),
            id: Some(id.clone()),
            advertise: "127.0.0.1".into(),
            batch: args.batch,
            ..secured(worker.clone(), endpoints.security(&id), |c| &mut c.security)
        };
        processes.push(Process { name: id, role: RoleConfig::Worker(config) });
    }
    let injector: InjectorConfig = crate::cli::from_environment()?;
    let injector = InjectorConfig {
        router: router.to_string(),
        router_data: data.to_string(),
        symbols: args.symbols,
        connections: args.connections,
        rate: args.rate,
        warmup: args.warmup.unwrap_or(match (args.count, &args.replay, args.duration) {
            (Some(_), _, _) | (_, Some(_), _) => Duration::ZERO,
            (None, None, Some(duration)) if !duration.is_zero() => (duration / 5).min(Duration::from_secs(1)),
            (None, None, _) => Duration::from_secs(1),
        }),
        seed: args.seed,
        batch: args.batch,
        linger: args.linger,
        count: args.count,
        // Neither (nor a replay, which ends with its file): until stopped.
        duration: args.duration,
        replay: args.replay.clone(),
        // Checked whole before anything started (constant memory): sent as it is read.
        replay_checked: args.replay.is_some(),
        speed: args.speed,
        time_unit: args.time_unit,
        record: if args.record_input { Some(args.out.join("input.csv")) } else { injector.record.clone() },
        ..secured(injector, endpoints.security("injector"), |c| &mut c.security)
    };
    processes.push(Process { name: "injector".into(), role: RoleConfig::Injector(injector) });
    Ok(processes)
}

mod supervise;

use supervise::supervise;

mod run_keys;

use run_keys::{clear_previous_run, fresh_keys, RunKeys, RUN_KEYS_MARK};

#[cfg(test)]
mod tests;
