//! What a comparison of two sessions shows in the panels: [`DiffMarks`], the parts of one side's
//! report that a [`DispatchDiff`] names (each panel highlights its own with [`DIFFERS`]);
//! [`RowMark`], what the dispatch list's difference column says of a dispatch; and the
//! [`DifferencesPanel`], the pair's [`Change`] sentences by category, each a link to the panel it
//! concerns.
//!
//! Everything here is read from a diff the app computed; nothing here compares reports itself
//! (that is `dispatchscope_analysis::diff`'s).

use std::collections::BTreeSet;

use dispatchscope_analysis::diff::{Category, Change, Compared, DispatchDiff};
use dispatchscope_core::ByteRange;
use dispatchscope_core::report::Refusal;
use dispatchscope_core::rules::Rule;
use egui::{Color32, RichText};

use crate::style::{self, mono};
use crate::{Action, Tab};

/// The colour of a difference: a row, a value or a card that the other side has otherwise.
pub const DIFFERS: Color32 = Color32::from_rgb(0xd0, 0x6c, 0xf0);

/// The glyph a highlighted item carries beside its colour (a colour alone is not enough).
pub const GLYPH: &str = "Δ";

/// Which session of a comparison a panel draws.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Side {
    /// The session compared from (the one opened first).
    #[default]
    A,
    /// The session compared to (File ▸ Compare with…, or the what-if's result).
    B,
}

impl Side {
    /// "A" or "B".
    pub fn name(self) -> &'static str {
        match self {
            Side::A => "A",
            Side::B => "B",
        }
    }

    /// The other side.
    pub fn other(self) -> Side {
        match self {
            Side::A => Side::B,
            Side::B => Side::A,
        }
    }
}

/// What the dispatch list's difference column says of one dispatch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RowMark {
    /// Paired, and nothing compared changed.
    #[default]
    Same,
    /// Paired, and some decision changed.
    Differs,
    /// No counterpart on the other side: added (only B has it) or removed (only A has it).
    Unmatched,
}

impl RowMark {
    /// Whether the jump keys and the "only differing" filter stop at it.
    pub fn differs(self) -> bool {
        self != RowMark::Same
    }

    /// The column's text and colour for a dispatch of `side`.
    pub fn glyph(self, side: Side) -> (&'static str, Color32) {
        match (self, side) {
            (RowMark::Same, _) => ("", style::MUTED),
            (RowMark::Differs, _) => (GLYPH, DIFFERS),
            (RowMark::Unmatched, Side::A) => ("−", style::REFUSED),
            (RowMark::Unmatched, Side::B) => ("+", style::BOUND),
        }
    }

    /// The column's hover text.
    pub fn tip(self, side: Side) -> String {
        match (self, side) {
            (RowMark::Same, _) => "the same in both sessions".into(),
            (RowMark::Differs, _) => "some decision differs between the two sessions".into(),
            (RowMark::Unmatched, Side::A) => "only in A: removed in B (no counterpart)".into(),
            (RowMark::Unmatched, Side::B) => "only in B: added (no counterpart in A)".into(),
        }
    }
}

