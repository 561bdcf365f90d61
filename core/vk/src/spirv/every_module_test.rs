//! Every module this crate builds, through SPIRV-Tools' `spirv-val` (issue 40): the builders
//! validate nothing at run time, so that no engine call runs a process, and these tests validate
//! each module for every input its builder takes: the replay at each slot count an engine can ask
//! for, the golden lookup helper, the helper library of each variant and of each shape
//! `dispatchscope spirv-helper` builds, alone and linked with a program, the bench's kernels, and
//! the traversal program of each variant, workload and shape, inline and importing.
//!
//! A machine without spirv-val (or spirv-link) fails them, never skips them: the README's test
//! command installs Debian's `spirv-tools`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is the test failing, with its message"
)]

use super::library::{Shape, Variant, helper_library, helper_library_shaped};
use super::{REPLAY_MAX_SLOTS, lookup_helper_module, replay_module, validate, validate_linkable};
use crate::VkError;

/// Module `module` (built from `input`) passes spirv-val for Vulkan 1.2; the message says what to
/// install where the validator is missing.
fn valid(module: &'static str, input: &str, words: &[u32]) {
    if let Err(e) = validate(module, words) {
        panic!("{input}: {e} (the README's test command installs spirv-val: Debian's spirv-tools)");
    }
}

/// [`valid`] for a module that still links (universal SPIR-V 1.5).
fn valid_linkable(module: &'static str, input: &str, words: &[u32]) {
    if let Err(e) = validate_linkable(module, words) {
        panic!("{input}: {e} (the README's test command installs spirv-val: Debian's spirv-tools)");
    }
}

/// The module every engine builds when it is made (`Context::new`, `Context::from_host`), at every
/// slot count a device can give it; any other count is refused, so no engine builds a module these
/// tests did not validate.
#[test]
fn the_replay_module_validates_at_every_slot_count() {
    for slots in 1..=REPLAY_MAX_SLOTS {
        valid(
            "replay",
            &format!("{slots} slots"),
            &replay_module(slots).unwrap(),
        );
    }
    for slots in [0, REPLAY_MAX_SLOTS + 1] {
        assert!(
            matches!(replay_module(slots), Err(VkError::Build { .. })),
            "{slots} slots"
        );
    }
}

/// A validator that runs tells a bad module from a good one: the check above means something.
#[test]
fn spirv_val_refuses_a_broken_module() {
    let mut words = replay_module(1).unwrap();
    // The header's bound: every id must be below it.
    words[3] = 2;
    let e = validate("broken", &words).expect_err("a bound of 2 is refused");
    assert!(
        matches!(&e, VkError::Invalid { why, .. } if why.contains("ID bound")),
        "spirv-val's own refusal, not a validator that did not run: {e}"
    );
}

#[test]
fn the_golden_lookup_helper_validates() {
    valid("lookup_helper", "", &lookup_helper_module().unwrap());
}

/// What `dispatchscope spirv-helper` writes and a translator links against: each variant as
/// `Shape::LINKED` (issue 42's lean instrumentation), fitted to a device without subgroup
/// arithmetic, without 64-bit buffer atomics, without either (`--no-subgroup-arithmetic`,
/// `--no-int64-atomics`), and issue 30's (`--shape issue30`).
#[test]
fn every_helper_library_validates() {
    for v in Variant::ALL {
        valid_linkable("helper_library", v.name(), &helper_library(v).unwrap());
        for shape in linkable_shapes() {
            let words = helper_library_shaped(v, shape).unwrap();
            valid_linkable(
                "helper_library",
                &format!("{}, {shape:?}", v.name()),
                &words,
            );
        }
    }
}

/// The shapes `dispatchscope spirv-helper` builds the library with.
fn linkable_shapes() -> [Shape; 5] {
    [
        Shape::LINKED,
        Shape::LINKED.fit(false, true),
        Shape::LINKED.fit(true, false),
        Shape::LINKED.fit(false, false),
        Shape::ISSUE_30,
    ]
}

