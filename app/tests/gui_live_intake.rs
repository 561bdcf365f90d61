//! Issue 31: the window's live session at a game's rate. Its intake thread stores every message
//! and makes every row (the window's frame only appends them, and never stores), nothing is lost
//! whatever the frames do, the session's end is logged as `received N, dropped M`; the dispatch
//! list follows the newest dispatch (and stops when an older one is selected), its columns never
//! overlap at 1920 points; the timeline shows the recent frames a bar each.
//!
//! Real demo messages are collected once from a demo target in the test and fed to links made by
//! `LiveLink::fed`, whose intake takes them exactly as it takes a client's.

#![allow(missing_docs, reason = "tests")]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dispatchscope::{gui, live_feed};
use dispatchscope_core::report::Mode;
use dispatchscope_views::{DispatchRow, RowCounts, Rows};
use egui::{Key, Modifiers};
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use gui::session::{LIVE_WINDOW, LiveBatch};
use gui::{DemoTarget, GuiApp, LiveLink, LiveState, Session, Settings};
use live_feed::{Feed, drain_until, send};

/// Demo messages, collected once for every test of this file.
fn feed() -> &'static Feed {
    static FEED: std::sync::OnceLock<Feed> = std::sync::OnceLock::new();
    FEED.get_or_init(|| {
        let demo = DemoTarget::start(None).unwrap();
        Feed::collect(&demo.addr.to_string(), 40).unwrap()
    })
}

/// A fed link and its live session, the feed's start (the snapshot) sent.
fn fed_session() -> (
    LiveLink,
    std::sync::mpsc::SyncSender<dispatchscope_live::Incoming>,
    Session,
) {
    let (link, tx) = LiveLink::fed("fed:0", "the demo, fed", Arc::new(|| {})).unwrap();
    for m in &feed().start {
        send(&tx, m.clone()).unwrap();
    }
    let session = Session::live("fed:0", "fed".into(), link.store());
    (link, tx, session)
}

