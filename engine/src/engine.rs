//! The engine for the symbols one worker owns: symbols are interned on first sight, and each
//! symbol carries the queries whose symbol filters admit it, with their state (filter
//! indexing: an event is offered only to the queries that can match it); symbols carrying the
//! same queries share a [`Group`]. Rules can be switched between two events; unchanged
//! queries keep their state.
//!
//! Event time runs forward per symbol: a tick earlier than its symbol's latest event time is
//! *late*. It is processed at that latest time (its price enters the windows as the newest
//! value, so it never reopens a closed tumbling window; Flink would put it in the window of
//! its own time) and counted, or, with an allowed lateness set, dropped and counted if it is
//! later than that. The end of input closes every open tumbling window
//! ([`Engine::close_windows`], Flink's final watermark).
//!
//! Symbols move between engines with their state (live rescaling):
//! [`Engine::export_symbols`], [`Engine::remove_symbols`], [`Engine::import_symbols`];
//! checkpoints write the state, or only what changed since the last checkpoint, with
//! [`Engine::export_checkpoint`] and restore it with [`Engine::restore_symbols`]; the format
//! is [`crate::handoff`]'s.

use crate::group::{lay_out, read_row, read_row_changes, Cells, Compiled, Group, Signature};
use crate::handoff::{fingerprint, Kind, Reader, StateError, Writer};
pub use crate::symbols::SymbolId;
use crate::symbols::SymbolTable;
use cep_query::plan::{Query, RuleSet};
use rustc_hash::{FxHashMap, FxHashSet};

/// A query's index in the engine's current rule set.
pub type QueryId = u32;

/// The engine of one worker (or of `cep engine`): the rules in force, every symbol's state,
/// and counts of what it processed, was late and emitted.
#[derive(Debug)]
pub struct Engine {
    compiled: Vec<Compiled>,
    /// Offer events to every query and decide symbol filters per event (for measuring what
    /// the index saves); normally false.
    unindexed: bool,
    symbols: SymbolTable,
    /// The symbols grouped by the queries they carry, with their states.
    groups: Vec<Group>,
    group_of: FxHashMap<Signature, u32>,
    /// Per symbol id: where its states are and its latest event time ([`VACANT`] for the id
    /// of a removed symbol).
    slots: Vec<Slot>,
    /// Per symbol id: its ticks at the last checkpoint export that held it ([`UNMARKED`]:
    /// none did), so the next one writes only what changed since.
    marks: Vec<u64>,
    aggregates: Vec<f64>,
    /// Ticks later than this (ns) behind their symbol's latest are dropped; `None` keeps all.
    allowed_lateness: Option<u64>,
    processed: u64,
    late: u64,
    late_dropped: u64,
    outputs_total: u64,
}

/// A symbol's place: its group, its row there, its latest event time, and the ticks it
/// took into its windows since it came to this engine (the checkpoint changes' measure of
/// what was appended since).
#[derive(Clone, Copy, Debug)]
struct Slot {
    group: u32,
    row: u32,
    latest: u64,
    ticks: u64,
}

impl Slot {
    fn new(group: u32, row: u32, latest: u64) -> Self {
        Slot { group, row, latest, ticks: 0 }
    }
}

/// A symbol's mark when no checkpoint export holds it (its next one writes it whole).
const UNMARKED: u64 = u64::MAX;

/// A checkpoint part being written a symbol at a time ([`Engine::begin_checkpoint_part`]).
pub struct CheckpointPart {
    bytes: Vec<u8>,
    /// Where the count of symbols written lies (patched by [`Self::finish`]).
    count_at: usize,
    written: u32,
    changes: bool,
}

impl CheckpointPart {
    /// The part's bytes, in the format [`Engine::export_checkpoint`] writes.
    pub fn finish(mut self) -> Vec<u8> {
        self.bytes[self.count_at..self.count_at + 4].copy_from_slice(&self.written.to_le_bytes());
        self.bytes
    }
}

/// The group of a free id's slot (a removed symbol's, not reused yet).
const VACANT: u32 = u32::MAX;

impl Slot {
    fn is_vacant(&self) -> bool {
        self.group == VACANT
    }
}

impl Engine {
    /// An engine running `rules`, with filter indexing.
    pub fn new(rules: RuleSet) -> Self {
        Self::build(rules, false)
    }

    /// An engine without filter indexing: every query sees every event (benchmarks only).
    pub fn unindexed(rules: RuleSet) -> Self {
        Self::build(rules, true)
    }

