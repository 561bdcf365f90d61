//! The guest memory model: reservations whose pages each have a guest view and a host state,
//! sparse contents, readable runs and their generation, the write-watch (D824), protected targets
//! (D720) and deferred copies (C3).
//!
//! [`GuestMemory::apply`] applies one [`Event`] and says what changed in a [`MemoryChange`]; it
//! never maps anything (that is [`crate::import`]'s) and never looks at a dispatch.
//! [`GuestMemory::changed_since`] says which pages, reservations and targets changed since a
//! [`GuestMemory::state_changes`] count, from a bounded log ([`STATE_LOG_CHANGES`]), so that a
//! debugger's tap copies what changed rather than the whole state.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use hashbrown::HashMap;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::addr::ByteRange;
use crate::host::{HostError, HostMemory, HostRun, HostTraffic};
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

    /// M3: whether a page may be mapped: committed, private and read-write, and the guest may
    /// write it (a page the guest may not write is left out, whatever the host's protection).
    pub fn mappable(&self) -> bool {
        self.keeps_mapping() && !self.guarded
    }

    /// M3 for a page already mapped: committed, private, host read-write and guest-writable. A
    /// write-watch guard does not drop a mapping (device stores pass guards by; C1 marks them),
    /// and M2 releases the guards of every run it maps.
    pub fn keeps_mapping(&self) -> bool {
        self.committed
            && self.backing == Backing::Private
            && self.protection == HostProtection::ReadWrite
            && self.guest.writable
    }
}

/// A reserved guest range and its pages.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    /// The reserved bytes, page-aligned.
    pub range: ByteRange,
    /// The state of every page, kept as runs of equal states.
    pub pages: PageRuns,
    /// Host mode: where the emulator keeps the reservation's first byte (its own pointer).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::addr::hex::option"
    )]
    pub host_base: Option<u64>,
}

/// The pages of one reservation as maximal runs of equal [`PageState`]s, so that a reservation
/// costs its runs, not its pages: a 64-bit guest reserves terabytes as a matter of course, and a
/// 1 TiB reservation that no event has split is one run, as a 4 KiB one is.
///
/// Pages are numbered from 0 at the reservation's start. Runs are kept maximal (two neighbouring
/// runs never have the same state), so two reservations with the same pages compare equal.
/// Finding a page or changing a range of pages is O(log runs) plus the runs it changes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageRuns {
    /// How many pages.
    n_pages: u64,
    /// First page of each run → the run's state; a run ends where the next begins (or at
    /// `n_pages`). Never empty when `n_pages > 0`.
    runs: BTreeMap<u64, PageState>,
}

impl PageRuns {
    /// `n_pages` pages, all in `state`.
    pub fn new(n_pages: u64, state: PageState) -> Self {
        let mut runs = BTreeMap::new();
        if n_pages > 0 {
            runs.insert(0, state);
        }
        Self { n_pages, runs }
    }

    /// The pages of `runs` (`(pages, state)` in page order), joining equal neighbours and
    /// skipping empty runs: how a reader rebuilds a reservation from its saved runs, one step a
    /// run.
    pub fn from_runs(runs: impl IntoIterator<Item = (u64, PageState)>) -> Self {
        let mut n_pages = 0u64;
        let mut map = BTreeMap::new();
        let mut last: Option<PageState> = None;
        for (pages, state) in runs {
            if pages == 0 {
                continue;
            }
            if last != Some(state) {
                map.insert(n_pages, state);
                last = Some(state);
            }
            n_pages = n_pages.saturating_add(pages);
        }
        Self { n_pages, runs: map }
    }

    /// How many pages.
    pub fn len(&self) -> u64 {
        self.n_pages
    }

    /// Whether there are no pages.
    pub fn is_empty(&self) -> bool {
        self.n_pages == 0
    }

    /// How many runs.
    pub fn n_runs(&self) -> usize {
        self.runs.len()
    }

    /// The state of page `i`.
    pub fn get(&self, i: u64) -> Option<&PageState> {
        if i >= self.n_pages {
            return None;
        }
        self.runs.range(..=i).next_back().map(|(_, p)| p)
    }

    /// The state of the first page.
    pub fn first(&self) -> Option<&PageState> {
        self.get(0)
    }

    /// Every run as `(first page, end page, state)`, half-open, in page order.
    pub fn runs(&self) -> impl Iterator<Item = (u64, u64, &PageState)> + '_ {
        let mut it = self.runs.iter().peekable();
        std::iter::from_fn(move || {
            let (&start, state) = it.next()?;
            let end = it.peek().map_or(self.n_pages, |(next, _)| **next);
            Some((start, end, state))
        })
    }

    /// The runs that pages `first..end` lie in, clipped to them, in page order.
    pub fn runs_in(
        &self,
        first: u64,
        end: u64,
    ) -> impl Iterator<Item = (u64, u64, &PageState)> + '_ {
        let end = end.min(self.n_pages);
        let from = self
            .runs
            .range(..=first)
            .next_back()
            .map_or(first, |(&k, _)| k);
        let mut it = self.runs.range(from..end.max(from)).peekable();
        std::iter::from_fn(move || {
            let (&start, state) = it.next()?;
            let run_end = it.peek().map_or(end, |(next, _)| (**next).min(end));
            Some((start.max(first), run_end, state))
        })
        .filter(|(a, b, _)| a < b)
    }

    /// Every page's state in page order, one item a page (as a slice of pages would give them);
    /// prefer [`PageRuns::runs`] for anything that may be large.
    pub fn iter(&self) -> impl Iterator<Item = &PageState> + '_ {
        self.runs().flat_map(|(a, b, p)| {
            std::iter::repeat_n(p, usize::try_from(b - a).unwrap_or(usize::MAX))
        })
    }

    /// Splits the run holding page `at` so that a run starts there (`at < n_pages`).
    fn split_at(&mut self, at: u64) {
        if at >= self.n_pages || self.runs.contains_key(&at) {
            return;
        }
        if let Some(&state) = self.runs.range(..at).next_back().map(|(_, p)| p) {
            self.runs.insert(at, state);
        }
    }

    /// Applies `f` to the state of every page in `first..end` (clipped to the pages), then
    /// joins neighbouring runs that became equal. Returns how many pages `f` was applied to.
    pub fn update(&mut self, first: u64, end: u64, f: impl FnMut(&mut PageState)) -> u64 {
        self.update_noting(first, end, f, |_, _| {})
    }

    /// [`Self::update`], calling `changed` with each stretch of pages `(first, end)` whose state
    /// `f` changed (in page order, neighbouring changed runs as one stretch): what the change log
    /// of [`GuestMemory::changed_since`] notes, so that a wide update that changes a few pages
    /// notes those pages, not the range.
    pub fn update_noting(
        &mut self,
        first: u64,
        end: u64,
        mut f: impl FnMut(&mut PageState),
        mut changed: impl FnMut(u64, u64),
    ) -> u64 {
        let end = end.min(self.n_pages);
        if first >= end {
            return 0;
        }
        self.split_at(first);
        self.split_at(end);
        let mut open: Option<u64> = None;
        for (&k, p) in self.runs.range_mut(first..end) {
            let before = *p;
            f(p);
            match (open, *p != before) {
                (None, true) => open = Some(k),
                (Some(s), false) => {
                    changed(s, k);
                    open = None;
                }
                _ => {}
            }
        }
        if let Some(s) = open {
            changed(s, end);
        }
        // Join equal neighbours from the run before `first` to the run at `end`.
        let from = self
            .runs
            .range(..first)
            .next_back()
            .map_or(first, |(&k, _)| k);
        let keys: Vec<u64> = self.runs.range(from..=end).map(|(&k, _)| k).collect();
        let mut prev: Option<PageState> = None;
        for k in keys {
            let state = self.runs[&k];
            if prev == Some(state) {
                self.runs.remove(&k);
            } else {
                prev = Some(state);
            }
        }
        end - first
    }

    /// Calls `f` with `(pages, state)` for each run over `first..end` and sums what it returns:
    /// counting pages that have a property without visiting each page.
    pub fn count(&self, first: u64, end: u64, f: impl Fn(&PageState) -> bool) -> u64 {
        self.runs_in(first, end)
            .filter(|(_, _, p)| f(p))
            .map(|(a, b, _)| b - a)
            .sum()
    }
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
    #[error("host page size {page_bytes:#x} is not a power of two from 0x100 to 0x10000 bytes")]
    BadPageSize { page_bytes: u64 },
    #[error("{len:#x} bytes at {address:#x} pass the end of the 64-bit address space")]
    BytesWrap { address: u64, len: u64 },
    #[error(
        "reserving {range} in host mode needs the host address where the emulator keeps it (host_base)"
    )]
    NoHostBase { range: ByteRange },
    #[error(
        "host base {host_base:#x} of {range} is not aligned to the {page_bytes:#x}-byte host page"
    )]
    HostBaseUnaligned {
        range: ByteRange,
        host_base: u64,
        page_bytes: u64,
    },
    #[error(
        "the host base {host_base:#x} of {range} makes host addresses pass the end of the address space"
    )]
    HostBaseWraps { range: ByteRange, host_base: u64 },
    #[error("{0}")]
    HostAliased(Box<HostAliased>),
    #[error("{0}")]
    Host(Box<HostError>),
}

