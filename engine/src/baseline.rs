//! The hand-written R1, R2 and R3 the engine ran before the rule language. No role uses it:
//! it is the oracle the compiled `rules/reference.rules` and `rules/oracle-400.rules` are
//! tested against, output for output, and the baseline the engine benchmark compares them with.

use crate::symbols::{SymbolId, SymbolTable};
use crate::window::Moments;
use std::collections::{BTreeSet, VecDeque};

/// The reference rules; the discriminant indexes [`Baseline::outputs`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rule {
    /// R1: the change since the previous tick is beyond the threshold, either way.
    Perc = 0,
    /// R2: the tick is the n-th or later consecutive rise.
    Trend = 1,
    /// R3: the population stddev of the window's prices, on every tick.
    Volatility = 2,
}

impl Rule {
    /// Every rule, in output order.
    pub const ALL: [Rule; 3] = [Rule::Perc, Rule::Trend, Rule::Volatility];

    /// The rule's name, the same as its query's in `rules/reference.rules`.
    pub fn name(self) -> &'static str {
        match self {
            Rule::Perc => "perc",
            Rule::Trend => "trend",
            Rule::Volatility => "volatility",
        }
    }
}

/// The rules and their parameters; the defaults are the reference workload's.
#[derive(Clone, Debug, PartialEq)]
pub struct RulesConfig {
    /// R1 `perc`: emit when the change since the previous tick, in percent, is above
    /// `perc_threshold` or below `-perc_threshold`.
    pub perc: bool,
    /// R1's threshold, in percent (2 by default).
    pub perc_threshold: f64,
    /// R2 `trend`: emit when this tick is the `trend_rises`-th or later consecutive rise.
    pub trend: bool,
    /// R2's number of rises before it emits (3 by default).
    pub trend_rises: u32,
    /// R3 `volatility`: population stddev of the prices in `(ts - window, ts]`, every tick.
    pub volatility: bool,
    /// R3's window length in event time, ns (10 s by default).
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

    /// Whether the configuration can run; the error says what cannot.
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

#[derive(Clone, Debug)]
struct SymbolState {
    /// Whether the rules apply to this symbol (always, unless the Oracle variant filters it).
    monitored: bool,
    /// Previous price; NaN before the first tick.
    previous: f64,
    /// Consecutive rises ending at the previous tick.
    rises: u32,
    window: PriceWindow,
}

/// The hand-written engine.
#[derive(Debug)]
pub struct Baseline {
    config: RulesConfig,
    symbols: SymbolTable,
    states: Vec<SymbolState>,
    processed: u64,
    outputs: [u64; 3],
}

impl Baseline {
    /// An engine for a validated configuration.
    pub fn new(config: RulesConfig) -> Self {
        Baseline { config, symbols: SymbolTable::default(), states: Vec::new(), processed: 0, outputs: [0; 3] }
    }

    /// The configuration it runs.
    pub fn config(&self) -> &RulesConfig {
        &self.config
    }

    /// The symbol's id, interning it on first sight (the only allocation, once per symbol).
    #[inline]
    pub fn intern(&mut self, symbol: &str) -> SymbolId {
        self.intern_bytes(symbol.as_bytes())
    }

    /// [`Self::intern`] for a symbol already known to be UTF-8 (as decoded frames are): the
    /// lookup hashes bytes; text is made only on first sight.
    #[inline]
    pub fn intern_bytes(&mut self, symbol: &[u8]) -> SymbolId {
        match self.symbols.get(symbol) {
            Some(id) => id,
            None => self.insert(symbol),
        }
    }

    #[cold]
    fn insert(&mut self, bytes: &[u8]) -> SymbolId {
        let id = self.symbols.insert(bytes);
        let symbol: &str = &self.symbols.names()[id as usize];
        let monitored = self.config.monitored.as_ref().is_none_or(|set| set.contains(symbol));
        self.states.push(SymbolState { monitored, previous: f64::NAN, rises: 0, window: PriceWindow::default() });
        id
    }

    /// Number of distinct symbols seen.
    pub fn symbols(&self) -> usize {
        self.symbols.len()
    }

