//! The Dispatches panel: every dispatch of the session in a virtualised table, with filters, a
//! search box and bookmarks. It draws from [`Rows`] (every dispatch's summary in columns, about
//! 8 bytes a dispatch), so that a session of ten million dispatches costs only the rows on screen
//! (`TableBuilder`'s `body.rows` lays out those alone); it never holds a report.

pub mod find;
pub mod rows;

use std::sync::Arc;

use dispatchscope_core::report::{Counts, Mode};
use dispatchscope_core::{DispatchReport, Rule};
use egui::{Id, RichText, Sense};
use egui_extras::{Column, TableBuilder};
use serde::{Deserialize, Serialize};

use crate::Action;
use crate::compare::{RowMark, Side};
use crate::style::{self, hex, mono};
use find::Finder;
pub use rows::Rows;

/// The counts a row shows: sets, refusals, escapes and marks (each saturates at `u32::MAX`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RowCounts {
    /// Sets of two or more slots.
    pub sets: u32,
    /// Refusals.
    pub refusals: u32,
    /// Escapes.
    pub escapes: u32,
    /// Marked chunks.
    pub marks: u32,
}

impl RowCounts {
    /// The row's counts of a report's.
    pub fn of(c: &Counts) -> Self {
        let n = |x: usize| u32::try_from(x).unwrap_or(u32::MAX);
        Self {
            sets: n(c.sets),
            refusals: n(c.refusals),
            escapes: n(c.escapes),
            marks: n(c.marks),
        }
    }

    /// The row's counts of `report`: its own, and for an instrumented pass the escapes the device
    /// counted too (its access list holds only the captured lanes), so that the list, the
    /// timeline and "next escape" see them.
    pub fn of_report(report: &DispatchReport) -> Self {
        let mut c = Self::of(&report.counts);
        if let Some(ir) = &report.instrumented {
            let device = u32::try_from(ir.counters.escapes).unwrap_or(u32::MAX);
            c.escapes = c.escapes.saturating_add(device);
        }
        c
    }
}

/// The rules a dispatch cites, as one bit per [`Rule::ALL`] entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RuleSet(u64);

impl RuleSet {
    fn bit(rule: Rule) -> u64 {
        Rule::ALL
            .iter()
            .position(|r| *r == rule)
            .map_or(0, |i| 1u64 << (i % 64))
    }

    /// The set of `rules`.
    pub fn of(rules: &[Rule]) -> Self {
        Self(rules.iter().fold(0, |m, r| m | Self::bit(*r)))
    }

    /// Whether `rule` is in the set.
    pub fn contains(self, rule: Rule) -> bool {
        self.0 & Self::bit(rule) != 0
    }

    /// The rules in the set, in [`Rule::ALL`]'s order.
    pub fn iter(self) -> impl Iterator<Item = Rule> {
        Rule::ALL.iter().copied().filter(move |r| self.contains(*r))
    }
}

/// Where a dispatch stands. A dispatch of [`Rows`] is completed (it has a report); the others are
/// the session's dispatches without one, listed after the completed ones ([`PendingRow`]): an
/// emulator prepares many before it completes them in order, abandons some, and a lost device
/// takes every one in flight with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DispatchState {
    /// Prepared; its report comes at its complete.
    InFlight,
    /// Completed: its report is the session's.
    Completed,
    /// Abandoned: it will not complete.
    Abandoned,
    /// In flight when the device was lost: the loss report names it.
    Lost,
}

impl DispatchState {
    /// The state in words, as the list's state column writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            DispatchState::InFlight => "in flight",
            DispatchState::Completed => "completed",
            DispatchState::Abandoned => "abandoned",
            DispatchState::Lost => "lost",
        }
    }

    /// The state as coloured text.
    pub fn text(self) -> RichText {
        RichText::new(self.as_str()).color(match self {
            DispatchState::InFlight => style::SELECTED,
            DispatchState::Completed => style::MUTED,
            DispatchState::Abandoned => style::MUTED,
            DispatchState::Lost => style::REFUSED,
        })
    }

    /// What a row of this state says on hover.
    fn tip(self, index: u64) -> String {
        match self {
            DispatchState::InFlight => format!(
                "Dispatch {index} is in flight: prepared, its report comes when the emulator completes it"
            ),
            DispatchState::Completed => {
                format!("Dispatch {index} completed: select it for its report")
            }
            DispatchState::Abandoned => format!(
                "Dispatch {index} was abandoned: the emulator will not complete it, so it has no report"
            ),
            DispatchState::Lost => format!(
                "Dispatch {index} was in flight when the device was lost: click for the loss report (Ctrl+D)"
            ),
        }
    }
}

