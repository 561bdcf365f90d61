//! M1–M5: host-imported mappings of guest memory into the device's address space.
//!
//! [`Mappings`] keeps the pieces mapped, the pieces left out and why, what was dropped and when,
//! and the generation the mappings were made for. It asks a [`Backend`] to import and release
//! pieces, and queues the piece changes the chunk table must follow. It never runs a dispatch and
//! never decides whether a dispatch is device-addressed.

use std::collections::BTreeMap;

use crate::addr::ByteRange;
use crate::backend::{Backend, BackendError};
use crate::host::{RealRefusal, split_real};
use crate::memory::{GuestMemory, PageState};
use crate::report::{EscapeClass, LeftOutReason, LeftOutReport, PieceReport, RealCheck, When};

/// A piece of a readable run imported into the device's address space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    /// Its guest bytes.
    pub guest: ByteRange,
    /// The device address of its first byte.
    pub device_base: u64,
    /// The reservation it lies in.
    pub reservation: u64,
    /// The dispatch it was mapped before.
    pub mapped_before_dispatch: u64,
    /// Mapped by an M5 revisit.
    pub by_revisit: bool,
    /// The import it reaches into ([`Import::serial`]).
    pub import: u64,
}

impl Piece {
    /// The device address guest `addr` has in this piece's import (a wrapping add, as the device
    /// does; meaningful for addresses in the import).
    pub fn device_at(&self, addr: u64) -> u64 {
        self.device_base
            .wrapping_add(addr.wrapping_sub(self.guest.start))
    }
}

/// Host pages handed to the driver once (M1), which pieces reach into: an import outlives the
/// pieces that reach it, so a page that stops qualifying (M3) and qualifies again costs the table
/// a slot and the driver nothing. It goes only when its host memory goes (M4), when the process
/// remapped its pages without an event (the checked mode), or when no readable run overlaps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Import {
    /// Its guest bytes.
    pub guest: ByteRange,
    /// The device address of its first byte.
    pub device_base: u64,
    /// Which import of this engine it is, counted from 1: a new import at a released one's
    /// device address (a driver reuses addresses) is still another import.
    pub serial: u64,
}

/// A change the chunk table must follow: guest bytes that became reachable, or stopped being
/// reachable, at the device addresses a piece gives them. Only what changed: a piece split around
/// a page that stopped qualifying is one `Removed` of that page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PieceChange {
    /// Bytes mapped (a piece, or the part of one that was not reachable before).
    Added(Piece),
    /// Bytes dropped.
    Removed(Piece),
}

/// Why a mapping was dropped (M4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DroppedRange {
    /// The guest bytes that lost their mapping.
    pub guest: ByteRange,
    /// When.
    pub when: When,
    /// Released (the reservation went) or decommitted.
    pub released: bool,
}

/// What a full mapping (M1–M3) did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MapStats {
    /// M2: pages committed.
    pub committed_pages: u64,
    /// M2: guards released.
    pub guards_released: u64,
    /// M2: pages noted written.
    pub pages_noted_written: u64,
}

/// The mappings of one device (M1–M5).
#[derive(Debug, Default)]
pub struct Mappings {
    pieces: BTreeMap<u64, Piece>,
    /// What the driver holds, by guest start; every piece lies in one import.
    imports: BTreeMap<u64, Import>,
    /// Imports made so far ([`Import::serial`]).
    import_serials: u64,
    /// The largest bytes an import may hold, a power of two ([`Backend::max_import_bytes`]).
    import_block: Option<u64>,
    left_out: BTreeMap<u64, LeftOutReport>,
    dropped: Vec<DroppedRange>,
    mapped_generation: Option<u64>,
    remaps: u64,
    imports_made: u64,
    imports_dropped: u64,
    changes: Vec<PieceChange>,
    /// Moves whenever the pieces or the left-out pieces may have changed ([`Mappings::version`]).
    version: u64,
    /// Host mode: real-mapping checks made.
    real_checks: u64,
    /// Host mode: runs left out because the emulator's commit or guard release failed, asked again
    /// at the next device-addressed dispatch ([`Mappings::retry_host_calls`]).
    retry_pending: bool,
    /// While a device-addressed dispatch is in flight, the newest one: an import let go now is
    /// held for it ([`Mappings::hold_releases`]).
    hold_for: Option<u64>,
    /// Imports let go while a device-addressed dispatch in flight could still reach them, each
    /// with the newest such dispatch then: released once it has completed.
    held: Vec<(u64, Import)>,
}

/// Host mode: the process's real mapping of `guest`'s host pages, split by M3's demand
/// (`crate::host::split_real`): the guest parts in order, each `None` where the kernel maps it as
/// the events said, or the words of its contradiction (made by `words` from the contradiction and
/// the host and guest bytes). A bad part is widened to whole engine pages. `None` when this is
/// simulated memory or the host cannot tell.
fn real_parts(
    memory: &GuestMemory,
    guest: ByteRange,
    words: impl Fn(&RealRefusal, ByteRange, ByteRange) -> String,
) -> Option<Vec<(ByteRange, Option<String>)>> {
    let host = memory.host()?;
    let (h, left) = memory.host_address(guest.start)?;
    let bytes = guest.size_bytes().min(left);
    let maps = host.real_mappings(h, bytes)?;
    Some(parts_by_maps(memory, guest, h, bytes, &maps, words))
}

