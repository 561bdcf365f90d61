//! The debugger's window: opens samples (a path on the command line, File ▸ Open, a dropped file,
//! a recent file, or the samples built into the binary), keeps a [`Session`] of reports, and lays
//! out the panels of `dispatchscope_views` around the current dispatch.
//!
//! The window is a set of windows that each own their state and speak in actions: the main view
//! (`main_view`: the dispatch list, the timeline, the tabs, the status bar), the menu bar and
//! toolbar (`menus`), the app's dialogs (`dialogs`), the live session's windows (`live_ui`), a
//! comparison (`compare_ui`), the Write history (`history_ui`), the program listing
//! (`listing_ui`) and the Device lost window (`loss_ui`). Each draws from [`Shared`] (the session, the selection, the settings, the live
//! link) and returns [`AppAction`]s; [`GuiApp`] is routing: it lays the windows out, and applies
//! every action in one place, [`GuiApp::apply`], after the frame. It never changes a report.
//! Only this module touches files, threads, the file dialog and the profiler server, through its
//! children.
//!
//! Outside itself the module uses only `crate::load`.

pub mod compare_ui;
pub mod dialogs;
pub mod history_ui;
mod instrumented_ui;
mod intake;
pub mod listing_ui;
pub mod live;
pub mod live_ui;
pub mod loss_ui;
pub mod main_view;
pub mod menus;
pub mod panels;
pub mod session;
pub mod shared;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use dispatchscope_views::keys::{self, Command};
use dispatchscope_views::{Action, Selection, Tab, style};

use self::compare_ui::CompareWindow;
use self::dialogs::Dialogs;
use self::history_ui::HistoryWindow;
pub use self::live::{
    DemoTarget, LiveError, LiveFailure, LiveLink, LiveState, parse_size, recording_budget,
};
use self::live_ui::LiveWindows;
pub use self::live_ui::{AttachForm, BreakpointForm, thousands};
use self::main_view::MainView;
use self::menus::MenuBar;
pub use self::panels::{Panel, PanelInput, Panels};
pub use self::session::{LoadError, Loader, Progress, ReadAgainError, Session, Source};
pub use self::shared::{AppAction, LiveCommand, MAX_RECENT, SaveKind, Settings, Shared, WhatIfAsk};

/// The shipped samples built into the binary: `(file name, JSON text)`.
pub fn embedded_samples() -> &'static [(&'static str, &'static str)] {
    dispatchscope_formats::shipped::SAMPLES
}

/// The sample the app opens with no arguments: run 305's overlap if shipped, else the first.
pub fn default_sample() -> Option<&'static str> {
    let all = embedded_samples();
    all.iter()
        .find(|(n, _)| *n == "run305-overlap.json")
        .or_else(|| all.first())
        .map(|(n, _)| *n)
}

/// Dispatches a frame the demo the window starts makes by default: a game's
/// ([`dispatchscope_demo::GAME_DISPATCHES_PER_FRAME`], what `dispatchscope demo` makes), at 60
/// frames a second (`--demo-dispatches-per-frame N` sets another). The window's thread keeps up
/// because it only appends what the live link's intake thread stored and made rows of
/// ([`live`]); BENCHMARKS.md has what the window received at this rate.
pub const WINDOW_DEMO_DISPATCHES_PER_FRAME: u32 = dispatchscope_demo::GAME_DISPATCHES_PER_FRAME;

/// The whole app: the state every window reads ([`Shared`]), each window's own, and the
/// machinery (the loader, the demo target, the profiler). It routes: windows draw and return
/// [`AppAction`]s, [`GuiApp::apply`] carries them out.
pub struct GuiApp {
    /// What every window reads. (Declared before `demo` so that the live link detaches before
    /// the demo stops.)
    pub shared: Shared,
    /// The demo target this process runs, if it started one.
    pub demo: Option<DemoTarget>,
    /// The dispatch list, the timeline, the tabs, the status bar.
    pub main: MainView,
    /// The menu bar and the toolbar.
    pub menus: MenuBar,
    /// File ▸ Open, Go to, the keys, the profiler's error.
    pub dialogs: Dialogs,
    /// Live ▸ Attach, Breakpoints, the save windows.
    pub live_windows: LiveWindows,
    /// A comparison, and the What if… dialog.
    pub compare: CompareWindow,
    /// The Write history window, when open.
    pub history: Option<HistoryWindow>,
    /// The Program side panel (the listing around the selected access's pc).
    pub listing: listing_ui::ListingUi,
    /// The Device lost window, for a session whose device was lost.
    pub loss: loss_ui::LossWindow,
    loader: Option<Loader>,
    profiler: Option<puffin_http::Server>,
    /// The context that threads wake when they finish (set on the first frame or the first open).
    wake: Option<egui::Context>,
    /// A file to compare the session being opened with, once it is open (`--compare B`).
    pub pending_compare: Option<PathBuf>,
    /// Dispatches a frame the demo target this window starts makes
    /// (`--demo-dispatches-per-frame`; [`WINDOW_DEMO_DISPATCHES_PER_FRAME`] by default).
    pub demo_dispatches_per_frame: u32,
    /// `--disk-budget`: the most disk a live session's recording may take (`None`: a working
    /// day's, [`live::recording_budget`]).
    pub disk_budget: Option<u64>,
    /// The latest frames' times, logged when the window closes.
    pub frame_times: FrameTimes,
}

