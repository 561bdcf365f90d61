//! Protocol version 2 and the debugger's store: real reports through the binary frames, the
//! mapping state sent once, detail on request, the store's window and read-back, and the faults
//! (the debugger killed mid-stream, the target killed mid-frame, the connection cut), each on
//! loopback with every wait bounded.
//!
//! The tests take one lock, so that one target at a time runs.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a failure is the test failing, with its message"
)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dispatchscope_core::input::DispatchInput;
use dispatchscope_core::report::DispatchReport;
use dispatchscope_demo::{Demo, DemoConfig};
use dispatchscope_formats::message::{self, Rows};
use dispatchscope_formats::sample::{Sample, Step};
use dispatchscope_formats::session::{CaptureFile, DispatchRecord};
use dispatchscope_formats::shipped;
use dispatchscope_live::protocol::{MAX_FRAME_BYTES, ProtocolError, ToDebugger};
use dispatchscope_live::wire::{
    BINARY_MAGIC, Decoder, Encoder, FLAG_LZ4, MAX_BODY_BYTES, MSG_DEVICE_LOSS, MSG_FLIGHT,
};
use dispatchscope_live::{
    ClientOptions, Incoming, LiveClient, LiveStore, StoreOptions, Tap, TapConfig,
};

mod common;
use common::{T, serial, spawn_target};

fn loopback() -> TapConfig {
    common::loopback("v2 test target")
}

fn dispatch(index: u64, input: &DispatchInput, report: &DispatchReport) -> ToDebugger {
    ToDebugger::Dispatch {
        index,
        input: Box::new(input.clone()),
        report: Box::new(report.clone()),
        mapping_state: None,
        accesses_left_out: 0,
    }
}

/// Encodes `messages` as a session's frames (in frames of `per_frame` messages) and decodes them.
fn round_trip(
    messages: &[ToDebugger],
    streamed_accesses: usize,
    per_frame: usize,
) -> (Vec<ToDebugger>, usize, Vec<(u64, usize)>) {
    let mut enc = Encoder::new(streamed_accesses, MAX_FRAME_BYTES);
    let mut bytes = Vec::new();
    let mut cut = Vec::new();
    for chunk in messages.chunks(per_frame) {
        for m in chunk {
            enc.push(m.clone(), &mut bytes, &mut |d, a| cut.push((d, a.len())))
                .unwrap();
        }
        enc.finish_frame(&mut bytes);
    }
    let wire_bytes = bytes.len();
    let mut dec = Decoder::new();
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        dec.decode(&bytes[at + 4..at + 4 + len], &mut out).unwrap();
        at += 4 + len;
    }
    (out, wire_bytes, cut)
}

fn only_dispatches(ms: &[ToDebugger]) -> Vec<&ToDebugger> {
    ms.iter()
        .filter(|m| matches!(m, ToDebugger::Dispatch { .. }))
        .collect()
}

/// Dispatch messages compared on what the debugger sees: input and report.
fn same_dispatch(a: &ToDebugger, b: &ToDebugger) -> bool {
    match (a, b) {
        (
            ToDebugger::Dispatch {
                index: i,
                input: x,
                report: r,
                ..
            },
            ToDebugger::Dispatch {
                index: j,
                input: y,
                report: s,
                ..
            },
        ) => i == j && x == y && r == s,
        _ => false,
    }
}

fn demo_messages(config: DemoConfig, frames: u64) -> Vec<ToDebugger> {
    let mut demo = Demo::new(config).unwrap();
    let mut tap = Tap::detached();
    let mut out = Vec::new();
    for _ in 0..frames {
        demo.frame_with(&mut tap, |i, r| out.push(dispatch(r.index, i, r)))
            .unwrap();
    }
    out
}

#[test]
fn every_shipped_samples_reports_survive_the_binary_frames() {
    let mut n = 0;
    for name in shipped::names() {
        let sample = Sample::from_json(shipped::sample_text(name).unwrap()).unwrap();
        let reports = sample.run().unwrap();
        let inputs: Vec<&DispatchInput> = sample
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::Dispatch(d) => Some(&**d),
                _ => None,
            })
            .collect();
        assert_eq!(inputs.len(), reports.len(), "{name}");
        let messages: Vec<ToDebugger> = inputs
            .iter()
            .zip(&reports)
            .map(|(i, r)| dispatch(r.index, i, r))
            .collect();
        for per_frame in [1, 7] {
            let (out, _, cut) = round_trip(&messages, usize::MAX, per_frame);
            assert!(cut.is_empty());
            let got = only_dispatches(&out);
            assert_eq!(got.len(), messages.len(), "{name}");
            for (a, b) in messages.iter().zip(got) {
                assert!(same_dispatch(a, b), "{name}: a report changed on the way");
            }
        }
        n += reports.len();
    }
    assert!(n > 10, "{n} reports");
}