/// [`real_parts`] with the real mappings already read (`maps`, in address order, covering at
/// least host `h..h + bytes`, which holds `guest`).
fn parts_by_maps(
    memory: &GuestMemory,
    guest: ByteRange,
    h: u64,
    bytes: u64,
    maps: &[crate::host::RealMapping],
    words: impl Fn(&RealRefusal, ByteRange, ByteRange) -> String,
) -> Vec<(ByteRange, Option<String>)> {
    let page = memory.page_bytes();
    let to_guest = |x: u64| x - h + guest.start;
    let mut bad: Vec<(ByteRange, String)> = Vec::new();
    for (r, why) in split_real(ByteRange::new(h, h + bytes), maps) {
        let Some(why) = why else { continue };
        let g = ByteRange::new(
            to_guest(r.start) & !(page - 1),
            to_guest(r.end).saturating_add(page - 1) & !(page - 1),
        );
        let g = g.intersection(&guest).unwrap_or(g);
        let text = words(&why, r, g);
        match bad.last_mut() {
            Some((last, t)) if last.end >= g.start => {
                last.end = last.end.max(g.end);
                t.push_str("; ");
                t.push_str(&text);
            }
            _ => bad.push((g, text)),
        }
    }
    let mut parts = Vec::new();
    let mut at = guest.start;
    for (g, text) in bad {
        if g.start > at {
            parts.push((ByteRange::new(at, g.start), None));
        }
        at = g.end;
        parts.push((g, Some(text)));
    }
    if at < guest.end {
        parts.push((ByteRange::new(at, guest.end), None));
    }
    parts
}

/// A run M2 could not prepare (the emulator refused its commit or guard release), left out by name.
fn m2_refused(run: ByteRange, h: &crate::host::HostError) -> LeftOutReport {
    LeftOutReport::with_detail(
        run,
        LeftOutReason::HostCallback,
        format!(
            "M2 could not commit or unguard {run} before mapping it: {h}; only dispatches that reach it are affected (their accesses there escape)"
        ),
    )
}

/// What a page's real mapping says, in the words of a piece checked again after it was mapped:
/// the emulator changed it without an event.
fn changed_without_event(
    why: &RealRefusal,
    host: ByteRange,
    guest: ByteRange,
    when: u64,
) -> String {
    let what = match why {
        RealRefusal::Unmapped { .. } => "is no longer mapped by the process".to_owned(),
        RealRefusal::NotReadWrite { mapping } => format!(
            "became {} (the process maps them {}{}{})",
            match (mapping.readable, mapping.writable) {
                (true, false) => "read-only",
                (false, _) => "inaccessible (PROT_NONE)",
                (true, true) => "not read-write",
            },
            if mapping.readable { 'r' } else { '-' },
            if mapping.writable { 'w' } else { '-' },
            if mapping.shared { 's' } else { 'p' },
        ),
        RealRefusal::Shared { mapping } => format!(
            "is now mapped shared ({})",
            if mapping.name.is_empty() {
                "anonymous"
            } else {
                &mapping.name
            }
        ),
        RealRefusal::FileBacked { mapping } => {
            format!("is now mapped from a file ({})", mapping.name)
        }
    };
    format!(
        "host pages {host} (guest {guest}) {what} since they were mapped before dispatch {when}; no event said so: the piece was dropped before the device could touch it ({})",
        crate::host::DRIVER_FACTS
    )
}

fn category(p: &PageState) -> Option<LeftOutReason> {
    if !p.committed {
        Some(LeftOutReason::NotCommitted)
    } else if p.backing != crate::input::Backing::Private {
        Some(LeftOutReason::NotPrivate)
    } else if !p.mappable() {
        Some(LeftOutReason::NotReadWrite)
    } else {
        None
    }
}

/// [`category`] for a page already mapped: a guard does not drop it ([`PageState::keeps_mapping`]).
fn mapped_category(p: &PageState) -> Option<LeftOutReason> {
    match category(p) {
        Some(LeftOutReason::NotReadWrite) if p.keeps_mapping() => None,
        c => c,
    }
}

/// Splits `range` into maximal stretches of pages with the same M3 category. Pages the guest left
/// unreadable lie in no readable run (M1): they are skipped and end a stretch, so that a revisit
/// (M5) or a re-import after a decommit (M4) never maps them between a protect and the remap that
/// follows it.
fn stretches(memory: &GuestMemory, range: ByteRange) -> Vec<(ByteRange, Option<LeftOutReason>)> {
    stretches_by(memory, range, category)
}

/// [`stretches`] by `category`.
fn stretches_by(
    memory: &GuestMemory,
    range: ByteRange,
    category: fn(&PageState) -> Option<LeftOutReason>,
) -> Vec<(ByteRange, Option<LeftOutReason>)> {
    let mut out: Vec<(ByteRange, Option<LeftOutReason>)> = Vec::new();
    memory.for_page_runs(range, |run, p| {
        if !p.guest.readable {
            return;
        }
        let c = category(p);
        match out.last_mut() {
            Some((r, last)) if *last == c && r.end == run.start => r.end = run.end,
            _ => out.push((run, c)),
        }
    });
    out
}