/// The parts of one side's report that a pair's diff names, for the panels to highlight.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiffMarks {
    /// The side these marks are drawn on.
    pub side: Side,
    /// Whether the dispatch has no counterpart on the other side.
    pub unmatched: bool,
    /// Changes in the pair's diff.
    pub n_changes: usize,
    /// The mode differs.
    pub mode: bool,
    /// Slots whose presence, role, holder, offset, binding or O7 alignment differs.
    pub slots: BTreeSet<u32>,
    /// Holders of sets that differ.
    pub sets: BTreeSet<u32>,
    /// This side's refusals the other side lacks: (rule, slot, sentence).
    pub refusals: Vec<(Rule, Option<u32>, String)>,
    /// Accesses whose escape is on this side only.
    pub escapes: BTreeSet<usize>,
    /// Accesses whose route or values differ (escapes too).
    pub accesses: BTreeSet<usize>,
    /// Marked chunks (C1) that differ, by guest bytes.
    pub marks: Vec<ByteRange>,
    /// Write-back words (O8) that differ: (holder, guest address).
    pub words: BTreeSet<(u32, u64)>,
    /// Hazards that differ: (holder, guest word).
    pub hazards: BTreeSet<(u32, u64)>,
    /// Holders whose words written back but not listed (a device pass's) differ (O8).
    pub unlisted: BTreeSet<u32>,
    /// Mapped or left-out pieces (M3) that differ, by guest bytes.
    pub pieces: Vec<ByteRange>,
    /// The table's chunk size (T1) differs.
    pub chunk_bytes: bool,
    /// The table's probes (T2: capacity, chunks, bound, histogram) differ.
    pub probes: bool,
    /// Why the run was not compared, when only the plan was (a what-if past its divergence).
    pub plan_only: Option<String>,
}

impl DiffMarks {
    /// The marks a pair's `diff` puts on `side`'s report.
    pub fn of(diff: &DispatchDiff, side: Side) -> Self {
        let mut m = DiffMarks {
            side,
            n_changes: diff.changes.len(),
            ..DiffMarks::default()
        };
        if let Compared::PlanOnly { why } = &diff.compared {
            m.plan_only = Some(why.clone());
        }
        let mine = |added: bool| (side == Side::B) == added;
        for c in &diff.changes {
            match c {
                Change::Program { .. } | Change::Label { .. } => {}
                Change::Mode { .. } => m.mode = true,
                Change::SlotPresence { slot, .. }
                | Change::SlotRole { slot, .. }
                | Change::SlotHolder { slot, .. }
                | Change::SlotOffset { slot, .. }
                | Change::SlotBinding { slot, .. }
                | Change::SlotAligned { slot, .. } => {
                    m.slots.insert(*slot);
                }
                Change::Set { holder, .. } => {
                    m.sets.insert(*holder);
                }
                Change::RefusalAdded {
                    rule,
                    slot,
                    message,
                } => {
                    if mine(true) {
                        m.refusals.push((*rule, *slot, message.clone()));
                    }
                }
                Change::RefusalRemoved {
                    rule,
                    slot,
                    message,
                } => {
                    if mine(false) {
                        m.refusals.push((*rule, *slot, message.clone()));
                    }
                }
                Change::EscapeAdded { access, .. } => {
                    m.accesses.insert(*access);
                    if mine(true) {
                        m.escapes.insert(*access);
                    }
                }
                Change::EscapeRemoved { access, .. } => {
                    m.accesses.insert(*access);
                    if mine(false) {
                        m.escapes.insert(*access);
                    }
                }
                Change::Mark { guest, .. } => m.marks.push(*guest),
                Change::WriteBackWord {
                    holder, address, ..
                } => {
                    m.words.insert((*holder, *address));
                }
                Change::WriteBackUnlisted { holder, .. } => {
                    m.unlisted.insert(*holder);
                }
                Change::Hazard {
                    holder, address, ..
                } => {
                    m.hazards.insert((*holder, *address));
                }
                Change::Piece { guest, .. } | Change::LeftOut { guest, .. } => {
                    m.pieces.push(*guest)
                }
                Change::ChunkBytes { .. } => m.chunk_bytes = true,
                Change::Probes { .. } => m.probes = true,
                Change::Access { access, .. } => {
                    m.accesses.insert(*access);
                }
            }
        }
        m
    }

    /// The marks of a dispatch of `side` with no counterpart.
    pub fn unmatched(side: Side) -> Self {
        DiffMarks {
            side,
            unmatched: true,
            ..DiffMarks::default()
        }
    }

    /// Whether `r`, one of this side's refusals, is one the other side lacks.
    pub fn refusal(&self, r: &Refusal) -> bool {
        self.refusals.iter().any(|(rule, slot, message)| {
            *rule == r.rule && *slot == r.slot && *message == r.message
        })
    }

