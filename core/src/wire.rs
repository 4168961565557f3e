//! The wire format: one ZeroMQ message is one MessagePack frame.
//!
//! Every frame is a MessagePack array whose first three elements are
//! `[version: uint, kind: uint, sender: uint]`; the rest depends on the kind. See
//! `docs/PROTOCOL.md` for the full description and the golden-byte tests below for the exact
//! bytes. Hot frames (ticks, outputs) are written and read by hand (`msgpack`), into reused
//! buffers, so that a batch costs no allocation per event; cold frames (markers, reports,
//! control) carry a `rmp-serde` body (structs as arrays).

use crate::msgpack::{self, DecodeError, Reader};
use crate::tick::{OutputRecord, Stamps, TickRecord};

/// The protocol version this build speaks. A frame of any other version is rejected.
pub const PROTOCOL_VERSION: u8 = 16;

/// Most events in one batch, on every hop, unless configured otherwise. Batches fill only
/// while input is waiting (smart batching), so this bounds size, not latency.
pub const DEFAULT_BATCH: usize = 4096;

/// Frames above this size are rejected unread (they are counted as `oversized`).
pub const DEFAULT_MAX_FRAME_BYTES: usize = 16 << 20;

/// Batches go once they take this many bytes, whatever their count: with symbols of at most
/// [`MAX_SYMBOL_BYTES`], a batch (one more record included) stays far below the smallest frame
/// limit a receiver takes ([`MIN_MAX_FRAME_BYTES`]), so no hop rejects its own sender's frames.
pub const MAX_BATCH_BYTES: usize = 256 << 10;

/// The smallest `--max-frame-bytes` a role takes.
pub const MIN_MAX_FRAME_BYTES: usize = 1 << 20;

/// The longest symbol, in bytes (UTF-8): a longer one is refused where it enters (the replay
/// reader names its line) and rejected as `symbol_too_long` by every receiver.
pub const MAX_SYMBOL_BYTES: usize = 255;

