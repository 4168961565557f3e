//! Live rescaling: workers join and leave the running cluster, and the symbols the ring gives
//! to another worker move there with their state, slice by slice (Megaphone's lesson: a
//! few symbols at a time, so none waits long).
//!
//! A joining worker's rescale queues only once it has answered the Welcome sent on its data
//! socket (the router reaches it); one that does not within the move time-out is dropped.
//! One rescale runs at a time; others queue. A rescale sets the new ring, lists the owned
//! symbols that now belong elsewhere and cuts them into slices of at most `slice_symbols`.
//! For a slice, each (old owner, new owner) pair is one part: the data path holds the part's
//! ticks, the old owner gets a [`HandOff`] behind everything routed to it, exports and forgets
//! the symbols and sends their [`SymbolState`] back; the router forwards it to the new owner
//! and releases the held ticks behind it. When a slice's parts are all done the next slice
//! starts. A leaving worker, once it owns nothing, is retired. Once every stream has ended
//! nothing is left to move: the rest of a rescale is given up and the symbols stay where they
//! are.

use crate::data_path::DataPath;
use cep_core::clock::Monotonic;
use cep_core::frame::Body;
use cep_core::identity::ROUTER_ID;
use cep_core::outbox::{Event, Outbox, Peer};
use cep_core::rescale::{ClusterStatus, HandOff, MemberStatus, MoveProgress, RescaleStarted, Rescaled, SymbolState};
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// The most workers a run takes over its life (joined and left included): no registration
/// grows the router's tables beyond it.
pub const MAX_MEMBERS: usize = 1024;

/// Which way a rescale goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A worker joins: it gets the symbols the ring now gives it.
    Join,
    /// A worker leaves: its symbols go to the others.
    Leave,
}

impl Kind {
    /// `join` or `leave`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Join => "join",
            Kind::Leave => "leave",
        }
    }
}

/// Where a worker stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberState {
    /// On the ring, owning its share.
    Active,
    /// Registered; its share is moving (or waits to move) to it.
    Joining,
    /// Asked to leave; its symbols are moving (or wait to move) away.
    Leaving,
    /// Gone: it owns nothing and takes nothing.
    Left,
    /// Died: its symbols went to the others.
    Failed,
}

impl MemberState {
    fn name(self) -> &'static str {
        match self {
            MemberState::Active => "active",
            MemberState::Joining => "joining",
            MemberState::Leaving => "leaving",
            MemberState::Left => "left",
            MemberState::Failed => "failed",
        }
    }
}

/// A worker of the run.
#[derive(Clone, Debug)]
struct Member {
    /// Its id (its place on the ring).
    id: String,
    /// Where it is, and where it is going.
    state: MemberState,
    /// Whether the ring includes it.
    on_ring: bool,
    /// For a worker still joining: when it registered while it has not yet
    /// answered the Welcome on its data socket (`None` once it has, or for the first ones).
    unreached_since: Option<Monotonic>,
    /// Dropped because it never answered its Welcome.
    never_reached: bool,
}

impl Member {
    /// Whether it left or died.
    fn gone(&self) -> bool {
        matches!(self.state, MemberState::Left | MemberState::Failed)
    }
}

/// One (old owner, new owner) pair of a slice.
struct Part {
    from: usize,
    to: usize,
    symbols: Vec<Box<[u8]>>,
}

/// A slice's moves: (symbol, old owner, new owner).
type Slice = Vec<(Box<[u8]>, usize, usize)>;

struct Rescale {
    id: u32,
    kind: Kind,
    worker: usize,
    slices: VecDeque<Slice>,
    slices_total: u32,
    parts: BTreeMap<u32, Part>,
    started_ns: u64,
    slice_started_ns: u64,
    symbols: u64,
    moved: u64,
    state_bytes: u64,
    held_ticks: u64,
    longest_slice_ns: u64,
    /// When the slice in flight is given up, set by the first tick after it
    /// started.
    slice_deadline: Option<Monotonic>,
    state_lost: Vec<String>,
}

