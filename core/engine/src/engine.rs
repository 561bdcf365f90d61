//! [`Engine`]: the whole dispatch path, in the order an emulator runs it.
//!
//! Between dispatches the emulator applies [`Event`]s ([`Engine::apply`]); each dispatch goes
//! through [`Engine::dispatch`]: validate, plan the bound path (O1–O11), choose the mode (A1,
//! W1–W3), write deferred copies (C3), map (M1–M5), keep the table (T1–T6), run the access stream
//! on the [`Backend`], write back (O8), hand off the marks (C1, C2) and look for the L1 hazard.
//! The engine keeps its state across dispatches as the emulator does; it never draws anything.

use thiserror::Error;

use crate::addr::ByteRange;
use crate::aperture::route_flat;
use crate::backend::{Backend, BackendError, CpuBackend};
use crate::chunk_table::{ChunkTable, TableError, chunk_bytes_for};
use crate::exec::{Job, Planned, PlannedAccess};
use crate::import::{Mappings, PieceChange};
use crate::input::Event;
use crate::input::{
    Access, AccessKind, DeviceLimits, DispatchInput, DispatchKind, InputError, Op, Slot, SlotIndex,
    words_for,
};
use crate::memory::{GuestMemory, MemoryChange, MemoryError};
use crate::overlap::{BindPlan, Planner};
use crate::report::ReadableRun;
use crate::report::SlotBinding;
use crate::report::{
    AccessReport, BeforeDispatch, Counts, DispatchReport, Escape, EscapeClass, EventReport,
    HandOff, Hazard, LeftOutReport, MappingReport, Mark, Mode, PieceReport, Placement, Refusal,
    Route, SCHEMA, TableReport, TargetLost, Value, When, WordWritten, WriteBack,
};
use crate::rules::{DEVICE_TABLE_PUSH_WORD, Rule};

