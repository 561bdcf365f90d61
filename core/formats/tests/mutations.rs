//! The bad-input suite (issue 13): valid samples and captures, mutated (truncations, byte flips,
//! field smashes, and the extreme numbers 0, 1, 2^32-1, 2^63 and 2^64-1 in every numeric field),
//! decoded and run in-process. Each must give a named error or a successful run, never a panic.
//!
//! The inputs are the shipped samples, so a new sample is new input here without any edit. The
//! property tests run `PROPTEST_CASES` cases each (64 unless set), which keeps `cargo test` in
//! seconds on a 2-core machine; `PROPTEST_CASES=5000 cargo test -p dispatchscope-formats --test
//! mutations` runs more. The smash of every numeric field with every extreme is exhaustive.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is the test failing, with its message"
)]

use dispatchscope_formats::capture::CaptureReader;
use dispatchscope_formats::sample::Sample;
use dispatchscope_formats::session::{CaptureFile, write_capture};
use dispatchscope_formats::shipped;
use proptest::prelude::*;
use serde_json::Value;

/// The extreme numbers every numeric field is smashed with.
const EXTREMES: [u64; 5] = [0, 1, (1 << 32) - 1, 1 << 63, u64::MAX];

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

fn shipped_texts() -> Vec<&'static str> {
    let texts: Vec<&'static str> = shipped::names().filter_map(shipped::sample_text).collect();
    assert!(!texts.is_empty(), "no shipped samples");
    texts
}

