//! GUI tests of a live session: a demo target runs on a thread of the test, the window attaches
//! to it through the same code the menu uses, pauses, steps, sets breakpoints, saves, detaches.
//!
//! The window is the app library's (`dispatchscope::gui`); the harness is `common`'s.

#![allow(missing_docs, reason = "tests")]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod common;

use dispatchscope::{gui, live_feed};
use std::time::{Duration, Instant};

use common::harness;
use dispatchscope_live::{ClientOptions, Incoming, LiveClient, ToDebugger};
use egui::{Key, Modifiers};
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use gui::{DemoTarget, GuiApp, LiveState, SaveKind, Settings};

/// Runs frames until `done` holds, for at most 20 s.
fn until(h: &mut Harness<'static, GuiApp>, what: &str, done: impl Fn(&GuiApp) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done(h.state()) {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {:?}, notice {:?}, last dispatch {:?}",
            h.state().shared.live.as_ref().map(|l| &l.state),
            h.state().shared.notice,
            indices(h.state()).last()
        );
        h.step();
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn indices(app: &GuiApp) -> Vec<u64> {
    app.shared
        .session
        .as_ref()
        .map(|s| s.rows.iter().map(|r| r.index).collect())
        .unwrap_or_default()
}

fn paused(app: &GuiApp) -> bool {
    app.shared
        .live
        .as_ref()
        .is_some_and(|l| matches!(l.state, LiveState::Paused { .. }))
}

