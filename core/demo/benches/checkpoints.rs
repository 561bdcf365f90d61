//! Issue 18's checkpoint figures: what a checkpoint of engine state costs the game thread, how
//! large it is, and how often the demo sends one.
//!
//! `cargo bench -p dispatchscope-demo --bench checkpoints` (criterion for the timings; the rest
//! printed). `CHECKPOINT_BENCH_DISPATCHES` sets the recorded run's length (20,000 by default).
//!
//! - `checkpoint/*`: the game thread's copy, as the tap makes it after a dispatch that changed the
//!   state (`MemoryState::of`, `TableImage::of`): the demo's engine after 64 frames; guest memory of
//!   1 GiB in 4 KiB pages as one run and as 262,144 runs (every page its own state, the worst case);
//!   a chunk table of 40,000 chunks (262,144 slots). The writer thread's encoding of the same (`*_encode`).
//! - recorded (printed): the demo at 200 dispatches a frame, recorded through the live protocol
//!   (`dispatchscope_live::record`): dispatches, memory and table checkpoints, their bytes as sent
//!   (the record payloads) and as stored (lz4).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a bench: a failure stops it with its message"
)]

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use criterion::Criterion;
use dispatchscope_core::addr::ByteRange;
use dispatchscope_core::chunk_table::ChunkTable;
use dispatchscope_core::input::{Backing, Event};
use dispatchscope_core::memory::GuestMemory;
use dispatchscope_demo::{Demo, DemoConfig, RunOptions};
use dispatchscope_formats::capture::RecordKind;
use dispatchscope_formats::checkpoint::{
    MEMORY_STATE, MemoryState, TABLE_STATE, TableImage, TableWriter, encode_memory_state,
};
use dispatchscope_formats::session::CaptureFile;
use dispatchscope_live::{RecordOptions, Tap, TapConfig, record};

const GIB: u64 = 1 << 30;

/// 1 GiB of guest memory in 4 KiB pages: one run, or (`fragmented`) every page its own run.
fn gib(fragmented: bool) -> GuestMemory {
    let mut m = GuestMemory::new(0x1000).unwrap();
    m.apply(&Event::Reserve {
        range: ByteRange::new(GIB, 2 * GIB),
        readable: true,
        writable: true,
        committed: true,
        backing: Backing::Private,
        host_base: None,
    })
    .unwrap();
    if fragmented {
        for page in (0..GIB / 0x1000).step_by(2) {
            let start = GIB + page * 0x1000;
            m.apply(&Event::Guard {
                range: ByteRange::new(start, start + 0x1000),
            })
            .unwrap();
        }
    }
    m
}

fn recorded_run() {
    let n: u64 = std::env::var("CHECKPOINT_BENCH_DISPATCHES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let mut tap = Tap::listen(TapConfig::listening_on("127.0.0.1:0".parse().unwrap())).unwrap();
    let addr = tap.local_addr().unwrap().to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let game = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut demo = Demo::new(DemoConfig {
                dispatches_per_frame: 200,
                ..DemoConfig::default()
            })
            .unwrap();
            let options = RunOptions {
                frames: None,
                fps: None,
            };
            dispatchscope_demo::run(&mut demo, &mut tap, options, &stop, |_| {}).unwrap();
        })
    };
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("checkpoints.dscap");
    let no = AtomicBool::new(false);
    let summary = record(
        &addr,
        None,
        &dest,
        &RecordOptions {
            dispatches: Some(n),
            batch: 400,
            timeout: Duration::from_secs(60),
            ..RecordOptions::default()
        },
        &no,
        |_| {},
    )
    .unwrap();
    stop.store(true, Ordering::Relaxed);
    game.join().unwrap();
    let mut file = CaptureFile::open(&dest).unwrap();
    let mut sent = [0u64; 2];
    let mut stored = [0u64; 2];
    let mut count = [0u64; 2];
    let metas: Vec<_> = file.records().to_vec();
    for (i, m) in metas.iter().enumerate() {
        let k = match m.kind {
            k if k == MEMORY_STATE => 0,
            k if k == TABLE_STATE => 1,
            _ => continue,
        };
        count[k] += 1;
        stored[k] += u64::from(m.stored_len_bytes) + 20;
        sent[k] += file.read_record(i).unwrap().len() as u64 + 5;
    }
    let dispatches = metas
        .iter()
        .filter(|m| m.kind == RecordKind::DISPATCH)
        .count() as u64;
    println!(
        "recorded: {dispatches} dispatches of the demo at 200 a frame ({} dropped)",
        summary.dropped
    );
    for (k, name) in ["memory", "table"].iter().enumerate() {
        println!(
            "  {name} checkpoints: {} ({:.2} a frame of 200 dispatches, one every {:.0} dispatches); {:.0} bytes each as sent, {:.0} as stored (lz4)",
            count[k],
            count[k] as f64 * 200.0 / dispatches as f64,
            dispatches as f64 / count[k].max(1) as f64,
            sent[k] as f64 / count[k].max(1) as f64,
            stored[k] as f64 / count[k].max(1) as f64,
        );
    }
    println!(
        "  checkpoint bytes per dispatch on the wire: {:.1}",
        (sent[0] + sent[1]) as f64 / dispatches as f64
    );
}

