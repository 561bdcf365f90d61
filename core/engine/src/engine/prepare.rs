//! The dispatch path split where the emulator's own dispatch goes: [`Engine::prepare`] runs every
//! phase before the device (validate, O1–O11, A1/W2, C3, M1–M5, T1–T3/T6, routing) and hands out
//! what the emulator's command buffer needs ([`Prepared`]); the emulator records and submits its
//! own dispatch with its own module (linked against the lookup helper); after its fence,
//! [`Engine::complete`] takes what the device left ([`DeviceRun`]: the marks, each holder's data
//! and write mask) and runs every phase after the device (C1, C2, O8/O9, L1) into the report.
//!
//! `Engine::dispatch` is the same two calls with the engine's own backend run between them
//! ([`Ran::Backend`]), so there is one path, not two.

use super::in_flight::{Carry, Held, PrepareOptions};
use super::route::{self, Routed};
use super::validate::Checked;
use super::{Engine, EngineError, after, counts_of, replan};
use crate::addr::ByteRange;
use crate::backend::Backend;
use crate::exec::Outcome;
use crate::input::{DeviceLimits, DispatchInput};
use crate::memory::MemoryChange;
use crate::report::{
    BeforeDispatch, BindSet, DispatchReport, EventReport, HandOff, HostFailureKind, HostPathReport,
    LeftOutReason, MappingReport, Mode, Refusal, SCHEMA, SlotBinding, TableReport,
};
use crate::rules::DEVICE_TABLE_PUSH_WORD;
use thiserror::Error;

/// Words of an emulator's holder write-back listed with their values in the report; the rest are
/// counted and placed by runs, so a full-screen output keeps its report small.
pub const DEVICE_WORDS_LISTED: usize = 16;

/// Push-block words the lookup helper reads (`dispatchscope-vk`'s `spirv::library` states the
/// interface): 18 `log2` chunk bytes, 19 `log2` table capacity, 20 the probe bound, 24–25 the mark
/// words' device address (C1), 28–29 the hash multiplier, 30–31 the table's device address (T3).
/// Eleven words, 44 bytes: more than the one 64-bit value a push block as full as shadPS4's has
/// left; for such a block the helper's header form (`dispatchscope-vk`'s `Variant::Header`) reads
/// words 16–31 from a 64-byte header in memory whose device address is all the block carries, at
/// words 30–31.
pub mod push_word {
    /// `log2(chunk bytes)` (T1).
    pub const CHUNK_SHIFT: u32 = 18;
    /// `log2(table capacity)`.
    pub const CAPACITY_LOG2: u32 = 19;
    /// The probe bound (T2).
    pub const PROBE_BOUND: u32 = 20;
    /// The mark words' device address (2 words, C1).
    pub const MARKS: u32 = 24;
    /// The hash multiplier (2 words, T2).
    pub const MULTIPLIER: u32 = 28;
    /// The table's device address (2 words, T3).
    pub const TABLE: u32 = super::DEVICE_TABLE_PUSH_WORD;
}

/// How the emulator binds one slot of a bound dispatch (O5–O9), in the emulator's words: which
/// guest bytes its buffer holds, and where in that buffer the slot's descriptor starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotPlan {
    /// The slot number the program binds.
    pub slot: u32,
    /// The slot whose buffer it binds (itself when alone or holder, O4).
    pub holder: u32,
    /// The guest bytes the holder's buffer holds: its widened range (O5), uploaded once (O8).
    pub buffer: ByteRange,
    /// The descriptor's offset into the holder's buffer (O6), a multiple of
    /// `minStorageBufferOffsetAlignment` (O7 refused the dispatch otherwise).
    pub offset_bytes: u64,
    /// The descriptor's range: from `offset_bytes` to the holder's widened end (O6).
    pub range_bytes: u64,
    /// The write mask's descriptor offset into the holder's mask buffer: one 4-byte mask word a
    /// data word, at the slot's own offset (O9).
    pub mask_offset_bytes: u64,
    /// Whether the dispatch writes through it (its holder is then written back, O8).
    pub written: bool,
}

