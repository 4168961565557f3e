//! [`WindowState`], the general state kind: any window, any aggregates.

use super::layout::{ArgLayout, Layout};
use super::ring::Ring;
use super::{decide, from_moments, positional, NOT_STORED};
use crate::handoff::{Reader, StateError, Writer};
use crate::window::Moments;
use cep_query::plan::{AggregateKind, Expr, Query, Row, Window};
use std::collections::VecDeque;

/// Consecutive rises of a value, over the partition's whole sequence.
#[derive(Clone, Copy, Debug)]
struct Streak {
    previous: f64,
    rises: u32,
}

/// One argument's incremental aggregates, in the order a time window's query reads them.
#[derive(Clone, Debug)]
#[repr(C)]
struct ArgState {
    /// The latest value.
    last: f64,
    moments: Moments,
    streak: Streak,
}

impl ArgState {
    fn new() -> Self {
        ArgState { moments: Moments::default(), streak: Streak { previous: f64::NAN, rises: 0 }, last: f64::NAN }
    }

    fn write(&self, w: &mut Writer) {
        w.f64(self.last);
        self.moments.write(w);
        w.f64(self.streak.previous);
        w.u32(self.streak.rises);
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, StateError> {
        let last = r.f64()?;
        let moments = Moments::read(r)?;
        let streak = Streak { previous: r.f64()?, rises: r.counter32()? };
        Ok(ArgState { last, moments, streak })
    }

    /// Takes a new value (already stored in the window if the layout stores it).
    #[inline]
    fn push(&mut self, arg: &ArgLayout, value: f64, ring: &Ring, head: u32, stride: usize, len: usize) {
        self.last = value;
        if arg.streak {
            self.streak.rises = if value > self.streak.previous { self.streak.rises + 1 } else { 0 };
            self.streak.previous = value;
        }
        if arg.moments {
            self.moments.add(value);
            if self.moments.needs_rebuild() {
                self.moments.rebuild((0..len).map(|entry| ring.get(head, entry * stride + arg.offset)));
            }
        }
    }
}

/// Sliding-window minimum or maximum: a deque of (event number, value) candidates with
/// values monotonic from the front, so each value enters and leaves once (O(1) amortised).
#[derive(Clone, Debug, Default)]
struct Extremum {
    candidates: VecDeque<(u64, f64)>,
}

impl Extremum {
    #[inline]
    fn push(&mut self, number: u64, value: f64, is_max: bool) {
        if value.is_nan() {
            return;
        }
        while let Some(&(_, back)) = self.candidates.back() {
            let dominated = if is_max { back <= value } else { back >= value };
            if !dominated {
                break;
            }
            self.candidates.pop_back();
        }
        self.candidates.push_back((number, value));
    }

    /// The extremum of the events numbered `first..`; NaN (null) if none is non-null.
    #[inline]
    fn value(&mut self, first: u64) -> f64 {
        while self.candidates.front().is_some_and(|&(number, _)| number < first) {
            self.candidates.pop_front();
        }
        self.candidates.front().map_or(f64::NAN, |&(_, value)| value)
    }
}

/// The part of the state few queries need.
#[derive(Clone, Debug)]
struct Rare {
    /// Latest event time seen; a late event counts at this time.
    latest: u64,
    /// Events ever pushed (numbers the min/max candidates).
    pushed: u64,
    /// The tumbling window the events belong to.
    pane: u64,
    /// The latest event's price (the row a tumbling window is evaluated on).
    last_price: f64,
    extrema: Vec<Extremum>,
}

/// The general state: any window, any aggregates. Everything a time window's query touches
/// per event (the ring's bounds, the first argument's moments) sits in one cache line.
#[derive(Clone, Debug)]
#[repr(C)]
pub struct WindowState {
    /// Events in the window (the ring holds `len * stride` values).
    len: u32,
    head: u32,
    /// Latest event time seen (time windows); a late event counts at this time. Kept here
    /// rather than read from the ring's far end, which is a cache miss per event.
    latest: u64,
    ring: Ring,
    first: ArgState,
    /// Arguments after the first (rare; empty allocates nothing).
    more: Box<[ArgState]>,
    rare: Option<Box<Rare>>,
}

impl WindowState {
    pub(crate) fn new(query: &Query, layout: &Layout) -> Self {
        let rare = layout.rare.then(|| {
            Box::new(Rare {
                latest: 0,
                pushed: 0,
                pane: 0,
                last_price: f64::NAN,
                extrema: vec![Extremum::default(); layout.extrema.len()],
            })
        });
        WindowState {
            len: 0,
            head: 0,
            latest: 0,
            ring: Ring::with_capacity(layout.capacity),
            first: ArgState::new(),
            more: (1..query.args.len()).map(|_| ArgState::new()).collect(),
            rare,
        }
    }

