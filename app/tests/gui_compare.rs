//! File ▸ Compare with… and Session ▸ What if… with egui_kittest: the dispatch lists mark exactly
//! the dispatches whose decisions changed, the Differences panel names the rule, F7 walks the
//! dispatches that differ (B's selection following its match), a session compared with itself
//! marks nothing, and a bad limit in the What if… dialog is a message in the dialog.

#![allow(missing_docs, reason = "tests")]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod common;

use common::harness;
use dispatchscope::gui;
use dispatchscope_core::{DispatchReport, Rule};
use dispatchscope_formats::generate::{GenConfig, random_sample};
use dispatchscope_formats::sample::Sample;
use dispatchscope_views::{RowMark, Tab};
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use gui::{GuiApp, Progress, Session, Settings, Source, embedded_samples};

fn shipped(name: &str) -> Sample {
    let text = embedded_samples()
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| *t)
        .unwrap();
    Sample::from_json(text).unwrap()
}

fn with_alignment(mut s: Sample, a: u64) -> Sample {
    s.device.min_storage_buffer_offset_alignment = a;
    s
}

fn session(name: &'static str, s: &Sample) -> Session {
    Session::replay(Source::Embedded(name), s, &Progress::default()).unwrap()
}

fn has_o7(r: &DispatchReport) -> bool {
    r.refusals.iter().any(|f| f.rule == Rule::O7)
}

