//! Microbenchmarks of the lookup helper (T5) on a Vulkan device, the import cost of M1–M5, and the
//! inputs of the helper's CUDA port (`core/benches/cuda/`), written from the engine's own table.
//!
//! Three kernels do the same random 4-byte loads over guest memory mapped in many pieces: through
//! the helper (guest addresses in, two lookups per load as T5 says), by raw device address (device
//! addresses in: the limit, no translation at all), and through a flat table of 4 KiB pages (the
//! shadPS4-style anchor: one load per translation, a table as large as the guest span). Each
//! invocation xors what it loads; the three results must agree, so every figure is also a check.
//! Nothing here is used by the engine.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ash::vk;

use crate::device::{Buf, Commands, Context};
use crate::spirv::{self, BENCH_LOCAL_SIZE, BenchKernel, push};
use crate::{VkError, VulkanBackend, check};
use dispatchscope_core::addr::ByteRange;
use dispatchscope_core::backend::Backend;
use dispatchscope_core::chunk_table::{ChunkTable, chunk_bytes_for};
use dispatchscope_core::engine::Engine;
use dispatchscope_core::input::{Access, AccessKind, DeviceLimits, DispatchInput, Op, Reason};
use dispatchscope_core::input::{Backing, Event};
use dispatchscope_core::memory::GuestMemory;
use dispatchscope_formats::generate::Rng;

/// Where the benchmark's guest pieces start.
pub const GUEST_BASE: u64 = 0x10_0000_0000;

/// How guest memory is cut into pieces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayoutConfig {
    /// Bytes mapped in all.
    pub mapped_bytes: u64,
    /// The smallest piece.
    pub min_piece_bytes: u64,
    /// The largest piece.
    pub max_piece_bytes: u64,
    /// The largest unmapped gap between pieces.
    pub max_gap_bytes: u64,
    /// Every piece start, size and gap is a multiple of this (the finest mapping alignment, T1).
    pub align_bytes: u64,
    /// The seed.
    pub seed: u64,
}

impl LayoutConfig {
    /// 1 GiB in pieces of 4 KiB to 1 MiB, 4 KiB-aligned, with gaps: chunks of 4 KiB.
    pub fn gib_4k() -> Self {
        Self {
            mapped_bytes: 1 << 30,
            min_piece_bytes: 4 << 10,
            max_piece_bytes: 1 << 20,
            max_gap_bytes: 64 << 10,
            align_bytes: 4 << 10,
            seed: 1,
        }
    }

    /// 1 GiB in pieces of 4 KiB to 1 MiB, 4 KiB-aligned, scattered with gaps of up to 16 MiB over
    /// a guest span of about 17 GiB: what a flat page table pays for.
    pub fn gib_scattered() -> Self {
        Self {
            max_gap_bytes: 16 << 20,
            seed: 3,
            ..Self::gib_4k()
        }
    }

    /// 1 GiB in pieces of 64 KiB to 4 MiB, 64 KiB-aligned, with gaps: chunks of 64 KiB.
    pub fn gib_64k() -> Self {
        Self {
            mapped_bytes: 1 << 30,
            min_piece_bytes: 64 << 10,
            max_piece_bytes: 4 << 20,
            max_gap_bytes: 1 << 20,
            align_bytes: 64 << 10,
            seed: 2,
        }
    }
}

/// The guest pieces of a layout, in guest order.
pub fn layout(cfg: &LayoutConfig) -> Vec<ByteRange> {
    let mut rng = Rng::new(cfg.seed);
    let a = cfg.align_bytes.max(1);
    let mut pieces = Vec::new();
    let (mut at, mut left) = (GUEST_BASE, cfg.mapped_bytes);
    while left > 0 {
        let span = (cfg.max_piece_bytes - cfg.min_piece_bytes) / a;
        let size = (cfg.min_piece_bytes + rng.below(span + 1) * a).min(left);
        pieces.push(ByteRange::new(at, at + size));
        left -= size;
        at += size + (1 + rng.below(cfg.max_gap_bytes / a + 1)) * a;
    }
    pieces
}

/// The 32-bit word the benchmark stores at guest address `a` (4-byte aligned).
pub fn pattern(a: u64) -> u32 {
    ((a >> 2) as u32).wrapping_mul(0x9E37_79B9) ^ 0x5bd1_e995
}

