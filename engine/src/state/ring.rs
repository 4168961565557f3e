//! The ring buffer the time and general states keep their window's values in.

use crate::handoff::Writer;

/// The window's stored values, oldest first: a ring of power-of-two capacity that doubles
/// when full (a window that only counts events allocates nothing). Slots are first written
/// in order, so the buffer grows by appending: nothing is zero-filled ahead of use, which
/// would write a large window's memory twice.
#[derive(Clone, Debug, Default)]
pub(super) struct Ring {
    /// The slots written so far; its capacity, a power of two, is the ring's.
    buf: Vec<f64>,
}

impl Ring {
    pub(super) fn with_capacity(values: usize) -> Self {
        // `with_capacity` gives exactly the capacity asked for (a documented guarantee).
        Ring { buf: Vec::with_capacity(if values == 0 { 0 } else { values.next_power_of_two() }) }
    }

    /// A ring holding `values` from its start, with room for at least `capacity` values
    /// (an imported window's).
    pub(super) fn from_values(values: &[f64], capacity: usize) -> Self {
        let mut ring = Ring::with_capacity(values.len().max(capacity));
        ring.buf.extend_from_slice(values);
        ring
    }

    #[inline(always)]
    pub(super) fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    #[inline(always)]
    pub(super) fn mask(&self) -> usize {
        self.capacity() - 1
    }

    /// Makes room for values up to position `end` (from the head).
    #[inline]
    pub(super) fn reserve(&mut self, head: u32, used: usize, end: usize) {
        if end > self.capacity() {
            self.grow(head, used, end);
        }
    }

    #[inline]
    pub(super) fn set(&mut self, head: u32, at: usize, value: f64) {
        let slot = (head as usize + at) & self.mask();
        match self.buf.get_mut(slot) {
            Some(stored) => *stored = value,
            None => {
                self.buf.resize(slot, 0.0);
                self.buf.push(value);
            }
        }
    }

    /// Doubles the capacity (at least to `end`): the buffer is reallocated in place where the
    /// allocator can (large buffers are remapped, not copied), and values that had wrapped
    /// around to the front are appended after the old end, so `head` stays valid.
    #[cold]
    fn grow(&mut self, head: u32, used: usize, end: usize) {
        let old = self.capacity();
        let capacity = (old * 2).max(16).max(end.next_power_of_two());
        self.buf.reserve_exact(capacity - self.buf.len());
        if self.buf.capacity() != capacity {
            // `reserve_exact` may give more than asked; the mask needs exactly a power of two.
            let mut exact = Vec::with_capacity(capacity);
            exact.extend_from_slice(&self.buf);
            self.buf = exact;
        }
        let start = head as usize;
        if start + used > old {
            // Wrapped: every slot of the old capacity is written.
            debug_assert_eq!(self.buf.len(), old);
            self.buf.extend_from_within(0..start + used - old);
        }
    }

    #[inline]
    pub(super) fn get(&self, head: u32, at: usize) -> f64 {
        self.buf[(head as usize + at) & self.mask()]
    }

    /// Writes the `count` values from position `from` (from the head) as the formats write
    /// each value (`Writer::f64`), in at most two bulk copies: a checkpoint copies whole
    /// windows, and a value at a time was most of its cost.
    pub(super) fn write_values(&self, head: u32, from: usize, count: usize, w: &mut Writer) {
        if count == 0 {
            return;
        }
        let start = (head as usize + from) & self.mask();
        let first = count.min(self.capacity() - start);
        w.f64s(&self.buf[start..start + first]);
        w.f64s(&self.buf[..count - first]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_its_order_when_it_grows_wrapped() {
        let mut ring = Ring::with_capacity(4);
        let (mut head, mut used) = (0u32, 0usize);
        let mut want = std::collections::VecDeque::new();
        for value in 0..100 {
            // Drop one of every three values from the front, so the live part wraps around.
            if value % 3 == 0 && used > 0 {
                head = ((head as usize + 1) & ring.mask()) as u32;
                used -= 1;
                want.pop_front();
            }
            ring.reserve(head, used, used + 1);
            ring.set(head, used, value as f64);
            used += 1;
            want.push_back(value as f64);
            let got: Vec<f64> = (0..used).map(|at| ring.get(head, at)).collect();
            assert_eq!(got, want.iter().copied().collect::<Vec<_>>());
        }
        assert!(ring.capacity() >= 64);
    }

    #[test]
    fn values_written_in_bulk_are_those_written_one_by_one() {
        let mut ring = Ring::with_capacity(8);
        let (mut head, mut used) = (0u32, 0usize);
        for value in 0..50 {
            if value % 2 == 0 && used > 3 {
                head = ((head as usize + 1) & ring.mask()) as u32;
                used -= 1;
            }
            ring.reserve(head, used, used + 1);
            ring.set(head, used, value as f64 + 0.5);
            used += 1;
            for from in 0..used {
                let (mut bulk, mut each) = (Writer::default(), Writer::default());
                ring.write_values(head, from, used - from, &mut bulk);
                (from..used).for_each(|at| each.f64(ring.get(head, at)));
                assert_eq!(bulk.bytes, each.bytes, "from {from} of {used}, head {head}");
            }
        }
    }
}
