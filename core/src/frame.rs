//! Typed frames: every body knows its frame kind, and a received frame travels with the
//! records read from it.
//!
//! Cold frames (markers, reports, control) are `[version, kind, sender, body]` with an
//! `rmp-serde` body; each body type implements [`Body`], which names its [`FrameKind`], so a
//! body can never be sent under another kind. Hot frames (ticks, outputs) are decoded by
//! hand into reused record buffers ([`crate::wire`]); a decoded batch is one value,
//! [`TickBatch`] or [`OutputBatch`], that holds the frame's bytes and its records, so a
//! record's symbol is always resolved against the frame it came from.

use crate::control::{Deploy, Deployed, Ready, Refused, Register, RulesText};
use crate::delivery::{Committed, DeliveryQuery, DeliveryStatus, Saved, Sequenced};
use crate::failover::{Checkpoint, CheckpointMark, Restore, Restored, Snapshot, WorkerFailed};
use crate::liveness::{Abandoned, Fenced, Heartbeat, InjectorHeartbeat};
use crate::report::{
    ClockReport, EndOfStream, RouterProgress, RouterReport, RulesInstalled, WorkerProgress, WorkerReport,
};
use crate::rescale::{
    ClusterStatus, HandOff, Leave, Reached, RescaleAccepted, RescaleStarted, Rescaled, Retire, StateTaken,
    StatusRequest, StreamsOpened, SymbolState, Welcome, WorkerJoined,
};
use crate::tick::{OutputRecord, TickRecord};
use crate::wire::{check_frame, decode_outputs, decode_ticks, write_header, FrameHeader, FrameKind, WireError};
use serde::{de::DeserializeOwned, Deserialize, Serialize};

/// The body of a cold frame: it knows the kind it travels as.
pub trait Body: Serialize + DeserializeOwned {
    /// The frame kind this body is sent as (and the only one it is decoded from).
    const KIND: FrameKind;

    /// Encodes `[version, KIND, sender, body]`, the body as a MessagePack array.
    fn encode(&self, sender: u32) -> Vec<u8> {
        let mut buf = Vec::with_capacity(128);
        self.encode_into(sender, &mut buf);
        buf
    }

    /// [`Self::encode`] into `buf` (emptied first), reusing its memory.
    fn encode_into(&self, sender: u32, buf: &mut Vec<u8>) {
        buf.clear();
        write_header(buf, 4, Self::KIND, sender);
        rmp_serde::encode::write(buf, self).expect("serialising a control body into memory cannot fail");
    }

    /// Decodes the body of a frame whose header was read with [`crate::wire::read_header`];
    /// a frame of another kind, or with bytes left over, is rejected.
    fn decode(header: &FrameHeader, rest: &[u8]) -> Result<Self, WireError> {
        header.expect(Self::KIND, 4)?;
        let mut rd = rest;
        let body =
            rmp_serde::decode::from_read(&mut rd).map_err(|error| WireError::Malformed(format!("body: {error}")))?;
        if !rd.is_empty() {
            return Err(WireError::Malformed(format!("{} trailing bytes", rd.len())));
        }
        Ok(body)
    }
}

macro_rules! bodies {
    ($($body:ty => $kind:ident),* $(,)?) => {
        $(impl Body for $body {
            const KIND: FrameKind = FrameKind::$kind;
        })*
    };
}

