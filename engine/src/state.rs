//! One query's state for one symbol: the window's events (only what the query's aggregates
//! need of them), incremental aggregates, and the evaluation that decides an output.
//!
//! The state is laid out for the cache: per-argument aggregates sit inline, and the window's
//! events are one deque of fixed-stride entries (`[time,] value, value, ...`), so an event
//! touches the state itself and the two ends of one buffer.

use crate::program::{Column, Condition};
use crate::window::Moments;
use cep_query::plan::{AggregateKind, Expr, Query, Row, Window};
use smallvec::SmallVec;
use std::collections::VecDeque;

/// Marks an argument whose values the window does not keep.
const NOT_STORED: usize = usize::MAX;

/// What a query's state must keep, worked out once per query from its plan.
#[derive(Clone, Debug)]
pub struct Layout {
    /// Values per window entry: the event time (time windows), then the stored arguments.
    stride: usize,
    timed: bool,
    args: Vec<ArgLayout>,
    /// Per aggregate: its slot among the min/max deques, if it is one.
    extremum_slot: Vec<usize>,
    /// (argument, is max) per min/max deque.
    extrema: Vec<(usize, bool)>,
    /// Every argument is the plain price (the common case: no expression to evaluate).
    args_are_price: bool,
    having: Option<Condition>,
    price: Column,
    value: Column,
}

impl Layout {
    pub fn new(query: &Query) -> Self {
        let args = query.args.len();
        let sliding = !matches!(query.window, Window::Tumbling(_));
        let mut store = vec![false; args];
        let mut arg_layouts = vec![ArgLayout { offset: NOT_STORED, moments: false, streak: false }; args];
        let mut layout = Layout {
            stride: 0,
            timed: matches!(query.window, Window::Time(_)),
            args: Vec::new(),
            extremum_slot: Vec::with_capacity(query.aggregates.len()),
            extrema: Vec::new(),
            args_are_price: query.args.iter().all(|arg| *arg == Expr::Price),
            having: query.having.as_ref().map(Condition::new),
            price: Column::new(&query.price),
            value: Column::new(&query.value),
        };
        for aggregate in &query.aggregates {
            let mut slot = NOT_STORED;
            match aggregate.kind {
                AggregateKind::CountAll | AggregateKind::Last => {}
                AggregateKind::First | AggregateKind::Prev | AggregateKind::Perc => store[aggregate.arg] = true,
                AggregateKind::Trend => arg_layouts[aggregate.arg].streak = true,
                AggregateKind::Min | AggregateKind::Max => {
                    slot = layout.extrema.len();
                    layout.extrema.push((aggregate.arg, aggregate.kind == AggregateKind::Max));
                }
                kind => {
                    debug_assert!(kind.uses_moments());
                    arg_layouts[aggregate.arg].moments = true;
                    // Removal and the periodic exact rebuild need the values.
                    store[aggregate.arg] |= sliding;
                }
            }
            layout.extremum_slot.push(slot);
        }
        layout.stride = usize::from(layout.timed);
        for (arg, stored) in store.into_iter().enumerate() {
            if stored {
                arg_layouts[arg].offset = layout.stride;
                layout.stride += 1;
            }
        }
        layout.args = arg_layouts;
        layout
    }
}

/// What one argument keeps.
#[derive(Clone, Copy, Debug)]
struct ArgLayout {
    /// Its offset in a window entry, or [`NOT_STORED`].
    offset: usize,
    moments: bool,
    streak: bool,
}

/// Consecutive rises of a value, over the partition's whole sequence.
#[derive(Clone, Copy, Debug)]
struct Streak {
    previous: f64,
    rises: u32,
}

/// One argument's incremental aggregates.
#[derive(Clone, Debug)]
struct ArgState {
    moments: Moments,
    streak: Streak,
    /// The latest value.
    last: f64,
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

/// One query's state for one symbol.
#[derive(Clone, Debug)]
pub struct QueryState {
    /// Events in the window.
    len: u64,
    /// Events ever pushed (numbers the min/max candidates).
    pushed: u64,
    /// Latest event time seen; a late event counts at this time.
    latest: u64,
    /// The tumbling window the events belong to.
    pane: u64,
    /// The latest event's price (the row a tumbling window is evaluated on).
    last_price: f64,
    /// The window's entries, `stride` values each (times as their bits).
    entries: VecDeque<f64>,
    args: SmallVec<[ArgState; 1]>,
    extrema: Vec<Extremum>,
}

impl QueryState {
    pub fn new(query: &Query, layout: &Layout) -> Self {
        let arg =
            ArgState { moments: Moments::default(), streak: Streak { previous: f64::NAN, rises: 0 }, last: f64::NAN };
        let entries = match query.window {
            Window::Events(n) if layout.stride > 0 => VecDeque::with_capacity((n as usize * layout.stride).min(1024)),
            _ => VecDeque::new(),
        };
        QueryState {
            len: 0,
            pushed: 0,
            latest: 0,
            pane: 0,
            last_price: f64::NAN,
            entries,
            args: smallvec::smallvec![arg; query.args.len()],
            extrema: vec![Extremum::default(); layout.extrema.len()],
        }
    }

    /// A stored value of entry `entry` (0 = oldest in the window).
    #[inline]
    fn stored(&self, layout: &Layout, entry: usize, offset: usize) -> f64 {
        self.entries[entry * layout.stride + offset]
    }

