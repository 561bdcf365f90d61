//! The live figures of a game's rate (issue 18): the demo at 200 dispatches a frame and 60 frames a
//! second with a debugger attached, the wire's bytes per dispatch (v1 against v2), and the
//! debugger's memory after a million dispatches.
//!
//! `cargo bench -p dispatchscope-demo --bench live_rate` (a bench binary, not criterion: each
//! figure is one long run). Environment: `LIVE_RATE_PHASES` (any of `wire,stream,store`, all by
//! default), `LIVE_RATE_S` (seconds per stream phase, 10), `LIVE_RATE_WHOLE` (set: the stream
//! phase's debugger decodes every dispatch whole, as before issue 18's one encoding),
//! `LIVE_RATE_KEEP_ROWS` (0: the store as the window keeps it, no rows or reports),
//! `LIVE_RATE_DISPATCHES` (the store's
//! feed, 1,000,000), `LIVE_RATE_PER_FRAME` (200).
//!
//! - wire: 3 frames of the demo (600 dispatches) as version 1's JSON frames and as version 2's
//!   binary frames (64 messages a frame, as a writer thread batches them at this rate); bytes per
//!   dispatch; the game thread's share per dispatch (`EncodedDispatch::of`, against a clone of
//!   input and report); v2's encode (the writer thread) and decode time per dispatch; and the
//!   store's DISPATCH record (`columns::encode_record` and lz4) per dispatch.
//! - stream: the demo paced at 60 frames a second, first with no debugger, then with a debugger in
//!   this process (a `LiveClient` feeding a `LiveStore` that writes a capture); the game's busy
//!   time per frame (the frame's work, not its sleep) in both, dispatches the debugger received
//!   and decoded per second, and dispatches dropped (the target's count and the gaps seen).
//! - store: a `LiveStore` fed a million one-access dispatches (writing a real capture in the
//!   temporary folder); resident memory before and after (`VmRSS`, `VmHWM` of /proc/self/status),
//!   and the time to read back the oldest dispatch from the file.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    reason = "a bench: a failure stops it with its message"
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dispatchscope_core::addr::ByteRange;
use dispatchscope_core::input::{
    Access, AccessKind, Backing, DeviceLimits, DispatchInput, Event, Op, Slot,
};
use dispatchscope_core::report::DispatchReport;
use dispatchscope_core::{CpuBackend, Engine};
use dispatchscope_demo::{Demo, DemoConfig, Streams};
use dispatchscope_formats::columns;
use dispatchscope_live::protocol::{MAX_FRAME_BYTES, Snapshot, ToDebugger, encode_frame};
use dispatchscope_live::wire::{Decoder, EncodedDispatch, Encoder};
use dispatchscope_live::{
    ClientOptions, Incoming, LiveClient, LiveStore, StoreOptions, Tap, TapConfig,
};

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// `LIVE_RATE_STREAMS=lists`: the demo sends the CPU reference's access lists (before issue 31);
/// by default what a game streams ([`Streams::Game`]).
fn per_frame_config() -> DemoConfig {
    let streams = match std::env::var("LIVE_RATE_STREAMS").as_deref() {
        Ok("lists") => Streams::AccessLists,
        _ => Streams::Game,
    };
    DemoConfig {
        dispatches_per_frame: env_or("LIVE_RATE_PER_FRAME", 200),
        streams,
        ..DemoConfig::default()
    }
}

