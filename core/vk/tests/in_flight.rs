//! Many dispatches in flight (issue 40) on a real driver with real `mmap`ed pages, the test
//! playing the emulator and its device:
//!
//! - 1,024 dispatches prepared before the first completes, bound and device-addressed mixed,
//!   chained through the words earlier ones write: each bound holder is filled as the emulator's
//!   command buffer fills it (its upload, then the carries it was handed), the "program" adds one
//!   to every word it reads, and after completing all in order every guest word equals a plain
//!   sequential run's.
//! - M5 with many in flight names the newest dispatch that reaches the bytes, and the event
//!   applies once that one has completed.
//! - A device-addressed dispatch in flight keeps the table copy and the mark words it was handed:
//!   a later prepare that grows the table writes another copy, and the first dispatch's marks,
//!   completed after the grow, still name the chunk it stored to.
//! - A lost device names every dispatch in flight; nothing more is prepared.
//!
//! Where `DISPATCHSCOPE_REQUIRE_VULKAN=1` (CI), a machine with no Vulkan device fails these tests.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    unsafe_code,
    reason = "tests: a panic is the test failing; the test is the emulator, so it maps its own pages"
)]

mod common;

use std::sync::Arc;

use common::{Emulator, PAGE, Pages, context, engine, quiet, reserve_at};
use dispatchscope_core::addr::ByteRange;
use dispatchscope_core::engine::{
    CarryFrom, DeviceFault, DeviceRun, EngineError, HolderRun, MAX_IN_FLIGHT, PrepareOptions,
    Prepared, RanOn,
};
use dispatchscope_core::input::{
    Access, AccessKind, Backing, DispatchInput, Event, Op, Reason, Slot,
};
use dispatchscope_core::report::{FaultLands, Mode};

const GUEST: u64 = 0x40_0000_0000;
/// Words of the chained region.
const WORDS: usize = 4 * PAGE / 4;

/// A bound dispatch reading and writing `words` words at word `first` of the region.
fn bound(first: usize, words: usize) -> DispatchInput {
    DispatchInput {
        program: 0x5000_0000_2000,
        label: format!("bound {first}+{words}"),
        slots: vec![Slot::new(
            0,
            GUEST + 4 * first as u64,
            4 * words as u64,
            true,
        )],
        ..DispatchInput::default()
    }
}

/// A device-addressed dispatch (its accesses are the device's business, not the input's).
fn device(label: &str) -> DispatchInput {
    DispatchInput {
        program: 0x5000_0000_1000,
        label: label.into(),
        reasons: vec![Reason::D753],
        ..DispatchInput::default()
    }
}

/// A dispatch recorded into the frame's command buffer: what it does when the device runs it.
enum Recorded {
    /// A device-addressed pass: one word a thousand higher, in place.
    InPlace { word: usize },
    /// A bound pass over a copy holder: its upload (made when it was recorded, from guest
    /// memory as the CPU saw it then); the carries it was handed are its `Prepared`'s.
    Bound { upload: Vec<u8> },
    /// A bound pass whose holder is the guest's own pages: words `first..first + words`, each
    /// one higher, in place.
    InPlaceHolder { first: usize, words: usize },
}

/// A bound dispatch's holder after the device ran it.
struct Ran {
    data: Vec<u8>,
    masks: Vec<u8>,
}

type Frame = Vec<(DispatchInput, Prepared, Recorded)>;

