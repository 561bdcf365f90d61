//! The Pass tab: an instrumented full-screen pass (issue 14) as the device counted it, drawn from
//! the report's [`InstrumentedReport`] alone: the positive control, the counters and the probe
//! histogram, the grid picture ([`grid`]), the sites table ([`sites`]) and the escape log and
//! captured lanes ([`escape_log`]).
//!
//! Selecting a site filters the log and the captured accesses to it and names its pc for the
//! listing ([`PassPanel::selected_pc`], or [`Action::ShowInListing`] from its `ui`); clicking a cell of
//! the picture selects its lanes ([`PassPanel::lane_request`]): a live link may ask the target to
//! capture them on the next dispatch, and for a saved pass they filter what was captured and
//! logged. The panel never changes the report and never talks to a target itself.

pub mod escape_log;
#[cfg(any(test, feature = "fixture"))]
pub mod fixture;
pub mod grid;
pub mod sites;

use dispatchscope_core::DispatchReport;
use dispatchscope_core::instrument::LaneSelection;
use dispatchscope_core::report::{ControlStatus, InstrumentedReport};
use egui::RichText;

pub use escape_log::{EscapeLogView, LogFilter};
pub use grid::{Colouring, GridView};
pub use sites::{SiteColumn, SitesView};

use crate::Action;
use crate::style::{self, hex};
use sites::count;

/// The banner of a pass whose positive control did not fire.
pub const NOT_VALIDATED: &str =
    "This pass's instrumentation is not validated: its canary did not escape.";

/// The summary lines above the picture: the grid, the routes, the lookups and the probes.
pub fn summary_lines(ir: &InstrumentedReport) -> Vec<String> {
    let c = &ir.counters;
    let mut v = vec![
        format!(
            "grid {}×{} · {} lanes · {} workgroups of 8×8",
            ir.grid[0],
            ir.grid[1],
            count(ir.lanes),
            count(ir.workgroups)
        ),
        format!(
            "accesses: {} to guest memory, {} bound, {} LDS, {} scratch · {} device stores marked (C1)",
            count(c.guest),
            count(c.bound),
            count(c.lds),
            count(c.scratch),
            count(c.stores_marked)
        ),
        format!(
            "lookups (T5): {} · {} hits · {} misses · {} escapes (T4)",
            count(c.lookups),
            count(c.hits),
            count(c.misses),
            count(c.escapes)
        ),
    ];
    let total: u64 = ir.probe_histogram.iter().sum();
    if total > 0 {
        let last = ir.probe_histogram.len();
        let parts: Vec<String> = ir
            .probe_histogram
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(i, n)| {
                let probes = if i + 1 == last {
                    format!("{}+", i + 1)
                } else {
                    (i + 1).to_string()
                };
                format!("{probes}: {:.2}%", *n as f64 * 100.0 / total as f64)
            })
            .collect();
        v.push(format!("probes a lookup (T2): {}", parts.join(" · ")));
    }
    v
}

/// The Pass tab's state.
#[derive(Debug, Default)]
pub struct PassPanel {
    /// The sites table.
    pub sites: SitesView,
    /// The escape log and the captured accesses.
    pub log: EscapeLogView,
    /// The grid picture.
    pub grid: GridView,
    /// The selected site, by number.
    pub site: Option<u32>,
    /// The lanes of the selected grid cell.
    pub lanes: Option<LaneSelection>,
}

impl PassPanel {
    /// The filter the log and the captured accesses follow.
    pub fn filter(&self) -> LogFilter {
        LogFilter {
            site: self.site,
            lanes: self.lanes,
        }
    }

    /// The selected site's pc, for a listing to follow.
    pub fn selected_pc(&self, ir: &InstrumentedReport) -> Option<u64> {
        let s = self.site?;
        ir.sites.iter().find(|r| r.site == s).map(|r| r.pc)
    }

    /// The lanes a person selected on the picture: what a live link asks the target to capture
    /// on its next dispatch.
    pub fn lane_request(&self) -> Option<LaneSelection> {
        self.lanes
    }

    /// Selects the site at `pc` (a listing's "show the escapes at this pc"); `false` when no site
    /// of `ir` is at `pc`, and the selection stays.
    pub fn select_pc(&mut self, ir: &InstrumentedReport, pc: u64) -> bool {
        match ir.sites.iter().find(|s| s.pc == pc) {
            Some(s) => {
                self.site = Some(s.site);
                true
            }
            None => false,
        }
    }