fn wire() {
    let mut demo = Demo::new(per_frame_config()).unwrap();
    let mut tap = Tap::detached();
    let mut messages = Vec::new();
    for _ in 0..3 {
        demo.frame_with(&mut tap, |i, r| {
            messages.push(ToDebugger::Dispatch {
                index: r.index,
                input: Box::new(i.clone()),
                report: Box::new(r.clone()),
                mapping_state: None,
                accesses_left_out: 0,
            });
        })
        .unwrap();
    }
    let n = messages.len();
    let v1: usize = messages
        .iter()
        .map(|m| encode_frame(m, MAX_FRAME_BYTES).unwrap().len())
        .sum();
    // What the game thread pays a dispatch: before issue 18's rows, a clone of input and report;
    // now the access lists written as rows and the rest cloned (`EncodedDispatch::of`).
    // Each the best of 5 rounds, so that the figure is the steady state's (memory reused, as on
    // the game thread), not the first touch of fresh pages.
    let mut clone_s = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        let clones: Vec<ToDebugger> = messages.iter().map(Clone::clone).collect();
        clone_s = clone_s.min(t.elapsed().as_secs_f64());
        drop(clones);
    }
    let mut owned: Vec<(DispatchInput, DispatchReport)> = messages
        .iter()
        .map(|m| match m {
            ToDebugger::Dispatch { input, report, .. } => ((**input).clone(), (**report).clone()),
            _ => unreachable!(),
        })
        .collect();
    // As the tap does it: the row buffers the writer gave back, the mapping lists shared.
    let mut game_s = f64::MAX;
    let mut encoded: Vec<EncodedDispatch> = Vec::new();
    let mut last = None;
    let rounds: usize = env_or("LIVE_RATE_GAME_ROUNDS", 5);
    for _ in 0..rounds {
        let mut spare: Vec<Vec<u8>> = std::mem::take(&mut encoded)
            .into_iter()
            .map(|d| d.accesses)
            .collect();
        let t = Instant::now();
        encoded = owned
            .iter_mut()
            .enumerate()
            .map(|(i, (input, report))| {
                let rows = spare.pop().unwrap_or_default();
                EncodedDispatch::of_into_sharing(
                    i as u64,
                    input,
                    report,
                    usize::MAX,
                    rows,
                    &mut last,
                )
            })
            .collect();
        game_s = game_s.min(t.elapsed().as_secs_f64());
    }
    // The writer thread: as to a debugger on loopback (uncompressed frames, what the stream
    // phase's writer does), then compressed (what goes to any other debugger: the bytes figure).
    let encode = |compress: bool, encoded: Vec<EncodedDispatch>| {
        let mut enc = Encoder::new(usize::MAX, MAX_FRAME_BYTES);
        enc.set_compress(compress);
        let mut bytes = Vec::with_capacity(16 << 20);
        let mut encoded = encoded.into_iter();
        let t = Instant::now();
        for _ in 0..n.div_ceil(64) {
            for mut d in encoded.by_ref().take(64) {
                enc.push_dispatch(&mut d, &mut bytes, &mut |_, _| {})
                    .unwrap();
            }
            enc.finish_frame(&mut bytes);
        }
        (t.elapsed().as_secs_f64(), bytes)
    };
    let again: Vec<EncodedDispatch> = owned
        .iter_mut()
        .enumerate()
        .map(|(i, (input, report))| EncodedDispatch::of(i as u64, input, report, usize::MAX))
        .collect();
    let (loopback_s, loopback) = encode(false, again);
    let (enc_s, bytes) = encode(true, encoded);
    let decode_all = |keep: bool| {
        let t = Instant::now();
        let mut dec = Decoder::new();
        dec.set_keep_received(keep);
        let mut out = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
            dec.decode(&bytes[at + 4..at + 4 + len], &mut out).unwrap();
            at += 4 + len;
        }
        (t.elapsed().as_secs_f64(), out)
    };
    let (dec_s, out) = decode_all(false);
    let decoded = out
        .iter()
        .filter(|m| matches!(m, ToDebugger::Dispatch { .. }))
        .count();
    assert_eq!(decoded, n);
    // What the debugger pays when it decodes only a table row's part (the access rows skipped,
    // the bytes kept for the store), and what a selected dispatch's whole decode then costs.
    let (summary_s, received) = decode_all(true);
    let received: Vec<_> = received
        .into_iter()
        .filter_map(|m| match m {
            ToDebugger::Received(d) => Some(d),
            _ => None,
        })
        .collect();
    assert_eq!(received.len(), n);
    let t = Instant::now();
    for d in &received {
        let (_, r) = d.decode().unwrap();
        assert!(r.index == d.index);
    }
    let whole_s = t.elapsed().as_secs_f64();
    // What the store paid a dispatch for its DISPATCH record before issue 18's one encoding
    // (rows and the rest as JSON, lz4) ...
    let t = Instant::now();
    let mut record = Vec::new();
    let mut record_bytes = 0usize;
    for m in &messages {
        if let ToDebugger::Dispatch { input, report, .. } = m {
            record.clear();
            columns::encode_record(input, Some(report), &mut record);
            record_bytes += lz4_flex::block::compress(&record).len();
        }
    }
    let record_s = t.elapsed().as_secs_f64();
    // ... and now: the bytes as they came, lz4 as the capture writer stores them.
    let t = Instant::now();
    let mut v2_bytes = 0usize;
    let mut record_raw = 0usize;
    for d in &received {
        v2_bytes += lz4_flex::block::compress(d.record()).len();
        record_raw += d.record().len();
    }
    let v2_s = t.elapsed().as_secs_f64();
    // What the store pays a dispatch as the window keeps it: each received dispatch written to a
    // capture (`LiveStore::take_ref`), the record as it came.
    let dir = tempfile::tempdir().unwrap();
    let mut store = LiveStore::create(
        &dir.path().join("wire.dscap"),
        "wire",
        &StoreOptions {
            keep_rows: false,
            window: 0,
            ..StoreOptions::default()
        },
    );
    store
        .take(ToDebugger::Snapshot(Box::new(Snapshot {
            next_dispatch: 0,
            device: DeviceLimits::default(),
            n_event_frames: 0,
            n_contents: 0,
        })))
        .unwrap();
    let t = Instant::now();
    for d in received {
        store.take_ref(&ToDebugger::Received(d)).unwrap();
    }
    let store_s = t.elapsed().as_secs_f64();
    let stored = store.summary().bytes;
    store.finish().unwrap();
    let per = |s: f64| s * 1e6 / n as f64;
    println!(
        "wire: {n} demo dispatches; v1 {} bytes a dispatch, v2 {} bytes a dispatch compressed ({:.1}x smaller), {} uncompressed (loopback); game thread {:.1} us a dispatch (a clone of input and report was {:.1} us); v2 encode {:.1} us to loopback, {:.1} us compressed, decode {:.1} us a dispatch (a row's part only {:.1} us, then a selected one's whole {:.1} us); the store's DISPATCH record: {} bytes as it came (lz4 of it: {:.1} us and {} bytes; re-encoded as before: {:.1} us and {} bytes); the store's take {:.1} us a dispatch, {} bytes a dispatch in its file",
        v1 / n,
        bytes.len() / n,
        v1 as f64 / bytes.len() as f64,
        loopback.len() / n,
        per(game_s),
        per(clone_s),
        per(loopback_s),
        per(enc_s),
        per(dec_s),
        per(summary_s),
        per(whole_s),
        record_raw / n,
        per(v2_s),
        v2_bytes / n,
        per(record_s),
        record_bytes / n,
        per(store_s),
        stored / n as u64
    );
}

