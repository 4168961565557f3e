//! What a role exposes, and the exposition of the whole process.
//!
//! A role keeps its counters where it always did (plain integers on its own thread) and
//! copies them into relaxed atomics per frame or batch; a [`Source`] reads those atomics when
//! Prometheus scrapes, so the per-event path pays nothing. The text is written by
//! `prometheus-client` (OpenMetrics for Prometheus, the 0.0.4 text format for anything else),
//! never by hand. Every series carries `role` and `id` labels (from [`crate::identity`]).

use crate::buckets::Buckets;
use crate::identity;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::borrow::Cow;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// A role's rejections by cause (`cep_rejected_total{cause}`): the data path's counts,
/// copied only when their total changed, so the map is cloned rarely.
#[derive(Default)]
pub struct Rejected {
    counts: Mutex<cep_core::report::CauseCounts>,
    total: std::sync::atomic::AtomicU64,
}

impl Rejected {
    /// Takes the data path's current counts (copied only if their total changed).
    pub fn observe(&self, now: &cep_core::report::CauseCounts) {
        let total: u64 = now.values().sum();
        if total != self.total.swap(total, Ordering::Relaxed) {
            *self.counts.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = now.clone();
        }
    }

    /// Writes `cep_rejected_total`, one series per cause.
    pub fn scrape(&self, out: &mut Scrape<'_>) -> fmt::Result {
        let counts = self.counts.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        out.counters(
            "cep_rejected",
            "Frames and ticks rejected, by cause.",
            "cause",
            counts.iter().map(|(cause, count)| (cause.as_str(), *count)),
        )
    }
}

/// Something that writes metrics when scraped (from the HTTP thread: read atomics or a
/// snapshot, never the role's own state).
pub trait Source: Send + Sync + 'static {
    /// Writes this source's metrics.
    fn scrape(&self, out: &mut Scrape<'_>) -> fmt::Result;
}

/// Writes metric families of the right type. Counter names are given without `_total`: the
/// encoder adds it.
pub struct Scrape<'a> {
    encoder: DescriptorEncoder<'a>,
}

impl Scrape<'_> {
    /// One counter (`name` without `_total`).
    pub fn counter(&mut self, name: &str, help: &str, value: u64) -> fmt::Result {
        let mut metric = self.encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
        metric.encode_counter::<NoLabelSet, u64, u64>(&value, None)
    }

    /// One counter per value of `label`.
    pub fn counters<'v>(
        &mut self,
        name: &str,
        help: &str,
        label: &str,
        series: impl IntoIterator<Item = (&'v str, u64)>,
    ) -> fmt::Result {
        let mut metric = self.encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
        for (value, count) in series {
            let labels = [(label, value)];
            metric.encode_family(&labels)?.encode_counter::<NoLabelSet, u64, u64>(&count, None)?;
        }
        Ok(())
    }

    /// One gauge.
    pub fn gauge(&mut self, name: &str, help: &str, value: f64) -> fmt::Result {
        self.encoder.encode_descriptor(name, help, None, MetricType::Gauge)?.encode_gauge(&value)
    }

    /// One gauge per value of `label`.
    pub fn gauges<'v>(
        &mut self,
        name: &str,
        help: &str,
        label: &str,
        series: impl IntoIterator<Item = (&'v str, f64)>,
    ) -> fmt::Result {
        let mut metric = self.encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
        for (value, gauge) in series {
            let labels = [(label, value)];
            metric.encode_family(&labels)?.encode_gauge(&gauge)?;
        }
        Ok(())
    }

    /// One histogram per value of `label`.
    pub fn histograms<'v>(
        &mut self,
        name: &str,
        help: &str,
        label: &str,
        series: impl IntoIterator<Item = (&'v str, &'v Buckets)>,
    ) -> fmt::Result {
        let mut metric = self.encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
        for (value, buckets) in series {
            let labels = [(label, value)];
            metric.encode_family(&labels)?.encode_histogram::<NoLabelSet>(
                buckets.sum,
                buckets.count,
                &buckets.buckets,
                None,
            )?;
        }
        Ok(())
    }
}

/// The process's sources, by key: a role registers its own once per run (a later run in the
/// same process replaces it). Kept after the run ends so the final values can still be read.
static SOURCES: Mutex<Vec<(&'static str, Arc<dyn Source>)>> = Mutex::new(Vec::new());

/// Adds (or replaces) the source named `key`.
pub fn register(key: &'static str, source: Arc<dyn Source>) {
    let mut sources = SOURCES.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    sources.retain(|(existing, _)| *existing != key);
    sources.push((key, source));
}

static SERVED: AtomicBool = AtomicBool::new(false);

/// Whether this process serves its metrics: a role may skip preparing what nobody reads.
pub fn is_served() -> bool {
    SERVED.load(Ordering::Relaxed)
}

pub(crate) fn set_served() {
    SERVED.store(true, Ordering::Relaxed);
}

/// Every registered source and the build info, as OpenMetrics text (`openmetrics`) or the
/// Prometheus 0.0.4 text format.
pub fn encode(openmetrics: bool) -> Result<String, fmt::Error> {
    let who = identity::current();
    let labels: [(Cow<'static, str>, Cow<'static, str>); 2] =
        [("role".into(), who.role.to_string().into()), ("id".into(), who.id.to_string().into())];
    let mut registry = Registry::with_labels(labels.into_iter());
    registry.register_collector(Box::new(Shared(Arc::new(BuildInfo))));
    for (_, source) in SOURCES.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).iter() {
        registry.register_collector(Box::new(Shared(source.clone())));
    }
    let mut text = String::new();
    if openmetrics {
        prometheus_client::encoding::text::encode(&mut text, &registry)?;
    } else {
        prometheus_client::encoding::prometheus_text::encode(&mut text, &registry)?;
    }
    Ok(text)
}

/// `cep_build_info{version} 1`: which build each process runs.
struct BuildInfo;

impl Source for BuildInfo {
    fn scrape(&self, out: &mut Scrape<'_>) -> fmt::Result {
        out.gauges(
            "cep_build_info",
            "The build this process runs (always 1).",
            "version",
            [(env!("CARGO_PKG_VERSION"), 1.0)],
        )
    }
}

/// A source as `prometheus-client` collects it.
struct Shared(Arc<dyn Source>);

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Source")
    }
}

impl Collector for Shared {
    fn encode(&self, encoder: DescriptorEncoder<'_>) -> fmt::Result {
        self.0.scrape(&mut Scrape { encoder })
    }
}
