//! The Write history window with egui_kittest: a right-click on a written-back word's address in
//! the After tab offers "Write history of 0x…"; the window lists the writes the library finds, and
//! a write's dispatch link selects that dispatch.

#![allow(missing_docs, reason = "tests")]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod common;

use common::harness;
use dispatchscope::gui;
use dispatchscope_analysis::history::WriteKind;
use dispatchscope_core::ByteRange;
use dispatchscope_formats::history::of_sample;
use dispatchscope_formats::sample::Sample;
use dispatchscope_views::{Action, Tab, style};
use egui_kittest::kittest::Queryable;
use gui::{GuiApp, Settings, embedded_samples};

#[test]
fn an_address_cell_opens_its_write_history_and_a_write_selects_its_dispatch() {
    let name = "l1-hazard.json";
    let text = embedded_samples()
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| *t)
        .unwrap();
    let sample = Sample::from_json(text).unwrap();
    let reports = sample.run().unwrap();
    let (pos, address) = reports
        .iter()
        .enumerate()
        .find_map(|(i, r)| {
            r.write_back
                .iter()
                .flat_map(|w| &w.words)
                .find(|w| w.changed())
                .map(|w| (i, w.address))
        })
        .unwrap();
    let want = of_sample(&sample, &reports, ByteRange::new(address, address + 4)).unwrap();

    let mut app = GuiApp::new(Settings::default());
    app.open_embedded(name);
    assert!(app.shared.error.is_none());
    app.apply(Action::SelectDispatch(pos));
    app.shared.settings.tab = Tab::After;
    let mut h = harness(app);
    h.run();
    let cell = style::hex(address);
    h.get_by_label(&cell).click_secondary();
    h.run();
    h.get_by_label(&style::history_menu_text(address)).click();
    // The history is made on a thread; the window's spinner repaints until it is done, so step
    // frame by frame rather than waiting for the UI to settle (a loaded machine takes longer).
    for _ in 0..400 {
        h.step();
        if h.state().history.as_ref().is_some_and(|w| !w.pending()) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let window = h.state().history.as_ref().expect("the window opened");
    assert_eq!(window.range, ByteRange::new(address, address + 4));
    let got = window.result.as_ref().unwrap().as_ref().unwrap();
    assert_eq!(got.writes, want.writes);
    h.run();
    h.get_by_label(&dispatchscope_views::history::summary(&want));
    // Select another dispatch, then click the write-back's link: it selects the write's dispatch.
    let wb = want
        .writes
        .iter()
        .find(|w| matches!(w.kind, WriteKind::WriteBack { .. }))
        .unwrap();
    let d = wb.kind.dispatch().unwrap() as usize;
    let other = if d == 0 { reports.len() - 1 } else { 0 };
    h.state_mut().apply(Action::SelectDispatch(other));
    h.run();
    h.get_by_label(&wb.kind.who()).click();
    h.run();
    assert_eq!(h.state().shared.sel.dispatch, d);
}
