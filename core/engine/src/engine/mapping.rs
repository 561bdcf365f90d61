//! Mapping (M1–M5) and the table (T1–T3, T6) for a device-addressed dispatch: the readable runs
//! mapped again when the generation moved, the chunk table brought up to the mappings (changed
//! chunk by chunk, or built when T1's chunk or the probe bound changed) and placed, and what the
//! report copies of them, kept until the memory or the mappings move.

use super::{Engine, EngineError};
use crate::backend::Backend;
use crate::chunk_table::{
    ChunkTable, MAX_CHUNK_BYTES, PARTS, SLOT_BYTES, TableError, chunk_bytes_for, parts_covered,
};
use crate::import::{Mappings, Piece, PieceChange};
use crate::input::DeviceLimits;
use crate::memory::GuestMemory;
use crate::report::{
    LeftOutReport, MappingReport, PieceReport, Placement, ReadableRun, TableReport,
};
use crate::rules::DEVICE_TABLE_PUSH_WORD;

#[derive(Debug, Default)]
pub(super) struct TableSync {
    rebuilt: Option<String>,
    inserted: u64,
    removed: u64,
    builds: u64,
    address: u64,
    placement: Placement,
    /// The slots the last sync changed, and the table versions it took the table from and to:
    /// what a debugger's copy of the table needs to follow it without copying it whole.
    pub(super) last_changes: Option<(u64, u64, crate::chunk_table::Changed)>,
}

/// The mapping state as of `key` (the memory's generation, the mappings' version): what each
/// report copies, and the chunk size T1 gives.
#[derive(Debug, Default, PartialEq)]
pub(super) struct MappingState {
    key: Option<(u64, u64)>,
    runs: Vec<ReadableRun>,
    pub(super) pieces: Vec<PieceReport>,
    pub(super) left_out: Vec<LeftOutReport>,
    /// T1: the chunk the imports allow.
    chunk_bytes: u64,
    /// What sets it: the import whose ends are the least aligned, in words.
    chunk_cause: String,
}

impl MappingState {
    fn derive(key: (u64, u64), memory: &GuestMemory, mappings: &Mappings, last: &mut Self) -> Self {
        // The readable runs move with the generation alone (M4), not with the mappings.
        let runs = match last.key {
            Some((generation, _)) if generation == key.0 => std::mem::take(&mut last.runs),
            _ => memory.readable_runs(),
        };
        Self {
            key: Some(key),
            runs,
            pieces: mappings.piece_reports(),
            left_out: mappings.left_out().cloned().collect(),
            // T1 over the imports: a chunk lies in one import; the pieces inside one (pages cut out
            // by the write-watch or the emulator's protection) are the slots' parts, each a
            // sixteenth of the chunk, so a chunk is at most 16 pages.
            chunk_bytes: chunk_bytes_for(mappings.imports().map(|i| (i.guest.start, i.guest.end)))
                .min(memory.page_bytes() * u64::from(PARTS)),
            chunk_cause: chunk_cause(memory, mappings),
        }
    }
}

/// T1 in words: which import's ends set the chunk, and what lies beside them.
fn chunk_cause(memory: &GuestMemory, mappings: &Mappings) -> String {
    let finest = mappings
        .imports()
        .min_by_key(|i| (i.guest.start | i.guest.end).trailing_zeros());
    let Some(i) = finest else {
        return "nothing is imported".to_owned();
    };
    let align = 1u64 << (i.guest.start | i.guest.end).trailing_zeros().min(63);
    if align >= MAX_CHUNK_BYTES.min(memory.page_bytes() * u64::from(PARTS)) {
        return "every import's ends are aligned to the largest chunk".to_owned();
    }
    let at = if i.guest.end & (align - 1) == 0
        && i.guest.end.trailing_zeros() < i.guest.start.trailing_zeros()
    {
        i.guest.end
    } else {
        i.guest.start
    };
    let beside = mappings
        .left_out()
        .find(|l| l.guest.contains(at) || l.guest.end == at)
        .map_or(String::new(), |l| {
            format!(", beside {} left out ({})", l.guest, l.reason.phrase())
        });
    format!(
        "the import of {} (what M3 handed the driver in one piece) ends on a {align:#x}-byte boundary at {at:#x}{beside}, and a chunk lies in one import",
        i.guest
    )
}

