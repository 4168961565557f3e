//! Tests of `wire`.

use super::*;

fn ticks_frame() -> Vec<u8> {
    let mut writer = TickBatchWriter::new(7);
    writer.push(b"S0001", 100.5, 1_000, 995, 3, 42, 0);
    writer.push(b"S0002", 101.0, 1_300, 1_300, 3, 43, 0);
    writer.seal(2_000).to_vec()
}

/// Golden bytes: if this test fails the format drifted and PROTOCOL_VERSION must change.
#[test]
fn tick_frame_golden_bytes() {
    #[rustfmt::skip]
    let expected: Vec<u8> = vec![
        0x95, 0x10, 0x01, 0x07, // [version 16, kind Ticks, sender 7,
        0xcf, 0, 0, 0, 0, 0, 0, 0x07, 0xd0, // t_sent 2000 (fixed u64),
        0xdd, 0, 0, 0, 2, // two ticks (fixed array32)
        0x97, 0xa5, b'S', b'0', b'0', b'0', b'1', // [[symbol,
        0xcb, 0x40, 0x59, 0x20, 0, 0, 0, 0, 0, // price 100.5,
        0xfb, 0x03, // event offset -5 (event time 995), injector 3,
        0x2a, 0xcd, 0x03, 0xe8, 0x00, // seq 42, t_inject 1000, t_router_in 0 (from 0)],
        0x97, 0xa5, b'S', b'0', b'0', b'0', b'2', // [symbol,
        0xcb, 0x40, 0x59, 0x40, 0, 0, 0, 0, 0, // price 101.0,
        0x00, 0x03, // event offset 0, injector 3,
        0x01, 0xcd, 0x01, 0x2c, 0x00, // seq 43 (+1), t_inject 1300 (+300), t_router_in 0 (+0)]]
    ];
    assert_eq!(ticks_frame(), expected);
    let (header, rest) = read_header(&expected).unwrap();
    let mut decoded = Vec::new();
    decode_ticks(&expected, &header, rest, &mut decoded).unwrap();
    let fields = |t: &TickRecord| (t.seq, t.t_inject, t.t_event, t.t_router_in);
    assert_eq!(decoded.iter().map(fields).collect::<Vec<_>>(), [(42, 1_000, 995, 0), (43, 1_300, 1_300, 0)]);
}

