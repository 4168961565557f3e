//! `cep bench transport`: raw ZeroMQ PUSH/PULL, the ceiling every pipeline figure is compared
//! to. tcp and ipc run between two processes (the sender is `cep bench transport-peer`),
//! inproc between two threads of one process (the only way it exists). Messages are tick
//! batches encoded as the pipeline encodes them, 1 to 2,048 ticks (~40 B to ~70 KiB) each.
//! Each point runs twice: unpaced for throughput, then paced for latency (from the send stamp
//! in each message; one host's clock).

use crate::html::chart::{line_chart, Axis, Series, Unit};
use crate::html::report::{table, Report};
use anyhow::{bail, Context as _};
use cep_core::clock::now_ns;
use cep_core::duration::parse_duration;
use cep_core::frame::{Body, Frame};
use cep_core::identity::Role;
use cep_core::report::EndOfStream;
use cep_core::results::LatencySummary;
use cep_core::wire::{FrameKind, TickBatchWriter};
use cep_transport::{Context, Message, Pull, Push, Server, SocketOptions};
use clap::Args;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Tcp,
    Ipc,
    Inproc,
    /// With --pipeline only: the cluster over tcp with CURVE on every socket (`cep run --secure`).
    Curve,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Tcp => "tcp",
            Kind::Ipc => "ipc",
            Kind::Inproc => "inproc",
            Kind::Curve => "curve",
        }
    }
}

#[derive(Args, Debug)]
pub struct TransportArgs {
    /// Instead of raw ZeroMQ, the whole product over each transport beside the engine alone,
    /// on the same ticks: one table of throughput and latency with the ratio to the engine.
    #[arg(long)]
    pub pipeline: bool,
    /// Transports to measure [default: tcp,ipc,inproc; with --pipeline inproc,ipc,tcp]; with
    /// --pipeline also `curve`: tcp with CURVE on every socket (its cost: the ratio to tcp).
    #[arg(long, value_delimiter = ',')]
    pub transports: Option<Vec<Kind>>,
    /// Ticks per message, one point each.
    #[arg(long, value_delimiter = ',', default_value = "1,16,64,256,1024,2048", conflicts_with = "pipeline")]
    pub events_per_message: Vec<usize>,
    /// How long each throughput measurement runs (the latency one runs half as long).
    #[arg(long, default_value = "1s", value_parser = parse_duration, conflicts_with = "pipeline")]
    pub duration: Duration,
    /// The rate of the latency measurement: messages per second [default: 10000], or with
    /// --pipeline ticks per second into the cluster [default: 200000].
    #[arg(long)]
    pub latency_rate: Option<f64>,
    #[command(flatten)]
    pub pipeline_args: super::pipeline::PipelineFlags,
    /// Where to write results.json, summary.txt and report.html [default:
    /// bench-results/transport; with --pipeline bench-results/pipeline].
    #[arg(long, env = "CEP_OUT")]
    pub out: Option<PathBuf>,
}

/// The raw measurement's defaults.
const RAW_TRANSPORTS: [Kind; 3] = [Kind::Tcp, Kind::Ipc, Kind::Inproc];
const RAW_LATENCY_RATE: f64 = 10_000.0;
const RAW_OUT: &str = "bench-results/transport";

/// The sending side, in its own process.
#[derive(Args, Debug, PartialEq)]
pub struct PeerArgs {
    #[arg(long)]
    pub endpoint: String,
    #[arg(long)]
    pub per_message: usize,
    #[arg(long, value_parser = parse_duration)]
    pub duration: Duration,
    /// Messages per second; 0 sends as fast as possible.
    #[arg(long, default_value_t = 0.0)]
    pub rate: f64,
}

impl PeerArgs {
    /// The flags that give these back (`cep bench transport-peer` followed by them).
    pub fn to_args(&self) -> Vec<String> {
        cep_telemetry::args::Flags::new()
            .value("endpoint", &self.endpoint)
            .value("per-message", self.per_message)
            .duration("duration", self.duration)
            .value("rate", self.rate)
            .into_args()
    }
}

