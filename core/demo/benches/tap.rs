//! Live-debugging figures: what the tap costs a game with no debugger attached, how fast a target
//! streams to an attached debugger on loopback, and the step round trip.
//!
//! `cargo bench -p dispatchscope-core --bench tap` (criterion; `TAP_BENCH_STREAMING=0` skips the
//! streaming figure, `TAP_BENCH_STREAMING_S` sets its seconds per phase, 3 by default).
//!
//! - `tap_detached/*`: a no-op closure; the same behind the tap's check (`is_attached`, one relaxed
//!   load); a bare `Engine::dispatch` of a one-slot, one-access bound dispatch; the same through a
//!   detached tap, and through a listening tap nobody attached to. The tap's cost is the difference
//!   of each pair (goal ≤ 50 ns).
//! - `live/step_round_trip`: from sending `Step { n: 1 }` to a paused demo target, to its dispatch's
//!   report decoded on the debugger's channel (goal ≤ 2 ms on loopback).
//! - paired (printed): the same differences measured in interleaved blocks on one engine, which
//!   cancels the drift between separate criterion runs (larger than the check itself).
//! - streaming (printed): the demo as fast as it runs, with no debugger, then with a debugger that
//!   drains everything: dispatches per second run, received, and dropped.
//! - in flight (printed; `TAP_BENCH_IN_FLIGHT_ONLY=1` runs it alone): an emulator's rounds of 64
//!   dispatches prepared before any completes, the tap's three calls each timed around itself,
//!   attached (a debugger draining on another thread) and detached; the goal is ≤ 1 µs a dispatch
//!   attached over detached, and `after_prepare` (the prepared message) is one push.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a bench: a failure stops it with its message"
)]

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use criterion::Criterion;
use dispatchscope_core::addr::ByteRange;
use dispatchscope_core::input::{Access, AccessKind, DeviceLimits, DispatchInput, Op, Slot};
use dispatchscope_core::input::{Backing, Event};
use dispatchscope_core::{CpuBackend, Engine};
use dispatchscope_demo::{Demo, DemoConfig};
use dispatchscope_live::protocol::{MAX_FRAME_BYTES, decode, decode_to_debugger, encode_frame};
use dispatchscope_live::wire::{Decoder, Encoder};
use dispatchscope_live::{Incoming, LiveClient, Tap, TapConfig, ToDebugger};

fn tiny() -> (Engine<CpuBackend>, DispatchInput) {
    let mut engine = Engine::cpu(DeviceLimits::default()).unwrap();
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
        slots: vec![Slot::new(0, range.start, 0x100, false)],
        accesses: vec![Access {
            workgroup: 0,
            wave: 0,
            lane: 0,
            pc: 0x4000_0000_0040,
            kind: AccessKind::UntypedBuffer,
            op: Op::Load,
            address: None,
            slot: Some(0),
            offset: Some(0),
            index: None,
            size_bytes: 4,
            values: Vec::new(),
        }],
        ..DispatchInput::default()
    };
    (engine, input)
}

fn detached(c: &mut Criterion) {
    let mut g = c.benchmark_group("tap_detached");
    let noop = black_box(|| black_box(0u64));
    g.bench_function("noop_closure", |b| b.iter(noop));
    let tap = Tap::detached();
    g.bench_function("is_attached_then_noop_closure", |b| {
        b.iter(|| if !tap.is_attached() { noop() } else { 1 })
    });
    let (mut engine, input) = tiny();
    g.bench_function("engine_dispatch", |b| {
        b.iter(|| engine.dispatch(black_box(&input)).unwrap())
    });
    let mut tap = Tap::detached();
    g.bench_function("tap_dispatch_detached", |b| {
        b.iter(|| tap.dispatch(&mut engine, black_box(&input)).unwrap())
    });
    let mut listening =
        Tap::listen(TapConfig::listening_on("127.0.0.1:0".parse().unwrap())).unwrap();
    g.bench_function("tap_dispatch_listening_nobody_attached", |b| {
        b.iter(|| listening.dispatch(&mut engine, black_box(&input)).unwrap())
    });
    g.finish();
}

