//! The collector's metrics (docs/METRICS.md): outputs received per rule, latency per hop as
//! Prometheus histograms, reports received, clock offsets, rejections by cause. Copied once a
//! second from what the collector keeps anyway, and only when something serves them: the
//! latency buckets are read off the run's own HdrHistograms (no value is recorded twice).

use crate::latency::HopHistograms;
use crate::rules::RuleTable;
use cep_core::report::CauseCounts;
use cep_core::results::{ClockOffset, OutputCounts};
use cep_telemetry::buckets::{Buckets, LATENCY_SECONDS};
use cep_telemetry::metrics::Rejected;
use cep_telemetry::{Scrape, Source};
use std::fmt;
use std::sync::{Arc, Mutex};

/// The hops, as the `hop` label names them (the summary's names).
const HOPS: [&str; 6] =
    ["end_to_end", "injector_to_router", "router", "router_to_worker", "engine", "worker_to_collector"];

/// What the collector knows at one moment.
pub struct Snapshot<'a> {
    /// The rules announced so far, with the outputs received per rule.
    pub outputs: &'a RuleTable,
    /// Outputs of a tick whose outputs had already arrived.
    pub output_duplicates: u64,
    /// Outputs of ticks intended during the warm-up (not in the histograms).
    pub warmup_outputs: u64,
    /// Outputs of windows the end of input closed (no latency).
    pub final_outputs: u64,
    /// The run's latency histograms so far.
    pub hops: &'a HopHistograms,
    /// Workers in the run.
    pub workers: usize,
    /// Workers whose end-of-run report has arrived.
    pub workers_reported: usize,
    /// Whether the router's end-of-run report has arrived.
    pub router_reported: bool,
    /// The clock offsets the nodes reported so far.
    pub clock_offsets: &'a [ClockOffset],
    /// Frames and outputs the collector rejected, by cause.
    pub rejected: &'a CauseCounts,
}

/// The collector's metrics source: the last [`Snapshot`], copied for scrapes to read.
#[derive(Default)]
pub struct CollectorMetrics {
    latest: Mutex<Latest>,
    rejected: Rejected,
}

/// The last snapshot, as scrapes read it.
#[derive(Default)]
struct Latest {
    outputs: OutputCounts,
    output_duplicates: u64,
    warmup_outputs: u64,
    final_outputs: u64,
    latency: Vec<Buckets>,
    workers: usize,
    workers_reported: usize,
    router_reported: bool,
    complete: Option<bool>,
    clock_offsets: Vec<ClockOffset>,
}

impl CollectorMetrics {
    /// This process's collector metrics, registered for scraping.
    pub fn register() -> Arc<CollectorMetrics> {
        let metrics = Arc::new(CollectorMetrics::default());
        cep_telemetry::metrics::register("collector", metrics.clone());
        metrics
    }

    /// Takes a snapshot, unless nothing serves the metrics (converting the histograms has a
    /// cost, small but not worth paying for nobody).
    pub fn observe(&self, now: Snapshot<'_>) {
        if !cep_telemetry::metrics::is_served() {
            return;
        }
        let h = now.hops;
        let latency =
            [&h.end_to_end, &h.injector_to_router, &h.router, &h.router_to_worker, &h.engine, &h.worker_to_collector]
                .map(|histogram| Buckets::from_hdr(histogram, LATENCY_SECONDS, 1e-9))
                .to_vec();
        let latest = Latest {
            outputs: now.outputs.counts(),
            output_duplicates: now.output_duplicates,
            warmup_outputs: now.warmup_outputs,
            final_outputs: now.final_outputs,
            latency,
            workers: now.workers,
            workers_reported: now.workers_reported,
            router_reported: now.router_reported,
            complete: None,
            clock_offsets: now.clock_offsets.to_vec(),
        };
        self.rejected.observe(now.rejected);
        *self.latest.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = latest;
    }

    /// The summary's verdict, once it is written.
    pub fn complete(&self, complete: bool) {
        self.latest.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).complete = Some(complete);
    }
}

