//! A thin layer over rspirv's builder that every module here is written with: the types and push
//! block every module declares, cached constants, typed integer ops, Function variables, functions,
//! and structured control flow built by one selection primitive and one loop. Memory access over it
//! is in `memory`.
//!
//! Every module opens with the same capabilities, types and push block in the same order, so that a
//! function emitted into two modules (the helper, T5) is the same instructions in both. Nothing here
//! calls Vulkan or knows what a module is for.

use std::collections::HashMap;

/// The push block's link name.
pub const PUSH_SYMBOL: &str = "dispatchscope_push";

use rspirv::dr::{Builder, InsertPoint, Instruction, Operand};
use rspirv::spirv::{
    AddressingModel, Capability, Decoration, ExecutionMode, ExecutionModel, FunctionControl,
    LinkageType, LoopControl, MemoryModel, Op, SelectionControl, StorageClass, Word,
};

use super::R;
use crate::VkError;

/// The types every module declares.
#[derive(Clone, Copy)]
pub(super) struct Types {
    pub(super) void: Word,
    pub(super) bool_: Word,
    pub(super) u32: Word,
    pub(super) u64: Word,
    pub(super) f32: Word,
    pub(super) p_psb_u32: Word,
    #[cfg_attr(
        not(feature = "bench"),
        allow(
            dead_code,
            reason = "declared in every module alike; read by the bench's loads"
        )
    )]
    pub(super) p_psb_u64: Word,
    pub(super) p_fn_u32: Word,
    pub(super) p_fn_u64: Word,
    pub(super) p_push_u32: Word,
    pub(super) hit: Word,
}

/// A thin layer over rspirv's builder: cached constants, typed ops, structured control flow.
pub(super) struct Asm {
    module: &'static str,
    pub(super) b: Builder,
    c32: HashMap<u32, Word>,
    c64: HashMap<u64, Word>,
    cf: HashMap<u32, Word>,
    cb: HashMap<bool, Word>,
    pub(super) t: Types,
    pub(super) push_var: Word,
    /// The instrumented helper's workgroup counters (`library::declare_workgroup`), once declared.
    pub(super) workgroup_var: Option<Word>,
    /// The lane's last lookup (`library::declare_lane_cache`): its slot's key and its answer, once
    /// declared.
    pub(super) lane_cache: Option<(Word, Word)>,
    /// The lane's own access counters (`library::declare_lane_counts`), once declared.
    pub(super) lane_counts: Option<Word>,
    /// The lane cache of `Shape::cache_delta` (`library::declare_delta_cache`): the slot's key,
    /// the chunk's delta and the lookup's probes, once declared.
    pub(super) delta_cache: Option<(Word, Word, Word)>,
    /// Each lane's first escape, in workgroup memory (`library::declare_lane_escapes`), once
    /// declared.
    pub(super) lane_escapes: Option<Word>,
    pub(super) interface: Vec<Word>,
    /// The helper's words are read from a header in memory ([`super::library::Variant::Header`])
    /// while its functions are emitted.
    pub(super) header_form: bool,
    /// The shape of the helper's access path and lookup while they are emitted.
    pub(super) shape: super::shape::Shape,
}

impl Asm {
    pub(super) fn new(module: &'static str) -> Self {
        let mut b = Builder::new();
        b.set_version(1, 5);
        Self::on(module, b)
    }