/// Every dispatch sent reaches the recording on the intake's thread, with no frame of the
/// window run; one drain then appends every row (none lost, in order), and the reports in memory
/// stay within the window; the session's end says what was received and dropped.
#[test]
fn rows_stored_on_the_intake_thread_all_reach_the_session_and_the_frame_never_stores() {
    let (mut link, tx, mut session) = fed_session();
    let feed = feed();
    let first = feed.first_index();
    const N: u64 = 20_000;
    // A thread sends as a target would, while this one does not drain at all.
    let sender = {
        let tx = tx.clone();
        let msgs: Vec<_> = (0..N).map(|i| feed.dispatch(first, i).unwrap()).collect();
        std::thread::spawn(move || {
            for m in msgs {
                send(&tx, m).unwrap();
            }
        })
    };
    sender.join().unwrap();
    // `received` counts a dispatch once it is recorded and its row handed over.
    let deadline = Instant::now() + Duration::from_secs(60);
    while link.received() < N {
        assert!(Instant::now() < deadline, "{} received", link.received());
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        session.rows.len(),
        0,
        "the recording took every dispatch before the window's thread took any"
    );
    assert_eq!(link.stored() as u64, N);
    assert_eq!(link.received(), N);
    // One frame's drain appends all of them.
    let d = link.drain(&mut session);
    assert_eq!(d.dispatches as u64, N);
    assert_eq!(session.rows.len() as u64, N, "every row, none lost");
    assert_eq!(session.reports.len() as u64, N);
    assert!(session.reports.held() <= LIVE_WINDOW);
    assert_eq!(session.rows.index(0), Some(first));
    assert_eq!(session.rows.index(N as usize - 1), Some(first + N - 1));
    // The newest is in memory as it came; the first is read back from the recording.
    session.prepare(N as usize - 1).unwrap();
    assert_eq!(
        session.reports.get(N as usize - 1).map(|r| r.index),
        Some(first + N - 1)
    );
    session.prepare(0).unwrap();
    assert_eq!(session.reports.get(0).map(|r| r.index), Some(first));
    // The feed ends (the target went): the session says so, and its end line counts.
    drop(tx);
    let deadline = Instant::now() + Duration::from_secs(10);
    while link.is_attached() {
        assert!(Instant::now() < deadline);
        link.drain(&mut session);
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(matches!(link.state, LiveState::Disconnected { .. }));
    assert_eq!(link.end_line(), format!("received {N}, dropped 0"));
    assert_eq!(link.dropped(), 0);
}

/// Rows keep arriving while frames run at any pace (here, a frame every few thousand
/// dispatches, and none at all for a while): the session ends with every one, in order.
#[test]
fn a_slow_window_loses_no_row() {
    let (mut link, tx, mut session) = fed_session();
    let feed = feed();
    let first = feed.first_index();
    const N: u64 = 30_000;
    for i in 0..N {
        send(&tx, feed.dispatch(first, i).unwrap()).unwrap();
        if i % 7_000 == 0 {
            link.drain(&mut session);
        }
    }
    drain_until(&mut link, &mut session, N).unwrap();
    assert_eq!(session.rows.len() as u64, N);
    assert!(
        session
            .rows
            .iter()
            .enumerate()
            .all(|(p, r)| r.index == first + p as u64),
        "in order, without a gap"
    );
    assert_eq!(
        link.store().lock().unwrap().as_ref().unwrap().len() as u64,
        N
    );
}

/// Gaps in the indices (dispatches the target dropped) are counted as dropped.
#[test]
fn gaps_in_the_indices_count_as_dropped() {
    let (mut link, tx, mut session) = fed_session();
    let feed = feed();
    let first = feed.first_index();
    for i in (0..100).chain(150..200) {
        send(&tx, feed.dispatch(first, i).unwrap()).unwrap();
    }
    drain_until(&mut link, &mut session, 150).unwrap();
    assert_eq!(link.end_line(), "received 150, dropped 50");
}

/// A harness 1920 × 1080 points, a game's screen.
fn wide_harness(app: GuiApp) -> Harness<'static, GuiApp> {
    // The other GUI tests' harness is 1280 points wide; this one is a game's screen.
    let _ = common::harness;
    Harness::builder()
        .with_size(egui::vec2(1920.0, 1080.0))
        .with_context_setup(dispatchscope_views::style::install_fonts)
        .build_ui_state(|ui, app: &mut GuiApp| app.ui(ui), app)
}

