//! A capture's dictionary (issue 31): records appended with `compress` after
//! [`CaptureWriter::set_dictionary`] are lz4 blocks against it, far smaller than alone, and read
//! back byte for byte through the index, through a walk of an unfinished file, by prefix and by
//! offset; a record that names a dictionary the file lacks, or bit 1 without bit 0, is an error
//! that says so, never garbage.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails by panicking"
)]

use std::io::Cursor;

use dispatchscope_formats::capture::{
    CaptureError, CaptureReader, CaptureWriter, RECORD_HEADER_BYTES, RecordKind, read_record_at,
};

/// A dispatch-like record: a head of repeated names and limits, then a few values that change.
fn record(i: u32) -> Vec<u8> {
    let mut v = Vec::new();
    for name in [
        "index",
        "program",
        "label",
        "slots",
        "holder",
        "offset",
        "write_back",
    ] {
        v.extend_from_slice(name.as_bytes());
        v.extend_from_slice(b"\x00\x01device min_storage_buffer_offset_alignment 256;");
    }
    v.extend_from_slice(&i.to_le_bytes());
    v.extend_from_slice(&(i * 7 % 13).to_le_bytes());
    v.extend_from_slice(format!("run 305 update {}", i % 5).as_bytes());
    v
}

const N: u32 = 300;
const SAMPLES: u32 = 20;

fn write() -> (Vec<u8>, Vec<u64>) {
    let mut w = CaptureWriter::to_sink(Vec::new(), b"{}").unwrap();
    let mut dictionary = Vec::new();
    for i in 0..SAMPLES {
        dictionary.extend_from_slice(&record(i));
        w.append(RecordKind::DISPATCH, &record(i), false).unwrap();
    }
    w.set_dictionary(&dictionary).unwrap();
    assert_eq!(w.dictionary(), Some(dictionary.as_slice()));
    let mut offsets = Vec::new();
    for i in SAMPLES..N {
        let seq = w.append(RecordKind::DISPATCH, &record(i), true).unwrap();
        offsets.push(w.record_offset(seq).unwrap());
        if i % 50 == 0 {
            w.flush().unwrap();
        }
    }
    (w.finish().unwrap(), offsets)
}

fn check_every_record(r: &mut CaptureReader<Cursor<Vec<u8>>>) {
    assert_eq!(
        r.records().len(),
        N as usize,
        "the DICTIONARY record is the container's"
    );
    for i in 0..N {
        assert_eq!(r.read_record(i as usize).unwrap(), record(i), "record {i}");
    }
    let idx = (N - 1) as usize;
    assert_eq!(r.read_prefix(idx, 9).unwrap(), record(N - 1)[..9]);
}

#[test]
fn records_compressed_against_the_dictionary_read_back_by_index_walk_prefix_and_offset() {
    let (bytes, offsets) = write();
    let mut r = CaptureReader::from_bytes(bytes.clone()).unwrap();
    assert!(r.is_finished());
    let metas = r.records().to_vec();
    let plain = metas[0].stored_len_bytes;
    let against = metas[N as usize - 1];
    assert!(against.compressed && against.dictionary);
    assert!(
        against.stored_len_bytes * 8 < plain,
        "{} bytes against the dictionary, {plain} alone",
        against.stored_len_bytes
    );
    let alone = lz4_flex::block::compress(&record(N - 1)).len() as u32;
    assert!(
        against.stored_len_bytes * 4 < alone,
        "lz4 alone: {alone} bytes"
    );
    check_every_record(&mut r);

    // An unfinished capture: the walk finds the dictionary too.
    let mut w = CaptureWriter::to_sink(Vec::new(), b"{}").unwrap();
    w.set_dictionary(&record(0)).unwrap();
    for i in 0..N {
        w.append(RecordKind::DISPATCH, &record(i), true).unwrap();
    }
    let unfinished = w.into_unfinished().unwrap();
    let mut r = CaptureReader::from_bytes(unfinished).unwrap();
    assert!(!r.is_finished());
    check_every_record(&mut r);

    // By offset, as a live store reads back what it wrote.
    let dictionary: Vec<u8> = (0..SAMPLES).flat_map(record).collect();
    for (k, &offset) in offsets.iter().enumerate().step_by(37) {
        let got = read_record_at(
            Cursor::new(&bytes),
            offset,
            RecordKind::DISPATCH,
            Some(&dictionary),
        )
        .unwrap();
        assert_eq!(got, record(SAMPLES + k as u32));
    }
    let without = read_record_at(Cursor::new(&bytes), offsets[0], RecordKind::DISPATCH, None);
    match without {
        Err(CaptureError::Decompress { reason, .. }) => {
            assert!(reason.contains("dictionary"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    let wrong_kind = read_record_at(Cursor::new(&bytes), offsets[0], RecordKind::EVENTS, None);
    assert!(
        matches!(wrong_kind, Err(CaptureError::RecordHeader { .. })),
        "{wrong_kind:?}"
    );
}

#[test]
fn a_damaged_dictionary_or_a_lone_dictionary_flag_is_an_error_not_garbage() {
    let (bytes, offsets) = write();
    // The DICTIONARY record comes right after the first SAMPLES records: damage its payload.
    let r = CaptureReader::from_bytes(bytes.clone()).unwrap();
    let last_plain = r.records()[SAMPLES as usize - 1];
    let dictionary_payload = last_plain.end_offset_bytes() + RECORD_HEADER_BYTES;
    let mut damaged = bytes.clone();
    damaged[dictionary_payload as usize + 3] ^= 0x40;
    let mut r = CaptureReader::from_bytes(damaged).unwrap();
    assert_eq!(
        r.read_record(0).unwrap(),
        record(0),
        "a plain record is unaffected"
    );
    let err = r.read_record(SAMPLES as usize).unwrap_err();
    assert!(
        matches!(err, CaptureError::RecordChecksum { .. }),
        "{err:?}"
    );

    // Bit 1 without bit 0 on a record: refused by its flags.
    let mut lone = bytes;
    let at = offsets[0] as usize;
    lone[at + 1] = 2;
    let err =
        read_record_at(Cursor::new(&lone), offsets[0], RecordKind::DISPATCH, None).unwrap_err();
    assert!(err.to_string().contains("flags"), "{err}");
}
