//! The full-screen traversal pass (issue 14) on a Vulkan device at 256×256, with the validation
//! layer on and not one message: the image against the host's own pass, every site's device
//! counters against the host's counts, the escape log classified, the positive control, the
//! captured lanes replayed through the CPU reference (values, escapes, marks), the report's size,
//! and the program linked by `spirv-link` giving the same image as the program with the helper
//! emitted into it.
//!
//! Where `DISPATCHSCOPE_REQUIRE_VULKAN=1` (CI), a machine with no Vulkan device (or no validation
//! layer) fails these tests; elsewhere they print why they skipped and pass.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is the test failing, with its message"
)]

use std::sync::{Arc, OnceLock};

use dispatchscope_core::input::Op;
use dispatchscope_core::instrument::{Grid, InstrumentLayout, LaneSelection, counter};
use dispatchscope_core::report::{
    ControlStatus, DispatchReport, EscapeClass, InstrumentedReport, Route,
};
use dispatchscope_vk::pass::scene::{self, Scene, SceneConfig};
use dispatchscope_vk::pass::{
    Build, DEVICE_LISTED_WORDS, DevicePass, GuestMemoryOn, HostSide, PassOptions,
    masked_write_back, run_frame,
};
use dispatchscope_vk::spirv::library::{Shape, Variant};
use dispatchscope_vk::spirv::traversal::{Workload, site};
use dispatchscope_vk::{Context, ContextOptions, VkError};

fn required() -> bool {
    std::env::var("DISPATCHSCOPE_REQUIRE_VULKAN").is_ok_and(|v| v == "1")
}

fn context() -> Option<Arc<Context>> {
    static CTX: OnceLock<Result<Arc<Context>, String>> = OnceLock::new();
    let made = CTX.get_or_init(|| {
        let opts = |validation| ContextOptions {
            validation,
            stage_table: false,
        };
        match Context::new(&opts(true)) {
            Err(VkError::NoValidationLayer) if !required() => Context::new(&opts(false)),
            other => other,
        }
        .map_err(|e| e.to_string())
    });
    match made {
        Ok(c) => Some(Arc::clone(c)),
        Err(e) if required() => {
            panic!("DISPATCHSCOPE_REQUIRE_VULKAN=1, but the Vulkan backend cannot run: {e}")
        }
        Err(e) => {
            eprintln!("skipped: the Vulkan backend cannot run here: {e}");
            None
        }
    }
}

fn assert_quiet(ctx: &Context) {
    assert_eq!(
        ctx.validation_messages(),
        0,
        "the validation layer spoke:\n{}",
        ctx.validation_text().join("\n")
    );
}

const W: u32 = 256;
const H: u32 = 256;

fn layout() -> InstrumentLayout {
    InstrumentLayout::with_sites(site::COUNT)
}

/// A lighter scene than the bench's, so that lavapipe on a 2-core box runs it in seconds.
fn scene_cfg() -> SceneConfig {
    SceneConfig {
        instances: 16,
        primitives: 16,
        ..SceneConfig::default()
    }
}

/// The holder's slot-0 words: `(nearest, checksum)` per pixel.
fn image(holder: &[u8], pixels: usize) -> Vec<(u32, u32)> {
    holder
        .chunks_exact(8)
        .take(pixels)
        .map(|c| {
            (
                u32::from_le_bytes([c[0], c[1], c[2], c[3]]),
                u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
            )
        })
        .collect()
}

fn assert_image(pass: &DevicePass, expected: &[(u32, u32)], what: &str) {
    let got = image(pass.holder().0, expected.len());
    let wrong: Vec<usize> = (0..expected.len())
        .filter(|&i| got[i] != expected[i])
        .collect();
    assert!(
        wrong.is_empty(),
        "{what}: {} pixels differ from the host's pass, first {:?}: device {:?}, host {:?}",
        wrong.len(),
        wrong.first(),
        wrong.first().map(|&i| got[i]),
        wrong.first().map(|&i| expected[i])
    );
}

