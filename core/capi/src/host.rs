//! The host path in struct form (issue 29): an engine whose guest memory is the emulator's own
//! pages ([`ds_engine_create_host`], [`ds_engine_create_vulkan_host`]), memory events as structs
//! ([`ds_engine_apply`]), and the emulator's own dispatch between [`ds_engine_prepare`] and
//! [`ds_engine_complete`]. Nothing on this path allocates on the caller's behalf or speaks JSON;
//! every struct that may grow starts with its `size`, and [`DS_ABI_VERSION`] names the layout.

use std::ffi::{c_char, c_void};
use std::sync::Arc;

use dispatchscope_core::addr::ByteRange;
use dispatchscope_core::engine::{
    CarryFrom, DeviceFault, DeviceInstrumentation, DeviceRun, HolderRun, RanOn,
};
use dispatchscope_core::host::{HostError, HostMemory, HostRun, RealMapping};
use dispatchscope_core::input::{AccessKind, Backing, Event, HostProtection, Op};
use dispatchscope_core::instrument::{self, Grid, InstrumentLayout, SiteInfo};
use dispatchscope_vk::host_pages::{HostCallError, HostCalls, ProcessHost};

use crate::engine::{create_engine, ds_engine, with_engine};
use crate::ffi::{
    DS_ABI_VERSION, Failure, boundary, check_flags, check_reserved, check_size, ds_status, null,
    slice_arg, str_arg,
};
use crate::input::{ds_dispatch, ds_limits, ds_mode};
use crate::reentry::in_callback;

/// A host callback: 0 for done, any other value a failure the engine reports by name
/// (`DS_HOST_CALLBACK`, with the call and the value).
#[allow(non_camel_case_types)]
pub type ds_host_range_fn =
    Option<unsafe extern "C" fn(user: *mut c_void, host_addr: u64, bytes: u64) -> i32>;

/// A host write: `bytes` bytes from `src` to the emulator's memory at `host_addr`.
#[allow(non_camel_case_types)]
pub type ds_host_write_fn = Option<
    unsafe extern "C" fn(user: *mut c_void, host_addr: u64, src: *const u8, bytes: u64) -> i32,
>;

/// One run of O8's batched write-back: `bytes` bytes from `src` to the emulator's memory at
/// `host_addr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct ds_write_run {
    /// Where the run lands, in the emulator's memory.
    pub host_addr: u64,
    /// Its bytes (valid for the call).
    pub src: *const u8,
    /// How many.
    pub bytes: u64,
}

/// O8's write-back of one batch of runs of written words, in address order, none overlapping:
/// 0 when every run landed; otherwise non-zero, with `*failed_at` set to the first run that did
/// not land (the runs before it landed; the engine reports that run lost and goes on with the
/// next).
#[allow(non_camel_case_types)]
pub type ds_host_write_runs_fn = Option<
    unsafe extern "C" fn(
        user: *mut c_void,
        runs: *const ds_write_run,
        n_runs: u64,
        failed_at: *mut u64,
    ) -> i32,
>;

/// C2's hand-off: the device stored into guest `guest_start..guest_end` at `host_addr`.
#[allow(non_camel_case_types)]
pub type ds_host_hand_off_fn = Option<
    unsafe extern "C" fn(
        user: *mut c_void,
        guest_start: u64,
        guest_end: u64,
        host_addr: u64,
    ) -> i32,
>;

/// A host read: `bytes` bytes of the emulator's memory at `host_addr` into `dst`.
#[allow(non_camel_case_types)]
pub type ds_host_read_fn = Option<
    unsafe extern "C" fn(user: *mut c_void, host_addr: u64, dst: *mut u8, bytes: u64) -> i32,
>;

/// The calls into the emulator that host mode makes, registered once when the engine is made.
/// `write`, `commit`, `release_guards` and `hand_off` are required; `read` may be null (the engine
/// then reads the process's memory with `process_vm_readv`, which fails instead of crashing on a
/// page the process cannot read). Each is called on the thread that called the engine, while
/// that call holds the engine: a callback may call other engines, but a call back into its own
/// engine (any `ds_engine_*` on it, destroy included) is refused with `DS_ORDER`, naming the call,
/// the callback and the call it is inside, rather than waiting on itself. A callback's non-zero
/// answer is `DS_HOST_CALLBACK`, its message the host's failure as such (the call, its bytes and
/// host address, the value returned).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct ds_host_callbacks {
    /// `sizeof(ds_host_callbacks)`.
    pub size: u32,
    /// `DS_ABI_VERSION`.
    pub abi_version: u32,
    /// Handed back to every callback.
    pub user: *mut c_void,
    /// A host write of guest bytes through the emulator's write-watch (C3's deferred copies, O8's
    /// write-back words): the emulator notes the pages written and drops textures over them.
    pub write: ds_host_write_fn,
    /// M2: commit a run the emulator committed lazily.
    pub commit: ds_host_range_fn,
    /// M2: release the write-watch's read-only guards over a run (the engine notes its pages
    /// written, as M2 says).
    pub release_guards: ds_host_range_fn,
    /// C2: a chunk the device marked; the emulator treats it as a host write.
    pub hand_off: ds_host_hand_off_fn,
    /// Optional: read guest bytes (the debugger's memory view, a bound holder's upload on the
    /// engine's own backend).
    pub read: ds_host_read_fn,
    /// Optional: O8's write-back as batches of runs of written words (one call for up to 4,096
    /// runs) instead of a `write` a run. Either way exactly the words the device wrote are
    /// written, never a word between them.
    pub write_runs: ds_host_write_runs_fn,
}

/// The emulator's callbacks, checked non-null.
struct Callbacks {
    user: usize,
    write: unsafe extern "C" fn(*mut c_void, u64, *const u8, u64) -> i32,
    commit: unsafe extern "C" fn(*mut c_void, u64, u64) -> i32,
    release_guards: unsafe extern "C" fn(*mut c_void, u64, u64) -> i32,
    hand_off: unsafe extern "C" fn(*mut c_void, u64, u64, u64) -> i32,
    read: Option<unsafe extern "C" fn(*mut c_void, u64, *mut u8, u64) -> i32>,
    write_runs:
        Option<unsafe extern "C" fn(*mut c_void, *const ds_write_run, u64, *mut u64) -> i32>,
}

fn answer(call: &'static str, r: i32) -> Result<(), HostCallError> {
    if r == 0 {
        Ok(())
    } else {
        Err(HostCallError::Status { call, status: r })
    }
}

