//! `history FILE ADDRESS [--bytes N] [--json]`: every write a session made to the bytes at an
//! address, in order, with the bytes before and after each (CPU writes and deferred copies,
//! decommits and releases, device stores, holders' write-backs).
//!
//! A sample is replayed on the CPU reference; a capture is read through its index, only the
//! records that can touch the bytes (`dispatchscope_formats::history`).
//! Bad input exits 2 ([`BadInput`]): a file that is neither a sample nor a capture or is damaged,
//! a sample that does not replay, an address that is not a number, a byte count outside 1–64 or
//! bytes that wrap, and bytes no reserve event of the session holds (nothing can write them, so
//! the address is taken for a mistake rather than answered with an empty history).

use std::path::PathBuf;

use dispatchscope_analysis::history::{HISTORY_SCHEMA, History};
use dispatchscope_core::ByteRange;
use dispatchscope_formats::history::{of_capture, replay_sample, watched_range};
use dispatchscope_formats::session::{self, Opened};

use crate::load::{BadInput, torn_note};

/// `history`'s flags.
#[derive(Debug, clap::Args)]
pub struct HistoryArgs {
    /// The sample or capture.
    pub file: PathBuf,
    /// The guest address (`0x…` or decimal).
    pub address: String,
    /// Bytes to watch from ADDRESS, 1 to 64.
    #[arg(long, default_value_t = 4)]
    pub bytes: u64,
    /// Print the history as JSON (schema `dispatchscope.history/1`).
    #[arg(long)]
    pub json: bool,
}

/// Runs `history`.
pub fn history_cmd(args: &HistoryArgs) -> anyhow::Result<()> {
    let address = dispatchscope_core::addr::parse_u64(&args.address).ok_or_else(|| {
        BadInput(format!(
            "address {:?} is not a number (write 0x… or decimal)",
            args.address
        ))
    })?;
    let range = watched_range(address, args.bytes).map_err(|e| BadInput(e.to_string()))?;
    let h = history_of(&args.file, range)?;
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&h)?)?;
    } else {
        crate::out!("{}", text(&h, &args.file.display().to_string()))?;
    }
    Ok(())
}

/// The history of `range` in the session at `path`; every failure is [`BadInput`].
pub fn history_of(path: &std::path::Path, range: ByteRange) -> anyhow::Result<History> {
    let bad = |e: &dyn std::fmt::Display| BadInput(format!("{}: {e}", path.display()));
    match session::open(path).map_err(|e| BadInput(e.to_string()))? {
        Opened::Sample(sample) => Ok(replay_sample(&sample, range).map_err(|e| bad(&e))?),
        Opened::Capture(mut file) => {
            if let Some(note) = torn_note(&file) {
                eprintln!("dispatchscope: warning: {}: {note}", path.display());
            }
            Ok(of_capture(&mut file, range).map_err(|e| bad(&e))?)
        }
    }
}

/// The history as text a person reads: one line a write, then its note.
pub fn text(h: &History, file: &str) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "history of {} ({} bytes) in {file}: {} writes over {} events and {} dispatches ({} read whole)",
        h.range,
        h.range.size_bytes(),
        h.writes.len(),
        h.events,
        h.dispatches,
        h.dispatches_read
    );
    let _ = writeln!(
        s,
        "bytes in memory order, two hex digits a byte, ?? where the session does not say"
    );
    let _ = writeln!(
        s,
        "initial  {}  (the session's contents; zero where they hold none)",
        h.initial.text()
    );
    for (i, w) in h.writes.iter().enumerate() {
        let _ = writeln!(
            s,
            "{:>4}. {:<19} {}  →  {}   {}",
            i + 1,
            w.kind.name(),
            w.before.text(),
            w.after.text(),
            w.kind.who()
        );
        if let dispatchscope_analysis::history::WriteKind::WriteBack { stores, .. } = &w.kind
            && !stores.is_empty()
        {
            let list: Vec<String> = stores.iter().map(usize::to_string).collect();
            let _ = writeln!(s, "        bound stores: access {}", list.join(", "));
        }
        if w.range != h.range {
            let _ = writeln!(s, "        wrote {}", w.range);
        }
        if let Some(note) = &w.note {
            let _ = writeln!(s, "        note: {note}");
        }
    }
    let _ = writeln!(s, "final    {}", h.last.text());
    let _ = writeln!(s, "schema {HISTORY_SCHEMA} (--json)");
    s
}