#[test]
fn a_thousand_dispatches_in_flight_chained_complete_to_a_sequential_runs_words() {
    let Some(ctx) = context() else { return };
    let pages = Pages::map(false, 4 * PAGE);
    let emu = Arc::new(Emulator::default());
    let mut e = engine(&ctx, &emu);
    e.apply(&reserve_at(GUEST, &pages, Backing::Private))
        .unwrap();
    for w in 0..WORDS {
        pages.set_word(4 * w, w as u32);
    }
    // The reference: every dispatch in order on one memory, each bound one adding one to the
    // words it covers, each device-addressed one adding 1,000 to one word.
    let mut reference: Vec<u32> = (0..WORDS as u32).collect();
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: usize| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng % n as u64) as usize
    };
    let mut frame: Frame = Vec::new();
    let mut most_in_flight = 0;
    let mut carries_seen = (0, 0);
    let n = 1_024;
    assert!(n <= MAX_IN_FLIGHT);
    let mut waits = 0;
    for i in 0..n {
        // The first half bound alone, over copy holders (frames of hundreds in flight, chained by
        // holder carries); the second half with a device-addressed pass every eighth dispatch, and copy
        // holders rarer (a device-addressed pass after a copy holder it reaches waits).
        let second_half = i >= n / 2;
        let input = if second_half && i % 8 == 3 {
            device(&format!("device {i}"))
        } else {
            let first = next(WORDS - 64);
            bound(first, 1 + next(63))
        };
        let in_place: &[u32] = if second_half && i % 16 != 5 {
            &[0]
        } else {
            &[]
        };
        let options = PrepareOptions { in_place };
        let p = match e.prepare_with(&input, options) {
            Ok(p) => p,
            // A device-addressed dispatch after a copy holder whose bytes it reaches in place
            // waits: submit what was recorded, wait, complete it all, and prepare again.
            Err(EngineError::ChainWaits(w)) => {
                assert!(w.waits_for < i as u64);
                waits += 1;
                run_and_complete(&mut e, &pages, &mut frame, &mut carries_seen);
                e.prepare_with(&input, options).unwrap()
            }
            Err(err) => panic!("dispatch {i}: {err}"),
        };
        let recorded = match p.mode {
            Mode::DeviceAddressed => {
                let word = (i * 7) % WORDS;
                reference[word] = reference[word].wrapping_add(1_000);
                Recorded::InPlace { word }
            }
            Mode::Bound => {
                let plan = p.holder(0).unwrap();
                let first = ((plan.buffer.start - GUEST) / 4) as usize;
                let words = (plan.buffer.size_bytes() / 4) as usize;
                for k in 0..words {
                    reference[first + k] = reference[first + k].wrapping_add(1);
                }
                if in_place.is_empty() {
                    let mut upload = Vec::with_capacity(4 * words);
                    for k in 0..words {
                        upload.extend_from_slice(&pages.word(4 * (first + k)).to_le_bytes());
                    }
                    Recorded::Bound { upload }
                } else {
                    assert!(p.carries.is_empty(), "an in-place holder reads in place");
                    Recorded::InPlaceHolder { first, words }
                }
            }
            Mode::Refused => panic!("dispatch {i} refused: {:?}", p.refusals),
        };
        frame.push((input, p, recorded));
        most_in_flight = most_in_flight.max(e.in_flight());
    }
    run_and_complete(&mut e, &pages, &mut frame, &mut carries_seen);
    assert!(
        most_in_flight > 100,
        "many in flight at once: {most_in_flight}"
    );
    assert!(
        carries_seen.0 > 0 && carries_seen.1 > 0,
        "both kinds of carry were exercised: {carries_seen:?}"
    );
    assert!(
        waits > 0,
        "a device-addressed pass after a copy holder waited"
    );
    let mismatches = (0..WORDS)
        .filter(|&w| pages.word(4 * w) != reference[w])
        .count();
    assert_eq!(mismatches, 0, "every word as a sequential run leaves it");
    drop(e);
    quiet(&ctx);
}

/// The submission and its fence: the device runs the recorded dispatches in order (an in-place
/// store lands in guest memory at once; a bound holder is its upload with the carries laid over,
/// read from guest memory or from the earlier holders as the device has them then, and its
/// program adds one to every word), then every dispatch is completed in order, each bound one
/// written back from its holder and mask.
fn run_and_complete(
    e: &mut dispatchscope_core::Engine<dispatchscope_vk::VulkanBackend>,
    pages: &Pages,
    frame: &mut Frame,
    carries_seen: &mut (usize, usize),
) {
    let mut ran: Vec<(u64, Option<Ran>)> = Vec::with_capacity(frame.len());
    for (_, p, recorded) in frame.iter() {
        let r = match recorded {
            Recorded::InPlace { word } => {
                pages.set_word(4 * word, pages.word(4 * word).wrapping_add(1_000));
                None
            }
            Recorded::InPlaceHolder { first, words } => {
                for k in *first..first + words {
                    pages.set_word(4 * k, pages.word(4 * k).wrapping_add(1));
                }
                None
            }
            Recorded::Bound { upload } => {
                let mut data = upload.clone();
                for c in &p.carries {
                    let (at, len) = (c.offset as usize, c.bytes as usize);
                    match c.from {
                        CarryFrom::Guest { guest, .. } => {
                            carries_seen.0 += 1;
                            let g = (guest - GUEST) as usize;
                            for k in 0..len / 4 {
                                data[at + 4 * k..at + 4 * k + 4]
                                    .copy_from_slice(&pages.word(g + 4 * k).to_le_bytes());
                            }
                        }
                        CarryFrom::Holder {
                            dispatch,
                            slot,
                            offset,
                        } => {
                            carries_seen.1 += 1;
                            assert_eq!(slot, 0);
                            let from = ran
                                .iter()
                                .find(|(i, _)| *i == dispatch)
                                .and_then(|(_, r)| r.as_ref())
                                .expect("a carry names an earlier copy holder of the submission");
                            let o = offset as usize;
                            data[at..at + len].copy_from_slice(&from.data[o..o + len]);
                        }
                    }
                }
                let mut masks = vec![0u8; data.len()];
                for k in 0..data.len() / 4 {
                    let v = u32::from_le_bytes(data[4 * k..4 * k + 4].try_into().unwrap());
                    data[4 * k..4 * k + 4].copy_from_slice(&v.wrapping_add(1).to_le_bytes());
                    masks[4 * k] = 1;
                }
                Some(Ran { data, masks })
            }
        };
        ran.push((p.index, r));
    }
    for ((input, p, _), (_, r)) in frame.drain(..).zip(&ran) {
        let run = match r {
            Some(r) => RanOn::Device(DeviceRun {
                holders: vec![HolderRun {
                    slot: 0,
                    data: &r.data,
                    masks: &r.masks,
                }],
                ..DeviceRun::default()
            }),
            None => RanOn::Device(DeviceRun::default()),
        };
        e.complete(&input, p, run).unwrap();
    }
}

