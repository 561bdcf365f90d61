//! Host mode on a real driver with real pages (issue 29): the engine's guest memory is this test's
//! own `mmap`ed pages, imported zero-copy; the test plays the emulator (its write-watch guards are
//! real `mprotect`s, its calls are [`HostCalls`]).
//!
//! What must hold, on lavapipe with the validation layer on and not one message: a device store
//! through the helper lands in the host's own page with no copy either way; a page the host made
//! read-only after it was mapped is dropped before the next dispatch, so the store escapes instead
//! of killing the process (lavapipe's SIGSEGV); a write-watch guard raised over a mapped page is
//! released through the emulator before the device stores; a `MAP_SHARED` page is left out by
//! name; a page whose events say private but whose real mapping is shared is refused by name
//! before the driver sees it.
//!
//! Where `DISPATCHSCOPE_REQUIRE_VULKAN=1` (CI), a machine with no Vulkan device fails these tests.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    unsafe_code,
    reason = "tests: a panic is the test failing; the test is the emulator, so it maps and protects its own pages"
)]

use std::sync::{Arc, Mutex, OnceLock};

use dispatchscope_core::addr::ByteRange;
use dispatchscope_core::engine::Engine;
use dispatchscope_core::input::{
    Access, AccessKind, Backing, DeviceLimits, DispatchInput, Event, HostProtection, Op, Reason,
};
use dispatchscope_core::report::{DispatchReport, EscapeClass, LeftOutReason, Mode};
use dispatchscope_vk::host_pages::{HostCalls, MapsSource, ProcessHost};
use dispatchscope_vk::{Context, ContextOptions, VkError, VulkanBackend};

const GUEST: u64 = 0x20_0000_0000;
const BYTES: usize = 0x10000;
const PAGE: usize = 0x1000;

fn required() -> bool {
    std::env::var("DISPATCHSCOPE_REQUIRE_VULKAN").is_ok_and(|v| v == "1")
}

fn context() -> Option<Arc<Context>> {
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

/// A real mapping of `BYTES` bytes, unmapped on drop.
struct Pages {
    ptr: *mut u8,
}

// SAFETY: the test owns the mapping; the engine reads it through process_vm_readv only.
unsafe impl Send for Pages {}
unsafe impl Sync for Pages {}

impl Pages {
    fn map(shared: bool) -> Self {
        let flags = if shared {
            libc::MAP_SHARED | libc::MAP_ANONYMOUS
        } else {
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE
        };
        // SAFETY: a fresh anonymous mapping.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                -1,
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED);
        Self { ptr: ptr.cast() }
    }

    fn addr(&self) -> u64 {
        self.ptr as u64
    }

    fn word(&self, off: usize) -> u32 {
        let mut w = [0u8; 4];
        // SAFETY: off + 4 <= BYTES and the page is readable in every test that reads it.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(off), w.as_mut_ptr(), 4) };
        u32::from_le_bytes(w)
    }

    fn set_word(&self, off: usize, v: u32) {
        // SAFETY: as above, and the page is writable.
        unsafe { std::ptr::copy_nonoverlapping(v.to_le_bytes().as_ptr(), self.ptr.add(off), 4) };
    }

    fn protect(&self, off: usize, len: usize, prot: i32) {
        // SAFETY: a page-aligned part of this mapping.
        let r = unsafe { libc::mprotect(self.ptr.add(off).cast(), len, prot) };
        assert_eq!(r, 0);
    }
}

impl Drop for Pages {
    fn drop(&mut self) {
        // SAFETY: the mapping this made; every engine over it is dropped first.
        unsafe { libc::munmap(self.ptr.cast(), BYTES) };
    }
}

/// The emulator's side: what the engine asked of it.
#[derive(Default)]
struct Emulator {
    log: Mutex<Vec<String>>,
}

