//! Ticks, outputs and the timestamps they collect on their way through the cluster.

use std::ops::Range;

/// A decoded tick. The symbol is a byte range into the frame it was decoded from, so that
/// decoding a batch allocates nothing per tick; [`TickRecord::symbol`] resolves it.
#[derive(Clone, Debug, PartialEq)]
pub struct TickRecord {
    /// Byte range of the symbol in the frame; [`TickRecord::symbol`] reads it.
    pub symbol: Range<usize>,
    /// The price.
    pub price: f64,
    /// Intended send time at the injector (ns since epoch): latency starts here.
    pub t_inject: u64,
    /// Event time (ns): the time windows are computed on. A generated tick's is its
    /// intended send time; a replayed tick's is its timestamp in the file.
    pub t_event: u64,
    /// Id of the injector stream (one per injector connection) that sent it.
    pub injector: u32,
    /// Per-stream sequence number, from 0.
    pub seq: u64,
    /// When the router received it; 0 until then.
    pub t_router_in: u64,
    /// Where the tick's encoding sits in its frame, from its array header through its
    /// `injector`: the router forwards these bytes as they came and writes only the fields
    /// that follow (differences from the previous tick of the batch it builds, its stamp
    /// among them), instead of encoding every field again.
    pub encoded: (u32, u32),
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

    /// The tick's first fields as encoded in its frame, through its `injector`.
    #[inline]
    pub fn encoded<'a>(&self, frame: &'a [u8]) -> &'a [u8] {
        &frame[self.encoded.0 as usize..self.encoded.1 as usize]
    }

    /// Why the tick cannot be processed, if it cannot.
    #[inline]
    pub fn invalid_reason(&self) -> Option<&'static str> {
        if self.symbol.is_empty() {
            Some("empty_symbol")
        } else if self.symbol.len() > crate::wire::MAX_SYMBOL_BYTES {
            Some("symbol_too_long")
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
    /// Intended send time at the injector.
    pub t_inject: u64,
    /// Receipt at the router.
    pub t_router_in: u64,
    /// Departure from the router.
    pub t_router_out: u64,
    /// Receipt at the worker.
    pub t_worker_in: u64,
    /// Exit from the engine (after the batch that held the tick).
    pub t_engine_out: u64,
}

/// A decoded output; the symbol is a byte range into its frame, as for [`TickRecord`].
#[derive(Clone, Debug, PartialEq)]
pub struct OutputRecord {
    /// The query's index in the rule set its worker had in force when it sent the output
    /// (announced to the collector by a `Rules` frame on the same socket).
    pub rule: u32,
    /// Byte range of the symbol in the frame; [`OutputRecord::symbol`] reads it.
    pub symbol: Range<usize>,
    /// The price column of the query's output.
    pub price: f64,
    /// The value column of the query's output.
    pub value: f64,
    /// The stream of the tick that caused it.
    pub injector: u32,
    /// That tick's sequence number in its stream.
    pub seq: u64,
    /// The hop timestamps of that tick, up to the engine's exit.
    pub stamps: Stamps,
}

impl OutputRecord {
    /// The symbol, resolved against the frame the record was decoded from.
    pub fn symbol<'a>(&self, frame: &'a [u8]) -> &'a str {
        std::str::from_utf8(&frame[self.symbol.clone()]).unwrap_or("")
    }

    /// The symbol's UTF-8 bytes (checked when the frame was decoded).
    #[inline]
    pub fn symbol_bytes<'a>(&self, frame: &'a [u8]) -> &'a [u8] {
        &frame[self.symbol.clone()]
    }
}
