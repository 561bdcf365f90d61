//! D953: overlapping buffers a dispatch writes bind one buffer (O1–O11).
//!
//! [`plan_bindings`] turns a dispatch's resolved slots into sets, holders, widened ends, member
//! offsets and binding ranges, and refuses by name what cannot be bound. It runs in O(n log n):
//! one sort by base, then one sweep that keeps at most one "written" entry and a lazily expired
//! list of read-only entries, each collapsed into its set as soon as a written slot joins it.
//! It reads no memory and runs nothing.

use serde::{Deserialize, Serialize};

use crate::addr::ByteRange;
use crate::input::{DeviceLimits, PageBuffer, Slot, slot_bases};
use crate::report::{
    BindSet, Join, Member, Refusal, Role, SetJoins, SetMembers, SlotBinding, Value,
};
use crate::rules::Rule;

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

/// What the planner reads of one slot, gathered once so that the sweep and the set pass read
/// one compact array instead of the slots.
#[derive(Clone, Copy, Debug, Default)]
struct Info {
    /// Its range (O10: from the base its accesses are read against).
    start: u64,
    end: u64,
    /// Its slot number.
    slot: u32,
    /// [`BOUND`], [`WRITTEN`], [`JOINS_WRITTEN`], [`COPY`].
    flags: u8,
}

/// The slot and the slot it copies are resolved: it is bound.
const BOUND: u8 = 1;
/// The dispatch writes through the slot.
const WRITTEN: u8 = 2;
/// The slot, or a copy of it, is written (O3): its joins are a written slot's.
const JOINS_WRITTEN: u8 = 4;
/// The slot is a copy of another (O3).
const COPY: u8 = 8;

/// No position, no set.
const NONE: u32 = u32::MAX;

/// A slot the sweep holds open: its range, number and position, so that a join needs no look
/// at the slots.
#[derive(Clone, Copy, Debug)]
struct Open {
    range: ByteRange,
    slot: u32,
    pos: u32,
}

/// A set as its later members bind it: the holder and the widened binding.
#[derive(Clone, Copy, Debug)]
struct Placed {
    base: u64,
    widened: u64,
    holder_slot: u32,
    holder_pos: u32,
    set: u32,
}

/// A union-find forest over slot positions, in borrowed memory.
struct Dsu<'a>(&'a mut [u32]);

impl Dsu<'_> {
    fn find(&mut self, mut x: u32) -> u32 {
        while self.0[x as usize] != x {
            self.0[x as usize] = self.0[self.0[x as usize] as usize];
            x = self.0[x as usize];
        }
        x
    }
    /// Joins the sets of `a` and `b`; returns whether they were apart.
    fn union(&mut self, a: u32, b: u32) -> bool {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            self.0[rb as usize] = ra;
        }
        ra != rb
    }
}

/// What the first pass over a dispatch's slots finds besides each slot's [`Info`].
struct Gathered {
    /// How many slots are resolved: the first `n_keys` keys are theirs.
    n_keys: usize,
    /// The lowest and the highest base.
    lo: u64,
    hi: u64,
    /// Whether slot numbers never fall in position order.
    slots_rise: bool,
    /// Whether any slot is a copy (O3).
    has_copies: bool,
}

/// What the later phases of a plan need to know of the dispatch's slots as a whole.
#[derive(Clone, Copy, Debug)]
struct Shape {
    /// How many slots.
    n: usize,
    /// Bits a position takes in a short sort key.
    bits: u32,
    /// The lowest and the highest base.
    lo: u64,
    hi: u64,
    /// Whether slot numbers never fall in position order.
    slots_rise: bool,
    /// Whether any slot is a copy (O3).
    has_copies: bool,
}

