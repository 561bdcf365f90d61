//! The chunk table on the device (T6): [`DeviceTable`] places the engine's table in device-local
//! memory when it fits the budget, else in host-visible memory, and writes only the slots that
//! changed while the copy on the device is still sound. [`TablePush`] is what the lookup helper
//! reads of it from the push block (T2, T3).
//!
//! Every entry the shader may follow is checked against the live imports first, so that none points
//! at a released mirror (a wild host pointer on lavapipe). The table itself is built by the engine;
//! nothing here chooses a slot.

use std::sync::Arc;

use ash::vk;

use crate::VkError;
use crate::buffer::Buf;
use crate::commands::Commands;
use crate::device::Context;
use crate::imports::Imports;
use crate::push::PushBlock;
use crate::spirv::push;
use dispatchscope_core::chunk_table::{Changed, ChunkTable, PARTS, SLOT_BYTES, TableSlot};
use dispatchscope_core::report::Placement;

/// Slots of the empty table a job with no table reads: every lookup misses (T4).
pub(crate) const EMPTY_TABLE_SLOTS: u64 = 16;

/// The table as placed on the device (T6).
struct Placed {
    buf: Buf,
    /// The engine's table version ([`ChunkTable::version`]) this copy holds.
    version: u64,
    capacity: usize,
    placement: Placement,
    /// Bytes per chunk when it was placed.
    chunk_bytes: u64,
    /// The release epoch the table's entries were last checked against.
    checked_epoch: u64,
    /// An older copy: the slots changed since its version (`None`: every slot), written when it
    /// is made the current copy again.
    behind: Option<Vec<usize>>,
}

/// The chunk table on the device, once placed. Destroys its buffer on drop; the owner waits for any
/// dispatch reading it first.
pub(crate) struct DeviceTable {
    ctx: Arc<Context>,
    /// The current copy: the one the next dispatch reads.
    placed: Option<Placed>,
    /// Older copies: read by dispatches in flight, or spares to be brought up to date and used
    /// again.
    older: Vec<Placed>,
    /// The device addresses of the copies dispatches in flight read ([`DeviceTable::set_busy`]).
    busy: Vec<u64>,
    /// Bytes of slots written to the device so far.
    pub(crate) uploaded_bytes: u64,
}

/// Spare copies kept past those dispatches in flight read.
const SPARE_COPIES: usize = 2;

/// Changed slots an older copy remembers before it is written whole instead.
const BEHIND_SLOTS: usize = 1 << 16;

/// What the lookup helper reads of the placed table from the push block (T2, T3).
#[derive(Clone, Copy)]
pub(crate) struct TablePush {
    /// The table's device address.
    address: u64,
    chunk_shift: u32,
    capacity_log2: u32,
    probe_bound: u32,
    /// The hash's multiplier ([`ChunkTable::multiplier`]).
    multiplier: u64,
}

impl TablePush {
    /// `table`, placed at device address `address`.
    pub(crate) fn of(table: &ChunkTable, address: u64) -> Self {
        Self {
            address,
            chunk_shift: table.chunk_shift(),
            capacity_log2: table.capacity_log2(),
            probe_bound: table.probe_bound(),
            multiplier: table.multiplier(),
        }
    }

    /// An empty table of [`EMPTY_TABLE_SLOTS`] slots (all of them the empty key) at `address`.
    pub(crate) fn empty(address: u64) -> Self {
        Self {
            address,
            chunk_shift: 12,
            capacity_log2: EMPTY_TABLE_SLOTS.trailing_zeros(),
            probe_bound: 1,
            multiplier: 1,
        }
    }

    /// T3: the table's words of the push block.
    pub(crate) fn write(&self, words: &mut PushBlock) {
        words.set64(push::TABLE, self.address);
        words.set(push::CHUNK_SHIFT, self.chunk_shift);
        words.set(push::CAPACITY_LOG2, self.capacity_log2);
        words.set(push::PROBE_BOUND, self.probe_bound);
        words.set64(push::MULTIPLIER, self.multiplier);
    }
}