/// A dispatch without a report (in flight, abandoned or lost), as the list shows it after the
/// completed ones: what its prepare said of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingRow {
    /// Its index.
    pub index: u64,
    /// Its program's guest address.
    pub program: u64,
    /// Its label.
    pub label: Arc<str>,
    /// How it was planned.
    pub mode: Mode,
    /// Where it stands (never [`DispatchState::Completed`]).
    pub state: DispatchState,
}

impl PendingRow {
    /// Whether the list shows it under `filter`: what a row without a report can answer (mode,
    /// program, search words in its index, program, label, mode and state); a condition on what
    /// only a report says (a rule, escapes, a bookmark) hides it.
    pub fn passes(&self, filter: &Filter) -> bool {
        if filter.rule.is_some() || filter.has_escapes || filter.bookmarked {
            return false;
        }
        if filter.mode.is_some_and(|m| m != self.mode) {
            return false;
        }
        let program = filter
            .program
            .trim()
            .trim_start_matches("0x")
            .to_lowercase();
        if !program.is_empty() && !format!("{:x}", self.program).contains(&program) {
            return false;
        }
        let text = format!(
            "{} {:#x} {} {} {}",
            self.index,
            self.program,
            self.label,
            self.mode.as_str(),
            self.state.as_str()
        )
        .to_lowercase();
        filter
            .search
            .to_lowercase()
            .split_whitespace()
            .all(|w| text.contains(w))
    }
}

/// What the table, the timeline and the search show of one dispatch: computed once when a
/// session loads, small (no report), so that a session of a million dispatches keeps a million.
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
    pub counts: RowCounts,
    /// The rules its refusals, escapes and hazards cite.
    pub rules: RuleSet,
    /// The frame it belongs to: how many `retire` events (the emulator's end of a frame) came
    /// before it in the session.
    pub frame: u64,
}

impl DispatchRow {
    /// The row of `report`, the first of a session (frame 0 unless a retire came before it).
    pub fn from_report(report: &DispatchReport) -> Self {
        Self::after(report, None)
    }

    /// The row of `report`, which follows `prev` in the session: its frame counts on from
    /// `prev`'s by the retire events before it.
    pub fn after(report: &DispatchReport, prev: Option<&DispatchRow>) -> Self {
        Self::after_frame(report, prev.map_or(0, |p| p.frame))
    }

    /// The row of `report`, which follows a dispatch of frame `prev_frame`.
    pub fn after_frame(report: &DispatchReport, prev_frame: u64) -> Self {
        let retires = report
            .events_before
            .iter()
            .filter(|e| matches!(e.event, dispatchscope_core::input::Event::Retire))
            .count() as u64;
        Self {
            index: report.index,
            program: report.program,
            label: report.label.clone(),
            mode: report.mode,
            counts: RowCounts::of_report(report),
            rules: RuleSet::of(&report.rules_cited()),
            frame: prev_frame + retires,
        }
    }

    /// Whether the dispatch cites `rule`.
    pub fn cites(&self, rule: Rule) -> bool {
        self.rules.contains(rule)
    }

    /// The lower-case text the search box matches beyond the index: program, label, mode, rule
    /// ids. A row's whole search text is its index, a space, then this; a search word has no
    /// space in it, so it is in the whole text exactly when it is in the index's digits or in
    /// this (what lets [`Rows`] keep this text once per signature, not once per row).
    pub fn signature_text(program: u64, label: &str, mode: Mode, rules: RuleSet) -> String {
        let mut out = format!("{program:#x} {label} {}", mode.as_str());
        for r in rules.iter() {
            out.push(' ');
            out.push_str(r.id());
        }
        if out.bytes().any(|b| b.is_ascii_uppercase() || !b.is_ascii()) {
            out = out.to_lowercase();
        }
        out
    }

