//! Property tests of the dispatch path against deliberately slow models (STYLE.md, Tests):
//!
//! - overlap sets (O1–O7) against a byte-by-byte model: every pair of slots compared byte by byte,
//!   components found by naive relaxation;
//! - chunk-table lookups through the engine (M1–M5, T1–T4) against a linear scan of the engine's
//!   mapped pieces, and the pieces themselves against a page-by-page model of M1–M3 after a remap;
//! - marks and write-back (C1, O8, O9, L1) against a plain map of bytes;
//! - flat-address routing (P1) against its definition, alone and through the engine.
//!
//! Case counts are moderate so that the file runs in a few seconds in the test profile.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails by panicking"
)]

use std::collections::{BTreeMap, BTreeSet};

use dispatchscope_core::addr::ByteRange;
use dispatchscope_core::aperture::route_flat;
use dispatchscope_core::input::{Backing, HostProtection};
use dispatchscope_core::input::{InputError, Op, Reason};
use dispatchscope_core::memory::PageState;
use dispatchscope_core::overlap::plan_bindings;
use dispatchscope_core::report::Role;
use dispatchscope_core::report::{LeftOutReason, Mode, Route};
use dispatchscope_core::{
    Access, AccessKind, DeviceLimits, DispatchInput, DispatchReport, Engine, EngineError, Event,
    Rule, Slot,
};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::FileFailurePersistence;

/// `cases` cases, with failures kept in `proptest-regressions/models.txt` (relative to the crate,
/// where `cargo test` runs): proptest's default looks for a `lib.rs` beside the source file, which
/// an integration test does not have, and would keep nothing.
fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/models.txt",
        ))),
        ..ProptestConfig::default()
    }
}

fn r(start: u64, end: u64) -> ByteRange {
    ByteRange::new(start, end)
}

fn access(kind: AccessKind, op: Op, address: u64, size_bytes: u32, values: Vec<u32>) -> Access {
    Access {
        address: Some(address),
        values,
        ..Access::new(kind, op, size_bytes)
    }
}

/// A fixed stream of bytes from a seed (xorshift64), so that big contents cost proptest nothing to
/// shrink.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut s = seed | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s as u8
        })
        .collect()
}

// =============================================================================================
// 1. Overlap sets (O1–O7) against a byte-by-byte model.
// =============================================================================================

/// One raw slot: base, size, written, what it is (0: a copy, 1: an unresolved copy, 2: unresolved,
/// else plain), and which earlier slot a copy copies.
type RawSlot = (u64, u64, bool, u8, Index);

fn build_slots(raw: &[RawSlot], numbers: &[u32]) -> Vec<Slot> {
    let mut slots: Vec<Slot> = Vec::with_capacity(raw.len());
    for (i, &(base, size, written, what, pick)) in raw.iter().enumerate() {
        // A copy copies an earlier plain, resolved slot (never a copy, never an unresolved slot).
        let targets: Vec<usize> = (0..i)
            .filter(|&j| slots[j].alias_of.is_none() && slots[j].resolved)
            .collect();
        let mut s = Slot::new(numbers[i], base, size, written);
        match what {
            0 | 1 if !targets.is_empty() => {
                let t = &slots[targets[pick.index(targets.len())]];
                s.base = t.base;
                s.size_bytes = t.size_bytes;
                s.alias_of = Some(t.slot);
                s.resolved = what == 0;
            }
            2 => s.resolved = false,
            _ => {}
        }
        slots.push(s);
    }
    slots
}

fn slots_strategy() -> impl Strategy<Value = Vec<Slot>> {
    prop::collection::vec(
        (0u64..512, 1u64..96, any::<bool>(), 0u8..14, any::<Index>()),
        1..24,
    )
    .prop_flat_map(|raw| {
        let numbers: Vec<u32> = (0..raw.len() as u32).map(|i| i * 3 + 1).collect();
        (Just(raw), Just(numbers).prop_shuffle())
    })
    .prop_map(|(raw, numbers)| build_slots(&raw, &numbers))
}

/// What the model expects of one bound slot.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Expected {
    holder: u32,
    offset: u64,
    binding: ByteRange,
    role: Role,
}

/// The model: O1 byte by byte, O2 by naive relaxation, O3 as an edge, O4–O7 by their words.
struct OverlapModel {
    /// Per slot position: `None` when unbound.
    expected: Vec<Option<Expected>>,
    /// Sets of two or more: (holder, base, end, members but the holder, sorted; any written).
    sets: Vec<(u32, u64, u64, Vec<u32>, bool)>,
    /// Slots O7 refuses, sorted.
    misaligned: Vec<u32>,
    /// The component of each bound slot position.
    comp: Vec<usize>,
}

