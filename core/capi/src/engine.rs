//! The engine's functions: create, events, dispatch, the last report, the tap, the capture.

use std::ffi::{CString, c_char};
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use dispatchscope_core::backend::BackendError;
use dispatchscope_core::chunk_table::ChunkTable;
use dispatchscope_core::engine::{EngineError, FailureKind, PrepareOptions, Prepared, RanOn};
use dispatchscope_core::exec::{Job, Outcome as RunOutcome};
use dispatchscope_core::host::{HostError, HostMemory};
use dispatchscope_core::input::{DeviceLimits, DispatchInput, Event};
use dispatchscope_core::instrument::LaneSelection;
use dispatchscope_core::memory::{GuestMemory, MemoryError};
use dispatchscope_core::report::DispatchReport;
use dispatchscope_core::report::Placement;
use dispatchscope_core::{Backend, ByteRange, CpuBackend, Engine};
use dispatchscope_formats::sample::{Provenance, SAMPLE_VERSION};
use dispatchscope_formats::session::{CAPTURE_FORMAT, CaptureMeta, DispatchRecord, SessionError};
use dispatchscope_formats::stream::SessionWriter;
use dispatchscope_live::snapshot::snapshot_of;
use dispatchscope_live::{Tap, TapConfig};
use std::sync::Arc;

use crate::ffi::{Failure, Outcome, boundary, bytes_arg, ds_status, str_arg, write_out};
use crate::handle::{Registry, lock};
use crate::input::{ds_dispatch, ds_limits, ds_mode};
use crate::reentry;

/// An engine: a 64-bit handle, 0 the null handle (see the crate docs).
#[allow(non_camel_case_types)]
pub type ds_engine = u64;

/// How often a capture being written is made durable.
const CAPTURE_FLUSH_EVERY: Duration = Duration::from_millis(250);

/// Any backend, chosen when the engine is made: the CPU reference or the emulator's Vulkan device.
pub(crate) struct AnyBackend(Box<dyn Backend + Send>);

impl Backend for AnyBackend {
    fn name(&self) -> String {
        self.0.name()
    }
    fn limits(&self) -> Option<DeviceLimits> {
        self.0.limits()
    }
    fn import(&mut self, piece: ByteRange, memory: &GuestMemory) -> Result<u64, BackendError> {
        self.0.import(piece, memory)
    }
    fn release(&mut self, device_base: u64) -> Result<(), BackendError> {
        self.0.release(device_base)
    }
    fn place_table(
        &mut self,
        table: &ChunkTable,
        budget_bytes: u64,
    ) -> Result<(u64, Placement), BackendError> {
        self.0.place_table(table, budget_bytes)
    }
    fn execute(
        &mut self,
        job: &Job<'_>,
        table: Option<&ChunkTable>,
        memory: &mut GuestMemory,
    ) -> Result<RunOutcome, BackendError> {
        self.0.execute(job, table, memory)
    }
    fn calls(&self) -> u64 {
        self.0.calls()
    }
    fn mark_words(&mut self, slots: usize) -> Result<Option<u64>, BackendError> {
        self.0.mark_words(slots)
    }
    fn take_marks(&mut self, slots: usize) -> Result<Vec<(usize, u32)>, BackendError> {
        self.0.take_marks(slots)
    }
    fn mark_words_for(&mut self, slots: usize, dispatch: u64) -> Result<Option<u64>, BackendError> {
        self.0.mark_words_for(slots, dispatch)
    }
    fn take_marks_of(
        &mut self,
        slots: usize,
        dispatch: u64,
    ) -> Result<Vec<(usize, u32)>, BackendError> {
        self.0.take_marks_of(slots, dispatch)
    }
    fn forget_marks(&mut self, dispatch: u64) {
        self.0.forget_marks(dispatch)
    }
    fn table_busy(&mut self, busy: &[u64]) {
        self.0.table_busy(busy)
    }
    fn max_import_bytes(&self) -> u64 {
        self.0.max_import_bytes()
    }
    fn device_stores_pass_guards(&self) -> bool {
        self.0.device_stores_pass_guards()
    }
}

/// What one engine handle holds.
pub(crate) struct EngineState {
    engine: Engine<AnyBackend>,
    /// Detached until [`ds_engine_listen`]; a detached tap costs one relaxed load a call.
    tap: Tap,
    /// The struct form's dispatch input, kept so the hot path does not allocate.
    input: DispatchInput,
    last: Option<DispatchReport>,
    /// The last report as JSON, made when first asked for; [`ds_engine_report_json`] hands each
    /// thread its own reference ([`REPORT`]).
    last_json: Option<Arc<CString>>,
    capture: Option<Capture>,
    /// The dispatches [`crate::ds_engine_prepare`] handed out, each with its input, oldest first,
    /// until [`crate::ds_engine_complete`] (in the same order).
    in_flight: std::collections::VecDeque<(Prepared, DispatchInput)>,
    /// Inputs of completed dispatches, kept for their allocations.
    spare_inputs: Vec<DispatchInput>,
    /// The holder slots the dispatch being prepared binds in place (`DS_SLOT_IN_PLACE`).
    in_place: Vec<u32>,
    /// The lanes an instrumented pass captures: the attached debugger's latest request
    /// (`ToTarget::CaptureLanes`), taken before each prepare; none by default.
    lanes: LaneSelection,
    /// The emulator turned the checked mode on ([`ds_engine_set_checked`]); it is on anyway
    /// while a debugger is attached.
    checked: bool,
}

