//! Seed sweeps: a whole run drawn from one seed (cluster shape, link faults, kills, a killed
//! worker started again under its id, pauses, collector restarts, workers held at their bound of
//! unsaved frames, joins, leaves and rule deployments at observed points), with invariants
//! checked after every event of the simulation and at the end. A failing seed is a one-line reproduction
//! (`cargo run --release -p cep-testkit --bin sweep -- --seed N`), since everything follows
//! from it.
//!
//! After every event:
//! - **no output twice**: each row of outputs.csv names an output (rule, symbol, stream,
//!   sequence number) no earlier row names (a resumed collector's file is read again);
//! - **no output of a tick not sent**, and none that differs from the engine alone over
//!   the ticks sent so far (counted, and fatal unless the run is one that may lose state);
//! - **progress**: the run ends within its virtual time bound and event budget;
//! - **checkpoints stored**: the checkpoint store the workers share holds every part, at its
//!   size, that a failover of an active worker would restore from now (retention never
//!   removes one too early).
//!
//! A run the router gives up with no collector left to write a summary (the last worker
//! failed over, the collector lost beyond its retention) ends there, as a real one does; only
//! a run that stops a worker or may lose may end so.
//!
//! At the end: every tick sent is processed or counted as lost, by cause, and the figures
//! add up; a run whose disturbances all recover (the scenario's `lossless`, every failover
//! restored) is complete and its outputs are exactly the engine's over what was sent, but for
//! the symbols of a move the router gave up (the summary names them: their windows start
//! empty). The disturbances and where they apply: [`disruption`].

use crate::cluster::SentTick;
use crate::spec::{Action, ClusterSpec, Fault, LinkKind};
use crate::LocalCluster;
use cep_collector::CsvMode;
use cep_core::wire::FrameKind;
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

mod disruption;

use disruption::apply;
pub use disruption::Disruption;

/// Rules a sweep deploys while the run goes, by origin: a query whose plan changes (it starts
/// empty), one that stays (it keeps its state), one dropped and one added; then the reference
/// rules back. No tumbling window: its outputs at the end of input name no tick sent.
pub const DEPLOYABLE: [(&str, &str); 2] = [
    (
        "sweep:tighter",
        "@name('perc') SELECT symbol, price, perc(price) AS value FROM StockTick PARTITION BY symbol
           RETAIN 2 EVENTS HAVING perc(price) > 1.0 OR perc(price) < -1.0;
         @name('trend') SELECT symbol, price, trend(price) AS value FROM StockTick PARTITION BY symbol
           RETAIN 3 EVENTS HAVING trend(price) > 2;
         @name('swing') SELECT symbol, price, stddev(price) AS value FROM StockTick PARTITION BY symbol
           RETAIN 5 EVENTS;",
    ),
    ("sweep:reference", cep_query::REFERENCE),
];

/// The rules deployed as `origin` (the reference rules the run started with, or one of
/// [`DEPLOYABLE`]), compiled.
fn rules_of(origin: &str) -> cep_engine::RuleSet {
    let text = DEPLOYABLE.iter().find(|(name, _)| *name == origin).map_or(cep_query::REFERENCE, |(_, text)| text);
    cep_engine::compile(text, origin).expect("the sweep's rules compile")
}

/// One run, drawn from a seed.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// The seed everything was drawn from (also the price model's and the faults').
    pub seed: u64,
    /// The cluster.
    pub spec: ClusterSpec,
    /// Faults on its links.
    pub faults: Vec<Fault>,
    /// Disturbances, each applied once when its point is reached.
    pub disruptions: Vec<Disruption>,
    /// Whether every fault and disturbance drawn is one the cluster recovers from without a
    /// loss: then the run must be complete, with exactly the engine's outputs.
    pub lossless: bool,
}

/// The scenario's draws, from the seed alone: SplitMix64 outputs 0, 1, 2, ...
struct Draw {
    seed: u64,
    drawn: u64,
}

impl Draw {
    fn next(&mut self) -> u64 {
        self.drawn += 1;
        cep_core::gbm::splitmix64(self.seed, self.drawn - 1)
    }

