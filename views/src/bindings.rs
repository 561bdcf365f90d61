//! The Bindings panel (O1–O11): the slot table, the sets, and an address line painted with egui's
//! painter: each slot a bar at its range, each holder's widened extent, members marked at their
//! offsets, and the written overlap of each join highlighted. Hover shows exact values; a click
//! selects the slot in every panel.

use dispatchscope_core::DispatchReport;
use dispatchscope_core::input::BaseSource;
use dispatchscope_core::report::{Role, SlotBinding};
use egui::{Align2, Color32, FontId, Pos2, Rect, RichText, Sense, Stroke, StrokeKind, Vec2};

use crate::compare::{self, DiffMarks};
use crate::style::{self, hex, mono};
use crate::{Action, Selection};

/// The Bindings panel's state.
#[derive(Debug, Default)]
pub struct BindingsPanel {
    /// Draw the address line over the selected slot's set only.
    pub zoom_to_set: bool,
    /// Draw the address line to a linear scale instead of the log-compressed one.
    pub linear: bool,
    /// In a comparison, what differs from the other side (highlighted in the slot table and the
    /// sets).
    pub diff: Option<DiffMarks>,
}

/// A role as the table writes it.
pub fn role_text(role: Role) -> String {
    match role {
        Role::Alone => "alone".into(),
        Role::Holder => "holder".into(),
        Role::Member => "member".into(),
        Role::Copy { of } => format!("copy of slot {of}"),
        Role::Unbound => "unbound".into(),
    }
}

/// A base source as the table writes it.
pub fn base_source_text(source: BaseSource) -> String {
    match source {
        BaseSource::Descriptor => "descriptor".into(),
        BaseSource::PushBlock { word } => format!("push words {word},{} (D951)", word + 1),
    }
}

impl BindingsPanel {
    /// Draws the panel for `report`.
    pub fn ui(
        &mut self,
        ui: &mut egui::Ui,
        report: &DispatchReport,
        sel: &Selection,
    ) -> Vec<Action> {
        puffin::profile_function!();
        let mut actions = Vec::new();
        if report.slots.is_empty() {
            style::nothing(ui, "This dispatch binds no slots.");
            return actions;
        }
        // The address line fits the panel, even when the slot table is wider and scrolls.
        let visible_width = ui.available_width();
        egui::ScrollArea::both()
            .id_salt("bindings-scroll")
            .auto_shrink([false, false])
            .show(ui, |ui| {
                style::section(ui, "Slots");
                self.table_ui(ui, report, sel, &mut actions);
                ui.add_space(6.0);
                ui.horizontal(|ui| {
                    style::section(ui, "Address line");
                    ui.checkbox(&mut self.zoom_to_set, "zoom to the selected slot's set");
                    ui.checkbox(&mut self.linear, "linear scale")
                        .on_hover_text("Off: each stretch between two boundaries gets a width that grows with the log of its size, so small slots stay visible");
                });
                self.address_line_ui(ui, report, sel, visible_width, &mut actions);
                style::section(ui, "Sets (O2)");
                sets_ui(ui, report, sel, self.diff.as_ref(), &mut actions);
            });
        actions
    }

