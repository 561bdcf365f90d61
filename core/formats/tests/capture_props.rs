//! Property tests of the capture container (`capture.rs`) against a deliberately slow model: the plain
//! list of records written, and a byte-by-byte walk of the layout the module docs describe.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails by panicking"
)]

use std::cell::Cell;
use std::io::{self, Cursor, Read, Seek, SeekFrom, Write};
use std::rc::Rc;

use dispatchscope_formats::capture::{
    CaptureError, CaptureReader, CaptureWriter, FILE_HEADER_BYTES, RECORD_HEADER_BYTES, RecordKind,
    RecordMeta, TRAILER_BYTES, write_atomically,
};
use proptest::prelude::*;

/// One record to write: its kind, how its payload is made, and what the writer does around it.
#[derive(Clone, Debug)]
struct Spec {
    kind: u8,
    len_bytes: usize,
    seed: u64,
    /// Repetitive bytes that lz4 shrinks, else noise that it does not.
    repetitive: bool,
    compress: bool,
    flush_after: bool,
}

fn payload_of(spec: &Spec) -> Vec<u8> {
    let mut state = spec.seed | 1;
    (0..spec.len_bytes)
        .map(|i| {
            if spec.repetitive {
                (spec.seed as usize + i / 13) as u8
            } else {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            }
        })
        .collect()
}

/// The slow model: what was written, in order.
type Model = Vec<(RecordKind, Vec<u8>)>;

fn build(header: &[u8], specs: &[Spec], finish: bool) -> (Vec<u8>, Model) {
    let mut writer = CaptureWriter::to_sink(Vec::new(), header).unwrap();
    let mut model = Vec::new();
    for spec in specs {
        let payload = payload_of(spec);
        writer
            .append(RecordKind(spec.kind), &payload, spec.compress)
            .unwrap();
        model.push((RecordKind(spec.kind), payload));
        if spec.flush_after {
            writer.flush().unwrap();
        }
    }
    let bytes = if finish {
        writer.finish().unwrap()
    } else {
        writer.into_unfinished().unwrap()
    };
    (bytes, model)
}

/// A record as the layout walk sees it: kind byte, first byte, one past the last byte.
#[derive(Clone, Copy, Debug)]
struct RawRecord {
    kind: u8,
    start: u64,
    end: u64,
}

/// Walks the layout of the module docs over an intact capture, byte by byte.
fn layout(bytes: &[u8]) -> (u64, Vec<RawRecord>) {
    let u32_at = |at: u64| {
        let at = at as usize;
        u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
    };
    assert_eq!(&bytes[0..8], b"DSCAPTUR");
    assert_eq!(u32_at(8), 1);
    let header_end = FILE_HEADER_BYTES + u64::from(u32_at(16));
    let mut records = Vec::new();
    let mut pos = header_end;
    while pos < bytes.len() as u64 {
        let kind = bytes[pos as usize];
        let end = pos + RECORD_HEADER_BYTES + u64::from(u32_at(pos + 12));
        records.push(RawRecord {
            kind,
            start: pos,
            end,
        });
        pos = end;
        if kind == RecordKind::INDEX.0 {
            assert_eq!(&bytes[pos as usize..pos as usize + 8], b"DSCINDEX");
            assert_eq!(pos + TRAILER_BYTES, bytes.len() as u64);
            break;
        }
    }
    assert_eq!(
        pos + if records.last().is_some_and(|r| r.kind == 0xfe) {
            TRAILER_BYTES
        } else {
            0
        },
        bytes.len() as u64
    );
    (header_end, records)
}

/// Checks that `reader` holds exactly `expected`, in order, and reads each back equal.
fn check_holds<R: Read + Seek>(reader: &mut CaptureReader<R>, expected: &[(RecordKind, Vec<u8>)]) {
    let kinds: Vec<RecordKind> = reader.records().iter().map(|m| m.kind).collect();
    let expected_kinds: Vec<RecordKind> = expected.iter().map(|(k, _)| *k).collect();
    assert_eq!(kinds, expected_kinds);
    assert!(
        reader
            .records()
            .windows(2)
            .all(|w| w[0].seq < w[1].seq && w[0].end_offset_bytes() <= w[1].offset_bytes)
    );
    for (idx, (_, payload)) in expected.iter().enumerate() {
        assert_eq!(&reader.read_record(idx).unwrap(), payload, "record #{idx}");
    }
    let read: Vec<Vec<u8>> = reader.iter().map(|r| r.unwrap().1).collect();
    let payloads: Vec<Vec<u8>> = expected.iter().map(|(_, p)| p.clone()).collect();
    assert_eq!(read, payloads);
    for kind in 0..=255u8 {
        let kind = RecordKind(kind);
        let of_kind: Vec<&Vec<u8>> = expected
            .iter()
            .filter(|(k, _)| *k == kind)
            .map(|(_, p)| p)
            .collect();
        assert_eq!(reader.len_of_kind(kind), of_kind.len(), "kind {kind}");
        for (n, payload) in of_kind.iter().enumerate() {
            assert_eq!(
                &&reader.nth_of_kind(kind, n).unwrap(),
                payload,
                "{kind} #{n}"
            );
        }
        assert!(matches!(
            reader.nth_of_kind(kind, of_kind.len()),
            Err(CaptureError::NoSuchRecordOfKind { .. })
        ));
    }
}

