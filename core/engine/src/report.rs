//! [`DispatchReport`]: everything the engine decided and did for one dispatch, as an immutable
//! value that the CLI prints and the app's views draw.
//!
//! The JSON form is the schema [`SCHEMA`] that the CLI's `--json` and the app share; addresses
//! are `"0x…"` strings, rule ids are `rules.rs`'s (`"O7"`), enums are kebab-case strings. Fields are
//! only ever added within a schema version. Nothing here computes anything, and
//! no type here belongs to a rule module: the planner, the table and the memory model build these
//! values, they do not own them.

use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

use crate::addr::{ByteRange, hex};
use crate::input::{AccessKind, BaseSource, DeviceLimits, DispatchKind, Event, Op, Reason};
use crate::rules::Rule;

/// The report schema's version string.
pub const SCHEMA: &str = "dispatchscope.report/1";

/// A named value in a refusal or escape, already formatted (`"0x100004"`, `"3"`).
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Value {
    /// What the value is.
    pub name: String,
    /// The value as text.
    pub value: String,
}

clone_in_place!(Value { name, value });

impl Value {
    /// A value shown in hex.
    pub fn hex(name: &str, v: u64) -> Self {
        Self {
            name: name.into(),
            value: format!("{v:#x}"),
        }
    }

    /// A value shown in decimal.
    pub fn int(name: &str, v: u64) -> Self {
        Self {
            name: name.into(),
            value: v.to_string(),
        }
    }

    /// A value shown as it is.
    pub fn text(name: &str, v: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            value: v.into(),
        }
    }
}

/// Why a dispatch (or part of it) could not run, by rule.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    /// The rule (`rules.rs`).
    pub rule: Rule,
    /// The decision record behind it.
    pub decision: String,
    /// The slot involved, if one is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<u32>,
    /// The values involved.
    pub values: Vec<Value>,
    /// One sentence naming the values.
    pub message: String,
    /// What would have let it run.
    pub would_run_if: String,
    /// True where the refusal is dispatchscope's addition to the records, not theirs.
    #[serde(default)]
    pub ours: bool,
}

clone_in_place!(Refusal {
    rule,
    decision,
    slot,
    values,
    message,
    would_run_if,
    ours
});

// --- The bound path (O1–O11): what the planner decided for each slot and set. ---

/// A slot's part in its set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "role")]
pub enum Role {
    /// In no set: bound on its own.
    Alone,
    /// Holds its set (O4).
    Holder,
    /// Binds the holder's buffer at an offset (O6).
    Member,
    /// D937: binds exactly `of`'s range and follows it (O3).
    Copy {
        /// The slot it copies.
        of: u32,
    },
    /// Not resolved by the host: not bound; its accesses go by device address (W1).
    Unbound,
}

/// How one slot is bound.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotBinding {
    /// The slot index.
    pub slot: u32,
    /// Its range from the base its accesses are read against (O10).
    pub range: ByteRange,
    /// Whether the dispatch writes through it.
    pub written: bool,
    /// Where the base came from.
    pub base_source: BaseSource,
    /// Whether the host resolved it.
    pub resolved: bool,
    /// Its part in its set.
    #[serde(flatten)]
    pub role: Role,
    /// Index into `DispatchReport::sets` (the plan's sets), if it is in a set.
    pub set: Option<usize>,
    /// The slot whose buffer it binds (itself when alone or holder).
    pub holder: Option<u32>,
    /// Offset in the holder's buffer (O6).
    #[serde(with = "hex")]
    pub offset: u64,
    /// Bytes of the holder's buffer it binds, in holder coordinates: `offset..widened end` (O6).
    pub binding: ByteRange,
    /// Whether `offset` meets minStorageBufferOffsetAlignment (O7).
    pub aligned: bool,
}

impl SlotBinding {
    /// A resolved holder's widened guest range (O5), uploaded and written back (O8); `None` for
    /// a slot that holds no other.
    pub fn holder_range(&self) -> Option<ByteRange> {
        (self.resolved && self.holder == Some(self.slot)).then(|| {
            ByteRange::new(
                self.range.start,
                self.range.start.saturating_add(self.binding.end),
            )
        })
    }
}

/// A join that made a set: two slots sharing bytes, at least one written (O1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Join {
    /// One slot.
    pub a: u32,
    /// The other slot.
    pub b: u32,
    /// The bytes they share (guest addresses).
    pub overlap: ByteRange,
}

/// A member of a set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// The slot index.
    pub slot: u32,
    /// Its offset in the holder's buffer.
    #[serde(with = "hex")]
    pub offset: u64,
    /// Its binding, in holder coordinates.
    pub binding: ByteRange,
    /// Whether the dispatch writes through it.
    pub written: bool,
}

/// How many members (and joins) a set keeps inline, without an allocation of its own: sets are
/// mostly of two to a handful of slots.
pub const INLINE_MEMBERS: usize = 4;

/// A set's members: a vector that holds up to [`INLINE_MEMBERS`] inline.
pub type SetMembers = SmallVec<[Member; INLINE_MEMBERS]>;

/// A set's joins: a vector that holds up to [`INLINE_MEMBERS`] inline.
pub type SetJoins = SmallVec<[Join; INLINE_MEMBERS]>;

