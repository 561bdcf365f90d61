//! Semantic diffs of reports: [`DispatchDiff`], every decision that changed between two reports of
//! one dispatch, and [`SessionDiff`], two sessions matched dispatch by dispatch.
//!
//! A diff is plain data (the JSON schema [`DIFF_SCHEMA`], the CLI's text, the app's panels); each
//! change is one [`Change`] variant with its before and after and a sentence ([`Change::sentence`]).
//! Nothing here runs the engine: a diff compares two reports the engine made.
//!
//! What is compared, and by which key (a keyed item that is only on one side is added or removed;
//! one on both sides whose fields differ is changed):
//! - the program and the label; the mode (A1, W2 and every refusal decide it);
//! - each slot, by slot number: its role, its holder (O4), its offset in the holder (O6's member
//!   offsets), its binding in holder coordinates (O5's widened end), whether it is aligned (O7);
//! - each set, by holder: its widened range (O5) and its member slots (O2);
//! - refusals, as a multiset of (rule, slot, sentence): a refusal whose values changed is removed
//!   and added;
//! - escapes (T4), as a multiset of (access, pc, class, address, op);
//! - marks (C1), by the chunk's guest bytes: the stores that set it (the mark word's table slot is
//!   the table's layout, compared with the table);
//! - write-back words (O8, O9), by (holder, address): the guest word before and the word written;
//! - hazards (L1 and its read-side twin), as a multiset of (kind, holder, address, stores);
//! - mapped pieces (M3), by guest bytes: the device base, the dispatch before which it was mapped,
//!   and whether a revisit (M5) mapped it; left-out pieces by guest bytes: the reason;
//! - the chunk table: its chunk size (T1), and its probes (T2: capacity, chunks, probe bound and
//!   the probe histogram);
//! - each access, by index: its route and the values it read or wrote.
//!
//! Not compared: the schema string, the index (the match says which dispatches are paired), the
//! backend's name, the limits (a [`SessionDiff`] lists them once in [`SessionDiff::limits`]), the
//! mode's sentence (it follows from the mode and the refusals), events, C3's copies, the hand-off,
//! the counts (they follow from what is compared) and an instrumented pass's section.
//!
//! How two sessions are matched ([`match_dispatches`]): by order when both have the same program
//! at every position; otherwise by program address: the longest common subsequence of the two
//! sequences of program addresses (after their common prefix and suffix), so that a dispatch
//! inserted or removed in one session leaves the rest paired with their counterparts. Where the
//! sequences left between the common prefix and suffix would need more than [`MAX_LCS_CELLS`]
//! cells, that middle is paired by order instead (programs may then differ within a pair, and the
//! diff says so with [`Change::Program`]), and [`Matching::ByOrderPastLimit`] says it was.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::addr::{ByteRange, hex};
use crate::input::Op;
use crate::report::{
    DispatchReport, EscapeClass, HazardKind, LeftOutReason, Mode, Role, Route, SlotBinding,
    TableReport,
};
use crate::rules::Rule;

/// The diff schema's version string.
pub const DIFF_SCHEMA: &str = "dispatchscope.diff/1";

/// The most cells the program-address alignment fills (the middle's lengths multiplied); past it
/// the middle is paired by order.
pub const MAX_LCS_CELLS: u64 = 1 << 24;

/// How much of a pair of reports a diff compared.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "compared", rename_all = "kebab-case")]
pub enum Compared {
    /// Every decision listed in this module's docs.
    Everything,
    /// Only the plan's decisions (mode, slots, sets, refusals): the run's (escapes, marks,
    /// write-back, hazards, mappings, table, accesses) were not re-run and are not compared.
    PlanOnly {
        /// Why the run's decisions were not compared.
        why: String,
    },
}

impl Compared {
    /// Whether the run's decisions were compared.
    pub fn everything(&self) -> bool {
        matches!(self, Compared::Everything)
    }
}

/// A slot's binding state, as a change shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WordValues {
    /// The guest's word before the write-back.
    #[serde(with = "hex")]
    pub old: u64,
    /// The word written back.
    #[serde(with = "hex")]
    pub new: u64,
}

/// A write-back's words past those listed: how many, and where (their runs, and the runs past
/// those listed).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unlisted {
    /// Words written back but not listed.
    pub words: u64,
    /// The runs listed.
    pub runs: Vec<ByteRange>,
    /// Runs past those listed.
    pub runs_not_listed: u64,
}

/// A mapped piece's state, as a change shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PieceState {
    /// The device address of its first byte.
    #[serde(with = "hex")]
    pub device_base: u64,
    /// The dispatch before which it was mapped.
    pub mapped_before_dispatch: u64,
    /// Whether an M5 revisit mapped it.
    pub by_revisit: bool,
}

/// The table's probes (T2), as a change shows them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeStats {
    /// Slots in the table.
    pub capacity: u64,
    /// Chunks stored.
    pub n_chunks: u64,
    /// The probe bound.
    pub probe_bound: u32,
    /// histogram\[k] = stored chunks that need k probes.
    pub probe_histogram: Vec<u64>,
}

impl ProbeStats {
    /// The probe statistics of `t`.
    pub fn of(t: &TableReport) -> Self {
        Self {
            capacity: t.capacity,
            n_chunks: t.n_chunks,
            probe_bound: t.probe_bound,
            probe_histogram: t.probe_histogram.clone(),
        }
    }

