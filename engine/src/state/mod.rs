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
//!
//! One file per kind: `small.rs`, `time.rs` and `window.rs` hold the three kinds, `layout.rs`
//! what a query keeps and which kind runs it, `ring.rs` the buffer the time and general kinds
//! store events in. The evaluation the kinds share (positional and moment aggregates, HAVING
//! and the output columns) is here.

mod layout;
mod ring;
mod small;
mod time;
mod window;

pub use layout::{Layout, StateKind};
pub use small::SmallState;
pub use time::{TimeChanges, TimeState};
pub use window::WindowState;

use crate::window::Moments;
use cep_query::plan::{Aggregate, AggregateKind, Row};

/// The largest event window a [`SmallState`] holds.
const SMALL: usize = 4;

/// Marks an argument whose values the window does not keep.
const NOT_STORED: usize = usize::MAX;

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
    fn layouts_and_state_size() {
        let rules = crate::reference_rules();
        let kinds: Vec<StateKind> = rules.queries.iter().map(|q| Layout::new(q).kind()).collect();
        assert_eq!(kinds, [StateKind::Small, StateKind::Small, StateKind::Time]);
        // Each fits a cache line, with the tag of the row cell that holds it.
        assert!(std::mem::size_of::<SmallState>() <= 64);
        assert_eq!(std::mem::size_of::<TimeState>(), 64);
    }
}
