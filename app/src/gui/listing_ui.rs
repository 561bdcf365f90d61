//! The Program side panel: the selected dispatch's guest program as RDNA2 code
//! ([`ListingPanel`], decoded by `dispatchscope_rdna`) around the selected access's pc — or,
//! with none selected, the first escape's, else the first access's — that line highlighted, each
//! line marked with its accesses, escapes and (an instrumented pass's) sites.
//!
//! A click on a line selects its first access; a click on a line's escape marker selects that
//! escape in the Accesses & escapes tab. Selecting an access or an escape anywhere moves the
//! listing to its line. Ctrl+L shows or hides the panel (hidden at start).

use std::collections::HashMap;

use dispatchscope_core::DispatchReport;
use dispatchscope_formats::sample::Program;
use dispatchscope_views::listing::{LineMarks, ListingAction, ListingInput, ListingPanel};
use dispatchscope_views::{Action, Selection, Tab, listing, style};

/// The panel's state: whether it is shown (closed until Ctrl+L, so the other panels keep their
/// width), and the listing.
#[derive(Debug, Default)]
pub struct ListingUi {
    /// Whether the panel is shown.
    pub open: bool,
    /// The listing (it keeps the decoded program between frames).
    pub panel: ListingPanel,
    /// A pc another panel asked to show (a site's pc in the Pass tab), with the access selected
    /// when it asked: it holds until the selection moves.
    pinned: Option<(u64, Option<usize>)>,
}

/// The pc the listing shows for `sel` in `report`: the selected access's, else the first
/// escape's, else the first access's.
pub fn focus_pc(report: &DispatchReport, sel: &Selection) -> Option<u64> {
    let access_pc = |i: usize| report.accesses.iter().find(|a| a.index == i).map(|a| a.pc);
    sel.access
        .and_then(access_pc)
        .or_else(|| report.escapes.first().map(|e| e.pc))
        .or_else(|| report.accesses.first().map(|a| a.pc))
}

/// The program that holds `pc` (else the dispatch's own), with its address.
fn program_for<'a>(
    programs: &'a [Program],
    report: &DispatchReport,
    pc: Option<u64>,
) -> Option<&'a Program> {
    pc.and_then(|pc| {
        programs
            .iter()
            .find(|p| pc >= p.address && pc - p.address < p.code.len() as u64)
    })
    .or_else(|| programs.iter().find(|p| p.address == report.program))
}

/// The marks of every pc: accesses and escapes from the report, sites from its instrumented
/// section (`sites` by pc), when it has one.
pub fn marks(report: &DispatchReport) -> HashMap<u64, LineMarks> {
    let mut m = listing::marks_from_report(report);
    if let Some(ins) = &report.instrumented {
        for s in &ins.sites {
            m.entry(s.pc).or_default().sites += 1;
        }
    }
    m
}

impl ListingUi {
    /// Shows or hides the panel.
    pub fn toggle(&mut self) {
        self.open = !self.open;
    }

    /// Opens the panel on `pc` (a site's), until the selected access changes.
    pub fn show_pc(&mut self, pc: u64, sel: &Selection) {
        self.open = true;
        self.pinned = Some((pc, sel.access));
    }

    /// Draws the panel's contents for `report`, with the session's `programs`; returns what a
    /// click asked for.
    pub fn ui(
        &mut self,
        ui: &mut egui::Ui,
        programs: &[Program],
        report: &DispatchReport,
        sel: &Selection,
    ) -> Vec<Action> {
        puffin::profile_function!();
        ui.heading("Program");
        let pc = match self.pinned {
            Some((pc, access)) if access == sel.access => Some(pc),
            _ => {
                self.pinned = None;
                focus_pc(report, sel)
            }
        };
        let program = program_for(programs, report, pc);
        let address = program.map_or(report.program, |p| p.address);
        ui.label(style::mono(format!("program {address:#x}")));
        let marks = marks(report);
        let input = ListingInput {
            program: address,
            code: program.map(|p| p.code.as_slice()),
            pc,
            marks: &marks,
        };
        let mut actions = Vec::new();
        for a in self.panel.ui(ui, &input) {
            match a {
                ListingAction::SelectPc(pc) => {
                    if let Some(a) = report.accesses.iter().find(|a| a.pc == pc) {
                        actions.push(Action::SelectAccess(Some(a.index)));
                    }
                }
                ListingAction::ShowEscapesAt(pc) => {
                    if let Some(e) = report.escapes.iter().find(|e| e.pc == pc) {
                        actions.push(Action::SelectAccess(Some(e.access)));
                        actions.push(Action::ShowTab(Tab::Accesses));
                    } else if report
                        .instrumented
                        .as_ref()
                        .is_some_and(|ir| ir.sites.iter().any(|s| s.pc == pc))
                    {
                        // An instrumented pass: its escapes are the Pass tab's, by site.
                        actions.push(Action::SelectSiteAt(pc));
                        actions.push(Action::ShowTab(Tab::Pass));
                    }
                }
            }
        }
        actions
    }
}
