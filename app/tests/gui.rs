//! GUI tests with egui_kittest: open every shipped sample, step through dispatches with the
//! toolbar and the keys, select a slot and see it in the other panels, open a refusal card, open
//! bad files; and a few image snapshots of the main panels (`UPDATE_SNAPSHOTS=1` to create them).
//!
//! The window is the app library's (`dispatchscope::gui`); the harness is `common`'s.

#![allow(missing_docs, reason = "tests")]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod common;

use common::harness;
use dispatchscope::gui;
use dispatchscope_formats::sample::Sample;
use dispatchscope_views::Tab;
use egui::{Key, Modifiers};
use egui_kittest::kittest::{self, Queryable};
use gui::{GuiApp, Settings, embedded_samples};

fn app_with(name: &str) -> GuiApp {
    let mut app = GuiApp::new(Settings::default());
    app.open_embedded(name);
    assert!(app.shared.error.is_none(), "{name}: {:?}", app.shared.error);
    app
}

/// Opens the sample, checks the session's reports equal the engine's own run, then steps through
/// every dispatch and every tab with the toolbar.
fn check_sample_opens(name: &str) {
    let text = embedded_samples()
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| *t)
        .unwrap();
    let expected = Sample::from_json(text).unwrap().run().unwrap();
    let app = app_with(name);
    let session = app.shared.session.as_ref().unwrap();
    assert_eq!(
        session.reports.in_memory_reports(),
        expected.as_slice(),
        "{name}: the session's replay differs from Sample::run"
    );
    assert_eq!(session.tables_in_memory().len(), expected.len());
    let n = expected.len();
    let mut h = harness(app);
    h.run();
    for (pos, report) in expected.iter().enumerate() {
        assert_eq!(h.state().shared.sel.dispatch, pos);
        h.get_by_label(&format!("dispatch {}", report.index));
        for t in Tab::ALL {
            h.state_mut().shared.settings.tab = t;
            h.run();
        }
        if pos + 1 < n {
            h.get_by_label("Next").click();
            h.run();
        }
    }
}

/// One test per shipped sample: it opens and every dispatch and tab draws.
mod opens {
    dispatchscope_formats::shipped_sample_tests!(super::check_sample_opens);
}

#[test]
fn with_no_arguments_the_default_is_run_305() {
    assert_eq!(gui::default_sample(), Some("run305-overlap.json"));
    assert!(
        embedded_samples().len() >= 10,
        "every shipped sample is built in"
    );
}

#[test]
fn next_and_previous_step_and_the_status_bar_follows() {
    let mut h = harness(app_with("generations-revisits.json"));
    h.run();
    h.get_by_label("dispatch 0");
    h.get_by_label("Next").click();
    h.run();
    assert_eq!(h.state().shared.sel.dispatch, 1);
    h.get_by_label("dispatch 1");
    h.get_by_label("Next").click();
    h.run();
    h.get_by_label("Previous").click();
    h.run();
    assert_eq!(h.state().shared.sel.dispatch, 1);
    // F10 and Shift+F10.
    h.key_press(Key::F10);
    h.run();
    assert_eq!(h.state().shared.sel.dispatch, 2);
    h.key_press_modifiers(Modifiers::SHIFT, Key::F10);
    h.run();
    assert_eq!(h.state().shared.sel.dispatch, 1);
    h.get_by_label("Last").click();
    h.run();
    let last = h.state().shared.session.as_ref().unwrap().reports.len() - 1;
    assert_eq!(h.state().shared.sel.dispatch, last);
    h.get_by_label("First").click();
    h.run();
    assert_eq!(h.state().shared.sel.dispatch, 0);
}

#[test]
fn selecting_a_dispatch_in_the_table() {
    let mut h = harness(app_with("generations-revisits.json"));
    h.run();
    let reports = h
        .state()
        .shared
        .session
        .as_ref()
        .unwrap()
        .reports
        .in_memory_reports()
        .to_vec();
    // A dispatch other than the current one whose label no other dispatch has: its table cell is
    // the only widget with that text.
    let target = (1..reports.len())
        .find(|&p| {
            !reports[p].label.is_empty()
                && reports
                    .iter()
                    .filter(|r| r.label == reports[p].label)
                    .count()
                    == 1
        })
        .expect("a dispatch with a label of its own");
    h.get_by_label(&reports[target].label).click();
    h.run();
    assert_eq!(h.state().shared.sel.dispatch, target);
    h.get_by_label(&format!("dispatch {}", reports[target].index));
}