/// T2 by parts: the piece changes, slot by slot; the slots inserted and removed.
fn apply_changes(t: &mut ChunkTable, changes: &[PieceChange]) -> Result<(u64, u64), TableError> {
    let (mut inserted, mut removed) = (0, 0);
    let shift = t.chunk_shift();
    for c in changes {
        let (PieceChange::Added(p) | PieceChange::Removed(p)) = c;
        let chunks = p.guest.start >> shift..((p.guest.end - 1) >> shift) + 1;
        if let PieceChange::Added(_) = c {
            crate::chunk_table::check_entries(
                (t.len() as u64).saturating_add(chunks.end - chunks.start),
            )?;
        }
        for chunk in chunks {
            let parts = parts_covered(chunk, shift, p.guest.start, p.guest.end);
            let device = p.device_at(chunk << shift);
            match c {
                PieceChange::Removed(_) => {
                    if t.remove_parts(chunk, device, parts) {
                        removed += 1;
                    }
                }
                PieceChange::Added(_) => {
                    t.insert_parts(chunk, device, parts)?;
                    inserted += 1;
                }
            }
        }
    }
    Ok((inserted, removed))
}

impl<B: Backend> Engine<B> {
    /// M1–M5: maps what the generation needs and reports the mapping state.
    pub(super) fn map(&mut self, index: u64) -> Result<MappingReport, EngineError> {
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
        } else {
            // M2 asked again where the emulator refused it last time (a commit that failed).
            self.mappings
                .retry_host_calls(&mut self.memory, &mut self.backend, index)?;
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
    pub(super) fn mapping_state(&mut self) -> &MappingState {
        let key = (self.memory.generation(), self.mappings.version());
        if self.mapping_state.key != Some(key) {
            let mut last = std::mem::take(&mut self.mapping_state);
            self.mapping_state = MappingState::derive(key, &self.memory, &self.mappings, &mut last);
        }
        debug_assert!(
            self.mapping_state
                == MappingState::derive(
                    key,
                    &self.memory,
                    &self.mappings,
                    &mut MappingState::default()
                ),
            "the mapping state moved without the generation or the mappings' version"
        );
        &self.mapping_state
    }

    /// T1–T3, T6: brings the chunk table up to the mappings, places it, and reports it.
    pub(super) fn sync_table(&mut self, limits: &DeviceLimits) -> Result<TableReport, EngineError> {
        puffin::profile_function!();
        let chunk_bytes = self.mapping_state().chunk_bytes;
        let changes = self.mappings.take_changes();
        let mut rebuilt = None;
        let (mut inserted, mut removed) = (0, 0);
        // A change finer than a part of the chunk the imports now give (T1: an import mapped and
        // dropped since the last dispatch) cannot be applied slot by slot, so the table is built.
        let part_bytes = chunk_bytes / u64::from(PARTS);
        let fits = |p: &Piece| (p.guest.start | p.guest.end) & (part_bytes - 1) == 0;
        let changes_fit = changes.iter().all(|c| match c {
            PieceChange::Added(p) | PieceChange::Removed(p) => fits(p),
        });
        // The changes, slot by slot, where the table has the chunk and bound they need. A batch can
        // pass through states a table cannot hold (a chunk briefly in two imports, more slots than
        // the bound) though its end state fits: then the table is built from the end state.
        let mut applied = None;
        if let Some(t) = self.table.as_mut()
            && t.chunk_bytes() == chunk_bytes
            && t.probe_bound() == limits.probe_bound
            && changes_fit
        {
            applied = Some(apply_changes(t, &changes));
        }
        let t: &ChunkTable = match (applied, &mut self.table) {
            (Some(Ok((i, r))), Some(t)) => {
                (inserted, removed) = (i, r);
                t
            }
            (applied, existing) => {
                rebuilt = Some(match (applied, &*existing) {
                    (Some(Err(e)), _) => format!(
                        "T2: the changes since the last dispatch could not be made slot by slot ({e}); the table was built from the mappings they end in"
                    ),
                    (_, None) => "first device-addressed dispatch".to_owned(),
                    // A finer chunk names the import that made it so.
                    (_, Some(t)) if t.chunk_bytes() != chunk_bytes => format!(
                        "T1: the chunk changed from {:#x} to {chunk_bytes:#x} bytes to follow the mappings' alignment{}",
                        t.chunk_bytes(),
                        if chunk_bytes < t.chunk_bytes() {
                            format!(": {}", self.mapping_state.chunk_cause)
                        } else {
                            String::new()
                        }
                    ),
                    (_, Some(t)) if t.probe_bound() != limits.probe_bound => {
                        "the probe bound changed".to_owned()
                    }
                    (_, Some(_)) => "T1: a piece mapped and dropped since the last dispatch was finer than a part of the chunk".to_owned(),
                });
                let shift = chunk_bytes.trailing_zeros();
                let chunks_of =
                    |p: &Piece| p.guest.start >> shift..((p.guest.end - 1) >> shift) + 1;
                let n_chunks = self
                    .mappings
                    .pieces()
                    .map(|p| chunks_of(p).end - chunks_of(p).start)
                    .fold(0u64, u64::saturating_add);
                crate::chunk_table::check_entries(n_chunks)?;
                // A chunk cut in pieces of one import is one slot reaching their parts (the build
                // joins them).
                let entries: Vec<(u64, u64)> = self
                    .mappings
                    .pieces()
                    .flat_map(|p| {
                        chunks_of(p).map(move |c| {
                            let parts = parts_covered(c, shift, p.guest.start, p.guest.end);
                            (
                                crate::chunk_table::key_of(c, parts),
                                p.device_at(c << shift),
                            )
                        })
                    })
                    .collect();
                self.sync.builds += 1;
                let built = ChunkTable::build(chunk_bytes, limits.probe_bound, &entries)?;
                // A dispatch in flight that read the old table names its slots by it (C1).
                if let Some(old) = existing.take()
                    && self.flights.reads_table(self.table_serial)
                {
                    self.retired_tables.push((self.table_serial, old));
                }
                self.table_serial += 1;
                existing.insert(built)
            }
        };
        if rebuilt.is_some() || inserted > 0 || removed > 0 || self.sync.address == 0 {
            let (address, placement) = self
                .backend
                .place_table(t, limits.device_local_table_budget_bytes)?;
            self.sync.address = address;
            self.sync.placement = placement;
        }
        self.sync.rebuilt = rebuilt.clone();
        self.sync.inserted = inserted;
        self.sync.removed = removed;
        let report = TableReport {
            chunk_bytes: t.chunk_bytes(),
            // T1's chunk is the finest alignment of the imports' ends, capped at 64 KiB.
            chunk_reason: match t.chunk_bytes() {
                // (What set it is said where it changes: `TableReport::rebuilt`.)
                a if a < MAX_CHUNK_BYTES => format!(
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
            // Kept by the table as it changes: no walk over its slots.
            mean_probes_hit: t.mean_probes_hit(),
            mean_probes_miss: t.mean_probes_miss(),
            probe_histogram: t.probe_histogram_hits(),
            rebuilt,
            inserted,
            removed,
            builds_total: self.sync.builds,
            placement: self.sync.placement,
            table_bytes: (t.capacity() * SLOT_BYTES) as u64,
            device_address: self.sync.address,
            push_word: DEVICE_TABLE_PUSH_WORD,
        };
        // The backend's copy is now this version of the table: changes count from here.
        if let Some(t) = self.table.as_mut() {
            let changed = match t.changed() {
                crate::chunk_table::Changed::Slots(v) if v.is_empty() => None,
                c => Some((t.changed_since(), t.version(), c.clone())),
            };
            if changed.is_some() {
                self.sync.last_changes = changed;
            }
            t.clear_changed();
        }
        Ok(report)
    }
}