/// The times of the window's latest frames: what its own code took ([`GuiApp::ui`]) and the
/// interval between frames (egui's `unstable_dt`: drawing and painting included), a ring of
/// [`FrameTimes::KEPT`] each; the window logs their median and 95th percentile when it closes.
#[derive(Debug, Default)]
pub struct FrameTimes {
    ui_ms: std::collections::VecDeque<f32>,
    interval_ms: std::collections::VecDeque<f32>,
    /// Frames drawn in all.
    pub frames: u64,
}

impl FrameTimes {
    /// Frames kept.
    pub const KEPT: usize = 3_600;

    fn push(&mut self, ui_ms: f32, interval_ms: f32) {
        for (ring, v) in [
            (&mut self.ui_ms, ui_ms),
            (&mut self.interval_ms, interval_ms),
        ] {
            if ring.len() >= Self::KEPT {
                ring.pop_front();
            }
            ring.push_back(v);
        }
        self.frames += 1;
    }

    /// The median and 95th percentile of `ring`, in milliseconds.
    fn percentiles(ring: &std::collections::VecDeque<f32>) -> (f32, f32) {
        let mut v: Vec<f32> = ring.iter().copied().collect();
        v.sort_by(f32::total_cmp);
        let at = |q: f64| {
            v.get(((v.len().saturating_sub(1)) as f64 * q).round() as usize)
                .copied()
                .unwrap_or(0.0)
        };
        (at(0.5), at(0.95))
    }

    /// The line the window logs: the latest frames' median and 95th percentile, its own code's
    /// and the interval between frames.
    pub fn line(&self) -> String {
        let (ui50, ui95) = Self::percentiles(&self.ui_ms);
        let (dt50, dt95) = Self::percentiles(&self.interval_ms);
        format!(
            "window frames: {} in all; of the latest {}: the window's code {ui50:.2} ms median, {ui95:.2} ms p95; between frames {dt50:.1} ms median, {dt95:.1} ms p95",
            self.frames,
            self.ui_ms.len()
        )
    }
}

impl GuiApp {
    /// An app with `settings` and nothing open.
    pub fn new(settings: Settings) -> Self {
        Self {
            main: MainView::new(&settings),
            shared: Shared {
                settings,
                follow: true,
                ..Shared::default()
            },
            demo: None,
            menus: MenuBar,
            dialogs: Dialogs::default(),
            live_windows: LiveWindows::default(),
            compare: CompareWindow::default(),
            history: None,
            listing: listing_ui::ListingUi::default(),
            loss: loss_ui::LossWindow::default(),
            loader: None,
            profiler: None,
            wake: None,
            pending_compare: None,
            demo_dispatches_per_frame: WINDOW_DEMO_DISPATCHES_PER_FRAME,
            disk_budget: None,
            frame_times: FrameTimes::default(),
        }
    }

