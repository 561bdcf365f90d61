//! One or more end-to-end tests per rule (`rules.rs`), each named after the rule it checks (`o7_…`,
//! `m5_…`). Every test drives the real engine (`Engine::cpu`, `Engine::apply`, `Engine::dispatch`)
//! and asserts on the `DispatchReport` it returns, never on the engine's insides alone.
//! `every_rule_has_a_test` reads this file and fails when a rule of `Rule::ALL` has no test.
//!
//! Addresses, sizes and slot numbers here are ours unless a comment says otherwise; the cases the
//! records cite live in `seeds.rs`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails by panicking"
)]

use dispatchscope_core::addr::ByteRange;
use dispatchscope_core::input::{Backing, HostProtection};
use dispatchscope_core::input::{BaseSource, Format, InputError, Op, PageBuffer, Reason, Swizzle};
use dispatchscope_core::report::LookupOutcome;
use dispatchscope_core::report::Role;
use dispatchscope_core::report::{EscapeClass, EventReport, LeftOutReason, Mode, Placement, Route};
use dispatchscope_core::rules::DEVICE_TABLE_PUSH_WORD;
use dispatchscope_core::{
    Access, AccessKind, Backend, DeviceLimits, DeviceWriteBackError, DispatchInput, DispatchKind,
    DispatchReport, Engine, EngineError, Event, Rule, Slot,
};

// ---------------------------------------------------------------------------------------------
// Helpers: one line per event, slot, access or check.
// ---------------------------------------------------------------------------------------------

fn engine() -> Engine {
    Engine::cpu(DeviceLimits::default()).unwrap()
}

fn engine_with(f: impl FnOnce(&mut DeviceLimits)) -> Engine {
    let mut limits = DeviceLimits::default();
    f(&mut limits);
    Engine::cpu(limits).unwrap()
}

fn r(start: u64, end: u64) -> ByteRange {
    ByteRange::new(start, end)
}

fn apply(e: &mut Engine, event: Event) -> EventReport {
    e.apply(&event).unwrap().clone()
}

/// Reserves `start..end` readable, writable, committed and private: all of it mappable.
fn reserve(e: &mut Engine, start: u64, end: u64) {
    reserve_as(e, start, end, true, true, true);
}

fn reserve_as(
    e: &mut Engine,
    start: u64,
    end: u64,
    readable: bool,
    writable: bool,
    committed: bool,
) {
    apply(
        e,
        Event::Reserve {
            range: r(start, end),
            readable,
            writable,
            committed,
            backing: Backing::Private,
            host_base: None,
        },
    );
}

fn slot(i: u32, base: u64, size_bytes: u64, written: bool) -> Slot {
    Slot::new(i, base, size_bytes, written)
}

fn unresolved(i: u32, base: u64, size_bytes: u64, written: bool) -> Slot {
    Slot {
        resolved: false,
        ..Slot::new(i, base, size_bytes, written)
    }
}

fn copy_of(i: u32, of: &Slot, written: bool) -> Slot {
    Slot {
        alias_of: Some(of.slot),
        ..Slot::new(i, of.base, of.size_bytes, written)
    }
}

fn pushed(i: u32, descriptor_base: u64, size_bytes: u64, written: bool, word: u32) -> Slot {
    Slot {
        base_source: BaseSource::PushBlock { word },
        ..Slot::new(i, descriptor_base, size_bytes, written)
    }
}

fn with_format(s: Slot, format: Format) -> Slot {
    Slot {
        format: Some(format),
        ..s
    }
}

fn access(kind: AccessKind, op: Op, size_bytes: u32, values: Vec<u32>) -> Access {
    Access {
        pc: 0x100,
        values,
        ..Access::new(kind, op, size_bytes)
    }
}

fn at(kind: AccessKind, address: u64, size_bytes: u32) -> Access {
    Access {
        address: Some(address),
        ..access(kind, Op::Load, size_bytes, vec![])
    }
}

fn at_store(kind: AccessKind, address: u64, values: &[u32]) -> Access {
    Access {
        address: Some(address),
        ..access(kind, Op::Store, 4 * values.len() as u32, values.to_vec())
    }
}

fn load(address: u64, size_bytes: u32) -> Access {
    at(AccessKind::Global, address, size_bytes)
}

fn store(address: u64, values: &[u32]) -> Access {
    at_store(AccessKind::Global, address, values)
}

fn flat(address: u64) -> Access {
    at(AccessKind::Flat, address, 4)
}

fn flat_store(address: u64, value: u32) -> Access {
    at_store(AccessKind::Flat, address, &[value])
}

fn buf_load(slot: u32, offset: u64, size_bytes: u32) -> Access {
    Access {
        slot: Some(slot),
        offset: Some(offset),
        ..access(AccessKind::UntypedBuffer, Op::Load, size_bytes, vec![])
    }
}

fn buf_store(slot: u32, offset: u64, values: &[u32]) -> Access {
    buf_store_sized(slot, offset, 4 * values.len() as u32, values)
}

fn buf_store_sized(slot: u32, offset: u64, size_bytes: u32, values: &[u32]) -> Access {
    Access {
        slot: Some(slot),
        offset: Some(offset),
        ..access(
            AccessKind::UntypedBuffer,
            Op::Store,
            size_bytes,
            values.to_vec(),
        )
    }
}

fn format_load(slot: u32, index: u32, size_bytes: u32) -> Access {
    Access {
        slot: Some(slot),
        offset: Some(0),
        index: Some(index),
        ..access(AccessKind::FormatBuffer, Op::Load, size_bytes, vec![])
    }
}

fn lds(op: Op, offset: u64, values: &[u32]) -> Access {
    Access {
        offset: Some(offset),
        ..access(AccessKind::Lds, op, 4, values.to_vec())
    }
}

fn scratch(op: Op, offset: u64, values: &[u32]) -> Access {
    Access {
        offset: Some(offset),
        ..access(AccessKind::Scratch, op, 4, values.to_vec())
    }
}

fn lane(a: Access, workgroup: u32, lane: u32) -> Access {
    Access {
        workgroup,
        lane,
        ..a
    }
}

/// A compute dispatch the host knew every range of: bound by D953.
fn bound(slots: Vec<Slot>, accesses: Vec<Access>) -> DispatchInput {
    DispatchInput {
        program: 0x4000_0000_1000,
        slots,
        accesses,
        ..DispatchInput::default()
    }
}

/// A compute dispatch with a D753 reason: device-addressed by A1.
fn device(slots: Vec<Slot>, accesses: Vec<Access>) -> DispatchInput {
    DispatchInput {
        reasons: vec![Reason::D753],
        ..bound(slots, accesses)
    }
}

fn run(e: &mut Engine, input: &DispatchInput) -> DispatchReport {
    e.dispatch(input).unwrap()
}

/// Runs one dispatch on a fresh engine.
fn run1(input: &DispatchInput) -> DispatchReport {
    run(&mut engine(), input)
}

fn input_error(e: &mut Engine, input: &DispatchInput) -> InputError {
    match e.dispatch(input) {
        Err(EngineError::Input(err)) => err,
        other => panic!("expected an input error, got {other:?}"),
    }
}

/// The sets as (holder, members in slot order).
fn sets(report: &DispatchReport) -> Vec<(u32, Vec<u32>)> {
    report
        .sets
        .iter()
        .map(|s| (s.holder, s.members.iter().map(|m| m.slot).collect()))
        .collect()
}

/// Plans `slots` through the engine (a bound dispatch) and checks the sets (O1–O4).
fn check_sets(slots: Vec<Slot>, expected: &[(u32, &[u32])]) -> DispatchReport {
    let report = run1(&bound(slots, vec![]));
    let want: Vec<(u32, Vec<u32>)> = expected.iter().map(|(h, m)| (*h, m.to_vec())).collect();
    assert_eq!(sets(&report), want);
    report
}

fn refusal_rules(report: &DispatchReport) -> Vec<Rule> {
    report.refusals.iter().map(|r| r.rule).collect()
}

fn route(report: &DispatchReport, access: usize) -> (Route, Rule) {
    let a = &report.accesses[access];
    (a.route.clone(), a.rule)
}

fn values(report: &DispatchReport, access: usize) -> Vec<u32> {
    report.accesses[access].values.clone()
}

fn escape_class(
    report: &DispatchReport,
    access: usize,
) -> Option<(EscapeClass, Option<LeftOutReason>)> {
    report
        .escapes
        .iter()
        .find(|e| e.access == access)
        .map(|e| (e.class, e.reason))
}

fn word(e: &Engine, address: u64) -> u32 {
    let mut b = [0u8; 4];
    e.memory().read_bytes(address, &mut b).unwrap();
    u32::from_le_bytes(b)
}

fn mapped(report: &DispatchReport) -> Vec<ByteRange> {
    report
        .mappings
        .as_ref()
        .unwrap()
        .pieces
        .iter()
        .map(|p| p.guest)
        .collect()
}

fn left_out(report: &DispatchReport) -> Vec<(ByteRange, LeftOutReason)> {
    report
        .mappings
        .as_ref()
        .unwrap()
        .left_out
        .iter()
        .map(|l| (l.guest, l.reason))
        .collect()
}

fn effects_mention(report: &EventReport, text: &str) -> bool {
    report.effects.iter().any(|e| e.contains(text))
}

// A page-aligned region the device-addressed tests reserve: 0x10000..0x14000, four pages.
const RES: u64 = 0x1_0000;
const RES_END: u64 = 0x1_4000;

// ---------------------------------------------------------------------------------------------
// The rule index.
// ---------------------------------------------------------------------------------------------

/// The names of the test functions in this file: each `fn` that follows a `#[test]` line.
fn test_names(source: &str) -> Vec<String> {
    let lines: Vec<&str> = source.lines().map(str::trim).collect();
    lines
        .windows(2)
        .filter(|w| w[0] == "#[test]")
        .filter_map(|w| w[1].strip_prefix("fn "))
        .map(|rest| {
            rest.chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect()
        })
        .collect()
}

