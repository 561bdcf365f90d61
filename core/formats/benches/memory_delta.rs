//! Issue 41's memory checkpoints: what a live target's memory checkpoints weigh a frame, and what
//! they cost the game thread, whole (as before: `MemoryState::of` after every dispatch that
//! followed a change) and as changes (`MemoryDelta::since` over the engine's log, what the tap's
//! `Tracker` now calls; the writer thread's `MemoryWriter` turns them into what is sent: deltas,
//! and a whole state where the chain is long or the deltas outweigh it).
//!
//! The memory: 16 GiB in 4 KiB pages (simulated, so lazily: runs, not pages), `--resident` pages
//! guarded for the whole run (a state that already has many runs), and a write-watch as
//! `memory_scale` has it: frames of `--dispatches` dispatches with `--toggles` page toggles spread
//! between them, half the toggled pages guarded before the frame's middle and released after it,
//! at random over the whole memory. After each dispatch that followed a change, one checkpoint.
//!
//! Printed: bytes of memory checkpoints a frame (whole in JSON, as builds before issue 41 sent
//! them; whole in the binary form; what this build sends), and the median game-thread time of one
//! checkpoint's copy (whole, changes). Byte counts are exact; times are this machine's.
//!
//! `cargo bench -p dispatchscope-formats --bench memory_delta -- [--frames 20] [--dispatches 200]
//! [--toggles 1000] [--resident 0,100000]`

#![allow(clippy::print_stdout, reason = "a benchmark prints its figures")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a bench binary: a failure stops it with its message"
)]

use std::hint::black_box;
use std::time::Instant;

use dispatchscope_core::addr::ByteRange;
use dispatchscope_core::input::{Backing, Event};
use dispatchscope_core::memory::GuestMemory;
use dispatchscope_formats::checkpoint::{
    MemoryDelta, MemoryImage, MemoryState, MemoryWriter, check_memory_payload, encode_memory_state,
};

const GUEST: u64 = 0x1_0000_0000;
const PAGE: u64 = 0x1000;
const BYTES: u64 = 16 << 30;

/// xorshift64*.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

fn page(n: u64) -> ByteRange {
    ByteRange::new(GUEST + n * PAGE, GUEST + (n + 1) * PAGE)
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[derive(Default)]
struct Figures {
    checkpoints: u64,
    json_bytes: u64,
    whole_bytes: u64,
    sent_bytes: u64,
    sent_wholes: u64,
    sent_deltas: u64,
    whole_ns: Vec<f64>,
    delta_ns: Vec<f64>,
    delta_runs: Vec<f64>,
    whole_runs: Vec<f64>,
}

fn run(frames: usize, dispatches: usize, toggles: usize, resident: u64) -> Figures {
    let mut m = GuestMemory::new(PAGE).unwrap();
    m.apply(&Event::Reserve {
        range: ByteRange::new(GUEST, GUEST + BYTES),
        readable: true,
        writable: true,
        committed: true,
        backing: Backing::Private,
        host_base: None,
    })
    .unwrap();
    let pages = BYTES / PAGE;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for _ in 0..resident {
        m.apply(&Event::Guard {
            range: page(rng.next() % pages),
        })
        .unwrap();
    }
    let mut f = Figures::default();
    let mut writer = MemoryWriter::default();
    let mut sent = m.state_changes();
    writer.next_state(&MemoryState::of(&m));
    // The debugger's side: every payload sent, applied, must give the state (checked, not timed).
    let mut image = MemoryImage::of(&MemoryState::of(&m)).unwrap();
    let half = dispatches / 2;
    for frame in 0..frames {
        let lowered: Vec<u64> = (0..toggles / 2).map(|_| rng.next() % pages).collect();
        for d in 0..dispatches {
            let share = |k: usize| {
                let per = (toggles / 2).div_ceil(half.max(1));
                (k * per).min(toggles / 2)..((k + 1) * per).min(toggles / 2)
            };
            let (which, lower) = if d < half {
                (share(d), true)
            } else {
                (share(d - half), false)
            };
            for &p in &lowered[which] {
                let range = page(p);
                let e = if lower {
                    Event::Guard { range }
                } else {
                    Event::Unguard { range }
                };
                m.apply(&e).unwrap();
            }
            let now = m.state_changes();
            if now == sent {
                continue;
            }
            // The game thread's copy, whole (as before) and as changes (as now).
            let t = Instant::now();
            let whole = black_box(MemoryState::of(black_box(&m)));
            let whole_ns = t.elapsed().as_secs_f64() * 1e9;
            let t = Instant::now();
            let delta = black_box(MemoryDelta::since(black_box(&m), sent));
            let delta_ns = t.elapsed().as_secs_f64() * 1e9;
            let delta = delta.expect("the log reaches back one dispatch");
            if frame > 0 {
                f.whole_ns.push(whole_ns);
                f.delta_ns.push(delta_ns);
            }
            f.checkpoints += 1;
            f.json_bytes += encode_memory_state(&whole).len() as u64;
            f.whole_bytes += MemoryDelta::whole_of(&whole).encode().len() as u64;
            f.whole_runs.push(
                whole
                    .reservations
                    .iter()
                    .map(|r| r.runs.len())
                    .sum::<usize>() as f64,
            );
            f.delta_runs.push(delta.n_runs() as f64);
            if let Some(bytes) = writer
                .next_delta(&delta)
                .expect("the writer holds the state")
            {
                f.sent_bytes += bytes.len() as u64;
                if check_memory_payload(&bytes).unwrap() {
                    f.sent_deltas += 1;
                    image.apply(&MemoryDelta::decode(&bytes).unwrap()).unwrap();
                } else {
                    f.sent_wholes += 1;
                    image =
                        MemoryImage::of(&MemoryDelta::decode(&bytes).unwrap().to_state().unwrap())
                            .unwrap();
                }
            }
            sent = now;
        }
        assert_eq!(image.state(), MemoryState::of(&m), "frame {frame}");
    }
    f
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let num =
        |name: &str, default: usize| arg(name).and_then(|v| v.parse().ok()).unwrap_or(default);
    let (frames, dispatches, toggles) = (
        num("--frames", 20),
        num("--dispatches", 200),
        num("--toggles", 1000),
    );
    let residents: Vec<u64> = arg("--resident")
        .unwrap_or_else(|| "0,100000".into())
        .split(',')
        .filter_map(|s| s.parse().ok())
        .collect();
    println!(
        "## issue 41: memory checkpoints at 16 GiB, {frames} frames of {dispatches} dispatches and {toggles} toggles"
    );
    println!(
        "| resident guarded pages | checkpoints a frame | runs in the state (median) | runs a delta (median) | whole JSON a frame | whole binary a frame | sent a frame (deltas + wholes) | copy, whole (median ns) | copy, changes (median ns) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for resident in residents {
        let mut f = run(frames, dispatches, toggles, resident);
        let per = |n: u64| n as f64 / frames as f64;
        println!(
            "| {resident} | {:.0} | {:.0} | {:.0} | {:.0} KiB | {:.1} KiB | {:.1} KiB ({:.0} + {:.2}) | {:.0} | {:.0} |",
            per(f.checkpoints),
            median(&mut f.whole_runs),
            median(&mut f.delta_runs),
            per(f.json_bytes) / 1024.0,
            per(f.whole_bytes) / 1024.0,
            per(f.sent_bytes) / 1024.0,
            per(f.sent_deltas),
            per(f.sent_wholes),
            median(&mut f.whole_ns),
            median(&mut f.delta_ns),
        );
    }
}
