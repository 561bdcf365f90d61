//! Issue 41's figures: a PS5's memory and a write-watch that toggles pages every frame.
//!
//! For each size of guest memory (one private `MAP_NORESERVE` mapping of the bench's own, reserved
//! committed read-write, imported zero-copy on the Vulkan device), frames of `--dispatches`
//! device-addressed dispatches (prepare + complete, the emulator's side of each) with `--toggles`
//! page toggles spread between them: half the toggled pages lowered before the frame's middle,
//! raised again after it, at random over the whole memory. Two kinds of toggle:
//! - `watch`: the write-watch, `Guard` then `Unguard` (with the real `mprotect` read-only and back);
//! - `protect`: the emulator's protection, `HostProtect` read then read-write (with `mprotect`).
//!
//! Printed per size and kind: the engine's time a dispatch (median of prepare + complete), the
//! engine's whole time a frame (every event and every prepare + complete, median over frames),
//! slots changed and table bytes uploaded a frame, and the process's resident memory after the
//! run over what it held before the engine was made.
//!
//! `cargo bench -p dispatchscope-vk --bench memory_scale -- [--mib 2,1024,16384] [--frames 20]
//! [--dispatches 200] [--toggles 1000] [--kind watch,protect]`

#![allow(clippy::print_stdout, reason = "a benchmark prints its figures")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    unsafe_code,
    reason = "a benchmark stops on a failed setup, and maps its own pages as an emulator does"
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use dispatchscope_core::Engine;
use dispatchscope_core::addr::ByteRange;
use dispatchscope_core::engine::{DeviceRun, RanOn};
use dispatchscope_core::input::{
    Backing, DeviceLimits, DispatchInput, Event, HostProtection, Reason,
};
use dispatchscope_vk::host_pages::{HostCallError, HostCalls, ProcessHost};
use dispatchscope_vk::{Context, ContextOptions, VulkanBackend};

const GUEST: u64 = 0x1_0000_0000;
const PAGE: u64 = 0x1000;

/// The emulator: a write lands with a plain copy; a commit and a guard release touch nothing.
struct Emulator;

impl HostCalls for Emulator {
    fn write(&self, host_addr: u64, bytes: &[u8]) -> Result<(), HostCallError> {
        // SAFETY: the engine writes only into the benchmark's own read-write mapping.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), host_addr as *mut u8, bytes.len()) };
        Ok(())
    }
    fn commit(&self, _: u64, _: u64) -> Result<(), HostCallError> {
        Ok(())
    }
    fn release_guards(&self, _: u64, _: u64) -> Result<(), HostCallError> {
        Ok(())
    }
    fn hand_off(&self, _: ByteRange, _: u64) -> Result<(), HostCallError> {
        Ok(())
    }
}

/// The process's resident memory, KiB.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

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

fn arg<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Watch,
    Protect,
}

struct Figures {
    dispatch_us: f64,
    frame_ms: f64,
    slots_a_frame: f64,
    uploaded_a_frame: f64,
    first_ms: f64,
    rss_mib: f64,
    pieces: usize,
    chunk_bytes: u64,
    n_chunks: u64,
}