fn run_until(h: &mut Harness<'static, GuiApp>, what: &str, done: impl Fn(&GuiApp) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done(h.state()) {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        h.step();
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn n_rows(app: &GuiApp) -> usize {
    app.shared.session.as_ref().map_or(0, |s| s.rows.len())
}

/// While following, the newest dispatch is selected and its row is in view as rows arrive;
/// selecting an older one stops following (the selection stays, more rows arriving); End follows
/// again.
#[test]
fn the_list_follows_the_newest_dispatch_until_an_older_one_is_selected() {
    let (link, tx, session) = fed_session();
    let feed = feed();
    let first = feed.first_index();
    let mut app = GuiApp::new(Settings::default());
    app.shared.live = Some(link);
    app.set_session(session);
    let mut h = wide_harness(app);
    h.run();
    let mut sent = 0u64;
    let mut send_n = |n: u64| {
        for _ in 0..n {
            send(&tx, feed.dispatch(first, sent).unwrap()).unwrap();
            sent += 1;
        }
        sent
    };
    let want = send_n(3_000) as usize;
    run_until(&mut h, "3,000 rows", |a| n_rows(a) == want);
    h.run_steps(3);
    assert!(h.state().shared.follow);
    assert_eq!(
        h.state().shared.sel.dispatch,
        want - 1,
        "the newest is selected"
    );
    let newest = (first + want as u64 - 1).to_string();
    let shown: Vec<u64> = (0..want as u64)
        .filter(|i| {
            h.query_all_by_label(&(first + i).to_string())
                .next()
                .is_some()
        })
        .map(|i| first + i)
        .collect();
    assert!(
        h.query_by_label(&newest).is_some(),
        "the newest row ({newest}) is in view; shown {:?}..{:?}",
        shown.first(),
        shown.last()
    );
    // Select an older one: following stops, and stays stopped as rows arrive.
    h.state_mut()
        .apply(dispatchscope_views::Action::SelectDispatch(100));
    assert!(!h.state().shared.follow);
    let want = send_n(2_000) as usize;
    run_until(&mut h, "5,000 rows", |a| n_rows(a) == want);
    h.run_steps(3);
    assert_eq!(h.state().shared.sel.dispatch, 100, "the selection stays");
    let older = (first + 100).to_string();
    assert!(
        h.query_by_label(&older).is_some(),
        "the selected row stays in view"
    );
    // End follows again.
    h.key_press_modifiers(Modifiers::NONE, Key::End);
    h.run_steps(2);
    assert!(h.state().shared.follow);
    let want = send_n(500) as usize;
    run_until(&mut h, "5,500 rows", |a| n_rows(a) == want);
    h.run_steps(3);
    assert_eq!(h.state().shared.sel.dispatch, want - 1);
    let newest = (first + want as u64 - 1).to_string();
    assert!(h.query_by_label(&newest).is_some(), "{newest} in view");
    // The status bar counts what this window received, and no drop.
    h.get_by_label("0 dropped");
}

/// A row of the widest kind a game sends: a long index, a long program address, the longest
/// mode, counts past a byte, a long label.
fn wide_row(index: u64) -> DispatchRow {
    DispatchRow {
        index,
        program: 0xffff_fff0_1234_5678,
        label: "a label far longer than the label column is wide, which the column clips".into(),
        mode: Mode::DeviceAddressed,
        counts: RowCounts {
            sets: 12_345,
            refusals: 254,
            escapes: 999_999,
            marks: 7,
        },
        rules: Default::default(),
        frame: index / 200,
    }
}

/// At 1920 points wide (the dispatch list at its default width, and widened), no cell's text
/// runs into the next column: each cell lies left of the next column's header.
#[test]
fn the_dispatch_list_columns_never_overlap_at_1920_points() {
    let first = 123_456_789_012u64;
    let mut rows = Rows::new();
    for i in 0..500 {
        rows.push(&wide_row(first + i));
    }
    let store: gui::session::SharedStore = Arc::new(Mutex::new(None));
    let mut session = Session::live("wide:0", "wide rows".into(), store);
    session.push_batch(LiveBatch {
        rows,
        ..LiveBatch::default()
    });
    let mut app = GuiApp::new(Settings::default());
    app.set_session(session);
    let mut h = wide_harness(app);
    h.run_steps(4);
    let headers = [
        "#", "program", "mode", "sets", "refus.", "esc.", "marks", "label",
    ];
    // The table's header row: the lowest "program" label is the header's (the filter row has one
    // above it).
    let header_y = h
        .query_all_by_label("program")
        .map(|n| n.rect().center().y)
        .fold(f32::MIN, f32::max);
    let left_of = |h: &Harness<'static, GuiApp>, title: &str| {
        h.query_all_by_label(title)
            .map(|n| n.rect())
            .find(|r| (r.center().y - header_y).abs() < 2.0)
            .unwrap_or_else(|| panic!("no header {title:?}"))
            .left()
    };
    let lefts: Vec<f32> = headers.iter().map(|t| left_of(&h, t)).collect();
    assert!(
        lefts.windows(2).all(|w| w[0] < w[1]),
        "headers in order: {lefts:?}"
    );
    // The first row, in view (the selection is the first dispatch).
    let index = first.to_string();
    let cell = h.get_by_label(&index).rect();
    let y = cell.center().y;
    let in_row = |text: &str| {
        h.query_all_by_label(text)
            .map(|n| n.rect())
            .find(|r| (r.center().y - y).abs() < 2.0)
            .unwrap_or_else(|| panic!("no cell {text:?} in the row"))
    };
    let cells = [
        (index.clone(), 0),
        ("0xfffffff012345678".to_owned(), 1),
        ("device-addressed".to_owned(), 2),
        ("12345".to_owned(), 3),
        ("254".to_owned(), 4),
        ("999999".to_owned(), 5),
        ("7".to_owned(), 6),
    ];
    for (text, col) in &cells {
        let r = in_row(text);
        assert!(
            r.left() >= lefts[*col] - 1.0 && r.right() <= lefts[col + 1],
            "{text:?} at {:.1}..{:.1} runs out of its column {:.1}..{:.1}",
            r.left(),
            r.right(),
            lefts[*col],
            lefts[col + 1]
        );
    }
}

