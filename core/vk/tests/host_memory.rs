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

mod common;

use std::sync::Arc;

use common::{Emulator, PAGE, Pages, context, engine, quiet};
use dispatchscope_core::addr::ByteRange;
use dispatchscope_core::engine::Engine;
use dispatchscope_core::input::{
    Access, AccessKind, Backing, DeviceLimits, DispatchInput, Event, HostProtection, Op,
};
use dispatchscope_core::report::{DispatchReport, EscapeClass, LeftOutReason, Mode};
use dispatchscope_vk::VulkanBackend;
use dispatchscope_vk::host_pages::{MapsSource, ProcessHost};

const GUEST: u64 = 0x20_0000_0000;
const BYTES: usize = 0x10000;

fn reserve(pages: &Pages, backing: Backing) -> Event {
    common::reserve_at(GUEST, pages, backing)
}

fn access(op: Op, off: u64, value: u32) -> Access {
    common::access_at(op, GUEST + off, value)
}

fn device_dispatch(accesses: Vec<Access>) -> DispatchInput {
    common::device_dispatch("host mode", accesses)
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
    let pages = Pages::map(false, BYTES);
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
    let pages = Pages::map(false, BYTES);
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
    let pages = Pages::map(false, BYTES);
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
    let pages = Pages::map(true, BYTES);
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
        let pages = Pages::map(true, BYTES);
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
    let pages = Pages::map(false, BYTES);
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
