//! Checkpoints of engine state in captures: what a debugger's Memory and Chunk table panels need
//! beyond a dispatch's report (guest memory's pages and targets, the chunk table's slots), kept as
//! records beside the DISPATCH records so that any dispatch's panels are rebuilt by reading two
//! records, never by replaying the session.
//!
//! Record kinds (the container's [`RecordKind`]s, next to `session`'s):
//! - [`MEMORY_STATE`]: guest memory as the DISPATCH record before it left it ([`MemoryState`]:
//!   reservations as runs of equal pages, and the protected targets), lz4; in one of two forms,
//!   told apart by their first bytes: JSON (what builds before issue 41 wrote, still read), or
//!   the binary form ([`MemoryDelta`], `memory_delta.rs`): the whole state, or its changes since
//!   the MEMORY_STATE record before it (a delta never follows an unknown).
//! - [`TABLE_STATE`]: the chunk table as the DISPATCH record before it left it ([`TableState`]),
//!   a small JSON header then the slots as the device reads them (16 bytes each), lz4.
//!
//! - [`MEMORY_UNKNOWN`] and [`TABLE_UNKNOWN`]: from the dispatch before it on, that state is not
//!   known (a live target that could not send it says why, UTF-8); the next record of the state's
//!   kind makes it known again (for the table, a full one: a delta never follows an unknown).
//!
//! Each is written only after a dispatch that changed it, so the state of dispatch N is the latest
//! record of its kind at or before DISPATCH N in record order; [`StateIndex`] finds it from the
//! capture's index alone, without reading a payload. A live recording's records are the target's
//! checkpoints, written by the debugger's store in the same order (`dispatchscope_live`). A capture without them (an older one, or a
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
use crate::versions::MEMORY_DELTA_MAGIC;
use dispatchscope_core::chunk_table::{ChunkTable, TableError, TableSlot};
use dispatchscope_core::memory::{GuestMemory, PageState, ProtectedTarget, Reservation};
use dispatchscope_core::{ByteRange, CpuBackend, Engine};

mod memory_delta;

pub use memory_delta::{
    MAX_MEMORY_DELTAS, MemoryDelta, MemoryImage, MemoryWriter, NoMemoryToChange, RunAt,
    TargetChange,
};

/// Record kind: guest memory as the dispatch before it left it ([`MemoryState`]).
pub const MEMORY_STATE: RecordKind = RecordKind(0x05);
/// Record kind: the chunk table as the dispatch before it left it ([`TableState`]).
pub const TABLE_STATE: RecordKind = RecordKind(0x06);
/// Record kind: guest memory's state is not known from the dispatch before it on, until the next
/// [`MEMORY_STATE`] record (a live target could not send it); the payload is why, UTF-8.
pub const MEMORY_UNKNOWN: RecordKind = RecordKind(0x08);
/// Record kind: the chunk table is not known from the dispatch before it on, until the next full
/// [`TABLE_STATE`] record; the payload is why, UTF-8.
pub const TABLE_UNKNOWN: RecordKind = RecordKind(0x09);

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

impl ReservationState {
    /// The runs of `r`, read (not changed): one step a run.
    pub fn of(r: &Reservation) -> Self {
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
    }

    /// Checks that its runs cover it exactly, page by page, in pages of `page_bytes`.
    pub fn check(&self, page_bytes: u64) -> Result<(), CheckpointError> {
        if !page_bytes.is_power_of_two() {
            return Err(CheckpointError::PageSize { page_bytes });
        }
        let pages: u64 = self
            .runs
            .iter()
            .try_fold(0u64, |n, run| n.checked_add(run.pages))
            .ok_or(CheckpointError::PageCount { range: self.range })?;
        let want = self.range.size_bytes() / page_bytes;
        if pages != want || !self.range.size_bytes().is_multiple_of(page_bytes) {
            return Err(CheckpointError::Runs {
                range: self.range,
                want,
                page_bytes,
                pages,
            });
        }
        Ok(())
    }
}

impl MemoryState {
    /// The state of `memory`, read (not changed): one pass over its reservations' runs.
    pub fn of(memory: &GuestMemory) -> Self {
        Self {
            page_bytes: memory.page_bytes(),
            reservations: memory.reservations().map(ReservationState::of).collect(),
            targets: memory.targets().cloned().collect(),
        }
    }

    /// Checks that the runs of each reservation cover it exactly, page by page.
    pub fn check(&self) -> Result<(), CheckpointError> {
        if !self.page_bytes.is_power_of_two() {
            return Err(CheckpointError::PageSize {
                page_bytes: self.page_bytes,
            });
        }
        self.reservations
            .iter()
            .try_for_each(|r| r.check(self.page_bytes))
    }
}

/// A [`MEMORY_STATE`] record's payload for `state` in the JSON form (what builds before issue 41
/// wrote; [`MemoryWriter`] writes the binary form).
pub fn encode_memory_state(state: &MemoryState) -> Vec<u8> {
    json(state)
}

/// Reads a whole [`MEMORY_STATE`] payload, JSON or binary, checking that each reservation's runs
/// cover it; a delta is [`CheckpointError::MemoryDeltaAsWhole`] (rebuild it with
/// [`StateIndex::rebuild_memory`]).
pub fn decode_memory_state(bytes: &[u8]) -> Result<MemoryState, CheckpointError> {
    if bytes.starts_with(&MEMORY_DELTA_MAGIC) {
        return MemoryDelta::decode(bytes)?.to_state();
    }
    serde_json::from_slice::<MemoryState>(bytes)
        .map_err(|e| CheckpointError::MemoryJson { why: e.to_string() })
        .and_then(|m| m.check().map(|()| m))
}

