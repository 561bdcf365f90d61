//! Diffs of whole sessions and the what-if, on every shipped sample and on generated sessions:
//! a session against itself is empty; `o7-alignment.json` at alignment 16 against 256 shows its
//! O7 refusal appearing; a what-if re-plan gives the diff a full replay gives wherever it claims
//! to (and the plan's part of it everywhere); the JSON validates against `samples/diff.schema.json`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is the test failing, with its message"
)]

use std::path::PathBuf;

use dispatchscope_analysis::diff::{
    Category, Change, Compared, DIFF_SCHEMA, SessionDiff, diff_sessions, diff_sessions_with,
};
use dispatchscope_analysis::what_if::{PlanLimits, WhatIf};
use dispatchscope_core::report::{DispatchReport, Mode};
use dispatchscope_core::{CpuBackend, DeviceLimits};
use dispatchscope_formats::checkpoint::write_replayed_capture;
use dispatchscope_formats::generate::{GenConfig, random_sample};
use dispatchscope_formats::sample::Sample;
use dispatchscope_formats::session::CaptureFile;

fn samples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../samples")
}

fn shipped(name: &str) -> Sample {
    Sample::from_json(dispatchscope_formats::shipped::sample_text(name).unwrap()).unwrap()
}

fn check_schema(diff: &SessionDiff) {
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(samples_dir().join("diff.schema.json")).unwrap(),
    )
    .unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let doc = serde_json::json!({
        "schema": DIFF_SCHEMA, "a": "a", "b": "b", "same": diff.is_empty(), "diff": diff,
    });
    let errors: Vec<String> = validator
        .iter_errors(&doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "the diff does not match its schema:\n{}",
        errors.join("\n")
    );
}

/// The what-if's re-plan of `sample` (its replay under its own limits as the recording).
fn fast(sample: &Sample, limits: PlanLimits) -> (Vec<DispatchReport>, Vec<Compared>, SessionDiff) {
    let recorded = sample.run().unwrap();
    let mut w = WhatIf::new(limits);
    let mut now = Vec::new();
    let mut compared = Vec::new();
    for (i, (input, r)) in sample.dispatches().zip(&recorded).enumerate() {
        let (n, c) = w.step(i, input, r).unwrap();
        now.push(n);
        compared.push(c);
    }
    let diff = diff_sessions_with(&recorded, &now, |j| compared[j].clone());
    (now, compared, diff)
}

/// The full replay under the new limits, diffed against the recording.
fn full(sample: &Sample, limits: PlanLimits) -> (Vec<DispatchReport>, SessionDiff) {
    let recorded = sample.run().unwrap();
    let replayed = sample
        .run_on(limits.apply(&sample.device), CpuBackend::new())
        .unwrap();
    let diff = diff_sessions(&recorded, &replayed);
    (replayed, diff)
}

/// Fast what-if == full replay + diff wherever the fast one claims (everything compared), and the
/// plan's changes agree everywhere. Returns how many dispatches were compared by plan only.
fn fast_matches_full(what: &str, sample: &Sample, limits: PlanLimits) -> usize {
    let (fast_reports, compared, fast_diff) = fast(sample, limits);
    let (full_reports, full_diff) = full(sample, limits);
    assert_eq!(fast_diff.pairs, full_diff.pairs, "{what}");
    assert_eq!(fast_diff.limits, full_diff.limits, "{what}");
    let mut plan_only = 0;
    for &[_, j] in &fast_diff.pairs {
        let changes = |d: &SessionDiff| -> Vec<Change> {
            d.for_b(j).map(|x| x.changes.clone()).unwrap_or_default()
        };
        let (fc, gc) = (changes(&fast_diff), changes(&full_diff));
        if compared[j].everything() {
            assert_eq!(
                fast_reports[j], full_reports[j],
                "{what}: dispatch {j}: the what-if claims its whole report"
            );
            assert_eq!(fc, gc, "{what}: dispatch {j}");
        } else {
            plan_only += 1;
            let plan = |c: &Change| c.category().is_plan();
            let fp: Vec<&Change> = fc.iter().filter(|c| plan(c)).collect();
            let gp: Vec<&Change> = gc.iter().filter(|c| plan(c)).collect();
            assert_eq!(fp, gp, "{what}: dispatch {j}: the plan's changes");
            assert!(
                fc.iter().all(plan),
                "{what}: dispatch {j}: a run's change claimed"
            );
        }
    }
    assert_eq!(plan_only, fast_diff.plan_only, "{what}");
    plan_only
}

fn what_ifs() -> Vec<PlanLimits> {
    let mut v = Vec::new();
    for a in [1u64, 4, 16, 64, 256] {
        v.push(PlanLimits {
            min_storage_buffer_offset_alignment: Some(a),
            max_storage_buffer_range: None,
        });
    }
    for m in [0x100u64, 0x1000, 0x10_0000] {
        v.push(PlanLimits {
            min_storage_buffer_offset_alignment: None,
            max_storage_buffer_range: Some(m),
        });
    }
    v
}

fn check_sample(name: &str) {
    let sample = shipped(name);
    let reports = sample.run().unwrap();
    let d = diff_sessions(&reports, &reports);
    assert!(d.is_empty(), "{name}: a session differs from itself: {d:?}");
    assert_eq!(d.pairs.len(), reports.len());
    check_schema(&d);
    for limits in what_ifs() {
        let what = format!("{name} under {limits:?}");
        fast_matches_full(&what, &sample, limits);
        check_schema(&fast(&sample, limits).2);
    }
}

