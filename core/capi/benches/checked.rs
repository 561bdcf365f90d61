//! Issue 39's checked mode through the C ABI: what reading the real mapping of every imported
//! piece again before each device-addressed dispatch costs the emulator's thread, with 1 GiB of
//! its own pages imported (one piece, then 1,024), detached with the mode off and on, and with a
//! debugger attached (which turns it on) receiving every dispatch on another thread.
//!
//! `cargo bench -p dispatchscope-capi --bench checked` (`-- --rounds N`, default 2001 timed
//! dispatches a figure). Medians of prepare + complete, in the same process.

#![allow(clippy::print_stdout, reason = "a benchmark prints its figures")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    unsafe_code,
    missing_docs,
    reason = "a benchmark stops on a failed setup, and maps its own pages as an emulator does"
)]

use std::ffi::{CString, c_void};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dispatchscope_capi::*;
use dispatchscope_live::client::{Incoming, LiveClient};
use dispatchscope_live::protocol::ToDebugger;

const GUEST: u64 = 0x1_0000_0000;
const GIB: u64 = 1 << 30;

unsafe extern "C" fn write(_: *mut c_void, host: u64, src: *const u8, n: u64) -> i32 {
    // SAFETY: the engine writes only into the bench's own read-write mapping.
    unsafe { std::ptr::copy_nonoverlapping(src, host as *mut u8, n as usize) };
    0
}
unsafe extern "C" fn range(_: *mut c_void, _: u64, _: u64) -> i32 {
    0
}
unsafe extern "C" fn hand_off(_: *mut c_void, _: u64, _: u64, _: u64) -> i32 {
    0
}

fn ok(s: ds_status) {
    assert_eq!(s, ds_status::DS_OK, "{:?}", unsafe {
        // SAFETY: the library's own NUL-terminated message.
        std::ffi::CStr::from_ptr(ds_last_error())
    });
}

fn event(kind: ds_event_kind, start: u64, end: u64) -> ds_event {
    ds_event {
        size: size_of::<ds_event>() as u32,
        kind: kind as u32,
        start,
        end,
        host_address: 0,
        flags: 0,
        protection: 0,
        bytes: std::ptr::null(),
        n_bytes: 0,
        target_id: 0,
        reserved: 0,
        name: std::ptr::null(),
    }
}

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v.get(v.len() / 2)
        .copied()
        .unwrap_or_default()
        .as_secs_f64()
        * 1e6
}

