//! Issue 31: what a game streams. The demo in [`Streams::Game`] sends bound passes through
//! prepare and complete (plan, hand-off, write-back, no access list) and device-addressed ones with
//! their instrumented section; and the tap's attached path on the game thread (its prepared
//! message included) allocates nothing once its ring is warm.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "in a test, an unwrap is an assertion"
)]
#![allow(
    unsafe_code,
    reason = "a counting allocator: the test's measure of the game thread"
)]

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::{Duration, Instant};

use common::{T, loopback, serial, spawn_target};
use dispatchscope_core::addr::ByteRange;
use dispatchscope_core::engine::{DeviceRun, HolderRun, RanOn};
use dispatchscope_core::input::{Backing, DeviceLimits, DispatchInput, Event, Slot};
use dispatchscope_core::report::Mode;
use dispatchscope_core::{CpuBackend, Engine};
use dispatchscope_demo::{DemoConfig, Streams};
use dispatchscope_live::{ClientOptions, Incoming, LiveClient, Tap, ToDebugger};

/// Counts the allocations of the threads that asked ([`counting`]).
struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn note_allocation() {
    if COUNTING.with(Cell::get) {
        ALLOCATIONS.with(|a| a.set(a.get() + 1));
    }
}

// SAFETY: every call goes to `System` unchanged; the counters are plain thread-locals without
// destructors, which an allocator may touch.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_allocation();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f` counting this thread's allocations; returns them.
fn counting(f: impl FnOnce()) -> u64 {
    let before = ALLOCATIONS.with(Cell::get);
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    ALLOCATIONS.with(Cell::get) - before
}

const BASE: u64 = 0x2_0000_0000;

/// Run 305's shape: a 0x20-byte written range that a 0xe40f-byte written range ends inside, bound
/// as one set, with no access list (what an emulator hands the engine).
fn bound_pass() -> DispatchInput {
    DispatchInput {
        program: 0x4000_03e1_9200,
        label: "run 305 update".into(),
        slots: vec![
            Slot::new(0, BASE + 0x1000, 0xe40f, true),
            Slot::new(1, BASE + 0xf400, 0x20, true),
        ],
        ..DispatchInput::default()
    }
}

#[test]
fn the_taps_attached_path_allocates_nothing_once_its_ring_is_warm() {
    let _serial = serial();
    let mut engine = Engine::<CpuBackend>::cpu(DeviceLimits::default()).unwrap();
    engine
        .apply(&Event::Reserve {
            range: ByteRange::new(BASE, BASE + 0x40000),
            readable: true,
            writable: true,
            committed: true,
            backing: Backing::Private,
            host_base: None,
        })
        .unwrap();
    let mut tap = Tap::listen(loopback("ring test")).unwrap();
    let handle = tap.handle();
    let client = LiveClient::connect_with(
        &tap.local_addr().unwrap().to_string(),
        &ClientOptions::default(),
    )
    .unwrap();
    let deadline = Instant::now() + T;
    while !tap.is_attached() {
        assert!(Instant::now() < deadline, "the debugger never attached");
        std::thread::sleep(Duration::from_millis(5));
    }
    let input = bound_pass();
    let (mut data, mut masks) = (Vec::new(), Vec::new());
    let mut game_thread = Vec::new();
    for round in 0..600u32 {
        let mut spent = counting(|| tap.before_prepare(&engine, &input));
        let index = engine.next_dispatch();
        let prepared = engine.prepare(&input).unwrap();
        assert_eq!(prepared.mode, Mode::Bound);
        spent += counting(|| tap.after_prepare(&prepared));
        let holder = prepared.holder(0).copied().unwrap();
        let len = (holder.buffer.end - holder.buffer.start) as usize;
        data.resize(len, 0);
        masks.resize(len.div_ceil(4) * 4, 0);
        data[0..4].copy_from_slice(&round.to_le_bytes());
        masks[0..4].copy_from_slice(&[0xff; 4]);
        let run = DeviceRun {
            holders: vec![HolderRun {
                slot: 0,
                data: &data,
                masks: &masks,
            }],
            ran_on: Some("the test's device"),
            ..DeviceRun::default()
        };
        let mut result = engine.complete(&input, prepared, RanOn::Device(run));
        spent += counting(|| tap.after_complete(&engine, &input, index, &mut result));
        let report = result.unwrap();
        assert!(report.accesses.is_empty());
        assert_eq!(report.write_back.len(), 1, "{:?}", report.write_back);
        game_thread.push(spent);
        // The writer gives each slot back once it sent it: the next dispatch finds it warm
        // (waiting for the slot too, not only for the queue to empty: on a loaded machine the
        // writer may take the item and give its slot back a while later).
        let deadline = Instant::now() + T;
        while handle.figures().queued > 0 || handle.figures().spare_slots == 0 {
            assert!(Instant::now() < deadline, "the writer never drained");
            std::thread::yield_now();
        }
        while let Some(item) = client.try_recv() {
            if let Incoming::Disconnected { reason, .. } = item {
                panic!("{reason}");
            }
        }
    }
    assert_eq!(handle.figures().dropped, 0);
    // The first dispatches fill the ring; from then on, the game thread's share allocates nothing.
    let warm = &game_thread[100..];
    assert_eq!(
        warm.iter().sum::<u64>(),
        0,
        "allocations on the game thread per attached dispatch, once warm: {warm:?}"
    );
    assert!(
        game_thread[..100].iter().sum::<u64>() > 0,
        "the counting allocator counts (the first slots are allocated)"
    );
}

