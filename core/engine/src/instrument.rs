//! The device-side instrumentation of a full-screen pass (issue 14), as plain data: the layout of
//! the one buffer the instrumented lookup helper writes (its word offsets, shared with
//! `dispatchscope-vk`'s SPIR-V), the buffer's first contents (capacities, the lane selection, the
//! canary), and the decoding of what the device wrote into an [`InstrumentedReport`].
//!
//! The report's size is bounded by the program's access sites and the two logs' capacities, never
//! by the lanes that ran: counters and the probe histogram over every lane, one row per site, the
//! first escapes (each classified here, on the host, with [`Mappings::classify_miss`] and the
//! nearest mappings), and every access of the lanes the debugger selected. Whatever a full log
//! could not keep is counted, and the report says how much. Nothing is sampled: every count is
//! over every lane.
//!
//! Two ways of writing the buffer give the same words (`dispatchscope-vk`'s `Shape`): issue 30's,
//! where every escape is offered to the log and every access of a selected lane is captured as it
//! happens, in one dispatch; and issue 42's lean one, where each escaping lane offers its first
//! escape when it ends (the others are counted by site, not logged), and the selected lanes are
//! captured by a second dispatch over only their workgroups ([`Grid::selected_workgroups`]),
//! which writes the capture and nothing else. The decoding is the same.
//!
//! Reading is split in two so that an emulator pays little when no debugger looks: [`Readback`]
//! copies only the words the device wrote (header, counters, sites, the logged entries), and
//! [`decode`] builds the report from it when someone asks. Nothing here does I/O, Vulkan or threads.
//!
//! # The buffer (little-endian u32 words)
//! | words | what |
//! |---|---|
//! | 0–15 | header: [`MAGIC`], sites, escape capacity, capture capacity, the selection (workgroup, lane mask, pixel rectangle), the canary's guest address, the grid's width and height, the heat cell's side in workgroups |
//! | 16–19 | 32-bit counters: escapes offered to the log (its next entry), captured (the capture's next entry), canary escapes, 0 |
//! | 20–59 | 64-bit counters (two words, low first): misses, stores marked, the probe histogram (16 buckets), the workgroups' escapes and extra probes (the heat map's totals) |
//! | 60… | sites: [`SITE_WORDS`] words each, eight 64-bit counters (low word first): guest, LDS, scratch, bound accesses, escapes, extra probes, longest lookup, split accesses |
//! | then | escape log: [`ESCAPE_WORDS`] words an entry |
//! | then | capture: [`CAPTURE_WORDS`] words an entry |
//! | then | heat map: [`HEAT_CELL_WORDS`] words a cell (escapes, extra probes, 64-bit each), row by row, [`HEAT_WORDS`] words reserved |
//!
//! Lanes are numbered as the pass runs them: workgroups of 8×8 pixels ([`TILE`]), row by row, and
//! within one the lane `local = ly * 8 + lx`; a wave is 32 lanes (`wave = local / 32`).
//! The device adds to the probe histogram only for lookups of two probes or more; bucket 0 (one
//! probe) is the lookups less the rest, and the same holds for the sites' probe sums.
//!
//! The 64-bit counters (words 20 on) mirror, two words for one, the workgroup counters the
//! instrumented helper keeps in workgroup memory ([`WORKGROUP_WORDS`]): workgroup word `w` is
//! added to the 64-bit counter at word [`wide_word`]`(w)` when the workgroup ends (a 32-bit atomic
//! on the low word and a carry into the high one), so that no count wraps however long a pass runs.
//! A site past the first [`WORKGROUP_SITES`] is counted straight into its 64-bit words.
//!
//! The heat map places every escape and probe on the screen, not only the logged ones: each
//! workgroup, when it ends, adds its escapes and extra probes to its heat cell, a square of
//! [`Grid::heat_scale`] workgroups a side, at most [`HEAT_SIDE`] cells a side, so its size does
//! not grow with the resolution either.

use thiserror::Error;

use crate::import::Mappings;
use crate::input::{AccessKind, Op};
use crate::memory::GuestMemory;
use crate::report::{
    CapturedAccess, ControlStatus, HeatMap, InstrumentCounters, InstrumentedReport, LoggedEscape,
    Route, SiteReport, SlotBinding,
};

/// The header's first word: `"DSI1"`.
pub const MAGIC: u32 = 0x4453_4931;
/// Pixels along a workgroup's side: a workgroup is `TILE × TILE` lanes.
pub const TILE: u32 = 8;
/// Lanes per wave (RDNA's wave32).
pub const WAVE_LANES: u32 = 32;
/// The site number of the positive control's canary lookup.
pub const CANARY_SITE: u32 = u32::MAX;
/// Buckets of the probe histogram.
pub const HISTOGRAM_BUCKETS: u32 = 16;

/// Header word indices.
pub mod header {
    /// [`super::MAGIC`].
    pub const MAGIC: u32 = 0;
    /// Sites the program numbered.
    pub const SITES: u32 = 1;
    /// Escape-log entries.
    pub const ESCAPE_CAPACITY: u32 = 2;
    /// Capture entries.
    pub const CAPTURE_CAPACITY: u32 = 3;
    /// The selected workgroup, or `u32::MAX` for any.
    pub const SEL_WORKGROUP: u32 = 4;
    /// The selected lanes of a workgroup, bit `local` (2 words, low first).
    pub const SEL_LANE_MASK: u32 = 5;
    /// The selected pixels: `x0, y0, x1, y1`, half-open (4 words).
    pub const SEL_RECT: u32 = 7;
    /// The canary's guest address (2 words): one no mapping holds.
    pub const CANARY: u32 = 11;
    /// The grid's width in pixels (the host's, to name pixels).
    pub const WIDTH: u32 = 13;
    /// The grid's height in pixels.
    pub const HEIGHT: u32 = 14;
    /// Workgroups a side of one heat cell ([`super::Grid::heat_scale`]).
    pub const HEAT_SCALE: u32 = 15;
}