/// The first pass: each slot's range, number and flags into `info`, and the short keys
/// `base << bits | position` of the resolved slots into the front of `keys` (exact when the
/// highest base fits in `64 - bits` bits). Both are as long as `slots`. A function of its own
/// over slices, so that the loop keeps its lengths and running values in registers.
fn gather(
    slots: &[Slot],
    bases: &[u64],
    bits: u32,
    info: &mut [Info],
    keys: &mut [u64],
) -> Gathered {
    let mut n_keys = 0;
    let (mut lo, mut hi) = (u64::MAX, 0u64);
    let mut prev_slot = 0u32;
    let mut slots_rise = true;
    let mut has_copies = false;
    for (i, ((s, &start), g)) in slots.iter().zip(bases).zip(info.iter_mut()).enumerate() {
        let end = start.saturating_add(s.size_bytes);
        lo = lo.min(start);
        hi = hi.max(start);
        slots_rise &= s.slot >= prev_slot;
        prev_slot = s.slot;
        has_copies |= s.alias_of.is_some();
        let written = if s.written {
            WRITTEN | JOINS_WRITTEN
        } else {
            0
        };
        *g = Info {
            start,
            end,
            slot: s.slot,
            flags: written | (u8::from(s.resolved) * BOUND),
        };
        // Written always, kept only for a resolved slot.
        if let Some(k) = keys.get_mut(n_keys) {
            *k = start.wrapping_shl(bits) | i as u64;
        }
        n_keys += usize::from(s.resolved);
    }
    Gathered {
        n_keys,
        lo,
        hi,
        slots_rise,
        has_copies,
    }
}

