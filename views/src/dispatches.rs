//! The Dispatches panel: every dispatch of the session in a virtualised table, with filters, a
//! search box and bookmarks. It draws [`DispatchRow`] summaries, so that a session of a hundred
//! thousand dispatches costs only the rows on screen; it never holds a report.

use dispatchscope_core::report::{Counts, Mode};
use dispatchscope_core::{DispatchReport, Rule};
use egui::{Id, RichText, Sense};
use egui_extras::{Column, TableBuilder};
use serde::{Deserialize, Serialize};

use crate::Action;
use crate::style::{self, hex, mono};

/// What the table shows of one dispatch: computed once when a session loads.
#[derive(Clone, Debug, PartialEq)]
pub struct DispatchRow {
    /// The report's index in the session.
    pub index: u64,
    /// The program's guest address.
    pub program: u64,
    /// The label the input gave.
    pub label: String,
    /// How it ran.
    pub mode: Mode,
    /// Its counts.
    pub counts: Counts,
    /// The rules its refusals, escapes and hazards cite.
    pub rules: Vec<Rule>,
    /// Lower-case text the search box matches: index, program, label, mode, rule ids.
    pub search_text: String,
}

impl DispatchRow {
    /// The row of `report`.
    pub fn from_report(report: &DispatchReport) -> Self {
        let rules = report.rules_cited();
        let mut search_text = format!(
            "{} {:#x} {} {}",
            report.index,
            report.program,
            report.label,
            report.mode.as_str()
        );
        for r in &rules {
            search_text.push(' ');
            search_text.push_str(r.id());
        }
        Self {
            index: report.index,
            program: report.program,
            label: report.label.clone(),
            mode: report.mode,
            counts: report.counts,
            rules,
            search_text: search_text.to_lowercase(),
        }
    }
}

/// Which dispatches the table lists.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Filter {
    /// Only this mode.
    pub mode: Option<Mode>,
    /// Only dispatches citing this rule.
    pub rule: Option<Rule>,
    /// Only programs whose hex address contains this text.
    pub program: String,
    /// Only dispatches with escapes.
    pub has_escapes: bool,
    /// Only bookmarked dispatches.
    pub bookmarked: bool,
    /// Only dispatches whose index, program, label, mode or rule ids contain this text.
    pub search: String,
}

impl Filter {
    /// Whether the row at `pos` passes.
    pub fn passes(&self, pos: usize, row: &DispatchRow, bookmarks: &[usize]) -> bool {
        if self.mode.is_some_and(|m| m != row.mode) {
            return false;
        }
        if self.rule.is_some_and(|r| !row.rules.contains(&r)) {
            return false;
        }
        if self.has_escapes && row.counts.escapes == 0 {
            return false;
        }
        if self.bookmarked && !bookmarks.contains(&pos) {
            return false;
        }
        let program = self.program.trim().trim_start_matches("0x").to_lowercase();
        if !program.is_empty() && !format!("{:x}", row.program).contains(&program) {
            return false;
        }
        let search = self.search.trim().to_lowercase();
        search.is_empty()
            || search
                .split_whitespace()
                .all(|w| row.search_text.contains(w))
    }

    /// Whether any condition is set.
    pub fn is_active(&self) -> bool {
        *self != Filter::default()
    }
}

#[derive(Clone, PartialEq)]
struct CacheKey {
    filter: Filter,
    rows_ptr: usize,
    rows_len: usize,
    bookmarks: Vec<usize>,
}

/// The Dispatches panel's state: its filter, the cached list of rows that pass, and whether the
/// search box should take the keyboard.
#[derive(Default)]
pub struct DispatchesPanel {
    /// The filter (persisted by the app).
    pub filter: Filter,
    cache: Option<(CacheKey, Vec<usize>)>,
    focus_search: bool,
    last_current: Option<usize>,
}

/// The id of the search box, for focusing it (Ctrl+F).
pub fn search_id() -> Id {
    Id::unique("dispatches-search")
}

impl DispatchesPanel {
    /// A panel with `filter`.
    pub fn new(filter: Filter) -> Self {
        Self {
            filter,
            ..Self::default()
        }
    }

    /// Gives the search box the keyboard on the next frame (Ctrl+F).
    pub fn focus_search(&mut self) {
        self.focus_search = true;
    }

    /// The positions of the rows that pass the filter, computed again only when the filter, the
    /// rows or the bookmarks change.
    pub fn visible(&mut self, rows: &[DispatchRow], bookmarks: &[usize]) -> &[usize] {
        let key = CacheKey {
            filter: self.filter.clone(),
            rows_ptr: rows.as_ptr() as usize,
            rows_len: rows.len(),
            bookmarks: if self.filter.bookmarked {
                bookmarks.to_vec()
            } else {
                Vec::new()
            },
        };
        let stale = self.cache.as_ref().is_none_or(|(k, _)| *k != key);
        if stale {
            puffin::profile_scope!("filter dispatches");
            let list = rows
                .iter()
                .enumerate()
                .filter(|(pos, row)| key.filter.passes(*pos, row, bookmarks))
                .map(|(pos, _)| pos)
                .collect();
            self.cache = Some((key, list));
        }
        self.cache.as_ref().map_or(&[], |(_, v)| v.as_slice())
    }

