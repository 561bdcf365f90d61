//! Many dispatches in flight: what the engine keeps of each dispatch an emulator prepared and has
//! not completed (a frame's hundreds of dispatches recorded into command buffers, submitted
//! together, two or three frames in flight), and what follows from it:
//!
//! - **M5 for every one of them.** An event that takes memory from the device (a release, a
//!   decommit, a protection lowered, a guard raised, a backing changed) over bytes any dispatch in
//!   flight can reach waits for the newest such dispatch ([`Flights::reached_by`]): completing it
//!   completes every older one, since completes go in prepare order.
//! - **Chains on the device.** A holder's write-back lands in guest memory only at its complete.
//!   A later dispatch of the same submission that reads those bytes is told where its command
//!   buffer finds them ([`Carry`]): from guest memory on the device where an earlier dispatch
//!   wrote in place (a device-addressed one through its imports, or a holder bound over the
//!   guest's own pages), from the earlier dispatch's holder buffer where it wrote a copy. Where
//!   neither can be right (a dispatch that reads guest memory in place while an earlier one's
//!   copy still holds bytes it writes back later), the prepare waits ([`ChainWait`]).
//! - **What the device reads stays.** Each device-addressed dispatch keeps the table copy and the
//!   mark words it was handed until its complete (`Backend::place_table`'s busy copies,
//!   `Backend::mark_words` by dispatch), and imports the mappings let go are released only once
//!   no device-addressed dispatch that could reach them is in flight (`Mappings::hold_releases`).

use std::collections::{BTreeMap, HashMap, VecDeque};

use thiserror::Error;

use crate::addr::ByteRange;
use crate::report::{HostPathReport, Mode, SlotBinding, TableReport};

/// The most dispatches prepared and not completed at once: sixteen frames of 256 dispatches.
/// One more is [`super::EngineError::TooManyInFlight`].
pub const MAX_IN_FLIGHT: usize = 4096;

/// A copy the emulator records into its command buffer before the dispatch, after a barrier
/// (shader writes → transfer reads) and followed by one (transfer writes → shader reads), so that
/// the dispatch's holder sees what earlier dispatches of the submission wrote. Listed in the order
/// they must be recorded, after the holder's own upload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Carry {
    /// The holder slot of this dispatch whose buffer the copy fills.
    pub slot: u32,
    /// Where in the holder's buffer (bytes from its widened start, `SlotPlan::buffer`).
    pub offset: u64,
    /// How many bytes.
    pub bytes: u64,
    /// Where from.
    pub from: CarryFrom,
}

/// Where a [`Carry`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum CarryFrom {
    /// Guest memory on the device, at guest address `guest`: dispatch `after` (and maybe older
    /// ones) may write these bytes in place, so the holder's upload, made when the command buffer
    /// was recorded, is read again on the device after it.
    Guest {
        /// The guest address of the first byte.
        guest: u64,
        /// The newest dispatch in flight that may write there in place.
        after: u64,
    },
    /// Dispatch `dispatch`'s holder buffer of slot `slot`, from byte `offset`: its stores reach
    /// guest memory only at its complete.
    Holder {
        /// The earlier dispatch.
        dispatch: u64,
        /// Its holder slot.
        slot: u32,
        /// Bytes into its holder's buffer.
        offset: u64,
    },
}

/// A prepare that must wait for an earlier dispatch's complete: it reads (or writes) guest
/// memory in place where that dispatch's holder still holds stores written back only at its
/// complete, or a deferred copy (C3) it must see would land under a dispatch still reading or
/// writing those bytes. Nothing was prepared.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error(
    "dispatch {dispatch} ({mode}) waits for dispatch {waits_for}: {why}; complete dispatch {waits_for} after its fence, then prepare again; nothing was prepared"
)]
pub struct ChainWait {
    /// The dispatch that was being prepared (the index it would have had).
    pub dispatch: u64,
    /// Its mode, in words.
    pub mode: &'static str,
    /// The dispatch it waits for.
    pub waits_for: u64,
    /// That dispatch's holder slot, where a holder is why.
    pub slot: Option<u32>,
    /// The bytes both reach.
    pub reached: ByteRange,
    /// Why, in words.
    pub why: String,
}

/// How a dispatch's holders reach guest memory, as the emulator binds them.
#[derive(Clone, Copy, Debug, Default)]
pub struct PrepareOptions<'a> {
    /// Holder slots bound over the guest's own pages (imported by the emulator): their stores
    /// land in place, nothing of theirs is written back at complete, and a later dispatch reads
    /// them on the device after a barrier. Every other holder is a copy, uploaded and written back.
    pub in_place: &'a [u32],
}

