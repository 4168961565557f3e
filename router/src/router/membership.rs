//! Membership while the run goes on: a worker joins (its share of the symbols moves to it) or
//! is asked to leave, an injector opens more streams, a restarted collector takes over.

use super::{Phase, Router, Running, LATE_START_DELAY_NS, NOT_STARTED};
use crate::admission::check_endpoint;
use cep_core::clock::Monotonic;
use cep_core::control::{Ready, Register, WorkerInfo};
use cep_core::frame::Body;
use cep_core::identity::ROUTER_ID;
use cep_core::outbox::{Event, Outbox, Peer};
use cep_core::rescale::{RescaleAccepted, Welcome, WorkerJoined, MAX_STREAMS};

impl Router {
    /// A collector registers while the run goes on: a restarted one resuming this run takes
    /// over (its answer is the run's Ready, with its incarnation); frames to the collector go
    /// to it from now on, and workers learn of it when they next ask.
    pub(super) fn collector_restarted(
        &mut self,
        register: Register,
        caller_key: &str,
        out: &mut impl Outbox,
    ) -> Result<Vec<u8>, String> {
        let Phase::Running(run) = &mut self.phase else { return Err(NOT_STARTED.into()) };
        check_endpoint(&register.endpoint)?;
        if self.collector_key != caller_key {
            return Err("a collector that resumes the run must hold the key of the one it replaces".into());
        }
        let ready = run.joiner_ready.as_mut().ok_or(NOT_STARTED)?;
        let incarnation = run.delivery.take_over(&register)?;
        ready.collector.clone_from(&register.endpoint);
        ready.collector_clock.clone_from(&register.clock_endpoint);
        ready.collector_incarnation = incarnation;
        let mut answer = Ready { checkpoint_dir: String::new(), ..ready.clone() };
        answer.assigned = 0;
        answer.workers = self.workers.clone();
        answer.rules = self.control.deployments.current().clone();
        out.event(Event::Registered {
            who: format!("collector {} at {} (incarnation {incarnation})", register.id, register.endpoint),
            waiting_for: "nothing: it resumes from its saved state, and every sender sends it what it had not saved"
                .into(),
        });
        out.collector_moved(&register.endpoint, &self.collector_key, incarnation);
        for (worker, committed) in run.delivery.changes() {
            out.send(Peer::Client(worker), &committed.encode(ROUTER_ID));
        }
        Ok(answer.encode(ROUTER_ID))
    }

    /// State moving between workers is not in the replay logs: once a rescale starts, no
    /// checkpoint is current until the next one after it.
    pub(super) fn note_rescaling(&mut self) {
        if self.rescaling() {
            self.checkpoints.invalidate();
        }
    }

    /// Workers that retired will not ask for the end of the run.
    pub(super) fn count_retirements(&mut self) {
        let retired = match &mut self.phase {
            Phase::Running(run) => run.rescaling.take_retired(),
            Phase::Gathering => 0,
        };
        for _ in 0..retired {
            self.control.node_retiring();
        }
    }

    /// A worker registered while the run goes on: it joins, and its share of the symbols
    /// moves to it.
    pub(super) fn join(
        &mut self,
        register: Register,
        caller_key: &str,
        now: Monotonic,
        out: &mut impl Outbox,
    ) -> Result<Vec<u8>, String> {
        let Phase::Running(Running { path, rescaling, joiner_ready, heartbeats, .. }) = &mut self.phase else {
            return Err(NOT_STARTED.into());
        };
        if path.input_ended() {
            return Err("every stream has ended: there is nothing left to take a share of".into());
        }
        check_endpoint(&register.endpoint)?;
        rescaling.join(&register.id, now)?;
        let index = self.workers.len();
        let key = caller_key.to_string();
        // Before the worker is answered, so ahead of anything it sends the collector (which
        // holds that index's frames until it knows the key, should they come first).
        let joined = WorkerJoined { index: index as u32, id: register.id.clone(), key: key.clone() };
        out.send(Peer::Collector, &joined.encode(ROUTER_ID));
        self.workers.push(WorkerInfo { id: register.id.clone(), endpoint: register.endpoint.clone(), key });
        out.connect_worker(index as u32, &register.endpoint, caller_key);
        // First on its socket: the Welcome it must answer before anything is routed to it.
        out.send(Peer::Worker(index as u32), &Welcome { index: index as u32 }.encode(ROUTER_ID));
        let added = path.add_worker(out);
        debug_assert_eq!(added, index);
        self.checkpoints.add_worker();
        heartbeats.add_worker();
        self.control.node_joined();
        let mut ready = joiner_ready.clone().ok_or(NOT_STARTED)?;
        ready.assigned = index as u32;
        ready.workers = self.workers.clone();
        ready.rules = self.control.deployments.current().clone();
        ready.joining = true;
        out.event(Event::Registered {
            who: format!("worker {} at {}", register.id, register.endpoint),
            waiting_for: "its answer to the Welcome on its data socket, then it joins the running cluster".into(),
        });
        Ok(ready.encode(ROUTER_ID))
    }

    /// An injector registered while the run goes on: its streams open (every worker is told,
    /// ahead of their ticks) and it starts at once.
    pub(super) fn open_streams(
        &mut self,
        client: &[u8],
        register: Register,
        caller_key: &str,
        out: &mut impl Outbox,
    ) -> Result<Vec<u8>, String> {
        let Phase::Running(Running { path, joiner_ready, heartbeats, .. }) = &mut self.phase else {
            return Err(NOT_STARTED.into());
        };
        let ready = joiner_ready.as_mut().ok_or(NOT_STARTED)?;
        if path.input_ended() {
            return Err("every stream has ended: the run is finishing".into());
        }
        if register.streams == 0 || path.streams().saturating_add(register.streams) > MAX_STREAMS {
            return Err(format!(
                "{} more streams: a run takes 1 to {MAX_STREAMS} streams in all (it has {})",
                register.streams,
                path.streams()
            ));
        }
        let first = path.add_streams(register.streams, out);
        path.bind_streams(first, &vec![caller_key.to_string(); register.streams as usize]);
        heartbeats.open_streams(register.streams);
        self.late_injectors.push((client.to_vec(), first, register.streams));
        self.settings.streams = path.streams();
        self.control.node_joined();
        ready.streams = self.settings.streams;
        let ready = Ready {
            assigned: first,
            workers: self.workers.clone(),
            rules: self.control.deployments.current().clone(),
            // Time for its clock samples, as at the start.
            start_ns: out.now() + LATE_START_DELAY_NS,
            checkpoint_dir: String::new(),
            ..ready.clone()
        };
        out.event(Event::Registered {
            who: format!("injector {} with streams {first}..{}", register.id, first + register.streams),
            waiting_for: "nothing: its streams join the running cluster".into(),
        });
        Ok(ready.encode(ROUTER_ID))
    }

    /// Asks a worker to leave: its symbols move to the others, then it retires.
    pub(super) fn leave(&mut self, worker: &str, out: &mut impl Outbox) -> Result<Vec<u8>, String> {
        let Phase::Running(Running { path, rescaling, .. }) = &mut self.phase else {
            return Err(NOT_STARTED.into());
        };
        if path.input_ended() {
            return Err("every stream has ended: the run is finishing".into());
        }
        let index = rescaling.leave(worker)?;
        let symbols = path.owned().get(index).copied().unwrap_or(0);
        rescaling.step(path, out);
        Ok(RescaleAccepted { symbols, slices: symbols.div_ceil(self.settings.slice_symbols.max(1) as u64) as u32 }
            .encode(ROUTER_ID))
    }
}