    /// Draws the filters and the table. `current` is the position of the dispatch shown.
    pub fn ui(
        &mut self,
        ui: &mut egui::Ui,
        rows: &[DispatchRow],
        bookmarks: &[usize],
        current: usize,
    ) -> Vec<Action> {
        puffin::profile_function!();
        let mut actions = Vec::new();
        self.filters_ui(ui);
        let n_total = rows.len();
        let visible: Vec<usize> = self.visible(rows, bookmarks).to_vec();
        ui.horizontal(|ui| {
            ui.label(
                RichText::new(format!("{} of {} dispatches", visible.len(), n_total))
                    .small()
                    .color(style::MUTED),
            );
            if self.filter.is_active() && ui.small_button("Clear filters").clicked() {
                self.filter = Filter::default();
            }
        });
        let scroll_to = if self.last_current != Some(current) {
            self.last_current = Some(current);
            visible.binary_search(&current).ok()
        } else {
            None
        };
        let row_height = ui.text_style_height(&egui::TextStyle::Body) + 4.0;
        // A label that can be selected takes the click from the row.
        ui.style_mut().interaction.selectable_labels = false;
        let mut table = TableBuilder::new(ui)
            .id_salt("dispatches-table")
            .striped(true)
            .sense(Sense::click())
            .cell_layout(egui::Layout::left_to_right(egui::Align::Center))
            .column(Column::exact(22.0))
            .column(Column::auto().at_least(40.0))
            .column(Column::auto().at_least(110.0))
            .column(Column::auto().at_least(60.0))
            .columns(Column::auto().at_least(34.0), 4)
            .column(Column::remainder().at_least(60.0).clip(true))
            .min_scrolled_height(0.0)
            .auto_shrink([false, false]);
        if let Some(row) = scroll_to {
            table = table.scroll_to_row(row, Some(egui::Align::Center));
        }
        table
            .header(row_height, |mut h| {
                for title in [
                    "", "#", "program", "mode", "sets", "refus.", "esc.", "marks", "label",
                ] {
                    h.col(|ui| {
                        ui.strong(title);
                    });
                }
            })
            .body(|body| {
                body.rows(row_height, visible.len(), |mut row| {
                    let Some(&pos) = visible.get(row.index()) else {
                        return;
                    };
                    let Some(d) = rows.get(pos) else { return };
                    row.set_selected(pos == current);
                    let marked = bookmarks.contains(&pos);
                    row.col(|ui| {
                        let star = if marked { "★" } else { "☆" };
                        if ui
                            .add(egui::Button::new(star).frame(false))
                            .on_hover_text(format!("Bookmark dispatch {} (Ctrl+B)", d.index))
                            .clicked()
                        {
                            actions.push(Action::ToggleBookmark(pos));
                        }
                    });
                    row.col(|ui| {
                        ui.label(mono(d.index.to_string()));
                    });
                    row.col(|ui| {
                        ui.label(mono(hex(d.program)));
                    });
                    row.col(|ui| {
                        ui.label(style::mode_text(d.mode));
                    });
                    for (n, warn) in [
                        (d.counts.sets, false),
                        (d.counts.refusals, true),
                        (d.counts.escapes, true),
                        (d.counts.marks, false),
                    ] {
                        row.col(|ui| {
                            let t = mono(n.to_string());
                            ui.label(if warn && n > 0 {
                                t.color(style::REFUSED)
                            } else {
                                t
                            });
                        });
                    }
                    row.col(|ui| {
                        ui.label(&d.label);
                    });
                    if row.response().clicked() {
                        actions.push(Action::SelectDispatch(pos));
                    }
                });
            });
        actions
    }

    fn filters_ui(&mut self, ui: &mut egui::Ui) {
        ui.horizontal(|ui| {
            let label = ui.label("Find");
            let edit = ui
                .add(
                    egui::TextEdit::singleline(&mut self.filter.search)
                        .id(search_id())
                        .hint_text("index, program, label, rule (Ctrl+F)")
                        .desired_width(f32::INFINITY),
                )
                .labelled_by(label.id);
            if std::mem::take(&mut self.focus_search) {
                edit.request_focus();
            }
        });
        ui.horizontal_wrapped(|ui| {
            let mode_text = self.filter.mode.map_or("any mode", Mode::as_str);
            egui::ComboBox::from_id_salt("filter-mode")
                .selected_text(mode_text)
                .show_ui(ui, |ui| {
                    ui.selectable_value(&mut self.filter.mode, None, "any mode");
                    for m in [Mode::Bound, Mode::DeviceAddressed, Mode::Refused] {
                        ui.selectable_value(&mut self.filter.mode, Some(m), m.as_str());
                    }
                })
                .response
                .on_hover_text("Filter by mode");
            let rule_text = self
                .filter
                .rule
                .map_or("any rule".to_owned(), |r| format!("rule {}", r.id()));
            egui::ComboBox::from_id_salt("filter-rule")
                .selected_text(rule_text)
                .show_ui(ui, |ui| {
                    ui.selectable_value(&mut self.filter.rule, None, "any rule");
                    for r in Rule::ALL {
                        ui.selectable_value(
                            &mut self.filter.rule,
                            Some(*r),
                            format!("{} {}", r.id(), r.title()),
                        );
                    }
                })
                .response
                .on_hover_text("Only dispatches whose refusals, escapes or hazards cite this rule");
            let label = ui.label("program");
            ui.add(
                egui::TextEdit::singleline(&mut self.filter.program)
                    .hint_text("0x…")
                    .desired_width(100.0),
            )
            .labelled_by(label.id);
            ui.checkbox(&mut self.filter.has_escapes, "has escapes");
            ui.checkbox(&mut self.filter.bookmarked, "bookmarked");
        });
    }
}