/// What a device-addressed dispatch's module needs (D964): the table and the words its push block
/// carries for the helper.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceAddressing {
    /// T3: the chunk table's device address.
    pub table_address: u64,
    /// C1: the mark words' device address (one `u32` a table slot, zero before the dispatch), or 0
    /// where the engine's backend keeps none and the emulator hands its own to [`DeviceRun`].
    pub marks_address: u64,
    /// Mark words: one a table slot.
    pub mark_words: u64,
    /// T1: bytes a chunk.
    pub chunk_bytes: u64,
    /// Every push word the helper reads, as (word index, value), in word order.
    pub push_words: Vec<(u32, u32)>,
}

/// Everything the emulator's command buffer needs for one dispatch, and what the engine keeps
/// until [`Engine::complete`]. A clone completes only once: the engine matches it by index.
#[derive(Clone, Debug)]
pub struct Prepared {
    /// The dispatch's index in the session.
    pub index: u64,
    /// Bound, device-addressed or refused.
    pub mode: Mode,
    /// Why, in one sentence.
    pub mode_reason: String,
    /// Each slot's binding as the report has it.
    pub slots: Vec<SlotBinding>,
    /// Sets of two or more slots (O2).
    pub sets: Vec<BindSet>,
    /// Refusals by rule; a refused dispatch must not run.
    pub refusals: Vec<Refusal>,
    /// How to bind each slot (bound and device-addressed dispatches both bind the slots the host
    /// resolved, W1); empty for a refused one.
    pub bindings: Vec<SlotPlan>,
    /// The table and the push words, for a device-addressed dispatch.
    pub device: Option<DeviceAddressing>,
    /// What the command buffer copies into this dispatch's holders before it, so that they hold
    /// what earlier dispatches in flight wrote ([`Carry`]), in recording order; empty when nothing
    /// in flight writes what it reads.
    pub carries: Vec<Carry>,
    pub(super) checked: Checked,
    pub(super) limits: DeviceLimits,
    pub(super) events_before: Vec<EventReport>,
    pub(super) before: BeforeDispatch,
    pub(super) mappings: Option<MappingReport>,
    pub(super) table: Option<TableReport>,
}

impl Prepared {
    /// The push block's 32 words with the helper's words set (others zero): what a program with no
    /// push words of its own pushes.
    pub fn push_block(&self) -> [u32; 32] {
        let mut words = [0u32; 32];
        for &(w, v) in self.device.iter().flat_map(|d| d.push_words.iter()) {
            if let Some(slot) = words.get_mut(w as usize) {
                *slot = v;
            }
        }
        words
    }

    /// The plan of holder slot `slot`, if it is one.
    pub fn holder(&self, slot: u32) -> Option<&SlotPlan> {
        self.bindings
            .iter()
            .find(|b| b.slot == slot && b.holder == slot)
    }
}

/// One holder's bytes after the emulator's dispatch, for O8's masked write-back.
#[derive(Clone, Copy, Debug)]
pub struct HolderRun<'a> {
    /// The holder slot.
    pub slot: u32,
    /// The holder's buffer, from its widened start (`SlotPlan::buffer`).
    pub data: &'a [u8],
    /// Its write mask: 4 bytes a data word, non-zero where a store set it (O9).
    pub masks: &'a [u8],
}

/// What the emulator's device left, read after its fence.
#[derive(Clone, Debug, Default)]
pub struct DeviceRun<'a> {
    /// C1: the mark words as the device left them (one a table slot), when the emulator kept its
    /// own; `None` reads them from the engine's backend (`DeviceAddressing::marks_address`).
    pub marks: Option<&'a [u32]>,
    /// O8: each written holder's data and mask. A holder left out is not written back: the
    /// emulator's buffer was its own guest pages (imported zero-copy), so its stores are in place.
    pub holders: Vec<HolderRun<'a>>,
    /// The device that ran it, named in the report's `backend` (the engine's own backend only
    /// planned and mapped); `None` names the engine's backend.
    pub ran_on: Option<&'a str>,
    /// The instrumented variant's buffer as the device left it: complete decodes it into the
    /// report's section (counters by site, escapes classified by T4's classes, the escape log,
    /// captured lanes), so an emulator's own instrumented pass explains its escapes.
    pub instrumentation: Option<DeviceInstrumentation<'a>>,
}

/// An instrumented pass's buffer (`crate::instrument`'s layout), with what decoding it needs.
#[derive(Clone, Copy, Debug)]
pub struct DeviceInstrumentation<'a> {
    /// The buffer's layout (its sites, logs and capture).
    pub layout: crate::instrument::InstrumentLayout,
    /// The dispatch's grid.
    pub grid: crate::instrument::Grid,
    /// The buffer's words as the device left them.
    pub words: &'a [u32],
    /// What each site of the program is (one a site of `layout`).
    pub sites: &'a [crate::instrument::SiteInfo],
}