    /// The most probes a stored chunk needs.
    pub fn max_probes(&self) -> usize {
        self.probe_histogram
            .iter()
            .rposition(|&n| n > 0)
            .unwrap_or(0)
    }
}

/// An access's outcome, as a change shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessOutcome {
    /// Where it went.
    pub route: Route,
    /// Values it read or wrote.
    pub values: Vec<u32>,
    /// Whether some of its bytes escaped.
    pub escaped: bool,
}

/// One decision that changed between two reports of a dispatch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "change",
    rename_all = "kebab-case",
    rename_all_fields = "kebab-case"
)]
pub enum Change {
    /// The program differs (only in a pair matched by order past [`MAX_LCS_CELLS`]).
    Program {
        /// A's program.
        #[serde(with = "hex")]
        before: u64,
        /// B's program.
        #[serde(with = "hex")]
        after: u64,
    },
    /// The label differs.
    Label {
        /// A's label.
        before: String,
        /// B's label.
        after: String,
    },
    /// How it ran.
    Mode {
        /// A's mode.
        before: Mode,
        /// B's mode.
        after: Mode,
    },
    /// A slot is in one report only (the inputs differ).
    SlotPresence {
        /// The slot.
        slot: u32,
        /// Whether A has it.
        before: bool,
        /// Whether B has it.
        after: bool,
    },
    /// A slot's part in its set.
    SlotRole {
        /// The slot.
        slot: u32,
        /// A's role.
        before: Role,
        /// B's role.
        after: Role,
    },
    /// The slot whose buffer a slot binds (O4).
    SlotHolder {
        /// The slot.
        slot: u32,
        /// A's holder.
        before: Option<u32>,
        /// B's holder.
        after: Option<u32>,
    },
    /// A slot's offset in its holder's buffer (O6).
    SlotOffset {
        /// The slot.
        slot: u32,
        /// A's offset.
        #[serde(with = "hex")]
        before: u64,
        /// B's offset.
        #[serde(with = "hex")]
        after: u64,
    },
    /// A slot's binding in holder coordinates, `offset..widened end` (O5, O6).
    SlotBinding {
        /// The slot.
        slot: u32,
        /// A's binding.
        before: ByteRange,
        /// B's binding.
        after: ByteRange,
    },
    /// Whether a slot's offset meets minStorageBufferOffsetAlignment (O7).
    SlotAligned {
        /// The slot.
        slot: u32,
        /// A's answer.
        before: bool,
        /// B's answer.
        after: bool,
    },
    /// A set held by `holder` is in one report only, or its widened range or members differ.
    Set {
        /// The holding slot (O4).
        holder: u32,
        /// A's widened range (O5), if A has the set.
        before: Option<ByteRange>,
        /// B's widened range, if B has the set.
        after: Option<ByteRange>,
        /// A's member slots (the holder left out).
        members_before: Vec<u32>,
        /// B's member slots.
        members_after: Vec<u32>,
    },
    /// A refusal only B has.
    RefusalAdded {
        /// Its rule.
        rule: Rule,
        /// The slot involved, if one is.
        slot: Option<u32>,
        /// Its sentence.
        message: String,
    },
    /// A refusal only A has.
    RefusalRemoved {
        /// Its rule.
        rule: Rule,
        /// The slot involved, if one is.
        slot: Option<u32>,
        /// Its sentence.
        message: String,
    },
    /// An escape (T4) only B has.
    EscapeAdded {
        /// The site's program counter.
        #[serde(with = "hex")]
        pc: u64,
        /// Why no mapping held it.
        class: EscapeClass,
        /// The first guest address that escaped.
        #[serde(with = "hex")]
        address: u64,
        /// The access's index.
        access: usize,
        /// Load or store.
        op: Op,
    },
    /// An escape only A has.
    EscapeRemoved {
        /// The site's program counter.
        #[serde(with = "hex")]
        pc: u64,
        /// Why no mapping held it.
        class: EscapeClass,
        /// The first guest address that escaped.
        #[serde(with = "hex")]
        address: u64,
        /// The access's index.
        access: usize,
        /// Load or store.
        op: Op,
    },
    /// A chunk's mark (C1): set in one report only, or by another number of stores.
    Mark {
        /// The chunk's guest bytes.
        guest: ByteRange,
        /// Stores that set it in A; `None` where A did not mark it.
        before: Option<u32>,
        /// Stores that set it in B.
        after: Option<u32>,
    },
    /// A word a holder wrote back (O8): written in one report only, or with other values.
    WriteBackWord {
        /// The holder slot.
        holder: u32,
        /// The word's guest address.
        #[serde(with = "hex")]
        address: u64,
        /// A's write, if A wrote it.
        before: Option<WordValues>,
        /// B's write, if B wrote it.
        after: Option<WordValues>,
    },
    /// The words a holder wrote back beyond those listed (a device pass's output, O8): their count
    /// or their runs differ.
    WriteBackUnlisted {
        /// The holder slot.
        holder: u32,
        /// A's unlisted words and runs, if A wrote the holder back.
        before: Option<Unlisted>,
        /// B's.
        after: Option<Unlisted>,
    },
    /// A hazard (L1, or its read-side twin) in one report only.
    Hazard {
        /// Which case.
        kind: HazardKind,
        /// The holder whose write-back (or binding) is involved.
        holder: u32,
        /// The guest word.
        #[serde(with = "hex")]
        address: u64,
        /// The device-addressed store.
        device_store: usize,
        /// Whether A has it.
        before: bool,
        /// Whether B has it.
        after: bool,
    },
    /// A mapped piece (M3): in one report only, or mapped otherwise.
    Piece {
        /// Its guest bytes.
        guest: ByteRange,
        /// A's piece, if A mapped it.
        before: Option<PieceState>,
        /// B's piece, if B mapped it.
        after: Option<PieceState>,
    },
    /// A left-out piece (M3): in one report only, or left out for another reason.
    LeftOut {
        /// Its guest bytes.
        guest: ByteRange,
        /// A's reason, if A left it out.
        before: Option<LeftOutReason>,
        /// B's reason, if B left it out.
        after: Option<LeftOutReason>,
    },
    /// The table's chunk size (T1); `None` where the dispatch used no table.
    ChunkBytes {
        /// A's chunk size.
        #[serde(with = "hex::option")]
        before: Option<u64>,
        /// B's chunk size.
        #[serde(with = "hex::option")]
        after: Option<u64>,
    },
    /// The table's probes (T2); `None` where the dispatch used no table.
    Probes {
        /// A's probes.
        before: Option<ProbeStats>,
        /// B's probes.
        after: Option<ProbeStats>,
    },
    /// An access's route or values (in one report only where the inputs differ).
    Access {
        /// Its index in the stream.
        access: usize,
        /// Its program counter.
        #[serde(with = "hex")]
        pc: u64,
        /// A's outcome, if A has the access.
        before: Option<AccessOutcome>,
        /// B's outcome, if B has it.
        after: Option<AccessOutcome>,
    },
}

