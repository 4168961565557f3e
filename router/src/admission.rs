//! Admission: who may ask the router what. Every control request from a secure socket is
//! checked here against the roles its key is listed for, and a request about a worker or the
//! collector against the key that registered it; a joining worker's endpoint must be one the
//! router can connect to.

use cep_core::control::{Register, WorkerInfo, MAX_CONTROL_FRAME_BYTES};
use cep_core::frame::Frame;
use cep_core::identity::{Identity, Role, SHARED_WORKER_KEY};
use cep_core::rescale::Leave;
use cep_core::wire::FrameKind;

/// Whether `peer` may send `body`: its roles, and for frames a worker or the collector
/// sends about itself, whether it is that worker or that collector. Frames that do not
/// decode pass here and are refused where they are read.
pub fn authorize(peer: &Identity, body: &[u8], workers: &[WorkerInfo], collector_key: &str) -> Result<(), String> {
    let Ok(frame) = Frame::read(body, MAX_CONTROL_FRAME_BYTES) else { return Ok(()) };
    let kind = frame.kind();
    let needs = |role: Role| match peer.is(role) {
        true => Ok(()),
        false => Err(format!("{peer} may not send {kind:?}: its key is not listed under {}/", role.name())),
    };
    let worker_key = |index: u32| workers.get(index as usize).map(|worker| worker.key.as_str());
    let is_worker = |index: u32| match worker_key(index) {
        Some(key) if key == peer.key.as_str() => Ok(()),
        _ => Err(format!("{peer} is not worker {index}, which this {kind:?} names")),
    };
    match kind {
        FrameKind::Register => {
            let register = frame.body::<Register>().map_err(|error| format!("bad registration frame: {error}"))?;
            needs(register.role)?;
            // A worker's own key names it; only the workers' shared key takes any id.
            match register.role == Role::Worker && peer.name != SHARED_WORKER_KEY && peer.name != register.id {
                true => Err(format!(
                    "{peer} may register only as worker `{}`, not `{}` (a worker's own key names it; only the \
                     shared `{SHARED_WORKER_KEY}` key takes any id)",
                    peer.name, register.id
                )),
                false => Ok(()),
            }
        }
        FrameKind::Deploy | FrameKind::StatusRequest => needs(Role::Operator),
        FrameKind::Leave if peer.is(Role::Operator) => Ok(()),
        FrameKind::Leave => {
            needs(Role::Worker)?;
            let leave = frame.body::<Leave>().map_err(|error| format!("bad leave frame: {error}"))?;
            match workers.iter().find(|worker| worker.id == leave.worker) {
                Some(worker) if worker.key == peer.key.as_str() => Ok(()),
                _ => Err(format!("{peer} may ask only itself to leave, not `{}`", leave.worker)),
            }
        }
        kind if kind.from_a_worker() => {
            needs(Role::Worker)?;
            is_worker(frame.sender())
        }
        FrameKind::Saved | FrameKind::RunFinished => {
            needs(Role::Collector)?;
            match collector_key {
                "" => Ok(()),
                key if key == peer.key.as_str() => Ok(()),
                _ => Err(format!("{peer} is not the run's collector")),
            }
        }
        // Which streams it may speak for is the core's to check (the keys that registered them).
        FrameKind::InjectorHeartbeat => needs(Role::Injector),
        FrameKind::AwaitEnd if peer.is(Role::Worker) || peer.is(Role::Injector) => Ok(()),
        FrameKind::AwaitEnd => needs(Role::Injector),
        _ => Ok(()),
    }
}

/// A joining worker's advertised endpoint must be one the router can connect to
/// (`tcp://host:port`, `ipc://path`, `inproc://name`): a bad one is refused, not fatal.
pub fn check_endpoint(endpoint: &str) -> Result<(), String> {
    let bad =
        || format!("the advertised data endpoint `{endpoint}` is not tcp://HOST:PORT, ipc://PATH or inproc://NAME");
    match endpoint.split_once("://") {
        Some(("tcp", address)) => match address.rsplit_once(':') {
            Some((host, port)) if valid_host(host) && port.parse::<u16>().is_ok_and(|port| port > 0) => Ok(()),
            _ => Err(bad()),
        },
        Some(("ipc" | "inproc", name)) if !name.is_empty() => Ok(()),
        _ => Err(bad()),
    }
}

/// A host name, an IPv4 address, or an IPv6 address in brackets.
fn valid_host(host: &str) -> bool {
    match host.strip_prefix('[').and_then(|rest| rest.strip_suffix(']')) {
        Some(v6) => !v6.is_empty() && v6.chars().all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.'),
        None => {
            !host.is_empty()
                && host.len() <= 253
                && host.chars().all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_')
        }
    }
}
