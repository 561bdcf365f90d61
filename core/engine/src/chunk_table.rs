//! The D964 chunk table (rules T1–T6): the bounded-probe hash table that turns a guest address into a
//! device address, one 16-byte slot per mapped chunk, in the byte layout a device helper (T5) reads.
//! It sizes chunks (T1), builds, grows, updates and shrinks the table (T2), answers lookups on the hot
//! path without allocating, and explains any lookup probe by probe for the debugger.
//! It never touches Vulkan, CUDA or guest memory: it holds numbers (chunk keys and device addresses) and
//! the bytes a backend uploads; placing them in device memory (T6) and marking slots (C1) are the
//! backend's.
//!
//! Ranges are half-open (`start..end`) throughout.
//! A key is a guest chunk number, `guest_addr >> chunk_shift`, in its low [`KEY_CHUNK_BITS`] bits, and
//! in its top 16 the parts of the chunk the slot does not reach ([`TableSlot::excluded`]): a chunk is
//! cut in [`PARTS`] equal parts, and a chunk whose pages lie in two imports, or whose pages are not all
//! mapped (a page the write-watch or the emulator made read-only), has one slot for each import, each
//! excluding the parts it does not reach. A chunk mapped whole has a key equal to its number, as before
//! parts existed. [`EMPTY_KEY`] marks an empty slot and is therefore never a key.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::report::{LookupOutcome, LookupTrace, ProbeStep};

/// Bytes of one [`TableSlot`] in the device's copy of the table: the key, then the address, each a
/// little-endian `u64` (T2: "consecutive 16-byte slots").
pub const SLOT_BYTES: usize = 16;

/// The key of an empty slot. A guest chunk number of `u64::MAX` is refused as a key
/// ([`TableError::ReservedKey`]); no 48-bit guest address reaches it with any chunk size.
pub const EMPTY_KEY: u64 = u64::MAX;

/// T1: the coarsest chunk the table allows, 64 KiB.
pub const MAX_CHUNK_BYTES: u64 = 65536;

/// The bits of a key that hold the guest chunk number; the 16 above them hold the excluded parts.
pub const KEY_CHUNK_BITS: u32 = 48;

/// The chunk number's bits of a key.
pub const KEY_CHUNK_MASK: u64 = (1 << KEY_CHUNK_BITS) - 1;

/// The parts a chunk is cut into, one key bit each ([`TableSlot::excluded`]): a part is
/// `chunk_bytes / 16` bytes (4 KiB, a page, for a 64 KiB chunk).
pub const PARTS: u32 = 16;

/// Every part of a chunk: the reach of a slot that maps it whole.
pub const WHOLE: u16 = u16::MAX;

/// C1's summary of the mark words: one word for every [`MARK_BLOCK_SLOTS`] slots, after the
/// `capacity` mark words, set (to any non-zero value) by a store that marks a slot of its block, so
/// that reading the marks after a dispatch reads the summary and only the blocks it names.
pub const MARK_BLOCK_SLOTS: usize = 256;

/// The words of the mark buffer of a table of `capacity` slots: a mark word a slot, then the
/// summary ([`MARK_BLOCK_SLOTS`]).
pub fn mark_buffer_words(capacity: usize) -> usize {
    capacity + capacity.div_ceil(MARK_BLOCK_SLOTS)
}

/// The part of its chunk a guest address lies in (`0..PARTS`): bits `chunk_shift - 4 ..
/// chunk_shift` of the address. The device helper computes the same from push word 18.
#[inline]
pub fn part_of(guest_addr: u64, chunk_shift: u32) -> u32 {
    ((guest_addr >> (chunk_shift - PARTS.trailing_zeros())) & u64::from(PARTS - 1)) as u32
}

/// The parts of chunk `chunk` (of `1 << chunk_shift` bytes) that `range` covers: bit `i` for part
/// `i`; `range` must start and end on part boundaries within or around the chunk.
pub fn parts_covered(chunk: u64, chunk_shift: u32, start: u64, end: u64) -> u16 {
    let part_shift = chunk_shift - PARTS.trailing_zeros();
    let first = chunk << chunk_shift;
    let last = first + (1u64 << chunk_shift);
    let (s, e) = (start.max(first), end.min(last));
    if s >= e {
        return 0;
    }
    let (a, b) = (
        (s - first) >> part_shift,
        (e - first).div_ceil(1 << part_shift),
    );
    let bits = if b - a >= 16 {
        u64::from(WHOLE)
    } else {
        ((1u64 << (b - a)) - 1) << a
    };
    bits as u16
}

/// The highest load (`len / capacity`) the table keeps; build and insert grow the table past it.
///
/// Chosen as 2/7 because at load `a` linear probing with a random hash needs `(1 + 1/(1 - a)) / 2`
/// probes per hit on average (Knuth), which is 1.2 at `a = 2/7`.
/// One fixed multiplier averages that on realistic keys (runs of consecutive chunks at scattered bases)
/// but single key sets range from 1.07 to 1.35 at load 0.25, so a build chooses its multiplier
/// ([`MULTIPLIERS`]) and keeps one no worse than a random hash: the bench's 262,144 chunks get 1.14
/// (see `benches/README.md`), where the Fibonacci multiplier alone gave 1.21.
/// The capacity is a power of two, so the working load lies between `MAX_LOAD / 2` and `MAX_LOAD`.
pub const MAX_LOAD: f64 = 2.0 / 7.0;

/// The fewest slots a table has.
pub const MIN_CAPACITY: usize = 16;

/// The largest capacity, as a power of two: 2^28 slots, a 4 GiB table. A build or grow that would need
/// more is refused ([`TableError::TooLarge`]).
pub const MAX_CAPACITY_LOG2: u32 = 28;

/// T2 grows the table until every key fits within the probe bound: a build or insert that finds no room
/// doubles the capacity and places the keys again, as many times as it takes, up to the capacity limit
/// (2^[`MAX_CAPACITY_LOG2`] slots, or the smaller limit given to [`ChunkTable::build_within`]). Keys
/// that fit at no capacity up to the limit are refused by name ([`TableError::NoRoom`]), with the sizes.
/// (An earlier build stopped after four extra doublings; T2 names no such cap.)
/// A probe bound for callers with no bound of their own. Our choice (D964 names no number): on realistic
/// keys at the working load the longest probe sequence measured is 4–11, so 16 rarely forces a grow,
/// while a miss still stops at the first empty slot (1.4 probes on average).
pub const DEFAULT_PROBE_BOUND: u32 = 16;

/// The first multiplier a build tries ([`MULTIPLIERS`]): 2^64 divided by the golden ratio, rounded to
/// odd (Fibonacci hashing).
pub const FIBONACCI_MULTIPLIER: u64 = 0x9E37_79B9_7F4A_7C15;

/// The odd multipliers a build chooses the table's hash from, in the order it tries them.
///
/// Any odd multiplier spreads one run of consecutive chunks almost evenly over the table (the
/// three-distance theorem), so a mapping's chunks seldom collide with each other. Collisions between
/// runs depend on where each run's lattice of home slots falls against the others, which one fixed
/// multiplier leaves to chance: over many realistic key sets a fixed multiplier averages what a random
/// hash gives (1.167 probes per hit at load 0.25) but single key sets range from 1.07 to 1.35. A build
/// therefore scores the candidates in order on the keys it has (exactly, without placing them; see
/// [`ChunkTable::build`]) and keeps the first that does no worse than a random hash at the table's
/// load, or the best it tried.
/// Fibonacci's first; then the odd constants of splitmix64, murmur3 and xxHash, chosen for being well
/// mixed, not tuned to any key set.
pub const MULTIPLIERS: [u64; 8] = [
    FIBONACCI_MULTIPLIER,
    0xBF58_476D_1CE4_E5B9,
    0x94D0_49BB_1331_11EB,
    0xFF51_AFD7_ED55_8CCD,
    0xC4CE_B9FE_1A85_EC53,
    0xC2B2_AE3D_27D4_EB4F,
    0x1656_67B1_9E37_79F9,
    0xD6E8_FEB8_6659_FD93,
];

/// One slot of the table, exactly as the device reads it: 16 bytes, key then address.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, bytemuck::Pod, bytemuck::Zeroable,
)]
#[serde(rename_all = "kebab-case")]
pub struct TableSlot {
    /// The key: the guest chunk number (`guest_addr >> chunk_shift`) in the low [`KEY_CHUNK_BITS`]
    /// bits and the parts the slot does not reach in the top 16 (0 for a chunk mapped whole), or
    /// [`EMPTY_KEY`] when the slot is empty.
    pub guest_chunk: u64,
    /// The device address of the chunk's first byte; meaningless when the slot is empty.
    pub device_addr: u64,
}

impl TableSlot {
    /// An empty slot: [`EMPTY_KEY`] and address 0.
    pub const EMPTY: TableSlot = TableSlot {
        guest_chunk: EMPTY_KEY,
        device_addr: 0,
    };

    /// Whether no chunk occupies the slot.
    pub fn is_empty(&self) -> bool {
        self.guest_chunk == EMPTY_KEY
    }

    /// The guest chunk number of the key.
    #[inline]
    pub fn chunk(&self) -> u64 {
        self.guest_chunk & KEY_CHUNK_MASK
    }

    /// The parts of the chunk this slot does not reach: bit `i` for part `i` ([`part_of`]).
    #[inline]
    pub fn excluded(&self) -> u16 {
        (self.guest_chunk >> KEY_CHUNK_BITS) as u16
    }

    /// The parts this slot reaches.
    #[inline]
    pub fn reach(&self) -> u16 {
        !self.excluded()
    }

    /// Whether a lookup of `part` of `chunk` stops here: the chunk is this slot's and the slot
    /// reaches the part. What the device helper compares, bit for bit.
    #[inline]
    pub fn hits(&self, chunk: u64, part: u32) -> bool {
        self.guest_chunk & KEY_CHUNK_MASK == chunk
            && (self.guest_chunk >> (KEY_CHUNK_BITS + part)) & 1 == 0
    }
}

/// The key of a slot of `chunk` that reaches the parts `reach`.
#[inline]
pub fn key_of(chunk: u64, reach: u16) -> u64 {
    chunk | (u64::from(!reach) << KEY_CHUNK_BITS)
}

const _: () = assert!(std::mem::size_of::<TableSlot>() == SLOT_BYTES);

/// T2: the home slot of a key, where its probes start; the same function the device helper (T5) runs.
///
/// Bit for bit, with wrapping 64-bit unsigned arithmetic, `multiplier` being the table's
/// ([`ChunkTable::multiplier`], one of [`MULTIPLIERS`]):
///
/// ```text
/// h    = guest_chunk * multiplier                (mod 2^64)
/// home = capacity_log2 == 0 ? 0 : h >> (64 - capacity_log2)
/// ```
///
/// The table has `1 << capacity_log2` slots, so `home` is the top `capacity_log2` bits of `h`
/// (`capacity_log2` above 64 is treated as 64): multiplicative hashing. Every bit of the key reaches
/// the top bits, and two keys that differ only in bits at or above `64 - capacity_log2` still get
/// different homes (the multiplier is odd). One multiply and one shift: what a lookup costs on the
/// CPU is mostly this, and a SPIR-V or CUDA port needs nothing else.
#[inline]
pub fn home_slot(guest_chunk: u64, multiplier: u64, capacity_log2: u32) -> usize {
    let h = guest_chunk.wrapping_mul(multiplier);
    // A shift by 64 (capacity_log2 == 0) has no result: every key is at slot 0.
    h.checked_shr(64u32.saturating_sub(capacity_log2))
        .unwrap_or(0) as usize
}