/// Runs the demo paced at 60 frames a second for `secs`, returning (frames, busy seconds, the
/// worst frame's busy seconds, dispatches).
/// The median and 90th percentile of `times` (ns), in µs.
fn quantiles(times: &mut [u32]) -> (f64, f64) {
    if times.is_empty() {
        return (0.0, 0.0);
    }
    times.sort_unstable();
    let at = |q: f64| f64::from(times[((times.len() - 1) as f64 * q) as usize]) / 1e3;
    (at(0.5), at(0.9))
}

thread_local! {
    /// The tap's time a dispatch over the frames [`paced`] ran (game mode only).
    static TAP_TIMES: std::cell::RefCell<Vec<u32>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn paced(demo: &mut Demo, tap: &mut Tap, secs: f64) -> (u64, f64, f64, u64) {
    let frame_time = Duration::from_secs_f64(1.0 / 60.0);
    let start = Instant::now();
    let mut next = start;
    let (mut frames, mut busy, mut worst, mut dispatches) = (0u64, 0.0f64, 0.0f64, 0u64);
    while start.elapsed().as_secs_f64() < secs {
        let t = Instant::now();
        let s = demo.frame(tap).unwrap();
        let b = t.elapsed().as_secs_f64();
        TAP_TIMES.with(|v| v.borrow_mut().extend_from_slice(demo.tap_times_ns()));
        busy += b;
        worst = worst.max(b);
        frames += 1;
        dispatches += s.dispatches;
        next += frame_time;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            next = now;
        }
    }
    (frames, busy, worst, dispatches)
}

