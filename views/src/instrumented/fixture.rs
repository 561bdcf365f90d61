//! A deterministic generator of a realistic instrumented section (issue 14), for the panels'
//! tests, the frame bench and the app's GUI test: one place, so that they all draw the same pass.
//!
//! The pass stands in for the shipped ray-traversal program (`samples/ray-traversal.json`, program
//! `0x74005b854a00`, whose access sites are the memory instructions of
//! `core/rdna/tools/ray_traversal.s`): one lane per pixel, six instance iterations a lane, four
//! node reads an instance. An instance that points at unmapped memory makes every lane of one
//! screen region (and a smaller second one) escape, so the escape log is full and the grid
//! picture shows where; a 2×1 rectangle of lanes inside the first region is captured.
//!
//! Nothing here is random at run time: a fixed-seed generator makes the same section every call.

use dispatchscope_core::ByteRange;
use dispatchscope_core::input::{AccessKind, DispatchKind, Op};
use dispatchscope_core::instrument::Grid;
use dispatchscope_core::report::{
    BeforeDispatch, CapturedAccess, ControlStatus, Counts, DispatchReport, EscapeClass, HandOff,
    HeatMap, InstrumentCounters, InstrumentedReport, LeftOutReason, LoggedEscape, Mode, Route,
    SiteReport,
};

/// The traversal program's guest address.
pub const PROGRAM: u64 = 0x7400_5b85_4a00;

/// Where its route goes, for the generator.
#[derive(Clone, Copy)]
enum Via {
    Guest,
    Bound(u32),
    Lds,
    Scratch,
}

/// The program's access sites: pc offset, kind, op, bytes, accesses a lane, route.
const SITES: [(u64, AccessKind, Op, u32, u64, Via); 11] = [
    (0x00, AccessKind::Scalar, Op::Load, 8, 1, Via::Guest),
    (0x08, AccessKind::Scalar, Op::Load, 16, 1, Via::Bound(0)),
    (
        0x80,
        AccessKind::UntypedBuffer,
        Op::Load,
        16,
        1,
        Via::Bound(0),
    ),
    (0x90, AccessKind::Scalar, Op::Load, 64, 6, Via::Guest),
    (0xa0, AccessKind::Flat, Op::Store, 4, 6, Via::Lds),
    (
        0xb0,
        AccessKind::RayIntersection,
        Op::Load,
        64,
        24,
        Via::Guest,
    ),
    (
        0xc0,
        AccessKind::UntypedBuffer,
        Op::Load,
        8,
        6,
        Via::Bound(1),
    ),
    (0xd0, AccessKind::Flat, Op::Store, 4, 6, Via::Scratch),
    (0xd8, AccessKind::Scratch, Op::Load, 4, 6, Via::Scratch),
    (0xe0, AccessKind::Lds, Op::Load, 4, 6, Via::Lds),
    (0xf0, AccessKind::Global, Op::Store, 8, 1, Via::Guest),
];

/// The site whose instance read escapes (`s_load_dwordx16` at `+0x90`).
pub const ESCAPING_SITE: u32 = 3;
/// The node read that escapes too, where a lane's first instance escaped (`+0xb0`).
pub const NODE_SITE: u32 = 5;

/// What to generate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fixture {
    /// Pixels per row (a multiple of 8).
    pub width: u32,
    /// Rows (a multiple of 8).
    pub height: u32,
    /// The escape log's capacity.
    pub escape_capacity: u32,
    /// The lane capture's capacity.
    pub capture_capacity: u32,
    /// Whether the canary escaped.
    pub control: ControlStatus,
}

impl Fixture {
    /// A pass of `width × height` with a log of 384 escapes and a capture of 192 accesses.
    pub fn new(width: u32, height: u32) -> Self {
        Self {
            width,
            height,
            escape_capacity: 384,
            capture_capacity: 192,
            control: ControlStatus::Fired,
        }
    }

    /// The first escaping region, in pixels `[x0, y0, x1, y1)`: the screen's upper right.
    pub fn region(&self) -> [u32; 4] {
        let (w, h) = (self.width, self.height);
        [w * 5 / 8, h * 2 / 8, w * 5 / 8 + w / 12, h * 2 / 8 + h / 10]
    }

    /// The second, smaller region, lower left.
    pub fn second_region(&self) -> [u32; 4] {
        let (w, h) = (self.width, self.height);
        [w / 8, h * 6 / 8, w / 8 + w / 40, h * 6 / 8 + h / 30]
    }

    /// The captured rectangle: 2×1 pixels near the first region's centre.
    pub fn captured_rect(&self) -> [u32; 4] {
        let [x0, y0, x1, y1] = self.region();
        let (x, y) = ((x0 + x1) / 2, (y0 + y1) / 2);
        [x, y, x + 2, y + 1]
    }

