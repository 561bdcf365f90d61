//! The Pass tab in the window: an instrumented full-screen pass's sites, escape log and grid
//! picture (`dispatchscope_views::instrumented::PassPanel`), shown when the selected dispatch's
//! report has an instrumented section.
//!
//! The panel keeps what a person selected: the site (whose pc a listing can follow) and the lanes
//! of a grid cell (what a live link asks the target to capture on its next dispatch:
//! [`PassTab::sync_live`]).

use dispatchscope_core::DispatchReport;
use dispatchscope_core::instrument::LaneSelection;
use dispatchscope_views::{Action, PassPanel};
use std::path::PathBuf;

use super::live::LiveLink;

/// The Pass tab's state, kept across dispatches (so a cell selected on one frame's pass is the
/// request for the next).
#[derive(Debug, Default)]
pub struct PassTab {
    /// The panel.
    pub panel: PassPanel,
    /// The lanes last asked of a live target, and which session (its recording) was asked.
    sent: Option<(PathBuf, Option<LaneSelection>)>,
}

impl PassTab {
    /// Draws the tab for `report`; returns what the person asked for.
    pub fn ui(&mut self, ui: &mut egui::Ui, report: &DispatchReport) -> Vec<Action> {
        self.panel.ui(ui, report)
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
    pub fn lane_request(&self) -> Option<LaneSelection> {
        self.panel.lane_request()
    }

    /// Asks `link`'s target to capture the lanes selected on the picture, when they changed since
    /// the last request to that session (a cleared selection gives the choice back to the
    /// target); the line to show the person, when something was sent or failed.
    pub fn sync_live(&mut self, link: &LiveLink) -> Option<String> {
        if !link.is_attached() {
            return None;
        }
        let wanted = self.lane_request();
        let session = link.recording_path();
        if self
            .sent
            .as_ref()
            .is_some_and(|(p, l)| p == session && *l == wanted)
        {
            return None;
        }
        // The first look at a session sends nothing unless a cell is selected.
        if self.sent.as_ref().is_none_or(|(p, _)| p != session) && wanted.is_none() {
            self.sent = Some((session.to_path_buf(), None));
            return None;
        }
        self.sent = Some((session.to_path_buf(), wanted));
        Some(match (link.capture_lanes(wanted), wanted) {
            (Ok(()), Some(l)) => format!("asked the target to capture {l} from its next pass"),
            (Ok(()), None) => "gave the choice of captured lanes back to the target".into(),
            (Err(e), _) => format!("could not ask the target for lanes: {e}"),
        })
    }

    /// Whether `report` has a section the tab can show.
    pub fn shows(report: &DispatchReport) -> bool {
        report.instrumented.is_some()
    }

    /// The count the tab's title carries: the escapes the device counted.
    pub fn title_count(report: &DispatchReport) -> usize {
        report
            .instrumented
            .as_ref()
            .map_or(0, dispatchscope_core::report::InstrumentedReport::escapes)
    }
}
