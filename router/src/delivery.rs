//! The router's side of delivery to the collector ([`cep_core::delivery`]): which collector
//! incarnation serves the run and where, what it saved of each worker's frames, and a
//! restarted collector taking over.
//!
//! The acknowledgement path, end to end, pushed at every step:
//!
//! ```text
//!  worker/router ──Sequenced(position)──▶ collector      (each sender keeps a DeliveryLog)
//!  collector ──Saved(positions, confirmed checkpoints)──▶ router   (once its state is stored)
//!  router: its own log drops what is saved; checkpoints whose outputs are saved count
//!  router ──Committed(saved, resend, collector)──▶ each worker that asked once (DeliveryQuery)
//!  worker: its log drops what is saved, sends again on resend, readdresses a new collector
//! ```

use crate::control::ClientId;
use cep_core::control::Register;
use cep_core::delivery::{Committed, DeliveryStatus, Saved};
use cep_core::identity::ROUTER_ID;

/// The collector as the router knows it once the run has started.
#[derive(Debug)]
pub struct CollectorDelivery {
    incarnation: u64,
    endpoint: String,
    /// Per worker index, the last position of its frames the collector saved.
    saved: Vec<u64>,
    /// Per worker index, whether the collector asks it to send again: as the collector's last
    /// save says (it names a source while its gap is open), so a worker that asks again
    /// meanwhile is told again.
    resend: Vec<bool>,
    /// Whether the collector's last save asked the router to send again (the router sends
    /// again when it is first asked, not at every save while the gap stays open).
    router_resend: bool,
    /// Per worker index, the control client it asked from (where its [`Committed`] notices
    /// go) and what it was told last.
    subscribers: Vec<Option<(ClientId, DeliveryStatus)>>,
    /// The run's start (`Ready::start_ns`): a restarted collector must resume this run.
    run_start_ns: u64,
}

impl CollectorDelivery {
    /// The collector the run started with, at `endpoint`.
    pub fn new(endpoint: String, run_start_ns: u64) -> Self {
        CollectorDelivery {
            incarnation: 1,
            endpoint,
            saved: Vec::new(),
            resend: Vec::new(),
            subscribers: Vec::new(),
            router_resend: false,
            run_start_ns,
        }
    }

    /// The collector saved its state: takes the positions of the run's `workers` (others are
    /// ignored, so a forged list grows nothing) and returns the router's own, if named, and
    /// whether the router is to send its frames again.
    pub fn saved(&mut self, saved: &Saved, workers: usize) -> (Option<u64>, bool) {
        if self.saved.len() < workers {
            self.saved.resize(workers, 0);
            self.resend.resize(workers, false);
        }
        let mut router = None;
        for &(source, position) in &saved.positions {
            if source == ROUTER_ID {
                router = Some(position);
            } else if (source as usize) < workers {
                self.saved[source as usize] = position;
            }
        }
        let mut router_resends = false;
        // A notice that names no position (confirmations alone) says nothing of the gaps.
        if saved.positions.is_empty() {
            return (None, false);
        }
        self.resend.iter_mut().for_each(|resend| *resend = false);
        for &source in &saved.resend {
            if source == ROUTER_ID {
                router_resends = true;
            } else if (source as usize) < workers {
                self.resend[source as usize] = true;
            }
        }
        let newly = router_resends && !std::mem::replace(&mut self.router_resend, router_resends);
        (router, newly)
    }

    /// Worker `worker` asks from `client`: the answer now, and a [`Committed`] to that client
    /// from then on whenever it changes ([`Self::changes`]). A worker asks once; asking again
    /// (from a new link) moves its notices there.
    pub fn subscribe(&mut self, worker: u32, client: ClientId) -> DeliveryStatus {
        let status = self.status(worker);
        let index = worker as usize;
        if self.subscribers.len() <= index {
            self.subscribers.resize(index + 1, None);
        }
        self.subscribers[index] = Some((client, status.clone()));
        status
    }

    /// Worker `worker` is dead: nothing more is pushed to it. (A retired worker's notices go on
    /// until the run ends; its link is gone and they are dropped.)
    pub fn unsubscribe(&mut self, worker: u32) {
        if let Some(subscriber) = self.subscribers.get_mut(worker as usize) {
            *subscriber = None;
        }
    }

    /// The standing links of the workers that asked ([`Self::subscribe`]).
    pub fn links(&self) -> impl Iterator<Item = &ClientId> {
        self.subscribers.iter().flatten().map(|(client, _)| client)
    }

    /// The notices due since the last call: one per subscribed worker whose status changed,
    /// to the client it asked from.
    pub fn changes(&mut self) -> Vec<(ClientId, Committed)> {
        let mut notices = Vec::new();
        for worker in 0..self.subscribers.len() as u32 {
            let current = self.status(worker);
            let Some((client, told)) = &mut self.subscribers[worker as usize] else { continue };
            if current != *told {
                told.clone_from(&current);
                notices.push((client.clone(), Committed(current)));
            }
        }
        notices
    }

    /// What worker `worker` is told now.
    pub fn status(&self, worker: u32) -> DeliveryStatus {
        DeliveryStatus {
            incarnation: self.incarnation,
            endpoint: self.endpoint.clone(),
            saved: self.saved.get(worker as usize).copied().unwrap_or(0),
            resend: self.resend.get(worker as usize).copied().unwrap_or(false),
        }
    }