struct Capture {
    writer: SessionWriter,
    last_flush: Instant,
}

static ENGINES: Registry<EngineState> = Registry::new();

thread_local! {
    /// The report [`ds_engine_report_json`] last handed this thread: kept alive here, so its
    /// pointer stays valid until this thread's next `ds_engine_report_json`, whatever other
    /// threads do to the engine (a dispatch, a destroy).
    static REPORT: std::cell::RefCell<Option<Arc<CString>>> = const { std::cell::RefCell::new(None) };
}

/// An engine error's status and message. A host callback's failure (`DS_HOST_CALLBACK`) reads as
/// the host's own error, without the engine's "device: " or "bad memory event: " before it: it is
/// neither, and the emulator looks for its own callback's words.
pub(crate) fn engine_error(e: EngineError) -> Failure {
    let status = status_of(e.kind());
    match &e {
        EngineError::Waits(w) => crate::ffi::set_last_wait(w.dispatch),
        EngineError::ChainWaits(w) => crate::ffi::set_last_wait(w.waits_for),
        _ => {}
    }
    match host_failure(&e) {
        Some(host) => Failure::new(status, host),
        None => Failure::new(status, e),
    }
}

/// The host callback's failure inside `e`, if that is what it is.
fn host_failure(e: &EngineError) -> Option<&HostError> {
    match e {
        EngineError::Memory(MemoryError::Host(h)) | EngineError::Backend(BackendError::Host(h)) => {
            Some(h)
        }
        _ => None,
    }
}

/// The status of each [`FailureKind`]: the C ABI tells the kinds apart as the engine does.
pub(crate) fn status_of(kind: FailureKind) -> ds_status {
    match kind {
        FailureKind::BadInput => ds_status::DS_BAD_INPUT,
        FailureKind::Order => ds_status::DS_ORDER,
        FailureKind::DeviceLost => ds_status::DS_DEVICE_LOST,
        FailureKind::OutOfMemory => ds_status::DS_OUT_OF_MEMORY,
        FailureKind::HostCallback => ds_status::DS_HOST_CALLBACK,
        FailureKind::Device => ds_status::DS_ENGINE,
        FailureKind::Waits => ds_status::DS_WAIT,
    }
}

fn capture_error(e: SessionError) -> Failure {
    Failure::new(ds_status::DS_IO, e)
}

/// Runs `body` on `handle`'s engine at the boundary, as exported function `call`: the engine
/// locked (a second thread waits), or `DS_ORDER` when this thread is inside that engine already
/// (one of its host callbacks called back into it, which would otherwise wait on itself).
pub(crate) fn with_engine(
    handle: ds_engine,
    call: &'static str,
    body: impl FnOnce(&mut EngineState) -> Outcome,
) -> ds_status {
    boundary(|| {
        let _inside = reentry::enter(handle, call)?;
        let entry = ENGINES.get(handle, "engine")?;
        let mut state = lock(&entry, "engine")?;
        body(&mut state)
    })
}

fn create(limits: DeviceLimits, out: *mut ds_engine) -> Outcome {
    create_engine(limits, CpuBackend::new(), None, out)
}

/// Registers an engine on `backend` (which brings its device's own limits) for an emulator.
pub(crate) fn insert_engine(
    backend: impl Backend + Send + 'static,
    out: *mut ds_engine,
) -> Outcome {
    let limits = DeviceLimits {
        name: backend.name(),
        ..DeviceLimits::default()
    };
    create_engine(limits, backend, None, out)
}

/// Registers an engine on `backend`, in host mode when `host` is given.
pub(crate) fn create_engine(
    limits: DeviceLimits,
    backend: impl Backend + Send + 'static,
    host: Option<Arc<dyn HostMemory>>,
    out: *mut ds_engine,
) -> Outcome {
    if out.is_null() {
        return Err(crate::ffi::null("out"));
    }
    let backend = AnyBackend(Box::new(backend));
    let engine = match host {
        Some(h) => Engine::with_host(limits, backend, h),
        None => Engine::new(limits, backend),
    }
    .map_err(engine_error)?;
    let handle = ENGINES.insert(EngineState {
        engine,
        tap: Tap::detached(),
        input: DispatchInput::default(),
        last: None,
        last_json: None,
        capture: None,
        in_flight: std::collections::VecDeque::new(),
        spare_inputs: Vec::new(),
        in_place: Vec::new(),
        lanes: LaneSelection::none(),
        checked: false,
    });
    // SAFETY: `out` was checked non-null; the caller promises it is valid for a write.
    unsafe { write_out(out, handle, "out") }
}

/// Fills `*out` with the CPU reference's default limits, for a caller to change what its device
/// says before [`ds_engine_create`].
///
/// # Safety
/// `out` must be null (an error) or valid for a write of a `ds_limits`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ds_limits_default(out: *mut ds_limits) -> ds_status {
    boundary(|| {
        // SAFETY: the caller promises `out` is null or valid for a write.
        unsafe { write_out(out, ds_limits::from_limits(&DeviceLimits::default()), "out") }
    })
}

/// Creates an engine for a device with `limits`, running on the CPU reference, and writes its
/// handle to `*out`. Limits the engine refuses (an alignment that is no power of two up to 256 …)
/// are `DS_BAD_INPUT`.
///
/// # Safety
/// `limits` must be null (an error) or point at a `ds_limits` whose `name` is null or a
/// NUL-terminated string; `out` must be null (an error) or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ds_engine_create(
    limits: *const ds_limits,
    out: *mut ds_engine,
) -> ds_status {
    boundary(|| {
        // SAFETY: the caller promises `limits` is null or points at a `ds_limits`.
        let limits = unsafe { ds_limits::read(limits) }?;
        create(limits, out)
    })
}