#[test]
fn demo_reports_survive_and_name_their_mapping_state_once() {
    let config = DemoConfig {
        refusal_every: 4,
        escape_every: 4,
        dispatches_per_frame: 20,
        ..DemoConfig::default()
    };
    let messages = demo_messages(config, 40);
    let (out, wire_bytes, _) = round_trip(&messages, usize::MAX, 64);
    let got = only_dispatches(&out);
    assert_eq!(got.len(), messages.len());
    for (a, b) in messages.iter().zip(&got) {
        assert!(same_dispatch(a, b));
    }
    // Every device-addressed report named a state; states went only when they changed.
    let states = out
        .iter()
        .filter(|m| matches!(m, ToDebugger::MappingState { .. }))
        .count();
    let with_mappings = got
        .iter()
        .filter(|m| {
            matches!(
                m,
                ToDebugger::Dispatch {
                    mapping_state: Some(_),
                    ..
                }
            )
        })
        .count();
    let distinct = {
        let mut v: Vec<_> = messages
            .iter()
            .filter_map(|m| match m {
                ToDebugger::Dispatch { report, .. } => report
                    .mappings
                    .as_ref()
                    .map(|m| (m.runs.clone(), m.pieces.clone(), m.left_out.clone())),
                _ => None,
            })
            .collect();
        v.dedup();
        v.len()
    };
    assert!(with_mappings > 100, "{with_mappings}");
    assert_eq!(states, distinct, "one state for each change, no more");
    assert!(
        states < with_mappings / 4,
        "{states} states for {with_mappings}"
    );
    // Smaller than version 1's JSON frames of the same messages.
    let v1: usize = messages
        .iter()
        .map(|m| {
            dispatchscope_live::protocol::encode_frame(m, MAX_FRAME_BYTES)
                .unwrap()
                .len()
        })
        .sum();
    assert!(wire_bytes * 4 < v1, "v2 {wire_bytes} bytes, v1 {v1}");
    eprintln!(
        "{} demo dispatches: v1 {} bytes a dispatch, v2 {}",
        messages.len(),
        v1 / messages.len(),
        wire_bytes / messages.len()
    );
}

/// A frame of one dispatch message of `kind` (3: fixed-width rows, 4: packed), uncompressed.
fn one_message_frame(kind: u8, message: &[u8]) -> Vec<u8> {
    let mut p = vec![BINARY_MAGIC, 0];
    p.extend_from_slice(&1u32.to_le_bytes());
    p.push(kind);
    p.extend_from_slice(&(message.len() as u32).to_le_bytes());
    p.extend_from_slice(message);
    p
}

#[test]
fn packed_dispatch_messages_are_what_a_target_sends_and_fixed_row_messages_still_read() {
    let messages = demo_messages(DemoConfig::default(), 1);
    let (out, _, _) = round_trip(&messages, usize::MAX, 64);
    let mut enc = Encoder::new(usize::MAX, MAX_FRAME_BYTES);
    enc.set_compress(false);
    let mut bytes = Vec::new();
    enc.push(messages[0].clone(), &mut bytes, &mut |_, _| {})
        .unwrap();
    enc.finish_frame(&mut bytes);
    let ToDebugger::Dispatch { input, report, .. } = &messages[0] else {
        unreachable!()
    };
    // What the encoder wrote is packed: its dispatch reads as a version 3 record.
    let mut d = Decoder::new();
    d.set_keep_received(true);
    let mut got = Vec::new();
    d.decode(&bytes[4..], &mut got).unwrap();
    let Some(ToDebugger::Received(r)) = got.pop() else {
        panic!("no dispatch")
    };
    assert_eq!(r.record()[4..8], 0x8000_0003u32.to_le_bytes());
    assert_eq!(only_dispatches(&out).len(), messages.len());
    // A version 2 target's message (kind 3, fixed-width rows) is named, not read: no peer of
    // this version sends it. Its bytes as a version 2 store kept them still read.
    let mut fixed = Vec::new();
    message::encode_whole(Rows::Fixed, report.index, input, report, &mut fixed).unwrap();
    let mut packed = Vec::new();
    message::encode_whole(Rows::Packed, report.index, input, report, &mut packed).unwrap();
    assert!(
        packed.len() * 4 < fixed.len() * 3,
        "{} against {}",
        packed.len(),
        fixed.len()
    );
    for keep in [false, true] {
        let mut d = Decoder::new();
        d.set_keep_received(keep);
        let mut got = Vec::new();
        d.decode(&one_message_frame(4, &packed), &mut got).unwrap();
        let whole = match got.pop().unwrap() {
            ToDebugger::Received(r) => {
                assert_eq!(r.record()[4..8], message::RECORD_V3.to_le_bytes());
                r.into_dispatch().unwrap()
            }
            other => other,
        };
        assert!(same_dispatch(&messages[0], &whole), "kept {keep}");
    }
    for kind in 1..=3 {
        let e = Decoder::new()
            .decode(&one_message_frame(kind, &fixed), &mut Vec::new())
            .unwrap_err()
            .to_string();
        assert!(e.contains("protocol version 2"), "kind {kind}: {e}");
    }
    // Fixed rows read as packed are an error, not a wrong report.
    assert!(
        Decoder::new()
            .decode(&one_message_frame(4, &fixed), &mut Vec::new())
            .is_err()
    );
    let mut v2 = Vec::new();
    message::encode_record(Rows::Fixed, &fixed, &[], &mut v2);
    let r = DispatchRecord::from_payload(&v2).unwrap();
    assert_eq!((&r.input, r.report.as_ref()), (&**input, Some(&**report)));
}