/// T1: the chunk size for a set of mappings, each given as `(guest start, guest end)`, end exclusive.
///
/// It is the largest power of two, at most [`MAX_CHUNK_BYTES`], that divides every start and every end,
/// so a chunk never straddles two mappings or a mapping and a hole. No mappings give [`MAX_CHUNK_BYTES`].
pub fn chunk_bytes_for(alignments: impl IntoIterator<Item = (u64, u64)>) -> u64 {
    let all_bits = alignments
        .into_iter()
        .fold(0u64, |acc, (start, end)| acc | start | end);
    let max_shift = MAX_CHUNK_BYTES.trailing_zeros();
    1u64 << all_bits.trailing_zeros().min(max_shift)
}

/// Why a table could not be built or a chunk not inserted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TableError {
    /// T1: the chunk size is not a power of two.
    #[error("chunk size {chunk_bytes:#x} bytes is not a power of two (T1)")]
    ChunkBytesNotPowerOfTwo {
        /// The size asked for.
        chunk_bytes: u64,
    },
    /// T1: the chunk size is over 64 KiB.
    #[error("chunk size {chunk_bytes:#x} bytes is over the T1 limit of {max:#x}", max = MAX_CHUNK_BYTES)]
    ChunkBytesTooLarge {
        /// The size asked for.
        chunk_bytes: u64,
    },
    /// T1: a chunk under 16 bytes cannot be cut in [`PARTS`].
    #[error(
        "chunk size {chunk_bytes:#x} bytes is under 16 bytes, the least a chunk of 16 parts can be (T1)"
    )]
    ChunkBytesTooSmall {
        /// The size asked for.
        chunk_bytes: u64,
    },
    /// A chunk number past the key's [`KEY_CHUNK_BITS`] bits (a guest address past 2^64 at this
    /// chunk size, or a key with part bits given as a chunk).
    #[error("guest chunk {guest_chunk:#x} does not fit the key's {KEY_CHUNK_BITS} bits")]
    ChunkOutOfRange {
        /// The chunk.
        guest_chunk: u64,
    },
    /// T2: one chunk needs more slots (one an import its parts lie in) than the probe bound: they
    /// share a home slot, so no capacity places them all. T1 then takes a finer chunk.
    #[error(
        "guest chunk {guest_chunk:#x} lies in {slots} imports, one slot each, over probe bound {probe_bound} (T2); a finer chunk (T1) lies in fewer"
    )]
    SlotsOverBound {
        /// The chunk.
        guest_chunk: u64,
        /// The slots it needs.
        slots: u32,
        /// The bound.
        probe_bound: u32,
    },
    /// T2: a probe bound of 0 would make every key unreachable.
    #[error("probe bound 0: every key needs at least its home slot (T2)")]
    ZeroProbeBound,
    /// One chunk was given two device addresses.
    #[error(
        "guest chunk {guest_chunk:#x} is given two device addresses, {first_device_addr:#x} and {second_device_addr:#x}"
    )]
    DuplicateKey {
        /// The chunk.
        guest_chunk: u64,
        /// The address it got first.
        first_device_addr: u64,
        /// The address it got second.
        second_device_addr: u64,
    },
    /// The key that marks an empty slot was given as a chunk.
    #[error("guest chunk {guest_chunk:#x} is the empty-slot key and cannot be mapped")]
    ReservedKey {
        /// The chunk ([`EMPTY_KEY`]).
        guest_chunk: u64,
    },
    /// T2: a key found no empty slot within the bound at any capacity up to the table's limit.
    #[error(
        "guest chunk {guest_chunk:#x} finds no empty slot within probe bound {probe_bound} even at capacity {capacity} ({n_entries} chunks), the largest table allowed ({} bytes); T2 grows the table until the keys fit, and these keys fit no table up to that limit",
        (*capacity as u128) * SLOT_BYTES as u128
    )]
    NoRoom {
        /// A chunk that could not be placed.
        guest_chunk: u64,
        /// The bound.
        probe_bound: u32,
        /// The largest capacity tried.
        capacity: usize,
        /// How many chunks were being placed.
        n_entries: usize,
    },
    /// The system gave no memory for the table's slots.
    #[error("no memory for a table of {bytes} bytes: {reason}")]
    Memory {
        /// The table's size.
        bytes: usize,
        /// What the system said.
        reason: String,
    },
    /// The table would need more than 2^[`MAX_CAPACITY_LOG2`] slots.
    #[error(
        "{n_entries} chunks would need a table of 2^{capacity_log2} slots, over the limit of 2^{max}",
        max = MAX_CAPACITY_LOG2
    )]
    TooLarge {
        /// How many chunks were being placed.
        n_entries: usize,
        /// The capacity, as a power of two, that was needed.
        capacity_log2: u32,
    },
    /// [`ChunkTable::from_slots`]: slots that no table could have left (a damaged or foreign image).
    #[error("not a chunk table's slots: {reason}")]
    BadImage {
        /// What was wrong, with the values.
        reason: String,
    },
}

/// What an [`ChunkTable::insert`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "kind",
    rename_all = "kebab-case",
    rename_all_fields = "kebab-case"
)]
pub enum InsertOutcome {
    /// The chunk was new and took an empty slot, `probes` slots from (and counting) its home slot.
    Placed {
        /// The slot it took.
        slot: usize,
        /// Slots read to find it room, the home slot included.
        probes: u32,
    },
    /// The chunk was already mapped; its address was replaced.
    Updated {
        /// Its slot.
        slot: usize,
    },
    /// T2: the chunk found no room within the bound, or placing it would have raised the load past
    /// [`MAX_LOAD`], so the table was rebuilt larger, with the chunk in it.
    Grew {
        /// Slots before.
        from_capacity: usize,
        /// Slots after.
        to_capacity: usize,
    },
}

/// T1–T2: the chunk table. Each mapped guest chunk has one [`TableSlot`]; a chunk is found by reading
/// consecutive slots from its [`home_slot`], wrapping at the capacity, until its key (a hit), an empty
/// slot (a miss) or `probe_bound` slots (a miss that, for a mapped chunk, would be a defect).
///
/// Architecture invariant: every stored key lies within `probe_bound - 1` slots after its home slot, with
/// no empty slot between (build, insert and remove all keep this; `remove` shifts back, never leaves
/// tombstones).
/// Architecture invariant: `len <= MAX_LOAD * capacity`, and the capacity is a power of two, at least
/// [`MIN_CAPACITY`] and at most 2^[`MAX_CAPACITY_LOG2`]; the lookup's unchecked reads rely on it.
#[derive(Clone)]
pub struct ChunkTable {
    chunk_shift: u32,
    /// The most slots, as a power of two, a grow may reach ([`ChunkTable::build_within`]).
    max_capacity_log2: u32,
    capacity_log2: u32,
    probe_bound: u32,
    /// The hash's multiplier ([`home_slot`]), one of [`MULTIPLIERS`].
    multiplier: u64,
    /// Whether grows keep `multiplier` instead of choosing again ([`ChunkTable::build_with_multiplier`]).
    fixed_multiplier: bool,
    slots: SlotMem,
    len: usize,
    rebuilds: u64,
    /// The probe statistics, kept up to date by every change (a change costs the slots it moves
    /// and the cluster around them, never a walk over the table).
    stats: Stats,
    /// The slots changed since [`ChunkTable::clear_changed`]: what a backend uploads again.
    changed: Changed,
    /// Moves with every change of a slot.
    version: u64,
    /// [`ChunkTable::version`] when the changed slots were last cleared.
    changed_since: u64,
    /// While on, what each change overwrote ([`ChunkTable::slot_as_of`]).
    journal: Option<Vec<JournalEntry>>,
}

/// What a change of the table overwrote, with the version it made.
#[derive(Clone, Debug)]
enum JournalEntry {
    /// One slot's value before version `.0`.
    Slot(u64, usize, TableSlot),
    /// Every slot before version `.0` (a grow), with the capacity's log2 then.
    Whole(u64, Vec<TableSlot>),
}

/// The probe statistics of a table, kept as it changes.
#[derive(Clone, Debug, Default)]
struct Stats {
    /// Keys found on the `p`-th slot read, `p` from 1 (index 0 is always 0); length `bound + 1`.
    hits: Vec<u64>,
    /// Over every slot taken as a home slot, the slots a miss reads (until an empty one, counted,
    /// or the bound), summed.
    miss_total: u64,
}

/// The slots changed since a backend last took them.
#[derive(Clone, Debug)]
pub enum Changed {
    /// Every slot (the table was built or grew).
    All,
    /// These slots, in the order they changed, possibly repeated.
    Slots(Vec<usize>),
}

impl Default for Changed {
    fn default() -> Self {
        Changed::Slots(Vec::new())
    }
}

impl Changed {
    fn note(&mut self, slot: usize) {
        if let Changed::Slots(v) = self {
            v.push(slot);
        }
    }
}

impl ChunkTable {
    /// Notes a change of `slot`, which held `old`, for the backend (and the journal).
    fn touched(&mut self, slot: usize, old: TableSlot) {
        self.version += 1;
        self.changed.note(slot);
        if let Some(j) = &mut self.journal {
            j.push(JournalEntry::Slot(self.version, slot, old));
        }
    }

    /// Notes that every slot changed (a grow), the slots before being `old`.
    fn touched_all(&mut self, old: &[TableSlot]) {
        self.version += 1;
        self.changed = Changed::All;
        if let Some(j) = &mut self.journal {
            j.push(JournalEntry::Whole(self.version, old.to_vec()));
        }
    }

    /// Keeps what every later change overwrites, so that a slot can be read as an earlier
    /// version had it ([`ChunkTable::slot_as_of`]): on while a device-addressed dispatch in
    /// flight reads the copy of an earlier version, whose marks (C1) name its slots.
    pub fn keep_journal(&mut self) {
        self.journal.get_or_insert_with(Vec::new);
    }

    /// Forgets what no version from `oldest` on needs; `None` stops the journal.
    pub fn trim_journal(&mut self, oldest: Option<u64>) {
        match oldest {
            None => self.journal = None,
            Some(v) => {
                if let Some(j) = &mut self.journal {
                    j.retain(|e| match e {
                        JournalEntry::Slot(at, ..) | JournalEntry::Whole(at, _) => *at > v,
                    });
                }
            }
        }
    }

    /// Slot `slot` as version `version` had it: the current slot when nothing changed it since,
    /// else what the first change after `version` overwrote. `None` past the capacity then, or
    /// when the journal does not reach back to `version`.
    pub fn slot_as_of(&self, slot: usize, version: u64) -> Option<TableSlot> {
        if version == self.version {
            return self.slots.get(slot).copied();
        }
        let j = self.journal.as_ref()?;
        for e in j {
            match e {
                JournalEntry::Slot(at, s, old) if *at > version && *s == slot => return Some(*old),
                JournalEntry::Whole(at, old) if *at > version => return old.get(slot).copied(),
                _ => {}
            }
        }
        // No change after `version` touched it (and the journal covers `version` only if it was
        // on then: a version before the journal's first entry with no entry is the current slot).
        self.slots.get(slot).copied()
    }
}