impl HostCalls for Callbacks {
    fn write(&self, host_addr: u64, bytes: &[u8]) -> Result<(), HostCallError> {
        let r = in_callback("write", || {
            // SAFETY: the emulator registered this callback for its own memory; `bytes` lives
            // across the call.
            unsafe {
                (self.write)(
                    self.user as *mut c_void,
                    host_addr,
                    bytes.as_ptr(),
                    bytes.len() as u64,
                )
            }
        });
        answer("write", r)
    }
    fn write_runs(&self, runs: &[HostRun<'_>]) -> Result<(), (usize, HostCallError)> {
        let Some(write_runs) = self.write_runs else {
            for (k, r) in runs.iter().enumerate() {
                self.write(r.host_addr, r.bytes).map_err(|e| (k, e))?;
            }
            return Ok(());
        };
        let c: Vec<ds_write_run> = runs
            .iter()
            .map(|r| ds_write_run {
                host_addr: r.host_addr,
                src: r.bytes.as_ptr(),
                bytes: r.bytes.len() as u64,
            })
            .collect();
        let mut failed_at = u64::MAX;
        let r = in_callback("write_runs", || {
            // SAFETY: as registered; `c` and the bytes it points at live across the call.
            unsafe {
                write_runs(
                    self.user as *mut c_void,
                    c.as_ptr(),
                    c.len() as u64,
                    &mut failed_at,
                )
            }
        });
        if r == 0 {
            return Ok(());
        }
        // A failure that names no run (or one past the batch) leaves the whole batch unknown:
        // every run from the first is reported lost rather than guessed landed.
        let k = usize::try_from(failed_at)
            .ok()
            .filter(|&k| k < runs.len())
            .unwrap_or(0);
        Err((
            k,
            HostCallError::RunStatus {
                call: "write_runs",
                status: r,
                run: k,
                runs: runs.len(),
            },
        ))
    }
    fn commit(&self, host_addr: u64, bytes: u64) -> Result<(), HostCallError> {
        let r = in_callback("commit", || {
            // SAFETY: as registered.
            unsafe { (self.commit)(self.user as *mut c_void, host_addr, bytes) }
        });
        answer("commit", r)
    }
    fn release_guards(&self, host_addr: u64, bytes: u64) -> Result<(), HostCallError> {
        let r = in_callback("release_guards", || {
            // SAFETY: as registered.
            unsafe { (self.release_guards)(self.user as *mut c_void, host_addr, bytes) }
        });
        answer("release_guards", r)
    }
    fn hand_off(&self, guest: ByteRange, host_addr: u64) -> Result<(), HostCallError> {
        let r = in_callback("hand_off", || {
            // SAFETY: as registered.
            unsafe { (self.hand_off)(self.user as *mut c_void, guest.start, guest.end, host_addr) }
        });
        answer("hand_off", r)
    }
}

/// Host memory behind the C callbacks: [`ProcessHost`] for the real mappings and reads, the
/// emulator's own `read` where it gave one.
struct CHost(ProcessHost<Callbacks>);

impl HostMemory for CHost {
    fn name(&self) -> String {
        self.0.name()
    }
    fn read(&self, host_addr: u64, out: &mut [u8]) -> Result<(), HostError> {
        let c = self.0.calls();
        match c.read {
            Some(read) => {
                let r = in_callback("read", || {
                    // SAFETY: as registered; `out` lives across the call.
                    unsafe {
                        read(
                            c.user as *mut c_void,
                            host_addr,
                            out.as_mut_ptr(),
                            out.len() as u64,
                        )
                    }
                });
                answer("read", r)
                    .map_err(|e| HostError::new("read", host_addr, out.len() as u64, e.to_string()))
            }
            None => self.0.read(host_addr, out),
        }
    }
    fn write(&self, host_addr: u64, bytes: &[u8]) -> Result<(), HostError> {
        self.0.write(host_addr, bytes)
    }
    fn write_runs(&self, runs: &[HostRun<'_>]) -> Result<(), (usize, HostError)> {
        self.0.write_runs(runs)
    }
    fn commit(&self, host_addr: u64, bytes: u64) -> Result<(), HostError> {
        self.0.commit(host_addr, bytes)
    }
    fn release_guards(&self, host_addr: u64, bytes: u64) -> Result<(), HostError> {
        self.0.release_guards(host_addr, bytes)
    }
    fn hand_off(&self, guest: ByteRange, host_addr: u64) -> Result<(), HostError> {
        self.0.hand_off(guest, host_addr)
    }
    fn real_mappings(&self, host_addr: u64, bytes: u64) -> Option<Vec<RealMapping>> {
        self.0.real_mappings(host_addr, bytes)
    }
}

/// # Safety
/// `cb` must be null (an error) or point at a `ds_host_callbacks`.
unsafe fn host_of(cb: *const ds_host_callbacks) -> Result<Arc<dyn HostMemory>, Failure> {
    if cb.is_null() {
        return Err(null("callbacks"));
    }
    // SAFETY: non-null; the caller promises a ds_host_callbacks (whose first field says its size,
    // read before the rest).
    let size = unsafe { (*cb).size };
    check_size::<ds_host_callbacks>("ds_host_callbacks", "ds_host_callbacks", size)?;
    // SAFETY: as above, and the size matches.
    let c = unsafe { *cb };
    if c.abi_version != DS_ABI_VERSION {
        return Err(Failure::new(
            ds_status::DS_ABI_MISMATCH,
            format!(
                "callbacks.abi_version is {}, this library's DS_ABI_VERSION is {DS_ABI_VERSION}",
                c.abi_version
            ),
        ));
    }
    let (Some(write), Some(commit), Some(release_guards), Some(hand_off)) =
        (c.write, c.commit, c.release_guards, c.hand_off)
    else {
        let missing: Vec<&str> = [
            ("write", c.write.is_none()),
            ("commit", c.commit.is_none()),
            ("release_guards", c.release_guards.is_none()),
            ("hand_off", c.hand_off.is_none()),
        ]
        .into_iter()
        .filter(|(_, m)| *m)
        .map(|(n, _)| n)
        .collect();
        return Err(null(&format!("callbacks.{}", missing.join(", callbacks."))));
    };
    Ok(Arc::new(CHost(ProcessHost::new(Callbacks {
        user: c.user as usize,
        write,
        commit,
        release_guards,
        hand_off,
        read: c.read,
        write_runs: c.write_runs,
    }))))
}

/// Creates an engine in host mode on the CPU reference: its guest memory is the emulator's own
/// pages (every reservation names its host address), reached through `callbacks` and never
/// copied; the emulator runs its dispatches itself between [`ds_engine_prepare`] and
/// [`ds_engine_complete`].
///
/// # Safety
/// `limits` and `callbacks` must be null (an error) or point at their structs; the callbacks and
/// `user` must stay valid until the engine is destroyed; `out` must be valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ds_engine_create_host(
    limits: *const ds_limits,
    callbacks: *const ds_host_callbacks,
    out: *mut ds_engine,
) -> ds_status {
    boundary(|| {
        // SAFETY: the caller promises null or a ds_limits whose name is null or a string.
        let limits = unsafe { ds_limits::read(limits) }?;
        // SAFETY: the caller's promise, passed on.
        let host = unsafe { host_of(callbacks) }?;
        create_engine(
            limits,
            dispatchscope_core::CpuBackend::new(),
            Some(host),
            out,
        )
    })
}

/// Creates an engine in host mode on the emulator's own Vulkan device ([`crate::ds_vulkan_device`]):
/// the emulator's pages are imported zero-copy into that device, the chunk table and the mark
/// words live there, and the emulator's own module reaches them by device address.
///
/// # Safety
/// As [`crate::ds_engine_create_vulkan`] for `device`, and [`ds_engine_create_host`] for
/// `callbacks` and `out`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ds_engine_create_vulkan_host(
    device: *const crate::ds_vulkan_device,
    callbacks: *const ds_host_callbacks,
    out: *mut ds_engine,
) -> ds_status {
    boundary(|| {
        // SAFETY: the caller's promises, passed on.
        let host = unsafe { host_of(callbacks) }?;
        // SAFETY: as above.
        let backend = unsafe { crate::vulkan::backend_of(device) }?;
        let limits = dispatchscope_core::DeviceLimits {
            name: dispatchscope_core::Backend::name(&backend),
            ..dispatchscope_core::DeviceLimits::default()
        };
        create_engine(limits, backend, Some(host), out)
    })
}

