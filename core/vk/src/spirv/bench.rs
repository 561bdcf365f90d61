//! The microbenchmark kernels of the lookup helper (T5), behind the `bench` feature: one module
//! with three entry points that do the same random 4-byte loads through the helper, by raw device
//! address, and through a flat page table. Only `crate::bench` runs them; nothing here calls Vulkan.

use rspirv::dr::Operand;
use rspirv::spirv::{self, Decoration, Op, StorageClass};

use super::asm::Asm;
use super::helper::emit_lookup;
use super::{R, push, record};
use dispatchscope_core::chunk_table::PARTS;

/// Workgroup size of the benchmark kernels.
pub const BENCH_LOCAL_SIZE: u32 = 64;

/// Which benchmark kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchKernel {
    /// Through the lookup helper (T5), guest addresses in.
    Helper,
    /// By raw device address (the limit), device addresses in.
    Raw,
    /// Through a flat page table of 4 KiB pages (the shadPS4-style anchor), guest addresses in.
    Flat,
}

impl BenchKernel {
    /// The entry point's name.
    pub fn entry(self) -> &'static std::ffi::CStr {
        match self {
            BenchKernel::Helper => c"through_helper",
            BenchKernel::Raw => c"by_raw_address",
            BenchKernel::Flat => c"through_flat_table",
        }
    }
}

/// The three microbenchmark kernels, one entry point each, all with [`BENCH_LOCAL_SIZE`]
/// invocations per workgroup: invocation `g` of `n` does loads `k * n + g` for `k` below the
/// per-invocation count, xors the 4-byte values and writes the result at `out[g]`.
pub fn bench_module() -> R<Vec<u32>> {
    let mut a = Asm::new("bench");
    let lookup = emit_lookup(&mut a)?;
    let t = a.t;
    let n3 = a.c32(3);
    let v3 = a.b.type_vector(t.u32, 3);
    let _ = n3;
    let p_in_v3 = a.b.type_pointer(None, StorageClass::Input, v3);
    let p_in_u32 = a.b.type_pointer(None, StorageClass::Input, t.u32);
    let gid_var = a.b.variable(p_in_v3, None, StorageClass::Input, None);
    a.b.decorate(
        gid_var,
        Decoration::BuiltIn,
        [Operand::BuiltIn(spirv::BuiltIn::GlobalInvocationId)],
    );
    a.interface.push(gid_var);
    for kernel in [BenchKernel::Helper, BenchKernel::Raw, BenchKernel::Flat] {
        let name = kernel.entry().to_string_lossy().into_owned();
        let (f, _) = a.begin_function(t.void, &[], &name)?;
        let v_k = a.var(t.p_fn_u32)?;
        let v_acc = a.var(t.p_fn_u32)?;
        let zero = a.c32(0);
        let gp = a.inst(Op::AccessChain, p_in_u32, &[gid_var, zero])?;
        let g = a.get(t.u32, gp)?;
        let total = a.push_word(push::FIRST)?;
        let per = a.push_word(push::COUNT)?;
        let addrs = a.push_u64(push::ADDRS)?;
        let out = a.push_u64(push::OUT)?;
        let shift = a.push_word(push::CHUNK_SHIFT)?;
        let one64 = a.c64(1);
        let cb = a.shl(t.u64, one64, shift)?;
        let cmask = a.sub(t.u64, cb, one64)?;
        let flat = a.push_u64(push::FLAT)?;
        let first_page = a.push_u64(push::FLAT_FIRST_PAGE)?;
        let pages = a.push_word(push::FLAT_PAGES)?;
        a.set(v_acc, zero)?;
        a.for_(v_k, per, |a, k| {
            let kn = a.mul(t.u32, k, total)?;
            let i = a.add(t.u32, kn, g)?;
            let at = a.index(addrs, i, 8)?;
            let addr = a.ld64(at)?;
            let v = match kernel {
                BenchKernel::Raw => a.ld32(addr)?,
                BenchKernel::Helper => {
                    // T5 as the replay does it: the first and the last byte's (chunk, part).
                    let part_bits = a.c32(PARTS.trailing_zeros());
                    let part_shift = a.sub(t.u32, shift, part_bits)?;
                    let last_part = a.c32(PARTS - 1);
                    let c0 = a.shr(t.u64, addr, shift)?;
                    let q0 = a.shr(t.u64, addr, part_shift)?;
                    let p0 = a.narrow(q0)?;
                    let p0 = a.and(t.u32, p0, last_part)?;
                    let three = a.c64(3);
                    let last = a.add(t.u64, addr, three)?;
                    let q1 = a.shr(t.u64, last, part_shift)?;
                    let h0 = a.call(t.hit, lookup, &[c0, p0])?;
                    let split = a.ne(q1, q0)?;
                    a.if_(split, |a| {
                        let c1 = a.shr(t.u64, last, shift)?;
                        let p1 = a.narrow(q1)?;
                        let p1 = a.and(t.u32, p1, last_part)?;
                        a.call(t.hit, lookup, &[c1, p1]).map(|_| ())
                    })?;
                    let d0 = a.extract(h0, 0)?;
                    let s0 = a.extract(h0, 1)?;
                    let none = a.c32(record::NO_SLOT);
                    let hit = a.ne(s0, none)?;
                    let off = a.and(t.u64, addr, cmask)?;
                    let dev = a.add(t.u64, d0, off)?;
                    let v_v = a.var(t.p_fn_u32)?;
                    let z = a.c32(0);
                    a.set(v_v, z)?;
                    a.if_(hit, |a| {
                        let v = a.ld32(dev)?;
                        a.set(v_v, v)
                    })?;
                    a.get(t.u32, v_v)?
                }
                BenchKernel::Flat => {
                    let twelve = a.c64(12);
                    let page = a.shr(t.u64, addr, twelve)?;
                    let rel = a.sub(t.u64, page, first_page)?;
                    let pages64 = a.widen(pages)?;
                    let inside = a.ult(rel, pages64)?;
                    let v_v = a.var(t.p_fn_u32)?;
                    let z = a.c32(0);
                    a.set(v_v, z)?;
                    a.if_(inside, |a| {
                        let eight = a.c64(8);
                        let off = a.mul(t.u64, rel, eight)?;
                        let pa = a.add(t.u64, flat, off)?;
                        let base = a.ld64(pa)?;
                        let z64 = a.c64(0);
                        let mapped = a.ne(base, z64)?;
                        a.if_(mapped, |a| {
                            let m = a.c64(0xfff);
                            let o = a.and(t.u64, addr, m)?;
                            let dev = a.add(t.u64, base, o)?;
                            let v = a.ld32(dev)?;
                            a.set(v_v, v)
                        })
                    })?;
                    a.get(t.u32, v_v)?
                }
            };
            let acc = a.get(t.u32, v_acc)?;
            let acc = a.xor(t.u32, acc, v)?;
            a.set(v_acc, acc)
        })?;
        let acc = a.get(t.u32, v_acc)?;
        let o = a.index(out, g, 4)?;
        a.st32(o, acc)?;
        a.end_void_function()?;
        a.entry(f, &name, BENCH_LOCAL_SIZE);
    }
    Ok(a.finish())
}
