//! The injector's flags.

use crate::pacing::Speed;
use cep_core::duration::parse_duration;
use cep_telemetry::args::{at_least_one, failure_timeout, high_water_mark, Flags};
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

/// The least time between two batches of a paced stream, by default (`--linger`): none.
pub const DEFAULT_LINGER: Duration = Duration::ZERO;

/// The longest `--linger`: beyond it pacing would be coarser than any rate is meant.
const MAX_LINGER: Duration = Duration::from_secs(1);

/// Injector settings; every flag can also be set from the environment. `Default` is the flags'
/// defaults: without --duration, --count or --replay the injector generates until it is
/// stopped (SIGINT/SIGTERM), then ends its streams gracefully.
#[derive(Args, Clone, Debug, PartialEq)]
pub struct InjectorConfig {
    /// The router's control endpoint.
    #[arg(long, env = "CEP_ROUTER", default_value = "tcp://127.0.0.1:5556")]
    pub router: String,
    /// The router's data endpoint.
    #[arg(long, env = "CEP_ROUTER_DATA", default_value = "tcp://127.0.0.1:5555")]
    pub router_data: String,
    /// Number of symbols (S0000, S0001, ...).
    #[arg(long, env = "CEP_SYMBOLS", default_value_t = cep_core::reference::SYMBOLS)]
    pub symbols: usize,
    /// Connections (streams), one PUSH socket each; symbols are split evenly between them.
    #[arg(long, env = "CEP_CONNECTIONS", default_value_t = 1)]
    pub connections: usize,
    /// Total ticks per second over all connections; 0 sends as fast as possible. A replay
    /// given --speed is paced by its own timestamps instead.
    #[arg(long, env = "CEP_RATE", default_value_t = 0.0, allow_negative_numbers = true)]
    pub rate: f64,
    /// How long to send, the warm-up included (e.g. 30s, 500ms). Without it, or 0 (and without
    /// --count or --replay), the injector sends until it is stopped: the first SIGINT/SIGTERM
    /// ends every stream gracefully with its true count (nothing lost), a second one stops at
    /// once.
    #[arg(long, env = "CEP_DURATION", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Total ticks to send (the first N ticks of the reference stream, or of the replay file);
    /// overrides --duration.
    #[arg(long, env = "CEP_COUNT")]
    pub count: Option<u64>,
    /// Sent before the measured part; its outputs are kept out of the latency histograms.
    #[arg(long, env = "CEP_WARMUP", default_value = "0s", value_parser = parse_duration)]
    pub warmup: Duration,
    /// Seed of the price model.
    #[arg(long, env = "CEP_SEED", default_value_t = cep_core::reference::SEED)]
    pub seed: u64,
    /// Replay ticks from a file instead of generating them: `symbol;price;timestamp` lines
    /// (timestamps in ms unless --time-unit says otherwise) or CSV with a header naming the
    /// columns; each tick's timestamp is its event time (docs/REPLAY.md).
    #[arg(long, env = "CEP_REPLAY")]
    pub replay: Option<PathBuf>,
    /// The unit of the replay file's timestamps when its header does not name one: s, ms, us, ns
    /// (default ms).
    #[arg(long, env = "CEP_TIME_UNIT", value_parser = cep_core::replay::TimeUnit::parse, requires = "replay")]
    pub time_unit: Option<cep_core::replay::TimeUnit>,
    /// Replay at the file's recorded pace times this factor (1, 10, 0.5) or `max` for as fast
    /// as possible; without it a replay is paced by --rate.
    #[arg(long, env = "CEP_SPEED", value_parser = crate::pacing::Speed::parse, requires = "replay")]
    pub speed: Option<crate::pacing::Speed>,
    /// The replay file was checked already (`cep run` checks it whole before it starts
    /// anything): send it as it is read, with no first pass over it. A bad line then ends the
    /// stream there, and the injector exits with an error naming it.
    #[arg(long, env = "CEP_REPLAY_CHECKED", requires = "replay")]
    pub replay_checked: bool,
    /// Record every tick sent to this CSV file (`injector,seq,symbol,price,t_inject_ns,t_event_ns`).
    #[arg(long, env = "CEP_RECORD")]
    pub record: Option<PathBuf>,
    /// Most ticks in one batch.
    #[arg(long, env = "CEP_BATCH", default_value_t = cep_core::wire::DEFAULT_BATCH)]
    pub batch: usize,
    /// Paced: the least time between two batches of a stream (at most 1s; e.g. 100us). The
    /// ticks that fall due meanwhile leave together, each with its own intended send time
    /// (latency is measured from it). It bounds the messages per second, and with them the CPU
    /// a high rate costs. Waits are slept, not spun, so a tick leaves with a sleep's overshoot.
    /// 0 (the default): each tick leaves when due, its last microseconds waited for by
    /// spinning, which keeps a core busy.
    #[arg(long, env = "CEP_LINGER", default_value = "0s", value_parser = parse_duration)]
    pub linger: Duration,
    /// How long to wait for the run to start.
    #[arg(long, env = "CEP_START_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub start_timeout: Duration,
    /// After the last end-of-stream marker: how long to keep the sockets open waiting for the
    /// end of the run.
    #[arg(long, env = "CEP_END_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub end_timeout: Duration,
    /// Batches queued per connection before sending blocks.
    #[arg(long, env = "CEP_HWM", default_value_t = 1000)]
    pub hwm: i32,
    /// Failure detection of the router (this injector then stops, exit status non-zero,
    /// naming it): dead once its connection drops and stays down for an eighth of this, or
    /// never reached after ten times this; TCP keepalive probes at a quarter of it (at least
    /// 1 s).
    #[arg(long, env = "CEP_FAILURE_TIMEOUT", default_value = "2s", value_parser = parse_duration)]
    pub failure_timeout: Duration,
    /// CURVE: this process's key pair and the cluster's public keys (docs/SECURITY.md).
    #[command(flatten)]
    pub security: cep_transport::security::SecurityArgs,
}