/// One holder of a dispatch in flight.
#[derive(Clone, Copy, Debug)]
pub(super) struct Held {
    pub slot: u32,
    pub range: ByteRange,
    pub written: bool,
    pub in_place: bool,
}

/// What the engine keeps of a dispatch in flight.
#[derive(Clone, Debug, Default)]
pub(super) struct InFlight {
    pub index: u64,
    pub mode: Mode,
    pub program: u64,
    pub label: String,
    pub mode_reason: String,
    pub slots: Vec<SlotBinding>,
    pub holders: Vec<Held>,
    /// Device-addressed: it reaches every mapped piece.
    pub mapped: bool,
    /// The table copy it reads (device-addressed).
    pub table: Option<TableReport>,
    /// Which build of the table (`Engine::table_serial`) and which version of it that copy is:
    /// its marks (C1) name slots as that version had them.
    pub table_at: Option<(u64, u64)>,
    /// The memory's generation and the mappings' version it was prepared against.
    pub generation: u64,
    pub mappings_version: u64,
    pub pieces: usize,
    pub left_out: usize,
    /// The carries it was handed.
    pub carries: Vec<Carry>,
    /// What the emulator's memory did to it between prepare and complete.
    pub host_path: HostPathReport,
}

/// The dispatches in flight, oldest first, and the indexes over them that the hot calls read.
#[derive(Debug, Default)]
pub(super) struct Flights {
    queue: VecDeque<InFlight>,
    /// Table copies read by device-addressed dispatches in flight: device address → how many.
    table_readers: HashMap<u64, usize>,
    /// Every holder of a dispatch in flight by its first byte: (end, dispatch), for M5's lookup
    /// in proportion to the holders near an event, not to the dispatches in flight.
    holders: BTreeMap<u64, Vec<(u64, u64)>>,
    /// The longest holder in flight: a holder reaching an event's bytes starts at most this far
    /// before them.
    longest_holder: u64,
    /// The device-addressed dispatches in flight, oldest first.
    device_addressed: VecDeque<u64>,
    /// The written holders in flight, in prepare order and each dispatch's in slot order: what
    /// `chains` looks at, without a walk over every dispatch in flight. A copy holder among them
    /// is written back at its complete; one in place wrote the guest's pages on the device.
    writers: Vec<(u64, Held)>,
    /// The table versions read in flight: (build, version) → how many dispatches.
    table_versions: BTreeMap<(u64, u64), usize>,
    /// Emptied entries, kept for their allocations.
    spare: Vec<InFlight>,
}

impl Flights {
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    pub fn oldest(&self) -> Option<u64> {
        self.queue.front().map(|f| f.index)
    }

    pub fn iter(&self) -> impl Iterator<Item = &InFlight> {
        self.queue.iter()
    }

    fn get(&self, index: u64) -> Option<&InFlight> {
        self.queue.iter().rev().find(|f| f.index == index)
    }

    pub fn get_mut(&mut self, index: u64) -> Option<&mut InFlight> {
        self.queue.iter_mut().find(|f| f.index == index)
    }

    /// An emptied entry to fill (its vectors keep their allocations).
    pub fn entry(&mut self) -> InFlight {
        self.spare.pop().unwrap_or_default()
    }

    pub fn push(&mut self, f: InFlight) {
        if let Some(t) = &f.table {
            *self.table_readers.entry(t.device_address).or_default() += 1;
        }
        for h in &f.holders {
            self.holders
                .entry(h.range.start)
                .or_default()
                .push((h.range.end, f.index));
            self.longest_holder = self.longest_holder.max(h.range.size_bytes());
        }
        if f.mapped {
            self.device_addressed.push_back(f.index);
        }
        self.writers.extend(
            f.holders
                .iter()
                .filter(|h| h.written)
                .map(|h| (f.index, *h)),
        );
        if let Some(at) = f.table_at {
            *self.table_versions.entry(at).or_default() += 1;
        }
        self.queue.push_back(f);
    }

