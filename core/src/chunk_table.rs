//! The D964 chunk table (rules T1–T6): the bounded-probe hash table that turns a guest address into a
//! device address, one 16-byte slot per mapped chunk, in the byte layout a device helper (T5) reads.
//! It sizes chunks (T1), builds, grows, updates and shrinks the table (T2), answers lookups on the hot
//! path without allocating, and explains any lookup probe by probe for the debugger.
//! It never touches Vulkan, CUDA or guest memory: it holds numbers (chunk keys and device addresses) and
//! the bytes a backend uploads; placing them in device memory (T6) and marking slots (C1) are the
//! backend's.
//!
//! Ranges are half-open (`start..end`) throughout.
//! A key is a guest chunk number, `guest_addr >> chunk_shift`; [`EMPTY_KEY`] marks an empty slot and is
//! therefore never a key.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Bytes of one [`TableSlot`] in the device's copy of the table: the key, then the address, each a
/// little-endian `u64` (T2: "consecutive 16-byte slots").
pub const SLOT_BYTES: usize = 16;

/// The key of an empty slot. A guest chunk number of `u64::MAX` is refused as a key
/// ([`TableError::ReservedKey`]); no 48-bit guest address reaches it with any chunk size.
pub const EMPTY_KEY: u64 = u64::MAX;

/// T1: the coarsest chunk the table allows, 64 KiB.
pub const MAX_CHUNK_BYTES: u64 = 65536;

/// The highest load (`len / capacity`) the table keeps; build and insert grow the table past it.
///
/// Chosen as 2/7 because at load `a` linear probing with a random hash needs `(1 + 1/(1 - a)) / 2`
/// probes per hit on average (Knuth), which is 1.2 at `a = 2/7`.
/// [`home_slot`] spreads consecutive chunks more evenly than a random hash. On realistic keys (16 to 256
/// runs of consecutive chunks at scattered bases, 4 or 64 KiB chunks) the mean over many key sets at the
/// working load measured 1.10–1.18; one key set alone ranges up to 1.48, when two runs happen to land on
/// the same slots, and the bench's set of 262,144 chunks gives 1.21 (see `benches/README.md`).
/// The capacity is a power of two, so the working load lies between `MAX_LOAD / 2` and `MAX_LOAD`.
pub const MAX_LOAD: f64 = 2.0 / 7.0;

/// The fewest slots a table has.
pub const MIN_CAPACITY: usize = 16;

/// The largest capacity, as a power of two: 2^28 slots, a 4 GiB table. A build or grow that would need
/// more is refused ([`TableError::TooLarge`]).
pub const MAX_CAPACITY_LOG2: u32 = 28;

/// How many times a build may double the capacity beyond the working size ([`MAX_LOAD`]) to fit every key
/// within the probe bound before it gives up ([`TableError::NoRoom`]). Each doubling halves the load;
/// four of them mean a load under 1.8 %, and keys that still do not fit mean a probe bound too small
/// for them (a bound of 1 needs every key on its own home slot).
pub const MAX_EXTRA_DOUBLINGS: u32 = 4;

/// A probe bound for callers with no bound of their own. Our choice (D964 names no number): on realistic
/// keys at the working load the longest probe sequence measured is 4–11, so 16 rarely forces a grow,
/// while a miss still stops at the first empty slot (1.4 probes on average).
pub const DEFAULT_PROBE_BOUND: u32 = 16;

/// The multiplier of [`home_slot`]: 2^64 divided by the golden ratio, rounded to odd.
pub const FIBONACCI_MULTIPLIER: u64 = 0x9E37_79B9_7F4A_7C15;

/// The right shift that folds a key's high bits into its low bits before [`home_slot`] multiplies.
pub const MIX_SHIFT: u32 = 29;

/// One slot of the table, exactly as the device reads it: 16 bytes, key then address.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct TableSlot {
    /// The guest chunk number (`guest_addr >> chunk_shift`), or [`EMPTY_KEY`] when the slot is empty.
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
}

