//! The After-the-dispatch panel (C1, C2, O8, L1): the marked chunks, the pages the write-watch
//! noted written, the protected targets that lost trust, the words each holder wrote back (the
//! words that changed highlighted), and any L1 hazard.

use dispatchscope_core::DispatchReport;
use egui::RichText;

use crate::compare::{self, DiffMarks};
use crate::style::{self, hex, mono};
use crate::{Action, Selection};

/// The After panel's state.
#[derive(Debug, Default)]
pub struct AfterPanel {
    /// Show only words whose value changed.
    pub changed_only: bool,
    /// In a comparison, what differs from the other side (hazards, marks and write-back words
    /// that differ are highlighted).
    pub diff: Option<DiffMarks>,
}

impl AfterPanel {
    /// Draws the panel for `report`.
    pub fn ui(
        &mut self,
        ui: &mut egui::Ui,
        report: &DispatchReport,
        sel: &Selection,
    ) -> Vec<Action> {
        puffin::profile_function!();
        let mut actions = Vec::new();
        let diff = self.diff.clone().unwrap_or_default();
        egui::ScrollArea::vertical()
            .id_salt("after-scroll")
            .auto_shrink([false, false])
            .show(ui, |ui| {
                host_path_ui(ui, &report.host_path);
                style::section(ui, "L1 hazards");
                if report.hazards.is_empty() {
                    style::nothing(
                        ui,
                        "None: no device-addressed store reached bytes a bound holder writes back.",
                    );
                }
                for h in &report.hazards {
                    let differs = diff.hazards.contains(&(h.holder, h.address));
                    egui::Frame::group(ui.style())
                        .stroke(if differs {
                            egui::Stroke::new(2.0, compare::DIFFERS)
                        } else {
                            egui::Stroke::new(1.0, style::REFUSED)
                        })
                        .show(ui, |ui| {
                            if differs {
                                ui.label(
                                    RichText::new(format!(
                                        "{} differs from {}",
                                        compare::GLYPH,
                                        diff.side.other().name()
                                    ))
                                    .color(compare::DIFFERS),
                                );
                            }
                            ui.label(
                                RichText::new(format!(
                                    "{} · {} · holder slot {} · word {}",
                                    h.rule.id(),
                                    h.decision,
                                    h.holder,
                                    hex(h.address)
                                ))
                                .strong()
                                .color(style::REFUSED),
                            );
                            ui.label(&h.message);
                            ui.horizontal(|ui| {
                                if ui
                                    .link(format!("device store: access {}", h.device_store))
                                    .clicked()
                                {
                                    actions.push(Action::SelectAccess(Some(h.device_store)));
                                }
                                if let Some(b) = h.bound_store
                                    && ui.link(format!("bound store: access {b}")).clicked()
                                {
                                    actions.push(Action::SelectAccess(Some(b)));
                                }
                            });
                        });
                }
                style::section(ui, "Marked chunks (C1)");
                if report.marks.is_empty() {
                    style::nothing(ui, "No device store marked a chunk.");
                }
                egui::Grid::new("after-marks")
                    .striped(true)
                    .num_columns(3)
                    .show(ui, |ui| {
                        if !report.marks.is_empty() {
                            ui.strong("table slot");
                            ui.strong("chunk's guest bytes");
                            ui.strong("stores");
                            ui.end_row();
                        }
                        for m in &report.marks {
                            if ui
                                .selectable_label(
                                    sel.table_slot == Some(m.table_slot),
                                    mono(m.table_slot.to_string()),
                                )
                                .on_hover_text("Select this slot on the chunk table")
                                .clicked()
                            {
                                actions.push(Action::SelectTableSlot(Some(m.table_slot)));
                            }
                            let differs = diff.mark(m.guest);
                            style::addr_label(ui, compare::mark_mono(m.guest.to_string(), differs));
                            ui.label(mono(m.stores.to_string()));
                            ui.end_row();
                        }
                    });
                style::section(ui, "Pages noted written (C2, D824)");
                if report.hand_off.pages_noted_written.is_empty() {
                    style::nothing(ui, "None.");
                }
                for p in &report.hand_off.pages_noted_written {
                    ui.label(mono(p.to_string()));
                }
                style::section(ui, "Targets that lost trust (C2, D720)");
                if report.hand_off.targets_distrusted.is_empty() {
                    style::nothing(ui, "None.");
                }
                for t in &report.hand_off.targets_distrusted {
                    ui.label(mono(format!(
                        "target {} \"{}\" {}: {}",
                        t.id, t.name, t.range, t.by
                    )));
                }
                ui.horizontal(|ui| {
                    style::section(ui, "Write-back (O8)");
                    ui.checkbox(&mut self.changed_only, "changed words only");
                });
                if report.write_back.is_empty() {
                    style::nothing(ui, "No holder was written back.");
                }
                for wb in &report.write_back {
                    let selected_holder = sel
                        .slot
                        .and_then(|s| report.slots.iter().find(|b| b.slot == s))
                        .and_then(|b| b.holder)
                        == Some(wb.holder);
                    let changed = wb.words.iter().filter(|w| w.changed()).count();
                    let n_differ = diff.words.iter().filter(|(h, _)| *h == wb.holder).count()
                        + usize::from(diff.unlisted.contains(&wb.holder));
                    // The header stays short (a narrow panel cuts it, never mid-address); the
                    // range and what differs are the body's first lines.
                    let title = format!(
                        "holder slot {}: {} of {} written back, {changed} changed",
                        wb.holder,
                        wb.words_written(),
                        style::count(
                            usize::try_from(wb.words_total).unwrap_or(usize::MAX),
                            "word",
                            "words"
                        ),
                    );
                    if selected_holder && let Some(s) = sel.slot {
                        ui.label(
                            RichText::new(format!(
                                "holder slot {} holds the selected slot {s}",
                                wb.holder
                            ))
                            .color(style::SELECTED),
                        );
                    }
                    let title = if n_differ > 0 {
                        format!("{} {title}", compare::GLYPH)
                    } else {
                        title
                    };
                    let title = if selected_holder {
                        RichText::new(title).color(style::SELECTED)
                    } else if n_differ > 0 {
                        RichText::new(title).color(compare::DIFFERS)
                    } else {
                        RichText::new(title)
                    };
                    egui::CollapsingHeader::new(title)
                        .id_salt(("write-back", wb.holder))
                        .default_open(wb.words.len() <= 64)
                        .show(ui, |ui| {
                            ui.horizontal_wrapped(|ui| {
                                ui.label("over");
                                style::addr_label(ui, mono(wb.range.to_string()));
                            });
                            if n_differ > 0 {
                                ui.label(
                                    RichText::new(format!(
                                        "{} {} from {}",
                                        compare::GLYPH,
                                        style::count(n_differ, "word differs", "words differ"),
                                        diff.side.other().name()
                                    ))
                                    .color(compare::DIFFERS),
                                );
                            }
                            egui::Grid::new(("wb-grid", wb.holder))
                                .striped(true)
                                .num_columns(4)
                                .show(ui, |ui| {
                                    ui.strong("address");
                                    ui.strong("before");
                                    ui.strong("written");
                                    ui.strong("bytes");
                                    ui.end_row();
                                    for w in wb
                                        .words
                                        .iter()
                                        .filter(|w| !self.changed_only || w.changed())
                                    {
                                        let c = w.changed();
                                        let differs = diff.words.contains(&(wb.holder, w.address));
                                        style::addr_cell(
                                            ui,
                                            w.address,
                                            compare::mark_mono(hex(w.address), differs),
                                            &mut actions,
                                        );
                                        ui.label(mono(w.old_text()));
                                        let t = mono(w.new_text());
                                        ui.label(if c {
                                            t.color(style::WRITTEN).strong()
                                        } else {
                                            t
                                        });
                                        ui.label(mono(w.bytes.to_string()));
                                        ui.end_row();
                                    }
                                });
                            if !wb.lists_every_word() {
                                unlisted(ui, wb, &mut actions);
                            }
                        });
                }
            });
        actions
    }
}

