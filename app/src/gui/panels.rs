//! The report panels behind one trait, [`Panel`] (egui's demo `View` is the model), and
//! [`Panels`]: one panel a tab, the Pass tab included, with the one dispatch the main view and
//! both sides of a comparison draw through ([`Panels::tab_ui`]) and the one tab bar
//! ([`Panels::tabs_ui`]).
//!
//! Every panel has the shape of `dispatchscope_views`' panels: a state struct whose `ui` draws one
//! report (and what the session keeps beside it, [`PanelInput`]) and returns what the person
//! asked for as [`Action`]s, which the app applies after the frame. This module never applies an
//! action and never touches a file or the live link.

use dispatchscope_core::DispatchReport;
use dispatchscope_views::{
    AccessesPanel, Action, AfterPanel, BindingsPanel, ChunkTablePanel, DiffMarks, GuestBytes,
    MemoryPanel, RefusalsPanel, Selection, Tab,
};
use egui::RichText;

use super::instrumented_ui::PassTab;
use super::session::Session;

/// What every panel draws from: one dispatch's report, its session (the memory and table it
/// left), the selection, and the guest bytes a live target answered.
#[derive(Clone, Copy)]
pub struct PanelInput<'a> {
    /// The selected dispatch's report.
    pub report: &'a DispatchReport,
    /// Its session.
    pub session: &'a Session,
    /// The selection (its `dispatch` is the report's position).
    pub sel: &'a Selection,
    /// The guest bytes the Memory panel's byte view shows.
    pub bytes: GuestBytes<'a>,
}

/// One tab of the main area: its state, what its title counts, and its `ui`.
pub trait Panel {
    /// The tab it is.
    fn tab(&self) -> Tab;

    /// Whether it has something to show for `report` (a tab that has not is left off the bar).
    fn shows(&self, _report: &DispatchReport) -> bool {
        true
    }

    /// The count its title carries for `report` (none when 0).
    fn title_count(&self, _report: &DispatchReport) -> usize {
        0
    }

    /// Whether a comparison shows it side by side (a tab it does not is left off its bar).
    fn compared(&self) -> bool {
        true
    }

    /// Marks what differs from the other side of a comparison (`None`: nothing marked).
    fn set_diff(&mut self, _marks: Option<&DiffMarks>) {}

    /// Draws the panel; returns what the person asked for.
    fn ui(&mut self, ui: &mut egui::Ui, input: &PanelInput<'_>) -> Vec<Action>;
}

impl Panel for BindingsPanel {
    fn tab(&self) -> Tab {
        Tab::Bindings
    }

    fn set_diff(&mut self, marks: Option<&DiffMarks>) {
        self.diff = marks.cloned();
    }

    fn ui(&mut self, ui: &mut egui::Ui, input: &PanelInput<'_>) -> Vec<Action> {
        BindingsPanel::ui(self, ui, input.report, input.sel)
    }
}

impl Panel for RefusalsPanel {
    fn tab(&self) -> Tab {
        Tab::Refusals
    }

    fn title_count(&self, report: &DispatchReport) -> usize {
        report.counts.refusals
    }

    fn set_diff(&mut self, marks: Option<&DiffMarks>) {
        self.diff = marks.cloned();
    }

    fn ui(&mut self, ui: &mut egui::Ui, input: &PanelInput<'_>) -> Vec<Action> {
        RefusalsPanel::ui(self, ui, input.report, input.sel)
    }
}

impl Panel for MemoryPanel {
    fn tab(&self) -> Tab {
        Tab::Memory
    }

    fn ui(&mut self, ui: &mut egui::Ui, input: &PanelInput<'_>) -> Vec<Action> {
        let memory = input.session.memory(input.sel.dispatch);
        MemoryPanel::ui(self, ui, input.report, memory, input.sel, input.bytes)
    }
}

impl Panel for ChunkTablePanel {
    fn tab(&self) -> Tab {
        Tab::ChunkTable
    }

    fn set_diff(&mut self, marks: Option<&DiffMarks>) {
        self.diff = marks.cloned();
    }

    fn ui(&mut self, ui: &mut egui::Ui, input: &PanelInput<'_>) -> Vec<Action> {
        let table = input.session.table(input.sel.dispatch);
        ChunkTablePanel::ui(self, ui, input.report, table, input.sel)
    }
}

impl Panel for AccessesPanel {
    fn tab(&self) -> Tab {
        Tab::Accesses
    }

    fn title_count(&self, report: &DispatchReport) -> usize {
        report.counts.escapes
    }

    fn set_diff(&mut self, marks: Option<&DiffMarks>) {
        self.diff = marks.cloned();
    }