/// One point of the matrix.
#[derive(Serialize, Debug, Clone)]
pub struct TransportPoint {
    pub transport: Kind,
    pub events_per_message: usize,
    pub message_bytes: usize,
    pub messages_per_s: f64,
    pub events_per_s: f64,
    pub megabytes_per_s: f64,
    pub latency_us: LatencySummary,
}

fn frame(per_message: usize) -> TickBatchWriter {
    let mut batch = TickBatchWriter::new(0);
    for seq in 0..per_message as u64 {
        let t = 1_700_000_000_000_000_000 + seq;
        batch.push(b"S0001", 100.0 + seq as f64 * 0.01, t, t, 0, seq, 0);
    }
    batch
}

/// Sends tick batches to `endpoint` for `duration` (paced at `rate` messages/s, 0 = unpaced),
/// each sealed with its send time, then an end-of-stream marker with the count.
fn send(context: &Context, args: &PeerArgs) -> anyhow::Result<()> {
    let push = Push::connect(
        context,
        &args.endpoint,
        Server::Router,
        &SocketOptions { linger: Duration::from_secs(3600), ..SocketOptions::default() },
    )?;
    let never = AtomicBool::new(false);
    let mut batch = frame(args.per_message);
    let start = Instant::now();
    let mut sent: u64 = 0;
    while start.elapsed() < args.duration {
        if args.rate > 0.0 {
            let due = start + Duration::from_secs_f64(sent as f64 / args.rate);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
        push.send(batch.seal(now_ns()), &never)?;
        sent += 1;
    }
    push.send(&EndOfStream { stream: 0, sent, routed: 0, cut: None }.encode(0), &never)?;
    Ok(())
}

pub fn peer(args: PeerArgs) -> anyhow::Result<()> {
    send(&Context::new(), &args)
}

/// Receives until the end marker: (messages, seconds from first to last, latency).
fn receive(pull: &Pull) -> anyhow::Result<(u64, f64, LatencySummary)> {
    let mut histogram = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3)?;
    let mut message = Message::new();
    let (mut first, mut last, mut count) = (None, Instant::now(), 0u64);
    loop {
        if !pull.recv(&mut message, Duration::from_secs(30))? {
            bail!("the sender went silent after {count} messages");
        }
        let t = now_ns();
        let frame = Frame::read(&message, usize::MAX)?;
        if frame.kind() == FrameKind::EndOfStream {
            let eos: EndOfStream = frame.body()?;
            if eos.sent != count {
                bail!("{} messages sent, {count} received", eos.sent);
            }
            break;
        }
        // The send stamp is the first field after the header (a fixed 9-byte u64).
        let rest = &frame.bytes()[frame.header().body_at()..];
        let t_sent = u64::from_be_bytes(rest[1..9].try_into()?);
        histogram.saturating_record(t.saturating_sub(t_sent).max(1));
        first.get_or_insert_with(Instant::now);
        last = Instant::now();
        count += 1;
    }
    let seconds = first.map_or(0.0, |f| last.duration_since(f).as_secs_f64());
    Ok((count, seconds, cep_collector::latency::summarize(&histogram)))
}

