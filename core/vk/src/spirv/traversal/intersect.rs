//! The arithmetic a translator emits for RDNA2's `image_bvh_intersect_ray` (issue 30's translated
//! workload): for a box node, four slab tests and the children sorted by their entry distance; for
//! a leaf, a ray–triangle test whose numerators and denominator RDNA2 returns (the shader divides).
//! A real traversal pass spends most of its time here rather than in its loads, so the helper's
//! cost is measured against a program that does it.
//!
//! The node's words become the test's geometry, on a lattice where every value and every product
//! is an integer below 2^24 (or a quarter of one): each float operation is exact, so the device's
//! result equals the host's bit for bit whatever the driver fuses or reorders, and each result is
//! converted to an integer before it is folded, so no signed zero or rounding mode reaches the
//! image. The result folds into the pixel's checksum; the walk itself is the integer test's, so
//! every site's access count stays the loads workload's.
//!
//! [`node`] is the host's, `emit_node` the device's; each step is written the same way in both.

use rspirv::spirv::{Op, Word};

use super::super::R;
use super::super::asm::Asm;

/// The ray's inverse direction per axis (its direction is `(2, 4, 1)`).
const INV_DIR: [f32; 3] = [0.5, 0.25, 1.0];
/// The ray's direction.
const DIR: [f32; 3] = [2.0, 4.0, 1.0];
/// The ray's origin's depth.
const ORIGIN_Z: f32 = -1.0;
/// The entry distance given to a child the ray misses (sorted last).
const MISS: f32 = 1.0e6;
/// The child index given to a missed child.
const NO_CHILD: u32 = 0xf;
/// The comparators of a four-element sorting network.
const SORT: [(usize, usize); 5] = [(0, 1), (2, 3), (0, 2), (1, 3), (1, 2)];

/// A node coordinate (a 1/65536th of the screen) on the lattice: `v >> 9`, at most 128.
fn q(v: u32) -> f32 {
    (v >> 9) as f32
}

/// A node's depth on the lattice: bits 12–18 of its `z` word.
fn qz(z: u32) -> f32 {
    ((z >> 12) & 0x7f) as f32
}

fn min(a: f32, b: f32) -> f32 {
    if a < b { a } else { b }
}

fn max(a: f32, b: f32) -> f32 {
    if a < b { b } else { a }
}

/// The host's intersection of the pixel `(nx, ny)`'s ray with node `n`: a box node's four
/// children sorted (four nibbles, `0xf` for a miss) with the nearest entry distance, or a leaf's
/// triangle numerators and denominator, folded into one word.
pub fn node(n: &[u32; 8], nx: u32, ny: u32) -> u32 {
    let o = [q(nx), q(ny), ORIGIN_Z];
    let (x0, y0, x1, y1, z) = (q(n[0]), q(n[1]), q(n[2]), q(n[3]), qz(n[4]));
    if n[7] == 1 {
        let v0 = [x0, y0, z];
        let v1 = [x1, y0, z + 1.0];
        let v2 = [x0, y1, z + 2.0];
        let sub = |a: [f32; 3], b: [f32; 3]| [a[0] - b[0], a[1] - b[1], a[2] - b[2]];
        let cross = |a: [f32; 3], b: [f32; 3]| {
            [
                a[1] * b[2] - a[2] * b[1],
                a[2] * b[0] - a[0] * b[2],
                a[0] * b[1] - a[1] * b[0],
            ]
        };
        let dot = |a: [f32; 3], b: [f32; 3]| a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
        let (e1, e2, s) = (sub(v1, v0), sub(v2, v0), sub(o, v0));
        let p = cross(DIR, e2);
        let det = dot(e1, p);
        let qv = cross(s, e1);
        let (u, v, t) = (dot(s, p), dot(DIR, qv), dot(e2, qv));
        let hit = det > 0.0 && u >= 0.0 && v >= 0.0 && u + v <= det && t >= 0.0;
        let i = |x: f32| x as i32 as u32;
        i(t) ^ (i(det) << 3) ^ (i(u) << 6) ^ (i(v) << 9) ^ u32::from(hit)
    } else {
        let mut keys = [0f32; 4];
        let mut idx = [0u32; 4];
        for k in 0..4u32 {
            let kf = k as f32;
            let lo = [x0 + kf, y0 + kf, z];
            let hi = [x1 + 2.0 * kf, y1 + 2.0 * kf, z + 8.0 + kf];
            let mut tmin = f32::MIN;
            let mut tmax = f32::MAX;
            for a in 0..3 {
                let t0 = (lo[a] - o[a]) * INV_DIR[a];
                let t1 = (hi[a] - o[a]) * INV_DIR[a];
                tmin = if a == 0 {
                    min(t0, t1)
                } else {
                    max(tmin, min(t0, t1))
                };
                tmax = if a == 0 {
                    max(t0, t1)
                } else {
                    min(tmax, max(t0, t1))
                };
            }
            let hit = tmin <= tmax && tmax >= 0.0;
            keys[k as usize] = if hit { tmin } else { MISS };
            idx[k as usize] = if hit { k } else { NO_CHILD };
        }
        for (a, b) in SORT {
            if keys[b] < keys[a] {
                keys.swap(a, b);
                idx.swap(a, b);
            }
        }
        let packed = idx[0] | idx[1] << 4 | idx[2] << 8 | idx[3] << 12;
        packed ^ ((keys[0] * 4.0) as i32 as u32) << 16
    }
}

