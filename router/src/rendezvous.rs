//! Start-up: every process registers; the run starts only once the expected workers, the
//! collector and the expected injector streams are all present, so no tick can reach a
//! half-built cluster (ZeroMQ's slow joiner). A pure state machine: the caller does the I/O.

use cep_core::clock::Monotonic;
use cep_core::control::{Ready, Register, RulesText, WorkerInfo};
use cep_core::identity::Role;
use std::time::Duration;

/// How many workers a run waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkerCount {
    /// Exactly this many.
    Exactly(usize),
    /// Everyone who registers until no worker has arrived for this long (at least one).
    Settle(Duration),
}

/// What to do with a registration.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Accepted: answer when the run starts.
    Hold,
    /// Refused now, with the reason.
    Refuse(String),
}

/// The cluster as registered so far. `C` identifies a client to answer later.
#[derive(Debug)]
pub struct Rendezvous<C> {
    expected_workers: WorkerCount,
    /// When the last worker registered (ns, the driver's clock).
    last_worker_at: Option<Monotonic>,
    expected_streams: u32,
    workers: Vec<(C, WorkerInfo)>,
    /// (client, data endpoint, clock endpoint, CURVE key).
    collector: Option<(C, String, String, String)>,
    /// (client, streams, warm-up, CURVE key).
    injectors: Vec<(C, u32, u64, String)>,
    started: bool,
}

/// The answers to send when the run starts, and the run's worker list (ring order).
pub struct Start<C> {
    /// Every registered client with its Ready answer.
    pub answers: Vec<(C, Ready)>,
    /// The run's workers in ring order (ordered by id).
    pub workers: Vec<WorkerInfo>,
    /// The collector's data endpoint.
    pub collector: String,
    /// The collector's CURVE key (empty when open).
    pub collector_key: String,
    /// Per stream, the CURVE key of the injector that registered it (empty when open).
    pub stream_keys: Vec<String>,
}

impl<C: Clone> Rendezvous<C> {
    /// Nobody registered yet; the run waits for `expected_workers` and `expected_streams`
    /// injector streams (and one collector).
    pub fn new(expected_workers: WorkerCount, expected_streams: u32) -> Self {
        Rendezvous {
            expected_workers,
            last_worker_at: None,
            expected_streams,
            workers: Vec::new(),
            collector: None,
            injectors: Vec::new(),
            started: false,
        }
    }

    fn streams(&self) -> u32 {
        self.injectors.iter().map(|(_, streams, _, _)| streams).sum()
    }

    /// Takes a registration arriving at `now` from the holder of CURVE key `key` (empty
    /// when open).
    pub fn offer(&mut self, client: C, registration: Register, key: &str, now: Monotonic) -> Verdict {
        if matches!(registration.role, Role::Router | Role::Operator) {
            return does_not_register(registration.role);
        }
        if self.started {
            return Verdict::Refuse(format!(
                "the run has already started with {} workers; its injector streams were fixed at the start (a worker arriving late joins the running cluster)",
                self.workers.len()
            ));
        }
        match registration.role {
            Role::Worker => {
                if self.workers.iter().any(|(_, w)| w.id == registration.id) {
                    return Verdict::Refuse(format!("worker id `{}` is already registered", registration.id));
                }
                if self.expected_workers == WorkerCount::Exactly(self.workers.len()) {
                    return Verdict::Refuse(format!(
                        "all {} expected workers are already registered",
                        self.workers.len()
                    ));
                }
                if registration.endpoint.is_empty() {
                    return Verdict::Refuse("a worker must advertise its data endpoint".into());
                }
                let worker = WorkerInfo { id: registration.id, endpoint: registration.endpoint, key: key.into() };
                self.workers.push((client, worker));
                self.last_worker_at = Some(now);
            }
            Role::Collector => {
                if self.collector.is_some() {
                    return Verdict::Refuse("a collector is already registered".into());
                }
                if registration.endpoint.is_empty() {
                    return Verdict::Refuse("the collector must advertise its data endpoint".into());
                }
                self.collector = Some((client, registration.endpoint, registration.clock_endpoint, key.into()));
            }
            Role::Injector => {
                let streams = registration.streams;
                if streams == 0 || self.streams().saturating_add(streams) > self.expected_streams {
                    return Verdict::Refuse(format!(
                        "{streams} more streams would exceed the {} expected (already registered: {})",
                        self.expected_streams,
                        self.streams()
                    ));
                }
                self.injectors.push((client, streams, registration.warmup_ns, key.into()));
            }
            Role::Router | Role::Operator => return does_not_register(registration.role),
        }
        Verdict::Hold
    }

