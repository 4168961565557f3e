//! What the engine evaluates.

use std::collections::BTreeSet;

/// The rules and their parameters (DESIGN section 2).
#[derive(Clone, Debug, PartialEq)]
pub struct RulesConfig {
    /// R1 `perc`: emit when the change since the previous tick, in percent, is above
    /// `perc_threshold` or below `-perc_threshold`.
    pub perc: bool,
    pub perc_threshold: f64,
    /// R2 `trend`: emit when this tick is the `trend_rises`-th or later consecutive rise.
    pub trend: bool,
    pub trend_rises: u32,
    /// R3 `volatility`: population stddev of the prices in `(ts - window, ts]`, every tick.
    pub volatility: bool,
    pub window_ns: u64,
    /// The Oracle variant: when set, only these symbols are evaluated; every other tick is
    /// processed (counted) but filtered out.
    pub monitored: Option<BTreeSet<String>>,
}

impl Default for RulesConfig {
    fn default() -> Self {
        RulesConfig {
            perc: true,
            perc_threshold: 2.0,
            trend: true,
            trend_rises: 3,
            volatility: true,
            window_ns: 10_000_000_000,
            monitored: None,
        }
    }
}

/// A rules configuration that cannot run.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConfigError {
    /// The perc threshold must be a positive finite number.
    #[error("perc threshold must be a positive number, got {0}")]
    PercThreshold(f64),
    /// A trend needs at least one rise.
    #[error("trend needs at least 1 rise, got {0}")]
    TrendRises(u32),
    /// A volatility window of zero length holds nothing.
    #[error("volatility window must be longer than 0")]
    Window,
    /// No rule enabled.
    #[error("no rule enabled: enable at least one of perc, trend, volatility")]
    NoRule,
}

impl RulesConfig {
    /// The Oracle white paper's workload: R1 and R2 over the first `monitored` symbols.
    pub fn oracle(monitored: usize) -> Self {
        RulesConfig {
            volatility: false,
            monitored: Some((0..monitored).map(|s| format!("S{s:04}")).collect()),
            ..RulesConfig::default()
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.perc_threshold.is_finite() && self.perc_threshold > 0.0) {
            return Err(ConfigError::PercThreshold(self.perc_threshold));
        }
        if self.trend_rises == 0 {
            return Err(ConfigError::TrendRises(self.trend_rises));
        }
        if self.window_ns == 0 {
            return Err(ConfigError::Window);
        }
        if !(self.perc || self.trend || self.volatility) {
            return Err(ConfigError::NoRule);
        }
        Ok(())
    }
}
