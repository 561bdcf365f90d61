//! The Accesses & escapes panel (W1–W3, P1, T4, T5): the access stream in a virtualised table
//! (lane, pc, kind, route, address, chunk, probes, result), filterable to escapes, and for the
//! selected access its card: for an escape, its class, the nearest mappings below and above its
//! address, and the probe trace.

use dispatchscope_core::DispatchReport;
use dispatchscope_core::report::LookupOutcome;
use dispatchscope_core::report::{AccessReport, Escape, Route};
use egui::{RichText, Sense};
use egui_extras::{Column, TableBuilder};

use crate::chunk_table::describe_trace;
use crate::compare::{self, DiffMarks};
use crate::style::{self, hex, mono};
use crate::{Action, Selection, Tab, access_uses_slot};

/// What the list of visible accesses was computed for: the report (address, index, length) and
/// the filters.
type CacheKey = (usize, u64, usize, bool, bool, Option<u32>);

/// A mapped piece: its guest bytes and the device address of its first byte.
pub type Mapped = (dispatchscope_core::ByteRange, u64);

/// The Accesses panel's state.
#[derive(Debug, Default)]
pub struct AccessesPanel {
    /// List only accesses that escaped.
    pub escapes_only: bool,
    /// List only accesses through the selected slot.
    pub slot_only: bool,
    /// In a comparison, list only the accesses that differ from the other side.
    pub differing_only: bool,
    /// In a comparison, what differs from the other side (accesses whose route, values or
    /// escape differ are highlighted).
    pub diff: Option<DiffMarks>,
    cache: Option<(CacheKey, Vec<usize>)>,
}

/// Where an access went, in a few words.
pub fn route_text(route: &Route) -> String {
    match route {
        Route::Bound { holder, offset } => format!("slot {holder} +{}", hex(*offset)),
        Route::Device { .. } => "device address".into(),
        Route::Lds { offset } => format!("LDS +{}", hex(*offset)),
        Route::Scratch { offset } => format!("scratch +{}", hex(*offset)),
        Route::NotRun => "not run".into(),
    }
}

fn result_text(a: &AccessReport, escape: Option<&Escape>) -> RichText {
    if let Some(e) = escape {
        return RichText::new(format!("escape: {}", e.class.as_str())).color(style::REFUSED);
    }
    if a.escaped {
        return RichText::new("escape").color(style::REFUSED);
    }
    match (&a.route, a.device_address) {
        (Route::NotRun, _) => RichText::new("not run").color(style::MUTED),
        (_, Some(d)) => mono(format!("→ {}", hex(d))),
        _ => RichText::new("ok"),
    }
}

