//! A full-screen ray-traversal pass standing in for a translated module (issue 14): one lane per
//! pixel, a two-level hierarchy walked the way GTA V's traversal programs walk theirs, every guest
//! access through the helper library's interface ([`super::library`]), so that one program runs
//! over any [`Variant`] of it.
//!
//! Per lane: the top level's nodes (`image_bvh_intersect_ray`, two 16-byte loads a node) from a
//! stack in LDS; at a top-level leaf the instance (`s_load_dwordx16` from an address the lane
//! computes: four 16-byte loads), whose first words name the bottom level's base; the bottom
//! level's nodes from a stack in scratch. Both stacks are reached through flat addresses that P1
//! routes (`0x80000000…` LDS, `0x70000000…` scratch). An instance whose base points at unmapped
//! memory escapes (T4) and its nodes read zero, which no pixel lies inside. The nearest leaf and a
//! checksum of every instance word read are written through two bound slots that overlap (D953:
//! one holder, the second slot at its offset; each store sets its write-mask words, O9), and lane 0
//! of each workgroup stores its result by device address (C1 marks). Every lane calls
//! `dispatchscope_lane` first and `dispatchscope_flush` last, both in uniform control flow, and the
//! program exports the helper's workgroup counters when it imports the helper (the library's
//! interface, [`super::library`]).
//!
//! With [`Shape::derived_counts`] (issue 42) and the instrumented helper, the program counts its
//! own sites' accesses instead of the helper counting each: the top level's pops and node loads
//! are its loop's steps and its pushes the steps and what is left on its stack; each instance
//! entered is four loads; each bottom level likewise, summed in two counters the lane keeps; one
//! result a lane, lane 0's tile and summary. It reports them once, before the flush, with
//! `dispatchscope_count`, and passes its sites flagged [`SITE_DERIVED`]. A stack access that P1
//! routes elsewhere than the program counted it is counted by the helper and taken back from the
//! program's count. Nothing here calls Vulkan.
//!
//! # Layouts (little-endian u32 words)
//! - Node, [`NODE_BYTES`]: `x0, y0, x1, y1` (a half-open box in 1/65536ths of the screen), `z`
//!   (depth), `a`, `b` (children, or the instance / primitive of a leaf), `flags` (1: leaf).
//! - Instance, [`INSTANCE_BYTES`]: bottom level's base (2 words), its root node, the instance's id,
//!   12 more words (read, and folded into the checksum, as a transform would be).
//! - Output, slot 0: per pixel `(nearest, checksum)`, nearest = `primitive | instance << 16`, or
//!   `u32::MAX` for none. Slot 1: [`SUMMARY_WORDS`] words starting [`SUMMARY_OVERLAP_BYTES`] before
//!   slot 0's end; workgroups 0–15 write the depth of their lane 0 at its word `64 + workgroup`,
//!   past slot 0's end.
//! - Push words: 0–1 top-level nodes, 2–3 instances, 6–7 the per-workgroup results (guest
//!   addresses), 4 width, 5 height; 18–31 the helper's ([`super::library`]).

use rspirv::dr::Operand;
use rspirv::spirv::{self, Capability, Decoration, LinkageType, Op, StorageClass, Word};

pub mod intersect;

use super::R;
use super::asm::Asm;
use super::library::{
    Helpers, SITE_DERIVED, Shape, Variant, declare_helpers, emit_helpers_shaped, extract,
};
use dispatchscope_core::input::{AccessKind, Op as AccessOp};
use dispatchscope_core::instrument::{SiteInfo, route};

/// Bytes per node.
pub const NODE_BYTES: u64 = 32;
/// Bytes per instance.
pub const INSTANCE_BYTES: u64 = 64;
/// Stack entries per level and lane.
pub const STACK_ENTRIES: u32 = 16;
/// Node visits per level and lane at most (a bad hierarchy still ends).
pub const MAX_STEPS: u32 = 256;
/// Lanes per workgroup: 8 × 8 pixels.
pub const LOCAL_SIZE: u32 = 64;
/// Slot 1's words.
pub const SUMMARY_WORDS: u32 = 128;
/// Bytes of slot 1 that lie inside slot 0 (its first 64 words): a multiple of 256, so that slot 1's
/// offset in the holder meets any device's `minStorageBufferOffsetAlignment` (O7).
pub const SUMMARY_OVERLAP_BYTES: u64 = 256;

/// The program's push words.
pub mod push {
    /// The top level's nodes (2 words).
    pub const TLAS: u32 = 0;
    /// The instances (2 words).
    pub const INSTANCES: u32 = 2;
    /// Width in pixels.
    pub const WIDTH: u32 = 4;
    /// Height in pixels.
    pub const HEIGHT: u32 = 5;
    /// The per-workgroup results by device address (2 words).
    pub const TILES: u32 = 6;
}

