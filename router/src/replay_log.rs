//! A worker's replay log: every batch routed to it since the barrier of its latest completed
//! checkpoint, and the barriers between them ([`crate::failover`] says what it is for).
//!
//! Batches are copied back to back into chunks of 1 MiB, and a span per batch says
//! where it lies. A log takes a batch per frame routed (at 200k ticks/s, 100,000 a second per
//! worker), so neither logging nor releasing may cost an allocation or a free per batch: a
//! checkpoint's release drops the spans before its barrier in one step and hands whole chunks
//! back for reuse. Releasing a buffer per batch cost the router 1-3 ms per worker per
//! checkpoint, time in which it routed nothing.

use std::collections::VecDeque;

/// The bytes of one chunk (a batch larger than that gets a chunk of its own size).
const CHUNK_BYTES: usize = 1 << 20;

/// The most bytes of released chunks a log keeps for reuse: about what one checkpoint
/// interval logs per worker at full speed. A fresh chunk is pages the kernel zeroes.
const MAX_SPARE_BYTES: usize = 64 << 20;

/// Where one batch lies.
#[derive(Clone, Copy)]
struct Span {
    /// The chunk's number (counted from the log's first chunk ever).
    chunk: u64,
    offset: usize,
    len: usize,
}

/// A checkpoint's barrier: its id, and what the log had taken in ever when it went out.
#[derive(Clone, Copy)]
struct Barrier {
    id: u64,
    at: Totals,
}

/// One worker's replay log.
#[derive(Default)]
pub struct ReplayLog {
    chunks: VecDeque<Vec<u8>>,
    /// The number of `chunks[0]`.
    first_chunk: u64,
    spans: VecDeque<Span>,
    barriers: VecDeque<Barrier>,
    /// Totals logged ever, and released ever: what the log holds is the difference.
    logged: Totals,
    released: Totals,
    /// Chunks released, for the next batches.
    spare: Vec<Vec<u8>>,
    /// Their capacity in bytes.
    spare_bytes: usize,
}

#[derive(Clone, Copy, Default)]
struct Totals {
    batches: u64,
    bytes: u64,
    ticks: u64,
}

impl ReplayLog {
    /// Records a batch as it was sent.
    #[inline]
    pub fn batch(&mut self, frame: &[u8], ticks: usize) {
        let fits = self.chunks.back().is_some_and(|chunk| chunk.capacity() - chunk.len() >= frame.len());
        if !fits {
            self.new_chunk(frame.len());
        }
        let chunk = self.first_chunk + self.chunks.len() as u64 - 1;
        let bytes = self.chunks.back_mut().expect("a chunk was just made");
        self.spans.push_back(Span { chunk, offset: bytes.len(), len: frame.len() });
        bytes.extend_from_slice(frame);
        self.logged.batches += 1;
        self.logged.bytes += frame.len() as u64;
        self.logged.ticks += ticks as u64;
    }

    /// Starts a chunk with room for at least `len` bytes: a spare one if one has the room.
    #[cold]
    fn new_chunk(&mut self, len: usize) {
        let chunk = match self.spare.iter().position(|spare| spare.capacity() >= len) {
            Some(at) => {
                let chunk = self.spare.swap_remove(at);
                self.spare_bytes -= chunk.capacity();
                chunk
            }
            None => Vec::with_capacity(len.max(CHUNK_BYTES)),
        };
        self.chunks.push_back(chunk);
    }

    /// Records that checkpoint `id`'s barrier went out here.
    pub fn barrier(&mut self, id: u64) {
        self.barriers.push_back(Barrier { id, at: self.logged });
    }

    /// Checkpoint `id` completed: everything before its barrier is released (everything, if
    /// the log holds no such barrier). Returns the bytes released.
    pub fn release_until(&mut self, id: u64) -> usize {
        let mut until = self.logged;
        while let Some(barrier) = self.barriers.pop_front() {
            if barrier.id == id {
                until = barrier.at;
                break;
            }
        }
        let released = (until.bytes - self.released.bytes) as usize;
        self.spans.drain(..(until.batches - self.released.batches) as usize);
        self.released = until;
        // Every chunk before the first batch still held is free (all of them, when none is).
        let keep_from = self.spans.front().map_or(self.first_chunk + self.chunks.len() as u64, |span| span.chunk);
        while self.first_chunk < keep_from {
            let Some(mut chunk) = self.chunks.pop_front() else { break };
            self.first_chunk += 1;
            if self.spare_bytes + chunk.capacity() <= MAX_SPARE_BYTES {
                chunk.clear();
                self.spare_bytes += chunk.capacity();
                self.spare.push(chunk);
            }
        }
        released
    }

    /// Empties the log (it cannot be replayed, or was).
    pub fn clear(&mut self) -> usize {
        let bytes = self.bytes();
        // A dropped log's chunks are not kept: a log is cleared when its worker is gone or
        // cannot be restored, not in the steady run.
        *self = ReplayLog::default();
        bytes
    }