/// `ds_event::kind`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum ds_event_kind {
    /// Reserve `start..end` at `host_address`, with the `DS_EVENT_*` flags.
    DS_EVENT_RESERVE = 0,
    /// Release the reservation at `start`.
    DS_EVENT_RELEASE = 1,
    /// Commit host pages `start..end`.
    DS_EVENT_COMMIT = 2,
    /// Decommit host pages `start..end`.
    DS_EVENT_DECOMMIT = 3,
    /// The guest's view of `start..end`: `DS_EVENT_READABLE`, `DS_EVENT_WRITABLE`.
    DS_EVENT_PROTECT = 4,
    /// The host's protection of `start..end`: `protection` 0 none, 1 read, 2 read-write.
    DS_EVENT_HOST_PROTECT = 5,
    /// `start..end` become shared (`DS_EVENT_SHARED`) or private.
    DS_EVENT_SET_BACKING = 6,
    /// D824: the write-watch guards `start..end`.
    DS_EVENT_GUARD = 7,
    /// A CPU write of `n_bytes` at `start` (the bytes are in the emulator's pages already; in
    /// simulated memory they are `bytes`).
    DS_EVENT_WRITE = 8,
    /// C3: a copy deferred to `start`, `n_bytes` at `bytes`.
    DS_EVENT_DEFER_COPY = 9,
    /// D720: protected target `target_id` (`name`) over `start..end`.
    DS_EVENT_ADD_TARGET = 10,
    /// Protected target `target_id` is dropped.
    DS_EVENT_REMOVE_TARGET = 11,
    /// Every fence waited: no dispatch in flight.
    DS_EVENT_RETIRE = 12,
    /// D824: the write-watch lifted its guards over `start..end` (a CPU write faulted and the
    /// handler unprotected the page); the written notes stay.
    DS_EVENT_UNGUARD = 13,
}

/// `ds_event::flags`: the guest may read.
pub const DS_EVENT_READABLE: u32 = 1 << 0;
/// `ds_event::flags`: the guest may write.
pub const DS_EVENT_WRITABLE: u32 = 1 << 1;
/// `ds_event::flags`: host pages committed (reserve).
pub const DS_EVENT_COMMITTED: u32 = 1 << 2;
/// `ds_event::flags`: host pages shared (reserve, set-backing).
pub const DS_EVENT_SHARED: u32 = 1 << 3;
const KNOWN_EVENT_FLAGS: u32 =
    DS_EVENT_READABLE | DS_EVENT_WRITABLE | DS_EVENT_COMMITTED | DS_EVENT_SHARED;

/// One memory event in struct form. Fields an event does not use are ignored, except that `flags`
/// may hold only `DS_EVENT_*` bits and `reserved` must be 0 (`DS_BAD_INPUT` names what is not).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct ds_event {
    /// `sizeof(ds_event)`.
    pub size: u32,
    /// A `ds_event_kind` value.
    pub kind: u32,
    /// The first guest byte (a range's start, a reservation's base, a write's address).
    pub start: u64,
    /// The guest byte after the range (page-aligned ranges).
    pub end: u64,
    /// `DS_EVENT_RESERVE`: the host address where the emulator keeps the reservation's first
    /// byte (page-aligned); 0 for an engine on simulated memory.
    pub host_address: u64,
    /// `DS_EVENT_*` bits; any other bit is `DS_BAD_INPUT`.
    pub flags: u32,
    /// `DS_EVENT_HOST_PROTECT`: 0 none, 1 read, 2 read-write.
    pub protection: u32,
    /// `DS_EVENT_WRITE`, `DS_EVENT_DEFER_COPY`: the bytes (may be null for a write in host mode).
    pub bytes: *const u8,
    /// How many bytes.
    pub n_bytes: u64,
    /// `DS_EVENT_ADD_TARGET`, `DS_EVENT_REMOVE_TARGET`: the target's id.
    pub target_id: u32,
    /// Reserved: 0 (anything else is `DS_BAD_INPUT`).
    pub reserved: u32,
    /// `DS_EVENT_ADD_TARGET`: its name (NUL-terminated UTF-8) or null.
    pub name: *const std::ffi::c_char,
}

/// # Safety
/// `e`'s pointers must be valid for their counts.
unsafe fn event_of(e: &ds_event, host_mode: bool) -> Result<Event, Failure> {
    check_flags("event.flags", e.flags, KNOWN_EVENT_FLAGS)?;
    check_reserved("event.reserved", e.reserved)?;
    let range = || {
        if e.end < e.start {
            return Err(Failure::new(
                ds_status::DS_BAD_INPUT,
                format!(
                    "event range {:#x}..{:#x} ends before it starts",
                    e.start, e.end
                ),
            ));
        }
        Ok(ByteRange::new(e.start, e.end))
    };
    let flag = |f: u32| e.flags & f != 0;
    let bytes = || -> Result<Vec<u8>, Failure> {
        let n = usize::try_from(e.n_bytes)
            .map_err(|_| Failure::new(ds_status::DS_BAD_INPUT, "event.n_bytes is too large"))?;
        // SAFETY: the caller promises `n_bytes` readable bytes at `bytes`.
        Ok(unsafe { slice_arg(e.bytes, n, "event.bytes") }?.to_vec())
    };
    let backing = |shared: bool| {
        if shared {
            Backing::Shared
        } else {
            Backing::Private
        }
    };
    const KINDS: [ds_event_kind; 14] = [
        ds_event_kind::DS_EVENT_RESERVE,
        ds_event_kind::DS_EVENT_RELEASE,
        ds_event_kind::DS_EVENT_COMMIT,
        ds_event_kind::DS_EVENT_DECOMMIT,
        ds_event_kind::DS_EVENT_PROTECT,
        ds_event_kind::DS_EVENT_HOST_PROTECT,
        ds_event_kind::DS_EVENT_SET_BACKING,
        ds_event_kind::DS_EVENT_GUARD,
        ds_event_kind::DS_EVENT_WRITE,
        ds_event_kind::DS_EVENT_DEFER_COPY,
        ds_event_kind::DS_EVENT_ADD_TARGET,
        ds_event_kind::DS_EVENT_REMOVE_TARGET,
        ds_event_kind::DS_EVENT_RETIRE,
        ds_event_kind::DS_EVENT_UNGUARD,
    ];
    let Some(kind) = KINDS.get(e.kind as usize) else {
        return Err(Failure::new(
            ds_status::DS_BAD_INPUT,
            format!("event.kind {} names no ds_event_kind", e.kind),
        ));
    };
    use ds_event_kind::*;
    Ok(match kind {
        DS_EVENT_RESERVE => Event::Reserve {
            range: range()?,
            readable: flag(DS_EVENT_READABLE),
            writable: flag(DS_EVENT_WRITABLE),
            committed: flag(DS_EVENT_COMMITTED),
            backing: backing(flag(DS_EVENT_SHARED)),
            host_base: (e.host_address != 0).then_some(e.host_address),
        },
        DS_EVENT_RELEASE => Event::Release { base: e.start },
        DS_EVENT_COMMIT => Event::Commit { range: range()? },
        DS_EVENT_DECOMMIT => Event::Decommit { range: range()? },
        DS_EVENT_PROTECT => Event::Protect {
            range: range()?,
            readable: flag(DS_EVENT_READABLE),
            writable: flag(DS_EVENT_WRITABLE),
        },
        DS_EVENT_HOST_PROTECT => Event::HostProtect {
            range: range()?,
            protection: match e.protection {
                0 => HostProtection::None,
                1 => HostProtection::Read,
                2 => HostProtection::ReadWrite,
                p => {
                    return Err(Failure::new(
                        ds_status::DS_BAD_INPUT,
                        format!("event.protection {p} is not 0 (none), 1 (read) or 2 (read-write)"),
                    ));
                }
            },
        },
        DS_EVENT_SET_BACKING => Event::SetBacking {
            range: range()?,
            backing: backing(flag(DS_EVENT_SHARED)),
        },
        DS_EVENT_GUARD => Event::Guard { range: range()? },
        DS_EVENT_UNGUARD => Event::Unguard { range: range()? },
        // In host mode the bytes are in the emulator's pages: a write without them is said to be
        // one (its bytes unknown downstream), never turned into zeros.
        DS_EVENT_WRITE if host_mode && e.bytes.is_null() => Event::Wrote {
            range: ByteRange::from_base_size(e.start, e.n_bytes).ok_or_else(|| {
                Failure::new(
                    ds_status::DS_BAD_INPUT,
                    format!(
                        "event.n_bytes {:#x} at {:#x} passes the end of the address space",
                        e.n_bytes, e.start
                    ),
                )
            })?,
        },
        DS_EVENT_WRITE => Event::Write {
            address: e.start,
            bytes: bytes()?,
        },
        DS_EVENT_DEFER_COPY => Event::DeferCopy {
            address: e.start,
            bytes: bytes()?,
        },
        DS_EVENT_ADD_TARGET => Event::AddTarget {
            id: e.target_id,
            name: if e.name.is_null() {
                String::new()
            } else {
                // SAFETY: non-null; the caller promises a NUL-terminated string.
                unsafe { str_arg(e.name, "event.name") }?.to_owned()
            },
            range: range()?,
        },
        DS_EVENT_REMOVE_TARGET => Event::RemoveTarget { id: e.target_id },
        DS_EVENT_RETIRE => Event::Retire,
    })
}