/// What a frame carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameKind {
    /// A batch of ticks: injector -> router, router -> worker.
    Ticks = 1,
    /// End of one injector stream: injector -> router -> every worker.
    EndOfStream = 2,
    /// A batch of outputs: worker -> collector.
    Outputs = 3,
    /// Periodic progress of a worker: worker -> collector.
    WorkerProgress = 4,
    /// A worker's final accounting, after every stream ended: worker -> collector.
    WorkerReport = 5,
    /// The router's final accounting: router -> collector.
    RouterReport = 6,
    /// A process asks to join the run: any role -> router (control socket).
    Register = 7,
    /// The run starts: router -> every registered process (control socket).
    Ready = 8,
    /// Registration refused, with the reason: router -> process (control socket).
    Refused = 9,
    /// Asks for the collector's time: any node -> collector (clock socket).
    ClockRequest = 10,
    /// The collector's time: collector -> node (clock socket).
    ClockReply = 11,
    /// A node's clock offset to the collector: any node -> collector.
    ClockReport = 12,
    /// "Tell me when the run is over": a node that has sent everything -> router (control).
    AwaitEnd = 13,
    /// The collector has everything (or gave up): collector -> router (control).
    RunFinished = 14,
    /// The run is over; sockets may close: router -> waiting node or collector (control).
    EndAck = 15,
    /// The rule set a worker now runs (query names by index): worker -> collector, before
    /// the first output under it.
    Rules = 16,
    /// Switch to new rules here, between the ticks before and after: router -> every worker,
    /// in the data stream.
    SwitchRules = 17,
    /// A new rules file for the running cluster: `cep rules deploy` -> router (control).
    Deploy = 18,
    /// The rules were accepted and where the stream switches: router -> deployer (control).
    Deployed = 19,
    /// Outputs that no tick caused: the windows still open when the input ended (the
    /// end-of-input watermark closes them): worker -> collector, after every stream ended.
    FinalOutputs = 20,
    /// Export these symbols' state for another worker: router -> their owner, in its data
    /// stream (live rescaling, [`crate::rescale`]).
    HandOff = 21,
    /// Symbols' state: old owner -> router (control), router -> new owner (data stream).
    SymbolState = 22,
    /// The router took a worker's state: router -> worker (control).
    StateTaken = 23,
    /// No more ticks; report and exit: router -> a leaving worker, in its data stream.
    Retire = 24,
    /// Drain a worker: operator or the worker itself -> router (control).
    Leave = 25,
    /// A rescale was accepted: router -> the client that asked (control).
    RescaleAccepted = 26,
    /// Asks for the membership: `cep cluster status` -> router (control).
    StatusRequest = 27,
    /// The membership and the move in progress: router -> the client that asked (control).
    ClusterStatus = 28,
    /// A rescale began, with the symbols that move: router -> collector.
    RescaleStarted = 29,
    /// A rescale ended, with its figures: router -> collector.
    Rescaled = 30,
    /// New injector streams exist: router -> every worker, in its data stream.
    StreamsOpened = 31,
    /// "You are member `index`; answer Reached": router -> a joining worker, its first frame.
    Welcome = 32,
    /// A joining worker got Welcome (the router can reach it): worker -> router (control).
    Reached = 33,
    /// "Snapshot your state here": router -> every worker, in its data stream (failover,
    /// [`crate::failover`]).
    Checkpoint = 34,
    /// A worker's state at a checkpoint: worker -> router (control).
    Snapshot = 35,
    /// A dead worker's symbols restored: router -> a survivor, in its data stream.
    Restore = 36,
    /// A worker died and its symbols moved: router -> collector.
    WorkerFailed = 37,
    /// The outputs before a checkpoint barrier were all sent: worker -> collector.
    CheckpointMark = 38,
    // 39 was OutputsConfirmed, now a part of Saved.
    /// A frame to the collector with its source, position and collector incarnation: worker
    /// or router -> collector ([`crate::delivery`]).
    Sequenced = 40,
    /// The collector saved every frame up to these positions: collector -> router (control).
    Saved = 41,
    /// Where is the collector and what did it save of mine, from now on: worker -> router
    /// (control), once.
    DeliveryQuery = 42,
    /// The answer: router -> worker (control).
    DeliveryStatus = 43,
    /// A survivor restored a dead worker's symbols: worker -> collector, ahead of the
    /// outputs of their replayed ticks ([`crate::failover`]).
    Restored = 44,
    /// A worker joined the running cluster, with the key it registered with: router ->
    /// collector ([`crate::rescale`]).
    WorkerJoined = 45,
    /// What the collector saved of a worker's frames changed, or the collector did: router ->
    /// the worker (control, pushed unasked after its DeliveryQuery).
    Committed = 46,
    /// A worker's proof that its loop turns: worker -> router (control, never answered unless
    /// it was fenced).
    Heartbeat = 47,
    /// The worker was taken for dead and is fenced: router -> that worker (control, in answer
    /// to whatever it sends, heartbeats included).
    Fenced = 48,
    /// An injector's proof that it lives, with how far each of its streams got: injector ->
    /// router (control, never answered unless it was fenced).
    InjectorHeartbeat = 49,
    /// The router gives the run up (the collector lost beyond its retention, no worker left):
    /// router -> every standing link it knows, pushed just before it exits.
    Abandoned = 50,
    /// Periodic progress of the router: ticks received so far: router -> collector.
    RouterProgress = 51,
}

impl FrameKind {
    /// Control frames that pair with no request: heartbeats (never answered, but by Fenced),
    /// the notices the router pushes unasked, and Fenced.
    pub fn is_notice(self) -> bool {
        matches!(
            self,
            FrameKind::Heartbeat
                | FrameKind::InjectorHeartbeat
                | FrameKind::Committed
                | FrameKind::Fenced
                | FrameKind::Abandoned
        )
    }

    /// Whether a frame whose kind byte is `byte` is a notice ([`Self::is_notice`]).
    pub fn is_notice_byte(byte: u8) -> bool {
        FrameKind::from_byte(byte).is_some_and(FrameKind::is_notice)
    }

    /// Control requests a worker sends about itself, naming itself in the header: each is a
    /// sign of life, and each is refused once the worker is fenced.
    pub fn from_a_worker(self) -> bool {
        matches!(
            self,
            FrameKind::Heartbeat
                | FrameKind::SymbolState
                | FrameKind::Reached
                | FrameKind::Snapshot
                | FrameKind::DeliveryQuery
        )
    }

