//! Issue 29's figures: the engine in the emulator's own dispatch path, on the emulator's own pages.
//!
//! - the engine's CPU time on the emulator's thread, prepare plus complete, detached: a bound
//!   dispatch of 8 slots, and a device-addressed dispatch with nothing changed (on the CPU
//!   reference's backend and on Vulkan, whose mark words are zeroed and read back);
//! - guest bytes dispatchscope copies per dispatch in host mode (mirrors, copies back, reads and
//!   writes through the emulator), counted by the engine itself;
//! - the real-mapping check per import (`PROCMAP_QUERY` and the text of `/proc/self/maps`), and a
//!   1 GiB remap (1 GiB of the emulator's pages imported zero-copy, then released);
//! - O8's masked write-back of a 1080p output holder through the emulator's write against a plain
//!   copy of the same bytes, in the same process;
//! - resident memory of a host with 1 GiB of guest memory mapped, touched and imported.
//!
//! `cargo bench -p dispatchscope-vk --bench host_path` (`-- --rounds N`, default 2001 timed
//! dispatches a figure; `-- --no-vulkan` leaves the device out).

#![allow(clippy::print_stdout, reason = "a benchmark prints its figures")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    unsafe_code,
    reason = "a benchmark stops on a failed setup, and maps its own pages as an emulator does"
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use dispatchscope_core::addr::ByteRange;
use dispatchscope_core::backend::Backend;
use dispatchscope_core::engine::{DeviceRun, HolderRun, RanOn};
use dispatchscope_core::host::HostRun;
use dispatchscope_core::input::{
    Access, AccessKind, Backing, DeviceLimits, DispatchInput, Event, Op, Reason, Slot,
};
use dispatchscope_core::{CpuBackend, Engine};
use dispatchscope_vk::host_pages::{self, HostCallError, HostCalls, MapsSource, ProcessHost};
use dispatchscope_vk::{Context, ContextOptions, VulkanBackend};

/// The emulator: writes land with a plain copy (its write-watch would note them); O8's runs come
/// in batches, each run a copy; a commit touches nothing (the pages fault in on first use), a
/// decommit is `MADV_DONTNEED` (done by the bench itself, as the emulator would before its event).
struct Emulator;

/// A plain copy of `bytes` to `host_addr`, as the emulator's write does it.
fn copy_to(host_addr: u64, bytes: &[u8]) {
    // SAFETY: the engine writes only into the benchmark's own read-write mapping.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), host_addr as *mut u8, bytes.len());
    }
}

