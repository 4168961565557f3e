//! What a query's state must keep, worked out once from its plan, and which of the three state
//! kinds ([`StateKind`]) runs it.

use super::{NOT_STORED, SMALL};
use crate::program::{Column, Condition};
use cep_query::plan::{AggregateKind, Expr, Query, Window};

/// What one argument keeps.
#[derive(Clone, Copy, Debug)]
pub(super) struct ArgLayout {
    /// Its offset in a window entry, or [`NOT_STORED`].
    pub(super) offset: usize,
    pub(super) moments: bool,
    pub(super) streak: bool,
}

/// What a query's state must keep, worked out once per query from its plan.
#[derive(Clone, Debug)]
pub struct Layout {
    /// Values per window entry: the event time (time windows), then the stored arguments.
    pub(super) stride: usize,
    pub(super) timed: bool,
    /// The ring's capacity to start with (an event window's whole size).
    pub(super) capacity: usize,
    pub(super) args: Vec<ArgLayout>,
    /// Per aggregate: its slot among the min/max deques, if it is one.
    pub(super) extremum_slot: Vec<usize>,
    /// (argument, is max) per min/max deque.
    pub(super) extrema: Vec<(usize, bool)>,
    /// Needs the rarely used part of the state (min/max, tumbling windows).
    pub(super) rare: bool,
    /// Runs as a [`SmallState`](super::SmallState): a window of at most [`SMALL`] events of
    /// the price, and only aggregates that read the window's values or the streak.
    pub(super) small: bool,
    /// Runs as a [`TimeState`](super::TimeState): a time window of the price, no min/max or trend.
    pub(super) time: bool,
    /// Every argument is the plain price (the common case: no expression to evaluate).
    pub(super) args_are_price: bool,
    pub(super) having: Option<Condition>,
    pub(super) price: Column,
    pub(super) value: Column,
}

/// Which of the three state kinds a query keeps per symbol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StateKind {
    /// A small event window of the price: [`SmallState`](super::SmallState).
    Small,
    /// A time window of the price: [`TimeState`](super::TimeState).
    Time,
    /// Anything else: [`WindowState`](super::WindowState).
    Window,
}

impl Layout {
    /// Which kind of state the query keeps.
    pub fn kind(&self) -> StateKind {
        if self.small {
            StateKind::Small
        } else if self.time {
            StateKind::Time
        } else {
            StateKind::Window
        }
    }

    /// Works out what the query's state must keep.
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