bodies! {
    EndOfStream => EndOfStream,
    WorkerProgress => WorkerProgress,
    WorkerReport => WorkerReport,
    RouterReport => RouterReport,
    Register => Register,
    Ready => Ready,
    Refused => Refused,
    ClockRequest => ClockRequest,
    ClockReply => ClockReply,
    ClockReport => ClockReport,
    AwaitEnd => AwaitEnd,
    RunFinished => RunFinished,
    EndAck => EndAck,
    RulesInstalled => Rules,
    RulesText => SwitchRules,
    Deploy => Deploy,
    Deployed => Deployed,
    HandOff => HandOff,
    SymbolState => SymbolState,
    StateTaken => StateTaken,
    Retire => Retire,
    Leave => Leave,
    RescaleAccepted => RescaleAccepted,
    StatusRequest => StatusRequest,
    ClusterStatus => ClusterStatus,
    RescaleStarted => RescaleStarted,
    Rescaled => Rescaled,
    StreamsOpened => StreamsOpened,
    Welcome => Welcome,
    Reached => Reached,
    Checkpoint => Checkpoint,
    Snapshot => Snapshot,
    Restore => Restore,
    WorkerFailed => WorkerFailed,
    CheckpointMark => CheckpointMark,
    Saved => Saved,
    DeliveryQuery => DeliveryQuery,
    DeliveryStatus => DeliveryStatus,
    Committed => Committed,
    Restored => Restored,
    WorkerJoined => WorkerJoined,
    Heartbeat => Heartbeat,
    Fenced => Fenced,
    InjectorHeartbeat => InjectorHeartbeat,
    Abandoned => Abandoned,
    RouterProgress => RouterProgress,
}

/// Asks for the collector's time (no body: nil).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClockRequest;

/// The collector's time, read as late as possible before answering.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockReply {
    /// The collector's wall clock, ns since the epoch.
    pub now_ns: u64,
}

/// "Tell me when the run is over" (no body: nil).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AwaitEnd;

/// The collector has everything, or gave up (no body: nil).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunFinished;

/// The run is over; sockets may close (no body: nil).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EndAck;

/// Frames without a body carry nil (MessagePack's unit), as `()` does.
macro_rules! unit_bodies {
    ($($body:ident),*) => {
        $(impl Serialize for $body {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_unit()
            }
        }

        impl<'de> Deserialize<'de> for $body {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                <()>::deserialize(deserializer).map(|()| $body)
            }
        })*
    };
}

unit_bodies!(ClockRequest, AwaitEnd, RunFinished, EndAck, StateTaken, StatusRequest);

/// A received frame whose size and header passed the checks: its bytes and its header.
#[derive(Clone, Copy, Debug)]
pub struct Frame<'a> {
    bytes: &'a [u8],
    header: FrameHeader,
}

impl<'a> Frame<'a> {
    /// Checks a received frame's size and header.
    pub fn read(bytes: &'a [u8], max_bytes: usize) -> Result<Frame<'a>, WireError> {
        let (header, _) = check_frame(bytes, max_bytes)?;
        Ok(Frame { bytes, header })
    }

    /// What the frame carries.
    pub fn kind(&self) -> FrameKind {
        self.header.kind
    }

    /// The sender id in the frame's header.
    pub fn sender(&self) -> u32 {
        self.header.sender
    }

    /// The frame's header.
    pub fn header(&self) -> &FrameHeader {
        &self.header
    }

    /// The whole frame as received.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Decodes the body of a cold frame of `B`'s kind.
    pub fn body<B: Body>(&self) -> Result<B, WireError> {
        B::decode(&self.header, &self.bytes[self.header.body_at()..])
    }

    /// Reads a Sequenced envelope: the frame inside is checked like any received frame.
    pub fn sequenced(&self) -> Result<Sequenced<'a>, WireError> {
        self.header.expect(FrameKind::Sequenced, 6)?;
        Sequenced::read(self.header.sender, &self.bytes[self.header.body_at()..])
    }

    /// Decodes a tick batch whole into `records` (reused; cleared first).
    pub fn ticks<'r>(&self, records: &'r mut Vec<TickRecord>) -> Result<TickBatch<'r>, WireError>
    where
        'a: 'r,
    {
        let t_sent = decode_ticks(self.bytes, &self.header, &self.bytes[self.header.body_at()..], records)?;
        Ok(TickBatch { frame: self.bytes, sender: self.header.sender, t_sent, records })
    }

    /// Decodes an Outputs or a FinalOutputs frame whole into `records` (reused; cleared first).
    pub fn outputs<'r>(&self, records: &'r mut Vec<OutputRecord>) -> Result<OutputBatch<'r>, WireError>
    where
        'a: 'r,
    {
        decode_outputs(self.bytes, &self.header, &self.bytes[self.header.body_at()..], records)?;
        let closed_by_end = self.header.kind == FrameKind::FinalOutputs;
        Ok(OutputBatch { frame: self.bytes, sender: self.header.sender, closed_by_end, records })
    }
}