/// The device's [`node`]: the same steps, emitted into the lane's code; returns the folded word.
pub(in crate::spirv) fn emit_node(a: &mut Asm, n: &[Word; 8], nx: Word, ny: Word) -> R<Word> {
    let t = a.t;
    let f = t.f32;
    let nine = a.c32(9);
    let q = |a: &mut Asm, v: Word| -> R<Word> {
        let s = a.shr(t.u32, v, nine)?;
        a.inst(Op::ConvertUToF, f, &[s])
    };
    let qz = |a: &mut Asm, v: Word| -> R<Word> {
        let twelve = a.c32(12);
        let s = a.shr(t.u32, v, twelve)?;
        let m = a.c32(0x7f);
        let s = a.and(t.u32, s, m)?;
        a.inst(Op::ConvertUToF, f, &[s])
    };
    let fadd = |a: &mut Asm, x: Word, y: Word| a.bin(Op::FAdd, f, x, y);
    let fsub = |a: &mut Asm, x: Word, y: Word| a.bin(Op::FSub, f, x, y);
    let fmul = |a: &mut Asm, x: Word, y: Word| a.bin(Op::FMul, f, x, y);
    let flt = |a: &mut Asm, x: Word, y: Word| a.bin(Op::FOrdLessThan, t.bool_, x, y);
    let fmin = |a: &mut Asm, x: Word, y: Word| -> R<Word> {
        let c = flt(a, x, y)?;
        a.select(f, c, x, y)
    };
    let fmax = |a: &mut Asm, x: Word, y: Word| -> R<Word> {
        let c = flt(a, x, y)?;
        a.select(f, c, y, x)
    };
    let to_int = |a: &mut Asm, x: Word| a.inst(Op::ConvertFToS, t.u32, &[x]);
    let o = [q(a, nx)?, q(a, ny)?, a.cf(ORIGIN_Z)];
    let (x0, y0, x1, y1, z) = (
        q(a, n[0])?,
        q(a, n[1])?,
        q(a, n[2])?,
        q(a, n[3])?,
        qz(a, n[4])?,
    );
    let one = a.c32(1);
    let leaf = a.eq(n[7], one)?;
    let v_out = a.var(t.p_fn_u32)?;
    a.if_else(
        leaf,
        |a| {
            let (c1, c2) = (a.cf(1.0), a.cf(2.0));
            let z1 = fadd(a, z, c1)?;
            let z2 = fadd(a, z, c2)?;
            let v0 = [x0, y0, z];
            let v1 = [x1, y0, z1];
            let v2 = [x0, y1, z2];
            let sub3 = |a: &mut Asm, p: [Word; 3], r: [Word; 3]| -> R<[Word; 3]> {
                Ok([
                    fsub(a, p[0], r[0])?,
                    fsub(a, p[1], r[1])?,
                    fsub(a, p[2], r[2])?,
                ])
            };
            let cross = |a: &mut Asm, p: [Word; 3], r: [Word; 3]| -> R<[Word; 3]> {
                let mut out = [0; 3];
                for (k, (i, j)) in [(1, 2), (2, 0), (0, 1)].into_iter().enumerate() {
                    let l = fmul(a, p[i], r[j])?;
                    let m = fmul(a, p[j], r[i])?;
                    out[k] = fsub(a, l, m)?;
                }
                Ok(out)
            };
            let dot = |a: &mut Asm, p: [Word; 3], r: [Word; 3]| -> R<Word> {
                let x = fmul(a, p[0], r[0])?;
                let y = fmul(a, p[1], r[1])?;
                let s = fadd(a, x, y)?;
                let z = fmul(a, p[2], r[2])?;
                fadd(a, s, z)
            };
            let d = [a.cf(DIR[0]), a.cf(DIR[1]), a.cf(DIR[2])];
            let e1 = sub3(a, v1, v0)?;
            let e2 = sub3(a, v2, v0)?;
            let s = sub3(a, o, v0)?;
            let p = cross(a, d, e2)?;
            let det = dot(a, e1, p)?;
            let qv = cross(a, s, e1)?;
            let u = dot(a, s, p)?;
            let v = dot(a, d, qv)?;
            let tt = dot(a, e2, qv)?;
            let zero = a.cf(0.0);
            let ge0 = |a: &mut Asm, x: Word| a.bin(Op::FOrdGreaterThanEqual, t.bool_, x, zero);
            let c_det = flt(a, zero, det)?;
            let c_u = ge0(a, u)?;
            let c_v = ge0(a, v)?;
            let uv = fadd(a, u, v)?;
            let c_uv = a.bin(Op::FOrdLessThanEqual, t.bool_, uv, det)?;
            let c_t = ge0(a, tt)?;
            let h = a.land(c_det, c_u)?;
            let h = a.land(h, c_v)?;
            let h = a.land(h, c_uv)?;
            let h = a.land(h, c_t)?;
            let zi = a.c32(0);
            let hit = a.select(t.u32, h, one, zi)?;
            let mut r = to_int(a, tt)?;
            for (x, sh) in [(det, 3), (u, 6), (v, 9)] {
                let i = to_int(a, x)?;
                let c = a.c32(sh);
                let i = a.shl(t.u32, i, c)?;
                r = a.xor(t.u32, r, i)?;
            }
            let r = a.xor(t.u32, r, hit)?;
            a.set(v_out, r)
        },
        |a| {
            let inv = [a.cf(INV_DIR[0]), a.cf(INV_DIR[1]), a.cf(INV_DIR[2])];
            let mut keys = [0; 4];
            let mut idx = [0; 4];
            for k in 0..4u32 {
                let kf = a.cf(k as f32);
                let k2 = a.cf(2.0 * k as f32);
                let k8 = a.cf(8.0 + k as f32);
                let lo = [fadd(a, x0, kf)?, fadd(a, y0, kf)?, z];
                let hi = [fadd(a, x1, k2)?, fadd(a, y1, k2)?, fadd(a, z, k8)?];
                let (mut tmin, mut tmax) = (0, 0);
                for ax in 0..3 {
                    let d0 = fsub(a, lo[ax], o[ax])?;
                    let t0 = fmul(a, d0, inv[ax])?;
                    let d1 = fsub(a, hi[ax], o[ax])?;
                    let t1 = fmul(a, d1, inv[ax])?;
                    let near = fmin(a, t0, t1)?;
                    let far = fmax(a, t0, t1)?;
                    if ax == 0 {
                        (tmin, tmax) = (near, far);
                    } else {
                        tmin = fmax(a, tmin, near)?;
                        tmax = fmin(a, tmax, far)?;
                    }
                }
                let zero = a.cf(0.0);
                let ordered = a.bin(Op::FOrdLessThanEqual, t.bool_, tmin, tmax)?;
                let ahead = a.bin(Op::FOrdGreaterThanEqual, t.bool_, tmax, zero)?;
                let hit = a.land(ordered, ahead)?;
                let miss = a.cf(MISS);
                keys[k as usize] = a.select(f, hit, tmin, miss)?;
                let kc = a.c32(k);
                let none = a.c32(NO_CHILD);
                idx[k as usize] = a.select(t.u32, hit, kc, none)?;
            }
            for (i, j) in SORT {
                let swap = flt(a, keys[j], keys[i])?;
                let (ki, kj) = (keys[i], keys[j]);
                keys[i] = a.select(f, swap, kj, ki)?;
                keys[j] = a.select(f, swap, ki, kj)?;
                let (ii, ij) = (idx[i], idx[j]);
                idx[i] = a.select(t.u32, swap, ij, ii)?;
                idx[j] = a.select(t.u32, swap, ii, ij)?;
            }
            let mut packed = idx[0];
            for (k, &x) in idx.iter().enumerate().skip(1) {
                let c = a.c32(4 * k as u32);
                let s = a.shl(t.u32, x, c)?;
                packed = a.or(t.u32, packed, s)?;
            }
            let four = a.cf(4.0);
            let k4 = fmul(a, keys[0], four)?;
            let ki = to_int(a, k4)?;
            let sixteen = a.c32(16);
            let ki = a.shl(t.u32, ki, sixteen)?;
            let r = a.xor(t.u32, packed, ki)?;
            a.set(v_out, r)
        },
    )?;
    a.get(t.u32, v_out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every value the lattice makes stays exact: the largest triangle and box results are
    /// integers well below 2^24, so no float operation rounds.
    #[test]
    fn the_lattice_keeps_every_result_exact() {
        let n = [65536, 65536, 65536, 65536, u32::MAX, 3, 4, 1];
        let _ = node(&n, 0, 0);
        let m = [0, 0, 0, 0, 0, 0, 0, 1];
        let _ = node(&m, 65535, 65535);
        // A box node the ray enters: its nearest child's index is in the low nibble.
        let b = [0, 0, 65536, 65536, 0, 1, 2, 0];
        assert_ne!(node(&b, 32768, 32768) & 0xf, NO_CHILD);
        // A box far to one side of the ray: every child missed.
        let far = [0, 0, 512, 512, 0, 1, 2, 0];
        assert_eq!(node(&far, 65000, 65000) & 0xffff, 0xffff);
    }
}
