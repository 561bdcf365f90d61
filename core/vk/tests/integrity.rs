//! Nothing but what the device wrote (issue 39): the host path on a real driver with real `mmap`ed
//! pages, the test playing the emulator, every guest byte checked against what a reference says it
//! must hold.
//!
//! - A guest thread incrementing the words between and beside the device's words across 10^4
//!   dispatches loses nothing: O8 writes exactly the runs the mask marks (no read-modify-write).
//! - A page the emulator cannot read or write is a named failure in the report, never zeros.
//! - An event between prepare and complete that would release, decommit or reprotect what the
//!   prepared dispatch can reach waits (M5): refused by name, listed in the dispatch's report.
//! - Each page change without an event (read-only, `PROT_NONE`, unmapped, remapped shared) is
//!   named by the checked mode before the device touches it: no crash on lavapipe.
//! - M3 by pieces, a failed commit, aliased host ranges, marks on empty slots, a deferred copy
//!   the emulator refuses: each a named refusal or status, nothing lost.
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
use std::sync::atomic::{AtomicBool, Ordering};

use common::{Emulator, PAGE, Pages, context, engine, quiet, reserve_at};
use dispatchscope_core::addr::ByteRange;
use dispatchscope_core::backend::Backend as _;
use dispatchscope_core::engine::{CompleteError, DeviceRun, EngineError, HolderRun, RanOn};
use dispatchscope_core::input::{
    Access, AccessKind, Backing, DispatchInput, Event, Op, Reason, Slot,
};
use dispatchscope_core::report::{
    DispatchReport, EscapeClass, HostFailureKind, LeftOutReason, Mode,
};

const GUEST: u64 = 0x30_0000_0000;

fn device_store(off: u64, value: u32) -> Access {
    let mut a = Access::new(AccessKind::Global, Op::Store, 4);
    a.pc = 0x4000_0000_0100;
    a.address = Some(GUEST + off);
    a.values = vec![value];
    a
}

fn device_dispatch(accesses: Vec<Access>) -> DispatchInput {
    DispatchInput {
        program: 0x4000_0000_1000,
        label: "device-addressed".into(),
        reasons: vec![Reason::D753],
        accesses,
        ..DispatchInput::default()
    }
}

/// A bound dispatch writing through one slot over `bytes` bytes at guest offset `off`.
fn bound(off: u64, bytes: u64) -> DispatchInput {
    DispatchInput {
        program: 0x4000_0000_2000,
        label: "bound".into(),
        slots: vec![Slot::new(0, GUEST + off, bytes, true)],
        ..DispatchInput::default()
    }
}

/// The device's holder: `data` with the words `written` marks set in its mask.
fn holder(bytes: usize, written: impl Fn(usize) -> Option<u32>) -> (Vec<u8>, Vec<u8>) {
    let mut data = vec![0u8; bytes];
    let mut masks = vec![0u8; bytes];
    for w in 0..bytes / 4 {
        if let Some(v) = written(w) {
            data[4 * w..4 * w + 4].copy_from_slice(&v.to_le_bytes());
            masks[4 * w] = 1;
        }
    }
    (data, masks)
}

fn run<'a>(data: &'a [u8], masks: &'a [u8]) -> RanOn<'a> {
    RanOn::Device(DeviceRun {
        holders: vec![HolderRun {
            slot: 0,
            data,
            masks,
        }],
        ..DeviceRun::default()
    })
}

fn left_out(r: &DispatchReport) -> Vec<(ByteRange, LeftOutReason, String)> {
    r.mappings
        .iter()
        .flat_map(|m| m.left_out.iter())
        .map(|l| (l.guest, l.reason, l.detail.clone().unwrap_or_default()))
        .collect()
}

