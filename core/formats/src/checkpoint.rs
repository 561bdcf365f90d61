//! Checkpoints of engine state in captures: what a debugger's Memory and Chunk table panels need
//! beyond a dispatch's report (guest memory's pages and targets, the chunk table's slots), kept as
//! records beside the DISPATCH records so that any dispatch's panels are rebuilt by reading two
//! records, never by replaying the session.
//!
//! Record kinds (the container's [`RecordKind`]s, next to `session`'s):
//! - [`MEMORY_STATE`]: guest memory as the DISPATCH record before it left it ([`MemoryState`]:
//!   reservations as runs of equal pages, and the protected targets), JSON, lz4.
//! - [`TABLE_STATE`]: the chunk table as the DISPATCH record before it left it ([`TableState`]),
//!   a small JSON header then the slots as the device reads them (16 bytes each), lz4.
//!
//! Each is written only after a dispatch that changed it, so the state of dispatch N is the latest
//! record of its kind at or before DISPATCH N in record order; [`StateIndex`] finds it from the
//! capture's index alone, without reading a payload. A capture without them (an older one, or a
//! live recording whose target sent reports only) is still a valid capture: [`StateIndex`] then
//! says so, and readers that ignore these kinds (`CaptureFile::to_sample`) skip them.
//!
//! [`write_replayed_capture`] replays a sample on the CPU reference and writes a capture with every
//! report and these checkpoints as it goes, holding one report at a time.
//! This module never draws and never runs a window.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::capture::{CaptureWriter, RecordKind, RecordMeta, write_atomically};
use crate::sample::{Sample, SampleError, Step};
use crate::session::{
    CaptureFile, CaptureMeta, DispatchRecord, SessionError, capture_meta, contents_bytes,
};
use dispatchscope_core::chunk_table::{ChunkTable, TableSlot};
use dispatchscope_core::memory::{GuestMemory, PageState, ProtectedTarget};
use dispatchscope_core::{ByteRange, CpuBackend, Engine};

/// Record kind: guest memory as the dispatch before it left it ([`MemoryState`]).
pub const MEMORY_STATE: RecordKind = RecordKind(0x05);
/// Record kind: the chunk table as the dispatch before it left it ([`TableState`]).
pub const TABLE_STATE: RecordKind = RecordKind(0x06);

/// Consecutive pages in one state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageRunState {
    /// How many pages.
    pub pages: u64,
    /// Their state.
    pub page: PageState,
}

/// One reservation: its bytes and its pages, as runs in address order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReservationState {
    /// The reserved bytes.
    pub range: ByteRange,
    /// Its pages, as runs of equal pages, from `range.start` up.
    pub runs: Vec<PageRunState>,
}

/// Guest memory as a dispatch left it, for the Memory panel: every page's state (run-length
/// coded) and the protected targets; no contents.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryState {
    /// The host page size the pages are counted in.
    pub page_bytes: u64,
    /// Every reservation, in address order.
    pub reservations: Vec<ReservationState>,
    /// The protected targets (D720).
    pub targets: Vec<ProtectedTarget>,
}

impl MemoryState {
    /// The state of `memory`, read (not changed): one pass over its pages.
    pub fn of(memory: &GuestMemory) -> Self {
        let reservations = memory
            .reservations()
            .map(|r| {
                let mut runs: Vec<PageRunState> = Vec::new();
                for (first, end, p) in r.pages.runs() {
                    let pages = end.saturating_sub(first);
                    match runs.last_mut() {
                        Some(last) if last.page == *p => last.pages += pages,
                        _ => runs.push(PageRunState { pages, page: *p }),
                    }
                }
                ReservationState {
                    range: r.range,
                    runs,
                }
            })
            .collect();
        Self {
            page_bytes: memory.page_bytes(),
            reservations,
            targets: memory.targets().cloned().collect(),
        }
    }