#[test]
fn selecting_a_slot_shows_in_the_other_panels() {
    let mut h = harness(app_with("run305-overlap.json"));
    h.run();
    let r = &h
        .state()
        .shared
        .session
        .as_ref()
        .unwrap()
        .reports
        .in_memory_reports()[0];
    let set = r.sets.first().expect("run 305's overlap makes a set");
    let member = set.members[0].slot;
    let holder = set.holder;
    // The slot table's label (the sets section links the same text).
    h.get_all_by_label(&format!("slot {member}"))
        .next()
        .unwrap()
        .click();
    h.run();
    assert_eq!(h.state().shared.sel.slot, Some(member));
    h.get_by_label(&format!("selected slot {member}"));
    // Accesses: the accesses through its bytes are counted and can be listed alone.
    h.state_mut().shared.settings.tab = Tab::Accesses;
    h.run();
    h.get_by_label_contains(&format!("slot {member} selected:"));
    // After the dispatch: its holder's write-back says it holds the selected slot.
    h.state_mut().shared.settings.tab = Tab::After;
    h.run();
    h.get_by_label(&format!(
        "holder slot {holder} holds the selected slot {member}"
    ));
    // Clicking it again clears the selection.
    h.state_mut().shared.settings.tab = Tab::Bindings;
    h.run();
    h.get_all_by_label(&format!("slot {member}"))
        .next()
        .unwrap()
        .click();
    h.run();
    assert_eq!(h.state().shared.sel.slot, None);
}

#[test]
fn a_refusal_card_names_its_rule() {
    let mut h = harness(app_with("d961-page-buffer.json"));
    h.run();
    h.get_by_label("Next refusal").click();
    h.run();
    let pos = h.state().shared.sel.dispatch;
    let refusal = h
        .state()
        .shared
        .session
        .as_ref()
        .unwrap()
        .reports
        .in_memory_reports()[pos]
        .refusals[0]
        .clone();
    assert_eq!(refusal.rule.id(), "O11");
    h.get_by_label_contains("Refusals").click();
    h.run();
    let title = dispatchscope_views::refusals::card_title(&refusal);
    h.get_by_label(&title).click();
    h.run();
    h.get_by_label(&format!(
        "Rule O11 ({}): page buffer",
        refusal.rule.decision()
    ));
    h.get_by_label(refusal.rule.text());
    h.get_by_label(&refusal.would_run_if);
}

#[test]
fn next_escape_and_the_escape_card() {
    let mut h = harness(app_with("run335-readable-run.json"));
    h.run();
    let has_escape = h
        .state()
        .shared
        .session
        .as_ref()
        .unwrap()
        .rows
        .iter()
        .any(|r| r.counts.escapes > 0);
    assert!(has_escape, "run 335 shows an escape");
    h.key_press(Key::F9);
    h.run();
    let pos = h.state().shared.sel.dispatch;
    let r = h
        .state()
        .shared
        .session
        .as_ref()
        .unwrap()
        .reports
        .in_memory_reports()[pos]
        .clone();
    assert!(!r.escapes.is_empty());
    let e = r.escapes[0].clone();
    h.state_mut().shared.settings.tab = Tab::Accesses;
    h.state_mut().shared.sel.access = Some(e.access);
    h.run();
    h.get_by_label_contains(&format!("Escape: {}", e.class.as_str()));
    h.get_by_label_contains("nearest mapping below");
    h.get_by_label_contains("nearest mapping above");
    // The chunk table shows the same lookup, probe by probe.
    h.state_mut().shared.settings.tab = Tab::ChunkTable;
    h.run();
    h.get_by_label(&format!("showing the lookups of access {}", e.access));
    // Memory: the reservations as the dispatch left them, with the pieces M3 leaves out.
    h.state_mut().shared.settings.tab = Tab::Memory;
    h.run();
    h.get_by_label("Reservations, as this dispatch left them");
    assert!(h.query_all_by_label_contains("not private").count() > 0);
}

#[test]
fn a_typed_address_is_traced_on_the_table() {
    let mut h = harness(app_with("ray-traversal.json"));
    h.state_mut().shared.settings.tab = Tab::ChunkTable;
    h.run();
    let r = h
        .state()
        .shared
        .session
        .as_ref()
        .unwrap()
        .reports
        .in_memory_reports()[0]
        .clone();
    let addr = r
        .accesses
        .iter()
        .find_map(|a| {
            a.device_address.and(match a.route {
                dispatchscope_core::report::Route::Device { address } => Some(address),
                _ => None,
            })
        })
        .expect("a device-addressed access");
    h.get_by_label("Trace address").click();
    h.run();
    h.get_by_label("Trace address")
        .type_text(&format!("{addr:#x}"));
    h.run();
    h.get_by_label("Trace").click();
    h.run();
    h.get_by_label(&format!("showing the lookup of {addr:#x}"));
    h.get_by_label_contains("hit at slot");
}

