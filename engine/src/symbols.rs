//! Symbol interning: a symbol's name to a dense id on first sight (the only allocation per
//! symbol); lookups hash the bytes as they arrive in frames, text is made only once.

use cep_core::symbol_map::SymbolMap;

/// A symbol's dense index inside one engine.
///
/// Ids are reused: once a symbol is removed ([`crate::Engine::remove_symbols`]), its id is
/// free, and the next symbol interned or imported may get it (the most recently freed id
/// first). Whoever keeps data indexed by `SymbolId` must reset a removed symbol's entry.
pub type SymbolId = u32;

/// Symbols' names and dense ids: new ids in order of first sight, or a removed symbol's id.
#[derive(Debug, Default)]
pub struct SymbolTable {
    ids: SymbolMap<SymbolId>,
    /// By id; a free id's name is empty.
    names: Vec<Box<str>>,
    /// Ids of removed symbols, to reuse (the last freed first).
    free: Vec<SymbolId>,
}

impl SymbolTable {
    /// The id of a symbol seen before (and not removed since).
    #[inline]
    pub fn get(&self, symbol: &[u8]) -> Option<SymbolId> {
        self.ids.get(symbol).copied()
    }

    /// Adds a symbol not seen before (bytes already known to be UTF-8, as decoded frames
    /// are); returns its id: a free one if there is one, else the next.
    #[cold]
    pub fn insert(&mut self, symbol: &[u8]) -> SymbolId {
        let name: Box<str> = String::from_utf8_lossy(symbol).into();
        let id = match self.free.pop() {
            Some(id) => {
                self.names[id as usize] = name;
                id
            }
            None => {
                self.names.push(name);
                self.names.len() as SymbolId - 1
            }
        };
        self.ids.insert(symbol, id);
        id
    }

    /// Forgets a symbol; its id is free for the next [`Self::insert`]. An id that is not a
    /// known symbol's is ignored.
    pub fn remove(&mut self, id: SymbolId) {
        let Some(name) = self.names.get_mut(id as usize) else { return };
        if self.ids.get(name.as_bytes()) != Some(&id) {
            return;
        }
        self.ids.remove(name.as_bytes());
        *name = Box::default();
        self.free.push(id);
    }

    /// Every symbol's name, by id (a free id's is empty).
    #[inline]
    pub fn names(&self) -> &[Box<str>] {
        &self.names
    }

    /// Number of symbols known (seen and not removed).
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether no symbol is known.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}
