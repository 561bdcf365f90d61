//! The debugger's window: opens samples (a path on the command line, File ▸ Open, a dropped file,
//! a recent file, or the samples built into the binary), keeps a [`Session`] of reports, and lays
//! out the panels of `dispatchscope_views` around the current dispatch.
//!
//! The app applies the panels' actions after each frame; it never changes a report. Only this
//! module touches files, threads, the file dialog and the profiler server.
//!
//! The module refers to its own items only through `self::`/`super::` paths, so the tests and the
//! bench can include it with `#[path]`.

pub mod live;
pub mod session;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc;

use dispatchscope_views::keys::{self, Command};
use dispatchscope_views::{
    AccessesPanel, Action, AfterPanel, BindingsPanel, ChunkTablePanel, DispatchesPanel, Filter,
    MemoryPanel, RefusalsPanel, Selection, Tab, style,
};
use egui::RichText;
use serde::{Deserialize, Serialize};

pub use self::live::{DemoTarget, LiveLink, LiveState};
pub use self::session::{LoadError, Loader, Progress, Session, Source};

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

/// The File ▸ Open flow: a file dialog on its own thread, then, if it gives no path (no desktop
/// portal, or cancelled), a field to type one.
#[derive(Default)]
struct OpenDialog {
    /// The running dialog, if any.
    pending: Option<mpsc::Receiver<Option<PathBuf>>>,
    /// Show the path field.
    typing: bool,
    /// Why the path field is shown.
    note: String,
    /// The path field.
    path: String,
}

/// The Live ▸ Attach window's fields.
#[derive(Clone, Debug)]
pub struct AttachForm {
    /// `host:port`.
    pub addr: String,
    /// The token, if the target asks for one.
    pub token: String,
}

impl Default for AttachForm {
    fn default() -> Self {
        Self {
            addr: dispatchscope_live::protocol::DEFAULT_LISTEN.into(),
            token: String::new(),
        }
    }
}

/// The breakpoints window's fields (text fields are parsed when applied).
#[derive(Clone, Debug, Default)]
pub struct BreakpointForm {
    /// Before every dispatch.
    pub every_dispatch: bool,
    /// After the next refused dispatch.
    pub refusal: bool,
    /// After the next dispatch with an escape.
    pub escape: bool,
    /// After a lookup of more than `probes` probes.
    pub probes_on: bool,
    /// The probe count.
    pub probes: String,
    /// Before a dispatch of `program`.
    pub program_on: bool,
    /// The program address.
    pub program: String,
    /// Before dispatch `nth`.
    pub nth_on: bool,
    /// The dispatch index.
    pub nth: String,
}

impl BreakpointForm {
    /// The breakpoints the form says, or what is wrong with it.
    pub fn breakpoints(&self) -> Result<dispatchscope_live::Breakpoints, String> {
        let num = |on: bool, text: &str, what: &str| -> Result<Option<u64>, String> {
            if !on {
                return Ok(None);
            }
            dispatchscope_core::addr::parse_u64(text.trim())
                .map(Some)
                .ok_or_else(|| format!("{what} {text:?} is not a number"))
        };
        let probes = num(self.probes_on, &self.probes, "probes")?
            .map(|p| u32::try_from(p).map_err(|_| format!("probes {p} is too large")))
            .transpose()?;
        Ok(dispatchscope_live::Breakpoints {
            every_dispatch: self.every_dispatch,
            refusal: self.refusal,
            escape: self.escape,
            probes_over: probes,
            programs: num(self.program_on, &self.program, "program")?
                .into_iter()
                .collect(),
            dispatch: num(self.nth_on, &self.nth, "dispatch")?,
        })
    }
}

