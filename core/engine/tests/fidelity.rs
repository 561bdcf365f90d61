//! Issue 13: inputs that used to panic, abort or decide against the rules (`rules.rs`), one test each, named after
//! the rule it checks. Each drives the real engine and asserts on the named error or the report.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails by panicking"
)]

use dispatchscope_analysis::explain::{Detail, explain};
use dispatchscope_core::addr::ByteRange;
use dispatchscope_core::backend::BackendError;
use dispatchscope_core::chunk_table::TableError;
use dispatchscope_core::input::{Backing, MAX_PROBE_BOUND};
use dispatchscope_core::input::{
    BaseSource, Format, HostProtection, InputError, LimitsError, Op, PageBuffer, Reason, Swizzle,
};
use dispatchscope_core::report::{EscapeClass, HazardKind, LeftOutReason, Mode, Role};
use dispatchscope_core::{
    Access, AccessKind, DeviceLimits, DispatchInput, DispatchReport, Engine, EngineError, Event,
    Rule, Slot,
};

// --- helpers --------------------------------------------------------------------------------

fn engine() -> Engine {
    Engine::cpu(DeviceLimits::default()).unwrap()
}

fn engine_with(f: impl FnOnce(&mut DeviceLimits)) -> Engine {
    let mut limits = DeviceLimits::default();
    f(&mut limits);
    Engine::cpu(limits).unwrap()
}

fn limits_error(f: impl FnOnce(&mut DeviceLimits)) -> LimitsError {
    let mut limits = DeviceLimits::default();
    f(&mut limits);
    match Engine::cpu(limits) {
        Err(EngineError::Limits(e)) => e,
        Err(e) => panic!("expected a limits error, got {e}"),
        Ok(_) => panic!("expected a limits error, got an engine"),
    }
}

fn r(start: u64, end: u64) -> ByteRange {
    ByteRange::new(start, end)
}

fn apply(e: &mut Engine, event: Event) -> Vec<String> {
    e.apply(&event).unwrap().effects.clone()
}

fn reserve_as(e: &mut Engine, start: u64, end: u64, readable: bool, writable: bool) {
    apply(
        e,
        Event::Reserve {
            range: r(start, end),
            readable,
            writable,
            committed: true,
            backing: Backing::Private,
            host_base: None,
        },
    );
}

fn reserve(e: &mut Engine, start: u64, end: u64) {
    reserve_as(e, start, end, true, true);
}

fn dev() -> Vec<Reason> {
    vec![Reason::D753]
}

fn input(slots: Vec<Slot>, accesses: Vec<Access>, reasons: Vec<Reason>) -> DispatchInput {
    DispatchInput {
        program: 0x1000,
        slots,
        reasons,
        accesses,
        ..DispatchInput::default()
    }
}

fn through(kind: AccessKind, op: Op, slot: u32, offset: u64, size: u32, values: &[u32]) -> Access {
    Access {
        slot: Some(slot),
        offset: Some(offset),
        values: values.to_vec(),
        ..Access::new(kind, op, size)
    }
}

fn global(op: Op, address: u64, size: u32, values: &[u32]) -> Access {
    Access {
        address: Some(address),
        values: values.to_vec(),
        ..Access::new(AccessKind::Global, op, size)
    }
}

fn input_error(e: &mut Engine, d: &DispatchInput) -> InputError {
    match e.dispatch(d) {
        Err(EngineError::Input(err)) => err,
        other => panic!("expected an input error, got {other:?}"),
    }
}

fn run(e: &mut Engine, d: &DispatchInput) -> DispatchReport {
    e.dispatch(d).unwrap()
}

fn word(e: &Engine, address: u64) -> u32 {
    let mut b = [0u8; 4];
    e.memory().read_bytes(address, &mut b).unwrap();
    u32::from_le_bytes(b)
}

// --- panics and aborts ----------------------------------------------------------------------

#[test]
fn o10_push_word_at_u32_max_is_a_named_error() {
    let mut s = Slot::new(0, 0x10000, 0x100, false);
    s.base_source = BaseSource::PushBlock { word: u32::MAX };
    for reasons in [Vec::new(), dev()] {
        let d = input(vec![s.clone()], Vec::new(), reasons);
        let err = input_error(&mut engine(), &d);
        assert_eq!(
            err,
            InputError::PushWordMissing {
                slot: 0,
                word: u32::MAX,
                len: 0
            }
        );
        assert!(
            err.to_string().contains("4294967295 and 4294967296"),
            "{err}"
        );
    }
}

