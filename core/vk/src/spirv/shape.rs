//! [`Shape`]: how the helper's access path and the instrumentation are emitted, each of issues 30
//! and 42's changes on or off, so that a bench measures each alone (`super::library` emits by it,
//! `super::asm` carries it while it does; the traversal program reads
//! [`Shape::derived_counts`]). Nothing here emits code.

/// How the helper's access path is shaped: each change to it, on or off, so that a bench can
/// measure each alone against the others in one submission. [`Shape::SHIPPED`] is what every
/// module built here gets unless a caller asks otherwise; [`Shape::LINKED`] is what the linkable
/// library ([`super::library::helper_library`]) is built with.
///
/// Issue 30 (measured, BENCHMARKS.md): the fast path halves the helper's time; the first probe
/// before the loop costs 2–8 % and the lane's own counters 2–5 %, so both stay off; the lane cache
/// saves 29–65 %. Issue 42 adds the lean instrumentation (on), the lane cache as a span (on: the
/// helper 1.41× faster on the H100) and four changes measured slower on the H200 or the H100 and
/// left off (`cache_delta`, `slow_path_call`, `lookup_call`, `cache_test32`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shape {
    /// An access that lies in one part of a chunk (or one page) and hits reads its words from one
    /// base, as the raw variant does; only an access that crosses its part's end, or misses, takes
    /// the word-by-word path that picks each word's lookup (T5's split).
    pub fast_path: bool,
    /// The lookup's first probe is read before its loop: a hit in the home slot (most hits,
    /// T2's probes a hit of about 1.1) takes no loop at all.
    pub first_probe_unrolled: bool,
    /// The instrumented variant counts each access of the first
    /// [`PRIVATE_SITES`](super::library::PRIVATE_SITES) sites that the program does not count
    /// itself in the lane's own counters (a `Private` array at a constant index once the helper
    /// is inlined: registers), added to the workgroup counters once, when the lane flushes;
    /// without, each such access is a workgroup atomic.
    pub private_counters: bool,
    /// The lane keeps its last lookup's slot key and answer
    /// ([`LAST_CHUNK`](super::library::symbol::LAST_CHUNK)) and takes the answer again for an
    /// access in a part of the same chunk that the cached slot reaches; without, every access
    /// probes.
    pub lane_cache: bool,
    /// Issue 42, the lane cache's footprint: the cache keeps the slot's key and the chunk's
    /// device-from-guest delta ([`LAST_DELTA`](super::library::symbol::LAST_DELTA)), so that an
    /// access the cache answers is `guest_addr + delta` (no chunk mask kept live, no slot, no
    /// device address and offset to add); a store looks its chunk up without the cache (its
    /// marks need the slot). Without, the cache keeps the whole `Hit`.
    pub cache_delta: bool,
    /// Issue 42: the word-by-word path (an access that crosses its part's end, or misses) is a
    /// function of its own marked `DontInline`, so that its registers need not be live at every
    /// access of the program; without, it is emitted into each access.
    pub slow_path_call: bool,
    /// Issue 42: the lookup's probe loop (what a lane cache miss runs) is marked `DontInline`.
    pub lookup_call: bool,
    /// Issue 42: the lane cache's test of an access in 32-bit words (`library::cache_hits`): the
    /// cached key's low word against the chunk's, its high word masked by the chunk's 16 bits and
    /// the part's excluded bit against the chunk's high word, which must fit those 16 bits; about
    /// half the instructions of the lookup's own 64-bit test (`key & mask == want`,
    /// `helper::hit_test`) on every access, with the same answer. Off: on the H100 (2026-12-07) it
    /// ran 1.05× the 64-bit test's time (loads, 1080p), and [`Shape::cache_span`] supersedes both.
    pub cache_test32: bool,
    /// Issue 42, the helper's cost of parts: the lane cache keeps the span of guest bytes its
    /// slot answers (the whole chunk when the slot reaches every part, else the looked-up part)
    /// as its first byte and a limit, beside the chunk's device-from-guest delta, the slot and
    /// the probes (`library::cached_span`), in the same two variables as the key's cache. An
    /// access is answered again when `guest_addr - first < limit` and the slot is mapped: a
    /// 64-bit subtract and compare and one more compare, then `guest_addr + delta`, with no
    /// chunk, part or key computed on the common path (the key's test takes about 25
    /// instructions). Supersedes [`Shape::cache_test32`] and [`Shape::cache_delta`] when on.
    /// Shipped: on the H100 (2026-12-07) the helper ran 0.449 ms against the key's 0.632 ms
    /// (1080p, loads; 1.019 against 1.210 ms translated), 1.12× raw.
    pub cache_span: bool,
    /// Issue 42, the instrumented variant's lean path: an access counts nothing on its common
    /// path but a lookup of two probes or more; a split, a miss and an escape are counted on the
    /// word-by-word path that took them; a lane's first escape is kept in workgroup memory
    /// ([`LANE_ESCAPES`](super::library::symbol::LANE_ESCAPES)) and logged when the lane
    /// flushes; no lane is captured in the pass (a second dispatch of
    /// [`Variant::Capture`](super::library::Variant::Capture) re-runs the selected lanes'
    /// workgroups). Without, issue 30's path: every access counted, the escape log and the
    /// capture written as each access happens.
    pub lean: bool,
    /// Issue 42, the program's side: the traversal program derives each site's accesses from
    /// its loops' trip counts and stack depths and reports them once, at the lane's end, with
    /// `dispatchscope_count`, its sites flagged
    /// [`SITE_DERIVED`](super::library::SITE_DERIVED) so that the helper does not count them
    /// again; without, the helper counts every access. Shipped off: on the H200 (2026-12-07) the
    /// program's counting kept 85 registers live against 66 and the pass ran 1.60 ms against
    /// 1.00 ms with the helper counting each access by a workgroup atomic (1080p, loads; 2.55 ms
    /// against 1.65 ms translated). A program whose sites run a known number of times and that
    /// counts them cheaply (the emulator host's `device.spvasm`) may still flag them.
    pub derived_counts: bool,
    /// Issue 42: `dispatchscope_count` (the program's counts, at the lane's end) is reduced over
    /// the subgroup's lanes that count the same site (`OpGroupNonUniformIAdd`), one workgroup
    /// atomic a subgroup; without, one a lane. Needs subgroup arithmetic.
    pub subgroup_counts: bool,
    /// Issue 42: the lean path's rare counters (probes, splits, misses, escapes) are reduced as
    /// [`Shape::subgroup_counts`] says, over the lanes that take the rare path together; without,
    /// one workgroup atomic a lane. Needs subgroup arithmetic. Shipped off until a GPU run says
    /// otherwise: on the H200 a wave's atomics at one address were faster left to the driver
    /// than reduced by hand on every access (issue 30), Mesa's compiler makes the same code
    /// either way for RDNA2 (`nir_opt_uniform_atomics`), and on lavapipe the reduction in a
    /// divergent branch cost 2.3× the pass.
    pub subgroup_rare: bool,
    /// Issue 42: the flush adds each workgroup counter to the buffer's 64-bit counter with one
    /// 64-bit atomic whose old value no lane waits for; without, a 32-bit atomic, its old value
    /// read back, and a carry. Needs `shaderBufferInt64Atomics`.
    pub wide_atomics: bool,
    /// Parts of the instrumented variant left out ([`Shape::LEAVE_OUT_COUNTS`] …), to find what
    /// costs: a bench's diagnosis only (its counts, captures and log are then incomplete).
    pub leave_out: u32,
}