/// A [`MEMORY_STATE`] payload, read: a whole state (either form), or changes to the one before.
enum MemoryPayload {
    Whole(MemoryState),
    Delta(MemoryDelta),
}

fn read_memory_payload(bytes: &[u8]) -> Result<MemoryPayload, CheckpointError> {
    if bytes.starts_with(&MEMORY_DELTA_MAGIC) {
        let d = MemoryDelta::decode(bytes)?;
        return Ok(if d.whole {
            MemoryPayload::Whole(d.to_state()?)
        } else {
            MemoryPayload::Delta(d)
        });
    }
    decode_memory_state(bytes).map(MemoryPayload::Whole)
}

/// Checks a [`MEMORY_STATE`] payload's shape without rebuilding a state: JSON (its runs against
/// its reservations) or the binary form (every field, [`MemoryDelta::decode`]). Returns whether
/// it is a delta (changes to the state before it).
pub fn check_memory_payload(bytes: &[u8]) -> Result<bool, CheckpointError> {
    if bytes.starts_with(&MEMORY_DELTA_MAGIC) {
        return Ok(!MemoryDelta::decode(bytes)?.whole);
    }
    decode_memory_state(bytes).map(|_| false)
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
fn split_table_payload(bytes: &[u8]) -> Result<(TableHeader, &[u8]), CheckpointError> {
    let (len, rest) = bytes
        .split_first_chunk::<4>()
        .ok_or(CheckpointError::NoHeaderLength { bytes: bytes.len() })?;
    let len = u32::from_le_bytes(*len) as usize;
    if rest.len() < len {
        return Err(CheckpointError::HeaderCut {
            header_bytes: len,
            bytes: rest.len(),
        });
    }
    let (head, body) = rest.split_at(len);
    let header: TableHeader = serde_json::from_slice(head)
        .map_err(|e| CheckpointError::TableHeaderJson { why: e.to_string() })?;
    Ok((header, body))
}

/// A chunk table's parameters and slots, copied out of the engine (what a live tap hands its
/// writer thread, so that the delta and the encoding are made there).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableImage {
    /// Bytes per chunk (T1).
    pub chunk_bytes: u64,
    /// T2's probe bound.
    pub probe_bound: u32,
    /// The hash's multiplier.
    pub multiplier: u64,
    /// Every slot, as the device reads them.
    pub slots: Vec<TableSlot>,
}

impl TableImage {
    /// A copy of `table`: its parameters and one copy of its slots.
    pub fn of(table: &ChunkTable) -> Self {
        Self {
            chunk_bytes: table.chunk_bytes(),
            probe_bound: table.probe_bound(),
            multiplier: table.multiplier(),
            slots: table.slots().to_vec(),
        }
    }

    fn header(&self, delta: bool) -> TableHeader {
        TableHeader {
            chunk_bytes: self.chunk_bytes,
            probe_bound: self.probe_bound,
            multiplier: self.multiplier,
            capacity: self.slots.len() as u64,
            delta,
        }
    }

    /// The full [`TABLE_STATE`] payload of this image: what [`TableState::encode`] writes for the
    /// table it was copied from.
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(self.slots.len() * 16);
        for s in &self.slots {
            body.extend_from_slice(&s.guest_chunk.to_le_bytes());
            body.extend_from_slice(&s.device_addr.to_le_bytes());
        }
        table_payload(&self.header(false), &body)
    }
}

/// [`TableWriter::next_changes`]: the writer holds no table (of that size) for the changes to change;
/// the table must be sent whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("changes to a chunk table this writer does not hold")]
pub struct NoTableToChange;

/// What a writer remembers of the last table it saved, to write the next as a delta: used by
/// [`write_replayed_capture`] and by a live target's writer thread, whose every [`TABLE_STATE`]
/// payload goes into the debugger's recording in the same order.
#[derive(Debug, Default)]
pub struct TableWriter {
    last: Option<TableImage>,
    deltas: usize,
}

impl TableWriter {
    /// The payload for `table` if it changed since the last one: a delta when the shape is the
    /// same, few slots changed and the chain is short; else every slot.
    pub fn next(&mut self, table: &ChunkTable) -> Option<Vec<u8>> {
        self.next_image(TableImage::of(table))
    }

