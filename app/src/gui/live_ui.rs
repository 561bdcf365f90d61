//! The live session in the window: the Live menu, the toolbar's live controls, the live part of
//! the status bar, and the windows to attach, set breakpoints and save; and what they do to a
//! [`GuiApp`] (attach, detach, pause, step, breakpoints, save, and each frame's drain of the
//! link into the session).
//!
//! The connection itself, the shadow recording and the demo target are [`super::live`]'s; this
//! module draws them and turns clicks into calls on a [`LiveLink`]. It never reads a socket.

use std::path::PathBuf;
use std::sync::Arc;

use dispatchscope_live::store::human_bytes;
use dispatchscope_views::style;
use egui::RichText;

use super::{
    DemoTarget, GuiApp, LiveError, LiveLink, LiveState, LoadError, Session, Source, default_sample,
};

/// Dispatches a frame the demo the window starts makes by default: a game's
/// ([`dispatchscope_demo::GAME_DISPATCHES_PER_FRAME`], what `dispatchscope demo` makes), at 60
/// frames a second (`--demo-dispatches-per-frame N` sets another). The window's thread keeps up
/// because it only appends what the live link's intake thread stored and made rows of
/// ([`super::live`]); BENCHMARKS.md has what the window received at this rate.
pub const WINDOW_DEMO_DISPATCHES_PER_FRAME: u32 = dispatchscope_demo::GAME_DISPATCHES_PER_FRAME;

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

/// A live control that stands both in the Live menu and on the toolbar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LiveControl {
    /// F5: pause a running target, let a paused one continue.
    PauseContinue,
    /// F10 while paused: one dispatch, then pause.
    Step,
    /// Open the breakpoints window.
    Breakpoints,
    /// Detach, leaving the target running.
    Detach,
    /// End: follow the newest dispatch again.
    Follow,
}

/// Where a [`LiveControl`] is drawn (the words differ; what it does does not).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    /// The Live menu.
    Menu,
    /// The toolbar.
    Toolbar,
}

/// What a save window writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SaveKind {
    /// The live recording as a capture.
    Capture,
    /// The live recording as a sample ending with the selected dispatch.
    Sample,
}

