//! The live session in the window: [`LiveWindows`] (the Live menu, the toolbar's live controls,
//! and the windows to attach, set breakpoints and save) and the live part of the status bar.
//!
//! The connection itself, the shadow recording and the demo target are [`super::live`]'s; this
//! module draws them from [`Shared`] and turns clicks into [`AppAction`]s, which the app carries
//! out on the [`LiveLink`]. It never reads a socket and never calls the link.

use std::path::PathBuf;

use dispatchscope_live::store::human_bytes;
use dispatchscope_views::keys::Command;
use dispatchscope_views::style;
use egui::RichText;

use super::live::{LiveLink, LiveState};
use super::shared::{AppAction, LiveCommand, SaveKind, Shared};

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
    pub fn breakpoints(&self) -> Result<dispatchscope_live::Breakpoints, crate::load::FormError> {
        use crate::load::{ArgError, FormError};
        let num = |on: bool, text: &str, what: &'static str| -> Result<Option<u64>, FormError> {
            if !on {
                return Ok(None);
            }
            dispatchscope_core::addr::parse_u64(text.trim())
                .map(Some)
                .ok_or_else(|| FormError::Field {
                    field: what,
                    error: ArgError::NotANumber {
                        text: text.to_owned(),
                    },
                })
        };
        let probes = num(self.probes_on, &self.probes, "probes")?
            .map(|p| {
                u32::try_from(p).map_err(|_| FormError::TooLarge {
                    field: "probes",
                    value: p,
                })
            })
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

/// The live session's windows (Live ▸ Attach, Breakpoints, the save windows), and the Live menu
/// and toolbar controls that open them: each click is an [`AppAction`].
#[derive(Debug, Default)]
pub struct LiveWindows {
    /// The Live ▸ Attach window, when open.
    pub attach_form: Option<AttachForm>,
    /// The breakpoints window's fields.
    pub breakpoint_form: BreakpointForm,
    /// Whether the breakpoints window is open.
    pub show_breakpoints: bool,
    /// A save window, when open: what and where.
    pub save_form: Option<(SaveKind, String)>,
}

impl LiveWindows {
    /// Opens the save window for `kind`, with its default file name.
    pub fn open_save(&mut self, kind: SaveKind) {
        let name = match kind {
            SaveKind::Capture => "live-session.dscap",
            SaveKind::Sample => "live-dispatch.json",
        };
        self.save_form = Some((kind, name.into()));
    }

    /// The windows to attach, set breakpoints and save, when open.
    pub fn ui(&mut self, ctx: &egui::Context, shared: &Shared) -> Vec<AppAction> {
        let mut actions = Vec::new();
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
                // The window closes once attached (the app closes it); a failure leaves it open.
                let token = Some(form.token.trim().to_owned()).filter(|t| !t.is_empty());
                actions.push(AppAction::Attach {
                    addr: form.addr.trim().to_owned(),
                    token,
                });
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
                        // Named on its own: the checkbox keeps its words.
                        ui.add(egui::TextEdit::singleline(&mut f.probes).desired_width(60.0))
                            .on_hover_text("the probe count");
                    });
                    ui.horizontal(|ui| {
                        ui.checkbox(&mut f.program_on, "Before a dispatch of program");
                        // Named on its own: the checkbox keeps its words.
                        ui.add(egui::TextEdit::singleline(&mut f.program).desired_width(140.0))
                            .on_hover_text("the program address");
                    });
                    ui.horizontal(|ui| {
                        ui.checkbox(&mut f.nth_on, "Before dispatch number");
                        // Named on its own: the checkbox keeps its words.
                        ui.add(egui::TextEdit::singleline(&mut f.nth).desired_width(100.0))
                            .on_hover_text("the dispatch index");
                    });
                    apply = ui.button("Set breakpoints").clicked();
                });
            self.show_breakpoints = open;
            if apply {
                actions.push(match self.breakpoint_form.breakpoints() {
                    Ok(b) => AppAction::SetBreakpoints(b),
                    Err(e) => AppAction::Notice(format!("breakpoints: {e}")),
                });
            }
        }
        if let Some((kind, path)) = &mut self.save_form {
            let kind = *kind;
            let mut close = false;
            let title = match kind {
                SaveKind::Capture => "Save the live session as a capture",
                SaveKind::Sample => "Save as a sample, up to the selected dispatch",
            };
            let released = shared.live.as_ref().map_or(0, |l| l.released().dispatches);
            egui::Window::new(title).collapsible(false).show(ctx, |ui| {
                if released > 0 {
                    ui.label(
                        RichText::new(format!(
                            "The disk budget released the session's first {} dispatches: what is saved starts after them, and says so.",
                            thousands(released as f64)
                        ))
                        .color(style::MUTED),
                    );
                }
                ui.horizontal(|ui| {
                    let l = ui.label("Path");
                    ui.add(egui::TextEdit::singleline(path).desired_width(400.0))
                        .labelled_by(l.id);
                });
                ui.horizontal(|ui| {
                    if ui.button("Save").clicked() {
                        actions.push(AppAction::Save(kind, PathBuf::from(path.trim())));
                        close = true;
                    }
                    close |= ui.button("Cancel").clicked();
                });
            });
            if close {
                self.save_form = None;
            }
        }
        actions
    }
}