/// A decoded tick batch: the frame and its ticks, whose symbols point into it.
#[derive(Clone, Copy, Debug)]
pub struct TickBatch<'a> {
    frame: &'a [u8],
    /// The sender id in the frame's header.
    pub sender: u32,
    /// When the batch was sent (the router's exit stamp on a router -> worker hop).
    pub t_sent: u64,
    /// The ticks, in the order they were sent.
    pub records: &'a [TickRecord],
}

impl<'a> TickBatch<'a> {
    /// A tick's symbol bytes (UTF-8, checked at decoding).
    #[inline]
    pub fn symbol(&self, tick: &TickRecord) -> &'a [u8] {
        tick.symbol_bytes(self.frame)
    }

    /// A tick's encoding through its `injector`: what a hop that only stamps forwards as it came.
    #[inline]
    pub fn encoded(&self, tick: &TickRecord) -> &'a [u8] {
        tick.encoded(self.frame)
    }

    /// Number of ticks.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether the batch holds no tick.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

/// A decoded output batch: the frame and its outputs, whose symbols point into it.
#[derive(Clone, Copy, Debug)]
pub struct OutputBatch<'a> {
    frame: &'a [u8],
    /// The sending worker's index.
    pub sender: u32,
    /// A FinalOutputs frame: windows the end of input closed; no tick caused these outputs.
    pub closed_by_end: bool,
    /// The outputs, in the order they were produced.
    pub records: &'a [OutputRecord],
}

impl<'a> OutputBatch<'a> {
    /// An output's symbol bytes (UTF-8, checked at decoding).
    #[inline]
    pub fn symbol(&self, output: &OutputRecord) -> &'a [u8] {
        output.symbol_bytes(self.frame)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::OffsetEstimate;
    use crate::control::WorkerInfo;
    use crate::failover::{RestoredPart, StoredPart};
    use crate::identity::Role;
    use crate::report::{RuleInfo, StreamAtWorker};
    use crate::results::RulesEpoch;
    use std::collections::BTreeMap;

    /// Encodes `body`, checks the exact bytes after the 4-byte header and that it decodes back
    /// equal; a decoder must refuse it under any other kind.
    fn golden<B: Body + PartialEq + std::fmt::Debug>(body: B, sender: u32, expected_body: &[u8]) {
        let frame = body.encode(sender);
        let header = [0x94, crate::wire::PROTOCOL_VERSION, B::KIND as u8, sender as u8];
        assert_eq!(&frame[..4], &header, "{:?} header", B::KIND);
        assert_eq!(&frame[4..], expected_body, "{:?} body bytes: {:02x?}", B::KIND, &frame[4..]);
        let parsed = Frame::read(&frame, 1 << 20).unwrap();
        assert_eq!(parsed.kind(), B::KIND);
        assert_eq!(parsed.sender(), sender);
        assert_eq!(parsed.body::<B>().unwrap(), body);
        let mut other = frame.clone();
        other[2] = if B::KIND == FrameKind::Refused { FrameKind::Deployed } else { FrameKind::Refused } as u8;
        let parsed = Frame::read(&other, 1 << 20).unwrap();
        assert_eq!(parsed.body::<B>().unwrap_err().cause(), "unexpected_kind");
    }

    fn rules_text() -> RulesText {
        RulesText { epoch: 1, origin: "o".into(), text: "t".into() }
    }

    // Golden bytes of every cold frame: a field added to one of them changes these bytes, so
    // it cannot silently break the decoding of older frames (the protocol version changes).

    #[test]
    fn end_of_stream() {
        golden(
            EndOfStream { stream: 2, sent: 300, routed: 0, cut: None },
            9,
            &[0x94, 0x02, 0xcd, 0x01, 0x2c, 0x00, 0xc0],
        );
        let cut = EndOfStream { stream: 2, sent: 1, routed: 0, cut: Some("c".into()) };
        golden(cut, 2, &[0x94, 0x02, 0x01, 0x00, 0xa1, b'c']);
    }