const _: () = assert!(std::mem::size_of::<TableSlot>() == SLOT_BYTES);

/// T2: the home slot of a key, where its probes start; the same function the device helper (T5) runs.
///
/// Bit for bit, with wrapping 64-bit unsigned arithmetic:
///
/// ```text
/// mixed = guest_chunk ^ (guest_chunk >> 29)
/// h     = mixed * 0x9E3779B97F4A7C15            (mod 2^64)
/// home  = capacity_log2 == 0 ? 0 : h >> (64 - capacity_log2)
/// ```
///
/// The table has `1 << capacity_log2` slots, so `home` is the top `capacity_log2` bits of `h`
/// (`capacity_log2` above 64 is treated as 64).
/// This is Fibonacci hashing of a lightly mixed key. The multiplication spreads consecutive chunks, which
/// is what one mapping's chunks are, almost evenly over the table (the three-distance theorem), so they
/// seldom collide with each other; a random-like hash (murmur's finaliser) collides them as often as any
/// other keys, and its longest probe sequences measured two to three times as long.
/// The xor-shift first folds bits 29 and up into the low bits: without it, keys differing only in bits at
/// or above `64 - capacity_log2` (possible with small chunks) would share a home slot.
/// Only 64-bit xor, shift and multiply: a SPIR-V or CUDA port needs nothing else.
#[inline]
pub fn home_slot(guest_chunk: u64, capacity_log2: u32) -> usize {
    let mixed = guest_chunk ^ (guest_chunk >> MIX_SHIFT);
    let h = mixed.wrapping_mul(FIBONACCI_MULTIPLIER);
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
    /// T2: even after [`MAX_EXTRA_DOUBLINGS`] doublings a key found no empty slot within the bound.
    #[error(
        "guest chunk {guest_chunk:#x} finds no empty slot within probe bound {probe_bound} even at capacity {capacity} ({n_entries} chunks); the bound is too small for these keys (T2)"
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

/// One slot a lookup read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ProbeStep {
    /// The slot index.
    pub slot: usize,
    /// The key found there; `None` when the slot is empty.
    pub key: Option<u64>,
}

/// How a lookup ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "kind",
    rename_all = "kebab-case",
    rename_all_fields = "kebab-case"
)]
pub enum LookupOutcome {
    /// The key was found.
    Hit {
        /// Its slot.
        slot: usize,
        /// The device address of the chunk's first byte.
        device_addr: u64,
    },
    /// The lookup stopped at an empty slot: the chunk is not mapped (T4: an escape if an access reached it).
    MissEmpty {
        /// The empty slot.
        slot: usize,
    },
    /// The lookup read `probe_bound` slots without finding the key or an empty slot. If the chunk is
    /// mapped, this is a table defect (T2 promises it never happens).
    MissBound,
}

/// One lookup, probe by probe, for the debugger.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct LookupTrace {
    /// The chunk looked up.
    pub guest_chunk: u64,
    /// Its home slot ([`home_slot`]).
    pub home_slot: usize,
    /// Every slot read, in order, starting at the home slot.
    pub probes: Vec<ProbeStep>,
    /// How it ended.
    pub outcome: LookupOutcome,
}

/// T1–T2: the chunk table. Each mapped guest chunk has one [`TableSlot`]; a chunk is found by reading
/// consecutive slots from its [`home_slot`], wrapping at the capacity, until its key (a hit), an empty
/// slot (a miss) or `probe_bound` slots (a miss that, for a mapped chunk, would be a defect).
///
/// Architecture invariant: every stored key lies within `probe_bound - 1` slots after its home slot, with
/// no empty slot between (build, insert and remove all keep this; `remove` shifts back, never leaves
/// tombstones).
/// Architecture invariant: `len <= MAX_LOAD * capacity`, and the capacity is a power of two, at least
/// [`MIN_CAPACITY`].
#[derive(Clone)]
pub struct ChunkTable {
    chunk_shift: u32,
    capacity_log2: u32,
    probe_bound: u32,
    slots: Vec<TableSlot>,
    len: usize,
    rebuilds: u64,
}