#[test]
fn every_rule_has_a_test() {
    let names = test_names(include_str!("rules.rs"));
    let missing: Vec<&str> = Rule::ALL
        .iter()
        .map(|r| r.id())
        .filter(|id| {
            let prefix = format!("{}_", id.to_lowercase());
            !names.iter().any(|n| n.starts_with(&prefix))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "rules with no test named after them: {missing:?}"
    );
    assert!(
        names.len() > Rule::ALL.len(),
        "found only {} tests",
        names.len()
    );
}

// ---------------------------------------------------------------------------------------------
// D953: O1–O11 through the engine.
// ---------------------------------------------------------------------------------------------

#[test]
fn o1_written_overlap_binds_one_buffer() {
    let report = check_sets(
        vec![slot(0, 0x1000, 0x20, true), slot(1, 0x1010, 0x20, false)],
        &[(0, &[1])],
    );
    assert_eq!(report.mode, Mode::Bound);
    assert_eq!(report.sets[0].joins.len(), 1);
    assert_eq!(report.sets[0].joins[0].overlap, r(0x1010, 0x1020));
}

#[test]
fn o1_read_only_overlap_never_joins() {
    let report = check_sets(
        vec![slot(0, 0x1000, 0x20, false), slot(1, 0x1010, 0x20, false)],
        &[],
    );
    assert!(report.slots.iter().all(|b| b.role == Role::Alone));
}

#[test]
fn o1_touching_ranges_share_no_byte() {
    check_sets(
        vec![slot(0, 0x1000, 0x10, true), slot(1, 0x1010, 0x10, true)],
        &[],
    );
}

#[test]
fn o2_a_slot_joins_a_set_through_any_member() {
    // 0 (written) overlaps 1 (read-only) overlaps 2 (written); 0 and 2 share no byte.
    check_sets(
        vec![
            slot(0, 0x1000, 0x20, true),
            slot(1, 0x1018, 0x20, false),
            slot(2, 0x1030, 0x20, true),
        ],
        &[(0, &[1, 2])],
    );
    // The third is read-only: it shares bytes only with read-only 1, so it stays alone.
    check_sets(
        vec![
            slot(0, 0x1000, 0x20, true),
            slot(1, 0x1018, 0x20, false),
            slot(2, 0x1030, 0x20, false),
        ],
        &[(0, &[1])],
    );
    // Two separate sets.
    check_sets(
        vec![
            slot(0, 0x1000, 0x20, true),
            slot(1, 0x1010, 0x20, false),
            slot(2, 0x2000, 0x20, true),
            slot(3, 0x2000, 0x40, false),
        ],
        &[(0, &[1]), (2, &[3])],
    );
}

#[test]
fn o3_exact_copy_follows_its_slot_and_gets_its_binding() {
    let s1 = slot(1, 0x1020, 0x20, false);
    let c = copy_of(2, &s1, false);
    let report = check_sets(vec![slot(0, 0x1000, 0x30, true), s1, c], &[(0, &[1, 2])]);
    let (b1, b2) = (&report.slots[1], &report.slots[2]);
    assert_eq!(
        (b2.holder, b2.offset, b2.binding, b2.set),
        (b1.holder, b1.offset, b1.binding, b1.set)
    );
    assert_eq!(b2.role, Role::Copy { of: 1 });
}

#[test]
fn o3_a_written_copy_makes_its_slot_join() {
    // 0 and 1 are read-only and overlap; 1's written copy makes the overlap a join.
    let s1 = slot(1, 0x1020, 0x20, false);
    let c = copy_of(2, &s1, true);
    check_sets(vec![slot(0, 0x1000, 0x30, false), s1, c], &[(0, &[1, 2])]);
}

#[test]
fn o3_copy_accesses_reach_the_same_bytes() {
    let s1 = slot(1, 0x1020, 0x20, true);
    let c = copy_of(2, &s1, true);
    let input = bound(
        vec![slot(0, 0x1000, 0x30, true), s1, c],
        vec![buf_store(2, 4, &[7]), buf_load(1, 4, 4)],
    );
    let report = run1(&input);
    assert_eq!(
        route(&report, 0).0,
        Route::Bound {
            holder: 0,
            offset: 0x24
        }
    );
    assert_eq!(
        values(&report, 1),
        vec![7],
        "one buffer: slot 1 reads what its copy stored"
    );
}

#[test]
fn o4_holder_is_the_lowest_base() {
    check_sets(
        vec![slot(1, 0x1008, 0x10, true), slot(9, 0x1000, 0x10, false)],
        &[(9, &[1])],
    );
}

#[test]
fn o4_on_a_tie_the_earliest_slot_holds() {
    // Listed 5 first, but slot 3 is the earlier slot.
    let report = check_sets(
        vec![slot(5, 0x2000, 0x10, true), slot(3, 0x2000, 0x10, false)],
        &[(3, &[5])],
    );
    assert_eq!(report.slots[1].role, Role::Holder);
    assert_eq!(report.slots[0].role, Role::Member);
}

#[test]
fn o5_the_holder_ends_where_the_last_member_ends() {
    let report = check_sets(
        vec![slot(0, 0x1000, 0x20, true), slot(1, 0x1010, 0x100, true)],
        &[(0, &[1])],
    );
    assert_eq!((report.sets[0].base, report.sets[0].end), (0x1000, 0x1110));
    assert_eq!(
        report.slots[0].binding,
        r(0, 0x110),
        "the holder binds its widened range"
    );
}

#[test]
fn o5_a_holder_past_max_storage_buffer_range_is_refused_as_ours() {
    let mut e = engine_with(|l| l.max_storage_buffer_range = 0x100);
    let report = run(
        &mut e,
        &bound(
            vec![slot(0, 0x1000, 0x80, true), slot(1, 0x1040, 0x100, true)],
            vec![],
        ),
    );
    assert_eq!(report.mode, Mode::Refused);
    assert_eq!(refusal_rules(&report), vec![Rule::O5]);
    assert!(report.refusals[0].ours);
    assert!(
        report.refusals[0].message.contains("0x140"),
        "{}",
        report.refusals[0].message
    );
}

#[test]
fn o6_members_bind_the_holder_at_their_offset_to_the_widened_end() {
    let input = bound(
        vec![slot(0, 0x1000, 0x20, true), slot(1, 0x1010, 0x40, false)],
        vec![buf_load(1, 0x8, 4), buf_store(0, 0x18, &[0xaa])],
    );
    let report = run1(&input);
    let m = &report.sets[0].members[0];
    assert_eq!((m.slot, m.offset, m.binding), (1, 0x10, r(0x10, 0x50)));
    assert_eq!(
        route(&report, 0),
        (
            Route::Bound {
                holder: 0,
                offset: 0x18
            },
            Rule::O6
        )
    );
    assert_eq!(
        route(&report, 1),
        (
            Route::Bound {
                holder: 0,
                offset: 0x18
            },
            Rule::O8
        )
    );
}

#[test]
fn o7_a_misaligned_member_is_refused_by_name() {
    // The limit is 0x100 (Vulkan's largest): the member sits 0x100004 into its holder.
    let mut e = engine_with(|l| l.min_storage_buffer_offset_alignment = 0x100);
    let input = bound(
        vec![
            slot(18, 0x10_0000, 0x20_0000, true),
            slot(20, 0x20_0004, 0x1000, true),
        ],
        vec![buf_store(20, 0, &[1])],
    );
    let report = run(&mut e, &input);
    assert_eq!(report.mode, Mode::Refused);
    assert_eq!(refusal_rules(&report), vec![Rule::O7]);
    let refusal = &report.refusals[0];
    assert_eq!(refusal.slot, Some(20));
    assert_eq!(
        refusal.message,
        "slot 20 binds holder slot 18 at offset 0x100004, not a multiple of minStorageBufferOffsetAlignment 0x100"
    );
    let named: Vec<(&str, &str)> = refusal
        .values
        .iter()
        .map(|v| (v.name.as_str(), v.value.as_str()))
        .collect();
    assert!(named.contains(&("offset", "0x100004")));
    assert!(named.contains(&("minStorageBufferOffsetAlignment", "0x100")));
    assert!(named.contains(&("holder", "18")));
    assert_eq!(route(&report, 0).0, Route::NotRun);
    assert!(
        report.write_back.is_empty(),
        "a refused dispatch writes nothing back"
    );
}

#[test]
fn o7_an_aligned_member_on_another_device_binds() {
    let mut e = engine_with(|l| l.min_storage_buffer_offset_alignment = 4);
    let input = bound(
        vec![
            slot(18, 0x10_0000, 0x20_0000, true),
            slot(20, 0x20_0004, 0x1000, true),
        ],
        vec![],
    );
    assert_eq!(run(&mut e, &input).mode, Mode::Bound);
}

#[test]
fn o8_one_upload_and_one_write_back_of_the_stored_words() {
    let mut e = engine();
    e.load_contents(0x1000, &[0x11; 0x40]);
    let input = bound(
        vec![slot(0, 0x1000, 0x20, true), slot(1, 0x1010, 0x30, true)],
        vec![
            buf_store(1, 0, &[0xaaaa_aaaa]),
            buf_load(0, 0x10, 4),
            buf_store(0, 0x4, &[0xbbbb_bbbb]),
        ],
    );
    let report = run(&mut e, &input);
    assert_eq!(
        values(&report, 1),
        vec![0xaaaa_aaaa],
        "the holder reads what a member stored"
    );
    assert_eq!(report.write_back.len(), 1, "one write-back for the set");
    let wb = &report.write_back[0];
    assert_eq!(
        (wb.holder, wb.range, wb.words_total),
        (0, r(0x1000, 0x1040), 0x10)
    );
    let words: Vec<(u64, u64, u64)> = wb
        .words
        .iter()
        .map(|w| (w.address, w.old.unwrap(), w.new))
        .collect();
    assert_eq!(
        words,
        vec![
            (0x1004, 0x1111_1111, 0xbbbb_bbbb),
            (0x1010, 0x1111_1111, 0xaaaa_aaaa)
        ]
    );
    assert_eq!(word(&e, 0x1010), 0xaaaa_aaaa);
    assert_eq!(
        word(&e, 0x1008),
        0x1111_1111,
        "a word no store set is not written back"
    );
}

/// A device pass writes its holder itself; the engine writes back the words the device's masks
/// set, lists the first few with their values and places the rest by runs (O8, O9).
#[test]
fn o8_a_device_holder_is_written_back_by_its_masks_listing_a_few_words() {
    let mut e = engine();
    reserve(&mut e, 0, 0x1_0000);
    e.load_contents(0x1000, &[0x11; 0x100]);
    let input = bound(
        vec![slot(0, 0x1000, 0x80, true), slot(1, 0x1040, 0x40, true)],
        vec![],
    );
    let mut report = run(&mut e, &input);
    assert!(report.write_back.is_empty(), "nothing ran on the CPU");
    // The device wrote words 0..4 and 8..40 (of 0x20 words over 0x1000..0x1080).
    let mut data = vec![0u8; 0x80];
    let mut masks = vec![0u8; 0x80];
    for w in (0..4).chain(8..0x20) {
        data[4 * w..4 * w + 4].copy_from_slice(&(0xd000 + w as u32).to_le_bytes());
        masks[4 * w] = 1;
    }
    e.write_back_from_device(&mut report, 0, &data, &masks, 6)
        .unwrap();
    let wb = &report.write_back[0];
    assert_eq!(
        (wb.holder, wb.range, wb.words_total),
        (0, r(0x1000, 0x1080), 0x20)
    );
    let listed: Vec<(u64, u64, u64)> = wb
        .words
        .iter()
        .map(|w| (w.address, w.old.unwrap(), w.new))
        .collect();
    assert_eq!(
        listed,
        vec![
            (0x1000, 0x1111_1111, 0xd000),
            (0x1004, 0x1111_1111, 0xd001),
            (0x1008, 0x1111_1111, 0xd002),
            (0x100c, 0x1111_1111, 0xd003),
            (0x1020, 0x1111_1111, 0xd008),
            (0x1024, 0x1111_1111, 0xd009),
        ]
    );
    assert_eq!(wb.words_not_listed, 4 + 0x18 - 6);
    assert_eq!(wb.runs, vec![r(0x1000, 0x1010), r(0x1020, 0x1080)]);
    assert_eq!(report.counts.words_written_back, 4 + 0x18);
    assert_eq!(
        word(&e, 0x107c),
        0xd01f,
        "an unlisted word is written back too"
    );
    assert_eq!(word(&e, 0x1010), 0x1111_1111, "a word no mask set is not");
    assert!(
        report
            .hand_off
            .pages_noted_written
            .iter()
            .any(|p| p.contains(0x1000)),
        "the write-back notes its pages written (D824)"
    );
    // Named refusals, nothing written: twice, another slot, short masks, an older dispatch.
    let again = e.write_back_from_device(&mut report, 0, &data, &masks, 6);
    assert!(matches!(
        again,
        Err(EngineError::DeviceWriteBack(
            DeviceWriteBackError::AlreadyWrittenBack { slot: 0, .. }
        ))
    ));
    let mut fresh = report.clone();
    fresh.write_back.clear();
    let member = e.write_back_from_device(&mut fresh, 1, &data, &masks, 6);
    assert!(matches!(
        member,
        Err(EngineError::DeviceWriteBack(
            DeviceWriteBackError::NotAHolder { slot: 1, .. }
        ))
    ));
    let short = e.write_back_from_device(&mut fresh, 0, &data, &masks[..0x40], 6);
    assert!(matches!(
        short,
        Err(EngineError::DeviceWriteBack(DeviceWriteBackError::Size {
            holder_bytes: 0x80,
            ..
        }))
    ));
    run(&mut e, &input);
    let old = e.write_back_from_device(&mut fresh, 0, &data, &masks, 6);
    assert!(matches!(
        old,
        Err(EngineError::DeviceWriteBack(
            DeviceWriteBackError::NotLastDispatch { .. }
        ))
    ));
    // Its JSON keeps the new fields, and a report without them still reads.
    let json = serde_json::to_value(&report).unwrap();
    let back: DispatchReport = serde_json::from_value(json).unwrap();
    assert_eq!(back.write_back, report.write_back);
}

#[test]
fn o8_a_set_nobody_stores_to_is_not_written_back() {
    let report = run1(&bound(
        vec![slot(0, 0x1000, 0x20, true), slot(1, 0x1010, 0x30, false)],
        vec![buf_load(1, 0, 4)],
    ));
    assert!(report.write_back.is_empty());
    assert_eq!(report.counts.words_written_back, 0);
}

#[test]
fn o9_a_store_sets_the_mask_word_of_every_word_it_writes() {
    let mut e = engine();
    e.load_contents(0x1000, &[0x11; 0x40]);
    // Member 1 sits at offset 0x10 in holder coordinates: a 2-byte store at its offset 2 writes
    // holder bytes 0x12..0x14 (word 0x10), an 8-byte store at its offset 6 writes 0x16..0x1e
    // (words 0x14, 0x18 and 0x1c).
    let input = bound(
        vec![slot(0, 0x1000, 0x20, true), slot(1, 0x1010, 0x30, true)],
        vec![
            buf_store_sized(1, 2, 2, &[0xbeef]),
            buf_store_sized(1, 6, 8, &[0x2222_2222, 0x3333_3333]),
        ],
    );
    let report = run(&mut e, &input);
    let words: Vec<(u64, u64)> = report.write_back[0]
        .words
        .iter()
        .map(|w| (w.address, w.new))
        .collect();
    assert_eq!(
        words,
        vec![
            (0x1010, 0xbeef_1111),
            (0x1014, 0x2222_1111),
            (0x1018, 0x3333_2222),
            (0x101c, 0x1111_3333),
        ],
        "whole words, in holder coordinates, with the bytes no store wrote kept"
    );
}

#[test]
fn o10_a_push_block_base_is_where_the_binding_starts() {
    // Slot 20's descriptor says 0xdead0000; the push block says 0x120000.
    let input = DispatchInput {
        push: vec![0x12_0000, 0],
        ..bound(
            vec![
                slot(18, 0x10_0000, 0x4_0000, true),
                pushed(20, 0xdead_0000, 0x1000, true, 0),
            ],
            vec![buf_store(20, 0x10, &[5])],
        )
    };
    let report = run1(&input);
    let b = &report.slots[1];
    assert_eq!(b.range.start, 0x12_0000, "not the descriptor's base");
    assert_eq!(
        (b.holder, b.offset, b.role),
        (Some(18), 0x2_0000, Role::Member)
    );
    assert_eq!(
        route(&report, 0).0,
        Route::Bound {
            holder: 18,
            offset: 0x2_0010
        }
    );
    assert_eq!(report.write_back[0].words[0].address, 0x12_0010);
}

#[test]
fn o10_a_push_block_slot_can_hold_its_set() {
    let input = DispatchInput {
        push: vec![0, 0, 0x0800, 0],
        ..bound(
            vec![
                slot(1, 0x1000, 0x100, false),
                pushed(2, 0x9000, 0x1000, true, 2),
            ],
            vec![],
        )
    };
    assert_eq!(sets(&run1(&input)), vec![(2, vec![1])]);
}

#[test]
fn o10_missing_push_words_are_a_named_error() {
    let input = DispatchInput {
        push: vec![1],
        ..bound(vec![pushed(3, 0, 0x10, true, 0)], vec![])
    };
    let err = input_error(&mut engine(), &input);
    assert_eq!(
        err,
        InputError::PushWordMissing {
            slot: 3,
            word: 0,
            len: 1
        }
    );
    assert_eq!(
        err.to_string(),
        "slot 3 takes its base from push words 0 and 1 but the push block has 1 words"
    );
}

#[test]
fn o11_a_slot_on_a_page_of_the_page_buffer_is_refused_when_either_is_written() {
    let slots = vec![slot(0, 0x5000, 0x10, false), slot(1, 0x9ff8, 0x10, true)];
    let with = |pages: Vec<u64>, written| DispatchInput {
        page_buffer: Some(PageBuffer { pages, written }),
        ..bound(slots.clone(), vec![])
    };
    assert_eq!(
        run1(&with(vec![0x5000], false)).mode,
        Mode::Bound,
        "both read-only"
    );
    // Slot 1 (written) ends on page 0xa000.
    let report = run1(&with(vec![0xa000], false));
    assert_eq!(report.mode, Mode::Refused);
    assert_eq!(
        (report.refusals[0].rule, report.refusals[0].slot),
        (Rule::O11, Some(1))
    );
    assert!(
        report.refusals[0].message.contains("page 0xa000"),
        "{}",
        report.refusals[0].message
    );
    // A written page buffer refuses the read-only slot too.
    let report = run1(&with(vec![0x5000], true));
    assert_eq!(
        (report.refusals[0].rule, report.refusals[0].slot),
        (Rule::O11, Some(0))
    );
}

// ---------------------------------------------------------------------------------------------
// D964: A1.
// ---------------------------------------------------------------------------------------------

#[test]
fn a1_compute_with_reasons_runs_device_addressed() {
    let mut e = engine();
    reserve(&mut e, RES, RES_END);
    let report = run(&mut e, &device(vec![], vec![load(RES, 4)]));
    assert_eq!(report.mode, Mode::DeviceAddressed);
    assert!(
        report.mode_reason.starts_with("A1:"),
        "{}",
        report.mode_reason
    );
    assert!(report.mode_reason.contains("D753"));
    assert!(report.refusals.is_empty());
}

#[test]
fn a1_graphics_with_reasons_is_refused() {
    let input = DispatchInput {
        kind: DispatchKind::Graphics,
        reasons: vec![Reason::D758],
        ..device(vec![], vec![load(RES, 4)])
    };
    let report = run1(&input);
    assert_eq!(report.mode, Mode::Refused);
    assert_eq!(refusal_rules(&report), vec![Rule::A1]);
    assert!(
        report.refusals[0]
            .message
            .contains("graphics program 0x400000001000")
    );
    assert!(report.refusals[0].message.contains("D758"));
    assert_eq!(route(&report, 0), (Route::NotRun, Rule::A1));
    assert!(report.mappings.is_none() && report.table.is_none());
}

#[test]
fn a1_without_reasons_the_dispatch_is_bound() {
    let report = run1(&bound(
        vec![slot(0, 0x1000, 0x10, true)],
        vec![buf_store(0, 0, &[1])],
    ));
    assert_eq!(report.mode, Mode::Bound);
    assert!(report.mappings.is_none(), "a bound dispatch maps nothing");
}

#[test]
fn a1_device_accesses_or_unresolved_slots_need_a_reason() {
    let mut e = engine();
    let err = input_error(&mut e, &bound(vec![], vec![load(0x1000, 4)]));
    assert!(
        matches!(
            err,
            InputError::NeedsDeviceAddress {
                access: 0,
                address: 0x1000,
                ..
            }
        ),
        "{err:?}"
    );
    let err = input_error(
        &mut e,
        &bound(vec![unresolved(4, 0x1000, 0x10, false)], vec![]),
    );
    assert_eq!(err, InputError::UnresolvedWithoutReason { slot: 4 });
    assert_eq!(e.next_dispatch(), 0, "bad input changes nothing");
}

// ---------------------------------------------------------------------------------------------
// D964: M1–M5.
// ---------------------------------------------------------------------------------------------

#[test]
fn m1_every_readable_run_is_mapped_whole() {
    let mut e = engine();
    reserve(&mut e, RES, RES_END);
    // The third page becomes unreadable: two runs in one reservation.
    apply(
        &mut e,
        Event::Protect {
            range: r(0x1_2000, 0x1_3000),
            readable: false,
            writable: false,
        },
    );
    reserve(&mut e, 0x2_0000, 0x2_2000);
    let report = run(
        &mut e,
        &device(vec![], vec![load(0x1_0ffc, 8), load(0x1_2000, 4)]),
    );
    let m = report.mappings.as_ref().unwrap();
    let runs: Vec<ByteRange> = m.runs.iter().map(|r| r.range).collect();
    assert_eq!(
        runs,
        vec![
            r(0x1_0000, 0x1_2000),
            r(0x1_3000, 0x1_4000),
            r(0x2_0000, 0x2_2000)
        ]
    );
    assert_eq!(mapped(&report), runs, "each run whole, as one piece");
    assert!(m.left_out.is_empty());
    assert!(
        !report.accesses[0].escaped,
        "an access across two pages of one run"
    );
    assert_eq!(
        escape_class(&report, 1),
        Some((EscapeClass::NotReadable, None))
    );
}

#[test]
fn m1_a_revisit_never_maps_a_page_the_guest_left_unreadable() {
    let mut e = engine();
    reserve_as(&mut e, RES, RES_END, true, false, true); // read-only: left out (M3)
    let before = run(&mut e, &device(vec![], vec![]));
    assert_eq!(
        left_out(&before),
        vec![(r(RES, RES_END), LeftOutReason::NotReadWrite)]
    );
    // The guest makes a page unreadable but writable: its host page turns read-write, and the
    // revisit this causes (M5) must still not map it, for no readable run holds it.
    let ev = apply(
        &mut e,
        Event::Protect {
            range: r(0x1_3000, RES_END),
            readable: false,
            writable: true,
        },
    );
    assert!(ev.generation_moved);
    assert!(
        !effects_mention(&ev, "M5 (D968): mapped"),
        "{:?}",
        ev.effects
    );
    assert!(e.mappings().piece_at(0x1_3000).is_none());
    let report = run(&mut e, &device(vec![], vec![load(0x1_3000, 4)]));
    assert_eq!(
        escape_class(&report, 0),
        Some((EscapeClass::NotReadable, None))
    );
}

#[test]
fn m2_a_run_is_committed_its_guards_released_and_its_pages_noted_written() {
    let mut e = engine();
    reserve_as(&mut e, RES, RES_END, true, true, false);
    apply(
        &mut e,
        Event::Guard {
            range: r(0x1_1000, 0x1_3000),
        },
    );
    assert!(!e.memory().page_at(0x1_1000).unwrap().written);
    let report = run(&mut e, &device(vec![], vec![load(0x1_1000, 4)]));
    let m = report.mappings.as_ref().unwrap();
    assert_eq!(
        (m.committed_pages, m.guards_released, m.pages_noted_written),
        (4, 2, 4)
    );
    assert_eq!(
        mapped(&report),
        vec![r(RES, RES_END)],
        "the uncommitted, guarded pages are mapped"
    );
    assert!(!report.accesses[0].escaped);
    for page in (RES..RES_END).step_by(0x1000) {
        let p = e.memory().page_at(page).unwrap();
        assert!(
            p.committed && !p.guarded && p.written,
            "page {page:#x}: {p:?}"
        );
    }
}

#[test]
fn m3_shared_and_read_only_pages_are_left_out_and_escape() {
    let mut e = engine();
    reserve(&mut e, RES, RES_END);
    apply(
        &mut e,
        Event::SetBacking {
            range: r(0x1_1000, 0x1_2000),
            backing: Backing::Shared,
        },
    );
    apply(
        &mut e,
        Event::Protect {
            range: r(0x1_2000, 0x1_3000),
            readable: true,
            writable: false,
        },
    );
    let report = run(
        &mut e,
        &device(
            vec![],
            vec![load(0x1_1010, 4), load(0x1_2010, 4), load(0x1_3010, 4)],
        ),
    );
    assert_eq!(
        mapped(&report),
        vec![r(0x1_0000, 0x1_1000), r(0x1_3000, 0x1_4000)]
    );
    assert_eq!(
        left_out(&report),
        vec![
            (r(0x1_1000, 0x1_2000), LeftOutReason::NotPrivate),
            (r(0x1_2000, 0x1_3000), LeftOutReason::NotReadWrite)
        ]
    );
    assert_eq!(
        escape_class(&report, 0),
        Some((EscapeClass::LeftOut, Some(LeftOutReason::NotPrivate)))
    );
    assert_eq!(
        escape_class(&report, 1),
        Some((EscapeClass::LeftOut, Some(LeftOutReason::NotReadWrite)))
    );
    assert_eq!(escape_class(&report, 2), None);
    assert!(
        report.escapes[0].message.contains("(M3)"),
        "{}",
        report.escapes[0].message
    );
}

#[test]
fn m4_an_unchanged_generation_maps_nothing_again() {
    let mut e = engine();
    reserve(&mut e, RES, RES_END);
    let input = device(vec![], vec![load(RES, 4)]);
    let first = run(&mut e, &input);
    assert!(first.mappings.as_ref().unwrap().remapped);
    let calls = e.backend().calls();
    let second = run(&mut e, &input);
    let m = second.mappings.as_ref().unwrap();
    assert!(!m.remapped);
    assert_eq!(
        (m.remaps_total, m.imports_made, m.imports_dropped),
        (1, 0, 0)
    );
    assert_eq!(
        e.backend().calls(),
        calls,
        "no import, release or table upload"
    );
    assert_eq!(second.table.as_ref().unwrap().rebuilt, None);
}

#[test]
fn m4_a_protect_that_changes_readability_maps_again() {
    let mut e = engine();
    reserve(&mut e, RES, RES_END);
    let input = device(vec![], vec![load(RES, 4)]);
    let first = run(&mut e, &input);
    let ev = apply(
        &mut e,
        Event::Protect {
            range: r(0x1_3000, 0x1_4000),
            readable: false,
            writable: false,
        },
    );
    assert!(ev.generation_moved);
    assert!(effects_mention(&ev, "M4: the readable runs changed"));
    let second = run(&mut e, &input);
    let m = second.mappings.as_ref().unwrap();
    assert!(m.remapped);
    assert_eq!(m.remaps_total, 2);
    assert!(m.generation > first.mappings.as_ref().unwrap().generation);
    assert_eq!(mapped(&second), vec![r(RES, 0x1_3000)]);
    // Writability alone leaves the runs as they were.
    let ev = apply(
        &mut e,
        Event::Protect {
            range: r(RES, 0x1_1000),
            readable: true,
            writable: false,
        },
    );
    assert!(!ev.generation_moved);
}

#[test]
fn m4_a_decommit_drops_the_mapping_before_the_memory_goes() {
    let mut e = engine();
    reserve(&mut e, RES, RES_END);
    run(&mut e, &device(vec![], vec![load(RES, 4)]));
    let ev = apply(
        &mut e,
        Event::Decommit {
            range: r(0x1_1000, 0x1_2000),
        },
    );
    let dropped = ev
        .effects
        .iter()
        .position(|x| x.contains("M4: dropped the mapping of 0x10000..0x14000"));
    assert!(dropped.is_some(), "{:?}", ev.effects);
    assert!(!e.memory().page_at(0x1_1000).unwrap().committed);
    assert!(e.mappings().piece_at(0x1_1000).is_none());
    let report = run(
        &mut e,
        &device(
            vec![],
            vec![load(0x1_1000, 4), load(RES, 4), load(0x1_2000, 4)],
        ),
    );
    assert_eq!(
        mapped(&report),
        vec![r(RES, 0x1_1000), r(0x1_2000, RES_END)],
        "the rest is mapped again"
    );
    let esc = &report.escapes[0];
    assert_eq!((esc.access, esc.class), (0, EscapeClass::Dropped));
    assert_eq!(
        esc.since.map(|w| (w.event, w.before_dispatch)),
        Some((ev.index, 1))
    );
    assert_eq!(report.escapes.len(), 1);
}

#[test]
fn m4_a_release_drops_every_mapping_of_the_reservation() {
    let mut e = engine();
    reserve(&mut e, RES, RES_END);
    reserve(&mut e, 0x2_0000, 0x2_1000);
    run(&mut e, &device(vec![], vec![]));
    apply(&mut e, Event::Retire);
    let ev = apply(&mut e, Event::Release { base: RES });
    assert!(effects_mention(
        &ev,
        "M4: dropped the mapping of 0x10000..0x14000"
    ));
    assert_eq!(ev.waited_for, None, "the dispatch had retired");
    let report = run(&mut e, &device(vec![], vec![load(0x1_2000, 4)]));
    assert_eq!(mapped(&report), vec![r(0x2_0000, 0x2_1000)]);
    assert_eq!(escape_class(&report, 0), Some((EscapeClass::Dropped, None)));
}

#[test]
fn m5_a_release_waits_for_a_dispatch_in_flight() {
    let mut e = engine();
    reserve(&mut e, RES, RES_END);
    let report = run(&mut e, &device(vec![], vec![load(RES, 4)]));
    let ev = apply(&mut e, Event::Release { base: RES });
    assert_eq!(ev.waited_for, Some(report.index));
    assert!(effects_mention(&ev, "M5: waited for dispatch 0"));
    // Once nothing is mapped there, a release of another reservation waits for nothing.
    reserve_as(&mut e, 0x3_0000, 0x3_1000, false, false, false);
    assert_eq!(
        apply(&mut e, Event::Release { base: 0x3_0000 }).waited_for,
        None
    );
}

#[test]
fn m5_a_commit_after_a_decommit_maps_the_page_again() {
    let mut e = engine();
    reserve(&mut e, RES, RES_END);
    let input = device(vec![], vec![load(0x1_1000, 4)]);
    run(&mut e, &input);
    apply(
        &mut e,
        Event::Decommit {
            range: r(0x1_1000, 0x1_2000),
        },
    );
    let gone = run(&mut e, &input);
    assert_eq!(
        left_out(&gone),
        vec![(r(0x1_1000, 0x1_2000), LeftOutReason::NotCommitted)]
    );
    let ev = apply(
        &mut e,
        Event::Commit {
            range: r(0x1_1000, 0x1_2000),
        },
    );
    assert!(
        effects_mention(&ev, "M5 (D968): mapped 0x11000..0x12000"),
        "{:?}",
        ev.effects
    );
    assert!(!ev.generation_moved, "a revisit is not a remap");
    let back = run(&mut e, &input);
    let m = back.mappings.as_ref().unwrap();
    assert!(!m.remapped);
    let piece = m
        .pieces
        .iter()
        .find(|p| p.guest == r(0x1_1000, 0x1_2000))
        .unwrap();
    assert!(piece.by_revisit);
    assert_eq!(m.imports_made, 1);
    assert!(m.left_out.is_empty());
    let t = back.table.as_ref().unwrap();
    assert_eq!(
        (t.rebuilt.as_deref(), t.inserted),
        (None, 1),
        "one chunk inserted, no rebuild"
    );
    assert!(!back.accesses[0].escaped);
    assert_eq!(values(&back, 0), vec![0], "decommitted contents are gone");
}

#[test]
fn m5_a_host_reprotect_to_read_write_maps_a_left_out_piece() {
    let mut e = engine();
    reserve(&mut e, RES, RES_END);
    apply(
        &mut e,
        Event::HostProtect {
            range: r(0x1_2000, 0x1_3000),
            protection: HostProtection::Read,
        },
    );
    let input = device(vec![], vec![load(0x1_2000, 4)]);
    let before = run(&mut e, &input);
    assert_eq!(
        left_out(&before),
        vec![(r(0x1_2000, 0x1_3000), LeftOutReason::NotReadWrite)]
    );
    assert_eq!(
        escape_class(&before, 0),
        Some((EscapeClass::LeftOut, Some(LeftOutReason::NotReadWrite)))
    );
    let ev = apply(
        &mut e,
        Event::HostProtect {
            range: r(0x1_2000, 0x1_3000),
            protection: HostProtection::ReadWrite,
        },
    );
    assert!(
        effects_mention(&ev, "M5 (D968): mapped 0x12000..0x13000"),
        "{:?}",
        ev.effects
    );
    let after = run(&mut e, &input);
    assert!(after.escapes.is_empty());
    assert!(
        after
            .mappings
            .as_ref()
            .unwrap()
            .pieces
            .iter()
            .any(|p| p.by_revisit && p.guest == r(0x1_2000, 0x1_3000))
    );
}

#[test]
fn m5_a_revisit_maps_only_what_became_mappable() {
    let mut e = engine();
    reserve(&mut e, RES, RES_END);
    apply(
        &mut e,
        Event::SetBacking {
            range: r(0x1_1000, 0x1_3000),
            backing: Backing::Shared,
        },
    );
    run(&mut e, &device(vec![], vec![]));
    let ev = apply(
        &mut e,
        Event::SetBacking {
            range: r(0x1_2000, 0x1_3000),
            backing: Backing::Private,
        },
    );
    assert!(effects_mention(&ev, "mapped 0x12000..0x13000"));
    let report = run(&mut e, &device(vec![], vec![]));
    assert_eq!(
        left_out(&report),
        vec![(r(0x1_1000, 0x1_2000), LeftOutReason::NotPrivate)]
    );
}

// ---------------------------------------------------------------------------------------------
// D964: T1–T6.
// ---------------------------------------------------------------------------------------------

fn chunk_bytes(report: &DispatchReport) -> u64 {
    report.table.as_ref().unwrap().chunk_bytes
}

#[test]
fn t1_64_kib_aligned_runs_give_64_kib_chunks() {
    let mut e = engine();
    reserve(&mut e, 0x10_0000, 0x14_0000);
    let report = run(&mut e, &device(vec![], vec![load(0x13_fffc, 4)]));
    assert_eq!(chunk_bytes(&report), 0x1_0000);
    assert!(
        report
            .table
            .as_ref()
            .unwrap()
            .chunk_reason
            .contains("at least 64 KiB")
    );
    assert_eq!(report.table.as_ref().unwrap().n_chunks, 4);
}

#[test]
fn t1_a_4_kib_aligned_piece_gives_4_kib_chunks() {
    let mut e = engine();
    reserve(&mut e, 0x10_0000, 0x14_0000);
    run(&mut e, &device(vec![], vec![]));
    reserve(&mut e, 0x20_0000, 0x20_3000);
    let report = run(
        &mut e,
        &device(vec![], vec![load(0x20_2000, 4), load(0x13_0000, 4)]),
    );
    let t = report.table.as_ref().unwrap();
    assert_eq!(t.chunk_bytes, 0x1000);
    assert!(
        t.chunk_reason.contains("aligned to 0x1000"),
        "{}",
        t.chunk_reason
    );
    let why = t.rebuilt.as_deref().unwrap();
    assert!(
        why.starts_with(
            "T1: the chunk changed from 0x10000 to 0x1000 bytes to follow the mappings' alignment: the import of 0x200000..0x203000"
        ) && why.contains("0x1000-byte boundary at 0x203000"),
        "the report names the import that made the chunk change: {why}"
    );
    assert_eq!(t.n_chunks, 0x40 + 3);
    assert!(report.escapes.is_empty());
}

#[test]
fn t1_a_piece_mapped_and_dropped_between_dispatches_costs_its_parts_not_a_build() {
    let mut e = engine();
    reserve(&mut e, 0x10_0000, 0x12_0000); // 64 KiB-aligned: 64 KiB chunks
    reserve(&mut e, 0x12_f000, 0x13_1000); // 4 KiB-aligned, across 0x130000
    apply(
        &mut e,
        Event::HostProtect {
            range: r(0x12_f000, 0x13_1000),
            protection: HostProtection::Read,
        },
    );
    let first = run(&mut e, &device(vec![], vec![]));
    assert_eq!(
        chunk_bytes(&first),
        0x1_0000,
        "the 4 KiB-aligned run is left out"
    );
    // Mapped by a revisit (M5), then dropped by a decommit (M4), before the next dispatch.
    let ev = apply(
        &mut e,
        Event::HostProtect {
            range: r(0x12_f000, 0x13_1000),
            protection: HostProtection::ReadWrite,
        },
    );
    assert!(effects_mention(&ev, "M5 (D968): mapped 0x12f000..0x131000"));
    apply(
        &mut e,
        Event::Decommit {
            range: r(0x12_f000, 0x13_1000),
        },
    );
    let report = run(
        &mut e,
        &device(vec![], vec![load(0x11_fffc, 4), load(0x13_0000, 4)]),
    );
    let t = report.table.as_ref().unwrap();
    assert_eq!(t.chunk_bytes, 0x1_0000);
    assert_eq!(
        t.n_chunks, 2,
        "only the 64 KiB-aligned reservation's chunks"
    );
    // Finer than the chunk, the piece came and went as parts of the two chunks it touched: two
    // slots placed, then taken out again, and no build.
    assert_eq!(t.rebuilt, None);
    assert_eq!((t.inserted, t.removed), (2, 2));
    assert_eq!(report.escapes.len(), 1);
    assert_eq!(report.escapes[0].class, EscapeClass::Dropped);
}

#[test]
fn t2_every_mapped_chunk_is_reachable_within_the_bound() {
    // A bound of one probe: every chunk must sit on its home slot, so the table grows until it does.
    let mut e = engine_with(|l| l.probe_bound = 1);
    reserve(&mut e, 0x10_0000, 0x10_0000 + 0x1000 * 37);
    let loads: Vec<Access> = (0..37)
        .map(|i| load(0x10_0000 + 0x1000 * i + 8, 4))
        .collect();
    let report = run(&mut e, &device(vec![], loads));
    let t = report.table.as_ref().unwrap();
    assert_eq!((t.chunk_bytes, t.n_chunks, t.probe_bound), (0x1000, 37, 1));
    assert_eq!(t.probe_histogram, vec![0, 37]);
    assert!(report.escapes.is_empty());
    for a in &report.accesses {
        assert!(matches!(a.lookups[0].outcome, LookupOutcome::Hit { .. }));
        assert_eq!(a.lookups[0].probes.len(), 1);
    }
}

#[test]
fn t2_an_access_across_a_chunk_boundary_makes_two_lookups() {
    let mut e = engine();
    reserve(&mut e, RES, 0x1_3000);
    let report = run(
        &mut e,
        &device(vec![], vec![load(0x1_0ffc, 8), load(0x1_0ff8, 8)]),
    );
    assert_eq!(chunk_bytes(&report), 0x1000);
    let chunks: Vec<u64> = report.accesses[0]
        .lookups
        .iter()
        .map(|l| l.guest_chunk)
        .collect();
    assert_eq!(chunks, vec![0x10, 0x11]);
    assert_eq!(report.accesses[1].lookups.len(), 1);
}

#[test]
fn t3_the_push_block_names_the_table_at_its_word() {
    let mut e = engine();
    reserve(&mut e, RES, RES_END);
    let report = run(&mut e, &device(vec![], vec![load(RES, 4)]));
    let t = report.table.as_ref().unwrap();
    assert_eq!(t.push_word, DEVICE_TABLE_PUSH_WORD);
    assert_ne!(t.device_address, 0);
}

#[test]
fn t3_the_table_words_are_kept_free() {
    let mut e = engine();
    let long = DispatchInput {
        push: vec![0; DEVICE_TABLE_PUSH_WORD as usize + 1],
        ..device(vec![], vec![])
    };
    assert_eq!(
        input_error(&mut e, &long),
        InputError::PushBlockTooLong { len: 31 }
    );
    let taken = DispatchInput {
        push: vec![0; 30],
        ..device(
            vec![pushed(1, 0, 0x10, false, DEVICE_TABLE_PUSH_WORD - 1)],
            vec![],
        )
    };
    assert_eq!(
        input_error(&mut e, &taken),
        InputError::PushWordTaken { slot: 1, word: 29 }
    );
    // A bound dispatch has no table: its push block may use every word.
    let bound_long = DispatchInput {
        push: vec![0; 32],
        ..bound(vec![], vec![])
    };
    assert_eq!(run(&mut e, &bound_long).mode, Mode::Bound);
}

#[test]
fn t4_a_miss_reads_zero_stores_nothing_and_is_an_escape() {
    let mut e = engine();
    reserve(&mut e, RES, RES_END);
    // A reservation the guest left unreadable, with bytes in it.
    reserve_as(&mut e, 0x5_0000, 0x5_1000, false, false, true);
    e.load_contents(0x5_0000, &[0x77; 8]);
    let report = run(
        &mut e,
        &device(
            vec![],
            vec![
                load(0x5_0000, 4),
                store(0x5_0004, &[0x1234]),
                load(0x9_0000, 8),
            ],
        ),
    );
    assert_eq!(
        values(&report, 0),
        vec![0],
        "reads zero, not the bytes behind it"
    );
    assert_eq!(word(&e, 0x5_0004), 0x7777_7777, "the store was dropped");
    assert_eq!(values(&report, 2), vec![0, 0]);
    let classes: Vec<(usize, EscapeClass, Rule)> = report
        .escapes
        .iter()
        .map(|x| (x.access, x.class, x.rule))
        .collect();
    assert_eq!(
        classes,
        vec![
            (0, EscapeClass::NotReadable, Rule::T4),
            (1, EscapeClass::NotReadable, Rule::T4),
            (2, EscapeClass::NoReservation, Rule::T4)
        ]
    );
    assert!(report.escapes[1].message.contains("stored nothing"));
    assert!(
        report.escapes[2]
            .message
            .contains("no reservation holds 0x90000")
    );
    assert!(matches!(
        report.escapes[2].lookup.outcome,
        LookupOutcome::MissEmpty { .. }
    ));
    assert!(report.marks.is_empty(), "an escaped store marks nothing");
    assert_eq!(report.counts.escapes, 3);
}

#[test]
fn t5_the_words_of_an_access_share_two_lookups() {
    let mut e = engine();
    reserve(&mut e, RES, 0x1_1000); // one 4 KiB page: 0x11000 on is not mapped
    e.load_contents(0x1_0ff8, &[1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0]);
    let report = run(
        &mut e,
        &device(vec![], vec![load(0x1_0ff8, 64), load(RES, 64)]),
    );
    let a = &report.accesses[0];
    assert_eq!(a.lookups.len(), 2, "16 words, two lookups");
    assert!(matches!(a.lookups[0].outcome, LookupOutcome::Hit { .. }));
    assert!(matches!(
        a.lookups[1].outcome,
        LookupOutcome::MissEmpty { .. }
    ));
    assert_eq!(
        &a.values[..3],
        &[1, 2, 0],
        "the mapped words read, the rest zero"
    );
    assert!(a.escaped);
    assert_eq!(
        report.escapes[0].address, 0x1_1000,
        "the first byte no mapping holds"
    );
    assert_eq!(
        report.accesses[1].lookups.len(),
        1,
        "64 bytes in one chunk: one lookup"
    );
}

#[test]
fn t6_the_table_lies_in_device_local_memory_where_there_is_room() {
    let mut e = engine();
    reserve(&mut e, RES, RES_END);
    let t = run(&mut e, &device(vec![], vec![])).table.unwrap();
    assert_eq!(t.placement, Placement::DeviceLocal);
    assert_eq!(t.table_bytes, t.capacity * 16);
}

#[test]
fn t6_a_table_over_the_budget_lies_in_host_visible_memory() {
    let mut e = engine_with(|l| l.device_local_table_budget_bytes = 0x10);
    reserve(&mut e, RES, RES_END);
    let t = run(&mut e, &device(vec![], vec![])).table.unwrap();
    assert_eq!(t.placement, Placement::HostVisible);
    assert!(t.table_bytes > 0x10);
}

// ---------------------------------------------------------------------------------------------
// D964, D967, D970: W1–W3 and P1.
// ---------------------------------------------------------------------------------------------

#[test]
fn w1_global_and_unresolved_accesses_go_by_device_address_resolved_ones_stay_bound() {
    let mut e = engine();
    reserve(&mut e, RES, RES_END);
    e.load_contents(0x1_2040, &[9, 0, 0, 0]);
    let input = device(
        vec![
            unresolved(1, 0x1_2000, 0x100, false),
            slot(2, 0x1_3000, 0x100, true),
        ],
        vec![
            load(RES, 4),
            buf_load(1, 0x40, 4),
            buf_store(2, 0x8, &[3]),
            Access {
                kind: AccessKind::Scalar,
                ..buf_load(1, 0x40, 4)
            },
        ],
    );
    let report = run(&mut e, &input);
    assert_eq!(report.mode, Mode::DeviceAddressed);
    assert_eq!(
        route(&report, 0),
        (Route::Device { address: RES }, Rule::W1)
    );
    assert_eq!(
        route(&report, 1),
        (Route::Device { address: 0x1_2040 }, Rule::W1)
    );
    assert_eq!(values(&report, 1), vec![9]);
    assert_eq!(
        route(&report, 2),
        (
            Route::Bound {
                holder: 2,
                offset: 8
            },
            Rule::O8
        )
    );
    assert_eq!(
        route(&report, 3),
        (Route::Device { address: 0x1_2040 }, Rule::W1)
    );
    assert_eq!(report.slots[0].role, Role::Unbound);
    assert_eq!(report.write_back[0].words[0].address, 0x1_3008);
}

#[test]
fn w1_a_format_access_through_a_resolved_slot_converts_by_the_format_the_host_read() {
    let mut e = engine();
    e.load_contents(0x2000, &[0, 255, 51, 0]);
    let s = with_format(slot(0, 0x2000, 0x10, false), Format::R8G8B8A8Unorm);
    let report = run(&mut e, &bound(vec![s], vec![format_load(0, 0, 4)]));
    assert_eq!(
        route(&report, 0).0,
        Route::Bound {
            holder: 0,
            offset: 0
        }
    );
    assert_eq!(
        values(&report, 0),
        vec![0.0f32.to_bits(), 1.0f32.to_bits(), 0.2f32.to_bits(), 0]
    );
}

#[test]
fn w2_a_format_load_through_an_unresolved_slot_converts_by_the_descriptor_format() {
    let mut e = engine();
    reserve(&mut e, RES, RES_END);
    e.load_contents(0x1_1004, &[255, 0, 102, 255]);
    let s = with_format(unresolved(3, 0x1_1000, 0x40, false), Format::R8G8B8A8Unorm);
    let report = run(&mut e, &device(vec![s], vec![format_load(3, 1, 4)]));
    assert_eq!(
        route(&report, 0),
        (Route::Device { address: 0x1_1004 }, Rule::W2)
    );
    assert_eq!(
        values(&report, 0),
        vec![1.0f32.to_bits(), 0, 0.4f32.to_bits(), 1.0f32.to_bits()]
    );
}

#[test]
fn w2_swizzled_and_lane_indexed_addressing_is_carried_out() {
    let mut e = engine();
    reserve(&mut e, RES, RES_END);
    // Index 1 + lane 2 = record 3; 4-byte elements, 8 records per block, 16-byte records:
    // (3 / 8) * 16 * 8 + (4 / 4) * 4 * 8 + (3 % 8) * 4 + 4 % 4 = 0x2c.
    let s = Slot {
        stride_bytes: 16,
        swizzle: Some(Swizzle {
            element_bytes: 4,
            index_stride: 8,
        }),
        index_from_lane: true,
        ..with_format(unresolved(3, 0x1_1000, 0x100, false), Format::R32Uint)
    };
    e.load_contents(0x1_102c, &0xfeed_f00du32.to_le_bytes());
    let a = Access {
        offset: Some(4),
        lane: 2,
        ..format_load(3, 1, 4)
    };
    let report = run(&mut e, &device(vec![s], vec![a]));
    assert_eq!(route(&report, 0).0, Route::Device { address: 0x1_102c });
    assert_eq!(values(&report, 0), vec![0xfeed_f00d]);
}

#[test]
fn w2_a_format_store_through_an_unresolved_slot_is_refused() {
    let mut e = engine();
    reserve(&mut e, RES, RES_END);
    let s = with_format(unresolved(3, 0x1_1000, 0x40, true), Format::R32Uint);
    let st = Access {
        slot: Some(3),
        offset: Some(0),
        index: Some(2),
        pc: 0x2a0,
        ..access(AccessKind::FormatBuffer, Op::Store, 4, vec![1])
    };
    let report = run(&mut e, &device(vec![s], vec![st]));
    assert_eq!(report.mode, Mode::Refused);
    assert_eq!(refusal_rules(&report), vec![Rule::W2]);
    assert_eq!(report.refusals[0].slot, Some(3));
    assert!(
        report.refusals[0]
            .message
            .contains("access 0 (pc 0x2a0) is a format store through slot 3")
    );
    assert_eq!(word(&e, 0x1_1008), 0, "nothing ran");
}

#[test]
fn w3_ray_intersections_and_scalar_loads_from_addresses_go_by_device_address() {
    let mut e = engine();
    reserve(&mut e, RES, RES_END);
    e.load_contents(0x1_1000, &[5, 0, 0, 0]);
    let report = run(
        &mut e,
        &device(
            vec![],
            vec![
                at(AccessKind::RayIntersection, 0x1_1000, 64),
                at(AccessKind::Scalar, 0x1_2000, 32),
            ],
        ),
    );
    assert_eq!(
        route(&report, 0),
        (Route::Device { address: 0x1_1000 }, Rule::W3)
    );
    assert_eq!(
        route(&report, 1),
        (Route::Device { address: 0x1_2000 }, Rule::W3)
    );
    assert_eq!(values(&report, 0)[0], 5);
    assert_eq!(values(&report, 0).len(), 16);
    assert!(report.escapes.is_empty());
}

#[test]
fn p1_flat_addresses_route_by_their_high_half() {
    let mut e = engine();
    reserve(&mut e, RES, RES_END);
    e.load_contents(RES + 0x40, &[0x44, 0, 0, 0]);
    let input = device(
        vec![],
        vec![
            lane(lds(Op::Store, 0x40, &[0x11]), 0, 0),
            lane(flat(0x8000_0000_0000_0040), 0, 5), // LDS of workgroup 0: what lane 0 stored
            lane(flat(0x8000_0000_0000_0040), 1, 0), // another workgroup's LDS
            lane(scratch(Op::Store, 0x100, &[0x22]), 0, 3),
            lane(flat(0x7000_0000_0000_0100), 0, 3), // lane 3's scratch
            lane(flat(0x7000_0000_0000_0100), 0, 4), // lane 4's scratch
            flat(RES + 0x40),                        // guest memory
            flat_store(0x8000_0000_0000_0080, 0x33),
            lane(lds(Op::Load, 0x80, &[]), 0, 9),
        ],
    );
    let report = run(&mut e, &input);
    assert_eq!(route(&report, 1), (Route::Lds { offset: 0x40 }, Rule::P1));
    assert_eq!(
        route(&report, 4),
        (Route::Scratch { offset: 0x100 }, Rule::P1)
    );
    assert_eq!(
        route(&report, 6),
        (
            Route::Device {
                address: RES + 0x40
            },
            Rule::P1
        )
    );
    let v: Vec<u32> = (0..report.accesses.len())
        .map(|i| values(&report, i).first().copied().unwrap_or(0))
        .collect();
    assert_eq!(v, vec![0x11, 0x11, 0, 0x22, 0x22, 0, 0x44, 0x33, 0x33]);
    assert!(
        report.marks.is_empty(),
        "LDS and scratch stores mark no chunk"
    );
}

#[test]
fn p1_the_apertures_are_the_device_s() {
    let mut e = engine_with(|l| {
        l.lds_aperture = 0x1_0000;
        l.scratch_aperture = 0x2_0000;
    });
    let report = run(
        &mut e,
        &device(
            vec![],
            vec![
                flat(0x1_0000_0000_0010),
                flat(0x2_0000_0000_0020),
                flat(0x8000_0000_0000_0040),
            ],
        ),
    );
    assert_eq!(route(&report, 0).0, Route::Lds { offset: 0x10 });
    assert_eq!(route(&report, 1).0, Route::Scratch { offset: 0x20 });
    assert_eq!(
        route(&report, 2).0,
        Route::Device {
            address: 0x8000_0000_0000_0040
        }
    );
}

#[test]
fn p1_an_offset_past_the_aperture_is_a_named_error() {
    let mut e = engine();
    let err = input_error(&mut e, &device(vec![], vec![flat(0x7000_0000_0000_1000)]));
    assert_eq!(
        err.to_string(),
        "access 0: Scratch offset 0x1000 + 4 bytes passes the 0x1000 bytes the device gives it"
    );
}

// ---------------------------------------------------------------------------------------------
// D969, D964: C1–C3, L1.
// ---------------------------------------------------------------------------------------------

#[test]
fn c1_each_device_store_marks_its_chunks() {
    let mut e = engine();
    reserve(&mut e, RES, 0x1_3000); // 4 KiB chunks
    let input = device(
        vec![],
        vec![
            store(0x1_0000, &[1]),
            store(0x1_0010, &[2]),
            load(0x1_2000, 4),
            store(0x1_1ffc, &[3, 4]),
            store(0x9_0000, &[5]),
        ],
    );
    let report = run(&mut e, &input);
    let t = e.table().unwrap();
    let marks: Vec<(usize, ByteRange, u32)> = report
        .marks
        .iter()
        .map(|m| (m.table_slot, m.guest, m.stores))
        .collect();
    // The load marks nothing; the store across 0x12000 marks both its chunks; the escaped one none.
    let mut want = vec![
        (t.lookup_slot(0x10).unwrap(), r(0x1_0000, 0x1_1000), 2),
        (t.lookup_slot(0x11).unwrap(), r(0x1_1000, 0x1_2000), 1),
        (t.lookup_slot(0x12).unwrap(), r(0x1_2000, 0x1_3000), 1),
    ];
    let mut got = marks;
    got.sort();
    want.sort();
    assert_eq!(got, want);
    assert_eq!(word(&e, 0x1_1ffc), 3);
    assert_eq!(word(&e, 0x1_2000), 4);
}

#[test]
fn c1_a_device_store_passes_the_write_watch_by() {
    let mut e = engine();
    reserve(&mut e, RES, RES_END);
    run(&mut e, &device(vec![], vec![]));
    // After mapping (M2 released the guards), the write-watch guards the pages again.
    apply(
        &mut e,
        Event::Guard {
            range: r(RES, RES_END),
        },
    );
    let report = run(&mut e, &device(vec![], vec![store(0x1_1000, &[0xabcd])]));
    assert!(
        report.escapes.is_empty(),
        "a guard does not stop a device store"
    );
    assert_eq!(word(&e, 0x1_1000), 0xabcd);
    assert_eq!(report.marks.len(), 1);
}

#[test]
fn c2_a_marked_chunk_distrusts_targets_over_it_and_notes_its_pages() {
    let mut e = engine();
    reserve(&mut e, RES, 0x1_3000);
    apply(
        &mut e,
        Event::AddTarget {
            id: 7,
            name: "albedo".into(),
            range: r(0x1_1800, 0x1_1900),
        },
    );
    apply(
        &mut e,
        Event::AddTarget {
            id: 8,
            name: "depth".into(),
            range: r(0x1_2000, 0x1_2100),
        },
    );
    run(&mut e, &device(vec![], vec![]));
    apply(
        &mut e,
        Event::Guard {
            range: r(RES, 0x1_3000),
        },
    ); // clears the write-watch's notes
    let report = run(&mut e, &device(vec![], vec![store(0x1_1000, &[1])]));
    let lost: Vec<(u32, &str, &str)> = report
        .hand_off
        .targets_distrusted
        .iter()
        .map(|t| (t.id, t.name.as_str(), t.by.as_str()))
        .collect();
    assert_eq!(
        lost,
        vec![(7, "albedo", "marked chunk 0x11000..0x12000 (C2)")]
    );
    assert_eq!(
        report.hand_off.pages_noted_written,
        vec![r(0x1_1000, 0x1_2000)]
    );
    let trusted: Vec<(u32, bool)> = e.memory().targets().map(|t| (t.id, t.trusted)).collect();
    assert_eq!(trusted, vec![(7, false), (8, true)]);
    assert!(e.memory().page_at(0x1_1000).unwrap().written);
    assert!(!e.memory().page_at(0x1_2000).unwrap().written);
}

#[test]
fn c2_a_write_back_distrusts_targets_too() {
    let mut e = engine();
    apply(
        &mut e,
        Event::AddTarget {
            id: 1,
            name: "vb".into(),
            range: r(0x2000, 0x2100),
        },
    );
    let report = run(
        &mut e,
        &bound(
            vec![slot(0, 0x2080, 0x10, true)],
            vec![buf_store(0, 0, &[1])],
        ),
    );
    assert_eq!(
        report.hand_off.targets_distrusted[0].by,
        "write-back of holder slot 0 (O8)"
    );
}

#[test]
fn c3_deferred_copies_land_before_a_device_addressed_dispatch() {
    let mut e = engine();
    reserve(&mut e, RES, RES_END);
    apply(
        &mut e,
        Event::DeferCopy {
            address: 0x1_1000,
            bytes: vec![0xef, 0xbe, 0xad, 0xde],
        },
    );
    assert_eq!(e.memory().deferred_copies().len(), 1);
    let report = run(&mut e, &device(vec![], vec![load(0x1_1000, 4)]));
    assert_eq!(report.before.copies, vec![r(0x1_1000, 0x1_1004)]);
    assert_eq!(report.before.still_deferred, 0);
    assert_eq!(values(&report, 0), vec![0xdead_beef]);
    assert!(e.memory().deferred_copies().is_empty());
}

#[test]
fn c3_a_bound_dispatch_leaves_copies_deferred() {
    // A copy no binding covers waits (issue 13: one a holder covers lands first, `fidelity.rs`).
    let mut e = engine();
    reserve(&mut e, RES, RES_END);
    apply(
        &mut e,
        Event::DeferCopy {
            address: 0x1_1000,
            bytes: vec![1, 2, 3, 4],
        },
    );
    let report = run(
        &mut e,
        &bound(
            vec![slot(0, 0x1_1010, 0x10, false)],
            vec![buf_load(0, 0, 4)],
        ),
    );
    assert_eq!(report.before.still_deferred, 1);
    assert!(report.before.copies.is_empty());
    assert_eq!(values(&report, 0), vec![0], "the copy has not landed");
    let next = run(&mut e, &device(vec![], vec![load(0x1_1000, 4)]));
    assert_eq!(values(&next, 0), vec![0x0403_0201]);
}

#[test]
fn l1_a_device_store_and_a_bound_store_to_one_word_are_a_hazard() {
    let mut e = engine();
    reserve(&mut e, RES, RES_END);
    let input = device(
        vec![slot(0, 0x1_1000, 0x10, true)],
        vec![
            buf_store(0, 4, &[0xb0b0]),
            store(0x1_1004, &[0xd0d0]),
            store(0x1_1008, &[0xd1d1]),
        ],
    );
    let report = run(&mut e, &input);
    assert_eq!(report.hazards.len(), 1);
    let h = &report.hazards[0];
    assert_eq!(
        (h.rule, h.holder, h.address, h.device_store, h.bound_store),
        (Rule::L1, 0, 0x1_1004, 1, Some(0))
    );
    assert!(h.message.contains("the write-back lands last"));
    assert_eq!(word(&e, 0x1_1004), 0xb0b0, "the write-back lands last");
    assert_eq!(
        word(&e, 0x1_1008),
        0xd1d1,
        "a word only the device stored keeps its value"
    );
    assert_eq!(report.rules_cited(), vec![Rule::L1]);
}

#[test]
fn l1_no_hazard_when_the_words_differ() {
    let mut e = engine();
    reserve(&mut e, RES, RES_END);
    let input = device(
        vec![slot(0, 0x1_1000, 0x10, true)],
        vec![buf_store(0, 0, &[1]), store(0x1_1004, &[2])],
    );
    assert!(run(&mut e, &input).hazards.is_empty());
}

#[test]
fn l1_a_device_store_that_lands_only_past_its_first_chunk_is_still_a_hazard() {
    let mut e = engine();
    reserve(&mut e, RES, RES_END);
    // The store's first four bytes (0xfffc..0x10000) lie in no reservation; the last four land.
    let input = device(
        vec![slot(0, RES, 0x10, true)],
        vec![
            buf_store(0, 0, &[0xb0b0]),
            store(RES - 4, &[0xd0d0, 0xd1d1]),
        ],
    );
    let report = run(&mut e, &input);
    assert!(report.accesses[1].escaped);
    assert_eq!(report.marks.len(), 1);
    let hazards: Vec<(u64, usize)> = report
        .hazards
        .iter()
        .map(|h| (h.address, h.device_store))
        .collect();
    assert_eq!(hazards, vec![(RES, 1)]);
}

#[test]
fn l1_bytes_a_device_store_did_not_land_are_no_hazard() {
    let mut e = engine();
    reserve(&mut e, RES, RES_END);
    // Slot 0 lies just past the reservation: bound, but in no mapping. The device store's last
    // four bytes reach it by address, miss (T4) and store nothing, so the write-back races nothing.
    let input = device(
        vec![slot(0, RES_END, 0x10, true)],
        vec![
            buf_store(0, 0, &[0xb0b0]),
            store(RES_END - 4, &[0xd0d0, 0xd1d1]),
        ],
    );
    let report = run(&mut e, &input);
    assert!(report.accesses[1].escaped);
    assert!(report.hazards.is_empty(), "{:?}", report.hazards);
    assert_eq!(word(&e, RES_END), 0xb0b0);
    assert_eq!(word(&e, RES_END - 4), 0xd0d0);
}

// ---------------------------------------------------------------------------------------------
// Bad input: named errors, never panics, and nothing changes.
// ---------------------------------------------------------------------------------------------

fn check_bad(input: &DispatchInput, expected: InputError, message: &str) {
    let mut e = engine();
    let err = input_error(&mut e, input);
    assert_eq!(err, expected);
    assert_eq!(err.to_string(), message);
    assert_eq!(e.next_dispatch(), 0);
}

#[test]
fn bad_input_is_a_named_error() {
    check_bad(
        &bound(vec![slot(1, u64::MAX - 0xf, 0x20, false)], vec![]),
        InputError::SlotOverflow {
            slot: 1,
            base: u64::MAX - 0xf,
            size_bytes: 0x20,
        },
        "slot 1: base 0xfffffffffffffff0 + size 0x20 passes the end of the address space",
    );
    check_bad(
        &bound(vec![slot(2, 0x1000, 0, false)], vec![]),
        InputError::ZeroSizeSlot { slot: 2 },
        "slot 2 has size 0",
    );
    check_bad(
        &bound(
            vec![slot(0, 0x1000, 0x10, false)],
            vec![buf_load(0, 0xc, 8)],
        ),
        InputError::AccessOutsideSlot {
            access: 0,
            slot: 0,
            offset: 0xc,
            size: 8,
            size_bytes: 0x10,
        },
        "access 0: bytes 0xc..0x14 of slot 0 lie outside its 0x10 bytes",
    );
    check_bad(
        &bound(
            vec![slot(0, 0x1000, 0x10, true)],
            vec![buf_store_sized(0, 0, 8, &[1])],
        ),
        InputError::StoreValueCount {
            access: 0,
            size: 8,
            expected: 2,
            got: 1,
        },
        "access 0: a store of 8 bytes carries 1 values, not 2",
    );
    check_bad(
        &bound(
            vec![slot(0, 0x1000, 0x10, false), slot(0, 0x2000, 0x10, false)],
            vec![],
        ),
        InputError::DuplicateSlot { slot: 0 },
        "slot 0 appears twice",
    );
    check_bad(
        &bound(vec![slot(0, 0x1000, 0x10, false)], vec![buf_load(5, 0, 4)]),
        InputError::UnknownSlot { access: 0, slot: 5 },
        "access 0 names slot 5, which the dispatch does not bind",
    );
    check_bad(
        &bound(
            vec![
                slot(0, 0x1000, 0x10, false),
                copy_of(1, &slot(0, 0x1000, 0x20, false), false),
            ],
            vec![],
        ),
        InputError::AliasMismatch {
            slot: 1,
            of: 0,
            range: r(0x1000, 0x1020),
            of_range: r(0x1000, 0x1010),
        },
        "slot 1 claims to be an exact copy of slot 0 (D937) but binds 0x1000..0x1020 where slot 0 binds 0x1000..0x1010",
    );
    check_bad(
        &bound(vec![slot(0, 0x1000, 0x10, false)], vec![buf_load(0, 0, 0)]),
        InputError::BadSize { access: 0, size: 0 },
        "access 0: size 0 bytes; an access is 1 to 64 bytes",
    );
}

#[test]
fn bad_input_an_unknown_format_names_it() {
    let text = r#"{"program":"0x1000","slots":[{"slot":0,"base":"0x1000","size_bytes":"0x10","format":"R9_UINT"}]}"#;
    let err = serde_json::from_str::<DispatchInput>(text)
        .unwrap_err()
        .to_string();
    assert!(err.contains("R9_UINT"), "{err}");
    let ok = text.replace("R9_UINT", "R8G8B8A8_UNORM");
    let input: DispatchInput = serde_json::from_str(&ok).unwrap();
    assert_eq!(input.slots[0].format, Some(Format::R8G8B8A8Unorm));
}

#[test]
fn bad_events_are_named_errors_and_change_nothing() {
    let mut e = engine();
    reserve(&mut e, RES, RES_END);
    let err = e
        .apply(&Event::Commit {
            range: r(0x1_0001, 0x1_1000),
        })
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "bad memory event: 0x10001..0x11000 is not aligned to the 0x1000-byte host page"
    );
    let err = e.apply(&Event::Release { base: 0x9_0000 }).unwrap_err();
    assert_eq!(
        err.to_string(),
        "bad memory event: no reservation starts at 0x90000"
    );
    let err = e
        .apply(&Event::Reserve {
            range: r(0x1_3000, 0x1_5000),
            readable: true,
            writable: true,
            committed: true,
            backing: Backing::Private,
            host_base: None,
        })
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("overlaps the reservation at 0x10000..0x14000")
    );
    let report = run(&mut e, &device(vec![], vec![]));
    assert_eq!(
        report.events_before.len(),
        1,
        "only the good event is reported"
    );
}

