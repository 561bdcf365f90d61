//! Microbenchmarks of the lookup helper (T5) on a Vulkan device, the import cost of M1–M5, and the
//! inputs of the helper's CUDA port (`core/vk/benches/cuda/`), written from the engine's own table.
//!
//! Three kernels do the same random 4-byte loads over guest memory mapped in many pieces: through
//! the helper (guest addresses in, two lookups per load as T5 says), by raw device address (device
//! addresses in: the limit, no translation at all), and through a flat table of 4 KiB pages (the
//! shadPS4-style anchor: one load per translation, a table as large as the guest span). Each
//! invocation xors what it loads; the three results must agree, so every figure is also a check.
//! Nothing here is used by the engine.
//!
//! This file holds what the benchmarks share: the guest layouts they map, the pattern the pieces
//! hold and the random loads over them. The lookup benchmark is `lookup`, the import benchmark
//! (M1–M5) `import`, the CUDA port's inputs `cuda`.

mod cuda;
mod import;
mod lookup;

use std::fmt::Display;

use crate::VkError;
use dispatchscope_core::addr::ByteRange;
use dispatchscope_core::chunk_table::chunk_bytes_for;
use dispatchscope_formats::generate::Rng;

pub use cuda::{CUDA_FILE_BASE, CudaInputs, write_cuda_inputs};
pub use import::{ImportFigures, import_bench};
pub use lookup::{KernelTime, LookupConfig, LookupFigures, lookup_bench};

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

/// T1: the chunk size of `pieces`, and one `(guest_chunk, device_addr)` table entry per chunk of
/// each, with the piece's first byte at its base in `bases`.
fn chunk_entries(
    pieces: &[ByteRange],
    bases: impl IntoIterator<Item = u64>,
) -> (u64, Vec<(u64, u64)>) {
    let chunk = chunk_bytes_for(pieces.iter().map(|p| (p.start, p.end)));
    let shift = chunk.trailing_zeros();
    let entries = pieces
        .iter()
        .zip(bases)
        .flat_map(|(p, b)| {
            (p.start >> shift..p.end >> shift).map(move |c| (c, b + ((c << shift) - p.start)))
        })
        .collect();
    (chunk, entries)
}

/// A failure of the benchmark's own setup (the engine, the table, guest memory), as a [`VkError`].
fn bench_err(e: impl Display) -> VkError {
    VkError::Build {
        module: "bench",
        why: e.to_string(),
    }
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