impl HostCalls for Emulator {
    fn write(&self, host_addr: u64, bytes: &[u8]) -> Result<(), HostCallError> {
        copy_to(host_addr, bytes);
        Ok(())
    }
    fn write_runs(&self, runs: &[HostRun<'_>]) -> Result<(), (usize, HostCallError)> {
        for r in runs {
            copy_to(r.host_addr, r.bytes);
        }
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

struct Pages {
    ptr: *mut u8,
    bytes: usize,
}

impl Pages {
    fn map(bytes: usize, touch: bool) -> Self {
        // SAFETY: a fresh anonymous private mapping.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED);
        let p = Self {
            ptr: ptr.cast(),
            bytes,
        };
        if touch {
            for off in (0..bytes).step_by(4096) {
                // SAFETY: inside the mapping.
                unsafe { p.ptr.add(off).write_volatile(1) };
            }
        }
        p
    }
    fn addr(&self) -> u64 {
        self.ptr as u64
    }
}

impl Drop for Pages {
    fn drop(&mut self) {
        // SAFETY: the mapping this made.
        unsafe { libc::munmap(self.ptr.cast(), self.bytes) };
    }
}

const GUEST: u64 = 0x20_0000_0000;

fn reserve(pages: &Pages, guest: u64) -> Event {
    Event::Reserve {
        range: ByteRange::new(guest, guest + pages.bytes as u64),
        readable: true,
        writable: true,
        committed: true,
        backing: Backing::Private,
        host_base: Some(pages.addr()),
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Median of `rounds` prepare + complete of `input`, each completed as the emulator would.
fn prepare_complete<B: Backend>(
    e: &mut Engine<B>,
    input: &DispatchInput,
    rounds: usize,
    holder: Option<(&[u8], &[u8])>,
) -> Duration {
    prepare_complete_cold(e, input, rounds, holder, false)
}

/// [`prepare_complete`], with the CPU's caches emptied before each round where `cold` (the
/// device's holder bytes reach host memory from the device, not from the CPU's cache).
fn prepare_complete_cold<B: Backend>(
    e: &mut Engine<B>,
    input: &DispatchInput,
    rounds: usize,
    holder: Option<(&[u8], &[u8])>,
    cold: bool,
) -> Duration {
    let mut times = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        if cold {
            evict_caches();
        }
        let t = Instant::now();
        let p = e.prepare(input).unwrap();
        let holders = holder
            .map(|(data, masks)| {
                vec![HolderRun {
                    slot: 0,
                    data,
                    masks,
                }]
            })
            .unwrap_or_default();
        let r = e
            .complete(
                input,
                p,
                RanOn::Device(DeviceRun {
                    marks: None,
                    holders,
                    ran_on: None,
                    instrumentation: None,
                }),
            )
            .unwrap();
        times.push(t.elapsed());
        std::hint::black_box(r);
    }
    median(times)
}

/// Writes and reads 96 MiB, three times the largest last-level cache here, so that nothing a
/// measured round touches is in the CPU's caches when it starts.
fn evict_caches() {
    use std::sync::OnceLock;
    static SCRATCH: OnceLock<std::sync::Mutex<Vec<u64>>> = OnceLock::new();
    let scratch = SCRATCH.get_or_init(|| std::sync::Mutex::new(vec![0u64; 96 << 17]));
    let mut s = scratch.lock().unwrap();
    let mut acc = 0u64;
    for (i, x) in s.iter_mut().enumerate() {
        *x = x.wrapping_add(i as u64);
        acc ^= *x;
    }
    std::hint::black_box(acc);
}

fn bound_8(guest: u64) -> DispatchInput {
    // Eight slots: two sets of overlapping written ranges (run 305's shape twice), four alone.
    let slots = vec![
        Slot::new(0, guest, 0xe40f, true),
        Slot::new(1, guest + 0xe400, 0x20, true),
        Slot::new(2, guest + 0x10000, 0x94, false),
        Slot::new(3, guest + 0x10040, 4, true),
        Slot::new(4, guest + 0x20000, 0x1000, false),
        Slot::new(5, guest + 0x30000, 0x1000, true),
        Slot::new(6, guest + 0x40000, 0x100, false),
        Slot::new(7, guest + 0x50000, 0x100, true),
    ];
    DispatchInput {
        program: 0x4000_03e1_9200,
        slots,
        ..DispatchInput::default()
    }
}

fn device_input() -> DispatchInput {
    DispatchInput {
        program: 0x7400_5b85_4a00,
        reasons: vec![Reason::D753],
        ..DispatchInput::default()
    }
}

fn vm_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rounds = args
        .iter()
        .position(|a| a == "--rounds")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(2001usize);
    let vulkan = !args.iter().any(|a| a == "--no-vulkan");
    let host = || Arc::new(ProcessHost::new(Emulator));

    println!("## issue 29: the host path ({rounds} rounds a figure, medians)");
    let pages = Pages::map(0x10_0000, true);

    // Bound, 8 slots, CPU reference backend (the emulator's device runs the dispatch).
    let mut e = Engine::with_host(DeviceLimits::default(), CpuBackend::new(), host()).unwrap();
    e.apply(&reserve(&pages, GUEST)).unwrap();
    let bound = bound_8(GUEST);
    let t_bound = prepare_complete(&mut e, &bound, rounds, None);
    println!(
        "prepare + complete, bound, 8 slots (2 sets), no write-back: {:.2} µs",
        us(t_bound)
    );
    let data = vec![0u8; 0xe420];
    let mut masks = vec![0u8; 0xe420];
    masks[4 * 0x3900] = 1;
    let t_bound_wb = prepare_complete(&mut e, &bound, rounds, Some((&data, &masks)));
    println!(
        "prepare + complete, bound, 8 slots, one word written back: {:.2} µs",
        us(t_bound_wb)
    );
    let before = e.memory().host_traffic();
    let d = device_input();
    e.dispatch(&d).unwrap();
    let t_dev_cpu = prepare_complete(&mut e, &d, rounds, None);
    println!(
        "prepare + complete, device-addressed, nothing changed (CPU reference's table): {:.2} µs",
        us(t_dev_cpu)
    );
    let after = e.memory().host_traffic();
    println!(
        "guest bytes read / written through the emulator over {} device-addressed dispatches: {} / {}",
        rounds + 1,
        after.bytes_read - before.bytes_read,
        after.bytes_written - before.bytes_written
    );

    // The real-mapping check.
    let n = rounds.min(20001);
    for (name, source) in [
        ("PROCMAP_QUERY", MapsSource::Query),
        ("/proc/self/maps text", MapsSource::Text),
    ] {
        if source == MapsSource::Query && host_pages::preferred_source() != MapsSource::Query {
            println!("real-mapping check by {name}: not on this kernel");
            continue;
        }
        let mut times = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            let m = host_pages::real_mappings_by(source, pages.addr(), pages.bytes as u64).unwrap();
            times.push(t.elapsed());
            std::hint::black_box(m);
        }
        let lines = std::fs::read_to_string("/proc/self/maps")
            .map(|s| s.lines().count())
            .unwrap_or(0);
        println!(
            "real-mapping check of one piece by {name}: {:.2} µs ({lines} mappings in the process)",
            us(median(times))
        );
    }

    // O8's masked write-back of a 1080p output against a plain copy of the same written runs:
    // every word (one run), and every other word (a million runs of one word).
    let out_bytes = 1920 * 1080 * 4;
    let out = Pages::map(out_bytes, true);
    let mut eo = Engine::with_host(DeviceLimits::default(), CpuBackend::new(), host()).unwrap();
    eo.apply(&reserve(&out, GUEST + 0x1000_0000)).unwrap();
    let holder = DispatchInput {
        program: 0x4000_0000_3000,
        slots: vec![Slot::new(0, GUEST + 0x1000_0000, out_bytes as u64, true)],
        ..DispatchInput::default()
    };
    let data = vec![7u8; out_bytes];
    let wb_rounds = 21;
    let shapes = [("every word", 1usize), ("every other word", 2)];
    let only = args
        .iter()
        .position(|a| a == "--o8-shape")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse::<usize>().ok());
    for (shape, every) in shapes.into_iter().filter(|s| only.is_none_or(|e| e == s.1)) {
        let mut masks = vec![0u8; out_bytes];
        for w in (0..out_bytes / 4).step_by(every) {
            masks[4 * w] = 1;
        }
        let written_before = eo.memory().host_traffic().bytes_written;
        let t_wb = prepare_complete_cold(&mut eo, &holder, wb_rounds, Some((&data, &masks)), true);
        let written =
            (eo.memory().host_traffic().bytes_written - written_before) / wb_rounds as u64;
        // The baseline: the same runs, copied one by one into the same pages.
        let runs: Vec<(usize, usize)> = if every == 1 {
            vec![(0, out_bytes)]
        } else {
            (0..out_bytes / 4)
                .step_by(every)
                .map(|w| (4 * w, 4))
                .collect()
        };
        let mut copies = Vec::new();
        for _ in 0..wb_rounds {
            evict_caches();
            let t = Instant::now();
            for &(at, n) in &runs {
                copy_to(out.addr() + at as u64, &data[at..at + n]);
            }
            copies.push(t.elapsed());
            std::hint::black_box(&out);
        }
        let t_copy = median(copies);
        println!(
            "O8 write-back of a 1080p holder, {shape} ({} runs, {written} bytes written through the emulator of {out_bytes}), caches emptied before each round: {:.0} µs; a plain copy of the same runs: {:.0} µs; ratio {:.2}",
            runs.len(),
            us(t_wb),
            us(t_copy),
            t_wb.as_secs_f64() / t_copy.as_secs_f64()
        );
    }
    drop(eo);
    drop(out);
    if args.iter().any(|a| a == "--o8-only") {
        return;
    }

    if !vulkan {
        return;
    }
    let ctx = match Context::new(&ContextOptions::default()) {
        Ok(c) => c,
        Err(e) => {
            println!("no Vulkan: {e}");
            return;
        }
    };
    println!("device: {}", ctx.info().name);
    let mut ev = Engine::with_host(
        DeviceLimits::default(),
        VulkanBackend::on(Arc::clone(&ctx)).unwrap(),
        host(),
    )
    .unwrap();
    ev.apply(&reserve(&pages, GUEST)).unwrap();
    ev.prepare(&device_input())
        .and_then(|p| ev.complete(&device_input(), p, RanOn::Device(DeviceRun::default())))
        .unwrap();
    let t_dev_vk = prepare_complete(&mut ev, &device_input(), rounds, None);
    println!(
        "prepare + complete, device-addressed, nothing changed (Vulkan: mark words zeroed and read): {:.2} µs",
        us(t_dev_vk)
    );

    // What dispatchscope copies of the guest's bytes, on dispatches that move some: the engine's
    // own device runs a device-addressed dispatch of loads and stores through zero-copy imports,
    // and a bound one whose holder it must upload and write back; the emulator's own dispatch
    // (prepare, its device, complete) hands back a holder of which the device wrote one word in 8.
    let n = rounds.min(501);
    let dev = device_accesses(GUEST);
    let bound = bound_accesses(GUEST);
    let holder_bytes = 0x4000usize;
    let emu_data = vec![9u8; holder_bytes];
    let mut emu_masks = vec![0u8; holder_bytes];
    for w in (0..holder_bytes / 4).step_by(8) {
        emu_masks[4 * w] = 1;
    }
    let emu_bound = DispatchInput {
        program: 0x4000_0000_4000,
        slots: vec![Slot::new(0, GUEST + 0x8_0000, holder_bytes as u64, true)],
        ..DispatchInput::default()
    };
    for (what, words_moved) in [
        (
            "device-addressed, 64 loads and 64 stores, the engine's device",
            128usize,
        ),
        (
            "bound, a 16 KiB holder, 64 loads and 64 stores, the engine's device",
            128,
        ),
        (
            "bound, a 16 KiB holder, one word in 8 written, the emulator's device",
            holder_bytes / 32,
        ),
    ] {
        let t0 = ev.memory().host_traffic();
        let i0 = ev.backend().import_time();
        for _ in 0..n {
            match words_moved {
                _ if what.starts_with("device") => {
                    std::hint::black_box(ev.dispatch(&dev).unwrap());
                }
                _ if what.ends_with("engine's device") => {
                    std::hint::black_box(ev.dispatch(&bound).unwrap());
                }
                _ => {
                    prepare_complete(&mut ev, &emu_bound, 1, Some((&emu_data, &emu_masks)));
                }
            }
        }
        let t1 = ev.memory().host_traffic();
        let i1 = ev.backend().import_time();
        let n64 = n as u64;
        println!(
            "guest bytes a dispatch, {what} ({} words stored or loaded): read through the emulator {}, written through it {}, copied into or out of mirrors {}",
            words_moved,
            (t1.bytes_read - t0.bytes_read) / n64,
            (t1.bytes_written - t0.bytes_written) / n64,
            (i1.bytes_copied - i0.bytes_copied) / n64
        );
    }
    let it = ev.backend().import_time();
    println!(
        "Vulkan imports in host mode: {} zero-copy, {} guest bytes copied into or out of mirrors",
        it.zero_copy, it.bytes_copied
    );
    drop(ev);

    // 1 GiB: resident memory, a remap after a real decommit and commit, and the checked mode.
    let rss0 = vm_rss_kib();
    let gib = Pages::map(1 << 30, true);
    let rss1 = vm_rss_kib();
    let mut eg = Engine::with_host(
        DeviceLimits::default(),
        VulkanBackend::on(Arc::clone(&ctx)).unwrap(),
        host(),
    )
    .unwrap();
    let base = GUEST + 0x1_0000_0000;
    eg.apply(&reserve(&gib, base)).unwrap();
    let t = Instant::now();
    let p = eg.prepare(&device_input()).unwrap();
    let t_map = t.elapsed();
    eg.complete(&device_input(), p, RanOn::Device(DeviceRun::default()))
        .unwrap();
    let rss2 = vm_rss_kib();
    println!(
        "1 GiB of guest pages: first map (check, zero-copy import, table of {} chunks) {:.1} ms",
        eg.table().map_or(0, |t| t.len()),
        t_map.as_secs_f64() * 1e3,
    );
    // A real decommit (the emulator drops the pages: MADV_DONTNEED) and commit of the whole run:
    // the mapping is dropped before the memory goes (M4), the commit's revisit maps it again
    // (M5), and the driver imports pages that fault in anew.
    let whole = ByteRange::new(base, base + (1 << 30));
    let mut remaps = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        eg.apply(&Event::Decommit { range: whole }).unwrap();
        // SAFETY: the bench's own mapping; nothing reads it until it is committed again.
        unsafe { libc::madvise(gib.ptr.cast(), gib.bytes, libc::MADV_DONTNEED) };
        eg.apply(&Event::Commit { range: whole }).unwrap();
        let p = eg.prepare(&device_input()).unwrap();
        eg.complete(&device_input(), p, RanOn::Device(DeviceRun::default()))
            .unwrap();
        remaps.push(t.elapsed());
    }
    println!(
        "1 GiB decommitted and committed again, then a dispatch (the mapping dropped, imported again, the table brought up): {:.1} ms",
        median(remaps).as_secs_f64() * 1e3
    );
    println!(
        "resident memory: before {} MiB; 1 GiB touched {} MiB; imported and a table built {} MiB (dispatchscope's and the driver's share: {} MiB)",
        rss0 / 1024,
        rss1 / 1024,
        rss2 / 1024,
        rss2.saturating_sub(rss1) / 1024
    );
    // The checked mode's cost per prepare: the real mapping of every imported piece read again.
    for pieces in [1u64, 1024] {
        if pieces > 1 {
            // One page in every 1 MiB made unreadable: 1,024 readable runs, 1,024 pieces.
            for k in 0..pieces {
                let at = base + k * (1 << 20);
                eg.apply(&Event::Protect {
                    range: ByteRange::new(at, at + 0x1000),
                    readable: false,
                    writable: false,
                })
                .unwrap();
            }
        }
        eg.set_checked(false);
        let off = prepare_complete(&mut eg, &device_input(), rounds, None);
        eg.set_checked(true);
        let on = prepare_complete(&mut eg, &device_input(), rounds, None);
        eg.set_checked(false);
        println!(
            "the checked mode, 1 GiB imported in {} pieces: prepare + complete {:.2} µs off, {:.2} µs on: {:.2} µs a prepare, {:.3} µs a piece",
            eg.mappings().pieces().count(),
            us(off),
            us(on),
            us(on) - us(off),
            (us(on) - us(off)) / pieces as f64
        );
    }
    drop(eg);
    drop(gib);
}