#[test]
fn d824_a_lifted_guard_leaves_the_page_mappable_and_its_note_alone() {
    let mut e = engine();
    reserve(&mut e, RES, RES_END);
    apply(
        &mut e,
        Event::Guard {
            range: r(RES, RES_END),
        },
    );
    apply(
        &mut e,
        Event::Write {
            address: 0x1_1000,
            bytes: vec![1, 2, 3, 4],
        },
    );
    let p = e.memory().page_at(0x1_1000).unwrap();
    assert!(p.guarded && p.written, "a write leaves the guard alone");
    assert!(!p.mappable(), "a guarded page is not mappable before M2");
    // The write-watch's handler lifted the guard of the page it caught.
    apply(
        &mut e,
        Event::Unguard {
            range: r(0x1_1000, 0x1_2000),
        },
    );
    let p = e.memory().page_at(0x1_1000).unwrap();
    assert!(!p.guarded && p.written, "the note stays");
    assert!(p.mappable());
    assert!(e.memory().page_at(0x1_2000).unwrap().guarded);
    // M2 then has one page fewer to release.
    let report = run(&mut e, &device(vec![], vec![]));
    let m = report.mappings.unwrap();
    assert_eq!(m.guards_released, (RES_END - RES) / 0x1000 - 1);
}
