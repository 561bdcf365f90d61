//! The translated module, built with rspirv: the one lookup helper every device access calls (T5),
//! the access-replay compute shader around it, the microbenchmark kernels, and their validation with
//! spirv-tools (Debian's `spirv-val`) before any of them reaches a driver.
//!
//! The helper is emitted by one function, `emit_lookup`, into every module that needs it, so the
//! golden disassembly of [`lookup_helper_module`] (`core/tests/golden/lookup_helper.spvasm`) is the
//! helper the replay runs. Nothing here calls Vulkan.
//!
//! # The push block (T3)
//! 32 little-endian words (128 bytes, the least every device gives). Words 30 and 31 hold the chunk
//! table's device address ([`dispatchscope_core::rules::DEVICE_TABLE_PUSH_WORD`]); the helper also reads the
//! table's `capacity_log2` (word 19), probe bound (word 20) and hash multiplier (words 28 and 29).
//! Words 0 to 18 carry the replay's own
//! buffers ([`push`]): the replay shader is not the guest's program, and the engine has already
//! resolved every base the guest's push words carried (O10), so they are not needed on the device.
//!
//! # The replay (one invocation, serial, in stream order)
//! The host encodes each access as an 8-word record ([`record`]). A single invocation walks them in
//! stream order, byte by byte, with 32-bit words and shifts (no 8-bit storage feature is needed):
//! bound accesses through descriptor arrays (binding 0: holders bound at each slot's member offset,
//! binding 1: write masks at the same offsets, O6–O9), device accesses through two lookups (T5) and
//! raw device addresses, LDS and scratch through storage-buffer regions the host assigns (one per
//! workgroup, one per lane: lavapipe's 32 KiB of workgroup memory is less than the 64 KiB of LDS a
//! workgroup has, and regions survive when a job is split over several dispatches). A miss reads
//! zero, drops the store and appends (access, first escaped address) to an escape log with an
//! atomic counter (T4); each store adds one to the mark word of each chunk slot it hit (C1).

use std::collections::HashMap;

use rspirv::dr::{Builder, InsertPoint, Instruction, Operand};
use rspirv::spirv::{
    self, AddressingModel, Capability, Decoration, ExecutionMode, ExecutionModel, FunctionControl,
    LoopControl, MemoryAccess, MemoryModel, Op, SelectionControl, StorageClass, Word,
};

use crate::VkError;
use dispatchscope_core::chunk_table::{EMPTY_KEY, SLOT_BYTES};
use dispatchscope_core::input::Format;
use dispatchscope_core::rules::DEVICE_TABLE_PUSH_WORD;

/// Push-block word indices.
pub mod push {
    /// Replay: device address of the access records (2 words).
    pub const RECORDS: u32 = 0;
    /// Replay: device address of the store values (2 words).
    pub const VALUES: u32 = 2;
    /// Replay and bench: device address of the per-access (per-invocation) outputs (2 words).
    pub const OUT: u32 = 4;
    /// Replay: device address of the escape log (2 words).
    pub const LOG: u32 = 6;
    /// Replay: device address of the mark words, one per table slot (2 words).
    pub const MARKS: u32 = 8;
    /// Replay: device address of the first LDS region (2 words).
    pub const LDS: u32 = 10;
    /// Replay: device address of the first scratch region (2 words).
    pub const SCRATCH: u32 = 12;
    /// Replay: bytes between LDS regions.
    pub const LDS_STRIDE: u32 = 14;
    /// Replay: bytes between scratch regions.
    pub const SCRATCH_STRIDE: u32 = 15;
    /// Replay: first access of this dispatch. Bench: invocations in all.
    pub const FIRST: u32 = 16;
    /// Replay: accesses in this dispatch. Bench: loads per invocation.
    pub const COUNT: u32 = 17;
    /// `log2(chunk bytes)` (T1).
    pub const CHUNK_SHIFT: u32 = 18;
    /// `log2(table capacity)`, read by the helper.
    pub const CAPACITY_LOG2: u32 = 19;
    /// The probe bound (T2), read by the helper.
    pub const PROBE_BOUND: u32 = 20;
    /// Bench: device address of the flat page table (2 words).
    pub const FLAT: u32 = 22;
    /// Bench: the first guest page the flat table covers, as a page number (2 words).
    pub const FLAT_FIRST_PAGE: u32 = 24;
    /// Bench: the flat table's pages.
    pub const FLAT_PAGES: u32 = 26;
    /// The chunk table's hash multiplier (2 words), read by the helper (T2).
    pub const MULTIPLIER: u32 = 28;
    /// Bench: device address of the guest addresses to load (2 words).
    pub const ADDRS: u32 = 0;
    /// T3: the chunk table's device address (2 words).
    pub const TABLE: u32 = super::DEVICE_TABLE_PUSH_WORD;
}