    /// Whether the run can start at `now`.
    pub fn is_complete(&self, now: Monotonic) -> bool {
        let workers_complete = match self.expected_workers {
            WorkerCount::Exactly(n) => self.workers.len() == n,
            WorkerCount::Settle(settle) => self.last_worker_at.is_some_and(|at| now.since(at) >= settle),
        };
        !self.started && workers_complete && self.collector.is_some() && self.streams() == self.expected_streams
    }

    /// The collector's clock socket (empty if it has none) and CURVE key, once it has registered.
    pub fn collector_clock(&self) -> Option<(&str, &str)> {
        self.collector.as_ref().map(|(_, _, clock, key)| (clock.as_str(), key.as_str()))
    }

    /// The workers and injectors registered: each asks to be told when the run is over.
    pub fn nodes(&self) -> usize {
        self.workers.len() + self.injectors.len()
    }

    /// Who has registered: (workers, whether the collector has, injector streams).
    pub fn registered(&self) -> (usize, bool, u32) {
        (self.workers.len(), self.collector.is_some(), self.streams())
    }

    /// What is still missing, for the log.
    pub fn waiting_for(&self) -> String {
        let expected = match self.expected_workers {
            WorkerCount::Exactly(n) => n.to_string(),
            WorkerCount::Settle(settle) => format!("any (settling {settle:?})"),
        };
        format!(
            "workers {}/{}, collector {}, injector streams {}/{}",
            self.workers.len(),
            expected,
            if self.collector.is_some() { "1/1" } else { "0/1" },
            self.streams(),
            self.expected_streams
        )
    }

    /// Starts the run (call once [`Self::is_complete`]); workers are ordered by id. Everyone is
    /// told the router's failure time-out, `failure_timeout_ns` (workers send heartbeats by it).
    pub fn start(
        &mut self,
        start_ns: u64,
        rules: &RulesText,
        allowed_lateness_ns: Option<u64>,
        failure_timeout_ns: u64,
    ) -> Start<C> {
        self.started = true;
        self.workers.sort_by(|a, b| a.1.id.cmp(&b.1.id));
        let workers: Vec<WorkerInfo> = self.workers.iter().map(|(_, w)| w.clone()).collect();
        let (collector_client, collector, collector_clock, collector_key) =
            self.collector.clone().expect("complete cluster has a collector");
        let warmup_ns = self.injectors.iter().map(|(_, _, warmup, _)| *warmup).max().unwrap_or(0);
        let ready = |assigned: u32| Ready {
            assigned,
            workers: workers.clone(),
            collector: collector.clone(),
            streams: self.expected_streams,
            start_ns,
            warmup_ns,
            collector_clock: collector_clock.clone(),
            rules: rules.clone(),
            allowed_lateness_ns,
            joining: false,
            collector_incarnation: 1,
            collector_key: collector_key.clone(),
            failure_timeout_ns,
            checkpoint_dir: String::new(),
        };
        let mut answers: Vec<(C, Ready)> = Vec::new();
        for (index, (client, _)) in self.workers.iter().enumerate() {
            answers.push((client.clone(), ready(index as u32)));
        }
        answers.push((collector_client, ready(0)));
        let mut first_stream = 0;
        let mut stream_keys = Vec::new();
        for (client, streams, _, key) in &self.injectors {
            stream_keys.extend(std::iter::repeat_n(key.clone(), *streams as usize));
            answers.push((client.clone(), ready(first_stream)));
            first_stream += streams;
        }
        Start { answers, workers, collector, collector_key, stream_keys }
    }
}

