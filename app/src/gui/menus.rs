//! The menu bar (File, Live, Go, View, Help) and the toolbar under it: every item either carries
//! out a [`Command`] (the same one its key does) or opens a window; none draws a panel.

use dispatchscope_views::Tab;
use dispatchscope_views::keys::Command;

use super::{GuiApp, embedded_samples};

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

impl GuiApp {
    /// One button a command of `buttons` (label, command, tip), enabled where the command has a
    /// target, then a separator.
    fn command_buttons_ui(
        &mut self,
        ui: &mut egui::Ui,
        ctx: &egui::Context,
        buttons: &[(&str, Command, &str)],
    ) {
        for &(label, cmd, tip) in buttons {
            let enabled = self.target(cmd).is_some();
            if ui
                .add_enabled(enabled, egui::Button::new(label))
                .on_hover_text(tip)
                .clicked()
            {
                self.command(ctx, cmd);
            }
        }
        ui.separator();
    }

    /// The menu bar.
    pub(super) fn menu_ui(&mut self, ui: &mut egui::Ui) {
        let ctx = ui.ctx().clone();
        egui::MenuBar::new().ui(ui, |ui| {
            ui.menu_button("File", |ui| {
                if ui.button("Open…").on_hover_text("Ctrl+O").clicked() {
                    self.command(&ctx, Command::Open);
                }
                if ui.button("Open path…").on_hover_text("Type the path of a sample").clicked() {
                    self.dialog.ask_for_path("");
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
                let can_compare = self.session.is_some() && self.live.is_none();
                if ui
                    .add_enabled(can_compare, egui::Button::new("Compare with…"))
                    .on_hover_text("Compare the open session (A) with another sample or capture (B), dispatch by dispatch")
                    .clicked()
                {
                    self.start_compare_dialog(&ctx);
                }
                if ui
                    .add_enabled(can_compare, egui::Button::new("Compare with path…"))
                    .on_hover_text("Type the path of the session to compare with")
                    .clicked()
                {
                    self.dialog.ask_for_compare_path("");
                }
                if ui
                    .add_enabled(self.compare.is_some(), egui::Button::new("Close comparison"))
                    .clicked()
                {
                    self.close_compare();
                }
                ui.separator();
                if ui.button("Quit").clicked() {
                    ctx.send_viewport_cmd(egui::ViewportCommand::Close);
                }
            });
            ui.menu_button("Live", |ui| self.live_menu_ui(ui));
            ui.menu_button("Session", |ui| {
                let can = self.session.is_some() && self.live.is_none();
                if ui
                    .add_enabled(can, egui::Button::new("What if…"))
                    .on_hover_text("Re-plan the session under other limits and compare it with itself")
                    .clicked()
                {
                    self.open_what_if();
                }
                if ui
                    .add_enabled(self.compare.is_some(), egui::Button::new("Close comparison"))
                    .clicked()
                {
                    self.close_compare();
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
                ui.checkbox(&mut self.listing.open, "Program listing (Ctrl+L)")
                    .on_hover_text(
                        "The guest program's RDNA2 code around the selected access, beside the panels (when the session carries the code)",
                    );
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

    /// The toolbar: live controls when live, stepping, go to, bookmark, a load's progress.
    pub(super) fn toolbar_ui(&mut self, ui: &mut egui::Ui) {
        let ctx = ui.ctx().clone();
        let has = self.session.is_some();
        ui.horizontal(|ui| {
            if self.live.is_some() {
                self.live_controls_ui(ui);
                ui.separator();
            }
            for group in STEP_BUTTONS {
                self.command_buttons_ui(ui, &ctx, group);
            }
            if self.compare.is_some() {
                self.command_buttons_ui(ui, &ctx, &DIFFERENCE_BUTTONS);
            }
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
                let (done, total, frac) = l.progress.fraction();
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
    }
}
