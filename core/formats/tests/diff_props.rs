//! Property: a diff of report A with report B lists exactly the decisions a naive field-by-field
//! comparison of the two finds, category by category and count by count.
//!
//! The naive comparison projects each report to JSON values (serde's, not the diff's keys and
//! types) and counts, per category, the keyed items whose values differ (or the multiset items
//! on one side only). Pairs are real reports of generated sessions, against each other and against
//! copies with random fields edited.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is the test failing, with its message"
)]

use std::collections::BTreeMap;

use dispatchscope_analysis::diff::{Category, Compared, diff_reports};
use dispatchscope_core::Rule;
use dispatchscope_core::report::{DispatchReport, Hazard, HazardKind, Mode, Refusal, Route};
use dispatchscope_formats::generate::{GenConfig, random_sample};
use proptest::prelude::*;
use serde_json::{Value, json};

fn j<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap()
}

/// Items keyed by a JSON key: how many keys have differing values (absent counts as differing).
fn keyed_count(a: Vec<(String, String)>, b: Vec<(String, String)>) -> usize {
    let ma: BTreeMap<String, String> = a.into_iter().collect();
    let mb: BTreeMap<String, String> = b.into_iter().collect();
    let mut keys: Vec<&String> = ma.keys().chain(mb.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| ma.get(*k) != mb.get(*k))
        .count()
}

/// A multiset's symmetric difference, counted.
fn multiset_count(a: Vec<String>, b: Vec<String>) -> usize {
    let mut m: BTreeMap<String, i64> = BTreeMap::new();
    for x in a {
        *m.entry(x).or_default() += 1;
    }
    for x in b {
        *m.entry(x).or_default() -= 1;
    }
    m.values().map(|n| n.unsigned_abs() as usize).sum()
}