    /// A repaint of the window, for a thread to call when it is done.
    fn waker(&self) -> impl Fn() + Send + 'static {
        let wake = self.wake.clone();
        move || {
            if let Some(c) = &wake {
                c.request_repaint();
            }
        }
    }

    /// Opens the embedded sample `name` now (they are small).
    pub fn open_embedded(&mut self, name: &str) {
        let Some((n, text)) = embedded_samples().iter().find(|(n, _)| *n == name) else {
            self.shared.error = Some(LoadError {
                source: name.to_owned(),
                message: "no such built-in sample".into(),
                at: None,
                offset_bytes: None,
            });
            return;
        };
        let result = Session::load(Source::Embedded(n), text.as_bytes(), &Progress::default());
        self.finish_load(result);
    }

    /// Opens the file at `path` on this thread (tests; the window loads on a thread).
    pub fn open_path_blocking(&mut self, path: PathBuf) {
        let result = session::load_file(&path, Source::File(path.clone()), &Progress::default())
            .map(|mut s| {
                s.finish_rows();
                s
            });
        self.finish_load(result);
    }

    /// Starts opening the file at `path` on a background thread.
    pub fn open_path(&mut self, ctx: &egui::Context, path: PathBuf) {
        let wake = ctx.clone();
        let loader = Loader::spawn(path, move || wake.request_repaint());
        self.shared.loading = Some(Arc::clone(&loader.progress));
        self.loader = Some(loader);
        self.wake = Some(ctx.clone());
    }

    /// Shows `session` (a loaded session, or reports made by a test).
    pub fn set_session(&mut self, session: Session) {
        self.shared.sel = Selection::default();
        self.shared.follow = true;
        // A session that ended with its device lost opens on its loss report.
        self.loss = loss_ui::LossWindow::default();
        if session.loss.is_some() {
            self.loss.show();
        }
        self.shared.session = Some(session);
        self.prepare_selected();
    }

    /// Reads what the selected dispatch's panels need (a capture's report and checkpoints, through
    /// its index); a record that cannot be read is shown in the error panel, the session stays.
    fn prepare_selected(&mut self) {
        let sh = &mut self.shared;
        let Some(s) = &mut sh.session else { return };
        if let Err(e) = s.prepare(sh.sel.dispatch) {
            sh.error = Some(session::capture_error(&s.source.display(), e));
        }
    }

    fn finish_load(&mut self, result: Result<Session, LoadError>) {
        match result {
            Ok(s) => {
                if let Source::File(p) = &s.source {
                    let p = std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
                    let recent = &mut self.shared.settings.recent;
                    recent.retain(|r| *r != p);
                    recent.insert(0, p);
                    recent.truncate(MAX_RECENT);
                }
                self.shared.error = None;
                if let Some(mut l) = self.shared.live.take() {
                    l.detach();
                }
                // A comparison is of the session it started from.
                self.close_compare();
                self.set_session(s);
                if let Some(b) = self.pending_compare.take() {
                    let wake = self.waker();
                    self.compare_with_path(wake, b);
                }
            }
            // The session already open stays as it is.
            Err(e) => self.shared.error = Some(e),
        }
    }

    /// The bookmarks of the open session.
    pub fn bookmarks(&self) -> Vec<usize> {
        self.shared.bookmarks()
    }

    /// Applies one action, from a window, a panel or a key: the one place the app's state
    /// changes after a frame.
    pub fn apply(&mut self, action: impl Into<AppAction>) {
        let ctx = self.wake.clone().unwrap_or_default();
        match action.into() {
            AppAction::Panel(a) => self.apply_panel(a),
            AppAction::Command(c) => self.command(&ctx, c),
            AppAction::OpenPath(p) => self.open_path(&ctx, p),
            AppAction::OpenEmbedded(n) => self.open_embedded(n),
            AppAction::FileDialog { compare } => self.dialogs.start_file_dialog(&ctx, compare),
            AppAction::AskPath { compare } => self.dialogs.ask_for_path("", compare),
            AppAction::ClearRecent => self.shared.settings.recent.clear(),
            AppAction::CompareWith(p) => {
                let wake = self.waker();
                self.compare_with_path(wake, p);
            }
            AppAction::CloseComparison => self.close_compare(),
            AppAction::OpenWhatIf => self.open_what_if(),
            AppAction::RunWhatIf(ask) => {
                let wake = self.waker();
                self.compare.run_what_if(&self.shared, *ask, wake);
                self.sync_b();
            }
            AppAction::SelectInB(p) => self.select_in_b(p),
            AppAction::SetProfiler(on) => self.set_profiler(on),
            AppAction::SetListing(on) => self.listing.open = on,
            AppAction::OpenAttach => self.live_windows.attach_form = Some(AttachForm::default()),
            AppAction::Attach { addr, token } => {
                if self.attach(&ctx, &addr, token) {
                    self.live_windows.attach_form = None;
                }
            }
            AppAction::Live(LiveCommand::PauseContinue) => self.pause_continue(),
            AppAction::Live(LiveCommand::Step) => self.live_do(|l| l.step(1)),
            AppAction::Live(LiveCommand::Detach) => self.detach(),
            AppAction::Live(LiveCommand::StartDemo) => {
                if let Err(e) = self.start_demo(&ctx) {
                    self.demo = None;
                    self.shared.notice = Some(format!("The demo target did not start: {e}"));
                }
            }
            AppAction::OpenBreakpoints => self.live_windows.show_breakpoints = true,
            AppAction::SetBreakpoints(b) => self.live_do(|l| l.set_breakpoints(&b)),
            AppAction::OpenSave(kind) => self.live_windows.open_save(kind),
            AppAction::Save(kind, path) => {
                self.shared.notice = Some(match self.save_live(kind, &path) {
                    Ok(m) => m,
                    Err(e) => format!("could not save {}: {e}", path.display()),
                });
            }
            AppAction::SetFollow(on) => self.shared.follow = on,
            AppAction::GoTo(n) => self.go_to(n),
            AppAction::Notice(n) => self.shared.notice = Some(n),
            AppAction::Error(e) => self.shared.error = Some(e),
            AppAction::DismissError => self.shared.error = None,
            AppAction::DismissNotice => self.shared.notice = None,
            AppAction::Quit => ctx.send_viewport_cmd(egui::ViewportCommand::Close),
        }
    }

    /// Applies a panel's action.
    fn apply_panel(&mut self, action: Action) {
        let n = self.shared.n_dispatches();
        match action {
            Action::SelectDispatch(pos) => {
                let sh = &mut self.shared;
                if pos < n {
                    // Selecting the newest follows on; selecting an older one stops following.
                    sh.follow = pos + 1 == n;
                }
                if pos < n && pos != sh.sel.dispatch {
                    sh.sel.dispatch = pos;
                    sh.sel.access = None;
                    self.prepare_selected();
                }
                self.sync_b();
            }
            Action::ToggleBookmark(pos) => {
                let sh = &mut self.shared;
                let Some(key) = sh.session.as_ref().map(|s| s.source.key()) else {
                    return;
                };
                let b = sh.settings.bookmarks.entry(key).or_default();
                if let Some(i) = b.iter().position(|p| *p == pos) {
                    b.remove(i);
                } else {
                    b.push(pos);
                    b.sort_unstable();
                }
            }
            Action::SelectSlot(s) => {
                self.shared.sel.slot = s;
                self.sync_b();
            }
            Action::SelectAccess(a) => {
                self.shared.sel.access = a;
                self.sync_b();
            }
            Action::SelectTableSlot(s) => {
                self.shared.sel.table_slot = s;
                self.sync_b();
            }
            Action::ShowTab(t) => self.shared.settings.tab = t,
            Action::ShowHistory(address) => self.open_history(address),
            Action::ShowInListing(pc) => self.listing.show_pc(pc, &self.shared.sel),
            Action::SelectSiteAt(pc) => {
                let sh = &self.shared;
                if let Some(ir) = sh
                    .session
                    .as_ref()
                    .and_then(|s| s.reports.get(sh.sel.dispatch))
                    .and_then(|r| r.instrumented.as_ref())
                {
                    self.main.panels.pass.panel.select_pc(ir, pc);
                }
            }
            Action::ShowLoss => self.show_loss(),
            Action::SelectIndex(index) => self.go_to(index),
            Action::ReadGuest { address, len } => {
                if let Some(l) = &mut self.shared.live
                    && let Err(e) = l.read_memory(address, len)
                {
                    self.shared.notice = Some(format!("live: {e}"));
                }
            }
        }
    }

    /// Opens the Device lost window (Ctrl+D, the banner, a lost dispatch's row); a session with
    /// no loss says so.
    fn show_loss(&mut self) {
        if self
            .shared
            .session
            .as_ref()
            .is_some_and(|s| s.loss.is_some())
        {
            self.loss.show();
        } else {
            self.shared.notice =
                Some("This session has no loss report: its device was not lost.".into());
        }
    }

    /// Go to dispatch `n` (its report index): selected, or the error panel says why not.
    fn go_to(&mut self, n: u64) {
        let Some(s) = &self.shared.session else {
            return;
        };
        match s.rows.position_of(n) {
            Some(p) => self.apply(Action::SelectDispatch(p)),
            None => {
                let message = if s.scanning() {
                    format!(
                        "dispatch {n} is not among the {} listed yet (the list is still being read)",
                        s.rows.len()
                    )
                } else {
                    format!(
                        "there is no dispatch {n} in this session (it has {})",
                        s.reports.len()
                    )
                };
                self.shared.error = Some(LoadError {
                    source: s.source.display(),
                    message,
                    at: None,
                    offset_bytes: None,
                });
            }
        }
    }

    /// Carries out a command (a key, a menu item or a toolbar button).
    pub fn command(&mut self, ctx: &egui::Context, cmd: Command) {
        match cmd {
            Command::GoTo => self.dialogs.goto = Some(String::new()),
            Command::Open => self.dialogs.start_file_dialog(ctx, false),
            Command::Find => self.main.dispatches.focus_search(),
            Command::Bookmark => {
                if self.shared.session.is_some() {
                    self.apply(Action::ToggleBookmark(self.shared.sel.dispatch));
                }
            }
            Command::Help => self.dialogs.show_keys = !self.dialogs.show_keys,
            Command::ShowPass => self.apply(Action::ShowTab(Tab::Pass)),
            Command::ShowListing => self.listing.toggle(),
            Command::ShowLoss => self.show_loss(),
            Command::PauseContinue => self.pause_continue(),
            // F10 steps the live target when attached and paused; otherwise it keeps its meaning.
            Command::Next if self.shared.live_paused() => self.live_do(|l| l.step(1)),
            _ => {
                if let Some(p) = self.shared.target(cmd) {
                    self.apply(Action::SelectDispatch(p));
                }
            }
        }
    }

    /// Toggles the puffin_http server.
    pub fn set_profiler(&mut self, on: bool) {
        if on && self.profiler.is_none() {
            let addr = format!("127.0.0.1:{}", puffin_http::DEFAULT_PORT);
            match puffin_http::Server::new(&addr) {
                Ok(s) => {
                    puffin::set_scopes_on(true);
                    self.profiler = Some(s);
                    self.dialogs.profiler_error = None;
                }
                Err(e) => {
                    self.dialogs.profiler_error =
                        Some(format!("could not serve the profiler on {addr}: {e}"))
                }
            }
        } else if !on {
            puffin::set_scopes_on(false);
            self.profiler = None;
        }
        self.shared.profiler_on = self.profiler.is_some();
    }

    // --- a comparison -----------------------------------------------------------------------

    /// Starts comparing the open session with the sample or capture at `path`: B is loaded and
    /// the diff made on a thread of their own.
    pub fn compare_with_path(&mut self, wake: impl Fn() + Send + 'static, path: PathBuf) {
        if let Err(e) = self.compare.start_with_path(&self.shared, wake, path) {
            self.shared.error = Some(e);
        }
        self.sync_shared();
    }

    /// Compares the open session with `b`, already made (tests; a session built in memory).
    pub fn compare_with_session(&mut self, b: Session, b_name: &str) {
        if let Err(e) = self.compare.start_with_session(&self.shared, b, b_name) {
            self.shared.error = Some(e);
        }
        self.sync_b();
        self.sync_shared();
    }

    /// Opens the What if… dialog, filled from the selected dispatch's limits.
    pub fn open_what_if(&mut self) {
        if let Err(e) = self.compare.open_what_if(&self.shared) {
            self.shared.error = Some(e);
        }
    }

    /// Ends the comparison (the menu's Close comparison).
    pub fn close_compare(&mut self) {
        self.compare.close();
        self.sync_shared();
    }

    /// Makes B's selection follow A's.
    fn sync_b(&mut self) {
        if let Some(e) = self.compare.sync(&self.shared.sel) {
            self.shared.error = Some(e);
        }
    }

    /// Selects B's dispatch at `pos` (a click in B's list) and its match in A, if it has one.
    pub fn select_in_b(&mut self, pos: usize) {
        if let Some(a) = self.compare.select_in_b(pos) {
            self.apply(a);
        }
    }

    // --- the Write history ------------------------------------------------------------------

    /// Opens the Write history window on the bytes at `address`, starting their history.
    pub fn open_history(&mut self, address: u64) {
        self.history = Some(HistoryWindow::open(self.shared.session.as_ref(), address));
    }

    // --- a live session ---------------------------------------------------------------------

    /// Attaches to the live target at `addr`; the open session becomes a live one. On failure
    /// the error panel says why and the session open stays.
    pub fn attach(&mut self, ctx: &egui::Context, addr: &str, token: Option<String>) -> bool {
        let repaint = ctx.clone();
        match LiveLink::attach(
            addr,
            token,
            self.disk_budget,
            Arc::new(move || repaint.request_repaint()),
        ) {
            Ok(link) => {
                if let Some(mut old) = self.shared.live.take() {
                    old.detach();
                }
                let title = format!("attached live to {} at {addr}", link.target_name);
                self.close_compare();
                self.set_session(Session::live(addr, title, link.store()));
                self.shared.live = Some(link);
                self.shared.error = None;
                true
            }
            Err(message) => {
                self.shared.error = Some(LoadError {
                    source: format!("live target {addr}"),
                    message: format!("could not attach: {message}"),
                    at: None,
                    offset_bytes: None,
                });
                false
            }
        }
    }

    /// Detaches from the live target, leaving it running; the dispatches received stay.
    pub fn detach(&mut self) {
        if let Some(l) = &mut self.shared.live {
            l.detach();
        }
    }

    /// Starts the demo target on a thread of this process and attaches to it.
    pub fn start_demo(&mut self, ctx: &egui::Context) -> Result<(), LiveError> {
        let demo = DemoTarget::start_with(Some(60.0), self.demo_dispatches_per_frame)?;
        let addr = demo.addr.to_string();
        self.demo = Some(demo);
        self.shared.demo_running = true;
        if self.attach(ctx, &addr, None) {
            Ok(())
        } else {
            Err(LiveError::DemoAttach {
                why: self
                    .shared
                    .error
                    .take()
                    .map_or_else(|| "could not attach".into(), |e| e.message),
            })
        }
    }

    /// What the app opens with no arguments: the demo target, attached live; if it cannot start,
    /// the built-in default sample with a notice saying why.
    pub fn open_default(&mut self, ctx: &egui::Context) {
        if let Err(why) = self.start_demo(ctx) {
            self.demo = None;
            self.shared.demo_running = false;
            if let Some(name) = default_sample() {
                self.open_embedded(name);
            }
            self.shared.notice = Some(format!(
                "The demo target did not start ({why}); showing a built-in sample instead."
            ));
        }
    }

    /// Runs `f` on the live link, if any; its error becomes the notice.
    fn live_do(&mut self, f: impl FnOnce(&LiveLink) -> Result<(), LiveError>) {
        if let Some(l) = &self.shared.live
            && let Err(e) = f(l)
        {
            self.shared.notice = Some(format!("live: {e}"));
        }
    }

    /// F5: pauses a running target, lets a paused one continue.
    pub fn pause_continue(&mut self) {
        if self.shared.live_paused() {
            self.live_do(LiveLink::resume);
        } else if self.shared.live_attached() {
            self.live_do(LiveLink::pause);
        }
    }

    /// Saves the live recording (see [`live`]) as `kind` to `dest`: the words to tell the person.
    pub fn save_live(
        &mut self,
        kind: SaveKind,
        dest: &std::path::Path,
    ) -> Result<String, LiveError> {
        let sh = &mut self.shared;
        let index = sh
            .session
            .as_ref()
            .and_then(|s| s.reports.get(sh.sel.dispatch))
            .map(|r| r.index);
        let l = sh.live.as_mut().ok_or(LiveError::NoSession)?;
        match kind {
            SaveKind::Capture => l.save_capture(dest).map(|saved| saved.words(dest)),
            SaveKind::Sample => {
                let index = index.ok_or(LiveError::NoDispatchSelected)?;
                l.save_sample(index, dest).map(|n| {
                    format!(
                        "saved a sample of {n} dispatches, ending with dispatch {index}: {}",
                        dest.display()
                    )
                })
            }
        }
    }

    /// Takes what the live link's intake made ready into the session; the selection follows the
    /// newest dispatch while following ([`Shared::follow`]), and on every pause.
    fn poll_live(&mut self) {
        let sh = &mut self.shared;
        let (Some(l), Some(s)) = (&mut sh.live, &mut sh.session) else {
            return;
        };
        if !matches!(s.source, Source::Live(_)) {
            return;
        }
        let d = l.drain(s);
        if d.paused {
            sh.follow = true;
        }
        if d.lost {
            self.loss.show();
        }
        s.refresh_live_states(sh.sel.dispatch);
        if (d.dispatches > 0 && sh.follow) || d.paused {
            let last = s.reports.len().saturating_sub(1);
            if last != sh.sel.dispatch {
                sh.sel.dispatch = last;
                sh.sel.access = None;
            }
        }
        // The window keeps its latest dispatches as they came: the selected one is decoded when
        // it has arrived, once (a failure shows in the error panel).
        if d.dispatches > 0
            && sh.sel.dispatch < s.reports.len()
            && s.reports.get(sh.sel.dispatch).is_none()
            && let Err(e) = s.prepare(sh.sel.dispatch)
        {
            sh.error = Some(session::capture_error(&s.source.display(), e));
        }
        // The Pass tab's selected lanes go to the target.
        if sh.settings.tab == Tab::Pass
            && let Some(line) = self.main.panels.pass.sync_live(l)
        {
            sh.notice = Some(line);
        }
    }

    // --- the frame --------------------------------------------------------------------------

    /// Brings what [`Shared`] mirrors of the windows and the machinery up to date.
    fn sync_shared(&mut self) {
        self.shared.comparing = self.compare.is_open();
        self.shared.differences = self.compare.differences();
        self.shared.profiler_on = self.profiler.is_some();
        self.shared.demo_running = self.demo.is_some();
        self.shared.loading = self.loader.as_ref().map(|l| Arc::clone(&l.progress));
    }

    fn poll(&mut self, ctx: &egui::Context) {
        self.poll_live();
        for a in self.compare.poll(ctx, &self.shared.sel) {
            self.apply(a);
        }
        if let Some(s) = &mut self.shared.session
            && s.scanning()
        {
            s.poll_rows();
            ctx.request_repaint_after(std::time::Duration::from_millis(50));
        }
        if let Some(l) = &self.loader {
            match l.poll() {
                Some(result) => {
                    self.loader = None;
                    self.finish_load(result);
                }
                None => ctx.request_repaint_after(std::time::Duration::from_millis(50)),
            }
        }
        self.sync_shared();
    }

    fn dropped_files(&mut self, ctx: &egui::Context) {
        let dropped: Vec<PathBuf> = ctx.input(|i| {
            i.raw
                .dropped_files
                .iter()
                .map(|f| f.path().to_path_buf())
                .filter(|p| !p.as_os_str().is_empty())
                .collect()
        });
        if let Some(p) = dropped.into_iter().next() {
            self.open_path(ctx, p);
        }
        let hovering = ctx.input(|i| !i.raw.hovered_files.is_empty());
        if hovering {
            let screen = ctx.content_rect();
            let painter = ctx.layer_painter(egui::LayerId::new(
                egui::Order::Foreground,
                egui::Id::unique("drop"),
            ));
            painter.rect_filled(screen, 0.0, egui::Color32::from_black_alpha(160));
            painter.text(
                screen.center(),
                egui::Align2::CENTER_CENTER,
                "Drop a sample to open it",
                egui::FontId::proportional(24.0),
                egui::Color32::WHITE,
            );
        }
    }

    /// Draws one frame: the whole window (timed, [`FrameTimes`]).
    pub fn ui(&mut self, ui: &mut egui::Ui) {
        let started = std::time::Instant::now();
        self.frame(ui);
        let interval_ms = ui.ctx().input(|i| i.unstable_dt) * 1e3;
        self.frame_times
            .push(started.elapsed().as_secs_f32() * 1e3, interval_ms);
    }

    /// Lays the windows out, each drawing from [`Shared`]; then applies what they asked for.
    fn frame(&mut self, ui: &mut egui::Ui) {
        if self.profiler.is_some() {
            puffin::GlobalProfiler::lock().new_frame();
        }
        puffin::profile_function!();
        let ctx = ui.ctx().clone();
        if self.wake.is_none() {
            self.wake = Some(ctx.clone());
        }
        self.poll(&ctx);
        for cmd in keys::consume(&ctx) {
            self.command(&ctx, cmd);
        }
        self.dropped_files(&ctx);
        self.sync_shared();

        let sh = &self.shared;
        let mut actions: Vec<AppAction> = Vec::new();
        let listing_open = self.listing.open;
        egui::Panel::top("menu").show(ui, |ui| {
            actions.extend(self.menus.ui(ui, sh, listing_open));
        });
        egui::Panel::top("toolbar").show(ui, |ui| {
            actions.extend(self.menus.toolbar_ui(ui, sh));
        });
        egui::Panel::bottom("status").show(ui, |ui| self.main.status_ui(ui, sh));
        if let Some(s) = &sh.session
            && !s.rows.is_empty()
        {
            egui::Panel::bottom("timeline")
                .resizable(true)
                .default_size(150.0)
                .min_size(90.0)
                .show(ui, |ui| actions.extend(self.main.timeline_ui(ui, sh)));
        }
        if sh.session.is_some() && self.compare.is_open() {
            // Both sides' panels need the width: the lists take at most a third of it (their
            // tables scroll sideways).
            let most = (ui.available_width() / 3.0).max(240.0);
            egui::Panel::left("dispatches-compared")
                .resizable(true)
                .default_size(400.0_f32.min(most))
                .min_size(200.0)
                .max_size(most)
                .show(ui, |ui| actions.extend(self.compare.lists_ui(ui, sh)));
        } else if sh.session.is_some() {
            egui::Panel::left("dispatches")
                .resizable(true)
                .default_size(620.0)
                .min_size(200.0)
                .show(ui, |ui| actions.extend(self.main.list_ui(ui, sh)));
        }
        if self.listing.open
            && let Some(s) = &sh.session
            && !s.programs.is_empty()
            && let Some(r) = s.reports.get(sh.sel.dispatch)
        {
            egui::Panel::right("listing")
                .resizable(true)
                .default_size(430.0)
                .min_size(200.0)
                .show(ui, |ui| {
                    let a = self.listing.ui(ui, &s.programs, r, &sh.sel);
                    actions.extend(shared::panel_actions(a));
                });
        }
        egui::CentralPanel::default().show(ui, |ui| {
            actions.extend(self.main.banners_ui(ui, sh));
            actions.extend(self.main.error_ui(ui, sh));
            if self.compare.is_open() {
                actions.extend(self.compare.central_ui(ui, sh));
            } else {
                actions.extend(self.main.central_ui(ui, sh));
            }
        });
        actions.extend(self.live_windows.ui(&ctx, sh));
        actions.extend(self.loss.ui(&ctx, sh));
        actions.extend(self.dialogs.ui(&ctx, sh));
        actions.extend(self.compare.what_if_ui(&ctx, sh));
        if let Some(h) = &mut self.history {
            actions.extend(h.ui(&ctx, sh));
            if !h.is_open() {
                self.history = None;
            }
        }
        for a in actions {
            self.apply(a);
        }
        self.shared.settings.filter = self.main.dispatches.filter.clone();
        self.shared.settings.cell = Some(self.main.panels.table.cell);
    }
}