/// Which part of a report a change is about: one per kind of decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Category {
    /// The program.
    Program,
    /// The label.
    Label,
    /// The mode.
    Mode,
    /// Slots' bindings.
    Slots,
    /// Sets.
    Sets,
    /// Refusals.
    Refusals,
    /// Escapes.
    Escapes,
    /// Marks.
    Marks,
    /// Write-back words.
    WriteBack,
    /// Hazards.
    Hazards,
    /// Mapped pieces.
    Pieces,
    /// Left-out pieces.
    LeftOut,
    /// The table's chunk size and probes.
    Table,
    /// Accesses.
    Accesses,
}

impl Category {
    /// Whether the plan decides it (the rest is the run's).
    pub fn is_plan(self) -> bool {
        matches!(
            self,
            Category::Program
                | Category::Label
                | Category::Mode
                | Category::Slots
                | Category::Sets
                | Category::Refusals
        )
    }
}

fn opt<T: std::fmt::Display>(v: &Option<T>, none: &str) -> String {
    v.as_ref()
        .map_or_else(|| none.to_owned(), |x| x.to_string())
}

fn hex_opt(v: Option<u64>) -> String {
    v.map_or_else(|| "none".to_owned(), |x| format!("{x:#x}"))
}

fn route_text(r: &Route) -> String {
    match r {
        Route::Bound { holder, offset } => format!("bound (holder {holder} + {offset:#x})"),
        Route::Device { address } => format!("device address {address:#x}"),
        Route::Lds { offset } => format!("LDS + {offset:#x}"),
        Route::Scratch { offset } => format!("scratch + {offset:#x}"),
        Route::NotRun => "not run".into(),
    }
}

fn outcome_text(o: &Option<AccessOutcome>) -> String {
    match o {
        None => "absent".into(),
        Some(o) => {
            let values: Vec<String> = o.values.iter().map(|v| format!("{v:#x}")).collect();
            format!(
                "{} [{}]{}",
                route_text(&o.route),
                values.join(" "),
                if o.escaped { " escaped" } else { "" }
            )
        }
    }
}

fn role_text(r: &Role) -> String {
    match r {
        Role::Alone => "alone".into(),
        Role::Holder => "holder".into(),
        Role::Member => "member".into(),
        Role::Copy { of } => format!("copy of slot {of}"),
        Role::Unbound => "unbound".into(),
    }
}

fn members_text(m: &[u32]) -> String {
    let v: Vec<String> = m.iter().map(u32::to_string).collect();
    format!("[{}]", v.join(", "))
}

fn slot_text(slot: Option<u32>) -> String {
    slot.map_or_else(String::new, |s| format!(" (slot {s})"))
}

impl Change {
    /// Which part of the report it is about.
    pub fn category(&self) -> Category {
        match self {
            Change::Program { .. } => Category::Program,
            Change::Label { .. } => Category::Label,
            Change::Mode { .. } => Category::Mode,
            Change::SlotPresence { .. }
            | Change::SlotRole { .. }
            | Change::SlotHolder { .. }
            | Change::SlotOffset { .. }
            | Change::SlotBinding { .. }
            | Change::SlotAligned { .. } => Category::Slots,
            Change::Set { .. } => Category::Sets,
            Change::RefusalAdded { .. } | Change::RefusalRemoved { .. } => Category::Refusals,
            Change::EscapeAdded { .. } | Change::EscapeRemoved { .. } => Category::Escapes,
            Change::Mark { .. } => Category::Marks,
            Change::WriteBackWord { .. } | Change::WriteBackUnlisted { .. } => Category::WriteBack,
            Change::Hazard { .. } => Category::Hazards,
            Change::Piece { .. } => Category::Pieces,
            Change::LeftOut { .. } => Category::LeftOut,
            Change::ChunkBytes { .. } | Change::Probes { .. } => Category::Table,
            Change::Access { .. } => Category::Accesses,
        }
    }