/// Lane 0 of an escaping pixel's workgroup (its tile store, C1) and the lane beside it.
fn selection(s: &Scene) -> (LaneSelection, [u32; 2]) {
    let px = (0..H)
        .flat_map(|y| (0..W).map(move |x| [x, y]))
        .find(|&[x, y]| x % 8 == 0 && y % 8 == 0 && s.trace(x, y).escapes.iter().any(|&e| e > 0))
        .expect("an escaping pixel");
    let [x, y] = px;
    (LaneSelection::rect(x, y, x + 2, y + 1), px)
}

#[test]
fn the_traversal_pass_agrees_with_the_host_and_the_cpu_reference() {
    let Some(ctx) = context() else { return };
    let grid = Grid::new(W, H).unwrap();
    let scene = Scene::new(scene_cfg(), grid).unwrap();
    let expected = scene.expected_image();
    let traces: Vec<_> = (0..H)
        .flat_map(|y| (0..W).map(move |x| (x, y)))
        .map(|(x, y)| scene.trace(x, y))
        .collect();
    let mut host = HostSide::new(scene.clone()).unwrap();
    assert_eq!(
        host.member_offset(1),
        scene.slots()[1].start - scene.slots()[0].start
    );
    let mut pass = DevicePass::new(&ctx, &host, layout(), false, GuestMemoryOn::Imported).unwrap();
    let (sel, _) = selection(&scene);

    for v in [Variant::Raw, Variant::Helper] {
        pass.run(v, &LaneSelection::none(), scene::CANARY_AT, &scene)
            .unwrap();
        assert_image(&pass, &expected, v.name());
    }
    // C1: the helper's tile stores marked the chunks of the per-workgroup results.
    let marked = pass.marked_chunks();
    let tiles = scene::TILES_AT..scene::TILES_AT + 4 * grid.workgroups();
    assert!(!marked.is_empty());
    assert!(
        marked.iter().all(|(r, _)| tiles.contains(&r.start)),
        "{marked:?}"
    );
    assert_eq!(
        marked.iter().map(|(_, n)| u64::from(*n)).sum::<u64>(),
        grid.workgroups()
    );

    pass.run(Variant::Instrumented, &sel, scene::CANARY_AT, &scene)
        .unwrap();
    assert_image(&pass, &expected, "instrumented");
    assert_quiet(&ctx);
    let section = host
        .decode(pass.layout(), &pass.instrumentation_words())
        .unwrap();
    check_counts(&section, &traces, grid);
    check_escapes(&section);

    // O8/O9: every slot-0 word and the 16 summary words past its end are masked.
    let (data, masks) = pass.holder();
    let mut guest = vec![0u8; data.len()];
    let written = masked_write_back(data, masks, &mut guest);
    assert_eq!(written, 2 * (W * H) as usize + 16);
    assert_eq!(image(&guest, expected.len()), expected);

    // The captured lanes, replayed through the CPU reference.
    assert!(section.captured.len() > 20, "{}", section.captured.len());
    let report = replayed_as_captured(&mut host, &section, &sel);
    assert!(
        report.accesses.iter().any(|a| a.escaped),
        "the captured lanes escaped nowhere"
    );
    let device_marks: Vec<_> = pass.marked_chunks().into_iter().map(|(r, _)| r).collect();
    assert!(
        report.marks.iter().all(|m| device_marks.contains(&m.guest)),
        "{:?}",
        report.marks
    );

    // The report's section stays small.
    let json = serde_json::to_string(&section).unwrap();
    eprintln!(
        "instrumented section at {W}×{H}: {} bytes of JSON, {} captured, {} escapes logged, {} not",
        json.len(),
        section.captured.len(),
        section.escapes.len(),
        section.escapes_not_logged
    );
    assert!(json.len() <= 64 << 10, "{} bytes", json.len());
    assert_quiet(&ctx);
}