#[test]
fn bookmarks_and_keys() {
    let mut h = harness(app_with("generations-revisits.json"));
    h.run();
    h.key_press(Key::F10);
    h.run();
    h.key_press(Key::F10);
    h.run();
    h.key_press_modifiers(Modifiers::COMMAND, Key::B);
    h.run();
    assert_eq!(h.state().bookmarks(), vec![2]);
    h.get_by_label("Remove bookmark");
    h.key_press_modifiers(Modifiers::COMMAND, Key::Home);
    h.run();
    assert_eq!(h.state().shared.sel.dispatch, 0);
    h.key_press_modifiers(Modifiers::COMMAND, Key::Num1);
    h.run();
    assert_eq!(h.state().shared.sel.dispatch, 2);
    h.key_press(Key::F1);
    h.run();
    h.get_by_label("list the keys");
    h.get_by_label("go to dispatch N");
    // Ctrl+G, type 4, Enter.
    h.key_press_modifiers(Modifiers::COMMAND, Key::G);
    h.run();
    h.get_by_label("Dispatch").type_text("4");
    h.run();
    h.get_by_label("Jump").click();
    h.run();
    assert_eq!(h.state().shared.sel.dispatch, 4);
}

#[test]
fn a_bad_file_shows_where_and_keeps_the_session() {
    let dir = std::env::temp_dir().join(format!("dispatchscope-gui-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.json");
    let good = embedded_samples()
        .iter()
        .find(|(n, _)| *n == "run305-overlap.json")
        .unwrap()
        .1;
    // Break a value deep inside: a size that is not a number.
    let broken = good.replacen("\"size_bytes\": \"0x", "\"size_bytes\": \"zz", 1);
    assert_ne!(broken, good);
    std::fs::write(&bad, &broken).unwrap();
    let mut app = app_with("run305-overlap.json");
    app.open_path_blocking(bad.clone());
    let e = app.shared.error.clone().expect("an error");
    assert!(e.source.contains("bad.json"));
    let (line, column, text) = e.at.clone().expect("a line and column");
    assert!(line > 1 && column > 1, "{e:?}");
    // The line is the step's: core reads a step through serde_json::Value, so the position of
    // the value inside it is lost (the path and message still name it).
    assert!(!text.trim().is_empty(), "{e:?}");
    assert!(
        e.message.contains("zze40f"),
        "the bad value is named: {}",
        e.message
    );
    assert!(
        e.message.contains("size_bytes"),
        "the JSON path is named: {}",
        e.message
    );
    assert!(app.shared.session.is_some(), "the open session stays");
    let mut h = harness(app);
    h.run();
    h.get_by_label_contains("Could not open");
    h.get_by_label("The session already open is unchanged.");
    h.get_by_label("Next").click();
    h.run();
    assert_eq!(h.state().shared.sel.dispatch, 1);
    h.get_by_label("Dismiss").click();
    h.run();
    assert!(h.state().shared.error.is_none());

    // A capture whose header is bad: the error panel names the file and what.
    let cap = dir.join("session.dscap");
    std::fs::write(&cap, b"DSCAPTUR\x01\x00\x00\x00rest").unwrap();
    h.state_mut().open_path_blocking(cap);
    let e = h.state().shared.error.clone().unwrap();
    assert!(e.message.starts_with("bad capture"), "{}", e.message);
    assert!(e.source.contains("session.dscap"), "{e:?}");
    // A missing file.
    h.state_mut().open_path_blocking(dir.join("missing.json"));
    assert!(
        h.state()
            .shared
            .error
            .as_ref()
            .unwrap()
            .message
            .contains("could not read")
    );
    assert!(h.state().shared.session.is_some());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn recent_files_are_remembered() {
    let dir = std::env::temp_dir().join(format!("dispatchscope-gui-recent-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("copy.json");
    let text = embedded_samples()
        .iter()
        .find(|(n, _)| *n == "l1-hazard.json")
        .unwrap()
        .1;
    std::fs::write(&p, text).unwrap();
    let mut app = GuiApp::new(Settings::default());
    app.open_path_blocking(p.clone());
    assert!(app.shared.error.is_none(), "{:?}", app.shared.error);
    assert_eq!(
        app.shared.settings.recent,
        vec![std::fs::canonicalize(&p).unwrap()]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_background_loader_opens_a_file() {
    let dir = std::env::temp_dir().join(format!("dispatchscope-gui-loader-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("copy.json");
    let text = embedded_samples()
        .iter()
        .find(|(n, _)| *n == "ray-traversal.json")
        .unwrap()
        .1;
    std::fs::write(&p, text).unwrap();
    let mut h = harness(GuiApp::new(Settings::default()));
    h.run();
    let ctx = h.ctx.clone();
    h.state_mut().open_path(&ctx, p.clone());
    for _ in 0..200 {
        h.step();
        if h.state().shared.session.is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(
        h.state().shared.session.is_some(),
        "loaded: {:?}",
        h.state().shared.error
    );
    let _ = std::fs::remove_dir_all(&dir);
}

// Image snapshots: few, of the main panels.

#[test]
fn snapshot_bindings_run305() {
    let mut app = app_with("run305-overlap.json");
    app.shared.sel.slot = Some(1);
    let mut h = harness(app);
    h.run();
    h.snapshot("bindings_run305_overlap");
}

#[test]
fn snapshot_chunk_table_ray_traversal() {
    let mut app = app_with("ray-traversal.json");
    app.shared.settings.tab = Tab::ChunkTable;
    // An escaped access: its lookup's probes are outlined on the grid.
    let r = &app
        .shared
        .session
        .as_ref()
        .unwrap()
        .reports
        .in_memory_reports()[0];
    app.shared.sel.access = Some(r.escapes[0].access);
    let mut h = harness(app);
    h.run();
    h.snapshot("chunk_table_ray_traversal");
}

#[test]
fn snapshot_refusal_card_w2() {
    let mut app = app_with("w2-format-store.json");
    app.shared.settings.tab = Tab::Refusals;
    let mut h = harness(app);
    h.run();
    h.get_by_label("Next refusal").click();
    h.run();
    let r = h
        .state()
        .shared
        .session
        .as_ref()
        .unwrap()
        .reports
        .in_memory_reports()[h.state().shared.sel.dispatch]
        .refusals[0]
        .clone();
    h.get_by_label(&dispatchscope_views::refusals::card_title(&r))
        .click();
    h.run();
    h.remove_cursor();
    h.run();
    h.snapshot("refusal_w2_format_store");
}

#[derive(Debug)]
struct DroppedPath(std::path::PathBuf);

impl egui::DroppedFile for DroppedPath {
    fn path(&self) -> &std::path::Path {
        &self.0
    }

    fn bytes(&self) -> Result<Vec<u8>, String> {
        std::fs::read(&self.0).map_err(|e| e.to_string())
    }
}

#[test]
fn a_dropped_file_opens() {
    let dir = std::env::temp_dir().join(format!("dispatchscope-gui-drop-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("dropped.json");
    let text = embedded_samples()
        .iter()
        .find(|(n, _)| *n == "l1-hazard.json")
        .unwrap()
        .1;
    std::fs::write(&p, text).unwrap();
    let mut h = harness(app_with("run305-overlap.json"));
    h.run();
    h.input_mut()
        .dropped_files
        .push(std::sync::Arc::new(DroppedPath(p.clone())));
    for _ in 0..200 {
        h.step();
        let opened = h
            .state()
            .shared
            .session
            .as_ref()
            .is_some_and(|s| s.source == gui::Source::File(p.clone()));
        if opened {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let s = h.state().shared.session.as_ref().unwrap();
    assert_eq!(
        s.source,
        gui::Source::File(p.clone()),
        "{:?}",
        h.state().shared.error
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn write_run305_capture(dir: &std::path::Path) -> (std::path::PathBuf, usize) {
    let text = embedded_samples()
        .iter()
        .find(|(n, _)| *n == "run305-overlap.json")
        .unwrap()
        .1;
    let sample = Sample::from_json(text).unwrap();
    let reports = sample.run().unwrap();
    let p = dir.join("run305.dscap");
    dispatchscope_formats::session::write_capture(&sample, Some(&reports), &p).unwrap();
    (p, reports.len())
}

#[test]
fn a_capture_opens_and_replays() {
    let dir = tempfile::tempdir().unwrap();
    let (p, n) = write_run305_capture(dir.path());
    let mut app = GuiApp::new(Settings::default());
    app.open_path_blocking(p.clone());
    assert!(app.shared.error.is_none(), "{:?}", app.shared.error);
    let s = app.shared.session.as_ref().unwrap();
    assert_eq!(s.reports.len(), n);
    assert!(s.warning.is_none());
    let expected = app_with("run305-overlap.json")
        .shared
        .session
        .unwrap()
        .reports
        .in_memory_reports()
        .to_vec();
    assert_eq!(
        s.reports.in_memory_reports(),
        expected.as_slice(),
        "a capture replays as its sample does"
    );
    let mut h = harness(app);
    h.run();
    h.get_by_label("Next").click();
    h.run();
    assert_eq!(h.state().shared.sel.dispatch, 1);
}

#[test]
fn a_torn_capture_opens_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let (p, n) = write_run305_capture(dir.path());
    let bytes = std::fs::read(&p).unwrap();
    // Cut it well inside the records: the trailer and index go, and so does the last record.
    let torn = dir.path().join("torn.dscap");
    let cut = bytes.len() - bytes.len() / 4;
    std::fs::write(&torn, &bytes[..cut]).unwrap();
    let mut app = GuiApp::new(Settings::default());
    app.open_path_blocking(torn);
    assert!(
        app.shared.error.is_none(),
        "a torn tail is not an error: {:?}",
        app.shared.error
    );
    let s = app.shared.session.as_ref().unwrap();
    let w = s.warning.clone().expect("a warning");
    assert!(w.contains("torn at byte"), "{w}");
    assert!(s.reports.len() < n, "{} of {n}", s.reports.len());
    let mut h = harness(app);
    h.run();
    h.get_by_label("Warning");
    h.get_by_label_contains("torn at byte");
    assert!(h.state().shared.error.is_none());
}

#[test]
fn a_capture_with_a_bad_record_names_its_offset() {
    use dispatchscope_formats::capture::{CaptureWriter, RecordKind};
    use dispatchscope_formats::session::{CAPTURE_FORMAT, CaptureMeta};
    let dir = tempfile::tempdir().unwrap();
    let text = embedded_samples()
        .iter()
        .find(|(n, _)| *n == "run305-overlap.json")
        .unwrap()
        .1;
    let sample = Sample::from_json(text).unwrap();
    let meta = CaptureMeta {
        format: CAPTURE_FORMAT.into(),
        sample_version: sample.version,
        title: "bad".into(),
        description: String::new(),
        provenance: sample.provenance.clone(),
        device: sample.device.clone(),
        programs: Vec::new(),
    };
    let bad = dir.path().join("bad.dscap");
    let mut w = CaptureWriter::create(&bad, &serde_json::to_vec(&meta).unwrap()).unwrap();
    w.append(RecordKind::DISPATCH, b"{\"not\": \"a dispatch\"}", false)
        .unwrap();
    w.finish().unwrap();
    let mut app = app_with("l1-hazard.json");
    app.open_path_blocking(bad);
    let e = app.shared.error.clone().expect("an error");
    assert!(e.source.contains("bad.dscap"), "{e:?}");
    assert!(e.message.starts_with("bad capture"), "{e:?}");
    assert!(e.message.contains("DISPATCH"), "{e:?}");
    let offset = e.offset_bytes.expect("the record's offset");
    assert!(offset > 8, "{e:?}");
    assert!(
        app.shared.session.is_some(),
        "the session open before stays"
    );
    let mut h = harness(app);
    h.run();
    h.get_by_label_contains("Could not open");
    h.get_by_label(&format!("at byte {offset:#x} ({offset}) of the file"));
}

/// Writes `name` as a capture with checkpoints of engine state (what `generate` and `convert`
/// write), returning its path and the in-memory replay to compare against.
fn write_checkpointed(dir: &std::path::Path, name: &str) -> (std::path::PathBuf, gui::Session) {
    let text = embedded_samples()
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap()
        .1;
    let sample = Sample::from_json(text).unwrap();
    let p = dir.join(name.replace(".json", ".dscap"));
    let written =
        dispatchscope_formats::checkpoint::write_replayed_capture(&sample, &p, |_| {}).unwrap();
    assert!(written.memory_states > 0);
    let replayed = gui::Session::replay(
        gui::Source::Embedded("x"),
        &sample,
        &gui::Progress::default(),
    )
    .unwrap();
    (p, replayed)
}

/// A capture with checkpoints opens through its index (nothing replayed): every dispatch's
/// report, memory view and chunk table, read when it is selected, are what the replay makes.
#[test]
fn a_checkpointed_capture_opens_through_its_index() {
    let dir = tempfile::tempdir().unwrap();
    for name in [
        "ray-traversal.json",
        "generations-revisits.json",
        "run305-overlap.json",
    ] {
        let (p, replayed) = write_checkpointed(dir.path(), name);
        let mut app = GuiApp::new(Settings::default());
        app.open_path_blocking(p);
        assert!(app.shared.error.is_none(), "{name}: {:?}", app.shared.error);
        let expected = replayed.reports.in_memory_reports().to_vec();
        {
            let s = app.shared.session.as_ref().unwrap();
            assert!(s.reports.on_disk(), "{name}: read through the index");
            assert!(s.reports.in_memory_reports().is_empty(), "nothing replayed");
            assert_eq!(s.reports.len(), expected.len());
            assert_eq!(s.rows, replayed.rows, "{name}: the rows");
            assert!(s.state_note.is_none());
        }
        // Backwards, so that each selection reads again.
        for pos in (0..expected.len()).rev() {
            app.apply(dispatchscope_views::Action::SelectDispatch(pos));
            assert_eq!(app.shared.sel.dispatch, pos);
            let s = app.shared.session.as_ref().unwrap();
            assert_eq!(
                s.reports.get(pos),
                Some(&expected[pos]),
                "{name} dispatch {pos}"
            );
            assert_eq!(s.memory(pos), replayed.memory(pos), "{name} memory {pos}");
            match (s.table(pos), replayed.table(pos)) {
                (None, None) => {}
                (Some(a), Some(b)) => {
                    assert_eq!(a.table.slots(), b.table.slots(), "{name} table {pos}");
                    assert_eq!(a.table.multiplier(), b.table.multiplier());
                    assert_eq!(a.probe_histogram, b.probe_histogram);
                }
                (a, b) => panic!(
                    "{name} table {pos}: {:?} against {:?}",
                    a.is_some(),
                    b.is_some()
                ),
            }
        }
        // And it draws, every tab, at the window's size.
        let mut h = harness(app);
        h.run();
        for t in Tab::ALL {
            h.state_mut().shared.settings.tab = t;
            h.run();
        }
        h.get_by_label("Last").click();
        h.run();
        h.get_by_label(&format!("dispatch {}", expected.last().unwrap().index));
    }
}

/// A bad DISPATCH record in the middle of a checkpointed capture: opening works, selecting it
/// names the record in the error panel and keeps the session.
#[test]
fn a_bad_record_read_on_demand_is_named() {
    use dispatchscope_formats::capture::{CaptureReader, CaptureWriter, RecordKind};
    let dir = tempfile::tempdir().unwrap();
    let (good, replayed) = write_checkpointed(dir.path(), "generations-revisits.json");
    let n = replayed.reports.len();
    assert!(n >= 3);
    // Copy it record by record, spoiling dispatch 2's payload.
    let mut r = CaptureReader::open(&good).unwrap();
    let bad = dir.path().join("bad.dscap");
    let mut w = CaptureWriter::create(&bad, r.header_payload()).unwrap();
    let metas = r.records().to_vec();
    let mut d = 0;
    for (i, m) in metas.iter().enumerate() {
        let mut bytes = r.read_record(i).unwrap();
        if m.kind == RecordKind::DISPATCH {
            if d == 2 {
                bytes = b"{\"not\": \"a dispatch\"}".to_vec();
            }
            d += 1;
        }
        w.append(m.kind, &bytes, true).unwrap();
    }
    w.finish().unwrap();
    let mut app = GuiApp::new(Settings::default());
    app.open_path_blocking(bad);
    assert!(app.shared.error.is_none(), "{:?}", app.shared.error);
    let s = app.shared.session.as_ref().unwrap();
    assert_eq!(s.rows.len(), 2, "the list stops at the bad record");
    assert!(
        s.warning.as_ref().unwrap().contains("DISPATCH"),
        "{:?}",
        s.warning
    );
    app.apply(dispatchscope_views::Action::SelectDispatch(2));
    let e = app.shared.error.clone().expect("an error");
    assert!(
        e.message.starts_with("bad capture") && e.message.contains("DISPATCH"),
        "{e:?}"
    );
    assert!(e.offset_bytes.is_some());
    let mut h = harness(app);
    h.run();
    h.get_by_label_contains("Could not open");
    h.get_by_label_contains("could not be read");
    h.get_by_label("First").click();
    h.run();
    assert_eq!(h.state().shared.sel.dispatch, 0);
}

/// The timeline: one bar per frame (frames end at retire events); a click on a bar selects the
/// first dispatch of its frame.
#[test]
fn a_click_on_the_timeline_selects_a_frame() {
    use dispatchscope_core::input::Event;
    use dispatchscope_core::report::EventReport;
    let app = app_with("generations-revisits.json");
    let reports = app
        .shared
        .session
        .as_ref()
        .unwrap()
        .reports
        .in_memory_reports()
        .to_vec();
    // Ten frames (a bar a frame takes eight or more): the sample's dispatches again and again,
    // a retire before every third.
    let mut reports: Vec<_> = reports.iter().cycle().take(30).cloned().collect();
    for (i, r) in reports.iter_mut().enumerate() {
        r.index = i as u64;
        if i > 0 && i % 3 == 0 {
            r.events_before.push(EventReport {
                index: 1000 + i as u64,
                event: Event::Retire,
                generation_moved: false,
                waited_for: None,
                effects: Vec::new(),
            });
        }
    }
    let n = reports.len();
    let session = gui::Session::from_reports(
        gui::Source::Embedded("frames"),
        "frames".into(),
        reports,
        Vec::new(),
    );
    let frames: Vec<u64> = session.rows.iter().map(|r| r.frame).collect();
    assert_eq!(frames.first(), Some(&0));
    assert_eq!(*frames.last().unwrap(), ((n - 1) / 3) as u64);
    let starts: Vec<usize> = (0..n).filter(|p| p % 3 == 0).collect();
    let mut app = GuiApp::new(Settings::default());
    app.set_session(session);
    let mut h = harness(app);
    h.run();
    let title = h.get_by_label("Timeline").rect();
    let mut picked = std::collections::BTreeSet::new();
    for frac in [0.15, 0.35, 0.55, 0.75, 0.95] {
        let pos = egui::pos2(
            title.left() + (1280.0 - title.left()) * frac,
            title.bottom() + 40.0,
        );
        h.hover_at(pos);
        h.run();
        h.drag_at(pos);
        h.run();
        h.drop_at(pos);
        h.run();
        picked.insert(h.state().shared.sel.dispatch);
    }
    assert!(
        picked.len() >= 2,
        "clicks at different frames select different dispatches: {picked:?}"
    );
    // Each is its frame's first dispatch, or its first refused or escaped one (a click on that
    // part of the bar).
    let rows: Vec<_> = h
        .state()
        .shared
        .session
        .as_ref()
        .unwrap()
        .rows
        .iter()
        .collect();
    for &p in &picked {
        let start = *starts.iter().rev().find(|&&s| s <= p).unwrap();
        let first_with = |f: &dyn Fn(&dispatchscope_views::DispatchRow) -> bool| {
            (start..n)
                .take_while(|&q| rows[q].frame == rows[start].frame)
                .find(|&q| f(&rows[q]))
        };
        assert!(
            p == start
                || Some(p) == first_with(&|r| r.counts.refusals > 0)
                || Some(p) == first_with(&|r| r.counts.escapes > 0),
            "{p} is the first dispatch of its frame, or its first refused or escaped ({starts:?})"
        );
    }
}

/// An address in the accesses table is one line at the narrow window width (1250 points): it
/// never wraps in the middle.
#[test]
fn addresses_do_not_wrap_at_1250_points() {
    let mut app = app_with("ray-traversal.json");
    app.shared.settings.tab = Tab::Accesses;
    let mut h = egui_kittest::Harness::builder()
        .with_size(egui::vec2(1250.0, 800.0))
        .with_context_setup(dispatchscope_views::style::install_fonts)
        .build_ui_state(|ui, app: &mut GuiApp| app.ui(ui), app);
    h.run();
    h.run();
    let mut n = 0;
    for node in h.query_all_by_label_contains("0x") {
        let ak = kittest::NodeT::accesskit_node(&node);
        let label = ak.value().or(ak.label()).unwrap_or_default();
        let is_address = label.len() >= 10
            && label.starts_with("0x")
            && label[2..].chars().all(|c| c.is_ascii_hexdigit());
        if !is_address {
            continue;
        }
        n += 1;
        let r = node.rect();
        assert!(
            r.height() < 22.0,
            "{label} takes {} points of height: wrapped",
            r.height()
        );
    }
    assert!(n > 5, "the table shows addresses ({n})");
}

/// A label the list cuts short (its column is narrower than the text) shows whole on hover: the
/// tooltip is the only other place dispatch 1's label is written.
#[test]
fn a_label_cut_short_shows_whole_on_hover() {
    let app = app_with("run305-overlap.json");
    let label = app
        .shared
        .session
        .as_ref()
        .unwrap()
        .reports
        .get(1)
        .unwrap()
        .label
        .clone();
    let mut h = harness(app);
    h.run();
    let whole = |h: &egui_kittest::Harness<'_, GuiApp>| h.query_all_by_label(&label).count();
    let before = whole(&h);
    // Dispatch 1's row: at its label, and anywhere else on the row (a label past the list's
    // edge, scrolled out of view, is read there).
    let program = h.get_by_label("0x400003e1ac00").rect();
    let list = h.get_by_label("label").rect();
    for x in [list.left() + 20.0, program.center().x] {
        h.hover_at(egui::pos2(x, program.center().y));
        h.run_steps(60);
        assert_eq!(
            whole(&h),
            before + 1,
            "the tooltip at x {x} shows {label:?}"
        );
        h.hover_at(egui::pos2(900.0, 500.0));
        h.run_steps(10);
    }
    // Away from it, the tooltip goes.
    h.hover_at(egui::pos2(900.0, 500.0));
    h.run_steps(10);
    assert_eq!(whole(&h), before);
}

/// Every window speaks in actions and the app applies them in one place: each `AppAction` lands
/// where it should (a window opened, the selection moved, a message shown or dismissed), and a
/// menu item clicked reaches `apply` the same way.
#[test]
fn actions_from_windows_are_applied_in_one_place() {
    use dispatchscope_views::keys::Command;
    use gui::{AppAction, SaveKind};
    let mut app = app_with("generations-revisits.json");
    let n = app.shared.n_dispatches();
    assert!(n > 2);
    // A panel's action, and a key's command.
    app.apply(AppAction::Panel(
        dispatchscope_views::Action::SelectDispatch(2),
    ));
    assert_eq!(app.shared.sel.dispatch, 2);
    app.apply(AppAction::Command(Command::Previous));
    assert_eq!(app.shared.sel.dispatch, 1);
    app.apply(dispatchscope_views::Action::ShowTab(Tab::Memory));
    assert_eq!(app.shared.settings.tab, Tab::Memory);
    // Go to by report index; one that is not there is the error panel's.
    let last = app
        .shared
        .session
        .as_ref()
        .unwrap()
        .rows
        .index(n - 1)
        .unwrap();
    app.apply(AppAction::GoTo(last));
    assert_eq!(app.shared.sel.dispatch, n - 1);
    app.apply(AppAction::GoTo(u64::MAX));
    assert!(
        app.shared
            .error
            .as_ref()
            .unwrap()
            .message
            .contains("no dispatch")
    );
    app.apply(AppAction::DismissError);
    assert!(app.shared.error.is_none());
    // Windows open where they live.
    app.apply(AppAction::Command(Command::GoTo));
    assert_eq!(app.dialogs.goto.as_deref(), Some(""));
    app.apply(AppAction::OpenAttach);
    assert!(app.live_windows.attach_form.is_some());
    app.apply(AppAction::OpenBreakpoints);
    assert!(app.live_windows.show_breakpoints);
    app.apply(AppAction::OpenSave(SaveKind::Capture));
    assert_eq!(
        app.live_windows.save_form.as_ref().map(|(k, _)| *k),
        Some(SaveKind::Capture)
    );
    app.apply(AppAction::SetListing(true));
    assert!(app.listing.open);
    app.apply(AppAction::OpenWhatIf);
    assert!(app.compare.what_if.is_some());
    app.apply(AppAction::Notice("hello".into()));
    assert_eq!(app.shared.notice.as_deref(), Some("hello"));
    app.apply(AppAction::DismissNotice);
    assert!(app.shared.notice.is_none());
    // Saving with no live session says why, as a notice.
    app.apply(AppAction::Save(
        SaveKind::Capture,
        "/nonexistent/x.dscap".into(),
    ));
    assert!(
        app.shared
            .notice
            .as_deref()
            .unwrap()
            .contains("no live session"),
        "{:?}",
        app.shared.notice
    );
    // A comparison with a file that is not there: B never loads, the error says why.
    app.apply(AppAction::CompareWith("/nonexistent/b.json".into()));
    let mut h = harness(app);
    for _ in 0..200 {
        h.run();
        if !h.state().compare.is_open() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(!h.state().compare.is_open());
    assert!(h.state().shared.error.is_some());
    // A menu item: Session ▸ What if… is an action the app applies after the frame.
    {
        let app = h.state_mut();
        app.compare.what_if = None;
        app.dialogs.goto = None;
        app.live_windows = gui::live_ui::LiveWindows::default();
        app.apply(AppAction::DismissError);
    }
    h.run();
    h.get_by_label("Session").click();
    h.run();
    h.get_by_label("What if…").click();
    h.run();
    assert!(h.state().compare.what_if.is_some());
    h.get_by_label("Cancel").click();
    h.run();
    assert!(h.state().compare.what_if.is_none());
}

/// A capture that ends with its device lost opens on the Device lost window; its dispatches in
/// flight are listed "lost" after the completed ones, a click on one opens the window again, and
/// Ctrl+D does too.
#[test]
fn a_lost_capture_opens_on_its_loss_report() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("lost.dscap");
    let loss = common::lost_capture(&p);
    let mut app = GuiApp::new(Settings::default());
    app.open_path_blocking(p);
    assert!(app.shared.error.is_none(), "{:?}", app.shared.error);
    let s = app.shared.session.as_ref().unwrap();
    assert_eq!(s.reports.len(), 3);
    assert_eq!(s.loss.as_deref(), Some(&loss));
    assert_eq!(
        s.unfinished.iter().map(|p| p.index).collect::<Vec<_>>(),
        vec![3, 4, 5]
    );
    assert!(app.loss.open, "the session opens on its loss");
    let mut h = harness(app);
    h.run();
    assert_eq!(
        h.query_all_by_label("Device lost: VK_ERROR_DEVICE_LOST")
            .count(),
        2,
        "the banner and the window"
    );
    h.get_by_label("+ 3 lost");
    h.get_by_label_contains("bytes past the end of the nearest import below");
    // Dispatch 4's plan and history, then its program's last completed run.
    h.get_by_label("dispatch 4").click();
    h.run();
    h.get_by_label("Escapes (T4): no-reservation 2");
    h.get_by_label("last run: dispatch 1").click();
    h.run();
    assert_eq!(h.state().shared.sel.dispatch, 1);
    // Closed, a lost row's click opens it again; so does Ctrl+D.
    h.state_mut().loss.open = false;
    h.run();
    let lost_rows: Vec<_> = h.query_all_by_label("lost").collect();
    assert_eq!(lost_rows.len(), 3, "the state column");
    lost_rows[0].click();
    h.run();
    assert!(h.state().loss.open);
    h.state_mut().loss.open = false;
    h.run();
    h.key_press_modifiers(Modifiers::COMMAND, Key::D);
    h.run();
    assert!(h.state().loss.open);
}