impl fmt::Debug for ChunkTable {
    /// A summary: the slots themselves are too many to print.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChunkTable")
            .field("chunk_bytes", &self.chunk_bytes())
            .field("capacity", &self.capacity())
            .field("len", &self.len)
            .field("probe_bound", &self.probe_bound)
            .field("multiplier", &format_args!("{:#x}", self.multiplier))
            .field("rebuilds", &self.rebuilds)
            .finish_non_exhaustive()
    }
}

/// The table's slots: on the heap, or, from [`HUGE_PAGE_BYTES`] up, in an anonymous memory mapping of
/// their own.
///
/// A large table is read at random, one slot per lookup: over 4 KiB pages a 16 MiB table needs more
/// TLB entries than a core has, and the page walks cost a third of a lookup in the bench. The mapping
/// is page-aligned (and, on Linux, 2 MiB-aligned for a mapping this large), so the table asks the
/// kernel for transparent huge pages (`madvise(MADV_HUGEPAGE)`, honoured where THP is `madvise` or
/// `always`); where it is not, the table works the same, only slower. Small tables stay on the heap:
/// a mapping costs two system calls and counts against the process's map limit, and a debugger keeps
/// a table per dispatch that changed it.
enum SlotMem {
    Heap(Vec<TableSlot>),
    Mapped(memmap2::MmapMut),
}

/// Tables this large or larger get a mapping of their own and ask for huge pages (the x86-64 and
/// AArch64 huge page).
const HUGE_PAGE_BYTES: usize = 2 << 20;

impl SlotMem {
    /// `capacity` empty slots.
    fn empty(capacity: usize) -> Result<SlotMem, TableError> {
        let bytes = capacity * SLOT_BYTES;
        if bytes < HUGE_PAGE_BYTES {
            return Ok(SlotMem::Heap(vec![TableSlot::EMPTY; capacity]));
        }
        let mut mem = SlotMem::Mapped(Self::map(bytes)?);
        mem.fill(TableSlot::EMPTY);
        Ok(mem)
    }

    /// An anonymous mapping of `bytes`, with the advice for huge pages.
    fn map(bytes: usize) -> Result<memmap2::MmapMut, TableError> {
        let map = memmap2::MmapMut::map_anon(bytes).map_err(|e| TableError::Memory {
            bytes,
            reason: e.to_string(),
        })?;
        #[cfg(target_os = "linux")]
        {
            // Advice only: a kernel without THP says no, and the table stays on small pages.
            let _ = map.advise(memmap2::Advice::HugePage);
        }
        Ok(map)
    }

    /// The first byte of slot 0, aligned for a [`TableSlot`].
    #[inline]
    fn base(&self) -> *const u8 {
        match self {
            SlotMem::Heap(v) => v.as_ptr().cast(),
            SlotMem::Mapped(m) => m.as_ptr(),
        }
    }
}

impl std::ops::Deref for SlotMem {
    type Target = [TableSlot];
    #[inline]
    fn deref(&self) -> &[TableSlot] {
        match self {
            SlotMem::Heap(v) => v,
            SlotMem::Mapped(m) => bytemuck::cast_slice(m),
        }
    }
}

impl std::ops::DerefMut for SlotMem {
    #[inline]
    fn deref_mut(&mut self) -> &mut [TableSlot] {
        match self {
            SlotMem::Heap(v) => v,
            SlotMem::Mapped(m) => bytemuck::cast_slice_mut(m),
        }
    }
}

impl Clone for SlotMem {
    /// The same slots in new memory. A clone that cannot get memory aborts, as a `Vec`'s does.
    fn clone(&self) -> SlotMem {
        match self {
            SlotMem::Heap(v) => SlotMem::Heap(v.clone()),
            SlotMem::Mapped(m) => {
                let Ok(mut map) = Self::map(m.len()) else {
                    std::alloc::handle_alloc_error(
                        std::alloc::Layout::from_size_align(m.len(), 4096)
                            .unwrap_or(std::alloc::Layout::new::<TableSlot>()),
                    )
                };
                map.copy_from_slice(m);
                SlotMem::Mapped(map)
            }
        }
    }
}

/// Why one placement pass failed.
enum PlaceError {
    /// This key found no empty slot within the bound: try a larger capacity.
    NoRoom(u64),
    /// Bad input: no capacity helps.
    Bad(TableError),
}

/// The most keys a table of `capacity` slots holds at [`MAX_LOAD`].
fn max_len(capacity: usize) -> usize {
    (capacity as f64 * MAX_LOAD) as usize
}

/// Checks, before anything is allocated, that `n_entries` chunks fit a table of at most
/// 2^[`MAX_CAPACITY_LOG2`] slots at [`MAX_LOAD`]: a caller that would list every chunk of its mappings
/// first counts them, so that a mapping of terabytes in small chunks is refused by name, with the sizes,
/// instead of being listed.
pub fn check_entries(n_entries: u64) -> Result<(), TableError> {
    let most = max_len(1usize << MAX_CAPACITY_LOG2) as u64;
    if n_entries > most {
        let n = usize::try_from(n_entries).unwrap_or(usize::MAX);
        return Err(TableError::TooLarge {
            n_entries: n,
            capacity_log2: working_log2(n),
        });
    }
    Ok(())
}

/// The capacity, as a power of two, of a table holding `n_entries` at no more than [`MAX_LOAD`].
fn working_log2(n_entries: usize) -> u32 {
    let mut log2 = MIN_CAPACITY.trailing_zeros();
    while log2 < usize::BITS - 1 && max_len(1usize << log2) < n_entries {
        log2 += 1;
    }
    log2
}

/// The mean probes per hit of linear probing with a random hash at load `load` (Knuth):
/// `(1 + 1 / (1 - load)) / 2`. 1.167 at load 0.25, 1.2 at [`MAX_LOAD`].
pub fn random_hash_probes_per_hit(load: f64) -> f64 {
    (1.0 + 1.0 / (1.0 - load.min(0.999))) / 2.0
}

/// The total displacement (probes per hit minus one, summed over the keys) that linear probing gives
/// `keys` in a table of `1 << capacity_log2` slots with `multiplier`, computed from how many keys each
/// slot is home to, without placing them.
///
/// The total does not depend on the order of insertion: each key that finds slot `i` taken moves on,
/// and the number moving past `i` is `d[i] = max(0, d[i - 1] + homes[i] - 1)` around the ring, whose sum
/// is the total. The load is under 1, so the ring has a slot no key moves past, and a second lap
/// from slot 0 settles within a few slots of it. `homes` is scratch space (reused across candidates),
/// one byte per slot (a count over 255 is taken as 255: a multiplier that bad loses anyway).
/// Duplicate keys count twice; a build drops them when it places the keys, so this is an estimate for them.
fn total_displacement(
    keys: impl Iterator<Item = u64>,
    capacity_log2: u32,
    multiplier: u64,
    homes: &mut Vec<u8>,
) -> u64 {
    let capacity = 1usize << capacity_log2;
    homes.clear();
    homes.resize(capacity, 0);
    for k in keys {
        if let Some(h) = homes.get_mut(home_slot(k, multiplier, capacity_log2)) {
            *h = h.saturating_add(1);
        }
    }
    // First lap from slot 0, as if nothing moved past the last slot. Eight slots at a time where
    // nothing is moving and no slot is home to two keys (most of a table at the working load).
    const NO_TWO: u64 = 0xFEFE_FEFE_FEFE_FEFE;
    let mut total = 0u64;
    let mut d = 0u64;
    let mut words = homes.chunks_exact(8);
    for w in &mut words {
        let word = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
        if d == 0 && word & NO_TWO == 0 {
            continue;
        }
        for &h in w {
            d = (d + u64::from(h)).saturating_sub(1);
            total += d;
        }
    }
    for &h in words.remainder() {
        d = (d + u64::from(h)).saturating_sub(1);
        total += d;
    }
    // Second lap: what really moves past the last slot enters slot 0; correct the first lap's values
    // until the two agree (from there on they are the same).
    let mut lap1 = 0u64;
    let mut lap2 = d;
    for &h in homes.iter() {
        if lap2 == 0 || lap1 == lap2 {
            break;
        }
        lap1 = (lap1 + u64::from(h)).saturating_sub(1);
        lap2 = (lap2 + u64::from(h)).saturating_sub(1);
        total += lap2 - lap1;
    }
    total
}

/// Chooses the multiplier for `n_entries` keys at `capacity_log2`: the first of [`MULTIPLIERS`] whose
/// probes per hit are no worse than a random hash's at this load, or the best of them.
fn choose_multiplier<I>(
    entries: &impl Fn() -> I,
    n_entries: usize,
    capacity_log2: u32,
    homes: &mut Vec<u8>,
) -> u64
where
    I: Iterator<Item = (u64, u64)>,
{
    if n_entries < 2 {
        return FIBONACCI_MULTIPLIER;
    }
    let load = n_entries as f64 / (1usize << capacity_log2) as f64;
    let good_enough = (random_hash_probes_per_hit(load) - 1.0) * n_entries as f64;
    let mut best = (u64::MAX, FIBONACCI_MULTIPLIER);
    for m in MULTIPLIERS {
        let total = total_displacement(
            entries().map(|(k, _)| k & KEY_CHUNK_MASK),
            capacity_log2,
            m,
            homes,
        );
        if total < best.0 {
            best = (total, m);
        }
        if total as f64 <= good_enough {
            break;
        }
    }
    best.1
}

/// One placement pass at a fixed capacity and multiplier.
fn try_place(
    entries: impl Iterator<Item = (u64, u64)>,
    capacity_log2: u32,
    multiplier: u64,
    probe_bound: u32,
) -> Result<(SlotMem, usize), PlaceError> {
    let capacity = 1usize << capacity_log2;
    let mask = capacity - 1;
    let bound = probe_bound.min(u32::try_from(capacity).unwrap_or(u32::MAX));
    let mut slots = SlotMem::empty(capacity).map_err(PlaceError::Bad)?;
    let mut len = 0usize;
    'entries: for (key, device_addr) in entries {
        if key == EMPTY_KEY {
            return Err(PlaceError::Bad(TableError::ReservedKey {
                guest_chunk: key,
            }));
        }
        let chunk = key & KEY_CHUNK_MASK;
        let reach = !((key >> KEY_CHUNK_BITS) as u16);
        let mut slot = home_slot(chunk, multiplier, capacity_log2);
        let mut same = 0u32;
        for _ in 0..bound {
            let Some(s) = slots.get_mut(slot) else { break };
            if s.guest_chunk == EMPTY_KEY {
                *s = TableSlot {
                    guest_chunk: key,
                    device_addr,
                };
                len += 1;
                continue 'entries;
            }
            if s.chunk() == chunk {
                if s.device_addr == device_addr {
                    // The same import's parts again: one slot reaches them all.
                    s.guest_chunk = key_of(chunk, s.reach() | reach);
                    continue 'entries;
                }
                if s.reach() & reach != 0 {
                    return Err(PlaceError::Bad(TableError::DuplicateKey {
                        guest_chunk: chunk,
                        first_device_addr: s.device_addr,
                        second_device_addr: device_addr,
                    }));
                }
                same += 1;
            }
            slot = (slot + 1) & mask;
        }
        // The slots of one chunk share its home: when they alone fill the bound, no capacity helps.
        if same + 1 > probe_bound {
            return Err(PlaceError::Bad(TableError::SlotsOverBound {
                guest_chunk: chunk,
                slots: same + 1,
                probe_bound,
            }));
        }
        return Err(PlaceError::NoRoom(chunk));
    }
    Ok((slots, len))
}