/// One set: slots bound as one buffer (O2).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BindSet {
    /// The holding slot (O4).
    pub holder: u32,
    /// The holder's base (guest address).
    #[serde(with = "hex")]
    pub base: u64,
    /// Where the widened binding ends (O5, guest address, exclusive).
    #[serde(with = "hex")]
    pub end: u64,
    /// Every member but the holder, by slot (a plain array in JSON; a set of up to
    /// [`INLINE_MEMBERS`] members keeps them inline).
    pub members: SetMembers,
    /// The joins that made the set (a spanning forest: each member reached once; a plain array
    /// in JSON, inline up to [`INLINE_MEMBERS`]).
    pub joins: SetJoins,
    /// Whether any member is written (the set is written back, O8).
    pub written: bool,
}

impl BindSet {
    /// The widened range the holder is uploaded from (O8).
    pub fn range(&self) -> ByteRange {
        ByteRange::new(self.base, self.end)
    }
}

// --- The chunk table (T2, T5): one lookup, probe by probe. ---

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

/// Whether a `u32` is 0: serde's test for a field left out when 0.
#[allow(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if passes a reference"
)]
pub fn is_zero_u32(v: &u32) -> bool {
    *v == 0
}

/// One lookup, probe by probe, for the debugger.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct LookupTrace {
    /// The chunk looked up.
    pub guest_chunk: u64,
    /// The part of the chunk looked up (`chunk_table::part_of`, a sixteenth of it): a slot hits
    /// when it holds the chunk and reaches this part. Left out of JSON when 0.
    #[serde(default, skip_serializing_if = "crate::report::is_zero_u32")]
    pub part: u32,
    /// Its home slot (`chunk_table::home_slot`).
    pub home_slot: usize,
    /// Every slot read, in order, starting at the home slot.
    pub probes: Vec<ProbeStep>,
    /// How it ended.
    pub outcome: LookupOutcome,
}

// --- Guest memory (M1, M4). ---

/// A readable run (what M1 maps, `rules.rs`): a maximal stretch of pages in one reservation that the guest
/// last left readable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadableRun {
    /// Start of the reservation it lies in.
    #[serde(with = "hex")]
    pub reservation: u64,
    /// Its bytes.
    pub range: ByteRange,
}

/// How a dispatch ran.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Every range known and bound (D953).
    #[default]
    Bound,
    /// Run device-addressed (D964, A1).
    DeviceAddressed,
    /// Not run.
    Refused,
}

impl Mode {
    /// The mode as the JSON and the CLI write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Bound => "bound",
            Mode::DeviceAddressed => "device-addressed",
            Mode::Refused => "refused",
        }
    }
}

/// Why a piece of a readable run was left out (M3), or dropped since (M4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LeftOutReason {
    /// Its host pages are not committed.
    NotCommitted,
    /// Its host pages are shared (aliased), not private.
    NotPrivate,
    /// Its host pages are not read-write: the guest may not write them (a page the guest may not
    /// write is left out whatever the host's protection), the host lowered them, or a guard holds.
    NotReadWrite,
    /// Host mode: the events say the pages qualify, but the process's real mapping of them does
    /// not (shared, file-backed, not read-write, or unmapped): refused before the driver saw them
    /// (`crate::host::check_real`); the report's `detail` says what the kernel said.
    RealMapping,
    /// Host mode: the emulator's commit or guard release for these pages failed (M2), so they
    /// were not handed to the driver; only what reaches them escapes, every other page is mapped.
    /// The report's `detail` says which call failed and how.
    HostCallback,
}

impl LeftOutReason {
    /// A phrase for the explanation.
    pub fn phrase(self) -> &'static str {
        match self {
            LeftOutReason::NotCommitted => "host pages not committed",
            LeftOutReason::NotPrivate => "host pages shared (aliased), not private",
            LeftOutReason::NotReadWrite => "host pages not read-write",
            LeftOutReason::RealMapping => {
                "the process's real mapping contradicts the events (refused before the driver saw it)"
            }
            LeftOutReason::HostCallback => {
                "the emulator's commit or guard release failed for them (M2)"
            }
        }
    }

    /// What the drivers measured here do with such pages, so an explanation says why M3 exists
    /// and not only that it fired ([`crate::host::DRIVER_FACTS`]).
    pub fn driver_note(self) -> &'static str {
        match self {
            LeftOutReason::NotCommitted => {
                "NVIDIA makes every page of an import resident as it maps it, so an uncommitted page would be committed behind the emulator's back (M2 commits first)"
            }
            LeftOutReason::NotPrivate => {
                "RADV refuses shared and memfd-backed pages (VK_ERROR_INVALID_EXTERNAL_HANDLE); NVIDIA and lavapipe import them"
            }
            LeftOutReason::NotReadWrite => {
                "NVIDIA refuses an import holding a page that is not read-write (VK_ERROR_OUT_OF_DEVICE_MEMORY); lavapipe imports it and kills the process with SIGSEGV when the device stores to it"
            }
            LeftOutReason::RealMapping => crate::host::DRIVER_FACTS,
            LeftOutReason::HostCallback => {
                "a page the emulator could not commit or unguard is one the device must not touch: NVIDIA would commit it behind the emulator's back, and lavapipe kills the process when the device stores to a guarded page"
            }
        }
    }
}

/// A piece of a readable run mapped into the device's address space.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PieceReport {
    /// Its guest bytes.
    pub guest: ByteRange,
    /// The device address of its first byte.
    #[serde(with = "hex")]
    pub device_base: u64,
    /// The reservation it lies in.
    #[serde(with = "hex")]
    pub reservation: u64,
    /// The dispatch index before which it was mapped.
    pub mapped_before_dispatch: u64,
    /// Whether it was mapped by an M5 revisit rather than a full mapping.
    pub by_revisit: bool,
}

