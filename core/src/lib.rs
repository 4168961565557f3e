//! Shared vocabulary of the cluster.
//!
//! - [`tick`]: ticks, outputs and the hop timestamps they carry.
//! - [`msgpack`]: the hand-written MessagePack reader and writer of the hot frames.
//! - [`wire`]: the versioned MessagePack frame format (the only place that encodes or decodes bytes).
//! - [`frame`]: typed frames: each body knows its kind; a decoded batch carries its frame.
//! - [`outbox`]: where a role's core sends frames, and the clock it stamps them with.
//! - [`identity`]: the one `Role`, role sets, public keys, and who sent a frame (no socket library).
//! - [`control`]: registration and start-up messages exchanged with the router.
//! - [`report`]: end-of-run reports that workers and the router send to the collector.
//! - [`rescale`]: live rescaling: symbols' state moving between workers, membership requests.
//! - [`failover`]: checkpoints of each worker's state, and a dead worker's symbols restored elsewhere.
//! - [`store`]: the checkpoint store workers write their snapshot parts to and restore from.
//! - [`symbol_map`]: maps keyed by symbol bytes, with an inline comparison for the per-tick lookups.
//! - [`liveness`]: heartbeats from the workers, and the notice that fences a worker taken for dead.
//! - [`delivery`]: frames to the collector held by their sender until the collector saved them.
//! - [`results`]: the `summary.json` schema that tests, benchmarks and users read.
//! - [`replay`]: tick files (replay input and recorded input), event time in their own unit.
//! - [`gbm`]: the seeded, counter-based geometric-Brownian-motion tick model.
//! - [`partition`]: the consistent-hash ring with its pinned hasher.
//! - [`reference`](mod@reference): the reference workload's constants (1,470 symbols, seed 42, batch size).
//! - [`clock`]: wall-clock nanoseconds, the unit of every timestamp.
//! - [`io_text`]: I/O errors as one plain line.
//! - [`duration`]: parsing of `30s` / `500ms` style durations for every CLI.

pub mod clock;
pub mod control;
pub mod delivery;
pub mod duration;
pub mod failover;
pub mod frame;
pub mod gbm;
pub mod identity;
pub mod io_text;
pub mod liveness;
pub mod msgpack;
pub mod outbox;
pub mod partition;
pub mod reference;
pub mod replay;
pub mod report;
pub mod rescale;
pub mod results;
pub mod store;
pub mod symbol_map;
pub mod tick;
pub mod wire;
