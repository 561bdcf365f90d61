//! [`Engine`]: the whole dispatch path, in the order an emulator runs it.
//!
//! Between dispatches the emulator applies [`Event`](crate::input::Event)s ([`Engine::apply`],
//! `events.rs`); each dispatch goes through [`Engine::dispatch`], one phase a rule group, each in a
//! file of its own:
//!
//! | phase | rules | where |
//! |---|---|---|
//! | validate | input | `validate::check` |
//! | plan the bound path | O1–O11 | `overlap::Planner::plan` |
//! | choose the mode | A1, W2 | `mode::choose` |
//! | write deferred copies | C3 | `Engine::write_deferred` (here) |
//! | map, keep the table | M1–M5, T1–T3, T6 | `mapping.rs`: `Engine::map`, `Engine::sync_table` |
//! | route each access | W1–W3, P1, O6 | `route::route` |
//! | run on the backend | T4, T5, C1, O8, O9 | `Backend::execute` (`exec.rs` on the CPU) |
//! | trace lookups, escapes | T5, T4 | `accesses.rs`, `escape.rs` |
//! | marks, hand-off | C1, C2 | `after::marks`, `Engine::hand_off` |
//! | write back | O8, O9 | `Engine::write_back`; a device pass's holder: `Engine::write_back_from_device` |
//! | the known limit | L1 | `after::detect_l1` |
//!
//! The first three (validate, plan, mode) are `replan::plan_phases`, which [`Replanner`] runs alone
//! for a "what if" under other limits.
//!
//! The engine keeps its state across dispatches as the emulator does; it never draws anything.

use thiserror::Error;

use crate::addr::ByteRange;
use crate::backend::{Backend, BackendError, CpuBackend};
use crate::chunk_table::{ChunkTable, TableError};
use crate::import::Mappings;
use crate::input::{DeviceLimits, DispatchInput, InputError, LimitsError};
use crate::memory::{GuestMemory, MemoryChange, MemoryError};
use crate::overlap::Planner;
use crate::report::{
    AccessReport, BeforeDispatch, Counts, DispatchReport, Escape, EventReport, HandOff, Hazard,
    HostFailure, HostFailureKind, HostPathReport, Mark, Mode, SlotBinding, TargetLost, WriteBack,
};

mod accesses;
mod after;
mod escape;
mod events;
mod in_flight;
mod lost;
mod mapping;
mod mode;
mod prepare;
mod replan;
mod route;
mod validate;

pub use in_flight::{Carry, CarryFrom, ChainWait, MAX_IN_FLIGHT, PrepareOptions};
pub use lost::DeviceFault;
use mapping::{MappingState, TableSync};
pub use prepare::{
    CompleteError, DEVICE_WORDS_LISTED, DeviceAddressing, DeviceInstrumentation, DeviceRun,
    HolderRun, Prepared, Ran as RanOn, SlotPlan, push_word,
};
pub use replan::{Planned, Replanner, accesses_not_run};
pub use validate::validate;