/// Why the engine could not take an event or a dispatch. Nothing changed when it returns one.
#[derive(Debug, Error)]
pub enum EngineError {
    /// The dispatch input is malformed.
    #[error("bad dispatch input: {0}")]
    Input(#[from] InputError),
    /// The event is malformed.
    #[error("bad memory event: {0}")]
    Memory(#[from] MemoryError),
    /// The device failed.
    #[error("device: {0}")]
    Backend(#[from] BackendError),
    /// The chunk table could not be built.
    #[error("chunk table: {0}")]
    Table(#[from] TableError),
}

#[derive(Debug, Default)]
struct TableSync {
    rebuilt: Option<String>,
    inserted: u64,
    removed: u64,
    builds: u64,
    address: u64,
    placement: Placement,
    /// The table's statistics as of its last change: each is a walk over every slot, too dear to
    /// repeat for every dispatch of a large table that did not change.
    stats: Option<TableStats>,
}

/// The mapping state as of `key` (the memory's generation, the mappings' version): what each
/// report copies, and the chunk size T1 gives.
#[derive(Debug, Default, PartialEq)]
struct MappingState {
    key: Option<(u64, u64)>,
    runs: Vec<ReadableRun>,
    pieces: Vec<PieceReport>,
    left_out: Vec<LeftOutReport>,
    /// T1: the chunk the pieces allow.
    chunk_bytes: u64,
}

impl MappingState {
    fn derive(key: (u64, u64), memory: &GuestMemory, mappings: &Mappings) -> Self {
        Self {
            key: Some(key),
            runs: memory.readable_runs(),
            pieces: mappings.piece_reports(),
            left_out: mappings.left_out().cloned().collect(),
            chunk_bytes: chunk_bytes_for(mappings.pieces().map(|p| (p.guest.start, p.guest.end))),
        }
    }
}

/// What the table report says about the table's shape, computed when the table changes.
#[derive(Debug)]
struct TableStats {
    mean_probes_hit: f64,
    mean_probes_miss: f64,
    probe_histogram: Vec<u64>,
}

/// The dispatch path of one emulated device.
pub struct Engine<B: Backend = CpuBackend> {
    limits: DeviceLimits,
    memory: GuestMemory,
    backend: B,
    mappings: Mappings,
    table: Option<ChunkTable>,
    sync: TableSync,
    next_dispatch: u64,
    next_event: u64,
    pending: Vec<EventReport>,
    in_flight: Option<u64>,
    /// Plans every dispatch's bound path, keeping its working arrays between dispatches.
    planner: Planner,
    /// The mapping state the reports copy, kept until the memory or the mappings move.
    mapping_state: MappingState,
}

impl Engine<CpuBackend> {
    /// An engine on the CPU reference with `limits`.
    pub fn cpu(limits: DeviceLimits) -> Result<Self, EngineError> {
        Self::new(limits, CpuBackend::new())
    }
}

impl<B: Backend> Engine<B> {
    /// An engine on `backend`. The backend's real limits, if it has any, take the place of the
    /// storage-buffer limits in `limits`.
    pub fn new(mut limits: DeviceLimits, backend: B) -> Result<Self, EngineError> {
        if let Some(real) = backend.limits() {
            limits.name = real.name;
            limits.min_storage_buffer_offset_alignment = real.min_storage_buffer_offset_alignment;
            limits.max_storage_buffer_range = real.max_storage_buffer_range;
        }
        Ok(Self {
            memory: GuestMemory::new(limits.host_page_bytes)?,
            limits,
            backend,
            mappings: Mappings::new(),
            table: None,
            sync: TableSync::default(),
            next_dispatch: 0,
            next_event: 0,
            pending: Vec::new(),
            in_flight: None,
            planner: Planner::new(),
            mapping_state: MappingState::default(),
        })
    }

    /// The limits dispatches are planned against.
    pub fn limits(&self) -> &DeviceLimits {
        &self.limits
    }

    /// Guest memory as it stands.
    pub fn memory(&self) -> &GuestMemory {
        &self.memory
    }

    /// The mappings as they stand.
    pub fn mappings(&self) -> &Mappings {
        &self.mappings
    }

    /// The chunk table, once a device-addressed dispatch has needed one.
    pub fn table(&self) -> Option<&ChunkTable> {
        self.table.as_ref()
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The index the next dispatch will get.
    pub fn next_dispatch(&self) -> u64 {
        self.next_dispatch
    }

    /// Loads guest bytes without any write-watch effect (a sample's or capture's contents).
    pub fn load_contents(&mut self, address: u64, bytes: &[u8]) {
        self.memory.write_bytes(address, bytes);
    }

    /// Applies one memory event between dispatches.
    pub fn apply(&mut self, event: &Event) -> Result<&EventReport, EngineError> {
        puffin::profile_function!();
        let when = When {
            event: self.next_event,
            before_dispatch: self.next_dispatch,
        };
        let generation = self.memory.generation();
        let mut effects = Vec::new();
        let mut waited_for = None;
        let going = match event {
            Event::Release { base } => Some((self.memory.reservation(*base)?.range, true)),
            Event::Decommit { range } => {
                self.memory.check_range(*range)?;
                Some((*range, false))
            }
            _ => None,
        };
        let mut dropped = Vec::new();
        if let Some((range, released)) = going
            && self.mappings.overlaps(range)
        {
            // M5: a release waits for any dispatch still reading the mapping.
            if let Some(d) = self.in_flight.take() {
                waited_for = Some(d);
                effects.push(format!(
                    "M5: waited for dispatch {d}'s fence before the host memory of {range} went"
                ));
            }
            // M4: drop the mapping before the host memory goes.
            dropped = self
                .mappings
                .drop_over(&mut self.backend, range, when, released)?;
            for p in &dropped {
                effects.push(format!(
                    "M4: dropped the mapping of {} before its host memory went",
                    p.guest
                ));
            }
        }
        let change = self.memory.apply(event)?;
        if let Some((range, released)) = going {
            self.mappings.after_host_memory_gone(
                &self.memory,
                &mut self.backend,
                &dropped,
                range,
                released,
            )?;
        }
        if self.mappings.mapped_generation().is_some() {
            for range in &change.revisit {
                for r in self.mappings.revisit(
                    &self.memory,
                    &mut self.backend,
                    *range,
                    self.next_dispatch,
                )? {
                    effects.push(format!(
                        "M5 (D968): mapped {r}, now committed, private and read-write"
                    ));
                }
            }
        }
        describe_change(&change, &self.memory, &mut effects);
        if matches!(event, Event::Retire)
            && let Some(d) = self.in_flight.take()
        {
            effects.push(format!("dispatch {d} retired: its fence has signalled"));
        }
        let generation_moved = self.memory.generation() != generation;
        if generation_moved {
            effects.push(format!(
                "M4: the readable runs changed; generation {} → {}: the next device-addressed dispatch maps again",
                generation,
                self.memory.generation()
            ));
        }
        self.next_event += 1;
        self.pending.push(EventReport {
            index: when.event,
            event: event.clone(),
            generation_moved,
            waited_for,
            effects,
        });
        let last = self.pending.len() - 1;
        Ok(&self.pending[last])
    }

    /// Plans, maps, runs and hands off one dispatch, and reports everything it did.
    pub fn dispatch(&mut self, input: &DispatchInput) -> Result<DispatchReport, EngineError> {
        puffin::profile_function!();
        let limits = self.limits.clone();
        let slot_index = validate_indexed(input, &limits)?;
        let index = self.next_dispatch;
        let plan = self.planner.plan(
            &input.slots,
            &input.push,
            &limits,
            input.page_buffer.as_ref(),
        );
        // The plan moves into the report; routing reads its bindings there.
        let BindPlan {
            sets,
            bindings,
            mut refusals,
        } = plan;
        let device_addressed = !input.reasons.is_empty();
        if device_addressed && input.kind == DispatchKind::Graphics {
            refusals.push(graphics_refusal(input));
        }
        if device_addressed {
            refusals.extend(format_store_refusals(input, &slot_index));
        }
        let mode = if !refusals.is_empty() {
            Mode::Refused
        } else if device_addressed {
            Mode::DeviceAddressed
        } else {
            Mode::Bound
        };
        let mode_reason = mode_reason(input, mode, &refusals);
        let mut report = DispatchReport {
            schema: SCHEMA.to_owned(),
            index,
            program: input.program,
            label: input.label.clone(),
            kind: input.kind,
            mode,
            backend: self.backend.name(),
            device: limits.clone(),
            reasons: input.reasons.clone(),
            mode_reason,
            slots: bindings,
            sets,
            refusals,
            events_before: std::mem::take(&mut self.pending),
            before: BeforeDispatch {
                copies: Vec::new(),
                still_deferred: self.memory.deferred_copies().len(),
                ..BeforeDispatch::default()
            },
            mappings: None,
            table: None,
            accesses: Vec::new(),
            escapes: Vec::new(),
            marks: Vec::new(),
            hand_off: HandOff::default(),
            write_back: Vec::new(),
            hazards: Vec::new(),
            counts: Counts::default(),
        };
        self.next_dispatch += 1;
        if mode == Mode::Refused {
            report.accesses = input
                .accesses
                .iter()
                .enumerate()
                .map(|(i, a)| access_report(i, a, Route::NotRun, Rule::A1, Vec::new()))
                .collect();
            report.counts = counts(&report);
            return Ok(report);
        }
        let mut hand_change = MemoryChange::default();
        if mode == Mode::DeviceAddressed {
            // C3: the dispatch may read anywhere, so deferred copies land first.
            let mut c3 = MemoryChange::default();
            let copies = self.memory.flush_deferred(&mut c3);
            report.before.pages_noted_written = merge_ranges(c3.noted_written);
            for id in c3.distrusted {
                report
                    .before
                    .targets_distrusted
                    .push(self.target_lost(id, "a deferred copy written first (C3)".into()));
            }
            report.before.copies = copies
                .iter()
                .map(|(a, b)| ByteRange::new(*a, a + b.len() as u64))
                .collect();
            report.before.still_deferred = 0;
            report.mappings = Some(self.map(index)?);
            report.table = Some(self.sync_table(&limits)?);
        }
        // Routes.
        let (job, holder_slots, routes) = build_job(input, &slot_index, &report.slots, &limits);
        let mut outcome = self
            .backend
            .execute(&job, self.table.as_ref(), &mut self.memory)?;
        // Access reports, escapes, marks.
        let table = self.table.as_ref();
        for (i, (a, (route, rule))) in input.accesses.iter().zip(routes).enumerate() {
            let o = &mut outcome.accesses[i];
            let mut lookups = Vec::new();
            if let (Route::Device { address }, Some(t)) = (&route, table) {
                let last = address.saturating_add(u64::from(a.size_bytes) - 1);
                let (c0, c1) = (address >> t.chunk_shift(), last >> t.chunk_shift());
                lookups.push(t.trace(c0));
                if c1 != c0 {
                    lookups.push(t.trace(c1));
                }
            }
            let mut ar = access_report(i, a, route, rule, lookups);
            ar.values = std::mem::take(&mut o.values);
            ar.device_address = o.device_address;
            ar.escaped = o.escaped_at.is_some();
            if let Some(at) = o.escaped_at {
                let lookup = match (table, ar.lookups.as_slice()) {
                    (Some(t), [first, ..]) if at >> t.chunk_shift() == first.guest_chunk => {
                        first.clone()
                    }
                    (_, [_, second]) => second.clone(),
                    (Some(t), _) => t.trace(at >> t.chunk_shift()),
                    (None, _) => crate::report::LookupTrace {
                        guest_chunk: at >> 12,
                        home_slot: 0,
                        probes: Vec::new(),
                        outcome: crate::report::LookupOutcome::MissBound,
                    },
                };
                report.escapes.push(self.escape(i, a, at, lookup));
            }
            report.accesses.push(ar);
        }
        if let Some(t) = table {
            let mask = t.chunk_bytes() - 1;
            for &(slot, n) in &outcome.marks {
                let start = t.slots()[slot].guest_chunk << t.chunk_shift();
                report.marks.push(Mark {
                    table_slot: slot,
                    guest: ByteRange::new(start, start + mask + 1),
                    stores: n,
                });
            }
        }
        // C2: each marked chunk is a host write to the command processor.
        for m in &report.marks {
            let before = hand_change.distrusted.len();
            self.memory.note_written(m.guest, &mut hand_change);
            for &id in &hand_change.distrusted[before..] {
                report
                    .hand_off
                    .targets_distrusted
                    .push(self.target_lost(id, format!("marked chunk {} (C2)", m.guest)));
            }
        }
        // O8: one masked write-back per written holder.
        let device_stores = device_store_ranges(&report);
        for (h, range) in job.holders.iter().enumerate() {
            let mask = &outcome.masks[h];
            if !mask.iter().any(|&m| m != 0) {
                continue;
            }
            let holder_slot = holder_slots[h];
            let buf = &outcome.holders[h];
            let mut words = Vec::new();
            for (w, _) in mask.iter().enumerate().filter(|(_, m)| **m != 0) {
                let address = range.start + 4 * w as u64;
                let bytes = (range.end - address).min(4) as usize;
                let mut old = [0u8; 4];
                self.memory.read_bytes(address, &mut old[..bytes]);
                let new = &buf[4 * w..4 * w + bytes];
                let before = hand_change.distrusted.len();
                self.memory.host_write(address, new, &mut hand_change);
                for &id in &hand_change.distrusted[before..] {
                    report.hand_off.targets_distrusted.push(
                        self.target_lost(
                            id,
                            format!("write-back of holder slot {holder_slot} (O8)"),
                        ),
                    );
                }
                let mut n = [0u8; 4];
                n[..bytes].copy_from_slice(new);
                words.push(WordWritten {
                    address,
                    old: u64::from(u32::from_le_bytes(old)),
                    new: u64::from(u32::from_le_bytes(n)),
                    bytes: bytes as u8,
                });
                // L1: a device store to the same bytes lands before the write-back.
                let word = ByteRange::new(address, address + bytes as u64);
                if let Some(&(_, store)) =
                    device_stores.iter().rev().find(|(r, _)| r.overlaps(&word))
                {
                    report.hazards.push(Hazard {
                        rule: Rule::L1,
                        decision: Rule::L1.decision().into(),
                        holder: holder_slot,
                        address,
                        device_store: store,
                        bound_store: last_bound_store(&report, holder_slot, range.start, address),
                        message: format!(
                            "access {store} stored to {address:#x} by device address, and holder slot {holder_slot} writes the same word back after the dispatch: the write-back lands last and the device store is lost (L1)"
                        ),
                    });
                }
            }
            report.write_back.push(WriteBack {
                holder: holder_slot,
                range: *range,
                words_total: range.size_bytes().div_ceil(4),
                words,
            });
        }
        report.hand_off.pages_noted_written = merge_ranges(hand_change.noted_written);
        if mode == Mode::DeviceAddressed {
            self.in_flight = Some(index);
        }
        report.counts = counts(&report);
        Ok(report)
    }

    fn target_lost(&self, id: u32, by: String) -> TargetLost {
        let t = self.memory.targets().find(|t| t.id == id);
        TargetLost {
            id,
            name: t.map(|t| t.name.clone()).unwrap_or_default(),
            range: t.map_or(ByteRange::new(0, 0), |t| t.range),
            by,
        }
    }

    fn map(&mut self, index: u64) -> Result<MappingReport, EngineError> {
        let generation = self.memory.generation();
        let mut report = MappingReport {
            generation,
            ..MappingReport::default()
        };
        if self.mappings.stale(&self.memory) {
            let stats = self
                .mappings
                .map_all(&mut self.memory, &mut self.backend, index)?;
            report.remapped = true;
            report.committed_pages = stats.committed_pages;
            report.guards_released = stats.guards_released;
            report.pages_noted_written = stats.pages_noted_written;
        }
        let (made, dropped) = self.mappings.take_import_counts();
        report.imports_made = made;
        report.imports_dropped = dropped;
        report.mapped_generation = self.mappings.mapped_generation().unwrap_or(generation);
        report.remaps_total = self.mappings.remaps();
        let state = self.mapping_state();
        report.runs = state.runs.clone();
        report.pieces = state.pieces.clone();
        report.left_out = state.left_out.clone();
        Ok(report)
    }

    /// What the reports copy of the mapping state and what T1 derives from it, brought up to date
    /// only when the memory's generation (the readable runs, M4) or the mappings have moved since
    /// they were last derived: a dispatch over an unchanged large mapping then walks none of it.
    fn mapping_state(&mut self) -> &MappingState {
        let key = (self.memory.generation(), self.mappings.version());
        if self.mapping_state.key != Some(key) {
            self.mapping_state = MappingState::derive(key, &self.memory, &self.mappings);
        }
        debug_assert!(
            self.mapping_state == MappingState::derive(key, &self.memory, &self.mappings),
            "the mapping state moved without the generation or the mappings' version"
        );
        &self.mapping_state
    }

    fn sync_table(&mut self, limits: &DeviceLimits) -> Result<TableReport, EngineError> {
        puffin::profile_function!();
        let chunk_bytes = self.mapping_state().chunk_bytes;
        let changes = self.mappings.take_changes();
        let mut rebuilt = None;
        let (mut inserted, mut removed) = (0, 0);
        // A piece mapped and dropped again since the last dispatch may be finer than the chunk the
        // pieces now give (T1); its changes cannot be applied chunk by chunk, so the table is built.
        let fits =
            |p: &crate::import::Piece| (p.guest.start | p.guest.end) & (chunk_bytes - 1) == 0;
        let changes_fit = changes.iter().all(|c| match c {
            PieceChange::Added(p) | PieceChange::Removed(p) => fits(p),
        });
        let t: &ChunkTable = match &mut self.table {
            Some(t)
                if t.chunk_bytes() == chunk_bytes
                    && t.probe_bound() == limits.probe_bound
                    && changes_fit =>
            {
                let shift = t.chunk_shift();
                for c in &changes {
                    match c {
                        PieceChange::Removed(p) => {
                            for chunk in p.guest.start >> shift..p.guest.end >> shift {
                                if t.remove(chunk) {
                                    removed += 1;
                                }
                            }
                        }
                        PieceChange::Added(p) => {
                            for chunk in p.guest.start >> shift..p.guest.end >> shift {
                                let device = p.device_base + ((chunk << shift) - p.guest.start);
                                t.insert(chunk, device)?;
                                inserted += 1;
                            }
                        }
                    }
                }
                t
            }
            existing => {
                rebuilt = Some(match existing {
                    None => "first device-addressed dispatch".to_owned(),
                    Some(t) if t.chunk_bytes() != chunk_bytes => format!(
                        "T1: the chunk changed from {:#x} to {chunk_bytes:#x} bytes to follow the mappings' alignment",
                        t.chunk_bytes()
                    ),
                    Some(t) if t.probe_bound() != limits.probe_bound => {
                        "the probe bound changed".to_owned()
                    }
                    Some(_) => "T1: a piece mapped and dropped since the last dispatch was finer than the chunk".to_owned(),
                });
                let shift = chunk_bytes.trailing_zeros();
                let entries: Vec<(u64, u64)> = self
                    .mappings
                    .pieces()
                    .flat_map(|p| {
                        (p.guest.start >> shift..p.guest.end >> shift)
                            .map(move |c| (c, p.device_base + ((c << shift) - p.guest.start)))
                    })
                    .collect();
                self.sync.builds += 1;
                existing.insert(ChunkTable::build(
                    chunk_bytes,
                    limits.probe_bound,
                    &entries,
                )?)
            }
        };
        if rebuilt.is_some() || inserted > 0 || removed > 0 || self.sync.address == 0 {
            let (address, placement) = self
                .backend
                .place_table(t, limits.device_local_table_budget_bytes)?;
            self.sync.address = address;
            self.sync.placement = placement;
            self.sync.stats = None;
        }
        let stats = self.sync.stats.get_or_insert_with(|| TableStats {
            mean_probes_hit: t.mean_probes_hit(),
            mean_probes_miss: t.mean_probes_miss(),
            probe_histogram: t.probe_histogram_hits(),
        });
        self.sync.rebuilt = rebuilt.clone();
        self.sync.inserted = inserted;
        self.sync.removed = removed;
        Ok(TableReport {
            chunk_bytes: t.chunk_bytes(),
            // T1's chunk is the finest alignment of the pieces' ends, capped at 64 KiB.
            chunk_reason: match t.chunk_bytes() {
                a if a < crate::chunk_table::MAX_CHUNK_BYTES => format!(
                    "T1: the finest mapping is aligned to {a:#x} bytes, so a chunk is {a:#x} bytes and lies in one mapping"
                ),
                _ => format!(
                    "T1: every mapping is aligned to at least 64 KiB, so a chunk is the largest allowed, {:#x} bytes",
                    t.chunk_bytes()
                ),
            },
            capacity: t.capacity() as u64,
            n_chunks: t.len() as u64,
            load: t.load(),
            probe_bound: t.probe_bound(),
            multiplier: t.multiplier(),
            mean_probes_hit: stats.mean_probes_hit,
            mean_probes_miss: stats.mean_probes_miss,
            probe_histogram: stats.probe_histogram.clone(),
            rebuilt,
            inserted,
            removed,
            builds_total: self.sync.builds,
            placement: self.sync.placement,
            table_bytes: (t.capacity() * crate::chunk_table::SLOT_BYTES) as u64,
            device_address: self.sync.address,
            push_word: DEVICE_TABLE_PUSH_WORD,
        })
    }

    fn escape(
        &self,
        index: usize,
        a: &Access,
        at: u64,
        lookup: crate::report::LookupTrace,
    ) -> Escape {
        let (class, reason, since) = self.mappings.classify_miss(&self.memory, at);
        let (below, above) = self.mappings.neighbours(at);
        let near = match (below, above) {
            (Some(b), Some(u)) => {
                format!("; nearest mappings {} below and {} above", b.guest, u.guest)
            }
            (Some(b), None) => format!("; nearest mapping {} below", b.guest),
            (None, Some(u)) => format!("; nearest mapping {} above", u.guest),
            (None, None) => "; nothing is mapped".to_owned(),
        };
        let verb = if a.op == Op::Load {
            "read zero"
        } else {
            "stored nothing"
        };
        let (what, would) = match class {
            EscapeClass::NoReservation => (
                format!("no reservation holds {at:#x}"),
                format!("would reach guest memory if a reservation held {at:#x}"),
            ),
            EscapeClass::NotReadable => (
                format!("the guest left the page of {at:#x} unreadable, so no readable run holds it (M1)"),
                "would reach guest memory if the guest left the page readable".to_owned(),
            ),
            EscapeClass::LeftOut => (
                format!(
                    "the page of {at:#x} lies in a piece left out of its readable run: {} (M3)",
                    reason.map_or("not mappable", |r| r.phrase())
                ),
                "would reach guest memory once the page is committed, private and read-write (M5 maps it then)".to_owned(),
            ),
            EscapeClass::Dropped => {
                let released = self.memory.reservation_at(at).is_none();
                (
                    format!(
                        "the page of {at:#x} was mapped, and its mapping was dropped at event {} before dispatch {} when its reservation was {} (M4)",
                        since.map_or(0, |w| w.event),
                        since.map_or(0, |w| w.before_dispatch),
                        if released { "released" } else { "decommitted" }
                    ),
                    if released {
                        "would reach guest memory if a reservation held it again and the guest left it readable".to_owned()
                    } else {
                        "would reach guest memory once the page is committed again (M5 maps it then)".to_owned()
                    },
                )
            }
            EscapeClass::ProbeBound => (
                format!("the chunk of {at:#x} is mapped but its lookup stopped at the probe bound: a table defect (T2)"),
                "would reach guest memory if the table kept every mapped chunk within the probe bound (T2)".to_owned(),
            ),
        };
        let rule = if class == EscapeClass::ProbeBound {
            Rule::T2
        } else {
            Rule::T4
        };
        Escape {
            access: index,
            lane: a.lane,
            wave: a.wave,
            pc: a.pc,
            address: at,
            op: a.op,
            class,
            rule,
            decision: rule.decision().into(),
            reason,
            since,
            message: format!(
                "access {index} (lane {}, pc {:#x}, {:?} {:?}) escaped at {at:#x} and {verb}: {what}{near}",
                a.lane, a.pc, a.kind, a.op
            ),
            would_run_if: would,
            lookup,
        }
    }
}

fn describe_change(change: &MemoryChange, memory: &GuestMemory, effects: &mut Vec<String>) {
    for r in &change.noted_written {
        effects.push(format!("D824: the write-watch noted {r} written"));
    }
    for id in &change.distrusted {
        let name = memory
            .targets()
            .find(|t| t.id == *id)
            .map(|t| t.name.clone())
            .unwrap_or_default();
        effects.push(format!("D720: protected target {id} {name} lost its trust"));
    }
}

fn graphics_refusal(input: &DispatchInput) -> Refusal {
    let reasons: Vec<String> = input
        .reasons
        .iter()
        .map(|r| format!("{r:?} ({})", r.sentence()))
        .collect();
    Refusal {
        rule: Rule::A1,
        decision: Rule::A1.decision().into(),
        slot: None,
        values: vec![
            Value::hex("program", input.program),
            Value::text("reasons", reasons.join(", ")),
        ],
        message: format!(
            "graphics program {:#x} has ranges the host cannot know ({}); A1 runs only compute dispatches device-addressed",
            input.program,
            reasons.join(", ")
        ),
        would_run_if: "would run device-addressed if it were a compute dispatch, or bound if the host could know its ranges".into(),
        ours: false,
    }
}

fn format_store_refusals(input: &DispatchInput, index: &SlotIndex) -> Vec<Refusal> {
    let mut out = Vec::new();
    for (i, a) in input.accesses.iter().enumerate() {
        if a.kind != AccessKind::FormatBuffer || a.op != Op::Store {
            continue;
        }
        let Some(slot) = a
            .slot
            .and_then(|s| index.position(&input.slots, s))
            .map(|p| &input.slots[p])
        else {
            continue;
        };
        if slot.resolved {
            continue;
        }
        out.push(Refusal {
            rule: Rule::W2,
            decision: Rule::W2.decision().into(),
            slot: Some(slot.slot),
            values: vec![
                Value::int("access", i as u64),
                Value::hex("pc", a.pc),
                Value::text("format", slot.format.map_or("none".into(), |f| format!("{f:?}"))),
            ],
            message: format!(
                "access {i} (pc {:#x}) is a format store through slot {}, whose descriptor the host could not resolve; D967 carries out format loads through such a descriptor, not stores",
                a.pc, slot.slot
            ),
            would_run_if: format!(
                "would run if the host resolved slot {}'s descriptor (the store would convert by the format the host read), or if the store were untyped",
                slot.slot
            ),
            ours: false,
        });
    }
    out
}

fn mode_reason(input: &DispatchInput, mode: Mode, refusals: &[Refusal]) -> String {
    match mode {
        Mode::Refused => {
            let rules: Vec<&str> = refusals.iter().map(|r| r.rule.id()).collect();
            format!("refused by {}", rules.join(", "))
        }
        Mode::Bound => "the host knew every range before the dispatch: bound by D953".into(),
        Mode::DeviceAddressed => {
            let reasons: Vec<String> = input
                .reasons
                .iter()
                .map(|r| format!("{r:?}: {}", r.sentence()))
                .collect();
            format!(
                "A1: the host could not know its ranges ({}), so it runs device-addressed instead of refused",
                reasons.join("; ")
            )
        }
    }
}

fn access_report(
    i: usize,
    a: &Access,
    route: Route,
    rule: Rule,
    lookups: Vec<crate::report::LookupTrace>,
) -> AccessReport {
    AccessReport {
        index: i,
        workgroup: a.workgroup,
        wave: a.wave,
        lane: a.lane,
        pc: a.pc,
        kind: a.kind,
        op: a.op,
        size_bytes: a.size_bytes,
        route,
        rule,
        lookups,
        device_address: None,
        values: Vec::new(),
        escaped: false,
    }
}

/// Decides each access's route and the holders to upload.
fn build_job<'a>(
    input: &'a DispatchInput,
    index: &SlotIndex,
    bindings: &[SlotBinding],
    limits: &DeviceLimits,
) -> (Job<'a>, Vec<u32>, Vec<(Route, Rule)>) {
    let mut holders: Vec<ByteRange> = Vec::new();
    let mut holder_slots: Vec<u32> = Vec::new();
    let mut holder_index: std::collections::HashMap<u32, usize> = std::collections::HashMap::new();
    for b in bindings {
        if let Some(h) = b.holder
            && !holder_index.contains_key(&h)
        {
            let widened = ByteRange::new(
                b.range.start - b.offset,
                b.range.start - b.offset + b.binding.end,
            );
            holder_index.insert(h, holders.len());
            holders.push(widened);
            holder_slots.push(h);
        }
    }
    let mut accesses = Vec::with_capacity(input.accesses.len());
    let mut routes = Vec::with_capacity(input.accesses.len());
    for a in &input.accesses {
        // The slot's position: its binding is at the same position.
        let pos = a.slot.and_then(|s| index.position(&input.slots, s));
        let slot = pos.map(|p| &input.slots[p]);
        let format = if a.kind == AccessKind::FormatBuffer {
            slot.and_then(|s| s.format)
        } else {
            None
        };
        let (planned, route, rule) = match a.kind {
            AccessKind::Lds => {
                let offset = a.offset.unwrap_or(0);
                (Planned::Lds { offset }, Route::Lds { offset }, Rule::P1)
            }
            AccessKind::Scratch => {
                let offset = a.offset.unwrap_or(0);
                (
                    Planned::Scratch { offset },
                    Route::Scratch { offset },
                    Rule::P1,
                )
            }
            AccessKind::Flat => {
                let address = a.address.unwrap_or(0);
                let route = route_flat(address, limits.lds_aperture, limits.scratch_aperture);
                let planned = match route {
                    Route::Lds { offset } => Planned::Lds { offset },
                    Route::Scratch { offset } => Planned::Scratch { offset },
                    _ => Planned::Device { address },
                };
                (planned, route, Rule::P1)
            }
            AccessKind::Global | AccessKind::RayIntersection => {
                let address = a.address.unwrap_or(0);
                let rule = if a.kind == AccessKind::Global {
                    Rule::W1
                } else {
                    Rule::W3
                };
                (Planned::Device { address }, Route::Device { address }, rule)
            }
            AccessKind::Scalar | AccessKind::UntypedBuffer | AccessKind::FormatBuffer => {
                match (slot, a.address) {
                    (Some(s), _) => {
                        let off = s.addressed_offset(a.index, a.offset.unwrap_or(0), a.lane);
                        match pos.and_then(|p| bindings.get(p)).filter(|b| b.resolved) {
                            Some(b) => {
                                let holder = b.holder.unwrap_or(s.slot);
                                let offset = b.offset + off;
                                let rule = if b.offset == 0 { Rule::O8 } else { Rule::O6 };
                                (
                                    Planned::Bound {
                                        holder: holder_index.get(&holder).copied().unwrap_or(0),
                                        offset,
                                    },
                                    Route::Bound { holder, offset },
                                    rule,
                                )
                            }
                            None => {
                                let address = s.effective_base(&input.push).unwrap_or(s.base) + off;
                                let rule = if a.kind == AccessKind::FormatBuffer {
                                    Rule::W2
                                } else {
                                    Rule::W1
                                };
                                (Planned::Device { address }, Route::Device { address }, rule)
                            }
                        }
                    }
                    (None, address) => {
                        let address = address.unwrap_or(0);
                        (
                            Planned::Device { address },
                            Route::Device { address },
                            Rule::W3,
                        )
                    }
                }
            }
        };
        accesses.push(PlannedAccess {
            access: a,
            route: planned,
            format,
        });
        routes.push((route, rule));
    }
    (
        Job {
            accesses,
            holders,
            lds_bytes: limits.lds_bytes,
            scratch_bytes_per_lane: limits.scratch_bytes_per_lane,
        },
        holder_slots,
        routes,
    )
}

/// L1: the guest bytes each device-addressed store reached: the part of the access in each chunk
/// whose lookup hit (T5). A chunk that missed stored nothing (T4), whichever of the two it is.
fn device_store_ranges(report: &DispatchReport) -> Vec<(ByteRange, usize)> {
    let Some(chunk_bytes) = report.table.as_ref().map(|t| t.chunk_bytes) else {
        return Vec::new();
    };
    let shift = chunk_bytes.trailing_zeros();
    let mut out = Vec::new();
    for a in report.accesses.iter().filter(|a| a.op == Op::Store) {
        let Route::Device { address } = a.route else {
            continue;
        };
        let whole = ByteRange::new(address, address.saturating_add(u64::from(a.size_bytes)));
        for l in &a.lookups {
            if !matches!(l.outcome, crate::report::LookupOutcome::Hit { .. }) {
                continue;
            }
            let start = l.guest_chunk << shift;
            if let Some(landed) =
                ByteRange::new(start, start.saturating_add(chunk_bytes)).intersection(&whole)
            {
                out.push((landed, a.index));
            }
        }
    }
    out
}

fn last_bound_store(
    report: &DispatchReport,
    holder: u32,
    holder_base: u64,
    address: u64,
) -> Option<usize> {
    report
        .accesses
        .iter()
        .rev()
        .find(|a| {
            a.op == Op::Store
                && matches!(a.route, Route::Bound { holder: h, offset } if h == holder
                    && ByteRange::new(holder_base + offset, holder_base + offset + u64::from(a.size_bytes))
                        .overlaps(&ByteRange::new(address, address + 4)))
        })
        .map(|a| a.index)
}

fn merge_ranges(mut v: Vec<ByteRange>) -> Vec<ByteRange> {
    v.sort_unstable();
    let mut out: Vec<ByteRange> = Vec::new();
    for r in v {
        match out.last_mut() {
            Some(l) if l.end >= r.start => l.end = l.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}

fn counts(r: &DispatchReport) -> Counts {
    Counts {
        sets: r.sets.len(),
        refusals: r.refusals.len(),
        escapes: r.escapes.len(),
        marks: r.marks.len(),
        accesses: r.accesses.len(),
        words_written_back: r.write_back.iter().map(|w| w.words.len()).sum(),
        hazards: r.hazards.len(),
    }
}

/// Checks a dispatch before anything runs: every malformed value is a named [`InputError`].
pub fn validate(input: &DispatchInput, limits: &DeviceLimits) -> Result<(), InputError> {
    validate_indexed(input, limits).map(drop)
}

/// [`validate`], returning the index of the slots by number the checks made.
fn validate_indexed(input: &DispatchInput, limits: &DeviceLimits) -> Result<SlotIndex, InputError> {
    let index = SlotIndex::new(&input.slots);
    let slot_numbered = |slot: u32| index.position(&input.slots, slot).map(|p| &input.slots[p]);
    let device_addressed = !input.reasons.is_empty();
    if device_addressed && input.push.len() > DEVICE_TABLE_PUSH_WORD as usize {
        return Err(InputError::PushBlockTooLong {
            len: input.push.len(),
        });
    }
    for (pos, s) in input.slots.iter().enumerate() {
        if index.first_repeat() == Some(pos) {
            return Err(InputError::DuplicateSlot { slot: s.slot });
        }
        if s.size_bytes == 0 {
            return Err(InputError::ZeroSizeSlot { slot: s.slot });
        }
        if let crate::input::BaseSource::PushBlock { word } = s.base_source {
            if device_addressed
                && (word == DEVICE_TABLE_PUSH_WORD || word + 1 == DEVICE_TABLE_PUSH_WORD)
            {
                return Err(InputError::PushWordTaken { slot: s.slot, word });
            }
            if s.effective_base(&input.push).is_none() {
                return Err(InputError::PushWordMissing {
                    slot: s.slot,
                    word,
                    len: input.push.len(),
                });
            }
        }
        let base = s.effective_base(&input.push).unwrap_or(s.base);
        if base.checked_add(s.size_bytes).is_none() {
            return Err(InputError::SlotOverflow {
                slot: s.slot,
                base,
                size_bytes: s.size_bytes,
            });
        }
        if !s.resolved && !device_addressed {
            return Err(InputError::UnresolvedWithoutReason { slot: s.slot });
        }
    }
    let range_of = |s: &crate::input::Slot| {
        let b = s.effective_base(&input.push).unwrap_or(s.base);
        ByteRange::new(b, b + s.size_bytes)
    };
    for s in &input.slots {
        let Some(of) = s.alias_of else { continue };
        let Some(target) = slot_numbered(of) else {
            return Err(InputError::AliasUnknown { slot: s.slot, of });
        };
        if range_of(s) != range_of(target) {
            return Err(InputError::AliasMismatch {
                slot: s.slot,
                of,
                range: range_of(s),
                of_range: range_of(target),
            });
        }
        let mut c = target;
        for _ in 0..=input.slots.len() {
            match c.alias_of.and_then(slot_numbered) {
                Some(next) => c = next,
                None => break,
            }
            if c.slot == s.slot {
                return Err(InputError::AliasCycle { slot: s.slot });
            }
        }
        if c.alias_of.is_some() {
            return Err(InputError::AliasCycle { slot: s.slot });
        }
    }
    for (i, a) in input.accesses.iter().enumerate() {
        let slot = match a.slot {
            Some(s) => {
                Some(slot_numbered(s).ok_or(InputError::UnknownSlot { access: i, slot: s })?)
            }
            None => None,
        };
        validate_access(i, a, slot, limits, device_addressed)?;
    }
    Ok(index)
}

/// Checks access `i`, whose slot, when it names one, is `slot` (known to exist).
fn validate_access(
    i: usize,
    a: &Access,
    slot: Option<&Slot>,
    limits: &DeviceLimits,
    device_addressed: bool,
) -> Result<(), InputError> {
    let missing = |what| InputError::MissingOperand {
        access: i,
        kind: a.kind,
        what,
    };
    if a.size_bytes == 0 || a.size_bytes > 64 {
        return Err(InputError::BadSize {
            access: i,
            size: a.size_bytes,
        });
    }
    let format = if a.kind == AccessKind::FormatBuffer {
        let s = slot.ok_or(missing("a slot and an offset"))?;
        let f = s.format.ok_or(InputError::FormatMissing {
            access: i,
            slot: s.slot,
        })?;
        if a.size_bytes != f.element_bytes() {
            return Err(InputError::FormatSize {
                access: i,
                size: a.size_bytes,
                format: f,
                element: f.element_bytes(),
            });
        }
        Some(f)
    } else {
        None
    };
    match a.op {
        Op::Load if !a.values.is_empty() => {
            return Err(InputError::LoadWithValues {
                access: i,
                got: a.values.len(),
            });
        }
        Op::Store => {
            let expected = format.map_or(words_for(a.size_bytes), |f| f.components());
            if a.values.len() != expected {
                return Err(InputError::StoreValueCount {
                    access: i,
                    size: a.size_bytes,
                    expected,
                    got: a.values.len(),
                });
            }
        }
        Op::Load => {}
    }
    let aperture = |kind: AccessKind, offset: u64, limit: u32| {
        if offset.saturating_add(u64::from(a.size_bytes)) > u64::from(limit) {
            Err(InputError::ApertureOutOfRange {
                access: i,
                kind,
                offset,
                size: a.size_bytes,
                limit: u64::from(limit),
            })
        } else {
            Ok(())
        }
    };
    let needs_device = |address: u64| {
        if device_addressed {
            Ok(())
        } else {
            Err(InputError::NeedsDeviceAddress {
                access: i,
                kind: a.kind,
                address,
            })
        }
    };
    match a.kind {
        AccessKind::Lds => aperture(
            a.kind,
            a.offset.ok_or(missing("an LDS offset"))?,
            limits.lds_bytes,
        )?,
        AccessKind::Scratch => aperture(
            a.kind,
            a.offset.ok_or(missing("a scratch offset"))?,
            limits.scratch_bytes_per_lane,
        )?,
        AccessKind::Flat => {
            let address = a.address.ok_or(missing("an address"))?;
            match route_flat(address, limits.lds_aperture, limits.scratch_aperture) {
                Route::Lds { offset } => aperture(AccessKind::Lds, offset, limits.lds_bytes)?,
                Route::Scratch { offset } => {
                    aperture(AccessKind::Scratch, offset, limits.scratch_bytes_per_lane)?
                }
                _ => needs_device(address)?,
            }
        }
        AccessKind::Global | AccessKind::RayIntersection => {
            needs_device(a.address.ok_or(missing("an address"))?)?
        }
        AccessKind::Scalar | AccessKind::UntypedBuffer | AccessKind::FormatBuffer => match slot {
            Some(s) => {
                let offset = a.offset.ok_or(missing("an offset in its slot"))?;
                let off = s.addressed_offset(a.index, offset, a.lane);
                if off.saturating_add(u64::from(a.size_bytes)) > s.size_bytes {
                    return Err(InputError::AccessOutsideSlot {
                        access: i,
                        slot: s.slot,
                        offset: off,
                        size: a.size_bytes,
                        size_bytes: s.size_bytes,
                    });
                }
            }
            None if a.kind == AccessKind::Scalar => needs_device(
                a.address
                    .ok_or(missing("a slot and an offset, or an address"))?,
            )?,
            None => return Err(missing("a slot and an offset")),
        },
    }
    if let Some(addr) = a.address
        && addr.checked_add(u64::from(a.size_bytes)).is_none()
    {
        return Err(InputError::BadSize {
            access: i,
            size: a.size_bytes,
        });
    }
    Ok(())
}