    /// The kind a header's byte names; `None` for a byte no kind has.
    pub fn from_byte(byte: u8) -> Option<FrameKind> {
        use FrameKind::*;
        [
            Ticks,
            EndOfStream,
            Outputs,
            WorkerProgress,
            WorkerReport,
            RouterReport,
            Register,
            Ready,
            Refused,
            ClockRequest,
            ClockReply,
            ClockReport,
            AwaitEnd,
            RunFinished,
            EndAck,
            Rules,
            SwitchRules,
            Deploy,
            Deployed,
            FinalOutputs,
            HandOff,
            SymbolState,
            StateTaken,
            Retire,
            Leave,
            RescaleAccepted,
            StatusRequest,
            ClusterStatus,
            RescaleStarted,
            Rescaled,
            StreamsOpened,
            Welcome,
            Reached,
            Checkpoint,
            Snapshot,
            Restore,
            WorkerFailed,
            CheckpointMark,
            Sequenced,
            Saved,
            DeliveryQuery,
            DeliveryStatus,
            Restored,
            WorkerJoined,
            Committed,
            Heartbeat,
            Fenced,
            InjectorHeartbeat,
            Abandoned,
            RouterProgress,
        ]
        .into_iter()
        .find(|kind| *kind as u8 == byte)
    }
}

/// Why a frame was rejected; each variant is one counted cause.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum WireError {
    /// The bytes are not a frame of this protocol.
    #[error("malformed frame: {0}")]
    Malformed(String),
    /// A well-formed frame of another protocol version.
    #[error("protocol version {got} (this build speaks {PROTOCOL_VERSION})")]
    Version {
        /// The version the frame says it is.
        got: u64,
    },
    /// A frame kind this build does not know, or one not expected on this socket.
    #[error("unexpected frame kind {0}")]
    UnexpectedKind(u64),
    /// A frame larger than the receiver accepts.
    #[error("oversized frame: {len} bytes (limit {max})")]
    Oversized {
        /// The frame's size, in bytes.
        len: usize,
        /// The receiver's limit, in bytes.
        max: usize,
    },
}

impl WireError {
    /// The cause's name in counters and summaries.
    pub fn cause(&self) -> &'static str {
        match self {
            WireError::Malformed(_) => "malformed",
            WireError::Version { .. } => "bad_version",
            WireError::UnexpectedKind(_) => "unexpected_kind",
            WireError::Oversized { .. } => "oversized",
        }
    }
}

fn malformed(error: DecodeError) -> WireError {
    WireError::Malformed(error.to_string())
}

/// The first three elements of every frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// What the frame carries.
    pub kind: FrameKind,
    /// Who sent it: an injector stream id, a worker index, or `ROUTER_ID` for the router; logged with
    /// every rejection.
    pub sender: u32,
    /// Number of elements in the frame's top-level array.
    fields: u32,
    /// Where the kind-specific part starts.
    body_at: usize,
}

/// Reads and checks a frame's header; returns it and the bytes after it.
pub fn read_header(frame: &[u8]) -> Result<(FrameHeader, &[u8]), WireError> {
    let mut rd = Reader::new(frame);
    let fields = rd.array_len().map_err(malformed)?;
    if fields < 3 {
        return Err(WireError::Malformed(format!("frame has {fields} elements, need at least 3")));
    }
    let version = rd.uint().map_err(malformed)?;
    if version != PROTOCOL_VERSION as u64 {
        return Err(WireError::Version { got: version });
    }
    let kind = rd.uint().map_err(malformed)?;
    let kind = u8::try_from(kind).ok().and_then(FrameKind::from_byte).ok_or(WireError::UnexpectedKind(kind))?;
    let sender = rd.u32().map_err(malformed)?;
    let body_at = rd.position();
    Ok((FrameHeader { kind, sender, fields, body_at }, &frame[body_at..]))
}

/// Like [`read_header`], but also rejects frames larger than `max_bytes`.
pub fn check_frame(frame: &[u8], max_bytes: usize) -> Result<(FrameHeader, &[u8]), WireError> {
    if frame.len() > max_bytes {
        return Err(WireError::Oversized { len: frame.len(), max: max_bytes });
    }
    read_header(frame)
}