/// The access sites, in order: the translator's numbering.
pub mod site {
    /// LDS stack push (flat store).
    pub const TOP_PUSH: u32 = 0;
    /// LDS stack pop (flat load).
    pub const TOP_POP: u32 = 1;
    /// Top-level node, first half.
    pub const TOP_NODE0: u32 = 2;
    /// Top-level node, second half.
    pub const TOP_NODE1: u32 = 3;
    /// The instance's four 16-byte loads.
    pub const INSTANCE0: u32 = 4;
    /// Scratch stack push (flat store).
    pub const BOTTOM_PUSH: u32 = 8;
    /// Scratch stack pop (flat load).
    pub const BOTTOM_POP: u32 = 9;
    /// Bottom-level node, first half.
    pub const BOTTOM_NODE0: u32 = 10;
    /// Bottom-level node, second half.
    pub const BOTTOM_NODE1: u32 = 11;
    /// The pixel's result, slot 0 (bound).
    pub const OUT: u32 = 12;
    /// Lane 0's result by device address (C1).
    pub const TILE: u32 = 13;
    /// Lane 0's depth, slot 1 (bound).
    pub const SUMMARY: u32 = 14;
    /// Sites in all.
    pub const COUNT: u32 = 15;
}

/// The program counter the translator gives site `s` (a stand-in guest program at 0x74005b854a00,
/// one of the records' traversal programs, 8 bytes an instruction).
pub fn site_pc(s: u32) -> u64 {
    0x7400_5b85_4a00 + 8 * u64::from(s)
}

/// What the translator says of each site ([`site`]).
pub fn sites() -> Vec<SiteInfo> {
    use AccessKind::*;
    use AccessOp::*;
    let kinds = [
        (Flat, Store, 4),
        (Flat, Load, 4),
        (RayIntersection, Load, 16),
        (RayIntersection, Load, 16),
        (Scalar, Load, 16),
        (Scalar, Load, 16),
        (Scalar, Load, 16),
        (Scalar, Load, 16),
        (Flat, Store, 4),
        (Flat, Load, 4),
        (RayIntersection, Load, 16),
        (RayIntersection, Load, 16),
        (UntypedBuffer, Store, 8),
        (Global, Store, 4),
        (UntypedBuffer, Store, 4),
    ];
    kinds
        .iter()
        .enumerate()
        .map(|(i, &(kind, op, size_bytes))| SiteInfo {
            pc: site_pc(i as u32),
            kind,
            op,
            size_bytes,
        })
        .collect()
}

/// How the program gets the helper.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Linking {
    /// Emitted into the program's own module (what a Rust recompiler on this crate does).
    Inline(Variant),
    /// Imported by name, to be linked with [`super::library::helper_library`] by
    /// [`super::library::link`].
    Import,
}

/// What the program does at each node besides its loads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Workload {
    /// The integer box test alone: the pass is its loads (issue 14's program).
    #[default]
    Loads,
    /// Also the arithmetic a translator emits for `image_bvh_intersect_ray` at every node
    /// ([`intersect`]: four slab tests and a sort for a box, a triangle test for a leaf), folded
    /// into the checksum: what a translated traversal pass spends most of its time on.
    Translated,
}

impl Workload {
    /// Both, in the order a bench reports them.
    pub const ALL: [Workload; 2] = [Workload::Loads, Workload::Translated];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Loads => "loads",
            Workload::Translated => "translated",
        }
    }
}

/// The traversal program: with the helper inline (a module for Vulkan 1.2), or importing it (a
/// module that still links); not validated here (`every_module_test.rs` validates every build).
pub fn traversal_module(linking: Linking) -> R<Vec<u32>> {
    traversal_module_of(linking, Workload::Loads, Shape::SHIPPED)
}

/// [`traversal_module`] of `workload`, the helper inline shaped as `shape` says (the linked form
/// takes the library's own shape).
pub fn traversal_module_of(linking: Linking, workload: Workload, shape: Shape) -> R<Vec<u32>> {
    let mut a = Asm::new("traversal");
    a.b.capability(Capability::StorageBufferArrayDynamicIndexing);
    let h = match linking {
        Linking::Inline(v) => emit_helpers_shaped(&mut a, v, shape)?,
        Linking::Import => {
            a.linkable(LinkageType::Export);
            declare_helpers(&mut a)?
        }
    };
    // The program counts its own sites' accesses where the helper counts (issue 42).
    let derive = shape.derived_counts
        && match linking {
            Linking::Inline(v) => v == Variant::Instrumented,
            Linking::Import => true,
        };
    emit_main(&mut a, &h, workload, derive)?;
    Ok(a.finish())
}

/// The module's globals the main function reads.
struct Globals {
    wg_id: Word,
    local_index: Word,
    lds: Word,
    holders: Word,
    masks: Word,
    p_in_u32: Word,
    p_wg_u32: Word,
    p_sb_u32: Word,
    p_fn_u32: Word,
    scratch_ty: Word,
}