/// Golden bytes of the outputs frame (FinalOutputs has the same layout under kind 20).
#[test]
fn outputs_frame_golden_bytes() {
    // A tick's outputs after its first say their symbol is as before.
    let tick_symbol = b"S1".to_vec();
    let fill = |writer: &mut OutputBatchWriter| {
        writer.push(1, &tick_symbol, false, 2.0, -0.5, 3, 300, 7, 8);
        writer.push(2, &tick_symbol, true, 2.0, 4.0, 3, 300, 7, 8);
        writer.push(0, b"S2", false, 3.0, 1.5, 3, 299, 5, 10);
    };
    let mut writer = OutputBatchWriter::new(2);
    fill(&mut writer);
    #[rustfmt::skip]
    let expected: Vec<u8> = vec![
        0x97, 0x10, 0x03, 0x02, // [version 16, kind Outputs, sender 2,
        0xcf, 0, 0, 0, 0, 0, 0, 0, 0x0a, // t_router_out 10 (fixed u64),
        0xcf, 0, 0, 0, 0, 0, 0, 0, 0x0b, // t_worker_in 11,
        0xcf, 0, 0, 0, 0, 0, 0, 0, 0x0c, // t_engine_out 12,
        0xdd, 0, 0, 0, 3, // three outputs (fixed array32)
        0x98, 0x01, 0xa2, b'S', b'1', // [[rule 1, symbol,
        0xcb, 0x40, 0, 0, 0, 0, 0, 0, 0, // price 2.0,
        0xcb, 0xbf, 0xe0, 0, 0, 0, 0, 0, 0, // value -0.5,
        0x03, 0xcd, 0x01, 0x2c, 0x07, 0x08, // injector 3, seq 300, t_inject 7, t_router_in 8 (from 0)],
        0x98, 0x02, 0xc0, 0xc0, // [rule 2, the same symbol, the same price,
        0xcb, 0x40, 0x10, 0, 0, 0, 0, 0, 0, // value 4.0,
        0x03, 0x00, 0x00, 0x00, // injector 3, the same seq, t_inject and t_router_in],
        0x98, 0x00, 0xa2, b'S', b'2', // [rule 0, symbol,
        0xcb, 0x40, 0x08, 0, 0, 0, 0, 0, 0, // price 3.0,
        0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, // value 1.5,
        0x03, 0xff, 0xfe, 0x02, // injector 3, seq 299 (-1), t_inject 5 (-2), t_router_in 10 (+2)]]
    ];
    assert_eq!(writer.seal(10, 11, 12), &expected[..]);
    let mut closing = OutputBatchWriter::final_outputs(2);
    fill(&mut closing);
    let mut final_expected = expected.clone();
    final_expected[2] = FrameKind::FinalOutputs as u8;
    assert_eq!(closing.seal(10, 11, 12), &final_expected[..]);
    let (header, rest) = read_header(&expected).unwrap();
    let mut decoded = Vec::new();
    decode_outputs(&expected, &header, rest, &mut decoded).unwrap();
    let fields = |o: &OutputRecord| {
        (o.rule, o.symbol(&expected).to_string(), o.price, o.seq, o.stamps.t_inject, o.stamps.t_router_in)
    };
    assert_eq!(
        decoded.iter().map(fields).collect::<Vec<_>>(),
        [(1, "S1".into(), 2.0, 300, 7, 8), (2, "S1".into(), 2.0, 300, 7, 8), (0, "S2".into(), 3.0, 299, 5, 10)]
    );
    // The same symbol not said to be as before is written again (the writer compares no
    // symbols), and decodes the same; the first output of a batch always names its own.
    let mut writer = OutputBatchWriter::new(2);
    writer.push(1, &tick_symbol, true, 2.0, -0.5, 3, 300, 7, 8);
    writer.push(2, &tick_symbol, false, 2.0, 4.0, 3, 300, 7, 8);
    let frame = writer.seal(10, 11, 12).to_vec();
    let second = 4 + 3 * 9 + 5 + 29;
    assert_eq!(&frame[second..second + 3], &[0x98, 0x02, 0xa2]);
    let (header, rest) = read_header(&frame).unwrap();
    decode_outputs(&frame, &header, rest, &mut decoded).unwrap();
    assert_eq!((decoded[1].symbol(&frame), decoded[1].price), ("S1", 2.0));
}

#[test]
fn differences_wrap_so_any_numbers_round_trip_and_any_differences_decode() {
    let extremes = [0, 1, 7, i64::MAX as u64, i64::MAX as u64 + 1, u64::MAX - 1, u64::MAX];
    let mut ticks = TickBatchWriter::new(0);
    let mut outputs = OutputBatchWriter::new(0);
    let mut expected = Vec::new();
    for (i, &a) in extremes.iter().enumerate() {
        for &b in &extremes {
            let c = extremes[(i + 3) % extremes.len()];
            // t_event = t_inject: the offset stays 0 whatever the stamps.
            ticks.push(b"S", 1.0, b, b, 0, a, c);
            outputs.push(0, b"S", false, 1.0, 2.0, 0, a, b, c);
            expected.push((a, b, c));
        }
    }
    let frame = ticks.seal(0).to_vec();
    let (header, rest) = read_header(&frame).unwrap();
    let mut decoded = Vec::new();
    decode_ticks(&frame, &header, rest, &mut decoded).unwrap();
    assert_eq!(decoded.iter().map(|t| (t.seq, t.t_inject, t.t_router_in)).collect::<Vec<_>>(), expected);
    let frame = outputs.seal(0, 0, 0).to_vec();
    let (header, rest) = read_header(&frame).unwrap();
    let mut decoded = Vec::new();
    decode_outputs(&frame, &header, rest, &mut decoded).unwrap();
    let stamps = |o: &OutputRecord| (o.seq, o.stamps.t_inject, o.stamps.t_router_in);
    assert_eq!(decoded.iter().map(stamps).collect::<Vec<_>>(), expected);
}

