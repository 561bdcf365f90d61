//! The full-screen traversal pass on a Vulkan device (issue 14): the engine plans and maps as it
//! does for any device-addressed dispatch, the backend runs the translated program
//! ([`crate::spirv::traversal`]) over one helper variant, and the engine turns what the
//! instrumented helper wrote into the report's section ([`dispatchscope_core::instrument`]).
//!
//! [`HostSide`] is the engine's half: an [`Engine`] on the CPU reference holding the scene's guest
//! memory (reservations, contents), which maps it (M1–M5), plans the two output slots (O1–O7), and
//! stays the oracle: captured lanes replay through it ([`HostSide::replay_captured`]).
//! [`DevicePass`] is the device's half: the mapped pieces imported (M1) and the chunk table placed
//! (T6) through a [`VulkanBackend`]; for the raw variant, the scene's whole guest span in one import;
//! the holder and its write masks (O8, O9) with slot 1 bound at its member offset (O6); the mark
//! words (C1); the instrumentation buffer; one pipeline per variant; GPU timestamps around the
//! dispatch. [`masked_write_back`] is O8's write-back of the holder.

pub mod scene;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ash::vk;

use crate::buffer::Buf;
use crate::commands::Commands;
use crate::device::Context;
use crate::pipeline::Pipeline;
use crate::push::PushBlock;
use crate::spirv::library::{self, FLAT_ENTRY_BYTES, FLAT_PAGE_SHIFT, Shape, Variant};
use crate::spirv::traversal::{self, LOCAL_SIZE, Linking, Workload};
use crate::table::TablePush;
use crate::{VkError, VulkanBackend, check};
use dispatchscope_core::addr::ByteRange;
use dispatchscope_core::backend::Backend;
use dispatchscope_core::chunk_table::{ChunkTable, EMPTY_KEY, chunk_bytes_for, mark_buffer_words};
use dispatchscope_core::engine::{DeviceInstrumentation, DeviceRun, HolderRun, RanOn};
use dispatchscope_core::input::{
    Access, AccessKind, Backing, DeviceLimits, DispatchInput, Event, Op, Reason, Slot,
};
use dispatchscope_core::instrument::{
    self, Grid, InstrumentLayout, LaneSelection, Readback, SiteInfo,
};
use dispatchscope_core::report::{DispatchReport, InstrumentedReport, Route, SlotBinding};
use dispatchscope_core::{CpuBackend, Engine};

pub use scene::{Scene, SceneConfig};

/// A failure of the pass's own setup, as a [`VkError`].
fn pass_err(e: impl std::fmt::Display) -> VkError {
    VkError::Build {
        module: "pass",
        why: e.to_string(),
    }
}

/// The engine's half of the pass: guest memory, its mappings, the slots' plan, the oracle.
pub struct HostSide {
    /// The engine on the CPU reference.
    pub engine: Engine<CpuBackend>,
    /// The scene.
    pub scene: Scene,
    /// The slots' bindings as the engine planned them (O1–O7).
    pub slots: Vec<SlotBinding>,
    /// The report of the setup dispatch [`HostSide::new`] ran ([`HostSide::setup_input`]).
    pub setup: DispatchReport,
}

impl HostSide {
    /// Reserves and fills the scene's guest memory on a CPU engine, and runs one device-addressed
    /// dispatch there so that the engine maps it (M1–M5) and plans the two output slots.
    pub fn new(scene: Scene) -> Result<Self, VkError> {
        Self::with_limits(scene, DeviceLimits::default())
    }

    /// [`HostSide::new`] planning under `limits`: the device's own (`Context::limits`), so that
    /// every report names the device and the limits that ran the pass.
    pub fn with_limits(scene: Scene, limits: DeviceLimits) -> Result<Self, VkError> {
        let mut engine = Engine::cpu(limits).map_err(pass_err)?;
        for (r, e) in scene.regions.iter().zip(Self::events(&scene)) {
            engine.apply(&e).map_err(pass_err)?;
            if !r.bytes.is_empty() {
                engine
                    .try_load_contents(r.range.start, &r.bytes)
                    .map_err(pass_err)?;
            }
        }
        let report = engine
            .dispatch(&Self::setup_input(&scene))
            .map_err(pass_err)?;
        if !report.refusals.is_empty() {
            return Err(pass_err(format!(
                "the engine refused the pass: {}",
                report
                    .refusals
                    .iter()
                    .map(|r| r.message.clone())
                    .collect::<Vec<_>>()
                    .join("; ")
            )));
        }
        Ok(Self {
            slots: report.slots.clone(),
            setup: report,
            engine,
            scene,
        })
    }

    /// The memory events that make the scene's guest memory, one reservation per region, in
    /// order (each region's contents are loaded after its event): what a capture of the pass
    /// records before its dispatches.
    pub fn events(scene: &Scene) -> Vec<Event> {
        scene
            .regions
            .iter()
            .map(|r| Event::Reserve {
                range: r.range,
                readable: r.readable,
                writable: true,
                committed: true,
                backing: Backing::Private,
                host_base: None,
            })
            .collect()
    }

    /// The setup dispatch [`HostSide::new`] runs first: the pass's slots and one device-addressed
    /// load of the top level, so that the engine maps guest memory (M1–M5) and plans the slots.
    pub fn setup_input(scene: &Scene) -> DispatchInput {
        let mut probe = Access::new(AccessKind::Global, Op::Load, 4);
        probe.address = Some(scene::TOP_AT);
        Self::input(scene, vec![probe])
    }

    /// One frame's dispatch of the pass as the emulator hands it to the engine: the two written
    /// slots and no recorded access (the device runs the program, [`DevicePass`]).
    pub fn frame_input(&self) -> DispatchInput {
        Self::input(&self.scene, Vec::new())
    }

    /// The pass as a dispatch input: the two written slots (D953) and `accesses`, device-addressed
    /// (A1: D758, a branch on an execution mask the host cannot know).
    fn input(scene: &Scene, accesses: Vec<Access>) -> DispatchInput {
        let [a, b] = scene.slots();
        DispatchInput {
            program: traversal::site_pc(0),
            label: "ray traversal (issue 14)".into(),
            slots: vec![
                Slot::new(0, a.start, a.size_bytes(), true),
                Slot::new(1, b.start, b.size_bytes(), true),
            ],
            reasons: vec![Reason::D758],
            accesses,
            ..DispatchInput::default()
        }
    }

    /// The pass's dispatch with no access recorded: what the engine does for an instrumented
    /// dispatch on the emulator's thread when nothing changed (plan, mapping and table checked and
    /// kept, the report), the device's run left out.
    ///
    /// Without `slots` the input names no slot either: the engine's bookkeeping alone, without the
    /// CPU reference's O8 upload and write-back of the holder (a copy as large as the screen's
    /// output, which on the device is the dispatch's and the backend's work).
    pub fn dispatch_unchanged(&mut self, slots: bool) -> Result<DispatchReport, VkError> {
        let mut input = Self::input(&self.scene, Vec::new());
        if !slots {
            input.slots.clear();
        }
        self.engine.dispatch(&input).map_err(pass_err)
    }

    /// Slot `slot`'s byte offset in the holder (O6).
    pub fn member_offset(&self, slot: u32) -> u64 {
        self.slots
            .iter()
            .find(|b| b.slot == slot)
            .map_or(0, |b| b.offset)
    }