pub(crate) fn write_header(buf: &mut Vec<u8>, fields: u8, kind: FrameKind, sender: u32) {
    msgpack::write_fixarray(buf, fields);
    msgpack::write_uint(buf, PROTOCOL_VERSION as u64);
    msgpack::write_uint(buf, kind as u64);
    msgpack::write_uint(buf, sender as u64);
}

/// Reserves a u64 (always 9 bytes) to be patched when the batch is sealed; returns where.
fn reserve_u64(buf: &mut Vec<u8>) -> usize {
    let at = buf.len();
    buf.push(0xcf);
    buf.extend_from_slice(&[0; 8]);
    at
}

/// Reserves an array32 length (always 5 bytes) to be patched when the batch is sealed;
/// returns where.
fn reserve_array32(buf: &mut Vec<u8>) -> usize {
    let at = buf.len();
    buf.push(0xdd);
    buf.extend_from_slice(&[0; 4]);
    at
}

/// The values a batch's records are written against: a record's sequence number and stamps
/// are written as their differences from the previous record's (the first record's from 0),
/// modulo 2^64 as signed 64-bit integers, so the ticks of one batch, a few hundred
/// nanoseconds and one sequence number apart, cost a byte or three where a whole stamp costs
/// nine. Fewer bytes is less to encrypt, copy and parse on every hop.
#[derive(Clone, Copy, Debug, Default)]
struct Chain {
    seq: u64,
    t_inject: u64,
    t_router_in: u64,
}

impl Chain {
    #[inline]
    fn write(&mut self, buf: &mut Vec<u8>, seq: u64, t_inject: u64, t_router_in: u64) {
        msgpack::write_int(buf, seq.wrapping_sub(self.seq) as i64);
        msgpack::write_int(buf, t_inject.wrapping_sub(self.t_inject) as i64);
        msgpack::write_int(buf, t_router_in.wrapping_sub(self.t_router_in) as i64);
        *self = Chain { seq, t_inject, t_router_in };
    }

    /// Reads the next record's `(seq, t_inject, t_router_in)`. Any three 64-bit signed integers
    /// decode (the sums wrap), so a forged difference gives a wrong number, never a panic.
    #[inline]
    fn read(&mut self, rd: &mut Reader<'_>) -> Result<(u64, u64, u64), DecodeError> {
        self.seq = self.seq.wrapping_add(rd.int()? as u64);
        self.t_inject = self.t_inject.wrapping_add(rd.int()? as u64);
        self.t_router_in = self.t_router_in.wrapping_add(rd.int()? as u64);
        Ok((self.seq, self.t_inject, self.t_router_in))
    }
}

/// Builds a frame of many records into one reused buffer: the batch's stamps and its record
/// count are patched in when the batch is sealed, so nothing is copied twice.
#[derive(Debug)]
struct BatchBuffer<const STAMPS: usize> {
    buf: Vec<u8>,
    count: u32,
    count_at: usize,
    stamps_at: usize,
    chain: Chain,
}

impl<const STAMPS: usize> BatchBuffer<STAMPS> {
    fn new(kind: FrameKind, sender: u32) -> Self {
        let mut buf = Vec::with_capacity(64 * 1024);
        write_header(&mut buf, 4 + STAMPS as u8, kind, sender);
        let stamps_at = buf.len();
        for _ in 0..STAMPS {
            reserve_u64(&mut buf);
        }
        let count_at = reserve_array32(&mut buf);
        BatchBuffer { buf, count: 0, count_at, stamps_at, chain: Chain::default() }
    }

    fn clear(&mut self) {
        self.buf.truncate(self.count_at + 5);
        self.count = 0;
        self.chain = Chain::default();
    }

    fn seal(&mut self, stamps: [u64; STAMPS]) -> &[u8] {
        for (i, stamp) in stamps.iter().enumerate() {
            let at = self.stamps_at + 9 * i + 1;
            self.buf[at..at + 8].copy_from_slice(&stamp.to_be_bytes());
        }
        self.buf[self.count_at + 1..self.count_at + 5].copy_from_slice(&self.count.to_be_bytes());
        &self.buf
    }
}

