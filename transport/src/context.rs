//! The ZeroMQ context every socket of a process is made in, open or secure ([`crate::security`]).

use crate::security::{Credentials, KeyError, PublicKey, Role, Roles, Server, Zap};
use crate::socket::{socket_err, TransportError};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A process's sockets' context: open (the default) or secure, where every socket runs CURVE
/// and a ZAP handler checks every connection. Clones share it.
#[derive(Clone, Default)]
pub struct Context {
    zmq: zmq::Context,
    secure: Option<Arc<Secure>>,
}

struct Secure {
    credentials: Credentials,
    zap: Zap,
}

impl Context {
    /// An open context: no encryption, no authentication.
    pub fn new() -> Context {
        Context::default()
    }

    /// A secure context: the ZAP handler is running before any socket is made.
    pub fn secure(credentials: Credentials) -> Result<Context, KeyError> {
        let zmq = zmq::Context::new();
        let zap = Zap::start(&zmq, credentials.keys_dir.clone()).map_err(|error| KeyError::Invalid {
            path: credentials.keys_dir.display().to_string(),
            reason: format!("cannot start the authentication handler: {error}"),
        })?;
        Ok(Context { zmq, secure: Some(Arc::new(Secure { credentials, zap })) })
    }

    /// Whether sockets made here run CURVE.
    pub fn is_secure(&self) -> bool {
        self.secure.is_some()
    }

    /// This process's public key, when secure: what it tells the router its peers must expect.
    pub fn public_key(&self) -> Option<&PublicKey> {
        self.secure.as_ref().map(|secure| secure.credentials.own.public())
    }

    /// Connections refused so far, by cause (`unauthenticated_<roles the socket admits>`; empty
    /// when open).
    pub fn refusals(&self) -> BTreeMap<String, u64> {
        self.secure.as_ref().map(|secure| secure.zap.refusals.by_socket()).unwrap_or_default()
    }

    /// Bound sockets whose handshakes are watched now (a closed one is let go; 0 when open).
    pub fn handshake_watches(&self) -> usize {
        self.secure.as_ref().map_or(0, |secure| secure.zap.watching.load(std::sync::atomic::Ordering::Relaxed))
    }

    pub(crate) fn zmq(&self) -> &zmq::Context {
        &self.zmq
    }

    /// A new socket of `kind`; on a secure context, a CURVE server admitting `admits` when
    /// `role` says it binds, a client of `role`'s server when it connects.
    pub(crate) fn socket(&self, kind: zmq::SocketType, role: SocketRole<'_>) -> Result<Socket, TransportError> {
        let socket = self.zmq.socket(kind).map_err(socket_err("create socket"))?;
        let Some(secure) = &self.secure else { return Ok(Socket { socket, _security: None }) };
        let own = &secure.credentials.own;
        match role {
            SocketRole::Binds(admits) => {
                let domain = Roles::of(admits).joined();
                socket.set_curve_server(true).map_err(socket_err("set CURVE server"))?;
                socket.set_curve_secretkey(own.secret().as_bytes()).map_err(socket_err("set CURVE secret key"))?;
                socket.set_zap_domain(&domain).map_err(socket_err("set ZAP domain"))?;
                secure.zap.watch_handshakes(&self.zmq, &socket, &domain)?;
            }
            SocketRole::Connects { server, endpoint } => {
                let key = match server {
                    Server::Router => secure.credentials.router.as_str(),
                    Server::Key("") => {
                        return Err(TransportError::NoPeerKey { peer: endpoint.to_string() });
                    }
                    Server::Key(key) => key,
                };
                PublicKey::parse(key)
                    .map_err(|reason| TransportError::BadPeerKey { peer: endpoint.to_string(), reason })?;
                socket.set_curve_serverkey(key.as_bytes()).map_err(socket_err("set CURVE server key"))?;
                socket
                    .set_curve_publickey(own.public().as_str().as_bytes())
                    .map_err(socket_err("set CURVE public key"))?;
                socket.set_curve_secretkey(own.secret().as_bytes()).map_err(socket_err("set CURVE secret key"))?;
            }
        }
        Ok(Socket { socket, _security: Some(secure.clone()) })
    }
}

/// A socket and, on a secure context, what keeps the context's ZAP handler running: libzmq
/// (4.3) lets a CURVE server admit anyone once no handler answers, so the handler lives as long
/// as the last socket does (the socket is dropped first).
pub(crate) struct Socket {
    socket: zmq::Socket,
    _security: Option<Arc<Secure>>,
}

impl std::ops::Deref for Socket {
    type Target = zmq::Socket;

    fn deref(&self) -> &zmq::Socket {
        &self.socket
    }
}