impl Default for InjectorConfig {
    fn default() -> InjectorConfig {
        InjectorConfig {
            router: "tcp://127.0.0.1:5556".into(),
            router_data: "tcp://127.0.0.1:5555".into(),
            symbols: cep_core::reference::SYMBOLS,
            connections: 1,
            rate: 0.0,
            duration: None,
            count: None,
            warmup: Duration::ZERO,
            seed: cep_core::reference::SEED,
            replay: None,
            time_unit: None,
            speed: None,
            replay_checked: false,
            record: None,
            batch: cep_core::wire::DEFAULT_BATCH,
            linger: DEFAULT_LINGER,
            start_timeout: Duration::from_secs(60),
            end_timeout: Duration::from_secs(60),
            hwm: 1000,
            failure_timeout: Duration::from_secs(2),
            security: Default::default(),
        }
    }
}

impl InjectorConfig {
    /// How long to send, the warm-up included: `--duration`, where 0 (like no duration) means
    /// until stopped (so an environment that must set the variable can ask for that).
    pub fn time_limit(&self) -> Option<Duration> {
        self.duration.filter(|duration| !duration.is_zero())
    }

    /// Checks what clap cannot (and what it checks of flags that go together, for a
    /// configuration made without it); the error says which flag and why.
    pub fn validate(&self) -> Result<(), String> {
        cep_telemetry::args::endpoint("router", &self.router)?;
        if self.replay.is_none() && self.symbols == 0 {
            return Err("--symbols must be at least 1".into());
        }
        if self.connections == 0 {
            return Err("--connections must be at least 1".into());
        }
        if self.replay.is_none() && self.connections > self.symbols {
            return Err(format!(
                "--connections {} exceeds --symbols {}: each connection needs a symbol",
                self.connections, self.symbols
            ));
        }
        if !(self.rate.is_finite() && self.rate >= 0.0) {
            return Err(format!("--rate must be a non-negative number, got {}", self.rate));
        }
        at_least_one("batch", self.batch)?;
        if self.linger > MAX_LINGER {
            return Err(format!("--linger {:?} is more than 1s", self.linger));
        }
        high_water_mark(self.hwm)?;
        failure_timeout(self.failure_timeout)?;
        if self.count == Some(0) {
            return Err("--count must be at least 1".into());
        }
        if let (None, Some(duration)) = (self.count, self.time_limit()) {
            if !self.warmup.is_zero() && self.warmup >= duration {
                return Err(format!(
                    "--warmup {:?} is not shorter than --duration {duration:?}: the duration includes the warm-up",
                    self.warmup
                ));
            }
        }
        if self.replay.is_none() {
            if self.time_unit.is_some() {
                return Err("--time-unit needs --replay".into());
            }
            if self.speed.is_some() {
                return Err("--speed needs --replay".into());
            }
        }
        if let Some(speed) = self.speed {
            Speed::parse(&speed_text(speed)).map_err(|error| format!("--speed: {error}"))?;
        }
        Ok(())
    }