/// A device pass's write-back past the words it lists: how many, and its runs.
fn unlisted(
    ui: &mut egui::Ui,
    wb: &dispatchscope_core::report::WriteBack,
    actions: &mut Vec<Action>,
) {
    let runs = wb.runs.len() as u64 + wb.runs_not_listed;
    ui.label(format!(
        "{} more words written back, not listed (a device pass lists its first {}), in {runs} {}:",
        wb.words_not_listed,
        wb.words.len(),
        if runs == 1 { "run" } else { "runs" }
    ));
    egui::Grid::new(("wb-runs", wb.holder))
        .striped(true)
        .num_columns(2)
        .show(ui, |ui| {
            for run in &wb.runs {
                style::addr_cell(ui, run.start, mono(format!("{run}")), actions);
                let words = run.size_bytes().div_ceil(4);
                ui.label(mono(format!(
                    "{words} {}",
                    if words == 1 { "word" } else { "words" }
                )));
                ui.end_row();
            }
        });
    if wb.runs_not_listed > 0 {
        style::nothing(
            ui,
            &format!(
                "{} runs past these were counted, not placed.",
                wb.runs_not_listed
            ),
        );
    }
}

/// Host mode: what the emulator's memory did to the dispatch, first, since a failed call means
/// guest bytes that did not land: each failed call (with the words lost), each event that waited
/// for the dispatch (M5), and what the checked mode found changed without an event.
fn host_path_ui(ui: &mut egui::Ui, h: &dispatchscope_core::report::HostPathReport) {
    if h.is_empty() {
        return;
    }
    style::section(ui, "The emulator's memory (host mode)");
    for f in &h.failures {
        egui::Frame::group(ui.style())
            .stroke(egui::Stroke::new(1.0, style::REFUSED))
            .show(ui, |ui| {
                ui.label(
                    RichText::new(format!("failed: {}", f.kind.words()))
                        .strong()
                        .color(style::REFUSED),
                );
                ui.label(f.error.to_string());
                if let Some(lost) = f.lost {
                    let bytes: String = f.bytes.iter().map(|b| format!("{b:02x}")).collect();
                    ui.label(mono(format!("lost: guest {lost}: {bytes}")))
                        .on_hover_text("The device's bytes that did not reach guest memory");
                }
            });
    }
    if h.failures_not_listed > 0 {
        ui.label(format!("… {} more failed calls", h.failures_not_listed));
    }
    for w in &h.waited {
        ui.label(format!(
            "M5: a {} of {} waited: it touched {}, which this dispatch could reach",
            w.event, w.range, w.reached
        ));
    }
    if let Some(c) = &h.checked {
        ui.label(format!(
            "Checked mode: {} piece(s) ({:#x} bytes) looked at again before the device ran; {} changed without an event",
            c.pieces,
            c.bytes,
            c.contradictions.len()
        ));
        for d in &c.contradictions {
            ui.label(RichText::new(d).color(style::REFUSED));
        }
    }
}
