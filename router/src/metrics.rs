//! The router's metrics (docs/METRICS.md): who has registered, ticks in per stream and out
//! per worker, rejected frames by cause, the rules' epoch. The data path copies the counters
//! it keeps anyway into these atomics when it looks around (every 50 ms) and at the end:
//! nothing per tick.

use cep_core::report::CauseCounts;
use cep_core::results::CheckpointSummary;
use cep_telemetry::metrics::Rejected;
use cep_telemetry::{Scrape, Source};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};

/// The router's metrics source: registrations, the run's counters and rejections, in
/// atomics the data path stores to and scrapes read.
#[derive(Default)]
pub struct RouterMetrics {
    /// 0 while taking every worker that registers until they settle.
    expected_workers: AtomicU64,
    expected_streams: AtomicU64,
    registered_workers: AtomicU64,
    registered_collectors: AtomicU64,
    registered_streams: AtomicU64,
    started: AtomicBool,
    streams_ended: AtomicU64,
    rules_epoch: AtomicU64,
    /// Sized when the run starts.
    run: OnceLock<RunMetrics>,
    /// The members (workers join and leave while the run goes), replaced at each publication.
    membership: Mutex<Membership>,
    /// The checkpoint rounds so far, replaced at each publication.
    checkpoints: Mutex<CheckpointSummary>,
    rejected: Rejected,
}

struct RunMetrics {
    streams: Vec<String>,
    received: Vec<AtomicU64>,
}

/// Who the workers are, and what moving symbols between them costs right now.
#[derive(Clone, Debug, Default)]
pub struct Membership {
    /// Every worker that has been a member: its id and the ticks routed to it.
    pub routed: Vec<(String, u64)>,
    /// Members per state: `active`, `joining`, `leaving`, `left`.
    pub states: Vec<(&'static str, u64)>,
    /// Ticks held for symbols whose state is moving.
    pub ticks_held: u64,
    /// Rescales finished so far: (join, leave).
    pub rescales: (u64, u64),
}

impl RouterMetrics {
    /// This process's router metrics, registered for scraping.
    pub fn register(expected_workers: usize, expected_streams: u32) -> Arc<RouterMetrics> {
        let metrics = Arc::new(RouterMetrics::default());
        metrics.expected_workers.store(expected_workers as u64, Relaxed);
        metrics.expected_streams.store(expected_streams as u64, Relaxed);
        cep_telemetry::metrics::register("router", metrics.clone());
        metrics
    }

    /// Who has registered so far: (workers, collector, injector streams).
    pub fn registered(&self, (workers, collector, streams): (usize, bool, u32)) {
        self.registered_workers.store(workers as u64, Relaxed);
        self.registered_collectors.store(collector as u64, Relaxed);
        self.registered_streams.store(streams as u64, Relaxed);
    }

    /// The run has started with these workers (ring order) and streams.
    pub fn started(&self, workers: &[String], streams: u32) {
        let zeros = |n: usize| (0..n).map(|_| AtomicU64::new(0)).collect();
        let _ = self.run.set(RunMetrics {
            streams: (0..streams).map(|stream| stream.to_string()).collect(),
            received: zeros(streams as usize),
        });
        let routed = workers.iter().map(|id| (id.clone(), 0)).collect();
        *self.membership.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) =
            Membership { routed, states: vec![("active", workers.len() as u64)], ..Membership::default() };
        self.started.store(true, Relaxed);
    }

    /// Copies the data path's counters: valid ticks received per stream, ticks routed per
    /// stream and worker, which streams have ended, rejections by cause.
    pub fn observe(
        &self,
        received: &[u64],
        ended: &[bool],
        rejected: &CauseCounts,
        epoch: u32,
        membership: Membership,
    ) {
        if let Some(run) = self.run.get() {
            for (slot, count) in run.received.iter().zip(received) {
                slot.store(*count, Relaxed);
            }
        }
        *self.membership.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = membership;
        self.streams_ended.store(ended.iter().filter(|ended| **ended).count() as u64, Relaxed);
        self.rules_epoch.store(epoch as u64, Relaxed);
        self.rejected.observe(rejected);
    }

    /// Copies the checkpoint rounds' counts.
    pub fn observe_checkpoints(&self, checkpoints: &CheckpointSummary) {
        self.checkpoints.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone_from(checkpoints);
    }

    /// The rejections alone: before the start, when there is nothing else to count.
    pub fn observe_rejections(&self, rejected: &CauseCounts) {
        self.rejected.observe(rejected);
    }
}