/// Creates an engine from limits as JSON (the `device` object of a sample: every limit, by the
/// names the sample format uses), `len` bytes at `json`.
///
/// # Safety
/// `json` must point at `len` readable bytes; `out` must be valid for a write (or null: an error).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ds_engine_create_json(
    json: *const u8,
    len: usize,
    out: *mut ds_engine,
) -> ds_status {
    boundary(|| {
        // SAFETY: the caller promises `len` bytes at `json`.
        let bytes = unsafe { bytes_arg(json, len, "json") }?;
        let limits: DeviceLimits = serde_json::from_slice(bytes).map_err(|e| {
            Failure::new(ds_status::DS_BAD_INPUT, format!("device limits JSON: {e}"))
        })?;
        create(limits, out)
    })
}

/// Destroys an engine, ending its capture (the index written) and its tap (a debugger attached
/// is told the target went away). A second destroy is `DS_INVALID_HANDLE`; a destroy from inside
/// one of the engine's own host callbacks is `DS_ORDER`. A report handed out by
/// [`ds_engine_report_json`] stays valid after it (it is the calling thread's).
#[unsafe(no_mangle)]
pub extern "C" fn ds_engine_destroy(engine: ds_engine) -> ds_status {
    boundary(|| {
        // A callback destroying its own engine would wait on its own thread's lock.
        let _inside = reentry::enter(engine, "ds_engine_destroy")?;
        let entry = ENGINES.remove(engine, "engine")?;
        // A call in flight on another thread finishes first; a poisoned engine is still freed.
        let mut state = entry
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match state.capture.take() {
            Some(c) => c.writer.finish().map_err(capture_error),
            None => Ok(()),
        }
    })
}

/// Loads guest memory contents (the bytes of `len` at `bytes` at guest `address`), as a sample's
/// `contents` does, before the next dispatch.
///
/// # Safety
/// `bytes` must point at `len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ds_engine_load_contents(
    engine: ds_engine,
    address: u64,
    bytes: *const u8,
    len: usize,
) -> ds_status {
    with_engine(engine, "ds_engine_load_contents", |s| {
        // SAFETY: the caller promises `len` bytes at `bytes`.
        let bytes = unsafe { bytes_arg(bytes, len, "bytes") }?;
        if address.checked_add(len as u64).is_none() {
            return Err(Failure::new(
                ds_status::DS_BAD_INPUT,
                format!(
                    "contents of {len} bytes at {address:#x} pass the end of the address space"
                ),
            ));
        }
        s.engine.load_contents(address, bytes);
        if let Some(c) = &mut s.capture {
            let contents = dispatchscope_formats::sample::Contents {
                address,
                bytes: bytes.to_vec(),
            };
            c.writer.contents(&contents).map_err(capture_error)?;
        }
        Ok(())
    })
}

/// Applies one memory event, given as JSON (`len` bytes at `json`, one step of a sample's
/// `steps` with `"event"`): reserve, commit, protect, write, defer-copy …
///
/// # Safety
/// `json` must point at `len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ds_engine_apply_json(
    engine: ds_engine,
    json: *const u8,
    len: usize,
) -> ds_status {
    with_engine(engine, "ds_engine_apply_json", |s| {
        // SAFETY: the caller promises `len` bytes at `json`.
        let bytes = unsafe { bytes_arg(json, len, "json") }?;
        let event: Event = serde_json::from_slice(bytes)
            .map_err(|e| Failure::new(ds_status::DS_BAD_INPUT, format!("event JSON: {e}")))?;
        s.apply(&event)
    })
}

impl EngineState {
    /// Whether guest memory is the emulator's own pages.
    pub(crate) fn host_mode(&self) -> bool {
        self.engine.memory().host().is_some()
    }

    /// One event, through the tap and into the capture.
    pub(crate) fn apply(&mut self, event: &Event) -> Outcome {
        self.tap
            .apply(&mut self.engine, event)
            .map_err(engine_error)?;
        if let Some(c) = &mut self.capture {
            c.writer.event(event).map_err(capture_error)?;
        }
        Ok(())
    }

    /// Prepares the struct-form dispatch; a debugger's pause stops the thread first. Many may be
    /// in flight; each is kept with its input until its complete.
    ///
    /// # Safety
    /// `dispatch`'s pointers must be valid for their counts.
    pub(crate) unsafe fn prepare(&mut self, dispatch: &ds_dispatch) -> Result<&Prepared, Failure> {
        let mut input = self.spare_inputs.pop().unwrap_or_default();
        // SAFETY: the caller's promise.
        let filled = unsafe { dispatch.fill(&mut input) }
            // SAFETY: as above; `fill` checked the slots' element size.
            .and_then(|()| unsafe { dispatch.in_place_slots(&mut self.in_place) });
        let result = filled.and_then(|()| {
            self.tap.before_prepare(&self.engine, &input);
            if let Some(lanes) = self.tap.take_lane_request() {
                self.lanes = lanes.unwrap_or_else(LaneSelection::none);
            }
            // The checked mode: asked for, or a debugger is watching (what it most needs named
            // is the page the emulator changed without an event).
            self.engine
                .set_checked(self.checked || self.tap.is_attached());
            self.engine
                .prepare_with(
                    &input,
                    PrepareOptions {
                        in_place: &self.in_place,
                    },
                )
                .map_err(engine_error)
        });
        match result {
            Ok(p) => {
                self.tap.after_prepare(&p);
                self.in_flight.push_back((p, input));
                self.in_flight
                    .back()
                    .map(|(p, _)| p)
                    .ok_or_else(|| Failure::new(ds_status::DS_ENGINE, "the dispatch left flight"))
            }
            Err(e) => {
                self.spare_inputs.push(input);
                Err(e)
            }
        }
    }

