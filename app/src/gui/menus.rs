//! The menu bar (File, Live, Session, Go, View, Help) and the toolbar under it, [`MenuBar`]: every
//! item is an [`AppAction`], a [`Command`] (the same one its key does) or the opening of a window;
//! none draws a panel, and none changes anything itself.

use dispatchscope_views::keys::Command;
use dispatchscope_views::{Action, Tab};

use super::live_ui;
use super::shared::{AppAction, Shared};

/// The toolbar's stepping buttons: label, command, tip; a separator after each group.
const STEP_BUTTONS: [&[(&str, Command, &str)]; 2] = [
    &[
        ("First", Command::First, "First dispatch (Ctrl+Home)"),
        (
            "Previous",
            Command::Previous,
            "Previous dispatch (Shift+F10)",
        ),
        ("Next", Command::Next, "Next dispatch (F10)"),
        ("Last", Command::Last, "Last dispatch (Ctrl+End)"),
    ],
    &[
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
    ],
];

/// The comparison's stepping buttons, shown while one is open.
const DIFFERENCE_BUTTONS: [(&str, Command, &str); 2] = [
    (
        "Previous difference",
        Command::PreviousDifference,
        "Previous dispatch that differs from B (Shift+F7)",
    ),
    (
        "Next difference",
        Command::NextDifference,
        "Next dispatch that differs from B, or has no counterpart there (F7)",
    ),
];

/// The menu bar and the toolbar. They keep no state of their own: what they show is
/// [`Shared`]'s.
#[derive(Debug, Default)]
pub struct MenuBar;

/// One button a command of `buttons` (label, command, tip), enabled where the command has a
/// target, then a separator.
fn command_buttons_ui(
    ui: &mut egui::Ui,
    shared: &Shared,
    buttons: &[(&str, Command, &str)],
    actions: &mut Vec<AppAction>,
) {
    for &(label, cmd, tip) in buttons {
        let enabled = shared.target(cmd).is_some();
        if ui
            .add_enabled(enabled, egui::Button::new(label))
            .on_hover_text(tip)
            .clicked()
        {
            actions.push(AppAction::Command(cmd));
        }
    }
    ui.separator();
}

