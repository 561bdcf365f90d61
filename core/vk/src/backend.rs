//! [`VulkanBackend`]: the [`Backend`] trait on a Vulkan device, delegating to one part per job.
//!
//! Imports (M1–M5) are `imports`; the chunk table on the device (T6) is `table`; a job runs as one
//! or more dispatches of the replay shader in `replay`, and comes back as the same [`Outcome`] the
//! CPU reference gives. What ties them together stays here: a release or a new table waits for the
//! dispatch in flight (M5), the mirrors are synced before a job that reads guest memory by device
//! address, and the chunks it marked are copied back after (C1).

use std::sync::Arc;

use crate::VkError;
use crate::commands::Commands;
use crate::device::{Context, ContextOptions};
use crate::imports::{ImportTime, Imports};
use crate::replay::Replay;
use crate::table::DeviceTable;
use dispatchscope_core::addr::ByteRange;
use dispatchscope_core::backend::{Backend, BackendError};
use dispatchscope_core::chunk_table::{
    ChunkTable, MARK_BLOCK_SLOTS, SLOT_BYTES, mark_buffer_words,
};
use dispatchscope_core::exec::{Job, Outcome, Planned};
use dispatchscope_core::input::DeviceLimits;
use dispatchscope_core::memory::GuestMemory;
use dispatchscope_core::report::Placement;

/// The Vulkan backend. See the module docs of [`super`].
pub struct VulkanBackend {
    ctx: Arc<Context>,
    imports: Imports,
    table: DeviceTable,
    replay: Replay,
    /// The one command buffer every upload and dispatch is recorded into, and its fence.
    commands: Commands,
    /// Vulkan calls outside `execute` ([`Backend::calls`]).
    calls: u64,
    /// C1 for dispatches the emulator runs itself: host-visible mark words, one a table slot,
    /// a buffer a dispatch in flight ([`Backend::mark_words_for`]), and spares to hand out again.
    marks: Vec<MarkWords>,
}

/// One dispatch's mark words (C1), or a spare.
struct MarkWords {
    buf: crate::buffer::Buf,
    /// The dispatch in flight that holds it.
    owner: Option<u64>,
}

/// The dispatch [`Backend::mark_words`] (one at a time) names.
const ONE_AT_A_TIME: u64 = u64::MAX;

/// NVIDIA's PCI vendor id.
const NVIDIA: u32 = 0x10de;

/// Spare mark buffers kept for the next dispatches (the rest are destroyed).
const SPARE_MARKS: usize = 8;

impl std::fmt::Debug for VulkanBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VulkanBackend")
            .field("device", &self.ctx.info().name)
            .field("imports", &self.imports.len())
            .field("calls", &self.calls)
            .finish_non_exhaustive()
    }
}

impl VulkanBackend {
    /// Opens a context and a backend on it.
    pub fn new(opts: &ContextOptions) -> Result<Self, VkError> {
        Self::on(Context::new(opts)?)
    }

    /// A fresh backend (no imports, no table) on an open context.
    pub fn on(ctx: Arc<Context>) -> Result<Self, VkError> {
        let commands = Commands::new(&ctx)?;
        Ok(Self {
            imports: Imports::new(&ctx),
            table: DeviceTable::new(&ctx),
            replay: Replay::new(&ctx),
            commands,
            calls: 0,
            marks: Vec::new(),
            ctx,
        })
    }

    /// The context this backend runs on.
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// Vulkan calls made by `execute` (not counted in [`Backend::calls`]).
    pub fn execute_calls(&self) -> u64 {
        self.replay.calls
    }

    /// Replay dispatches submitted so far (a job with more slots than one dispatch binds takes several).
    pub fn dispatches(&self) -> u64 {
        self.replay.dispatches
    }

    /// Imports alive.
    pub fn n_imports(&self) -> usize {
        self.imports.len()
    }

    /// Time spent importing so far, split between the mirror copies and the Vulkan calls.
    pub fn import_time(&self) -> ImportTime {
        self.imports.time()
    }

    /// The mirror of the import at `device_base`: the bench fills it in place.
    #[cfg(feature = "bench")]
    pub(crate) fn mirror_mut(&mut self, device_base: u64) -> Option<&mut [u8]> {
        self.imports.mirror_mut(device_base)
    }

    /// O6: the slot bindings of the last job, in the order first used: each slot (None for an
    /// access with no slot) and the byte offset in its holder's buffer its descriptor was bound at.
    pub fn last_slot_bindings(&self) -> &[(Option<u32>, u64)] {
        &self.replay.last_bindings
    }

