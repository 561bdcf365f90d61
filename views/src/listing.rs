//! The Listing panel: the guest program around a pc as RDNA2 code (decoded by
//! `dispatchscope_rdna`, printed as LLVM 14 prints it), the pc's line highlighted, every line
//! marked with how many accesses, escapes and sites name its pc.
//!
//! Plain data in ([`ListingInput`]: the program's code, the pc, the marks), [`ListingAction`]s
//! out; the app finds the code (a sample's `programs`) and applies the actions. The panel keeps
//! the decoded program between frames and decodes again only when the program changes.

use std::collections::HashMap;

use dispatchscope_core::DispatchReport;
use dispatchscope_rdna::{Instruction, Kind, decode};
use egui::{Color32, RichText};

use crate::style::{self, mono};

/// How many accesses, escapes and sites name one pc.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LineMarks {
    /// Accesses of the report at this pc.
    pub accesses: usize,
    /// Escapes (T4) at this pc.
    pub escapes: usize,
    /// Sites (the game-scale view's) at this pc.
    pub sites: usize,
}

/// The marks of every pc of `report`: its accesses and escapes counted by pc (sites are the
/// caller's to add).
pub fn marks_from_report(report: &DispatchReport) -> HashMap<u64, LineMarks> {
    let mut marks: HashMap<u64, LineMarks> = HashMap::new();
    for a in &report.accesses {
        marks.entry(a.pc).or_default().accesses += 1;
    }
    for e in &report.escapes {
        marks.entry(e.pc).or_default().escapes += 1;
    }
    marks
}

/// What the panel draws from.
#[derive(Clone, Copy, Debug)]
pub struct ListingInput<'a> {
    /// The program's address (its code's first byte).
    pub program: u64,
    /// Its code, or `None` when the session carries none.
    pub code: Option<&'a [u8]>,
    /// The pc to show and highlight.
    pub pc: Option<u64>,
    /// Marks by pc.
    pub marks: &'a HashMap<u64, LineMarks>,
}

/// What a person asked for in the listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListingAction {
    /// Show this pc (a click on a line): the app selects the first access at it.
    SelectPc(u64),
    /// Show the escapes at this pc (a click on a line's escape mark).
    ShowEscapesAt(u64),
}

/// The Listing panel's state.
#[derive(Debug)]
pub struct ListingPanel {
    /// Lines shown before and after the pc's line.
    pub context_lines: usize,
    decoded: Option<(u64, usize, Vec<Instruction>)>,
    /// The pc the last frame showed: a new one scrolls its line into view.
    shown_pc: Option<u64>,
    /// The highlighted line of the last frame: its pc and text.
    highlighted: Option<(u64, String)>,
}

impl Default for ListingPanel {
    fn default() -> Self {
        ListingPanel {
            context_lines: 12,
            decoded: None,
            shown_pc: None,
            highlighted: None,
        }
    }
}

/// The range of `insts` to show around `pc`: `context` lines either side of the line holding
/// it, or the program's first lines when the pc is absent or outside it.
pub fn window(
    insts: &[Instruction],
    pc: Option<u64>,
    context: usize,
) -> (std::ops::Range<usize>, Option<usize>) {
    let at = pc.and_then(|pc| {
        insts
            .iter()
            .position(|i| pc >= i.pc && pc < i.pc + u64::from(i.len.max(1)))
    });
    let center = at.unwrap_or(0);
    let start = center.saturating_sub(context);
    let end = (center + context + 1).min(insts.len());
    (start..end, at)
}

impl ListingPanel {
    /// The decoded program, decoding it again only when the program or its length changed.
    fn instructions(&mut self, program: u64, code: &[u8]) -> &[Instruction] {
        let stale = !matches!(&self.decoded, Some((p, n, _)) if *p == program && *n == code.len());
        if stale {
            self.decoded = Some((program, code.len(), decode(code, program).collect()));
        }
        match &self.decoded {
            Some((_, _, insts)) => insts,
            None => &[],
        }
    }

