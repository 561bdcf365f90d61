//! What the window's parts share and how they speak: [`Shared`], the state every window reads
//! (the session, the selection, the settings, the live link, the messages shown), and
//! [`AppAction`], what a window asks the app to do.
//!
//! A window owns its own state and draws from `&Shared` alone: `fn ui(&mut self, …, &Shared) ->
//! Vec<AppAction>`. It never changes the session, the selection or another window; the app
//! (`super::GuiApp`) applies every action in one place after the frame. This module draws
//! nothing and applies nothing.

use std::path::PathBuf;
use std::sync::Arc;

use dispatchscope_core::input::DeviceLimits;
use dispatchscope_views::keys::Command;
use dispatchscope_views::{Action, Filter, RowMark, Selection, Tab};
use serde::{Deserialize, Serialize};

use super::live::LiveLink;
use super::session::{LoadError, Progress, Session};
use crate::load::WhatIfLimits;

/// How many recent files are remembered.
pub const MAX_RECENT: usize = 10;

/// What persists between runs (eframe storage).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    /// Recently opened files, newest first.
    pub recent: Vec<PathBuf>,
    /// The tab shown.
    pub tab: Tab,
    /// The dispatch table's filter.
    pub filter: Filter,
    /// Bookmarks (dispatch positions) per source key.
    pub bookmarks: std::collections::BTreeMap<String, Vec<usize>>,
    /// The chunk-table grid's cell size.
    pub cell: Option<f32>,
}

/// What every window reads: the app's state that is no one window's. Windows take it by shared
/// reference; only `GuiApp::apply` changes it.
#[derive(Default)]
pub struct Shared {
    /// The live connection, if this session is live.
    pub live: Option<LiveLink>,
    /// Persisted settings.
    pub settings: Settings,
    /// The open session.
    pub session: Option<Session>,
    /// The selection across panels.
    pub sel: Selection,
    /// The last open error, shown until dismissed.
    pub error: Option<LoadError>,
    /// Something to tell the person that is not an error (a fallback, a saved file).
    pub notice: Option<String>,
    /// Whether a live session's selection follows the newest dispatch as dispatches arrive (the
    /// dispatch list and the timeline keep it in view); selecting an older one stops it, End (or
    /// the toolbar's Follow) starts it again.
    pub follow: bool,
    /// Whether a comparison is open.
    pub comparing: bool,
    /// A's rows' marks once a comparison's diff is made (F7 / Shift+F7 move along them).
    pub differences: Option<Arc<[RowMark]>>,
    /// A file being opened: its progress.
    pub loading: Option<Arc<Progress>>,
    /// Whether the puffin_http server runs.
    pub profiler_on: bool,
    /// Whether this process runs a demo target.
    pub demo_running: bool,
}

impl Shared {
    /// The bookmarks of the open session.
    pub fn bookmarks(&self) -> Vec<usize> {
        self.session
            .as_ref()
            .and_then(|s| self.settings.bookmarks.get(&s.source.key()))
            .cloned()
            .unwrap_or_default()
    }

    /// Dispatches in the open session.
    pub fn n_dispatches(&self) -> usize {
        self.session.as_ref().map_or(0, |s| s.reports.len())
    }

    /// Whether a live connection is up.
    pub fn live_attached(&self) -> bool {
        self.live.as_ref().is_some_and(LiveLink::is_attached)
    }

    /// Whether the live target is attached and paused.
    pub fn live_paused(&self) -> bool {
        self.live
            .as_ref()
            .is_some_and(|l| l.is_attached() && l.is_paused())
    }

    /// The position `cmd` moves to, if it moves (a toolbar button is enabled where it does).
    pub fn target(&self, cmd: Command) -> Option<usize> {
        let s = self.session.as_ref()?;
        let n = s.reports.len();
        let cur = self.sel.dispatch;
        // Rows a capture's background scan has not sent yet are not searched, nor rows a live
        // recording's disk budget released.
        let first = s.rows.first();
        let find_fwd = |f: &dyn Fn(usize) -> bool| (cur + 1..s.rows.len()).find(|&p| f(p));
        let find_back =
            |f: &dyn Fn(usize) -> bool| (first..cur.min(s.rows.len())).rev().find(|&p| f(p));
        let refused = |p: usize| s.rows.counts(p).is_some_and(|c| c.refusals > 0);
        let escaped = |p: usize| s.rows.counts(p).is_some_and(|c| c.escapes > 0);
        match cmd {
            Command::Next => (cur + 1 < n).then_some(cur + 1),
            Command::Previous => cur.checked_sub(1).filter(|&p| p >= first),
            Command::First => (n > first).then_some(first),
            Command::Last => n.checked_sub(1),
            Command::NextRefusal => find_fwd(&refused),
            Command::PreviousRefusal => find_back(&refused),
            Command::NextEscape => find_fwd(&escaped),
            Command::PreviousEscape => find_back(&escaped),
            Command::NextDifference => {
                let m = self.differences.as_ref()?;
                (cur + 1..m.len()).find(|&p| m[p].differs())
            }
            Command::PreviousDifference => {
                let m = self.differences.as_ref()?;
                (0..cur.min(m.len())).rev().find(|&p| m[p].differs())
            }
            Command::JumpToBookmark(k) => self
                .bookmarks()
                .get(usize::from(k).saturating_sub(1))
                .copied(),
            _ => None,
        }
    }
}

