//! D953: overlapping buffers a dispatch writes bind one buffer (O1–O11).
//!
//! [`plan_bindings`] turns a dispatch's resolved slots into sets, holders, widened ends, member
//! offsets and binding ranges, and refuses by name what cannot be bound. It runs in O(n log n):
//! one sort by base, then one sweep that keeps at most one "written" entry and a lazily expired
//! list of read-only entries, each collapsed into its set as soon as a written slot joins it.
//! It reads no memory and runs nothing.

use serde::{Deserialize, Serialize};

use crate::addr::{ByteRange, hex};
use crate::input::{BaseSource, DeviceLimits, PageBuffer, Slot};
use crate::report::{Refusal, Value};
use crate::rules::Rule;

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
    /// Index into [`BindPlan::sets`], if it is in a set.
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
    /// Every member but the holder, by slot.
    pub members: Vec<Member>,
    /// The joins that made the set (a spanning forest: each member reached once).
    pub joins: Vec<Join>,
    /// Whether any member is written (the set is written back, O8).
    pub written: bool,
}

impl BindSet {
    /// The widened range the holder is uploaded from (O8).
    pub fn range(&self) -> ByteRange {
        ByteRange::new(self.base, self.end)
    }
}

/// The bound path of one dispatch.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BindPlan {
    /// Sets of two or more slots.
    pub sets: Vec<BindSet>,
    /// One binding per slot, in the order the dispatch lists them.
    pub bindings: Vec<SlotBinding>,
    /// What could not be bound, by name.
    pub refusals: Vec<Refusal>,
}

impl BindPlan {
    /// The binding of slot `slot`.
    pub fn binding(&self, slot: u32) -> Option<&SlotBinding> {
        self.bindings.iter().find(|b| b.slot == slot)
    }
}

/// What the set pass reads of one bound slot, gathered beside the other slots of its set, so
/// that the pass reads one array in order instead of the slots at random.
#[derive(Clone, Copy, Default)]
struct Gathered {
    /// Its position in the dispatch's slots.
    pos: usize,
    /// Its range (O10: from the base its accesses are read against).
    start: u64,
    end: u64,
    /// Its slot number.
    slot: u32,
    /// The slot number it copies (O3), itself when it is no copy.
    canon_slot: u32,
    /// Whether it is a copy.
    is_copy: bool,
    /// Whether the dispatch writes through it.
    written: bool,
    /// Whether it, or a copy of it, is written.
    written_with_copies: bool,
}

/// A slot the sweep holds open: its range, number and position, so that a join needs no look
/// at the slots.
#[derive(Clone, Copy)]
struct Open {
    range: ByteRange,
    slot: u32,
    pos: usize,
}

/// Where the set pass placed one bound slot (in holder coordinates); the bindings are built
/// from these in slot order.
#[derive(Clone, Copy)]
struct Placed {
    offset: u64,
    widened: u64,
    holder: u32,
    /// Index into the sets, or `u32::MAX` when alone.
    set: u32,
    /// [`Role::Unbound`] until the slot is placed.
    role: Role,
}

/// A union-find forest over slot positions, in borrowed memory.
struct Dsu<'a>(&'a mut [usize]);

impl Dsu<'_> {
    fn find(&mut self, mut x: usize) -> usize {
        while self.0[x] != x {
            self.0[x] = self.0[self.0[x]];
            x = self.0[x];
        }
        x
    }
    /// Joins the sets of `a` and `b`; returns whether they were apart.
    fn union(&mut self, a: usize, b: usize) -> bool {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            self.0[rb] = ra;
        }
        ra != rb
    }
}

