//! The main view, [`MainView`]: the dispatch list, the timeline, the selected dispatch's tabs
//! ([`Panels`]), the status bar, the banners and the error panel, drawn from [`Shared`]; what a
//! person asks for leaves as [`AppAction`]s.

use dispatchscope_views::{DispatchesPanel, GuestBytes, TimelinePanel, style};
use egui::RichText;

use super::live::LiveState;
use super::live_ui;
use super::panels::{PanelInput, Panels};
use super::shared::{AppAction, Settings, Shared, panel_actions};

/// The main view's panels and their state.
#[derive(Default)]
pub struct MainView {
    /// The dispatch list.
    pub dispatches: DispatchesPanel,
    /// The selected dispatch's tabs.
    pub panels: Panels,
    /// The timeline strip.
    pub timeline: TimelinePanel,
}

impl MainView {
    /// The main view with the persisted `settings`' filter and cell size.
    pub fn new(settings: &Settings) -> Self {
        let mut panels = Panels::default();
        if let Some(c) = settings.cell {
            panels.table.cell = c;
        }
        Self {
            dispatches: DispatchesPanel::new(settings.filter.clone()),
            panels,
            timeline: TimelinePanel::default(),
        }
    }

    /// The dispatch list (the left panel).
    pub fn list_ui(&mut self, ui: &mut egui::Ui, shared: &Shared) -> Vec<AppAction> {
        let Some(s) = &shared.session else {
            return Vec::new();
        };
        ui.heading("Dispatches");
        self.dispatches.follow = shared.follow && shared.live.is_some();
        let bookmarks = shared.bookmarks();
        panel_actions(self.dispatches.ui_with(
            ui,
            &s.rows,
            &s.unfinished,
            &bookmarks,
            shared.sel.dispatch,
        ))
        .collect()
    }

    /// The timeline strip, `height` points tall.
    pub fn timeline_ui(&mut self, ui: &mut egui::Ui, shared: &Shared) -> Vec<AppAction> {
        let Some(s) = &shared.session else {
            return Vec::new();
        };
        let h = ui.available_height().max(50.0);
        self.timeline.live = shared.live.is_some();
        self.timeline.follow = shared.follow && shared.live.is_some();
        panel_actions(self.timeline.ui(ui, &s.rows, shared.sel.dispatch, h)).collect()
    }

    /// The status bar.
    pub fn status_ui(&self, ui: &mut egui::Ui, shared: &Shared) {
        ui.horizontal(|ui| {
            if let Some(l) = &shared.live {
                live_ui::live_status_ui(ui, l);
                ui.separator();
            }
            let Some(s) = &shared.session else {
                ui.label("No session open: File ▸ Open (Ctrl+O), or drop a sample on the window.");
                return;
            };
            let sel = &shared.sel;
            let Some(r) = s.reports.get(sel.dispatch) else {
                ui.label(format!("{}: no dispatches", s.source.display()));
                return;
            };
            ui.label(RichText::new(format!("dispatch {}", r.index)).strong())
                .on_hover_text(format!(
                    "{} of {} in this session",
                    sel.dispatch + 1,
                    s.reports.len()
                ));
            ui.label(format!("({} of {})", sel.dispatch + 1, s.reports.len()));
            ui.label(style::mode_text(r.mode).strong());
            ui.label(style::mono(format!("program {}", style::hex(r.program))));
            if let Some(slot) = sel.slot {
                ui.label(format!("selected slot {slot}"));
            }
            if let Some(a) = sel.access {
                ui.label(format!("selected access {a}"));
            }
            ui.with_layout(egui::Layout::right_to_left(egui::Align::Center), |ui| {
                ui.label(RichText::new(s.source.display()).color(style::MUTED));
            });
        });
    }

