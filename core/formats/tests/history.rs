//! The write history against a brute-force oracle: each session is replayed step by step on an
//! engine, the bytes of guest memory are compared after every step, and for every byte that ever
//! changed, its history (from the sample's reports, and from the session written as a capture and
//! read through its index) must say the same value after every step, and name a write at every
//! step where the byte changed.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::collections::{BTreeMap, BTreeSet};

use dispatchscope_analysis::history::{History, Step as HStep, WriteKind};
use dispatchscope_core::{ByteRange, Engine};
use dispatchscope_formats::generate::{GenConfig, random_sample};
use dispatchscope_formats::history::{
    HistoryError, of_capture, of_sample, replay_sample, watched_range,
};
use dispatchscope_formats::sample::{Sample, Step};
use dispatchscope_formats::session::CaptureFile;
use dispatchscope_formats::shipped::{names, sample_text};

/// Every held page's bytes, by the page's first address.
fn snapshot<B: dispatchscope_core::Backend>(e: &Engine<B>) -> BTreeMap<u64, Vec<u8>> {
    e.memory()
        .content_pages()
        .map(|(p, b)| (p, b.to_vec()))
        .collect()
}

/// The byte at `a` in a snapshot (a page no content holds reads zero).
fn byte(s: &BTreeMap<u64, Vec<u8>>, page_bytes: u64, a: u64) -> u8 {
    let page = a & !(page_bytes - 1);
    s.get(&page).map_or(0, |p| p[(a - page) as usize])
}

/// The oracle: the session replayed step by step; for each step, the snapshot after it.
struct Oracle {
    steps: Vec<(HStep, BTreeMap<u64, Vec<u8>>)>,
    page_bytes: u64,
    /// Every byte that changed at some step.
    changed: BTreeSet<u64>,
    /// Steps before the first dispatch (the contents load then, as a replay loads them).
    before_contents: usize,
    /// Guest memory just after the contents loaded.
    contents: BTreeMap<u64, Vec<u8>>,
}

fn oracle(sample: &Sample) -> Oracle {
    let mut engine = Engine::cpu(sample.device.clone()).unwrap();
    let page_bytes = engine.memory().page_bytes();
    let mut steps = Vec::new();
    let mut last = snapshot(&engine);
    let mut changed = BTreeSet::new();
    let (mut events, mut dispatches) = (0u64, 0u64);
    let mut loaded = false;
    let mut before_contents = 0;
    let mut contents = BTreeMap::new();
    for step in &sample.steps {
        let s = match step {
            Step::Event(e) => {
                engine.apply(e).unwrap();
                events += 1;
                HStep::Event(events - 1)
            }
            Step::Dispatch(d) => {
                if !loaded {
                    for c in &sample.contents {
                        engine.try_load_contents(c.address, &c.bytes).unwrap();
                    }
                    loaded = true;
                    before_contents = steps.len();
                    // Contents are not a write: a change they make is no step's.
                    last = snapshot(&engine);
                    contents = last.clone();
                }
                engine.dispatch(d).unwrap();
                dispatches += 1;
                HStep::Dispatch(dispatches - 1)
            }
        };
        let now = snapshot(&engine);
        let pages: BTreeSet<u64> = last.keys().chain(now.keys()).copied().collect();
        for base in pages {
            for k in 0..page_bytes {
                let a = base + k;
                if byte(&last, page_bytes, a) != byte(&now, page_bytes, a) {
                    changed.insert(a);
                }
            }
        }
        steps.push((s, now.clone()));
        last = now;
    }
    Oracle {
        steps,
        page_bytes,
        changed,
        before_contents,
        contents,
    }
}

/// Checks `h` (of the one byte at `a`) against the oracle.
fn check(o: &Oracle, h: &History, a: u64, what: &str) {
    // The entries chain: each starts where the last one ended.
    let mut value = h.initial.0[0];
    for w in &h.writes {
        assert_eq!(
            w.before.0[0], value,
            "{what} {a:#x}: {w:?} does not start where the last ended"
        );
        value = w.after.0[0];
    }
    assert_eq!(h.last.0[0], value, "{what} {a:#x}: final");
    let mut by_step: BTreeMap<(u8, u64), Option<u8>> = BTreeMap::new();
    for w in &h.writes {
        let key = match w.kind.step() {
            HStep::Event(n) => (0, n),
            HStep::Dispatch(n) => (1, n),
        };
        by_step.insert(key, w.after.0[0]);
    }
    let mut prev = h.initial.0[0];
    let mut prev_oracle: Option<u8> = None;
    let mut seen_write = false;
    for (i, (s, snap)) in o.steps.iter().enumerate() {
        let key = match s {
            HStep::Event(n) => (0, *n),
            HStep::Dispatch(n) => (1, *n),
        };
        seen_write |= by_step.contains_key(&key);
        if i == o.before_contents {
            prev_oracle = Some(byte(&o.contents, o.page_bytes, a));
        }
        let got = by_step.get(&key).copied().unwrap_or(prev);
        let want = byte(snap, o.page_bytes, a);
        // Before the contents load, a history with no write yet holds its initial bytes (the
        // contents); the engine holds what the events left.
        if i < o.before_contents && !seen_write {
            prev_oracle = Some(want);
            continue;
        }
        assert_eq!(
            got,
            Some(want),
            "{what} {a:#x}: after {s:?} the engine holds {want:#04x}, the history {got:?}"
        );
        if let Some(p) = prev_oracle
            && p != want
        {
            assert!(
                by_step.contains_key(&key),
                "{what} {a:#x}: the byte changed at {s:?} and the history names no write there"
            );
        }
        prev_oracle = Some(want);
        prev = got;
    }
}