    /// [`Self::next`] for a table already copied out of the engine.
    pub fn next_image(&mut self, image: TableImage) -> Option<Vec<u8>> {
        let full = image.header(false);
        let payload = match &self.last {
            Some(prev)
                if prev.header(false).same_shape(&full)
                    && prev.slots.len() == image.slots.len() =>
            {
                let slots = &image.slots;
                let changed: Vec<usize> = (0..slots.len())
                    .filter(|&i| prev.slots[i] != slots[i])
                    .collect();
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
                    table_payload(&image.header(true), &body)
                } else {
                    self.deltas = 0;
                    image.encode()
                }
            }
            _ => {
                self.deltas = 0;
                image.encode()
            }
        };
        self.last = Some(image);
        Some(payload)
    }

    /// [`Self::next`] from the slots changed since the last table this writer saw (each slot's
    /// index and new value; the table's shape unchanged): the last table is brought up to date
    /// by them alone, with no pass over the table, and written as a delta, or whole when the
    /// chain of deltas is long or the change large. `Ok(None)` when no slot changed; `Err` when
    /// there is no last table to change (the caller sends the table whole).
    pub fn next_changes(
        &mut self,
        changed: &[(usize, TableSlot)],
    ) -> Result<Option<Vec<u8>>, NoTableToChange> {
        let Some(prev) = self.last.as_mut() else {
            return Err(NoTableToChange);
        };
        let mut moved: Vec<usize> = Vec::with_capacity(changed.len());
        for &(i, s) in changed {
            let Some(at) = prev.slots.get_mut(i) else {
                self.reset();
                return Err(NoTableToChange);
            };
            if *at != s {
                *at = s;
                moved.push(i);
            }
        }
        if moved.is_empty() {
            return Ok(None);
        }
        moved.sort_unstable();
        moved.dedup();
        let small = moved.len() * DELTA_ENTRY_BYTES < prev.slots.len() * 16 / 2;
        if !small || self.deltas >= MAX_TABLE_DELTAS {
            self.deltas = 0;
            return Ok(Some(prev.encode()));
        }
        let mut body = Vec::with_capacity(moved.len() * DELTA_ENTRY_BYTES);
        for i in moved {
            let s = prev.slots[i];
            body.extend_from_slice(&(i as u64).to_le_bytes());
            body.extend_from_slice(&s.guest_chunk.to_le_bytes());
            body.extend_from_slice(&s.device_addr.to_le_bytes());
        }
        self.deltas += 1;
        Ok(Some(table_payload(&prev.header(true), &body)))
    }

    /// Forgets the last table, so that the next payload is a full one (after an unknown state,
    /// which a delta may not follow).
    pub fn reset(&mut self) {
        self.last = None;
        self.deltas = 0;
    }
}

/// Checks a [`TABLE_STATE`] payload's shape without building the table: its header, a full
/// record's slots (checked as [`ChunkTable::from_slots`] does) or a delta's entries (each slot
/// inside the table). Returns whether it is a delta.
pub fn check_table_payload(bytes: &[u8]) -> Result<bool, CheckpointError> {
    let (header, body) = split_table_payload(bytes)?;
    if header.delta {
        if !body.len().is_multiple_of(DELTA_ENTRY_BYTES) {
            return Err(CheckpointError::DeltaLength { bytes: body.len() });
        }
        if let Some(slot) = body
            .chunks_exact(DELTA_ENTRY_BYTES)
            .map(|e| u64_at(e, 0))
            .find(|&slot| slot >= header.capacity)
        {
            return Err(CheckpointError::DeltaSlot {
                slot,
                capacity: header.capacity,
            });
        }
        return Ok(true);
    }
    let image = full_image(&header, body)?;
    TableState::from_image(&header, &image)?;
    Ok(false)
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
    pub fn decode(bytes: &[u8]) -> Result<TableState, CheckpointError> {
        let (header, body) = split_table_payload(bytes)?;
        if header.delta {
            return Err(CheckpointError::DeltaAsFull);
        }
        let image = full_image(&header, body)?;
        Self::from_image(&header, &image)
    }

    fn from_image(
        header: &TableHeader,
        image: &[TableSlot],
    ) -> Result<TableState, CheckpointError> {
        let table = ChunkTable::from_slots(
            header.chunk_bytes,
            header.probe_bound,
            header.multiplier,
            image,
        )?;
        Ok(TableState { table })
    }
}

/// Every slot of a full record.
fn full_image(header: &TableHeader, body: &[u8]) -> Result<Vec<TableSlot>, CheckpointError> {
    let slot_bytes = std::mem::size_of::<TableSlot>();
    if !body.len().is_multiple_of(slot_bytes) || (body.len() / slot_bytes) as u64 != header.capacity
    {
        return Err(CheckpointError::Slots {
            capacity: header.capacity,
            bytes: body.len(),
        });
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
fn apply_delta(image: &mut [TableSlot], body: &[u8]) -> Result<(), CheckpointError> {
    if !body.len().is_multiple_of(DELTA_ENTRY_BYTES) {
        return Err(CheckpointError::DeltaLength { bytes: body.len() });
    }
    let capacity = image.len() as u64;
    for e in body.chunks_exact(DELTA_ENTRY_BYTES) {
        let slot = u64_at(e, 0);
        let s = usize::try_from(slot)
            .ok()
            .and_then(|i| image.get_mut(i))
            .ok_or(CheckpointError::DeltaSlot { slot, capacity })?;
        *s = TableSlot {
            guest_chunk: u64_at(e, 8),
            device_addr: u64_at(e, 16),
        };
    }
    Ok(())
}

/// One state record in a [`StateIndex`]: the dispatch it follows, its record, and whether it
/// holds the state or says it is unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    pos: usize,
    record: usize,
    known: bool,
}

/// What a [`StateIndex`] says of one state (memory or table) at one dispatch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateAt {
    /// No record of it at or before the dispatch (a capture without checkpoints, or a live
    /// recording before its first one).
    None,
    /// The record `record` holds it, written after dispatch `from`.
    Known {
        /// The dispatch that left it.
        from: usize,
        /// Its record.
        record: usize,
    },
    /// Not known since dispatch `from`: the record `record` (a [`MEMORY_UNKNOWN`] or
    /// [`TABLE_UNKNOWN`]) says why.
    Unknown {
        /// The dispatch from which it is unknown.
        from: usize,
        /// The record that says why.
        record: usize,
    },
}