/// N random 4-byte-aligned guest addresses inside the pieces (a piece chosen in proportion to its
/// size).
pub fn random_loads(pieces: &[ByteRange], n: usize, seed: u64) -> Vec<u64> {
    let total: u64 = pieces.iter().map(ByteRange::size_bytes).sum();
    let mut ends = Vec::with_capacity(pieces.len());
    let mut acc = 0;
    for p in pieces {
        acc += p.size_bytes();
        ends.push(acc);
    }
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|_| {
            let x = rng.below(total / 4) * 4;
            let i = ends.partition_point(|&e| e <= x);
            let before = if i == 0 { 0 } else { ends[i - 1] };
            pieces.get(i).map_or(GUEST_BASE, |p| p.start + (x - before))
        })
        .collect()
}

/// What the lookup benchmark runs.
#[derive(Clone, Copy, Debug)]
pub struct LookupConfig {
    /// The guest pieces.
    pub layout: LayoutConfig,
    /// Loads per run.
    pub loads: u32,
    /// Invocations per run (a multiple of 64); each does `loads / invocations` loads.
    pub invocations: u32,
    /// Timed runs per kernel (after one warm-up).
    pub repeats: u32,
    /// T2's probe bound.
    pub probe_bound: u32,
}

impl Default for LookupConfig {
    fn default() -> Self {
        Self {
            layout: LayoutConfig::gib_4k(),
            loads: 1 << 22,
            invocations: 1 << 14,
            repeats: 5,
            probe_bound: DeviceLimits::default().probe_bound,
        }
    }
}

/// One kernel's time.
#[derive(Clone, Copy, Debug)]
pub struct KernelTime {
    /// The fastest run.
    pub min: Duration,
    /// The median run.
    pub median: Duration,
    /// Nanoseconds per load, from the median.
    pub ns_per_load: f64,
}

/// The lookup benchmark's figures.
#[derive(Clone, Debug)]
pub struct LookupFigures {
    /// The device.
    pub device: String,
    /// Pieces imported.
    pub pieces: usize,
    /// Bytes mapped.
    pub mapped_bytes: u64,
    /// Chunk size (T1).
    pub chunk_bytes: u64,
    /// Table slots and bytes.
    pub table_slots: usize,
    /// Bytes of the flat page table (the guest span / 4 KiB × 8).
    pub flat_table_bytes: u64,
    /// Mean probes of a hit (T2).
    pub mean_probes_hit: f64,
    /// Loads per run.
    pub loads: u32,
    /// Through the helper.
    pub helper: KernelTime,
    /// By raw device address.
    pub raw: KernelTime,
    /// Through the flat table.
    pub flat: KernelTime,
    /// How long importing the pieces took (mirrors included).
    pub import: Duration,
}

impl LookupFigures {
    /// helper / raw, by median.
    pub fn helper_over_raw(&self) -> f64 {
        self.helper.median.as_secs_f64() / self.raw.median.as_secs_f64()
    }

    /// flat / raw, by median.
    pub fn flat_over_raw(&self) -> f64 {
        self.flat.median.as_secs_f64() / self.raw.median.as_secs_f64()
    }

    /// helper / flat, by median.
    pub fn helper_over_flat(&self) -> f64 {
        self.helper.median.as_secs_f64() / self.flat.median.as_secs_f64()
    }
}

/// A command pool, a command buffer and a fence of the benchmark's own.
struct Runner {
    ctx: Arc<Context>,
    commands: Commands,
}

impl Runner {
    fn new(ctx: &Arc<Context>) -> Result<Self, VkError> {
        Ok(Runner {
            ctx: Arc::clone(ctx),
            commands: Commands::new(ctx)?,
        })
    }

    /// Runs `groups` workgroups of `pipeline` with `words` as the push block, and times it.
    fn run(
        &self,
        pipeline: &crate::device::Pipeline,
        words: &[u32; 32],
        groups: u32,
    ) -> Result<Duration, VkError> {
        let d = &self.ctx.device;
        let cmd = self.commands.cmd;
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        // SAFETY: the command buffer is not pending (every run waits), the pipeline is live, and
        // the push block is the layout's 128 bytes.
        unsafe {
            crate::begin_one_time(d, cmd)?;
            d.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, pipeline.raw);
            d.cmd_push_constants(
                cmd,
                pipeline.layout,
                vk::ShaderStageFlags::COMPUTE,
                0,
                &bytes,
            );
            d.cmd_dispatch(cmd, groups, 1, 1);
            d.cmd_pipeline_barrier(
                cmd,
                vk::PipelineStageFlags::COMPUTE_SHADER,
                vk::PipelineStageFlags::HOST,
                vk::DependencyFlags::empty(),
                &[vk::MemoryBarrier::default()
                    .src_access_mask(vk::AccessFlags::SHADER_WRITE)
                    .dst_access_mask(vk::AccessFlags::HOST_READ)],
                &[],
                &[],
            );
            check("vkEndCommandBuffer", d.end_command_buffer(cmd))?;
        }
        let started = Instant::now();
        self.commands.submit_and_wait()?;
        Ok(started.elapsed())
    }
}

