//! Comparing two reports of one dispatch: [`diff_reports`] → [`DispatchDiff`], every decision
//! that changed, as [`Change`]s in the order below.
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
//! backend's name, the limits (a [`SessionDiff`](super::SessionDiff) lists them once in
//! [`SessionDiff::limits`](super::SessionDiff::limits)), the mode's sentence (it follows from the
//! mode and the refusals), events, C3's copies, the hand-off, the counts (they follow from what is
//! compared) and an instrumented pass's section.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use dispatchscope_core::addr::{ByteRange, hex};
use dispatchscope_core::input::Op;
use dispatchscope_core::report::{DispatchReport, HazardKind, LeftOutReason, SlotBinding};

use super::change::{
    AccessOutcome, Category, Change, PieceState, ProbeStats, Unlisted, WordValues,
};

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
    let refusal = |r: &dispatchscope_core::report::Refusal| (r.rule, r.slot, r.message.clone());
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
fn set_key(s: &dispatchscope_core::report::BindSet) -> (u32, (ByteRange, Vec<u32>)) {
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
    let escape = |e: &dispatchscope_core::report::Escape| {
        (e.access, e.pc, e.class, e.address, e.op == Op::Store)
    };
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
    let hazard = |h: &dispatchscope_core::report::Hazard| {
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
    let outcome = |x: &dispatchscope_core::report::AccessReport| {
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