    fn build(rules: RuleSet, unindexed: bool) -> Self {
        let mut engine = Engine {
            compiled: Vec::new(),
            unindexed,
            symbols: SymbolTable::default(),
            groups: Vec::new(),
            group_of: FxHashMap::default(),
            slots: Vec::new(),
            marks: Vec::new(),
            aggregates: Vec::new(),
            allowed_lateness: None,
            processed: 0,
            late: 0,
            late_dropped: 0,
            outputs_total: 0,
        };
        engine.install(rules);
        engine
    }

    fn install(&mut self, rules: RuleSet) {
        self.compiled = rules.queries.into_iter().map(Compiled::new).collect();
        self.aggregates = vec![0.0; self.compiled.iter().map(|c| c.query.aggregates.len()).max().unwrap_or(0)];
    }

    /// Sets how late (ns behind its symbol's latest event time) a tick may be and still be
    /// processed; later ones are dropped and counted. `None` (the default) processes every
    /// late tick at its symbol's latest time.
    pub fn set_allowed_lateness(&mut self, allowed: Option<u64>) {
        self.allowed_lateness = allowed;
    }

    /// Puts symbol `id`'s row in the group of its signature; returns (group, row).
    fn place(&mut self, id: SymbolId, signature: Signature, cells: Cells) -> (u32, u32) {
        let (groups, compiled, unindexed) = (&mut self.groups, &self.compiled, self.unindexed);
        let group = *self.group_of.entry(signature).or_insert_with_key(|signature| {
            groups.push(Group::new(signature.clone(), compiled, unindexed));
            groups.len() as u32 - 1
        });
        (group, self.groups[group as usize].add(id, cells))
    }

    /// Gives symbol `id` its slot (a new id's, or a reused one's); no checkpoint holds it.
    fn set_slot(&mut self, id: SymbolId, slot: Slot) {
        match self.slots.get_mut(id as usize) {
            Some(vacant) => *vacant = slot,
            None => self.slots.push(slot),
        }
        match self.marks.get_mut(id as usize) {
            Some(mark) => *mark = UNMARKED,
            None => self.marks.push(UNMARKED),
        }
    }

    /// Switches to new rules between two events. A query with the same name and the same
    /// plan as a running one keeps its states; new and changed ones start empty.
    pub fn switch(&mut self, rules: RuleSet) {
        let old_compiled = std::mem::take(&mut self.compiled);
        let kept: Vec<Option<QueryId>> = rules
            .queries
            .iter()
            .map(|query| old_compiled.iter().position(|old| old.query == *query).map(|at| at as QueryId))
            .collect();
        self.install(rules);
        let old_groups = std::mem::take(&mut self.groups);
        self.group_of.clear();
        let members: Vec<Signature> = old_groups.iter().map(|g| g.members().to_vec()).collect();
        let mut rows: Vec<Vec<Option<Cells>>> =
            old_groups.into_iter().map(|g| g.into_rows().into_iter().map(Some).collect()).collect();
        for id in 0..self.slots.len() {
            let Slot { group, row, latest, ticks } = self.slots[id];
            if self.slots[id].is_vacant() {
                continue;
            }
            let cells = rows[group as usize][row as usize].take().expect("each row moves once");
            let previous = Some((&members[group as usize][..], cells));
            let (signature, cells) =
                lay_out(&self.compiled, &self.symbols.names()[id], self.unindexed, &kept, previous);
            let (group, row) = self.place(id as SymbolId, signature, cells);
            self.slots[id] = Slot { group, row, latest, ticks };
        }
        // The rows' layouts changed: the next checkpoint writes every symbol whole.
        self.marks.iter_mut().for_each(|mark| *mark = UNMARKED);
    }

    /// The queries of the rules in force, in order (a [`QueryId`] indexes them).
    pub fn queries(&self) -> impl Iterator<Item = &Query> {
        self.compiled.iter().map(|c| &c.query)
    }

    /// The symbol's id, interning it on first sight (the only allocation, once per symbol); a
    /// symbol new to the engine may get a removed symbol's id ([`Self::remove_symbols`]).
    #[inline]
    pub fn intern(&mut self, symbol: &str) -> SymbolId {
        self.intern_bytes(symbol.as_bytes())
    }

    /// [`Self::intern`] for a symbol already known to be UTF-8 (as decoded frames are).
    #[inline]
    pub fn intern_bytes(&mut self, symbol: &[u8]) -> SymbolId {
        match self.symbols.get(symbol) {
            Some(id) => id,
            None => self.insert(symbol),
        }
    }

