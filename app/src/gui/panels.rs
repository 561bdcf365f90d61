//! [`Panels`]: the report panels, one of each, with the one tab dispatch the main view and both
//! sides of a comparison draw through ([`Panels::tab_ui`]).
//!
//! Every panel has the shape of `dispatchscope_views`' panels: a state struct whose `ui` draws one
//! report (and what the session keeps beside it) and returns what the person asked for as
//! [`Action`]s, which the app applies after the frame. This module never applies an action and
//! never touches a file or the live link.

use dispatchscope_core::DispatchReport;
use dispatchscope_views::{
    AccessesPanel, Action, AfterPanel, BindingsPanel, ChunkTablePanel, DiffMarks, GuestBytes,
    MemoryPanel, RefusalsPanel, Selection, Tab,
};

use super::session::Session;

/// The panels of one report, one of each tab but Pass (an instrumented pass's section is
/// `instrumented_ui::PassTab`'s, which the main view alone shows).
#[derive(Default)]
pub struct Panels {
    pub(super) bindings: BindingsPanel,
    pub(super) refusals: RefusalsPanel,
    pub(super) memory: MemoryPanel,
    pub(super) table: ChunkTablePanel,
    pub(super) accesses: AccessesPanel,
    pub(super) after: AfterPanel,
}

impl Panels {
    /// Draws `tab` of report `r`, a dispatch of `s` selected by `sel`, and returns what the person
    /// asked for; `bytes` are the guest bytes the Memory panel's byte view shows. `None` for
    /// [`Tab::Pass`], which is the caller's to draw.
    pub fn tab_ui(
        &mut self,
        ui: &mut egui::Ui,
        tab: Tab,
        r: &DispatchReport,
        s: &Session,
        sel: &Selection,
        bytes: GuestBytes<'_>,
    ) -> Option<Vec<Action>> {
        Some(match tab {
            Tab::Bindings => self.bindings.ui(ui, r, sel),
            Tab::Refusals => self.refusals.ui(ui, r, sel),
            Tab::Memory => self.memory.ui(ui, r, s.memory(sel.dispatch), sel, bytes),
            Tab::ChunkTable => self.table.ui(ui, r, s.table(sel.dispatch), sel),
            Tab::Accesses => self.accesses.ui(ui, r, sel),
            Tab::After => self.after.ui(ui, r, sel),
            Tab::Pass => return None,
        })
    }

    /// Marks what differs from the other side of a comparison in every panel that marks it
    /// (`None`: no comparison, nothing marked).
    pub fn set_diff(&mut self, marks: Option<DiffMarks>) {
        self.bindings.diff.clone_from(&marks);
        self.refusals.diff.clone_from(&marks);
        self.accesses.diff.clone_from(&marks);
        self.after.diff.clone_from(&marks);
        self.table.diff = marks;
    }
}
