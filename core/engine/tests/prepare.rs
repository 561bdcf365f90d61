//! Prepare and complete (issue 29): what the emulator's command buffer is handed, and what
//! complete makes of what its device left, on the CPU reference's engine with simulated memory.
//! The same engine's `dispatch` is prepare, its backend, complete, so every shipped sample and
//! golden file exercises the split too (`core/formats/tests`).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is the test failing, with its message"
)]

use dispatchscope_core::addr::ByteRange;
use dispatchscope_core::engine::{
    CompleteError, DeviceRun, EngineError, HolderRun, RanOn, SlotPlan, push_word,
};
use dispatchscope_core::input::{Access, AccessKind, Backing, Event, Op, Reason, Slot};
use dispatchscope_core::report::Mode;
use dispatchscope_core::rules::{DEVICE_TABLE_PUSH_WORD, Rule};
use dispatchscope_core::{DeviceLimits, DispatchInput, Engine};

const BASE: u64 = 0x4000_0000;

fn engine() -> Engine {
    let mut e = Engine::cpu(DeviceLimits::default()).unwrap();
    e.apply(&Event::Reserve {
        range: ByteRange::new(BASE, BASE + 0x20000),
        readable: true,
        writable: true,
        committed: true,
        backing: Backing::Private,
        host_base: None,
    })
    .unwrap();
    e
}

fn bound(slots: Vec<Slot>) -> DispatchInput {
    DispatchInput {
        program: 0x4000_03e1_9200,
        slots,
        ..DispatchInput::default()
    }
}

/// Run 305, programs 0x400003e19200 and 0x400003e1ac00: a 0x20-byte written range that a
/// 0xe40f-byte written range ends inside. One holder, the small range a member 0xe400 into it.
#[test]
fn run_305_is_bound_as_one_holder_with_its_member_offset() {
    let mut e = engine();
    let input = bound(vec![
        Slot::new(0, BASE, 0xe40f, true),
        Slot::new(1, BASE + 0xe400, 0x20, true),
    ]);
    let p = e.prepare(&input).unwrap();
    assert_eq!(p.mode, Mode::Bound);
    assert!(p.device.is_none());
    let buffer = ByteRange::new(BASE, BASE + 0xe420);
    assert_eq!(
        p.bindings,
        vec![
            SlotPlan {
                slot: 0,
                holder: 0,
                buffer,
                offset_bytes: 0,
                range_bytes: 0xe420,
                mask_offset_bytes: 0,
                written: true,
            },
            SlotPlan {
                slot: 1,
                holder: 0,
                buffer,
                offset_bytes: 0xe400,
                range_bytes: 0x20,
                mask_offset_bytes: 0xe400,
                written: true,
            },
        ]
    );
    assert_eq!(p.holder(0).map(|h| h.buffer), Some(buffer));
    assert!(p.holder(1).is_none());
    // The emulator's device stored two words through the member; complete writes back exactly
    // those (O8, O9).
    let mut data = vec![0u8; 0xe420];
    let mut masks = vec![0u8; 4 * 0xe420 / 4];
    for (w, v) in [(0xe400 / 4, 0x1111_1111u32), (0xe41c / 4, 0x2222_2222)] {
        data[4 * w..4 * w + 4].copy_from_slice(&v.to_le_bytes());
        masks[4 * w] = 1;
    }
    data[0..4].copy_from_slice(&7u32.to_le_bytes()); // not masked: never written back
    let run = DeviceRun {
        marks: None,
        holders: vec![HolderRun {
            slot: 0,
            data: &data,
            masks: &masks,
        }],
        ran_on: None,
        instrumentation: None,
    };
    let r = e.complete(&input, p, RanOn::Device(run)).unwrap();
    assert_eq!(r.counts.words_written_back, 2);
    let mut got = [0u8; 4];
    e.memory().read_bytes(BASE + 0xe41c, &mut got).unwrap();
    assert_eq!(u32::from_le_bytes(got), 0x2222_2222);
    e.memory().read_bytes(BASE, &mut got).unwrap();
    assert_eq!(u32::from_le_bytes(got), 0);
    assert_eq!(r.backend, "cpu-reference");
}