/// What [`place_growing`] built.
struct Placed {
    slots: SlotMem,
    capacity_log2: u32,
    multiplier: u64,
    len: usize,
}

/// Placement passes from `start_log2`, doubling until every key fits within the bound (T2). At each
/// capacity the multiplier is `fixed`, or chosen by [`choose_multiplier`].
fn place_growing<I>(
    entries: impl Fn() -> I,
    n_entries: usize,
    start_log2: u32,
    max_log2: u32,
    probe_bound: u32,
    fixed: Option<u64>,
    rebuilds: &mut u64,
) -> Result<Placed, TableError>
where
    I: Iterator<Item = (u64, u64)>,
{
    let last_log2 = max_log2.min(MAX_CAPACITY_LOG2);
    let mut log2 = start_log2;
    let mut homes = Vec::new();
    loop {
        if log2 > last_log2 {
            return Err(TableError::TooLarge {
                n_entries,
                capacity_log2: log2,
            });
        }
        *rebuilds += 1;
        let multiplier =
            fixed.unwrap_or_else(|| choose_multiplier(&entries, n_entries, log2, &mut homes));
        match try_place(entries(), log2, multiplier, probe_bound) {
            Ok((slots, len)) => {
                return Ok(Placed {
                    slots,
                    capacity_log2: log2,
                    multiplier,
                    len,
                });
            }
            Err(PlaceError::Bad(e)) => return Err(e),
            Err(PlaceError::NoRoom(guest_chunk)) if log2 >= last_log2 => {
                return Err(TableError::NoRoom {
                    guest_chunk,
                    probe_bound,
                    capacity: 1usize << log2,
                    n_entries,
                });
            }
            Err(PlaceError::NoRoom(_)) => log2 += 1,
        }
    }
}

/// T1: the shift of a chunk size, or why the size is refused.
fn chunk_shift_of(chunk_bytes: u64) -> Result<u32, TableError> {
    if !chunk_bytes.is_power_of_two() {
        return Err(TableError::ChunkBytesNotPowerOfTwo { chunk_bytes });
    }
    if chunk_bytes > MAX_CHUNK_BYTES {
        return Err(TableError::ChunkBytesTooLarge { chunk_bytes });
    }
    if chunk_bytes < u64::from(PARTS) {
        return Err(TableError::ChunkBytesTooSmall { chunk_bytes });
    }
    Ok(chunk_bytes.trailing_zeros())
}

impl ChunkTable {
    /// T1–T2: builds a table of `entries`, each `(guest_chunk, device_addr)`, at the working load, with
    /// chunks of `chunk_bytes` and at most `probe_bound` probes per key.
    ///
    /// The hash's multiplier is chosen for these keys: [`MULTIPLIERS`] in order, each scored exactly
    /// (the probes per hit linear probing will give, from how many keys each slot is home to; about a
    /// millisecond for 262,144 keys), and the first no worse than a random hash at the table's load is
    /// kept, or the best. Then the keys are placed. If a key finds no empty slot within the bound, the
    /// capacity doubles and the build starts again, so no mapped chunk is left unreachable. A chunk listed
    /// twice with the same address is kept once.
    ///
    /// # Errors
    /// A chunk size that is not a power of two or is over 64 KiB, a bound of 0, a chunk with two
    /// addresses, the key [`EMPTY_KEY`], keys that fit the bound at no capacity up to the limits, or no
    /// memory for the slots.
    pub fn build(
        chunk_bytes: u64,
        probe_bound: u32,
        entries: &[(u64, u64)],
    ) -> Result<ChunkTable, TableError> {
        Self::build_inner(chunk_bytes, probe_bound, entries, None, MAX_CAPACITY_LOG2)
    }

    /// [`ChunkTable::build`] with a capacity limit of at most 2^`max_capacity_log2` slots (and never
    /// above 2^[`MAX_CAPACITY_LOG2`]), kept through every grow: a device with less room for the table
    /// states its own limit.
    ///
    /// # Errors
    /// As [`ChunkTable::build`], with this limit.
    pub fn build_within(
        chunk_bytes: u64,
        probe_bound: u32,
        entries: &[(u64, u64)],
        max_capacity_log2: u32,
    ) -> Result<ChunkTable, TableError> {
        Self::build_inner(chunk_bytes, probe_bound, entries, None, max_capacity_log2)
    }

    /// [`ChunkTable::build`] with a multiplier of the caller's (odd, or it is made odd), kept through
    /// every grow: for tests and tools that need known home slots.
    ///
    /// # Errors
    /// As [`ChunkTable::build`].
    pub fn build_with_multiplier(
        chunk_bytes: u64,
        probe_bound: u32,
        entries: &[(u64, u64)],
        multiplier: u64,
    ) -> Result<ChunkTable, TableError> {
        Self::build_inner(
            chunk_bytes,
            probe_bound,
            entries,
            Some(multiplier | 1),
            MAX_CAPACITY_LOG2,
        )
    }

    fn build_inner(
        chunk_bytes: u64,
        probe_bound: u32,
        entries: &[(u64, u64)],
        fixed: Option<u64>,
        max_capacity_log2: u32,
    ) -> Result<ChunkTable, TableError> {
        let chunk_shift = chunk_shift_of(chunk_bytes)?;
        if probe_bound == 0 {
            return Err(TableError::ZeroProbeBound);
        }
        let mut rebuilds = 0;
        let placed = place_growing(
            || entries.iter().copied(),
            entries.len(),
            working_log2(entries.len()),
            max_capacity_log2,
            probe_bound,
            fixed,
            &mut rebuilds,
        )?;
        let mut t = ChunkTable {
            chunk_shift,
            max_capacity_log2: max_capacity_log2.min(MAX_CAPACITY_LOG2),
            capacity_log2: placed.capacity_log2,
            probe_bound,
            multiplier: placed.multiplier,
            fixed_multiplier: fixed.is_some(),
            slots: placed.slots,
            len: placed.len,
            rebuilds,
            stats: Stats::default(),
            changed: Changed::All,
            version: 1,
            changed_since: 0,
            journal: None,
        };
        t.recount();
        Ok(t)
    }

    /// T2: maps one chunk whole, or moves an already mapped chunk to a new address.
    ///
    /// A new chunk takes the first empty slot within the bound. When there is none, or when one more
    /// chunk would raise the load past [`MAX_LOAD`], the table is rebuilt at twice the capacity (or more,
    /// until every key fits) with the chunk in it.
    ///
    /// # Errors
    /// The key [`EMPTY_KEY`], a chunk past [`KEY_CHUNK_BITS`], or a grow that cannot fit every key
    /// (see [`ChunkTable::build`]); the table is unchanged then.
    pub fn insert(
        &mut self,
        guest_chunk: u64,
        device_addr: u64,
    ) -> Result<InsertOutcome, TableError> {
        if guest_chunk == EMPTY_KEY {
            return Err(TableError::ReservedKey { guest_chunk });
        }
        if guest_chunk > KEY_CHUNK_MASK {
            return Err(TableError::ChunkOutOfRange { guest_chunk });
        }
        // A chunk mapped whole has one slot: its address is replaced.
        if let Some((slot, old)) = self.find_slot(|s| s.guest_chunk == guest_chunk, guest_chunk) {
            if let Some(s) = self.slots.get_mut(slot) {
                s.device_addr = device_addr;
            }
            self.touched(slot, old);
            return Ok(InsertOutcome::Updated { slot });
        }
        self.place(guest_chunk, device_addr)
    }

    /// T1–T2 by parts: `chunk`'s parts `reach` become reachable at `device_addr` (the device
    /// address the chunk's first byte has in the import that holds them). The slot of the chunk
    /// with that address reaches them too if there is one (its key changes, nothing moves);
    /// otherwise a new slot is placed as [`ChunkTable::insert`] places one.
    ///
    /// # Errors
    /// As [`ChunkTable::insert`], and [`TableError::DuplicateKey`] when another slot of the chunk
    /// already reaches one of the parts.
    pub fn insert_parts(
        &mut self,
        chunk: u64,
        device_addr: u64,
        reach: u16,
    ) -> Result<InsertOutcome, TableError> {
        if chunk > KEY_CHUNK_MASK || key_of(chunk, reach) == EMPTY_KEY {
            return Err(TableError::ChunkOutOfRange { guest_chunk: chunk });
        }
        let mut clash = None;
        let same = self.find_slot(
            |s| {
                if s.chunk() != chunk {
                    return false;
                }
                if s.device_addr != device_addr && s.reach() & reach != 0 {
                    clash = Some(s.device_addr);
                }
                s.device_addr == device_addr
            },
            chunk,
        );
        if let Some(first_device_addr) = clash {
            return Err(TableError::DuplicateKey {
                guest_chunk: chunk,
                first_device_addr,
                second_device_addr: device_addr,
            });
        }
        if let Some((slot, s)) = same {
            if let Some(at) = self.slots.get_mut(slot) {
                at.guest_chunk = key_of(chunk, s.reach() | reach);
            }
            self.touched(slot, s);
            return Ok(InsertOutcome::Updated { slot });
        }
        self.place(key_of(chunk, reach), device_addr)
    }

    /// T2 by parts: `chunk`'s parts `parts` are no longer reachable at `device_addr`. The slot
    /// keeps the parts it still reaches, or is removed when none is left. Returns whether a slot
    /// changed.
    pub fn remove_parts(&mut self, chunk: u64, device_addr: u64, parts: u16) -> bool {
        let Some((slot, s)) = self.find_slot(
            |s| s.chunk() == chunk && s.device_addr == device_addr,
            chunk,
        ) else {
            return false;
        };
        let reach = s.reach() & !parts;
        if reach == s.reach() {
            return false;
        }
        if reach == 0 {
            self.remove_at(slot);
        } else {
            if let Some(at) = self.slots.get_mut(slot) {
                at.guest_chunk = key_of(chunk, reach);
            }
            self.touched(slot, s);
        }
        true
    }

    /// The first slot, in `chunk`'s probe order within the bound, that `pick` chooses.
    fn find_slot(
        &self,
        mut pick: impl FnMut(&TableSlot) -> bool,
        chunk: u64,
    ) -> Option<(usize, TableSlot)> {
        let mask = self.slots.len() - 1;
        let mut slot = self.home_slot(chunk & KEY_CHUNK_MASK);
        for _ in 0..self.bound() {
            let s = *self.slots.get(slot)?;
            if s.is_empty() {
                return None;
            }
            if pick(&s) {
                return Some((slot, s));
            }
            slot = (slot + 1) & mask;
        }
        None
    }

    /// Places a key no slot holds: the first empty slot within the bound, or a grow.
    fn place(&mut self, key: u64, device_addr: u64) -> Result<InsertOutcome, TableError> {
        let mask = self.slots.len() - 1;
        let mut slot = self.home_slot(key & KEY_CHUNK_MASK);
        let mut free = None;
        for probe in 1..=self.bound() {
            let Some(s) = self.slots.get(slot) else {
                break;
            };
            if s.is_empty() {
                free = Some((slot, probe));
                break;
            }
            slot = (slot + 1) & mask;
        }
        if let Some((slot, probes)) = free
            && self.len < max_len(self.slots.len())
            && let Some(s) = self.slots.get_mut(slot)
        {
            *s = TableSlot {
                guest_chunk: key,
                device_addr,
            };
            self.len += 1;
            self.count_hit(probes as usize, 1);
            self.count_filled(slot, true);
            self.touched(slot, TableSlot::EMPTY);
            return Ok(InsertOutcome::Placed { slot, probes });
        }
        self.grow_with(key, device_addr)
    }