/// The lost update of the issue: a guest thread atomically increments every odd word of a page
/// while 10^4 bound dispatches write every even word of it back through the emulator. Not one
/// increment is lost, and every even word holds the last dispatch's value.
#[test]
fn a_guest_thread_writing_between_the_devices_words_loses_nothing() {
    let Some(ctx) = context() else { return };
    let pages = Arc::new(Pages::map(false, 4 * PAGE));
    let emu = Arc::new(Emulator::default());
    let mut e = engine(&ctx, &emu);
    e.apply(&reserve_at(GUEST, &pages, Backing::Private))
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let guest = {
        let (pages, stop) = (Arc::clone(&pages), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut increments = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // The odd words of page 1, and the words of page 2 beside the holder.
                for w in (1..PAGE / 4).step_by(2) {
                    pages.atomic(PAGE + 4 * w).fetch_add(1, Ordering::SeqCst);
                }
                pages.atomic(2 * PAGE).fetch_add(1, Ordering::SeqCst);
                increments += 1;
            }
            increments
        })
    };
    const DISPATCHES: u32 = 10_000;
    let input = bound(PAGE as u64, PAGE as u64);
    for d in 0..DISPATCHES {
        let (data, masks) = holder(PAGE, |w| (w % 2 == 0).then_some(d ^ w as u32));
        let p = e.prepare(&input).unwrap();
        assert_eq!(p.mode, Mode::Bound);
        let r = e.complete(&input, p, run(&data, &masks)).unwrap();
        assert!(r.host_path.failures.is_empty(), "{:?}", r.host_path);
        assert_eq!(r.counts.words_written_back, PAGE / 8);
    }
    stop.store(true, Ordering::Relaxed);
    let increments = guest.join().unwrap();
    assert!(increments > 0);
    for w in 0..PAGE / 4 {
        let got = pages.word(PAGE + 4 * w);
        let want = if w % 2 == 0 {
            (DISPATCHES - 1) ^ w as u32
        } else {
            increments as u32
        };
        assert_eq!(
            got, want,
            "word {w}: the guest made {increments} increments"
        );
    }
    assert_eq!(
        pages.word(2 * PAGE),
        increments as u32,
        "the word beside the holder"
    );
    assert_eq!(
        emu.bytes_written.load(Ordering::Relaxed),
        u64::from(DISPATCHES) * PAGE as u64 / 2,
        "exactly the written words went to the emulator"
    );
    drop(e);
    quiet(&ctx);
}

/// One page of the holder is `PROT_NONE` and nobody said so: the write-back writes every word it
/// can, reports the one it cannot as lost with its bytes, reports the old values it cannot read as
/// unknown, and writes nothing else (no zeros). The engine's own bound pass, which must upload the
/// holder, is refused naming the page.
#[test]
fn a_page_that_cannot_be_read_or_written_is_a_named_failure_never_zeros() {
    let Some(ctx) = context() else { return };
    let pages = Pages::map(false, 4 * PAGE);
    for w in 0..PAGE {
        pages.set_word(4 * w, 0x5555_0000 + w as u32);
    }
    let emu = Arc::new(Emulator::default());
    let mut e = engine(&ctx, &emu);
    e.apply(&reserve_at(GUEST, &pages, Backing::Private))
        .unwrap();
    pages.protect(PAGE, PAGE, libc::PROT_NONE);
    let input = bound(0, 2 * PAGE as u64);
    // The device wrote word 3 of page 0 and word 5 of page 1.
    let (data, masks) = holder(2 * PAGE, |w| match w {
        3 => Some(0xaaaa_aaaa),
        w if w == PAGE / 4 + 5 => Some(0xbbbb_bbbb),
        _ => None,
    });
    let p = e.prepare(&input).unwrap();
    let r = e.complete(&input, p, run(&data, &masks)).unwrap();
    pages.protect(PAGE, PAGE, libc::PROT_READ | libc::PROT_WRITE);
    assert_eq!(pages.word(12), 0xaaaa_aaaa);
    for w in (0..2 * PAGE / 4).filter(|&w| w != 3) {
        assert_eq!(
            pages.word(4 * w),
            0x5555_0000 + w as u32,
            "word {w} was never the device's"
        );
    }
    let kinds: Vec<HostFailureKind> = r.host_path.failures.iter().map(|f| f.kind).collect();
    assert!(kinds.contains(&HostFailureKind::WriteBack), "{kinds:?}");
    assert!(kinds.contains(&HostFailureKind::OldValue), "{kinds:?}");
    let lost = r
        .host_path
        .failures
        .iter()
        .find(|f| f.kind == HostFailureKind::WriteBack)
        .unwrap();
    let at = GUEST + PAGE as u64 + 20;
    assert_eq!(lost.lost, Some(ByteRange::new(at, at + 4)));
    assert_eq!(lost.bytes, 0xbbbb_bbbbu32.to_le_bytes());
    assert_eq!(lost.error.guest, Some(at));
    let wb = &r.write_back[0];
    let olds: Vec<(u64, Option<u64>)> = wb.words.iter().map(|w| (w.address, w.old)).collect();
    assert_eq!(olds, vec![(GUEST + 12, Some(0x5555_0003)), (at, None)]);
    let lost: Vec<bool> = wb.words.iter().map(|w| w.lost).collect();
    assert_eq!(lost, vec![false, true], "the refused word is named lost");

    // The engine's own pass must upload the holder: refused, naming the guest address.
    pages.protect(PAGE, PAGE, libc::PROT_NONE);
    let mut load = Access::new(AccessKind::UntypedBuffer, Op::Load, 4);
    load.slot = Some(0);
    load.offset = Some(0);
    let own = DispatchInput {
        accesses: vec![load],
        ..bound(0, 2 * PAGE as u64)
    };
    let err = e.dispatch(&own).unwrap_err();
    assert_eq!(
        err.kind(),
        dispatchscope_core::FailureKind::HostCallback,
        "{err}"
    );
    assert!(
        err.to_string()
            .contains(&format!("guest {:#x}", GUEST + PAGE as u64)),
        "{err}"
    );
    pages.protect(PAGE, PAGE, libc::PROT_READ | libc::PROT_WRITE);
    drop(e);
    quiet(&ctx);
}