/// Two reservations over the same host pages: refused at the second reserve, naming the first.
#[derive(Clone, Debug, PartialEq, Eq, Error, Serialize, Deserialize)]
#[error(
    "reserving {range} at host {host}, the host pages of the reservation at {other} (host {other_host}): two reservations may not share host pages, or a store through one would change the other's bytes"
)]
pub struct HostAliased {
    /// The reservation refused.
    pub range: ByteRange,
    /// Its host bytes.
    pub host: ByteRange,
    /// The reservation whose host bytes it overlaps.
    pub other: ByteRange,
    /// That reservation's host bytes.
    pub other_host: ByteRange,
}

/// Guest bytes a host write did not land, and why: never dropped silently; the caller keeps them
/// (C3's deferred copies stay deferred) or reports them lost (O8's write-back).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailedWrite {
    /// The guest bytes that did not land.
    pub guest: ByteRange,
    /// Why.
    pub error: HostError,
}

/// Failures of host calls kept for one dispatch's report; more are counted, not kept.
pub const HOST_FAILURES_KEPT: usize = 64;

impl From<HostError> for MemoryError {
    fn from(e: HostError) -> Self {
        Self::Host(Box::new(e))
    }
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

/// What changed in guest memory's state at one [`GuestMemory::state_changes`] count, as
/// [`GuestMemory::changed_since`] lists it: where to look again, not the new state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateChange {
    /// Pages of these bytes (page-aligned, in one reservation or more) may have changed state.
    Pages(ByteRange),
    /// A reservation of these bytes was made or released.
    Reservation(ByteRange),
    /// The protected target of this id was added, removed or distrusted.
    Target(u32),
}

/// The most changes [`GuestMemory::changed_since`] remembers: older ones are forgotten (a caller
/// asking past them is told to copy the whole state). 4,096 entries of 32 bytes: 128 KiB at most,
/// reached once and then reused, so noting a change never allocates in steady state.
pub const STATE_LOG_CHANGES: usize = 4096;

/// The widest range of pages two changes at different counts are joined into: a caller between
/// the two looks again at the older one's pages too, so the join is kept small (a sweep of
/// neighbouring pages takes one entry per 64 KiB, not one per page).
const JOIN_BYTES: u64 = 64 << 10;

/// The log behind [`GuestMemory::changed_since`]: each change with the count it made, oldest
/// first, counts never going back; a change of pages that touches the last one noted widens it
/// (and takes the newer count) instead of taking an entry, where both are of one count or the
/// two together span at most [`JOIN_BYTES`].
#[derive(Clone, Debug, Default)]
struct StateLog {
    entries: VecDeque<(u64, StateChange)>,
    /// Changes made at or before this count may be forgotten.
    floor: u64,
}

impl StateLog {
    /// Notes `change`, made at count `count`: O(1), no allocation once the log is full.
    fn note(&mut self, count: u64, change: StateChange) {
        if let (Some((at, StateChange::Pages(last))), StateChange::Pages(r)) =
            (self.entries.back_mut(), change)
            && last.start <= r.end
            && r.start <= last.end
        {
            let both = ByteRange::new(last.start.min(r.start), last.end.max(r.end));
            if *at == count || both.size_bytes() <= JOIN_BYTES {
                // A superset with the newer count: a caller past the older one looks at both.
                *last = both;
                *at = count;
                return;
            }
        }
        if self.entries.len() >= STATE_LOG_CHANGES
            && let Some((at, _)) = self.entries.pop_front()
        {
            self.floor = at;
        }
        self.entries.push_back((count, change));
    }
}

/// Where guest bytes are: one memory interface, two implementations. Simulated memory keeps sparse
/// page contents (samples, captures, replays, `verify`); host memory is the emulator's own pages,
/// never copied (`crate::host`).
#[derive(Clone)]
enum Contents {
    /// Page number to the page's bytes. hashbrown's default hasher: the CPU reference looks pages
    /// up per contiguous run of every device access, where std's SipHash was a fifth of a dispatch.
    Simulated(HashMap<u64, Box<[u8]>>),
    /// The emulator's pages, and the failures of calls that had no way to return them (C2's
    /// hand-off), kept until the engine takes them into a report.
    Host {
        host: Arc<dyn HostMemory>,
        failures: Vec<HostError>,
        /// Host ranges of the reservations: host start → (host end, guest base), so that two
        /// reservations over the same host pages are refused (a store through one would change
        /// the other's bytes).
        host_ranges: BTreeMap<u64, (u64, u64)>,
        /// Bytes read from the emulator's pages (reads take `&self`).
        bytes_read: Arc<std::sync::atomic::AtomicU64>,
    },
}

