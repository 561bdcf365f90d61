//! The debugger's window: opens samples (a path on the command line, File ▸ Open, a dropped file,
//! a recent file, or the samples built into the binary), keeps a [`Session`] of reports, and lays
//! out the panels of `dispatchscope_views` around the current dispatch.
//!
//! The app applies the panels' actions after each frame; it never changes a report. Only this
//! module touches files, threads, the file dialog and the profiler server.
//! This file is the frame: the app's state, loading, the panels, the status bar and what each
//! key's command does; the menu bar and toolbar are `menus`', the windows `dialogs`', and the
//! live session's UI `live_ui`'s (over the connection in [`live`]).
//!
//! Outside itself the module uses only `crate::load`.

pub mod compare_ui;
mod dialogs;
pub mod history_ui;
mod instrumented_ui;
mod intake;
pub mod listing_ui;
pub mod live;
mod live_ui;
mod menus;
pub mod panels;
pub mod session;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use dispatchscope_views::keys::{self, Command};
use dispatchscope_views::{
    Action, ChunkTablePanel, DispatchesPanel, Filter, GuestBytes, Selection, Tab, TimelinePanel,
    style,
};
use egui::RichText;
use serde::{Deserialize, Serialize};

use self::dialogs::OpenDialog;
pub use self::live::{
    DemoTarget, LiveError, LiveFailure, LiveLink, LiveState, parse_size, recording_budget,
};
pub use self::live_ui::{AttachForm, BreakpointForm, SaveKind, thousands};
pub use self::panels::Panels;
pub use self::session::{LoadError, Loader, Progress, ReadAgainError, Session, Source};

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

/// How many recent files are remembered.
const MAX_RECENT: usize = 10;

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

