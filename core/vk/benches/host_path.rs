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
use dispatchscope_core::input::{Backing, DeviceLimits, DispatchInput, Event, Reason, Slot};
use dispatchscope_core::{CpuBackend, Engine};
use dispatchscope_vk::host_pages::{self, HostCalls, MapsSource, ProcessHost};
use dispatchscope_vk::{Context, ContextOptions, VulkanBackend};

/// The emulator: writes land with a plain copy (its write-watch would note them).
struct Emulator;

impl HostCalls for Emulator {
    fn write(&self, host_addr: u64, bytes: &[u8]) -> Result<(), String> {
        // SAFETY: the engine writes only into the benchmark's own read-write mapping.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), host_addr as *mut u8, bytes.len());
        }
        Ok(())
    }
    fn commit(&self, _: u64, _: u64) -> Result<(), String> {
        Ok(())
    }
    fn release_guards(&self, _: u64, _: u64) -> Result<(), String> {
        Ok(())
    }
    fn hand_off(&self, _: ByteRange, _: u64) -> Result<(), String> {
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
    let mut times = Vec::with_capacity(rounds);
    for _ in 0..rounds {
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

    // O8's masked write-back of a 1080p output (every word) against a plain copy.
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
    let masks = vec![1u8; out_bytes];
    let wb_rounds = 21;
    let t_wb = prepare_complete(&mut eo, &holder, wb_rounds, Some((&data, &masks)));
    let mut copies = Vec::new();
    let mut dst = vec![0u8; out_bytes];
    for _ in 0..wb_rounds {
        let t = Instant::now();
        dst.copy_from_slice(&data);
        copies.push(t.elapsed());
        std::hint::black_box(&dst);
    }
    let t_copy = median(copies);
    println!(
        "O8 masked write-back of a 1080p holder (every word, through the emulator's write): {:.0} µs; a plain copy of the same bytes: {:.0} µs; ratio {:.2}",
        us(t_wb),
        us(t_copy),
        t_wb.as_secs_f64() / t_copy.as_secs_f64()
    );
    drop(eo);
    drop(out);

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
    let it = ev.backend().import_time();
    println!(
        "Vulkan imports in host mode: {} zero-copy, {} guest bytes copied into or out of mirrors",
        it.zero_copy, it.bytes_copied
    );
    drop(ev);

    // 1 GiB: resident memory and a remap.
    let rss0 = vm_rss_kib();
    let gib = Pages::map(1 << 30, true);
    let rss1 = vm_rss_kib();
    let mut eg = Engine::with_host(
        DeviceLimits::default(),
        VulkanBackend::on(Arc::clone(&ctx)).unwrap(),
        host(),
    )
    .unwrap();
    eg.apply(&reserve(&gib, GUEST + 0x1_0000_0000)).unwrap();
    let t = Instant::now();
    let p = eg.prepare(&device_input()).unwrap();
    let t_map = t.elapsed();
    eg.complete(&device_input(), p, RanOn::Device(DeviceRun::default()))
        .unwrap();
    let rss2 = vm_rss_kib();
    // A remap: the guest makes the run unreadable and readable again (the generation moves twice).
    let whole = ByteRange::new(GUEST + 0x1_0000_0000, GUEST + 0x1_4000_0000);
    let mut remaps = Vec::new();
    for _ in 0..5 {
        eg.apply(&Event::Protect {
            range: whole,
            readable: false,
            writable: false,
        })
        .unwrap();
        eg.apply(&Event::Protect {
            range: whole,
            readable: true,
            writable: true,
        })
        .unwrap();
        let t = Instant::now();
        let p = eg.prepare(&device_input()).unwrap();
        remaps.push(t.elapsed());
        eg.complete(&device_input(), p, RanOn::Device(DeviceRun::default()))
            .unwrap();
    }
    println!(
        "1 GiB of guest pages: first map (check, zero-copy import, table of {} chunks) {:.1} ms; a remap {:.1} ms",
        eg.table().map_or(0, |t| t.len()),
        t_map.as_secs_f64() * 1e3,
        median(remaps).as_secs_f64() * 1e3
    );
    println!(
        "resident memory: before {} MiB; 1 GiB touched {} MiB; imported and a table built {} MiB (dispatchscope's and the driver's share: {} MiB)",
        rss0 / 1024,
        rss1 / 1024,
        rss2 / 1024,
        rss2.saturating_sub(rss1) / 1024
    );
    drop(eg);
    drop(gib);
}