/// The timeline of a live session shows its recent frames, a bar each, with the newest at the
/// right end while following.
#[test]
fn the_live_timeline_shows_recent_frames_a_bar_each() {
    let mut rows = Rows::new();
    for i in 0..200 * 1_000u64 {
        rows.push(&wide_row(i));
    }
    let mut panel = dispatchscope_views::TimelinePanel::default();
    panel.live = true;
    panel.follow = true;
    let (bars, _) = panel.visible(&rows);
    assert_eq!(
        bars.len() as u64,
        dispatchscope_views::timeline::RECENT_FRAMES
    );
    assert!(bars.iter().all(|b| b.frames == 1 && b.dispatches == 200));
    assert_eq!(bars.last().map(|b| b.frame), Some(999));
    // The window draws it: "recent 240 frames" is the view shown.
    let store: gui::session::SharedStore = Arc::new(Mutex::new(None));
    let mut session = Session::live("t:0", "t".into(), store);
    session.push_batch(LiveBatch {
        rows,
        ..LiveBatch::default()
    });
    let (link, _tx) = LiveLink::fed("t:0", "t", Arc::new(|| {})).unwrap();
    let mut app = GuiApp::new(Settings::default());
    app.shared.live = Some(link);
    app.set_session(session);
    let mut h = wide_harness(app);
    h.run_steps(3);
    h.get_by_label(&format!(
        "recent {} frames",
        dispatchscope_views::timeline::RECENT_FRAMES
    ));
}