    /// Uniform in `low..=high`.
    fn range(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low + 1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn probability(&mut self) -> f64 {
        // 0.1 % to 5 % of the matching frames.
        self.range(1, 50) as f64 / 1000.0
    }
}

impl Scenario {
    /// The scenario of `seed`.
    pub fn from_seed(seed: u64) -> Scenario {
        let mut draw = Draw { seed: seed ^ 0x5eed_5eed_5eed_5eed, drawn: 0 };
        let workers = draw.range(1, 3) as usize;
        let count = draw.range(1_000, 6_000);
        let spec = ClusterSpec {
            workers,
            streams: draw.range(1, 2) as u32,
            symbols: draw.range(8, 96) as usize,
            count,
            // Slow enough that a run outlasts a few checkpoints and the failure time-out: a
            // worker killed before the input ends can be restored (after it, it cannot).
            rate: draw.range(5, 40) as f64 * 1_000.0,
            batch: draw.range(4, 64) as usize,
            seed,
            csv: CsvMode::All,
            move_slice: draw.range(2, 16) as usize,
            checkpoint_every_ns: draw.range(5, 30) * 1_000_000,
            sequenced: draw.chance(50),
            ..ClusterSpec::default()
        };
        // A third of the runs with delivery hold their workers at a bound of a few frames, so
        // that they stop taking input until the collector saves (its saves are 100 ms apart).
        // Far below the 1 MiB the product accepts, on purpose: in runs this short, holding is
        // then frequent, and a move it outlasts (the old owner hands off nothing meanwhile)
        // gives up the state of the symbols it names.
        let spec = ClusterSpec {
            max_unsaved_bytes: if spec.sequenced && draw.chance(33) {
                draw.range(1_000, 20_000) as usize
            } else {
                usize::MAX
            },
            ..spec
        };
        let mut lossless = true;
        let mut faults = Vec::new();
        for _ in 0..draw.range(0, 3) {
            let p = draw.probability();
            let fault = match draw.range(0, 8) {
                // Control requests and answers late (one reliable connection each: a lost one
                // is a dead peer, which failure detection handles).
                8 => Fault::on(LinkKind::Control, Action::Delay(draw.range(1, 20_000) * 1_000)),
                0 => Fault::on(LinkKind::InjectorToRouter, Action::Delay(draw.range(1, 5_000) * 1_000)),
                1 => Fault::on(LinkKind::RouterToWorker, Action::Delay(draw.range(1, 5_000) * 1_000)),
                2 => Fault::on(LinkKind::WorkerToCollector, Action::Delay(draw.range(1, 5_000) * 1_000)),
                3 => Fault::on(LinkKind::InjectorToRouter, Action::Duplicate).kind(FrameKind::Ticks),
                4 => Fault::on(LinkKind::RouterToWorker, Action::Duplicate).kind(FrameKind::Ticks),
                // Frames to the collector in envelopes (any kind: the link sees the envelope's)
                // are asked for again when a later one shows the gap, and the last ones (no
                // later frame) are sent again by a sender that hears of no save for a second
                // while it waits: nothing is lost. Bare, lost outputs are counted.
                5 if spec.sequenced => Fault::on(LinkKind::WorkerToCollector, Action::Drop).kind(FrameKind::Sequenced),
                5 => {
                    lossless = false;
                    Fault::on(LinkKind::WorkerToCollector, Action::Drop).kind(FrameKind::Outputs)
                }
                6 => {
                    lossless = false;
                    Fault::on(LinkKind::RouterToWorker, Action::Drop).kind(FrameKind::Ticks)
                }
                _ => {
                    lossless = false;
                    Fault::on(LinkKind::RouterToWorker, Action::Reorder).kind(FrameKind::Ticks)
                }
            };
            faults.push(fault.probability(p));
        }
        let per_worker = count / workers as u64;
        let mut disruptions = Vec::new();
        let (mut killed, mut restarts) = (false, 0);
        for _ in 0..draw.range(0, 3) {
            let worker = draw.range(0, workers as u64 - 1) as usize;
            let after_sent = draw.range(1, count);
            let after_processed = draw.range(1, per_worker.max(2));
            match draw.range(0, 7) {
                0 if workers > 1 && !killed => {
                    killed = true;
                    disruptions.push(Disruption::KillWorker { worker, after_processed });
                    if draw.chance(50) {
                        disruptions.push(Disruption::Rejoin { worker });
                    }
                }
                1 => {
                    let pause_ns = draw.range(1, 200) * 1_000_000;
                    disruptions.push(Disruption::PauseWorker { worker, after_processed, pause_ns });
                }
                // Up to three a run, each once a state was saved and a collector runs again.
                2 if spec.sequenced && restarts < 3 => {
                    restarts += 1;
                    let down_ns = draw.range(1, 100) * 1_000_000;
                    disruptions.push(Disruption::RestartCollector { after_sent, down_ns });
                }
                3 if workers > 1 => disruptions.push(Disruption::Leave { worker, after_sent }),
                4 => disruptions.push(Disruption::Deploy { rules: draw.range(0, 1) as usize, after_sent }),
                5 => {
                    let (router, pause_ns) = (draw.chance(50), draw.range(1, 200) * 1_000_000);
                    disruptions.push(Disruption::PauseRouterOrCollector { router, after_sent, pause_ns });
                }
                6 => {
                    let pause_ns = draw.range(1, 200) * 1_000_000;
                    // Well within the failure time-out it is slow, not dead: nothing may be lost.
                    // Its last beat may have gone a period (a quarter) before the pause, travels
                    // the injector's link (at most 5 ms late) and waits for the router's timer
                    // (10 ms): a quarter of the time-out leaves room for all. Beyond, the
                    // router may end its streams.
                    lossless &= pause_ns <= spec.failure_timeout_ns / 4;
                    disruptions.push(Disruption::PauseInjector { after_sent, pause_ns });
                }
                _ => disruptions.push(Disruption::Join { after_sent }),
            }
        }
        Scenario { seed, spec, faults, disruptions, lossless }
    }