impl Source for CollectorMetrics {
    fn scrape(&self, out: &mut Scrape<'_>) -> fmt::Result {
        let latest = self.latest.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        out.counters(
            "cep_collector_outputs_received",
            "Outputs received, per rule (query name), warm-up and duplicates included.",
            "rule",
            latest.outputs.iter().map(|(rule, count)| (rule.as_str(), *count)),
        )?;
        out.counter(
            "cep_collector_output_duplicates",
            "Outputs received more than once (their tick's outputs had already arrived).",
            latest.output_duplicates,
        )?;
        out.counter(
            "cep_collector_warmup_outputs",
            "Outputs of ticks intended during the warm-up: counted, kept out of the latency histograms.",
            latest.warmup_outputs,
        )?;
        out.counter(
            "cep_collector_final_outputs",
            "Outputs of tumbling windows the end of input closed (no tick caused them, no latency).",
            latest.final_outputs,
        )?;
        out.histograms(
            "cep_collector_latency_seconds",
            "Latency per hop and end to end, from each tick's intended send time; outputs after the warm-up.",
            "hop",
            HOPS.iter().copied().zip(latest.latency.iter()),
        )?;
        out.gauge("cep_collector_workers", "Workers in the run.", latest.workers as f64)?;
        out.gauge(
            "cep_collector_workers_reported",
            "Workers whose end-of-run report has arrived.",
            latest.workers_reported as f64,
        )?;
        out.gauge("cep_collector_router_reported", "1 once the router's end-of-run report has arrived.", {
            latest.router_reported as u8 as f64
        })?;
        if let Some(complete) = latest.complete {
            out.gauge(
                "cep_collector_run_complete",
                "Once the summary is written: 1 if every report arrived (the run is accounted for), else 0.",
                complete as u8 as f64,
            )?;
        }
        let offsets = latest.clock_offsets.iter();
        out.gauges(
            "cep_collector_clock_offset_seconds",
            "Each node's clock offset to the collector's, measured at the start (added to its stamps).",
            "node",
            offsets.clone().map(|clock| (clock.node.as_str(), clock.offset_us / 1e6)),
        )?;
        out.gauges(
            "cep_collector_clock_uncertainty_seconds",
            "The uncertainty of each node's clock offset (half the best round trip).",
            "node",
            offsets.map(|clock| (clock.node.as_str(), clock.uncertainty_us / 1e6)),
        )?;
        self.rejected.scrape(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cep_core::tick::Stamps;

    /// Served (as the CLI would): the snapshot's histograms are the hop histograms' counts.
    #[test]
    fn latency_histograms_count_what_the_hop_histograms_hold() {
        let _server = cep_telemetry::MetricsServer::start("127.0.0.1:0").unwrap();
        let metrics = CollectorMetrics::register();
        let mut hops = HopHistograms::default();
        let stamps =
            Stamps { t_inject: 0, t_router_in: 1_000, t_router_out: 2_000, t_worker_in: 50_000, t_engine_out: 60_000 };
        for _ in 0..7 {
            hops.record(&stamps, 400_000);
        }
        hops.summary();
        metrics.observe(Snapshot {
            outputs: &RuleTable::default(),
            output_duplicates: 0,
            warmup_outputs: 2,
            final_outputs: 3,
            hops: &hops,
            workers: 2,
            workers_reported: 1,
            router_reported: false,
            clock_offsets: &[],
            rejected: &CauseCounts::new(),
        });
        let text = cep_telemetry::metrics::encode(false).unwrap();
        for expected in [
            "# TYPE cep_collector_latency_seconds histogram\n",
            "cep_collector_latency_seconds_count{role=\"cep\",id=\"cep\",hop=\"end_to_end\"} 7\n",
            "cep_collector_latency_seconds_bucket{role=\"cep\",id=\"cep\",hop=\"end_to_end\",le=\"0.0003\"} 0\n",
            "cep_collector_latency_seconds_bucket{role=\"cep\",id=\"cep\",hop=\"end_to_end\",le=\"0.0005\"} 7\n",
            "cep_collector_latency_seconds_count{role=\"cep\",id=\"cep\",hop=\"router\"} 7\n",
            "cep_collector_warmup_outputs_total{role=\"cep\",id=\"cep\"} 2\n",
            "cep_collector_final_outputs_total{role=\"cep\",id=\"cep\"} 3\n",
            "cep_collector_workers_reported{role=\"cep\",id=\"cep\"} 1",
        ] {
            assert!(text.contains(expected), "{expected} missing from:\n{text}");
        }
        assert!(!text.contains("cep_collector_run_complete{"), "not before the summary");
        metrics.complete(true);
        assert!(cep_telemetry::metrics::encode(false)
            .unwrap()
            .contains("cep_collector_run_complete{role=\"cep\",id=\"cep\"} 1"));
    }
}