dispatchscope_formats::shipped_sample_tests!(check_sample);

#[test]
fn o7_alignment_at_256_shows_exactly_its_o7_refusal_appearing() {
    let sample = shipped("o7-alignment.json");
    assert_eq!(sample.device.min_storage_buffer_offset_alignment, 16);
    let at = |a: u64| {
        let limits = DeviceLimits {
            min_storage_buffer_offset_alignment: a,
            ..sample.device.clone()
        };
        sample.run_on(limits, CpuBackend::new()).unwrap()
    };
    let d = diff_sessions(&at(16), &at(256));
    check_schema(&d);
    assert_eq!(d.limits.len(), 1, "{:?}", d.limits);
    assert_eq!(d.limits[0].name, "min_storage_buffer_offset_alignment");
    assert!(d.only_a.is_empty() && d.only_b.is_empty());
    let refusals: Vec<&Change> = d
        .dispatches
        .iter()
        .flat_map(|x| &x.changes)
        .filter(|c| c.category() == Category::Refusals)
        .collect();
    assert_eq!(refusals.len(), 1, "{refusals:?}");
    let Change::RefusalAdded {
        rule,
        message,
        slot: refused_slot,
    } = refusals[0].clone()
    else {
        panic!("not a refusal added: {:?}", refusals[0]);
    };
    assert_eq!(rule.id(), "O7");
    assert!(message.contains("0x100"), "{message}");
    // Nothing else changed but what the refusal does: the dispatch no longer runs (its mode, and
    // what its run did, gone); no binding, set or other decision moved.
    let x = &d.dispatches[0];
    assert_eq!(d.dispatches.len(), 1);
    for c in &x.changes {
        match c {
            Change::Mode { before, after } => {
                assert_eq!((*before, *after), (Mode::Bound, Mode::Refused));
            }
            Change::RefusalAdded { .. } => {}
            // The refused slot's O7 verdict itself.
            Change::SlotAligned {
                slot,
                before: true,
                after: false,
            } => assert_eq!(Some(*slot), refused_slot, "{c:?}"),
            Change::Access { after, .. } => assert!(
                after
                    .as_ref()
                    .is_some_and(|o| o.route == dispatchscope_core::report::Route::NotRun),
                "{c:?}"
            ),
            Change::WriteBackWord { after: None, .. }
            | Change::Mark { after: None, .. }
            | Change::EscapeRemoved { .. } => {}
            other => panic!("more than the O7 refusal and its not running: {other:?}"),
        }
    }
    // The what-if re-plan gives the same.
    let (_, _, w) = fast(
        &sample,
        PlanLimits {
            min_storage_buffer_offset_alignment: Some(256),
            max_storage_buffer_range: None,
        },
    );
    assert_eq!(w.dispatches, d.dispatches);
}

fn generated(seed: u64) -> Sample {
    random_sample(
        seed,
        GenConfig {
            dispatches: 24,
            slots: 8,
            accesses: 48,
            ..GenConfig::default()
        },
    )
}

#[test]
fn generated_sessions_what_if_re_plan_matches_a_full_replay() {
    let mut plan_only = 0;
    let mut changed = 0;
    for seed in 1..=12 {
        let sample = generated(seed);
        for limits in what_ifs() {
            let what = format!("seed {seed} under {limits:?}");
            plan_only += fast_matches_full(&what, &sample, limits);
            changed += fast(&sample, limits).2.dispatches.len();
        }
    }
    // The check has teeth: some what-ifs change decisions.
    assert!(changed > 0, "no what-if changed anything");
    eprintln!("{changed} dispatches changed, {plan_only} compared by plan only");
}

#[test]
fn a_generated_capture_against_itself_and_its_replay_is_empty() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.dscap");
    let sample = generated(7);
    write_replayed_capture(&sample, &path, |_| {}).unwrap();
    let mut c = CaptureFile::open(&path).unwrap();
    let recorded: Vec<DispatchReport> = (0..c.n_dispatches())
        .map(|i| c.dispatch(i).unwrap().report.unwrap())
        .collect();
    assert_eq!(recorded.len(), 24);
    let d = diff_sessions(&recorded, &recorded);
    assert!(d.is_empty(), "{d:?}");
    let d = diff_sessions(&recorded, &sample.run().unwrap());
    assert!(d.is_empty(), "{d:?}");
}

#[test]
fn a_dispatch_inserted_in_b_is_only_in_b_and_the_rest_pair_by_program() {
    let sample = generated(3);
    let a = sample.run().unwrap();
    let mut b = a.clone();
    let mut extra = a[5].clone();
    extra.program = 0xdead_0000;
    b.insert(5, extra);
    let d = diff_sessions(&a, &b);
    assert_eq!(
        d.matching,
        dispatchscope_analysis::diff::Matching::ByProgram
    );
    assert_eq!(d.only_b.len(), 1);
    assert_eq!(d.only_b[0].position, 5);
    assert!(d.only_a.is_empty());
    // Every other pair matches its counterpart (their indices moved by one past the insertion).
    assert_eq!(d.pairs.len(), a.len());
    assert!(d.dispatches.is_empty(), "{:?}", d.dispatches);
    assert!(!d.is_empty());
}
