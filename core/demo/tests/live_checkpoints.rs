//! Checkpoints of engine state in live sessions (issue 18): a recording of the demo, reopened,
//! holds for every dispatch the state the target's engine held after it (the oracle: the test's
//! target keeps its own copy of each dispatch's state), under back-pressure too; and a state the
//! target could not send is marked unknown, never shown wrong.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "in a test, an unwrap is an assertion"
)]

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use common::{T, loopback, serial};
use dispatchscope_core::chunk_table::TableSlot;
use dispatchscope_demo::{Demo, DemoConfig};
use dispatchscope_formats::checkpoint::{MEMORY_UNKNOWN, MemoryState, StateAt, TABLE_UNKNOWN};
use dispatchscope_formats::session::CaptureFile;
use dispatchscope_live::{
    ClientOptions, Incoming, LiveClient, LiveStore, RecordOptions, StoreOptions, Tap, TapConfig,
    ToDebugger, record,
};

/// What the target's engine held after one dispatch.
#[derive(Clone, Debug, PartialEq)]
struct Held {
    memory: MemoryState,
    table: Option<Vec<TableSlot>>,
}

type Oracle = Arc<Mutex<HashMap<u64, Held>>>;

/// The demo in a thread, keeping the state its engine held after every dispatch.
struct Target {
    addr: String,
    oracle: Oracle,
    frames: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Target {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn spawn(config: TapConfig, demo: DemoConfig, fps: f64) -> Target {
    let oracle: Oracle = Arc::default();
    let frames = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let thread = {
        let (oracle, frames, stop) = (Arc::clone(&oracle), Arc::clone(&frames), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut tap = Tap::listen(config).unwrap();
            tx.send(tap.local_addr().unwrap().to_string()).unwrap();
            let mut demo = Demo::new(demo).unwrap();
            let frame = Duration::from_secs_f64(1.0 / fps);
            while !stop.load(Ordering::Relaxed) && frames.load(Ordering::Relaxed) < 20_000 {
                let t0 = Instant::now();
                demo.frame_each(&mut tap, |engine, _, report| {
                    oracle.lock().unwrap().insert(
                        report.index,
                        Held {
                            memory: MemoryState::of(engine.memory()),
                            table: engine.table().map(|t| t.slots().to_vec()),
                        },
                    );
                })
                .unwrap();
                frames.fetch_add(1, Ordering::Relaxed);
                if let Some(rest) = frame.checked_sub(t0.elapsed()) {
                    std::thread::sleep(rest);
                }
            }
        })
    };
    let addr = rx.recv_timeout(T).unwrap();
    Target {
        addr,
        oracle,
        frames,
        stop,
        thread: Some(thread),
    }
}

/// Asserts two tables are the same, naming the first slot that differs (not printing both).
fn same_table(got: Option<&[TableSlot]>, want: Option<&[TableSlot]>, index: u64) {
    match (got, want) {
        // No table yet on either side (a dispatch before the first one was built).
        (None, None) => {}
        (Some(g), Some(w)) if g.len() == w.len() => {
            if let Some(i) = (0..g.len()).find(|&i| g[i] != w[i]) {
                panic!(
                    "dispatch {index}'s chunk table: slot {i} is {:?}, the target held {:?}",
                    g[i], w[i]
                );
            }
        }
        (g, w) => panic!(
            "dispatch {index}'s chunk table: {:?} slots, the target held {:?}",
            g.map(<[_]>::len),
            w.map(<[_]>::len)
        ),
    }
}

/// The state a dispatch left follows it on the wire (often in the same frame): takes what
/// follows the last dispatch stored, up to the next dispatch (not stored), so that the last one
/// is not checked before its checkpoint arrived.
fn take_to_next_dispatch(client: &LiveClient, store: &mut LiveStore) {
    loop {
        match client.receiver().recv_timeout(T).unwrap() {
            Incoming::Message(ToDebugger::Received(_)) => break,
            Incoming::Message(m) => {
                store.take(m).unwrap();
            }
            Incoming::Disconnected { reason, .. } => panic!("{reason}"),
        }
    }
}

/// Checks the store's dispatch at `pos`, read back as the window reads it, against the oracle:
/// its memory and chunk table. Returns its index.
fn check_stored(store: &mut LiveStore, pos: usize, oracle: &Oracle) -> u64 {
    let index = store.record(pos).unwrap().1.index;
    let held = oracle.lock().unwrap()[&index].clone();
    match store.states().memory_state_at(pos) {
        StateAt::Known { record, .. } => {
            assert_eq!(store.memory_state(record).unwrap(), held.memory);
        }
        other => panic!("dispatch {index}: {other:?}"),
    }
    let table = store
        .table_at(pos)
        .unwrap()
        .map(|(_, _, t)| t.table.slots().to_vec());
    same_table(table.as_deref(), held.table.as_deref(), index);
    index
}

/// Checks every dispatch of the capture at `path` against the oracle; returns (dispatches,
/// memory records, dispatches whose memory is unknown).
fn check_against(path: &Path, oracle: &Oracle) -> (usize, usize, usize) {
    let mut file = CaptureFile::open(path).unwrap();
    let states = file.states();
    let n = file.n_dispatches();
    let oracle = oracle.lock().unwrap().clone();
    let mut unknown = 0;
    for pos in 0..n {
        let index = file.dispatch(pos).unwrap().report.unwrap().index;
        let held = &oracle[&index];
        match states.memory_state_at(pos) {
            StateAt::Known { record, .. } => {
                let (_, at, m) = file.memory_at(&states, pos).unwrap().unwrap();
                assert_eq!(at, record);
                assert_eq!(&m, &held.memory, "dispatch {index} (record position {pos})");
            }
            StateAt::Unknown { .. } => unknown += 1,
            StateAt::None => panic!("dispatch {index}: no memory checkpoint at or before it"),
        }
        match states.table_state_at(pos) {
            StateAt::Known { .. } => {
                let (_, _, t) = file.table_at(&states, pos).unwrap().unwrap();
                same_table(Some(t.table.slots()), held.table.as_deref(), index);
            }
            StateAt::Unknown { .. } => {}
            StateAt::None => assert!(held.table.is_none(), "dispatch {index} had a table"),
        }
    }
    let memory_records = file
        .records()
        .iter()
        .filter(|m| m.kind == dispatchscope_formats::checkpoint::MEMORY_STATE)
        .count();
    (n, memory_records, unknown)
}

#[test]
fn a_live_recording_reopened_holds_each_dispatchs_state_as_the_target_held_it() {
    let _s = serial();
    let target = spawn(
        loopback("checkpoint target"),
        DemoConfig {
            dispatches_per_frame: 12,
            ..DemoConfig::default()
        },
        500.0,
    );
    // Let the game run a while first, so that the recording begins mid-session.
    while target.frames.load(Ordering::Relaxed) < 20 {
        std::thread::sleep(Duration::from_millis(5));
    }
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("rec.dscap");
    let stop = AtomicBool::new(false);
    let summary = record(
        &target.addr,
        None,
        &dest,
        &RecordOptions {
            dispatches: Some(800),
            batch: 40,
            ..RecordOptions::default()
        },
        &stop,
        |_| {},
    )
    .unwrap();
    assert_eq!(summary.dispatches, 800);
    assert!(summary.checkpoints > 0);
    let (n, memory_records, unknown) = check_against(&dest, &target.oracle);
    assert_eq!(n, 800);
    assert_eq!(
        unknown, 0,
        "the default budget copies every change of the demo"
    );
    // Sent when the state changes, not every dispatch: the demo changes memory a few times a frame
    // (a CPU write, a target made again), at most once for each of its 12 dispatches.
    assert!(memory_records > 800 / 12, "{memory_records} memory records");
    assert!(
        memory_records < 800,
        "{memory_records} memory records for 800 dispatches"
    );
}

/// A window's store, fed by a debugger too slow for the target: the target drops dispatches
/// (and the checkpoints queued with them), and every dispatch recorded still shows the state its
/// dispatch left, read back from the live store's file while it is written and from the file
/// reopened.
#[test]
fn dropped_checkpoints_never_make_a_dispatch_show_a_wrong_state() {
    let _s = serial();
    let target = spawn(
        TapConfig {
            queue_capacity: 16,
            ..loopback("slow debugger target")
        },
        DemoConfig {
            dispatches_per_frame: 10,
            ..DemoConfig::default()
        },
        2000.0,
    );
    let client = LiveClient::connect_with(
        &target.addr,
        &ClientOptions {
            snapshot: true,
            keep_received: true,
            channel_capacity: 4,
            ..ClientOptions::default()
        },
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("window.dscap");
    let mut store = LiveStore::create(
        &dest,
        "slow window",
        &StoreOptions {
            window: 0,
            keep_rows: false,
            ..StoreOptions::default()
        },
    );
    let t0 = Instant::now();
    let mut taken = 0usize;
    while store.len() < 400 {
        assert!(t0.elapsed() < T * 3, "{} dispatches stored", store.len());
        match client.receiver().recv_timeout(T).unwrap() {
            Incoming::Message(m) => {
                let dispatch = matches!(m, ToDebugger::Received(_));
                store.take(m).unwrap();
                if dispatch {
                    taken += 1;
                    // A debugger slower than the game: the target's queue fills and drops.
                    if taken.is_multiple_of(8) {
                        std::thread::sleep(Duration::from_millis(3));
                    }
                }
            }
            Incoming::Disconnected { reason, .. } => panic!("{reason}"),
        }
    }
    take_to_next_dispatch(&client, &mut store);
    let dropped = store.summary().dropped;
    assert!(
        dropped > 0,
        "the target dropped nothing: the test did not push it"
    );
    // Read back from the store while it is being written, as the window does.
    for pos in (0..store.len()).step_by(7) {
        check_stored(&mut store, pos, &target.oracle);
    }
    let _ = client.detach(Duration::from_secs(1));
    store.finish().unwrap();
    let (n, _, unknown) = check_against(&dest, &target.oracle);
    assert!(n >= 400);
    assert_eq!(unknown, 0);
    eprintln!("{n} dispatches recorded, {dropped} dropped, every state as the target held it");
}

/// A target that may not spend time copying its state (a budget of 0) sends each change as
/// unknown: the recording says so from the first dispatch, and never holds a state.
#[test]
fn a_state_the_target_could_not_copy_is_unknown_not_wrong() {
    let _s = serial();
    let target = spawn(
        TapConfig {
            checkpoint_share: 0.0,
            ..loopback("no budget target")
        },
        DemoConfig::default(),
        500.0,
    );
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("unknown.dscap");
    let stop = AtomicBool::new(false);
    record(
        &target.addr,
        None,
        &dest,
        &RecordOptions {
            dispatches: Some(100),
            batch: 25,
            ..RecordOptions::default()
        },
        &stop,
        |_| {},
    )
    .unwrap();
    let mut file = CaptureFile::open(&dest).unwrap();
    let states = file.states();
    assert!(!states.has_memory());
    let unknowns: Vec<usize> = file
        .records()
        .iter()
        .enumerate()
        .filter(|(_, m)| m.kind == MEMORY_UNKNOWN || m.kind == TABLE_UNKNOWN)
        .map(|(i, _)| i)
        .collect();
    assert!(!unknowns.is_empty());
    for pos in 0..file.n_dispatches() {
        let StateAt::Unknown { record, .. } = states.memory_state_at(pos) else {
            panic!("dispatch {pos}: {:?}", states.memory_state_at(pos));
        };
        let why = file.unknown_why(record).unwrap();
        assert!(why.contains("budget"), "{why}");
        assert!(file.table_at(&states, pos).unwrap().is_none());
    }
}

/// A window's store under a disk budget of 768 KiB (segments of 256 KiB): the session rolls
/// into files of its own, the oldest are deleted so the files never exceed the budget, a
/// released dispatch is a named error, and every dispatch still on disk shows the state its
/// dispatch left: read back while the session is written and from each file reopened alone.
#[test]
fn a_disk_budget_deletes_the_oldest_files_and_every_kept_dispatch_keeps_its_state() {
    let _s = serial();
    let target = spawn(
        loopback("budget target"),
        DemoConfig {
            dispatches_per_frame: 12,
            ..DemoConfig::default()
        },
        1000.0,
    );
    let client = LiveClient::connect_with(
        &target.addr,
        &ClientOptions {
            snapshot: true,
            keep_received: true,
            ..ClientOptions::default()
        },
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("budget.dscap");
    let budget = 768 << 10;
    let mut store = LiveStore::create(
        &dest,
        "budget",
        &StoreOptions {
            window: 0,
            keep_rows: false,
            disk_budget: Some(budget),
            ..StoreOptions::default()
        },
    );
    let figures = store.figures();
    let mut indices = Vec::new();
    let mut most_on_disk = 0u64;
    let t0 = Instant::now();
    while store.released().files < 3 || store.len() < indices.len().max(1) {
        assert!(t0.elapsed() < T * 6, "{} dispatches stored", store.len());
        match client.receiver().recv_timeout(T).unwrap() {
            Incoming::Message(m) => {
                let index = match &m {
                    ToDebugger::Received(d) => Some(d.index),
                    _ => None,
                };
                let stored = store.take(m).unwrap();
                // What another thread reads without the lock is the store's own figures.
                assert_eq!(
                    (figures.dispatches(), figures.state_records()),
                    (store.len(), store.states().len())
                );
                assert_eq!(figures.released(), store.released());
                assert_eq!(figures.bytes_on_disk(), store.bytes_on_disk());
                if stored && let Some(i) = index {
                    indices.push(i);
                    let on_disk: u64 = store
                        .files()
                        .iter()
                        .map(|f| std::fs::metadata(f).map_or(0, |m| m.len()))
                        .sum();
                    most_on_disk = most_on_disk.max(on_disk.max(store.bytes_on_disk()));
                }
            }
            Incoming::Disconnected { reason, .. } => panic!("{reason}"),
        }
    }
    take_to_next_dispatch(&client, &mut store);
    let _ = client.detach(Duration::from_secs(1));
    assert_eq!(store.len(), indices.len());
    let released = store.released();
    assert!(
        released.dispatches > 0 && released.files >= 3,
        "{released:?}"
    );
    // The budget holds, up to the one record that closes a file.
    assert!(
        most_on_disk <= budget + (64 << 10),
        "{most_on_disk} bytes on disk under a budget of {budget}"
    );
    let kept = store.files();
    for gone in store.files_made().iter().filter(|f| !kept.contains(f)) {
        assert!(
            !gone.exists(),
            "{} was released but is still there",
            gone.display()
        );
    }
    assert_eq!(kept.len() + released.files, store.files_made().len());
    // A released dispatch is a named error; the first kept one reads back.
    let err = store.report(released.dispatches - 1).unwrap_err();
    assert!(
        matches!(err, dispatchscope_live::StoreError::Released { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("no longer on disk"), "{err}");
    for pos in (released.dispatches..store.len()).step_by(5) {
        let index = check_stored(&mut store, pos, &target.oracle);
        assert_eq!(index, indices[pos], "position {pos}");
    }
    assert!(!figures.finished());
    store.finish().unwrap();
    assert!(figures.finished());
    // Each file still on disk is a capture of its own, every dispatch with its state.
    let mut n = 0;
    for f in &kept {
        let (k, _, unknown) = check_against(f, &target.oracle);
        assert!(k > 0, "{} holds no dispatch", f.display());
        assert_eq!(unknown, 0, "{}", f.display());
        n += k;
    }
    assert_eq!(n, indices.len() - released.dispatches);
    eprintln!(
        "{} dispatches, {} released in {} files ({} bytes); {} files kept, at most {most_on_disk} bytes on disk",
        indices.len(),
        released.dispatches,
        released.files,
        released.bytes,
        kept.len()
    );
}

/// `record` under a disk budget writes the session as files and deletes the oldest; the summary
/// says how many files and dispatches went, and each file left holds its dispatches' states.
#[test]
fn record_under_a_disk_budget_rolls_its_files() {
    let _s = serial();
    let target = spawn(
        loopback("record budget target"),
        DemoConfig {
            dispatches_per_frame: 12,
            ..DemoConfig::default()
        },
        1000.0,
    );
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("rolled.dscap");
    let stop = AtomicBool::new(false);
    let summary = record(
        &target.addr,
        None,
        &dest,
        &RecordOptions {
            dispatches: Some(600),
            batch: 50,
            disk_budget: Some(768 << 10),
            ..RecordOptions::default()
        },
        &stop,
        |_| {},
    )
    .unwrap();
    assert_eq!(summary.dispatches, 600);
    assert!(summary.files > 2 && summary.released > 0, "{summary:?}");
    assert!(!dest.exists(), "the first file went first");
    let mut n = 0;
    for k in 0..summary.files as usize {
        let f = dispatchscope_live::store::segment_path(&dest, k);
        if f.exists() {
            let (held, _, unknown) = check_against(&f, &target.oracle);
            assert_eq!(unknown, 0);
            n += held;
        }
    }
    assert_eq!(n as u64, summary.dispatches - summary.released);
}
