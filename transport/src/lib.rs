//! The only crate that knows ZeroMQ.
//!
//! - [`socket`]: typed PUSH/PULL sockets with the options every data socket gets (high-water
//!   marks, finite linger, shutdown-aware blocking sends) and the smart-batching probe.
//! - [`clock`]: the collector's time service and the offset sampling of the other nodes.
//! - [`driving`]: the receive loop every role shares, and the outbox over sockets.
//! - [`control`]: the router's control server (ROUTER) and its clients (REQ, with time-outs);
//!   `greeting` reads a server's security mechanism for a client without keys.
//! - [`security`] and [`context`]: CURVE on every socket, the keys, and who is admitted where.
//!
//! ZeroMQ sockets are not thread-safe: each socket here is owned by exactly one thread.

pub mod clock;
pub mod context;
pub mod control;
pub mod delivery;
pub mod driving;
mod greeting;
pub mod liveness;
mod monitor;
pub mod security;
pub mod socket;

pub use security::Server;
pub use socket::{advertise_host, advertised_endpoint, Context, Message, Pull, Push, SocketOptions, TransportError};