/// Counter word indices.
pub mod counter {
    /// The escape log's next entry, 32 bits: the escapes offered to the log, kept or not. Every
    /// escape where the access path logs it as it happens (issue 30's path, the linkable
    /// library's); each escaping lane's first where the lane logs it when it ends (issue 42's
    /// lean path). Either way every escape is counted by its site (and its heat cell), which is
    /// what the report's total reads ([`super::decode`]).
    pub const ESCAPES: u32 = 16;
    /// Every captured access, kept or not: 32 bits, the capture's next entry.
    pub const CAPTURED: u32 = 17;
    /// Escapes of the canary (the positive control), 32 bits.
    pub const CANARY: u32 = 18;
    /// Lookups that missed (64 bits).
    pub const MISSES: u32 = super::wide_word(super::workgroup::MISSES);
    /// Device stores that marked a chunk, C1 (64 bits).
    pub const STORES_MARKED: u32 = super::wide_word(super::workgroup::STORES_MARKED);
    /// The probe histogram: bucket `i` (64 bits) at `HISTOGRAM + 2 i` (bucket 0 is derived on the
    /// host).
    pub const HISTOGRAM: u32 = super::wide_word(super::workgroup::HISTOGRAM);
}

/// The first of the 64-bit counters.
pub const WIDE_AT: u32 = 20;

/// The buffer word of the low half of the 64-bit counter that workgroup word `w` is added to.
pub const fn wide_word(w: u32) -> u32 {
    WIDE_AT + 2 * w
}

/// The workgroup counters: 32-bit words in the translated module's workgroup memory (the
/// instrumented helper's `dispatchscope_workgroup`, [`WORKGROUP_WORDS`] words), zeroed when a
/// workgroup starts and added to the buffer's 64-bit counters ([`wide_word`]) when it ends.
pub mod workgroup {
    /// Lookups that missed.
    pub const MISSES: u32 = 0;
    /// Device stores that marked a chunk (C1).
    pub const STORES_MARKED: u32 = 1;
    /// The probe histogram: bucket `i` at `HISTOGRAM + i`.
    pub const HISTOGRAM: u32 = 2;
    /// The workgroup's escapes (every site's, the canary left out): its heat cell's first count.
    pub const ESCAPES: u32 = HISTOGRAM + super::HISTOGRAM_BUCKETS;
    /// The workgroup's probes past each lookup's first: its heat cell's second count.
    pub const EXTRA_PROBES: u32 = ESCAPES + 1;
    /// The first site's first word: site `s`'s word `k` ([`super::site`]) is `SITES + 8 s + k`.
    pub const SITES: u32 = EXTRA_PROBES + 1;
    /// Words per site.
    pub const SITE_WORDS: u32 = 8;
}

/// Sites counted in workgroup memory; a site numbered past them is counted straight into the
/// buffer (correct, slower).
pub const WORKGROUP_SITES: u32 = 64;
/// 32-bit words of workgroup memory the instrumented helper takes (2,128 bytes).
pub const WORKGROUP_WORDS: u32 = workgroup::SITES + WORKGROUP_SITES * workgroup::SITE_WORDS;

/// Where the sites start.
pub const SITES_AT: u32 = wide_word(workgroup::SITES);
/// Words per site: eight 64-bit counters.
pub const SITE_WORDS: u32 = 2 * workgroup::SITE_WORDS;
/// A site's counter indices (counter `k` is the site's words `2 k` and `2 k + 1`).
pub mod site {
    /// Accesses to guest memory through the helper.
    pub const GUEST: u32 = 0;
    /// Accesses routed to LDS.
    pub const LDS: u32 = 1;
    /// Accesses routed to scratch.
    pub const SCRATCH: u32 = 2;
    /// Accesses through a bound holder.
    pub const BOUND: u32 = 3;
    /// Accesses with an escaped byte.
    pub const ESCAPES: u32 = 4;
    /// Probes past the first, summed over the site's lookups.
    pub const EXTRA_PROBES: u32 = 5;
    /// The longest lookup, in probes (0 when every lookup took one; its high word stays 0).
    pub const MAX_PROBES: u32 = 6;
    /// Accesses that took two lookups.
    pub const SPLITS: u32 = 7;
}
/// Words per escape-log entry: workgroup, local lane, site, address (2 words), `size | store << 16`,
/// the escaped-bytes mask, 0.
pub const ESCAPE_WORDS: u32 = 8;
/// Words per capture entry: workgroup, local lane, site, flags ([`route`] `<< 12 | store << 8 |
/// size`, the slot in bits 24–31 for a bound access), address or offset (2 words), four values,
/// the escaped-bytes mask, 0.
pub const CAPTURE_WORDS: u32 = 12;

/// The capture flags' route field.
pub mod route {
    /// Guest memory, by the helper.
    pub const GUEST: u32 = 0;
    /// LDS (P1).
    pub const LDS: u32 = 1;
    /// Scratch (P1).
    pub const SCRATCH: u32 = 2;
    /// A bound holder (the slot in the flags' bits 24–31, the offset in that slot).
    pub const BOUND: u32 = 3;
}

/// The escape log's default capacity: with [`DEFAULT_CAPTURE_CAPACITY`] and a few dozen sites, the
/// whole report of an instrumented dispatch stays under 64 KiB of JSON (an escape is about 310
/// bytes of it, a captured access about 190; the rest of the report about 6 KB): 58 KB for the
/// demo's 256×256 pass. Every escape is counted, by site and class, whatever the log keeps.
pub const DEFAULT_ESCAPE_CAPACITY: u32 = 32;
/// The capture's default capacity (see [`DEFAULT_ESCAPE_CAPACITY`]).
pub const DEFAULT_CAPTURE_CAPACITY: u32 = 192;