    /// Draws the tab for `report`; returns what the person asked for (a site's pc to see in the
    /// listing: [`Action::ShowInListing`]).
    pub fn ui(&mut self, ui: &mut egui::Ui, report: &DispatchReport) -> Vec<Action> {
        puffin::profile_function!();
        let mut actions = Vec::new();
        let Some(ir) = &report.instrumented else {
            style::nothing(
                ui,
                "This dispatch has no instrumented section: it did not run as an instrumented translated module.",
            );
            return actions;
        };
        if ir.control == ControlStatus::NotFired {
            egui::Frame::group(ui.style())
                .fill(style::REFUSED.gamma_multiply(0.25))
                .stroke(egui::Stroke::new(1.5, style::REFUSED))
                .show(ui, |ui| {
                    ui.set_width(ui.available_width());
                    ui.label(RichText::new(NOT_VALIDATED).strong().color(style::REFUSED));
                    ui.label("Its counters and logs may have missed escapes: the miss path was not seen to work.");
                });
        }
        for line in summary_lines(ir) {
            ui.label(style::mono(line));
        }
        let picture_h = (ui.available_height() * 0.4).clamp(120.0, 480.0);
        if let Some(sel) = self.grid.ui(ui, ir, self.lanes.as_ref(), picture_h) {
            self.lanes = if self.lanes == Some(sel) {
                None
            } else {
                Some(sel)
            };
        }
        self.selection_ui(ui, ir, &mut actions);
        ui.separator();
        let f = self.filter();
        let rest = ui.available_height();
        ui.columns(2, |cols| {
            let [left, right] = cols else { return };
            style::section(left, "Sites");
            // Each column scrolls sideways on its own: tables never draw over their neighbour.
            let out = egui::ScrollArea::horizontal()
                .id_salt("pass-sites")
                .show(left, |ui| self.sites.ui(ui, ir, self.site))
                .inner;
            if let Some(s) = out.select {
                self.site = s;
            }
            if let Some(pc) = out.show_pc {
                actions.push(Action::ShowInListing(pc));
                self.site = ir.sites.iter().find(|s| s.pc == pc).map(|s| s.site);
            }
            egui::ScrollArea::horizontal()
                .id_salt("pass-logs")
                .show(right, |ui| {
                    style::section(ui, "Escape log");
                    self.log.escapes_ui(ui, ir, &f, (rest * 0.45).max(80.0));
                    style::section(ui, "Captured lanes");
                    self.log.captured_ui(ui, ir, &f, (rest * 0.3).max(80.0));
                });
        });
        actions
    }