/// A live session under a disk budget of 2 MiB: the recording rolls into files and deletes the
/// oldest, the status bar says how many dispatches are no longer on disk, selecting one says why
/// it cannot be shown, a dispatch still on disk reads back from a closed file and from the
/// current one, saving the whole session is refused by name, and closing the link removes every
/// file it made.
#[test]
fn a_disk_budget_releases_the_oldest_dispatches_and_the_window_says_how_many() {
    let budget = 2 << 20;
    let (link, tx) =
        LiveLink::fed_with_budget("fed:0", "the demo, fed", Some(budget), Arc::new(|| {})).unwrap();
    assert_eq!(link.disk_budget, budget);
    for m in &feed().start {
        send(&tx, m.clone()).unwrap();
    }
    let mut session = Session::live("fed:0", "fed".into(), link.store());
    let feed = feed();
    let first = feed.first_index();
    const N: u64 = 30_000;
    for i in 0..N {
        send(&tx, feed.dispatch(first, i).unwrap()).unwrap();
    }
    let mut link = link;
    drain_until(&mut link, &mut session, N).unwrap();
    let released = link.released();
    assert!(
        released.dispatches > 0 && released.files > 0,
        "{released:?} after {N} dispatches"
    );
    assert!(
        link.bytes_on_disk() <= budget + (64 << 10),
        "{} bytes on disk",
        link.bytes_on_disk()
    );
    // A released dispatch says why; the first kept one, one in the middle and the newest read
    // back with their indices.
    let err = session.prepare(0).unwrap_err();
    assert!(err.to_string().contains("no longer on disk"), "{err}");
    for pos in [
        released.dispatches,
        (released.dispatches + N as usize) / 2,
        N as usize - 1,
    ] {
        session.prepare(pos).unwrap();
        assert_eq!(
            session.reports.get(pos).map(|r| r.index),
            Some(first + pos as u64),
            "position {pos}"
        );
    }
    // The window's rows of released dispatches are gone; the rest keep their positions.
    assert_eq!(session.rows.first(), released.dispatches);
    assert_eq!(session.rows.len(), N as usize);
    assert!(session.rows.get(released.dispatches - 1).is_none());
    // Saving the session saves what is still on disk, and says what was released.
    let saved_dir = tempfile::tempdir().unwrap();
    let whole = saved_dir.path().join("whole.dscap");
    let saved = link.save_capture(&whole).unwrap();
    assert_eq!(saved.released, link.released().dispatches);
    assert_eq!(saved.dispatches + saved.released, N as usize);
    assert!(
        saved.words(&whole).contains("released"),
        "{}",
        saved.words(&whole)
    );
    let file = dispatchscope_formats::session::CaptureFile::open(&whole).unwrap();
    assert!(
        file.meta().description.contains("released its first"),
        "{}",
        file.meta().description
    );
    let mut opened = GuiApp::new(Settings::default());
    opened.open_path_blocking(whole.clone());
    assert!(opened.shared.error.is_none(), "{:?}", opened.shared.error);
    let s = opened.shared.session.as_mut().unwrap();
    assert_eq!(s.reports.len(), saved.dispatches);
    s.prepare(0).unwrap();
    assert_eq!(
        s.reports.get(0).map(|r| r.index),
        Some(first + saved.released as u64)
    );
    // The status bar says it.
    let mut app = GuiApp::new(Settings::default());
    app.shared.live = Some(link);
    app.set_session(session);
    let mut h = wide_harness(app);
    h.run_steps(3);
    let label = format!(
        "{} no longer on disk",
        gui::thousands(released.dispatches as f64)
    );
    h.get_by_label(&label);
    // Closing the link removes every file the recording made.
    let files: Vec<_> = h
        .state()
        .shared
        .live
        .as_ref()
        .unwrap()
        .store()
        .lock()
        .unwrap()
        .as_ref()
        .unwrap()
        .files_made();
    assert!(files.len() > released.files, "{files:?}");
    // A file still on disk says which part of the session it is, and that the first went.
    let kept: Vec<_> = files.iter().filter(|f| f.exists()).collect();
    let note = dispatchscope::load::parts_note(kept[0]).unwrap();
    assert!(
        note.contains(&format!("file {} of a live session", released.files + 1))
            && note.contains("no longer on disk")
            && note.contains("goes on in"),
        "{note}"
    );
    // Any of its files, or a folder of them, opens the whole session as one.
    let copies = tempfile::tempdir().unwrap();
    for f in &kept {
        std::fs::copy(f, copies.path().join(f.file_name().unwrap())).unwrap();
    }
    let copied = |f: &std::path::Path| copies.path().join(f.file_name().unwrap());
    for open in [
        copied(kept[kept.len() - 1]),
        copied(kept[0]),
        copies.path().to_path_buf(),
    ] {
        let mut one = GuiApp::new(Settings::default());
        one.open_path_blocking(open.clone());
        assert!(
            one.shared.error.is_none(),
            "{}: {:?}",
            open.display(),
            one.shared.error
        );
        let s = one.shared.session.as_mut().unwrap();
        let warning = s.warning.clone().unwrap_or_default();
        assert!(
            warning.contains(&format!("{} files", kept.len()))
                && warning.contains("opened as one session")
                && warning.contains("no longer on disk"),
            "{warning}"
        );
        let n = s.reports.len();
        assert_eq!(n + released.dispatches, N as usize, "{}", open.display());
        s.prepare(n - 1).unwrap();
        assert_eq!(s.reports.get(n - 1).map(|r| r.index), Some(first + N - 1));
    }
    drop(tx);
    drop(h);
    for f in files {
        assert!(!f.exists(), "{} is left", f.display());
    }
}