impl Shape {
    /// [`Shape::leave_out`]: no access counted (sites, probes, misses, marked stores).
    pub const LEAVE_OUT_COUNTS: u32 = 1;
    /// [`Shape::leave_out`]: no lane captured.
    pub const LEAVE_OUT_CAPTURE: u32 = 2;
    /// [`Shape::leave_out`]: no escape counted or logged.
    pub const LEAVE_OUT_ESCAPES: u32 = 4;
    /// [`Shape::leave_out`]: no workgroup counters zeroed, waited for or flushed, no canary.
    pub const LEAVE_OUT_WORKGROUP: u32 = 8;
    /// [`Shape::leave_out`]: no probe counted (the histogram, extra and longest probes).
    pub const LEAVE_OUT_PROBES: u32 = 16;

    /// What the modules built here get: issue 30's access path, issue 42's lean instrumentation.
    pub const SHIPPED: Shape = Shape {
        fast_path: true,
        first_probe_unrolled: false,
        private_counters: false,
        lane_cache: true,
        cache_delta: false,
        slow_path_call: false,
        lookup_call: false,
        cache_test32: false,
        cache_span: true,
        lean: true,
        derived_counts: false,
        subgroup_counts: true,
        subgroup_rare: false,
        wide_atomics: true,
        leave_out: 0,
    };
    /// The instrumentation as issue 30 shipped it (every access counted by a workgroup atomic,
    /// the escape log and the capture in the access path, a 32-bit flush with a carry), over
    /// issue 30's access path: the bench's "before" of issue 42.
    pub const ISSUE_30: Shape = Shape {
        fast_path: true,
        first_probe_unrolled: false,
        private_counters: false,
        lane_cache: true,
        cache_delta: false,
        slow_path_call: false,
        lookup_call: false,
        cache_test32: false,
        cache_span: false,
        lean: false,
        derived_counts: false,
        subgroup_counts: false,
        subgroup_rare: false,
        wide_atomics: false,
        leave_out: 0,
    };
    /// What the linkable library (`dispatchscope spirv-helper`) is built with: [`Shape::SHIPPED`],
    /// so that an emulator's own linked module is instrumented as the modules built here are, and
    /// measured so (issue 42). Its instrumented variant is the lean one: it imports each lane's
    /// first escape ([`LANE_ESCAPES`](super::library::symbol::LANE_ESCAPES)) besides the workgroup
    /// counters, takes the program's counts of the sites it flags
    /// [`SITE_DERIVED`](super::library::SITE_DERIVED) (a program that flags none is counted
    /// access by access, as before), logs each escaping lane's first escape when the lane ends,
    /// and captures no lane in the pass (a [`Variant::Capture`](super::library::Variant::Capture)
    /// library does). It declares the GroupNonUniform capabilities (arithmetic, vote) and
    /// Int64Atomics, so its device needs subgroup arithmetic and vote in compute shaders and
    /// `shaderBufferInt64Atomics` enabled; [`Shape::fit`] makes one for a device without
    /// (`spirv-helper --no-subgroup-arithmetic --no-int64-atomics`). Issue 30's stays buildable
    /// (`spirv-helper --shape issue30`, [`Shape::ISSUE_30`]).
    pub const LINKED: Shape = Shape::SHIPPED;
    /// The access path as it was before issue 30: every access word by word, the lookup's
    /// probes all in its loop, a workgroup atomic an instrumented access.
    pub const BEFORE: Shape = Shape {
        fast_path: false,
        ..Shape::ISSUE_30
    };

    /// This shape without what a device lacks: subgroup arithmetic for
    /// [`Shape::subgroup_counts`] and [`Shape::subgroup_rare`], `shaderBufferInt64Atomics` for
    /// [`Shape::wide_atomics`].
    pub fn fit(self, subgroup_arithmetic: bool, buffer_int64_atomics: bool) -> Shape {
        Shape {
            subgroup_counts: self.subgroup_counts && subgroup_arithmetic,
            subgroup_rare: self.subgroup_rare && subgroup_arithmetic,
            wide_atomics: self.wide_atomics && buffer_int64_atomics,
            ..self
        }
    }

    /// Whether `part` ([`Shape::LEAVE_OUT_COUNTS`] …) is left out.
    pub fn leaves_out(&self, part: u32) -> bool {
        self.leave_out & part != 0
    }
}
