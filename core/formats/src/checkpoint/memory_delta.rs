//! Guest memory's checkpoints as changes (issue 41): with 16 GiB mapped and a write-watch that
//! guards and releases a thousand pages a frame, the state has thousands of runs, and a copy of
//! it after every dispatch grows with the state, not with what changed.
//!
//! - [`MemoryDelta`]: what changed since a [`GuestMemory::state_changes`] count, made from the
//!   engine's log ([`GuestMemory::changed_since`]) by [`MemoryDelta::since`]: the page runs over
//!   the changed bytes only (as [`MemoryState::of`] makes runs, for those bytes), the reservations
//!   made or released (each cleared range and the reservations now in it, whole), and the targets
//!   changed (each id's target now, or none). A delta with `whole` set is the whole state (the
//!   changes to an empty memory): the binary form of a whole checkpoint.
//! - [`MemoryImage`]: a state a writer or a reader holds and applies deltas to; each reservation's
//!   pages are a [`PageRuns`], so applying a run costs O(log runs).
//! - [`MemoryWriter`]: the payload for each change, a delta or the whole state (after
//!   [`MAX_MEMORY_DELTAS`] deltas, or once the deltas since the last whole one outweigh it), as
//!   [`super::TableWriter`] does for the table.
//!
//! # Layout of the binary form (a MEMORY_STATE record's payload, or a live memory part)
//!
//! `v` is a LEB128 varint of at most 10 bytes; pages are counted in `page_bytes` from address 0.
//!
//! | field | meaning |
//! |---|---|
//! | magic `[u8; 4]` | [`MEMORY_DELTA_MAGIC`] (`DSMD`) |
//! | version `u32` LE | [`MEMORY_DELTA_VERSION`] (1); any other is refused by name |
//! | form `u8` | 0: the whole state; 1: changes to the state of the record before |
//! | `v` page_bytes | a power of two |
//! | `v` n, then n × (`v` first page, `v` pages) | cleared ranges: every reservation over one is gone (changes only; none in a whole state) |
//! | `v` n, then n × (`v` first page, `v` pages, `v` runs, runs × (`v` pages, state `u8`)) | reservations added whole, their runs covering them |
//! | `v` n, then n × (`v` pages since the last run's end, `v` pages, state `u8`) | page runs in address order, each inside one reservation |
//! | `v` n, then n × (`v` id, `u8` 0 gone / 1 trusted / 2 not trusted, then unless gone: `v` start, `v` bytes, `v` name bytes, the name in UTF-8) | targets |
//!
//! A state byte: bit 0 guest-readable, 1 guest-writable, 2 committed, 3 shared backing, 4–5 host
//! protection (0 none, 1 read, 2 read-write), 6 guarded, 7 written.
//!
//! Every count is checked against the bytes left before anything is allocated; every bad byte is a
//! named [`CheckpointError`], never a panic. This module never reads a file.

use std::collections::BTreeMap;

use dispatchscope_core::addr::ByteRange;
use dispatchscope_core::input::{Backing, HostProtection};
use dispatchscope_core::memory::{
    GuestMemory, GuestView, PageRuns, PageState, ProtectedTarget, StateChange,
};

use super::{CheckpointError, MemoryState, PageRunState, ReservationState};
use crate::versions::{MEMORY_DELTA_MAGIC, MEMORY_DELTA_VERSION};

/// The most deltas between two whole memory records, so that rebuilding a state reads at most
/// this many records plus one. A delta of a frame's few toggled pages is tens of bytes and a whole
/// state of a busy write-watch over 16 GiB hundreds of kilobytes: the chain is long so that the
/// whole states it ends with stay a small part of what is sent (`benches/memory_delta.rs`).
pub const MAX_MEMORY_DELTAS: usize = 1023;

/// Bytes before the form byte: the magic and the version.
const HEAD_BYTES: usize = 8;

/// Pages in one state, at an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunAt {
    /// The first byte (page-aligned).
    pub start: u64,
    /// How many pages.
    pub pages: u64,
    /// Their state.
    pub page: PageState,
}

/// One target's change: the target as it is now, or `None` where it is gone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetChange {
    /// Its id.
    pub id: u32,
    /// What it is now.
    pub now: Option<ProtectedTarget>,
}

/// Guest memory's changes since a state before it, or (`whole`) the whole state; see the module
/// docs. Applied in order: cleared ranges, reservations, runs, targets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryDelta {
    /// The whole state (changes to an empty memory), not changes to the state before.
    pub whole: bool,
    /// The host page size.
    pub page_bytes: u64,
    /// Ranges every reservation over which is gone before [`Self::reservations`] are added.
    pub cleared: Vec<ByteRange>,
    /// Reservations added, whole.
    pub reservations: Vec<ReservationState>,
    /// Pages whose state is now this, in address order.
    pub runs: Vec<RunAt>,
    /// Targets added, changed or gone.
    pub targets: Vec<TargetChange>,
}