/// What ran between prepare and complete.
#[derive(Debug)]
pub enum Ran<'a> {
    /// The engine's own backend ran the routed job (`Engine::dispatch`).
    Backend(Outcome),
    /// The emulator ran its own dispatch.
    Device(DeviceRun<'a>),
}

/// Why [`Engine::complete`] refused what it was given. Nothing changed.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum CompleteError {
    /// The dispatch given is not the oldest in flight: completed twice, never prepared, or out of
    /// order (dispatches complete in the order they were prepared).
    #[error(
        "dispatch {given} is not the oldest dispatch in flight ({}): completed twice, never prepared, or out of order; dispatches complete in the order they were prepared",
        match prepared { Some(p) => format!("dispatch {p}"), None => "none is in flight".to_owned() }
    )]
    NotPrepared {
        /// The dispatch given.
        given: u64,
        /// The oldest in flight, if any.
        prepared: Option<u64>,
    },
    /// The dispatch was refused; it did not run and has nothing to complete but its report.
    #[error("holder slot {slot} is not a written holder of dispatch {dispatch}")]
    NotAHolder {
        /// The slot.
        slot: u32,
        /// The dispatch.
        dispatch: u64,
    },
    /// The instrumentation buffer could not be decoded.
    #[error("the instrumentation: {0}")]
    Instrumentation(String),
    /// A holder's data or mask is shorter than its buffer.
    #[error(
        "holder slot {slot} spans {bytes} bytes, but {data} bytes of data and {masks} of masks came"
    )]
    HolderSize {
        /// The slot.
        slot: u32,
        /// The holder's widened size.
        bytes: u64,
        /// Data bytes given.
        data: usize,
        /// Mask bytes given.
        masks: usize,
    },
    /// A mark word is set on a table slot that holds no chunk: no lookup of the helper can hit
    /// there, so the marks are not this dispatch's (a stale or foreign buffer).
    #[error(
        "mark word {slot} is {stores}, but table slot {slot} holds no chunk: no store of dispatch {dispatch} can have marked it (C1); the marks given are not this dispatch's"
    )]
    MarkOnEmptySlot {
        /// The table slot.
        slot: usize,
        /// The mark word's value.
        stores: u32,
        /// The dispatch.
        dispatch: u64,
    },
    /// The mark words are not one a table slot.
    #[error("{given} mark words came; the table has {slots} slots")]
    MarkWords {
        /// Words given.
        given: usize,
        /// Table slots.
        slots: usize,
    },
}

impl<B: Backend> Engine<B> {
    /// Every phase before the device: validate, plan (O1–O11), choose the mode (A1, W2), write the
    /// deferred copies (C3), map (M1–M5) and bring the table up (T1–T3, T6); returns what the
    /// emulator binds and pushes. A refused dispatch is prepared too (its refusals say why); it
    /// must not run, and [`Engine::complete`] gives its report. Up to [`super::MAX_IN_FLIGHT`]
    /// dispatches may be prepared and not completed; they complete in the order prepared. Every
    /// holder is a copy ([`Engine::prepare_with`] names holders bound over the guest's pages).
    pub fn prepare(&mut self, input: &DispatchInput) -> Result<Prepared, EngineError> {
        self.prepare_with(input, PrepareOptions::default())
    }

