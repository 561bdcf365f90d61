//! After the dispatch: the marks (C1), their hand-off to the command processor (C2), the one
//! masked write-back of each written holder (O8, O9), and the known limit where a write-back lands
//! over a device store to the same bytes (L1).

use super::Engine;
use super::route::Routed;
use crate::addr::ByteRange;
use crate::backend::Backend;
use crate::chunk_table::ChunkTable;
use crate::exec::Outcome;
use crate::input::{DispatchInput, Op};
use crate::memory::MemoryChange;
use crate::report::{
    HandOff, Hazard, HazardKind, HostFailureKind, LookupOutcome, LookupTrace, Mark, Route,
    WordWritten, WriteBack,
};
use crate::rules::Rule;

/// C1: the chunks the dispatch's stores marked, in table-slot order, with their store counts.
pub(super) fn marks(
    outcome: &Outcome,
    slot_seen: impl Fn(usize) -> Option<(crate::chunk_table::TableSlot, u32)>,
) -> Vec<Mark> {
    outcome
        .marks
        .iter()
        .filter_map(|&(slot, stores)| {
            // The slot as the dispatch's table copy had it. `device_outcome` refuses marks on
            // empty slots; the CPU reference marks only hits.
            let (s, shift) = slot_seen(slot).filter(|(s, _)| !s.is_empty())?;
            let start = s.chunk() << shift;
            Some(Mark {
                table_slot: slot,
                guest: ByteRange::new(start, start.saturating_add(1 << shift)),
                stores,
            })
        })
        .collect()
}

impl<B: Backend> Engine<B> {
    /// C2: each marked chunk goes to the command processor as a host write: the write-watch notes
    /// its pages written (D824) and a protected target over it loses its trust (D720).
    pub(super) fn hand_off(
        &mut self,
        marks: &[Mark],
        change: &mut MemoryChange,
        hand_off: &mut HandOff,
    ) {
        for m in marks {
            let before = change.distrusted.len();
            self.memory.note_written(m.guest, change);
            self.memory.hand_off_to_host(m.guest);
            for &id in &change.distrusted[before..] {
                hand_off
                    .targets_distrusted
                    .push(self.target_lost(id, format!("marked chunk {} (C2)", m.guest)));
            }
        }
    }

    /// O8: each written holder is written back once, only the words its write mask marks (O9),
    /// as host writes (they note pages written and distrust targets like any other). The CPU
    /// reference lists every word.
    pub(super) fn write_back(
        &mut self,
        routed: &Routed<'_>,
        outcome: &Outcome,
        change: &mut MemoryChange,
        hand_off: &mut HandOff,
    ) -> Vec<WriteBack> {
        let mut write_back = Vec::new();
        for (h, range) in routed.job.holders.iter().enumerate() {
            let mask = &outcome.masks[h];
            if !mask.iter().any(|&m| m != 0) {
                continue;
            }
            write_back.push(self.write_back_holder(
                routed.holder_slots[h],
                *range,
                &outcome.holders[h],
                Mask::Words(mask),
                usize::MAX,
                change,
                hand_off,
            ));
        }
        write_back
    }

