//! Property tests of the chunk table (T1–T2) against a deliberately slow model: a list of
//! `(guest_chunk, device_addr)` pairs searched linearly.

use dispatchscope_core::chunk_table::{
    ChunkTable, EMPTY_KEY, InsertOutcome, KEY_CHUNK_MASK, MAX_CHUNK_BYTES, MAX_LOAD, TableError,
    chunk_bytes_for, home_slot,
};
use dispatchscope_core::report::LookupOutcome;
use proptest::prelude::*;

/// The model: mapped chunks in insertion order, found by a linear scan.
#[derive(Default, Debug)]
struct Model {
    entries: Vec<(u64, u64)>,
}

impl Model {
    fn get(&self, guest_chunk: u64) -> Option<u64> {
        self.entries
            .iter()
            .find(|(k, _)| *k == guest_chunk)
            .map(|&(_, a)| a)
    }

    fn insert(&mut self, guest_chunk: u64, device_addr: u64) {
        match self.entries.iter_mut().find(|(k, _)| *k == guest_chunk) {
            Some(e) => e.1 = device_addr,
            None => self.entries.push((guest_chunk, device_addr)),
        }
    }

    fn remove(&mut self, guest_chunk: u64) -> bool {
        let before = self.entries.len();
        self.entries.retain(|(k, _)| *k != guest_chunk);
        self.entries.len() != before
    }
}

/// Guest chunk bases like the ones the records cite, at 4 KiB chunks.
const BASES: [u64; 4] = [
    0x4000_0000_0000 >> 12,
    0x7400_5b80_0000 >> 12,
    0x4000_03e1_9200 >> 12,
    0x2_0000_0000 >> 12,
];

/// Keys: a small dense range (many collisions and updates), short runs at the bases, or anything.
fn key() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => 0u64..48,
        4 => (0usize..BASES.len(), 0u64..64).prop_map(|(b, i)| BASES[b] + i),
        // Any chunk number a key holds: its low 48 bits (the top 16 name parts).
        1 => any::<u64>().prop_map(|k| k & KEY_CHUNK_MASK),
    ]
}

#[derive(Clone, Debug)]
enum Op {
    Insert(u64, u64),
    Remove(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (key(), any::<u64>()).prop_map(|(k, a)| Op::Insert(k, a)),
        2 => key().prop_map(Op::Remove),
    ]
}

/// Every key within `probe_bound - 1` slots after its home, no empty slot between, load kept.
fn check_layout(t: &ChunkTable) -> Result<(), TestCaseError> {
    let mask = t.capacity() - 1;
    prop_assert!(t.capacity().is_power_of_two());
    prop_assert!(t.load() <= MAX_LOAD, "load {} over {}", t.load(), MAX_LOAD);
    let mut n = 0;
    for (slot, s) in t.slots().iter().enumerate() {
        if s.is_empty() {
            continue;
        }
        n += 1;
        let home = home_slot(s.guest_chunk, t.multiplier(), t.capacity_log2());
        prop_assert_eq!(home, t.home_slot(s.guest_chunk));
        let dist = slot.wrapping_sub(home) & mask;
        prop_assert!(
            dist < t.probe_bound() as usize,
            "key {:#x} at slot {slot} is {dist} slots from home {home}, bound {}",
            s.guest_chunk,
            t.probe_bound()
        );
        for d in 0..dist {
            prop_assert!(
                !t.slots()[(home + d) & mask].is_empty(),
                "empty slot inside a probe run"
            );
        }
    }
    prop_assert_eq!(n, t.len());
    Ok(())
}

/// The debugger's probe statistics agree with traces and with a slot-by-slot walk.
fn check_statistics(t: &ChunkTable, m: &Model) -> Result<(), TestCaseError> {
    let trace_lens: Vec<usize> = m
        .entries
        .iter()
        .map(|&(k, _)| t.trace(k).probes.len())
        .collect();
    let mut histogram = vec![0u64; t.probe_bound() as usize + 1];
    for &n in &trace_lens {
        histogram[n] += 1;
    }
    prop_assert_eq!(t.probe_histogram_hits(), histogram);
    let mean_hit = if trace_lens.is_empty() {
        0.0
    } else {
        trace_lens.iter().sum::<usize>() as f64 / trace_lens.len() as f64
    };
    prop_assert!((t.mean_probes_hit() - mean_hit).abs() < 1e-9);
    let mut miss_total = 0usize;
    for home in 0..t.capacity() {
        let mut probes = 0;
        while probes < t.probe_bound() as usize {
            probes += 1;
            if t.slots()[(home + probes - 1) % t.capacity()].is_empty() {
                break;
            }
        }
        miss_total += probes;
    }
    prop_assert!((t.mean_probes_miss() - miss_total as f64 / t.capacity() as f64).abs() < 1e-9);
    Ok(())
}

