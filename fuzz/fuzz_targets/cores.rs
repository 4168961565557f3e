//! The roles' cores fed hostile frames, as their drivers would feed them: a started secure
//! router (two workers, one stream, every process registered with a key of its own), worker 0
//! and a collector that checks who sends what, wired as a cluster (what the router sends worker
//! 0 reaches it; what either sends the collector reaches it in its sender's envelope, from its
//! key), each also given frames straight from the input as any key could send them. Beyond the
//! decoders, this is the accounting and the state machines under forged input: nothing may
//! panic or allocate without bound, every core ends its run whatever it was fed, and a summary
//! that says complete balances.
//!
//! An input is a sequence of frames, each `[to, length: u16 LE, frame]`; `to` picks the core
//! and the sender: the router's data socket as the stream's injector, as a worker or open; its
//! control socket as worker 1, an operator, the collector or open; worker 0; the collector as
//! the router, worker 0, worker 1 or open; or a tick of the router's clock.
#![no_main]

use cep_core::clock::Monotonic;
use cep_core::control::{Ready, Register};
use cep_core::delivery::DeliveryLog;
use cep_core::frame::{Body, Frame};
use cep_core::identity::{Identity, PublicKey, Role, Roles, Sender, ROUTER_ID};
use cep_core::outbox::{Peer, Recorded};
use cep_router::deploying::Deployments;
use cep_router::rendezvous::WorkerCount;
use cep_router::router::RouterSettings;
use libfuzzer_sys::fuzz_target;

/// Each process's key (Z85: any 40 digits decode), and how its messages name it.
const KEYS: [(&str, Role, &str); 5] = [
    ("w0", Role::Worker, "0000000000000000000000000000000000000000"),
    ("w1", Role::Worker, "1111111111111111111111111111111111111111"),
    ("c", Role::Collector, "2222222222222222222222222222222222222222"),
    ("i", Role::Injector, "3333333333333333333333333333333333333333"),
    ("ops", Role::Operator, "4444444444444444444444444444444444444444"),
];
const ROUTER_KEY: &str = "router router 5555555555555555555555555555555555555555";

fn peer(name: &str) -> Identity {
    let (name, role, key) = KEYS.iter().find(|(n, _, _)| *n == name).expect("a known process");
    Identity { roles: Roles::of(&[*role]), name: (*name).into(), key: PublicKey::parse(key).expect("a key") }
}

/// The `User-Id` of a message from `name`, as the ZAP handler writes it.
fn user_id(name: &str) -> String {
    let (name, role, key) = KEYS.iter().find(|(n, _, _)| *n == name).expect("a known process");
    format!("{} {name} {key}", role.name())
}

fn register(role: Role, id: &str, streams: u32) -> Vec<u8> {
    let register = Register {
        role,
        id: id.into(),
        endpoint: format!("inproc://{id}"),
        streams,
        warmup_ns: 0,
        clock_endpoint: String::new(),
        resuming: 0,
    };
    register.encode(0)
}

struct Cluster {
    router: cep_router::Router,
    worker: cep_worker::Worker,
    collector: cep_collector::Collector<Vec<u8>>,
    /// What the router and worker 0 sent, each.
    router_out: Recorded,
    worker_out: Recorded,
    now: u64,
    /// Their frames to the collector, in their envelopes.
    router_log: DeliveryLog,
    worker_log: DeliveryLog,
    /// The `User-Id`s of the router, worker 0, worker 1 and the injector.
    ids: [String; 4],
}

impl Cluster {
    fn start() -> Cluster {
        let settings = RouterSettings {
            workers: WorkerCount::Exactly(2),
            streams: 1,
            vnodes: 16,
            batch: 64,
            max_frame_bytes: 1 << 20,
            allowed_lateness_ns: None,
            slice_symbols: 4,
            max_held_ticks: 1000,
            move_timeout_ns: 1_000_000,
            checkpoint_every_ns: 50_000,
            checkpoints_retained: 1,
            checkpoint_dir: String::new(),
            max_replay_bytes: 1 << 20,
            failure_timeout: std::time::Duration::from_millis(100),
        };
        let source = cep_query::RulesSource::reference();
        let mut router = cep_router::Router::new(settings, Deployments::start(&source).expect("the reference rules"));
        let mut router_out = Recorded { clock: 1_000, ..Default::default() };
        for (name, role, streams) in
            [("w0", Role::Worker, 0), ("w1", Role::Worker, 0), ("c", Role::Collector, 0), ("i", Role::Injector, 1)]
        {
            let body = register(role, name, streams);
            router.control_from(
                name.as_bytes().to_vec(),
                Some(&peer(name)),
                &body,
                Monotonic::from_ns(1),
                &mut router_out,
            );
        }
        router.start(1_000);
        router.announce(None, &mut router_out);
        let ready = router_out
            .take()
            .into_iter()
            .find_map(|(to, frame)| match to {
                Peer::Client(client) if client == b"w0" => Frame::read(&frame, usize::MAX).ok()?.body::<Ready>().ok(),
                _ => None,
            })
            .expect("worker 0 is answered");
        let mut worker_out = Recorded { clock: 1_000, ..Default::default() };
        let worker = cep_worker::Worker::start("w0".into(), &ready, 64, 1 << 20, Box::new(cep_core::store::MemoryStore::default()), &mut worker_out).expect("a worker");
        let shape = cep_collector::collector::RunShape::of(&ready);
        let sinks = cep_collector::collector::Sinks {
            csv: cep_collector::csv::OutputsCsv::new(Vec::new()).expect("a sink"),
            intervals: cep_collector::intervals::IntervalRecorder::new(
                Vec::new(),
                Vec::new(),
                1_000,
                std::time::Duration::from_secs(1),
            )
            .expect("a sink"),
        };
        let keys = ready.workers.iter().map(|worker| worker.key.clone()).collect();
        let collector = cep_collector::Collector::new(shape, cep_collector::CsvMode::All, 1 << 20, sinks, 1_000)
            .authenticating(keys);
        let mut cluster = Cluster {
            router,
            worker,
            collector,
            router_out,
            worker_out,
            now: 1_000,
            router_log: DeliveryLog::new(ROUTER_ID, 1, usize::MAX),
            worker_log: DeliveryLog::new(0, 1, usize::MAX),
            ids: [ROUTER_KEY.to_string(), user_id("w0"), user_id("w1"), user_id("i")],
        };
        cluster.deliver();
        cluster
    }