    /// The flags that give this configuration back (`cep injector` followed by them).
    pub fn to_args(&self) -> Vec<String> {
        Flags::new()
            .value("router", &self.router)
            .value("router-data", &self.router_data)
            .value("symbols", self.symbols)
            .value("connections", self.connections)
            .value("rate", self.rate)
            .some_duration("duration", self.duration)
            .some("count", self.count)
            .duration("warmup", self.warmup)
            .value("seed", self.seed)
            .some_path("replay", self.replay.as_deref())
            .some("time-unit", self.time_unit.map(|unit| unit.name()))
            .some("speed", self.speed.map(speed_text))
            .switch("replay-checked", self.replay_checked)
            .some_path("record", self.record.as_deref())
            .value("batch", self.batch)
            .duration("linger", self.linger)
            .duration("start-timeout", self.start_timeout)
            .duration("end-timeout", self.end_timeout)
            .duration("failure-timeout", self.failure_timeout)
            .value("hwm", self.hwm)
            .extend(self.security.to_args())
            .into_args()
    }
}

/// A speed as `--speed` takes it.
fn speed_text(speed: Speed) -> String {
    match speed {
        Speed::Max => "max".into(),
        Speed::Times(factor) => factor.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cep_telemetry::args::parse_flags;

    #[test]
    fn default_is_what_no_flags_give() {
        assert_eq!(parse_flags::<InjectorConfig>(&[]).unwrap(), InjectorConfig::default());
        // The defaults send until stopped.
        assert_eq!(InjectorConfig::default().validate(), Ok(()));
        let timed = InjectorConfig { duration: Some(Duration::from_secs(10)), ..InjectorConfig::default() };
        assert_eq!(timed.validate(), Ok(()));
        let coarse = InjectorConfig { linger: Duration::from_millis(1001), ..InjectorConfig::default() };
        assert_eq!(coarse.validate(), Err("--linger 1.001s is more than 1s".into()));
    }

    #[test]
    fn to_args_parses_back() {
        let generated = InjectorConfig {
            router: "tcp://10.0.1.10:5556".into(),
            router_data: "tcp://10.0.1.10:5555".into(),
            symbols: 200,
            connections: 4,
            rate: 123_456.789,
            duration: Some(Duration::from_millis(2500)),
            count: Some(5_000_000),
            warmup: Duration::from_secs(2),
            seed: 7,
            replay: None,
            time_unit: None,
            speed: None,
            replay_checked: false,
            record: Some("/tmp/input.csv".into()),
            batch: 64,
            linger: Duration::from_micros(250),
            start_timeout: Duration::from_secs(5),
            end_timeout: Duration::from_secs(6),
            hwm: 0,
            failure_timeout: Duration::from_millis(1500),
            security: cep_transport::security::SecurityArgs {
                key: Some("/etc/cep/injector.key".into()),
                keys: Some("/etc/cep/public".into()),
                insecure: false,
            },
        };
        assert_eq!(parse_flags::<InjectorConfig>(&generated.to_args()).unwrap(), generated);
        for speed in [Speed::Max, Speed::Times(0.5), Speed::Times(60.0)] {
            let replay = InjectorConfig {
                replay: Some("ticks.txt".into()),
                time_unit: Some(cep_core::replay::TimeUnit::Micros),
                speed: Some(speed),
                replay_checked: true,
                ..InjectorConfig::default()
            };
            assert_eq!(parse_flags::<InjectorConfig>(&replay.to_args()).unwrap(), replay);
        }
    }

    #[test]
    fn validate_says_which_flag() {
        let timed = InjectorConfig { duration: Some(Duration::from_secs(1)), ..InjectorConfig::default() };
        let error = |config: InjectorConfig| config.validate().unwrap_err();
        let crowded = InjectorConfig { connections: 3, symbols: 2, ..timed.clone() };
        assert_eq!(error(crowded), "--connections 3 exceeds --symbols 2: each connection needs a symbol");
        assert_eq!(error(InjectorConfig { count: Some(0), ..timed.clone() }), "--count must be at least 1");
        assert_eq!(
            error(InjectorConfig { warmup: Duration::from_secs(1), ..timed.clone() }),
            "--warmup 1s is not shorter than --duration 1s: the duration includes the warm-up"
        );
        let until_stopped = InjectorConfig { duration: Some(Duration::ZERO), ..timed.clone() };
        assert_eq!((until_stopped.validate(), until_stopped.time_limit()), (Ok(()), None), "0: until stopped");
        assert!(error(InjectorConfig { rate: f64::NAN, ..timed.clone() }).starts_with("--rate"));
        assert_eq!(error(InjectorConfig { speed: Some(Speed::Max), ..timed.clone() }), "--speed needs --replay");
        let replay = InjectorConfig { replay: Some("ticks.txt".into()), ..timed };
        assert!(error(InjectorConfig { speed: Some(Speed::Times(0.0)), ..replay.clone() }).starts_with("--speed: "));
        assert_eq!(replay.validate(), Ok(()));
    }
}