    /// A collector registers while the run goes on: it takes over if it resumes this run's
    /// saved state. Returns its incarnation.
    pub fn take_over(&mut self, register: &Register) -> Result<u64, String> {
        if register.resuming == 0 {
            return Err("the run has already started; a collector can only join it to resume its saved state \
                        (start it again with the same --out)"
                .into());
        }
        if register.resuming != self.run_start_ns {
            return Err(format!(
                "the collector's saved state is of another run (started at {} ns; this one at {} ns)",
                register.resuming, self.run_start_ns
            ));
        }
        self.incarnation += 1;
        self.endpoint.clone_from(&register.endpoint);
        // What it saved, it says after loading its state; until then nothing counts as saved.
        self.saved.iter_mut().for_each(|saved| *saved = 0);
        self.resend.iter_mut().for_each(|resend| *resend = false);
        self.router_resend = false;
        Ok(self.incarnation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cep_core::identity::Role;

    fn register(resuming: u64) -> Register {
        Register {
            role: Role::Collector,
            id: "collector".into(),
            endpoint: "tcp://c2:1".into(),
            streams: 0,
            warmup_ns: 0,
            clock_endpoint: String::new(),
            resuming,
        }
    }

    #[test]
    fn a_collector_resuming_this_run_takes_over_and_workers_learn_what_it_saved() {
        let mut delivery = CollectorDelivery::new("tcp://c1:1".into(), 77);
        let saved =
            Saved { positions: vec![(0, 4), (1, 9), (7, 100), (ROUTER_ID, 2)], resend: vec![1, 7], confirmed: vec![] };
        assert_eq!(delivery.saved(&saved, 2), (Some(2), false));
        let status = |saved, resend| DeliveryStatus { incarnation: 1, endpoint: "tcp://c1:1".into(), saved, resend };
        assert_eq!(delivery.status(1), status(9, true));
        assert_eq!(delivery.status(1), status(9, true), "asked to send again while the collector says so");
        delivery.saved(&Saved { positions: vec![(1, 10)], resend: vec![], confirmed: vec![] }, 2);
        assert_eq!(delivery.status(1), status(10, false));
        // Beyond the run's workers: nothing kept, nothing grows.
        assert_eq!(delivery.status(7).saved, 0);
        let router_asked = Saved { positions: vec![(ROUTER_ID, 2)], resend: vec![ROUTER_ID], confirmed: vec![] };
        assert_eq!(delivery.saved(&router_asked, 2), (Some(2), true));
        assert_eq!(delivery.saved(&router_asked, 2), (Some(2), false), "the router sends again once per request");
        // Confirmations alone say nothing of positions or gaps.
        assert_eq!(delivery.saved(&Saved::default(), 2), (None, false));
        assert_eq!(delivery.status(1).saved, 10);
        assert!(delivery.take_over(&register(0)).unwrap_err().contains("already started"));
        assert!(delivery.take_over(&register(78)).unwrap_err().contains("another run"));
        assert_eq!(delivery.take_over(&register(77)), Ok(2));
        assert_eq!(
            delivery.status(1),
            DeliveryStatus { incarnation: 2, endpoint: "tcp://c2:1".into(), saved: 0, resend: false }
        );
    }

    #[test]
    fn a_worker_that_asked_once_is_told_each_change_once_and_nothing_else() {
        let mut delivery = CollectorDelivery::new("tcp://c1:1".into(), 77);
        let status = |incarnation, endpoint: &str, saved, resend| DeliveryStatus {
            incarnation,
            endpoint: endpoint.into(),
            saved,
            resend,
        };
        delivery.saved(&Saved { positions: vec![(0, 3)], resend: vec![], confirmed: vec![] }, 2);
        assert_eq!(delivery.subscribe(0, b"w0".to_vec()), status(1, "tcp://c1:1", 3, false));
        assert!(delivery.changes().is_empty(), "told already");
        // Worker 1 never asked: nothing goes to it.
        delivery.saved(&Saved { positions: vec![(0, 5), (1, 8)], resend: vec![], confirmed: vec![] }, 2);
        assert_eq!(delivery.changes(), vec![(b"w0".to_vec(), Committed(status(1, "tcp://c1:1", 5, false)))]);
        assert!(delivery.changes().is_empty());
        // A request to send again is told, and its end at the next save.
        delivery.saved(&Saved { positions: vec![(0, 5)], resend: vec![0], confirmed: vec![] }, 2);
        assert_eq!(delivery.changes(), vec![(b"w0".to_vec(), Committed(status(1, "tcp://c1:1", 5, true)))]);
        assert!(delivery.changes().is_empty());
        delivery.saved(&Saved { positions: vec![(0, 5)], resend: vec![], confirmed: vec![] }, 2);
        assert_eq!(delivery.changes(), vec![(b"w0".to_vec(), Committed(status(1, "tcp://c1:1", 5, false)))]);
        // A restarted collector taking over is told, where it is.
        delivery.take_over(&register(77)).unwrap();
        assert_eq!(delivery.changes(), vec![(b"w0".to_vec(), Committed(status(2, "tcp://c2:1", 0, false)))]);
        // Asking again from another link moves the notices there.
        delivery.subscribe(0, b"w0-again".to_vec());
        delivery.saved(&Saved { positions: vec![(0, 9)], resend: vec![], confirmed: vec![] }, 2);
        assert_eq!(delivery.changes()[0].0, b"w0-again".to_vec());
        // A worker gone is told nothing more.
        delivery.unsubscribe(0);
        delivery.saved(&Saved { positions: vec![(0, 12)], resend: vec![], confirmed: vec![] }, 2);
        assert!(delivery.changes().is_empty());
    }
}