fn stream() {
    let secs: f64 = env_or("LIVE_RATE_S", 10.0);
    let config = TapConfig {
        target_name: "live_rate bench".into(),
        ..TapConfig::listening_on("127.0.0.1:0".parse().unwrap())
    };
    let mut tap = Tap::listen(config).unwrap();
    let addr = tap.local_addr().unwrap().to_string();
    let mut demo = Demo::new(per_frame_config()).unwrap();
    paced(&mut demo, &mut tap, 1.0); // warm up
    TAP_TIMES.with(|v| v.borrow_mut().clear());
    let (f0, b0, w0, d0) = paced(&mut demo, &mut tap, secs);
    let (tap_detached, tap_detached_90) = TAP_TIMES.with(|v| quantiles(&mut v.borrow_mut()));
    println!(
        "stream: detached: {f0} frames, {:.0} dispatches/s, busy {:.2} ms a frame (worst {:.2} ms)",
        d0 as f64 / secs,
        b0 * 1e3 / f0 as f64,
        w0 * 1e3
    );

    let stop = Arc::new(AtomicBool::new(false));
    let received = Arc::new(AtomicU64::new(0));
    let debugger = {
        let (stop, received) = (Arc::clone(&stop), Arc::clone(&received));
        std::thread::spawn(move || {
            let dir = tempfile::tempdir().unwrap();
            let mut store = LiveStore::create(
                &dir.path().join("live_rate.dscap"),
                "live_rate",
                &StoreOptions::default(),
            );
            let c = LiveClient::connect_with(
                &addr,
                &ClientOptions {
                    snapshot: true,
                    keep_received: std::env::var("LIVE_RATE_WHOLE").is_err(),
                    ..ClientOptions::default()
                },
            )
            .unwrap();
            let (mut dropped, mut gaps, mut last) = (0u64, 0u64, None::<u64>);
            let mut tap_ns = 0.0f64;
            let mut first_at = None;
            while !stop.load(Ordering::Relaxed) {
                match c.recv_timeout(Duration::from_millis(50)) {
                    Some(Incoming::Message(m)) => {
                        let index = match &m {
                            ToDebugger::Stats(s) => {
                                dropped = dropped.max(s.dropped);
                                tap_ns = s.tap_ns_per_dispatch;
                                None
                            }
                            ToDebugger::Dispatch { index, .. } => Some(*index),
                            ToDebugger::Received(d) => Some(d.index),
                            _ => None,
                        };
                        if let Some(index) = index {
                            if let Some(l) = last {
                                gaps += index - l - 1;
                            }
                            last = Some(index);
                            first_at.get_or_insert_with(Instant::now);
                            received.fetch_add(1, Ordering::Relaxed);
                        }
                        store.take(m).unwrap();
                    }
                    Some(Incoming::Disconnected { reason, .. }) => panic!("{reason}"),
                    None => {}
                }
            }
            let took = first_at.map_or(0.0, |t| t.elapsed().as_secs_f64());
            let bytes = store.summary().bytes;
            let n = store.len();
            let _ = c.detach(Duration::from_secs(2));
            store.finish().unwrap();
            (dropped, gaps, took, n, bytes, tap_ns)
        })
    };
    // Wait for the attach and the snapshot, then measure.
    while received.load(Ordering::Relaxed) == 0 {
        demo.frame(&mut tap).unwrap();
    }
    let r0 = received.load(Ordering::Relaxed);
    TAP_TIMES.with(|v| v.borrow_mut().clear());
    let (f1, b1, w1, d1) = paced(&mut demo, &mut tap, secs);
    let (tap_attached, tap_attached_90) = TAP_TIMES.with(|v| quantiles(&mut v.borrow_mut()));
    let r1 = received.load(Ordering::Relaxed) - r0;
    stop.store(true, Ordering::Relaxed);
    // The debugger stops reading: let the frame loop run while it detaches.
    let done = Instant::now();
    while !debugger.is_finished() && done.elapsed() < Duration::from_secs(10) {
        demo.frame(&mut tap).unwrap();
        std::thread::sleep(Duration::from_millis(16));
    }
    let (dropped, gaps, _took, n, bytes, tap_ns) = debugger.join().unwrap();
    println!(
        "stream: attached: {f1} frames, {:.0} dispatches/s made, {:.0} received and decoded a second, busy {:.2} ms a frame (worst {:.2} ms), {:.2}x detached; dropped {dropped} (the target's count), {gaps} gaps seen; the store wrote {n} dispatches, {:.1} MiB, {:.0} B a dispatch; the tap's attached path {:.2} µs a dispatch on the game thread",
        d1 as f64 / secs,
        r1 as f64 / secs,
        b1 * 1e3 / f1 as f64,
        w1 * 1e3,
        (b1 / f1 as f64) / (b0 / f0 as f64),
        bytes as f64 / f64::from(1 << 20),
        bytes as f64 / n.max(1) as f64,
        tap_ns / 1e3
    );
    println!(
        "stream: the tap's calls on the game thread a dispatch (game mode, timed around them): detached median {tap_detached:.3} µs (p90 {tap_detached_90:.3}); attached median {tap_attached:.3} µs (p90 {tap_attached_90:.3}); attached over detached {:.3} µs",
        tap_attached - tap_detached
    );
}