/// The parts of `range` outside every range of `gone`, in order.
fn minus(range: ByteRange, gone: &[ByteRange]) -> Vec<ByteRange> {
    let mut cuts: Vec<ByteRange> = gone.iter().filter_map(|g| g.intersection(&range)).collect();
    cuts.sort_by_key(|c| c.start);
    let mut out = Vec::new();
    let mut at = range.start;
    for c in cuts {
        if c.start > at {
            out.push(ByteRange::new(at, c.start));
        }
        at = at.max(c.end);
    }
    if at < range.end {
        out.push(ByteRange::new(at, range.end));
    }
    out
}

impl Mappings {
    /// No mappings yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The generation the mappings were made for, if any were made.
    pub fn mapped_generation(&self) -> Option<u64> {
        self.mapped_generation
    }

    /// Full mappings made so far.
    pub fn remaps(&self) -> u64 {
        self.remaps
    }

    /// A number that moves whenever the pieces or the left-out pieces may have changed (every
    /// mapping, revisit, drop and import), so that what is derived from them can be kept until it
    /// moves.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Holds every import let go from now on for device-addressed dispatch `newest` and the ones
    /// before it, which are in flight and may reach it through the table copy they read; `None`
    /// releases at once again.
    pub fn hold_releases(&mut self, newest: Option<u64>) {
        self.hold_for = newest;
    }

    /// Releases the held imports no dispatch in flight can reach: every one held for a dispatch
    /// older than `oldest` (the oldest device-addressed dispatch still in flight; `None`: all).
    pub fn release_held(
        &mut self,
        backend: &mut dyn Backend,
        oldest: Option<u64>,
    ) -> Result<(), BackendError> {
        if oldest.is_none() {
            self.hold_for = None;
        }
        while let Some(at) = self
            .held
            .iter()
            .position(|(d, _)| oldest.is_none_or(|o| *d < o))
        {
            let (_, i) = self.held.swap_remove(at);
            backend.release(i.device_base)?;
        }
        Ok(())
    }

    /// The imports held for dispatches in flight.
    pub fn held(&self) -> impl Iterator<Item = &Import> {
        self.held.iter().map(|(_, i)| i)
    }

    /// M5: the first bytes of `range` a device-addressed dispatch in flight can reach: a mapped
    /// piece, or an import held for it.
    pub fn first_reachable(&self, range: ByteRange) -> Option<ByteRange> {
        self.first_overlap(range).or_else(|| {
            self.held
                .iter()
                .find_map(|(_, i)| i.guest.intersection(&range))
        })
    }

    /// Mapped pieces, by guest address.
    pub fn pieces(&self) -> impl Iterator<Item = &Piece> {
        self.pieces.values()
    }

    /// Left-out pieces, by guest address.
    pub fn left_out(&self) -> impl Iterator<Item = &LeftOutReport> {
        self.left_out.values()
    }

    /// Takes the piece changes queued for the chunk table.
    pub fn take_changes(&mut self) -> Vec<PieceChange> {
        std::mem::take(&mut self.changes)
    }

    /// Takes the import counters (made, dropped) since they were last taken.
    pub fn take_import_counts(&mut self) -> (u64, u64) {
        let c = (self.imports_made, self.imports_dropped);
        self.imports_made = 0;
        self.imports_dropped = 0;
        c
    }

    /// The piece holding guest `addr`, if one does.
    pub fn piece_at(&self, addr: u64) -> Option<&Piece> {
        self.pieces
            .range(..=addr)
            .next_back()
            .map(|(_, p)| p)
            .filter(|p| p.guest.contains(addr))
    }

    /// Whether any mapped piece overlaps `range`.
    pub fn overlaps(&self, range: ByteRange) -> bool {
        self.pieces
            .range(..range.end)
            .next_back()
            .is_some_and(|(_, p)| p.guest.end > range.start)
            || self.pieces.range(range.start..range.end).next().is_some()
    }

    /// The first part of `range` a mapped piece holds, if any.
    pub fn first_overlap(&self, range: ByteRange) -> Option<ByteRange> {
        let before = self
            .pieces
            .range(..range.start)
            .next_back()
            .and_then(|(_, p)| p.guest.intersection(&range));
        before.or_else(|| {
            self.pieces
                .range(range.start..range.end)
                .next()
                .and_then(|(_, p)| p.guest.intersection(&range))
        })
    }

    /// M4: whether the generation moved since the mappings were made.
    pub fn stale(&self, memory: &GuestMemory) -> bool {
        self.mapped_generation != Some(memory.generation())
    }

    /// M1 for one piece that M3 let through; in host mode the process's real mapping of it is
    /// read first and its parts that contradict the events are left out by name
    /// (`crate::host::split_real`), the rest imported: a run with one bad page keeps its good
    /// pages (M3 by pieces). Returns whether any of it was imported.
    fn import(
        &mut self,
        backend: &mut dyn Backend,
        memory: &GuestMemory,
        guest: ByteRange,
        reservation: u64,
        before: u64,
        by_revisit: bool,
    ) -> Result<bool, BackendError> {
        // Pages an import already holds were checked when the driver was handed them, and the
        // driver is not handed them again: M3's check against the kernel is for what it is handed.
        if self
            .import_at(guest.start)
            .is_some_and(|i| i.guest.end >= guest.end)
        {
            self.import_piece(backend, memory, guest, reservation, before, by_revisit)?;
            return Ok(true);
        }
        let parts = real_parts(memory, guest, |why, host, g| {
            format!(
                "{why}; host {host} (guest {g}) was not handed to the driver, the rest of {guest} was ({})",
                crate::host::DRIVER_FACTS
            )
        });
        // Counted only where the kernel answered: a piece the host could not tell about was kept
        // unchecked, never checked.
        if parts.is_some() {
            self.real_checks += 1;
        }
        let parts = parts.unwrap_or_else(|| vec![(guest, None)]);
        let mut any = false;
        for (r, bad) in parts {
            match bad {
                Some(detail) => {
                    self.version += 1;
                    self.left_out.insert(
                        r.start,
                        LeftOutReport::with_detail(r, LeftOutReason::RealMapping, detail),
                    );
                }
                None => {
                    self.import_piece(backend, memory, r, reservation, before, by_revisit)?;
                    any = true;
                }
            }
        }
        Ok(any)
    }

