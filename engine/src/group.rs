//! The states of the symbols that carry the same queries, kept together: a row per symbol in
//! each of three arrays (small price histories, time windows, general windows), so an event
//! finds all of its symbol's states from one index, as the hand-written rules kept theirs in
//! one per-symbol record. The small-window queries of a symbol that see every event read one
//! shared price history, pushed once per event.

use crate::engine::QueryId;
use crate::program::Single;
use crate::state::{Layout, SmallState, StateKind, TimeState, WindowState};
use cep_query::plan::{Expr, Query, Row, Window};

/// A query with what the per-event loop needs of it.
#[derive(Debug)]
pub struct Compiled {
    pub query: Query,
    pub layout: Layout,
}

impl Compiled {
    pub fn new(query: Query) -> Self {
        Compiled { layout: Layout::new(&query), query }
    }

    /// Whether the query's symbol filter admits the symbol.
    pub fn admits(&self, symbol: &str) -> bool {
        let row = Row { symbol, price: f64::NAN, aggregates: &[] };
        self.query.symbol_filter.as_ref().is_none_or(|f| f.truth(&row) == Some(true))
    }

    /// Whether an event of the symbol passes the query's filters (the symbol filter too, for an
    /// unindexed engine, where it is decided per event).
    #[inline]
    fn passes(&self, symbol: &str, price: f64) -> bool {
        let row = Row { symbol, price, aggregates: &[] };
        let holds = |filter: &Option<Expr>| filter.as_ref().is_none_or(|f| f.truth(&row) == Some(true));
        holds(&self.query.symbol_filter) && holds(&self.query.event_filter)
    }

    /// Whether the query sees every event of its symbols (no per-event filter), so it can
    /// read a price history shared with others.
    fn shares_history(&self) -> bool {
        self.layout.kind() == StateKind::Small && self.query.event_filter.is_none()
    }
}

/// Where a member's state lives in its symbol's row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Place {
    /// Small history `k`, shared with the other members that started with it; pushed once
    /// per event, before any member reads it.
    Shared(u32),
    /// Small history `k` of its own: the query filters events, so it takes only what passes.
    OwnSmall(u32),
    Time(u32),
    Window(u32),
}

/// A query attached to a group's symbols.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Member {
    pub query: QueryId,
    pub place: Place,
}

/// A group's shape: its members in query order. Shared histories are numbered first among
/// the small ones, then the members' own.
pub type Signature = Vec<Member>;

/// One symbol's states, in the order of their places.
#[derive(Debug, Default)]
pub struct Cells {
    pub smalls: Vec<SmallState>,
    pub times: Vec<TimeState>,
    pub windows: Vec<WindowState>,
}

/// A member as the per-event loop runs it: what it needs of its query, inline.
#[derive(Clone, Copy, Debug)]
struct Step {
    query: QueryId,
    place: Place,
    /// Filters are decided per event: an event filter, or any filter in an unindexed engine.
    filtered: bool,
    window: Window,
    single: Option<Single>,
}

/// The symbols with one signature and their states.
#[derive(Debug)]
pub struct Group {
    members: Vec<Member>,
    steps: Vec<Step>,
    /// The first `shared` small histories of a row are pushed on every event.
    shared: usize,
    small_width: usize,
    time_width: usize,
    window_width: usize,
    smalls: Vec<SmallState>,
    times: Vec<TimeState>,
    windows: Vec<WindowState>,
    rows: u32,
}