    #[test]
    fn worker_progress() {
        golden(WorkerProgress { at_ns: 9, processed: 1, outputs: 2, rejected: 3 }, 1, &[0x94, 0x09, 0x01, 0x02, 0x03]);
    }

    #[test]
    fn router_progress() {
        golden(RouterProgress { at_ns: 9, received: 300 }, 0, &[0x92, 0x09, 0xcd, 0x01, 0x2c]);
    }

    #[test]
    fn worker_report() {
        let report = WorkerReport {
            id: "w".into(),
            index: 1,
            processed: 2,
            symbols: 3,
            outputs: 4,
            streams: vec![StreamAtWorker { stream: 0, sent: Some(9), routed: None, processed: 8 }],
            duplicates: 5,
            out_of_order: 6,
            late: 7,
            late_dropped: 8,
            rejected: BTreeMap::from([("malformed".to_string(), 1)]),
        };
        #[rustfmt::skip]
        let expected = [
            0x9b, 0xa1, b'w', 0x01, 0x02, 0x03, 0x04, // [id, index, processed, symbols, outputs,
            0x91, 0x94, 0x00, 0x09, 0xc0, 0x08, // [[stream, sent, routed, processed]],
            0x05, 0x06, 0x07, 0x08, // duplicates, out_of_order, late, late_dropped,
            0x81, 0xa9, b'm', b'a', b'l', b'f', b'o', b'r', b'm', b'e', b'd', 0x01, // rejected]
        ];
        golden(report, 1, &expected);
    }

    #[test]
    fn router_report() {
        let report = RouterReport {
            received: BTreeMap::from([(0, 5)]),
            rules: vec![RulesEpoch { epoch: 0, origin: "o".into(), queries: vec!["q".into()], at: BTreeMap::new() }],
            routed: 5,
            rejected: BTreeMap::new(),
            workers: vec!["w".into()],
            failed: vec![1],
            lost_streams: BTreeMap::from([(2, crate::report::LostStream { reason: "s".into(), sent_at_least: 7 })]),
            cut_streams: BTreeMap::from([(3, "c".into())]),
            checkpoints: crate::results::CheckpointSummary {
                completed: 4,
                failed: 1,
                last_failure: "f".into(),
                last_completed: 5,
                last_duration_ms: 0.5,
                last_bytes: 6,
            },
        };
        #[rustfmt::skip]
        let expected = [
            0x99, 0x81, 0x00, 0x05, // [received {0: 5},
            0x91, 0x94, 0x00, 0xa1, b'o', 0x91, 0xa1, b'q', 0x80, // rules [[epoch, origin, queries, at {}]],
            0x05, 0x80, 0x91, 0xa1, b'w', 0x91, 0x01, // routed, rejected {}, workers, failed,
            0x81, 0x02, 0x92, 0xa1, b's', 0x07, // lost_streams {2: [reason "s", sent_at_least 7]},
            0x81, 0x03, 0xa1, b'c', // cut_streams {3: "c"},
            0x96, 0x04, 0x01, 0xa1, b'f', 0x05, // checkpoints [completed, failed, last failure, last completed,
            0xcb, 0x3f, 0xe0, 0, 0, 0, 0, 0, 0, 0x06, // last duration ms 0.5, last bytes]]
        ];
        golden(report, 0, &expected);
    }

    #[test]
    fn register() {
        let register = Register {
            role: Role::Injector,
            id: "i".into(),
            endpoint: "e".into(),
            streams: 2,
            warmup_ns: 3,
            clock_endpoint: "k".into(),
            resuming: 0,
        };
        golden(register, 0, &[0x97, 0x02, 0xa1, b'i', 0xa1, b'e', 0x02, 0x03, 0xa1, b'k', 0x00]);
    }