    /// [`Engine::prepare`], with how the emulator binds the dispatch's holders.
    pub fn prepare_with(
        &mut self,
        input: &DispatchInput,
        options: PrepareOptions<'_>,
    ) -> Result<Prepared, EngineError> {
        puffin::profile_function!();
        if let Some(lost) = &self.lost {
            return Err(EngineError::Lost(lost.in_flight.len()));
        }
        if self.flights.len() >= super::MAX_IN_FLIGHT {
            return Err(EngineError::TooManyInFlight {
                oldest: self.flights.oldest().unwrap_or_default(),
            });
        }
        let limits = self.limits.clone();
        let (checked, planned) = replan::plan_phases(&mut self.planner, input, &limits)?;
        let index = self.next_dispatch;
        // Chains: what this dispatch needs from the dispatches in flight, before anything moves
        // (a prepare that waits changes nothing).
        let mut flight = self.flights.entry();
        if planned.mode != Mode::Refused {
            flight.holders.extend(planned.slots.iter().filter_map(|b| {
                let range = b.holder_range()?;
                Some(Held {
                    slot: b.slot,
                    range,
                    written: b.written
                        || planned
                            .slots
                            .iter()
                            .any(|m| m.holder == Some(b.slot) && m.written),
                    in_place: options.in_place.contains(&b.slot),
                })
            }));
        }
        let mappings = &self.mappings;
        let chained = self
            .flights
            .chains(
                index,
                planned.mode,
                &flight.holders,
                |r| mappings.overlapping(r),
                |r| mappings.first_overlap(r),
                &mut flight.carries,
            )
            .and_then(|()| self.deferred_copies_wait(index, planned.mode, &flight.holders));
        if let Err(wait) = chained {
            self.flights.recycle(flight);
            return Err(EngineError::ChainWaits(Box::new(wait)));
        }
        self.host_path = HostPathReport::default();
        // Imports the mappings let go stay while a device-addressed dispatch in flight may reach
        // them.
        self.mappings
            .hold_releases(self.flights.newest_device_addressed());
        let (before, mappings, table) = match planned.mode {
            Mode::Refused => (
                super::left_deferred(self.memory.deferred_copies().len()),
                None,
                None,
            ),
            Mode::DeviceAddressed => {
                let before = self.write_deferred()?;
                let mut mappings = self.map(index)?;
                self.release_guards_over_pieces()?;
                if self.checked && self.memory.host().is_some() {
                    let check =
                        self.mappings
                            .recheck_real(&self.memory, &mut self.backend, index)?;
                    if !check.contradictions.is_empty() {
                        let (made, dropped) = self.mappings.take_import_counts();
                        mappings.imports_made += made;
                        mappings.imports_dropped += dropped;
                        let state = self.mapping_state();
                        mappings.pieces = state.pieces.clone();
                        mappings.left_out = state.left_out.clone();
                    }
                    self.host_path.checked = Some(check);
                }
                let busy: Vec<u64> = self.flights.busy_tables().collect();
                self.backend.table_busy(&busy);
                (before, Some(mappings), Some(self.sync_table(&limits)?))
            }
            Mode::Bound => (self.write_deferred_under(&planned.slots)?, None, None),
        };
        let device = match &table {
            Some(t) => Some(self.device_addressing(t, index)?),
            None => None,
        };
        self.next_dispatch += 1;
        flight.index = index;
        flight.mode = planned.mode;
        flight.program = input.program;
        flight.label.clone_from(&input.label);
        flight.mode_reason.clone_from(&planned.mode_reason);
        flight.slots.clone_from(&planned.slots);
        flight.mapped = planned.mode == Mode::DeviceAddressed;
        flight.table.clone_from(&table);
        flight.table_at = None;
        if let (Some(_), Some(t)) = (&table, self.table.as_mut()) {
            // Its marks name slots as this version has them: later changes keep what they
            // overwrite until it completes.
            t.keep_journal();
            flight.table_at = Some((self.table_serial, t.version()));
        }
        flight.generation = self.memory.generation();
        flight.mappings_version = self.mappings.version();
        flight.pieces = mappings.as_ref().map_or(0, |m| m.pieces.len());
        flight.left_out = mappings.as_ref().map_or(0, |m| m.left_out.len());
        flight.host_path = std::mem::take(&mut self.host_path);
        let carries = flight.carries.clone();
        self.flights.push(flight);
        let bindings = if planned.mode == Mode::Refused {
            Vec::new()
        } else {
            slot_plans(&planned.slots)
        };
        Ok(Prepared {
            index,
            mode: planned.mode,
            mode_reason: planned.mode_reason,
            slots: planned.slots,
            sets: planned.sets,
            refusals: planned.refusals,
            bindings,
            device,
            carries,
            checked,
            limits,
            events_before: std::mem::take(&mut self.pending),
            before,
            mappings,
            table,
        })
    }