impl Group {
    pub fn new(members: Signature, compiled: &[Compiled], unindexed: bool) -> Self {
        let steps = members
            .iter()
            .map(|m| {
                let query = &compiled[m.query as usize].query;
                Step {
                    query: m.query,
                    place: m.place,
                    filtered: query.event_filter.is_some() || (unindexed && query.symbol_filter.is_some()),
                    window: query.window,
                    single: Single::of(query),
                }
            })
            .collect();
        let width = |of: fn(Place) -> Option<u32>| {
            members.iter().filter_map(|m| of(m.place)).max().map_or(0, |k| k as usize + 1)
        };
        Group {
            shared: width(|p| if let Place::Shared(k) = p { Some(k) } else { None }),
            small_width: width(|p| match p {
                Place::Shared(k) | Place::OwnSmall(k) => Some(k),
                _ => None,
            }),
            time_width: width(|p| if let Place::Time(k) = p { Some(k) } else { None }),
            window_width: width(|p| if let Place::Window(k) = p { Some(k) } else { None }),
            members,
            steps,
            smalls: Vec::new(),
            times: Vec::new(),
            windows: Vec::new(),
            rows: 0,
        }
    }

    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// Adds a symbol's row; returns its index.
    pub fn add(&mut self, cells: Cells) -> u32 {
        debug_assert_eq!(
            (cells.smalls.len(), cells.times.len(), cells.windows.len()),
            (self.small_width, self.time_width, self.window_width)
        );
        self.smalls.extend(cells.smalls);
        self.times.extend(cells.times);
        self.windows.extend(cells.windows);
        self.rows += 1;
        self.rows - 1
    }

    /// Every row's states, in row order (to move them when rules switch).
    pub fn into_rows(self) -> Vec<Cells> {
        let mut smalls = self.smalls.into_iter();
        let mut times = self.times.into_iter();
        let mut windows = self.windows.into_iter();
        (0..self.rows)
            .map(|_| Cells {
                smalls: smalls.by_ref().take(self.small_width).collect(),
                times: times.by_ref().take(self.time_width).collect(),
                windows: windows.by_ref().take(self.window_width).collect(),
            })
            .collect()
    }

    /// Row `row` takes one event: the shared histories first, then each member in query
    /// order; `emit(query, price, value)` for each output. `aggregates` is scratch space.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub fn on_event(
        &mut self,
        compiled: &[Compiled],
        row: u32,
        symbol: &str,
        price: f64,
        ts: u64,
        aggregates: &mut [f64],
        mut emit: impl FnMut(QueryId, f64, f64),
    ) {
        let row = row as usize;
        let Group { steps, shared, small_width, time_width, window_width, smalls, times, windows, .. } = self;
        let smalls = &mut smalls[row * *small_width..][..*small_width];
        for history in &mut smalls[..*shared] {
            history.push(price);
        }
        for step in steps.iter() {
            if step.filtered && !compiled[step.query as usize].passes(symbol, price) {
                continue;
            }
            let emit = |p, v| emit(step.query, p, v);
            let (place, window) = (step.place, step.window);
            // The commonest shapes, without the general evaluator.
            if let Some(single) = &step.single {
                let aggregate = &single.aggregate;
                let value = match (place, window) {
                    (Place::Shared(k), Window::Events(n)) => smalls[k as usize].aggregate(aggregate, n, price),
                    (Place::OwnSmall(k), Window::Events(n)) => {
                        let history = &mut smalls[k as usize];
                        history.push(price);
                        history.aggregate(aggregate, n, price)
                    }
                    (Place::Time(k), Window::Time(length)) => {
                        let state = &mut times[row * *time_width + k as usize];
                        state.push(length, price, ts);
                        state.aggregate(aggregate, price)
                    }
                    _ => f64::NAN,
                };
                if !matches!(place, Place::Window(_)) {
                    single.decide(price, value, emit);
                    continue;
                }
            }
            let Compiled { query, layout } = &compiled[step.query as usize];
            match place {
                Place::Shared(k) => smalls[k as usize].evaluate(query, layout, symbol, price, aggregates, emit),
                Place::OwnSmall(k) => {
                    let history = &mut smalls[k as usize];
                    history.push(price);
                    history.evaluate(query, layout, symbol, price, aggregates, emit);
                }
                Place::Time(k) => {
                    times[row * *time_width + k as usize].on_event(query, layout, symbol, price, ts, aggregates, emit)
                }
                Place::Window(k) => windows[row * *window_width + k as usize]
                    .on_event(query, layout, symbol, price, ts, aggregates, emit),
            }
        }
    }
}