/// Dispatches in flight: a prepared dispatch is listed "in flight" at once, its report ends it
/// (and every one before it: they complete in order), an abandoned one stays listed as such; a
/// lost device makes the ones in flight "lost", opens the Device lost window, and its banner says
/// so. The list's state column and the window's view are found by their words.
#[test]
fn a_live_session_lists_dispatches_in_flight_and_opens_on_a_lost_device() {
    use dispatchscope_core::report::{DeviceLossReport, LOSS_SCHEMA, LostDispatch};
    use dispatchscope_live::ToDebugger;
    use dispatchscope_views::DispatchState;
    let (link, tx, session) = fed_session();
    let feed = feed();
    let first = feed.first_index();
    let prepared = |i: u64| ToDebugger::Prepared {
        index: first + i,
        mode: Mode::Bound,
        program: 0x4000_0000_0100,
        label: format!("in flight {i}"),
    };
    let mut app = GuiApp::new(Settings::default());
    app.shared.live = Some(link);
    app.set_session(session);
    let mut h = wide_harness(app);
    h.run();
    // Ten prepared, then the first four complete and the sixth is abandoned.
    for i in 0..10 {
        send(&tx, prepared(i)).unwrap();
    }
    for i in 0..4 {
        send(&tx, feed.dispatch(first, i).unwrap()).unwrap();
    }
    send(&tx, ToDebugger::Abandoned { index: first + 5 }).unwrap();
    let states = |a: &GuiApp| -> Vec<(u64, DispatchState)> {
        a.shared.session.as_ref().map_or(Vec::new(), |s| {
            s.unfinished
                .iter()
                .map(|p| (p.index - first, p.state))
                .collect()
        })
    };
    let want: Vec<(u64, DispatchState)> = [4, 5, 6, 7, 8, 9]
        .into_iter()
        .map(|i| {
            (
                i,
                if i == 5 {
                    DispatchState::Abandoned
                } else {
                    DispatchState::InFlight
                },
            )
        })
        .collect();
    run_until(&mut h, "the rows in flight", |a| {
        n_rows(a) == 4 && states(a) == want
    });
    h.run_steps(2);
    h.get_by_label("in flight 9");
    assert!(
        h.query_all_by_label("in flight").count() >= 5,
        "the state column"
    );
    h.get_by_label("abandoned");
    h.get_by_label("+ 5 in flight, 1 abandoned");
    // The device is lost with 7, 8 and 9 in flight (6 completed first).
    send(&tx, feed.dispatch(first, 6).unwrap()).unwrap();
    let lost = |i: u64| LostDispatch {
        index: first + i,
        program: 0x4000_0000_0100,
        label: format!("in flight {i}"),
        mode: Mode::Bound,
        ..LostDispatch::default()
    };
    let mut report = DeviceLossReport {
        schema: LOSS_SCHEMA.into(),
        status: "VK_ERROR_DEVICE_LOST".into(),
        next_dispatch: first + 10,
        in_flight: vec![lost(7), lost(8), lost(9)],
        completed: 6,
        findings: vec!["the likeliest dispatch is the oldest".into()],
        ..DeviceLossReport::default()
    };
    report.in_flight[0].history.last_dispatch = Some(first + 2);
    report.in_flight[0].history.runs = 3;
    send(&tx, ToDebugger::DeviceLost(Box::new(report))).unwrap();
    run_until(&mut h, "the loss", |a| {
        a.shared.session.as_ref().is_some_and(|s| s.loss.is_some())
    });
    h.run_steps(2);
    assert!(h.state().loss.open, "a lost device opens its window");
    assert_eq!(
        states(h.state()),
        vec![
            (5, DispatchState::Abandoned),
            (7, DispatchState::Lost),
            (8, DispatchState::Lost),
            (9, DispatchState::Lost),
        ]
    );
    assert_eq!(
        h.query_all_by_label("Device lost: VK_ERROR_DEVICE_LOST")
            .count(),
        2,
        "the banner and the window"
    );
    h.get_by_label("+ 3 lost, 1 abandoned");
    // The window's dispatch in flight opens its plan; its last run selects that dispatch.
    h.get_by_label(&format!("dispatch {}", first + 7)).click();
    h.run_steps(2);
    h.get_by_label_contains("Mapped against generation");
    h.get_by_label(&format!("last run: dispatch {}", first + 2))
        .click();
    h.run_steps(2);
    assert_eq!(h.state().shared.sel.dispatch, 2, "its program's last run");
    // Closed, Ctrl+D opens it again.
    h.state_mut().loss.open = false;
    h.run_steps(2);
    h.key_press_modifiers(Modifiers::COMMAND, Key::D);
    h.run_steps(2);
    assert!(h.state().loss.open);
}