/// Applies one memory event in struct form (the hot calls: protect and write-watch events).
///
/// # Safety
/// `event` must be null (an error) or point at a `ds_event` whose pointers are valid for their
/// counts.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ds_engine_apply(engine: ds_engine, event: *const ds_event) -> ds_status {
    with_engine(engine, "ds_engine_apply", |s| {
        if event.is_null() {
            return Err(null("event"));
        }
        // SAFETY: non-null; the size is read first.
        let size = unsafe { (*event).size };
        check_size::<ds_event>("ds_event", "ds_event", size)?;
        // SAFETY: the size matches; the caller promises the pointers.
        let e = unsafe { event_of(&*event, s.host_mode()) }?;
        s.apply(&e)
    })
}

/// How the emulator binds one slot (O5–O9): its holder's buffer holds guest
/// `buffer_start..buffer_end`; the slot's descriptor is that buffer at `offset_bytes` for
/// `range_bytes`, and its write mask the mask buffer at `mask_offset_bytes`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
#[allow(non_camel_case_types)]
pub struct ds_slot_plan {
    /// The slot the program binds.
    pub slot: u32,
    /// The slot whose buffer it binds (O4).
    pub holder: u32,
    /// The holder's widened guest range (O5), uploaded once (O8).
    pub buffer_start: u64,
    /// Its end.
    pub buffer_end: u64,
    /// The descriptor's offset into the holder's buffer (O6, a multiple of the device's
    /// minStorageBufferOffsetAlignment, O7).
    pub offset_bytes: u64,
    /// The descriptor's range (O6: to the holder's widened end).
    pub range_bytes: u64,
    /// The write mask's descriptor offset (O9: one mask word a data word, at the same offset).
    pub mask_offset_bytes: u64,
    /// 1 where the dispatch writes through it.
    pub written: u32,
    /// Reserved, written 0.
    pub reserved: u32,
}

/// What [`ds_engine_prepare`] hands out. The caller sets `size`, `bindings` and
/// `bindings_capacity` (at least the dispatch's `n_slots`); the rest is written.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct ds_prepared {
    /// `sizeof(ds_prepared)` (in).
    pub size: u32,
    /// A `ds_mode`: a refused dispatch must not run (its refusals are in the report
    /// [`ds_engine_complete`] makes).
    pub mode: u32,
    /// The dispatch's index: what [`ds_engine_complete`] takes.
    pub index: u64,
    /// The caller's array of `bindings_capacity` plans (in).
    pub bindings: *mut ds_slot_plan,
    /// Its capacity (in).
    pub bindings_capacity: u32,
    /// Plans written.
    pub n_bindings: u32,
    /// Refusals by rule (0 unless refused).
    pub n_refusals: u32,
    /// Copies the command buffer makes into this dispatch's holders before it, so that they
    /// hold what earlier dispatches in flight wrote: read them with
    /// [`ds_engine_prepared_carries`] (0 when nothing in flight writes what it reads).
    pub n_carries: u32,
    /// T3: the chunk table's device address (device-addressed dispatches; else 0).
    pub table_address: u64,
    /// C1: the mark words' device address, or 0 where the emulator keeps its own and hands them
    /// to [`ds_engine_complete`]. The buffer there holds `mark_words` words, one a table slot,
    /// then one summary word for every 256 slots (`mark_words / 256`, rounded up), which the
    /// helper sets beside each mark: after the fence the engine reads the summary and only the
    /// blocks it names. An emulator that keeps its own buffer and points the helper at it must
    /// size it so, zeroed; it hands back the mark words alone.
    pub marks_address: u64,
    /// Mark words: one a table slot (the summary words follow them).
    pub mark_words: u64,
    /// T1: bytes a chunk.
    pub chunk_bytes: u64,
    /// The push block with the helper's words set (others 0). A push block with only 8 bytes
    /// left (shadPS4's uses 120 of 128) takes the header form instead: the emulator writes
    /// `push[16..32]` into a 64-byte buffer of its own and pushes that buffer's device address at
    /// words 30–31, for a module linked with `dispatchscope spirv-helper --variant header`.
    pub push: [u32; 32],
    /// Bit `w` is set where the helper reads push word `w` (18–20, 24–25, 28–31).
    pub push_mask: u32,
    /// Reserved, written 0.
    pub reserved2: u32,
}

