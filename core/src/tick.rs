//! Ticks, outputs and the timestamps they collect on their way through the cluster.

use std::ops::Range;

/// The rules the engine evaluates; the discriminant is the rule's byte on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rule {
    /// R1: percentage change since the previous tick beyond a threshold.
    Perc = 0,
    /// R2: third (or later) consecutive rise.
    Trend = 1,
    /// R3: population standard deviation over an event-time window, on every tick.
    Volatility = 2,
}

impl Rule {
    pub const ALL: [Rule; 3] = [Rule::Perc, Rule::Trend, Rule::Volatility];

    /// The rule's name in results files.
    pub fn name(self) -> &'static str {
        match self {
            Rule::Perc => "perc",
            Rule::Trend => "trend",
            Rule::Volatility => "volatility",
        }
    }

    pub fn from_byte(byte: u8) -> Option<Rule> {
        match byte {
            0 => Some(Rule::Perc),
            1 => Some(Rule::Trend),
            2 => Some(Rule::Volatility),
            _ => None,
        }
    }

    pub fn from_name(name: &str) -> Option<Rule> {
        Rule::ALL.into_iter().find(|rule| rule.name() == name)
    }
}

/// A decoded tick. The symbol is a byte range into the frame it was decoded from, so that
/// decoding a batch allocates nothing per tick; [`TickRecord::symbol`] resolves it.
#[derive(Clone, Debug, PartialEq)]
pub struct TickRecord {
    pub symbol: Range<usize>,
    pub price: f64,
    /// Intended send time at the injector (ns since epoch): latency starts here.
    pub t_inject: u64,
    /// Id of the injector stream (one per injector connection) that sent it.
    pub injector: u32,
    /// Per-stream sequence number, from 0.
    pub seq: u64,
    /// When the router received it; 0 until then.
    pub t_router_in: u64,
}

impl TickRecord {
    /// The symbol, resolved against the frame the record was decoded from.
    pub fn symbol<'a>(&self, frame: &'a [u8]) -> &'a str {
        std::str::from_utf8(self.symbol_bytes(frame)).unwrap_or("")
    }

    /// The symbol's UTF-8 bytes (checked when the frame was decoded).
    #[inline]
    pub fn symbol_bytes<'a>(&self, frame: &'a [u8]) -> &'a [u8] {
        &frame[self.symbol.clone()]
    }

    /// Why the tick cannot be processed, if it cannot.
    #[inline]
    pub fn invalid_reason(&self) -> Option<&'static str> {
        if self.symbol.is_empty() {
            Some("empty_symbol")
        } else if !self.price.is_finite() {
            Some("non_finite_price")
        } else if self.price <= 0.0 {
            Some("non_positive_price")
        } else {
            None
        }
    }
}

/// The hop timestamps of one output, injector to engine exit (the collector adds its own).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stamps {
    pub t_inject: u64,
    pub t_router_in: u64,
    pub t_router_out: u64,
    pub t_worker_in: u64,
    pub t_engine_out: u64,
}

/// A decoded output; the symbol is a byte range into its frame, as for [`TickRecord`].
#[derive(Clone, Debug, PartialEq)]
pub struct OutputRecord {
    pub rule: Rule,
    pub symbol: Range<usize>,
    pub price: f64,
    pub value: f64,
    pub injector: u32,
    pub seq: u64,
    pub stamps: Stamps,
}

impl OutputRecord {
    pub fn symbol<'a>(&self, frame: &'a [u8]) -> &'a str {
        std::str::from_utf8(&frame[self.symbol.clone()]).unwrap_or("")
    }

    /// The symbol's UTF-8 bytes (checked when the frame was decoded).
    #[inline]
    pub fn symbol_bytes<'a>(&self, frame: &'a [u8]) -> &'a [u8] {
        &frame[self.symbol.clone()]
    }
}