/// Plans the bound path by O1–O11. `slots` must have passed [`crate::input`] validation
/// (effective bases exist, no overflow, copies name real slots of the same range).
pub fn plan_bindings(
    slots: &[Slot],
    push: &[u32],
    limits: &DeviceLimits,
    page_buffer: Option<&PageBuffer>,
) -> BindPlan {
    puffin::profile_function!();
    let n = slots.len();
    let range_of = |s: &Slot| {
        let base = s.effective_base(push).unwrap_or(s.base);
        ByteRange::new(base, base.saturating_add(s.size_bytes))
    };
    let ranges: Vec<ByteRange> = slots.iter().map(range_of).collect();

    // O3: a copy follows the slot it copies; its writes count for that slot's joins. Without
    // copies (the common case) every slot is its own canonical slot and nothing is allocated.
    let has_copies = slots.iter().any(|s| s.alias_of.is_some());
    let mut canon: Vec<usize> = Vec::new();
    let mut written: Vec<bool> = Vec::new();
    if has_copies {
        // Slot number → first position, by binary search.
        let mut by_slot: Vec<(u32, usize)> =
            slots.iter().enumerate().map(|(i, s)| (s.slot, i)).collect();
        by_slot.sort_unstable();
        let pos_of_slot = |slot: u32| {
            let k = by_slot.partition_point(|&(s, _)| s < slot);
            by_slot.get(k).filter(|&&(s, _)| s == slot).map(|&(_, i)| i)
        };
        canon = (0..n)
            .map(|i| {
                let mut c = i;
                let mut steps = 0;
                while let Some(of) = slots[c].alias_of.and_then(pos_of_slot) {
                    c = of;
                    steps += 1;
                    if steps > n {
                        break;
                    }
                }
                c
            })
            .collect();
        written = slots.iter().map(|s| s.written).collect();
        for i in 0..n {
            if slots[i].resolved && slots[canon[i]].resolved && slots[i].written {
                written[canon[i]] = true;
            }
        }
    }
    let canon_of = |i: usize| if has_copies { canon[i] } else { i };
    let bound = |i: usize| slots[i].resolved && slots[canon_of(i)].resolved;
    let is_written = |i: usize| {
        if has_copies {
            written[i]
        } else {
            slots[i].written
        }
    };

    // O1, O2: sweep the canonical slots in base order. Each slot's entry carries what the sweep
    // reads, so that it walks one array in order: an integer key that sorts by base, then slot
    // number, then position, `(base << 64) | (slot << 32) | (position << 1) | written` (a
    // dispatch has fewer than 2^31 slots), and the slot's end.
    let mut order: Vec<(u128, u64)> = Vec::with_capacity(n);
    for i in (0..n).filter(|&i| bound(i) && canon_of(i) == i) {
        let key = (u128::from(ranges[i].start) << 64)
            | (u128::from(slots[i].slot) << 32)
            | ((i as u128) << 1)
            | u128::from(is_written(i));
        order.push((key, ranges[i].end));
    }
    order.sort_unstable_by_key(|&(key, _)| key);
    // One allocation for the forest, each slot's component, and the ends of the components'
    // slots: `parent`, `comp_of_slot` (n each), `ends` (at most n + 1).
    let mut scratch: Vec<usize> = vec![0; 3 * n + 1];
    let (parent, rest) = scratch.split_at_mut(n);
    let (comp_of_slot, ends) = rest.split_at_mut(n);
    for (i, p) in parent.iter_mut().enumerate() {
        *p = i;
    }
    let mut dsu = Dsu(parent);
    // Each join with the position of its first slot (later, its set and its rank), to find its
    // set without a search. A spanning forest has fewer joins than slots.
    let mut joins: Vec<(u64, Join)> = Vec::with_capacity(n.saturating_sub(1));
    // The written slot seen with the furthest end, while it is open; at most one.
    let mut active_written: Option<Open> = None;
    // Read-only slots, expired lazily.
    let mut active_read: Vec<Open> = Vec::with_capacity(8);
    for &(key, end) in &order {
        let cur = Open {
            range: ByteRange::new((key >> 64) as u64, end),
            slot: (key >> 32) as u32,
            pos: (key as u32 >> 1) as usize,
        };
        let cur_written = key & 1 == 1;
        let r = cur.range;
        if let Some(w) = active_written {
            if w.range.end > r.start {
                // Only a join that merges two parts is kept: the joins stay a spanning forest.
                if dsu.union(w.pos, cur.pos) {
                    joins.push((w.pos as u64, join(&w, &cur)));
                }
                active_written = Some(if r.end > w.range.end && cur_written {
                    cur
                } else {
                    w
                });
            } else {
                active_written = None;
            }
        }
        if cur_written {
            // Every live read-only entry overlaps this written slot: join, then collapse them.
            let mut best: Option<Open> = None;
            for o in &active_read {
                if o.range.end > r.start {
                    if dsu.union(o.pos, cur.pos) {
                        joins.push((o.pos as u64, join(o, &cur)));
                    }
                    if best.is_none_or(|b| o.range.end > b.range.end) {
                        best = Some(*o);
                    }
                }
            }
            active_read.clear();
            active_read.extend(best);
            match active_written {
                Some(w) if w.range.end >= r.end => {}
                _ => active_written = Some(cur),
            }
        } else {
            active_read.push(cur);
        }
    }

    // Components → sets, numbered in the order of their first slot.
    const NONE: usize = usize::MAX;
    comp_of_slot.fill(NONE);
    for (i, c) in comp_of_slot.iter_mut().enumerate() {
        if bound(i) {
            *c = dsu.find(canon_of(i));
        }
    }
    // Every find is done: the forest's array becomes each root's component number.
    let comp_of_root = dsu.0;
    comp_of_root.fill(NONE);
    let mut n_comps = 0;
    for c in comp_of_slot.iter_mut().filter(|c| **c != NONE) {
        let root = *c;
        if comp_of_root[root] == NONE {
            comp_of_root[root] = n_comps;
            n_comps += 1;
        }
        *c = comp_of_root[root];
    }
    // Each component's slots in slot order, gathered in one flat array by counting: after the
    // fill, component c holds `flat[ends[c - 1]..ends[c]]` (from 0 for the first).
    let ends = &mut ends[..n_comps + 1];
    for &c in comp_of_slot.iter().filter(|&&c| c != NONE) {
        ends[c + 1] += 1;
    }
    let n_sets = ends.iter().filter(|&&k| k > 1).count();
    for c in 0..n_comps {
        ends[c + 1] += ends[c];
    }
    let mut flat: Vec<Gathered> = vec![Gathered::default(); ends[n_comps]];
    for (i, &c) in comp_of_slot.iter().enumerate().filter(|(_, c)| **c != NONE) {
        flat[ends[c]] = Gathered {
            pos: i,
            start: ranges[i].start,
            end: ranges[i].end,
            slot: slots[i].slot,
            canon_slot: slots[canon_of(i)].slot,
            is_copy: canon_of(i) != i,
            written: slots[i].written,
            written_with_copies: is_written(i),
        };
        ends[c] += 1;
    }
    // The joins by set, in the order they were made.
    for (k, (key, _)) in joins.iter_mut().enumerate() {
        *key = ((comp_of_slot[*key as usize] as u64) << 32) | k as u64;
    }
    joins.sort_unstable_by_key(|&(key, _)| key);
    let mut next_join = 0;

    let align = limits.min_storage_buffer_offset_alignment.max(1);
    // Vulkan's alignments are powers of two: a mask, not a division, on the common path.
    let is_aligned = |offset: u64| {
        if align.is_power_of_two() {
            offset & (align - 1) == 0
        } else {
            offset.is_multiple_of(align)
        }
    };
    let mut plan = BindPlan {
        sets: Vec::with_capacity(n_sets),
        bindings: Vec::new(),
        refusals: Vec::new(),
    };
    let mut placed: Vec<Placed> = vec![
        Placed {
            offset: 0,
            widened: 0,
            holder: 0,
            set: u32::MAX,
            role: Role::Unbound,
        };
        n
    ];
    for c in 0..n_comps {
        let members = &flat[if c == 0 { 0 } else { ends[c - 1] }..ends[c]];
        let holder = members
            .iter()
            .filter(|g| !g.is_copy)
            .min_by_key(|g| (g.start, g.slot))
            .unwrap_or(&members[0]);
        let (base, holder_slot) = (holder.start, holder.slot);
        let end = members.iter().map(|g| g.end).max().unwrap_or(base);
        let widened = end - base;
        let set_index = (members.len() > 1).then_some(plan.sets.len());
        if widened > limits.max_storage_buffer_range {
            plan.refusals
                .push(too_wide(holder_slot, base, end, members.len(), limits));
        }
        let mut set_members = Vec::with_capacity(members.len() - 1);
        for g in members {
            let is_holder = g.pos == holder.pos;
            let offset = g.start - base;
            let binding = ByteRange::new(offset, widened);
            let aligned = is_aligned(offset);
            let role = if is_holder {
                if members.len() > 1 {
                    Role::Holder
                } else {
                    Role::Alone
                }
            } else if g.is_copy {
                Role::Copy { of: g.canon_slot }
            } else {
                Role::Member
            };
            if !is_holder {
                set_members.push(Member {
                    slot: g.slot,
                    offset,
                    binding,
                    written: g.written,
                });
                if !aligned {
                    plan.refusals
                        .push(misaligned(g.slot, offset, align, holder_slot, base));
                }
                if offset >= widened {
                    plan.refusals
                        .push(outside(g.slot, offset, holder_slot, widened));
                }
            }
            placed[g.pos] = Placed {
                offset,
                widened,
                holder: holder_slot,
                set: set_index.map_or(u32::MAX, |k| k as u32),
                role,
            };
        }
        let first_join = next_join;
        while joins
            .get(next_join)
            .is_some_and(|&(key, _)| key >> 32 == c as u64)
        {
            next_join += 1;
        }
        if set_index.is_some() {
            set_members.sort_unstable_by_key(|m| m.slot);
            plan.sets.push(BindSet {
                holder: holder_slot,
                base,
                end,
                members: set_members,
                joins: joins[first_join..next_join]
                    .iter()
                    .map(|&(_, j)| j)
                    .collect(),
                written: members.iter().any(|g| g.written_with_copies),
            });
        }
    }

    plan.bindings = placed
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let s = &slots[i];
            let bound = p.role != Role::Unbound;
            SlotBinding {
                slot: s.slot,
                range: ranges[i],
                written: s.written,
                base_source: s.base_source,
                resolved: bound,
                role: p.role,
                set: (p.set != u32::MAX).then_some(p.set as usize),
                holder: bound.then_some(p.holder),
                offset: p.offset,
                binding: ByteRange::new(p.offset, p.widened),
                aligned: !bound || is_aligned(p.offset),
            }
        })
        .collect();

    // O11: a bound slot on a page of the dispatch's page buffer, where either is written.
    if let Some(pb) = page_buffer {
        let mut pages = pb.pages.clone();
        pages.sort_unstable();
        let page_bytes = limits.host_page_bytes;
        for (i, s) in slots.iter().enumerate() {
            if !bound(i) || !(s.written || pb.written) {
                continue;
            }
            let r = ranges[i];
            // First page whose end is past the slot's start.
            let k = pages.partition_point(|&p| p.saturating_add(page_bytes) <= r.start);
            if let Some(&page) = pages.get(k).filter(|&&p| p < r.end) {
                plan.refusals.push(on_page_buffer(
                    s.slot, r, page, page_bytes, s.written, pb.written,
                ));
            }
        }
    }
    plan
}