/// Why the engine could not take an event or a dispatch. Nothing changed when it returns one.
#[derive(Debug, Error)]
pub enum EngineError {
    /// The dispatch input is malformed.
    #[error("bad dispatch input: {0}")]
    Input(#[from] InputError),
    /// The event is malformed.
    #[error("bad memory event: {0}")]
    Memory(#[from] MemoryError),
    /// The device failed.
    #[error("device: {0}")]
    Backend(#[from] BackendError),
    /// The chunk table could not be built.
    #[error("chunk table: {0}")]
    Table(#[from] TableError),
    /// The device limits describe no device.
    #[error("bad device limits: {0}")]
    Limits(#[from] LimitsError),
    /// A device's holder bytes cannot be written back ([`Engine::write_back_from_device`]).
    #[error("device write-back: {0}")]
    DeviceWriteBack(#[from] DeviceWriteBackError),
    /// A dispatch is prepared and not completed: the engine's own dispatch path runs only with
    /// nothing in flight; complete (or abandon) it first.
    #[error("dispatch {0} is prepared and not completed; complete or abandon it first")]
    Prepared(u64),
    /// [`MAX_IN_FLIGHT`] dispatches are prepared and not completed.
    #[error(
        "{MAX_IN_FLIGHT} dispatches are in flight (prepared and not completed), the most the engine keeps; complete the oldest, dispatch {oldest}, first"
    )]
    TooManyInFlight {
        /// The oldest dispatch in flight.
        oldest: u64,
    },
    /// A prepare waits for an earlier dispatch's complete ([`ChainWait`]); nothing was prepared.
    #[error("{0}")]
    ChainWaits(Box<ChainWait>),
    /// The device was lost ([`Engine::device_lost`]): nothing more is prepared on it.
    #[error(
        "the device was lost with {0} dispatch(es) in flight (see the loss report); nothing more runs on it: make a new device and a new engine"
    )]
    Lost(usize),
    /// What [`Engine::complete`] was given does not fit the prepared dispatch.
    #[error("complete: {0}")]
    Complete(#[from] CompleteError),
    /// M5: the event touches memory a prepared dispatch can reach; nothing changed. Complete
    /// (or abandon) that dispatch, then apply the event again.
    #[error("{0}")]
    Waits(Box<WaitsFor>),
    /// A call into the emulator's memory failed where the dispatch cannot go on without it (C3's
    /// deferred copy: the dispatch would read what the copy should have replaced). Nothing is
    /// lost: what did not land stays deferred and is tried again at the next dispatch.
    #[error("{context}: {error}")]
    Host {
        /// What the engine was doing.
        context: String,
        /// The failed call.
        error: Box<crate::host::HostError>,
    },
}

/// M5 for the emulator's own dispatches: an event that releases, decommits or reprotects memory
/// a prepared dispatch can reach waits for that dispatch's complete. The engine refuses it rather
/// than holding it: the emulator must not change those pages before the device is done with them
/// (on lavapipe a device store into a page made read-only kills the process; on NVIDIA it lands
/// in pages the emulator believes released), so it is told which dispatch to complete first.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error(
    "M5: this {event} of {range} touches {reached}, which dispatch {dispatch} ({mode}) can reach and has not completed: complete (or abandon) dispatch {dispatch} after its fence, then apply the event again; nothing changed, and the emulator must not change those pages before then"
)]
pub struct WaitsFor {
    /// The prepared dispatch the event waits for.
    pub dispatch: u64,
    /// Its mode, in words.
    pub mode: &'static str,
    /// The event's name.
    pub event: &'static str,
    /// The guest bytes the event touches.
    pub range: ByteRange,
    /// The part of the dispatch's reach it touches.
    pub reached: ByteRange,
}

/// What kind of failure an [`EngineError`] is, for a caller that acts on the kind rather than on
/// the words: the C ABI's status, the live wire's failed dispatch, the command line's exit status
/// and the window. A lost device and exhausted memory stay apart from every other failure of the
/// device, as the backend's [`BackendError::DeviceLost`] and [`BackendError::OutOfMemory`] keep
/// them (`VK_ERROR_DEVICE_LOST`; `VK_ERROR_OUT_OF_DEVICE_MEMORY`, `VK_ERROR_OUT_OF_HOST_MEMORY`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureKind {
    /// The input is malformed: a dispatch, an event, the limits, or what a device pass handed
    /// back; the caller's to mend.
    BadInput,
    /// Prepare and complete out of order.
    Order,
    /// The device was lost: nothing more runs on it.
    DeviceLost,
    /// The device or the host ran out of memory.
    OutOfMemory,
    /// A call into the emulator's memory failed (host mode: commit, guard release, hand-off).
    HostCallback,
    /// The device failed otherwise (an import refused, the table not placed, a call that failed
    /// with another code), or the chunk table could not be built.
    Device,
    /// M5: an event waits for a prepared dispatch's complete.
    Waits,
}

impl FailureKind {
    /// The kind in words, as the window and the command line name it.
    pub fn words(self) -> &'static str {
        match self {
            FailureKind::BadInput => "bad input",
            FailureKind::Order => "calls out of order",
            FailureKind::DeviceLost => "device lost",
            FailureKind::OutOfMemory => "out of memory",
            FailureKind::HostCallback => "the emulator's memory call failed",
            FailureKind::Device => "device failure",
            FailureKind::Waits => "waits for a prepared dispatch (M5)",
        }
    }
}

