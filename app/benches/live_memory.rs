//! Issue 18's figures for the window's live session, without a window: the debugger's memory
//! after 1,000,000 dispatches (and, with `LIVE_MEMORY_DISPATCHES=10000000`, after ten million),
//! selecting a dispatch that is only on disk, and a search over every row.
//!
//! Real demo dispatches are collected once from a demo target in this process (a live client with
//! a snapshot), then fed to a `LiveLink` (`LiveLink::fed`: its intake thread writes each to the
//! store's file and makes its row) and its `Session` (`LiveLink::drain`, as the window does each
//! frame: the rows and the latest reports), renumbered, as fast as this process can. The resident set (`VmRSS`) and its
//! peak (`VmHWM`) are read from `/proc/self/status` at every 10 % of the run. Set
//! `LIVE_MEMORY_SLIM=1` to feed the dispatches with their mapping lists cut (a smaller file on
//! disk: the debugger's memory does not depend on a report's size, only the file does), and
//! `LIVE_MEMORY_TINY=1` to cut their access lists too (a feed several times faster, for ten
//! million dispatches in minutes; the memory a dispatch costs is the same).
//!
//! Run: `cargo bench -p dispatchscope --bench live_memory` (a bench binary, not criterion: one
//! run is the figure).

#![allow(missing_docs, reason = "bench")]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "bench")]

use dispatchscope::{gui, live_feed};
use std::time::Instant;

use dispatchscope_live::ToDebugger;
use dispatchscope_views::{Filter, Finder};
use gui::{DemoTarget, LiveLink, Session};
use live_feed::{drain_until, send};

