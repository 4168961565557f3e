//! CURVE on every socket: who a process is (its key pair), whom it admits (the cluster's public
//! keys, by role) and the ZAP handler that checks every connection against them.
//!
//! A secure [`crate::Context`] makes every socket created from it CURVE: a bound socket is a
//! CURVE server whose ZAP domain names the roles it admits; a connecting socket is a CURVE
//! client that must be told the public key of the process it reaches. The ZAP handler (one
//! thread per context) admits a connection only when the client's public key is listed for one
//! of the socket's roles, and names the peer in every message it sends ([`Identity`], ZeroMQ's
//! `User-Id`), so the role code can bind what a frame claims to who sent it. Refused
//! connections are counted ([`Refusals`]) and logged.
//!
//! Keys on disk (`cep keys generate`): a key pair file holds both halves, Z85-encoded, and must
//! stay private; a public key file holds the public half. The cluster's public keys are a
//! directory with one folder per role (`router/`, `worker/`, `collector/`, `injector/`,
//! `operator/`) of `*.pub` files; it is read again at most once a second, so adding or
//! removing a file admits or refuses new connections without a restart.

use crate::monitor::{Event, EVENT_HANDSHAKE_FAILED_PROTOCOL, EVENT_MONITOR_STOPPED, MECHANISM_MISMATCH};
pub use cep_core::identity::{
    decode_key, is_refusal, Identity, PublicKey, Role, Roles, Sender, SHARED_WORKER_KEY, Z85_KEY_LEN,
};
use cep_core::identity::{HANDSHAKE_FAILED, UNAUTHENTICATED, ZAP_FAILED};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Key files are a few lines; anything longer is not one.
const MAX_KEY_FILE_BYTES: u64 = 4096;
/// How often the public keys directory may be read again.
const RELOAD_EVERY: Duration = Duration::from_secs(1);
/// Where libzmq sends its authentication requests (RFC 27).
const ZAP_ENDPOINT: &str = "inproc://zeromq.zap.01";

/// A key file that cannot be used, with where and why.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The file or directory could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
    /// The file is not a key file of the expected kind.
    #[error("{path}: {reason}")]
    Invalid {
        /// The file (and line, when one is at fault).
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// This build's libzmq has no CURVE.
    #[error("this build of libzmq has no CURVE (it must be built with libsodium)")]
    NoCurve,
}

fn invalid(path: &Path, line: Option<usize>, reason: impl Into<String>) -> KeyError {
    let path = match line {
        Some(line) => format!("{}:{line}", path.display()),
        None => path.display().to_string(),
    };
    KeyError::Invalid { path, reason: reason.into() }
}

/// A process's own key pair. The secret half never appears in `Debug` output or logs.
#[derive(Clone)]
pub struct KeyPair {
    public: PublicKey,
    secret: String,
}

impl std::fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyPair({}, secret withheld)", self.public)
    }
}

impl KeyPair {
    /// A new random key pair (libsodium's generator, through libzmq).
    pub fn generate() -> Result<KeyPair, KeyError> {
        curve_available()?;
        let pair = zmq::CurveKeyPair::new().map_err(|_| KeyError::NoCurve)?;
        let encode = |bytes: &[u8; 32]| zmq::z85_encode(bytes).expect("32 bytes encode");
        let public = PublicKey::parse(&encode(&pair.public_key)).expect("libzmq's own Z85 is a key");
        Ok(KeyPair { public, secret: encode(&pair.secret_key) })
    }

    /// The public half.
    pub fn public(&self) -> &PublicKey {
        &self.public
    }

    /// Reads a key pair file (`cep keys generate`).
    pub fn read(path: &Path) -> Result<KeyPair, KeyError> {
        let fields = read_key_file(path)?;
        let field = |name: &str| {
            fields.get(name).ok_or_else(|| invalid(path, None, format!("no `{name}` line: not a key pair file")))
        };
        let (public_line, public) = field("public-key")?;
        let (secret_line, secret) = field("secret-key")?;
        let secret_bytes = decode_key(secret).map_err(|reason| invalid(path, Some(*secret_line), reason))?;
        let public = PublicKey::parse(public).map_err(|reason| invalid(path, Some(*public_line), reason))?;
        // A public half that is not the secret's would have every peer expect another key.
        let derived = x25519_dalek::PublicKey::from(&x25519_dalek::StaticSecret::from(secret_bytes));
        if zmq::z85_encode(derived.as_bytes()).ok().as_deref() != Some(public.as_str()) {
            return Err(invalid(
                path,
                Some(*public_line),
                "this public key is not the secret key's: the file's two halves are of different key pairs",
            ));
        }
        warn_if_readable_by_others(path);
        let pair = KeyPair { public, secret: secret.clone() };
        Ok(pair)
    }