impl HostCalls for Emulator {
    fn write(&self, host_addr: u64, bytes: &[u8]) -> Result<(), String> {
        self.log
            .lock()
            .unwrap()
            .push(format!("write {host_addr:#x} {}", bytes.len()));
        // SAFETY: the engine writes only into reservations whose host pages this test mapped
        // read-write.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), host_addr as *mut u8, bytes.len());
        }
        Ok(())
    }
    fn commit(&self, host_addr: u64, bytes: u64) -> Result<(), String> {
        self.log
            .lock()
            .unwrap()
            .push(format!("commit {host_addr:#x} {bytes:#x}"));
        Ok(())
    }
    fn release_guards(&self, host_addr: u64, bytes: u64) -> Result<(), String> {
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
            Err(std::io::Error::last_os_error().to_string())
        }
    }
    fn hand_off(&self, guest: ByteRange, host_addr: u64) -> Result<(), String> {
        self.log
            .lock()
            .unwrap()
            .push(format!("hand-off {guest} {host_addr:#x}"));
        Ok(())
    }
}

fn engine(ctx: &Arc<Context>, emu: &Arc<Emulator>) -> Engine<VulkanBackend> {
    let vk = VulkanBackend::on(Arc::clone(ctx)).unwrap();
    let host = Arc::new(ProcessHost::new(Arc::clone(emu)));
    Engine::with_host(DeviceLimits::default(), vk, host).unwrap()
}

fn reserve(pages: &Pages, backing: Backing) -> Event {
    Event::Reserve {
        range: ByteRange::new(GUEST, GUEST + BYTES as u64),
        readable: true,
        writable: true,
        committed: true,
        backing,
        host_base: Some(pages.addr()),
    }
}

fn access(op: Op, off: u64, value: u32) -> Access {
    let mut a = Access::new(AccessKind::Global, op, 4);
    a.pc = 0x4000_0000_0100;
    a.address = Some(GUEST + off);
    if op == Op::Store {
        a.values = vec![value];
    }
    a
}

fn device_dispatch(accesses: Vec<Access>) -> DispatchInput {
    DispatchInput {
        program: 0x4000_0000_1000,
        label: "host mode".into(),
        reasons: vec![Reason::D753],
        accesses,
        ..DispatchInput::default()
    }
}

fn quiet(ctx: &Context) {
    assert_eq!(
        ctx.validation_messages(),
        0,
        "the validation layer spoke:\n{}",
        ctx.validation_text().join("\n")
    );
}

fn escapes_at(r: &DispatchReport) -> Vec<(u64, EscapeClass, Option<LeftOutReason>)> {
    r.escapes
        .iter()
        .map(|e| (e.address, e.class, e.reason))
        .collect()
}

#[test]
fn a_device_store_lands_in_the_hosts_own_page_with_nothing_copied() {
    let Some(ctx) = context() else { return };
    let pages = Pages::map(false);
    pages.set_word(0x40, 0x1234_5678);
    let emu = Arc::new(Emulator::default());
    let mut e = engine(&ctx, &emu);
    e.apply(&reserve(&pages, Backing::Private)).unwrap();
    let input = device_dispatch(vec![
        access(Op::Load, 0x40, 0),
        access(Op::Store, 0x1230, 0xdead_beef),
    ]);
    let r = e.dispatch(&input).unwrap();
    assert_eq!(r.mode, Mode::DeviceAddressed);
    assert!(r.escapes.is_empty(), "{:?}", escapes_at(&r));
    assert_eq!(
        r.accesses[0].values,
        vec![0x1234_5678],
        "the device read the host's page"
    );
    assert_eq!(
        pages.word(0x1230),
        0xdead_beef,
        "the store is in the host's page"
    );
    let t = e.backend().import_time();
    assert_eq!(t.bytes_copied, 0, "no mirror, no copy back");
    assert_eq!(t.zero_copy, 1);
    let traffic = e.memory().host_traffic();
    assert_eq!(traffic.bytes_written, 0);
    assert_eq!(r.marks.len(), 1);
    let log = emu.log.lock().unwrap().join("\n");
    assert!(log.contains("hand-off"), "C2 reached the emulator:\n{log}");
    assert!(
        !log.contains("write"),
        "nothing written through the emulator:\n{log}"
    );
    assert_eq!(e.mappings().real_checks(), 1);
    drop(e);
    quiet(&ctx);
}