/// The replay's access record: 8 little-endian words.
pub mod record {
    /// Words per record.
    pub const WORDS: usize = 8;
    /// Word 0, bits 0–7: the route.
    pub const BOUND: u32 = 0;
    /// Route: guest memory by device address.
    pub const DEVICE: u32 = 1;
    /// Route: the workgroup's LDS region.
    pub const LDS: u32 = 2;
    /// Route: the lane's scratch region.
    pub const SCRATCH: u32 = 3;
    /// Word 0, bits 8–15: 1 for a store.
    pub const STORE: u32 = 1 << 8;
    /// Word 0, bits 16–23: 1 for R8G8B8A8_UNORM (every other format is byte for byte untyped).
    pub const UNORM: u32 = 1 << 16;
    /// Words per access output: 16 values, slot 0, slot 1, device address (2 words).
    pub const OUT_WORDS: usize = 20;
    /// A slot word meaning "no slot" (a miss, or no second chunk).
    pub const NO_SLOT: u32 = u32::MAX;
    /// Bytes before the first escape-log entry (the counter is word 0).
    pub const LOG_HEADER_BYTES: u64 = 16;
    /// Bytes per escape-log entry: access, address low, address high, 0.
    pub const LOG_ENTRY_BYTES: u64 = 16;
}

/// Workgroup size of the benchmark kernels.
pub const BENCH_LOCAL_SIZE: u32 = 64;

type R<T> = Result<T, VkError>;

#[derive(Clone, Copy)]
struct Types {
    void: Word,
    bool_: Word,
    u32: Word,
    u64: Word,
    f32: Word,
    p_psb_u32: Word,
    p_psb_u64: Word,
    p_fn_u32: Word,
    p_fn_u64: Word,
    p_push_u32: Word,
    hit: Word,
}

/// A thin layer over rspirv's builder: cached constants, typed ops, structured control flow.
struct Asm {
    module: &'static str,
    b: Builder,
    c32: HashMap<u32, Word>,
    c64: HashMap<u64, Word>,
    cf: HashMap<u32, Word>,
    cb: HashMap<bool, Word>,
    t: Types,
    push_var: Word,
    interface: Vec<Word>,
}

impl Asm {
    fn new(module: &'static str) -> Self {
        let mut b = Builder::new();
        b.set_version(1, 5);
        b.capability(Capability::Shader);
        b.capability(Capability::Int64);
        b.capability(Capability::PhysicalStorageBufferAddresses);
        b.memory_model(
            AddressingModel::PhysicalStorageBuffer64,
            MemoryModel::GLSL450,
        );
        let void = b.type_void();
        let bool_ = b.type_bool();
        let u32_ = b.type_int(32, 0);
        let u64_ = b.type_int(64, 0);
        let f32_ = b.type_float(32);
        let p_psb_u32 = b.type_pointer(None, StorageClass::PhysicalStorageBuffer, u32_);
        let p_psb_u64 = b.type_pointer(None, StorageClass::PhysicalStorageBuffer, u64_);
        let p_fn_u32 = b.type_pointer(None, StorageClass::Function, u32_);
        let p_fn_u64 = b.type_pointer(None, StorageClass::Function, u64_);
        let p_push_u32 = b.type_pointer(None, StorageClass::PushConstant, u32_);
        let hit = b.type_struct([u64_, u32_]);
        b.name(hit, "Hit");
        b.member_name(hit, 0, "device_addr");
        b.member_name(hit, 1, "slot");
        let mut a = Self {
            module,
            b,
            c32: HashMap::new(),
            c64: HashMap::new(),
            cf: HashMap::new(),
            cb: HashMap::new(),
            t: Types {
                void,
                bool_,
                u32: u32_,
                u64: u64_,
                f32: f32_,
                p_psb_u32,
                p_psb_u64,
                p_fn_u32,
                p_fn_u64,
                p_push_u32,
                hit,
            },
            push_var: 0,
            interface: Vec::new(),
        };
        let n = a.c32(32);
        let words = a.b.type_array(u32_, n);
        a.b.decorate(words, Decoration::ArrayStride, [Operand::LiteralBit32(4)]);
        let block = a.b.type_struct([words]);
        a.b.name(block, "PushBlock");
        a.b.member_name(block, 0, "words");
        a.b.decorate(block, Decoration::Block, []);
        a.b.member_decorate(block, 0, Decoration::Offset, [Operand::LiteralBit32(0)]);
        let p_block = a.b.type_pointer(None, StorageClass::PushConstant, block);
        a.push_var =
            a.b.variable(p_block, None, StorageClass::PushConstant, None);
        a.b.name(a.push_var, "push");
        a.interface.push(a.push_var);
        a
    }

