//! [`SmallState`], the state kind of small event windows of the price (R1, R2, the Oracle
//! queries).

use super::layout::Layout;
use super::{decide, positional, SMALL};
use crate::handoff::{Reader, StateError, Writer};
use cep_query::plan::{Aggregate, AggregateKind, Query, Window};

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

    /// Writes the history (the hand-off format, [`crate::handoff`]).
    pub(crate) fn write(&self, w: &mut Writer) {
        w.u8(self.len);
        w.u32(self.rises);
        self.prices.iter().for_each(|&price| w.f64(price));
    }

    /// Reads what [`Self::write`] wrote.
    pub(crate) fn read(r: &mut Reader<'_>) -> Result<Self, StateError> {
        let len = r.u8()?;
        if len as usize > SMALL {
            return Err(StateError::inconsistent("a small history longer than four prices"));
        }
        let rises = r.counter32()?;
        let mut prices = [0.0; SMALL];
        for price in &mut prices {
            *price = r.f64()?;
        }
        Ok(SmallState { prices, rises, len })
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
