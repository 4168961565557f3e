//! The injector: registers its streams with the router, waits for the start, then sends
//! ticks on one PUSH connection per stream, paced to each tick's intended send time, and
//! ends every stream with an end-of-stream marker carrying its count: when its source or its
//! `--count`/`--duration` is done, or when it is stopped (a graceful stop loses nothing).
//!
//! Latency is measured from the *intended* send time, so a stalled pipeline cannot hide its
//! stall by slowing the injector down (no coordinated omission).
//!
//! - [`config`]: flags and their validation.
//! - [`metrics`]: what the injector exposes to Prometheus.
//! - [`source`]: where ticks come from (the GBM model or a replay file), split per stream.
//! - [`pacing`]: the schedule of intended send times.
//! - [`stream`]: one stream's sending, sans I/O: what is due, batches, the end marker.
//! - [`sending`]: the run: registration, a thread per stream carrying out its [`stream`].
//! - [`liveness`]: its heartbeats to the router, and the router's word that ends it.
//! - [`stop`]: how it is told to stop (gracefully, or at once).

#[cfg(feature = "driver")]
pub mod config;
#[cfg(feature = "driver")]
pub mod liveness;
pub mod metrics;
pub mod pacing;
#[cfg(feature = "driver")]
pub mod sending;
pub mod source;
pub mod stop;
pub mod stream;

#[cfg(feature = "driver")]
pub use config::InjectorConfig;
#[cfg(feature = "driver")]
pub use sending::{run, run_in, InjectorReport};
pub use stop::Stop;
