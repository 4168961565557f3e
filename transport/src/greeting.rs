//! Whether a server runs CURVE, read from its ZMTP 3 greeting (RFC 23) by a client that has no
//! keys, before that client makes its ZeroMQ connection.
//!
//! libzmq's own client, without CURVE, cannot be counted on to be refused exactly once: it
//! queues the rest of its greeting as the server's begins, and when the server's whole
//! greeting arrives in one read it finds the mechanisms differ and closes before its own
//! greeting has left. The server, which judges a handshake on the greeting it reads, then
//! counts nothing (or, on a busy machine, only some of the tries). Here the client waits for
//! the server's signature (a ZeroMQ server sends it as soon as it accepts), then sends its
//! whole greeting, and closes only once the server has closed (or a short wait is over): the
//! server reads the greeting and counts the refusal once. A server that closes on a NULL
//! greeting after its signature refuses clients without keys (libzmq closes as soon as it
//! reads a mechanism that differs, which may be before the rest of its own greeting leaves).

use std::io::{ErrorKind, Read, Write};
use std::time::{Duration, Instant};

/// A ZMTP 3 greeting's length: signature (10), version (2), mechanism (20), as-server (1),
/// filler (31).
const GREETING_BYTES: usize = 64;

/// A ZMTP signature's length: 0xFF, 8 bytes of padding, 0x7F.
const SIGNATURE_BYTES: usize = 10;

/// The most read after the greeting while waiting for the server to close (it sends nothing
/// more to a client whose mechanism differs).
const MAX_TRAILING_BYTES: usize = 4096;

/// This client's greeting: ZMTP 3.0, mechanism NULL, not a server.
fn null_greeting() -> [u8; GREETING_BYTES] {
    let mut greeting = [0u8; GREETING_BYTES];
    greeting[0] = 0xFF;
    // The padding's last byte: a ZMTP 1.0 peer reads it as an identity length of 0 (+1).
    greeting[8] = 0x01;
    greeting[9] = 0x7F;
    greeting[10] = 3;
    greeting[12..16].copy_from_slice(b"NULL");
    greeting
}

/// The security mechanism a greeting names (`NULL`, `PLAIN`, `CURVE`), or `None` when it is
/// not a ZMTP 3 greeting.
fn mechanism_of(greeting: &[u8; GREETING_BYTES]) -> Option<String> {
    if greeting[0] != 0xFF || greeting[9] != 0x7F || greeting[10] < 3 {
        return None;
    }
    let name = &greeting[12..32];
    let end = name.iter().position(|byte| *byte == 0).unwrap_or(name.len());
    std::str::from_utf8(&name[..end]).ok().map(str::to_string)
}

/// A stream to a server, its reads bounded by a time-out.
trait Stream: Read + Write {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> std::io::Result<()>;
    fn shutdown_write(&self) -> std::io::Result<()>;
}

impl Stream for std::net::TcpStream {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> std::io::Result<()> {
        std::net::TcpStream::set_read_timeout(self, timeout)
    }
    fn shutdown_write(&self) -> std::io::Result<()> {
        self.shutdown(std::net::Shutdown::Write)
    }
}

impl Stream for std::os::unix::net::UnixStream {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> std::io::Result<()> {
        std::os::unix::net::UnixStream::set_read_timeout(self, timeout)
    }
    fn shutdown_write(&self) -> std::io::Result<()> {
        self.shutdown(std::net::Shutdown::Write)
    }
}

/// A stream to `endpoint` (`tcp://host:port`, its IPv4 addresses first as libzmq's default
/// takes them, or `ipc://path`).
fn connect(endpoint: &str, timeout: Duration) -> Option<Box<dyn Stream>> {
    if let Some(host_port) = endpoint.strip_prefix("tcp://") {
        use std::net::ToSocketAddrs;
        let mut addresses: Vec<_> = host_port.to_socket_addrs().ok()?.collect();
        addresses.sort_by_key(|address| !address.is_ipv4());
        let stream =
            addresses.iter().find_map(|address| std::net::TcpStream::connect_timeout(address, timeout).ok())?;
        return Some(Box::new(stream));
    }
    let path = endpoint.strip_prefix("ipc://")?;
    Some(Box::new(std::os::unix::net::UnixStream::connect(path).ok()?))
}

/// How a read into a greeting ended.
enum ReadEnd {
    /// The buffer is full.
    Full,
    /// The server closed (or reset) the connection.
    Closed,
    /// Nothing more by the deadline, or an error that says nothing of the server.
    Silent,
}