fn write_u64s(buf: &mut Buf, values: &[u64]) {
    for (dst, v) in buf.bytes_mut().chunks_exact_mut(8).zip(values) {
        dst.copy_from_slice(&v.to_le_bytes());
    }
}

fn times(mut runs: Vec<Duration>, loads: u32) -> KernelTime {
    runs.sort();
    let median = runs.get(runs.len() / 2).copied().unwrap_or_default();
    KernelTime {
        min: runs.first().copied().unwrap_or_default(),
        median,
        ns_per_load: median.as_secs_f64() * 1e9 / f64::from(loads.max(1)),
    }
}

/// The lookup benchmark: imports the layout's pieces through [`VulkanBackend`], fills them with
/// [`pattern`], places the engine's chunk table, and times the three kernels. Errors if their
/// results disagree.
pub fn lookup_bench(ctx: &Arc<Context>, cfg: &LookupConfig) -> Result<LookupFigures, VkError> {
    let pieces = layout(&cfg.layout);
    let mut backend = VulkanBackend::on(Arc::clone(ctx))?;
    let memory = GuestMemory::new(0x1000).map_err(|e| VkError::Build {
        module: "bench",
        why: e.to_string(),
    })?;
    let started = Instant::now();
    let mut bases = Vec::with_capacity(pieces.len());
    for p in &pieces {
        let base = backend.import(*p, &memory).map_err(|e| VkError::Build {
            module: "bench",
            why: e.to_string(),
        })?;
        bases.push(base);
    }
    let import = started.elapsed();
    for (p, &base) in pieces.iter().zip(&bases) {
        if let Some(m) = backend.mirror_mut(base) {
            for (i, w) in m.chunks_exact_mut(4).enumerate() {
                w.copy_from_slice(&pattern(p.start + 4 * i as u64).to_le_bytes());
            }
        }
    }
    let chunk = chunk_bytes_for(pieces.iter().map(|p| (p.start, p.end)));
    let shift = chunk.trailing_zeros();
    let entries: Vec<(u64, u64)> = pieces
        .iter()
        .zip(&bases)
        .flat_map(|(p, &b)| {
            (p.start >> shift..p.end >> shift).map(move |c| (c, b + ((c << shift) - p.start)))
        })
        .collect();
    let table =
        ChunkTable::build(chunk, cfg.probe_bound, &entries).map_err(|e| VkError::Build {
            module: "bench",
            why: e.to_string(),
        })?;
    let (table_addr, _) = backend
        .place_table(&table, u64::MAX)
        .map_err(|e| VkError::Build {
            module: "bench",
            why: e.to_string(),
        })?;
    // The flat table: one u64 per 4 KiB page of the guest span, 0 where unmapped.
    let first_page = GUEST_BASE >> 12;
    let last = pieces.last().map_or(GUEST_BASE, |p| p.end);
    let n_pages = (last >> 12) - first_page;
    let mut flat = vec![0u64; n_pages as usize];
    for (p, &b) in pieces.iter().zip(&bases) {
        for page in (p.start >> 12)..(p.end >> 12) {
            if let Some(e) = flat.get_mut((page - first_page) as usize) {
                *e = b + ((page << 12) - p.start);
            }
        }
    }
    let guest = random_loads(&pieces, cfg.loads as usize, cfg.layout.seed ^ 0xabcdef);
    let device: Vec<u64> = guest
        .iter()
        .map(|&a| table.device_from_guest(a).unwrap_or(0))
        .collect();
    let mut calls = 0;
    let mut guest_buf = ctx.host_buffer(guest.len() as u64 * 8, "bench addresses", &mut calls)?;
    let mut device_buf = ctx.host_buffer(guest.len() as u64 * 8, "bench addresses", &mut calls)?;
    let mut flat_buf = ctx.host_buffer(n_pages * 8, "the flat table", &mut calls)?;
    let out_buf = ctx.host_buffer(u64::from(cfg.invocations) * 4, "bench results", &mut calls)?;
    write_u64s(&mut guest_buf, &guest);
    write_u64s(&mut device_buf, &device);
    write_u64s(&mut flat_buf, &flat);
    let words = spirv::bench_module()?;
    let runner = Runner::new(ctx)?;
    let per = cfg.loads / cfg.invocations.max(1);
    let mut results = Vec::new();
    let mut figures = Vec::new();
    for kernel in [BenchKernel::Helper, BenchKernel::Raw, BenchKernel::Flat] {
        let pipeline = ctx.pipeline(&words, kernel.entry(), 1)?;
        let mut w = [0u32; 32];
        let put64 = |w: &mut [u32; 32], at: u32, v: u64| {
            w[at as usize] = v as u32;
            w[at as usize + 1] = (v >> 32) as u32;
        };
        let addrs = if kernel == BenchKernel::Raw {
            device_buf.address
        } else {
            guest_buf.address
        };
        put64(&mut w, push::ADDRS, addrs);
        put64(&mut w, push::OUT, out_buf.address);
        w[push::FIRST as usize] = cfg.invocations;
        w[push::COUNT as usize] = per;
        w[push::CHUNK_SHIFT as usize] = shift;
        w[push::CAPACITY_LOG2 as usize] = table.capacity_log2();
        w[push::PROBE_BOUND as usize] = table.probe_bound();
        put64(&mut w, push::MULTIPLIER, table.multiplier());
        put64(&mut w, push::FLAT, flat_buf.address);
        put64(&mut w, push::FLAT_FIRST_PAGE, first_page);
        w[push::FLAT_PAGES as usize] = n_pages as u32;
        put64(&mut w, push::TABLE, table_addr);
        let groups = cfg.invocations / BENCH_LOCAL_SIZE;
        let run = (|| {
            runner.run(&pipeline, &w, groups)?;
            let mut runs = Vec::new();
            for _ in 0..cfg.repeats.max(1) {
                runs.push(runner.run(&pipeline, &w, groups)?);
            }
            Ok::<_, VkError>(runs)
        })();
        ctx.destroy_pipeline(&pipeline);
        let runs = run?;
        results.push(
            (0..cfg.invocations as usize)
                .map(|i| out_buf.word(i))
                .fold(0u32, |a, b| a ^ b),
        );
        figures.push(times(runs, per * cfg.invocations));
    }
    let expected = guest
        .iter()
        .take((per * cfg.invocations) as usize)
        .fold(0u32, |a, &g| a ^ pattern(g));
    for b in [guest_buf, device_buf, flat_buf, out_buf] {
        ctx.destroy_buffer(b, &mut calls);
    }
    if results.iter().any(|&r| r != expected) {
        return Err(VkError::Build {
            module: "bench",
            why: format!(
                "the kernels disagree: helper {:#x}, raw {:#x}, flat {:#x}, expected {expected:#x}",
                results.first().copied().unwrap_or(0),
                results.get(1).copied().unwrap_or(0),
                results.get(2).copied().unwrap_or(0)
            ),
        });
    }
    let [helper, raw, flat_t] = [figures[0], figures[1], figures[2]];
    Ok(LookupFigures {
        device: ctx.device_name(),
        pieces: pieces.len(),
        mapped_bytes: pieces.iter().map(ByteRange::size_bytes).sum(),
        chunk_bytes: chunk,
        table_slots: table.capacity(),
        flat_table_bytes: n_pages * 8,
        mean_probes_hit: table.mean_probes_hit(),
        loads: per * cfg.invocations,
        helper,
        raw,
        flat: flat_t,
        import,
    })
}