/// M5: while a dispatch is prepared, a release, decommit, protect, host-protect, set-backing or
/// guard of memory it can reach is refused naming it; nothing changes; its report lists what
/// waited; after complete the event applies. Memory it cannot reach is free to change.
#[test]
fn events_between_prepare_and_complete_wait_for_the_dispatch() {
    let Some(ctx) = context() else { return };
    let pages = Pages::map(false, 4 * PAGE);
    let other = Pages::map(false, PAGE);
    let emu = Arc::new(Emulator::default());
    let mut e = engine(&ctx, &emu);
    e.apply(&reserve_at(GUEST, &pages, Backing::Private))
        .unwrap();
    let other_guest = GUEST + 0x100_0000;
    e.apply(&reserve_at(other_guest, &other, Backing::Private))
        .unwrap();
    let holder_range = ByteRange::new(GUEST + PAGE as u64, GUEST + 2 * PAGE as u64);
    let input = bound(PAGE as u64, PAGE as u64);
    let p = e.prepare(&input).unwrap();
    let index = p.index;
    let waits = [
        Event::Release { base: GUEST },
        Event::Decommit {
            range: holder_range,
        },
        Event::Protect {
            range: holder_range,
            readable: true,
            writable: false,
        },
        Event::Guard {
            range: holder_range,
        },
    ];
    for ev in &waits {
        let err = e.apply(ev).unwrap_err();
        assert!(matches!(err, EngineError::Waits(_)), "{err}");
        assert!(
            err.to_string()
                .contains(&format!("complete (or abandon) dispatch {index}")),
            "{err}"
        );
    }
    // Beside the holder, and another reservation: no wait.
    e.apply(&Event::Guard {
        range: ByteRange::new(GUEST + 3 * PAGE as u64, GUEST + 4 * PAGE as u64),
    })
    .unwrap();
    e.apply(&Event::Release { base: other_guest }).unwrap();
    let (data, masks) = holder(PAGE, |w| (w == 7).then_some(77));
    let r = e.complete(&input, p, run(&data, &masks)).unwrap();
    assert_eq!(r.host_path.waited.len(), waits.len());
    assert_eq!(r.host_path.waited[0].event, "release");
    assert_eq!(r.host_path.waited[0].reached, holder_range);
    assert_eq!(
        pages.word(PAGE + 28),
        77,
        "the write-back landed where it was"
    );
    e.apply(&Event::Release { base: GUEST }).unwrap();

    // A device-addressed dispatch reaches every mapped piece.
    let pages = Pages::map(false, 4 * PAGE);
    e.apply(&reserve_at(GUEST, &pages, Backing::Private))
        .unwrap();
    let input = device_dispatch(vec![device_store(0x10, 1)]);
    let p = e.prepare(&input).unwrap();
    assert_eq!(p.mode, Mode::DeviceAddressed);
    let guard = Event::Guard {
        range: ByteRange::new(GUEST + 3 * PAGE as u64, GUEST + 4 * PAGE as u64),
    };
    if e.backend().device_stores_pass_guards() {
        // NVIDIA's (measured): a device store lands past the guard, so the guard applies now
        // and C1's marks hand the dispatch's stores off at its complete (M5).
        let r = e.apply(&guard).unwrap();
        assert!(
            r.effects
                .iter()
                .any(|x| x.contains("M5") && x.contains("C1's marks hand the stores off")),
            "{r:?}"
        );
    } else {
        // Lavapipe's: the store would kill the process, so the guard waits for the dispatch.
        let err = e.apply(&guard).unwrap_err();
        assert!(err.to_string().contains("device-addressed"), "{err}");
    }
    e.abandon(p.index).unwrap();
    e.apply(&Event::Guard {
        range: ByteRange::new(GUEST + 3 * PAGE as u64, GUEST + 4 * PAGE as u64),
    })
    .unwrap();
    drop(e);
    quiet(&ctx);
}