impl std::fmt::Debug for Contents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Contents::Simulated(pages) => write!(f, "Simulated({} pages)", pages.len()),
            Contents::Host { host, failures, .. } => {
                write!(f, "Host({}, {failures:?})", host.name())
            }
        }
    }
}

/// All of guest memory as the emulator's memory manager keeps it.
#[derive(Clone, Debug)]
pub struct GuestMemory {
    page_bytes: u64,
    page_shift: u32,
    reservations: BTreeMap<u64, Reservation>,
    contents: Contents,
    /// What host mode did with the emulator's bytes.
    traffic: HostTraffic,
    targets: BTreeMap<u32, ProtectedTarget>,
    deferred: Vec<(u64, Vec<u8>)>,
    generation: u64,
    /// Moves whenever a page's state or a target changes (what a checkpoint of memory state
    /// holds); see [`GuestMemory::state_changes`].
    state_changes: u64,
    /// What changed at each recent count ([`GuestMemory::changed_since`]).
    log: StateLog,
}

impl GuestMemory {
    /// Empty guest memory with host pages of `page_bytes`.
    pub fn new(page_bytes: u64) -> Result<Self, MemoryError> {
        if !page_bytes.is_power_of_two()
            || !(0x100..=crate::input::MAX_HOST_PAGE_BYTES).contains(&page_bytes)
        {
            return Err(MemoryError::BadPageSize { page_bytes });
        }
        Ok(Self {
            page_bytes,
            page_shift: page_bytes.trailing_zeros(),
            reservations: BTreeMap::new(),
            contents: Contents::Simulated(HashMap::new()),
            traffic: HostTraffic::default(),
            targets: BTreeMap::new(),
            deferred: Vec::new(),
            generation: 0,
            state_changes: 0,
            log: StateLog::default(),
        })
    }

    /// Empty guest memory in host mode: its bytes are the emulator's own pages, reached through
    /// `host` (`crate::host`); every reservation must name its host base.
    pub fn with_host(page_bytes: u64, host: Arc<dyn HostMemory>) -> Result<Self, MemoryError> {
        let mut m = Self::new(page_bytes)?;
        m.contents = Contents::Host {
            host,
            failures: Vec::new(),
            host_ranges: BTreeMap::new(),
            bytes_read: Arc::default(),
        };
        Ok(m)
    }

    /// The emulator's memory, in host mode.
    pub fn host(&self) -> Option<&Arc<dyn HostMemory>> {
        match &self.contents {
            Contents::Host { host, .. } => Some(host),
            Contents::Simulated(_) => None,
        }
    }

    /// What host mode did with the emulator's bytes so far (all zero in simulated mode).
    pub fn host_traffic(&self) -> HostTraffic {
        let mut t = self.traffic;
        if let Contents::Host { bytes_read, .. } = &self.contents {
            t.bytes_read = bytes_read.load(std::sync::atomic::Ordering::Relaxed);
        }
        t
    }

    /// Takes the failures of host calls that could not return them (C2's hand-off), at most
    /// [`HOST_FAILURES_KEPT`]; the engine puts them in the dispatch's report.
    pub fn take_host_failures(&mut self) -> Vec<HostError> {
        match &mut self.contents {
            Contents::Host { failures, .. } => std::mem::take(failures),
            Contents::Simulated(_) => Vec::new(),
        }
    }

    /// The host address of guest `addr` in host mode, and how many bytes from there the same
    /// reservation holds.
    pub fn host_address(&self, addr: u64) -> Option<(u64, u64)> {
        let r = self.reservation_at(addr)?;
        let base = r.host_base?;
        Some((base + (addr - r.range.start), r.range.end - addr))
    }

    fn record_failure(&mut self, e: HostError) {
        self.traffic.failures += 1;
        if let Contents::Host { failures, .. } = &mut self.contents
            && failures.len() < HOST_FAILURES_KEPT
        {
            failures.push(e);
        }
    }

    /// Bytes in a host page.
    pub fn page_bytes(&self) -> u64 {
        self.page_bytes
    }

    /// M4: the generation of the readable runs; it moves when they change.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// A count that moves whenever a reservation, a page's state or a protected target changes
    /// (not when only contents or deferred copies do): what a debugger's tap reads, one load a
    /// dispatch, to know whether its last checkpoint of memory state still holds. Equal counts
    /// mean equal states; a moved count may still leave the state as it was (a target removed
    /// and made again).
    pub fn state_changes(&self) -> u64 {
        self.state_changes
    }