    #[cold]
    fn insert(&mut self, bytes: &[u8]) -> SymbolId {
        let id = self.symbols.insert(bytes);
        let name = &self.symbols.names()[id as usize];
        let (signature, cells) = lay_out(&self.compiled, name, self.unindexed, &[], None);
        let (group, row) = self.place(id, signature, cells);
        self.set_slot(id, Slot::new(group, row, 0));
        id
    }

    /// The id of a symbol the engine owns, without interning it.
    pub fn symbol_id(&self, symbol: &[u8]) -> Option<SymbolId> {
        self.symbols.get(symbol)
    }

    /// Number of symbols the engine owns: seen or imported, and not removed since.
    pub fn symbols(&self) -> usize {
        self.symbols.len()
    }

    /// The ids of the symbols the engine owns, in order.
    pub fn symbol_ids(&self) -> impl Iterator<Item = SymbolId> + '_ {
        self.slots.iter().enumerate().filter(|(_, slot)| !slot.is_vacant()).map(|(id, _)| id as SymbolId)
    }

    /// The names of the symbols the engine owns, by id (to export them all).
    pub fn symbol_names(&self) -> impl Iterator<Item = &str> {
        let names = self.symbols.names();
        self.slots.iter().zip(names).filter(|(slot, _)| !slot.is_vacant()).map(|(_, name)| &**name)
    }

    /// Ticks processed so far (late ones, dropped or not, included).
    pub fn processed(&self) -> u64 {
        self.processed
    }

    /// Late ticks processed at their symbol's latest event time.
    pub fn late(&self) -> u64 {
        self.late
    }

    /// Late ticks dropped for being later than the allowed lateness.
    pub fn late_dropped(&self) -> u64 {
        self.late_dropped
    }

    /// Outputs so far, all rules.
    pub fn outputs_total(&self) -> u64 {
        self.outputs_total
    }

    /// Processes one tick of an interned symbol at event time `ts` (ns); calls
    /// `emit(query, price, value)` for each output, in query order. Price validity is the
    /// caller's contract (finite, > 0), and so is the id: one [`Self::intern`] or
    /// [`Self::import_symbols`] gave, of a symbol not removed since.
    #[inline]
    pub fn process(&mut self, id: SymbolId, price: f64, ts: u64, mut emit: impl FnMut(QueryId, f64, f64)) {
        self.processed += 1;
        let slot = &mut self.slots[id as usize];
        let (group, row) = (slot.group, slot.row);
        let ts = if ts >= slot.latest {
            slot.latest = ts;
            slot.ticks += 1;
            ts
        } else {
            match self.late_tick(id, ts) {
                Some(ts) => ts,
                None => return,
            }
        };
        let total = &mut self.outputs_total;
        self.groups[group as usize].on_event(
            &self.compiled,
            row,
            self.symbols.names(),
            id,
            price,
            ts,
            &mut self.aggregates,
            |query, p, v| {
                *total += 1;
                emit(query, p, v);
            },
        );
    }

    /// A tick behind its symbol's latest event time: the time it is processed at, or `None`
    /// if it is dropped.
    #[cold]
    fn late_tick(&mut self, id: SymbolId, ts: u64) -> Option<u64> {
        let latest = self.slots[id as usize].latest;
        if self.allowed_lateness.is_some_and(|allowed| latest - ts > allowed) {
            self.late_dropped += 1;
            None
        } else {
            self.late += 1;
            self.slots[id as usize].ticks += 1;
            Some(latest)
        }
    }

    /// The end of input (Flink's final watermark): every open tumbling window emits what it
    /// holds, in symbol order (by id: first appearance, unless ids were reused) then query
    /// order, through `emit(symbol, query, price, value)`, and is left empty.
    pub fn close_windows(&mut self, mut emit: impl FnMut(SymbolId, QueryId, f64, f64)) {
        let total = &mut self.outputs_total;
        for (id, slot) in self.slots.iter().enumerate().filter(|(_, slot)| !slot.is_vacant()) {
            let id = id as SymbolId;
            self.groups[slot.group as usize].close_windows(
                &self.compiled,
                slot.row,
                &self.symbols.names()[id as usize],
                &mut self.aggregates,
                |query, price, value| {
                    *total += 1;
                    emit(id, query, price, value);
                },
            );
        }
    }

    /// The name of an interned symbol (empty for the id of a removed symbol not reused yet).
    pub fn symbol_name(&self, id: SymbolId) -> &str {
        &self.symbols.names()[id as usize]
    }

    /// Interns and processes in one call.
    #[inline]
    pub fn process_symbol(
        &mut self,
        symbol: &str,
        price: f64,
        ts: u64,
        emit: impl FnMut(QueryId, f64, f64),
    ) -> SymbolId {
        let id = self.intern(symbol);
        self.process(id, price, ts, emit);
        id
    }

    /// The fingerprint of the rules in force, as exports carry it ([`crate::handoff`]).
    pub fn rules_fingerprint(&self) -> u64 {
        fingerprint(self.queries())
    }

    /// The complete state of the named symbols, in the hand-off format ([`crate::handoff`]):
    /// every window, history, streak, moments, pane and min/max deque of every query of
    /// theirs, and their latest event times, so that an engine with the same rules that
    /// imports it ([`Self::import_symbols`]) gives, for their next ticks and at the end of
    /// input, exactly the outputs this one would. Symbols the engine does not own are
    /// skipped, and a name given twice is written once. Nothing changes here: to hand the
    /// symbols off, [`Self::remove_symbols`] them after.
    pub fn export_symbols(&self, symbols: &[&[u8]]) -> Vec<u8> {
        let mut w = Writer::default();
        w.header(Kind::Export, self.rules_fingerprint());
        let ids = self.owned_ids(symbols);
        w.count(ids.len());
        for id in ids {
            self.write_symbol(id, None, &mut w);
        }
        w.bytes
    }

    /// The named symbols' state for a checkpoint: complete (as [`Self::export_symbols`]), or
    /// with `changes`, only what changed since the last checkpoint export that held each
    /// symbol ([`crate::handoff`]'s changes: a symbol unchanged since is left out, one no
    /// such export held is written whole). Either way the symbols are marked: the next
    /// changes start from here. Restoring the last complete export and every changes export
    /// after it, in order ([`Self::restore_symbols`]), gives the state now. Written into
    /// `into` (emptied first), whose memory is reused.
    pub fn export_checkpoint(&mut self, symbols: &[&[u8]], changes: bool, into: &mut Vec<u8>) {
        let mut part = self.begin_checkpoint_part(changes, std::mem::take(into));
        for id in self.owned_ids(symbols) {
            self.checkpoint_symbol(&mut part, id);
        }
        *into = part.finish();
    }

    /// Starts a checkpoint part that takes its symbols one at a time
    /// ([`Self::checkpoint_symbol`]), written into `buffer` (emptied first, its memory
    /// reused): what [`Self::export_checkpoint`] writes for the same symbols, in the order
    /// they are taken. So a worker can copy each symbol's state when it must (before its next
    /// tick changes it) or when it has time, instead of all at once at the barrier.
    pub fn begin_checkpoint_part(&self, changes: bool, mut buffer: Vec<u8>) -> CheckpointPart {
        buffer.clear();
        let mut w = Writer { bytes: buffer };
        w.header(if changes { Kind::Changes } else { Kind::Export }, self.rules_fingerprint());
        let count_at = w.bytes.len();
        w.count(0);
        CheckpointPart { bytes: w.bytes, count_at, written: 0, changes }
    }

    /// Adds symbol `id`'s state, as it is now, to `part` (with changes: only if it changed
    /// since the last checkpoint export that held it; one no such export held is written
    /// whole) and marks it: the next changes start from here. Returns the bytes it added.
    pub fn checkpoint_symbol(&mut self, part: &mut CheckpointPart, id: SymbolId) -> usize {
        let (slot, mark) = (self.slots[id as usize], self.marks[id as usize]);
        if part.changes && mark == slot.ticks {
            return 0;
        }
        let before = part.bytes.len();
        let mut w = Writer { bytes: std::mem::take(&mut part.bytes) };
        if !part.changes {
            self.write_symbol(id, None, &mut w);
        } else if mark == UNMARKED {
            self.write_symbol(id, Some(0), &mut w);
        } else {
            w.text(self.symbol_name(id).as_bytes());
            w.u64(slot.latest);
            w.u8(1);
            self.groups[slot.group as usize].write_row_changes(&self.compiled, slot.row, slot.ticks - mark, &mut w);
        }
        part.bytes = w.bytes;
        part.written += 1;
        self.marks[id as usize] = slot.ticks;
        part.bytes.len() - before
    }

    /// The ids of the named symbols the engine owns, each once, in the names' order.
    fn owned_ids(&self, symbols: &[&[u8]]) -> Vec<SymbolId> {
        let mut seen = FxHashSet::default();
        symbols.iter().filter_map(|name| self.symbols.get(name)).filter(|&id| seen.insert(id)).collect()
    }

    /// A symbol as an export holds it: name, latest event time, (in changes, `tag`) row.
    fn write_symbol(&self, id: SymbolId, tag: Option<u8>, w: &mut Writer) {
        let Slot { group, row, latest, .. } = self.slots[id as usize];
        w.text(self.symbol_name(id).as_bytes());
        w.u64(latest);
        if let Some(tag) = tag {
            w.u8(tag);
        }
        self.groups[group as usize].write_row(&self.compiled, row, w);
    }

    /// Forgets the named symbols and their state (names the engine does not own are
    /// ignored); their memory is freed, or reused by the symbols that come next, so the
    /// engine's memory stays bounded by the symbols it owns however many come and go. The
    /// counts (processed, late, outputs) keep what the symbols contributed.
    ///
    /// **Ids are reused**: a removed symbol's [`SymbolId`] is free, and the next symbol
    /// interned or imported may get it (the last freed first). Data kept by `SymbolId`
    /// outside the engine must be reset for the removed ids; a removed id must not be
    /// passed to [`Self::process`] again until the engine hands it out again.
    pub fn remove_symbols(&mut self, symbols: &[&[u8]]) {
        for name in symbols {
            let Some(id) = self.symbols.get(name) else { continue };
            let Slot { group, row, .. } = self.slots[id as usize];
            if let Some(moved) = self.groups[group as usize].remove(row) {
                self.slots[moved as usize].row = row;
            }
            self.slots[id as usize] = Slot::new(VACANT, 0, 0);
            self.symbols.remove(id);
        }
    }

    /// Installs the state [`Self::export_symbols`] wrote (by an engine with the same rules,
    /// whatever its other symbols); returns the new symbols' ids, in the bytes' order. The
    /// bytes are checked as hostile input ([`crate::handoff`]): another format version,
    /// other rules, a truncated or inconsistent state, trailing bytes, a symbol given twice
    /// or one this engine already owns are refused with their [`StateError`], and then
    /// nothing is installed.
    pub fn import_symbols(&mut self, bytes: &[u8]) -> Result<Vec<SymbolId>, StateError> {
        if Reader::new(bytes).header(self.rules_fingerprint())? != Kind::Export {
            return Err(StateError::Changes);
        }
        self.restore_symbols(bytes, |_| true)
    }

    /// Restores a checkpoint's symbols, those `keep` names only: from a complete export they
    /// are installed (as [`Self::import_symbols`] does), from changes
    /// ([`Self::export_checkpoint`]) their state is brought up to date (a changed symbol must
    /// be here already, restored from the exports before; one written whole replaces what
    /// is here). Returns the kept symbols' ids, in the bytes' order. Checked as hostile
    /// input, all or nothing, as an import is; the symbols not kept are read and checked too.
    pub fn restore_symbols(&mut self, bytes: &[u8], keep: impl Fn(&str) -> bool) -> Result<Vec<SymbolId>, StateError> {
        let mut r = Reader::new(bytes);
        let kind = r.header(self.rules_fingerprint())?;
        let states = self.read_states(r, kind, keep)?;
        if kind == Kind::Export {
            if let Some((name, ..)) = states.iter().find(|(name, ..)| self.symbols.get(name.as_bytes()).is_some()) {
                return Err(StateError::AlreadyOwned(name.clone()));
            }
        }
        Ok(self.install_states(states))
    }

    /// Reads every symbol of an export or of changes after the header, checked; returns the
    /// new states of the symbols `keep` names. Nothing changes here.
    fn read_states(
        &self,
        mut r: Reader<'_>,
        kind: Kind,
        keep: impl Fn(&str) -> bool,
    ) -> Result<Vec<(String, u64, State)>, StateError> {
        // Each symbol takes at least its name's length, latest time and member count.
        let count = r.count(16)?;
        let mut states = Vec::new();
        let mut names = FxHashSet::default();
        for _ in 0..count {
            let name = std::str::from_utf8(r.text()?).map_err(|_| StateError::Name)?;
            let latest = r.u64()?;
            let changed = match kind {
                Kind::Export => false,
                Kind::Changes => match r.u8()? {
                    0 => false,
                    1 => true,
                    _ => return Err(StateError::inconsistent("a symbol's changes of unknown kind").in_symbol(name)),
                },
            };
            if !names.insert(name) {
                return Err(StateError::Repeated(name.into()));
            }
            let in_symbol = |e: StateError| e.in_symbol(name);
            let state = if changed {
                let changes = read_row_changes(&self.compiled, name, self.unindexed, &mut r).map_err(in_symbol)?;
                if !keep(name) {
                    continue;
                }
                let id = self.symbols.get(name.as_bytes()).ok_or_else(|| StateError::NotOwned(name.into()))?;
                let Slot { group, row, .. } = self.slots[id as usize];
                let group = &self.groups[group as usize];
                if group.members() != changes.members.as_slice() {
                    return Err(StateError::Layout(name.into()));
                }
                State::Changed(id, group.with_changes(row, changes).map_err(in_symbol)?)
            } else {
                let (signature, cells) = read_row(&self.compiled, name, self.unindexed, &mut r).map_err(in_symbol)?;
                if !keep(name) {
                    continue;
                }
                State::Whole(signature, cells)
            };
            states.push((name.to_string(), latest, state));
        }
        r.finish()?;
        Ok(states)
    }

    /// Installs what [`Self::read_states`] read; returns the symbols' ids.
    fn install_states(&mut self, states: Vec<(String, u64, State)>) -> Vec<SymbolId> {
        let mut ids = Vec::with_capacity(states.len());
        for (name, latest, state) in states {
            let id = match state {
                State::Changed(id, cells) => {
                    let slot = &mut self.slots[id as usize];
                    slot.latest = latest;
                    self.groups[slot.group as usize].replace(slot.row, cells);
                    id
                }
                State::Whole(signature, cells) => {
                    self.remove_symbols(&[name.as_bytes()]);
                    let id = self.symbols.insert(name.as_bytes());
                    let (group, row) = self.place(id, signature, cells);
                    self.set_slot(id, Slot::new(group, row, latest));
                    id
                }
            };
            ids.push(id);
        }
        ids
    }
}

