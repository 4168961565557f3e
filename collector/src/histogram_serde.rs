//! Serde helpers for the collector's saved state (`#[serde(with = ...)]`): HdrHistograms, which
//! are not serde, as their own V2 encoding (it keeps the bounds and every count, and runs of
//! empty buckets take a byte or two); and maps keyed by symbols, keyed by byte strings (MessagePack
//! `bin`) rather than by arrays of integers.

use hdrhistogram::serialization::{Deserializer as HdrDeserializer, Serializer as _, V2Serializer};
use hdrhistogram::Histogram;
use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

/// A histogram as the bytes of its V2 encoding.
pub fn serialize<S: Serializer>(histogram: &Histogram<u64>, serializer: S) -> Result<S::Ok, S::Error> {
    let mut bytes = Vec::new();
    V2Serializer::new()
        .serialize(histogram, &mut bytes)
        .map_err(|error| serde::ser::Error::custom(format!("histogram: {error:?}")))?;
    serializer.serialize_bytes(&bytes)
}

/// A histogram from the bytes of its V2 encoding, with the bounds it was saved with.
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Histogram<u64>, D::Error> {
    let bytes = serde_bytes::ByteBuf::deserialize(deserializer)?;
    HdrDeserializer::new()
        .deserialize(&mut bytes.as_slice())
        .map_err(|error| de::Error::custom(format!("histogram: {error:?}")))
}

/// `FxHashMap<Box<[u8]>, V>` as a map whose keys are byte strings.
pub mod byte_keys {
    use super::*;
    use rustc_hash::FxHashMap;
    use std::marker::PhantomData;

    /// A map keyed by symbols.
    pub type ByteKeyed<V> = FxHashMap<Box<[u8]>, V>;

    /// The map, its keys as byte strings.
    pub fn serialize<V: Serialize, S: Serializer>(
        map: &FxHashMap<Box<[u8]>, V>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_map(map.iter().map(|(key, value)| (serde_bytes::Bytes::new(key), value)))
    }

    /// The map back.
    pub fn deserialize<'de, V: Deserialize<'de>, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<FxHashMap<Box<[u8]>, V>, D::Error> {
        deserializer.deserialize_map(MapVisitor(PhantomData))
    }

    struct MapVisitor<V>(PhantomData<V>);

    impl<'de, V: Deserialize<'de>> de::Visitor<'de> for MapVisitor<V> {
        type Value = FxHashMap<Box<[u8]>, V>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a map keyed by byte strings")
        }

        fn visit_map<A: de::MapAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
            // The size hint comes from the input: capped, so a corrupt length cannot reserve much.
            let capacity = access.size_hint().unwrap_or(0).min(1 << 16);
            let mut map = FxHashMap::with_capacity_and_hasher(capacity, Default::default());
            while let Some((key, value)) = access.next_entry::<serde_bytes::ByteBuf, V>()? {
                map.insert(key.into_boxed_slice(), value);
            }
            Ok(map)
        }
    }

    /// One inner map of [`super::nested_byte_keys`], borrowed to serialize it.
    pub(super) struct Borrowed<'a, V>(pub &'a FxHashMap<Box<[u8]>, V>);

    impl<V: Serialize> Serialize for Borrowed<'_, V> {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            serialize(self.0, serializer)
        }
    }

    /// One inner map of [`super::nested_byte_keys`], deserialized.
    pub(super) struct Owned<V>(pub FxHashMap<Box<[u8]>, V>);

    impl<'de, V: Deserialize<'de>> Deserialize<'de> for Owned<V> {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            deserialize(deserializer).map(Owned)
        }
    }
}

/// `FxHashMap<K, FxHashMap<Box<[u8]>, V>>`: the inner maps as [`byte_keys`] does them.
pub mod nested_byte_keys {
    use super::byte_keys::{Borrowed, ByteKeyed, Owned};
    use super::*;
    use rustc_hash::FxHashMap;
    use std::hash::Hash;