    /// Checks that the runs of each reservation cover it exactly, page by page.
    pub fn check(&self) -> Result<(), String> {
        if !self.page_bytes.is_power_of_two() {
            return Err(format!(
                "page size {:#x} is not a power of two",
                self.page_bytes
            ));
        }
        for r in &self.reservations {
            let pages: u64 = r
                .runs
                .iter()
                .try_fold(0u64, |n, run| n.checked_add(run.pages))
                .ok_or_else(|| format!("reservation {}: the page count overflows", r.range))?;
            let want = r.range.size_bytes() / self.page_bytes;
            if pages != want || r.range.size_bytes() % self.page_bytes != 0 {
                return Err(format!(
                    "reservation {} ({} bytes) holds {want} pages of {:#x} bytes, but its runs count {pages}",
                    r.range,
                    r.range.size_bytes(),
                    self.page_bytes
                ));
            }
        }
        Ok(())
    }
}

/// The parameters of a saved chunk table; its slots follow them in the record: every slot, or
/// (`delta`) only the slots that changed since the previous [`TABLE_STATE`] record, as
/// `(slot u64, guest_chunk u64, device_addr u64)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct TableHeader {
    chunk_bytes: u64,
    probe_bound: u32,
    multiplier: u64,
    capacity: u64,
    #[serde(default)]
    delta: bool,
}

impl TableHeader {
    fn of(table: &ChunkTable, delta: bool) -> Self {
        Self {
            chunk_bytes: table.chunk_bytes(),
            probe_bound: table.probe_bound(),
            multiplier: table.multiplier(),
            capacity: table.capacity() as u64,
            delta,
        }
    }

    fn same_shape(&self, other: &Self) -> bool {
        Self {
            delta: false,
            ..*self
        } == Self {
            delta: false,
            ..*other
        }
    }
}

/// The most delta records between two full ones, so that rebuilding a table reads at most this
/// many records plus one.
pub const MAX_TABLE_DELTAS: usize = 31;

/// Bytes of one changed slot in a delta record.
const DELTA_ENTRY_BYTES: usize = 24;

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    if let Some(s) = bytes.get(at..at + 8) {
        b.copy_from_slice(s);
    }
    u64::from_le_bytes(b)
}

/// A table-state payload: the header, then `body`.
fn table_payload(header: &TableHeader, body: &[u8]) -> Vec<u8> {
    let head = serde_json::to_vec(header).unwrap_or_default();
    let mut v = Vec::with_capacity(4 + head.len() + body.len());
    v.extend_from_slice(&(head.len() as u32).to_le_bytes());
    v.extend_from_slice(&head);
    v.extend_from_slice(body);
    v
}

/// Splits a table-state payload into its header and body.
fn split_table_payload(bytes: &[u8]) -> Result<(TableHeader, &[u8]), String> {
    let (len, rest) = bytes
        .split_first_chunk::<4>()
        .ok_or_else(|| format!("{} bytes, less than the header length", bytes.len()))?;
    let len = u32::from_le_bytes(*len) as usize;
    if rest.len() < len {
        return Err(format!(
            "says a {len}-byte header but holds {} bytes",
            rest.len()
        ));
    }
    let (head, body) = rest.split_at(len);
    let header: TableHeader =
        serde_json::from_slice(head).map_err(|e| format!("the table header: {e}"))?;
    Ok((header, body))
}

/// What the writer remembers of the last table it saved, to write the next as a delta.
#[derive(Default)]
struct TableWriter {
    last: Option<(TableHeader, Vec<TableSlot>)>,
    deltas: usize,
}

