//! The injector's metrics (docs/METRICS.md): ticks sent per stream, and each paced stream's
//! backlog (ticks already due by its schedule but not sent yet: the source's own queue).
//! Each stream's thread stores its count after every batch; the backlog is worked out when
//! scraped, from the schedule.

use crate::pacing::Schedule;
use cep_core::clock::now_ns;
use cep_telemetry::{Scrape, Source};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// What the injector exposes: its target rate and each stream's counters.
#[derive(Default)]
pub struct InjectorMetrics {
    /// Ticks per second over all streams (0: as fast as possible).
    rate: f64,
    streams: Mutex<Vec<Arc<StreamMetrics>>>,
}

/// One stream's counters, owned by its sending thread.
pub struct StreamMetrics {
    stream: String,
    /// The stream's fixed-rate schedule; `None` when nothing is due by a rate (unpaced, or a
    /// replay paced by its own timestamps).
    schedule: Option<Schedule>,
    /// Ticks the stream sends at most.
    limit: u64,
    sent: AtomicU64,
    ended: AtomicBool,
}

impl InjectorMetrics {
    /// This process's injector metrics, registered for scraping.
    pub fn register(rate: f64) -> Arc<InjectorMetrics> {
        let metrics = Arc::new(InjectorMetrics { rate, streams: Mutex::default() });
        cep_telemetry::metrics::register("injector", metrics.clone());
        metrics
    }

    /// The counters of a stream about to start.
    pub fn stream(&self, stream: u32, schedule: Option<Schedule>, limit: u64) -> Arc<StreamMetrics> {
        let metrics = Arc::new(StreamMetrics {
            stream: stream.to_string(),
            schedule,
            limit,
            sent: AtomicU64::new(0),
            ended: AtomicBool::new(false),
        });
        self.streams.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(metrics.clone());
        metrics
    }
}

impl StreamMetrics {
    /// After each batch: ticks sent so far.
    #[inline]
    pub fn sent(&self, sent: u64) {
        self.sent.store(sent, Relaxed);
    }

    /// After the end-of-stream marker, with the stream's count.
    pub fn ended(&self, sent: u64) {
        self.sent.store(sent, Relaxed);
        self.ended.store(true, Relaxed);
    }

    /// Ticks due by now and not yet sent; `None` without a fixed-rate schedule.
    fn backlog(&self, now_ns: u64) -> Option<u64> {
        let schedule = self.schedule.filter(Schedule::is_paced)?;
        let sent = self.sent.load(Relaxed);
        if self.ended.load(Relaxed) {
            return Some(0);
        }
        Some(schedule.due_by(now_ns).min(self.limit).saturating_sub(sent))
    }
}

impl Source for InjectorMetrics {
    fn scrape(&self, out: &mut Scrape<'_>) -> fmt::Result {
        let streams = self.streams.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        out.counters(
            "cep_injector_ticks_sent",
            "Ticks sent, per stream.",
            "stream",
            streams.iter().map(|s| (s.stream.as_str(), s.sent.load(Relaxed))),
        )?;
        let now = now_ns();
        out.gauges(
            "cep_injector_backlog_ticks",
            "Ticks already due by the stream's schedule but not sent yet (paced streams).",
            "stream",
            streams.iter().filter_map(|s| Some((s.stream.as_str(), s.backlog(now)? as f64))),
        )?;
        out.gauge(
            "cep_injector_streams_ended",
            "Streams that have sent their end-of-stream marker.",
            streams.iter().filter(|s| s.ended.load(Relaxed)).count() as f64,
        )?;
        out.gauge("cep_injector_target_rate", "Ticks per second asked for, all streams (0: unpaced).", self.rate)
    }
}