/// Reads into all of `buffer` by `deadline`.
fn read_full(stream: &mut dyn Stream, buffer: &mut [u8], deadline: Instant) -> ReadEnd {
    let mut read = 0;
    while read < buffer.len() {
        let Some(left) = deadline.checked_duration_since(Instant::now()).filter(|left| !left.is_zero()) else {
            return ReadEnd::Silent;
        };
        if stream.set_read_timeout(Some(left)).is_err() {
            return ReadEnd::Silent;
        }
        match stream.read(&mut buffer[read..]) {
            Ok(0) => return ReadEnd::Closed,
            Ok(count) => read += count,
            Err(error) if error.kind() == ErrorKind::Interrupted => {}
            Err(error) if matches!(error.kind(), ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted) => {
                return ReadEnd::Closed
            }
            Err(_) => return ReadEnd::Silent,
        }
    }
    ReadEnd::Full
}

/// What a server's greeting says to a client without keys.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// It runs NULL: the client is admitted.
    Open,
    /// It refuses NULL: it names another mechanism (CURVE), or it closed the connection on
    /// this client's greeting after its signature.
    Refused,
}

/// What the server at `endpoint` answers to a NULL greeting, within `timeout`; `None` when
/// nothing accepts a connection there, or what answers is not a ZMTP 3 server that says
/// (the ZeroMQ connection then says what it says).
pub(crate) fn server_answer(endpoint: &str, timeout: Duration) -> Option<Answer> {
    let deadline = Instant::now() + timeout;
    let mut stream = connect(endpoint, timeout)?;
    let mut greeting = [0u8; GREETING_BYTES];
    // Its signature first: a server that sends none (a proxy whose target is not up, a
    // stopped process whose socket still accepts) is no ZeroMQ server that judged anything.
    if !matches!(read_full(stream.as_mut(), &mut greeting[..SIGNATURE_BYTES], deadline), ReadEnd::Full)
        || greeting[0] != 0xFF
        || greeting[9] != 0x7F
    {
        return None;
    }
    stream.write_all(&null_greeting()).ok()?;
    match read_full(stream.as_mut(), &mut greeting[SIGNATURE_BYTES..], deadline) {
        ReadEnd::Full => {}
        ReadEnd::Closed => return Some(Answer::Refused),
        ReadEnd::Silent => return None,
    }
    if mechanism_of(&greeting)? == "NULL" {
        return Some(Answer::Open);
    }
    // The server reads this greeting, finds the mechanisms differ and closes: wait for that,
    // so that closing here cannot reset the connection before it has read it.
    let _ = stream.shutdown_write();
    let mut trailing = [0u8; 256];
    let mut total = 0;
    while total < MAX_TRAILING_BYTES {
        match read_full(stream.as_mut(), &mut trailing, deadline) {
            ReadEnd::Full => total += trailing.len(),
            ReadEnd::Closed | ReadEnd::Silent => break,
        }
    }
    Some(Answer::Refused)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_greeting_names_its_mechanism_and_anything_else_is_not_one() {
        let mut greeting = null_greeting();
        assert_eq!(mechanism_of(&greeting).as_deref(), Some("NULL"));
        greeting[12..32].copy_from_slice(b"CURVE\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0");
        assert_eq!(mechanism_of(&greeting).as_deref(), Some("CURVE"));
        greeting[10] = 2;
        assert_eq!(mechanism_of(&greeting), None, "ZMTP 2 has no mechanism");
        assert_eq!(mechanism_of(&[b'G'; GREETING_BYTES]), None, "an HTTP server, say");
    }

    #[test]
    fn a_server_that_accepts_but_says_nothing_is_no_answer() {
        // Never accepted: the kernel completes the connection into the backlog, and nothing
        // is ever sent on it.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = format!("tcp://{}", listener.local_addr().unwrap());
        assert_eq!(server_answer(&endpoint, Duration::from_millis(300)), None);
        // Accepted and closed at once, as a proxy whose target is not up.
        let closing = std::thread::spawn(move || drop(listener.accept()));
        assert_eq!(server_answer(&endpoint, Duration::from_secs(5)), None);
        closing.join().unwrap();
    }

    #[test]
    fn nothing_listening_is_no_answer() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = format!("tcp://{}", listener.local_addr().unwrap());
        drop(listener);
        assert_eq!(server_answer(&endpoint, Duration::from_secs(1)), None);
        assert_eq!(server_answer("inproc://nowhere", Duration::from_secs(1)), None);
    }
}
