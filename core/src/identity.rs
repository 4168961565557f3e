//! Who takes part in a cluster: the one [`Role`] enum (what a process registers as, and the
//! folder its public key is listed in), sets of roles, public keys, and the identity of an
//! authenticated sender ([`Identity`], [`Sender`]) as the transport's authentication handler
//! writes it on every message. Plain data: the cores check who sent a frame without knowing
//! any socket library, so they, the simulation and the fuzz targets build without ZeroMQ.

use serde::{Deserialize, Serialize};

/// A key as ZeroMQ writes it: 40 Z85 characters for 32 bytes.
pub const Z85_KEY_LEN: usize = 40;

/// The name of the workers' shared key (`worker/worker.pub`, what `cep keys init` writes when no
/// worker is named): a worker holding it may take any id. Any other worker key is its
/// worker's own, and its name is the one id it may register.
pub const SHARED_WORKER_KEY: &str = "worker";

/// The router's id wherever a sender or a source is a number: in a frame's header, and as the
/// source of its frames in the collector's envelopes. Workers are `0..` by index, so it is the
/// one number no worker can have.
pub const ROUTER_ID: u32 = u32::MAX;

/// The roles of a cluster. On the wire (a [`crate::control::Register`]) a role is one byte:
/// its discriminant, so the three roles that register keep the numbers they always had.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(into = "u8", try_from = "u8")]
pub enum Role {
    /// Runs the rules on the symbols the router sends it.
    Worker = 0,
    /// Receives every output and report, and writes the run's results.
    Collector = 1,
    /// Sends events, on one or more streams.
    Injector = 2,
    /// Routes every event to its worker; its key is the one every other process is given.
    Router = 3,
    /// Deploys rules, changes membership, asks the cluster's status.
    Operator = 4,
}

impl Role {
    /// Every role, in the order the public keys' folders are read.
    pub const ALL: [Role; 5] = [Role::Router, Role::Worker, Role::Collector, Role::Injector, Role::Operator];

    /// Its name: the folder of the public keys directory, and the word in messages and flags.
    pub fn name(self) -> &'static str {
        match self {
            Role::Router => "router",
            Role::Worker => "worker",
            Role::Collector => "collector",
            Role::Injector => "injector",
            Role::Operator => "operator",
        }
    }

    /// The role of this name.
    pub fn from_name(name: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|role| role.name() == name)
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl From<Role> for u8 {
    fn from(role: Role) -> u8 {
        role as u8
    }
}

impl TryFrom<u8> for Role {
    type Error = String;
    fn try_from(byte: u8) -> Result<Self, Self::Error> {
        Role::ALL.into_iter().find(|role| *role as u8 == byte).ok_or_else(|| format!("unknown role {byte}"))
    }
}

/// A set of roles (a key listed in several folders has several).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Roles(u8);

impl Roles {
    /// These roles.
    pub fn of(roles: &[Role]) -> Roles {
        Roles(roles.iter().fold(0, |bits, role| bits | role.bit()))
    }

    /// Whether `role` is one of them.
    pub fn has(self, role: Role) -> bool {
        self.0 & role.bit() != 0
    }

    /// Whether any role is in both sets.
    pub fn meets(self, other: Roles) -> bool {
        self.0 & other.0 != 0
    }

    /// Adds `role`.
    pub fn insert(&mut self, role: Role) {
        self.0 |= role.bit();
    }

    /// `worker,injector`: how a ZAP domain and a peer's identity write them.
    pub fn joined(self) -> String {
        Role::ALL.into_iter().filter(|role| self.has(*role)).map(Role::name).collect::<Vec<_>>().join(",")
    }

    /// The roles named in `worker,injector` (unknown names are no role).
    pub fn parse(text: &str) -> Roles {
        let mut roles = Roles::default();
        for role in text.split(',').filter_map(Role::from_name) {
            roles.insert(role);
        }
        roles
    }
}

impl std::fmt::Display for Roles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            0 => f.write_str("no role"),
            _ => f.write_str(&self.joined()),
        }
    }
}

/// A public key, as the Z85 text ZeroMQ takes.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PublicKey(String);

impl PublicKey {
    /// A key from its Z85 text: 40 characters that decode to 32 bytes.
    pub fn parse(text: &str) -> Result<PublicKey, String> {
        decode_key(text).map(|_| PublicKey(text.to_string()))
    }

    /// The Z85 text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PublicKey({})", self.0)
    }
}

impl std::fmt::Display for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The 32 bytes of a Z85 key (ZeroMQ RFC 32), or why the text is not one.
pub fn decode_key(text: &str) -> Result<[u8; 32], String> {
    if text.len() != Z85_KEY_LEN {
        return Err(format!("a key is {Z85_KEY_LEN} Z85 characters, this one has {}", text.chars().count()));
    }
    z85_decode(text.as_bytes()).ok_or_else(|| "the key is not valid Z85".to_string())
}

/// Z85's alphabet, in digit order.
const Z85_DIGITS: &[u8; 85] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

