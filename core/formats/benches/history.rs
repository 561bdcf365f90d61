//! Issue 15's figure: the write history of one address over a capture, read through its index.
//!
//! `cargo bench -p dispatchscope-formats --bench history -- CAPTURE ADDRESS [RUNS]` (defaults: the
//! 1 GiB capture `/work/big/g2.dscap`, an address its dispatches write back, 5 runs). Each run opens
//! the capture and makes the history, as `dispatchscope history` does; the first run reads a cold
//! page cache only if nothing read the file before.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "bench")]

use std::time::{Duration, Instant};

use dispatchscope_formats::history::{of_capture, watched_range};
use dispatchscope_formats::session::CaptureFile;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let path = args.first().map_or("/work/big/g2.dscap", String::as_str);
    let address = args
        .get(1)
        .and_then(|a| dispatchscope_core::addr::parse_u64(a))
        .unwrap_or(0x14_0020_0f00);
    let runs: usize = args.get(2).and_then(|r| r.parse().ok()).unwrap_or(5);
    let range = watched_range(address, 4).unwrap();
    let mut times: Vec<Duration> = Vec::new();
    let mut last = None;
    for _ in 0..runs {
        let t = Instant::now();
        let mut file = CaptureFile::open(std::path::Path::new(path)).unwrap();
        let h = of_capture(&mut file, range).unwrap();
        times.push(t.elapsed());
        last = Some((h, file.len_bytes(), file.n_dispatches()));
    }
    times.sort();
    // Where the time goes: each kind of record read alone, through the index.
    if std::env::var_os("HISTORY_PHASES").is_some() {
        use dispatchscope_formats::capture::RecordKind;
        let t = Instant::now();
        let mut file = CaptureFile::open(std::path::Path::new(path)).unwrap();
        println!("open: {:?}", t.elapsed());
        let records = file.records().to_vec();
        for (kind, name) in [
            (RecordKind::MEMORY, "MEMORY prefixes"),
            (RecordKind::EVENTS, "EVENTS"),
            (RecordKind::DISPATCH, "DISPATCH"),
        ] {
            let t = Instant::now();
            let mut bytes = 0usize;
            for (i, m) in records.iter().enumerate() {
                if m.kind == kind {
                    bytes += if kind == RecordKind::MEMORY {
                        file.read_prefix(i, 12).unwrap().len()
                    } else {
                        file.read_record(i).unwrap().len()
                    };
                }
            }
            println!("{name}: {:?} ({bytes} bytes)", t.elapsed());
        }
    }
    let (h, bytes, n) = last.unwrap();
    println!(
        "history of {range} over {path} ({bytes} bytes, {n} dispatches): {} writes, {} dispatches read whole",
        h.writes.len(),
        h.dispatches_read
    );
    println!(
        "runs {runs}: min {:.3} s, median {:.3} s, max {:.3} s",
        times[0].as_secs_f64(),
        times[times.len() / 2].as_secs_f64(),
        times[times.len() - 1].as_secs_f64()
    );
}