    #[test]
    fn ready() {
        let ready = Ready {
            assigned: 1,
            workers: vec![WorkerInfo { id: "w".into(), endpoint: "e".into(), key: "K".into() }],
            collector: "c".into(),
            streams: 2,
            start_ns: 3,
            warmup_ns: 4,
            collector_clock: "k".into(),
            rules: RulesText { epoch: 0, origin: "o".into(), text: "t".into() },
            allowed_lateness_ns: Some(5),
            joining: false,
            collector_incarnation: 1,
            collector_key: "C".into(),
            failure_timeout_ns: 6,
            checkpoint_dir: "/d".into(),
        };
        #[rustfmt::skip]
        let expected = [
            0x9e, 0x01, // [assigned 1,
            0x91, 0x93, 0xa1, b'w', 0xa1, b'e', 0xa1, b'K', // [[worker id, endpoint, key]],
            0xa1, b'c', 0x02, 0x03, 0x04, 0xa1, b'k', // collector, streams, start_ns, warmup_ns, clock,
            0x93, 0x00, 0xa1, b'o', 0xa1, b't', // [epoch, origin, text],
            0x05, 0xc2, 0x01, // allowed_lateness_ns, joining, collector_incarnation,
            0xa1, b'C', 0x06, // collector_key, failure_timeout_ns,
            0xa2, b'/', b'd', // checkpoint_dir]
        ];
        golden(ready.clone(), 0, &expected);
        // No allowed lateness: nil.
        let open = Ready { allowed_lateness_ns: None, ..ready };
        let encoded = open.encode(0);
        assert_eq!(encoded[encoded.len() - 9], 0xc0);
    }

    #[test]
    fn refused() {
        golden(Refused { reason: "no".into() }, 0, &[0x91, 0xa2, b'n', b'o']);
    }

    #[test]
    fn clock_frames() {
        golden(ClockRequest, 0, &[0xc0]);
        golden(ClockReply { now_ns: 7 }, 0, &[0x91, 0x07]);
        let estimate = OffsetEstimate { offset_ns: -2, uncertainty_ns: 3 };
        golden(ClockReport { node: "n".into(), estimate }, 4, &[0x92, 0xa1, b'n', 0x92, 0xfe, 0x03]);
    }

    #[test]
    fn end_of_run_frames() {
        golden(AwaitEnd, 0, &[0xc0]);
        golden(RunFinished, 0, &[0xc0]);
        golden(EndAck, 0, &[0xc0]);
    }

    #[test]
    fn rules_frames() {
        let installed = RulesInstalled { epoch: 2, queries: vec![RuleInfo { name: "q".into(), alert: true }] };
        golden(installed, 3, &[0x92, 0x02, 0x91, 0x92, 0xa1, b'q', 0xc3]);
        golden(rules_text(), 0, &[0x93, 0x01, 0xa1, b'o', 0xa1, b't']);
        golden(Deploy { origin: "o".into(), text: "t".into() }, 0, &[0x92, 0xa1, b'o', 0xa1, b't']);
        golden(Deployed { epoch: 1, at: BTreeMap::from([(0, 9)]) }, 0, &[0x92, 0x01, 0x81, 0x00, 0x09]);
    }

