//! Who this process is: a role (`router`, `worker`, `collector`, `injector`, `launcher`, or
//! `cep` for the tools) and an id within it (`worker-1`, `injector-0`). Under `cep run` every
//! process writes to the same terminal, so every log line names its process; every metric
//! carries the same two labels. Process-wide, because a log line from any thread needs it;
//! a thread may take its own identity instead ([`set_for_thread`]): under `cep run
//! --transport inproc` every role is a thread of one process.

use std::cell::RefCell;
use std::sync::{Arc, RwLock};

/// A process's role and id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// `router`, `worker`, `collector`, `injector`, `launcher` or `cep`.
    pub role: Arc<str>,
    /// The process's id within its role (`worker-1`, `injector-0`).
    pub id: Arc<str>,
}

impl Identity {
    /// The identity of role `role`, id `id`.
    pub fn new(role: &str, id: &str) -> Identity {
        Identity { role: role.into(), id: id.into() }
    }

    /// The name a text log line shows: the id when it already says the role (`router`,
    /// `worker-1`), else `role/id` (a worker named after its host: `worker/ip-10-0-1-12-811`).
    pub fn name(&self) -> String {
        if self.id.starts_with(&*self.role) {
            self.id.to_string()
        } else {
            format!("{}/{}", self.role, self.id)
        }
    }
}

static CURRENT: RwLock<Option<Identity>> = RwLock::new(None);

thread_local! {
    static THREAD: RefCell<Option<Identity>> = const { RefCell::new(None) };
}

/// Names this thread (and the log lines and ids it writes), whatever the process is named.
pub fn set_for_thread(role: &str, id: &str) {
    THREAD.with(|thread| *thread.borrow_mut() = Some(Identity::new(role, id)));
}

/// Names this process.
pub fn set(role: &str, id: &str) {
    *CURRENT.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(Identity::new(role, id));
}

/// Gives this process its id once it is known (an injector learns its number when it
/// registers); the role stays.
pub fn set_id(id: &str) {
    let named_thread = THREAD.with(|thread| {
        let mut thread = thread.borrow_mut();
        if let Some(identity) = thread.as_mut() {
            identity.id = id.into();
        }
        thread.is_some()
    });
    if !named_thread {
        let role = current().role;
        *CURRENT.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(Identity { role, id: id.into() });
    }
}

/// Who this process is (`cep`/`cep` until named).
pub fn current() -> Identity {
    if let Some(identity) = THREAD.with(|thread| thread.borrow().clone()) {
        return identity;
    }
    CURRENT
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clone()
        .unwrap_or_else(|| Identity::new("cep", "cep"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_say_the_role_once() {
        assert_eq!(Identity::new("router", "router").name(), "router");
        assert_eq!(Identity::new("worker", "worker-1").name(), "worker-1");
        assert_eq!(Identity::new("worker", "ip-10-0-1-12-811").name(), "worker/ip-10-0-1-12-811");
    }
}
