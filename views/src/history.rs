//! `HistoryPanel`: a [`History`] drawn as a table, one row a write (who wrote, the bytes before
//! and after, the note), each row's dispatch a link that selects it.
//! It draws from the history alone; the app computes it (`dispatchscope_formats::history`).

use dispatchscope_analysis::history::{History, WriteKind};
use egui::RichText;
use egui_extras::{Column, TableBuilder};

use crate::style::{self, mono};

/// The History window's contents.
#[derive(Debug, Default)]
pub struct HistoryPanel {
    /// The write last clicked, highlighted.
    selected: Option<usize>,
}

/// The line above the table: "1 write to … (4 bytes) over 3 events and 1 dispatch".
pub fn summary(h: &History) -> String {
    let n = |x: u64| usize::try_from(x).unwrap_or(usize::MAX);
    format!(
        "{} to {} ({}) over {} and {}",
        style::count(h.writes.len(), "write", "writes"),
        h.range,
        style::count(n(h.range.size_bytes()), "byte", "bytes"),
        style::count(n(h.events), "event", "events"),
        style::count(n(h.dispatches), "dispatch", "dispatches"),
    )
}

impl HistoryPanel {
    /// Draws `h`; returns the dispatch (by position) a click asked to select, if one did.
    pub fn ui(&mut self, ui: &mut egui::Ui, h: &History) -> Option<u64> {
        let mut select = None;
        ui.label(summary(h));
        ui.horizontal(|ui| {
            ui.label("initial");
            ui.label(mono(h.initial.text()));
            ui.label("final");
            ui.label(mono(h.last.text()));
        });
        ui.label(
            RichText::new("bytes in memory order; ?? where the session does not say")
                .small()
                .color(style::MUTED),
        );
        if h.writes.is_empty() {
            style::nothing(ui, "Nothing in the session wrote these bytes.");
            return None;
        }
        let row_h = ui.text_style_height(&egui::TextStyle::Body) + 4.0;
        TableBuilder::new(ui)
            .id_salt("history-table")
            .striped(true)
            .resizable(true)
            .auto_shrink([false, false])
            .column(Column::auto().at_least(28.0))
            .column(Column::auto().at_least(120.0))
            .column(Column::auto().at_least(90.0))
            .column(Column::auto().at_least(90.0))
            .column(Column::remainder().at_least(200.0))
            .header(row_h, |mut header| {
                for t in ["#", "what", "before", "after", "who"] {
                    header.col(|ui| {
                        ui.strong(t);
                    });
                }
            })
            .body(|body| {
                body.rows(row_h, h.writes.len(), |mut row| {
                    let i = row.index();
                    let w = &h.writes[i];
                    row.set_selected(self.selected == Some(i));
                    row.col(|ui| {
                        ui.label(mono((i + 1).to_string()));
                    });
                    row.col(|ui| {
                        let t = RichText::new(w.kind.name());
                        ui.label(match w.kind {
                            WriteKind::NotRecorded { .. } => t.color(style::REFUSED),
                            WriteKind::WriteBack { .. } => t.color(style::BOUND),
                            WriteKind::DeviceStore { .. } | WriteKind::CapturedStore { .. } => {
                                t.color(style::DEVICE)
                            }
                            _ => t,
                        });
                    });
                    row.col(|ui| {
                        ui.label(mono(w.before.text()));
                    });
                    row.col(|ui| {
                        let t = mono(w.after.text());
                        ui.label(if w.after != w.before {
                            t.color(style::WRITTEN).strong()
                        } else {
                            t
                        });
                    });
                    row.col(|ui| {
                        let who = w.kind.who();
                        let r = match w.kind.dispatch() {
                            Some(d) => ui.link(who).on_hover_text(format!("select dispatch {d}")),
                            None => ui.label(who),
                        };
                        let r = match &w.note {
                            Some(n) => r.on_hover_text(n),
                            None => r,
                        };
                        if r.clicked() {
                            self.selected = Some(i);
                            select = w.kind.dispatch();
                        }
                        if let Some(n) = &w.note {
                            ui.label(RichText::new(n).small().color(style::MUTED));
                        }
                    });
                });
            });
        select
    }
}