impl AccessesPanel {
    fn visible(&mut self, report: &DispatchReport, sel: &Selection) -> Vec<usize> {
        let slot = if self.slot_only { sel.slot } else { None };
        if self.differing_only
            && let Some(d) = &self.diff
        {
            // Bounded by the pair's changes, so not cached.
            return d
                .accesses
                .iter()
                .copied()
                .filter(|&i| {
                    report
                        .accesses
                        .get(i)
                        .is_some_and(|a| !self.escapes_only || a.escaped)
                })
                .filter(|&i| slot.is_none_or(|s| access_uses_slot(report, i, s)))
                .collect();
        }
        let key = (
            report as *const DispatchReport as usize,
            report.index,
            report.accesses.len(),
            self.escapes_only,
            self.slot_only,
            slot,
        );
        if let Some((k, v)) = &self.cache
            && *k == key
        {
            return v.clone();
        }
        let v: Vec<usize> = report
            .accesses
            .iter()
            .filter(|a| !self.escapes_only || a.escaped)
            .filter(|a| slot.is_none_or(|s| access_uses_slot(report, a.index, s)))
            .map(|a| a.index)
            .collect();
        self.cache = Some((key, v.clone()));
        v
    }

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
            ui.checkbox(
                &mut self.escapes_only,
                format!("escapes only ({})", report.escapes.len()),
            );
            ui.add_enabled(
                sel.slot.is_some(),
                egui::Checkbox::new(&mut self.slot_only, "through the selected slot"),
            );
            if let Some(d) = &self.diff {
                ui.checkbox(
                    &mut self.differing_only,
                    compare::mark_text(
                        format!("differing only ({})", d.accesses.len()),
                        !d.accesses.is_empty(),
                    ),
                )
                .on_hover_text(
                    "Only the accesses whose route, values or escape differ from the other session",
                );
            }
            ui.label(
                RichText::new(format!("{} accesses", report.accesses.len())).color(style::MUTED),
            );
        });
        if let Some(s) = sel.slot {
            let n = (0..report.accesses.len())
                .filter(|&i| access_uses_slot(report, i, s))
                .count();
            ui.label(
                RichText::new(format!("slot {s} selected: {n} accesses through its bytes"))
                    .color(style::SELECTED),
            );
        }
        if let Some(i) = sel.access
            && let Some(a) = report.accesses.get(i)
        {
            egui::CollapsingHeader::new(RichText::new(format!("Access {i}")).strong())
                .id_salt("access-card")
                .default_open(true)
                .show(ui, |ui| {
                    if let Some(d) = &self.diff
                        && d.accesses.contains(&i)
                    {
                        let what = if d.escapes.contains(&i) {
                            format!("its escape is only in {}", d.side.name())
                        } else {
                            format!("it differs from {}", d.side.other().name())
                        };
                        ui.label(
                            RichText::new(format!("{} {what}", compare::GLYPH))
                                .strong()
                                .color(compare::DIFFERS),
                        );
                    }
                    card_ui(ui, report, a, &mut actions)
                });
        }
        let visible = self.visible(report, sel);
        let row_h = ui.text_style_height(&egui::TextStyle::Body) + 4.0;
        // A label that can be selected takes the click from the row; and no cell wraps: an address
        // split over two lines reads as two numbers (the columns grow to their text instead).
        ui.style_mut().interaction.selectable_labels = false;
        ui.style_mut().wrap_mode = Some(egui::TextWrapMode::Extend);
        TableBuilder::new(ui)
            .id_salt("accesses-table")
            .striped(true)
            .sense(Sense::click())
            .column(Column::auto().at_least(36.0))
            .column(Column::auto().at_least(70.0))
            .column(Column::auto().at_least(60.0))
            .column(Column::auto().at_least(90.0))
            .column(Column::auto().at_least(110.0))
            .column(Column::auto().at_least(130.0))
            .column(Column::auto().at_least(70.0))
            .column(Column::auto().at_least(40.0))
            .column(Column::remainder().at_least(90.0).clip(true))
            .min_scrolled_height(0.0)
            .auto_shrink([false, false])
            .header(row_h, |mut h| {
                for t in [
                    "#",
                    "wg/wave/lane",
                    "pc",
                    "kind",
                    "route",
                    "address",
                    "chunk",
                    "probes",
                    "result",
                ] {
                    h.col(|ui| {
                        ui.strong(t);
                    });
                }
            })
            .body(|body| {
                body.rows(row_h, visible.len(), |mut row| {
                    let Some(a) = visible
                        .get(row.index())
                        .and_then(|&i| report.accesses.get(i))
                    else {
                        return;
                    };
                    let escape = if a.escaped {
                        report.escapes.iter().find(|e| e.access == a.index)
                    } else {
                        None
                    };
                    row.set_selected(sel.access == Some(a.index));
                    let through = sel
                        .slot
                        .is_some_and(|s| access_uses_slot(report, a.index, s));
                    let differs = self
                        .diff
                        .as_ref()
                        .is_some_and(|d| d.accesses.contains(&a.index));
                    row.col(|ui| {
                        ui.label(compare::mark_mono(a.index.to_string(), differs));
                    });
                    row.col(|ui| {
                        ui.label(mono(format!("{}/{}/{}", a.workgroup, a.wave, a.lane)));
                    });
                    row.col(|ui| {
                        ui.label(mono(hex(a.pc)));
                    });
                    row.col(|ui| {
                        ui.label(format!("{:?} {:?}", a.kind, a.op).to_lowercase());
                    });
                    row.col(|ui| {
                        let t = RichText::new(route_text(&a.route));
                        ui.label(if through { t.color(style::SELECTED) } else { t });
                    });
                    row.col(|ui| match a.route {
                        Route::Device { address } => {
                            style::addr_cell(ui, address, mono(hex(address)), &mut actions);
                        }
                        _ => {
                            ui.label(mono("–"));
                        }
                    });
                    row.col(|ui| {
                        ui.label(mono(
                            a.lookups.first().map_or("–".into(), |t| hex(t.guest_chunk)),
                        ));
                    });
                    row.col(|ui| {
                        let n: usize = a.lookups.iter().map(|t| t.probes.len()).sum();
                        ui.label(mono(if a.lookups.is_empty() {
                            "–".into()
                        } else {
                            n.to_string()
                        }));
                    });
                    row.col(|ui| {
                        let t = result_text(a, escape);
                        let t = if differs {
                            t.color(compare::DIFFERS)
                        } else {
                            t
                        };
                        ui.add(egui::Label::new(t).truncate());
                    });
                    if row.response().clicked() {
                        let again = sel.access == Some(a.index);
                        actions.push(Action::SelectAccess(if again {
                            None
                        } else {
                            Some(a.index)
                        }));
                    }
                });
            });
        actions
    }
}

