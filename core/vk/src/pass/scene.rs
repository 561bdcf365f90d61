//! The guest memory the traversal pass walks: a two-level hierarchy (top-level nodes over
//! instances, one bottom level per instance) laid out in reservations with gaps between them, a
//! reservation the guest left unreadable, the output holder and the per-workgroup results; and the
//! pass computed on the host, word for word as the program computes it, for the image check.
//! Nothing here calls Vulkan.

use dispatchscope_core::addr::ByteRange;
use dispatchscope_core::instrument::Grid;
use dispatchscope_formats::generate::Rng;

use crate::spirv::traversal::{
    MAX_STEPS, STACK_ENTRIES, SUMMARY_OVERLAP_BYTES, SUMMARY_WORDS, Workload, intersect, site,
};

/// Where the scene starts.
pub const GUEST_BASE: u64 = 0x10_0000_0000;
/// Bytes per reservation of the hierarchy (and the alignment of everything: chunks of 64 KiB).
pub const REGION_BYTES: u64 = 0x1_0000;
/// The top level's nodes (instances at [`INSTANCES_AT`] in the same reservation).
pub const TOP_AT: u64 = GUEST_BASE;
/// The instances.
pub const INSTANCES_AT: u64 = GUEST_BASE + 0x8000;
/// The canary of the positive control: the gap after the top level, no reservation.
pub const CANARY_AT: u64 = GUEST_BASE + 0x1_0000;
/// The first bottom-level reservation; [`BOTTOM_REGIONS`] of them, a gap after each.
pub const BOTTOM_AT: u64 = GUEST_BASE + 0x2_0000;
/// Bottom-level reservations.
pub const BOTTOM_REGIONS: u64 = 4;
/// A reservation the guest left unreadable (M1 does not map it): an escape's class `not-readable`.
pub const UNREADABLE_AT: u64 = GUEST_BASE + 0xa_0000;
/// A gap no reservation holds: an escape's class `no-reservation`.
pub const HOLE_AT: u64 = GUEST_BASE + 0xb_0000;
/// The per-workgroup results, written by device address (C1).
pub const TILES_AT: u64 = GUEST_BASE + 0xc_0000;
/// The output holder: slot 0, and slot 1 over its end (D953).
pub const OUT_AT: u64 = GUEST_BASE + 0x1000_0000;

/// One lane's pass on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    /// `primitive | instance << 16` of the nearest leaf, or `u32::MAX`.
    pub nearest: u32,
    /// The xor of every instance word read.
    pub checksum: u32,
    /// Accesses per site ([`site`]).
    pub accesses: [u32; site::COUNT as usize],
    /// Escapes per site.
    pub escapes: [u32; site::COUNT as usize],
}

/// What the scene holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SceneConfig {
    /// Instances (a power of two, 4 to 128).
    pub instances: u32,
    /// Primitives per bottom level (a power of two, 2 to 32).
    pub primitives: u32,
    /// Instances whose bottom level lies in unmapped memory (each escapes when a ray enters it).
    pub escaping: u32,
    /// The seed.
    pub seed: u64,
}

impl Default for SceneConfig {
    fn default() -> Self {
        Self {
            instances: 64,
            primitives: 32,
            escaping: 2,
            seed: 14,
        }
    }
}

/// A node: `x0, y0, x1, y1, z, a, b, flags`.
pub type Node = [u32; 8];

/// One reservation and its contents.
#[derive(Clone, Debug)]
pub struct Region {
    /// Its guest bytes.
    pub range: ByteRange,
    /// Whether the guest may read it (M1 maps only readable runs).
    pub readable: bool,
    /// Its contents from its first byte (the rest is zero).
    pub bytes: Vec<u8>,
}

/// The scene of one grid.
#[derive(Clone, Debug)]
pub struct Scene {
    /// What it was built from.
    pub cfg: SceneConfig,
    /// The grid.
    pub grid: Grid,
    /// Every reservation.
    pub regions: Vec<Region>,
    top: Vec<Node>,
    instances: Vec<[u32; 16]>,
    /// Each instance's bottom level, `None` where its base is unmapped.
    bottoms: Vec<Option<Vec<Node>>>,
}

fn union(a: &Node, b: &Node) -> Node {
    [
        a[0].min(b[0]),
        a[1].min(b[1]),
        a[2].max(b[2]),
        a[3].max(b[3]),
        a[4].min(b[4]),
        0,
        0,
        0,
    ]
}

