//! The reference workload, named once: the stream every default run, benchmark and
//! comparison uses unless told otherwise (docs/BENCHMARKS.md).
//!
//! - [`SYMBOLS`]: how many symbols the model sends (`S0000` .. `S1469`).
//! - [`SEED`]: the seed of the GBM price model ([`crate::gbm`]).
//! - [`BATCH`]: the most events in one batch on every hop ([`crate::wire::DEFAULT_BATCH`]).
//!
//! Golden tests keep their literals: there the number itself is what is checked.

/// Symbols of the reference stream.
pub const SYMBOLS: usize = 1470;

/// Seed of the reference stream's price model.
pub const SEED: u64 = 42;

/// Most events in one batch on every hop, unless configured otherwise (the wire format's
/// default; batches fill only while input is waiting, so this bounds size, not latency).
pub use crate::wire::DEFAULT_BATCH as BATCH;