/// Where each dispatch's checkpoints are in a capture, from its index alone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StateIndex {
    /// Every [`MEMORY_STATE`] and [`MEMORY_UNKNOWN`] record, in order.
    memory: Vec<Entry>,
    /// The same for [`TABLE_STATE`] and [`TABLE_UNKNOWN`].
    table: Vec<Entry>,
}

impl StateIndex {
    /// Reads the positions from `records` (a capture's, in seq order): a state record belongs to
    /// the last DISPATCH record before it.
    pub fn of(records: &[RecordMeta]) -> Self {
        let mut index = Self::default();
        let mut dispatches = 0usize;
        for (i, m) in records.iter().enumerate() {
            if m.kind == RecordKind::DISPATCH {
                dispatches += 1;
            } else if let Some(pos) = dispatches.checked_sub(1) {
                index.push(m.kind, pos, i);
            }
        }
        index
    }

    /// Adds record `record` of `kind`, written after dispatch `pos` (a live store builds its index
    /// this way as it writes); a kind that is no state record is ignored. Positions must not go
    /// back.
    pub fn push(&mut self, kind: RecordKind, pos: usize, record: usize) {
        let (list, known) = match kind {
            k if k == MEMORY_STATE => (&mut self.memory, true),
            k if k == MEMORY_UNKNOWN => (&mut self.memory, false),
            k if k == TABLE_STATE => (&mut self.table, true),
            k if k == TABLE_UNKNOWN => (&mut self.table, false),
            _ => return,
        };
        list.push(Entry { pos, record, known });
    }

    /// Whether the capture keeps any memory checkpoint (captures written before checkpoints, and
    /// live recordings made before targets sent them, keep none).
    pub fn has_memory(&self) -> bool {
        self.memory.iter().any(|e| e.known)
    }

    /// State records of both kinds (what a live store's index costs).
    pub fn len(&self) -> usize {
        self.memory.len() + self.table.len()
    }

    /// Whether it holds no state record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The record holding guest memory as dispatch `pos` left it, and the dispatch that wrote it;
    /// `None` when there is none or it is unknown there ([`Self::memory_state_at`] says which).
    pub fn memory_at(&self, pos: usize) -> Option<(usize, usize)> {
        known(latest(&self.memory, pos))
    }

    /// The record holding the chunk table as dispatch `pos` left it, and the dispatch that wrote
    /// it; `None` when no dispatch up to `pos` had a table, or it is unknown there.
    pub fn table_at(&self, pos: usize) -> Option<(usize, usize)> {
        known(latest(&self.table, pos))
    }

    /// What is known of guest memory at dispatch `pos`.
    pub fn memory_state_at(&self, pos: usize) -> StateAt {
        latest(&self.memory, pos)
    }

    /// What is known of the chunk table at dispatch `pos`.
    pub fn table_state_at(&self, pos: usize) -> StateAt {
        latest(&self.table, pos)
    }

    /// The chunk table as dispatch `pos` left it, rebuilt from the [`TABLE_STATE`] records
    /// `read` returns by record: the latest full one at or before it and the deltas after that
    /// (at most [`MAX_TABLE_DELTAS`]); with the dispatch that wrote it and its record. `None` when
    /// no dispatch up to `pos` had a table, or it is unknown there.
    pub fn rebuild_table<E>(
        &self,
        pos: usize,
        mut read: impl FnMut(usize) -> Result<Vec<u8>, E>,
    ) -> Result<Option<(usize, usize, TableState)>, Rebuild<E>> {
        let bad = |record: usize, error: CheckpointError| Rebuild::Bad { record, error };
        let k = self.table.partition_point(|e| e.pos <= pos);
        let Some(last) = k.checked_sub(1) else {
            return Ok(None);
        };
        let Entry {
            pos: from,
            record: idx,
            known,
        } = self.table[last];
        if !known {
            return Ok(None);
        }
        // Walk back to a full record, keeping the deltas.
        let mut deltas: Vec<(usize, Vec<u8>)> = Vec::new();
        let mut at = last;
        let (header, mut image) = loop {
            let e = self.table[at];
            if !e.known {
                return Err(bad(e.record, CheckpointError::DeltaAfterUnknown));
            }
            let bytes = read(e.record).map_err(Rebuild::Read)?;
            let (header, body) = split_table_payload(&bytes).map_err(|m| bad(e.record, m))?;
            if !header.delta {
                let image = full_image(&header, body).map_err(|m| bad(e.record, m))?;
                break (header, image);
            }
            deltas.push((e.record, body.to_vec()));
            match at.checked_sub(1) {
                Some(prev) if deltas.len() <= MAX_TABLE_DELTAS => at = prev,
                _ => {
                    return Err(bad(e.record, CheckpointError::NoFullTable));
                }
            }
        };
        for (i, body) in deltas.iter().rev() {
            apply_delta(&mut image, body).map_err(|m| bad(*i, m))?;
        }
        let state = TableState::from_image(&header, &image).map_err(|m| bad(idx, m))?;
        Ok(Some((from, idx, state)))
    }
}

impl StateIndex {
    /// Guest memory as dispatch `pos` left it, rebuilt from the [`MEMORY_STATE`] records `read`
    /// returns by record: the latest whole one at or before it and the deltas after that (at most
    /// [`MAX_MEMORY_DELTAS`]); with the dispatch that wrote it and its record. `None` when no
    /// dispatch up to `pos` had a memory record, or it is unknown there.
    pub fn rebuild_memory<E>(
        &self,
        pos: usize,
        read: impl FnMut(usize) -> Result<Vec<u8>, E>,
    ) -> Result<Option<(usize, usize, MemoryState)>, Rebuild<E>> {
        let k = self.memory.partition_point(|e| e.pos <= pos);
        match k.checked_sub(1) {
            None => Ok(None),
            Some(last) => self.rebuild_memory_entry(last, read),
        }
    }

