//! Memory access over [`Asm`]: loads and stores through pointers, device addresses as
//! PhysicalStorageBuffer pointers (the table, the replay's buffers, guest memory), single bytes
//! through their aligned 32-bit words (no 8-bit storage feature is needed), the device-scope atomic
//! counter of the escape log and the marks (T4, C1) with the marks' summary ([`Asm::mark`]), and
//! the words of the push block (T3).

use rspirv::dr::Operand;
use rspirv::spirv::{self, MemoryAccess, Op, Word};

use super::R;
use super::asm::Asm;
use dispatchscope_core::chunk_table::MARK_BLOCK_SLOTS;

const _: () = assert!(
    MARK_BLOCK_SLOTS.is_power_of_two(),
    "a slot's summary word is its number shifted right"
);

impl Asm {
    pub(super) fn load(&mut self, ty: Word, ptr: Word, align: Option<u32>) -> R<Word> {
        let (ma, extra) = memory_access(align);
        self.b
            .load(ty, None, ptr, ma, extra)
            .map_err(|e| self.err(e))
    }

    pub(super) fn store(&mut self, ptr: Word, val: Word, align: Option<u32>) -> R<()> {
        let (ma, extra) = memory_access(align);
        self.b.store(ptr, val, ma, extra).map_err(|e| self.err(e))
    }

    /// `addr` as a PhysicalStorageBuffer pointer of type `ptr_ty`.
    fn device_ptr(&mut self, ptr_ty: Word, addr: Word) -> R<Word> {
        self.inst(Op::ConvertUToPtr, ptr_ty, &[addr])
    }

    /// A u32 at device address `addr` (4-byte aligned).
    pub(super) fn ld32(&mut self, addr: Word) -> R<Word> {
        let p = self.device_ptr(self.t.p_psb_u32, addr)?;
        self.load(self.t.u32, p, Some(4))
    }

    /// A u64 at device address `addr` (8-byte aligned): a flat page table's entry.
    pub(super) fn ld64(&mut self, addr: Word) -> R<Word> {
        let p = self.device_ptr(self.t.p_psb_u64, addr)?;
        self.load(self.t.u64, p, Some(8))
    }

    pub(super) fn st32(&mut self, addr: Word, val: Word) -> R<()> {
        let p = self.device_ptr(self.t.p_psb_u32, addr)?;
        self.store(p, val, Some(4))
    }

    /// `*addr += 1` atomically (device scope, relaxed); returns the old value.
    pub(super) fn atomic_inc(&mut self, addr: Word) -> R<Word> {
        let p = self.device_ptr(self.t.p_psb_u32, addr)?;
        let scope = self.c32(spirv::Scope::Device as u32);
        let sem = self.c32(0);
        let one = self.c32(1);
        self.b
            .atomic_i_add(self.t.u32, None, p, scope, sem, one)
            .map_err(|e| self.err(e))
    }

    /// C1: marks table slot `slot` (a u32 id) in the mark buffer at device address `marks`: one
    /// is added to its mark word (device-scope atomic), and its block's summary word, after the
    /// table's `capacity` mark words (`capacity` from push word 19, the table's `log2`), is set to
    /// 1 by a plain store: every lane that sets it stores the same value, and the host reads the
    /// summary only after the dispatch (`chunk_table::mark_buffer_words`). A mark without its
    /// summary word would be lost: the backend reads only the blocks the summary names.
    pub(super) fn mark(&mut self, marks: Word, slot: Word) -> R<()> {
        let u32_ = self.t.u32;
        let at = self.index(marks, slot, 4)?;
        self.atomic_inc(at)?;
        let log2 = self.push_word(super::push::CAPACITY_LOG2)?;
        let one = self.c32(1);
        let capacity = self.shl(u32_, one, log2)?;
        let block_shift = self.c32(MARK_BLOCK_SLOTS.trailing_zeros());
        let block = self.shr(u32_, slot, block_shift)?;
        let summary = self.add(u32_, capacity, block)?;
        let at = self.index(marks, summary, 4)?;
        self.st32(at, one)
    }

    /// `*addr += v` atomically (device scope, relaxed); returns the old value.
    pub(super) fn atomic_add(&mut self, addr: Word, v: Word) -> R<Word> {
        let p = self.device_ptr(self.t.p_psb_u32, addr)?;
        let scope = self.c32(spirv::Scope::Device as u32);
        let sem = self.c32(0);
        self.b
            .atomic_i_add(self.t.u32, None, p, scope, sem, v)
            .map_err(|e| self.err(e))
    }