/// The eframe shell around [`GuiApp`].
struct EframeApp {
    app: GuiApp,
}

impl eframe::App for EframeApp {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        self.app.ui(ui);
    }

    /// The window closes (its close button, or SIGTERM): the live session ends here, while the
    /// process still runs: the intake stops, `received N, dropped M` is logged, the recording is
    /// finished; then the demo target stops.
    fn on_exit(&mut self) {
        eprintln!("{}", self.app.frame_times.line());
        self.app.shared.live = None;
        self.app.demo = None;
    }

    fn save(&mut self, storage: &mut dyn eframe::Storage) {
        eframe::set_value(storage, eframe::APP_KEY, &self.app.shared.settings);
    }
}

/// What the window opens on.
#[derive(Debug, Default)]
pub struct Start {
    /// Samples or captures to open (the first is shown; the rest go to the recent list).
    pub open: Vec<PathBuf>,
    /// B, compared with the first file.
    pub compare: Option<PathBuf>,
    /// The window's own demo target's dispatches a frame.
    pub demo_dispatches_per_frame: Option<u32>,
    /// A running target to attach to, and its token.
    pub attach: Option<(String, Option<String>)>,
    /// `--disk-budget`: the most disk a live session's recording may take.
    pub disk_budget: Option<u64>,
}