    #[test]
    fn rescale_frames() {
        use crate::rescale::*;
        let a = |c: u8| [0xa1, c];
        golden(HandOff { part: 5, to: 2, symbols: vec!["A".into()] }, 0, &[0x93, 0x05, 0x02, 0x91, 0xa1, b'A']);
        let moved = MovedSymbol { symbol: "A".into(), stream: 1, next_seq: 300 };
        let state = SymbolState { part: 5, from: 1, symbols: vec![moved], engine: vec![0xde, 0xad] };
        #[rustfmt::skip]
        let expected = [
            0x94, 0x05, 0x01, // [part 5, from 1,
            0x91, 0x93, 0xa1, b'A', 0x01, 0xcd, 0x01, 0x2c, // [[A, stream 1, next_seq 300]],
            0xc4, 0x02, 0xde, 0xad, // engine state as bin 8]
        ];
        golden(state, 1, &expected);
        golden(StateTaken, 0, &[0xc0]);
        golden(Retire { routed: BTreeMap::from([(0, 7)]) }, 0, &[0x91, 0x81, 0x00, 0x07]);
        golden(Leave { worker: "w".into() }, 0, &[0x91, 0xa1, b'w']);
        golden(RescaleAccepted { symbols: 9, slices: 2 }, 0, &[0x92, 0x09, 0x02]);
        golden(StatusRequest, 0, &[0xc0]);
        let member = MemberStatus { index: 1, id: "w".into(), state: "left".into(), symbols: 0, routed: 4 };
        let moving = MoveProgress { kind: "join".into(), worker: "x".into(), slices_done: 1, slices: 3, symbols: 9 };
        let status = ClusterStatus {
            now_ns: 8,
            members: vec![member],
            moving: Some(moving),
            queued: 0,
            streams_ended: 1,
            streams: 2,
        };
        let mut expected = vec![0x96, 0x08, 0x91, 0x95, 0x01, 0xa1, b'w', 0xa4, b'l', b'e', b'f', b't', 0x00, 0x04];
        expected.extend([0x95, 0xa4, b'j', b'o', b'i', b'n', 0xa1, b'x', 0x01, 0x03, 0x09, 0x00, 0x01, 0x02]);
        golden(status, 0, &expected);
        let started =
            RescaleStarted { id: 0, kind: "join".into(), worker: "x".into(), index: 2, symbols: vec![("A".into(), 2)] };
        let mut expected = vec![0x95, 0x00, 0xa4, b'j', b'o', b'i', b'n'];
        expected.extend(a(b'x'));
        expected.extend([0x02, 0x91, 0x92, 0xa1, b'A', 0x02]);
        golden(started, 0, &expected);
        let joined = WorkerJoined { index: 2, id: "x".into(), key: "k".into() };
        golden(joined, 0, &[0x93, 0x02, 0xa1, b'x', 0xa1, b'k']);
        let record = Rescaled {
            id: 0,
            started_ns: 1,
            duration_ns: 2,
            symbols: 3,
            state_bytes: 4,
            slices: 5,
            held_ticks: 6,
            longest_slice_ns: 7,
            state_lost: vec!["A".into()],
        };
        golden(record, 0, &[0x99, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x91, 0xa1, b'A']);
        golden(StreamsOpened { first: 1, count: 2 }, 0, &[0x92, 0x01, 0x02]);
        golden(Welcome { index: 3 }, 0, &[0x91, 0x03]);
        golden(Reached { index: 3 }, 3, &[0x91, 0x03]);
        golden(Checkpoint { id: 7, base: 6, retain_from: 5 }, 0, &[0x93, 0x07, 0x06, 0x05]);
        let moved = crate::rescale::MovedSymbol { symbol: "A".into(), stream: 1, next_seq: 9 };
        let snapshot = Snapshot {
            id: 7,
            base: 6,
            from: 1,
            part: 0,
            parts: 1,
            symbols: vec![moved.clone()],
            stored: StoredPart { bytes: 1, checksum: 5 },
            processed: [(1, 9)].into(),
            outputs: 2,
            unstored: String::new(),
        };
        let expected = [
            0x9a, 0x07, 0x06, 0x01, 0x00, 0x01, 0x91, 0x93, 0xa1, b'A', 0x01, 0x09, 0x92, 0x01, 0x05, 0x81, 0x01, 0x09,
            0x02, 0xa0,
        ];
        golden(snapshot, 1, &expected);
        let state = RestoredPart { checkpoint: 7, part: 0, stored: StoredPart { bytes: 1, checksum: 5 } };
        let restore = Restore { from: 1, symbols: vec![moved.clone()], state: Some(state) };
        let expected = [0x93, 0x01, 0x91, 0x93, 0xa1, b'A', 0x01, 0x09, 0x93, 0x07, 0x00, 0x92, 0x01, 0x05];
        golden(restore, 0, &expected);
        golden(
            Restore { from: 1, symbols: vec![moved], state: None },
            0,
            &[0x93, 0x01, 0x91, 0x93, 0xa1, b'A', 0x01, 0x09, 0xc0],
        );
        let failed = WorkerFailed {
            worker: "w".into(),
            index: 1,
            reason: "r".into(),
            detected_ns: 2,
            recovered: true,
            checkpoint: 3,
            processed: [(0, 4)].into(),
            outputs: 5,
            replayed: 6,
            moved: vec![("A".into(), 0, 2)],
            state_lost: vec![],
        };
        let mut expected = vec![0x9b, 0xa1, b'w', 0x01, 0xa1, b'r', 0x02, 0xc3, 0x03, 0x81, 0x00, 0x04, 0x05, 0x06];
        expected.extend([0x91, 0x93, 0xa1, b'A', 0x00, 0x02, 0x90]);
        golden(failed, 0, &expected);
        golden(CheckpointMark { id: 7 }, 2, &[0x91, 0x07]);
        let restored = Restored { from: 1, symbols: vec![("A".into(), 2)], lost: vec!["A".into()] };
        golden(restored, 2, &[0x93, 0x01, 0x91, 0x92, 0xa1, b'A', 0x02, 0x91, 0xa1, b'A']);
    }