fn card_ui(
    ui: &mut egui::Ui,
    report: &DispatchReport,
    a: &AccessReport,
    actions: &mut Vec<Action>,
) {
    ui.label(mono(format!(
        "{:?} {:?} of {} bytes, lane {} wave {} workgroup {}, pc {}: {} ({})",
        a.kind,
        a.op,
        a.size_bytes,
        a.lane,
        a.wave,
        a.workgroup,
        hex(a.pc),
        route_text(&a.route),
        a.rule.id()
    )));
    if !a.values.is_empty() {
        let vals: Vec<String> = a.values.iter().map(|v| format!("{v:#010x}")).collect();
        ui.label(mono(format!("values: {}", vals.join(" "))));
    }
    if !a.lookups.is_empty() && ui.link("Show the lookups on the chunk table").clicked() {
        actions.push(Action::ShowTab(Tab::ChunkTable));
    }
    let Some(e) = report.escapes.iter().find(|e| e.access == a.index) else {
        for t in &a.lookups {
            for line in describe_trace(t) {
                ui.label(mono(line));
            }
        }
        return;
    };
    egui::Frame::group(ui.style())
        .stroke(egui::Stroke::new(1.0, style::REFUSED))
        .show(ui, |ui| {
            ui.label(
                RichText::new(format!("Escape: {} · {} · {}", e.class.as_str(), e.rule.id(), e.decision))
                    .strong()
                    .color(style::REFUSED),
            );
            ui.label(&e.message);
            ui.horizontal_wrapped(|ui| {
                ui.label(RichText::new("Would reach guest memory if:").strong());
                ui.label(&e.would_run_if);
            });
            if let Some(r) = e.reason {
                ui.label(format!("left out: {}", r.phrase()));
            }
            if let Some(w) = e.since {
                ui.label(format!("dropped at event {}, before dispatch {}", w.event, w.before_dispatch));
            }
            style::addr_cell(
                ui,
                e.address,
                mono(format!("first escaped address {}", hex(e.address))),
                actions,
            );
            let (below, above) = nearest_mappings(report, e.address);
            ui.label(mono(match below {
                Some((r, d)) => format!("nearest mapping below: {r} (device {})", hex(d)),
                None => "nearest mapping below: none".into(),
            }));
            ui.label(mono(match above {
                Some((r, d)) => format!("nearest mapping above: {r} (device {})", hex(d)),
                None => "nearest mapping above: none".into(),
            }));
            ui.label(RichText::new("Probe trace").strong());
            for line in describe_trace(&e.lookup) {
                ui.label(mono(line));
            }
            if matches!(e.lookup.outcome, LookupOutcome::MissBound) {
                ui.label(RichText::new("The lookup hit the probe bound: a table defect if the chunk is mapped (T2).").color(style::REFUSED));
            }
        });
}

/// The mapped pieces nearest below (ending at or before) and above (starting after) `address`.
pub fn nearest_mappings(report: &DispatchReport, address: u64) -> (Option<Mapped>, Option<Mapped>) {
    let Some(m) = &report.mappings else {
        return (None, None);
    };
    let below = m
        .pieces
        .iter()
        .filter(|p| p.guest.end <= address)
        .max_by_key(|p| p.guest.end)
        .map(|p| (p.guest, p.device_base));
    let above = m
        .pieces
        .iter()
        .filter(|p| p.guest.start > address)
        .min_by_key(|p| p.guest.start)
        .map(|p| (p.guest, p.device_base));
    (below, above)
}