    /// Maps one piece that M3 let through: the parts of it an import already holds reach into
    /// that import (no driver call); the rest is handed to the driver in imports of at most the
    /// backend's limit, each within one aligned block of that size ([`Backend::max_import_bytes`]),
    /// so that no chunk (T1) lies across two of them and a decommit re-imports at most a block.
    fn import_piece(
        &mut self,
        backend: &mut dyn Backend,
        memory: &GuestMemory,
        guest: ByteRange,
        reservation: u64,
        before: u64,
        by_revisit: bool,
    ) -> Result<(), BackendError> {
        let block = self.block(backend, memory);
        let mut at = guest.start;
        while at < guest.end {
            let (end, device_base, serial) = match self.import_at(at) {
                Some(i) => (
                    i.guest.end.min(guest.end),
                    i.device_base + (at - i.guest.start),
                    i.serial,
                ),
                None => {
                    let next = self
                        .imports
                        .range(at..)
                        .next()
                        .map_or(u64::MAX, |(s, _)| *s);
                    let block_end = (at | (block - 1)).saturating_add(1);
                    let r = ByteRange::new(at, guest.end.min(next).min(block_end));
                    let device_base = backend.import(r, memory)?;
                    self.import_serials += 1;
                    let serial = self.import_serials;
                    self.imports.insert(
                        at,
                        Import {
                            guest: r,
                            device_base,
                            serial,
                        },
                    );
                    self.imports_made += 1;
                    (r.end, device_base, serial)
                }
            };
            self.add_piece(Piece {
                guest: ByteRange::new(at, end),
                device_base,
                reservation,
                mapped_before_dispatch: before,
                by_revisit,
                import: serial,
            });
            at = end;
        }
        self.version += 1;
        if !self.dropped.is_empty() {
            self.dropped.retain(|d| !d.guest.overlaps(&guest));
        }
        Ok(())
    }

    /// The most bytes an import holds, a power of two: the backend's limit rounded down.
    fn block(&mut self, backend: &dyn Backend, memory: &GuestMemory) -> u64 {
        *self.import_block.get_or_insert_with(|| {
            let most = backend.max_import_bytes().max(memory.page_bytes());
            1u64 << (63 - most.leading_zeros())
        })
    }

    /// The import holding guest `addr`, if one does.
    fn import_at(&self, addr: u64) -> Option<Import> {
        self.imports
            .range(..=addr)
            .next_back()
            .map(|(_, i)| *i)
            .filter(|i| i.guest.contains(addr))
    }

    /// What the driver holds, by guest address.
    pub fn imports(&self) -> impl Iterator<Item = &Import> {
        self.imports.values()
    }

    /// Records a piece whose device addresses its import gives: joined to a neighbour of the same
    /// import and reservation (the pieces stay what a fresh mapping would make, however many
    /// pages came and went), and queued for the table.
    fn add_piece(&mut self, mut p: Piece) {
        self.note_change(PieceChange::Added(p));
        let import = self.import_at(p.guest.start).map(|i| i.guest.start);
        let joins = |q: &Piece, p: &Piece, at: u64, this: &Self| {
            q.reservation == p.reservation
                && q.device_at(at) == p.device_at(at)
                && q.import == p.import
                && this.import_at(q.guest.start).map(|i| i.guest.start) == import
        };
        if let Some((&start, &left)) = self.pieces.range(..p.guest.start).next_back()
            && left.guest.end == p.guest.start
            && joins(&left, &p, p.guest.start, self)
        {
            self.pieces.remove(&start);
            p = Piece {
                guest: ByteRange::new(left.guest.start, p.guest.end),
                ..left
            };
        }
        if let Some(&right) = self.pieces.get(&p.guest.end)
            && joins(&right, &p, p.guest.end, self)
        {
            self.pieces.remove(&right.guest.start);
            p.guest = ByteRange::new(p.guest.start, right.guest.end);
        }
        self.pieces.insert(p.guest.start, p);
    }

    /// Queues a change for the table. Bytes added back at the device addresses a queued removal
    /// took from them never left the table: the two cancel, so a piece cut around one page costs
    /// the table that page, not the piece.
    fn note_change(&mut self, change: PieceChange) {
        let PieceChange::Added(q) = change else {
            self.changes.push(change);
            return;
        };
        // Only the latest change over these bytes may be undone: one between them (the bytes mapped
        // elsewhere and dropped again) must stay in its place.
        let latest = self.changes.iter().rposition(|c| {
            let (PieceChange::Added(r) | PieceChange::Removed(r)) = c;
            r.guest.overlaps(&q.guest)
        });
        let undone = latest.filter(|&i| {
            matches!(self.changes[i], PieceChange::Removed(r)
                if r.guest.start <= q.guest.start && q.guest.end <= r.guest.end
                    && r.import == q.import
                    && r.device_at(q.guest.start) == q.device_base)
        });
        let Some(i) = undone else {
            self.changes.push(change);
            return;
        };
        let PieceChange::Removed(r) = self.changes.remove(i) else {
            return;
        };
        let rest = [
            ByteRange::new(r.guest.start, q.guest.start),
            ByteRange::new(q.guest.end, r.guest.end),
        ];
        for part in rest.into_iter().rev().filter(|x| !x.is_empty()) {
            let piece = Piece {
                guest: part,
                device_base: r.device_at(part.start),
                ..r
            };
            self.changes.insert(i, PieceChange::Removed(piece));
        }
    }