/// The emulator changes an imported page without an event. With the checked mode on, the next
/// dispatch names what changed and the device never touches the page: on lavapipe each of these
/// would kill the process.
#[test]
fn a_page_changed_without_an_event_is_named_before_the_device_touches_it() {
    let Some(ctx) = context() else { return };
    type Change = fn(&Pages);
    let cases: [(&str, Change); 4] = [
        ("read-only", |p| p.protect(PAGE, PAGE, libc::PROT_READ)),
        ("inaccessible (PROT_NONE)", |p| {
            p.protect(PAGE, PAGE, libc::PROT_NONE)
        }),
        ("no longer mapped", |p| p.unmap(PAGE, PAGE)),
        ("mapped shared", |p| p.remap_shared(PAGE, PAGE)),
    ];
    for (words, change) in cases {
        let pages = Pages::map(false, 4 * PAGE);
        let emu = Arc::new(Emulator::default());
        let mut e = engine(&ctx, &emu);
        e.set_checked(true);
        e.apply(&reserve_at(GUEST, &pages, Backing::Private))
            .unwrap();
        let first = e
            .dispatch(&device_dispatch(vec![device_store(PAGE as u64, 1)]))
            .unwrap();
        assert!(first.escapes.is_empty(), "{words}");
        change(&pages);
        let r = e
            .dispatch(&device_dispatch(vec![
                device_store(PAGE as u64 + 8, 2),
                device_store(3 * PAGE as u64, 3),
            ]))
            .unwrap();
        let check = r
            .host_path
            .checked
            .as_ref()
            .expect("the checked mode looked");
        assert_eq!(check.contradictions.len(), 1, "{words}: {check:?}");
        assert!(
            check.contradictions[0].contains("no event said so"),
            "{}",
            check.contradictions[0]
        );
        let page1 = ByteRange::new(GUEST + PAGE as u64, GUEST + 2 * PAGE as u64);
        let out = left_out(&r);
        assert!(
            out.iter().any(|(g, why, d)| *g == page1
                && *why == LeftOutReason::RealMapping
                && d.contains(words)),
            "{words}: {out:?}"
        );
        assert_eq!(r.escapes.len(), 1, "{words}");
        assert_eq!(r.escapes[0].address, GUEST + PAGE as u64 + 8);
        assert_eq!(r.escapes[0].class, EscapeClass::LeftOut);
        assert_eq!(
            pages.word(3 * PAGE),
            3,
            "{words}: the other pages stay mapped"
        );
        drop(e);
    }
    quiet(&ctx);
}

/// M3 by pieces: a run whose events say read-write but one page of which the process maps
/// `PROT_NONE` maps its good pages; the left-out piece is exactly the bad page, named.
#[test]
fn a_run_with_a_bad_page_maps_its_good_pieces() {
    let Some(ctx) = context() else { return };
    let pages = Pages::map(false, 4 * PAGE);
    pages.protect(2 * PAGE, PAGE, libc::PROT_NONE);
    let emu = Arc::new(Emulator::default());
    let mut e = engine(&ctx, &emu);
    e.apply(&reserve_at(GUEST, &pages, Backing::Private))
        .unwrap();
    let r = e
        .dispatch(&device_dispatch(vec![
            device_store(0x10, 1),
            device_store(2 * PAGE as u64, 2),
            device_store(3 * PAGE as u64, 3),
        ]))
        .unwrap();
    let m = r.mappings.as_ref().unwrap();
    let pieces: Vec<ByteRange> = m.pieces.iter().map(|p| p.guest).collect();
    let bad = ByteRange::new(GUEST + 2 * PAGE as u64, GUEST + 3 * PAGE as u64);
    assert_eq!(
        pieces,
        vec![
            ByteRange::new(GUEST, bad.start),
            ByteRange::new(bad.end, GUEST + 4 * PAGE as u64)
        ]
    );
    let out = left_out(&r);
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!((out[0].0, out[0].1), (bad, LeftOutReason::RealMapping));
    let host_bad = pages.addr() + 2 * PAGE as u64;
    assert!(out[0].2.contains(&format!("{host_bad:#x}")), "{}", out[0].2);
    assert_eq!(pages.word(0x10), 1);
    assert_eq!(pages.word(3 * PAGE), 3);
    assert_eq!(r.escapes.len(), 1);
    pages.protect(2 * PAGE, PAGE, libc::PROT_READ | libc::PROT_WRITE);
    drop(e);
    quiet(&ctx);
}