    /// One sentence, in a debugger's terms.
    pub fn sentence(&self) -> String {
        match self {
            Change::Program { before, after } => {
                format!("program {before:#x} → {after:#x}")
            }
            Change::Label { before, after } => format!("label {before:?} → {after:?}"),
            Change::Mode { before, after } => {
                format!("mode {} → {}", before.as_str(), after.as_str())
            }
            Change::SlotPresence {
                slot,
                before,
                after,
            } => match (before, after) {
                (false, true) => format!("slot {slot} only in B"),
                _ => format!("slot {slot} only in A"),
            },
            Change::SlotRole {
                slot,
                before,
                after,
            } => format!(
                "slot {slot}: role {} → {}",
                role_text(before),
                role_text(after)
            ),
            Change::SlotHolder {
                slot,
                before,
                after,
            } => format!(
                "slot {slot}: holder {} → {} (O4)",
                opt(before, "none"),
                opt(after, "none")
            ),
            Change::SlotOffset {
                slot,
                before,
                after,
            } => format!("slot {slot}: offset in its holder {before:#x} → {after:#x} (O6)"),
            Change::SlotBinding {
                slot,
                before,
                after,
            } => format!(
                "slot {slot}: binding {before} → {after} in holder coordinates (widened end {:#x} → {:#x}, O5)",
                before.end, after.end
            ),
            Change::SlotAligned {
                slot,
                before,
                after,
            } => format!(
                "slot {slot}: {} → {} (O7)",
                if *before { "aligned" } else { "misaligned" },
                if *after { "aligned" } else { "misaligned" }
            ),
            Change::Set {
                holder,
                before,
                after,
                members_before,
                members_after,
            } => match (before, after) {
                (None, Some(r)) => format!(
                    "set held by slot {holder} added: {r}, members {}",
                    members_text(members_after)
                ),
                (Some(r), None) => format!(
                    "set held by slot {holder} removed: was {r}, members {}",
                    members_text(members_before)
                ),
                _ => format!(
                    "set held by slot {holder}: widened range {} → {}, members {} → {} (O2, O5)",
                    opt(before, "none"),
                    opt(after, "none"),
                    members_text(members_before),
                    members_text(members_after)
                ),
            },
            Change::RefusalAdded {
                rule,
                slot,
                message,
            } => format!(
                "refusal added: {}{}: {message}",
                rule.id(),
                slot_text(*slot)
            ),
            Change::RefusalRemoved {
                rule,
                slot,
                message,
            } => format!(
                "refusal removed: {}{}: {message}",
                rule.id(),
                slot_text(*slot)
            ),
            Change::EscapeAdded {
                pc,
                class,
                address,
                access,
                op,
            } => format!(
                "escape added at pc {pc:#x}: {} {op:?} of {address:#x} (access {access}, T4)",
                class.as_str()
            ),
            Change::EscapeRemoved {
                pc,
                class,
                address,
                access,
                op,
            } => format!(
                "escape removed at pc {pc:#x}: {} {op:?} of {address:#x} (access {access}, T4)",
                class.as_str()
            ),
            Change::Mark {
                guest,
                before,
                after,
            } => match (before, after) {
                (None, Some(n)) => format!("chunk {guest} marked (C1), by {n} stores"),
                (Some(n), None) => format!("chunk {guest} no longer marked (C1; was {n} stores)"),
                _ => format!(
                    "chunk {guest}: marked by {} → {} stores (C1)",
                    opt(before, "0"),
                    opt(after, "0")
                ),
            },
            Change::WriteBackWord {
                holder,
                address,
                before,
                after,
            } => match (before, after) {
                (None, Some(w)) => format!(
                    "write-back of holder {holder} adds word {address:#x}: {:#x} → {:#x} (O8)",
                    w.old, w.new
                ),
                (Some(w), None) => format!(
                    "write-back of holder {holder} no longer writes word {address:#x} (was {:#x} → {:#x}, O8)",
                    w.old, w.new
                ),
                (Some(a), Some(b)) => format!(
                    "write-back of holder {holder}, word {address:#x}: {:#x} → {:#x} became {:#x} → {:#x} (O8)",
                    a.old, a.new, b.old, b.new
                ),
                (None, None) => format!("write-back of holder {holder}, word {address:#x}"),
            },
            Change::WriteBackUnlisted {
                holder,
                before,
                after,
            } => {
                let say = |u: &Option<Unlisted>| {
                    u.as_ref().map_or("none".to_owned(), |u| {
                        format!(
                            "{} in {} runs",
                            u.words,
                            u.runs.len() as u64 + u.runs_not_listed
                        )
                    })
                };
                format!(
                    "write-back of holder {holder}, words not listed: {} became {} (O8)",
                    say(before),
                    say(after)
                )
            }
            Change::Hazard {
                kind,
                holder,
                address,
                device_store,
                after,
                ..
            } => format!(
                "hazard {} ({kind:?}, holder {holder}, word {address:#x}, device store {device_store}, L1)",
                if *after { "added" } else { "removed" }
            ),
            Change::Piece {
                guest,
                before,
                after,
            } => match (before, after) {
                (None, Some(p)) => {
                    format!("piece {guest} mapped at {:#x} (M3)", p.device_base)
                }
                (Some(_), None) => format!("piece {guest} no longer mapped (M3)"),
                (Some(a), Some(b)) => format!(
                    "piece {guest}: device base {:#x} → {:#x}, mapped before dispatch {} → {}{}",
                    a.device_base,
                    b.device_base,
                    a.mapped_before_dispatch,
                    b.mapped_before_dispatch,
                    if a.by_revisit != b.by_revisit {
                        " (by revisit differs, M5)"
                    } else {
                        ""
                    }
                ),
                (None, None) => format!("piece {guest}"),
            },
            Change::LeftOut {
                guest,
                before,
                after,
            } => format!(
                "left-out piece {guest}: {} → {} (M3)",
                before.map_or("mapped or absent", |r| r.phrase()),
                after.map_or("mapped or absent", |r| r.phrase())
            ),
            Change::ChunkBytes { before, after } => format!(
                "table chunk size {} → {} (T1)",
                hex_opt(*before),
                hex_opt(*after)
            ),
            Change::Probes { before, after } => {
                let text = |p: &Option<ProbeStats>| {
                    p.as_ref().map_or_else(
                        || "no table".to_owned(),
                        |p| {
                            format!(
                                "{} slots, {} chunks, bound {}, longest {} probes",
                                p.capacity,
                                p.n_chunks,
                                p.probe_bound,
                                p.max_probes()
                            )
                        },
                    )
                };
                format!("table {} → {} (T2)", text(before), text(after))
            }
            Change::Access {
                access,
                pc,
                before,
                after,
            } => format!(
                "access {access} (pc {pc:#x}): {} → {}",
                outcome_text(before),
                outcome_text(after)
            ),
        }
    }
}