/// A piece of a readable run left out (M3).
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeftOutReport {
    /// Its guest bytes.
    pub guest: ByteRange,
    /// Why.
    pub reason: LeftOutReason,
    /// For [`LeftOutReason::RealMapping`]: what the kernel said of the host pages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

clone_in_place!(LeftOutReport {
    guest,
    reason,
    detail
});

impl LeftOutReport {
    /// `guest` left out for `reason`, with no further detail.
    pub fn new(guest: ByteRange, reason: LeftOutReason) -> Self {
        Self {
            guest,
            reason,
            detail: None,
        }
    }

    /// `guest` left out for `reason`, with what the kernel or the emulator said.
    pub fn with_detail(guest: ByteRange, reason: LeftOutReason, detail: String) -> Self {
        Self {
            guest,
            reason,
            detail: Some(detail),
        }
    }
}

/// The mappings as a dispatch saw them (M1–M5).
#[derive(Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MappingReport {
    /// The memory manager's generation (M4).
    pub generation: u64,
    /// The generation the mappings were made for.
    pub mapped_generation: u64,
    /// Whether this dispatch mapped again because the generation moved.
    pub remapped: bool,
    /// Full mappings made so far, this one included.
    pub remaps_total: u64,
    /// M2: pages committed before mapping, for this dispatch.
    pub committed_pages: u64,
    /// M2: write-watch guards released.
    pub guards_released: u64,
    /// M2: pages noted written.
    pub pages_noted_written: u64,
    /// The readable runs (M1).
    pub runs: Vec<ReadableRun>,
    /// Mapped pieces.
    pub pieces: Vec<PieceReport>,
    /// Left-out pieces and why.
    pub left_out: Vec<LeftOutReport>,
    /// Backend imports made since the previous dispatch (a full mapping or revisits).
    pub imports_made: u64,
    /// Backend imports dropped since the previous dispatch.
    pub imports_dropped: u64,
}

clone_in_place!(MappingReport {
    generation,
    mapped_generation,
    remapped,
    remaps_total,
    committed_pages,
    guards_released,
    pages_noted_written,
    runs,
    pieces,
    left_out,
    imports_made,
    imports_dropped
});

/// Where the table lies (T6).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    /// Device-local memory.
    #[default]
    DeviceLocal,
    /// Host-visible memory: the device had no room.
    HostVisible,
}

/// The chunk table as a dispatch used it (T1–T6).
#[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TableReport {
    /// Bytes per chunk (T1).
    #[serde(with = "hex")]
    pub chunk_bytes: u64,
    /// Why that size (T1).
    pub chunk_reason: String,
    /// Slots in the table.
    pub capacity: u64,
    /// Chunks stored.
    pub n_chunks: u64,
    /// n_chunks / capacity.
    pub load: f64,
    /// T2's probe bound.
    pub probe_bound: u32,
    /// The hash's multiplier, chosen by the build for its keys: a chunk's home slot is
    /// `(chunk * multiplier) >> (64 - log2(capacity))`. 0 in reports written before it was recorded.
    #[serde(default, with = "hex")]
    pub multiplier: u64,
    /// Mean probes a stored chunk needs.
    pub mean_probes_hit: f64,
    /// Mean probes a miss needs.
    pub mean_probes_miss: f64,
    /// histogram\[k] = stored chunks that need k probes.
    pub probe_histogram: Vec<u64>,
    /// Why the table was built whole before this dispatch, if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebuilt: Option<String>,
    /// Chunks inserted incrementally before this dispatch.
    pub inserted: u64,
    /// Chunks removed incrementally before this dispatch.
    pub removed: u64,
    /// Full builds so far.
    pub builds_total: u64,
    /// Where it lies (T6).
    pub placement: Placement,
    /// Its size in bytes.
    pub table_bytes: u64,
    /// T3: the table's device address, as the push block carries it.
    #[serde(with = "hex")]
    pub device_address: u64,
    /// T3: the push-block word that names it.
    pub push_word: u32,
}

clone_in_place!(TableReport {
    chunk_bytes,
    chunk_reason,
    capacity,
    n_chunks,
    load,
    probe_bound,
    multiplier,
    mean_probes_hit,
    mean_probes_miss,
    probe_histogram,
    rebuilt,
    inserted,
    removed,
    builds_total,
    placement,
    table_bytes,
    device_address,
    push_word
});

/// Where one access went.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "to")]
pub enum Route {
    /// Through a bound slot: the holder's buffer at this offset (O6, O8).
    Bound {
        /// The holder slot.
        holder: u32,
        /// Byte offset in the holder's buffer.
        #[serde(with = "hex")]
        offset: u64,
    },
    /// By device address to guest memory (W1–W3).
    Device {
        /// The guest address.
        #[serde(with = "hex")]
        address: u64,
    },
    /// The workgroup's LDS (P1).
    Lds {
        /// Byte offset in LDS.
        #[serde(with = "hex")]
        offset: u64,
    },
    /// The lane's scratch (P1).
    Scratch {
        /// Byte offset in the lane's scratch.
        #[serde(with = "hex")]
        offset: u64,
    },
    /// Not run: the dispatch was refused.
    NotRun,
}

