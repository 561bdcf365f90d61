//! The boundary itself: statuses, the calling thread's last message, caught panics, and reading
//! what C hands in.

use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char};
use std::fmt::Display;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// The layout of every struct of this header: a caller compiled against another version is
/// refused by name (`DS_ABI_MISMATCH`) rather than misread.
pub const DS_ABI_VERSION: u32 = 5;

/// The ABI version this library was built with (compare with `DS_ABI_VERSION`).
#[unsafe(no_mangle)]
pub extern "C" fn ds_abi_version() -> u32 {
    DS_ABI_VERSION
}

/// What a call did. `DS_OK` is 0; on any other status [`ds_last_error`] says what went wrong.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum ds_status {
    /// It worked.
    DS_OK = 0,
    /// A pointer argument that may not be null was null.
    DS_NULL_POINTER = 1,
    /// The handle is 0, was never made, or was destroyed.
    DS_INVALID_HANDLE = 2,
    /// The input is malformed: bad JSON, a field out of range, or a dispatch or event the engine
    /// refuses as input (not a refusal by rule: those are reports, `DS_OK`).
    DS_BAD_INPUT = 3,
    /// The engine failed: its backend, or its chunk table.
    DS_ENGINE = 4,
    /// Listening for a debugger failed (the address, the token, the socket).
    DS_LIVE = 5,
    /// A file could not be written.
    DS_IO = 6,
    /// The call needs what is not there yet (no report before the first dispatch, no capture
    /// to end).
    DS_NOT_READY = 7,
    /// A panic inside the library, caught at the boundary; the engine it happened in is refused
    /// from then on.
    DS_PANICKED = 8,
    /// The device was lost (`VK_ERROR_DEVICE_LOST`): nothing more runs on it.
    DS_DEVICE_LOST = 9,
    /// The device or the host ran out of memory.
    DS_OUT_OF_MEMORY = 10,
    /// A host callback (commit, guard release, write, hand-off, read) reported failure, or a page
    /// the process cannot read was read.
    DS_HOST_CALLBACK = 11,
    /// A struct's `size` or `abi_version` is not this library's (`DS_ABI_VERSION`).
    DS_ABI_MISMATCH = 12,
    /// Prepare and complete out of order: a second prepare before complete, a complete of a
    /// dispatch not prepared (or completed already).
    DS_ORDER = 13,
    /// M5: the event releases, decommits or reprotects memory a prepared dispatch can reach.
    /// Nothing changed: complete (or abandon) the dispatch `ds_last_error` names after its fence,
    /// then apply the event again, and leave those pages as they are until then.
    DS_WAIT = 14,
}

/// A status with its message: what every function body returns before the boundary.
#[derive(Debug)]
pub(crate) struct Failure {
    pub status: ds_status,
    pub message: String,
}

impl Failure {
    pub fn new(status: ds_status, message: impl Display) -> Self {
        Self {
            status,
            message: message.to_string(),
        }
    }
}

pub(crate) type Outcome = Result<(), Failure>;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: &str) {
    // A message with a NUL in it (from input) is cut there rather than lost.
    let bytes: Vec<u8> = message.bytes().take_while(|&b| b != 0).collect();
    let message = CString::new(bytes).unwrap_or_default();
    LAST_ERROR.with(|m| *m.borrow_mut() = message);
}

/// The message of the calling thread's last failed call: a NUL-terminated UTF-8 string, empty
/// when the last call succeeded. It stays valid until the thread's next call into this library.
#[unsafe(no_mangle)]
pub extern "C" fn ds_last_error() -> *const c_char {
    LAST_ERROR.with(|m| m.borrow().as_ptr())
}

thread_local! {
    /// The dispatch the calling thread's last `DS_WAIT` named ([`ds_last_wait`]).
    static LAST_WAIT: std::cell::Cell<u64> = const { std::cell::Cell::new(u64::MAX) };
}

/// Notes the dispatch a `DS_WAIT` about to be returned names.
pub(crate) fn set_last_wait(dispatch: u64) {
    LAST_WAIT.with(|w| w.set(dispatch));
}

/// The dispatch the calling thread's last call answered `DS_WAIT` for names: complete it (after
/// its fence; completes go in order, so every dispatch before it completes first), then make the
/// call again. `UINT64_MAX` when the thread's last call was not `DS_WAIT`. Valid until the
/// thread's next call into this library.
#[unsafe(no_mangle)]
pub extern "C" fn ds_last_wait() -> u64 {
    LAST_WAIT.with(std::cell::Cell::get)
}