    /// T2: rebuilds at least twice as large, with one more chunk.
    fn grow_with(
        &mut self,
        guest_chunk: u64,
        device_addr: u64,
    ) -> Result<InsertOutcome, TableError> {
        let from_capacity = self.slots.len();
        let n_entries = self.len + 1;
        let start_log2 = (self.capacity_log2 + 1).max(working_log2(n_entries));
        let old = &self.slots;
        let mut rebuilds = self.rebuilds;
        let placed = place_growing(
            || {
                old.iter()
                    .filter(|s| !s.is_empty())
                    .map(|s| (s.guest_chunk, s.device_addr))
                    .chain(std::iter::once((guest_chunk, device_addr)))
            },
            n_entries,
            start_log2,
            self.max_capacity_log2,
            self.probe_bound,
            self.fixed_multiplier.then_some(self.multiplier),
            &mut rebuilds,
        )?;
        let old = std::mem::replace(&mut self.slots, placed.slots);
        self.capacity_log2 = placed.capacity_log2;
        self.multiplier = placed.multiplier;
        self.len = placed.len;
        self.rebuilds = rebuilds;
        self.touched_all(&old);
        self.recount();
        Ok(InsertOutcome::Grew {
            from_capacity,
            to_capacity: self.slots.len(),
        })
    }

    /// T2: unmaps one chunk; returns whether it was mapped.
    ///
    /// Backward-shift deletion, no tombstones: after emptying the chunk's slot, each following key up to
    /// the next empty slot whose home lies at or before the hole moves back into it, and the hole moves
    /// on. A key only ever moves toward its home slot, so no probe sequence grows and every remaining key
    /// stays within the bound, with no empty slot between it and its home.
    pub fn remove(&mut self, guest_chunk: u64) -> bool {
        let Some((hole, _)) = self.find_slot(|s| s.chunk() == guest_chunk, guest_chunk) else {
            return false;
        };
        self.remove_at(hole);
        true
    }

    /// Empties slot `hole` by backward shift (see [`ChunkTable::remove`]), keeping the statistics
    /// and the changed slots.
    fn remove_at(&mut self, mut hole: usize) {
        let mask = self.slots.len() - 1;
        if let Some(&gone) = self.slots.get(hole) {
            self.count_hit(self.probes_at(hole, gone.chunk()), -1);
        }
        let mut next = hole;
        // The load is under 1, so an empty slot ends the scan before it wraps to the hole.
        for _ in 1..self.slots.len() {
            next = (next + 1) & mask;
            let Some(&moved) = self.slots.get(next) else {
                break;
            };
            if moved.is_empty() {
                break;
            }
            let home = self.home_slot(moved.chunk());
            // The hole lies cyclically in [home, next): moving the key there keeps it at or after home.
            if hole.wrapping_sub(home) & mask < next.wrapping_sub(home) & mask {
                self.count_hit(self.probes_at(next, moved.chunk()), -1);
                self.count_hit(self.probes_at(hole, moved.chunk()), 1);
                let old = self.slots.get(hole).copied().unwrap_or(TableSlot::EMPTY);
                if let Some(h) = self.slots.get_mut(hole) {
                    *h = moved;
                }
                self.touched(hole, old);
                hole = next;
            }
        }
        let old = self.slots.get(hole).copied().unwrap_or(TableSlot::EMPTY);
        if let Some(h) = self.slots.get_mut(hole) {
            *h = TableSlot::EMPTY;
        }
        self.touched(hole, old);
        self.count_filled(hole, false);
        self.len -= 1;
    }

    /// The number of probes a lookup may make: the bound, or the capacity if that is smaller.
    #[inline]
    fn bound(&self) -> u32 {
        self.probe_bound
            .min(u32::try_from(self.slots.len()).unwrap_or(u32::MAX))
    }

    /// The hot path: the slot and address of a chunk, or `None`.
    ///
    /// Over byte offsets into the slots: the home is taken straight as a byte offset (the top
    /// `capacity_log2` bits of the product, times 16, in one shift and one mask), and slots are read
    /// without bounds checks, which the offsets' construction makes unnecessary. The first probe, where
    /// most keys are, is peeled from the loop so that it costs no probe counter. Each of these measured
    /// 4–10 % of a lookup. Reading the first two slots and choosing between them without a branch
    /// measured 30–80 % slower, though a hit on a later slot mispredicts here.
    ///
    /// A slot hits when its chunk is `guest_chunk` and it reaches `part` ([`TableSlot::hits`]): a
    /// chunk mapped whole has a key equal to its number, so the common case is one compare of the
    /// key's chunk bits and a bit test that passes.
    #[inline]
    fn find(&self, guest_chunk: u64, part: u32) -> Option<(usize, u64)> {
        // A chunk past the key's bits is never mapped (and the empty key's chunk bits are all ones,
        // its parts all excluded, so it never hits).
        if guest_chunk > KEY_CHUNK_MASK {
            return None;
        }
        let byte_mask = (SLOT_BYTES << self.capacity_log2) - SLOT_BYTES;
        let mut at = self.home_byte(guest_chunk);
        let s = self.slot_at(at);
        if s.hits(guest_chunk, part) {
            return Some((at / SLOT_BYTES, s.device_addr));
        }
        if s.guest_chunk == EMPTY_KEY {
            return None;
        }
        for _ in 1..self.probe_bound {
            at = (at + SLOT_BYTES) & byte_mask;
            let s = self.slot_at(at);
            if s.hits(guest_chunk, part) {
                return Some((at / SLOT_BYTES, s.device_addr));
            }
            if s.guest_chunk == EMPTY_KEY {
                return None;
            }
        }
        None
    }

