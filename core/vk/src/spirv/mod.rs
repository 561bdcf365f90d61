//! The translated modules, built with rspirv: the one lookup helper every device access calls (T5,
//! `helper`), the same helper as a linkable library with its instrumentation ([`library`]), a
//! full-screen traversal program that calls it (`traversal`, feature `demo`), the access-replay compute shader
//! around it (`replay`), the microbenchmark kernels (`bench`, behind the `bench` feature), all
//! written with the small builder of `asm`.
//!
//! Nothing here runs a process on an engine's path (issue 40: an emulator on a player's machine
//! has its GPU driver and nothing else): a builder returns its words unvalidated, and every module
//! this crate builds, for every input it takes, is validated by SPIRV-Tools' `spirv-val` in the
//! tests instead (`every_module_test.rs`; the replay at each of its slot counts). The functions that
//! run SPIRV-Tools' executables (`validate`, `validate_linkable`, `disassemble`, `library::link`,
//! `library::inline`) are behind the feature `tools`, for the debugger's tools and the tests; the
//! C ABI builds this crate without it.
//!
//! The helper is emitted by one function, `emit_lookup`, into every module that needs it, so the
//! golden disassembly of [`lookup_helper_module`] (`core/vk/tests/golden/lookup_helper.spvasm`) is
//! the helper the replay runs. This module holds the layouts the host and the shaders share: the
//! push block ([`push`]) and the access record ([`record`]). Nothing here calls Vulkan.
//!
//! # The push block (T3)
//! 32 little-endian words (128 bytes, the least every device gives). Words 30 and 31 hold the chunk
//! table's device address ([`dispatchscope_core::rules::DEVICE_TABLE_PUSH_WORD`]); the helper also reads the
//! table's `capacity_log2` (word 19), probe bound (word 20) and hash multiplier (words 28 and 29).
//! Words 0 to 18 carry the replay's own
//! buffers ([`push`]): the replay shader is not the guest's program, and the engine has already
//! resolved every base the guest's push words carried (O10), so they are not needed on the device.
//!
//! # The replay (one invocation, serial, in stream order)
//! The host encodes each access as an 8-word record ([`record`]). A single invocation walks them in
//! stream order, byte by byte, with 32-bit words and shifts (no 8-bit storage feature is needed):
//! bound accesses through descriptor arrays (binding 0: holders bound at each slot's member offset,
//! binding 1: write masks at the same offsets, O6–O9), device accesses through two lookups (T5: the
//! first byte's part of a chunk and the last byte's, `chunk_table::PARTS`) and raw device
//! addresses, LDS and scratch through storage-buffer regions the host assigns (one per workgroup,
//! one per lane: lavapipe's 32 KiB of workgroup memory is less than the 64 KiB of LDS a workgroup
//! has, and regions survive when a job is split over several dispatches). A miss reads
//! zero, drops the store and appends (access, first escaped address) to an escape log with an
//! atomic counter (T4); each store adds one to the mark word of each chunk slot it hit and sets the
//! summary word of the slot's block (C1, `chunk_table::mark_buffer_words`).

mod asm;
#[cfg(feature = "bench")]
mod bench;
#[cfg(test)]
mod emit_test;
#[cfg(test)]
mod every_module_test;
mod helper;
pub mod library;
mod memory;
mod replay;
mod shape;
#[cfg(feature = "demo")]
pub mod traversal;

use crate::VkError;
use dispatchscope_core::rules::DEVICE_TABLE_PUSH_WORD;

#[cfg(feature = "bench")]
pub use bench::{BENCH_LOCAL_SIZE, BenchKernel, bench_module};
pub use helper::lookup_helper_module;
pub use replay::{REPLAY_MAX_SLOTS, replay_module};

type R<T> = Result<T, VkError>;

/// Push-block word indices.
pub mod push {
    /// Replay: device address of the access records (2 words).
    pub const RECORDS: u32 = 0;
    /// Replay: device address of the store values (2 words).
    pub const VALUES: u32 = 2;
    /// Replay and bench: device address of the per-access (per-invocation) outputs (2 words).
    pub const OUT: u32 = 4;
    /// Replay: device address of the escape log (2 words).
    pub const LOG: u32 = 6;
    /// Replay: device address of the mark buffer (2 words): one word per table slot, then one
    /// summary word per `MARK_BLOCK_SLOTS` slots (`chunk_table::mark_buffer_words`).
    pub const MARKS: u32 = 8;
    /// Replay: device address of the first LDS region (2 words).
    pub const LDS: u32 = 10;
    /// Replay: device address of the first scratch region (2 words).
    pub const SCRATCH: u32 = 12;
    /// Replay: bytes between LDS regions.
    pub const LDS_STRIDE: u32 = 14;
    /// Replay: bytes between scratch regions.
    pub const SCRATCH_STRIDE: u32 = 15;
    /// Replay: first access of this dispatch. Bench: invocations in all.
    pub const FIRST: u32 = 16;
    /// Replay: accesses in this dispatch. Bench: loads per invocation.
    pub const COUNT: u32 = 17;
    /// `log2(chunk bytes)` (T1).
    pub const CHUNK_SHIFT: u32 = 18;
    /// `log2(table capacity)`, read by the helper.
    pub const CAPACITY_LOG2: u32 = 19;
    /// The probe bound (T2), read by the helper.
    pub const PROBE_BOUND: u32 = 20;
    /// Bench: device address of the flat page table (2 words).
    pub const FLAT: u32 = 22;
    /// Bench: the first guest page the flat table covers, as a page number (2 words).
    pub const FLAT_FIRST_PAGE: u32 = 24;
    /// Bench: the flat table's pages.
    pub const FLAT_PAGES: u32 = 26;
    /// The chunk table's hash multiplier (2 words), read by the helper (T2).
    pub const MULTIPLIER: u32 = 28;
    /// Bench: device address of the guest addresses to load (2 words).
    pub const ADDRS: u32 = 0;
    /// T3: the chunk table's device address (2 words).
    pub const TABLE: u32 = super::DEVICE_TABLE_PUSH_WORD;
}