/// 64 loads and 64 stores by device address over the first 256 KiB of `guest`.
fn device_accesses(guest: u64) -> DispatchInput {
    let mut accesses = Vec::new();
    for i in 0..64u64 {
        let mut load = Access::new(AccessKind::Global, Op::Load, 4);
        load.address = Some(guest + i * 0x1000);
        let mut store = Access::new(AccessKind::Global, Op::Store, 4);
        store.address = Some(guest + i * 0x1000 + 0x800);
        store.values = vec![i as u32];
        accesses.extend([load, store]);
    }
    DispatchInput {
        accesses,
        ..device_input()
    }
}

/// A bound dispatch over a 16 KiB holder at `guest + 0x4_0000`: 64 loads and 64 stores.
fn bound_accesses(guest: u64) -> DispatchInput {
    let mut accesses = Vec::new();
    for i in 0..64u64 {
        let mut load = Access::new(AccessKind::UntypedBuffer, Op::Load, 4);
        load.slot = Some(0);
        load.offset = Some(i * 0x100);
        let mut store = Access::new(AccessKind::UntypedBuffer, Op::Store, 4);
        store.slot = Some(0);
        store.offset = Some(i * 0x100 + 0x80);
        store.values = vec![i as u32];
        accesses.extend([load, store]);
    }
    DispatchInput {
        program: 0x4000_0000_5000,
        slots: vec![Slot::new(0, guest + 0x4_0000, 0x4000, true)],
        accesses,
        ..DispatchInput::default()
    }
}