/// O8 for the device's output: a frame writes the holder back into the engine's guest memory by
/// its masks, and the report lists a few words and places the rest, so it stays small.
#[test]
fn a_frame_writes_the_output_holder_back_into_guest_memory() {
    let Some(ctx) = context() else { return };
    let grid = Grid::new(W, H).unwrap();
    let scene = Scene::new(scene_cfg(), grid).unwrap();
    let expected = scene.expected_image();
    let mut host = HostSide::new(scene.clone()).unwrap();
    let mut pass = DevicePass::new(&ctx, &host, layout(), false, GuestMemoryOn::Imported).unwrap();
    let input = host.frame_input();
    let HostSide {
        engine,
        scene,
        slots,
        ..
    } = &mut host;
    let frame = run_frame(
        engine,
        &input,
        slots,
        scene,
        &mut pass,
        Variant::Helper,
        &LaneSelection::none(),
    )
    .unwrap();
    let report = &frame.report;
    assert_eq!(report.write_back.len(), 1, "{:?}", report.write_back);
    let wb = &report.write_back[0];
    let written = 2 * u64::from(W * H) + 16;
    assert_eq!(wb.words_written(), written);
    assert_eq!(wb.words.len(), DEVICE_LISTED_WORDS);
    assert!(!wb.runs.is_empty());
    assert_eq!(report.counts.words_written_back as u64, written);
    // The guest bytes now hold the device's image.
    let holder = scene.slots()[0];
    let mut guest = vec![0u8; (holder.size_bytes() as usize).min(8 * expected.len())];
    engine
        .memory()
        .read_bytes(holder.start, &mut guest)
        .unwrap();
    assert_eq!(image(&guest, expected.len()), expected);
    let json = serde_json::to_string(&report.write_back).unwrap();
    assert!(
        json.len() < 8 << 10,
        "{} bytes of write-back JSON",
        json.len()
    );
    assert_quiet(&ctx);
}

/// Issue 29: the instrumented variant through the emulator's own path, `run_frame`'s prepare and
/// complete: complete decodes the device's buffer into the report's section, and it says what the
/// host's own pass says (every site's accesses and escapes, the escapes classified), the report
/// naming the device.
#[test]
fn complete_decodes_the_instrumented_frames_section() {
    let Some(ctx) = context() else { return };
    let grid = Grid::new(W, H).unwrap();
    let scene = Scene::new(scene_cfg(), grid).unwrap();
    let traces: Vec<scene::Trace> = (0..H)
        .flat_map(|y| (0..W).map(move |x| (x, y)))
        .map(|(x, y)| scene.trace(x, y))
        .collect();
    let mut host = HostSide::with_limits(scene.clone(), ctx.limits()).unwrap();
    let mut pass = DevicePass::new(&ctx, &host, layout(), false, GuestMemoryOn::Imported).unwrap();
    let (sel, _) = selection(&scene);
    let input = host.frame_input();
    let HostSide {
        engine,
        scene,
        slots,
        ..
    } = &mut host;
    let frame = run_frame(
        engine,
        &input,
        slots,
        scene,
        &mut pass,
        Variant::Instrumented,
        &sel,
    )
    .unwrap();
    let section = frame
        .report
        .instrumented
        .as_ref()
        .expect("complete decoded the section");
    check_counts(section, &traces, grid);
    check_escapes(section);
    assert_eq!(frame.report.backend, ctx.device_name());
    assert_eq!(frame.report.device.name, ctx.device_name());
    assert_quiet(&ctx);
}

/// Every site's device counters against the host's own pass.
fn check_counts(section: &InstrumentedReport, traces: &[scene::Trace], grid: Grid) {
    assert_eq!(section.control, ControlStatus::Fired);
    check_counts_at(section, traces, grid, "instrumented");
    assert!(section.counters.escapes > 0);
}