/// Runs the oracle over `sample`, its histories from reports and from a capture; returns the
/// kinds of write seen.
fn check_sample(sample: &Sample, what: &str) -> BTreeSet<&'static str> {
    let o = oracle(sample);
    let reports = sample.run().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.dscap");
    dispatchscope_formats::checkpoint::write_replayed_capture(sample, &path, |_| {}).unwrap();
    let mut file = CaptureFile::open(&path).unwrap();
    let mut kinds = BTreeSet::new();
    for &a in &o.changed {
        let range = ByteRange::new(a, a + 1);
        let h = of_sample(sample, &reports, range).unwrap();
        check(&o, &h, a, what);
        let c = of_capture(&mut file, range).unwrap();
        assert_eq!(c.writes, h.writes, "{what} {a:#x}: the capture's history");
        assert_eq!(c.initial, h.initial, "{what} {a:#x}");
        assert!(c.dispatches_read <= h.dispatches_read);
        for w in &h.writes {
            kinds.insert(match w.kind {
                WriteKind::Contents { .. } => "contents",
                WriteKind::CpuWrite { .. } => "cpu-write",
                WriteKind::DeferredCopy { .. } => "deferred-copy",
                WriteKind::ContentsLost { .. } => "contents-lost",
                WriteKind::DeviceStore { .. } => "device-store",
                WriteKind::CapturedStore { .. } => "captured-store",
                WriteKind::WriteBack { .. } => "write-back",
                WriteKind::NotRecorded { .. } => "not-recorded",
            });
        }
    }
    // A wider range: the same writes as the bytes' own, merged.
    if let Some(&a) = o.changed.iter().next() {
        let wide = of_sample(sample, &reports, ByteRange::new(a, a + 8)).unwrap();
        let c = of_capture(&mut file, ByteRange::new(a, a + 8)).unwrap();
        assert_eq!(c.writes, wide.writes, "{what}: 8 bytes");
    }
    kinds
}

#[test]
fn shipped_samples_match_the_oracle() {
    let mut kinds = BTreeSet::new();
    let mut n = 0;
    for name in names() {
        let Ok(sample) = Sample::from_json(sample_text(name).unwrap()) else {
            continue;
        };
        kinds.extend(check_sample(&sample, name));
        n += 1;
    }
    assert!(n >= 8, "{n} samples");
    // No shipped sample's CPU write changes a byte; the generated sessions' do.
    for k in [
        "deferred-copy",
        "write-back",
        "device-store",
        "contents-lost",
    ] {
        assert!(kinds.contains(k), "no shipped sample has a {k}: {kinds:?}");
    }
}

#[test]
fn generated_sessions_match_the_oracle() {
    let mut kinds = BTreeSet::new();
    for seed in 1..=6 {
        let cfg = GenConfig {
            dispatches: 6,
            accesses: 24,
            ..GenConfig::default()
        };
        let sample = random_sample(seed, cfg);
        kinds.extend(check_sample(&sample, &format!("seed {seed}")));
    }
    for k in ["cpu-write", "write-back", "device-store"] {
        assert!(
            kinds.contains(k),
            "no generated session has a {k}: {kinds:?}"
        );
    }
}

#[test]
fn bad_ranges_and_unreserved_bytes_are_named() {
    assert!(matches!(
        watched_range(0x1000, 0),
        Err(HistoryError::BadRange { .. })
    ));
    assert!(matches!(
        watched_range(u64::MAX, 2),
        Err(HistoryError::BadRange { .. })
    ));
    assert!(watched_range(0x1000, 65).is_err());
    let sample = Sample::from_json(sample_text("generations-revisits.json").unwrap()).unwrap();
    let e = replay_sample(&sample, ByteRange::new(0x10, 0x11)).unwrap_err();
    assert!(matches!(e, HistoryError::NotReserved { .. }), "{e}");
    assert!(e.to_string().contains("no reservation"), "{e}");
}