/// Every phase before the device (validate, O1–O11, A1/W2, C3, M1–M5, T1–T3/T6) for one
/// dispatch the emulator will run itself; fills `*out` with what its command buffer needs. A
/// debugger's pause stops the calling thread here.
///
/// **Many dispatches in flight.** Up to 4,096 dispatches may be prepared and not completed: an
/// emulator prepares a frame's dispatches one after another, records each into its command
/// buffer in the order prepared, submits once, and after its fence completes them **in the order
/// prepared** ([`ds_engine_complete`] of any other is `DS_ORDER`). What the engine plans assumes
/// that order on the device:
/// - between two dispatches of one command buffer the emulator records a memory barrier (shader
///   writes → shader reads and writes); a device-addressed dispatch's stores and an in-place
///   holder's (`DS_SLOT_IN_PLACE`) land in guest memory on the device, so a later dispatch sees
///   them through that barrier alone;
/// - a holder that is a copy (uploaded, then written back at complete) lands in guest memory only
///   at its complete: a later dispatch whose holder reads those bytes is handed **carries**
///   (`n_carries`, read by [`ds_engine_prepared_carries`]): device-side copies into its holder,
///   recorded after its upload and before it, in order;
/// - a later dispatch that would read (or write) such bytes in place (device-addressed, or an
///   in-place holder) cannot be served on the device: its prepare is `DS_WAIT` naming the
///   dispatch to complete first, and nothing is prepared.
///
/// Each device-addressed dispatch keeps the table copy and the mark words it was handed until its
/// complete: a later prepare that changes the table writes another copy.
/// An event from any thread that touches memory a dispatch in flight can reach is `DS_WAIT`
/// naming the newest such dispatch (M5); complete it after its fence and apply the event again.
///
/// # Safety
/// `dispatch` as for [`crate::ds_engine_dispatch`]; `out` must be null (an error) or point at a
/// `ds_prepared` whose `bindings` holds `bindings_capacity` elements.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ds_engine_prepare(
    engine: ds_engine,
    dispatch: *const ds_dispatch,
    out: *mut ds_prepared,
) -> ds_status {
    with_engine(engine, "ds_engine_prepare", |s| {
        // SAFETY: the caller promises null or a `ds_dispatch`.
        let dispatch = unsafe { ds_dispatch::arg(dispatch) }?;
        if out.is_null() {
            return Err(null("out"));
        }
        // SAFETY: non-null; the size is read first.
        let size = unsafe { (*out).size };
        check_size::<ds_prepared>("ds_prepared", "ds_prepared", size)?;
        // SAFETY: the size matches.
        let o = unsafe { &mut *out };
        let n_slots = dispatch.n_slots;
        if (o.bindings_capacity as usize) < n_slots {
            return Err(Failure::new(
                ds_status::DS_BAD_INPUT,
                format!(
                    "out.bindings_capacity is {}, below the dispatch's {n_slots} slots",
                    o.bindings_capacity
                ),
            ));
        }
        if o.bindings.is_null() && n_slots > 0 {
            return Err(null("out.bindings"));
        }
        // SAFETY: the caller promises the dispatch's pointers and counts.
        let p = unsafe { s.prepare(dispatch) }?;
        o.mode = ds_mode::from(p.mode) as u32;
        o.n_carries = p.carries.len() as u32;
        o.reserved2 = 0;
        o.index = p.index;
        o.n_refusals = p.refusals.len() as u32;
        o.n_bindings = p.bindings.len() as u32;
        for (i, b) in p.bindings.iter().enumerate() {
            // SAFETY: i < n_bindings <= n_slots <= bindings_capacity elements at `bindings`.
            unsafe {
                o.bindings.add(i).write(ds_slot_plan {
                    slot: b.slot,
                    holder: b.holder,
                    buffer_start: b.buffer.start,
                    buffer_end: b.buffer.end,
                    offset_bytes: b.offset_bytes,
                    range_bytes: b.range_bytes,
                    mask_offset_bytes: b.mask_offset_bytes,
                    written: u32::from(b.written),
                    reserved: 0,
                })
            };
        }
        o.push = p.push_block();
        o.push_mask = 0;
        let d = p.device.as_ref();
        for &(w, _) in d.iter().flat_map(|d| d.push_words.iter()) {
            o.push_mask |= 1 << w;
        }
        o.table_address = d.map_or(0, |d| d.table_address);
        o.marks_address = d.map_or(0, |d| d.marks_address);
        o.mark_words = d.map_or(0, |d| d.mark_words);
        o.chunk_bytes = d.map_or(0, |d| d.chunk_bytes);
        Ok(())
    })
}

/// `ds_carry::from`: the bytes are read from guest memory on the device (`from_guest`), after
/// dispatch `after` (which may write them in place).
pub const DS_CARRY_FROM_GUEST: u32 = 0;
/// `ds_carry::from`: the bytes are read from dispatch `after`'s holder buffer of slot
/// `from_slot`, at `from_offset` (its stores reach guest memory only at its complete).
pub const DS_CARRY_FROM_HOLDER: u32 = 1;

/// One copy the emulator's command buffer makes into a dispatch's holder before the dispatch
/// (after the holder's upload, behind a barrier from the earlier dispatches' shader writes to
/// transfer reads, and followed by one from transfer writes to shader reads), so that the holder
/// holds what earlier dispatches in flight wrote. Carries are recorded in the order given.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
#[allow(non_camel_case_types)]
pub struct ds_carry {
    /// The holder slot of this dispatch whose buffer the copy fills.
    pub slot: u32,
    /// `DS_CARRY_FROM_GUEST` or `DS_CARRY_FROM_HOLDER`.
    pub from: u32,
    /// Bytes into the holder's buffer (from its widened start, `ds_slot_plan::buffer_start`).
    pub offset: u64,
    /// How many bytes.
    pub bytes: u64,
    /// The earlier dispatch: the newest that may write the bytes in place (guest), or the one
    /// whose holder holds them (holder).
    pub after: u64,
    /// Guest: the guest address of the first byte. Holder: bytes into that holder's buffer.
    pub from_offset: u64,
    /// Holder: that dispatch's holder slot; guest: 0.
    pub from_slot: u32,
    /// Reserved, written 0.
    pub reserved: u32,
}

/// The carries of dispatch `index` in flight (`ds_prepared::n_carries` of them) into `out`, which
/// holds `capacity`; `*n` is set to how many there are (more than `capacity` is `DS_BAD_INPUT`,
/// with nothing written, so a caller can size its array and ask again).
///
/// # Safety
/// `out` must be null (when `capacity` is 0) or hold `capacity` elements; `n` must be valid for a
/// write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ds_engine_prepared_carries(
    engine: ds_engine,
    index: u64,
    out: *mut ds_carry,
    capacity: u32,
    n: *mut u32,
) -> ds_status {
    with_engine(engine, "ds_engine_prepared_carries", |s| {
        if n.is_null() {
            return Err(null("n"));
        }
        let Some(p) = s.in_flight(index) else {
            return Err(Failure::new(
                ds_status::DS_ORDER,
                format!("dispatch {index} is not in flight (never prepared, or completed)"),
            ));
        };
        let count = p.carries.len() as u32;
        // SAFETY: `n` was checked non-null; the caller promises it is valid for a write.
        unsafe { n.write(count) };
        if count > capacity {
            return Err(Failure::new(
                ds_status::DS_BAD_INPUT,
                format!("dispatch {index} has {count} carries; capacity is {capacity}"),
            ));
        }
        if count > 0 && out.is_null() {
            return Err(null("out"));
        }
        for (i, c) in p.carries.iter().enumerate() {
            let (from, after, from_offset, from_slot) = match c.from {
                CarryFrom::Guest { guest, after } => (DS_CARRY_FROM_GUEST, after, guest, 0),
                CarryFrom::Holder {
                    dispatch,
                    slot,
                    offset,
                } => (DS_CARRY_FROM_HOLDER, dispatch, offset, slot),
            };
            // SAFETY: i < count <= capacity elements at `out`.
            unsafe {
                out.add(i).write(ds_carry {
                    slot: c.slot,
                    from,
                    offset: c.offset,
                    bytes: c.bytes,
                    after,
                    from_offset,
                    from_slot,
                    reserved: 0,
                })
            };
        }
        Ok(())
    })
}

