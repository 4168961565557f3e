//! One query's state for one symbol: the window's events (only what the query's aggregates
//! need of them), incremental aggregates, and the evaluation that decides an output.

use crate::window::Moments;
use cep_query::plan::{AggregateKind, Query, Row, Window};
use std::collections::VecDeque;

/// What a query's state must keep, worked out once per query from its plan.
#[derive(Clone, Debug)]
pub struct Layout {
    /// Per argument: keep its values in the window (first, prev, perc, and anything that
    /// has to subtract or re-scan values as they leave a sliding window).
    store: Vec<bool>,
    moments: Vec<bool>,
    streak: Vec<bool>,
    /// Per aggregate: its slot among the min/max deques, if it is one.
    extremum_slot: Vec<Option<usize>>,
    /// (argument, is max) per min/max deque.
    extrema: Vec<(usize, bool)>,
}

impl Layout {
    pub fn new(query: &Query) -> Self {
        let args = query.args.len();
        let sliding = !matches!(query.window, Window::Tumbling(_));
        let mut layout = Layout {
            store: vec![false; args],
            moments: vec![false; args],
            streak: vec![false; args],
            extremum_slot: Vec::with_capacity(query.aggregates.len()),
            extrema: Vec::new(),
        };
        for aggregate in &query.aggregates {
            let mut slot = None;
            match aggregate.kind {
                AggregateKind::CountAll | AggregateKind::Last => {}
                AggregateKind::First | AggregateKind::Prev | AggregateKind::Perc => layout.store[aggregate.arg] = true,
                AggregateKind::Trend => layout.streak[aggregate.arg] = true,
                AggregateKind::Min | AggregateKind::Max => {
                    slot = Some(layout.extrema.len());
                    layout.extrema.push((aggregate.arg, aggregate.kind == AggregateKind::Max));
                }
                kind => {
                    debug_assert!(kind.uses_moments());
                    layout.moments[aggregate.arg] = true;
                    // Removal and the periodic exact rebuild need the values.
                    layout.store[aggregate.arg] |= sliding;
                }
            }
            layout.extremum_slot.push(slot);
        }
        layout
    }
}

/// Consecutive rises of a value, over the partition's whole sequence.
#[derive(Clone, Copy, Debug)]
struct Streak {
    previous: f64,
    rises: u32,
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
    /// Event times in the window (time windows only).
    times: VecDeque<u64>,
    /// Latest event time seen; a late event counts at this time.
    latest: u64,
    /// The tumbling window the events belong to.
    pane: u64,
    values: Vec<VecDeque<f64>>,
    moments: Vec<Moments>,
    extrema: Vec<Extremum>,
    streaks: Vec<Streak>,
    /// Latest argument values and price (the row a tumbling window is evaluated on).
    last: Vec<f64>,
    last_price: f64,
}

impl QueryState {
    pub fn new(query: &Query, layout: &Layout) -> Self {
        let args = query.args.len();
        QueryState {
            len: 0,
            pushed: 0,
            times: VecDeque::new(),
            latest: 0,
            pane: 0,
            values: vec![VecDeque::new(); args],
            moments: vec![Moments::default(); args],
            extrema: vec![Extremum::default(); layout.extrema.len()],
            streaks: vec![Streak { previous: f64::NAN, rises: 0 }; args],
            last: vec![f64::NAN; args],
            last_price: f64::NAN,
        }
    }

    /// Takes one event that passed the query's filters; calls `emit(price, value)` when the
    /// query outputs. `args` and `aggregates` are scratch space.
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
                    while self.times.front().is_some_and(|&t| t <= horizon) {
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
        let row = Row { symbol, price, aggregates: &[] };
        self.pushed += 1;
        self.len += 1;
        if matches!(query.window, Window::Time(_)) {
            self.times.push_back(ts);
        }
        for (arg, expr) in query.args.iter().enumerate() {
            let value = match expr {
                cep_query::plan::Expr::Price => price,
                other => other.number(&row),
            };
            if layout.store[arg] {
                self.values[arg].push_back(value);
            }
            if layout.moments[arg] {
                let moments = &mut self.moments[arg];
                moments.add(value);
                if moments.needs_rebuild() {
                    moments.rebuild(self.values[arg].iter());
                }
            }
            if layout.streak[arg] {
                let streak = &mut self.streaks[arg];
                streak.rises = if value > streak.previous { streak.rises + 1 } else { 0 };
                streak.previous = value;
            }
            self.last[arg] = value;
        }
        for (slot, &(arg, is_max)) in layout.extrema.iter().enumerate() {
            self.extrema[slot].push(self.pushed, self.last[arg], is_max);
        }
        self.last_price = price;
    }

    /// Drops the window's oldest event.
    #[inline]
    fn evict(&mut self, layout: &Layout) {
        self.len -= 1;
        self.times.pop_front();
        for (arg, values) in self.values.iter_mut().enumerate() {
            if !layout.store[arg] {
                continue;
            }
            let value = values.pop_front().unwrap_or(f64::NAN);
            if layout.moments[arg] {
                self.moments[arg].remove(value);
            }
        }
    }

    /// Empties the window (a tumbling window closed); streaks go on.
    fn clear(&mut self) {
        self.len = 0;
        self.times.clear();
        self.values.iter_mut().for_each(VecDeque::clear);
        self.moments.iter_mut().for_each(|m| *m = Moments::default());
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
        for (i, aggregate) in query.aggregates.iter().enumerate() {
            let arg = aggregate.arg;
            // count(*) has no argument.
            let values = self.values.get(arg).unwrap_or(const { &VecDeque::new() });
            aggregates[i] = match aggregate.kind {
                AggregateKind::CountAll => self.len as f64,
                AggregateKind::Count => self.moments[arg].n as f64,
                AggregateKind::Sum => self.moments[arg].sum(),
                AggregateKind::Avg => self.moments[arg].mean(),
                AggregateKind::StddevPop => {
                    let moments = &self.moments[arg];
                    if moments.n == 0 {
                        f64::NAN
                    } else {
                        moments.stddev_pop()
                    }
                }
                AggregateKind::StddevSamp => self.moments[arg].stddev_samp(),
                AggregateKind::Min | AggregateKind::Max => {
                    let slot = layout.extremum_slot[i].expect("min/max has a deque");
                    self.extrema[slot].value(first_in_window)
                }
                AggregateKind::First => values.front().copied().unwrap_or(f64::NAN),
                AggregateKind::Last => self.last[arg],
                AggregateKind::Prev => {
                    let back = aggregate.offset as usize;
                    if back < values.len() {
                        values[values.len() - 1 - back]
                    } else {
                        f64::NAN
                    }
                }
                AggregateKind::Perc => {
                    if values.len() < 2 {
                        f64::NAN
                    } else {
                        let first = values[0];
                        (self.last[arg] - first) / first * 100.0
                    }
                }
                AggregateKind::Trend => self.streaks[arg].rises as f64,
            };
        }
        let row = Row { symbol, price: row_price, aggregates };
        if let Some(having) = &query.having {
            if having.truth(&row) != Some(true) {
                return;
            }
        }
        emit(query.price.number(&row), query.value.number(&row));
    }
}