    /// O8 for one holder: every word `mask` marks is written into guest memory from `data` (the
    /// holder's bytes, from its range's start) as a host write, and nothing else: the emulator
    /// receives the runs of written words ([`crate::memory::GuestMemory::write_runs`]), never a
    /// word the mask does not mark, and no guest byte is read to write them back, so a guest
    /// thread's store beside or between the device's words is never rewritten with an older value.
    /// The first `listed` words are reported with their old values (read before the write; `None`
    /// where that read failed, never made up); the rest are counted, and then their runs placed
    /// ([`WriteBack::LISTED_RUNS`] of them, the others counted).
    ///
    /// One pass over the mask finds the runs ([`Mask::runs`]); they go to the emulator in batches
    /// of at most [`RUNS_A_BATCH`], a batch ending where the next run lies a whole page or more
    /// past it, and each batch's pages are noted written once (D824, D720): the pages noted are
    /// exactly those a written word lies on. A run the emulator refused is reported lost with its
    /// bytes (`host_path.failures`).
    #[expect(
        clippy::too_many_arguments,
        reason = "one holder's write-back, its parts named"
    )]
    pub(super) fn write_back_holder(
        &mut self,
        holder: u32,
        range: ByteRange,
        data: &[u8],
        mask: Mask<'_>,
        listed: usize,
        change: &mut MemoryChange,
        hand_off: &mut HandOff,
    ) -> WriteBack {
        let (mut wb, n) = write_back_of(holder, range, data);
        let shift = self.memory.page_bytes().trailing_zeros();
        let page = |w: usize| (range.start + 4 * w as u64) >> shift;
        let mut batch: Vec<(usize, usize)> = Vec::with_capacity(RUNS_A_BATCH);
        mask.runs(0, n, |r, w| {
            let apart = batch
                .last()
                .is_some_and(|&(_, end)| page(r) > page(end - 1) + 1);
            if apart || batch.len() == RUNS_A_BATCH {
                self.write_back_runs(
                    holder, range, data, &batch, listed, &mut wb, change, hand_off,
                );
                batch.clear();
            }
            batch.push((r, w));
        });
        if !batch.is_empty() {
            self.write_back_runs(
                holder, range, data, &batch, listed, &mut wb, change, hand_off,
            );
        }
        if wb.lists_every_word() {
            wb.runs.clear();
            wb.runs_not_listed = 0;
        }
        wb
    }

    /// One batch of a holder's runs of written words (`(first word, end word)`, in address order):
    /// the listed words' old values read, the runs written through the emulator, the pages noted,
    /// the targets over them distrusted, and any run that did not land reported lost.
    #[expect(
        clippy::too_many_arguments,
        reason = "one batch of a holder's write-back, its parts named"
    )]
    fn write_back_runs(
        &mut self,
        holder: u32,
        range: ByteRange,
        data: &[u8],
        batch: &[(usize, usize)],
        listed: usize,
        wb: &mut WriteBack,
        change: &mut MemoryChange,
        hand_off: &mut HandOff,
    ) {
        let at = |w: usize| ((range.start + 4 * w as u64).min(range.end) - range.start) as usize;
        let guest = |w: usize| range.start + at(w) as u64;
        let mut writes: Vec<(u64, &[u8])> = Vec::with_capacity(batch.len());
        for &(r, w) in batch {
            writes.push((guest(r), &data[at(r)..at(w)]));
            let room = listed.saturating_sub(wb.words.len()).min(w - r);
            if room > 0 {
                let (from, to) = (at(r), at(r + room));
                let mut old = vec![0u8; to - from];
                let known = match self.memory.read_bytes(guest(r), &mut old) {
                    Ok(()) => true,
                    Err(e) => {
                        self.host_failure(HostFailureKind::OldValue, e, None, &[]);
                        false
                    }
                };
                for k in r..r + room {
                    let (a, b) = (at(k), at(k + 1));
                    wb.words.push(WordWritten {
                        address: guest(k),
                        old: known.then(|| word(&old[a - from..b - from])),
                        new: word(&data[a..b]),
                        bytes: (b - a) as u8,
                        lost: false,
                    });
                }
            }
            wb.words_not_listed += (w - r - room) as u64;
            if wb.runs.len() < WriteBack::LISTED_RUNS {
                wb.runs.push(ByteRange::new(guest(r), guest(w)));
            } else {
                wb.runs_not_listed += 1;
            }
        }
        let (Some(&(first, _)), Some(&(_, last))) = (batch.first(), batch.last()) else {
            return;
        };
        let before = change.distrusted.len();
        let failed =
            self.memory
                .write_runs(&writes, ByteRange::new(guest(first), guest(last)), change);
        for f in failed {
            for w in wb.words.iter_mut().rev() {
                if w.address < f.guest.start {
                    break;
                }
                w.lost |= w.address < f.guest.end;
            }
            let from = (f.guest.start - range.start) as usize;
            let to = (f.guest.end - range.start) as usize;
            let lost = f.guest;
            self.host_failure(
                HostFailureKind::WriteBack,
                f.error,
                Some(lost),
                &data[from..to],
            );
        }
        for &id in &change.distrusted[before..] {
            hand_off
                .targets_distrusted
                .push(self.target_lost(id, format!("write-back of holder slot {holder} (O8)")));
        }
    }
}