/// The run's membership and the rescale in progress.
pub struct Rescaling {
    members: Vec<Member>,
    queue: VecDeque<(Kind, usize)>,
    current: Option<Rescale>,
    next_part: u32,
    next_id: u32,
    slice_symbols: usize,
    vnodes: usize,
    move_timeout: Duration,
    /// Rescales finished, every symbol moved with its state: (join, leave).
    finished: (u64, u64),
    /// Workers retired and not yet taken by [`Self::take_retired`].
    retired: usize,
}

impl Rescaling {
    /// The members the run started with (ring order), moving `slice_symbols` symbols at a time
    /// on a ring of `vnodes` virtual nodes per worker; a slice whose state has not all come
    /// `move_timeout` after it started is given up.
    pub fn new(workers: &[String], slice_symbols: usize, vnodes: usize, move_timeout: Duration) -> Self {
        Rescaling {
            members: workers
                .iter()
                .map(|id| Member {
                    id: id.clone(),
                    state: MemberState::Active,
                    on_ring: true,
                    unreached_since: None,
                    never_reached: false,
                })
                .collect(),
            queue: VecDeque::new(),
            current: None,
            next_part: 0,
            next_id: 0,
            slice_symbols: slice_symbols.max(1),
            vnodes,
            move_timeout,
            finished: (0, 0),
            retired: 0,
        }
    }

    /// Every member's id by index for the router's report; empty for a worker the router
    /// never reached (it never ran: the collector waits for no report of it).
    pub fn reported_ids(&self) -> Vec<String> {
        self.members.iter().map(|m| if m.never_reached { String::new() } else { m.id.clone() }).collect()
    }

    /// The members on the ring: (index, id).
    fn ring(&self) -> Vec<(usize, String)> {
        self.members.iter().enumerate().filter(|(_, m)| m.on_ring).map(|(index, m)| (index, m.id.clone())).collect()
    }

    /// Workers retired since the last call (each will not ask for the end of the run).
    pub fn take_retired(&mut self) -> usize {
        std::mem::take(&mut self.retired)
    }

    /// Whether a rescale is running or waiting.
    pub fn busy(&self) -> bool {
        self.current.is_some() || !self.queue.is_empty()
    }

    /// Takes a worker that registered at `now` while the run goes on: it gets the next index
    /// (the caller adds it to the data path and sends it Welcome); once it has answered
    /// ([`Self::reached`]) its share moves to it, after the rescales before it.
    pub fn join(&mut self, id: &str, now: Monotonic) -> Result<usize, String> {
        if self.members.iter().any(|m| m.id == id && !m.gone()) {
            return Err(format!("worker id `{id}` is already a member of the running cluster"));
        }
        if self.members.len() >= MAX_MEMBERS {
            return Err(format!("the run has had {MAX_MEMBERS} workers, the most it takes"));
        }
        self.members.push(Member {
            id: id.to_string(),
            state: MemberState::Joining,
            on_ring: false,
            unreached_since: Some(now),
            never_reached: false,
        });
        Ok(self.members.len() - 1)
    }

    /// Joining worker `index` answered its Welcome: the router reaches it, its join queues.
    pub fn reached(&mut self, index: u32) -> Result<(), String> {
        let member = self.members.get_mut(index as usize).filter(|m| m.unreached_since.is_some());
        let Some(member) = member else {
            return Err(format!("worker {index} is not a joining worker waiting to be reached"));
        };
        member.unreached_since = None;
        self.queue.push_back((Kind::Join, index as usize));
        Ok(())
    }

