//! The state hand-off format: the complete state of a set of symbols as bytes, written by
//! [`Engine::export_symbols`](crate::Engine::export_symbols) and read back, into an engine
//! running the same rules, by [`Engine::import_symbols`](crate::Engine::import_symbols)
//! (live rescaling moves symbols between workers; checkpoints reuse the export, and send
//! changes in between, below). An engine
//! importing a symbol's state gives, for that symbol's next ticks and at the end of input,
//! bit for bit the outputs the exporting engine would have given.
//!
//! This module holds the format's frame (header, primitive encodings, the checks) and its
//! errors; each state kind writes and reads its own fields beside them (`state/*.rs`,
//! `window.rs` for the moments), and a row's layout is written by `group.rs`.
//!
//! # Format, version 1
//!
//! Little-endian throughout; `f64` and `f32` as their IEEE bits (NaN payloads kept);
//! `count` is a `u32`.
//!
//! ```text
//! export   = magic "CEPS" | version u16 = 1 | rules fingerprint u64 | count | symbol*
//! symbol   = name (count, UTF-8 bytes) | latest event time u64
//!          | count | member* | line* | window*
//! member   = query u32 | place u8 (0 shared history, 1 own history, 2 time, 3 window) | index u32
//! line     = small | time          (one per line of the row, its kind given by the members)
//! small    = len u8 (<= 4) | rises u32 | 4 x price f64 (oldest first)
//! time     = moments | count | (time u64 | price f64)*          (oldest first)
//! window   = len u32 | latest u64 | (len x stride) f64        (entries oldest first)
//!          | arg* (one per query argument; one when it has none)
//!          | rare?  (when the query keeps min/max or a tumbling pane)
//! arg      = last f64 | moments | streak previous f64 | streak rises u32
//! rare     = latest u64 | pushed u64 | pane u64 | last price f64
//!          | (count | (event number u64 | value f64)*)*       (one deque per min/max)
//! moments  = n u32 | removed_sq f32 | anchor f64 | sum f64 | sum_sq f64
//! ```
//!
//! Checkpoints send what changed since the worker's previous checkpoint, in the same
//! primitives ([`Engine::export_checkpoint`](crate::Engine::export_checkpoint),
//! applied by [`Engine::restore_symbols`](crate::Engine::restore_symbols) on the state the
//! earlier checkpoints give):
//!
//! ```text
//! changes  = magic "CEPC" | version u16 = 1 | rules fingerprint u64 | count | changed*
//! changed  = name | latest event time u64 | 0 | member count | member* | line* | window*
//!                                                 (whole, as in an export: new since)
//!          | name | latest event time u64 | 1 | member count | member* | line-change*
//!          | window*                              (the symbol's state changed)
//! line-change = small | moments | len count | count | (time u64 | price f64)*
//!                                                 (a time window: its newest events)
//! ```
//!
//! A time window's changes hold its moments, its length and its events since the earlier
//! state (at most all of them); the window now is the earlier one's newest `len - count`
//! events followed by those (events leave a window at the front only). Small histories and
//! general windows are written whole. Symbols whose state did not change are left out.
//!
//! The members are the symbol's queries in query order, each with where its state lives in
//! the row: lines are numbered shared histories first (in order of first reader), then the
//! members' own lines in query order; windows in query order. The row's shape is part of the
//! state because a rule switch can leave a symbol with two shared histories where a fresh
//! one has one.
//!
//! The rules fingerprint is a 64-bit FNV-1a hash of the rules' plans (every field of every
//! query, in order), so an export made under other rules, or under an earlier rule set, is
//! refused rather than misread.
//!
//! Bytes are read as hostile: every length is checked against the bytes that remain before
//! anything is allocated for it, the members must be exactly the importing engine's layout
//! for that symbol, counts must agree with what they count (moments with the values stored,
//! a window no longer than its query keeps), counters at their type's limit are refused,
//! trailing bytes are refused, and nothing panics. An import is all or nothing.

use cep_query::plan::{Aggregate, Expr, Query, Window};

/// The four bytes every export starts with.
pub const MAGIC: [u8; 4] = *b"CEPS";