/// The import benchmark's figures.
#[derive(Clone, Debug)]
pub struct ImportFigures {
    /// Pieces imported directly.
    pub pieces: usize,
    /// Bytes imported.
    pub mapped_bytes: u64,
    /// All imports, directly through the backend.
    pub import: Duration,
    /// Of which: mirrors (allocation and copy).
    pub import_mirror: Duration,
    /// Of which: Vulkan calls.
    pub import_vulkan: Duration,
    /// Releasing them all.
    pub release: Duration,
    /// Through the engine: the first device-addressed dispatch over the reservation (M1–M3, the
    /// table built and placed, one access run).
    pub engine_first: Duration,
    /// Pieces the engine mapped.
    pub engine_pieces: usize,
    /// A dispatch with nothing changed (no import, no table upload).
    pub engine_unchanged: Duration,
    /// A commit of one left-out page (M5: one import) and the dispatch after it (one table insert,
    /// one table upload).
    pub engine_after_commit: Duration,
    /// Chunk-table slots in the engine's table.
    pub engine_table_slots: u64,
}

/// The import benchmark: `mapped_bytes` imported in 4 KiB pieces directly, then through the engine a
/// reservation of `mapped_bytes` whose every 8th page is shared (left out, M3) and one page not
/// committed, mapped by a first dispatch and again after that page is committed (M5).
pub fn import_bench(ctx: &Arc<Context>, mapped_bytes: u64) -> Result<ImportFigures, VkError> {
    let err = |e: String| VkError::Build {
        module: "bench",
        why: e,
    };
    let memory = GuestMemory::new(0x1000).map_err(|e| err(e.to_string()))?;
    let mut backend = VulkanBackend::on(Arc::clone(ctx))?;
    let n = (mapped_bytes >> 12) as usize;
    let started = Instant::now();
    let mut bases = Vec::with_capacity(n);
    for i in 0..n as u64 {
        let p = ByteRange::new(GUEST_BASE + (i << 12), GUEST_BASE + ((i + 1) << 12));
        bases.push(backend.import(p, &memory).map_err(|e| err(e.to_string()))?);
    }
    let import = started.elapsed();
    let split = backend.import_time();
    let started = Instant::now();
    for b in bases {
        backend.release(b).map_err(|e| err(e.to_string()))?;
    }
    let release = started.elapsed();
    drop(backend);

    let backend = VulkanBackend::on(Arc::clone(ctx))?;
    let mut engine =
        Engine::new(DeviceLimits::default(), backend).map_err(|e| err(e.to_string()))?;
    let res = ByteRange::new(GUEST_BASE, GUEST_BASE + mapped_bytes);
    let apply = |engine: &mut Engine<VulkanBackend>, e: Event| {
        engine.apply(&e).map(|_| ()).map_err(|e| err(e.to_string()))
    };
    apply(
        &mut engine,
        Event::Reserve {
            range: res,
            readable: true,
            writable: true,
            committed: true,
            backing: Backing::Private,
        },
    )?;
    for p in (GUEST_BASE..res.end).step_by(8 << 12) {
        apply(
            &mut engine,
            Event::SetBacking {
                range: ByteRange::new(p + (7 << 12), p + (8 << 12)),
                backing: Backing::Shared,
            },
        )?;
    }
    let lone = GUEST_BASE + (1 << 12);
    let input = DispatchInput {
        program: 0x4000_0000_0000,
        reasons: vec![Reason::D753],
        accesses: vec![Access {
            workgroup: 0,
            wave: 0,
            lane: 0,
            pc: 0,
            kind: AccessKind::Global,
            op: Op::Load,
            address: Some(GUEST_BASE + 0x10),
            slot: None,
            offset: None,
            index: None,
            size_bytes: 4,
            values: Vec::new(),
        }],
        ..DispatchInput::default()
    };
    let dispatch = |engine: &mut Engine<VulkanBackend>| {
        let t = Instant::now();
        engine.dispatch(&input).map_err(|e| err(e.to_string()))?;
        Ok::<_, VkError>(t.elapsed())
    };
    // M2 commits every page of a run before mapping it, so the lone page is decommitted after the
    // first map (M4 drops its piece and maps the rest again); it stays left out until its commit,
    // when M5 maps it.
    let engine_first = dispatch(&mut engine)?;
    apply(
        &mut engine,
        Event::Decommit {
            range: ByteRange::new(lone, lone + 0x1000),
        },
    )?;
    dispatch(&mut engine)?;
    let engine_unchanged = dispatch(&mut engine)?;
    let t = Instant::now();
    apply(
        &mut engine,
        Event::Commit {
            range: ByteRange::new(lone, lone + 0x1000),
        },
    )?;
    dispatch(&mut engine)?;
    let engine_after_commit = t.elapsed();
    let engine_pieces = engine.mappings().pieces().count();
    let engine_table_slots = engine.table().map_or(0, |t| t.capacity() as u64);
    Ok(ImportFigures {
        pieces: n,
        mapped_bytes,
        import,
        import_mirror: split.mirror,
        import_vulkan: split.vulkan,
        release,
        engine_first,
        engine_pieces,
        engine_unchanged,
        engine_after_commit,
        engine_table_slots,
    })
}