    /// Drops the joining workers that have not answered their Welcome within the move
    /// time-out (the router cannot reach them: a wrong `--advertise`): nothing is routed to
    /// them, and they count as gone.
    fn drop_unreached(&mut self, now: Monotonic, path: &mut DataPath, out: &mut impl Outbox) {
        for (index, member) in self.members.iter_mut().enumerate() {
            let Some(since) = member.unreached_since else { continue };
            if now.since(since) < self.move_timeout {
                continue;
            }
            member.unreached_since = None;
            member.never_reached = true;
            member.state = MemberState::Left;
            path.forget(index);
            self.retired += 1;
            out.event(Event::Refused {
                who: format!("worker {}", member.id),
                reason: format!(
                    "it registered, but its data endpoint never answered within {:?}: nothing is routed to it \
                     (is its --advertise address one the router can reach?)",
                    self.move_timeout
                ),
            });
        }
    }

    /// Asks `id` to leave: its symbols move to the others, then it retires. Refused for an
    /// unknown worker, one already leaving or gone, or the last one that would remain.
    pub fn leave(&mut self, id: &str) -> Result<usize, String> {
        let Some(index) = self.members.iter().position(|m| m.id == id && !m.gone()) else {
            let known: Vec<&str> = self.members.iter().filter(|m| !m.gone()).map(|m| m.id.as_str()).collect();
            return Err(format!("no worker `{id}` in the cluster (members: {})", known.join(", ")));
        };
        match self.members[index].state {
            MemberState::Leaving => return Err(format!("worker `{id}` is already leaving")),
            MemberState::Joining => return Err(format!("worker `{id}` is still joining; remove it once it has")),
            _ => {}
        }
        // Those that stay on the ring (or are joining it), this one aside.
        let staying = self
            .members
            .iter()
            .enumerate()
            .filter(|(i, m)| *i != index && m.state != MemberState::Leaving)
            .filter(|(_, m)| m.on_ring || (m.state == MemberState::Joining && m.unreached_since.is_none()))
            .count();
        if staying == 0 {
            return Err(format!("worker `{id}` is the last one: the cluster cannot run without a worker"));
        }
        self.members[index].state = MemberState::Leaving;
        self.queue.push_back((Kind::Leave, index));
        Ok(index)
    }

    /// Starts the next queued rescale if none runs and there is input left to route.
    pub fn step(&mut self, path: &mut DataPath, out: &mut impl Outbox) {
        while self.current.is_none() && !path.input_ended() {
            let Some((kind, worker)) = self.queue.pop_front() else { return };
            self.members[worker].on_ring = kind == Kind::Join;
            path.set_ring(&self.ring(), self.vnodes);
            let moves = path.moves();
            let symbols = moves.len() as u64;
            let slices: VecDeque<Slice> = moves.chunks(self.slice_symbols).map(<[_]>::to_vec).collect();
            let id = self.next_id;
            self.next_id += 1;
            let started = RescaleStarted {
                id,
                kind: kind.name().into(),
                worker: self.members[worker].id.clone(),
                index: worker as u32,
                symbols: moves.iter().map(|(symbol, _, to)| (lossy(symbol), *to as u32)).collect(),
            };
            out.send(Peer::Collector, &started.encode(ROUTER_ID));
            out.event(Event::RescaleStarted {
                kind: kind.name(),
                worker: started.worker,
                symbols,
                slices: slices.len() as u32,
            });
            let now = out.now();
            self.current = Some(Rescale {
                id,
                kind,
                worker,
                slices_total: slices.len() as u32,
                slices,
                parts: BTreeMap::new(),
                started_ns: now,
                slice_started_ns: now,
                symbols,
                moved: 0,
                state_bytes: 0,
                held_ticks: 0,
                longest_slice_ns: 0,
                slice_deadline: None,
                state_lost: Vec::new(),
            });
            self.next_slice(path, out);
        }
    }