    /// Builds the report section from the instrumentation buffer's words.
    pub fn decode(
        &self,
        layout: InstrumentLayout,
        words: &[u32],
    ) -> Result<InstrumentedReport, VkError> {
        decode_section(&self.engine, &self.slots, self.scene.grid, layout, words)
    }

    /// The CPU reference's replay of the captured lanes: their accesses, in order, as one
    /// device-addressed dispatch on the engine (LDS and scratch through their flat addresses, P1;
    /// bound stores through their slots, O6–O9).
    pub fn replay_captured(
        &mut self,
        section: &InstrumentedReport,
    ) -> Result<DispatchReport, VkError> {
        let sites: Vec<SiteInfo> = traversal::sites();
        let accesses = section
            .captured
            .iter()
            .map(|c| {
                let kind = sites
                    .get(c.site as usize)
                    .map_or(AccessKind::Global, |s| s.kind);
                let mut a = Access::new(kind, c.op, c.size_bytes);
                a.workgroup = c.workgroup;
                a.wave = c.wave;
                a.lane = c.lane;
                a.pc = c.pc;
                match (&c.route, c.slot) {
                    (Route::Lds { offset }, _) => a.address = Some(0x8000_0000 << 32 | *offset),
                    (Route::Scratch { offset }, _) => a.address = Some(0x7000_0000 << 32 | *offset),
                    (_, Some((slot, offset))) => {
                        a.slot = Some(slot);
                        a.offset = Some(offset);
                    }
                    (Route::Device { address }, _) => a.address = Some(*address),
                    _ => {}
                }
                if c.op == Op::Store {
                    a.values = c.values.clone();
                }
                a
            })
            .collect();
        self.engine
            .dispatch(&Self::input(&self.scene, accesses))
            .map_err(pass_err)
    }
}

/// Builds an instrumented pass's report section from the instrumentation buffer's `words`, against
/// `engine`'s mappings and memory (each logged escape classified, T4) and the slots' plan: what
/// [`HostSide::decode`] does, for a caller that holds the engine apart from its [`HostSide`] (a
/// tap's dispatch closure).
pub fn decode_section(
    engine: &Engine<CpuBackend>,
    slots: &[SlotBinding],
    grid: Grid,
    layout: InstrumentLayout,
    words: &[u32],
) -> Result<InstrumentedReport, VkError> {
    let rb = Readback::read(layout, grid, words).map_err(pass_err)?;
    instrument::decode(
        &rb,
        &traversal::sites(),
        slots,
        engine.mappings(),
        engine.memory(),
    )
    .map_err(pass_err)
}

/// One frame of the pass on the device, as the emulator's dispatch: the engine's dispatch of
/// `input` (plan, mapping and table checked and kept, the report), the device's run of `variant`
/// over `selection`, and, for the instrumented variant, the report's section built from what the
/// device wrote. The report comes back with the run's figures and the time the section took to
/// build after the fence.
pub fn run_frame(
    engine: &mut Engine<CpuBackend>,
    input: &DispatchInput,
    _slots: &[SlotBinding],
    scene: &Scene,
    device: &mut DevicePass,
    variant: Variant,
    selection: &LaneSelection,
) -> Result<Frame, VkError> {
    // The emulator's own dispatch path: prepare (plan, map, table), the device's run of the
    // translated program, complete (O8 from the device's holder, its report listing a few words
    // and counting the rest, so its size does not grow with the screen). The engine runs nothing.
    let t_prepare = Instant::now();
    let prepared = engine.prepare(input).map_err(pass_err)?;
    let prepare = t_prepare.elapsed();
    let holders: Vec<u32> = prepared
        .bindings
        .iter()
        .filter(|b| b.holder == b.slot && b.written)
        .map(|b| b.slot)
        .collect();
    let run = match device.run(variant, selection, scene::CANARY_AT, scene) {
        Ok(r) => r,
        Err(e) => {
            let _ = engine.abandon(prepared.index);
            return Err(e);
        }
    };
    let started = Instant::now();
    let name = device.device_name();
    let t_complete = Instant::now();
    let (data, masks) = device.holder();
    let holder_runs = match holders[..] {
        [holder] => vec![HolderRun {
            slot: holder,
            data,
            masks,
        }],
        _ => Vec::new(),
    };
    // The instrumented variant's buffer goes to complete, which decodes it into the report's
    // section (the emulator's own instrumented pass, explained by the engine).
    let words = (variant == Variant::Instrumented).then(|| device.instrumentation_words());
    let sites = traversal::sites();
    let instrumentation = words.as_deref().map(|words| DeviceInstrumentation {
        layout: device.layout(),
        grid: scene.grid,
        words,
        sites: &sites,
    });
    let report = engine
        .complete(
            input,
            prepared,
            RanOn::Device(DeviceRun {
                marks: None,
                holders: holder_runs,
                ran_on: Some(&name),
                instrumentation,
            }),
        )
        .map_err(pass_err)?;
    let complete = t_complete.elapsed();
    Ok(Frame {
        report,
        run,
        section_build: if words.is_some() {
            started.elapsed()
        } else {
            Duration::ZERO
        },
        prepare,
        complete,
    })
}

/// The words of the output holder's write-back that a pass's report lists with their values; the
/// rest are counted and placed by their runs ([`Engine::write_back_from_device`]).
pub const DEVICE_LISTED_WORDS: usize = dispatchscope_core::engine::DEVICE_WORDS_LISTED;

/// What [`run_frame`] gives back.
#[derive(Clone, Debug)]
pub struct Frame {
    /// The dispatch's report, with the instrumented section for the instrumented variant.
    pub report: DispatchReport,
    /// The device's run.
    pub run: RunTime,
    /// The section's build on the host after the fence (zero without instrumentation).
    pub section_build: Duration,
    /// The engine's prepare on the emulator's thread.
    pub prepare: Duration,
    /// The engine's complete (O8 from the device's holder included).
    pub complete: Duration,
}

/// O8's write-back of a holder: every data word whose mask word is set is copied into `guest`
/// (the holder's guest bytes, as long as `data`). Returns the words written.
pub fn masked_write_back(data: &[u8], masks: &[u8], guest: &mut [u8]) -> usize {
    let mut n = 0;
    for ((d, m), g) in data
        .chunks_exact(4)
        .zip(masks.chunks_exact(4))
        .zip(guest.chunks_exact_mut(4))
    {
        if m != [0, 0, 0, 0] {
            g.copy_from_slice(d);
            n += 1;
        }
    }
    n
}

/// Dispatches one submission may time back to back ([`DevicePass::run_sequence`]).
pub const MAX_BACK_TO_BACK: u32 = 256;

/// One run's figures.
#[derive(Clone, Debug)]
pub struct RunTime {
    /// The (first) dispatch's time on the device (GPU timestamps where the queue has them).
    pub device: Duration,
    /// Each dispatch's time, in order (one for [`DevicePass::run`]).
    pub each: Vec<Duration>,
    /// Whether `device` came from GPU timestamps (else the host's clock around the submit).
    pub timestamps: bool,
}