/// One access as it ran.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessReport {
    /// Its index in the stream.
    pub index: usize,
    /// Workgroup.
    pub workgroup: u32,
    /// Wave.
    pub wave: u32,
    /// Lane.
    pub lane: u32,
    /// Program counter.
    #[serde(with = "hex")]
    pub pc: u64,
    /// Instruction kind.
    pub kind: AccessKind,
    /// Load or store.
    pub op: Op,
    /// Bytes.
    pub size_bytes: u32,
    /// Where it went.
    pub route: Route,
    /// The rule that routed it.
    pub rule: Rule,
    /// T5: the lookups of its first and last byte's chunks (one when they share a chunk).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lookups: Vec<LookupTrace>,
    /// The device address of its first byte, if it was found.
    #[serde(with = "hex::option", default, skip_serializing_if = "Option::is_none")]
    pub device_address: Option<u64>,
    /// Values it read (a load) or wrote (a store).
    pub values: Vec<u32>,
    /// Whether some of its bytes escaped (T4).
    pub escaped: bool,
}

/// What kind of escape (T4) an access made: why no mapping held its address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EscapeClass {
    /// No reservation holds the address.
    NoReservation,
    /// A reservation holds it, but the guest left the page unreadable (M1 maps readable runs).
    NotReadable,
    /// The page lies in a left-out piece (M3).
    LeftOut,
    /// The page was mapped once and has been released or decommitted since (M4).
    Dropped,
    /// The chunk is mapped but the lookup hit the probe bound: a table defect (T2).
    ProbeBound,
}

impl EscapeClass {
    /// The class as JSON writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            EscapeClass::NoReservation => "no-reservation",
            EscapeClass::NotReadable => "not-readable",
            EscapeClass::LeftOut => "left-out",
            EscapeClass::Dropped => "dropped",
            EscapeClass::ProbeBound => "probe-bound",
        }
    }
}

/// When something happened: the event's number in the session and the dispatch it preceded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct When {
    /// The event's number, counting every event of the session from 0.
    pub event: u64,
    /// The dispatch it came before.
    pub before_dispatch: u64,
}

/// An access (or part of one) that no mapping held (T4).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Escape {
    /// The access's index in the stream.
    pub access: usize,
    /// Lane.
    pub lane: u32,
    /// Wave.
    pub wave: u32,
    /// Program counter.
    #[serde(with = "hex")]
    pub pc: u64,
    /// The first guest address that escaped.
    #[serde(with = "hex")]
    pub address: u64,
    /// Load or store.
    pub op: Op,
    /// Why no mapping held it.
    pub class: EscapeClass,
    /// The rule (T4, or T2 for a table defect).
    pub rule: Rule,
    /// Its decision record.
    pub decision: String,
    /// The left-out reason, for [`EscapeClass::LeftOut`] and [`EscapeClass::Dropped`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<LeftOutReason>,
    /// When the page was dropped, for [`EscapeClass::Dropped`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<When>,
    /// One sentence naming the values.
    pub message: String,
    /// What would have let it reach guest memory.
    pub would_run_if: String,
    /// The lookup that missed.
    pub lookup: LookupTrace,
}

/// A chunk a device store marked (C1).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    /// The table slot whose mark word was set.
    pub table_slot: usize,
    /// The chunk's guest bytes.
    pub guest: ByteRange,
    /// Stores that set it.
    pub stores: u32,
}

/// A protected target that lost trust.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetLost {
    /// Its id.
    pub id: u32,
    /// Its name.
    pub name: String,
    /// Its bytes.
    pub range: ByteRange,
    /// What made it lose trust ("marked chunk …", "write-back of slot …").
    pub by: String,
}

clone_in_place!(TargetLost {
    id,
    name,
    range,
    by
});

/// C2: what went to the command processor after the dispatch.
#[derive(Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandOff {
    /// Pages the write-watch noted written (D824).
    pub pages_noted_written: Vec<ByteRange>,
    /// Protected targets that lost trust (D720).
    pub targets_distrusted: Vec<TargetLost>,
}

clone_in_place!(HandOff {
    pages_noted_written,
    targets_distrusted
});

/// One word a holder wrote back (O8).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WordWritten {
    /// Its guest address.
    #[serde(with = "hex")]
    pub address: u64,
    /// The guest's word before the write-back, as a read of the guest's memory found it; `None`
    /// where that read failed (the report's `host_path.failures` says why): never made up.
    #[serde(with = "hex::option", default, skip_serializing_if = "Option::is_none")]
    pub old: Option<u64>,
    /// The word written back.
    #[serde(with = "hex")]
    pub new: u64,
    /// Bytes of the word (4, fewer at the holder's end).
    pub bytes: u8,
    /// The emulator refused its write: it did not land (`host_path.failures` says why).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lost: bool,
}

impl WordWritten {
    /// Whether the write-back changed the word (a word whose old value is unknown counts as
    /// changed).
    pub fn changed(&self) -> bool {
        self.old != Some(self.new)
    }

    /// The new value as `0x%08x`, or `0x%08x (lost)` where its write did not land.
    pub fn new_text(&self) -> String {
        if self.lost {
            format!("{:#010x} (lost: not written)", self.new)
        } else {
            format!("{:#010x}", self.new)
        }
    }

    /// The old value as `0x%08x`, or `unknown` where its read failed.
    pub fn old_text(&self) -> String {
        self.old
            .map_or_else(|| "unknown".to_owned(), |o| format!("{o:#010x}"))
    }
}