#[test]
fn long_access_lists_are_cut_and_counted() {
    let messages = demo_messages(DemoConfig::default(), 3);
    let (out, _, cut) = round_trip(&messages, 10, 16);
    for (m, got) in messages.iter().zip(only_dispatches(&out)) {
        let (
            ToDebugger::Dispatch { index, report, .. },
            ToDebugger::Dispatch {
                report: r,
                accesses_left_out,
                ..
            },
        ) = (m, got)
        else {
            unreachable!()
        };
        let total = report.accesses.len();
        assert_eq!(r.accesses.len(), total.min(10));
        assert_eq!(*accesses_left_out as usize, total.saturating_sub(10));
        assert_eq!(&r.accesses[..], &report.accesses[..total.min(10)]);
        if total > 10 {
            assert!(cut.contains(&(*index, total)), "the whole list was kept");
        }
    }
}

#[test]
fn bad_binary_payloads_are_named_errors() {
    let mut d = Decoder::new();
    let mut out = Vec::new();
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (vec![], "empty"),
        (vec![0x00, 1, 2], "neither JSON"),
        (vec![BINARY_MAGIC, 0], "shorter than its"),
        (vec![BINARY_MAGIC, 0x80, 1, 0, 0, 0], "unknown flag bits"),
        (vec![BINARY_MAGIC, 0, 0, 0, 0, 0], "a frame of 0 messages"),
        (vec![BINARY_MAGIC, 0, 1, 0, 0, 0, 0, 0xc1], "message 0 of 1"),
        (
            vec![BINARY_MAGIC, 0, 1, 0, 0, 0, 9],
            "unknown message kind 9, from a target of another version",
        ),
        // Version 4's kinds: a flight message and a loss report, cut or wrong, by name.
        (
            vec![BINARY_MAGIC, 0, 1, 0, 0, 0, MSG_FLIGHT],
            "flight message",
        ),
        (
            vec![BINARY_MAGIC, 0, 1, 0, 0, 0, MSG_FLIGHT, 2, 0, 0, 0, 9, 1],
            "a flight message of version 9",
        ),
        (
            [
                vec![BINARY_MAGIC, 0, 1, 0, 0, 0, MSG_FLIGHT, 10, 0, 0, 0, 1, 7],
                vec![0; 8],
            ]
            .concat(),
            "a flight message of state 7",
        ),
        (
            vec![BINARY_MAGIC, 0, 1, 0, 0, 0, MSG_FLIGHT, 3, 0, 0, 0, 1, 2, 0],
            "a flight message cut short: the index",
        ),
        (
            vec![BINARY_MAGIC, 0, 1, 0, 0, 0, MSG_DEVICE_LOSS, 9, 0, 0, 0],
            "loss report",
        ),
        (
            [
                vec![BINARY_MAGIC, 0, 1, 0, 0, 0, MSG_DEVICE_LOSS, 2, 0, 0, 0],
                b"{}".to_vec(),
            ]
            .concat(),
            "not a device-loss report",
        ),
        (
            [
                vec![BINARY_MAGIC, FLAG_LZ4, 1, 0, 0, 0],
                (MAX_BODY_BYTES + 1).to_le_bytes().to_vec(),
            ]
            .concat(),
            "more than the",
        ),
        (
            vec![BINARY_MAGIC, FLAG_LZ4, 1, 0, 0, 0, 100, 0, 0, 0, 0xff, 0xff],
            "does not decompress",
        ),
    ];
    for (payload, says) in cases {
        match d.decode(&payload, &mut out) {
            Err(ProtocolError::Malformed { message }) => {
                assert!(message.contains(says), "{message:?} does not say {says:?}");
            }
            other => panic!("{payload:?}: {other:?}"),
        }
        assert!(out.is_empty());
    }
    // A dispatch that names a mapping state never sent.
    let m = demo_messages(DemoConfig::default(), 1);
    let mut enc = Encoder::new(usize::MAX, MAX_FRAME_BYTES);
    let mut bytes = Vec::new();
    for x in &m {
        enc.push(x.clone(), &mut bytes, &mut |_, _| {}).unwrap();
        enc.finish_frame(&mut bytes);
    }
    // Skip the frames up to the first dispatch that names a state, and feed it alone.
    let mut at = 0;
    let mut refused = false;
    while at < bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        let payload = &bytes[at + 4..at + 4 + len];
        let mut fresh = Decoder::new();
        let mut o = Vec::new();
        if let Err(ProtocolError::Malformed { message }) = fresh.decode(payload, &mut o) {
            assert!(message.contains("names mapping state"), "{message}");
            refused = true;
        }
        at += 4 + len;
    }
    assert!(refused, "a state-naming dispatch decoded without its state");
}