    /// The maps, the inner ones' keys as byte strings.
    pub fn serialize<K: Serialize, V: Serialize, S: Serializer>(
        map: &FxHashMap<K, ByteKeyed<V>>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_map(map.iter().map(|(key, inner)| (key, Borrowed(inner))))
    }

    /// The maps back.
    pub fn deserialize<'de, K, V, D>(deserializer: D) -> Result<FxHashMap<K, ByteKeyed<V>>, D::Error>
    where
        K: Deserialize<'de> + Eq + Hash,
        V: Deserialize<'de>,
        D: Deserializer<'de>,
    {
        let outer = FxHashMap::<K, Owned<V>>::deserialize(deserializer)?;
        Ok(outer.into_iter().map(|(key, inner)| (key, inner.0)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustc_hash::FxHashMap;

    #[derive(Serialize, Deserialize)]
    struct Saved {
        #[serde(with = "super")]
        histogram: Histogram<u64>,
        #[serde(with = "byte_keys")]
        symbols: FxHashMap<Box<[u8]>, u32>,
        #[serde(with = "nested_byte_keys")]
        streams: FxHashMap<u32, FxHashMap<Box<[u8]>, u64>>,
    }

    #[test]
    fn histograms_and_byte_keyed_maps_round_trip_through_messagepack() {
        let mut histogram = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
        for value in [1, 7, 1_000, 1_234_567, 99_999_999, 3_600_000_000_000] {
            histogram.record_n(value, value % 13 + 1).unwrap();
        }
        let symbols: FxHashMap<Box<[u8]>, u32> =
            [(b"AAPL".as_slice(), 1), (b"\xff\x00".as_slice(), 2), (b"".as_slice(), 3)]
                .into_iter()
                .map(|(k, v)| (k.into(), v))
                .collect();
        let streams =
            [(0, symbols.iter().map(|(k, v)| (k.clone(), u64::from(*v))).collect()), (3, FxHashMap::default())]
                .into_iter()
                .collect();
        let saved = Saved { histogram: histogram.clone(), symbols: symbols.clone(), streams };
        let bytes = rmp_serde::to_vec(&saved).unwrap();
        let back: Saved = rmp_serde::from_slice(&bytes).unwrap();
        let h = &back.histogram;
        assert_eq!((h.low(), h.high(), h.sigfig()), (1, 3_600_000_000_000, 3));
        assert_eq!(*h, histogram);
        assert_eq!(
            (h.len(), h.min(), h.max(), h.mean()),
            (histogram.len(), histogram.min(), histogram.max(), histogram.mean())
        );
        for quantile in [0.0, 0.5, 0.99, 0.9999, 1.0] {
            assert_eq!(h.value_at_quantile(quantile), histogram.value_at_quantile(quantile));
        }
        assert_eq!(back.symbols, symbols);
        assert_eq!(back.streams.len(), 2);
        assert_eq!(back.streams[&0][b"\xff\x00".as_slice()], 2);
        assert!(back.streams[&3].is_empty());
        // Keys go as MessagePack `bin` (0xc4, length, bytes), not as arrays of integers.
        let one = Saved {
            histogram: histogram.clone(),
            symbols: [(b"AB".as_slice().into(), 1)].into_iter().collect(),
            streams: FxHashMap::default(),
        };
        let bytes = rmp_serde::to_vec(&one).unwrap();
        assert!(bytes.windows(5).any(|w| w == [0x81, 0xc4, 2, b'A', b'B']), "{bytes:x?}");
        // An empty histogram too.
        let empty = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
        let saved = Saved { histogram: empty, symbols: FxHashMap::default(), streams: FxHashMap::default() };
        let back: Saved = rmp_serde::from_slice(&rmp_serde::to_vec(&saved).unwrap()).unwrap();
        assert!(back.histogram.is_empty() && back.histogram.high() == 3_600_000_000_000);
    }
}