    /// Takes the piece at `start` out of the mappings (its import stays) and queues its removal.
    fn drop_piece(&mut self, start: u64) -> Option<Piece> {
        let piece = self.pieces.remove(&start)?;
        self.version += 1;
        self.changes.push(PieceChange::Removed(piece));
        Some(piece)
    }

    /// Cuts `gone` out of piece `p`: the rest stays mapped at the same device addresses (its
    /// import holds it), and the table loses only what was cut.
    fn cut(&mut self, p: Piece, gone: &[ByteRange]) {
        if self.drop_piece(p.guest.start).is_none() {
            return;
        }
        for part in minus(p.guest, gone) {
            self.add_piece(Piece {
                guest: part,
                device_base: p.device_at(part.start),
                ..p
            });
        }
    }

    /// The parts of mapped pieces that lie in `range`, by address.
    pub fn overlapping(&self, range: ByteRange) -> Vec<ByteRange> {
        self.pieces_over(range)
            .iter()
            .filter_map(|p| p.guest.intersection(&range))
            .collect()
    }

    /// The mapped pieces overlapping `range`, by address.
    fn pieces_over(&self, range: ByteRange) -> Vec<Piece> {
        let mut over: Vec<Piece> = self
            .pieces
            .range(..range.end)
            .rev()
            .map(|(_, p)| *p)
            .take_while(|p| p.guest.end > range.start)
            .collect();
        over.reverse();
        over
    }

    /// M4: releases every import overlapping `ranges` (the driver lets the pages go) and drops the
    /// pieces that reached into them; returns those pieces.
    fn release_imports_over(
        &mut self,
        backend: &mut dyn Backend,
        ranges: &[ByteRange],
    ) -> Result<Vec<Piece>, BackendError> {
        let mut gone = Vec::new();
        for range in ranges {
            let over: Vec<Import> = self
                .imports
                .range(..range.end)
                .rev()
                .map(|(_, i)| *i)
                .take_while(|i| i.guest.end > range.start)
                .collect();
            for i in over {
                self.imports.remove(&i.guest.start);
                for p in self.pieces_over(i.guest) {
                    self.drop_piece(p.guest.start);
                    gone.push(p);
                }
                match self.hold_for {
                    Some(d) => self.held.push((d, i)),
                    None => backend.release(i.device_base)?,
                }
                self.imports_dropped += 1;
                self.version += 1;
            }
        }
        gone.sort_by_key(|p| p.guest.start);
        Ok(gone)
    }

    /// The checked mode (host mode): the real mapping of every mapped piece read again before a
    /// device-addressed dispatch. A piece the process no longer maps as the events said (the
    /// emulator made pages read-only or `PROT_NONE`, unmapped them or remapped them shared, and
    /// sent no event) is dropped before the device can touch it: its good parts are imported
    /// again, its bad parts left out with what changed ("host pages … became read-only …; no event
    /// said so"). On lavapipe a device access to such a page kills the process; on NVIDIA a store
    /// lands past the write-watch or in pages the process no longer has.
    pub fn recheck_real(
        &mut self,
        memory: &GuestMemory,
        backend: &mut dyn Backend,
        dispatch: u64,
    ) -> Result<RealCheck, BackendError> {
        let mut check = RealCheck::default();
        if memory.host().is_none() {
            return Ok(check);
        }
        let Some(host) = memory.host().cloned() else {
            return Ok(check);
        };
        let pieces: Vec<Piece> = self.pieces.values().copied().collect();
        // The kernel is asked once for each reservation's span of mapped pieces (one query a
        // mapping it holds), not once a piece: 1,024 pieces of one 1 GiB mapping cost one query.
        let mut maps: Vec<crate::host::RealMapping> = Vec::new();
        // The reservation whose span `maps` holds, and whether the host could tell.
        let mut known: Option<(u64, bool)> = None;
        for (i, p) in pieces.iter().enumerate() {
            check.pieces += 1;
            check.bytes += p.guest.size_bytes();
            let Some((h, left)) = memory.host_address(p.guest.start) else {
                check.unknown += 1;
                continue;
            };
            let bytes = p.guest.size_bytes().min(left);
            if known.map(|(r, _)| r) != Some(p.reservation) {
                let last = pieces[i..]
                    .iter()
                    .take_while(|q| q.reservation == p.reservation)
                    .last()
                    .map_or(p.guest.end, |q| q.guest.end);
                let span = memory
                    .host_address(last - 1)
                    .map(|(hl, _)| ByteRange::new(h, hl + 1));
                let got = span.and_then(|s| host.real_mappings(s.start, s.size_bytes()));
                known = Some((p.reservation, got.is_some()));
                maps = got.unwrap_or_default();
            }
            let Some((_, true)) = known else {
                check.unknown += 1;
                continue;
            };
            let first = maps.partition_point(|m| m.range.end <= h);
            // The common case, nothing changed, is a walk over the piece's mappings.
            if crate::host::check_real(ByteRange::new(h, h + bytes), &maps[first..]).is_none() {
                continue;
            }
            let parts = parts_by_maps(memory, p.guest, h, bytes, &maps[first..], |why, host, g| {
                changed_without_event(why, host, g, p.mapped_before_dispatch)
            });
            // The driver lets go of every import over the bad pages (a page remapped behind its
            // back must not be reached through the old pages it holds); what else those imports
            // held is imported again, checked a moment ago.
            let mut bad = Vec::new();
            for (r, why) in parts {
                if let Some(detail) = why {
                    check.contradictions.push(detail.clone());
                    self.left_out.insert(
                        r.start,
                        LeftOutReport::with_detail(r, LeftOutReason::RealMapping, detail),
                    );
                    bad.push(r);
                }
            }
            for q in self.release_imports_over(backend, &bad)? {
                for part in minus(q.guest, &bad) {
                    self.import_piece(
                        backend,
                        memory,
                        part,
                        q.reservation,
                        dispatch.min(q.mapped_before_dispatch),
                        q.by_revisit,
                    )?;
                }
            }
        }
        Ok(check)
    }