/// Runs `body` at the boundary: its failure becomes a status and a message, a panic
/// `DS_PANICKED`; success clears the message.
pub(crate) fn boundary(body: impl FnOnce() -> Outcome) -> ds_status {
    let outcome = catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_owned());
        Err(Failure::new(
            ds_status::DS_PANICKED,
            format!("dispatchscope panicked (a bug; please report it): {what}"),
        ))
    });
    match outcome {
        Ok(()) => {
            set_last_error("");
            set_last_wait(u64::MAX);
            ds_status::DS_OK
        }
        Err(f) => {
            set_last_error(&f.message);
            if f.status != ds_status::DS_WAIT {
                set_last_wait(u64::MAX);
            }
            f.status
        }
    }
}

/// The bytes of a `(pointer, length)` argument, borrowed for the call.
///
/// # Safety
/// A non-null `ptr` must point at `len` readable bytes that outlive the call.
pub(crate) unsafe fn bytes_arg<'a>(
    ptr: *const u8,
    len: usize,
    what: &str,
) -> Result<&'a [u8], Failure> {
    if ptr.is_null() {
        return Err(null(what));
    }
    // SAFETY: the caller promises `len` readable bytes at a non-null `ptr` for the call.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// A NUL-terminated UTF-8 string argument, borrowed for the call.
///
/// # Safety
/// A non-null `ptr` must point at a NUL-terminated string that outlives the call.
pub(crate) unsafe fn str_arg<'a>(ptr: *const c_char, what: &str) -> Result<&'a str, Failure> {
    if ptr.is_null() {
        return Err(null(what));
    }
    // SAFETY: the caller promises a NUL-terminated string at a non-null `ptr` for the call.
    let s = unsafe { CStr::from_ptr(ptr) };
    s.to_str()
        .map_err(|e| Failure::new(ds_status::DS_BAD_INPUT, format!("{what} is not UTF-8: {e}")))
}

/// A slice argument of `n` elements; null is allowed when `n` is 0.
///
/// # Safety
/// A non-null `ptr` must point at `n` initialised `T`s that outlive the call.
pub(crate) unsafe fn slice_arg<'a, T>(
    ptr: *const T,
    n: usize,
    what: &str,
) -> Result<&'a [T], Failure> {
    if n == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(null(what));
    }
    // SAFETY: the caller promises `n` initialised elements at a non-null `ptr` for the call.
    Ok(unsafe { std::slice::from_raw_parts(ptr, n) })
}

/// Writes `value` through an out-pointer.
///
/// # Safety
/// A non-null `out` must be valid for a write of `T`.
pub(crate) unsafe fn write_out<T>(out: *mut T, value: T, what: &str) -> Outcome {
    if out.is_null() {
        return Err(null(what));
    }
    // SAFETY: the caller promises a non-null `out` valid for writes.
    unsafe { out.write(value) };
    Ok(())
}

/// A struct whose `size` is not this library's: `DS_ABI_MISMATCH`, naming the struct (`what` is
/// where it was found: `ds_event`, `dispatch.slots[3]`), its size and the library's.
pub(crate) fn abi_mismatch(what: &str, struct_name: &str, size: u32, want: usize) -> Failure {
    Failure::new(
        ds_status::DS_ABI_MISMATCH,
        format!(
            "{what}.size is {size}, but this library's {struct_name} is {want} bytes \
             (DS_ABI_VERSION {}): rebuild against this header",
            DS_ABI_VERSION
        ),
    )
}

/// Checks the `size` of a struct `T` named `struct_name`, found at `what`.
pub(crate) fn check_size<T>(what: &str, struct_name: &str, size: u32) -> Outcome {
    if size as usize == size_of::<T>() {
        Ok(())
    } else {
        Err(abi_mismatch(what, struct_name, size, size_of::<T>()))
    }
}

/// Unknown bits in a flags word: `DS_BAD_INPUT`, naming them in hex.
pub(crate) fn check_flags(what: &str, flags: u32, known: u32) -> Outcome {
    let unknown = flags & !known;
    if unknown == 0 {
        Ok(())
    } else {
        Err(Failure::new(
            ds_status::DS_BAD_INPUT,
            format!("{what} has unknown bits {unknown:#x}"),
        ))
    }
}

/// A reserved field of an input struct that is not 0: `DS_BAD_INPUT`.
pub(crate) fn check_reserved(what: &str, value: u32) -> Outcome {
    if value == 0 {
        Ok(())
    } else {
        Err(Failure::new(
            ds_status::DS_BAD_INPUT,
            format!("{what} is {value}; it must be 0"),
        ))
    }
}

pub(crate) fn null(what: &str) -> Failure {
    Failure::new(ds_status::DS_NULL_POINTER, format!("{what} is null"))
}

/// A host callback's failure (or a page the process cannot read): `DS_HOST_CALLBACK`.
pub(crate) fn host_error(e: dispatchscope_core::host::HostError) -> Failure {
    Failure::new(ds_status::DS_HOST_CALLBACK, e)
}