/// What a socket does, for its security settings.
#[derive(Clone, Copy, Debug)]
pub(crate) enum SocketRole<'a> {
    /// It binds and admits these roles.
    Binds(&'a [Role]),
    /// It connects to `endpoint`, served by `server`.
    Connects { server: Server<'a>, endpoint: &'a str },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::{identity_of, write_public, KeyPair};
    use crate::{Pull, Push, SocketOptions};
    use std::path::Path;
    use std::sync::atomic::AtomicBool;
    use std::time::{Duration, Instant};

    fn credentials(dir: &Path, pair: &KeyPair, router: &KeyPair) -> Credentials {
        Credentials { own: pair.clone(), keys_dir: dir.to_path_buf(), router: router.public().clone() }
    }

    #[test]
    fn a_listed_key_is_admitted_and_named_an_unlisted_one_is_refused_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let (router, injector, stranger) =
            (KeyPair::generate().unwrap(), KeyPair::generate().unwrap(), KeyPair::generate().unwrap());
        write_public(router.public(), &dir.path().join("router/router.pub")).unwrap();
        write_public(injector.public(), &dir.path().join("injector/i1.pub")).unwrap();
        let server = Context::secure(credentials(dir.path(), &router, &router)).unwrap();
        let options = SocketOptions { failure_timeout: None, ..SocketOptions::default() };
        let pull = Pull::bind(&server, "tcp://127.0.0.1:*", &options, &[Role::Injector]).unwrap();

        let stranger_context = Context::secure(credentials(dir.path(), &stranger, &router)).unwrap();
        let forger = Push::connect(&stranger_context, pull.endpoint(), Server::Router, &options).unwrap();
        assert!(forger.try_send(b"forged").unwrap(), "queued until the handshake");
        let deadline = Instant::now() + Duration::from_secs(10);
        while server.refusals().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(server.refusals().get("unauthenticated_injector"), Some(&1));
        // A client without CURVE, and one that does not know the server's key, fail the
        // handshake before any key is judged: counted too.
        let open = Context::new();
        let plain = Push::connect(&open, pull.endpoint(), Server::Router, &options).unwrap();
        assert!(plain.try_send(b"plain").unwrap());
        let wrong_server = KeyPair::generate().unwrap();
        let misinformed_context = Context::secure(credentials(dir.path(), &injector, &wrong_server)).unwrap();
        let misinformed = Push::connect(&misinformed_context, pull.endpoint(), Server::Router, &options).unwrap();
        assert!(misinformed.try_send(b"misinformed").unwrap());
        while server.refusals().get("handshake_failed_injector").copied().unwrap_or(0) < 2 && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(server.refusals().get("handshake_failed_injector") >= Some(&2), "{:?}", server.refusals());
        assert_eq!(server.refusals().get("unauthenticated_injector"), Some(&1), "judged once");

        let client = Context::secure(credentials(dir.path(), &injector, &router)).unwrap();
        let push = Push::connect(&client, pull.endpoint(), Server::Router, &options).unwrap();
        push.send(b"ticks", &AtomicBool::new(false)).unwrap();
        let mut message = zmq::Message::new();
        assert!(pull.recv(&mut message, Duration::from_secs(10)).unwrap());
        assert_eq!(&message[..], b"ticks", "neither the stranger's nor the plain frame got in");
        let peer = identity_of(&mut message).unwrap();
        assert_eq!((peer.name.as_str(), &peer.key), ("i1", injector.public()));
        assert!(peer.is(Role::Injector) && !peer.is(Role::Worker));
        assert!(!pull.recv(&mut message, Duration::from_millis(300)).unwrap());
        for refused in [&plain, &forger, &misinformed] {
            refused.shorten_linger(Duration::ZERO);
        }
    }

    #[test]
    fn a_closed_sockets_handshake_monitor_is_let_go() {
        let dir = tempfile::tempdir().unwrap();
        let router = KeyPair::generate().unwrap();
        let context = Context::secure(credentials(dir.path(), &router, &router)).unwrap();
        let options = SocketOptions { failure_timeout: None, ..SocketOptions::default() };
        let wait_for = |count: usize| {
            let deadline = Instant::now() + Duration::from_secs(10);
            while context.handshake_watches() != count && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            context.handshake_watches()
        };
        let pulls: Vec<Pull> =
            (0..3).map(|_| Pull::bind(&context, "tcp://127.0.0.1:*", &options, &[Role::Injector]).unwrap()).collect();
        assert_eq!(wait_for(3), 3);
        drop(pulls);
        assert_eq!(wait_for(0), 0, "every monitor let go once its socket closed");
    }

    #[test]
    fn a_secure_client_must_be_told_its_servers_key() {
        let dir = tempfile::tempdir().unwrap();
        let router = KeyPair::generate().unwrap();
        let context = Context::secure(credentials(dir.path(), &router, &router)).unwrap();
        let error =
            Push::connect(&context, "tcp://127.0.0.1:1", Server::Key(""), &SocketOptions::default()).err().unwrap();
        assert!(error.to_string().contains("is the router running without --key"), "{error}");
        let error = Push::connect(&context, "tcp://127.0.0.1:1", Server::Key("short"), &SocketOptions::default())
            .err()
            .unwrap();
        assert!(error.to_string().contains("a key is 40 Z85 characters"), "{error}");
    }
}