/// Run 305, program 0x400003d88400: a four-byte written range inside a 0x94-byte range.
#[test]
fn a_four_byte_range_inside_a_0x94_byte_range_binds_inside_its_holder() {
    let mut e = engine();
    let input = bound(vec![
        Slot::new(3, BASE + 0x100, 0x94, false),
        Slot::new(4, BASE + 0x150, 4, true),
    ]);
    let p = e.prepare(&input).unwrap();
    assert_eq!(p.mode, Mode::Bound);
    let member = p.bindings.iter().find(|b| b.slot == 4).unwrap();
    assert_eq!(
        (member.holder, member.offset_bytes, member.range_bytes),
        (3, 0x50, 0x44)
    );
    e.complete(&input, p, RanOn::Device(DeviceRun::default()))
        .unwrap();
}

/// O7: a member offset that is not a multiple of minStorageBufferOffsetAlignment (0x10 here, as
/// on lavapipe and the H200) is refused by name; nothing is bound.
#[test]
fn o7_refuses_a_misaligned_member_and_hands_out_nothing_to_bind() {
    let mut e = engine();
    let input = bound(vec![
        Slot::new(0, BASE, 0x100, true),
        Slot::new(1, BASE + 0x24, 0x10, true),
    ]);
    let p = e.prepare(&input).unwrap();
    assert_eq!(p.mode, Mode::Refused);
    assert_eq!(p.refusals[0].rule, Rule::O7);
    assert_eq!(p.refusals[0].slot, Some(1));
    assert!(p.bindings.is_empty());
    let r = e
        .complete(&input, p, RanOn::Device(DeviceRun::default()))
        .unwrap();
    assert_eq!(r.mode, Mode::Refused);
}

fn device_input() -> DispatchInput {
    DispatchInput {
        program: 0x7400_5b85_4a00,
        reasons: vec![Reason::D753],
        ..DispatchInput::default()
    }
}

/// A device-addressed dispatch hands out the table and every push word the helper reads; the
/// emulator's own marks come back as C1's marks and C2's hand-off.
#[test]
fn a_device_addressed_dispatch_hands_out_the_table_and_takes_the_marks() {
    let mut e = engine();
    let input = device_input();
    let p = e.prepare(&input).unwrap();
    assert_eq!(p.mode, Mode::DeviceAddressed);
    let d = p.device.clone().unwrap();
    let t = e.table().unwrap();
    assert_eq!(d.mark_words, t.capacity() as u64);
    assert_eq!(d.chunk_bytes, t.chunk_bytes());
    let block = p.push_block();
    assert_eq!(
        u64::from(block[DEVICE_TABLE_PUSH_WORD as usize])
            | u64::from(block[DEVICE_TABLE_PUSH_WORD as usize + 1]) << 32,
        d.table_address
    );
    assert_eq!(block[push_word::CHUNK_SHIFT as usize], t.chunk_shift());
    assert_eq!(block[push_word::CAPACITY_LOG2 as usize], t.capacity_log2());
    assert_eq!(
        u64::from(block[push_word::MULTIPLIER as usize])
            | u64::from(block[push_word::MULTIPLIER as usize + 1]) << 32,
        t.multiplier()
    );
    assert_eq!(d.marks_address, 0, "the CPU reference keeps no mark words");
    // The device stored into the chunk of BASE + 0x10010.
    let chunk = (BASE + 0x10010) >> t.chunk_shift();
    let slot = t.lookup_slot(chunk).unwrap();
    let mut marks = vec![0u32; t.capacity()];
    marks[slot] = 3;
    let r = e
        .complete(
            &input,
            p,
            RanOn::Device(DeviceRun {
                marks: Some(&marks),
                holders: Vec::new(),
                ran_on: None,
                instrumentation: None,
            }),
        )
        .unwrap();
    assert_eq!(r.marks.len(), 1);
    assert_eq!(r.marks[0].stores, 3);
    assert!(r.marks[0].guest.contains(BASE + 0x10010));
    assert!(
        r.hand_off
            .pages_noted_written
            .iter()
            .any(|p| p.contains(BASE + 0x10010))
    );
}

