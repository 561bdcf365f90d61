//! The lookup helper as a linkable SPIR-V library (issue 14, D964's real path): the functions a
//! translated module calls for every guest access, exported by name, in variants that share one
//! signature each, so that one translated program links against any of them.
//!
//! - [`Variant::Raw`]: a guest address plus one constant is the device address (all of guest
//!   memory in one import: the physical limit; no table, no marks, no escapes).
//! - [`Variant::Helper`]: T5 through the chunk table (`emit_lookup`, the one helper), T4 misses
//!   read zero and drop stores, C1 marks.
//! - [`Variant::Instrumented`]: the helper, plus the device-side instrumentation whose buffer
//!   layout is `dispatchscope_core::instrument`'s (counters, sites, escape log, lane capture, the
//!   positive control).
//! - [`Variant::Capture`]: the helper capturing the selected lanes' accesses and nothing else:
//!   the instrumented pass's second dispatch, over the selected lanes' workgroups only (issue 42).
//! - [`Variant::Header`]: the helper reading its words from a header in memory.
//! - [`Variant::Flat`]: the peer, shadPS4's flat page table of 16 KiB pages with a fault bitmap
//!   (`emit_flat_access`), the anchor the helper is measured against.
//!
//! Each access takes one of two paths ([`Shape::fast_path`]): an access inside one part of a chunk
//! (a sixteenth of it, `chunk_table::PARTS`: the table may map a chunk by parts) that hits reads
//! every word from one base, as the raw variant does; only an access that crosses its part's end or
//! misses picks each word's lookup (T5: the first byte's part, or the last byte's). [`Shape`]
//! turns each of issues 30 and 42's changes on or off so that the bench measures each alone;
//! `inline` runs `spirv-opt` over a finished module (feature `tools`, as `link`: each runs a
//! process).
//!
//! Two ways in: [`helper_library`] builds the library module (Linkage capability,
//! `LinkageAttributes … Export`) that a translator in any language links its module against with
//! SPIRV-Tools' `spirv-link` (`link`); a translator built on this crate's builder emits the same
//! functions into its own module (`emit_helpers`, what the traversal program does). Both are
//! built as issue 42 ships them ([`Shape::LINKED`] is [`Shape::SHIPPED`]): the lean
//! instrumentation, whose linked program exports each lane's first escape too and may count its
//! own sites (below); [`helper_library_shaped`] builds one fitted to a device without subgroup
//! arithmetic or 64-bit buffer atomics ([`Shape::fit`]), or issue 30's ([`Shape::ISSUE_30`]).
//!
//! # The interface (what a translated module must follow)
//! Exported functions (all parameters by value):
//! - `u32 dispatchscope_lane(u32 workgroup, u32 local, u32 lanes, u32 x, u32 y)`: once per lane,
//!   first, by every lane of the workgroup in workgroup-uniform control flow (where a barrier may
//!   be: the instrumented variant has one); `lanes` is the workgroup's lane count (at most 64,
//!   `local` below it). Returns the lane's token (`workgroup << 7 | local << 1 | captured`), which
//!   every other call takes. The instrumented variant zeroes the workgroup counters (below) and,
//!   in lane 0 of workgroup 0, makes the positive control's canary lookup; on issue 30's path, and
//!   in the capture variant, it tests the lane against the capture selection (the token's low
//!   bit).
//! - `u32 dispatchscope_route(u64 flat)`: P1 with the default apertures: 0 guest memory, 1 LDS
//!   (`0x80000000`), 2 scratch (`0x70000000`).
//! - `uvec4 dispatchscope_load(u32 token, u32 site, u64 guest_addr, u32 size_bytes)`: a guest load
//!   of 4, 8, 12 or 16 bytes at a 4-byte-aligned address; words that miss read zero (T4). `site`
//!   is the site's number, the same in every lane at one call (a constant), flagged with
//!   [`SITE_DERIVED`] where the program counts the site's accesses itself (every function that
//!   takes a site).
//! - `void dispatchscope_store(u32 token, u32 site, u64 guest_addr, u32 size_bytes, uvec4 values)`:
//!   a guest store; words that miss are dropped (T4); each chunk slot it hits is marked once (two
//!   parts of one chunk through one slot mark it once), with the summary word of the slot's block
//!   of `MARK_BLOCK_SLOTS` (C1).
//! - `void dispatchscope_note(u32 token, u32 site, u32 flags, u64 addr, uvec4 values)`: an access
//!   the program made itself (LDS, scratch, a bound holder), for the counters and the capture;
//!   `flags` are the capture flags of `dispatchscope_core::instrument` (`route << 12 | store << 8 |
//!   size`, the slot in bits 24–31). Empty in the variants without instrumentation.
//! - `void dispatchscope_flush(u32 token, u32 lanes)`: once per lane, last (after the lane's
//!   last access), by every lane of the workgroup in workgroup-uniform control flow, `lanes` as
//!   given to `dispatchscope_lane`. The instrumented variant waits at a workgroup barrier, then
//!   adds the workgroup counters to the instrumentation buffer, one global atomic per non-zero
//!   word, the words shared among the lanes (on the lean path the lane first appends its first
//!   escape to the log); the other variants do nothing. A workgroup that never calls it loses its
//!   counts (on issue 30's path the escape log and the capture are written as they happen).
//! - `void dispatchscope_count(u32 token, u32 site, u32 route, u32 n)`: `n` accesses of `site` by
//!   `route` (the site's word index: guest 0, LDS 1, scratch 2, bound 3) that the program counted
//!   itself and passes flagged [`SITE_DERIVED`] (issue 42: a loop's trip count at its exit, a
//!   stack's depth), added modulo 2^32 within the workgroup, so that a program may take back an
//!   access it counted as one route and the helper counted as another (`0 - 1`); any control flow,
//!   cheapest where a subgroup's lanes call it together (the lane's end, before the flush). A site
//!   flagged so is counted by nothing else: the program reports every access it made at that
//!   site, by route, whichever way the lane went (a lane that reports 0 may call it anyway: the
//!   `examples/emulator-host` program reports each of its sites so, every lane alike). Empty but
//!   in the instrumented variant.
//! - `Hit dispatchscope_lookup(u64 guest_chunk, u32 part)`: T5 itself, `{u64 device_addr, u32
//!   slot, u32 probes, u32 excluded}` for `part` (`(guest_addr >> (chunk_shift - 4)) & 15`, below
//!   16) of `guest_chunk` (`guest_addr >> chunk_shift`): the device address of the chunk's first
//!   byte in the import that holds the part (add `guest_addr & (chunk_bytes - 1)`), the slot that
//!   reaches it and the parts that slot does not reach; on a miss address 0, slot `0xffffffff` and
//!   `excluded` `0xffff` (T4). Two bytes of one part always share a lookup; two of one chunk may
//!   not.
//!
//! # Workgroup memory
//! The instrumented helper counts in the workgroup memory of the translated module:
//! `dispatchscope_workgroup`, an array of [`WORKGROUP_WORDS`] u32 (2,128 bytes; no explicit layout),
//! laid out as `dispatchscope_core::instrument::workgroup` says (misses, stores marked, the probe
//! histogram, the workgroup's escapes and extra probes, then 8 words for each of the first
//! [`WORKGROUP_SITES`] sites). When the workgroup ends, `dispatchscope_flush` also adds its
//! escapes and extra probes to its heat cell (`dispatchscope_core::instrument::Grid::heat_cell_of`). The program declares
//! the variable (`OpVariable` of `Workgroup` storage), exports it with `LinkageAttributes
//! "dispatchscope_workgroup" Export` and lists it in its entry point's interface; every library
//! imports it (the raw and helper variants leave it unused), so one program links against any of
//! them. The caller's own workgroup memory and this one together must fit the device's
//! `maxComputeSharedMemorySize` (32 KiB at least). [`emit_into`] declares it in a Rust caller's
//! module for the instrumented variant and returns it ([`EmittedHelpers::workgroup`]). The lean
//! path ([`Shape::lean`]) also keeps each lane's first escape in workgroup memory,
//! [`symbol::LANE_ESCAPES`] ([`MAX_LANES`] × [`LANE_ESCAPE_WORDS`] u32, 1,280 bytes; no explicit
//! layout), declared by the module that emits it ([`EmittedHelpers::lane_escapes`]); a linked
//! program declares it as it declares the workgroup counters, exports it with `LinkageAttributes
//! "dispatchscope_lane_escapes" Export` and lists it in its entry point's interface. Only the
//! lean instrumented library imports it ([`keeps_lane_escapes`]); the others, and issue 30's,
//! leave a program's export unused, so one program links against any of them.
//!
//! The push block (128 bytes, 32 words) is shared by name: the program exports its push-constant
//! variable as `dispatchscope_push` (a `Block` struct of one `u32[32]` array, stride 4), the
//! library imports it. The helper reads words 18 (`log2` chunk bytes), 19 (`log2` table capacity),
//! 20 (probe bound), 22–23 (the raw variant's device-from-guest offset), 24–25 (the mark buffer's
//! device address, C1: one word per table slot, then one summary word per `MARK_BLOCK_SLOTS`
//! slots, `chunk_table::mark_buffer_words`; a store sets both), 26–27 (the instrumentation
//! buffer's device address), 28–29 (the hash multiplier) and 30–31 (the table, T3). Words 0–17 and 21 are the
//! program's. The helper binds no descriptor: the table, marks and instrumentation are reached by
//! device address, so a program keeps every binding for itself (the traversal's holders are
//! set 0, binding 0, and their write masks binding 1, as the replay's, O6–O9).
//!
//! Counting goes to the workgroup counters. On issue 30's path ([`Shape::ISSUE_30`]) an access's
//! (site, route) word takes one workgroup-scope atomic per lane; rarer
//! events (splits, probes past the first, misses, site escapes) add theirs per lane, in workgroup
//! memory too; the escape log and the capture are written to the buffer as each access happens.
//! `dispatchscope_flush` adds the words to the buffer's 64-bit counters
//! (`dispatchscope_core::instrument::wide_word`), so a count never wraps; a site numbered past
//! [`WORKGROUP_SITES`] is counted straight there.
//!
//! # The lean instrumentation (issue 42, [`Shape::lean`])
//! Where the time went (BENCHMARKS.md, issue 30): counting every access was half the pass, and the
//! capture's and the escape log's branches 20–30 % each though they almost never ran (a store to
//! global memory that may happen between two guest loads keeps the compiler from issuing the later
//! load early). So an access's common path adds to the helper's only a test of its first lookup's
//! probes (two or more: the histogram, the site's extra and longest probes, the workgroup's heat);
//! its site's count comes from the program ([`SITE_DERIVED`], `dispatchscope_count` once at the
//! lane's end), or where the program does not count a site, a workgroup atomic as before. A split,
//! a miss and an escape are counted on the word-by-word path, the only one that has them; an
//! escape keeps the lane's first in workgroup memory ([`symbol::LANE_ESCAPES`]), which the lane
//! appends to the log when it flushes (every escape is still counted by its site and heat cell;
//! the log keeps each escaping lane's first, in the order lanes end). Nothing on an access's path
//! stores to global memory but a store's own words and marks (and the canary's count, in lane 0
//! of workgroup 0 only). The program's counts are reduced over the subgroup's lanes that count
//! the same site ([`Shape::subgroup_counts`]), one workgroup atomic a subgroup (the rare paths'
//! may be too, [`Shape::subgroup_rare`], shipped off); the flush adds each workgroup word with one 64-bit atomic whose old value nobody waits for
//! ([`Shape::wide_atomics`]), and the heat cell takes the sums of the sites' words. No lane is
//! captured in the pass: [`Variant::Capture`] runs again over the selected lanes' workgroups
//! (`pass::DevicePass::run`: one more dispatch in the same submission), which a pass whose reads
//! do not depend on its own writes allows; it stores and marks nothing, and writes only the
//! capture.
//!
//! # The lane's lookup cache
//! Each lane keeps its last lookup, keyed by chunk (a lane's neighbouring rows lie in one chunk,
//! often in different parts of it), in two `Private` variables: `dispatchscope_last_chunk`
//! (`u64`: the key of the slot the last lookup found, chunk and excluded parts, or on a miss the
//! chunk with every part excluded; first `u64::MAX`, which no lookup hits) and
//! `dispatchscope_last_hit` (the `Hit`, first a miss). An access whose first byte's part that key
//! would hit (`key & mask == want`, the lookup's own test: the same chunk, and a part the cached
//! slot reaches) takes the answer again without a probe. It is the answer the lookup would give,
//! its probe count included: the table does not change while a dispatch runs (T6); the slots
//! from the chunk's home to the cached one are not empty (the first lookup read past them), and a
//! part is reached by at most one slot of its chunk (the table refuses two that overlap), so none
//! of them hits a part the cached slot reaches: a lookup of any such part stops at the cached
//! slot, after as many probes. A miss is never taken again for another part (another slot may
//! reach it). Every count stays the CPU reference's. On the H200 it made the helper 1.26× faster
//! at 4K (BENCHMARKS.md, 2026-12-02). Keyed so, the parts cost the cache no register: the excluded
//! parts ride in the key's top 16 bits, which a mapped chunk's number never uses, and the `Hit`'s
//! own `excluded` is never read back from the cache. As with the workgroup counters, the program
//! declares both, with their first values, exports them by those names and lists them in its
//! entry point's interface; every library imports them (the raw variant leaves them unused);
//! [`emit_into`] declares them in a Rust caller's module ([`EmittedHelpers::lane_cache`]). With
//! [`Shape::cache_delta`] (issue 42; off, measured slower) a module built here keeps
//! instead the key, the chunk's delta and the probes
//! ([`symbol::LAST_DELTA`], [`symbol::LAST_PROBES`]): an access the cache answers is
//! `guest_addr + delta`, and a store looks up without the cache.
//!
//! As shipped ([`Shape::cache_span`], issue 42) the same two variables hold the cache as a span
//! of guest bytes ([`cached_span`]): `dispatchscope_last_chunk` the span's first byte, the `Hit`
//! the chunk's device-from-guest delta, the slot, the probes and, in its `excluded` word, the
//! span's limit (its length less 15: an access of up to 16 bytes that starts below it ends in the
//! span). The span is the whole chunk when the slot reaches every part, else the one part looked
//! up. An access with `guest_addr - first < limit` through a mapped slot is `guest_addr + delta`:
//! no chunk, part or key is computed on that path, and an access across a part's end inside the
//! span reads from one base (the instrumented variant still counts its split, on the
//! word-by-word path). The argument above makes its answer the lookup's, probes included. The
//! program's declarations and first values are the same for either form, so one program links
//! against either library; the slot's test keeps the first `Hit` (a miss, whose `excluded`
//! 0xffff would read as a limit) from answering anything.
//!
//! The lane's own counters: the program also declares `dispatchscope_lane_counts`
//! ([`symbol::LANE_COUNTS`], a `Private` `u32[LANE_COUNT_WORDS]`, zero first) and exports it as it
//! does the lookup cache. With [`Shape::private_counters`] the instrumented variant counts each
//! access of the first [`PRIVATE_SITES`] sites there and adds them to the workgroup counters once,
//! in `dispatchscope_flush`; shipped off (on the H200 they took 17 more registers a lane and the
//! pass ran 2–5 % slower than a workgroup atomic an access).
//!
//! Every lane looks its own chunks up, and no access's common path has a subgroup operation. Two
//! wave-level schemes were built and measured on the H200 (BENCHMARKS.md, 2026-12-02) and removed:
//! one lookup for a wave whose lanes share a chunk, broadcast to the others (the helper 1.85×
//! slower at 4K: the lanes' identical probes were already one cached load, and the vote, the
//! election and the broadcasts lengthened every access's dependent chain), and one counter atomic
//! for a wave at one site from a ballot's count on every access (the instrumented pass 1.9× slower
//! than an atomic a lane). The lean path reduces only on its rare paths and at the lane's end.
//! Nothing here calls Vulkan.

#[cfg(feature = "tools")]
use std::io::Write;
#[cfg(feature = "tools")]
use std::process::{Command, Stdio};

use rspirv::dr::Operand;
use rspirv::spirv::{LinkageType, Op, StorageClass, Word};

use super::asm::Asm;
use super::helper::{EVERY_PART, emit_lookup, hit_test};
use super::{R, record};
use crate::VkError;
use dispatchscope_core::chunk_table::{KEY_CHUNK_BITS, PARTS};
use dispatchscope_core::instrument::{
    CANARY_SITE, CAPTURE_WORDS, ESCAPE_WORDS, HEAT_CELL_WORDS, HISTOGRAM_BUCKETS, SITE_WORDS,
    SITES_AT, WORKGROUP_SITES, WORKGROUP_WORDS, counter, header, route, site, wide_word, workgroup,
};

pub use super::asm::PUSH_SYMBOL;