fn run(
    ctx: &Arc<Context>,
    mib: u64,
    kind: Kind,
    frames: usize,
    dispatches: usize,
    toggles: usize,
) -> Figures {
    let bytes = mib << 20;
    let rss_before = rss_kib();
    // SAFETY: a fresh anonymous private mapping, committed lazily as an emulator's heap is.
    let host = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    assert_ne!(host, libc::MAP_FAILED);
    let mprotect = |page: u64, prot: i32| {
        // SAFETY: one page of the bench's own mapping.
        let r = unsafe {
            libc::mprotect(
                host.cast::<u8>().add((page * PAGE) as usize).cast(),
                PAGE as usize,
                prot,
            )
        };
        assert_eq!(r, 0);
    };
    let mut e = Engine::with_host(
        DeviceLimits::default(),
        VulkanBackend::on(Arc::clone(ctx)).unwrap(),
        Arc::new(ProcessHost::new(Emulator)),
    )
    .unwrap();
    e.apply(&Event::Reserve {
        range: ByteRange::new(GUEST, GUEST + bytes),
        readable: true,
        writable: true,
        committed: true,
        backing: Backing::Private,
        host_base: Some(host as u64),
    })
    .unwrap();
    let input = DispatchInput {
        program: 0x7400_5b85_4a00,
        reasons: vec![Reason::D758],
        ..DispatchInput::default()
    };
    let dispatch = |e: &mut Engine<VulkanBackend>| -> (Duration, u64) {
        let t = Instant::now();
        let p = e.prepare(&input).unwrap();
        let r = e
            .complete(
                &input,
                p,
                RanOn::Device(DeviceRun {
                    marks: None,
                    holders: Vec::new(),
                    ran_on: None,
                    instrumentation: None,
                }),
            )
            .unwrap();
        let took = t.elapsed();
        let slots = r.table.as_ref().map_or(0, |t| t.inserted + t.removed);
        (took, slots)
    };
    let t = Instant::now();
    dispatch(&mut e);
    let first_ms = t.elapsed().as_secs_f64() * 1e3;
    let pages = bytes / PAGE;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ mib);
    let (mut per_dispatch, mut per_frame, mut slots, mut uploaded) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let half = dispatches / 2;
    let (mut lowering, mut raising) = (Vec::new(), Vec::new());
    for _ in 0..frames {
        let lowered: Vec<u64> = (0..toggles / 2).map(|_| rng.next() % pages).collect();
        let up0 = e.backend().table_bytes_uploaded();
        let (mut frame, mut frame_slots) = (Duration::ZERO, 0u64);
        for d in 0..dispatches {
            // The toggles between this dispatch and the last: lowered in the frame's first half,
            // raised in its second.
            let share = |k: usize| {
                let per = (toggles / 2).div_ceil(half.max(1));
                (k * per).min(toggles / 2)..((k + 1) * per).min(toggles / 2)
            };
            let (which, lower) = if d < half {
                (share(d), true)
            } else {
                (share(d - half), false)
            };
            for &page in &lowered[which] {
                let range = ByteRange::new(GUEST + page * PAGE, GUEST + (page + 1) * PAGE);
                let event = match (kind, lower) {
                    (Kind::Watch, true) => Event::Guard { range },
                    (Kind::Watch, false) => Event::Unguard { range },
                    (Kind::Protect, true) => Event::HostProtect {
                        range,
                        protection: HostProtection::Read,
                    },
                    (Kind::Protect, false) => Event::HostProtect {
                        range,
                        protection: HostProtection::ReadWrite,
                    },
                };
                // The emulator's own mprotect comes first (not the engine's time).
                mprotect(
                    page,
                    if lower {
                        libc::PROT_READ
                    } else {
                        libc::PROT_READ | libc::PROT_WRITE
                    },
                );
                let t = Instant::now();
                e.apply(&event).unwrap();
                let took = t.elapsed();
                frame += took;
                if lower {
                    lowering.push(took.as_secs_f64() * 1e6);
                } else {
                    raising.push(took.as_secs_f64() * 1e6);
                }
            }
            let (took, s) = dispatch(&mut e);
            frame += took;
            frame_slots += s;
            per_dispatch.push(took.as_secs_f64() * 1e6);
        }
        per_frame.push(frame.as_secs_f64() * 1e3);
        slots.push(frame_slots as f64);
        uploaded.push((e.backend().table_bytes_uploaded() - up0) as f64);
    }
    let (pieces, chunk_bytes, n_chunks) = {
        let t = e.table().unwrap();
        (
            e.mappings().pieces().count(),
            t.chunk_bytes(),
            t.len() as u64,
        )
    };
    let rss_mib = rss_kib().saturating_sub(rss_before) as f64 / 1024.0;
    let sum = |v: &[f64]| v.iter().sum::<f64>();
    if std::env::var("DS_EVENTS").is_ok() {
        println!(
            "  events: lowering median {:.2} µs (total {:.1} ms), raising median {:.2} µs (total {:.1} ms); dispatches mean {:.2} µs, p99 {:.2} µs",
            median(lowering.clone()),
            sum(&lowering) / 1e3,
            median(raising.clone()),
            sum(&raising) / 1e3,
            sum(&per_dispatch) / per_dispatch.len().max(1) as f64,
            {
                let mut v = per_dispatch.clone();
                v.sort_by(f64::total_cmp);
                v.get(v.len() * 99 / 100).copied().unwrap_or(0.0)
            }
        );
    }
    drop(e);
    // SAFETY: the mapping this made; the engine that imported it is gone.
    unsafe { libc::munmap(host, bytes as usize) };
    Figures {
        dispatch_us: median(per_dispatch),
        frame_ms: median(per_frame),
        slots_a_frame: median(slots),
        uploaded_a_frame: median(uploaded),
        first_ms,
        rss_mib,
        pieces,
        chunk_bytes,
        n_chunks,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let list = |name: &str, default: &str| -> Vec<String> {
        arg(&args, name)
            .unwrap_or(default)
            .split(',')
            .map(str::to_owned)
            .collect()
    };
    let mibs: Vec<u64> = list("--mib", "2,1024,16384")
        .iter()
        .map(|m| m.parse().unwrap())
        .collect();
    let kinds: Vec<Kind> = list("--kind", "watch,protect")
        .iter()
        .map(|k| {
            if k == "protect" {
                Kind::Protect
            } else {
                Kind::Watch
            }
        })
        .collect();
    let num = |name: &str, default: usize| {
        arg(&args, name)
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let (frames, dispatches, toggles) = (
        num("--frames", 20),
        num("--dispatches", 200),
        num("--toggles", 1000),
    );
    let ctx = Context::new(&ContextOptions::default()).expect("a Vulkan device");
    println!(
        "## issue 41: {} — {frames} frames of {dispatches} device-addressed dispatches and {toggles} toggles",
        ctx.device_name()
    );
    println!(
        "| kind | guest MiB | engine µs a dispatch (median) | engine ms a frame (median) | slots changed a frame | table bytes uploaded a frame | first dispatch ms | resident MiB over before | pieces | chunk | chunks |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for &kind in &kinds {
        for &mib in &mibs {
            let f = run(&ctx, mib, kind, frames, dispatches, toggles);
            println!(
                "| {} | {mib} | {:.2} | {:.3} | {:.0} | {:.0} | {:.1} | {:.1} | {} | {:#x} | {} |",
                if kind == Kind::Watch {
                    "write-watch"
                } else {
                    "protection"
                },
                f.dispatch_us,
                f.frame_ms,
                f.slots_a_frame,
                f.uploaded_a_frame,
                f.first_ms,
                f.rss_mib,
                f.pieces,
                f.chunk_bytes,
                f.n_chunks
            );
        }
    }
}