fn measure(
    kind: Kind,
    per_message: usize,
    duration: Duration,
    rate: f64,
    point: usize,
) -> anyhow::Result<(u64, f64, LatencySummary)> {
    let context = Context::new();
    let bind = match kind {
        Kind::Tcp => "tcp://127.0.0.1:*".to_string(),
        Kind::Ipc => format!(
            "ipc://{}",
            std::env::temp_dir().join(format!("cep-bench-{}-{point}", std::process::id())).display()
        ),
        Kind::Inproc => format!("inproc://bench-{point}"),
        Kind::Curve => bail!("curve is measured with --pipeline only"),
    };
    // No receive limit: ZeroMQ 4.3 can drop what a sender had sent if it disconnects while the
    // receiver's queue is full, and the peer process exits right after its last message.
    let pull =
        Pull::bind(&context, &bind, &SocketOptions { high_water_mark: 0, ..SocketOptions::default() }, &Role::ALL)?;
    let peer = PeerArgs { endpoint: pull.endpoint().to_string(), per_message, duration, rate };
    let what = format!(
        "{} with {per_message} ticks per message at {}",
        kind.name(),
        if rate > 0.0 { format!("{rate} msg/s") } else { "full speed".into() }
    );
    let result = if kind == Kind::Inproc {
        let sender_context = context.clone();
        let sender = std::thread::spawn(move || send(&sender_context, &peer));
        let received = receive(&pull);
        sender.join().map_err(|_| anyhow::anyhow!("sender thread panicked"))??;
        received
    } else {
        let program = std::env::current_exe().context("cannot find the cep executable")?;
        let mut child = std::process::Command::new(program)
            .args(["bench", "transport-peer"])
            .args(peer.to_args())
            .spawn()
            .context("cannot start the sending process")?;
        let received = receive(&pull);
        let status = child.wait()?;
        if !status.success() {
            bail!("the sending process failed: {status}");
        }
        received
    };
    if kind == Kind::Ipc {
        let _ = std::fs::remove_file(bind.trim_start_matches("ipc://"));
    }
    result.with_context(|| what)
}