    /// The section.
    pub fn section(&self) -> InstrumentedReport {
        let grid = Grid {
            width: self.width,
            height: self.height,
        };
        let lanes = u64::from(self.width) * u64::from(self.height);
        let area = |r: [u32; 4]| u64::from(r[2] - r[0]) * u64::from(r[3] - r[1]);
        // Every lane of a region escapes at its first instance read and at that instance's node
        // reads (four); the second region only at the instance read.
        let first = area(self.region());
        let second = area(self.second_region());
        let mut sites: Vec<SiteReport> = SITES
            .iter()
            .enumerate()
            .map(|(i, &(off, kind, op, size, per_lane, via))| {
                let accesses = lanes * per_lane;
                let lookups = match via {
                    Via::Guest => accesses + accesses / 97,
                    _ => 0,
                };
                let escapes = match i as u32 {
                    ESCAPING_SITE => first + second,
                    NODE_SITE => first * 4,
                    _ => 0,
                };
                SiteReport {
                    site: i as u32,
                    pc: PROGRAM + off,
                    kind,
                    op,
                    size_bytes: size,
                    accesses,
                    escapes,
                    lookups,
                    probes_sum: lookups + lookups / (11 + i as u64),
                    probes_max: if lookups == 0 {
                        0
                    } else {
                        2 + (i as u32 * 7) % 5
                    },
                }
            })
            .collect();
        // The instance reads have the longest lookups.
        if let Some(s) = sites.get_mut(ESCAPING_SITE as usize) {
            s.probes_max = 9;
        }
        let mut counters = InstrumentCounters::default();
        for (s, &(.., via)) in sites.iter().zip(SITES.iter()) {
            match via {
                Via::Guest => counters.guest += s.accesses,
                Via::Bound(_) => counters.bound += s.accesses,
                Via::Lds => counters.lds += s.accesses,
                Via::Scratch => counters.scratch += s.accesses,
            }
            counters.lookups += s.lookups;
            counters.escapes += s.escapes;
        }
        counters.misses = counters.escapes;
        counters.hits = counters.lookups - counters.misses;
        counters.stores_marked = lanes;
        let extra: u64 = sites.iter().map(|s| s.probes_sum - s.lookups).sum();
        let mut probe_histogram = vec![0u64; 16];
        // Lookups of 2, 3, … probes falling off by about 4× a probe, with the extra probes summed.
        let mut left = extra;
        for (b, slot) in probe_histogram.iter_mut().enumerate().skip(1) {
            let n = if b == 15 {
                left / 15
            } else {
                left * 3 / 4 / b as u64
            };
            *slot = n;
            left = left.saturating_sub(n * b as u64);
        }
        let rest: u64 = probe_histogram.iter().skip(1).sum();
        probe_histogram[0] = counters.lookups - rest;

        let mut rng = SplitMix(0x5eed_1080);
        let mut escapes = Vec::new();
        let total = counters.escapes;
        let logged = total.min(u64::from(self.escape_capacity));
        for k in 0..logged {
            // Mostly the first region; one in eight in the second.
            let r = if k % 8 == 7 {
                self.second_region()
            } else {
                self.region()
            };
            let px = r[0] + (rng.next() % u64::from((r[2] - r[0]).max(1))) as u32;
            let py = r[1] + (rng.next() % u64::from((r[3] - r[1]).max(1))) as u32;
            let (wg, local) = grid.lane_of([px, py]);
            let node = k % 8 != 7 && k.is_multiple_of(5);
            let site = if node { NODE_SITE } else { ESCAPING_SITE };
            let instance = rng.next() % 4096;
            let address = if node {
                0x6_2000_0000 + instance * 0x40
            } else {
                0x7f_0000_0000 + instance * 0x40
            };
            let left_out = k.is_multiple_of(13);
            escapes.push(LoggedEscape {
                workgroup: wg,
                wave: local / 32,
                lane: local % 32,
                pixel: [px, py],
                site,
                pc: PROGRAM + SITES[site as usize].0,
                address,
                size_bytes: 64,
                op: Op::Load,
                escaped_bytes: if k.is_multiple_of(11) {
                    0xffff_0000
                } else {
                    u32::MAX
                },
                class: if left_out {
                    EscapeClass::LeftOut
                } else {
                    EscapeClass::NoReservation
                },
                reason: left_out.then_some(LeftOutReason::NotReadWrite),
                nearest_below: Some(ByteRange::new(0x6_1000_0000, 0x6_1010_0000)),
                nearest_above: (!node).then(|| ByteRange::new(0x80_0000_0000, 0x80_0040_0000)),
            });
        }

        // The heat map: every escape placed by the logged ones' spread (each stands for
        // `total / logged`), and probes where the hierarchy is deep, in the first region.
        let cells = grid.heat_cells();
        let n_cells = cells[0] as usize * cells[1] as usize;
        let mut heat = HeatMap {
            scale: grid.heat_scale(),
            cells,
            escapes: vec![0; n_cells],
            extra_probes: vec![0; n_cells],
        };
        let per = total.checked_div(logged).unwrap_or(0);
        for e in &escapes {
            let (wg, _) = grid.lane_of(e.pixel);
            if let Some(cell) = grid.heat_cell_of(wg) {
                heat.escapes[cell] += per;
            }
        }
        if let Some(first) = heat.escapes.iter().position(|&n| n > 0) {
            heat.escapes[first] += total - per * logged;
        }
        let r = self.region();
        for wg in 0..grid.workgroups() as u32 {
            let [px, py] = grid.pixel(wg, 0);
            if px >= r[0]
                && px < r[2]
                && py >= r[1]
                && py < r[3]
                && let Some(cell) = grid.heat_cell_of(wg)
            {
                heat.extra_probes[cell] += 64;
            }
        }
        let captured_all = self.captured_lanes(&grid);
        let keep = (self.capture_capacity as usize).min(captured_all.len());
        let captured_not_logged = (captured_all.len() - keep) as u64;
        let mut captured = captured_all;
        captured.truncate(keep);
        InstrumentedReport {
            grid: [self.width, self.height],
            lanes,
            workgroups: grid.workgroups(),
            counters,
            probe_histogram,
            sites,
            escapes,
            escapes_not_logged: total - logged,
            captured,
            captured_not_logged,
            control: self.control,
            heat: Some(heat),
        }
    }