#[test]
fn a_page_made_read_only_after_mapping_is_dropped_and_the_store_escapes() {
    let Some(ctx) = context() else { return };
    let pages = Pages::map(false);
    let emu = Arc::new(Emulator::default());
    let mut e = engine(&ctx, &emu);
    e.apply(&reserve(&pages, Backing::Private)).unwrap();
    let first = e
        .dispatch(&device_dispatch(vec![access(Op::Store, 0x2000, 1)]))
        .unwrap();
    assert!(first.escapes.is_empty());
    assert_eq!(pages.word(0x2000), 1);
    // The host lowers page 2 to read-only and says so; lavapipe would kill the process if the
    // device stored through the old import.
    pages.protect(0x2000, PAGE, libc::PROT_READ);
    e.apply(&Event::HostProtect {
        range: ByteRange::new(GUEST + 0x2000, GUEST + 0x3000),
        protection: HostProtection::Read,
    })
    .unwrap();
    let second = e
        .dispatch(&device_dispatch(vec![
            access(Op::Store, 0x2010, 2),
            access(Op::Store, 0x3000, 3),
        ]))
        .unwrap();
    assert_eq!(
        escapes_at(&second),
        vec![(
            GUEST + 0x2010,
            EscapeClass::LeftOut,
            Some(LeftOutReason::NotReadWrite)
        )]
    );
    assert_eq!(pages.word(0x2010), 0, "the store did not land");
    assert_eq!(pages.word(0x3000), 3, "the page beside it is still mapped");
    pages.protect(0x2000, PAGE, libc::PROT_READ | libc::PROT_WRITE);
    drop(e);
    quiet(&ctx);
}

#[test]
fn a_guard_raised_over_a_mapped_page_is_released_through_the_emulator_first() {
    let Some(ctx) = context() else { return };
    let pages = Pages::map(false);
    let emu = Arc::new(Emulator::default());
    let mut e = engine(&ctx, &emu);
    e.apply(&reserve(&pages, Backing::Private)).unwrap();
    e.dispatch(&device_dispatch(vec![access(Op::Load, 0, 0)]))
        .unwrap();
    // The write-watch guards page 4 (a real read-only protection) after it was mapped.
    pages.protect(0x4000, PAGE, libc::PROT_READ);
    e.apply(&Event::Guard {
        range: ByteRange::new(GUEST + 0x4000, GUEST + 0x5000),
    })
    .unwrap();
    let r = e
        .dispatch(&device_dispatch(vec![access(Op::Store, 0x4004, 7)]))
        .unwrap();
    assert!(r.escapes.is_empty());
    assert_eq!(pages.word(0x4004), 7, "the store landed; the process lives");
    let log = emu.log.lock().unwrap().join("\n");
    assert!(
        log.contains(&format!(
            "release-guards {:#x} 0x1000",
            pages.addr() + 0x4000
        )),
        "{log}"
    );
    assert!(
        e.memory()
            .page_at(GUEST + 0x4000)
            .is_some_and(|p| !p.guarded && p.written),
        "M2: released and noted written"
    );
    drop(e);
    quiet(&ctx);
}

#[test]
fn a_shared_page_is_left_out_by_name() {
    let Some(ctx) = context() else { return };
    let pages = Pages::map(true);
    let emu = Arc::new(Emulator::default());
    let mut e = engine(&ctx, &emu);
    e.apply(&reserve(&pages, Backing::Shared)).unwrap();
    let r = e
        .dispatch(&device_dispatch(vec![access(Op::Store, 0x100, 5)]))
        .unwrap();
    let m = r.mappings.as_ref().unwrap();
    assert!(m.pieces.is_empty());
    assert_eq!(m.left_out[0].reason, LeftOutReason::NotPrivate);
    assert_eq!(
        escapes_at(&r),
        vec![(
            GUEST + 0x100,
            EscapeClass::LeftOut,
            Some(LeftOutReason::NotPrivate)
        )]
    );
    assert_eq!(pages.word(0x100), 0);
    assert_eq!(e.backend().n_imports(), 0, "the driver never saw it");
    drop(e);
    quiet(&ctx);
}