    /// Whether a mark's chunk differs.
    pub fn mark(&self, guest: ByteRange) -> bool {
        self.marks.contains(&guest)
    }

    /// What a highlighted refusal card says of itself.
    pub fn refusal_note(&self) -> &'static str {
        match self.side {
            Side::A => "only in A: B does not refuse this",
            Side::B => "only in B: A did not refuse this",
        }
    }
}

/// `text` in the difference colour with its glyph when `differs`, else as it is.
pub fn mark_text(text: impl Into<String>, differs: bool) -> RichText {
    let text = text.into();
    if differs {
        RichText::new(format!("{GLYPH} {text}")).color(DIFFERS)
    } else {
        RichText::new(text)
    }
}

/// [`mark_text`] in monospace.
pub fn mark_mono(text: impl Into<String>, differs: bool) -> RichText {
    mark_text(text, differs).monospace()
}

/// The tab that shows a category's decisions.
pub fn tab_of(category: Category) -> Tab {
    match category {
        Category::Program | Category::Label | Category::Mode | Category::Refusals => Tab::Refusals,
        Category::Slots | Category::Sets => Tab::Bindings,
        Category::Escapes | Category::Accesses => Tab::Accesses,
        Category::Marks | Category::WriteBack | Category::Hazards => Tab::After,
        Category::Pieces | Category::LeftOut => Tab::Memory,
        Category::Table => Tab::ChunkTable,
    }
}

/// A category's title in the Differences panel.
pub fn category_title(category: Category) -> &'static str {
    match category {
        Category::Program => "Program",
        Category::Label => "Label",
        Category::Mode => "Mode (A1, W2)",
        Category::Slots => "Slots (O4–O7)",
        Category::Sets => "Sets (O2, O5)",
        Category::Refusals => "Refusals",
        Category::Escapes => "Escapes (T4)",
        Category::Marks => "Marks (C1)",
        Category::WriteBack => "Write-back words (O8, O9)",
        Category::Hazards => "Hazards (L1)",
        Category::Pieces => "Mapped pieces (M3)",
        Category::LeftOut => "Left-out pieces (M3)",
        Category::Table => "Chunk table (T1, T2)",
        Category::Accesses => "Accesses",
    }
}

/// The actions a click on a change's sentence asks for: its tab, and the slot or access it is
/// about.
pub fn actions_of(change: &Change) -> Vec<Action> {
    let mut v = vec![Action::ShowTab(tab_of(change.category()))];
    match change {
        Change::SlotPresence { slot, .. }
        | Change::SlotRole { slot, .. }
        | Change::SlotHolder { slot, .. }
        | Change::SlotOffset { slot, .. }
        | Change::SlotBinding { slot, .. }
        | Change::SlotAligned { slot, .. } => v.push(Action::SelectSlot(Some(*slot))),
        Change::Set { holder, .. } => v.push(Action::SelectSlot(Some(*holder))),
        Change::RefusalAdded { slot, .. } | Change::RefusalRemoved { slot, .. } => {
            if let Some(s) = slot {
                v.push(Action::SelectSlot(Some(*s)));
            }
        }
        Change::EscapeAdded { access, .. }
        | Change::EscapeRemoved { access, .. }
        | Change::Access { access, .. } => v.push(Action::SelectAccess(Some(*access))),
        _ => {}
    }
    v
}

/// The most sentences a category lists before "… and N more".
pub const MAX_SENTENCES: usize = 200;

/// The Differences panel's state.
#[derive(Debug, Default)]
pub struct DifferencesPanel {}

/// A heading line for a pair: "3 changes in dispatch 4 (B's 4)".
pub fn pair_title(diff: &DispatchDiff) -> String {
    let n = diff.changes.len();
    let index = if diff.a == diff.b {
        format!("dispatch {}", diff.a)
    } else {
        format!("dispatch {} (B's {})", diff.a, diff.b)
    };
    format!("{n} {} in {index}", plural(n, "change", "changes"))
}