/// Writes `[version, Ticks, sender, t_sent, [[symbol, price, event_offset, injector, seq,
/// t_inject, t_router_in], ...]]`, where `event_offset` is the tick's event time minus
/// `t_inject` (signed; 0 for generated ticks, whose event time is their intended send time)
/// and the last three are differences from the previous tick's ([`Chain`]).
#[derive(Debug)]
pub struct TickBatchWriter(BatchBuffer<1>);

impl TickBatchWriter {
    /// An empty batch of Ticks frames from `sender`.
    pub fn new(sender: u32) -> Self {
        TickBatchWriter(BatchBuffer::new(FrameKind::Ticks, sender))
    }

    /// Appends a tick; `symbol` is UTF-8. Both times are below 2^63 ns (the year 2262; replay
    /// files are checked for it), so their difference fits the signed offset.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub fn push(
        &mut self,
        symbol: &[u8],
        price: f64,
        t_inject: u64,
        t_event: u64,
        injector: u32,
        seq: u64,
        t_router_in: u64,
    ) {
        let buf = &mut self.0.buf;
        msgpack::write_fixarray(buf, 7);
        msgpack::write_str(buf, symbol);
        msgpack::write_f64(buf, price);
        msgpack::write_int(buf, t_event.wrapping_sub(t_inject) as i64);
        msgpack::write_uint(buf, injector as u64);
        self.0.chain.write(buf, seq, t_inject, t_router_in);
        self.0.count += 1;
    }

    /// Appends a decoded tick with a new `t_router_in`, its first fields copied as they came
    /// (`encoded`, [`TickRecord::encoded`]): what a hop that only stamps its arrival sends on.
    #[inline]
    pub fn push_encoded(&mut self, encoded: &[u8], tick: &TickRecord, t_router_in: u64) {
        self.0.buf.extend_from_slice(encoded);
        self.0.chain.write(&mut self.0.buf, tick.seq, tick.t_inject, t_router_in);
        self.0.count += 1;
    }

    /// Number of ticks in the batch.
    pub fn len(&self) -> usize {
        self.0.count as usize
    }

    /// Whether the batch is to go: `limit` ticks, or [`MAX_BATCH_BYTES`] (a batch of long
    /// symbols stays far below any receiver's frame limit).
    pub fn is_full(&self, limit: usize) -> bool {
        self.len() >= limit || self.0.buf.len() >= MAX_BATCH_BYTES
    }

    /// Whether the batch holds no tick.
    pub fn is_empty(&self) -> bool {
        self.0.count == 0
    }

    /// Stamps the send time into the batch and returns the frame; call [`Self::clear`] after sending.
    pub fn seal(&mut self, t_sent: u64) -> &[u8] {
        self.0.seal([t_sent])
    }

    /// Empties the batch, keeping its buffer, for the next ticks.
    pub fn clear(&mut self) {
        self.0.clear()
    }
}

/// Writes `[version, Outputs, sender, t_router_out, t_worker_in, t_engine_out, [[rule, symbol,
/// price, value, injector, seq, t_inject, t_router_in], ...]]`: one batch holds the outputs of
/// ticks that left the router, reached the worker and left the engine together, so those
/// three stamps are the batch's. `seq`, `t_inject` and `t_router_in` are differences from the
/// previous output's ([`Chain`]); `symbol` and `price` are nil when they are the previous
/// output's (a tick's outputs follow one another). The same layout as kind FinalOutputs
/// carries the outputs of windows closed by the end of input, which no tick caused.
#[derive(Debug)]
pub struct OutputBatchWriter {
    batch: BatchBuffer<3>,
    /// The last price's bits.
    last_price: u64,
}

impl OutputBatchWriter {
    /// An empty batch of Outputs frames from `sender`.
    pub fn new(sender: u32) -> Self {
        OutputBatchWriter::of(FrameKind::Outputs, sender)
    }

    /// A writer of FinalOutputs frames: `injector` and `seq` name the end-of-stream marker
    /// that closed the window (the stream and its `sent` count); the tick stamps are 0.
    pub fn final_outputs(sender: u32) -> Self {
        OutputBatchWriter::of(FrameKind::FinalOutputs, sender)
    }