/// A loss report with every part a report can have: dispatches in flight with their plans and
/// histories, and fault addresses landing in each place.
fn loss_report() -> dispatchscope_core::report::DeviceLossReport {
    use dispatchscope_core::addr::ByteRange;
    use dispatchscope_core::report::{
        DeviceLossReport, EscapeClass, FaultAddress, FaultLands, FaultReport, LOSS_SCHEMA,
        LostDispatch, Mode, ProgramHistory,
    };
    let lost = |index: u64, mode: Mode| LostDispatch {
        index,
        program: 0x4000_0000 + index,
        label: format!("pass {index}"),
        mode,
        mode_reason: "because".into(),
        generation: 3,
        mappings_version: 4,
        pieces: 2,
        left_out: 1,
        table_version: 5,
        history: ProgramHistory {
            runs: 4,
            refused: 1,
            device_addressed: 2,
            escapes: vec![(EscapeClass::NoReservation, 3)],
            refusals: vec![(dispatchscope_core::rules::Rule::O7, 1)],
            last_escape: Some("a load of 0x10 escaped".into()),
            last_dispatch: Some(index - 2),
        },
        ..LostDispatch::default()
    };
    DeviceLossReport {
        schema: LOSS_SCHEMA.to_owned(),
        status: "VK_ERROR_DEVICE_LOST".into(),
        next_dispatch: 12,
        in_flight: vec![lost(10, Mode::Bound), lost(11, Mode::DeviceAddressed)],
        fault: Some(FaultReport {
            description: "a page fault".into(),
            addresses: vec![
                FaultAddress {
                    address: 0x7000_1000,
                    kind: "read".into(),
                    lands: FaultLands::Guest {
                        guest: 0x1_0000_1000,
                        reservation: ByteRange::new(0x1_0000_0000, 0x1_0010_0000),
                        piece: None,
                        chunk: 0x100,
                    },
                },
                FaultAddress {
                    address: 0x9000_0040,
                    kind: "write".into(),
                    lands: FaultLands::Table { offset: 0x40 },
                },
                FaultAddress {
                    address: 0xdead_0000,
                    kind: "invalid pointer".into(),
                    lands: FaultLands::Unknown {
                        nearest_below: None,
                    },
                },
            ],
        }),
        completed: 10,
        findings: vec!["the likeliest".into(), "the next".into()],
    }
}

#[test]
fn flight_and_loss_messages_round_trip_in_binary_frames_compressed_or_not() {
    use dispatchscope_core::report::Mode;
    let messages = vec![
        ToDebugger::Prepared {
            index: 10,
            mode: Mode::Bound,
            program: 0x4000_0010,
            label: "pass 10".into(),
        },
        ToDebugger::Prepared {
            index: 11,
            mode: Mode::DeviceAddressed,
            program: 0x4000_0011,
            label: String::new(),
        },
        ToDebugger::Abandoned { index: 10 },
        ToDebugger::DeviceLost(Box::new(loss_report())),
    ];
    for compress in [false, true] {
        for keep_received in [false, true] {
            let mut enc = Encoder::new(usize::MAX, MAX_FRAME_BYTES);
            enc.set_compress(compress);
            let mut bytes = Vec::new();
            for m in &messages {
                enc.push(m.clone(), &mut bytes, &mut |_, _| {}).unwrap();
            }
            enc.finish_frame(&mut bytes);
            let len = u32::from_le_bytes(bytes[..4].try_into().unwrap()) as usize;
            assert_eq!(len + 4, bytes.len(), "one frame");
            let mut dec = Decoder::new();
            dec.set_keep_received(keep_received);
            let mut out = Vec::new();
            dec.decode(&bytes[4..], &mut out).unwrap();
            assert_eq!(
                out, messages,
                "compress {compress}, keep_received {keep_received}"
            );
            // Every cut of the frame's body is a named error, never a panic, and leaves nothing.
            if !compress {
                for n in 6..bytes.len() - 4 {
                    let mut short = bytes[4..4 + n].to_vec();
                    let mut o = Vec::new();
                    assert!(
                        matches!(
                            Decoder::new().decode(&short, &mut o),
                            Err(ProtocolError::Malformed { .. })
                        ),
                        "cut at {n}"
                    );
                    assert!(o.is_empty());
                    // And a byte flipped anywhere after the header decodes or is named.
                    short.clone_from(&bytes[4..].to_vec());
                    short[n] ^= 0x5a;
                    let _ = Decoder::new().decode(&short, &mut o);
                }
            }
        }
    }
}