    /// What the cores sent each other reaches them, until nothing more moves: the router's
    /// frames for worker 0 and worker 0's requests to the router, and both's frames to the
    /// collector, each in its sender's envelope from its key.
    fn deliver(&mut self) {
        for _ in 0..8 {
            let (from_router, from_worker) = (self.router_out.take(), self.worker_out.take());
            self.router_out.events.clear();
            self.worker_out.events.clear();
            if from_router.is_empty() && from_worker.is_empty() {
                return;
            }
            for (to, frame) in from_router {
                match to {
                    Peer::Worker(0) => self.worker.handle(&frame, self.now, &mut self.worker_out),
                    Peer::Collector => self.to_collector(true, &frame),
                    _ => {}
                }
            }
            for (to, frame) in from_worker {
                match to {
                    Peer::Router => {
                        let w0 = peer("w0");
                        self.router.control_from(
                            b"w0".to_vec(),
                            Some(&w0),
                            &frame,
                            Monotonic::from_ns(self.now),
                            &mut self.router_out,
                        );
                    }
                    Peer::Collector => self.to_collector(false, &frame),
                    _ => {}
                }
            }
        }
    }

    fn to_collector(&mut self, from_router: bool, frame: &[u8]) {
        let (log, id) = match from_router {
            true => (&mut self.router_log, &self.ids[0]),
            false => (&mut self.worker_log, &self.ids[1]),
        };
        let envelope = log.push(frame).to_vec();
        log.saved(log.last_position());
        drop(self.collector.handle_from(&envelope, Some(Sender::new(id)), self.now));
    }

    fn feed(&mut self, to: u8, frame: &[u8]) {
        self.now += 1_000;
        self.router_out.clock = self.now;
        self.worker_out.clock = self.now;
        let (router_id, w0_id, w1_id, injector_id) = (&self.ids[0], &self.ids[1], &self.ids[2], &self.ids[3]);
        let (router, out) = (&mut self.router, &mut self.router_out);
        match to % 13 {
            0 => router.data(frame, self.now, out),
            1 => router.data_from(frame, Some(Sender::new(injector_id)), self.now, out),
            2 => router.data_from(frame, Some(Sender::new(w0_id)), self.now, out),
            3 => router.control(b"anyone".to_vec(), frame, Monotonic::from_ns(self.now), out),
            4 => router.control_from(b"w1".to_vec(), Some(&peer("w1")), frame, Monotonic::from_ns(self.now), out),
            5 => router.control_from(b"ops".to_vec(), Some(&peer("ops")), frame, Monotonic::from_ns(self.now), out),
            6 => router.control_from(b"c".to_vec(), Some(&peer("c")), frame, Monotonic::from_ns(self.now), out),
            7 => self.worker.handle(frame, self.now, &mut self.worker_out),
            8 => drop(self.collector.handle_from(frame, Some(Sender::new(router_id)), self.now)),
            9 => drop(self.collector.handle_from(frame, Some(Sender::new(w0_id)), self.now)),
            10 => drop(self.collector.handle_from(frame, Some(Sender::new(w1_id)), self.now)),
            11 => drop(self.collector.handle(frame, self.now)),
            _ => drop(router.tick(Monotonic::from_ns(self.now), out)),
        }
        self.router.flush(&mut self.router_out);
        self.deliver();
    }
}

fuzz_target!(|data: &[u8]| {
    let mut cluster = Cluster::start();
    let mut rest = data;
    while let [to, low, high, tail @ ..] = rest {
        let len = (u16::from_le_bytes([*low, *high]) as usize).min(tail.len());
        let (frame, after) = tail.split_at(len);
        cluster.feed(*to, frame);
        rest = after;
    }
    cluster.router.finish(&mut cluster.router_out);
    cluster.worker.finish(&mut cluster.worker_out);
    cluster.deliver();
    let summary = cluster.collector.finish(|_| {}).expect("sinks in memory").summary;
    if summary.complete {
        assert_eq!(summary.events_sent, Some(summary.events_processed), "a complete run balances");
        assert_eq!(summary.events_lost, Some(0), "a complete run lost nothing");
    }
});