/// What [`write_cuda_inputs`] wrote.
#[derive(Clone, Debug)]
pub struct CudaInputs {
    /// Pieces.
    pub pieces: usize,
    /// Table slots.
    pub table_slots: usize,
    /// Chunk bytes.
    pub chunk_bytes: u64,
}

/// The device addresses the CUDA inputs are written against: the runner relocates them to its arena.
pub const CUDA_FILE_BASE: u64 = 0x1000_0000_0000;

/// Writes the CUDA port's inputs into `dir`: `table.bin`, the engine's chunk table byte for byte
/// ([`ChunkTable::to_le_bytes`]) with every piece placed in an arena at [`CUDA_FILE_BASE`] (pieces
/// in shuffled order, as host allocations would be); `pieces.bin`, one (guest start, bytes, arena
/// offset) little-endian u64 triple per piece; and `meta.txt`, `key value` lines.
pub fn write_cuda_inputs(
    dir: &Path,
    cfg: &LayoutConfig,
    probe_bound: u32,
) -> std::io::Result<CudaInputs> {
    let pieces = layout(cfg);
    let mut order: Vec<usize> = (0..pieces.len()).collect();
    let mut rng = Rng::new(cfg.seed ^ 0x5eed);
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let mut offsets = vec![0u64; pieces.len()];
    let mut at = 0u64;
    for &i in &order {
        offsets[i] = at;
        at += pieces[i].size_bytes();
    }
    let chunk = chunk_bytes_for(pieces.iter().map(|p| (p.start, p.end)));
    let shift = chunk.trailing_zeros();
    let entries: Vec<(u64, u64)> = pieces
        .iter()
        .zip(&offsets)
        .flat_map(|(p, &o)| {
            (p.start >> shift..p.end >> shift)
                .map(move |c| (c, CUDA_FILE_BASE + o + ((c << shift) - p.start)))
        })
        .collect();
    let table = ChunkTable::build(chunk, probe_bound, &entries)
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("table.bin"), table.to_le_bytes())?;
    let mut pb = Vec::with_capacity(pieces.len() * 24);
    for (p, o) in pieces.iter().zip(&offsets) {
        for v in [p.start, p.size_bytes(), *o] {
            pb.extend_from_slice(&v.to_le_bytes());
        }
    }
    std::fs::write(dir.join("pieces.bin"), pb)?;
    let mut meta = std::fs::File::create(dir.join("meta.txt"))?;
    writeln!(meta, "capacity_log2 {}", table.capacity_log2())?;
    writeln!(meta, "chunk_shift {shift}")?;
    writeln!(meta, "probe_bound {}", table.probe_bound())?;
    writeln!(meta, "multiplier {}", table.multiplier())?;
    writeln!(meta, "pieces {}", pieces.len())?;
    writeln!(meta, "arena_bytes {at}")?;
    writeln!(meta, "file_base {CUDA_FILE_BASE}")?;
    writeln!(meta, "guest_base {GUEST_BASE}")?;
    writeln!(meta, "mean_probes_hit {:.4}", table.mean_probes_hit())?;
    Ok(CudaInputs {
        pieces: pieces.len(),
        table_slots: table.capacity(),
        chunk_bytes: chunk,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "in a test, an unwrap is an assertion")]
mod tests {
    use super::*;

    #[test]
    fn layouts_cover_the_mapped_bytes_aligned_and_apart() {
        for cfg in [
            LayoutConfig::gib_4k(),
            LayoutConfig::gib_64k(),
            LayoutConfig::gib_scattered(),
        ] {
            let p = layout(&cfg);
            assert_eq!(p.iter().map(ByteRange::size_bytes).sum::<u64>(), 1 << 30);
            assert!(p.windows(2).all(|w| w[0].end < w[1].start));
            assert!(p.iter().all(|r| (r.start | r.end) % cfg.align_bytes == 0));
            let loads = random_loads(&p, 1000, 3);
            assert!(
                loads
                    .iter()
                    .all(|a| p.iter().any(|r| r.contains(*a) && a % 4 == 0))
            );
        }
    }
}