// --- targets ------------------------------------------------------------------------------------

/// Attaches asking for a snapshot; while the target still ends a previous session (it refuses
/// as busy for that moment), tries again, for at most `T`.
fn snapshot_client(addr: &str) -> LiveClient {
    snapshot_client_with(addr, false)
}

/// [`snapshot_client`], its dispatches kept as they came when `keep_received`.
fn snapshot_client_with(addr: &str, keep_received: bool) -> LiveClient {
    let deadline = Instant::now() + T;
    loop {
        let c = LiveClient::connect_with(
            addr,
            &ClientOptions {
                snapshot: true,
                client_name: "v2 test store".into(),
                keep_received,
                ..ClientOptions::default()
            },
        );
        match c {
            Ok(c) => return c,
            Err(e) if Instant::now() < deadline && e.to_string().contains("busy") => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("{e}"),
        }
    }
}

/// Feeds `store` from `c` until it holds `n` dispatches or the connection goes; returns the
/// reports received, in order.
fn feed(c: &LiveClient, store: &mut LiveStore, n: usize) -> Vec<DispatchReport> {
    let mut got = Vec::new();
    let deadline = Instant::now() + T;
    while store.len() < n {
        assert!(
            Instant::now() < deadline,
            "{} of {n} dispatches",
            store.len()
        );
        match c.recv_timeout(Duration::from_millis(100)) {
            Some(Incoming::Message(m)) => {
                let report = match &m {
                    ToDebugger::Dispatch { report, .. } => Some((**report).clone()),
                    ToDebugger::Received(d) => Some(d.decode().unwrap().1),
                    _ => None,
                };
                if store.take(m).unwrap()
                    && let Some(r) = report
                {
                    got.push(r);
                }
            }
            Some(Incoming::Disconnected { .. }) => break,
            None => {}
        }
    }
    got
}

