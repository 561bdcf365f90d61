//! T5: the one lookup helper, `Hit lookup(u64 guest_chunk, u32 part)`, emitted by one function,
//! [`emit_lookup`], into every module that needs it (the replay, the bench), and alone in the small
//! module whose golden disassembly is `core/vk/tests/golden/lookup_helper.spvasm`.
//!
//! It is bit for bit the engine's probe of the chunk table (T2, `ChunkTable::trace_part`), reading
//! the table's address and shape from the push block (T3); a miss gives slot `NO_SLOT` (T4). A
//! chunk may be mapped by parts (a sixteenth of it each, `chunk_table::PARTS`): a slot hits when
//! its key's chunk bits are the chunk and its key does not exclude the part asked for
//! (`TableSlot::hits`). Nothing here calls Vulkan.

use rspirv::spirv::{Op, StorageClass, Word};

use super::asm::Asm;
use super::{R, push, record};
use dispatchscope_core::chunk_table::{
    EMPTY_KEY, KEY_CHUNK_BITS, KEY_CHUNK_MASK, PARTS, SLOT_BYTES,
};

/// The parts of a chunk as the `excluded` of a miss: every one, so that an answer kept by the
/// lane's cache for a miss is never taken again for another part.
pub(super) const EVERY_PART: u32 = (1 << PARTS) - 1;

/// `TableSlot::hits(chunk, part)` as one AND and one compare of a key: `key & mask == want`.
///
/// `mask` keeps the key's chunk bits and the bit of `part` among its excluded parts; `want` is the
/// chunk, so that a key hits exactly when its chunk bits are the chunk and the part's bit is clear.
/// A chunk past the key's bits is never mapped: its `want` is `u64::MAX`, which no masked key
/// equals (the mask has 49 bits). The empty key never hits either: its chunk bits are all ones and
/// it excludes every part. The part is taken modulo [`PARTS`].
pub(super) struct HitTest {
    /// `guest_chunk & KEY_CHUNK_MASK`: what the home slot is hashed from (as `trace_part` does).
    pub(super) chunk_bits: Word,
    /// The key's chunk bits and the part's bit.
    pub(super) mask: Word,
    /// What a masked key that hits equals.
    pub(super) want: Word,
}

/// The [`HitTest`] of `part` of `chunk` (a u64 and a u32 id): six instructions, once a lookup.
pub(super) fn hit_test(a: &mut Asm, chunk: Word, part: Word) -> R<HitTest> {
    let t = a.t;
    let chunk_mask = a.c64(KEY_CHUNK_MASK);
    let chunk_bits = a.and(t.u64, chunk, chunk_mask)?;
    let fits = a.eq(chunk_bits, chunk)?;
    let never = a.c64(u64::MAX);
    let want = a.select(t.u64, fits, chunk, never)?;
    let last_part = a.c32(PARTS - 1);
    let part = a.and(t.u32, part, last_part)?;
    let first_bit = a.c32(KEY_CHUNK_BITS);
    let bit_no = a.add(t.u32, part, first_bit)?;
    let one64 = a.c64(1);
    let bit = a.shl(t.u64, one64, bit_no)?;
    let mask = a.or(t.u64, chunk_mask, bit)?;
    Ok(HitTest {
        chunk_bits,
        mask,
        want,
    })
}