/// The Live menu.
pub fn menu_ui(ui: &mut egui::Ui, shared: &Shared) -> Vec<AppAction> {
    let mut actions = Vec::new();
    if ui.button("Attach…").clicked() {
        actions.push(AppAction::OpenAttach);
    }
    control_ui(ui, shared, LiveControl::Detach, Place::Menu, &mut actions);
    if ui
        .add_enabled(
            !shared.demo_running,
            egui::Button::new("Start the demo target and attach"),
        )
        .clicked()
    {
        actions.push(AppAction::Live(LiveCommand::StartDemo));
    }
    ui.separator();
    for c in [
        LiveControl::PauseContinue,
        LiveControl::Step,
        LiveControl::Breakpoints,
        LiveControl::Follow,
    ] {
        control_ui(ui, shared, c, Place::Menu, &mut actions);
    }
    ui.separator();
    let has = shared.live.is_some();
    let released = shared.live.as_ref().map_or(0, |l| l.released().dispatches);
    let tip = if released > 0 {
        format!(
            "What is still on disk: the disk budget released the first {} dispatches, and the capture says so",
            thousands(released as f64)
        )
    } else {
        "Everything received since attaching, with the memory snapshot taken at attach".into()
    };
    if ui
        .add_enabled(has, egui::Button::new("Save session as capture…"))
        .on_hover_text(tip)
        .clicked()
    {
        actions.push(AppAction::OpenSave(SaveKind::Capture));
    }
    if ui
        .add_enabled(
            has,
            egui::Button::new("Save as sample (up to the selected dispatch)…"),
        )
        .clicked()
    {
        actions.push(AppAction::OpenSave(SaveKind::Sample));
    }
    actions
}

/// The toolbar's live controls, drawn while a session is live.
pub fn toolbar_ui(ui: &mut egui::Ui, shared: &Shared) -> Vec<AppAction> {
    let mut actions = Vec::new();
    for c in [
        LiveControl::PauseContinue,
        LiveControl::Step,
        LiveControl::Breakpoints,
        LiveControl::Detach,
    ] {
        control_ui(ui, shared, c, Place::Toolbar, &mut actions);
    }
    let follow = ui
        .selectable_label(shared.follow, "Follow")
        .on_hover_text("Keep the newest dispatch selected and in view as dispatches arrive (End); selecting an older one stops following");
    if follow.clicked() {
        actions.push(if shared.follow {
            AppAction::SetFollow(false)
        } else {
            AppAction::Command(Command::Last)
        });
    }
    actions
}

/// Draws `control` as a button at `place`; a click pushes its action.
fn control_ui(
    ui: &mut egui::Ui,
    shared: &Shared,
    control: LiveControl,
    place: Place,
    actions: &mut Vec<AppAction>,
) {
    let attached = shared.live_attached();
    let paused = shared.live_paused();
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
        actions.push(match control {
            LiveControl::PauseContinue => AppAction::Live(LiveCommand::PauseContinue),
            LiveControl::Step => AppAction::Live(LiveCommand::Step),
            LiveControl::Breakpoints => AppAction::OpenBreakpoints,
            LiveControl::Detach => AppAction::Live(LiveCommand::Detach),
            LiveControl::Follow => AppAction::Command(Command::Last),
        });
    }
}

/// The live part of the status bar: attached, paused or running, rates and drops.
pub fn live_status_ui(ui: &mut egui::Ui, l: &LiveLink) {
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