    /// How many dispatches are in flight.
    pub(crate) fn in_flight_count(&self) -> usize {
        self.in_flight.len()
    }

    /// Dispatch `index` in flight, if it is.
    pub(crate) fn in_flight(&self, index: u64) -> Option<&Prepared> {
        self.in_flight
            .iter()
            .map(|(p, _)| p)
            .find(|p| p.index == index)
    }

    /// The device the engine's limits describe: the emulator's, which runs its own dispatches.
    pub(crate) fn device_name(&self) -> String {
        self.engine.limits().name.clone()
    }

    /// The lanes an instrumented pass captures now (see [`EngineState::lanes`]).
    pub(crate) fn lanes(&self) -> LaneSelection {
        self.lanes
    }

    /// Hands an attached debugger the machine code of the program at `address` (its listing).
    pub(crate) fn add_program(&self, address: u64, code: &[u8]) {
        self.tap.add_program(address, code);
    }

    /// Completes dispatch `index`, the oldest in flight, with what the device left; the report
    /// becomes the last one, goes to an attached debugger and into the capture.
    pub(crate) fn complete(&mut self, index: u64, ran: RanOn<'_>) -> Outcome {
        let Some((p, input)) = self.in_flight.front().filter(|(p, _)| p.index == index) else {
            let oldest = self.in_flight.front().map(|(p, _)| p.index);
            return Err(Failure::new(
                ds_status::DS_ORDER,
                format!(
                    "dispatch {index} is not the oldest dispatch in flight ({}): completed twice, never prepared, or out of order; dispatches complete in the order they were prepared",
                    oldest.map_or("none is in flight".to_owned(), |o| format!("dispatch {o}"))
                ),
            ));
        };
        self.last = None;
        self.last_json = None;
        let mut result = self.engine.complete(input, p.clone(), ran);
        if let Err(EngineError::Complete(_)) = &result {
            // Bad input: the dispatch stays in flight, to be completed right or abandoned.
            return result.map(drop).map_err(engine_error);
        }
        let Some((_, input)) = self.in_flight.pop_front() else {
            return Err(Failure::new(
                ds_status::DS_ENGINE,
                "the dispatch left flight",
            ));
        };
        self.tap
            .after_complete(&self.engine, &input, index, &mut result);
        let report = match result {
            Ok(r) => r,
            Err(e) => {
                self.spare_inputs.push(input);
                return Err(engine_error(e));
            }
        };
        if let Some(c) = &mut self.capture {
            let record = DispatchRecord {
                input,
                report: Some(report.clone()),
            };
            c.writer.dispatch(&record).map_err(capture_error)?;
        } else {
            self.spare_inputs.push(input);
        }
        self.spare_inputs.truncate(64);
        let failed = host_path_failure(&report);
        self.last = Some(report);
        failed.map_or(Ok(()), Err)
    }

    /// Turns the checked mode on or off.
    pub(crate) fn set_checked(&mut self, on: bool) {
        self.checked = on;
    }

    /// Forgets dispatch `index` in flight.
    pub(crate) fn abandon(&mut self, index: u64) -> Outcome {
        self.engine.abandon(index).map_err(engine_error)?;
        if let Some(at) = self.in_flight.iter().position(|(p, _)| p.index == index)
            && let Some((_, input)) = self.in_flight.remove(at)
        {
            self.tap.abandoned(index);
            self.spare_inputs.push(input);
        }
        Ok(())
    }

    /// The device was lost: every dispatch in flight is named in the loss report and forgotten;
    /// the report goes to an attached debugger and into the capture.
    pub(crate) fn device_lost(
        &mut self,
        status: &str,
        fault: Option<&dispatchscope_core::engine::DeviceFault>,
    ) -> Outcome {
        let first = self.engine.loss().is_none();
        let report = self.engine.device_lost(status, fault).clone();
        self.spare_inputs
            .extend(self.in_flight.drain(..).map(|(_, input)| input));
        if first {
            self.tap.device_lost(&report);
            if let Some(c) = &mut self.capture {
                c.writer.device_lost(&report).map_err(capture_error)?;
            }
        }
        Ok(())
    }

    /// The loss report, once the device was lost.
    pub(crate) fn loss(&self) -> Option<&dispatchscope_core::report::DeviceLossReport> {
        self.engine.loss()
    }

    /// Guest bytes as the engine sees them.
    pub(crate) fn read_guest(&mut self, address: u64, out: &mut [u8]) -> Outcome {
        self.engine
            .read_guest(address, out)
            .map_err(crate::ffi::host_error)
    }
}