    /// The routed job of a prepared dispatch: what the engine's own backend runs.
    pub(super) fn routed<'a>(&self, input: &'a DispatchInput, prepared: &Prepared) -> Routed<'a> {
        route::route(input, &prepared.checked, &prepared.slots, &prepared.limits)
    }

    /// Every phase after the device: the marks (C1), their hand-off (C2), the masked write-back
    /// (O8, O9), L1; returns the dispatch's report. `input` is the input `prepared` was made from.
    pub fn complete(
        &mut self,
        input: &DispatchInput,
        prepared: Prepared,
        ran: Ran<'_>,
    ) -> Result<DispatchReport, EngineError> {
        puffin::profile_function!();
        if self.flights.oldest() != Some(prepared.index) {
            return Err(CompleteError::NotPrepared {
                given: prepared.index,
                prepared: self.flights.oldest(),
            }
            .into());
        }
        let table_at = self.flights.iter().next().and_then(|f| f.table_at);
        let (ran_on, instrumentation) = match &ran {
            Ran::Device(run) => (run.ran_on.map(str::to_owned), run.instrumentation),
            Ran::Backend(_) => (None, None),
        };
        let section = match instrumentation {
            Some(i) => Some(self.decode_instrumentation(&prepared, i)?),
            None => None,
        };
        let ran_report = match prepared.mode {
            Mode::Refused => super::Ran::not_run(input),
            _ => {
                let routed = self.routed(input, &prepared);
                let (outcome, holders) = match ran {
                    Ran::Backend(outcome) => (outcome, Vec::new()),
                    Ran::Device(run) => {
                        let outcome = self.device_outcome(&prepared, &routed, &run, table_at)?;
                        (outcome, run.holders)
                    }
                };
                self.after(input, routed, outcome, &holders, table_at)
            }
        };
        if let Some(f) = self.flights.remove(prepared.index) {
            // What happened to it in flight, before what its complete adds.
            let during = std::mem::replace(&mut self.host_path, f.host_path.clone());
            self.host_path.failures.extend(during.failures);
            self.host_path.failures_not_listed += during.failures_not_listed;
            self.flights.recycle(f);
        }
        self.after_flight()?;
        if prepared.mode == Mode::DeviceAddressed {
            self.in_flight = Some(prepared.index);
        }
        for e in self.memory.take_host_failures() {
            self.host_failure(HostFailureKind::HandOff, e, None, &[]);
        }
        let mut report = DispatchReport {
            schema: SCHEMA.to_owned(),
            index: prepared.index,
            program: input.program,
            label: input.label.clone(),
            kind: input.kind,
            mode: prepared.mode,
            backend: ran_on.unwrap_or_else(|| self.backend.name()),
            device: prepared.limits,
            reasons: input.reasons.clone(),
            mode_reason: prepared.mode_reason,
            slots: prepared.slots,
            sets: prepared.sets,
            refusals: prepared.refusals,
            events_before: prepared.events_before,
            before: prepared.before,
            mappings: prepared.mappings,
            table: prepared.table,
            accesses: ran_report.accesses,
            escapes: ran_report.escapes,
            marks: ran_report.marks,
            hand_off: ran_report.hand_off,
            write_back: ran_report.write_back,
            hazards: ran_report.hazards,
            counts: Default::default(),
            instrumented: section,
            host_path: std::mem::take(&mut self.host_path),
        };
        report.counts = counts_of(&report);
        self.programs.note(&report);
        Ok(report)
    }

    /// The section of an emulator's instrumented pass, from its buffer (before anything of the
    /// dispatch is completed, so a bad buffer leaves it prepared).
    fn decode_instrumentation(
        &self,
        prepared: &Prepared,
        i: DeviceInstrumentation<'_>,
    ) -> Result<crate::report::InstrumentedReport, EngineError> {
        let bad = |e: crate::instrument::InstrumentError| {
            EngineError::from(CompleteError::Instrumentation(e.to_string()))
        };
        let rb = crate::instrument::Readback::read(i.layout, i.grid, i.words).map_err(bad)?;
        crate::instrument::decode(&rb, i.sites, &prepared.slots, &self.mappings, &self.memory)
            .map_err(bad)
    }

    /// Forgets prepared dispatch `index`, which the emulator will not complete (its device
    /// failed, or what it handed to complete was refused and it gives up): the next dispatch may
    /// be prepared. The index stays used.
    pub fn abandon(&mut self, index: u64) -> Result<(), EngineError> {
        let Some(f) = self.flights.remove(index) else {
            return Err(CompleteError::NotPrepared {
                given: index,
                prepared: self.flights.oldest(),
            }
            .into());
        };
        self.backend.forget_marks(index);
        self.flights.recycle(f);
        self.after_flight()
    }

    /// C3 with dispatches in flight: the deferred copies this prepare would write land in guest
    /// memory now, on the CPU; where a dispatch in flight still reads or writes those bytes on
    /// the device, the copy would land under it (or under its later write-back), so the prepare
    /// waits for the newest such dispatch.
    fn deferred_copies_wait(
        &self,
        index: u64,
        mode: Mode,
        holders: &[Held],
    ) -> Result<(), super::ChainWait> {
        if self.flights.is_empty() || mode == Mode::Refused {
            return Ok(());
        }
        let deferred = self.memory.deferred_copies();
        let range =
            |(a, bytes): &(u64, Vec<u8>)| ByteRange::new(*a, a.saturating_add(bytes.len() as u64));
        // The copies this prepare writes: every one for a device-addressed dispatch, those up to
        // the last one a holder covers for a bound one (`write_deferred_under`).
        let landing = match mode {
            Mode::DeviceAddressed => deferred.len(),
            _ => deferred
                .iter()
                .rposition(|c| holders.iter().any(|h| h.range.overlaps(&range(c))))
                .map_or(0, |last| last + 1),
        };
        let mappings = &self.mappings;
        for c in &deferred[..landing] {
            let r = range(c);
            if let Some((f, reached)) = self.flights.reached_by(r, |q| mappings.first_reachable(q))
            {
                return Err(super::ChainWait {
                    dispatch: index,
                    mode: super::in_flight::mode_words(mode),
                    waits_for: f.index,
                    slot: None,
                    reached,
                    why: format!(
                        "a deferred copy (C3) of {r} must land before it, and dispatch {} can still read or write {reached} on the device",
                        f.index
                    ),
                });
            }
        }
        Ok(())
    }

    /// What a dispatch leaving flight lets go: the imports held for it, the table journal's
    /// entries and the retired tables no dispatch in flight reads any more.
    fn after_flight(&mut self) -> Result<(), EngineError> {
        self.mappings
            .release_held(&mut self.backend, self.flights.oldest_device_addressed())?;
        let serial = self.table_serial;
        let oldest = self.flights.oldest_table_version(serial);
        if let Some(t) = self.table.as_mut() {
            t.trim_journal(oldest);
        }
        let flights = &self.flights;
        self.retired_tables.retain(|(s, _)| flights.reads_table(*s));
        Ok(())
    }

    /// Slot `slot` of the table as a dispatch that read build and version `at` saw it (the
    /// current table where `at` is `None`), with that table's chunk shift.
    pub(super) fn slot_seen(
        &self,
        at: Option<(u64, u64)>,
        slot: usize,
    ) -> Option<(crate::chunk_table::TableSlot, u32)> {
        let (table, version) = match at {
            Some((serial, version)) if serial != self.table_serial => (
                self.retired_tables
                    .iter()
                    .find(|(s, _)| *s == serial)
                    .map(|(_, t)| t)?,
                version,
            ),
            Some((_, version)) => (self.table.as_ref()?, version),
            None => {
                let t = self.table.as_ref()?;
                (t, t.version())
            }
        };
        Some((table.slot_as_of(slot, version)?, table.chunk_shift()))
    }

    /// The oldest dispatch in flight (prepared and not completed), the one [`Engine::complete`]
    /// takes next.
    pub fn prepared(&self) -> Option<u64> {
        self.flights.oldest()
    }

    /// How many dispatches are in flight.
    pub fn in_flight(&self) -> usize {
        self.flights.len()
    }

    /// The phases after the device, over an outcome.
    fn after(
        &mut self,
        input: &DispatchInput,
        routed: Routed<'_>,
        mut outcome: Outcome,
        device_holders: &[HolderRun<'_>],
        table_at: Option<(u64, u64)>,
    ) -> super::Ran {
        for f in std::mem::take(&mut outcome.failures) {
            self.host_failure(f.kind, f.error, f.lost, &f.bytes);
        }
        let lookups = super::accesses::trace_lookups(input, &routed.routes, self.table.as_ref());
        let escapes = self.escapes(input, &routed.routes, &outcome, &lookups);
        let marks = after::marks(&outcome, |slot| self.slot_seen(table_at, slot));
        let mut change = MemoryChange::default();
        let mut hand_off = HandOff::default();
        self.hand_off(&marks, &mut change, &mut hand_off);
        let mut write_back = self.write_back(&routed, &outcome, &mut change, &mut hand_off);
        // The emulator's holders, written back from its own bytes where they lie (no copy).
        for h in device_holders {
            let Some(pos) = routed.holder_slots.iter().position(|&s| s == h.slot) else {
                continue;
            };
            let range = routed.job.holders[pos];
            let masks = h.masks;
            let words = range.size_bytes().div_ceil(4) as usize;
            let every_word = masks.get(..4 * words).is_some_and(every_word_set);
            let wb = if every_word {
                self.write_back_whole(
                    h.slot,
                    range,
                    h.data,
                    DEVICE_WORDS_LISTED,
                    &mut change,
                    &mut hand_off,
                )
            } else {
                self.write_back_holder(
                    h.slot,
                    range,
                    h.data,
                    after::Mask::Bytes(masks),
                    DEVICE_WORDS_LISTED,
                    &mut change,
                    &mut hand_off,
                )
            };
            if wb.words_written() > 0 {
                write_back.push(wb);
            }
        }
        hand_off.pages_noted_written = after::merge_ranges(change.noted_written);
        let mut hazards =
            after::detect_l1(input, &routed, &lookups, self.table.as_ref(), &write_back);
        hazards.extend(after::detect_stale_loads(
            input,
            &routed,
            &lookups,
            self.table.as_ref(),
        ));
        let accesses = super::accesses::reports(input, routed.routes, lookups, &mut outcome);
        super::Ran {
            accesses,
            escapes,
            marks,
            hand_off,
            write_back,
            hazards,
        }
    }

    /// The outcome of the emulator's own run, in the backend's words: no accesses (the host never
    /// saw them), the marks, and each holder's data and mask in the job's holder order.
    fn device_outcome(
        &mut self,
        prepared: &Prepared,
        routed: &Routed<'_>,
        run: &DeviceRun<'_>,
        table_at: Option<(u64, u64)>,
    ) -> Result<Outcome, EngineError> {
        let dispatch = prepared.index;
        // The table the dispatch read: a later prepare may have grown the current one.
        let slots = prepared.table.as_ref().map_or(0, |t| t.capacity as usize);
        let marks: Vec<(usize, u32)> = match (run.marks, prepared.mode) {
            (_, Mode::Bound) => Vec::new(),
            (Some(words), _) => {
                if words.len() != slots {
                    return Err(CompleteError::MarkWords {
                        given: words.len(),
                        slots,
                    }
                    .into());
                }
                let mut marks = Vec::new();
                for (i, &w) in words.iter().enumerate() {
                    if w == 0 {
                        continue;
                    }
                    if self
                        .slot_seen(table_at, i)
                        .is_none_or(|(s, _)| s.is_empty())
                    {
                        return Err(CompleteError::MarkOnEmptySlot {
                            slot: i,
                            stores: w,
                            dispatch,
                        }
                        .into());
                    }
                    marks.push((i, w));
                }
                marks
            }
            (None, _) => self.backend.take_marks_of(slots, dispatch)?,
        };
        for h in &run.holders {
            if !routed.holder_slots.contains(&h.slot) {
                return Err(CompleteError::NotAHolder {
                    slot: h.slot,
                    dispatch,
                }
                .into());
            }
        }
        for (slot, range) in routed.holder_slots.iter().zip(&routed.job.holders) {
            let Some(h) = run.holders.iter().find(|h| h.slot == *slot) else {
                continue;
            };
            let bytes = range.size_bytes();
            let words = bytes.div_ceil(4);
            if (h.data.len() as u64) < bytes || (h.masks.len() as u64) < 4 * words {
                return Err(CompleteError::HolderSize {
                    slot: h.slot,
                    bytes,
                    data: h.data.len(),
                    masks: h.masks.len(),
                }
                .into());
            }
        }
        // The holders' bytes stay the emulator's: `after` writes them back where they lie.
        let n = routed.job.holders.len();
        Ok(Outcome {
            failures: Vec::new(),
            accesses: Vec::new(),
            marks,
            holders: vec![Vec::new(); n],
            masks: vec![Vec::new(); n],
        })
    }

    /// T3 and C1 for the emulator's module: the table's words and the mark words' address.
    fn device_addressing(
        &mut self,
        t: &TableReport,
        dispatch: u64,
    ) -> Result<DeviceAddressing, EngineError> {
        // The engine's own run (`Engine::dispatch`) keeps its marks in the backend's job; only a
        // dispatch the emulator runs needs mark words of its own.
        let marks_address = if self.own_run {
            0
        } else {
            self.backend
                .mark_words_for(t.capacity as usize, dispatch)?
                .unwrap_or(0)
        };
        let lo = |v: u64| v as u32;
        let hi = |v: u64| (v >> 32) as u32;
        let chunk_shift = t.chunk_bytes.trailing_zeros();
        let capacity_log2 = t.capacity.max(1).trailing_zeros();
        let mut push_words = vec![
            (push_word::CHUNK_SHIFT, chunk_shift),
            (push_word::CAPACITY_LOG2, capacity_log2),
            (push_word::PROBE_BOUND, t.probe_bound),
            (push_word::MARKS, lo(marks_address)),
            (push_word::MARKS + 1, hi(marks_address)),
            (push_word::MULTIPLIER, lo(t.multiplier)),
            (push_word::MULTIPLIER + 1, hi(t.multiplier)),
            (push_word::TABLE, lo(t.device_address)),
            (push_word::TABLE + 1, hi(t.device_address)),
        ];
        push_words.sort_unstable();
        Ok(DeviceAddressing {
            table_address: t.device_address,
            marks_address,
            mark_words: t.capacity,
            chunk_bytes: t.chunk_bytes,
            push_words,
        })
    }

    /// M2 again in host mode: guards the emulator raised over mapped pages since they were mapped
    /// are released before the device may store through them (`GuestMemory::release_guards_over`).
    fn release_guards_over_pieces(&mut self) -> Result<(), EngineError> {
        if self.memory.host().is_none() {
            return Ok(());
        }
        // Only where a guard was raised since the last dispatch (a mapping or a revisit maps no
        // guarded page: M2 releases them first, M3 leaves them out), over what is mapped there.
        let raised = std::mem::take(&mut self.guards_raised);
        let mut pieces: Vec<ByteRange> = raised
            .iter()
            .flat_map(|r| self.mappings.overlapping(*r))
            .collect();
        pieces.sort_by_key(|p| p.start);
        pieces.dedup();
        for p in pieces {
            match self.memory.release_guards_over(p) {
                Ok(_) => {}
                // The emulator could not unguard these pages: the device must not store through
                // them, so they are left out (what reaches them escapes) and the rest stays mapped.
                Err(crate::memory::MemoryError::Host(h)) => {
                    let start = h.guest.unwrap_or(p.start);
                    let range = ByteRange::new(start, start.saturating_add(h.bytes).min(p.end));
                    let detail = format!(
                        "M2 could not release the write-watch's guards over {range} before the dispatch: {h}"
                    );
                    self.mappings.leave_out(
                        &self.memory,
                        &mut self.backend,
                        range,
                        LeftOutReason::HostCallback,
                        detail,
                    )?;
                }
                Err(e) => return Err(e.into()),
            }
        }

        Ok(())
    }
}

