//! One query's state for one symbol: the window's events (only what the query's aggregates
//! need of them), incremental aggregates, and the evaluation that decides an output.
//!
//! Laid out for the cache, since an event touches the states of all its symbol's queries
//! (kept side by side in a row of the symbol's [`crate::group::Group`]). The [`Layout`] of a
//! query picks one of three kinds ([`StateKind`]):
//! - [`SmallState`] (fits a cache line): the last four prices and their streak, read by the
//!   queries with windows of at most four events of the price and aggregates that read its
//!   values or the streak (R1, R2, the Oracle queries), shared by those that see every event;
//! - [`TimeState`] (one cache line and a ring): a time window of the price and its moments (R3);
//! - [`WindowState`]: anything else (expressions as arguments, larger event windows, min/max,
//!   tumbling windows), one ring of fixed-stride entries (`[time,] value, ...`) with the first
//!   argument's aggregates inline and the rarely used parts behind one pointer.

use crate::program::{Column, Condition};
use crate::window::Moments;
use cep_query::plan::{Aggregate, AggregateKind, Expr, Query, Row, Window};
use std::collections::VecDeque;

/// The largest event window a [`SmallState`] holds.
const SMALL: usize = 4;

/// Marks an argument whose values the window does not keep.
const NOT_STORED: usize = usize::MAX;

/// What one argument keeps.
#[derive(Clone, Copy, Debug)]
struct ArgLayout {
    /// Its offset in a window entry, or [`NOT_STORED`].
    offset: usize,
    moments: bool,
    streak: bool,
}

/// What a query's state must keep, worked out once per query from its plan.
#[derive(Clone, Debug)]
pub struct Layout {
    /// Values per window entry: the event time (time windows), then the stored arguments.
    stride: usize,
    timed: bool,
    /// The ring's capacity to start with (an event window's whole size).
    capacity: usize,
    args: Vec<ArgLayout>,
    /// Per aggregate: its slot among the min/max deques, if it is one.
    extremum_slot: Vec<usize>,
    /// (argument, is max) per min/max deque.
    extrema: Vec<(usize, bool)>,
    /// Needs the rarely used part of the state (min/max, tumbling windows).
    rare: bool,
    /// Runs as a [`SmallState`]: a window of at most [`SMALL`] events of the price, and only
    /// aggregates that read the window's values or the streak.
    small: bool,
    /// Runs as a [`TimeState`]: a time window of the price, no min/max or trend.
    time: bool,
    /// Every argument is the plain price (the common case: no expression to evaluate).
    args_are_price: bool,
    having: Option<Condition>,
    price: Column,
    value: Column,
}

/// Which of the three state kinds a query keeps per symbol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StateKind {
    Small,
    Time,
    Window,
}

impl Layout {
    pub fn kind(&self) -> StateKind {
        if self.small {
            StateKind::Small
        } else if self.time {
            StateKind::Time
        } else {
            StateKind::Window
        }
    }

    pub fn new(query: &Query) -> Self {
        let args = query.args.len();
        let tumbling = matches!(query.window, Window::Tumbling(_));
        let mut store = vec![false; args];
        let mut arg_layouts = vec![ArgLayout { offset: NOT_STORED, moments: false, streak: false }; args];
        let mut extremum_slot = Vec::with_capacity(query.aggregates.len());
        let mut extrema = Vec::new();
        for aggregate in &query.aggregates {
            let mut slot = NOT_STORED;
            match aggregate.kind {
                AggregateKind::CountAll | AggregateKind::Last => {}
                AggregateKind::First | AggregateKind::Prev | AggregateKind::Perc => store[aggregate.arg] = true,
                AggregateKind::Trend => arg_layouts[aggregate.arg].streak = true,
                AggregateKind::Min | AggregateKind::Max => {
                    slot = extrema.len();
                    extrema.push((aggregate.arg, aggregate.kind == AggregateKind::Max));
                }
                kind => {
                    debug_assert!(kind.uses_moments());
                    arg_layouts[aggregate.arg].moments = true;
                    // Removal and the periodic exact rebuild need the values.
                    store[aggregate.arg] |= !tumbling;
                }
            }
            extremum_slot.push(slot);
        }
        let timed = matches!(query.window, Window::Time(_));
        let mut stride = usize::from(timed);
        for (arg, stored) in store.into_iter().enumerate() {
            if stored {
                arg_layouts[arg].offset = stride;
                stride += 1;
            }
        }
        let capacity = match query.window {
            Window::Events(n) => (n as usize * stride).min(1 << 16),
            _ if stride > 0 => 16,
            _ => 0,
        };
        let small = matches!(query.window, Window::Events(n) if n as usize <= SMALL)
            && query.args.iter().all(|arg| *arg == Expr::Price)
            && query.aggregates.iter().all(|a| {
                use AggregateKind::*;
                matches!(a.kind, CountAll | First | Last | Prev | Perc | Trend)
            });
        let time = matches!(query.window, Window::Time(_))
            && query.args.iter().all(|arg| *arg == Expr::Price)
            && query
                .aggregates
                .iter()
                .all(|a| !matches!(a.kind, AggregateKind::Min | AggregateKind::Max | AggregateKind::Trend));
        Layout {
            small,
            time,
            stride,
            timed,
            capacity,
            args: arg_layouts,
            extremum_slot,
            rare: tumbling || !extrema.is_empty(),
            extrema,
            args_are_price: query.args.iter().all(|arg| *arg == Expr::Price),
            having: query.having.as_ref().map(Condition::new),
            price: Column::new(&query.price),
            value: Column::new(&query.value),
        }
    }
}