pub fn run(args: TransportArgs) -> anyhow::Result<()> {
    if args.pipeline {
        return super::pipeline::run(super::pipeline::PipelineArgs::new(
            args.transports,
            args.latency_rate,
            args.pipeline_args,
            args.out,
        ));
    }
    let transports = args.transports.unwrap_or_else(|| RAW_TRANSPORTS.to_vec());
    if transports.contains(&Kind::Curve) {
        return Err(crate::cli::Usage::of(&anyhow::anyhow!(
            "--transports curve is measured with --pipeline (the whole cluster over tcp with CURVE on every socket)"
        )));
    }
    let latency_rate = args.latency_rate.unwrap_or(RAW_LATENCY_RATE);
    let out = args.out.unwrap_or_else(|| PathBuf::from(RAW_OUT));
    std::fs::create_dir_all(&out)?;
    let total = (transports.len() * args.events_per_message.len()) as u64;
    let bar = super::progress(total, "transport");
    let stop = super::stop_flag();
    let mut points = Vec::new();
    'all: for &kind in &transports {
        for &per_message in &args.events_per_message {
            if stop.load(Ordering::Relaxed) {
                break 'all;
            }
            bar.set_message(format!("{} x{per_message}", kind.name()));
            let index = points.len();
            let (messages, seconds, _) = measure(kind, per_message, args.duration, 0.0, 2 * index)?;
            let (_, _, latency) = measure(kind, per_message, args.duration / 2, latency_rate, 2 * index + 1)?;
            let message_bytes = frame(per_message).seal(0).len();
            let messages_per_s = messages.saturating_sub(1) as f64 / seconds.max(1e-9);
            points.push(TransportPoint {
                transport: kind,
                events_per_message: per_message,
                message_bytes,
                messages_per_s,
                events_per_s: messages_per_s * per_message as f64,
                megabytes_per_s: messages_per_s * message_bytes as f64 / 1e6,
                latency_us: latency,
            });
            bar.set_message(format!("last: {:.2} M events/s", messages_per_s * per_message as f64 / 1e6));
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    write(&out, &points, latency_rate)?;
    cep_telemetry::out!("{}", summary_text(&points));
    Ok(())
}

/// The YCSB-style lines, printed and saved as summary.txt.
fn summary_text(points: &[TransportPoint]) -> String {
    points
        .iter()
        .map(|p| {
            format!(
                "[TRANSPORT {} x{}], Throughput(msgs/sec), {:.0}, Throughput(events/sec), {:.0}, MB/sec, {:.1}, 99thPercentileLatency(us), {:.1}\n",
                p.transport.name(),
                p.events_per_message,
                p.messages_per_s,
                p.events_per_s,
                p.megabytes_per_s,
                p.latency_us.p99
            )
        })
        .collect()
}

/// Writes results.json, transport.csv and report.html.
pub fn write(out: &std::path::Path, points: &[TransportPoint], latency_rate: f64) -> anyhow::Result<()> {
    super::write_json(out, "results.json", &points)?;
    let mut csv = String::from("transport,events_per_message,message_bytes,messages_per_s,events_per_s,megabytes_per_s,latency_p50_us,latency_p99_us,latency_p999_us,latency_max_us\n");
    for p in points {
        let l = &p.latency_us;
        csv += &format!(
            "{},{},{},{:.1},{:.1},{:.2},{:.2},{:.2},{:.2},{:.2}\n",
            p.transport.name(),
            p.events_per_message,
            p.message_bytes,
            p.messages_per_s,
            p.events_per_s,
            p.megabytes_per_s,
            l.p50,
            l.p99,
            l.p999,
            l.max
        );
    }
    std::fs::write(out.join("transport.csv"), csv)?;
    std::fs::write(out.join("summary.txt"), summary_text(points))?;
    let series = |value: &dyn Fn(&TransportPoint) -> f64| -> Vec<Series> {
        [Kind::Tcp, Kind::Ipc, Kind::Inproc]
            .iter()
            .map(|kind| Series {
                name: kind.name().to_string(),
                points: points
                    .iter()
                    .filter(|p| p.transport == *kind)
                    .map(|p| (p.events_per_message as f64, value(p)))
                    .collect(),
            })
            .filter(|s| !s.points.is_empty())
            .collect()
    };
    let rows: Vec<Vec<String>> = points
        .iter()
        .map(|p| {
            vec![
                p.transport.name().to_string(),
                p.events_per_message.to_string(),
                p.message_bytes.to_string(),
                format!("{:.0}", p.messages_per_s),
                format!("{:.2} M", p.events_per_s / 1e6),
                format!("{:.1}", p.megabytes_per_s),
                format!("{:.1}", p.latency_us.p50),
                format!("{:.1}", p.latency_us.p99),
                format!("{:.1}", p.latency_us.max),
            ]
        })
        .collect();
    let per_message = Axis::log("ticks per message", Unit::Number);
    let mut report = Report::new("Raw ZeroMQ PUSH/PULL");
    report
        .note("The ceiling every pipeline figure is compared to: tcp and ipc between two processes, inproc between two threads of one process. Messages are tick batches encoded as the pipeline encodes them. Each point runs twice: unpaced for throughput, then paced for latency.")
        .chart(
            "Events per second",
            "Ticks received per second with an unpaced sender, by the number of ticks per message (log axes): what batching buys.",
            line_chart("throughput", &per_message, &Axis::log("ticks per second", Unit::Number), &series(&|p| p.events_per_s)),
        )
        .chart(
            "Messages per second",
            "The same runs counted in messages received per second (log axes): the per-message cost that batching spreads.",
            line_chart("message rate", &per_message, &Axis::log("messages per second", Unit::Number), &series(&|p| p.messages_per_s)),
        )
        .chart(
            "MB per second",
            "The same runs in megabytes of encoded frames per second (linear from zero).",
            line_chart("bandwidth", &per_message, &Axis::linear("MB per second", Unit::Number), &series(&|p| p.megabytes_per_s)),
        )
        .chart(
            "Latency p99",
            &format!("p99 one-way latency with the sender paced at {latency_rate:.0} messages/s, from the send stamp in each message to its receipt (one host's clock), log axes."),
            line_chart("latency p99", &per_message, &Axis::log("one-way latency, p99", Unit::Micros), &series(&|p| p.latency_us.p99)),
        )
        .section(
            "Figures",
            table(&["transport", "ticks/msg", "bytes/msg", "msgs/s", "ticks/s", "MB/s", "p50 us", "p99 us", "max us"], &rows),
        );
    report.write(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_args_parse_back() {
        let peer = PeerArgs {
            endpoint: "tcp://127.0.0.1:40000".into(),
            per_message: 1024,
            duration: Duration::from_millis(500),
            rate: 10_000.0,
        };
        assert_eq!(cep_telemetry::args::parse_flags::<PeerArgs>(&peer.to_args()).unwrap(), peer);
    }
}