/// Sorts `ranges` and joins those that overlap or touch.
fn join_ranges(ranges: &mut Vec<ByteRange>) {
    ranges.sort_unstable_by_key(|r| r.start);
    let mut out: Vec<ByteRange> = Vec::with_capacity(ranges.len());
    for r in ranges.drain(..) {
        match out.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    *ranges = out;
}

impl MemoryDelta {
    /// What changed in `memory` since [`GuestMemory::state_changes`] read `count`: the runs over
    /// the pages that changed, the reservations made or released, the targets changed. `None`
    /// when the engine's log no longer reaches back to `count` (the caller copies the whole
    /// state, [`MemoryState::of`]). Costs the changes and the runs over their pages, never a pass
    /// over the reservations' runs.
    pub fn since(memory: &GuestMemory, count: u64) -> Option<Self> {
        let mut pages: Vec<ByteRange> = Vec::new();
        let mut cleared: Vec<ByteRange> = Vec::new();
        let mut ids: Vec<u32> = Vec::new();
        for c in memory.changed_since(count)? {
            match *c {
                StateChange::Pages(r) => pages.push(r),
                StateChange::Reservation(r) => cleared.push(r),
                StateChange::Target(id) => ids.push(id),
            }
        }
        join_ranges(&mut pages);
        join_ranges(&mut cleared);
        ids.sort_unstable();
        ids.dedup();
        let page_bytes = memory.page_bytes();
        let in_cleared = |r: &ByteRange| {
            let i = cleared.partition_point(|c| c.end <= r.start);
            cleared.get(i).is_some_and(|c| c.contains_range(r))
        };
        let reservations = if cleared.is_empty() {
            Vec::new()
        } else {
            memory
                .reservations()
                .filter(|r| {
                    let i = cleared.partition_point(|c| c.end <= r.range.start);
                    cleared.get(i).is_some_and(|c| c.overlaps(&r.range))
                })
                .map(ReservationState::of)
                .collect()
        };
        let mut runs = Vec::new();
        for r in pages.iter().filter(|r| !in_cleared(r)) {
            memory.for_page_runs(*r, |run, p| {
                runs.push(RunAt {
                    start: run.start,
                    pages: run.size_bytes() / page_bytes,
                    page: *p,
                });
            });
        }
        let targets = ids
            .into_iter()
            .map(|id| TargetChange {
                id,
                now: memory.target(id).cloned(),
            })
            .collect();
        Some(Self {
            whole: false,
            page_bytes,
            cleared,
            reservations,
            runs,
            targets,
        })
    }

    /// The whole of `state` in the binary form.
    pub fn whole_of(state: &MemoryState) -> Self {
        Self {
            whole: true,
            page_bytes: state.page_bytes,
            cleared: Vec::new(),
            reservations: state.reservations.clone(),
            runs: Vec::new(),
            targets: state
                .targets
                .iter()
                .map(|t| TargetChange {
                    id: t.id,
                    now: Some(t.clone()),
                })
                .collect(),
        }
    }

    /// Whether it changes nothing (changes, not a whole state, with no part).
    pub fn is_empty(&self) -> bool {
        !self.whole
            && self.cleared.is_empty()
            && self.reservations.is_empty()
            && self.runs.is_empty()
            && self.targets.is_empty()
    }

    /// The runs it carries: its page runs and its added reservations' (what its size grows with,
    /// with its targets).
    pub fn n_runs(&self) -> usize {
        self.runs.len()
            + self
                .reservations
                .iter()
                .map(|r| r.runs.len())
                .sum::<usize>()
    }

    /// The state it holds, for a whole one ([`CheckpointError::MemoryDeltaAsWhole`] for changes).
    pub fn to_state(&self) -> Result<MemoryState, CheckpointError> {
        if !self.whole {
            return Err(CheckpointError::MemoryDeltaAsWhole);
        }
        let mut image = MemoryImage::empty(self.page_bytes);
        image.apply(self)?;
        Ok(image.state())
    }

    /// The binary form (the layout in the module docs). Ranges are taken to be page-aligned, as
    /// [`Self::since`] and [`Self::decode`] make them.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + 4 * self.n_runs() + 32 * self.targets.len());
        out.extend_from_slice(&MEMORY_DELTA_MAGIC);
        out.extend_from_slice(&MEMORY_DELTA_VERSION.to_le_bytes());
        out.push(u8::from(!self.whole));
        let shift = self.page_bytes.max(1).trailing_zeros();
        put_v(&mut out, self.page_bytes);
        put_v(&mut out, self.cleared.len() as u64);
        for r in &self.cleared {
            put_v(&mut out, r.start >> shift);
            put_v(&mut out, r.size_bytes() >> shift);
        }
        put_v(&mut out, self.reservations.len() as u64);
        for r in &self.reservations {
            put_v(&mut out, r.range.start >> shift);
            put_v(&mut out, r.range.size_bytes() >> shift);
            put_v(&mut out, r.runs.len() as u64);
            for run in &r.runs {
                put_v(&mut out, run.pages);
                out.push(state_byte(&run.page));
            }
        }
        put_v(&mut out, self.runs.len() as u64);
        let mut end = 0u64;
        for run in &self.runs {
            let first = run.start >> shift;
            put_v(&mut out, first.wrapping_sub(end));
            put_v(&mut out, run.pages);
            out.push(state_byte(&run.page));
            end = first.wrapping_add(run.pages);
        }
        put_v(&mut out, self.targets.len() as u64);
        for t in &self.targets {
            put_v(&mut out, u64::from(t.id));
            match &t.now {
                None => out.push(0),
                Some(now) => {
                    out.push(if now.trusted { 1 } else { 2 });
                    put_v(&mut out, now.range.start);
                    put_v(&mut out, now.range.size_bytes());
                    put_v(&mut out, now.name.len() as u64);
                    out.extend_from_slice(now.name.as_bytes());
                }
            }
        }
        out
    }

    /// Reads the binary form, checking every field: the magic and version, each count against
    /// the bytes left, each range (not empty, inside the address space), each reservation's runs
    /// against its pages, each run (not empty, after the one before), each state byte and name.
    pub fn decode(bytes: &[u8]) -> Result<Self, CheckpointError> {
        let Some(rest) = bytes.strip_prefix(&MEMORY_DELTA_MAGIC) else {
            return Err(CheckpointError::NotMemoryDelta);
        };
        let version = rest
            .first_chunk::<4>()
            .map(|w| u32::from_le_bytes(*w))
            .ok_or(CheckpointError::MemoryDeltaCut {
                what: "the version",
                at: MEMORY_DELTA_MAGIC.len(),
            })?;
        if version != MEMORY_DELTA_VERSION {
            return Err(CheckpointError::MemoryDeltaVersion { found: version });
        }
        let mut r = In {
            bytes,
            at: HEAD_BYTES,
        };
        let whole = match r.u8("the form")? {
            0 => true,
            1 => false,
            form => return Err(CheckpointError::MemoryDeltaForm { form }),
        };
        let page_bytes = r.v("the page size")?;
        if !page_bytes.is_power_of_two() {
            return Err(CheckpointError::PageSize { page_bytes });
        }
        let n = r.count("cleared ranges", 2)?;
        if whole && n > 0 {
            return Err(CheckpointError::MemoryDeltaWholeCleared { n });
        }
        let mut cleared = Vec::with_capacity(n);
        for _ in 0..n {
            cleared.push(r.pages("a cleared range", page_bytes)?);
        }
        let n = r.count("reservations", 3)?;
        let mut reservations = Vec::with_capacity(n);
        for _ in 0..n {
            let range = r.pages("a reservation", page_bytes)?;
            let k = r.count("a reservation's runs", 2)?;
            let mut runs = Vec::with_capacity(k);
            for _ in 0..k {
                let pages = r.v("a reservation's run")?;
                let page = r.state()?;
                runs.push(PageRunState { pages, page });
            }
            let res = ReservationState { range, runs };
            res.check(page_bytes)?;
            reservations.push(res);
        }
        let n = r.count("page runs", 3)?;
        let mut runs = Vec::with_capacity(n);
        let mut end = 0u64;
        for _ in 0..n {
            let at = r.at;
            let gap = r.v("a run's gap")?;
            let pages = r.v("a run's pages")?;
            let (first_page, end_page) = end
                .checked_add(gap)
                .and_then(|f| Some((f, f.checked_add(pages)?)))
                .filter(|&(_, e)| pages > 0 && e.checked_mul(page_bytes).is_some())
                .ok_or(CheckpointError::MemoryDeltaRange {
                    what: "a page run",
                    at,
                })?;
            let page = r.state()?;
            end = end_page;
            runs.push(RunAt {
                start: first_page * page_bytes,
                pages,
                page,
            });
        }
        let n = r.count("targets", 2)?;
        let mut targets = Vec::with_capacity(n);
        for _ in 0..n {
            let at = r.at;
            let id = u32::try_from(r.v("a target's id")?)
                .map_err(|_| CheckpointError::MemoryDeltaTargetId { at })?;
            let now = match r.u8("a target's kind")? {
                0 if !whole => None,
                kind @ (1 | 2) => {
                    let at = r.at;
                    let start = r.v("a target's start")?;
                    let size = r.v("a target's bytes")?;
                    let end = start
                        .checked_add(size)
                        .ok_or(CheckpointError::MemoryDeltaRange {
                            what: "a target",
                            at,
                        })?;
                    let len = r.count("a target's name bytes", 1)?;
                    let name = r.take("a target's name", len)?;
                    let name = std::str::from_utf8(name)
                        .map_err(|_| CheckpointError::MemoryDeltaName { id })?;
                    Some(ProtectedTarget {
                        id,
                        name: name.to_owned(),
                        range: ByteRange::new(start, end),
                        trusted: kind == 1,
                    })
                }
                kind => return Err(CheckpointError::MemoryDeltaTargetKind { id, kind }),
            };
            targets.push(TargetChange { id, now });
        }
        let extra = bytes.len() - r.at;
        if extra > 0 {
            return Err(CheckpointError::MemoryDeltaTrailing { extra });
        }
        Ok(Self {
            whole,
            page_bytes,
            cleared,
            reservations,
            runs,
            targets,
        })
    }
}

