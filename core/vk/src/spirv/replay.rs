//! The access-replay compute shader: one invocation walks a job's records in stream order, byte by
//! byte, and carries out each access the way its route says.
//!
//! Bound accesses go through the descriptor arrays (binding 0: holders bound at each slot's member
//! offset, binding 1: write masks at the same offsets, O6–O9); device accesses through two lookups
//! (T5) and raw device addresses; LDS and scratch through storage-buffer regions the host assigns
//! (P1). The two lookups are the first byte's part of a chunk and the last byte's (a chunk may be
//! mapped by parts), one when they are the same part; each byte goes through the first if it lies
//! in the first byte's part, else through the last's, as the CPU reference does. A miss reads zero,
//! drops the store and is logged (T4); each device store marks the slots it hit and their blocks'
//! summary words (C1). R8G8B8A8_UNORM is decoded through a table and encoded exactly, as
//! [`Format`] does on the host. Nothing here calls Vulkan.

use rspirv::dr::Operand;
use rspirv::spirv::{Capability, Decoration, Op, StorageClass, Word};

use super::asm::Asm;
use super::helper::emit_lookup;
use super::{R, push, record};
use crate::VkError;
use dispatchscope_core::chunk_table::PARTS;
use dispatchscope_core::input::Format;

/// R8G8B8A8_UNORM decode of every byte, exactly as [`Format::decode`] computes it (`c / 255.0` in
/// f32, correctly rounded on the host; a device's division need not be).
pub(super) fn unorm_decode_table() -> Vec<u32> {
    (0..=255u8)
        .map(|b| {
            Format::R8G8B8A8Unorm
                .decode(&[b, 0, 0, 0])
                .first()
                .copied()
                .unwrap_or(0)
        })
        .collect()
}

/// R8G8B8A8_UNORM encode of one component, as [`Format::encode`]: NaN to 0, clamp to [0, 1],
/// `round(f * 255)` half away from zero. The multiply is correctly rounded in Vulkan's SPIR-V
/// environment; the rounding is done exactly (truncate, then compare the fraction with 0.5).
fn unorm_encode(a: &mut Asm, bits: Word) -> R<Word> {
    let t = a.t;
    let f = a.inst(Op::Bitcast, t.f32, &[bits])?;
    let nan = a.inst(Op::IsNan, t.bool_, &[f])?;
    let zero = a.cf(0.0);
    let onef = a.cf(1.0);
    let f = a.select(t.f32, nan, zero, f)?;
    let neg = a.bin(Op::FOrdLessThan, t.bool_, f, zero)?;
    let f = a.select(t.f32, neg, zero, f)?;
    let big = a.bin(Op::FOrdGreaterThan, t.bool_, f, onef)?;
    let f = a.select(t.f32, big, onef, f)?;
    let k = a.cf(255.0);
    let x = a.bin(Op::FMul, t.f32, f, k)?;
    let tr = a.inst(Op::ConvertFToU, t.u32, &[x])?;
    let tf = a.inst(Op::ConvertUToF, t.f32, &[tr])?;
    let frac = a.bin(Op::FSub, t.f32, x, tf)?;
    let half = a.cf(0.5);
    let up = a.bin(Op::FOrdGreaterThanEqual, t.bool_, frac, half)?;
    let one = a.c32(1);
    let z = a.c32(0);
    let inc = a.select(t.u32, up, one, z)?;
    a.add(t.u32, tr, inc)
}

/// The most storage-buffer descriptors the replay binds in each of its two arrays (a context
/// takes half the device's per-stage limit, at most this); the tests validate the module at every
/// count from 1 to this, so the module an engine builds is one spirv-val accepted.
pub const REPLAY_MAX_SLOTS: u32 = 16;