fn main() {
    recorded_run();
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20)
        .configure_from_args();
    let mut demo = Demo::new(DemoConfig {
        dispatches_per_frame: 200,
        ..DemoConfig::default()
    })
    .unwrap();
    let mut tap = Tap::detached();
    for _ in 0..64 {
        demo.frame(&mut tap).unwrap();
    }
    let engine = demo.engine();
    let demo_memory = MemoryState::of(engine.memory());
    let demo_table = engine.table().map(TableImage::of);
    let one = gib(false);
    let frag = gib(true);
    let frag_state = MemoryState::of(&frag);
    let big_table = {
        let entries: Vec<(u64, u64)> = (0..40_000u64).map(|i| (i * 3 + 1, i << 12)).collect();
        ChunkTable::build(0x1000, 16, &entries).unwrap()
    };
    println!(
        "sizes: demo memory state {} runs, {} bytes JSON; demo table {} slots, {} bytes; 1 GiB in one run {} bytes; 1 GiB in {} runs {} bytes JSON; table of {} slots {} bytes",
        demo_memory
            .reservations
            .iter()
            .map(|r| r.runs.len())
            .sum::<usize>(),
        encode_memory_state(&demo_memory).len(),
        demo_table.as_ref().map_or(0, |t| t.slots.len()),
        demo_table.as_ref().map_or(0, |t| t.encode().len()),
        encode_memory_state(&MemoryState::of(&one)).len(),
        frag_state.reservations[0].runs.len(),
        encode_memory_state(&frag_state).len(),
        big_table.capacity(),
        TableImage::of(&big_table).encode().len(),
    );
    let mut g = c.benchmark_group("checkpoint");
    g.bench_function("demo_memory_of", |b| {
        b.iter(|| black_box(MemoryState::of(black_box(engine.memory()))))
    });
    if let Some(t) = engine.table() {
        g.bench_function("demo_table_of", |b| {
            b.iter(|| black_box(TableImage::of(black_box(t))))
        });
    }
    g.bench_function("gib_one_run_memory_of", |b| {
        b.iter(|| black_box(MemoryState::of(black_box(&one))))
    });
    g.bench_function("gib_262144_runs_memory_of", |b| {
        b.iter(|| black_box(MemoryState::of(black_box(&frag))))
    });
    g.bench_function("table_40000_chunks_of", |b| {
        b.iter(|| black_box(TableImage::of(black_box(&big_table))))
    });
    g.bench_function("demo_memory_encode", |b| {
        b.iter(|| black_box(encode_memory_state(black_box(&demo_memory))))
    });
    g.bench_function("gib_262144_runs_memory_encode", |b| {
        b.iter(|| black_box(encode_memory_state(black_box(&frag_state))))
    });
    if let Some(t) = &demo_table {
        g.bench_function("demo_table_full_encode", |b| {
            b.iter(|| {
                let mut w = TableWriter::default();
                black_box(w.next_image(black_box(t.clone())))
            })
        });
    }
    g.finish();
    c.final_summary();
}