/// Runs frames until the comparison (or what-if) has its diff.
fn settle(h: &mut Harness<'static, GuiApp>) {
    for _ in 0..1000 {
        // A spinner repaints while the thread works: step, do not wait for the frame to settle.
        h.step();
        if h.state()
            .compare
            .current
            .as_ref()
            .is_some_and(|c| !c.pending())
        {
            h.run();
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("the comparison did not finish");
}

fn differing(marks: &[RowMark]) -> Vec<usize> {
    (0..marks.len()).filter(|&p| marks[p].differs()).collect()
}

/// A and B: the same session at alignment 16 and 256.
fn compared(a: &Sample, b: &Sample) -> Harness<'static, GuiApp> {
    let mut app = GuiApp::new(Settings::default());
    app.set_session(session("a", a));
    app.compare_with_session(session("b", b), "B at 256");
    let mut h = harness(app);
    settle(&mut h);
    h
}

#[test]
fn o7_at_16_against_256_marks_exactly_the_dispatches_whose_o7_refusal_appears() {
    let base = shipped("o7-alignment.json");
    let (a, b) = (with_alignment(base.clone(), 16), with_alignment(base, 256));
    let ra = a.run().unwrap();
    let rb = b.run().unwrap();
    let want: Vec<usize> = (0..ra.len())
        .filter(|&p| !has_o7(&ra[p]) && has_o7(&rb[p]))
        .collect();
    assert!(!want.is_empty(), "the sample refuses under O7 at 256");
    let mut h = compared(&a, &b);
    let c = h.state().compare.current.as_ref().unwrap();
    assert_eq!(differing(&c.a_marks), want);
    assert_eq!(differing(&c.b_marks), want);
    let d = c.session_diff().unwrap();
    assert!(d.only_a.is_empty() && d.only_b.is_empty());
    // The Differences panel of the selected pair names O7.
    h.state_mut()
        .apply(dispatchscope_views::Action::SelectDispatch(want[0]));
    h.run();
    h.get_by_label_contains("refusal added: O7");
    h.get_by_label_contains("Refusals (");
    // B's side highlights the refusal card on the Refusals tab; A has none to highlight.
    h.state_mut().shared.settings.tab = Tab::Refusals;
    h.run();
    h.get_by_label_contains("only in B: A did not refuse this");
    // A click on the sentence shows the tab it concerns.
    h.state_mut().shared.settings.tab = Tab::After;
    h.run();
    h.get_by_label_contains("refusal added: O7").click();
    h.run();
    assert_eq!(h.state().shared.settings.tab, Tab::Refusals);
}

#[test]
fn a_session_compared_with_itself_marks_nothing() {
    let s = shipped("run305-overlap.json");
    let h = compared(&s, &s);
    let c = h.state().compare.current.as_ref().unwrap();
    assert!(c.session_diff().unwrap().is_empty());
    assert!(differing(&c.a_marks).is_empty() && differing(&c.b_marks).is_empty());
    assert_eq!(c.a_marks.len(), s.dispatches().count());
    h.get_by_label_contains("the same: no decision differs");
    assert_eq!(
        h.get_all_by_label_contains("only differing (0)").count(),
        2,
        "A's list and B's"
    );
}

/// A generated session of many dispatches, at alignment 16 and 256, where at least three
/// dispatches differ and some do not (the first such seed: the generator is deterministic).
fn generated() -> (Sample, Sample) {
    let cfg = GenConfig {
        dispatches: 40,
        ..GenConfig::default()
    };
    for seed in 1..200 {
        let base = random_sample(seed, cfg);
        let (a, b) = (with_alignment(base.clone(), 16), with_alignment(base, 256));
        let d = dispatchscope_analysis::diff::diff_sessions(&a.run().unwrap(), &b.run().unwrap());
        if d.dispatches.len() >= 3 && d.dispatches.len() < 40 {
            return (a, b);
        }
    }
    panic!("no seed makes a session where some dispatches differ at alignment 256");
}

#[test]
fn f7_jumps_to_the_next_differing_dispatch_and_b_follows_its_match() {
    let (a, b) = generated();
    let mut h = compared(&a, &b);
    let want = differing(&h.state().compare.current.as_ref().unwrap().a_marks);
    assert!(
        want.len() >= 2 && want.len() < a.dispatches().count(),
        "some dispatches differ, not all: {want:?}"
    );
    h.state_mut()
        .apply(dispatchscope_views::Action::SelectDispatch(0));
    h.run();
    let mut visited = Vec::new();
    for _ in 0..want.len() {
        h.key_press(egui::Key::F7);
        h.run();
        let cur = h.state().shared.sel.dispatch;
        visited.push(cur);
        let c = h.state().compare.current.as_ref().unwrap();
        assert_eq!(Some(c.b_sel.dispatch), c.b_of(cur), "B selects the match");
    }
    let expect: Vec<usize> = want.iter().copied().filter(|&p| p > 0).collect();
    assert_eq!(&visited[..expect.len()], &expect[..]);
    // Shift+F7 walks back.
    h.key_press_modifiers(egui::Modifiers::SHIFT, egui::Key::F7);
    h.run();
    assert_eq!(h.state().shared.sel.dispatch, expect[expect.len() - 2]);
    // "only differing" lists the differing dispatches alone.
    h.get_all_by_label_contains(&format!("only differing ({})", want.len()))
        .next()
        .unwrap()
        .click();
    h.run();
    h.get_by_label_contains(&format!(
        "{} of {} dispatches",
        want.len(),
        a.dispatches().count()
    ));
}

#[test]
fn selecting_in_b_selects_its_match_in_a() {
    let (a, b) = generated();
    let mut h = compared(&a, &b);
    let target = differing(&h.state().compare.current.as_ref().unwrap().b_marks)[2];
    let want = h
        .state()
        .compare
        .current
        .as_ref()
        .unwrap()
        .a_of(target)
        .unwrap();
    h.state_mut().select_in_b(target);
    h.run();
    assert_eq!(h.state().shared.sel.dispatch, want);
    assert_eq!(
        h.state().compare.current.as_ref().unwrap().b_sel.dispatch,
        target
    );
    // B's panel heading names the dispatch shown.
    h.get_by_label_contains(&format!("B · dispatch {target}"));
}

#[test]
fn a_bad_limit_in_the_what_if_dialog_is_its_error() {
    let mut app = GuiApp::new(Settings::default());
    app.open_embedded("o7-alignment.json");
    app.open_what_if();
    let mut h = harness(app);
    h.run();
    assert_eq!(
        h.state().compare.what_if.as_ref().unwrap().alignment,
        "0x10",
        "prefilled from the session"
    );
    h.state_mut().compare.what_if.as_mut().unwrap().alignment = "24".into();
    h.run();
    h.get_by_label("Run").click();
    h.run();
    let form = h
        .state()
        .compare
        .what_if
        .as_ref()
        .expect("the dialog stays open");
    let e = form.error.as_deref().unwrap();
    assert!(e.contains("power of two"), "{e}");
    h.get_by_label_contains("Vulkan requires a power of two");
    assert!(h.state().compare.current.is_none());
    // Not a number, and a probe bound past 32 bits: named, too.
    h.state_mut().compare.what_if.as_mut().unwrap().alignment = "0x10".into();
    h.state_mut().compare.what_if.as_mut().unwrap().probe_bound = "lots".into();
    h.run();
    h.get_by_label("Run").click();
    h.run();
    let e = h
        .state()
        .compare
        .what_if
        .as_ref()
        .unwrap()
        .error
        .clone()
        .unwrap();
    assert!(
        e.contains("probe bound") && e.contains("not a number"),
        "{e}"
    );
    h.state_mut().compare.what_if.as_mut().unwrap().probe_bound = "0x100000000".into();
    h.run();
    h.get_by_label("Run").click();
    h.run();
    let e = h
        .state()
        .compare
        .what_if
        .as_ref()
        .unwrap()
        .error
        .clone()
        .unwrap();
    assert!(e.contains("2^32"), "{e}");
}

#[test]
fn a_what_if_at_256_re_plans_and_marks_the_o7_dispatch() {
    let mut app = GuiApp::new(Settings::default());
    app.open_embedded("o7-alignment.json");
    app.open_what_if();
    app.compare.what_if.as_mut().unwrap().alignment = "256".into();
    let mut h = harness(app);
    h.run();
    h.get_by_label("Run").click();
    settle(&mut h);
    let c = h.state().compare.current.as_ref().unwrap();
    assert!(c.what_if);
    assert_eq!(differing(&c.a_marks), vec![0]);
    let d = c.session_diff().unwrap();
    assert!(
        d.notes.iter().any(|n| n.contains("re-planned")),
        "{:?}",
        d.notes
    );
    h.get_by_label_contains("refusal added: O7");
    h.get_by_label_contains("limit min_storage_buffer_offset_alignment");
}

#[test]
fn a_what_if_over_the_probe_bound_replays_and_says_why() {
    let (a, _) = generated();
    let mut app = GuiApp::new(Settings::default());
    app.set_session(session("generated", &a));
    app.open_what_if();
    app.compare.what_if.as_mut().unwrap().probe_bound = "2".into();
    let mut h = harness(app);
    h.run();
    h.get_by_label("Run").click();
    settle(&mut h);
    let c = h.state().compare.current.as_ref().unwrap();
    let d = c.session_diff().unwrap();
    assert!(
        d.notes
            .iter()
            .any(|n| n.contains("replayed whole") && n.contains("probe_bound")),
        "{:?}",
        d.notes
    );
    h.get_by_label_contains("replayed whole");
}

#[test]
fn compare_with_a_path_loads_b_on_a_thread() {
    let dir = std::env::temp_dir().join(format!("ds-gui-compare-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (a, b) = generated();
    let (pa, pb) = (dir.join("a.json"), dir.join("b.json"));
    std::fs::write(&pa, a.to_json()).unwrap();
    std::fs::write(&pb, b.to_json()).unwrap();
    let mut app = GuiApp::new(Settings::default());
    app.open_path_blocking(pa);
    assert!(app.shared.error.is_none());
    app.compare_with_path(|| {}, pb.clone());
    let mut h = harness(app);
    settle(&mut h);
    let c = h.state().compare.current.as_ref().unwrap();
    assert!(c.b.is_some());
    assert_eq!(c.b_name, pb.display().to_string());
    let ra = a.run().unwrap();
    let rb = b.run().unwrap();
    let d = dispatchscope_analysis::diff::diff_sessions(&ra, &rb);
    assert_eq!(c.session_diff().unwrap(), &d);
    // Close it from the menu's command: the lists lose their marks.
    h.state_mut().close_compare();
    h.run();
    assert!(h.state().compare.current.is_none());
    assert!(h.query_by_label_contains("only differing").is_none());
    let _ = std::fs::remove_dir_all(&dir);
}
