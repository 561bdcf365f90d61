//! The guest memory model: reservations whose pages each have a guest view and a host state,
//! sparse contents, readable runs and their generation, the write-watch (D824), protected targets
//! (D720) and deferred copies (C3).
//!
//! [`GuestMemory::apply`] applies one [`Event`] and says what changed in a [`MemoryChange`]; it
//! never maps anything (that is [`crate::import`]'s) and never looks at a dispatch.

use std::collections::BTreeMap;

use hashbrown::HashMap;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::addr::ByteRange;
use crate::input::{Backing, Event, HostProtection};
use crate::report::ReadableRun;

/// What the guest last set for a page.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestView {
    /// The guest may read the page.
    pub readable: bool,
    /// The guest may write the page.
    pub writable: bool,
}

/// One page: the guest's view and the host's state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageState {
    /// What the guest last set.
    pub guest: GuestView,
    /// Whether a host page is committed behind it.
    pub committed: bool,
    /// Private or shared.
    pub backing: Backing,
    /// The host protection the emulator set, before any write-watch guard.
    pub protection: HostProtection,
    /// D824: a read-only guard the write-watch placed, lowering the protection to read.
    pub guarded: bool,
    /// D824: the write-watch's note that the page was written.
    pub written: bool,
}

impl PageState {
    /// The host protection in force: a guard lowers read-write to read.
    pub fn effective_protection(&self) -> HostProtection {
        if self.guarded {
            self.protection.min(HostProtection::Read)
        } else {
            self.protection
        }
    }

    /// M3: whether a page may be mapped: committed, private and read-write.
    pub fn mappable(&self) -> bool {
        self.committed
            && self.backing == Backing::Private
            && self.effective_protection() == HostProtection::ReadWrite
    }
}

/// A reserved guest range and its pages.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    /// The reserved bytes, page-aligned.
    pub range: ByteRange,
    /// One state per page.
    pub pages: Vec<PageState>,
}

/// A texture or draw buffer made from guest pages and trusted until they are written (D720).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProtectedTarget {
    /// The emulator's id for it.
    pub id: u32,
    /// What it is, for people.
    #[serde(default)]
    pub name: String,
    /// The guest bytes it was made from.
    pub range: ByteRange,
    /// Whether it is still trusted.
    pub trusted: bool,
}

/// Bad events: each names what was wrong.
#[derive(Clone, Debug, PartialEq, Eq, Error, Serialize, Deserialize)]
#[allow(missing_docs, reason = "the messages document the fields")]
pub enum MemoryError {
    #[error("{range} is not aligned to the {page_bytes:#x}-byte host page")]
    Unaligned { range: ByteRange, page_bytes: u64 },
    #[error("reserving {range} overlaps the reservation at {existing}")]
    ReservationOverlap {
        range: ByteRange,
        existing: ByteRange,
    },
    #[error("{range} is empty")]
    Empty { range: ByteRange },
    #[error("no reservation starts at {base:#x}")]
    NoReservation { base: u64 },
    #[error("{range} is not inside one reservation")]
    OutsideReservation { range: ByteRange },
    #[error("no protected target has id {id}")]
    NoTarget { id: u32 },
    #[error("a protected target with id {id} already exists")]
    DuplicateTarget { id: u32 },
    #[error("host page size {page_bytes:#x} is not a power of two of at least 0x100 bytes")]
    BadPageSize { page_bytes: u64 },
}

/// What an event changed, for the engine and the report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryChange {
    /// The readable runs changed: the generation moved (M4).
    pub runs_changed: bool,
    /// Pages that became committed or changed protection or backing: left-out pieces over them
    /// are looked at again (M5).
    pub revisit: Vec<ByteRange>,
    /// Host memory about to go (decommit or release): mappings over it must be dropped first.
    pub host_memory_going: Vec<ByteRange>,
    /// Pages the write-watch noted written.
    pub noted_written: Vec<ByteRange>,
    /// Targets that lost trust.
    pub distrusted: Vec<u32>,
}