/// The exported functions' link names.
pub mod symbol {
    /// `dispatchscope_lane`.
    pub const LANE: &str = "dispatchscope_lane";
    /// `dispatchscope_route`.
    pub const ROUTE: &str = "dispatchscope_route";
    /// `dispatchscope_load`.
    pub const LOAD: &str = "dispatchscope_load";
    /// `dispatchscope_store`.
    pub const STORE: &str = "dispatchscope_store";
    /// `dispatchscope_note`.
    pub const NOTE: &str = "dispatchscope_note";
    /// `dispatchscope_lookup`.
    pub const LOOKUP: &str = "dispatchscope_lookup";
    /// `dispatchscope_flush`.
    pub const FLUSH: &str = "dispatchscope_flush";
    /// The workgroup counters, a `Workgroup` variable the program exports and the library imports.
    pub const WORKGROUP: &str = "dispatchscope_workgroup";
    /// The key of the slot the lane's last lookup found (or its chunk with every part excluded,
    /// after a miss), a `Private` `u64` the program exports (first `u64::MAX`) and the library
    /// imports.
    pub const LAST_CHUNK: &str = "dispatchscope_last_chunk";
    /// The lane's last lookup's answer, a `Private` `Hit` the program exports and the library
    /// imports.
    pub const LAST_HIT: &str = "dispatchscope_last_hit";
    /// The lane's own access counters, a `Private` `u32[LANE_COUNT_WORDS]` the program exports
    /// (zero first) and the library imports.
    pub const LANE_COUNTS: &str = "dispatchscope_lane_counts";
    /// `dispatchscope_count`.
    pub const COUNT: &str = "dispatchscope_count";
    /// With [`super::Shape::cache_delta`]: the chunk's device-from-guest delta of the lane's last
    /// lookup, a `Private` `u64` beside [`LAST_CHUNK`].
    pub const LAST_DELTA: &str = "dispatchscope_last_delta";
    /// With [`super::Shape::cache_delta`], instrumented: the lane's last lookup's probes, a
    /// `Private` `u32`.
    pub const LAST_PROBES: &str = "dispatchscope_last_probes";
    /// With [`super::Shape::lean`], instrumented: each lane's first escape, a `Workgroup`
    /// `u32[MAX_LANES * LANE_ESCAPE_WORDS]` (`super::LANE_ESCAPE_WORDS` words a lane).
    pub const LANE_ESCAPES: &str = "dispatchscope_lane_escapes";
}

/// A site parameter's flag: the program counts this site's accesses itself and reports them
/// with `dispatchscope_count` (a loop's trip count at its exit, a stack's depth), so the helper
/// does not count the access (it still counts its probes, splits, misses and escapes, and
/// captures it). The site's number is the parameter's [`SITE_NUMBER_MASK`] bits.
pub const SITE_DERIVED: u32 = 1 << 30;
/// The bits of a site parameter that number the site.
pub const SITE_NUMBER_MASK: u32 = SITE_DERIVED - 1;
/// Lanes a workgroup has at most (a token has six bits of local lane).
pub const MAX_LANES: u32 = 64;
/// Words of a lane's first escape in [`symbol::LANE_ESCAPES`]: site, address (2 words),
/// `size | store << 16`, the escaped-bytes mask.
pub const LANE_ESCAPE_WORDS: u32 = 5;
/// A lane's first-escape site word while it has not escaped.
const NO_ESCAPE: u32 = u32::MAX;
const _: () = assert!(
    SITE_NUMBER_MASK < NO_ESCAPE && dispatchscope_core::instrument::CANARY_SITE == u32::MAX,
    "no site's number is the empty record's, and the canary's parameter is every bit set"
);

/// The push words the helper reads besides the table's (T3: 18–20, 28–31).
pub mod push {
    /// The raw variant's device-from-guest offset (2 words).
    pub const RAW_OFFSET: u32 = 22;
    /// The mark buffer's device address (2 words): one word per table slot, then the summary, one
    /// word per `MARK_BLOCK_SLOTS` slots (C1, `chunk_table::mark_buffer_words`).
    pub const MARKS: u32 = 24;
    /// The instrumentation buffer's device address (2 words).
    pub const INSTRUMENT: u32 = 26;
    /// [`super::Variant::Flat`]: `log2` of the flat page table's entries (its page numbers are
    /// masked with entries − 1, as a table over a fixed span of address bits is indexed).
    pub const FLAT_ENTRIES_LOG2: u32 = 19;
    /// [`super::Variant::Flat`]: the fault bitmap's device address (2 words), one bit a page.
    pub const FAULTS: u32 = 24;
    /// [`super::Variant::Flat`]: the flat page table's device address (2 words), where the other
    /// variants read the chunk table's (T3).
    pub const FLAT_TABLE: u32 = dispatchscope_core::rules::DEVICE_TABLE_PUSH_WORD;
}

/// Bytes of a page of [`Variant::Flat`]'s table, as shadPS4's (`log2`).
pub const FLAT_PAGE_SHIFT: u32 = 14;
/// Bytes of a flat page table's entry: a page's device address, 0 for a page not mapped.
pub const FLAT_ENTRY_BYTES: u64 = 8;

pub use super::shape::Shape;

/// Sites whose accesses the instrumented variant counts in the lane's own counters
/// ([`Shape::private_counters`]); later sites take a workgroup atomic an access.
pub const PRIVATE_SITES: u32 = 16;
/// Words of the lane's own counters: one a route (guest, LDS, scratch, bound) a site.
pub const LANE_COUNT_WORDS: u32 = 4 * PRIVATE_SITES;
const _: () = assert!(
    PRIVATE_SITES <= WORKGROUP_SITES,
    "a lane's sites are the workgroup's"
);

impl Default for Shape {
    fn default() -> Self {
        Self::SHIPPED
    }
}

/// The first push word the header form keeps in its header: the header holds push words 16–31
/// as the word form pushes them (64 bytes), so an emulator writes `ds_prepared::push[16..32]`
/// into a buffer of its own and pushes only that buffer's device address, at words 30–31.
pub const HEADER_FIRST_WORD: u32 = 16;
/// Bytes of the header form's header.
pub const HEADER_BYTES: u64 = 4 * (32 - HEADER_FIRST_WORD as u64);

/// Which helper.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// Guest address plus one constant (the limit).
    Raw,
    /// Through the chunk table (T5), with misses (T4) and marks (C1).
    Helper,
    /// The helper with the device-side instrumentation.
    Instrumented,
    /// The helper whose push block carries one 64-bit value, at words 30–31: the device address
    /// of a 64-byte header holding the helper's words ([`HEADER_FIRST_WORD`]): for a push block
    /// as full as shadPS4's, which has 8 bytes left. Each parameter the helper reads is then one
    /// uniform load instead of a push-constant read.
    Header,
    /// The peer an emulator ships today, shadPS4's buffer-device-address page table: 16 KiB pages
    /// ([`FLAT_PAGE_SHIFT`]), one 8-byte entry a page holding the page's device address
    /// (device-local, indexed by the guest page number); a page not mapped reads zero, drops its
    /// stores and sets its bit in a fault bitmap by a plain load, OR and store (faults may be
    /// lost, as shadPS4's are). No chunk table, no marks, no escape log: the comparison's anchor,
    /// not a dispatch path of this engine.
    Flat,
    /// The helper capturing the selected lanes and nothing else (issue 42): the instrumented
    /// pass's second dispatch, over only the workgroups whose lanes a debugger selected, so
    /// that the first counts every access and captures none. It looks up as the helper does and
    /// writes the capture (its entries and count) of the instrumentation buffer; it stores no
    /// guest word, marks no chunk and counts nothing, so a pass whose reads do not depend on its
    /// own writes gives each selected lane the accesses it made in the first dispatch.
    Capture,
}

impl Variant {
    /// Every variant, in the order the bench reports them (the instrumented one last, so that
    /// its buffer is what a run of them all leaves).
    pub const ALL: [Variant; 6] = [
        Variant::Raw,
        Variant::Helper,
        Variant::Header,
        Variant::Flat,
        Variant::Capture,
        Variant::Instrumented,
    ];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Raw => "raw",
            Variant::Helper => "helper",
            Variant::Instrumented => "instrumented",
            Variant::Header => "header",
            Variant::Flat => "flat",
            Variant::Capture => "capture",
        }
    }

    /// Whether it looks guest addresses up in the chunk table (T5).
    pub fn has_lookup(self) -> bool {
        !matches!(self, Variant::Raw | Variant::Flat)
    }
}

/// The helper functions of one module, by id.
#[derive(Clone, Copy, Debug)]
pub(super) struct Helpers {
    pub(super) lane: Word,
    pub(super) route: Word,
    pub(super) load: Word,
    pub(super) store: Word,
    pub(super) note: Word,
    pub(super) flush: Word,
    pub(super) count: Word,
    /// `uvec4`, the values' type.
    pub(super) vec4: Word,
    /// T5's `Hit lookup(u64 guest_chunk, u32 part)` (none in the raw variant, or when only
    /// declared).
    pub(super) lookup: Option<Word>,
}

/// The function types of the interface.
#[cfg_attr(
    not(feature = "demo"),
    allow(
        dead_code,
        reason = "only `declare_helpers` (the traversal program's, feature `demo`) reads them all"
    )
)]
struct Sigs {
    lane: Word,
    route: Word,
    load: Word,
    store: Word,
    note: Word,
    flush: Word,
    count: Word,
    vec4: Word,
}

fn sigs(a: &mut Asm) -> Sigs {
    let t = a.t;
    let vec4 = a.b.type_vector(t.u32, 4);
    Sigs {
        lane: a.b.type_function(t.u32, [t.u32; 5]),
        route: a.b.type_function(t.u32, [t.u64]),
        load: a.b.type_function(vec4, [t.u32, t.u32, t.u64, t.u32]),
        store: a
            .b
            .type_function(t.void, [t.u32, t.u32, t.u64, t.u32, vec4]),
        note: a
            .b
            .type_function(t.void, [t.u32, t.u32, t.u32, t.u64, vec4]),
        flush: a.b.type_function(t.void, [t.u32, t.u32]),
        count: a.b.type_function(t.void, [t.u32; 4]),
        vec4,
    }
}

/// Declares the interface's functions as imports (bodies come from the library at link time).
#[cfg(feature = "demo")]
pub(super) fn declare_helpers(a: &mut Asm) -> R<Helpers> {
    let s = sigs(a);
    let t = a.t;
    let declare = |a: &mut Asm, ret: Word, fty: Word, params: &[Word], name: &str| -> R<Word> {
        let f =
            a.b.begin_function(ret, None, rspirv::spirv::FunctionControl::NONE, fty)
                .map_err(|e| a.err(e))?;
        for &p in params {
            a.b.function_parameter(p).map_err(|e| a.err(e))?;
        }
        a.end_function()?;
        a.link(f, name, LinkageType::Import);
        Ok(f)
    };
    let lane = declare(a, t.u32, s.lane, &[t.u32; 5], symbol::LANE)?;
    let route = declare(a, t.u32, s.route, &[t.u64], symbol::ROUTE)?;
    let load = declare(
        a,
        s.vec4,
        s.load,
        &[t.u32, t.u32, t.u64, t.u32],
        symbol::LOAD,
    )?;
    let store = declare(
        a,
        t.void,
        s.store,
        &[t.u32, t.u32, t.u64, t.u32, s.vec4],
        symbol::STORE,
    )?;
    let note = declare(
        a,
        t.void,
        s.note,
        &[t.u32, t.u32, t.u32, t.u64, s.vec4],
        symbol::NOTE,
    )?;
    let flush = declare(a, t.void, s.flush, &[t.u32, t.u32], symbol::FLUSH)?;
    let count = declare(a, t.void, s.count, &[t.u32; 4], symbol::COUNT)?;
    // The program holds the workgroup counters (whichever library it links with).
    let wg = declare_workgroup(a);
    a.link(wg, symbol::WORKGROUP, LinkageType::Export);
    // And the lane's lookup cache, with its first values (whichever library it links with).
    let (chunk, hit) = declare_lane_cache(a, true);
    a.link(chunk, symbol::LAST_CHUNK, LinkageType::Export);
    a.link(hit, symbol::LAST_HIT, LinkageType::Export);
    // And the lane's own counters, zero first.
    let counts = declare_lane_counts(a, true);
    a.link(counts, symbol::LANE_COUNTS, LinkageType::Export);
    // And each lane's first escape (the lean instrumented library's; the others leave it unused).
    let escapes = declare_lane_escapes(a);
    a.link(escapes, symbol::LANE_ESCAPES, LinkageType::Export);
    Ok(Helpers {
        lane,
        route,
        load,
        store,
        note,
        flush,
        count,
        vec4: s.vec4,
        lookup: None,
    })
}

/// Declares the workgroup counters (`u32[WORKGROUP_WORDS]` in `Workgroup` storage, listed in the
/// interface), once per module.
pub(super) fn declare_workgroup(a: &mut Asm) -> Word {
    if let Some(v) = a.workgroup_var {
        return v;
    }
    let t = a.t;
    let n = a.c32(WORKGROUP_WORDS);
    let arr = a.b.type_array(t.u32, n);
    let p = a.b.type_pointer(None, StorageClass::Workgroup, arr);
    let v = a.b.variable(p, None, StorageClass::Workgroup, None);
    a.b.name(v, symbol::WORKGROUP);
    a.interface.push(v);
    a.workgroup_var = Some(v);
    v
}

/// The library module of `variant`: the interface's functions, exported, and the push block
/// imported, built as [`Shape::LINKED`] says (issue 42's lean instrumentation, what the modules
/// built here ship). A module for universal SPIR-V 1.5 (it still links), not validated here: the
/// tests validate every variant (`every_module_test.rs`), and `dispatchscope spirv-helper`
/// validates what it writes.
pub fn helper_library(variant: Variant) -> R<Vec<u32>> {
    helper_library_shaped(variant, Shape::LINKED)
}

/// [`helper_library`] built as `shape` says: [`Shape::LINKED`] fitted to a device
/// ([`Shape::fit`]: no subgroup arithmetic, no `shaderBufferInt64Atomics`), or issue 30's
/// ([`Shape::ISSUE_30`]). Every library imports the workgroup counters, the lane's lookup cache and
/// its own counters; the lean instrumented one ([`Shape::lean`]) also imports each lane's first
/// escape ([`symbol::LANE_ESCAPES`]), which the program then exports. A shape whose lane cache
/// keeps the chunk's delta ([`Shape::cache_delta`]) is refused for a variant with a lookup: the
/// interface's cache is the slot's key and the whole `Hit` ([`symbol::LAST_CHUNK`],
/// [`symbol::LAST_HIT`]), which the program declares and the library imports.
pub fn helper_library_shaped(variant: Variant, shape: Shape) -> R<Vec<u32>> {
    if shape.cache_delta && variant.has_lookup() {
        return Err(VkError::Build {
            module: "helper_library",
            why: format!(
                "the {} library imports the lane cache the program exports ({} and {}); a shape \
                 with cache_delta keeps another",
                variant.name(),
                symbol::LAST_CHUNK,
                symbol::LAST_HIT
            ),
        });
    }
    let mut a = Asm::new("helper_library");
    a.linkable(LinkageType::Import);
    let wg = declare_workgroup(&mut a);
    a.link(wg, symbol::WORKGROUP, LinkageType::Import);
    // An imported variable has no initializer: the program's export holds the first values.
    let (chunk, hit) = declare_lane_cache(&mut a, false);
    a.link(chunk, symbol::LAST_CHUNK, LinkageType::Import);
    a.link(hit, symbol::LAST_HIT, LinkageType::Import);
    let counts = declare_lane_counts(&mut a, false);
    a.link(counts, symbol::LANE_COUNTS, LinkageType::Import);
    if keeps_lane_escapes(variant, shape) {
        let escapes = declare_lane_escapes(&mut a);
        a.link(escapes, symbol::LANE_ESCAPES, LinkageType::Import);
    }
    emit_helpers_into(&mut a, variant, true, shape)?;
    Ok(a.finish())
}

/// Whether the helpers of `variant` built as `shape` says keep each lane's first escape in
/// [`symbol::LANE_ESCAPES`]: the instrumented variant's lean path does (a module built here
/// declares the variable, the library imports it); the other variants, and issue 30's path, which
/// logs every escape as it happens, do not use it, so a program that exports it links against
/// them too.
pub fn keeps_lane_escapes(variant: Variant, shape: Shape) -> bool {
    variant == Variant::Instrumented && shape.lean && !shape.leaves_out(Shape::LEAVE_OUT_ESCAPES)
}

/// Emits the interface's functions of `variant` into a module being built (no linkage).
pub(super) fn emit_helpers(a: &mut Asm, variant: Variant) -> R<Helpers> {
    emit_helpers_shaped(a, variant, Shape::SHIPPED)
}

/// [`emit_helpers`] with the access path shaped as `shape` says (a bench's comparison).
pub(super) fn emit_helpers_shaped(a: &mut Asm, variant: Variant, shape: Shape) -> R<Helpers> {
    emit_helpers_into(a, variant, false, shape)
}

fn emit_helpers_into(a: &mut Asm, variant: Variant, export: bool, shape: Shape) -> R<Helpers> {
    a.header_form = variant == Variant::Header;
    a.shape = shape;
    let helpers = emit_helpers_of(a, variant, export);
    a.header_form = false;
    a.shape = Shape::SHIPPED;
    helpers
}

fn emit_helpers_of(a: &mut Asm, variant: Variant, export: bool) -> R<Helpers> {
    let s = sigs(a);
    let instrumented = variant == Variant::Instrumented;
    if instrumented {
        declare_workgroup(a);
        declare_lane_counts(a, true);
        if keeps_lane_escapes(variant, a.shape) {
            declare_lane_escapes(a);
        }
    }
    let lookup = if !variant.has_lookup() {
        None
    } else {
        let f = emit_lookup(a)?;
        if export {
            a.link(f, symbol::LOOKUP, LinkageType::Export);
        }
        Some(f)
    };
    let route = emit_route(a)?;
    let cache = match lookup {
        Some(_) if a.shape.lane_cache && a.shape.cache_span => {
            Some(LaneCache::Span(declare_lane_cache(a, true)))
        }
        Some(_) if a.shape.lane_cache && a.shape.cache_delta => {
            Some(LaneCache::Delta(declare_delta_cache(a)))
        }
        Some(_) if a.shape.lane_cache => Some(LaneCache::Hit(declare_lane_cache(a, true))),
        _ => None,
    };
    // The word-by-word path as functions of their own, kept out of line.
    let slow = match lookup {
        Some(l) if a.shape.slow_path_call => Some([
            emit_slow_path(a, &s, variant, l, false)?,
            emit_slow_path(a, &s, variant, l, true)?,
        ]),
        _ => None,
    };
    let load = emit_access(a, &s, variant, lookup, cache, slow.map(|s| s[0]), false)?;
    let store = emit_access(a, &s, variant, lookup, cache, slow.map(|s| s[1]), true)?;
    let note = emit_note(a, &s, variant)?;
    let lane = emit_lane(a, variant, load, s.vec4)?;
    let flush = emit_flush(a, instrumented)?;
    let count = emit_count(a, instrumented)?;
    if export {
        for (f, name) in [
            (flush, symbol::FLUSH),
            (lane, symbol::LANE),
            (route, symbol::ROUTE),
            (load, symbol::LOAD),
            (store, symbol::STORE),
            (note, symbol::NOTE),
            (count, symbol::COUNT),
        ] {
            a.link(f, name, LinkageType::Export);
        }
    }
    Ok(Helpers {
        lane,
        route,
        load,
        store,
        note,
        flush,
        count,
        vec4: s.vec4,
        lookup,
    })
}