    fn run(
        &mut self,
        job: &Job<'_>,
        table: Option<&ChunkTable>,
        memory: &mut GuestMemory,
    ) -> Result<Outcome, VkError> {
        let has_device = job
            .accesses
            .iter()
            .any(|pa| matches!(pa.route, Planned::Device { .. }));
        // T3/T6: the table the device reads; a job without device accesses does not read it.
        let table_push = match table {
            Some(t) if has_device => Some(self.table.push_for(t, &self.imports)?),
            _ => None,
        };
        if has_device {
            self.imports.sync_mirrors(memory);
        }
        let empty_table = table.is_none() && has_device;
        let outcome = self.replay.run(
            job,
            table,
            table_push,
            empty_table,
            memory,
            &mut self.commands,
        )?;
        if has_device && let Some(t) = table {
            let marked = self.table.marked_chunks(t, &outcome.marks);
            self.imports.copy_back(&marked, memory);
        }
        Ok(outcome)
    }
}

impl Backend for VulkanBackend {
    fn name(&self) -> String {
        self.ctx.device_name()
    }

    /// The device's `maxMemoryAllocationSize`, and at most [`IMPORT_BLOCK_BYTES`]: a decommit
    /// re-imports what is left of the imports it touched, so an import is kept to a size whose
    /// re-import (the driver pins its pages) costs what a frame can spare.
    fn max_import_bytes(&self) -> u64 {
        self.ctx
            .info
            .max_memory_allocation_size
            .min(IMPORT_BLOCK_BYTES)
    }

    fn limits(&self) -> Option<DeviceLimits> {
        Some(self.ctx.limits())
    }

    fn import(&mut self, piece: ByteRange, memory: &GuestMemory) -> Result<u64, BackendError> {
        if piece.is_empty() {
            self.calls += 1;
            return Err(BackendError::Import {
                piece,
                why: "an empty piece".into(),
            });
        }
        Ok(self.imports.import(piece, memory, &mut self.calls)?)
    }

    fn release(&mut self, device_base: u64) -> Result<(), BackendError> {
        // M5: a release waits for any dispatch still reading the mapping.
        self.commands.wait_in_flight(&mut self.calls)?;
        Ok(self.imports.release(device_base, &mut self.calls)?)
    }

    fn place_table(
        &mut self,
        table: &ChunkTable,
        budget_bytes: u64,
    ) -> Result<(u64, Placement), BackendError> {
        let bytes = (table.capacity() * SLOT_BYTES) as u64;
        self.commands
            .wait_in_flight(&mut self.calls)
            .and_then(|()| {
                self.table.place(
                    table,
                    budget_bytes,
                    &self.imports,
                    &self.commands,
                    &mut self.calls,
                )
            })
            .map_err(|e| {
                // A lost device or exhausted memory says so, whatever was being placed.
                if e.is_lost_or_out_of_memory() {
                    BackendError::from(e)
                } else {
                    BackendError::Table {
                        bytes,
                        why: e.to_string(),
                    }
                }
            })
    }

    fn execute(
        &mut self,
        job: &Job<'_>,
        table: Option<&ChunkTable>,
        memory: &mut GuestMemory,
    ) -> Result<Outcome, BackendError> {
        puffin::profile_function!();
        Ok(self.run(job, table, memory)?)
    }

    fn calls(&self) -> u64 {
        self.calls
    }

    fn mark_words(&mut self, slots: usize) -> Result<Option<u64>, BackendError> {
        self.mark_words_for(slots, ONE_AT_A_TIME)
    }

    fn take_marks(&mut self, slots: usize) -> Result<Vec<(usize, u32)>, BackendError> {
        self.take_marks_of(slots, ONE_AT_A_TIME)
    }

    fn mark_words_for(&mut self, slots: usize, dispatch: u64) -> Result<Option<u64>, BackendError> {
        // A mark word a slot, then the summary (a word a block of MARK_BLOCK_SLOTS slots) that
        // the helper sets beside each mark, at the end of the buffer's mark words.
        let bytes = 4 * mark_buffer_words(slots.max(1)) as u64;
        // One already held by this dispatch (prepared again after a refused complete), else a
        // spare of the size (zeroed: `take_marks_of` zeroes what the device set), else a new one.
        if let Some(m) = self.marks.iter().find(|m| m.owner == Some(dispatch)) {
            if m.buf.size == bytes {
                return Ok(Some(m.buf.address));
            }
            self.forget_marks(dispatch);
        }
        if let Some(m) = self
            .marks
            .iter_mut()
            .find(|m| m.owner.is_none() && m.buf.size == bytes)
        {
            m.owner = Some(dispatch);
            return Ok(Some(m.buf.address));
        }
        // Spares of another size belong to a table no longer placed: nothing reads them.
        let mut kept = Vec::with_capacity(self.marks.len() + 1);
        for m in self.marks.drain(..) {
            if m.owner.is_none() {
                self.ctx.destroy_buffer(m.buf, &mut self.calls);
            } else {
                kept.push(m);
            }
        }
        self.marks = kept;
        let mut buf = self
            .ctx
            .host_buffer(bytes, "the mark words (C1)", &mut self.calls)?;
        buf.bytes_mut().fill(0);
        let address = buf.address;
        self.marks.push(MarkWords {
            buf,
            owner: Some(dispatch),
        });
        Ok(Some(address))
    }