/// A completed dispatch whose calls into the emulator's memory failed: `DS_HOST_CALLBACK`, naming
/// the first failure and what was lost; the report (the engine's last) lists every one.
fn host_path_failure(report: &DispatchReport) -> Option<Failure> {
    let h = &report.host_path;
    let first = h.failures.first()?;
    let n = h.failures.len() as u64 + h.failures_not_listed;
    let lost = h.lost_bytes();
    Some(Failure::new(
        ds_status::DS_HOST_CALLBACK,
        format!(
            "dispatch {} completed, but {n} call{} into the emulator's memory failed ({}): {}{}; the report (ds_engine_report_json, host_path.failures) lists each with its addresses{}",
            report.index,
            if n == 1 { "" } else { "s" },
            first.kind.words(),
            first.error,
            first
                .lost
                .map_or_else(String::new, |r| format!(" (guest {r} not written)")),
            if lost > 0 {
                format!(" and the {lost} bytes the device wrote that did not land")
            } else {
                String::new()
            }
        ),
    ))
}

fn run(s: &mut EngineState, input: &DispatchInput) -> Outcome {
    s.last = None;
    s.last_json = None;
    s.engine.set_checked(s.checked || s.tap.is_attached());
    let report = s.tap.dispatch(&mut s.engine, input).map_err(engine_error)?;
    if let Some(c) = &mut s.capture {
        let record = DispatchRecord {
            input: input.clone(),
            report: Some(report.clone()),
        };
        c.writer.dispatch(&record).map_err(capture_error)?;
        if c.last_flush.elapsed() >= CAPTURE_FLUSH_EVERY {
            c.last_flush = Instant::now();
            c.writer.flush().map_err(capture_error)?;
        }
    }
    let failed = host_path_failure(&report);
    s.last = Some(report);
    failed.map_or(Ok(()), Err)
}

/// Runs one dispatch given as JSON (`len` bytes at `json`: a sample's dispatch step, with its
/// access stream if it has one). Its report is then the engine's last report.
///
/// A dispatch refused by rule is `DS_OK` with a refused report; `DS_BAD_INPUT` is input the
/// engine cannot even plan.
///
/// # Safety
/// `json` must point at `len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ds_engine_dispatch_json(
    engine: ds_engine,
    json: *const u8,
    len: usize,
) -> ds_status {
    with_engine(engine, "ds_engine_dispatch_json", |s| {
        // SAFETY: the caller promises `len` bytes at `json`.
        let bytes = unsafe { bytes_arg(json, len, "json") }?;
        let input: DispatchInput = serde_json::from_slice(bytes)
            .map_err(|e| Failure::new(ds_status::DS_BAD_INPUT, format!("dispatch JSON: {e}")))?;
        run(s, &input)
    })
}

/// Runs one dispatch in the hot path's struct form (no access stream). Its report is then the
/// engine's last report.
///
/// # Safety
/// `dispatch` must be null (an error) or point at a `ds_dispatch` whose `slots` and `push` point
/// at `n_slots` and `n_push` elements (or are null with a count of 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ds_engine_dispatch(
    engine: ds_engine,
    dispatch: *const ds_dispatch,
) -> ds_status {
    with_engine(engine, "ds_engine_dispatch", |s| {
        // SAFETY: the caller promises `dispatch` is null or points at a `ds_dispatch`.
        let dispatch = unsafe { ds_dispatch::arg(dispatch) }?;
        let mut input = std::mem::take(&mut s.input);
        // SAFETY: the caller promises its pointers and counts.
        let filled = unsafe { dispatch.fill(&mut input) };
        let result = filled.and_then(|()| run(s, &input));
        s.input = input;
        result
    })
}

fn last(s: &EngineState) -> Result<&DispatchReport, Failure> {
    s.last.as_ref().ok_or_else(|| {
        Failure::new(
            ds_status::DS_NOT_READY,
            "no report: the engine's last dispatch failed, or it has not dispatched yet",
        )
    })
}

/// The last dispatch's report as JSON (the `dispatchscope.report` schema), NUL-terminated:
/// `*out` points at it and `*len` (if not null) gets its length without the NUL. The string is
/// the calling thread's: it stays valid until this thread's next `ds_engine_report_json` (on any
/// engine) or its exit, whatever other threads do meanwhile (dispatch on the engine, destroy it).
///
/// # Safety
/// `out` must be valid for a write (null is an error); `len` null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ds_engine_report_json(
    engine: ds_engine,
    out: *mut *const c_char,
    len: *mut usize,
) -> ds_status {
    with_engine(engine, "ds_engine_report_json", |s| {
        if out.is_null() {
            return Err(crate::ffi::null("out"));
        }
        let report = match &s.last_json {
            Some(json) => Arc::clone(json),
            None => {
                let json = serde_json::to_vec(last(s)?).map_err(|e| {
                    Failure::new(
                        ds_status::DS_ENGINE,
                        format!("the report cannot be encoded: {e}"),
                    )
                })?;
                // JSON text never holds a raw NUL: serde_json escapes it.
                let json = Arc::new(CString::new(json).unwrap_or_default());
                s.last_json = Some(Arc::clone(&json));
                json
            }
        };
        let (json, n) = (report.as_ptr(), report.as_bytes().len());
        // The thread's reference keeps the string alive; the one it replaces is let go.
        REPORT.with(|r| *r.borrow_mut() = Some(report));
        // SAFETY: `out` is non-null and valid for a write, as the caller promises.
        unsafe { write_out(out, json, "out") }?;
        if !len.is_null() {
            // SAFETY: `len` is non-null and valid for a write, as the caller promises.
            unsafe { write_out(len, n, "len") }?;
        }
        Ok(())
    })
}

