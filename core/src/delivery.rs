//! Delivery to the collector that survives the collector's death.
//!
//! Every frame a worker or the router sends to the collector travels in a [`FrameKind::Sequenced`]
//! envelope that names its source, its place in that source's stream (a position, from 1) and
//! the collector *incarnation* it was sent to (1 for the collector the run started with, one
//! more each time a restarted collector takes over). The sender keeps every frame in a
//! [`DeliveryLog`] until the collector says it has saved it ([`Saved`], relayed by the router
//! in a [`DeliveryStatus`]). A collector saves its whole state, the positions included, then
//! says so; restarted, it loads that state and the senders send it everything it had not
//! saved, again and in order. The collector takes a frame only at the position after the last
//! it took ([`Positions`]), so a frame it already had is dropped, and a frame sent to an
//! earlier incarnation (queued in a socket that reconnected) is ignored: it comes again. A
//! frame beyond the next (some were lost with a connection that dropped) is dropped too, and
//! its sender asked to send everything not saved again.
//!
//! The envelope is `[version, Sequenced, source, incarnation, position, frame]`: the frame,
//! itself a MessagePack array, is its last element as it is, so nothing is copied to read it,
//! and incarnation and position are 9-byte unsigned integers, patched in place on resend.

use crate::identity::ROUTER_ID;
use crate::msgpack::{self, Reader};
use crate::wire::{write_header, FrameKind, WireError};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// A frame to the collector in its envelope, as read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sequenced<'a> {
    /// A worker's index, or [`ROUTER_ID`].
    pub source: u32,
    /// The collector incarnation the sender meant it for.
    pub incarnation: u64,
    /// Its place in the source's stream, from 1.
    pub position: u64,
    /// The frame itself.
    pub frame: &'a [u8],
}

impl<'a> Sequenced<'a> {
    /// Reads the envelope after its header (`body`: the bytes after `[version, kind, source]`).
    pub fn read(source: u32, body: &'a [u8]) -> Result<Sequenced<'a>, WireError> {
        let mut rd = Reader::new(body);
        let bad = |error: msgpack::DecodeError| WireError::Malformed(format!("sequenced frame: {error}"));
        let incarnation = rd.uint().map_err(bad)?;
        let position = rd.uint().map_err(bad)?;
        Ok(Sequenced { source, incarnation, position, frame: &body[rd.position()..] })
    }
}

/// Writes `[version, Sequenced, source, incarnation, position` (the caller appends the frame);
/// returns where the incarnation's 8 bytes are.
fn write_envelope(buf: &mut Vec<u8>, source: u32, incarnation: u64, position: u64) -> usize {
    write_header(buf, 6, FrameKind::Sequenced, source);
    buf.push(0xcf);
    let at = buf.len();
    buf.extend_from_slice(&incarnation.to_be_bytes());
    buf.push(0xcf);
    buf.extend_from_slice(&position.to_be_bytes());
    at
}

/// A sender's frames to the collector that the collector has not saved yet, in order.
#[derive(Debug)]
pub struct DeliveryLog {
    source: u32,
    /// The incarnation frames are addressed to.
    incarnation: u64,
    /// Position of `held[0]` (or of the next frame when none is held).
    first: u64,
    held: VecDeque<Vec<u8>>,
    held_bytes: usize,
    max_bytes: usize,
    /// Buffers of saved frames, reused for the next ones: in a steady run no frame allocates.
    spare: Vec<Vec<u8>>,
    /// Their capacity, bytes (at most `max_bytes / SPARE_SHARE`).
    spare_bytes: usize,
    /// Where the incarnation sits in every envelope of this source (the header's size is fixed).
    incarnation_at: usize,
}

/// Spare buffers take at most this share of the log's bound.
const SPARE_SHARE: usize = 4;

impl DeliveryLog {
    /// The log of `source`, for the collector incarnation `incarnation`; [`Self::full`] once it
    /// holds `max_bytes`.
    pub fn new(source: u32, incarnation: u64, max_bytes: usize) -> Self {
        let incarnation_at = write_envelope(&mut Vec::new(), source, 0, 0);
        DeliveryLog {
            source,
            incarnation,
            first: 1,
            held: VecDeque::new(),
            held_bytes: 0,
            max_bytes,
            spare: Vec::new(),
            spare_bytes: 0,
            incarnation_at,
        }
    }

