//! dispatchscope-core: the dispatch path of D953 and D964, by the numbered rules of [`rules`].
//!
//! An emulator embeds [`Engine`]: it applies memory [`Event`]s between dispatches and hands each
//! [`DispatchInput`] to [`Engine::dispatch`], which plans the pass (overlap sets, O1–O11; device
//! addressing, A1 and W1–W3), maps guest memory (M1–M5), keeps the chunk table (T1–T6), runs the
//! access stream on a [`Backend`] (the CPU reference here), writes back and hands off (O8, C1–C3),
//! and returns one [`DispatchReport`] that explains every refusal and every escape by rule id.
//!
//! This crate is the engine and nothing else: it never draws, never opens a file or a socket, never
//! starts a thread, and its one `unsafe` read is [`chunk_table::ChunkTable`]'s slot lookup. Files
//! are `dispatchscope-formats`'s, the live debugger `dispatchscope-live`'s, Vulkan
//! `dispatchscope-vk`'s; the debugger's views read reports, they do not reach into the engine. What
//! the debugger reads out of reports (the explanation, diffs, what-ifs, write histories) is
//! `dispatchscope-analysis`'s, a crate above this one.

/// `Clone` for a struct of owned fields whose `clone_from` reuses each field's allocation (a
/// derived `clone_from` clones anew and drops the old value): the live tap copies each dispatch's
/// report into the same ring slots dispatch after dispatch, and with this a warm slot takes a
/// report without allocating (issue 31). Both methods destructure without `..`, so a field added
/// to the struct and not listed here fails to compile.
macro_rules! clone_in_place {
    ($t:ident { $($f:ident),* $(,)? }) => {
        impl Clone for $t {
            fn clone(&self) -> Self {
                let Self { $($f),* } = self;
                Self { $($f: $f.clone()),* }
            }

            fn clone_from(&mut self, source: &Self) {
                let Self { $($f),* } = self;
                $($f.clone_from(&source.$f);)*
            }
        }
    };
}

pub mod addr;
pub mod aperture;
pub mod backend;
pub mod chunk_table;
pub mod engine;
pub mod exec;
pub mod host;
pub mod import;
pub mod input;
pub mod instrument;
pub mod memory;
pub mod overlap;
pub mod report;
pub mod rules;

pub use addr::ByteRange;
pub use backend::{Backend, CpuBackend};
pub use engine::{DeviceWriteBackError, Engine, EngineError, FailureKind};
pub use input::Event;
pub use input::{Access, AccessKind, DeviceLimits, DispatchInput, DispatchKind, Slot};
pub use memory::GuestMemory;
pub use report::DispatchReport;
pub use rules::Rule;

/// A fixed stream of pseudo-random numbers below a bound (xorshift64*) for the unit tests' random
/// inputs: the same seed, the same inputs, on every run.
#[cfg(test)]
pub(crate) fn test_rng(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut state = seed | 1;
    move |n: u64| {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_F491_4F6C_DD1D) % n.max(1)
    }
}
