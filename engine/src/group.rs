//! The states of the symbols that carry the same queries, kept together: a row per symbol of
//! adjacent cache lines, each holding a small price history or a time window (general windows,
//! larger, in a second array), so an event finds all of its symbol's states from one index in
//! neighbouring lines, as the hand-written rules kept theirs in one per-symbol record. The
//! small-window queries of a symbol that see every event read one shared price history,
//! pushed once per event.

use crate::engine::{QueryId, SymbolId};
use crate::handoff::{Reader, StateError, Writer};
use crate::program::Single;
use crate::state::{Layout, SmallState, StateKind, TimeChanges, TimeState, WindowState};
use cep_query::plan::{Expr, Query, Row, Window};

/// A query with what the per-event loop needs of it.
#[derive(Debug)]
pub struct Compiled {
    /// The checked query.
    pub query: Query,
    /// What its state keeps, and which kind of state it is.
    pub layout: Layout,
}

impl Compiled {
    /// Works out what the query's state keeps.
    pub fn new(query: Query) -> Self {
        Compiled { layout: Layout::new(&query), query }
    }

    /// Whether the query's symbol filter admits the symbol.
    pub fn admits(&self, symbol: &str) -> bool {
        let row = Row { symbol, price: f64::NAN, aggregates: &[] };
        self.query.symbol_filter.as_ref().is_none_or(|f| f.truth(&row) == Some(true))
    }

    /// Whether an event of the symbol passes the query's event filter, and its symbol filter
    /// too when `unindexed` (an indexed engine decided that once, when the symbol came).
    #[inline]
    fn passes(&self, symbol: &str, price: f64, unindexed: bool) -> bool {
        let row = Row { symbol, price, aggregates: &[] };
        let holds = |filter: &Option<Expr>| filter.as_ref().is_none_or(|f| f.truth(&row) == Some(true));
        (!unindexed || holds(&self.query.symbol_filter)) && holds(&self.query.event_filter)
    }

    /// Whether the query sees every event of its symbols (no per-event filter), so it can
    /// read a price history shared with others.
    fn shares_history(&self) -> bool {
        self.layout.kind() == StateKind::Small && self.query.event_filter.is_none()
    }
}

/// Where a member's state lives in its symbol's row: line `k`, or general window `k`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Place {
    /// A small history shared with the other members that started with it; pushed once per
    /// event, before any member reads it.
    Shared(u32),
    /// A small history of its own: the query filters events, so it takes only what passes.
    OwnSmall(u32),
    /// A time window in line `k`.
    Time(u32),
    /// General window `k` (in the row's second array).
    Window(u32),
}

/// A query attached to a group's symbols.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Member {
    /// The query's index in the rule set.
    pub query: QueryId,
    /// Where its state is in each row.
    pub place: Place,
}

/// A group's shape: its members in query order. The shared histories are a row's first
/// lines, then come the members' own lines in query order.
pub type Signature = Vec<Member>;

/// A small history or a time window, in a cache line of its own (the tag fits beside either).
#[derive(Debug)]
#[repr(align(64))]
pub struct Line(LineState);

#[derive(Debug)]
enum LineState {
    Small(SmallState),
    Time(TimeState),
}

impl Line {
    fn small() -> Self {
        Line(LineState::Small(SmallState::new()))
    }

    fn time() -> Self {
        Line(LineState::Time(TimeState::new()))
    }

    #[inline(always)]
    fn as_small(&mut self) -> &mut SmallState {
        match &mut self.0 {
            LineState::Small(state) => state,
            LineState::Time(_) => unreachable!("a small history's place holds one"),
        }
    }

    #[inline(always)]
    fn as_time(&mut self) -> &mut TimeState {
        match &mut self.0 {
            LineState::Time(state) => state,
            LineState::Small(_) => unreachable!("a time window's place holds one"),
        }
    }
}

/// One symbol's states, in the order of their places.
#[derive(Debug, Default)]
pub struct Cells {
    /// The row's cache lines: the shared histories first, then the members' own lines.
    pub lines: Vec<Line>,
    /// The row's general windows.
    pub windows: Vec<WindowState>,
}

/// A member as the per-event loop runs it, with what it needs of its query inline.
#[derive(Clone, Copy, Debug)]
struct Step {
    query: QueryId,
    /// Filters are decided per event: an event filter, or any filter in an unindexed engine.
    filtered: bool,
    kernel: Kernel,
}