/// Heat cells a side of the grid, at most: a cell is [`Grid::heat_scale`] workgroups a side, so
/// the heat map has at most `HEAT_SIDE²` cells whatever the resolution.
pub const HEAT_SIDE: u32 = 32;
/// Words one heat cell takes: two 64-bit counts (escapes, extra probes), low word first.
pub const HEAT_CELL_WORDS: u32 = 4;
/// Words the heat map takes in the buffer (room for [`HEAT_SIDE`]² cells).
pub const HEAT_WORDS: u32 = HEAT_SIDE * HEAT_SIDE * HEAT_CELL_WORDS;

/// The sizes of the instrumentation buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InstrumentLayout {
    /// Sites the program numbered.
    pub sites: u32,
    /// Escape-log entries kept.
    pub escape_capacity: u32,
    /// Captured accesses kept.
    pub capture_capacity: u32,
}

impl InstrumentLayout {
    /// `sites` sites and the default capacities.
    pub fn with_sites(sites: u32) -> Self {
        Self {
            sites,
            escape_capacity: DEFAULT_ESCAPE_CAPACITY,
            capture_capacity: DEFAULT_CAPTURE_CAPACITY,
        }
    }

    /// The first word of the escape log.
    pub fn escapes_at(&self) -> u32 {
        SITES_AT + self.sites * SITE_WORDS
    }

    /// The first word of the capture.
    pub fn capture_at(&self) -> u32 {
        self.escapes_at() + self.escape_capacity * ESCAPE_WORDS
    }

    /// The first word of the heat map: after the capture.
    pub fn heat_at(&self) -> u32 {
        self.capture_at() + self.capture_capacity * CAPTURE_WORDS
    }

    /// Words in the buffer.
    pub fn words(&self) -> u32 {
        self.heat_at() + HEAT_WORDS
    }

    /// Bytes in the buffer.
    pub fn bytes(&self) -> u64 {
        u64::from(self.words()) * 4
    }
}

/// The lanes whose every access the device captures: a lane is captured when it lies in the
/// rectangle, in the workgroup (if one is named), and its local index's bit is set in the mask.
/// A debugger sends one to a live target (`dispatchscope_live`'s `ToTarget::CaptureLanes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LaneSelection {
    /// One workgroup, or any.
    pub workgroup: Option<u32>,
    /// Bit `local` selects lane `local` of a workgroup.
    pub lane_mask: u64,
    /// Pixels `[x0, x1) × [y0, y1)`.
    pub rect: [u32; 4],
}

impl LaneSelection {
    /// No lane.
    pub fn none() -> Self {
        Self {
            workgroup: None,
            lane_mask: 0,
            rect: [0; 4],
        }
    }

    /// Every lane of one pixel rectangle.
    pub fn rect(x0: u32, y0: u32, x1: u32, y1: u32) -> Self {
        Self {
            workgroup: None,
            lane_mask: u64::MAX,
            rect: [x0, y0, x1, y1],
        }
    }

    /// The lanes of `mask` in one workgroup.
    pub fn workgroup(workgroup: u32, lane_mask: u64) -> Self {
        Self {
            workgroup: Some(workgroup),
            lane_mask,
            rect: [0, 0, u32::MAX, u32::MAX],
        }
    }

    /// Whether the lane at `pixel` (workgroup `wg`, local index `local`) is selected: the device's
    /// test, for the host's checks.
    pub fn selects(&self, wg: u32, local: u32, pixel: [u32; 2]) -> bool {
        let [x0, y0, x1, y1] = self.rect;
        let in_rect = pixel[0] >= x0 && pixel[0] < x1 && pixel[1] >= y0 && pixel[1] < y1;
        in_rect
            && self.workgroup.is_none_or(|w| w == wg)
            && local < 64
            && (self.lane_mask >> local) & 1 == 1
    }
}

/// In words: `"workgroup 1234"`, `"pixel (3, 4)"` or `"pixels [10, 20) × [5, 6)"`.
impl std::fmt::Display for LaneSelection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.workgroup {
            Some(w) if self.lane_mask == u64::MAX => write!(f, "workgroup {w}"),
            Some(w) => write!(f, "workgroup {w}, lanes {:#018x}", self.lane_mask),
            None => {
                let [x0, y0, x1, y1] = self.rect;
                if x1 == x0.wrapping_add(1) && y1 == y0.wrapping_add(1) {
                    write!(f, "pixel ({x0}, {y0})")
                } else {
                    write!(f, "pixels [{x0}, {x1}) × [{y0}, {y1})")
                }
            }
        }
    }
}

/// The pass's grid: one lane per pixel, workgroups of [`TILE`] × [`TILE`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grid {
    /// Pixels per row.
    pub width: u32,
    /// Rows.
    pub height: u32,
}

impl Grid {
    /// A grid of `width × height`, both multiples of [`TILE`] and neither zero.
    pub fn new(width: u32, height: u32) -> Result<Self, InstrumentError> {
        if width == 0 || height == 0 || !width.is_multiple_of(TILE) || !height.is_multiple_of(TILE)
        {
            return Err(InstrumentError::Grid { width, height });
        }
        Ok(Self { width, height })
    }

    /// Workgroups per row.
    pub fn groups_x(&self) -> u32 {
        self.width / TILE
    }

    /// Workgroups in all.
    pub fn workgroups(&self) -> u64 {
        u64::from(self.groups_x()) * u64::from(self.height / TILE)
    }

    /// The pixel of lane `local` of workgroup `wg`.
    pub fn pixel(&self, wg: u32, local: u32) -> [u32; 2] {
        let gx = self.groups_x().max(1);
        [
            (wg % gx) * TILE + local % TILE,
            (wg / gx) * TILE + (local / TILE) % TILE,
        ]
    }