impl fmt::Debug for ChunkTable {
    /// A summary: the slots themselves are too many to print.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChunkTable")
            .field("chunk_bytes", &self.chunk_bytes())
            .field("capacity", &self.capacity())
            .field("len", &self.len)
            .field("probe_bound", &self.probe_bound)
            .field("rebuilds", &self.rebuilds)
            .finish_non_exhaustive()
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

/// The capacity, as a power of two, of a table holding `n_entries` at no more than [`MAX_LOAD`].
fn working_log2(n_entries: usize) -> u32 {
    let mut log2 = MIN_CAPACITY.trailing_zeros();
    while log2 < usize::BITS - 1 && max_len(1usize << log2) < n_entries {
        log2 += 1;
    }
    log2
}

/// One placement pass at a fixed capacity.
fn try_place(
    entries: impl Iterator<Item = (u64, u64)>,
    capacity_log2: u32,
    probe_bound: u32,
) -> Result<(Vec<TableSlot>, usize), PlaceError> {
    let capacity = 1usize << capacity_log2;
    let mask = capacity - 1;
    let bound = probe_bound.min(u32::try_from(capacity).unwrap_or(u32::MAX));
    let mut slots = vec![TableSlot::EMPTY; capacity];
    let mut len = 0usize;
    'entries: for (guest_chunk, device_addr) in entries {
        if guest_chunk == EMPTY_KEY {
            return Err(PlaceError::Bad(TableError::ReservedKey { guest_chunk }));
        }
        let mut slot = home_slot(guest_chunk, capacity_log2);
        for _ in 0..bound {
            let Some(s) = slots.get_mut(slot) else { break };
            if s.guest_chunk == EMPTY_KEY {
                *s = TableSlot {
                    guest_chunk,
                    device_addr,
                };
                len += 1;
                continue 'entries;
            }
            if s.guest_chunk == guest_chunk {
                if s.device_addr != device_addr {
                    return Err(PlaceError::Bad(TableError::DuplicateKey {
                        guest_chunk,
                        first_device_addr: s.device_addr,
                        second_device_addr: device_addr,
                    }));
                }
                continue 'entries;
            }
            slot = (slot + 1) & mask;
        }
        return Err(PlaceError::NoRoom(guest_chunk));
    }
    Ok((slots, len))
}

