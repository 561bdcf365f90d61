//! The lookup benchmark (T5): the layout's pieces imported through [`VulkanBackend`], the engine's
//! chunk table placed (T6), and the three kernels of [`spirv::bench_module`] timed over the same
//! random loads. The three results must agree with the pattern, so every figure is also a check.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ash::vk;

use super::{GUEST_BASE, LayoutConfig, bench_err, chunk_entries, layout, pattern, random_loads};
use crate::buffer::Buf;
use crate::commands::Commands;
use crate::device::Context;
use crate::pipeline::Pipeline;
use crate::push::PushBlock;
use crate::spirv::{self, BENCH_LOCAL_SIZE, BenchKernel, push};
use crate::table::TablePush;
use crate::{VkError, VulkanBackend};
use dispatchscope_core::addr::ByteRange;
use dispatchscope_core::backend::Backend;
use dispatchscope_core::chunk_table::ChunkTable;
use dispatchscope_core::input::DeviceLimits;
use dispatchscope_core::memory::GuestMemory;

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
        pipeline: &Pipeline,
        words: &PushBlock,
        groups: u32,
    ) -> Result<Duration, VkError> {
        let d = &self.ctx.device;
        let cmd = self.commands.cmd;
        let bytes = words.bytes();
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
            self.commands.finish_for_host(
                vk::PipelineStageFlags::COMPUTE_SHADER,
                vk::AccessFlags::SHADER_WRITE,
            )
        }
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
    let memory = GuestMemory::new(0x1000).map_err(bench_err)?;
    let started = Instant::now();
    let mut bases = Vec::with_capacity(pieces.len());
    for p in &pieces {
        let base = backend.import(*p, &memory).map_err(bench_err)?;
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
    let (chunk, entries) = chunk_entries(&pieces, bases.iter().copied());
    let table = ChunkTable::build(chunk, cfg.probe_bound, &entries).map_err(bench_err)?;
    let (table_addr, _) = backend.place_table(&table, u64::MAX).map_err(bench_err)?;
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
        let pipeline = Pipeline::new(&ctx.device, &words, kernel.entry(), 1)?;
        let mut w = PushBlock::default();
        let addrs = if kernel == BenchKernel::Raw {
            device_buf.address
        } else {
            guest_buf.address
        };
        w.set64(push::ADDRS, addrs);
        w.set64(push::OUT, out_buf.address);
        w.set(push::FIRST, cfg.invocations);
        w.set(push::COUNT, per);
        TablePush::of(&table, table_addr).write(&mut w);
        w.set64(push::FLAT, flat_buf.address);
        w.set64(push::FLAT_FIRST_PAGE, first_page);
        w.set(push::FLAT_PAGES, n_pages as u32);
        let groups = cfg.invocations / BENCH_LOCAL_SIZE;
        let run = (|| {
            runner.run(&pipeline, &w, groups)?;
            let mut runs = Vec::new();
            for _ in 0..cfg.repeats.max(1) {
                runs.push(runner.run(&pipeline, &w, groups)?);
            }
            Ok::<_, VkError>(runs)
        })();
        pipeline.destroy(&ctx.device);
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
