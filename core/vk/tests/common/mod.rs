//! What the host-mode tests share: a Vulkan context on lavapipe (or the machine's device) with the
//! validation layer, real `mmap`ed pages, and an emulator whose calls are [`HostCalls`] and can be
//! told to fail.

#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    unsafe_code,
    reason = "tests: a panic is the test failing; the test is the emulator, so it maps and protects its own pages; each test file uses part of this"
)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use dispatchscope_core::addr::ByteRange;
use dispatchscope_core::engine::Engine;
use dispatchscope_core::input::{
    Access, AccessKind, Backing, DeviceLimits, DispatchInput, Event, Op, Reason,
};
use dispatchscope_vk::host_pages::{HostCallError, HostCalls, ProcessHost};
use dispatchscope_vk::{Context, ContextOptions, VkError, VulkanBackend};

pub const PAGE: usize = 0x1000;

pub fn required() -> bool {
    std::env::var("DISPATCHSCOPE_REQUIRE_VULKAN").is_ok_and(|v| v == "1")
}

/// One context for the test binary, with the validation layer where it is installed.
pub fn context() -> Option<Arc<Context>> {
    static CTX: OnceLock<Result<Arc<Context>, String>> = OnceLock::new();
    let r = CTX.get_or_init(|| {
        let opts = |validation| ContextOptions {
            validation,
            stage_table: false,
        };
        match Context::new(&opts(true)) {
            Err(VkError::NoValidationLayer) if !required() => Context::new(&opts(false)),
            other => other,
        }
        .map_err(|e| e.to_string())
    });
    match r {
        Ok(c) => Some(Arc::clone(c)),
        Err(e) if required() => {
            panic!("DISPATCHSCOPE_REQUIRE_VULKAN=1, but Vulkan cannot run: {e}")
        }
        Err(e) => {
            eprintln!("skipped: Vulkan cannot run here: {e}");
            None
        }
    }
}

/// The validation layer said nothing.
pub fn quiet(ctx: &Context) {
    assert_eq!(
        ctx.validation_messages(),
        0,
        "the validation layer spoke:\n{}",
        ctx.validation_text().join("\n")
    );
}

/// A real mapping of `bytes` bytes, unmapped on drop.
pub struct Pages {
    pub ptr: *mut u8,
    pub bytes: usize,
}

// SAFETY: the test owns the mapping; the engine reads it through process_vm_readv only, and the
// words other threads touch are atomics.
unsafe impl Send for Pages {}
unsafe impl Sync for Pages {}

impl Pages {
    /// `bytes` private (or shared) anonymous read-write bytes.
    pub fn map(shared: bool, bytes: usize) -> Self {
        let flags = if shared {
            libc::MAP_SHARED | libc::MAP_ANONYMOUS
        } else {
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE
        };
        // SAFETY: a fresh anonymous mapping.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                -1,
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED);
        Self {
            ptr: ptr.cast(),
            bytes,
        }
    }

    pub fn addr(&self) -> u64 {
        self.ptr as u64
    }

    pub fn word(&self, off: usize) -> u32 {
        self.atomic(off).load(Ordering::SeqCst)
    }

    pub fn set_word(&self, off: usize, v: u32) {
        self.atomic(off).store(v, Ordering::SeqCst);
    }

    /// The word at `off` as an atomic, for a guest thread.
    pub fn atomic(&self, off: usize) -> &std::sync::atomic::AtomicU32 {
        assert!(off.is_multiple_of(4) && off + 4 <= self.bytes);
        // SAFETY: aligned, inside the mapping, and the mapping outlives the borrow.
        unsafe { std::sync::atomic::AtomicU32::from_ptr(self.ptr.add(off).cast()) }
    }

    pub fn protect(&self, off: usize, len: usize, prot: i32) {
        // SAFETY: a page-aligned part of this mapping.
        let r = unsafe { libc::mprotect(self.ptr.add(off).cast(), len, prot) };
        assert_eq!(r, 0);
    }

    /// Unmaps a page-aligned part of the mapping (a hole, as an emulator's bug would leave).
    pub fn unmap(&self, off: usize, len: usize) {
        // SAFETY: a page-aligned part of this mapping, never touched again by the test.
        let r = unsafe { libc::munmap(self.ptr.add(off).cast(), len) };
        assert_eq!(r, 0);
    }

    /// Maps a shared memfd over a page-aligned part of the mapping (`MAP_FIXED`).
    pub fn remap_shared(&self, off: usize, len: usize) {
        // SAFETY: a new memfd, sized, mapped over our own pages.
        unsafe {
            let fd = libc::memfd_create(c"guest".as_ptr(), 0);
            assert!(fd >= 0);
            assert_eq!(libc::ftruncate(fd, len as libc::off_t), 0);
            let p = libc::mmap(
                self.ptr.add(off).cast(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                fd,
                0,
            );
            assert_eq!(p.cast::<u8>(), self.ptr.add(off));
            libc::close(fd);
        }
    }
}