/// The access-replay module, with `slots` storage-buffer descriptors in each of its two arrays
/// (1 to [`REPLAY_MAX_SLOTS`]; another count is a [`VkError::Build`] error, a module no test
/// validated). Not validated here: built on every engine's creation, it runs no process.
pub fn replay_module(slots: u32) -> R<Vec<u32>> {
    if !(1..=REPLAY_MAX_SLOTS).contains(&slots) {
        return Err(VkError::Build {
            module: "replay",
            why: format!("{slots} descriptors a slot array, not 1 to {REPLAY_MAX_SLOTS}"),
        });
    }
    let mut a = Asm::new("replay");
    a.b.capability(Capability::StorageBufferArrayDynamicIndexing);
    let lookup = emit_lookup(&mut a)?;
    let t = a.t;
    // Bindings 0 and 1: arrays of `slots` storage buffers of u32 words.
    let rt = a.b.type_runtime_array(t.u32);
    a.b.decorate(rt, Decoration::ArrayStride, [Operand::LiteralBit32(4)]);
    let blk = a.b.type_struct([rt]);
    a.b.name(blk, "Words");
    a.b.decorate(blk, Decoration::Block, []);
    a.b.member_decorate(blk, 0, Decoration::Offset, [Operand::LiteralBit32(0)]);
    let n = a.c32(slots);
    let arr = a.b.type_array(blk, n);
    let p_arr = a.b.type_pointer(None, StorageClass::StorageBuffer, arr);
    let p_sb_u32 = a.b.type_pointer(None, StorageClass::StorageBuffer, t.u32);
    let data = a.b.variable(p_arr, None, StorageClass::StorageBuffer, None);
    let masks = a.b.variable(p_arr, None, StorageClass::StorageBuffer, None);
    a.b.name(data, "holders");
    a.b.name(masks, "write_masks");
    for (var, binding) in [(data, 0u32), (masks, 1)] {
        a.b.decorate(var, Decoration::DescriptorSet, [Operand::LiteralBit32(0)]);
        a.b.decorate(var, Decoration::Binding, [Operand::LiteralBit32(binding)]);
        a.interface.push(var);
    }
    // The R8G8B8A8_UNORM decode table, a Private constant array.
    let n256 = a.c32(256);
    let tab_ty = a.b.type_array(t.u32, n256);
    let consts: Vec<Word> = unorm_decode_table().into_iter().map(|v| a.c32(v)).collect();
    let init = a.b.constant_composite(tab_ty, consts);
    let p_tab = a.b.type_pointer(None, StorageClass::Private, tab_ty);
    let p_priv_u32 = a.b.type_pointer(None, StorageClass::Private, t.u32);
    let table_var = a.b.variable(p_tab, None, StorageClass::Private, Some(init));
    a.b.name(table_var, "unorm_decode");
    a.interface.push(table_var);
    // The values of one access: 16 words, a Function array.
    let n16 = a.c32(16);
    let vals_ty = a.b.type_array(t.u32, n16);
    let p_vals = a.b.type_pointer(None, StorageClass::Function, vals_ty);

    let (main, _) = a.begin_function(t.void, &[], "main")?;
    let vals = a.var(p_vals)?;
    a.b.name(vals, "values");
    let v_idx = a.var(t.p_fn_u32)?;
    let v_i = a.var(t.p_fn_u32)?;
    let v_j = a.var(t.p_fn_u32)?;
    let v_s0 = a.var(t.p_fn_u32)?;
    let v_s1 = a.var(t.p_fn_u32)?;
    let v_d0 = a.var(t.p_fn_u64)?;
    let v_d1 = a.var(t.p_fn_u64)?;
    let v_esc = a.var(t.p_fn_u32)?;
    let v_esc_addr = a.var(t.p_fn_u64)?;
    let v_byte = a.var(t.p_fn_u32)?;
    a.b.name(v_byte, "byte");
    a.b.name(v_esc_addr, "escaped_at");

    let records = a.push_u64(push::RECORDS)?;
    let values = a.push_u64(push::VALUES)?;
    let out = a.push_u64(push::OUT)?;
    let log = a.push_u64(push::LOG)?;
    let marks = a.push_u64(push::MARKS)?;
    let lds = a.push_u64(push::LDS)?;
    let scratch = a.push_u64(push::SCRATCH)?;
    let lds_stride = a.push_word(push::LDS_STRIDE)?;
    let scratch_stride = a.push_word(push::SCRATCH_STRIDE)?;
    let first = a.push_word(push::FIRST)?;
    let count = a.push_word(push::COUNT)?;
    let shift = a.push_word(push::CHUNK_SHIFT)?;
    let part_bits = a.c32(PARTS.trailing_zeros());
    let part_shift = a.sub(t.u32, shift, part_bits)?;
    let last_part = a.c32(PARTS - 1);
    let end = a.add(t.u32, first, count)?;
    let one64 = a.c64(1);
    let chunk_bytes = a.shl(t.u64, one64, shift)?;
    let cmask = a.sub(t.u64, chunk_bytes, one64)?;
    let none = a.c32(record::NO_SLOT);

    a.set(v_idx, first)?;
    a.while_(
        |a| {
            let idx = a.get(t.u32, v_idx)?;
            a.ult(idx, end)
        },
        |a| {
            let idx = a.get(t.u32, v_idx)?;
            let rec = a.index(records, idx, (record::WORDS * 4) as u64)?;
            let w0 = a.ld32(rec)?;
            let r4 = a.add64c(rec, 4)?;
            let size = a.ld32(r4)?;
            let r8 = a.add64c(rec, 8)?;
            let alo = a.ld32(r8)?;
            let r12 = a.add64c(rec, 12)?;
            let ahi = a.ld32(r12)?;
            let r16 = a.add64c(rec, 16)?;
            let bind = a.ld32(r16)?;
            let r20 = a.add64c(rec, 20)?;
            let vbase = a.ld32(r20)?;
            let addr = a.join(alo, ahi)?;
            let ff = a.c32(0xff);
            let kind = a.and(t.u32, w0, ff)?;
            let store_bit = a.c32(record::STORE);
            let sb = a.and(t.u32, w0, store_bit)?;
            let z = a.c32(0);
            let is_store = a.ne(sb, z)?;
            let unorm_bit = a.c32(record::UNORM);
            let ub = a.and(t.u32, w0, unorm_bit)?;
            let unorm = a.ne(ub, z)?;
            let c_bound = a.c32(record::BOUND);
            let c_dev = a.c32(record::DEVICE);
            let c_lds = a.c32(record::LDS);
            let is_bound = a.eq(kind, c_bound)?;
            let is_dev = a.eq(kind, c_dev)?;
            let is_lds = a.eq(kind, c_lds)?;
            // Values: zero, then a store's from the value buffer.
            for j in 0..16 {
                let jj = a.c32(j);
                let p = a.inst(Op::AccessChain, t.p_fn_u32, &[vals, jj])?;
                a.set(p, z)?;
            }
            a.if_(is_store, |a| {
                let four = a.c32(4);
                let three = a.c32(3);
                let two = a.c32(2);
                let s3 = a.add(t.u32, size, three)?;
                let words = a.shr(t.u32, s3, two)?;
                let nv = a.select(t.u32, unorm, four, words)?;
                a.for_(v_j, nv, |a, j| {
                    let vi = a.add(t.u32, vbase, j)?;
                    let at = a.index(values, vi, 4)?;
                    let v = a.ld32(at)?;
                    let p = a.inst(Op::AccessChain, t.p_fn_u32, &[vals, j])?;
                    a.set(p, v)
                })
            })?;
            // T5: two lookups, the first byte's (chunk, part) and the last byte's.
            let c0 = a.shr(t.u64, addr, shift)?;
            let q0 = a.shr(t.u64, addr, part_shift)?;
            let p0 = a.narrow(q0)?;
            let p0 = a.and(t.u32, p0, last_part)?;
            let size64 = a.widen(size)?;
            let after = a.add(t.u64, addr, size64)?;
            let last = a.sub(t.u64, after, one64)?;
            let c1 = a.shr(t.u64, last, shift)?;
            let q1 = a.shr(t.u64, last, part_shift)?;
            let p1 = a.narrow(q1)?;
            let p1 = a.and(t.u32, p1, last_part)?;
            let split = a.ne(q1, q0)?;
            let z64 = a.c64(0);
            a.set(v_s0, none)?;
            a.set(v_s1, none)?;
            a.set(v_d0, z64)?;
            a.set(v_d1, z64)?;
            a.if_(is_dev, |a| {
                let h0 = a.call(t.hit, lookup, &[c0, p0])?;
                let s0 = a.extract(h0, 1)?;
                let d0 = a.extract(h0, 0)?;
                a.set(v_s0, s0)?;
                a.set(v_d0, d0)?;
                a.if_else(
                    split,
                    |a| {
                        let h1 = a.call(t.hit, lookup, &[c1, p1])?;
                        let s1 = a.extract(h1, 1)?;
                        let d1 = a.extract(h1, 0)?;
                        a.set(v_s1, s1)?;
                        a.set(v_d1, d1)
                    },
                    |a| {
                        a.set(v_s1, s0)?;
                        a.set(v_d1, d0)
                    },
                )
            })?;
            let s0 = a.get(t.u32, v_s0)?;
            let s1 = a.get(t.u32, v_s1)?;
            let d0 = a.get(t.u64, v_d0)?;
            let d1 = a.get(t.u64, v_d1)?;
            // P1: the LDS region of the workgroup or the scratch region of the lane.
            let lds_at = a.widen(lds_stride)?;
            let bind64 = a.widen(bind)?;
            let lds_off = a.mul(t.u64, bind64, lds_at)?;
            let lds_base = a.add(t.u64, lds, lds_off)?;
            let scr_at = a.widen(scratch_stride)?;
            let scr_off = a.mul(t.u64, bind64, scr_at)?;
            let scr_base = a.add(t.u64, scratch, scr_off)?;
            let region = a.select(t.u64, is_lds, lds_base, scr_base)?;
            let region = a.add(t.u64, region, addr)?;
            a.set(v_esc, z)?;
            a.set(v_esc_addr, z64)?;
            a.for_(v_i, size, |a, i| {
                a.set(v_byte, z)?;
                a.if_(is_store, |a| {
                    a.if_else(
                        unorm,
                        |a| {
                            let p = a.inst(Op::AccessChain, t.p_fn_u32, &[vals, i])?;
                            let v = a.get(t.u32, p)?;
                            let b = unorm_encode(a, v)?;
                            a.set(v_byte, b)
                        },
                        |a| {
                            let (_, w, sh) = value_word(a, vals, i)?;
                            let b = a.shr(t.u32, w, sh)?;
                            let ff = a.c32(0xff);
                            let b = a.and(t.u32, b, ff)?;
                            a.set(v_byte, b)
                        },
                    )
                })?;
                a.if_else(
                    is_bound,
                    |a| {
                        // O6–O9: the slot's binding of its holder, and its mask at the same offset.
                        let lo = a.narrow(addr)?;
                        let p = a.add(t.u32, lo, i)?;
                        let two = a.c32(2);
                        let w = a.shr(t.u32, p, two)?;
                        let sh = a.byte_shift32(p)?;
                        let zero = a.c32(0);
                        let dp = a.inst(Op::AccessChain, p_sb_u32, &[data, bind, zero, w])?;
                        let word = a.get(t.u32, dp)?;
                        a.if_else(
                            is_store,
                            |a| {
                                let b = a.get(t.u32, v_byte)?;
                                let nw = a.merge_byte(word, b, sh)?;
                                a.set(dp, nw)?;
                                let mp =
                                    a.inst(Op::AccessChain, p_sb_u32, &[masks, bind, zero, w])?;
                                let one = a.c32(1);
                                a.set(mp, one)
                            },
                            |a| {
                                let b = a.shr(t.u32, word, sh)?;
                                let ff = a.c32(0xff);
                                let b = a.and(t.u32, b, ff)?;
                                a.set(v_byte, b)
                            },
                        )
                    },
                    |a| {
                        let i64_ = a.widen(i)?;
                        let at = a.add(t.u64, addr, i64_)?;
                        let q = a.shr(t.u64, at, part_shift)?;
                        let in_first = a.eq(q, q0)?;
                        let s = a.select(t.u32, in_first, s0, s1)?;
                        let d = a.select(t.u64, in_first, d0, d1)?;
                        let hit = a.ne(s, none)?;
                        let not_dev = a.lnot(is_dev)?;
                        let ok = a.lor(not_dev, hit)?;
                        let in_chunk = a.and(t.u64, at, cmask)?;
                        let dev_at = a.add(t.u64, d, in_chunk)?;
                        let reg_at = a.add(t.u64, region, i64_)?;
                        let ptr = a.select(t.u64, is_dev, dev_at, reg_at)?;
                        a.if_else(
                            ok,
                            |a| {
                                a.if_else(
                                    is_store,
                                    |a| {
                                        let b = a.get(t.u32, v_byte)?;
                                        a.store_byte(ptr, b)
                                    },
                                    |a| {
                                        let b = a.load_byte(ptr)?;
                                        a.set(v_byte, b)
                                    },
                                )
                            },
                            |a| {
                                // T4: a miss reads zero, stores nothing, and is an escape.
                                let e = a.get(t.u32, v_esc)?;
                                let z = a.c32(0);
                                let first_miss = a.eq(e, z)?;
                                a.if_(first_miss, |a| {
                                    let one = a.c32(1);
                                    a.set(v_esc, one)?;
                                    a.set(v_esc_addr, at)
                                })?;
                                a.set(v_byte, z)
                            },
                        )
                    },
                )?;
                let loading = a.lnot(is_store)?;
                a.if_(loading, |a| {
                    let b = a.get(t.u32, v_byte)?;
                    a.if_else(
                        unorm,
                        |a| {
                            let tp = a.inst(Op::AccessChain, p_priv_u32, &[table_var, b])?;
                            let f = a.get(t.u32, tp)?;
                            let p = a.inst(Op::AccessChain, t.p_fn_u32, &[vals, i])?;
                            a.set(p, f)
                        },
                        |a| {
                            let (p, w, sh) = value_word(a, vals, i)?;
                            let bs = a.shl(t.u32, b, sh)?;
                            let nw = a.or(t.u32, w, bs)?;
                            a.set(p, nw)
                        },
                    )
                })
            })?;
            // The access's outputs: values, the two slots, the first byte's device address.
            let o = a.index(out, idx, (record::OUT_WORDS * 4) as u64)?;
            for j in 0..16u32 {
                let jj = a.c32(j);
                let p = a.inst(Op::AccessChain, t.p_fn_u32, &[vals, jj])?;
                let v = a.get(t.u32, p)?;
                let at = a.add64c(o, u64::from(j) * 4)?;
                a.st32(at, v)?;
            }
            let at = a.add64c(o, 64)?;
            a.st32(at, s0)?;
            let second = a.select(t.u32, split, s1, none)?;
            let at = a.add64c(o, 68)?;
            a.st32(at, second)?;
            let in_chunk = a.and(t.u64, addr, cmask)?;
            let dev = a.add(t.u64, d0, in_chunk)?;
            let dlo = a.narrow(dev)?;
            let dhi = a.high(dev)?;
            let at = a.add64c(o, 72)?;
            a.st32(at, dlo)?;
            let at = a.add64c(o, 76)?;
            a.st32(at, dhi)?;
            emit_marks(a, marks, is_dev, is_store, [s0, s1], split)?;
            emit_escape(a, log, idx, v_esc, v_esc_addr)?;
            let one = a.c32(1);
            let next = a.add(t.u32, idx, one)?;
            a.set(v_idx, next)
        },
    )?;
    a.end_void_function()?;
    a.entry(main, "main", 1);
    Ok(a.finish())
}