/// All of guest memory as the emulator's memory manager keeps it.
#[derive(Clone, Debug)]
pub struct GuestMemory {
    page_bytes: u64,
    page_shift: u32,
    reservations: BTreeMap<u64, Reservation>,
    /// Page number to the page's bytes. hashbrown's default hasher: the CPU reference looks pages
    /// up per contiguous run of every device access, where std's SipHash was a fifth of a dispatch.
    contents: HashMap<u64, Box<[u8]>>,
    targets: BTreeMap<u32, ProtectedTarget>,
    deferred: Vec<(u64, Vec<u8>)>,
    generation: u64,
}

impl GuestMemory {
    /// Empty guest memory with host pages of `page_bytes`.
    pub fn new(page_bytes: u64) -> Result<Self, MemoryError> {
        if !page_bytes.is_power_of_two() || page_bytes < 0x100 {
            return Err(MemoryError::BadPageSize { page_bytes });
        }
        Ok(Self {
            page_bytes,
            page_shift: page_bytes.trailing_zeros(),
            reservations: BTreeMap::new(),
            contents: HashMap::new(),
            targets: BTreeMap::new(),
            deferred: Vec::new(),
            generation: 0,
        })
    }

    /// Bytes in a host page.
    pub fn page_bytes(&self) -> u64 {
        self.page_bytes
    }

    /// M4: the generation of the readable runs; it moves when they change.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Every reservation, by start.
    pub fn reservations(&self) -> impl Iterator<Item = &Reservation> {
        self.reservations.values()
    }

    /// Every protected target, by id.
    pub fn targets(&self) -> impl Iterator<Item = &ProtectedTarget> {
        self.targets.values()
    }

    /// Copies still deferred (C3 writes them before a device-addressed dispatch).
    pub fn deferred_copies(&self) -> &[(u64, Vec<u8>)] {
        &self.deferred
    }

    /// The reservation holding `addr`, if any.
    pub fn reservation_at(&self, addr: u64) -> Option<&Reservation> {
        self.reservations
            .range(..=addr)
            .next_back()
            .map(|(_, r)| r)
            .filter(|r| r.range.contains(addr))
    }

    /// The state of the page holding `addr`, if a reservation holds it.
    pub fn page_at(&self, addr: u64) -> Option<&PageState> {
        let r = self.reservation_at(addr)?;
        r.pages
            .get(((addr - r.range.start) >> self.page_shift) as usize)
    }

    /// The page-aligned range of the page holding `addr`.
    pub fn page_range(&self, addr: u64) -> ByteRange {
        let start = addr & !(self.page_bytes - 1);
        ByteRange::new(start, start.saturating_add(self.page_bytes))
    }

    /// Every readable run, in address order (SPEC.md, Words; M1).
    pub fn readable_runs(&self) -> Vec<ReadableRun> {
        let mut runs = Vec::new();
        for r in self.reservations.values() {
            let mut start: Option<u64> = None;
            for (i, p) in r.pages.iter().enumerate() {
                let addr = r.range.start + ((i as u64) << self.page_shift);
                match (p.guest.readable, start) {
                    (true, None) => start = Some(addr),
                    (false, Some(s)) => {
                        runs.push(ReadableRun {
                            reservation: r.range.start,
                            range: ByteRange::new(s, addr),
                        });
                        start = None;
                    }
                    _ => {}
                }
            }
            if let Some(s) = start {
                runs.push(ReadableRun {
                    reservation: r.range.start,
                    range: ByteRange::new(s, r.range.end),
                });
            }
        }
        runs
    }

    /// Calls `f` with the address and state of every page in `range` that a reservation holds.
    pub fn for_pages(&self, range: ByteRange, mut f: impl FnMut(u64, &PageState)) {
        for r in self.reservations.range(..range.end).rev() {
            let r = r.1;
            if r.range.end <= range.start {
                break;
            }
            let Some(both) = r.range.intersection(&range) else {
                continue;
            };
            let first = (both.start - r.range.start) >> self.page_shift;
            let last = (both.end - 1 - r.range.start) >> self.page_shift;
            for i in first..=last {
                if let Some(p) = r.pages.get(i as usize) {
                    f(r.range.start + (i << self.page_shift), p);
                }
            }
        }
    }