/// The last dispatch's mode, without parsing its report.
///
/// # Safety
/// `out` must be valid for a write (null is an error).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ds_engine_report_mode(engine: ds_engine, out: *mut ds_mode) -> ds_status {
    with_engine(engine, "ds_engine_report_mode", |s| {
        let mode = ds_mode::from(last(s)?.mode);
        // SAFETY: the caller promises `out` is null or valid for a write.
        unsafe { write_out(out, mode, "out") }
    })
}

/// How many refusals the last dispatch's report holds (by rule: O5, O7, O11, W2 …; 0 for a
/// dispatch that ran), without parsing it.
///
/// # Safety
/// `out` must be valid for a write (null is an error).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ds_engine_report_refusals(engine: ds_engine, out: *mut u32) -> ds_status {
    with_engine(engine, "ds_engine_report_refusals", |s| {
        let n = u32::try_from(last(s)?.refusals.len()).unwrap_or(u32::MAX);
        // SAFETY: the caller promises `out` is null or valid for a write.
        unsafe { write_out(out, n, "out") }
    })
}

/// Starts listening for a debugger on `addr` (`"127.0.0.1:27953"`; port 0 picks one), which must
/// present `token` (null for none; an address that is not loopback requires one). `name` (or
/// null) is what the target calls itself. The port listened on is written to `*port` (if not
/// null). From then on a debugger may attach at any time; its pauses and steps stop the thread
/// inside the engine's dispatch calls.
///
/// # Safety
/// `addr` must be a NUL-terminated string; `token` and `name` null or NUL-terminated; `port` null
/// or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ds_engine_listen(
    engine: ds_engine,
    addr: *const c_char,
    token: *const c_char,
    name: *const c_char,
    port: *mut u16,
) -> ds_status {
    with_engine(engine, "ds_engine_listen", |s| {
        // SAFETY: the caller promises NUL-terminated strings (or null where allowed).
        let addr = unsafe { str_arg(addr, "addr") }?;
        let listen: SocketAddr = addr.parse().map_err(|e| {
            Failure::new(
                ds_status::DS_BAD_INPUT,
                format!("addr {addr:?} is no socket address: {e}"),
            )
        })?;
        let token = if token.is_null() {
            None
        } else {
            // SAFETY: as above.
            Some(unsafe { str_arg(token, "token") }?.to_owned())
        };
        let mut config = TapConfig {
            listen,
            token,
            ..TapConfig::default()
        };
        if !name.is_null() {
            // SAFETY: as above.
            config.target_name = unsafe { str_arg(name, "name") }?.to_owned();
        }
        if s.tap.local_addr().is_some() {
            return Err(Failure::new(
                ds_status::DS_LIVE,
                "this engine is already listening for a debugger",
            ));
        }
        let tap = Tap::listen(config).map_err(|e| Failure::new(ds_status::DS_LIVE, e))?;
        let bound = tap.local_addr().map_or(0, |a| a.port());
        s.tap = tap;
        if !port.is_null() {
            // SAFETY: `port` is non-null and valid for a write, as the caller promises.
            unsafe { write_out(port, bound, "port") }?;
        }
        Ok(())
    })
}

/// Whether a debugger is attached right now (1) or not (0).
///
/// # Safety
/// `out` must be valid for a write (null is an error).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ds_engine_attached(engine: ds_engine, out: *mut u8) -> ds_status {
    with_engine(engine, "ds_engine_attached", |s| {
        let attached = u8::from(s.tap.is_attached());
        // SAFETY: the caller promises `out` is null or valid for a write.
        unsafe { write_out(out, attached, "out") }
    })
}

/// Starts writing the session to a crash-safe capture at `path` (replacing it), titled `title`
/// (or null). Its first records rebuild guest memory as it stands now (a snapshot), so a capture
/// begun mid-game replays; every event and dispatch after is appended with its report, and is
/// durable within a quarter of a second. `dispatchscope explain PATH` reads it, also while it
/// is being written and after a crash.
///
/// # Safety
/// `path` must be a NUL-terminated string; `title` null or NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ds_engine_capture_begin(
    engine: ds_engine,
    path: *const c_char,
    title: *const c_char,
) -> ds_status {
    with_engine(engine, "ds_engine_capture_begin", |s| {
        // SAFETY: the caller promises NUL-terminated strings (or null where allowed).
        let path = unsafe { str_arg(path, "path") }?;
        let title = if title.is_null() {
            "captured by an emulator through dispatchscope-capi".to_owned()
        } else {
            // SAFETY: as above.
            unsafe { str_arg(title, "title") }?.to_owned()
        };
        if s.capture.is_some() {
            return Err(Failure::new(
                ds_status::DS_IO,
                "this engine is already writing a capture; end it first",
            ));
        }
        let meta = CaptureMeta {
            format: CAPTURE_FORMAT.into(),
            sample_version: SAMPLE_VERSION,
            title,
            description: format!(
                "Written by an emulator through dispatchscope-capi from dispatch {} on. The first \
                 records rebuild guest memory as it stood then; mappings and the chunk table are \
                 not part of them, so a replay maps afresh.",
                s.engine.next_dispatch()
            ),
            provenance: Provenance {
                records: Vec::new(),
                stated: Vec::new(),
                ours: vec!["everything: written by the emulator that ran it".into()],
            },
            device: s.engine.limits().clone(),
            programs: Vec::new(),
        };
        let mut writer = SessionWriter::create(Path::new(path), &meta).map_err(capture_error)?;
        let (events, contents) = snapshot_of(s.engine.memory());
        for e in &events {
            writer.event(e).map_err(capture_error)?;
        }
        for c in &contents {
            writer.contents(c).map_err(capture_error)?;
        }
        writer.flush().map_err(capture_error)?;
        s.capture = Some(Capture {
            writer,
            last_flush: Instant::now(),
        });
        Ok(())
    })
}