/// Runs of written words a holder's write-back hands the emulator in one call: bounded so that a
/// full-screen holder whose every other word is written (a million runs) needs no list of them all.
pub const RUNS_A_BATCH: usize = 4096;

/// The little-endian word of up to 4 bytes.
fn word(b: &[u8]) -> u64 {
    let mut w = [0u8; 4];
    w[..b.len()].copy_from_slice(b);
    u64::from(u32::from_le_bytes(w))
}

/// A holder's write mask (O9): one entry a data word, non-zero where a store set it; words past
/// its end are not written.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Mask<'a> {
    /// One `u32` a word (the CPU reference's outcome).
    Words(&'a [u32]),
    /// Four bytes a word, as a device leaves its mask buffer.
    Bytes(&'a [u8]),
}

impl Mask<'_> {
    /// The mask's entries over words `first..end` (clamped to the mask), as `u32` values.
    fn each(&self, first: usize, end: usize, mut f: impl FnMut(usize, u32)) {
        match self {
            Mask::Words(m) => {
                let end = end.min(m.len());
                for (i, &x) in m.get(first..end).unwrap_or_default().iter().enumerate() {
                    f(first + i, x);
                }
            }
            Mask::Bytes(m) => {
                let end = end.min(m.len() / 4);
                let bytes = m.get(4 * first..4 * end).unwrap_or_default();
                for (i, c) in bytes.chunks_exact(4).enumerate() {
                    f(first + i, u32::from_ne_bytes([c[0], c[1], c[2], c[3]]));
                }
            }
        }
    }

    /// Calls `f(first, end)` for each maximal run of written words within `first..end`, in order.
    /// The mask is read 64 words at a time: a block wholly written or wholly not, inside a run or
    /// outside one, costs one comparison (a dense or an empty stretch goes at memory speed).
    fn runs(&self, first: usize, end: usize, mut f: impl FnMut(usize, usize)) {
        const BLOCK: usize = 64;
        let open: std::cell::Cell<Option<usize>> = std::cell::Cell::new(None);
        let mut step = |k: usize, x: u32| match (open.get(), x != 0) {
            (None, true) => open.set(Some(k)),
            (Some(r), false) => {
                f(r, k);
                open.set(None);
            }
            _ => {}
        };
        let end = end.min(self.len());
        let mut w = first;
        while w < end {
            let to = (w - w % BLOCK + BLOCK).min(end);
            if to - w == BLOCK {
                let (all, none) = self.block(w, BLOCK);
                if (all && open.get().is_some()) || (none && open.get().is_none()) {
                    w = to;
                    continue;
                }
            }
            self.each(w, to, &mut step);
            w = to;
        }
        let open = open.get();
        if let Some(r) = open {
            f(r, end);
        }
    }

    /// Words the mask covers.
    fn len(&self) -> usize {
        match self {
            Mask::Words(m) => m.len(),
            Mask::Bytes(m) => m.len() / 4,
        }
    }

    /// Whether every word of `w..w + n` is written, and whether none is: a vector minimum and
    /// maximum of the block's mask words, with no branch inside.
    fn block(&self, w: usize, n: usize) -> (bool, bool) {
        let (min, max) = match self {
            Mask::Words(m) => m
                .get(w..w + n)
                .unwrap_or_default()
                .iter()
                .fold((u32::MAX, 0), |(lo, hi), &x| (lo.min(x), hi.max(x))),
            Mask::Bytes(m) => m
                .get(4 * w..4 * (w + n))
                .unwrap_or_default()
                .chunks_exact(4)
                .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
                .fold((u32::MAX, 0), |(lo, hi), x| (lo.min(x), hi.max(x))),
        };
        (min != 0, max == 0)
    }
}

