//! The hot frames' writers against their readers on arbitrary records: protocol 9 writes
//! `seq` and the stamps as differences and leaves an output's symbol and price out when they
//! repeat, so every record must come back exactly as written, at any values, and so must a
//! batch a hop forwards as encoded with new arrival stamps.

use cep_core::wire::{decode_outputs, decode_ticks, read_header, OutputBatchWriter, TickBatchWriter};
use proptest::prelude::*;

/// Symbols and prices from a few, so that runs of repeats (written as nil) are common.
fn symbol() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![Just(b"S0001".to_vec()), Just(b"S2".to_vec()), proptest::collection::vec(b'A'..=b'Z', 1..40)]
}

fn price() -> impl Strategy<Value = f64> {
    prop_oneof![Just(1.0), Just(101.25), 1e-9..1e12f64]
}

/// (symbol, price, t_inject, event offset, injector, seq, t_router_in)
type Tick = (Vec<u8>, f64, u64, i32, u32, u64, u64);
/// (rule, symbol, price, value, injector, seq, t_inject, t_router_in)
type Output = (u32, Vec<u8>, f64, f64, u32, u64, u64, u64);

fn tick() -> impl Strategy<Value = Tick> {
    (symbol(), price(), any::<u64>(), any::<i32>(), any::<u32>(), any::<u64>(), any::<u64>())
}

fn output() -> impl Strategy<Value = Output> {
    (0..8u32, symbol(), price(), any::<f64>(), any::<u32>(), any::<u64>(), any::<u64>(), any::<u64>())
}

/// The event time a tick's caller gives: its offset from `t_inject`, kept in 0..2^64.
fn event_time(t_inject: u64, offset: i32) -> u64 {
    t_inject.saturating_add_signed(i64::from(offset))
}

/// Arrival stamps a forwarding hop puts on record `i`: unrelated to the ones before.
fn restamp(t_router_in: u64, i: usize) -> u64 {
    t_router_in.wrapping_mul(31).wrapping_add(i as u64)
}

proptest! {
    #[test]
    fn ticks_come_back_as_written_and_as_forwarded(ticks in proptest::collection::vec(tick(), 1..60), t_sent: u64) {
        let mut writer = TickBatchWriter::new(3);
        for (symbol, price, t_inject, offset, injector, seq, t_router_in) in &ticks {
            writer.push(symbol, *price, *t_inject, event_time(*t_inject, *offset), *injector, *seq, *t_router_in);
        }
        let frame = writer.seal(t_sent).to_vec();
        let (header, rest) = read_header(&frame).unwrap();
        let mut decoded = Vec::new();
        prop_assert_eq!(decode_ticks(&frame, &header, rest, &mut decoded).unwrap(), t_sent);
        prop_assert_eq!(decoded.len(), ticks.len());
        let mut forwarded = TickBatchWriter::new(0);
        for (i, (got, written)) in decoded.iter().zip(&ticks).enumerate() {
            let (symbol, price, t_inject, offset, injector, seq, t_router_in) = written;
            prop_assert_eq!(got.symbol(&frame).as_bytes(), &symbol[..]);
            prop_assert_eq!((got.price, got.t_inject, got.t_event), (*price, *t_inject, event_time(*t_inject, *offset)));
            prop_assert_eq!((got.injector, got.seq, got.t_router_in), (*injector, *seq, *t_router_in));
            forwarded.push_encoded(got.encoded(&frame), got, restamp(*t_router_in, i));
        }
        let again = forwarded.seal(0).to_vec();
        let (header, rest) = read_header(&again).unwrap();
        let mut hop = Vec::new();
        decode_ticks(&again, &header, rest, &mut hop).unwrap();
        prop_assert_eq!(hop.len(), decoded.len());
        for (i, (a, b)) in hop.iter().zip(&decoded).enumerate() {
            prop_assert_eq!(a.symbol(&again), b.symbol(&frame));
            prop_assert_eq!((a.price, a.t_inject, a.t_event), (b.price, b.t_inject, b.t_event));
            prop_assert_eq!((a.injector, a.seq, a.t_router_in), (b.injector, b.seq, restamp(b.t_router_in, i)));
        }
    }

    #[test]
    fn outputs_come_back_as_written(outputs in proptest::collection::vec(output(), 1..60), stamps: (u64, u64, u64)) {
        let mut writer = OutputBatchWriter::new(5);
        // An output whose symbol is the previous one's says so (written as nil).
        let mut previous: Option<&[u8]> = None;
        for (rule, symbol, price, value, injector, seq, t_inject, t_router_in) in &outputs {
            let as_before = previous == Some(&symbol[..]);
            writer.push(*rule, symbol, as_before, *price, *value, *injector, *seq, *t_inject, *t_router_in);
            previous = Some(symbol);
        }
        let frame = writer.seal(stamps.0, stamps.1, stamps.2).to_vec();
        let (header, rest) = read_header(&frame).unwrap();
        let mut decoded = Vec::new();
        decode_outputs(&frame, &header, rest, &mut decoded).unwrap();
        prop_assert_eq!(decoded.len(), outputs.len());
        for (got, written) in decoded.iter().zip(&outputs) {
            let (rule, symbol, price, value, injector, seq, t_inject, t_router_in) = written;
            prop_assert_eq!((got.rule, got.symbol(&frame).as_bytes()), (*rule, &symbol[..]));
            // (Bits: a NaN value must come back as the same NaN.)
            prop_assert_eq!((got.price.to_bits(), got.value.to_bits()), (price.to_bits(), value.to_bits()));
            prop_assert_eq!((got.injector, got.seq), (*injector, *seq));
            prop_assert_eq!((got.stamps.t_inject, got.stamps.t_router_in), (*t_inject, *t_router_in));
            prop_assert_eq!((got.stamps.t_router_out, got.stamps.t_worker_in, got.stamps.t_engine_out), stamps);
        }
    }
}
