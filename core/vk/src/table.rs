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
use dispatchscope_core::chunk_table::{ChunkTable, SLOT_BYTES, TableSlot};
use dispatchscope_core::report::Placement;

/// Slots of the empty table a job with no table reads: every lookup misses (T4).
pub(crate) const EMPTY_TABLE_SLOTS: u64 = 16;

/// The table as placed on the device (T6).
struct Placed {
    buf: Buf,
    slots: Vec<TableSlot>,
    placement: Placement,
    /// Bytes per chunk when it was placed.
    chunk_bytes: u64,
    /// The release epoch the table's entries were last checked against.
    checked_epoch: u64,
}

/// The chunk table on the device, once placed. Destroys its buffer on drop; the owner waits for any
/// dispatch reading it first.
pub(crate) struct DeviceTable {
    ctx: Arc<Context>,
    placed: Option<Placed>,
}

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

/// One slot of [`check_entries`].
fn check_slot(
    imports: &Imports,
    slot: usize,
    s: &TableSlot,
    chunk_bytes: u64,
) -> Result<(), VkError> {
    if s.is_empty() || imports.at(s.device_addr, chunk_bytes).is_some() {
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
        let changed = self.changed(table, placement, epoch);
        match &changed {
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
                self.ctx.destroy_buffer(old.buf, calls);
            }
            self.placed = Some(Placed {
                buf: self.allocate(size, placement, calls)?,
                slots: Vec::new(),
                placement,
                chunk_bytes: chunk,
                checked_epoch: epoch,
            });
        }
        let Some(t) = self.placed.as_mut() else {
            return Err(VkError::TableNotPlaced {
                capacity: table.capacity(),
            });
        };
        let address = t.buf.address;
        let write_all = !reuse || changed.is_none();
        t.slots = table.slots().to_vec();
        t.chunk_bytes = chunk;
        t.checked_epoch = epoch;
        if t.buf.mapped() {
            let dst = t.buf.bytes_mut();
            let mut put = |i: usize, s: &TableSlot| {
                if let Some(d) = dst.get_mut(i * SLOT_BYTES..(i + 1) * SLOT_BYTES) {
                    d[..8].copy_from_slice(&s.guest_chunk.to_le_bytes());
                    d[8..].copy_from_slice(&s.device_addr.to_le_bytes());
                }
            };
            match changed.as_deref() {
                Some(slots) if !write_all => {
                    for &i in slots {
                        if let Some(s) = table.slots().get(i) {
                            put(i, s);
                        }
                    }
                }
                _ => {
                    for (i, s) in table.slots().iter().enumerate() {
                        put(i, s);
                    }
                }
            }
        } else {
            commands.upload(t.buf.raw, &table.to_le_bytes(), calls)?;
        }
        Ok((address, placement))
    }

    /// The slots that differ from the copy on the device, when that copy is still sound (no import
    /// released since it was checked, same size, chunk and placement): only those are checked and
    /// written. `None`: every slot is.
    fn changed(&self, table: &ChunkTable, placement: Placement, epoch: u64) -> Option<Vec<usize>> {
        self.placed
            .as_ref()
            .filter(|p| {
                p.checked_epoch == epoch
                    && p.slots.len() == table.capacity()
                    && p.chunk_bytes == table.chunk_bytes()
                    && p.placement == placement
            })
            .map(|p| {
                p.slots
                    .iter()
                    .zip(table.slots())
                    .enumerate()
                    .filter(|(_, (a, b))| a != b)
                    .map(|(i, _)| i)
                    .collect()
            })
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
        // The device reads the placed copy; the engine must hand over the table it placed. A full
        // comparison costs a pass over the table, so release builds compare the shape.
        let same = placed.slots.len() == table.capacity()
            && (!cfg!(debug_assertions) || placed.slots.as_slice() == table.slots());
        if !same {
            return Err(not_placed);
        }
        if placed.checked_epoch != imports.epoch() {
            check_entries(imports, &placed.slots, table.chunk_bytes())?;
            placed.checked_epoch = imports.epoch();
        }
        Ok(TablePush::of(table, placed.buf.address))
    }

    /// The device addresses of the chunks in the `marks`' slots, by the placed copy (the one the
    /// device read): the chunks a job stored to (C1).
    pub(crate) fn marked_chunks(&self, marks: &[(usize, u32)]) -> Vec<u64> {
        match &self.placed {
            Some(t) => marks
                .iter()
                .filter_map(|&(slot, _)| t.slots.get(slot))
                .map(|s| s.device_addr)
                .collect(),
            None => Vec::new(),
        }
    }
}

impl Drop for DeviceTable {
    fn drop(&mut self) {
        if let Some(t) = self.placed.take() {
            self.ctx.destroy_buffer(t.buf, &mut 0);
        }
    }
}