/// `ds_fault_address::kind`, as `VkDeviceFaultAddressTypeEXT` numbers them.
const FAULT_KINDS: [&str; 7] = [
    "none",
    "read of an invalid address",
    "write to an invalid address",
    "execute of an invalid address",
    "instruction pointer (unknown)",
    "instruction pointer (invalid)",
    "instruction pointer (fault)",
];

/// One faulting address of the device's fault report (`VkDeviceFaultAddressInfoEXT`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
#[allow(non_camel_case_types)]
pub struct ds_fault_address {
    /// `VkDeviceFaultAddressTypeEXT`: 1 read, 2 write, 3 execute of an invalid address; 4–6 an
    /// instruction pointer.
    pub kind: u32,
    /// Reserved: 0.
    pub reserved: u32,
    /// The reported address.
    pub address: u64,
    /// The driver's precision: the fault lies in the `precision`-aligned range around `address`.
    pub precision: u64,
}

/// The device's fault report (`vkGetDeviceFaultInfoEXT`), where the device has
/// `VK_EXT_device_fault`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct ds_device_fault {
    /// `sizeof(ds_device_fault)`.
    pub size: u32,
    /// How many addresses at `addresses`.
    pub n_addresses: u32,
    /// The driver's description (`VkDeviceFaultInfoEXT::description`), NUL-terminated, or null.
    pub description: *const c_char,
    /// The faulting addresses.
    pub addresses: *const ds_fault_address,
}

/// The emulator's fence reported the device lost (`VK_ERROR_DEVICE_LOST`; `status` in its own
/// words, e.g. "vkWaitForFences: VK_ERROR_DEVICE_LOST", may be null): the engine names every
/// dispatch in flight (its plan, its mappings and the table it read, and the escapes and refusals
/// its program had in earlier dispatches) and maps each address of `fault` (null where the device
/// has no `VK_EXT_device_fault`) to its guest reservation, piece and chunk, or names it as in no
/// import. The dispatches in flight are forgotten; every later prepare is `DS_DEVICE_LOST`. The
/// report is [`ds_engine_loss_report_json`]'s, an attached debugger's and the capture's.
///
/// # Safety
/// `status` must be null or NUL-terminated; `fault` null or a `ds_device_fault` whose pointers are
/// valid for their counts.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ds_engine_device_lost(
    engine: ds_engine,
    status: *const c_char,
    fault: *const ds_device_fault,
) -> ds_status {
    with_engine(engine, "ds_engine_device_lost", |s| {
        let status = if status.is_null() {
            "the device was lost".to_owned()
        } else {
            // SAFETY: non-null; the caller promises a NUL-terminated string.
            unsafe { str_arg(status, "status") }?.to_owned()
        };
        let fault = if fault.is_null() {
            None
        } else {
            // SAFETY: non-null; the size is read first.
            let size = unsafe { (*fault).size };
            check_size::<ds_device_fault>("ds_device_fault", "ds_device_fault", size)?;
            // SAFETY: the size matches.
            let f = unsafe { &*fault };
            let description = if f.description.is_null() {
                String::new()
            } else {
                // SAFETY: non-null; the caller promises a NUL-terminated string.
                unsafe { str_arg(f.description, "fault.description") }?.to_owned()
            };
            // SAFETY: the caller promises `n_addresses` elements.
            let addrs =
                unsafe { slice_arg(f.addresses, f.n_addresses as usize, "fault.addresses") }?;
            let mut addresses = Vec::with_capacity(addrs.len());
            for (i, a) in addrs.iter().enumerate() {
                check_reserved(&format!("fault.addresses[{i}].reserved"), a.reserved)?;
                let kind = FAULT_KINDS
                    .get(a.kind as usize)
                    .map_or_else(|| format!("kind {}", a.kind), |k| (*k).to_owned());
                let kind = if a.precision > 1 {
                    format!("{kind}, within {:#x} bytes", a.precision)
                } else {
                    kind
                };
                addresses.push((a.address, kind));
            }
            Some(DeviceFault {
                description,
                addresses,
            })
        };
        s.device_lost(&status, fault.as_ref())
    })
}

/// The loss report as JSON (`dispatchscope.device-loss/1`), once [`ds_engine_device_lost`] was
/// called: `*json` points at it (valid until this thread's next call of this function), `*len`
/// is its length without the NUL. `DS_ORDER` before a loss.
///
/// # Safety
/// `json` and `len` must be valid for writes (`len` may be null).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ds_engine_loss_report_json(
    engine: ds_engine,
    json: *mut *const c_char,
    len: *mut usize,
) -> ds_status {
    with_engine(engine, "ds_engine_loss_report_json", |s| {
        if json.is_null() {
            return Err(null("json"));
        }
        let Some(report) = s.loss() else {
            return Err(Failure::new(
                ds_status::DS_ORDER,
                "the device was not lost (ds_engine_device_lost was not called)",
            ));
        };
        let text = serde_json::to_string_pretty(report)
            .map_err(|e| Failure::new(ds_status::DS_ENGINE, format!("the loss report: {e}")))?;
        let c = std::sync::Arc::new(
            std::ffi::CString::new(text)
                .map_err(|_| Failure::new(ds_status::DS_ENGINE, "a NUL in the loss report"))?,
        );
        let (ptr, n) = (c.as_ptr(), c.as_bytes().len());
        LOSS_JSON.with(|slot| *slot.borrow_mut() = Some(c));
        // SAFETY: `json` was checked non-null; `len` is null or valid, as the caller promises.
        unsafe {
            json.write(ptr);
            if !len.is_null() {
                len.write(n);
            }
        }
        Ok(())
    })
}

thread_local! {
    /// The loss report [`ds_engine_loss_report_json`] last handed this thread.
    static LOSS_JSON: std::cell::RefCell<Option<std::sync::Arc<std::ffi::CString>>> =
        const { std::cell::RefCell::new(None) };
}

/// How many dispatches are in flight (prepared and not completed), into `*out`.
///
/// # Safety
/// `out` must be valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ds_engine_in_flight(engine: ds_engine, out: *mut u32) -> ds_status {
    with_engine(engine, "ds_engine_in_flight", |s| {
        if out.is_null() {
            return Err(null("out"));
        }
        // SAFETY: checked non-null; the caller promises it is valid for a write.
        unsafe { out.write(s.in_flight_count() as u32) };
        Ok(())
    })
}