/// Runs the debugger window. Attached to `attach` (`--attach ADDR`) if given; else with no path it
/// starts the demo target on a thread and attaches to it (or, if the demo cannot start, opens the
/// built-in default sample with a notice); with paths it opens the first (on a background thread)
/// and remembers the others as recent files. `compare` (`--compare B`) compares the first path
/// with B once it is open.
pub fn run_gui(start: Start) -> anyhow::Result<()> {
    let Start {
        open,
        compare,
        demo_dispatches_per_frame,
        attach,
        disk_budget,
    } = start;
    if compare.is_some() && open.is_empty() {
        return Err(crate::load::BadInput(
            "--compare B compares the session opened (A) with B: give A first, as in `dispatchscope A.dscap --compare B.dscap`".into(),
        )
        .into());
    }
    let options = eframe::NativeOptions {
        viewport: egui::ViewportBuilder::default()
            .with_title("dispatchscope")
            // With no size remembered, the screen's: eframe clamps the inner size to the largest
            // monitor, and a window manager maximizes it; a remembered size (persist_window)
            // replaces both.
            .with_inner_size([16384.0, 16384.0])
            .with_maximized(true)
            .with_min_inner_size([800.0, 500.0])
            .with_drag_and_drop(true),
        persist_window: true,
        ..Default::default()
    };
    // SIGTERM asks the window to close as its close button does (a second one ends the process
    // at once): `terminate` is watched on a thread of its own, which wakes the window.
    let terminate = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register_conditional_shutdown(
        signal_hook::consts::SIGTERM,
        1,
        Arc::clone(&terminate),
    )
    .and_then(|_| signal_hook::flag::register(signal_hook::consts::SIGTERM, Arc::clone(&terminate)))
    .map_err(|e| anyhow::anyhow!("could not handle SIGTERM: {e}"))?;
    eframe::run_native(
        "dispatchscope",
        options,
        Box::new(move |cc| {
            style::install_fonts(&cc.egui_ctx);
            close_on(terminate, cc.egui_ctx.clone())
                .map_err(|e| format!("could not start the SIGTERM watch: {e}"))?;
            let settings: Settings = cc
                .storage
                .and_then(|s| eframe::get_value(s, eframe::APP_KEY))
                .unwrap_or_default();
            let mut app = GuiApp::new(settings);
            if let Some(n) = demo_dispatches_per_frame {
                app.demo_dispatches_per_frame = n;
            }
            app.disk_budget = disk_budget;
            let mut paths = open.into_iter();
            if let Some((addr, token)) = attach {
                // A target that is not there is the window's error line, as Live ▸ Attach says it.
                app.attach(&cc.egui_ctx, &addr, token);
                return Ok(Box::new(EframeApp { app }));
            }
            match paths.next() {
                Some(first) => {
                    for rest in paths {
                        app.shared.settings.recent.retain(|r| *r != rest);
                        app.shared.settings.recent.insert(0, rest);
                    }
                    app.pending_compare = compare;
                    app.open_path(&cc.egui_ctx, first);
                }
                None => app.open_default(&cc.egui_ctx),
            }
            Ok(Box::new(EframeApp { app }))
        }),
    )
    .map_err(|e| anyhow::anyhow!("could not run the window: {e}"))
}

/// Closes the window once `flag` is set (SIGTERM), as its close button does: checked every 50 ms
/// on a thread of its own, which then wakes the window.
fn close_on(flag: Arc<AtomicBool>, ctx: egui::Context) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("dispatchscope SIGTERM".into())
        .spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            eprintln!("dispatchscope: SIGTERM: closing the window");
            ctx.send_viewport_cmd(egui::ViewportCommand::Close);
            ctx.request_repaint();
        })
        .map(|_| ())
}
