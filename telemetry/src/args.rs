//! The observability flags every role takes, and the way every role's typed configuration
//! becomes process arguments again ([`Flags`]).

use cep_core::duration::parse_duration;
use clap::{Args, FromArgMatches, ValueEnum};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How log lines are written to stderr.
#[derive(ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// One human line per event: time, level, the process's name, message, fields.
    #[default]
    Text,
    /// One JSON object per line (timestamp, level, role, id, target, message, fields), for
    /// log shippers.
    Json,
}

impl LogFormat {
    /// The flag value, as `--log-format` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

/// Prometheus metrics of one process (docs/METRICS.md lists them). `Default` is the flags'
/// defaults: no metrics.
#[derive(Args, Clone, Debug, Default, PartialEq)]
pub struct MetricsArgs {
    /// Serve Prometheus metrics over HTTP at this address, at `/metrics` (e.g. `0.0.0.0:9100`;
    /// port 0 picks a free port). Off when not given.
    #[arg(long, env = "CEP_METRICS_LISTEN", value_name = "HOST:PORT")]
    pub metrics_listen: Option<String>,
    /// When the run is over: keep serving metrics until one more scrape has read the final
    /// values, waiting at most this long (0s: exit at once).
    #[arg(long, env = "CEP_METRICS_LINGER", default_value = "0s", value_parser = parse_duration)]
    pub metrics_linger: Duration,
    /// Write the address actually serving metrics (`HOST:PORT`) to this file once listening,
    /// so that a free port (0) can be used and found; the launcher does.
    #[arg(long, env = "CEP_METRICS_ANNOUNCE", value_name = "FILE")]
    pub metrics_announce: Option<PathBuf>,
}

impl MetricsArgs {
    /// The flags that give this back.
    pub fn to_args(&self) -> Vec<String> {
        Flags::new()
            .some("metrics-listen", self.metrics_listen.as_ref())
            .duration("metrics-linger", self.metrics_linger)
            .some_path("metrics-announce", self.metrics_announce.as_deref())
            .into_args()
    }
}

/// Process arguments written from a typed configuration: one `--name=value` per setting (so a
/// value may start with `-`), which the same flags parse back to the same value. A setting
/// without a value (`None`, a switch that is off) gives no argument.
#[derive(Debug, Default)]
#[must_use]
pub struct Flags(Vec<String>);

impl Flags {
    /// No argument yet.
    pub fn new() -> Flags {
        Flags::default()
    }

    /// `--name=value`, the value as `Display` writes it (numbers, `f64` included, parse back
    /// exactly).
    pub fn value(mut self, name: &str, value: impl std::fmt::Display) -> Flags {
        self.0.push(format!("--{name}={value}"));
        self
    }

    /// `--name=value` when there is a value.
    pub fn some(self, name: &str, value: Option<impl std::fmt::Display>) -> Flags {
        match value {
            Some(value) => self.value(name, value),
            None => self,
        }
    }

    /// A duration, exactly, in the largest of s, ms, us and ns that holds it whole (`30s`,
    /// `1500ms`).
    pub fn duration(self, name: &str, duration: Duration) -> Flags {
        self.value(name, duration_text(duration))
    }

    /// A duration when there is one.
    pub fn some_duration(self, name: &str, duration: Option<Duration>) -> Flags {
        self.some(name, duration.map(duration_text))
    }

    /// A path (as text: a path that is not UTF-8 loses its odd bytes).
    pub fn path(self, name: &str, path: &Path) -> Flags {
        self.value(name, path.display())
    }

    /// A path when there is one.
    pub fn some_path(self, name: &str, path: Option<&Path>) -> Flags {
        self.some(name, path.map(Path::display))
    }

    /// One of a [`ValueEnum`]'s values, by the name the flag takes.
    pub fn choice(self, name: &str, value: &impl ValueEnum) -> Flags {
        let choice = value.to_possible_value().expect("every value of the enum is a flag value");
        self.value(name, choice.get_name())
    }