    fn table_ui(
        &self,
        ui: &mut egui::Ui,
        report: &DispatchReport,
        sel: &Selection,
        actions: &mut Vec<Action>,
    ) {
        // A grid sizes its columns by what it held last frame: a dispatch with wider values than
        // the last (a live session follows a new one each frame) would run one column over the
        // next. The grid is keyed by the widest text of each column, so a change of widths starts
        // a new grid, which egui lays out twice (a sizing pass) before it is shown.
        let widths: Vec<usize> = report
            .slots
            .iter()
            .map(|b| {
                [
                    hex(b.range.start).len(),
                    hex(b.range.size_bytes()).len(),
                    base_source_text(b.base_source).len(),
                    role_text(b.role).len(),
                    hex(b.offset).len(),
                    b.binding.to_string().len(),
                    b.slot.to_string().len() + b.holder.map_or(1, |h| h.to_string().len()),
                ]
            })
            .fold(vec![0; 7], |m, w| {
                m.iter().zip(w).map(|(a, b)| (*a).max(b)).collect()
            });
        egui::Grid::new(("slots-grid", widths))
            .striped(true)
            .num_columns(11)
            .show(ui, |ui| {
                for h in [
                    "slot",
                    "base",
                    "size",
                    "written",
                    "base source",
                    "set",
                    "role",
                    "holder",
                    "offset",
                    "binding (holder bytes)",
                    "O7 alignment",
                ] {
                    ui.strong(h);
                }
                ui.end_row();
                for b in &report.slots {
                    let selected = sel.slot == Some(b.slot);
                    let differs = self
                        .diff
                        .as_ref()
                        .is_some_and(|d| d.slots.contains(&b.slot));
                    if ui
                        .selectable_label(
                            selected,
                            compare::mark_text(format!("slot {}", b.slot), differs),
                        )
                        .on_hover_text("Select this slot in every panel")
                        .clicked()
                    {
                        actions.push(Action::SelectSlot(if selected {
                            None
                        } else {
                            Some(b.slot)
                        }));
                    }
                    ui.label(mono(hex(b.range.start)));
                    ui.label(mono(hex(b.range.size_bytes())));
                    ui.label(if b.written { "written" } else { "read" });
                    ui.label(base_source_text(b.base_source));
                    ui.label(b.set.map_or("–".into(), |s| s.to_string()));
                    ui.label(role_text(b.role));
                    let paint = |t: RichText| {
                        if differs {
                            t.color(compare::DIFFERS)
                        } else {
                            t
                        }
                    };
                    ui.label(paint(RichText::new(
                        b.holder.map_or("–".into(), |h| format!("slot {h}")),
                    )));
                    ui.label(paint(mono(hex(b.offset))));
                    style::addr_label(ui, paint(mono(b.binding.to_string())));
                    if b.role == Role::Unbound {
                        ui.label(RichText::new("not bound").color(style::MUTED));
                    } else if b.aligned {
                        ui.label(RichText::new("aligned").color(style::BOUND));
                    } else {
                        ui.label(
                            RichText::new(format!(
                                "{} is not a multiple of {}",
                                hex(b.offset),
                                hex(report.device.min_storage_buffer_offset_alignment)
                            ))
                            .color(style::REFUSED),
                        );
                    }
                    ui.end_row();
                }
            });
    }

