//! Serde helpers for the collector's saved state (`#[serde(with = ...)]`): HdrHistograms, which
//! are not serde, as their own V2 encoding (it keeps the bounds and every count, and runs of
//! empty buckets take a byte or two). Maps keyed by symbols are `SymbolMap`s, which save their
//! keys as byte strings (MessagePack `bin`).

use hdrhistogram::serialization::{Deserializer as HdrDeserializer, Serializer as _, V2Serializer};
use hdrhistogram::Histogram;
use serde::{de, Deserialize, Deserializer, Serializer};

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

#[cfg(test)]
mod tests {
    use super::*;
    use cep_core::symbol_map::SymbolMap;
    use rustc_hash::FxHashMap;
    use serde::Serialize;

    #[derive(Serialize, Deserialize)]
    struct Saved {
        #[serde(with = "super")]
        histogram: Histogram<u64>,
        symbols: SymbolMap<u32>,
        streams: FxHashMap<u32, SymbolMap<u64>>,
    }

    #[test]
    fn histograms_and_byte_keyed_maps_round_trip_through_messagepack() {
        let mut histogram = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
        for value in [1, 7, 1_000, 1_234_567, 99_999_999, 3_600_000_000_000] {
            histogram.record_n(value, value % 13 + 1).unwrap();
        }
        let symbols: SymbolMap<u32> = [(b"AAPL".as_slice(), 1), (b"\xff\x00".as_slice(), 2), (b"".as_slice(), 3)]
            .into_iter()
            .map(|(k, v)| (k.into(), v))
            .collect();
        let streams =
            [(0, symbols.iter().map(|(k, v)| (k.into(), u64::from(*v))).collect()), (3, SymbolMap::default())]
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
        let saved = Saved { histogram: empty, symbols: SymbolMap::default(), streams: FxHashMap::default() };
        let back: Saved = rmp_serde::from_slice(&rmp_serde::to_vec(&saved).unwrap()).unwrap();
        assert!(back.histogram.is_empty() && back.histogram.high() == 3_600_000_000_000);
    }
}