impl GuiApp {
    /// Attaches to the live target at `addr`; the open session becomes a live one. On failure
    /// the error panel says why and the session open stays.
    pub fn attach(&mut self, ctx: &egui::Context, addr: &str, token: Option<String>) -> bool {
        let repaint = ctx.clone();
        let budget = self.disk_budget;
        match LiveLink::attach(
            addr,
            token,
            budget,
            Arc::new(move || repaint.request_repaint()),
        ) {
            Ok(link) => {
                if let Some(mut old) = self.live.take() {
                    old.detach();
                }
                let title = format!("attached live to {} at {addr}", link.target_name);
                self.set_session(Session::live(addr, title, link.store()));
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
    pub fn start_demo(&mut self, ctx: &egui::Context) -> Result<(), LiveError> {
        let demo = DemoTarget::start_with(Some(60.0), self.demo_dispatches_per_frame)?;
        let addr = demo.addr.to_string();
        self.demo = Some(demo);
        if self.attach(ctx, &addr, None) {
            Ok(())
        } else {
            Err(LiveError::DemoAttach {
                why: self
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
            if let Some(name) = default_sample() {
                self.open_embedded(name);
            }
            self.notice = Some(format!(
                "The demo target did not start ({why}); showing a built-in sample instead."
            ));
        }
    }

    /// Whether a live connection is up.
    pub(super) fn live_attached(&self) -> bool {
        self.live.as_ref().is_some_and(LiveLink::is_attached)
    }

    /// Whether the live target is attached and paused.
    pub(super) fn live_paused(&self) -> bool {
        self.live
            .as_ref()
            .is_some_and(|l| l.is_attached() && l.is_paused())
    }

    /// Runs `f` on the live link, if any; its error becomes the notice.
    pub(super) fn live_do(&mut self, f: impl FnOnce(&LiveLink) -> Result<(), LiveError>) {
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

    /// Saves the live recording (see [`super::live`]) as `kind` to `dest`.
    pub fn save_live(
        &mut self,
        kind: SaveKind,
        dest: &std::path::Path,
    ) -> Result<String, LiveError> {
        let index = self
            .session
            .as_ref()
            .and_then(|s| s.reports.get(self.sel.dispatch))
            .map(|r| r.index);
        let l = self.live.as_mut().ok_or(LiveError::NoSession)?;
        match kind {
            SaveKind::Capture => l
                .save_capture(dest)
                .map(|n| format!("saved {n} dispatches as a capture: {}", dest.display())),
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
    /// newest dispatch while following ([`GuiApp::follow`]), and on every pause.
    pub(super) fn poll_live(&mut self) {
        let (Some(l), Some(s)) = (&mut self.live, &mut self.session) else {
            return;
        };
        if !matches!(s.source, Source::Live(_)) {
            return;
        }
        let d = l.drain(s);
        if d.paused {
            self.follow = true;
        }
        s.refresh_live_states(self.sel.dispatch);
        if (d.dispatches > 0 && self.follow) || d.paused {
            let last = s.reports.len().saturating_sub(1);
            if last != self.sel.dispatch {
                self.sel.dispatch = last;
                self.sel.access = None;
            }
        }
        // The window keeps its latest dispatches as they came: the selected one is decoded when
        // it has arrived, once (a failure shows in the error panel).
        if d.dispatches > 0
            && self.sel.dispatch < s.reports.len()
            && s.reports.get(self.sel.dispatch).is_none()
            && let Err(e) = s.prepare(self.sel.dispatch)
        {
            self.error = Some(super::session::capture_error(&s.source.display(), e));
        }
    }

    /// The Live menu.
    pub(super) fn live_menu_ui(&mut self, ui: &mut egui::Ui) {
        let ctx = ui.ctx().clone();
        if ui.button("Attach…").clicked() {
            self.attach_form = Some(AttachForm::default());
        }
        self.live_control_ui(ui, LiveControl::Detach, Place::Menu);
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
        for c in [
            LiveControl::PauseContinue,
            LiveControl::Step,
            LiveControl::Breakpoints,
            LiveControl::Follow,
        ] {
            self.live_control_ui(ui, c, Place::Menu);
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

    /// The toolbar's live controls, drawn while a session is live.
    pub(super) fn live_controls_ui(&mut self, ui: &mut egui::Ui) {
        for c in [
            LiveControl::PauseContinue,
            LiveControl::Step,
            LiveControl::Breakpoints,
            LiveControl::Detach,
        ] {
            self.live_control_ui(ui, c, Place::Toolbar);
        }
        let follow = ui
            .selectable_label(self.follow, "Follow")
            .on_hover_text("Keep the newest dispatch selected and in view as dispatches arrive (End); selecting an older one stops following");
        if follow.clicked() {
            if self.follow {
                self.follow = false;
            } else {
                self.command(&ui.ctx().clone(), dispatchscope_views::keys::Command::Last);
            }
        }
    }

    /// Draws `control` as a button at `place`, and carries it out when clicked.
    fn live_control_ui(&mut self, ui: &mut egui::Ui, control: LiveControl, place: Place) {
        let attached = self.live_attached();
        let paused = self.live_paused();
        let (enabled, label, tip) = match (control, place) {
            (LiveControl::PauseContinue, Place::Menu) => (
                attached,
                if paused {
                    "Continue (F5)"
                } else {
                    "Pause (F5)"
                },
                None,
            ),
            (LiveControl::PauseContinue, Place::Toolbar) => (
                attached,
                if paused { "Continue" } else { "Pause" },
                Some("F5"),
            ),
            (LiveControl::Step, Place::Menu) => (paused, "Step (F10)", None),
            (LiveControl::Step, Place::Toolbar) => (
                paused,
                "Step",
                Some("Run the target's next dispatch, then pause (F10)"),
            ),
            (LiveControl::Breakpoints, _) => (attached, "Breakpoints…", None),
            (LiveControl::Detach, Place::Menu) => {
                (attached, "Detach", Some("The target keeps running"))
            }
            (LiveControl::Detach, Place::Toolbar) => {
                (attached, "Detach", Some("Detach; the target keeps running"))
            }
            (LiveControl::Follow, _) => (
                true,
                "Follow the newest dispatch (End)",
                Some("Selecting an older dispatch stops following"),
            ),
        };
        let mut button = ui.add_enabled(enabled, egui::Button::new(label));
        if let Some(tip) = tip {
            button = button.on_hover_text(tip);
        }
        if button.clicked() {
            match control {
                LiveControl::PauseContinue => self.pause_continue(),
                LiveControl::Step => self.live_do(|l| l.step(1)),
                LiveControl::Breakpoints => self.show_breakpoints = true,
                LiveControl::Detach => self.detach(),
                LiveControl::Follow => {
                    self.command(&ui.ctx().clone(), dispatchscope_views::keys::Command::Last);
                }
            }
        }
    }

    /// The windows to attach, set breakpoints and save, when open.
    pub(super) fn live_windows(&mut self, ctx: &egui::Context) {
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

/// The live part of the status bar: attached, paused or running, rates and drops.
pub(super) fn live_status_ui(ui: &mut egui::Ui, l: &LiveLink) {
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
    rates_ui(ui, l);
    if let Some(last) = l.failures.last() {
        // The kind first (a lost device is not bad input), then the target's words.
        ui.label(
            RichText::new(format!(
                "{} failed · last: {}",
                l.failures.len(),
                last.kind_words()
            ))
            .color(style::REFUSED),
        )
        .on_hover_text(format!(
            "dispatch {} ({}): {}",
            last.index,
            last.kind_words(),
            last.message
        ));
    }
    // The hover reads the store's size only when shown, not every frame.
    ui.label(format!("{} recorded", l.stored())).on_hover_ui(|ui| {
        ui.label(format!(
            "dispatches in this session's recording (a crash-safe capture written as they arrive, {} on disk of a budget of {}); the list holds every one, memory the latest reports, and an older one is read back from the file when selected",
            human_bytes(l.bytes_on_disk()),
            human_bytes(l.disk_budget)
        ));
    });
    let released = l.released();
    if released.dispatches > 0 {
        ui.label(
            RichText::new(format!(
                "{} no longer on disk",
                thousands(released.dispatches as f64)
            ))
            .color(style::MUTED),
        )
        .on_hover_text(format!(
            "the disk budget ({}, --disk-budget) deleted the recording's {} oldest files ({}): the session's first {} dispatches can no longer be selected or saved",
            human_bytes(l.disk_budget),
            released.files,
            human_bytes(released.bytes),
            thousands(released.dispatches as f64)
        ));
    }
}

/// The status bar's rates: what this window received a second, what the target made when that
/// differs, and what was dropped (by the target because this window was behind, or by this
/// window).
fn rates_ui(ui: &mut egui::Ui, l: &LiveLink) {
    let received = l.received_per_s();
    let made = l.stats.as_ref().map(|s| s.dispatches_per_s);
    if let Some(r) = received {
        ui.label(format!("{} received/s", thousands(r)))
            .on_hover_text(
                "dispatches this window received and kept a second, over the last second",
            );
    }
    // The target's own rate, when it differs from what arrived by more than 2 % (a second's
    // figures are not taken at the same instant).
    if let Some(m) = made
        && received.is_none_or(|r| (m - r).abs() > 0.02 * m.max(1.0))
    {
        ui.label(RichText::new(format!("target made {}/s", thousands(m))).color(style::MUTED))
            .on_hover_text("the target's own figure of the dispatches it made a second");
    }
    let dropped = l.dropped();
    let drops = RichText::new(format!("{} dropped", thousands(dropped as f64)));
    ui.label(if dropped > 0 {
        drops.color(style::SELECTED)
    } else {
        drops
    })
    .on_hover_text(format!(
        "dispatches lost since attach: those the target dropped because this window was behind (its queue holds a bounded number), and those this window could not keep; {} received",
        thousands(l.received() as f64)
    ));
}

/// `x` rounded, with a comma every three digits: "12,010".
pub fn thousands(x: f64) -> String {
    let n = x.round().max(0.0) as u64;
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