#[test]
fn attach_pause_step_and_detach_leaves_the_target_running() {
    let demo = DemoTarget::start(Some(240.0)).unwrap();
    let addr = demo.addr.to_string();
    let mut h = harness(GuiApp::new(Settings::default()));
    h.run();
    // Live ▸ Attach… with the address typed, as a person would.
    h.state_mut().live_windows.attach_form = Some(gui::AttachForm {
        addr: addr.clone(),
        token: String::new(),
    });
    h.run_steps(3);
    h.get_by_label("Attach").click();
    h.step();
    assert!(
        h.state().shared.error.is_none(),
        "{:?}",
        h.state().shared.error
    );
    assert!(h.state().shared.live.as_ref().unwrap().is_attached());
    until(&mut h, "dispatches to stream in", |a| indices(a).len() >= 3);
    h.get_by_label_contains("attached · running");

    h.get_by_label("Pause").click();
    until(&mut h, "the pause", paused);
    h.step();
    h.get_by_label_contains("attached · paused");
    let before = indices(h.state());
    let last = *before.last().unwrap();

    // Step twice: the toolbar button, then F10.
    h.get_by_label("Step").click();
    until(&mut h, "the first step", |a| {
        paused(a) && indices(a).last() > Some(&last)
    });
    let mid = *indices(h.state()).last().unwrap();
    h.key_press_modifiers(Modifiers::NONE, Key::F10);
    until(&mut h, "the second step", |a| {
        paused(a) && indices(a).last() > Some(&mid)
    });
    h.run_steps(2);
    let after = indices(h.state());
    let new: Vec<u64> = after[before.len()..].to_vec();
    assert_eq!(
        new,
        vec![last + 1, last + 2],
        "each step shows the next dispatch (received before the pause: {before:?})"
    );
    // The selection follows the step, and the table and status bar show it.
    let sel = h.state().shared.sel.dispatch;
    assert_eq!(sel, after.len() - 1);
    h.get_by_label(&format!("dispatch {}", last + 2));

    // Save as a sample up to the selected dispatch; it replays on its own.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("live.json");
    let saved = h.state_mut().save_live(SaveKind::Sample, &p);
    assert!(saved.is_ok(), "{saved:?}");
    let sample =
        dispatchscope_formats::sample::Sample::from_json(&std::fs::read_to_string(&p).unwrap())
            .unwrap();
    let replayed = sample.run().unwrap();
    assert!(!replayed.is_empty());
    let cap = dir.path().join("live.dscap");
    let saved = h.state_mut().save_live(SaveKind::Capture, &cap);
    assert!(saved.is_ok(), "{saved:?}");
    h.state_mut().open_path_blocking(cap);
    assert!(
        h.state().shared.error.is_none(),
        "{:?}",
        h.state().shared.error
    );
    assert!(
        h.state().shared.live.is_none(),
        "opening a file ends the live session"
    );

    // The target was detached when the file opened; it runs on: attach again and see dispatches.
    let c = LiveClient::connect_with(&addr, &ClientOptions::default()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = false;
    while Instant::now() < deadline && !got {
        if let Some(Incoming::Message(ToDebugger::Dispatch { .. })) =
            c.recv_timeout(Duration::from_millis(200))
        {
            got = true;
        }
    }
    assert!(got, "the target keeps running after a detach");
    drop(c);
    assert!(demo.is_running());
}

#[test]
fn detach_keeps_what_was_received_and_f5_toggles() {
    let demo = DemoTarget::start(Some(240.0)).unwrap();
    let mut h = harness(GuiApp::new(Settings::default()));
    h.run();
    let ctx = h.ctx.clone();
    assert!(h.state_mut().attach(&ctx, &demo.addr.to_string(), None));
    until(&mut h, "dispatches", |a| !indices(a).is_empty());
    h.key_press_modifiers(Modifiers::NONE, Key::F5);
    until(&mut h, "F5 pauses", paused);
    h.key_press_modifiers(Modifiers::NONE, Key::F5);
    until(&mut h, "F5 continues", |a| {
        a.shared
            .live
            .as_ref()
            .is_some_and(|l| l.state == LiveState::Running)
    });
    h.get_by_label("Detach").click();
    h.run_steps(2);
    let n = indices(h.state()).len();
    assert!(n > 0);
    assert!(!h.state().shared.live.as_ref().unwrap().is_attached());
    h.get_by_label("disconnected");
    std::thread::sleep(Duration::from_millis(100));
    h.run_steps(2);
    assert_eq!(
        indices(h.state()).len(),
        n,
        "nothing arrives after a detach"
    );
    assert!(demo.is_running());
}

#[test]
fn a_breakpoint_on_the_nth_dispatch_stops_there() {
    let demo = DemoTarget::start(None).unwrap();
    let mut h = harness(GuiApp::new(Settings::default()));
    h.run();
    let ctx = h.ctx.clone();
    assert!(h.state_mut().attach(&ctx, &demo.addr.to_string(), None));
    until(&mut h, "dispatches", |a| !indices(a).is_empty());
    // Pause first, so the breakpoint is set ahead of where the target is.
    h.state_mut().pause_continue();
    until(&mut h, "the pause", paused);
    let Some(LiveState::Paused { next_dispatch, .. }) =
        h.state().shared.live.as_ref().map(|l| l.state.clone())
    else {
        panic!("not paused")
    };
    let target = next_dispatch + 50;
    h.state_mut().live_windows.show_breakpoints = true;
    h.run_steps(3);
    h.get_by_label("Before dispatch number").click();
    h.state_mut().live_windows.breakpoint_form.nth = target.to_string();
    h.run_steps(1);
    h.get_by_label("Set breakpoints").click();
    h.run_steps(1);
    assert!(h.state().live_windows.breakpoint_form.nth_on);
    // F5 continues (the breakpoints window may cover the toolbar).
    h.key_press_modifiers(Modifiers::NONE, Key::F5);
    h.run_steps(2);
    until(&mut h, "the breakpoint", |a| {
        a.shared.live.as_ref().is_some_and(|l| {
            matches!(l.state, LiveState::Paused { next_dispatch, .. } if next_dispatch == target)
        })
    });
    until(&mut h, "the breakpoint", paused);
    match &h.state().shared.live.as_ref().unwrap().state {
        LiveState::Paused { next_dispatch, why } => {
            assert_eq!(*next_dispatch, target, "{why}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_target_dying_keeps_what_was_received() {
    let demo = DemoTarget::start(Some(240.0)).unwrap();
    let mut h = harness(GuiApp::new(Settings::default()));
    h.run();
    let ctx = h.ctx.clone();
    assert!(h.state_mut().attach(&ctx, &demo.addr.to_string(), None));
    until(&mut h, "dispatches", |a| indices(a).len() >= 2);
    drop(demo);
    until(&mut h, "the disconnect", |a| {
        a.shared
            .live
            .as_ref()
            .is_some_and(|l| matches!(l.state, LiveState::Disconnected { .. }))
    });
    h.run_steps(2);
    assert!(indices(h.state()).len() >= 2);
    h.get_by_label("disconnected");
    h.get_by_label("Previous").click();
    h.run_steps(2);
}

#[test]
fn with_no_arguments_the_window_attaches_to_the_demo() {
    let mut h = harness(GuiApp::new(Settings::default()));
    h.run();
    let ctx = h.ctx.clone();
    h.state_mut().open_default(&ctx);
    assert!(
        h.state().shared.notice.is_none(),
        "{:?}",
        h.state().shared.notice
    );
    assert!(h.state().demo.is_some());
    assert!(h.state().shared.live.as_ref().unwrap().is_attached());
    until(&mut h, "dispatches", |a| !indices(a).is_empty());
    // The built-in samples stay one menu away.
    h.get_by_label("File").click();
    h.run_steps(2);
    h.get_by_label("Built-in samples");
}

#[test]
fn a_live_session_is_recorded_whole_and_reads_back_from_its_file() {
    let demo = DemoTarget::start(Some(240.0)).unwrap();
    let mut h = harness(GuiApp::new(Settings::default()));
    h.run();
    let ctx = h.ctx.clone();
    assert!(h.state_mut().attach(&ctx, &demo.addr.to_string(), None));
    until(&mut h, "dispatches", |a| indices(a).len() >= 20);
    h.get_by_label_contains("recorded");
    let live = h.state().shared.live.as_ref().unwrap();
    assert!(live.stored() >= 20, "{} recorded", live.stored());
    let back = live.stored_report(0).unwrap();
    // The session's row of the recording's first dispatch, and its report (read back from the
    // file through the session when it has left the window of the latest).
    let s = h.state_mut().shared.session.as_mut().unwrap();
    let pos = s.rows.position_of(back.index).expect("its row");
    s.prepare(pos).unwrap();
    let shown = s.reports.get(pos).unwrap().clone();
    assert_eq!(
        back, shown,
        "the store's file gives back what the window showed"
    );
    let live = h.state_mut().shared.live.as_mut().unwrap();
    live.detach();
    assert!(
        live.stored_report(live.stored() - 1).is_ok(),
        "and after a detach"
    );
}

/// Past the old cap of 20,000 dispatches a live session still lists every dispatch since attach,
/// and shows the first one, read back from the store's file; the reports in memory stay within the
/// window and the cache (counted, not timed) while the rows grow with the session.
#[test]
fn a_live_session_past_the_old_cap_lists_and_shows_its_first_dispatch() {
    use gui::session::{LIVE_WINDOW, REPORT_CACHE};
    let demo = DemoTarget::start(None).unwrap();
    let addr = demo.addr.to_string();
    let feed = live_feed::Feed::collect(&addr, 40).unwrap();
    drop(demo);
    // The window's link, fed by this test through its intake thread as a client feeds it, without
    // a socket; the window's part is `drain`, as each frame does.
    let (mut link, tx) = gui::LiveLink::fed(&addr, "the demo", std::sync::Arc::new(|| {})).unwrap();
    let mut session = gui::Session::live(&addr, "past the cap".into(), link.store());
    for m in &feed.start {
        live_feed::send(&tx, m.clone()).unwrap();
    }
    let first = feed.first_index();
    const N: u64 = 25_000;
    let mut most_held = 0;
    for i in 0..N {
        live_feed::send(&tx, feed.dispatch(first, i).unwrap()).unwrap();
        if i % 512 == 0 {
            link.drain(&mut session);
            most_held = most_held.max(session.reports.held());
        }
    }
    live_feed::drain_until(&mut link, &mut session, N).unwrap();
    most_held = most_held.max(session.reports.held());
    assert!(
        !session.programs.is_empty(),
        "the demo's program code reached the session, for the Program panel"
    );
    assert_eq!(link.received(), N);
    assert_eq!(session.rows.len() as u64, N, "every dispatch has its row");
    assert_eq!(session.reports.len() as u64, N);
    assert_eq!(
        link.stored() as u64,
        N,
        "every dispatch is in the recording"
    );
    assert!(
        most_held <= LIVE_WINDOW,
        "{most_held} reports held, the window is {LIVE_WINDOW}"
    );
    assert_eq!(session.rows.index(0), Some(first));
    assert_eq!(session.rows.index(N as usize - 1), Some(first + N - 1));
    // The first dispatch left memory long ago.
    assert!(session.reports.get(0).is_none());

    // In the window: select the first dispatch (Home), as a person would.
    let mut app = GuiApp::new(Settings::default());
    app.shared.live = Some(link);
    app.set_session(session);
    let mut h = harness(app);
    h.run();
    h.key_press_modifiers(Modifiers::NONE, Key::Home);
    h.run_steps(2);
    assert_eq!(h.state().shared.sel.dispatch, 0);
    assert!(
        h.state().shared.error.is_none(),
        "{:?}",
        h.state().shared.error
    );
    let s = h.state().shared.session.as_ref().unwrap();
    let shown = s
        .reports
        .get(0)
        .expect("the first dispatch, read back from the file");
    assert_eq!(shown.index, first);
    h.get_by_label(&format!("Dispatch {first}"));
    // Visiting many old dispatches keeps at most the cache of them.
    for pos in (0..20_000).step_by(500) {
        h.state_mut()
            .apply(dispatchscope_views::Action::SelectDispatch(pos));
        let s = h.state().shared.session.as_ref().unwrap();
        assert_eq!(
            s.reports.get(pos).map(|r| r.index),
            Some(first + pos as u64)
        );
        assert!(s.reports.held() <= LIVE_WINDOW + REPORT_CACHE);
    }
}

/// The target sends checkpoints of its engine state when they change: a live dispatch that left
/// the window (only on disk) shows Memory and Chunk table from them, with no note, and the
/// recording reopened as a file shows each dispatch's the same, through the capture's index.
#[test]
fn live_dispatches_on_disk_and_the_reopened_recording_show_memory_and_table_from_checkpoints() {
    use gui::session::LIVE_WINDOW;
    let demo = DemoTarget::start(Some(240.0)).unwrap();
    let mut h = harness(GuiApp::new(Settings::default()));
    h.run();
    let ctx = h.ctx.clone();
    assert!(h.state_mut().attach(&ctx, &demo.addr.to_string(), None));
    until(&mut h, "dispatches past the window", |a| {
        indices(a).len() > LIVE_WINDOW + 64
    });
    h.state_mut().shared.live.as_mut().unwrap().detach();
    drop(demo);
    let n = h.state().shared.session.as_ref().unwrap().rows.len();
    let picks: Vec<usize> = vec![0, 1, 7, 63, 64, 200, n - 2, n - 1];
    let mut shown = Vec::new();
    for &pos in &picks {
        let s = h.state_mut().shared.session.as_mut().unwrap();
        s.prepare(pos).unwrap();
        let memory = s.memory(pos).cloned();
        let table = s.table(pos).map(|t| t.table.slots().to_vec());
        assert!(
            memory.is_some(),
            "dispatch {pos} shows no memory checkpoint: {:?}",
            s.state_note_at(pos)
        );
        assert_eq!(s.state_note_at(pos), None, "dispatch {pos}");
        let report = s.reports.get(pos).unwrap();
        if report.table.is_some() {
            assert!(
                table.is_some(),
                "dispatch {pos} used a table but shows none"
            );
        }
        shown.push((report.index, memory, table));
    }
    // The window draws it: dispatch 0 is on disk only.
    h.state_mut()
        .apply(dispatchscope_views::Action::SelectDispatch(0));
    h.state_mut().shared.settings.tab = dispatchscope_views::Tab::Memory;
    h.run_steps(2);
    h.get_by_label("Reservations, as this dispatch left them");
    assert!(h.query_by_label_contains("report carries").is_none());

    // Reopened: the recording as a capture (cut short, as a crash would leave it), read through
    // its index and its checkpoints, not replayed.
    let path = h
        .state()
        .shared
        .live
        .as_ref()
        .unwrap()
        .recording_path()
        .to_path_buf();
    let mut again = gui::session::load_file(
        &path,
        gui::Source::File(path.clone()),
        &gui::Progress::default(),
    )
    .unwrap();
    assert!(
        again.reports.on_disk(),
        "read through its index, not replayed"
    );
    again.finish_rows();
    for (index, memory, table) in shown {
        let pos = again.rows.position_of(index).unwrap();
        again.prepare(pos).unwrap();
        assert_eq!(
            again.memory(pos).cloned(),
            memory,
            "dispatch {index}'s memory"
        );
        assert_eq!(
            again.table(pos).map(|t| t.table.slots().to_vec()),
            table,
            "dispatch {index}'s table"
        );
        assert_eq!(again.state_note_at(pos), None);
    }
}

#[test]
fn the_memory_tab_reads_the_paused_targets_bytes_at_the_selected_access() {
    use dispatchscope_core::report::Route;
    use dispatchscope_views::{Action, Tab};
    let demo = DemoTarget::start_streaming(
        Some(240.0),
        dispatchscope_demo::BASE_DISPATCHES_PER_FRAME,
        dispatchscope_demo::Streams::AccessLists,
    )
    .unwrap();
    let mut h = harness(GuiApp::new(Settings::default()));
    h.run();
    h.state_mut().live_windows.attach_form = Some(gui::AttachForm {
        addr: demo.addr.to_string(),
        token: String::new(),
    });
    h.run_steps(3);
    h.get_by_label("Attach").click();
    h.step();
    until(&mut h, "dispatches to stream in", |a| indices(a).len() >= 3);
    h.get_by_label("Pause").click();
    until(&mut h, "the pause", paused);
    // The first access of the selected dispatch that reached guest memory by address; step until
    // a dispatch has one.
    let device_access = |a: &GuiApp| {
        let r = a
            .shared
            .session
            .as_ref()?
            .reports
            .get(a.shared.sel.dispatch)?;
        r.accesses.iter().find_map(|x| match x.route {
            Route::Device { address } => Some((x.index, address)),
            _ => None,
        })
    };
    for _ in 0..20 {
        if device_access(h.state()).is_some() {
            break;
        }
        let last = indices(h.state()).last().copied();
        h.state().shared.live.as_ref().unwrap().step(1).unwrap();
        until(&mut h, "a step", |a| {
            paused(a) && indices(a).last().copied() > last
        });
    }
    let (access, address) =
        device_access(h.state()).expect("no device-addressed access in 20 steps");
    h.state_mut().apply(Action::ShowTab(Tab::Memory));
    h.state_mut().apply(Action::SelectAccess(Some(access)));
    until(&mut h, "the target's bytes", |a| {
        a.shared
            .live
            .as_ref()
            .and_then(|l| l.memory.as_ref())
            .is_some()
    });
    h.run_steps(2);
    let got = h
        .state()
        .shared
        .live
        .as_ref()
        .unwrap()
        .memory
        .clone()
        .unwrap();
    assert_eq!(got.address, address & !0xf);
    let bytes = got.bytes.expect("the paused target read its memory");
    assert_eq!(bytes.len(), 256);
    h.get_by_label("Bytes, read from the target now");
    assert!(
        h.query_all_by_label(&format!("{:#x}", address & !0xf))
            .next()
            .is_some(),
        "the first row's address is shown"
    );
    assert!(
        paused(h.state()),
        "reading memory does not resume the target"
    );
}
