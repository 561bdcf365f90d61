//! The Vulkan backend against the CPU reference: every shipped sample (one test each, from
//! `shipped_sample_tests!`) and 1,000 random dispatches must give the same reports (values read,
//! marks, escapes, write-back words …) and the same guest bytes afterwards, with VK_LAYER_KHRONOS_validation on and
//! not one validation message. The golden disassembly of the lookup helper is checked here too.
//!
//! Where `DISPATCHSCOPE_REQUIRE_VULKAN=1` (CI), a machine with no Vulkan device (or no validation
//! layer) fails these tests; elsewhere they print why they skipped and pass.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is the test failing, with its message"
)]

use std::path::Path;
use std::sync::{Arc, OnceLock};

use dispatchscope_core::addr::ByteRange;
use dispatchscope_core::backend::{Backend, CpuBackend};
use dispatchscope_core::input::{
    Access, AccessKind, DeviceLimits, DispatchInput, Format, Op, Reason, Slot,
};
use dispatchscope_core::input::{Backing, Event};
use dispatchscope_core::report::{DispatchReport, Mode, Route};
use dispatchscope_formats::generate::{GenConfig, Rng, random_sample};
use dispatchscope_formats::sample::{
    Contents, Provenance, SAMPLE_FORMAT, SAMPLE_VERSION, Sample, Step,
};
use dispatchscope_formats::shipped;
use dispatchscope_vk::verify::compare;
use dispatchscope_vk::{Context, ContextOptions, VkError, VulkanBackend, spirv};

fn required() -> bool {
    std::env::var("DISPATCHSCOPE_REQUIRE_VULKAN").is_ok_and(|v| v == "1")
}

/// A context with validation on where the layer is installed (always where required).
fn open(stage_table: bool) -> Result<Arc<Context>, String> {
    let opts = |validation| ContextOptions {
        validation,
        stage_table,
    };
    match Context::new(&opts(true)) {
        Err(VkError::NoValidationLayer) if !required() => {
            eprintln!("note: VK_LAYER_KHRONOS_validation is not installed; running without it");
            Context::new(&opts(false))
        }
        other => other,
    }
    .map_err(|e| e.to_string())
}

