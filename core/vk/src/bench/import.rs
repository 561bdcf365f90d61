//! The import benchmark (M1–M5): pieces imported and released directly through [`VulkanBackend`],
//! then through the engine a reservation with shared pages left out (M3) and one page committed
//! late (M5), timed dispatch by dispatch.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{GUEST_BASE, bench_err};
use crate::device::Context;
use crate::{VkError, VulkanBackend};
use dispatchscope_core::addr::ByteRange;
use dispatchscope_core::backend::Backend;
use dispatchscope_core::engine::Engine;
use dispatchscope_core::input::{Access, AccessKind, DeviceLimits, DispatchInput, Op, Reason};
use dispatchscope_core::input::{Backing, Event};
use dispatchscope_core::memory::GuestMemory;

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
    let memory = GuestMemory::new(0x1000).map_err(bench_err)?;
    let mut backend = VulkanBackend::on(Arc::clone(ctx))?;
    let n = (mapped_bytes >> 12) as usize;
    let started = Instant::now();
    let mut bases = Vec::with_capacity(n);
    for i in 0..n as u64 {
        let p = ByteRange::new(GUEST_BASE + (i << 12), GUEST_BASE + ((i + 1) << 12));
        bases.push(backend.import(p, &memory).map_err(bench_err)?);
    }
    let import = started.elapsed();
    let split = backend.import_time();
    let started = Instant::now();
    for b in bases {
        backend.release(b).map_err(bench_err)?;
    }
    let release = started.elapsed();
    drop(backend);

    let backend = VulkanBackend::on(Arc::clone(ctx))?;
    let mut engine = Engine::new(DeviceLimits::default(), backend).map_err(bench_err)?;
    let res = ByteRange::new(GUEST_BASE, GUEST_BASE + mapped_bytes);
    let apply = |engine: &mut Engine<VulkanBackend>, e: Event| {
        engine.apply(&e).map(|_| ()).map_err(bench_err)
    };
    apply(
        &mut engine,
        Event::Reserve {
            range: res,
            readable: true,
            writable: true,
            committed: true,
            backing: Backing::Private,
            host_base: None,
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
    let lone = ByteRange::new(GUEST_BASE + (1 << 12), GUEST_BASE + (2 << 12));
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
        engine.dispatch(&input).map_err(bench_err)?;
        Ok::<_, VkError>(t.elapsed())
    };
    // M2 commits every page of a run before mapping it, so the lone page is decommitted after the
    // first map (M4 drops its piece and maps the rest again); it stays left out until its commit,
    // when M5 maps it.
    let engine_first = dispatch(&mut engine)?;
    apply(&mut engine, Event::Decommit { range: lone })?;
    dispatch(&mut engine)?;
    let engine_unchanged = dispatch(&mut engine)?;
    let t = Instant::now();
    apply(&mut engine, Event::Commit { range: lone })?;
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