/// The demo target in a thread, as fast as it runs; `frames` counts its frames.
struct Target {
    addr: String,
    stop: Arc<AtomicBool>,
    dispatches: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn target(queue_capacity: usize) -> Target {
    let stop = Arc::new(AtomicBool::new(false));
    let dispatches = Arc::new(AtomicU64::new(0));
    let (tx, rx) = mpsc::channel();
    let thread = {
        let (stop, dispatches) = (Arc::clone(&stop), Arc::clone(&dispatches));
        std::thread::spawn(move || {
            let config = TapConfig {
                queue_capacity,
                ..TapConfig::listening_on("127.0.0.1:0".parse().unwrap())
            };
            let mut tap = Tap::listen(config).unwrap();
            tx.send(tap.local_addr().unwrap()).unwrap();
            let mut demo = Demo::new(DemoConfig::default()).unwrap();
            while !stop.load(Ordering::Relaxed) {
                let s = demo.frame(&mut tap).unwrap();
                dispatches.fetch_add(s.dispatches, Ordering::Relaxed);
            }
        })
    };
    let addr = rx.recv().unwrap().to_string();
    Target {
        addr,
        stop,
        dispatches,
        thread: Some(thread),
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn live(c: &mut Criterion) {
    let t = target(1024);
    let client = LiveClient::connect(&t.addr, None, Duration::from_secs(5)).unwrap();
    client.pause().unwrap();
    client
        .wait_for(Duration::from_secs(5), &mut Vec::new(), |m| {
            matches!(m, ToDebugger::Paused { .. })
        })
        .unwrap();
    let mut g = c.benchmark_group("live");
    g.sample_size(50).measurement_time(Duration::from_secs(4));
    g.bench_function("step_round_trip", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let t0 = Instant::now();
                client.step(1).unwrap();
                client
                    .wait_for(Duration::from_secs(5), &mut Vec::new(), |m| {
                        matches!(m, ToDebugger::Dispatch { .. })
                    })
                    .unwrap();
                total += t0.elapsed();
                client
                    .wait_for(Duration::from_secs(5), &mut Vec::new(), |m| {
                        matches!(m, ToDebugger::Paused { .. })
                    })
                    .unwrap();
            }
            total
        });
    });
    g.finish();
    drop(client);
}

fn streaming() {
    let secs: f64 = std::env::var("TAP_BENCH_STREAMING_S")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3.0);
    let phase = Duration::from_secs_f64(secs);
    let t = target(1024);
    std::thread::sleep(Duration::from_millis(300));
    let d0 = t.dispatches.load(Ordering::Relaxed);
    let t0 = Instant::now();
    std::thread::sleep(phase);
    let detached = (t.dispatches.load(Ordering::Relaxed) - d0) as f64 / t0.elapsed().as_secs_f64();

    let client = LiveClient::connect(&t.addr, None, Duration::from_secs(5)).unwrap();
    let d0 = t.dispatches.load(Ordering::Relaxed);
    let t0 = Instant::now();
    let (mut received, mut bytes_hint, mut dropped) = (0u64, 0u64, 0u64);
    while t0.elapsed() < phase {
        match client.recv_timeout(Duration::from_millis(100)) {
            Some(Incoming::Message(ToDebugger::Dispatch { report, .. })) => {
                received += 1;
                bytes_hint += report.accesses.len() as u64;
            }
            Some(Incoming::Message(ToDebugger::Stats(s))) => dropped = s.dropped,
            Some(Incoming::Disconnected { reason, .. }) => panic!("{reason}"),
            _ => {}
        }
    }
    let dt = t0.elapsed().as_secs_f64();
    let ran = (t.dispatches.load(Ordering::Relaxed) - d0) as f64 / dt;
    drop(client);
    println!("streaming, demo target as fast as it runs, one core for the game thread:");
    println!("  detached:              {detached:8.0} dispatches/s run");
    println!(
        "  attached (loopback):   {ran:8.0} dispatches/s run, {:8.0} received/s, {dropped} dropped ({:.0} accesses per dispatch)",
        received as f64 / dt,
        bytes_hint as f64 / received.max(1) as f64
    );
    println!("  attached / detached:   {:.2}", ran / detached.max(1.0));
}