/// A balanced hierarchy over `leaves` (in order): node 0 is the root; a leaf keeps its `a` word.
fn build_tree(leaves: &[Node]) -> Vec<Node> {
    fn go(leaves: &[Node], out: &mut Vec<Node>) -> u32 {
        let at = out.len();
        out.push([0; 8]);
        if let [one] = leaves {
            out[at] = *one;
            return at as u32;
        }
        let (l, r) = leaves.split_at(leaves.len() / 2);
        let li = go(l, out);
        let ri = go(r, out);
        let mut n = union(&out[li as usize], &out[ri as usize]);
        n[5] = li;
        n[6] = ri;
        out[at] = n;
        at as u32
    }
    let mut out = Vec::with_capacity(2 * leaves.len());
    if !leaves.is_empty() {
        go(leaves, &mut out);
    }
    out
}

fn node_bytes(nodes: &[Node]) -> Vec<u8> {
    nodes
        .iter()
        .flatten()
        .flat_map(|w| w.to_le_bytes())
        .collect()
}

impl Scene {
    /// The scene of `cfg` for `grid`; `None` when `cfg` is outside its bounds.
    pub fn new(cfg: SceneConfig, grid: Grid) -> Option<Self> {
        let ok = cfg.instances.is_power_of_two()
            && (4..=128).contains(&cfg.instances)
            && cfg.primitives.is_power_of_two()
            && (2..=32).contains(&cfg.primitives)
            && cfg.escaping < cfg.instances;
        if !ok {
            return None;
        }
        let mut rng = Rng::new(cfg.seed);
        let side = (f64::from(cfg.instances).sqrt() as u32).max(1);
        let rows = cfg.instances.div_ceil(side);
        let (cw, ch) = (65536 / side, 65536 / rows);
        let mut inst_leaves = Vec::new();
        let mut instances = Vec::new();
        let mut bottoms = Vec::new();
        let mut bottom_bytes = vec![Vec::new(); BOTTOM_REGIONS as usize];
        // Which instances escape: spread over the screen.
        let step = (cfg.instances / cfg.escaping.max(1)).max(1);
        for i in 0..cfg.instances {
            let (cx, cy) = (i % side, i / side);
            // The instance's box: its cell, grown by a quarter on each side (instances overlap).
            let x0 = (cx * cw).saturating_sub(cw / 4);
            let y0 = (cy * ch).saturating_sub(ch / 4);
            let x1 = ((cx + 1) * cw + cw / 4).min(65536);
            let y1 = ((cy + 1) * ch + ch / 4).min(65536);
            let mut prims = Vec::new();
            for p in 0..cfg.primitives {
                let w = (x1 - x0) / 2;
                let h = (y1 - y0) / 2;
                let px = x0 + rng.below(u64::from(w)) as u32;
                let py = y0 + rng.below(u64::from(h)) as u32;
                let pw = w / 4 + rng.below(u64::from(w)) as u32;
                let ph = h / 4 + rng.below(u64::from(h)) as u32;
                // Distinct depths: no two leaves tie, so the nearest is one leaf in any order.
                let z = 1 + (rng.below(1 << 20) as u32) * 256 + (i * cfg.primitives + p) % 256;
                prims.push([px, py, (px + pw).min(x1), (py + ph).min(y1), z, p, 0, 1]);
            }
            prims.sort_by_key(|n| (n[0], n[1]));
            let tree = build_tree(&prims);
            let escapes = cfg.escaping > 0 && i % step == step - 1 && i / step < cfg.escaping;
            let region = u64::from(i) % BOTTOM_REGIONS;
            let base = if escapes {
                if (i / step).is_multiple_of(2) {
                    UNREADABLE_AT + 0x100 * u64::from(i)
                } else {
                    HOLE_AT + 0x100 * u64::from(i)
                }
            } else {
                let bytes = &mut bottom_bytes[region as usize];
                let at = BOTTOM_AT + region * 2 * REGION_BYTES + bytes.len() as u64;
                bytes.extend(node_bytes(&tree));
                at
            };
            let root_box = tree.first().copied().unwrap_or([0; 8]);
            inst_leaves.push([x0, y0, x1, y1, root_box[4].min(1), i, 0, 1]);
            let mut w = [0u32; 16];
            w[0] = base as u32;
            w[1] = (base >> 32) as u32;
            w[2] = 0;
            w[3] = i;
            for (k, x) in w.iter_mut().enumerate().skip(4) {
                *x = (rng.next_u64() as u32) ^ k as u32;
            }
            instances.push(w);
            bottoms.push((!escapes).then_some(tree));
        }
        let top = build_tree(&inst_leaves);
        let mut top_region = node_bytes(&top);
        top_region.resize((INSTANCES_AT - TOP_AT) as usize, 0);
        top_region.extend(instances.iter().flatten().flat_map(|w| w.to_le_bytes()));
        let tiles_bytes = (grid.workgroups() * 4).div_ceil(REGION_BYTES) * REGION_BYTES;
        let out_bytes = Self::holder_bytes_of(grid).div_ceil(REGION_BYTES) * REGION_BYTES;
        let mut regions = vec![Region {
            range: ByteRange::new(TOP_AT, TOP_AT + REGION_BYTES),
            readable: true,
            bytes: top_region,
        }];
        for (k, bytes) in bottom_bytes.into_iter().enumerate() {
            let start = BOTTOM_AT + k as u64 * 2 * REGION_BYTES;
            regions.push(Region {
                range: ByteRange::new(start, start + REGION_BYTES),
                readable: true,
                bytes,
            });
        }
        regions.push(Region {
            range: ByteRange::new(UNREADABLE_AT, UNREADABLE_AT + REGION_BYTES),
            readable: false,
            bytes: Vec::new(),
        });
        regions.push(Region {
            range: ByteRange::new(TILES_AT, TILES_AT + tiles_bytes),
            readable: true,
            bytes: Vec::new(),
        });
        regions.push(Region {
            range: ByteRange::new(OUT_AT, OUT_AT + out_bytes),
            readable: true,
            bytes: Vec::new(),
        });
        Some(Self {
            cfg,
            grid,
            regions,
            top,
            instances,
            bottoms,
        })
    }