    /// Runs it, checking the invariants after every event and at the end.
    pub fn run(&self) -> Result<Verdict, Failure> {
        let mut run = CheckedRun::new(self);
        let mut pending = self.disruptions.clone();
        let mut collector_back_at = None;
        while !run.cluster.is_over() {
            if run.cluster.given_up() {
                return run.check_given_up();
            }
            if run.cluster.steps() >= MAX_STEPS {
                return Err(run.fail(format!("no end after {MAX_STEPS} events: the run hangs")));
            }
            if run.cluster.now() > run.deadline {
                return Err(run.fail("the run is past its virtual time bound: it hangs".into()));
            }
            if collector_back_at.is_some_and(|at| run.cluster.now() >= at) {
                collector_back_at = None;
                run.cluster.restart_collector();
            }
            let cluster = &mut run.cluster;
            pending.retain(|disruption| !apply(cluster, disruption, &mut collector_back_at));
            let progressed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run.cluster.step()));
            match progressed {
                Ok(true) => {}
                Ok(false) => {
                    return Err(run.fail("the simulation ran out of events before the collector finished".into()))
                }
                Err(panic) => return Err(run.fail(format!("a core panicked: {}", panic_text(&panic)))),
            }
            run.check_outputs()?;
            run.check_accounts()?;
            run.check_store()?;
        }
        run.check_end()
    }
}

/// A run that uses more events than this hangs (a run of 6,000 ticks takes well under 1 M).
const MAX_STEPS: u64 = 5_000_000;

fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    match (panic.downcast_ref::<String>(), panic.downcast_ref::<&str>()) {
        (Some(text), _) => text.clone(),
        (None, Some(text)) => (*text).to_string(),
        _ => "(no message)".into(),
    }
}

/// What a passing run did, for the sweep's totals.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Ticks sent.
    pub sent: u64,
    /// Output rows in outputs.csv.
    pub outputs: u64,
    /// Events of the simulation.
    pub steps: u64,
    /// Failovers, and how many recovered.
    pub failovers: (usize, usize),
    /// Rule deployments the router made.
    pub deployments: usize,
    /// Times a restarted collector resumed; over a sweep, the most in one run.
    pub collector_resumes: u64,
    /// Killed workers started again under their id.
    pub rejoins: u64,
    /// Worker turns taken holding input at the bound of unsaved frames.
    pub turns_at_max_unsaved: u64,
    /// Runs in which a move was given up and its symbols' state lost (named in the summary).
    pub moves_lost_state: u64,
    /// Runs the router gave up when its last worker was failed over (no summary to check).
    pub given_up: u64,
    /// Whether the summary said complete.
    pub complete: bool,
}

