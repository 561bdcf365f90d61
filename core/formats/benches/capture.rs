//! Capture figures: write a 1 GiB capture made by the generator, then open it and explain its
//! last dispatch (goal ≤ 0.5 s). A bench binary, not criterion: one 1 GiB write is the unit.
//!
//! `cargo bench -p dispatchscope-core --bench capture` (set `CAPTURE_BENCH_MIB` for another size).

#![allow(
    clippy::expect_used,
    reason = "a bench binary: a failure stops it with its message"
)]

use std::time::Instant;

use dispatchscope_analysis::explain::{Detail, explain};
use dispatchscope_formats::generate::{GenConfig, random_sample};
use dispatchscope_formats::session::{CaptureFile, write_capture};

fn main() {
    let mib: u64 = std::env::var("CAPTURE_BENCH_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let dir = std::env::temp_dir().join(format!(
        "dispatchscope-capture-bench-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("big.dscap");

    let t = Instant::now();
    let cfg = GenConfig {
        dispatches: 2000,
        slots: 8,
        accesses: 64,
        reservations: 64,
        pages_per_reservation: (mib << 20) / 64 / 0x1000 + 16,
        contents_bytes: mib << 20,
        events_between: 2,
    };
    let sample = random_sample(1, cfg);
    let gen_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let reports = sample.run().expect("generated samples run");
    let run_s = t.elapsed().as_secs_f64();

    let t = Instant::now();
    write_capture(&sample, Some(&reports), &path).expect("write");
    let write_s = t.elapsed().as_secs_f64();
    let bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    drop(reports);
    drop(sample);

    // Open and explain the last dispatch, cold in this process.
    let t = Instant::now();
    let mut file = CaptureFile::open(&path).expect("open");
    let n = file.n_dispatches();
    let record = file.dispatch(n - 1).expect("last dispatch");
    let text = explain(
        record.report.as_ref().expect("recorded report"),
        Detail::default(),
    );
    let open_s = t.elapsed().as_secs_f64();
    assert!(text.contains("dispatch"));

    println!(
        "capture bench: {mib} MiB of contents, {n} dispatches, file {:.1} MiB",
        bytes as f64 / (1 << 20) as f64
    );
    println!("  generate         {gen_s:8.3} s");
    println!("  run (cpu ref)    {run_s:8.3} s");
    println!(
        "  write            {write_s:8.3} s  ({:.0} MiB/s)",
        bytes as f64 / (1 << 20) as f64 / write_s
    );
    println!("  open + explain last dispatch {open_s:8.3} s  (goal ≤ 0.5 s)");
    let _ = std::fs::remove_dir_all(&dir);
}