    /// [`Self::rebuild_memory`] for the state whose latest record is `record` (what
    /// [`Self::memory_at`] names); `None` when `record` is no memory record here, or says the
    /// state is unknown.
    pub fn rebuild_memory_record<E>(
        &self,
        record: usize,
        read: impl FnMut(usize) -> Result<Vec<u8>, E>,
    ) -> Result<Option<(usize, usize, MemoryState)>, Rebuild<E>> {
        match self.memory.binary_search_by_key(&record, |e| e.record) {
            Ok(last) => self.rebuild_memory_entry(last, read),
            Err(_) => Ok(None),
        }
    }

    fn rebuild_memory_entry<E>(
        &self,
        last: usize,
        mut read: impl FnMut(usize) -> Result<Vec<u8>, E>,
    ) -> Result<Option<(usize, usize, MemoryState)>, Rebuild<E>> {
        let bad = |record: usize, error: CheckpointError| Rebuild::Bad { record, error };
        let Some(&Entry {
            pos: from,
            record: idx,
            known,
        }) = self.memory.get(last)
        else {
            return Ok(None);
        };
        if !known {
            return Ok(None);
        }
        // Walk back to a whole record, keeping the deltas.
        let mut deltas: Vec<(usize, MemoryDelta)> = Vec::new();
        let mut at = last;
        let whole = loop {
            let e = self.memory[at];
            if !e.known {
                return Err(bad(e.record, CheckpointError::MemoryDeltaAfterUnknown));
            }
            let bytes = read(e.record).map_err(Rebuild::Read)?;
            match read_memory_payload(&bytes).map_err(|m| bad(e.record, m))? {
                MemoryPayload::Whole(state) => break state,
                MemoryPayload::Delta(d) => deltas.push((e.record, d)),
            }
            match at.checked_sub(1) {
                Some(prev) if deltas.len() <= MAX_MEMORY_DELTAS => at = prev,
                _ => return Err(bad(e.record, CheckpointError::NoWholeMemory)),
            }
        };
        if deltas.is_empty() {
            return Ok(Some((from, idx, whole)));
        }
        let mut image = MemoryImage::of(&whole).map_err(|m| bad(self.memory[at].record, m))?;
        for (i, d) in deltas.iter().rev() {
            image.apply(d).map_err(|m| bad(*i, m))?;
        }
        Ok(Some((from, idx, image.state())))
    }
}

/// Why [`StateIndex::rebuild_table`] or [`StateIndex::rebuild_memory`] could not rebuild a state.
#[derive(Debug)]
pub enum Rebuild<E> {
    /// A record could not be read.
    Read(E),
    /// Record `record` is not what it should be.
    Bad {
        /// Its index.
        record: usize,
        /// What is wrong.
        error: CheckpointError,
    },
}