/// Every decision that changed between two reports of one dispatch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DispatchDiff {
    /// A's dispatch index.
    pub a: u64,
    /// B's dispatch index.
    pub b: u64,
    /// The pair's positions in A's and B's sequences (a session diff's; the indices for a diff of
    /// two reports alone).
    pub position: [usize; 2],
    /// B's program.
    #[serde(with = "hex")]
    pub program: u64,
    /// B's label.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub label: String,
    /// What was compared.
    #[serde(flatten)]
    pub compared: Compared,
    /// The changes, in the order of this module's docs.
    pub changes: Vec<Change>,
}

impl DispatchDiff {
    /// Whether nothing compared changed.
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// The categories that changed, each once, in order.
    pub fn categories(&self) -> Vec<Category> {
        let mut v: Vec<Category> = self.changes.iter().map(Change::category).collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}

/// Pairs keyed items of A and B (each key once a side) and calls `changed` on every key whose
/// values differ: `(key, a's value, b's value)`, in key order.
fn keyed<K: Ord, V: PartialEq>(
    a: impl IntoIterator<Item = (K, V)>,
    b: impl IntoIterator<Item = (K, V)>,
    mut changed: impl FnMut(K, Option<V>, Option<V>),
) {
    let mut both: BTreeMap<K, (Option<V>, Option<V>)> = BTreeMap::new();
    for (k, v) in a {
        both.entry(k).or_default().0 = Some(v);
    }
    for (k, v) in b {
        both.entry(k).or_default().1 = Some(v);
    }
    for (k, (x, y)) in both {
        if x != y {
            changed(k, x, y);
        }
    }
}

/// A multiset difference: the items only in A (`removed`) and only in B (`added`), counted, in
/// key order.
fn multiset<K: Ord + Clone>(
    a: impl IntoIterator<Item = K>,
    b: impl IntoIterator<Item = K>,
) -> (Vec<K>, Vec<K>) {
    let mut count: BTreeMap<K, i64> = BTreeMap::new();
    for k in a {
        *count.entry(k).or_default() -= 1;
    }
    for k in b {
        *count.entry(k).or_default() += 1;
    }
    let (mut removed, mut added) = (Vec::new(), Vec::new());
    for (k, n) in count {
        for _ in 0..n.unsigned_abs() {
            if n < 0 {
                removed.push(k.clone());
            } else {
                added.push(k.clone());
            }
        }
    }
    (removed, added)
}

/// Every decision that changed from `a` to `b` (two reports of one dispatch), comparing what
/// `compared` says.
pub fn diff_reports(a: &DispatchReport, b: &DispatchReport, compared: Compared) -> DispatchDiff {
    let mut c: Vec<Change> = Vec::new();
    if a.program != b.program {
        c.push(Change::Program {
            before: a.program,
            after: b.program,
        });
    }
    if a.label != b.label {
        c.push(Change::Label {
            before: a.label.clone(),
            after: b.label.clone(),
        });
    }
    if a.mode != b.mode {
        c.push(Change::Mode {
            before: a.mode,
            after: b.mode,
        });
    }
    diff_slots(a, b, &mut c);
    keyed(
        a.sets.iter().map(set_key),
        b.sets.iter().map(set_key),
        |holder, x, y| {
            c.push(Change::Set {
                holder,
                before: x.as_ref().map(|s| s.0),
                after: y.as_ref().map(|s| s.0),
                members_before: x.map(|s| s.1).unwrap_or_default(),
                members_after: y.map(|s| s.1).unwrap_or_default(),
            });
        },
    );
    let refusal = |r: &crate::report::Refusal| (r.rule, r.slot, r.message.clone());
    let (removed, added) = multiset(
        a.refusals.iter().map(refusal),
        b.refusals.iter().map(refusal),
    );
    c.extend(
        removed
            .into_iter()
            .map(|(rule, slot, message)| Change::RefusalRemoved {
                rule,
                slot,
                message,
            }),
    );
    c.extend(
        added
            .into_iter()
            .map(|(rule, slot, message)| Change::RefusalAdded {
                rule,
                slot,
                message,
            }),
    );
    if compared.everything() {
        diff_run(a, b, &mut c);
    }
    DispatchDiff {
        a: a.index,
        b: b.index,
        position: [
            usize::try_from(a.index).unwrap_or(usize::MAX),
            usize::try_from(b.index).unwrap_or(usize::MAX),
        ],
        program: b.program,
        label: b.label.clone(),
        compared,
        changes: c,
    }
}

/// A set's key and compared value: its holder; its widened range and member slots.
fn set_key(s: &crate::report::BindSet) -> (u32, (ByteRange, Vec<u32>)) {
    let mut members: Vec<u32> = s.members.iter().map(|m| m.slot).collect();
    members.sort_unstable();
    (s.holder, (s.range(), members))
}

fn diff_slots(a: &DispatchReport, b: &DispatchReport, c: &mut Vec<Change>) {
    let mut both: BTreeMap<u32, (Option<&SlotBinding>, Option<&SlotBinding>)> = BTreeMap::new();
    for s in &a.slots {
        both.entry(s.slot).or_default().0 = Some(s);
    }
    for s in &b.slots {
        both.entry(s.slot).or_default().1 = Some(s);
    }
    for (slot, sides) in both {
        let (p, q) = match sides {
            (Some(p), Some(q)) => (p, q),
            (x, y) => {
                c.push(Change::SlotPresence {
                    slot,
                    before: x.is_some(),
                    after: y.is_some(),
                });
                continue;
            }
        };
        if p.role != q.role {
            c.push(Change::SlotRole {
                slot,
                before: p.role,
                after: q.role,
            });
        }
        if p.holder != q.holder {
            c.push(Change::SlotHolder {
                slot,
                before: p.holder,
                after: q.holder,
            });
        }
        if p.offset != q.offset {
            c.push(Change::SlotOffset {
                slot,
                before: p.offset,
                after: q.offset,
            });
        }
        if p.binding != q.binding {
            c.push(Change::SlotBinding {
                slot,
                before: p.binding,
                after: q.binding,
            });
        }
        if p.aligned != q.aligned {
            c.push(Change::SlotAligned {
                slot,
                before: p.aligned,
                after: q.aligned,
            });
        }
    }
}

fn diff_run(a: &DispatchReport, b: &DispatchReport, c: &mut Vec<Change>) {
    let escape =
        |e: &crate::report::Escape| (e.access, e.pc, e.class, e.address, e.op == Op::Store);
    let op = |store: bool| if store { Op::Store } else { Op::Load };
    let (removed, added) = multiset(a.escapes.iter().map(escape), b.escapes.iter().map(escape));
    for (access, pc, class, address, store) in removed {
        c.push(Change::EscapeRemoved {
            pc,
            class,
            address,
            access,
            op: op(store),
        });
    }
    for (access, pc, class, address, store) in added {
        c.push(Change::EscapeAdded {
            pc,
            class,
            address,
            access,
            op: op(store),
        });
    }
    keyed(
        a.marks.iter().map(|m| (m.guest, m.stores)),
        b.marks.iter().map(|m| (m.guest, m.stores)),
        |guest, before, after| {
            c.push(Change::Mark {
                guest,
                before,
                after,
            });
        },
    );
    let words = |r: &DispatchReport| -> Vec<((u32, u64), WordValues)> {
        r.write_back
            .iter()
            .flat_map(|w| {
                w.words.iter().map(move |x| {
                    (
                        (w.holder, x.address),
                        WordValues {
                            old: x.old,
                            new: x.new,
                        },
                    )
                })
            })
            .collect()
    };
    keyed(words(a), words(b), |(holder, address), before, after| {
        c.push(Change::WriteBackWord {
            holder,
            address,
            before,
            after,
        });
    });
    let unlisted = |r: &DispatchReport| -> Vec<(u32, Unlisted)> {
        r.write_back
            .iter()
            .filter(|w| !w.lists_every_word())
            .map(|w| {
                (
                    w.holder,
                    Unlisted {
                        words: w.words_not_listed,
                        runs: w.runs.clone(),
                        runs_not_listed: w.runs_not_listed,
                    },
                )
            })
            .collect()
    };
    keyed(unlisted(a), unlisted(b), |holder, before, after| {
        c.push(Change::WriteBackUnlisted {
            holder,
            before,
            after,
        });
    });
    let hazard = |h: &crate::report::Hazard| {
        (
            h.kind == HazardKind::StaleBoundLoad,
            h.holder,
            h.address,
            h.device_store,
            h.bound_store,
            h.bound_load,
        )
    };
    let (removed, added) = multiset(a.hazards.iter().map(hazard), b.hazards.iter().map(hazard));
    let kind = |stale: bool| {
        if stale {
            HazardKind::StaleBoundLoad
        } else {
            HazardKind::WriteBackOverDeviceStore
        }
    };
    for (h, after) in removed
        .into_iter()
        .map(|h| (h, false))
        .chain(added.into_iter().map(|h| (h, true)))
    {
        c.push(Change::Hazard {
            kind: kind(h.0),
            holder: h.1,
            address: h.2,
            device_store: h.3,
            before: !after,
            after,
        });
    }
    let pieces = |r: &DispatchReport| -> Vec<(ByteRange, PieceState)> {
        r.mappings
            .iter()
            .flat_map(|m| {
                m.pieces.iter().map(|p| {
                    (
                        p.guest,
                        PieceState {
                            device_base: p.device_base,
                            mapped_before_dispatch: p.mapped_before_dispatch,
                            by_revisit: p.by_revisit,
                        },
                    )
                })
            })
            .collect()
    };
    keyed(pieces(a), pieces(b), |guest, before, after| {
        c.push(Change::Piece {
            guest,
            before,
            after,
        });
    });
    let left_out = |r: &DispatchReport| -> Vec<(ByteRange, LeftOutReason)> {
        r.mappings
            .iter()
            .flat_map(|m| m.left_out.iter().map(|l| (l.guest, l.reason)))
            .collect()
    };
    keyed(left_out(a), left_out(b), |guest, before, after| {
        c.push(Change::LeftOut {
            guest,
            before,
            after,
        });
    });
    let (ta, tb) = (a.table.as_ref(), b.table.as_ref());
    let (ca, cb) = (ta.map(|t| t.chunk_bytes), tb.map(|t| t.chunk_bytes));
    if ca != cb {
        c.push(Change::ChunkBytes {
            before: ca,
            after: cb,
        });
    }
    let (pa, pb) = (ta.map(ProbeStats::of), tb.map(ProbeStats::of));
    if pa != pb {
        c.push(Change::Probes {
            before: pa,
            after: pb,
        });
    }
    let outcome = |x: &crate::report::AccessReport| {
        (
            x.index,
            (
                x.pc,
                AccessOutcome {
                    route: x.route.clone(),
                    values: x.values.clone(),
                    escaped: x.escaped,
                },
            ),
        )
    };
    keyed(
        a.accesses.iter().map(outcome),
        b.accesses.iter().map(outcome),
        |access, x, y| {
            let pc = y.as_ref().or(x.as_ref()).map_or(0, |v| v.0);
            c.push(Change::Access {
                access,
                pc,
                before: x.map(|v| v.1),
                after: y.map(|v| v.1),
            });
        },
    );
}

/// How a session diff paired the two sequences of dispatches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Matching {
    /// Position by position: both sessions have the same program at every position.
    ByOrder,
    /// By program address: the longest common subsequence of the program addresses, after the
    /// common prefix and suffix.
    ByProgram,
    /// By program address where the sequences are short enough, and by order in a middle that
    /// would need more than [`MAX_LCS_CELLS`] cells.
    ByOrderPastLimit,
}

