//! The Vulkan backend: the dispatch path of D953 and D964 run on a real Vulkan device (ash), with a
//! translated module built with rspirv (validated with spirv-tools in the tests, never at run time:
//! no engine call runs a process).
//!
//! [`VulkanBackend`] implements [`dispatchscope_core::Backend`], so the engine runs the same plan on
//! it as on the CPU reference and the two outcomes can be compared word for word (`verify`). It
//! imports guest pieces with `VK_EXT_external_memory_host` and `bufferDeviceAddress` (M1–M5),
//! places the chunk table (T6) and runs each prepared job with one replay shader that calls one
//! lookup helper (T5), binds resolved holders at their member offsets with write masks beside them
//! (O6–O9), keeps marks in host memory (C1) and logs escapes (T4). It never plans anything: routes, holders and formats arrive
//! decided in a [`dispatchscope_core::exec::Job`].
//!
//! The code is split by Vulkan object, as wgpu-hal's Vulkan backend is: `device` (instance, device,
//! queue, validation, limits), `pipeline`, `buffer`, `commands` (one submission at a time), `imports`
//! (M1–M5, over the page-aligned mirrors of `host`), `table` (the chunk table on the device, T6),
//! `encode` and `replay` (the replay dispatch, O6–O9, C1, T4), `push` (the push block as the host
//! fills it, T3), and [`spirv`] (the modules, the helper as a linkable library among them);
//! `pass` runs the full-screen traversal program over the helper's variants (issue 14). `backend` holds only [`VulkanBackend`] and its
//! [`dispatchscope_core::Backend`] impl, which delegates to them; `error` holds [`VkError`].
//!
//! The debugger's demo is behind the feature `demo`: `pass`, the traversal program
//! (`spirv::traversal`) and `verify` (and `bench`, behind `bench`). The C ABI leaves it off, so
//! what an emulator links is the dispatch path alone; the app turns it on. SPIRV-Tools'
//! executables (`spirv::validate`, `disassemble`, `spirv::library::link`, `inline`) are behind the
//! feature `tools`, which `demo` takes and the C ABI leaves off too.
//!
//! This is the only crate of the workspace with `unsafe` code: every block carries a `// SAFETY:`
//! comment. Every `vk::Result` passes through [`check`], which names the Vulkan error.

#![allow(
    unsafe_code,
    reason = "the Vulkan backend calls the Vulkan API through ash, which is unsafe by nature; this is the only crate that may"
)]

mod backend;
#[cfg(feature = "bench")]
pub mod bench;
mod buffer;
mod commands;
mod device;
mod encode;
mod error;
mod host;
pub mod host_pages;
mod imports;
#[cfg(feature = "demo")]
pub mod pass;
mod pipeline;
mod push;
mod replay;
pub mod spirv;
mod table;
#[cfg(feature = "demo")]
pub mod verify;

pub use backend::VulkanBackend;
pub use commands::begin_one_time;
pub use device::{Context, ContextOptions, EnabledFeatures, HostDevice};
pub use error::{VkError, check, describe};
pub use imports::ImportTime;
