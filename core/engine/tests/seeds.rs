//! The cases the decision records cite (the rules of `rules.rs` name their records), built in code and
//! run through the engine.
//!
//! The records give only a few facts per case: program addresses, range sizes, which ranges are
//! written, the offset between two ranges, the reasons a dispatch was refused before D964, what
//! happened in run 335. Every other value here (bases, slot numbers where the record names none,
//! contents, the access streams, page layouts) is ours. Each value says which it is: `// record`
//! or `// ours`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails by panicking"
)]

use dispatchscope_core::addr::ByteRange;
use dispatchscope_core::input::Backing;
use dispatchscope_core::input::{BaseSource, Op, Reason};
use dispatchscope_core::report::Role;
use dispatchscope_core::report::{EscapeClass, LeftOutReason, Mode, Route};
use dispatchscope_core::{
    Access, AccessKind, DeviceLimits, DispatchInput, DispatchReport, Engine, Event, Rule, Slot,
};

fn r(start: u64, end: u64) -> ByteRange {
    ByteRange::new(start, end)
}

/// Vulkan's largest `minStorageBufferOffsetAlignment`: a set that binds under it binds on any
/// device.
const WORST_ALIGNMENT: u64 = 0x100;

fn engine(alignment: u64) -> Engine {
    Engine::cpu(DeviceLimits {
        min_storage_buffer_offset_alignment: alignment,
        ..DeviceLimits::default()
    })
    .unwrap()
}

fn access(kind: AccessKind, op: Op, size_bytes: u32, values: Vec<u32>) -> Access {
    Access {
        values,
        ..Access::new(kind, op, size_bytes)
    }
}

fn buf(op: Op, slot: u32, offset: u64, values: &[u32]) -> Access {
    let size = if values.is_empty() {
        4
    } else {
        4 * values.len() as u32
    };
    Access {
        slot: Some(slot),
        offset: Some(offset),
        ..access(AccessKind::UntypedBuffer, op, size, values.to_vec())
    }
}

fn by_address(kind: AccessKind, address: u64, size_bytes: u32) -> Access {
    Access {
        address: Some(address),
        ..access(kind, Op::Load, size_bytes, vec![])
    }
}

fn sets(report: &DispatchReport) -> Vec<(u32, Vec<u32>)> {
    report
        .sets
        .iter()
        .map(|s| (s.holder, s.members.iter().map(|m| m.slot).collect()))
        .collect()
}

fn word(e: &Engine, address: u64) -> u32 {
    let mut b = [0u8; 4];
    e.memory().read_bytes(address, &mut b).unwrap();
    u32::from_le_bytes(b)
}

// ---------------------------------------------------------------------------------------------
// Run 305 (D953).
// ---------------------------------------------------------------------------------------------