    /// What changed in the state since [`Self::state_changes`] read `count`, oldest first (a page
    /// range may be listed twice, and a listed range may have changed back): `None` when the log
    /// no longer reaches back to `count` ([`STATE_LOG_CHANGES`]) or `count` is not one this
    /// memory has reached, so the caller copies the whole state instead. O(log of the log) to
    /// find the first change, then one step a change.
    pub fn changed_since(&self, count: u64) -> Option<impl Iterator<Item = &StateChange> + '_> {
        if count < self.log.floor || count > self.state_changes {
            return None;
        }
        let from = self.log.entries.partition_point(|(at, _)| *at <= count);
        Some(self.log.entries.range(from..).map(|(_, c)| c))
    }

    /// Counts one change of the state, noting what it touched.
    fn changed(&mut self, change: StateChange) {
        self.state_changes += 1;
        self.log.note(self.state_changes, change);
    }

    /// Every reservation, by start.
    pub fn reservations(&self) -> impl Iterator<Item = &Reservation> {
        self.reservations.values()
    }

    /// Every protected target, by id.
    pub fn targets(&self) -> impl Iterator<Item = &ProtectedTarget> {
        self.targets.values()
    }

    /// The protected target of id `id`, if there is one.
    pub fn target(&self, id: u32) -> Option<&ProtectedTarget> {
        self.targets.get(&id)
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
        r.pages.get((addr - r.range.start) >> self.page_shift)
    }

    /// The page-aligned range of the page holding `addr`.
    pub fn page_range(&self, addr: u64) -> ByteRange {
        let start = addr & !(self.page_bytes - 1);
        ByteRange::new(start, start.saturating_add(self.page_bytes))
    }

    /// Every readable run, in address order (M1, `rules.rs`; [`ReadableRun`]): O(runs of page states).
    pub fn readable_runs(&self) -> Vec<ReadableRun> {
        let mut runs: Vec<ReadableRun> = Vec::new();
        for r in self.reservations.values() {
            for (a, b, p) in r.pages.runs() {
                if !p.guest.readable {
                    continue;
                }
                let range = ByteRange::new(
                    r.range.start + (a << self.page_shift),
                    r.range.start + (b << self.page_shift),
                );
                match runs.last_mut() {
                    Some(last)
                        if last.reservation == r.range.start && last.range.end == range.start =>
                    {
                        last.range.end = range.end;
                    }
                    _ => runs.push(ReadableRun {
                        reservation: r.range.start,
                        range,
                    }),
                }
            }
        }
        runs
    }

    /// Calls `f` with the bytes and state of every run of equal page states in `range` that a
    /// reservation holds, clipped to whole pages of `range`, in address order.
    pub fn for_page_runs(&self, range: ByteRange, mut f: impl FnMut(ByteRange, &PageState)) {
        let first_res = self
            .reservations
            .range(..=range.start)
            .next_back()
            .map_or(range.start, |(&k, _)| k);
        for r in self
            .reservations
            .range(first_res..range.end.max(first_res))
            .map(|(_, r)| r)
        {
            let Some(both) = r.range.intersection(&range) else {
                continue;
            };
            let first = (both.start - r.range.start) >> self.page_shift;
            let end = (both.end - 1 - r.range.start) >> self.page_shift;
            for (a, b, p) in r.pages.runs_in(first, end + 1) {
                f(
                    ByteRange::new(
                        r.range.start + (a << self.page_shift),
                        r.range.start + (b << self.page_shift),
                    ),
                    p,
                );
            }
        }
    }

    /// Calls `f` with the address and state of every page in `range` that a reservation holds,
    /// page by page; [`GuestMemory::for_page_runs`] visits runs and is what large ranges want.
    pub fn for_pages(&self, range: ByteRange, mut f: impl FnMut(u64, &PageState)) {
        let page = self.page_bytes;
        self.for_page_runs(range, |run, p| {
            let mut addr = run.start;
            while addr < run.end {
                f(addr, p);
                addr += page;
            }
        });
    }

    fn pages_mut(
        &mut self,
        range: ByteRange,
        f: impl FnMut(&mut PageState),
    ) -> Result<u64, MemoryError> {
        self.check_aligned(range)?;
        let shift = self.page_shift;
        let r = self
            .reservations
            .range_mut(..=range.start)
            .next_back()
            .map(|(_, r)| r)
            .filter(|r| r.range.contains_range(&range))
            .ok_or(MemoryError::OutsideReservation { range })?;
        let first = (range.start - r.range.start) >> shift;
        let end = (range.end - r.range.start) >> shift;
        // One count for the whole update, each stretch it changed noted at it.
        let count = self.state_changes + 1;
        let (log, start) = (&mut self.log, r.range.start);
        let mut changed = false;
        let n = r.pages.update_noting(first, end, f, |a, b| {
            log.note(
                count,
                StateChange::Pages(ByteRange::new(start + (a << shift), start + (b << shift))),
            );
            changed = true;
        });
        if changed {
            self.state_changes = count;
        }
        Ok(n)
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

    /// Whether any page of `range` has a guest readability other than `readable`.
    fn readability_differs(&self, range: ByteRange, readable: bool) -> bool {
        let mut differs = false;
        self.for_page_runs(range, |_, p| differs |= p.guest.readable != readable);
        differs
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
                host_base,
            } => {
                self.check_aligned(*range)?;
                let host_base = match (&self.contents, host_base) {
                    (Contents::Host { .. }, None | Some(0)) => {
                        return Err(MemoryError::NoHostBase { range: *range });
                    }
                    (Contents::Host { .. }, Some(h)) => {
                        if h & (self.page_bytes - 1) != 0 {
                            return Err(MemoryError::HostBaseUnaligned {
                                range: *range,
                                host_base: *h,
                                page_bytes: self.page_bytes,
                            });
                        }
                        if h.checked_add(range.size_bytes()).is_none() {
                            return Err(MemoryError::HostBaseWraps {
                                range: *range,
                                host_base: *h,
                            });
                        }
                        Some(*h)
                    }
                    // Simulated memory keeps a recorded host base for the record only.
                    (Contents::Simulated(_), h) => *h,
                };
                // Reservations never overlap, so the one starting last before the range's end is
                // the only one that can: O(log n), not a scan.
                if let Some((_, existing)) = self.reservations.range(..range.end).next_back()
                    && existing.range.overlaps(range)
                {
                    return Err(MemoryError::ReservationOverlap {
                        range: *range,
                        existing: existing.range,
                    });
                }
                if let (Some(h), Contents::Host { host_ranges, .. }) =
                    (host_base, &mut self.contents)
                {
                    let end = h + range.size_bytes();
                    if let Some((&other_host, &(other_host_end, other))) =
                        host_ranges.range(..end).next_back()
                        && other_host_end > h
                    {
                        let other = self
                            .reservations
                            .get(&other)
                            .map_or(ByteRange::new(other, other), |r| r.range);
                        return Err(MemoryError::HostAliased(Box::new(HostAliased {
                            range: *range,
                            host: ByteRange::new(h, end),
                            other,
                            other_host: ByteRange::new(other_host, other_host_end),
                        })));
                    }
                    host_ranges.insert(h, (end, range.start));
                }
                let n = range.size_bytes() >> self.page_shift;
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
                        pages: PageRuns::new(n, page),
                        host_base,
                    },
                );
                self.changed(StateChange::Reservation(*range));
                change.runs_changed = *readable;
            }
            Event::Release { base } => {
                let r = self
                    .reservations
                    .get(base)
                    .ok_or(MemoryError::NoReservation { base: *base })?;
                let range = r.range;
                let host_base = r.host_base;
                change.runs_changed = r.pages.runs().any(|(_, _, p)| p.guest.readable);
                change.host_memory_going.push(range);
                self.reservations.remove(base);
                if let (Some(h), Contents::Host { host_ranges, .. }) =
                    (host_base, &mut self.contents)
                {
                    host_ranges.remove(&h);
                }
                self.changed(StateChange::Reservation(range));
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
                self.check_range(*range)?;
                let differs = self.readability_differs(*range, *readable);
                self.pages_mut(*range, |p| {
                    p.guest = GuestView {
                        readable: *readable,
                        writable: *writable,
                    };
                    p.protection = protection_for(*readable, *writable);
                })?;
                change.runs_changed = differs;
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
            Event::Unguard { range } => {
                self.pages_mut(*range, |p| p.guarded = false)?;
                change.revisit.push(*range);
            }
            Event::Write { address, bytes } => {
                let range = self.byte_range(*address, bytes.len())?;
                if self.host().is_some() {
                    // The emulator's CPU wrote its own pages: the bytes are there already; the
                    // write-watch notes and D720 follow as for any host write.
                    self.note_written(range, &mut change);
                } else {
                    // Simulated memory takes every byte.
                    let _landed = self.host_write(*address, bytes, &mut change);
                }
            }
            Event::Wrote { range } => {
                self.check_bytes(range.start, range.size_bytes() as usize)?;
                if range.is_empty() {
                    return Err(MemoryError::Empty { range: *range });
                }
                // Only the range is known: the bytes are the emulator's, where they lie.
                self.note_written(*range, &mut change);
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
                self.changed(StateChange::Target(*id));
            }
            Event::RemoveTarget { id } => {
                self.targets
                    .remove(id)
                    .ok_or(MemoryError::NoTarget { id: *id })?;
                self.changed(StateChange::Target(*id));
            }
            Event::Retire => {}
        }
        if change.runs_changed {
            self.generation += 1;
        }
        Ok(change)
    }

    /// Checks that `len` bytes at `address` lie in one reservation (contents read from a file).
    pub fn check_bytes(&self, address: u64, len: usize) -> Result<(), MemoryError> {
        if len == 0 {
            return Ok(());
        }
        if address.checked_add(len as u64).is_none() {
            return Err(MemoryError::BytesWrap {
                address,
                len: len as u64,
            });
        }
        self.byte_range(address, len).map(drop)
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
    /// In host mode a write the emulator refused is returned with the bytes it did not land (the
    /// rest landed and is noted).
    pub fn host_write(
        &mut self,
        address: u64,
        bytes: &[u8],
        change: &mut MemoryChange,
    ) -> Result<(), Vec<FailedWrite>> {
        if bytes.is_empty() {
            return Ok(());
        }
        let landed = self.write_bytes(address, bytes);
        let range = ByteRange::new(address, address.saturating_add(bytes.len() as u64));
        self.note_written(range, change);
        landed
    }

    /// O8 in host mode: the runs `runs` (guest address and bytes, in address order, none
    /// overlapping) written through the emulator in one batch ([`HostMemory::write_runs`]), and
    /// `noted` (the pages they lie on) noted written once. Exactly the runs' bytes are written:
    /// nothing between them is read or rewritten. A run the emulator refused is returned with its
    /// bytes' range; the others landed. In simulated memory each run lands in the contents.
    pub fn write_runs(
        &mut self,
        runs: &[(u64, &[u8])],
        noted: ByteRange,
        change: &mut MemoryChange,
    ) -> Vec<FailedWrite> {
        let mut failed = Vec::new();
        let host = match &self.contents {
            Contents::Host { host, .. } => Some(Arc::clone(host)),
            Contents::Simulated(_) => None,
        };
        match host {
            None => {
                for &(a, b) in runs {
                    let _landed = self.write_bytes(a, b);
                }
            }
            Some(host) => {
                // Guest runs to host runs: by one offset where the batch lies in one reservation
                // (a holder always does), else run by run, split where a run crosses reservations.
                let mut host_runs: Vec<HostRun<'_>> = Vec::with_capacity(runs.len());
                let mut guest_of: Vec<u64> = Vec::new();
                let one = match (runs.first(), runs.last()) {
                    (Some(&(a, _)), Some(&(z, zb))) => self
                        .reservation_at(a)
                        .filter(|r| z.saturating_add(zb.len() as u64) <= r.range.end)
                        .and_then(|r| Some((r.host_base?, r.range.start))),
                    _ => None,
                };
                // In one reservation run k is `runs[k]` (no split): its guest address is its own.
                if let Some((host_base, guest_base)) = one {
                    host_runs.extend(runs.iter().map(|&(a, b)| HostRun {
                        host_addr: host_base + (a - guest_base),
                        bytes: b,
                    }));
                }
                for &(a, b) in runs.iter().filter(|_| one.is_none()) {
                    for (at, n, h) in self.host_spans(a, b.len()) {
                        let guest = a + at as u64;
                        match h {
                            Some(h) => {
                                host_runs.push(HostRun {
                                    host_addr: h,
                                    bytes: &b[at..at + n],
                                });
                                guest_of.push(guest);
                            }
                            None => failed.push(FailedWrite {
                                guest: ByteRange::new(guest, guest + n as u64),
                                error: no_reservation("write", guest, n),
                            }),
                        }
                    }
                }
                let mut from = 0;
                while from < host_runs.len() {
                    match host.write_runs(&host_runs[from..]) {
                        Ok(()) => {
                            self.traffic.bytes_written += host_runs[from..]
                                .iter()
                                .map(|r| r.bytes.len() as u64)
                                .sum::<u64>();
                            break;
                        }
                        Err((k, e)) => {
                            let k = from + k.min(host_runs.len() - from - 1);
                            self.traffic.bytes_written += host_runs[from..k]
                                .iter()
                                .map(|r| r.bytes.len() as u64)
                                .sum::<u64>();
                            self.traffic.failures += 1;
                            let g = if one.is_some() {
                                runs[k].0
                            } else {
                                guest_of[k]
                            };
                            failed.push(FailedWrite {
                                guest: ByteRange::new(g, g + host_runs[k].bytes.len() as u64),
                                error: e.at_guest(g),
                            });
                            from = k + 1;
                        }
                    }
                }
            }
        }
        self.note_written(noted, change);
        failed
    }

    /// D824 and D720 for `range` without writing bytes: what C2 does for a marked chunk.
    pub fn note_written(&mut self, range: ByteRange, change: &mut MemoryChange) {
        let pages = ByteRange::new(
            range.start & !(self.page_bytes - 1),
            range.end.saturating_add(self.page_bytes - 1) & !(self.page_bytes - 1),
        );
        let shift = self.page_shift;
        // One count for the whole write, every part it changed noted at it.
        let count = self.state_changes + 1;
        let mut changed = false;
        let first_res = self
            .reservations
            .range(..=pages.start)
            .next_back()
            .map_or(pages.start, |(&k, _)| k);
        for (_, r) in self
            .reservations
            .range_mut(first_res..pages.end.max(first_res))
        {
            if let Some(both) = r.range.intersection(&pages) {
                let first = (both.start - r.range.start) >> shift;
                let end = (both.end - r.range.start) >> shift;
                let (log, start) = (&mut self.log, r.range.start);
                r.pages.update_noting(
                    first,
                    end,
                    |p| p.written = true,
                    |a, b| {
                        log.note(
                            count,
                            StateChange::Pages(ByteRange::new(
                                start + (a << shift),
                                start + (b << shift),
                            )),
                        );
                        changed = true;
                    },
                );
                change.noted_written.push(both);
            }
        }
        for t in self.targets.values_mut() {
            if t.trusted && t.range.overlaps(&range) {
                t.trusted = false;
                self.log.note(count, StateChange::Target(t.id));
                changed = true;
                change.distrusted.push(t.id);
            }
        }
        if changed {
            self.state_changes = count;
        }
    }

    /// M2: commit every page of `range`, release the guards over it and note its pages written.
    /// Returns (pages committed now, guards released). In host mode the commit and the guard
    /// release are the emulator's, asked run by run; a refusal changes nothing and is returned.
    pub fn commit_for_mapping(&mut self, range: ByteRange) -> Result<(u64, u64), MemoryError> {
        let mut committed = 0;
        let mut released = 0;
        let mut to_commit = Vec::new();
        let mut to_release = Vec::new();
        self.for_page_runs(range, |run, p| {
            let pages = run.size_bytes() >> self.page_shift;
            if !p.committed {
                committed += pages;
                to_commit.push(run);
            }
            if p.guarded {
                released += pages;
                to_release.push(run);
            }
        });
        if let Some(host) = self.host().cloned() {
            // What the emulator did before a failure stays done and noted: a page it committed is
            // committed, whatever happens to the rest of the run.
            for run in to_commit {
                let (h, _) = self.host_address(run.start).unwrap_or_default();
                if let Err(e) = host.commit(h, run.size_bytes()) {
                    self.traffic.failures += 1;
                    return Err(e.at_guest(run.start).into());
                }
                let _ = self.pages_mut(run, |p| p.committed = true);
            }
            for run in to_release {
                let (h, _) = self.host_address(run.start).unwrap_or_default();
                if let Err(e) = host.release_guards(h, run.size_bytes()) {
                    self.traffic.failures += 1;
                    return Err(e.at_guest(run.start).into());
                }
                let _ = self.pages_mut(run, |p| {
                    p.guarded = false;
                    p.written = true;
                });
            }
        }
        let _ = self.pages_mut(range, |p| {
            p.committed = true;
            p.guarded = false;
            p.written = true;
        });
        Ok((committed, released))
    }

    /// M2 again in host mode, before a device-addressed dispatch: a write-watch guard the emulator
    /// placed over a mapped page since it was mapped is released (through the emulator) and the
    /// page noted written, because a device store through the import would pass the guard by on
    /// one driver and kill the process on another (TOOLCHAIN.md). Returns the pages released.
    pub fn release_guards_over(&mut self, range: ByteRange) -> Result<u64, MemoryError> {
        let Some(host) = self.host().cloned() else {
            return Ok(0);
        };
        let mut guarded = Vec::new();
        self.for_page_runs(range, |run, p| {
            if p.guarded {
                guarded.push(run);
            }
        });
        let mut pages = 0;
        for run in guarded {
            let (h, _) = self.host_address(run.start).unwrap_or_default();
            if let Err(e) = host.release_guards(h, run.size_bytes()) {
                self.traffic.failures += 1;
                return Err(e.at_guest(run.start).into());
            }
            self.pages_mut(run, |p| {
                p.guarded = false;
                p.written = true;
            })?;
            pages += run.size_bytes() >> self.page_shift;
        }
        Ok(pages)
    }

    /// C2 in host mode: the emulator learns that the device stored into `range`.
    pub fn hand_off_to_host(&mut self, range: ByteRange) {
        let Some(host) = self.host().cloned() else {
            return;
        };
        let Some((h, _)) = self.host_address(range.start) else {
            return;
        };
        if let Err(e) = host.hand_off(range, h) {
            self.record_failure(e);
        }
    }

    /// Reads guest bytes for a debugger: from the emulator's pages in host mode (counted), from the
    /// simulated contents otherwise. A page the process cannot read, or bytes no reservation
    /// holds in host mode, are an error naming the address, never a crash and never zeros.
    pub fn try_read_bytes(&self, address: u64, out: &mut [u8]) -> Result<(), HostError> {
        self.read_bytes(address, out)
    }

    /// Splits `len` guest bytes at `address` into spans of one reservation each: `(offset into the
    /// bytes, length, the host address)`, the host address `None` for bytes no reservation holds.
    fn host_spans(&self, address: u64, len: usize) -> Vec<(usize, usize, Option<u64>)> {
        let mut spans = Vec::new();
        let mut done = 0usize;
        while done < len {
            let addr = address.wrapping_add(done as u64);
            let rest = (len - done) as u64;
            let (n, host) = match self.host_address(addr) {
                Some((h, left)) => (left.min(rest), Some(h)),
                None => {
                    let next = self
                        .reservations
                        .range(addr..)
                        .next()
                        .map_or(u64::MAX, |(&k, _)| k);
                    (next.saturating_sub(addr).min(rest).max(1), None)
                }
            };
            spans.push((done, n as usize, host));
            done += n as usize;
        }
        spans
    }

    /// Reads host-mode bytes, reservation by reservation. Bytes no reservation holds are an error:
    /// host mode has no bytes of its own to give for them.
    fn read_host(&self, address: u64, out: &mut [u8]) -> Result<(), HostError> {
        let Contents::Host {
            host, bytes_read, ..
        } = &self.contents
        else {
            return Ok(());
        };
        for (at, n, h) in self.host_spans(address, out.len()) {
            let span = &mut out[at..at + n];
            let guest = address.wrapping_add(at as u64);
            match h {
                Some(h) => {
                    host.read(h, span).map_err(|e| {
                        // The host names the first byte it could not read, where it knows it.
                        let into = e.host_addr.saturating_sub(h).min(n as u64);
                        let g = guest + into;
                        e.at_guest(g)
                    })?;
                    bytes_read.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
                }
                None => return Err(no_reservation("read", guest, n)),
            }
        }
        Ok(())
    }

    /// Writes host-mode bytes through the emulator, reservation by reservation; the spans that
    /// did not land (the emulator refused them, or no reservation holds them) are returned.
    fn write_host(&mut self, address: u64, bytes: &[u8]) -> Result<(), Vec<FailedWrite>> {
        let Contents::Host { host, .. } = &self.contents else {
            return Ok(());
        };
        let host = Arc::clone(host);
        let mut failed = Vec::new();
        for (at, n, h) in self.host_spans(address, bytes.len()) {
            let guest = address.wrapping_add(at as u64);
            let range = ByteRange::new(guest, guest.saturating_add(n as u64));
            let Some(h) = h else {
                failed.push(FailedWrite {
                    guest: range,
                    error: no_reservation("write", guest, n),
                });
                continue;
            };
            match host.write(h, &bytes[at..at + n]) {
                Ok(()) => self.traffic.bytes_written += n as u64,
                Err(e) => {
                    self.traffic.failures += 1;
                    failed.push(FailedWrite {
                        guest: range,
                        error: e.at_guest(guest),
                    });
                }
            }
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(failed)
        }
    }

    /// C3: writes the first `n` deferred copies into guest memory, in the order they were deferred;
    /// returns what was written. A copy (or the part of one) the emulator refused stays deferred,
    /// ahead of the rest, and is tried again at the next dispatch that needs it; its failure is
    /// returned too.
    pub fn flush_deferred_first(
        &mut self,
        n: usize,
        change: &mut MemoryChange,
    ) -> (Vec<(u64, Vec<u8>)>, Vec<FailedWrite>) {
        let n = n.min(self.deferred.len());
        let copies: Vec<(u64, Vec<u8>)> = self.deferred.drain(..n).collect();
        let mut landed = Vec::with_capacity(copies.len());
        let mut kept = Vec::new();
        let mut failures = Vec::new();
        for (addr, bytes) in copies {
            match self.host_write(addr, &bytes, change) {
                Ok(()) => landed.push((addr, bytes)),
                Err(failed) => {
                    for f in failed {
                        let from = (f.guest.start - addr) as usize;
                        let to = (f.guest.end - addr) as usize;
                        kept.push((f.guest.start, bytes[from..to].to_vec()));
                        failures.push(f);
                    }
                }
            }
        }
        self.deferred.splice(0..0, kept);
        (landed, failures)
    }

    /// C3: writes every deferred copy into guest memory; returns what was written and what stays
    /// deferred because the emulator refused it ([`GuestMemory::flush_deferred_first`]).
    pub fn flush_deferred(
        &mut self,
        change: &mut MemoryChange,
    ) -> (Vec<(u64, Vec<u8>)>, Vec<FailedWrite>) {
        self.flush_deferred_first(self.deferred.len(), change)
    }

    /// Reads guest bytes. Simulated memory reads bytes no page holds as zero (a page never
    /// written). In host mode it reads the emulator's pages; a page the process cannot read, a
    /// failing `read` callback, or bytes no reservation holds are an error naming the guest and
    /// host addresses: never zeros.
    pub fn read_bytes(&self, address: u64, out: &mut [u8]) -> Result<(), HostError> {
        let contents = match &self.contents {
            Contents::Simulated(c) => c,
            Contents::Host { .. } => return self.read_host(address, out),
        };
        let mut done = 0usize;
        while done < out.len() {
            let addr = address.wrapping_add(done as u64);
            let page = addr >> self.page_shift;
            let in_page = (addr & (self.page_bytes - 1)) as usize;
            let n = (self.page_bytes as usize - in_page).min(out.len() - done);
            match contents.get(&page) {
                Some(p) => out[done..done + n].copy_from_slice(&p[in_page..in_page + n]),
                None => out[done..done + n].fill(0),
            }
            done += n;
        }
        Ok(())
    }

    /// Reads guest bytes into `out`, which the caller has zeroed: only pages whose contents are
    /// held are copied, so a holder of gigabytes over few written pages costs those pages (the
    /// bytes of `out` over pages no content holds are left as they are, zero).
    pub fn read_bytes_into_zeroed(&self, address: u64, out: &mut [u8]) -> Result<(), HostError> {
        let len = out.len() as u64;
        if len == 0 {
            return Ok(());
        }
        let contents = match &self.contents {
            Contents::Simulated(c) => c,
            Contents::Host { .. } => return self.read_bytes(address, out),
        };
        let end = address.saturating_add(len);
        let first_page = address >> self.page_shift;
        let last_page = (end - 1) >> self.page_shift;
        let mut copy = |page: u64, bytes: &[u8]| {
            let page_start = page << self.page_shift;
            let from = page_start.max(address);
            let to = page_start.saturating_add(self.page_bytes).min(end);
            if from < to {
                let (src, dst) = ((from - page_start) as usize, (from - address) as usize);
                let n = (to - from) as usize;
                out[dst..dst + n].copy_from_slice(&bytes[src..src + n]);
            }
        };
        if last_page - first_page >= contents.len() as u64 {
            for (&page, bytes) in contents {
                if (first_page..=last_page).contains(&page) {
                    copy(page, bytes);
                }
            }
        } else {
            for page in first_page..=last_page {
                if let Some(bytes) = contents.get(&page) {
                    copy(page, bytes);
                }
            }
        }
        Ok(())
    }

    /// Writes guest bytes with no write-watch or target effects (a device store, or loading a
    /// sample's contents). Simulated memory takes every byte; in host mode the spans the emulator
    /// refused (or no reservation holds) are returned, the rest landed.
    pub fn write_bytes(&mut self, address: u64, bytes: &[u8]) -> Result<(), Vec<FailedWrite>> {
        let contents = match &mut self.contents {
            Contents::Simulated(c) => c,
            Contents::Host { .. } => return self.write_host(address, bytes),
        };
        let mut done = 0usize;
        let page_bytes = self.page_bytes as usize;
        while done < bytes.len() {
            let addr = address.wrapping_add(done as u64);
            let page = addr >> self.page_shift;
            let in_page = (addr & (self.page_bytes - 1)) as usize;
            let n = (page_bytes - in_page).min(bytes.len() - done);
            let p = contents
                .entry(page)
                .or_insert_with(|| vec![0u8; page_bytes].into_boxed_slice());
            p[in_page..in_page + n].copy_from_slice(&bytes[done..done + n]);
            done += n;
        }
        Ok(())
    }

    /// Pages whose contents are held, with their bytes (for saving samples).
    /// In host mode there are none: the emulator's pages are its own.
    pub fn content_pages(&self) -> impl Iterator<Item = (u64, &[u8])> {
        let pages = match &self.contents {
            Contents::Simulated(c) => Some(c.iter()),
            Contents::Host { .. } => None,
        };
        pages
            .into_iter()
            .flatten()
            .map(move |(p, b)| (p << self.page_shift, &b[..]))
    }

    fn drop_contents(&mut self, range: ByteRange) {
        let Contents::Simulated(contents) = &mut self.contents else {
            return;
        };
        let first = range.start >> self.page_shift;
        let last = range.end.saturating_sub(1) >> self.page_shift;
        if last - first < contents.len() as u64 {
            for p in first..=last {
                contents.remove(&p);
            }
        } else {
            contents.retain(|p, _| *p < first || *p > last);
        }
    }
}