/// Ends the capture being written: its index is written and the file closed.
#[unsafe(no_mangle)]
pub extern "C" fn ds_engine_capture_end(engine: ds_engine) -> ds_status {
    with_engine(engine, "ds_engine_capture_end", |s| {
        match s.capture.take() {
            Some(c) => c.writer.finish().map_err(capture_error),
            None => Err(Failure::new(
                ds_status::DS_NOT_READY,
                "this engine is writing no capture",
            )),
        }
    })
}

#[cfg(test)]
mod tests {
    use std::ffi::CStr;

    use dispatchscope_formats::sample::{Sample, Step};

    use super::*;

    /// The CPU reference, but its device fails its first dispatch with `fails` (and any later
    /// one with a plain device failure).
    struct Failing {
        cpu: CpuBackend,
        fails: Option<BackendError>,
    }

    impl Backend for Failing {
        fn name(&self) -> String {
            "failing".into()
        }
        fn import(&mut self, piece: ByteRange, memory: &GuestMemory) -> Result<u64, BackendError> {
            self.cpu.import(piece, memory)
        }
        fn release(&mut self, device_base: u64) -> Result<(), BackendError> {
            self.cpu.release(device_base)
        }
        fn place_table(
            &mut self,
            table: &ChunkTable,
            budget_bytes: u64,
        ) -> Result<(u64, Placement), BackendError> {
            self.cpu.place_table(table, budget_bytes)
        }
        fn calls(&self) -> u64 {
            self.cpu.calls()
        }
        fn execute(
            &mut self,
            _job: &Job<'_>,
            _table: Option<&ChunkTable>,
            _memory: &mut GuestMemory,
        ) -> Result<RunOutcome, BackendError> {
            Err(self
                .fails
                .take()
                .unwrap_or_else(|| BackendError::Execute("failed".into())))
        }
    }

    /// The CPU reference, but its device panics in every dispatch: a bug in us, as the boundary
    /// sees one.
    struct Panicking(CpuBackend);

    impl Backend for Panicking {
        fn name(&self) -> String {
            "panicking".into()
        }
        fn import(&mut self, piece: ByteRange, memory: &GuestMemory) -> Result<u64, BackendError> {
            self.0.import(piece, memory)
        }
        fn release(&mut self, device_base: u64) -> Result<(), BackendError> {
            self.0.release(device_base)
        }
        fn place_table(
            &mut self,
            table: &ChunkTable,
            budget_bytes: u64,
        ) -> Result<(u64, Placement), BackendError> {
            self.0.place_table(table, budget_bytes)
        }
        fn calls(&self) -> u64 {
            self.0.calls()
        }
        fn execute(
            &mut self,
            job: &Job<'_>,
            _table: Option<&ChunkTable>,
            _memory: &mut GuestMemory,
        ) -> Result<RunOutcome, BackendError> {
            panic!(
                "the test's device panics in execute ({} accesses)",
                job.accesses.len()
            );
        }
    }

