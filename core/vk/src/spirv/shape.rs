//! [`Shape`]: how the helper's access path is emitted, each of issue 30's changes on or off, so that
//! a bench measures each alone (`super::library` emits by it, `super::asm` carries it while it
//! does). Nothing here emits code.

/// How the helper's access path is shaped: each change to it, on or off, so that a bench can
/// measure each alone against the others in one submission. [`Shape::SHIPPED`] is what every
/// module gets unless a caller asks otherwise: what the H200 measured fastest (BENCHMARKS.md,
/// issue 30: the fast path halves the helper's time; the first probe before the loop costs 2–8 %
/// and the lane's own counters 2–5 %, so both stay off; the lane cache saves 29–65 %).
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
    /// [`PRIVATE_SITES`](super::library::PRIVATE_SITES) sites in the lane's own counters (a
    /// `Private` array at a constant index once the helper is inlined: registers), added to the
    /// workgroup counters once, when the lane flushes; without, each access is a workgroup atomic.
    pub private_counters: bool,
    /// The lane keeps its last lookup's slot key and answer
    /// ([`LAST_CHUNK`](super::library::symbol::LAST_CHUNK)) and takes the answer again for an
    /// access in a part of the same chunk that the cached slot reaches; without, every access
    /// probes.
    pub lane_cache: bool,
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

    /// What the modules get.
    pub const SHIPPED: Shape = Shape {
        fast_path: true,
        first_probe_unrolled: false,
        private_counters: false,
        lane_cache: true,
        leave_out: 0,
    };
    /// The access path as it was before issue 30: every access word by word, the lookup's
    /// probes all in its loop, a workgroup atomic an instrumented access.
    pub const BEFORE: Shape = Shape {
        fast_path: false,
        first_probe_unrolled: false,
        private_counters: false,
        lane_cache: true,
        leave_out: 0,
    };
}