    /// The batches logged since the last completed checkpoint, oldest first.
    pub fn batches(&self) -> impl Iterator<Item = &[u8]> {
        self.spans.iter().map(|span| {
            let chunk = &self.chunks[(span.chunk - self.first_chunk) as usize];
            &chunk[span.offset..span.offset + span.len]
        })
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        (self.logged.bytes - self.released.bytes) as usize
    }

    /// Ticks held.
    pub fn ticks(&self) -> u64 {
        self.logged.ticks - self.released.ticks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_keeps_the_batches_after_its_barrier_in_order() {
        let mut log = ReplayLog::default();
        log.batch(b"a", 1);
        log.barrier(1);
        log.batch(b"bb", 2);
        log.barrier(2);
        log.batch(b"ccc", 3);
        assert_eq!((log.bytes(), log.ticks()), (6, 6));
        assert_eq!(log.release_until(1), 1);
        assert_eq!(log.batches().collect::<Vec<_>>(), [&b"bb"[..], b"ccc"]);
        assert_eq!((log.bytes(), log.ticks()), (5, 5));
        // An unknown barrier releases everything.
        assert_eq!(log.release_until(9), 5);
        assert_eq!((log.bytes(), log.ticks(), log.batches().count()), (0, 0, 0));
        log.batch(b"d", 1);
        assert_eq!(log.batches().collect::<Vec<_>>(), [&b"d"[..]]);
    }

    #[test]
    fn a_release_skips_older_barriers_and_keeps_later_ones() {
        let mut log = ReplayLog::default();
        for id in 1..=3 {
            log.batch(&[id as u8], 1);
            log.barrier(id);
        }
        log.batch(b"z", 1);
        assert_eq!(log.release_until(2), 2);
        assert_eq!(log.batches().collect::<Vec<_>>(), [&[3u8][..], b"z"]);
        assert_eq!(log.release_until(3), 1);
        assert_eq!(log.batches().collect::<Vec<_>>(), [&b"z"[..]]);
    }

    #[test]
    fn batches_span_chunks_and_released_chunks_are_reused_up_to_the_bound() {
        let mut log = ReplayLog::default();
        let frame: Vec<u8> = (0..=255u8).cycle().take(300 << 10).collect();
        for _ in 0..400 {
            log.batch(&frame, 10);
        }
        log.barrier(1);
        log.batch(&frame[..5], 1);
        // 400 batches of 300 KiB: three to a 1 MiB chunk.
        assert_eq!(log.chunks.len(), 134);
        assert_eq!(log.release_until(1), 400 * (300 << 10));
        assert_eq!((log.bytes(), log.ticks()), (5, 1));
        assert_eq!(log.chunks.len(), 1, "the chunk holding the batch after the barrier stays");
        assert_eq!(log.spare.len(), 64, "64 MiB of chunks kept, the rest freed");
        assert!(log.spare_bytes <= MAX_SPARE_BYTES);
        log.batch(&frame, 1);
        log.batch(&frame, 1);
        log.batch(&frame, 1);
        assert_eq!(log.spare.len(), 63, "a kept chunk took the batch the first one had no room for");
        let batches: Vec<&[u8]> = log.batches().collect();
        assert_eq!(batches, [&frame[..5], &frame, &frame, &frame]);
    }

    #[test]
    fn a_batch_larger_than_a_chunk_gets_one_of_its_own() {
        let mut log = ReplayLog::default();
        let big = vec![1u8; CHUNK_BYTES + 1];
        log.batch(b"x", 1);
        log.batch(&big, 1);
        log.batch(b"y", 1);
        assert_eq!(log.batches().map(<[u8]>::len).collect::<Vec<_>>(), [1, CHUNK_BYTES + 1, 1]);
        log.barrier(1);
        let exact = vec![2u8; CHUNK_BYTES];
        log.batch(&exact, 1);
        // Released up to the barrier: the big chunk is kept for reuse, and takes a batch of
        // its size again; a batch that fills a chunk exactly leaves no room after it.
        assert_eq!(log.release_until(1), CHUNK_BYTES + 3);
        assert!(log.spare.iter().any(|chunk| chunk.capacity() > CHUNK_BYTES));
        log.batch(&big, 1);
        assert!(log.spare.iter().all(|chunk| chunk.capacity() <= CHUNK_BYTES), "the big chunk was reused");
        log.batch(b"z", 1);
        assert_eq!(log.batches().map(<[u8]>::len).collect::<Vec<_>>(), [CHUNK_BYTES, CHUNK_BYTES + 1, 1]);
        assert_eq!(log.clear(), 2 * CHUNK_BYTES + 2);
        assert_eq!((log.bytes(), log.ticks(), log.batches().count()), (0, 0, 0));
    }
}