/// Median µs of `rounds` device-addressed prepare + complete.
fn dispatches(engine: ds_engine, rounds: usize) -> f64 {
    let d = ds_dispatch {
        size: size_of::<ds_dispatch>() as u32,
        program: 0x7400_5b85_4a00,
        kind: 0,
        reasons: 1,
        slots: std::ptr::null(),
        n_slots: 0,
        push: std::ptr::null(),
        n_push: 0,
    };
    let mut times = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        // SAFETY: a zeroed ds_prepared is a valid value of the plain-data struct.
        let mut p: ds_prepared = unsafe { std::mem::zeroed() };
        p.size = size_of::<ds_prepared>() as u32;
        let t = Instant::now();
        // SAFETY: valid pointers for the call.
        ok(unsafe { ds_engine_prepare(engine, &d, &mut p) });
        assert_eq!(p.mode, ds_mode::DS_MODE_DEVICE_ADDRESSED as u32);
        let c = ds_completion {
            size: size_of::<ds_completion>() as u32,
            n_holders: 0,
            index: p.index,
            marks: std::ptr::null(),
            n_marks: 0,
            holders: std::ptr::null(),
            instrumentation: std::ptr::null(),
        };
        // SAFETY: as above.
        ok(unsafe { ds_engine_complete(engine, &c) });
        times.push(t.elapsed());
    }
    median(times)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rounds = args
        .iter()
        .position(|a| a == "--rounds")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(2001usize);
    // SAFETY: a fresh anonymous private mapping, committed lazily as an emulator's heap is.
    let host = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            GIB as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    assert_ne!(host, libc::MAP_FAILED);
    // SAFETY: zeroed plain data; the pointers are set below.
    let mut limits: ds_limits = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out pointer.
    ok(unsafe { ds_limits_default(&mut limits) });
    // SAFETY: zeroed plain data; every callback the engine needs is set below.
    let mut cb: ds_host_callbacks = unsafe { std::mem::zeroed() };
    cb.size = size_of::<ds_host_callbacks>() as u32;
    cb.abi_version = DS_ABI_VERSION;
    cb.write = Some(write);
    cb.commit = Some(range);
    cb.release_guards = Some(range);
    cb.hand_off = Some(hand_off);
    let mut engine: ds_engine = 0;
    // SAFETY: valid pointers; the callbacks live as long as the process.
    ok(unsafe { ds_engine_create_host(&limits, &cb, &mut engine) });
    let mut reserve = event(ds_event_kind::DS_EVENT_RESERVE, GUEST, GUEST + GIB);
    reserve.host_address = host as u64;
    reserve.flags = DS_EVENT_READABLE | DS_EVENT_WRITABLE | DS_EVENT_COMMITTED;
    // SAFETY: a valid event.
    ok(unsafe { ds_engine_apply(engine, &reserve) });
    println!(
        "## issue 39: the checked mode, 1 GiB of the emulator's pages imported ({rounds} rounds a figure, medians of prepare + complete)"
    );
    dispatches(engine, 3);
    for pieces in [1u64, 1024] {
        if pieces > 1 {
            // One page in every 1 MiB made unreadable: 1,024 readable runs, 1,024 pieces.
            for k in 0..pieces {
                let at = GUEST + k * (1 << 20);
                let protect = event(ds_event_kind::DS_EVENT_PROTECT, at, at + 0x1000);
                // SAFETY: a valid event.
                ok(unsafe { ds_engine_apply(engine, &protect) });
            }
            dispatches(engine, 3);
        }
        ok(ds_engine_set_checked(engine, 0));
        let off = dispatches(engine, rounds);
        ok(ds_engine_set_checked(engine, 1));
        let on = dispatches(engine, rounds);
        ok(ds_engine_set_checked(engine, 0));
        println!(
            "{pieces} piece(s): checked off {off:.2} µs, on {on:.2} µs: the check costs {:.2} µs a prepare, {:.3} µs a piece",
            on - off,
            (on - off) / pieces as f64
        );
    }
    // A debugger attached on another thread: the tap streams every dispatch and the checked mode
    // is on because it is attached.
    let addr = CString::new("127.0.0.1:0").unwrap();
    let mut port = 0u16;
    // SAFETY: valid strings and out pointer.
    ok(unsafe {
        ds_engine_listen(
            engine,
            addr.as_ptr(),
            std::ptr::null(),
            std::ptr::null(),
            &mut port,
        )
    });
    let stop = Arc::new(AtomicBool::new(false));
    let received = Arc::new(AtomicU64::new(0));
    let debugger = {
        let (stop, received) = (Arc::clone(&stop), Arc::clone(&received));
        std::thread::spawn(move || {
            let client =
                LiveClient::connect(&format!("127.0.0.1:{port}"), None, Duration::from_secs(5))
                    .unwrap();
            while !stop.load(Ordering::Relaxed) {
                if let Some(Incoming::Message(ToDebugger::Dispatch { .. })) =
                    client.recv_timeout(Duration::from_millis(50))
                {
                    received.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    let mut attached = 0u8;
    let t0 = Instant::now();
    while attached == 0 && t0.elapsed() < Duration::from_secs(10) {
        // SAFETY: a valid out pointer.
        ok(unsafe { ds_engine_attached(engine, &mut attached) });
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(attached, 1, "the debugger attached");
    let with_debugger = dispatches(engine, rounds);
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    debugger.join().unwrap();
    println!(
        "1024 pieces, a debugger attached on another thread (checked on because attached): {with_debugger:.2} µs a dispatch; it received {} dispatches",
        received.load(Ordering::Relaxed)
    );
    ok(ds_engine_destroy(engine));
}