/// The whole app's state.
pub struct GuiApp {
    /// The live connection, if this session is live. (Declared before `demo` so it detaches
    /// before the demo stops.)
    pub live: Option<LiveLink>,
    /// The demo target this process runs, if it started one.
    pub demo: Option<DemoTarget>,
    /// The Live ▸ Attach window, when open.
    pub attach_form: Option<AttachForm>,
    /// The breakpoints window's fields.
    pub breakpoint_form: BreakpointForm,
    /// Whether the breakpoints window is open.
    pub show_breakpoints: bool,
    /// A save window, when open: what and where.
    pub save_form: Option<(SaveKind, String)>,
    /// Something to tell the person that is not an error (a fallback, a saved file).
    pub notice: Option<String>,
    /// Persisted settings.
    pub settings: Settings,
    /// The open session.
    pub session: Option<Session>,
    /// The selection across panels.
    pub sel: Selection,
    /// The last open error, shown until dismissed.
    pub error: Option<LoadError>,
    loader: Option<Loader>,
    dialog: OpenDialog,
    goto: Option<String>,
    /// Whether the F1 key list is open.
    pub show_keys: bool,
    profiler: Option<puffin_http::Server>,
    profiler_error: Option<String>,
    dispatches: DispatchesPanel,
    /// The report panels; B's, in a comparison, are the comparison's.
    panels: Panels,
    pass: instrumented_ui::PassTab,
    /// The Program side panel (the listing around the selected access's pc).
    pub listing: listing_ui::ListingUi,
    timeline: TimelinePanel,
    /// The Write history window, when open.
    pub history: Option<history_ui::HistoryWindow>,
    /// The context that threads wake when they finish (set on the first frame or the first open).
    wake: Option<egui::Context>,
    /// A comparison with another session (File ▸ Compare with…, Session ▸ What if…), when open.
    pub compare: Option<compare_ui::Comparison>,
    /// A file to compare the session being opened with, once it is open (`--compare B`).
    pub pending_compare: Option<PathBuf>,
    /// Dispatches a frame the demo target this window starts makes
    /// (`--demo-dispatches-per-frame`; `live_ui::WINDOW_DEMO_DISPATCHES_PER_FRAME` by default).
    pub demo_dispatches_per_frame: u32,
    /// `--disk-budget`: the most disk a live session's recording may take (`None`: a working
    /// day's, [`live::recording_budget`]).
    pub disk_budget: Option<u64>,
    /// The What if… dialog, when open.
    pub what_if_form: Option<compare_ui::WhatIfForm>,
    /// Whether a live session's selection follows the newest dispatch as dispatches arrive (the
    /// dispatch list and the timeline keep it in view); selecting an older one stops it, End (or
    /// the toolbar's Follow) starts it again.
    pub follow: bool,
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
        let mut table = ChunkTablePanel::default();
        if let Some(c) = settings.cell {
            table.cell = c;
        }
        Self {
            live: None,
            demo: None,
            attach_form: None,
            breakpoint_form: BreakpointForm::default(),
            show_breakpoints: false,
            save_form: None,
            notice: None,
            dispatches: DispatchesPanel::new(settings.filter.clone()),
            settings,
            session: None,
            sel: Selection::default(),
            error: None,
            loader: None,
            dialog: OpenDialog::default(),
            goto: None,
            show_keys: false,
            profiler: None,
            profiler_error: None,
            panels: Panels {
                table,
                ..Panels::default()
            },
            pass: instrumented_ui::PassTab::default(),
            listing: listing_ui::ListingUi::default(),
            timeline: TimelinePanel::default(),
            history: None,
            wake: None,
            compare: None,
            pending_compare: None,
            demo_dispatches_per_frame: live_ui::WINDOW_DEMO_DISPATCHES_PER_FRAME,
            disk_budget: None,
            what_if_form: None,
            follow: true,
            frame_times: FrameTimes::default(),
        }
    }

    /// Opens the embedded sample `name` now (they are small).
    pub fn open_embedded(&mut self, name: &str) {
        let Some((n, text)) = embedded_samples().iter().find(|(n, _)| *n == name) else {
            self.error = Some(LoadError {
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
        self.loader = Some(Loader::spawn(path, move || wake.request_repaint()));
        self.wake = Some(ctx.clone());
    }

    /// Shows `session` (a loaded session, or reports made by a test).
    pub fn set_session(&mut self, session: Session) {
        self.sel = Selection::default();
        self.follow = true;
        self.session = Some(session);
        self.prepare_selected();
    }

    /// Reads what the selected dispatch's panels need (a capture's report and checkpoints, through
    /// its index); a record that cannot be read is shown in the error panel, the session stays.
    fn prepare_selected(&mut self) {
        let Some(s) = &mut self.session else { return };
        if let Err(e) = s.prepare(self.sel.dispatch) {
            self.error = Some(session::capture_error(&s.source.display(), e));
        }
    }

    fn finish_load(&mut self, result: Result<Session, LoadError>) {
        match result {
            Ok(s) => {
                if let Source::File(p) = &s.source {
                    let p = std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
                    self.settings.recent.retain(|r| *r != p);
                    self.settings.recent.insert(0, p);
                    self.settings.recent.truncate(MAX_RECENT);
                }
                self.error = None;
                if let Some(mut l) = self.live.take() {
                    l.detach();
                }
                // A comparison is of the session it started from.
                self.close_compare();
                self.set_session(s);
                if let Some(b) = self.pending_compare.take() {
                    let wake = self.wake.clone();
                    self.compare_with_path(
                        move || {
                            if let Some(c) = &wake {
                                c.request_repaint();
                            }
                        },
                        b,
                    );
                }
            }
            // The session already open stays as it is.
            Err(e) => self.error = Some(e),
        }
    }

    /// The bookmarks of the open session.
    pub fn bookmarks(&self) -> Vec<usize> {
        self.session
            .as_ref()
            .and_then(|s| self.settings.bookmarks.get(&s.source.key()))
            .cloned()
            .unwrap_or_default()
    }

    fn n_dispatches(&self) -> usize {
        self.session.as_ref().map_or(0, |s| s.reports.len())
    }

    /// Applies one action from a panel or a key.
    pub fn apply(&mut self, action: Action) {
        match action {
            Action::SelectDispatch(pos) => {
                if pos < self.n_dispatches() {
                    // Selecting the newest follows on; selecting an older one stops following.
                    self.follow = pos + 1 == self.n_dispatches();
                }
                if pos < self.n_dispatches() && pos != self.sel.dispatch {
                    self.sel.dispatch = pos;
                    self.sel.access = None;
                    self.prepare_selected();
                }
                self.sync_b();
            }
            Action::ToggleBookmark(pos) => {
                let Some(key) = self.session.as_ref().map(|s| s.source.key()) else {
                    return;
                };
                let b = self.settings.bookmarks.entry(key).or_default();
                if let Some(i) = b.iter().position(|p| *p == pos) {
                    b.remove(i);
                } else {
                    b.push(pos);
                    b.sort_unstable();
                }
            }
            Action::SelectSlot(s) => {
                self.sel.slot = s;
                self.sync_b();
            }
            Action::SelectAccess(a) => {
                self.sel.access = a;
                self.sync_b();
            }
            Action::SelectTableSlot(s) => {
                self.sel.table_slot = s;
                self.sync_b();
            }
            Action::ShowTab(t) => self.settings.tab = t,
            Action::ShowHistory(address) => self.open_history(address),
            Action::ShowInListing(pc) => self.listing.show_pc(pc, &self.sel),
            Action::SelectSiteAt(pc) => {
                if let Some(ir) = self
                    .session
                    .as_ref()
                    .and_then(|s| s.reports.get(self.sel.dispatch))
                    .and_then(|r| r.instrumented.as_ref())
                {
                    self.pass.panel.select_pc(ir, pc);
                }
            }
            Action::ReadGuest { address, len } => {
                if let Some(l) = &mut self.live
                    && let Err(e) = l.read_memory(address, len)
                {
                    self.notice = Some(format!("live: {e}"));
                }
            }
        }
    }

    /// The position `cmd` moves to, if it moves.
    fn target(&self, cmd: Command) -> Option<usize> {
        let s = self.session.as_ref()?;
        let n = s.reports.len();
        let cur = self.sel.dispatch;
        // Rows a capture's background scan has not sent yet are not searched.
        let find_fwd = |f: &dyn Fn(usize) -> bool| (cur + 1..s.rows.len()).find(|&p| f(p));
        let find_back =
            |f: &dyn Fn(usize) -> bool| (0..cur.min(s.rows.len())).rev().find(|&p| f(p));
        let refused = |p: usize| s.rows.counts(p).is_some_and(|c| c.refusals > 0);
        let escaped = |p: usize| s.rows.counts(p).is_some_and(|c| c.escapes > 0);
        match cmd {
            Command::Next => (cur + 1 < n).then_some(cur + 1),
            Command::Previous => cur.checked_sub(1),
            Command::First => (n > 0).then_some(0),
            Command::Last => n.checked_sub(1),
            Command::NextRefusal => find_fwd(&refused),
            Command::PreviousRefusal => find_back(&refused),
            Command::NextEscape => find_fwd(&escaped),
            Command::PreviousEscape => find_back(&escaped),
            Command::NextDifference | Command::PreviousDifference => self.difference_target(cmd),
            Command::JumpToBookmark(k) => self
                .bookmarks()
                .get(usize::from(k).saturating_sub(1))
                .copied(),
            _ => None,
        }
    }

    /// Carries out a command (a key, a menu item or a toolbar button).
    pub fn command(&mut self, ctx: &egui::Context, cmd: Command) {
        match cmd {
            Command::GoTo => self.goto = Some(String::new()),
            Command::Open => self.start_open_dialog(ctx),
            Command::Find => self.dispatches.focus_search(),
            Command::Bookmark => {
                if self.session.is_some() {
                    self.apply(Action::ToggleBookmark(self.sel.dispatch));
                }
            }
            Command::Help => self.show_keys = !self.show_keys,
            Command::ShowPass => self.apply(Action::ShowTab(Tab::Pass)),
            Command::ShowListing => self.listing.toggle(),
            Command::PauseContinue => self.pause_continue(),
            // F10 steps the live target when attached and paused; otherwise it keeps its meaning.
            Command::Next if self.live_paused() => self.live_do(|l| l.step(1)),
            _ => {
                if let Some(p) = self.target(cmd) {
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
                    self.profiler_error = None;
                }
                Err(e) => {
                    self.profiler_error =
                        Some(format!("could not serve the profiler on {addr}: {e}"))
                }
            }
        } else if !on {
            puffin::set_scopes_on(false);
            self.profiler = None;
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

        let mut actions = Vec::new();
        egui::Panel::top("menu").show(ui, |ui| self.menu_ui(ui));
        egui::Panel::top("toolbar").show(ui, |ui| self.toolbar_ui(ui));
        egui::Panel::bottom("status").show(ui, |ui| self.status_ui(ui));
        if let Some(s) = &self.session
            && !s.rows.is_empty()
        {
            egui::Panel::bottom("timeline")
                .resizable(true)
                .default_size(110.0)
                .min_size(60.0)
                .show(ui, |ui| {
                    let h = ui.available_height().max(50.0);
                    self.timeline.live = self.live.is_some();
                    self.timeline.follow = self.follow && self.live.is_some();
                    actions.extend(self.timeline.ui(ui, &s.rows, self.sel.dispatch, h));
                });
        }
        if self.session.is_some() && self.compare.is_some() {
            // Both sides' panels need the width: the lists take at most a third of it (their
            // tables scroll sideways).
            let most = (ui.available_width() / 3.0).max(240.0);
            egui::Panel::left("dispatches-compared")
                .resizable(true)
                .default_size(400.0_f32.min(most))
                .min_size(200.0)
                .max_size(most)
                .show(ui, |ui| self.compare_lists_ui(ui, &mut actions));
        } else if self.session.is_some() {
            let bookmarks = self.bookmarks();
            egui::Panel::left("dispatches")
                .resizable(true)
                .default_size(620.0)
                .min_size(200.0)
                .show(ui, |ui| {
                    if let Some(s) = &self.session {
                        ui.heading("Dispatches");
                        self.dispatches.follow = self.follow && self.live.is_some();
                        actions.extend(self.dispatches.ui(
                            ui,
                            &s.rows,
                            &bookmarks,
                            self.sel.dispatch,
                        ));
                    }
                });
        }
        if self.listing.open
            && let Some(s) = &self.session
            && !s.programs.is_empty()
            && let Some(r) = s.reports.get(self.sel.dispatch)
        {
            egui::Panel::right("listing")
                .resizable(true)
                .default_size(430.0)
                .min_size(200.0)
                .show(ui, |ui| {
                    actions.extend(self.listing.ui(ui, &s.programs, r, &self.sel));
                });
        }
        egui::CentralPanel::default().show(ui, |ui| {
            self.banners_ui(ui);
            self.error_ui(ui);
            if self.compare.is_some() {
                actions.extend(self.compare_central_ui(ui));
            } else {
                actions.extend(self.central_ui(ui));
            }
        });
        self.windows(&ctx);
        self.what_if_window(&ctx);
        self.history_window(&ctx);
        for a in actions {
            self.apply(a);
        }
        self.settings.filter = self.dispatches.filter.clone();
        self.settings.cell = Some(self.panels.table.cell);
    }

    fn poll(&mut self, ctx: &egui::Context) {
        self.poll_live();
        self.poll_compare(ctx);
        if let Some(s) = &mut self.session
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
        self.poll_open_dialog(ctx);
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

    fn status_ui(&self, ui: &mut egui::Ui) {
        ui.horizontal(|ui| {
            if let Some(l) = &self.live {
                live_ui::live_status_ui(ui, l);
                ui.separator();
            }
            let Some(s) = &self.session else {
                ui.label("No session open: File ▸ Open (Ctrl+O), or drop a sample on the window.");
                return;
            };
            let Some(r) = s.reports.get(self.sel.dispatch) else {
                ui.label(format!("{}: no dispatches", s.source.display()));
                return;
            };
            ui.label(RichText::new(format!("dispatch {}", r.index)).strong())
                .on_hover_text(format!(
                    "{} of {} in this session",
                    self.sel.dispatch + 1,
                    s.reports.len()
                ));
            ui.label(format!(
                "({} of {})",
                self.sel.dispatch + 1,
                s.reports.len()
            ));
            ui.label(style::mode_text(r.mode).strong());
            ui.label(style::mono(format!("program {}", style::hex(r.program))));
            if let Some(slot) = self.sel.slot {
                ui.label(format!("selected slot {slot}"));
            }
            if let Some(a) = self.sel.access {
                ui.label(format!("selected access {a}"));
            }
            ui.with_layout(egui::Layout::right_to_left(egui::Align::Center), |ui| {
                ui.label(RichText::new(s.source.display()).color(style::MUTED));
            });
        });
    }

    fn error_ui(&mut self, ui: &mut egui::Ui) {
        let Some(e) = &self.error else { return };
        let mut dismiss = false;
        egui::Frame::group(ui.style())
            .stroke(egui::Stroke::new(1.5, style::REFUSED))
            .show(ui, |ui| {
                ui.set_width(ui.available_width());
                ui.horizontal(|ui| {
                    ui.label(
                        RichText::new(format!("Could not open {}", e.source))
                            .strong()
                            .color(style::REFUSED),
                    );
                    if ui.button("Dismiss").clicked() {
                        dismiss = true;
                    }
                });
                ui.label(&e.message);
                if let Some(o) = e.offset_bytes {
                    ui.label(style::mono(format!("at byte {o:#x} ({o}) of the file")));
                }
                if let Some((line, column, text)) = &e.at {
                    let caret = format!("{}^", " ".repeat(column.saturating_sub(1).min(200)));
                    ui.label(style::mono(format!("{line:>5} | {text}\n      | {caret}")));
                }
                if self.session.is_some() {
                    ui.label(RichText::new("The session already open is unchanged.").italics());
                }
            });
        if dismiss {
            self.error = None;
        }
    }

    fn central_ui(&mut self, ui: &mut egui::Ui) -> Vec<Action> {
        puffin::profile_function!();
        let Some(s) = &self.session else {
            ui.heading("dispatchscope");
            ui.label("Open a sample with File ▸ Open (Ctrl+O), a built-in sample from File ▸ Built-in samples, or drop a file on this window.");
            return Vec::new();
        };
        let Some(r) = s.reports.get(self.sel.dispatch) else {
            style::nothing(
                ui,
                if s.reports.is_empty() {
                    "This session has no dispatches."
                } else {
                    "This dispatch's record could not be read (see the error above)."
                },
            );
            return Vec::new();
        };
        ui.horizontal_wrapped(|ui| {
            ui.heading(format!("Dispatch {}", r.index));
            ui.label(style::mode_text(r.mode).heading());
            ui.label(style::mono(style::hex(r.program)));
            if !r.label.is_empty() {
                ui.label(&r.label);
            }
        });
        ui.label(RichText::new(&s.title).small().color(style::MUTED));
        let mut actions = Vec::new();
        ui.horizontal(|ui| {
            for t in Tab::ALL {
                if t == Tab::Pass && !instrumented_ui::PassTab::shows(r) {
                    continue;
                }
                let n = match t {
                    Tab::Refusals => r.counts.refusals,
                    Tab::Accesses => r.counts.escapes,
                    Tab::Pass => instrumented_ui::PassTab::title_count(r),
                    _ => 0,
                };
                let title = if n > 0 {
                    format!("{} ({n})", t.title())
                } else {
                    t.title().to_owned()
                };
                if ui.selectable_label(self.settings.tab == t, title).clicked() {
                    actions.push(Action::ShowTab(t));
                }
            }
        });
        ui.separator();
        if let Some(note) = s.state_note_at(self.sel.dispatch)
            && matches!(self.settings.tab, Tab::Memory | Tab::ChunkTable)
        {
            ui.label(RichText::new(note).color(style::MUTED));
        }
        let sel = &self.sel;
        let bytes = match &self.live {
            Some(l) if l.is_attached() => GuestBytes::Live(l.memory.as_ref()),
            _ => GuestBytes::Unavailable,
        };
        let more = match self.panels.tab_ui(ui, self.settings.tab, r, s, sel, bytes) {
            Some(more) => more,
            None => {
                let more = self.pass.ui(ui, r);
                if let Some(l) = &self.live
                    && let Some(line) = self.pass.sync_live(l)
                {
                    self.notice = Some(line);
                }
                more
            }
        };
        actions.extend(more);
        actions
    }

    fn banners_ui(&mut self, ui: &mut egui::Ui) {
        let mut dismiss = false;
        if let Some(n) = &self.notice {
            ui.horizontal(|ui| {
                ui.label(RichText::new(n).color(style::SELECTED));
                dismiss = ui.small_button("Dismiss").clicked();
            });
        }
        if dismiss {
            self.notice = None;
        }
        if let Some(s) = &self.session
            && s.scanning()
        {
            ui.label(
                RichText::new(format!(
                    "reading the dispatch list: {} of {}",
                    s.rows.len(),
                    s.reports.len()
                ))
                .color(style::MUTED),
            );
        }
        if let Some(w) = self.session.as_ref().and_then(|s| s.warning.as_ref()) {
            egui::Frame::group(ui.style())
                .stroke(egui::Stroke::new(1.0, style::SELECTED))
                .show(ui, |ui| {
                    ui.set_width(ui.available_width());
                    ui.label(RichText::new("Warning").strong().color(style::SELECTED));
                    ui.label(w);
                });
        }
        if let Some(l) = &self.live
            && let LiveState::Disconnected { reason } = &l.state
        {
            ui.label(
                RichText::new(format!(
                    "disconnected ({reason}); the {} received are kept",
                    style::count(self.n_dispatches(), "dispatch", "dispatches")
                ))
                .color(style::MUTED),
            );
        }
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
        self.app.live = None;
        self.app.demo = None;
    }

    fn save(&mut self, storage: &mut dyn eframe::Storage) {
        eframe::set_value(storage, eframe::APP_KEY, &self.app.settings);
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
                        app.settings.recent.retain(|r| *r != rest);
                        app.settings.recent.insert(0, rest);
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
