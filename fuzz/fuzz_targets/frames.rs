//! Every frame decoder: the header, then the body of whatever kind the header names (every
//! cold kind), the tick and output batches, and the collector's envelope with its inner frame.
#![no_main]

use cep_core::control::{Deploy, Deployed, Ready, Refused, Register, RulesText};
use cep_core::delivery::{Committed, DeliveryQuery, DeliveryStatus, Saved};
use cep_core::failover::{Checkpoint, CheckpointMark, Restore, Restored, Snapshot, WorkerFailed};
use cep_core::frame::{AwaitEnd, ClockReply, ClockRequest, EndAck, Frame, RunFinished};
use cep_core::liveness::{Abandoned, Fenced, Heartbeat, InjectorHeartbeat};
use cep_core::report::{
    ClockReport, EndOfStream, RouterProgress, RouterReport, RulesInstalled, WorkerProgress, WorkerReport,
};
use cep_core::rescale::{
    ClusterStatus, HandOff, Leave, Reached, RescaleAccepted, RescaleStarted, Rescaled, Retire, StateTaken,
    StatusRequest, StreamsOpened, SymbolState, Welcome, WorkerJoined,
};
use cep_core::wire::FrameKind;
use libfuzzer_sys::fuzz_target;

fn decode(
    frame: &Frame<'_>,
    ticks: &mut Vec<cep_core::tick::TickRecord>,
    outputs: &mut Vec<cep_core::tick::OutputRecord>,
) {
    match frame.kind() {
        FrameKind::Ticks => drop(frame.ticks(ticks)),
        FrameKind::Outputs | FrameKind::FinalOutputs => drop(frame.outputs(outputs)),
        FrameKind::Sequenced => {
            if let Ok(sequenced) = frame.sequenced() {
                if let Ok(inner) = Frame::read(sequenced.frame, usize::MAX) {
                    if inner.kind() != FrameKind::Sequenced {
                        decode(&inner, ticks, outputs);
                    }
                }
            }
        }
        FrameKind::EndOfStream => drop(frame.body::<EndOfStream>()),
        FrameKind::WorkerProgress => drop(frame.body::<WorkerProgress>()),
        FrameKind::RouterProgress => drop(frame.body::<RouterProgress>()),
        FrameKind::WorkerReport => drop(frame.body::<WorkerReport>()),
        FrameKind::RouterReport => drop(frame.body::<RouterReport>()),
        FrameKind::Register => drop(frame.body::<Register>()),
        FrameKind::Ready => drop(frame.body::<Ready>()),
        FrameKind::Refused => drop(frame.body::<Refused>()),
        FrameKind::ClockRequest => drop(frame.body::<ClockRequest>()),
        FrameKind::ClockReply => drop(frame.body::<ClockReply>()),
        FrameKind::ClockReport => drop(frame.body::<ClockReport>()),
        FrameKind::AwaitEnd => drop(frame.body::<AwaitEnd>()),
        FrameKind::RunFinished => drop(frame.body::<RunFinished>()),
        FrameKind::EndAck => drop(frame.body::<EndAck>()),
        FrameKind::Rules => drop(frame.body::<RulesInstalled>()),
        FrameKind::SwitchRules => drop(frame.body::<RulesText>()),
        FrameKind::Deploy => drop(frame.body::<Deploy>()),
        FrameKind::Deployed => drop(frame.body::<Deployed>()),
        FrameKind::HandOff => drop(frame.body::<HandOff>()),
        FrameKind::SymbolState => drop(frame.body::<SymbolState>()),
        FrameKind::StateTaken => drop(frame.body::<StateTaken>()),
        FrameKind::Retire => drop(frame.body::<Retire>()),
        FrameKind::Leave => drop(frame.body::<Leave>()),
        FrameKind::RescaleAccepted => drop(frame.body::<RescaleAccepted>()),
        FrameKind::StatusRequest => drop(frame.body::<StatusRequest>()),
        FrameKind::ClusterStatus => drop(frame.body::<ClusterStatus>()),
        FrameKind::RescaleStarted => drop(frame.body::<RescaleStarted>()),
        FrameKind::Rescaled => drop(frame.body::<Rescaled>()),
        FrameKind::StreamsOpened => drop(frame.body::<StreamsOpened>()),
        FrameKind::Welcome => drop(frame.body::<Welcome>()),
        FrameKind::Reached => drop(frame.body::<Reached>()),
        FrameKind::Checkpoint => drop(frame.body::<Checkpoint>()),
        FrameKind::Snapshot => drop(frame.body::<Snapshot>()),
        FrameKind::Restore => drop(frame.body::<Restore>()),
        FrameKind::WorkerFailed => drop(frame.body::<WorkerFailed>()),
        FrameKind::CheckpointMark => drop(frame.body::<CheckpointMark>()),
        FrameKind::Saved => drop(frame.body::<Saved>()),
        FrameKind::DeliveryQuery => drop(frame.body::<DeliveryQuery>()),
        FrameKind::DeliveryStatus => drop(frame.body::<DeliveryStatus>()),
        FrameKind::Committed => drop(frame.body::<Committed>()),
        FrameKind::Heartbeat => drop(frame.body::<Heartbeat>()),
        FrameKind::Fenced => drop(frame.body::<Fenced>()),
        FrameKind::Restored => drop(frame.body::<Restored>()),
        FrameKind::WorkerJoined => drop(frame.body::<WorkerJoined>()),
        FrameKind::InjectorHeartbeat => drop(frame.body::<InjectorHeartbeat>()),
        FrameKind::Abandoned => {
            // Read as the worker and the injector read it, unreadable bodies included.
            drop(cep_core::liveness::Verdict::of(frame));
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let (mut ticks, mut outputs) = (Vec::new(), Vec::new());
    if let Ok(frame) = Frame::read(data, 1 << 20) {
        decode(&frame, &mut ticks, &mut outputs);
    }
});