#[test]
fn m5_with_many_in_flight_waits_for_the_newest_dispatch_that_reaches() {
    let Some(ctx) = context() else { return };
    let pages = Pages::map(false, 16 * PAGE);
    let emu = Arc::new(Emulator::default());
    let mut e = engine(&ctx, &emu);
    e.apply(&reserve_at(GUEST, &pages, Backing::Private))
        .unwrap();
    // Sixteen bound dispatches, one page each, the fifth and ninth over the same page.
    let page_of = |i: usize| if i == 8 { 4 } else { i };
    let mut in_flight = Vec::new();
    for i in 0..16 {
        let input = bound(page_of(i) * PAGE / 4, PAGE / 4);
        let p = e.prepare(&input).unwrap();
        in_flight.push((input, p));
    }
    let guard = Event::Guard {
        range: ByteRange::new(GUEST + 4 * PAGE as u64, GUEST + 5 * PAGE as u64),
    };
    let err = e.apply(&guard).unwrap_err();
    match &err {
        EngineError::Waits(w) => assert_eq!(w.dispatch, 8, "the newest that reaches: {err}"),
        other => panic!("{other}"),
    }
    let mut reports = Vec::new();
    for (input, p) in in_flight.drain(..9) {
        reports.push(
            e.complete(&input, p, RanOn::Device(DeviceRun::default()))
                .unwrap(),
        );
    }
    assert_eq!(reports[8].host_path.waited.len(), 1, "dispatch 8 lists it");
    e.apply(&guard).unwrap();
    // The rest are still in flight, each with its own page; a guard beside them all applies.
    assert_eq!(e.in_flight(), 7);
    e.apply(&Event::Unguard {
        range: ByteRange::new(GUEST + 4 * PAGE as u64, GUEST + 5 * PAGE as u64),
    })
    .unwrap();
    for (input, p) in in_flight.drain(..) {
        e.complete(&input, p, RanOn::Device(DeviceRun::default()))
            .unwrap();
    }
    drop(e);
    quiet(&ctx);
}

#[test]
fn a_dispatch_in_flight_keeps_its_table_copy_and_its_marks_name_its_chunk_after_a_grow() {
    let Some(ctx) = context() else { return };
    let pages = Pages::map(false, 4 * PAGE);
    let emu = Arc::new(Emulator::default());
    let mut e = engine(&ctx, &emu);
    e.apply(&reserve_at(GUEST, &pages, Backing::Private))
        .unwrap();
    let first = device("first");
    let p0 = e.prepare(&first).unwrap();
    let d0 = p0.device.clone().unwrap();
    let t0 = e.table().unwrap();
    let slot0 = t0
        .slot_of(GUEST + 0x10)
        .expect("the chunk of GUEST is mapped");
    let capacity0 = t0.capacity();
    // Many more reservations, one chunk each, far apart: the table grows while the first
    // dispatch is in flight.
    let more: Vec<Pages> = (0..256).map(|_| Pages::map(false, PAGE)).collect();
    for (k, p) in more.iter().enumerate() {
        e.apply(&reserve_at(
            GUEST + 0x100_0000 * (k as u64 + 1),
            p,
            Backing::Private,
        ))
        .unwrap();
    }
    let second = device("second");
    let p1 = e.prepare(&second).unwrap();
    let d1 = p1.device.clone().unwrap();
    assert!(e.table().unwrap().capacity() > capacity0, "the table grew");
    assert_ne!(
        d0.table_address, d1.table_address,
        "the first dispatch's copy is kept"
    );
    assert_ne!(d0.marks_address, d1.marks_address, "mark words a dispatch");
    assert!(e.backend().table_copies() >= 2);
    // The first dispatch stored to GUEST + 0x10: its mark is at its own table's slot.
    let mut marks = vec![0u32; d0.mark_words as usize];
    marks[slot0] = 1;
    let r0 = e
        .complete(
            &first,
            p0,
            RanOn::Device(DeviceRun {
                marks: Some(&marks),
                ..DeviceRun::default()
            }),
        )
        .unwrap();
    assert_eq!(r0.marks.len(), 1);
    assert!(
        r0.marks[0].guest.contains(GUEST + 0x10),
        "the mark names the chunk the first dispatch stored to: {:?}",
        r0.marks
    );
    e.complete(&second, p1, RanOn::Device(DeviceRun::default()))
        .unwrap();
    drop(e);
    drop(more);
    quiet(&ctx);
}

