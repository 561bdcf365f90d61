//! The narrow trait through which the engine reaches a device, and the CPU reference behind it.
//!
//! A [`Backend`] imports and releases pieces of guest memory (M1–M5), places the chunk table (T6)
//! and runs a prepared [`Job`] (the access stream with its routes decided). The engine decides
//! everything else, so the CPU reference and a Vulkan device run the same plan and their outcomes
//! can be compared word for word. The CPU reference keeps its own simulated device address space.

use std::collections::BTreeMap;

use thiserror::Error;

use crate::addr::ByteRange;
use crate::chunk_table::ChunkTable;
use crate::exec::{Job, Outcome, run_job};
use crate::input::DeviceLimits;
use crate::memory::GuestMemory;
use crate::report::Placement;

/// A backend's failure: each names the piece, the call and the device's answer.
#[derive(Debug, Error)]
#[allow(missing_docs, reason = "the messages document the fields")]
pub enum BackendError {
    #[error("importing {piece} failed: {why}")]
    Import { piece: ByteRange, why: String },
    #[error("no import starts at device address {device_base:#x}")]
    UnknownImport { device_base: u64 },
    /// Any other failure of the device, kept as the backend's own error (the Vulkan backend's
    /// `VkError`), so a caller can downcast it and match rather than read its words.
    #[error("the device failed to run the dispatch: {0}")]
    Execute(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The device is lost (`VK_ERROR_DEVICE_LOST`): nothing more runs on it.
    #[error("the device was lost ({call} answered VK_ERROR_DEVICE_LOST)")]
    DeviceLost { call: String },
    /// The device or the host ran out of memory.
    #[error("out of memory ({what})")]
    OutOfMemory { what: String },
    #[error("the device failed to place the chunk table of {bytes:#x} bytes: {why}")]
    Table { bytes: u64, why: String },
    /// A call into the emulator's memory failed (host mode: commit, guard release, hand-off).
    #[error(transparent)]
    Host(Box<crate::host::HostError>),
}

impl From<crate::host::HostError> for BackendError {
    fn from(e: crate::host::HostError) -> Self {
        Self::Host(Box::new(e))
    }
}

/// A device the engine can run dispatches on.
pub trait Backend {
    /// The device's name, for reports.
    fn name(&self) -> String;

    /// The device's real limits, if it has any; the planner uses them over the configured ones.
    fn limits(&self) -> Option<DeviceLimits> {
        None
    }

    /// M1: imports guest bytes `piece` (page-aligned, committed, private, read-write) and
    /// returns the device address of its first byte.
    fn import(&mut self, piece: ByteRange, memory: &GuestMemory) -> Result<u64, BackendError>;

    /// M4: releases the import at `device_base`.
    fn release(&mut self, device_base: u64) -> Result<(), BackendError>;

    /// The most bytes one import may hold (the device's `maxMemoryAllocationSize`, or less by the
    /// backend's choice): a run larger than this is imported in pieces within it, each starting on
    /// a multiple of the largest power of two at most this ([`crate::import::Mappings`]).
    fn max_import_bytes(&self) -> u64 {
        u64::MAX
    }

    /// T6: places the table on the device and returns its device address and where it lies.
    fn place_table(
        &mut self,
        table: &ChunkTable,
        budget_bytes: u64,
    ) -> Result<(u64, Placement), BackendError>;

    /// Runs a prepared job against guest memory. Device stores land in `memory` directly (they
    /// pass the write-watch by, C1); the engine does the write-back and hand-off afterwards.
    fn execute(
        &mut self,
        job: &Job<'_>,
        table: Option<&ChunkTable>,
        memory: &mut GuestMemory,
    ) -> Result<Outcome, BackendError>;

    /// Device calls made so far (imports, releases, table uploads), for "an unchanged generation
    /// makes none" checks.
    fn calls(&self) -> u64;

    /// C1 for a dispatch the emulator runs itself: zeroed mark words (one `u32` a table slot of
    /// `slots`) the device can store to, and their device address; `None` where this backend
    /// keeps none (the emulator then hands its own marks to `Engine::complete`).
    fn mark_words(&mut self, slots: usize) -> Result<Option<u64>, BackendError> {
        let _ = slots;
        Ok(None)
    }

    /// C1 after the emulator's fence: the slots whose mark words are set, with their counts, in
    /// slot order; the words are zeroed for the next dispatch.
    fn take_marks(&mut self, slots: usize) -> Result<Vec<(usize, u32)>, BackendError> {
        let _ = slots;
        Ok(Vec::new())
    }

    /// [`Backend::mark_words`] for dispatch `dispatch`, one of many in flight: each has mark
    /// words of its own until [`Backend::take_marks_of`] (or [`Backend::forget_marks`]). A backend
    /// that keeps one buffer hands out that one.
    fn mark_words_for(&mut self, slots: usize, dispatch: u64) -> Result<Option<u64>, BackendError> {
        let _ = dispatch;
        self.mark_words(slots)
    }