/// Decodes and runs a sample text. An error must name what is wrong (a non-empty message); a
/// panic fails the test by itself.
fn decode_and_run(text: &str) {
    match Sample::from_json(text) {
        Ok(sample) => {
            if let Err(e) = sample.run() {
                assert!(!e.to_string().is_empty());
            }
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
}

/// Opens capture bytes and, for what opens, reads every dispatch record and runs the sample.
fn open_and_run(bytes: Vec<u8>) {
    let Ok(reader) = CaptureReader::from_bytes(bytes) else {
        return;
    };
    let Ok(mut file) = CaptureFile::from_reader("mutated".into(), reader) else {
        return;
    };
    for n in 0..file.n_dispatches() {
        let _ = file.dispatch(n);
    }
    if let Ok((sample, _)) = file.to_sample()
        && let Err(e) = sample.run()
    {
        assert!(!e.to_string().is_empty());
    }
}

fn capture_bytes(sample: &Sample) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.dscap");
    write_capture(sample, None, &path).unwrap();
    std::fs::read(&path).unwrap()
}

/// Every leaf of `v` that holds a number: a JSON number, or a `"0x…"` hex string (addresses and
/// 64-bit sizes), as a JSON pointer.
fn numeric_leaves(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Number(_) => out.push(at),
        Value::String(s) if s.starts_with("0x") => out.push(at),
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                numeric_leaves(x, format!("{at}/{i}"), out);
            }
        }
        Value::Object(o) => {
            for (k, x) in o {
                numeric_leaves(
                    x,
                    format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        _ => {}
    }
}

/// Every leaf of any kind, as a JSON pointer.
fn all_leaves(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                all_leaves(x, format!("{at}/{i}"), out);
            }
        }
        Value::Object(o) => {
            for (k, x) in o {
                all_leaves(
                    x,
                    format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        _ => out.push(at),
    }
}

/// `v` with the number at `pointer` replaced by `n`, in the leaf's own representation.
fn smashed(v: &Value, pointer: &str, n: u64) -> Value {
    let mut v = v.clone();
    if let Some(leaf) = v.pointer_mut(pointer) {
        *leaf = match leaf {
            Value::String(_) => Value::String(format!("{n:#x}")),
            _ => Value::from(n),
        };
    }
    v
}

/// The replacements a field smash may put in a leaf: other kinds of value.
fn smash_value(k: usize) -> Value {
    match k % 6 {
        0 => Value::Null,
        1 => Value::Bool(true),
        2 => Value::String("0x".into()),
        3 => Value::String("not a value".into()),
        4 => serde_json::json!([]),
        _ => serde_json::json!({ "x": -1 }),
    }
}

#[test]
fn every_numeric_field_of_every_sample_takes_every_extreme() {
    let mut runs = 0usize;
    for text in shipped_texts() {
        let v: Value = serde_json::from_str(text).unwrap();
        let mut leaves = Vec::new();
        numeric_leaves(&v, String::new(), &mut leaves);
        assert!(!leaves.is_empty());
        for pointer in &leaves {
            for n in EXTREMES {
                decode_and_run(&smashed(&v, pointer, n).to_string());
                runs += 1;
            }
        }
    }
    assert!(runs > 1000, "only {runs} smashed samples");
}

#[test]
fn every_truncation_of_a_sample_is_a_named_error() {
    for text in shipped_texts() {
        // Every cut of the smallest sample; evenly spaced cuts of the others.
        let step = (text.len() / 400).max(1);
        for cut in (0..text.len()).step_by(step) {
            if text.is_char_boundary(cut) {
                assert!(Sample::from_json(&text[..cut]).is_err(), "cut at {cut}");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    /// A sample with bytes flipped, then decoded and run.
    #[test]
    fn a_sample_with_flipped_bytes_never_panics(
        pick in any::<prop::sample::Index>(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
    ) {
        let texts = shipped_texts();
        let mut bytes = texts[pick.index(texts.len())].as_bytes().to_vec();
        for (at, b) in &flips {
            let i = at.index(bytes.len());
            bytes[i] ^= b | 1;
        }
        decode_and_run(&String::from_utf8_lossy(&bytes));
    }

    /// A sample with a few fields smashed: numbers to extremes or random values, any leaf to
    /// another kind of value.
    #[test]
    fn a_sample_with_smashed_fields_never_panics(
        pick in any::<prop::sample::Index>(),
        smashes in prop::collection::vec(
            (any::<prop::sample::Index>(), any::<u64>(), 0usize..12),
            1..5,
        ),
    ) {
        let texts = shipped_texts();
        let mut v: Value = serde_json::from_str(texts[pick.index(texts.len())]).unwrap();
        for (at, n, how) in &smashes {
            let mut numeric = Vec::new();
            numeric_leaves(&v, String::new(), &mut numeric);
            let mut any_leaf = Vec::new();
            all_leaves(&v, String::new(), &mut any_leaf);
            match how {
                0..=4 => {
                    let p = &numeric[at.index(numeric.len())];
                    v = smashed(&v, p, EXTREMES[*how]);
                }
                5..=7 => {
                    let p = &numeric[at.index(numeric.len())];
                    v = smashed(&v, p, *n >> (n % 64));
                }
                _ => {
                    let p = any_leaf[at.index(any_leaf.len())].clone();
                    if let Some(leaf) = v.pointer_mut(&p) {
                        *leaf = smash_value(*how);
                    }
                }
            }
        }
        decode_and_run(&v.to_string());
    }

    /// A capture of a sample (itself perhaps with one number smashed), truncated or with bytes
    /// flipped, then opened, read and run.
    #[test]
    fn a_mutated_capture_never_panics(
        pick in any::<prop::sample::Index>(),
        smash in prop::option::of((any::<prop::sample::Index>(), 0usize..5)),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
    ) {
        let texts = shipped_texts();
        let mut v: Value = serde_json::from_str(texts[pick.index(texts.len())]).unwrap();
        if let Some((at, e)) = smash {
            let mut numeric = Vec::new();
            numeric_leaves(&v, String::new(), &mut numeric);
            v = smashed(&v, &numeric[at.index(numeric.len())], EXTREMES[e]);
        }
        // A smash may make the sample unreadable; its capture is then not made (the sample
        // decoder's errors are the other tests').
        let Ok(sample) = Sample::from_json(&v.to_string()) else {
            return Ok(());
        };
        let mut bytes = capture_bytes(&sample);
        if truncate {
            bytes.truncate(cut.index(bytes.len() + 1));
        }
        for (at, b) in &flips {
            if bytes.is_empty() {
                break;
            }
            let i = at.index(bytes.len());
            bytes[i] ^= b | 1;
        }
        open_and_run(bytes);
    }
}

/// Every shipped sample's dispatches as version 2 DISPATCH records (the live protocol's message
/// as it came, what a live store writes; `dispatchscope_formats::message`).
fn v2_records() -> Vec<Vec<u8>> {
    records_with(dispatchscope_formats::message::Rows::Fixed)
}

/// The same dispatches as version 3 records: their access lists in packed rows
/// (`dispatchscope_formats::packed`), what a live store writes now.
fn v3_records() -> Vec<Vec<u8>> {
    records_with(dispatchscope_formats::message::Rows::Packed)
}

fn records_with(rows: dispatchscope_formats::message::Rows) -> Vec<Vec<u8>> {
    use dispatchscope_formats::message;
    let mut out = Vec::new();
    for text in shipped_texts() {
        let sample = Sample::from_json(text).unwrap();
        let Ok(run) = sample.run() else { continue };
        for (input, report) in sample.dispatches().zip(&run) {
            let mut m = Vec::new();
            message::encode_whole(rows, report.index, input, report, &mut m).unwrap();
            let mut record = Vec::new();
            message::encode_record(rows, &m, &[], &mut record);
            out.push(record);
        }
    }
    assert!(!out.is_empty(), "the shipped samples have dispatches");
    out
}

#[test]
fn every_truncation_of_a_version_2_or_3_record_is_a_named_error() {
    use dispatchscope_formats::session::DispatchRecord;
    let (v2, v3) = (v2_records(), v3_records());
    for record in v2.iter().take(8).chain(v3.iter().take(8)) {
        assert!(DispatchRecord::from_payload(record).is_ok());
        for cut in 0..record.len() {
            let e = DispatchRecord::from_payload(&record[..cut]).unwrap_err();
            assert!(!e.to_string().is_empty(), "cut at {cut}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    /// A version 2 DISPATCH record with bytes flipped reads or is a named error, never a panic.
    #[test]
    fn a_version_2_or_3_record_with_flipped_bytes_never_panics(
        pick in any::<prop::sample::Index>(),
        packed in any::<bool>(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
    ) {
        let records = if packed { v3_records() } else { v2_records() };
        let mut b = records[pick.index(records.len())].clone();
        for (at, x) in &flips {
            let i = at.index(b.len());
            b[i] ^= x | 1;
        }
        if let Err(e) = dispatchscope_formats::session::DispatchRecord::from_payload(&b) {
            prop_assert!(!e.to_string().is_empty());
        }
    }
}

/// Memory checkpoints in the binary form (issue 41): a 16 GiB memory's whole state, then the
/// changes after each step of a write-watch, targets and a reservation made and released.
fn memory_payloads() -> Vec<Vec<u8>> {
    use dispatchscope_core::addr::ByteRange;
    use dispatchscope_core::input::{Backing, Event};
    use dispatchscope_core::memory::GuestMemory;
    use dispatchscope_formats::checkpoint::{MemoryDelta, MemoryState, MemoryWriter};
    const BASE: u64 = 0x1_0000_0000;
    let mut m = GuestMemory::new(0x1000).unwrap();
    m.apply(&Event::Reserve {
        range: ByteRange::new(BASE, BASE + (16 << 30)),
        readable: true,
        writable: true,
        committed: true,
        backing: Backing::Private,
        host_base: None,
    })
    .unwrap();
    let page = |n: u64| ByteRange::new(BASE + n * 0x1000, BASE + (n + 1) * 0x1000);
    for n in 0..64u64 {
        m.apply(&Event::Guard {
            range: page(n * 65_537),
        })
        .unwrap();
    }
    let mut w = MemoryWriter::default();
    let mut out = vec![w.next_state(&MemoryState::of(&m)).unwrap()];
    let steps: Vec<Vec<Event>> = vec![
        vec![
            Event::Unguard { range: page(0) },
            Event::Guard { range: page(5) },
        ],
        vec![Event::AddTarget {
            id: 7,
            name: "shadow map".into(),
            range: ByteRange::new(BASE + 0x10, BASE + 0x9000),
        }],
        vec![Event::Write {
            address: BASE + 0x20,
            bytes: vec![1; 16],
        }],
        vec![Event::Reserve {
            range: ByteRange::new(0x1000_0000, 0x1010_0000),
            readable: true,
            writable: false,
            committed: false,
            backing: Backing::Shared,
            host_base: None,
        }],
        vec![
            Event::RemoveTarget { id: 7 },
            Event::Release { base: 0x1000_0000 },
        ],
    ];
    for events in steps {
        let at = m.state_changes();
        for e in &events {
            m.apply(e).unwrap();
        }
        let d = MemoryDelta::since(&m, at).unwrap();
        out.push(w.next_delta(&d).unwrap().unwrap());
    }
    out
}

#[test]
fn every_truncation_of_a_memory_payload_is_a_named_error() {
    use dispatchscope_formats::checkpoint::check_memory_payload;
    let payloads = memory_payloads();
    assert!(!check_memory_payload(&payloads[0]).unwrap(), "whole");
    for p in &payloads {
        check_memory_payload(p).unwrap();
        for cut in 0..p.len() {
            let e = check_memory_payload(&p[..cut]).unwrap_err();
            assert!(!e.to_string().is_empty(), "cut at {cut}");
        }
    }
}

/// The payloads as a capture's MEMORY_STATE records, one after each DISPATCH record.
fn memory_capture(payloads: &[Vec<u8>]) -> Vec<u8> {
    use dispatchscope_formats::capture::{CaptureWriter, RecordKind};
    use dispatchscope_formats::checkpoint::MEMORY_STATE;
    let meta = serde_json::json!({
        "format": dispatchscope_formats::session::CAPTURE_FORMAT,
        "sample_version": 1,
        "title": "memory",
        "description": "",
        "device": dispatchscope_core::input::DeviceLimits::default(),
    });
    let mut w = CaptureWriter::to_sink(Vec::new(), meta.to_string().as_bytes()).unwrap();
    for p in payloads {
        w.append(RecordKind::DISPATCH, b"{}", false).unwrap();
        w.append(MEMORY_STATE, p, true).unwrap();
    }
    w.finish().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    /// A memory payload with flipped bytes reads, applies and rebuilds, or is a named error at
    /// each step, never a panic.
    #[test]
    fn a_memory_payload_with_flipped_bytes_never_panics(
        pick in any::<prop::sample::Index>(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
    ) {
        let mut payloads = memory_payloads();
        let k = pick.index(payloads.len());
        for (at, x) in &flips {
            let i = at.index(payloads[k].len());
            payloads[k][i] ^= x | 1;
        }
        let reader = CaptureReader::from_bytes(memory_capture(&payloads)).unwrap();
        let mut file = CaptureFile::from_reader("memory".into(), reader).unwrap();
        let states = file.states();
        for pos in 0..payloads.len() {
            match file.memory_at(&states, pos) {
                Ok(m) => prop_assert!(m.is_some()),
                Err(e) => prop_assert!(!e.to_string().is_empty()),
            }
        }
    }
}