/// What one dispatch costs to send: clone, encode, decode (generic and direct), bytes.
fn codec(c: &mut Criterion) {
    let mut tap = Tap::detached();
    let mut demo = Demo::new(DemoConfig::default()).unwrap();
    let mut biggest: Option<(DispatchInput, dispatchscope_core::DispatchReport)> = None;
    for _ in 0..20 {
        demo.frame_with(&mut tap, |i, r| {
            if biggest
                .as_ref()
                .is_none_or(|(_, b)| b.accesses.len() < r.accesses.len())
            {
                biggest = Some((i.clone(), r.clone()));
            }
        })
        .unwrap();
    }
    let (input, report) = biggest.unwrap();
    let message = ToDebugger::Dispatch {
        index: report.index,
        input: Box::new(input.clone()),
        report: Box::new(report.clone()),
        mapping_state: None,
        accesses_left_out: 0,
    };
    let frame = encode_frame(&message, MAX_FRAME_BYTES).unwrap();
    println!(
        "codec: the demo's largest dispatch ({} accesses) is a {} KiB frame",
        report.accesses.len(),
        frame.len() / 1024
    );
    let payload = &frame[4..];
    let mut g = c.benchmark_group("codec");
    g.bench_function("clone_input_and_report", |b| {
        b.iter(|| (black_box(&input).clone(), black_box(&report).clone()))
    });
    g.bench_function("encode_dispatch_frame", |b| {
        b.iter(|| encode_frame(black_box(&message), MAX_FRAME_BYTES).unwrap())
    });
    g.bench_function("decode_tagged_enum", |b| {
        b.iter(|| decode::<ToDebugger>(black_box(payload)).unwrap())
    });
    g.bench_function("decode_direct", |b| {
        b.iter(|| decode_to_debugger(black_box(payload)).unwrap())
    });
    // Version 2: one binary frame of this dispatch (its mapping state first, as a new session's).
    let v2 = |m: &ToDebugger| {
        let mut enc = Encoder::new(usize::MAX, MAX_FRAME_BYTES);
        let mut out = Vec::new();
        enc.push(m.clone(), &mut out, &mut |_, _| {}).unwrap();
        enc.finish_frame(&mut out);
        out
    };
    let v2_frame = v2(&message);
    println!(
        "codec: the same dispatch is a {} KiB binary (v2) frame",
        v2_frame.len() / 1024
    );
    g.bench_function("encode_v2_frame", |b| b.iter(|| v2(black_box(&message))));
    g.bench_function("decode_v2_frame", |b| {
        b.iter(|| {
            let mut out = Vec::new();
            Decoder::new()
                .decode(black_box(&v2_frame[4..]), &mut out)
                .unwrap();
            out
        })
    });
    g.bench_function("decode_untyped_json_value", |b| {
        b.iter(|| serde_json::from_slice::<serde_json::Value>(black_box(payload)).unwrap())
    });
    g.finish();
}