    /// The slot at byte offset `at`, which must be a multiple of [`SLOT_BYTES`] below
    /// `SLOT_BYTES << capacity_log2`: [`ChunkTable::home_byte`]'s result, or one masked by
    /// `capacity * SLOT_BYTES - SLOT_BYTES`.
    #[inline(always)]
    #[allow(
        unsafe_code,
        reason = "the lookup's one unchecked read per probe, of an offset masked into the mapping (see SAFETY)"
    )]
    fn slot_at(&self, at: usize) -> &TableSlot {
        debug_assert!(
            at.is_multiple_of(SLOT_BYTES) && at + SLOT_BYTES <= self.slots.len() * SLOT_BYTES
        );
        // SAFETY: the slots are `SLOT_BYTES << capacity_log2` bytes of initialised `TableSlot`s (plain
        // old data: two u64s) from a base aligned for them (a Vec's, or a page-aligned mapping's).
        // Both callers' offsets are multiples of SLOT_BYTES below that length (see above), so this
        // reads one whole, aligned slot inside them, which nothing writes while `&self` lives.
        unsafe { &*self.slots.base().add(at).cast::<TableSlot>() }
    }

    /// [`home_slot`] for this table, times [`SLOT_BYTES`]: the byte offset of the home slot. Without
    /// `home_slot`'s case for a capacity of one slot (never below [`MIN_CAPACITY`] here).
    #[inline]
    fn home_byte(&self, guest_chunk: u64) -> usize {
        const SLOT_SHIFT: u32 = SLOT_BYTES.trailing_zeros();
        let h = guest_chunk.wrapping_mul(self.multiplier);
        ((h >> (64 - SLOT_SHIFT - self.capacity_log2)) as usize) & !(SLOT_BYTES - 1)
    }

    /// T2: the home slot of a key in this table: [`home_slot`] with the table's multiplier and capacity.
    #[inline]
    pub fn home_slot(&self, guest_chunk: u64) -> usize {
        home_slot(guest_chunk, self.multiplier, self.capacity_log2)
    }

    /// The hash's multiplier ([`home_slot`]), chosen by the build from [`MULTIPLIERS`]; the device
    /// helper reads it from the push block with the capacity.
    pub fn multiplier(&self) -> u64 {
        self.multiplier
    }

    /// T2: the device address of a chunk's first byte, or `None` when the chunk is not mapped. Reads at
    /// most `probe_bound` slots, stops at the first empty one, and never allocates. For a chunk
    /// mapped by parts this is the slot reaching part 0; [`ChunkTable::lookup_part`] asks for a part.
    #[inline]
    pub fn lookup(&self, guest_chunk: u64) -> Option<u64> {
        self.lookup_part(guest_chunk, 0)
    }

    /// T2 by parts: the device address of the chunk's first byte in the import that holds `part`
    /// of it, or `None` when that part is not mapped.
    #[inline]
    pub fn lookup_part(&self, guest_chunk: u64, part: u32) -> Option<u64> {
        self.find(guest_chunk, part)
            .map(|(_, device_addr)| device_addr)
    }

    /// The slot of a mapped chunk, the index C1's marks use, or `None` when the chunk is not mapped
    /// (part 0 of it; [`ChunkTable::slot_of`] for an address).
    #[inline]
    pub fn lookup_slot(&self, guest_chunk: u64) -> Option<usize> {
        self.find(guest_chunk, 0).map(|(slot, _)| slot)
    }

    /// The slot that reaches guest `addr`, or `None` (T4).
    #[inline]
    pub fn slot_of(&self, addr: u64) -> Option<usize> {
        self.find(addr >> self.chunk_shift, part_of(addr, self.chunk_shift))
            .map(|(slot, _)| slot)
    }

    /// T1–T2: the device address of a guest address: its chunk's address plus the offset in the chunk
    /// (a wrapping 64-bit add, as the device does), or `None` when its part of its chunk is not
    /// mapped (T4).
    #[inline]
    pub fn device_from_guest(&self, guest_addr: u64) -> Option<u64> {
        let offset_bytes = guest_addr & (self.chunk_bytes() - 1);
        self.find(
            guest_addr >> self.chunk_shift,
            part_of(guest_addr, self.chunk_shift),
        )
        .map(|(_, device_addr)| device_addr.wrapping_add(offset_bytes))
    }

    /// One lookup, probe by probe: what [`ChunkTable::lookup`] does, written down.
    pub fn trace(&self, guest_chunk: u64) -> LookupTrace {
        self.trace_part(guest_chunk, 0)
    }

    /// The lookup of guest `addr` (its chunk and part), probe by probe.
    pub fn trace_addr(&self, addr: u64) -> LookupTrace {
        self.trace_part(addr >> self.chunk_shift, part_of(addr, self.chunk_shift))
    }

    /// One lookup of `part` of a chunk, probe by probe: what the device helper does, written down.
    pub fn trace_part(&self, guest_chunk: u64, part: u32) -> LookupTrace {
        let home = self.home_slot(guest_chunk & KEY_CHUNK_MASK);
        let mask = self.slots.len() - 1;
        let mut probes = Vec::new();
        let mut slot = home;
        let mut outcome = LookupOutcome::MissBound;
        for _ in 0..self.bound() {
            let Some(s) = self.slots.get(slot) else { break };
            if s.is_empty() {
                probes.push(ProbeStep { slot, key: None });
                outcome = LookupOutcome::MissEmpty { slot };
                break;
            }
            probes.push(ProbeStep {
                slot,
                key: Some(s.guest_chunk),
            });
            if s.hits(guest_chunk, part) {
                outcome = LookupOutcome::Hit {
                    slot,
                    device_addr: s.device_addr,
                };
                break;
            }
            slot = (slot + 1) & mask;
        }
        LookupTrace {
            guest_chunk,
            part,
            home_slot: home,
            probes,
            outcome,
        }
    }

    /// The table as the device reads it: every slot in order, each its key then its address, little
    /// endian; `capacity() * SLOT_BYTES` bytes.
    pub fn to_le_bytes(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(self.slots.len() * SLOT_BYTES);
        for s in self.slots.iter() {
            bytes.extend_from_slice(&s.guest_chunk.to_le_bytes());
            bytes.extend_from_slice(&s.device_addr.to_le_bytes());
        }
        bytes
    }

    /// A table from the image [`ChunkTable::slots`] and its parameters gave (a debugger's saved
    /// copy of the table a dispatch left), checked slot by slot so that the lookup's unchecked reads
    /// stay in bounds: the capacity a power of two from [`MIN_CAPACITY`] to 2^[`MAX_CAPACITY_LOG2`],
    /// the multiplier odd, every stored chunk within `probe_bound - 1` slots of its home with no
    /// empty slot between (T2), no chunk twice, and the load at most [`MAX_LOAD`].
    ///
    /// # Errors
    /// A bad chunk size or bound as in [`ChunkTable::build`], or [`TableError::BadImage`] naming the
    /// first slot that breaks a rule.
    pub fn from_slots(
        chunk_bytes: u64,
        probe_bound: u32,
        multiplier: u64,
        image: &[TableSlot],
    ) -> Result<ChunkTable, TableError> {
        let chunk_shift = chunk_shift_of(chunk_bytes)?;
        if probe_bound == 0 {
            return Err(TableError::ZeroProbeBound);
        }
        let bad = |reason: String| Err(TableError::BadImage { reason });
        let capacity = image.len();
        if !capacity.is_power_of_two()
            || capacity < MIN_CAPACITY
            || capacity.trailing_zeros() > MAX_CAPACITY_LOG2
        {
            return bad(format!(
                "{capacity} slots: not a power of two from {MIN_CAPACITY} to 2^{MAX_CAPACITY_LOG2}"
            ));
        }
        if multiplier & 1 == 0 {
            return bad(format!("multiplier {multiplier:#x} is even"));
        }
        let capacity_log2 = capacity.trailing_zeros();
        let mask = capacity - 1;
        let bound = (probe_bound as usize).min(capacity);
        let mut seen = hashbrown::HashSet::new();
        let mut len = 0usize;
        for (slot, s) in image.iter().enumerate() {
            if s.is_empty() {
                continue;
            }
            len += 1;
            if !seen.insert((s.chunk(), s.device_addr)) {
                return bad(format!(
                    "chunk {:#x} is stored twice at device address {:#x} (slot {slot})",
                    s.chunk(),
                    s.device_addr
                ));
            }
            let home = home_slot(s.chunk(), multiplier, capacity_log2);
            let distance = slot.wrapping_sub(home) & mask;
            if distance >= bound {
                return bad(format!(
                    "chunk {:#x} at slot {slot} is {distance} slots from its home slot {home}, past probe bound {probe_bound}",
                    s.guest_chunk
                ));
            }
            if let Some(gap) = (0..distance).find(|d| image[(home + d) & mask].is_empty()) {
                return bad(format!(
                    "chunk {:#x} at slot {slot} has an empty slot {} between it and its home slot {home}",
                    s.guest_chunk,
                    (home + gap) & mask
                ));
            }
        }
        if len > max_len(capacity) {
            return bad(format!(
                "{len} chunks in {capacity} slots, over the load limit {MAX_LOAD:.3}"
            ));
        }
        let mut slots = SlotMem::empty(capacity)?;
        slots.copy_from_slice(image);
        let mut t = ChunkTable {
            chunk_shift,
            max_capacity_log2: MAX_CAPACITY_LOG2,
            capacity_log2,
            probe_bound,
            multiplier,
            fixed_multiplier: true,
            slots,
            len,
            rebuilds: 0,
            stats: Stats::default(),
            changed: Changed::All,
            version: 1,
            changed_since: 0,
            journal: None,
        };
        t.recount();
        Ok(t)
    }

    /// Slots, a power of two.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// `log2(capacity())`: what [`home_slot`] takes, and what the device helper needs.
    pub fn capacity_log2(&self) -> u32 {
        self.capacity_log2
    }

    /// Mapped chunks.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no chunk is mapped.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `len() / capacity()`, at most [`MAX_LOAD`].
    pub fn load(&self) -> f64 {
        self.len as f64 / self.slots.len() as f64
    }

    /// Bytes per chunk (T1).
    pub fn chunk_bytes(&self) -> u64 {
        1u64 << self.chunk_shift
    }

    /// `log2(chunk_bytes())`: a guest address's chunk is `guest_addr >> chunk_shift()`.
    pub fn chunk_shift(&self) -> u32 {
        self.chunk_shift
    }

    /// The most slots a lookup reads (T2).
    pub fn probe_bound(&self) -> u32 {
        self.probe_bound
    }

    /// Every slot, empty ones included, in order.
    pub fn slots(&self) -> &[TableSlot] {
        &self.slots
    }

    /// Full placement passes done so far: the build's (one, plus one for each doubling it needed) and
    /// every grow's.
    pub fn rebuilds(&self) -> u64 {
        self.rebuilds
    }

    /// Every mapped `(guest_chunk, device_addr)`, in slot order.
    pub fn entries(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.slots
            .iter()
            .filter(|s| !s.is_empty())
            .map(|s| (s.guest_chunk, s.device_addr))
    }

    /// Probes a lookup of the key in `slot` needs: its distance from its home slot, plus one.
    fn probes_at(&self, slot: usize, guest_chunk: u64) -> usize {
        let home = self.home_slot(guest_chunk & KEY_CHUNK_MASK);
        (slot.wrapping_sub(home) & (self.slots.len() - 1)) + 1
    }

    /// Counts `by` keys found on the `probes`-th slot read.
    fn count_hit(&mut self, probes: usize, by: i64) {
        if let Some(n) = self.stats.hits.get_mut(probes) {
            *n = n.saturating_add_signed(by);
        }
    }

    /// The slots a miss reads, summed over the home slots of a cluster of `len` full slots (each
    /// reads to the cluster's end and the empty slot after it, at most the bound).
    fn cluster_misses(&self, len: u64) -> u64 {
        let bound = u64::from(self.bound());
        // Slot i from the cluster's end (1-based) reads min(i + 1, bound).
        let ramp = len.min(bound.saturating_sub(1));
        let ramp_total = (ramp * (ramp + 1)) / 2 + ramp;
        ramp_total + (len - ramp) * bound
    }

    /// Keeps the miss statistic when `slot` became full (`filled`) or empty: only the clusters on
    /// either side of it are walked.
    fn count_filled(&mut self, slot: usize, filled: bool) {
        let mask = self.slots.len() - 1;
        let run = |step: fn(usize, usize) -> usize| {
            let mut n = 0u64;
            let mut at = step(slot, mask);
            while n < mask as u64 && self.slots.get(at).is_some_and(|s| !s.is_empty()) {
                n += 1;
                at = step(at, mask);
            }
            n
        };
        let before = run(|at, mask| at.wrapping_sub(1) & mask);
        let after = run(|at, mask| (at + 1) & mask);
        let apart = self.cluster_misses(before) + self.cluster_misses(after) + 1;
        let joined = self.cluster_misses(before + after + 1);
        self.stats.miss_total = if filled {
            (self.stats.miss_total + joined).saturating_sub(apart)
        } else {
            (self.stats.miss_total + apart).saturating_sub(joined)
        };
    }

    /// Counts the statistics over every slot: after a build, a grow or an image.
    fn recount(&mut self) {
        let mut hits = vec![0u64; self.bound() as usize + 1];
        for (slot, s) in self.slots.iter().enumerate() {
            if !s.is_empty()
                && let Some(n) = hits.get_mut(self.probes_at(slot, s.chunk()))
            {
                *n += 1;
            }
        }
        let bound = self.bound() as usize;
        // Walk backward twice round the ring: `run` is the number of full slots from a slot up to the
        // next empty one, exact once the walk has passed an empty slot (the load is under 1). The
        // first round only settles `run`; the second counts.
        let mut run = 0usize;
        for s in self.slots.iter().rev() {
            run = if s.is_empty() { 0 } else { run + 1 };
        }
        let mut total = 0u64;
        for s in self.slots.iter().rev() {
            run = if s.is_empty() { 0 } else { run + 1 };
            total += (run + 1).min(bound) as u64;
        }
        self.stats = Stats {
            hits,
            miss_total: total,
        };
    }

    /// How many stored keys a hit needs each number of probes for: index `p` counts the keys found on
    /// the `p`-th slot read (index 0 is always 0). The length is `probe_bound() + 1`. Kept as the
    /// table changes: no walk over the slots.
    pub fn probe_histogram_hits(&self) -> Vec<u64> {
        self.stats.hits.clone()
    }

    /// The mean probes of a hit, over every stored key; 0 for an empty table.
    pub fn mean_probes_hit(&self) -> f64 {
        if self.len == 0 {
            return 0.0;
        }
        let total: u64 = self
            .stats
            .hits
            .iter()
            .enumerate()
            .map(|(p, n)| p as u64 * n)
            .sum();
        total as f64 / self.len as f64
    }

    /// The mean probes of a miss: over every slot taken as a home slot, the slots read until an empty one
    /// (counted) or the bound. This is the expected cost of a lookup of a random unmapped chunk.
    pub fn mean_probes_miss(&self) -> f64 {
        self.stats.miss_total as f64 / self.slots.len().max(1) as f64
    }

    /// The slots changed since [`ChunkTable::changed_since`] (every slot after a build or a grow),
    /// for a backend that uploads only what changed: a backend whose copy is of that version writes
    /// these slots, any other writes every slot.
    pub fn changed(&self) -> &Changed {
        &self.changed
    }

    /// The version the changed slots are counted from ([`ChunkTable::changed`]).
    pub fn changed_since(&self) -> u64 {
        self.changed_since
    }

    /// A number that moves with every change of a slot: a backend's copy is this table's when it
    /// was placed at this version.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Starts the changed slots again from now (after the table was placed).
    pub fn clear_changed(&mut self) {
        self.changed = Changed::default();
        self.changed_since = self.version;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "in a test, an unwrap is an assertion")]
mod tests {
    use super::*;

    const PAGE: u64 = 4096;

    /// A table of 4 KiB chunks over the given keys, each mapped at `0x1_0000_0000 + key * 0x1000`, with
    /// the Fibonacci multiplier, so that [`keys_with_home`] knows the homes.
    fn table(probe_bound: u32, keys: &[u64]) -> ChunkTable {
        let entries: Vec<(u64, u64)> = keys.iter().map(|&k| (k, addr(k))).collect();
        ChunkTable::build_with_multiplier(PAGE, probe_bound, &entries, FIBONACCI_MULTIPLIER)
            .unwrap()
    }

    fn addr(k: u64) -> u64 {
        0x1_0000_0000 + k * PAGE
    }