    fn err(&self, e: rspirv::dr::Error) -> VkError {
        VkError::Build {
            module: self.module,
            why: e.to_string(),
        }
    }

    fn c32(&mut self, v: u32) -> Word {
        if let Some(&id) = self.c32.get(&v) {
            return id;
        }
        let id = self.b.constant_bit32(self.t.u32, v);
        self.c32.insert(v, id);
        id
    }

    fn c64(&mut self, v: u64) -> Word {
        if let Some(&id) = self.c64.get(&v) {
            return id;
        }
        let id = self.b.constant_bit64(self.t.u64, v);
        self.c64.insert(v, id);
        id
    }

    fn cf(&mut self, v: f32) -> Word {
        let bits = v.to_bits();
        if let Some(&id) = self.cf.get(&bits) {
            return id;
        }
        let id = self.b.constant_bit32(self.t.f32, bits);
        self.cf.insert(bits, id);
        id
    }

    fn cbool(&mut self, v: bool) -> Word {
        if let Some(&id) = self.cb.get(&v) {
            return id;
        }
        let id = if v {
            self.b.constant_true(self.t.bool_)
        } else {
            self.b.constant_false(self.t.bool_)
        };
        self.cb.insert(v, id);
        id
    }

    fn inst(&mut self, op: Op, ty: Word, operands: &[Word]) -> R<Word> {
        let id = self.b.id();
        let inst = Instruction::new(
            op,
            Some(ty),
            Some(id),
            operands.iter().map(|&w| Operand::IdRef(w)).collect(),
        );
        self.b
            .insert_into_block(InsertPoint::End, inst)
            .map_err(|e| self.err(e))?;
        Ok(id)
    }

    fn bin(&mut self, op: Op, ty: Word, x: Word, y: Word) -> R<Word> {
        self.inst(op, ty, &[x, y])
    }

    // Integer arithmetic; `ty` is the result type.
    fn add(&mut self, ty: Word, x: Word, y: Word) -> R<Word> {
        self.bin(Op::IAdd, ty, x, y)
    }
    fn sub(&mut self, ty: Word, x: Word, y: Word) -> R<Word> {
        self.bin(Op::ISub, ty, x, y)
    }
    fn mul(&mut self, ty: Word, x: Word, y: Word) -> R<Word> {
        self.bin(Op::IMul, ty, x, y)
    }
    fn and(&mut self, ty: Word, x: Word, y: Word) -> R<Word> {
        self.bin(Op::BitwiseAnd, ty, x, y)
    }
    fn or(&mut self, ty: Word, x: Word, y: Word) -> R<Word> {
        self.bin(Op::BitwiseOr, ty, x, y)
    }
    fn xor(&mut self, ty: Word, x: Word, y: Word) -> R<Word> {
        self.bin(Op::BitwiseXor, ty, x, y)
    }
    fn shl(&mut self, ty: Word, x: Word, y: Word) -> R<Word> {
        self.bin(Op::ShiftLeftLogical, ty, x, y)
    }
    fn shr(&mut self, ty: Word, x: Word, y: Word) -> R<Word> {
        self.bin(Op::ShiftRightLogical, ty, x, y)
    }
    fn not(&mut self, ty: Word, x: Word) -> R<Word> {
        self.inst(Op::Not, ty, &[x])
    }
    fn eq(&mut self, x: Word, y: Word) -> R<Word> {
        self.bin(Op::IEqual, self.t.bool_, x, y)
    }
    fn ne(&mut self, x: Word, y: Word) -> R<Word> {
        self.bin(Op::INotEqual, self.t.bool_, x, y)
    }
    fn ult(&mut self, x: Word, y: Word) -> R<Word> {
        self.bin(Op::ULessThan, self.t.bool_, x, y)
    }
    fn land(&mut self, x: Word, y: Word) -> R<Word> {
        self.bin(Op::LogicalAnd, self.t.bool_, x, y)
    }
    fn lor(&mut self, x: Word, y: Word) -> R<Word> {
        self.bin(Op::LogicalOr, self.t.bool_, x, y)
    }
    fn lnot(&mut self, x: Word) -> R<Word> {
        self.inst(Op::LogicalNot, self.t.bool_, &[x])
    }
    fn select(&mut self, ty: Word, c: Word, x: Word, y: Word) -> R<Word> {
        self.inst(Op::Select, ty, &[c, x, y])
    }
    fn widen(&mut self, x32: Word) -> R<Word> {
        self.inst(Op::UConvert, self.t.u64, &[x32])
    }
    fn narrow(&mut self, x64: Word) -> R<Word> {
        self.inst(Op::UConvert, self.t.u32, &[x64])
    }