    /// Slot 0's bytes: two words per pixel.
    pub fn slot0_bytes(&self) -> u64 {
        8 * u64::from(self.grid.width) * u64::from(self.grid.height)
    }

    /// Slot 0 `[OUT_AT, +slot0)` and slot 1, which starts [`SUMMARY_OVERLAP_BYTES`] before slot 0's end.
    pub fn slots(&self) -> [ByteRange; 2] {
        let end0 = OUT_AT + self.slot0_bytes();
        let start1 = end0 - SUMMARY_OVERLAP_BYTES;
        [
            ByteRange::new(OUT_AT, end0),
            ByteRange::new(start1, start1 + 4 * u64::from(SUMMARY_WORDS)),
        ]
    }

    fn holder_bytes_of(grid: Grid) -> u64 {
        8 * u64::from(grid.width) * u64::from(grid.height) - SUMMARY_OVERLAP_BYTES
            + 4 * u64::from(SUMMARY_WORDS)
    }

    /// The holder's bytes (O5: to the end of slot 1).
    pub fn holder_bytes(&self) -> u64 {
        Self::holder_bytes_of(self.grid)
    }

    /// The guest span the raw variant imports whole: from the top level to the end of the
    /// per-workgroup results (holes and the unreadable reservation included).
    pub fn raw_span(&self) -> ByteRange {
        let end = self
            .regions
            .iter()
            .filter(|r| r.range.start < OUT_AT)
            .map(|r| r.range.end)
            .max()
            .unwrap_or(TILES_AT);
        ByteRange::new(GUEST_BASE, end)
    }

    /// The pass on the host for the pixel `(x, y)`, exactly as the program runs it: the result, the
    /// checksum, and how many accesses and escapes each site made.
    pub fn trace(&self, x: u32, y: u32) -> Trace {
        self.trace_of(x, y, Workload::Loads)
    }

