//! The write history of a few guest bytes ([`History`]) from a session on disk: a sample, replayed
//! on the CPU reference, or a capture, read through its index without replaying anything.
//!
//! A capture is read only where it can touch the bytes:
//! - MEMORY records: only their first 12 bytes (address and length) through
//!   [`CaptureFile::read_prefix`], then in full the ones that hold a watched byte;
//! - EVENTS records: every one (they are small, and the order of deferred copies needs them all);
//! - DISPATCH records: each is decompressed; while no copy is deferred, only its last bytes are
//!   parsed (the report's marks (C1), write-backs' ranges (O8) and instrumented section come
//!   after its accesses); otherwise it is read lean (also the count of copies C3 wrote before
//!   it), skipping the access lists without building them; only a dispatch whose marks or
//!   write-backs reach a watched byte, or that has a section or no report, is decoded whole.
//!
//! A device store lands only in a chunk whose lookup hit, and every such chunk is marked (C1), so a
//! dispatch with no mark over the bytes stored nothing there; a bound store reaches guest memory
//! only through its holder's write-back.
//! Dispatches and events are numbered by their position in the session, from 0, as the app's list
//! and `explain` number them.

use dispatchscope_analysis::history::{History, HistoryBuilder, MAX_HISTORY_BYTES};
use dispatchscope_core::ByteRange;
use dispatchscope_core::input::Event;
use dispatchscope_core::report::{DispatchReport, Mark, Mode};
use serde::Deserialize;
use serde::de::IgnoredAny;
use thiserror::Error;

use crate::capture::RecordKind;
use crate::sample::{Sample, SampleError, Step};
use crate::session::{CaptureFile, DispatchRecord, SessionError};

/// Why a history could not be made.
#[derive(Debug, Error)]
pub enum HistoryError {
    /// The session file is bad.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The sample does not replay.
    #[error("the sample does not replay: {0}")]
    Replay(#[from] SampleError),
    /// The watched range is empty, wraps, or is longer than [`MAX_HISTORY_BYTES`].
    #[error(
        "{range}: a history watches 1 to {MAX_HISTORY_BYTES} bytes that do not wrap the address space"
    )]
    BadRange {
        /// The range asked for.
        range: ByteRange,
    },
    /// No reserve event of the session holds a watched byte.
    #[error(
        "{range}: no reservation of the session holds these bytes (no reserve event covers them), so nothing can write them"
    )]
    NotReserved {
        /// The range asked for.
        range: ByteRange,
    },
}

/// The `size` bytes at `address` as a range, checked: 1 to [`MAX_HISTORY_BYTES`], not wrapping.
pub fn watched_range(address: u64, size: u64) -> Result<ByteRange, HistoryError> {
    let range = ByteRange::new(address, address.saturating_add(size));
    match address.checked_add(size) {
        Some(_) if (1..=MAX_HISTORY_BYTES).contains(&size) => Ok(range),
        _ => Err(HistoryError::BadRange { range }),
    }
}

/// The history of `range` in `sample`, whose dispatches' reports are `reports` (one per dispatch,
/// in order, as [`Sample::run`] returns them).
pub fn of_sample(
    sample: &Sample,
    reports: &[DispatchReport],
    range: ByteRange,
) -> Result<History, HistoryError> {
    let mut b = HistoryBuilder::new(range);
    let mut n = 0usize;
    let mut contents_loaded = false;
    for step in &sample.steps {
        match step {
            Step::Event(e) => b.event(e),
            Step::Dispatch(input) => {
                if !contents_loaded {
                    for c in &sample.contents {
                        b.contents(c.address, &c.bytes);
                    }
                    contents_loaded = true;
                }
                b.dispatch(input, reports.get(n));
                n += 1;
            }
        }
    }
    finish(b, range)
}

/// [`of_sample`] on the sample's own replay on the CPU reference.
pub fn replay_sample(sample: &Sample, range: ByteRange) -> Result<History, HistoryError> {
    let reports = sample.run()?;
    of_sample(sample, &reports, range)
}

fn finish(b: HistoryBuilder, range: ByteRange) -> Result<History, HistoryError> {
    if !b.reserved_ever() {
        return Err(HistoryError::NotReserved { range });
    }
    Ok(b.finish())
}

/// What a DISPATCH record says of the bytes it can touch, read without building its accesses.
#[derive(Deserialize)]
struct LeanRecord {
    #[serde(default)]
    report: Option<LeanReport>,
}