    /// Appends the lower-case text the search box matches: index, program, label, mode, rule ids.
    pub fn write_search_text(&self, out: &mut String) {
        use std::fmt::Write as _;
        let _ = write!(
            out,
            "{} {}",
            self.index,
            Self::signature_text(self.program, &self.label, self.mode, self.rules)
        );
    }

    /// The search text alone (tests).
    pub fn search_text(&self) -> String {
        let mut s = String::new();
        self.write_search_text(&mut s);
        s
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
    /// Whether the row at `pos` passes (one row; [`find::Finder`] answers a session).
    pub fn passes(&self, pos: usize, row: &DispatchRow, bookmarks: &[usize]) -> bool {
        let mut finder = find::Finder::default();
        let mut one = Rows::new();
        one.push(row);
        let marks: Vec<usize> = bookmarks.contains(&pos).then_some(0).into_iter().collect();
        !finder.find(&one, self, &marks).is_empty()
    }

    /// Whether any condition is set.
    pub fn is_active(&self) -> bool {
        *self != Filter::default()
    }
}

/// The Dispatches panel's state: its filter, the finder that answers it, and whether the search
/// box should take the keyboard.
#[derive(Default)]
pub struct DispatchesPanel {
    /// The filter (persisted by the app).
    pub filter: Filter,
    finder: Finder,
    focus_search: bool,
    last_current: Option<usize>,
    /// In a comparison: which side this list is, and each dispatch's [`RowMark`] by position
    /// (a difference column is drawn while set).
    pub row_marks: Option<(Side, Arc<[RowMark]>)>,
    /// In a comparison, list only the dispatches that differ (or have no counterpart).
    pub only_differing: bool,
    /// The table's id, for two lists in one window.
    pub id_salt: &'static str,
    /// Follow the tail (a live session following its newest dispatch): the list scrolls with
    /// arriving rows, keeping the last one in view at the bottom.
    pub follow: bool,
    /// Rows drawn last frame (the tail moved when this changes).
    last_len: usize,
}

/// The dispatch table's column widths, in points: from the widest text each column can hold
/// (the session's largest index, its widest program address, the longest mode, a count's
/// digits; a header when wider) measured in the table's own fonts, so that no column's text runs into the next
/// however the rows change; the label column takes the rest and clips.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ColumnWidths {
    /// The bookmark star.
    pub star: f32,
    /// The index (`#`).
    pub index: f32,
    /// The program address.
    pub program: f32,
    /// The mode.
    pub mode: f32,
    /// Each of the four counts.
    pub count: f32,
}

impl ColumnWidths {
    /// The widths for `rows` drawn in `ui`'s style.
    pub fn of(ui: &egui::Ui, rows: &Rows) -> Self {
        let mono = egui::TextStyle::Monospace.resolve(ui.style());
        let body = egui::TextStyle::Body.resolve(ui.style());
        let width = |text: &str, font: &egui::FontId| {
            ui.fonts_mut(|f| {
                f.layout_no_wrap(text.to_owned(), font.clone(), egui::Color32::WHITE)
                    .size()
                    .x
            })
        };
        let strong = |text: &str| width(text, &body) + 2.0;
        // Every digit is as wide as the next in a monospace font: the widest index is the one
        // with the most digits.
        let last_index = rows.len().checked_sub(1).and_then(|p| rows.index(p));
        let first_index = rows.index(0);
        let digits = last_index
            .max(first_index)
            .unwrap_or(0)
            .to_string()
            .len()
            .max(3);
        // The program with the most hex digits (signatures are few: a game's programs).
        let widest_program = rows
            .signatures()
            .map(|(s, _)| s.program)
            .max_by_key(|p| 64 - p.leading_zeros())
            .unwrap_or(0);
        let pad = 6.0;
        Self {
            star: 22.0,
            index: width(&"0".repeat(digits), &mono).max(strong("#")) + pad,
            program: width(&hex(widest_program), &mono).max(strong("program")) + pad,
            mode: [Mode::Bound, Mode::DeviceAddressed, Mode::Refused]
                .iter()
                .map(|m| width(m.as_str(), &body))
                .fold(strong("mode"), f32::max)
                + pad,
            count: width(&"0".repeat(rows.widest_count().to_string().len()), &mono)
                .max(strong("refus."))
                .max(strong("marks"))
                + pad,
        }
    }
}

