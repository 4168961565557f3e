//! Symbol interning: a symbol's name to a dense id on first sight (the only allocation per
//! symbol); lookups hash the bytes as they arrive in frames, text is made only once.

use rustc_hash::FxHashMap;

/// A symbol's dense index inside one engine.
pub type SymbolId = u32;

/// Symbols' names and dense ids, in order of first sight.
#[derive(Debug, Default)]
pub struct SymbolTable {
    ids: FxHashMap<Box<[u8]>, SymbolId>,
    names: Vec<Box<str>>,
}

impl SymbolTable {
    /// The id of a symbol seen before.
    #[inline]
    pub fn get(&self, symbol: &[u8]) -> Option<SymbolId> {
        self.ids.get(symbol).copied()
    }

    /// Adds a symbol not seen before (bytes already known to be UTF-8, as decoded frames
    /// are); returns its id.
    #[cold]
    pub fn insert(&mut self, symbol: &[u8]) -> SymbolId {
        let id = self.names.len() as SymbolId;
        self.ids.insert(symbol.into(), id);
        self.names.push(String::from_utf8_lossy(symbol).into());
        id
    }

    /// Every symbol's name, by id.
    #[inline]
    pub fn names(&self) -> &[Box<str>] {
        &self.names
    }

    /// Number of symbols seen.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether no symbol has been seen.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}