/// The window's stored values, oldest first: a ring of power-of-two capacity that doubles
/// when full (a window that only counts events allocates nothing). Slots are first written
/// in order, so the buffer grows by appending: nothing is zero-filled ahead of use, which
/// would write a large window's memory twice.
#[derive(Clone, Debug, Default)]
struct Ring {
    /// The slots written so far; its capacity, a power of two, is the ring's.
    buf: Vec<f64>,
}

impl Ring {
    fn with_capacity(values: usize) -> Self {
        // `with_capacity` gives exactly the capacity asked for (a documented guarantee).
        Ring { buf: Vec::with_capacity(if values == 0 { 0 } else { values.next_power_of_two() }) }
    }

    #[inline(always)]
    fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    #[inline(always)]
    fn mask(&self) -> usize {
        self.capacity() - 1
    }

    /// Makes room for values up to position `end` (from the head).
    #[inline]
    fn reserve(&mut self, head: u32, used: usize, end: usize) {
        if end > self.capacity() {
            self.grow(head, used, end);
        }
    }

    #[inline]
    fn set(&mut self, head: u32, at: usize, value: f64) {
        let slot = (head as usize + at) & self.mask();
        match self.buf.get_mut(slot) {
            Some(stored) => *stored = value,
            None => {
                self.buf.resize(slot, 0.0);
                self.buf.push(value);
            }
        }
    }

    /// Doubles the capacity (at least to `end`): the buffer is reallocated in place where the
    /// allocator can (large buffers are remapped, not copied), and values that had wrapped
    /// around to the front are appended after the old end, so `head` stays valid.
    #[cold]
    fn grow(&mut self, head: u32, used: usize, end: usize) {
        let old = self.capacity();
        let capacity = (old * 2).max(16).max(end.next_power_of_two());
        self.buf.reserve_exact(capacity - self.buf.len());
        if self.buf.capacity() != capacity {
            // `reserve_exact` may give more than asked; the mask needs exactly a power of two.
            let mut exact = Vec::with_capacity(capacity);
            exact.extend_from_slice(&self.buf);
            self.buf = exact;
        }
        let start = head as usize;
        if start + used > old {
            // Wrapped: every slot of the old capacity is written.
            debug_assert_eq!(self.buf.len(), old);
            self.buf.extend_from_within(0..start + used - old);
        }
    }

    #[inline]
    fn get(&self, head: u32, at: usize) -> f64 {
        self.buf[(head as usize + at) & self.mask()]
    }
}

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

/// A symbol's last few prices and their streak (40 bytes), the state of the most common query shape
/// (`RETAIN 2 EVENTS ... perc(price)`, `trend(price)`, `prev(1, price)`): no heap, few
/// instructions per event. The small-window queries of a symbol that see every event read one
/// such history together (it is the same sequence for all of them); a query that filters
/// events keeps its own.
#[derive(Clone, Debug)]
pub struct SmallState {
    /// The last prices, oldest first and the newest last; NaN before there were any.
    prices: [f64; SMALL],
    rises: u32,
    /// Prices taken, up to [`SMALL`].
    len: u8,
}

impl SmallState {
    pub(crate) fn new() -> Self {
        SmallState { prices: [f64::NAN; SMALL], rises: 0, len: 0 }
    }

    /// Takes the symbol's next price (kept: the last [`SMALL`]).
    #[inline(always)]
    pub(crate) fn push(&mut self, price: f64) {
        // The first price is no rise: the previous one is NaN.
        self.rises = if price > self.prices[SMALL - 1] { self.rises + 1 } else { 0 };
        self.prices.copy_within(1.., 0);
        self.prices[SMALL - 1] = price;
        self.len = (self.len + 1).min(SMALL as u8);
    }

