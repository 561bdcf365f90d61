//! The capture writer's compact list of records (issue 18: about 5 bytes a record, every 256th
//! offset), which a live store uses to find any dispatch: after 100,000 records every record's
//! offset and the n-th record of a kind agree with what a reader finds in the file, the index the
//! writer builds from it opens, and a torn file keeps every complete record.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails by panicking"
)]

use dispatchscope_formats::capture::{CaptureReader, CaptureWriter, RecordKind};

const N: u64 = 100_000;
const DISPATCH: RecordKind = RecordKind::DISPATCH;
const EVENTS: RecordKind = RecordKind::EVENTS;

/// Record `i`'s kind and payload: mostly dispatches, an events record every few, lengths varied
/// (some compressible, some not, some empty).
fn record(i: u64) -> (RecordKind, Vec<u8>) {
    let kind = if i % 7 == 3 { EVENTS } else { DISPATCH };
    let len = ((i * 2_654_435_761) % 97) as usize;
    let payload = (0..len)
        .map(|j| {
            if i.is_multiple_of(2) {
                (i as u8) ^ (j as u8)
            } else {
                0x5a
            }
        })
        .collect();
    (kind, payload)
}

fn write(n: u64) -> CaptureWriter<Vec<u8>> {
    let mut w = CaptureWriter::to_sink(Vec::new(), b"{}").unwrap();
    for i in 0..n {
        let (kind, payload) = record(i);
        w.append(kind, &payload, i.is_multiple_of(3)).unwrap();
        if i % 10_000 == 9_999 {
            w.flush().unwrap();
        }
    }
    w
}

#[test]
fn any_record_is_found_from_the_writers_list_after_100000_records() {
    let w = write(N);
    let n_records = w.n_records();
    assert!(n_records > N, "checkpoints are records too");
    let offsets: Vec<u64> = (0..n_records)
        .map(|seq| w.record_offset(seq).unwrap())
        .collect();
    let kinds: Vec<RecordKind> = (0..n_records)
        .map(|seq| w.record_kind(seq).unwrap())
        .collect();
    assert_eq!(w.record_offset(n_records), None);
    assert_eq!(w.record_kind(n_records), None);
    // The n-th dispatch from a few starting points, against a count of the kinds.
    let dispatches: Vec<u64> = (0..n_records)
        .filter(|&s| kinds[s as usize] == DISPATCH)
        .collect();
    for &(from_dispatch, n) in &[
        (0usize, 0u64),
        (0, 63),
        (1_000, 5),
        (50_000, 63),
        (80_000, 0),
    ] {
        let from = dispatches[from_dispatch];
        assert_eq!(
            w.nth_of_kind(from, DISPATCH, n),
            Some(dispatches[from_dispatch + n as usize])
        );
    }
    assert_eq!(w.nth_of_kind(0, DISPATCH, dispatches.len() as u64), None);
    let bytes = w.finish().unwrap();
    let r = CaptureReader::from_bytes(bytes).unwrap();
    assert!(r.is_finished(), "the index written in pieces opens");
    // The reader lists the records it was given (not the container's checkpoints), by seq.
    assert_eq!(r.records().len() as u64, N);
    for meta in r.records() {
        assert_eq!(
            meta.offset_bytes, offsets[meta.seq as usize],
            "record {}",
            meta.seq
        );
        assert_eq!(meta.kind, kinds[meta.seq as usize], "record {}", meta.seq);
    }
    // Every payload reads back through the index.
    let mut r = r;
    let mut i = 0;
    for idx in 0..N as usize {
        assert_eq!(r.read_record(idx).unwrap(), record(i).1, "record {idx}");
        i += 1;
    }
    assert_eq!(i, N);
}

#[test]
fn a_torn_file_keeps_every_complete_record() {
    let w = write(N);
    let n_records = w.n_records();
    let offsets: Vec<u64> = (0..n_records)
        .map(|seq| w.record_offset(seq).unwrap())
        .collect();
    let kinds: Vec<RecordKind> = (0..n_records)
        .map(|seq| w.record_kind(seq).unwrap())
        .collect();
    let whole = w.into_unfinished().unwrap();
    let last = *offsets.last().unwrap() as usize;
    // Cut inside the last record, inside its header, just before it, and inside one a third of
    // the way in.
    let early = offsets[(n_records / 3) as usize] as usize + 7;
    for cut in [whole.len() - 1, last + 3, last, early] {
        let r = CaptureReader::from_bytes(whole[..cut].to_vec()).unwrap();
        assert!(!r.is_finished());
        // Every record that ends at or before the cut, checkpoints apart.
        let complete = (0..n_records as usize)
            .filter(|&s| kinds[s] != RecordKind::CHECKPOINT)
            .filter(|&s| offsets.get(s + 1).map_or(whole.len(), |&o| o as usize) <= cut)
            .count();
        assert_eq!(r.records().len(), complete, "cut at {cut}");
        for m in r.records() {
            assert_eq!(m.offset_bytes, offsets[m.seq as usize]);
        }
    }
}