    /// [`Scene::trace`] of the program of `workload`: the translated one folds each node's
    /// intersection ([`intersect::node`]) into the checksum; the walk, and every count, is the
    /// same.
    pub fn trace_of(&self, x: u32, y: u32, workload: Workload) -> Trace {
        let nx = ((u64::from(x) * 65536 + 32768) / u64::from(self.grid.width)) as u32;
        let ny = ((u64::from(y) * 65536 + 32768) / u64::from(self.grid.height)) as u32;
        let inside = |n: &Node, best_z: u32| {
            nx >= n[0] && nx < n[2] && ny >= n[1] && ny < n[3] && n[4] < best_z
        };
        let mut t = Trace {
            nearest: u32::MAX,
            checksum: 0,
            accesses: [0; site::COUNT as usize],
            escapes: [0; site::COUNT as usize],
        };
        let mut count = |s: u32, n: u32| {
            if let Some(c) = t.accesses.get_mut(s as usize) {
                *c += n;
            }
        };
        let mut best_z = u32::MAX;
        let mut stack = vec![0u32];
        count(site::TOP_PUSH, 1);
        let mut steps = 0;
        let mut escapes = Vec::new();
        while let Some(&idx) = stack.last() {
            if steps >= MAX_STEPS {
                break;
            }
            steps += 1;
            stack.pop();
            count(site::TOP_POP, 1);
            count(site::TOP_NODE0, 1);
            count(site::TOP_NODE1, 1);
            let n = self.top.get(idx as usize).copied().unwrap_or([0; 8]);
            if workload == Workload::Translated {
                t.checksum ^= intersect::node(&n, nx, ny);
            }
            if !inside(&n, best_z) {
                continue;
            }
            if n[7] == 1 {
                let inst = n[5];
                for k in 0..4 {
                    count(site::INSTANCE0 + k, 1);
                }
                let w = self
                    .instances
                    .get(inst as usize)
                    .copied()
                    .unwrap_or([0; 16]);
                t.checksum = w.iter().fold(t.checksum, |s, &x| s ^ x);
                let bottom = self.bottoms.get(inst as usize).and_then(Option::as_ref);
                let mut bstack = vec![w[2]];
                count(site::BOTTOM_PUSH, 1);
                let mut bsteps = 0;
                while let Some(&j) = bstack.last() {
                    if bsteps >= MAX_STEPS {
                        break;
                    }
                    bsteps += 1;
                    bstack.pop();
                    count(site::BOTTOM_POP, 1);
                    count(site::BOTTOM_NODE0, 1);
                    count(site::BOTTOM_NODE1, 1);
                    if bottom.is_none() {
                        escapes.push(site::BOTTOM_NODE0);
                        escapes.push(site::BOTTOM_NODE1);
                    }
                    let b = bottom
                        .and_then(|t| t.get(j as usize).copied())
                        .unwrap_or([0; 8]);
                    if workload == Workload::Translated {
                        t.checksum ^= intersect::node(&b, nx, ny);
                    }
                    if !inside(&b, best_z) {
                        continue;
                    }
                    if b[7] == 1 {
                        best_z = b[4];
                        t.nearest = b[5] | inst << 16;
                    } else if (bstack.len() as u32) < STACK_ENTRIES - 1 {
                        bstack.push(b[5]);
                        bstack.push(b[6]);
                        count(site::BOTTOM_PUSH, 2);
                    }
                }
            } else if (stack.len() as u32) < STACK_ENTRIES - 1 {
                stack.push(n[5]);
                stack.push(n[6]);
                count(site::TOP_PUSH, 2);
            }
        }
        count(site::OUT, 1);
        let (wg, local) = self.grid.lane_of([x, y]);
        if local == 0 {
            count(site::TILE, 1);
            if wg < 16 {
                count(site::SUMMARY, 1);
            }
        }
        for s in escapes {
            if let Some(e) = t.escapes.get_mut(s as usize) {
                *e += 1;
            }
        }
        t
    }

    /// The host's picture of the whole pass: `(nearest, checksum)` per pixel, row by row.
    pub fn expected_image(&self) -> Vec<(u32, u32)> {
        self.expected_image_of(Workload::Loads)
    }

    /// [`Scene::expected_image`] of the program of `workload`.
    pub fn expected_image_of(&self, workload: Workload) -> Vec<(u32, u32)> {
        let (w, h) = (self.grid.width, self.grid.height);
        (0..h)
            .flat_map(|y| (0..w).map(move |x| (x, y)))
            .map(|(x, y)| {
                let t = self.trace_of(x, y, workload);
                (t.nearest, t.checksum)
            })
            .collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "in a test, an unwrap is an assertion")]
mod tests {
    use super::*;

    #[test]
    fn the_scene_hits_most_pixels_and_some_escape() {
        let grid = Grid::new(64, 64).unwrap();
        let s = Scene::new(SceneConfig::default(), grid).unwrap();
        let img = s.expected_image();
        let hit = img.iter().filter(|(b, _)| *b != u32::MAX).count();
        assert!(hit > img.len() / 2, "{hit} of {}", img.len());
        let escaping = (0..64)
            .flat_map(|y| (0..64).map(move |x| (x, y)))
            .filter(|&(x, y)| s.trace(x, y).escapes.iter().any(|&e| e > 0))
            .count();
        assert!(escaping > 0 && escaping < img.len() / 4, "{escaping}");
        assert!(
            Scene::new(
                SceneConfig {
                    instances: 3,
                    ..SceneConfig::default()
                },
                grid
            )
            .is_none()
        );
        let [a, b] = s.slots();
        assert!(a.end > b.start && b.start > a.start);
        assert_eq!(b.end - a.start, s.holder_bytes());
    }
}