/// The replay's access record: 8 little-endian words.
pub mod record {
    /// Words per record.
    pub const WORDS: usize = 8;
    /// Word 0, bits 0–7: the route.
    pub const BOUND: u32 = 0;
    /// Route: guest memory by device address.
    pub const DEVICE: u32 = 1;
    /// Route: the workgroup's LDS region.
    pub const LDS: u32 = 2;
    /// Route: the lane's scratch region.
    pub const SCRATCH: u32 = 3;
    /// Word 0, bits 8–15: 1 for a store.
    pub const STORE: u32 = 1 << 8;
    /// Word 0, bits 16–23: 1 for R8G8B8A8_UNORM (every other format is byte for byte untyped).
    pub const UNORM: u32 = 1 << 16;
    /// Words per access output: 16 values, slot 0, slot 1, device address (2 words).
    pub const OUT_WORDS: usize = 20;
    /// A slot word meaning "no slot" (a miss, or no second chunk).
    pub const NO_SLOT: u32 = u32::MAX;
    /// Bytes before the first escape-log entry (the counter is word 0).
    pub const LOG_HEADER_BYTES: u64 = 16;
    /// Bytes per escape-log entry: access, address low, address high, 0.
    pub const LOG_ENTRY_BYTES: u64 = 16;
}

/// Validates a module with spirv-val for Vulkan 1.2 (SPIR-V 1.5), which it runs as a process
/// (feature `tools`: never on an engine's path).
#[cfg(feature = "tools")]
pub fn validate(module: &'static str, words: &[u32]) -> R<()> {
    use spirv_tools::val::Validator;
    let v = spirv_tools::val::create(Some(spirv_tools::TargetEnv::Vulkan_1_2));
    v.validate(words, None).map_err(|e| VkError::Invalid {
        module,
        why: e.to_string(),
    })
}

/// Validates a module that still links (the Linkage capability) with spirv-val for universal
/// SPIR-V 1.5: a library, or a program before [`library::link`] (feature `tools`, as [`validate`]).
#[cfg(feature = "tools")]
pub fn validate_linkable(module: &'static str, words: &[u32]) -> R<()> {
    use spirv_tools::val::Validator;
    let v = spirv_tools::val::create(Some(spirv_tools::TargetEnv::Universal_1_5));
    v.validate(words, None).map_err(|e| VkError::Invalid {
        module,
        why: e.to_string(),
    })
}

/// The module as spirv-dis writes it (friendly names, no colour; feature `tools`, as [`validate`]).
#[cfg(feature = "tools")]
pub fn disassemble(module: &'static str, words: &[u32]) -> R<String> {
    use spirv_tools::assembler::{Assembler, DisassembleOptions};
    let asm = spirv_tools::assembler::create(Some(spirv_tools::TargetEnv::Vulkan_1_2));
    let opts = DisassembleOptions {
        comment: false,
        ..DisassembleOptions::default()
    };
    asm.disassemble(words, opts)
        .map(Option::unwrap_or_default)
        .map_err(|e| VkError::Invalid {
            module,
            why: e.to_string(),
        })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "in a test, an unwrap is an assertion")]
mod tests {
    use rspirv::dr::Operand;
    use rspirv::spirv::Op;

    use super::*;

    /// The opcodes of the function named `name`, in order.
    fn opcodes(words: &[u32], name: &str) -> Vec<Op> {
        let m = rspirv::dr::load_words(words).unwrap();
        let id = m
            .debug_names
            .iter()
            .find(|i| {
                i.class.opcode == Op::Name
                    && matches!(i.operands.get(1), Some(Operand::LiteralString(s)) if s == name)
            })
            .and_then(|i| i.operands.first())
            .and_then(|o| match o {
                Operand::IdRef(id) => Some(*id),
                _ => None,
            })
            .unwrap();
        let f = m
            .functions
            .iter()
            .find(|f| f.def.as_ref().and_then(|d| d.result_id) == Some(id))
            .unwrap();
        f.blocks
            .iter()
            .flat_map(|b| b.label.iter().chain(&b.instructions))
            .map(|i| i.class.opcode)
            .collect()
    }

    #[test]
    fn t5_the_replay_and_the_bench_run_the_golden_helper() {
        let golden = opcodes(&lookup_helper_module().unwrap(), "lookup");
        assert!(golden.len() > 50);
        assert_eq!(opcodes(&replay_module(16).unwrap(), "lookup"), golden);
        #[cfg(feature = "bench")]
        assert_eq!(opcodes(&bench_module().unwrap(), "lookup"), golden);
    }
}
