//! The router's control plane: registrations until the run starts, rule deployments while it
//! runs, and the end-of-run exchange. Requests arrive with the identity of the client to
//! answer; answers go to the [`Outbox`] as [`Peer::Client`] frames.

use crate::data_path::DataPath;
use crate::deploying::Deployments;
use crate::rendezvous::{Rendezvous, Verdict};
use cep_core::clock::Monotonic;
use cep_core::control::{Deploy, Deployed, Refused, Register, MAX_CONTROL_FRAME_BYTES};
use cep_core::frame::{Body, EndAck, Frame};
use cep_core::identity::ROUTER_ID;
use cep_core::outbox::{Event, Outbox, Peer};
use cep_core::wire::FrameKind;

/// A client's identity on the control socket.
pub type ClientId = Vec<u8>;

/// The end of a run. ZeroMQ (4.3) can drop messages a peer had already sent when that peer
/// disconnects while the receiver's queue is full, so no node closes its data sockets before
/// the collector has everything: nodes that are done ask the router to be told (AwaitEnd), the
/// collector says when it is done (RunFinished), and the router then answers them all.
#[derive(Debug, Default)]
struct Ending {
    waiting: Vec<ClientId>,
    finished: bool,
    /// Workers and injectors that asked (AwaitEnd), answered or not.
    asked: usize,
}

/// What control requests change: who registered, the end of the run, the rules.
pub struct Control {
    /// Who has registered, and when the run may start.
    pub rendezvous: Rendezvous<ClientId>,
    /// The rules in force and every switch so far.
    pub deployments: Deployments,
    ending: Ending,
    /// Workers that joined the running cluster, less those that retired: each changes how
    /// many nodes ask for the end of the run.
    nodes_since_start: i64,
    /// Control requests refused, by cause (`malformed_control`: not a frame; `refused_control`:
    /// a request the router would not do), for the report.
    pub refused: std::collections::BTreeMap<String, u64>,
}

impl Control {
    /// The control plane of a run that waits for `rendezvous` and starts with `deployments`.
    pub fn new(rendezvous: Rendezvous<ClientId>, deployments: Deployments) -> Self {
        Control {
            rendezvous,
            deployments,
            ending: Ending::default(),
            nodes_since_start: 0,
            refused: Default::default(),
        }
    }

    /// Whether the collector said it has everything.
    pub fn collector_finished(&self) -> bool {
        self.ending.finished
    }

    /// Whether every registered worker and injector has asked for the end of the run (a
    /// node's request can arrive after the collector's).
    pub fn every_node_asked(&self) -> bool {
        self.ending.asked as i64 >= self.rendezvous.nodes() as i64 + self.nodes_since_start
    }

    /// A node asked for the end and was answered at once (an injector that joined the running
    /// cluster, once its streams have ended: everything it sent has arrived).
    pub fn asked_and_answered(&mut self) {
        self.ending.asked += 1;
    }

    /// A worker joined the running cluster: it too will ask for the end.
    pub fn node_joined(&mut self) {
        self.nodes_since_start += 1;
    }

    /// A worker is leaving: it retires without asking for the end.
    pub fn node_retiring(&mut self) {
        self.nodes_since_start -= 1;
    }

    /// Serves one control request received at `now`: a registration, a deployment, or the
    /// end-of-run exchange. `path` is the data path once the run has started.
    pub fn serve(
        &mut self,
        client: ClientId,
        key: &str,
        body: &[u8],
        now: Monotonic,
        path: Option<&mut DataPath>,
        out: &mut impl Outbox,
    ) {
        match Frame::read(body, MAX_CONTROL_FRAME_BYTES) {
            Ok(frame) if frame.kind() == FrameKind::AwaitEnd => {
                self.ending.asked += 1;
                self.ending.waiting.push(client);
            }
            Ok(frame) if frame.kind() == FrameKind::RunFinished => {
                self.ending.finished = true;
                self.ending.waiting.push(client);
            }
            Ok(frame) if frame.kind() == FrameKind::Deploy => {
                let answer = match frame.body::<Deploy>() {
                    Ok(deploy) => self.deploy(path, deploy, out),
                    Err(error) => Err(format!("bad deploy frame: {error}")),
                };
                let answer = match answer {
                    Ok(deployed) => deployed.encode(ROUTER_ID),
                    Err(reason) => {
                        out.event(Event::DeploymentRefused {
                            reason: reason.lines().next().unwrap_or_default().into(),
                        });
                        Refused { reason }.encode(ROUTER_ID)
                    }
                };
                out.send(Peer::Client(client), &answer);
            }
            Ok(frame) => self.register(client, key, frame.body::<Register>(), now, out),
            Err(error) => {
                self.count_refused("malformed_control");
                out.event(Event::BadControlFrame { reason: error.to_string() });
                let reason = format!("bad control frame: {error}");
                out.send(Peer::Client(client), &Refused { reason }.encode(ROUTER_ID));
            }
        }
        if self.ending.finished {
            self.release(out);
        }
    }

    /// Counts one refused control request under `cause`.
    pub fn count_refused(&mut self, cause: &str) {
        *self.refused.entry(cause.to_string()).or_insert(0) += 1;
    }

    /// Answers every node waiting for the end of the run.
    pub fn release(&mut self, out: &mut impl Outbox) {
        for client in self.ending.waiting.drain(..) {
            out.send(Peer::Client(client), &EndAck.encode(ROUTER_ID));
        }
    }

    fn deploy(
        &mut self,
        path: Option<&mut DataPath>,
        deploy: Deploy,
        out: &mut impl Outbox,
    ) -> Result<Deployed, String> {
        let queries = self.deployments.check(&deploy)?;
        let origin = deploy.origin.clone();
        let deployed = match path {
            // Not started yet: the run starts with these rules.
            None => self.deployments.accept(deploy, queries, Default::default()).1,
            Some(path) if path.all_ended() => return Err("the run is over: every stream has ended".into()),
            Some(path) => {
                let at = path.switch_point();
                let (marker, deployed) = self.deployments.accept(deploy, queries, at);
                path.switch_rules(&marker, out);
                deployed
            }
        };
        out.event(Event::Deployed { epoch: deployed.epoch, origin, at: deployed.at.clone() });
        Ok(deployed)
    }

    fn register(
        &mut self,
        client: ClientId,
        key: &str,
        registration: Result<Register, cep_core::wire::WireError>,
        now: Monotonic,
        out: &mut impl Outbox,
    ) {
        let verdict = match registration {
            Ok(registration) => {
                // An injector binds nothing: it has no endpoint to name.
                let at = if registration.endpoint.is_empty() {
                    String::new()
                } else {
                    format!(" at {}", registration.endpoint)
                };
                let who = format!("{:?} `{}`{at}", registration.role, registration.id);
                let verdict = self.rendezvous.offer(client.clone(), registration, key, now);
                out.event(match &verdict {
                    Verdict::Hold => Event::Registered { who, waiting_for: self.rendezvous.waiting_for() },
                    Verdict::Refuse(reason) => Event::Refused { who, reason: reason.clone() },
                });
                verdict
            }
            Err(error) => {
                out.event(Event::Refused {
                    who: "a process".into(),
                    reason: format!("bad registration frame: {error}"),
                });
                Verdict::Refuse(format!("bad registration frame: {error}"))
            }
        };
        if let Verdict::Refuse(reason) = verdict {
            self.count_refused("refused_control");
            out.send(Peer::Client(client), &Refused { reason }.encode(ROUTER_ID));
        }
    }
}