/// T2: every entry of `slots` lies in a live import (a dangling one would be a wild host pointer in
/// the shader).
fn check_entries(imports: &Imports, slots: &[TableSlot], chunk_bytes: u64) -> Result<(), VkError> {
    for (slot, s) in slots.iter().enumerate() {
        check_slot(imports, slot, s, chunk_bytes)?;
    }
    Ok(())
}

/// One slot of [`check_entries`]: the bytes of the parts it reaches (all of the chunk, for a
/// chunk mapped whole) lie in one live import.
fn check_slot(
    imports: &Imports,
    slot: usize,
    s: &TableSlot,
    chunk_bytes: u64,
) -> Result<(), VkError> {
    if s.is_empty() {
        return Ok(());
    }
    let part = chunk_bytes / u64::from(PARTS);
    let reach = s.reach();
    let (first, last) = (
        u64::from(reach.trailing_zeros()),
        u64::from(PARTS - reach.leading_zeros()),
    );
    let start = s.device_addr.wrapping_add(first * part);
    if reach != 0 && imports.at(start, (last - first) * part).is_some() {
        return Ok(());
    }
    Err(VkError::DanglingChunk {
        slot,
        guest_chunk: s.guest_chunk,
        device_addr: s.device_addr,
        chunk_bytes,
    })
}

impl DeviceTable {
    /// Not placed yet.
    pub(crate) fn new(ctx: &Arc<Context>) -> Self {
        Self {
            ctx: Arc::clone(ctx),
            placed: None,
            older: Vec::new(),
            busy: Vec::new(),
            uploaded_bytes: 0,
        }
    }

    /// The copies at these device addresses are read by dispatches in flight: the next
    /// [`DeviceTable::place`] that changes a slot writes another copy, and none of them is
    /// destroyed until it is no longer named.
    pub(crate) fn set_busy(&mut self, busy: &[u64]) {
        self.busy.clear();
        self.busy.extend_from_slice(busy);
        // Older copies nothing reads beyond the spares go now.
        let mut spares = 0;
        let mut kept = Vec::with_capacity(self.older.len());
        for c in self.older.drain(..) {
            if self.busy.contains(&c.buf.address) {
                kept.push(c);
            } else if spares < SPARE_COPIES {
                spares += 1;
                kept.push(c);
            } else {
                self.ctx.destroy_buffer(c.buf, &mut 0);
            }
        }
        self.older = kept;
    }

    /// Copies alive.
    pub(crate) fn copies(&self) -> usize {
        self.older.len() + usize::from(self.placed.is_some())
    }

    /// T6 with dispatches in flight: when the current copy is read by one and `table` changed
    /// since it, another copy becomes current (a spare of the same shape, brought up to date by
    /// the slots changed since its version, else a new one written whole); the busy one is kept.
    fn leave_busy_copy(&mut self, table: &ChunkTable, size: u64, placement: Placement) {
        let Some(cur) = &self.placed else {
            return;
        };
        // Versions restart with a build: only an empty change list says the copy is the table.
        let unchanged = cur.version == table.version()
            && matches!(table.changed(), Changed::Slots(v) if v.is_empty());
        if unchanged || !self.busy.contains(&cur.buf.address) {
            return;
        }
        let Some(mut cur) = self.placed.take() else {
            return;
        };
        // The busy copy is behind by nothing yet: the slots changed since it are added to it as
        // they are written into the new current copy.
        cur.behind = Some(Vec::new());
        let spare = self.older.iter().position(|c| {
            !self.busy.contains(&c.buf.address)
                && c.buf.size == size
                && c.placement == placement
                && c.capacity == table.capacity()
                && c.chunk_bytes == table.chunk_bytes()
        });
        self.older.push(cur);
        if let Some(k) = spare {
            self.placed = Some(self.older.swap_remove(k));
        }
    }