#[test]
fn the_game_mode_demo_streams_plans_write_backs_and_sections_without_access_lists() {
    let _serial = serial();
    let demo = DemoConfig {
        streams: Streams::Game,
        dispatches_per_frame: 12,
        refusal_every: 4,
        escape_every: 4,
        ..DemoConfig::default()
    };
    let target = spawn_target(loopback("game stream test"), demo, 240.0);
    let client =
        LiveClient::connect_with(&target.addr.to_string(), &ClientOptions::default()).unwrap();
    let (mut bound, mut device, mut refused, mut escapes) = (0, 0, 0, 0);
    let deadline = Instant::now() + T;
    while (bound < 40 || device < 40 || refused < 1 || escapes < 1) && Instant::now() < deadline {
        let Some(Incoming::Message(m)) = client.recv_timeout(Duration::from_millis(100)) else {
            continue;
        };
        let (input, report) = match m {
            ToDebugger::Dispatch { input, report, .. } => (input, report),
            ToDebugger::Received(d) => {
                let (input, report) = d.decode().unwrap();
                (Box::new(input), Box::new(report))
            }
            _ => continue,
        };
        assert!(
            input.accesses.is_empty(),
            "{}: an input access list",
            report.index
        );
        assert!(
            report.accesses.is_empty(),
            "{}: an executed access list",
            report.index
        );
        match report.mode {
            Mode::Bound => {
                bound += 1;
                assert!(report.instrumented.is_none());
                assert!(
                    !report.write_back.is_empty(),
                    "{}: no write-back",
                    report.index
                );
                assert!(report.backend.contains("demo"), "{}", report.backend);
            }
            Mode::DeviceAddressed => {
                device += 1;
                let section = report
                    .instrumented
                    .as_ref()
                    .expect("a device pass's section");
                assert!(section.counters.lookups > 0);
                assert!(!section.sites.is_empty());
                assert_eq!(
                    section.probe_histogram.iter().sum::<u64>(),
                    section.counters.lookups
                );
                escapes += section.escapes();
                for e in &section.escapes {
                    assert!(section.sites.iter().any(|s| s.pc == e.pc));
                }
            }
            Mode::Refused => {
                refused += 1;
                assert!(!report.refusals.is_empty());
            }
        }
    }
    assert!(
        bound >= 40 && device >= 40,
        "bound {bound}, device-addressed {device}"
    );
    assert!(refused >= 1, "no refusal streamed");
    assert!(escapes >= 1, "no escape in any section");
}
