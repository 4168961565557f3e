//! Where a role's core puts what it sends. The cores (router, worker, collector) are state
//! machines that own no socket and read no clock: the driver that runs one hands it an
//! [`Outbox`], which sends each frame on (a ZeroMQ socket, or an in-memory link in the test
//! harness) and tells the time a frame leaves.

/// Who a frame goes to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Peer {
    /// The worker with this index in the run's worker list (the router's data path).
    Worker(u32),
    /// The collector.
    Collector,
    /// A client of the router's control socket, by its identity: the answer to its request.
    Client(Vec<u8>),
}

/// What a core sends through, and the clock it stamps departures with.
pub trait Outbox {
    /// Sends one frame to `to`. A send that cannot complete (the process is shutting down, the
    /// peer is gone) is the driver's to report: the core carries on, the driver stops it.
    fn send(&mut self, to: Peer, frame: &[u8]);

    /// The time now, in ns since the epoch: read when a frame leaves, for its exit stamp.
    fn now(&self) -> u64;
}

/// Frames kept in memory with a fixed clock: what unit tests drive a core with.
#[derive(Debug, Default)]
pub struct Recorded {
    /// Every frame sent, in order.
    pub sent: Vec<(Peer, Vec<u8>)>,
    /// What [`Outbox::now`] answers.
    pub clock: u64,
}

impl Recorded {
    /// Takes the frames sent so far.
    pub fn take(&mut self) -> Vec<(Peer, Vec<u8>)> {
        std::mem::take(&mut self.sent)
    }
}

impl Outbox for Recorded {
    fn send(&mut self, to: Peer, frame: &[u8]) {
        self.sent.push((to, frame.to_vec()));
    }

    fn now(&self) -> u64 {
        self.clock
    }
}
