//! The inputs of the lookup helper's CUDA port (`core/vk/benches/cuda/`), written from the engine's
//! own chunk table (T1, T2) byte for byte, so the port probes exactly the table the helper does.

use std::io::Write;
use std::path::Path;

use super::{GUEST_BASE, LayoutConfig, chunk_entries, layout};
use dispatchscope_core::chunk_table::ChunkTable;
use dispatchscope_formats::generate::Rng;

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
    let (chunk, entries) = chunk_entries(&pieces, offsets.iter().map(|o| CUDA_FILE_BASE + o));
    let shift = chunk.trailing_zeros();
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