    /// Ticks processed so far.
    pub fn processed(&self) -> u64 {
        self.processed
    }

    /// Outputs so far per rule (perc, trend, volatility).
    pub fn outputs(&self) -> [u64; 3] {
        self.outputs
    }

    /// Processes one tick of an interned symbol at event time `ts` (ns); calls `emit` for
    /// each output, in rule order. Price validity is the caller's contract (finite, > 0).
    #[inline]
    pub fn process(&mut self, id: SymbolId, price: f64, ts: u64, mut emit: impl FnMut(Rule, f64)) {
        self.processed += 1;
        let config = &self.config;
        let state = &mut self.states[id as usize];
        if !state.monitored {
            return;
        }
        let previous = state.previous;
        state.previous = price;
        if config.perc && previous.is_finite() {
            let change = (price - previous) / previous * 100.0;
            if change > config.perc_threshold || change < -config.perc_threshold {
                self.outputs[Rule::Perc as usize] += 1;
                emit(Rule::Perc, change);
            }
        }
        state.rises = if price > previous { state.rises + 1 } else { 0 };
        if config.trend && state.rises >= config.trend_rises {
            self.outputs[Rule::Trend as usize] += 1;
            emit(Rule::Trend, state.rises as f64);
        }
        if config.volatility {
            // Event time must not run backwards inside a symbol's window: a late tick counts
            // at the symbol's latest time.
            let ts = state.window.last_time().map_or(ts, |last| last.max(ts));
            let stddev = state.window.push(ts, price, config.window_ns);
            self.outputs[Rule::Volatility as usize] += 1;
            emit(Rule::Volatility, stddev);
        }
    }

    /// Interns and processes in one call.
    #[inline]
    pub fn process_symbol(&mut self, symbol: &str, price: f64, ts: u64, emit: impl FnMut(Rule, f64)) -> SymbolId {
        let id = self.intern(symbol);
        self.process(id, price, ts, emit);
        id
    }
}

/// The hand-written R3 window (see [`crate::baseline`]).
#[derive(Clone, Debug, Default)]
pub struct PriceWindow {
    values: VecDeque<(u64, f64)>,
    moments: Moments,
}

impl PriceWindow {
    /// Adds a price at event time `ts` (ns), evicts what fell out of `(ts - length, ts]`,
    /// and returns the population stddev of what remains. Times must not decrease; callers
    /// pass the symbol's latest time for a late tick.
    #[inline]
    pub fn push(&mut self, ts: u64, price: f64, length: u64) -> f64 {
        let horizon = ts.saturating_sub(length);
        while let Some(&(t, p)) = self.values.front() {
            if t > horizon || ts < length {
                break;
            }
            self.values.pop_front();
            self.moments.remove(p);
        }
        self.values.push_back((ts, price));
        self.moments.add(price);
        if self.moments.needs_rebuild() {
            self.moments.rebuild(self.values.iter().map(|&(_, p)| p));
        }
        self.stddev()
    }

    /// Population standard deviation of the window (0 when empty).
    #[inline]
    pub fn stddev(&self) -> f64 {
        self.moments.stddev_pop()
    }