    fn selection_ui(
        &mut self,
        ui: &mut egui::Ui,
        ir: &InstrumentedReport,
        actions: &mut Vec<Action>,
    ) {
        ui.horizontal_wrapped(|ui| {
            match &self.lanes {
                Some(l) => {
                    ui.label(
                        RichText::new(format!(
                            "Selected {}: a live target can capture these lanes on its next dispatch.",
                            escape_log::describe_lanes(l)
                        ))
                        .color(style::SELECTED),
                    );
                    if ui.small_button("clear lanes").clicked() {
                        self.lanes = None;
                    }
                }
                None => {
                    ui.label(
                        RichText::new("Click a cell to select its lanes.").color(style::MUTED),
                    );
                }
            }
            if let Some(pc) = self.selected_pc(ir) {
                ui.separator();
                ui.label(
                    RichText::new(format!(
                        "site {} at pc {}",
                        self.site.unwrap_or_default(),
                        hex(pc)
                    ))
                    .color(style::SELECTED),
                );
                if ui.small_button("show in listing").clicked() {
                    actions.push(Action::ShowInListing(pc));
                }
                if ui.small_button("clear site").clicked() {
                    self.site = None;
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;
    use dispatchscope_core::report::DispatchReport;
    use egui::{Event, Modifiers, PointerButton, Pos2, RawInput, Rect, vec2};
    use fixture::Fixture;

    /// Runs one frame of the panel; returns every text it drew.
    fn frame(
        ctx: &egui::Context,
        panel: &mut PassPanel,
        report: &DispatchReport,
        events: Vec<Event>,
    ) -> Vec<String> {
        let input = RawInput {
            screen_rect: Some(Rect::from_min_size(Pos2::ZERO, vec2(1440.0, 900.0))),
            events,
            ..Default::default()
        };
        let mut out = ctx.run_ui(input, |ui| {
            egui::CentralPanel::default().show(ui, |ui| panel.ui(ui, report));
        });
        // No renderer here: the texture uploads (the font atlas, the picture) are dropped.
        out.textures_delta.clear();
        let mut texts = Vec::new();
        for c in &out.shapes {
            collect(&c.shape, &mut texts);
        }
        texts
    }

    fn collect(shape: &egui::Shape, texts: &mut Vec<String>) {
        match shape {
            egui::Shape::Text(t) => texts.push(t.galley.text().to_owned()),
            egui::Shape::Vec(v) => v.iter().for_each(|s| collect(s, texts)),
            _ => {}
        }
    }

    fn click_at(ctx: &egui::Context, panel: &mut PassPanel, r: &DispatchReport, pos: Pos2) {
        let button = |pressed| Event::PointerButton {
            pos,
            button: PointerButton::Primary,
            pressed,
            modifiers: Modifiers::NONE,
        };
        frame(ctx, panel, r, vec![Event::PointerMoved(pos)]);
        frame(ctx, panel, r, vec![button(true)]);
        frame(ctx, panel, r, vec![button(false)]);
        frame(ctx, panel, r, Vec::new());
    }

    #[test]
    fn the_tab_draws_the_not_logged_lines_and_the_sites() {
        let ctx = egui::Context::default();
        let report = Fixture::new(1920, 1080).report();
        let ir = report.instrumented.as_ref().unwrap();
        let mut panel = PassPanel::default();
        frame(&ctx, &mut panel, &report, Vec::new());
        let texts = frame(&ctx, &mut panel, &report, Vec::new());
        let has = |t: &str| texts.iter().any(|s| s.contains(t));
        assert!(
            has(&escape_log::not_logged_escapes(ir.escapes_not_logged)),
            "{texts:?}"
        );
        assert!(has("384 logged"), "{texts:?}");
        assert!(has("128 captured accesses kept"));
        assert!(has(&hex(ir.sites[3].pc)), "the sites table shows pcs");
        assert!(!has(NOT_VALIDATED), "the control fired");
        assert!(has("every escape placed"), "the legend says so: {texts:?}");
        // A section recorded before heat maps places only its logged escapes, and says so.
        let mut old = report.clone();
        if let Some(s) = old.instrumented.as_mut() {
            s.heat = None;
        }
        let mut panel = PassPanel::default();
        frame(&ctx, &mut panel, &old, Vec::new());
        let texts = frame(&ctx, &mut panel, &old, Vec::new());
        assert!(
            texts
                .iter()
                .any(|s| s.contains("only logged escapes are placed")),
            "{texts:?}"
        );
    }

    #[test]
    fn a_pass_whose_control_did_not_fire_says_so() {
        let ctx = egui::Context::default();
        let report = Fixture {
            control: ControlStatus::NotFired,
            ..Fixture::new(256, 256)
        }
        .report();
        let mut panel = PassPanel::default();
        frame(&ctx, &mut panel, &report, Vec::new());
        let texts = frame(&ctx, &mut panel, &report, Vec::new());
        assert!(texts.iter().any(|s| s == NOT_VALIDATED), "{texts:?}");
    }

    #[test]
    fn a_report_without_a_section_says_so() {
        let ctx = egui::Context::default();
        let mut report = Fixture::new(256, 256).report();
        report.instrumented = None;
        let mut panel = PassPanel::default();
        let texts = frame(&ctx, &mut panel, &report, Vec::new());
        assert!(texts.iter().any(|s| s.contains("no instrumented section")));
        assert_eq!(panel.grid.rebuilds, 0);
    }

    #[test]
    fn clicking_a_cell_selects_its_workgroup_and_filters_the_logs() {
        let ctx = egui::Context::default();
        let fx = Fixture::new(1920, 1080);
        let report = fx.report();
        let ir = report.instrumented.as_ref().unwrap();
        let mut panel = PassPanel::default();
        frame(&ctx, &mut panel, &report, Vec::new());
        frame(&ctx, &mut panel, &report, Vec::new());
        let rect = panel.grid.last_rect.unwrap();
        // The captured lanes' workgroup: it has captured accesses and (in the escaping region)
        // probably logged escapes.
        let c = &ir.captured[0];
        let at = |p: [u32; 2]| {
            Pos2::new(
                rect.min.x + (p[0] as f32 + 0.5) / ir.grid[0] as f32 * rect.width(),
                rect.min.y + (p[1] as f32 + 0.5) / ir.grid[1] as f32 * rect.height(),
            )
        };
        click_at(&ctx, &mut panel, &report, at(c.pixel));
        assert_eq!(
            panel.lane_request(),
            Some(LaneSelection::workgroup(c.workgroup, u64::MAX))
        );
        let f = panel.filter();
        let caps = escape_log::visible_captured(ir, &f);
        assert_eq!(
            caps.len(),
            ir.captured.len(),
            "both captured lanes are in the workgroup"
        );
        let escs = escape_log::visible_escapes(ir, &f);
        assert!(escs.iter().all(|&i| ir.escapes[i].workgroup == c.workgroup));
        assert_eq!(
            escs.len(),
            ir.escapes
                .iter()
                .filter(|e| e.workgroup == c.workgroup)
                .count()
        );
        // Another logged escape's cell, elsewhere.
        let e = ir
            .escapes
            .iter()
            .find(|e| e.workgroup != c.workgroup)
            .unwrap();
        click_at(&ctx, &mut panel, &report, at(e.pixel));
        assert_eq!(
            panel.lane_request(),
            Some(LaneSelection::workgroup(e.workgroup, u64::MAX))
        );
        assert!(
            escape_log::visible_escapes(ir, &panel.filter())
                .iter()
                .any(|&i| ir.escapes[i] == *e)
        );
        assert!(escape_log::visible_captured(ir, &panel.filter()).is_empty());
        // The same cell again clears it.
        click_at(&ctx, &mut panel, &report, at(e.pixel));
        assert_eq!(panel.lane_request(), None);
    }

    #[test]
    fn selecting_a_site_filters_and_names_its_pc() {
        let report = Fixture::new(1920, 1080).report();
        let ir = report.instrumented.as_ref().unwrap();
        let mut panel = PassPanel {
            site: Some(fixture::NODE_SITE),
            ..PassPanel::default()
        };
        assert_eq!(panel.selected_pc(ir), Some(fixture::PROGRAM + 0xb0));
        let f = panel.filter();
        let escs = escape_log::visible_escapes(ir, &f);
        assert!(!escs.is_empty());
        assert!(
            escs.iter()
                .all(|&i| ir.escapes[i].site == fixture::NODE_SITE)
        );
        // Each captured lane read four nodes in each of six instances.
        assert_eq!(escape_log::visible_captured(ir, &f).len(), 2 * 6 * 4);
        assert!(panel.select_pc(ir, fixture::PROGRAM + 0x90));
        assert_eq!(panel.site, Some(fixture::ESCAPING_SITE));
        assert!(!panel.select_pc(ir, 0x1234));
        assert_eq!(panel.site, Some(fixture::ESCAPING_SITE));
    }

    #[test]
    fn the_picture_is_built_again_only_when_the_report_or_colouring_changes() {
        let ctx = egui::Context::default();
        let a = Fixture::new(3840, 2160).report();
        let b = Fixture::new(1920, 1080).report();
        let mut panel = PassPanel::default();
        for _ in 0..5 {
            frame(&ctx, &mut panel, &a, Vec::new());
        }
        assert_eq!(panel.grid.rebuilds, 1);
        panel.grid.colouring = Colouring::Captured;
        for _ in 0..3 {
            frame(&ctx, &mut panel, &a, Vec::new());
        }
        assert_eq!(panel.grid.rebuilds, 2);
        panel.site = Some(3);
        panel.lanes = Some(LaneSelection::workgroup(7, u64::MAX));
        frame(&ctx, &mut panel, &a, Vec::new());
        assert_eq!(
            panel.grid.rebuilds, 2,
            "a selection is drawn over the picture"
        );
        for _ in 0..3 {
            frame(&ctx, &mut panel, &b, Vec::new());
        }
        assert_eq!(panel.grid.rebuilds, 3);
        panel.grid.colouring = Colouring::Escapes;
        frame(&ctx, &mut panel, &b, Vec::new());
        frame(&ctx, &mut panel, &a, Vec::new());
        assert_eq!(panel.grid.rebuilds, 5);
    }

    #[test]
    fn the_summary_names_the_counters_and_the_histogram() {
        let ir = Fixture::new(256, 256).section();
        let lines = summary_lines(&ir);
        assert!(lines[0].starts_with("grid 256×256 · 65,536 lanes · 1,024 workgroups"));
        assert!(lines[2].contains(&format!("{} escapes", count(ir.counters.escapes))));
        assert!(
            lines[3].starts_with("probes a lookup (T2): 1: "),
            "{lines:?}"
        );
    }
}
