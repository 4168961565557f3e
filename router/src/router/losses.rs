//! What the router does when a member is lost: a dead worker's symbols fail over, a dead
//! injector's streams end where the router has them, and a run given up tells those it can.

use super::{Phase, Router, Running};
use crate::control::ClientId;
use cep_core::failover::WorkerFailed;
use cep_core::frame::Body;
use cep_core::identity::ROUTER_ID;
use cep_core::liveness::Abandoned;
use cep_core::outbox::{Event, Outbox, Peer};

impl Router {
    /// The injector of stream `stream` is dead (`reason`): the stream is ended where the router
    /// has it (every worker gets its end marker, behind its last ticks), what it sent in truth
    /// is unknown (the report says so), and its injector is fenced.
    pub fn stream_lost(&mut self, stream: u32, reason: &str, out: &mut impl Outbox) {
        let Phase::Running(Running { path, .. }) = &mut self.phase else { return };
        let why = format!("the injector of stream {stream} was taken for dead: {reason}");
        let heard = self.heard_sent.get(&stream).copied().unwrap_or(0);
        if let Some(received) = path.end_lost(stream, why, heard, out) {
            out.event(Event::StreamLost { stream, received, reason: reason.to_string() });
        }
    }

    /// The router gives the run up (`reason`: its error): every worker and injector it has a
    /// standing link to (workers that asked where the collector is, injectors that sent a
    /// heartbeat) is told why, so that each names the cause rather than only the router's end
    /// (the collector writes the cause itself when it loses the router).
    pub fn abandon(&mut self, reason: &str, out: &mut impl Outbox) {
        let Some(Running { delivery, injector_links, .. }) = self.running() else { return };
        let notice = Abandoned { reason: reason.to_string() }.encode(ROUTER_ID);
        let links: Vec<ClientId> = delivery.links().chain(injector_links.values()).cloned().collect();
        for client in links {
            out.send(Peer::Client(client), &notice);
        }
    }

    /// Worker `worker` is dead (`reason`): its symbols go to the others, restored from its
    /// last checkpoint and replayed when that is current, from empty state otherwise; the
    /// collector is told first. An error when no worker is left to take them: the run is over,
    /// and the router's report has gone to the collector.
    pub fn worker_lost(&mut self, worker: u32, reason: &str, out: &mut impl Outbox) -> Result<(), String> {
        let Phase::Running(Running { path, rescaling, delivery, .. }) = &mut self.phase else { return Ok(()) };
        self.fenced.entry(worker).or_insert_with(|| reason.to_string());
        // A dead worker's link is gone: nothing more is pushed to it.
        delivery.unsubscribe(worker);
        let worker = worker as usize;
        let why = format!("because worker {} died ({reason})", self.workers.get(worker).map_or("?", |w| &w.id));
        // Its state is known only if no stream ended (survivors may have closed it) and no
        // rescale or rule switch since its snapshot.
        let restore = if path.any_ended() || rescaling.busy() { None } else { self.checkpoints.restorable(worker) };
        // What the collector is told when nothing could be moved or restored.
        let unrecovered = WorkerFailed {
            worker: rescaling.id(worker).to_string(),
            index: worker as u32,
            reason: reason.to_string(),
            detected_ns: out.now(),
            recovered: false,
            checkpoint: 0,
            processed: Default::default(),
            outputs: 0,
            replayed: 0,
            moved: Vec::new(),
            state_lost: Vec::new(),
        };
        let failed = match rescaling.fail(worker, &why, path, out) {
            Ok(failed) => failed,
            Err(reason) => {
                // No worker left: the collector is told what was lost, and the run ends with
                // the router's report (if it has not gone yet).
                let record = WorkerFailed { reason: format!("{reason} ({why})"), ..unrecovered };
                out.send(Peer::Collector, &record.encode(ROUTER_ID));
                self.finish(out);
                return Err(reason);
            }
        };
        if !failed {
            return Ok(());
        }
        // The survivors' snapshots do not hold what they take now, nor do their logs: no
        // snapshot is current until the next round, which starts at once. A round in flight
        // fails: it cannot hold the dead worker's state.
        let dead = self.workers.get(worker).map_or("?", |w| w.id.as_str());
        self.checkpoints.fail_round_in_flight(|id| format!("checkpoint {id}: {dead} died during it"));
        self.checkpoints.invalidate();
        self.checkpoints.due_now();
        let moved = path.reassign(worker, out);
        // Every part carries the counts at its barrier: the last, the newest snapshot's.
        let snapshot = restore.as_ref().and_then(Option::as_ref).and_then(|parts| parts.last());
        let record = WorkerFailed {
            recovered: restore.is_some(),
            checkpoint: snapshot.map_or(0, |s| s.id),
            processed: snapshot.map(|s| s.processed.clone()).unwrap_or_default(),
            outputs: snapshot.map_or(0, |s| s.outputs),
            replayed: if restore.is_some() { path.logged_ticks(worker) } else { 0 },
            state_lost: if restore.is_some() { Vec::new() } else { moved.iter().map(|(s, _, _)| s.clone()).collect() },
            moved,
            ..unrecovered
        };
        // Before any replayed output can exist.
        out.send(Peer::Collector, &record.encode(ROUTER_ID));
        if let Some(Some(parts)) = &restore {
            // The survivors read these parts from the store: kept until they have.
            self.checkpoints.restoring(parts);
        }
        let replayed = match &restore {
            Some(parts) => path.replay(worker, parts.as_deref().unwrap_or_default(), &record.moved, out),
            None => {
                path.drop_log(worker);
                0
            }
        };
        out.event(Event::WorkerFailed {
            worker: record.worker,
            reason: reason.to_string(),
            symbols: record.moved.len() as u64,
            recovered: record.recovered,
            replayed,
        });
        rescaling.step(path, out);
        self.count_retirements();
        self.note_rescaling();
        Ok(())
    }
}