#[test]
fn a_nil_symbol_or_price_with_none_before_it_is_malformed() {
    let mut writer = OutputBatchWriter::new(2);
    writer.push(1, b"S1", false, 2.0, -0.5, 3, 300, 7, 8);
    let frame = writer.seal(10, 11, 12).to_vec();
    let first = 4 + 3 * 9 + 5; // the first output's array header
    assert_eq!(&frame[first..first + 3], &[0x98, 0x01, 0xa2]);
    // [rule 1, nil, 2.0, ...]: the symbol's 3 bytes become one nil.
    let nil_symbol = [&frame[..first + 2], &[0xc0], &frame[first + 5..]].concat();
    let (header, rest) = read_header(&nil_symbol).unwrap();
    let error = decode_outputs(&nil_symbol, &header, rest, &mut Vec::new()).unwrap_err();
    assert!(error.to_string().contains("nil symbol at byte 38 names none before it"), "{error}");
    let nil_price = [&frame[..first + 5], &[0xc0], &frame[first + 14..]].concat();
    let (header, rest) = read_header(&nil_price).unwrap();
    let error = decode_outputs(&nil_price, &header, rest, &mut Vec::new()).unwrap_err();
    assert!(error.to_string().contains("nil price at byte 41 names none before it"), "{error}");
}

#[test]
fn ticks_round_trip_and_buffer_reuse() {
    let mut writer = TickBatchWriter::new(1);
    let mut decoded = Vec::new();
    for round in 0..3u64 {
        writer.clear();
        for seq in 0..100u64 {
            let (t_inject, t_event) = (seq * 10, u64::MAX / 2 * (seq % 2) + seq);
            writer.push(
                format!("S{seq:04}").as_bytes(),
                1.0 + seq as f64,
                t_inject,
                t_event,
                2,
                round * 100 + seq,
                seq,
            );
        }
        let frame = writer.seal(round).to_vec();
        let (header, rest) = read_header(&frame).unwrap();
        assert_eq!(header.kind, FrameKind::Ticks);
        assert_eq!(header.sender, 1);
        assert_eq!(decode_ticks(&frame, &header, rest, &mut decoded).unwrap(), round);
        assert_eq!(decoded.len(), 100);
        assert_eq!(decoded[5].symbol(&frame), "S0005");
        assert_eq!(decoded[5].seq, round * 100 + 5);
        assert_eq!((decoded[5].t_inject, decoded[5].t_event), (50, u64::MAX / 2 + 5));
        assert_eq!((decoded[6].t_inject, decoded[6].t_event), (60, 6));
        // Forwarded as encoded with a new t_router_in: the same tick, stamped.
        let mut forwarded = TickBatchWriter::new(9);
        forwarded.push_encoded(decoded[6].encoded(&frame), &decoded[6], 777);
        let again = forwarded.seal(0).to_vec();
        let (header, rest) = read_header(&again).unwrap();
        let mut one = Vec::new();
        decode_ticks(&again, &header, rest, &mut one).unwrap();
        let (a, b) = (&one[0], &decoded[6]);
        assert_eq!(
            (a.symbol(&again), a.price, a.t_inject, a.t_event),
            (b.symbol(&frame), b.price, b.t_inject, b.t_event)
        );
        assert_eq!((a.injector, a.seq, a.t_router_in), (b.injector, b.seq, 777));
        assert_eq!(decoded[99].price, 100.0);
    }
}