    /// The high 32 bits of a u64.
    fn high(&mut self, x64: Word) -> R<Word> {
        let c = self.c64(32);
        let h = self.shr(self.t.u64, x64, c)?;
        self.narrow(h)
    }

    /// `lo | hi << 32`.
    fn join(&mut self, lo: Word, hi: Word) -> R<Word> {
        let lo = self.widen(lo)?;
        let hi = self.widen(hi)?;
        let c = self.c64(32);
        let hi = self.shl(self.t.u64, hi, c)?;
        self.or(self.t.u64, lo, hi)
    }

    /// `base + offset` with `offset` a u32 scaled by `scale`.
    fn index(&mut self, base: Word, i32_: Word, scale: u64) -> R<Word> {
        let i = self.widen(i32_)?;
        let s = self.c64(scale);
        let off = self.mul(self.t.u64, i, s)?;
        self.add(self.t.u64, base, off)
    }

    fn add64c(&mut self, x: Word, c: u64) -> R<Word> {
        let c = self.c64(c);
        self.add(self.t.u64, x, c)
    }

    fn load(&mut self, ty: Word, ptr: Word, align: Option<u32>) -> R<Word> {
        let (ma, extra) = match align {
            Some(a) => (Some(MemoryAccess::ALIGNED), vec![Operand::LiteralBit32(a)]),
            None => (None, Vec::new()),
        };
        self.b
            .load(ty, None, ptr, ma, extra)
            .map_err(|e| self.err(e))
    }

    fn store(&mut self, ptr: Word, val: Word, align: Option<u32>) -> R<()> {
        let (ma, extra) = match align {
            Some(a) => (Some(MemoryAccess::ALIGNED), vec![Operand::LiteralBit32(a)]),
            None => (None, Vec::new()),
        };
        self.b.store(ptr, val, ma, extra).map_err(|e| self.err(e))
    }

    /// A u32 at device address `addr` (4-byte aligned).
    fn ld32(&mut self, addr: Word) -> R<Word> {
        let p = self.inst(Op::ConvertUToPtr, self.t.p_psb_u32, &[addr])?;
        self.load(self.t.u32, p, Some(4))
    }

    /// A u64 at device address `addr` (8-byte aligned).
    fn ld64(&mut self, addr: Word) -> R<Word> {
        let p = self.inst(Op::ConvertUToPtr, self.t.p_psb_u64, &[addr])?;
        self.load(self.t.u64, p, Some(8))
    }

    fn st32(&mut self, addr: Word, val: Word) -> R<()> {
        let p = self.inst(Op::ConvertUToPtr, self.t.p_psb_u32, &[addr])?;
        self.store(p, val, Some(4))
    }

    /// `*addr += 1` atomically (device scope, relaxed); returns the old value.
    fn atomic_inc(&mut self, addr: Word) -> R<Word> {
        let p = self.inst(Op::ConvertUToPtr, self.t.p_psb_u32, &[addr])?;
        let scope = self.c32(spirv::Scope::Device as u32);
        let sem = self.c32(0);
        let one = self.c32(1);
        self.b
            .atomic_i_add(self.t.u32, None, p, scope, sem, one)
            .map_err(|e| self.err(e))
    }

    /// The byte at device address `addr`, read through its aligned word.
    fn load_byte(&mut self, addr: Word) -> R<Word> {
        let m = self.c64(!3);
        let wa = self.and(self.t.u64, addr, m)?;
        let w = self.ld32(wa)?;
        let sh = self.byte_shift64(addr)?;
        let v = self.shr(self.t.u32, w, sh)?;
        let ff = self.c32(0xff);
        self.and(self.t.u32, v, ff)
    }

    /// Writes the byte `byte` at device address `addr`, through its aligned word.
    fn store_byte(&mut self, addr: Word, byte: Word) -> R<()> {
        let m = self.c64(!3);
        let wa = self.and(self.t.u64, addr, m)?;
        let w = self.ld32(wa)?;
        let sh = self.byte_shift64(addr)?;
        let nw = self.merge_byte(w, byte, sh)?;
        self.st32(wa, nw)
    }