/// One dispatch of one session, named for a person.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DispatchRef {
    /// Its position in its session's sequence.
    pub position: usize,
    /// Its dispatch index.
    pub index: u64,
    /// Its program.
    #[serde(with = "hex")]
    pub program: u64,
    /// Its label.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub label: String,
}

impl DispatchRef {
    fn of(position: usize, r: &DispatchReport) -> Self {
        Self {
            position,
            index: r.index,
            program: r.program,
            label: r.label.clone(),
        }
    }
}

/// One limit that differs between the sessions' reports (the premise of a "what if").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitChange {
    /// The limit, as the report's `device` names it.
    pub name: String,
    /// A's value, as JSON writes it.
    pub before: String,
    /// B's value.
    pub after: String,
}

/// Two sessions, dispatch by dispatch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionDiff {
    /// [`DIFF_SCHEMA`].
    pub schema: String,
    /// How the dispatches were paired.
    pub matching: Matching,
    /// Dispatches in A.
    pub a_dispatches: usize,
    /// Dispatches in B.
    pub b_dispatches: usize,
    /// Every pair, as positions `[a, b]`, in order.
    pub pairs: Vec<[usize; 2]>,
    /// Dispatches only A has.
    pub only_a: Vec<DispatchRef>,
    /// Dispatches only B has.
    pub only_b: Vec<DispatchRef>,
    /// The limits of the first pair's reports that differ (none when there is no pair).
    pub limits: Vec<LimitChange>,
    /// The diffs of the pairs that changed, in order (a pair with no change is not listed).
    pub dispatches: Vec<DispatchDiff>,
    /// Pairs whose run was not compared ([`Compared::PlanOnly`]), counted.
    pub plan_only: usize,
    /// What a reader must know to read the diff (how a "what if" was computed, what it could not
    /// re-run), one sentence each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl SessionDiff {
    /// Whether the sessions are the same: every dispatch paired and no pair changed.
    pub fn is_empty(&self) -> bool {
        self.only_a.is_empty() && self.only_b.is_empty() && self.dispatches.is_empty()
    }

    /// Changes in all, over every pair.
    pub fn n_changes(&self) -> usize {
        self.dispatches.iter().map(|d| d.changes.len()).sum()
    }

    /// The diff of the pair whose B dispatch is at `position`, if that pair changed.
    pub fn for_b(&self, position: usize) -> Option<&DispatchDiff> {
        let i = self
            .dispatches
            .binary_search_by_key(&position, |d| d.position[1])
            .ok()?;
        self.dispatches.get(i)
    }

    /// The diff of the pair whose A dispatch is at `position`, if that pair changed.
    pub fn for_a(&self, position: usize) -> Option<&DispatchDiff> {
        let i = self
            .dispatches
            .binary_search_by_key(&position, |d| d.position[0])
            .ok()?;
        self.dispatches.get(i)
    }
}