#[test]
fn outputs_round_trip() {
    let mut writer = OutputBatchWriter::new(4);
    let stamps = Stamps { t_inject: 1, t_router_in: 2, t_router_out: 3, t_worker_in: 4, t_engine_out: u64::MAX };
    writer.push(1, b"S0009", false, 99.0, 3.0, 1, 77, 1, 2);
    let frame = writer.seal(3, 4, u64::MAX).to_vec();
    let (header, rest) = read_header(&frame).unwrap();
    let mut out = Vec::new();
    decode_outputs(&frame, &header, rest, &mut out).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].rule, 1);
    assert_eq!(out[0].symbol(&frame), "S0009");
    assert_eq!(out[0].stamps, stamps);
    // Final outputs: the same layout under their own kind.
    let mut writer = OutputBatchWriter::final_outputs(4);
    writer.push(0, b"S0001", false, 98.0, 2.0, 0, 500, 0, 0);
    let frame = writer.seal(0, 4, 5).to_vec();
    let (header, rest) = read_header(&frame).unwrap();
    assert_eq!(header.kind, FrameKind::FinalOutputs);
    decode_outputs(&frame, &header, rest, &mut out).unwrap();
    assert_eq!((out[0].seq, out[0].stamps.t_inject, out[0].stamps.t_engine_out), (500, 0, 5));
}

#[test]
fn a_forged_final_outputs_frame_is_rejected_whole() {
    let mut writer = OutputBatchWriter::final_outputs(2);
    writer.push(0, b"S0001", false, 98.0, 2.0, 0, 500, 0, 0);
    let frame = writer.seal(0, 4, 5).to_vec();
    let mut out = Vec::new();
    for cut in 4..frame.len() {
        let short = &frame[..cut];
        if let Ok((header, rest)) = read_header(short) {
            assert!(decode_outputs(short, &header, rest, &mut out).is_err(), "cut at {cut} decoded");
        }
    }
    // A count that claims more outputs than the bytes could hold allocates nothing.
    let mut liar = frame.clone();
    let count_at = 4 + 3 * 9; // after the header and the three stamps: the array32 length
    assert_eq!(liar[count_at], 0xdd);
    liar[count_at + 1] = 0xff;
    let (header, rest) = read_header(&liar).unwrap();
    assert!(decode_outputs(&liar, &header, rest, &mut out).unwrap_err().to_string().contains("exceeds the frame"));
}

#[test]
fn an_event_time_before_the_epoch_is_malformed() {
    let mut writer = TickBatchWriter::new(1);
    // An offset of -2000 ns from an intended send time of 1000 ns.
    writer.push(b"S0001", 1.0, 1_000, 0, 0, 0, 0);
    let mut frame = writer.seal(0).to_vec();
    // The offset, then injector and seq (1 byte each), t_inject (3), t_router_in (1).
    let at = frame.len() - 3 - 6;
    assert_eq!(&frame[at..at + 3], &[0xd1, 0xfc, 0x18]);
    frame[at + 1] = 0xf8; // -2024
    let (header, rest) = read_header(&frame).unwrap();
    let error = decode_ticks(&frame, &header, rest, &mut Vec::new()).unwrap_err();
    assert!(error.to_string().contains("event time out of range"), "{error}");
}

#[test]
fn rejects_bad_frames_with_a_cause() {
    assert_eq!(read_header(b"hello").unwrap_err().cause(), "malformed");
    assert_eq!(read_header(&[]).unwrap_err().cause(), "malformed");
    let mut other_version = ticks_frame();
    other_version[1] = 1;
    assert_eq!(read_header(&other_version).unwrap_err(), WireError::Version { got: 1 });
    let mut unknown_kind = ticks_frame();
    unknown_kind[2] = 0x7f;
    assert_eq!(read_header(&unknown_kind).unwrap_err().cause(), "unexpected_kind");
    let frame = ticks_frame();
    assert_eq!(check_frame(&frame, 10).unwrap_err().cause(), "oversized");
    // Truncated anywhere inside the batch: rejected whole.
    let mut out = Vec::new();
    for cut in 4..frame.len() {
        let short = &frame[..cut];
        if let Ok((header, rest)) = read_header(short) {
            assert!(decode_ticks(short, &header, rest, &mut out).is_err(), "cut at {cut} decoded");
        }
    }
    // A count that claims more ticks than the bytes could hold.
    let mut liar = ticks_frame();
    liar[16] = 0xff;
    let (header, rest) = read_header(&liar).unwrap();
    assert!(decode_ticks(&liar, &header, rest, &mut out).is_err());
}