/// Lays out a symbol's row for the queries that admit it: its signature and its states,
/// fresh, or moved from the symbol's previous row where a query is unchanged. `kept[q]` is
/// the previous index of query `q` if it is unchanged; `previous` the symbol's previous
/// members and states. Unchanged shared members keep sharing the history they shared; new
/// ones start a fresh one together.
pub fn lay_out(
    compiled: &[Compiled],
    symbol: &str,
    unindexed: bool,
    kept: &[Option<QueryId>],
    previous: Option<(&[Member], Cells)>,
) -> (Signature, Cells) {
    let (old_members, old) = match previous {
        Some((members, cells)) => (members, cells),
        None => (&[][..], Cells::default()),
    };
    // The previous row's states, each taken at most once.
    let mut old_smalls: Vec<Option<SmallState>> = old.smalls.into_iter().map(Some).collect();
    let mut old_times: Vec<Option<TimeState>> = old.times.into_iter().map(Some).collect();
    let mut old_windows: Vec<Option<WindowState>> = old.windows.into_iter().map(Some).collect();
    let attached: Vec<(usize, &Compiled, Option<Place>)> = compiled
        .iter()
        .enumerate()
        .filter(|(_, c)| unindexed || c.admits(symbol))
        .map(|(q, c)| {
            let was = kept.get(q).copied().flatten();
            let from = was.and_then(|was| old_members.iter().find(|m| m.query == was)).map(|m| m.place);
            (q, c, from)
        })
        .collect();
    let shared_from = |from: Option<Place>| match from {
        Some(Place::Shared(k)) => Some(k),
        _ => None,
    };
    // Shared histories: one per previous history still read, one for the new readers.
    let mut histories: Vec<Option<u32>> = Vec::new();
    for &(_, c, from) in &attached {
        if c.shares_history() && !histories.contains(&shared_from(from)) {
            histories.push(shared_from(from));
        }
    }
    let mut cells = Cells::default();
    for &from in &histories {
        cells.smalls.push(take(&mut old_smalls, from).unwrap_or_else(SmallState::new));
    }
    let mut members = Vec::with_capacity(attached.len());
    for (q, c, from) in attached {
        let place = match c.layout.kind() {
            _ if c.shares_history() => {
                let k = histories.iter().position(|h| *h == shared_from(from)).expect("history laid out");
                Place::Shared(k as u32)
            }
            StateKind::Small => {
                let from = from.and_then(|p| if let Place::OwnSmall(k) = p { Some(k) } else { None });
                cells.smalls.push(take(&mut old_smalls, from).unwrap_or_else(SmallState::new));
                Place::OwnSmall(cells.smalls.len() as u32 - 1)
            }
            StateKind::Time => {
                let from = from.and_then(|p| if let Place::Time(k) = p { Some(k) } else { None });
                cells.times.push(take(&mut old_times, from).unwrap_or_else(TimeState::new));
                Place::Time(cells.times.len() as u32 - 1)
            }
            StateKind::Window => {
                let from = from.and_then(|p| if let Place::Window(k) = p { Some(k) } else { None });
                let state = take(&mut old_windows, from);
                cells.windows.push(state.unwrap_or_else(|| WindowState::new(&c.query, &c.layout)));
                Place::Window(cells.windows.len() as u32 - 1)
            }
        };
        members.push(Member { query: q as QueryId, place });
    }
    (members, cells)
}

/// State `k` of a previous row, if there is one to take.
fn take<T>(states: &mut [Option<T>], k: Option<u32>) -> Option<T> {
    states.get_mut(k? as usize)?.take()
}