    fn address_line_ui(
        &self,
        ui: &mut egui::Ui,
        report: &DispatchReport,
        sel: &Selection,
        visible_width: f32,
        actions: &mut Vec<Action>,
    ) {
        puffin::profile_function!();
        let zoom_set = if self.zoom_to_set {
            sel.slot
                .and_then(|s| report.slots.iter().find(|b| b.slot == s))
                .and_then(|b| b.set)
                .and_then(|i| report.sets.get(i))
        } else {
            None
        };
        let lanes: Vec<&SlotBinding> = report
            .slots
            .iter()
            .filter(|b| {
                zoom_set.is_none_or(|set| b.set.is_some_and(|i| report.sets.get(i) == Some(set)))
            })
            .collect();
        let (lo, hi) = match zoom_set {
            Some(set) => (set.base, set.end),
            None => {
                let lo = lanes
                    .iter()
                    .map(|b| b.range.start)
                    .chain(report.sets.iter().map(|s| s.base))
                    .min();
                let hi = lanes
                    .iter()
                    .map(|b| b.range.end)
                    .chain(report.sets.iter().map(|s| s.end))
                    .max();
                match (lo, hi) {
                    (Some(lo), Some(hi)) => (lo, hi),
                    _ => return,
                }
            }
        };
        let hi = hi.max(lo);
        // The scale: piecewise linear between every boundary (slot, set and join ends). Unless
        // `linear` is set, each stretch gets a width growing with the log of its size, so that a
        // 0x20-byte slot at the end of a 0xe40f-byte one stays visible and the order stays exact.
        let mut bounds: Vec<u64> = lanes
            .iter()
            .flat_map(|b| [b.range.start, b.range.end])
            .chain(report.sets.iter().flat_map(|s| [s.base, s.end]))
            .chain(report.sets.iter().flat_map(|s| {
                s.joins
                    .iter()
                    .flat_map(|j| [j.overlap.start, j.overlap.end])
            }))
            .chain([lo, hi])
            .filter(|a| (lo..=hi).contains(a))
            .collect();
        bounds.sort_unstable();
        bounds.dedup();
        let weights: Vec<f64> = bounds
            .windows(2)
            .map(|w| {
                let size = (w[1] - w[0]) as f64;
                if self.linear {
                    size
                } else {
                    (size + 1.0).log2() + 1.0
                }
            })
            .collect();
        let total: f64 = weights.iter().sum::<f64>().max(1e-9);
        let mut cum = Vec::with_capacity(bounds.len());
        let mut acc = 0.0;
        cum.push(0.0);
        for w in &weights {
            acc += w;
            cum.push(acc / total);
        }
        let lane_h = 20.0;
        let label_w = 64.0;
        let width = ui.available_width().min(visible_width - 12.0).max(200.0);
        let height = lane_h * lanes.len() as f32 + 34.0;
        let (rect, response) = ui.allocate_exact_size(Vec2::new(width, height), Sense::click());
        let painter = ui.painter_at(rect);
        let left = rect.left() + label_w;
        let right = rect.right() - 8.0;
        let x_of = |addr: u64| -> f32 {
            let a = addr.clamp(lo, hi);
            let i = bounds
                .partition_point(|&b| b <= a)
                .saturating_sub(1)
                .min(bounds.len().saturating_sub(2));
            let (b0, b1) = (
                bounds.get(i).copied().unwrap_or(lo),
                bounds.get(i + 1).copied().unwrap_or(hi),
            );
            let (c0, c1) = (
                cum.get(i).copied().unwrap_or(0.0),
                cum.get(i + 1).copied().unwrap_or(1.0),
            );
            let f = if b1 > b0 {
                (a - b0) as f64 / (b1 - b0) as f64
            } else {
                0.0
            };
            let t = c0 + (c1 - c0) * f;
            left + (t as f32) * (right - left)
        };
        let bar = |start: u64, end: u64, y0: f32, y1: f32| -> Rect {
            let x0 = x_of(start);
            let x1 = x_of(end).max(x0 + 3.0);
            Rect::from_min_max(Pos2::new(x0, y0), Pos2::new(x1, y1))
        };
        let lane_of = |slot: u32| lanes.iter().position(|b| b.slot == slot);
        let lane_y = |i: usize| rect.top() + lane_h * i as f32;
        let font = FontId::monospace(11.0);
        let text_color = ui.visuals().text_color();

        for (i, b) in lanes.iter().enumerate() {
            let y = lane_y(i);
            let lane_rect = Rect::from_min_max(
                Pos2::new(rect.left(), y),
                Pos2::new(rect.right(), y + lane_h),
            );
            if sel.slot == Some(b.slot) {
                painter.rect_filled(lane_rect, 2.0, style::SELECTED.gamma_multiply(0.25));
            }
            painter.text(
                Pos2::new(rect.left() + 2.0, y + lane_h / 2.0),
                Align2::LEFT_CENTER,
                format!("slot {}", b.slot),
                font.clone(),
                text_color,
            );
            let r = bar(b.range.start, b.range.end, y + 4.0, y + lane_h - 4.0);
            if b.role == Role::Unbound {
                painter.rect_stroke(r, 1.0, Stroke::new(1.0, style::MUTED), StrokeKind::Inside);
            } else {
                let fill = if b.written {
                    style::WRITTEN
                } else {
                    style::OCCUPIED
                };
                painter.rect_filled(r, 1.0, fill);
            }
        }
        // O5: each holder's widened extent, around its lane; O6: members at their offsets.
        for set in &report.sets {
            let Some(hl) = lane_of(set.holder) else {
                continue;
            };
            let y = lane_y(hl);
            let r = bar(set.base, set.end, y + 1.0, y + lane_h - 1.0);
            painter.rect_stroke(r, 2.0, Stroke::new(1.5, style::BOUND), StrokeKind::Outside);
            for m in &set.members {
                let Some(ml) = lane_of(m.slot) else { continue };
                let x = x_of(set.base.saturating_add(m.offset));
                let (ya, yb) = (lane_y(hl.min(ml)) + 2.0, lane_y(hl.max(ml)) + lane_h - 2.0);
                painter.line_segment(
                    [Pos2::new(x, ya), Pos2::new(x, yb)],
                    Stroke::new(1.0, style::BOUND),
                );
                painter.circle_filled(Pos2::new(x, y + lane_h / 2.0), 3.0, style::BOUND);
            }
            // O1: the written overlap that made each join.
            for j in &set.joins {
                for s in [j.a, j.b] {
                    let Some(l) = lane_of(s) else { continue };
                    let y = lane_y(l);
                    let r = bar(j.overlap.start, j.overlap.end, y + 2.0, y + lane_h - 2.0);
                    painter.rect_filled(r, 0.0, style::REFUSED.gamma_multiply(0.6));
                }
            }
        }
        let axis_y = rect.top() + lane_h * lanes.len() as f32 + 4.0;
        painter.line_segment(
            [Pos2::new(left, axis_y), Pos2::new(right, axis_y)],
            Stroke::new(1.0, style::MUTED),
        );
        let mut last_label = [f32::NEG_INFINITY; 2];
        for &b in &bounds {
            let x = x_of(b);
            painter.line_segment(
                [Pos2::new(x, axis_y - 3.0), Pos2::new(x, axis_y + 3.0)],
                Stroke::new(1.0, style::MUTED),
            );
            let text = hex(b);
            let w = text.len() as f32 * 6.6;
            let (anchor, x0) = if x + w > right {
                (Align2::RIGHT_TOP, x - w)
            } else {
                (Align2::LEFT_TOP, x)
            };
            // Two rows of labels; a label that would overlap both is left out (hover shows it).
            if let Some(row) = (0..2).find(|&r| x0 > last_label[r] + 4.0) {
                painter.text(
                    Pos2::new(x, axis_y + 3.0 + row as f32 * 12.0),
                    anchor,
                    text,
                    font.clone(),
                    style::MUTED,
                );
                last_label[row] = x0 + w;
            }
        }
        let hovered_lane = response
            .hover_pos()
            .map(|p| ((p.y - rect.top()) / lane_h).floor())
            .filter(|l| *l >= 0.0)
            .and_then(|l| lanes.get(l as usize));
        if let Some(b) = hovered_lane {
            let text = slot_tooltip(report, b);
            response.clone().on_hover_text_at_pointer(text);
        }
        if response.clicked() {
            actions.push(Action::SelectSlot(hovered_lane.map(|b| b.slot)));
        }
    }
}