    /// An `Asm` over a builder that may already hold a module (a caller's, through
    /// `library::emit_into`): the capabilities it lacks of Shader, Int64 and
    /// PhysicalStorageBufferAddresses are added, the memory model set (the caller checks that a
    /// model it had is this one), and the types and push block declared (types the builder
    /// already has are reused: rspirv deduplicates them).
    pub(super) fn on(module: &'static str, mut b: Builder) -> Self {
        for cap in [
            Capability::Shader,
            Capability::Int64,
            Capability::PhysicalStorageBufferAddresses,
        ] {
            let has = b.module_ref().capabilities.iter().any(|i| {
                i.operands
                    .first()
                    .is_some_and(|o| *o == Operand::Capability(cap))
            });
            if !has {
                b.capability(cap);
            }
        }
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
        let hit = b.type_struct([u64_, u32_, u32_, u32_]);
        b.name(hit, "Hit");
        b.member_name(hit, 0, "device_addr");
        b.member_name(hit, 1, "slot");
        b.member_name(hit, 2, "probes");
        b.member_name(hit, 3, "excluded");
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
            workgroup_var: None,
            lane_cache: None,
            lane_counts: None,
            delta_cache: None,
            lane_escapes: None,
            interface: Vec::new(),
            header_form: false,
            shape: super::shape::Shape::SHIPPED,
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

    /// Declares capability `cap` unless the module has it.
    pub(super) fn capability(&mut self, cap: Capability) {
        let has = self.b.module_ref().capabilities.iter().any(|i| {
            i.operands
                .first()
                .is_some_and(|o| *o == Operand::Capability(cap))
        });
        if !has {
            self.b.capability(cap);
        }
    }

    /// Gives the builder back.
    pub(super) fn into_builder(self) -> Builder {
        self.b
    }

    pub(super) fn err(&self, e: rspirv::dr::Error) -> VkError {
        VkError::Build {
            module: self.module,
            why: e.to_string(),
        }
    }

    /// The u32 constant `v`, made once per module.
    pub(super) fn c32(&mut self, v: u32) -> Word {
        let (b, ty) = (&mut self.b, self.t.u32);
        *self.c32.entry(v).or_insert_with(|| b.constant_bit32(ty, v))
    }

    /// The u64 constant `v`, made once per module.
    pub(super) fn c64(&mut self, v: u64) -> Word {
        let (b, ty) = (&mut self.b, self.t.u64);
        *self.c64.entry(v).or_insert_with(|| b.constant_bit64(ty, v))
    }

    /// The f32 constant `v`, made once per module (by its bits).
    pub(super) fn cf(&mut self, v: f32) -> Word {
        let (b, ty) = (&mut self.b, self.t.f32);
        *self
            .cf
            .entry(v.to_bits())
            .or_insert_with(|| b.constant_bit32(ty, v.to_bits()))
    }

    /// The bool constant `v`, made once per module.
    pub(super) fn cbool(&mut self, v: bool) -> Word {
        let (b, ty) = (&mut self.b, self.t.bool_);
        *self.cb.entry(v).or_insert_with(|| {
            if v {
                b.constant_true(ty)
            } else {
                b.constant_false(ty)
            }
        })
    }

    pub(super) fn inst(&mut self, op: Op, ty: Word, operands: &[Word]) -> R<Word> {
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

    /// `op` with one id operand and one literal (`OpCompositeExtract`'s index).
    pub(super) fn inst_literal(&mut self, op: Op, ty: Word, x: Word, lit: u32) -> R<Word> {
        let id = self.b.id();
        let inst = Instruction::new(
            op,
            Some(ty),
            Some(id),
            vec![Operand::IdRef(x), Operand::LiteralBit32(lit)],
        );
        self.b
            .insert_into_block(InsertPoint::End, inst)
            .map_err(|e| self.err(e))?;
        Ok(id)
    }

    pub(super) fn bin(&mut self, op: Op, ty: Word, x: Word, y: Word) -> R<Word> {
        self.inst(op, ty, &[x, y])
    }

    // Integer arithmetic; `ty` is the result type.
    pub(super) fn add(&mut self, ty: Word, x: Word, y: Word) -> R<Word> {
        self.bin(Op::IAdd, ty, x, y)
    }
    pub(super) fn sub(&mut self, ty: Word, x: Word, y: Word) -> R<Word> {
        self.bin(Op::ISub, ty, x, y)
    }
    pub(super) fn mul(&mut self, ty: Word, x: Word, y: Word) -> R<Word> {
        self.bin(Op::IMul, ty, x, y)
    }
    pub(super) fn and(&mut self, ty: Word, x: Word, y: Word) -> R<Word> {
        self.bin(Op::BitwiseAnd, ty, x, y)
    }
    pub(super) fn or(&mut self, ty: Word, x: Word, y: Word) -> R<Word> {
        self.bin(Op::BitwiseOr, ty, x, y)
    }
    #[cfg(any(feature = "demo", feature = "bench"))]
    pub(super) fn xor(&mut self, ty: Word, x: Word, y: Word) -> R<Word> {
        self.bin(Op::BitwiseXor, ty, x, y)
    }
    pub(super) fn shl(&mut self, ty: Word, x: Word, y: Word) -> R<Word> {
        self.bin(Op::ShiftLeftLogical, ty, x, y)
    }
    pub(super) fn shr(&mut self, ty: Word, x: Word, y: Word) -> R<Word> {
        self.bin(Op::ShiftRightLogical, ty, x, y)
    }
    pub(super) fn not(&mut self, ty: Word, x: Word) -> R<Word> {
        self.inst(Op::Not, ty, &[x])
    }
    pub(super) fn eq(&mut self, x: Word, y: Word) -> R<Word> {
        self.bin(Op::IEqual, self.t.bool_, x, y)
    }
    pub(super) fn ne(&mut self, x: Word, y: Word) -> R<Word> {
        self.bin(Op::INotEqual, self.t.bool_, x, y)
    }
    pub(super) fn ult(&mut self, x: Word, y: Word) -> R<Word> {
        self.bin(Op::ULessThan, self.t.bool_, x, y)
    }
    pub(super) fn land(&mut self, x: Word, y: Word) -> R<Word> {
        self.bin(Op::LogicalAnd, self.t.bool_, x, y)
    }
    pub(super) fn lor(&mut self, x: Word, y: Word) -> R<Word> {
        self.bin(Op::LogicalOr, self.t.bool_, x, y)
    }
    pub(super) fn lnot(&mut self, x: Word) -> R<Word> {
        self.inst(Op::LogicalNot, self.t.bool_, &[x])
    }
    pub(super) fn select(&mut self, ty: Word, c: Word, x: Word, y: Word) -> R<Word> {
        self.inst(Op::Select, ty, &[c, x, y])
    }
    pub(super) fn widen(&mut self, x32: Word) -> R<Word> {
        self.inst(Op::UConvert, self.t.u64, &[x32])
    }
    pub(super) fn narrow(&mut self, x64: Word) -> R<Word> {
        self.inst(Op::UConvert, self.t.u32, &[x64])
    }

    /// The high 32 bits of a u64.
    pub(super) fn high(&mut self, x64: Word) -> R<Word> {
        let c = self.c64(32);
        let h = self.shr(self.t.u64, x64, c)?;
        self.narrow(h)
    }

    /// `lo | hi << 32`.
    pub(super) fn join(&mut self, lo: Word, hi: Word) -> R<Word> {
        let lo = self.widen(lo)?;
        let hi = self.widen(hi)?;
        let c = self.c64(32);
        let hi = self.shl(self.t.u64, hi, c)?;
        self.or(self.t.u64, lo, hi)
    }

    /// `base + offset` with `offset` a u32 scaled by `scale`.
    pub(super) fn index(&mut self, base: Word, i32_: Word, scale: u64) -> R<Word> {
        let i = self.widen(i32_)?;
        let s = self.c64(scale);
        let off = self.mul(self.t.u64, i, s)?;
        self.add(self.t.u64, base, off)
    }

    pub(super) fn add64c(&mut self, x: Word, c: u64) -> R<Word> {
        let c = self.c64(c);
        self.add(self.t.u64, x, c)
    }

    /// A Function variable of pointer type `ptr_ty`, declared at the top of the current function.
    pub(super) fn var(&mut self, ptr_ty: Word) -> R<Word> {
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

    pub(super) fn get(&mut self, ty: Word, var: Word) -> R<Word> {
        self.load(ty, var, None)
    }

    pub(super) fn set(&mut self, var: Word, val: Word) -> R<()> {
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

    fn cond_branch(&mut self, cond: Word, yes: Word, no: Word) -> R<()> {
        self.b
            .branch_conditional(cond, yes, no, [])
            .map_err(|e| self.err(e))
    }

    /// Begins block `label`, fills it with `body` and branches to `to`: one arm of a construct.
    fn arm(&mut self, label: Word, to: Word, body: impl FnOnce(&mut Self) -> R<()>) -> R<()> {
        self.begin(label)?;
        body(self)?;
        self.branch(to)
    }

    /// A selection construct, the one builder of [`Self::if_`] and [`Self::if_else`]: `if cond
    /// { then } else { els }`, or with no `els`, `if cond { then }` (false goes to the merge block).
    /// Labels are made in the order then, else, merge.
    fn selection<T, E>(&mut self, cond: Word, then: T, els: Option<E>) -> R<()>
    where
        T: FnOnce(&mut Self) -> R<()>,
        E: FnOnce(&mut Self) -> R<()>,
    {
        let then_l = self.b.id();
        let else_l = els.as_ref().map(|_| self.b.id());
        let merge = self.b.id();
        self.b
            .selection_merge(merge, SelectionControl::NONE)
            .map_err(|e| self.err(e))?;
        self.cond_branch(cond, then_l, else_l.unwrap_or(merge))?;
        self.arm(then_l, merge, then)?;
        if let (Some(else_l), Some(els)) = (else_l, els) {
            self.arm(else_l, merge, els)?;
        }
        self.begin(merge)
    }

    /// `if cond { then }`.
    pub(super) fn if_(&mut self, cond: Word, then: impl FnOnce(&mut Self) -> R<()>) -> R<()> {
        self.selection(cond, then, None::<fn(&mut Self) -> R<()>>)
    }

    /// `if cond { then } else { els }`.
    pub(super) fn if_else(
        &mut self,
        cond: Word,
        then: impl FnOnce(&mut Self) -> R<()>,
        els: impl FnOnce(&mut Self) -> R<()>,
    ) -> R<()> {
        self.selection(cond, then, Some(els))
    }

    /// `while cond { body }`, in the header / condition / body / continue / merge shape.
    pub(super) fn while_(
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
        self.arm(header, cond_l, |a| {
            a.b.loop_merge(merge, cont, LoopControl::NONE, [])
                .map_err(|e| a.err(e))
        })?;
        self.begin(cond_l)?;
        let c = cond(self)?;
        self.cond_branch(c, body_l, merge)?;
        self.arm(body_l, cont, body)?;
        self.arm(cont, header, |_| Ok(()))?;
        self.begin(merge)
    }

    /// `for i in 0..n { body(i) }` over a u32 counter variable `counter`.
    pub(super) fn for_(
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

    pub(super) fn begin_function(
        &mut self,
        ret: Word,
        params: &[Word],
        name: &str,
    ) -> R<(Word, Vec<Word>)> {
        self.begin_function_ctl(ret, params, name, FunctionControl::NONE)
    }

    /// [`Self::begin_function`] with the function's control (`DontInline` for a path kept out of
    /// line).
    pub(super) fn begin_function_ctl(
        &mut self,
        ret: Word,
        params: &[Word],
        name: &str,
        control: FunctionControl,
    ) -> R<(Word, Vec<Word>)> {
        let fty = self.b.type_function(ret, params.to_vec());
        let f = self
            .b
            .begin_function(ret, None, control, fty)
            .map_err(|e| self.err(e))?;
        self.b.name(f, name);
        let mut ps = Vec::new();
        for &p in params {
            ps.push(self.b.function_parameter(p).map_err(|e| self.err(e))?);
        }
        self.b.begin_block(None).map_err(|e| self.err(e))?;
        Ok((f, ps))
    }

    pub(super) fn end_function(&mut self) -> R<()> {
        self.b.end_function().map_err(|e| self.err(e))
    }

    pub(super) fn call(&mut self, ret: Word, f: Word, args: &[Word]) -> R<Word> {
        self.b
            .function_call(ret, None, f, args.to_vec())
            .map_err(|e| self.err(e))
    }

    pub(super) fn entry(&mut self, f: Word, name: &str, local_size: u32) {
        self.b
            .entry_point(ExecutionModel::GLCompute, f, name, self.interface.clone());
        self.b
            .execution_mode(f, ExecutionMode::LocalSize, [local_size, 1, 1]);
    }

    /// `hit.device_addr` (index 0), `hit.slot` (index 1), `hit.probes` (index 2) or
    /// `hit.excluded` (index 3).
    pub(super) fn extract(&mut self, hit: Word, index: u32) -> R<Word> {
        let id = self.b.id();
        let inst = Instruction::new(
            Op::CompositeExtract,
            Some(if index == 0 { self.t.u64 } else { self.t.u32 }),
            Some(id),
            vec![Operand::IdRef(hit), Operand::LiteralBit32(index)],
        );
        self.b
            .insert_into_block(InsertPoint::End, inst)
            .map_err(|e| self.err(e))?;
        Ok(id)
    }

    /// Returns from the current `void` function and ends it.
    pub(super) fn end_void_function(&mut self) -> R<()> {
        self.b.ret().map_err(|e| self.err(e))?;
        self.end_function()
    }

    /// The module's words, not validated: no builder runs a process (issue 40). The tests pass
    /// every module built here through spirv-val (`every_module_test.rs`): for Vulkan 1.2, or for
    /// universal SPIR-V 1.5 where the module still links (Vulkan's environment forbids Linkage).
    pub(super) fn finish(self) -> Vec<u32> {
        use rspirv::binary::Assemble;
        self.b.module().assemble()
    }

    /// Makes this a module that links: the Linkage capability, and the push block shared by name
    /// ([`PUSH_SYMBOL`]), imported by a library, exported by a program.
    pub(super) fn linkable(&mut self, push: LinkageType) {
        self.b.capability(Capability::Linkage);
        self.link(self.push_var, PUSH_SYMBOL, push);
    }

    /// Decorates `id` (a function or a global) with `LinkageAttributes name kind`.
    pub(super) fn link(&mut self, id: Word, name: &str, kind: LinkageType) {
        self.b.decorate(
            id,
            Decoration::LinkageAttributes,
            [
                Operand::LiteralString(name.to_owned()),
                Operand::LinkageType(kind),
            ],
        );
    }
}