fn globals(a: &mut Asm) -> Globals {
    let t = a.t;
    let v3 = a.b.type_vector(t.u32, 3);
    let p_in_v3 = a.b.type_pointer(None, StorageClass::Input, v3);
    let p_in_u32 = a.b.type_pointer(None, StorageClass::Input, t.u32);
    let wg_id = a.b.variable(p_in_v3, None, StorageClass::Input, None);
    a.b.decorate(
        wg_id,
        Decoration::BuiltIn,
        [Operand::BuiltIn(spirv::BuiltIn::WorkgroupId)],
    );
    let local_index = a.b.variable(p_in_u32, None, StorageClass::Input, None);
    a.b.decorate(
        local_index,
        Decoration::BuiltIn,
        [Operand::BuiltIn(spirv::BuiltIn::LocalInvocationIndex)],
    );
    // LDS: every lane's top-level stack.
    let n = a.c32(LOCAL_SIZE * STACK_ENTRIES);
    let lds_ty = a.b.type_array(t.u32, n);
    let p_lds = a.b.type_pointer(None, StorageClass::Workgroup, lds_ty);
    let p_wg_u32 = a.b.type_pointer(None, StorageClass::Workgroup, t.u32);
    let lds = a.b.variable(p_lds, None, StorageClass::Workgroup, None);
    a.b.name(lds, "lds");
    // Bindings 0 and 1: the two slots (holder and member) and their write masks.
    let rt = a.b.type_runtime_array(t.u32);
    a.b.decorate(rt, Decoration::ArrayStride, [Operand::LiteralBit32(4)]);
    let blk = a.b.type_struct([rt]);
    a.b.name(blk, "Words");
    a.b.decorate(blk, Decoration::Block, []);
    a.b.member_decorate(blk, 0, Decoration::Offset, [Operand::LiteralBit32(0)]);
    let two = a.c32(2);
    let arr = a.b.type_array(blk, two);
    let p_arr = a.b.type_pointer(None, StorageClass::StorageBuffer, arr);
    let p_sb_u32 = a.b.type_pointer(None, StorageClass::StorageBuffer, t.u32);
    let holders = a.b.variable(p_arr, None, StorageClass::StorageBuffer, None);
    let masks = a.b.variable(p_arr, None, StorageClass::StorageBuffer, None);
    a.b.name(holders, "slots");
    a.b.name(masks, "write_masks");
    for (var, binding) in [(holders, 0u32), (masks, 1)] {
        a.b.decorate(var, Decoration::DescriptorSet, [Operand::LiteralBit32(0)]);
        a.b.decorate(var, Decoration::Binding, [Operand::LiteralBit32(binding)]);
    }
    for v in [wg_id, local_index, lds, holders, masks] {
        a.interface.push(v);
    }
    let ns = a.c32(STACK_ENTRIES);
    let scratch_ty = a.b.type_array(t.u32, ns);
    Globals {
        wg_id,
        local_index,
        lds,
        holders,
        masks,
        p_in_u32,
        p_wg_u32,
        p_sb_u32,
        p_fn_u32: t.p_fn_u32,
        scratch_ty,
    }
}

/// A node's eight words, loaded through the helper at two sites.
fn load_node(
    a: &mut Asm,
    h: &Helpers,
    token: Word,
    sites: (u32, u32),
    base: Word,
    idx: Word,
    derived: u32,
) -> R<[Word; 8]> {
    let t = a.t;
    let at = a.index(base, idx, NODE_BYTES)?;
    let at16 = a.add64c(at, 16)?;
    let sixteen = a.c32(16);
    let s0 = a.c32(sites.0 | derived);
    let s1 = a.c32(sites.1 | derived);
    let lo = a.call(h.vec4, h.load, &[token, s0, at, sixteen])?;
    let hi = a.call(h.vec4, h.load, &[token, s1, at16, sixteen])?;
    let mut w = [0; 8];
    for i in 0..4 {
        w[i] = extract(a, lo, i as u32)?;
        w[4 + i] = extract(a, hi, i as u32)?;
    }
    let _ = t;
    Ok(w)
}

/// Whether the pixel `(nx, ny)` lies in the node's box and the node is nearer than `best_z`.
fn inside(a: &mut Asm, n: &[Word; 8], nx: Word, ny: Word, best_z: Word) -> R<Word> {
    let t = a.t;
    let ge_x = a.bin(Op::UGreaterThanEqual, t.bool_, nx, n[0])?;
    let lt_x = a.ult(nx, n[2])?;
    let ge_y = a.bin(Op::UGreaterThanEqual, t.bool_, ny, n[1])?;
    let lt_y = a.ult(ny, n[3])?;
    let near = a.ult(n[4], best_z)?;
    let x = a.land(ge_x, lt_x)?;
    let y = a.land(ge_y, lt_y)?;
    let xy = a.land(x, y)?;
    a.land(xy, near)
}