fn join(a: &Open, b: &Open) -> Join {
    Join {
        a: a.slot,
        b: b.slot,
        overlap: a
            .range
            .intersection(&b.range)
            .unwrap_or(ByteRange::new(b.range.start, b.range.start)),
    }
}

fn misaligned(slot: u32, offset: u64, align: u64, holder: u32, holder_base: u64) -> Refusal {
    let below = offset - offset % align;
    Refusal {
        rule: Rule::O7,
        decision: Rule::O7.decision().into(),
        slot: Some(slot),
        values: vec![
            Value::hex("offset", offset),
            Value::hex("minStorageBufferOffsetAlignment", align),
            Value::int("holder", u64::from(holder)),
            Value::hex("holder base", holder_base),
        ],
        message: format!(
            "slot {slot} binds holder slot {holder} at offset {offset:#x}, not a multiple of minStorageBufferOffsetAlignment {align:#x}"
        ),
        would_run_if: format!(
            "would bind if the offset were a multiple of {align:#x} (slot {slot}'s base {:#x} or {:#x} bytes into the holder), or on a device whose minStorageBufferOffsetAlignment divides {offset:#x}",
            holder_base + below,
            below + align
        ),
        ours: false,
    }
}

fn outside(slot: u32, offset: u64, holder: u32, widened: u64) -> Refusal {
    Refusal {
        rule: Rule::O7,
        decision: Rule::O7.decision().into(),
        slot: Some(slot),
        values: vec![
            Value::hex("offset", offset),
            Value::hex("holder size", widened),
            Value::int("holder", u64::from(holder)),
        ],
        message: format!(
            "slot {slot} binds holder slot {holder} at offset {offset:#x}, outside the holder's {widened:#x} bytes"
        ),
        would_run_if: "would bind if the slot lay inside its holder".into(),
        ours: false,
    }
}