    fn pages_mut(
        &mut self,
        range: ByteRange,
        mut f: impl FnMut(&mut PageState),
    ) -> Result<(), MemoryError> {
        self.check_aligned(range)?;
        let shift = self.page_shift;
        let r = self
            .reservations
            .range_mut(..=range.start)
            .next_back()
            .map(|(_, r)| r)
            .filter(|r| r.range.contains_range(&range))
            .ok_or(MemoryError::OutsideReservation { range })?;
        let first = ((range.start - r.range.start) >> shift) as usize;
        let last = ((range.end - r.range.start) >> shift) as usize;
        for p in r.pages.get_mut(first..last).into_iter().flatten() {
            f(p);
        }
        Ok(())
    }

    fn check_aligned(&self, range: ByteRange) -> Result<(), MemoryError> {
        if range.is_empty() {
            return Err(MemoryError::Empty { range });
        }
        let mask = self.page_bytes - 1;
        if range.start & mask != 0 || range.end & mask != 0 {
            return Err(MemoryError::Unaligned {
                range,
                page_bytes: self.page_bytes,
            });
        }
        Ok(())
    }

    /// Checks that `range` is page-aligned and lies in one reservation, as decommit needs.
    pub fn check_range(&self, range: ByteRange) -> Result<(), MemoryError> {
        self.check_aligned(range)?;
        match self.reservation_at(range.start) {
            Some(r) if r.range.contains_range(&range) => Ok(()),
            _ => Err(MemoryError::OutsideReservation { range }),
        }
    }

    /// The reservation starting at `base`, as release needs.
    pub fn reservation(&self, base: u64) -> Result<&Reservation, MemoryError> {
        self.reservations
            .get(&base)
            .ok_or(MemoryError::NoReservation { base })
    }

    fn readability(&self, range: ByteRange) -> Vec<bool> {
        let mut v = Vec::new();
        self.for_pages(range, |_, p| v.push(p.guest.readable));
        v
    }

    /// Applies one event and says what changed. A bad event changes nothing.
    pub fn apply(&mut self, event: &Event) -> Result<MemoryChange, MemoryError> {
        let mut change = MemoryChange::default();
        match event {
            Event::Reserve {
                range,
                readable,
                writable,
                committed,
                backing,
            } => {
                self.check_aligned(*range)?;
                if let Some(existing) = self.reservations.values().find(|r| r.range.overlaps(range))
                {
                    return Err(MemoryError::ReservationOverlap {
                        range: *range,
                        existing: existing.range,
                    });
                }
                let n = (range.size_bytes() >> self.page_shift) as usize;
                let page = PageState {
                    guest: GuestView {
                        readable: *readable,
                        writable: *writable,
                    },
                    committed: *committed,
                    backing: *backing,
                    protection: protection_for(*readable, *writable),
                    guarded: false,
                    written: false,
                };
                self.reservations.insert(
                    range.start,
                    Reservation {
                        range: *range,
                        pages: vec![page; n],
                    },
                );
                change.runs_changed = *readable;
            }
            Event::Release { base } => {
                let r = self
                    .reservations
                    .get(base)
                    .ok_or(MemoryError::NoReservation { base: *base })?;
                let range = r.range;
                change.runs_changed = r.pages.iter().any(|p| p.guest.readable);
                change.host_memory_going.push(range);
                self.reservations.remove(base);
                self.drop_contents(range);
            }
            Event::Commit { range } => {
                self.pages_mut(*range, |p| p.committed = true)?;
                change.revisit.push(*range);
            }
            Event::Decommit { range } => {
                self.pages_mut(*range, |p| p.committed = false)?;
                change.host_memory_going.push(*range);
                self.drop_contents(*range);
            }
            Event::Protect {
                range,
                readable,
                writable,
            } => {
                let before = self.readability(*range);
                self.pages_mut(*range, |p| {
                    p.guest = GuestView {
                        readable: *readable,
                        writable: *writable,
                    };
                    p.protection = protection_for(*readable, *writable);
                })?;
                change.runs_changed = before.iter().any(|r| r != readable);
                change.revisit.push(*range);
            }
            Event::HostProtect { range, protection } => {
                self.pages_mut(*range, |p| p.protection = *protection)?;
                change.revisit.push(*range);
            }
            Event::SetBacking { range, backing } => {
                self.pages_mut(*range, |p| p.backing = *backing)?;
                change.revisit.push(*range);
            }
            Event::Guard { range } => {
                self.pages_mut(*range, |p| {
                    p.guarded = true;
                    p.written = false;
                })?;
            }
            Event::Write { address, bytes } => {
                self.byte_range(*address, bytes.len())?;
                self.host_write(*address, bytes, &mut change);
            }
            Event::DeferCopy { address, bytes } => {
                self.byte_range(*address, bytes.len())?;
                self.deferred.push((*address, bytes.clone()));
            }
            Event::AddTarget { id, name, range } => {
                if self.targets.contains_key(id) {
                    return Err(MemoryError::DuplicateTarget { id: *id });
                }
                self.targets.insert(
                    *id,
                    ProtectedTarget {
                        id: *id,
                        name: name.clone(),
                        range: *range,
                        trusted: true,
                    },
                );
            }
            Event::RemoveTarget { id } => {
                self.targets
                    .remove(id)
                    .ok_or(MemoryError::NoTarget { id: *id })?;
            }
            Event::Retire => {}
        }
        if change.runs_changed {
            self.generation += 1;
        }
        Ok(change)
    }