/// The value word holding byte `i` of an access (`values[i / 4]`): its pointer, the word, and the
/// byte's shift in it.
fn value_word(a: &mut Asm, vals: Word, i: Word) -> R<(Word, Word, Word)> {
    let t = a.t;
    let two = a.c32(2);
    let wi = a.shr(t.u32, i, two)?;
    let p = a.inst(Op::AccessChain, t.p_fn_u32, &[vals, wi])?;
    let w = a.get(t.u32, p)?;
    let sh = a.byte_shift32(i)?;
    Ok((p, w, sh))
}

/// C1: a device store adds one to the mark word of each slot it hit and sets its block's summary
/// word ([`Asm::mark`]): the first byte's, and the last byte's when the access spans two parts
/// reached through two slots (two parts of one chunk through one slot mark it once).
fn emit_marks(
    a: &mut Asm,
    marks: Word,
    is_dev: Word,
    is_store: Word,
    [s0, s1]: [Word; 2],
    split: Word,
) -> R<()> {
    let none = a.c32(record::NO_SLOT);
    let mark = |a: &mut Asm, slot: Word| a.mark(marks, slot);
    let dev_store = a.land(is_dev, is_store)?;
    a.if_(dev_store, |a| {
        let hit0 = a.ne(s0, none)?;
        a.if_(hit0, |a| mark(a, s0))?;
        let hit1 = a.ne(s1, none)?;
        let both = a.land(split, hit1)?;
        let other = a.ne(s1, s0)?;
        let both = a.land(both, other)?;
        a.if_(both, |a| mark(a, s1))
    })
}

/// T4: appends (access `idx`, the first escaped address) to the escape log at `log` when the access
/// escaped, behind the log's atomic counter.
fn emit_escape(a: &mut Asm, log: Word, idx: Word, v_esc: Word, v_esc_addr: Word) -> R<()> {
    let t = a.t;
    let z = a.c32(0);
    let e = a.get(t.u32, v_esc)?;
    let escaped = a.ne(e, z)?;
    a.if_(escaped, |a| {
        let n = a.atomic_inc(log)?;
        let entries = a.add64c(log, record::LOG_HEADER_BYTES)?;
        let at = a.index(entries, n, record::LOG_ENTRY_BYTES)?;
        a.st32(at, idx)?;
        let ea = a.get(t.u64, v_esc_addr)?;
        let lo = a.narrow(ea)?;
        let hi = a.high(ea)?;
        let at4 = a.add64c(at, 4)?;
        a.st32(at4, lo)?;
        let at8 = a.add64c(at, 8)?;
        a.st32(at8, hi)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_decode_table_is_format_decode() {
        let t = unorm_decode_table();
        assert_eq!(t[0], 0);
        assert_eq!(t[255], 1.0f32.to_bits());
        assert_eq!(t[51], (51.0f32 / 255.0).to_bits());
    }
}