    /// Writes the state (the hand-off format, [`crate::handoff`]).
    pub(crate) fn write(&self, layout: &Layout, w: &mut Writer) {
        w.u32(self.len);
        w.u64(self.latest);
        self.ring.write_values(self.head, 0, self.events() * layout.stride, w);
        self.first.write(w);
        self.more.iter().for_each(|arg| arg.write(w));
        if let Some(rare) = self.rare.as_deref() {
            w.u64(rare.latest);
            w.u64(rare.pushed);
            w.u64(rare.pane);
            w.f64(rare.last_price);
            for extremum in &rare.extrema {
                w.count(extremum.candidates.len());
                for &(number, value) in &extremum.candidates {
                    w.u64(number);
                    w.f64(value);
                }
            }
        }
    }

    /// Reads what [`Self::write`] wrote for the query, checking that its counts agree.
    pub(crate) fn read(query: &Query, layout: &Layout, r: &mut Reader<'_>) -> Result<Self, StateError> {
        let inconsistent = |what| Err(StateError::inconsistent(what));
        let len = r.counter32()?;
        if matches!(query.window, Window::Events(n) if len as u64 > n) {
            return inconsistent("an event window holding more events than it keeps");
        }
        let latest = r.u64()?;
        let values = r.f64s((len as usize).saturating_mul(layout.stride))?;
        let first = ArgState::read(r)?;
        let more = (1..query.args.len()).map(|_| ArgState::read(r)).collect::<Result<Box<[_]>, _>>()?;
        for (index, state) in std::iter::once(&first).chain(more.iter()).enumerate() {
            let counted = match layout.args.get(index) {
                Some(arg) if arg.moments && arg.offset != NOT_STORED => {
                    values.iter().skip(arg.offset).step_by(layout.stride).filter(|v| !v.is_nan()).count()
                }
                _ => state.moments.n as usize,
            };
            if state.moments.n as usize != counted || state.moments.n > len {
                return inconsistent("moments that count other values than the window holds");
            }
        }
        // A tumbling window always keeps the rare part (its pane).
        let rare = match layout.rare {
            false => None,
            true => {
                let (latest, pushed, pane, last_price) = (r.u64()?, r.counter64()?, r.u64()?, r.f64()?);
                if pushed < len as u64 {
                    return inconsistent("a window holding more events than were pushed");
                }
                let mut extrema = Vec::with_capacity(layout.extrema.len());
                for _ in &layout.extrema {
                    let count = r.count(16)?;
                    if count > len as usize {
                        return inconsistent("more min/max candidates than events in the window");
                    }
                    let candidates = (0..count).map(|_| Ok((r.u64()?, r.f64()?))).collect::<Result<_, StateError>>()?;
                    extrema.push(Extremum { candidates });
                }
                Some(Box::new(Rare { latest, pushed, pane, last_price, extrema }))
            }
        };
        Ok(WindowState { len, head: 0, latest, ring: Ring::from_values(&values, layout.capacity), first, more, rare })
    }

    /// Events in the window.
    #[inline]
    fn events(&self) -> usize {
        self.len as usize
    }

    /// Value `offset` of entry `entry` (0 = oldest).
    #[inline]
    fn stored(&self, layout: &Layout, entry: usize, offset: usize) -> f64 {
        self.ring.get(self.head, entry * layout.stride + offset)
    }

    #[inline]
    fn arg(&self, index: usize) -> &ArgState {
        if index == 0 {
            &self.first
        } else {
            &self.more[index - 1]
        }
    }

    /// Takes one event that passed the query's filters; calls `emit(price, value)` when the
    /// query outputs. `aggregates` is scratch space.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_event(
        &mut self,
        query: &Query,
        layout: &Layout,
        symbol: &str,
        price: f64,
        ts: u64,
        aggregates: &mut [f64],
        mut emit: impl FnMut(f64, f64),
    ) {
        let mut ts = ts;
        match query.window {
            Window::Events(n) => {
                while self.events() as u64 >= n {
                    self.evict(layout);
                }
            }
            Window::Time(length) => {
                ts = ts.max(self.latest);
                self.latest = ts;
                if ts >= length {
                    let horizon = ts - length;
                    while self.len > 0 && self.stored(layout, 0, 0).to_bits() <= horizon {
                        self.evict(layout);
                    }
                }
            }
            Window::Tumbling(length) => {
                let rare = self.rare.as_deref_mut().expect("a tumbling window keeps its pane");
                ts = ts.max(rare.latest);
                rare.latest = ts;
                let pane = ts / length;
                if self.len > 0 && pane != rare.pane {
                    let row_price = rare.last_price;
                    self.evaluate(query, layout, symbol, row_price, aggregates, &mut emit);
                    self.clear();
                }
                if let Some(rare) = self.rare.as_deref_mut() {
                    rare.pane = pane;
                }
            }
        }
        self.push(query, layout, symbol, price, ts);
        if !matches!(query.window, Window::Tumbling(_)) {
            self.evaluate(query, layout, symbol, price, aggregates, &mut emit);
        }
    }