/// The events say private, the kernel says shared: refused by name before the driver sees it, by
/// either way of asking the kernel.
#[test]
fn a_page_the_events_call_private_but_is_shared_is_refused_by_name() {
    let Some(ctx) = context() else { return };
    for source in [MapsSource::Query, MapsSource::Text] {
        let pages = Pages::map(true);
        let emu = Arc::new(Emulator::default());
        let vk = VulkanBackend::on(Arc::clone(&ctx)).unwrap();
        let host = Arc::new(ProcessHost::with_source(Arc::clone(&emu), source));
        let mut e = Engine::with_host(DeviceLimits::default(), vk, host).unwrap();
        e.apply(&reserve(&pages, Backing::Private)).unwrap();
        let r = e
            .dispatch(&device_dispatch(vec![access(Op::Store, 0x100, 5)]))
            .unwrap();
        let m = r.mappings.as_ref().unwrap();
        if source == MapsSource::Query
            && dispatchscope_vk::host_pages::preferred_source() != MapsSource::Query
        {
            eprintln!("note: this kernel has no PROCMAP_QUERY; the text was read instead");
        }
        assert!(m.pieces.is_empty(), "{source:?}");
        assert_eq!(m.left_out[0].reason, LeftOutReason::RealMapping);
        let detail = m.left_out[0].detail.clone().unwrap_or_default();
        assert!(
            detail.contains("shared, although the events say private"),
            "{detail}"
        );
        assert!(detail.contains("RADV refuses shared"), "{detail}");
        assert_eq!(
            escapes_at(&r),
            vec![(
                GUEST + 0x100,
                EscapeClass::LeftOut,
                Some(LeftOutReason::RealMapping)
            )]
        );
        assert_eq!(pages.word(0x100), 0);
        assert_eq!(e.backend().n_imports(), 0, "the driver never saw it");
    }
    quiet(&ctx);
}

/// A bound dispatch in host mode reads its holder from the host's pages and writes back only the
/// words its stores set, through the emulator (O8), and a reservation without a host base is
/// refused by name.
#[test]
fn bound_holders_read_and_write_back_through_the_emulator() {
    let Some(ctx) = context() else { return };
    let pages = Pages::map(false);
    pages.set_word(0x10, 0xaaaa_aaaa);
    pages.set_word(0x14, 0xbbbb_bbbb);
    let emu = Arc::new(Emulator::default());
    let mut e = engine(&ctx, &emu);
    let no_base = Event::Reserve {
        range: ByteRange::new(GUEST, GUEST + BYTES as u64),
        readable: true,
        writable: true,
        committed: true,
        backing: Backing::Private,
        host_base: None,
    };
    let err = e.apply(&no_base).unwrap_err().to_string();
    assert!(err.contains("needs the host address"), "{err}");
    e.apply(&reserve(&pages, Backing::Private)).unwrap();
    let slot = dispatchscope_core::input::Slot::new(0, GUEST, 0x100, true);
    let mut load = Access::new(AccessKind::UntypedBuffer, Op::Load, 4);
    load.slot = Some(0);
    load.offset = Some(0x10);
    let mut store = Access::new(AccessKind::UntypedBuffer, Op::Store, 4);
    store.slot = Some(0);
    store.offset = Some(0x14);
    store.values = vec![0x0102_0304];
    let input = DispatchInput {
        program: 0x4000_0000_2000,
        slots: vec![slot],
        accesses: vec![load, store],
        ..DispatchInput::default()
    };
    let r = e.dispatch(&input).unwrap();
    assert_eq!(r.mode, Mode::Bound);
    assert_eq!(r.accesses[0].values, vec![0xaaaa_aaaa]);
    assert_eq!(pages.word(0x14), 0x0102_0304);
    assert_eq!(pages.word(0x10), 0xaaaa_aaaa);
    let log = emu.log.lock().unwrap().join("\n");
    assert!(
        log.contains(&format!("write {:#x} 4", pages.addr() + 0x14)),
        "{log}"
    );
    drop(e);
    quiet(&ctx);
}