impl TableWriter {
    /// The payload for `table` if it changed since the last one: a delta when the shape is the
    /// same, few slots changed and the chain is short; else every slot.
    fn next(&mut self, table: &ChunkTable) -> Option<Vec<u8>> {
        let full = TableHeader::of(table, false);
        let slots = table.slots();
        let payload = match &self.last {
            Some((h, prev)) if h.same_shape(&full) && prev.len() == slots.len() => {
                let changed: Vec<usize> =
                    (0..slots.len()).filter(|&i| prev[i] != slots[i]).collect();
                if changed.is_empty() {
                    return None;
                }
                let small = changed.len() * DELTA_ENTRY_BYTES < slots.len() * 16 / 2;
                if small && self.deltas < MAX_TABLE_DELTAS {
                    let mut body = Vec::with_capacity(changed.len() * DELTA_ENTRY_BYTES);
                    for i in changed {
                        body.extend_from_slice(&(i as u64).to_le_bytes());
                        body.extend_from_slice(&slots[i].guest_chunk.to_le_bytes());
                        body.extend_from_slice(&slots[i].device_addr.to_le_bytes());
                    }
                    self.deltas += 1;
                    table_payload(
                        &TableHeader {
                            delta: true,
                            ..full
                        },
                        &body,
                    )
                } else {
                    self.deltas = 0;
                    TableState::encode(table)
                }
            }
            _ => {
                self.deltas = 0;
                TableState::encode(table)
            }
        };
        self.last = Some((full, slots.to_vec()));
        Some(payload)
    }
}

/// The chunk table as a dispatch left it.
#[derive(Clone, Debug)]
pub struct TableState {
    /// The table, rebuilt from its saved slots ([`ChunkTable::from_slots`] checks them).
    pub table: ChunkTable,
}

impl TableState {
    /// The record payload for `table`, every slot: a u32 header length, the header (JSON), then
    /// the slots as the device reads them.
    pub fn encode(table: &ChunkTable) -> Vec<u8> {
        table_payload(&TableHeader::of(table, false), &table.to_le_bytes())
    }

    /// Reads a full payload [`TableState::encode`] wrote; every length and slot is checked.
    pub fn decode(bytes: &[u8]) -> Result<TableState, String> {
        let (header, body) = split_table_payload(bytes)?;
        if header.delta {
            return Err("a delta record read as a full one".into());
        }
        let image = full_image(&header, body)?;
        Self::from_image(&header, &image)
    }

    fn from_image(header: &TableHeader, image: &[TableSlot]) -> Result<TableState, String> {
        let table = ChunkTable::from_slots(
            header.chunk_bytes,
            header.probe_bound,
            header.multiplier,
            image,
        )
        .map_err(|e| e.to_string())?;
        Ok(TableState { table })
    }
}

/// Every slot of a full record.
fn full_image(header: &TableHeader, body: &[u8]) -> Result<Vec<TableSlot>, String> {
    let slot_bytes = std::mem::size_of::<TableSlot>();
    if !body.len().is_multiple_of(slot_bytes) || (body.len() / slot_bytes) as u64 != header.capacity
    {
        return Err(format!(
            "says {} slots but holds {} bytes of slots",
            header.capacity,
            body.len()
        ));
    }
    Ok(body
        .chunks_exact(slot_bytes)
        .map(|c| TableSlot {
            guest_chunk: u64_at(c, 0),
            device_addr: u64_at(c, 8),
        })
        .collect())
}

/// Applies a delta record's body to `image`.
fn apply_delta(image: &mut [TableSlot], body: &[u8]) -> Result<(), String> {
    if !body.len().is_multiple_of(DELTA_ENTRY_BYTES) {
        return Err(format!(
            "a delta of {} bytes, not a multiple of {DELTA_ENTRY_BYTES}",
            body.len()
        ));
    }
    let n = image.len();
    for e in body.chunks_exact(DELTA_ENTRY_BYTES) {
        let slot = u64_at(e, 0);
        let s = usize::try_from(slot)
            .ok()
            .and_then(|i| image.get_mut(i))
            .ok_or_else(|| format!("a delta changes slot {slot} of a table of {n}"))?;
        *s = TableSlot {
            guest_chunk: u64_at(e, 8),
            device_addr: u64_at(e, 16),
        };
    }
    Ok(())
}

