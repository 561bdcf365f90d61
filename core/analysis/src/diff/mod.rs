//! Semantic diffs of reports: [`DispatchDiff`], every decision that changed between two reports of
//! one dispatch, and [`SessionDiff`], two sessions matched dispatch by dispatch.
//!
//! A diff is plain data (the JSON schema [`DIFF_SCHEMA`], the CLI's text, the app's panels); each
//! change is one [`Change`] variant with its before and after and a sentence ([`Change::sentence`]).
//! Nothing here runs the engine: a diff compares two reports the engine made.
//!
//! Three jobs, a module each:
//! - `change`: the vocabulary of changes: [`Change`], one variant a decision, with its
//!   [`Category`] and the values it carries ([`WordValues`], [`PieceState`], [`ProbeStats`], …);
//! - `reports`: comparing two reports of one dispatch ([`diff_reports`] → [`DispatchDiff`]); its
//!   docs say what is compared and by which key;
//! - `sessions`: matching two sessions dispatch by dispatch ([`match_dispatches`]) and comparing
//!   each pair ([`diff_sessions`] → [`SessionDiff`]).

mod change;
mod reports;
mod sessions;

pub use change::{AccessOutcome, Category, Change, PieceState, ProbeStats, Unlisted, WordValues};
pub use reports::{Compared, DispatchDiff, diff_reports};
pub use sessions::{
    DispatchRef, LimitChange, MAX_LCS_CELLS, Matching, SessionDiff, diff_sessions,
    diff_sessions_with, limit_changes, match_dispatches,
};

/// The diff schema's version string.
pub const DIFF_SCHEMA: &str = "dispatchscope.diff/1";
