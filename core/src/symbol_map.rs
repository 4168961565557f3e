//! Maps keyed by a symbol's bytes, for the lookups every role makes per tick (the router's
//! owner, the engine's id, the collector's last tick). A standard map of `Box<[u8]>` keys
//! compares a found key with a call to `memcmp`; symbols are short, so here keys of up to 16
//! bytes are compared inline with two loads each (a profile at full speed put `memcmp` at 7 %
//! of the router's, the workers' and the collector's time).

use hashbrown::Equivalent;
use rustc_hash::FxBuildHasher;
use serde::{de, Deserialize, Deserializer, Serialize, Serializer};
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;

/// A map from symbols (byte strings) to `V`.
#[derive(Clone)]
pub struct SymbolMap<V> {
    map: hashbrown::HashMap<Key, V, FxBuildHasher>,
}

/// A stored symbol.
#[derive(Clone, PartialEq, Eq)]
struct Key(Box<[u8]>);

/// A symbol looked up: hashes as its [`Key`] does and compares with one inline.
struct Lookup<'a>(&'a [u8]);

impl Hash for Key {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write(&self.0);
    }
}

impl Hash for Lookup<'_> {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write(self.0);
    }
}

impl Equivalent<Key> for Lookup<'_> {
    #[inline]
    fn equivalent(&self, key: &Key) -> bool {
        same_bytes(self.0, &key.0)
    }
}

/// Byte equality with no call for up to 16 bytes: two overlapping loads of each side cover
/// every byte.
#[inline(always)]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if (8..=16).contains(&n) {
        let word = |s: &[u8], at: usize| u64::from_le_bytes(s[at..at + 8].try_into().expect("8 bytes"));
        word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8)
    } else if (4..8).contains(&n) {
        let word = |s: &[u8], at: usize| u32::from_le_bytes(s[at..at + 4].try_into().expect("4 bytes"));
        word(a, 0) == word(b, 0) && word(a, n - 4) == word(b, n - 4)
    } else if n < 4 {
        a.iter().zip(b).all(|(x, y)| x == y)
    } else {
        a == b
    }
}

impl<V> Default for SymbolMap<V> {
    fn default() -> Self {
        Self { map: hashbrown::HashMap::default() }
    }
}

impl<V: std::fmt::Debug> std::fmt::Debug for SymbolMap<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter().map(|(symbol, value)| (String::from_utf8_lossy(symbol), value))).finish()
    }
}

impl<V> SymbolMap<V> {
    /// An empty map with room for `capacity` symbols.
    pub fn with_capacity(capacity: usize) -> Self {
        Self { map: hashbrown::HashMap::with_capacity_and_hasher(capacity, FxBuildHasher) }
    }

    /// `symbol`'s value.
    #[inline]
    pub fn get(&self, symbol: &[u8]) -> Option<&V> {
        self.map.get(&Lookup(symbol))
    }

    /// `symbol`'s value, to change it.
    #[inline]
    pub fn get_mut(&mut self, symbol: &[u8]) -> Option<&mut V> {
        self.map.get_mut(&Lookup(symbol))
    }

    /// Sets `symbol`'s value; returns the one it replaces. The key is copied only when new.
    pub fn insert(&mut self, symbol: &[u8], value: V) -> Option<V> {
        match self.map.get_mut(&Lookup(symbol)) {
            Some(slot) => Some(std::mem::replace(slot, value)),
            None => {
                self.map.insert(Key(symbol.into()), value);
                None
            }
        }
    }

    /// Removes `symbol`; returns its value.
    pub fn remove(&mut self, symbol: &[u8]) -> Option<V> {
        self.map.remove(&Lookup(symbol))
    }

    /// Forgets every symbol, keeping the room.
    pub fn clear(&mut self) {
        self.map.clear()
    }