/// A symbol's state read off an export or changes.
enum State {
    /// Complete: its layout and states.
    Whole(Signature, Cells),
    /// The new states of a symbol the engine owns (its layout unchanged).
    Changed(SymbolId, Cells),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> RuleSet {
        let text = cep_query::REFERENCE.to_string()
            + "@name('range') SELECT symbol, max(price) - min(price) AS value FROM StockTick PARTITION BY symbol RETAIN TUMBLING 5 SECONDS;
               @name('only_s1') SELECT symbol, avg(price) AS value FROM StockTick WHERE symbol = 'S1' PARTITION BY symbol RETAIN 20 EVENTS;";
        cep_query::compile(&text, "test").unwrap()
    }

    /// The rules of the checkpoint tests: every state kind, and a time window that filters
    /// events (its changes are written whole).
    fn checkpoint_rules() -> RuleSet {
        let text = cep_query::REFERENCE.to_string()
            + "@name('range') SELECT symbol, max(price) - min(price) AS value FROM StockTick PARTITION BY symbol RETAIN TUMBLING 5 SECONDS;
               @name('only_s1') SELECT symbol, avg(price) AS value FROM StockTick WHERE symbol = 'S1' PARTITION BY symbol RETAIN 20 EVENTS;
               @name('high') SELECT symbol, avg(price) AS value FROM StockTick WHERE price > 100 PARTITION BY symbol RETAIN 2 SECONDS;";
        cep_query::compile(&text, "test").unwrap()
    }