impl<B: Backend> Engine<B> {
    /// O8 for a holder whose every word the dispatch wrote (a full-screen output): one run, its
    /// bytes as they are, the first `listed` words reported with their old values.
    pub(super) fn write_back_whole(
        &mut self,
        holder: u32,
        range: ByteRange,
        data: &[u8],
        listed: usize,
        change: &mut MemoryChange,
        hand_off: &mut HandOff,
    ) -> WriteBack {
        let (mut wb, n) = write_back_of(holder, range, data);
        if n > 0 {
            self.write_back_runs(
                holder,
                range,
                data,
                &[(0, n)],
                listed,
                &mut wb,
                change,
                hand_off,
            );
        }
        if wb.lists_every_word() {
            wb.runs.clear();
            wb.runs_not_listed = 0;
        }
        wb
    }
}

/// An empty write-back of `holder` over `range`, and how many of its words `data` holds.
fn write_back_of(holder: u32, range: ByteRange, data: &[u8]) -> (WriteBack, usize) {
    let total = range.size_bytes().div_ceil(4);
    let n = usize::try_from(total)
        .unwrap_or(usize::MAX)
        .min(data.len().div_ceil(4));
    let wb = WriteBack {
        holder,
        range,
        words_total: total,
        words: Vec::new(),
        words_not_listed: 0,
        runs: Vec::new(),
        runs_not_listed: 0,
    };
    (wb, n)
}

/// The guest bytes each device-addressed store reached, with its access index: the
/// part of the access in each chunk whose lookup hit (T5). A chunk that missed stored nothing (T4).
fn device_stores(
    input: &DispatchInput,
    routes: &[(Route, Rule)],
    lookups: &[Vec<LookupTrace>],
    table: Option<&ChunkTable>,
) -> Vec<(ByteRange, usize)> {
    let Some(chunk_bytes) = table.map(ChunkTable::chunk_bytes) else {
        return Vec::new();
    };
    let shift = chunk_bytes.trailing_zeros();
    let mut out = Vec::new();
    for (i, ((a, (route, _)), lookups)) in
        input.accesses.iter().zip(routes).zip(lookups).enumerate()
    {
        let (Op::Store, Route::Device { address }) = (a.op, route) else {
            continue;
        };
        let whole = ByteRange::new(*address, address.saturating_add(u64::from(a.size_bytes)));
        for l in lookups {
            if !matches!(l.outcome, LookupOutcome::Hit { .. }) {
                continue;
            }
            let start = l.guest_chunk << shift;
            if let Some(landed) =
                ByteRange::new(start, start.saturating_add(chunk_bytes)).intersection(&whole)
            {
                out.push((landed, i));
            }
        }
    }
    out
}

/// L1: a word written back that a device store also reached. The write-back lands last and the
/// device store is lost; each such word is a hazard, named with the two stores. The device stores
/// are gathered only when something is written back: most dispatches write back nothing, or store
/// nothing by device address.
pub(super) fn detect_l1(
    input: &DispatchInput,
    routed: &Routed<'_>,
    lookups: &[Vec<LookupTrace>],
    table: Option<&ChunkTable>,
    write_back: &[WriteBack],
) -> Vec<Hazard> {
    let mut hazards = Vec::new();
    if write_back.is_empty() {
        return hazards;
    }
    let device_stores = device_stores(input, &routed.routes, lookups, table);
    if device_stores.is_empty() {
        return hazards;
    }
    for wb in write_back {
        for w in &wb.words {
            let (address, holder) = (w.address, wb.holder);
            let word = ByteRange::new(address, address + u64::from(w.bytes));
            let Some(&(_, store)) = device_stores.iter().rev().find(|(r, _)| r.overlaps(&word))
            else {
                continue;
            };
            hazards.push(Hazard {
                rule: Rule::L1,
                kind: HazardKind::WriteBackOverDeviceStore,
                ours: false,
                bound_load: None,
                decision: Rule::L1.decision().into(),
                holder,
                address,
                device_store: store,
                bound_store: last_bound_store(input, &routed.routes, holder, wb.range.start, address),
                message: format!(
                    "access {store} stored to {address:#x} by device address, and holder slot {holder} writes the same word back after the dispatch: the write-back lands last and the device store is lost (L1)"
                ),
            });
        }
    }
    hazards
}