/// The shared context.
fn context() -> Option<Arc<Context>> {
    static CTX: OnceLock<Result<Arc<Context>, String>> = OnceLock::new();
    match CTX.get_or_init(|| open(false)) {
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

fn assert_agree(sample: &Sample, ctx: &Arc<Context>, what: &str) -> Vec<DispatchReport> {
    let vk = VulkanBackend::on(Arc::clone(ctx)).expect("a backend on the shared context");
    let c = compare(sample, CpuBackend::new(), vk).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        c.differences.is_empty(),
        "{what}: {} differences between {} and {}:\n{}",
        c.differences.len(),
        c.left,
        c.right,
        c.differences.join("\n")
    );
    assert_quiet(ctx);
    c.reports
}

fn check_sample(name: &str) {
    let Some(ctx) = context() else { return };
    let text = shipped::sample_text(name).expect("a shipped sample");
    let sample = Sample::from_json(text).expect("a valid sample");
    assert_agree(&sample, &ctx, name);
}

dispatchscope_formats::shipped_sample_tests!(check_sample);

#[test]
fn every_shipped_sample_is_tested() {
    let names: Vec<&str> = shipped::names().collect();
    assert!(names.len() >= 10, "{names:?}");
}

/// 1,000 random dispatches: 250 generated samples of 4 dispatches each (memory events between them,
/// bound and device-addressed, escapes, LDS, scratch, overlapping written slots).
#[test]
fn a_thousand_random_dispatches_agree() {
    let Some(ctx) = context() else { return };
    let mut t = Tally::default();
    for seed in 0..250 {
        let s = random_sample(seed, GenConfig::default());
        t.add(&assert_agree(
            &s,
            &ctx,
            &format!("generated sample, seed {seed}"),
        ));
    }
    eprintln!("{t:?} (validation {})", ctx.validating());
    assert!(t.dispatches >= 1000, "{t:?}");
    assert!(t.device_addressed >= 300 && t.bound >= 200, "{t:?}");
    assert!(
        t.escapes >= 100 && t.marks >= 100 && t.words_written_back >= 100,
        "{t:?}"
    );
}

/// What a run covered, so that a generator change that stops exercising a path is noticed.
#[derive(Debug, Default)]
struct Tally {
    dispatches: usize,
    device_addressed: usize,
    bound: usize,
    refused: usize,
    accesses: usize,
    escapes: usize,
    marks: usize,
    words_written_back: usize,
}

impl Tally {
    fn add(&mut self, reports: &[DispatchReport]) {
        for r in reports {
            self.dispatches += 1;
            match r.mode {
                Mode::DeviceAddressed => self.device_addressed += 1,
                Mode::Bound => self.bound += 1,
                Mode::Refused => self.refused += 1,
            }
            self.accesses += r.counts.accesses;
            self.escapes += r.counts.escapes;
            self.marks += r.counts.marks;
            self.words_written_back += r.counts.words_written_back;
        }
    }
}

/// The same, with up to 40 slots and 200 accesses per dispatch: jobs that bind more slots than one
/// replay dispatch holds (16 on lavapipe) run as several dispatches, in order.
#[test]
fn wide_random_dispatches_agree() {
    let Some(ctx) = context() else { return };
    let cfg = GenConfig {
        slots: 40,
        accesses: 200,
        ..GenConfig::default()
    };
    let mut t = Tally::default();
    for seed in 1000..1040 {
        let s = random_sample(seed, cfg);
        t.add(&assert_agree(
            &s,
            &ctx,
            &format!("wide generated sample, seed {seed}"),
        ));
    }
    eprintln!("{t:?}");
}

const BASE: u64 = 0x20_0000_0000;

fn sample(host_page_bytes: u64, contents: Vec<Contents>, steps: Vec<Step>) -> Sample {
    Sample {
        format: SAMPLE_FORMAT.into(),
        version: SAMPLE_VERSION,
        title: "made by core/vk/tests/vulkan.rs".into(),
        description: String::new(),
        provenance: Provenance::default(),
        device: DeviceLimits {
            host_page_bytes,
            ..DeviceLimits::default()
        },
        contents,
        steps,
        programs: Vec::new(),
    }
}

fn reserve(start: u64, end: u64) -> Step {
    Step::Event(Event::Reserve {
        range: ByteRange::new(start, end),
        readable: true,
        writable: true,
        committed: true,
        backing: Backing::Private,
        host_base: None,
    })
}

fn random_bytes(rng: &mut Rng, n: usize) -> Vec<u8> {
    (0..n).map(|_| rng.next_u64() as u8).collect()
}

fn access(kind: AccessKind, op: Op, size_bytes: u32) -> Access {
    Access {
        pc: 0x4000_0000_0100,
        ..Access::new(kind, op, size_bytes)
    }
}

fn dispatch(slots: Vec<Slot>, accesses: Vec<Access>, device_addressed: bool) -> Step {
    Step::Dispatch(Box::new(DispatchInput {
        program: 0x4000_0000_1000,
        label: "made by core/vk/tests/vulkan.rs".into(),
        slots,
        reasons: if device_addressed {
            vec![Reason::D753]
        } else {
            Vec::new()
        },
        accesses,
        ..DispatchInput::default()
    }))
}

/// R8G8B8A8_UNORM both ways, bound and through an unresolved descriptor (W2): every byte decoded,
/// and stores of the floats where rounding could go wrong (each k + 0.5 over 255 and its neighbours),
/// signed zeros, NaNs, infinities, denormals and random bits, encoded as `Format::encode` does.
#[test]
fn r8g8b8a8_unorm_converts_bit_for_bit() {
    let Some(ctx) = context() else { return };
    let mut rng = Rng::new(77);
    let mut floats: Vec<u32> = [
        0.0f32,
        -0.0,
        1.0,
        -1.0,
        2.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::MIN_POSITIVE,
        1e-40,
        -1e-40,
        f32::MAX,
        0.5 / 255.0,
    ]
    .iter()
    .map(|f| f.to_bits())
    .chain([0x7fc0_0001, 0xffff_ffff, 0x7f80_0001])
    .collect();
    for k in 0..=255u32 {
        let x = (k as f32 + 0.5) / 255.0;
        floats.extend([x.to_bits() - 1, x.to_bits(), x.to_bits() + 1]);
        floats.push((k as f32 / 255.0).to_bits());
    }
    floats.extend((0..400).map(|_| rng.next_u64() as u32));
    while !floats.len().is_multiple_of(4) {
        floats.push(0);
    }
    let mut unorm = Slot::new(0, BASE, 0x4000, true);
    unorm.format = Some(Format::R8G8B8A8Unorm);
    let mut bound = Vec::new();
    for (i, v) in floats.chunks(4).enumerate() {
        let mut a = access(AccessKind::FormatBuffer, Op::Store, 4);
        a.slot = Some(0);
        a.offset = Some(0x1000 + 4 * i as u64);
        a.values = v.to_vec();
        bound.push(a);
    }
    let loads = |slot: u32, n: usize| {
        (0..n)
            .map(|i| {
                let mut a = access(AccessKind::FormatBuffer, Op::Load, 4);
                a.slot = Some(slot);
                a.offset = Some(if i < 64 {
                    4 * i as u64
                } else {
                    0x1000 + 4 * (i as u64 - 64)
                });
                a
            })
            .collect::<Vec<_>>()
    };
    bound.extend(loads(0, 64 + floats.len() / 4));
    let mut unresolved = unorm.clone();
    unresolved.slot = 1;
    unresolved.written = false;
    unresolved.resolved = false;
    let s = sample(
        0x1000,
        vec![Contents {
            address: BASE,
            bytes: (0..=255u8).collect(),
        }],
        vec![
            reserve(BASE, BASE + 0x4000),
            dispatch(vec![unorm], bound, false),
            dispatch(vec![unresolved], loads(1, 64 + floats.len() / 4), true),
        ],
    );
    let reports = assert_agree(&s, &ctx, "R8G8B8A8_UNORM");
    assert_eq!(reports[1].mode, Mode::DeviceAddressed);
    assert!(matches!(reports[1].accesses[0].route, Route::Device { .. }));
    assert_eq!(reports[0].accesses.last().map(|a| a.values.len()), Some(4));
}

/// Many slots over one reservation, some inside others (O6 member offsets, one of them reached only
/// through indexed accesses), more than one replay dispatch binds: the job runs as several
/// dispatches in stream order.
#[test]
fn forty_slots_run_as_several_dispatches_in_order() {
    let Some(ctx) = context() else { return };
    let mut rng = Rng::new(5);
    let mut slots = Vec::new();
    for i in 0..40u32 {
        slots.push(Slot::new(i, BASE + 0x100 * u64::from(i), 0x100, i % 2 == 0));
    }
    // Slot 40 lies inside slot 0 and is reached only through indices (stride 16).
    let mut inner = Slot::new(40, BASE + 0x40, 0x80, true);
    inner.stride_bytes = 16;
    slots.push(inner);
    let mut accesses = Vec::new();
    for round in 0..3u64 {
        for s in &slots {
            let op = if s.written && round != 1 {
                Op::Store
            } else {
                Op::Load
            };
            let size = [1u32, 2, 4, 8, 16][rng.below(5) as usize];
            let mut a = access(AccessKind::UntypedBuffer, op, size);
            a.slot = Some(s.slot);
            if s.slot == 40 {
                a.index = Some(rng.below(7) as u32);
                a.offset = Some(rng.below(16 - u64::from(size) + 1));
            } else {
                a.offset = Some(rng.below(s.size_bytes - u64::from(size) + 1));
            }
            if op == Op::Store {
                a.values = (0..size.div_ceil(4))
                    .map(|_| rng.next_u64() as u32)
                    .collect();
            }
            accesses.push(a);
        }
    }
    let s = sample(
        0x1000,
        vec![Contents {
            address: BASE,
            bytes: random_bytes(&mut rng, 0x2800),
        }],
        vec![
            reserve(BASE, BASE + 0x4000),
            dispatch(slots, accesses, false),
        ],
    );
    assert_agree(&s, &ctx, "forty slots");
    let vk = VulkanBackend::on(Arc::clone(&ctx)).expect("a backend");
    let (_, engine) = s.run_on_keeping_engine(s.device.clone(), vk).expect("runs");
    assert!(
        engine.backend().dispatches() >= 3,
        "{} replay dispatches",
        engine.backend().dispatches()
    );
}

/// 256-byte host pages and a read-only page in the middle make 256-byte chunks (T1): accesses of 1 to
/// 64 bytes across every chunk edge, into the page left out (an escape in one chunk, a hit in the
/// other) and beyond the reservation (T4, T5).
#[test]
fn accesses_across_chunk_edges_agree() {
    let Some(ctx) = context() else { return };
    let mut rng = Rng::new(9);
    let end = BASE + 0x2000;
    let mut accesses = Vec::new();
    let mut edge = BASE + 0x100;
    while edge <= end {
        for size in [1u32, 2, 4, 8, 16, 64] {
            for back in [1u64, 3, 7, 33] {
                let Some(address) = edge.checked_sub(back.min(u64::from(size))) else {
                    continue;
                };
                for op in [Op::Load, Op::Store] {
                    let mut a = access(AccessKind::Global, op, size);
                    a.address = Some(address);
                    if op == Op::Store {
                        a.values = (0..size.div_ceil(4))
                            .map(|_| rng.next_u64() as u32)
                            .collect();
                    }
                    accesses.push(a);
                }
            }
        }
        edge += 0x100;
    }
    let s = sample(
        0x100,
        vec![Contents {
            address: BASE,
            bytes: random_bytes(&mut rng, 0x2000),
        }],
        vec![
            reserve(BASE, end),
            Step::Event(Event::Protect {
                range: ByteRange::new(BASE + 0x700, BASE + 0x800),
                readable: true,
                writable: false,
            }),
            dispatch(Vec::new(), accesses, true),
        ],
    );
    let reports = assert_agree(&s, &ctx, "chunk edges");
    let r = &reports[0];
    assert_eq!(r.table.as_ref().map(|t| t.chunk_bytes), Some(0x100));
    assert!(r.accesses.iter().any(|a| a.lookups.len() == 2 && a.escaped));
    assert!(
        r.accesses
            .iter()
            .any(|a| a.lookups.len() == 2 && !a.escaped)
    );
}

/// 4 KiB host pages and pages made read-only after a first dispatch imported the reservation whole:
/// the imports outlive the pieces, so the table keeps 64 KiB chunks and maps the chunks with pages
/// cut out by parts (a sixteenth of a chunk, a page, each). Accesses of 1 to 16 bytes
/// across every page edge (a part edge inside a chunk, or a chunk edge), into the pages left out
/// and beyond the reservation, loads and stores: the replay's lookups by (chunk, part), its bytes
/// through the first byte's part or the last's, its marks and their summary (C1), as the CPU's.
#[test]
fn a_chunk_mapped_by_parts_agrees() {
    let Some(ctx) = context() else { return };
    let mut rng = Rng::new(41);
    let end = BASE + 0x2_0000;
    let mut accesses = Vec::new();
    let mut edge = BASE + 0x1000;
    while edge <= end {
        for size in [1u32, 4, 8, 16] {
            for back in [1u64, 3, 4, 12] {
                let Some(address) = edge.checked_sub(back.min(u64::from(size))) else {
                    continue;
                };
                for op in [Op::Load, Op::Store] {
                    let mut a = access(AccessKind::Global, op, size);
                    a.address = Some(address);
                    if op == Op::Store {
                        a.values = (0..size.div_ceil(4))
                            .map(|_| rng.next_u64() as u32)
                            .collect();
                    }
                    accesses.push(a);
                }
            }
        }
        edge += 0x1000;
    }
    let protect = |start: u64, end: u64| {
        Step::Event(Event::Protect {
            range: ByteRange::new(start, end),
            readable: true,
            writable: false,
        })
    };
    let s = sample(
        0x1000,
        vec![Contents {
            address: BASE,
            bytes: random_bytes(&mut rng, 0x2_0000),
        }],
        vec![
            reserve(BASE, end),
            dispatch(Vec::new(), accesses.clone(), true),
            protect(BASE + 0x3000, BASE + 0x4000),
            protect(BASE + 0x9000, BASE + 0xb000),
            protect(BASE + 0x1_f000, BASE + 0x2_0000),
            dispatch(Vec::new(), accesses, true),
        ],
    );
    let reports = assert_agree(&s, &ctx, "chunks by parts");
    let r = &reports[1];
    assert_eq!(r.table.as_ref().map(|t| t.chunk_bytes), Some(0x1_0000));
    let hit_key = |l: &dispatchscope_core::report::LookupTrace| match l.outcome {
        dispatchscope_core::report::LookupOutcome::Hit { .. } => {
            l.probes.last().and_then(|p| p.key)
        }
        _ => None,
    };
    // Lookups that hit a slot reaching only some parts of its chunk.
    assert!(
        r.accesses
            .iter()
            .flat_map(|a| &a.lookups)
            .any(|l| hit_key(l).is_some_and(|k| k >> 48 != 0))
    );
    // Two lookups in one chunk (two parts of it), one of them a miss: an escape beside a hit.
    assert!(r.accesses.iter().any(|a| {
        matches!(&a.lookups[..], [l0, l1] if l0.guest_chunk == l1.guest_chunk
            && hit_key(l0).is_some() != hit_key(l1).is_some())
            && a.escaped
    }));
    assert!(
        r.accesses
            .iter()
            .any(|a| a.lookups.len() == 2 && !a.escaped)
    );
}

/// M4: a second dispatch over an unchanged generation makes no import, release or table upload.
#[test]
fn an_unchanged_generation_makes_no_vulkan_calls() {
    let Some(ctx) = context() else { return };
    let mut load = access(AccessKind::Global, Op::Load, 4);
    load.address = Some(BASE + 0x10);
    let step = dispatch(Vec::new(), vec![load], true);
    let Step::Dispatch(input) = &step else {
        return;
    };
    let vk = VulkanBackend::on(Arc::clone(&ctx)).expect("a backend");
    let mut engine =
        dispatchscope_core::Engine::new(DeviceLimits::default(), vk).expect("an engine");
    engine
        .apply(&Event::Reserve {
            range: ByteRange::new(BASE, BASE + 0x4000),
            readable: true,
            writable: true,
            committed: true,
            backing: Backing::Private,
            host_base: None,
        })
        .expect("reserve");
    let first = engine.dispatch(input).expect("first");
    assert!(first.mappings.as_ref().is_some_and(|m| m.remapped));
    let calls = engine.backend().calls();
    assert!(calls > 0);
    let second = engine.dispatch(input).expect("second");
    assert!(second.mappings.as_ref().is_some_and(|m| !m.remapped));
    assert_eq!(
        engine.backend().calls(),
        calls,
        "no import, release or table upload"
    );
    assert!(engine.backend().execute_calls() > 0);
    assert_quiet(&ctx);
}

/// The messenger counts what reaches it: the check that "no validation message" means something.
#[test]
fn the_validation_messenger_counts_messages() {
    if context().is_none() {
        return;
    }
    let ctx = match Context::new(&ContextOptions {
        validation: true,
        ..ContextOptions::default()
    }) {
        Ok(c) => c,
        Err(VkError::NoValidationLayer) if !required() => return,
        Err(e) => panic!("{e}"),
    };
    assert!(ctx.validating());
    assert_eq!(ctx.validation_messages(), 0);
    ctx.send_test_message(c"a message from the test");
    assert_eq!(ctx.validation_messages(), 1);
    assert!(ctx.validation_text()[0].contains("a message from the test"));
}

/// Without a Vulkan driver, opening the backend is a named error (run in a child process whose
/// loader is pointed at no driver).
#[test]
fn no_device_is_a_named_error() {
    if std::env::var_os("DISPATCHSCOPE_NO_DEVICE_CHILD").is_some() {
        let e = Context::new(&ContextOptions::default()).expect_err("no driver");
        let text = e.to_string();
        assert!(
            matches!(e, VkError::NoDevice { .. } | VkError::NoLoader { .. }),
            "{text}"
        );
        println!("CHILD-SAW: {text}");
        return;
    }
    let exe = std::env::current_exe().expect("the test binary");
    let out = std::process::Command::new(exe)
        .args(["--exact", "no_device_is_a_named_error", "--nocapture"])
        .env("DISPATCHSCOPE_NO_DEVICE_CHILD", "1")
        .env("VK_ICD_FILENAMES", "/nonexistent/no-driver.json")
        .env("VK_DRIVER_FILES", "/nonexistent/no-driver.json")
        .output()
        .expect("the child runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("CHILD-SAW: "), "{text}");
    eprintln!(
        "{}",
        text.lines().find(|l| l.contains("CHILD-SAW")).unwrap_or("")
    );
}

fn spirv_tools_installed() -> bool {
    let ok = std::process::Command::new("spirv-dis")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok && required() {
        panic!(
            "DISPATCHSCOPE_REQUIRE_VULKAN=1, but spirv-dis is not installed (Debian: spirv-tools)"
        );
    }
    if !ok {
        eprintln!("skipped: spirv-dis is not installed (Debian: spirv-tools)");
    }
    ok
}

/// The helper's SPIR-V, disassembled, against `tests/golden/lookup_helper.spvasm` (regenerate with
/// `UPDATE_GOLDEN=1`). The module is validated by spirv-val in `spirv/every_module_test.rs`.
#[test]
fn the_lookup_helper_matches_its_golden_disassembly() {
    if !spirv_tools_installed() {
        return;
    }
    let words = spirv::lookup_helper_module().expect("the helper module builds");
    let text = spirv::disassemble("lookup_helper", &words).expect("spirv-dis");
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/lookup_helper.spvasm");
    if std::env::var("UPDATE_GOLDEN").is_ok_and(|v| v == "1") {
        std::fs::write(&path, &text).expect("write the golden file");
        return;
    }
    let golden = std::fs::read_to_string(&path).unwrap_or_default();
    if golden != text {
        let first = golden
            .lines()
            .zip(text.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(golden.lines().count().min(text.lines().count()));
        panic!(
            "the lookup helper's disassembly changed at line {} (run with UPDATE_GOLDEN=1 if intended):\n  golden: {:?}\n  now:    {:?}",
            first + 1,
            golden.lines().nth(first).unwrap_or("(end)"),
            text.lines().nth(first).unwrap_or("(end)")
        );
    }
}

/// O6/O7, the point of binding holders: on the device, every slot a bound access goes through is a
/// descriptor of its holder's buffer at exactly the member offset the plan gave it (a multiple of
/// the device's minStorageBufferOffsetAlignment), in every shipped sample and some generated ones.
#[test]
fn o6_each_slot_binds_its_holder_at_its_member_offset() {
    let Some(ctx) = context() else { return };
    let mut samples: Vec<(String, Sample)> = shipped::SAMPLES
        .iter()
        .map(|(n, text)| {
            (
                (*n).to_owned(),
                Sample::from_json(text).expect("a valid sample"),
            )
        })
        .collect();
    samples.extend((0..20).map(|seed| {
        (
            format!("seed {seed}"),
            random_sample(seed, GenConfig::default()),
        )
    }));
    let align = ctx.info().min_storage_buffer_offset_alignment;
    let mut checked = 0;
    for (name, s) in samples {
        let vk = VulkanBackend::on(Arc::clone(&ctx)).expect("a backend");
        let mut engine = dispatchscope_core::Engine::new(s.device.clone(), vk).expect("an engine");
        let mut loaded = false;
        for step in &s.steps {
            match step {
                Step::Event(e) => {
                    engine.apply(e).expect("the event applies");
                }
                Step::Dispatch(d) => {
                    if !loaded {
                        for c in &s.contents {
                            engine.load_contents(c.address, &c.bytes);
                        }
                        loaded = true;
                    }
                    let r = engine.dispatch(d).expect("the dispatch runs");
                    if r.mode == Mode::Refused {
                        continue;
                    }
                    for &(slot, offset) in engine.backend().last_slot_bindings() {
                        let Some(slot) = slot else { continue };
                        let plan = r
                            .slots
                            .iter()
                            .find(|b| b.slot == slot)
                            .expect("a planned slot");
                        assert_eq!(
                            offset, plan.offset,
                            "{name}, dispatch {}: slot {slot}",
                            r.index
                        );
                        assert_eq!(offset % align, 0, "{name}: slot {slot}");
                        checked += 1;
                    }
                }
            }
        }
    }
    assert!(checked > 50, "{checked}");
    assert_quiet(&ctx);
}

/// T6 the way a discrete GPU takes it: the table in device-local memory the host cannot see,
/// uploaded through a staging copy (forced here, where lavapipe's one memory type is both).
#[test]
fn a_table_uploaded_through_a_staging_copy_agrees() {
    if context().is_none() {
        return;
    }
    let ctx = open(true).expect("a second context");
    for seed in 2000..2040 {
        let s = random_sample(seed, GenConfig::default());
        assert_agree(&s, &ctx, &format!("staged table, seed {seed}"));
    }
}

/// A device address is a raw host pointer on lavapipe: a table entry into a released import must be
/// refused by name, never followed by the shader.
#[test]
fn an_entry_into_a_released_import_is_refused_not_followed() {
    use dispatchscope_core::chunk_table::ChunkTable;
    use dispatchscope_core::exec::{Job, Planned, PlannedAccess};
    use dispatchscope_core::memory::GuestMemory;
    let Some(ctx) = context() else { return };
    let mut vk = VulkanBackend::on(Arc::clone(&ctx)).unwrap();
    let mut memory = GuestMemory::new(0x1000).unwrap();
    let base = vk
        .import(ByteRange::new(BASE, BASE + 0x1000), &memory)
        .unwrap();
    let table = ChunkTable::build(0x1000, 8, &[(BASE >> 12, base)]).unwrap();
    vk.place_table(&table, u64::MAX).unwrap();
    vk.release(base).unwrap();
    let mut load = access(AccessKind::Global, Op::Load, 4);
    load.address = Some(BASE);
    let job = Job {
        accesses: vec![PlannedAccess {
            access: &load,
            route: Planned::Device { address: BASE },
            format: None,
        }],
        holders: Vec::new(),
        lds_bytes: 0x1_0000,
        scratch_bytes_per_lane: 0x1000,
    };
    let e = vk.execute(&job, Some(&table), &mut memory).unwrap_err();
    assert!(
        e.to_string().contains("which no live import holds (T2)"),
        "{e}"
    );
    let e = vk.place_table(&table, u64::MAX).unwrap_err();
    assert!(e.to_string().contains("which no live import holds"), "{e}");
    assert!(
        vk.release(base)
            .unwrap_err()
            .to_string()
            .contains("no import starts at device address")
    );
    assert_quiet(&ctx);
}