fn spec_strategy(max_len_bytes: usize, flush_weight: u32) -> impl Strategy<Value = Spec> {
    (
        prop_oneof![Just(0x01u8), Just(0x02), Just(0x03), Just(0x04), 0u8..0xf0],
        prop_oneof![3 => 0..64usize, 1 => 0..=max_len_bytes],
        any::<u64>(),
        any::<bool>(),
        any::<bool>(),
        prop::bool::weighted(f64::from(flush_weight) / 100.0),
    )
        .prop_map(
            |(kind, len_bytes, seed, repetitive, compress, flush_after)| Spec {
                kind,
                len_bytes,
                seed,
                repetitive,
                compress,
                flush_after,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever is appended reads back equal, by position, by kind and in order, finished or not.
    #[test]
    fn round_trip(
        header in prop::collection::vec(any::<u8>(), 0..200),
        specs in prop::collection::vec(spec_strategy(64 << 10, 20), 0..24),
        finish in any::<bool>(),
    ) {
        let (bytes, model) = build(&header, &specs, finish);
        let (header_end, raw) = layout(&bytes);
        prop_assert_eq!(header_end, FILE_HEADER_BYTES + header.len() as u64);
        let mut reader = CaptureReader::from_bytes(bytes).unwrap();
        prop_assert_eq!(reader.header_payload(), &header[..]);
        prop_assert_eq!(reader.torn(), None);
        prop_assert_eq!(reader.is_finished(), finish);
        let raw_caller: Vec<(u8, u64)> = raw.iter().filter(|r| r.kind < 0xf0).map(|r| (r.kind, r.start)).collect();
        let metas: Vec<(u8, u64)> = reader.records().iter().map(|m| (m.kind.0, m.offset_bytes)).collect();
        prop_assert_eq!(metas, raw_caller);
        for (meta, spec) in reader.records().iter().zip(&specs) {
            prop_assert!(spec.compress || !meta.compressed);
        }
        check_holds(&mut reader, &model);
    }

    /// Every cut of a capture opens with exactly the records that end before the cut, reporting a torn
    /// tail exactly when the cut is not on a record boundary, or fails with a named error when it cuts
    /// the file header.
    #[test]
    fn every_truncation_keeps_a_prefix(
        header in prop::collection::vec(any::<u8>(), 0..40),
        specs in prop::collection::vec(spec_strategy(300, 30), 0..8),
        finish in any::<bool>(),
    ) {
        let (bytes, model) = build(&header, &specs, finish);
        let (header_end, raw) = layout(&bytes);
        for cut in 0..=bytes.len() as u64 {
            let opened = CaptureReader::from_bytes(bytes[..cut as usize].to_vec());
            if cut < header_end {
                let is_header_cut = matches!(opened, Err(CaptureError::HeaderCut { .. }));
                prop_assert!(is_header_cut, "cut at {}: {:?}", cut, opened.err());
                continue;
            }
            let mut reader = opened.unwrap();
            let complete: Vec<&RawRecord> = raw.iter().filter(|r| r.end <= cut).collect();
            let n_caller = complete.iter().filter(|r| r.kind < 0xf0).count();
            check_holds(&mut reader, &model[..n_caller]);
            let last_boundary = complete.last().map_or(header_end, |r| r.end);
            if cut == bytes.len() as u64 {
                prop_assert_eq!(reader.is_finished(), finish);
                prop_assert_eq!(reader.torn(), None);
            } else if cut == last_boundary {
                prop_assert_eq!(reader.torn(), None, "cut at {}", cut);
            } else {
                let torn = reader.torn().unwrap();
                prop_assert_eq!(torn.offset_bytes, last_boundary, "cut at {}: {}", cut, torn);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    /// Flipped bytes give a named error, or records that are a prefix of those written whose reads
    /// are equal to what was written or a named error; never a panic, never wrong bytes.
    #[test]
    fn byte_flips_never_give_wrong_bytes(
        header in prop::collection::vec(any::<u8>(), 0..24),
        specs in prop::collection::vec(spec_strategy(300, 30), 0..8),
        finish in any::<bool>(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..4),
    ) {
        let (mut bytes, model) = build(&header, &specs, finish);
        let intact = CaptureReader::from_bytes(bytes.clone()).unwrap();
        let intact_records: Vec<RecordMeta> = intact.records().to_vec();
        for (at, xor) in &flips {
            let at = at.index(bytes.len());
            bytes[at] ^= xor;
        }
        let len_bytes = bytes.len() as u64;
        let mut reader = match CaptureReader::from_bytes(bytes) {
            Ok(reader) => reader,
            Err(CaptureError::Io { action, source }) => {
                return Err(TestCaseError::fail(format!("unnamed io error {action}: {source}")));
            }
            Err(_) => return Ok(()),
        };
        let n = reader.records().len();
        prop_assert_eq!(reader.records(), &intact_records[..n]);
        if let Some(torn) = reader.torn() {
            prop_assert!(torn.offset_bytes <= len_bytes);
        }
        for (idx, (_, written)) in model.iter().enumerate().take(n) {
            match reader.read_record(idx) {
                Ok(payload) => prop_assert_eq!(&payload, written, "record #{}", idx),
                Err(CaptureError::Io { action, source }) => {
                    return Err(TestCaseError::fail(format!("unnamed io error {action}: {source}")));
                }
                Err(_) => {}
            }
        }
        for (idx, item) in reader.iter().enumerate() {
            if let Ok((meta, payload)) = item {
                prop_assert_eq!(meta, intact_records[idx]);
                prop_assert_eq!(&payload, &model[idx].1);
            }
        }
    }
}

fn small_specs() -> Vec<Spec> {
    let spec = |kind: u8, len_bytes, seed, flush_after| Spec {
        kind,
        len_bytes,
        seed,
        repetitive: seed % 2 == 0,
        compress: true,
        flush_after,
    };
    vec![
        spec(1, 40, 1, false),
        spec(4, 300, 2, false),
        spec(4, 0, 3, true),
        spec(2, 1000, 4, false),
        spec(4, 77, 5, false),
    ]
}

/// Opens `bytes` and checks that the error message contains `expected`.
fn check_open_error(bytes: Vec<u8>, expected: &str) {
    match CaptureReader::from_bytes(bytes) {
        Ok(_) => panic!("opened, expected an error containing {expected:?}"),
        Err(e) => assert!(
            e.to_string().contains(expected),
            "{e} does not contain {expected:?}"
        ),
    }
}

#[test]
fn header_errors_name_what_is_wrong() {
    let (bytes, _) = build(b"{}", &small_specs(), true);
    let with = |at: usize, patch: &[u8]| {
        let mut b = bytes.clone();
        b[at..at + patch.len()].copy_from_slice(patch);
        b
    };
    check_open_error(
        Vec::new(),
        "not a dispatchscope capture: the file is 0 bytes, but its header needs 24",
    );
    check_open_error(
        bytes[..25].to_vec(),
        "the file is 25 bytes, but its header needs 26",
    );
    check_open_error(
        with(0, b"NOTACAPT"),
        "not a dispatchscope capture: magic bytes [4e, 4f, 54",
    );
    check_open_error(
        with(8, &7u32.to_le_bytes()),
        "capture format version 7 is newer than this build reads (1)",
    );
    check_open_error(with(8, &0u32.to_le_bytes()), "capture format version 0");
    check_open_error(
        with(16, &u32::MAX.to_le_bytes()),
        "capture header payload of 4294967295 bytes exceeds the limit",
    );
    check_open_error(with(24, b"[]"), "capture header at byte 0x0: checksum 0x");
}

#[test]
fn a_damaged_record_is_an_error_naming_its_offset_and_the_rest_still_read() {
    let (mut bytes, model) = build(b"", &small_specs(), true);
    let (_, raw) = layout(&bytes);
    let second = raw[1];
    bytes[(second.start + RECORD_HEADER_BYTES) as usize] ^= 0x40;
    let mut reader = CaptureReader::from_bytes(bytes).unwrap();
    assert!(reader.is_finished());
    let error = reader
        .nth_of_kind(RecordKind::DISPATCH, 0)
        .unwrap_err()
        .to_string();
    let prefix = format!("record at byte 0x{:x}: checksum 0x", second.start);
    assert!(
        error.starts_with(&prefix) && error.contains(", computed 0x"),
        "{error}"
    );
    let oks: Vec<bool> = reader.iter().map(|r| r.is_ok()).collect();
    assert_eq!(oks, [true, false, true, true, true]);
    assert_eq!(
        reader.nth_of_kind(RecordKind::DISPATCH, 2).unwrap(),
        model[4].1
    );
}

#[test]
fn a_damaged_trailer_falls_back_to_the_walk_and_keeps_every_record() {
    let (mut bytes, model) = build(b"h", &small_specs(), true);
    let trailer_at = bytes.len() - TRAILER_BYTES as usize;
    bytes[trailer_at + 9] ^= 1;
    let mut reader = CaptureReader::from_bytes(bytes).unwrap();
    assert!(!reader.is_finished());
    let torn = reader.torn().unwrap().clone();
    assert_eq!(torn.offset_bytes, trailer_at as u64);
    assert!(torn.to_string().contains("no usable trailer"), "{torn}");
    check_holds(&mut reader, &model);
}

#[test]
fn appending_a_container_kind_is_refused() {
    let mut writer = CaptureWriter::to_sink(Vec::new(), b"").unwrap();
    let error = writer.append(RecordKind::INDEX, b"x", false).unwrap_err();
    assert_eq!(
        error.to_string(),
        "record kind INDEX (0xfe) is reserved for the container (kinds 0xf0..=0xff)"
    );
    writer.append(RecordKind::DISPATCH, b"x", false).unwrap();
    let mut reader = CaptureReader::from_bytes(writer.finish().unwrap()).unwrap();
    check_holds(&mut reader, &[(RecordKind::DISPATCH, b"x".to_vec())]);
}

/// A reader over memory that counts the bytes read through it.
struct Counting {
    inner: Cursor<Vec<u8>>,
    read_bytes: Rc<Cell<u64>>,
}

impl Read for Counting {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read_bytes.set(self.read_bytes.get() + n as u64);
        Ok(n)
    }
}

impl Seek for Counting {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        self.inner.seek(pos)
    }
}

fn counting(bytes: Vec<u8>) -> (CaptureReader<Counting>, Rc<Cell<u64>>) {
    let read_bytes = Rc::new(Cell::new(0));
    let reader = CaptureReader::from_reader(Counting {
        inner: Cursor::new(bytes),
        read_bytes: read_bytes.clone(),
    });
    (reader.unwrap(), read_bytes)
}

/// 400 incompressible 16 KiB dispatches (6.4 MB), flushed every 50 when `flush`.
fn big_capture(finish: bool, flush: bool) -> (Vec<u8>, Model) {
    let specs: Vec<Spec> = (0..400)
        .map(|i| Spec {
            kind: RecordKind::DISPATCH.0,
            len_bytes: 16 << 10,
            seed: i,
            repetitive: false,
            compress: true,
            flush_after: flush && i % 50 == 45,
        })
        .collect();
    build(b"{\"session\":1}", &specs, finish)
}

#[test]
fn opening_a_finished_capture_and_reading_one_dispatch_reads_little() {
    let (bytes, model) = big_capture(true, false);
    let total = bytes.len() as u64;
    let (mut reader, read_bytes) = counting(bytes);
    let on_open = read_bytes.get();
    assert!(on_open < 32 << 10, "open read {on_open} of {total} bytes");
    let payload = reader.nth_of_kind(RecordKind::DISPATCH, 200).unwrap();
    assert_eq!(payload, model[200].1);
    let for_one = read_bytes.get() - on_open;
    assert_eq!(for_one, RECORD_HEADER_BYTES + (16 << 10));
}

#[test]
fn reopening_an_unfinished_capture_with_checkpoints_reads_headers_and_the_tail() {
    let (bytes, model) = big_capture(false, true);
    let total = bytes.len() as u64;
    let (mut reader, read_bytes) = counting(bytes.clone());
    let on_open = read_bytes.get();
    // The last checkpoint follows record 395; four records after it are read whole.
    assert!(on_open < 100 << 10, "open read {on_open} of {total} bytes");
    assert!(!reader.is_finished());
    assert_eq!(reader.torn(), None);
    check_holds(&mut reader, &model);

    // Without checkpoints every payload is read on open.
    let (bytes, _) = big_capture(false, false);
    let total = bytes.len() as u64;
    let (_, read_bytes) = counting(bytes);
    assert!(
        read_bytes.get() >= total - 100,
        "open read {} of {total} bytes",
        read_bytes.get()
    );
}

#[test]
fn a_checkpoint_that_disagrees_makes_the_walk_check_every_crc() {
    // Damage the header of a record the first checkpoint covers: its kind byte.
    let (mut bytes, model) = build(b"", &small_specs(), false);
    let (_, raw) = layout(&bytes);
    bytes[raw[1].start as usize] = 0x07;
    let reader = CaptureReader::from_bytes(bytes).unwrap();
    let torn = reader.torn().unwrap();
    assert_eq!(torn.offset_bytes, raw[1].start);
    assert!(torn.reason.contains("checksum"), "{torn}");
    assert_eq!(reader.records().len(), 1);
    assert_eq!(reader.records()[0].kind, model[0].0);
}

#[test]
fn files_round_trip_finished_flushed_and_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("session.dscap");
    let specs = small_specs();

    let mut writer = CaptureWriter::create(&path, b"{\"title\":\"file\"}").unwrap();
    let mut model = Vec::new();
    for spec in &specs {
        let payload = payload_of(spec);
        writer
            .append(RecordKind(spec.kind), &payload, spec.compress)
            .unwrap();
        model.push((RecordKind(spec.kind), payload));
        writer.flush().unwrap();
    }
    // A writer dropped mid-session leaves an unfinished capture with every flushed record.
    drop(writer);
    let mut reader = CaptureReader::open(&path).unwrap();
    assert!(!reader.is_finished());
    assert_eq!(reader.torn(), None);
    assert_eq!(reader.header_payload(), b"{\"title\":\"file\"}");
    check_holds(&mut reader, &model);

    let mut writer = CaptureWriter::create(&path, b"").unwrap();
    for (kind, payload) in &model {
        writer.append(*kind, payload, false).unwrap();
    }
    writer.finish().unwrap();
    let mut reader = CaptureReader::open(&path).unwrap();
    assert!(reader.is_finished());
    check_holds(&mut reader, &model);
}

fn dir_entries(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn write_atomically_replaces_on_success_and_leaves_dest_untouched_on_failure() {
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("saved.dscap");
    std::fs::write(&dest, b"old capture").unwrap();

    let failed = write_atomically(&dest, |file| {
        file.write_all(b"half a new capture")
            .map_err(|source| CaptureError::Io {
                action: "test write".into(),
                source,
            })?;
        Err(CaptureError::ReservedKind {
            kind: RecordKind::INDEX,
        })
    });
    assert!(matches!(failed, Err(CaptureError::ReservedKind { .. })));
    assert_eq!(std::fs::read(&dest).unwrap(), b"old capture");
    assert_eq!(dir_entries(dir.path()), ["saved.dscap"]);

    let (_, model) = build(b"", &small_specs(), true);
    write_atomically(&dest, |file| {
        let mut writer = CaptureWriter::to_sink(file, b"saved")?;
        for (kind, payload) in &model {
            writer.append(*kind, payload, true)?;
        }
        writer.finish().map(|_| ())
    })
    .unwrap();
    assert_eq!(dir_entries(dir.path()), ["saved.dscap"]);
    let mut reader = CaptureReader::open(&dest).unwrap();
    assert_eq!(reader.header_payload(), b"saved");
    check_holds(&mut reader, &model);

    let fresh = dir.path().join("fresh.dscap");
    write_atomically(&fresh, |file| {
        file.write_all(b"x").map_err(|source| CaptureError::Io {
            action: "test write".into(),
            source,
        })
    })
    .unwrap();
    assert_eq!(std::fs::read(&fresh).unwrap(), b"x");

    let missing_dir = dir.path().join("no-such-dir").join("x.dscap");
    assert!(matches!(
        write_atomically(&missing_dir, |_| Ok(())),
        Err(CaptureError::Io { .. })
    ));
    let no_name = write_atomically(std::path::Path::new("/"), |_| Ok(())).unwrap_err();
    assert!(
        matches!(no_name, CaptureError::BadDestination { .. }),
        "{no_name}"
    );
    assert_eq!(dir_entries(dir.path()), ["fresh.dscap", "saved.dscap"]);
}
