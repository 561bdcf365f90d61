//! Issue 14's figures in one run: the full-screen traversal pass at each size in its three variants
//! (raw, helper, instrumented; GPU timestamps; every variant's image checked against the host's
//! pass), the instrumented report section's JSON size, the engine's CPU time per instrumented
//! dispatch (the device's run left out), O8's masked write-back of the output holder against a
//! plain copy of the same bytes, and the lookup microbenchmark at 2^20 invocations.
//!
//! `cargo bench -p dispatchscope-vk --features bench --bench vk_pass` runs 1920×1080 and
//! 3840×2160 (a GPU's sizes); `-- --sizes 256x256` picks others; `-- --no-lookup` leaves the
//! microbenchmark out; `-- --repeats N` sets the timed rounds (at most 9, after one warm-up round);
//! `-- --memory device-local` (or `imported`, `both`: the default) where guest memory lies;
//! `-- --no-ablation` leaves issue 42's changes-each-alone out, `-- --issue30` adds issue 30's
//! shapes of the helper.
//!
//! Issue 42's figures, at each size and memory: every build interleaved in one submission (issue
//! 30's instrumented pass beside issue 42's, the capture's second dispatch over the selected
//! lanes' workgroups, the helper's register changes each alone, the instrumented pass's changes
//! each undone alone), then the lines `issue 42 …` with instrumented / helper, helper / raw and
//! the instrumented pass's milliseconds against the issue's goals. Every build's image is
//! checked against the host's pass and every complete instrumented build's site counts against
//! the host's.

#![allow(clippy::print_stdout, reason = "a benchmark prints its figures")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark stops on a failed setup"
)]

use std::time::{Duration, Instant};

use dispatchscope_core::instrument::{Grid, InstrumentLayout, LaneSelection, Readback};
use dispatchscope_vk::bench::{LayoutConfig, LookupConfig, lookup_bench};
use dispatchscope_vk::pass::scene::{self, Scene, SceneConfig};
use dispatchscope_vk::pass::{
    Build, DevicePass, GuestMemoryOn, HostSide, MAX_BACK_TO_BACK, PassOptions, helper_shapes,
    instrumented_shapes, masked_write_back, run_frame,
};
use dispatchscope_vk::spirv::library::{Shape, Variant};
use dispatchscope_vk::spirv::traversal::{Workload, site};
use dispatchscope_vk::{Context, ContextOptions};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// The median of `n` timed calls of `f`.
fn time_n(n: usize, mut f: impl FnMut()) -> Duration {
    median(
        (0..n)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed()
            })
            .collect(),
    )
}

fn image_of(holder: &[u8], n: usize) -> Vec<(u32, u32)> {
    holder
        .chunks_exact(8)
        .take(n)
        .map(|c| {
            (
                u32::from_le_bytes([c[0], c[1], c[2], c[3]]),
                u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
            )
        })
        .collect()
}

/// What the bench measures besides its sizes.
#[derive(Clone)]
struct Plan {
    repeats: usize,
    frames_only: bool,
    /// The flat table's span of address bits (`None`: fitted to the scene).
    flat_bits: Option<u32>,
    /// Issue 42's changes, each alone, beside the shipped builds.
    ablation: bool,
    /// Issue 30's shapes of the helper (its path before, the first probe unrolled), measured
    /// then; off unless asked.
    issue30: bool,
    /// Where guest memory lies, each in its turn.
    memories: Vec<GuestMemoryOn>,
}

/// The builds measured in one submission: every variant over both workloads (issue 30's
/// instrumented pass beside issue 42's, and issue 42's capture dispatch), the header form over
/// the loads, and (`ablation`) issue 42's changes each alone; (`issue30`) issue 30's shapes.
fn builds(plan: &Plan) -> Vec<Build> {
    let mut b = Vec::new();
    for workload in Workload::ALL {
        for v in [Variant::Raw, Variant::Helper, Variant::Flat] {
            b.push(Build::of(v).on(workload));
        }
        if workload == Workload::Loads {
            b.push(Build::of(Variant::Header));
        }
        if plan.ablation {
            for (_, shape) in helper_shapes() {
                b.push(Build::of(Variant::Helper).on(workload).shaped(shape));
            }
            for (_, shape) in instrumented_shapes() {
                b.push(Build::of(Variant::Instrumented).on(workload).shaped(shape));
            }
        }
        if plan.issue30 {
            for shape in [
                Shape::BEFORE,
                Shape {
                    first_probe_unrolled: true,
                    ..Shape::BEFORE
                },
                Shape {
                    fast_path: true,
                    first_probe_unrolled: true,
                    ..Shape::BEFORE
                },
            ] {
                b.push(Build::of(Variant::Helper).on(workload).shaped(shape));
            }
            b.push(Build::of(Variant::Flat).on(workload).shaped(Shape::BEFORE));
        }
        b.push(Build::of(Variant::Capture).on(workload));
        b.push(
            Build::of(Variant::Instrumented)
                .on(workload)
                .shaped(Shape::ISSUE_30),
        );
        b.push(Build::of(Variant::Instrumented).on(workload));
    }
    b
}

