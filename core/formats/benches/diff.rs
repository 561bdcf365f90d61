//! Issue 15's figures: `diff` of two 2,000-dispatch captures (generated: the same generator and
//! sizes twice, seeds 1 and 2), read through their indices and compared; and the what-if on a
//! 1 GiB capture (`WHAT_IF_CAPTURE`, default `/work/big/g2.dscap`, made by
//! `dispatchscope generate g2.dscap --contents-bytes 0x40000000 --dispatches 2000`) at
//! minStorageBufferOffsetAlignment 256: open, re-plan every dispatch from its record, diff.
//!
//! A bench binary, not criterion: each unit is a whole command's work, timed cold in this process
//! five times (the median and the range are printed).
//!
//! `cargo bench -p dispatchscope-formats --bench diff`

#![allow(
    clippy::expect_used,
    reason = "a bench binary: a failure stops it with its message"
)]

use std::path::Path;
use std::time::Instant;

use dispatchscope_analysis::diff::diff_sessions;
use dispatchscope_analysis::what_if::PlanLimits;
use dispatchscope_core::report::DispatchReport;
use dispatchscope_formats::checkpoint::write_replayed_capture;
use dispatchscope_formats::generate::{GenConfig, random_sample};
use dispatchscope_formats::session::CaptureFile;
use dispatchscope_formats::what_if::re_plan_capture;

const RUNS: usize = 5;

fn reports(path: &Path) -> Vec<DispatchReport> {
    let mut c = CaptureFile::open(path).expect("open");
    (0..c.n_dispatches())
        .map(|i| {
            c.dispatch(i)
                .expect("record")
                .report
                .expect("recorded report")
        })
        .collect()
}

fn timed(what: &str, mut f: impl FnMut() -> String) {
    let mut times = Vec::new();
    let mut last = String::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        last = f();
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    println!(
        "{what}: median {:.3} s (min {:.3}, max {:.3}, {RUNS} runs); {last}",
        times[RUNS / 2],
        times[0],
        times[RUNS - 1]
    );
}

fn main() {
    let dir = std::env::temp_dir().join(format!("dispatchscope-diff-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let cfg = GenConfig {
        dispatches: 2000,
        slots: 8,
        accesses: 64,
        ..GenConfig::default()
    };
    let (a, b) = (dir.join("a.dscap"), dir.join("b.dscap"));
    for (seed, path) in [(1, &a), (2, &b)] {
        write_replayed_capture(&random_sample(seed, cfg), path, |_| {}).expect("write");
    }
    timed(
        "diff of two 2,000-dispatch captures (read both, match, compare)",
        || {
            let (ra, rb) = (reports(&a), reports(&b));
            let d = diff_sessions(&ra, &rb);
            format!(
                "{} pairs, {} changed, {} changes",
                d.pairs.len(),
                d.dispatches.len(),
                d.n_changes()
            )
        },
    );
    timed("diff of a 2,000-dispatch capture with itself", || {
        let (ra, rb) = (reports(&a), reports(&a));
        let d = diff_sessions(&ra, &rb);
        format!("{} pairs, empty: {}", d.pairs.len(), d.is_empty())
    });
    let (ra, rb) = (reports(&a), reports(&b));
    timed(
        "  of which the comparison alone (reports in memory)",
        || {
            let d = diff_sessions(&ra, &rb);
            format!("{} changes", d.n_changes())
        },
    );
    let big = std::env::var("WHAT_IF_CAPTURE").unwrap_or_else(|_| "/work/big/g2.dscap".into());
    if Path::new(&big).exists() {
        timed(
            &format!("what-if on {big} at minStorageBufferOffsetAlignment 256"),
            || {
                let mut c = CaptureFile::open(Path::new(&big)).expect("open");
                let r = re_plan_capture(
                    &mut c,
                    PlanLimits {
                        min_storage_buffer_offset_alignment: Some(256),
                        max_storage_buffer_range: None,
                    },
                )
                .expect("re-plan");
                let d = r.diff();
                format!(
                    "{} dispatches, {} changed, {} changes, {} by plan only, first divergence {:?}",
                    d.pairs.len(),
                    d.dispatches.len(),
                    d.n_changes(),
                    d.plan_only,
                    r.divergence.map(|v| v.position)
                )
            },
        );
    } else {
        println!("what-if: {big} not found (set WHAT_IF_CAPTURE)");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