impl std::fmt::Display for FailureKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.words())
    }
}

impl BackendError {
    /// Its [`FailureKind`]: a lost device, exhausted memory, the emulator's memory call, or any
    /// other failure of the device.
    pub fn kind(&self) -> FailureKind {
        match self {
            BackendError::DeviceLost { .. } => FailureKind::DeviceLost,
            BackendError::OutOfMemory { .. } => FailureKind::OutOfMemory,
            BackendError::Host(_) => FailureKind::HostCallback,
            BackendError::Import { .. }
            | BackendError::UnknownImport { .. }
            | BackendError::Execute(_)
            | BackendError::Table { .. } => FailureKind::Device,
        }
    }
}

impl EngineError {
    /// Its [`FailureKind`]: the one place an engine error is sorted by kind.
    pub fn kind(&self) -> FailureKind {
        match self {
            EngineError::Memory(MemoryError::Host(_)) | EngineError::Host { .. } => {
                FailureKind::HostCallback
            }
            EngineError::Input(_)
            | EngineError::Memory(_)
            | EngineError::Limits(_)
            | EngineError::DeviceWriteBack(_)
            | EngineError::Complete(CompleteError::HolderSize { .. })
            | EngineError::Complete(CompleteError::NotAHolder { .. })
            | EngineError::Complete(CompleteError::MarkWords { .. })
            | EngineError::Complete(CompleteError::MarkOnEmptySlot { .. })
            | EngineError::Complete(CompleteError::Instrumentation(_)) => FailureKind::BadInput,
            EngineError::ChainWaits(_) => FailureKind::Waits,
            EngineError::Lost(_) => FailureKind::DeviceLost,
            EngineError::Prepared(_)
            | EngineError::TooManyInFlight { .. }
            | EngineError::Complete(CompleteError::NotPrepared { .. }) => FailureKind::Order,
            EngineError::Backend(b) => b.kind(),
            EngineError::Table(_) => FailureKind::Device,
            EngineError::Waits(_) => FailureKind::Waits,
        }
    }
}

/// Why [`Engine::write_back_from_device`] refused a device's holder bytes. Nothing was written.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum DeviceWriteBackError {
    /// The report is not the engine's last dispatch: guest memory has moved on since.
    #[error("dispatch {report} is not the engine's last dispatch ({last:?})")]
    NotLastDispatch {
        /// The report's dispatch.
        report: u64,
        /// The engine's last dispatch, if any.
        last: Option<u64>,
    },
    /// The slot is not a resolved holder of the report's plan (O5, O6).
    #[error("slot {slot} is not a resolved holder of dispatch {dispatch}")]
    NotAHolder {
        /// The slot asked for.
        slot: u32,
        /// The dispatch.
        dispatch: u64,
    },
    /// The holder already has its write-back in the report.
    #[error("holder slot {slot} of dispatch {dispatch} was already written back")]
    AlreadyWrittenBack {
        /// The holder slot.
        slot: u32,
        /// The dispatch.
        dispatch: u64,
    },
    /// The device's data or mask is shorter than the holder (O9: one mask word a data word).
    #[error(
        "holder slot {slot} spans {holder_bytes} bytes, but the device gave {data} bytes of data and {masks} of masks"
    )]
    Size {
        /// The holder slot.
        slot: u32,
        /// The holder's widened size (O5).
        holder_bytes: u64,
        /// The data bytes given.
        data: usize,
        /// The mask bytes given.
        masks: usize,
    },
}