/// Out of order, twice, or with the wrong number of mark words: a named error, nothing changed.
#[test]
fn misuse_is_a_named_error() {
    let mut e = engine();
    let input = device_input();
    let p = e.prepare(&input).unwrap();
    let index = p.index;
    // A second dispatch in flight; it completes only after the first.
    let second = e.prepare(&input).unwrap();
    assert_eq!(second.index, index + 1);
    assert_eq!(e.in_flight(), 2);
    let err = e
        .complete(&input, second, RanOn::Device(DeviceRun::default()))
        .unwrap_err();
    assert!(
        matches!(
            err,
            EngineError::Complete(CompleteError::NotPrepared { given, prepared: Some(i) })
                if given == index + 1 && i == index
        ),
        "{err}"
    );
    e.abandon(index + 1).unwrap();
    let wrong = vec![0u32; 3];
    let err = e
        .complete(
            &input,
            p,
            RanOn::Device(DeviceRun {
                marks: Some(&wrong),
                holders: Vec::new(),
                ran_on: None,
                instrumentation: None,
            }),
        )
        .unwrap_err();
    assert!(
        matches!(
            err,
            EngineError::Complete(CompleteError::MarkWords { given: 3, .. })
        ),
        "{err}"
    );
    // The prepared dispatch is still the one waiting; abandon it and go on.
    assert_eq!(e.prepared(), Some(index));
    let mut store = Access::new(AccessKind::Global, Op::Store, 4);
    store.address = Some(BASE);
    store.values = vec![1];
    let again = e.dispatch(&device_input());
    assert!(again.is_err(), "a dispatch waits for the prepared one too");
    e.abandon(index).unwrap();
    assert!(e.abandon(index).is_err(), "abandoned once");
    let mut input = device_input();
    input.accesses = vec![store];
    let r = e.dispatch(&input).unwrap();
    assert_eq!(r.index, index + 2, "the abandoned indexes stay used");
}

/// A prepared dispatch completed twice is refused: the second has no prepared dispatch to match.
#[test]
fn completing_twice_is_refused() {
    let mut e = engine();
    let input = bound(vec![Slot::new(0, BASE, 0x10, true)]);
    let p = e.prepare(&input).unwrap();
    let stale = p.clone();
    e.complete(&input, p, RanOn::Device(DeviceRun::default()))
        .unwrap();
    let err = e
        .complete(&input, stale, RanOn::Device(DeviceRun::default()))
        .unwrap_err();
    assert!(
        matches!(
            err,
            EngineError::Complete(CompleteError::NotPrepared {
                given: 0,
                prepared: None
            })
        ),
        "{err}"
    );
}

/// A holder's data shorter than its buffer, or a slot that is no holder, is refused by name.
#[test]
fn holder_data_is_checked() {
    let mut e = engine();
    let input = bound(vec![
        Slot::new(0, BASE, 0x100, true),
        Slot::new(1, BASE + 0x40, 0x10, true),
    ]);
    let p = e.prepare(&input).unwrap();
    let short = vec![0u8; 0x10];
    let err = e
        .complete(
            &input,
            p,
            RanOn::Device(DeviceRun {
                marks: None,
                holders: vec![HolderRun {
                    slot: 0,
                    data: &short,
                    masks: &short,
                }],
                ran_on: None,
                instrumentation: None,
            }),
        )
        .unwrap_err();
    assert!(err.to_string().contains("spans 256 bytes"), "{err}");
    assert_eq!(
        e.prepared(),
        Some(0),
        "still in flight after a refused complete"
    );
}

/// O8 over masks of every shape a device leaves (alternating words, random, blocks a page apart
/// and more, the last word cut by the range's end), against a plain reading of O8 and O9: the
/// guest bytes afterwards are the old ones with every masked word laid over; the report lists the
/// first 16 words written with their old and new values and the first runs, and counts the rest.
mod write_back_shapes {
    use super::*;
    use dispatchscope_core::engine::DEVICE_WORDS_LISTED;
    use dispatchscope_core::report::WriteBack;
    use proptest::prelude::*;