    /// Workgroups a side of one heat cell: the least that keeps the heat map within
    /// [`HEAT_SIDE`] cells a side.
    pub fn heat_scale(&self) -> u32 {
        let groups = self.groups_x().max(self.height / TILE);
        groups.div_ceil(HEAT_SIDE).max(1)
    }

    /// Heat cells a row and rows of heat cells.
    pub fn heat_cells(&self) -> [u32; 2] {
        let s = self.heat_scale();
        [
            self.groups_x().div_ceil(s),
            (self.height / TILE).div_ceil(s),
        ]
    }

    /// The heat cell workgroup `wg` adds to, row by row; `None` for a workgroup past the grid's
    /// rows (a dispatch larger than its grid), which adds to no cell (the device's `add_heat`
    /// tests the same).
    pub fn heat_cell_of(&self, wg: u32) -> Option<usize> {
        let (gx, s) = (self.groups_x().max(1), self.heat_scale());
        let [cx, cy] = self.heat_cells();
        let row = wg / gx / s;
        (row < cy).then(|| (row * cx + (wg % gx) / s) as usize)
    }

    /// The workgroup and local index of the lane at `pixel`.
    pub fn lane_of(&self, pixel: [u32; 2]) -> (u32, u32) {
        let wg = (pixel[1] / TILE) * self.groups_x() + pixel[0] / TILE;
        (wg, (pixel[1] % TILE) * TILE + pixel[0] % TILE)
    }

    /// The workgroups that may hold a lane `selection` selects: the smallest rectangle of
    /// workgroups `[x0, x1) × [y0, y1)` (in workgroups, not pixels) around the selection's pixels
    /// on this grid and its workgroup, or `None` when it can select no lane. What the capture's
    /// second dispatch runs over (the device tests each lane of them again).
    pub fn selected_workgroups(&self, selection: &LaneSelection) -> Option<[u32; 4]> {
        if selection.lane_mask == 0 {
            return None;
        }
        let [x0, y0, x1, y1] = selection.rect;
        let (x1, y1) = (x1.min(self.width), y1.min(self.height));
        if x0 >= x1 || y0 >= y1 {
            return None;
        }
        let mut b = [x0 / TILE, y0 / TILE, x1.div_ceil(TILE), y1.div_ceil(TILE)];
        if let Some(w) = selection.workgroup {
            let gx = self.groups_x().max(1);
            let (wx, wy) = (w % gx, w / gx);
            b = [
                b[0].max(wx),
                b[1].max(wy),
                b[2].min(wx + 1),
                b[3].min(wy + 1),
            ];
            if b[0] >= b[2] || b[1] >= b[3] {
                return None;
            }
        }
        Some(b)
    }
}

/// What the translator says of one access site.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SiteInfo {
    /// The guest instruction's program counter.
    pub pc: u64,
    /// Its kind.
    pub kind: AccessKind,
    /// Load or store.
    pub op: Op,
    /// Bytes per access.
    pub size_bytes: u32,
}

/// A buffer the device wrote that cannot be decoded.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum InstrumentError {
    /// The grid is not whole workgroups.
    #[error("a grid of {width}×{height} pixels is not whole workgroups of 8×8 (nor empty)")]
    Grid {
        /// Width.
        width: u32,
        /// Height.
        height: u32,
    },
    /// The buffer is shorter than its layout.
    #[error("the instrumentation buffer holds {words} words; its layout needs {needed}")]
    Short {
        /// Words read back.
        words: usize,
        /// Words the layout needs.
        needed: u32,
    },
    /// The header's first word is not [`MAGIC`].
    #[error("the instrumentation buffer starts with {found:#x}, not the magic {MAGIC:#x}")]
    Magic {
        /// The word found.
        found: u32,
    },
    /// The header disagrees with the layout the host made.
    #[error("the instrumentation header says {what} {found}; the host made {expected}")]
    Header {
        /// Which field.
        what: &'static str,
        /// The header's value.
        found: u32,
        /// The layout's.
        expected: u32,
    },
    /// The program's sites and the layout's disagree.
    #[error("the layout has {layout} sites, the program described {described}")]
    Sites {
        /// The layout's.
        layout: u32,
        /// The descriptions given.
        described: usize,
    },
}

/// The buffer's first contents: the header (layout, selection, canary, grid) and zeroed counters,
/// sites and logs.
pub fn initial_words(
    layout: &InstrumentLayout,
    selection: &LaneSelection,
    canary: u64,
    grid: Grid,
) -> Vec<u32> {
    let mut w = vec![0u32; layout.words() as usize];
    let mut set = |at: u32, v: u32| {
        if let Some(x) = w.get_mut(at as usize) {
            *x = v;
        }
    };
    set(header::MAGIC, MAGIC);
    set(header::SITES, layout.sites);
    set(header::ESCAPE_CAPACITY, layout.escape_capacity);
    set(header::CAPTURE_CAPACITY, layout.capture_capacity);
    set(
        header::SEL_WORKGROUP,
        selection.workgroup.unwrap_or(u32::MAX),
    );
    set(header::SEL_LANE_MASK, selection.lane_mask as u32);
    set(
        header::SEL_LANE_MASK + 1,
        (selection.lane_mask >> 32) as u32,
    );
    for (i, v) in selection.rect.iter().enumerate() {
        set(header::SEL_RECT + i as u32, *v);
    }
    set(header::CANARY, canary as u32);
    set(header::CANARY + 1, (canary >> 32) as u32);
    set(header::WIDTH, grid.width);
    set(header::HEIGHT, grid.height);
    set(header::HEAT_SCALE, grid.heat_scale());
    w
}

/// The words the device wrote, copied out of its buffer: header, counters and sites, and only the
/// entries of the two logs that hold something. What an emulator keeps per dispatch when the
/// report is built lazily; [`decode`] turns it into the report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Readback {
    layout: InstrumentLayout,
    grid: Grid,
    /// Words `0..escapes_at`.
    head: Vec<u32>,
    /// The logged escapes' words.
    escapes: Vec<u32>,
    /// The captured accesses' words.
    captured: Vec<u32>,
    /// The heat cells' words.
    heat: Vec<u32>,
}