/// The dispatch path of one emulated device.
pub struct Engine<B: Backend = CpuBackend> {
    limits: DeviceLimits,
    memory: GuestMemory,
    backend: B,
    mappings: Mappings,
    table: Option<ChunkTable>,
    sync: TableSync,
    next_dispatch: u64,
    next_event: u64,
    pending: Vec<EventReport>,
    in_flight: Option<u64>,
    /// Plans every dispatch's bound path, keeping its working arrays between dispatches.
    planner: Planner,
    /// The mapping state the reports copy, kept until the memory or the mappings move.
    mapping_state: MappingState,
    /// The last event that set each page's state, for escapes into pages left out (M3).
    page_events: events::PageEvents,
    /// The dispatches [`Engine::prepare`] handed out and [`Engine::complete`] has not taken.
    flights: in_flight::Flights,
    /// Builds of the chunk table so far: which table a dispatch in flight read.
    table_serial: u64,
    /// Tables replaced by a build while a device-addressed dispatch in flight read them, by serial:
    /// its marks name their slots.
    retired_tables: Vec<(u64, ChunkTable)>,
    /// What each program did in earlier dispatches, for a lost device's report.
    programs: lost::Programs,
    /// The device was lost: the report made then.
    lost: Option<crate::report::DeviceLossReport>,
    /// [`Engine::dispatch`] is preparing a dispatch its own backend runs.
    own_run: bool,
    /// Host mode: the memory's state count when mapped pages were last checked for guards.
    /// Host mode: the ranges the write-watch guarded since the last device-addressed dispatch,
    /// whose mapped pages M2 unguards again before the device may store through them.
    guards_raised: Vec<crate::addr::ByteRange>,
    /// Host mode: what the emulator's memory did to the dispatch under way (prepare to complete).
    host_path: HostPathReport,
    /// Host mode: re-read the real mapping of every imported piece before each device-addressed
    /// dispatch (the checked mode).
    checked: bool,
}

impl Engine<CpuBackend> {
    /// An engine on the CPU reference with `limits`.
    pub fn cpu(limits: DeviceLimits) -> Result<Self, EngineError> {
        Self::new(limits, CpuBackend::new())
    }
}

impl<B: Backend> Engine<B> {
    /// An engine on `backend`. The backend's real limits, if it has any, take the place of the
    /// storage-buffer limits in `limits`.
    pub fn new(limits: DeviceLimits, backend: B) -> Result<Self, EngineError> {
        Self::with_memory(limits, backend, None)
    }

    /// An engine in host mode: guest memory is the emulator's own pages, reached through `host`
    /// (`crate::host`); nothing is copied, and every reservation names its host base.
    pub fn with_host(
        limits: DeviceLimits,
        backend: B,
        host: std::sync::Arc<dyn crate::host::HostMemory>,
    ) -> Result<Self, EngineError> {
        Self::with_memory(limits, backend, Some(host))
    }

    fn with_memory(
        mut limits: DeviceLimits,
        backend: B,
        host: Option<std::sync::Arc<dyn crate::host::HostMemory>>,
    ) -> Result<Self, EngineError> {
        if let Some(real) = backend.limits() {
            limits.name = real.name;
            limits.min_storage_buffer_offset_alignment = real.min_storage_buffer_offset_alignment;
            limits.max_storage_buffer_range = real.max_storage_buffer_range;
        }
        limits.check()?;
        let memory = match host {
            Some(h) => GuestMemory::with_host(limits.host_page_bytes, h)?,
            None => GuestMemory::new(limits.host_page_bytes)?,
        };
        Ok(Self {
            memory,
            limits,
            backend,
            mappings: Mappings::new(),
            table: None,
            sync: TableSync::default(),
            next_dispatch: 0,
            next_event: 0,
            pending: Vec::new(),
            in_flight: None,
            planner: Planner::new(),
            mapping_state: MappingState::default(),
            page_events: events::PageEvents::default(),
            flights: in_flight::Flights::default(),
            table_serial: 0,
            retired_tables: Vec::new(),
            programs: lost::Programs::default(),
            lost: None,
            own_run: false,
            guards_raised: Vec::new(),
            host_path: HostPathReport::default(),
            checked: false,
        })
    }

    /// The limits dispatches are planned against.
    pub fn limits(&self) -> &DeviceLimits {
        &self.limits
    }

    /// Host mode's checked mode: before each device-addressed dispatch the real mapping of every
    /// imported piece is read again (`PROCMAP_QUERY`), and a piece the process no longer maps as
    /// the events said (made read-only or `PROT_NONE`, unmapped, remapped shared) is dropped and
    /// left out by name before the device can touch it. Off by default; a debugger's attach turns
    /// it on (the C ABI's `ds_engine_set_checked`, and the tap).
    pub fn set_checked(&mut self, on: bool) {
        self.checked = on;
    }