/// One holder's buffer after the emulator's dispatch (O8): its data from its widened start and
/// its write mask (4 bytes a data word, non-zero where a store set it). The engine reads every
/// word of both: keep them in host-cached memory (`VK_MEMORY_PROPERTY_HOST_CACHED_BIT`, as a
/// download buffer is). Uncached memory, the first host-visible type on NVIDIA, reads at tens of
/// MB/s: a frame of run 305's holders cost 80 ms there (BENCHMARKS.md, 2026-12-07).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct ds_holder_run {
    /// The holder slot.
    pub slot: u32,
    /// Reserved: 0 (anything else is `DS_BAD_INPUT`).
    pub reserved: u32,
    /// Its data.
    pub data: *const u8,
    /// Bytes of data.
    pub data_bytes: u64,
    /// Its write mask.
    pub masks: *const u8,
    /// Bytes of mask.
    pub mask_bytes: u64,
}

/// What the emulator's device left, for [`ds_engine_complete`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct ds_completion {
    /// `sizeof(ds_completion)`.
    pub size: u32,
    /// How many holders at `holders`.
    pub n_holders: u32,
    /// The prepared dispatch's index (`ds_prepared::index`).
    pub index: u64,
    /// C1: the mark words as the device left them (`n_marks`, one a table slot), or null to read
    /// the engine's own (`ds_prepared::marks_address`).
    pub marks: *const u32,
    /// How many mark words.
    pub n_marks: u64,
    /// O8: the written holders' data and masks; a holder left out was the emulator's own pages
    /// (nothing to write back).
    pub holders: *const ds_holder_run,
    /// The instrumented variant's buffer as the device left it, with the program's sites; null
    /// for a plain pass. Complete decodes it into the report's instrumented section (counts by
    /// site, escapes with their pc and class, the escape log, captured lanes).
    pub instrumentation: *const ds_instrumentation,
}

/// Every phase after the device (C1, C2, O8/O9, L1) for the prepared dispatch, after the
/// emulator's fence: the marked chunks go to the emulator's `hand_off`, the masked write-back
/// through its `write`. The report is then the engine's last report. A completion refused as bad
/// input leaves the dispatch prepared (fix it and complete again, or [`ds_engine_abandon`]).
///
/// # Safety
/// `completion` must be null (an error) or point at a `ds_completion` whose pointers are valid
/// for their counts.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ds_engine_complete(
    engine: ds_engine,
    completion: *const ds_completion,
) -> ds_status {
    with_engine(engine, "ds_engine_complete", |s| {
        if completion.is_null() {
            return Err(null("completion"));
        }
        // SAFETY: non-null; the size is read first.
        let size = unsafe { (*completion).size };
        check_size::<ds_completion>("ds_completion", "ds_completion", size)?;
        // SAFETY: the size matches.
        let c = unsafe { *completion };
        let marks = if c.marks.is_null() {
            None
        } else {
            let n = usize::try_from(c.n_marks)
                .map_err(|_| Failure::new(ds_status::DS_BAD_INPUT, "n_marks is too large"))?;
            // SAFETY: the caller promises `n_marks` words.
            Some(unsafe { slice_arg(c.marks, n, "completion.marks") }?)
        };
        // SAFETY: the caller promises `n_holders` elements.
        let runs = unsafe { slice_arg(c.holders, c.n_holders as usize, "completion.holders") }?;
        let mut holders = Vec::with_capacity(runs.len());
        for (i, h) in runs.iter().enumerate() {
            check_reserved(&format!("completion.holders[{i}].reserved"), h.reserved)?;
            let len = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
            // SAFETY: the caller promises `data_bytes` and `mask_bytes` bytes.
            let data = unsafe {
                slice_arg(
                    h.data,
                    len(h.data_bytes),
                    &format!("completion.holders[{i}].data"),
                )
            }?;
            // SAFETY: as above.
            let masks = unsafe {
                slice_arg(
                    h.masks,
                    len(h.mask_bytes),
                    &format!("completion.holders[{i}].masks"),
                )
            }?;
            holders.push(HolderRun {
                slot: h.slot,
                data,
                masks,
            });
        }
        let mut sites = Vec::new();
        let instrumentation = if c.instrumentation.is_null() {
            None
        } else {
            // SAFETY: non-null; the caller promises a `ds_instrumentation` and its arrays.
            Some(unsafe { instrumentation_arg(&*c.instrumentation, &mut sites) }?)
        };
        let instrumentation = instrumentation.map(|(layout, grid, words)| DeviceInstrumentation {
            layout,
            grid,
            words,
            sites: &sites,
        });
        // The emulator's device ran it: the report names the device its limits came from.
        let device = s.device_name();
        s.complete(
            c.index,
            RanOn::Device(DeviceRun {
                marks,
                holders,
                ran_on: Some(&device),
                instrumentation,
            }),
        )
    })
}

/// The checked mode: with `on` non-zero, before each device-addressed dispatch the engine reads
/// the process's real mapping of every imported piece again (`PROCMAP_QUERY`, under a microsecond
/// a mapping) and drops, before the device can touch it, any piece the emulator changed without an
/// event (made read-only or `PROT_NONE`, unmapped, remapped shared): the report's mappings leave
/// it out by name ("host pages … became read-only …; no event said so") and accesses there
/// escape. It is on whenever a debugger is attached, whatever this says.
#[unsafe(no_mangle)]
pub extern "C" fn ds_engine_set_checked(engine: ds_engine, on: u32) -> ds_status {
    with_engine(engine, "ds_engine_set_checked", |s| {
        s.set_checked(on != 0);
        Ok(())
    })
}

/// Forgets dispatch `index` in flight, which the emulator will not complete (it gives up on it);
/// any dispatch in flight may be abandoned, in any order. After a lost device, call
/// [`ds_engine_device_lost`] instead.
#[unsafe(no_mangle)]
pub extern "C" fn ds_engine_abandon(engine: ds_engine, index: u64) -> ds_status {
    with_engine(engine, "ds_engine_abandon", |s| s.abandon(index))
}

/// Reads `len` guest bytes at `address` into `out`, as the engine sees them (the emulator's pages
/// in host mode; a page the process cannot read is `DS_HOST_CALLBACK`, never a crash).
///
/// # Safety
/// `out` must be null (an error) or valid for `len` writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ds_engine_read_guest(
    engine: ds_engine,
    address: u64,
    out: *mut u8,
    len: usize,
) -> ds_status {
    with_engine(engine, "ds_engine_read_guest", |s| {
        if out.is_null() {
            return Err(null("out"));
        }
        // SAFETY: non-null; the caller promises `len` writable bytes.
        let buf = unsafe { std::slice::from_raw_parts_mut(out, len) };
        s.read_guest(address, buf)
    })
}

/// `ds_site::kind`: what kind of guest instruction a site is.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum ds_access_kind {
    /// `global_load`/`global_store`: a guest address.
    DS_ACCESS_GLOBAL = 0,
    /// `flat_load`/`flat_store`: an address routed by its high half (P1).
    DS_ACCESS_FLAT = 1,
    /// `s_load`/`s_buffer_load`.
    DS_ACCESS_SCALAR = 2,
    /// `buffer_load_dword…`: untyped, through a slot.
    DS_ACCESS_UNTYPED_BUFFER = 3,
    /// `buffer_load_format…`: through a slot, converted by a format.
    DS_ACCESS_FORMAT_BUFFER = 4,
    /// `image_bvh_intersect_ray`: reads a node by address (W3).
    DS_ACCESS_RAY_INTERSECTION = 5,
    /// `ds_read`/`ds_write`: the workgroup's LDS.
    DS_ACCESS_LDS = 6,
    /// `scratch_load`/`scratch_store`: the lane's private memory.
    DS_ACCESS_SCRATCH = 7,
}