/// Run 305, programs 0x400003e19200 and 0x400003e1ac00: a 0x20-byte written range that a
/// 0xe40f-byte written range ends inside. Before D953 both were refused as two overlapping buffers.
#[test]
fn run_305_a_small_written_range_a_large_one_ends_inside_binds_one_buffer() {
    for program in [0x4000_03e1_9200, 0x4000_03e1_ac00] {
        // record: the programs, the sizes 0xe40f and 0x20, both written, the large range lower
        // and ending inside the small one.
        // ours: the bases (the small range 0xe400 bytes into the large one, so that the large one
        // ends 0xf bytes into it), the slot numbers 0 and 1, the stores.
        let large_base = 0x4000_0410_0000u64;
        let small_base = large_base + 0xe400;
        let input = DispatchInput {
            program,
            label: format!("run 305, program {program:#x}"),
            slots: vec![
                Slot::new(0, large_base, 0xe40f, true),
                Slot::new(1, small_base, 0x20, true),
            ],
            accesses: vec![
                buf(Op::Store, 0, 0xe408, &[0xaaaa_aaaa]), // through the large range, into the small one
                buf(Op::Store, 1, 0x1c, &[0xbbbb_bbbb]), // the small range's last word, past the large end
                buf(Op::Load, 0, 0xe408, &[]),
                buf(Op::Load, 1, 0x8, &[]),
            ],
            ..DispatchInput::default()
        };
        assert!(large_base + 0xe40f > small_base && large_base + 0xe40f < small_base + 0x20);
        let mut e = engine(WORST_ALIGNMENT);
        let report = e.dispatch(&input).unwrap();
        assert_eq!(
            report.mode,
            Mode::Bound,
            "program {program:#x}: {}",
            report.mode_reason
        );
        assert!(
            report.refusals.is_empty(),
            "not refused: {:?}",
            report.refusals
        );
        // One set, held by the larger, lower range (O4), widened to the small range's end (O5).
        assert_eq!(sets(&report), vec![(0, vec![1])]);
        let set = &report.sets[0];
        assert_eq!((set.base, set.end), (large_base, small_base + 0x20));
        assert_eq!(
            report.slots[0].binding,
            r(0, 0xe420),
            "the holder binds past its own 0xe40f bytes"
        );
        assert_eq!(report.slots[1].offset, 0xe400);
        // One buffer: the small range reads what was stored through the large one (O8).
        assert_eq!(report.accesses[3].values, vec![0xaaaa_aaaa]);
        assert_eq!(report.write_back.len(), 1);
        assert_eq!(word(&e, small_base + 0x8), 0xaaaa_aaaa);
        assert_eq!(word(&e, small_base + 0x1c), 0xbbbb_bbbb);
    }
}

/// Run 305, program 0x400003d88400: a four-byte written range inside a 0x94-byte range.
#[test]
fn run_305_a_four_byte_written_range_inside_a_larger_one_binds_one_buffer() {
    // record: the program, the sizes 0x94 and 4, the small range written and inside the large one.
    // ours: the bases, the offset 0x40 of the small range, that the 0x94-byte range is read-only
    // (the record does not say; written or not, the two join), the slot numbers, the store, and
    // the device: lavapipe's alignment 0x10 (the defaults). Under Vulkan's largest, 0x100, only
    // offset 0 of a 0x94-byte range would bind; 0x40 is refused by name (O7), checked last.
    let base = 0x4000_0420_0000u64;
    let input = DispatchInput {
        program: 0x4000_03d8_8400,
        label: "run 305, program 0x400003d88400".into(),
        slots: vec![
            Slot::new(0, base, 0x94, false),
            Slot::new(1, base + 0x40, 4, true),
        ],
        accesses: vec![
            buf(Op::Store, 1, 0, &[0x1234_5678]),
            buf(Op::Load, 0, 0x40, &[]),
        ],
        ..DispatchInput::default()
    };
    let mut e = engine(DeviceLimits::default().min_storage_buffer_offset_alignment);
    let report = e.dispatch(&input).unwrap();
    assert_eq!(report.mode, Mode::Bound);
    assert!(report.refusals.is_empty());
    assert_eq!(sets(&report), vec![(0, vec![1])]);
    assert_eq!(
        (report.sets[0].base, report.sets[0].end),
        (base, base + 0x94),
        "no widening: inside"
    );
    assert_eq!(
        report.slots[1].binding,
        r(0x40, 0x94),
        "the member binds to the holder's end (O6)"
    );
    assert_eq!(report.accesses[1].values, vec![0x1234_5678]);
    assert_eq!(
        report.write_back[0].words.len(),
        1,
        "one word written back (O8)"
    );
    let strict = engine(WORST_ALIGNMENT).dispatch(&input).unwrap();
    assert_eq!(strict.mode, Mode::Refused);
    assert_eq!(
        strict.refusals[0].message,
        "slot 1 binds holder slot 0 at offset 0x40, not a multiple of minStorageBufferOffsetAlignment 0x100"
    );
}