    /// Writes the key pair to `secret_path`, readable by its owner only (its public half goes
    /// elsewhere with [`write_public`]). An existing file is not overwritten.
    pub fn write(&self, secret_path: &Path) -> Result<(), KeyError> {
        let secret = format!(
            "# cep key pair (`cep keys generate`): keep this file private; it proves who this process is.\n\
             public-key = {}\nsecret-key = {}\n",
            self.public, self.secret
        );
        write_new(secret_path, &secret, 0o600)
    }

    pub(crate) fn secret(&self) -> &str {
        &self.secret
    }
}

/// A secret key readable by other users of the host is theirs too: said, once per load.
fn warn_if_readable_by_others(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(metadata) = std::fs::metadata(path) {
        let mode = metadata.permissions().mode() & 0o777;
        if mode & 0o044 != 0 {
            tracing::warn!(
                file = %path.display(),
                mode = format_args!("{mode:o}"),
                "a secret key file others may read: anyone who can read it can act as this process (chmod 600)"
            );
        }
    }
}

/// Writes a public key file.
pub fn write_public(key: &PublicKey, path: &Path) -> Result<(), KeyError> {
    write_new(path, &format!("# cep public key (`cep keys generate`)\npublic-key = {key}\n"), 0o644)
}

/// Reads a public key file (a key pair file also gives its public half).
pub fn read_public(path: &Path) -> Result<PublicKey, KeyError> {
    let fields = read_key_file(path)?;
    let (line, text) =
        fields.get("public-key").ok_or_else(|| invalid(path, None, "no `public-key` line: not a key file"))?;
    PublicKey::parse(text).map_err(|reason| invalid(path, Some(*line), reason))
}

fn write_new(path: &Path, text: &str, mode: u32) -> Result<(), KeyError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let io = |source| KeyError::Io { path: path.to_path_buf(), source };
    if let Some(parent) = path.parent().filter(|parent| !parent.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(path).map_err(io)?;
    file.write_all(text.as_bytes()).map_err(io)
}

/// `name = value` lines (and `#` comments) of a key file, each with its line number.
fn read_key_file(path: &Path) -> Result<BTreeMap<String, (usize, String)>, KeyError> {
    use std::io::Read;
    let io = |source| KeyError::Io { path: path.to_path_buf(), source };
    let mut bytes = Vec::new();
    std::fs::File::open(path).and_then(|file| file.take(MAX_KEY_FILE_BYTES + 1).read_to_end(&mut bytes)).map_err(io)?;
    if bytes.len() as u64 > MAX_KEY_FILE_BYTES {
        return Err(invalid(path, None, format!("longer than {MAX_KEY_FILE_BYTES} bytes: not a key file")));
    }
    let text = String::from_utf8(bytes).map_err(|_| invalid(path, None, "not UTF-8 text: not a key file"))?;
    let mut fields = BTreeMap::new();
    for (number, line) in text.lines().enumerate().map(|(index, line)| (index + 1, line.trim())) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((name, value)) = line.split_once('=') else {
            return Err(invalid(path, Some(number), "expected `name = value`"));
        };
        let value = value.trim().trim_matches('"');
        if fields.insert(name.trim().to_string(), (number, value.to_string())).is_some() {
            return Err(invalid(path, Some(number), format!("`{}` is given twice", name.trim())));
        }
    }
    Ok(fields)
}

/// Fails unless this build's libzmq has CURVE.
pub fn curve_available() -> Result<(), KeyError> {
    match zmq::has("curve") {
        Some(true) => Ok(()),
        _ => Err(KeyError::NoCurve),
    }
}