    /// Puts `frame` in its envelope, keeps it, and returns the envelope to send.
    pub fn push(&mut self, frame: &[u8]) -> &[u8] {
        let position = self.first + self.held.len() as u64;
        let mut buf = match self.spare.pop() {
            Some(buf) => {
                self.spare_bytes -= buf.capacity();
                buf
            }
            None => Vec::with_capacity(self.incarnation_at + 18 + frame.len()),
        };
        buf.clear();
        write_envelope(&mut buf, self.source, self.incarnation, position);
        buf.extend_from_slice(frame);
        self.held_bytes += buf.len();
        self.held.push_back(buf);
        self.held.back().expect("just pushed")
    }

    /// The collector saved every frame up to `position`: they are dropped. A position beyond
    /// what was sent (a confused or forged status) drops everything sent, no more.
    pub fn saved(&mut self, position: u64) {
        while self.first <= position {
            let Some(buf) = self.held.pop_front() else { break };
            self.held_bytes -= buf.len();
            // A few for reuse (an outage that filled the log must not keep twice its memory).
            if self.spare_bytes + buf.capacity() <= self.max_bytes / SPARE_SHARE {
                self.spare_bytes += buf.capacity();
                self.spare.push(buf);
            }
            self.first += 1;
        }
    }

    /// A new collector incarnation takes over: every held frame is readdressed to it, to be
    /// sent again ([`Self::held`]), in order.
    pub fn readdress(&mut self, incarnation: u64) {
        self.incarnation = incarnation;
        let at = self.incarnation_at;
        for buf in &mut self.held {
            buf[at..at + 8].copy_from_slice(&incarnation.to_be_bytes());
        }
    }

    /// The incarnation frames go to.
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// The envelopes not saved yet, oldest first.
    pub fn held(&self) -> impl Iterator<Item = &[u8]> {
        self.held.iter().map(Vec::as_slice)
    }

    /// Bytes held.
    pub fn held_bytes(&self) -> usize {
        self.held_bytes
    }

    /// Whether nothing is waiting for the collector to save it.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Whether the log holds its bound: the sender stops taking work until the collector saves.
    pub fn full(&self) -> bool {
        self.held_bytes >= self.max_bytes
    }

    /// Position of the oldest frame held (or of the next one when none is).
    pub fn first_position(&self) -> u64 {
        self.first
    }

    /// The envelope at `position`, if it is held.
    pub fn get(&self, position: u64) -> Option<&[u8]> {
        let index = position.checked_sub(self.first)?;
        self.held.get(usize::try_from(index).ok()?).map(Vec::as_slice)
    }

    /// Position of the last frame pushed (0: none yet).
    pub fn last_position(&self) -> u64 {
        self.first + self.held.len() as u64 - 1
    }
}

/// What the collector makes of a sequenced frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// The next of its source: handle it.
    Next,
    /// Already taken (sent again after a restart): dropped.
    Again,
    /// Sent to an earlier incarnation: ignored (its sender sends it again to this one).
    Stale,
    /// Beyond the next: frames before it were lost on the way (a connection that dropped).
    /// Dropped too; its sender is asked to send everything again ([`Saved::resend`]).
    OutOfTurn,
}

/// The collector's side: per source, the last position taken.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Positions {
    /// Per worker index, the last position taken (0: none).
    workers: Vec<u64>,
    /// The router's.
    router: u64,
    /// Sources that sent a frame out of turn since the last [`Self::saved`].
    #[serde(default)]
    missed: Vec<u32>,
    /// Sources asked to send again that have not sent the next frame yet: not asked twice.
    #[serde(default)]
    asked: Vec<u32>,
}