/// Run 305, program 0x74005b87e400: two sampled ranges of one descriptor (D951), slot 20 a
/// megabyte into slot 18, both written.
#[test]
fn run_305_two_sampled_ranges_of_one_descriptor_bind_one_buffer() {
    // record: the program, slots 18 and 20, one descriptor, bases placed from a sample (D951),
    // slot 20 a megabyte (0x100000) into slot 18, both written.
    // ours: the descriptor's base, the push words that carry the bases (0–1 and 2–3), the bases
    // themselves, the sizes (slot 18 two megabytes, slot 20 half a megabyte), the stores.
    let descriptor_base = 0x7400_5b00_0000u64;
    let base18 = 0x7400_5c00_0000u64;
    let base20 = base18 + 0x10_0000;
    let split = |a: u64| [a as u32, (a >> 32) as u32];
    let sampled = |slot: u32, size: u64, word: u32| Slot {
        base_source: BaseSource::PushBlock { word },
        ..Slot::new(slot, descriptor_base, size, true)
    };
    let input = DispatchInput {
        program: 0x7400_5b87_e400,
        label: "run 305, program 0x74005b87e400".into(),
        slots: vec![sampled(18, 0x20_0000, 0), sampled(20, 0x8_0000, 2)],
        push: [split(base18), split(base20)].concat(),
        accesses: vec![
            buf(Op::Store, 20, 0x10, &[0x2020]),
            buf(Op::Load, 18, 0x10_0010, &[]),
        ],
        ..DispatchInput::default()
    };
    let mut e = engine(WORST_ALIGNMENT);
    let report = e.dispatch(&input).unwrap();
    assert_eq!(report.mode, Mode::Bound);
    assert!(report.refusals.is_empty());
    assert_eq!(sets(&report), vec![(18, vec![20])]);
    let b20 = &report.slots[1];
    assert_eq!(
        b20.range.start, base20,
        "O10: the push block's base, not the descriptor's"
    );
    assert_eq!(
        (b20.holder, b20.offset, b20.role),
        (Some(18), 0x10_0000, Role::Member)
    );
    assert_eq!(b20.binding, r(0x10_0000, 0x20_0000));
    assert_eq!(
        report.accesses[0].route,
        Route::Bound {
            holder: 18,
            offset: 0x10_0010
        }
    );
    assert_eq!(report.accesses[1].values, vec![0x2020]);
    assert_eq!(word(&e, base20 + 0x10), 0x2020);
}

// ---------------------------------------------------------------------------------------------
// Run 335 (D964, M2–M3).
// ---------------------------------------------------------------------------------------------