    /// Sends the next slice's hand-offs, or ends the rescale if none is left (or the input
    /// ended, leaving nothing to move for).
    fn next_slice(&mut self, path: &mut DataPath, out: &mut impl Outbox) {
        let Some(rescale) = self.current.as_mut() else { return };
        if path.input_ended() && !rescale.slices.is_empty() {
            let worker = self.members[rescale.worker].id.clone();
            let left = rescale.slices.iter().map(Vec::len).sum::<usize>();
            out.event(Event::RescaleAbandoned {
                worker,
                reason: format!("every stream ended with {left} symbols still to move; they stay where they are"),
            });
            rescale.slices.clear();
        }
        let Some(slice) = rescale.slices.pop_front() else {
            return self.finish(path, out);
        };
        rescale.slice_started_ns = out.now();
        rescale.slice_deadline = None;
        let mut parts: BTreeMap<(usize, usize), Vec<Box<[u8]>>> = BTreeMap::new();
        for (symbol, from, to) in slice {
            parts.entry((from, to)).or_default().push(symbol);
        }
        for ((from, to), symbols) in parts {
            let part = self.next_part;
            self.next_part += 1;
            path.begin_part(part, &symbols, from, out);
            let hand_off = HandOff { part, to: to as u32, symbols: symbols.iter().map(|s| lossy(s)).collect() };
            out.send(Peer::Worker(from as u32), &hand_off.encode(ROUTER_ID));
            rescale.parts.insert(part, Part { from, to, symbols });
        }
    }

    /// A worker sent the state of a part: it goes to the new owner with the held ticks behind
    /// it, as the router's frame (a worker takes frames from the router alone).
    pub fn state_arrived(
        &mut self,
        sender: u32,
        state: &SymbolState,
        path: &mut DataPath,
        out: &mut impl Outbox,
    ) -> Result<(), String> {
        let rescale = self.current.as_mut().ok_or("no rescale is in progress")?;
        let part = rescale.parts.get(&state.part).ok_or_else(|| format!("no move part {} is waiting", state.part))?;
        if part.from != state.from as usize || sender != state.from {
            return Err(format!("move part {} is not worker {}'s to hand off", state.part, state.from));
        }
        let part = rescale.parts.remove(&state.part).expect("checked above");
        out.send(Peer::Worker(part.to as u32), &state.encode(ROUTER_ID));
        rescale.held_ticks += path.complete_part(state.part, &part.symbols, part.to, out);
        rescale.moved += part.symbols.len() as u64;
        rescale.state_bytes += state.engine.len() as u64;
        if rescale.parts.is_empty() {
            rescale.longest_slice_ns = rescale.longest_slice_ns.max(out.now().saturating_sub(rescale.slice_started_ns));
            self.slice_done(path, out);
        }
        Ok(())
    }

    /// Every part of the slice is done or given up: the end markers that waited go out, then
    /// the next slice (or the end of the rescale, and the next one queued).
    fn slice_done(&mut self, path: &mut DataPath, out: &mut impl Outbox) {
        path.release_deferred_ends(out);
        self.next_slice(path, out);
        self.step(path, out);
    }

    /// Gives up a slice whose state has not all come within the move time-out (its old
    /// owner died or hangs): the symbols go on at their new owners from empty windows, with
    /// the ticks held for them; the rest of the rescale is given up. Never a hang: the run
    /// goes on, and the summary names the symbols whose state was lost.
    pub fn tick(&mut self, now: Monotonic, path: &mut DataPath, out: &mut impl Outbox) {
        self.drop_unreached(now, path, out);
        let Some(rescale) = self.current.as_mut() else { return };
        if rescale.parts.is_empty() {
            return;
        }
        let deadline = *rescale.slice_deadline.get_or_insert(now.after(self.move_timeout));
        if now < deadline {
            return;
        }
        let waited = self.move_timeout;
        self.give_up(&format!("within {waited:?}"), path, out);
    }