fn put_v(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A page state as one byte (the module docs).
fn state_byte(p: &PageState) -> u8 {
    let protection = match p.protection {
        HostProtection::None => 0,
        HostProtection::Read => 1,
        HostProtection::ReadWrite => 2,
    };
    u8::from(p.guest.readable)
        | u8::from(p.guest.writable) << 1
        | u8::from(p.committed) << 2
        | u8::from(p.backing == Backing::Shared) << 3
        | protection << 4
        | u8::from(p.guarded) << 6
        | u8::from(p.written) << 7
}

/// Reads the binary form, naming the field and the byte in every error.
struct In<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> In<'a> {
    fn take(&mut self, what: &'static str, n: usize) -> Result<&'a [u8], CheckpointError> {
        let at = self.at;
        crate::bytes::take_at(self.bytes, &mut self.at, n as u64)
            .ok_or(CheckpointError::MemoryDeltaCut { what, at })
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, CheckpointError> {
        Ok(self.take(what, 1)?[0])
    }

    fn v(&mut self, what: &'static str) -> Result<u64, CheckpointError> {
        let at = self.at;
        let mut v = 0u64;
        for i in 0..10 {
            let b = self.u8(what)?;
            if i == 9 && b > 1 {
                return Err(CheckpointError::MemoryDeltaVarint { what, at });
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(CheckpointError::MemoryDeltaVarint { what, at })
    }

    /// A count of items of at least `min_bytes` each, checked against the bytes left.
    fn count(&mut self, what: &'static str, min_bytes: usize) -> Result<usize, CheckpointError> {
        let n = self.v(what)?;
        let left = self.bytes.len() - self.at;
        match usize::try_from(n) {
            Ok(n) if n <= left / min_bytes.max(1) => Ok(n),
            _ => Err(CheckpointError::MemoryDeltaCount {
                what,
                count: n,
                left,
            }),
        }
    }

    /// A first page and a count of pages: bytes, not empty, inside the address space.
    fn pages(&mut self, what: &'static str, page_bytes: u64) -> Result<ByteRange, CheckpointError> {
        let at = self.at;
        let first = self.v(what)?;
        let n = self.v(what)?;
        first
            .checked_add(n)
            .filter(|_| n > 0)
            .and_then(|end| Some((first.checked_mul(page_bytes)?, end.checked_mul(page_bytes)?)))
            .map(|(s, e)| ByteRange::new(s, e))
            .ok_or(CheckpointError::MemoryDeltaRange { what, at })
    }

    fn state(&mut self) -> Result<PageState, CheckpointError> {
        let at = self.at;
        let b = self.u8("a page state")?;
        let protection = match (b >> 4) & 3 {
            0 => HostProtection::None,
            1 => HostProtection::Read,
            2 => HostProtection::ReadWrite,
            _ => return Err(CheckpointError::MemoryDeltaState { byte: b, at }),
        };
        Ok(PageState {
            guest: GuestView {
                readable: b & 1 != 0,
                writable: b & 2 != 0,
            },
            committed: b & 4 != 0,
            backing: if b & 8 != 0 {
                Backing::Shared
            } else {
                Backing::Private
            },
            protection,
            guarded: b & 0x40 != 0,
            written: b & 0x80 != 0,
        })
    }
}

/// Guest memory's state as a writer or reader holds it to apply [`MemoryDelta`]s: reservations
/// by start, each with its pages as [`PageRuns`], and the targets by id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryImage {
    page_bytes: u64,
    reservations: BTreeMap<u64, (ByteRange, PageRuns)>,
    targets: BTreeMap<u32, ProtectedTarget>,
}

impl MemoryImage {
    /// No reservation and no target, in pages of `page_bytes`.
    pub fn empty(page_bytes: u64) -> Self {
        Self {
            page_bytes,
            reservations: BTreeMap::new(),
            targets: BTreeMap::new(),
        }
    }

    /// The image of `state`, checked ([`MemoryState::check`]).
    pub fn of(state: &MemoryState) -> Result<Self, CheckpointError> {
        state.check()?;
        Ok(Self {
            page_bytes: state.page_bytes,
            reservations: state
                .reservations
                .iter()
                .map(|r| (r.range.start, (r.range, runs_of(r))))
                .collect(),
            targets: state.targets.iter().map(|t| (t.id, t.clone())).collect(),
        })
    }

    /// The state it holds, as [`MemoryState::of`] gives it for the same memory.
    pub fn state(&self) -> MemoryState {
        MemoryState {
            page_bytes: self.page_bytes,
            reservations: self
                .reservations
                .values()
                .map(|(range, pages)| ReservationState {
                    range: *range,
                    runs: pages
                        .runs()
                        .map(|(a, b, p)| PageRunState {
                            pages: b - a,
                            page: *p,
                        })
                        .collect(),
                })
                .collect(),
            targets: self.targets.values().cloned().collect(),
        }
    }

    /// Runs over every reservation: what a whole state's size grows with.
    pub fn n_runs(&self) -> usize {
        self.reservations.values().map(|(_, p)| p.n_runs()).sum()
    }

    /// Applies `delta` (a whole one replaces everything); returns whether the state changed. On an
    /// error the image is left part-changed: its holder drops it.
    pub fn apply(&mut self, delta: &MemoryDelta) -> Result<bool, CheckpointError> {
        if !delta.page_bytes.is_power_of_two() {
            return Err(CheckpointError::PageSize {
                page_bytes: delta.page_bytes,
            });
        }
        if delta.whole {
            let before = std::mem::replace(self, Self::empty(delta.page_bytes));
            self.apply_parts(delta)?;
            return Ok(*self != before);
        }
        if delta.page_bytes != self.page_bytes {
            return Err(CheckpointError::MemoryDeltaPageSize {
                page_bytes: delta.page_bytes,
                state: self.page_bytes,
            });
        }
        self.apply_parts(delta)
    }

    fn apply_parts(&mut self, delta: &MemoryDelta) -> Result<bool, CheckpointError> {
        let shift = self.page_bytes.trailing_zeros();
        let mut gone: Vec<(ByteRange, PageRuns)> = Vec::new();
        for c in &delta.cleared {
            while let Some((&start, (range, _))) = self.reservations.range(..c.end).next_back()
                && range.end > c.start
            {
                gone.extend(self.reservations.remove(&start));
            }
        }
        gone.sort_unstable_by_key(|(r, _)| r.start);
        let mut added: Vec<(ByteRange, PageRuns)> = Vec::with_capacity(delta.reservations.len());
        for r in &delta.reservations {
            r.check(self.page_bytes)?;
            if let Some((_, (existing, _))) = self.reservations.range(..r.range.end).next_back()
                && existing.overlaps(&r.range)
            {
                return Err(CheckpointError::MemoryDeltaOverlap {
                    range: r.range,
                    existing: *existing,
                });
            }
            let pages = runs_of(r);
            added.push((r.range, pages.clone()));
            self.reservations.insert(r.range.start, (r.range, pages));
        }
        added.sort_unstable_by_key(|(r, _)| r.start);
        let mut changed = gone != added;
        for run in &delta.runs {
            let outside = || CheckpointError::MemoryDeltaOutside {
                start: run.start,
                pages: run.pages,
            };
            let end = run
                .pages
                .checked_shl(shift)
                .filter(|b| b >> shift == run.pages)
                .and_then(|b| run.start.checked_add(b))
                .ok_or_else(outside)?;
            let (range, pages) = self
                .reservations
                .range_mut(..=run.start)
                .next_back()
                .map(|(_, r)| r)
                .filter(|(r, _)| r.end >= end && run.pages > 0)
                .ok_or_else(outside)?;
            let first = (run.start - range.start) >> shift;
            pages.update(first, first + run.pages, |p| {
                if *p != run.page {
                    *p = run.page;
                    changed = true;
                }
            });
        }
        for t in &delta.targets {
            let before = match &t.now {
                Some(now) => self.targets.insert(
                    t.id,
                    ProtectedTarget {
                        id: t.id,
                        ..now.clone()
                    },
                ),
                None => self.targets.remove(&t.id),
            };
            changed |= before.as_ref() != t.now.as_ref();
        }
        Ok(changed)
    }
}

/// A reservation's runs as [`PageRuns`] (its runs were checked to cover it).
fn runs_of(r: &ReservationState) -> PageRuns {
    PageRuns::from_runs(r.runs.iter().map(|run| (run.pages, run.page)))
}

/// [`MemoryWriter::next_delta`]: the writer holds no state for the changes to change (none yet,
/// or the last one could not take them); the state must be written whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("changes to a memory state this writer does not hold")]
pub struct NoMemoryToChange;

/// What a writer remembers of the last memory state it wrote, to write the next as a delta: used
/// by [`super::write_replayed_capture`] and by a live target's writer thread, whose every
/// MEMORY_STATE payload goes into the debugger's recording in the same order.
///
/// A delta is written while the chain since the last whole state is short ([`MAX_MEMORY_DELTAS`])
/// and its deltas' bytes stay under the whole state's: rebuilding any state then reads at most
/// that many records, whose bytes are at most twice a whole state's.
#[derive(Debug, Default)]
pub struct MemoryWriter {
    last: Option<MemoryImage>,
    /// Bytes of the last whole payload written.
    whole_bytes: usize,
    /// Bytes of the deltas written since it.
    delta_bytes: usize,
    deltas: usize,
}

impl MemoryWriter {
    /// The payload for `state` (the binary form, whole) if it differs from the last one.
    pub fn next_state(&mut self, state: &MemoryState) -> Option<Vec<u8>> {
        match MemoryImage::of(state) {
            Ok(image) if self.last.as_ref() == Some(&image) => None,
            Ok(image) => {
                let bytes = MemoryDelta::whole_of(state).encode();
                self.wrote_whole(bytes.len());
                self.last = Some(image);
                Some(bytes)
            }
            // A state that does not check is written as it is and never changed.
            Err(_) => {
                self.reset();
                Some(MemoryDelta::whole_of(state).encode())
            }
        }
    }

    /// The payload for the state the last one and `delta` make: the delta, or the whole state
    /// where the chain is long or the deltas outweigh it; `Ok(None)` when `delta` changes
    /// nothing; `Err` when there is no last state to change, or `delta` does not apply to it
    /// (the caller writes the state whole, or says it is unknown).
    pub fn next_delta(&mut self, delta: &MemoryDelta) -> Result<Option<Vec<u8>>, NoMemoryToChange> {
        let Some(image) = self.last.as_mut() else {
            return Err(NoMemoryToChange);
        };
        match image.apply(delta) {
            Ok(false) => return Ok(None),
            Ok(true) => {}
            Err(_) => {
                self.reset();
                return Err(NoMemoryToChange);
            }
        }
        let bytes = delta.encode();
        if delta.whole
            || self.deltas >= MAX_MEMORY_DELTAS
            || self.delta_bytes + bytes.len() > self.whole_bytes
        {
            let whole = MemoryDelta::whole_of(&image.state()).encode();
            self.wrote_whole(whole.len());
            return Ok(Some(whole));
        }
        self.deltas += 1;
        self.delta_bytes += bytes.len();
        Ok(Some(bytes))
    }

    fn wrote_whole(&mut self, bytes: usize) {
        self.whole_bytes = bytes;
        self.delta_bytes = 0;
        self.deltas = 0;
    }

    /// Forgets the last state, so that the next payload is whole (after an unknown state, which a
    /// delta may not follow).
    pub fn reset(&mut self) {
        self.last = None;
        self.wrote_whole(0);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]
mod tests {
    use super::*;
    use dispatchscope_core::input::Event;

    const GIB: u64 = 1 << 30;
    const BASE: u64 = 0x1_0000_0000;

    /// 16 GiB of guest memory in 4 KiB pages, committed read-write (runs, not pages: lazy).
    fn sixteen_gib() -> GuestMemory {
        let mut m = GuestMemory::new(0x1000).unwrap();
        m.apply(&Event::Reserve {
            range: ByteRange::new(BASE, BASE + 16 * GIB),
            readable: true,
            writable: true,
            committed: true,
            backing: Backing::Private,
            host_base: None,
        })
        .unwrap();
        m
    }

    fn page(n: u64) -> ByteRange {
        ByteRange::new(BASE + n * 0x1000, BASE + (n + 1) * 0x1000)
    }

    /// xorshift64*.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
    }

    fn every_kind() -> MemoryDelta {
        let p = PageState {
            guarded: true,
            protection: HostProtection::Read,
            ..PageState::default()
        };
        MemoryDelta {
            whole: false,
            page_bytes: 0x1000,
            cleared: vec![ByteRange::new(0x10_0000, 0x20_0000)],
            reservations: vec![ReservationState {
                range: ByteRange::new(0x10_0000, 0x10_4000),
                runs: vec![
                    PageRunState { pages: 3, page: p },
                    PageRunState {
                        pages: 1,
                        page: PageState::default(),
                    },
                ],
            }],
            runs: vec![
                RunAt {
                    start: 0x10_1000,
                    pages: 1,
                    page: PageState::default(),
                },
                RunAt {
                    start: 0x10_3000,
                    pages: 1,
                    page: p,
                },
            ],
            targets: vec![
                TargetChange { id: 3, now: None },
                TargetChange {
                    id: 9,
                    now: Some(ProtectedTarget {
                        id: 9,
                        name: "gbuffer é".into(),
                        range: ByteRange::new(0x10_0010, 0x10_2000),
                        trusted: false,
                    }),
                },
            ],
        }
    }

    #[test]
    fn a_delta_round_trips_and_every_state_byte_too() {
        let d = every_kind();
        assert_eq!(MemoryDelta::decode(&d.encode()).unwrap(), d);
        for b in 0..=255u8 {
            if (b >> 4) & 3 == 3 {
                continue;
            }
            let mut r = In { bytes: &[b], at: 0 };
            assert_eq!(state_byte(&r.state().unwrap()), b);
        }
        let whole = MemoryDelta::whole_of(&MemoryState::of(&sixteen_gib()));
        let bytes = whole.encode();
        assert!(bytes.len() < 32, "16 GiB in one run: {} bytes", bytes.len());
        assert_eq!(
            MemoryDelta::decode(&bytes).unwrap().to_state().unwrap(),
            MemoryState::of(&sixteen_gib())
        );
    }

    /// Every truncation is a named error, no flipped byte panics, and each bad field names itself.
    #[test]
    fn every_bad_byte_is_named() {
        let bytes = every_kind().encode();
        for n in 0..bytes.len() {
            let e = MemoryDelta::decode(&bytes[..n]).unwrap_err();
            assert!(!e.to_string().is_empty());
        }
        for i in 0..bytes.len() {
            for flip in [0x01u8, 0x30, 0x80, 0xff] {
                let mut b = bytes.clone();
                b[i] ^= flip;
                if let Ok(d) = MemoryDelta::decode(&b) {
                    // What decodes applies or is refused by name.
                    let mut image = MemoryImage::empty(d.page_bytes);
                    let _ = image.apply(&d);
                }
            }
        }
        let named = |b: &[u8]| MemoryDelta::decode(b).unwrap_err();
        assert_eq!(named(b"{}"), CheckpointError::NotMemoryDelta);
        let mut b = bytes.clone();
        b[4] = 2;
        assert_eq!(
            named(&b).to_string(),
            "a binary memory state of version 2; this build reads version 1"
        );
        let mut b = bytes.clone();
        b[8] = 7;
        assert_eq!(named(&b), CheckpointError::MemoryDeltaForm { form: 7 });
        let mut b = bytes.clone();
        b.push(0);
        assert_eq!(named(&b), CheckpointError::MemoryDeltaTrailing { extra: 1 });
        // Page size 0x1000 as a varint is two bytes at 9..11; 0x1001 is no power of two.
        let mut b = bytes.clone();
        b[9] |= 1;
        assert_eq!(named(&b), CheckpointError::PageSize { page_bytes: 0x1001 });
        // Hand-made tails after the head and page size.
        let head = |form: u8| {
            let mut b = MEMORY_DELTA_MAGIC.to_vec();
            b.extend_from_slice(&MEMORY_DELTA_VERSION.to_le_bytes());
            b.push(form);
            put_v(&mut b, 0x1000);
            b
        };
        let with = |form: u8, tail: &[u8]| {
            let mut b = head(form);
            b.extend_from_slice(tail);
            b
        };
        assert!(matches!(
            named(&with(1, &[0xff; 11])),
            CheckpointError::MemoryDeltaVarint { .. }
        ));
        assert!(matches!(
            named(&with(1, &[100, 0, 0])),
            CheckpointError::MemoryDeltaCount { count: 100, .. }
        ));
        assert!(matches!(
            named(&with(1, &[1, 5, 0, 0, 0, 0])),
            CheckpointError::MemoryDeltaRange {
                what: "a cleared range",
                ..
            }
        ));
        assert!(matches!(
            named(&with(0, &[1, 5, 1, 0, 0, 0])),
            CheckpointError::MemoryDeltaWholeCleared { n: 1 }
        ));
        // A reservation of two pages whose one run counts one.
        assert!(matches!(
            named(&with(1, &[0, 1, 0, 2, 1, 1, 0x07, 0, 0])),
            CheckpointError::Runs { .. }
        ));
        // A run whose state has protection 3.
        assert!(matches!(
            named(&with(1, &[0, 0, 1, 0, 1, 0x30, 0])),
            CheckpointError::MemoryDeltaState { byte: 0x30, .. }
        ));
        // An empty run.
        assert!(matches!(
            named(&with(1, &[0, 0, 1, 0, 0, 0x07, 0])),
            CheckpointError::MemoryDeltaRange {
                what: "a page run",
                ..
            }
        ));
        // Targets: kind 5; gone in a whole state; a name not UTF-8; an id past 32 bits.
        assert_eq!(
            named(&with(1, &[0, 0, 0, 1, 4, 5])),
            CheckpointError::MemoryDeltaTargetKind { id: 4, kind: 5 }
        );
        assert_eq!(
            named(&with(0, &[0, 0, 0, 1, 4, 0])),
            CheckpointError::MemoryDeltaTargetKind { id: 4, kind: 0 }
        );
        assert_eq!(
            named(&with(1, &[0, 0, 0, 1, 4, 1, 0, 1, 2, 0xff, 0xfe])),
            CheckpointError::MemoryDeltaName { id: 4 }
        );
        assert!(matches!(
            named(&with(1, &[0, 0, 0, 1, 0x80, 0x80, 0x80, 0x80, 0x10, 0])),
            CheckpointError::MemoryDeltaTargetId { .. }
        ));
        // A run in no reservation is refused when applied.
        let d = MemoryDelta::decode(&with(1, &[0, 0, 1, 16, 1, 0x07, 0])).unwrap();
        let mut image = MemoryImage::of(&MemoryState::of(&sixteen_gib())).unwrap();
        assert_eq!(
            image.apply(&d).unwrap_err(),
            CheckpointError::MemoryDeltaOutside {
                start: 0x10000,
                pages: 1
            }
        );
    }

    /// A delta's size follows what changed, not the state: after the state gathers 20,000 runs,
    /// five toggled pages make a delta of five runs and a few dozen bytes.
    #[test]
    fn a_delta_is_bounded_by_what_changed() {
        let mut m = sixteen_gib();
        let mut rng = Rng(41);
        for _ in 0..10_000 {
            let p = rng.next() % (16 * GIB / 0x1000);
            m.apply(&Event::Guard { range: page(p) }).unwrap();
        }
        let whole = MemoryState::of(&m);
        let whole_runs: usize = whole.reservations.iter().map(|r| r.runs.len()).sum();
        assert!(whole_runs > 19_000, "{whole_runs} runs");
        let at = m.state_changes();
        for k in 0..5u64 {
            m.apply(&Event::Guard {
                range: page(k * 1_000_003 + 17),
            })
            .unwrap();
        }
        let d = MemoryDelta::since(&m, at).unwrap();
        assert!(d.n_runs() <= 5, "{} runs", d.n_runs());
        let bytes = d.encode();
        assert!(bytes.len() <= 16 + 5 * 8, "{} bytes", bytes.len());
        let whole_bytes = MemoryDelta::whole_of(&whole).encode().len();
        assert!(
            whole_bytes > 50 * bytes.len(),
            "whole {whole_bytes} bytes, delta {}",
            bytes.len()
        );
        // A toggle and its undo between two checkpoints: listed, and the image does not change.
        let at = m.state_changes();
        m.apply(&Event::Unguard { range: page(3) }).unwrap();
        m.apply(&Event::Guard { range: page(3) }).unwrap();
        let mut image = MemoryImage::of(&MemoryState::of(&m)).unwrap();
        let d = MemoryDelta::since(&m, at).unwrap();
        assert!(!d.is_empty());
        assert!(!image.apply(&d).unwrap(), "nothing changed");
        // A count past the log's reach: no delta.
        assert!(MemoryDelta::since(&m, 0).is_none());
    }

    /// Against `MemoryState::of` at every step: random toggles, protections, writes, targets and
    /// reservations over 16 GiB, each step's delta applied to the image the steps before made.
    #[test]
    fn deltas_rebuild_the_state_at_every_step() {
        let mut m = sixteen_gib();
        let mut image = MemoryImage::of(&MemoryState::of(&m)).unwrap();
        let mut rng = Rng(7);
        let pages = 16 * GIB / 0x1000;
        let mut at = m.state_changes();
        let mut lowered: Vec<u64> = Vec::new();
        for step in 0..400u64 {
            for _ in 0..5 {
                let r = rng.next();
                let event = match r % 12 {
                    0..=4 => {
                        let p = rng.next() % pages;
                        lowered.push(p);
                        Event::Guard { range: page(p) }
                    }
                    5..=8 if !lowered.is_empty() => {
                        let i = (rng.next() as usize) % lowered.len();
                        Event::Unguard {
                            range: page(lowered.swap_remove(i)),
                        }
                    }
                    9 => Event::HostProtect {
                        range: ByteRange::new(page(r % pages).start, page(r % pages + 40).end),
                        protection: HostProtection::Read,
                    },
                    10 => Event::Write {
                        address: page(r % pages).start + 100,
                        bytes: vec![1; 0x2000],
                    },
                    _ => match step % 4 {
                        0 => Event::AddTarget {
                            id: (step % 8) as u32,
                            name: format!("t{step}"),
                            range: page(r % pages),
                        },
                        1 => Event::RemoveTarget {
                            id: ((step - 1) % 8) as u32,
                        },
                        2 => Event::Reserve {
                            range: ByteRange::new(0x1000_0000, 0x1010_0000),
                            readable: true,
                            writable: step % 8 == 2,
                            committed: false,
                            backing: Backing::Shared,
                            host_base: None,
                        },
                        _ => Event::Release { base: 0x1000_0000 },
                    },
                };
                let _ = m.apply(&event);
            }
            let d = MemoryDelta::since(&m, at).unwrap();
            let d = MemoryDelta::decode(&d.encode()).unwrap();
            image.apply(&d).unwrap();
            assert_eq!(image.state(), MemoryState::of(&m), "step {step}");
            at = m.state_changes();
        }
    }

    /// The writer sends deltas, then the whole state once the chain is long or the deltas
    /// outweigh the whole; changes to no state, or that do not apply, are refused.
    #[test]
    fn the_writer_bounds_its_chain() {
        let mut w = MemoryWriter::default();
        assert_eq!(
            w.next_delta(&MemoryDelta::since(&sixteen_gib(), 0).unwrap()),
            Err(NoMemoryToChange)
        );
        // Toggles of `n` pages after `guarded` pages two apart were guarded: each payload sent,
        // whether it is a delta, and its bytes.
        let sent = |w: &mut MemoryWriter, guarded: u64, n: u64| {
            let mut m = sixteen_gib();
            for p in 0..guarded {
                m.apply(&Event::Guard { range: page(p * 2) }).unwrap();
            }
            w.reset();
            let first = w.next_state(&MemoryState::of(&m)).unwrap();
            assert!(!check_delta(&first));
            assert!(w.next_state(&MemoryState::of(&m)).is_none(), "the same");
            let mut out = vec![(false, first.len())];
            for i in 0..n {
                let at = m.state_changes();
                let range = page((i % guarded) * 2);
                let e = if (i / guarded).is_multiple_of(2) {
                    Event::Unguard { range }
                } else {
                    Event::Guard { range }
                };
                m.apply(&e).unwrap();
                let bytes = w
                    .next_delta(&MemoryDelta::since(&m, at).unwrap())
                    .unwrap()
                    .unwrap();
                out.push((check_delta(&bytes), bytes.len()));
            }
            out
        };
        // A small state: the deltas since a whole one never outweigh it.
        let small = sent(&mut w, 200, 600);
        let wholes = small.iter().filter(|(d, _)| !d).count();
        assert!(wholes > 3, "{wholes} whole of 600");
        let mut whole = 0;
        let mut since = 0;
        for &(delta, bytes) in &small {
            if delta {
                since += bytes;
                assert!(
                    since <= whole,
                    "{since} bytes of deltas after a whole of {whole}"
                );
            } else {
                (whole, since) = (bytes, 0);
            }
        }
        // A large state: the chain ends at MAX_MEMORY_DELTAS.
        let large = sent(&mut w, 20_000, MAX_MEMORY_DELTAS as u64 + 100);
        let longest = large
            .split(|(d, _)| !*d)
            .map(<[(bool, usize)]>::len)
            .max()
            .unwrap_or(0);
        assert_eq!(longest, MAX_MEMORY_DELTAS);
        // Changes that do not apply: refused, and the next must be whole.
        let bad = MemoryDelta {
            page_bytes: 0x2000,
            ..MemoryDelta::default()
        };
        assert_eq!(w.next_delta(&bad), Err(NoMemoryToChange));
        let m = sixteen_gib();
        assert_eq!(
            w.next_delta(&MemoryDelta::since(&m, m.state_changes()).unwrap()),
            Err(NoMemoryToChange)
        );
    }

    fn check_delta(bytes: &[u8]) -> bool {
        !MemoryDelta::decode(bytes).unwrap().whole
    }
}