/// The cluster's public keys, by role, as a directory holds them.
#[derive(Clone, Debug, Default)]
pub struct PublicKeys {
    by_key: BTreeMap<PublicKey, (Roles, String)>,
    router: Vec<PublicKey>,
}

impl PublicKeys {
    /// Reads `dir`: one folder per role (a missing folder lists no key), `*.pub` files in
    /// them (other files are ignored, so a key can be set aside by renaming it). A file that is
    /// not a public key is an error.
    pub fn read(dir: &Path) -> Result<PublicKeys, KeyError> {
        PublicKeys::read_with(dir, &mut |error| Err(error))
    }

    /// [`Self::read`], but a file that is not a public key is left out (and logged): what the
    /// authentication reads again while the cluster runs, so that one bad file neither admits
    /// nor refuses everyone, nor keeps a removed key admitted.
    pub fn read_skipping_bad(dir: &Path) -> Result<PublicKeys, KeyError> {
        PublicKeys::read_with(dir, &mut |error| {
            tracing::warn!(%error, "a public key file is left out");
            Ok(())
        })
    }

    fn read_with(
        dir: &Path,
        bad_file: &mut dyn FnMut(KeyError) -> Result<(), KeyError>,
    ) -> Result<PublicKeys, KeyError> {
        let mut keys = PublicKeys::default();
        let metadata = std::fs::metadata(dir).map_err(|source| KeyError::Io { path: dir.to_path_buf(), source })?;
        if !metadata.is_dir() {
            return Err(invalid(dir, None, "not a directory (the public keys are a folder per role)"));
        }
        for role in Role::ALL {
            let folder = dir.join(role.name());
            let entries = match std::fs::read_dir(&folder) {
                Ok(entries) => entries,
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
                Err(source) => return Err(KeyError::Io { path: folder, source }),
            };
            let mut files: Vec<PathBuf> = entries
                .filter_map(Result::ok)
                .map(|entry| entry.path())
                .filter(|path| path.extension().is_some_and(|extension| extension == "pub"))
                .collect();
            files.sort();
            for file in files {
                let key = match read_public(&file) {
                    Ok(key) => key,
                    Err(error) => {
                        bad_file(error)?;
                        continue;
                    }
                };
                let name = file.file_stem().map(|stem| stem.to_string_lossy().into_owned()).unwrap_or_default();
                // A key is one identity: under two names, which one it registers as would
                // depend on the order the files are read in.
                if let Some((_, known)) = keys.by_key.get(&key).filter(|(_, known)| *known != name) {
                    let reason = format!("the same key as `{known}.pub`, under another name: a key has one name");
                    bad_file(invalid(&file, None, reason))?;
                    continue;
                }
                if role == Role::Router {
                    keys.router.push(key.clone());
                }
                let entry = keys.by_key.entry(key).or_insert((Roles::default(), name));
                entry.0.insert(role);
            }
        }
        Ok(keys)
    }

    /// The roles and name of `key`, if it is listed.
    pub fn lookup(&self, key: &PublicKey) -> Option<(Roles, &str)> {
        self.by_key.get(key).map(|(roles, name)| (*roles, name.as_str()))
    }

    /// The router's key: the one file in `router/`.
    pub fn router(&self, dir: &Path) -> Result<PublicKey, KeyError> {
        match self.router.as_slice() {
            [key] => Ok(key.clone()),
            [] => Err(invalid(dir, None, "no router key (router/*.pub): every process needs it to reach the router")),
            _ => Err(invalid(dir, None, "more than one router key in router/: the router has one")),
        }
    }

    /// How many keys are listed.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Whether no key is listed.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }
}

/// What a secure process runs with: its key pair and the cluster's public keys.
#[derive(Clone, Debug)]
pub struct Credentials {
    /// This process's key pair.
    pub own: KeyPair,
    /// The public keys directory, read again as it changes.
    pub keys_dir: PathBuf,
    /// The router's public key (from `router/`).
    pub router: PublicKey,
}