    /// Draws the listing of `input`.
    pub fn ui(&mut self, ui: &mut egui::Ui, input: &ListingInput<'_>) -> Vec<ListingAction> {
        puffin::profile_function!();
        let mut actions = Vec::new();
        let Some(code) = input.code else {
            style::nothing(
                ui,
                &format!(
                    "The session carries no code for program {:#x}.",
                    input.program
                ),
            );
            return actions;
        };
        let context = self.context_lines;
        let scroll = self.shown_pc != input.pc;
        self.shown_pc = input.pc;
        let insts = self.instructions(input.program, code);
        let (range, at) = window(insts, input.pc, context);
        let highlighted = at.map(|i| (insts[i].pc, insts[i].text.clone()));
        match (input.pc, &highlighted) {
            (Some(pc), None) => {
                ui.label(format!(
                    "pc {pc:#x} is outside program {:#x} ({} bytes)",
                    input.program,
                    code.len()
                ));
            }
            (_, Some((pc, text))) => {
                ui.label(
                    mono(format!("at {pc:#x}: {text}"))
                        .strong()
                        .color(style::SELECTED),
                );
            }
            (None, None) => {}
        }
        egui::ScrollArea::vertical()
            .id_salt("listing-scroll")
            .auto_shrink([false, false])
            .show(ui, |ui| {
                egui::Grid::new("listing-grid")
                    .striped(true)
                    .num_columns(3)
                    .show(ui, |ui| {
                        for (i, inst) in insts[range.clone()].iter().enumerate() {
                            let here = at == Some(range.start + i);
                            let mut pc_text = mono(format!("{:#x}", inst.pc));
                            let mut text = mono(inst.text.clone());
                            if here {
                                pc_text = pc_text.strong().color(style::SELECTED);
                                text = text.strong().color(style::SELECTED);
                            }
                            if let Kind::Unknown { .. } = inst.kind {
                                text = text.color(Color32::GRAY);
                            }
                            let pc_cell = ui.selectable_label(here, pc_text);
                            if here && scroll {
                                pc_cell.scroll_to_me(Some(egui::Align::Center));
                            }
                            if pc_cell.clicked() {
                                actions.push(ListingAction::SelectPc(inst.pc));
                            }
                            let line = ui.label(text);
                            if let Kind::Unknown { reason } = &inst.kind {
                                line.on_hover_text(reason.to_string());
                            }
                            let m = input.marks.get(&inst.pc).copied().unwrap_or_default();
                            ui.horizontal(|ui| {
                                if m.accesses > 0 {
                                    ui.label(format!("{} acc", m.accesses));
                                }
                                if m.escapes > 0
                                    && ui
                                        .link(
                                            RichText::new(format!("{} esc", m.escapes))
                                                .color(style::REFUSED),
                                        )
                                        .clicked()
                                {
                                    actions.push(ListingAction::ShowEscapesAt(inst.pc));
                                }
                                if m.sites > 0 {
                                    ui.label(format!("{} sites", m.sites));
                                }
                            });
                            ui.end_row();
                        }
                    });
            });
        self.highlighted = highlighted;
        actions
    }

    /// The line the last frame highlighted: its pc and its text as LLVM prints it.
    pub fn highlighted(&self) -> Option<(u64, &str)> {
        self.highlighted.as_ref().map(|(pc, t)| (*pc, t.as_str()))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    fn code() -> Vec<u8> {
        // s_nop 0 ×3, v_add_f32_e32 v0, 0x12345, v1 (8 bytes), s_endpgm
        let words = [
            0xbf80_0000u32,
            0xbf80_0000,
            0xbf80_0000,
            0x0600_02ff,
            0x0001_2345,
            0xbf81_0000,
        ];
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    #[test]
    fn window_centres_on_the_line_holding_the_pc() {
        let insts: Vec<_> = decode(&code(), 0x100).collect();
        assert_eq!(insts.len(), 5);
        // 0x110 is the literal's dword: it belongs to the v_add at 0x10c.
        let (range, at) = window(&insts, Some(0x110), 1);
        assert_eq!(at, Some(3));
        assert_eq!(range, 2..5);
        assert_eq!(insts[3].text, "v_add_f32_e32 v0, 0x12345, v1");
        let (range, at) = window(&insts, Some(0x900), 2);
        assert_eq!((range, at), (0..3, None));
    }

    #[test]
    fn decodes_again_only_when_the_program_changes() {
        let mut panel = ListingPanel::default();
        let c = code();
        assert_eq!(panel.instructions(0x100, &c).len(), 5);
        assert_eq!(panel.instructions(0x100, &c[..8]).len(), 2);
        assert_eq!(panel.instructions(0x200, &c).first().unwrap().pc, 0x200);
    }
}