impl Positions {
    /// Decides about `frame` arriving at incarnation `incarnation`; only [`Arrival::Next`]
    /// advances the source. `None`: a worker index beyond `max_workers` (refused, no table
    /// grows).
    pub fn arrive(&mut self, frame: &Sequenced<'_>, incarnation: u64, max_workers: usize) -> Option<Arrival> {
        let last = if frame.source == ROUTER_ID {
            &mut self.router
        } else {
            let index = frame.source as usize;
            if index >= max_workers {
                return None;
            }
            if index >= self.workers.len() {
                self.workers.resize(index + 1, 0);
            }
            &mut self.workers[index]
        };
        Some(if frame.incarnation < incarnation {
            Arrival::Stale
        } else if frame.position <= *last {
            Arrival::Again
        } else if frame.position == *last + 1 {
            *last = frame.position;
            self.asked.retain(|&source| source != frame.source);
            Arrival::Next
        } else {
            if !self.asked.contains(&frame.source) {
                self.asked.push(frame.source);
                self.missed.push(frame.source);
            }
            Arrival::OutOfTurn
        })
    }

    /// Asks `source` to send every frame not saved again (at the next [`Self::saved`]), taking
    /// none of its frames now: the collector was not ready for them.
    pub fn ask_again(&mut self, source: u32) {
        if !self.missed.contains(&source) {
            self.missed.push(source);
        }
    }

    /// Sources whose frames came out of turn and that never sent the missing ones, with the
    /// last position taken of each: frames lost (the end of a run reports them).
    pub fn open_gaps(&self) -> Vec<(u32, u64)> {
        self.asked
            .iter()
            .map(|&source| {
                let last = if source == ROUTER_ID { self.router } else { self.workers[source as usize] };
                (source, last)
            })
            .collect()
    }

    /// What the collector has taken, per source, and who is asked to send again: what it
    /// tells the router once saved. A source stays asked while its gap is open, so a sender
    /// that missed the request (a notice lost on the way) is asked again when it asks.
    pub fn saved(&mut self) -> Saved {
        let mut positions: Vec<(u32, u64)> =
            self.workers.iter().enumerate().map(|(index, &position)| (index as u32, position)).collect();
        positions.push((ROUTER_ID, self.router));
        let mut resend = std::mem::take(&mut self.missed);
        resend.extend(self.asked.iter().filter(|source| !resend.contains(source)).collect::<Vec<_>>());
        Saved { positions, resend, confirmed: Vec::new() }
    }
}

/// The collector saved its state, with every frame up to these positions: collector -> router
/// (control), after each save and once at the start of each incarnation. The one notice the
/// collector sends of what it holds: positions for the senders, checkpoints for failover.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Saved {
    /// (source, last position saved).
    pub positions: Vec<(u32, u64)>,
    /// Sources whose frames came out of turn (some were lost on the way): they send every
    /// frame not saved again.
    pub resend: Vec<u32>,
    /// The checkpoints whose outputs this save holds, newly: each may now be restored from.
    pub confirmed: Vec<crate::failover::OutputsConfirmed>,
}

/// Where the collector is and what it saved of this worker's frames: worker -> router
/// (control), on the worker's standing link: once, and again when it waits on the collector
/// and has heard nothing for a second. Answered with a [`DeliveryStatus`]; from then on the
/// router pushes a [`Committed`] on that link whenever the answer would change (the collector
/// saved more of the worker's frames, asked it to send again or no longer does, or a restarted
/// collector took over): nothing is polled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryQuery {
    /// The asking worker's index.
    pub worker: u32,
}

/// The router's answer to a [`DeliveryQuery`], and the body of each [`Committed`] after it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryStatus {
    /// The collector's current incarnation (1: the first).
    pub incarnation: u64,
    /// Its data endpoint.
    pub endpoint: String,
    /// The last position of the worker's frames the collector saved (0: none).
    pub saved: u64,
    /// The collector missed some of its frames: send every frame not saved again.
    pub resend: bool,
}