/// O1, O2: sweeps the canonical bound slots at `order` (positions, in the order of base, slot
/// number, position), joining every overlap with a written slot into `dsu`. It keeps at most one
/// written entry and a lazily expired list of read-only entries, each collapsed into its set as
/// soon as a written slot joins it. Only a join that merges two parts is kept (the joins stay a
/// spanning forest), with the position of its first slot in `join_pos`.
fn sweep(
    order: impl Iterator<Item = u32>,
    info: &[Info],
    dsu: &mut Dsu<'_>,
    joins: &mut Vec<Join>,
    join_pos: &mut Vec<u32>,
    active_read: &mut Vec<Open>,
) {
    // The written slot seen with the furthest end, while it is open; at most one.
    let mut active_written: Option<Open> = None;
    for pos in order {
        let g = info[pos as usize];
        let r = ByteRange {
            start: g.start,
            end: g.end,
        };
        let cur = Open {
            range: r,
            slot: g.slot,
            pos,
        };
        let cur_written = g.flags & JOINS_WRITTEN != 0;
        if let Some(w) = active_written {
            if w.range.end > r.start {
                if dsu.union(w.pos, cur.pos) {
                    joins.push(join(&w, &cur));
                    join_pos.push(w.pos);
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
            for o in active_read.iter() {
                if o.range.end > r.start {
                    if dsu.union(o.pos, cur.pos) {
                        joins.push(join(o, &cur));
                        join_pos.push(o.pos);
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
}

/// Plans the bound path by O1–O11, keeping its working arrays from one call to the next.
///
/// The engine plans every dispatch, so it owns one `Planner` and calls [`Planner::plan`]: the
/// arrays the sweep and the set pass work in are cleared, not freed, and a dispatch allocates
/// only what its [`BindPlan`] holds. Nothing else carries over: a call's plan is the plan
/// [`plan_bindings`] makes of the same input.
#[derive(Debug, Default)]
pub struct Planner {
    /// What the planner reads of each slot.
    info: Vec<Info>,
    /// Slot number → first position, sorted (only with copies).
    by_slot: Vec<(u32, u32)>,
    /// Each slot's canonical position (only with copies).
    canon: Vec<u32>,
    /// The sweep's order as `(base - lowest base) << bits | position`, where that is exact.
    keys: Vec<u64>,
    /// The sweep's order as `base << 64 | slot << 32 | position`, where the short keys are not.
    wide_keys: Vec<u128>,
    /// The forest over positions.
    parent: Vec<u32>,
    /// Each bound slot's root in the forest.
    root_of: Vec<u32>,
    /// The next slot of the same set, in position order.
    next: Vec<u32>,
    /// Per root: its set's first slot.
    head: Vec<u32>,
    /// Per root: its set's first join; once the set is placed, its index in `placed`.
    join_head: Vec<u32>,
    /// The joins, in the order they were made.
    joins: Vec<Join>,
    /// Each join's first slot's position; later the next join of the same set.
    join_pos: Vec<u32>,
    /// The sweep's open read-only slots.
    active_read: Vec<Open>,
    /// The sets placed so far.
    placed: Vec<Placed>,
    /// The page buffer's pages, sorted.
    pages: Vec<u64>,
}

impl Planner {
    /// A planner whose arrays are not allocated yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Plans the bound path by O1–O11. `bases[i]` is the base `slots[i]`'s accesses are read
    /// against (O10: its descriptor's, or the push block's for a D951 slot), as validation found
    /// it ([`crate::engine::validate`]); `slots` must have passed that validation (no overflow,
    /// copies name real slots of the same range), and a dispatch has fewer than 2^31 slots.
    ///
    /// One phase a rule: gather (O10), follow copies (O3), join (O1, O2), link the sets, bind
    /// (O4–O7, O5's range limit), and the page buffer (O11).
    pub fn plan(
        &mut self,
        slots: &[Slot],
        bases: &[u64],
        limits: &DeviceLimits,
        page_buffer: Option<&PageBuffer>,
    ) -> BindPlan {
        puffin::profile_function!();
        let shape = self.gather(slots, bases);
        if shape.has_copies {
            self.follow_copies(slots);
        } else {
            self.canon.clear();
        }
        self.join(&shape);
        let n_sets = self.link_sets(&shape);
        let mut plan = self.bind(slots, &shape, limits, n_sets);
        if let Some(pb) = page_buffer {
            self.refuse_on_page_buffer(slots, pb, limits, &mut plan.refusals);
        }
        plan
    }

    /// O10: each slot's range from its base, its number and flags, and the short sort keys of the
    /// resolved slots; whether slot numbers rise, the lowest and highest base, whether any slot
    /// is a copy.
    #[inline(always)]
    fn gather(&mut self, slots: &[Slot], bases: &[u64]) -> Shape {
        let Self { info, keys, .. } = self;
        let n = slots.len();
        // Each slot's range, number and flags; whether slot numbers never fall in position
        // order, and the lowest and highest base, which say whether the short keys are exact.
        // The short keys without copies, `base << bits | position`, made in the same pass.
        let bits = u64::BITS - (n as u64).leading_zeros();
        info.clear();
        info.resize(n, Info::default());
        keys.clear();
        keys.resize(n, 0);
        let gathered = gather(slots, bases, bits, info, keys);
        keys.truncate(gathered.n_keys);
        Shape {
            n,
            bits,
            lo: gathered.lo,
            hi: gathered.hi,
            slots_rise: gathered.slots_rise,
            has_copies: gathered.has_copies,
        }
    }

    /// O3: a copy follows the slot it copies; its writes count for that slot's joins. Only
    /// called with copies; without, every slot is its own canonical slot.
    fn follow_copies(&mut self, slots: &[Slot]) {
        let Self {
            info,
            by_slot,
            canon,
            ..
        } = self;
        let n = slots.len();
        canon.clear();
        // Slot number → first position, by binary search.
        by_slot.clear();
        by_slot.extend(slots.iter().enumerate().map(|(i, s)| (s.slot, i as u32)));
        by_slot.sort_unstable();
        let by_slot = &by_slot[..];
        let pos_of_slot = |slot: u32| {
            let k = by_slot.partition_point(|&(s, _)| s < slot);
            by_slot
                .get(k)
                .filter(|&&(s, _)| s == slot)
                .map(|&(_, i)| i as usize)
        };
        canon.extend((0..n).map(|i| {
            let mut c = i;
            let mut steps = 0;
            while let Some(of) = slots[c].alias_of.and_then(pos_of_slot) {
                c = of;
                steps += 1;
                if steps > n {
                    break;
                }
            }
            c as u32
        }));
        // A copy follows its slot everywhere (O3): it is bound exactly when the slot it copies is
        // (whatever its own flag says), and its writes count for that slot's joins.
        for i in 0..n {
            let c = canon[i] as usize;
            if slots[c].resolved && slots[i].written {
                info[c].flags |= JOINS_WRITTEN;
            }
        }
        for i in 0..n {
            let c = canon[i] as usize;
            if slots[c].resolved {
                info[i].flags |= BOUND;
            } else {
                info[i].flags &= !BOUND;
            }
            if c != i {
                info[i].flags |= COPY;
            }
        }
    }

    /// O1, O2: joins every two bound slots that share a byte where one is written, in one sweep
    /// by base over a union-find forest; the joins that made each set are kept (a spanning forest).
    #[inline(always)]
    fn join(&mut self, shape: &Shape) {
        let Self {
            info,
            canon,
            keys,
            wide_keys,
            parent,
            joins,
            join_pos,
            active_read,
            ..
        } = self;
        let &Shape {
            n,
            bits,
            lo,
            hi,
            slots_rise,
            has_copies,
        } = shape;
        let n32 = n as u32;
        let info = &info[..];
        let canonical_bound =
            |i: usize| info[i].flags & BOUND != 0 && (!has_copies || canon[i] as usize == i);
        parent.clear();
        parent.extend(0..n32);
        let mut dsu = Dsu(parent);
        joins.clear();
        join_pos.clear();
        active_read.clear();
        let fits = |span: u64| bits == 0 || span >> (64 - bits) == 0;
        if slots_rise && fits(hi.saturating_sub(lo)) {
            // The keys made with the ranges hold every resolved slot from base 0; with copies,
            // or bases too high for them, they are made again.
            if has_copies || !fits(hi) {
                keys.clear();
                keys.extend(
                    (0..n)
                        .filter(|&i| canonical_bound(i))
                        .map(|i| ((info[i].start - lo) << bits) | i as u64),
                );
            }
            keys.sort_unstable();
            let mask = (1u64 << bits) - 1;
            let order = keys.iter().map(|&k| (k & mask) as u32);
            sweep(order, info, &mut dsu, joins, join_pos, active_read);
        } else {
            wide_keys.clear();
            wide_keys.extend((0..n).filter(|&i| canonical_bound(i)).map(|i| {
                (u128::from(info[i].start) << 64) | (u128::from(info[i].slot) << 32) | i as u128
            }));
            wide_keys.sort_unstable();
            let order = wide_keys.iter().map(|&k| k as u32);
            sweep(order, info, &mut dsu, joins, join_pos, active_read);
        }
    }

    /// Each set's slots in position order, as lists through `next` from `head[root]`, and its
    /// joins in the order they were made, through `join_pos` from `join_head[root]`. Returns the
    /// number of sets (of two or more slots).
    #[inline(always)]
    fn link_sets(&mut self, shape: &Shape) -> usize {
        let n = shape.n;
        let Self {
            info,
            canon,
            parent,
            root_of,
            next,
            head,
            join_head,
            join_pos,
            ..
        } = self;
        let has_copies = shape.has_copies;
        let canon_of = |i: usize| if has_copies { canon[i] } else { i as u32 };
        let mut dsu = Dsu(parent);
        // Each set's slots in position order, as lists through `next` from `head[root]`; its
        // joins in the order they were made, through `join_pos` from `join_head[root]`.
        root_of.clear();
        root_of.resize(n, NONE);
        next.clear();
        next.resize(n, NONE);
        head.clear();
        head.resize(n, NONE);
        join_head.clear();
        join_head.resize(n, NONE);
        let mut n_sets = 0;
        for i in (0..n).rev() {
            if info[i].flags & BOUND != 0 {
                let r = dsu.find(canon_of(i));
                root_of[i] = r;
                let h = head[r as usize];
                // A set is counted when it gets its second slot.
                n_sets += usize::from(h != NONE && next[h as usize] == NONE);
                next[i] = h;
                head[r as usize] = i as u32;
            }
        }
        for k in (0..join_pos.len()).rev() {
            let r = root_of[join_pos[k] as usize] as usize;
            join_pos[k] = join_head[r];
            join_head[r] = k as u32;
        }

        n_sets
    }

    /// O4–O7: each set placed when the pass in position order reaches its first slot (holder,
    /// widened end, member offsets and their alignment, O5's range limit), and every slot's binding.
    #[inline(always)]
    fn bind(
        &mut self,
        slots: &[Slot],
        shape: &Shape,
        limits: &DeviceLimits,
        n_sets: usize,
    ) -> BindPlan {
        let n = shape.n;
        let slots_rise = shape.slots_rise;
        let has_copies = shape.has_copies;
        let Self {
            info,
            canon,
            root_of,
            next,
            head,
            join_head,
            joins,
            join_pos,
            placed,
            ..
        } = self;
        let info = &info[..];
        let canon_of = |i: usize| if has_copies { canon[i] } else { i as u32 };
        let align = limits.min_storage_buffer_offset_alignment.max(1);
        // Vulkan's alignments are powers of two: a mask, not a division, on the common path.
        let align_mask = align.is_power_of_two().then(|| align - 1);
        let is_aligned = |offset: u64| match align_mask {
            Some(mask) => offset & mask == 0,
            None => offset.is_multiple_of(align),
        };
        let mut plan = BindPlan {
            sets: Vec::with_capacity(n_sets),
            bindings: Vec::with_capacity(n),
            refusals: Vec::new(),
        };
        // Sets are numbered, and their refusals made, in the order of their first slot: each is
        // placed when the pass in position order reaches its first slot.
        placed.clear();
        let BindPlan {
            sets,
            bindings,
            refusals,
        } = &mut plan;
        bindings.extend(slots.iter().enumerate().map(|(i, s)| {
            let g = info[i];
            // Each path makes the binding in one expression, so that it is written once, in place.
            let binding =
                |role, set: Option<usize>, holder, offset, widened, aligned| SlotBinding {
                    slot: s.slot,
                    range: ByteRange {
                        start: g.start,
                        end: g.end,
                    },
                    written: s.written,
                    base_source: s.base_source,
                    resolved: role != Role::Unbound,
                    role,
                    set,
                    holder,
                    offset,
                    binding: ByteRange::new(offset, widened),
                    aligned,
                };
            if g.flags & BOUND == 0 {
                return binding(Role::Unbound, None, None, 0, 0, true);
            }
            let r = root_of[i] as usize;
            if head[r] == i as u32 && next[i] == NONE {
                // Alone: it holds itself.
                let widened = g.end - g.start;
                if widened > limits.max_storage_buffer_range {
                    refusals.push(too_wide(g.slot, g.start, g.end, 1, limits));
                }
                return binding(Role::Alone, None, Some(g.slot), 0, widened, true);
            }
            if head[r] == i as u32 {
                let set = SetOf {
                    first: i as u32,
                    slots_rise,
                    next,
                    joins,
                    join_next: join_pos,
                    first_join: join_head[r],
                };
                join_head[r] = placed.len() as u32;
                place_set(set, info, limits, align, is_aligned, sets, refusals, placed);
            }
            // Read by field, not copied whole: the set was just written field by field, and a
            // copy's wider loads would stall on those stores.
            let p = &placed[join_head[r] as usize];
            let offset = g.start - p.base;
            let role = if i as u32 == p.holder_pos {
                Role::Holder
            } else if g.flags & COPY != 0 {
                Role::Copy {
                    of: slots[canon_of(i) as usize].slot,
                }
            } else {
                Role::Member
            };
            binding(
                role,
                Some(p.set as usize),
                Some(p.holder_slot),
                offset,
                p.widened,
                is_aligned(offset),
            )
        }));

        plan
    }

    /// O11: a bound slot on a page of the dispatch's page buffer, where either is written, is
    /// refused.
    fn refuse_on_page_buffer(
        &mut self,
        slots: &[Slot],
        pb: &PageBuffer,
        limits: &DeviceLimits,
        refusals: &mut Vec<Refusal>,
    ) {
        let Self { info, pages, .. } = self;
        // O11: a bound slot on a page of the dispatch's page buffer, where either is written.
        pages.clear();
        pages.extend_from_slice(&pb.pages);
        pages.sort_unstable();
        let page_bytes = limits.host_page_bytes;
        for (i, s) in slots.iter().enumerate() {
            if info[i].flags & BOUND == 0 || !(s.written || pb.written) {
                continue;
            }
            let r = ByteRange {
                start: info[i].start,
                end: info[i].end,
            };
            // First page whose end is past the slot's start.
            let k = pages.partition_point(|&p| p.saturating_add(page_bytes) <= r.start);
            if let Some(&page) = pages.get(k).filter(|&&p| p < r.end) {
                refusals.push(on_page_buffer(
                    s.slot, r, page, page_bytes, s.written, pb.written,
                ));
            }
        }
    }
}

/// The slots and joins of one set: the list through `next` from `first`, and the list through
/// `join_next` from `first_join` (or none).
struct SetOf<'a> {
    first: u32,
    /// Whether slot numbers never fall in position order: the list is then in slot order too.
    slots_rise: bool,
    next: &'a [u32],
    joins: &'a [Join],
    join_next: &'a [u32],
    first_join: u32,
}

/// Places the set of two or more slots `set` (O4–O8): chooses its holder, widens its end,
/// refuses what cannot bind (O5, O7), and adds it to `sets` and its placing to `placed`.
#[expect(
    clippy::too_many_arguments,
    reason = "the planner's borrowed parts: one call site, in the pass that places sets"
)]
fn place_set(
    set: SetOf<'_>,
    info: &[Info],
    limits: &DeviceLimits,
    align: u64,
    is_aligned: impl Fn(u64) -> bool,
    sets: &mut Vec<BindSet>,
    refusals: &mut Vec<Refusal>,
    placed: &mut Vec<Placed>,
) {
    let SetOf {
        first,
        slots_rise,
        next,
        joins,
        join_next,
        first_join,
    } = set;
    let slots_of = || {
        std::iter::successors(Some(first), |&j| {
            Some(next[j as usize]).filter(|&k| k != NONE)
        })
    };
    // O4: the lowest base, then the lowest slot number, among the slots that are no copies; the
    // first in position order on a tie.
    let mut holder: Option<(u32, Info)> = None;
    let mut end = 0u64;
    let mut len = 0usize;
    let mut written = false;
    for j in slots_of() {
        let g = info[j as usize];
        if g.flags & COPY == 0 && holder.is_none_or(|(_, h)| (g.start, g.slot) < (h.start, h.slot))
        {
            holder = Some((j, g));
        }
        end = end.max(g.end);
        len += 1;
        written |= g.flags & JOINS_WRITTEN != 0;
    }
    let (holder_pos, h) = holder.unwrap_or((first, info[first as usize]));
    let (base, holder_slot) = (h.start, h.slot);
    let end = end.max(base);
    let widened = end - base;
    if widened > limits.max_storage_buffer_range {
        refusals.push(too_wide(holder_slot, base, end, len, limits));
    }
    let index = sets.len() as u32;
    // Built in place: a set is a few hundred bytes, which `push` builds aside and copies; the
    // copy's wide loads stall on the narrow stores that built it (7 % of a 32-slot plan).
    sets.resize_with(index as usize + 1, || BindSet {
        holder: holder_slot,
        base,
        end,
        members: SetMembers::new(),
        joins: SetJoins::new(),
        written,
    });
    let bind_set = &mut sets[index as usize];
    for j in slots_of() {
        if j == holder_pos {
            continue;
        }
        let g = info[j as usize];
        let offset = g.start - base;
        bind_set.members.push(Member {
            slot: g.slot,
            offset,
            binding: ByteRange::new(offset, widened),
            written: g.flags & WRITTEN != 0,
        });
        if !is_aligned(offset) {
            refusals.push(misaligned(g.slot, offset, align, holder_slot, base));
        }
        if offset >= widened {
            refusals.push(outside(g.slot, offset, holder_slot, widened));
        }
    }
    if !slots_rise {
        bind_set.members.sort_unstable_by_key(|m| m.slot);
    }
    // A spanning forest: one join per member.
    let mut k = first_join;
    while k != NONE {
        bind_set.joins.push(joins[k as usize]);
        k = join_next[k as usize];
    }
    placed.push(Placed {
        base,
        widened,
        holder_slot,
        holder_pos,
        set: index,
    });
}

/// Plans the bound path by O1–O11 with a fresh [`Planner`]. `slots` must have passed
/// [`crate::input`] validation (effective bases exist, no overflow, copies name real slots of the
/// same range). A caller that plans many dispatches keeps a [`Planner`] instead.
pub fn plan_bindings(
    slots: &[Slot],
    push: &[u32],
    limits: &DeviceLimits,
    page_buffer: Option<&PageBuffer>,
) -> BindPlan {
    let bases = slot_bases(slots, push);
    Planner::new().plan(slots, &bases, limits, page_buffer)
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
        message: if n == 1 {
            format!(
                "slot {holder} binds {:#x} bytes ({base:#x}..{end:#x}) alone, more than maxStorageBufferRange {max:#x}; nothing was widened (it is in no set): the slot itself is wider than the device binds; this refusal is dispatchscope's addition: the records do not say what happens past the limit",
                end - base
            )
        } else {
            format!(
                "holder slot {holder} widens to {:#x} bytes ({base:#x}..{end:#x}) to hold the {n} slots of its set (O5), more than maxStorageBufferRange {max:#x}; this refusal is dispatchscope's addition: the records do not say what happens past the limit",
                end - base
            )
        },
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
    use crate::input::BaseSource;

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

    /// A reused [`Planner`] plans every dispatch as a fresh one does: nothing of one plan (sets,
    /// lists, keys) leaks into the next. Random dispatches of every shape, one after another:
    /// copies (also of missing slots), unresolved slots, push-block bases, page buffers,
    /// misaligned bases, falling and repeated slot numbers, bases far apart, odd limits.
    #[test]
    fn a_reused_planner_plans_as_a_fresh_one() {
        let mut below = crate::test_rng(0x9e37_79b9_7f4a_7c15);
        let mut planner = Planner::new();
        for _ in 0..3000 {
            let n = match below(8) {
                0 => below(3),
                1..=5 => below(40),
                6 => below(200),
                _ => below(1500),
            } as usize;
            let density = 1 + below(600);
            let span = (n as u64 + 1) * density;
            let region = [0, 0x1000, 0x4000_0000_0000, 0x7400_5b80_0000][below(4) as usize];
            let far = below(6) == 0;
            let misaligned = below(3) == 0;
            let numbering = below(5);
            let mut push: Vec<u32> = Vec::new();
            let mut slots: Vec<Slot> = Vec::with_capacity(n);
            for i in 0..n {
                let mut base = region + below(span);
                if far && below(3) == 0 {
                    base = base.wrapping_add(below(1 << 20) << 40) & 0x00ff_ffff_ffff_ffff;
                }
                if !misaligned || below(4) != 0 {
                    base &= !0xf;
                }
                let size = match below(20) {
                    0 => 0,
                    1 => 1 + below(0x10_0000),
                    _ => 1 + below(density * 3 + 16),
                };
                let slot = match numbering {
                    0 => (n - i) as u32,
                    1 => below(n as u64 + 1) as u32,
                    2 => i as u32 / 2,
                    _ => i as u32 * 3,
                };
                let mut s = Slot::new(slot, base, size, below(2) == 0);
                match below(25) {
                    0 | 1 if i > 0 => {
                        // A valid copy: of the first slot of its number.
                        let number = slots[below(i as u64) as usize].slot;
                        let Some(of) = slots.iter().find(|o| o.slot == number) else {
                            continue;
                        };
                        (s.base, s.size_bytes, s.base_source) =
                            (of.base, of.size_bytes, of.base_source);
                        s.alias_of = Some(of.slot);
                    }
                    2 => s.resolved = false,
                    3 => {
                        s.base_source = BaseSource::PushBlock {
                            word: push.len() as u32,
                        };
                        push.extend([base as u32, (base >> 32) as u32]);
                        s.base = 0xdead_0000;
                    }
                    4 => s.alias_of = Some(u32::MAX - below(2) as u32),
                    _ => {}
                }
                slots.push(s);
            }
            let limits = DeviceLimits {
                min_storage_buffer_offset_alignment: [1, 4, 12, 16, 64, 256][below(6) as usize],
                max_storage_buffer_range: if below(4) == 0 {
                    0x1000 + below(0x1_0000)
                } else {
                    DeviceLimits::default().max_storage_buffer_range
                },
                ..DeviceLimits::default()
            };
            let page_buffer = (below(3) == 0).then(|| PageBuffer {
                pages: (0..below(20))
                    .map(|_| (region + below(span + 0x2000)) & !0xfff)
                    .collect(),
                written: below(2) == 0,
            });
            let reused = planner.plan(
                &slots,
                &slot_bases(&slots, &push),
                &limits,
                page_buffer.as_ref(),
            );
            let fresh = plan_bindings(&slots, &push, &limits, page_buffer.as_ref());
            assert_eq!(reused, fresh);
            assert_eq!(
                serde_json::to_string(&reused).unwrap(),
                serde_json::to_string(&fresh).unwrap()
            );
        }
    }
}