/// Every site's accesses and escapes in the host's own pass (the same for both workloads: the
/// arithmetic changes no branch of the traversal).
fn host_counts(scene: &Scene, w: u32, h: u32) -> Vec<(u64, u64)> {
    let mut want = vec![(0u64, 0u64); site::COUNT as usize];
    for y in 0..h {
        for x in 0..w {
            let tr = scene.trace(x, y);
            for (k, wk) in want.iter_mut().enumerate() {
                wk.0 += u64::from(tr.accesses[k]);
                wk.1 += u64::from(tr.escapes[k]);
            }
        }
    }
    want
}

fn pass_at(ctx: &std::sync::Arc<Context>, w: u32, h: u32, plan: &Plan) {
    let (repeats, frames_only) = (plan.repeats, plan.frames_only);
    let grid = Grid::new(w, h).expect("a size of whole 8×8 workgroups");
    let scene = Scene::new(SceneConfig::default(), grid).unwrap();
    let t = Instant::now();
    let expected = scene.expected_image();
    let host_pass = t.elapsed();
    let mut host = HostSide::with_limits(scene.clone(), ctx.limits()).unwrap();
    let layout = InstrumentLayout::with_sites(site::COUNT);
    // Lane 0 of the first escaping lane-0 pixel's workgroup and its neighbour.
    let sel = (0..h)
        .step_by(8)
        .flat_map(|y| (0..w).step_by(8).map(move |x| [x, y]))
        .find(|&[x, y]| scene.trace(x, y).escapes.iter().any(|&e| e > 0))
        .map_or(LaneSelection::none(), |[x, y]| {
            LaneSelection::rect(x, y, x + 2, y + 1)
        });
    println!(
        "traversal {w}×{h}: {} lanes, {} workgroups, holder {:.1} MiB, the host's own pass {:.0} ms",
        u64::from(w) * u64::from(h),
        grid.workgroups(),
        scene.holder_bytes() as f64 / f64::from(1u32 << 20),
        ms(host_pass)
    );
    let highest = scene
        .regions
        .iter()
        .map(|r| r.range.end - 1)
        .max()
        .unwrap_or_default();
    println!(
        "  the scene's highest guest address {highest:#x}: {} a 40-bit flat table",
        if highest >> 40 == 0 { "inside" } else { "past" }
    );
    // The translated workload's image, once for both memories (seconds at 4K on the host).
    let expected_translated = if frames_only {
        Vec::new()
    } else {
        scene.expected_image_of(Workload::Translated)
    };
    // Every site's accesses and escapes in the host's pass, what each instrumented build's
    // counts are checked against.
    let t = Instant::now();
    let want = if frames_only {
        Vec::new()
    } else {
        host_counts(&scene, w, h)
    };
    let counted_in = t.elapsed();
    let mut last = None;
    for &on in &plan.memories {
        let mut options = PassOptions::new(false, on);
        if !frames_only {
            options.builds = builds(plan);
        }
        options.flat_address_bits = plan.flat_bits;
        let t = Instant::now();
        let pass = DevicePass::with_options(ctx, &host, layout, &options).unwrap();
        println!(
            "  {on:?}: {} pipelines made in {:.0} ms; chunk table {} B, flat page table {} B",
            options.builds.len(),
            ms(t.elapsed()),
            host.engine.table().map_or(0, |t| 16 * t.capacity()),
            pass.flat_table_bytes()
        );
        for st in pass.pipeline_stats() {
            let driver: Vec<String> = st
                .driver
                .iter()
                .map(|(name, value)| format!("{name} {value}"))
                .collect();
            println!(
                "    module {:<48} {:>8} B, pipeline made in {:>8.1} ms; {}",
                st.build.name(),
                st.module_bytes,
                ms(st.creation),
                driver.join(", ")
            );
        }
        last = Some(if frames_only {
            pass
        } else {
            let against = Against {
                host: &host,
                scene: &scene,
                expected: [&expected, &expected_translated],
                counts: &want,
            };
            variants(pass, on, &options.builds, &sel, &against, repeats, grid)
        });
    }
    let Some(mut pass) = last else {
        return;
    };
    // Issue 29: the emulator's frame as `dispatchscope pass` runs it: prepare, the device's run,
    // complete (O8 from the device's holder); the host's time around the device's.
    let input = host.frame_input();
    let mut around = Vec::new();
    let mut walls = Vec::new();
    let mut named = String::new();
    let mut engine_parts = Vec::new();
    for _ in 0..repeats.max(3) {
        let HostSide {
            engine,
            scene: sc,
            slots,
            ..
        } = &mut host;
        let t = Instant::now();
        let f = run_frame(
            engine,
            &input,
            slots,
            sc,
            &mut pass,
            Variant::Helper,
            &LaneSelection::none(),
        )
        .unwrap();
        let wall = t.elapsed();
        walls.push(wall);
        around.push(wall.saturating_sub(f.run.device));
        named = format!("{} ({})", f.report.backend, f.report.device.name);
        engine_parts.push((f.prepare, f.complete, wall));
    }
    println!(
        "  a frame through prepare, the device, complete (helper): wall {:.3} ms, the host around the device's run {:.3} ms (medians); the report names {named}",
        ms(median(walls)),
        ms(median(around))
    );
    for (p, c, w) in &engine_parts {
        println!(
            "    prepare {:.3} ms, complete {:.3} ms, the device's run with its host side {:.3} ms",
            ms(*p),
            ms(*c),
            ms(w.saturating_sub(*p + *c))
        );
    }
    if frames_only {
        return;
    }
    // One instrumented run alone, for the buffers the section is read from.
    pass.run(Variant::Instrumented, &sel, scene::CANARY_AT, &scene)
        .unwrap();
    // The section as the emulator's thread builds it once the fence is signalled: the words read
    // back and decoded, once, cold.
    let t = Instant::now();
    let words = pass.instrumentation_words();
    let section = host.decode(layout, &words).unwrap();
    let after_fence = t.elapsed();
    let json = serde_json::to_string(&section).unwrap();
    let columns = dispatchscope_formats::instrumented::encode(&section).unwrap();
    println!(
        "  section built after the fence in {:.3} ms (readback and decode, once); {} bytes in a capture's column record",
        ms(after_fence),
        columns.len()
    );
    let c = section.counters;
    println!(
        "  instrumented section: {} bytes of JSON; control {:?}; guest {} lds {} scratch {} bound {} accesses; lookups {} (misses {}); escapes {} ({} logged, {} not); {} captured ({} not kept)",
        json.len(),
        section.control,
        c.guest,
        c.lds,
        c.scratch,
        c.bound,
        c.lookups,
        c.misses,
        c.escapes,
        section.escapes.len(),
        section.escapes_not_logged,
        section.captured.len(),
        section.captured_not_logged
    );
    // Every site's device counts against the host's own pass (T5's exact counts on this device).
    check_sites(&section, &want, "instrumented");
    assert!(
        !section.captured.is_empty()
            && section.captured.iter().all(|c| sel.selects(
                c.workgroup,
                c.wave * 32 + c.lane,
                c.pixel
            )),
        "the capture's dispatch captured the selected lanes and no other"
    );
    println!(
        "  device counts checked against the host's pass: every site's accesses and escapes agree ({:.0} ms on the host); {} accesses captured by the capture's dispatch, every one a selected lane's",
        ms(counted_in),
        section.captured.len()
    );
    let accesses = c.guest + c.lds + c.scratch + c.bound;
    println!(
        "  {} accesses in the pass ({:.1} per lane)",
        accesses,
        accesses as f64 / (f64::from(w) * f64::from(h))
    );
    // The engine's CPU time per instrumented dispatch on the emulator's thread.
    let read = time_n(1000, || {
        std::hint::black_box(Readback::read(layout, grid, &words).unwrap());
    });
    let decode = time_n(200, || {
        std::hint::black_box(host.decode(layout, &words).unwrap());
    });
    let dispatch = time_n(50, || {
        std::hint::black_box(host.dispatch_unchanged(true).unwrap());
    });
    let bookkeeping = time_n(500, || {
        std::hint::black_box(host.dispatch_unchanged(false).unwrap());
    });
    println!(
        "  engine CPU per dispatch: plan+map+table unchanged+report {:.1} µs without the slots, {:.1} µs with them (the CPU reference's O8 copy of the holder in and out included); reading the instrumentation (kept lazily) {:.2} µs; building the section (on demand) {:.1} µs",
        us(bookkeeping),
        us(dispatch),
        us(read),
        us(decode)
    );
    // The CPU reference's replay of the captured lanes.
    let t = Instant::now();
    let report = host.replay_captured(&section).unwrap();
    let replay = t.elapsed();
    println!(
        "  CPU reference replay of {} captured accesses: {:.2} ms ({:.0} accesses/s)",
        report.accesses.len(),
        ms(replay),
        report.accesses.len() as f64 / replay.as_secs_f64()
    );
    // O8: the masked write-back of the holder against a plain copy of the same bytes.
    let (data, masks) = pass.holder();
    let (data, masks) = (data.to_vec(), masks.to_vec());
    let mut guest = vec![0u8; data.len()];
    let mut written = 0;
    let masked = time_n(20, || {
        written = masked_write_back(&data, &masks, &mut guest);
    });
    let plain = time_n(20, || guest.copy_from_slice(&data));
    println!(
        "  O8 write-back of {:.1} MiB ({} words masked): masked {:.3} ms, plain copy {:.3} ms, masked / copy {:.2}",
        data.len() as f64 / f64::from(1u32 << 20),
        written,
        ms(masked),
        ms(plain),
        masked.as_secs_f64() / plain.as_secs_f64()
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let sizes: Vec<(u32, u32)> = value("--sizes")
        .unwrap_or_else(|| "1920x1080,3840x2160".into())
        .split(',')
        .filter_map(|s| {
            let (w, h) = s.split_once('x')?;
            Some((w.parse().ok()?, h.parse().ok()?))
        })
        .collect();
    let repeats: usize = value("--repeats").and_then(|r| r.parse().ok()).unwrap_or(9);
    let ctx = Context::new(&ContextOptions {
        validation: false,
        stage_table: false,
    })
    .expect("a Vulkan device");
    let info = ctx.info();
    println!(
        "device: {} (Vulkan {}), subgroup {} lanes (ballot: {}), timestamps {} bits at {} ns a tick",
        info.name,
        info.api_version,
        info.subgroup_size,
        info.subgroup_ballot,
        info.timestamp_valid_bits,
        info.timestamp_period_ns
    );
    // `--frames-only`: only the frame through prepare, the device and complete (no variants, no
    // section, no lookup microbench): what the host spends around the device's run.
    let frames_only = args.iter().any(|a| a == "--frames-only");
    let flat_bits = match value("--flat-bits").as_deref() {
        Some("fitted") => None,
        Some(b) => Some(b.parse().expect("--flat-bits N or fitted")),
        None => Some(40),
    };
    let memories = match value("--memory").as_deref() {
        None | Some("both") => vec![GuestMemoryOn::DeviceLocal, GuestMemoryOn::Imported],
        Some("device-local") => vec![GuestMemoryOn::DeviceLocal],
        Some("imported") => vec![GuestMemoryOn::Imported],
        Some(other) => panic!("--memory {other}: one of both, device-local, imported"),
    };
    let plan = Plan {
        repeats,
        frames_only,
        flat_bits,
        ablation: !args.iter().any(|a| a == "--no-ablation"),
        issue30: args.iter().any(|a| a == "--issue30"),
        memories,
    };
    for (w, h) in sizes {
        pass_at(&ctx, w, h, &plan);
    }
    if frames_only {
        return;
    }
    if !args.iter().any(|a| a == "--no-lookup") {
        for (name, layout) in [
            ("64 KiB-aligned", LayoutConfig::gib_64k()),
            ("4 KiB-aligned", LayoutConfig::gib_4k()),
        ] {
            let cfg = LookupConfig {
                layout,
                loads: 1 << 24,
                invocations: 1 << 20,
                ..LookupConfig::default()
            };
            let f = lookup_bench(&ctx, &cfg).unwrap();
            println!(
                "lookup microbench, {name}: {} invocations × {} loads, chunk {:#x}, {:.3} probes/hit: helper {:.3} ms, raw {:.3} ms, flat {:.3} ms (host clock, medians of {}); helper/raw {:.3}, flat/raw {:.3}, helper/flat {:.3}",
                cfg.invocations,
                cfg.loads / cfg.invocations,
                f.chunk_bytes,
                f.mean_probes_hit,
                ms(f.helper.median),
                ms(f.raw.median),
                ms(f.flat.median),
                cfg.repeats,
                f.helper_over_raw(),
                f.flat_over_raw(),
                f.helper_over_flat()
            );
        }
    }
}

/// What a build's run is checked against: the host's side (its decode), the scene, each
/// workload's image, every site's (accesses, escapes) in the host's pass.
struct Against<'a> {
    host: &'a HostSide,
    scene: &'a Scene,
    expected: [&'a [(u32, u32)]; 2],
    counts: &'a [(u64, u64)],
}

/// Every site's device counts against the host's pass.
fn check_sites(
    section: &dispatchscope_core::report::InstrumentedReport,
    want: &[(u64, u64)],
    what: &str,
) {
    for s in &section.sites {
        let (acc, esc) = want[s.site as usize];
        assert_eq!(
            (s.accesses, s.escapes),
            (acc, esc),
            "{what}: site {}: the device's (accesses, escapes) against the host's pass",
            s.site
        );
    }
    let c = section.counters;
    assert_eq!(
        c.hits + c.misses,
        c.lookups,
        "{what}: lookups = hits + misses"
    );
    assert_eq!(
        section.escapes.len() as u64 + section.escapes_not_logged,
        c.escapes,
        "{what}: every escape logged or counted as not"
    );
    assert_eq!(
        section.control,
        dispatchscope_core::report::ControlStatus::Fired,
        "{what}: the positive control"
    );
}

/// The pass's builds on one memory: each run once alone and its image checked against its
/// workload's (and each complete instrumented build's counts against the host's; the capture's
/// entries against the selection), then rounds of every build interleaved in one submission (one
/// GPU clock for all; the first round left out), after one such submission not counted, timed by
/// GPU timestamps; then issue 42's ratios.
fn variants(
    mut pass: DevicePass,
    on: GuestMemoryOn,
    builds: &[Build],
    sel: &LaneSelection,
    against: &Against,
    repeats: usize,
    grid: Grid,
) -> DevicePass {
    let scene = against.scene;
    println!("  guest memory {on:?}:");
    let mut timestamps = false;
    let mut checked = 0;
    for b in builds {
        timestamps = pass
            .run_builds(&[*b], sel, scene::CANARY_AT, scene)
            .unwrap()
            .timestamps;
        let want = against.expected[usize::from(b.workload == Workload::Translated)];
        let got = image_of(pass.holder().0, want.len());
        let wrong = got.iter().zip(want).filter(|(a, b)| a != b).count();
        assert_eq!(
            wrong,
            0,
            "{}: {wrong} pixels differ from the host's pass",
            b.name()
        );
        if b.variant == Variant::Flat {
            let faults = pass.flat_faults();
            assert!(
                !faults.is_empty(),
                "{}: the escaping instances set no fault bit",
                b.name()
            );
        }
        if b.variant == Variant::Instrumented && b.shape.leave_out == 0 {
            let section = against
                .host
                .decode(pass.layout(), &pass.instrumentation_words())
                .unwrap();
            check_sites(&section, against.counts, &b.name());
            checked += 1;
        }
        if b.variant == Variant::Capture {
            let section = against
                .host
                .decode(pass.layout(), &pass.instrumentation_words())
                .unwrap();
            assert!(
                !section.captured.is_empty()
                    && section.captured.iter().all(|c| sel.selects(
                        c.workgroup,
                        c.wave * 32 + c.lane,
                        c.pixel
                    )),
                "{}: the selected lanes' accesses, and no other lane's",
                b.name()
            );
        }
    }
    println!(
        "    every build's image checked against the host's pass; {checked} instrumented builds' site counts checked against the host's"
    );
    let per_round = builds.len();
    let rounds = (repeats + 1).min(MAX_BACK_TO_BACK as usize / per_round);
    let sequence: Vec<Build> = (0..rounds).flat_map(|_| builds.iter().copied()).collect();
    // One batch first, not counted: the H200's clocks were seen still rising during a first
    // batch (1080p's raw median 1.6–2.2 ms against a minimum of 0.40 in the same batch).
    pass.run_builds(&sequence, sel, scene::CANARY_AT, scene)
        .unwrap();
    let batch = pass
        .run_builds(&sequence, sel, scene::CANARY_AT, scene)
        .unwrap();
    let mut medians = Vec::new();
    for (k, b) in builds.iter().enumerate() {
        let runs: Vec<Duration> = batch
            .each
            .iter()
            .skip(per_round)
            .skip(k)
            .step_by(per_round)
            .copied()
            .collect();
        let n = runs.len();
        let (min, med) = (runs.iter().min().copied().unwrap_or_default(), median(runs));
        println!(
            "    {:<64} median {:>8.3} ms  min {:>8.3} ms  ({n} runs interleaved; {})",
            b.name(),
            ms(med),
            ms(min),
            if timestamps {
                "GPU timestamps"
            } else {
                "host clock"
            }
        );
        medians.push(med.as_secs_f64());
    }
    let of = |b: Build| {
        builds
            .iter()
            .position(|x| *x == b)
            .map_or(f64::NAN, |i| medians[i])
    };
    let captured_groups = grid
        .selected_workgroups(sel)
        .map_or(0, |[x0, y0, x1, y1]| (x1 - x0) * (y1 - y0));
    for workload in Workload::ALL {
        let v = |variant| of(Build::of(variant).on(workload));
        let (raw, helper, instrumented) = (
            v(Variant::Raw),
            v(Variant::Helper),
            v(Variant::Instrumented),
        );
        let issue30 = of(Build::of(Variant::Instrumented)
            .on(workload)
            .shaped(Shape::ISSUE_30));
        let capture = v(Variant::Capture);
        println!(
            "    {:<10} helper / raw {:.3}   helper / flat {:.3}   flat / raw {:.3}   instrumented / helper {:.3} (issue 30's {:.3})   instrumented / raw {:.3}",
            workload.name(),
            helper / raw,
            helper / v(Variant::Flat),
            v(Variant::Flat) / raw,
            instrumented / helper,
            issue30 / helper,
            instrumented / raw,
        );
        println!(
            "    {:<10} issue 42 at {}×{} ({on:?}): instrumented / helper {:.3} (goal ≤ 1.5; issue 30's pass {:.3}); helper / raw {:.3} (goal ≤ {}); the instrumented pass {:.3} ms (goal ≤ 1.67 ms at 1080p; issue 30's {:.3} ms); with the capture's dispatch over {captured_groups} workgroup(s) {:.3} ms more ({:.3} of the helper's pass together)",
            workload.name(),
            grid.width,
            grid.height,
            instrumented / helper,
            issue30 / helper,
            helper / raw,
            if workload == Workload::Loads {
                "1.15"
            } else {
                "1.25"
            },
            instrumented * 1e3,
            issue30 * 1e3,
            capture * 1e3,
            (instrumented + capture) / helper,
        );
        let shaped = |variant, shape| of(Build::of(variant).on(workload).shaped(shape));
        let shapes: Vec<String> = helper_shapes()
            .iter()
            .map(|(name, shape)| {
                let t = shaped(Variant::Helper, *shape);
                format!("{name} {:.3} ({:.3} of raw)", t / helper, t / raw)
            })
            .filter(|l| !l.contains("NaN"))
            .collect();
        if !shapes.is_empty() {
            println!(
                "    {:<10} the helper's changes, each alone, against the shipped helper: {}",
                workload.name(),
                shapes.join("; ")
            );
        }
        let parts: Vec<String> = instrumented_shapes()
            .iter()
            .map(|(name, shape)| {
                let t = shaped(Variant::Instrumented, *shape);
                format!(
                    "{name} {:.3} of the shipped ({:.3} of the helper)",
                    t / instrumented,
                    t / helper
                )
            })
            .filter(|l| !l.contains("NaN"))
            .collect();
        if !parts.is_empty() {
            println!(
                "    {:<10} the instrumented pass's changes, each alone, against the shipped: {}",
                workload.name(),
                parts.join("; ")
            );
        }
        let before = shaped(Variant::Helper, Shape::BEFORE);
        if before.is_finite() {
            println!(
                "    {:<10} issue 30's shapes against the helper's path before: first probe unrolled alone {:.3}, with the fast path {:.3}, the shipped {:.3}; flat's fast path {:.3}",
                workload.name(),
                shaped(
                    Variant::Helper,
                    Shape {
                        first_probe_unrolled: true,
                        ..Shape::BEFORE
                    }
                ) / before,
                shaped(
                    Variant::Helper,
                    Shape {
                        fast_path: true,
                        first_probe_unrolled: true,
                        ..Shape::BEFORE
                    }
                ) / before,
                helper / before,
                v(Variant::Flat) / shaped(Variant::Flat, Shape::BEFORE),
            );
        }
    }
    println!(
        "    header / helper {:.3}",
        of(Build::of(Variant::Header)) / of(Build::of(Variant::Helper))
    );
    pass
}