/// [`check_counts`] over any grid, `what` naming the build.
fn check_counts_at(section: &InstrumentedReport, traces: &[scene::Trace], grid: Grid, what: &str) {
    let (w, h) = (grid.width, grid.height);
    assert_eq!(section.lanes, u64::from(w * h), "{what}");
    for s in &section.sites {
        let host: u64 = traces
            .iter()
            .map(|t| u64::from(t.accesses[s.site as usize]))
            .sum();
        let esc: u64 = traces
            .iter()
            .map(|t| u64::from(t.escapes[s.site as usize]))
            .sum();
        assert_eq!(s.accesses, host, "{what}: site {}: accesses", s.site);
        assert_eq!(s.escapes, esc, "{what}: site {}: escapes", s.site);
    }
    let c = section.counters;
    let lds: u64 = section
        .sites
        .iter()
        .filter(|s| s.site <= site::TOP_POP)
        .map(|s| s.accesses)
        .sum();
    assert_eq!(c.lds, lds, "{what}");
    assert_eq!(
        c.bound,
        u64::from(w * h) + grid.workgroups().min(16),
        "{what}"
    );
    assert_eq!(c.stores_marked, grid.workgroups(), "{what}");
    assert_eq!(c.lookups, c.hits + c.misses, "{what}");
    assert_eq!(
        section.probe_histogram.iter().sum::<u64>(),
        c.lookups,
        "{what}"
    );
    // The heat map places every escape, by the cell of the workgroup it happened in.
    let heat = section.heat.as_ref().expect("a heat map");
    assert_eq!(heat.cells, grid.heat_cells());
    let mut expected = vec![0u64; heat.escapes.len()];
    for (i, t) in traces.iter().enumerate() {
        let (x, y) = (i as u32 % w, i as u32 / w);
        let (wg, _) = grid.lane_of([x, y]);
        let cell = grid
            .heat_cell_of(wg)
            .expect("a lane of the grid has a heat cell");
        expected[cell] += t.escapes.iter().map(|&e| u64::from(e)).sum::<u64>();
    }
    assert_eq!(heat.escapes, expected, "{what}: escapes by heat cell");
    assert_eq!(heat.escapes.iter().sum::<u64>(), c.escapes, "{what}");
    let extra: u64 = section.sites.iter().map(|s| s.probes_sum - s.lookups).sum();
    assert_eq!(heat.extra_probes.iter().sum::<u64>(), extra, "{what}");
    assert!(c.misses >= c.escapes, "{what}");
    assert_eq!(
        section.escapes.len() as u64 + section.escapes_not_logged,
        c.escapes,
        "{what}"
    );
    // The log keeps what it has room for, each entry an escape the host's pass makes.
    assert_eq!(
        section.escapes.len() as u64,
        c.escapes.min(u64::from(layout().escape_capacity)),
        "{what}"
    );
}

fn check_escapes(section: &InstrumentedReport) {
    assert_eq!(section.escapes.len(), layout().escape_capacity as usize);
    let classes: Vec<EscapeClass> = section.escapes.iter().map(|e| e.class).collect();
    assert!(
        classes
            .iter()
            .all(|c| matches!(c, EscapeClass::NotReadable | EscapeClass::NoReservation)),
        "{classes:?}"
    );
    for e in &section.escapes {
        assert!(
            e.site == site::BOTTOM_NODE0 || e.site == site::BOTTOM_NODE1,
            "{e:?}"
        );
        assert_eq!(e.escaped_bytes, 0xffff);
        assert!(e.nearest_below.is_some() || e.nearest_above.is_some());
        let in_hole = (scene::UNREADABLE_AT..scene::TILES_AT).contains(&e.address);
        assert!(in_hole, "{:#x}", e.address);
    }
    assert!(
        section
            .captured
            .iter()
            .any(|c| matches!(c.route, Route::Lds { .. }))
    );
    assert!(
        section
            .captured
            .iter()
            .any(|c| matches!(c.route, Route::Scratch { .. }))
    );
}