/// The tap's detached cost measured pairwise: blocks of bare `Engine::dispatch` and of the same
/// dispatch through a detached tap and through a listening tap, interleaved in rotating order on
/// one engine, so that drift and the engine's state cancel; the median per-dispatch difference.
fn paired() {
    let (mut engine, input) = tiny();
    let mut detached = Tap::detached();
    let mut listening =
        Tap::listen(TapConfig::listening_on("127.0.0.1:0".parse().unwrap())).unwrap();
    let (block, rounds) = (2000u32, 300usize);
    let mut bare = Vec::with_capacity(rounds);
    let mut d_detached = Vec::with_capacity(rounds);
    let mut d_listening = Vec::with_capacity(rounds);
    for r in 0..rounds {
        let mut t = [0f64; 3];
        for k in 0..3 {
            let which = (r + k) % 3;
            let t0 = Instant::now();
            for _ in 0..block {
                let out = match which {
                    0 => engine.dispatch(black_box(&input)),
                    1 => detached.dispatch(&mut engine, black_box(&input)),
                    _ => listening.dispatch(&mut engine, black_box(&input)),
                };
                black_box(out.unwrap());
            }
            t[which] = t0.elapsed().as_secs_f64() * 1e9 / f64::from(block);
        }
        bare.push(t[0]);
        d_detached.push(t[1] - t[0]);
        d_listening.push(t[2] - t[0]);
    }
    let q = |v: &mut Vec<f64>, p: f64| {
        v.sort_by(f64::total_cmp);
        v[((v.len() - 1) as f64 * p) as usize]
    };
    let bare_ns = q(&mut bare, 0.5);
    println!(
        "paired ({rounds} rounds of {block} dispatches each, rotating order): bare Engine::dispatch median {bare_ns:.0} ns"
    );
    for (name, v) in [
        ("detached tap", &mut d_detached),
        ("listening tap, nobody attached", &mut d_listening),
    ] {
        let (p25, p50, p75) = (q(v, 0.25), q(v, 0.5), q(v, 0.75));
        println!(
            "  {name:32} − bare: median {p50:+.1} ns per dispatch (interquartile {p25:+.1} … {p75:+.1} ns)"
        );
    }
}

/// Where `in_flight`'s buffers lie.
const FLIGHT_BASE: u64 = 0x2_0000_0000;

