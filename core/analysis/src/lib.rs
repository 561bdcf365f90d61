//! dispatchscope-analysis: what the debugger reads out of the reports the engine made, above the
//! engine (`dispatchscope-core`), which an emulator embeds and which knows nothing of this crate.
//!
//! - [`explain`]: a report as text, every decision with its rule id;
//! - [`diff`]: semantic diffs of reports ([`diff::DispatchDiff`]) and of sessions matched dispatch
//!   by dispatch ([`diff::SessionDiff`]);
//! - [`what_if`]: a recorded dispatch re-planned under other planning limits;
//! - [`history`]: every write a session made to a few guest bytes.
//!
//! Like the engine, this crate never draws, never opens a file or a socket and never starts a
//! thread: sessions on disk are `dispatchscope-formats`'s, which feeds them to these modules.

pub mod diff;
pub mod explain;
pub mod history;
pub mod what_if;