    /// `*addr = max(*addr, v)` atomically, unsigned (device scope, relaxed).
    pub(super) fn atomic_umax(&mut self, addr: Word, v: Word) -> R<Word> {
        let p = self.device_ptr(self.t.p_psb_u32, addr)?;
        let scope = self.c32(spirv::Scope::Device as u32);
        let sem = self.c32(0);
        self.b
            .atomic_u_max(self.t.u32, None, p, scope, sem, v)
            .map_err(|e| self.err(e))
    }

    /// `*addr += v` on the u64 at device address `addr` (8-byte aligned), atomically (device
    /// scope, relaxed), its old value unused: a 64-bit counter without a carry (Int64Atomics,
    /// `shaderBufferInt64Atomics`).
    pub(super) fn atomic_add64(&mut self, addr: Word, v: Word) -> R<()> {
        self.capability(spirv::Capability::Int64Atomics);
        let p = self.device_ptr(self.t.p_psb_u64, addr)?;
        let scope = self.c32(spirv::Scope::Device as u32);
        let sem = self.c32(0);
        self.b
            .atomic_i_add(self.t.u64, None, p, scope, sem, v)
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// `op` (`AtomicIAdd` or `AtomicUMax`) of `x` (a u32) over the subgroup's active lanes
    /// (`OpGroupNonUniformIAdd`/`UMax`, Reduce): every lane gets the result.
    pub(super) fn subgroup_reduce(&mut self, op: Op, x: Word) -> R<Word> {
        self.capability(spirv::Capability::GroupNonUniform);
        self.capability(spirv::Capability::GroupNonUniformArithmetic);
        let scope = self.c32(spirv::Scope::Subgroup as u32);
        let u32_ = self.t.u32;
        let reduce = spirv::GroupOperation::Reduce;
        match op {
            Op::AtomicUMax => self
                .b
                .group_non_uniform_u_max(u32_, None, scope, reduce, x, None),
            _ => self
                .b
                .group_non_uniform_i_add(u32_, None, scope, reduce, x, None),
        }
        .map_err(|e| self.err(e))
    }

    /// Whether every active lane of the subgroup holds the same `x`
    /// (`OpGroupNonUniformAllEqual`): the same answer in every lane.
    pub(super) fn subgroup_all_equal(&mut self, x: Word) -> R<Word> {
        self.capability(spirv::Capability::GroupNonUniform);
        self.capability(spirv::Capability::GroupNonUniformVote);
        let scope = self.c32(spirv::Scope::Subgroup as u32);
        let bool_ = self.t.bool_;
        self.b
            .group_non_uniform_all_equal(bool_, None, scope, x)
            .map_err(|e| self.err(e))
    }

    /// True in one active lane of the subgroup (`OpGroupNonUniformElect`).
    pub(super) fn subgroup_elect(&mut self) -> R<Word> {
        self.capability(spirv::Capability::GroupNonUniform);
        let scope = self.c32(spirv::Scope::Subgroup as u32);
        let bool_ = self.t.bool_;
        self.b
            .group_non_uniform_elect(bool_, None, scope)
            .map_err(|e| self.err(e))
    }

    /// The 16 bytes at device address `addr` (16-byte aligned) as two u64: one load instruction.
    pub(super) fn ld64x2(&mut self, addr: Word) -> R<Word> {
        let v2 = self.b.type_vector(self.t.u64, 2);
        let p_ty = self
            .b
            .type_pointer(None, spirv::StorageClass::PhysicalStorageBuffer, v2);
        let p = self.device_ptr(p_ty, addr)?;
        self.load(v2, p, Some(16))
    }

    /// `*ptr op= v` atomically on a `Workgroup` u32 (workgroup scope, relaxed), `op` one of
    /// `AtomicIAdd` and `AtomicUMax`; returns the old value.
    pub(super) fn workgroup_atomic(&mut self, op: Op, ptr: Word, v: Word) -> R<Word> {
        let scope = self.c32(spirv::Scope::Workgroup as u32);
        let sem = self.c32(0);
        let u32_ = self.t.u32;
        match op {
            Op::AtomicUMax => self.b.atomic_u_max(u32_, None, ptr, scope, sem, v),
            _ => self.b.atomic_i_add(u32_, None, ptr, scope, sem, v),
        }
        .map_err(|e| self.err(e))
    }

    /// A workgroup barrier: every lane of the workgroup waits here, and workgroup memory written
    /// before it is seen after it.
    pub(super) fn workgroup_barrier(&mut self) -> R<()> {
        let scope = self.c32(spirv::Scope::Workgroup as u32);
        let sem = self.c32(
            (spirv::MemorySemantics::ACQUIRE_RELEASE | spirv::MemorySemantics::WORKGROUP_MEMORY)
                .bits(),
        );
        self.b
            .control_barrier(scope, scope, sem)
            .map_err(|e| self.err(e))
    }

    /// The byte at device address `addr`, read through its aligned word.
    pub(super) fn load_byte(&mut self, addr: Word) -> R<Word> {
        let m = self.c64(!3);
        let wa = self.and(self.t.u64, addr, m)?;
        let w = self.ld32(wa)?;
        let sh = self.byte_shift64(addr)?;
        let v = self.shr(self.t.u32, w, sh)?;
        let ff = self.c32(0xff);
        self.and(self.t.u32, v, ff)
    }

    /// Writes the byte `byte` at device address `addr`, through its aligned word.
    pub(super) fn store_byte(&mut self, addr: Word, byte: Word) -> R<()> {
        let m = self.c64(!3);
        let wa = self.and(self.t.u64, addr, m)?;
        let w = self.ld32(wa)?;
        let sh = self.byte_shift64(addr)?;
        let nw = self.merge_byte(w, byte, sh)?;
        self.st32(wa, nw)
    }

    /// `(addr & 3) * 8` as u32.
    pub(super) fn byte_shift64(&mut self, addr: Word) -> R<Word> {
        let lo = self.narrow(addr)?;
        self.byte_shift32(lo)
    }

    pub(super) fn byte_shift32(&mut self, x: Word) -> R<Word> {
        let three = self.c32(3);
        let low = self.and(self.t.u32, x, three)?;
        self.shl(self.t.u32, low, three)
    }

    /// `(word & !(0xff << sh)) | (byte << sh)`.
    pub(super) fn merge_byte(&mut self, word: Word, byte: Word, sh: Word) -> R<Word> {
        let ff = self.c32(0xff);
        let m = self.shl(self.t.u32, ff, sh)?;
        let nm = self.not(self.t.u32, m)?;
        let kept = self.and(self.t.u32, word, nm)?;
        let b = self.shl(self.t.u32, byte, sh)?;
        self.or(self.t.u32, kept, b)
    }

    /// Push word `k`; in the header form ([`Asm::header_form`]) the helper's words (16–31) are
    /// read from the header whose device address push words 30–31 carry, one load each.
    pub(super) fn push_word(&mut self, k: u32) -> R<Word> {
        if self.header_form && (super::library::HEADER_FIRST_WORD..32).contains(&k) {
            let lo = self.raw_push_word(super::DEVICE_TABLE_PUSH_WORD)?;
            let hi = self.raw_push_word(super::DEVICE_TABLE_PUSH_WORD + 1)?;
            let header = self.join(lo, hi)?;
            let at = self.add64c(header, 4 * u64::from(k - super::library::HEADER_FIRST_WORD))?;
            return self.ld32(at);
        }
        self.raw_push_word(k)
    }

    /// Push word `k` from the push block itself.
    fn raw_push_word(&mut self, k: u32) -> R<Word> {
        let zero = self.c32(0);
        let kk = self.c32(k);
        let p = self.inst(
            Op::AccessChain,
            self.t.p_push_u32,
            &[self.push_var, zero, kk],
        )?;
        self.load(self.t.u32, p, None)
    }

    pub(super) fn push_u64(&mut self, k: u32) -> R<Word> {
        let lo = self.push_word(k)?;
        let hi = self.push_word(k + 1)?;
        self.join(lo, hi)
    }
}

/// The memory operands of an access: `Aligned` with its alignment, or none.
fn memory_access(align: Option<u32>) -> (Option<MemoryAccess>, Vec<Operand>) {
    match align {
        Some(a) => (Some(MemoryAccess::ALIGNED), vec![Operand::LiteralBit32(a)]),
        None => (None, Vec::new()),
    }
}