    /// T6: places `table`, device-local when its bytes are within `budget`, and returns its device
    /// address and where it went. The caller has waited for any dispatch reading the old copy.
    pub(crate) fn place(
        &mut self,
        table: &ChunkTable,
        budget: u64,
        imports: &Imports,
        commands: &Commands,
        calls: &mut u64,
    ) -> Result<(u64, Placement), VkError> {
        let chunk = table.chunk_bytes();
        let size = (table.capacity() * SLOT_BYTES) as u64;
        let placement = if size <= budget {
            Placement::DeviceLocal
        } else {
            Placement::HostVisible
        };
        let epoch = imports.epoch();
        self.leave_busy_copy(table, size, placement);
        // The slots changed since the copy on the device, when that copy is still sound (no
        // import released since it was checked, same size, chunk and placement, and the version
        // the table's change log starts from, or a copy that kept the slots it is behind by):
        // only those are checked and written. Else every slot is.
        let behind: Option<Vec<usize>> = match (&mut self.placed, table.changed()) {
            (Some(p), Changed::Slots(slots))
                if p.checked_epoch == epoch
                    && p.capacity == table.capacity()
                    && p.chunk_bytes == chunk
                    && p.placement == placement =>
            {
                match p.behind.take() {
                    // A copy made current again: behind by what it kept, and this change.
                    Some(mut b) if p.version <= table.changed_since() => {
                        b.extend_from_slice(slots);
                        Some(b)
                    }
                    Some(_) => None,
                    None if p.version == table.changed_since() => Some(slots.clone()),
                    None => None,
                }
            }
            (Some(p), _) => {
                p.behind = None;
                None
            }
            _ => None,
        };
        let changed: Option<&[usize]> = behind.as_deref();
        match changed {
            Some(slots) => {
                for &i in slots {
                    if let Some(s) = table.slots().get(i) {
                        check_slot(imports, i, s, chunk)?;
                    }
                }
            }
            None => check_entries(imports, table.slots(), chunk)?,
        }
        let reuse =
            matches!(&self.placed, Some(t) if t.buf.size == size && t.placement == placement);
        if !reuse {
            if let Some(old) = self.placed.take() {
                if self.busy.contains(&old.buf.address) {
                    // A dispatch in flight reads it: kept until it is no longer named.
                    self.older.push(Placed {
                        behind: None,
                        ..old
                    });
                } else {
                    self.ctx.destroy_buffer(old.buf, calls);
                }
            }
            self.placed = Some(Placed {
                buf: self.allocate(size, placement, calls)?,
                version: 0,
                capacity: table.capacity(),
                placement,
                chunk_bytes: chunk,
                checked_epoch: epoch,
                behind: None,
            });
        }
        let Some(t) = self.placed.as_mut() else {
            return Err(VkError::TableNotPlaced {
                capacity: table.capacity(),
            });
        };
        let address = t.buf.address;
        let changed = changed.filter(|_| reuse);
        t.version = table.version();
        t.capacity = table.capacity();
        t.chunk_bytes = chunk;
        t.checked_epoch = epoch;
        let mut bytes = 0u64;
        if t.buf.mapped() {
            let dst = t.buf.bytes_mut();
            let mut put = |i: usize, s: &TableSlot| {
                if let Some(d) = dst.get_mut(i * SLOT_BYTES..(i + 1) * SLOT_BYTES) {
                    d[..8].copy_from_slice(&s.guest_chunk.to_le_bytes());
                    d[8..].copy_from_slice(&s.device_addr.to_le_bytes());
                    bytes += SLOT_BYTES as u64;
                }
            };
            match changed {
                Some(slots) => {
                    for &i in slots {
                        if let Some(s) = table.slots().get(i) {
                            put(i, s);
                        }
                    }
                }
                None => {
                    for (i, s) in table.slots().iter().enumerate() {
                        put(i, s);
                    }
                }
            }
        } else {
            match changed {
                // Staged: the changed slots' runs, each one copy.
                Some(slots) => {
                    let mut sorted = slots.to_vec();
                    sorted.sort_unstable();
                    sorted.dedup();
                    let mut regions = Vec::new();
                    let mut data = Vec::with_capacity(sorted.len() * SLOT_BYTES);
                    for i in sorted {
                        let Some(s) = table.slots().get(i) else {
                            continue;
                        };
                        regions.push((i * SLOT_BYTES, data.len()));
                        data.extend_from_slice(&s.guest_chunk.to_le_bytes());
                        data.extend_from_slice(&s.device_addr.to_le_bytes());
                    }
                    bytes += data.len() as u64;
                    commands.upload_slots(t.buf.raw, &data, &regions, SLOT_BYTES, calls)?;
                }
                None => {
                    let all = table.to_le_bytes();
                    bytes += all.len() as u64;
                    commands.upload(t.buf.raw, &all, calls)?;
                }
            }
        }
        self.uploaded_bytes += bytes;
        // Every older copy is now behind by these slots too (or by every slot).
        for c in &mut self.older {
            match (&mut c.behind, changed) {
                (Some(b), Some(slots)) if b.len() + slots.len() <= BEHIND_SLOTS => {
                    b.extend_from_slice(slots)
                }
                (b, _) => *b = None,
            }
        }
        Ok((address, placement))
    }