impl Credentials {
    /// Reads a key pair file and a public keys directory.
    pub fn load(key_file: &Path, keys_dir: &Path) -> Result<Credentials, KeyError> {
        curve_available()?;
        let own = KeyPair::read(key_file)?;
        // One bad file among the public keys must not stop every process (it is logged).
        let keys = PublicKeys::read_skipping_bad(keys_dir)?;
        let router = keys.router(keys_dir)?;
        Ok(Credentials { own, keys_dir: keys_dir.to_path_buf(), router })
    }
}

/// The flags that make a process secure: both or neither.
#[derive(clap::Args, Clone, Debug, Default, PartialEq, Eq)]
pub struct SecurityArgs {
    /// This process's key pair file (`cep keys generate`): with `--keys`, every socket runs
    /// CURVE (encrypted, and only the listed keys are admitted). Without it the process runs
    /// open, as a cluster on one trusted host may.
    #[arg(long, env = "CEP_KEY", value_name = "FILE", requires = "keys")]
    pub key: Option<PathBuf>,
    /// The cluster's public keys: a directory with a folder per role (`router`, `worker`,
    /// `collector`, `injector`, `operator`) of `*.pub` files (`cep keys init` writes one).
    #[arg(long, env = "CEP_KEYS", value_name = "DIR", requires = "key")]
    pub keys: Option<PathBuf>,
    /// Run open even though `--key` and `--keys` are given (the compose file and the hosts'
    /// units give them by default): no encryption, no authentication. The explicit opt-out.
    #[arg(long, env = "CEP_INSECURE")]
    pub insecure: bool,
}

impl SecurityArgs {
    /// The flags that give this back.
    pub fn to_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        if let Some(key) = &self.key {
            args.push(format!("--key={}", key.display()));
        }
        if let Some(keys) = &self.keys {
            args.push(format!("--keys={}", keys.display()));
        }
        if self.insecure {
            args.push("--insecure".into());
        }
        args
    }

    /// The context every socket of the process is made in: secure when keys are given.
    pub fn context(&self) -> Result<crate::Context, KeyError> {
        match (&self.key, &self.keys, self.insecure) {
            (Some(key), Some(keys), false) => {
                let credentials = Credentials::load(key, keys)?;
                tracing::info!(key = %credentials.own.public(), keys = %keys.display(), "secure: CURVE on every socket");
                crate::Context::secure(credentials)
            }
            _ => Ok(crate::Context::new()),
        }
    }
}

/// Connections refused, by the roles the socket admits: by the ZAP handler (a key not listed
/// for them) and by the handshake itself (a client without CURVE, or one that does not know the
/// server's key, or a malformed handshake: ZeroMQ's protocol errors, seen by a socket monitor).
#[derive(Debug, Default)]
pub struct Refusals {
    /// By (cause prefix, ZAP domain).
    counts: Mutex<BTreeMap<(&'static str, String), u64>>,
}

/// The identity the authentication handler wrote on `message` (`None` on an open socket).
pub fn identity_of(message: &mut zmq::Message) -> Option<Identity> {
    message.gets("User-Id").and_then(Identity::from_user_id)
}

impl Refusals {
    fn count(&self, cause: &'static str, domain: &str) -> u64 {
        let mut counts = self.counts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = counts.entry((cause, domain.to_string())).or_insert(0);
        *count += 1;
        *count
    }

    /// Every refusal so far, by cause: `unauthenticated_<roles the socket admits>` (a key not
    /// listed, e.g. `unauthenticated_router_worker_injector`) and `handshake_failed_<roles>`
    /// (no CURVE, a wrong server key, a malformed handshake), and `zap_failed_<roles>` (this
    /// process's authentication handler answered badly), as the reports name them.
    pub fn by_socket(&self) -> BTreeMap<String, u64> {
        let counts = self.counts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        counts
            .iter()
            .map(|((cause, domain), count)| (format!("{cause}_{}", domain.replace(',', "_")), *count))
            .collect()
    }