    /// `--name` when on.
    pub fn switch(mut self, name: &str, on: bool) -> Flags {
        if on {
            self.0.push(format!("--{name}"));
        }
        self
    }

    /// Arguments the caller wrote itself (a flag of another struct's).
    pub fn extend(mut self, args: impl IntoIterator<Item = String>) -> Flags {
        self.0.extend(args);
        self
    }

    /// The arguments, in the order they were added.
    pub fn into_args(self) -> Vec<String> {
        self.0
    }
}

/// A duration as `parse_duration` reads it back, exactly.
fn duration_text(duration: Duration) -> String {
    let nanos = duration.as_nanos();
    match nanos {
        0 => "0s".into(),
        _ if nanos % 1_000_000_000 == 0 => format!("{}s", nanos / 1_000_000_000),
        _ if nanos % 1_000_000 == 0 => format!("{}ms", nanos / 1_000_000),
        _ if nanos % 1_000 == 0 => format!("{}us", nanos / 1_000),
        _ => format!("{nanos}ns"),
    }
}

/// Parses `args` (flags only, no program name) as `T`'s flags, ignoring every environment
/// variable: what a process given exactly these flags in a clean environment runs with. For
/// tests of a configuration's `Default` (no flags) and of its `to_args` (round trip).
pub fn parse_flags<T: Args + FromArgMatches>(args: &[String]) -> Result<T, clap::Error> {
    let command =
        T::augment_args(clap::Command::new("flags").no_binary_name(true)).mut_args(|arg| arg.env(None::<&'static str>));
    T::from_arg_matches(&command.try_get_matches_from(args)?)
}

/// A role configuration's check that `--name` is at least 1 (a count, a size).
pub fn at_least_one(name: &str, value: usize) -> Result<(), String> {
    if value == 0 {
        return Err(format!("--{name} must be at least 1"));
    }
    Ok(())
}

/// A role configuration's check of `--max-frame-bytes`: at least
/// [`cep_core::wire::MIN_MAX_FRAME_BYTES`], so that every batch a sender makes (capped at
/// [`cep_core::wire::MAX_BATCH_BYTES`]) gets through.
pub fn max_frame_bytes(value: usize) -> Result<(), String> {
    use cep_core::wire::{MAX_BATCH_BYTES, MIN_MAX_FRAME_BYTES};
    if value < MIN_MAX_FRAME_BYTES {
        return Err(format!(
            "--max-frame-bytes must be at least {MIN_MAX_FRAME_BYTES} (1 MiB): senders batch up to {MAX_BATCH_BYTES} bytes"
        ));
    }
    Ok(())
}

/// A role configuration's check of an endpoint flag (`--listen`, `--control`, `--router`...):
/// `tcp://HOST:PORT` (a port number, or `*` for one the kernel picks), `ipc://PATH` or
/// `inproc://NAME`, so that a mistake is one line before anything starts, not a socket's
/// error once the processes run.
pub fn endpoint(flag: &str, endpoint: &str) -> Result<(), String> {
    let refuse = |why: &str| Err(format!("--{flag} `{endpoint}`: {why}"));
    if let Some(address) = endpoint.strip_prefix("tcp://") {
        let Some((host, port)) = address.rsplit_once(':') else {
            return refuse("a TCP endpoint needs a port: tcp://HOST:PORT");
        };
        if host.is_empty() {
            return refuse("a TCP endpoint needs a host (`*` or 0.0.0.0 for every interface)");
        }
        // Dotted digits are an IPv4 address, which must be one (999.1.1.1 is not).
        if host.chars().all(|c| c.is_ascii_digit() || c == '.') && host.parse::<std::net::Ipv4Addr>().is_err() {
            return refuse(&format!("`{host}` is not an IPv4 address"));
        }
        if port != "*" && port.parse::<u16>().is_err() {
            return refuse(&format!("`{port}` is not a port (0-65535, or `*` for any free one)"));
        }
        return Ok(());
    }
    match ["ipc://", "inproc://"].iter().find_map(|scheme| endpoint.strip_prefix(scheme)) {
        Some("") => refuse("the endpoint names no path"),
        Some(_) => Ok(()),
        None => refuse("not an endpoint: use tcp://HOST:PORT, ipc://PATH or inproc://NAME"),
    }
}

/// A role configuration's check of `--hwm`: 0 (no limit) or more.
pub fn high_water_mark(hwm: i32) -> Result<(), String> {
    if hwm < 0 {
        return Err(format!("--hwm must be 0 (no limit) or more, got {hwm}"));
    }
    Ok(())
}

/// A role configuration's check of `--failure-timeout`: long enough that a peer that is
/// merely busy is never taken for dead.
pub fn failure_timeout(timeout: std::time::Duration) -> Result<(), String> {
    if timeout < MIN_FAILURE_TIMEOUT {
        return Err(format!("--failure-timeout must be at least {MIN_FAILURE_TIMEOUT:?}, got {timeout:?}"));
    }
    Ok(())
}

/// The shortest failure time-out: a peer is heard from every quarter of it, and the router
/// looks at its heartbeats at its own cadence (every 50 ms); below this a healthy, idle peer
/// could be taken for dead.
pub const MIN_FAILURE_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(200);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_flag_takes_tcp_ipc_and_inproc_and_says_what_is_wrong_with_anything_else() {
        for good in [
            "tcp://127.0.0.1:5556",
            "tcp://0.0.0.0:*",
            "tcp://router:5555",
            "tcp://[::1]:7",
            "ipc:///tmp/c",
            "inproc://x",
        ] {
            assert_eq!(endpoint("control", good), Ok(()), "{good}");
        }
        let refused = |bad: &str| endpoint("control", bad).unwrap_err();
        assert_eq!(
            refused("foo://bar"),
            "--control `foo://bar`: not an endpoint: use tcp://HOST:PORT, ipc://PATH or inproc://NAME"
        );
        assert_eq!(refused("tcp://999.1.1.1:1"), "--control `tcp://999.1.1.1:1`: `999.1.1.1` is not an IPv4 address");
        assert_eq!(
            refused("tcp://127.0.0.1"),
            "--control `tcp://127.0.0.1`: a TCP endpoint needs a port: tcp://HOST:PORT"
        );
        assert!(refused("tcp://127.0.0.1:70000").contains("`70000` is not a port"));
        assert!(refused("tcp://:5556").contains("needs a host"));
        assert_eq!(refused("ipc://"), "--control `ipc://`: the endpoint names no path");
        assert!(refused("127.0.0.1:5556").contains("not an endpoint"));
    }

    #[test]
    fn default_is_what_no_flags_give() {
        assert_eq!(parse_flags::<MetricsArgs>(&[]).unwrap(), MetricsArgs::default());
    }

    #[test]
    fn to_args_parses_back() {
        let metrics = MetricsArgs {
            metrics_listen: Some("127.0.0.1:9100".into()),
            metrics_linger: Duration::from_millis(1500),
            metrics_announce: Some("/tmp/router.metrics".into()),
        };
        assert_eq!(parse_flags::<MetricsArgs>(&metrics.to_args()).unwrap(), metrics);
        assert!(MetricsArgs::default().to_args().iter().all(|arg| !arg.starts_with("--metrics-listen")));
    }

    #[test]
    fn durations_are_written_exactly() {
        for (duration, text) in [
            (Duration::ZERO, "0s"),
            (Duration::from_secs(60), "60s"),
            (Duration::from_millis(1500), "1500ms"),
            (Duration::from_micros(7), "7us"),
            (Duration::new(3, 1), "3000000001ns"),
        ] {
            assert_eq!(duration_text(duration), text);
            assert_eq!(parse_duration(text).unwrap(), duration);
        }
    }
}