/// Pairs two sequences of program addresses (see the module docs): the pairs `[a, b]` of positions,
/// in order, and how they were made.
pub fn match_dispatches(a: &[u64], b: &[u64]) -> (Vec<[usize; 2]>, Matching) {
    if a == b {
        return ((0..a.len()).map(|i| [i, i]).collect(), Matching::ByOrder);
    }
    let prefix = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let suffix = a[prefix..]
        .iter()
        .rev()
        .zip(b[prefix..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (ma, mb) = (&a[prefix..a.len() - suffix], &b[prefix..b.len() - suffix]);
    let mut pairs: Vec<[usize; 2]> = (0..prefix).map(|i| [i, i]).collect();
    let cells = (ma.len() as u64).saturating_mul(mb.len() as u64);
    let matching = if cells <= MAX_LCS_CELLS {
        pairs.extend(
            lcs(ma, mb)
                .into_iter()
                .map(|[i, j]| [prefix + i, prefix + j]),
        );
        Matching::ByProgram
    } else {
        pairs.extend((0..ma.len().min(mb.len())).map(|i| [prefix + i, prefix + i]));
        Matching::ByOrderPastLimit
    };
    pairs.extend((0..suffix).map(|k| [a.len() - suffix + k, b.len() - suffix + k]));
    (pairs, matching)
}

/// The longest common subsequence of `a` and `b`, as pairs of positions in order; of several, the
/// one that pairs earliest in `a` (ties go to the earlier element).
fn lcs(a: &[u64], b: &[u64]) -> Vec<[usize; 2]> {
    let (n, m) = (a.len(), b.len());
    if n == 0 || m == 0 {
        return Vec::new();
    }
    // len[i][j]: the LCS of a[i..] and b[j..], row by row (u32: the cells are bounded).
    let w = m + 1;
    let mut len = vec![0u32; (n + 1) * w];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            len[i * w + j] = if a[i] == b[j] {
                len[(i + 1) * w + j + 1] + 1
            } else {
                len[(i + 1) * w + j].max(len[i * w + j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::with_capacity(len[0] as usize);
    while i < n && j < m {
        if a[i] == b[j] {
            out.push([i, j]);
            i += 1;
            j += 1;
        } else if len[(i + 1) * w + j] >= len[i * w + j + 1] {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// The limits that differ between two reports' `device`, by name.
pub fn limit_changes(a: &DispatchReport, b: &DispatchReport) -> Vec<LimitChange> {
    let (Ok(serde_json::Value::Object(x)), Ok(serde_json::Value::Object(y))) = (
        serde_json::to_value(&a.device),
        serde_json::to_value(&b.device),
    ) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (name, va) in &x {
        let vb = y.get(name).cloned().unwrap_or(serde_json::Value::Null);
        if *va != vb {
            out.push(LimitChange {
                name: name.clone(),
                before: json_text(va),
                after: json_text(&vb),
            });
        }
    }
    out
}

fn json_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Two sessions' reports, matched ([`match_dispatches`]) and compared pair by pair, everything.
pub fn diff_sessions(a: &[DispatchReport], b: &[DispatchReport]) -> SessionDiff {
    diff_sessions_with(a, b, |_| Compared::Everything)
}

/// [`diff_sessions`], comparing the pair whose B dispatch is at position `j` as `compared(j)` says.
pub fn diff_sessions_with(
    a: &[DispatchReport],
    b: &[DispatchReport],
    compared: impl Fn(usize) -> Compared,
) -> SessionDiff {
    let pa: Vec<u64> = a.iter().map(|r| r.program).collect();
    let pb: Vec<u64> = b.iter().map(|r| r.program).collect();
    let (pairs, matching) = match_dispatches(&pa, &pb);
    let mut in_a = vec![false; a.len()];
    let mut in_b = vec![false; b.len()];
    let mut dispatches = Vec::new();
    let mut plan_only = 0;
    for &[i, j] in &pairs {
        in_a[i] = true;
        in_b[j] = true;
        let how = compared(j);
        if !how.everything() {
            plan_only += 1;
        }
        let mut d = diff_reports(&a[i], &b[j], how);
        d.position = [i, j];
        if !d.is_empty() {
            dispatches.push(d);
        }
    }
    let only = |reports: &[DispatchReport], seen: &[bool]| -> Vec<DispatchRef> {
        reports
            .iter()
            .enumerate()
            .filter(|(k, _)| !seen[*k])
            .map(|(k, r)| DispatchRef::of(k, r))
            .collect()
    };
    SessionDiff {
        schema: DIFF_SCHEMA.to_owned(),
        matching,
        a_dispatches: a.len(),
        b_dispatches: b.len(),
        limits: pairs
            .first()
            .map(|&[i, j]| limit_changes(&a[i], &b[j]))
            .unwrap_or_default(),
        only_a: only(a, &in_a),
        only_b: only(b, &in_b),
        pairs,
        dispatches,
        plan_only,
        notes: Vec::new(),
    }
}