/// Where each dispatch's checkpoints are in a capture, from its index alone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StateIndex {
    /// `(dispatch position, record index)` of every [`MEMORY_STATE`] record, in order.
    memory: Vec<(usize, usize)>,
    /// The same for [`TABLE_STATE`].
    table: Vec<(usize, usize)>,
}

impl StateIndex {
    /// Reads the positions from `records` (a capture's, in seq order): a state record belongs to
    /// the last DISPATCH record before it.
    pub fn of(records: &[RecordMeta]) -> Self {
        let mut index = Self::default();
        let mut dispatches = 0usize;
        for (i, m) in records.iter().enumerate() {
            match m.kind {
                RecordKind::DISPATCH => dispatches += 1,
                k if k == MEMORY_STATE || k == TABLE_STATE => {
                    let Some(pos) = dispatches.checked_sub(1) else {
                        continue;
                    };
                    let list = if k == MEMORY_STATE {
                        &mut index.memory
                    } else {
                        &mut index.table
                    };
                    list.push((pos, i));
                }
                _ => {}
            }
        }
        index
    }

    /// Whether the capture keeps any memory checkpoint (captures written before checkpoints, and
    /// live recordings, keep none).
    pub fn has_memory(&self) -> bool {
        !self.memory.is_empty()
    }

    /// The record holding guest memory as dispatch `pos` left it, and the dispatch that wrote it.
    pub fn memory_at(&self, pos: usize) -> Option<(usize, usize)> {
        latest(&self.memory, pos)
    }

    /// The record holding the chunk table as dispatch `pos` left it, and the dispatch that wrote
    /// it; `None` when no dispatch up to `pos` had a table.
    pub fn table_at(&self, pos: usize) -> Option<(usize, usize)> {
        latest(&self.table, pos)
    }
}

fn latest(list: &[(usize, usize)], pos: usize) -> Option<(usize, usize)> {
    let n = list.partition_point(|(p, _)| *p <= pos);
    n.checked_sub(1).and_then(|i| list.get(i)).copied()
}

/// What [`write_replayed_capture`] wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Written {
    /// Dispatches.
    pub dispatches: usize,
    /// [`MEMORY_STATE`] records.
    pub memory_states: usize,
    /// [`TABLE_STATE`] records.
    pub table_states: usize,
}