#[derive(Deserialize)]
struct LeanReport {
    mode: Mode,
    before: LeanBefore,
    #[serde(default)]
    marks: Vec<Mark>,
    #[serde(default)]
    write_back: Vec<LeanWriteBack>,
    #[serde(default)]
    instrumented: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct LeanBefore {
    copies: Vec<IgnoredAny>,
}

#[derive(Deserialize)]
struct LeanWriteBack {
    range: ByteRange,
}

/// What a lean read of a DISPATCH record decided.
enum Lean {
    /// It wrote none of the bytes; C3 wrote this many deferred copies before it.
    Skip(usize),
    /// It may have: decode it whole.
    Whole,
}

/// Reads a DISPATCH payload lean: `Whole` for anything but a plain JSON record whose report says
/// it wrote nothing in `range`. With no copy deferred (`copies_pending` false) the count of copies
/// C3 wrote does not matter, and the report's tail says the rest ([`tail`]).
fn lean(payload: &[u8], range: ByteRange, copies_pending: bool) -> Lean {
    if !crate::legacy::sniff(payload).is_json() {
        return Lean::Whole;
    }
    if !copies_pending && let Some(touches) = tail(payload, range) {
        return if touches { Lean::Whole } else { Lean::Skip(0) };
    }
    let Ok(LeanRecord {
        report: Some(report),
    }) = serde_json::from_slice::<LeanRecord>(payload)
    else {
        return Lean::Whole;
    };
    let touches = report.mode != Mode::Refused
        && (report.instrumented.is_some()
            || report.marks.iter().any(|m| m.guest.overlaps(&range))
            || report.write_back.iter().any(|w| w.range.overlaps(&range)));
    if touches {
        Lean::Whole
    } else {
        Lean::Skip(report.before.copies.len())
    }
}

/// What the end of a plain JSON DISPATCH record says, read backwards from its last bytes: a
/// report serializes its marks (C1), hand-off, write-backs (O8), hazards, counts and instrumented
/// section last, after its accesses, so these few keys are found without reading the accesses.
/// A key cannot occur inside a JSON string (its quotes would be escaped there), and each of them
/// names one field of the report only. Returns whether the dispatch can have written `range`, or
/// `None` when the tail is not as expected (then the record is read lean from the start).
fn tail(payload: &[u8], range: ByteRange) -> Option<bool> {
    // The counts come last but for the section (reports written before the section have none).
    let counts = last_at(payload, b"\"counts\":")?;
    if let Some(at) = last_at(&payload[counts..], b"\"instrumented\":")
        && !payload[counts + at..].starts_with(b"\"instrumented\":null")
    {
        return Some(true);
    }
    let before = &payload[..counts];
    let marks: Vec<Mark> = value_at(&before[last_at(before, b"\"marks\":")? + 8..])?;
    let wb = last_at(before, b"\"write_back\":")?;
    let write_back: Vec<LeanWriteBack> = value_at(&before[wb + 13..])?;
    Some(
        marks.iter().any(|m| m.guest.overlaps(&range))
            || write_back.iter().any(|w| w.range.overlaps(&range)),
    )
}

/// Where the last `key` in `payload` starts.
fn last_at(payload: &[u8], key: &[u8]) -> Option<usize> {
    let last = payload.len().checked_sub(key.len())?;
    (0..=last).rev().find(|&i| payload[i..].starts_with(key))
}

/// The one JSON value `bytes` start with (what follows it is not read).
fn value_at<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Option<T> {
    serde_json::Deserializer::from_slice(bytes)
        .into_iter::<T>()
        .next()?
        .ok()
}

/// The history of `range` in a capture, read through its index (the module docs say which
/// records are read and how far).
pub fn of_capture<R: std::io::Read + std::io::Seek>(
    file: &mut CaptureFile<R>,
    range: ByteRange,
) -> Result<History, HistoryError> {
    let records = file.records().to_vec();
    let mut b = HistoryBuilder::new(range);
    // The contents that hold a watched byte, loaded before the first dispatch (as a replay does).
    let mut contents: Vec<(u64, Vec<u8>)> = Vec::new();
    for (i, m) in records.iter().enumerate() {
        if m.kind != RecordKind::MEMORY {
            continue;
        }
        let head = file.read_prefix(i, 12)?;
        let (address, len) = memory_head(&head).ok_or_else(|| {
            file.bad_record(
                i,
                format!("{} bytes, less than a contents header", head.len()),
            )
        })?;
        let held = ByteRange::new(address, address.saturating_add(len));
        if !held.overlaps(&b.range()) {
            continue;
        }
        let bytes = file.read_record(i)?;
        let body = bytes.get(12..).unwrap_or_default();
        if body.len() as u64 != len {
            return Err(file
                .bad_record(
                    i,
                    format!("says {len} bytes of contents but holds {}", body.len()),
                )
                .into());
        }
        contents.push((address, body.to_vec()));
    }
    let mut contents = Some(contents);
    for (i, m) in records.iter().enumerate() {
        match m.kind {
            RecordKind::EVENTS => {
                let bytes = file.read_record(i)?;
                let e: Event = serde_json::from_slice(&bytes).map_err(|e| file.bad_record(i, e))?;
                b.event(&e);
            }
            RecordKind::DISPATCH => {
                if let Some(c) = contents.take() {
                    for (address, bytes) in &c {
                        b.contents(*address, bytes);
                    }
                }
                let bytes = file.read_record(i)?;
                match lean(&bytes, b.range(), b.copies_pending()) {
                    Lean::Skip(copies) => b.skipped_dispatch(copies),
                    Lean::Whole => {
                        let d = DispatchRecord::from_payload(&bytes)
                            .map_err(|e| file.bad_record(i, e))?;
                        b.dispatch(&d.input, d.report.as_ref());
                    }
                }
            }
            _ => {}
        }
    }
    finish(b, range)
}

/// A MEMORY record's address and length, from its first 12 bytes.
fn memory_head(head: &[u8]) -> Option<(u64, u64)> {
    let a = head.get(..8)?;
    let l = head.get(8..12)?;
    let mut a8 = [0u8; 8];
    a8.copy_from_slice(a);
    let mut l4 = [0u8; 4];
    l4.copy_from_slice(l);
    Some((u64::from_le_bytes(a8), u64::from(u32::from_le_bytes(l4))))
}