    /// A holder of `len` bytes at `BASE + 0x10` (not page-aligned), its mask from `words`.
    fn check(len: u64, written: &[bool]) {
        let mut e = engine();
        let old: Vec<u8> = (0..len + 0x40).map(|i| (i * 13 + 1) as u8).collect();
        e.load_contents(BASE, &old);
        let input = bound(vec![Slot::new(0, BASE + 0x10, len, true)]);
        let p = e.prepare(&input).unwrap();
        let buffer = p.holder(0).unwrap().buffer;
        let bytes = buffer.size_bytes() as usize;
        let n = bytes.div_ceil(4);
        let data: Vec<u8> = (0..bytes).map(|i| (i * 7 + 200) as u8).collect();
        let mut masks = vec![0u8; 4 * n];
        for (w, &on) in written.iter().take(n).enumerate() {
            masks[4 * w + (w % 4)] = u8::from(on);
        }
        let run = DeviceRun {
            holders: vec![HolderRun {
                slot: 0,
                data: &data,
                masks: &masks,
            }],
            ..DeviceRun::default()
        };
        let r = e.complete(&input, p, RanOn::Device(run)).unwrap();
        // The plain reading.
        let on = |w: usize| written.get(w).copied().unwrap_or(false) && w < n;
        let mut want = old[0x10..0x10 + bytes].to_vec();
        let mut words = Vec::new();
        let mut runs: Vec<ByteRange> = Vec::new();
        let mut n_runs = 0u64;
        for w in 0..n {
            if !on(w) {
                continue;
            }
            let (from, to) = (4 * w, (4 * w + 4).min(bytes));
            if words.len() < DEVICE_WORDS_LISTED {
                words.push((
                    BASE + 0x10 + from as u64,
                    old[0x10 + from..0x10 + to].to_vec(),
                ));
            }
            want[from..to].copy_from_slice(&data[from..to]);
            let at = BASE + 0x10 + from as u64;
            let end = BASE + 0x10 + to as u64;
            match runs.last_mut() {
                Some(r) if r.end == at => r.end = end,
                _ if w > 0 && on(w - 1) => {}
                _ => {
                    n_runs += 1;
                    if runs.len() < WriteBack::LISTED_RUNS {
                        runs.push(ByteRange::new(at, end));
                    }
                }
            }
        }
        let total = (0..n).filter(|&w| on(w)).count() as u64;
        let mut got = vec![0u8; bytes];
        e.memory().read_bytes(BASE + 0x10, &mut got).unwrap();
        assert_eq!(got, want, "the guest bytes after the write-back");
        let Some(wb) = r.write_back.first() else {
            assert_eq!(total, 0);
            return;
        };
        assert_eq!(wb.words_written(), total);
        let listed: Vec<(u64, u64)> = wb
            .words
            .iter()
            .map(|x| (x.address, x.old.unwrap()))
            .collect();
        let expected: Vec<(u64, u64)> = words
            .iter()
            .map(|(a, b)| {
                let mut w = [0u8; 4];
                w[..b.len()].copy_from_slice(b);
                (*a, u64::from(u32::from_le_bytes(w)))
            })
            .collect();
        assert_eq!(listed, expected, "the words listed with their old values");
        if wb.lists_every_word() {
            assert!(wb.runs.is_empty() && wb.runs_not_listed == 0);
        } else {
            assert_eq!(wb.runs, runs, "the runs placed");
            assert_eq!(wb.runs.len() as u64 + wb.runs_not_listed, n_runs);
        }
    }

    #[test]
    fn alternating_words_over_three_pages_and_a_cut_word() {
        let written: Vec<bool> = (0..4000).map(|w| w % 2 == 0).collect();
        check(3 * 4096 + 6, &written);
    }

    #[test]
    fn blocks_a_page_apart_and_more() {
        let written: Vec<bool> = (0..8200)
            .map(|w| {
                (100..300).contains(&w)
                    || (1300..1400).contains(&w)
                    || (6000..6100).contains(&w)
                    || w == 8190
            })
            .collect();
        check(8 * 4096, &written);
    }

    #[test]
    fn every_word_but_one() {
        let mut written = vec![true; 5000];
        written[4000] = false;
        check(5000 * 4 - 3, &written);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn any_mask(len in 1u64..20000, seed in any::<u64>(), density in 0u32..=100) {
            let mut x = seed | 1;
            let written: Vec<bool> = (0..len.div_ceil(4) + 4)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x % 100) < u64::from(density)
                })
                .collect();
            check(len, &written);
        }
    }
}