    /// Takes dispatch `index` out of flight (its complete, or its abandon).
    pub fn remove(&mut self, index: u64) -> Option<InFlight> {
        let at = self.queue.iter().position(|f| f.index == index)?;
        let f = self.queue.remove(at)?;
        for h in &f.holders {
            if let Some(v) = self.holders.get_mut(&h.range.start) {
                v.retain(|&(_, d)| d != f.index);
                if v.is_empty() {
                    self.holders.remove(&h.range.start);
                }
            }
        }
        if self.queue.is_empty() {
            self.longest_holder = 0;
        }
        if f.holders.iter().any(|h| h.written) {
            // Dispatches complete oldest first: their holders lead the list.
            let n = self
                .writers
                .iter()
                .take_while(|(d, _)| *d == f.index)
                .count();
            if n > 0 {
                self.writers.drain(..n);
            } else {
                self.writers.retain(|(d, _)| *d != f.index);
            }
        }
        if let Some(at) = f.table_at
            && let Some(n) = self.table_versions.get_mut(&at)
        {
            *n -= 1;
            if *n == 0 {
                self.table_versions.remove(&at);
            }
        }
        if f.mapped
            && let Some(at) = self.device_addressed.iter().position(|&d| d == f.index)
        {
            self.device_addressed.remove(at);
        }
        if let Some(t) = &f.table
            && let Some(n) = self.table_readers.get_mut(&t.device_address)
        {
            *n -= 1;
            if *n == 0 {
                self.table_readers.remove(&t.device_address);
            }
        }
        Some(f)
    }

    /// Gives an entry's allocations back.
    pub fn recycle(&mut self, mut f: InFlight) {
        f.label.clear();
        f.mode_reason.clear();
        f.slots.clear();
        f.holders.clear();
        f.carries.clear();
        f.table = None;
        f.table_at = None;
        f.host_path = HostPathReport::default();
        if self.spare.len() < 64 {
            self.spare.push(f);
        }
    }