    fn byte_range(&self, address: u64, len: usize) -> Result<ByteRange, MemoryError> {
        let range = ByteRange::from_base_size(address, len as u64)
            .filter(|r| !r.is_empty())
            .ok_or(MemoryError::Empty {
                range: ByteRange::new(address, address),
            })?;
        match self.reservation_at(address) {
            Some(r) if r.range.contains_range(&range) => Ok(range),
            _ => Err(MemoryError::OutsideReservation { range }),
        }
    }

    /// A host write (a CPU write, a holder's write-back, a C3 copy): the bytes land, the
    /// write-watch notes the pages written (D824), and targets over them lose trust (D720).
    pub fn host_write(&mut self, address: u64, bytes: &[u8], change: &mut MemoryChange) {
        if bytes.is_empty() {
            return;
        }
        self.write_bytes(address, bytes);
        let range = ByteRange::new(address, address.saturating_add(bytes.len() as u64));
        self.note_written(range, change);
    }

    /// D824 and D720 for `range` without writing bytes: what C2 does for a marked chunk.
    pub fn note_written(&mut self, range: ByteRange, change: &mut MemoryChange) {
        let pages = ByteRange::new(
            range.start & !(self.page_bytes - 1),
            range.end.saturating_add(self.page_bytes - 1) & !(self.page_bytes - 1),
        );
        let shift = self.page_shift;
        for r in self.reservations.values_mut() {
            if let Some(both) = r.range.intersection(&pages) {
                let first = ((both.start - r.range.start) >> shift) as usize;
                let last = ((both.end - r.range.start) >> shift) as usize;
                for p in r.pages.get_mut(first..last).into_iter().flatten() {
                    p.written = true;
                }
                change.noted_written.push(both);
            }
        }
        for t in self.targets.values_mut() {
            if t.trusted && t.range.overlaps(&range) {
                t.trusted = false;
                change.distrusted.push(t.id);
            }
        }
    }

    /// M2: commit every page of `range`, release the guards over it and note its pages written.
    /// Returns (pages committed now, guards released).
    pub fn commit_for_mapping(&mut self, range: ByteRange) -> (u64, u64) {
        let (mut committed, mut released) = (0, 0);
        let _ = self.pages_mut(range, |p| {
            if !p.committed {
                p.committed = true;
                committed += 1;
            }
            if p.guarded {
                p.guarded = false;
                released += 1;
            }
            p.written = true;
        });
        (committed, released)
    }

    /// C3: writes every deferred copy into guest memory; returns what was written.
    pub fn flush_deferred(&mut self, change: &mut MemoryChange) -> Vec<(u64, Vec<u8>)> {
        let copies = std::mem::take(&mut self.deferred);
        for (addr, bytes) in &copies {
            self.host_write(*addr, bytes, change);
        }
        copies
    }

    /// Reads guest bytes; bytes no page holds read as zero.
    pub fn read_bytes(&self, address: u64, out: &mut [u8]) {
        let mut done = 0usize;
        while done < out.len() {
            let addr = address.wrapping_add(done as u64);
            let page = addr >> self.page_shift;
            let in_page = (addr & (self.page_bytes - 1)) as usize;
            let n = (self.page_bytes as usize - in_page).min(out.len() - done);
            match self.contents.get(&page) {
                Some(p) => out[done..done + n].copy_from_slice(&p[in_page..in_page + n]),
                None => out[done..done + n].fill(0),
            }
            done += n;
        }
    }