/// The four bytes checkpoint changes start with.
pub const CHANGES_MAGIC: [u8; 4] = *b"CEPC";

/// What state bytes hold, by their magic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The complete state of the symbols in it ([`MAGIC`]).
    Export,
    /// Checkpoint changes ([`CHANGES_MAGIC`]): applied to the state they were taken after.
    Changes,
}

/// The format version this engine writes and reads.
pub const VERSION: u16 = 1;

/// Why state bytes were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// The bytes do not start with [`MAGIC`] (or [`CHANGES_MAGIC`] where changes are read).
    #[error("not an engine state export (bad magic)")]
    BadMagic,
    /// Checkpoint changes where a complete export was expected.
    #[error("checkpoint changes where the complete state was expected")]
    Changes,
    /// Changes to a symbol the engine does not own.
    #[error("changes to symbol {0:?}, which this engine does not own")]
    NotOwned(String),
    /// The format version is not the one this engine reads.
    #[error("state format version {found} is not supported (this engine reads version {VERSION})")]
    Version {
        /// The version the bytes carry.
        found: u16,
    },
    /// The state was exported by an engine running other rules.
    #[error("the state was exported under other rules (fingerprint {found:016x}, these rules are {expected:016x})")]
    Rules {
        /// The exporter's rules fingerprint.
        found: u64,
        /// This engine's.
        expected: u64,
    },
    /// The bytes end before the state does.
    #[error("the state is truncated: {needed} bytes needed at offset {offset}, {left} left")]
    Truncated {
        /// Where the read that failed started.
        offset: usize,
        /// Bytes that read needed.
        needed: usize,
        /// Bytes there were.
        left: usize,
    },
    /// Bytes follow the end of the state.
    #[error("{count} trailing bytes after the state")]
    Trailing {
        /// How many.
        count: usize,
    },
    /// A symbol's name is not UTF-8.
    #[error("a symbol name is not UTF-8")]
    Name,
    /// A symbol the importing engine already owns.
    #[error("symbol {0:?} is already owned by this engine")]
    AlreadyOwned(String),
    /// A symbol present twice in the bytes.
    #[error("symbol {0:?} appears twice in the state")]
    Repeated(String),
    /// A symbol's queries or their places are not this engine's layout for it.
    #[error("the queries of symbol {0:?} are not laid out as these rules lay them out")]
    Layout(String),
    /// A state whose fields contradict each other (or a counter at its limit).
    #[error("inconsistent state of symbol {symbol:?}: {what}")]
    Inconsistent {
        /// The symbol (empty until the symbol's reader fills it in).
        symbol: String,
        /// What is wrong.
        what: &'static str,
    },
}

impl StateError {
    /// An inconsistency found by a state's reader (the symbol is filled in by its caller).
    pub(crate) fn inconsistent(what: &'static str) -> StateError {
        StateError::Inconsistent { symbol: String::new(), what }
    }

    /// Names the symbol an inconsistency was found in.
    pub(crate) fn in_symbol(self, name: &str) -> StateError {
        match self {
            StateError::Inconsistent { what, .. } => StateError::Inconsistent { symbol: name.into(), what },
            other => other,
        }
    }
}

/// Appends the format's primitives to a buffer.
#[derive(Debug, Default)]
pub(crate) struct Writer {
    pub(crate) bytes: Vec<u8>,
}

impl Writer {
    pub(crate) fn u8(&mut self, value: u8) {
        self.bytes.push(value);
    }