    /// Every table copy a dispatch in flight reads.
    pub fn busy_tables(&self) -> impl Iterator<Item = u64> + '_ {
        self.table_readers.keys().copied()
    }

    /// The newest device-addressed dispatch in flight.
    pub fn newest_device_addressed(&self) -> Option<u64> {
        self.device_addressed.back().copied()
    }

    /// The oldest device-addressed dispatch in flight.
    pub fn oldest_device_addressed(&self) -> Option<u64> {
        self.device_addressed.front().copied()
    }

    /// The oldest table version of build `serial` a dispatch in flight reads.
    pub fn oldest_table_version(&self, serial: u64) -> Option<u64> {
        self.table_versions
            .range((serial, 0)..=(serial, u64::MAX))
            .next()
            .map(|(&(_, v), _)| v)
    }

    /// Whether a dispatch in flight reads a table of build `serial`.
    pub fn reads_table(&self, serial: u64) -> bool {
        self.oldest_table_version(serial).is_some()
    }

    /// M5: the newest dispatch in flight whose holders reach `range`, or, where `mapped_overlap`
    /// finds mapped bytes in it, the newest device-addressed one; with the bytes reached.
    pub fn reached_by(
        &self,
        range: ByteRange,
        mapped_overlap: impl Fn(ByteRange) -> Option<ByteRange>,
    ) -> Option<(&InFlight, ByteRange)> {
        // The newest holder over the bytes: only holders starting at most the longest holder's
        // length before them are looked at.
        let from = range.start.saturating_sub(self.longest_holder);
        let mut holder: Option<(u64, ByteRange)> = None;
        for (&start, v) in self.holders.range(from..range.end) {
            for &(end, d) in v {
                if let Some(r) = ByteRange::new(start, end).intersection(&range)
                    && holder.is_none_or(|(h, _)| d > h)
                {
                    holder = Some((d, r));
                }
            }
        }
        let device = self
            .newest_device_addressed()
            .filter(|d| holder.is_none_or(|(h, _)| *d > h))
            .and_then(|d| mapped_overlap(range).map(|r| (d, r)));
        let (d, r) = device.or(holder)?;
        self.queue
            .iter()
            .rev()
            .find(|f| f.index == d)
            .map(|f| (f, r))
    }

    /// Chains: what a dispatch about to be prepared (`index`, `mode`, its `holders`) needs from
    /// the dispatches in flight, or the one it must wait for. `mapped` gives the mapped bytes of
    /// a range (every mapped piece is what a device-addressed dispatch reaches), `first_mapped`
    /// the first of them. A device-addressed dispatch's cost follows the written copy holders in
    /// flight; a bound one's, the holders in flight near its own.
    pub fn chains(
        &self,
        index: u64,
        mode: Mode,
        holders: &[Held],
        mapped: impl Fn(ByteRange) -> Vec<ByteRange>,
        first_mapped: impl Fn(ByteRange) -> Option<ByteRange>,
        carries: &mut Vec<Carry>,
    ) -> Result<(), ChainWait> {
        carries.clear();
        if self.queue.is_empty() || mode == Mode::Refused {
            return Ok(());
        }
        let wait = |f: &InFlight, h: &Held, reached: ByteRange| ChainWait {
            dispatch: index,
            mode: mode_words(mode),
            waits_for: f.index,
            slot: Some(h.slot),
            reached,
            why: format!(
                "it reaches {reached} in place, which dispatch {}'s holder of slot {} writes back only at its complete: the device would read the bytes before them, and that write-back would land over this dispatch's stores (or bind that holder over the guest's own pages, DS_SLOT_IN_PLACE)",
                f.index, h.slot
            ),
        };
        // The newest copy-holder writer that a dispatch reading guest memory in place reaches.
        let in_place_mine = holders.iter().any(|m| m.in_place);
        if mode == Mode::DeviceAddressed || in_place_mine {
            let reached = |h: &Held| {
                if mode == Mode::DeviceAddressed {
                    first_mapped(h.range)
                } else {
                    None
                }
                .or_else(|| {
                    holders
                        .iter()
                        .filter(|m| m.in_place)
                        .find_map(|m| m.range.intersection(&h.range))
                })
            };
            // The newest dispatch that is reached, then its first holder (in slot order) reached.
            let copies = || self.writers.iter().filter(|(_, h)| !h.in_place);
            if let Some(&(d, _)) = copies().rev().find(|(_, h)| reached(h).is_some())
                && let Some(f) = self.get(d)
                && let Some((h, r)) = copies()
                    .filter(|(x, _)| *x == d)
                    .find_map(|(_, h)| reached(h).map(|r| (h, r)))
            {
                return Err(wait(f, h, r));
            }
        }
        if mode == Mode::DeviceAddressed {
            // Every earlier write is in place (or waited for above): a barrier is enough.
            return Ok(());
        }
        // Guest memory first: where a dispatch in flight writes in place, the holder's upload is
        // read again on the device after it (no copy holder of an older dispatch overlaps such
        // bytes: its prepare would have waited). Then each copy holder's stores, oldest first, so
        // the newest store wins.
        let newest_device = self.newest_device_addressed();
        for mine in holders.iter().filter(|m| !m.in_place) {
            let mut in_place: Vec<(ByteRange, u64)> = Vec::new();
            if let Some(d) = newest_device {
                in_place.extend(mapped(mine.range).into_iter().map(|r| (r, d)));
            }
            for (d, h) in self.writers.iter().filter(|(_, h)| h.in_place) {
                if let Some(r) = mine.range.intersection(&h.range) {
                    in_place.push((r, *d));
                }
            }
            for (r, after) in merge_after(in_place) {
                carries.push(Carry {
                    slot: mine.slot,
                    offset: r.start - mine.range.start,
                    bytes: r.size_bytes(),
                    from: CarryFrom::Guest {
                        guest: r.start,
                        after,
                    },
                });
            }
        }
        for (d, h) in self.writers.iter().filter(|(_, h)| !h.in_place) {
            for mine in holders.iter().filter(|m| !m.in_place) {
                if let Some(r) = mine.range.intersection(&h.range) {
                    carries.push(Carry {
                        slot: mine.slot,
                        offset: r.start - mine.range.start,
                        bytes: r.size_bytes(),
                        from: CarryFrom::Holder {
                            dispatch: *d,
                            slot: h.slot,
                            offset: r.start - h.range.start,
                        },
                    });
                }
            }
        }
        Ok(())
    }
}

/// A mode in the words a wait names it by.
pub(super) fn mode_words(mode: Mode) -> &'static str {
    match mode {
        Mode::DeviceAddressed => "device-addressed: it reaches every mapped piece in place",
        Mode::Bound => "bound",
        Mode::Refused => "refused",
    }
}