impl ds_access_kind {
    const ALL: [(ds_access_kind, AccessKind); 8] = [
        (Self::DS_ACCESS_GLOBAL, AccessKind::Global),
        (Self::DS_ACCESS_FLAT, AccessKind::Flat),
        (Self::DS_ACCESS_SCALAR, AccessKind::Scalar),
        (Self::DS_ACCESS_UNTYPED_BUFFER, AccessKind::UntypedBuffer),
        (Self::DS_ACCESS_FORMAT_BUFFER, AccessKind::FormatBuffer),
        (
            Self::DS_ACCESS_RAY_INTERSECTION,
            AccessKind::RayIntersection,
        ),
        (Self::DS_ACCESS_LDS, AccessKind::Lds),
        (Self::DS_ACCESS_SCRATCH, AccessKind::Scratch),
    ];

    fn kind(value: u32) -> Option<AccessKind> {
        Self::ALL
            .iter()
            .find(|(c, _)| *c as u32 == value)
            .map(|&(_, k)| k)
    }
}

/// The push word where an instrumented program reads its instrumentation buffer's device address
/// (2 words, low first): the emulator sets it besides the words `ds_prepared::push_mask` names.
pub const DS_PUSH_INSTRUMENT: u32 = 26;

/// What the translator says of one access site of an instrumented program: the helper's site
/// number is the index in the array.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct ds_site {
    /// The guest instruction's program counter (the listing shows the instruction there).
    pub pc: u64,
    /// A `ds_access_kind`.
    pub kind: u32,
    /// 1 for a store, 0 for a load (any other value is `DS_BAD_INPUT`).
    pub store: u32,
    /// Bytes an access.
    pub size_bytes: u32,
    /// Reserved: 0 (anything else is `DS_BAD_INPUT`).
    pub reserved: u32,
}

/// An instrumented pass's buffer (its words as the device left them) and what decoding it needs.
/// Its first contents come from [`ds_engine_instrumentation_init`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct ds_instrumentation {
    /// `sizeof(ds_instrumentation)`.
    pub size: u32,
    /// Sites at `sites` (the program's, as given to [`ds_engine_instrumentation_init`]).
    pub n_sites: u32,
    /// What each site is.
    pub sites: *const ds_site,
    /// The dispatch's grid in lanes (one lane a pixel; multiples of 8).
    pub width: u32,
    /// Rows.
    pub height: u32,
    /// The buffer's words after the device's fence.
    pub words: *const u32,
    /// How many words (at least what init said).
    pub n_words: u64,
}

/// Reads `i`'s sites into `sites` and checks its grid; the layout, grid and words.
///
/// # Safety
/// `i`'s pointers valid for their counts.
unsafe fn instrumentation_arg<'a>(
    i: &ds_instrumentation,
    sites: &mut Vec<SiteInfo>,
) -> Result<(InstrumentLayout, Grid, &'a [u32]), Failure> {
    check_size::<ds_instrumentation>("ds_instrumentation", "ds_instrumentation", i.size)?;
    let grid = Grid::new(i.width, i.height)
        .map_err(|e| Failure::new(ds_status::DS_BAD_INPUT, format!("instrumentation: {e}")))?;
    // SAFETY: the caller promises `n_sites` sites.
    let given = unsafe { slice_arg(i.sites, i.n_sites as usize, "instrumentation.sites") }?;
    for (n, s) in given.iter().enumerate() {
        check_reserved(&format!("instrumentation.sites[{n}].reserved"), s.reserved)?;
        if s.store > 1 {
            return Err(Failure::new(
                ds_status::DS_BAD_INPUT,
                format!(
                    "instrumentation.sites[{n}].store is {}; it is 0 (a load) or 1 (a store)",
                    s.store
                ),
            ));
        }
        let kind = ds_access_kind::kind(s.kind).ok_or_else(|| {
            Failure::new(
                ds_status::DS_BAD_INPUT,
                format!(
                    "instrumentation.sites[{n}].kind is {}, no ds_access_kind",
                    s.kind
                ),
            )
        })?;
        sites.push(SiteInfo {
            pc: s.pc,
            kind,
            op: if s.store == 1 { Op::Store } else { Op::Load },
            size_bytes: s.size_bytes,
        });
    }
    let n = usize::try_from(i.n_words).map_err(|_| {
        Failure::new(
            ds_status::DS_BAD_INPUT,
            "instrumentation.n_words is too large",
        )
    })?;
    // SAFETY: the caller promises `n_words` words.
    let words = unsafe { slice_arg(i.words, n, "instrumentation.words") }?;
    Ok((InstrumentLayout::with_sites(i.n_sites), grid, words))
}

/// The first contents of an instrumented pass's buffer for a program of `n_sites` sites over a
/// `width` × `height` grid (multiples of 8): the header (the layout, the lanes an attached
/// debugger asked to capture, the positive control's `canary` address, which must lie in no
/// reservation) and zeroed counters and logs. Writes the buffer's length in words to `*n_words`;
/// with `words` null it writes only that (a size query), else `capacity` must hold it. The
/// emulator uploads the words to its own buffer and pushes its device address at
/// [`DS_PUSH_INSTRUMENT`].
///
/// # Safety
/// `words` null or valid for `capacity` writes; `n_words` null (an error) or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ds_engine_instrumentation_init(
    engine: ds_engine,
    n_sites: u32,
    width: u32,
    height: u32,
    canary: u64,
    words: *mut u32,
    capacity: u64,
    n_words: *mut u64,
) -> ds_status {
    with_engine(engine, "ds_engine_instrumentation_init", |s| {
        if n_words.is_null() {
            return Err(null("n_words"));
        }
        let grid = Grid::new(width, height)
            .map_err(|e| Failure::new(ds_status::DS_BAD_INPUT, e.to_string()))?;
        let layout = InstrumentLayout::with_sites(n_sites);
        let needed = u64::from(layout.words());
        // SAFETY: non-null; the caller promises a write.
        unsafe { n_words.write(needed) };
        if words.is_null() {
            return Ok(());
        }
        if capacity < needed {
            return Err(Failure::new(
                ds_status::DS_BAD_INPUT,
                format!("capacity is {capacity} words; the buffer needs {needed}"),
            ));
        }
        let init = instrument::initial_words(&layout, &s.lanes(), canary, grid);
        // SAFETY: `capacity >= needed == init.len()` writable words at `words`.
        unsafe { std::ptr::copy_nonoverlapping(init.as_ptr(), words, init.len()) };
        Ok(())
    })
}

/// Hands an attached debugger (now, and each debugger that attaches later) the guest machine
/// code of the program at guest address `program`, `len` bytes from `code`: its listing shows the
/// instruction at every pc a report names (an escape's site, a refusal's program). Call it once a
/// program, as the emulator first translates it; a second call for one address replaces it.
///
/// # Safety
/// `code` must point at `len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ds_engine_add_program(
    engine: ds_engine,
    program: u64,
    code: *const u8,
    len: usize,
) -> ds_status {
    with_engine(engine, "ds_engine_add_program", |s| {
        // SAFETY: the caller promises `len` bytes.
        let code = unsafe { slice_arg(code, len, "code") }?;
        s.add_program(program, code);
        Ok(())
    })
}