    pub(crate) fn u16(&mut self, value: u16) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }

    pub(crate) fn u32(&mut self, value: u32) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }

    pub(crate) fn u64(&mut self, value: u64) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }

    pub(crate) fn f32(&mut self, value: f32) {
        self.u32(value.to_bits());
    }

    pub(crate) fn f64(&mut self, value: f64) {
        self.u64(value.to_bits());
    }

    /// Values as [`Self::f64`] writes each, in one pass.
    pub(crate) fn f64s(&mut self, values: &[f64]) {
        // One copy of the values' bytes (a snapshot copies its windows between batches, where
        // a loop per value showed in the tail); in memory they are what `f64` writes.
        #[cfg(target_endian = "little")]
        self.bytes.extend_from_slice(bytemuck::cast_slice(values));
        #[cfg(not(target_endian = "little"))]
        for value in values {
            self.bytes.extend_from_slice(&value.to_le_bytes());
        }
    }

    /// A count of things that follow (every count the engine holds fits a u32).
    pub(crate) fn count(&mut self, count: usize) {
        self.u32(u32::try_from(count).expect("counts fit a u32"));
    }

    /// Bytes with their length before them.
    pub(crate) fn text(&mut self, bytes: &[u8]) {
        self.count(bytes.len());
        self.bytes.extend_from_slice(bytes);
    }

    /// The header: magic, version, the rules' fingerprint.
    pub(crate) fn header(&mut self, kind: Kind, fingerprint: u64) {
        self.bytes.extend_from_slice(match kind {
            Kind::Export => &MAGIC,
            Kind::Changes => &CHANGES_MAGIC,
        });
        self.u16(VERSION);
        self.u64(fingerprint);
    }
}

/// Reads the format's primitives off hostile bytes: every read is checked against what is
/// left, and nothing is allocated for a length before the bytes it claims are there.
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    offset: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, offset: 0 }
    }

    /// Bytes not read yet.
    pub(crate) fn left(&self) -> usize {
        self.bytes.len() - self.offset
    }

    /// The next `n` bytes.
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], StateError> {
        let left = self.left();
        if n > left {
            return Err(StateError::Truncated { offset: self.offset, needed: n, left });
        }
        let bytes = &self.bytes[self.offset..self.offset + n];
        self.offset += n;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], StateError> {
        let mut array = [0; N];
        array.copy_from_slice(self.take(N)?);
        Ok(array)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, StateError> {
        Ok(self.array::<1>()?[0])
    }

    pub(crate) fn u16(&mut self) -> Result<u16, StateError> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, StateError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, StateError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    pub(crate) fn f32(&mut self) -> Result<f32, StateError> {
        Ok(f32::from_bits(self.u32()?))
    }

    pub(crate) fn f64(&mut self) -> Result<f64, StateError> {
        Ok(f64::from_bits(self.u64()?))
    }

    /// A u32 counter that the engine increments: refused at its limit (the next increment
    /// would overflow).
    pub(crate) fn counter32(&mut self) -> Result<u32, StateError> {
        match self.u32()? {
            u32::MAX => Err(StateError::inconsistent("a counter at its limit")),
            value => Ok(value),
        }
    }

    /// A u64 counter that the engine increments (see [`Self::counter32`]).
    pub(crate) fn counter64(&mut self) -> Result<u64, StateError> {
        match self.u64()? {
            u64::MAX => Err(StateError::inconsistent("a counter at its limit")),
            value => Ok(value),
        }
    }

    /// A count of things of at least `each` bytes that follow, checked against the bytes
    /// left (so it is safe to allocate for).
    pub(crate) fn count(&mut self, each: usize) -> Result<usize, StateError> {
        let offset = self.offset;
        let count = self.u32()? as usize;
        let needed = count.saturating_mul(each);
        let left = self.left();
        if needed > left {
            return Err(StateError::Truncated { offset, needed: needed.saturating_add(4), left: left + 4 });
        }
        Ok(count)
    }

    /// `n` f64 values, checked against the bytes left before they are allocated.
    pub(crate) fn f64s(&mut self, n: usize) -> Result<Vec<f64>, StateError> {
        let bytes = self.take(n.saturating_mul(8))?;
        Ok(bytes.chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().expect("8 bytes"))).collect())
    }

    /// Bytes with their length before them.
    pub(crate) fn text(&mut self) -> Result<&'a [u8], StateError> {
        let n = self.count(1)?;
        self.take(n)
    }

    /// Checks the header (magic, version, rules fingerprint); returns the kind of state.
    pub(crate) fn header(&mut self, fingerprint: u64) -> Result<Kind, StateError> {
        let kind = match self.take(MAGIC.len()).map_err(|_| StateError::BadMagic)? {
            magic if magic == MAGIC => Kind::Export,
            magic if magic == CHANGES_MAGIC => Kind::Changes,
            _ => return Err(StateError::BadMagic),
        };
        let found = self.u16()?;
        if found != VERSION {
            return Err(StateError::Version { found });
        }
        let found = self.u64()?;
        if found != fingerprint {
            return Err(StateError::Rules { found, expected: fingerprint });
        }
        Ok(kind)
    }

    /// The end: refuses bytes left over.
    pub(crate) fn finish(self) -> Result<(), StateError> {
        match self.left() {
            0 => Ok(()),
            count => Err(StateError::Trailing { count }),
        }
    }
}