/// The table answers exactly as the model does, for mapped keys and for `probes` of unmapped ones.
fn check_against(t: &ChunkTable, m: &Model, probes: &[u64]) -> Result<(), TestCaseError> {
    prop_assert_eq!(t.len(), m.entries.len());
    for &(k, a) in &m.entries {
        prop_assert_eq!(t.lookup(k), Some(a), "mapped chunk {:#x}", k);
        let slot = t.lookup_slot(k);
        prop_assert!(slot.is_some());
        let trace = t.trace(k);
        prop_assert!(trace.probes.len() <= t.probe_bound() as usize);
        prop_assert_eq!(
            trace.outcome,
            LookupOutcome::Hit {
                slot: slot.unwrap_or(usize::MAX),
                device_addr: a
            }
        );
        let offset = (k.wrapping_mul(7)) & (t.chunk_bytes() - 1);
        if let Some(guest_addr) = k
            .checked_shl(t.chunk_shift())
            .filter(|g| g >> t.chunk_shift() == k)
        {
            prop_assert_eq!(
                t.device_from_guest(guest_addr | offset),
                Some(a.wrapping_add(offset))
            );
        }
    }
    for &k in probes {
        if m.get(k).is_some() {
            continue;
        }
        prop_assert_eq!(t.lookup(k), None, "unmapped chunk {:#x}", k);
        prop_assert_eq!(t.lookup_slot(k), None);
        let trace = t.trace(k);
        prop_assert!(trace.probes.len() <= t.probe_bound() as usize);
        prop_assert!(
            matches!(
                trace.outcome,
                LookupOutcome::MissEmpty { .. } | LookupOutcome::MissBound
            ),
            "{:?}",
            trace.outcome
        );
    }
    check_statistics(t, m)?;
    let mut from_table: Vec<(u64, u64)> = t.entries().collect();
    let mut from_model = m.entries.clone();
    from_table.sort_unstable();
    from_model.sort_unstable();
    prop_assert_eq!(from_table, from_model);
    check_layout(t)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn t2_every_mapped_chunk_is_found_after_builds_inserts_and_removes(
        chunk_log2 in 4u32..=16,
        probe_bound in prop_oneof![1u32..=8, Just(16u32)],
        initial in prop::collection::vec((key(), any::<u64>()), 0..64),
        ops in prop::collection::vec(op(), 0..160),
        probes in prop::collection::vec(key(), 0..64),
    ) {
        let mut model = Model::default();
        for &(k, a) in &initial {
            if model.get(k).is_none() {
                model.insert(k, a);
            }
        }
        let t = ChunkTable::build(1 << chunk_log2, probe_bound, &model.entries);
        let mut t = match t {
            Ok(t) => t,
            // Only a bound this small may run out of doublings on a few dozen keys.
            Err(TableError::NoRoom { .. }) if probe_bound <= 2 => return Ok(()),
            Err(e) => return Err(TestCaseError::fail(format!("build: {e}"))),
        };
        prop_assert_eq!(t.chunk_bytes(), 1u64 << chunk_log2);
        check_against(&t, &model, &probes)?;
        for op in ops {
            match op {
                Op::Insert(k, a) => {
                    let was_mapped = model.get(k).is_some();
                    let capacity = t.capacity();
                    match t.insert(k, a) {
                        Ok(InsertOutcome::Updated { slot }) => {
                            prop_assert!(was_mapped);
                            prop_assert_eq!(t.lookup_slot(k), Some(slot));
                        }
                        Ok(InsertOutcome::Placed { slot, probes }) => {
                            prop_assert!(!was_mapped);
                            prop_assert_eq!(t.lookup_slot(k), Some(slot));
                            prop_assert!(probes >= 1 && probes <= t.probe_bound());
                        }
                        Ok(InsertOutcome::Grew { from_capacity, to_capacity }) => {
                            prop_assert!(!was_mapped);
                            prop_assert_eq!(from_capacity, capacity);
                            prop_assert!(to_capacity > from_capacity);
                            prop_assert_eq!(to_capacity, t.capacity());
                        }
                        Err(TableError::NoRoom { .. }) if probe_bound <= 2 => {
                            // Refused whole: the table is as it was.
                            prop_assert_eq!(t.capacity(), capacity);
                            check_against(&t, &model, &probes)?;
                            continue;
                        }
                        Err(e) => return Err(TestCaseError::fail(format!("insert {k:#x}: {e}"))),
                    }
                    model.insert(k, a);
                }
                Op::Remove(k) => {
                    prop_assert_eq!(t.remove(k), model.remove(k), "remove {:#x}", k);
                }
            }
            check_against(&t, &model, &probes)?;
        }
    }

    #[test]
    fn t2_a_chunk_with_two_addresses_is_refused_by_name(
        keys in prop::collection::vec(key(), 1..40),
        pick in any::<prop::sample::Index>(),
        a in any::<u64>(),
        b in any::<u64>(),
    ) {
        prop_assume!(a != b);
        let dup = keys[pick.index(keys.len())];
        let mut entries: Vec<(u64, u64)> =
            keys.iter().filter(|&&k| k != dup).map(|&k| (k, k ^ 0x55)).collect();
        entries.insert(0, (dup, a));
        entries.push((dup, b));
        let e = ChunkTable::build(4096, 16, &entries).err();
        prop_assert_eq!(
            e,
            Some(TableError::DuplicateKey { guest_chunk: dup, first_device_addr: a, second_device_addr: b })
        );
    }

    #[test]
    fn t1_chunk_bytes_divide_every_mapping_end_and_no_coarser_would(
        mappings in prop::collection::vec(
            (any::<u64>(), 0u32..24, 0u64..64).prop_map(|(base, align_log2, n)| {
                let start = base >> 16 << align_log2;
                (start, start.wrapping_add(n << align_log2))
            }),
            0..6,
        ),
    ) {
        let c = chunk_bytes_for(mappings.iter().copied());
        prop_assert!(c.is_power_of_two() && c <= MAX_CHUNK_BYTES);
        for &(start, end) in &mappings {
            prop_assert_eq!(start % c, 0, "start {:#x}, chunk {:#x}", start, c);
            prop_assert_eq!(end % c, 0, "end {:#x}, chunk {:#x}", end, c);
        }
        let coarser = 2 * c;
        prop_assert!(
            coarser > MAX_CHUNK_BYTES
                || mappings.iter().any(|&(s, e)| s % coarser != 0 || e % coarser != 0),
            "{:#x} would divide every end too", coarser
        );
    }
}