    /// How many connections were refused.
    pub fn total(&self) -> u64 {
        self.by_socket().values().sum()
    }
}

/// zmq.h's `ZMQ_PROTOCOL_ERROR_ZAP_*`: the ZAP handler's answer was unusable.
const ZAP_ERRORS: std::ops::RangeInclusive<u32> = 0x2000_0000..=0x2000_0005;

/// What a handshake failure's code (ZeroMQ's `ZMQ_PROTOCOL_ERROR_*`) says, for the log.
fn handshake_failure(code: u32) -> &'static str {
    match code {
        0x1100_0001 => "its messages do not decrypt: it does not know this server's key",
        MECHANISM_MISMATCH => "it does not run CURVE (a client without --key, or another mechanism)",
        0x1000_0001..=0x1000_0018 => "a malformed or out-of-order handshake command",
        code if ZAP_ERRORS.contains(&code) => "this process's authentication handler answered badly",
        _ => "a handshake that is not ZeroMQ's CURVE",
    }
}

/// The ZAP handler: a thread answering libzmq's authentication requests for one context, and
/// reading the handshake failures of its bound sockets.
pub(crate) struct Zap {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    pub(crate) refusals: Arc<Refusals>,
    /// Monitors of bound sockets, for the thread to take (each with its socket's ZAP domain).
    watches: Arc<Mutex<Vec<(zmq::Socket, String)>>>,
    /// Bound sockets the thread watches now (those closed are let go).
    pub(crate) watching: Arc<std::sync::atomic::AtomicUsize>,
}

impl Zap {
    /// Binds the context's ZAP endpoint and serves it until dropped.
    pub(crate) fn start(context: &zmq::Context, keys_dir: PathBuf) -> Result<Zap, crate::TransportError> {
        use crate::socket::socket_err;
        let socket = context.socket(zmq::REP).map_err(socket_err("create ZAP socket"))?;
        socket.set_linger(0).map_err(socket_err("set linger"))?;
        // Only libzmq itself speaks here (in process), but bounded all the same.
        socket.set_maxmsgsize(4096).map_err(socket_err("set maximum message size"))?;
        socket
            .bind(ZAP_ENDPOINT)
            .map_err(|source| crate::TransportError::Bind { endpoint: ZAP_ENDPOINT.into(), source })?;
        let stop = Arc::new(AtomicBool::new(false));
        let refusals = Arc::new(Refusals::default());
        let watches = Arc::new(Mutex::new(Vec::new()));
        let watching = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let thread = {
            let (stop, refusals, watches) = (stop.clone(), refusals.clone(), watches.clone());
            let watching = watching.clone();
            std::thread::Builder::new()
                .name("zap".into())
                .spawn(move || {
                    let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        serve_zap(&socket, &keys_dir, &stop, &refusals, (&watches, &watching))
                    }));
                    // With no handler, libzmq 4.3 would admit anyone: never go on without it.
                    if served.is_err() {
                        tracing::error!("the authentication handler failed: stopping the process");
                        std::process::abort();
                    }
                })
                .map_err(|_| crate::TransportError::Socket {
                    what: "start the ZAP handler",
                    source: zmq::Error::ENOMEM,
                })?
        };
        Ok(Zap { stop, thread: Some(thread), refusals, watches, watching })
    }

    /// Counts the handshakes that fail on `socket`, a CURVE server of ZAP domain `domain`
    /// (call it before the socket binds). A client refused by the handler is counted by the
    /// handler; one whose connection drops mid-handshake (a port probe) is not a refusal.
    pub(crate) fn watch_handshakes(
        &self,
        context: &zmq::Context,
        socket: &zmq::Socket,
        domain: &str,
    ) -> Result<(), crate::TransportError> {
        use crate::socket::socket_err;
        let name = crate::monitor::endpoint("handshakes");
        // (MONITOR_STOPPED only if asked for: it tells the reader the socket has closed.)
        let events = EVENT_HANDSHAKE_FAILED_PROTOCOL | EVENT_MONITOR_STOPPED;
        socket.monitor(&name, events as i32).map_err(socket_err("monitor handshakes"))?;
        // Connected here, before any connection can fail: a monitor's events reach only a
        // reader already connected.
        let monitor = context.socket(zmq::PAIR).map_err(socket_err("create handshake monitor"))?;
        monitor.set_linger(0).map_err(socket_err("set linger"))?;
        // libzmq's I/O thread blocks on a full monitor queue: room for a flood of failures
        // while the handler reads the keys again.
        monitor.set_rcvhwm(100_000).map_err(socket_err("set monitor high-water mark"))?;
        monitor.connect(&name).map_err(socket_err("connect handshake monitor"))?;
        self.watches.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((monitor, domain.to_string()));
        Ok(())
    }
}