    /// [`Backend::take_marks`] of dispatch `dispatch`'s mark words, which go back to be handed
    /// out again.
    fn take_marks_of(
        &mut self,
        slots: usize,
        dispatch: u64,
    ) -> Result<Vec<(usize, u32)>, BackendError> {
        let _ = dispatch;
        self.take_marks(slots)
    }

    /// Dispatch `dispatch` will not complete (abandoned before the device ran it): its mark words
    /// are zeroed and handed out again. Never for a dispatch the device may still be running (a
    /// lost device's, [`crate::engine::Engine::device_lost`]): its words stay held.
    fn forget_marks(&mut self, dispatch: u64) {
        let _ = dispatch;
    }

    /// Whether the device's store through an imported page lands (and passes the write-watch by)
    /// when the host has since made the page read-only: then a write-watch guard raised while a
    /// dispatch in flight may store there need not wait (M5); C1's marks hand the store off at
    /// the dispatch's complete. Measured true on NVIDIA's driver; on lavapipe such a store kills
    /// the process (`../shared/TOOLCHAIN.md`, "Host pointers on real drivers"), and a driver not
    /// measured is taken to be like lavapipe.
    fn device_stores_pass_guards(&self) -> bool {
        false
    }

    /// T6 with dispatches in flight: the table copies at these device addresses are read by
    /// dispatches in flight, so the next [`Backend::place_table`] must write another copy (and
    /// keep these until they are no longer named).
    fn table_busy(&mut self, busy: &[u64]) {
        let _ = busy;
    }
}

/// The CPU reference: a simulated device address space over guest memory.
#[derive(Debug)]
pub struct CpuBackend {
    /// Imports by device base: (guest range).
    imports: BTreeMap<u64, ByteRange>,
    next_device: u64,
    calls: u64,
}

/// Where the CPU reference's simulated device address space starts. Far from any guest address
/// the samples use, so a device address mistaken for a guest one is caught.
pub const CPU_DEVICE_BASE: u64 = 0x0000_7f00_0000_0000;

impl Default for CpuBackend {
    fn default() -> Self {
        Self {
            imports: BTreeMap::new(),
            next_device: CPU_DEVICE_BASE,
            calls: 0,
        }
    }
}

impl CpuBackend {
    /// A fresh CPU reference.
    pub fn new() -> Self {
        Self::default()
    }

    /// The guest address behind device address `device`, and how many bytes from there the same
    /// import holds, if an import holds it.
    pub fn guest_from_device(&self, device: u64) -> Option<(u64, u64)> {
        let (base, guest) = self.imports.range(..=device).next_back()?;
        let off = device - base;
        (off < guest.size_bytes()).then(|| (guest.start + off, guest.size_bytes() - off))
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> String {
        "cpu-reference".to_owned()
    }

    fn import(&mut self, piece: ByteRange, _memory: &GuestMemory) -> Result<u64, BackendError> {
        self.calls += 1;
        if piece.is_empty() {
            return Err(BackendError::Import {
                piece,
                why: "an empty piece".into(),
            });
        }
        // Keep the guest's offset within 64 KiB so that device addresses share the guest's low
        // bits (as a host pointer to a page-aligned allocation would), then leave a gap.
        // Checked: a piece of most of the 64-bit space does not fit the simulated address space.
        let base = self.next_device + (piece.start & 0xffff);
        let next = base
            .checked_add(piece.size_bytes())
            .and_then(|end| end.checked_add(0x1_0000 + 0xffff))
            .ok_or_else(|| BackendError::Import {
                piece,
                why: format!(
                    "{:#x} bytes do not fit the CPU reference's device address space above {base:#x}",
                    piece.size_bytes()
                ),
            })?;
        self.next_device = next & !0xffff;
        self.imports.insert(base, piece);
        Ok(base)
    }

    fn release(&mut self, device_base: u64) -> Result<(), BackendError> {
        self.calls += 1;
        self.imports
            .remove(&device_base)
            .map(|_| ())
            .ok_or(BackendError::UnknownImport { device_base })
    }

    fn place_table(
        &mut self,
        table: &ChunkTable,
        budget_bytes: u64,
    ) -> Result<(u64, Placement), BackendError> {
        self.calls += 1;
        let bytes = table.capacity() as u64 * crate::chunk_table::SLOT_BYTES as u64;
        let placement = if bytes <= budget_bytes {
            Placement::DeviceLocal
        } else {
            Placement::HostVisible
        };
        Ok((0x0000_7e00_0000_0000, placement))
    }

    fn execute(
        &mut self,
        job: &Job<'_>,
        table: Option<&ChunkTable>,
        memory: &mut GuestMemory,
    ) -> Result<Outcome, BackendError> {
        let translate = |device: u64| self.guest_from_device(device);
        run_job(job, table, memory, &translate).map_err(BackendError::from)
    }

    fn calls(&self) -> u64 {
        self.calls
    }
}