impl Verdict {
    /// Adds another run's figures to these totals.
    pub fn add(&mut self, other: &Verdict) {
        self.sent += other.sent;
        self.outputs += other.outputs;
        self.steps += other.steps;
        self.failovers.0 += other.failovers.0;
        self.failovers.1 += other.failovers.1;
        self.deployments += other.deployments;
        self.collector_resumes = self.collector_resumes.max(other.collector_resumes);
        self.rejoins += other.rejoins;
        self.turns_at_max_unsaved += other.turns_at_max_unsaved;
        self.moves_lost_state += other.moves_lost_state;
        self.given_up += other.given_up;
    }
}

/// A broken invariant: the seed, where, and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The seed that reproduces it.
    pub seed: u64,
    /// The simulation's event at which it was seen.
    pub step: u64,
    /// Virtual time since the epoch of the run's clock, in ms.
    pub at_ms: u64,
    /// What broke.
    pub what: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "seed {} broke an invariant at event {} ({} ms virtual): {}\n  reproduce: cargo run --release -p cep-testkit --bin sweep -- --seed {}",
            self.seed, self.step, self.at_ms, self.what, self.seed
        )
    }
}

/// An output's identity: rule, symbol, stream, sequence number.
type OutputKey = (String, String, u32, u64);

/// An outputs.csv row's identity and its (price, value) columns.
fn parse_row(line: &str) -> Option<(OutputKey, (String, String))> {
    let mut fields = line.split(',');
    let (rule, symbol, price, value) = (fields.next()?, fields.next()?, fields.next()?, fields.next()?);
    let (stream, seq) = (fields.next()?.parse().ok()?, fields.next()?.parse().ok()?);
    Some(((rule.to_string(), symbol.to_string(), stream, seq), (price.to_string(), value.to_string())))
}

/// A run under watch: the cluster, the engine alone over what was sent so far, and what
/// outputs.csv held at the last check.
struct CheckedRun<'a> {
    scenario: &'a Scenario,
    cluster: LocalCluster,
    deadline: u64,
    engine: cep_engine::Engine,
    rule_names: Vec<String>,
    /// Rule epochs of the run the engine has taken in (the first, then one per deployment).
    epochs: usize,
    /// Ticks of `cluster.sent()` given to `engine` so far.
    fed: usize,
    /// The engine's outputs so far: (price, value) as outputs.csv writes them.
    expected: BTreeMap<OutputKey, (String, String)>,
    /// The ticks sent so far, by (stream, sequence number).
    sent_ids: HashSet<(u32, u64)>,
    /// outputs.csv bytes read so far, and the outputs they name, since the collector's last
    /// resume (counted).
    read: usize,
    resumes: u64,
    seen: HashSet<OutputKey>,
    /// Rows that differ from the engine's.
    differing: Vec<String>,
    start_ms: u64,
}