    /// The error panel, while an open failed.
    pub fn error_ui(&self, ui: &mut egui::Ui, shared: &Shared) -> Vec<AppAction> {
        let mut actions = Vec::new();
        let Some(e) = &shared.error else {
            return actions;
        };
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
                        actions.push(AppAction::DismissError);
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
                if shared.session.is_some() {
                    ui.label(RichText::new("The session already open is unchanged.").italics());
                }
            });
        actions
    }

    /// The notice, a capture's scan, the session's warning, a live session's end.
    pub fn banners_ui(&self, ui: &mut egui::Ui, shared: &Shared) -> Vec<AppAction> {
        let mut actions = Vec::new();
        if let Some(n) = &shared.notice {
            ui.horizontal(|ui| {
                ui.label(RichText::new(n).color(style::SELECTED));
                if ui.small_button("Dismiss").clicked() {
                    actions.push(AppAction::DismissNotice);
                }
            });
        }
        if let Some(s) = &shared.session
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
        if let Some(loss) = shared.session.as_ref().and_then(|s| s.loss.as_ref()) {
            egui::Frame::group(ui.style())
                .stroke(egui::Stroke::new(1.5, style::REFUSED))
                .show(ui, |ui| {
                    ui.set_width(ui.available_width());
                    ui.horizontal_wrapped(|ui| {
                        ui.label(
                            RichText::new(format!("Device lost: {}", loss.status))
                                .strong()
                                .color(style::REFUSED),
                        );
                        ui.label(format!(
                            "{} in flight; {}",
                            style::count(loss.in_flight.len(), "dispatch", "dispatches"),
                            loss.findings
                                .first()
                                .map_or("no finding", String::as_str)
                        ));
                        if ui
                            .button("Show the loss report")
                            .on_hover_text("The dispatches in flight, the fault addresses and the findings (Ctrl+D)")
                            .clicked()
                        {
                            actions.push(AppAction::Panel(dispatchscope_views::Action::ShowLoss));
                        }
                    });
                });
        }
        if let Some(w) = shared.session.as_ref().and_then(|s| s.warning.as_ref()) {
            egui::Frame::group(ui.style())
                .stroke(egui::Stroke::new(1.0, style::SELECTED))
                .show(ui, |ui| {
                    ui.set_width(ui.available_width());
                    ui.label(RichText::new("Warning").strong().color(style::SELECTED));
                    ui.label(w);
                });
        }
        if let Some(l) = &shared.live
            && let LiveState::Disconnected { reason } = &l.state
        {
            ui.label(
                RichText::new(format!(
                    "disconnected ({reason}); the {} received are kept",
                    style::count(shared.n_dispatches(), "dispatch", "dispatches")
                ))
                .color(style::MUTED),
            );
        }
        actions
    }

    /// The selected dispatch: its heading, the tab bar, and the tab shown.
    pub fn central_ui(&mut self, ui: &mut egui::Ui, shared: &Shared) -> Vec<AppAction> {
        puffin::profile_function!();
        let Some(s) = &shared.session else {
            ui.heading("dispatchscope");
            ui.label("Open a sample with File ▸ Open (Ctrl+O), a built-in sample from File ▸ Built-in samples, or drop a file on this window.");
            return Vec::new();
        };
        let sel = &shared.sel;
        let Some(r) = s.reports.get(sel.dispatch) else {
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
        let tab = shared.settings.tab;
        if let Some(t) = self
            .panels
            .tabs_ui(ui, tab, r, false, |_, text| text.into())
        {
            actions.push(AppAction::Panel(dispatchscope_views::Action::ShowTab(t)));
        }
        ui.separator();
        if let Some(note) = s.state_note_at(sel.dispatch)
            && matches!(
                tab,
                dispatchscope_views::Tab::Memory | dispatchscope_views::Tab::ChunkTable
            )
        {
            ui.label(RichText::new(note).color(style::MUTED));
        }
        let bytes = match &shared.live {
            Some(l) if l.is_attached() => GuestBytes::Live(l.memory.as_ref()),
            _ => GuestBytes::Unavailable,
        };
        let input = PanelInput {
            report: r,
            session: s,
            sel,
            bytes,
        };
        actions.extend(panel_actions(self.panels.tab_ui(ui, tab, &input, false)));
        actions
    }
}