fn word(w: &[u32], at: u32) -> u32 {
    w.get(at as usize).copied().unwrap_or(0)
}

impl Readback {
    /// Copies what the device wrote out of `words` (the buffer as a slice of words), checking the
    /// header against `layout`.
    pub fn read(
        layout: InstrumentLayout,
        grid: Grid,
        words: &[u32],
    ) -> Result<Self, InstrumentError> {
        if words.len() < layout.words() as usize {
            return Err(InstrumentError::Short {
                words: words.len(),
                needed: layout.words(),
            });
        }
        let magic = word(words, header::MAGIC);
        if magic != MAGIC {
            return Err(InstrumentError::Magic { found: magic });
        }
        for (what, at, expected) in [
            ("sites", header::SITES, layout.sites),
            (
                "escape capacity",
                header::ESCAPE_CAPACITY,
                layout.escape_capacity,
            ),
            (
                "capture capacity",
                header::CAPTURE_CAPACITY,
                layout.capture_capacity,
            ),
            ("width", header::WIDTH, grid.width),
            ("height", header::HEIGHT, grid.height),
            ("heat scale", header::HEAT_SCALE, grid.heat_scale()),
        ] {
            let found = word(words, at);
            if found != expected {
                return Err(InstrumentError::Header {
                    what,
                    found,
                    expected,
                });
            }
        }
        let logged = |total: u32, cap: u32| total.min(cap);
        let n_esc = logged(word(words, counter::ESCAPES), layout.escape_capacity);
        let n_cap = logged(word(words, counter::CAPTURED), layout.capture_capacity);
        let slice = |at: u32, n: u32| {
            words
                .get(at as usize..(at + n) as usize)
                .map(<[u32]>::to_vec)
                .unwrap_or_default()
        };
        Ok(Self {
            layout,
            grid,
            head: slice(0, layout.escapes_at()),
            escapes: slice(layout.escapes_at(), n_esc * ESCAPE_WORDS),
            captured: slice(layout.capture_at(), n_cap * CAPTURE_WORDS),
            heat: {
                let [cx, cy] = grid.heat_cells();
                slice(layout.heat_at(), cx * cy * HEAT_CELL_WORDS)
            },
        })
    }

    /// Bytes kept.
    pub fn kept_bytes(&self) -> usize {
        4 * (self.head.len() + self.escapes.len() + self.captured.len() + self.heat.len())
    }

    fn at(&self, i: u32) -> u32 {
        word(&self.head, i)
    }

    /// The 64-bit counter whose low word is at `i`.
    fn wide(&self, i: u32) -> u64 {
        u64::from(self.at(i)) | u64::from(self.at(i + 1)) << 32
    }

    /// Site `site`'s counter `k` ([`site`]).
    fn site_counter(&self, site: u32, k: u32) -> u64 {
        self.wide(SITES_AT + site * SITE_WORDS + 2 * k)
    }

    /// The heat map: each cell's escapes and extra probes, summed over its workgroups.
    pub fn heat_map(&self) -> HeatMap {
        let cells = self.grid.heat_cells();
        let wide = |c: &[u32], k: usize| {
            u64::from(c.get(2 * k).copied().unwrap_or(0))
                | u64::from(c.get(2 * k + 1).copied().unwrap_or(0)) << 32
        };
        let rows = self.heat.chunks_exact(HEAT_CELL_WORDS as usize);
        HeatMap {
            scale: self.grid.heat_scale(),
            cells,
            escapes: rows.clone().map(|c| wide(c, 0)).collect(),
            extra_probes: rows.map(|c| wide(c, 1)).collect(),
        }
    }

    /// Whether the positive control fired.
    pub fn control(&self) -> ControlStatus {
        if self.at(counter::CANARY) > 0 {
            ControlStatus::Fired
        } else {
            ControlStatus::NotFired
        }
    }
}

/// The lane a log entry names: (workgroup, wave, lane, pixel).
fn lane_fields(grid: &Grid, wg: u32, local: u32) -> (u32, u32, u32, [u32; 2]) {
    (
        wg,
        local / WAVE_LANES,
        local % WAVE_LANES,
        grid.pixel(wg, local),
    )
}

/// Bytes `size` of `mask`'s low bits, as the escaped-bytes mask of an access of `size_bytes`.
fn mask_for(size_bytes: u32) -> u32 {
    if size_bytes >= 32 {
        u32::MAX
    } else {
        (1u32 << size_bytes) - 1
    }
}