    /// M2 asked again for the runs left out because the emulator's commit or guard release failed
    /// ([`LeftOutReason::HostCallback`]): what it now commits and unguards is mapped (as a revisit
    /// maps, M5); what it still refuses stays out with the new answer. Costs nothing unless such a
    /// run exists. (A run a decommit left uncommitted waits for a commit event, as M4 and M5 say.)
    /// Returns the ranges mapped.
    pub fn retry_host_calls(
        &mut self,
        memory: &mut GuestMemory,
        backend: &mut dyn Backend,
        before: u64,
    ) -> Result<Vec<ByteRange>, BackendError> {
        if !self.retry_pending {
            return Ok(Vec::new());
        }
        self.retry_pending = false;
        let hits: Vec<LeftOutReport> = self
            .left_out
            .values()
            .filter(|l| l.reason == LeftOutReason::HostCallback)
            .cloned()
            .collect();
        let mut mapped = Vec::new();
        for l in hits {
            match memory.commit_for_mapping(l.guest) {
                Ok(_) => {
                    self.version += 1;
                    self.map_left_out(memory, backend, &l, before, &mut mapped)?;
                }
                Err(crate::memory::MemoryError::Host(h)) => {
                    self.retry_pending = true;
                    self.left_out.insert(l.guest.start, m2_refused(l.guest, &h));
                }
                Err(e) => {
                    return Err(BackendError::Import {
                        piece: l.guest,
                        why: e.to_string(),
                    });
                }
            }
        }
        Ok(mapped)
    }

    /// Drops the mapped piece over `range` and leaves `range` out for `reason` with `detail`,
    /// re-importing the rest of the piece: what M2 could not prepare is never handed to the device.
    pub fn leave_out(
        &mut self,
        memory: &GuestMemory,
        backend: &mut dyn Backend,
        range: ByteRange,
        reason: LeftOutReason,
        detail: String,
    ) -> Result<(), BackendError> {
        let _ = (memory, &backend);
        for p in self.pieces_over(range) {
            self.cut(p, &[range]);
        }
        self.version += 1;
        self.retry_pending |= reason == LeftOutReason::HostCallback;
        self.left_out.insert(
            range.start,
            LeftOutReport::with_detail(range, reason, detail),
        );
        Ok(())
    }

    /// Real-mapping checks made in host mode where the kernel answered, one a piece handed to the
    /// driver (a piece the host could not tell about is imported unchecked and not counted).
    pub fn real_checks(&self) -> u64 {
        self.real_checks
    }