/// The naive comparison: changes per category.
fn naive(a: &DispatchReport, b: &DispatchReport) -> BTreeMap<Category, usize> {
    let mut out = BTreeMap::new();
    let mut put = |c: Category, n: usize| {
        if n > 0 {
            out.insert(c, n);
        }
    };
    put(Category::Program, usize::from(a.program != b.program));
    put(Category::Label, usize::from(a.label != b.label));
    put(Category::Mode, usize::from(j(&a.mode) != j(&b.mode)));
    // Slots: each field of a slot on both sides counts once; a slot on one side counts once.
    let slot_fields = |r: &DispatchReport| -> BTreeMap<u32, Vec<String>> {
        r.slots
            .iter()
            .map(|s| {
                let v = serde_json::to_value(s).unwrap();
                let role = json!({"role": v["role"], "of": v.get("of")});
                (
                    s.slot,
                    vec![
                        role.to_string(),
                        v["holder"].to_string(),
                        v["offset"].to_string(),
                        v["binding"].to_string(),
                        v["aligned"].to_string(),
                    ],
                )
            })
            .collect()
    };
    let (sa, sb) = (slot_fields(a), slot_fields(b));
    let mut n = 0;
    for k in sa.keys().chain(sb.keys().filter(|k| !sa.contains_key(*k))) {
        match (sa.get(k), sb.get(k)) {
            (Some(x), Some(y)) => n += x.iter().zip(y).filter(|(p, q)| p != q).count(),
            _ => n += 1,
        }
    }
    put(Category::Slots, n);
    let sets = |r: &DispatchReport| -> Vec<(String, String)> {
        r.sets
            .iter()
            .map(|s| {
                let mut m: Vec<u32> = s.members.iter().map(|m| m.slot).collect();
                m.sort_unstable();
                (
                    s.holder.to_string(),
                    format!("{}|{}|{m:?}", j(&s.base), j(&s.end)),
                )
            })
            .collect()
    };
    put(Category::Sets, keyed_count(sets(a), sets(b)));
    let refusals = |r: &DispatchReport| -> Vec<String> {
        r.refusals
            .iter()
            .map(|x| format!("{}|{}|{}", j(&x.rule), j(&x.slot), x.message))
            .collect()
    };
    put(Category::Refusals, multiset_count(refusals(a), refusals(b)));
    let escapes = |r: &DispatchReport| -> Vec<String> {
        r.escapes
            .iter()
            .map(|e| {
                format!(
                    "{}|{}|{}|{}|{}",
                    e.access,
                    e.pc,
                    j(&e.class),
                    e.address,
                    j(&e.op)
                )
            })
            .collect()
    };
    put(Category::Escapes, multiset_count(escapes(a), escapes(b)));
    let marks = |r: &DispatchReport| -> Vec<(String, String)> {
        r.marks
            .iter()
            .map(|m| (j(&m.guest), m.stores.to_string()))
            .collect()
    };
    put(Category::Marks, keyed_count(marks(a), marks(b)));
    let words = |r: &DispatchReport| -> Vec<(String, String)> {
        r.write_back
            .iter()
            .flat_map(|w| {
                w.words.iter().map(move |x| {
                    (
                        format!("{}|{}", w.holder, x.address),
                        format!("{:?}|{}", x.old, x.new),
                    )
                })
            })
            .collect()
    };
    let unlisted = |r: &DispatchReport| -> Vec<(String, String)> {
        r.write_back
            .iter()
            .filter(|w| w.words_not_listed > 0)
            .map(|w| {
                (
                    w.holder.to_string(),
                    format!(
                        "{}|{}|{}",
                        w.words_not_listed,
                        j(&w.runs),
                        w.runs_not_listed
                    ),
                )
            })
            .collect()
    };
    put(
        Category::WriteBack,
        keyed_count(words(a), words(b)) + keyed_count(unlisted(a), unlisted(b)),
    );
    let hazards = |r: &DispatchReport| -> Vec<String> {
        r.hazards
            .iter()
            .map(|h| {
                format!(
                    "{}|{}|{}|{}|{}|{}",
                    j(&h.kind),
                    h.holder,
                    h.address,
                    h.device_store,
                    j(&h.bound_store),
                    j(&h.bound_load)
                )
            })
            .collect()
    };
    put(Category::Hazards, multiset_count(hazards(a), hazards(b)));
    let pieces = |r: &DispatchReport| -> Vec<(String, String)> {
        r.mappings
            .iter()
            .flat_map(|m| &m.pieces)
            .map(|p| {
                (
                    j(&p.guest),
                    format!(
                        "{}|{}|{}",
                        p.device_base, p.mapped_before_dispatch, p.by_revisit
                    ),
                )
            })
            .collect()
    };
    put(Category::Pieces, keyed_count(pieces(a), pieces(b)));
    let left = |r: &DispatchReport| -> Vec<(String, String)> {
        r.mappings
            .iter()
            .flat_map(|m| &m.left_out)
            .map(|l| (j(&l.guest), j(&l.reason)))
            .collect()
    };
    put(Category::LeftOut, keyed_count(left(a), left(b)));
    let chunk = |r: &DispatchReport| r.table.as_ref().map(|t| t.chunk_bytes);
    let probes = |r: &DispatchReport| {
        r.table
            .as_ref()
            .map(|t| json!([t.capacity, t.n_chunks, t.probe_bound, t.probe_histogram]).to_string())
    };
    put(
        Category::Table,
        usize::from(chunk(a) != chunk(b)) + usize::from(probes(a) != probes(b)),
    );
    let accesses = |r: &DispatchReport| -> Vec<(String, String)> {
        r.accesses
            .iter()
            .map(|x| {
                let v: Value = json!([
                    x.pc,
                    serde_json::to_value(&x.route).unwrap(),
                    x.values,
                    x.escaped
                ]);
                (x.index.to_string(), v.to_string())
            })
            .collect()
    };
    put(Category::Accesses, keyed_count(accesses(a), accesses(b)));
    out
}

/// The reports of a generated session (device-addressed and bound dispatches, escapes, marks …).
fn reports(seed: u64) -> Vec<DispatchReport> {
    random_sample(
        seed,
        GenConfig {
            dispatches: 6,
            slots: 6,
            accesses: 24,
            ..GenConfig::default()
        },
    )
    .run()
    .unwrap()
}

