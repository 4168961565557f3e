//! The reference tick stream, the workload's generated ticks: GBM prices driven by a
//! counter-based SplitMix64, so that tick `i = round * S + s` depends on (seed, symbol, round)
//! alone and any tool regenerates the same stream bit for bit, in any order and any split.

/// Drift of the reference model, per year: none, so prices wander without a trend.
pub const MU: f64 = 0.0;
/// Volatility of the reference model, per year.
pub const SIGMA: f64 = 0.2;
/// One step of the model, in years: a trading day (252 a year).
pub const DT: f64 = 1.0 / 252.0;
/// Every symbol's price before its first tick.
pub const START_PRICE: f64 = 100.0;

const GOLDEN_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// The standard SplitMix64 finaliser.
#[inline]
pub fn splitmix64_mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Output `k` (from 0) of SplitMix64 started at state `seed`, computed from the counter alone.
#[inline]
pub fn splitmix64(seed: u64, k: u64) -> u64 {
    splitmix64_mix(seed.wrapping_add(k.wrapping_add(1).wrapping_mul(GOLDEN_GAMMA)))
}

/// Output `k` of the counter-based generator, uniform in [0, 1).
#[inline]
pub fn uniform(seed: u64, k: u64) -> f64 {
    (splitmix64(seed, k) >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// The standard normal draw of global tick `i` (Box-Muller on `u(2i)`, `u(2i+1)`).
#[inline]
pub fn normal(seed: u64, i: u64) -> f64 {
    let u1 = uniform(seed, 2 * i);
    let u2 = uniform(seed, 2 * i + 1);
    (-2.0 * (1.0 - u1).ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

/// The symbol name of index `s`: `S0000`, `S0001`, ...
pub fn symbol_name(s: usize) -> String {
    format!("S{s:04}")
}

/// All symbol names of a run.
pub fn symbol_names(count: usize) -> Vec<String> {
    (0..count).map(symbol_name).collect()
}

/// The symbols of connection `connection` out of `connections`: contiguous, even blocks.
pub fn connection_symbols(symbols: usize, connections: usize, connection: usize) -> std::ops::Range<usize> {
    let start = symbols * connection / connections;
    let end = symbols * (connection + 1) / connections;
    start..end
}

/// Generates the ticks of a set of symbols in global order (round by round, symbols in
/// index order), carrying each symbol's price from round to round.
#[derive(Clone, Debug)]
pub struct GbmStream {
    seed: u64,
    total_symbols: u64,
    symbols: std::ops::Range<usize>,
    prices: Vec<f64>,
    round: u64,
    next: usize,
    drift: f64,
    diffusion: f64,
}

/// One generated tick: the symbol's index, its global tick index and its price.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GeneratedTick {
    /// The symbol's index among all symbols of the model.
    pub symbol: usize,
    /// The tick's index in the whole stream (`round * symbols + symbol`).
    pub index: u64,
    /// The price after this step.
    pub price: f64,
}

impl GbmStream {
    /// The stream of `symbols` (a range of indices out of `total_symbols`).
    pub fn new(seed: u64, total_symbols: usize, symbols: std::ops::Range<usize>) -> Self {
        let prices = vec![START_PRICE; symbols.len()];
        GbmStream {
            seed,
            total_symbols: total_symbols as u64,
            next: symbols.start,
            symbols,
            prices,
            round: 0,
            drift: (MU - SIGMA * SIGMA / 2.0) * DT,
            diffusion: SIGMA * DT.sqrt(),
        }
    }

    /// The whole stream of all symbols.
    pub fn all(seed: u64, total_symbols: usize) -> Self {
        Self::new(seed, total_symbols, 0..total_symbols)
    }
}

impl Iterator for GbmStream {
    type Item = GeneratedTick;

    #[inline]
    fn next(&mut self) -> Option<GeneratedTick> {
        if self.symbols.is_empty() {
            return None;
        }
        let symbol = self.next;
        let index = self.round * self.total_symbols + symbol as u64;
        let slot = &mut self.prices[symbol - self.symbols.start];
        *slot *= (self.drift + self.diffusion * normal(self.seed, index)).exp();
        let price = *slot;
        self.next += 1;
        if self.next == self.symbols.end {
            self.next = self.symbols.start;
            self.round += 1;
        }
        Some(GeneratedTick { symbol, index, price })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_matches_reference_values() {
        // Reference SplitMix64 with state 0: first output is mix(0x9E3779B97F4A7C15).
        assert_eq!(splitmix64_mix(GOLDEN_GAMMA), 0xE220_A839_7B1D_CDAF);
    }

    #[test]
    fn split_streams_equal_the_whole_stream() {
        let whole: Vec<_> = GbmStream::all(7, 10).take(50).collect();
        for connections in 1..=4 {
            let mut parts: Vec<GeneratedTick> = (0..connections)
                .flat_map(|c| {
                    let range = connection_symbols(10, connections, c);
                    let rounds = 5 * range.len();
                    GbmStream::new(7, 10, range).take(rounds)
                })
                .collect();
            parts.sort_by_key(|tick| tick.index);
            assert_eq!(parts, whole, "{connections} connections");
        }
    }

    #[test]
    fn first_tick_already_carries_one_step() {
        let first = GbmStream::all(crate::reference::SEED, crate::reference::SYMBOLS).next().unwrap();
        assert_ne!(first.price, START_PRICE);
        assert!((first.price / START_PRICE - 1.0).abs() < 0.1);
    }
}