    /// Keys whose home slot, at `capacity_log2`, is `home`.
    fn keys_with_home(home: usize, capacity_log2: u32, n: usize) -> Vec<u64> {
        (0u64..)
            .filter(|&k| home_slot(k, FIBONACCI_MULTIPLIER, capacity_log2) == home)
            .take(n)
            .collect()
    }

    /// Every stored key lies within the bound of its home, with no empty slot between.
    fn check_invariants(t: &ChunkTable) {
        let mask = t.capacity() - 1;
        let mut n = 0;
        for (slot, s) in t.slots().iter().enumerate() {
            if s.is_empty() {
                continue;
            }
            n += 1;
            let home = t.home_slot(s.guest_chunk);
            let dist = slot.wrapping_sub(home) & mask;
            assert!(
                dist < t.probe_bound() as usize,
                "key {:#x} is {dist} from home",
                s.guest_chunk
            );
            for d in 0..dist {
                assert!(!t.slots()[(home + d) & mask].is_empty());
            }
            assert_eq!(t.lookup(s.guest_chunk), Some(s.device_addr));
        }
        assert_eq!(n, t.len());
        assert!(t.load() <= MAX_LOAD);
    }

    #[test]
    fn t2_home_slot_matches_documented_formula_bit_for_bit() {
        // Values from an independent evaluation of the documented formula (Python integers).
        for (k, log2, home) in [
            (0u64, 4u32, 0usize),
            (1, 4, 9),
            (0x4_0000_0000, 20, 1036959),
            (0x4_0000_0001, 20, 636438),
            (0x7_4005_b800, 20, 110477),
            (0x7_4005_b87e, 16, 64070),
            (0xffff_ffff_ffff_fffe, 10, 782),
            (12345, 0, 0),
            (0xdead_beef, 64, 63030153387863451),
            (1, 1, 1),
        ] {
            assert_eq!(
                home_slot(k, FIBONACCI_MULTIPLIER, log2),
                home,
                "home_slot({k:#x}, {log2})"
            );
        }
        assert_eq!(home_slot(0x4_0000_0000, MULTIPLIERS[1], 20), 473401);
    }

    #[test]
    fn t2_the_hot_path_hashes_as_home_slot_does() {
        for log2 in [4, 9, 20, 28] {
            for m in MULTIPLIERS {
                let t = ChunkTable {
                    chunk_shift: 12,
                    max_capacity_log2: MAX_CAPACITY_LOG2,
                    capacity_log2: log2,
                    probe_bound: 1,
                    multiplier: m,
                    fixed_multiplier: true,
                    slots: SlotMem::empty(MIN_CAPACITY).unwrap(),
                    len: 0,
                    rebuilds: 0,
                    stats: Stats::default(),
                    changed: Changed::All,
                    version: 0,
                    changed_since: 0,
                    journal: None,
                };
                for k in [
                    0,
                    1,
                    0x4_0000_0000,
                    0x7_4005_b87e,
                    u64::MAX - 1,
                    0x1234_5678_9abc_def0,
                ] {
                    assert_eq!(
                        t.home_byte(k),
                        home_slot(k, m, log2) * SLOT_BYTES,
                        "key {k:#x}, log2 {log2}"
                    );
                }
            }
        }
    }

    #[test]
    fn t1_chunk_never_coarser_than_mapping_alignment() {
        assert_eq!(
            chunk_bytes_for([(0x4000_0000_0000, 0x4000_0010_0000)]),
            MAX_CHUNK_BYTES
        );
        assert_eq!(
            chunk_bytes_for([(0x4000_0000_0000, 0x4000_0000_3000)]),
            0x1000
        );
        assert_eq!(
            chunk_bytes_for([
                (0x7400_5b80_0000, 0x7400_5b90_0000),
                (0x1000_2000, 0x1000_8000)
            ]),
            0x2000
        );
        assert_eq!(chunk_bytes_for([(0x100, 0x1000)]), 0x100);
        assert_eq!(chunk_bytes_for([(0, 1)]), 1);
    }

    #[test]
    fn t1_no_mappings_give_the_largest_chunk() {
        assert_eq!(chunk_bytes_for(std::iter::empty()), MAX_CHUNK_BYTES);
        assert_eq!(chunk_bytes_for([(0, 0)]), MAX_CHUNK_BYTES);
    }

    #[test]
    fn t1_build_refuses_bad_chunk_sizes_by_name() {
        let e = ChunkTable::build(0x3000, 4, &[]).unwrap_err();
        assert_eq!(
            e,
            TableError::ChunkBytesNotPowerOfTwo {
                chunk_bytes: 0x3000
            }
        );
        assert_eq!(
            e.to_string(),
            "chunk size 0x3000 bytes is not a power of two (T1)"
        );
        let e = ChunkTable::build(0x2_0000, 4, &[]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "chunk size 0x20000 bytes is over the T1 limit of 0x10000"
        );
        assert!(ChunkTable::build(0, 4, &[]).is_err());
        assert_eq!(
            ChunkTable::build(8, 4, &[]).unwrap_err(),
            TableError::ChunkBytesTooSmall { chunk_bytes: 8 },
            "a chunk is cut in 16 parts"
        );
        assert_eq!(
            ChunkTable::build(16, 4, &[(5, 6)]).unwrap().chunk_shift(),
            4
        );
    }

    #[test]
    fn t2_build_refuses_zero_bound_duplicates_and_the_empty_key() {
        assert_eq!(
            ChunkTable::build(PAGE, 0, &[]).unwrap_err(),
            TableError::ZeroProbeBound
        );
        let e = ChunkTable::build(PAGE, 4, &[(7, 0x1000), (8, 0x2000), (7, 0x3000)]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "guest chunk 0x7 is given two device addresses, 0x1000 and 0x3000"
        );
        let t = ChunkTable::build(PAGE, 4, &[(7, 0x1000), (7, 0x1000)]).unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!(
            ChunkTable::build(PAGE, 4, &[(EMPTY_KEY, 0)]).unwrap_err(),
            TableError::ReservedKey {
                guest_chunk: EMPTY_KEY
            }
        );
    }

    #[test]
    fn t2_build_sizes_to_the_working_load() {
        let keys: Vec<u64> = (0x4_0000_0000..0x4_0000_0000 + 1000).collect();
        let t = table(DEFAULT_PROBE_BOUND, &keys);
        assert_eq!(t.capacity(), 4096);
        assert!(t.load() <= MAX_LOAD && t.load() > MAX_LOAD / 2.0);
        assert_eq!(t.rebuilds(), 1);
        check_invariants(&t);
        let empty = table(4, &[]);
        assert_eq!(empty.capacity(), MIN_CAPACITY);
        assert_eq!(empty.lookup(0), None);
    }

    #[test]
    fn t2_build_grows_until_every_key_fits_the_bound() {
        // Three keys with one home slot at the working capacity (16): bound 1 cannot hold them there.
        let keys = keys_with_home(3, 4, 3);
        let t = table(1, &keys);
        assert!(t.capacity() > MIN_CAPACITY);
        assert!(t.rebuilds() > 1);
        for &k in &keys {
            assert_eq!(t.lookup(k), Some(addr(k)));
        }
        check_invariants(&t);
    }