/// Edits one field of `r`, chosen by `what` and `k`.
fn edit(r: &mut DispatchReport, what: u8, k: usize) {
    let pick = |n: usize| if n == 0 { None } else { Some(k % n) };
    match what % 15 {
        0 => r.program ^= 0x100,
        1 => r.label.push('x'),
        2 => {
            r.mode = match r.mode {
                Mode::Bound => Mode::Refused,
                Mode::Refused => Mode::DeviceAddressed,
                Mode::DeviceAddressed => Mode::Bound,
            }
        }
        3 => {
            if let Some(i) = pick(r.slots.len()) {
                match k % 4 {
                    0 => r.slots[i].offset += 4,
                    1 => r.slots[i].aligned = !r.slots[i].aligned,
                    2 => r.slots[i].holder = r.slots[i].holder.map_or(Some(99), |_| None),
                    _ => r.slots[i].binding.end += 16,
                }
            }
        }
        4 => {
            if let Some(i) = pick(r.slots.len()) {
                r.slots.remove(i);
            }
        }
        5 => {
            if let Some(i) = pick(r.sets.len()) {
                r.sets[i].end += 0x40;
            }
        }
        6 => {
            if let Some(i) = pick(r.refusals.len()) {
                let x = r.refusals[i].clone();
                r.refusals.push(x);
            } else {
                r.refusals.push(Refusal {
                    rule: Rule::O7,
                    decision: "D953".into(),
                    slot: Some(k as u32),
                    values: Vec::new(),
                    message: format!("made up {k}"),
                    would_run_if: String::new(),
                    ours: false,
                });
            }
        }
        7 => {
            if let Some(i) = pick(r.escapes.len()) {
                if k.is_multiple_of(2) {
                    r.escapes.remove(i);
                } else {
                    r.escapes[i].address += 8;
                }
            }
        }
        8 => {
            if let Some(i) = pick(r.marks.len()) {
                r.marks[i].stores += 1;
            }
        }
        9 => {
            if let Some(i) = pick(r.write_back.len())
                && let Some(w) = r.write_back[i].words.first_mut()
            {
                w.new ^= 1;
            }
        }
        10 => {
            if let Some(m) = r.mappings.as_mut()
                && let Some(i) = pick(m.pieces.len())
            {
                m.pieces.remove(i);
            }
        }
        11 => {
            if let Some(t) = r.table.as_mut() {
                if k.is_multiple_of(2) {
                    t.chunk_bytes *= 2;
                } else {
                    t.probe_histogram.push(1);
                }
            }
        }
        13 => {
            // A device pass's write-back: words past those listed, and their runs.
            if let Some(i) = pick(r.write_back.len()) {
                let w = &mut r.write_back[i];
                w.words_not_listed = w.words_not_listed.wrapping_add(1 + (k % 64) as u64).max(1);
                w.runs.push(w.range);
            }
        }
        12 => {
            if let Some(i) = pick(r.accesses.len()) {
                if k.is_multiple_of(2) {
                    r.accesses[i].values.push(7);
                } else {
                    r.accesses[i].route = Route::NotRun;
                }
            }
        }
        _ => {
            if let Some(i) = pick(r.hazards.len()) {
                r.hazards.remove(i);
            } else {
                r.hazards.push(Hazard {
                    rule: Rule::L1,
                    kind: HazardKind::WriteBackOverDeviceStore,
                    ours: false,
                    bound_load: None,
                    decision: String::new(),
                    holder: 0,
                    address: 0x1000 + k as u64,
                    device_store: k,
                    bound_store: None,
                    message: String::new(),
                });
            }
        }
    }
}

fn check(a: &DispatchReport, b: &DispatchReport) -> Result<(), TestCaseError> {
    let d = diff_reports(a, b, Compared::Everything);
    let mut found: BTreeMap<Category, usize> = BTreeMap::new();
    for c in &d.changes {
        *found.entry(c.category()).or_default() += 1;
    }
    prop_assert_eq!(found, naive(a, b));
    prop_assert_eq!(diff_reports(a, a, Compared::Everything).changes, vec![]);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn a_diff_lists_what_a_naive_comparison_finds(
        seed in 1u64..400,
        i in 0usize..6,
        k in 0usize..6,
        edits in proptest::collection::vec((any::<u8>(), any::<usize>()), 0..6),
    ) {
        let rs = reports(seed);
        let a = &rs[i % rs.len()];
        // Two dispatches of one session.
        check(a, &rs[k % rs.len()])?;
        // A report and a copy with fields edited.
        let mut b = a.clone();
        for (what, n) in &edits {
            edit(&mut b, *what, *n);
        }
        check(a, &b)?;
        check(&b, a)?;
    }
}

/// The property has teeth: edits of every kind are found (by both) on some report of some session.
#[test]
fn every_kind_of_edit_is_found_somewhere() {
    let mut seen = [false; 15];
    for seed in 1..40 {
        for a in reports(seed) {
            for (what, hit) in seen.iter_mut().enumerate() {
                for k in 0..4 {
                    let mut b = a.clone();
                    edit(&mut b, what as u8, k);
                    let d = diff_reports(&a, &b, Compared::Everything);
                    if !naive(&a, &b).is_empty() {
                        assert!(!d.is_empty(), "edit {what}/{k} missed");
                        *hit = true;
                    }
                }
            }
        }
    }
    let missed: Vec<usize> = (0..15).filter(|w| !seen[*w]).collect();
    assert!(missed.is_empty(), "edits never found: {missed:?}");
}