/// The program linked with each library by `spirv-link` (the libraries `dispatchscope spirv-helper`
/// writes: the instrumented one lean, `Shape::LINKED`) runs the same pass as the program with the
/// helper emitted into it; the linked instrumented pass counts what the host's pass does (every
/// site's accesses and escapes, the heat map, the positive control), logs each escaping lane's
/// first escape and no other, and the linked capture library's dispatch captures the selected
/// lanes as the CPU reference replays them.
#[test]
fn the_linked_program_gives_the_same_image_and_counts() {
    let Some(ctx) = context() else { return };
    let grid = Grid::new(64, 64).unwrap();
    let scene = Scene::new(scene_cfg(), grid).unwrap();
    let traces: Vec<scene::Trace> = (0..64)
        .flat_map(|y| (0..64).map(move |x| (x, y)))
        .map(|(x, y)| scene.trace(x, y))
        .collect();
    let mut host = HostSide::new(scene.clone()).unwrap();
    let mut pass = DevicePass::new(&ctx, &host, layout(), true, GuestMemoryOn::Imported).unwrap();
    let expected = scene.expected_image();
    for v in Variant::ALL {
        pass.run(v, &LaneSelection::none(), scene::CANARY_AT, &scene)
            .unwrap();
        assert_image(&pass, &expected, v.name());
    }
    // The instrumented run is the last: the buffer is its.
    let words = pass.instrumentation_words();
    let section = host.decode(pass.layout(), &words).unwrap();
    assert_eq!(section.control, ControlStatus::Fired);
    check_counts_at(&section, &traces, grid, "linked, instrumented");
    // The lean log: each escaping lane offers its first escape, once (issue 30's offered every
    // escape).
    let escaping = traces
        .iter()
        .filter(|t| t.escapes.iter().any(|&e| e > 0))
        .count();
    assert!(escaping > 0, "the scene escapes nowhere at 64×64");
    assert_eq!(
        words[counter::ESCAPES as usize] as usize,
        escaping,
        "escapes offered to the log: one an escaping lane"
    );
    let mut lanes: Vec<_> = section
        .escapes
        .iter()
        .map(|e| (e.workgroup, e.wave, e.lane))
        .collect();
    lanes.sort_unstable();
    lanes.dedup();
    assert_eq!(lanes.len(), section.escapes.len(), "a lane logged twice");
    for e in &section.escapes {
        let t = &traces[(e.pixel[1] * 64 + e.pixel[0]) as usize];
        assert!(
            t.escapes[e.site as usize] > 0,
            "{e:?}: an escape the host's pass does not make"
        );
    }

    // Lanes selected: the pass, then the linked capture library's dispatch over their workgroups.
    let sel = LaneSelection::rect(0, 0, 8, 1);
    pass.run(Variant::Instrumented, &sel, scene::CANARY_AT, &scene)
        .unwrap();
    assert_image(&pass, &expected, "instrumented, lanes selected");
    let section = host
        .decode(pass.layout(), &pass.instrumentation_words())
        .unwrap();
    check_counts_at(
        &section,
        &traces,
        grid,
        "linked, instrumented, lanes selected",
    );
    assert!(!section.captured.is_empty());
    replayed_as_captured(&mut host, &section, &sel);
    assert_quiet(&ctx);
}

/// Every captured access is a selected lane's, and the CPU reference's replay of the captured
/// lanes reads the values the device read and escapes where the device escaped.
fn replayed_as_captured(
    host: &mut HostSide,
    section: &InstrumentedReport,
    sel: &LaneSelection,
) -> DispatchReport {
    assert!(section.captured.iter().all(|c| sel.selects(
        c.workgroup,
        c.wave * 32 + c.lane,
        c.pixel
    )));
    let report = host.replay_captured(section).unwrap();
    assert_eq!(report.accesses.len(), section.captured.len());
    for (i, (c, a)) in section.captured.iter().zip(&report.accesses).enumerate() {
        if c.op == Op::Load {
            assert_eq!(
                c.values, a.values,
                "captured access {i} (site {}): values",
                c.site
            );
        }
        assert_eq!(
            c.escaped_bytes != 0,
            a.escaped,
            "captured access {i} (site {}): escaped",
            c.site
        );
    }
    report
}

/// A canary that a mapping holds does not escape, and the report says the control did not fire.
#[test]
fn a_control_that_does_not_fire_is_reported() {
    let Some(ctx) = context() else { return };
    let grid = Grid::new(16, 16).unwrap();
    let scene = Scene::new(scene_cfg(), grid).unwrap();
    let host = HostSide::new(scene.clone()).unwrap();
    let mut pass = DevicePass::new(&ctx, &host, layout(), false, GuestMemoryOn::Imported).unwrap();
    pass.run(
        Variant::Instrumented,
        &LaneSelection::none(),
        scene::TOP_AT,
        &scene,
    )
    .unwrap();
    let section = host
        .decode(pass.layout(), &pass.instrumentation_words())
        .unwrap();
    assert_eq!(section.control, ControlStatus::NotFired);
    assert!(section.captured.is_empty());
    assert_quiet(&ctx);
}