/// What [`emit_into`] put into a caller's module, by id: the functions to `OpFunctionCall`, the
/// types their signatures use, and the push-constant variable they read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EmittedHelpers {
    /// T5: `Hit lookup(u64 guest_chunk, u32 part)`, the one helper (`None` in [`Variant::Raw`],
    /// which has no table): `{u64 device_addr, u32 slot, u32 probes, u32 excluded}` for part
    /// `part` (0–15) of the chunk, address 0, slot `0xffffffff` and `excluded` `0xffff` on a miss
    /// (T4); the module docs say more.
    pub lookup: Option<Word>,
    /// `u32 dispatchscope_lane(u32 workgroup, u32 local, u32 lanes, u32 x, u32 y)`: every lane,
    /// first, in workgroup-uniform control flow (the module docs say why).
    pub lane: Word,
    /// `u32 dispatchscope_route(u64 flat)` (P1).
    pub route: Word,
    /// `uvec4 dispatchscope_load(u32 token, u32 site, u64 guest_addr, u32 size_bytes)`.
    pub load: Word,
    /// `void dispatchscope_store(u32 token, u32 site, u64 guest_addr, u32 size_bytes, uvec4 values)`.
    pub store: Word,
    /// `void dispatchscope_note(u32 token, u32 site, u32 flags, u64 addr, uvec4 values)`.
    pub note: Word,
    /// `void dispatchscope_flush(u32 token, u32 lanes)`: every lane, last, in workgroup-uniform
    /// control flow.
    pub flush: Word,
    /// `void dispatchscope_count(u32 token, u32 site, u32 route, u32 n)`: accesses the program
    /// counted itself (the module docs say when).
    pub count: Word,
    /// The workgroup counters (`Some` in [`Variant::Instrumented`]): a `Workgroup` variable of
    /// [`WORKGROUP_WORDS`] u32 that the caller's entry point must list in its interface.
    pub workgroup: Option<Word>,
    /// The lane's lookup cache (`Some` in the variants with a lookup): two `Private` variables,
    /// the key of the slot the lane last found and the answer, that the caller's entry point must
    /// list in its interface.
    pub lane_cache: Option<[Word; 2]>,
    /// The lane's own access counters (`Some` in [`Variant::Instrumented`]): a `Private`
    /// variable that the caller's entry point must list in its interface.
    pub lane_counts: Option<Word>,
    /// Each lane's first escape (`Some` in [`Variant::Instrumented`]): a `Workgroup` variable of
    /// [`MAX_LANES`] × [`LANE_ESCAPE_WORDS`] u32 that the caller's entry point must list in its
    /// interface.
    pub lane_escapes: Option<Word>,
    /// The `Hit` struct type `lookup` returns.
    pub hit_type: Word,
    /// `u32`.
    pub u32_type: Word,
    /// `u64`.
    pub u64_type: Word,
    /// `uvec4`.
    pub vec4_type: Word,
    /// The push-constant variable (a `Block` struct of one `u32[32]` array, stride 4, offset 0)
    /// the helpers read words 18–31 of (the module docs list them); the caller's own words are
    /// 0–17 and 21, reached through it with `OpAccessChain` (member 0, then the word). From SPIR-V
    /// 1.4 the caller's entry point must list it in its interface.
    pub push_block: Word,
    /// `PushConstant` pointer to `u32`, the type of an access chain to one push word.
    pub push_word_pointer: Word,
}

/// Emits the helper functions of `variant` (with T5's lookup, and what they need: the types, the
/// push block of the documented layout, the lane's lookup cache where there is a lookup, and for
/// the instrumented variant its workgroup counters) into a translator's own rspirv builder, and
/// returns their ids, for a Rust recompiler that builds its module with rspirv instead of linking
/// [`helper_library`].
///
/// The builder's module may already hold the caller's declarations; the capabilities it lacks of
/// Shader, Int64 and PhysicalStorageBufferAddresses are added, and its memory model must be
/// PhysicalStorageBuffer64 with GLSL450 (it is set when there is none; another is an error, and
/// the builder is left as it was). The helper binds no descriptor: the table, marks and
/// instrumentation are reached by device address through the push words. No block may be open
/// (call it between functions). The caller validates its module once it is complete. The helpers
/// are [`Shape::SHIPPED`]'s: the instrumented variant's module declares the GroupNonUniform
/// capabilities and Int64Atomics, so its device needs subgroup arithmetic in compute shaders and
/// `shaderBufferInt64Atomics` enabled, and its entry point lists [`EmittedHelpers::lane_escapes`]
/// too.
pub fn emit_into(builder: &mut rspirv::dr::Builder, variant: Variant) -> R<EmittedHelpers> {
    use rspirv::spirv::{AddressingModel, MemoryModel};
    if let Some(m) = &builder.module_ref().memory_model {
        let want = [
            Operand::AddressingModel(AddressingModel::PhysicalStorageBuffer64),
            Operand::MemoryModel(MemoryModel::GLSL450),
        ];
        if m.operands != want {
            return Err(VkError::Build {
                module: "emit_into",
                why: format!(
                    "the module's memory model is {:?}; the helper needs PhysicalStorageBuffer64 GLSL450",
                    m.operands
                ),
            });
        }
    }
    if builder.selected_function().is_some() || builder.selected_block().is_some() {
        return Err(VkError::Build {
            module: "emit_into",
            why: "a function or block is open: emit the helpers between functions".into(),
        });
    }
    let taken = std::mem::replace(builder, rspirv::dr::Builder::new());
    let mut a = Asm::on("emit_into", taken);
    let emitted = emit_helpers(&mut a, variant);
    let (t, push_block, workgroup) = (a.t, a.push_var, a.workgroup_var);
    let lane_cache = a.lane_cache.map(|(c, h)| [c, h]);
    let lane_counts = a.lane_counts;
    let lane_escapes = a.lane_escapes;
    *builder = a.into_builder();
    let h = emitted?;
    Ok(EmittedHelpers {
        lookup: h.lookup,
        lane: h.lane,
        route: h.route,
        load: h.load,
        store: h.store,
        note: h.note,
        flush: h.flush,
        count: h.count,
        workgroup,
        lane_cache,
        lane_counts,
        lane_escapes,
        hit_type: t.hit,
        u32_type: t.u32,
        u64_type: t.u64,
        vec4_type: h.vec4,
        push_block,
        push_word_pointer: t.p_push_u32,
    })
}

/// Links `program` (which imports the interface and exports its push block) with `library`
/// ([`helper_library`]) by running SPIRV-Tools' `spirv-link` (Debian's `spirv-tools`), and
/// validates the result for Vulkan 1.2 (feature `tools`: both run a process).
#[cfg(feature = "tools")]
pub fn link(program: &[u32], library: &[u32]) -> R<Vec<u32>> {
    let words = spirv_tool(
        "spirv-link",
        &["--target-env", "vulkan1.2", "-o", "-"],
        &[program, library],
    )?;
    super::validate("linked", &words)?;
    Ok(words)
}

/// What `inline` asks of SPIRV-Tools' `spirv-opt`: every call inlined into the entry point,
/// the lane's `Private` variables (its counters, its lookup cache) made the entry point's own,
/// split into scalars and rewritten into SSA values (registers), constants folded, what is dead
/// removed.
pub const INLINE_PASSES: [&str; 9] = [
    "--inline-entry-points-exhaustive",
    "--eliminate-dead-functions",
    "--private-to-local",
    "--scalar-replacement=0",
    "--ssa-rewrite",
    "--ccp",
    "--simplify-instructions",
    "--eliminate-dead-code-aggressive",
    "--cfg-cleanup",
];

/// A complete module (the program with the helper emitted into it, or linked) with the helper
/// inlined by `spirv-opt` ([`INLINE_PASSES`]), so that each site's counter is a value at a
/// constant index whatever the driver's own inliner does; validated for Vulkan 1.2 (feature
/// `tools`: both run a process).
#[cfg(feature = "tools")]
pub fn inline(module: &[u32]) -> R<Vec<u32>> {
    let mut args = vec!["--target-env=vulkan1.2"];
    args.extend(INLINE_PASSES);
    args.extend(["-o", "-"]);
    let words = spirv_tool("spirv-opt", &args, &[module])?;
    super::validate("inlined", &words)?;
    Ok(words)
}