impl MenuBar {
    /// The menu bar; `listing_open` is whether the program listing is shown.
    pub fn ui(&mut self, ui: &mut egui::Ui, shared: &Shared, listing_open: bool) -> Vec<AppAction> {
        let mut actions = Vec::new();
        let a = &mut actions;
        egui::MenuBar::new().ui(ui, |ui| {
            ui.menu_button("File", |ui| {
                if ui.button("Open…").on_hover_text("Ctrl+O").clicked() {
                    a.push(AppAction::Command(Command::Open));
                }
                if ui.button("Open path…").on_hover_text("Type the path of a sample, a capture, or a live session's folder").clicked() {
                    a.push(AppAction::AskPath { compare: false });
                }
                ui.menu_button("Open recent", |ui| {
                    let recent = &shared.settings.recent;
                    if recent.is_empty() {
                        ui.label("No recent files");
                    }
                    for p in recent {
                        if ui.button(p.display().to_string()).clicked() {
                            a.push(AppAction::OpenPath(p.clone()));
                        }
                    }
                    if !recent.is_empty() && ui.button("Clear the list").clicked() {
                        a.push(AppAction::ClearRecent);
                    }
                });
                ui.menu_button("Built-in samples", |ui| {
                    let samples = super::embedded_samples();
                    if samples.is_empty() {
                        ui.label("This build has no built-in samples");
                    }
                    for (name, _) in samples {
                        if ui.button(*name).clicked() {
                            a.push(AppAction::OpenEmbedded(name));
                        }
                    }
                });
                ui.separator();
                let can_compare = shared.session.is_some() && shared.live.is_none();
                if ui
                    .add_enabled(can_compare, egui::Button::new("Compare with…"))
                    .on_hover_text("Compare the open session (A) with another sample or capture (B), dispatch by dispatch")
                    .clicked()
                {
                    a.push(AppAction::FileDialog { compare: true });
                }
                if ui
                    .add_enabled(can_compare, egui::Button::new("Compare with path…"))
                    .on_hover_text("Type the path of the session to compare with")
                    .clicked()
                {
                    a.push(AppAction::AskPath { compare: true });
                }
                if ui
                    .add_enabled(shared.comparing, egui::Button::new("Close comparison"))
                    .clicked()
                {
                    a.push(AppAction::CloseComparison);
                }
                ui.separator();
                if ui.button("Quit").clicked() {
                    a.push(AppAction::Quit);
                }
            });
            ui.menu_button("Live", |ui| a.extend(live_ui::menu_ui(ui, shared)));
            ui.menu_button("Session", |ui| {
                let can = shared.session.is_some() && shared.live.is_none();
                if ui
                    .add_enabled(can, egui::Button::new("What if…"))
                    .on_hover_text("Re-plan the session under other limits and compare it with itself")
                    .clicked()
                {
                    a.push(AppAction::OpenWhatIf);
                }
                if ui
                    .add_enabled(shared.comparing, egui::Button::new("Close comparison"))
                    .clicked()
                {
                    a.push(AppAction::CloseComparison);
                }
            });
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
                    ("Next difference (F7)", Command::NextDifference),
                    ("Previous difference (Shift+F7)", Command::PreviousDifference),
                    ("Go to dispatch… (Ctrl+G)", Command::GoTo),
                    ("Bookmark (Ctrl+B)", Command::Bookmark),
                ] {
                    if ui.button(label).clicked() {
                        a.push(AppAction::Command(cmd));
                    }
                }
            });
            ui.menu_button("View", |ui| {
                for t in Tab::ALL {
                    if ui.selectable_label(shared.settings.tab == t, t.title()).clicked() {
                        a.push(AppAction::Panel(Action::ShowTab(t)));
                    }
                }
                ui.separator();
                let mut listing = listing_open;
                if ui
                    .checkbox(&mut listing, "Program listing (Ctrl+L)")
                    .on_hover_text(
                        "The guest program's RDNA2 code around the selected access, beside the panels (when the session carries the code)",
                    )
                    .changed()
                {
                    a.push(AppAction::SetListing(listing));
                }
                let mut on = shared.profiler_on;
                if ui
                    .checkbox(&mut on, "Profiler (puffin_http)")
                    .on_hover_text(format!(
                        "Serves puffin profile data on 127.0.0.1:{}; view it with the external puffin_viewer (cargo install puffin_viewer, then puffin_viewer --url 127.0.0.1:{})",
                        puffin_http::DEFAULT_PORT,
                        puffin_http::DEFAULT_PORT
                    ))
                    .changed()
                {
                    a.push(AppAction::SetProfiler(on));
                }
            });
            ui.menu_button("Help", |ui| {
                if ui.button("Keys (F1)").clicked() {
                    a.push(AppAction::Command(Command::Help));
                }
            });
        });
        actions
    }

    /// The toolbar: live controls when live, stepping, go to, bookmark, a load's progress.
    pub fn toolbar_ui(&mut self, ui: &mut egui::Ui, shared: &Shared) -> Vec<AppAction> {
        let mut actions = Vec::new();
        let has = shared.session.is_some();
        ui.horizontal(|ui| {
            if shared.live.is_some() {
                actions.extend(live_ui::toolbar_ui(ui, shared));
                ui.separator();
            }
            for group in STEP_BUTTONS {
                command_buttons_ui(ui, shared, group, &mut actions);
            }
            if shared.comparing {
                command_buttons_ui(ui, shared, &DIFFERENCE_BUTTONS, &mut actions);
            }
            if ui
                .add_enabled(has, egui::Button::new("Go to…"))
                .on_hover_text("Go to dispatch N (Ctrl+G)")
                .clicked()
            {
                actions.push(AppAction::Command(Command::GoTo));
            }
            let marked = shared.bookmarks().contains(&shared.sel.dispatch);
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
                actions.push(AppAction::Command(Command::Bookmark));
            }
            if let Some(progress) = &shared.loading {
                let (done, total, frac) = progress.fraction();
                ui.separator();
                ui.spinner();
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
        actions
    }
}