    /// Gives up the slice in flight (`why` its state did not come) and the rest of the
    /// rescale: the slice's symbols go on at their new owners from empty windows.
    fn give_up(&mut self, why: &str, path: &mut DataPath, out: &mut impl Outbox) {
        let Some(rescale) = self.current.as_mut() else { return };
        let mut lost = Vec::new();
        let mut silent = Vec::new();
        for (part, Part { from, to, symbols }) in std::mem::take(&mut rescale.parts) {
            rescale.held_ticks += path.complete_part(part, &symbols, to, out);
            silent.push(self.members[from].id.clone());
            lost.extend(symbols.iter().map(|symbol| lossy(symbol)));
        }
        silent.sort();
        silent.dedup();
        let left: usize = rescale.slices.iter().map(Vec::len).sum();
        rescale.slices.clear();
        out.event(Event::RescaleAbandoned {
            worker: self.members[rescale.worker].id.clone(),
            reason: format!(
                "{} did not hand off the state of {} symbols {why} ({}); their windows are lost and they \
                 go on empty at their new owners; {left} symbols not yet moved stay where they are",
                silent.join(", "),
                lost.len(),
                lost.join(" ")
            ),
        });
        rescale.state_lost.extend(lost);
        self.slice_done(path, out);
    }

    fn finish(&mut self, path: &mut DataPath, out: &mut impl Outbox) {
        let Some(rescale) = self.current.take() else { return };
        let complete = rescale.moved == rescale.symbols && rescale.state_lost.is_empty();
        let member = &mut self.members[rescale.worker];
        match (rescale.kind, complete) {
            (Kind::Join, _) => member.state = MemberState::Active,
            (Kind::Leave, true) => {
                member.state = MemberState::Left;
                path.retire(rescale.worker, out);
                self.retired += 1;
            }
            (Kind::Leave, false) => {
                // It keeps what did not move, and goes back on the ring with it.
                member.state = MemberState::Active;
                member.on_ring = true;
                let ring = self.ring();
                path.set_ring(&ring, self.vnodes);
            }
        }
        let member = &self.members[rescale.worker];
        if complete {
            match rescale.kind {
                Kind::Join => self.finished.0 += 1,
                Kind::Leave => self.finished.1 += 1,
            }
        }
        let duration_ns = out.now().saturating_sub(rescale.started_ns);
        let record = Rescaled {
            id: rescale.id,
            started_ns: rescale.started_ns,
            duration_ns,
            symbols: rescale.moved,
            state_bytes: rescale.state_bytes,
            slices: rescale.slices_total,
            held_ticks: rescale.held_ticks,
            longest_slice_ns: rescale.longest_slice_ns,
            state_lost: rescale.state_lost,
        };
        out.send(Peer::Collector, &record.encode(ROUTER_ID));
        out.event(Event::RescaleFinished {
            kind: rescale.kind.name(),
            worker: member.id.clone(),
            symbols: rescale.moved,
            state_bytes: rescale.state_bytes,
            duration_ns,
        });
    }

    /// Worker `worker` died (`why`): a rescale in progress is given up, its queued rescales
    /// dropped, and it leaves the ring. Returns false if it was not a live member (then
    /// nothing changes), or an error if no worker would be left on the ring.
    pub fn fail(
        &mut self,
        worker: usize,
        why: &str,
        path: &mut DataPath,
        out: &mut impl Outbox,
    ) -> Result<bool, String> {
        let Some(member) = self.members.get(worker).filter(|m| !m.gone() && !m.never_reached) else {
            return Ok(false);
        };
        let survivors = self.members.iter().enumerate().filter(|(i, m)| *i != worker && m.on_ring && !m.gone()).count();
        if survivors == 0 && member.on_ring {
            return Err(format!("worker {} died and no worker is left to take its symbols", member.id));
        }
        let mut queue = std::mem::take(&mut self.queue);
        queue.retain(|(_, queued)| *queued != worker);
        if self.current.is_some() {
            self.give_up(why, path, out);
        }
        // A give-up may put a leaving worker back on the ring; a dead one is off it for good.
        let member = &mut self.members[worker];
        member.state = MemberState::Failed;
        member.unreached_since = None;
        member.on_ring = false;
        self.retired += 1;
        path.set_ring(&self.ring(), self.vnodes);
        self.queue = queue;
        Ok(true)
    }