    fn all_names(engine: &Engine) -> Vec<Vec<u8>> {
        engine.symbol_names().map(|name| name.as_bytes().to_vec()).collect()
    }

    fn export_all(engine: &Engine) -> Vec<u8> {
        let names = all_names(engine);
        engine.export_symbols(&names.iter().map(Vec::as_slice).collect::<Vec<_>>())
    }

    /// A checkpoint as a worker takes it: everything, or the symbols changed since.
    fn checkpoint(engine: &mut Engine, changes: bool) -> Vec<u8> {
        let names = all_names(engine);
        let mut bytes = Vec::new();
        engine.export_checkpoint(&names.iter().map(Vec::as_slice).collect::<Vec<_>>(), changes, &mut bytes);
        bytes
    }

    /// A complete checkpoint then changes, taken at many points of a stream with late ticks
    /// (processed and dropped), symbols coming along the way and windows emptying: restoring
    /// the chain gives, at every point, exactly the state of the engine that took it, and
    /// the changes stay far smaller than the state once the windows are full.
    #[test]
    fn checkpoint_changes_restore_the_state_exactly() {
        let mut engine = Engine::new(checkpoint_rules());
        engine.set_allowed_lateness(Some(400_000_000));
        let mut chain: Vec<Vec<u8>> = Vec::new();
        let (mut ts, mut price, mut seed) = (1_000_000_000u64, 100.0f64, 7u64);
        let mut random = move || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            seed >> 33
        };
        let (mut full_bytes, mut last_changes) = (0, 0);
        for step in 0..60u64 {
            let symbols = 2 + step.min(20) / 4;
            for _ in 0..200 {
                let symbol = format!("S{}", random() % symbols);
                price = (price * (1.0 + (random() % 200) as f64 / 10_000.0 - 0.01)).max(1.0);
                // Ticks come 1 ms apart; one in ten is late (some beyond the allowed lateness).
                ts += 1_000_000;
                let at = if random() % 10 == 0 { ts - (random() % 800) * 1_000_000 } else { ts };
                engine.process_symbol(&symbol, price, at, |_, _, _| {});
            }
            if step == 30 {
                // A quiet spell: every time window empties.
                ts += 20_000_000_000;
            }
            // Every fifth checkpoint is complete, as when the changes outgrow the state.
            let changes = step % 5 != 0;
            let bytes = checkpoint(&mut engine, changes);
            match changes {
                false => {
                    full_bytes = bytes.len();
                    chain.clear();
                }
                true => last_changes = bytes.len(),
            }
            chain.push(bytes);
            let mut restored = Engine::new(checkpoint_rules());
            for bytes in &chain {
                restored.restore_symbols(bytes, |_| true).unwrap();
            }
            assert_eq!(export_all(&restored), export_all(&engine), "checkpoint {step}");
        }
        assert!(last_changes * 4 < full_bytes, "changes {last_changes} bytes, the state {full_bytes}");
        // Not a tick since: no symbol to write (the header and a zero count).
        assert_eq!(checkpoint(&mut engine, true).len(), 4 + 2 + 8 + 4);
    }

    /// A restored symbol goes on exactly as it would have: the same outputs for the same
    /// next ticks. Only the symbols kept are restored.
    #[test]
    fn a_restored_chain_gives_the_same_outputs_and_keeps_what_it_is_told() {
        let mut engine = Engine::new(checkpoint_rules());
        let mut chain = Vec::new();
        for round in 0..4u64 {
            for k in 0..300u64 {
                let symbol = ["S1", "S2", "S3"][(k % 3) as usize];
                engine.process_symbol(
                    symbol,
                    99.0 + ((k * 7 + round) % 5) as f64,
                    (round * 300 + k) * 10_000_000,
                    |_, _, _| {},
                );
            }
            chain.push(checkpoint(&mut engine, round > 0));
        }
        let mut restored = Engine::new(checkpoint_rules());
        for bytes in &chain {
            let ids = restored.restore_symbols(bytes, |name| name != "S2").unwrap();
            assert!(ids.iter().all(|&id| restored.symbol_name(id) != "S2"));
        }
        let mut names: Vec<&str> = restored.symbol_names().collect();
        names.sort();
        assert_eq!(names, ["S1", "S3"]);
        let (mut before, mut after) = (Vec::new(), Vec::new());
        for k in 0..500u64 {
            let symbol = ["S1", "S3"][(k % 2) as usize];
            let (price, ts) = (98.0 + (k % 7) as f64, 12_000_000_000 + k * 10_000_000);
            engine.process_symbol(symbol, price, ts, |q, p, v| before.push((k, q, p.to_bits(), v.to_bits())));
            restored.process_symbol(symbol, price, ts, |q, p, v| after.push((k, q, p.to_bits(), v.to_bits())));
        }
        assert!(!before.is_empty());
        assert_eq!(before, after);
    }

    /// Changes that do not fit the state they are applied to are refused, and nothing is
    /// installed: to a symbol not here, to a window that held fewer events than they keep,
    /// truncated, or read as a complete export.
    #[test]
    fn changes_that_do_not_fit_are_refused() {
        let mut engine = Engine::new(checkpoint_rules());
        let tick = |engine: &mut Engine, k: u64| {
            engine.process_symbol("S1", 100.0 + k as f64, k * 1_000_000, |_, _, _| {});
        };
        (0..3).for_each(|k| tick(&mut engine, k));
        let early = checkpoint(&mut engine, false);
        (3..10).for_each(|k| tick(&mut engine, k));
        let _ = checkpoint(&mut engine, true);
        (10..12).for_each(|k| tick(&mut engine, k));
        let changes = checkpoint(&mut engine, true);

        let mut fresh = Engine::new(checkpoint_rules());
        assert_eq!(fresh.restore_symbols(&changes, |_| true), Err(StateError::NotOwned("S1".into())));
        assert_eq!(fresh.import_symbols(&changes), Err(StateError::Changes));
        // The window had 3 events; the changes keep 10 of the earlier ones.
        fresh.import_symbols(&early).unwrap();
        let before = export_all(&fresh);
        assert!(matches!(fresh.restore_symbols(&changes, |_| true), Err(StateError::Inconsistent { .. })));
        assert!(matches!(
            fresh.restore_symbols(&changes[..changes.len() - 3], |_| true),
            Err(StateError::Truncated { .. })
        ));
        assert_eq!(export_all(&fresh), before, "nothing installed");
        // Not kept: read and checked, not applied.
        fresh.restore_symbols(&changes, |_| false).unwrap();
        assert_eq!(export_all(&fresh), before);
    }

    /// Rows, slots and names held, all groups together.
    fn held(engine: &Engine) -> (usize, usize, usize) {
        let rows = engine.groups.iter().map(|g| g.rows() as usize).sum();
        (rows, engine.slots.len(), engine.symbols.names().len())
    }

    /// Symbols coming and going forever (new names each round, some moved to another engine
    /// and back) never hold more rows, slots or names than the most symbols owned at once.
    #[test]
    fn memory_stays_bounded_by_the_symbols_owned() {
        const LIVE: usize = 6;
        let (mut a, mut b) = (Engine::new(rules()), Engine::new(rules()));
        let mut ts = 0;
        for round in 0..500u64 {
            let names: Vec<String> = (0..LIVE).map(|k| format!("S{}", round * 7 + k as u64)).collect();
            let names: Vec<&[u8]> = names.iter().map(|n| n.as_bytes()).collect();
            for (k, name) in names.iter().enumerate() {
                ts += 300_000_000;
                let id = a.intern_bytes(name);
                a.process(id, 100.0 + (round % 5) as f64 + k as f64, ts, |_, _, _| {});
            }
            assert_eq!(a.symbols(), LIVE);
            let (moved, kept) = names.split_at(LIVE / 2);
            b.import_symbols(&a.export_symbols(moved)).unwrap();
            a.remove_symbols(moved);
            if round % 3 == 0 {
                // Back again.
                a.import_symbols(&b.export_symbols(moved)).unwrap();
                b.remove_symbols(moved);
                a.remove_symbols(moved);
            } else {
                b.remove_symbols(moved);
            }
            if round % 50 == 0 {
                a.switch(rules());
            }
            a.remove_symbols(kept);
            assert_eq!((a.symbols(), b.symbols()), (0, 0));
            assert_eq!(a.symbol_names().count(), 0);
            let mut closed = 0;
            a.close_windows(|_, _, _, _| closed += 1);
            assert_eq!(closed, 0, "removed symbols are not closed");
            for engine in [&a, &b] {
                let (rows, slots, names) = held(engine);
                assert_eq!(rows, 0);
                assert!(slots <= LIVE && names <= LIVE, "{slots} slots, {names} names");
            }
        }
        assert_eq!(a.processed(), 500 * LIVE as u64, "counts keep what removed symbols did");
    }

    /// A symbol removed and seen again starts afresh, under a reused id; the rows of the
    /// symbols left stay theirs (the last row moves into the hole).
    #[test]
    fn a_removed_symbol_comes_back_empty_under_a_reused_id() {
        let mut engine = Engine::new(rules());
        for (symbol, price) in [("S2", 100.0), ("S3", 100.0), ("S1", 100.0), ("S2", 110.0), ("S3", 90.0)] {
            engine.process_symbol(symbol, price, 1, |_, _, _| {});
        }
        let s2 = engine.intern("S2");
        assert_eq!(engine.slots[s2 as usize].row, 0);
        engine.remove_symbols(&[b"S2", b"nobody"]);
        assert_eq!(engine.symbols(), 2);
        assert_eq!(engine.symbol_name(s2), "");
        // S3's row moved into S2's hole, with its state.
        let s3 = engine.intern("S3");
        assert_eq!(engine.slots[s3 as usize].row, 0);
        let mut out = Vec::new();
        engine.process_symbol("S3", 99.0, 2, |q, _, v| out.push((q, v)));
        assert!(out.contains(&(0, (99.0 - 90.0) / 90.0 * 100.0)), "{out:?}");
        assert_eq!(engine.intern("S4"), s2, "the freed id is reused");
        out.clear();
        engine.process_symbol("S2", 200.0, 3, |q, _, v| out.push((q, v)));
        assert!(!out.iter().any(|&(q, _)| q == 0), "S2 starts afresh: no perc of one price");
        let mut names: Vec<&str> = engine.symbol_names().collect();
        names.sort();
        assert_eq!(names, ["S1", "S2", "S3", "S4"]);
    }
}