impl Drop for Zap {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The public keys as last read, read again when older than [`RELOAD_EVERY`].
struct KeyCache {
    dir: PathBuf,
    keys: PublicKeys,
    read_at: Option<Instant>,
}

impl KeyCache {
    fn current(&mut self) -> &PublicKeys {
        if self.read_at.is_none_or(|at| at.elapsed() >= RELOAD_EVERY) {
            match PublicKeys::read_skipping_bad(&self.dir) {
                Ok(keys) => self.keys = keys,
                // Keep the last good list rather than admit or refuse everyone.
                Err(error) => tracing::warn!(%error, "cannot read the public keys again; using the last ones read"),
            }
            self.read_at = Some(Instant::now());
        }
        &self.keys
    }
}

/// What the handler decides for one request.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Admit(String),
    Refuse(String),
}

/// RFC 27 request frames: version, request id, domain, address, identity, mechanism,
/// credentials.
fn judge(frames: &[Vec<u8>], keys: &PublicKeys) -> Verdict {
    let text = |index: usize| frames.get(index).map(|frame| String::from_utf8_lossy(frame).into_owned());
    let domain = text(2).unwrap_or_default();
    let admitted = Roles::parse(&domain);
    if text(5).as_deref() != Some("CURVE") {
        return Verdict::Refuse(format!("mechanism {:?} is not CURVE", text(5).unwrap_or_default()));
    }
    let Some(key) =
        frames.get(6).and_then(|key| zmq::z85_encode(key).ok()).and_then(|text| PublicKey::parse(&text).ok())
    else {
        return Verdict::Refuse("no client key".into());
    };
    match keys.lookup(&key) {
        Some((roles, name)) if roles.meets(admitted) => Verdict::Admit(Identity::user_id(roles, name, &key)),
        Some((roles, name)) => Verdict::Refuse(format!("key `{name}` ({roles}) is not admitted here ({admitted})")),
        None => Verdict::Refuse(format!("key {key} is not listed (this socket admits {admitted})")),
    }
}

fn serve_zap(
    socket: &zmq::Socket,
    keys_dir: &Path,
    stop: &AtomicBool,
    refusals: &Refusals,
    (watches, watching): (&Mutex<Vec<(zmq::Socket, String)>>, &std::sync::atomic::AtomicUsize),
) {
    let mut cache = KeyCache { dir: keys_dir.to_path_buf(), keys: PublicKeys::default(), read_at: None };
    let mut monitors: Vec<(zmq::Socket, String)> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        monitors.append(&mut watches.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        watching.store(monitors.len(), Ordering::Relaxed);
        let mut items: Vec<zmq::PollItem<'_>> = std::iter::once(socket.as_poll_item(zmq::POLLIN))
            .chain(monitors.iter().map(|(monitor, _)| monitor.as_poll_item(zmq::POLLIN)))
            .collect();
        if !matches!(zmq::poll(&mut items, 100), Ok(n) if n > 0) {
            continue;
        }
        let readable: Vec<bool> = items.iter().map(zmq::PollItem::is_readable).collect();
        drop(items);
        if readable[0] {
            answer_zap(socket, &mut cache, refusals);
        }
        let mut stopped = Vec::new();
        for (at, (monitor, domain)) in monitors.iter().enumerate().filter(|(at, _)| readable[at + 1]) {
            if read_handshake_events(monitor, domain, refusals) {
                stopped.push(at);
            }
        }
        for at in stopped.into_iter().rev() {
            monitors.swap_remove(at);
        }
    }
}