    /// The calling thread's message.
    fn message() -> String {
        // SAFETY: the message is valid until this thread's next call.
        unsafe { CStr::from_ptr(crate::ds_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    /// An engine on `backend` with the shipped sample `run305-overlap.json` loaded and applied up
    /// to its first dispatch, and that dispatch as JSON.
    fn at_first_dispatch(backend: impl Backend + Send + 'static) -> (ds_engine, Vec<u8>) {
        let text =
            dispatchscope_formats::shipped::sample_text("run305-overlap.json").unwrap_or_default();
        let sample = Sample::from_json(text).unwrap();
        let mut engine: ds_engine = 0;
        assert!(insert_engine(backend, &mut engine).is_ok());
        for c in &sample.contents {
            // SAFETY: a live handle, and a pointer and length of one slice.
            let s = unsafe {
                ds_engine_load_contents(engine, c.address, c.bytes.as_ptr(), c.bytes.len())
            };
            assert_eq!(s, ds_status::DS_OK);
        }
        for step in &sample.steps {
            match step {
                Step::Event(e) => {
                    let json = serde_json::to_vec(e).unwrap();
                    // SAFETY: a live handle, and a pointer and length of one vector.
                    let status = unsafe { ds_engine_apply_json(engine, json.as_ptr(), json.len()) };
                    assert_eq!(status, ds_status::DS_OK, "{}", message());
                }
                Step::Dispatch(d) => return (engine, serde_json::to_vec(&**d).unwrap()),
            }
        }
        panic!("the sample has no dispatch");
    }

    /// Runs the shipped sample `run305-overlap.json` through the C ABI on a device that fails
    /// with `fails`, and returns the first dispatch's status and message.
    fn first_dispatch_on(fails: BackendError) -> (ds_status, String) {
        let backend = Failing {
            cpu: CpuBackend::new(),
            fails: Some(fails),
        };
        let (engine, json) = at_first_dispatch(backend);
        // SAFETY: a live handle, and a pointer and length of one vector.
        let status = unsafe { ds_engine_dispatch_json(engine, json.as_ptr(), json.len()) };
        let message = message();
        assert_eq!(ds_engine_destroy(engine), ds_status::DS_OK);
        (status, message)
    }

    /// A panic inside the engine crosses the boundary of an exported function as `DS_PANICKED`,
    /// naming the panic; the process lives on; the engine is refused by name from then on (its
    /// lock is poisoned: no crash, no hang), is still destroyed, and other engines keep working.
    #[test]
    fn a_panic_in_a_dispatch_is_a_status_and_only_its_engine_is_refused() {
        let (other, other_json) = at_first_dispatch(CpuBackend::new());
        let (engine, json) = at_first_dispatch(Panicking(CpuBackend::new()));
        // SAFETY: a live handle, and a pointer and length of one vector.
        let status = unsafe { ds_engine_dispatch_json(engine, json.as_ptr(), json.len()) };
        let said = message();
        assert_eq!(status, ds_status::DS_PANICKED, "{said}");
        assert!(
            said.contains("dispatchscope panicked")
                && said.contains("the test's device panics in execute ("),
            "{said}"
        );
        // Every later call on it is a named status, on this thread (which left the engine when
        // the panic unwound: not DS_ORDER) and on another.
        let mut mode = ds_mode::DS_MODE_BOUND;
        // SAFETY: a live handle and a valid out-pointer.
        let status = unsafe { ds_engine_report_mode(engine, &mut mode) };
        assert_eq!(status, ds_status::DS_PANICKED, "{}", message());
        assert!(
            message().contains("panicked in an earlier call"),
            "{}",
            message()
        );
        let elsewhere = std::thread::spawn(move || {
            // SAFETY: a live handle, and a pointer and length of one vector.
            let status = unsafe { ds_engine_dispatch_json(engine, json.as_ptr(), json.len()) };
            (status, message())
        })
        .join()
        .unwrap();
        assert_eq!(elsewhere.0, ds_status::DS_PANICKED, "{}", elsewhere.1);
        // The other engine is untouched.
        // SAFETY: a live handle, and a pointer and length of one vector.
        let status =
            unsafe { ds_engine_dispatch_json(other, other_json.as_ptr(), other_json.len()) };
        assert_eq!(status, ds_status::DS_OK, "{}", message());
        // SAFETY: a live handle and a valid out-pointer.
        let status = unsafe { ds_engine_report_mode(other, &mut mode) };
        assert_eq!(status, ds_status::DS_OK, "{}", message());
        assert_eq!(ds_engine_destroy(engine), ds_status::DS_OK, "{}", message());
        assert_eq!(ds_engine_destroy(engine), ds_status::DS_INVALID_HANDLE);
        assert_eq!(ds_engine_destroy(other), ds_status::DS_OK, "{}", message());
    }

    /// A lost device and exhausted memory reach the emulator as statuses of their own through a
    /// dispatch, not as the engine's catch-all; the message still names the call.
    #[test]
    fn a_lost_device_and_exhausted_memory_have_their_own_statuses() {
        let cases = [
            (
                BackendError::DeviceLost {
                    call: "vkQueueSubmit".into(),
                },
                ds_status::DS_DEVICE_LOST,
                "vkQueueSubmit answered VK_ERROR_DEVICE_LOST",
            ),
            (
                BackendError::OutOfMemory {
                    what: "vkAllocateMemory answered VK_ERROR_OUT_OF_DEVICE_MEMORY".into(),
                },
                ds_status::DS_OUT_OF_MEMORY,
                "VK_ERROR_OUT_OF_DEVICE_MEMORY",
            ),
            (
                BackendError::Execute("vkQueueSubmit failed with VK_ERROR_UNKNOWN".into()),
                ds_status::DS_ENGINE,
                "VK_ERROR_UNKNOWN",
            ),
        ];
        for (fails, status, words) in cases {
            let (got, message) = first_dispatch_on(fails);
            assert_eq!(got, status, "{message}");
            assert!(message.contains(words), "{message}");
        }
    }

    /// A host callback's failure reads as the host's own error at the C ABI, whichever of the
    /// engine's errors carried it; other errors keep the engine's words.
    #[test]
    fn a_host_callback_failure_is_the_hosts_own_message() {
        let host = HostError::new(
            "commit",
            0x7f00_0000_0000,
            0x20000,
            "the emulator's commit callback returned -5",
        );
        let words = "the host's commit of 0x20000 bytes at host 0x7f0000000000 failed: the \
                     emulator's commit callback returned -5";
        for e in [
            EngineError::Backend(BackendError::from(host.clone())),
            EngineError::Memory(MemoryError::from(host.clone())),
        ] {
            let f = engine_error(e);
            assert_eq!(f.status, ds_status::DS_HOST_CALLBACK);
            assert_eq!(f.message, words);
        }
        let f = engine_error(EngineError::Backend(BackendError::Execute("no".into())));
        assert_eq!(f.status, ds_status::DS_ENGINE);
        assert!(f.message.starts_with("device: "), "{}", f.message);
    }

    /// Every kind has the status the header documents for it.
    #[test]
    fn every_failure_kind_has_its_status() {
        use FailureKind::*;
        let statuses = [
            (BadInput, ds_status::DS_BAD_INPUT),
            (Order, ds_status::DS_ORDER),
            (DeviceLost, ds_status::DS_DEVICE_LOST),
            (OutOfMemory, ds_status::DS_OUT_OF_MEMORY),
            (HostCallback, ds_status::DS_HOST_CALLBACK),
            (Device, ds_status::DS_ENGINE),
            (Waits, ds_status::DS_WAIT),
        ];
        for (kind, status) in statuses {
            assert_eq!(status_of(kind), status, "{kind:?}");
        }
    }
}
