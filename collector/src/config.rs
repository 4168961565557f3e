//! The collector's flags.

use crate::csv::CsvMode;
use cep_core::duration::parse_duration;
use cep_telemetry::args::{failure_timeout, Flags};
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

/// Collector settings; every flag can also be set from the environment. `Default` is the
/// flags' defaults.
#[derive(Args, Clone, Debug, PartialEq)]
pub struct CollectorConfig {
    /// Where workers send outputs (PULL, bound).
    #[arg(long, env = "CEP_COLLECTOR_LISTEN", default_value = "tcp://0.0.0.0:5557")]
    pub listen: String,
    /// The router's control endpoint.
    #[arg(long, env = "CEP_ROUTER", default_value = "tcp://127.0.0.1:5556")]
    pub router: String,
    /// The host name or address the router should use to reach this collector; `auto` picks
    /// this host's address on the route to the router.
    #[arg(long, env = "CEP_ADVERTISE", default_value = "auto")]
    pub advertise: String,
    /// The collector's clock service (REP, bound): every node measures its offset here.
    #[arg(long, env = "CEP_CLOCK_LISTEN", default_value = "tcp://0.0.0.0:5558")]
    pub clock_listen: String,
    /// The results folder.
    #[arg(long, env = "CEP_OUT", default_value = "results")]
    pub out: PathBuf,
    /// Which outputs to write to outputs.csv.
    #[arg(long, env = "CEP_CSV", value_enum, default_value_t = CsvMode::Alerts)]
    pub csv: CsvMode,
    /// outputs.csv takes no more rows once it is this big (e.g. 1GiB, 500MB; 0: no limit), so
    /// a run until stopped never fills the disk. The rows it no longer takes are counted
    /// (summary.json's `outputs_not_written`); every other figure goes on.
    #[arg(long, env = "CEP_OUTPUTS_MAX_SIZE", default_value = "1GiB", value_parser = parse_size)]
    pub outputs_max_size: u64,
    /// Give up (and report what is missing as lost) after this long without any message.
    #[arg(long, env = "CEP_IDLE_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub idle_timeout: Duration,
    /// How long to wait for the run to start.
    #[arg(long, env = "CEP_START_TIMEOUT", default_value = "120s", value_parser = parse_duration)]
    pub start_timeout: Duration,
    /// Print a progress line every second.
    #[arg(long, env = "CEP_PROGRESS")]
    pub progress: bool,
    /// Frames larger than this many bytes are rejected.
    #[arg(long, env = "CEP_MAX_FRAME_BYTES", default_value_t = cep_core::wire::DEFAULT_MAX_FRAME_BYTES)]
    pub max_frame_bytes: usize,
    /// While the run goes, rewrite summary.json this often with the figures so far (marked
    /// `"running": true`, `"complete": false`; the final one replaces it); 0 turns it off.
    #[arg(long, env = "CEP_SUMMARY_EVERY", default_value = "10s", value_parser = parse_duration)]
    pub summary_every: Duration,
    /// Failure detection of the router (dead once its connection drops and stays down for an
    /// eighth of this, or never reached after ten times this): the collector then writes what it has (`complete: false`, with
    /// the cause in `failure`) and exits with an error.
    #[arg(long, env = "CEP_FAILURE_TIMEOUT", default_value = "2s", value_parser = parse_duration)]
    pub failure_timeout: Duration,
    /// CURVE: this process's key pair and the cluster's public keys (docs/SECURITY.md).
    #[command(flatten)]
    pub security: cep_transport::security::SecurityArgs,
    /// Started by `cep run`, which cleared the results folder before starting anything and
    /// writes files of its own there meanwhile (the run's keys, input.csv): the collector
    /// leaves them. A collector on its own clears an earlier run's files when its run starts.
    #[arg(long, hide = true)]
    pub launched: bool,
}

impl Default for CollectorConfig {
    fn default() -> CollectorConfig {
        CollectorConfig {
            listen: "tcp://0.0.0.0:5557".into(),
            router: "tcp://127.0.0.1:5556".into(),
            advertise: "auto".into(),
            clock_listen: "tcp://0.0.0.0:5558".into(),
            out: PathBuf::from("results"),
            csv: CsvMode::Alerts,
            outputs_max_size: DEFAULT_OUTPUTS_MAX_SIZE,
            idle_timeout: Duration::from_secs(30),
            start_timeout: Duration::from_secs(120),
            progress: false,
            max_frame_bytes: cep_core::wire::DEFAULT_MAX_FRAME_BYTES,
            summary_every: Duration::from_secs(10),
            failure_timeout: cep_transport::liveness::DEFAULT_FAILURE_TIMEOUT,
            security: Default::default(),
            launched: false,
        }
    }
}