    #[test]
    fn delivery_frames() {
        let confirmed = vec![crate::failover::OutputsConfirmed { worker: 2, id: 7 }];
        let saved = Saved { positions: vec![(0, 5), (crate::identity::ROUTER_ID, 2)], resend: vec![0], confirmed };
        golden(
            saved,
            0,
            &[
                0x93, 0x92, 0x92, 0x00, 0x05, 0x92, 0xce, 0xff, 0xff, 0xff, 0xff, 0x02, 0x91, 0x00, 0x91, 0x92, 0x02,
                0x07,
            ],
        );
        golden(DeliveryQuery { worker: 3 }, 3, &[0x91, 0x03]);
        let status = DeliveryStatus { incarnation: 2, endpoint: "e".into(), saved: 9, resend: true };
        golden(status.clone(), 0, &[0x94, 0x02, 0xa1, b'e', 0x09, 0xc3]);
        // Pushed, the same body under a kind of its own.
        golden(Committed(status), 0, &[0x94, 0x02, 0xa1, b'e', 0x09, 0xc3]);
        golden(Heartbeat { worker: 3, processed: 5, finished: true }, 3, &[0x93, 0x03, 0x05, 0xc3]);
        golden(Fenced { reason: "f".into() }, 0, &[0x91, 0xa1, b'f']);
        golden(InjectorHeartbeat { first: 2, sent: vec![5, 6] }, 2, &[0x92, 0x02, 0x92, 0x05, 0x06]);
        golden(Abandoned { reason: "a".into() }, 0, &[0x91, 0xa1, b'a']);
        // The envelope: [version, Sequenced, source, incarnation, position, frame], the two
        // numbers 9 bytes each, the frame as it is.
        let inner = CheckpointMark { id: 7 }.encode(2);
        let mut log = crate::delivery::DeliveryLog::new(2, 1, 1 << 20);
        let envelope = log.push(&inner).to_vec();
        let mut expected = vec![0x96, crate::wire::PROTOCOL_VERSION, FrameKind::Sequenced as u8, 0x02];
        expected.extend([0xcf, 0, 0, 0, 0, 0, 0, 0, 1, 0xcf, 0, 0, 0, 0, 0, 0, 0, 1]);
        expected.extend(&inner);
        assert_eq!(envelope, expected);
        let read = Frame::read(&envelope, 1 << 20).unwrap().sequenced().unwrap();
        assert_eq!((read.source, read.incarnation, read.position, read.frame), (2, 1, 1, &inner[..]));
    }

    #[test]
    fn a_body_with_bytes_left_over_is_malformed() {
        let mut frame = EndAck.encode(0);
        frame[0] = 0x95;
        frame.push(0xc0);
        let parsed = Frame::read(&frame, 1 << 20).unwrap();
        assert_eq!(parsed.body::<EndAck>().unwrap_err().cause(), "malformed");
    }

    #[test]
    fn batches_carry_their_frame() {
        let mut writer = crate::wire::TickBatchWriter::new(3);
        writer.push(b"ABC", 1.5, 10, 10, 0, 7, 0);
        let bytes = writer.seal(99).to_vec();
        let frame = Frame::read(&bytes, 1 << 20).unwrap();
        let mut records = Vec::new();
        let batch = frame.ticks(&mut records).unwrap();
        assert_eq!((batch.sender, batch.t_sent, batch.len()), (3, 99, 1));
        assert_eq!(batch.symbol(&batch.records[0]), b"ABC");
        let mut outputs = Vec::new();
        assert_eq!(frame.outputs(&mut outputs).unwrap_err().cause(), "unexpected_kind");
    }
}
