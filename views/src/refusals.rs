//! The Refusals panel: a card per refusal, with its rule id and decision id, the sentence, the
//! values, what would have let the dispatch run, and the rule's text as `rules.rs` holds it
//! ([`Rule::text`], shipped in the binary).
//!
//! [`Rule::text`]: dispatchscope_core::Rule::text

use dispatchscope_core::DispatchReport;
use egui::{RichText, Stroke};

use crate::compare::{self, DiffMarks};
use crate::style::{self, mono};
use crate::{Action, Selection};

/// The Refusals panel's state.
#[derive(Debug, Default)]
pub struct RefusalsPanel {
    /// In a comparison, what differs from the other side (a refusal only this side has is
    /// highlighted, as is the mode when it changed).
    pub diff: Option<DiffMarks>,
}

/// The title of a refusal card: `"O7 · D953 · slot 1"`; tests find cards by it.
pub fn card_title(r: &dispatchscope_core::report::Refusal) -> String {
    let mut t = format!("{} · {}", r.rule.id(), r.decision);
    if let Some(slot) = r.slot {
        t.push_str(&format!(" · slot {slot}"));
    }
    t
}

impl RefusalsPanel {
    /// Draws the panel for `report`.
    pub fn ui(
        &mut self,
        ui: &mut egui::Ui,
        report: &DispatchReport,
        sel: &Selection,
    ) -> Vec<Action> {
        puffin::profile_function!();
        let mut actions = Vec::new();
        ui.horizontal_wrapped(|ui| {
            ui.label("Mode:");
            ui.label(style::mode_text(report.mode));
            if self.diff.as_ref().is_some_and(|d| d.mode) {
                ui.label(
                    RichText::new(format!("{} mode differs", compare::GLYPH))
                        .color(compare::DIFFERS),
                );
            }
            ui.label(&report.mode_reason);
        });
        if !report.reasons.is_empty() {
            for r in &report.reasons {
                ui.label(format!("A1 reason {r:?}: {}", r.sentence()));
            }
        }
        if report.refusals.is_empty() {
            style::nothing(ui, "Nothing was refused.");
            return actions;
        }
        egui::ScrollArea::vertical()
            .id_salt("refusals-scroll")
            .auto_shrink([false, false])
            .show(ui, |ui| {
                for (i, r) in report.refusals.iter().enumerate() {
                    let selected = r.slot.is_some() && r.slot == sel.slot;
                    let differs = self.diff.as_ref().filter(|d| d.refusal(r));
                    let stroke = if selected {
                        Stroke::new(1.5, style::SELECTED)
                    } else if differs.is_some() {
                        Stroke::new(2.0, compare::DIFFERS)
                    } else {
                        Stroke::new(1.0, style::REFUSED)
                    };
                    egui::Frame::group(ui.style())
                        .stroke(stroke)
                        .show(ui, |ui| {
                            ui.set_width(ui.available_width());
                            if selected && let Some(s) = r.slot {
                                ui.label(
                                    RichText::new(format!("about the selected slot {s}"))
                                        .color(style::SELECTED),
                                );
                            }
                            if let Some(d) = differs {
                                ui.label(
                                    RichText::new(format!(
                                        "{} {}",
                                        compare::GLYPH,
                                        d.refusal_note()
                                    ))
                                    .strong()
                                    .color(compare::DIFFERS),
                                );
                            }
                            ui.label(RichText::new(&r.message).color(style::REFUSED));
                            egui::CollapsingHeader::new(RichText::new(card_title(r)).strong())
                                .id_salt(("refusal", i))
                                .default_open(false)
                                .show(ui, |ui| {
                                    card_body(ui, r, &mut actions);
                                });
                        });
                }
            });
        actions
    }
}

fn card_body(
    ui: &mut egui::Ui,
    r: &dispatchscope_core::report::Refusal,
    actions: &mut Vec<Action>,
) {
    if let Some(slot) = r.slot
        && ui.link(format!("select slot {slot}")).clicked()
    {
        actions.push(Action::SelectSlot(Some(slot)));
        actions.push(Action::ShowTab(crate::Tab::Bindings));
    }
    egui::Grid::new(("refusal-values", r.rule, r.slot, &r.message))
        .num_columns(2)
        .show(ui, |ui| {
            for v in &r.values {
                ui.label(&v.name);
                ui.label(mono(&v.value));
                ui.end_row();
            }
        });
    ui.horizontal_wrapped(|ui| {
        ui.label(RichText::new("Would run if:").strong());
        ui.label(&r.would_run_if);
    });
    if r.ours {
        ui.label(
            RichText::new("This refusal is dispatchscope's addition to the records.").italics(),
        );
    }
    ui.separator();
    ui.label(
        RichText::new(format!(
            "Rule {} ({}): {}",
            r.rule.id(),
            r.rule.decision(),
            r.rule.title()
        ))
        .strong(),
    );
    ui.label(r.rule.text());
}