/// A 4-byte flat access at `flat`, routed by P1: LDS and scratch served here (and noted to the
/// helper), guest memory through the helper. Returns the loaded word (0 for a store).
///
/// With `expected`, the program counts this site's accesses itself as accesses by that route
/// (its stack's pushes and pops, issue 42): an access routed there is flagged
/// [`SITE_DERIVED`]; one routed elsewhere is counted by the helper as it happens, and taken back
/// from the program's count (`dispatchscope_count` of `0 - 1`), so every route's count stays
/// exact whatever P1 decides.
#[allow(
    clippy::too_many_arguments,
    reason = "the lane's context, passed as SPIR-V ids"
)]
fn flat_access(
    a: &mut Asm,
    h: &Helpers,
    g: &Globals,
    scratch: Word,
    token: Word,
    site_no: u32,
    flat: Word,
    store: Option<Word>,
    expected: Option<u32>,
) -> R<Word> {
    let t = a.t;
    let v_out = a.var(t.p_fn_u32)?;
    let z = a.c32(0);
    a.set(v_out, z)?;
    let r = a.call(t.u32, h.route, &[flat])?;
    let c_lds = a.c32(route::LDS);
    let c_scratch = a.c32(route::SCRATCH);
    let is_lds = a.eq(r, c_lds)?;
    let is_scratch = a.eq(r, c_scratch)?;
    let off = a.narrow(flat)?;
    let two = a.c32(2);
    let word_idx = a.shr(t.u32, off, two)?;
    let plain = a.c32(site_no);
    let four = a.c32(4);
    // The site as the access by `route_no` passes it, and the program's count taken back when
    // the access is not the route the program counts.
    let site_for = |a: &mut Asm, route_no: u32| -> R<Word> {
        match expected {
            Some(r) if r == route_no => Ok(a.c32(site_no | SITE_DERIVED)),
            Some(r) => {
                let rc = a.c32(r);
                let back = a.c32(0u32.wrapping_sub(1));
                a.b.function_call(t.void, None, h.count, [token, plain, rc, back])
                    .map_err(|e| a.err(e))?;
                Ok(plain)
            }
            None => Ok(plain),
        }
    };
    let served = |a: &mut Asm, ptr: Word, route_no: u32| -> R<()> {
        let site_c = site_for(a, route_no)?;
        let v = match store {
            Some(v) => {
                a.set(ptr, v)?;
                v
            }
            None => {
                let v = a.get(t.u32, ptr)?;
                a.set(v_out, v)?;
                v
            }
        };
        let op = if store.is_some() { 1 << 8 } else { 0 };
        let flags = a.c32(route_no << 12 | op | 4);
        let off64 = a.widen(off)?;
        let vals = a.inst(Op::CompositeConstruct, h.vec4, &[v, z, z, z])?;
        a.b.function_call(t.void, None, h.note, [token, site_c, flags, off64, vals])
            .map_err(|e| a.err(e))?;
        Ok(())
    };
    a.if_else(
        is_lds,
        |a| {
            let p = a.inst(Op::AccessChain, g.p_wg_u32, &[g.lds, word_idx])?;
            served(a, p, route::LDS)
        },
        |a| {
            a.if_else(
                is_scratch,
                |a| {
                    let p = a.inst(Op::AccessChain, g.p_fn_u32, &[scratch, word_idx])?;
                    served(a, p, route::SCRATCH)
                },
                |a| match store {
                    Some(v) => {
                        let site_c = site_for(a, route::GUEST)?;
                        let vals = a.inst(Op::CompositeConstruct, h.vec4, &[v, z, z, z])?;
                        a.b.function_call(t.void, None, h.store, [token, site_c, flat, four, vals])
                            .map_err(|e| a.err(e))?;
                        Ok(())
                    }
                    None => {
                        let site_c = site_for(a, route::GUEST)?;
                        let r = a.call(h.vec4, h.load, &[token, site_c, flat, four])?;
                        let x = extract(a, r, 0)?;
                        a.set(v_out, x)
                    }
                },
            )
        },
    )?;
    a.get(t.u32, v_out)
}