    /// Number of symbols.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the map holds no symbol.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Every symbol and its value, in no order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &V)> {
        self.map.iter().map(|(key, value)| (&*key.0, value))
    }

    /// Every symbol and its value, to change it, in no order.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&[u8], &mut V)> {
        self.map.iter_mut().map(|(key, value)| (&*key.0, value))
    }

    /// Every value, in no order.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.map.values()
    }
}

impl<V> FromIterator<(Box<[u8]>, V)> for SymbolMap<V> {
    fn from_iter<I: IntoIterator<Item = (Box<[u8]>, V)>>(entries: I) -> Self {
        let mut map = SymbolMap::default();
        for (symbol, value) in entries {
            map.map.insert(Key(symbol), value);
        }
        map
    }
}

impl<V> std::ops::Index<&[u8]> for SymbolMap<V> {
    type Output = V;

    /// `symbol`'s value; panics if it has none, as a standard map does.
    fn index(&self, symbol: &[u8]) -> &V {
        self.get(symbol).expect("a symbol in the map")
    }
}

impl<V: PartialEq> PartialEq for SymbolMap<V> {
    fn eq(&self, other: &Self) -> bool {
        self.map == other.map
    }
}

/// A map of byte-string keys, as MessagePack writes `bin` keys.
impl<V: Serialize> Serialize for SymbolMap<V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.iter().map(|(symbol, value)| (serde_bytes::Bytes::new(symbol), value)))
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for SymbolMap<V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(MapVisitor(PhantomData))
    }
}

struct MapVisitor<V>(PhantomData<V>);

impl<'de, V: Deserialize<'de>> de::Visitor<'de> for MapVisitor<V> {
    type Value = SymbolMap<V>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a map keyed by byte strings")
    }

    fn visit_map<A: de::MapAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
        // The size hint comes from the input: capped, so a corrupt length cannot reserve much.
        let mut map = SymbolMap::with_capacity(access.size_hint().unwrap_or(0).min(1 << 16));
        while let Some((symbol, value)) = access.next_entry::<serde_bytes::ByteBuf, V>()? {
            map.insert(&symbol, value);
        }
        Ok(map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Inline equality is byte equality, at every length around the load widths.
        #[test]
        fn inline_equality_is_byte_equality(a in proptest::collection::vec(0u8..4, 0..20),
                                            b in proptest::collection::vec(0u8..4, 0..20)) {
            prop_assert_eq!(same_bytes(&a, &b), a == b);
            prop_assert!(same_bytes(&a, &a.clone()));
        }

        /// The map agrees with a standard one over random inserts, lookups and removals.
        #[test]
        fn behaves_as_a_standard_map(ops in proptest::collection::vec((0u8..3, proptest::collection::vec(b'A'..b'D', 0..18), any::<u16>()), 0..200)) {
            let mut ours = SymbolMap::default();
            let mut reference = std::collections::HashMap::<Vec<u8>, u16>::new();
            for (op, symbol, value) in ops {
                match op {
                    0 => prop_assert_eq!(ours.insert(&symbol, value), reference.insert(symbol.clone(), value)),
                    1 => prop_assert_eq!(ours.remove(&symbol), reference.remove(&symbol)),
                    _ => prop_assert_eq!(ours.get(&symbol), reference.get(&symbol)),
                }
                prop_assert_eq!(ours.len(), reference.len());
            }
            let mut listed: Vec<(Vec<u8>, u16)> = ours.iter().map(|(s, v)| (s.to_vec(), *v)).collect();
            listed.sort();
            let mut expected: Vec<(Vec<u8>, u16)> = reference.into_iter().collect();
            expected.sort();
            prop_assert_eq!(listed, expected);
        }
    }

    #[test]
    fn serializes_as_a_map_of_byte_strings() {
        let mut map = SymbolMap::default();
        map.insert(b"S0001", 7u64);
        map.insert(b"a much longer symbol than sixteen", 9);
        let bytes = rmp_serde::to_vec(&map).unwrap();
        let back: SymbolMap<u64> = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(back, map);
        let plain: std::collections::HashMap<serde_bytes::ByteBuf, u64> = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(plain.len(), 2);
    }
}