    /// Prices in the window.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether the window holds no price.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The latest event time in the window.
    pub fn last_time(&self) -> Option<u64> {
        self.values.back().map(|&(t, _)| t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000_000;

    fn run(config: RulesConfig, ticks: &[(&str, f64, u64)]) -> Vec<(usize, Rule, f64)> {
        let mut engine = Baseline::new(config);
        let mut out = Vec::new();
        for (i, &(symbol, price, ts)) in ticks.iter().enumerate() {
            engine.process_symbol(symbol, price, ts, |rule, value| out.push((i, rule, value)));
        }
        out
    }

    fn only(rule: Rule) -> RulesConfig {
        RulesConfig {
            perc: rule == Rule::Perc,
            trend: rule == Rule::Trend,
            volatility: rule == Rule::Volatility,
            ..RulesConfig::default()
        }
    }

    #[test]
    fn perc_fires_beyond_two_percent_either_way() {
        let ticks =
            [("A", 100.0, 0), ("A", 102.0, 1), ("A", 104.1, 2), ("A", 101.0, 3), ("A", 101.0, 4), ("B", 50.0, 5)];
        let out = run(only(Rule::Perc), &ticks);
        // 100 -> 102 is exactly 2 %: not above. 102 -> 104.1 is +2.06 %. 104.1 -> 101 is -2.98 %.
        let fired: Vec<usize> = out.iter().map(|o| o.0).collect();
        assert_eq!(fired, vec![2, 3]);
        assert!((out[0].2 - (104.1 - 102.0) / 102.0 * 100.0).abs() < 1e-12);
        assert!(out[1].2 < -2.0);
    }

    #[test]
    fn trend_fires_from_the_third_rise_and_resets_on_equal() {
        let prices = [10.0, 11.0, 12.0, 13.0, 14.0, 14.0, 15.0, 16.0, 17.0, 16.0];
        let ticks: Vec<(&str, f64, u64)> = prices.iter().enumerate().map(|(i, &p)| ("A", p, i as u64)).collect();
        let out = run(only(Rule::Trend), &ticks);
        // Rises at 1,2,3,4 (3rd rise is tick 3); 14 == 14 resets; rises again at 6,7,8.
        let fired: Vec<(usize, f64)> = out.iter().map(|o| (o.0, o.2)).collect();
        assert_eq!(fired, vec![(3, 3.0), (4, 4.0), (8, 3.0)]);
    }

    #[test]
    fn trend_is_per_symbol() {
        let ticks =
            [("A", 1.0, 0), ("B", 5.0, 0), ("A", 2.0, 1), ("B", 4.0, 1), ("A", 3.0, 2), ("B", 3.0, 2), ("A", 4.0, 3)];
        let out = run(only(Rule::Trend), &ticks);
        assert_eq!(out.iter().map(|o| o.0).collect::<Vec<_>>(), vec![6]);
    }

    #[test]
    fn volatility_every_tick_over_event_time_window() {
        let ticks = [("A", 10.0, 0), ("A", 20.0, 5 * SECOND), ("A", 30.0, 10 * SECOND), ("A", 30.0, 15 * SECOND)];
        let out = run(only(Rule::Volatility), &ticks);
        let values: Vec<f64> = out.iter().map(|o| o.2).collect();
        // At 10 s the tick at 0 s is exactly 10 s old and leaves the window: {20, 30} -> 5.
        // At 15 s the tick at 5 s leaves: {30, 30} -> 0.
        assert_eq!(values, vec![0.0, 5.0, 5.0, 0.0]);
    }

    #[test]
    fn oracle_variant_filters_unmonitored_symbols() {
        let mut config = RulesConfig::oracle(1);
        config.trend_rises = 1;
        let ticks = [("S0000", 1.0, 0), ("S0001", 1.0, 0), ("S0000", 2.0, 1), ("S0001", 2.0, 1)];
        let mut engine = Baseline::new(config);
        let mut out = Vec::new();
        for &(symbol, price, ts) in &ticks {
            engine.process_symbol(symbol, price, ts, |rule, _| out.push((symbol, rule)));
        }
        assert_eq!(out, vec![("S0000", Rule::Perc), ("S0000", Rule::Trend)]);
        assert_eq!(engine.processed(), 4);
    }

    #[test]
    fn reference_stream_gives_the_published_counts() {
        use cep_core::gbm::{symbol_names, GbmStream};
        let names = symbol_names(1470);
        let mut engine = Baseline::new(RulesConfig { volatility: false, ..RulesConfig::default() });
        for tick in GbmStream::all(42, 1470).take(2_000_000) {
            engine.process_symbol(&names[tick.symbol], tick.price, tick.index, |_, _| {});
        }
        let [perc, trend, _] = engine.outputs();
        assert_eq!((perc, trend), (224_687, 245_171));
    }

    #[test]
    fn validate_rejects_unusable_configs() {
        assert!(RulesConfig::default().validate().is_ok());
        assert!(RulesConfig { perc_threshold: f64::NAN, ..RulesConfig::default() }.validate().is_err());
        assert!(RulesConfig { window_ns: 0, ..RulesConfig::default() }.validate().is_err());
        assert!(RulesConfig { perc: false, trend: false, volatility: false, ..RulesConfig::default() }
            .validate()
            .is_err());
    }

    mod price_window {
        use super::*;
        use crate::window::two_pass_stddev;
        use proptest::prelude::*;

        #[test]
        fn evicts_at_exactly_the_window_length() {
            let mut window = PriceWindow::default();
            assert_eq!(window.push(100 * SECOND, 10.0, 10 * SECOND), 0.0);
            assert_eq!(window.push(105 * SECOND, 20.0, 10 * SECOND), 5.0);
            // 110 s: the tick at 100 s is exactly 10 s old, outside (ts - 10 s, ts].
            assert_eq!(window.push(110 * SECOND, 20.0, 10 * SECOND), 0.0);
            assert_eq!(window.len(), 2);
            // One ns earlier it would have stayed.
            let mut window = PriceWindow::default();
            window.push(100 * SECOND, 10.0, 10 * SECOND);
            window.push(110 * SECOND - 1, 20.0, 10 * SECOND);
            assert_eq!(window.len(), 2);
        }

        #[test]
        fn early_timestamps_do_not_underflow() {
            let mut window = PriceWindow::default();
            window.push(1, 1.0, 10 * SECOND);
            window.push(2, 3.0, 10 * SECOND);
            assert_eq!(window.len(), 2);
            assert_eq!(window.stddev(), 1.0);
        }

        #[test]
        fn equal_prices_have_no_spread_after_others_left() {
            let mut window = PriceWindow::default();
            window.push(SECOND, 101.37, 10 * SECOND);
            window.push(2 * SECOND, 97.21, 10 * SECOND);
            for second in 3..40 {
                let stddev = window.push(second * SECOND, 99.99, 10 * SECOND);
                if second >= 12 {
                    assert_eq!(stddev, 0.0, "{second} s");
                }
            }
        }

        proptest! {
            /// Prices on a grid of cents repeat, so windows of equal prices come up.
            #[test]
            fn repeated_prices_match_two_pass(
                steps in prop::collection::vec((0u64..4 * SECOND, -3i32..4), 1..400),
            ) {
                let mut window = PriceWindow::default();
                let mut all: Vec<(u64, f64)> = Vec::new();
                let (mut ts, mut cents) = (20 * SECOND, 10_000i32);
                for (gap, step) in steps {
                    ts += gap;
                    cents = (cents + step * (step.abs() - 1)).max(1);
                    let price = cents as f64 / 100.0;
                    let got = window.push(ts, price, 10 * SECOND);
                    all.push((ts, price));
                    let live: Vec<f64> = all.iter().filter(|(t, _)| *t + 10 * SECOND > ts).map(|&(_, p)| p).collect();
                    let want = two_pass_stddev(&live);
                    prop_assert!((got - want).abs() <= 1e-9 * want.max(price * 1e-6), "got {got}, want {want}");
                }
            }

            #[test]
            fn matches_two_pass_within_1e9(
                start in 1.0f64..1e6,
                steps in prop::collection::vec((0u64..3 * SECOND, -0.05f64..0.05), 1..600),
            ) {
                let mut window = PriceWindow::default();
                let mut all: Vec<(u64, f64)> = Vec::new();
                let (mut ts, mut price) = (20 * SECOND, start);
                for (gap, change) in steps {
                    ts += gap;
                    price *= 1.0 + change;
                    let got = window.push(ts, price, 10 * SECOND);
                    all.push((ts, price));
                    let live: Vec<f64> = all.iter().filter(|(t, _)| *t + 10 * SECOND > ts).map(|&(_, p)| p).collect();
                    let want = two_pass_stddev(&live);
                    prop_assert!((got - want).abs() <= 1e-9 * want.max(price * 1e-6), "got {got}, want {want}");
                }
            }
        }
    }
}