    /// Scattered keys that need far more than the working capacity under probe bound 1.
    fn scattered_keys(n: usize) -> Vec<(u64, u64)> {
        let mut x = 0x000D_9640u64;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 16, 0)
            })
            .collect()
    }

    #[test]
    fn t2_build_grows_until_the_keys_fit() {
        // Bound 1 needs 2000 distinct home slots: at 2^17 slots (the working 2^13 doubled four
        // times) some 15 pairs of these keys still share one. T2 grows on until they fit.
        let entries = scattered_keys(2000);
        let t = ChunkTable::build(PAGE, 1, &entries).unwrap();
        assert!(t.capacity() > 131_072, "{}", t.capacity());
        for &(k, _) in &entries {
            assert_eq!(t.lookup_slot(k), Some(t.home_slot(k)), "{k:#x}");
        }
    }

    #[test]
    fn t2_build_gives_up_by_name_at_the_stated_limit() {
        let entries = scattered_keys(2000);
        let e = ChunkTable::build_within(PAGE, 1, &entries, 17).unwrap_err();
        assert!(
            matches!(
                e,
                TableError::NoRoom {
                    probe_bound: 1,
                    capacity: 131072,
                    n_entries: 2000,
                    ..
                }
            ),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(
            text.contains("within probe bound 1 even at capacity 131072 (2000 chunks)")
                && text.contains("2097152 bytes"),
            "{text}"
        );
    }

    #[test]
    fn t2_insert_places_updates_and_keeps_the_bound() {
        let mut t = table(4, &[10, 11, 12]);
        let out = t.insert(13, addr(13)).unwrap();
        assert!(
            matches!(out, InsertOutcome::Placed { probes: 1..=4, .. }),
            "{out:?}"
        );
        assert_eq!(
            t.insert(13, 0x42).unwrap(),
            InsertOutcome::Updated {
                slot: t.lookup_slot(13).unwrap()
            }
        );
        assert_eq!(t.lookup(13), Some(0x42));
        assert_eq!(t.len(), 4);
        check_invariants(&t);
        assert_eq!(
            t.insert(EMPTY_KEY, 0).unwrap_err(),
            TableError::ReservedKey {
                guest_chunk: EMPTY_KEY
            }
        );
    }

    #[test]
    fn t2_insert_without_room_grows() {
        // Bound 2 at capacity 16: the third key with home 5 finds slots 5 and 6 full.
        let keys = keys_with_home(5, 4, 3);
        let mut t = table(2, &keys[..2]);
        assert_eq!(t.capacity(), 16);
        let out = t.insert(keys[2], addr(keys[2])).unwrap();
        assert!(
            matches!(out, InsertOutcome::Grew { from_capacity: 16, to_capacity } if to_capacity >= 32),
            "{out:?}"
        );
        assert_eq!(t.rebuilds(), 2 + (t.capacity_log2() as u64 - 5));
        for &k in &keys {
            assert_eq!(t.lookup(k), Some(addr(k)));
        }
        check_invariants(&t);
    }

    #[test]
    fn t2_insert_past_max_load_grows() {
        let mut t = table(DEFAULT_PROBE_BOUND, &[]);
        let mut grew = Vec::new();
        for k in 0..100u64 {
            if let InsertOutcome::Grew {
                from_capacity,
                to_capacity,
            } = t.insert(k, addr(k)).unwrap()
            {
                grew.push((k, from_capacity, to_capacity));
            }
            assert!(t.load() <= MAX_LOAD);
        }
        // max_len(16) = 4, max_len(32) = 9, max_len(64) = 18, max_len(128) = 36, max_len(256) = 73.
        assert_eq!(
            grew,
            vec![
                (4, 16, 32),
                (9, 32, 64),
                (18, 64, 128),
                (36, 128, 256),
                (73, 256, 512)
            ]
        );
        check_invariants(&t);
    }

    #[test]
    fn t2_remove_keeps_others_reachable() {
        // A cluster that wraps past the last slot: homes 14, 14, 15, 0 fill slots 14, 15, 0, 1.
        let mut keys = keys_with_home(14, 4, 2);
        keys.extend(keys_with_home(15, 4, 1));
        keys.extend(keys_with_home(0, 4, 1));
        for victim in 0..keys.len() {
            let mut t = table(8, &keys);
            assert_eq!(t.capacity(), 16);
            assert_eq!(t.lookup_slot(keys[3]), Some(1));
            assert!(t.remove(keys[victim]));
            assert!(!t.remove(keys[victim]));
            assert_eq!(t.lookup(keys[victim]), None);
            assert_eq!(t.len(), 3);
            for (i, &k) in keys.iter().enumerate() {
                if i != victim {
                    assert_eq!(t.lookup(k), Some(addr(k)), "victim {victim}, key {k:#x}");
                }
            }
            assert!(
                t.slots()[1].is_empty(),
                "victim {victim}: the cluster's last slot empties"
            );
            check_invariants(&t);
        }
    }

    #[test]
    fn t2_remove_never_moves_a_key_before_its_home() {
        // Homes 3, 3, 5 fill slots 3, 4, 5. Removing the first moves the second back to 3; the third
        // stays at its home 5, leaving slot 4 empty.
        let mut keys = keys_with_home(3, 4, 2);
        keys.extend(keys_with_home(5, 4, 1));
        let mut t = table(8, &keys);
        assert_eq!(t.lookup_slot(keys[2]), Some(5));
        assert!(t.remove(keys[0]));
        assert_eq!(t.lookup_slot(keys[1]), Some(3));
        assert_eq!(t.lookup_slot(keys[2]), Some(5));
        assert!(t.slots()[4].is_empty());
        check_invariants(&t);
    }

    #[test]
    fn t2_trace_agrees_with_lookup() {
        let keys = keys_with_home(7, 4, 3);
        let t = table(3, &keys[..2]);
        let hit = t.trace(keys[1]);
        assert_eq!(hit.home_slot, 7);
        assert_eq!(
            hit.probes,
            vec![
                ProbeStep {
                    slot: 7,
                    key: Some(keys[0])
                },
                ProbeStep {
                    slot: 8,
                    key: Some(keys[1])
                }
            ]
        );
        assert_eq!(
            hit.outcome,
            LookupOutcome::Hit {
                slot: 8,
                device_addr: addr(keys[1])
            }
        );
        let miss = t.trace(keys[2]);
        assert_eq!(miss.outcome, LookupOutcome::MissEmpty { slot: 9 });
        assert_eq!(miss.probes.len(), 3);
        let json = serde_json::to_string(&hit.outcome).unwrap();
        assert_eq!(
            json,
            format!(
                r#"{{"kind":"hit","slot":8,"device-addr":{}}}"#,
                addr(keys[1])
            )
        );
        let back: LookupTrace =
            serde_json::from_str(&serde_json::to_string(&miss).unwrap()).unwrap();
        assert_eq!(back, miss);
    }

    #[test]
    fn t2_trace_reports_the_bound() {
        // Bound 2, homes 7, 7 fill slots 7 and 8; a third key with home 7 reads both and stops.
        let keys = keys_with_home(7, 4, 3);
        let t = table(2, &keys[..2]);
        let tr = t.trace(keys[2]);
        assert_eq!(tr.outcome, LookupOutcome::MissBound);
        assert_eq!(tr.probes.len(), 2);
        assert_eq!(t.lookup(keys[2]), None);
    }

    #[test]
    fn t2_empty_key_is_never_found() {
        let t = table(4, &[1, 2, 3]);
        assert_eq!(t.lookup(EMPTY_KEY), None);
        assert_eq!(t.lookup_slot(EMPTY_KEY), None);
    }

    #[test]
    fn t1_device_from_guest_adds_the_offset_in_the_chunk() {
        let t = ChunkTable::build(0x1_0000, 4, &[(0x7400_5b80, 0xfe00_0000)]).unwrap();
        assert_eq!(t.device_from_guest(0x7400_5b80_0000), Some(0xfe00_0000));
        assert_eq!(t.device_from_guest(0x7400_5b80_fffc), Some(0xfe00_fffc));
        assert_eq!(t.device_from_guest(0x7400_5b81_0000), None);
    }

    #[test]
    fn t2_device_bytes_are_key_then_address_little_endian() {
        let t = table(4, &[0x0102_0304]);
        let bytes = t.to_le_bytes();
        assert_eq!(bytes.len(), t.capacity() * SLOT_BYTES);
        let slot = t.lookup_slot(0x0102_0304).unwrap();
        let at = slot * SLOT_BYTES;
        assert_eq!(&bytes[at..at + 8], &0x0102_0304u64.to_le_bytes());
        assert_eq!(&bytes[at + 8..at + 16], &addr(0x0102_0304).to_le_bytes());
        let empty = (slot + 1) % t.capacity() * SLOT_BYTES;
        assert_eq!(&bytes[empty..empty + 8], &[0xff; 8]);
    }

    #[test]
    fn t2_probe_statistics() {
        let keys = keys_with_home(2, 4, 3);
        let t = table(4, &keys);
        assert_eq!(t.probe_histogram_hits(), vec![0, 1, 1, 1, 0]);
        assert!((t.mean_probes_hit() - 2.0).abs() < 1e-9);
        // Homes 2, 3, 4 read 4, 3, 2 slots; the other 13 slots are empty and read 1.
        assert!((t.mean_probes_miss() - (4.0 + 3.0 + 2.0 + 13.0) / 16.0).abs() < 1e-9);
        assert_eq!(t.entries().count(), 3);
        assert_eq!(table(4, &[]).mean_probes_hit(), 0.0);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "in a test, an unwrap is an assertion")]
mod choice_tests {
    use super::*;

    const PAGE: u64 = 4096;

    /// The exact displacement from home counts, against placing the keys and summing.
    #[test]
    fn t2_displacement_from_home_counts_is_exact() {
        let mut homes = Vec::new();
        for (n, stride) in [(5usize, 1u64), (4, 7), (300, 3), (1000, 1)] {
            // Keys in clumps: runs of consecutive chunks at a few bases, so clusters wrap too.
            let keys: Vec<u64> = (0..n as u64)
                .map(|i| (i % 4) * 0x1_0000_0000 + i * stride)
                .collect();
            for m in MULTIPLIERS {
                let entries: Vec<(u64, u64)> = keys.iter().map(|&k| (k, k)).collect();
                let t = ChunkTable::build_with_multiplier(16, 64, &entries, m).unwrap();
                let placed: u64 = t
                    .slots()
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| !s.is_empty())
                    .map(|(i, s)| {
                        (i.wrapping_sub(t.home_slot(s.guest_chunk)) & (t.capacity() - 1)) as u64
                    })
                    .sum();
                let computed =
                    total_displacement(keys.iter().copied(), t.capacity_log2(), m, &mut homes);
                assert_eq!(computed, placed, "n {n}, multiplier {m:#x}");
            }
        }
    }

    /// T2: the build keeps a multiplier no worse than a random hash when one of the candidates is.
    #[test]
    fn t2_build_chooses_a_multiplier_for_its_keys() {
        // 64 runs of 256 consecutive chunks at bases 2^20 chunks apart.
        let entries: Vec<(u64, u64)> = (0..64u64)
            .flat_map(|r| (0..256u64).map(move |i| (r * 0x10_0000 + i, 0x1000 * (r * 256 + i))))
            .collect();
        let t = ChunkTable::build(PAGE, DEFAULT_PROBE_BOUND, &entries).unwrap();
        assert!(MULTIPLIERS.contains(&t.multiplier()));
        let fixed = ChunkTable::build_with_multiplier(
            PAGE,
            DEFAULT_PROBE_BOUND,
            &entries,
            FIBONACCI_MULTIPLIER,
        )
        .unwrap();
        assert!(t.mean_probes_hit() <= fixed.mean_probes_hit());
        assert!(
            t.mean_probes_hit() <= random_hash_probes_per_hit(t.load()) + 1e-9
                || t.multiplier() != MULTIPLIERS[0],
            "{t:?}: {}",
            t.mean_probes_hit()
        );
        for &(k, a) in &entries {
            assert_eq!(t.lookup(k), Some(a));
        }
        // A grow chooses again; a fixed table keeps its multiplier.
        let mut fixed = fixed;
        for k in 0..20_000u64 {
            fixed.insert(0x7000_0000 + k, 0).unwrap();
        }
        assert_eq!(fixed.multiplier(), FIBONACCI_MULTIPLIER);
    }

    /// From 2 MiB a table lives in a mapping of its own; lookups, clones and grows work the same.
    #[test]
    fn t2_large_tables_live_in_their_own_mapping() {
        let entries: Vec<(u64, u64)> = (0..30_000u64)
            .map(|i| (0x4_0000_0000 + i, 0x1_0000_0000 + i * PAGE))
            .collect();
        let mut t = ChunkTable::build(PAGE, DEFAULT_PROBE_BOUND, &entries).unwrap();
        assert_eq!(t.capacity(), 1 << 17);
        assert!(matches!(t.slots, SlotMem::Mapped(_)));
        let copy = t.clone();
        assert_eq!(copy.slots(), t.slots());
        for &(k, a) in &entries {
            assert_eq!(t.lookup(k), Some(a));
            assert_eq!(copy.lookup(k), Some(a));
        }
        assert_eq!(t.lookup(0x4_0000_0000 + 30_000), None);
        assert!(t.remove(0x4_0000_0000));
        assert_eq!(copy.lookup(0x4_0000_0000), Some(0x1_0000_0000));
        for k in 0..10_000u64 {
            t.insert(0x9_0000_0000 + k, k).unwrap();
        }
        assert_eq!(t.capacity(), 1 << 18);
        assert_eq!(t.lookup(0x9_0000_0000 + 9_999), Some(9_999));
    }

    #[test]
    fn t2_empty_key_never_hits_an_empty_slot() {
        let t = ChunkTable::build(PAGE, 4, &[(1, 0x1000)]).unwrap();
        assert_eq!(t.lookup(EMPTY_KEY), None);
        assert_eq!(t.device_from_guest(u64::MAX), None);
    }

    #[test]
    fn from_slots_rebuilds_the_same_table_and_refuses_a_bad_image() {
        let entries: Vec<(u64, u64)> = (0..500u64)
            .map(|k| (k * 7 + 3, 0x10_0000 + k * PAGE))
            .collect();
        let t = ChunkTable::build(PAGE, 8, &entries).unwrap();
        let back = ChunkTable::from_slots(PAGE, 8, t.multiplier(), t.slots()).unwrap();
        assert_eq!(back.slots(), t.slots());
        assert_eq!(back.len(), t.len());
        for &(k, d) in &entries {
            assert_eq!(back.lookup(k), Some(d));
            assert_eq!(back.trace(k), t.trace(k));
        }
        // A stored chunk moved away from its run breaks T2.
        let mut image = t.slots().to_vec();
        let (at, moved) = image
            .iter()
            .enumerate()
            .find(|(_, s)| !s.is_empty())
            .map(|(i, s)| (i, *s))
            .unwrap();
        image[at] = TableSlot::EMPTY;
        let far = (at + t.capacity() / 2) & (t.capacity() - 1);
        image[far] = moved;
        let e = ChunkTable::from_slots(PAGE, 8, t.multiplier(), &image).unwrap_err();
        assert!(matches!(e, TableError::BadImage { .. }), "{e}");
        // Not a power of two, an even multiplier.
        assert!(matches!(
            ChunkTable::from_slots(PAGE, 8, 1, &image[..48]),
            Err(TableError::BadImage { .. })
        ));
        assert!(matches!(
            ChunkTable::from_slots(PAGE, 8, 2, t.slots()),
            Err(TableError::BadImage { .. })
        ));
    }
}