/// The guest span copied to device-local memory, the table pointing into the copy: the same pass.
#[test]
fn a_device_local_copy_gives_the_same_pass() {
    let Some(ctx) = context() else { return };
    let grid = Grid::new(32, 32).unwrap();
    let scene = Scene::new(scene_cfg(), grid).unwrap();
    let host = HostSide::new(scene.clone()).unwrap();
    let mut pass =
        DevicePass::new(&ctx, &host, layout(), false, GuestMemoryOn::DeviceLocal).unwrap();
    let expected = scene.expected_image();
    for v in Variant::ALL {
        pass.run(v, &LaneSelection::none(), scene::CANARY_AT, &scene)
            .unwrap();
        assert_image(&pass, &expected, v.name());
    }
    let section = host
        .decode(pass.layout(), &pass.instrumentation_words())
        .unwrap();
    assert_eq!(section.control, ControlStatus::Fired);
    assert_quiet(&ctx);
}

/// The translated workload (issue 30): the arithmetic of `image_bvh_intersect_ray` at every node
/// gives the host's checksum bit for bit in every variant, the instrumented counts stay the
/// host's, and the flat page table (the peer) marks exactly the unmapped pages the escaping
/// instances reach in its fault bitmap.
#[test]
fn the_translated_workload_and_the_flat_table_agree_with_the_host() {
    let Some(ctx) = context() else { return };
    let grid = Grid::new(W, H).unwrap();
    let scene = Scene::new(scene_cfg(), grid).unwrap();
    let host = HostSide::new(scene.clone()).unwrap();
    let mut options = PassOptions::new(false, GuestMemoryOn::Imported);
    options.builds = Variant::ALL
        .into_iter()
        .map(|v| Build::of(v).on(Workload::Translated))
        .collect();
    let mut pass = DevicePass::with_options(&ctx, &host, layout(), &options).unwrap();
    let loads = scene.expected_image();
    let expected = scene.expected_image_of(Workload::Translated);
    assert_ne!(loads, expected, "the arithmetic changes no checksum");
    let (sel, _) = selection(&scene);
    for b in &options.builds {
        pass.run_builds(&[*b], &sel, scene::CANARY_AT, &scene)
            .unwrap();
        assert_image(&pass, &expected, &b.name());
    }
    // The last build was the instrumented one: its counts are the loads workload's.
    let traces: Vec<_> = (0..H)
        .flat_map(|y| (0..W).map(move |x| (x, y)))
        .map(|(x, y)| scene.trace_of(x, y, Workload::Translated))
        .collect();
    let section = host
        .decode(pass.layout(), &pass.instrumentation_words())
        .unwrap();
    check_counts(&section, &traces, grid);
    // The flat run's faults: the pages of the unreadable reservation and the hole the escaping
    // instances' bottom levels point into, and nothing else.
    let flat = Build::of(Variant::Flat).on(Workload::Translated);
    pass.run_builds(&[flat], &sel, scene::CANARY_AT, &scene)
        .unwrap();
    let faults = pass.flat_faults();
    assert!(!faults.is_empty(), "no fault bit set");
    let unmapped = [
        scene::UNREADABLE_AT..scene::UNREADABLE_AT + scene::REGION_BYTES,
        scene::HOLE_AT..scene::HOLE_AT + scene::REGION_BYTES,
    ];
    assert!(
        faults
            .iter()
            .all(|p| unmapped.iter().any(|r| r.contains(p))),
        "{faults:x?}"
    );
    assert_quiet(&ctx);
}