    fn ui(&mut self, ui: &mut egui::Ui, input: &PanelInput<'_>) -> Vec<Action> {
        AccessesPanel::ui(self, ui, input.report, input.sel)
    }
}

impl Panel for AfterPanel {
    fn tab(&self) -> Tab {
        Tab::After
    }

    fn set_diff(&mut self, marks: Option<&DiffMarks>) {
        self.diff = marks.cloned();
    }

    fn ui(&mut self, ui: &mut egui::Ui, input: &PanelInput<'_>) -> Vec<Action> {
        AfterPanel::ui(self, ui, input.report, input.sel)
    }
}

/// The Pass tab: shown where the report has an instrumented section, its title the escapes the
/// device counted; not compared (a comparison's bar leaves it off).
impl Panel for PassTab {
    fn tab(&self) -> Tab {
        Tab::Pass
    }

    fn shows(&self, report: &DispatchReport) -> bool {
        PassTab::shows(report)
    }

    fn title_count(&self, report: &DispatchReport) -> usize {
        PassTab::title_count(report)
    }

    fn compared(&self) -> bool {
        false
    }

    fn ui(&mut self, ui: &mut egui::Ui, input: &PanelInput<'_>) -> Vec<Action> {
        PassTab::ui(self, ui, input.report)
    }
}

/// The panels of one report, one a tab.
#[derive(Default)]
pub struct Panels {
    /// Bindings.
    pub bindings: BindingsPanel,
    /// Refusals.
    pub refusals: RefusalsPanel,
    /// Memory.
    pub memory: MemoryPanel,
    /// Chunk table.
    pub table: ChunkTablePanel,
    /// Accesses & escapes.
    pub accesses: AccessesPanel,
    /// After the dispatch.
    pub after: AfterPanel,
    /// Pass.
    pub pass: PassTab,
}

impl Panels {
    /// The panel of `tab`.
    pub fn get(&self, tab: Tab) -> &dyn Panel {
        match tab {
            Tab::Bindings => &self.bindings,
            Tab::Refusals => &self.refusals,
            Tab::Memory => &self.memory,
            Tab::ChunkTable => &self.table,
            Tab::Accesses => &self.accesses,
            Tab::After => &self.after,
            Tab::Pass => &self.pass,
        }
    }

    /// The panel of `tab`, to draw or mark.
    pub fn get_mut(&mut self, tab: Tab) -> &mut dyn Panel {
        match tab {
            Tab::Bindings => &mut self.bindings,
            Tab::Refusals => &mut self.refusals,
            Tab::Memory => &mut self.memory,
            Tab::ChunkTable => &mut self.table,
            Tab::Accesses => &mut self.accesses,
            Tab::After => &mut self.after,
            Tab::Pass => &mut self.pass,
        }
    }

    /// The tab drawn when `tab` is asked for: itself, but in a comparison (`comparing`) a tab
    /// not compared shows Bindings.
    pub fn shown_tab(&self, tab: Tab, comparing: bool) -> Tab {
        if comparing && !self.get(tab).compared() {
            Tab::Bindings
        } else {
            tab
        }
    }

    /// Draws `tab` of `input` ([`Self::shown_tab`]) and returns what the person asked for: the
    /// one tab dispatch.
    pub fn tab_ui(
        &mut self,
        ui: &mut egui::Ui,
        tab: Tab,
        input: &PanelInput<'_>,
        comparing: bool,
    ) -> Vec<Action> {
        let tab = self.shown_tab(tab, comparing);
        self.get_mut(tab).ui(ui, input)
    }

    /// The tab bar for `report`: each tab that shows it, with its count; `current` selected;
    /// `title` may mark a title (a comparison's Δ). In a comparison (`comparing`), only the tabs
    /// compared. Returns the tab clicked.
    pub fn tabs_ui(
        &self,
        ui: &mut egui::Ui,
        current: Tab,
        report: &DispatchReport,
        comparing: bool,
        title: impl Fn(Tab, String) -> RichText,
    ) -> Option<Tab> {
        let mut clicked = None;
        ui.horizontal_wrapped(|ui| {
            for t in Tab::ALL {
                let p = self.get(t);
                if !p.shows(report) || (comparing && !p.compared()) {
                    continue;
                }
                let n = p.title_count(report);
                let text = if n > 0 {
                    format!("{} ({n})", t.title())
                } else {
                    t.title().to_owned()
                };
                if ui.selectable_label(current == t, title(t, text)).clicked() {
                    clicked = Some(t);
                }
            }
        });
        clicked
    }

    /// Marks what differs from the other side of a comparison in every panel that marks it
    /// (`None`: no comparison, nothing marked).
    pub fn set_diff(&mut self, marks: Option<DiffMarks>) {
        for t in Tab::ALL {
            self.get_mut(t).set_diff(marks.as_ref());
        }
    }
}