/// Ranges with the newest dispatch writing each, merged where they touch (the newest of a merged
/// pair kept): what one guest carry a stretch reads after.
fn merge_after(mut ranges: Vec<(ByteRange, u64)>) -> Vec<(ByteRange, u64)> {
    ranges.sort_by_key(|(r, _)| r.start);
    let mut out: Vec<(ByteRange, u64)> = Vec::with_capacity(ranges.len());
    for (r, d) in ranges {
        match out.last_mut() {
            Some((last, after)) if r.start <= last.end => {
                last.end = last.end.max(r.end);
                *after = (*after).max(d);
            }
            _ => out.push((r, d)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(slot: u32, start: u64, end: u64, written: bool, in_place: bool) -> Held {
        Held {
            slot,
            range: ByteRange::new(start, end),
            written,
            in_place,
        }
    }

    fn flight(index: u64, mode: Mode, holders: Vec<Held>) -> InFlight {
        InFlight {
            index,
            mode,
            mapped: mode == Mode::DeviceAddressed,
            holders,
            ..Default::default()
        }
    }

    #[test]
    fn a_bound_reader_of_a_copy_holder_gets_that_holder_s_bytes() {
        let mut f = Flights::default();
        f.push(flight(
            0,
            Mode::Bound,
            vec![held(0, 0x1000, 0x2000, true, false)],
        ));
        let mut carries = Vec::new();
        f.chains(
            1,
            Mode::Bound,
            &[held(3, 0x1800, 0x2800, false, false)],
            |_| Vec::new(),
            |_| None,
            &mut carries,
        )
        .expect("no wait");
        assert_eq!(
            carries,
            vec![Carry {
                slot: 3,
                offset: 0,
                bytes: 0x800,
                from: CarryFrom::Holder {
                    dispatch: 0,
                    slot: 0,
                    offset: 0x800
                }
            }]
        );
    }

    #[test]
    fn reading_in_place_what_a_copy_holder_writes_back_later_waits() {
        let mut f = Flights::default();
        f.push(flight(
            4,
            Mode::Bound,
            vec![held(0, 0x1000, 0x2000, true, false)],
        ));
        let mut carries = Vec::new();
        let w = f
            .chains(
                5,
                Mode::DeviceAddressed,
                &[],
                |r| vec![r],
                Some,
                &mut carries,
            )
            .expect_err("waits");
        assert_eq!(w.waits_for, 4);
        assert_eq!(w.reached, ByteRange::new(0x1000, 0x2000));
        let w = f
            .chains(
                5,
                Mode::Bound,
                &[held(1, 0x1f00, 0x3000, false, true)],
                |_| Vec::new(),
                |_| None,
                &mut carries,
            )
            .expect_err("waits");
        assert_eq!(w.reached, ByteRange::new(0x1f00, 0x2000));
        // Unmapped and apart: no wait.
        assert!(
            f.chains(
                5,
                Mode::DeviceAddressed,
                &[],
                |_| Vec::new(),
                |_| None,
                &mut carries
            )
            .is_ok()
        );
    }

    #[test]
    fn after_a_device_addressed_dispatch_a_copy_holder_reads_guest_memory_again_then_newer_holders()
    {
        let mut f = Flights::default();
        f.push(flight(0, Mode::DeviceAddressed, Vec::new()));
        f.push(flight(
            1,
            Mode::Bound,
            vec![held(2, 0x1100, 0x1200, true, false)],
        ));
        let mut carries = Vec::new();
        f.chains(
            2,
            Mode::Bound,
            &[held(0, 0x1000, 0x2000, true, false)],
            |r| vec![r],
            Some,
            &mut carries,
        )
        .expect("no wait");
        assert_eq!(carries.len(), 2);
        assert_eq!(
            carries[0].from,
            CarryFrom::Guest {
                guest: 0x1000,
                after: 0
            }
        );
        assert_eq!(carries[0].bytes, 0x1000);
        assert_eq!(carries[1].offset, 0x100);
        assert!(matches!(
            carries[1].from,
            CarryFrom::Holder { dispatch: 1, .. }
        ));
    }

    #[test]
    fn m5_names_the_newest_dispatch_that_reaches() {
        let mut f = Flights::default();
        f.push(flight(0, Mode::DeviceAddressed, Vec::new()));
        f.push(flight(
            1,
            Mode::Bound,
            vec![held(0, 0x1000, 0x2000, false, false)],
        ));
        f.push(flight(
            2,
            Mode::Bound,
            vec![held(0, 0x8000, 0x9000, false, false)],
        ));
        let r = ByteRange::new(0x1800, 0x1900);
        let (d, reached) = f.reached_by(r, |_| None).expect("reached");
        assert_eq!((d.index, reached), (1, r));
        let (d, _) = f
            .reached_by(ByteRange::new(0x5000, 0x6000), Some)
            .expect("mapped");
        assert_eq!(d.index, 0);
        assert!(
            f.reached_by(ByteRange::new(0x5000, 0x6000), |_| None)
                .is_none()
        );
    }
}