/// The read-side twin of L1, our addition: a bound load of a word that an earlier access of the
/// same dispatch stored to by device address reads the holder's upload (O8), made before the
/// dispatch, and never sees the store. One hazard per such load (at its first such word). The words
/// device stores reached are kept in a map, so the pass is linear in the accesses.
pub(super) fn detect_stale_loads(
    input: &DispatchInput,
    routed: &Routed<'_>,
    lookups: &[Vec<LookupTrace>],
    table: Option<&ChunkTable>,
) -> Vec<Hazard> {
    let mut hazards = Vec::new();
    let any_bound_load = input
        .accesses
        .iter()
        .zip(&routed.routes)
        .any(|(a, (r, _))| a.op == Op::Load && matches!(r, Route::Bound { .. }));
    if !any_bound_load {
        return hazards;
    }
    let stores = device_stores(input, &routed.routes, lookups, table);
    if stores.is_empty() {
        return hazards;
    }
    let holder_base: std::collections::HashMap<u32, u64> = routed
        .holder_slots
        .iter()
        .zip(&routed.job.holders)
        .map(|(&slot, r)| (slot, r.start))
        .collect();
    // Word address → the first access that stored to it by device address.
    let mut stored: std::collections::HashMap<u64, usize> = std::collections::HashMap::new();
    let mut next_store = stores.iter().peekable();
    for (i, (a, (route, _))) in input.accesses.iter().zip(&routed.routes).enumerate() {
        while let Some(&&(range, store)) = next_store.peek() {
            if store >= i {
                break;
            }
            let mut word = range.start & !3;
            while word < range.end {
                stored.entry(word).or_insert(store);
                word = word.saturating_add(4);
                if word == 0 {
                    break;
                }
            }
            next_store.next();
        }
        let (Op::Load, Route::Bound { holder, offset }) = (a.op, route) else {
            continue;
        };
        let Some(&base) = holder_base.get(holder) else {
            continue;
        };
        let start = base.saturating_add(*offset);
        let end = start.saturating_add(u64::from(a.size_bytes));
        let mut word = start & !3;
        while word < end {
            if let Some(&store) = stored.get(&word) {
                hazards.push(Hazard {
                    rule: Rule::L1,
                    kind: HazardKind::StaleBoundLoad,
                    ours: true,
                    bound_load: Some(i),
                    decision: Rule::L1.decision().into(),
                    holder: *holder,
                    address: word,
                    device_store: store,
                    bound_store: None,
                    message: format!(
                        "access {i} loaded the word at {word:#x} through holder slot {holder} after access {store} stored to it by device address: the bound load reads the holder's upload from before the dispatch (O8), not the device store (the read-side twin of L1; this hazard is dispatchscope's addition: the records name only the write-back case)"
                    ),
                });
                break;
            }
            word += 4;
        }
    }
    hazards
}

/// The last store through holder `holder` (based at `holder_base`) to the word at `address`.
fn last_bound_store(
    input: &DispatchInput,
    routes: &[(Route, Rule)],
    holder: u32,
    holder_base: u64,
    address: u64,
) -> Option<usize> {
    let word = ByteRange::new(address, address + 4);
    input
        .accesses
        .iter()
        .zip(routes)
        .enumerate()
        .rev()
        .find(|(_, (a, (route, _)))| {
            a.op == Op::Store
                && matches!(*route, Route::Bound { holder: h, offset } if h == holder
                    && ByteRange::new(holder_base + offset, holder_base + offset + u64::from(a.size_bytes))
                        .overlaps(&word))
        })
        .map(|(i, _)| i)
}

/// Sorted, with touching and overlapping ranges merged.
pub(super) fn merge_ranges(mut v: Vec<ByteRange>) -> Vec<ByteRange> {
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
