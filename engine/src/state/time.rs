//! [`TimeState`], the state kind of a time window over the price (R3).

use super::layout::Layout;
use super::ring::Ring;
use super::{decide, from_moments, positional};
use crate::handoff::{Reader, StateError, Writer};
use crate::window::Moments;
use cep_query::plan::{Aggregate, AggregateKind, Query, Window};

/// The state of a time window over the price (`RETAIN 10 SECONDS ... stddev(price)`): a ring
/// of (time, price) pairs and the price's moments, in 64 bytes.
///
/// A late event (earlier than the window's latest) is kept with its own time and needs no
/// clamping: pairs leave in arrival order, each once its time and every earlier pair's are
/// past the horizon, so a late pair leaves with the pair before it, exactly when it would
/// with the latest time; and its own horizon lies before the one already applied, so it
/// evicts nothing, as with the latest time. Not reading the latest time back saves a cache
/// miss per event (the ring's newest line is cold by the time the symbol's next tick comes).
#[derive(Clone, Debug)]
pub struct TimeState {
    /// (time bits, price) pairs.
    ring: Ring,
    len: u32,
    head: u32,
    moments: Moments,
}

/// What [`TimeState::write_changes`] wrote, read off hostile bytes; applied to the earlier
/// window by [`TimeState::with_changes`].
#[derive(Clone, Debug)]
pub struct TimeChanges {
    moments: Moments,
    len: u32,
    /// The newest (time bits, price) pairs, oldest first.
    newest: Vec<f64>,
}

impl TimeChanges {
    pub(crate) fn read(r: &mut Reader<'_>) -> Result<Self, StateError> {
        let moments = Moments::read(r)?;
        let len = r.counter32()?;
        let newest = r.count(16)?;
        if newest > len as usize {
            return Err(StateError::inconsistent("a time window with more new events than events"));
        }
        Ok(TimeChanges { moments, len, newest: r.f64s(2 * newest)? })
    }
}

impl TimeState {
    pub(crate) fn new() -> Self {
        TimeState { len: 0, head: 0, ring: Ring::with_capacity(16), moments: Moments::default() }
    }

    /// Writes the window (the hand-off format, [`crate::handoff`]).
    pub(crate) fn write(&self, w: &mut Writer) {
        self.moments.write(w);
        w.count(self.len as usize);
        // (time bits, price) pairs, as `w.u64(time)`, `w.f64(price)` would write them.
        self.ring.write_values(self.head, 0, 2 * self.len as usize, w);
    }

    /// Reads what [`Self::write`] wrote.
    pub(crate) fn read(r: &mut Reader<'_>) -> Result<Self, StateError> {
        let moments = Moments::read(r)?;
        let len = r.count(16)?;
        let values = r.f64s(2 * len)?;
        // `count` bounded `len` by the bytes: it is below u32::MAX.
        TimeState::from_parts(moments, len as u32, &values)
    }

    /// A window of `len` (time bits, price) pairs, checked against its moments.
    fn from_parts(moments: Moments, len: u32, values: &[f64]) -> Result<TimeState, StateError> {
        debug_assert_eq!(values.len(), 2 * len as usize);
        let counted = values.iter().skip(1).step_by(2).filter(|price| !price.is_nan()).count();
        if moments.n as usize != counted {
            return Err(StateError::inconsistent("a time window's moments count other values than it holds"));
        }
        Ok(TimeState { ring: Ring::from_values(values, 16), len, head: 0, moments })
    }

    /// Writes what changed since the window held `appended` fewer events at the back (the
    /// checkpoint changes format, [`crate::handoff`]): its moments, its length and its newest
    /// events, at most all of them. Together with the window as it was, that is the window
    /// now: its oldest events are a suffix of the earlier ones (events leave at the front).
    pub(crate) fn write_changes(&self, appended: u64, w: &mut Writer) {
        self.moments.write(w);
        w.count(self.len as usize);
        let newest = appended.min(self.len as u64) as usize;
        w.count(newest);
        self.ring.write_values(self.head, 2 * (self.len as usize - newest), 2 * newest, w);
    }

    /// This window with `changes` applied ([`Self::write_changes`] of a later state of it).
    pub(crate) fn with_changes(&self, changes: &TimeChanges) -> Result<TimeState, StateError> {
        let newest = changes.newest.len() / 2;
        let kept = changes.len as usize - newest;
        if kept > self.len as usize {
            return Err(StateError::inconsistent("a time window's changes keep more events than it held"));
        }
        let mut values = Vec::with_capacity(2 * changes.len as usize);
        for event in self.len as usize - kept..self.len as usize {
            values.push(self.ring.get(self.head, 2 * event));
            values.push(self.price(event));
        }
        values.extend_from_slice(&changes.newest);
        TimeState::from_parts(changes.moments.clone(), changes.len, &values)
    }

    #[inline(always)]
    fn price(&self, event: usize) -> f64 {
        self.ring.get(self.head, 2 * event + 1)
    }

    /// Takes the next price at event time `ts` into a window `length` long.
    #[inline(always)]
    pub(crate) fn push(&mut self, length: u64, price: f64, ts: u64) {
        if ts >= length {
            let horizon = ts - length;
            let mask = self.ring.mask();
            while self.len > 0 && self.ring.get(self.head, 0).to_bits() <= horizon {
                self.moments.remove(self.ring.get(self.head, 1));
                self.head = ((self.head as usize + 2) & mask) as u32;
                self.len -= 1;
            }
        }
        let base = 2 * self.len as usize;
        self.ring.reserve(self.head, base, base + 2);
        self.ring.set(self.head, base, f64::from_bits(ts));
        self.ring.set(self.head, base + 1, price);
        self.len += 1;
        self.moments.add(price);
        if self.moments.needs_rebuild() {
            let (ring, head, len) = (&self.ring, self.head, self.len as usize);
            self.moments.rebuild((0..len).map(|event| ring.get(head, 2 * event + 1)));
        }
    }

    /// One aggregate of the window, the latest price included.
    #[inline(always)]
    pub(crate) fn aggregate(&self, aggregate: &Aggregate, price: f64) -> f64 {
        let len = self.len as usize;
        match aggregate.kind {
            AggregateKind::CountAll => len as f64,
            kind if kind.uses_moments() => from_moments(kind, &self.moments),
            _ => positional(aggregate, len, price, |event| self.price(event)),
        }
    }

    /// Takes an event and evaluates the query on it.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_event(
        &mut self,
        query: &Query,
        layout: &Layout,
        symbol: &str,
        price: f64,
        ts: u64,
        aggregates: &mut [f64],
        emit: impl FnMut(f64, f64),
    ) {
        let Window::Time(length) = query.window else { unreachable!("a time state is a time window") };
        self.push(length, price, ts);
        for (slot, aggregate) in aggregates.iter_mut().zip(&query.aggregates) {
            *slot = self.aggregate(aggregate, price);
        }
        decide(layout, symbol, price, aggregates, emit);
    }
}
