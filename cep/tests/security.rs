//! A secure cluster (every role given `--key` and `--keys`: CURVE on every socket) attacked
//! from the same network, as issue 14's attacker did: processes without an admitted key are
//! refused and counted, a key of one role cannot do another's work, frames forged with an
//! admitted key are rejected and counted, and the real stream's accounting stays exact. The
//! test plays the real injector itself, so it decides when each attack lands.

use cep::keys::ClusterKeys;
use cep_collector::CollectorConfig;
use cep_core::control::{Deploy, Ready, Register};
use cep_core::delivery::DeliveryLog;
use cep_core::frame::{Body, Frame};
use cep_core::identity::{Role, ROUTER_ID};
use cep_core::report::{EndOfStream, WorkerReport};
use cep_core::rescale::{ClusterStatus, StatusRequest};
use cep_core::wire::{FrameKind, TickBatchWriter};
use cep_router::RouterConfig;
use cep_transport::control::{end_of_run, register, request, EndOfRun};
use cep_transport::security::{write_public, KeyPair, SecurityArgs};
use cep_transport::{Context, Push, Server, SocketOptions};
use cep_worker::WorkerConfig;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;
mod common;

const TICKS: u64 = 2_000;
const FORGED_TICKS: u64 = 100;

/// Ticks `from..to` of `stream`, sent as `sender`.
fn ticks(sender: u32, stream: u32, from: u64, to: u64) -> Vec<u8> {
    let mut batch = TickBatchWriter::new(sender);
    for seq in from..to {
        let symbol = format!("S{:04}", seq % 50);
        batch.push(symbol.as_bytes(), 100.0 + (seq % 7) as f64, 1_000_000 + seq, 1_000_000 + seq, stream, seq, 0);
    }
    batch.seal(0).to_vec()
}

/// A key pair `name` in `dir`, listed in the public keys under `role` (when given).
fn extra_key(keys: &ClusterKeys, name: &str, role: Option<&str>) -> SecurityArgs {
    let pair = KeyPair::generate().unwrap();
    let path = keys.dir.join(format!("{name}.key"));
    pair.write(&path).unwrap();
    if let Some(role) = role {
        write_public(pair.public(), &keys.public.join(role).join(format!("{name}.pub"))).unwrap();
    }
    SecurityArgs { key: Some(path), keys: Some(keys.public.clone()), insecure: false }
}

fn registration(role: Role, id: &str, endpoint: &str, streams: u32) -> Register {
    Register {
        role,
        id: id.into(),
        endpoint: endpoint.into(),
        streams,
        warmup_ns: 0,
        clock_endpoint: String::new(),
        resuming: 0,
    }
}

/// Registers in a thread of its own (the answer comes once the cluster is complete).
fn register_in_thread(context: &Context, control: &str, register_as: Register) -> std::thread::JoinHandle<Ready> {
    let (context, control) = (context.clone(), control.to_string());
    std::thread::spawn(move || {
        register(&context, &control, &register_as, Duration::from_secs(30), &AtomicBool::new(false)).unwrap()
    })
}

/// The answer's frame kind and, for a refusal, its reason.
fn answer_of(answer: &[u8]) -> (FrameKind, String) {
    let frame = Frame::read(answer, usize::MAX).unwrap();
    let reason = match frame.kind() {
        FrameKind::Refused => frame.body::<cep_core::control::Refused>().unwrap().reason,
        _ => String::new(),
    };
    (frame.kind(), reason)
}

fn send_once(context: &Context, endpoint: &str, server: Server<'_>, frames: &[Vec<u8>]) {
    let options = SocketOptions { failure_timeout: None, linger: Duration::from_secs(2), ..SocketOptions::default() };
    let push = Push::connect(context, endpoint, server, &options).unwrap();
    for frame in frames {
        push.send(frame, &AtomicBool::new(false)).unwrap();
    }
}