#[test]
fn a_lost_device_names_every_dispatch_in_flight() {
    let Some(ctx) = context() else { return };
    let pages = Pages::map(false, 4 * PAGE);
    let emu = Arc::new(Emulator::default());
    let mut e = engine(&ctx, &emu);
    e.apply(&reserve_at(GUEST, &pages, Backing::Private))
        .unwrap();
    // An earlier run of the device-addressed program escaped: the report recalls it.
    let mut escaping = device("device");
    let mut a = Access::new(AccessKind::Global, Op::Load, 4);
    a.address = Some(GUEST + 0x9000_0000);
    escaping.accesses = vec![a];
    let r = e.dispatch(&escaping).unwrap();
    assert_eq!(r.escapes.len(), 1);
    let inputs = [device("device"), bound(0, 16), device("device")];
    // The bound one's holder is the guest's own pages, so the next device-addressed one need not
    // wait for it.
    let prepared: Vec<Prepared> = inputs
        .iter()
        .map(|i| {
            let in_place: &[u32] = if i.slots.is_empty() { &[] } else { &[0] };
            e.prepare_with(i, PrepareOptions { in_place }).unwrap()
        })
        .collect();
    let table = prepared[0].device.as_ref().unwrap().table_address;
    let import = e.mappings().imports().next().unwrap().device_base;
    let fault = DeviceFault {
        description: "a page fault".into(),
        addresses: vec![
            (import + 0x20, "write to an invalid address".into()),
            (table + 0x10, "read of an invalid address".into()),
            (0xdead_0000_0000, "write to an invalid address".into()),
        ],
    };
    let held = e.backend().held_mark_buffers();
    assert_eq!(held, 2, "the two device-addressed dispatches' mark words");
    let report = e
        .device_lost("vkWaitForFences: VK_ERROR_DEVICE_LOST", Some(&fault))
        .clone();
    // A hung device goes on running what was in flight: none of its mark words is given back
    // (to be handed out again, or freed).
    assert_eq!(
        e.backend().held_mark_buffers(),
        held,
        "mark words given back at the loss"
    );
    let indexes: Vec<u64> = report.in_flight.iter().map(|d| d.index).collect();
    assert_eq!(
        indexes,
        prepared.iter().map(|p| p.index).collect::<Vec<_>>()
    );
    assert_eq!(report.in_flight[0].mode, Mode::DeviceAddressed);
    assert_eq!(
        report.in_flight[0].history.escapes_total(),
        1,
        "its program escaped once before"
    );
    let lands: Vec<&FaultLands> = report
        .fault
        .as_ref()
        .unwrap()
        .addresses
        .iter()
        .map(|a| &a.lands)
        .collect();
    assert!(
        matches!(lands[0], FaultLands::Guest { guest, .. } if *guest == GUEST + 0x20),
        "{lands:?}"
    );
    assert!(
        matches!(lands[1], FaultLands::Table { offset: 0x10 }),
        "{lands:?}"
    );
    assert!(matches!(lands[2], FaultLands::Unknown { .. }), "{lands:?}");
    assert!(report.findings.iter().any(|f| f.contains("escaped 1 time")));
    assert_eq!(e.in_flight(), 0);
    let err = e.prepare(&inputs[0]).unwrap_err();
    assert_eq!(err.kind(), dispatchscope_core::FailureKind::DeviceLost);
    drop(e);
    quiet(&ctx);
}
