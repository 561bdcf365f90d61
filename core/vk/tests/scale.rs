//! A PS5's memory on a real driver (issue 41): 16 GiB of the test's own pages, reserved committed
//! read-write but never touched (`MAP_NORESERVE`, committed lazily as an emulator's heap is),
//! imported zero-copy in pieces within the device's limits (lavapipe allocates at most 2 GiB at
//! once; one import of the whole run would be refused), read and written by device address at
//! both ends; then one page made read-only by the emulator and back, each costing the table one
//! slot, the device one slot's bytes and the driver nothing.
//!
//! Where `DISPATCHSCOPE_REQUIRE_VULKAN=1` (CI), a machine with no Vulkan device fails this test.

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
use dispatchscope_core::backend::Backend;
use dispatchscope_core::chunk_table::{MAX_CHUNK_BYTES, SLOT_BYTES};
use dispatchscope_core::input::{Access, Backing, DispatchInput, Event, HostProtection, Op};
use dispatchscope_core::report::{EscapeClass, Mode};

const GUEST: u64 = 0x1_0000_0000;
const BYTES: usize = 16 << 30;

fn access(op: Op, off: u64, value: u32) -> Access {
    common::access_at(op, GUEST + off, value)
}

fn device_dispatch(accesses: Vec<Access>) -> DispatchInput {
    common::device_dispatch("16 GiB", accesses)
}

#[test]
fn sixteen_gib_imports_in_pieces_and_a_page_toggle_costs_one_slot() {
    let Some(ctx) = context() else { return };
    let pages = Pages::map(false, BYTES);
    let last = (BYTES - PAGE) as u64;
    pages.set_word(0x40, 0x1234_5678);
    pages.set_word(last as usize + 0x10, 0x8765_4321);
    let emu = Arc::new(Emulator::default());
    let mut e = engine(&ctx, &emu);
    e.apply(&common::reserve_at(GUEST, &pages, Backing::Private))
        .unwrap();
    let r = e
        .dispatch(&device_dispatch(vec![
            access(Op::Load, 0x40, 0),
            access(Op::Load, last + 0x10, 0),
            access(Op::Store, last + 0x20, 0xfeed_f00d),
            access(Op::Store, 0x3_0000_0000 + 0x80, 0x0bad_cafe),
        ]))
        .unwrap();
    assert_eq!(r.mode, Mode::DeviceAddressed);
    assert!(r.escapes.is_empty(), "{:?}", r.escapes);
    assert!(
        r.host_path.failures.is_empty(),
        "{:?}",
        r.host_path.failures
    );
    assert_eq!(r.accesses[0].values, vec![0x1234_5678]);
    assert_eq!(r.accesses[1].values, vec![0x8765_4321]);
    assert_eq!(pages.word(last as usize + 0x20), 0xfeed_f00d);
    assert_eq!(pages.word(0x3_0000_0000 + 0x80), 0x0bad_cafe);
    // In pieces within the driver's limit, each on a boundary of its size: the report lists them.
    let m = r.mappings.as_ref().unwrap();
    let limit = e.backend().max_import_bytes();
    assert!(limit < BYTES as u64, "an import holds at most {limit:#x}");
    assert_eq!(m.pieces.len() as u64, BYTES as u64 / limit);
    for p in &m.pieces {
        assert!(p.guest.size_bytes() <= limit, "{}", p.guest);
        assert_eq!(p.guest.start % limit, 0, "{}", p.guest);
    }
    let t = r.table.as_ref().unwrap();
    assert_eq!(t.chunk_bytes, MAX_CHUNK_BYTES);
    assert_eq!(t.n_chunks, BYTES as u64 / MAX_CHUNK_BYTES);

    // The emulator makes one page read-only, then read-write again.
    let page = 0x2_4680_1000u64;
    let range = ByteRange::new(GUEST + page, GUEST + page + PAGE as u64);
    for (prot, protection, escapes) in [
        (libc::PROT_READ, HostProtection::Read, true),
        (
            libc::PROT_READ | libc::PROT_WRITE,
            HostProtection::ReadWrite,
            false,
        ),
    ] {
        pages.protect(page as usize, PAGE, prot);
        e.apply(&Event::HostProtect { range, protection }).unwrap();
        let uploaded = e.backend().table_bytes_uploaded();
        let r = e
            .dispatch(&device_dispatch(vec![
                access(Op::Store, page + 8, 7),
                access(Op::Load, page + PAGE as u64 + 8, 0),
            ]))
            .unwrap();
        let t = r.table.as_ref().unwrap();
        let m = r.mappings.as_ref().unwrap();
        assert_eq!(t.rebuilt, None);
        assert_eq!(t.inserted + t.removed, 1, "one slot's reach changed");
        assert_eq!(
            e.backend().table_bytes_uploaded() - uploaded,
            SLOT_BYTES as u64,
            "the device got that slot alone"
        );
        assert_eq!(
            (m.imports_made, m.imports_dropped),
            (0, 0),
            "the driver was not asked"
        );
        assert_eq!(r.accesses[0].escaped, escapes);
        if escapes {
            assert_eq!(r.escapes[0].class, EscapeClass::LeftOut);
            assert_eq!(
                pages.word(page as usize + 8),
                0,
                "nothing stored in the read-only page"
            );
        } else {
            assert_eq!(pages.word(page as usize + 8), 7);
        }
        assert!(!r.accesses[1].escaped, "the next page stayed mapped");
    }
    drop(e);
    quiet(&ctx);
}