impl Source for RouterMetrics {
    fn scrape(&self, out: &mut Scrape<'_>) -> fmt::Result {
        let get = |value: &AtomicU64| value.load(Relaxed) as f64;
        out.gauges(
            "cep_router_registered",
            "Processes registered with the router, by kind (injector streams count one each).",
            "kind",
            [
                ("worker", get(&self.registered_workers)),
                ("collector", get(&self.registered_collectors)),
                ("stream", get(&self.registered_streams)),
            ],
        )?;
        out.gauges(
            "cep_router_expected",
            "Processes the run waits for, by kind (workers 0: every worker that registers until they settle).",
            "kind",
            [("worker", get(&self.expected_workers)), ("collector", 1.0), ("stream", get(&self.expected_streams))],
        )?;
        out.gauge("cep_router_run_started", "1 once the cluster is complete and the run has started.", {
            self.started.load(Relaxed) as u8 as f64
        })?;
        let streams = self.run.get().map_or(0, |run| run.streams.len()) as u64;
        let ended = self.streams_ended.load(Relaxed);
        out.gauge(
            "cep_router_streams_ended",
            "Injector streams whose end-of-stream marker has arrived.",
            ended as f64,
        )?;
        out.gauge(
            "cep_router_run_ended",
            "1 once every stream has ended.",
            (self.started.load(Relaxed) && ended == streams) as u8 as f64,
        )?;
        out.gauge("cep_router_rules_epoch", "The rules' version in force (0 at the start, +1 per deployment).", {
            get(&self.rules_epoch)
        })?;
        let run = self.run.get();
        let received = run.into_iter().flat_map(|run| run.streams.iter().zip(&run.received));
        out.counters(
            "cep_router_ticks_received",
            "Valid ticks received, per injector stream.",
            "stream",
            received.map(|(stream, count)| (stream.as_str(), count.load(Relaxed))),
        )?;
        let membership = self.membership.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone();
        out.counters(
            "cep_router_ticks_routed",
            "Ticks forwarded, per worker.",
            "worker",
            membership.routed.iter().map(|(worker, count)| (worker.as_str(), *count)),
        )?;
        out.gauges(
            "cep_router_members",
            "Workers by state: active, joining (symbols moving to it), leaving, left.",
            "state",
            membership.states.iter().map(|(state, count)| (*state, *count as f64)),
        )?;
        out.gauge(
            "cep_router_ticks_held",
            "Ticks held while their symbol's state moves to another worker.",
            membership.ticks_held as f64,
        )?;
        out.counters(
            "cep_router_rescales",
            "Rescales finished, by kind: a worker joined, a worker left.",
            "kind",
            [("join", membership.rescales.0), ("leave", membership.rescales.1)],
        )?;
        let checkpoints = self.checkpoints.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone();
        out.counters(
            "cep_router_checkpoints",
            "Checkpoint rounds by outcome: completed (every worker's snapshot stored), failed (a part not stored, or given up).",
            "outcome",
            [("completed", checkpoints.completed), ("failed", checkpoints.failed)],
        )?;
        out.gauge(
            "cep_router_checkpoint_last_id",
            "The last completed checkpoint round (0: none yet).",
            checkpoints.last_completed as f64,
        )?;
        out.gauge(
            "cep_router_checkpoint_last_duration_seconds",
            "The last completed round: from its barriers to the last snapshot stored.",
            checkpoints.last_duration_ms / 1e3,
        )?;
        out.gauge(
            "cep_router_checkpoint_last_bytes",
            "The last completed round: bytes stored by all workers.",
            checkpoints.last_bytes as f64,
        )?;
        self.rejected.scrape(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scrape_shows_the_data_paths_counters_with_their_types() {
        let metrics = RouterMetrics::register(2, 1);
        metrics.registered((2, true, 1));
        metrics.started(&["worker-0".into(), "worker-1".into()], 1);
        let rejected: CauseCounts = [("malformed".to_string(), 3)].into();
        let membership = Membership {
            routed: vec![("worker-0".into(), 4), ("worker-1".into(), 6), ("joined".into(), 2)],
            states: vec![("active", 2), ("joining", 1)],
            ticks_held: 7,
            rescales: (1, 0),
        };
        metrics.observe(&[10], &[true], &rejected, 1, membership);
        metrics.observe_checkpoints(&CheckpointSummary {
            completed: 5,
            failed: 1,
            last_completed: 6,
            last_duration_ms: 250.0,
            last_bytes: 4096,
            ..CheckpointSummary::default()
        });
        let text = cep_telemetry::metrics::encode(false).unwrap();
        for expected in [
            "cep_router_checkpoints_total{role=\"cep\",id=\"cep\",outcome=\"completed\"} 5\n",
            "cep_router_checkpoints_total{role=\"cep\",id=\"cep\",outcome=\"failed\"} 1\n",
            "cep_router_checkpoint_last_id{role=\"cep\",id=\"cep\"} 6",
            "cep_router_checkpoint_last_duration_seconds{role=\"cep\",id=\"cep\"} 0.25",
            "cep_router_checkpoint_last_bytes{role=\"cep\",id=\"cep\"} 4096",
            "# TYPE cep_router_ticks_received_total counter\n",
            "cep_router_ticks_received_total{role=\"cep\",id=\"cep\",stream=\"0\"} 10\n",
            "cep_router_ticks_routed_total{role=\"cep\",id=\"cep\",worker=\"worker-1\"} 6\n",
            "cep_router_ticks_routed_total{role=\"cep\",id=\"cep\",worker=\"joined\"} 2\n",
            "cep_router_members{role=\"cep\",id=\"cep\",state=\"joining\"} 1.0\n",
            "cep_router_ticks_held{role=\"cep\",id=\"cep\"} 7.0\n",
            "cep_router_rescales_total{role=\"cep\",id=\"cep\",kind=\"join\"} 1\n",
            "# TYPE cep_router_registered gauge\n",
            "cep_router_registered{role=\"cep\",id=\"cep\",kind=\"worker\"} 2",
            "cep_router_run_ended{role=\"cep\",id=\"cep\"} 1",
            "cep_router_rules_epoch{role=\"cep\",id=\"cep\"} 1",
            "cep_rejected_total{role=\"cep\",id=\"cep\",cause=\"malformed\"} 3\n",
        ] {
            assert!(text.contains(expected), "{expected} missing from:\n{text}");
        }
    }
}