/// T5: emits the lookup helper, `Hit lookup(u64 guest_chunk, u32 part)`: the device address of
/// the chunk's first byte in the import that holds `part` of it, the table slot that reaches the
/// part and the parts that slot does not reach (`excluded`, the key's top 16 bits), or address 0,
/// slot `NO_SLOT` and every part excluded on a miss; and the probes it read (the instrumented
/// helper's histogram, T2).
///
/// Bit for bit [`dispatchscope_core::chunk_table::home_slot`] and the table's bounded probe
/// (`ChunkTable::trace_part`): the home slot is `(k * multiplier) >> (64 - capacity_log2)` (0
/// when `capacity_log2` is 0) with `k` the chunk's key bits; up to `probe_bound` consecutive
/// 16-byte slots (wrapping) are read until a slot that hits ([`HitTest`]: one AND and one compare
/// a probe) or the empty key (a miss). The table's address, `capacity_log2`, the bound and the
/// multiplier come from the push block.
pub(super) fn emit_lookup(a: &mut Asm) -> R<Word> {
    let t = a.t;
    let (f, params) = a.begin_function(t.hit, &[t.u64, t.u32], "lookup")?;
    let chunk = params.first().copied().unwrap_or_default();
    let part = params.get(1).copied().unwrap_or_default();
    a.b.name(chunk, "guest_chunk");
    a.b.name(part, "part");
    let v_slot = a.var(t.p_fn_u32)?;
    let v_dev = a.var(t.p_fn_u64)?;
    let v_excluded = a.var(t.p_fn_u32)?;
    let v_probe = a.var(t.p_fn_u32)?;
    let v_n = a.var(t.p_fn_u32)?;
    let p_fn_bool = a.b.type_pointer(None, StorageClass::Function, t.bool_);
    let v_live = a.var(p_fn_bool)?;
    a.b.name(v_slot, "slot");
    a.b.name(v_dev, "device_addr");
    a.b.name(v_excluded, "excluded");
    a.b.name(v_probe, "probe");
    a.b.name(v_n, "probes_read");
    a.b.name(v_live, "searching");
    let table = a.push_u64(push::TABLE)?;
    let log2 = a.push_word(push::CAPACITY_LOG2)?;
    let bound = a.push_word(push::PROBE_BOUND)?;
    a.b.name(table, "table");
    a.b.name(log2, "capacity_log2");
    a.b.name(bound, "probe_bound");
    let multiplier = a.push_u64(push::MULTIPLIER)?;
    a.b.name(multiplier, "multiplier");
    let test = hit_test(a, chunk, part)?;
    a.b.name(test.mask, "key_mask");
    a.b.name(test.want, "want");
    // home = (k * multiplier) >> (64 - log2), or 0 when log2 == 0.
    let h = a.mul(t.u64, test.chunk_bits, multiplier)?;
    let zero = a.c32(0);
    let one = a.c32(1);
    let is0 = a.eq(log2, zero)?;
    let safe_log2 = a.select(t.u32, is0, one, log2)?;
    let c64_ = a.c32(64);
    let shift = a.sub(t.u32, c64_, safe_log2)?;
    let top = a.shr(t.u64, h, shift)?;
    let top = a.narrow(top)?;
    let home = a.select(t.u32, is0, zero, top)?;
    let cap = a.shl(t.u32, one, log2)?;
    let mask = a.sub(t.u32, cap, one)?;
    a.b.name(home, "home");
    a.b.name(mask, "wrap_mask");
    let none = a.c32(record::NO_SLOT);
    let every_part = a.c32(EVERY_PART);
    let z64 = a.c64(0);
    a.set(v_probe, home)?;
    a.set(v_n, zero)?;
    a.set(v_slot, none)?;
    a.set(v_dev, z64)?;
    a.set(v_excluded, every_part)?;
    let empty = a.c64(EMPTY_KEY);
    let yes = a.cbool(true);
    a.set(v_live, yes)?;
    let searching = |a: &mut Asm| -> R<Word> {
        let live = a.get(t.bool_, v_live)?;
        let n = a.get(t.u32, v_n)?;
        let more = a.ult(n, bound)?;
        a.land(live, more)
    };
    let probe = |a: &mut Asm| -> R<()> {
        let slot = a.get(t.u32, v_probe)?;
        let at = a.index(table, slot, SLOT_BYTES as u64)?;
        // The slot's key and device address in one 16-byte load, before the compare: one
        // memory instruction a probe (a slot is 16 bytes at a 16-byte-aligned offset).
        let both = a.ld64x2(at)?;
        let key = a.inst_literal(Op::CompositeExtract, t.u64, both, 0)?;
        let dev = a.inst_literal(Op::CompositeExtract, t.u64, both, 1)?;
        let masked = a.and(t.u64, key, test.mask)?;
        let found = a.eq(masked, test.want)?;
        a.if_else(
            found,
            |a| {
                a.set(v_dev, dev)?;
                a.set(v_slot, slot)?;
                let first_bit = a.c64(u64::from(KEY_CHUNK_BITS));
                let excluded = a.shr(t.u64, key, first_bit)?;
                let excluded = a.narrow(excluded)?;
                a.set(v_excluded, excluded)?;
                let f = a.cbool(false);
                a.set(v_live, f)
            },
            |a| {
                let is_empty = a.eq(key, empty)?;
                a.if_else(
                    is_empty,
                    |a| {
                        let f = a.cbool(false);
                        a.set(v_live, f)
                    },
                    |a| {
                        let one = a.c32(1);
                        let next = a.add(t.u32, slot, one)?;
                        let next = a.and(t.u32, next, mask)?;
                        a.set(v_probe, next)
                    },
                )
            },
        )?;
        let n = a.get(t.u32, v_n)?;
        let one = a.c32(1);
        let n1 = a.add(t.u32, n, one)?;
        a.set(v_n, n1)
    };
    if a.shape.first_probe_unrolled {
        // The home slot before the loop: a hit there (most hits) never enters it.
        let first = searching(a)?;
        a.if_(first, probe)?;
    }
    a.while_(searching, probe)?;
    let dev = a.get(t.u64, v_dev)?;
    let slot = a.get(t.u32, v_slot)?;
    let probes = a.get(t.u32, v_n)?;
    let excluded = a.get(t.u32, v_excluded)?;
    let hit = a.inst(
        Op::CompositeConstruct,
        t.hit,
        &[dev, slot, probes, excluded],
    )?;
    a.b.ret_value(hit).map_err(|e| a.err(e))?;
    a.end_function()?;
    Ok(f)
}

/// The helper alone in a minimal module (a compute entry point that calls it once): what the
/// golden `lookup_helper.spvasm` holds.
pub fn lookup_helper_module() -> R<Vec<u32>> {
    let mut a = Asm::new("lookup_helper");
    let lookup = emit_lookup(&mut a)?;
    let t = a.t;
    let (main, _) = a.begin_function(t.void, &[], "main")?;
    let chunk = a.push_u64(push::RECORDS)?;
    let part = a.push_word(push::VALUES)?;
    let hit = a.call(t.hit, lookup, &[chunk, part])?;
    let slot = a.extract(hit, 1)?;
    let out = a.push_u64(push::OUT)?;
    a.st32(out, slot)?;
    a.end_void_function()?;
    a.entry(main, "main", 1);
    Ok(a.finish())
}