/// "Committed up to": what a worker would be told if it asked again ([`DeliveryStatus`]),
/// pushed by the router (control, unasked) to the worker that asked once. On the wire it is a
/// [`DeliveryStatus`] body under a kind of its own, so a link tells it from an answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Committed(pub DeliveryStatus);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::Frame;
    use crate::identity::ROUTER_ID;

    fn read(envelope: &[u8]) -> Sequenced<'_> {
        let frame = Frame::read(envelope, usize::MAX).unwrap();
        assert_eq!(frame.kind(), FrameKind::Sequenced);
        frame.sequenced().unwrap()
    }

    #[test]
    fn frames_are_held_until_saved_and_readdressed_to_a_new_incarnation() {
        let mut log = DeliveryLog::new(3, 1, 1 << 20);
        let inner = crate::frame::Body::encode(&DeliveryQuery { worker: 3 }, 3);
        for _ in 0..3 {
            let envelope = log.push(&inner).to_vec();
            assert_eq!(read(&envelope).frame, &inner[..]);
        }
        assert_eq!(log.last_position(), 3);
        log.saved(1);
        let held: Vec<Sequenced<'_>> = log.held().map(read).collect();
        assert_eq!(
            held.iter().map(|s| (s.source, s.incarnation, s.position)).collect::<Vec<_>>(),
            [(3, 1, 2), (3, 1, 3)]
        );
        log.readdress(2);
        assert!(log.held().map(read).all(|s| s.incarnation == 2 && s.frame == &inner[..]));
        // A position beyond what was sent drops what was sent and no more.
        log.saved(u64::MAX);
        assert!(log.is_empty() && log.held_bytes() == 0);
        let next = log.push(&inner).to_vec();
        assert_eq!(read(&next).position, 4);
    }

    #[test]
    fn the_log_is_full_at_its_bound() {
        let mut log = DeliveryLog::new(ROUTER_ID, 1, 100);
        log.push(&[0x90; 60]);
        assert!(!log.full());
        log.push(&[0x90; 60]);
        assert!(log.full());
        log.saved(2);
        assert!(!log.full());
    }

    #[test]
    fn the_collector_takes_each_position_once_in_order_and_ignores_earlier_incarnations() {
        let mut positions = Positions::default();
        let frame = |source, incarnation, position| Sequenced { source, incarnation, position, frame: &[] };
        assert_eq!(positions.arrive(&frame(0, 2, 1), 2, 8), Some(Arrival::Next));
        assert_eq!(positions.arrive(&frame(0, 2, 1), 2, 8), Some(Arrival::Again));
        assert_eq!(positions.arrive(&frame(0, 1, 2), 2, 8), Some(Arrival::Stale));
        assert_eq!(positions.arrive(&frame(0, 2, 2), 2, 8), Some(Arrival::Next));
        // A gap: dropped, not taken, and its source is asked to send again once.
        assert_eq!(positions.arrive(&frame(0, 2, 5), 2, 8), Some(Arrival::OutOfTurn));
        assert_eq!(positions.arrive(&frame(0, 2, 6), 2, 8), Some(Arrival::OutOfTurn));
        assert_eq!(positions.arrive(&frame(ROUTER_ID, 2, 1), 2, 8), Some(Arrival::Next));
        assert_eq!(positions.arrive(&frame(9, 2, 1), 2, 8), None);
        assert_eq!(
            positions.saved(),
            Saved { positions: vec![(0, 2), (ROUTER_ID, 1)], resend: vec![0], confirmed: vec![] }
        );
        assert_eq!(positions.open_gaps(), [(0, 2)]);
        // Still asked while the gap is open (a sender may have missed the request), no more
        // once the frame it lacked arrives.
        assert_eq!(positions.arrive(&frame(0, 2, 7), 2, 8), Some(Arrival::OutOfTurn));
        assert_eq!(positions.saved().resend, vec![0]);
        assert_eq!(positions.arrive(&frame(0, 2, 3), 2, 8), Some(Arrival::Next));
        assert!(positions.open_gaps().is_empty());
        assert!(positions.saved().resend.is_empty());
    }
}