/// Replays `sample` on the CPU reference against its own device and writes it as a capture at
/// `dest` (atomically), each dispatch with its report and, after each dispatch that changed them,
/// a [`MEMORY_STATE`] and a [`TABLE_STATE`] record. Holds one report at a time; `progress` is
/// called with the number of steps done.
///
/// # Errors
/// A step that does not run (named by [`SampleError`]), or a write that fails.
pub fn write_replayed_capture(
    sample: &Sample,
    dest: &Path,
    mut progress: impl FnMut(usize),
) -> Result<Written, SessionError> {
    let name = dest.display().to_string();
    let meta: CaptureMeta = capture_meta(sample);
    let mut replay_error: Option<SampleError> = None;
    let mut written = Written::default();
    let result = write_atomically(dest, |file| {
        let mut w = CaptureWriter::to_sink(&mut *file, &json(&meta))?;
        for c in &sample.contents {
            w.append(RecordKind::MEMORY, &contents_bytes(c), true)?;
        }
        let mut engine = match Engine::new(sample.device.clone(), CpuBackend::new()) {
            Ok(e) => e,
            Err(error) => {
                replay_error = Some(SampleError::Step {
                    step: 0,
                    what: "device".into(),
                    error,
                });
                return Err(abandoned());
            }
        };
        let mut next_step = 0usize;
        let mut last_memory: Option<MemoryState> = None;
        let mut tables = TableWriter::default();
        let mut failed: Option<crate::capture::CaptureError> = None;
        let replayed = sample.replay(&mut engine, |engine, step, report| {
            if failed.is_some() {
                return;
            }
            let go = || -> crate::capture::Result<()> {
                for s in sample.steps.get(next_step..step).unwrap_or_default() {
                    if let Step::Event(e) = s {
                        w.append(RecordKind::EVENTS, &json(e), false)?;
                    }
                }
                next_step = step + 1;
                let Some(Step::Dispatch(input)) = sample.steps.get(step) else {
                    return Ok(());
                };
                let record = DispatchRecord {
                    input: (**input).clone(),
                    report: Some(report),
                };
                w.append(RecordKind::DISPATCH, &json(&record), true)?;
                written.dispatches += 1;
                let memory = MemoryState::of(engine.memory());
                if last_memory.as_ref() != Some(&memory) {
                    w.append(MEMORY_STATE, &json(&memory), true)?;
                    written.memory_states += 1;
                    last_memory = Some(memory);
                }
                if let Some(bytes) = engine.table().and_then(|t| tables.next(t)) {
                    w.append(TABLE_STATE, &bytes, true)?;
                    written.table_states += 1;
                }
                progress(step + 1);
                Ok(())
            };
            if let Err(e) = go() {
                failed = Some(e);
            }
        });
        if let Some(e) = failed {
            return Err(e);
        }
        if let Err(e) = replayed {
            replay_error = Some(e);
            return Err(abandoned());
        }
        for s in sample.steps.get(next_step..).unwrap_or_default() {
            if let Step::Event(e) = s {
                w.append(RecordKind::EVENTS, &json(e), false)?;
            }
        }
        w.finish()?;
        Ok(())
    });
    if let Some(error) = replay_error {
        return Err(SessionError::Sample { path: name, error });
    }
    result.map_err(|error| SessionError::Capture { path: name, error })?;
    Ok(written)
}

fn json<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}

/// The error that makes [`write_atomically`] drop its temporary file when the replay failed; the
/// replay's own error is what the caller sees.
fn abandoned() -> crate::capture::CaptureError {
    crate::capture::CaptureError::Io {
        action: "writing a capture whose replay failed".into(),
        source: std::io::Error::other("the replay failed"),
    }
}

impl<R: std::io::Read + std::io::Seek> CaptureFile<R> {
    /// Where this capture's checkpoints are, from its index.
    pub fn states(&self) -> StateIndex {
        StateIndex::of(self.records())
    }

    /// Reads the [`MEMORY_STATE`] record at `records()[idx]`.
    pub fn memory_state(&mut self, idx: usize) -> Result<MemoryState, SessionError> {
        let bytes = self.read_record(idx)?;
        serde_json::from_slice::<MemoryState>(&bytes)
            .map_err(|e| e.to_string())
            .and_then(|m| m.check().map(|()| m))
            .map_err(|message| self.bad_record(idx, message))
    }

    /// The chunk table as dispatch `pos` left it, rebuilt from the [`TABLE_STATE`] records
    /// `states` names: the latest full one at or before it and the deltas after that (at most
    /// [`MAX_TABLE_DELTAS`]); with the dispatch that wrote it and its record. `None` when no
    /// dispatch up to `pos` had a table.
    pub fn table_at(
        &mut self,
        states: &StateIndex,
        pos: usize,
    ) -> Result<Option<(usize, usize, TableState)>, SessionError> {
        let k = states.table.partition_point(|(p, _)| *p <= pos);
        let Some(last) = k.checked_sub(1) else {
            return Ok(None);
        };
        let (from, idx) = states.table[last];
        // Walk back to a full record, keeping the deltas.
        let mut deltas: Vec<(usize, Vec<u8>)> = Vec::new();
        let mut at = last;
        let (header, mut image) = loop {
            let (_, i) = states.table[at];
            let bytes = self.read_record(i)?;
            let (header, body) = split_table_payload(&bytes).map_err(|m| self.bad_record(i, m))?;
            if !header.delta {
                let image = full_image(&header, body).map_err(|m| self.bad_record(i, m))?;
                break (header, image);
            }
            let body = body.to_vec();
            deltas.push((i, body));
            match at.checked_sub(1) {
                Some(prev) if deltas.len() <= MAX_TABLE_DELTAS => at = prev,
                _ => {
                    return Err(self.bad_record(
                        i,
                        format!("a table delta with no full table within {MAX_TABLE_DELTAS} records before it"),
                    ));
                }
            }
        };
        for (i, body) in deltas.iter().rev() {
            apply_delta(&mut image, body).map_err(|m| self.bad_record(*i, m))?;
        }
        let state = TableState::from_image(&header, &image).map_err(|m| self.bad_record(idx, m))?;
        Ok(Some((from, idx, state)))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]
mod tests {
    use super::*;
    use crate::capture::CaptureReader;