pub use crate::style::plural;

impl DifferencesPanel {
    /// Draws the changes of the selected pair, grouped by category, each sentence a link to the
    /// panel it concerns; `None` says the pair is the same.
    pub fn ui(&mut self, ui: &mut egui::Ui, diff: Option<&DispatchDiff>) -> Vec<Action> {
        let mut actions = Vec::new();
        let Some(d) = diff else {
            style::nothing(ui, "No decision differs in this pair.");
            return actions;
        };
        ui.label(RichText::new(pair_title(d)).strong().color(DIFFERS));
        if let Compared::PlanOnly { why } = &d.compared {
            ui.label(
                RichText::new(format!("only the plan is compared here: {why}")).color(style::MUTED),
            );
        }
        let categories = d.categories();
        for cat in categories {
            let changes: Vec<&Change> = d.changes.iter().filter(|c| c.category() == cat).collect();
            egui::CollapsingHeader::new(
                RichText::new(format!("{} ({})", category_title(cat), changes.len())).strong(),
            )
            .id_salt(("differences", cat))
            .default_open(true)
            .show(ui, |ui| {
                for c in changes.iter().take(MAX_SENTENCES) {
                    let sentence = c.sentence();
                    if ui
                        .add(
                            egui::Label::new(mono(sentence))
                                .wrap_mode(egui::TextWrapMode::Wrap)
                                .sense(egui::Sense::click()),
                        )
                        .on_hover_text(format!("Show it on the {} tab", tab_of(cat).title()))
                        .clicked()
                    {
                        actions.extend(actions_of(c));
                    }
                }
                if changes.len() > MAX_SENTENCES {
                    style::nothing(ui, &format!("… and {} more", changes.len() - MAX_SENTENCES));
                }
            });
        }
        actions
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dispatchscope_analysis::diff::Compared;

    fn diff(changes: Vec<Change>) -> DispatchDiff {
        DispatchDiff {
            a: 3,
            b: 3,
            position: [3, 3],
            program: 0x1000,
            label: String::new(),
            compared: Compared::Everything,
            changes,
        }
    }

    #[test]
    fn an_added_refusal_marks_b_only_and_a_removed_one_a_only() {
        let d = diff(vec![
            Change::RefusalAdded {
                rule: Rule::O7,
                slot: Some(1),
                message: "new".into(),
            },
            Change::RefusalRemoved {
                rule: Rule::O5,
                slot: None,
                message: "old".into(),
            },
            Change::SlotAligned {
                slot: 1,
                before: true,
                after: false,
            },
        ]);
        let a = DiffMarks::of(&d, Side::A);
        let b = DiffMarks::of(&d, Side::B);
        assert_eq!(a.refusals, vec![(Rule::O5, None, "old".to_owned())]);
        assert_eq!(b.refusals, vec![(Rule::O7, Some(1), "new".to_owned())]);
        assert!(a.slots.contains(&1) && b.slots.contains(&1));
        assert_eq!(a.n_changes, 3);
    }

    #[test]
    fn each_category_has_a_tab_and_a_click_selects_what_it_is_about() {
        let c = Change::EscapeAdded {
            pc: 0x10,
            class: dispatchscope_core::report::EscapeClass::NoReservation,
            address: 0x2000,
            access: 7,
            op: dispatchscope_core::input::Op::Load,
        };
        assert_eq!(
            actions_of(&c),
            vec![
                Action::ShowTab(Tab::Accesses),
                Action::SelectAccess(Some(7))
            ]
        );
        assert_eq!(tab_of(Category::WriteBack), Tab::After);
        assert_eq!(tab_of(Category::Table), Tab::ChunkTable);
    }

    #[test]
    fn plurals() {
        assert_eq!(
            pair_title(&diff(vec![Change::ChunkBytes {
                before: None,
                after: Some(1)
            }])),
            "1 change in dispatch 3"
        );
    }
}