/// Builds the report section from what the device wrote: counters summed over the sites, the
/// histogram's first bucket derived, every logged escape classified against `mappings` and
/// `memory` (T4's classes and the nearest pieces), bound captures placed in their holders by
/// `slots` (O6). `sites` are the translator's descriptions, one per site of the layout.
pub fn decode(
    rb: &Readback,
    sites: &[SiteInfo],
    slots: &[SlotBinding],
    mappings: &Mappings,
    memory: &GuestMemory,
) -> Result<InstrumentedReport, InstrumentError> {
    if sites.len() != rb.layout.sites as usize {
        return Err(InstrumentError::Sites {
            layout: rb.layout.sites,
            described: sites.len(),
        });
    }
    let mut counters = InstrumentCounters::default();
    let mut site_reports = Vec::with_capacity(sites.len());
    for (i, info) in sites.iter().enumerate() {
        let i = i as u32;
        let w = |k| rb.site_counter(i, k);
        let (guest, splits, extra) = (w(site::GUEST), w(site::SPLITS), w(site::EXTRA_PROBES));
        let lookups = guest + splits;
        counters.guest += guest;
        counters.lds += w(site::LDS);
        counters.scratch += w(site::SCRATCH);
        counters.bound += w(site::BOUND);
        counters.escapes += w(site::ESCAPES);
        counters.lookups += lookups;
        // The device keeps the longest lookup in the low word (an unsigned max, not a sum).
        let max = rb.site_counter(i, site::MAX_PROBES) as u32;
        site_reports.push(SiteReport {
            site: i,
            pc: info.pc,
            kind: info.kind,
            op: info.op,
            size_bytes: info.size_bytes,
            accesses: guest + w(site::LDS) + w(site::SCRATCH) + w(site::BOUND),
            escapes: w(site::ESCAPES),
            lookups,
            probes_sum: lookups + extra,
            probes_max: if lookups == 0 { 0 } else { max.max(1) },
        });
    }
    counters.misses = rb.wide(counter::MISSES);
    counters.hits = counters.lookups.saturating_sub(counters.misses);
    counters.stores_marked = rb.wide(counter::STORES_MARKED);
    let mut histogram: Vec<u64> = (0..HISTOGRAM_BUCKETS)
        .map(|b| rb.wide(counter::HISTOGRAM + 2 * b))
        .collect();
    let rest: u64 = histogram.iter().skip(1).sum();
    if let Some(first) = histogram.first_mut() {
        *first = counters.lookups.saturating_sub(rest);
    }
    let site_pc = |s: u32| sites.get(s as usize).map_or(0, |i| i.pc);
    let escapes = rb
        .escapes
        .chunks_exact(ESCAPE_WORDS as usize)
        .map(|e| {
            let (workgroup, wave, lane, pixel) = lane_fields(&rb.grid, e[0], e[1]);
            let address = u64::from(e[3]) | u64::from(e[4]) << 32;
            let size_bytes = e[5] & 0xffff;
            let escaped_bytes = e[6] & mask_for(size_bytes);
            let first = address + u64::from(escaped_bytes.trailing_zeros().min(31));
            let (class, reason, _) = mappings.classify_miss(memory, first);
            let (below, above) = mappings.neighbours(first);
            LoggedEscape {
                workgroup,
                wave,
                lane,
                pixel,
                site: e[2],
                pc: site_pc(e[2]),
                address,
                size_bytes,
                op: if e[5] >> 16 & 1 == 1 {
                    Op::Store
                } else {
                    Op::Load
                },
                escaped_bytes,
                class,
                reason,
                nearest_below: below.map(|p| p.guest),
                nearest_above: above.map(|p| p.guest),
            }
        })
        .collect();
    let captured = rb
        .captured
        .chunks_exact(CAPTURE_WORDS as usize)
        .map(|c| {
            let (workgroup, wave, lane, pixel) = lane_fields(&rb.grid, c[0], c[1]);
            let flags = c[3];
            let size_bytes = flags & 0xff;
            let addr = u64::from(c[4]) | u64::from(c[5]) << 32;
            let slot_no = flags >> 24;
            let (route, slot) = match flags >> 12 & 0xf {
                route::LDS => (Route::Lds { offset: addr }, None),
                route::SCRATCH => (Route::Scratch { offset: addr }, None),
                route::BOUND => {
                    let b = slots.iter().find(|b| b.slot == slot_no);
                    (
                        Route::Bound {
                            holder: b.and_then(|b| b.holder).unwrap_or(slot_no),
                            offset: b.map_or(0, |b| b.offset) + addr,
                        },
                        Some((slot_no, addr)),
                    )
                }
                _ => (Route::Device { address: addr }, None),
            };
            let n = size_bytes.div_ceil(4).min(4) as usize;
            CapturedAccess {
                workgroup,
                wave,
                lane,
                pixel,
                site: c[2],
                pc: site_pc(c[2]),
                op: if flags >> 8 & 1 == 1 {
                    Op::Store
                } else {
                    Op::Load
                },
                route,
                slot,
                size_bytes,
                values: c[6..6 + n].to_vec(),
                escaped_bytes: c[10] & mask_for(size_bytes),
            }
        })
        .collect();
    let logged_escapes = (rb.escapes.len() / ESCAPE_WORDS as usize) as u64;
    let logged_captured = (rb.captured.len() / CAPTURE_WORDS as usize) as u64;
    Ok(InstrumentedReport {
        grid: [rb.grid.width, rb.grid.height],
        lanes: u64::from(rb.grid.width) * u64::from(rb.grid.height),
        workgroups: rb.grid.workgroups(),
        counters,
        probe_histogram: histogram,
        sites: site_reports,
        escapes,
        // Every escape is counted by its site; the log keeps some of them.
        escapes_not_logged: counters.escapes.saturating_sub(logged_escapes),
        captured,
        captured_not_logged: u64::from(rb.at(counter::CAPTURED)).saturating_sub(logged_captured),
        control: rb.control(),
        heat: Some(rb.heat_map()),
    })
}