    /// M1–M4: maps every readable run again for the current generation. M2 commits each run,
    /// releases its guards and notes its pages written; M3 maps only committed, private,
    /// read-write pieces. Pieces that are already mapped with the same bytes are kept (no backend
    /// call), so an unchanged run costs nothing.
    pub fn map_all(
        &mut self,
        memory: &mut GuestMemory,
        backend: &mut dyn Backend,
        before: u64,
    ) -> Result<MapStats, BackendError> {
        puffin::profile_function!();
        self.version += 1;
        let mut stats = MapStats::default();
        let runs = memory.readable_runs();
        let page = memory.page_bytes();
        let mut wanted: BTreeMap<u64, (ByteRange, u64)> = BTreeMap::new();
        let mut left_out = BTreeMap::new();
        for run in &runs {
            let (committed, released) = match memory.commit_for_mapping(run.range) {
                Ok(done) => done,
                // M2 failed for this run alone: it is left out by name (what reaches it escapes)
                // and every other run is mapped; the next remap or revisit asks again.
                Err(crate::memory::MemoryError::Host(h)) => {
                    self.retry_pending = true;
                    left_out.insert(run.range.start, m2_refused(run.range, &h));
                    continue;
                }
                Err(e) => {
                    return Err(BackendError::Import {
                        piece: run.range,
                        why: e.to_string(),
                    });
                }
            };
            stats.committed_pages += committed;
            stats.guards_released += released;
            stats.pages_noted_written += run.range.size_bytes() / page;
            for (r, cat) in stretches(memory, run.range) {
                match cat {
                    None => {
                        wanted.insert(r.start, (r, run.reservation));
                    }
                    Some(reason) => {
                        left_out.insert(r.start, LeftOutReport::new(r, reason));
                    }
                }
            }
        }
        // A full mapping makes what a first mapping would: the imports are the wanted stretches cut
        // at the blocks (an import cut since by pages that stopped qualifying, or no longer
        // wanted, is let go and its stretches imported again).
        let block = self.block(&*backend, memory);
        let mut desired = std::collections::BTreeSet::new();
        for (r, _) in wanted.values() {
            let mut at = r.start;
            while at < r.end {
                let end = r.end.min((at | (block - 1)).saturating_add(1));
                desired.insert((at, end));
                at = end;
            }
        }
        let stale: Vec<ByteRange> = self
            .imports
            .values()
            .filter(|i| !desired.contains(&(i.guest.start, i.guest.end)))
            .map(|i| i.guest)
            .collect();
        for g in stale {
            self.release_imports_over(backend, &[g])?;
        }
        let existing: Vec<Piece> = self.pieces.values().copied().collect();
        for p in existing {
            if wanted.get(&p.guest.start).map(|w| w.0) != Some(p.guest) {
                self.drop_piece(p.guest.start);
            } else {
                wanted.remove(&p.guest.start);
            }
        }
        self.left_out = left_out;
        for (_, (r, reservation)) in wanted {
            self.import(backend, memory, r, reservation, before, false)?;
        }
        self.mapped_generation = Some(memory.generation());
        self.remaps += 1;
        Ok(stats)
    }

    /// M5 (D968): looks again at the left-out pieces over `range` and maps what has become
    /// committed, private and read-write. Returns the pieces mapped.
    pub fn revisit(
        &mut self,
        memory: &GuestMemory,
        backend: &mut dyn Backend,
        range: ByteRange,
        before: u64,
    ) -> Result<Vec<ByteRange>, BackendError> {
        self.version += 1;
        // Left-out pieces do not overlap: those over `range` are the ones starting before its end,
        // walked back until one ends before its start.
        let mut hits: Vec<LeftOutReport> = self
            .left_out
            .range(..range.end)
            .rev()
            .map(|(_, l)| l)
            .take_while(|l| l.guest.end > range.start)
            .cloned()
            .collect();
        hits.reverse();
        let mut mapped = Vec::new();
        for l in hits {
            self.map_left_out(memory, backend, &l, before, &mut mapped)?;
        }
        Ok(mapped)
    }

    /// M5 for one left-out piece: what of it now qualifies is mapped (into `mapped`), the rest left
    /// out again with its reason.
    fn map_left_out(
        &mut self,
        memory: &GuestMemory,
        backend: &mut dyn Backend,
        l: &LeftOutReport,
        before: u64,
        mapped: &mut Vec<ByteRange>,
    ) -> Result<(), BackendError> {
        self.left_out.remove(&l.guest.start);
        let reservation = memory
            .reservation_at(l.guest.start)
            .map_or(l.guest.start, |r| r.range.start);
        let parts = stretches(memory, l.guest);
        self.map_parts(
            backend,
            memory,
            parts,
            (reservation, before, true),
            |r, cat| {
                if cat.is_none() {
                    mapped.push(r);
                }
            },
        )
    }

    /// M3 after the mapping: a page's state may change after its piece was mapped (the guest
    /// protects it read-only, the host lowers its protection, it becomes shared). The mapping follows
    /// the page's state: every mapped piece over `range` is looked at again, the parts of it that no
    /// longer qualify are dropped and left out with their reason, and what still qualifies is mapped
    /// again. Returns the dropped ranges and why.
    pub fn requalify(
        &mut self,
        memory: &GuestMemory,
        backend: &mut dyn Backend,
        range: ByteRange,
    ) -> Result<Vec<(ByteRange, LeftOutReason)>, BackendError> {
        let _ = &backend;
        let mut dropped = Vec::new();
        // Only the pages of the event are looked at: the rest of a piece did not change.
        for p in self.pieces_over(range) {
            let Some(window) = p.guest.intersection(&range) else {
                continue;
            };
            // Pages the guest made unreadable move the generation (M1, M4): the next dispatch maps
            // again; they leave the piece now with the pages that no longer qualify.
            let parts = stretches_by(memory, window, mapped_category);
            let good: Vec<ByteRange> = parts
                .iter()
                .filter(|(_, cat)| cat.is_none())
                .map(|(r, _)| *r)
                .collect();
            let gone = minus(window, &good);
            if gone.is_empty() {
                continue;
            }
            self.version += 1;
            for (r, cat) in parts {
                if let Some(reason) = cat {
                    self.left_out.insert(r.start, LeftOutReport::new(r, reason));
                    dropped.push((r, reason));
                }
            }
            self.cut(p, &gone);
        }
        Ok(dropped)
    }