    fn of(kind: FrameKind, sender: u32) -> Self {
        OutputBatchWriter { batch: BatchBuffer::new(kind, sender), last_price: 0 }
    }

    /// Appends an output; `symbol` is UTF-8. `symbol_as_before` says the caller knows it is
    /// the previous output's (the outputs of one tick): it is then written as nil, unless the
    /// batch is empty. The writer does not compare symbols itself: a comparison per output
    /// costs more than the bytes it saves.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub fn push(
        &mut self,
        rule: u32,
        symbol: &[u8],
        symbol_as_before: bool,
        price: f64,
        value: f64,
        injector: u32,
        seq: u64,
        t_inject: u64,
        t_router_in: u64,
    ) {
        let first = self.batch.count == 0;
        let buf = &mut self.batch.buf;
        msgpack::write_fixarray(buf, 8);
        msgpack::write_uint(buf, rule as u64);
        if !first && symbol_as_before {
            msgpack::write_nil(buf);
        } else {
            msgpack::write_str(buf, symbol);
        }
        if !first && price.to_bits() == self.last_price {
            msgpack::write_nil(buf);
        } else {
            msgpack::write_f64(buf, price);
            self.last_price = price.to_bits();
        }
        msgpack::write_f64(buf, value);
        msgpack::write_uint(buf, injector as u64);
        self.batch.chain.write(buf, seq, t_inject, t_router_in);
        self.batch.count += 1;
    }

    /// Number of outputs in the batch.
    pub fn len(&self) -> usize {
        self.batch.count as usize
    }

    /// Whether the batch is to go: `limit` outputs, or [`MAX_BATCH_BYTES`].
    pub fn is_full(&self, limit: usize) -> bool {
        self.len() >= limit || self.batch.buf.len() >= MAX_BATCH_BYTES
    }

    /// Whether the batch holds no output.
    pub fn is_empty(&self) -> bool {
        self.batch.count == 0
    }

    /// Stamps the batch and returns the frame; call [`Self::clear`] after sending.
    pub fn seal(&mut self, t_router_out: u64, t_worker_in: u64, t_engine_out: u64) -> &[u8] {
        self.batch.seal([t_router_out, t_worker_in, t_engine_out])
    }

    /// Empties the batch, keeping its buffer, for the next outputs.
    pub fn clear(&mut self) {
        self.batch.clear()
    }
}

/// Reads a symbol's range and checks it is UTF-8 (once, so later lookups can use bytes).
#[inline]
fn read_symbol(frame: &[u8], rd: &mut Reader<'_>) -> Result<std::ops::Range<usize>, WireError> {
    let range = rd.str_range().map_err(malformed)?;
    // Symbols are ASCII in practice: checked inline, the full UTF-8 check only otherwise.
    let bytes = &frame[range.clone()];
    if !bytes.is_ascii() && std::str::from_utf8(bytes).is_err() {
        return Err(WireError::Malformed(format!("symbol at byte {} is not UTF-8", range.start)));
    }
    Ok(range)
}

impl FrameHeader {
    /// Where the kind-specific part of the frame starts.
    pub fn body_at(&self) -> usize {
        self.body_at
    }

    /// Checks that the frame is of `kind` and has that kind's number of elements.
    pub fn expect(&self, kind: FrameKind, fields: u32) -> Result<(), WireError> {
        if self.kind != kind {
            return Err(WireError::UnexpectedKind(self.kind as u64));
        }
        if self.fields != fields {
            return Err(WireError::Malformed(format!(
                "{:?} frame has {} elements, expected {fields}",
                kind, self.fields
            )));
        }
        Ok(())
    }
}