/// Waits until the roles of this process have counted at least so many rejections of each
/// cause (read off their metrics, which a metrics server makes them publish). The metrics are
/// the process's: each test runs in a process of its own (`cargo nextest`, the README's test
/// command).
fn wait_for_rejections(expected: &[(&str, u64)]) {
    static SERVER: std::sync::OnceLock<cep_telemetry::server::MetricsServer> = std::sync::OnceLock::new();
    SERVER.get_or_init(|| cep_telemetry::server::MetricsServer::start("127.0.0.1:0").unwrap());
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let text = cep_telemetry::metrics::encode(false).unwrap();
        let count = |cause: &str| -> u64 {
            let label = format!("cause=\"{cause}\"");
            text.lines()
                .filter(|line| line.starts_with("cep_rejected_total{") && line.contains(&label))
                .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
                .sum::<f64>() as u64
        };
        if expected.iter().all(|(cause, at_least)| count(cause) >= *at_least) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "rejections {expected:?} not all counted:\n{text}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

struct Roles {
    router: std::thread::JoinHandle<Result<cep_core::report::RouterReport, cep_router::RouterError>>,
    worker: std::thread::JoinHandle<Result<WorkerReport, cep_worker::WorkerError>>,
    collector: std::thread::JoinHandle<Result<cep_core::results::Summary, cep_collector::CollectorError>>,
    data: String,
    control: String,
}

/// Worker `id` with its own key, reaching the router at `control`.
fn worker_config(keys: &ClusterKeys, control: &str, id: &str) -> WorkerConfig {
    WorkerConfig {
        router: control.to_string(),
        id: Some(id.into()),
        listen: "tcp://127.0.0.1:*".into(),
        advertise: "127.0.0.1".into(),
        security: keys.security(id),
        ..WorkerConfig::default()
    }
}

/// A secure router (one worker, `streams` streams), worker and collector, each in a context of
/// its own as separate processes would be.
fn start_secure_cluster(keys: &ClusterKeys, scratch: &Path, out: PathBuf, streams: u32) -> Roles {
    let shutdown = Arc::new(AtomicBool::new(false));
    let announce = scratch.join("router.endpoints");
    let router = RouterConfig {
        listen: "tcp://127.0.0.1:*".into(),
        control: "tcp://127.0.0.1:*".into(),
        workers: 1,
        streams,
        announce: Some(announce.clone()),
        security: keys.security("router"),
        ..RouterConfig::default()
    };
    let router = {
        let shutdown = shutdown.clone();
        std::thread::spawn(move || cep_router::run(router, shutdown))
    };
    let (data, control) = common::announced(&announce);
    let worker = worker_config(keys, &control, "worker-0");
    let worker = {
        let shutdown = shutdown.clone();
        std::thread::spawn(move || cep_worker::run(worker, shutdown))
    };
    let collector = CollectorConfig {
        listen: "tcp://127.0.0.1:*".into(),
        clock_listen: "tcp://127.0.0.1:*".into(),
        router: control.clone(),
        advertise: "127.0.0.1".into(),
        out,
        summary_every: Duration::ZERO,
        security: keys.security("collector"),
        ..CollectorConfig::default()
    };
    let collector = std::thread::spawn(move || cep_collector::run(collector, shutdown));
    Roles { router, worker, collector, data, control }
}

#[test]
fn strangers_and_other_roles_keys_are_refused_and_counted_and_the_real_stream_stays_exact() {
    let scratch = tempfile::tempdir().unwrap();
    let keys = ClusterKeys::create(&scratch.path().join("keys"), &["worker-0".into()]).unwrap();
    // An admitted injector that forges, an admitted worker key no running worker holds, and a
    // key nobody listed.
    let forger = extra_key(&keys, "forger", Some("injector")).context().unwrap();
    let spare_worker = extra_key(&keys, "spare", Some("worker")).context().unwrap();
    let stranger = extra_key(&keys, "stranger", None).context().unwrap();
    let injector = keys.security("injector").context().unwrap();
    let operator = keys.security("operator").context().unwrap();
    let roles = start_secure_cluster(&keys, scratch.path(), scratch.path().join("out"), 2);
    let (control, never) = (roles.control.clone(), AtomicBool::new(false));
    let ask = |context: &Context, body: &[u8]| {
        answer_of(&request(context, &control, body, Duration::from_secs(10), &never).unwrap())
    };

    // Before the start: a stranger is turned away in the handshake (and told so); a worker's
    // key cannot register a collector; an injector's key cannot deploy rules.
    let rogue_worker = registration(Role::Worker, "rogue", "tcp://127.0.0.1:1", 0);
    let turned_away = register(&stranger, &control, &rogue_worker, Duration::from_secs(30), &never).unwrap_err();
    assert_eq!(
        turned_away.to_string(),
        format!(
            "cannot register with the router at {control}: {control} refused the handshake: this process's key is \
             not admitted there: not listed among the cluster's public keys, or not for a role that endpoint admits \
             (is it the router's control endpoint, and the right --key?)"
        )
    );
    let rogue_collector = registration(Role::Collector, "rogue", "tcp://127.0.0.1:1", 0);
    let (kind, reason) = ask(&spare_worker, &rogue_collector.encode(0));
    assert_eq!(kind, FrameKind::Refused);
    assert!(
        reason.contains("worker `spare` may not send Register: its key is not listed under collector/"),
        "{reason}"
    );
    let deploy = Deploy { origin: "rogue".into(), text: "query x: select price from ticks".into() };
    let (kind, reason) = ask(&injector, &deploy.encode(0));
    assert_eq!(kind, FrameKind::Refused);
    assert!(reason.contains("may not send Deploy: its key is not listed under operator/"), "{reason}");

    let real = register_in_thread(&injector, &control, registration(Role::Injector, "real", "", 1));
    let forging = register_in_thread(&forger, &control, registration(Role::Injector, "forger", "", 1));
    let (ready, forger_ready) = (real.join().unwrap(), forging.join().unwrap());
    let (stream, forger_stream) = (ready.assigned, forger_ready.assigned);
    assert!(!ready.collector_key.is_empty() && !ready.workers[0].key.is_empty(), "keys travel in Ready");

    // The operator may ask for the status; an injector may not.
    let (kind, _) = ask(&operator, &StatusRequest.encode(0));
    assert_eq!(kind, FrameKind::ClusterStatus);
    let (kind, reason) = ask(&injector, &StatusRequest.encode(0));
    assert_eq!((kind, reason.contains("not listed under operator/")), (FrameKind::Refused, true), "{reason}");
    let status = request(&operator, &control, &StatusRequest.encode(0), Duration::from_secs(10), &never).unwrap();
    let status: ClusterStatus = Frame::read(&status, usize::MAX).unwrap().body().unwrap();
    assert_eq!(status.members.len(), 1);

    // The forger, admitted as an injector, sends ticks and an end marker for the real stream:
    // rejected, as not its own. It ends its own stream, having sent nothing.
    let forged_end = EndOfStream { stream, sent: 5, routed: 0, cut: None }.encode(stream);
    let own_end = EndOfStream { stream: forger_stream, sent: 0, routed: 0, cut: None }.encode(forger_stream);
    send_once(&forger, &roles.data, Server::Router, &[ticks(stream, stream, 0, FORGED_TICKS), forged_end, own_end]);

    // Straight at the collector: a worker key that is not worker 0's cannot speak for it or for
    // the router; a bare report is no worker's; a stranger is not let in.
    let forged_report = WorkerReport {
        id: "worker-0".into(),
        index: 0,
        processed: TICKS,
        symbols: 50,
        outputs: 0,
        streams: Vec::new(),
        duplicates: 0,
        out_of_order: 0,
        late: 0,
        late_dropped: 0,
        rejected: Default::default(),
    }
    .encode(0);
    let as_worker_0 = DeliveryLog::new(0, 1, 1 << 20).push(&forged_report).to_vec();
    let as_router = DeliveryLog::new(ROUTER_ID, 1, 1 << 20).push(&forged_report).to_vec();
    let collector = Server::Key(&ready.collector_key);
    send_once(&spare_worker, &ready.collector, collector, &[as_worker_0, as_router]);
    send_once(&injector, &ready.collector, collector, std::slice::from_ref(&forged_report));
    send_once(&stranger, &ready.collector, collector, &[forged_report]);
    // An injector without CURVE at all: its handshake fails. A few times: libzmq's client may
    // see the mismatch in the router's greeting and close before its own greeting has gone
    // out, and the router counts only a handshake whose greeting it read (a busy machine was
    // seen to lose one attempt in three this way).
    for _ in 0..8 {
        send_once(&Context::new(), &roles.data, Server::Router, &[ticks(stream, stream, 0, 10)]);
    }
    // A stranger playing the router at the worker's data socket.
    send_once(&stranger, &ready.workers[0].endpoint, Server::Key(&ready.workers[0].key), &[ticks(0, stream, 0, 10)]);
    // Every refusal lands before the real stream ends (and the worker reports): seen in the
    // roles' metrics (each cause is one role's).
    wait_for_rejections(&[
        ("stream_of_another_key", FORGED_TICKS + 1),
        ("unauthorized_control", 3),
        ("unauthenticated_worker_collector_injector_operator", 1),
        ("handshake_failed_injector", 1),
        ("unauthorized_sender", 2),
        ("unsequenced", 1),
        ("unauthenticated_router_worker_injector", 1),
        ("unauthenticated_router", 1),
    ]);

    // The real stream, in two batches, then its end.
    let real_frames = [ticks(stream, stream, 0, TICKS / 2), ticks(stream, stream, TICKS / 2, TICKS)];
    let real_end = EndOfStream { stream, sent: TICKS, routed: 0, cut: None }.encode(stream);
    send_once(&injector, &roles.data, Server::Router, &[real_frames[0].clone(), real_frames[1].clone(), real_end]);
    let waiting: Vec<_> = [injector.clone(), forger.clone()]
        .into_iter()
        .map(|context| {
            let control = control.clone();
            std::thread::spawn(move || {
                end_of_run(&context, &control, EndOfRun::AwaitEnd, Duration::from_secs(60), &AtomicBool::new(false))
            })
        })
        .collect();

    let summary = roles.collector.join().unwrap().unwrap();
    for waiter in waiting {
        waiter.join().unwrap().unwrap();
    }
    roles.router.join().unwrap().unwrap();
    roles.worker.join().unwrap().unwrap();

    // The real stream's accounting is exact.
    assert!(summary.complete, "{}", summary.incomplete_because());
    assert_eq!((summary.events_sent, summary.events_processed, summary.events_lost), (Some(TICKS), TICKS, Some(0)));
    assert_eq!((summary.duplicates, summary.out_of_order, summary.outputs_lost), (0, 0, 0));
    // Every attack is counted where it landed.
    let rejected = |place: &str, cause: &str| summary.rejected.get(place).and_then(|c| c.get(cause)).copied();
    assert_eq!(rejected("router", "stream_of_another_key"), Some(FORGED_TICKS + 1), "{:?}", summary.rejected);
    assert_eq!(rejected("router", "unauthorized_control"), Some(3), "{:?}", summary.rejected);
    assert!(rejected("router", "unauthenticated_worker_collector_injector_operator") >= Some(1));
    assert!(rejected("router", "handshake_failed_injector") >= Some(1), "{:?}", summary.rejected);
    assert_eq!(rejected("collector", "unauthorized_sender"), Some(2), "{:?}", summary.rejected);
    assert_eq!(rejected("collector", "unsequenced"), Some(1), "{:?}", summary.rejected);
    assert!(rejected("collector", "unauthenticated_router_worker_injector") >= Some(1), "{:?}", summary.rejected);
    assert!(rejected("worker:worker-0", "unauthenticated_router") >= Some(1), "{:?}", summary.rejected);
}

#[test]
fn a_worker_that_joins_is_known_by_its_own_key_and_a_worker_key_registers_only_its_own_id() {
    let scratch = tempfile::tempdir().unwrap();
    let keys = ClusterKeys::create(&scratch.path().join("keys"), &["worker-0".into(), "worker-1".into()]).unwrap();
    let spare = extra_key(&keys, "spare", Some("worker")).context().unwrap();
    let (injector, operator) =
        (keys.security("injector").context().unwrap(), keys.security("operator").context().unwrap());
    let roles = start_secure_cluster(&keys, scratch.path(), scratch.path().join("out"), 1);
    let (control, never) = (roles.control.clone(), AtomicBool::new(false));
    let ready = register_in_thread(&injector, &control, registration(Role::Injector, "real", "", 1)).join().unwrap();
    let stream = ready.assigned;
    send_once(&injector, &roles.data, Server::Router, &[ticks(stream, stream, 0, TICKS / 2)]);

    // A worker's own key registers only the id it is named after.
    let impostor = registration(Role::Worker, "worker-7", "tcp://127.0.0.1:1", 0);
    let (kind, reason) =
        answer_of(&request(&spare, &control, &impostor.encode(0), Duration::from_secs(10), &never).unwrap());
    assert_eq!(kind, FrameKind::Refused);
    assert!(reason.contains("may register only as worker `spare`, not `worker-7`"), "{reason}");

    // worker-1 joins the running cluster and takes its share.
    let joiner = worker_config(&keys, &control, "worker-1");
    let joiner = std::thread::spawn(move || cep_worker::run(joiner, Arc::new(AtomicBool::new(false))));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let status = request(&operator, &control, &StatusRequest.encode(0), Duration::from_secs(10), &never).unwrap();
        let status: ClusterStatus = Frame::read(&status, usize::MAX).unwrap().body().unwrap();
        let joined = status.members.len() == 2 && status.members.iter().all(|member| member.state == "active");
        if joined && status.moving.is_none() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "worker-1 never joined: {status:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Another worker key cannot speak for it at the collector.
    let forged = cep_core::report::WorkerProgress { at_ns: 0, processed: TICKS, outputs: 0, rejected: 0 }.encode(1);
    let as_worker_1 = DeliveryLog::new(1, 1, 1 << 20).push(&forged).to_vec();
    send_once(&spare, &ready.collector, Server::Key(&ready.collector_key), &[as_worker_1]);
    wait_for_rejections(&[("unauthorized_sender", 1)]);

    let rest = [
        ticks(stream, stream, TICKS / 2, TICKS),
        EndOfStream { stream, sent: TICKS, routed: 0, cut: None }.encode(stream),
    ];
    send_once(&injector, &roles.data, Server::Router, &rest);
    end_of_run(&injector, &control, EndOfRun::AwaitEnd, Duration::from_secs(60), &never).unwrap();
    let summary = roles.collector.join().unwrap().unwrap();
    roles.router.join().unwrap().unwrap();
    roles.worker.join().unwrap().unwrap();
    joiner.join().unwrap().unwrap();

    assert!(summary.complete, "{}", summary.incomplete_because());
    assert_eq!((summary.events_sent, summary.events_processed, summary.events_lost), (Some(TICKS), TICKS, Some(0)));
    assert_eq!(summary.workers.iter().map(|worker| worker.id.as_str()).collect::<Vec<_>>(), ["worker-0", "worker-1"]);
    assert!(summary.workers[1].events > 0, "the joined worker's outputs were taken: {:?}", summary.workers);
    let rejected = |place: &str, cause: &str| summary.rejected.get(place).and_then(|c| c.get(cause)).copied();
    assert_eq!(rejected("collector", "unauthorized_sender"), Some(1), "{:?}", summary.rejected);
    assert_eq!(rejected("router", "unauthorized_control"), Some(1), "{:?}", summary.rejected);
}

/// Whether `capture` holds `symbol` as a frame encodes it (a MessagePack string: its length in
/// the first byte, so a chance match in ciphertext is one in 2^48 per place).
fn contains(capture: &[u8], symbol: &str) -> bool {
    assert!(symbol.len() < 32, "a fixstr");
    let needle: Vec<u8> = std::iter::once(0xa0 | symbol.len() as u8).chain(symbol.bytes()).collect();
    capture.windows(needle.len()).any(|window| window == needle.as_slice())
}

/// `cep run` (secure or open) in a network namespace of its own, its loopback traffic captured
/// whole by tcpdump: returns the capture and the symbols the run sent.
fn captured_run(secure: bool) -> (Vec<u8>, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let (capture, out) = (dir.path().join("lo.pcap"), dir.path().join("out"));
    let flag = if secure { "--secure" } else { "" };
    // The capture starts once tcpdump listens; after the run, half a second lets what the
    // kernel captured reach the file before tcpdump is stopped.
    let script = format!(
        "ip link set lo up || exit 90
         tcpdump -i lo -U -s 0 -w {capture} 2>{capture}.log & capturing=$!
         until grep -q 'listening on' {capture}.log; do kill -0 $capturing || exit 91; sleep 0.05; done
         RUST_LOG=warn {cep} run {flag} --workers 2 --count 20000 --rate 50000 --quiet --csv none --record-input --out {out}
         status=$?
         sleep 0.5; kill $capturing; wait $capturing
         exit $status",
        capture = capture.display(),
        cep = env!("CARGO_BIN_EXE_cep"),
        out = out.display(),
    );
    let run = std::process::Command::new("unshare").args(["--net", "sh", "-c", &script]).output();
    let run = run.expect("unshare (util-linux) runs the capture in a network namespace of its own");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr} (the capture needs root, iproute2 and tcpdump: .ci/run installs them)");
    let capture = std::fs::read(&capture).expect("tcpdump wrote no capture: is it installed?");
    let input = std::fs::read_to_string(out.join("input.csv")).unwrap();
    let mut symbols: Vec<String> =
        input.lines().skip(1).filter_map(|line| line.split(',').nth(2)).map(str::to_string).collect();
    symbols.sort();
    symbols.dedup();
    (capture, symbols)
}

#[test]
#[ignore = "needs root, tcpdump and unshare: .ci/run runs it (--run-ignored)"]
fn a_secure_run_puts_no_symbol_on_the_wire() {
    // The open run shows the capture sees the ticks: their symbols are on the wire in clear.
    let (open, symbols) = captured_run(false);
    assert!(symbols.len() > 100, "{} symbols", symbols.len());
    assert!(symbols.iter().any(|symbol| contains(&open, symbol)), "the capture holds no tick");
    let (secure, symbols) = captured_run(true);
    assert!(secure.len() > 100_000, "the secure run's traffic was captured ({} bytes)", secure.len());
    let readable: Vec<&String> = symbols.iter().filter(|symbol| contains(&secure, symbol)).collect();
    assert!(readable.is_empty(), "symbols readable on the wire: {readable:?}");
}