/// O8: a holder's masked write-back.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteBack {
    /// The holder slot.
    pub holder: u32,
    /// The holder's widened range.
    pub range: ByteRange,
    /// Words in the holder.
    pub words_total: u64,
    /// The words written back: those a store set the mask of (O9), every one of them on the CPU
    /// reference; a device pass's full-screen holder lists its first few (see `words_not_listed`).
    pub words: Vec<WordWritten>,
    /// Words written back beyond those `words` lists: a device pass's output holder writes
    /// millions, and a report's size must not grow with the lanes, so it lists the first few with
    /// their values and counts the rest, which `runs` places.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub words_not_listed: u64,
    /// Where the written words lie when not all are listed: the runs of consecutive written words,
    /// in address order, at most [`WriteBack::LISTED_RUNS`]; empty when `words` lists them all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<ByteRange>,
    /// Runs past the [`WriteBack::LISTED_RUNS`] that `runs` holds (counted, never lost silently).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub runs_not_listed: u64,
}

clone_in_place!(WriteBack {
    holder,
    range,
    words_total,
    words,
    words_not_listed,
    runs,
    runs_not_listed
});

impl WriteBack {
    /// The runs a write-back that does not list every word places, at most.
    pub const LISTED_RUNS: usize = 64;

    /// Every word written back, listed or not.
    pub fn words_written(&self) -> u64 {
        self.words.len() as u64 + self.words_not_listed
    }

    /// Whether `words` lists every word written back.
    pub fn lists_every_word(&self) -> bool {
        self.words_not_listed == 0
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Which of L1's two cases a hazard is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HazardKind {
    /// L1 as `rules.rs` states it: a holder's write-back lands over a device store to the same word.
    #[default]
    WriteBackOverDeviceStore,
    /// The read-side twin, our addition: a bound load of a word the dispatch stored to by device
    /// address earlier reads the value uploaded before the dispatch (O8), not the store.
    StaleBoundLoad,
}

/// L1: the dispatch stored by device address to bytes a resolved holder writes back, or (our
/// addition) reads back through its binding.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hazard {
    /// Always L1.
    pub rule: Rule,
    /// Which case: the write-back lands last, or a bound load reads the upload.
    #[serde(default)]
    pub kind: HazardKind,
    /// Whether the hazard is dispatchscope's addition (the read-side twin), not `rules.rs`'s L1.
    #[serde(default)]
    pub ours: bool,
    /// For [`HazardKind::StaleBoundLoad`], the bound load that read the upload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound_load: Option<usize>,
    /// Its decision record.
    pub decision: String,
    /// The holder whose write-back lands last.
    pub holder: u32,
    /// The guest word both wrote.
    #[serde(with = "hex")]
    pub address: u64,
    /// The device-addressed store.
    pub device_store: usize,
    /// The last bound store to the word.
    pub bound_store: Option<usize>,
    /// One sentence.
    pub message: String,
}

clone_in_place!(Hazard {
    rule,
    kind,
    ours,
    bound_load,
    decision,
    holder,
    address,
    device_store,
    bound_store,
    message
});

/// An event applied before a dispatch, and what it did.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventReport {
    /// Its number in the session.
    pub index: u64,
    /// The event.
    pub event: Event,
    /// Whether the generation moved (M4).
    pub generation_moved: bool,
    /// A dispatch whose fence the event waited on (M5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waited_for: Option<u64>,
    /// What it did, one line each, with rule ids.
    pub effects: Vec<String>,
}

clone_in_place!(EventReport {
    index,
    event,
    generation_moved,
    waited_for,
    effects
});

/// C3: what was written into guest memory before the dispatch.
#[derive(Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BeforeDispatch {
    /// Deferred copies written, as (address, bytes).
    pub copies: Vec<ByteRange>,
    /// Copies still deferred: a bound dispatch writes first only the copies up to the last one a
    /// holder covers; the others wait.
    pub still_deferred: usize,
    /// Pages the copies made the write-watch note written (D824).
    pub pages_noted_written: Vec<ByteRange>,
    /// Targets the copies distrusted (D720).
    pub targets_distrusted: Vec<TargetLost>,
}

clone_in_place!(BeforeDispatch {
    copies,
    still_deferred,
    pages_noted_written,
    targets_distrusted
});

/// Counts for tables and filters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Sets of two or more slots.
    pub sets: usize,
    /// Refusals.
    pub refusals: usize,
    /// Escapes.
    pub escapes: usize,
    /// Marked chunks.
    pub marks: usize,
    /// Accesses.
    pub accesses: usize,
    /// Words written back.
    pub words_written_back: usize,
    /// L1 hazards.
    pub hazards: usize,
}

/// Everything about one dispatch.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub struct DispatchReport {
    /// [`SCHEMA`].
    pub schema: String,
    /// The dispatch's index in the session.
    pub index: u64,
    /// The program's guest address.
    #[serde(with = "hex")]
    pub program: u64,
    /// The label the input gave.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub label: String,
    /// Compute or graphics.
    pub kind: DispatchKind,
    /// How it ran.
    pub mode: Mode,
    /// The backend that ran it.
    pub backend: String,
    /// The limits it was planned against.
    pub device: DeviceLimits,
    /// Why the host could not know its ranges (A1).
    pub reasons: Vec<Reason>,
    /// One line on why it ran in its mode.
    pub mode_reason: String,
    /// Every slot's binding (O1–O10).
    pub slots: Vec<SlotBinding>,
    /// Sets of two or more slots.
    pub sets: Vec<BindSet>,
    /// Refusals.
    pub refusals: Vec<Refusal>,
    /// Events applied since the previous dispatch.
    pub events_before: Vec<EventReport>,
    /// C3.
    pub before: BeforeDispatch,
    /// M1–M5, for a device-addressed dispatch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mappings: Option<MappingReport>,
    /// T1–T6, for a device-addressed dispatch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<TableReport>,
    /// Every access, in stream order.
    pub accesses: Vec<AccessReport>,
    /// T4.
    pub escapes: Vec<Escape>,
    /// C1.
    pub marks: Vec<Mark>,
    /// C2.
    pub hand_off: HandOff,
    /// O8.
    pub write_back: Vec<WriteBack>,
    /// L1.
    pub hazards: Vec<Hazard>,
    /// Counts.
    pub counts: Counts,
    /// The device's instrumentation of a full-screen pass (counters, sites, escape log, captured
    /// lanes, positive control), for a dispatch the backend ran as a translated module.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instrumented: Option<InstrumentedReport>,
    /// Host mode: what the emulator's memory did to this dispatch (calls that failed and what
    /// they lost, events that waited for it, the checked mode's look at the real mappings).
    #[serde(default, skip_serializing_if = "HostPathReport::is_empty")]
    pub host_path: HostPathReport,
}