/// A commit the emulator refuses for one reservation leaves that reservation out by name; a
/// dispatch that needs only the other runs, and its stores land.
#[test]
fn a_failed_commit_refuses_only_what_needs_it() {
    let Some(ctx) = context() else { return };
    let good = Pages::map(false, 2 * PAGE);
    let lazy = Pages::map(false, 2 * PAGE);
    let emu = Arc::new(Emulator::default());
    emu.fail_commit
        .lock()
        .unwrap()
        .push(ByteRange::new(lazy.addr(), lazy.addr() + 2 * PAGE as u64));
    let mut e = engine(&ctx, &emu);
    e.apply(&reserve_at(GUEST, &good, Backing::Private))
        .unwrap();
    let lazy_guest = GUEST + 0x10_0000;
    let mut ev = reserve_at(lazy_guest, &lazy, Backing::Private);
    if let Event::Reserve { committed, .. } = &mut ev {
        *committed = false;
    }
    e.apply(&ev).unwrap();
    let mut stray = device_store(0, 9);
    stray.address = Some(lazy_guest);
    let r = e
        .dispatch(&device_dispatch(vec![device_store(0x20, 5), stray]))
        .unwrap();
    assert_eq!(good.word(0x20), 5);
    let out = left_out(&r);
    assert!(
        out.iter().any(|(g, why, d)| g.start == lazy_guest
            && *why == LeftOutReason::HostCallback
            && d.contains("out of guest memory")),
        "{out:?}"
    );
    assert_eq!(r.escapes.len(), 1);
    assert_eq!(r.escapes[0].reason, Some(LeftOutReason::HostCallback));
    drop(e);
    quiet(&ctx);
}

/// Two reservations over the same host pages are refused, naming the other; marks on an empty
/// table slot are refused, naming the slot; a deferred copy the emulator refuses stays deferred
/// and lands at the next dispatch.
#[test]
fn bad_input_is_named_and_nothing_is_lost() {
    let Some(ctx) = context() else { return };
    let pages = Pages::map(false, 4 * PAGE);
    let emu = Arc::new(Emulator::default());
    let mut e = engine(&ctx, &emu);
    e.apply(&reserve_at(GUEST, &pages, Backing::Private))
        .unwrap();
    let alias = Event::Reserve {
        range: ByteRange::new(GUEST + 0x100_0000, GUEST + 0x100_0000 + PAGE as u64),
        readable: true,
        writable: true,
        committed: true,
        backing: Backing::Private,
        host_base: Some(pages.addr() + 2 * PAGE as u64),
    };
    let err = e.apply(&alias).unwrap_err().to_string();
    assert!(
        err.contains(&format!(
            "the reservation at {}",
            ByteRange::new(GUEST, GUEST + 4 * PAGE as u64)
        )),
        "{err}"
    );

    // Marks on an empty slot: the helper could not have made them.
    let input = device_dispatch(vec![device_store(0x10, 1)]);
    let p = e.prepare(&input).unwrap();
    let slots = p.device.as_ref().unwrap().mark_words as usize;
    let table = e.table().unwrap();
    let empty = (0..slots).find(|&i| table.slots()[i].is_empty()).unwrap();
    let mut marks = vec![0u32; slots];
    marks[empty] = 3;
    let err = e
        .complete(
            &input,
            p.clone(),
            RanOn::Device(DeviceRun {
                marks: Some(&marks),
                ..DeviceRun::default()
            }),
        )
        .unwrap_err();
    assert!(
        matches!(
            err,
            EngineError::Complete(CompleteError::MarkOnEmptySlot { .. })
        ),
        "{err}"
    );
    e.abandon(p.index).unwrap();

    // A deferred copy whose write the emulator refuses stays deferred.
    let refused = ByteRange::new(pages.addr() + 0x100, pages.addr() + 0x104);
    emu.fail_write.lock().unwrap().push(refused);
    e.apply(&Event::DeferCopy {
        address: GUEST + 0x100,
        bytes: vec![1, 2, 3, 4],
    })
    .unwrap();
    let err = e.dispatch(&input).unwrap_err();
    assert_eq!(err.kind(), dispatchscope_core::FailureKind::HostCallback);
    assert!(err.to_string().contains("stay deferred"), "{err}");
    assert_eq!(e.memory().deferred_copies().len(), 1);
    assert_eq!(pages.word(0x100), 0);
    emu.fail_write.lock().unwrap().clear();
    let r = e.dispatch(&input).unwrap();
    assert_eq!(
        r.before.copies,
        vec![ByteRange::new(GUEST + 0x100, GUEST + 0x104)]
    );
    assert_eq!(pages.word(0x100), u32::from_le_bytes([1, 2, 3, 4]));
    drop(e);
    quiet(&ctx);
}