/// How a member is evaluated, decided when its group is made.
#[derive(Clone, Copy, Debug)]
enum Kernel {
    /// A [`Single`] query over shared small history `history`, its window the last `events`.
    SharedSingle { history: u32, events: u64, single: Single },
    /// The same over a history of its own (it filters events).
    OwnSingle { history: u32, events: u64, single: Single },
    /// A [`Single`] query over time window `state`, `length` long.
    TimeSingle { state: u32, length: u64, single: Single },
    /// Any other query, through the general evaluator.
    General(Place),
}

impl Kernel {
    fn new(query: &Query, place: Place) -> Kernel {
        let Some(single) = Single::of(query) else { return Kernel::General(place) };
        match (place, query.window) {
            (Place::Shared(history), Window::Events(events)) => Kernel::SharedSingle { history, events, single },
            (Place::OwnSmall(history), Window::Events(events)) => Kernel::OwnSingle { history, events, single },
            (Place::Time(state), Window::Time(length)) => Kernel::TimeSingle { state, length, single },
            _ => Kernel::General(place),
        }
    }
}

/// The symbols with one signature and their states.
#[derive(Debug)]
pub struct Group {
    members: Vec<Member>,
    steps: Vec<Step>,
    /// The first `shared` lines of a row are histories pushed on every event.
    shared: usize,
    line_width: usize,
    window_width: usize,
    lines: Vec<Line>,
    windows: Vec<WindowState>,
    rows: u32,
    /// Each row's symbol.
    owners: Vec<SymbolId>,
    /// Symbol filters are decided per event (an engine without filter indexing).
    unindexed: bool,
}

impl Group {
    /// A group of these members, without symbols yet; with `unindexed`, symbol filters are
    /// decided per event.
    pub fn new(members: Signature, compiled: &[Compiled], unindexed: bool) -> Self {
        let steps = members
            .iter()
            .map(|m| {
                let query = &compiled[m.query as usize].query;
                Step {
                    query: m.query,
                    filtered: query.event_filter.is_some() || (unindexed && query.symbol_filter.is_some()),
                    kernel: Kernel::new(query, m.place),
                }
            })
            .collect();
        let width = |of: fn(Place) -> Option<u32>| {
            members.iter().filter_map(|m| of(m.place)).max().map_or(0, |k| k as usize + 1)
        };
        Group {
            shared: width(|p| if let Place::Shared(k) = p { Some(k) } else { None }),
            line_width: width(|p| match p {
                Place::Shared(k) | Place::OwnSmall(k) | Place::Time(k) => Some(k),
                Place::Window(_) => None,
            }),
            window_width: width(|p| if let Place::Window(k) = p { Some(k) } else { None }),
            members,
            steps,
            lines: Vec::new(),
            windows: Vec::new(),
            rows: 0,
            owners: Vec::new(),
            unindexed,
        }
    }

    /// Its members, in query order.
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// Adds symbol `owner`'s row; returns its index.
    pub fn add(&mut self, owner: SymbolId, cells: Cells) -> u32 {
        debug_assert_eq!((cells.lines.len(), cells.windows.len()), (self.line_width, self.window_width));
        self.lines.extend(cells.lines);
        self.windows.extend(cells.windows);
        self.owners.push(owner);
        self.rows += 1;
        self.rows - 1
    }

    /// Drops row `row` (its states are freed) and moves the last row into its place; returns
    /// the symbol whose row moved there, if one did.
    pub fn remove(&mut self, row: u32) -> Option<SymbolId> {
        let last = self.rows - 1;
        let (row, last_at) = (row as usize, last as usize);
        for k in 0..self.line_width {
            self.lines.swap(row * self.line_width + k, last_at * self.line_width + k);
        }
        for k in 0..self.window_width {
            self.windows.swap(row * self.window_width + k, last_at * self.window_width + k);
        }
        self.lines.truncate(last_at * self.line_width);
        self.windows.truncate(last_at * self.window_width);
        self.owners.swap_remove(row);
        self.rows = last;
        self.owners.get(row).copied()
    }

    /// Number of rows (symbols).
    pub fn rows(&self) -> u32 {
        self.rows
    }

    /// Writes row `row`'s layout and states (the hand-off format, [`crate::handoff`]).
    pub(crate) fn write_row(&self, compiled: &[Compiled], row: u32, w: &mut Writer) {
        self.write_row_with(compiled, row, w, |_, state, w| state.write(w));
    }