    /// One aggregate of a window of the last `n` events over the history, the latest price
    /// included.
    #[inline(always)]
    pub(crate) fn aggregate(&self, aggregate: &Aggregate, n: u64, price: f64) -> f64 {
        let len = (self.len as usize).min(n as usize);
        let window = &self.prices[SMALL - len..];
        match aggregate.kind {
            AggregateKind::CountAll => len as f64,
            AggregateKind::Trend => self.rises as f64,
            _ => positional(aggregate, len, price, |at| window[at]),
        }
    }

    /// Evaluates a small-window query over the history.
    #[inline(always)]
    pub(crate) fn evaluate(
        &self,
        query: &Query,
        layout: &Layout,
        symbol: &str,
        price: f64,
        aggregates: &mut [f64],
        emit: impl FnMut(f64, f64),
    ) {
        let Window::Events(n) = query.window else { unreachable!("a small state is an event window") };
        for (slot, aggregate) in aggregates.iter_mut().zip(&query.aggregates) {
            *slot = self.aggregate(aggregate, n, price);
        }
        decide(layout, symbol, price, aggregates, emit);
    }
}

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

impl TimeState {
    pub(crate) fn new() -> Self {
        TimeState { len: 0, head: 0, ring: Ring::with_capacity(16), moments: Moments::default() }
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

/// The aggregates that read a window's values, over `len` events: `value(k)` is the k-th
/// oldest, `last` the newest. Every state kind computes them here (perc must stay
/// bit-identical to the hand-written R1).
#[inline(always)]
fn positional(aggregate: &Aggregate, len: usize, last: f64, value: impl Fn(usize) -> f64) -> f64 {
    let back = aggregate.offset as usize;
    match aggregate.kind {
        AggregateKind::First if len > 0 => value(0),
        AggregateKind::Last => last,
        AggregateKind::Prev if back < len => value(len - 1 - back),
        AggregateKind::Perc if len >= 2 => {
            let first = value(0);
            (last - first) / first * 100.0
        }
        _ => f64::NAN,
    }
}

/// The aggregates computed from a window's moments; null when they have no value.
#[inline(always)]
fn from_moments(kind: AggregateKind, moments: &Moments) -> f64 {
    match kind {
        AggregateKind::Count => moments.n as f64,
        AggregateKind::Sum => moments.sum(),
        AggregateKind::Avg => moments.mean(),
        AggregateKind::StddevPop if moments.n > 0 => moments.stddev_pop(),
        AggregateKind::StddevSamp => moments.stddev_samp(),
        _ => f64::NAN,
    }
}

/// HAVING, then the output columns.
#[inline(always)]
fn decide(layout: &Layout, symbol: &str, row_price: f64, aggregates: &[f64], mut emit: impl FnMut(f64, f64)) {
    let row = Row { symbol, price: row_price, aggregates };
    if layout.having.as_ref().is_some_and(|having| !having.fires(&row)) {
        return;
    }
    emit(layout.price.value(&row), layout.value.value(&row));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_its_order_when_it_grows_wrapped() {
        let mut ring = Ring::with_capacity(4);
        let (mut head, mut used) = (0u32, 0usize);
        let mut want = std::collections::VecDeque::new();
        for value in 0..100 {
            // Drop one of every three values from the front, so the live part wraps around.
            if value % 3 == 0 && used > 0 {
                head = ((head as usize + 1) & ring.mask()) as u32;
                used -= 1;
                want.pop_front();
            }
            ring.reserve(head, used, used + 1);
            ring.set(head, used, value as f64);
            used += 1;
            want.push_back(value as f64);
            let got: Vec<f64> = (0..used).map(|at| ring.get(head, at)).collect();
            assert_eq!(got, want.iter().copied().collect::<Vec<_>>());
        }
        assert!(ring.capacity() >= 64);
    }

    #[test]
    fn layouts_and_state_size() {
        let rules = crate::reference_rules();
        let kinds: Vec<StateKind> = rules.queries.iter().map(|q| Layout::new(q).kind()).collect();
        assert_eq!(kinds, [StateKind::Small, StateKind::Small, StateKind::Time]);
        // Each fits a cache line, with the tag of the row cell that holds it.
        assert!(std::mem::size_of::<SmallState>() <= 64);
        assert_eq!(std::mem::size_of::<TimeState>(), 64);
    }
}