    /// A buffer of `size` bytes for the table, where `placement` says.
    fn allocate(&self, size: u64, placement: Placement, calls: &mut u64) -> Result<Buf, VkError> {
        let ctx = &self.ctx;
        let host = vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
        let local = vk::MemoryPropertyFlags::DEVICE_LOCAL;
        match placement {
            // T6: device-local where it fits; written directly when that memory is also
            // host-visible (lavapipe's one memory type, unified-memory and ReBAR devices),
            // through a staging copy otherwise.
            Placement::DeviceLocal if !ctx.stage_table => ctx
                .buffer(size, "the chunk table", local | host, true, calls)
                .or_else(|_| ctx.buffer(size, "the chunk table", local, false, calls)),
            Placement::DeviceLocal => ctx.buffer(size, "the chunk table", local, false, calls),
            Placement::HostVisible => ctx.host_buffer(size, "the chunk table", calls),
        }
    }

    /// T3/T6: the push words of the placed copy of `table`, which must be the table placed.
    /// Imports released since the copy was checked: checks it again, so that no entry the shader
    /// may follow points at a released mirror.
    pub(crate) fn push_for(
        &mut self,
        table: &ChunkTable,
        imports: &Imports,
    ) -> Result<TablePush, VkError> {
        let not_placed = VkError::TableNotPlaced {
            capacity: table.capacity(),
        };
        let Some(placed) = self.placed.as_mut() else {
            return Err(not_placed);
        };
        // The device reads the placed copy; the engine must hand over the table it placed, of the
        // version placed.
        if placed.capacity != table.capacity() || placed.version != table.version() {
            return Err(not_placed);
        }
        if placed.checked_epoch != imports.epoch() {
            check_entries(imports, table.slots(), table.chunk_bytes())?;
            placed.checked_epoch = imports.epoch();
        }
        Ok(TablePush::of(table, placed.buf.address))
    }

    /// The device addresses of the chunks in the `marks`' slots, by the placed copy (the one the
    /// device read): the chunks a job stored to (C1).
    /// Each as the device bytes of the parts its slot reaches (the whole chunk for a chunk mapped
    /// whole).
    pub(crate) fn marked_chunks(
        &self,
        table: &ChunkTable,
        marks: &[(usize, u32)],
    ) -> Vec<(u64, u64)> {
        let part = table.chunk_bytes() / u64::from(PARTS);
        match &self.placed {
            Some(t) if t.version == table.version() => marks
                .iter()
                .filter_map(|&(slot, _)| table.slots().get(slot))
                .filter(|s| !s.is_empty())
                .map(|s| {
                    let reach = s.reach();
                    let first = u64::from(reach.trailing_zeros());
                    let last = u64::from(PARTS - reach.leading_zeros());
                    (
                        s.device_addr.wrapping_add(first * part),
                        (last - first) * part,
                    )
                })
                .collect(),
            _ => Vec::new(),
        }
    }
}

impl Drop for DeviceTable {
    fn drop(&mut self) {
        if let Some(t) = self.placed.take() {
            self.ctx.destroy_buffer(t.buf, &mut 0);
        }
        for c in self.older.drain(..) {
            self.ctx.destroy_buffer(c.buf, &mut 0);
        }
    }
}