/// An emulator's frame with many dispatches in flight, attached and detached: per dispatch, the
/// tap's calls on the game thread (`before_prepare`, `after_prepare`, `after_complete`), each
/// timed around itself as a game would, in rounds of 64 prepared before any completes; the
/// attached tap's debugger is a client drained on another thread. Prints the medians and the
/// difference; `after_prepare` is the prepared message's own cost (one push onto the queue).
fn in_flight() {
    use dispatchscope_core::engine::{DeviceRun, RanOn};
    const ROUNDS: usize = 400;
    const IN_FLIGHT: usize = 64;
    let input = DispatchInput {
        program: 0x4000_03e1_9200,
        label: "run 305 update".into(),
        slots: vec![
            Slot::new(0, FLIGHT_BASE + 0x1000, 0xe40f, true),
            Slot::new(1, FLIGHT_BASE + 0xf400, 0x20, true),
        ],
        ..DispatchInput::default()
    };
    // (before_prepare, after_prepare, after_complete) a dispatch, in ns.
    let run = |tap: &mut Tap| -> Vec<[u64; 3]> {
        let mut engine = Engine::cpu(DeviceLimits::default()).unwrap();
        engine
            .apply(&Event::Reserve {
                range: ByteRange::new(FLIGHT_BASE, FLIGHT_BASE + 0x40000),
                readable: true,
                writable: true,
                committed: true,
                backing: Backing::Private,
                host_base: None,
            })
            .unwrap();
        let mut times = Vec::with_capacity(ROUNDS * IN_FLIGHT);
        let mut flights = Vec::with_capacity(IN_FLIGHT);
        for _ in 0..ROUNDS {
            for _ in 0..IN_FLIGHT {
                let t0 = Instant::now();
                tap.before_prepare(&engine, &input);
                let before = t0.elapsed().as_nanos() as u64;
                let p = engine.prepare(&input).unwrap();
                let t0 = Instant::now();
                tap.after_prepare(&p);
                let after = t0.elapsed().as_nanos() as u64;
                flights.push((p, before, after));
            }
            for (p, before, after) in flights.drain(..) {
                let index = p.index;
                let mut result = engine.complete(
                    &input,
                    p,
                    RanOn::Device(DeviceRun {
                        ran_on: Some("bench"),
                        ..DeviceRun::default()
                    }),
                );
                let t0 = Instant::now();
                tap.after_complete(&engine, &input, index, &mut result);
                let complete = t0.elapsed().as_nanos() as u64;
                black_box(result.unwrap());
                times.push([before, after, complete]);
            }
        }
        times
    };
    let median = |v: &mut Vec<u64>| {
        v.sort_unstable();
        v[v.len() / 2] as f64
    };
    let split = |t: &[[u64; 3]]| -> ([f64; 3], f64) {
        let mut each: Vec<Vec<u64>> = (0..3).map(|k| t.iter().map(|x| x[k]).collect()).collect();
        let mut sum: Vec<u64> = t.iter().map(|x| x.iter().sum()).collect();
        (
            [
                median(&mut each[0]),
                median(&mut each[1]),
                median(&mut each[2]),
            ],
            median(&mut sum),
        )
    };
    let detached = run(&mut Tap::detached());
    let (d_each, d_sum) = split(&detached[detached.len() / 4..]);
    // Attached: a debugger that drains everything on its own thread.
    let mut tap = Tap::listen(TapConfig::listening_on("127.0.0.1:0".parse().unwrap())).unwrap();
    let client = LiveClient::connect(
        &tap.local_addr().unwrap().to_string(),
        None,
        Duration::from_secs(5),
    )
    .unwrap();
    while !tap.is_attached() {
        std::thread::sleep(Duration::from_millis(2));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let (prepared, reports) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let drain = {
        let (stop, prepared, reports) = (
            Arc::clone(&stop),
            Arc::clone(&prepared),
            Arc::clone(&reports),
        );
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match client.recv_timeout(Duration::from_millis(20)) {
                    Some(Incoming::Message(ToDebugger::Prepared { .. })) => {
                        prepared.fetch_add(1, Ordering::Relaxed);
                    }
                    Some(Incoming::Message(ToDebugger::Dispatch { .. })) => {
                        reports.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {}
                }
            }
            client
        })
    };
    let attached = run(&mut tap);
    let figures = tap.handle().figures();
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    drop(drain.join().unwrap());
    let (a_each, a_sum) = split(&attached[attached.len() / 4..]);
    println!(
        "in flight ({ROUNDS} rounds of {IN_FLIGHT} prepared before any completes; medians of the last three quarters, ns a dispatch):"
    );
    for (k, name) in ["before_prepare", "after_prepare", "after_complete"]
        .iter()
        .enumerate()
    {
        println!(
            "  {name:15} detached {:7.0}  attached {:7.0}  attached over detached {:+7.0}",
            d_each[k],
            a_each[k],
            a_each[k] - d_each[k]
        );
    }
    println!(
        "  {:15} detached {d_sum:7.0}  attached {a_sum:7.0}  attached over detached {:+7.0} (goal ≤ 1,000)",
        "the three",
        a_sum - d_sum
    );
    println!(
        "  the debugger received {} prepared and {} reports of {} dispatches; the target dropped {}",
        prepared.load(Ordering::Relaxed),
        reports.load(Ordering::Relaxed),
        attached.len(),
        figures.dropped
    );
}

fn main() {
    if std::env::var("TAP_BENCH_IN_FLIGHT_ONLY").as_deref() == Ok("1") {
        in_flight();
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    detached(&mut c);
    codec(&mut c);
    live(&mut c);
    c.final_summary();
    paired();
    in_flight();
    if std::env::var("TAP_BENCH_STREAMING").as_deref() != Ok("0") {
        streaming();
    }
}