/// Why a checkpoint of engine state (a [`MEMORY_STATE`] or [`TABLE_STATE`] record) cannot be
/// read; each message names the values.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointError {
    /// The memory state's page size is not a power of two.
    #[error("page size {page_bytes:#x} is not a power of two")]
    PageSize {
        /// The page size.
        page_bytes: u64,
    },
    /// A reservation's runs count more pages than 64 bits hold.
    #[error("reservation {range}: the page count overflows")]
    PageCount {
        /// The reservation.
        range: ByteRange,
    },
    /// A reservation's runs do not cover it page by page.
    #[error(
        "reservation {range} ({size} bytes) holds {want} pages of {page_bytes:#x} bytes, but its runs count {pages}",
        size = range.size_bytes()
    )]
    Runs {
        /// The reservation.
        range: ByteRange,
        /// The pages it holds.
        want: u64,
        /// The page size.
        page_bytes: u64,
        /// The pages its runs count.
        pages: u64,
    },
    /// The memory state is not the JSON of one.
    #[error("the memory state: {why}")]
    MemoryJson {
        /// The JSON reader's message.
        why: String,
    },
    /// Bytes read as the binary memory form that do not start with its magic.
    #[error("not a binary memory state (it starts with no `DSMD`)")]
    NotMemoryDelta,
    /// A binary memory state of a version this build does not read.
    #[error(
        "a binary memory state of version {found}; this build reads version {}",
        crate::versions::MEMORY_DELTA_VERSION
    )]
    MemoryDeltaVersion {
        /// The version word.
        found: u32,
    },
    /// A binary memory state's form byte that is neither whole (0) nor changes (1).
    #[error("a binary memory state of form {form} (0 whole, 1 changes)")]
    MemoryDeltaForm {
        /// The form byte.
        form: u8,
    },
    /// A binary memory state that ends before a field.
    #[error("a binary memory state cut short: {what} at byte {at}")]
    MemoryDeltaCut {
        /// The field.
        what: &'static str,
        /// Where it starts.
        at: usize,
    },
    /// A varint longer than 64 bits.
    #[error("a binary memory state: {what} at byte {at} is a varint past 64 bits")]
    MemoryDeltaVarint {
        /// The field.
        what: &'static str,
        /// Where it starts.
        at: usize,
    },
    /// A count larger than the bytes left could hold.
    #[error("a binary memory state of {count} {what}, more than its {left} bytes left can hold")]
    MemoryDeltaCount {
        /// What is counted.
        what: &'static str,
        /// The count.
        count: u64,
        /// The bytes left after it.
        left: usize,
    },
    /// A range that is empty or passes the end of the address space.
    #[error(
        "a binary memory state: {what} at byte {at} is empty or passes the end of the address space"
    )]
    MemoryDeltaRange {
        /// The range's part.
        what: &'static str,
        /// Where it starts.
        at: usize,
    },
    /// A page state byte whose protection bits name no protection.
    #[error(
        "a binary memory state: page state {byte:#04x} at byte {at} has host protection 3 (0 none, 1 read, 2 read-write)"
    )]
    MemoryDeltaState {
        /// The byte.
        byte: u8,
        /// Where it is.
        at: usize,
    },
    /// A target id past 32 bits.
    #[error("a binary memory state: the target id at byte {at} passes 32 bits")]
    MemoryDeltaTargetId {
        /// Where it starts.
        at: usize,
    },
    /// A target's kind byte that is none of gone (0, changes only), trusted (1), not trusted (2).
    #[error(
        "a binary memory state: target {id} of kind {kind} (0 gone, in changes only; 1 trusted; 2 not trusted)"
    )]
    MemoryDeltaTargetKind {
        /// The target.
        id: u32,
        /// Its kind byte.
        kind: u8,
    },
    /// A target name that is not UTF-8.
    #[error("a binary memory state: the name of target {id} is not UTF-8")]
    MemoryDeltaName {
        /// The target.
        id: u32,
    },
    /// A whole binary memory state that clears ranges.
    #[error("a whole binary memory state clears {n} ranges (only changes clear)")]
    MemoryDeltaWholeCleared {
        /// How many.
        n: usize,
    },
    /// Bytes after a binary memory state's last field.
    #[error("{extra} bytes after a binary memory state's last field")]
    MemoryDeltaTrailing {
        /// How many.
        extra: usize,
    },
    /// Memory changes read where a whole state is wanted.
    #[error("memory changes read as a whole memory state")]
    MemoryDeltaAsWhole,
    /// Memory changes in other pages than the state they change.
    #[error("memory changes in pages of {page_bytes:#x} bytes to a state in pages of {state:#x}")]
    MemoryDeltaPageSize {
        /// The changes' page size.
        page_bytes: u64,
        /// The state's.
        state: u64,
    },
    /// A reservation added over one the state holds.
    #[error("memory changes add reservation {range} over the reservation at {existing}")]
    MemoryDeltaOverlap {
        /// The reservation added.
        range: ByteRange,
        /// The one it overlaps.
        existing: ByteRange,
    },
    /// A page run in no one reservation of the state.
    #[error("memory changes set {pages} pages from {start:#x}, which no one reservation holds")]
    MemoryDeltaOutside {
        /// The run's first byte.
        start: u64,
        /// Its pages.
        pages: u64,
    },
    /// Memory changes that follow a record saying memory is unknown.
    #[error("memory changes follow a record that says guest memory is unknown")]
    MemoryDeltaAfterUnknown,
    /// Memory changes with no whole state close enough before them.
    #[error(
        "memory changes with no whole memory state within {MAX_MEMORY_DELTAS} records before them"
    )]
    NoWholeMemory,
    /// A table record too short to hold its header's length.
    #[error("{bytes} bytes, less than the header length")]
    NoHeaderLength {
        /// The record's bytes.
        bytes: usize,
    },
    /// A table record shorter than the header it announces.
    #[error("says a {header_bytes}-byte header but holds {bytes} bytes")]
    HeaderCut {
        /// The header's length it says.
        header_bytes: usize,
        /// The bytes after the length.
        bytes: usize,
    },
    /// The table header is not the JSON of one.
    #[error("the table header: {why}")]
    TableHeaderJson {
        /// The JSON reader's message.
        why: String,
    },
    /// A full table record whose slots are not its header's capacity.
    #[error("says {capacity} slots but holds {bytes} bytes of slots")]
    Slots {
        /// The slots the header says.
        capacity: u64,
        /// The bytes of slots it holds.
        bytes: usize,
    },
    /// A delta record whose length is not a whole number of entries.
    #[error("a delta of {bytes} bytes, not a multiple of {DELTA_ENTRY_BYTES}")]
    DeltaLength {
        /// Its body's bytes.
        bytes: usize,
    },
    /// A delta entry for a slot outside the table.
    #[error("a delta changes slot {slot} of a table of {capacity}")]
    DeltaSlot {
        /// The slot.
        slot: u64,
        /// The table's slots.
        capacity: u64,
    },
    /// A delta record read where a full one is wanted.
    #[error("a delta record read as a full one")]
    DeltaAsFull,
    /// A delta that follows a record saying the table is unknown.
    #[error("a table delta follows a record that says the table is unknown")]
    DeltaAfterUnknown,
    /// A delta with no full record close enough before it.
    #[error("a table delta with no full table within {MAX_TABLE_DELTAS} records before it")]
    NoFullTable,
    /// The slots do not make a table ([`ChunkTable::from_slots`]).
    #[error(transparent)]
    Table(#[from] TableError),
}

fn latest(list: &[Entry], pos: usize) -> StateAt {
    let n = list.partition_point(|e| e.pos <= pos);
    match n.checked_sub(1).and_then(|i| list.get(i)) {
        None => StateAt::None,
        Some(e) if e.known => StateAt::Known {
            from: e.pos,
            record: e.record,
        },
        Some(e) => StateAt::Unknown {
            from: e.pos,
            record: e.record,
        },
    }
}