/// C3 with a dispatch in flight: a deferred copy over bytes the dispatch in flight writes would
/// land under it (or under its write-back), so the next prepare that must land it waits for that
/// dispatch, by name, and lands it once that one completed.
#[test]
fn a_deferred_copy_under_a_dispatch_in_flight_waits_for_it() {
    let mut e = engine();
    let first = bound(vec![Slot::new(0, BASE + 0x1000, 0x100, true)]);
    let p = e.prepare(&first).unwrap();
    e.apply(&Event::DeferCopy {
        address: BASE + 0x1010,
        bytes: vec![7; 8],
    })
    .unwrap();
    let err = e.prepare(&device_input()).unwrap_err();
    match &err {
        EngineError::ChainWaits(w) => {
            assert_eq!(w.waits_for, p.index);
            assert!(w.why.contains("deferred copy (C3)"), "{err}");
        }
        other => panic!("{other}"),
    }
    assert_eq!(e.in_flight(), 1, "nothing was prepared");
    // A bound dispatch elsewhere leaves the copy deferred and need not wait.
    let beside = bound(vec![Slot::new(0, BASE + 0x8000, 0x100, true)]);
    let q = e.prepare(&beside).unwrap();
    e.complete(&first, p, RanOn::Device(DeviceRun::default()))
        .unwrap();
    e.complete(&beside, q, RanOn::Device(DeviceRun::default()))
        .unwrap();
    let last = device_input();
    let p = e.prepare(&last).unwrap();
    let r = e
        .complete(&last, p, RanOn::Device(DeviceRun::default()))
        .unwrap();
    assert_eq!(r.before.copies.len(), 1, "the copy landed");
    let mut got = [0u8; 8];
    e.read_guest(BASE + 0x1010, &mut got).unwrap();
    assert_eq!(got, [7; 8]);
}

/// The CPU reference, as a device whose stores land past a write-watch guard (NVIDIA's, measured).
struct PassesGuards(dispatchscope_core::CpuBackend);

impl dispatchscope_core::Backend for PassesGuards {
    fn name(&self) -> String {
        self.0.name()
    }
    fn import(
        &mut self,
        piece: ByteRange,
        memory: &dispatchscope_core::memory::GuestMemory,
    ) -> Result<u64, dispatchscope_core::backend::BackendError> {
        self.0.import(piece, memory)
    }
    fn release(&mut self, base: u64) -> Result<(), dispatchscope_core::backend::BackendError> {
        self.0.release(base)
    }
    fn place_table(
        &mut self,
        table: &dispatchscope_core::chunk_table::ChunkTable,
        budget: u64,
    ) -> Result<
        (u64, dispatchscope_core::report::Placement),
        dispatchscope_core::backend::BackendError,
    > {
        self.0.place_table(table, budget)
    }
    fn execute(
        &mut self,
        job: &dispatchscope_core::exec::Job<'_>,
        table: Option<&dispatchscope_core::chunk_table::ChunkTable>,
        memory: &mut dispatchscope_core::memory::GuestMemory,
    ) -> Result<dispatchscope_core::exec::Outcome, dispatchscope_core::backend::BackendError> {
        self.0.execute(job, table, memory)
    }
    fn calls(&self) -> u64 {
        self.0.calls()
    }
    fn device_stores_pass_guards(&self) -> bool {
        true
    }
}

/// M5 and a write-watch guard over what a device-addressed dispatch in flight reaches: it waits
/// where the device's store would fault on the guarded page (lavapipe, any driver not measured),
/// and applies at once where the store lands past the guard (C1 hands it off at complete).
#[test]
fn a_guard_under_a_device_addressed_dispatch_waits_only_where_the_store_would_fault() {
    let reserve = Event::Reserve {
        range: ByteRange::new(BASE, BASE + 0x20000),
        readable: true,
        writable: true,
        committed: true,
        backing: Backing::Private,
        host_base: None,
    };
    let guard = Event::Guard {
        range: ByteRange::new(BASE + 0x3000, BASE + 0x4000),
    };
    let input = device_input();
    let mut e = engine();
    let p = e.prepare(&input).unwrap();
    assert!(matches!(e.apply(&guard), Err(EngineError::Waits(_))));
    e.abandon(p.index).unwrap();

    let mut e = Engine::new(
        DeviceLimits::default(),
        PassesGuards(dispatchscope_core::CpuBackend::new()),
    )
    .unwrap();
    e.apply(&reserve).unwrap();
    let p = e.prepare(&input).unwrap();
    e.apply(&guard).unwrap();
    // A copy holder's bytes still wait, on every device.
    let holder = bound(vec![Slot::new(0, BASE + 0x8000, 0x100, true)]);
    let q = e.prepare(&holder).unwrap();
    let err = e
        .apply(&Event::Guard {
            range: ByteRange::new(BASE + 0x8000, BASE + 0x9000),
        })
        .unwrap_err();
    assert!(
        matches!(&err, EngineError::Waits(w) if w.dispatch == q.index),
        "{err}"
    );
    e.complete(&input, p, RanOn::Device(DeviceRun::default()))
        .unwrap();
    e.complete(&holder, q, RanOn::Device(DeviceRun::default()))
        .unwrap();
}
