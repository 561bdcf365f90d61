//! The vocabulary of changes: [`Change`], one variant a decision that can differ between two
//! reports of one dispatch, with its before and after, its sentence ([`Change::sentence`]) and its
//! [`Category`]; and the values the variants carry. Nothing here compares: `reports` makes changes.

use serde::{Deserialize, Serialize};

use dispatchscope_core::addr::{ByteRange, hex};
use dispatchscope_core::input::Op;
use dispatchscope_core::report::{
    EscapeClass, HazardKind, LeftOutReason, Mode, Role, Route, TableReport,
};
use dispatchscope_core::rules::Rule;

/// A slot's binding state, as a change shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WordValues {
    /// The guest's word before the write-back; `None` where the report could not read it.
    #[serde(with = "hex::option", default, skip_serializing_if = "Option::is_none")]
    pub old: Option<u64>,
    /// The word written back.
    #[serde(with = "hex")]
    pub new: u64,
}

impl WordValues {
    /// The old value as `0x…`, or `unknown`.
    pub fn old_text(&self) -> String {
        self.old
            .map_or_else(|| "unknown".to_owned(), |o| format!("{o:#x}"))
    }
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
    /// The program differs (only in a pair matched by order past [`MAX_LCS_CELLS`](super::MAX_LCS_CELLS)).
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
                    "write-back of holder {holder} adds word {address:#x}: {} → {:#x} (O8)",
                    w.old_text(),
                    w.new
                ),
                (Some(w), None) => format!(
                    "write-back of holder {holder} no longer writes word {address:#x} (was {} → {:#x}, O8)",
                    w.old_text(),
                    w.new
                ),
                (Some(a), Some(b)) => format!(
                    "write-back of holder {holder}, word {address:#x}: {} → {:#x} became {} → {:#x} (O8)",
                    a.old_text(),
                    a.new,
                    b.old_text(),
                    b.new
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