/// What a save window writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SaveKind {
    /// The live recording as a capture.
    Capture,
    /// The live recording as a sample ending with the selected dispatch.
    Sample,
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
    bindings: BindingsPanel,
    refusals: RefusalsPanel,
    memory: MemoryPanel,
    table: ChunkTablePanel,
    accesses: AccessesPanel,
    after: AfterPanel,
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
            bindings: BindingsPanel::default(),
            refusals: RefusalsPanel::default(),
            memory: MemoryPanel::default(),
            table,
            accesses: AccessesPanel::default(),
            after: AfterPanel::default(),
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
    #[allow(dead_code, reason = "the tests, which include this module, use it")]
    pub fn open_path_blocking(&mut self, path: PathBuf) {
        let result = session::load_file(&path, Source::File(path.clone()), &Progress::default());
        self.finish_load(result);
    }

    /// Starts opening the file at `path` on a background thread.
    pub fn open_path(&mut self, ctx: &egui::Context, path: PathBuf) {
        let ctx = ctx.clone();
        self.loader = Some(Loader::spawn(path, move || ctx.request_repaint()));
    }

    /// Shows `session` (a loaded session, or reports made by a test).
    pub fn set_session(&mut self, session: Session) {
        self.sel = Selection::default();
        self.session = Some(session);
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
                self.set_session(s);
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
                if pos < self.n_dispatches() && pos != self.sel.dispatch {
                    self.sel.dispatch = pos;
                    self.sel.access = None;
                }
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
            Action::SelectSlot(s) => self.sel.slot = s,
            Action::SelectAccess(a) => self.sel.access = a,
            Action::SelectTableSlot(s) => self.sel.table_slot = s,
            Action::ShowTab(t) => self.settings.tab = t,
        }
    }

    /// The position `cmd` moves to, if it moves.
    fn target(&self, cmd: Command) -> Option<usize> {
        let s = self.session.as_ref()?;
        let n = s.rows.len();
        let cur = self.sel.dispatch;
        let find_fwd = |f: &dyn Fn(usize) -> bool| (cur + 1..n).find(|&p| f(p));
        let find_back = |f: &dyn Fn(usize) -> bool| (0..cur).rev().find(|&p| f(p));
        let refused = |p: usize| s.rows[p].counts.refusals > 0;
        let escaped = |p: usize| s.rows[p].counts.escapes > 0;
        match cmd {
            Command::Next => (cur + 1 < n).then_some(cur + 1),
            Command::Previous => cur.checked_sub(1),
            Command::First => (n > 0).then_some(0),
            Command::Last => n.checked_sub(1),
            Command::NextRefusal => find_fwd(&refused),
            Command::PreviousRefusal => find_back(&refused),
            Command::NextEscape => find_fwd(&escaped),
            Command::PreviousEscape => find_back(&escaped),
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

    fn start_open_dialog(&mut self, ctx: &egui::Context) {
        let (tx, rx) = mpsc::channel();
        let ctx = ctx.clone();
        std::thread::spawn(move || {
            let picked = rfd::FileDialog::new()
                .set_title("Open a dispatchscope sample")
                .add_filter("dispatchscope sample", &["json"])
                .add_filter("any file", &["*"])
                .pick_file();
            let _ = tx.send(picked);
            ctx.request_repaint();
        });
        self.dialog.pending = Some(rx);
    }

    /// Attaches to the live target at `addr`; the open session becomes a live one. On failure
    /// the error panel says why and the session open stays.
    pub fn attach(&mut self, ctx: &egui::Context, addr: &str, token: Option<String>) -> bool {
        let repaint = ctx.clone();
        match LiveLink::attach(addr, token, Arc::new(move || repaint.request_repaint())) {
            Ok(link) => {
                if let Some(mut old) = self.live.take() {
                    old.detach();
                }
                let title = format!("attached live to {} at {addr}", link.target_name);
                self.set_session(Session::live(addr, title));
                self.live = Some(link);
                self.error = None;
                true
            }
            Err(message) => {
                self.error = Some(LoadError {
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
        if let Some(l) = &mut self.live {
            l.detach();
        }
    }

    /// Starts the demo target on a thread of this process and attaches to it.
    pub fn start_demo(&mut self, ctx: &egui::Context) -> Result<(), String> {
        let demo = DemoTarget::start(Some(60.0))?;
        let addr = demo.addr.to_string();
        self.demo = Some(demo);
        if self.attach(ctx, &addr, None) {
            Ok(())
        } else {
            Err(self
                .error
                .take()
                .map_or_else(|| "could not attach".into(), |e| e.message))
        }
    }

    /// What the app opens with no arguments: the demo target, attached live; if it cannot start,
    /// the built-in default sample with a notice saying why.
    pub fn open_default(&mut self, ctx: &egui::Context) {
        if let Err(why) = self.start_demo(ctx) {
            self.demo = None;
            if let Some(name) = default_sample() {
                self.open_embedded(name);
            }
            self.notice = Some(format!(
                "The demo target did not start ({why}); showing a built-in sample instead."
            ));
        }
    }

    fn live_attached(&self) -> bool {
        self.live.as_ref().is_some_and(LiveLink::is_attached)
    }

    fn live_paused(&self) -> bool {
        self.live
            .as_ref()
            .is_some_and(|l| l.is_attached() && l.is_paused())
    }

    fn live_do(&mut self, f: impl FnOnce(&LiveLink) -> Result<(), String>) {
        if let Some(l) = &self.live
            && let Err(e) = f(l)
        {
            self.notice = Some(format!("live: {e}"));
        }
    }

    /// F5: pauses a running target, lets a paused one continue.
    pub fn pause_continue(&mut self) {
        if self.live_paused() {
            self.live_do(LiveLink::resume);
        } else if self.live_attached() {
            self.live_do(LiveLink::pause);
        }
    }

    /// Sends the breakpoints window's breakpoints to the target.
    pub fn apply_breakpoints(&mut self) {
        match self.breakpoint_form.breakpoints() {
            Ok(b) => self.live_do(|l| l.set_breakpoints(&b)),
            Err(e) => self.notice = Some(format!("breakpoints: {e}")),
        }
    }

    /// Saves the live recording (see [`live`]) as `kind` to `dest`.
    pub fn save_live(&mut self, kind: SaveKind, dest: &std::path::Path) -> Result<String, String> {
        let index = self
            .session
            .as_ref()
            .and_then(|s| s.reports.get(self.sel.dispatch))
            .map(|r| r.index);
        let l = self.live.as_mut().ok_or("no live session")?;
        match kind {
            SaveKind::Capture => l
                .save_capture(dest)
                .map(|n| format!("saved {n} dispatches as a capture: {}", dest.display())),
            SaveKind::Sample => {
                let index = index.ok_or("no dispatch selected")?;
                l.save_sample(index, dest).map(|n| {
                    format!(
                        "saved a sample of {n} dispatches, ending with dispatch {index}: {}",
                        dest.display()
                    )
                })
            }
        }
    }

    fn poll_live(&mut self, ctx: &egui::Context) {
        let (Some(l), Some(s)) = (&mut self.live, &mut self.session) else {
            return;
        };
        if !matches!(s.source, Source::Live(_)) {
            return;
        }
        let before = s.reports.len();
        let at_end = before == 0 || self.sel.dispatch + 1 >= before;
        let d = l.drain(s);
        if d.dropped_front > 0 {
            self.sel.dispatch = self.sel.dispatch.saturating_sub(d.dropped_front);
            if let Some(b) = self.settings.bookmarks.get_mut(&s.source.key()) {
                b.retain_mut(|p| match p.checked_sub(d.dropped_front) {
                    Some(q) => {
                        *p = q;
                        true
                    }
                    None => false,
                });
            }
        }
        // Follow the newest dispatch while the selection is at the end, and on every pause.
        if (d.dispatches > 0 && at_end) || d.paused {
            let last = s.reports.len().saturating_sub(1);
            if last != self.sel.dispatch {
                self.sel.dispatch = last;
                self.sel.access = None;
            }
        }
        if d.more {
            ctx.request_repaint();
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

    /// Draws one frame: the whole window.
    pub fn ui(&mut self, ui: &mut egui::Ui) {
        if self.profiler.is_some() {
            puffin::GlobalProfiler::lock().new_frame();
        }
        puffin::profile_function!();
        let ctx = ui.ctx().clone();
        self.poll(&ctx);
        for cmd in keys::consume(&ctx) {
            self.command(&ctx, cmd);
        }
        self.dropped_files(&ctx);

        let mut actions = Vec::new();
        egui::Panel::top("menu").show(ui, |ui| self.menu_ui(ui));
        egui::Panel::top("toolbar").show(ui, |ui| self.toolbar_ui(ui));
        egui::Panel::bottom("status").show(ui, |ui| self.status_ui(ui));
        if self.session.is_some() {
            let bookmarks = self.bookmarks();
            egui::Panel::left("dispatches")
                .resizable(true)
                .default_size(520.0)
                .min_size(200.0)
                .show(ui, |ui| {
                    if let Some(s) = &self.session {
                        ui.heading("Dispatches");
                        actions.extend(self.dispatches.ui(
                            ui,
                            &s.rows,
                            &bookmarks,
                            self.sel.dispatch,
                        ));
                    }
                });
        }
        egui::CentralPanel::default().show(ui, |ui| {
            self.banners_ui(ui);
            self.error_ui(ui);
            actions.extend(self.central_ui(ui));
        });
        self.windows(&ctx);
        for a in actions {
            self.apply(a);
        }
        self.settings.filter = self.dispatches.filter.clone();
        self.settings.cell = Some(self.table.cell);
    }

    fn poll(&mut self, ctx: &egui::Context) {
        self.poll_live(ctx);
        if let Some(l) = &self.loader {
            match l.poll() {
                Some(result) => {
                    self.loader = None;
                    self.finish_load(result);
                }
                None => ctx.request_repaint_after(std::time::Duration::from_millis(50)),
            }
        }
        if let Some(rx) = &self.dialog.pending {
            match rx.try_recv() {
                Ok(Some(path)) => {
                    self.dialog.pending = None;
                    self.open_path(ctx, path);
                }
                Ok(None) | Err(mpsc::TryRecvError::Disconnected) => {
                    self.dialog.pending = None;
                    self.dialog.typing = true;
                    self.dialog.note = "No file was chosen: the file dialog was cancelled, or this desktop has no file-dialog portal (xdg-desktop-portal). Type a path instead.".into();
                }
                Err(mpsc::TryRecvError::Empty) => {}
            }
        }
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

    fn menu_ui(&mut self, ui: &mut egui::Ui) {
        let ctx = ui.ctx().clone();
        egui::MenuBar::new().ui(ui, |ui| {
            ui.menu_button("File", |ui| {
                if ui.button("Open…").on_hover_text("Ctrl+O").clicked() {
                    self.command(&ctx, Command::Open);
                }
                if ui.button("Open path…").on_hover_text("Type the path of a sample").clicked() {
                    self.dialog.typing = true;
                    self.dialog.note.clear();
                }
                ui.menu_button("Open recent", |ui| {
                    if self.settings.recent.is_empty() {
                        ui.label("No recent files");
                    }
                    let mut open = None;
                    for p in &self.settings.recent {
                        if ui.button(p.display().to_string()).clicked() {
                            open = Some(p.clone());
                        }
                    }
                    if let Some(p) = open {
                        self.open_path(&ctx, p);
                    }
                    if !self.settings.recent.is_empty() && ui.button("Clear the list").clicked() {
                        self.settings.recent.clear();
                    }
                });
                ui.menu_button("Built-in samples", |ui| {
                    if embedded_samples().is_empty() {
                        ui.label("This build has no built-in samples");
                    }
                    for (name, _) in embedded_samples() {
                        if ui.button(*name).clicked() {
                            self.open_embedded(name);
                        }
                    }
                });
                ui.separator();
                if ui.button("Quit").clicked() {
                    ctx.send_viewport_cmd(egui::ViewportCommand::Close);
                }
            });
            ui.menu_button("Live", |ui| self.live_menu_ui(ui));
            ui.menu_button("Go", |ui| {
                for (label, cmd) in [
                    ("Next dispatch (F10)", Command::Next),
                    ("Previous dispatch (Shift+F10)", Command::Previous),
                    ("First dispatch", Command::First),
                    ("Last dispatch", Command::Last),
                    ("Next refusal (F8)", Command::NextRefusal),
                    ("Previous refusal (Shift+F8)", Command::PreviousRefusal),
                    ("Next escape (F9)", Command::NextEscape),
                    ("Previous escape (Shift+F9)", Command::PreviousEscape),
                    ("Go to dispatch… (Ctrl+G)", Command::GoTo),
                    ("Bookmark (Ctrl+B)", Command::Bookmark),
                ] {
                    if ui.button(label).clicked() {
                        self.command(&ctx, cmd);
                    }
                }
            });
            ui.menu_button("View", |ui| {
                for t in Tab::ALL {
                    if ui.selectable_label(self.settings.tab == t, t.title()).clicked() {
                        self.settings.tab = t;
                    }
                }
                ui.separator();
                let mut on = self.profiler.is_some();
                if ui
                    .checkbox(&mut on, "Profiler (puffin_http)")
                    .on_hover_text(format!(
                        "Serves puffin profile data on 127.0.0.1:{}; view it with the external puffin_viewer (cargo install puffin_viewer, then puffin_viewer --url 127.0.0.1:{})",
                        puffin_http::DEFAULT_PORT,
                        puffin_http::DEFAULT_PORT
                    ))
                    .changed()
                {
                    self.set_profiler(on);
                }
            });
            ui.menu_button("Help", |ui| {
                if ui.button("Keys (F1)").clicked() {
                    self.show_keys = true;
                }
            });
        });
    }

    fn toolbar_ui(&mut self, ui: &mut egui::Ui) {
        let ctx = ui.ctx().clone();
        let has = self.session.is_some();
        ui.horizontal(|ui| {
            if self.live.is_some() {
                self.live_controls_ui(ui);
                ui.separator();
            }
            for (label, cmd, tip) in [
                ("First", Command::First, "First dispatch (Ctrl+Home)"),
                (
                    "Previous",
                    Command::Previous,
                    "Previous dispatch (Shift+F10)",
                ),
                ("Next", Command::Next, "Next dispatch (F10)"),
                ("Last", Command::Last, "Last dispatch (Ctrl+End)"),
            ] {
                let enabled = self.target(cmd).is_some();
                if ui
                    .add_enabled(enabled, egui::Button::new(label))
                    .on_hover_text(tip)
                    .clicked()
                {
                    self.command(&ctx, cmd);
                }
            }
            ui.separator();
            for (label, cmd, tip) in [
                (
                    "Next refusal",
                    Command::NextRefusal,
                    "Next dispatch with a refusal (F8)",
                ),
                (
                    "Next escape",
                    Command::NextEscape,
                    "Next dispatch with an escape (F9)",
                ),
            ] {
                let enabled = self.target(cmd).is_some();
                if ui
                    .add_enabled(enabled, egui::Button::new(label))
                    .on_hover_text(tip)
                    .clicked()
                {
                    self.command(&ctx, cmd);
                }
            }
            ui.separator();
            if ui
                .add_enabled(has, egui::Button::new("Go to…"))
                .on_hover_text("Go to dispatch N (Ctrl+G)")
                .clicked()
            {
                self.command(&ctx, Command::GoTo);
            }
            let marked = self.bookmarks().contains(&self.sel.dispatch);
            if ui
                .add_enabled(
                    has,
                    egui::Button::new(if marked {
                        "Remove bookmark"
                    } else {
                        "Bookmark"
                    }),
                )
                .on_hover_text("Ctrl+B; Ctrl+1…9 jump to bookmarks")
                .clicked()
            {
                self.command(&ctx, Command::Bookmark);
            }
            if let Some(l) = &self.loader {
                let done = l.progress.done.load(Ordering::Relaxed);
                let total = l.progress.total.load(Ordering::Relaxed);
                ui.separator();
                ui.spinner();
                let frac = if total == 0 {
                    0.0
                } else {
                    done as f32 / total as f32
                };
                ui.add(
                    egui::ProgressBar::new(frac)
                        .desired_width(200.0)
                        .text(if total == 0 {
                            "reading…".to_owned()
                        } else {
                            format!("replaying step {done} of {total}")
                        }),
                );
            }
        });
    }

    fn status_ui(&self, ui: &mut egui::Ui) {
        ui.horizontal(|ui| {
            if let Some(l) = &self.live {
                live_status_ui(ui, l);
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
            style::nothing(ui, "This session has no dispatches.");
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
                let n = match t {
                    Tab::Refusals => r.counts.refusals,
                    Tab::Accesses => r.counts.escapes,
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
        let sel = &self.sel;
        let more = match self.settings.tab {
            Tab::Bindings => self.bindings.ui(ui, r, sel),
            Tab::Refusals => self.refusals.ui(ui, r, sel),
            Tab::Memory => self.memory.ui(ui, r, s.memory(sel.dispatch), sel),
            Tab::ChunkTable => self.table.ui(ui, r, s.table(sel.dispatch), sel),
            Tab::Accesses => self.accesses.ui(ui, r, sel),
            Tab::After => self.after.ui(ui, r, sel),
        };
        actions.extend(more);
        actions
    }

    fn windows(&mut self, ctx: &egui::Context) {
        self.live_windows(ctx);
        if self.show_keys {
            let mut open = true;
            egui::Window::new("Keys")
                .open(&mut open)
                .resizable(false)
                .show(ctx, keys::help_ui);
            self.show_keys = open;
        }
        if let Some(text) = &mut self.goto {
            let mut close = false;
            let mut go = None;
            egui::Window::new("Go to dispatch")
                .collapsible(false)
                .resizable(false)
                .show(ctx, |ui| {
                    let label = ui.label("Dispatch");
                    let edit = ui
                        .add(egui::TextEdit::singleline(text).hint_text("index"))
                        .labelled_by(label.id);
                    edit.request_focus();
                    let enter = edit.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter));
                    ui.horizontal(|ui| {
                        if ui.button("Jump").clicked() || enter {
                            go = dispatchscope_core::addr::parse_u64(text);
                            close = true;
                        }
                        if ui.button("Cancel").clicked()
                            || ui.input(|i| i.key_pressed(egui::Key::Escape))
                        {
                            close = true;
                        }
                    });
                });
            if close {
                self.goto = None;
            }
            if let (Some(n), Some(s)) = (go, &self.session) {
                let pos = s.reports.iter().position(|r| r.index == n);
                match pos {
                    Some(p) => self.apply(Action::SelectDispatch(p)),
                    None => {
                        self.error = Some(LoadError {
                            source: s.source.display(),
                            message: format!(
                                "there is no dispatch {n} in this session (it has {})",
                                s.reports.len()
                            ),
                            at: None,
                            offset_bytes: None,
                        })
                    }
                }
            }
        }
        if self.dialog.typing {
            let mut close = false;
            let mut open = None;
            egui::Window::new("Open a sample")
                .collapsible(false)
                .show(ctx, |ui| {
                    if !self.dialog.note.is_empty() {
                        ui.label(&self.dialog.note);
                    }
                    ui.horizontal(|ui| {
                        let label = ui.label("Path");
                        let edit = ui
                            .add(
                                egui::TextEdit::singleline(&mut self.dialog.path)
                                    .desired_width(400.0),
                            )
                            .labelled_by(label.id);
                        let enter =
                            edit.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter));
                        if ui.button("Open").clicked() || enter {
                            open = Some(PathBuf::from(self.dialog.path.trim()));
                            close = true;
                        }
                        if ui.button("Cancel").clicked() {
                            close = true;
                        }
                    });
                });
            if close {
                self.dialog.typing = false;
            }
            if let Some(p) = open.filter(|p| !p.as_os_str().is_empty()) {
                self.open_path(ctx, p);
            }
        }
        if let Some(e) = &self.profiler_error {
            let mut open = true;
            egui::Window::new("Profiler")
                .open(&mut open)
                .show(ctx, |ui| {
                    ui.label(e);
                });
            if !open {
                self.profiler_error = None;
            }
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

    fn save(&mut self, storage: &mut dyn eframe::Storage) {
        eframe::set_value(storage, eframe::APP_KEY, &self.app.settings);
    }
}

/// Runs the debugger window. With no path it starts the demo target on a thread and attaches to
/// it (or, if the demo cannot start, opens the built-in default sample with a notice); with paths
/// it opens the first (on a background thread) and remembers the others as recent files.
pub fn run_gui(open: Vec<PathBuf>) -> anyhow::Result<()> {
    let options = eframe::NativeOptions {
        viewport: egui::ViewportBuilder::default()
            .with_title("dispatchscope")
            .with_inner_size([1440.0, 900.0])
            .with_drag_and_drop(true),
        persist_window: true,
        ..Default::default()
    };
    eframe::run_native(
        "dispatchscope",
        options,
        Box::new(move |cc| {
            style::install_fonts(&cc.egui_ctx);
            let settings: Settings = cc
                .storage
                .and_then(|s| eframe::get_value(s, eframe::APP_KEY))
                .unwrap_or_default();
            let mut app = GuiApp::new(settings);
            let mut paths = open.into_iter();
            match paths.next() {
                Some(first) => {
                    for rest in paths {
                        app.settings.recent.retain(|r| *r != rest);
                        app.settings.recent.insert(0, rest);
                    }
                    app.open_path(&cc.egui_ctx, first);
                }
                None => app.open_default(&cc.egui_ctx),
            }
            Ok(Box::new(EframeApp { app }))
        }),
    )
    .map_err(|e| anyhow::anyhow!("could not run the window: {e}"))
}

/// The live part of the status bar: attached, paused or running, rates and drops.
fn live_status_ui(ui: &mut egui::Ui, l: &LiveLink) {
    match &l.state {
        LiveState::Disconnected { reason } => {
            ui.label(RichText::new("disconnected").strong().color(style::REFUSED))
                .on_hover_text(reason);
            return;
        }
        LiveState::Paused { next_dispatch, why } => {
            ui.label(
                RichText::new("attached · paused")
                    .strong()
                    .color(style::SELECTED),
            )
            .on_hover_text(why);
            ui.label(format!("before dispatch {next_dispatch}"));
        }
        LiveState::Running => {
            ui.label(
                RichText::new("attached · running")
                    .strong()
                    .color(style::BOUND),
            )
            .on_hover_text(format!("{} at {}", l.target_name, l.addr));
        }
    }
    if let Some(st) = &l.stats {
        ui.label(format!("{:.0} dispatches/s", st.dispatches_per_s));
        let drops = RichText::new(format!("{} dropped", st.dropped));
        ui.label(if st.dropped > 0 {
            drops.color(style::SELECTED)
        } else {
            drops
        })
        .on_hover_text("dispatches the target dropped because this window was behind (its queue holds a bounded number)");
    }
}

impl GuiApp {
    fn live_menu_ui(&mut self, ui: &mut egui::Ui) {
        let ctx = ui.ctx().clone();
        let attached = self.live_attached();
        if ui.button("Attach…").clicked() {
            self.attach_form = Some(AttachForm::default());
        }
        if ui
            .add_enabled(attached, egui::Button::new("Detach"))
            .on_hover_text("The target keeps running")
            .clicked()
        {
            self.detach();
        }
        if ui
            .add_enabled(
                self.demo.is_none(),
                egui::Button::new("Start the demo target and attach"),
            )
            .clicked()
            && let Err(e) = self.start_demo(&ctx)
        {
            self.demo = None;
            self.notice = Some(format!("The demo target did not start: {e}"));
        }
        ui.separator();
        let pause = if self.live_paused() {
            "Continue (F5)"
        } else {
            "Pause (F5)"
        };
        if ui.add_enabled(attached, egui::Button::new(pause)).clicked() {
            self.pause_continue();
        }
        if ui
            .add_enabled(self.live_paused(), egui::Button::new("Step (F10)"))
            .clicked()
        {
            self.live_do(|l| l.step(1));
        }
        if ui
            .add_enabled(attached, egui::Button::new("Breakpoints…"))
            .clicked()
        {
            self.show_breakpoints = true;
        }
        ui.separator();
        let has = self.live.is_some();
        if ui
            .add_enabled(has, egui::Button::new("Save session as capture…"))
            .on_hover_text(
                "Everything received since attaching, with the memory snapshot taken at attach",
            )
            .clicked()
        {
            self.save_form = Some((SaveKind::Capture, "live-session.dscap".into()));
        }
        if ui
            .add_enabled(
                has,
                egui::Button::new("Save as sample (up to the selected dispatch)…"),
            )
            .clicked()
        {
            self.save_form = Some((SaveKind::Sample, "live-dispatch.json".into()));
        }
    }

    fn live_controls_ui(&mut self, ui: &mut egui::Ui) {
        let attached = self.live_attached();
        let paused = self.live_paused();
        if ui
            .add_enabled(
                attached,
                egui::Button::new(if paused { "Continue" } else { "Pause" }),
            )
            .on_hover_text("F5")
            .clicked()
        {
            self.pause_continue();
        }
        if ui
            .add_enabled(paused, egui::Button::new("Step"))
            .on_hover_text("Run the target's next dispatch, then pause (F10)")
            .clicked()
        {
            self.live_do(|l| l.step(1));
        }
        if ui
            .add_enabled(attached, egui::Button::new("Breakpoints…"))
            .clicked()
        {
            self.show_breakpoints = true;
        }
        if ui
            .add_enabled(attached, egui::Button::new("Detach"))
            .on_hover_text("Detach; the target keeps running")
            .clicked()
        {
            self.detach();
        }
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
                    "disconnected ({reason}); the {} dispatches received are kept",
                    self.n_dispatches()
                ))
                .color(style::MUTED),
            );
        }
    }

    fn live_windows(&mut self, ctx: &egui::Context) {
        if let Some(form) = &mut self.attach_form {
            let mut go = false;
            let mut close = false;
            egui::Window::new("Attach to a live target")
                .collapsible(false)
                .resizable(false)
                .show(ctx, |ui| {
                    egui::Grid::new("attach").num_columns(2).show(ui, |ui| {
                        let l = ui.label("Address");
                        ui.add(egui::TextEdit::singleline(&mut form.addr))
                            .labelled_by(l.id);
                        ui.end_row();
                        let l = ui.label("Token");
                        ui.add(egui::TextEdit::singleline(&mut form.token).password(true))
                            .labelled_by(l.id);
                        ui.end_row();
                    });
                    ui.horizontal(|ui| {
                        go = ui.button("Attach").clicked();
                        close = ui.button("Cancel").clicked();
                    });
                });
            if go {
                let form = form.clone();
                let token = Some(form.token.trim().to_owned()).filter(|t| !t.is_empty());
                if self.attach(ctx, form.addr.trim(), token) {
                    close = true;
                }
            }
            if close {
                self.attach_form = None;
            }
        }
        if self.show_breakpoints {
            let mut open = true;
            let mut apply = false;
            let f = &mut self.breakpoint_form;
            egui::Window::new("Breakpoints")
                .default_pos(ctx.content_rect().right_top() + egui::vec2(-440.0, 90.0))
                .open(&mut open)
                .resizable(false)
                .show(ctx, |ui| {
                    ui.checkbox(&mut f.every_dispatch, "Before every dispatch");
                    ui.checkbox(&mut f.refusal, "After the next refused dispatch");
                    ui.checkbox(&mut f.escape, "After the next dispatch with an escape");
                    ui.horizontal(|ui| {
                        ui.checkbox(&mut f.probes_on, "After a lookup of more probes than");
                        ui.add(egui::TextEdit::singleline(&mut f.probes).desired_width(60.0));
                    });
                    ui.horizontal(|ui| {
                        ui.checkbox(&mut f.program_on, "Before a dispatch of program");
                        ui.add(egui::TextEdit::singleline(&mut f.program).desired_width(140.0));
                    });
                    ui.horizontal(|ui| {
                        ui.checkbox(&mut f.nth_on, "Before dispatch number");
                        ui.add(egui::TextEdit::singleline(&mut f.nth).desired_width(100.0));
                    });
                    apply = ui.button("Set breakpoints").clicked();
                });
            self.show_breakpoints = open;
            if apply {
                self.apply_breakpoints();
            }
        }
        if let Some((kind, path)) = &mut self.save_form {
            let kind = *kind;
            let mut save = None;
            let mut close = false;
            let title = match kind {
                SaveKind::Capture => "Save the live session as a capture",
                SaveKind::Sample => "Save as a sample, up to the selected dispatch",
            };
            egui::Window::new(title).collapsible(false).show(ctx, |ui| {
                ui.horizontal(|ui| {
                    let l = ui.label("Path");
                    ui.add(egui::TextEdit::singleline(path).desired_width(400.0))
                        .labelled_by(l.id);
                });
                ui.horizontal(|ui| {
                    if ui.button("Save").clicked() {
                        save = Some(PathBuf::from(path.trim()));
                    }
                    close = ui.button("Cancel").clicked();
                });
            });
            if let Some(p) = save {
                self.notice = Some(match self.save_live(kind, &p) {
                    Ok(m) => m,
                    Err(e) => format!("could not save {}: {e}", p.display()),
                });
                close = true;
            }
            if close {
                self.save_form = None;
            }
        }
    }
}