fn known(at: StateAt) -> Option<(usize, usize)> {
    match at {
        StateAt::Known { from, record } => Some((from, record)),
        _ => None,
    }
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
/// a [`MEMORY_STATE`] (whole, or the changes since the last: [`MemoryWriter`]) and a
/// [`TABLE_STATE`] record. Holds one report at a time; `progress` is
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
        let mut memories = MemoryWriter::default();
        // The state_changes count of the memory state last written.
        let mut memory_at: Option<u64> = None;
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
                let memory = engine.memory();
                let changes = memory.state_changes();
                if memory_at != Some(changes) {
                    let delta = memory_at.and_then(|at| MemoryDelta::since(memory, at));
                    let payload = match delta.map(|d| memories.next_delta(&d)) {
                        Some(Ok(p)) => p,
                        None | Some(Err(NoMemoryToChange)) => {
                            memories.next_state(&MemoryState::of(memory))
                        }
                    };
                    if let Some(bytes) = payload {
                        w.append(MEMORY_STATE, &bytes, true)?;
                        written.memory_states += 1;
                    }
                    memory_at = Some(changes);
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

    /// Guest memory as dispatch `pos` left it, rebuilt from the [`MEMORY_STATE`] records `states`
    /// names ([`StateIndex::rebuild_memory`]: the latest whole one and the deltas after it); with
    /// the dispatch that wrote it and its record. `None` when no dispatch up to `pos` had a memory
    /// record, or it is unknown there.
    pub fn memory_at(
        &mut self,
        states: &StateIndex,
        pos: usize,
    ) -> Result<Option<(usize, usize, MemoryState)>, SessionError> {
        states
            .rebuild_memory(pos, |i| self.read_record(i))
            .map_err(|e| match e {
                Rebuild::Read(e) => e,
                Rebuild::Bad { record, error } => self.bad_record(record, error),
            })
    }

    /// Why the [`MEMORY_UNKNOWN`] or [`TABLE_UNKNOWN`] record at `records()[idx]` says a state
    /// is unknown.
    pub fn unknown_why(&mut self, idx: usize) -> Result<String, SessionError> {
        let bytes = self.read_record(idx)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The chunk table as dispatch `pos` left it, rebuilt from the [`TABLE_STATE`] records
    /// `states` names ([`StateIndex::rebuild_table`]); with the dispatch that wrote it and its
    /// record. `None` when no dispatch up to `pos` had a table, or it is unknown there.
    pub fn table_at(
        &mut self,
        states: &StateIndex,
        pos: usize,
    ) -> Result<Option<(usize, usize, TableState)>, SessionError> {
        states
            .rebuild_table(pos, |i| self.read_record(i))
            .map_err(|e| match e {
                Rebuild::Read(e) => e,
                Rebuild::Bad { record, error } => self.bad_record(record, error),
            })
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

    /// An unknown record hides the state before it until the next record of its kind, and a
    /// delta may not follow it; an image's payload is the table's.
    #[test]
    fn unknown_records_end_a_state_until_the_next() {
        let t = ChunkTable::build(0x1000, 8, &[(1, 0x1000), (2, 0x2000)]).unwrap();
        assert_eq!(TableImage::of(&t).encode(), TableState::encode(&t));
        assert!(!check_table_payload(&TableState::encode(&t)).unwrap());
        let mut index = StateIndex::default();
        index.push(MEMORY_STATE, 0, 1);
        index.push(TABLE_STATE, 0, 2);
        index.push(MEMORY_UNKNOWN, 3, 5);
        index.push(TABLE_UNKNOWN, 4, 6);
        index.push(MEMORY_STATE, 6, 8);
        index.push(TABLE_STATE, 7, 9);
        index.push(RecordKind::EVENTS, 7, 10);
        assert_eq!(index.len(), 6);
        assert_eq!(index.memory_at(2), Some((0, 1)));
        assert_eq!(index.memory_at(3), None);
        assert_eq!(
            index.memory_state_at(5),
            StateAt::Unknown { from: 3, record: 5 }
        );
        assert_eq!(
            index.memory_state_at(6),
            StateAt::Known { from: 6, record: 8 }
        );
        assert_eq!(
            index.table_state_at(3),
            StateAt::Known { from: 0, record: 2 }
        );
        assert_eq!(
            index.table_state_at(4),
            StateAt::Unknown { from: 4, record: 6 }
        );
        assert!(index.has_memory());
        // Rebuilding over an unknown table is nothing; a delta right after it is a named error.
        let full = TableState::encode(&t);
        let mut delta_writer = TableWriter::default();
        delta_writer.next(&t);
        let mut t2 = t.clone();
        t2.insert(3, 0x3000).unwrap();
        let delta = delta_writer.next(&t2).unwrap();
        assert!(check_table_payload(&delta).unwrap());
        let read = |i: usize| -> Result<Vec<u8>, ()> {
            Ok(if i == 9 { delta.clone() } else { full.clone() })
        };
        assert!(index.rebuild_table(5, read).unwrap().is_none());
        match index.rebuild_table(7, read) {
            Err(Rebuild::Bad { record: 6, error }) => {
                assert_eq!(error, CheckpointError::DeltaAfterUnknown)
            }
            other => panic!("{other:?}"),
        }
        let (from, record, got) = index.rebuild_table(2, read).unwrap().unwrap();
        assert_eq!((from, record), (0, 2));
        assert_eq!(got.table.slots(), t.slots());
        let mut far = delta.clone();
        let n = far.len();
        far[n - 24..n - 16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(
            check_table_payload(&far),
            Err(CheckpointError::DeltaSlot { .. })
        ));
        assert!(decode_memory_state(b"{").is_err());
        let bad = MemoryState {
            page_bytes: 3,
            ..MemoryState::default()
        };
        assert_eq!(
            decode_memory_state(&encode_memory_state(&bad))
                .unwrap_err()
                .to_string(),
            "page size 0x3 is not a power of two"
        );
    }

    /// Memory saved as whole records and deltas (issue 41) comes back as `MemoryState::of` gave
    /// it at every dispatch, across unknown records and a log that no longer reaches back; a delta
    /// after an unknown one, or with no whole record before it, is a named error.
    #[test]
    fn memory_deltas_rebuild_every_state() {
        use dispatchscope_core::input::{Backing, Event};
        const BASE: u64 = 0x1_0000_0000;
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
        let mut writer = MemoryWriter::default();
        let mut sent: Option<u64> = None;
        let mut expected: Vec<Option<MemoryState>> = Vec::new();
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut rand = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let (mut deltas, mut wholes) = (0, 0);
        for step in 0..300u64 {
            w.append(RecordKind::DISPATCH, b"{}", false).unwrap();
            // A thousand toggles a frame of 200 dispatches: five pages lowered or raised.
            let toggles = if step == 150 { 10_000 } else { 5 };
            for k in 0..toggles {
                let p = rand() % (4 << 20);
                let range = page(p);
                let e = if (step + k) % 2 == 0 {
                    Event::Guard { range }
                } else {
                    Event::Unguard { range }
                };
                m.apply(&e).unwrap();
            }
            if step == 100 {
                w.append(MEMORY_UNKNOWN, b"budget spent", true).unwrap();
                writer.reset();
                sent = None;
                expected.push(None);
                continue;
            }
            let changes = m.state_changes();
            let delta = sent.and_then(|at| MemoryDelta::since(&m, at));
            if step == 150 {
                assert!(delta.is_none(), "the log no longer reaches back");
            }
            let payload = match delta.map(|d| writer.next_delta(&d)) {
                Some(Ok(p)) => p,
                _ => writer.next_state(&MemoryState::of(&m)),
            };
            sent = Some(changes);
            let mut p = payload.unwrap();
            if step == 0 {
                // An older build's whole state (JSON) is a base the binary deltas build on.
                p = encode_memory_state(&MemoryState::of(&m));
            }
            if check_memory_payload(&p).unwrap() {
                deltas += 1;
            } else {
                wholes += 1;
            }
            w.append(MEMORY_STATE, &p, true).unwrap();
            expected.push(Some(MemoryState::of(&m)));
        }
        assert!(
            deltas > 250 && wholes >= 3,
            "{deltas} deltas, {wholes} whole"
        );
        let bytes = w.finish().unwrap();
        let reader = CaptureReader::from_bytes(bytes).unwrap();
        let mut file = CaptureFile::from_reader("m.dscap".into(), reader).unwrap();
        let states = file.states();
        for (pos, want) in expected.iter().enumerate() {
            let got = file.memory_at(&states, pos).unwrap().map(|(from, _, m)| {
                assert_eq!(from, pos);
                m
            });
            assert_eq!(got.as_ref(), want.as_ref(), "dispatch {pos}");
        }
        // Damaged chains are named: a delta right after an unknown record, or with no whole one.
        let mut index = StateIndex::default();
        index.push(MEMORY_UNKNOWN, 0, 1);
        index.push(MEMORY_STATE, 1, 2);
        let delta = MemoryDelta {
            page_bytes: 0x1000,
            ..MemoryDelta::default()
        }
        .encode();
        let read = |_: usize| -> Result<Vec<u8>, ()> { Ok(delta.clone()) };
        assert!(matches!(
            index.rebuild_memory(1, read),
            Err(Rebuild::Bad {
                record: 1,
                error: CheckpointError::MemoryDeltaAfterUnknown
            })
        ));
        let mut index = StateIndex::default();
        index.push(MEMORY_STATE, 0, 1);
        assert!(matches!(
            index.rebuild_memory(0, read),
            Err(Rebuild::Bad {
                record: 1,
                error: CheckpointError::NoWholeMemory
            })
        ));
        assert!(matches!(
            decode_memory_state(&delta),
            Err(CheckpointError::MemoryDeltaAsWhole)
        ));
        assert!(index.rebuild_memory_record(5, read).unwrap().is_none());
    }

    #[test]
    fn a_bad_table_record_is_named() {
        assert!(TableState::decode(&[1, 0]).is_err());
        let t = ChunkTable::build(0x1000, 8, &[(1, 0x1000), (2, 0x2000)]).unwrap();
        let mut p = TableState::encode(&t);
        assert_eq!(TableState::decode(&p).unwrap().table.slots(), t.slots());
        p.truncate(p.len() - 16);
        let e = TableState::decode(&p).unwrap_err();
        assert!(e.to_string().contains("slots"), "{e}");
        let mut image = vec![TableSlot::EMPTY; 16];
        assert!(apply_delta(&mut image, &[0u8; 23]).is_err());
        let mut far = Vec::new();
        far.extend_from_slice(&99u64.to_le_bytes());
        far.extend_from_slice(&[0u8; 16]);
        let e = apply_delta(&mut image, &far).unwrap_err();
        assert_eq!(e.to_string(), "a delta changes slot 99 of a table of 16");
    }
}