    /// The active workers on the ring (those a checkpoint covers), by index.
    pub fn active(&self) -> std::collections::BTreeSet<usize> {
        self.members
            .iter()
            .enumerate()
            .filter(|(_, m)| m.on_ring && m.state == MemberState::Active)
            .map(|(index, _)| index)
            .collect()
    }

    /// Whether worker `worker` is active: on the ring, neither joining nor leaving.
    pub fn is_active(&self, worker: usize) -> bool {
        self.members.get(worker).is_some_and(|m| m.on_ring && m.state == MemberState::Active)
    }

    /// Whether worker `worker` is a member: active, joining or leaving (its liveness is watched).
    pub fn is_member(&self, worker: usize) -> bool {
        self.members.get(worker).is_some_and(|member| !member.gone() && !member.never_reached)
    }

    /// Whether worker `worker` (by index) died.
    pub fn is_failed(&self, worker: usize) -> bool {
        self.members.get(worker).is_some_and(|member| member.state == MemberState::Failed)
    }

    /// The workers that died, by index.
    pub fn failed(&self) -> Vec<u32> {
        (0..self.members.len() as u32).filter(|&i| self.is_failed(i as usize)).collect()
    }

    /// A member's id.
    pub fn id(&self, worker: usize) -> &str {
        &self.members[worker].id
    }

    /// The membership for the metrics.
    pub fn membership(&self, path: &DataPath) -> crate::metrics::Membership {
        let routed = self.routed_per_member(path);
        let states =
            [MemberState::Active, MemberState::Joining, MemberState::Leaving, MemberState::Left, MemberState::Failed]
                .map(|state| (state.name(), self.members.iter().filter(|m| m.state == state).count() as u64));
        crate::metrics::Membership {
            routed: self.members.iter().map(|m| m.id.clone()).zip(routed).collect(),
            states: states.to_vec(),
            ticks_held: path.held_ticks() as u64,
            rescales: self.finished,
        }
    }

    /// Ticks routed to each member so far, by index.
    fn routed_per_member(&self, path: &DataPath) -> Vec<u64> {
        (0..self.members.len()).map(|worker| path.routed().iter().map(|per_worker| per_worker[worker]).sum()).collect()
    }

    /// The membership for `cep cluster status`.
    pub fn status(&self, path: Option<&DataPath>, now: Monotonic, streams: u32) -> ClusterStatus {
        let owned = path.map(DataPath::owned).unwrap_or_default();
        let routed: Vec<u64> = path
            .map(|p| {
                (0..self.members.len())
                    .map(|worker| p.routed().iter().map(|per_worker| per_worker[worker]).sum())
                    .collect()
            })
            .unwrap_or_default();
        ClusterStatus {
            now_ns: now.as_ns(),
            members: self
                .members
                .iter()
                .enumerate()
                .map(|(index, m)| MemberStatus {
                    index: index as u32,
                    id: m.id.clone(),
                    state: m.state.name().into(),
                    symbols: owned.get(index).copied().unwrap_or(0),
                    routed: routed.get(index).copied().unwrap_or(0),
                })
                .collect(),
            moving: self.current.as_ref().map(|r| MoveProgress {
                kind: r.kind.name().into(),
                worker: self.members[r.worker].id.clone(),
                slices_done: r.slices_total - r.slices.len() as u32 - u32::from(!r.parts.is_empty()),
                slices: r.slices_total,
                symbols: r.symbols,
            }),
            queued: self.queue.len() as u32,
            streams_ended: path.map_or(0, |p| p.ended().iter().filter(|e| **e).count() as u32),
            streams,
        }
    }
}

/// A symbol as text (symbols on the wire are checked UTF-8).
fn lossy(symbol: &[u8]) -> String {
    String::from_utf8_lossy(symbol).into_owned()
}