/// Placement passes from `start_log2`, doubling until every key fits within the bound (T2).
fn place_growing<I>(
    entries: impl Fn() -> I,
    n_entries: usize,
    start_log2: u32,
    probe_bound: u32,
    rebuilds: &mut u64,
) -> Result<(Vec<TableSlot>, u32, usize), TableError>
where
    I: Iterator<Item = (u64, u64)>,
{
    let last_log2 = start_log2.saturating_add(MAX_EXTRA_DOUBLINGS);
    let mut log2 = start_log2;
    loop {
        if log2 > MAX_CAPACITY_LOG2 {
            return Err(TableError::TooLarge {
                n_entries,
                capacity_log2: log2,
            });
        }
        *rebuilds += 1;
        match try_place(entries(), log2, probe_bound) {
            Ok((slots, len)) => return Ok((slots, log2, len)),
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
    Ok(chunk_bytes.trailing_zeros())
}

impl ChunkTable {
    /// T1–T2: builds a table of `entries`, each `(guest_chunk, device_addr)`, at the working load, with
    /// chunks of `chunk_bytes` and at most `probe_bound` probes per key.
    ///
    /// If a key finds no empty slot within the bound, the capacity doubles and the build starts again,
    /// so no mapped chunk is left unreachable. A chunk listed twice with the same address is kept once.
    ///
    /// # Errors
    /// A chunk size that is not a power of two or is over 64 KiB, a bound of 0, a chunk with two
    /// addresses, the key [`EMPTY_KEY`], or keys that fit the bound at no capacity up to the limits.
    pub fn build(
        chunk_bytes: u64,
        probe_bound: u32,
        entries: &[(u64, u64)],
    ) -> Result<ChunkTable, TableError> {
        let chunk_shift = chunk_shift_of(chunk_bytes)?;
        if probe_bound == 0 {
            return Err(TableError::ZeroProbeBound);
        }
        let mut rebuilds = 0;
        let (slots, capacity_log2, len) = place_growing(
            || entries.iter().copied(),
            entries.len(),
            working_log2(entries.len()),
            probe_bound,
            &mut rebuilds,
        )?;
        Ok(ChunkTable {
            chunk_shift,
            capacity_log2,
            probe_bound,
            slots,
            len,
            rebuilds,
        })
    }

    /// T2: maps one chunk, or moves an already mapped chunk to a new address.
    ///
    /// A new chunk takes the first empty slot within the bound. When there is none, or when one more
    /// chunk would raise the load past [`MAX_LOAD`], the table is rebuilt at twice the capacity (or more,
    /// until every key fits) with the chunk in it.
    ///
    /// # Errors
    /// The key [`EMPTY_KEY`], or a grow that cannot fit every key (see [`ChunkTable::build`]); the table is
    /// unchanged then.
    pub fn insert(
        &mut self,
        guest_chunk: u64,
        device_addr: u64,
    ) -> Result<InsertOutcome, TableError> {
        if guest_chunk == EMPTY_KEY {
            return Err(TableError::ReservedKey { guest_chunk });
        }
        let mask = self.slots.len() - 1;
        let mut slot = home_slot(guest_chunk, self.capacity_log2);
        let mut free = None;
        for probe in 1..=self.bound() {
            let Some(s) = self.slots.get_mut(slot) else {
                break;
            };
            if s.guest_chunk == guest_chunk {
                s.device_addr = device_addr;
                return Ok(InsertOutcome::Updated { slot });
            }
            if s.guest_chunk == EMPTY_KEY {
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
                guest_chunk,
                device_addr,
            };
            self.len += 1;
            return Ok(InsertOutcome::Placed { slot, probes });
        }
        self.grow_with(guest_chunk, device_addr)
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
        let (slots, capacity_log2, len) = place_growing(
            || {
                old.iter()
                    .filter(|s| !s.is_empty())
                    .map(|s| (s.guest_chunk, s.device_addr))
                    .chain(std::iter::once((guest_chunk, device_addr)))
            },
            n_entries,
            start_log2,
            self.probe_bound,
            &mut rebuilds,
        )?;
        self.slots = slots;
        self.capacity_log2 = capacity_log2;
        self.len = len;
        self.rebuilds = rebuilds;
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
        let Some(mut hole) = self.lookup_slot(guest_chunk) else {
            return false;
        };
        let mask = self.slots.len() - 1;
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
            let home = home_slot(moved.guest_chunk, self.capacity_log2);
            // The hole lies cyclically in [home, next): moving the key there keeps it at or after home.
            if hole.wrapping_sub(home) & mask < next.wrapping_sub(home) & mask {
                if let Some(h) = self.slots.get_mut(hole) {
                    *h = moved;
                }
                hole = next;
            }
        }
        if let Some(h) = self.slots.get_mut(hole) {
            *h = TableSlot::EMPTY;
        }
        self.len -= 1;
        true
    }

    /// The number of probes a lookup may make: the bound, or the capacity if that is smaller.
    #[inline]
    fn bound(&self) -> u32 {
        self.probe_bound
            .min(u32::try_from(self.slots.len()).unwrap_or(u32::MAX))
    }

    /// The hot path: the slot and address of a chunk, or `None`.
    ///
    /// A plain loop that stops at the key, an empty slot or the bound. Reading the first two slots and
    /// choosing between them without a branch measured 30–80 % slower, though a hit on a later slot
    /// mispredicts here: keys that all hit on their first slot go at most 25 % faster than random keys.
    #[inline]
    fn find(&self, guest_chunk: u64) -> Option<(usize, u64)> {
        if guest_chunk == EMPTY_KEY {
            return None;
        }
        let mask = self.slots.len().wrapping_sub(1);
        let mut slot = self.home(guest_chunk);
        for _ in 0..self.probe_bound {
            let s = self.slots.get(slot)?;
            if s.guest_chunk == guest_chunk {
                return Some((slot, s.device_addr));
            }
            if s.guest_chunk == EMPTY_KEY {
                return None;
            }
            slot = (slot + 1) & mask;
        }
        None
    }

    /// [`home_slot`] for this table, without its case for a capacity of one slot (never below
    /// [`MIN_CAPACITY`] here), so the hot path has no branch for it.
    #[inline]
    fn home(&self, guest_chunk: u64) -> usize {
        let mixed = guest_chunk ^ (guest_chunk >> MIX_SHIFT);
        (mixed.wrapping_mul(FIBONACCI_MULTIPLIER) >> (64 - self.capacity_log2)) as usize
    }

    /// T2: the device address of a chunk's first byte, or `None` when the chunk is not mapped. Reads at
    /// most `probe_bound` slots, stops at the first empty one, and never allocates.
    #[inline]
    pub fn lookup(&self, guest_chunk: u64) -> Option<u64> {
        self.find(guest_chunk).map(|(_, device_addr)| device_addr)
    }

    /// The slot of a mapped chunk, the index C1's marks use, or `None` when the chunk is not mapped.
    #[inline]
    pub fn lookup_slot(&self, guest_chunk: u64) -> Option<usize> {
        self.find(guest_chunk).map(|(slot, _)| slot)
    }

    /// T1–T2: the device address of a guest address: its chunk's address plus the offset in the chunk
    /// (a wrapping 64-bit add, as the device does), or `None` when its chunk is not mapped (T4).
    #[inline]
    pub fn device_from_guest(&self, guest_addr: u64) -> Option<u64> {
        let offset_bytes = guest_addr & (self.chunk_bytes() - 1);
        self.lookup(guest_addr >> self.chunk_shift)
            .map(|device_addr| device_addr.wrapping_add(offset_bytes))
    }

    /// One lookup, probe by probe: what [`ChunkTable::lookup`] does, written down.
    pub fn trace(&self, guest_chunk: u64) -> LookupTrace {
        let home = home_slot(guest_chunk, self.capacity_log2);
        let mask = self.slots.len() - 1;
        let mut probes = Vec::new();
        let mut slot = home;
        let mut outcome = LookupOutcome::MissBound;
        for _ in 0..self.probe_bound {
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
            if s.guest_chunk == guest_chunk {
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
            home_slot: home,
            probes,
            outcome,
        }
    }

    /// The table as the device reads it: every slot in order, each its key then its address, little
    /// endian; `capacity() * SLOT_BYTES` bytes.
    pub fn to_le_bytes(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(self.slots.len() * SLOT_BYTES);
        for s in &self.slots {
            bytes.extend_from_slice(&s.guest_chunk.to_le_bytes());
            bytes.extend_from_slice(&s.device_addr.to_le_bytes());
        }
        bytes
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
        let home = home_slot(guest_chunk, self.capacity_log2);
        (slot.wrapping_sub(home) & (self.slots.len() - 1)) + 1
    }

    /// How many stored keys a hit needs each number of probes for: index `p` counts the keys found on
    /// the `p`-th slot read (index 0 is always 0). The length is `probe_bound() + 1`.
    pub fn probe_histogram_hits(&self) -> Vec<u64> {
        let mut histogram = vec![0u64; self.probe_bound as usize + 1];
        for (slot, s) in self.slots.iter().enumerate() {
            if !s.is_empty()
                && let Some(n) = histogram.get_mut(self.probes_at(slot, s.guest_chunk))
            {
                *n += 1;
            }
        }
        histogram
    }

    /// The mean probes of a hit, over every stored key; 0 for an empty table.
    pub fn mean_probes_hit(&self) -> f64 {
        if self.len == 0 {
            return 0.0;
        }
        let total: usize = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.is_empty())
            .map(|(slot, s)| self.probes_at(slot, s.guest_chunk))
            .sum();
        total as f64 / self.len as f64
    }

    /// The mean probes of a miss: over every slot taken as a home slot, the slots read until an empty one
    /// (counted) or the bound. This is the expected cost of a lookup of a random unmapped chunk.
    pub fn mean_probes_miss(&self) -> f64 {
        let capacity = self.slots.len();
        let bound = self.bound() as usize;
        // Walk backward twice round the ring: `run` is the number of full slots from a slot up to the
        // next empty one, exact once the walk has passed an empty slot (the load is under 1).
        let mut run = 0usize;
        let mut total = 0usize;
        for i in (0..2 * capacity).rev() {
            let full = self.slots.get(i % capacity).is_some_and(|s| !s.is_empty());
            run = if full { run + 1 } else { 0 };
            if i < capacity {
                total += (run + 1).min(bound);
            }
        }
        total as f64 / capacity as f64
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "in a test, an unwrap is an assertion")]
mod tests {
    use super::*;

    const PAGE: u64 = 4096;

    /// A table of 4 KiB chunks over the given keys, each mapped at `0x1_0000_0000 + key * 0x1000`.
    fn table(probe_bound: u32, keys: &[u64]) -> ChunkTable {
        let entries: Vec<(u64, u64)> = keys.iter().map(|&k| (k, addr(k))).collect();
        ChunkTable::build(PAGE, probe_bound, &entries).unwrap()
    }

    fn addr(k: u64) -> u64 {
        0x1_0000_0000 + k * PAGE
    }

    /// Keys whose home slot, at `capacity_log2`, is `home`.
    fn keys_with_home(home: usize, capacity_log2: u32, n: usize) -> Vec<u64> {
        (0u64..)
            .filter(|&k| home_slot(k, capacity_log2) == home)
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
            let home = home_slot(s.guest_chunk, t.capacity_log2());
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
            (0x4_0000_0000, 20, 803218),
            (0x4_0000_0001, 20, 402698),
            (0x7_4005_b800, 20, 997542),
            (0x7_4005_b87e, 16, 8629),
            (0xffff_ffff_ffff_fffe, 10, 655),
            (12345, 0, 0),
            (0xdead_beef, 64, 5445717532286879005),
            (1, 1, 1),
        ] {
            assert_eq!(home_slot(k, log2), home, "home_slot({k:#x}, {log2})");
        }
    }

    #[test]
    fn t2_the_hot_path_hashes_as_home_slot_does() {
        for log2 in [4, 9, 20, 28] {
            let t = ChunkTable {
                chunk_shift: 12,
                capacity_log2: log2,
                probe_bound: 1,
                slots: Vec::new(),
                len: 0,
                rebuilds: 0,
            };
            for k in [
                0,
                1,
                0x4_0000_0000,
                0x7_4005_b87e,
                u64::MAX - 1,
                0x1234_5678_9abc_def0,
            ] {
                assert_eq!(t.home(k), home_slot(k, log2), "key {k:#x}, log2 {log2}");
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
        assert_eq!(ChunkTable::build(1, 4, &[(5, 6)]).unwrap().chunk_shift(), 0);
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

    #[test]
    fn t2_build_gives_up_by_name_when_no_capacity_fits() {
        // Bound 1 needs 2000 distinct home slots; at 2^17 slots (the working 2^13 doubled four times)
        // some 15 pairs of keys still share one.
        let entries: Vec<(u64, u64)> = (0..2000u64).map(|i| (i * 0x1_0000_0001, 0)).collect();
        let e = ChunkTable::build(PAGE, 1, &entries).unwrap_err();
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
        assert!(
            e.to_string()
                .contains("within probe bound 1 even at capacity 131072 (2000 chunks)")
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