    /// Maps each part of a stretch that qualifies (`None`) and leaves out the rest with its
    /// reason; `seen` is told of every part. `how` is the new pieces' reservation, whether they
    /// were mapped before the dispatch, and whether a revisit (M5) mapped them.
    fn map_parts(
        &mut self,
        backend: &mut dyn Backend,
        memory: &GuestMemory,
        parts: Vec<(ByteRange, Option<LeftOutReason>)>,
        (reservation, before, by_revisit): (u64, u64, bool),
        mut seen: impl FnMut(ByteRange, Option<LeftOutReason>),
    ) -> Result<(), BackendError> {
        for (r, cat) in parts {
            match cat {
                None => {
                    if !self.import(backend, memory, r, reservation, before, by_revisit)? {
                        seen(r, Some(LeftOutReason::RealMapping));
                        continue;
                    }
                }
                Some(reason) => {
                    self.left_out.insert(r.start, LeftOutReport::new(r, reason));
                }
            }
            seen(r, cat);
        }
        Ok(())
    }

    /// M4: drops every mapping over `range` before its host memory goes (decommit or release).
    /// The parts of a dropped piece outside `range` that are still mappable are imported again.
    /// Call it before the memory change is applied; then call [`Mappings::after_host_memory_gone`].
    pub fn drop_over(
        &mut self,
        backend: &mut dyn Backend,
        range: ByteRange,
        when: When,
        released: bool,
    ) -> Result<Vec<Piece>, BackendError> {
        self.version += 1;
        let dropped = self.release_imports_over(backend, &[range])?;
        for p in &dropped {
            if let Some(gone) = p.guest.intersection(&range) {
                self.dropped.push(DroppedRange {
                    guest: gone,
                    when,
                    released,
                });
            }
        }
        Ok(dropped)
    }

    /// After host memory over `range` went: re-imports what is left of the pieces dropped over it,
    /// and records the pages now uncommitted as left out (or forgets them if released).
    pub fn after_host_memory_gone(
        &mut self,
        memory: &GuestMemory,
        backend: &mut dyn Backend,
        dropped: &[Piece],
        range: ByteRange,
        released: bool,
    ) -> Result<(), BackendError> {
        self.version += 1;
        for p in dropped {
            for part in [
                ByteRange::new(
                    p.guest.start,
                    range.start.max(p.guest.start).min(p.guest.end),
                ),
                ByteRange::new(range.end.max(p.guest.start).min(p.guest.end), p.guest.end),
            ] {
                if part.is_empty() {
                    continue;
                }
                for (r, cat) in stretches(memory, part) {
                    match cat {
                        None => {
                            self.import(
                                backend,
                                memory,
                                r,
                                p.reservation,
                                p.mapped_before_dispatch,
                                p.by_revisit,
                            )?;
                        }
                        Some(reason) => {
                            self.left_out.insert(r.start, LeftOutReport::new(r, reason));
                        }
                    }
                }
            }
            if !released && let Some(gone) = p.guest.intersection(&range) {
                for (r, cat) in stretches(memory, gone) {
                    if let Some(reason) = cat {
                        self.left_out.insert(r.start, LeftOutReport::new(r, reason));
                    }
                }
            }
        }
        if released {
            self.left_out.retain(|_, l| !l.guest.overlaps(&range));
        } else {
            // Left-out pieces over the range change reason (now not committed).
            let over: Vec<LeftOutReport> = self
                .left_out
                .values()
                .filter(|l| l.guest.overlaps(&range))
                .cloned()
                .collect();
            for l in over {
                self.left_out.remove(&l.guest.start);
                for (r, cat) in stretches(memory, l.guest) {
                    if let Some(reason) = cat {
                        self.left_out.insert(r.start, LeftOutReport::new(r, reason));
                    }
                }
            }
        }
        Ok(())
    }

    /// Why no mapping holds `addr` (T4), with the left-out reason and when it was dropped.
    pub fn classify_miss(
        &self,
        memory: &GuestMemory,
        addr: u64,
    ) -> (EscapeClass, Option<LeftOutReason>, Option<When>) {
        if self.piece_at(addr).is_some() {
            return (EscapeClass::ProbeBound, None, None);
        }
        let Some(page) = memory.page_at(addr) else {
            let dropped = self.dropped.iter().rev().find(|d| d.guest.contains(addr));
            return match dropped {
                Some(d) => (EscapeClass::Dropped, None, Some(d.when)),
                None => (EscapeClass::NoReservation, None, None),
            };
        };
        if !page.guest.readable {
            return (EscapeClass::NotReadable, None, None);
        }
        if let Some(d) = self.dropped.iter().rev().find(|d| d.guest.contains(addr)) {
            return (EscapeClass::Dropped, category(page), Some(d.when));
        }
        let reason = self
            .left_out
            .range(..=addr)
            .next_back()
            .map(|(_, l)| l)
            .filter(|l| l.guest.contains(addr))
            .map(|l| l.reason)
            .or_else(|| category(page));
        (EscapeClass::LeftOut, reason, None)
    }

    /// The pieces as a report lists them.
    pub fn piece_reports(&self) -> Vec<PieceReport> {
        self.pieces
            .values()
            .map(|p| PieceReport {
                guest: p.guest,
                device_base: p.device_base,
                reservation: p.reservation,
                mapped_before_dispatch: p.mapped_before_dispatch,
                by_revisit: p.by_revisit,
            })
            .collect()
    }

    /// The nearest mapped pieces below and above `addr`, for an escape card.
    pub fn neighbours(&self, addr: u64) -> (Option<&Piece>, Option<&Piece>) {
        let below = self.pieces.range(..=addr).next_back().map(|(_, p)| p);
        let above = self
            .pieces
            .range(addr.saturating_add(1)..)
            .next()
            .map(|(_, p)| p);
        (below, above)
    }
}