    /// `(addr & 3) * 8` as u32.
    fn byte_shift64(&mut self, addr: Word) -> R<Word> {
        let lo = self.narrow(addr)?;
        self.byte_shift32(lo)
    }

    fn byte_shift32(&mut self, x: Word) -> R<Word> {
        let three = self.c32(3);
        let low = self.and(self.t.u32, x, three)?;
        self.shl(self.t.u32, low, three)
    }

    /// `(word & !(0xff << sh)) | (byte << sh)`.
    fn merge_byte(&mut self, word: Word, byte: Word, sh: Word) -> R<Word> {
        let ff = self.c32(0xff);
        let m = self.shl(self.t.u32, ff, sh)?;
        let nm = self.not(self.t.u32, m)?;
        let kept = self.and(self.t.u32, word, nm)?;
        let b = self.shl(self.t.u32, byte, sh)?;
        self.or(self.t.u32, kept, b)
    }

    fn push_word(&mut self, k: u32) -> R<Word> {
        let zero = self.c32(0);
        let kk = self.c32(k);
        let p = self.inst(
            Op::AccessChain,
            self.t.p_push_u32,
            &[self.push_var, zero, kk],
        )?;
        self.load(self.t.u32, p, None)
    }

    fn push_u64(&mut self, k: u32) -> R<Word> {
        let lo = self.push_word(k)?;
        let hi = self.push_word(k + 1)?;
        self.join(lo, hi)
    }

    /// A Function variable of pointer type `ptr_ty`, declared at the top of the current function.
    fn var(&mut self, ptr_ty: Word) -> R<Word> {
        let id = self.b.id();
        let inst = Instruction::new(
            Op::Variable,
            Some(ptr_ty),
            Some(id),
            vec![Operand::StorageClass(StorageClass::Function)],
        );
        let f = self.b.selected_function().ok_or_else(|| VkError::Build {
            module: self.module,
            why: "a variable outside a function".into(),
        })?;
        let block = self
            .b
            .module_mut()
            .functions
            .get_mut(f)
            .and_then(|f| f.blocks.first_mut())
            .ok_or_else(|| VkError::Build {
                module: self.module,
                why: "a variable before the function's first block".into(),
            })?;
        block.instructions.insert(0, inst);
        Ok(id)
    }

    fn get(&mut self, ty: Word, var: Word) -> R<Word> {
        self.load(ty, var, None)
    }

    fn set(&mut self, var: Word, val: Word) -> R<()> {
        self.store(var, val, None)
    }