/// Host mode: what happened between the engine and the emulator's memory for one dispatch.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostPathReport {
    /// Calls into the emulator's memory that failed, each with what it cost (at most
    /// `memory::HOST_FAILURES_KEPT`; `failures_not_listed` counts the rest).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<HostFailure>,
    /// Failures past the list.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failures_not_listed: u64,
    /// M5: events that touched memory this dispatch could reach while it was prepared, refused
    /// until its complete (the emulator was told to complete it first).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waited: Vec<WaitedEvent>,
    /// The checked mode's look at the real mappings before the device ran, if it looked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checked: Option<RealCheck>,
}

impl HostPathReport {
    /// Nothing to say (simulated memory, or a dispatch the emulator's memory served fully).
    pub fn is_empty(&self) -> bool {
        self.failures.is_empty()
            && self.failures_not_listed == 0
            && self.waited.is_empty()
            && self.checked.is_none()
    }

    /// Whether any guest bytes the device wrote did not land.
    pub fn lost_bytes(&self) -> u64 {
        self.failures
            .iter()
            .filter_map(|f| f.lost)
            .map(|r| r.size_bytes())
            .sum()
    }
}

/// What a failed call into the emulator's memory was doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HostFailureKind {
    /// O8: a run of the device's written words did not land: those words are lost.
    WriteBack,
    /// The CPU reference's store did not land.
    Store,
    /// The CPU reference's load could not read its bytes: its values are unknown.
    Load,
    /// The old value of a listed write-back word could not be read: it is unknown (the word
    /// itself was written).
    OldValue,
    /// C2: the emulator was not told of a marked chunk.
    HandOff,
}

impl HostFailureKind {
    /// In words.
    pub fn words(self) -> &'static str {
        match self {
            HostFailureKind::WriteBack => "write-back words lost (O8)",
            HostFailureKind::Store => "store lost",
            HostFailureKind::Load => "load's bytes unknown",
            HostFailureKind::OldValue => "old value unknown",
            HostFailureKind::HandOff => "hand-off not delivered (C2)",
        }
    }
}

/// One call into the emulator's memory that failed during a dispatch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostFailure {
    /// What the call was doing.
    pub kind: HostFailureKind,
    /// The call, the addresses and the emulator's (or the kernel's) answer.
    pub error: crate::host::HostError,
    /// The guest bytes that did not land, for a write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost: Option<ByteRange>,
    /// The bytes the device wrote there that did not land (the first [`HostFailure::BYTES_KEPT`]).
    #[serde(
        with = "crate::addr::bytes_hex",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub bytes: Vec<u8>,
}

impl HostFailure {
    /// Bytes of a lost write kept in the report.
    pub const BYTES_KEPT: usize = 4096;
}

/// M5: an event refused while a prepared dispatch could reach the memory it touched.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitedEvent {
    /// The event's name (`release`, `decommit`, `protect` …).
    pub event: String,
    /// The guest bytes it touched.
    pub range: ByteRange,
    /// The part of the dispatch's reach it touched.
    pub reached: ByteRange,
}

/// The checked mode: the real mappings of every imported piece a dispatch can reach, read again
/// before the device ran, and what contradicted the events.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RealCheck {
    /// Pieces whose real mapping was read.
    pub pieces: u64,
    /// Host bytes they cover.
    pub bytes: u64,
    /// Pieces dropped because the process no longer maps them as the events said (each also a
    /// left-out piece of the mappings, with the contradiction in its detail).
    pub contradictions: Vec<String>,
    /// Pieces the host could not tell about (the check was skipped for them).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unknown: u64,
}

clone_in_place!(DispatchReport {
    schema,
    index,
    program,
    label,
    kind,
    mode,
    backend,
    device,
    reasons,
    mode_reason,
    slots,
    sets,
    refusals,
    events_before,
    before,
    mappings,
    table,
    accesses,
    escapes,
    marks,
    hand_off,
    write_back,
    hazards,
    counts,
    instrumented,
    host_path
});