/// Each shape of the helper's access path (issue 30's changes, each alone) runs the same pass.
#[test]
fn every_shape_of_the_access_path_gives_the_same_image() {
    let Some(ctx) = context() else { return };
    let grid = Grid::new(32, 32).unwrap();
    let scene = Scene::new(scene_cfg(), grid).unwrap();
    let host = HostSide::new(scene.clone()).unwrap();
    let mut options = PassOptions::new(false, GuestMemoryOn::DeviceLocal);
    options.builds.clear();
    let mut shapes = Vec::new();
    for fast_path in [false, true] {
        for first_probe_unrolled in [false, true] {
            shapes.push(Shape {
                fast_path,
                first_probe_unrolled,
                private_counters: fast_path,
                lane_cache: first_probe_unrolled,
                ..Shape::SHIPPED
            });
        }
    }
    // Issue 42's changes, each alone, and issue 30's instrumentation.
    let s = Shape::SHIPPED;
    shapes.extend([
        Shape::ISSUE_30,
        Shape {
            private_counters: true,
            ..Shape::ISSUE_30
        },
        Shape {
            cache_delta: true,
            ..s
        },
        Shape {
            cache_delta: true,
            fast_path: false,
            ..s
        },
        Shape {
            slow_path_call: true,
            ..s
        },
        Shape {
            slow_path_call: true,
            fast_path: false,
            ..s
        },
        Shape {
            lookup_call: true,
            ..s
        },
        Shape {
            cache_test32: true,
            cache_span: false,
            ..s
        },
        Shape {
            cache_span: false,
            ..s
        },
        Shape {
            cache_span: false,
            ..Shape::ISSUE_30
        },
        Shape {
            derived_counts: true,
            ..s
        },
        Shape {
            derived_counts: true,
            subgroup_counts: false,
            ..s
        },
        Shape {
            private_counters: true,
            ..s
        },
        Shape {
            subgroup_counts: false,
            ..s
        },
        Shape {
            subgroup_rare: true,
            ..s
        },
        Shape {
            wide_atomics: false,
            ..s
        },
        Shape {
            cache_delta: true,
            slow_path_call: true,
            lookup_call: true,
            ..s
        },
    ]);
    for shape in shapes {
        for v in [Variant::Helper, Variant::Flat, Variant::Instrumented] {
            options.builds.push(Build::of(v).shaped(shape));
        }
    }
    options
        .builds
        .push(Build::of(Variant::Instrumented).inlined());
    let mut pass = DevicePass::with_options(&ctx, &host, layout(), &options).unwrap();
    let expected = scene.expected_image();
    let traces: Vec<_> = (0..32)
        .flat_map(|y| (0..32).map(move |x| (x, y)))
        .map(|(x, y)| scene.trace(x, y))
        .collect();
    let mut first = None;
    for b in &options.builds {
        pass.run_builds(&[*b], &LaneSelection::none(), scene::CANARY_AT, &scene)
            .unwrap();
        assert_image(&pass, &expected, &b.name());
        if b.variant == Variant::Instrumented {
            // Counted by the program or by the helper, by a workgroup atomic an access or the
            // lane's own counters, reduced over the subgroup or not, inlined or not: the same
            // counts, the same escapes, the same heat map.
            let section = host
                .decode(pass.layout(), &pass.instrumentation_words())
                .unwrap();
            check_counts_at(&section, &traces, Grid::new(32, 32).unwrap(), &b.name());
            assert_eq!(section.control, ControlStatus::Fired, "{}", b.name());
            // Every way of counting gives every count alike, probes and heat map included.
            let counted = (
                section.counters,
                section.probe_histogram.clone(),
                section.sites.clone(),
                section.heat.clone(),
            );
            match &first {
                None => first = Some((b.name(), counted)),
                Some((name, want)) => assert!(counted == *want, "{} against {name}", b.name()),
            }
        }
    }
    assert_quiet(&ctx);
}

/// The whole report of an instrumented frame (the demo's scene at 256×256, its capture rectangle
/// of 8 lanes), as a debugger receives it, stays under 64 KiB of JSON (issue 30).
#[test]
fn an_instrumented_frames_whole_report_stays_under_64_kib() {
    let Some(ctx) = context() else { return };
    let grid = Grid::new(256, 256).unwrap();
    let scene = Scene::new(SceneConfig::default(), grid).unwrap();
    let mut host = HostSide::with_limits(scene.clone(), ctx.limits()).unwrap();
    let mut pass = DevicePass::new(&ctx, &host, layout(), false, GuestMemoryOn::Imported).unwrap();
    let input = host.frame_input();
    let HostSide {
        engine,
        scene,
        slots,
        ..
    } = &mut host;
    let sel = LaneSelection::rect(0, 0, 8, 1);
    let f = run_frame(
        engine,
        &input,
        slots,
        scene,
        &mut pass,
        Variant::Instrumented,
        &sel,
    )
    .unwrap();
    let whole = serde_json::to_string(&f.report).unwrap().len();
    let section = f.report.instrumented.as_ref().expect("a section");
    let part = serde_json::to_string(section).unwrap().len();
    eprintln!(
        "the whole report: {whole} B of JSON, its section {part} B ({} captured, {} escapes logged)",
        section.captured.len(),
        section.escapes.len()
    );
    assert!(!section.captured.is_empty() && !section.escapes.is_empty());
    assert!(whole <= 64 << 10, "{whole} bytes");
    assert_quiet(&ctx);
}