#[test]
fn a_store_fed_dispatches_as_they_came_writes_their_bytes_and_finds_any_from_the_writers_list() {
    let _g = serial();
    let t = spawn_target(
        loopback(),
        DemoConfig {
            dispatches_per_frame: 20,
            ..DemoConfig::default()
        },
        120.0,
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("received.dscap");
    // As the window keeps it: no rows, no reports.
    let mut store = LiveStore::create(
        &path,
        "received store test",
        &StoreOptions {
            window: 0,
            flush_every: Duration::from_millis(100),
            keep_rows: false,
            ..StoreOptions::default()
        },
    );
    let c = snapshot_client_with(&t.addr.to_string(), true);
    let got = feed(&c, &mut store, 300);
    assert_eq!(store.len(), got.len());
    assert!(got.len() >= 300);
    assert!(store.rows().is_empty());
    // Every position, across the store's samples (every 64th) and between them.
    for (pos, want) in got.iter().enumerate() {
        assert_eq!(&store.report(pos).unwrap(), want, "position {pos}");
    }
    assert!(store.report(got.len()).is_err());
    drop(c);
    store.finish().unwrap();
    // The file is a capture like any other, its DISPATCH records version 2.
    let mut file = dispatchscope_formats::session::CaptureFile::open(&path).unwrap();
    assert_eq!(file.n_dispatches(), got.len());
    for pos in [0, 63, 64, 65, got.len() - 1] {
        let r = file.dispatch(pos).unwrap();
        assert_eq!(r.report.as_ref(), Some(&got[pos]), "position {pos}");
    }
}

#[test]
fn the_store_keeps_a_window_and_reads_older_reports_back_from_its_file() {
    let _g = serial();
    let t = spawn_target(
        loopback(),
        DemoConfig {
            dispatches_per_frame: 20,
            ..DemoConfig::default()
        },
        120.0,
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.dscap");
    let mut store = LiveStore::create(
        &path,
        "store test",
        &StoreOptions {
            window: 16,
            flush_every: Duration::from_millis(100),
            keep_rows: true,
            ..StoreOptions::default()
        },
    );
    let c = snapshot_client(&t.addr.to_string());
    let got = feed(&c, &mut store, 300);
    assert_eq!(store.len(), got.len());
    assert_eq!(store.window(), got.len() - 16..got.len());
    assert!(store.recent(0).is_none(), "the oldest is only on disk");
    for pos in [0, 1, 150, got.len() - 17, got.len() - 1] {
        let r = store.report(pos).unwrap();
        assert_eq!(r, got[pos], "position {pos}");
        let row = store.rows()[pos];
        assert_eq!(
            (row.index, row.program, row.mode),
            (r.index, r.program, r.mode)
        );
        assert_eq!(store.label(&row), r.label);
    }
    assert!(store.report(got.len()).is_err());
    // Indices are consecutive: nothing dropped at this rate.
    assert!(
        store
            .rows()
            .windows(2)
            .all(|w| w[1].index == w[0].index + 1)
    );
    c.detach(T).unwrap();
    let n = store.len();
    store.finish().unwrap();
    let mut file = CaptureFile::open(&path).unwrap();
    assert!(file.torn().is_none());
    assert_eq!(file.n_dispatches(), n);
    assert_eq!(file.dispatch(7).unwrap().report.unwrap(), got[7]);
    t.runs(5, T);
}

#[test]
fn program_code_is_sent_once_before_its_first_dispatch_and_the_recording_keeps_it() {
    let _g = serial();
    let t = spawn_target(
        loopback(),
        DemoConfig {
            dispatches_per_frame: 20,
            ..DemoConfig::default()
        },
        120.0,
    );
    let programs = dispatchscope_demo::demo_programs();
    let with_code = [
        dispatchscope_demo::PRIMARY,
        dispatchscope_demo::SECONDARY,
        dispatchscope_demo::SHADE,
    ];
    for p in with_code {
        assert!(
            programs
                .iter()
                .any(|q| q.address == p && !q.code.is_empty())
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("programs.dscap");
    let mut store = LiveStore::create(&path, "programs test", &StoreOptions::default());
    let c = snapshot_client(&t.addr.to_string());
    let (mut sent, mut dispatched) = (Vec::new(), std::collections::HashSet::new());
    let deadline = Instant::now() + T;
    while store.len() < 200 {
        assert!(
            Instant::now() < deadline,
            "{} of 200 dispatches",
            store.len()
        );
        let Some(Incoming::Message(m)) = c.recv_timeout(Duration::from_millis(100)) else {
            continue;
        };
        match &m {
            ToDebugger::Program { address, code } => {
                assert!(
                    !dispatched.contains(address),
                    "the code of {address:#x} came after a dispatch of it"
                );
                let want = programs.iter().find(|p| p.address == *address).unwrap();
                assert_eq!(code, &want.code);
                sent.push(*address);
            }
            ToDebugger::Dispatch { input, .. } => {
                if with_code.contains(&input.program) {
                    assert!(sent.contains(&input.program), "{:#x}", input.program);
                }
                dispatched.insert(input.program);
            }
            _ => {}
        }
        store.take(m).unwrap();
    }
    sent.sort_unstable();
    let mut want = with_code.to_vec();
    want.sort_unstable();
    assert_eq!(
        sent, want,
        "each program's code once, and only those with code"
    );
    assert_eq!(store.programs().len(), 3);
    c.detach(T).unwrap();
    store.finish().unwrap();
    let file = CaptureFile::open(&path).unwrap();
    let mut kept: Vec<_> = file.meta().programs.clone();
    kept.sort_by_key(|p| p.address);
    let mut expected: Vec<_> = programs
        .iter()
        .filter(|p| with_code.contains(&p.address))
        .cloned()
        .collect();
    expected.sort_by_key(|p| p.address);
    assert_eq!(kept, expected, "the capture keeps every program's code");
    t.runs(5, T);
}

#[test]
fn detail_on_request_fetches_the_rest_of_a_cut_access_list() {
    let _g = serial();
    let t = spawn_target(
        TapConfig {
            streamed_accesses: 8,
            ..loopback()
        },
        DemoConfig::default(),
        120.0,
    );
    let c = LiveClient::connect(&t.addr.to_string(), None, T).unwrap();
    let mut seen = Vec::new();
    let m = c
        .wait_for(T, &mut seen, |m| {
            matches!(m, ToDebugger::Dispatch { accesses_left_out, .. } if *accesses_left_out > 0)
        })
        .unwrap();
    let ToDebugger::Dispatch {
        index,
        report,
        accesses_left_out,
        ..
    } = m
    else {
        unreachable!()
    };
    assert_eq!(report.accesses.len(), 8);
    assert_eq!(report.counts.accesses, 8 + accesses_left_out as usize);
    c.request_detail(index).unwrap();
    let detail = c
        .wait_for(T, &mut seen, |m| {
            matches!(m, ToDebugger::Detail { .. } | ToDebugger::DetailGone { .. })
        })
        .unwrap();
    match detail {
        ToDebugger::Detail { dispatch, accesses } => {
            assert_eq!(dispatch, index);
            assert_eq!(accesses.len(), report.counts.accesses);
            assert_eq!(&accesses[..8], &report.accesses[..]);
        }
        other => panic!("{other:?}"),
    }
    c.request_detail(u64::MAX).unwrap();
    let gone = c
        .wait_for(T, &mut seen, |m| matches!(m, ToDebugger::DetailGone { .. }))
        .unwrap();
    assert!(
        matches!(gone, ToDebugger::DetailGone { message, .. } if message.contains("no cut access list"))
    );
    drop(c);
    t.runs(5, T);
}

// --- faults -------------------------------------------------------------------------------------

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn child(
    test: &str,
    env: &[(&str, String)],
) -> (
    KillOnDrop,
    std::io::Lines<BufReader<std::process::ChildStdout>>,
) {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([test, "--exact", "--nocapture", "--test-threads", "1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut c = cmd.spawn().unwrap();
    let lines = BufReader::new(c.stdout.take().unwrap()).lines();
    (KillOnDrop(c), lines)
}

/// Waits for a line of the child's that holds `tag`, and returns what follows it.
fn line_after(
    lines: &mut std::io::Lines<BufReader<std::process::ChildStdout>>,
    tag: &str,
) -> String {
    loop {
        let line = lines.next().expect("the child ends early").unwrap();
        if let Some((_, rest)) = line.split_once(tag) {
            return rest.trim().to_owned();
        }
    }
}

/// Not a test on its own: the debugger that `killing_the_debugger_mid_stream_…` kills.
#[test]
fn child_debugger_process() {
    let Ok(addr) = std::env::var("DS_V2_DEBUGGER") else {
        return;
    };
    let path = std::env::var("DS_V2_PATH").unwrap();
    let mut store = LiveStore::create(
        std::path::Path::new(&path),
        "killed debugger",
        &StoreOptions {
            window: 8,
            flush_every: Duration::from_millis(50),
            ..StoreOptions::default()
        },
    );
    let c = snapshot_client(&addr);
    let mut told = 0;
    loop {
        if let Some(Incoming::Message(m)) = c.recv_timeout(Duration::from_millis(100)) {
            store.take(m).unwrap();
        }
        if store.len() >= told + 50 {
            store.flush().unwrap();
            told = store.len();
            println!("DURABLE {told}");
            std::io::stdout().flush().unwrap();
        }
    }
}

#[test]
fn killing_the_debugger_mid_stream_leaves_a_session_that_opens_and_the_game_runs_on() {
    let _g = serial();
    let t = spawn_target(
        loopback(),
        DemoConfig {
            dispatches_per_frame: 20,
            ..DemoConfig::default()
        },
        120.0,
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("killed.dscap");
    let (mut kid, mut lines) = child(
        "child_debugger_process",
        &[
            ("DS_V2_DEBUGGER", t.addr.to_string()),
            ("DS_V2_PATH", path.display().to_string()),
        ],
    );
    let mut durable = 0;
    while durable < 200 {
        durable = line_after(&mut lines, "DURABLE ").parse::<usize>().unwrap();
    }
    kid.0.kill().unwrap();
    kid.0.wait().unwrap();
    // The game never waited on the debugger, and runs on once it is gone.
    t.runs(10, Duration::from_secs(2));
    let mut file = CaptureFile::open(&path).unwrap();
    assert!(
        file.n_dispatches() >= durable,
        "{} dispatches after {durable} were made durable",
        file.n_dispatches()
    );
    let mut last = None;
    for n in 0..file.n_dispatches() {
        let index = file.dispatch(n).unwrap().report.unwrap().index;
        assert!(
            last.is_none_or(|l| index == l + 1),
            "every record, in order"
        );
        last = Some(index);
    }
    file.to_sample().unwrap().0.run().unwrap();
    // A new attach resumes: it sees new dispatches after the old ones.
    let mut store = LiveStore::create(
        &dir.path().join("again.dscap"),
        "again",
        &StoreOptions::default(),
    );
    let c = snapshot_client(&t.addr.to_string());
    feed(&c, &mut store, 20);
    assert!(store.rows()[0].index > last.unwrap());
}

/// Not a test on its own: the target that `killing_the_target_mid_frame_…` kills.
#[test]
fn child_target_process_v2() {
    if std::env::var("DS_V2_TARGET").as_deref() != Ok("1") {
        return;
    }
    let mut tap = Tap::listen(loopback()).unwrap();
    println!("LISTENING {}", tap.local_addr().unwrap());
    std::io::stdout().flush().unwrap();
    let mut demo = Demo::new(DemoConfig {
        dispatches_per_frame: 100,
        ..DemoConfig::default()
    })
    .unwrap();
    let stop = AtomicBool::new(false);
    let options = dispatchscope_demo::RunOptions {
        frames: Some(60 * 60),
        fps: Some(60.0),
    };
    dispatchscope_demo::run(&mut demo, &mut tap, options, &stop, |_| {}).unwrap();
}

#[test]
fn killing_the_target_mid_frame_leaves_every_received_record() {
    let _g = serial();
    let (mut kid, mut lines) = child("child_target_process_v2", &[("DS_V2_TARGET", "1".into())]);
    let addr = line_after(&mut lines, "LISTENING ");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("target-killed.dscap");
    let mut store = LiveStore::create(&path, "target killed", &StoreOptions::default());
    let c = snapshot_client(&addr);
    // 250 dispatches at 100 a frame: the kill lands in the middle of frame 3.
    let mut got = feed(&c, &mut store, 250);
    kid.0.kill().unwrap();
    kid.0.wait().unwrap();
    got.extend(feed(&c, &mut store, usize::MAX));
    assert!(!c.is_connected());
    let n = store.len();
    assert_eq!(n, got.len());
    assert!(n >= 250);
    store.finish().unwrap();
    let mut file = CaptureFile::open(&path).unwrap();
    assert_eq!(
        file.n_dispatches(),
        n,
        "every record received is in the file"
    );
    assert_eq!(file.dispatch(n - 1).unwrap().report.unwrap(), got[n - 1]);
}

/// A proxy between a debugger and a target that can cut both connections at once.
fn proxy(target: SocketAddr) -> (SocketAddr, Arc<AtomicBool>, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let cut = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&cut);
    let h = std::thread::spawn(move || {
        let (down, _) = listener.accept().unwrap();
        let up = TcpStream::connect_timeout(&target, T).unwrap();
        let pipe = |mut from: TcpStream, mut to: TcpStream, cut: Arc<AtomicBool>| {
            std::thread::spawn(move || {
                from.set_read_timeout(Some(Duration::from_millis(20)))
                    .unwrap();
                let mut buf = vec![0u8; 1 << 14];
                while !cut.load(Ordering::Relaxed) {
                    match from.read(&mut buf) {
                        Ok(0) => break,
                        // Cut mid-frame: forward only part of the last read.
                        Ok(n) if cut.load(Ordering::Relaxed) => {
                            let _ = to.write_all(&buf[..n / 2]);
                            break;
                        }
                        Ok(n) => {
                            if to.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        Err(e)
                            if matches!(
                                e.kind(),
                                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                            ) => {}
                        Err(_) => break,
                    }
                }
                let _ = from.shutdown(Shutdown::Both);
                let _ = to.shutdown(Shutdown::Both);
            })
        };
        let a = pipe(
            up.try_clone().unwrap(),
            down.try_clone().unwrap(),
            Arc::clone(&flag),
        );
        let b = pipe(down, up, flag);
        let _ = a.join();
        let _ = b.join();
    });
    (addr, cut, h)
}

#[test]
fn cutting_the_connection_keeps_the_session_and_a_new_attach_resumes() {
    let _g = serial();
    let t = spawn_target(
        loopback(),
        DemoConfig {
            dispatches_per_frame: 20,
            ..DemoConfig::default()
        },
        120.0,
    );
    let (via, cut, h) = proxy(t.addr);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cut.dscap");
    let mut store = LiveStore::create(&path, "cut", &StoreOptions::default());
    let c = snapshot_client(&via.to_string());
    let mut got = feed(&c, &mut store, 100);
    cut.store(true, Ordering::Relaxed);
    got.extend(feed(&c, &mut store, usize::MAX));
    h.join().unwrap();
    assert!(!c.is_connected());
    // The game did not wait for the cut debugger.
    t.runs(10, Duration::from_secs(2));
    let n = store.len();
    assert_eq!(n, got.len());
    store.flush().unwrap();
    // Unfinished (as a crash would leave it), the file opens with every record received.
    let mut file = CaptureFile::open(&path).unwrap();
    assert_eq!(file.n_dispatches(), n);
    assert_eq!(file.dispatch(n - 1).unwrap().report.unwrap(), got[n - 1]);
    drop(store);
    // A new attach resumes where the game is now.
    let mut again = LiveStore::create(
        &dir.path().join("again.dscap"),
        "again",
        &StoreOptions::default(),
    );
    let c2 = snapshot_client(&t.addr.to_string());
    feed(&c2, &mut again, 20);
    assert!(again.rows()[0].index > got[n - 1].index);
}