impl DispatchReport {
    /// The refusals, escapes and hazards, as the rules they cite.
    pub fn rules_cited(&self) -> Vec<Rule> {
        let mut v: Vec<Rule> = self
            .refusals
            .iter()
            .map(|r| r.rule)
            .chain(self.escapes.iter().map(|e| e.rule))
            .chain(self.hazards.iter().map(|h| h.rule))
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}

/// What the device recorded of one instrumented pass (built by `crate::instrument::decode`): its
/// size is bounded by the program's sites and the two logs' capacities, never by its lanes.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstrumentedReport {
    /// The grid's width and height in lanes (one lane per pixel).
    pub grid: [u32; 2],
    /// Lanes that ran (`grid[0] * grid[1]`).
    pub lanes: u64,
    /// Workgroups that ran.
    pub workgroups: u64,
    /// Counters over every lane.
    pub counters: InstrumentCounters,
    /// T2: lookups by probes read, from 1 (index 0) up; the last bucket holds that many or more.
    pub probe_histogram: Vec<u64>,
    /// One per access site the translator numbered, in site order.
    pub sites: Vec<SiteReport>,
    /// The escape log (T4), bounded: the first escapes the device logged (every escape as it
    /// happened, or each escaping lane's first when the lane ended: `dispatchscope-vk`'s
    /// instrumentation says which); every escape is counted by site whatever the log keeps.
    pub escapes: Vec<LoggedEscape>,
    /// Escapes counted but not logged because the log was full.
    pub escapes_not_logged: u64,
    /// Every access of the selected lanes, in each lane's order, bounded.
    pub captured: Vec<CapturedAccess>,
    /// Captured accesses counted but not kept because the capture was full.
    pub captured_not_logged: u64,
    /// The positive control: a canary lookup that must escape.
    pub control: ControlStatus,
    /// Where on the screen the pass escaped and probed: every escape and extra probe, summed by
    /// heat cell. Absent in sections recorded before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heat: Option<HeatMap>,
}

clone_in_place!(InstrumentedReport {
    grid,
    lanes,
    workgroups,
    counters,
    probe_histogram,
    sites,
    escapes,
    escapes_not_logged,
    captured,
    captured_not_logged,
    control,
    heat
});

impl InstrumentedReport {
    /// The escapes the device counted over every lane (logged or not), as a count.
    pub fn escapes(&self) -> usize {
        usize::try_from(self.counters.escapes).unwrap_or(usize::MAX)
    }
}

/// An instrumented pass's counts by screen region: cells of `scale × scale` workgroups, row by
/// row, at most `HEAT_SIDE` (32) a side whatever the resolution.
#[derive(Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeatMap {
    /// Workgroups a side of one cell.
    pub scale: u32,
    /// Cells a row and rows of cells.
    pub cells: [u32; 2],
    /// Escapes in each cell (the positive control left out).
    pub escapes: Vec<u64>,
    /// Probes past each lookup's first, in each cell (T2).
    pub extra_probes: Vec<u64>,
}

clone_in_place!(HeatMap {
    scale,
    cells,
    escapes,
    extra_probes
});

/// Counters over every lane of an instrumented pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstrumentCounters {
    /// Accesses that reached guest memory by device address (through the helper).
    pub guest: u64,
    /// Accesses routed to LDS (P1).
    pub lds: u64,
    /// Accesses routed to scratch (P1).
    pub scratch: u64,
    /// Accesses through bound holders (O6–O9).
    pub bound: u64,
    /// Chunk lookups (T5: one per guest access, two where its bytes span two chunks).
    pub lookups: u64,
    /// Lookups that found their chunk.
    pub hits: u64,
    /// Lookups that did not.
    pub misses: u64,
    /// Accesses with at least one escaped byte (T4), the positive control left out.
    pub escapes: u64,
    /// Device stores that marked at least one chunk (C1).
    pub stores_marked: u64,
}

/// One access site of the translated program: what the translator said of it and what the device
/// counted there.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteReport {
    /// The site's number.
    pub site: u32,
    /// The guest instruction's program counter.
    #[serde(with = "hex")]
    pub pc: u64,
    /// The instruction kind.
    pub kind: AccessKind,
    /// Load or store.
    pub op: Op,
    /// Bytes per access.
    pub size_bytes: u32,
    /// Accesses made there, every route.
    pub accesses: u64,
    /// Accesses with an escaped byte.
    pub escapes: u64,
    /// Chunk lookups made there.
    pub lookups: u64,
    /// Probes read by those lookups, in all.
    pub probes_sum: u64,
    /// The longest lookup there, in probes.
    pub probes_max: u32,
}

/// One escape of the device's log (T4), classified on the host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoggedEscape {
    /// Workgroup.
    pub workgroup: u32,
    /// Wave (32 lanes).
    pub wave: u32,
    /// Lane within the wave.
    pub lane: u32,
    /// The lane's pixel.
    pub pixel: [u32; 2],
    /// The access site.
    pub site: u32,
    /// The site's program counter.
    #[serde(with = "hex")]
    pub pc: u64,
    /// The access's first guest address.
    #[serde(with = "hex")]
    pub address: u64,
    /// Bytes accessed.
    pub size_bytes: u32,
    /// Load or store.
    pub op: Op,
    /// Which bytes escaped: bit `i` for byte `i` of the access.
    pub escaped_bytes: u32,
    /// Why no mapping held the first escaped byte.
    pub class: EscapeClass,
    /// The left-out reason, where there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<LeftOutReason>,
    /// The nearest mapped piece below the address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nearest_below: Option<ByteRange>,
    /// The nearest mapped piece above the address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nearest_above: Option<ByteRange>,
}