/// The section an instrumented pass over `grid` would decode to, for a dispatch the CPU
/// reference ran with its access list (`report`): each distinct access pc is a site (in pc order),
/// the counters and the probe histogram come from the accesses' routes and lookups, the first
/// `log_capacity` escapes are logged with their classes, no lane is captured, and the positive
/// control reads as fired (the reference classifies every lookup itself, so its miss path needs
/// no canary). What a target without a device streams for a device-addressed pass in place of its
/// access list (the demo's game mode, issue 31): the same counts a device would give.
pub fn section_of_reference(
    report: &crate::report::DispatchReport,
    grid: Grid,
    log_capacity: usize,
) -> InstrumentedReport {
    let mut pcs: Vec<(u64, AccessKind, Op, u32)> = report
        .accesses
        .iter()
        .map(|a| (a.pc, a.kind, a.op, a.size_bytes))
        .collect();
    pcs.sort_unstable_by_key(|s| s.0);
    pcs.dedup_by_key(|s| s.0);
    let mut sites: Vec<SiteReport> = pcs
        .iter()
        .enumerate()
        .map(|(i, &(pc, kind, op, size_bytes))| SiteReport {
            site: i as u32,
            pc,
            kind,
            op,
            size_bytes,
            accesses: 0,
            escapes: 0,
            lookups: 0,
            probes_sum: 0,
            probes_max: 0,
        })
        .collect();
    let mut counters = InstrumentCounters::default();
    let mut histogram = vec![0u64; HISTOGRAM_BUCKETS as usize];
    let mut escapes = Vec::new();
    let mut not_logged = 0u64;
    for a in &report.accesses {
        let Ok(s) = pcs.binary_search_by_key(&a.pc, |s| s.0) else {
            continue;
        };
        let site = &mut sites[s];
        site.accesses += 1;
        match a.route {
            Route::Device { .. } => counters.guest += 1,
            Route::Lds { .. } => counters.lds += 1,
            Route::Scratch { .. } => counters.scratch += 1,
            Route::Bound { .. } => counters.bound += 1,
            Route::NotRun => {}
        }
        for l in &a.lookups {
            let probes = l.probes.len().max(1) as u64;
            site.lookups += 1;
            site.probes_sum += probes;
            site.probes_max = site.probes_max.max(probes as u32);
            counters.lookups += 1;
            let missed = !matches!(l.outcome, crate::report::LookupOutcome::Hit { .. });
            counters.misses += u64::from(missed);
            let bucket = (probes as usize).min(HISTOGRAM_BUCKETS as usize) - 1;
            histogram[bucket] += 1;
        }
        if a.op == Op::Store && matches!(a.route, Route::Device { .. }) && !a.escaped {
            counters.stores_marked += 1;
        }
        if a.escaped {
            site.escapes += 1;
            counters.escapes += 1;
            let Some(e) = report.escapes.iter().find(|e| e.access == a.index) else {
                continue;
            };
            if escapes.len() >= log_capacity {
                not_logged += 1;
                continue;
            }
            let local = a.wave * 32 + a.lane;
            escapes.push(LoggedEscape {
                workgroup: a.workgroup,
                wave: a.wave,
                lane: a.lane,
                pixel: grid.pixel(a.workgroup, local),
                site: s as u32,
                pc: a.pc,
                address: e.address,
                size_bytes: a.size_bytes,
                op: a.op,
                escaped_bytes: mask_for(a.size_bytes),
                class: e.class,
                reason: e.reason,
                nearest_below: None,
                nearest_above: None,
            });
        }
    }
    counters.hits = counters.lookups - counters.misses;
    InstrumentedReport {
        grid: [grid.width, grid.height],
        lanes: u64::from(grid.width) * u64::from(grid.height),
        workgroups: grid.workgroups(),
        counters,
        probe_histogram: histogram,
        sites,
        escapes,
        escapes_not_logged: not_logged,
        captured: Vec::new(),
        captured_not_logged: 0,
        control: ControlStatus::Fired,
        heat: None,
    }
}

/// A canary address for the positive control: the first page-aligned address at or above `from`
/// that no piece of `mappings` holds.
pub fn unmapped_at_or_above(mappings: &Mappings, from: u64, page_bytes: u64) -> u64 {
    let page = page_bytes.max(1);
    let mut at = from.div_ceil(page) * page;
    while let Some(p) = mappings.piece_at(at) {
        at = p.guest.end.div_ceil(page) * page;
    }
    at
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "in a test, an unwrap is an assertion")]
mod tests {
    use super::*;

    fn layout() -> InstrumentLayout {
        InstrumentLayout {
            sites: 3,
            escape_capacity: 2,
            capture_capacity: 4,
        }
    }

    fn sites() -> Vec<SiteInfo> {
        (0..3)
            .map(|i| SiteInfo {
                pc: 0x100 + 8 * i,
                kind: AccessKind::Global,
                op: Op::Load,
                size_bytes: 16,
            })
            .collect()
    }

    #[test]
    fn the_wide_counters_mirror_the_workgroup_words() {
        const { assert!(WIDE_AT > counter::CANARY) };
        assert_eq!(counter::MISSES, WIDE_AT);
        assert_eq!(
            counter::HISTOGRAM + 2 * HISTOGRAM_BUCKETS,
            wide_word(workgroup::ESCAPES)
        );
        assert_eq!(wide_word(workgroup::EXTRA_PROBES) + 2, SITES_AT);
        assert_eq!(
            wide_word(workgroup::SITES + 3 * workgroup::SITE_WORDS + site::SPLITS),
            SITES_AT + 3 * SITE_WORDS + 2 * site::SPLITS
        );
        assert_eq!(4 * WORKGROUP_WORDS, 2128);
    }

    #[test]
    fn grid_names_pixels_and_lanes_both_ways() {
        let g = Grid::new(32, 16).unwrap();
        assert_eq!(g.workgroups(), 8);
        for y in 0..16 {
            for x in 0..32 {
                let (wg, local) = g.lane_of([x, y]);
                assert_eq!(g.pixel(wg, local), [x, y]);
            }
        }
        assert_eq!(
            Grid::new(30, 16),
            Err(InstrumentError::Grid {
                width: 30,
                height: 16
            })
        );
        assert!(Grid::new(0, 8).is_err());
    }