/// Decodes 40 Z85 characters into 32 bytes: five characters per four bytes, big-endian, base 85.
/// `None` for a character outside the alphabet or a group above 2^32 - 1.
fn z85_decode(text: &[u8]) -> Option<[u8; 32]> {
    let mut bytes = [0u8; 32];
    for (group, out) in text.chunks_exact(5).zip(bytes.chunks_exact_mut(4)) {
        let mut value: u64 = 0;
        for &c in group {
            let digit = Z85_DIGITS.iter().position(|&d| d == c)?;
            value = value * 85 + digit as u64;
        }
        out.copy_from_slice(&u32::try_from(value).ok()?.to_be_bytes());
    }
    Some(bytes)
}

/// The peer that sent a message, as the authentication handler admitted it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The roles its key is listed for.
    pub roles: Roles,
    /// Its key file's name (for messages).
    pub name: String,
    /// Its public key.
    pub key: PublicKey,
}

impl Identity {
    /// How the authentication handler writes it as ZeroMQ's `User-Id`: `roles name key`.
    pub fn user_id(roles: Roles, name: &str, key: &PublicKey) -> String {
        format!("{} {name} {key}", roles.joined())
    }

    /// The identity a `User-Id` names, if it is one the handler wrote.
    pub fn from_user_id(text: &str) -> Option<Identity> {
        let (roles, rest) = text.split_once(' ')?;
        let split = rest.len().checked_sub(Z85_KEY_LEN)?;
        let (name, key) = (rest.get(..split)?.strip_suffix(' ')?, rest.get(split..)?);
        Some(Identity { roles: Roles::parse(roles), name: name.to_string(), key: PublicKey::parse(key).ok()? })
    }

    /// Whether it is listed for `role`.
    pub fn is(&self, role: Role) -> bool {
        self.roles.has(role)
    }
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} `{}`", self.roles, self.name)
    }
}

/// The sender of a message on a secure socket, as its `User-Id` names it, read without a copy:
/// what the hot paths check (roles, key) per frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sender<'a>(&'a str);

impl<'a> Sender<'a> {
    /// A `User-Id` as the handler wrote it (`roles name key`; empty if there was none).
    pub fn new(user_id: &'a str) -> Sender<'a> {
        Sender(user_id)
    }

    /// Its public key (Z85), empty if the identity is not one the handler wrote.
    pub fn key(&self) -> &'a str {
        self.0.len().checked_sub(Z85_KEY_LEN).and_then(|start| self.0.get(start..)).unwrap_or_default()
    }

    /// Whether its key is listed for `role`.
    pub fn is(&self, role: Role) -> bool {
        self.0.split_once(' ').is_some_and(|(roles, _)| roles.split(',').any(|name| name == role.name()))
    }

    /// Its key file's name, for messages.
    pub fn name(&self) -> &'a str {
        let Some((_, rest)) = self.0.split_once(' ') else { return "" };
        rest.len().checked_sub(Z85_KEY_LEN + 1).and_then(|end| rest.get(..end)).unwrap_or_default()
    }
}

/// The cause of a connection the authentication handler refused (a key not listed).
pub const UNAUTHENTICATED: &str = "unauthenticated";
/// The cause of a connection whose CURVE handshake failed before any key could be judged.
pub const HANDSHAKE_FAILED: &str = "handshake_failed";
/// The cause of a connection dropped because this process's own authentication handler answered
/// badly: counted, but not as a client's failure.
pub const ZAP_FAILED: &str = "zap_failed";

/// Whether a rejection cause is a refused connection (`<cause>_<roles the socket admits>`).
pub fn is_refusal(cause: &str) -> bool {
    [UNAUTHENTICATED, HANDSHAKE_FAILED, ZAP_FAILED]
        .iter()
        .any(|prefix| cause.strip_prefix(prefix).is_some_and(|rest| rest.starts_with('_')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn z85_decodes_the_rfc_example_and_refuses_what_is_not_z85() {
        // ZeroMQ RFC 32's test vector: "HelloWorld" is these 8 bytes.
        let mut text = *b"HelloWorld000000000000000000000000000000";
        assert_eq!(&z85_decode(&text).unwrap()[..8], &[0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B]);
        text[0] = b'"';
        assert_eq!(z85_decode(&text), None, "not in the alphabet");
        assert!(decode_key("#####00000000000000000000000000000000000").is_err(), "a group above 2^32 - 1");
        assert!(decode_key("short").is_err());
    }

    #[test]
    fn a_role_keeps_its_wire_byte_and_its_name() {
        for role in Role::ALL {
            assert_eq!(Role::try_from(u8::from(role)), Ok(role));
            assert_eq!(Role::from_name(role.name()), Some(role));
        }
        assert_eq!((Role::Worker as u8, Role::Collector as u8, Role::Injector as u8), (0, 1, 2));
        assert!(Role::try_from(5).is_err());
    }

    #[test]
    fn an_identity_reads_back_from_its_user_id() {
        let key = PublicKey::parse("rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7").unwrap();
        let roles = Roles::of(&[Role::Worker, Role::Injector]);
        let user_id = Identity::user_id(roles, "w 1", &key);
        let identity = Identity::from_user_id(&user_id).unwrap();
        assert_eq!((identity.roles, identity.name.as_str(), &identity.key), (roles, "w 1", &key));
        let sender = Sender::new(&user_id);
        assert!(sender.is(Role::Injector) && !sender.is(Role::Router));
        assert_eq!((sender.name(), sender.key()), ("w 1", key.as_str()));
        assert!(is_refusal("unauthenticated_router") && !is_refusal("unauthenticated"));
    }
}