    fn begin(&mut self, label: Word) -> R<()> {
        self.b
            .begin_block(Some(label))
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    fn branch(&mut self, to: Word) -> R<()> {
        self.b.branch(to).map_err(|e| self.err(e))
    }

    /// `if cond { then }`.
    fn if_(&mut self, cond: Word, then: impl FnOnce(&mut Self) -> R<()>) -> R<()> {
        let then_l = self.b.id();
        let merge = self.b.id();
        self.b
            .selection_merge(merge, SelectionControl::NONE)
            .map_err(|e| self.err(e))?;
        self.b
            .branch_conditional(cond, then_l, merge, [])
            .map_err(|e| self.err(e))?;
        self.begin(then_l)?;
        then(self)?;
        self.branch(merge)?;
        self.begin(merge)
    }

    /// `if cond { then } else { els }`.
    fn if_else(
        &mut self,
        cond: Word,
        then: impl FnOnce(&mut Self) -> R<()>,
        els: impl FnOnce(&mut Self) -> R<()>,
    ) -> R<()> {
        let then_l = self.b.id();
        let else_l = self.b.id();
        let merge = self.b.id();
        self.b
            .selection_merge(merge, SelectionControl::NONE)
            .map_err(|e| self.err(e))?;
        self.b
            .branch_conditional(cond, then_l, else_l, [])
            .map_err(|e| self.err(e))?;
        self.begin(then_l)?;
        then(self)?;
        self.branch(merge)?;
        self.begin(else_l)?;
        els(self)?;
        self.branch(merge)?;
        self.begin(merge)
    }

    /// `while cond { body }`, in the header / condition / body / continue / merge shape.
    fn while_(
        &mut self,
        cond: impl FnOnce(&mut Self) -> R<Word>,
        body: impl FnOnce(&mut Self) -> R<()>,
    ) -> R<()> {
        let header = self.b.id();
        let cond_l = self.b.id();
        let body_l = self.b.id();
        let cont = self.b.id();
        let merge = self.b.id();
        self.branch(header)?;
        self.begin(header)?;
        self.b
            .loop_merge(merge, cont, LoopControl::NONE, [])
            .map_err(|e| self.err(e))?;
        self.branch(cond_l)?;
        self.begin(cond_l)?;
        let c = cond(self)?;
        self.b
            .branch_conditional(c, body_l, merge, [])
            .map_err(|e| self.err(e))?;
        self.begin(body_l)?;
        body(self)?;
        self.branch(cont)?;
        self.begin(cont)?;
        self.branch(header)?;
        self.begin(merge)
    }

    /// `for i in 0..n { body(i) }` over a u32 counter variable `counter`.
    fn for_(
        &mut self,
        counter: Word,
        n: Word,
        body: impl FnOnce(&mut Self, Word) -> R<()>,
    ) -> R<()> {
        let zero = self.c32(0);
        self.set(counter, zero)?;
        let u32_ = self.t.u32;
        self.while_(
            |a| {
                let i = a.get(u32_, counter)?;
                a.ult(i, n)
            },
            |a| {
                let i = a.get(u32_, counter)?;
                body(a, i)?;
                let one = a.c32(1);
                let next = a.add(u32_, i, one)?;
                a.set(counter, next)
            },
        )
    }

    fn begin_function(&mut self, ret: Word, params: &[Word], name: &str) -> R<(Word, Vec<Word>)> {
        let fty = self.b.type_function(ret, params.to_vec());
        let f = self
            .b
            .begin_function(ret, None, FunctionControl::NONE, fty)
            .map_err(|e| self.err(e))?;
        self.b.name(f, name);
        let mut ps = Vec::new();
        for &p in params {
            ps.push(self.b.function_parameter(p).map_err(|e| self.err(e))?);
        }
        self.b.begin_block(None).map_err(|e| self.err(e))?;
        Ok((f, ps))
    }

    fn end_function(&mut self) -> R<()> {
        self.b.end_function().map_err(|e| self.err(e))
    }

    fn call(&mut self, ret: Word, f: Word, args: &[Word]) -> R<Word> {
        self.b
            .function_call(ret, None, f, args.to_vec())
            .map_err(|e| self.err(e))
    }

    fn entry(&mut self, f: Word, name: &str, local_size: u32) {
        self.b
            .entry_point(ExecutionModel::GLCompute, f, name, self.interface.clone());
        self.b
            .execution_mode(f, ExecutionMode::LocalSize, [local_size, 1, 1]);
    }

    fn finish(self) -> Vec<u32> {
        use rspirv::binary::Assemble;
        self.b.module().assemble()
    }
}

/// T5: emits the lookup helper, `Hit lookup(u64 guest_chunk)`: the device address of the chunk's
/// first byte and its table slot, or address 0 and slot `NO_SLOT` on a miss.
///
/// Bit for bit [`dispatchscope_core::chunk_table::home_slot`] and the table's bounded probe: the home slot is
/// `(k * multiplier) >> (64 - capacity_log2)` (0 when `capacity_log2` is 0); up to `probe_bound`
/// consecutive 16-byte slots (wrapping) are read until the key (a hit) or the empty key (a miss). The
/// table's address, `capacity_log2`, the bound and the multiplier come from the push block.
fn emit_lookup(a: &mut Asm) -> R<Word> {
    let t = a.t;
    let (f, params) = a.begin_function(t.hit, &[t.u64], "lookup")?;
    let chunk = params.first().copied().unwrap_or_default();
    a.b.name(chunk, "guest_chunk");
    let v_slot = a.var(t.p_fn_u32)?;
    let v_dev = a.var(t.p_fn_u64)?;
    let v_probe = a.var(t.p_fn_u32)?;
    let v_n = a.var(t.p_fn_u32)?;
    let p_fn_bool = a.b.type_pointer(None, StorageClass::Function, t.bool_);
    let v_live = a.var(p_fn_bool)?;
    a.b.name(v_slot, "slot");
    a.b.name(v_dev, "device_addr");
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
    // home = (k * multiplier) >> (64 - log2), or 0 when log2 == 0.
    let h = a.mul(t.u64, chunk, multiplier)?;
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
    let z64 = a.c64(0);
    a.set(v_probe, home)?;
    a.set(v_n, zero)?;
    a.set(v_slot, none)?;
    a.set(v_dev, z64)?;
    let empty = a.c64(EMPTY_KEY);
    let not_empty_key = a.ne(chunk, empty)?;
    a.set(v_live, not_empty_key)?;
    a.while_(
        |a| {
            let live = a.get(t.bool_, v_live)?;
            let n = a.get(t.u32, v_n)?;
            let more = a.ult(n, bound)?;
            a.land(live, more)
        },
        |a| {
            let slot = a.get(t.u32, v_probe)?;
            let at = a.index(table, slot, SLOT_BYTES as u64)?;
            let key = a.ld64(at)?;
            let found = a.eq(key, chunk)?;
            a.if_else(
                found,
                |a| {
                    let at8 = a.add64c(at, 8)?;
                    let dev = a.ld64(at8)?;
                    a.set(v_dev, dev)?;
                    a.set(v_slot, slot)?;
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
        },
    )?;
    let dev = a.get(t.u64, v_dev)?;
    let slot = a.get(t.u32, v_slot)?;
    let hit = a.inst(Op::CompositeConstruct, t.hit, &[dev, slot])?;
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
    let hit = a.call(t.hit, lookup, &[chunk])?;
    let slot = extract(&mut a, hit, 1)?;
    let out = a.push_u64(push::OUT)?;
    a.st32(out, slot)?;
    a.b.ret().map_err(|e| a.err(e))?;
    a.end_function()?;
    a.entry(main, "main", 1);
    let words = a.finish();
    validate("lookup_helper", &words)?;
    Ok(words)
}

/// `hit.device_addr` (index 0) or `hit.slot` (index 1).
fn extract(a: &mut Asm, hit: Word, index: u32) -> R<Word> {
    let id = a.b.id();
    let inst = Instruction::new(
        Op::CompositeExtract,
        Some(if index == 0 { a.t.u64 } else { a.t.u32 }),
        Some(id),
        vec![Operand::IdRef(hit), Operand::LiteralBit32(index)],
    );
    a.b.insert_into_block(InsertPoint::End, inst)
        .map_err(|e| a.err(e))?;
    Ok(id)
}

/// R8G8B8A8_UNORM decode of every byte, exactly as [`Format::decode`] computes it (`c / 255.0` in
/// f32, correctly rounded on the host; a device's division need not be).
fn unorm_decode_table() -> Vec<u32> {
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

/// The access-replay module, with `slots` storage-buffer descriptors in each of its two arrays.
pub fn replay_module(slots: u32) -> R<Vec<u32>> {
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
            // T5: two lookups, the first byte's chunk and the last byte's chunk.
            let c0 = a.shr(t.u64, addr, shift)?;
            let size64 = a.widen(size)?;
            let after = a.add(t.u64, addr, size64)?;
            let last = a.sub(t.u64, after, one64)?;
            let c1 = a.shr(t.u64, last, shift)?;
            let split = a.ne(c1, c0)?;
            let z64 = a.c64(0);
            a.set(v_s0, none)?;
            a.set(v_s1, none)?;
            a.set(v_d0, z64)?;
            a.set(v_d1, z64)?;
            a.if_(is_dev, |a| {
                let h0 = a.call(t.hit, lookup, &[c0])?;
                let s0 = extract(a, h0, 1)?;
                let d0 = extract(a, h0, 0)?;
                a.set(v_s0, s0)?;
                a.set(v_d0, d0)?;
                a.if_else(
                    split,
                    |a| {
                        let h1 = a.call(t.hit, lookup, &[c1])?;
                        let s1 = extract(a, h1, 1)?;
                        let d1 = extract(a, h1, 0)?;
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
                            let two = a.c32(2);
                            let wi = a.shr(t.u32, i, two)?;
                            let p = a.inst(Op::AccessChain, t.p_fn_u32, &[vals, wi])?;
                            let w = a.get(t.u32, p)?;
                            let sh = a.byte_shift32(i)?;
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
                        let ch = a.shr(t.u64, at, shift)?;
                        let in_first = a.eq(ch, c0)?;
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
                            let two = a.c32(2);
                            let wi = a.shr(t.u32, i, two)?;
                            let p = a.inst(Op::AccessChain, t.p_fn_u32, &[vals, wi])?;
                            let w = a.get(t.u32, p)?;
                            let sh = a.byte_shift32(i)?;
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
            // C1: a device store marks the slot of each chunk it hit.
            let dev_store = a.land(is_dev, is_store)?;
            a.if_(dev_store, |a| {
                let hit0 = a.ne(s0, none)?;
                a.if_(hit0, |a| {
                    let m = a.index(marks, s0, 4)?;
                    a.atomic_inc(m).map(|_| ())
                })?;
                let hit1 = a.ne(s1, none)?;
                let both = a.land(split, hit1)?;
                a.if_(both, |a| {
                    let m = a.index(marks, s1, 4)?;
                    a.atomic_inc(m).map(|_| ())
                })
            })?;
            // T4: the escape log.
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
            })?;
            let one = a.c32(1);
            let next = a.add(t.u32, idx, one)?;
            a.set(v_idx, next)
        },
    )?;
    a.b.ret().map_err(|e| a.err(e))?;
    a.end_function()?;
    a.entry(main, "main", 1);
    let words = a.finish();
    validate("replay", &words)?;
    Ok(words)
}

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
                    // T5 as the replay does it: the first and the last byte's chunk.
                    let c0 = a.shr(t.u64, addr, shift)?;
                    let three = a.c64(3);
                    let last = a.add(t.u64, addr, three)?;
                    let c1 = a.shr(t.u64, last, shift)?;
                    let h0 = a.call(t.hit, lookup, &[c0])?;
                    let split = a.ne(c1, c0)?;
                    a.if_(split, |a| a.call(t.hit, lookup, &[c1]).map(|_| ()))?;
                    let d0 = extract(a, h0, 0)?;
                    let s0 = extract(a, h0, 1)?;
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
        a.b.ret().map_err(|e| a.err(e))?;
        a.end_function()?;
        a.entry(f, &name, BENCH_LOCAL_SIZE);
    }
    let words = a.finish();
    validate("bench", &words)?;
    Ok(words)
}

/// Validates a module with spirv-val for Vulkan 1.2 (SPIR-V 1.5).
pub fn validate(module: &'static str, words: &[u32]) -> R<()> {
    use spirv_tools::val::Validator;
    let v = spirv_tools::val::create(Some(spirv_tools::TargetEnv::Vulkan_1_2));
    v.validate(words, None).map_err(|e| VkError::Invalid {
        module,
        why: e.to_string(),
    })
}

/// The module as spirv-dis writes it (friendly names, no colour).
pub fn disassemble(module: &'static str, words: &[u32]) -> R<String> {
    use spirv_tools::assembler::{Assembler, DisassembleOptions};
    let asm = spirv_tools::assembler::create(Some(spirv_tools::TargetEnv::Vulkan_1_2));
    let opts = DisassembleOptions {
        comment: false,
        ..DisassembleOptions::default()
    };
    asm.disassemble(words, opts)
        .map(Option::unwrap_or_default)
        .map_err(|e| VkError::Invalid {
            module,
            why: e.to_string(),
        })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "in a test, an unwrap is an assertion")]
mod tests {
    use super::*;