/// Whether the label `text`, drawn as `r` in `ui`, is cut: elided to the column's width, or
/// running past what the list shows of it (the column's clip, the list's sideways scroll).
pub fn label_cut(ui: &egui::Ui, r: &egui::Response, text: &str) -> bool {
    if text.is_empty() {
        return false;
    }
    let font = egui::TextStyle::Body.resolve(ui.style());
    let whole = ui.fonts_mut(|f| {
        f.layout_no_wrap(text.to_owned(), font, egui::Color32::WHITE)
            .size()
            .x
    });
    let shown = r.rect.intersect(ui.clip_rect()).width().max(0.0);
    whole > shown + 0.5
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

    /// The positions of the rows that pass the filter, from the [`Finder`]: the index is built
    /// once, and answers are reused, extended or narrowed when they can be.
    pub fn visible(&mut self, rows: &Rows, bookmarks: &[usize]) -> find::Shown<'_> {
        self.finder.find(rows, &self.filter, bookmarks)
    }

    /// Draws the filters and the table. `current` is the position of the dispatch shown.
    pub fn ui(
        &mut self,
        ui: &mut egui::Ui,
        rows: &Rows,
        bookmarks: &[usize],
        current: usize,
    ) -> Vec<Action> {
        self.ui_with(ui, rows, &[], bookmarks, current)
    }

    /// [`Self::ui`], with the session's dispatches that have no report (`pending`: in flight,
    /// abandoned, lost, by index) listed after the completed ones (the rows with counts), each
    /// with its state in words before its label, and counted above the list. A lost one's click
    /// asks for the loss report ([`Action::ShowLoss`]).
    pub fn ui_with(
        &mut self,
        ui: &mut egui::Ui,
        rows: &Rows,
        pending: &[PendingRow],
        bookmarks: &[usize],
        current: usize,
    ) -> Vec<Action> {
        puffin::profile_function!();
        let mut actions = Vec::new();
        let mut clear = false;
        self.filters_ui(ui);
        let n_total = rows.len();
        let filter = self.filter.clone();
        let marks = self.row_marks.clone();
        if let Some((_, m)) = &marks {
            let n = m.iter().filter(|r| r.differs()).count();
            ui.checkbox(
                &mut self.only_differing,
                crate::compare::mark_text(
                    format!("only differing ({n})"),
                    n > 0,
                ),
            )
            .on_hover_text("List only the dispatches that differ from the other session, or have no counterpart there (F7 / Shift+F7 jump between them)");
        }
        let only_differing = self.only_differing && marks.is_some();
        let shown = self.finder.find(rows, &filter, bookmarks);
        // The "only differing" filter narrows the finder's answer (a comparison's marks are the
        // app's, not the finder's).
        let narrowed: Option<Vec<usize>> = match (&marks, only_differing) {
            (Some((_, m)), true) => Some(
                shown
                    .to_vec()
                    .into_iter()
                    .filter(|&p| m.get(p).is_some_and(|r| r.differs()))
                    .collect(),
            ),
            _ => None,
        };
        let n_visible = narrowed.as_ref().map_or(shown.len(), Vec::len);
        let visible_get = |i: usize| match &narrowed {
            Some(v) => v.get(i).copied(),
            None => shown.get(i),
        };
        // The dispatches without a report, after the completed ones (none in a comparison's
        // "only differing", which compares reports).
        let pending: Vec<&PendingRow> = pending
            .iter()
            .filter(|p| !only_differing && p.passes(&filter))
            .collect();
        let n_listed = n_visible + pending.len();
        ui.horizontal(|ui| {
            ui.label(
                RichText::new(format!(
                    "{n_visible} of {}",
                    style::count(n_total, "dispatch", "dispatches")
                ))
                .small()
                .color(style::MUTED),
            );
            if !pending.is_empty() {
                let count =
                    |state: DispatchState| pending.iter().filter(|p| p.state == state).count();
                let mut parts = Vec::new();
                for state in [
                    DispatchState::InFlight,
                    DispatchState::Lost,
                    DispatchState::Abandoned,
                ] {
                    let n = count(state);
                    if n > 0 {
                        parts.push(format!("{n} {}", state.as_str()));
                    }
                }
                ui.label(
                    RichText::new(format!("+ {}", parts.join(", ")))
                        .small()
                        .color(style::SELECTED),
                );
            }
            if (filter.is_active() || only_differing) && ui.small_button("Clear filters").clicked()
            {
                clear = true;
            }
        });
        let tail_moved = n_total + pending.len() != self.last_len;
        self.last_len = n_total + pending.len();
        let scroll_to = if self.follow && (tail_moved || self.last_current != Some(current)) {
            // Following: the last row listed stays in view, at the bottom.
            self.last_current = Some(current);
            n_listed.checked_sub(1)
        } else if self.last_current != Some(current) {
            self.last_current = Some(current);
            match &narrowed {
                Some(v) => v.iter().position(|&p| p == current),
                None => shown.position_of(current),
            }
        } else {
            None
        };
        let align = if self.follow {
            egui::Align::BOTTOM
        } else {
            egui::Align::Center
        };
        let row_height = ui.text_style_height(&egui::TextStyle::Body) + 4.0;
        // A label that can be selected takes the click from the row; no cell wraps (the label
        // column is clipped instead).
        ui.style_mut().interaction.selectable_labels = false;
        ui.style_mut().wrap_mode = Some(egui::TextWrapMode::Extend);
        let id_salt = if self.id_salt.is_empty() {
            "dispatches-table"
        } else {
            self.id_salt
        };
        let w = ColumnWidths::of(ui, rows);
        // The list's height, taken before the sideways scroll area (whose content may grow).
        let outer_height = ui.available_height();
        // A list narrower than its columns scrolls sideways rather than cutting them.
        egui::ScrollArea::horizontal()
            .id_salt((id_salt, "sideways"))
            .auto_shrink([false, false])
            .show(ui, |ui| {
                let pitch = row_height + ui.spacing().item_spacing.y;
                let body = outer_height - pitch;
                // A little short of the end rather than past it (past it, the scroll area would
                // spring back, animating every frame).
                let tail_offset = (n_listed as f32 * pitch - body - 2.0).max(0.0);
                let mut table = TableBuilder::new(ui)
                    .id_salt(id_salt)
                    .striped(true)
                    .sense(Sense::click())
                    .cell_layout(egui::Layout::left_to_right(egui::Align::Center));
                if marks.is_some() {
                    table = table.column(Column::exact(18.0).clip(true));
                }
                // Every column is exact (from its widest possible text) and clips: no text runs into its
                // neighbour, and the columns do not move as rows scroll by.
                let mut table = table
                    .column(Column::exact(w.star).clip(true))
                    .column(Column::exact(w.index).clip(true))
                    .column(Column::exact(w.program).clip(true))
                    .column(Column::exact(w.mode).clip(true))
                    .columns(Column::exact(w.count).clip(true), 4)
                    .column(Column::remainder().at_least(60.0).clip(true))
                    .min_scrolled_height(0.0)
                    .auto_shrink([false, false]);
                // Following, the tail is in view at once each frame (an animation would trail behind
                // rows arriving every frame).
                table = table.animate_scrolling(!self.follow);
                if self.follow {
                    // The offset that puts the last row at the bottom this frame (a scroll to a
                    // row takes effect the next frame, when a game's next rows have arrived): the
                    // rows' pitch times their number, less the body's height (what is left below the
                    // header's row).
                    table = table.vertical_scroll_offset(tail_offset);
                } else if let Some(row) = scroll_to {
                    table = table.scroll_to_row(row, Some(align));
                }
                table
                    .header(row_height, |mut h| {
                        if marks.is_some() {
                            h.col(|ui| {
                                ui.strong(crate::compare::GLYPH).on_hover_text(
                                    "differs from the other session (+ added, − removed)",
                                );
                            });
                        }
                        for title in [
                            "", "#", "program", "mode", "sets", "refus.", "esc.", "marks", "label",
                        ] {
                            h.col(|ui| {
                                ui.strong(title);
                            });
                        }
                    })
                    .body(|body| {
                        body.rows(row_height, n_listed, |mut row| {
                            if let Some(p) = row.index().checked_sub(n_visible) {
                                if let Some(p) = pending.get(p) {
                                    pending_row(&mut row, p, marks.is_some(), &mut actions);
                                }
                                return;
                            }
                            let Some(pos) = visible_get(row.index()) else {
                                return;
                            };
                            let (Some(index), Some(sig), Some(counts)) =
                                (rows.index(pos), rows.signature(pos), rows.counts(pos))
                            else {
                                return;
                            };
                            row.set_selected(pos == current);
                            if let Some((side, m)) = &marks {
                                let mark = m.get(pos).copied().unwrap_or_default();
                                let (glyph, colour) = mark.glyph(*side);
                                row.col(|ui| {
                                    let r = ui.label(RichText::new(glyph).strong().color(colour));
                                    if mark.differs() {
                                        r.on_hover_text(mark.tip(*side));
                                    }
                                });
                            }
                            let marked = bookmarks.contains(&pos);
                            row.col(|ui| {
                                let star = if marked { "★" } else { "☆" };
                                if ui
                                    .add(egui::Button::new(star).frame(false))
                                    .on_hover_text(format!("Bookmark dispatch {index} (Ctrl+B)"))
                                    .clicked()
                                {
                                    actions.push(Action::ToggleBookmark(pos));
                                }
                            });
                            row.col(|ui| {
                                ui.label(mono(index.to_string()));
                            });
                            row.col(|ui| {
                                style::addr_label(ui, mono(hex(sig.program)));
                            });
                            row.col(|ui| {
                                ui.label(style::mode_text(sig.mode));
                            });
                            for (n, warn) in [
                                (counts.sets, false),
                                (counts.refusals, true),
                                (counts.escapes, true),
                                (counts.marks, false),
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
                            let label = rows.label(pos);
                            let mut cut = false;
                            row.col(|ui| {
                                let r = ui.add(egui::Label::new(label).truncate());
                                cut = label_cut(ui, &r, label);
                            });
                            let response = row.response();
                            if response.clicked() {
                                actions.push(Action::SelectDispatch(pos));
                            }
                            if cut {
                                // The whole label, over the row (a label cut short, or past
                                // the list's edge, is still read in full). A tooltip of its
                                // own: the row's accessible name stays its cells'.
                                response.on_hover_ui(|ui| {
                                    ui.set_max_width(ui.spacing().tooltip_width);
                                    ui.label(label);
                                });
                            }
                        });
                    });
            });
        if clear {
            self.filter = Filter::default();
            self.only_differing = false;
        }
        actions
    }

    fn filters_ui(&mut self, ui: &mut egui::Ui) {
        ui.horizontal(|ui| {
            let label = ui.label("Find");
            let edit = ui
                .add(
                    egui::TextEdit::singleline(&mut self.filter.search)
                        .id(if self.id_salt.is_empty() {
                            search_id()
                        } else {
                            Id::unique(self.id_salt).with("search")
                        })
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

/// One row of a dispatch without a report: its index, program and mode, no counts (they are a
/// report's), its state before its label; a lost one's click asks for the loss report.
fn pending_row(
    row: &mut egui_extras::TableRow<'_, '_>,
    p: &PendingRow,
    compared: bool,
    actions: &mut Vec<Action>,
) {
    if compared {
        row.col(|_| {});
    }
    row.col(|_| {});
    row.col(|ui| {
        ui.label(mono(p.index.to_string()).color(style::MUTED));
    });
    row.col(|ui| {
        style::addr_label(ui, mono(hex(p.program)));
    });
    row.col(|ui| {
        ui.label(style::mode_text(p.mode));
    });
    for _ in 0..4 {
        row.col(|ui| {
            ui.label(RichText::new("–").color(style::MUTED));
        });
    }
    // The state first in the label's cell: a row with no report has no counts to show, and
    // the list keeps its columns (a completed row is every row with counts).
    row.col(|ui| {
        ui.label(p.state.text());
        ui.add(egui::Label::new(&*p.label).truncate());
    });
    let response = row.response().on_hover_text(p.state.tip(p.index));
    if response.clicked() && p.state == DispatchState::Lost {
        actions.push(Action::ShowLoss);
    }
}
