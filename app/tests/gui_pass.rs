//! The Pass tab in the window: a session whose dispatch carries an instrumented section (the
//! ray-traversal sample's reports, the first given `dispatchscope_views`' generated 1080p pass)
//! shows the tab with its count, the sites, the escape log's not-logged line and the grid
//! picture; Ctrl+I opens it; a dispatch without a section has no Pass tab.
//!
//! The window is the app library's (`dispatchscope::gui`); the harness is `common`'s.

#![allow(missing_docs, reason = "tests")]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod common;

use common::harness;
use dispatchscope::gui;
use dispatchscope_formats::sample::Sample;
use dispatchscope_views::Tab;
use dispatchscope_views::instrumented::escape_log::not_logged_escapes;
use dispatchscope_views::instrumented::fixture::Fixture;
use egui::{Key, Modifiers};
use egui_kittest::kittest::Queryable;
use gui::{GuiApp, Settings, embedded_samples};

fn session() -> gui::Session {
    let text = embedded_samples()
        .iter()
        .find(|(n, _)| *n == "ray-traversal.json")
        .map(|(_, t)| *t)
        .unwrap();
    let mut reports = Sample::from_json(text).unwrap().run().unwrap();
    assert!(reports.len() >= 2, "the sample has a second dispatch");
    assert!(reports.iter().all(|r| r.instrumented.is_none()));
    reports[0].instrumented = Some(Fixture::new(1920, 1080).section());
    gui::Session::from_reports(
        gui::Source::Embedded("ray-traversal.json"),
        "ray traversal, instrumented".into(),
        reports,
        Vec::new(),
    )
}

#[test]
fn the_pass_tab_shows_the_sites_and_what_was_not_logged() {
    let s = session();
    let ir = s.reports.get(0).unwrap().instrumented.clone().unwrap();
    assert!(ir.escapes_not_logged > 0);
    let mut app = GuiApp::new(Settings::default());
    app.set_session(s);
    let mut h = harness(app);
    h.run();
    let title = format!("Pass ({})", ir.counters.escapes);
    h.get_by_label(&title).click();
    h.run();
    h.run();
    assert_eq!(h.state().shared.settings.tab, Tab::Pass);
    // The sites table, most escapes first: the node reads', then the instance read's pc (the
    // table is virtualised, so rows below its fold are not drawn).
    use dispatchscope_views::instrumented::fixture::{ESCAPING_SITE, NODE_SITE};
    for site in [NODE_SITE, ESCAPING_SITE] {
        // In the sites table, and in the escape log's rows too.
        let pc = format!("{:#x}", ir.sites[site as usize].pc);
        assert!(h.query_all_by_label(&pc).count() >= 2, "{pc}");
    }
    let shown = ir
        .sites
        .iter()
        .filter(|s| {
            h.query_all_by_label(&format!("{:#x}", s.pc))
                .next()
                .is_some()
        })
        .count();
    assert!(shown >= 3, "{shown} sites shown");
    h.get_by_label(&not_logged_escapes(ir.escapes_not_logged));
    h.get_by_label("Sites");
    h.get_by_label("Escape log");
    h.get_by_label_contains("every escape placed");
}

#[test]
fn ctrl_i_opens_the_tab_and_a_plain_dispatch_has_none() {
    let mut app = GuiApp::new(Settings::default());
    app.set_session(session());
    let mut h = harness(app);
    h.run();
    h.key_press_modifiers(Modifiers::COMMAND, Key::I);
    h.run();
    h.run();
    assert_eq!(h.state().shared.settings.tab, Tab::Pass);
    h.get_by_label("Sites");
    // The second dispatch has no section: no Pass tab, and the tab says why.
    h.get_by_label("Next").click();
    h.run();
    h.run();
    assert_eq!(h.state().shared.sel.dispatch, 1);
    assert!(h.query_by_label_contains("Pass (").is_none());
    h.get_by_label_contains("no instrumented section");
}