    #[test]
    fn every_module_validates() {
        lookup_helper_module().unwrap();
        replay_module(16).unwrap();
        replay_module(1).unwrap();
        bench_module().unwrap();
    }

    /// The opcodes of the function named `name`, in order.
    fn opcodes(words: &[u32], name: &str) -> Vec<Op> {
        let m = rspirv::dr::load_words(words).unwrap();
        let id = m
            .debug_names
            .iter()
            .find(|i| {
                i.class.opcode == Op::Name
                    && matches!(i.operands.get(1), Some(Operand::LiteralString(s)) if s == name)
            })
            .and_then(|i| i.operands.first())
            .and_then(|o| match o {
                Operand::IdRef(id) => Some(*id),
                _ => None,
            })
            .unwrap();
        let f = m
            .functions
            .iter()
            .find(|f| f.def.as_ref().and_then(|d| d.result_id) == Some(id))
            .unwrap();
        f.blocks
            .iter()
            .flat_map(|b| b.label.iter().chain(&b.instructions))
            .map(|i| i.class.opcode)
            .collect()
    }

    #[test]
    fn t5_the_replay_and_the_bench_run_the_golden_helper() {
        let golden = opcodes(&lookup_helper_module().unwrap(), "lookup");
        assert!(golden.len() > 50);
        assert_eq!(opcodes(&replay_module(16).unwrap(), "lookup"), golden);
        assert_eq!(opcodes(&bench_module().unwrap(), "lookup"), golden);
    }

    #[test]
    fn the_decode_table_is_format_decode() {
        let t = unorm_decode_table();
        assert_eq!(t[0], 0);
        assert_eq!(t[255], 1.0f32.to_bits());
        assert_eq!(t[51], (51.0f32 / 255.0).to_bits());
    }
}