/// Decodes a whole tick batch into `out` (cleared first) and returns its send stamp. A frame
/// that fails anywhere is rejected whole, so no tick of a broken frame is half-processed.
pub fn decode_ticks(
    frame: &[u8],
    header: &FrameHeader,
    _rest: &[u8],
    out: &mut Vec<TickRecord>,
) -> Result<u64, WireError> {
    header.expect(FrameKind::Ticks, 5)?;
    if u32::try_from(frame.len()).is_err() {
        return Err(WireError::Malformed(format!("a tick frame of {} bytes (4 GiB at most)", frame.len())));
    }
    out.clear();
    let mut rd = Reader::at(frame, header.body_at);
    let t_sent = rd.uint().map_err(malformed)?;
    let count = rd.array_len().map_err(malformed)?;
    // Each tick takes at least 12 bytes; a count beyond that is a lie, not a reason to allocate.
    if count as usize > rd.remaining() / 12 + 1 {
        return Err(WireError::Malformed(format!("tick count {count} exceeds the frame")));
    }
    // Room for a batch at most: a frame of more grows it as its records actually decode.
    out.reserve((count as usize).min(2 * DEFAULT_BATCH));
    let mut chain = Chain::default();
    for _ in 0..count {
        let start = rd.position();
        rd.array_of(7, "a tick of 7 fields").map_err(malformed)?;
        let symbol = read_symbol(frame, &mut rd)?;
        let price = rd.float().map_err(malformed)?;
        let offset_at = rd.position();
        let offset = rd.int().map_err(malformed)?;
        let injector = rd.u32().map_err(malformed)?;
        // The frame is below 4 GiB (checked above).
        let encoded = (start as u32, rd.position() as u32);
        let (seq, t_inject, t_router_in) = chain.read(&mut rd).map_err(malformed)?;
        let t_event = t_inject.checked_add_signed(offset).ok_or_else(|| {
            WireError::Malformed(format!("event offset at byte {offset_at} puts the event time out of range"))
        })?;
        out.push(TickRecord { symbol, price, t_inject, t_event, injector, seq, t_router_in, encoded });
    }
    if rd.remaining() != 0 {
        return Err(WireError::Malformed(format!("{} trailing bytes", rd.remaining())));
    }
    Ok(t_sent)
}

/// Decodes a whole output batch (an Outputs or a FinalOutputs frame) into `out` (cleared first).
pub fn decode_outputs(
    frame: &[u8],
    header: &FrameHeader,
    _rest: &[u8],
    out: &mut Vec<OutputRecord>,
) -> Result<(), WireError> {
    let kind = if header.kind == FrameKind::FinalOutputs { FrameKind::FinalOutputs } else { FrameKind::Outputs };
    header.expect(kind, 7)?;
    out.clear();
    let mut rd = Reader::at(frame, header.body_at);
    let t_router_out = rd.uint().map_err(malformed)?;
    let t_worker_in = rd.uint().map_err(malformed)?;
    let t_engine_out = rd.uint().map_err(malformed)?;
    let count = rd.array_len().map_err(malformed)?;
    // Each output takes at least 13 bytes (a nil symbol and price, an f32 value).
    if count as usize > rd.remaining() / 13 + 1 {
        return Err(WireError::Malformed(format!("output count {count} exceeds the frame")));
    }
    // Room for a batch at most: a frame of more grows it as its records actually decode.
    out.reserve((count as usize).min(2 * DEFAULT_BATCH));
    let mut chain = Chain::default();
    let (mut symbol, mut price) = (None, None);
    for _ in 0..count {
        rd.array_of(8, "an output of 8 fields").map_err(malformed)?;
        let rule = rd.u32().map_err(malformed)?;
        let at = rd.position();
        if !rd.nil() {
            symbol = Some(read_symbol(frame, &mut rd)?);
        }
        let symbol = symbol
            .clone()
            .ok_or_else(|| WireError::Malformed(format!("nil symbol at byte {at} names none before it")))?;
        let at = rd.position();
        if !rd.nil() {
            price = Some(rd.float().map_err(malformed)?);
        }
        let price =
            price.ok_or_else(|| WireError::Malformed(format!("nil price at byte {at} names none before it")))?;
        let value = rd.float().map_err(malformed)?;
        let injector = rd.u32().map_err(malformed)?;
        let (seq, t_inject, t_router_in) = chain.read(&mut rd).map_err(malformed)?;
        let stamps = Stamps { t_inject, t_router_in, t_router_out, t_worker_in, t_engine_out };
        out.push(OutputRecord { rule, symbol, price, value, injector, seq, stamps });
    }
    if rd.remaining() != 0 {
        return Err(WireError::Malformed(format!("{} trailing bytes", rd.remaining())));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