fn slot_tooltip(report: &DispatchReport, b: &SlotBinding) -> String {
    let mut t = format!(
        "slot {}\nrange {} ({} bytes)\n{}\nbase from {}\nrole {}",
        b.slot,
        b.range,
        hex(b.range.size_bytes()),
        if b.written { "written" } else { "read only" },
        base_source_text(b.base_source),
        role_text(b.role),
    );
    if let Some(h) = b.holder {
        t.push_str(&format!(
            "\nholder slot {h}, offset {}\nbinding {}",
            hex(b.offset),
            b.binding
        ));
    }
    if let Some(set) = b.set.and_then(|i| report.sets.get(i)) {
        t.push_str(&format!("\nset widened to {}", set.range()));
        for j in set.joins.iter().filter(|j| j.a == b.slot || j.b == b.slot) {
            t.push_str(&format!(
                "\njoined slots {} and {} over {}",
                j.a, j.b, j.overlap
            ));
        }
    }
    if !b.aligned && b.role != Role::Unbound {
        t.push_str("\nO7: offset not aligned");
    }
    t
}

fn sets_ui(
    ui: &mut egui::Ui,
    report: &DispatchReport,
    sel: &Selection,
    diff: Option<&DiffMarks>,
    actions: &mut Vec<Action>,
) {
    if report.sets.is_empty() {
        style::nothing(
            ui,
            "No two slots share a written byte: every slot is bound alone.",
        );
        return;
    }
    for (i, set) in report.sets.iter().enumerate() {
        let in_set = sel
            .slot
            .is_some_and(|s| s == set.holder || set.members.iter().any(|m| m.slot == s));
        let differs = diff.is_some_and(|d| d.sets.contains(&set.holder));
        let frame = egui::Frame::group(ui.style()).stroke(if in_set {
            Stroke::new(1.5, style::SELECTED)
        } else if differs {
            Stroke::new(1.5, compare::DIFFERS)
        } else {
            ui.visuals().widgets.noninteractive.bg_stroke
        });
        frame.show(ui, |ui| {
            ui.horizontal_wrapped(|ui| {
                ui.label(compare::mark_text(format!("set {i}"), differs).strong());
                ui.label("held by");
                if ui.link(format!("slot {}", set.holder)).clicked() {
                    actions.push(Action::SelectSlot(Some(set.holder)));
                }
                ui.label(mono(format!("widened to {} (O5)", set.range())));
                ui.label(if set.written {
                    "written back once (O8)"
                } else {
                    "read only"
                });
            });
            for m in &set.members {
                ui.horizontal(|ui| {
                    ui.label("  member");
                    if ui.link(format!("slot {}", m.slot)).clicked() {
                        actions.push(Action::SelectSlot(Some(m.slot)));
                    }
                    ui.label(mono(format!(
                        "at offset {}, binding {} (O6)",
                        hex(m.offset),
                        m.binding
                    )));
                });
            }
            for j in &set.joins {
                ui.label(
                    RichText::new(format!(
                        "  join: slots {} and {} share {} (O1)",
                        j.a, j.b, j.overlap
                    ))
                    .color(Color32::from_rgb(0xe5, 0x73, 0x73)),
                );
            }
        });
    }
}