/// outputs.csv's default bound: 1 GiB.
pub const DEFAULT_OUTPUTS_MAX_SIZE: u64 = 1 << 30;

/// A size in bytes: `1GiB`, `500MB`, `64KiB`, or a number of bytes.
pub fn parse_size(text: &str) -> Result<u64, String> {
    text.trim()
        .parse::<bytesize::ByteSize>()
        .map(|size| size.as_u64())
        .map_err(|error| format!("`{text}` is not a size (1GiB, 500MB, 4096): {error}"))
}

impl CollectorConfig {
    /// Checks what clap cannot; the error says which flag and why.
    pub fn validate(&self) -> Result<(), String> {
        if self.out.as_os_str().is_empty() {
            return Err("--out must name a folder".into());
        }
        cep_telemetry::args::endpoint("listen", &self.listen)?;
        cep_telemetry::args::endpoint("router", &self.router)?;
        cep_telemetry::args::endpoint("clock-listen", &self.clock_listen)?;
        if self.idle_timeout.is_zero() {
            return Err("--idle-timeout must be longer than 0".into());
        }
        failure_timeout(self.failure_timeout)?;
        cep_telemetry::args::max_frame_bytes(self.max_frame_bytes)
    }

    /// The flags that give this configuration back (`cep collector` followed by them).
    pub fn to_args(&self) -> Vec<String> {
        Flags::new()
            .value("listen", &self.listen)
            .value("router", &self.router)
            .value("advertise", &self.advertise)
            .value("clock-listen", &self.clock_listen)
            .path("out", &self.out)
            .choice("csv", &self.csv)
            .value("outputs-max-size", self.outputs_max_size)
            .duration("idle-timeout", self.idle_timeout)
            .duration("start-timeout", self.start_timeout)
            .switch("progress", self.progress)
            .value("max-frame-bytes", self.max_frame_bytes)
            .duration("summary-every", self.summary_every)
            .duration("failure-timeout", self.failure_timeout)
            .extend(self.security.to_args())
            .switch("launched", self.launched)
            .into_args()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cep_telemetry::args::parse_flags;

    #[test]
    fn default_is_what_no_flags_give() {
        assert_eq!(parse_flags::<CollectorConfig>(&[]).unwrap(), CollectorConfig::default());
        assert_eq!(CollectorConfig::default().validate(), Ok(()));
    }

    #[test]
    fn to_args_parses_back() {
        for csv in [CsvMode::All, CsvMode::Alerts, CsvMode::None] {
            let config = CollectorConfig {
                listen: "tcp://127.0.0.1:*".into(),
                router: "tcp://10.0.1.10:5556".into(),
                advertise: "10.0.1.11".into(),
                clock_listen: "ipc:///tmp/collector-clock".into(),
                out: PathBuf::from("/var/lib/cep/results"),
                csv,
                outputs_max_size: 123_456_789,
                idle_timeout: Duration::from_millis(2500),
                start_timeout: Duration::from_secs(1),
                progress: true,
                max_frame_bytes: 1 << 21,
                summary_every: if csv == CsvMode::All { Duration::ZERO } else { Duration::from_millis(250) },
                failure_timeout: Duration::from_millis(1500),
                security: cep_transport::security::SecurityArgs {
                    key: Some("/etc/cep/collector.key".into()),
                    keys: Some("/etc/cep/public".into()),
                    insecure: true,
                },
                launched: csv == CsvMode::All,
            };
            assert_eq!(parse_flags::<CollectorConfig>(&config.to_args()).unwrap(), config);
        }
    }

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("500MB"), Ok(500_000_000));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("0"), Ok(0));
        assert!(parse_size("lots").unwrap_err().starts_with("`lots` is not a size"));
    }

    #[test]
    fn validate_says_which_flag() {
        let error = |config: CollectorConfig| config.validate().unwrap_err();
        let idle = CollectorConfig { idle_timeout: Duration::ZERO, ..CollectorConfig::default() };
        assert_eq!(error(idle), "--idle-timeout must be longer than 0");
        assert!(error(CollectorConfig { out: PathBuf::new(), ..CollectorConfig::default() }).starts_with("--out"));
        let frames = CollectorConfig { max_frame_bytes: 0, ..CollectorConfig::default() };
        assert!(error(frames).starts_with("--max-frame-bytes"));
        let failure = CollectorConfig { failure_timeout: Duration::ZERO, ..CollectorConfig::default() };
        assert!(error(failure).starts_with("--failure-timeout must be at least"));
    }
}