fn store() {
    let n: u64 = env_or("LIVE_RATE_DISPATCHES", 1_000_000);
    let mut engine = Engine::<CpuBackend>::cpu(DeviceLimits::default()).unwrap();
    let range = ByteRange::new(0x1000_0000, 0x1000_1000);
    engine
        .apply(&Event::Reserve {
            range,
            readable: true,
            writable: true,
            committed: true,
            backing: Backing::Private,
            host_base: None,
        })
        .unwrap();
    let input = DispatchInput {
        program: 0x4000_0000_0000,
        label: "one access".into(),
        slots: vec![Slot::new(0, range.start, 0x100, false)],
        accesses: vec![Access {
            slot: Some(0),
            offset: Some(0),
            ..Access::new(AccessKind::UntypedBuffer, Op::Load, 4)
        }],
        ..DispatchInput::default()
    };
    let report = engine.dispatch(&input).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("million.dscap");
    let rss0 = status_kib("VmRSS:");
    // `LIVE_RATE_KEEP_ROWS=0`: as the window keeps the store (its own rows, no reports).
    let keep_rows = std::env::var("LIVE_RATE_KEEP_ROWS").map_or(true, |v| v != "0");
    let options = StoreOptions {
        keep_rows,
        window: if keep_rows { 512 } else { 0 },
        ..StoreOptions::default()
    };
    let mut s = LiveStore::create(&path, "a million", &options);
    s.take(ToDebugger::Snapshot(Box::new(Snapshot {
        next_dispatch: 0,
        device: DeviceLimits::default(),
        n_event_frames: 0,
        n_contents: 0,
    })))
    .unwrap();
    let t = Instant::now();
    for i in 0..n {
        let mut r = report.clone();
        r.index = i;
        s.take(ToDebugger::Dispatch {
            index: i,
            input: Box::new(input.clone()),
            report: Box::new(r),
            mapping_state: None,
            accesses_left_out: 0,
        })
        .unwrap();
    }
    let fed = t.elapsed();
    let rss1 = status_kib("VmRSS:");
    let hwm = status_kib("VmHWM:");
    let t = Instant::now();
    let old = s.report(0).unwrap();
    let read_back = t.elapsed();
    assert_eq!(old.index, 0);
    // Any dispatch, found through the writer's list: the worst of 100 spread over the session.
    let mut worst = 0f64;
    for k in 0..100u64 {
        let pos = (k * 7_919 * n / 100 + k) % n;
        let t = Instant::now();
        let r = s.report(pos as usize).unwrap();
        worst = worst.max(t.elapsed().as_secs_f64());
        assert_eq!(r.index, pos);
    }
    let bytes = s.summary().bytes;
    s.finish().unwrap();
    println!(
        "store: {n} dispatches fed in {:.1} s (rows kept: {keep_rows}); resident {:.1} MiB before, {:.1} MiB after ({:.0} bytes a dispatch), peak {:.1} MiB; the file {:.0} MiB; the oldest dispatch read back from the file in {:.2} ms, any of 100 spread over the session in at worst {:.2} ms",
        fed.as_secs_f64(),
        rss0 as f64 / 1024.0,
        rss1 as f64 / 1024.0,
        (rss1.saturating_sub(rss0) * 1024) as f64 / n as f64,
        hwm as f64 / 1024.0,
        bytes as f64 / f64::from(1 << 20),
        read_back.as_secs_f64() * 1e3,
        worst * 1e3
    );
}

fn main() {
    let phases = std::env::var("LIVE_RATE_PHASES").unwrap_or_else(|_| "wire,stream,store".into());
    // `cargo bench` passes --bench; nothing else is read from the command line.
    for p in phases.split(',') {
        match p.trim() {
            "wire" => wire(),
            "stream" => stream(),
            "store" => store(),
            other => eprintln!("live_rate: unknown phase {other:?}"),
        }
    }
}