    /// Tables saved as full records and deltas come back slot for slot, for every dispatch, and
    /// a damaged delta is a named error.
    #[test]
    fn table_deltas_rebuild_every_table() {
        let sample = Sample::from_json(
            crate::shipped::SAMPLES
                .iter()
                .find(|(n, _)| *n == "ray-traversal.json")
                .unwrap()
                .1,
        )
        .unwrap();
        let meta = json(&capture_meta(&sample));
        let mut w = CaptureWriter::to_sink(Vec::new(), &meta).unwrap();
        let mut tables = TableWriter::default();
        let mut t = ChunkTable::build(0x1000, 8, &[(1, 0x1000)]).unwrap();
        let mut expected = Vec::new();
        let record = |w: &mut CaptureWriter<Vec<u8>>| {
            w.append(RecordKind::DISPATCH, b"{}", false).unwrap();
        };
        for step in 0..80u64 {
            record(&mut w);
            // Grow, then shrink: inserts, removals and rebuilds at a larger capacity.
            if step < 60 {
                for k in 0..7 {
                    t.insert(step * 7 + k + 2, 0x10_0000 + (step * 7 + k) * 0x1000)
                        .unwrap();
                }
            } else {
                t.remove((step - 60) * 7 + 2);
            }
            if let Some(p) = tables.next(&t) {
                w.append(TABLE_STATE, &p, true).unwrap();
            }
            expected.push(t.slots().to_vec());
        }
        let bytes = w.finish().unwrap();
        let reader = CaptureReader::from_bytes(bytes).unwrap();
        let mut file = CaptureFile::from_reader("t.dscap".into(), reader).unwrap();
        let states = file.states();
        let n_deltas = states.table.len();
        assert!(n_deltas > 40, "a record per change: {n_deltas}");
        for (pos, want) in expected.iter().enumerate() {
            let (from, _, got) = file.table_at(&states, pos).unwrap().unwrap();
            assert_eq!(from, pos);
            assert_eq!(got.table.slots(), want.as_slice(), "dispatch {pos}");
        }
    }

    #[test]
    fn a_bad_table_record_is_named() {
        assert!(TableState::decode(&[1, 0]).is_err());
        let t = ChunkTable::build(0x1000, 8, &[(1, 0x1000), (2, 0x2000)]).unwrap();
        let mut p = TableState::encode(&t);
        assert_eq!(TableState::decode(&p).unwrap().table.slots(), t.slots());
        p.truncate(p.len() - 16);
        let e = TableState::decode(&p).unwrap_err();
        assert!(e.contains("slots"), "{e}");
        let mut image = vec![TableSlot::EMPTY; 16];
        assert!(apply_delta(&mut image, &[0u8; 23]).is_err());
        let mut far = Vec::new();
        far.extend_from_slice(&99u64.to_le_bytes());
        far.extend_from_slice(&[0u8; 16]);
        let e = apply_delta(&mut image, &far).unwrap_err();
        assert!(e.contains("slot 99"), "{e}");
    }
}