/// Runs SPIRV-Tools' `tool` (Debian's `spirv-tools`) over `inputs`, each written to a file of
/// its own after `args`, and reads the module it writes to its standard output.
#[cfg(feature = "tools")]
fn spirv_tool(tool: &'static str, args: &[&str], inputs: &[&[u32]]) -> R<Vec<u32>> {
    let dir = std::env::temp_dir().join(format!(
        "dispatchscope-{tool}-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let io = |why: String| VkError::Invalid { module: tool, why };
    std::fs::create_dir_all(&dir).map_err(|e| io(format!("{}: {e}", dir.display())))?;
    let bytes = |w: &[u32]| w.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let mut files = Vec::new();
    let mut written = Ok(());
    for (i, words) in inputs.iter().enumerate() {
        let f = dir.join(format!("{i}.spv"));
        written = written.and_then(|()| std::fs::write(&f, bytes(words)));
        files.push(f);
    }
    let out = written.and_then(|()| {
        Command::new(tool)
            .args(args)
            .args(&files)
            .stdin(Stdio::null())
            .output()
    });
    let _ = std::fs::remove_dir_all(&dir);
    let out = out.map_err(|e| io(format!("{tool} could not run: {e}")))?;
    if !out.status.success() {
        return Err(io(format!(
            "{tool} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let _ = std::io::stderr().flush();
    if out.stdout.len() % 4 != 0 || out.stdout.is_empty() {
        return Err(io(format!(
            "{tool} wrote {} bytes, not whole words",
            out.stdout.len()
        )));
    }
    Ok(out
        .stdout
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// P1 with the default apertures.
fn emit_route(a: &mut Asm) -> R<Word> {
    let t = a.t;
    let (f, p) = a.begin_function(t.u32, &[t.u64], "route")?;
    let flat = p.first().copied().unwrap_or_default();
    let high = a.high(flat)?;
    let lds_ap = a.c32(0x8000_0000);
    let scratch_ap = a.c32(0x7000_0000);
    let is_lds = a.eq(high, lds_ap)?;
    let is_scratch = a.eq(high, scratch_ap)?;
    let (g, l, s) = (
        a.c32(route::GUEST),
        a.c32(route::LDS),
        a.c32(route::SCRATCH),
    );
    let r = a.select(t.u32, is_scratch, s, g)?;
    let r = a.select(t.u32, is_lds, l, r)?;
    a.b.ret_value(r).map_err(|e| a.err(e))?;
    a.end_function()?;
    Ok(f)
}

/// The device address of instrumentation word `idx` (a u32 id).
fn iword(a: &mut Asm, idx: Word) -> R<Word> {
    let base = a.push_u64(push::INSTRUMENT)?;
    a.index(base, idx, 4)
}

/// The device address of instrumentation word `k` (a constant).
fn iword_c(a: &mut Asm, k: u32) -> R<Word> {
    let c = a.c32(k);
    iword(a, c)
}

/// The workgroup word of `site`'s counter `k` (past [`WORKGROUP_WORDS`] for a site counted
/// straight into the buffer).
fn site_word(a: &mut Asm, site_id: Word, k: u32) -> R<Word> {
    let t = a.t;
    let w = a.c32(workgroup::SITE_WORDS);
    let base = a.mul(t.u32, site_id, w)?;
    let off = a.c32(workgroup::SITES + k);
    a.add(t.u32, base, off)
}

/// A pointer to workgroup counter word `w` (a u32 id).
fn wg_ptr(a: &mut Asm, w: Word) -> R<Word> {
    let t = a.t;
    let var = a.workgroup_var.ok_or_else(|| VkError::Build {
        module: "helper_library",
        why: "the workgroup counters are not declared".into(),
    })?;
    let p = a.b.type_pointer(None, StorageClass::Workgroup, t.u32);
    a.inst(Op::AccessChain, p, &[var, w])
}

/// Adds `n` to the 64-bit buffer counter whose low word is word `lo` (a u32 id): a device-scope
/// atomic on the low word, and one on the high word when that one wrapped.
fn wide_add(a: &mut Asm, lo: Word, n: Word) -> R<()> {
    let t = a.t;
    let at = iword(a, lo)?;
    let old = a.atomic_add(at, n)?;
    let sum = a.add(t.u32, old, n)?;
    let wrapped = a.ult(sum, old)?;
    a.if_(wrapped, |a| {
        let one = a.c32(1);
        let hi = a.add(t.u32, lo, one)?;
        let at = iword(a, hi)?;
        a.atomic_inc(at).map(|_| ())
    })
}

/// The buffer word of workgroup word `w`'s 64-bit counter (`wide_word`, a u32 id).
fn wide_of(a: &mut Asm, w: Word) -> R<Word> {
    let t = a.t;
    let two = a.c32(2);
    let w2 = a.mul(t.u32, w, two)?;
    let base = a.c32(wide_word(0));
    a.add(t.u32, w2, base)
}

/// Counts `n` into workgroup word `w` (a u32 id): a workgroup atomic, or for a word past the
/// workgroup counters (a site past [`WORKGROUP_SITES`]) straight into the buffer's 64-bit counter.
/// `max` takes the unsigned maximum instead of the sum.
fn bump(a: &mut Asm, w: Word, n: Word, max: bool) -> R<()> {
    let lim = a.c32(WORKGROUP_WORDS);
    let inside = a.ult(w, lim)?;
    let op = if max { Op::AtomicUMax } else { Op::AtomicIAdd };
    a.if_else(
        inside,
        |a| {
            let p = wg_ptr(a, w)?;
            a.workgroup_atomic(op, p, n).map(|_| ())
        },
        |a| {
            let lo = wide_of(a, w)?;
            if max {
                let at = iword(a, lo)?;
                a.atomic_umax(at, n).map(|_| ())
            } else {
                wide_add(a, lo, n)
            }
        },
    )
}

/// Counts `n` into workgroup counter `k` (a constant below the sites: always in workgroup memory).
fn bump_counter(a: &mut Asm, k: u32, n: Word) -> R<()> {
    let w = a.c32(k);
    let p = wg_ptr(a, w)?;
    a.workgroup_atomic(Op::AtomicIAdd, p, n).map(|_| ())
}

/// Adds one to workgroup word `key` for this lane: one workgroup atomic per lane. (A wave's
/// lanes at one site made one atomic between them through `OpGroupNonUniformAllEqual` and a
/// ballot's count; on the H200 that made the instrumented pass 1.9× slower than this, the
/// driver's own handling of same-address workgroup atomics being the faster: BENCHMARKS.md,
/// 2026-12-02.)
fn count_lanes(a: &mut Asm, key: Word) -> R<()> {
    let one = a.c32(1);
    bump(a, key, one, false)
}

/// Appends a capture entry when the lane is captured (token bit 0): `flags`, `addr`, the four
/// values and the escaped-bytes mask.
fn capture(
    a: &mut Asm,
    token: Word,
    site_id: Word,
    flags: Word,
    addr: Word,
    values: [Word; 4],
    mask: Word,
) -> R<()> {
    let t = a.t;
    let one = a.c32(1);
    let bit = a.and(t.u32, token, one)?;
    let captured = a.eq(bit, one)?;
    a.if_(captured, |a| {
        let at = iword_c(a, counter::CAPTURED)?;
        let idx = a.atomic_inc(at)?;
        let cap_at = iword_c(a, header::CAPTURE_CAPACITY)?;
        let cap = a.ld32(cap_at)?;
        let room = a.ult(idx, cap)?;
        a.if_(room, |a| {
            let first = capture_at(a)?;
            let w = a.c32(CAPTURE_WORDS);
            let off = a.mul(t.u32, idx, w)?;
            let entry = a.add(t.u32, first, off)?;
            let (wg, local) = lane_of(a, token)?;
            let (lo, hi) = (a.narrow(addr)?, a.high(addr)?);
            let z = a.c32(0);
            let words = [
                wg, local, site_id, flags, lo, hi, values[0], values[1], values[2], values[3],
                mask, z,
            ];
            store_words(a, entry, &words)
        })
    })
}

/// The first word of the escape log: after the header, counters and sites.
fn escapes_at(a: &mut Asm) -> R<Word> {
    let t = a.t;
    let at = iword_c(a, header::SITES)?;
    let n = a.ld32(at)?;
    let w = a.c32(SITE_WORDS);
    let sites = a.mul(t.u32, n, w)?;
    let first = a.c32(SITES_AT);
    a.add(t.u32, first, sites)
}

/// The first word of the capture: after the escape log.
fn capture_at(a: &mut Asm) -> R<Word> {
    let t = a.t;
    let e = escapes_at(a)?;
    let at = iword_c(a, header::ESCAPE_CAPACITY)?;
    let cap = a.ld32(at)?;
    let w = a.c32(ESCAPE_WORDS);
    let n = a.mul(t.u32, cap, w)?;
    a.add(t.u32, e, n)
}

/// The first word of the heat map: after the capture.
fn heat_at(a: &mut Asm) -> R<Word> {
    let t = a.t;
    let c = capture_at(a)?;
    let at = iword_c(a, header::CAPTURE_CAPACITY)?;
    let cap = a.ld32(at)?;
    let w = a.c32(CAPTURE_WORDS);
    let n = a.mul(t.u32, cap, w)?;
    a.add(t.u32, c, n)
}

/// Adds the workgroup's escapes and extra probes to its heat cell (`Grid::heat_cell_of`, from
/// the header's width, height and heat scale), one 64-bit count each. With `sites` (the lean
/// path: the sites counted in workgroup memory), they are the sums of those sites' words, plus
/// the workgroup words (which then hold only the sites counted past them); else the workgroup
/// words. A workgroup past the grid's rows (a dispatch larger than the grid its host described,
/// as a careless or hung one may be) adds to no cell: the heat map ends at the grid, and its
/// escapes are still counted by site. Without that test its cell lay past the heat map, and the
/// write past the instrumentation buffer (on lavapipe, into the process's heap).
fn add_heat(a: &mut Asm, wg: Word, sites: Option<Word>) -> R<()> {
    let t = a.t;
    let at = iword_c(a, header::WIDTH)?;
    let width = a.ld32(at)?;
    let at = iword_c(a, header::HEIGHT)?;
    let height = a.ld32(at)?;
    let at = iword_c(a, header::HEAT_SCALE)?;
    let scale = a.ld32(at)?;
    let (zero, one) = (a.c32(0), a.c32(1));
    // At least 1 each (the host writes both so), never a division by zero.
    let at_least_one = |a: &mut Asm, x: Word| {
        let z = a.eq(x, zero)?;
        a.select(t.u32, z, one, x)
    };
    let scale = at_least_one(a, scale)?;
    let tile = a.c32(dispatchscope_core::instrument::TILE);
    let gx = a.bin(Op::UDiv, t.u32, width, tile)?;
    let gx = at_least_one(a, gx)?;
    let s1 = a.sub(t.u32, scale, one)?;
    let cx = a.add(t.u32, gx, s1)?;
    let cx = a.bin(Op::UDiv, t.u32, cx, scale)?;
    let wy = a.bin(Op::UDiv, t.u32, wg, gx)?;
    let wx = a.bin(Op::UMod, t.u32, wg, gx)?;
    let row = a.bin(Op::UDiv, t.u32, wy, scale)?;
    let col = a.bin(Op::UDiv, t.u32, wx, scale)?;
    // `Grid::heat_cells`'s rows: `ceil(height / TILE / scale)`.
    let gy = a.bin(Op::UDiv, t.u32, height, tile)?;
    let cy = a.add(t.u32, gy, s1)?;
    let cy = a.bin(Op::UDiv, t.u32, cy, scale)?;
    let on_grid = a.ult(row, cy)?;
    a.if_(on_grid, |a| add_heat_cell(a, row, col, cx, sites))
}

/// [`add_heat`]'s cell `(row, col)` of a heat map `cx` cells a row.
fn add_heat_cell(a: &mut Asm, row: Word, col: Word, cx: Word, sites: Option<Word>) -> R<()> {
    let t = a.t;
    let rowc = a.mul(t.u32, row, cx)?;
    let cell = a.add(t.u32, rowc, col)?;
    let words = a.c32(HEAT_CELL_WORDS);
    let off = a.mul(t.u32, cell, words)?;
    let first = heat_at(a)?;
    let lo = a.add(t.u32, first, off)?;
    for (k, (w, per_site)) in [
        (workgroup::ESCAPES, site::ESCAPES),
        (workgroup::EXTRA_PROBES, site::EXTRA_PROBES),
    ]
    .into_iter()
    .enumerate()
    {
        let wc = a.c32(w);
        let p = wg_ptr(a, wc)?;
        let v = a.get(t.u32, p)?;
        let v = match sites {
            None => v,
            Some(n) => {
                let sum = a.var(t.p_fn_u32)?;
                a.set(sum, v)?;
                let i = a.var(t.p_fn_u32)?;
                a.for_(i, n, |a, s| {
                    let sw = site_word(a, s, per_site)?;
                    let p = wg_ptr(a, sw)?;
                    let x = a.get(t.u32, p)?;
                    let acc = a.get(t.u32, sum)?;
                    let acc = a.add(t.u32, acc, x)?;
                    a.set(sum, acc)
                })?;
                a.get(t.u32, sum)?
            }
        };
        let z = a.c32(0);
        let any = a.ne(v, z)?;
        a.if_(any, |a| {
            let k2 = a.c32(2 * k as u32);
            let at = a.add(t.u32, lo, k2)?;
            add_wide(a, at, v)
        })?;
    }
    Ok(())
}

/// The token's workgroup and local lane.
fn lane_of(a: &mut Asm, token: Word) -> R<(Word, Word)> {
    let t = a.t;
    let seven = a.c32(7);
    let wg = a.shr(t.u32, token, seven)?;
    let one = a.c32(1);
    let l = a.shr(t.u32, token, one)?;
    let m = a.c32(63);
    let local = a.and(t.u32, l, m)?;
    Ok((wg, local))
}

/// Stores `words` at consecutive instrumentation words from word index `first`.
fn store_words(a: &mut Asm, first: Word, words: &[Word]) -> R<()> {
    let base = iword(a, first)?;
    for (i, &w) in words.iter().enumerate() {
        let at = a.add64c(base, 4 * i as u64)?;
        a.st32(at, w)?;
    }
    Ok(())
}

/// The probes of one lookup: the histogram, the site's extra probes and longest lookup, for a
/// lookup of two probes or more (one probe is derived on the host), in the workgroup counters.
fn count_probes(a: &mut Asm, site_id: Word, probes: Word) -> R<()> {
    let t = a.t;
    let two = a.c32(2);
    let long = a.bin(Op::UGreaterThanEqual, t.bool_, probes, two)?;
    a.if_(long, |a| {
        let top = a.c32(HISTOGRAM_BUCKETS);
        let over = a.bin(Op::UGreaterThan, t.bool_, probes, top)?;
        let p = a.select(t.u32, over, top, probes)?;
        let one = a.c32(1);
        let bucket = a.sub(t.u32, p, one)?;
        let h = a.c32(workgroup::HISTOGRAM);
        let hw = a.add(t.u32, h, bucket)?;
        let ptr = wg_ptr(a, hw)?;
        a.workgroup_atomic(Op::AtomicIAdd, ptr, one)?;
        let extra = a.sub(t.u32, probes, one)?;
        bump_counter(a, workgroup::EXTRA_PROBES, extra)?;
        let ew = site_word(a, site_id, site::EXTRA_PROBES)?;
        bump(a, ew, extra, false)?;
        let mw = site_word(a, site_id, site::MAX_PROBES)?;
        bump(a, mw, probes, true)
    })
}

/// Declares the lane's own counters once per module: a `Private` array of [`LANE_COUNT_WORDS`]
/// u32, listed in the interface, zero first with `init` (a library's import has no initializer).
pub(super) fn declare_lane_counts(a: &mut Asm, init: bool) -> Word {
    if let Some(v) = a.lane_counts {
        return v;
    }
    let t = a.t;
    let n = a.c32(LANE_COUNT_WORDS);
    let arr = a.b.type_array(t.u32, n);
    let p = a.b.type_pointer(None, StorageClass::Private, arr);
    let first = init.then(|| a.b.constant_null(arr));
    let v = a.b.variable(p, None, StorageClass::Private, first);
    a.b.name(v, symbol::LANE_COUNTS);
    a.interface.push(v);
    a.lane_counts = Some(v);
    v
}

/// Counts one access of the lane at `site_id` by route `route_no` (a u32 id each: the site's
/// word index of the route): in the lane's own counters for the first [`PRIVATE_SITES`] sites
/// ([`Shape::private_counters`]), else a workgroup atomic (or the buffer's counter past the
/// workgroup's sites).
fn count_route(a: &mut Asm, site_id: Word, route_no: Word) -> R<()> {
    let t = a.t;
    let first = site_word(a, site_id, 0)?;
    let key = a.add(t.u32, first, route_no)?;
    let private = match (a.shape.private_counters, a.lane_counts) {
        (true, Some(v)) => v,
        _ => return count_lanes(a, key),
    };
    let lim = a.c32(PRIVATE_SITES);
    let mine = a.ult(site_id, lim)?;
    a.if_else(
        mine,
        |a| {
            let four = a.c32(4);
            let base = a.mul(t.u32, site_id, four)?;
            let i = a.add(t.u32, base, route_no)?;
            let p_ty = a.b.type_pointer(None, StorageClass::Private, t.u32);
            let p = a.inst(Op::AccessChain, p_ty, &[private, i])?;
            let v = a.get(t.u32, p)?;
            let one = a.c32(1);
            let v = a.add(t.u32, v, one)?;
            a.set(p, v)
        },
        |a| count_lanes(a, key),
    )
}

/// Adds the lane's own counters to the workgroup counters, one workgroup atomic a counter that
/// is not zero; each counter read at its constant index, so that they stay in registers.
fn flush_lane_counts(a: &mut Asm) -> R<()> {
    let t = a.t;
    let Some(private) = a.lane_counts else {
        return Ok(());
    };
    let p_ty = a.b.type_pointer(None, StorageClass::Private, t.u32);
    for w in 0..LANE_COUNT_WORDS {
        let i = a.c32(w);
        let p = a.inst(Op::AccessChain, p_ty, &[private, i])?;
        let v = a.get(t.u32, p)?;
        let z = a.c32(0);
        let any = a.ne(v, z)?;
        a.if_(any, |a| {
            let key = a.c32(workgroup::SITES + (w / 4) * workgroup::SITE_WORDS + w % 4);
            let wp = wg_ptr(a, key)?;
            a.workgroup_atomic(Op::AtomicIAdd, wp, v).map(|_| ())
        })?;
    }
    Ok(())
}

/// Declares the lane's lookup cache once per module: two `Private` variables, listed in the
/// interface, that hold the key of the slot the lane last found (or, after a miss, its chunk with
/// every part excluded) and the lookup's answer. With `init` they start as `u64::MAX` (a key that
/// excludes every part: no lookup hits it) and a miss; a library's imports have no initializer
/// (the program's export holds it).
pub(super) fn declare_lane_cache(a: &mut Asm, init: bool) -> (Word, Word) {
    if let Some(c) = a.lane_cache {
        return c;
    }
    let t = a.t;
    let p64 = a.b.type_pointer(None, StorageClass::Private, t.u64);
    let ph = a.b.type_pointer(None, StorageClass::Private, t.hit);
    let (first_chunk, first_hit) = if init {
        let none = a.c64(u64::MAX);
        let z64 = a.c64(0);
        let no_slot = a.c32(record::NO_SLOT);
        let z = a.c32(0);
        let every_part = a.c32(EVERY_PART);
        let miss = a.b.constant_composite(t.hit, [z64, no_slot, z, every_part]);
        (Some(none), Some(miss))
    } else {
        (None, None)
    };
    let chunk = a.b.variable(p64, None, StorageClass::Private, first_chunk);
    let hit = a.b.variable(ph, None, StorageClass::Private, first_hit);
    a.b.name(chunk, symbol::LAST_CHUNK);
    a.b.name(hit, symbol::LAST_HIT);
    a.interface.push(chunk);
    a.interface.push(hit);
    a.lane_cache = Some((chunk, hit));
    (chunk, hit)
}

/// T5 through the lane's cache: the last answer again when the key of the slot it found would
/// hit `part` of `chunk` (the same chunk, a part that slot reaches: the lookup's own
/// [`HitTest`](super::helper::HitTest), so it is the lookup's own answer, probes included; the
/// module docs say why), else the lookup, remembered with its slot's key (after a miss, the chunk
/// with every part excluded, which no later lookup takes again).
pub(super) fn cached_lookup(
    a: &mut Asm,
    lookup: Word,
    cache: (Word, Word),
    chunk: Word,
    part: Word,
) -> R<Word> {
    let t = a.t;
    let (last_key, last_hit) = cache;
    let prev = a.get(t.u64, last_key)?;
    let again = cache_hits(a, prev, chunk, part)?;
    let fresh = a.lnot(again)?;
    a.if_(fresh, |a| {
        let h = a.call(t.hit, lookup, &[chunk, part])?;
        a.set(last_hit, h)?;
        let excluded = a.extract(h, 3)?;
        let excluded = a.widen(excluded)?;
        let first_bit = a.c64(u64::from(KEY_CHUNK_BITS));
        let excluded = a.shl(t.u64, excluded, first_bit)?;
        let key = a.or(t.u64, chunk, excluded)?;
        a.set(last_key, key)
    })?;
    a.get(t.hit, last_hit)
}

/// Whether the lane cache's key `prev` answers `part` of `chunk`: `TableSlot::hits` as the
/// lookup tests it ([`hit_test`]), or with [`Shape::cache_test32`] in 32-bit words. The key's
/// chunk bits are its low 48 (the low word and the high word's low 16), its excluded parts the
/// high word's top 16. It hits when the low words are equal, the high word masked by
/// `0xffff | 1 << (16 + part)` equals the chunk's high word (the chunk bits equal, the part's bit
/// clear), and the chunk's high word fits 16 bits (a chunk past the key's bits is never mapped;
/// without that test, such a chunk whose bit `48 + part` is set could equal a key excluding the
/// part).
fn cache_hits(a: &mut Asm, prev: Word, chunk: Word, part: Word) -> R<Word> {
    let t = a.t;
    if !a.shape.cache_test32 {
        let test = hit_test(a, chunk, part)?;
        let masked = a.and(t.u64, prev, test.mask)?;
        return a.eq(masked, test.want);
    }
    let c32 = a.c64(32);
    let prev_lo = a.narrow(prev)?;
    let prev_hi = a.shr(t.u64, prev, c32)?;
    let prev_hi = a.narrow(prev_hi)?;
    let chunk_lo = a.narrow(chunk)?;
    let chunk_hi = a.shr(t.u64, chunk, c32)?;
    let chunk_hi = a.narrow(chunk_hi)?;
    let last_part = a.c32(PARTS - 1);
    let part = a.and(t.u32, part, last_part)?;
    let first_bit = a.c32(KEY_CHUNK_BITS - 32);
    let bit_no = a.add(t.u32, part, first_bit)?;
    let one = a.c32(1);
    let bit = a.shl(t.u32, one, bit_no)?;
    let chunk_high_bits = a.c32((1 << (KEY_CHUNK_BITS - 32)) - 1);
    let m = a.or(t.u32, chunk_high_bits, bit)?;
    let masked = a.and(t.u32, prev_hi, m)?;
    let hi_eq = a.eq(masked, chunk_hi)?;
    let lo_eq = a.eq(prev_lo, chunk_lo)?;
    let limit = a.c32(1 << (KEY_CHUNK_BITS - 32));
    let fits = a.ult(chunk_hi, limit)?;
    let both = a.land(lo_eq, hi_eq)?;
    a.land(both, fits)
}

/// The lane cache's variables: issue 30's (the slot's key and the whole `Hit`), or with
/// [`Shape::cache_delta`] the key, the chunk's delta and the lookup's probes.
#[derive(Clone, Copy)]
enum LaneCache {
    Hit((Word, Word)),
    Delta((Word, Word, Word)),
    /// [`Shape::cache_span`]'s: the same two variables as `Hit`, read as a span ([`cached_span`]).
    Span((Word, Word)),
}

/// Declares [`Shape::cache_delta`]'s lane cache once per module: three `Private` variables,
/// listed in the interface: the key of the slot the lane last found (first `u64::MAX`, which no
/// lookup hits), the chunk's device-from-guest delta (`device_addr - (chunk << chunk_shift)`, so
/// that `guest_addr + delta` is the device address of any byte of a part the slot reaches), and
/// the lookup's probes (read by the instrumented variant only).
fn declare_delta_cache(a: &mut Asm) -> (Word, Word, Word) {
    if let Some(c) = a.delta_cache {
        return c;
    }
    let t = a.t;
    let p64 = a.b.type_pointer(None, StorageClass::Private, t.u64);
    let p32 = a.b.type_pointer(None, StorageClass::Private, t.u32);
    let none = a.c64(u64::MAX);
    let z64 = a.c64(0);
    let z = a.c32(0);
    let key = a.b.variable(p64, None, StorageClass::Private, Some(none));
    let delta = a.b.variable(p64, None, StorageClass::Private, Some(z64));
    let probes = a.b.variable(p32, None, StorageClass::Private, Some(z));
    a.b.name(key, symbol::LAST_CHUNK);
    a.b.name(delta, symbol::LAST_DELTA);
    a.b.name(probes, symbol::LAST_PROBES);
    a.interface.extend([key, delta, probes]);
    a.delta_cache = Some((key, delta, probes));
    (key, delta, probes)
}

/// Declares each lane's first escape once per module ([`symbol::LANE_ESCAPES`]): a `Workgroup`
/// array of [`MAX_LANES`] × [`LANE_ESCAPE_WORDS`] u32, listed in the interface. Each lane writes
/// only its own record (no atomic, no barrier): its site word is set empty when the lane starts.
pub(super) fn declare_lane_escapes(a: &mut Asm) -> Word {
    if let Some(v) = a.lane_escapes {
        return v;
    }
    let t = a.t;
    let n = a.c32(MAX_LANES * LANE_ESCAPE_WORDS);
    let arr = a.b.type_array(t.u32, n);
    let p = a.b.type_pointer(None, StorageClass::Workgroup, arr);
    let v = a.b.variable(p, None, StorageClass::Workgroup, None);
    a.b.name(v, symbol::LANE_ESCAPES);
    a.interface.push(v);
    a.lane_escapes = Some(v);
    v
}

/// Word `k` of the record of lane `local` in [`symbol::LANE_ESCAPES`], as a pointer.
fn lane_escape_ptr(a: &mut Asm, local: Word, k: u32) -> R<Word> {
    let t = a.t;
    let var = a.lane_escapes.ok_or_else(|| VkError::Build {
        module: "helper_library",
        why: "the lanes' escapes are not declared".into(),
    })?;
    let w = a.c32(LANE_ESCAPE_WORDS);
    let base = a.mul(t.u32, local, w)?;
    let kk = a.c32(k);
    let at = a.add(t.u32, base, kk)?;
    let p = a.b.type_pointer(None, StorageClass::Workgroup, t.u32);
    a.inst(Op::AccessChain, p, &[var, at])
}

/// The first byte's lookup through [`Shape::cache_delta`]'s cache: `(hit, delta, probes)`, the
/// cached answer when the cached key would hit `part` of `chunk` (the lookup's own test, as
/// [`cached_lookup`]), else the lookup's, remembered. A miss is remembered with every part
/// excluded, so no later access takes it again.
fn cached_delta(
    a: &mut Asm,
    lookup: Word,
    cache: (Word, Word, Word),
    chunk: Word,
    part: Word,
    shift: Word,
) -> R<(Word, Word, Word)> {
    let t = a.t;
    let (last_key, last_delta, last_probes) = cache;
    let prev = a.get(t.u64, last_key)?;
    let again = cache_hits(a, prev, chunk, part)?;
    let p_fn_bool = a.b.type_pointer(None, StorageClass::Function, t.bool_);
    let v_ok = a.var(p_fn_bool)?;
    a.set(v_ok, again)?;
    let fresh = a.lnot(again)?;
    a.if_(fresh, |a| {
        let h = a.call(t.hit, lookup, &[chunk, part])?;
        let dev = a.extract(h, 0)?;
        let slot = a.extract(h, 1)?;
        let probes = a.extract(h, 2)?;
        let excluded = a.extract(h, 3)?;
        let first = a.shl(t.u64, chunk, shift)?;
        let delta = a.sub(t.u64, dev, first)?;
        a.set(last_delta, delta)?;
        a.set(last_probes, probes)?;
        let excluded = a.widen(excluded)?;
        let first_bit = a.c64(u64::from(KEY_CHUNK_BITS));
        let excluded = a.shl(t.u64, excluded, first_bit)?;
        let key = a.or(t.u64, chunk, excluded)?;
        a.set(last_key, key)?;
        let none = a.c32(record::NO_SLOT);
        let hit = a.ne(slot, none)?;
        a.set(v_ok, hit)
    })?;
    let ok = a.get(t.bool_, v_ok)?;
    let delta = a.get(t.u64, last_delta)?;
    let probes = a.get(t.u32, last_probes)?;
    Ok((ok, delta, probes))
}

/// The first byte's lookup through [`Shape::cache_span`]'s cache, and whether the access lies in
/// the span the cache answers.
struct Spanned {
    /// The access's bytes (its first 16) lie in the cached span and its slot is mapped: one base.
    inside: Word,
    /// The first byte's lookup hit.
    ok0: Word,
    /// The device address of the first byte, `guest_addr + delta` (meaningless on a miss).
    base0: Word,
    /// The first byte's slot (a store's marks).
    s0: Word,
    /// The first byte's lookup's probes.
    n0: Word,
}

/// Whether the access of `size` bytes at `addr` crosses its part's end: the last byte's part
/// (`(addr + size - 1) >> part_shift`, wrapping) is not the first byte's, in 32-bit words. A part
/// is at most 4 KiB and 2^64 is a multiple of it, so with `in_part` the first byte's offset in
/// its part and `room = part_bytes - in_part` (at least 1) an access crosses exactly when
/// `size - 1 >= room`; an access of 0 bytes, whose last byte is the one before it, crosses when
/// it starts its part.
pub(super) fn crosses_part(a: &mut Asm, addr: Word, size: Word, part_shift: Word) -> R<Word> {
    let t = a.t;
    let lo = a.narrow(addr)?;
    let (z, one) = (a.c32(0), a.c32(1));
    let part_bytes = a.shl(t.u32, one, part_shift)?;
    let part_mask = a.sub(t.u32, part_bytes, one)?;
    let in_part = a.and(t.u32, lo, part_mask)?;
    let room = a.sub(t.u32, part_bytes, in_part)?;
    let last = a.sub(t.u32, size, one)?;
    let past = a.bin(Op::UGreaterThanEqual, t.bool_, last, room)?;
    let empty = a.eq(size, z)?;
    let at_start = a.eq(in_part, z)?;
    a.select(t.bool_, empty, at_start, past)
}

/// The bytes a span of `len` bytes answers an access of up to 16 bytes at (`off < limit`, `off`
/// the access's offset in the span): `len - 15`, or none when the span is shorter than 16 bytes.
const SPAN_SLACK: u32 = 15;

/// T5 through [`Shape::cache_span`]'s lane cache. The cache is the key's two variables read as a
/// span: [`symbol::LAST_CHUNK`] holds the span's first guest byte, [`symbol::LAST_HIT`] the chunk's
/// device-from-guest delta (`device_addr - (chunk << chunk_shift)`), the slot, the probes and, in
/// the `Hit`'s `excluded` word, the span's limit ([`SPAN_SLACK`]). The span is the chunk when the
/// slot reaches every part, else the looked-up part; after a miss its limit is 0. An access whose
/// offset `guest_addr - first` (64 bits, so an address below the span wraps past any limit) is
/// below the limit, through a mapped slot, is answered again: `guest_addr + delta`, the lookup's
/// own answer, probes included, for the reason the key's cache gives (the module docs: a part is
/// reached by at most one slot of its chunk). Any other access looks its first byte's part up and
/// remembers the answer. The slot's test keeps the program's first values (`u64::MAX` and a miss,
/// whose `excluded` 0xffff would read as a limit) from answering anything.
fn cached_span(
    a: &mut Asm,
    lookup: Word,
    cache: (Word, Word),
    addr: Word,
    shape_of_chunk: (Word, Word, Word),
) -> R<Spanned> {
    let t = a.t;
    let (v_first, v_hit) = cache;
    let (shift, part_shift, part_bits) = shape_of_chunk;
    let none = a.c32(record::NO_SLOT);
    let first = a.get(t.u64, v_first)?;
    let cached = a.get(t.hit, v_hit)?;
    let slot = a.extract(cached, 1)?;
    let limit = a.extract(cached, 3)?;
    let off = a.sub(t.u64, addr, first)?;
    let limit = a.widen(limit)?;
    let within = a.ult(off, limit)?;
    let mapped = a.ne(slot, none)?;
    let again = a.land(within, mapped)?;
    let p_fn_bool = a.b.type_pointer(None, StorageClass::Function, t.bool_);
    let v_inside = a.var(p_fn_bool)?;
    a.set(v_inside, again)?;
    let fresh = a.lnot(again)?;
    a.if_(fresh, |a| {
        let q0 = a.shr(t.u64, addr, part_shift)?;
        let c0 = a.shr(t.u64, q0, part_bits)?;
        let p0 = a.narrow(q0)?;
        let last_part = a.c32(PARTS - 1);
        let p0 = a.and(t.u32, p0, last_part)?;
        let h = a.call(t.hit, lookup, &[c0, p0])?;
        let (dev, slot, probes, excluded) = (
            a.extract(h, 0)?,
            a.extract(h, 1)?,
            a.extract(h, 2)?,
            a.extract(h, 3)?,
        );
        let chunk_first = a.shl(t.u64, c0, shift)?;
        let delta = a.sub(t.u64, dev, chunk_first)?;
        let z = a.c32(0);
        let whole = a.eq(excluded, z)?;
        let part_first = a.shl(t.u64, q0, part_shift)?;
        let span_first = a.select(t.u64, whole, chunk_first, part_first)?;
        let log2 = a.select(t.u32, whole, shift, part_shift)?;
        let one = a.c32(1);
        let len = a.shl(t.u32, one, log2)?;
        let slack = a.c32(SPAN_SLACK);
        let roomy = a.bin(Op::UGreaterThan, t.bool_, len, slack)?;
        let mapped = a.ne(slot, none)?;
        let keep = a.land(mapped, roomy)?;
        let room = a.sub(t.u32, len, slack)?;
        let limit = a.select(t.u32, keep, room, z)?;
        a.set(v_first, span_first)?;
        let answer = a.inst(Op::CompositeConstruct, t.hit, &[delta, slot, probes, limit])?;
        a.set(v_hit, answer)?;
        let off = a.sub(t.u64, addr, span_first)?;
        let limit = a.widen(limit)?;
        let within = a.ult(off, limit)?;
        a.set(v_inside, within)
    })?;
    let inside = a.get(t.bool_, v_inside)?;
    let cached = a.get(t.hit, v_hit)?;
    let (delta, s0, n0) = (
        a.extract(cached, 0)?,
        a.extract(cached, 1)?,
        a.extract(cached, 2)?,
    );
    let ok0 = a.ne(s0, none)?;
    let base0 = a.add(t.u64, addr, delta)?;
    Ok(Spanned {
        inside,
        ok0,
        base0,
        s0,
        n0,
    })
}

/// What the word-by-word path needs of its access: the guest address, its words, the first
/// byte's base and whether its lookup hit, the last byte's part (`q1`, its chunk and part number
/// in one), and the chunk's shape.
struct SlowIn {
    addr: Word,
    n_words: Word,
    base0: Word,
    ok0: Word,
    split: Word,
    q1: Word,
    shift: Word,
    part_shift: Word,
    part_bits: Word,
    /// `(guest_addr & chunk_mask, chunk_mask)` where the caller has them.
    off0: Option<(Word, Word)>,
}

/// The words of an access that crosses its part's end, or misses: the last byte's lookup when it
/// lies in another part (into `v_h1`), then each word through its lookup ([`words_across`]).
fn slow_words(
    a: &mut Asm,
    lookup: Word,
    x: &SlowIn,
    v_h1: Word,
    v_mask: Word,
    words: usize,
    word: &dyn Fn(&mut Asm, usize, Word) -> R<()>,
) -> R<()> {
    let t = a.t;
    a.if_(x.split, |a| {
        // The last byte's chunk from its part number: only `q1` stays live.
        let c1 = a.shr(t.u64, x.q1, x.part_bits)?;
        let p1 = a.narrow(x.q1)?;
        let last_part = a.c32(PARTS - 1);
        let p1 = a.and(t.u32, p1, last_part)?;
        let h1 = a.call(t.hit, lookup, &[c1, p1])?;
        a.set(v_h1, h1)
    })?;
    let h1 = a.get(t.hit, v_h1)?;
    let (d1, s1) = (a.extract(h1, 0)?, a.extract(h1, 1)?);
    let none = a.c32(record::NO_SLOT);
    let hit1 = a.ne(s1, none)?;
    let one64 = a.c64(1);
    let (off0, cmask) = match x.off0 {
        Some(o) => o,
        None => {
            let cb = a.shl(t.u64, one64, x.shift)?;
            let cmask = a.sub(t.u64, cb, one64)?;
            (a.and(t.u64, x.addr, cmask)?, cmask)
        }
    };
    let pb = a.shl(t.u64, one64, x.part_shift)?;
    let pmask = a.sub(t.u64, pb, one64)?;
    let in_part = a.and(t.u64, off0, pmask)?;
    let left = a.sub(t.u64, pb, in_part)?;
    let across = Across {
        n_words: x.n_words,
        v_mask,
        words,
        left,
        base0: x.base0,
        off0,
        base1: d1,
        offset_mask: cmask,
        ok0: x.ok0,
        ok1: hit1,
    };
    words_across(a, &across, word)
}

/// The shape of the chunk: `(shift, part_shift, part_bits)` from push word 18 (T1).
fn chunk_shape(a: &mut Asm) -> R<(Word, Word, Word)> {
    let t = a.t;
    let shift = a.push_word(super::push::CHUNK_SHIFT)?;
    let part_bits = a.c32(PARTS.trailing_zeros());
    let part_shift = a.sub(t.u32, shift, part_bits)?;
    Ok((shift, part_shift, part_bits))
}

/// The type [`emit_slow_path`]'s functions return: the loaded words (or the stored ones), the
/// escaped-bytes mask, and the last byte's lookup (a miss when the access lies in one part).
fn slow_out_type(a: &mut Asm, vec4: Word) -> Word {
    let t = a.t;
    a.b.type_struct([vec4, t.u32, t.hit])
}

/// [`Shape::slow_path_call`]: the word-by-word path of a load (`store == false`) or a store as a
/// function of its own, `DontInline`: `SlowOut slow(u64 guest_addr, u32 size_bytes, u64 base0,
/// bool ok0[, uvec4 values])`, the first byte's base and lookup as the caller found them.
fn emit_slow_path(a: &mut Asm, s: &Sigs, variant: Variant, lookup: Word, store: bool) -> R<Word> {
    let t = a.t;
    let out_ty = slow_out_type(a, s.vec4);
    let mut params = vec![t.u64, t.u32, t.u64, t.bool_];
    if store {
        params.push(s.vec4);
    }
    let name = if store { "store_across" } else { "load_across" };
    let (f, p) = a.begin_function_ctl(
        out_ty,
        &params,
        name,
        rspirv::spirv::FunctionControl::DONT_INLINE,
    )?;
    let param = |i: usize| p.get(i).copied().unwrap_or_default();
    let (addr, size, base0, ok0) = (param(0), param(1), param(2), param(3));
    let stored: [Word; 4] = if store {
        let v = param(4);
        [
            extract(a, v, 0)?,
            extract(a, v, 1)?,
            extract(a, v, 2)?,
            extract(a, v, 3)?,
        ]
    } else {
        [0; 4]
    };
    let vals = [
        a.var(t.p_fn_u32)?,
        a.var(t.p_fn_u32)?,
        a.var(t.p_fn_u32)?,
        a.var(t.p_fn_u32)?,
    ];
    let v_mask = a.var(t.p_fn_u32)?;
    let p_fn_hit = a.b.type_pointer(None, StorageClass::Function, t.hit);
    let v_h1 = a.var(p_fn_hit)?;
    let zero = a.c32(0);
    for v in vals {
        a.set(v, zero)?;
    }
    a.set(v_mask, zero)?;
    let miss = miss_hit(a);
    a.set(v_h1, miss)?;
    let (shift, part_shift, part_bits) = chunk_shape(a)?;
    let two = a.c32(2);
    let n_words = a.shr(t.u32, size, two)?;
    let q0 = a.shr(t.u64, addr, part_shift)?;
    let one64 = a.c64(1);
    let size64 = a.widen(size)?;
    let end = a.add(t.u64, addr, size64)?;
    let last = a.sub(t.u64, end, one64)?;
    let q1 = a.shr(t.u64, last, part_shift)?;
    let split = a.ne(q1, q0)?;
    let writes = store && variant != Variant::Capture;
    let word = |a: &mut Asm, i: usize, at: Word| -> R<()> {
        if store {
            if writes {
                a.st32(at, stored[i])
            } else {
                Ok(())
            }
        } else {
            let x = a.ld32(at)?;
            a.set(vals[i], x)
        }
    };
    let x = SlowIn {
        addr,
        n_words,
        base0,
        ok0,
        split,
        q1,
        shift,
        part_shift,
        part_bits,
        off0: None,
    };
    slow_words(a, lookup, &x, v_h1, v_mask, vals.len(), &word)?;
    let values = if store {
        stored
    } else {
        [
            a.get(t.u32, vals[0])?,
            a.get(t.u32, vals[1])?,
            a.get(t.u32, vals[2])?,
            a.get(t.u32, vals[3])?,
        ]
    };
    let v = a.inst(Op::CompositeConstruct, s.vec4, &values)?;
    let mask = a.get(t.u32, v_mask)?;
    let h1 = a.get(t.hit, v_h1)?;
    let out = a.inst(Op::CompositeConstruct, out_ty, &[v, mask, h1])?;
    a.b.ret_value(out).map_err(|e| a.err(e))?;
    a.end_function()?;
    Ok(f)
}

/// A miss, as a `Hit` constant: address 0, no slot, no probes, every part excluded.
fn miss_hit(a: &mut Asm) -> Word {
    let t = a.t;
    let z64 = a.c64(0);
    let no_slot = a.c32(record::NO_SLOT);
    let z = a.c32(0);
    let every_part = a.c32(EVERY_PART);
    a.b.constant_composite(t.hit, [z64, no_slot, z, every_part])
}

/// The first byte's lookup of an access, as the access path reads it.
struct First {
    /// Whether it hit.
    ok0: Word,
    /// The device address of the access's first byte (meaningless on a miss).
    base0: Word,
    /// Its slot (a store's marks), where the path keeps it.
    s0: Option<Word>,
    /// Its probes.
    n0: Word,
    /// `(guest_addr & chunk_mask, chunk_mask)` where the path computed them.
    off0: Option<(Word, Word)>,
    /// The whole answer, where the path has it (the last byte's lookup starts as it).
    h0: Option<Word>,
}

/// What the instrumented variant's access knows when it counts: its site (the number, and the
/// parameter with its flags), its lookups, its mask.
struct Counted {
    token: Word,
    site_param: Word,
    site_id: Word,
    addr: Word,
    size: Word,
    split: Word,
    ok0: Word,
    n0: Word,
    v_h1: Word,
    v_mask: Word,
}

/// `dispatchscope_load` (`store == false`) or `dispatchscope_store`.
#[allow(
    clippy::too_many_arguments,
    reason = "the module's ids the access is emitted from"
)]
fn emit_access(
    a: &mut Asm,
    s: &Sigs,
    variant: Variant,
    lookup: Option<Word>,
    cache: Option<LaneCache>,
    slow: Option<Word>,
    store: bool,
) -> R<Word> {
    let t = a.t;
    let (f, p) = if store {
        a.begin_function(t.void, &[t.u32, t.u32, t.u64, t.u32, s.vec4], "store")?
    } else {
        a.begin_function(s.vec4, &[t.u32, t.u32, t.u64, t.u32], "load")?
    };
    let param = |i: usize| p.get(i).copied().unwrap_or_default();
    let (token, site_param, addr, size) = (param(0), param(1), param(2), param(3));
    a.b.name(token, "token");
    a.b.name(site_param, "site");
    a.b.name(addr, "guest_addr");
    a.b.name(size, "size_bytes");
    let stored: [Word; 4] = if store {
        let v = param(4);
        let mut out = [0; 4];
        for (i, o) in out.iter_mut().enumerate() {
            *o = extract(a, v, i as u32)?;
        }
        out
    } else {
        [0; 4]
    };
    let vals = [
        a.var(t.p_fn_u32)?,
        a.var(t.p_fn_u32)?,
        a.var(t.p_fn_u32)?,
        a.var(t.p_fn_u32)?,
    ];
    let v_mask = a.var(t.p_fn_u32)?;
    let zero = a.c32(0);
    for v in vals {
        a.set(v, zero)?;
    }
    a.set(v_mask, zero)?;
    let two = a.c32(2);
    let n_words = a.shr(t.u32, size, two)?;
    // The capture's second dispatch stores no guest word: the first stored it.
    let writes = store && variant != Variant::Capture;
    // Word `i` of the access at device address `at`: stored, or loaded into `vals[i]`.
    let word = |a: &mut Asm, i: usize, at: Word| -> R<()> {
        if store {
            if writes {
                a.st32(at, stored[i])
            } else {
                Ok(())
            }
        } else {
            let x = a.ld32(at)?;
            a.set(vals[i], x)
        }
    };
    // Every word of the access from one device address (the words below `n_words`).
    let words_from = |a: &mut Asm, dev: Word| -> R<()> {
        for i in 0..vals.len() {
            let ci = a.c32(i as u32);
            let inside = a.ult(ci, n_words)?;
            a.if_(inside, |a| {
                let at = a.add64c(dev, 4 * i as u64)?;
                word(a, i, at)
            })?;
        }
        Ok(())
    };
    let shape = a.shape;
    let instrumented = variant == Variant::Instrumented;
    match (variant, lookup) {
        (Variant::Flat, _) => {
            let access = FlatAccess {
                addr,
                size,
                n_words,
                v_mask,
                words: vals.len(),
            };
            emit_flat_access(a, &access, &word, &words_from)?;
        }
        (Variant::Raw, _) | (_, None) => {
            let off = a.push_u64(push::RAW_OFFSET)?;
            let dev = a.add(t.u64, addr, off)?;
            words_from(a, dev)?;
        }
        (_, Some(lookup)) => {
            // The site's number, without the flags a program gives it.
            let site_id = if instrumented || variant == Variant::Capture {
                let m = a.c32(SITE_NUMBER_MASK);
                a.and(t.u32, site_param, m)?
            } else {
                site_param
            };
            // T5 by parts: the first byte's (chunk, part) and the last byte's; one lookup when
            // both bytes lie in one part (`addr >> part_shift` equal), as the CPU reference does.
            let chunk = chunk_shape(a)?;
            let (shift, part_shift, part_bits) = chunk;
            let span = match cache {
                Some(LaneCache::Span(c)) => Some(c),
                _ => None,
            };
            // The last byte's part (`q1`, its chunk and part number in one) and whether it is
            // the first byte's: computed here, or (the span cache, uncounted) only on the
            // word-by-word path, the one that reads them.
            let parts = |a: &mut Asm| -> R<(Word, Word, Word)> {
                let one64 = a.c64(1);
                let q0 = a.shr(t.u64, addr, part_shift)?;
                let size64 = a.widen(size)?;
                let end = a.add(t.u64, addr, size64)?;
                let last = a.sub(t.u64, end, one64)?;
                let q1 = a.shr(t.u64, last, part_shift)?;
                let split = a.ne(q1, q0)?;
                Ok((q0, q1, split))
            };
            // The first byte's lookup; the last byte's part where it was computed (`q1`);
            // the split where it was; whether one base reads the access.
            let (first, eager, split_now, fast) = match span {
                Some(c) => {
                    let x = cached_span(a, lookup, c, addr, chunk)?;
                    // The instrumented variant counts a split even where one base reads it: the
                    // split in 32-bit words here, the last byte's part on the word-by-word path.
                    let split = if instrumented {
                        Some(crosses_part(a, addr, size, part_shift)?)
                    } else {
                        None
                    };
                    let fast = match split {
                        _ if !shape.fast_path => None,
                        Some(split) => {
                            let one_part = a.lnot(split)?;
                            Some(a.land(x.inside, one_part)?)
                        }
                        None => Some(x.inside),
                    };
                    let first = First {
                        ok0: x.ok0,
                        base0: x.base0,
                        s0: Some(x.s0),
                        n0: x.n0,
                        off0: None,
                        h0: None,
                    };
                    (first, None, split, fast)
                }
                None => {
                    let (q0, q1, split) = parts(a)?;
                    let one64 = a.c64(1);
                    let c0 = a.shr(t.u64, q0, part_bits)?;
                    let last_part = a.c32(PARTS - 1);
                    let p0 = a.narrow(q0)?;
                    let p0 = a.and(t.u32, p0, last_part)?;
                    let first = match cache {
                        // A store looks its chunk up without the delta cache: its marks need
                        // the slot.
                        Some(LaneCache::Delta(c)) if !store => {
                            let (ok0, delta, n0) = cached_delta(a, lookup, c, c0, p0, shift)?;
                            let base0 = a.add(t.u64, addr, delta)?;
                            First {
                                ok0,
                                base0,
                                s0: None,
                                n0,
                                off0: None,
                                h0: None,
                            }
                        }
                        _ => {
                            let h0 = match cache {
                                Some(LaneCache::Hit(c)) => cached_lookup(a, lookup, c, c0, p0)?,
                                _ => a.call(t.hit, lookup, &[c0, p0])?,
                            };
                            let cb = a.shl(t.u64, one64, shift)?;
                            let cmask = a.sub(t.u64, cb, one64)?;
                            let (d0, s0, n0) =
                                (a.extract(h0, 0)?, a.extract(h0, 1)?, a.extract(h0, 2)?);
                            let none = a.c32(record::NO_SLOT);
                            let ok0 = a.ne(s0, none)?;
                            let off0 = a.and(t.u64, addr, cmask)?;
                            let base0 = a.add(t.u64, d0, off0)?;
                            First {
                                ok0,
                                base0,
                                s0: Some(s0),
                                n0,
                                off0: Some((off0, cmask)),
                                h0: Some(h0),
                            }
                        }
                    };
                    let fast = one_part_and_hit(a, split, first.ok0)?;
                    (first, Some(q1), Some(split), fast)
                }
            };
            let p_fn_hit = a.b.type_pointer(None, StorageClass::Function, t.hit);
            let v_h1 = a.var(p_fn_hit)?;
            // The last byte's lookup: the first byte's until a split looks it up (a miss where
            // the path has no `Hit`: only a split reads it then).
            let h1_first = match first.h0 {
                Some(h0) => h0,
                None => miss_hit(a),
            };
            a.set(v_h1, h1_first)?;
            let no_split = a.cbool(false);
            let counted = Counted {
                token,
                site_param,
                site_id,
                addr,
                size,
                split: split_now.unwrap_or(no_split),
                ok0: first.ok0,
                n0: first.n0,
                v_h1,
                v_mask,
            };
            let lean = instrumented && shape.lean;
            // The words of an access that crosses its part's end, or misses: each word's lookup
            // picked (word i lies in the first byte's part while 4 i is below the bytes left in
            // that part; every other word goes through the last byte's lookup, at that slot's
            // device address plus the word's offset in its chunk); with the lean
            // instrumentation, its rare counts here, where it is known to be rare.
            let by_word = |a: &mut Asm| -> R<()> {
                match slow {
                    Some(f) => {
                        let out_ty = slow_out_type(a, s.vec4);
                        let mut args = vec![addr, size, first.base0, first.ok0];
                        if store {
                            let v = a.inst(Op::CompositeConstruct, s.vec4, &stored)?;
                            args.push(v);
                        }
                        let r = a.call(out_ty, f, &args)?;
                        if !store {
                            let v = a.inst_literal(Op::CompositeExtract, s.vec4, r, 0)?;
                            for (i, &x) in vals.iter().enumerate() {
                                let w = extract(a, v, i as u32)?;
                                a.set(x, w)?;
                            }
                        }
                        let m = a.inst_literal(Op::CompositeExtract, t.u32, r, 1)?;
                        a.set(v_mask, m)?;
                        let h1 = a.inst_literal(Op::CompositeExtract, t.hit, r, 2)?;
                        a.set(v_h1, h1)?;
                    }
                    None => {
                        let (q1, split) = match (eager, split_now) {
                            (Some(q1), Some(split)) => (q1, split),
                            _ => {
                                let (_, q1, split) = parts(a)?;
                                (q1, split)
                            }
                        };
                        let x = SlowIn {
                            addr,
                            n_words,
                            base0: first.base0,
                            ok0: first.ok0,
                            split,
                            q1,
                            shift,
                            part_shift,
                            part_bits,
                            off0: first.off0,
                        };
                        slow_words(a, lookup, &x, v_h1, v_mask, vals.len(), &word)?;
                    }
                }
                if lean {
                    lean_rare(a, &counted, store)?;
                }
                Ok(())
            };
            one_base_or_across(a, fast, |a| words_from(a, first.base0), by_word)?;
            let h1 = a.get(t.hit, v_h1)?;
            let (s1, n1) = (a.extract(h1, 1)?, a.extract(h1, 2)?);
            let none = a.c32(record::NO_SLOT);
            let hit1 = a.ne(s1, none)?;
            // Where `v_h1` starts as the first byte's lookup, only a split's is the last byte's.
            let hit1 = match (first.h0, split_now) {
                (Some(_), Some(split)) => a.land(split, hit1)?,
                _ => hit1,
            };
            if writes {
                // C1: each slot the store hit, and its block's summary word; two parts of one
                // chunk reached through one slot mark it once, as the CPU reference does.
                let s0 = first.s0.unwrap_or(none);
                let marks = a.push_u64(push::MARKS)?;
                let other = a.ne(s1, s0)?;
                let mark1 = a.land(hit1, other)?;
                for (hit, slot) in [(first.ok0, s0), (mark1, s1)] {
                    a.if_(hit, |a| a.mark(marks, slot))?;
                }
            }
            let values = |a: &mut Asm| -> R<[Word; 4]> {
                if store {
                    Ok(stored)
                } else {
                    Ok([
                        a.get(t.u32, vals[0])?,
                        a.get(t.u32, vals[1])?,
                        a.get(t.u32, vals[2])?,
                        a.get(t.u32, vals[3])?,
                    ])
                }
            };
            if variant == Variant::Capture {
                let canary = a.c32(CANARY_SITE);
                let is_canary = a.eq(site_param, canary)?;
                let counted_site = a.lnot(is_canary)?;
                a.if_(counted_site, |a| {
                    let values = values(a)?;
                    let mask = a.get(t.u32, v_mask)?;
                    let op = a.c32(if store { 1 << 8 } else { 0 } | route::GUEST << 12);
                    let flags = a.or(t.u32, size, op)?;
                    capture(a, token, site_id, flags, addr, values, mask)
                })?;
            } else if lean {
                lean_common(a, &counted, hit1, store)?;
            } else if instrumented {
                let values = values(a)?;
                issue30_counts(a, &counted, n1, hit1, values, store)?;
            }
        }
    }
    if store {
        a.end_void_function()?;
    } else {
        let v: Vec<Word> = vals.iter().map(|&v| a.get(t.u32, v)).collect::<R<_>>()?;
        let r = a.inst(Op::CompositeConstruct, s.vec4, &v)?;
        a.b.ret_value(r).map_err(|e| a.err(e))?;
        a.end_function()?;
    }
    Ok(f)
}

/// Issue 30's instrumentation of an access ([`Shape::lean`] off), after it: its site's count
/// (unless the program counts the site itself, [`SITE_DERIVED`]), its split, probes, misses, a
/// store's mark, then the escape log and the capture, written as the access happens.
fn issue30_counts(
    a: &mut Asm,
    x: &Counted,
    n1: Word,
    hit1: Word,
    values: [Word; 4],
    store: bool,
) -> R<()> {
    let t = a.t;
    let (token, site_id, addr, size, split) = (x.token, x.site_id, x.addr, x.size, x.split);
    let mask = a.get(t.u32, x.v_mask)?;
    let canary = a.c32(CANARY_SITE);
    let is_canary = a.eq(x.site_param, canary)?;
    let counted = a.lnot(is_canary)?;
    let leave_out = a.shape.leave_out;
    let counts = a.cbool(leave_out & Shape::LEAVE_OUT_COUNTS == 0);
    let counted_here = a.land(counted, counts)?;
    let derived = site_derived(a, x.site_param)?;
    a.if_(counted_here, |a| {
        let own = a.lnot(derived)?;
        a.if_(own, |a| {
            let guest = a.c32(site::GUEST);
            count_route(a, site_id, guest)
        })?;
        a.if_(split, |a| {
            let w = site_word(a, site_id, site::SPLITS)?;
            let one = a.c32(1);
            bump(a, w, one, false)?;
            count_probes(a, site_id, n1)
        })?;
        count_probes(a, site_id, x.n0)?;
        let miss0 = a.lnot(x.ok0)?;
        let not1 = a.lnot(hit1)?;
        let miss1 = a.land(split, not1)?;
        let one = a.c32(1);
        let z = a.c32(0);
        let m0 = a.select(t.u32, miss0, one, z)?;
        let m1 = a.select(t.u32, miss1, one, z)?;
        let misses = a.add(t.u32, m0, m1)?;
        let any = a.ne(misses, z)?;
        a.if_(any, |a| bump_counter(a, workgroup::MISSES, misses))?;
        if store {
            let marked = a.lor(x.ok0, hit1)?;
            a.if_(marked, |a| {
                let one = a.c32(1);
                bump_counter(a, workgroup::STORES_MARKED, one)
            })?;
        }
        Ok(())
    })?;
    let z = a.c32(0);
    let escaped = a.ne(mask, z)?;
    let escapes = a.cbool(leave_out & Shape::LEAVE_OUT_ESCAPES == 0);
    let escaped = a.land(escaped, escapes)?;
    a.if_(escaped, |a| {
        a.if_else(
            is_canary,
            |a| {
                let at = iword_c(a, counter::CANARY)?;
                a.atomic_inc(at).map(|_| ())
            },
            |a| {
                let at = iword_c(a, counter::ESCAPES)?;
                let idx = a.atomic_inc(at)?;
                let w = site_word(a, site_id, site::ESCAPES)?;
                let one = a.c32(1);
                bump(a, w, one, false)?;
                bump_counter(a, workgroup::ESCAPES, one)?;
                let cap_at = iword_c(a, header::ESCAPE_CAPACITY)?;
                let cap = a.ld32(cap_at)?;
                let room = a.ult(idx, cap)?;
                a.if_(room, |a| {
                    let first = escapes_at(a)?;
                    let ew = a.c32(ESCAPE_WORDS);
                    let off = a.mul(t.u32, idx, ew)?;
                    let entry = a.add(t.u32, first, off)?;
                    let (wg, local) = lane_of(a, token)?;
                    let (lo, hi) = (a.narrow(addr)?, a.high(addr)?);
                    let op = a.c32(if store { 1 << 16 } else { 0 });
                    let sz = a.or(t.u32, size, op)?;
                    let z = a.c32(0);
                    store_words(a, entry, &[wg, local, site_id, lo, hi, sz, mask, z])
                })
            },
        )
    })?;
    let captures = a.cbool(leave_out & Shape::LEAVE_OUT_CAPTURE == 0);
    let captured_here = a.land(counted, captures)?;
    a.if_(captured_here, |a| {
        let op = a.c32(if store { 1 << 8 } else { 0 } | route::GUEST << 12);
        let flags = a.or(t.u32, size, op)?;
        capture(a, token, site_id, flags, addr, values, mask)
    })
}

/// Whether a site parameter carries [`SITE_DERIVED`] (the canary's, every bit set, does: it is
/// never counted as an access).
fn site_derived(a: &mut Asm, site_param: Word) -> R<Word> {
    let t = a.t;
    let flag = a.c32(SITE_DERIVED);
    let bit = a.and(t.u32, site_param, flag)?;
    let z = a.c32(0);
    a.ne(bit, z)
}

/// The lean instrumentation's work on every access ([`Shape::lean`]): its site's count only when
/// the program does not count the site itself (a workgroup atomic, or the lane's own counter);
/// its first lookup's probes only when it read two or more; a store that marked a chunk. Nothing
/// here stores to global memory: a later access's loads may be issued before it.
fn lean_common(a: &mut Asm, x: &Counted, hit1: Word, store: bool) -> R<()> {
    let counts = !a.shape.leaves_out(Shape::LEAVE_OUT_COUNTS);
    if !counts {
        return Ok(());
    }
    let canary = a.c32(CANARY_SITE);
    let is_canary = a.eq(x.site_param, canary)?;
    let counted = a.lnot(is_canary)?;
    let derived = site_derived(a, x.site_param)?;
    let own = a.lnot(derived)?;
    let own = a.land(counted, own)?;
    a.if_(own, |a| {
        let guest = a.c32(site::GUEST);
        count_route(a, x.site_id, guest)
    })?;
    if !a.shape.leaves_out(Shape::LEAVE_OUT_PROBES) {
        a.if_(counted, |a| lean_probes(a, x.site_id, x.n0))?;
    }
    if store {
        let marked = a.lor(x.ok0, hit1)?;
        let marked = a.land(counted, marked)?;
        a.if_(marked, |a| {
            let one = a.c32(1);
            let w = a.c32(workgroup::STORES_MARKED);
            bump_agg(a, w, one, false, true)
        })?;
    }
    Ok(())
}

/// The lean instrumentation's rare counts, on the word-by-word path that an access takes only
/// when it crosses its part's end or misses: the split and its second lookup's probes, the
/// misses, and an escape (the site's count, the workgroup's for the heat map, and the lane's
/// first escape kept for the log; the canary's, the positive control, counted apart).
fn lean_rare(a: &mut Asm, x: &Counted, store: bool) -> R<()> {
    let t = a.t;
    let canary = a.c32(CANARY_SITE);
    let is_canary = a.eq(x.site_param, canary)?;
    let counted = a.lnot(is_canary)?;
    let h1 = a.get(t.hit, x.v_h1)?;
    let (s1, n1) = (a.extract(h1, 1)?, a.extract(h1, 2)?);
    let none = a.c32(record::NO_SLOT);
    let hit1 = a.ne(s1, none)?;
    if !a.shape.leaves_out(Shape::LEAVE_OUT_COUNTS) {
        let split_here = a.land(counted, x.split)?;
        a.if_(split_here, |a| {
            let w = site_word(a, x.site_id, site::SPLITS)?;
            let one = a.c32(1);
            bump_agg(a, w, one, false, false)?;
            if !a.shape.leaves_out(Shape::LEAVE_OUT_PROBES) {
                lean_probes(a, x.site_id, n1)?;
            }
            Ok(())
        })?;
        let one = a.c32(1);
        let z = a.c32(0);
        let miss0 = a.lnot(x.ok0)?;
        let m0 = a.select(t.u32, miss0, one, z)?;
        let miss1 = a.lnot(hit1)?;
        let miss1 = a.land(x.split, miss1)?;
        let m1 = a.select(t.u32, miss1, one, z)?;
        let misses = a.add(t.u32, m0, m1)?;
        let any = a.ne(misses, z)?;
        let any = a.land(counted, any)?;
        a.if_(any, |a| {
            let w = a.c32(workgroup::MISSES);
            bump_agg(a, w, misses, false, true)
        })?;
    }
    if a.shape.leaves_out(Shape::LEAVE_OUT_ESCAPES) {
        return Ok(());
    }
    let mask = a.get(t.u32, x.v_mask)?;
    let z = a.c32(0);
    let escaped = a.ne(mask, z)?;
    a.if_(escaped, |a| {
        a.if_else(
            is_canary,
            |a| {
                let at = iword_c(a, counter::CANARY)?;
                a.atomic_inc(at).map(|_| ())
            },
            |a| {
                let one = a.c32(1);
                let w = site_word(a, x.site_id, site::ESCAPES)?;
                bump_agg(a, w, one, false, false)?;
                // The heat map sums the sites' words when the workgroup ends; a site counted
                // past them counts here.
                past_workgroup_sites(a, x.site_id, workgroup::ESCAPES, one)?;
                // The lane's first escape, for the log at the lane's end.
                let (_, local) = lane_of(a, x.token)?;
                let p0 = lane_escape_ptr(a, local, 0)?;
                let cur = a.get(t.u32, p0)?;
                let empty = a.c32(NO_ESCAPE);
                let first = a.eq(cur, empty)?;
                a.if_(first, |a| {
                    let (lo, hi) = (a.narrow(x.addr)?, a.high(x.addr)?);
                    let op = a.c32(if store { 1 << 16 } else { 0 });
                    let sz = a.or(t.u32, x.size, op)?;
                    for (k, w) in [x.site_id, lo, hi, sz, mask].into_iter().enumerate() {
                        let p = lane_escape_ptr(a, local, k as u32)?;
                        a.set(p, w)?;
                    }
                    Ok(())
                })
            },
        )
    })
}

/// The lean instrumentation's probes of one lookup of two probes or more: the histogram, the
/// workgroup's extra probes (the heat map), the site's extra probes and longest lookup, each
/// reduced over the subgroup's lanes that count the same word ([`bump_agg`]).
fn lean_probes(a: &mut Asm, site_id: Word, probes: Word) -> R<()> {
    let t = a.t;
    let two = a.c32(2);
    let long = a.bin(Op::UGreaterThanEqual, t.bool_, probes, two)?;
    a.if_(long, |a| {
        let top = a.c32(HISTOGRAM_BUCKETS);
        let over = a.bin(Op::UGreaterThan, t.bool_, probes, top)?;
        let p = a.select(t.u32, over, top, probes)?;
        let one = a.c32(1);
        let bucket = a.sub(t.u32, p, one)?;
        let h = a.c32(workgroup::HISTOGRAM);
        let hw = a.add(t.u32, h, bucket)?;
        if a.shape.subgroup_rare {
            bump_agg(a, hw, one, false, false)?;
        } else {
            // A bucket is always a workgroup word: no test for the buffer's counters past them.
            let p = wg_ptr(a, hw)?;
            a.workgroup_atomic(Op::AtomicIAdd, p, one)?;
        }
        let extra = a.sub(t.u32, probes, one)?;
        past_workgroup_sites(a, site_id, workgroup::EXTRA_PROBES, extra)?;
        let ew = site_word(a, site_id, site::EXTRA_PROBES)?;
        bump_agg(a, ew, extra, false, false)?;
        let mw = site_word(a, site_id, site::MAX_PROBES)?;
        bump_agg(a, mw, probes, true, false)
    })
}

/// Counts `n` into workgroup counter `k` when `site_id` is past the sites counted in workgroup
/// memory ([`WORKGROUP_SITES`]): what the heat map adds beside the sums of the sites' words.
fn past_workgroup_sites(a: &mut Asm, site_id: Word, k: u32, n: Word) -> R<()> {
    let lim = a.c32(WORKGROUP_SITES);
    let past = a.bin(Op::UGreaterThanEqual, a.t.bool_, site_id, lim)?;
    a.if_(past, |a| {
        let w = a.c32(k);
        bump_agg(a, w, n, false, true)
    })
}

/// Counts `n` into workgroup word `w` ([`bump`]: a workgroup atomic, or the buffer's counter
/// past the workgroup's words) for the lanes that run it, on a rare path. With
/// [`Shape::subgroup_rare`], where
/// every active lane of the subgroup counts into the same word (`uniform_word`: it is a constant),
/// their sum (or maximum, `max`) is counted by one of them; else each lane counts its own.
fn bump_agg(a: &mut Asm, w: Word, n: Word, max: bool, uniform_word: bool) -> R<()> {
    let subgroup = a.shape.subgroup_rare;
    bump_reduced(a, w, n, max, uniform_word, subgroup)
}

/// [`bump_agg`], reduced over the subgroup where `subgroup` says.
fn bump_reduced(
    a: &mut Asm,
    w: Word,
    n: Word,
    max: bool,
    uniform_word: bool,
    subgroup: bool,
) -> R<()> {
    if !subgroup {
        return bump(a, w, n, max);
    }
    let together = |a: &mut Asm| -> R<()> {
        let op = if max { Op::AtomicUMax } else { Op::AtomicIAdd };
        let total = a.subgroup_reduce(op, n)?;
        let one = a.subgroup_elect()?;
        a.if_(one, |a| bump(a, w, total, max))
    };
    if uniform_word {
        return together(a);
    }
    let same = a.subgroup_all_equal(w)?;
    a.if_else(same, together, |a| bump(a, w, n, max))
}

/// The two paths of an access ([`Shape::fast_path`]): one for which `fast` holds (it lies in one
/// part of a chunk, or one page, and its lookup hit: [`one_part_and_hit`]; or in the span cache's
/// span, [`cached_span`]) reads every word from one base (`one_base`, as the raw variant reads);
/// every other takes `across` ([`words_across`]). Without the fast path (`fast` is `None`), every
/// access takes `across`.
fn one_base_or_across(
    a: &mut Asm,
    fast: Option<Word>,
    one_base: impl FnOnce(&mut Asm) -> R<()>,
    across: impl FnOnce(&mut Asm) -> R<()>,
) -> R<()> {
    match fast {
        Some(fast) => a.if_else(fast, one_base, across),
        None => across(a),
    }
}

/// [`one_base_or_across`]'s condition for an access whose first byte's lookup hit (`ok0`) and
/// that does not cross its part's (or page's) end (`split`); none without [`Shape::fast_path`].
fn one_part_and_hit(a: &mut Asm, split: Word, ok0: Word) -> R<Option<Word>> {
    if !a.shape.fast_path {
        return Ok(None);
    }
    let one_part = a.lnot(split)?;
    a.land(one_part, ok0).map(Some)
}

/// An access word by word over two lookups (the first byte's part of a chunk, or page, and the
/// last byte's): word `i` goes through the first while `4 i` is below `left` (the bytes left in
/// the first byte's part or page), at `base0 + 4 i`, else through the second at `base1 + ((off0 +
/// 4 i) & offset_mask)` (`off0` the first byte's offset in its chunk or page: the second lookup's
/// device address of its chunk's or page's first byte, plus the word's offset in its own chunk or
/// page; the words after the first part need not lie in the last byte's chunk when parts are
/// small); a word whose lookup missed (`ok0`, `ok1` false)
/// sets its four bits of the escaped-bytes mask instead. A word never straddles two parts: words
/// are 4-byte aligned and a part is at least 4 bytes (a chunk of 64 bytes or more).
struct Across {
    n_words: Word,
    v_mask: Word,
    words: usize,
    left: Word,
    base0: Word,
    off0: Word,
    base1: Word,
    offset_mask: Word,
    ok0: Word,
    ok1: Word,
}

/// The words of an access that crosses its part's (or page's) end, or misses ([`Across`]): the
/// path every access took before [`Shape::fast_path`], and the helper's and the flat table's alike.
fn words_across(a: &mut Asm, x: &Across, word: &dyn Fn(&mut Asm, usize, Word) -> R<()>) -> R<()> {
    let t = a.t;
    for i in 0..x.words {
        let ci = a.c32(i as u32);
        let inside = a.ult(ci, x.n_words)?;
        a.if_(inside, |a| {
            let bi = a.c64(4 * i as u64);
            let first = a.bin(Op::ULessThan, t.bool_, bi, x.left)?;
            let there = a.select(t.bool_, first, x.ok0, x.ok1)?;
            a.if_else(
                there,
                |a| {
                    let in0 = a.add(t.u64, x.base0, bi)?;
                    let past = a.add(t.u64, x.off0, bi)?;
                    let offset = a.and(t.u64, past, x.offset_mask)?;
                    let in1 = a.add(t.u64, x.base1, offset)?;
                    let at = a.select(t.u64, first, in0, in1)?;
                    word(a, i, at)
                },
                |a| {
                    let m = a.get(t.u32, x.v_mask)?;
                    let bits = a.c32(0xf << (4 * i));
                    let m = a.or(t.u32, m, bits)?;
                    a.set(x.v_mask, m)
                },
            )
        })?;
    }
    Ok(())
}

/// One access of [`Variant::Flat`]: its guest address, size, words and escaped-bytes mask.
struct FlatAccess {
    addr: Word,
    size: Word,
    n_words: Word,
    v_mask: Word,
    words: usize,
}

/// [`Variant::Flat`]'s access, as shadPS4's `get_bda_pointer` translates one: the guest page
/// number (`addr >> 14`) indexes a flat table of 8-byte entries, an entry of 0 is a page not
/// mapped (its words read zero, its stores are dropped, its bit is set in the fault bitmap by a
/// plain load, OR and store), else the entry plus the offset in the page is the device address.
/// An access that crosses its page's end reads the next page's entry too; with
/// [`Shape::fast_path`] an access in one mapped page reads every word from one base.
fn emit_flat_access(
    a: &mut Asm,
    x: &FlatAccess,
    word: &dyn Fn(&mut Asm, usize, Word) -> R<()>,
    words_from: &dyn Fn(&mut Asm, Word) -> R<()>,
) -> R<()> {
    let t = a.t;
    let table = a.push_u64(push::FLAT_TABLE)?;
    let log2 = a.push_word(push::FLAT_ENTRIES_LOG2)?;
    let log2 = a.widen(log2)?;
    let one64 = a.c64(1);
    let entries = a.shl(t.u64, one64, log2)?;
    let index_mask = a.sub(t.u64, entries, one64)?;
    let page_shift = a.c64(u64::from(FLAT_PAGE_SHIFT));
    let page_bytes = a.c64(1 << FLAT_PAGE_SHIFT);
    let page_mask = a.c64((1 << FLAT_PAGE_SHIFT) - 1);
    let p0 = a.shr(t.u64, x.addr, page_shift)?;
    let size64 = a.widen(x.size)?;
    let end = a.add(t.u64, x.addr, size64)?;
    let last = a.sub(t.u64, end, one64)?;
    let p1 = a.shr(t.u64, last, page_shift)?;
    let entry_of = |a: &mut Asm, page: Word| -> R<Word> {
        let i = a.and(t.u64, page, index_mask)?;
        let eight = a.c64(FLAT_ENTRY_BYTES);
        let off = a.mul(t.u64, i, eight)?;
        let at = a.add(t.u64, table, off)?;
        a.ld64(at)
    };
    let e0 = entry_of(a, p0)?;
    let split = a.ne(p1, p0)?;
    let z64 = a.c64(0);
    let v_e1 = a.var(t.p_fn_u64)?;
    a.set(v_e1, e0)?;
    let mapped0 = a.ne(e0, z64)?;
    let off0 = a.and(t.u64, x.addr, page_mask)?;
    let base0 = a.add(t.u64, e0, off0)?;
    let by_word = |a: &mut Asm| -> R<()> {
        a.if_(split, |a| {
            let e1 = entry_of(a, p1)?;
            a.set(v_e1, e1)
        })?;
        let e1 = a.get(t.u64, v_e1)?;
        let mapped1 = a.ne(e1, z64)?;
        let left = a.sub(t.u64, page_bytes, off0)?;
        let across = Across {
            n_words: x.n_words,
            v_mask: x.v_mask,
            words: x.words,
            left,
            base0,
            off0,
            base1: e1,
            offset_mask: page_mask,
            ok0: mapped0,
            ok1: mapped1,
        };
        words_across(a, &across, word)?;
        Ok(())
    };
    let fast = one_part_and_hit(a, split, mapped0)?;
    one_base_or_across(a, fast, |a| words_from(a, base0), by_word)?;
    // The fault bitmap: each page of the access whose entry is 0, a plain read-modify-write.
    let e1 = a.get(t.u64, v_e1)?;
    let faults = a.push_u64(push::FAULTS)?;
    for (page, entry, applies) in [(p0, e0, None), (p1, e1, Some(split))] {
        let unmapped = a.eq(entry, z64)?;
        let cond = match applies {
            Some(s) => a.land(s, unmapped)?,
            None => unmapped,
        };
        a.if_(cond, |a| {
            let i = a.and(t.u64, page, index_mask)?;
            let five = a.c64(5);
            let w = a.shr(t.u64, i, five)?;
            let four = a.c64(4);
            let off = a.mul(t.u64, w, four)?;
            let at = a.add(t.u64, faults, off)?;
            let bit_no = a.narrow(i)?;
            let m31 = a.c32(31);
            let bit_no = a.and(t.u32, bit_no, m31)?;
            let one = a.c32(1);
            let bit = a.shl(t.u32, one, bit_no)?;
            let old = a.ld32(at)?;
            let new = a.or(t.u32, old, bit)?;
            a.st32(at, new)
        })?;
    }
    Ok(())
}

/// Component `i` of a `uvec4`.
pub(super) fn extract(a: &mut Asm, v: Word, i: u32) -> R<Word> {
    let id = a.b.id();
    let inst = rspirv::dr::Instruction::new(
        Op::CompositeExtract,
        Some(a.t.u32),
        Some(id),
        vec![Operand::IdRef(v), Operand::LiteralBit32(i)],
    );
    a.b.insert_into_block(rspirv::dr::InsertPoint::End, inst)
        .map_err(|e| a.err(e))?;
    Ok(id)
}

/// `dispatchscope_note`: counting and capture of an access the program made itself. The
/// instrumented variant counts it unless the program counts the site itself ([`SITE_DERIVED`])
/// and, on issue 30's path, captures it; the capture variant only captures it.
fn emit_note(a: &mut Asm, s: &Sigs, variant: Variant) -> R<Word> {
    let t = a.t;
    let (f, p) = a.begin_function(t.void, &[t.u32, t.u32, t.u32, t.u64, s.vec4], "note")?;
    let instrumented = variant == Variant::Instrumented;
    if instrumented || variant == Variant::Capture {
        let param = |i: usize| p.get(i).copied().unwrap_or_default();
        let (token, site_param, flags, addr, v) =
            (param(0), param(1), param(2), param(3), param(4));
        let m = a.c32(SITE_NUMBER_MASK);
        let site_id = a.and(t.u32, site_param, m)?;
        if instrumented && !a.shape.leaves_out(Shape::LEAVE_OUT_COUNTS) {
            let twelve = a.c32(12);
            let r = a.shr(t.u32, flags, twelve)?;
            let m = a.c32(0xf);
            let route_no = a.and(t.u32, r, m)?;
            // The route numbers are the site's word indices (guest 0, LDS 1, scratch 2, bound 3).
            let derived = site_derived(a, site_param)?;
            let own = a.lnot(derived)?;
            a.if_(own, |a| count_route(a, site_id, route_no))?;
        }
        let captures = variant == Variant::Capture
            || (!a.shape.lean && !a.shape.leaves_out(Shape::LEAVE_OUT_CAPTURE));
        if captures {
            let mut values = [0; 4];
            for (i, x) in values.iter_mut().enumerate() {
                *x = extract(a, v, i as u32)?;
            }
            let z = a.c32(0);
            capture(a, token, site_id, flags, addr, values, z)?;
        }
    }
    a.end_void_function()?;
    Ok(f)
}

/// `dispatchscope_count`: `n` accesses of `site` by `route` that the program counted itself (its
/// sites flagged [`SITE_DERIVED`]), into the site's workgroup counter (with
/// [`Shape::subgroup_counts`], one workgroup atomic a subgroup where the subgroup's lanes count
/// the same site, [`bump_reduced`]). `n` is added
/// modulo 2^32 within a workgroup, so that a program may take back an access it had counted
/// (`0 - k`), for a site below [`WORKGROUP_SITES`]. Empty but in the instrumented variant.
fn emit_count(a: &mut Asm, instrumented: bool) -> R<Word> {
    let t = a.t;
    let (f, p) = a.begin_function(t.void, &[t.u32; 4], "count")?;
    if instrumented && !a.shape.leaves_out(Shape::LEAVE_OUT_COUNTS) {
        let param = |i: usize| p.get(i).copied().unwrap_or_default();
        let (site_param, route_no, n) = (param(1), param(2), param(3));
        let m = a.c32(SITE_NUMBER_MASK);
        let site_id = a.and(t.u32, site_param, m)?;
        let three = a.c32(3);
        let route_no = a.and(t.u32, route_no, three)?;
        let first = site_word(a, site_id, 0)?;
        let key = a.add(t.u32, first, route_no)?;
        let subgroup = a.shape.subgroup_counts;
        bump_reduced(a, key, n, false, false, subgroup)?;
    }
    a.end_void_function()?;
    Ok(f)
}

/// Whether the lane at pixel `(x, y)`, lane `local` of workgroup `wg`, is one the header's
/// selection names (`LaneSelection::selects`, on the device).
fn selected(a: &mut Asm, wg: Word, local: Word, x: Word, y: Word) -> R<Word> {
    let t = a.t;
    let word = |a: &mut Asm, k: u32| -> R<Word> {
        let at = iword_c(a, k)?;
        a.ld32(at)
    };
    let (x0, y0) = (word(a, header::SEL_RECT)?, word(a, header::SEL_RECT + 1)?);
    let (x1, y1) = (
        word(a, header::SEL_RECT + 2)?,
        word(a, header::SEL_RECT + 3)?,
    );
    let ge = |a: &mut Asm, v, lo| a.bin(Op::UGreaterThanEqual, t.bool_, v, lo);
    let c1 = ge(a, x, x0)?;
    let c2 = a.ult(x, x1)?;
    let c3 = ge(a, y, y0)?;
    let c4 = a.ult(y, y1)?;
    let in_x = a.land(c1, c2)?;
    let in_y = a.land(c3, c4)?;
    let in_rect = a.land(in_x, in_y)?;
    let sel_wg = word(a, header::SEL_WORKGROUP)?;
    let any = a.c32(u32::MAX);
    let is_any = a.eq(sel_wg, any)?;
    let is_wg = a.eq(sel_wg, wg)?;
    let wg_ok = a.lor(is_any, is_wg)?;
    let lo = word(a, header::SEL_LANE_MASK)?;
    let hi = word(a, header::SEL_LANE_MASK + 1)?;
    let mask = a.join(lo, hi)?;
    let local64 = a.widen(local)?;
    let shifted = a.shr(t.u64, mask, local64)?;
    let one64 = a.c64(1);
    let bit = a.and(t.u64, shifted, one64)?;
    let lane_ok = a.eq(bit, one64)?;
    let ok = a.land(in_rect, wg_ok)?;
    a.land(ok, lane_ok)
}

/// The positive control: lane 0 of workgroup 0 loads the header's canary, which must escape.
fn canary_lookup(a: &mut Asm, wg: Word, local: Word, base: Word, load: Word, vec4: Word) -> R<()> {
    let z = a.c32(0);
    let first_wg = a.eq(wg, z)?;
    let first_lane = a.eq(local, z)?;
    let first = a.land(first_wg, first_lane)?;
    a.if_(first, |a| {
        let lo = iword_c(a, header::CANARY)?;
        let lo = a.ld32(lo)?;
        let hi = iword_c(a, header::CANARY + 1)?;
        let hi = a.ld32(hi)?;
        let canary = a.join(lo, hi)?;
        let site_c = a.c32(CANARY_SITE);
        let four = a.c32(4);
        a.call(vec4, load, &[base, site_c, canary, four])
            .map(|_| ())
    })
}

/// `dispatchscope_lane`: the lane's token. The instrumented variant zeroes the workgroup
/// counters (and, lean, the lane's first escape), waits for the workgroup, and makes the
/// positive control's canary lookup; on issue 30's path it also tests the lane against the
/// capture selection, which the capture variant does alone.
fn emit_lane(a: &mut Asm, variant: Variant, load: Word, vec4: Word) -> R<Word> {
    let t = a.t;
    let (f, p) = a.begin_function(t.u32, &[t.u32; 5], "lane")?;
    let param = |i: usize| p.get(i).copied().unwrap_or_default();
    let (wg, local, lanes, x, y) = (param(0), param(1), param(2), param(3), param(4));
    let seven = a.c32(7);
    let one = a.c32(1);
    let w = a.shl(t.u32, wg, seven)?;
    let l = a.shl(t.u32, local, one)?;
    let base = a.or(t.u32, w, l)?;
    let instrumented = variant == Variant::Instrumented;
    let token = if instrumented && a.shape.leaves_out(Shape::LEAVE_OUT_WORKGROUP) {
        base
    } else if instrumented {
        // The workgroup counters start at zero: each lane zeroes its share, then all wait.
        let all = a.c32(WORKGROUP_WORDS);
        for_lanes_share(a, local, lanes, all, |a, w| {
            let p = wg_ptr(a, w)?;
            let z = a.c32(0);
            a.set(p, z)
        })?;
        if a.lane_escapes.is_some() {
            // The lane's own first escape: none yet.
            let p = lane_escape_ptr(a, local, 0)?;
            let empty = a.c32(NO_ESCAPE);
            a.set(p, empty)?;
        }
        a.workgroup_barrier()?;
        if a.shape.lean {
            canary_lookup(a, wg, local, base, load, vec4)?;
            base
        } else {
            let ok = selected(a, wg, local, x, y)?;
            let z = a.c32(0);
            let sel = a.select(t.u32, ok, one, z)?;
            canary_lookup(a, wg, local, base, load, vec4)?;
            a.or(t.u32, base, sel)?
        }
    } else if variant == Variant::Capture {
        let ok = selected(a, wg, local, x, y)?;
        let z = a.c32(0);
        let sel = a.select(t.u32, ok, one, z)?;
        a.or(t.u32, base, sel)?
    } else {
        base
    };
    a.b.ret_value(token).map_err(|e| a.err(e))?;
    a.end_function()?;
    Ok(f)
}

/// `for (w = local; w < n; w += lanes) body(w)`: lane `local` of `lanes` takes every `lanes`-th
/// word (a `lanes` of 0 is taken as 1).
fn for_lanes_share(
    a: &mut Asm,
    local: Word,
    lanes: Word,
    n: Word,
    body: impl FnOnce(&mut Asm, Word) -> R<()>,
) -> R<()> {
    let t = a.t;
    let z = a.c32(0);
    let one = a.c32(1);
    let none = a.eq(lanes, z)?;
    let step = a.select(t.u32, none, one, lanes)?;
    let v = a.var(t.p_fn_u32)?;
    a.set(v, local)?;
    a.while_(
        |a| {
            let w = a.get(t.u32, v)?;
            a.ult(w, n)
        },
        |a| {
            let w = a.get(t.u32, v)?;
            body(a, w)?;
            let next = a.add(t.u32, w, step)?;
            a.set(v, next)
        },
    )
}

/// Adds `v` (a u32) to the buffer's 64-bit counter whose low word is word `lo`: one 64-bit
/// atomic with [`Shape::wide_atomics`], else [`wide_add`]'s 32-bit atomic and carry.
fn add_wide(a: &mut Asm, lo: Word, v: Word) -> R<()> {
    if a.shape.wide_atomics {
        let at = iword(a, lo)?;
        let v64 = a.widen(v)?;
        a.atomic_add64(at, v64)
    } else {
        wide_add(a, lo, v)
    }
}

/// The lane's first escape ([`Shape::lean`]) appended to the escape log, if it escaped: one
/// device-scope atomic for its entry, the entry written if the log has room.
fn log_first_escape(a: &mut Asm, wg: Word, local: Word) -> R<()> {
    let t = a.t;
    let p0 = lane_escape_ptr(a, local, 0)?;
    let site_id = a.get(t.u32, p0)?;
    let empty = a.c32(NO_ESCAPE);
    let escaped = a.ne(site_id, empty)?;
    a.if_(escaped, |a| {
        let at = iword_c(a, counter::ESCAPES)?;
        let idx = a.atomic_inc(at)?;
        let cap_at = iword_c(a, header::ESCAPE_CAPACITY)?;
        let cap = a.ld32(cap_at)?;
        let room = a.ult(idx, cap)?;
        a.if_(room, |a| {
            let mut words = vec![wg, local, site_id];
            for k in 1..LANE_ESCAPE_WORDS {
                let p = lane_escape_ptr(a, local, k)?;
                words.push(a.get(t.u32, p)?);
            }
            words.push(a.c32(0));
            let first = escapes_at(a)?;
            let ew = a.c32(ESCAPE_WORDS);
            let off = a.mul(t.u32, idx, ew)?;
            let entry = a.add(t.u32, first, off)?;
            store_words(a, entry, &words)
        })
    })
}

/// `dispatchscope_flush`: in the instrumented variant, the lane's first escape to the log
/// ([`Shape::lean`]), a workgroup barrier, then each lane adds its share of the non-zero workgroup
/// counters to the buffer's 64-bit counters (the longest lookups by an unsigned max), and lane 0
/// the workgroup's escapes and extra probes to its heat cell; nothing in the others.
fn emit_flush(a: &mut Asm, instrumented: bool) -> R<Word> {
    let t = a.t;
    let (f, p) = a.begin_function(t.void, &[t.u32, t.u32], "flush")?;
    if instrumented && !a.shape.leaves_out(Shape::LEAVE_OUT_WORKGROUP) {
        let param = |i: usize| p.get(i).copied().unwrap_or_default();
        let (token, lanes) = (param(0), param(1));
        let (wg, local) = lane_of(a, token)?;
        if a.lane_escapes.is_some() {
            log_first_escape(a, wg, local)?;
        }
        if a.shape.private_counters {
            flush_lane_counts(a)?;
        }
        a.workgroup_barrier()?;
        // The counters, and the sites the program numbered (at most the workgroup's).
        let at = iword_c(a, header::SITES)?;
        let sites = a.ld32(at)?;
        let cap = a.c32(WORKGROUP_SITES);
        let more = a.bin(Op::UGreaterThan, t.bool_, sites, cap)?;
        let sites = a.select(t.u32, more, cap, sites)?;
        let per = a.c32(workgroup::SITE_WORDS);
        let n = a.mul(t.u32, sites, per)?;
        let first = a.c32(workgroup::SITES);
        let n = a.add(t.u32, n, first)?;
        for_lanes_share(a, local, lanes, n, |a, w| {
            let p = wg_ptr(a, w)?;
            let v = a.get(t.u32, p)?;
            let z = a.c32(0);
            let any = a.ne(v, z)?;
            a.if_(any, |a| {
                let lo = wide_of(a, w)?;
                // A site's longest lookup is a maximum, not a sum.
                let first = a.c32(workgroup::SITES);
                let is_site = a.bin(Op::UGreaterThanEqual, t.bool_, w, first)?;
                let rel = a.sub(t.u32, w, first)?;
                let m = a.c32(workgroup::SITE_WORDS - 1);
                let k = a.and(t.u32, rel, m)?;
                let mk = a.c32(site::MAX_PROBES);
                let is_k = a.eq(k, mk)?;
                let is_max = a.land(is_site, is_k)?;
                a.if_else(
                    is_max,
                    |a| {
                        let at = iword(a, lo)?;
                        a.atomic_umax(at, v).map(|_| ())
                    },
                    |a| add_wide(a, lo, v),
                )
            })
        })?;
        // The heat map: lane 0 adds the workgroup's escapes and extra probes to its cell.
        let z = a.c32(0);
        let first = a.eq(local, z)?;
        let lean = a.shape.lean;
        a.if_(first, |a| add_heat(a, wg, lean.then_some(sites)))?;
    }
    a.end_void_function()?;
    Ok(f)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "in a test, an unwrap is an assertion")]
mod tests {
    use super::*;

    #[test]
    fn every_variant_builds_as_a_library() {
        for v in Variant::ALL {
            let words = helper_library(v).unwrap();
            let m = rspirv::dr::load_words(&words).unwrap();
            let exports = m
                .annotations
                .iter()
                .filter(|i| {
                    i.operands
                        .iter()
                        .any(|o| matches!(o, Operand::LinkageType(LinkageType::Export)))
                })
                .count();
            assert_eq!(exports, if v.has_lookup() { 8 } else { 7 }, "{v:?}");
            // Every library imports the workgroup counters the program exports.
            let imports_wg = m.annotations.iter().any(|i| {
                i.operands
                    .iter()
                    .any(|o| matches!(o, Operand::LiteralString(n) if n == symbol::WORKGROUP))
                    && i.operands
                        .iter()
                        .any(|o| matches!(o, Operand::LinkageType(LinkageType::Import)))
            });
            assert!(imports_wg, "{v:?}");
            // Only the lean instrumented library imports each lane's first escape.
            for (shape, lean) in [(Shape::LINKED, true), (Shape::ISSUE_30, false)] {
                let words = helper_library_shaped(v, shape).unwrap();
                let m = rspirv::dr::load_words(&words).unwrap();
                let imports_escapes = m.annotations.iter().any(|i| {
                    i.operands.iter().any(
                        |o| matches!(o, Operand::LiteralString(n) if n == symbol::LANE_ESCAPES),
                    )
                });
                assert_eq!(
                    imports_escapes,
                    lean && v == Variant::Instrumented,
                    "{v:?}, {shape:?}"
                );
            }
        }
        // What `spirv-helper` writes by default is the lean library the modules built here ship.
        assert_eq!(
            helper_library(Variant::Instrumented).unwrap(),
            helper_library_shaped(Variant::Instrumented, Shape::SHIPPED).unwrap()
        );
    }

    /// A lane cache the program does not declare is refused by name, not built to fail at link.
    #[test]
    fn a_library_with_the_delta_cache_is_refused() {
        let shape = Shape {
            cache_delta: true,
            ..Shape::LINKED
        };
        for v in Variant::ALL {
            let built = helper_library_shaped(v, shape);
            if v.has_lookup() {
                assert!(
                    matches!(&built, Err(VkError::Build { why, .. }) if why.contains("cache_delta")),
                    "{v:?}: {built:?}"
                );
            } else {
                built.unwrap();
            }
        }
    }

    /// `spirv-as` over one of the emulator-shaped host's programs (`examples/emulator-host/shaders`),
    /// or `None` where spirv-as does not run (and `DISPATCHSCOPE_REQUIRE_VULKAN` is not 1).
    fn host_program(name: &str) -> Option<Vec<u32>> {
        let path = format!(
            "{}/../../examples/emulator-host/shaders/{name}.spvasm",
            env!("CARGO_MANIFEST_DIR")
        );
        let out = Command::new("spirv-as")
            .args(["--target-env", "vulkan1.2", &path, "-o", "-"])
            .output();
        let out = match out {
            Ok(o) => o,
            Err(e) => {
                assert!(
                    std::env::var("DISPATCHSCOPE_REQUIRE_VULKAN").map_or(true, |v| v != "1"),
                    "DISPATCHSCOPE_REQUIRE_VULKAN=1, but spirv-as does not run: {e}"
                );
                eprintln!("skipped: spirv-as does not run: {e}");
                return None;
            }
        };
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Some(
            out.stdout
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        )
    }

    /// The emulator-shaped host's device program (`examples/emulator-host/shaders/device.spvasm`,
    /// hand-written SPIR-V that calls `dispatchscope_lookup` itself, declares the lane's cache and
    /// first escapes, and counts its own sites) assembles and links against every library with a
    /// lookup, of every shape `spirv-helper` builds: the interface it was written to is this one
    /// (the `Hit` type, the lookup's parameters, the cache's first values, the lanes' escapes);
    /// against the raw library with the host's own lookup (`nolookup.spvasm`, `--plain`); and the
    /// program that loses the device (`hang.spvasm`, which declares no lane escapes) against the
    /// helper library, as the host's CMakeLists.txt links them.
    #[test]
    fn the_emulator_hosts_programs_link_against_their_libraries() {
        let (Some(device), Some(nolookup), Some(hang)) = (
            host_program("device"),
            host_program("nolookup"),
            host_program("hang"),
        ) else {
            return;
        };
        let shapes = [
            Shape::LINKED,
            Shape::LINKED.fit(false, false),
            Shape::ISSUE_30,
        ];
        for shape in shapes {
            for v in Variant::ALL.into_iter().filter(|v| v.has_lookup()) {
                let library = helper_library_shaped(v, shape).unwrap();
                link(&device, &library).unwrap_or_else(|e| panic!("{v:?}, {shape:?}: {e}"));
            }
        }
        // The raw library and the host's own lookup, linked as three modules.
        let raw = helper_library(Variant::Raw).unwrap();
        let words = spirv_tool(
            "spirv-link",
            &["--target-env", "vulkan1.2", "-o", "-"],
            &[&device, &raw, &nolookup],
        )
        .unwrap();
        super::super::validate("linked", &words).unwrap();
        link(&hang, &helper_library(Variant::Helper).unwrap()).unwrap();
        // A library that needs what the program does not export fails to link: the lean
        // instrumented library against the hang program, which declares no lane escapes.
        assert!(link(&hang, &helper_library(Variant::Instrumented).unwrap()).is_err());
    }

    /// The workgroup counters and (the lean instrumentation) each lane's first escape.
    #[test]
    fn emit_into_declares_the_workgroup_counters_only_when_instrumented() {
        for v in Variant::ALL {
            let mut b = rspirv::dr::Builder::new();
            b.set_version(1, 5);
            let h = emit_into(&mut b, v).unwrap();
            assert_eq!(h.workgroup.is_some(), v == Variant::Instrumented, "{v:?}");
            assert_eq!(
                h.lane_escapes.is_some(),
                v == Variant::Instrumented,
                "{v:?}"
            );
            let m = b.module();
            let workgroup_vars = m
                .types_global_values
                .iter()
                .filter(|i| {
                    i.class.opcode == Op::Variable
                        && i.operands
                            .first()
                            .is_some_and(|o| *o == Operand::StorageClass(StorageClass::Workgroup))
                })
                .count();
            assert_eq!(
                workgroup_vars,
                2 * usize::from(v == Variant::Instrumented),
                "{v:?}"
            );
        }
    }
}