fn status_kib(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is read from the command line.
    let n: u64 = std::env::var("LIVE_MEMORY_DISPATCHES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let slim = std::env::var("LIVE_MEMORY_SLIM").is_ok_and(|v| v == "1");
    let tiny = std::env::var("LIVE_MEMORY_TINY").is_ok_and(|v| v == "1");
    let demo = DemoTarget::start(None).expect("the demo");
    let addr = demo.addr.to_string();
    let mut feed = live_feed::Feed::collect(&addr, 400).unwrap();
    if slim || tiny {
        for m in &mut feed.dispatches {
            if tiny && let ToDebugger::Dispatch { input, report, .. } = m {
                input.accesses.clear();
                report.accesses.clear();
            }
            if let ToDebugger::Dispatch { report, .. } = m
                && let Some(mappings) = &mut report.mappings
            {
                mappings.pieces.clear();
                mappings.left_out.clear();
                mappings.runs.clear();
            }
        }
    }
    let report_bytes: usize = feed
        .dispatches
        .iter()
        .filter_map(|m| match m {
            ToDebugger::Dispatch { report, .. } => serde_json::to_vec(report).ok(),
            _ => None,
        })
        .map(|v| v.len())
        .sum::<usize>()
        / feed.dispatches.len();
    drop(demo);
    let (mut link, tx) =
        LiveLink::fed(&addr, "the demo", std::sync::Arc::new(|| {})).expect("a fed link");
    let mut session = Session::live(&addr, "live memory bench".into(), link.store());
    for m in &feed.start {
        send(&tx, m.clone()).unwrap();
    }
    let first = feed.first_index();
    let base = status_kib("VmRSS:");
    println!(
        "live_memory: {n} dispatches, {} templates of {report_bytes} JSON bytes a report{}; RSS before feeding {:.1} MiB",
        feed.dispatches.len(),
        if tiny {
            " (mapping and access lists cut)"
        } else if slim {
            " (mapping lists cut)"
        } else {
            ""
        },
        mib(base)
    );
    let t = Instant::now();
    let step = (n / 10).max(1);
    for i in 0..n {
        send(&tx, feed.dispatch(first, i).unwrap()).unwrap();
        if i % 1024 == 0 {
            link.drain(&mut session);
        }
        if (i + 1) % step == 0 {
            drain_until(&mut link, &mut session, i + 1).unwrap();
            println!(
                "  {:>9} dispatches: RSS {:7.1} MiB (peak {:7.1}), rows {:6.1} MiB ({:.1} B a dispatch), reports held {}, {:.0} dispatches/s",
                i + 1,
                mib(status_kib("VmRSS:")),
                mib(status_kib("VmHWM:")),
                session.rows.heap_bytes() as f64 / (1 << 20) as f64,
                session.rows.heap_bytes() as f64 / (i + 1) as f64,
                session.reports.held(),
                (i + 1) as f64 / t.elapsed().as_secs_f64()
            );
        }
    }
    drain_until(&mut link, &mut session, n).unwrap();
    if let Some(e) = &link.record_error {
        println!("  the recording stopped: {e}");
    }
    assert_eq!(session.rows.len() as u64, n);
    assert_eq!(link.stored() as u64, n);
    // Selecting dispatches that are only on disk: the first, and spread over the session.
    let mut worst = 0f64;
    let mut total = 0f64;
    let picks: Vec<usize> = (0..20).map(|k| (k * (n as usize / 20)).max(1)).collect();
    for (k, &pos) in std::iter::once(&0).chain(&picks).enumerate() {
        let t = Instant::now();
        session.prepare(pos).expect("read back");
        let r = session.reports.get(pos).expect("the report");
        let ms = t.elapsed().as_secs_f64() * 1e3;
        assert_eq!(r.index, first + pos as u64);
        if k == 0 {
            println!("  select dispatch 0 (on disk only): {ms:.2} ms");
        }
        worst = worst.max(ms);
        total += ms;
    }
    println!(
        "  select 21 dispatches on disk only: mean {:.2} ms, worst {worst:.2} ms",
        total / 21.0
    );
    // A search over every row, from scratch, and a keystroke onto it.
    let mut finder = Finder::default();
    let (hits, ms) = search(&mut finder, &session.rows, "traversal 77");
    println!("  search \"traversal 77\" over {n} rows: {hits} hits in {ms:.1} ms");
    let (hits, ms) = search(&mut finder, &session.rows, "traversal 777");
    println!("  keystroke \"traversal 777\": {hits} hits in {ms:.2} ms");
    println!(
        "  end: RSS {:.1} MiB, peak {:.1} MiB; store file {:.1} MiB",
        mib(status_kib("VmRSS:")),
        mib(status_kib("VmHWM:")),
        std::fs::metadata(link.recording_path()).map_or(0, |m| m.len()) as f64 / (1 << 20) as f64
    );
    reopen(link, tx, session, first);
}

/// Searches `rows` for `text` with `finder`: the hits and the milliseconds.
fn search(finder: &mut Finder, rows: &dispatchscope_views::Rows, text: &str) -> (usize, f64) {
    let f = Filter {
        search: text.into(),
        ..Filter::default()
    };
    let t = Instant::now();
    let hits = finder.find(rows, &f, &[]).len();
    (hits, t.elapsed().as_secs_f64() * 1e3)
}

fn scan_asked() -> bool {
    std::env::var("LIVE_MEMORY_SCAN").is_ok_and(|v| v == "1")
}

/// Ends the session (the feed stops, as a target that goes), finishes its recording, and opens
/// each of its files as the window opens a capture: the time to the first dispatch shown, the
/// resident memory, and a search over the reopened rows. Removes the files after.
fn reopen(
    mut link: LiveLink,
    tx: std::sync::mpsc::SyncSender<dispatchscope_live::Incoming>,
    mut session: Session,
    first: u64,
) {
    use gui::session::{Progress, Source, load_file};
    drop(tx);
    while link.is_attached() {
        link.drain(&mut session);
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    drop(session);
    let store = link.store().lock().unwrap().take().expect("the recording");
    let files = store.files_made();
    let kept = store.files();
    let released = store.released();
    let summary = store.finish().expect("finish the recording");
    println!(
        "  recording: {} dispatches, {} bytes in {} files, {} released",
        summary.dispatches,
        summary.bytes,
        kept.len(),
        released.dispatches
    );
    let mut pos0 = 0u64;
    for f in &kept {
        let bytes = std::fs::metadata(f).map_or(0, |m| m.len());
        let before = status_kib("VmRSS:");
        let t = Instant::now();
        let mut s = load_file(f, Source::File(f.clone()), &Progress::default()).expect("reopen");
        s.prepare(0).expect("its first dispatch");
        let index = s.reports.get(0).expect("the first report").index;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        assert_eq!(index, first + pos0);
        // The rows come from a background scan of every record, as in the window.
        // It reads every report (about a minute a million here): at ten million it is skipped
        // unless LIVE_MEMORY_SCAN=1 asks for it, and the search below then sees no rows.
        let scan = Instant::now();
        if s.reports.len() <= 2_000_000 || scan_asked() {
            s.finish_rows();
        }
        let scan_ms = scan.elapsed().as_secs_f64() * 1e3;
        let (hits, search_ms) = search(&mut Finder::default(), &s.rows, "traversal 77");
        println!(
            "  reopened {} ({:.1} MiB, {} dispatches, {} rows): first dispatch shown in {ms:.0} ms, every row in {scan_ms:.0} ms more, RSS +{:.1} MiB (peak {:.1}); search {:?}: {hits} hits in {:.1} ms",
            f.display(),
            bytes as f64 / (1 << 20) as f64,
            s.reports.len(),
            s.rows.len(),
            mib(status_kib("VmRSS:").saturating_sub(before)),
            mib(status_kib("VmHWM:")),
            "traversal 77",
            search_ms
        );
        pos0 += s.reports.len() as u64;
    }
    drop(link);
    for f in files {
        let _ = std::fs::remove_file(f);
    }
}