    /// Every access of the captured lanes, in each lane's order.
    fn captured_lanes(&self, grid: &Grid) -> Vec<CapturedAccess> {
        let [x0, y0, x1, y1] = self.captured_rect();
        let mut v = Vec::new();
        for y in y0..y1 {
            for x in x0..x1 {
                let (wg, local) = grid.lane_of([x, y]);
                let lane_no = u64::from(y) * u64::from(self.width) + u64::from(x);
                let mut push = |site: usize, addr: u64, escaped: bool, n: u32| {
                    let (_, _, op, size, _, via) = SITES[site];
                    let route = match via {
                        Via::Guest => Route::Device { address: addr },
                        Via::Bound(s) => Route::Bound {
                            holder: 0,
                            offset: u64::from(s) * 0x1000 + addr % 0x1000,
                        },
                        Via::Lds => Route::Lds {
                            offset: addr % 0x100,
                        },
                        Via::Scratch => Route::Scratch {
                            offset: addr % 0x40,
                        },
                    };
                    let words = size.div_ceil(4).min(4);
                    let values = (0..words)
                        .map(|w| {
                            if escaped {
                                0
                            } else {
                                (lane_no as u32).wrapping_mul(0x9e37_79b9) ^ (n << 8) ^ w
                            }
                        })
                        .collect();
                    v.push(CapturedAccess {
                        workgroup: wg,
                        wave: local / 32,
                        lane: local % 32,
                        pixel: [x, y],
                        site: site as u32,
                        pc: PROGRAM + SITES[site].0,
                        op,
                        route,
                        slot: match via {
                            Via::Bound(s) => Some((s, addr % 0x1000)),
                            _ => None,
                        },
                        size_bytes: size,
                        values,
                        escaped_bytes: if escaped { u32::MAX } else { 0 },
                    });
                };
                push(0, 0x6_0000_0000, false, 0);
                push(1, 0x10, false, 1);
                push(2, lane_no * 16, false, 2);
                for inst in 0..6u32 {
                    let escaped = inst == 0;
                    let base = if escaped {
                        0x7f_0000_0000
                    } else {
                        0x6_0000_0100
                    };
                    push(3, base + u64::from(inst) * 0x40, escaped, 3);
                    push(4, u64::from(inst) * 4, false, 4);
                    for node in 0..4u64 {
                        push(5, 0x6_1000_0000 + node * 0x40, escaped, 5);
                    }
                    push(6, 8 + u64::from(inst) * 8, false, 6);
                    push(7, 0x10, false, 7);
                    push(8, 0x10, false, 8);
                    push(9, u64::from(inst) * 4, false, 9);
                }
                push(10, 0x6_2000_0000 + lane_no * 8, false, 10);
            }
        }
        v
    }

    /// A device-addressed dispatch report holding [`Fixture::section`] and nothing else.
    pub fn report(&self) -> DispatchReport {
        let section = self.section();
        DispatchReport {
            schema: dispatchscope_core::report::SCHEMA.to_owned(),
            index: 0,
            program: PROGRAM,
            label: format!("ray traversal {}×{}", self.width, self.height),
            kind: DispatchKind::Compute,
            mode: Mode::DeviceAddressed,
            backend: "vulkan".to_owned(),
            device: Default::default(),
            reasons: Vec::new(),
            mode_reason: "by device address (D964): the translated module's helper".to_owned(),
            slots: Vec::new(),
            sets: Vec::new(),
            refusals: Vec::new(),
            events_before: Vec::new(),
            before: BeforeDispatch::default(),
            mappings: None,
            table: None,
            accesses: Vec::new(),
            escapes: Vec::new(),
            marks: Vec::new(),
            hand_off: HandOff::default(),
            write_back: Vec::new(),
            hazards: Vec::new(),
            counts: Counts {
                escapes: section.counters.escapes as usize,
                ..Counts::default()
            },
            instrumented: Some(section),
            host_path: Default::default(),
        }
    }
}

/// SplitMix64: a tiny fixed-seed generator.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}
