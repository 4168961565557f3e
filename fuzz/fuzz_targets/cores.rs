//! The roles' cores fed hostile frames, as their drivers would feed them: a started router (two
//! workers, one stream), worker 0 and a collector, wired as a cluster (what the router sends
//! worker 0 reaches it, what either sends the collector reaches the collector), each also
//! given frames straight from the input, as any sender could send them. Beyond the decoders,
//! this is the accounting and the state machines under forged input: nothing may panic or
//! allocate without bound, every core ends its run whatever it was fed, and a summary that
//! says complete balances.
//!
//! An input is a sequence of frames, each `[to, length: u16 LE, frame]`; `to` picks the core
//! and the sender: the router's data socket as the stream's injector or as a stranger, its
//! control socket as the collector, a worker or an operator (or open), worker 0, the collector.
#![no_main]

use cep_core::control::{Ready, Register, Role};
use cep_core::frame::{Body, Frame};
use cep_core::outbox::{Peer, Recorded};
use cep_router::deploying::Deployments;
use cep_router::rendezvous::WorkerCount;
use cep_router::router::RouterSettings;
use cep_transport::security::{Peer as Authenticated, Role as KeyRole, Roles, Sender};
use libfuzzer_sys::fuzz_target;

const KEY: &str = "0000000000000000000000000000000000000000";

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

fn peer(role: KeyRole, name: &str) -> Authenticated {
    Authenticated {
        roles: Roles::of(&[role]),
        name: name.into(),
        key: cep_transport::security::PublicKey::parse(KEY).expect("a key"),
    }
}

struct Cluster {
    router: cep_router::Router,
    worker: cep_worker::Worker,
    collector: cep_collector::Collector<Vec<u8>>,
    out: Recorded,
    now: u64,
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
            max_replay_bytes: 1 << 20,
        };
        let source = cep_query::RulesSource::reference();
        let mut router = cep_router::Router::new(settings, Deployments::start(&source).expect("the reference rules"));
        let mut out = Recorded { clock: 1_000, ..Default::default() };
        for (client, role, id, streams) in
            [("w0", Role::Worker, "w0", 0), ("w1", Role::Worker, "w1", 0), ("c", Role::Collector, "c", 0), ("i", Role::Injector, "i", 1)]
        {
            router.control(client.as_bytes().to_vec(), &register(role, id, streams), 1, &mut out);
        }
        router.start(1_000);
        router.announce(None, &mut out);
        let ready = out
            .take()
            .into_iter()
            .find_map(|(to, frame)| match to {
                Peer::Client(client) if client == b"w0" => Frame::read(&frame, usize::MAX).ok()?.body::<Ready>().ok(),
                _ => None,
            })
            .expect("worker 0 is answered");
        let worker = cep_worker::Worker::start("w0".into(), &ready, 64, 1 << 20, &mut out).expect("a worker");
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
        let collector = cep_collector::Collector::new(shape, cep_collector::CsvMode::All, 1 << 20, sinks, 1_000);
        let mut cluster = Cluster { router, worker, collector, out, now: 1_000 };
        cluster.deliver();
        cluster
    }

    /// What the cores sent each other reaches them, until nothing more moves.
    fn deliver(&mut self) {
        for _ in 0..8 {
            let sent = self.out.take();
            self.out.events.clear();
            if sent.is_empty() {
                return;
            }
            for (to, frame) in sent {
                match to {
                    Peer::Worker(0) => self.worker.handle(&frame, self.now, &mut self.out),
                    Peer::Collector => drop(self.collector.handle(&frame, self.now)),
                    _ => {}
                }
            }
        }
    }

    fn feed(&mut self, to: u8, frame: &[u8]) {
        self.now += 1_000;
        self.out.clock = self.now;
        let injector = format!("injector i {KEY}");
        let stranger = format!("worker x {KEY}");
        match to % 10 {
            0 => self.router.data(frame, self.now, &mut self.out),
            1 => self.router.data_from(frame, Some(Sender::new(&injector)), self.now, &mut self.out),
            2 => self.router.data_from(frame, Some(Sender::new(&stranger)), self.now, &mut self.out),
            3 => self.router.control(b"anyone".to_vec(), frame, self.now, &mut self.out),
            4 => self.router.control_from(b"w1".to_vec(), Some(&peer(KeyRole::Worker, "w1")), frame, self.now, &mut self.out),
            5 => self.router.control_from(b"ops".to_vec(), Some(&peer(KeyRole::Operator, "ops")), frame, self.now, &mut self.out),
            6 => self.router.control_from(b"c".to_vec(), Some(&peer(KeyRole::Collector, "c")), frame, self.now, &mut self.out),
            7 => self.worker.handle(frame, self.now, &mut self.out),
            8 => drop(self.collector.handle(frame, self.now)),
            _ => self.router.tick(self.now, &mut self.out),
        }
        self.router.flush(&mut self.out);
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
    let mut out = std::mem::take(&mut cluster.out);
    cluster.router.finish(&mut out);
    cluster.worker.finish(&mut out);
    cluster.out = out;
    cluster.deliver();
    let summary = cluster.collector.finish(|_| {}).expect("sinks in memory").summary;
    if summary.complete {
        assert_eq!(summary.events_sent, Some(summary.events_processed), "a complete run balances");
        assert_eq!(summary.events_lost, Some(0), "a complete run lost nothing");
    }
});