    /// Writes guest bytes with no write-watch or target effects (a device store, or loading a
    /// sample's contents).
    pub fn write_bytes(&mut self, address: u64, bytes: &[u8]) {
        let mut done = 0usize;
        let page_bytes = self.page_bytes as usize;
        while done < bytes.len() {
            let addr = address.wrapping_add(done as u64);
            let page = addr >> self.page_shift;
            let in_page = (addr & (self.page_bytes - 1)) as usize;
            let n = (page_bytes - in_page).min(bytes.len() - done);
            let p = self
                .contents
                .entry(page)
                .or_insert_with(|| vec![0u8; page_bytes].into_boxed_slice());
            p[in_page..in_page + n].copy_from_slice(&bytes[done..done + n]);
            done += n;
        }
    }

    /// Pages whose contents are held, with their bytes (for saving samples).
    pub fn content_pages(&self) -> impl Iterator<Item = (u64, &[u8])> {
        self.contents
            .iter()
            .map(move |(p, b)| (p << self.page_shift, &b[..]))
    }

    fn drop_contents(&mut self, range: ByteRange) {
        let first = range.start >> self.page_shift;
        let last = range.end.saturating_sub(1) >> self.page_shift;
        if last - first < self.contents.len() as u64 {
            for p in first..=last {
                self.contents.remove(&p);
            }
        } else {
            self.contents.retain(|p, _| *p < first || *p > last);
        }
    }
}

fn protection_for(readable: bool, writable: bool) -> HostProtection {
    match (readable, writable) {
        (_, true) => HostProtection::ReadWrite,
        (true, false) => HostProtection::Read,
        (false, false) => HostProtection::None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mem() -> GuestMemory {
        let mut m = GuestMemory::new(0x1000).unwrap();
        m.apply(&Event::Reserve {
            range: ByteRange::new(0x10000, 0x20000),
            readable: true,
            writable: true,
            committed: false,
            backing: Backing::Private,
        })
        .unwrap();
        m
    }

    #[test]
    fn m4_generation_moves_only_when_runs_change() {
        let mut m = mem();
        let g = m.generation();
        m.apply(&Event::Commit {
            range: ByteRange::new(0x10000, 0x11000),
        })
        .unwrap();
        assert_eq!(m.generation(), g, "a commit leaves the runs as they were");
        m.apply(&Event::Protect {
            range: ByteRange::new(0x12000, 0x13000),
            readable: false,
            writable: false,
        })
        .unwrap();
        assert_eq!(m.generation(), g + 1);
        assert_eq!(
            m.readable_runs().len(),
            2,
            "the unreadable page splits the run"
        );
        m.apply(&Event::Protect {
            range: ByteRange::new(0x12000, 0x13000),
            readable: false,
            writable: false,
        })
        .unwrap();
        assert_eq!(m.generation(), g + 1, "the same view again changes no run");
    }

    #[test]
    fn d720_cpu_write_distrusts_targets_and_notes_pages() {
        let mut m = mem();
        m.apply(&Event::AddTarget {
            id: 7,
            name: "albedo".into(),
            range: ByteRange::new(0x11000, 0x12000),
        })
        .unwrap();
        let c = m
            .apply(&Event::Write {
                address: 0x11ffe,
                bytes: vec![1, 2],
            })
            .unwrap();
        assert_eq!(c.distrusted, vec![7]);
        assert!(m.page_at(0x11000).unwrap().written);
        let mut out = [0u8; 4];
        m.read_bytes(0x11ffe, &mut out);
        assert_eq!(out, [1, 2, 0, 0]);
    }

    #[test]
    fn bad_events_are_named_errors() {
        let mut m = mem();
        assert!(matches!(
            m.apply(&Event::Commit {
                range: ByteRange::new(0x10001, 0x11000)
            }),
            Err(MemoryError::Unaligned { .. })
        ));
        assert!(matches!(
            m.apply(&Event::Release { base: 0x999000 }),
            Err(MemoryError::NoReservation { .. })
        ));
        assert!(matches!(
            m.apply(&Event::Write {
                address: 0x1,
                bytes: vec![0]
            }),
            Err(MemoryError::OutsideReservation { .. })
        ));
    }
}
