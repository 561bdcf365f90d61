//! The Pass tab in the window: an instrumented full-screen pass's sites, escape log and grid
//! picture (`dispatchscope_views::instrumented::PassPanel`), shown when the selected dispatch's
//! report has an instrumented section.
//!
//! The panel keeps what a person selected: the site (whose pc a listing can follow) and the lanes
//! of a grid cell (what a live link can ask the target to capture on its next dispatch). This file
//! only holds them between frames and offers them to the rest of the window; it sends nothing.

use dispatchscope_core::DispatchReport;
use dispatchscope_core::instrument::LaneSelection;
use dispatchscope_views::PassPanel;

/// The Pass tab's state, kept across dispatches (so a cell selected on one frame's pass is the
/// request for the next).
#[derive(Debug, Default)]
pub struct PassTab {
    /// The panel.
    pub panel: PassPanel,
}

impl PassTab {
    /// Draws the tab for `report`.
    pub fn ui(&mut self, ui: &mut egui::Ui, report: &DispatchReport) {
        self.panel.ui(ui, report);
    }

    /// The selected site's pc in `report`'s pass, for a listing to follow.
    #[allow(dead_code, reason = "the listing's wiring reads it")]
    pub fn selected_pc(&self, report: &DispatchReport) -> Option<u64> {
        report
            .instrumented
            .as_ref()
            .and_then(|ir| self.panel.selected_pc(ir))
    }

    /// The lanes selected on the picture: what a live link asks to capture next.
    #[allow(dead_code, reason = "the live link's wiring reads it")]
    pub fn lane_request(&self) -> Option<LaneSelection> {
        self.panel.lane_request()
    }

    /// The pc a person asked to see in the listing (a click on a site's pc), once.
    pub fn take_listing_request(&mut self) -> Option<u64> {
        self.panel.take_listing_request()
    }

    /// Whether `report` has a section the tab can show.
    pub fn shows(report: &DispatchReport) -> bool {
        report.instrumented.is_some()
    }

    /// The count the tab's title carries: the escapes the device counted.
    pub fn title_count(report: &DispatchReport) -> usize {
        report.instrumented.as_ref().map_or(0, |ir| {
            usize::try_from(ir.counters.escapes).unwrap_or(usize::MAX)
        })
    }
}