/// Where the device reads guest memory from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuestMemoryOn {
    /// The mapped pieces imported from host memory (M1, VK_EXT_external_memory_host): what the
    /// backend does; on a discrete GPU every guest access crosses the bus.
    Imported,
    /// A device-local copy of the scene's guest span, the table pointing into it: what an emulator
    /// whose guest memory lives on the device would give, and the helper's cost without the bus.
    DeviceLocal,
}

/// One pipeline of the pass: the helper's variant, what the program does at each node, and the
/// shape of the helper's access path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Build {
    /// The helper's variant.
    pub variant: Variant,
    /// The program's work at each node.
    pub workload: Workload,
    /// The helper's access path.
    pub shape: Shape,
    /// The module with the helper inlined by `spirv-opt` ([`library::inline`]) before the driver
    /// sees it.
    pub inlined: bool,
}

impl Build {
    /// `variant` over the loads workload, shaped as shipped.
    pub const fn of(variant: Variant) -> Self {
        Self {
            variant,
            workload: Workload::Loads,
            shape: Shape::SHIPPED,
            inlined: false,
        }
    }

    /// This build with the helper inlined by `spirv-opt`.
    pub const fn inlined(self) -> Self {
        Self {
            inlined: true,
            ..self
        }
    }

    /// This build over `workload`.
    pub const fn on(self, workload: Workload) -> Self {
        Self { workload, ..self }
    }

    /// This build with its access path shaped as `shape`.
    pub const fn shaped(self, shape: Shape) -> Self {
        Self { shape, ..self }
    }

    /// Its name in a bench's table: the variant, the workload where it is not the loads', the
    /// shape where it is not the shipped one.
    pub fn name(&self) -> String {
        let mut n = self.variant.name().to_string();
        if self.workload != Workload::Loads {
            n = format!("{n}·{}", self.workload.name());
        }
        if self.shape == Shape::ISSUE_30 && self.variant != Variant::Raw {
            n = format!("{n} (issue 30's)");
        } else if self.shape != Shape::SHIPPED && self.variant != Variant::Raw {
            let sh = self.shape;
            let on = |b: bool| if b { "+" } else { "−" };
            let mut parts = vec![
                format!("{}fast", on(sh.fast_path)),
                format!("{}probe1", on(sh.first_probe_unrolled)),
                format!("{}cache", on(sh.lane_cache)),
            ];
            // Issue 42's changes, named only where they differ from the shipped shape.
            let s = Shape::SHIPPED;
            for (mine, shipped, name) in [
                (sh.cache_delta, s.cache_delta, "delta"),
                (sh.slow_path_call, s.slow_path_call, "slowcall"),
                (sh.lookup_call, s.lookup_call, "lookupcall"),
                (sh.cache_test32, s.cache_test32, "test32"),
                (sh.cache_span, s.cache_span, "span"),
            ] {
                if mine != shipped {
                    parts.push(format!("{}{name}", on(mine)));
                }
            }
            if self.variant == Variant::Instrumented {
                parts.push(format!("{}private", on(sh.private_counters)));
                for (mine, shipped, name) in [
                    (sh.lean, s.lean, "lean"),
                    (sh.derived_counts, s.derived_counts, "derived"),
                    (sh.subgroup_counts, s.subgroup_counts, "subgroup"),
                    (sh.subgroup_rare, s.subgroup_rare, "subgroup-rare"),
                    (sh.wide_atomics, s.wide_atomics, "wide"),
                ] {
                    if mine != shipped {
                        parts.push(format!("{}{name}", on(mine)));
                    }
                }
            }
            n = format!("{n} ({})", parts.join(" "));
        }
        if self.shape.leave_out != 0 {
            let parts = [
                (Shape::LEAVE_OUT_COUNTS, "counts"),
                (Shape::LEAVE_OUT_CAPTURE, "capture"),
                (Shape::LEAVE_OUT_ESCAPES, "escapes"),
                (Shape::LEAVE_OUT_WORKGROUP, "workgroup"),
                (Shape::LEAVE_OUT_PROBES, "probes"),
            ];
            let left: Vec<&str> = parts
                .iter()
                .filter(|(bit, _)| self.shape.leave_out & bit != 0)
                .map(|(_, name)| *name)
                .collect();
            n = format!("{n} without {}", left.join("+"));
        }
        if self.inlined {
            n = format!("{n} [inlined]");
        }
        n
    }
}