    /// Takes one event that passed the query's filters; calls `emit(price, value)` when the
    /// query outputs. `aggregates` is scratch space.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub fn on_event(
        &mut self,
        query: &Query,
        layout: &Layout,
        symbol: &str,
        price: f64,
        ts: u64,
        aggregates: &mut [f64],
        mut emit: impl FnMut(f64, f64),
    ) {
        let ts = ts.max(self.latest);
        self.latest = ts;
        match query.window {
            Window::Events(n) => {
                while self.len >= n {
                    self.evict(layout);
                }
            }
            Window::Time(length) => {
                if ts >= length {
                    let horizon = ts - length;
                    while self.len > 0 && self.entries[0].to_bits() <= horizon {
                        self.evict(layout);
                    }
                }
            }
            Window::Tumbling(length) => {
                let pane = ts / length;
                if self.len > 0 && pane != self.pane {
                    let row_price = self.last_price;
                    self.evaluate(query, layout, symbol, row_price, aggregates, &mut emit);
                    self.clear();
                }
                self.pane = pane;
            }
        }
        self.push(query, layout, symbol, price, ts);
        if !matches!(query.window, Window::Tumbling(_)) {
            self.evaluate(query, layout, symbol, price, aggregates, &mut emit);
        }
    }

    #[inline]
    fn push(&mut self, query: &Query, layout: &Layout, symbol: &str, price: f64, ts: u64) {
        self.pushed += 1;
        self.len += 1;
        if layout.timed {
            self.entries.push_back(f64::from_bits(ts));
        }
        let (stride, len) = (layout.stride, self.len as usize);
        let args: &mut [ArgState] = &mut self.args;
        for ((state, arg), expr) in args.iter_mut().zip(&layout.args).zip(&query.args) {
            let value =
                if layout.args_are_price { price } else { expr.number(&Row { symbol, price, aggregates: &[] }) };
            if arg.offset != NOT_STORED {
                self.entries.push_back(value);
            }
            state.last = value;
            if arg.streak {
                state.streak.rises = if value > state.streak.previous { state.streak.rises + 1 } else { 0 };
                state.streak.previous = value;
            }
            if arg.moments {
                state.moments.add(value);
                if state.moments.needs_rebuild() {
                    let entries = &self.entries;
                    state.moments.rebuild((0..len).map(|entry| entries[entry * stride + arg.offset]));
                }
            }
        }
        for (slot, &(arg, is_max)) in layout.extrema.iter().enumerate() {
            self.extrema[slot].push(self.pushed, self.args[arg].last, is_max);
        }
        self.last_price = price;
    }

    /// Drops the window's oldest event.
    #[inline]
    fn evict(&mut self, layout: &Layout) {
        self.len -= 1;
        let args: &mut [ArgState] = &mut self.args;
        for (state, arg) in args.iter_mut().zip(&layout.args) {
            if arg.moments && arg.offset != NOT_STORED {
                state.moments.remove(self.entries[arg.offset]);
            }
        }
        // pop_front, not drain: a Drain costs far more than the one or two values it moves.
        for _ in 0..layout.stride {
            self.entries.pop_front();
        }
    }

    /// Empties the window (a tumbling window closed); streaks go on.
    fn clear(&mut self) {
        self.len = 0;
        self.entries.clear();
        self.args.iter_mut().for_each(|arg| arg.moments = Moments::default());
        self.extrema.iter_mut().for_each(|e| e.candidates.clear());
    }

    #[inline]
    fn evaluate(
        &mut self,
        query: &Query,
        layout: &Layout,
        symbol: &str,
        row_price: f64,
        aggregates: &mut [f64],
        emit: &mut impl FnMut(f64, f64),
    ) {
        let first_in_window = self.pushed - self.len + 1;
        let len = self.len as usize;
        let args: &[ArgState] = &self.args;
        for (i, aggregate) in query.aggregates.iter().enumerate() {
            let arg = aggregate.arg;
            let offset = layout.args.get(arg).map_or(NOT_STORED, |a| a.offset);
            aggregates[i] = match aggregate.kind {
                AggregateKind::CountAll => self.len as f64,
                AggregateKind::Count => args[arg].moments.n as f64,
                AggregateKind::Sum => args[arg].moments.sum(),
                AggregateKind::Avg => args[arg].moments.mean(),
                AggregateKind::StddevPop => {
                    let moments = &args[arg].moments;
                    if moments.n == 0 {
                        f64::NAN
                    } else {
                        moments.stddev_pop()
                    }
                }
                AggregateKind::StddevSamp => args[arg].moments.stddev_samp(),
                AggregateKind::Min | AggregateKind::Max => self.extrema[layout.extremum_slot[i]].value(first_in_window),
                AggregateKind::First if len > 0 => self.stored(layout, 0, offset),
                AggregateKind::Last => args[arg].last,
                AggregateKind::Prev if (aggregate.offset as usize) < len => {
                    self.stored(layout, len - 1 - aggregate.offset as usize, offset)
                }
                AggregateKind::Perc if len >= 2 => {
                    let first = self.stored(layout, 0, offset);
                    (args[arg].last - first) / first * 100.0
                }
                AggregateKind::Trend => args[arg].streak.rises as f64,
                AggregateKind::First | AggregateKind::Prev | AggregateKind::Perc => f64::NAN,
            };
        }
        let row = Row { symbol, price: row_price, aggregates };
        if layout.having.as_ref().is_some_and(|having| !having.fires(&row)) {
            return;
        }
        emit(layout.price.value(&row), layout.value.value(&row));
    }
}