    /// The capture's workgroups hold every lane a selection selects, and none are named for a
    /// selection of no lane.
    #[test]
    fn selected_workgroups_hold_every_selected_lane() {
        let g = Grid::new(48, 32).unwrap();
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: u32| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            (rng % u64::from(n)) as u32
        };
        let mut selections = vec![
            LaneSelection::none(),
            LaneSelection::rect(0, 0, 1, 1),
            LaneSelection::rect(47, 31, 48, 32),
            LaneSelection::rect(40, 30, 100, 100),
            LaneSelection::workgroup(23, u64::MAX),
            LaneSelection::workgroup(24, u64::MAX),
            LaneSelection::workgroup(5, 1 << 63),
        ];
        for _ in 0..500 {
            let (x0, y0) = (next(56), next(40));
            let mut s = LaneSelection::rect(x0, y0, x0 + next(20), y0 + next(12));
            if next(3) == 0 {
                s.workgroup = Some(next(26));
            }
            if next(4) == 0 {
                s.lane_mask = u64::from(next(u32::MAX)) << next(33);
            }
            selections.push(s);
        }
        for s in &selections {
            let b = g.selected_workgroups(s);
            let mut any = false;
            for wg in 0..g.workgroups() as u32 {
                for local in 0..64 {
                    if s.selects(wg, local, g.pixel(wg, local)) {
                        any = true;
                        let [x0, y0, x1, y1] = b.unwrap_or_else(|| panic!("{s:?}: none named"));
                        let (wx, wy) = (wg % g.groups_x(), wg / g.groups_x());
                        assert!(wx >= x0 && wx < x1 && wy >= y0 && wy < y1, "{s:?}: {wg}");
                    }
                }
            }
            if let Some([x0, y0, x1, y1]) = b {
                assert!(x1 <= g.groups_x() && y1 <= 4 && x0 < x1 && y0 < y1, "{s:?}");
            }
            assert!(any || b.is_none() || s.lane_mask != u64::MAX || s.workgroup.is_some());
        }
    }

    #[test]
    fn selection_needs_rect_workgroup_and_mask() {
        let s = LaneSelection::rect(8, 0, 16, 8);
        assert!(s.selects(1, 0, [8, 0]) && !s.selects(0, 0, [0, 0]));
        let w = LaneSelection::workgroup(3, 0b101);
        assert!(w.selects(3, 0, [0, 0]) && w.selects(3, 2, [2, 0]));
        assert!(!w.selects(3, 1, [1, 0]) && !w.selects(2, 0, [0, 0]));
        assert!(!LaneSelection::none().selects(0, 0, [0, 0]));
    }

    #[test]
    fn readback_checks_the_header_and_keeps_only_written_entries() {
        let l = layout();
        let g = Grid::new(16, 8).unwrap();
        let mut w = initial_words(&l, &LaneSelection::none(), 0x7000, g);
        assert!(Readback::read(l, g, &w[..10]).is_err());
        w[counter::ESCAPES as usize] = 5; // 2 logged, 3 not
        w[counter::CAPTURED as usize] = 1;
        let rb = Readback::read(l, g, &w).unwrap();
        assert_eq!(rb.escapes.len(), 2 * ESCAPE_WORDS as usize);
        assert_eq!(rb.captured.len(), CAPTURE_WORDS as usize);
        let mut bad = w.clone();
        bad[0] = 1;
        assert_eq!(
            Readback::read(l, g, &bad),
            Err(InstrumentError::Magic { found: 1 })
        );
        let other = Grid::new(8, 8).unwrap();
        assert!(matches!(
            Readback::read(l, other, &w),
            Err(InstrumentError::Header { what: "width", .. })
        ));
    }

    #[test]
    fn decode_derives_counters_histogram_and_not_logged() {
        let l = layout();
        let g = Grid::new(16, 8).unwrap();
        let mut w = initial_words(&l, &LaneSelection::none(), 0x7000, g);
        let s = |site: u32, k: u32| (SITES_AT + site * SITE_WORDS + 2 * k) as usize;
        // A count past 2^32 (its high word), as a long pass makes.
        w[s(0, site::GUEST) + 1] = 1;
        w[s(0, site::GUEST)] = 10;
        w[s(0, site::SPLITS)] = 2;
        w[s(0, site::EXTRA_PROBES)] = 3;
        w[s(0, site::MAX_PROBES)] = 3;
        w[s(1, site::LDS)] = 7;
        w[s(2, site::GUEST)] = 4;
        w[s(2, site::ESCAPES)] = 4;
        w[counter::MISSES as usize] = 4;
        w[counter::HISTOGRAM as usize + 2] = 1;
        w[counter::HISTOGRAM as usize + 4] = 1;
        w[counter::ESCAPES as usize] = 4;
        w[counter::CANARY as usize] = 1;
        let e = l.escapes_at() as usize;
        w[e..e + 8].copy_from_slice(&[1, 33, 2, 0x5000, 0, 16, 0xfff0, 0]);
        let rb = Readback::read(l, g, &w).unwrap();
        let r = decode(
            &rb,
            &sites(),
            &[],
            &Mappings::new(),
            &GuestMemory::new(0x1000).unwrap(),
        )
        .unwrap();
        let big = 1u64 << 32;
        assert_eq!(r.counters.lookups, big + 16);
        assert_eq!(r.counters.hits, big + 12);
        assert_eq!(r.counters.lds, 7);
        assert_eq!(r.probe_histogram[0], big + 14);
        assert_eq!(r.probe_histogram[1..3], [1, 1]);
        assert_eq!(r.sites[0].accesses, big + 10);
        assert_eq!(r.sites[0].probes_sum, big + 15);
        assert_eq!(r.sites[0].probes_max, 3);
        assert_eq!(r.sites[2].probes_max, 1);
        assert_eq!(r.sites[1].probes_max, 0);
        assert_eq!(r.escapes.len(), 2);
        assert_eq!(r.escapes_not_logged, 2);
        let e0 = &r.escapes[0];
        assert_eq!((e0.wave, e0.lane, e0.pixel), (1, 1, [9, 4]));
        assert_eq!(e0.escaped_bytes, 0xfff0);
        assert_eq!(e0.class, crate::report::EscapeClass::NoReservation);
        assert_eq!(r.control, ControlStatus::Fired);
        assert!(
            decode(
                &rb,
                &sites()[..2],
                &[],
                &Mappings::new(),
                &GuestMemory::new(0x1000).unwrap()
            )
            .is_err()
        );
    }
}