    fn take_marks_of(
        &mut self,
        slots: usize,
        dispatch: u64,
    ) -> Result<Vec<(usize, u32)>, BackendError> {
        let Some(m) = self.marks.iter_mut().find(|m| m.owner == Some(dispatch)) else {
            return Ok(Vec::new());
        };
        m.owner = None;
        // The summary names the blocks with a mark; only those are read and zeroed (C1 in
        // proportion to the chunks stored to, not to the table).
        let mut marks = Vec::new();
        let words: &mut [u32] = bytemuck::cast_slice_mut(m.buf.bytes_mut());
        let (marks_words, summary) = words.split_at_mut(slots.min(words.len()));
        // Sixty-four summary words at a time: a table of a million slots has 4,096 of them, and a
        // dispatch marks few blocks.
        const SPAN: usize = 64;
        for (g, group) in summary.chunks_mut(SPAN).enumerate() {
            if group.iter().fold(0, |a, &w| a | w) == 0 {
                continue;
            }
            for (k, flag) in group.iter_mut().enumerate() {
                if *flag == 0 {
                    continue;
                }
                let b = g * SPAN + k;
                *flag = 0;
                let first = b * MARK_BLOCK_SLOTS;
                let block = marks_words
                    .get_mut(first..(first + MARK_BLOCK_SLOTS).min(slots))
                    .unwrap_or_default();
                for (i, w) in block.iter_mut().enumerate() {
                    if *w != 0 {
                        marks.push((first + i, *w));
                        *w = 0;
                    }
                }
            }
        }
        self.trim_spare_marks();
        Ok(marks)
    }

    fn forget_marks(&mut self, dispatch: u64) {
        if let Some(m) = self.marks.iter_mut().find(|m| m.owner == Some(dispatch)) {
            // The device may have set any word before it stopped: all of it is zeroed.
            m.buf.bytes_mut().fill(0);
            m.owner = None;
        }
        self.trim_spare_marks();
    }

    fn table_busy(&mut self, busy: &[u64]) {
        self.table.set_busy(busy);
    }

    fn device_stores_pass_guards(&self) -> bool {
        // Measured on NVIDIA's driver (a store through an import lands in a page made read-only
        // since); lavapipe's kills the process, and other drivers are not measured.
        self.ctx.info().vendor_id == NVIDIA
    }
}

impl VulkanBackend {
    /// Destroys spare mark buffers past [`SPARE_MARKS`] (none is read: its dispatch completed).
    fn trim_spare_marks(&mut self) {
        let spare = self.marks.iter().filter(|m| m.owner.is_none()).count();
        if spare <= SPARE_MARKS {
            return;
        }
        let mut extra = spare - SPARE_MARKS;
        let mut kept = Vec::with_capacity(self.marks.len());
        for m in self.marks.drain(..) {
            if m.owner.is_none() && extra > 0 {
                extra -= 1;
                self.ctx.destroy_buffer(m.buf, &mut self.calls);
            } else {
                kept.push(m);
            }
        }
        self.marks = kept;
    }

    /// Mark buffers alive (held by dispatches in flight, and spares).
    pub fn mark_buffers(&self) -> usize {
        self.marks.len()
    }

    /// Mark buffers held by dispatches: in flight, or lost with the device (whose words a hung
    /// device may still set, `Engine::device_lost`).
    pub fn held_mark_buffers(&self) -> usize {
        self.marks.iter().filter(|m| m.owner.is_some()).count()
    }

    /// Chunk-table copies on the device (the current one, and older ones dispatches in flight
    /// read or kept to be written again).
    pub fn table_copies(&self) -> usize {
        self.table.copies()
    }
}

/// The most guest bytes one import holds ([`Backend::max_import_bytes`]): 256 MiB.
pub const IMPORT_BLOCK_BYTES: u64 = 256 << 20;

impl VulkanBackend {
    /// Bytes of chunk-table slots written to the device so far (T6: the changed slots, or the
    /// whole table when it was built or grew).
    pub fn table_bytes_uploaded(&self) -> u64 {
        self.table.uploaded_bytes
    }
}

impl Drop for VulkanBackend {
    fn drop(&mut self) {
        let _ = self.commands.wait_in_flight(&mut self.calls);
        for m in std::mem::take(&mut self.marks) {
            self.ctx.destroy_buffer(m.buf, &mut self.calls);
        }
        // The parts are destroyed with the fields (imports, table, replay buffers, then the
        // commands): nothing is pending on them (waited above).
    }
}