/// Run 335: a readable run handed whole to the driver made it fault inside vkAllocateMemory.
#[test]
fn run_335_a_readable_run_is_committed_and_mapped_in_pieces() {
    // record: a readable run with pages a whole import cannot take; the fault when it was handed
    // whole to the driver (M3 exists because of it).
    // ours: every address and page layout, the reason D753, the accesses. The run is 16 pages:
    // 4..6 uncommitted (M2 commits them), 8 shared, 11..13 read-only.
    const BASE: u64 = 0x2_0000_0000;
    let page = |i: u64| BASE + i * 0x1000;
    let mut e = engine(0x10);
    let mut apply = |ev: Event| {
        e.apply(&ev).unwrap();
    };
    apply(Event::Reserve {
        range: r(page(0), page(16)),
        readable: true,
        writable: true,
        committed: true,
        backing: Backing::Private,
        host_base: None,
    });
    apply(Event::Decommit {
        range: r(page(4), page(6)),
    });
    apply(Event::SetBacking {
        range: r(page(8), page(9)),
        backing: Backing::Shared,
    });
    apply(Event::Protect {
        range: r(page(11), page(13)),
        readable: true,
        writable: false,
    });
    let input = DispatchInput {
        program: 0x4000_0500_0000,
        label: "run 335".into(),
        reasons: vec![Reason::D753],
        accesses: [0, 4, 5, 8, 11, 12, 15]
            .iter()
            .map(|&i| by_address(AccessKind::Global, page(i) + 0x10, 4))
            .collect(),
        ..DispatchInput::default()
    };
    let report = e.dispatch(&input).unwrap();
    assert_eq!(report.mode, Mode::DeviceAddressed, "the dispatch runs");
    let m = report.mappings.as_ref().unwrap();
    assert_eq!(m.runs.len(), 1, "one readable run");
    assert_eq!(m.runs[0].range, r(page(0), page(16)));
    assert_eq!(
        m.committed_pages, 2,
        "M2: the uncommitted pages are committed first"
    );
    let pieces: Vec<ByteRange> = m.pieces.iter().map(|p| p.guest).collect();
    assert_eq!(
        pieces,
        vec![
            r(page(0), page(8)),
            r(page(9), page(11)),
            r(page(13), page(16))
        ]
    );
    let left: Vec<(ByteRange, LeftOutReason)> =
        m.left_out.iter().map(|l| (l.guest, l.reason)).collect();
    assert_eq!(
        left,
        vec![
            (r(page(8), page(9)), LeftOutReason::NotPrivate),
            (r(page(11), page(13)), LeftOutReason::NotReadWrite)
        ]
    );
    // No piece holds a page the driver could not take.
    for p in &pieces {
        for a in (p.start..p.end).step_by(0x1000) {
            assert!(e.memory().page_at(a).unwrap().mappable(), "{a:#x}");
        }
    }
    let escaped: Vec<(u64, EscapeClass)> = report
        .escapes
        .iter()
        .map(|x| (x.address, x.class))
        .collect();
    assert_eq!(
        escaped,
        vec![
            (page(8) + 0x10, EscapeClass::LeftOut),
            (page(11) + 0x10, EscapeClass::LeftOut),
            (page(12) + 0x10, EscapeClass::LeftOut)
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// Ray traversal (D964, W1, W3, P1).
// ---------------------------------------------------------------------------------------------

/// Ray traversal, program 0x74005b854a00: a full-screen pass walking a two-level hierarchy.
#[test]
fn ray_traversal_runs_device_addressed() {
    // record: the program; the reasons D753 and D758 it was refused under before D964; that the
    // instance a ray enters is read by s_load_dwordx16 from an address the program computes and
    // names the bottom level's base; that this base forms the descriptor of the next
    // image_bvh_intersect_ray and of a buffer_load_dwordx2; that the traversal stacks live in LDS
    // (ds_read_b32) and scratch (scratch_load_dword), reached through flat addresses whose high
    // half is 0x80000000 or 0x70000000.
    // ours: every address, the instance's layout (the base in words 4 and 5), the node and buffer
    // contents, the slot number 7, the offsets, and the one escape (a node read past the bottom
    // level's reservation).
    const TOP: u64 = 0x7400_6000_0000; // the instances
    const BOTTOM: u64 = 0x7400_7000_0000; // one bottom level
    let instance = TOP + 0x140; // the address the program computes
    let mut e = engine(0x10);
    for base in [TOP, BOTTOM] {
        e.apply(&Event::Reserve {
            range: r(base, base + 0x1_0000),
            readable: true,
            writable: true,
            committed: true,
            backing: Backing::Private,
            host_base: None,
        })
        .unwrap();
    }
    let mut inst = [0u32; 16];
    inst[4] = BOTTOM as u32;
    inst[5] = (BOTTOM >> 32) as u32;
    let bytes: Vec<u8> = inst.iter().flat_map(|w| w.to_le_bytes()).collect();
    e.load_contents(instance, &bytes);
    e.load_contents(BOTTOM + 0x80, &[0xb1, 0, 0, 0, 0xb2, 0, 0, 0]);
    e.load_contents(BOTTOM + 0x200, &[0xd1, 0, 0, 0, 0xd2, 0, 0, 0]);

    // The unresolved slot whose base the instance named (W1): the host could not know it.
    let bottom_slot = Slot {
        resolved: false,
        ..Slot::new(7, BOTTOM, 0x1_0000, false)
    };
    let lane = |a: Access, lane: u32| Access {
        lane,
        wave: 0,
        workgroup: 0,
        ..a
    };
    let input = DispatchInput {
        program: 0x7400_5b85_4a00,
        label: "ray traversal, program 0x74005b854a00".into(),
        reasons: vec![Reason::D753, Reason::D758],
        slots: vec![bottom_slot],
        accesses: vec![
            // 0: s_load_dwordx16 of the instance, from a computed address.
            Access {
                pc: 0x40,
                ..by_address(AccessKind::Scalar, instance, 64)
            },
            // 1: image_bvh_intersect_ray: the bottom level's root node.
            Access {
                pc: 0x80,
                ..by_address(AccessKind::RayIntersection, BOTTOM + 0x80, 64)
            },
            // 2: buffer_load_dwordx2 through the descriptor the instance's base formed.
            Access {
                pc: 0xc0,
                slot: Some(7),
                offset: Some(0x200),
                ..access(AccessKind::UntypedBuffer, Op::Load, 8, vec![])
            },
            // 3, 4: the LDS stack: a push by flat address, a pop by ds_read_b32.
            lane(
                Access {
                    pc: 0x100,
                    address: Some(0x8000_0000_0000_0010),
                    ..access(AccessKind::Flat, Op::Store, 4, vec![0x5eed])
                },
                3,
            ),
            lane(
                Access {
                    pc: 0x104,
                    offset: Some(0x10),
                    ..access(AccessKind::Lds, Op::Load, 4, vec![])
                },
                3,
            ),
            // 5, 6: the scratch stack: a push by flat address, a pop by scratch_load_dword.
            lane(
                Access {
                    pc: 0x108,
                    address: Some(0x7000_0000_0000_0020),
                    ..access(AccessKind::Flat, Op::Store, 4, vec![0x5c7a])
                },
                3,
            ),
            lane(
                Access {
                    pc: 0x10c,
                    offset: Some(0x20),
                    ..access(AccessKind::Scratch, Op::Load, 4, vec![])
                },
                3,
            ),
            // 7: a node read past the bottom level's reservation: the one escape.
            Access {
                pc: 0x84,
                ..by_address(AccessKind::RayIntersection, BOTTOM + 0x1_0000, 64)
            },
        ],
        ..DispatchInput::default()
    };
    let report = e.dispatch(&input).unwrap();

    // Device-addressed, not refused and skipped (A1).
    assert_eq!(report.mode, Mode::DeviceAddressed);
    assert!(report.refusals.is_empty());
    assert!(report.mode_reason.contains("D753") && report.mode_reason.contains("D758"));
    let routes: Vec<(Route, Rule)> = report
        .accesses
        .iter()
        .map(|a| (a.route.clone(), a.rule))
        .collect();
    assert_eq!(
        routes,
        vec![
            (Route::Device { address: instance }, Rule::W3),
            (
                Route::Device {
                    address: BOTTOM + 0x80
                },
                Rule::W3
            ),
            (
                Route::Device {
                    address: BOTTOM + 0x200
                },
                Rule::W1
            ),
            (Route::Lds { offset: 0x10 }, Rule::P1),
            (Route::Lds { offset: 0x10 }, Rule::P1),
            (Route::Scratch { offset: 0x20 }, Rule::P1),
            (Route::Scratch { offset: 0x20 }, Rule::P1),
            (
                Route::Device {
                    address: BOTTOM + 0x1_0000
                },
                Rule::W3
            ),
        ]
    );
    // The instance names the bottom level's base; the node and the buffer read through it.
    let v = |i: usize| report.accesses[i].values.clone();
    assert_eq!((v(0)[4], v(0)[5]), (BOTTOM as u32, (BOTTOM >> 32) as u32));
    assert_eq!(&v(1)[..2], &[0xb1, 0xb2]);
    assert_eq!(v(2), vec![0xd1, 0xd2]);
    assert_eq!(
        (v(4), v(6)),
        (vec![0x5eed], vec![0x5c7a]),
        "the stacks hold what was pushed"
    );
    // One escape, ours: it read zero.
    assert_eq!(report.escapes.len(), 1);
    let esc = &report.escapes[0];
    assert_eq!(
        (esc.access, esc.address, esc.class, esc.rule),
        (7, BOTTOM + 0x1_0000, EscapeClass::NoReservation, Rule::T4)
    );
    assert!(v(7).iter().all(|&w| w == 0));
    assert!(
        report.marks.is_empty(),
        "the pass stores nothing to guest memory"
    );
}