    /// Whether the checked mode is on.
    pub fn checked(&self) -> bool {
        self.checked
    }

    /// Notes a failed call into the emulator's memory in the dispatch under way's report, with the
    /// guest bytes it lost and (the first [`HostFailure::BYTES_KEPT`] of) their bytes.
    pub(crate) fn host_failure(
        &mut self,
        kind: HostFailureKind,
        error: crate::host::HostError,
        lost: Option<ByteRange>,
        bytes: &[u8],
    ) {
        let h = &mut self.host_path;
        if h.failures.len() >= crate::memory::HOST_FAILURES_KEPT {
            h.failures_not_listed += 1;
            return;
        }
        h.failures.push(HostFailure {
            kind,
            error,
            lost,
            bytes: bytes[..bytes.len().min(HostFailure::BYTES_KEPT)].to_vec(),
        });
    }

    /// Guest memory as it stands.
    pub fn memory(&self) -> &GuestMemory {
        &self.memory
    }

    /// The mappings as they stand.
    pub fn mappings(&self) -> &Mappings {
        &self.mappings
    }

    /// The chunk table, once a device-addressed dispatch has needed one.
    pub fn table(&self) -> Option<&ChunkTable> {
        self.table.as_ref()
    }

    /// The slots the last change of the chunk table changed, with the table versions
    /// ([`ChunkTable::version`]) it went from and to: a copy of the table at the first version
    /// becomes the table by these slots alone (every slot after a build or a grow). `None` before
    /// the table first changed.
    pub fn table_changes(&self) -> Option<(u64, u64, &crate::chunk_table::Changed)> {
        self.sync
            .last_changes
            .as_ref()
            .map(|(from, to, c)| (*from, *to, c))
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Guest bytes as the engine sees them, for a debugger: the emulator's own pages in host mode
    /// (a page the process cannot read is an error, never a crash), the simulated contents
    /// otherwise.
    pub fn read_guest(&self, address: u64, out: &mut [u8]) -> Result<(), crate::host::HostError> {
        self.memory.try_read_bytes(address, out)
    }

    /// The index the next dispatch will get.
    pub fn next_dispatch(&self) -> u64 {
        self.next_dispatch
    }

    /// Loads guest bytes without any write-watch effect (a sample's or capture's contents).
    /// Bytes no reservation holds are kept as they are; [`Engine::try_load_contents`] refuses them.
    /// A sample's contents are for simulated memory, which takes every byte; in host mode use
    /// [`Engine::try_load_contents`], which says what the emulator refused.
    pub fn load_contents(&mut self, address: u64, bytes: &[u8]) {
        let _landed = self.memory.write_bytes(address, bytes);
    }

    /// [`Engine::load_contents`] for contents read from a file: bytes that pass the end of the
    /// address space or that no reservation holds are a named error, and nothing is loaded.
    pub fn try_load_contents(&mut self, address: u64, bytes: &[u8]) -> Result<(), EngineError> {
        self.memory.check_bytes(address, bytes.len())?;
        self.memory.write_bytes(address, bytes).map_err(|failed| {
            let n = failed.len();
            let first = failed.into_iter().next();
            EngineError::Host {
                context: format!(
                    "loading {:#x} bytes of contents at {address:#x}: {n} span(s) did not land",
                    bytes.len()
                ),
                error: Box::new(first.map(|f| f.error).unwrap_or_else(|| {
                    crate::host::HostError::new("write", 0, bytes.len() as u64, "refused")
                })),
            }
        })
    }

    /// Plans, maps, runs and hands off one dispatch, and reports everything it did: prepare, the
    /// engine's own backend, complete (`prepare.rs`), the same path an emulator's own dispatch
    /// takes with its device in the middle.
    pub fn dispatch(&mut self, input: &DispatchInput) -> Result<DispatchReport, EngineError> {
        puffin::profile_function!();
        if let Some(oldest) = self.flights.oldest() {
            return Err(EngineError::Prepared(oldest));
        }
        self.own_run = true;
        let prepared = self.prepare(input);
        self.own_run = false;
        let prepared = prepared?;
        let outcome = match prepared.mode {
            Mode::Refused => None,
            _ => {
                let routed = self.routed(input, &prepared);
                match self
                    .backend
                    .execute(&routed.job, self.table.as_ref(), &mut self.memory)
                {
                    Ok(o) => Some(o),
                    Err(e) => {
                        let _ = self.abandon(prepared.index);
                        return Err(e.into());
                    }
                }
            }
        };
        let ran = match outcome {
            Some(o) => prepare::Ran::Backend(o),
            None => prepare::Ran::Device(DeviceRun::default()),
        };
        self.complete(input, prepared, ran)
    }

    /// O8 and O9 for a holder the device wrote itself: a translated pass that the emulator ran
    /// outside the engine's backend (the way `dispatchscope_vk::pass` runs the traversal), after
    /// [`Self::dispatch`] planned it and returned `report`. Each data word of `data` (the holder's
    /// bytes from its widened start) whose mask word in `masks` (4 bytes a data word, non-zero
    /// where a store set it) is set is written into guest memory as a host write, pages noted and
    /// targets distrusted as any write-back; `report` gains the holder's [`WriteBack`], whose first
    /// `listed` words carry their values and the rest are counted and placed by runs, so a
    /// full-screen output keeps the report small. The device's own stores are not known here, so
    /// L1 is not looked for.
    pub fn write_back_from_device(
        &mut self,
        report: &mut DispatchReport,
        holder: u32,
        data: &[u8],
        masks: &[u8],
        listed: usize,
    ) -> Result<(), EngineError> {
        let dispatch = report.index;
        let last = self.next_dispatch.checked_sub(1);
        if last != Some(dispatch) || report.mode == Mode::Refused {
            return Err(DeviceWriteBackError::NotLastDispatch {
                report: dispatch,
                last,
            }
            .into());
        }
        let range = report
            .slots
            .iter()
            .find(|b| b.slot == holder)
            .and_then(SlotBinding::holder_range)
            .ok_or(DeviceWriteBackError::NotAHolder {
                slot: holder,
                dispatch,
            })?;
        if report.write_back.iter().any(|w| w.holder == holder) {
            return Err(DeviceWriteBackError::AlreadyWrittenBack {
                slot: holder,
                dispatch,
            }
            .into());
        }
        let bytes = range.size_bytes();
        let words = bytes.div_ceil(4);
        if (data.len() as u64) < bytes || (masks.len() as u64) < 4 * words {
            return Err(DeviceWriteBackError::Size {
                slot: holder,
                holder_bytes: bytes,
                data: data.len(),
                masks: masks.len(),
            }
            .into());
        }
        let mut change = MemoryChange::default();
        let mut hand_off = HandOff::default();
        let wb = self.write_back_holder(
            holder,
            range,
            data,
            after::Mask::Bytes(masks),
            listed,
            &mut change,
            &mut hand_off,
        );
        if wb.words_written() == 0 {
            return Ok(());
        }
        report.write_back.push(wb);
        report
            .hand_off
            .targets_distrusted
            .append(&mut hand_off.targets_distrusted);
        change
            .noted_written
            .extend(report.hand_off.pages_noted_written.iter().copied());
        report.hand_off.pages_noted_written = after::merge_ranges(change.noted_written);
        report.counts = counts_of(report);
        Ok(())
    }

    /// C3: the dispatch may read anywhere, so the frame pending and every deferred copy land in
    /// guest memory first, as host writes (D824 notes, D720 distrust).
    fn write_deferred(&mut self) -> Result<BeforeDispatch, EngineError> {
        let mut c3 = MemoryChange::default();
        let (copies, failed) = self.memory.flush_deferred(&mut c3);
        copies_landed(failed)?;
        Ok(self.before_dispatch(&copies, c3))
    }

    /// C3 for a bound dispatch: it reads only its bindings, so a deferred copy waits, unless a
    /// holder's upload (O8) covers its bytes: then it lands first, as a device-addressed dispatch's
    /// would, or the holder would upload stale bytes and its write-back would land before the older
    /// copy. Copies land in the order they were deferred, so every copy up to the last one a holder
    /// covers is written; the rest stay deferred.
    fn write_deferred_under(
        &mut self,
        bindings: &[SlotBinding],
    ) -> Result<BeforeDispatch, EngineError> {
        let holders: Vec<ByteRange> = bindings
            .iter()
            .filter_map(SlotBinding::holder_range)
            .collect();
        let deferred = self.memory.deferred_copies();
        let covered = |(a, bytes): &(u64, Vec<u8>)| {
            let r = ByteRange::new(*a, a.saturating_add(bytes.len() as u64));
            holders.iter().any(|h| h.overlaps(&r))
        };
        let Some(last) = deferred.iter().rposition(covered) else {
            return Ok(left_deferred(deferred.len()));
        };
        let mut c3 = MemoryChange::default();
        let (copies, failed) = self.memory.flush_deferred_first(last + 1, &mut c3);
        copies_landed(failed)?;
        Ok(self.before_dispatch(&copies, c3))
    }

    /// The report of the copies C3 wrote and what they did.
    fn before_dispatch(&self, copies: &[(u64, Vec<u8>)], c3: MemoryChange) -> BeforeDispatch {
        BeforeDispatch {
            copies: copies
                .iter()
                .map(|(a, b)| ByteRange::new(*a, a.saturating_add(b.len() as u64)))
                .collect(),
            still_deferred: self.memory.deferred_copies().len(),
            pages_noted_written: after::merge_ranges(c3.noted_written),
            targets_distrusted: c3
                .distrusted
                .into_iter()
                .map(|id| self.target_lost(id, "a deferred copy written first (C3)".into()))
                .collect(),
        }
    }

    /// Names protected target `id`, which lost its trust by `by` (D720).
    fn target_lost(&self, id: u32, by: String) -> TargetLost {
        let t = self.memory.targets().find(|t| t.id == id);
        TargetLost {
            id,
            name: t.map(|t| t.name.clone()).unwrap_or_default(),
            range: t.map_or(ByteRange::new(0, 0), |t| t.range),
            by,
        }
    }
}

/// C3's copies that did not land stop the dispatch (it would read what they should have replaced);
/// they stay deferred, ahead of the rest, and are tried again at the next dispatch.
fn copies_landed(failed: Vec<crate::memory::FailedWrite>) -> Result<(), EngineError> {
    let n = failed.len();
    let Some(first) = failed.into_iter().next() else {
        return Ok(());
    };
    Err(EngineError::Host {
        context: format!(
            "C3: {n} deferred cop{} of guest {} did not land; the dispatch would read the bytes they replace, so it is not prepared; they stay deferred and are tried again at the next dispatch",
            if n == 1 { "y" } else { "ies" },
            first.guest
        ),
        error: Box::new(first.error),
    })
}

/// What the phases of one dispatch found, in the report's words.
#[derive(Default)]
struct Ran {
    accesses: Vec<AccessReport>,
    escapes: Vec<Escape>,
    marks: Vec<Mark>,
    hand_off: HandOff,
    write_back: Vec<WriteBack>,
    hazards: Vec<Hazard>,
}

impl Ran {
    /// A refused dispatch: nothing ran; each access is reported as not run (A1), and the deferred
    /// copies stay deferred.
    fn not_run(input: &DispatchInput) -> Self {
        Self {
            accesses: accesses::not_run(input),
            ..Self::default()
        }
    }
}

/// A report's counts, from its lists (what [`Engine::dispatch`] fills in last).
pub fn counts_of(r: &DispatchReport) -> Counts {
    Counts {
        sets: r.sets.len(),
        refusals: r.refusals.len(),
        escapes: r.escapes.len(),
        marks: r.marks.len(),
        accesses: r.accesses.len(),
        words_written_back: r
            .write_back
            .iter()
            .map(|w| w.words_written() as usize)
            .sum(),
        hazards: r.hazards.len(),
    }
}

/// The copies a dispatch leaves deferred: a refused one reads nothing, and a bound one whose
/// bindings cover none of them reads none of them, so they wait (C3).
fn left_deferred(still_deferred: usize) -> BeforeDispatch {
    BeforeDispatch {
        still_deferred,
        ..BeforeDispatch::default()
    }
}