/// The answer to a registration from a role that never registers (router, operator), before or
/// after the start.
fn does_not_register(role: Role) -> Verdict {
    Verdict::Refuse(format!("a {role} does not register"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> RulesText {
        RulesText { epoch: 0, origin: "test".into(), text: String::new() }
    }

    fn register(role: Role, id: &str, streams: u32) -> Register {
        Register {
            role,
            id: id.into(),
            endpoint: format!("tcp://{id}:1"),
            streams,
            warmup_ns: streams as u64,
            clock_endpoint: String::new(),
            resuming: 0,
        }
    }

    #[test]
    fn starts_only_when_complete_and_refuses_late_or_duplicate() {
        let now = Monotonic::from_ns(1);
        let mut rendezvous = Rendezvous::new(WorkerCount::Exactly(2), 3);
        assert_eq!(rendezvous.offer(1, register(Role::Worker, "b", 0), "", now), Verdict::Hold);
        assert!(matches!(rendezvous.offer(2, register(Role::Worker, "b", 0), "", now), Verdict::Refuse(_)));
        assert_eq!(rendezvous.offer(3, register(Role::Injector, "i", 2), "", now), Verdict::Hold);
        assert!(matches!(rendezvous.offer(4, register(Role::Injector, "j", 2), "", now), Verdict::Refuse(_)));
        // Bytes 3 and 4 decode (the router's and the operator's roles) but never register.
        assert_eq!(rendezvous.offer(11, register(Role::Operator, "o", 0), "", now), does_not_register(Role::Operator));
        assert_eq!(rendezvous.offer(5, register(Role::Collector, "c", 0), "", now), Verdict::Hold);
        assert!(!rendezvous.is_complete(now));
        assert_eq!(rendezvous.offer(6, register(Role::Worker, "a", 0), "", now), Verdict::Hold);
        assert!(matches!(rendezvous.offer(9, register(Role::Worker, "c", 0), "", now), Verdict::Refuse(_)));
        assert_eq!(rendezvous.offer(7, register(Role::Injector, "k", 1), "", now), Verdict::Hold);
        assert!(rendezvous.is_complete(now));
        let start = rendezvous.start(99, &rules(), None, 0);
        assert_eq!(start.workers.iter().map(|w| w.id.as_str()).collect::<Vec<_>>(), vec!["a", "b"]);
        let assigned: Vec<(i32, u32)> = start.answers.iter().map(|(c, r)| (*c, r.assigned)).collect();
        assert_eq!(assigned, vec![(6, 0), (1, 1), (5, 0), (3, 0), (7, 2)]);
        assert!(start.answers.iter().all(|(_, r)| r.start_ns == 99 && r.warmup_ns == 2 && r.streams == 3));
        for role in [Role::Router, Role::Operator] {
            let refused = Verdict::Refuse(format!("a {role} does not register"));
            assert_eq!(rendezvous.offer(10, register(role, "r", 0), "", now), refused, "after the start too");
        }
        match rendezvous.offer(8, register(Role::Worker, "late", 0), "", now) {
            Verdict::Refuse(reason) => assert!(reason.contains("already started"), "{reason}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn settle_mode_takes_every_worker_until_they_stop_arriving() {
        let t0 = Monotonic::from_ns(1_000);
        let secs = Duration::from_secs;
        let settle = Duration::from_secs(3);
        let mut rendezvous = Rendezvous::new(WorkerCount::Settle(settle), 1);
        rendezvous.offer(1, register(Role::Collector, "c", 0), "", t0);
        rendezvous.offer(2, register(Role::Injector, "i", 1), "", t0);
        assert!(!rendezvous.is_complete(t0.after(secs(30))), "no worker yet");
        for (i, id) in ["w1", "w2", "w3"].iter().enumerate() {
            rendezvous.offer(10 + i as i32, register(Role::Worker, id, 0), "", t0.after(secs(i as u64)));
        }
        assert!(!rendezvous.is_complete(t0.after(secs(4))));
        assert!(rendezvous.is_complete(t0.after(secs(5))));
        assert_eq!(rendezvous.start(1, &rules(), None, 0).workers.len(), 3);
    }
}
