//! The Device lost view, [`LossPanel`]: a lost device's report ([`DeviceLossReport`]) as a person
//! reads it first: the status, the dispatches in flight (the ones the loss may have come from) as
//! a list, each with its plan and its program's history when selected, the fault addresses and
//! where they land, and the findings. A dispatch in flight has no report of its own; its row's
//! "last run" asks for its program's last completed dispatch ([`Action::SelectIndex`]), whose
//! report the other panels show. It draws from the report alone and never reads anything else.

use dispatchscope_analysis::explain::fault_lands;
use dispatchscope_core::report::{DeviceLossReport, LostDispatch};
use egui::RichText;

use crate::Action;
use crate::style::{self, hex, mono};

/// The Device lost view's state: which dispatch in flight is opened.
#[derive(Debug, Default)]
pub struct LossPanel {
    /// The dispatch in flight whose plan and history are shown, by index.
    pub selected: Option<u64>,
}

impl LossPanel {
    /// Draws `loss`; a click on a dispatch's last run asks for that dispatch.
    pub fn ui(&mut self, ui: &mut egui::Ui, loss: &DeviceLossReport) -> Vec<Action> {
        let mut actions = Vec::new();
        ui.label(
            RichText::new(format!("Device lost: {}", loss.status))
                .heading()
                .color(style::REFUSED),
        );
        ui.label(format!(
            "{} completed before the loss; {} in flight; the next would have been dispatch {}.",
            style::count(loss.completed as usize, "dispatch", "dispatches"),
            loss.in_flight.len(),
            loss.next_dispatch
        ));
        egui::ScrollArea::vertical()
            .id_salt("loss-scroll")
            .auto_shrink([false, false])
            .show(ui, |ui| {
                ui.add_space(4.0);
                ui.strong("Findings");
                for f in &loss.findings {
                    ui.horizontal_wrapped(|ui| {
                        ui.label("•");
                        ui.label(f);
                    });
                }
                ui.add_space(6.0);
                ui.strong(format!(
                    "In flight ({}, oldest first)",
                    loss.in_flight.len()
                ));
                if loss.in_flight.is_empty() {
                    style::nothing(ui, "No dispatch was in flight.");
                }
                for d in &loss.in_flight {
                    self.dispatch_ui(ui, d, &mut actions);
                }
                ui.add_space(6.0);
                match &loss.fault {
                    None => {
                        ui.strong("Fault addresses");
                        style::nothing(
                            ui,
                            "The device gave no fault report (VK_EXT_device_fault), or the emulator passed none.",
                        );
                    }
                    Some(f) => {
                        ui.strong(format!("Fault addresses: {}", f.description));
                        egui::Grid::new("loss-faults")
                            .striped(true)
                            .num_columns(3)
                            .show(ui, |ui| {
                                for a in &f.addresses {
                                    style::addr_label(ui, mono(hex(a.address)));
                                    ui.label(&a.kind);
                                    ui.label(fault_lands(&a.lands));
                                    ui.end_row();
                                }
                            });
                    }
                }
            });
        actions
    }

    /// One dispatch in flight: a row that opens its plan and history, and its last run.
    fn dispatch_ui(&mut self, ui: &mut egui::Ui, d: &LostDispatch, actions: &mut Vec<Action>) {
        let open = self.selected == Some(d.index);
        ui.horizontal(|ui| {
            let title = format!("dispatch {}", d.index);
            if ui
                .selectable_label(open, mono(&title))
                .on_hover_text("Show its plan and its program's history")
                .clicked()
            {
                self.selected = (!open).then_some(d.index);
            }
            style::addr_label(ui, mono(hex(d.program)));
            ui.label(style::mode_text(d.mode));
            if !d.label.is_empty() {
                ui.label(&d.label);
            }
            let h = &d.history;
            let escapes = h.escapes_total();
            if escapes > 0 {
                ui.label(
                    RichText::new(style::count(escapes as usize, "escape", "escapes"))
                        .color(style::REFUSED),
                );
            }
            match h.last_dispatch {
                Some(n) => {
                    if ui
                        .link(format!("last run: dispatch {n}"))
                        .on_hover_text(format!(
                            "Select dispatch {n}, the last completed run of program {}",
                            hex(d.program)
                        ))
                        .clicked()
                    {
                        actions.push(Action::SelectIndex(n));
                    }
                }
                None => {
                    ui.label(RichText::new("its program's first dispatch").color(style::MUTED));
                }
            }
        });
        if !open {
            return;
        }
        egui::Frame::group(ui.style()).show(ui, |ui| {
            ui.set_width(ui.available_width());
            ui.label(&d.mode_reason);
            egui::Grid::new(("loss-slots", d.index))
                .striped(true)
                .num_columns(4)
                .show(ui, |ui| {
                    for s in &d.slots {
                        ui.label(mono(format!("slot {}", s.slot)));
                        style::addr_label(ui, mono(s.range.to_string()));
                        ui.label(if s.written { "written" } else { "read-only" });
                        ui.label(match s.holder {
                            Some(h) if s.resolved => {
                                format!("binds slot {h} at {:#x}", s.offset)
                            }
                            _ => "by device address (W1)".to_owned(),
                        });
                        ui.end_row();
                    }
                });
            ui.label(format!(
                "Mapped against generation {} (M4), mappings version {}: {} mapped, {} left out.",
                d.generation,
                d.mappings_version,
                style::count(d.pieces as usize, "piece", "pieces"),
                d.left_out
            ));
            match &d.table {
                Some(t) => ui.label(format!(
                    "Table version {}: {} slots at {}, chunks of {:#x} bytes (T1–T3).",
                    d.table_version,
                    t.capacity,
                    hex(t.device_address),
                    t.chunk_bytes
                )),
                None => ui.label("No table."),
            };
            let h = &d.history;
            ui.label(format!(
                "Its program before: {} ({} refused, {} device-addressed).",
                style::count(h.runs as usize, "run", "runs"),
                h.refused,
                h.device_addressed
            ));
            if !h.escapes.is_empty() {
                let by: Vec<String> = h
                    .escapes
                    .iter()
                    .map(|(c, n)| format!("{} {n}", c.as_str()))
                    .collect();
                ui.label(format!("Escapes (T4): {}", by.join(", ")));
            }
            if !h.refusals.is_empty() {
                let by: Vec<String> = h
                    .refusals
                    .iter()
                    .map(|(r, n)| format!("{} ×{n}", r.id()))
                    .collect();
                ui.label(format!("Refused by: {}", by.join(", ")));
            }
            if let Some(e) = &h.last_escape {
                ui.label(format!("The last escape: {e}"));
            }
        });
    }
}