/// A bound store of `values` through slot `slot` at word `word` of its binding, with the write
/// mask words set (O9), noted to the helper.
#[allow(
    clippy::too_many_arguments,
    reason = "the lane's context, passed as SPIR-V ids"
)]
fn bound_store(
    a: &mut Asm,
    h: &Helpers,
    g: &Globals,
    token: Word,
    site_no: u32,
    slot: u32,
    word: Word,
    values: &[Word],
    derived: u32,
) -> R<()> {
    let t = a.t;
    let zero = a.c32(0);
    let slot_c = a.c32(slot);
    let one = a.c32(1);
    for (i, &v) in values.iter().enumerate() {
        let ic = a.c32(i as u32);
        let w = a.add(t.u32, word, ic)?;
        let p = a.inst(Op::AccessChain, g.p_sb_u32, &[g.holders, slot_c, zero, w])?;
        a.store(p, v, None)?;
        let m = a.inst(Op::AccessChain, g.p_sb_u32, &[g.masks, slot_c, zero, w])?;
        a.store(m, one, None)?;
    }
    let size = 4 * values.len() as u32;
    let flags = a.c32(slot << 24 | route::BOUND << 12 | 1 << 8 | size);
    let two = a.c32(2);
    let byte = a.shl(t.u32, word, two)?;
    let byte64 = a.widen(byte)?;
    let mut v4 = [zero; 4];
    for (i, &v) in values.iter().take(4).enumerate() {
        v4[i] = v;
    }
    let vals = a.inst(Op::CompositeConstruct, h.vec4, &v4)?;
    let site_c = a.c32(site_no | derived);
    a.b.function_call(t.void, None, h.note, [token, site_c, flags, byte64, vals])
        .map_err(|e| a.err(e))?;
    Ok(())
}