#[test]
fn o8_access_offsets_past_2_pow_64_are_named_errors() {
    let s = Slot::new(0, 0x10000, 0x100, false);
    let load = |offset: u64, index: Option<u32>| Access {
        index,
        ..through(AccessKind::UntypedBuffer, Op::Load, 0, offset, 4, &[])
    };
    let err = input_error(
        &mut engine(),
        &input(vec![s.clone()], vec![load(u64::MAX, None)], Vec::new()),
    );
    assert!(
        matches!(
            err,
            InputError::AccessOutsideSlot {
                offset: u64::MAX,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("0x10000000000000003"), "{err}");
    let err = input_error(
        &mut engine(),
        &input(
            vec![s.clone()],
            vec![load(u64::MAX - 1, Some(1))],
            Vec::new(),
        ),
    );
    assert!(
        matches!(err, InputError::OffsetOverflow { index: 1, .. }),
        "{err:?}"
    );
    let mut swizzled = s;
    swizzled.swizzle = Some(Swizzle {
        element_bytes: 4,
        index_stride: 64,
    });
    let err = input_error(
        &mut engine(),
        &input(
            vec![swizzled],
            vec![load(0x1000_0000_0000_0000, Some(1))],
            Vec::new(),
        ),
    );
    assert!(matches!(err, InputError::OffsetOverflow { .. }), "{err:?}");
}

#[test]
fn o5_a_slot_of_2_pow_64_bytes_is_refused_by_name() {
    // maxStorageBufferRange is a 32-bit value: more is a device no one has.
    assert_eq!(
        limits_error(|l| l.max_storage_buffer_range = u64::MAX),
        LimitsError::StorageBufferRange { value: u64::MAX }
    );
    let mut e = engine_with(|l| l.max_storage_buffer_range = u64::from(u32::MAX));
    let d = input(
        vec![Slot::new(0, 0, u64::MAX, true)],
        vec![through(AccessKind::UntypedBuffer, Op::Store, 0, 0, 4, &[7])],
        Vec::new(),
    );
    let report = run(&mut e, &d);
    assert_eq!(report.mode, Mode::Refused);
    assert_eq!(report.refusals[0].rule, Rule::O5);
}

#[test]
fn limits_host_page_of_2_pow_63_is_a_named_error() {
    assert_eq!(
        limits_error(|l| l.host_page_bytes = 1 << 63),
        LimitsError::HostPage { value: 1 << 63 }
    );
}

#[test]
fn t2_probe_bound_of_u32_max_is_a_named_error() {
    assert_eq!(
        limits_error(|l| l.probe_bound = u32::MAX),
        LimitsError::ProbeBound { value: u32::MAX }
    );
    // The largest bound allowed runs.
    let mut e = engine_with(|l| l.probe_bound = MAX_PROBE_BOUND);
    reserve(&mut e, 0x10000, 0x11000);
    let report = run(
        &mut e,
        &input(Vec::new(), vec![global(Op::Load, 0x10000, 4, &[])], dev()),
    );
    assert_eq!(report.mode, Mode::DeviceAddressed);
    assert!(report.table.unwrap().probe_histogram.len() <= 17);
}

#[test]
fn m1_a_reservation_of_the_whole_address_space_is_one_run() {
    let mut e = engine();
    apply(
        &mut e,
        Event::Reserve {
            range: r(0, 0xffff_ffff_ffff_f000),
            readable: false,
            writable: true,
            committed: false,
            backing: Backing::Private,
            host_base: None,
        },
    );
    let res = e.memory().reservations().next().unwrap();
    assert_eq!(res.pages.len(), 0x000f_ffff_ffff_ffff);
    assert_eq!(res.pages.n_runs(), 1);
    apply(
        &mut e,
        Event::Protect {
            range: r(0x4000_0000_0000, 0x4000_0000_2000),
            readable: true,
            writable: true,
        },
    );
    let res = e.memory().reservations().next().unwrap();
    assert_eq!(res.pages.n_runs(), 3);
    assert_eq!(e.memory().readable_runs().len(), 1);
    // Protecting the two pages back joins the runs again: runs stay maximal.
    apply(
        &mut e,
        Event::Protect {
            range: r(0x4000_0000_0000, 0x4000_0000_2000),
            readable: false,
            writable: true,
        },
    );
    assert_eq!(e.memory().reservations().next().unwrap().pages.n_runs(), 1);
    // A second reservation over it is refused by name, found without a scan.
    let err = e
        .apply(&Event::Reserve {
            range: r(0x1000, 0x2000),
            readable: true,
            writable: true,
            committed: true,
            backing: Backing::Private,
            host_base: None,
        })
        .unwrap_err();
    assert!(err.to_string().contains("overlaps"), "{err}");
}

#[test]
fn t2_a_mapping_of_most_of_the_address_space_is_refused_by_name() {
    let mut e = engine();
    reserve(&mut e, 0, 0xffff_ffff_ffff_f000);
    let err = e
        .dispatch(&input(
            Vec::new(),
            vec![global(Op::Load, 0x10000, 4, &[])],
            dev(),
        ))
        .unwrap_err();
    assert!(
        matches!(
            err,
            EngineError::Backend(BackendError::Import { .. })
                | EngineError::Table(TableError::TooLarge { .. })
        ),
        "{err}"
    );
}

#[test]
fn t2_a_terabyte_mapping_counts_its_chunks_before_listing_them() {
    let mut e = engine();
    reserve(&mut e, 0x1_0000_0000, 0x1_0000_0000 + (1 << 46));
    let err = e
        .dispatch(&input(
            Vec::new(),
            vec![global(Op::Load, 0x1_0000_0000, 4, &[])],
            dev(),
        ))
        .unwrap_err();
    match err {
        EngineError::Table(TableError::TooLarge { n_entries, .. }) => {
            assert_eq!(n_entries, 1 << 30);
        }
        other => panic!("{other}"),
    }
}

// --- rule deviations ------------------------------------------------------------------------

fn format_slot(i: u32, resolved: bool, alias_of: Option<u32>) -> Slot {
    Slot {
        format: Some(Format::R32Uint),
        resolved,
        alias_of,
        ..Slot::new(i, 0x10000, 0x100, true)
    }
}

#[test]
fn w2_a_format_store_through_a_copy_of_an_unresolved_slot_is_refused() {
    let mut e = engine();
    reserve(&mut e, 0x10000, 0x11000);
    let d = input(
        vec![format_slot(0, false, None), format_slot(1, true, Some(0))],
        vec![through(AccessKind::FormatBuffer, Op::Store, 1, 0, 4, &[5])],
        dev(),
    );
    let report = run(&mut e, &d);
    assert_eq!(report.mode, Mode::Refused);
    let w2 = report.refusals.iter().find(|f| f.rule == Rule::W2).unwrap();
    assert_eq!(w2.slot, Some(1));
    assert!(
        w2.message.contains("an exact copy (D937) of slot 0") && w2.message.contains("O3"),
        "{}",
        w2.message
    );
    // The copy's binding follows its slot: both unbound.
    assert!(report.slots.iter().all(|b| !b.resolved));
}

#[test]
fn o3_an_unresolved_copy_of_a_resolved_slot_is_bound_with_it() {
    let mut e = engine();
    reserve(&mut e, 0x10000, 0x11000);
    let d = input(
        vec![format_slot(0, true, None), format_slot(1, false, Some(0))],
        vec![
            through(AccessKind::UntypedBuffer, Op::Store, 1, 0, 4, &[5]),
            through(AccessKind::UntypedBuffer, Op::Store, 0, 4, 4, &[6]),
        ],
        dev(),
    );
    let report = run(&mut e, &d);
    assert_eq!(report.mode, Mode::DeviceAddressed);
    let copy = report.slots.iter().find(|b| b.slot == 1).unwrap();
    assert!(copy.resolved);
    assert_eq!(copy.role, Role::Copy { of: 0 });
    assert!(report.hazards.is_empty(), "{:?}", report.hazards);
    assert_eq!(word(&e, 0x10000), 5);
    assert_eq!(word(&e, 0x10004), 6);
}

#[test]
fn o1_a_store_through_a_read_only_slot_is_a_named_error() {
    let d = input(
        vec![Slot::new(3, 0x10000, 0x100, false)],
        vec![through(AccessKind::UntypedBuffer, Op::Store, 3, 8, 4, &[1])],
        Vec::new(),
    );
    assert_eq!(
        input_error(&mut engine(), &d),
        InputError::StoreThroughReadOnlySlot { access: 0, slot: 3 }
    );
}

fn store_escapes(e: &mut Engine, address: u64) -> DispatchReport {
    let report = run(
        e,
        &input(Vec::new(), vec![global(Op::Store, address, 4, &[9])], dev()),
    );
    assert_eq!(report.escapes.len(), 1, "{:?}", report.accesses);
    assert_eq!(word(e, address), 0, "the store must not land");
    report
}

#[test]
fn m3_a_guest_protect_to_read_only_drops_the_mapping() {
    let mut e = engine();
    reserve(&mut e, 0x10000, 0x12000);
    run(
        &mut e,
        &input(Vec::new(), vec![global(Op::Load, 0x10000, 4, &[])], dev()),
    );
    let effects = apply(
        &mut e,
        Event::Protect {
            range: r(0x11000, 0x12000),
            readable: true,
            writable: false,
        },
    );
    assert!(
        effects
            .iter()
            .any(|x| x.contains("M3: dropped the mapping of 0x11000..0x12000")),
        "{effects:?}"
    );
    let report = store_escapes(&mut e, 0x11000);
    let esc = &report.escapes[0];
    assert_eq!(esc.class, EscapeClass::LeftOut);
    assert_eq!(esc.reason, Some(LeftOutReason::NotReadWrite));
    assert!(esc.message.contains("event 1 (protect)"), "{}", esc.message);
    // The page that still qualifies stays mapped.
    let report = run(
        &mut e,
        &input(Vec::new(), vec![global(Op::Store, 0x10000, 4, &[3])], dev()),
    );
    assert!(report.escapes.is_empty());
    assert_eq!(word(&e, 0x10000), 3);
}

#[test]
fn m3_a_page_the_guest_may_not_write_is_not_mapped_by_a_host_protect() {
    let mut e = engine();
    reserve_as(&mut e, 0x10000, 0x11000, true, false);
    run(
        &mut e,
        &input(Vec::new(), vec![global(Op::Load, 0x10000, 4, &[])], dev()),
    );
    let effects = apply(
        &mut e,
        Event::HostProtect {
            range: r(0x10000, 0x11000),
            protection: HostProtection::ReadWrite,
        },
    );
    assert!(!effects.iter().any(|x| x.contains("M5")), "{effects:?}");
    let report = store_escapes(&mut e, 0x10000);
    assert_eq!(report.escapes[0].reason, Some(LeftOutReason::NotReadWrite));
}

#[test]
fn m3_shared_backing_and_a_lowered_host_protection_drop_the_mapping() {
    for event in [
        Event::SetBacking {
            range: r(0x10000, 0x11000),
            backing: Backing::Shared,
        },
        Event::HostProtect {
            range: r(0x10000, 0x11000),
            protection: HostProtection::Read,
        },
    ] {
        let mut e = engine();
        reserve(&mut e, 0x10000, 0x11000);
        run(
            &mut e,
            &input(Vec::new(), vec![global(Op::Load, 0x10000, 4, &[])], dev()),
        );
        let effects = apply(&mut e, event.clone());
        assert!(
            effects.iter().any(|x| x.contains("M3: dropped")),
            "{event:?}: {effects:?}"
        );
        let report = store_escapes(&mut e, 0x10000);
        assert!(report.mappings.unwrap().pieces.is_empty());
    }
}

#[test]
fn c3_a_deferred_copy_under_a_holder_lands_before_the_bound_dispatch() {
    let mut e = engine();
    reserve(&mut e, 0x10000, 0x11000);
    apply(
        &mut e,
        Event::DeferCopy {
            address: 0x10000,
            bytes: 0x1111_1111u32.to_le_bytes().to_vec(),
        },
    );
    let bound = run(
        &mut e,
        &input(
            vec![Slot::new(0, 0x10000, 0x100, true)],
            vec![
                through(AccessKind::UntypedBuffer, Op::Load, 0, 0, 4, &[]),
                through(
                    AccessKind::UntypedBuffer,
                    Op::Store,
                    0,
                    0,
                    4,
                    &[0x2222_2222],
                ),
            ],
            Vec::new(),
        ),
    );
    assert_eq!(bound.mode, Mode::Bound);
    assert_eq!(bound.before.copies, vec![r(0x10000, 0x10004)]);
    assert_eq!(bound.accesses[0].values, vec![0x1111_1111]);
    let text = explain(&bound, Detail::default());
    assert!(text.contains("a holder's binding covers them"), "{text}");
    run(
        &mut e,
        &input(Vec::new(), vec![global(Op::Load, 0x10000, 4, &[])], dev()),
    );
    assert_eq!(word(&e, 0x10000), 0x2222_2222);
}

#[test]
fn c3_a_copy_no_binding_covers_stays_deferred() {
    let mut e = engine();
    reserve(&mut e, 0x10000, 0x12000);
    apply(
        &mut e,
        Event::DeferCopy {
            address: 0x11000,
            bytes: vec![1; 4],
        },
    );
    let bound = run(
        &mut e,
        &input(
            vec![Slot::new(0, 0x10000, 0x100, true)],
            vec![through(AccessKind::UntypedBuffer, Op::Store, 0, 0, 4, &[2])],
            Vec::new(),
        ),
    );
    assert!(bound.before.copies.is_empty());
    assert_eq!(bound.before.still_deferred, 1);
    assert_eq!(word(&e, 0x11000), 0);
}

#[test]
fn t2_the_table_grows_until_700_scattered_pages_fit_probe_bound_1() {
    let mut e = engine_with(|l| l.probe_bound = 1);
    let mut x = 0x2545_f491u64;
    let mut bases = Vec::new();
    while bases.len() < 700 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let base = (x % (1 << 36)) & !0xfff;
        if base >= 0x10000 && !bases.iter().any(|&b: &u64| b.abs_diff(base) < 0x2000) {
            bases.push(base);
        }
    }
    for &b in &bases {
        reserve(&mut e, b, b + 0x1000);
    }
    let accesses = bases.iter().map(|&b| global(Op::Load, b, 4, &[])).collect();
    let report = run(&mut e, &input(Vec::new(), accesses, dev()));
    assert!(report.escapes.is_empty(), "{:?}", report.escapes.first());
    let table = report.table.unwrap();
    assert_eq!(table.n_chunks, 700);
    assert!(table.capacity > 65536, "{}", table.capacity);
}

#[test]
fn l1_a_bound_load_after_a_device_store_to_its_word_is_a_hazard() {
    let mut e = engine();
    reserve(&mut e, 0x10000, 0x11000);
    let report = run(
        &mut e,
        &input(
            vec![Slot::new(0, 0x10000, 0x100, true)],
            vec![
                global(Op::Store, 0x10008, 4, &[0x33]),
                through(AccessKind::UntypedBuffer, Op::Load, 0, 8, 4, &[]),
            ],
            dev(),
        ),
    );
    assert_eq!(
        report.accesses[1].values,
        vec![0],
        "the load reads the upload"
    );
    let h = &report.hazards[0];
    assert_eq!(h.kind, HazardKind::StaleBoundLoad);
    assert!(h.ours);
    assert_eq!((h.device_store, h.bound_load), (0, Some(1)));
    assert_eq!(h.address, 0x10008);
    assert!(
        h.message.contains("dispatchscope's addition"),
        "{}",
        h.message
    );
}

// --- accepted silently, now named errors ----------------------------------------------------

#[test]
fn o7_an_alignment_that_no_device_has_is_a_named_error() {
    for a in [0, 3, 0x1000] {
        assert_eq!(
            limits_error(|l| l.min_storage_buffer_offset_alignment = a),
            LimitsError::Alignment { value: a }
        );
    }
}

#[test]
fn w3_a_ray_intersection_store_is_a_named_error() {
    let d = input(
        Vec::new(),
        vec![Access {
            address: Some(0x10000),
            values: vec![1],
            ..Access::new(AccessKind::RayIntersection, Op::Store, 4)
        }],
        dev(),
    );
    assert_eq!(
        input_error(&mut engine(), &d),
        InputError::RayStore { access: 0 }
    );
}

#[test]
fn o11_a_page_buffer_page_that_is_not_page_aligned_is_a_named_error() {
    let mut d = input(Vec::new(), Vec::new(), Vec::new());
    d.page_buffer = Some(PageBuffer {
        pages: vec![0x10000, 0x10800],
        written: false,
    });
    assert_eq!(
        input_error(&mut engine(), &d),
        InputError::PageBufferUnaligned {
            page: 0x10800,
            page_bytes: 0x1000
        }
    );
}

#[test]
fn w1_a_global_access_that_wraps_the_address_space_is_named_as_such() {
    let d = input(
        Vec::new(),
        vec![global(Op::Load, 0xffff_ffff_ffff_fffe, 4, &[])],
        dev(),
    );
    let err = input_error(&mut engine(), &d);
    assert_eq!(
        err,
        InputError::AddressWraps {
            access: 0,
            address: 0xffff_ffff_ffff_fffe,
            size: 4
        }
    );
    assert!(err.to_string().contains("pass the end"), "{err}");
}

#[test]
fn m1_contents_no_reservation_holds_are_a_named_error() {
    let mut e = engine();
    reserve(&mut e, 0x10000, 0x11000);
    assert!(e.try_load_contents(0x10ffc, &[1; 4]).is_ok());
    assert!(matches!(
        e.try_load_contents(0x10ffe, &[1; 4]),
        Err(EngineError::Memory(_))
    ));
    assert!(matches!(
        e.try_load_contents(0x20000, &[1]),
        Err(EngineError::Memory(_))
    ));
    assert!(matches!(
        e.try_load_contents(u64::MAX, &[1, 2]),
        Err(EngineError::Memory(_))
    ));
}

// --- explanations ---------------------------------------------------------------------------

#[test]
fn t4_a_partial_escape_says_which_bytes_escaped_and_which_landed() {
    let mut e = engine();
    reserve_as(&mut e, 0x10000, 0x14000, false, true);
    reserve(&mut e, 0x14000, 0x15000);
    e.load_contents(0x14000, &0x4444_4444u32.to_le_bytes());
    let report = run(
        &mut e,
        &input(
            Vec::new(),
            vec![
                global(Op::Load, 0x13ffc, 8, &[]),
                global(Op::Store, 0x13ffc, 8, &[1, 2]),
            ],
            dev(),
        ),
    );
    assert_eq!(report.accesses[0].values, vec![0, 0x4444_4444]);
    let load = &report.escapes[0].message;
    assert!(
        load.contains("bytes 0x13ffc..0x14000 reached no mapping and read zero")
            && load.contains("bytes 0x14000..0x14004 reached guest memory")
            && load.contains("returned [0x0, 0x44444444]"),
        "{load}"
    );
    let store = &report.escapes[1].message;
    assert!(
        store.contains("reached no mapping and stored nothing") && store.contains("were stored"),
        "{store}"
    );
    assert_eq!(word(&e, 0x14000), 2);
}

#[test]
fn o5_a_lone_slot_wider_than_the_range_is_not_said_to_widen() {
    let report = run(
        &mut engine(),
        &input(
            vec![Slot::new(0, 0x10000, (128 << 20) + 4, false)],
            Vec::new(),
            Vec::new(),
        ),
    );
    let o5 = &report.refusals[0];
    assert_eq!(o5.rule, Rule::O5);
    assert!(
        !o5.message.contains("widens") && o5.message.contains("nothing was widened"),
        "{}",
        o5.message
    );
}

#[test]
fn o4_a_tie_is_explained_as_the_lowest_slot_number() {
    let report = run(
        &mut engine(),
        &input(
            vec![
                Slot::new(7, 0x10000, 0x100, true),
                Slot::new(2, 0x10000, 0x40, false),
            ],
            Vec::new(),
            Vec::new(),
        ),
    );
    assert_eq!(report.sets[0].holder, 2);
    let text = explain(&report, Detail::default());
    assert!(
        text.contains("O4 tie: slot 2 and slot 7 share the lowest base 0x10000")
            && text.contains("lowest slot number"),
        "{text}"
    );
}
