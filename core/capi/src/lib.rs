//! dispatchscope behind a C ABI, for the emulators that matter (prosper, shadPS4), which are C++.
//!
//! The header `include/dispatchscope.h` is generated from this crate by cbindgen and committed;
//! `tests/header.rs` fails when it is stale (`UPDATE_HEADER=1 cargo test -p dispatchscope-capi
//! --test header` rewrites it).
//!
//! # What an emulator does through it
//! - create an engine with its device limits on the CPU reference ([`ds_engine_create`], or
//!   [`ds_engine_create_json`] for every limit), or on the emulator's own Vulkan instance, device
//!   and queue ([`ds_engine_create_vulkan`]), and destroy it ([`ds_engine_destroy`]);
//! - apply memory events between dispatches ([`ds_engine_apply_json`]);
//! - dispatch: the whole input as JSON ([`ds_engine_dispatch_json`]), or the struct form of the hot
//!   path ([`ds_engine_dispatch`]: slots, push words, reasons, no access stream);
//! - read the last report: as JSON ([`ds_engine_report_json`]) or the fields an emulator branches
//!   on without parsing it ([`ds_engine_report_mode`], [`ds_engine_report_refusals`]);
//! - listen for a debugger ([`ds_engine_listen`]): from then on every dispatch and event goes
//!   through a tap, and a debugger's pause and step are honoured on the emulator's own thread,
//!   inside the dispatch call that the debugger stopped;
//! - write a capture as it goes ([`ds_engine_capture_begin`], [`ds_engine_capture_end`]).
//!
//! # Statuses and messages
//! Every function returns a [`ds_status`]; `DS_OK` is 0. On any other status a message is left
//! for the calling thread, read with [`ds_last_error`]. No panic crosses the boundary: one is
//! caught and returned as `DS_PANICKED`, and the engine it happened in is refused from then on
//! (its state may be half-updated), until destroyed.
//!
//! # Handles
//! An engine is a [`ds_engine`], a 64-bit handle, never a pointer: 0 is the null handle, and a
//! destroyed handle is never reused, so a second destroy, a made-up number or a handle used after
//! destroy is `DS_INVALID_HANDLE`, never a crash.
//!
//! # Threads
//! Every function may be called from any thread. Calls on one engine are serialised (a second
//! thread waits for the first); calls on different engines run in parallel. A paused engine
//! blocks the thread inside its dispatch call until the debugger resumes or steps it (or its
//! pause times out): call dispatch from the thread that may be stopped, as a game's GPU thread is.
//! Host callbacks ([`ds_host_callbacks`]) run on the calling thread while it holds the engine: a
//! callback may call other engines, but a call back into its own engine is `DS_ORDER`, by name,
//! never a deadlock (the calling thread notes the engines it is inside).
//!
//! # Ownership
//! Strings and buffers passed in are borrowed for the call only. Pointers handed out point into
//! memory this library keeps for the calling thread: [`ds_last_error`]'s until the thread's next
//! call into this library, [`ds_engine_report_json`]'s until the thread's next
//! `ds_engine_report_json` (on any engine), whatever other threads do (destroy included); both
//! until the thread exits at the latest. Copy what you keep. Everything else comes out through
//! the caller's own memory (`ds_prepared`, its `ds_slot_plan`s, the instrumentation's words).
//!
//! # Run time
//! An emulator on a player's machine has its GPU driver and nothing else: this library needs
//! nothing outside itself but the Vulkan loader and driver, and no call starts a process. The
//! SPIR-V modules the engine builds are validated by the tests, not at run time; this crate builds
//! `dispatchscope-vk` without its feature `tools` (SPIRV-Tools' executables), and
//! `tests/c/vulkan_host.c` runs the Vulkan engines with a `PATH` of one empty folder and `execve`
//! refused.
#![allow(unsafe_code)] // The C ABI: raw pointers in and out. Every `unsafe` block says why it holds.

mod engine;
mod ffi;
#[cfg(feature = "fixture")]
pub mod fixture;
mod handle;
mod host;
mod input;
mod reentry;
mod vulkan;

pub use engine::*;
pub use ffi::{DS_ABI_VERSION, ds_abi_version, ds_last_error, ds_status};
pub use host::*;
pub use input::{
    DS_BASE_DESCRIPTOR, DS_BASE_PUSH_BLOCK, DS_FORMAT_NONE, DS_NO_ALIAS, DS_SLOT_INDEX_FROM_LANE,
    DS_SLOT_RESOLVED, DS_SLOT_WRITTEN, ds_dispatch, ds_limits, ds_mode, ds_slot,
};
pub use vulkan::{ds_engine_create_vulkan, ds_vulkan_device};