    #[inline]
    fn push(&mut self, query: &Query, layout: &Layout, symbol: &str, price: f64, ts: u64) {
        let stride = layout.stride;
        let base = self.len as usize * stride;
        if stride > 0 {
            self.ring.reserve(self.head, base, base + stride);
        }
        if layout.timed {
            self.ring.set(self.head, base, f64::from_bits(ts));
        }
        let value_of = |expr: &Expr| {
            if layout.args_are_price {
                price
            } else {
                expr.number(&Row { symbol, price, aggregates: &[] })
            }
        };
        // A query of count(*) alone has no arguments.
        let first = query.args.first().map_or(f64::NAN, value_of);
        if let Some(first_arg) = layout.args.first() {
            if first_arg.offset != NOT_STORED {
                self.ring.set(self.head, base + first_arg.offset, first);
            }
            for (arg, expr) in layout.args[1..].iter().zip(&query.args[1..]) {
                if arg.offset != NOT_STORED {
                    self.ring.set(self.head, base + arg.offset, value_of(expr));
                }
            }
        }
        self.len += 1;
        let events = self.len as usize;
        if let Some(first_arg) = layout.args.first() {
            self.first.push(first_arg, first, &self.ring, self.head, stride, events);
            for ((state, arg), expr) in self.more.iter_mut().zip(&layout.args[1..]).zip(&query.args[1..]) {
                state.push(arg, value_of(expr), &self.ring, self.head, stride, events);
            }
        }
        if let Some(rare) = self.rare.as_deref_mut() {
            rare.pushed += 1;
            rare.last_price = price;
            for (slot, &(arg, is_max)) in layout.extrema.iter().enumerate() {
                let value = if arg == 0 { self.first.last } else { self.more[arg - 1].last };
                rare.extrema[slot].push(rare.pushed, value, is_max);
            }
        }
    }

    /// Drops the window's oldest event.
    #[inline]
    fn evict(&mut self, layout: &Layout) {
        self.len -= 1;
        if layout.stride == 0 {
            return;
        }
        for (index, arg) in layout.args.iter().enumerate() {
            if arg.moments && arg.offset != NOT_STORED {
                let value = self.stored(layout, 0, arg.offset);
                let state = if index == 0 { &mut self.first } else { &mut self.more[index - 1] };
                state.moments.remove(value);
            }
        }
        let mask = self.ring.mask();
        self.head = ((self.head as usize + layout.stride) & mask) as u32;
    }

    /// The end of input: a tumbling window that holds events emits them as a closed pane
    /// (evaluated on its last event's row, as a pane closed by a later event is) and empties.
    pub(crate) fn close_pane(
        &mut self,
        query: &Query,
        layout: &Layout,
        symbol: &str,
        aggregates: &mut [f64],
        mut emit: impl FnMut(f64, f64),
    ) {
        if !matches!(query.window, Window::Tumbling(_)) || self.len == 0 {
            return;
        }
        let row_price = self.rare.as_deref().expect("a tumbling window keeps its pane").last_price;
        self.evaluate(query, layout, symbol, row_price, aggregates, &mut emit);
        self.clear();
    }

    /// Empties the window (a tumbling window closed); streaks go on.
    fn clear(&mut self) {
        self.len = 0;
        self.head = 0;
        self.first.moments = Moments::default();
        self.more.iter_mut().for_each(|arg| arg.moments = Moments::default());
        if let Some(rare) = self.rare.as_deref_mut() {
            rare.extrema.iter_mut().for_each(|e| e.candidates.clear());
        }
    }

    #[inline]
    fn evaluate(
        &mut self,
        query: &Query,
        layout: &Layout,
        symbol: &str,
        row_price: f64,
        aggregates: &mut [f64],
        emit: impl FnMut(f64, f64),
    ) {
        let len = self.events();
        for (i, aggregate) in query.aggregates.iter().enumerate() {
            let arg = aggregate.arg;
            aggregates[i] = match aggregate.kind {
                AggregateKind::CountAll => len as f64,
                kind if kind.uses_moments() => from_moments(kind, &self.arg(arg).moments),
                AggregateKind::Min | AggregateKind::Max => {
                    let rare = self.rare.as_deref_mut().expect("min/max keeps its candidates");
                    let first_in_window = rare.pushed - len as u64 + 1;
                    rare.extrema[layout.extremum_slot[i]].value(first_in_window)
                }
                AggregateKind::Trend => self.arg(arg).streak.rises as f64,
                _ => {
                    let offset = layout.args[arg].offset;
                    positional(aggregate, len, self.arg(arg).last, |entry| self.stored(layout, entry, offset))
                }
            };
        }
        decide(layout, symbol, row_price, aggregates, emit);
    }
}