/// The program that imports the helper (the traversal's, with its sites' derived counts and
/// without) linked by `spirv-link` with each library of each shape `spirv-helper` builds: the
/// linked module validates for Vulkan 1.2 (`link` validates it).
#[cfg(feature = "demo")]
#[test]
fn every_helper_library_links_with_a_program_into_a_valid_module() {
    use super::library::link;
    use super::traversal::{Linking, Workload, traversal_module_of};
    for derived_counts in [true, false] {
        let program_shape = Shape {
            derived_counts,
            ..Shape::LINKED
        };
        let program = traversal_module_of(Linking::Import, Workload::Loads, program_shape).unwrap();
        for v in Variant::ALL {
            for shape in linkable_shapes() {
                let library = helper_library_shaped(v, shape).unwrap();
                if let Err(e) = link(&program, &library) {
                    panic!(
                        "{}, {shape:?}, derived counts {derived_counts}: {e} (the README's test \
                         command installs spirv-link: Debian's spirv-tools)",
                        v.name()
                    );
                }
            }
        }
    }
}

#[cfg(feature = "bench")]
#[test]
fn the_bench_kernels_validate() {
    valid("bench", "", &super::bench_module().unwrap());
}

/// The traversal pass's builds (the debugger's demo and the bench): each variant inline over each
/// workload, in every combination of issue 30's switches (over issue 30's instrumentation and
/// issue 42's), of issue 42's instrumentation's, and of its helper's, and, for the instrumented
/// variant, with each part left out; and the program that imports the helper.
#[cfg(feature = "demo")]
#[test]
fn every_traversal_build_validates() {
    use super::traversal::{Linking, Workload, traversal_module_of};
    let mut shapes = Vec::new();
    // Issue 30's switches, over issue 30's instrumentation and issue 42's.
    for base in [Shape::ISSUE_30, Shape::SHIPPED] {
        for bits in 0..16u32 {
            shapes.push(Shape {
                fast_path: bits & 1 != 0,
                first_probe_unrolled: bits & 2 != 0,
                private_counters: bits & 4 != 0,
                lane_cache: bits & 8 != 0,
                ..base
            });
        }
    }
    // Issue 42's: the instrumentation's switches in every combination, and the helper's over
    // the fast path and the lane cache on and off.
    for bits in 0..32u32 {
        shapes.push(Shape {
            lean: bits & 1 != 0,
            derived_counts: bits & 2 != 0,
            subgroup_counts: bits & 4 != 0,
            subgroup_rare: bits & 8 != 0,
            wide_atomics: bits & 16 != 0,
            ..Shape::SHIPPED
        });
    }
    for bits in 0..128u32 {
        shapes.push(Shape {
            cache_span: bits & 64 != 0,
            cache_delta: bits & 1 != 0,
            slow_path_call: bits & 2 != 0,
            lookup_call: bits & 4 != 0,
            fast_path: bits & 8 != 0,
            lane_cache: bits & 16 != 0,
            cache_test32: bits & 32 != 0,
            ..Shape::SHIPPED
        });
    }
    let every_part = Shape::LEAVE_OUT_COUNTS
        | Shape::LEAVE_OUT_CAPTURE
        | Shape::LEAVE_OUT_ESCAPES
        | Shape::LEAVE_OUT_WORKGROUP
        | Shape::LEAVE_OUT_PROBES;
    for workload in Workload::ALL {
        for v in Variant::ALL {
            let left_out: &[u32] = if v == Variant::Instrumented {
                &[
                    0,
                    Shape::LEAVE_OUT_COUNTS,
                    Shape::LEAVE_OUT_CAPTURE,
                    Shape::LEAVE_OUT_ESCAPES,
                    Shape::LEAVE_OUT_WORKGROUP,
                    Shape::LEAVE_OUT_PROBES,
                    every_part,
                ]
            } else {
                &[0]
            };
            for shape in &shapes {
                for &leave_out in left_out {
                    let shape = Shape {
                        leave_out,
                        ..*shape
                    };
                    let words = traversal_module_of(Linking::Inline(v), workload, shape).unwrap();
                    let input = format!("{} inline, {}, {shape:?}", v.name(), workload.name());
                    valid("traversal", &input, &words);
                }
            }
        }
        for shape in [Shape::SHIPPED, Shape::LINKED] {
            let words = traversal_module_of(Linking::Import, workload, shape).unwrap();
            valid_linkable(
                "traversal",
                &format!("importing, {}, {shape:?}", workload.name()),
                &words,
            );
        }
    }
}
