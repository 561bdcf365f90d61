//! A snapshot of guest memory as events and contents that rebuild it on an empty engine, so that a
//! recording started in the middle of a game replays from its first record.
//!
//! What it restores exactly: every reservation and, page by page, its guest view, host protection,
//! backing and commit state; the write-watch's guards; the protected targets and whether each is
//! trusted; the deferred copies; the contents.
//! What it restores approximately: the write-watch's "written" notes are restored by writing one
//! byte of each written page back as it is (an [`Event::Write`]), and an untrusted target is
//! distrusted by writing back one of its bytes, which also notes that byte's page written (exact
//! when its page was written, as it is whenever a write distrusted it and no guard came since).
//! What it does not restore: the engine's mappings, chunk table and generation counter (a replay
//! maps everything afresh at its first device-addressed dispatch), and event and dispatch numbers
//! (a replay counts from 0; recorded reports keep the target's numbers).
//!
//! It is built on the game thread, in time and memory proportional to guest memory's contents.

use crate::protocol::SNAPSHOT_CONTENTS_BYTES;
use dispatchscope_core::addr::ByteRange;
use dispatchscope_core::input::{Event, HostProtection};
use dispatchscope_core::memory::{GuestMemory, PageRuns, PageState};
use dispatchscope_formats::sample::Contents;

/// The events that rebuild `memory` on an empty engine with the same page size, and its contents in
/// pieces of at most [`SNAPSHOT_CONTENTS_BYTES`] (load them before the next dispatch).
pub fn snapshot_of(memory: &GuestMemory) -> (Vec<Event>, Vec<Contents>) {
    let page = memory.page_bytes();
    let mut events = Vec::new();
    let mut guarded = Vec::new();
    let mut written = Vec::new();
    for r in memory.reservations() {
        let Some(first) = r.pages.first() else {
            continue;
        };
        events.push(Event::Reserve {
            range: r.range,
            readable: first.guest.readable,
            writable: first.guest.writable,
            committed: first.committed,
            backing: first.backing,
            host_base: None,
        });
        let at = |i: usize| r.range.start + i as u64 * page;
        // Each attribute: the runs of pages whose value differs from what the events before set.
        for (i, j, p) in runs(&r.pages, |p| p.guest) {
            if p.guest != first.guest {
                events.push(Event::Protect {
                    range: ByteRange::new(at(i), at(j)),
                    readable: p.guest.readable,
                    writable: p.guest.writable,
                });
            }
        }
        for (i, j, p) in runs(&r.pages, |p| (p.protection, protection_for(p))) {
            if p.protection != protection_for(&p) {
                events.push(Event::HostProtect {
                    range: ByteRange::new(at(i), at(j)),
                    protection: p.protection,
                });
            }
        }
        for (i, j, p) in runs(&r.pages, |p| p.backing) {
            if p.backing != first.backing {
                events.push(Event::SetBacking {
                    range: ByteRange::new(at(i), at(j)),
                    backing: p.backing,
                });
            }
        }
        for (i, j, p) in runs(&r.pages, |p| p.committed) {
            let range = ByteRange::new(at(i), at(j));
            match (first.committed, p.committed) {
                (true, false) => events.push(Event::Decommit { range }),
                (false, true) => events.push(Event::Commit { range }),
                _ => {}
            }
        }
        for (i, j, p) in runs(&r.pages, |p| p.guarded) {
            if p.guarded {
                guarded.push(ByteRange::new(at(i), at(j)));
            }
        }
        for (i, j, p) in runs(&r.pages, |p| p.written) {
            if p.written {
                written.push(ByteRange::new(at(i), at(j)));
            }
        }
    }
    // A guard clears the note, so guards first, then the notes (a write leaves guards alone).
    for range in guarded {
        events.push(Event::Guard { range });
    }
    for range in written {
        // One byte of each page notes it written; the byte is the page's own.
        let mut at = range.start;
        while at < range.end {
            events.push(one_byte_written(memory, at));
            at += page;
        }
    }
    // Untrusted targets are made, then distrusted; trusted ones are made after every write.
    for t in memory.targets().filter(|t| !t.trusted) {
        events.push(Event::AddTarget {
            id: t.id,
            name: t.name.clone(),
            range: t.range,
        });
        if !t.range.is_empty() && memory.reservation_at(t.range.start).is_some() {
            events.push(one_byte_written(memory, t.range.start));
        }
    }
    for t in memory.targets().filter(|t| t.trusted) {
        events.push(Event::AddTarget {
            id: t.id,
            name: t.name.clone(),
            range: t.range,
        });
    }
    for (address, bytes) in memory.deferred_copies() {
        events.push(Event::DeferCopy {
            address: *address,
            bytes: bytes.clone(),
        });
    }
    (events, contents_of(memory))
}

fn protection_for(p: &PageState) -> HostProtection {
    match (p.guest.readable, p.guest.writable) {
        (_, true) => HostProtection::ReadWrite,
        (true, false) => HostProtection::Read,
        (false, false) => HostProtection::None,
    }
}

/// Maximal runs `[i, j)` of pages with the same `key`, each with its first page.
fn runs<K: PartialEq>(
    pages: &PageRuns,
    key: impl Fn(&PageState) -> K,
) -> Vec<(usize, usize, PageState)> {
    let mut out: Vec<(usize, usize, PageState)> = Vec::new();
    for (first, end, p) in pages.runs() {
        let (i, j) = (first as usize, end as usize);
        match out.last_mut() {
            Some(last) if last.1 == i && key(&last.2) == key(p) => last.1 = j,
            _ => out.push((i, j, *p)),
        }
    }
    out
}

/// Guest contents in address order, contiguous pages joined, in pieces of at most
/// [`SNAPSHOT_CONTENTS_BYTES`].
fn contents_of(memory: &GuestMemory) -> Vec<Contents> {
    let mut pages: Vec<(u64, &[u8])> = memory.content_pages().collect();
    pages.sort_unstable_by_key(|(a, _)| *a);
    let mut out: Vec<Contents> = Vec::new();
    for (address, bytes) in pages {
        match out.last_mut() {
            Some(c)
                if c.address + c.bytes.len() as u64 == address
                    && c.bytes.len() + bytes.len() <= SNAPSHOT_CONTENTS_BYTES =>
            {
                c.bytes.extend_from_slice(bytes);
            }
            _ => out.push(Contents {
                address,
                bytes: bytes.to_vec(),
            }),
        }
    }
    out
}

/// A write of the byte at `at` as it is, to note its page written (D824) or distrust a target
/// over it (D720); a byte that cannot be read is noted written without inventing it.
fn one_byte_written(memory: &GuestMemory, at: u64) -> Event {
    let mut byte = [0u8; 1];
    match memory.read_bytes(at, &mut byte) {
        Ok(()) => Event::Write {
            address: at,
            bytes: byte.to_vec(),
        },
        Err(_) => Event::Wrote {
            range: ByteRange::new(at, at + 1),
        },
    }
}