/// One access of a captured lane.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapturedAccess {
    /// Workgroup.
    pub workgroup: u32,
    /// Wave (32 lanes).
    pub wave: u32,
    /// Lane within the wave.
    pub lane: u32,
    /// The lane's pixel.
    pub pixel: [u32; 2],
    /// The access site.
    pub site: u32,
    /// The site's program counter.
    #[serde(with = "hex")]
    pub pc: u64,
    /// Load or store.
    pub op: Op,
    /// Where it went (for a bound access, the holder and the offset in its buffer, O6).
    pub route: Route,
    /// For a bound access, the slot it went through and the byte offset in that slot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<(u32, u64)>,
    /// Bytes accessed.
    pub size_bytes: u32,
    /// Values loaded or stored, one word per 4 bytes.
    pub values: Vec<u32>,
    /// Which bytes escaped (bit `i` for byte `i`).
    pub escaped_bytes: u32,
}

clone_in_place!(CapturedAccess {
    workgroup,
    wave,
    lane,
    pixel,
    site,
    pc,
    op,
    route,
    slot,
    size_bytes,
    values,
    escaped_bytes
});

/// Whether the positive control fired: the canary lookup must escape, or the instrumentation that
/// reported nothing cannot be trusted to have seen anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ControlStatus {
    /// The canary escaped and was counted: the miss path works.
    Fired,
    /// The canary did not escape: this pass's instrumentation is not validated.
    NotFired,
}

/// The loss report's schema name.
pub const LOSS_SCHEMA: &str = "dispatchscope.device-loss/1";

/// What the engine knew when the emulator's fence reported the device lost
/// (`Engine::device_lost`): every dispatch in flight with its plan, its mappings and table, and
/// what its program did in earlier dispatches; and where the device's own fault report
/// (`VK_EXT_device_fault`) points, in guest terms.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceLossReport {
    /// [`LOSS_SCHEMA`].
    pub schema: String,
    /// What the emulator said (its fence's status, in its words).
    pub status: String,
    /// The index the next dispatch would have had.
    pub next_dispatch: u64,
    /// The dispatches in flight, oldest first: the ones the loss may have come from.
    pub in_flight: Vec<LostDispatch>,
    /// The device's fault report, where it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<FaultReport>,
    /// Dispatches completed before the loss, and how many of those ran device-addressed.
    pub completed: u64,
    /// What the report makes of it, in sentences (the likeliest dispatch first).
    pub findings: Vec<String>,
}

/// A dispatch in flight when the device was lost.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LostDispatch {
    /// Its index.
    pub index: u64,
    /// Its program's guest address.
    #[serde(with = "hex")]
    pub program: u64,
    /// Its label.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub label: String,
    /// Bound, device-addressed or refused.
    pub mode: Mode,
    /// Why, in one sentence.
    pub mode_reason: String,
    /// Each slot's binding as planned.
    pub slots: Vec<SlotBinding>,
    /// The memory's generation it was mapped against (M4).
    pub generation: u64,
    /// The mappings' version then, with the pieces mapped and left out.
    pub mappings_version: u64,
    /// Pieces mapped.
    pub pieces: u64,
    /// Pieces left out.
    pub left_out: u64,
    /// The table it read (device-addressed), as its prepare placed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<TableReport>,
    /// The table's version it read.
    #[serde(default)]
    pub table_version: u64,
    /// What its program did in earlier dispatches.
    pub history: ProgramHistory,
}

/// What one program did in the dispatches completed so far.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgramHistory {
    /// Dispatches of it completed.
    pub runs: u64,
    /// Of those, refused.
    pub refused: u64,
    /// Of those, device-addressed.
    pub device_addressed: u64,
    /// Escapes (T4) over all of them, by class.
    pub escapes: Vec<(EscapeClass, u64)>,
    /// The rules that refused it, with how often.
    pub refusals: Vec<(Rule, u64)>,
    /// The last escape's sentence, where it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_escape: Option<String>,
    /// The last dispatch of it completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_dispatch: Option<u64>,
}

impl ProgramHistory {
    /// Escapes of every class.
    pub fn escapes_total(&self) -> u64 {
        self.escapes.iter().map(|(_, n)| n).sum()
    }
}

/// The device's fault report (`VK_EXT_device_fault`), mapped to guest terms.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultReport {
    /// The driver's description.
    pub description: String,
    /// Each faulting address it gave, and where it lands.
    pub addresses: Vec<FaultAddress>,
}

/// One faulting device address and what the engine knows of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultAddress {
    /// The device address (as the driver reports it: a page's, or a range's start).
    #[serde(with = "hex")]
    pub address: u64,
    /// What the driver says of it (read, write, execute, invalid pointer…).
    pub kind: String,
    /// Where it lands.
    pub lands: FaultLands,
}

/// Where a faulting device address lands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "in")]
pub enum FaultLands {
    /// In an import of guest memory: a mapped piece's, at guest `guest` of `reservation`, chunk
    /// `chunk` of the table.
    Guest {
        /// The guest address.
        #[serde(with = "hex")]
        guest: u64,
        /// The reservation holding it.
        reservation: ByteRange,
        /// The mapped piece holding it, if it is still mapped (else the import is held for the
        /// dispatches in flight).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        piece: Option<ByteRange>,
        /// Its chunk (T1), by number.
        #[serde(with = "hex")]
        chunk: u64,
    },
    /// In the chunk table the helper reads.
    Table {
        /// Bytes into the table.
        #[serde(with = "hex")]
        offset: u64,
    },
    /// In no import and no buffer of the engine: an address no lookup of the helper hands out
    /// (an escape computed past the table, a stale or wild pointer, or the emulator's own buffer).
    Unknown {
        /// The nearest import below it, as guest bytes, with how far past its end the address lies.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        nearest_below: Option<(ByteRange, u64)>,
    },
}
