//! Live debugging: attach to a running game, pause before a dispatch, step, break, record.
//!
//! The target side is a [`Tap`] that the emulator wraps around
//! [`dispatchscope_core::Engine::dispatch`] and [`dispatchscope_core::Engine::apply`]; it listens
//! for one debugger at a time ([`TapConfig`], port [`protocol::DEFAULT_PORT`] on 127.0.0.1 by
//! default). The debugger side is a [`LiveClient`],
//! which the CLI (`dispatchscope attach`, `record`) and the app share, and [`record()`] writes a
//! session to a crash-safe capture. The wire format is [`protocol`]'s (version 2's binary frames
//! are [`wire`]'s); [`store`] keeps a whole live session on disk with a window of it in memory,
//! and [`checkpoint`] sends the engine's memory and chunk-table state when it changes, so that a
//! recording's panels are rebuilt for any dispatch as a file capture's are; [`flight`] tells the
//! debugger of dispatches in flight (prepared, abandoned) and of a lost device.
//!
//! This crate uses std threads and std::net only; the state the game thread and the socket
//! threads share is `shared.rs`'s, which both `tap.rs` and `server.rs` import. It never draws and
//! never depends on a UI crate.
//! The target never waits for a debugger that did not ask it to pause, and never longer than the
//! pause timeout after the debugger's last word.

pub mod checkpoint;
pub mod client;
pub mod flight;
pub mod headless;
pub mod protocol;
pub mod record;
pub mod segments;
mod server;
mod shared;
pub mod snapshot;
pub mod store;
pub mod tap;
pub mod wire;

pub use client::{ClientError, ClientOptions, Incoming, LiveClient};
pub use headless::{RecordOptions, record};
pub use protocol::{Breakpoints, PauseReason, ToDebugger, ToTarget};
pub use record::{CaptureRecorder, ClosedFile, RecordSummary};
pub use shared::{TapConfig, TapError};
pub use store::{DEFAULT_DISK_BUDGET, DispatchRow, LiveStore, Released, StoreError, StoreOptions};
pub use tap::{Tap, TapFigures, TapHandle};
