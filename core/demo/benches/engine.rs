//! What a whole `Engine::dispatch` costs on the CPU reference, the path an emulator that embeds
//! the engine pays for every dispatch.
//!
//! `cargo bench -p dispatchscope-core --bench engine`
//!
//! - `engine/demo_frame`: one frame of the built-in demo (a bound update pass, a pass reading
//!   inside its slot, and ray-traversal passes by device address, about 117 accesses a dispatch),
//!   through a detached tap. Divide by the dispatches a frame runs (printed) for the time per
//!   dispatch.
//! - `engine/unchanged_1gib`: a one-access device-addressed dispatch over a 1 GiB reservation
//!   whose every 8th page is shared (M3 leaves it out: 32,768 pieces, a table of 2^20 slots), when
//!   nothing changed since the last dispatch: no import, no table change. What the engine's own
//!   bookkeeping and report cost per dispatch at a large mapping.

#![allow(
    clippy::unwrap_used,
    reason = "a bench: a failure stops it with its message"
)]

use std::hint::black_box;

use criterion::Criterion;
use dispatchscope_core::Engine;
use dispatchscope_core::addr::ByteRange;
use dispatchscope_core::input::{Access, AccessKind, DeviceLimits, DispatchInput, Op, Reason};
use dispatchscope_core::input::{Backing, Event};
use dispatchscope_demo::{Demo, DemoConfig};
use dispatchscope_live::Tap;

const GUEST_BASE: u64 = 0x4000_0000_0000;

fn demo_frame(c: &mut Criterion) {
    let mut demo = Demo::new(DemoConfig::default()).unwrap();
    let mut tap = Tap::detached();
    // Past the setup frame, then count what a steady frame runs.
    demo.frame(&mut tap).unwrap();
    let per_frame = demo.frame(&mut tap).unwrap().dispatches;
    println!("engine/demo_frame: {per_frame} dispatches a frame");
    c.bench_function("engine/demo_frame", |b| {
        b.iter(|| black_box(demo.frame(&mut tap).unwrap()))
    });
}

fn unchanged_1gib(c: &mut Criterion) {
    let mapped_bytes: u64 = 1 << 30;
    let mut engine = Engine::cpu(DeviceLimits::default()).unwrap();
    let res = ByteRange::new(GUEST_BASE, GUEST_BASE + mapped_bytes);
    engine
        .apply(&Event::Reserve {
            range: res,
            readable: true,
            writable: true,
            committed: true,
            backing: Backing::Private,
            host_base: None,
        })
        .unwrap();
    for p in (GUEST_BASE..res.end).step_by(8 << 12) {
        engine
            .apply(&Event::SetBacking {
                range: ByteRange::new(p + (7 << 12), p + (8 << 12)),
                backing: Backing::Shared,
            })
            .unwrap();
    }
    let mut load = Access::new(AccessKind::Global, Op::Load, 4);
    load.address = Some(GUEST_BASE + 0x10);
    let input = DispatchInput {
        program: GUEST_BASE,
        reasons: vec![Reason::D753],
        accesses: vec![load],
        ..DispatchInput::default()
    };
    engine.dispatch(&input).unwrap();
    println!(
        "engine/unchanged_1gib: {} pieces, table of {} slots",
        engine.mappings().pieces().count(),
        engine.table().map_or(0, |t| t.capacity())
    );
    c.bench_function("engine/unchanged_1gib", |b| {
        b.iter(|| black_box(engine.dispatch(&input).unwrap()))
    });
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    demo_frame(&mut c);
    unchanged_1gib(&mut c);
    c.final_summary();
}
