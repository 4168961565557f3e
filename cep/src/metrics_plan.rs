//! `cep run --metrics-listen HOST:PORT`: where each local process serves its metrics, and the
//! Prometheus file_sd targets file (`prometheus-targets.json` in the results folder) that
//! lists them, so a Prometheus started with `deploy/prometheus/local.yml` scrapes the run.
//!
//! Ports are consecutive from PORT, in an order that does not depend on the number of
//! workers: router PORT, collector PORT+1, injector PORT+2, worker-i PORT+3+i. PORT 0 gives
//! every process a free port. Either way each process reports the address it bound
//! (`--metrics-announce`), and the targets file lists exactly those, so nothing can race. A
//! fixed port already taken stops the run before anything starts, with one line saying which
//! address and whose.

use anyhow::{bail, Context as _};
use cep_core::duration::parse_duration;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `cep run`'s metrics flags. `Default` is the flags' defaults (no metrics).
#[derive(clap::Args, Clone, Debug, Default, PartialEq)]
pub struct LaunchMetrics {
    /// Serve every process's Prometheus metrics, on consecutive ports from this one: router
    /// PORT, collector PORT+1, injector PORT+2, worker-i PORT+3+i (PORT 0: free ports); the
    /// results folder gets `prometheus-targets.json` for Prometheus's file_sd.
    #[arg(long, env = "CEP_METRICS_LISTEN", value_name = "HOST:PORT")]
    pub metrics_listen: Option<String>,
    /// With --metrics-listen: each process keeps serving after the run until a scrape has
    /// read its final values, at most this long.
    #[arg(long, env = "CEP_METRICS_LINGER", default_value = "0s", value_parser = parse_duration)]
    pub metrics_linger: Duration,
}

/// The file the launcher writes into the results folder.
pub const TARGETS_FILE: &str = "prometheus-targets.json";

pub struct MetricsPlan {
    host: String,
    base: u16,
    linger: Duration,
    /// Process names in port order.
    order: Vec<String>,
    announce_dir: PathBuf,
}

impl MetricsPlan {
    /// The plan for `listen` (`HOST:PORT`) and `workers` workers; announce files go to
    /// `announce_dir`.
    pub fn new(listen: &str, linger: Duration, workers: usize, announce_dir: &Path) -> anyhow::Result<MetricsPlan> {
        let Some((host, port)) = listen.rsplit_once(':') else {
            bail!("--metrics-listen `{listen}` is not HOST:PORT");
        };
        let Ok(base) = port.parse::<u16>() else {
            bail!("--metrics-listen `{listen}`: `{port}` is not a port number");
        };
        let mut order: Vec<String> = ["router", "collector", "injector"].map(String::from).to_vec();
        order.extend((0..workers).map(cep_core::partition::default_worker_id));
        if base != 0 && base as usize + order.len() - 1 > u16::MAX as usize {
            bail!(
                "--metrics-listen `{listen}`: {} processes need ports {base}..{}",
                order.len(),
                base as usize + order.len()
            );
        }
        Ok(MetricsPlan { host: host.to_string(), base, linger, order, announce_dir: announce_dir.to_path_buf() })
    }

    /// Fails with one line naming the address and the process if a fixed port is taken, before
    /// any process starts (each process's own bind stays the authority: this only spares the
    /// user a cascade of errors from the processes stopped after the first one failed).
    pub fn check_ports(&self) -> anyhow::Result<()> {
        if self.base == 0 {
            return Ok(());
        }
        for (offset, name) in self.order.iter().enumerate() {
            let address = format!("{}:{}", self.host, self.base as usize + offset);
            if let Err(error) = std::net::TcpListener::bind(address.as_str()) {
                let reason = cep_core::io_text::plain(&error);
                bail!("cannot serve metrics on {address} ({name}'s port): {reason}");
            }
        }
        Ok(())
    }

    fn announce_file(&self, name: &str) -> PathBuf {
        self.announce_dir.join(format!("{name}.metrics"))
    }

    /// The metrics of the process called `name`.
    pub fn metrics(&self, name: &str) -> cep_telemetry::MetricsArgs {
        let offset = self.order.iter().position(|known| known == name).unwrap_or(0) as u16;
        let port = if self.base == 0 { 0 } else { self.base + offset };
        cep_telemetry::MetricsArgs {
            metrics_listen: Some(format!("{}:{port}", self.host)),
            metrics_linger: self.linger,
            metrics_announce: Some(self.announce_file(name)),
        }
    }

    /// Once every process has announced its address, writes the targets file into `out`.
    pub async fn write_targets(self, out: PathBuf) -> anyhow::Result<()> {
        let addresses = loop {
            let announced: Option<Vec<String>> =
                self.order.iter().map(|name| std::fs::read_to_string(self.announce_file(name)).ok()).collect();
            if let Some(announced) = announced {
                break announced;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let groups: Vec<serde_json::Value> = self
            .order
            .iter()
            .zip(&addresses)
            .map(|(name, address)| {
                serde_json::json!({ "targets": [scrape_address(address.trim())], "labels": { "process": name } })
            })
            .collect();
        let path = out.join(TARGETS_FILE);
        let partial = out.join(format!("{TARGETS_FILE}.partial"));
        // Prometheus watches the file: it must never see half of it.
        std::fs::write(&partial, serde_json::to_string_pretty(&groups)? + "\n")
            .and_then(|()| std::fs::rename(&partial, &path))
            .with_context(|| format!("cannot write {}", path.display()))
    }
}

/// Where a local Prometheus reaches an address a process bound: a wildcard means loopback.
fn scrape_address(bound: &str) -> String {
    match bound.parse::<SocketAddr>() {
        Ok(address) if address.ip().is_unspecified() => format!("127.0.0.1:{}", address.port()),
        _ => bound.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_run_removes_an_earlier_targets_file() {
        assert!(cep_core::results::RUN_FILES.contains(&TARGETS_FILE));
    }

    #[test]
    fn ports_follow_the_documented_order() {
        let plan = MetricsPlan::new("127.0.0.1:9100", Duration::ZERO, 2, Path::new("/tmp/x")).unwrap();
        let port = |name: &str| plan.metrics(name).metrics_listen.unwrap();
        assert_eq!(port("router"), "127.0.0.1:9100");
        assert_eq!(port("collector"), "127.0.0.1:9101");
        assert_eq!(port("injector"), "127.0.0.1:9102");
        assert_eq!(port("worker-1"), "127.0.0.1:9104");
        assert_eq!(plan.metrics("worker-1").metrics_announce, Some(PathBuf::from("/tmp/x/worker-1.metrics")));
        let free = MetricsPlan::new("127.0.0.1:0", Duration::ZERO, 2, Path::new("/tmp/x")).unwrap();
        assert_eq!(free.metrics("worker-1").metrics_listen.as_deref(), Some("127.0.0.1:0"));
        assert!(MetricsPlan::new("9100", Duration::ZERO, 2, Path::new("/")).is_err());
        assert!(MetricsPlan::new("h:65534", Duration::ZERO, 2, Path::new("/")).is_err());
        assert_eq!(scrape_address("0.0.0.0:9100"), "127.0.0.1:9100");
        assert_eq!(scrape_address("127.0.0.2:9100"), "127.0.0.2:9100");
    }
}