/// Issue 42: the capture's second dispatch, over the selected lanes' workgroups only, captures
/// each selected lane's accesses as issue 30's pass captured them in the pass itself (lane by
/// lane, in order, values and escapes alike), and stores, marks and counts nothing.
#[test]
fn the_capture_dispatch_captures_what_the_pass_did_and_nothing_else() {
    let Some(ctx) = context() else { return };
    let grid = Grid::new(64, 64).unwrap();
    let scene = Scene::new(scene_cfg(), grid).unwrap();
    let host = HostSide::new(scene.clone()).unwrap();
    let mut options = PassOptions::new(false, GuestMemoryOn::Imported);
    let issue30 = Build::of(Variant::Instrumented).shaped(Shape::ISSUE_30);
    options.builds.push(issue30);
    // Room for every access of a workgroup's lanes.
    let mut roomy = layout();
    roomy.capture_capacity = 1 << 15;
    let mut pass = DevicePass::with_options(&ctx, &host, roomy, &options).unwrap();
    // Two lanes of an escaping workgroup, and one whole workgroup beside it.
    let [x, y] = (0..64)
        .flat_map(|y| (0..64).map(move |x| [x, y]))
        .find(|&[x, y]| scene.trace(x, y).escapes.iter().any(|&e| e > 0))
        .expect("an escaping pixel");
    let by_lane = |s: &InstrumentedReport| {
        let mut lanes: std::collections::BTreeMap<(u32, u32), Vec<String>> = Default::default();
        for c in &s.captured {
            lanes
                .entry((c.workgroup, c.wave * 32 + c.lane))
                .or_default()
                .push(format!("{c:?}"));
        }
        lanes
    };
    for sel in [
        LaneSelection::rect(x, y, x + 2, y + 1),
        LaneSelection::workgroup(grid.lane_of([x, y]).0, u64::MAX),
    ] {
        // Issue 30's pass captures in the pass.
        pass.run_builds(&[issue30], &sel, scene::CANARY_AT, &scene)
            .unwrap();
        let before = host
            .decode(pass.layout(), &pass.instrumentation_words())
            .unwrap();
        // The capture's dispatch alone: its buffer holds the capture and nothing else.
        pass.run_builds(
            &[Build::of(Variant::Capture)],
            &sel,
            scene::CANARY_AT,
            &scene,
        )
        .unwrap();
        let alone = host
            .decode(pass.layout(), &pass.instrumentation_words())
            .unwrap();
        assert!(
            pass.marked_chunks().is_empty(),
            "the capture marked a chunk"
        );
        assert_eq!(alone.control, ControlStatus::NotFired);
        assert!(alone.escapes.is_empty() && alone.counters.escapes == 0);
        assert!(
            alone
                .sites
                .iter()
                .all(|s| s.accesses == 0 && s.lookups == 0)
        );
        assert!(!alone.captured.is_empty());
        assert!(alone.captured.iter().all(|c| sel.selects(
            c.workgroup,
            c.wave * 32 + c.lane,
            c.pixel
        )));
        // Lane by lane, the accesses issue 30's pass captured.
        assert_eq!(alone.captured_not_logged, 0);
        assert_eq!(before.captured_not_logged, 0);
        assert!(alone.captured.iter().any(|c| c.escaped_bytes != 0), "{sel}");
        assert_eq!(by_lane(&alone), by_lane(&before), "{sel}");
        // The shipped pass runs both, in one submission.
        pass.run(Variant::Instrumented, &sel, scene::CANARY_AT, &scene)
            .unwrap();
        let both = host
            .decode(pass.layout(), &pass.instrumentation_words())
            .unwrap();
        assert_eq!(both.control, ControlStatus::Fired);
        assert_eq!(by_lane(&both), by_lane(&alone), "{sel}");
    }
    // No lane selected: no capture's dispatch, nothing captured.
    pass.run(
        Variant::Instrumented,
        &LaneSelection::none(),
        scene::CANARY_AT,
        &scene,
    )
    .unwrap();
    let none = host
        .decode(pass.layout(), &pass.instrumentation_words())
        .unwrap();
    assert!(none.captured.is_empty() && none.captured_not_logged == 0);
    assert_quiet(&ctx);
}