/// Issue 42's helper shapes, each change alone against the shipped helper.
pub fn helper_shapes() -> [(&'static str, Shape); 4] {
    let s = Shape::SHIPPED;
    let key = Shape {
        cache_span: false,
        ..s
    };
    [
        ("the lane cache as issue 41's key (its 64-bit test)", key),
        (
            "the key's test in 32-bit words",
            Shape {
                cache_test32: true,
                ..key
            },
        ),
        (
            "the key and the chunk's delta (stores uncached)",
            Shape {
                cache_delta: true,
                ..key
            },
        ),
        (
            "no lane cache",
            Shape {
                lane_cache: false,
                ..s
            },
        ),
    ]
}

/// Issue 42's instrumented pass, each of its changes undone (or the one shipped off done) alone,
/// then parts of it left out.
pub fn instrumented_shapes() -> [(&'static str, Shape); 8] {
    let s = Shape::SHIPPED;
    [
        (
            "the program counting its sites (derived counts)",
            Shape {
                derived_counts: true,
                ..s
            },
        ),
        (
            "derived counts, a workgroup atomic a lane (no subgroup reduction)",
            Shape {
                derived_counts: true,
                subgroup_counts: false,
                ..s
            },
        ),
        (
            "the rare counts reduced over the subgroup",
            Shape {
                subgroup_rare: true,
                ..s
            },
        ),
        (
            "a 32-bit flush with a carry (no 64-bit atomics)",
            Shape {
                wide_atomics: false,
                ..s
            },
        ),
        (
            "without probes",
            Shape {
                leave_out: Shape::LEAVE_OUT_PROBES,
                ..s
            },
        ),
        (
            "without escapes",
            Shape {
                leave_out: Shape::LEAVE_OUT_ESCAPES,
                ..s
            },
        ),
        (
            "without the workgroup's zeroing, barriers and flush",
            Shape {
                leave_out: Shape::LEAVE_OUT_WORKGROUP,
                ..s
            },
        ),
        (
            "without any count (probes, escapes, workgroup too)",
            Shape {
                leave_out: Shape::LEAVE_OUT_COUNTS
                    | Shape::LEAVE_OUT_ESCAPES
                    | Shape::LEAVE_OUT_WORKGROUP
                    | Shape::LEAVE_OUT_PROBES,
                ..s
            },
        ),
    ]
}

/// What one build's module weighs and what its pipeline took to make.
#[derive(Clone, Debug)]
pub struct PipelineStats {
    /// The build.
    pub build: Build,
    /// The module's bytes as the driver got them.
    pub module_bytes: usize,
    /// `vkCreateComputePipelines` (and its shader module) on this device.
    pub creation: Duration,
    /// The driver's statistics of the compiled shader (name, value), where it gives them
    /// (`DeviceInfo::pipeline_statistics`).
    pub driver: Vec<(String, String)>,
}

/// How [`DevicePass::with_options`] builds the pass.
#[derive(Clone, Debug)]
pub struct PassOptions {
    /// Each variant's module is the program linked with that variant's library by `spirv-link`
    /// ([`library::link`]) instead of the program with the helper emitted into it: the program
    /// built as the build's shape says (its derived counts), the library as `dispatchscope
    /// spirv-helper` writes it ([`Shape::LINKED`]), less what the device lacks ([`Shape::fit`]).
    pub linked: bool,
    /// Where the device reads guest memory from.
    pub on: GuestMemoryOn,
    /// The pipelines to make ([`DevicePass::run_builds`] runs them).
    pub builds: Vec<Build>,
    /// The flat page table's ([`Variant::Flat`]) span of address bits: `Some(40)` makes shadPS4's
    /// table (2^26 entries, 512 MiB); `None` fits it to the scene's highest page (a power of two
    /// of entries), for a device with less memory to spare.
    pub flat_address_bits: Option<u32>,
}

impl PassOptions {
    /// Every variant over the loads workload, the flat table fitted to the scene.
    pub fn new(linked: bool, on: GuestMemoryOn) -> Self {
        Self {
            linked,
            on,
            builds: Variant::ALL.into_iter().map(Build::of).collect(),
            flat_address_bits: None,
        }
    }
}

/// The flat page table of [`Variant::Flat`] over the pieces at `(guest, device)`: one entry a
/// 16 KiB page that lies whole in a piece, its device address; every other entry 0. Returns the
/// table's bytes and `log2` of its entries. `address_bits` sets its span (shadPS4's is 40 bits);
/// without, the span ends at the highest page a piece holds. An address past the span would be
/// aliased by the index mask, as in a table over a fixed span: an error here, before the device.
pub fn flat_table(
    pieces: &[(ByteRange, u64)],
    address_bits: Option<u32>,
) -> Result<(Vec<u8>, u32), VkError> {
    let page = 1u64 << FLAT_PAGE_SHIFT;
    let highest = pieces
        .iter()
        .map(|(g, _)| g.end.saturating_sub(1) >> FLAT_PAGE_SHIFT)
        .max()
        .unwrap_or(0);
    let log2 = match address_bits {
        Some(bits) => {
            let log2 = bits.saturating_sub(FLAT_PAGE_SHIFT);
            if log2 >= 40 || highest >> log2 != 0 {
                return Err(pass_err(format!(
                    "a guest page at {:#x} lies past the flat table's {bits}-bit span",
                    highest << FLAT_PAGE_SHIFT
                )));
            }
            log2
        }
        None => (highest + 1).next_power_of_two().trailing_zeros(),
    };
    let mut bytes = vec![0u8; (FLAT_ENTRY_BYTES << log2) as usize];
    for (g, device) in pieces {
        let first = g.start.div_ceil(page);
        let end = g.end / page;
        for p in first..end {
            let entry = device + ((p << FLAT_PAGE_SHIFT) - g.start);
            let at = (p * FLAT_ENTRY_BYTES) as usize;
            if let Some(dst) = bytes.get_mut(at..at + 8) {
                dst.copy_from_slice(&entry.to_le_bytes());
            }
        }
    }
    Ok((bytes, log2))
}

/// The device's half of the pass.
pub struct DevicePass {
    ctx: Arc<Context>,
    /// The mapped pieces and the table (T6).
    _backend: VulkanBackend,
    /// The raw variant's one import of the whole guest span.
    _raw_backend: VulkanBackend,
    /// The device-local copy of the guest span and its table ([`GuestMemoryOn::DeviceLocal`]).
    local: Vec<Buf>,
    table: ChunkTable,
    table_push: TablePush,
    raw_offset: u64,
    /// [`Variant::Flat`]'s page table (device-local) and `log2` of its entries.
    flat: Buf,
    flat_log2: u32,
    /// [`Variant::Flat`]'s fault bitmap, one bit a page of its table.
    faults: Buf,
    grid: Grid,
    layout: InstrumentLayout,
    holder: Buf,
    masks: Buf,
    /// Host-cached copies of the holder and its masks, copied on the device after the dispatch,
    /// where the holder lies in device-local memory the host maps uncached (a discrete GPU's BAR:
    /// reading 32 MB of it on the host took 14 s a frame on the H200); `None` where the host's
    /// reads of the holder itself are fast (lavapipe's one memory type).
    readback: Option<(Buf, Buf)>,
    marks: Buf,
    instr: Buf,
    /// The header variant's header: push words 16–31 in memory ([`library::HEADER_FIRST_WORD`]).
    header: Buf,
    member_offset: u64,
    pipelines: Vec<(Build, Pipeline)>,
    pipeline_stats: Vec<PipelineStats>,
    pool: vk::DescriptorPool,
    set: vk::DescriptorSet,
    queries: vk::QueryPool,
    commands: Commands,
    calls: u64,
}

/// A host-cached buffer the device copies what the host reads into, where the device has one that
/// is not device-local (system memory, cached on the host); `None` otherwise.
fn readback_buffer(
    ctx: &Context,
    bytes: u64,
    what: &'static str,
    calls: &mut u64,
) -> Result<Option<Buf>, VkError> {
    let cached = vk::MemoryPropertyFlags::HOST_VISIBLE
        | vk::MemoryPropertyFlags::HOST_COHERENT
        | vk::MemoryPropertyFlags::HOST_CACHED;
    let sysmem = ctx
        .info
        .memory_types
        .iter()
        .any(|f| f.contains(cached) && !f.contains(vk::MemoryPropertyFlags::DEVICE_LOCAL));
    if !sysmem {
        return Ok(None);
    }
    match ctx.buffer(bytes, what, cached, true, calls) {
        Ok(b) => Ok(Some(b)),
        Err(VkError::NoMemoryType { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Buffer memory for what the dispatch writes: device-local and host-visible where the device has
/// such a type, else host-visible.
fn output_buffer(
    ctx: &Context,
    bytes: u64,
    what: &'static str,
    calls: &mut u64,
) -> Result<Buf, VkError> {
    let fast = vk::MemoryPropertyFlags::DEVICE_LOCAL
        | vk::MemoryPropertyFlags::HOST_VISIBLE
        | vk::MemoryPropertyFlags::HOST_COHERENT;
    match ctx.buffer(bytes, what, fast, true, calls) {
        Ok(b) => Ok(b),
        Err(VkError::NoMemoryType { .. }) => ctx.host_buffer(bytes, what, calls),
        Err(e) => Err(e),
    }
}

impl DevicePass {
    /// Imports the host's mapped pieces, places the chunk table, imports the raw span, makes the
    /// buffers, the pipelines (the program with each variant emitted into it) and the descriptors.
    ///
    /// With `linked`, each variant's module is the program linked with that variant's library by
    /// `spirv-link` ([`library::link`]) instead of the program with the helper emitted into it.
    pub fn new(
        ctx: &Arc<Context>,
        host: &HostSide,
        layout: InstrumentLayout,
        linked: bool,
        on: GuestMemoryOn,
    ) -> Result<Self, VkError> {
        Self::with_options(ctx, host, layout, &PassOptions::new(linked, on))
    }

    /// [`DevicePass::new`] with the pipelines and the flat table `options` asks for.
    pub fn with_options(
        ctx: &Arc<Context>,
        host: &HostSide,
        layout: InstrumentLayout,
        options: &PassOptions,
    ) -> Result<Self, VkError> {
        let (linked, on) = (options.linked, options.on);
        let memory = host.engine.memory();
        let mut backend = VulkanBackend::on(Arc::clone(ctx))?;
        let pieces: Vec<ByteRange> = host.engine.mappings().pieces().map(|p| p.guest).collect();
        let mut entries = Vec::new();
        let mut imported = Vec::new();
        let chunk = chunk_bytes_for(pieces.iter().map(|p| (p.start, p.end)));
        let shift = chunk.trailing_zeros();
        for p in &pieces {
            let base = backend.import(*p, memory).map_err(pass_err)?;
            imported.push((*p, base));
            entries.extend(
                (p.start >> shift..p.end >> shift).map(|c| (c, base + ((c << shift) - p.start))),
            );
        }
        let probe_bound = DeviceLimits::default().probe_bound;
        let mut raw_backend = VulkanBackend::on(Arc::clone(ctx))?;
        let span = host.scene.raw_span();
        let mut calls = 0;
        let mut local = Vec::new();
        let (table, table_addr, raw_base, flat_pieces) = match on {
            GuestMemoryOn::Imported => {
                let table = ChunkTable::build(chunk, probe_bound, &entries).map_err(pass_err)?;
                let (table_addr, _) = backend.place_table(&table, u64::MAX).map_err(pass_err)?;
                let raw_base = raw_backend.import(span, memory).map_err(pass_err)?;
                (table, table_addr, raw_base, imported)
            }
            GuestMemoryOn::DeviceLocal => {
                let commands = Commands::new(ctx)?;
                let dl = vk::MemoryPropertyFlags::DEVICE_LOCAL;
                let copy = ctx.buffer(
                    span.size_bytes(),
                    "the guest span's copy",
                    dl,
                    false,
                    &mut calls,
                )?;
                let mut bytes = vec![0u8; span.size_bytes() as usize];
                memory
                    .read_bytes(span.start, &mut bytes)
                    .map_err(|e| VkError::HostRead(Box::new(e)))?;
                commands.upload(copy.raw, &bytes, &mut calls)?;
                // The same chunks, each at its place in the copy (a chunk outside the span is not
                // one the pass reads: it stays out, as unmapped).
                let entries: Vec<(u64, u64)> = entries
                    .iter()
                    .filter(|(c, _)| span.contains(c << shift))
                    .map(|&(c, _)| (c, copy.address + ((c << shift) - span.start)))
                    .collect();
                let table = ChunkTable::build(chunk, probe_bound, &entries).map_err(pass_err)?;
                let tbytes = table.to_le_bytes();
                let tbuf = ctx.buffer(
                    tbytes.len() as u64,
                    "the chunk table",
                    dl,
                    false,
                    &mut calls,
                )?;
                commands.upload(tbuf.raw, &tbytes, &mut calls)?;
                let (raw_base, table_addr) = (copy.address, tbuf.address);
                // The flat table's pages: the mapped pieces inside the span, in the copy.
                let flat_pieces = pieces
                    .iter()
                    .filter(|p| span.contains(p.start) && p.end <= span.end)
                    .map(|p| (*p, copy.address + (p.start - span.start)))
                    .collect();
                local.push(copy);
                local.push(tbuf);
                (table, table_addr, raw_base, flat_pieces)
            }
        };
        // The peer's flat page table (device-local) and its fault bitmap.
        let (flat_bytes, flat_log2) = flat_table(&flat_pieces, options.flat_address_bits)?;
        let flat = ctx.buffer(
            flat_bytes.len() as u64,
            "the flat page table",
            vk::MemoryPropertyFlags::DEVICE_LOCAL,
            false,
            &mut calls,
        )?;
        Commands::new(ctx)?.upload(flat.raw, &flat_bytes, &mut calls)?;
        drop(flat_bytes);
        let faults = output_buffer(
            ctx,
            (1u64 << flat_log2).div_ceil(32) * 4,
            "the flat table's fault bitmap",
            &mut calls,
        )?;
        let table_push = TablePush::of(&table, table_addr);
        let raw_offset = raw_base.wrapping_sub(span.start);
        let holder_bytes = host.scene.holder_bytes();
        let mut holder = output_buffer(ctx, holder_bytes, "the output holder", &mut calls)?;
        let masks = output_buffer(ctx, holder_bytes, "the holder's write masks", &mut calls)?;
        let readback = match (
            readback_buffer(ctx, holder_bytes, "the holder's host copy", &mut calls)?,
            readback_buffer(ctx, holder_bytes, "the masks' host copy", &mut calls)?,
        ) {
            (Some(h), Some(m)) => Some((h, m)),
            (h, m) => {
                for b in [h, m].into_iter().flatten() {
                    ctx.destroy_buffer(b, &mut calls);
                }
                None
            }
        };
        // O8: the holder uploaded once, from the widened range.
        let [slot0, _] = host.scene.slots();
        if let Some(dst) = holder.bytes_mut().get_mut(..holder_bytes as usize) {
            memory
                .read_bytes(slot0.start, dst)
                .map_err(|e| VkError::HostRead(Box::new(e)))?;
        }
        // C1: a mark word a slot, then the summary the helper sets beside each mark.
        let marks = output_buffer(
            ctx,
            4 * mark_buffer_words(table.capacity()) as u64,
            "the mark words",
            &mut calls,
        )?;
        // Device-local where the host can still map it: the counters' atomics stay in the
        // device's cache instead of crossing the bus.
        let instr = output_buffer(ctx, layout.bytes(), "the instrumentation", &mut calls)?;
        let header = output_buffer(
            ctx,
            library::HEADER_BYTES,
            "the helper's header",
            &mut calls,
        )?;
        let mut pipelines = Vec::new();
        let mut pipeline_stats = Vec::new();
        for build in &options.builds {
            // What the device lacks of the shape is left out (the build keeps its name).
            let info = ctx.info();
            let shape = build
                .shape
                .fit(info.subgroup_arithmetic, info.buffer_int64_atomics);
            let words = if linked {
                let program =
                    traversal::traversal_module_of(Linking::Import, build.workload, shape)?;
                let linked_shape =
                    Shape::LINKED.fit(info.subgroup_arithmetic, info.buffer_int64_atomics);
                library::link(
                    &program,
                    &library::helper_library_shaped(build.variant, linked_shape)?,
                )?
            } else {
                traversal::traversal_module_of(
                    Linking::Inline(build.variant),
                    build.workload,
                    shape,
                )?
            };
            let words = if build.inlined {
                library::inline(&words)?
            } else {
                words
            };
            // The capture's dispatch runs over the selected workgroups only, from a base.
            let flags = if build.variant == Variant::Capture {
                vk::PipelineCreateFlags::DISPATCH_BASE
            } else {
                vk::PipelineCreateFlags::empty()
            };
            let t = Instant::now();
            let (pipeline, driver) = Pipeline::with_statistics(ctx, &words, c"main", 2, flags)?;
            pipelines.push((*build, pipeline));
            pipeline_stats.push(PipelineStats {
                build: *build,
                module_bytes: 4 * words.len(),
                creation: t.elapsed(),
                driver,
            });
        }
        let d = &ctx.device;
        let sizes = [vk::DescriptorPoolSize::default()
            .ty(vk::DescriptorType::STORAGE_BUFFER)
            .descriptor_count(4)];
        // SAFETY: plain object creation; destroyed in Drop.
        let pool = check("vkCreateDescriptorPool", unsafe {
            d.create_descriptor_pool(
                &vk::DescriptorPoolCreateInfo::default()
                    .max_sets(1)
                    .pool_sizes(&sizes),
                None,
            )
        })?;
        let set_layout = pipelines
            .first()
            .map(|(_, p)| p.set_layout)
            .unwrap_or_default();
        // Every pipeline has the same set layout shape.
        let sets = crate::pipeline::allocate_sets(d, pool, &[set_layout])?;
        let set = sets.first().copied().unwrap_or_default();
        let member_offset = host.member_offset(1);
        let info = |b: &Buf, offset: u64| {
            vk::DescriptorBufferInfo::default()
                .buffer(b.raw)
                .offset(offset)
                .range(vk::WHOLE_SIZE)
        };
        let data = [info(&holder, 0), info(&holder, member_offset)];
        let mask_infos = [info(&masks, 0), info(&masks, member_offset)];
        let writes = [
            vk::WriteDescriptorSet::default()
                .dst_set(set)
                .dst_binding(0)
                .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                .buffer_info(&data),
            vk::WriteDescriptorSet::default()
                .dst_set(set)
                .dst_binding(1)
                .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                .buffer_info(&mask_infos),
        ];
        // SAFETY: the set and buffers are live, and no command buffer using the set is pending.
        unsafe { d.update_descriptor_sets(&writes, &[]) };
        // SAFETY: plain object creation; destroyed in Drop.
        let queries = check("vkCreateQueryPool", unsafe {
            d.create_query_pool(
                &vk::QueryPoolCreateInfo::default()
                    .query_type(vk::QueryType::TIMESTAMP)
                    .query_count(2 * MAX_BACK_TO_BACK),
                None,
            )
        })?;
        Ok(Self {
            ctx: Arc::clone(ctx),
            _backend: backend,
            _raw_backend: raw_backend,
            local,
            table,
            table_push,
            raw_offset,
            flat,
            flat_log2,
            faults,
            grid: host.scene.grid,
            layout,
            holder,
            masks,
            readback,
            marks,
            instr,
            header,
            member_offset,
            pipelines,
            pipeline_stats,
            pool,
            set,
            queries,
            commands: Commands::new(ctx)?,
            calls,
        })
    }

    /// The instrumentation buffer's layout.
    pub fn layout(&self) -> InstrumentLayout {
        self.layout
    }

    /// Slot 1's offset in the holder (O6).
    pub fn member_offset(&self) -> u64 {
        self.member_offset
    }

    /// Runs the pass once over `variant`: the instrumentation buffer reset to its first words
    /// (`selection`, the canary at `canary`), the masks and marks zeroed, one dispatch of
    /// `width / 8 × height / 8` workgroups, waited for. The instrumented variant, whose pass
    /// captures no lane ([`Shape::lean`]), is followed in the same submission by the capture's
    /// dispatch over the selected lanes' workgroups ([`Variant::Capture`]) where `selection`
    /// selects any; a pass made without the capture's pipeline refuses such a run.
    pub fn run(
        &mut self,
        variant: Variant,
        selection: &LaneSelection,
        canary: u64,
        scene: &Scene,
    ) -> Result<RunTime, VkError> {
        let capture = Build::of(Variant::Capture);
        let mut sequence = vec![Build::of(variant)];
        if variant == Variant::Instrumented
            && Shape::SHIPPED.lean
            && self.grid.selected_workgroups(selection).is_some()
        {
            // Lanes asked for and none captured would be a silent loss: refuse it by name.
            if !self.pipelines.iter().any(|(b, _)| *b == capture) {
                return Err(pass_err(format!(
                    "lanes to capture ({selection}), but the pass was made without the capture's pipeline ({})",
                    capture.name()
                )));
            }
            sequence.push(capture);
        }
        self.run_builds(&sequence, selection, canary, scene)
    }

    /// [`Self::run`] with one dispatch per entry of `sequence` (at most [`MAX_BACK_TO_BACK`]) in
    /// one submission, one after the other with a barrier between them, each over its variant and
    /// each timed: variants interleaved in one submission run at the same GPU clock, which separate
    /// submissions do not (the clock moves between them). The instrumentation accumulates.
    pub fn run_sequence(
        &mut self,
        sequence: &[Variant],
        selection: &LaneSelection,
        canary: u64,
        scene: &Scene,
    ) -> Result<RunTime, VkError> {
        let builds: Vec<Build> = sequence.iter().map(|&v| Build::of(v)).collect();
        self.run_builds(&builds, selection, canary, scene)
    }

    /// [`Self::run_sequence`] over builds ([`PassOptions::builds`]): each must be one the pass
    /// was made with. A [`Variant::Capture`] build runs over the workgroups that hold a lane
    /// `selection` selects ([`Grid::selected_workgroups`]), and over none (its two timestamps
    /// back to back) where it selects none.
    pub fn run_builds(
        &mut self,
        sequence: &[Build],
        selection: &LaneSelection,
        canary: u64,
        scene: &Scene,
    ) -> Result<RunTime, VkError> {
        let sequence = sequence
            .get(..sequence.len().min(MAX_BACK_TO_BACK as usize))
            .unwrap_or_default();
        let n = sequence.len() as u32;
        if n == 0 {
            return Err(pass_err("an empty sequence of dispatches"));
        }
        let words = instrument::initial_words(&self.layout, selection, canary, self.grid);
        for (dst, w) in self.instr.bytes_mut().chunks_exact_mut(4).zip(&words) {
            dst.copy_from_slice(&w.to_le_bytes());
        }
        self.masks.bytes_mut().fill(0);
        self.marks.bytes_mut().fill(0);
        // The flat variant's fault bitmap (8 MiB over 40 bits), only where it runs.
        if sequence.iter().any(|b| b.variant == Variant::Flat) {
            self.faults.bytes_mut().fill(0);
        }
        let mut w = PushBlock::default();
        self.table_push.write(&mut w);
        w.set64(traversal::push::TLAS, scene::TOP_AT);
        w.set64(traversal::push::INSTANCES, scene::INSTANCES_AT);
        w.set64(traversal::push::TILES, scene::TILES_AT);
        w.set(traversal::push::WIDTH, self.grid.width);
        w.set(traversal::push::HEIGHT, self.grid.height);
        w.set64(library::push::RAW_OFFSET, self.raw_offset);
        w.set64(library::push::MARKS, self.marks.address);
        w.set64(library::push::INSTRUMENT, self.instr.address);
        let _ = scene;
        let mut pipelines = Vec::with_capacity(sequence.len());
        for build in sequence {
            let Some((_, p)) = self.pipelines.iter().find(|(b, _)| b == build) else {
                return Err(pass_err(format!("no pipeline for {}", build.name())));
            };
            pipelines.push(p);
        }
        let d = &self.ctx.device;
        let cmd = self.commands.cmd;
        let bytes = w.bytes();
        // The header variant: the helper's words in the header, its address in words 30–31.
        let first = 4 * library::HEADER_FIRST_WORD as usize;
        if let (Some(dst), Some(src)) = (
            self.header.bytes_mut().get_mut(..bytes.len() - first),
            bytes.get(first..),
        ) {
            dst.copy_from_slice(src);
        }
        let mut h = w;
        h.set64(
            dispatchscope_core::rules::DEVICE_TABLE_PUSH_WORD,
            self.header.address,
        );
        let header_bytes = h.bytes();
        // The flat variant: its page table where the chunk table's address is, its entries'
        // `log2`, its fault bitmap where the marks' address is.
        let mut f = w;
        f.set64(library::push::FLAT_TABLE, self.flat.address);
        f.set(library::push::FLAT_ENTRIES_LOG2, self.flat_log2);
        f.set64(library::push::FAULTS, self.faults.address);
        let flat_bytes = f.bytes();
        let (gx, gy) = (self.grid.width / 8, self.grid.height / 8);
        let capture_box = self.grid.selected_workgroups(selection);
        let _ = LOCAL_SIZE;
        let timestamps = self.ctx.info().timestamp_valid_bits > 0;
        // SAFETY: the command buffer is not pending (every run waits); the pipeline, set, query
        // pool and buffers are live; the push block is the layout's 128 bytes.
        unsafe {
            crate::begin_one_time(d, cmd)?;
            d.cmd_reset_query_pool(cmd, self.queries, 0, 2 * n);
            for i in 0..n {
                if i > 0 {
                    d.cmd_pipeline_barrier(
                        cmd,
                        vk::PipelineStageFlags::COMPUTE_SHADER,
                        vk::PipelineStageFlags::COMPUTE_SHADER,
                        vk::DependencyFlags::empty(),
                        &[vk::MemoryBarrier::default()
                            .src_access_mask(vk::AccessFlags::SHADER_WRITE)
                            .dst_access_mask(
                                vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE,
                            )],
                        &[],
                        &[],
                    );
                }
                let pipeline = pipelines[i as usize];
                d.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, pipeline.raw);
                d.cmd_bind_descriptor_sets(
                    cmd,
                    vk::PipelineBindPoint::COMPUTE,
                    pipeline.layout,
                    0,
                    &[self.set],
                    &[],
                );
                let push = match sequence.get(i as usize).map(|b| b.variant) {
                    Some(Variant::Header) => &header_bytes,
                    Some(Variant::Flat) => &flat_bytes,
                    _ => &bytes,
                };
                d.cmd_push_constants(cmd, pipeline.layout, vk::ShaderStageFlags::COMPUTE, 0, push);
                if timestamps {
                    let q = 2 * i;
                    d.cmd_write_timestamp(
                        cmd,
                        vk::PipelineStageFlags::TOP_OF_PIPE,
                        self.queries,
                        q,
                    );
                }
                match sequence.get(i as usize).map(|b| b.variant) {
                    Some(Variant::Capture) => {
                        if let Some([x0, y0, x1, y1]) = capture_box {
                            d.cmd_dispatch_base(cmd, x0, y0, 0, x1 - x0, y1 - y0, 1);
                        }
                    }
                    _ => d.cmd_dispatch(cmd, gx, gy, 1),
                }
                if timestamps {
                    let q = 2 * i + 1;
                    d.cmd_write_timestamp(
                        cmd,
                        vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                        self.queries,
                        q,
                    );
                }
            }
            if let Some((h, m)) = &self.readback {
                // The holder and its masks into host-cached memory, for O8 on the host.
                d.cmd_pipeline_barrier(
                    cmd,
                    vk::PipelineStageFlags::COMPUTE_SHADER,
                    vk::PipelineStageFlags::TRANSFER,
                    vk::DependencyFlags::empty(),
                    &[vk::MemoryBarrier::default()
                        .src_access_mask(vk::AccessFlags::SHADER_WRITE)
                        .dst_access_mask(vk::AccessFlags::TRANSFER_READ)],
                    &[],
                    &[],
                );
                for (src, dst) in [(&self.holder, h), (&self.masks, m)] {
                    let region = vk::BufferCopy::default().size(src.size.min(dst.size));
                    d.cmd_copy_buffer(cmd, src.raw, dst.raw, &[region]);
                }
            }
        }
        // SAFETY: the command buffer is recording; every object it uses lives as long as `self`.
        let host_time = unsafe {
            self.commands.finish_for_host(
                vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER,
                vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::TRANSFER_WRITE,
            )
        }?;
        if !timestamps {
            let each = host_time / n;
            return Ok(RunTime {
                device: each,
                each: vec![each; n as usize],
                timestamps: false,
            });
        }
        let mut ticks = vec![0u64; 2 * n as usize];
        // SAFETY: both queries were written by the submit waited for above.
        check("vkGetQueryPoolResults", unsafe {
            d.get_query_pool_results(
                self.queries,
                0,
                &mut ticks,
                vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
            )
        })?;
        let bits = self.ctx.info().timestamp_valid_bits;
        let mask = if bits >= 64 {
            u64::MAX
        } else {
            (1u64 << bits) - 1
        };
        let period = self.ctx.info().timestamp_period_ns;
        let each: Vec<Duration> = ticks
            .chunks_exact(2)
            .map(|t| {
                let dt = t[1].wrapping_sub(t[0]) & mask;
                Duration::from_nanos((dt as f64 * period) as u64)
            })
            .collect();
        Ok(RunTime {
            device: each.first().copied().unwrap_or_default(),
            each,
            timestamps: true,
        })
    }

    /// The instrumentation buffer's words, as the last run left them.
    pub fn instrumentation_words(&self) -> Vec<u32> {
        self.instr
            .bytes()
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    /// The device's name, as reports give it.
    pub fn device_name(&self) -> String {
        self.ctx.device_name()
    }

    /// The holder's data and write-mask bytes (O8, O9), as the last run left them.
    pub fn holder(&self) -> (&[u8], &[u8]) {
        match &self.readback {
            Some((h, m)) => (h.bytes(), m.bytes()),
            None => (self.holder.bytes(), self.masks.bytes()),
        }
    }

    /// C1: the guest chunks the last run's device stores marked, with their mark counts.
    pub fn marked_chunks(&self) -> Vec<(ByteRange, u32)> {
        let chunk = self.table.chunk_bytes();
        self.table
            .slots()
            .iter()
            .enumerate()
            .filter(|(_, s)| s.guest_chunk != EMPTY_KEY)
            .filter_map(|(i, s)| {
                let n = self.marks.word(i);
                let start = s.chunk() * chunk;
                (n > 0).then(|| (ByteRange::new(start, start + chunk), n))
            })
            .collect()
    }

    /// The guest pages the last run's flat variant found unmapped, from its fault bitmap (each
    /// page's first byte; faults the bitmap's plain read-modify-write lost are not there).
    pub fn flat_faults(&self) -> Vec<u64> {
        let mut pages = Vec::new();
        for (w, c) in self.faults.bytes().chunks_exact(4).enumerate() {
            let bits = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            for b in 0..32 {
                if bits >> b & 1 == 1 {
                    pages.push(((w as u64) * 32 + b) << FLAT_PAGE_SHIFT);
                }
            }
        }
        pages
    }

    /// Each build's module size and pipeline creation time, in the order they were made.
    pub fn pipeline_stats(&self) -> &[PipelineStats] {
        &self.pipeline_stats
    }

    /// The flat page table's bytes on the device (`8 << log2` entries).
    pub fn flat_table_bytes(&self) -> u64 {
        FLAT_ENTRY_BYTES << self.flat_log2
    }

    /// Vulkan calls made setting up.
    pub fn setup_calls(&self) -> u64 {
        self.calls
    }
}

impl Drop for DevicePass {
    fn drop(&mut self) {
        // A run whose wait failed (a timeout) may still be executing: nothing is freed under it.
        self.ctx.wait_queue_idle();
        let d = &self.ctx.device;
        // SAFETY: every submit was waited for, so nothing uses these objects now.
        unsafe {
            d.destroy_query_pool(self.queries, None);
            d.destroy_descriptor_pool(self.pool, None);
        }
        for (_, p) in &self.pipelines {
            p.destroy(d);
        }
        let mut calls = 0;
        for b in std::mem::take(&mut self.local) {
            self.ctx.destroy_buffer(b, &mut calls);
        }
        if let Some((h, m)) = self.readback.take() {
            self.ctx.destroy_buffer(h, &mut calls);
            self.ctx.destroy_buffer(m, &mut calls);
        }
        for b in [
            std::mem::replace(&mut self.holder, Buf::null()),
            std::mem::replace(&mut self.masks, Buf::null()),
            std::mem::replace(&mut self.marks, Buf::null()),
            std::mem::replace(&mut self.instr, Buf::null()),
            std::mem::replace(&mut self.header, Buf::null()),
            std::mem::replace(&mut self.flat, Buf::null()),
            std::mem::replace(&mut self.faults, Buf::null()),
        ] {
            self.ctx.destroy_buffer(b, &mut calls);
        }
    }
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::print_stdout,
    reason = "a test that prints what the driver says of each build"
)]
mod tests {
    use super::*;

    /// What a driver's compiler makes of each build of the pass (registers, instructions, its
    /// own latency estimate), without running it: where no GPU is at hand, RADV's compiler for
    /// a device it only pretends to have (Mesa's null device, RDNA2 as the PS5 has it:
    /// `XDG_RUNTIME_DIR=… RADV_FORCE_FAMILY=navi21
    /// VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/radeon_icd.x86_64.json
    /// DISPATCHSCOPE_SHADER_STATS=1 cargo test -p dispatchscope-vk --lib --features demo
    /// driver_statistics -- --nocapture`). The first device with
    /// VK_KHR_pipeline_executable_properties is asked; nothing runs without the variable.
    #[test]
    fn driver_statistics_of_every_build() {
        if std::env::var("DISPATCHSCOPE_SHADER_STATS").is_err() {
            eprintln!("skipped: DISPATCHSCOPE_SHADER_STATS is not set");
            return;
        }
        // SAFETY: loading the system's Vulkan loader, as every Vulkan program starts.
        let entry = unsafe { ash::Entry::load() }.unwrap();
        let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_2);
        // SAFETY: a plain instance; destroyed at the end.
        let instance = unsafe {
            entry.create_instance(
                &vk::InstanceCreateInfo::default().application_info(&app),
                None,
            )
        }
        .unwrap();
        // SAFETY: plain queries of the instance.
        let pd = unsafe { instance.enumerate_physical_devices() }
            .unwrap()
            .into_iter()
            .find(|&pd| {
                // SAFETY: a plain query of the device.
                unsafe { instance.enumerate_device_extension_properties(pd) }
                    .unwrap_or_default()
                    .iter()
                    .any(|e| {
                        e.extension_name_as_c_str().ok()
                            == Some(ash::khr::pipeline_executable_properties::NAME)
                    })
            })
            .expect("a device with VK_KHR_pipeline_executable_properties");
        // SAFETY: a plain query of the device.
        let name = unsafe { instance.get_physical_device_properties(pd) }
            .device_name_as_c_str()
            .map(|c| c.to_string_lossy().into_owned())
            .unwrap_or_default();
        let prio = [1.0f32];
        let queues = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(0)
            .queue_priorities(&prio)];
        let features = vk::PhysicalDeviceFeatures::default()
            .shader_int64(true)
            .shader_storage_buffer_array_dynamic_indexing(true);
        let mut f12 = vk::PhysicalDeviceVulkan12Features::default()
            .buffer_device_address(true)
            .shader_buffer_int64_atomics(true);
        let mut executables = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default()
            .pipeline_executable_info(true);
        let exts = [ash::khr::pipeline_executable_properties::NAME.as_ptr()];
        let create = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queues)
            .enabled_extension_names(&exts)
            .enabled_features(&features)
            .push_next(&mut f12)
            .push_next(&mut executables);
        // SAFETY: the create info lives across the call; the device is destroyed at the end.
        let device = unsafe { instance.create_device(pd, &create, None) }.unwrap();
        let pe = ash::khr::pipeline_executable_properties::Device::new(&instance, &device);
        let mut builds = Vec::new();
        for w in Workload::ALL {
            for v in [Variant::Raw, Variant::Helper, Variant::Flat] {
                builds.push(Build::of(v).on(w));
            }
            for (_, shape) in helper_shapes() {
                builds.push(Build::of(Variant::Helper).on(w).shaped(shape));
            }
            builds.push(
                Build::of(Variant::Instrumented)
                    .on(w)
                    .shaped(Shape::ISSUE_30),
            );
            builds.push(Build::of(Variant::Instrumented).on(w));
            for (_, shape) in instrumented_shapes() {
                builds.push(Build::of(Variant::Instrumented).on(w).shaped(shape));
            }
            builds.push(Build::of(Variant::Capture).on(w));
        }
        println!("{name}");
        for b in builds {
            let words =
                traversal::traversal_module_of(Linking::Inline(b.variant), b.workload, b.shape)
                    .unwrap();
            let p = Pipeline::build(
                &device,
                &words,
                c"main",
                2,
                vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR,
            )
            .unwrap();
            let info = vk::PipelineExecutableInfoKHR::default()
                .pipeline(p.raw)
                .executable_index(0);
            // SAFETY: the pipeline was made with CAPTURE_STATISTICS on a device with the
            // extension enabled.
            let stats = unsafe { pe.get_pipeline_executable_statistics(&info) }.unwrap();
            let stats: Vec<String> = stats
                .iter()
                .map(|st| {
                    let n = st
                        .name_as_c_str()
                        .map(|c| c.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    // SAFETY: the union's member is the one `format` names.
                    let v = unsafe {
                        match st.format {
                            vk::PipelineExecutableStatisticFormatKHR::UINT64 => {
                                st.value.u64.to_string()
                            }
                            vk::PipelineExecutableStatisticFormatKHR::INT64 => {
                                st.value.i64.to_string()
                            }
                            vk::PipelineExecutableStatisticFormatKHR::BOOL32 => {
                                st.value.b32.to_string()
                            }
                            _ => st.value.f64.to_string(),
                        }
                    };
                    format!("{n} {v}")
                })
                .collect();
            println!(
                "{:<72} {:>6} words; {}",
                b.name(),
                words.len(),
                stats.join(", ")
            );
            p.destroy(&device);
        }
        // SAFETY: every pipeline is destroyed; nothing was submitted.
        unsafe {
            device.destroy_device(None);
            instance.destroy_instance(None);
        }
    }
}