fn too_wide(holder: u32, base: u64, end: u64, n: usize, limits: &DeviceLimits) -> Refusal {
    let max = limits.max_storage_buffer_range;
    Refusal {
        rule: Rule::O5,
        decision: Rule::O5.decision().into(),
        slot: Some(holder),
        values: vec![
            Value::hex("holder base", base),
            Value::hex("widened end", end),
            Value::hex("binding size", end - base),
            Value::hex("maxStorageBufferRange", max),
            Value::int("slots in set", n as u64),
        ],
        message: format!(
            "holder slot {holder} widens to {:#x} bytes ({base:#x}..{end:#x}), more than maxStorageBufferRange {max:#x}; this refusal is dispatchscope's addition: the records do not say what happens past the limit",
            end - base
        ),
        would_run_if: format!(
            "would bind on a device whose maxStorageBufferRange is at least {:#x}",
            end - base
        ),
        ours: true,
    }
}

fn on_page_buffer(
    slot: u32,
    range: ByteRange,
    page: u64,
    page_bytes: u64,
    slot_written: bool,
    buffer_written: bool,
) -> Refusal {
    let who = match (slot_written, buffer_written) {
        (true, true) => "both are written",
        (true, false) => "the slot is written",
        _ => "the page buffer is written",
    };
    Refusal {
        rule: Rule::O11,
        decision: Rule::O11.decision().into(),
        slot: Some(slot),
        values: vec![
            Value::hex("slot start", range.start),
            Value::hex("slot end", range.end),
            Value::hex("page", page),
            Value::hex("page bytes", page_bytes),
        ],
        message: format!(
            "slot {slot} ({range}) lies on page {page:#x} of the dispatch's page buffer (D961), and {who}"
        ),
        would_run_if: format!(
            "would bind if slot {slot} lay on none of the page buffer's pages, or if neither it nor the page buffer were written"
        ),
        ours: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(align: u64) -> DeviceLimits {
        DeviceLimits {
            min_storage_buffer_offset_alignment: align,
            ..DeviceLimits::default()
        }
    }

    /// One line per case: slots as (slot, base, size, written) → sets as (holder, [members]).
    fn check(slots: &[(u32, u64, u64, bool)], expected: &[(u32, &[u32])]) {
        let slots: Vec<Slot> = slots
            .iter()
            .map(|&(i, b, s, w)| Slot::new(i, b, s, w))
            .collect();
        let plan = plan_bindings(&slots, &[], &limits(1), None);
        let got: Vec<(u32, Vec<u32>)> = plan
            .sets
            .iter()
            .map(|s| (s.holder, s.members.iter().map(|m| m.slot).collect()))
            .collect();
        let want: Vec<(u32, Vec<u32>)> = expected.iter().map(|(h, m)| (*h, m.to_vec())).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn o1_written_overlap_joins() {
        check(
            &[(0, 0x100, 0x20, true), (1, 0x110, 0x20, false)],
            &[(0, &[1])],
        );
    }

    #[test]
    fn o1_read_only_overlap_never_joins() {
        check(&[(0, 0x100, 0x20, false), (1, 0x110, 0x20, false)], &[]);
    }

    #[test]
    fn o1_touching_ranges_share_no_byte() {
        check(&[(0, 0x100, 0x10, true), (1, 0x110, 0x10, true)], &[]);
    }

    #[test]
    fn o2_sets_join_through_any_member() {
        // 0 (written) overlaps 1 (read-only) overlaps 2 (written); 0 and 2 share no byte.
        check(
            &[
                (0, 0x100, 0x20, true),
                (1, 0x118, 0x20, false),
                (2, 0x130, 0x20, true),
            ],
            &[(0, &[1, 2])],
        );
        // Two read-only slots bridged by nothing written stay apart.
        check(
            &[
                (0, 0x100, 0x20, true),
                (1, 0x118, 0x20, false),
                (2, 0x130, 0x20, false),
            ],
            &[(0, &[1])],
        );
    }

    #[test]
    fn o4_holder_is_lowest_base_then_earliest_slot() {
        check(
            &[(5, 0x200, 0x10, true), (3, 0x200, 0x10, false)],
            &[(3, &[5])],
        );
        check(
            &[(1, 0x208, 0x10, true), (9, 0x200, 0x10, false)],
            &[(9, &[1])],
        );
    }

    #[test]
    fn o5_o6_widening_and_member_bindings() {
        let slots = vec![
            Slot::new(0, 0x1000, 0x20, true),
            Slot::new(1, 0x1010, 0x100, true),
        ];
        let plan = plan_bindings(&slots, &[], &limits(16), None);
        let set = &plan.sets[0];
        assert_eq!(
            (set.base, set.end),
            (0x1000, 0x1110),
            "O5: the holder ends where slot 1 ends"
        );
        let m = &set.members[0];
        assert_eq!(m.offset, 0x10);
        assert_eq!(
            m.binding,
            ByteRange::new(0x10, 0x110),
            "O6: runs to the widened end"
        );
        assert!(plan.refusals.is_empty());
    }

    #[test]
    fn o7_misaligned_member_is_refused_by_name() {
        let slots = vec![
            Slot::new(18, 0x1000, 0x200000, true),
            Slot::new(20, 0x101004, 0x1000, true),
        ];
        let plan = plan_bindings(&slots, &[], &limits(0x100), None);
        assert_eq!(plan.refusals.len(), 1);
        let r = &plan.refusals[0];
        assert_eq!((r.rule, r.slot), (Rule::O7, Some(20)));
        assert_eq!(
            r.message,
            "slot 20 binds holder slot 18 at offset 0x100004, not a multiple of minStorageBufferOffsetAlignment 0x100"
        );
        assert!(r.would_run_if.contains("0x100"));
        let plan = plan_bindings(&slots, &[], &limits(4), None);
        assert!(plan.refusals.is_empty(), "4 divides 0x100004");
    }

    #[test]
    fn o3_exact_copy_follows_its_slot() {
        let mut copy = Slot::new(2, 0x120, 0x20, false);
        copy.alias_of = Some(1);
        let slots = vec![
            Slot::new(0, 0x100, 0x30, true),
            Slot::new(1, 0x120, 0x20, false),
            copy,
        ];
        let plan = plan_bindings(&slots, &[], &limits(16), None);
        let b1 = plan.binding(1).unwrap();
        let b2 = plan.binding(2).unwrap();
        assert_eq!(
            (b2.offset, b2.binding, b2.set),
            (b1.offset, b1.binding, b1.set)
        );
        assert_eq!(b2.role, Role::Copy { of: 1 });
    }

    #[test]
    fn o3_written_copy_makes_its_slot_join() {
        let mut copy = Slot::new(2, 0x120, 0x20, true);
        copy.alias_of = Some(1);
        // 1 is read-only and overlaps read-only 0; its written copy makes the overlap join.
        let slots = vec![
            Slot::new(0, 0x100, 0x30, false),
            Slot::new(1, 0x120, 0x20, false),
            copy,
        ];
        let plan = plan_bindings(&slots, &[], &limits(16), None);
        assert_eq!(plan.sets.len(), 1);
        assert_eq!(plan.sets[0].holder, 0);
    }

    #[test]
    fn o10_push_block_base_is_the_binding_start() {
        let mut s20 = Slot::new(20, 0xdead_0000, 0x1000, true);
        s20.base_source = BaseSource::PushBlock { word: 2 };
        let slots = vec![Slot::new(18, 0x10_0000, 0x20_0000, true), s20];
        let push = [0, 0, 0x20_0000, 0];
        let plan = plan_bindings(&slots, &push, &limits(0x100), None);
        let b = plan.binding(20).unwrap();
        assert_eq!(b.range.start, 0x20_0000, "not the descriptor's base");
        assert_eq!((b.holder, b.offset), (Some(18), 0x10_0000));
    }

    #[test]
    fn o11_slot_on_page_buffer_is_refused_when_either_is_written() {
        let slots = vec![
            Slot::new(0, 0x5000, 0x10, false),
            Slot::new(1, 0x9000, 0x10, true),
        ];
        let pb = PageBuffer {
            pages: vec![0x5000],
            written: false,
        };
        let plan = plan_bindings(&slots, &[], &limits(16), Some(&pb));
        assert!(plan.refusals.is_empty(), "both read-only: no refusal");
        let pb = PageBuffer {
            pages: vec![0x5000, 0x9000],
            written: false,
        };
        let plan = plan_bindings(&slots, &[], &limits(16), Some(&pb));
        assert_eq!(plan.refusals.len(), 1);
        assert_eq!(
            (plan.refusals[0].rule, plan.refusals[0].slot),
            (Rule::O11, Some(1))
        );
    }

    #[test]
    fn o5_holder_past_max_storage_buffer_range_is_refused_as_ours() {
        let slots = vec![
            Slot::new(0, 0, 0x10, true),
            Slot::new(1, 0x8, 0x900_0000, true),
        ];
        let plan = plan_bindings(&slots, &[], &limits(8), None);
        assert_eq!(plan.refusals.len(), 1);
        assert!(plan.refusals[0].ours);
        assert!(
            plan.refusals[0]
                .message
                .contains("dispatchscope's addition")
        );
    }
}