fn answer_zap(socket: &zmq::Socket, cache: &mut KeyCache, refusals: &Refusals) {
    let Ok(frames) = socket.recv_multipart(zmq::DONTWAIT) else { return };
    let request_id = frames.get(1).cloned().unwrap_or_default();
    let verdict = judge(&frames, cache.current());
    let (code, text, user_id) = match verdict {
        Verdict::Admit(user_id) => ("200", "OK".to_string(), user_id),
        Verdict::Refuse(reason) => {
            let domain = frames.get(2).map(|d| String::from_utf8_lossy(d).into_owned()).unwrap_or_default();
            let count = refusals.count(UNAUTHENTICATED, &domain);
            let address = frames.get(3).map(|a| String::from_utf8_lossy(a).into_owned()).unwrap_or_default();
            if count <= 5 || count % 1000 == 0 {
                tracing::warn!(from = address, socket = domain, refused = count, "refused a connection: {reason}");
            }
            ("400", reason, String::new())
        }
    };
    let reply: [&[u8]; 6] = [b"1.0", &request_id, code.as_bytes(), text.as_bytes(), user_id.as_bytes(), b""];
    let _ = socket.send_multipart(reply, 0);
}

/// Counts the handshake failures a monitor reports; true once its socket has closed.
fn read_handshake_events(monitor: &zmq::Socket, domain: &str, refusals: &Refusals) -> bool {
    while let Some(event) = Event::next(monitor) {
        match event.kind {
            EVENT_HANDSHAKE_FAILED_PROTOCOL => {
                let code = event.value;
                let cause = if ZAP_ERRORS.contains(&code) { ZAP_FAILED } else { HANDSHAKE_FAILED };
                let count = refusals.count(cause, domain);
                if count <= 5 || count % 1000 == 0 {
                    let peer = event.address();
                    let reason = handshake_failure(code);
                    tracing::warn!(socket = domain, at = peer, refused = count, "a handshake failed: {reason}");
                }
            }
            EVENT_MONITOR_STOPPED => return true,
            _ => {}
        }
    }
    false
}