/// The program. With `derive`, it counts its own sites' accesses (issue 42): each site's count
/// follows from the loops' trip counts and the stacks' depths, which the lane keeps anyway, and
/// two counters more (instances entered, and the bottom level's steps and pushes), reported once
/// with `dispatchscope_count` before the flush; its sites are flagged [`SITE_DERIVED`].
fn emit_main(a: &mut Asm, h: &Helpers, workload: Workload, derive: bool) -> R<()> {
    let g = globals(a);
    let t = a.t;
    let p_scratch = a.b.type_pointer(None, StorageClass::Function, g.scratch_ty);
    let (main, _) = a.begin_function(t.void, &[], "main")?;
    let scratch = a.var(p_scratch)?;
    a.b.name(scratch, "scratch");
    let v_sp = a.var(t.p_fn_u32)?;
    let v_bsp = a.var(t.p_fn_u32)?;
    let v_steps = a.var(t.p_fn_u32)?;
    let v_bsteps = a.var(t.p_fn_u32)?;
    let v_best = a.var(t.p_fn_u32)?;
    let v_best_z = a.var(t.p_fn_u32)?;
    let v_sum = a.var(t.p_fn_u32)?;
    // With `derive`: instances entered (low 16 bits) and the bottom stacks' depths when their
    // loops ended (high 16), and the bottom loops' steps.
    let v_inst_left = a.var(t.p_fn_u32)?;
    let v_btotal = a.var(t.p_fn_u32)?;
    let derived = if derive { SITE_DERIVED } else { 0 };
    let (lds_r, scratch_r) = if derive {
        (Some(route::LDS), Some(route::SCRATCH))
    } else {
        (None, None)
    };
    for (v, n) in [
        (v_sp, "top_sp"),
        (v_bsp, "bottom_sp"),
        (v_best, "nearest"),
        (v_best_z, "nearest_z"),
        (v_sum, "checksum"),
    ] {
        a.b.name(v, n);
    }
    let zero = a.c32(0);
    let one = a.c32(1);
    let two = a.c32(2);
    let max = a.c32(u32::MAX);
    // The lane: workgroup, local index, pixel.
    let p0 = a.inst(Op::AccessChain, g.p_in_u32, &[g.wg_id, zero])?;
    let p1 = a.inst(Op::AccessChain, g.p_in_u32, &[g.wg_id, one])?;
    let wx = a.get(t.u32, p0)?;
    let wy = a.get(t.u32, p1)?;
    let local = a.get(t.u32, g.local_index)?;
    let width = a.push_word(push::WIDTH)?;
    let height = a.push_word(push::HEIGHT)?;
    let three = a.c32(3);
    let gx = a.shr(t.u32, width, three)?;
    let row = a.mul(t.u32, wy, gx)?;
    let wg = a.add(t.u32, row, wx)?;
    let seven = a.c32(7);
    let lx = a.and(t.u32, local, seven)?;
    let ly = a.shr(t.u32, local, three)?;
    let x0 = a.shl(t.u32, wx, three)?;
    let y0 = a.shl(t.u32, wy, three)?;
    let x = a.add(t.u32, x0, lx)?;
    let y = a.add(t.u32, y0, ly)?;
    let lanes = a.c32(LOCAL_SIZE);
    let token = a.call(t.u32, h.lane, &[wg, local, lanes, x, y])?;
    a.b.name(token, "token");
    // The pixel's centre in 1/65536ths of the screen.
    let unit = a.c32(65536);
    let half = a.c32(32768);
    let xs = a.mul(t.u32, x, unit)?;
    let xs = a.add(t.u32, xs, half)?;
    let nx = a.bin(Op::UDiv, t.u32, xs, width)?;
    let ys = a.mul(t.u32, y, unit)?;
    let ys = a.add(t.u32, ys, half)?;
    let ny = a.bin(Op::UDiv, t.u32, ys, height)?;
    let tlas = a.push_u64(push::TLAS)?;
    let instances = a.push_u64(push::INSTANCES)?;
    let tiles = a.push_u64(push::TILES)?;
    // Flat addresses of this lane's stacks (P1's apertures).
    let lds_ap = a.c64(0x8000_0000 << 32);
    let scratch_ap = a.c64(0x7000_0000 << 32);
    let stack_bytes = a.c32(STACK_ENTRIES * 4);
    let lds_first = a.mul(t.u32, local, stack_bytes)?;
    let lds_first = a.widen(lds_first)?;
    let lds_base = a.or(t.u64, lds_ap, lds_first)?;
    let entry_addr = |a: &mut Asm, base: Word, sp: Word| -> R<Word> {
        let sp4 = a.shl(t.u32, sp, two)?;
        let sp4 = a.widen(sp4)?;
        a.add(t.u64, base, sp4)
    };
    a.set(v_best, max)?;
    a.set(v_best_z, max)?;
    a.set(v_sum, zero)?;
    a.set(v_steps, zero)?;
    a.set(v_inst_left, zero)?;
    a.set(v_btotal, zero)?;
    let at = entry_addr(a, lds_base, zero)?;
    flat_access(
        a,
        h,
        &g,
        scratch,
        token,
        site::TOP_PUSH,
        at,
        Some(zero),
        lds_r,
    )?;
    a.set(v_sp, one)?;
    let room_for_two = a.c32(STACK_ENTRIES - 1);
    let max_steps = a.c32(MAX_STEPS);
    a.while_(
        |a| {
            let sp = a.get(t.u32, v_sp)?;
            let steps = a.get(t.u32, v_steps)?;
            let more = a.ne(sp, zero)?;
            let budget = a.ult(steps, max_steps)?;
            a.land(more, budget)
        },
        |a| {
            let steps = a.get(t.u32, v_steps)?;
            let steps = a.add(t.u32, steps, one)?;
            a.set(v_steps, steps)?;
            let sp = a.get(t.u32, v_sp)?;
            let sp = a.sub(t.u32, sp, one)?;
            a.set(v_sp, sp)?;
            let at = entry_addr(a, lds_base, sp)?;
            let idx = flat_access(a, h, &g, scratch, token, site::TOP_POP, at, None, lds_r)?;
            let n = load_node(
                a,
                h,
                token,
                (site::TOP_NODE0, site::TOP_NODE1),
                tlas,
                idx,
                derived,
            )?;
            if workload == Workload::Translated {
                let r = intersect::emit_node(a, &n, nx, ny)?;
                let sum = a.get(t.u32, v_sum)?;
                let sum = a.xor(t.u32, sum, r)?;
                a.set(v_sum, sum)?;
            }
            let best_z = a.get(t.u32, v_best_z)?;
            let hit = inside(a, &n, nx, ny, best_z)?;
            a.if_(hit, |a| {
                let leaf = a.eq(n[7], one)?;
                a.if_else(
                    leaf,
                    |a| {
                        // The instance: s_load_dwordx16 from a computed address.
                        let inst = n[5];
                        let base = a.index(instances, inst, INSTANCE_BYTES)?;
                        let sixteen = a.c32(16);
                        let mut words = Vec::with_capacity(16);
                        if derive {
                            let il = a.get(t.u32, v_inst_left)?;
                            let il = a.add(t.u32, il, one)?;
                            a.set(v_inst_left, il)?;
                        }
                        for k in 0..4u32 {
                            let at = a.add64c(base, 16 * u64::from(k))?;
                            let s = a.c32((site::INSTANCE0 + k) | derived);
                            let v = a.call(h.vec4, h.load, &[token, s, at, sixteen])?;
                            for i in 0..4 {
                                words.push(extract(a, v, i)?);
                            }
                        }
                        let mut sum = a.get(t.u32, v_sum)?;
                        for &w in &words {
                            sum = a.bin(Op::BitwiseXor, t.u32, sum, w)?;
                        }
                        a.set(v_sum, sum)?;
                        let blas = a.join(words[0], words[1])?;
                        let root = words[2];
                        let scratch_base = scratch_ap;
                        let at = entry_addr(a, scratch_base, zero)?;
                        flat_access(
                            a,
                            h,
                            &g,
                            scratch,
                            token,
                            site::BOTTOM_PUSH,
                            at,
                            Some(root),
                            scratch_r,
                        )?;
                        a.set(v_bsp, one)?;
                        a.set(v_bsteps, zero)?;
                        a.while_(
                            |a| {
                                let sp = a.get(t.u32, v_bsp)?;
                                let steps = a.get(t.u32, v_bsteps)?;
                                let more = a.ne(sp, zero)?;
                                let budget = a.ult(steps, max_steps)?;
                                a.land(more, budget)
                            },
                            |a| {
                                let steps = a.get(t.u32, v_bsteps)?;
                                let steps = a.add(t.u32, steps, one)?;
                                a.set(v_bsteps, steps)?;
                                let sp = a.get(t.u32, v_bsp)?;
                                let sp = a.sub(t.u32, sp, one)?;
                                a.set(v_bsp, sp)?;
                                let at = entry_addr(a, scratch_base, sp)?;
                                let j = flat_access(
                                    a,
                                    h,
                                    &g,
                                    scratch,
                                    token,
                                    site::BOTTOM_POP,
                                    at,
                                    None,
                                    scratch_r,
                                )?;
                                let b = load_node(
                                    a,
                                    h,
                                    token,
                                    (site::BOTTOM_NODE0, site::BOTTOM_NODE1),
                                    blas,
                                    j,
                                    derived,
                                )?;
                                if workload == Workload::Translated {
                                    let r = intersect::emit_node(a, &b, nx, ny)?;
                                    let sum = a.get(t.u32, v_sum)?;
                                    let sum = a.xor(t.u32, sum, r)?;
                                    a.set(v_sum, sum)?;
                                }
                                let best_z = a.get(t.u32, v_best_z)?;
                                let hit = inside(a, &b, nx, ny, best_z)?;
                                a.if_(hit, |a| {
                                    let leaf = a.eq(b[7], one)?;
                                    a.if_else(
                                        leaf,
                                        |a| {
                                            a.set(v_best_z, b[4])?;
                                            let sixteen = a.c32(16);
                                            let i = a.shl(t.u32, inst, sixteen)?;
                                            let id = a.or(t.u32, b[5], i)?;
                                            a.set(v_best, id)
                                        },
                                        |a| {
                                            let sp = a.get(t.u32, v_bsp)?;
                                            let room = a.ult(sp, room_for_two)?;
                                            a.if_(room, |a| {
                                                for (k, child) in
                                                    [b[5], b[6]].into_iter().enumerate()
                                                {
                                                    let sp = a.get(t.u32, v_bsp)?;
                                                    let at = entry_addr(a, scratch_base, sp)?;
                                                    flat_access(
                                                        a,
                                                        h,
                                                        &g,
                                                        scratch,
                                                        token,
                                                        site::BOTTOM_PUSH,
                                                        at,
                                                        Some(child),
                                                        scratch_r,
                                                    )?;
                                                    let _ = k;
                                                    let sp = a.add(t.u32, sp, one)?;
                                                    a.set(v_bsp, sp)?;
                                                }
                                                Ok(())
                                            })
                                        },
                                    )
                                })
                            },
                        )?;
                        if derive {
                            // The instance's bottom level: its pops are its steps, its pushes
                            // its steps and what is left on its stack.
                            let bt = a.get(t.u32, v_btotal)?;
                            let steps = a.get(t.u32, v_bsteps)?;
                            let bt = a.add(t.u32, bt, steps)?;
                            a.set(v_btotal, bt)?;
                            let il = a.get(t.u32, v_inst_left)?;
                            let sp = a.get(t.u32, v_bsp)?;
                            let sixteen = a.c32(16);
                            let sp = a.shl(t.u32, sp, sixteen)?;
                            let il = a.add(t.u32, il, sp)?;
                            a.set(v_inst_left, il)?;
                        }
                        Ok(())
                    },
                    |a| {
                        let sp = a.get(t.u32, v_sp)?;
                        let room = a.ult(sp, room_for_two)?;
                        a.if_(room, |a| {
                            for child in [n[5], n[6]] {
                                let sp = a.get(t.u32, v_sp)?;
                                let at = entry_addr(a, lds_base, sp)?;
                                flat_access(
                                    a,
                                    h,
                                    &g,
                                    scratch,
                                    token,
                                    site::TOP_PUSH,
                                    at,
                                    Some(child),
                                    lds_r,
                                )?;
                                let sp = a.add(t.u32, sp, one)?;
                                a.set(v_sp, sp)?;
                            }
                            Ok(())
                        })
                    },
                )
            })
        },
    )?;
    // The results: the pixel's pair through slot 0 (bound, O9 masks).
    let best = a.get(t.u32, v_best)?;
    let sum = a.get(t.u32, v_sum)?;
    let best_z = a.get(t.u32, v_best_z)?;
    let yw = a.mul(t.u32, y, width)?;
    let pixel = a.add(t.u32, yw, x)?;
    let word = a.shl(t.u32, pixel, one)?;
    bound_store(a, h, &g, token, site::OUT, 0, word, &[best, sum], derived)?;
    let first_lane = a.eq(local, zero)?;
    a.if_(first_lane, |a| {
        // By device address: the workgroup's nearest (C1 marks its chunk).
        let at = a.index(tiles, wg, 4)?;
        let four = a.c32(4);
        let s = a.c32(site::TILE | derived);
        let vals = a.inst(Op::CompositeConstruct, h.vec4, &[best, zero, zero, zero])?;
        a.b.function_call(t.void, None, h.store, [token, s, at, four, vals])
            .map_err(|e| a.err(e))?;
        // Slot 1, which overlaps slot 0's end: words past slot 0's end.
        let sixteen = a.c32(16);
        let few = a.ult(wg, sixteen)?;
        a.if_(few, |a| {
            let past = a.c32((SUMMARY_OVERLAP_BYTES / 4) as u32);
            let w = a.add(t.u32, past, wg)?;
            bound_store(a, h, &g, token, site::SUMMARY, 1, w, &[best_z], derived)
        })
    })?;
    if derive {
        // Every site's accesses, as the lane counted them: the top level's pops are its steps,
        // its pushes its steps and what is left on its stack; each instance entered is four
        // loads; each bottom level as the top; one result a lane, lane 0's tile, and the summary
        // of lane 0 of the first 16 workgroups. Every lane, in uniform control flow, so that a
        // subgroup's counts are one atomic.
        let steps = a.get(t.u32, v_steps)?;
        let sp = a.get(t.u32, v_sp)?;
        let pushes = a.add(t.u32, steps, sp)?;
        let il = a.get(t.u32, v_inst_left)?;
        let low = a.c32(0xffff);
        let inst = a.and(t.u32, il, low)?;
        let sixteen = a.c32(16);
        let left = a.shr(t.u32, il, sixteen)?;
        let bsteps = a.get(t.u32, v_btotal)?;
        let bpushes = a.add(t.u32, bsteps, left)?;
        let tile = a.select(t.u32, first_lane, one, zero)?;
        let few = a.ult(wg, sixteen)?;
        let summary = a.land(first_lane, few)?;
        let summary = a.select(t.u32, summary, one, zero)?;
        let mut counts = vec![
            (site::TOP_PUSH, route::LDS, pushes),
            (site::TOP_POP, route::LDS, steps),
            (site::TOP_NODE0, route::GUEST, steps),
            (site::TOP_NODE1, route::GUEST, steps),
        ];
        counts.extend((0..4).map(|k| (site::INSTANCE0 + k, route::GUEST, inst)));
        counts.extend([
            (site::BOTTOM_PUSH, route::SCRATCH, bpushes),
            (site::BOTTOM_POP, route::SCRATCH, bsteps),
            (site::BOTTOM_NODE0, route::GUEST, bsteps),
            (site::BOTTOM_NODE1, route::GUEST, bsteps),
            (site::OUT, route::BOUND, one),
            (site::TILE, route::GUEST, tile),
            (site::SUMMARY, route::BOUND, summary),
        ]);
        debug_assert_eq!(counts.len(), site::COUNT as usize);
        for (site_no, route_no, n) in counts {
            let sc = a.c32(site_no);
            let rc = a.c32(route_no);
            a.b.function_call(t.void, None, h.count, [token, sc, rc, n])
                .map_err(|e| a.err(e))?;
        }
    }
    // Every lane, last, in uniform control flow: the workgroup's counters go to the buffer.
    a.b.function_call(t.void, None, h.flush, [token, lanes])
        .map_err(|e| a.err(e))?;
    a.end_void_function()?;
    a.entry(main, "main", LOCAL_SIZE);
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "in a test, an unwrap is an assertion")]
mod tests {
    use super::*;
    use crate::spirv::library::{helper_library, link};