    /// A row as the formats write it: its layout, its lines (a time window's by `time`, given
    /// its line number), its general windows.
    fn write_row_with(
        &self,
        compiled: &[Compiled],
        row: u32,
        w: &mut Writer,
        time: impl Fn(usize, &TimeState, &mut Writer),
    ) {
        self.write_members(w);
        let row = row as usize;
        for (k, line) in self.lines[row * self.line_width..][..self.line_width].iter().enumerate() {
            match &line.0 {
                LineState::Small(state) => state.write(w),
                LineState::Time(state) => time(k, state, w),
            }
        }
        // Windows are numbered in query order.
        for member in &self.members {
            if let Place::Window(k) = member.place {
                let layout = &compiled[member.query as usize].layout;
                self.windows[row * self.window_width + k as usize].write(layout, w);
            }
        }
    }

    fn write_members(&self, w: &mut Writer) {
        w.count(self.members.len());
        for member in &self.members {
            let (tag, k) = match member.place {
                Place::Shared(k) => (0, k),
                Place::OwnSmall(k) => (1, k),
                Place::Time(k) => (2, k),
                Place::Window(k) => (3, k),
            };
            w.u32(member.query);
            w.u8(tag);
            w.u32(k);
        }
    }

    /// Writes row `row` as it changed since `appended` events of its symbol ago (the
    /// checkpoint changes format, [`crate::handoff`]): its layout, its small histories and
    /// general windows whole, its time windows as their newest events. A time window whose
    /// query filters events may have taken fewer of them: it is written whole.
    pub(crate) fn write_row_changes(&self, compiled: &[Compiled], row: u32, appended: u64, w: &mut Writer) {
        self.write_row_with(compiled, row, w, |k, state, w| {
            let filtered = self
                .members
                .iter()
                .zip(&self.steps)
                .any(|(member, step)| matches!(member.place, Place::Time(t) if t as usize == k) && step.filtered);
            state.write_changes(if filtered { u64::MAX } else { appended }, w)
        });
    }

    /// Row `row`'s states with `changes` (read for this group's members) applied.
    pub(crate) fn with_changes(&self, row: u32, changes: RowChanges) -> Result<Cells, StateError> {
        let mut cells = Cells { lines: Vec::with_capacity(self.line_width), windows: changes.windows };
        let old = &self.lines[row as usize * self.line_width..][..self.line_width];
        for (change, old) in changes.lines.into_iter().zip(old) {
            cells.lines.push(Line(match (change, &old.0) {
                (LineChange::Small(state), _) => LineState::Small(state),
                (LineChange::Time(changes), LineState::Time(old)) => LineState::Time(old.with_changes(&changes)?),
                (LineChange::Time(_), LineState::Small(_)) => unreachable!("the members were checked"),
            }));
        }
        Ok(cells)
    }

    /// Replaces row `row`'s states.
    pub fn replace(&mut self, row: u32, cells: Cells) {
        debug_assert_eq!((cells.lines.len(), cells.windows.len()), (self.line_width, self.window_width));
        let row = row as usize;
        for (slot, line) in self.lines[row * self.line_width..][..self.line_width].iter_mut().zip(cells.lines) {
            *slot = line;
        }
        for (slot, window) in self.windows[row * self.window_width..][..self.window_width].iter_mut().zip(cells.windows)
        {
            *slot = window;
        }
    }

    /// Every row's states, in row order (to move them when rules switch).
    pub fn into_rows(self) -> Vec<Cells> {
        let mut lines = self.lines.into_iter();
        let mut windows = self.windows.into_iter();
        (0..self.rows)
            .map(|_| Cells {
                lines: lines.by_ref().take(self.line_width).collect(),
                windows: windows.by_ref().take(self.window_width).collect(),
            })
            .collect()
    }