/// Whether every 4-byte mask word is set: blocks of 64 words without an early exit inside a
/// block, which the compiler vectorises (a 1080p mask of 8 MB is scanned at memory speed), and an
/// exit at the first block with an unset word (a sparse mask costs its first block).
fn every_word_set(masks: &[u8]) -> bool {
    if !masks.len().is_multiple_of(4) {
        return false;
    }
    let mut blocks = masks.chunks_exact(256);
    // A block's smallest word is not zero exactly when every word is set (a vector minimum).
    let all = blocks.by_ref().all(|block| {
        block
            .chunks_exact(4)
            .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .fold(u32::MAX, u32::min)
            != 0
    });
    all && blocks
        .remainder()
        .chunks_exact(4)
        .all(|w| w.iter().any(|&b| b != 0))
}

/// How the emulator binds each slot, from the plan (O4–O9).
fn slot_plans(slots: &[SlotBinding]) -> Vec<SlotPlan> {
    slots
        .iter()
        .filter(|b| b.resolved)
        .filter_map(|b| {
            let holder = b.holder?;
            let h = slots.iter().find(|s| s.slot == holder)?;
            let buffer = h.holder_range()?;
            Some(SlotPlan {
                slot: b.slot,
                holder,
                buffer,
                offset_bytes: b.offset,
                range_bytes: b.binding.size_bytes(),
                mask_offset_bytes: b.offset,
                written: b.written,
            })
        })
        .collect()
}