    #[test]
    fn every_variant_builds_inline_and_the_sites_are_described() {
        for v in Variant::ALL {
            traversal_module(Linking::Inline(v)).unwrap();
        }
        assert_eq!(sites().len(), site::COUNT as usize);
    }

    fn spirv_link_installed() -> bool {
        std::process::Command::new("spirv-link")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    }

    /// The program imports the helper, `spirv-link` links it with each library, and the linked
    /// module validates for Vulkan 1.2 (in `link`), with no import left.
    #[test]
    fn the_program_links_against_every_library() {
        if !spirv_link_installed() {
            assert!(
                std::env::var("DISPATCHSCOPE_REQUIRE_VULKAN").map_or(true, |v| v != "1"),
                "DISPATCHSCOPE_REQUIRE_VULKAN=1, but spirv-link (Debian's spirv-tools) is not installed"
            );
            eprintln!("skipped: spirv-link is not installed");
            return;
        }
        let program = traversal_module(Linking::Import).unwrap();
        for v in Variant::ALL {
            let linked = link(&program, &helper_library(v).unwrap()).unwrap();
            let m = rspirv::dr::load_words(&linked).unwrap();
            assert!(
                m.annotations.iter().all(|i| i.class.opcode != Op::Decorate
                    || !matches!(
                        i.operands.get(1),
                        Some(Operand::Decoration(Decoration::LinkageAttributes))
                    )),
                "{v:?}: a linkage decoration survived"
            );
            assert!(
                m.functions.iter().all(|f| !f.blocks.is_empty()),
                "{v:?}: an import is left"
            );
        }
    }
}
