//! The router's side of delivery to the collector ([`cep_core::delivery`]): which collector
//! incarnation serves the run and where, what it saved of each worker's frames (workers ask,
//! and drop what is saved), and a restarted collector taking over.

use cep_core::control::Register;
use cep_core::delivery::{DeliveryStatus, Saved};
use cep_core::identity::ROUTER_ID;

/// The collector as the router knows it once the run has started.
#[derive(Debug)]
pub struct CollectorDelivery {
    incarnation: u64,
    endpoint: String,
    /// Per worker index, the last position of its frames the collector saved.
    saved: Vec<u64>,
    /// Per worker index, whether the collector asked it to send again (told at its next query).
    resend: Vec<bool>,
    /// The run's start (`Ready::start_ns`): a restarted collector must resume this run.
    run_start_ns: u64,
}

impl CollectorDelivery {
    /// The collector the run started with, at `endpoint`.
    pub fn new(endpoint: String, run_start_ns: u64) -> Self {
        CollectorDelivery { incarnation: 1, endpoint, saved: Vec::new(), resend: Vec::new(), run_start_ns }
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
        for &source in &saved.resend {
            if source == ROUTER_ID {
                router_resends = true;
            } else if (source as usize) < workers {
                self.resend[source as usize] = true;
            }
        }
        (router, router_resends)
    }

    /// What worker `worker` is told when it asks (a request to send again is told once).
    pub fn status(&mut self, worker: u32) -> DeliveryStatus {
        let resend = self.resend.get_mut(worker as usize).map(std::mem::take).unwrap_or(false);
        DeliveryStatus {
            incarnation: self.incarnation,
            endpoint: self.endpoint.clone(),
            saved: self.saved.get(worker as usize).copied().unwrap_or(0),
            resend,
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
        let saved = Saved { positions: vec![(0, 4), (1, 9), (7, 100), (ROUTER_ID, 2)], resend: vec![1, 7] };
        assert_eq!(delivery.saved(&saved, 2), (Some(2), false));
        let status = |saved, resend| DeliveryStatus { incarnation: 1, endpoint: "tcp://c1:1".into(), saved, resend };
        assert_eq!(delivery.status(1), status(9, true));
        assert_eq!(delivery.status(1), status(9, false), "asked to send again once");
        // Beyond the run's workers: nothing kept, nothing grows.
        assert_eq!(delivery.status(7).saved, 0);
        assert_eq!(delivery.saved(&Saved { positions: vec![], resend: vec![ROUTER_ID] }, 2), (None, true));
        assert!(delivery.take_over(&register(0)).unwrap_err().contains("already started"));
        assert!(delivery.take_over(&register(78)).unwrap_err().contains("another run"));
        assert_eq!(delivery.take_over(&register(77)), Ok(2));
        assert_eq!(
            delivery.status(1),
            DeliveryStatus { incarnation: 2, endpoint: "tcp://c2:1".into(), saved: 0, resend: false }
        );
    }
}