/// What the what-if asks: the limits changed, the whole, and the session's own.
#[derive(Clone, Debug)]
pub struct WhatIfAsk {
    /// The limits the dialog changed.
    pub changed: WhatIfLimits,
    /// The limits B runs under.
    pub limits: DeviceLimits,
    /// The session's own limits.
    pub base: DeviceLimits,
}

/// What a save window writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SaveKind {
    /// The live recording as a capture.
    Capture,
    /// The live recording as a sample ending with the selected dispatch.
    Sample,
}

/// A live target's control, as a menu item, a toolbar button or a key asks for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LiveCommand {
    /// F5: pause a running target, let a paused one continue.
    PauseContinue,
    /// F10 while paused: one dispatch, then pause.
    Step,
    /// Detach, leaving the target running.
    Detach,
    /// Start the demo target on a thread of this process and attach to it.
    StartDemo,
}

/// What a window asks the app to do; `GuiApp::apply` carries every one out, after the frame.
#[derive(Clone, Debug)]
pub enum AppAction {
    /// A panel's action (a dispatch, slot, access or tab selected; a history; guest bytes).
    Panel(Action),
    /// A key's command (from a menu item or a toolbar button too).
    Command(Command),
    /// Open the sample or capture at this path (on a thread).
    OpenPath(PathBuf),
    /// Open a built-in sample.
    OpenEmbedded(&'static str),
    /// Show the file dialog: to open a file, or (`true`) to pick B to compare with.
    FileDialog {
        /// Whether the file picked is B, to compare the open session with.
        compare: bool,
    },
    /// Show the field to type a path: to open, or (`true`) to compare with.
    AskPath {
        /// Whether the path is B, to compare the open session with.
        compare: bool,
    },
    /// Forget the recent files.
    ClearRecent,
    /// Compare the open session with the sample or capture at this path.
    CompareWith(PathBuf),
    /// End the comparison.
    CloseComparison,
    /// Open the What if… dialog on the selected dispatch's limits.
    OpenWhatIf,
    /// Run the what-if the dialog asks.
    RunWhatIf(Box<WhatIfAsk>),
    /// Select B's dispatch at this position (a click in B's list), and its match in A.
    SelectInB(usize),
    /// Turn the puffin_http server on or off.
    SetProfiler(bool),
    /// Open or close the program listing.
    SetListing(bool),
    /// Open the Live ▸ Attach window.
    OpenAttach,
    /// Attach to the live target at `addr`.
    Attach {
        /// `host:port`.
        addr: String,
        /// The token, if the target asks for one.
        token: Option<String>,
    },
    /// A live control.
    Live(LiveCommand),
    /// Open the breakpoints window.
    OpenBreakpoints,
    /// Send these breakpoints to the target.
    SetBreakpoints(dispatchscope_live::Breakpoints),
    /// Open a save window.
    OpenSave(SaveKind),
    /// Save the live recording.
    Save(SaveKind, PathBuf),
    /// Follow the newest dispatch, or stop.
    SetFollow(bool),
    /// Select the dispatch whose report index is this (Go to dispatch).
    GoTo(u64),
    /// Show a notice.
    Notice(String),
    /// Show an error in the error panel.
    Error(LoadError),
    /// Dismiss the error panel.
    DismissError,
    /// Dismiss the notice.
    DismissNotice,
    /// Close the window.
    Quit,
}

impl From<Action> for AppAction {
    fn from(a: Action) -> Self {
        AppAction::Panel(a)
    }
}

impl From<Command> for AppAction {
    fn from(c: Command) -> Self {
        AppAction::Command(c)
    }
}

/// `actions` as the app's.
pub fn panel_actions(actions: Vec<Action>) -> impl Iterator<Item = AppAction> {
    actions.into_iter().map(AppAction::Panel)
}