impl<'a> CheckedRun<'a> {
    fn new(scenario: &'a Scenario) -> CheckedRun<'a> {
        let engine = cep_engine::Engine::new(rules_of("reference"));
        let rule_names = engine.queries().map(|q| q.name.clone()).collect();
        let cluster = LocalCluster::new(scenario.spec.clone(), scenario.faults.clone());
        let spec = &scenario.spec;
        // Sending takes count / rate; each pause, restart or failure at most adds its length;
        // the collector's idle time-out ends any run whose end went missing.
        let sending = (spec.count as f64 / spec.rate * 1e9) as u64;
        let disturbed: u64 = scenario
            .disruptions
            .iter()
            .map(|d| match d {
                Disruption::PauseWorker { pause_ns, .. } => *pause_ns,
                Disruption::PauseRouterOrCollector { pause_ns, .. } | Disruption::PauseInjector { pause_ns, .. } => {
                    *pause_ns
                }
                Disruption::RestartCollector { down_ns, .. } => *down_ns,
                _ => spec.move_timeout_ns,
            })
            .sum();
        let deadline = cluster.now() + sending + disturbed + spec.idle_timeout_ns + 10_000_000_000;
        let start_ms = cluster.now() / 1_000_000;
        CheckedRun {
            scenario,
            cluster,
            deadline,
            engine,
            rule_names,
            epochs: 1,
            fed: 0,
            expected: BTreeMap::new(),
            sent_ids: HashSet::new(),
            read: 0,
            resumes: 0,
            seen: HashSet::new(),
            differing: Vec::new(),
            start_ms,
        }
    }

    fn fail(&self, what: String) -> Failure {
        Failure {
            seed: self.scenario.seed,
            step: self.cluster.steps(),
            at_ms: (self.cluster.now() / 1_000_000).saturating_sub(self.start_ms),
            what,
        }
    }

    /// Gives the engine the ticks sent since the last check; after a deployment, every tick
    /// sent again, epoch by epoch.
    fn feed(&mut self) {
        if self.cluster.rules_history().len() != self.epochs {
            self.replay_epochs();
        }
        let sent = &self.cluster.sent()[self.fed..];
        expect(&mut self.engine, &self.rule_names, &mut self.expected, &mut self.sent_ids, sent.iter());
        self.fed += sent.len();
    }

    /// The engine alone over every tick sent so far, under the rules each tick's stream had
    /// at its sequence number: each epoch's ticks (a symbol is one stream's), then a switch,
    /// as every worker switches between the same ticks. Ticks sent later all fall in the last
    /// epoch: the router switches at what it has received, which was sent before.
    fn replay_epochs(&mut self) {
        let history = self.cluster.rules_history();
        let epoch_of = |tick: &SentTick| {
            // A stream opened after a deployment starts under its rules.
            history[1..].iter().take_while(|e| e.at.get(&tick.stream).is_none_or(|&first| tick.seq >= first)).count()
        };
        self.engine = cep_engine::Engine::new(rules_of(&history[0].origin));
        self.expected.clear();
        for (epoch, rules) in history.iter().enumerate() {
            if epoch > 0 {
                self.engine.switch(rules_of(&rules.origin));
            }
            self.rule_names = self.engine.queries().map(|q| q.name.clone()).collect();
            let ticks = self.cluster.sent().iter().filter(|tick| epoch_of(tick) == epoch);
            expect(&mut self.engine, &self.rule_names, &mut self.expected, &mut self.sent_ids, ticks);
        }
        self.fed = self.cluster.sent().len();
        self.epochs = history.len();
    }

    /// The rows outputs.csv gained since the last check: none twice, none of a tick not sent,
    /// and those that differ from the engine's counted.
    fn check_outputs(&mut self) -> Result<(), Failure> {
        self.feed();
        if self.cluster.collector_resumes() != self.resumes {
            // A resumed collector cut its file back to its last save (and may have written
            // more since, in the same event): read it again.
            self.resumes = self.cluster.collector_resumes();
            self.read = 0;
            self.seen.clear();
            self.differing.clear();
        }
        let csv = self.cluster.outputs_csv();
        let new = &csv[self.read..];
        // Whole lines only: a row may be half-written at this event.
        let Some(end) = new.iter().rposition(|&b| b == b'\n') else { return Ok(()) };
        let text = std::str::from_utf8(&new[..=end]).map_err(|_| self.fail("outputs.csv is not UTF-8".into()))?;
        for line in text.lines().filter(|line| !line.starts_with("rule,")) {
            let Some((key, columns)) = parse_row(line) else {
                return Err(self.fail(format!("a row that does not parse: {line}")));
            };
            match self.expected.get(&key) {
                _ if self.seen.contains(&key) => return Err(self.fail(format!("an output written twice: {line}"))),
                Some(expected) if *expected == columns => {}
                Some(_) => self.differing.push(line.to_string()),
                None if self.sent_ids.contains(&(key.2, key.3)) => self.differing.push(line.to_string()),
                None => return Err(self.fail(format!("an output of a tick never sent: {line}"))),
            }
            self.seen.insert(key);
        }
        self.read += end + 1;
        Ok(())
    }

    /// The rolling summary's accounts agree, whatever the run's state.
    fn check_accounts(&mut self) -> Result<(), Failure> {
        let broken = self.cluster.accounts().and_then(|summary| summary.broken_identities().into_iter().next());
        match broken {
            Some(broken) => Err(self.fail(format!("the rolling summary's accounts disagree: {broken}"))),
            None => Ok(()),
        }
    }

    /// The checkpoint store holds every part a failover would restore from now.
    fn check_store(&mut self) -> Result<(), Failure> {
        match self.cluster.missing_checkpoint_part() {
            Some(part) => Err(self.fail(format!("the checkpoint store lacks {part}, which a failover would restore"))),
            None => Ok(()),
        }
    }

    /// Whether the scenario stops a worker (kills or pauses one): only then may one be failed
    /// over, and the router be left with none.
    fn stops_a_worker(&self) -> bool {
        self.scenario
            .disruptions
            .iter()
            .any(|d| matches!(d, Disruption::KillWorker { .. } | Disruption::PauseWorker { .. }))
    }

    /// The router gave the run up and no collector runs to write its summary: a real run ends
    /// there, every process with its error. Only a run that stops a worker may end so, and only
    /// because its last worker was failed over (a collector lost beyond its retention never
    /// is: its restarts and pauses are far shorter).
    fn check_given_up(mut self) -> Result<Verdict, Failure> {
        self.check_outputs()?;
        let why = self.cluster.router_exit().unwrap_or_default().to_string();
        if !(self.stops_a_worker() && self.cluster.out_of_workers()) {
            return Err(self.fail(format!("the router gave the run up: {why}")));
        }
        Ok(Verdict {
            sent: self.cluster.sent().len() as u64,
            outputs: self.seen.len() as u64,
            steps: self.cluster.steps(),
            given_up: 1,
            ..Verdict::default()
        })
    }

    /// The end: accounts that add up, and for a lossless scenario the engine's outputs.
    fn check_end(mut self) -> Result<Verdict, Failure> {
        self.check_outputs()?;
        let sent = self.cluster.sent().len() as u64;
        let failure = self.fail(String::new());
        let fail = |what: String| Failure { what, ..failure.clone() };
        let worker_stopped = self.stops_a_worker();
        let CheckedRun { scenario, cluster, expected, seen, differing, .. } = self;
        let rows = seen.len() as u64;
        let steps = cluster.steps();
        let deployments = cluster.rules_history().len() - 1;
        let (collector_resumes, rejoins, turns_at_max_unsaved) =
            (cluster.collector_resumes(), cluster.restarted_workers(), cluster.turns_at_max_unsaved());
        let outcome = cluster.run();
        let summary = &outcome.summary;
        let failovers = (summary.failovers.len(), summary.failovers.iter().filter(|f| f.recovered).count());
        // Only a worker killed or paused is failed over: a stopped router or collector, or a
        // late link within the failure time-out, must not make a healthy one look dead.
        if !worker_stopped && failovers.0 > 0 {
            return Err(fail(format!("a healthy worker was failed over: {:?}", summary.failovers)));
        }
        if let Some(broken) = summary.broken_identities().first() {
            return Err(fail(format!("the summary's accounts disagree: {broken}")));
        }
        if summary.events_sent.is_some_and(|reported| reported != sent) {
            return Err(fail(format!("{sent} ticks sent, the summary says {:?}", summary.events_sent)));
        }
        if let Some(lost) = summary.events_lost {
            if summary.events_processed + lost != sent {
                return Err(fail(format!(
                    "{} processed + {lost} lost != {sent} sent ({:?})",
                    summary.events_processed, summary.lost_by_cause
                )));
            }
        }
        // A move given up loses the windows of the symbols it names, and says so (a worker
        // holding its input at its bound of unsaved frames hands off nothing until the
        // collector saves): those symbols' outputs may differ, nothing else.
        let state_lost: HashSet<&str> =
            summary.rescales.iter().flat_map(|rescale| rescale.state_lost.iter().map(String::as_str)).collect();
        let kept = |symbol: &str| !state_lost.contains(symbol);
        // A move loses state only when a worker it involves stops (killed, or paused past the
        // failure time-out) or is held at its bound of unsaved frames past the move's
        // time-out: any other move must keep its state.
        let holds = scenario.spec.max_unsaved_bytes != usize::MAX;
        if !state_lost.is_empty() && !worker_stopped && !holds {
            return Err(fail(format!("a move lost its state with no worker held: {:?}", summary.rescales)));
        }
        if scenario.lossless && failovers.0 == failovers.1 {
            if !summary.complete || summary.events_lost != Some(0) {
                return Err(fail(format!(
                    "a lossless run ended incomplete: complete {}, lost {:?} {:?}, failure {:?}, failovers {:?}, fenced {:?}",
                    summary.complete,
                    summary.events_lost,
                    summary.lost_by_cause,
                    summary.failure,
                    summary.failovers,
                    outcome.fenced
                )));
            }
            let differ: Vec<&String> =
                differing.iter().filter(|row| parse_row(row).is_some_and(|(key, _)| kept(&key.1))).collect();
            if let Some(row) = differ.first() {
                return Err(fail(format!("{} rows differ from the engine's, first: {row}", differ.len())));
            }
            let written = seen.iter().filter(|key| kept(&key.1)).count();
            let given = expected.keys().filter(|key| kept(&key.1)).count();
            if written != given {
                let missing = expected.keys().find(|key| kept(&key.1) && !seen.contains(*key));
                return Err(fail(format!(
                    "{written} outputs written, the engine gives {given}; first missing: {missing:?}"
                )));
            }
        }
        Ok(Verdict {
            sent,
            outputs: rows,
            steps,
            failovers,
            deployments,
            collector_resumes,
            rejoins,
            turns_at_max_unsaved,
            moves_lost_state: u64::from(!state_lost.is_empty()),
            given_up: 0,
            complete: summary.complete,
        })
    }
}

/// Gives `engine` the `ticks`, keeping each output it gives (by its identity, with its price
/// and value as outputs.csv writes them) in `expected`.
fn expect<'t>(
    engine: &mut cep_engine::Engine,
    rule_names: &[String],
    expected: &mut BTreeMap<OutputKey, (String, String)>,
    sent_ids: &mut HashSet<(u32, u64)>,
    ticks: impl Iterator<Item = &'t SentTick>,
) {
    let (mut prices, mut values) = (ryu::Buffer::new(), ryu::Buffer::new());
    for SentTick { stream, seq, symbol, price, t_event } in ticks {
        sent_ids.insert((*stream, *seq));
        let id = engine.intern(symbol);
        engine.process(id, *price, *t_event, |query, price, value| {
            let key = (rule_names[query as usize].clone(), symbol.clone(), *stream, *seq);
            expected.insert(key, (prices.format(price).to_string(), values.format(value).to_string()));
        });
    }
}

/// The seeds `from..from + count`, each run and checked, on `threads` threads; each run's result
/// is handed to `on_run` as it ends. Returns the failures, in seed order, and the passing runs'
/// totals.
pub fn sweep(
    from: u64,
    count: u64,
    threads: usize,
    on_run: impl Fn(&Result<Verdict, Failure>) + Sync,
) -> (Vec<Failure>, Verdict) {
    let next = AtomicU64::new(from);
    let end = from.saturating_add(count);
    let results = Mutex::new((Vec::new(), Verdict::default()));
    std::thread::scope(|scope| {
        for _ in 0..threads.max(1) {
            scope.spawn(|| loop {
                let seed = next.fetch_add(1, Ordering::Relaxed);
                if seed >= end {
                    return;
                }
                let outcome = Scenario::from_seed(seed).run();
                on_run(&outcome);
                let mut results = results.lock().unwrap_or_else(PoisonError::into_inner);
                match outcome {
                    Ok(verdict) => results.1.add(&verdict),
                    Err(failure) => results.0.push(failure),
                }
            });
        }
    });
    let (mut failures, total) = results.into_inner().unwrap_or_else(PoisonError::into_inner);
    failures.sort_by_key(|failure| failure.seed);
    (failures, total)
}