/// Whom a connecting socket expects to reach, under CURVE.
#[derive(Clone, Copy, Debug)]
pub enum Server<'a> {
    /// The router (its key is the one in the public keys' `router/`).
    Router,
    /// A process whose key the router passed on (a worker's, the collector's): empty when the
    /// router runs open.
    Key(&'a str),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys_dir(entries: &[(Role, &str, &KeyPair)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (role, name, pair) in entries {
            write_public(pair.public(), &dir.path().join(role.name()).join(format!("{name}.pub"))).unwrap();
        }
        dir
    }

    #[test]
    fn a_key_pair_survives_its_files_and_its_secret_stays_private() {
        let dir = tempfile::tempdir().unwrap();
        let pair = KeyPair::generate().unwrap();
        let (secret, public) = (dir.path().join("w1.key"), dir.path().join("w1.pub"));
        pair.write(&secret).unwrap();
        write_public(pair.public(), &public).unwrap();
        let read = KeyPair::read(&secret).unwrap();
        assert_eq!(read.public(), pair.public());
        assert_eq!(read.secret(), pair.secret());
        assert_eq!(&read_public(&public).unwrap(), pair.public());
        assert_eq!(&read_public(&secret).unwrap(), pair.public());
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&secret).unwrap().permissions().mode() & 0o777, 0o600);
        assert!(!format!("{pair:?}").contains(pair.secret()));
        // Never overwritten.
        assert!(pair.write(&secret).unwrap_err().to_string().contains("exists"));
    }

    #[test]
    fn a_bad_key_file_says_where_and_why() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.key");
        let cases = [
            ("public-key = abc\nsecret-key = def\n", ":2: a key is 40 Z85 characters, this one has 3"),
            ("just words\n", ":1: expected `name = value`"),
            ("public-key = x\n", "no `secret-key` line"),
        ];
        for (text, expected) in cases {
            std::fs::write(&path, text).unwrap();
            let error = KeyPair::read(&path).unwrap_err().to_string();
            assert!(error.starts_with(&path.display().to_string()), "{error}");
            assert!(error.contains(expected), "{error} (expected {expected})");
        }
        std::fs::write(&path, vec![b'#'; 5000]).unwrap();
        assert!(KeyPair::read(&path).unwrap_err().to_string().contains("longer than 4096 bytes"));
        // Two valid halves of different key pairs: the public one is not the secret's.
        let (one, other) = (KeyPair::generate().unwrap(), KeyPair::generate().unwrap());
        std::fs::write(&path, format!("public-key = {}\nsecret-key = {}\n", other.public(), one.secret())).unwrap();
        let error = KeyPair::read(&path).unwrap_err().to_string();
        assert!(error.contains(":1: this public key is not the secret key's"), "{error}");
        std::fs::remove_file(&path).unwrap();
        one.write(&path).unwrap();
        assert_eq!(KeyPair::read(&path).unwrap().public(), one.public(), "libsodium's pair and ours agree");
    }

    #[test]
    fn the_public_keys_give_each_key_its_roles_and_one_router() {
        let (router, worker, both) =
            (KeyPair::generate().unwrap(), KeyPair::generate().unwrap(), KeyPair::generate().unwrap());
        let dir = keys_dir(&[
            (Role::Router, "router", &router),
            (Role::Worker, "w1", &worker),
            (Role::Injector, "ops", &both),
            (Role::Operator, "ops", &both),
        ]);
        std::fs::write(dir.path().join("worker").join("README"), "ignored").unwrap();
        let keys = PublicKeys::read(dir.path()).unwrap();
        assert_eq!(keys.len(), 3);
        assert_eq!(keys.router(dir.path()).unwrap(), router.public().clone());
        assert_eq!(keys.lookup(worker.public()), Some((Roles::of(&[Role::Worker]), "w1")));
        assert_eq!(keys.lookup(both.public()), Some((Roles::of(&[Role::Injector, Role::Operator]), "ops")));
        std::fs::remove_dir_all(dir.path().join("router")).unwrap();
        let keys = PublicKeys::read(dir.path()).unwrap();
        assert!(keys.router(dir.path()).unwrap_err().to_string().contains("no router key"));
        // One key under two names: refused, or left out where bad files are.
        std::fs::copy(dir.path().join("worker").join("w1.pub"), dir.path().join("worker").join("w2.pub")).unwrap();
        let error = PublicKeys::read(dir.path()).unwrap_err().to_string();
        assert!(error.contains("w2.pub") && error.contains("the same key as `w1.pub`"), "{error}");
        let keys = PublicKeys::read_skipping_bad(dir.path()).unwrap();
        assert_eq!(keys.lookup(worker.public()), Some((Roles::of(&[Role::Worker]), "w1")));
    }

    #[test]
    fn the_handler_admits_listed_keys_for_the_sockets_roles_only() {
        let (worker, stranger) = (KeyPair::generate().unwrap(), KeyPair::generate().unwrap());
        let dir = keys_dir(&[(Role::Worker, "w1", &worker)]);
        let keys = PublicKeys::read(dir.path()).unwrap();
        let request = |domain: &str, mechanism: &str, key: &KeyPair| {
            let raw = zmq::z85_decode(key.public().as_str()).unwrap();
            vec![b"1.0".to_vec(), b"7".to_vec(), domain.into(), b"127.0.0.1".to_vec(), vec![], mechanism.into(), raw]
        };
        let admitted = judge(&request("router,worker", "CURVE", &worker), &keys);
        let Verdict::Admit(user_id) = admitted else { panic!("{admitted:?}") };
        let sender = Sender::new(&user_id);
        assert_eq!((sender.key(), sender.name()), (worker.public().as_str(), "w1"));
        assert!(sender.is(Role::Worker) && !sender.is(Role::Router));
        assert_eq!((Sender::new("").key(), Sender::new("").name(), Sender::new("x").is(Role::Worker)), ("", "", false));
        let peer = Identity::from_user_id(&user_id).unwrap();
        assert_eq!((peer.roles, peer.name.as_str(), &peer.key), (Roles::of(&[Role::Worker]), "w1", worker.public()));
        assert!(
            matches!(judge(&request("injector", "CURVE", &worker), &keys), Verdict::Refuse(r) if r.contains("not admitted here"))
        );
        assert!(
            matches!(judge(&request("worker", "CURVE", &stranger), &keys), Verdict::Refuse(r) if r.contains("not listed"))
        );
        assert!(
            matches!(judge(&request("worker", "NULL", &worker), &keys), Verdict::Refuse(r) if r.contains("not CURVE"))
        );
        assert!(Identity::from_user_id("worker").is_none());
        assert!(Identity::from_user_id("").is_none());
    }
}