impl Drop for Pages {
    fn drop(&mut self) {
        // SAFETY: the mapping this made; every engine over it is dropped first.
        unsafe { libc::munmap(self.ptr.cast(), self.bytes) };
    }
}

/// The emulator's side: what the engine asked of it, and the host addresses where its calls fail.
#[derive(Default)]
pub struct Emulator {
    pub log: Mutex<Vec<String>>,
    /// Host ranges whose `write` fails.
    pub fail_write: Mutex<Vec<ByteRange>>,
    /// Host ranges whose `commit` fails.
    pub fail_commit: Mutex<Vec<ByteRange>>,
    /// Bytes written through `write`.
    pub bytes_written: AtomicU64,
}

impl Emulator {
    fn fails(list: &Mutex<Vec<ByteRange>>, host_addr: u64, bytes: u64) -> bool {
        let r = ByteRange::new(host_addr, host_addr + bytes);
        list.lock().unwrap().iter().any(|f| f.overlaps(&r))
    }
}

impl HostCalls for Emulator {
    /// A host write as an emulator does it through its write-watch: with `process_vm_writev`, so
    /// a page it made inaccessible is a failure, not a crash.
    fn write(&self, host_addr: u64, bytes: &[u8]) -> Result<(), HostCallError> {
        {
            let mut log = self.log.lock().unwrap();
            if log.len() < 10_000 {
                log.push(format!("write {host_addr:#x} {}", bytes.len()));
            }
        }
        if Self::fails(&self.fail_write, host_addr, bytes.len() as u64) {
            return Err(HostCallError::Refused(format!(
                "the write-watch refused host {host_addr:#x}"
            )));
        }
        let local = libc::iovec {
            iov_base: bytes.as_ptr() as *mut libc::c_void,
            iov_len: bytes.len(),
        };
        let remote = libc::iovec {
            iov_base: host_addr as *mut libc::c_void,
            iov_len: bytes.len(),
        };
        // SAFETY: both iovecs describe memory valid for the call (the remote one is checked by
        // the kernel, which fails with EFAULT instead of faulting).
        let n = unsafe { libc::process_vm_writev(libc::getpid(), &local, 1, &remote, 1, 0) };
        if n != bytes.len() as isize {
            return Err(HostCallError::Os {
                what: format!("process_vm_writev at {host_addr:#x}"),
                source: std::io::Error::last_os_error(),
            });
        }
        self.bytes_written
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        Ok(())
    }
    fn commit(&self, host_addr: u64, bytes: u64) -> Result<(), HostCallError> {
        self.log
            .lock()
            .unwrap()
            .push(format!("commit {host_addr:#x} {bytes:#x}"));
        if Self::fails(&self.fail_commit, host_addr, bytes) {
            return Err(HostCallError::Refused("out of guest memory".into()));
        }
        Ok(())
    }
    fn release_guards(&self, host_addr: u64, bytes: u64) -> Result<(), HostCallError> {
        self.log
            .lock()
            .unwrap()
            .push(format!("release-guards {host_addr:#x} {bytes:#x}"));
        // SAFETY: the guard the test raised over its own mapping.
        let r = unsafe {
            libc::mprotect(
                host_addr as *mut libc::c_void,
                bytes as usize,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(HostCallError::Os {
                what: format!("mprotect at {host_addr:#x}"),
                source: std::io::Error::last_os_error(),
            })
        }
    }
    fn hand_off(&self, guest: ByteRange, host_addr: u64) -> Result<(), HostCallError> {
        self.log
            .lock()
            .unwrap()
            .push(format!("hand-off {guest} {host_addr:#x}"));
        Ok(())
    }
}

/// An engine in host mode on `ctx`'s device, over `emu`.
pub fn engine(ctx: &Arc<Context>, emu: &Arc<Emulator>) -> Engine<VulkanBackend> {
    let vk = VulkanBackend::on(Arc::clone(ctx)).unwrap();
    let host = Arc::new(ProcessHost::new(Arc::clone(emu)));
    Engine::with_host(DeviceLimits::default(), vk, host).unwrap()
}

/// Reserves `pages` whole at guest `guest`, committed, readable and writable.
pub fn reserve_at(guest: u64, pages: &Pages, backing: Backing) -> Event {
    Event::Reserve {
        range: ByteRange::new(guest, guest + pages.bytes as u64),
        readable: true,
        writable: true,
        committed: true,
        backing,
        host_base: Some(pages.addr()),
    }
}

/// A 4-byte global access at guest `address` (a store of `value`), as the host-mode tests make them.
pub fn access_at(op: Op, address: u64, value: u32) -> Access {
    let mut a = Access::new(AccessKind::Global, op, 4);
    a.pc = 0x4000_0000_0100;
    a.address = Some(address);
    if op == Op::Store {
        a.values = vec![value];
    }
    a
}

/// A device-addressed dispatch (D753) of `accesses`.
pub fn device_dispatch(label: &str, accesses: Vec<Access>) -> DispatchInput {
    DispatchInput {
        program: 0x4000_0000_1000,
        label: label.into(),
        reasons: vec![Reason::D753],
        accesses,
        ..DispatchInput::default()
    }
}