/// The rules' fingerprint: a 64-bit FNV-1a hash of every field of every plan, in order. Two
/// rule sets with the same fingerprint lay out and run their states the same way.
pub fn fingerprint<'q>(queries: impl IntoIterator<Item = &'q Query>) -> u64 {
    let mut plan = Writer::default();
    for query in queries {
        write_query(&mut plan, query);
    }
    plan.bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |hash, &byte| (hash ^ byte as u64).wrapping_mul(0x0100_0000_01b3))
}

fn write_query(w: &mut Writer, query: &Query) {
    // Destructured whole, so a field added to plans does not go unhashed.
    let Query { name, window, symbol_filter, event_filter, args, aggregates, having, price, value } = query;
    w.text(name.as_bytes());
    let (kind, length) = match *window {
        Window::Events(n) => (0, n),
        Window::Time(length) => (1, length),
        Window::Tumbling(length) => (2, length),
    };
    w.u8(kind);
    w.u64(length);
    for filter in [symbol_filter, event_filter, having] {
        match filter {
            None => w.u8(0),
            Some(expr) => {
                w.u8(1);
                write_expr(w, expr);
            }
        }
    }
    w.count(args.len());
    args.iter().for_each(|arg| write_expr(w, arg));
    w.count(aggregates.len());
    for &Aggregate { kind, arg, offset } in aggregates {
        w.u8(kind as u8);
        w.u64(arg as u64);
        w.u32(offset);
    }
    write_expr(w, price);
    write_expr(w, value);
}

fn write_expr(w: &mut Writer, expr: &Expr) {
    match expr {
        Expr::Number(x) => {
            w.u8(0);
            w.f64(*x);
        }
        Expr::Text(text) => {
            w.u8(1);
            w.text(text.as_bytes());
        }
        Expr::Bool(b) => {
            w.u8(2);
            w.u8(*b as u8);
        }
        Expr::Price => w.u8(3),
        Expr::Symbol => w.u8(4),
        Expr::Aggregate(index) => {
            w.u8(5);
            w.u64(*index as u64);
        }
        Expr::Neg(x) => {
            w.u8(6);
            write_expr(w, x);
        }
        Expr::Not(x) => {
            w.u8(7);
            write_expr(w, x);
        }
        Expr::Arith(op, a, b) => {
            w.u8(8);
            w.u8(*op as u8);
            write_expr(w, a);
            write_expr(w, b);
        }
        Expr::CompareNumbers(op, a, b) => {
            w.u8(9);
            w.u8(*op as u8);
            write_expr(w, a);
            write_expr(w, b);
        }
        Expr::CompareText(equal, a, b) => {
            w.u8(10);
            w.u8(*equal as u8);
            write_expr(w, a);
            write_expr(w, b);
        }
        Expr::And(a, b) => {
            w.u8(11);
            write_expr(w, a);
            write_expr(w, b);
        }
        Expr::Or(a, b) => {
            w.u8(12);
            write_expr(w, a);
            write_expr(w, b);
        }
        Expr::InNumbers(x, list, negated) => {
            w.u8(13);
            write_expr(w, x);
            w.count(list.len());
            list.iter().for_each(|&n| w.f64(n));
            w.u8(*negated as u8);
        }
        Expr::InText(x, list, negated) => {
            w.u8(14);
            write_expr(w, x);
            w.count(list.len());
            list.iter().for_each(|text| w.text(text.as_bytes()));
            w.u8(*negated as u8);
        }
        Expr::Call(func, x) => {
            w.u8(15);
            w.u8(*func as u8);
            write_expr(w, x);
        }
    }
}