/// Host mode has no bytes of its own: guest bytes no reservation holds cannot be read or written.
fn no_reservation(call: &str, guest: u64, n: usize) -> HostError {
    HostError::new(
        call,
        0,
        n as u64,
        format!("guest {guest:#x} lies in no reservation, so no host page holds it"),
    )
    .at_guest(guest)
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
            host_base: None,
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

    /// The count a tap reads moves with every change of a page's state or a target, and not for
    /// an event that leaves them as they were (so equal counts mean equal states).
    #[test]
    fn state_changes_move_with_the_state_alone() {
        let mut m = mem();
        let mut last = m.state_changes();
        let mut step = |m: &mut GuestMemory, e: Event, moves: bool| {
            let before = (
                m.reservations().cloned().collect::<Vec<_>>(),
                m.targets().cloned().collect::<Vec<_>>(),
            );
            m.apply(&e).unwrap();
            let after = (
                m.reservations().cloned().collect::<Vec<_>>(),
                m.targets().cloned().collect::<Vec<_>>(),
            );
            let now = m.state_changes();
            assert_eq!(now != last, moves, "{e:?}");
            if before != after {
                assert_ne!(
                    now, last,
                    "the state changed under {e:?} but the count did not move"
                );
            }
            last = now;
        };
        let page = ByteRange::new(0x11000, 0x12000);
        step(&mut m, Event::Commit { range: page }, true);
        step(&mut m, Event::Commit { range: page }, false);
        step(
            &mut m,
            Event::Write {
                address: 0x11000,
                bytes: vec![1],
            },
            true,
        );
        step(
            &mut m,
            Event::Write {
                address: 0x11004,
                bytes: vec![2],
            },
            false,
        );
        step(
            &mut m,
            Event::DeferCopy {
                address: 0x11000,
                bytes: vec![3],
            },
            false,
        );
        step(
            &mut m,
            Event::AddTarget {
                id: 1,
                name: "t".into(),
                range: page,
            },
            true,
        );
        step(
            &mut m,
            Event::Write {
                address: 0x11008,
                bytes: vec![4],
            },
            true,
        );
        step(&mut m, Event::Guard { range: page }, true);
        step(&mut m, Event::Retire, false);
        step(&mut m, Event::RemoveTarget { id: 1 }, true);
        step(&mut m, Event::Release { base: 0x10000 }, true);
        let mut m = mem();
        let c = m.state_changes();
        m.commit_for_mapping(ByteRange::new(0x10000, 0x20000))
            .unwrap();
        assert_ne!(m.state_changes(), c, "M2 commits and notes pages");
        let c = m.state_changes();
        m.write_bytes(0x10000, &[1, 2, 3]).unwrap();
        assert_eq!(m.state_changes(), c, "contents are not state");
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
        m.read_bytes(0x11ffe, &mut out).unwrap();
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

    /// Every page, reservation and target whose state differs between a copy of the memory at
    /// count `c` and the memory now lies in a change [`GuestMemory::changed_since`] lists.
    fn check_changes_cover(old: &GuestMemory, now: &GuestMemory, universe: ByteRange, ids: u32) {
        let listed: Vec<StateChange> = now
            .changed_since(old.state_changes())
            .expect("the log reaches back")
            .copied()
            .collect();
        let covered = |a: u64| {
            listed.iter().any(|c| match c {
                StateChange::Pages(r) | StateChange::Reservation(r) => r.contains(a),
                StateChange::Target(_) => false,
            })
        };
        let mut a = universe.start;
        while a < universe.end {
            let before = (old.reservation_at(a).map(|r| r.range), old.page_at(a));
            let after = (now.reservation_at(a).map(|r| r.range), now.page_at(a));
            assert!(
                before == after || covered(a),
                "page {a:#x} changed from {before:?} to {after:?}, not listed in {listed:?}"
            );
            a += old.page_bytes();
        }
        for id in 0..ids {
            assert!(
                old.target(id) == now.target(id) || listed.contains(&StateChange::Target(id)),
                "target {id} changed, not listed in {listed:?}"
            );
        }
    }

    /// One random event over two reservation slots of 16 pages and four target ids.
    fn random_event(pick: &[u64]) -> Event {
        let slot = 0x10000 + (pick[1] % 2) * 0x20000;
        let first = pick[2] % 16;
        let n = 1 + pick[3] % (16 - first);
        let range = ByteRange::new(slot + first * 0x1000, slot + (first + n) * 0x1000);
        match pick[0] % 10 {
            0 => Event::Reserve {
                range: ByteRange::new(slot, slot + 0x10000),
                readable: true,
                writable: pick[4].is_multiple_of(2),
                committed: false,
                backing: Backing::Private,
                host_base: None,
            },
            1 => Event::Release { base: slot },
            2 => Event::Guard { range },
            3 => Event::Unguard { range },
            4 => Event::Commit { range },
            5 => Event::Protect {
                range,
                readable: pick[4].is_multiple_of(2),
                writable: pick[4].is_multiple_of(3),
            },
            6 => Event::Write {
                address: range.start + 8,
                bytes: vec![1; (n * 0x1000) as usize / 2],
            },
            7 => Event::AddTarget {
                id: (pick[4] % 4) as u32,
                name: String::new(),
                range,
            },
            8 => Event::RemoveTarget {
                id: (pick[4] % 4) as u32,
            },
            _ => Event::HostProtect {
                range,
                protection: HostProtection::Read,
            },
        }
    }

    proptest::proptest! {
        /// Against a copy of the whole memory: whatever changed since any earlier count is listed.
        #[test]
        fn changed_since_lists_every_change(
            events in proptest::collection::vec(proptest::collection::vec(0u64..1 << 20, 5), 1..120),
            every in 1usize..8,
        ) {
            let mut m = mem();
            let universe = ByteRange::new(0x10000, 0x40000);
            let mut copies = vec![m.clone()];
            for (i, pick) in events.iter().enumerate() {
                let _ = m.apply(&random_event(pick));
                for old in &copies {
                    check_changes_cover(old, &m, universe, 4);
                }
                if i % every == 0 {
                    copies.push(m.clone());
                }
            }
        }
    }

    /// The log keeps at most [`STATE_LOG_CHANGES`] entries: past them a caller is told to copy
    /// the whole state; a count this memory has not reached is refused too.
    #[test]
    fn the_change_log_is_bounded() {
        let mut m = mem();
        let start = m.state_changes();
        assert_eq!(m.changed_since(start).unwrap().count(), 0);
        assert!(m.changed_since(start + 1).is_none(), "a count not reached");
        // Pages two apart never touch, so each page takes an entry (its guard and unguard one).
        for i in 0..(STATE_LOG_CHANGES as u64 + 10) {
            let page = 0x10000 + (i % 8) * 0x2000;
            let range = ByteRange::new(page, page + 0x1000);
            m.apply(&Event::Guard { range }).unwrap();
            m.apply(&Event::Unguard { range }).unwrap();
        }
        assert!(m.log.entries.len() <= STATE_LOG_CHANGES);
        assert!(m.changed_since(start).is_none(), "forgotten");
        let now = m.state_changes();
        let recent: Vec<_> = m.changed_since(now - 3).unwrap().copied().collect();
        assert_eq!(recent.len(), 2, "the last two pages: {recent:?}");
        // Neighbouring pages widen one entry.
        let mut m = mem();
        let c = m.state_changes();
        for i in 0..16u64 {
            let page = 0x10000 + i * 0x1000;
            m.apply(&Event::Guard {
                range: ByteRange::new(page, page + 0x1000),
            })
            .unwrap();
        }
        let listed: Vec<_> = m.changed_since(c).unwrap().copied().collect();
        assert_eq!(
            listed,
            vec![StateChange::Pages(ByteRange::new(0x10000, 0x20000))]
        );
        assert!(
            m.changed_since(c + 5).unwrap().count() == 1,
            "a caller between the widened entry's changes still sees it"
        );
        // A page changed beside a wide change made before is not joined to it: a caller between
        // the two looks at the one page.
        let mut m = GuestMemory::new(0x1000).unwrap();
        let wide = ByteRange::new(0x10000, 0x110000);
        m.apply(&Event::Reserve {
            range: wide,
            readable: true,
            writable: true,
            committed: false,
            backing: Backing::Private,
            host_base: None,
        })
        .unwrap();
        m.apply(&Event::Commit { range: wide }).unwrap();
        let c = m.state_changes();
        let page = ByteRange::new(0x10000, 0x11000);
        m.apply(&Event::Guard { range: page }).unwrap();
        let listed: Vec<_> = m.changed_since(c).unwrap().copied().collect();
        assert_eq!(listed, vec![StateChange::Pages(page)]);
        // A wide update that changes a few pages notes those pages.
        let c = m.state_changes();
        m.apply(&Event::Commit { range: wide }).unwrap();
        assert_eq!(m.state_changes(), c, "all committed already");
        m.apply(&Event::Unguard { range: wide }).unwrap();
        let listed: Vec<_> = m.changed_since(c).unwrap().copied().collect();
        assert_eq!(listed, vec![StateChange::Pages(page)]);
    }
}