fn overlap_model(slots: &[Slot], align: u64) -> OverlapModel {
    let n = slots.len();
    let pos_of = |slot: u32| slots.iter().position(|s| s.slot == slot);
    let copy_of: Vec<Option<usize>> = slots.iter().map(|s| s.alias_of.and_then(pos_of)).collect();
    // A slot is bound when the host resolved it; a copy follows its target everywhere (O3), so
    // it is bound when its target is, whatever its own flag says.
    let bound: Vec<bool> = slots
        .iter()
        .zip(&copy_of)
        .map(|(s, c)| c.map_or(s.resolved, |t| slots[t].resolved))
        .collect();
    let shares_a_byte = |a: &Slot, b: &Slot| {
        (a.base..a.base + a.size_bytes).any(|x| b.base <= x && x < b.base + b.size_bytes)
    };
    let mut edges: Vec<(usize, usize)> = Vec::new();
    for a in 0..n {
        for b in a + 1..n {
            if !bound[a] || !bound[b] {
                continue;
            }
            // O1: a copy is a slot like any other here, which counts its writes for its target.
            let o1 = (slots[a].written || slots[b].written) && shares_a_byte(&slots[a], &slots[b]);
            // O3: a copy follows its target even when neither is written.
            let o3 = copy_of[a] == Some(b) || copy_of[b] == Some(a);
            if o1 || o3 {
                edges.push((a, b));
            }
        }
    }
    // O2: connected parts, by relaxing every edge until nothing changes.
    let mut comp: Vec<usize> = (0..n).collect();
    loop {
        let mut changed = false;
        for &(a, b) in &edges {
            let m = comp[a].min(comp[b]);
            if comp[a] != m || comp[b] != m {
                comp[a] = m;
                comp[b] = m;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let mut expected = vec![None; n];
    let mut sets = Vec::new();
    let mut misaligned = Vec::new();
    for c in 0..n {
        let members: Vec<usize> = (0..n).filter(|&i| bound[i] && comp[i] == c).collect();
        if members.is_empty() {
            continue;
        }
        // O4: the lowest base, then the earliest slot; a copy never holds (it follows, O3).
        let holder = *members
            .iter()
            .filter(|&&i| copy_of[i].is_none())
            .min_by_key(|&&i| (slots[i].base, slots[i].slot))
            .unwrap();
        let base = slots[holder].base;
        // O5: the holder ends where the last member ends.
        let end = members
            .iter()
            .map(|&i| slots[i].base + slots[i].size_bytes)
            .max()
            .unwrap();
        for &i in &members {
            // O6: every other member binds the holder at its offset, to the widened end.
            let offset = slots[i].base - base;
            let role = match (i == holder, members.len(), copy_of[i]) {
                (true, 1, _) => Role::Alone,
                (true, _, _) => Role::Holder,
                (false, _, Some(t)) => Role::Copy { of: slots[t].slot },
                (false, _, None) => Role::Member,
            };
            expected[i] = Some(Expected {
                holder: slots[holder].slot,
                offset,
                binding: r(offset, end - base),
                role,
            });
            // O7.
            if i != holder && !offset.is_multiple_of(align) {
                misaligned.push(slots[i].slot);
            }
        }
        if members.len() > 1 {
            let mut others: Vec<u32> = members
                .iter()
                .filter(|&&i| i != holder)
                .map(|&i| slots[i].slot)
                .collect();
            others.sort_unstable();
            let written = members.iter().any(|&i| slots[i].written);
            sets.push((slots[holder].slot, base, end, others, written));
        }
    }
    sets.sort();
    misaligned.sort_unstable();
    OverlapModel {
        expected,
        sets,
        misaligned,
        comp,
    }
}

fn check_overlap(slots: &[Slot], align: u64) -> Result<(), TestCaseError> {
    let limits = DeviceLimits {
        min_storage_buffer_offset_alignment: align,
        ..DeviceLimits::default()
    };
    let plan = plan_bindings(slots, &[], &limits, None);
    let model = overlap_model(slots, align);

    let mut got_sets: Vec<(u32, u64, u64, Vec<u32>, bool)> = plan
        .sets
        .iter()
        .map(|s| {
            (
                s.holder,
                s.base,
                s.end,
                s.members.iter().map(|m| m.slot).collect(),
                s.written,
            )
        })
        .collect();
    got_sets.sort();
    prop_assert_eq!(&got_sets, &model.sets);

    prop_assert_eq!(plan.bindings.len(), slots.len());
    for (i, (b, want)) in plan.bindings.iter().zip(&model.expected).enumerate() {
        prop_assert_eq!(b.slot, slots[i].slot);
        match want {
            None => {
                prop_assert_eq!(b.role, Role::Unbound);
                prop_assert_eq!(b.holder, None);
                prop_assert!(!b.resolved);
            }
            Some(want) => {
                let got = Expected {
                    holder: b.holder.unwrap_or(u32::MAX),
                    offset: b.offset,
                    binding: b.binding,
                    role: b.role,
                };
                prop_assert_eq!(&got, want, "slot {}", slots[i].slot);
                prop_assert_eq!(b.aligned, b.offset % align == 0);
                match b.set {
                    Some(k) => prop_assert_eq!(plan.sets[k].holder, want.holder),
                    None => prop_assert_eq!(want.role, Role::Alone),
                }
            }
        }
    }

    // The joins of a set are O1 joins between its members, and connect it.
    for set in &plan.sets {
        let pos = |slot: u32| slots.iter().position(|s| s.slot == slot).unwrap();
        for j in &set.joins {
            let (a, b) = (&slots[pos(j.a)], &slots[pos(j.b)]);
            let both =
                r(a.base, a.base + a.size_bytes).intersection(&r(b.base, b.base + b.size_bytes));
            prop_assert_eq!(Some(j.overlap), both, "join {:?}", j);
            prop_assert!(
                a.written
                    || b.written
                    || slots.iter().any(|c| {
                        c.written && (c.alias_of == Some(a.slot) || c.alias_of == Some(b.slot))
                    }),
                "join {:?} has no written side",
                j
            );
            prop_assert_eq!(model.comp[pos(j.a)], model.comp[pos(j.b)]);
        }
        // Every member but the copies is reached by a join from the holder (a copy follows its
        // target without one).
        let mut reached: BTreeSet<u32> = BTreeSet::from([set.holder]);
        loop {
            let before = reached.len();
            for j in &set.joins {
                if reached.contains(&j.a) || reached.contains(&j.b) {
                    reached.insert(j.a);
                    reached.insert(j.b);
                }
            }
            if reached.len() == before {
                break;
            }
        }
        for m in &set.members {
            let is_copy = slots[pos(m.slot)].alias_of.is_some();
            prop_assert!(
                is_copy || reached.contains(&m.slot),
                "member {} not joined",
                m.slot
            );
        }
        let canonical = 1 + set
            .members
            .iter()
            .filter(|m| slots[pos(m.slot)].alias_of.is_none())
            .count();
        prop_assert_eq!(
            set.joins.len(),
            canonical - 1,
            "a spanning forest: each member reached once"
        );
    }

    // O7: the refusals are exactly the misaligned members.
    let mut refused: Vec<u32> = plan
        .refusals
        .iter()
        .filter(|r| r.rule == Rule::O7)
        .filter_map(|r| r.slot)
        .collect();
    refused.sort_unstable();
    prop_assert_eq!(&refused, &model.misaligned);
    prop_assert!(plan.refusals.iter().all(|r| r.rule == Rule::O7));
    Ok(())
}

proptest! {
    #![proptest_config(config(1024))]

    #[test]
    fn overlap_sets_match_the_byte_model(
        slots in slots_strategy(),
        align in prop::sample::select(vec![1u64, 4, 16, 64, 256]),
    ) {
        check_overlap(&slots, align)?;
    }
}

// =============================================================================================
// 2. Chunk-table lookups through the engine against a linear scan of the mapped pieces.
// =============================================================================================

const PAGE: u64 = 0x1000;
/// The region the reservations lie in: 48 pages from 1 MiB (64 KiB-aligned, so T1 can give 64 KiB
/// chunks when every mapping is 64 KiB-aligned, and 4 KiB chunks otherwise).
const REGION: u64 = 0x10_0000;
const REGION_PAGES: u64 = 48;

fn page(p: u64) -> u64 {
    REGION + p * PAGE
}

#[derive(Clone, Debug)]
enum Ev {
    Reserve {
        first: u64,
        pages: u64,
        readable: bool,
        writable: bool,
        committed: bool,
        shared: bool,
    },
    Release(Index),
    Commit(u64, u64),
    Decommit(u64, u64),
    Protect(u64, u64, bool, bool),
    HostProtect(u64, u64, u8),
    SetBacking(u64, u64, bool),
    Guard(u64, u64),
}

fn pages() -> impl Strategy<Value = (u64, u64)> {
    (0..REGION_PAGES, 1u64..6)
}

fn reserve() -> impl Strategy<Value = Ev> {
    // Anywhere, or 64 KiB-aligned and 64 KiB long (where T1 gives 64 KiB chunks).
    let at = prop_oneof![
        (0..REGION_PAGES, 1u64..17),
        (0u64..3).prop_map(|k| (16 * k, 16))
    ];
    let writable = prop::bool::weighted(0.75);
    (
        at,
        any::<bool>(),
        writable,
        any::<bool>(),
        prop::bool::weighted(0.2),
    )
        .prop_map(
            |((first, pages), readable, writable, committed, shared)| Ev::Reserve {
                first,
                pages,
                readable: readable || pages % 2 == 0,
                writable,
                committed,
                shared,
            },
        )
}

fn ev() -> impl Strategy<Value = Ev> {
    prop_oneof![
        3 => reserve(),
        1 => any::<Index>().prop_map(Ev::Release),
        2 => pages().prop_map(|(a, n)| Ev::Commit(a, n)),
        1 => pages().prop_map(|(a, n)| Ev::Decommit(a, n)),
        2 => (pages(), any::<bool>(), any::<bool>()).prop_map(|((a, n), rd, wr)| Ev::Protect(a, n, rd, wr)),
        1 => (pages(), 0u8..3).prop_map(|((a, n), p)| Ev::HostProtect(a, n, p)),
        1 => (pages(), any::<bool>()).prop_map(|((a, n), s)| Ev::SetBacking(a, n, s)),
        1 => pages().prop_map(|(a, n)| Ev::Guard(a, n)),
    ]
}

/// Events between two dispatches that leave the generation alone but make M5 look again: commits,
/// decommits, host reprotects and backings, mostly towards mappable.
fn revisit_ev() -> impl Strategy<Value = Ev> {
    prop_oneof![
        3 => pages().prop_map(|(a, n)| Ev::Commit(a, n)),
        2 => pages().prop_map(|(a, n)| Ev::Decommit(a, n)),
        3 => (pages(), prop_oneof![3 => Just(2u8), 1 => 0u8..2]).prop_map(|((a, n), p)| Ev::HostProtect(a, n, p)),
        3 => (pages(), prop::bool::weighted(0.25)).prop_map(|((a, n), s)| Ev::SetBacking(a, n, s)),
        1 => ev(),
    ]
}

fn event_of(e: &Engine, ev: &Ev) -> Option<Event> {
    let range = |a: u64, n: u64| r(page(a), page((a + n).min(REGION_PAGES)));
    Some(match *ev {
        Ev::Reserve {
            first,
            pages,
            readable,
            writable,
            committed,
            shared,
        } => Event::Reserve {
            range: range(first, pages),
            readable,
            writable,
            committed,
            backing: if shared {
                Backing::Shared
            } else {
                Backing::Private
            },
            host_base: None,
        },
        Ev::Release(i) => {
            let bases: Vec<u64> = e.memory().reservations().map(|r| r.range.start).collect();
            if bases.is_empty() {
                return None;
            }
            Event::Release {
                base: bases[i.index(bases.len())],
            }
        }
        Ev::Commit(a, n) => Event::Commit { range: range(a, n) },
        Ev::Decommit(a, n) => Event::Decommit { range: range(a, n) },
        Ev::Protect(a, n, readable, writable) => Event::Protect {
            range: range(a, n),
            readable,
            writable,
        },
        Ev::HostProtect(a, n, p) => Event::HostProtect {
            range: range(a, n),
            protection: [
                HostProtection::None,
                HostProtection::Read,
                HostProtection::ReadWrite,
            ][p as usize],
        },
        Ev::SetBacking(a, n, shared) => Event::SetBacking {
            range: range(a, n),
            backing: if shared {
                Backing::Shared
            } else {
                Backing::Private
            },
        },
        Ev::Guard(a, n) => Event::Guard { range: range(a, n) },
    })
}

/// Applies each event; one the memory manager refuses (outside a reservation, overlapping) must be
/// a named error that changes nothing, never a panic.
fn apply_all(e: &mut Engine, evs: &[Ev]) -> Result<(), TestCaseError> {
    for ev in evs {
        let Some(event) = event_of(e, ev) else {
            continue;
        };
        let generation = e.memory().generation();
        match e.apply(&event) {
            Ok(_) => {}
            Err(EngineError::Memory(err)) => {
                prop_assert!(!err.to_string().is_empty());
                prop_assert_eq!(e.memory().generation(), generation);
            }
            Err(other) => prop_assert!(false, "{:?} failed: {}", event, other),
        }
    }
    Ok(())
}

/// The addresses the dispatch loads from: every page start and one word inside, and a load across
/// each page boundary, over the region and a page either side.
fn probe_addresses() -> Vec<(u64, u32)> {
    let mut v = Vec::new();
    for p in 0..REGION_PAGES + 1 {
        v.push((page(p), 4));
        v.push((page(p) + 0x7f0, 16));
        v.push((page(p) - 4, 8));
    }
    v
}

/// The model of M1–M3 right after a full mapping: in each reservation's readable runs, the maximal
/// stretches of pages that are private and read-write (M2 has committed them and released their
/// guards), and the rest left out with their reason.
fn pieces_model(e: &Engine) -> (Vec<ByteRange>, Vec<(ByteRange, LeftOutReason)>) {
    let mut pieces: Vec<ByteRange> = Vec::new();
    let mut left: Vec<(ByteRange, LeftOutReason)> = Vec::new();
    for res in e.memory().reservations() {
        let mut prev_readable = false;
        for (i, p) in res.pages.iter().enumerate() {
            let start = res.range.start + i as u64 * PAGE;
            if !p.guest.readable {
                prev_readable = false;
                continue;
            }
            let reason = category(p);
            let joins_last =
                |last: Option<ByteRange>| prev_readable && last.is_some_and(|l| l.end == start);
            match reason {
                None => match pieces.last_mut() {
                    Some(l) if joins_last(Some(*l)) => l.end = start + PAGE,
                    _ => pieces.push(r(start, start + PAGE)),
                },
                Some(why) => match left.last_mut() {
                    Some((l, w)) if *w == why && joins_last(Some(*l)) => l.end = start + PAGE,
                    _ => left.push((r(start, start + PAGE), why)),
                },
            }
            prev_readable = true;
        }
    }
    (pieces, left)
}

fn category(p: &PageState) -> Option<LeftOutReason> {
    if !p.committed {
        Some(LeftOutReason::NotCommitted)
    } else if p.backing != Backing::Private {
        Some(LeftOutReason::NotPrivate)
    } else if p.guarded || p.protection != HostProtection::ReadWrite || !p.guest.writable {
        // M3: a page the guest may not write is left out, whatever its host protection.
        Some(LeftOutReason::NotReadWrite)
    } else {
        None
    }
}

fn check_lookups(e: &mut Engine) -> Result<(), TestCaseError> {
    let probes = probe_addresses();
    let accesses: Vec<Access> = probes
        .iter()
        .map(|&(a, n)| access(AccessKind::Global, Op::Load, a, n, vec![]))
        .collect();
    let input = DispatchInput {
        program: 1,
        reasons: vec![Reason::D758],
        accesses,
        ..DispatchInput::default()
    };
    let report = e
        .dispatch(&input)
        .map_err(|err| TestCaseError::fail(err.to_string()))?;
    prop_assert_eq!(report.mode, Mode::DeviceAddressed);
    let m = report.mappings.as_ref().unwrap();
    let pieces: Vec<(ByteRange, u64)> = m.pieces.iter().map(|p| (p.guest, p.device_base)).collect();

    // M1–M3: after a full mapping, the pieces are exactly the model's.
    if m.remapped {
        let (want_pieces, want_left) = pieces_model(e);
        let got: Vec<ByteRange> = pieces.iter().map(|p| p.0).collect();
        prop_assert_eq!(got, want_pieces);
        let got_left: Vec<(ByteRange, LeftOutReason)> =
            m.left_out.iter().map(|l| (l.guest, l.reason)).collect();
        prop_assert_eq!(got_left, want_left);
    }
    // M4: whatever happened since, no piece holds a page whose host memory went.
    for &(p, _) in &pieces {
        for a in (p.start..p.end).step_by(PAGE as usize) {
            let state = e.memory().page_at(a);
            prop_assert!(
                state.is_some_and(|s| s.committed),
                "piece {} holds {:#x}: {:?}",
                p,
                a,
                state
            );
        }
    }

    // The slow model: the piece holding a byte, by a linear scan.
    let piece_at = |a: u64| pieces.iter().find(|(g, _)| g.contains(a)).copied();
    for (i, &(addr, size)) in probes.iter().enumerate() {
        let a = &report.accesses[i];
        prop_assert_eq!(&a.route, &Route::Device { address: addr });
        let all_held = (addr..addr + u64::from(size)).all(|b| piece_at(b).is_some());
        prop_assert_eq!(a.escaped, !all_held, "access at {:#x}+{}", addr, size);
        prop_assert_eq!(
            a.device_address,
            piece_at(addr).map(|(g, d)| d + (addr - g.start))
        );
        // Held bytes read guest memory, the others zero (T4).
        let mut want = vec![0u8; size as usize];
        for (k, byte) in want.iter_mut().enumerate() {
            let b = addr + k as u64;
            if piece_at(b).is_some() {
                e.memory()
                    .read_bytes(b, std::slice::from_mut(byte))
                    .unwrap();
            }
        }
        let got: Vec<u8> = a
            .values
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .take(size as usize)
            .collect();
        prop_assert_eq!(got, want, "access at {:#x}+{}", addr, size);
    }
    prop_assert_eq!(
        report.escapes.len(),
        report.accesses.iter().filter(|a| a.escaped).count()
    );

    // The table itself: every part of every chunk of the region is found exactly when a piece
    // holds it, at the piece's device address (T1 by parts: a chunk's parts may lie in pieces of
    // one import or of several, each reached through its own slot).
    let t = e.table().unwrap();
    let chunk = t.chunk_bytes();
    let part = chunk / 16;
    for &(g, _) in &pieces {
        prop_assert!(
            g.start % part == 0 && g.end % part == 0,
            "T1: {} is not aligned to a part ({:#x})",
            g,
            part
        );
    }
    let mut slots_wanted = std::collections::BTreeSet::new();
    let mut c = REGION - chunk;
    while c < page(REGION_PAGES) + chunk {
        let want = piece_at(c).map(|(g, d)| d + (c - g.start));
        prop_assert_eq!(t.device_from_guest(c), want, "part at {:#x}", c);
        prop_assert_eq!(t.device_from_guest(c + 12), want.map(|d| d + 12));
        if let Some(d) = want {
            // One slot for each chunk and import: the device address its first byte would have.
            slots_wanted.insert((c / chunk, d.wrapping_sub(c % chunk)));
        }
        c += part;
    }
    prop_assert_eq!(
        t.len(),
        slots_wanted.len(),
        "no stale slot stays in the table"
    );
    // The CPU reference's device address space leads back to the same guest bytes, contiguous to
    // the piece's end.
    for &(g, d) in &pieces {
        // The piece lies in one import, which may hold more after it.
        let (at, n) = e.backend().guest_from_device(d).unwrap();
        prop_assert!(at == g.start && n >= g.size_bytes(), "{} in its import", g);
        let (last, left) = e
            .backend()
            .guest_from_device(d + g.size_bytes() - 1)
            .unwrap();
        prop_assert!(last == g.end - 1 && left >= 1);
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(192))]

    #[test]
    fn lookups_through_the_engine_match_a_scan_of_the_pieces(
        first in (reserve(), prop::collection::vec(ev(), 0..14)).prop_map(|(r, mut v)| { v.insert(0, r); v }),
        then in prop::collection::vec(revisit_ev(), 0..12),
        seed in any::<u64>(),
        probe_bound in prop::sample::select(vec![1u32, 2, 8]),
    ) {
        let mut e = Engine::cpu(DeviceLimits { probe_bound, ..DeviceLimits::default() }).unwrap();
        e.load_contents(REGION, &noise(seed, (REGION_PAGES * PAGE) as usize));
        apply_all(&mut e, &first)?;
        check_lookups(&mut e)?;
        apply_all(&mut e, &then)?;
        check_lookups(&mut e)?;
    }
}

// =============================================================================================
// 3. Marks and write-back (C1, O8, O9, L1) against a plain map.
// =============================================================================================

/// The reservation the stores reach: eight 4 KiB pages, 4 KiB-aligned, so chunks are 4 KiB (T1).
const MEM: u64 = 0x11_000;
const MEM_END: u64 = 0x19_000;

/// Where in its slot a bound store lands.
#[derive(Clone, Debug)]
enum At {
    First,
    Last,
    Any(Index),
}

#[derive(Clone, Debug)]
enum St {
    /// Through written slot `slot` (an index among the written slots), `size` bytes.
    Bound {
        slot: Index,
        at: At,
        size: u32,
        value: u32,
    },
    /// By device address: one or two words at a word-aligned address.
    Device { address: u64, words: Vec<u32> },
}

fn st() -> impl Strategy<Value = St> {
    let at = prop_oneof![
        Just(At::First),
        Just(At::Last),
        any::<Index>().prop_map(At::Any)
    ];
    prop_oneof![
        (
            any::<Index>(),
            at,
            prop::sample::select(vec![1u32, 2, 4]),
            any::<u32>()
        )
            .prop_map(|(slot, at, size, value)| St::Bound {
                slot,
                at,
                size,
                value
            }),
        // A word or two anywhere from just below the reservation to just past it, or across a
        // chunk boundary (the reservation's ends among them).
        (
            prop_oneof![
                MEM - 8..MEM_END + 8,
                (0u64..=8).prop_map(|k| MEM + k * 0x1000 - 4)
            ],
            prop::collection::vec(any::<u32>(), 1..3)
        )
            .prop_map(|(a, words)| St::Device {
                address: a & !3,
                words
            }),
    ]
}

/// The bytes the test models: the reservation and 16 bytes either side of it, outside any mapping.
const MODELLED: ByteRange = ByteRange {
    start: MEM - 0x10,
    end: MEM_END + 0x10,
};

/// Slots over the modelled bytes: word-aligned bases and sizes (so every holder's words are guest
/// words), some overlapping, some at the reservation's ends and past them (bound, but unmapped).
fn mark_slots() -> impl Strategy<Value = Vec<(u64, u64, bool)>> {
    let words = (MODELLED.end - MODELLED.start) / 4;
    prop::collection::vec(
        (
            prop_oneof![0u64..8, 0x3f8u64..0x408, 0u64..words, words - 8..words],
            1u64..0x30,
            any::<bool>(),
        ),
        1..6,
    )
    .prop_map(|v| {
        v.into_iter()
            .map(|(w, n, written)| {
                let base = MODELLED.start + 4 * w;
                (base, (4 * n).min(MODELLED.end - base), written)
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn marks_and_write_back_match_a_plain_map(
        raw_slots in mark_slots(),
        stores in prop::collection::vec(st(), 0..24),
        seed in any::<u64>(),
    ) {
        // Alignment 4 so that no member is refused (O7) and every dispatch runs.
        let mut e = Engine::cpu(DeviceLimits { min_storage_buffer_offset_alignment: 4, ..DeviceLimits::default() }).unwrap();
        e.apply(&Event::Reserve { range: r(MEM, MEM_END), readable: true, writable: true, committed: true, backing: Backing::Private, host_base: None }).unwrap();
        let initial = noise(seed, MODELLED.size_bytes() as usize);
        e.load_contents(MODELLED.start, &initial);
        let slots: Vec<Slot> = raw_slots.iter().enumerate().map(|(i, &(b, n, w))| Slot::new(i as u32, b, n, w)).collect();
        let written: Vec<&Slot> = slots.iter().filter(|s| s.written).collect();

        // The plain map: guest bytes by address.
        let mut guest: BTreeMap<u64, u8> = (0..initial.len() as u64).map(|k| (MODELLED.start + k, initial[k as usize])).collect();
        let snapshot = guest.clone();
        let mut bound_words: BTreeMap<u64, [u8; 4]> = BTreeMap::new();
        let mut device_landed: Vec<(ByteRange, usize)> = Vec::new();
        let mut marks: BTreeMap<u64, u32> = BTreeMap::new();
        let mut accesses = Vec::new();
        let mapped = |a: u64| (MEM..MEM_END).contains(&a);
        for s in &stores {
            match s {
                St::Bound { slot, at, size, value } => {
                    if written.is_empty() {
                        continue;
                    }
                    let sl = written[slot.index(written.len())];
                    if u64::from(*size) > sl.size_bytes {
                        continue;
                    }
                    let last = sl.size_bytes - u64::from(*size);
                    let off = match at {
                        At::First => 0,
                        At::Last => last,
                        At::Any(i) => i.index(last as usize + 1) as u64,
                    };
                    // O8, O9: the holder's copy of each word it touches, as uploaded, then stored.
                    for (k, byte) in value.to_le_bytes().iter().take(*size as usize).enumerate() {
                        let g = sl.base + off + k as u64;
                        let w = bound_words.entry(g & !3).or_insert_with(|| {
                            std::array::from_fn(|j| snapshot[&((g & !3) + j as u64)])
                        });
                        w[(g & 3) as usize] = *byte;
                    }
                    accesses.push(Access {
                        slot: Some(sl.slot),
                        offset: Some(off),
                        address: None,
                        ..access(AccessKind::UntypedBuffer, Op::Store, 0, *size, vec![*value])
                    });
                }
                St::Device { address, words } => {
                    let size = 4 * words.len() as u64;
                    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
                    // T4: bytes no mapping holds store nothing; the others land now.
                    for (k, b) in bytes.iter().enumerate() {
                        let g = address + k as u64;
                        if mapped(g) {
                            guest.insert(g, *b);
                        }
                    }
                    // C1: each chunk the store reached, once per store.
                    let (c0, c1) = (address >> 12, (address + size - 1) >> 12);
                    for c in BTreeSet::from([c0, c1]) {
                        if mapped(c << 12) {
                            *marks.entry(c << 12).or_default() += 1;
                        }
                    }
                    let landed: Vec<u64> = (*address..address + size).filter(|&g| mapped(g)).collect();
                    if let (Some(&lo), Some(&hi)) = (landed.first(), landed.last()) {
                        device_landed.push((r(lo, hi + 1), accesses.len()));
                    }
                    accesses.push(access(AccessKind::Global, Op::Store, *address, size as u32, words.clone()));
                }
            }
        }
        // O8: after the dispatch each stored word is written back from its holder, last.
        for (&w, bytes) in &bound_words {
            for (j, b) in bytes.iter().enumerate() {
                guest.insert(w + j as u64, *b);
            }
        }
        // L1: a written-back word a device store also reached.
        let hazards: BTreeSet<u64> = bound_words
            .keys()
            .copied()
            .filter(|&w| device_landed.iter().any(|(d, _)| d.overlaps(&r(w, w + 4))))
            .collect();

        let input = DispatchInput { program: 2, reasons: vec![Reason::D753], slots: slots.clone(), accesses, ..DispatchInput::default() };
        let report = e.dispatch(&input).map_err(|err| TestCaseError::fail(err.to_string()))?;
        prop_assert_eq!(report.mode, Mode::DeviceAddressed);

        let mut got = vec![0u8; initial.len()];
        e.memory().read_bytes(MODELLED.start, &mut got).unwrap();
        let want: Vec<u8> = guest.values().copied().collect();
        if got != want {
            let first = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(0);
            prop_assert!(false, "guest bytes differ first at {:#x}: {:#x} != {:#x}", MODELLED.start + first as u64, got[first], want[first]);
        }

        let got_marks: BTreeMap<u64, u32> = report.marks.iter().map(|m| (m.guest.start, m.stores)).collect();
        prop_assert_eq!(got_marks, marks);
        for m in &report.marks {
            prop_assert_eq!(m.guest.size_bytes(), 0x1000);
        }

        let got_words: BTreeMap<u64, u64> = report.write_back.iter().flat_map(|wb| wb.words.iter().map(|w| (w.address, w.new))).collect();
        let want_words: BTreeMap<u64, u64> = bound_words.iter().map(|(&a, b)| (a, u64::from(u32::from_le_bytes(*b)))).collect();
        prop_assert_eq!(got_words, want_words);
        prop_assert!(report.write_back.iter().all(|wb| !wb.words.is_empty()), "a holder with nothing stored is not written back");

        let got_hazards: BTreeSet<u64> = report.hazards.iter().map(|h| h.address).collect();
        prop_assert_eq!(got_hazards, hazards);
    }
}

// =============================================================================================
// 4. Flat-address routing (P1) against its definition.
// =============================================================================================

/// Addresses near the apertures' high halves, and anything.
fn flat_address(lds: u64, scratch: u64) -> impl Strategy<Value = u64> {
    let near = move |high: u64| {
        (high.saturating_sub(1)..=high + 1, any::<u32>())
            .prop_map(|(h, lo)| (h << 32) | u64::from(lo))
    };
    prop_oneof![
        near(lds),
        near(scratch),
        any::<u64>(),
        (0u64..0x2_0000).prop_map(move |lo| (lds << 32) | lo)
    ]
}

fn apertures() -> impl Strategy<Value = (u64, u64)> {
    prop_oneof![
        Just((0x8000_0000u64, 0x7000_0000u64)),
        (0u64..=u64::from(u32::MAX), 0u64..=u64::from(u32::MAX))
            .prop_filter("two apertures", |(a, b)| a != b),
    ]
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn flat_routing_follows_the_high_half(
        (lds, scratch, address) in apertures().prop_flat_map(|(l, s)| (Just(l), Just(s), flat_address(l, s))),
    ) {
        let (high, low) = (address >> 32, address & 0xffff_ffff);
        let want = if high == lds {
            Route::Lds { offset: low }
        } else if high == scratch {
            Route::Scratch { offset: low }
        } else {
            Route::Device { address }
        };
        prop_assert_eq!(route_flat(address, lds, scratch), want);
    }

    #[test]
    fn flat_accesses_through_the_engine_route_by_p1(
        (lds, scratch, addresses) in apertures().prop_flat_map(|(l, s)| (Just(l), Just(s), prop::collection::vec(flat_address(l, s), 1..8))),
    ) {
        let limits = DeviceLimits { lds_aperture: lds, scratch_aperture: scratch, ..DeviceLimits::default() };
        let (lds_bytes, scratch_bytes) = (u64::from(limits.lds_bytes), u64::from(limits.scratch_bytes_per_lane));
        let mut e = Engine::cpu(limits).unwrap();
        let accesses: Vec<Access> = addresses.iter().map(|&a| access(AccessKind::Flat, Op::Load, a, 4, vec![])).collect();
        let input = DispatchInput { program: 3, reasons: vec![Reason::D758], accesses, ..DispatchInput::default() };
        // Where an offset passes its aperture the whole dispatch is a named error for the first one.
        let first_bad = addresses.iter().position(|&a| {
            let (high, low) = (a >> 32, a & 0xffff_ffff);
            (high == lds && low + 4 > lds_bytes) || (high != lds && high == scratch && low + 4 > scratch_bytes)
        });
        match (e.dispatch(&input), first_bad) {
            (Err(EngineError::Input(InputError::ApertureOutOfRange { access, .. })), Some(i)) => prop_assert_eq!(access, i),
            (Ok(report), None) => {
                for (a, &address) in report.accesses.iter().zip(&addresses) {
                    let want = route_flat(address, lds, scratch);
                    prop_assert_eq!(&a.route, &want);
                    prop_assert_eq!(a.rule, Rule::P1);
                    // Nothing is reserved: every guest access escapes, LDS and scratch never do.
                    prop_assert_eq!(a.escaped, matches!(want, Route::Device { .. }));
                }
            }
            (other, bad) => prop_assert!(false, "expected the first bad access {:?}, got {:?}", bad, other.map(|r: DispatchReport| r.mode)),
        }
    }
}