    /// Row `row` takes one event of symbol `names[id]`: the shared histories first, then each
    /// member in query order; `emit(query, price, value)` for each output. `aggregates` is
    /// scratch space.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub fn on_event(
        &mut self,
        compiled: &[Compiled],
        row: u32,
        names: &[Box<str>],
        id: SymbolId,
        price: f64,
        ts: u64,
        aggregates: &mut [f64],
        mut emit: impl FnMut(QueryId, f64, f64),
    ) {
        let row = row as usize;
        // Read only where a query looks at the symbol (most never do).
        let symbol = || &*names[id as usize];
        let Group { steps, shared, line_width, window_width, lines, windows, unindexed, .. } = self;
        let lines = &mut lines[row * *line_width..][..*line_width];
        for history in &mut lines[..*shared] {
            history.as_small().push(price);
        }
        for step in steps.iter() {
            if step.filtered && !compiled[step.query as usize].passes(symbol(), price, *unindexed) {
                continue;
            }
            let emit = |p, v| emit(step.query, p, v);
            match step.kernel {
                Kernel::SharedSingle { history, events, single } => {
                    let value = lines[history as usize].as_small().aggregate(&single.aggregate, events, price);
                    single.decide(price, value, emit);
                }
                Kernel::OwnSingle { history, events, single } => {
                    let history = lines[history as usize].as_small();
                    history.push(price);
                    single.decide(price, history.aggregate(&single.aggregate, events, price), emit);
                }
                Kernel::TimeSingle { state, length, single } => {
                    let state = lines[state as usize].as_time();
                    state.push(length, price, ts);
                    single.decide(price, state.aggregate(&single.aggregate, price), emit);
                }
                Kernel::General(place) => {
                    let Compiled { query, layout } = &compiled[step.query as usize];
                    let symbol = symbol();
                    match place {
                        Place::Shared(k) => {
                            lines[k as usize].as_small().evaluate(query, layout, symbol, price, aggregates, emit)
                        }
                        Place::OwnSmall(k) => {
                            let history = lines[k as usize].as_small();
                            history.push(price);
                            history.evaluate(query, layout, symbol, price, aggregates, emit);
                        }
                        Place::Time(k) => {
                            lines[k as usize].as_time().on_event(query, layout, symbol, price, ts, aggregates, emit)
                        }
                        Place::Window(k) => windows[row * *window_width + k as usize]
                            .on_event(query, layout, symbol, price, ts, aggregates, emit),
                    }
                }
            }
        }
    }

    /// Row `row`'s open tumbling windows emit what they hold (the end of input) and empty.
    pub fn close_windows(
        &mut self,
        compiled: &[Compiled],
        row: u32,
        symbol: &str,
        aggregates: &mut [f64],
        mut emit: impl FnMut(QueryId, f64, f64),
    ) {
        for step in &self.steps {
            let Kernel::General(Place::Window(k)) = step.kernel else { continue };
            let Compiled { query, layout } = &compiled[step.query as usize];
            let state = &mut self.windows[row as usize * self.window_width + k as usize];
            state.close_pane(query, layout, symbol, aggregates, |price, value| emit(step.query, price, value));
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
    let mut old_lines: Vec<Option<Line>> = old.lines.into_iter().map(Some).collect();
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
        cells.lines.push(take(&mut old_lines, from).unwrap_or_else(Line::small));
    }
    let mut members = Vec::with_capacity(attached.len());
    for (q, c, from) in attached {
        let mut line = |fresh: fn() -> Line, from: Option<u32>| {
            cells.lines.push(take(&mut old_lines, from).unwrap_or_else(fresh));
            cells.lines.len() as u32 - 1
        };
        let place = match (c.layout.kind(), from) {
            _ if c.shares_history() => {
                let k = histories.iter().position(|h| *h == shared_from(from)).expect("history laid out");
                Place::Shared(k as u32)
            }
            (StateKind::Small, from) => Place::OwnSmall(line(
                Line::small,
                from.and_then(|p| if let Place::OwnSmall(k) = p { Some(k) } else { None }),
            )),
            (StateKind::Time, from) => {
                Place::Time(line(Line::time, from.and_then(|p| if let Place::Time(k) = p { Some(k) } else { None })))
            }
            (StateKind::Window, from) => {
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

/// Reads a row written by [`Group::write_row`] for symbol `symbol`: its signature, which
/// must be one [`lay_out`] gives that symbol under these rules (the same queries; shared
/// histories numbered by first reader, then own lines and windows in query order), and its
/// states.
pub(crate) fn read_row(
    compiled: &[Compiled],
    symbol: &str,
    unindexed: bool,
    r: &mut Reader<'_>,
) -> Result<(Signature, Cells), StateError> {
    let (members, lines, windows) = read_row_with(compiled, symbol, unindexed, r, |time, r| {
        Ok(Line(match time {
            false => LineState::Small(SmallState::read(r)?),
            true => LineState::Time(TimeState::read(r)?),
        }))
    })?;
    Ok((members, Cells { lines, windows }))
}

/// A row's changes as [`Group::write_row_changes`] wrote them, read for one symbol.
pub(crate) struct RowChanges {
    pub(crate) members: Signature,
    lines: Vec<LineChange>,
    windows: Vec<WindowState>,
}

enum LineChange {
    Small(SmallState),
    Time(TimeChanges),
}

/// Reads what [`Group::write_row_changes`] wrote for symbol `symbol` (the members checked
/// as [`read_row`] checks them).
pub(crate) fn read_row_changes(
    compiled: &[Compiled],
    symbol: &str,
    unindexed: bool,
    r: &mut Reader<'_>,
) -> Result<RowChanges, StateError> {
    let (members, lines, windows) = read_row_with(compiled, symbol, unindexed, r, |time, r| {
        Ok(match time {
            false => LineChange::Small(SmallState::read(r)?),
            true => LineChange::Time(TimeChanges::read(r)?),
        })
    })?;
    Ok(RowChanges { members, lines, windows })
}

/// A row as the formats write it ([`Group::write_row_with`]): its members (checked), each
/// line read by `line` (told whether it is a time window), its general windows.
type ReadRow<T> = (Signature, Vec<T>, Vec<WindowState>);

fn read_row_with<T>(
    compiled: &[Compiled],
    symbol: &str,
    unindexed: bool,
    r: &mut Reader<'_>,
    line: impl Fn(bool, &mut Reader<'_>) -> Result<T, StateError>,
) -> Result<ReadRow<T>, StateError> {
    let (members, timed) = read_members(compiled, symbol, unindexed, r)?;
    let lines = timed.into_iter().map(|time| line(time, r)).collect::<Result<Vec<_>, _>>()?;
    let mut windows = Vec::new();
    for member in &members {
        if let Place::Window(_) = member.place {
            let Compiled { query, layout } = &compiled[member.query as usize];
            windows.push(WindowState::read(query, layout, r)?);
        }
    }
    Ok((members, lines, windows))
}

/// Reads a row's members (see [`read_row`]); returns them and, per line of the row, whether
/// it is a time window (else a small history).
fn read_members(
    compiled: &[Compiled],
    symbol: &str,
    unindexed: bool,
    r: &mut Reader<'_>,
) -> Result<(Signature, Vec<bool>), StateError> {
    let layout_error = || StateError::Layout(symbol.into());
    let attached = compiled.iter().enumerate().filter(|(_, c)| unindexed || c.admits(symbol));
    if r.count(9)? != attached.clone().count() {
        return Err(layout_error());
    }
    let mut members = Vec::new();
    let mut histories = 0;
    for (q, c) in attached {
        let (query, tag, k) = (r.u32()?, r.u8()?, r.u32()?);
        let place = match (tag, c.layout.kind()) {
            (0, StateKind::Small) if c.shares_history() && k <= histories => {
                histories += u32::from(k == histories);
                Place::Shared(k)
            }
            (1, StateKind::Small) if !c.shares_history() => Place::OwnSmall(k),
            (2, StateKind::Time) => Place::Time(k),
            (3, StateKind::Window) => Place::Window(k),
            _ => return Err(layout_error()),
        };
        if query as usize != q {
            return Err(layout_error());
        }
        members.push(Member { query, place });
    }
    // Own lines follow the shared histories, in query order; windows too, from 0. Per line:
    // whether it is a time window (else a small history).
    let mut timed = vec![false; histories as usize];
    let mut windows = 0;
    for member in &members {
        let (k, expected) = match member.place {
            Place::Shared(_) => continue,
            Place::OwnSmall(k) | Place::Time(k) => {
                timed.push(matches!(member.place, Place::Time(_)));
                (k, timed.len() - 1)
            }
            Place::Window(k) => {
                windows += 1;
                (k, windows - 1)
            }
        };
        if k as usize != expected {
            return Err(layout_error());
        }
    }
    Ok((members, timed))
}

/// State `k` of a previous row, if there is one to take.
fn take<T>(states: &mut [Option<T>], k: Option<u32>) -> Option<T> {
    states.get_mut(k? as usize)?.take()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<Line>(), 64);
        assert_eq!(std::mem::align_of::<Line>(), 64);
    }
}
