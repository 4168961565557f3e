//! Which sequence numbers of a stream have been seen: a growable bitset, O(1) per event and
//! one bit per sequence number, so exactly-once checks cost no hashing.

/// What [`SeenSet::insert`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// First time, after every sequence number seen so far.
    InOrder,
    /// First time, but a later sequence number was already seen.
    Late,
    /// Seen before.
    Duplicate,
}

/// The sequence numbers of one stream seen so far, one bit each.
#[derive(Clone, Debug, Default)]
pub struct SeenSet {
    words: Vec<u64>,
    highest: Option<u64>,
}

impl SeenSet {
    /// Records `seq` and says whether it came in order, late or again.
    #[inline]
    pub fn insert(&mut self, seq: u64) -> Arrival {
        let word = (seq / 64) as usize;
        let bit = 1u64 << (seq % 64);
        if word >= self.words.len() {
            self.words.resize((word + 1).next_power_of_two(), 0);
        }
        if self.words[word] & bit != 0 {
            return Arrival::Duplicate;
        }
        self.words[word] |= bit;
        match self.highest {
            Some(highest) if seq < highest => Arrival::Late,
            _ => {
                self.highest = Some(seq);
                Arrival::InOrder
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tells_duplicates_from_late_arrivals() {
        let mut seen = SeenSet::default();
        assert_eq!(seen.insert(0), Arrival::InOrder);
        assert_eq!(seen.insert(5), Arrival::InOrder);
        assert_eq!(seen.insert(5), Arrival::Duplicate);
        assert_eq!(seen.insert(3), Arrival::Late);
        assert_eq!(seen.insert(3), Arrival::Duplicate);
        assert_eq!(seen.insert(100_000), Arrival::InOrder);
        assert_eq!(seen.insert(0), Arrival::Duplicate);
    }
}
