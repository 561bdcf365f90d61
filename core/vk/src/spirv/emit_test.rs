//! [`super::library::emit_into`] from a caller's side: a small compute module written with rspirv's
//! own builder (not this crate's `Asm`), the helper emitted into it, validated by spirv-val, and
//! run on the device (lavapipe here, validation layer on) against the CPU's lookup, part by part of
//! chunks mapped whole, by two or three imports, and with pages cut out. Then the lane's lookup
//! cache against the lookup, answer by answer, and the helper's loads and stores against
//! `ChunkTable::device_from_guest`, with their marks and the marks' summary (C1).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is the test failing, with its message"
)]

use std::sync::Arc;

use ash::vk;
use rspirv::binary::Assemble;
use rspirv::dr::{Builder, Operand};
use rspirv::spirv::{
    AddressingModel, BuiltIn, Capability, Decoration, ExecutionMode, ExecutionModel,
    FunctionControl, MemoryAccess, MemoryModel, StorageClass,
};

use super::asm::Asm;
use super::helper::{EVERY_PART, emit_lookup};
use super::library::{self, EmittedHelpers, Variant, cached_lookup, declare_lane_cache, emit_into};
use super::record::NO_SLOT;
use crate::commands::Commands;
use crate::pipeline::Pipeline;
use crate::push::PushBlock;
use crate::table::TablePush;
use crate::{Context, ContextOptions, VkError};
use dispatchscope_core::chunk_table::{
    ChunkTable, MARK_BLOCK_SLOTS, PARTS, TableSlot, mark_buffer_words,
};
use dispatchscope_core::report::LookupOutcome;

const LANES: u32 = 256;

/// Bytes of the tests' chunks (T1's largest): parts of 4 KiB.
const CHUNK: u64 = 0x1_0000;
/// Bytes of a part.
const PART: u64 = CHUNK / PARTS as u64;

/// Maps chunks `first..first + n` of `table` by the layout `k % 8` gives chunk `first + k`, each
/// import's device address from `import(r)` for the `r`-th import made: whole; two imports
/// (parts 0–5, 6–15); whole with pages cut out (parts 0, 5, 10); three imports (even parts, odd
/// parts to 11, parts 13 and 15); not mapped; two imports with a hole (parts 0–7, 12–15); mapped
/// and then cut out entirely (no slot left); one part (15).
fn map_by_parts(table: &mut ChunkTable, first: u64, n: u64, mut import: impl FnMut(usize) -> u64) {
    let mut r = 0;
    let mut next = || {
        r += 1;
        import(r - 1)
    };
    for k in 0..n {
        let c = first + k;
        match k % 8 {
            0 => {
                table.insert(c, next()).unwrap();
            }
            1 => {
                table.insert_parts(c, next(), 0x003f).unwrap();
                table.insert_parts(c, next(), 0xffc0).unwrap();
            }
            2 => {
                let at = next();
                table.insert(c, at).unwrap();
                assert!(table.remove_parts(c, at, 0x0421));
            }
            3 => {
                table.insert_parts(c, next(), 0x5555).unwrap();
                table.insert_parts(c, next(), 0x0aaa).unwrap();
                table.insert_parts(c, next(), 0xa000).unwrap();
            }
            4 => {}
            5 => {
                table.insert_parts(c, next(), 0x00ff).unwrap();
                table.insert_parts(c, next(), 0xf000).unwrap();
            }
            6 => {
                let at = next();
                table.insert_parts(c, at, 0xffff).unwrap();
                assert!(table.remove_parts(c, at, 0xffff));
            }
            _ => {
                table.insert_parts(c, next(), 0x8000).unwrap();
            }
        }
    }
}

/// `fillers` chunks far from the tests' own, to make probes longer and the table larger.
fn fillers(n: u64) -> Vec<(u64, u64)> {
    (0..n)
        .map(|i| (0x9_0000_0000 + i * 977, 0x5000_0000_0000 + i * CHUNK))
        .collect()
}

/// The slot's excluded parts as the helper returns them (`EVERY_PART` on a miss).
fn excluded_of(table: &ChunkTable, slot: u32) -> u32 {
    if slot == NO_SLOT {
        return EVERY_PART;
    }
    u32::from(table.slots()[slot as usize].excluded())
}

/// The caller's module: lane `i` looks up part `i % 16` of chunk `first + i / 16` (push words
/// 0–1) and writes `{device_addr, slot, probes, excluded}` to 24 bytes at `out + 24 i` (push words
/// 2–3).
fn caller_module() -> (Vec<u32>, EmittedHelpers) {
    let mut b = Builder::new();
    b.set_version(1, 5);
    b.capability(Capability::Shader);
    b.memory_model(
        AddressingModel::PhysicalStorageBuffer64,
        MemoryModel::GLSL450,
    );
    let h = emit_into(&mut b, Variant::Helper).expect("the helper emits into a caller's builder");
    let (u32_, u64_) = (h.u32_type, h.u64_type);
    let v3 = b.type_vector(u32_, 3);
    let p_in = b.type_pointer(None, StorageClass::Input, v3);
    let gid_var = b.variable(p_in, None, StorageClass::Input, None);
    b.decorate(
        gid_var,
        Decoration::BuiltIn,
        [Operand::BuiltIn(BuiltIn::GlobalInvocationId)],
    );
    let p_u64 = b.type_pointer(None, StorageClass::PhysicalStorageBuffer, u64_);
    let p_u32 = b.type_pointer(None, StorageClass::PhysicalStorageBuffer, u32_);
    let void = b.type_void();
    let fty = b.type_function(void, []);
    let c = |b: &mut Builder, v: u32| b.constant_bit32(u32_, v);
    let (c0, c1, c2, c3, c4, c15, c32) = (
        c(&mut b, 0),
        c(&mut b, 1),
        c(&mut b, 2),
        c(&mut b, 3),
        c(&mut b, 4),
        c(&mut b, 15),
        c(&mut b, 32),
    );
    let c8 = b.constant_bit64(u64_, 8);
    let c12 = b.constant_bit64(u64_, 12);
    let c16 = b.constant_bit64(u64_, 16);
    let c24 = b.constant_bit64(u64_, 24);
    let main = b
        .begin_function(void, None, FunctionControl::NONE, fty)
        .unwrap();
    b.begin_block(None).unwrap();
    let gid = b.load(v3, None, gid_var, None, []).unwrap();
    let x = b.composite_extract(u32_, None, gid, [0]).unwrap();
    let word = |b: &mut Builder, i: u32| {
        let p = b
            .access_chain(h.push_word_pointer, None, h.push_block, [c0, i])
            .unwrap();
        b.load(u32_, None, p, None, []).unwrap()
    };
    let join = |b: &mut Builder, lo: u32, hi: u32| {
        let lo = b.u_convert(u64_, None, lo).unwrap();
        let hi = b.u_convert(u64_, None, hi).unwrap();
        let hi = b.shift_left_logical(u64_, None, hi, c32).unwrap();
        b.bitwise_or(u64_, None, lo, hi).unwrap()
    };
    let (w0, w1, w2, w3) = (
        word(&mut b, c0),
        word(&mut b, c1),
        word(&mut b, c2),
        word(&mut b, c3),
    );
    let first = join(&mut b, w0, w1);
    let out = join(&mut b, w2, w3);
    let x64 = b.u_convert(u64_, None, x).unwrap();
    let k = b.shift_right_logical(u32_, None, x, c4).unwrap();
    let k64 = b.u_convert(u64_, None, k).unwrap();
    let part = b.bitwise_and(u32_, None, x, c15).unwrap();
    let chunk = b.i_add(u64_, None, first, k64).unwrap();
    let hit = b
        .function_call(h.hit_type, None, h.lookup.unwrap(), [chunk, part])
        .unwrap();
    let dev = b.composite_extract(u64_, None, hit, [0]).unwrap();
    let slot = b.composite_extract(u32_, None, hit, [1]).unwrap();
    let probes = b.composite_extract(u32_, None, hit, [2]).unwrap();
    let excluded = b.composite_extract(u32_, None, hit, [3]).unwrap();
    let off = b.i_mul(u64_, None, x64, c24).unwrap();
    let at = b.i_add(u64_, None, out, off).unwrap();
    let at8 = b.i_add(u64_, None, at, c8).unwrap();
    let at12 = b.i_add(u64_, None, at, c12).unwrap();
    let at16 = b.i_add(u64_, None, at, c16).unwrap();
    for (addr, value, ty, align) in [
        (at, dev, p_u64, 8),
        (at8, slot, p_u32, 4),
        (at12, probes, p_u32, 4),
        (at16, excluded, p_u32, 4),
    ] {
        let p = b.convert_u_to_ptr(ty, None, addr).unwrap();
        b.store(
            p,
            value,
            Some(MemoryAccess::ALIGNED),
            [Operand::LiteralBit32(align)],
        )
        .unwrap();
    }
    b.ret().unwrap();
    b.end_function().unwrap();
    let mut interface = vec![gid_var, h.push_block];
    interface.extend(h.lane_cache.into_iter().flatten());
    interface.extend(h.lane_counts);
    b.entry_point(ExecutionModel::GLCompute, main, "main", interface);
    b.execution_mode(main, ExecutionMode::LocalSize, [64, 1, 1]);
    let words = b.module().assemble();
    super::validate("caller_module", &words).expect("spirv-val accepts the caller's module");
    (words, h)
}

fn context() -> Option<Arc<Context>> {
    let required = std::env::var("DISPATCHSCOPE_REQUIRE_VULKAN").is_ok_and(|v| v == "1");
    let opts = |validation| ContextOptions {
        validation,
        stage_table: false,
    };
    match Context::new(&opts(true)) {
        Err(VkError::NoValidationLayer) if !required => Context::new(&opts(false)),
        other => other,
    }
    .map_or_else(
        |e| {
            assert!(!required, "DISPATCHSCOPE_REQUIRE_VULKAN=1, but: {e}");
            eprintln!("skipped: the Vulkan backend cannot run here: {e}");
            None
        },
        Some,
    )
}

/// Runs `words`' `main` once over `groups` workgroups with `push`, and waits for it.
fn dispatch(ctx: &Arc<Context>, words: &[u32], push: &PushBlock, groups: u32) {
    let pipeline = Pipeline::new(&ctx.device, words, c"main", 1).unwrap();
    let commands = Commands::new(ctx).unwrap();
    let d = &ctx.device;
    let cmd = commands.cmd;
    // SAFETY: the command buffer is not pending; the pipeline and the caller's buffers are live
    // until the submit below is waited for; the push block is 128 bytes.
    unsafe {
        crate::begin_one_time(d, cmd).unwrap();
        d.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, pipeline.raw);
        d.cmd_push_constants(
            cmd,
            pipeline.layout,
            vk::ShaderStageFlags::COMPUTE,
            0,
            &push.bytes(),
        );
        d.cmd_dispatch(cmd, groups, 1, 1);
        commands
            .finish_for_host(
                vk::PipelineStageFlags::COMPUTE_SHADER,
                vk::AccessFlags::SHADER_WRITE,
            )
            .unwrap();
    }
    pipeline.destroy(d);
}

/// `table`'s bytes in a host buffer the device reads.
fn upload(ctx: &Arc<Context>, table: &ChunkTable, calls: &mut u64) -> crate::buffer::Buf {
    let bytes = table.to_le_bytes();
    let mut tbuf = ctx
        .host_buffer(bytes.len() as u64, "the table", calls)
        .unwrap();
    tbuf.bytes_mut()[..bytes.len()].copy_from_slice(&bytes);
    tbuf
}

fn assert_quiet(ctx: &Context) {
    assert_eq!(
        ctx.validation_messages(),
        0,
        "{}",
        ctx.validation_text().join("\n")
    );
}

/// A u64 and a u32 of a little-endian byte slice.
fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}
fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

#[test]
fn a_caller_module_with_the_emitted_helper_looks_up_as_the_cpu_does() {
    let (words, h) = caller_module();
    assert!(h.lookup.is_some());
    let Some(ctx) = context() else { return };
    // 16 chunks, each layout twice (whole, two or three imports, pages cut out, not mapped ...),
    // among far-away keys: hits, misses and longer probes, part by part.
    let first = 0x40_0000u64;
    let mut table = ChunkTable::build(CHUNK, 8, &fillers(64)).unwrap();
    map_by_parts(&mut table, first, u64::from(LANES) / 16, |r| {
        0x7000_0000_0000 + r as u64 * CHUNK
    });
    let mut calls = 0;
    let tbuf = upload(&ctx, &table, &mut calls);
    let mut out = ctx
        .host_buffer(24 * u64::from(LANES), "the results", &mut calls)
        .unwrap();
    out.bytes_mut().fill(0xee);
    let mut push = PushBlock::default();
    TablePush::of(&table, tbuf.address).write(&mut push);
    push.set64(0, first);
    push.set64(2, out.address);
    dispatch(&ctx, &words, &push, LANES / 64);
    let (mut hits, mut longer, mut cut) = (0, 0, 0);
    for i in 0..LANES as usize {
        let r = &out.bytes()[24 * i..24 * i + 24];
        let (dev, slot, probes, excluded) = (le64(r, 0), le32(r, 8), le32(r, 12), le32(r, 16));
        let (chunk, part) = (first + i as u64 / 16, i as u32 % 16);
        let t = table.trace_part(chunk, part);
        let what = format!("chunk {chunk:#x} part {part}");
        assert_eq!(probes as usize, t.probes.len(), "{what}: probes");
        assert_eq!(excluded, excluded_of(&table, slot), "{what}: excluded");
        // Any byte of the part: the CPU's address and slot.
        let addr = chunk * CHUNK + u64::from(part) * PART + 0x123;
        match t.outcome {
            LookupOutcome::Hit {
                slot: s,
                device_addr,
            } => {
                assert_eq!((dev, slot), (device_addr, s as u32), "{what}");
                assert_eq!(
                    table.device_from_guest(addr),
                    Some(dev + (addr % CHUNK)),
                    "{what}"
                );
                assert_eq!(table.slot_of(addr), Some(s), "{what}");
                hits += 1;
                cut += usize::from(excluded != 0);
            }
            _ => {
                assert_eq!((dev, slot), (0, NO_SLOT), "{what}: a miss");
                assert_eq!(table.device_from_guest(addr), None, "{what}");
            }
        }
        longer += usize::from(probes > 1);
    }
    // Per 8 chunks: 16 + 16 + 13 + 16 + 0 + 12 + 0 + 1 parts reached.
    assert_eq!(hits, 2 * (16 + 16 + 13 + 16 + 12 + 1));
    assert!(cut > 0 && longer > 0, "{cut} by parts, {longer} longer");
    ctx.destroy_buffer(tbuf, &mut calls);
    ctx.destroy_buffer(out, &mut calls);
    assert_quiet(&ctx);
}

/// A small xorshift: the tests' accesses, the same on every run.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Lookups a lane makes one after another through its cache.
const STEPS: u32 = 24;

/// A module whose lane `g` makes [`STEPS`] lookups through the lane's cache
/// ([`cached_lookup`]): step `j`'s chunk (u64) and part (u32) at `input + 16 (g STEPS + j)` (push
/// words 0–1), its `{device_addr, slot, probes, excluded}` written to 24 bytes at `out + 24 (g
/// STEPS + j)` (push words 2–3).
fn cache_module(shape: super::shape::Shape) -> Vec<u32> {
    let mut a = Asm::new("cache_test");
    a.shape = shape;
    let lookup = emit_lookup(&mut a).unwrap();
    let cache = declare_lane_cache(&mut a, true);
    let t = a.t;
    let gid_var = declare_global_id(&mut a);
    let (main, _) = a.begin_function(t.void, &[], "main").unwrap();
    let v_j = a.var(t.p_fn_u32).unwrap();
    let g = global_x(&mut a, gid_var);
    let input = a.push_u64(0).unwrap();
    let out = a.push_u64(2).unwrap();
    let steps = a.c32(STEPS);
    let g_steps = a.mul(t.u32, g, steps).unwrap();
    a.for_(v_j, steps, |a, j| {
        let i = a.add(t.u32, g_steps, j)?;
        let (_, chunk, part) = record(a, input, i)?;
        let h = cached_lookup(a, lookup, cache, chunk, part)?;
        let o = a.index(out, i, 24)?;
        let dev = a.extract(h, 0)?;
        let (lo, hi) = (a.narrow(dev)?, a.high(dev)?);
        let words = [lo, hi, a.extract(h, 1)?, a.extract(h, 2)?, a.extract(h, 3)?];
        for (k, w) in words.into_iter().enumerate() {
            let at = a.add64c(o, 4 * k as u64)?;
            a.st32(at, w)?;
        }
        Ok(())
    })
    .unwrap();
    a.end_void_function().unwrap();
    a.entry(main, "main", 64);
    let words = a.finish();
    super::validate("cache_test", &words).expect("spirv-val accepts the cache_test module");
    words
}

/// The module's `GlobalInvocationId` input, in its interface.
fn declare_global_id(a: &mut Asm) -> u32 {
    let t = a.t;
    let v3 = a.b.type_vector(t.u32, 3);
    let p_in = a.b.type_pointer(None, StorageClass::Input, v3);
    let gid_var = a.b.variable(p_in, None, StorageClass::Input, None);
    a.b.decorate(
        gid_var,
        Decoration::BuiltIn,
        [Operand::BuiltIn(BuiltIn::GlobalInvocationId)],
    );
    a.interface.push(gid_var);
    gid_var
}

/// The global id's x, read in the function being emitted.
fn global_x(a: &mut Asm, gid_var: u32) -> u32 {
    let t = a.t;
    let v3 = a.b.type_vector(t.u32, 3);
    let gid = a.get(v3, gid_var).unwrap();
    extract_u32(a, gid)
}

/// Record `i` of the 16-byte records at `input`: its address, its u64 and the u32 after it.
fn record(a: &mut Asm, input: u32, i: u32) -> super::R<(u32, u32, u32)> {
    let rec = a.index(input, i, 16)?;
    let first = a.ld64(rec)?;
    let at = a.add64c(rec, 8)?;
    let second = a.ld32(at)?;
    Ok((rec, first, second))
}

/// Component 0 of a `uvec3`.
fn extract_u32(a: &mut Asm, v: u32) -> u32 {
    let t = a.t;
    a.inst_literal(rspirv::spirv::Op::CompositeExtract, t.u32, v, 0)
        .unwrap()
}

#[test]
fn the_lane_cache_answers_as_the_lookup_does_part_by_part() {
    use super::shape::Shape;
    for cache_test32 in [false, true] {
        let words = cache_module(Shape {
            cache_test32,
            ..Shape::SHIPPED
        });
        lane_cache_against_the_lookup(&words);
    }
}

/// Runs [`cache_module`]'s lanes and checks every answer against the table's own lookup. Some
/// asks are for a chunk past the key's 48 bits whose bit `48 + part` is set right after an ask
/// of the chunk below it: the cached key (which may exclude that part) must not answer it.
fn lane_cache_against_the_lookup(words: &[u32]) {
    let Some(ctx) = context() else { return };
    let first = 0x40_0000u64;
    let n_chunks = 16u64;
    let mut table = ChunkTable::build(CHUNK, 8, &fillers(64)).unwrap();
    map_by_parts(&mut table, first, n_chunks, |r| {
        0x7000_0000_0000 + r as u64 * CHUNK
    });
    // Each lane walks a few chunks, several parts of each: a lane's rows in one chunk.
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut input = Vec::new();
    let mut asks = Vec::new();
    for _ in 0..LANES {
        let mut chunk = first + rng.below(n_chunks);
        for _ in 0..STEPS {
            if rng.below(4) == 0 {
                chunk = first + rng.below(n_chunks);
            }
            let part = rng.below(16) as u32;
            // Now and then, right after an ask that hit, a part its slot does not reach, of the
            // chunk past the key's bits that has that part's bit set (never mapped).
            let excluded_after = asks.last().and_then(|&(c, p)| {
                let slot = match table.trace_part(c, p).outcome {
                    LookupOutcome::Hit { slot, .. } => slot as u32,
                    _ => return None,
                };
                let ex = excluded_of(&table, slot);
                (ex != 0).then(|| (c, ex.trailing_zeros()))
            });
            let asked = match excluded_after {
                Some((c, q)) if asks.len() % STEPS as usize != 0 && rng.below(4) == 0 => {
                    (c | 1u64 << (48 + q), q)
                }
                _ => (chunk, part),
            };
            asks.push(asked);
            input.extend_from_slice(&asked.0.to_le_bytes());
            input.extend_from_slice(&asked.1.to_le_bytes());
            input.extend_from_slice(&[0; 4]);
        }
    }
    let mut calls = 0;
    let tbuf = upload(&ctx, &table, &mut calls);
    let mut inbuf = ctx
        .host_buffer(input.len() as u64, "the asks", &mut calls)
        .unwrap();
    inbuf.bytes_mut()[..input.len()].copy_from_slice(&input);
    let mut out = ctx
        .host_buffer(24 * asks.len() as u64, "the answers", &mut calls)
        .unwrap();
    out.bytes_mut().fill(0xee);
    let mut push = PushBlock::default();
    TablePush::of(&table, tbuf.address).write(&mut push);
    push.set64(0, inbuf.address);
    push.set64(2, out.address);
    dispatch(&ctx, words, &push, LANES / 64);
    // The cache as the host sees it: how many answers it must have given again, and how many of
    // those for another part than the one it was found for.
    let (mut again, mut other_part) = (0, 0);
    let past_the_key = asks.iter().filter(|(c, _)| c >> 48 != 0).count();
    let mut last: Option<(u64, u32, TableSlot)> = None;
    for (i, &(chunk, part)) in asks.iter().enumerate() {
        let r = &out.bytes()[24 * i..24 * i + 24];
        let (dev, slot, probes, excluded) = (le64(r, 0), le32(r, 8), le32(r, 12), le32(r, 16));
        let t = table.trace_part(chunk, part);
        let what = format!("ask {i}: chunk {chunk:#x} part {part}");
        assert_eq!(probes as usize, t.probes.len(), "{what}: probes");
        match t.outcome {
            LookupOutcome::Hit {
                slot: s,
                device_addr,
            } => assert_eq!((dev, slot), (device_addr, s as u32), "{what}"),
            _ => assert_eq!((dev, slot), (0, NO_SLOT), "{what}: a miss"),
        }
        assert_eq!(excluded, excluded_of(&table, slot), "{what}: excluded");
        if i % STEPS as usize == 0 {
            last = None;
        }
        if let Some((c, p, s)) = last
            && s.hits(chunk, part)
        {
            again += 1;
            other_part += usize::from(p != part);
            assert_eq!(c, chunk);
        } else if slot != NO_SLOT {
            last = Some((chunk, part, table.slots()[slot as usize]));
        } else {
            last = None;
        }
    }
    assert!(
        again > 100 && other_part > 50 && past_the_key > 20,
        "{again} answers again, {other_part} for another part, {past_the_key} asks past the key's bits"
    );
    for b in [tbuf, inbuf, out] {
        ctx.destroy_buffer(b, &mut calls);
    }
    assert_quiet(&ctx);
}

/// Accesses a lane makes through the helper's `load` or `store`.
const ACCESSES: u32 = 8;

/// A module with the helper variant's functions of `shape`: lane `g` makes [`ACCESSES`] accesses,
/// each's guest address (u64), size and `1` for a store at `input + 16 (g ACCESSES + j)` (push
/// words 0–1); a load writes its four words at `out + 16 (g ACCESSES + j)` (push words 2–3), a
/// store stores `0x5000_0000 + 16 (g ACCESSES + j) + word`.
fn access_module(shape: super::shape::Shape) -> Vec<u32> {
    let mut a = Asm::new("access_test");
    let h = super::library::emit_helpers_shaped(&mut a, Variant::Helper, shape).unwrap();
    let t = a.t;
    let gid_var = declare_global_id(&mut a);
    let (main, _) = a.begin_function(t.void, &[], "main").unwrap();
    let v_j = a.var(t.p_fn_u32).unwrap();
    let g = global_x(&mut a, gid_var);
    let (z, lanes) = (a.c32(0), a.c32(64));
    let token = a.call(t.u32, h.lane, &[z, g, lanes, g, z]).unwrap();
    let input = a.push_u64(0).unwrap();
    let out = a.push_u64(2).unwrap();
    let n = a.c32(ACCESSES);
    let g_n = a.mul(t.u32, g, n).unwrap();
    a.for_(v_j, n, |a, j| {
        let i = a.add(t.u32, g_n, j)?;
        let (rec, addr, size) = record(a, input, i)?;
        let at = a.add64c(rec, 12)?;
        let op = a.ld32(at)?;
        let z = a.c32(0);
        let is_load = a.eq(op, z)?;
        a.if_else(
            is_load,
            |a| {
                let v = a.call(h.vec4, h.load, &[token, j, addr, size])?;
                let o = a.index(out, i, 16)?;
                for k in 0..4 {
                    let w = library::extract(a, v, k)?;
                    let at = a.add64c(o, 4 * u64::from(k))?;
                    a.st32(at, w)?;
                }
                Ok(())
            },
            |a| {
                let sixteen = a.c32(16);
                let base = a.mul(t.u32, i, sixteen)?;
                let first = a.c32(0x5000_0000);
                let base = a.add(t.u32, base, first)?;
                let mut vals = [0; 4];
                for (k, v) in vals.iter_mut().enumerate() {
                    let kk = a.c32(k as u32);
                    *v = a.add(t.u32, base, kk)?;
                }
                let v = a.inst(rspirv::spirv::Op::CompositeConstruct, h.vec4, &vals)?;
                a.call(t.void, h.store, &[token, j, addr, size, v])
                    .map(|_| ())
            },
        )
    })
    .unwrap();
    let lanes = a.c32(64);
    a.call(t.void, h.flush, &[token, lanes]).unwrap();
    a.end_void_function().unwrap();
    a.entry(main, "main", 64);
    let words = a.finish();
    super::validate("access_test", &words).expect("spirv-val accepts the access_test module");
    words
}

/// The lane cache as a key and as a span ([`Shape::cache_span`](super::shape::Shape)), with and
/// without the fast path and the key's 32-bit test: every shape reads and writes what the CPU
/// says.
#[test]
fn loads_and_stores_by_parts_go_where_the_cpu_says_and_mark_with_the_summary() {
    use super::shape::Shape;
    let s = Shape::SHIPPED;
    for shape in [
        s,
        Shape {
            cache_span: !s.cache_span,
            ..s
        },
        Shape {
            cache_span: false,
            cache_test32: true,
            ..s
        },
        Shape {
            fast_path: false,
            ..s
        },
        Shape {
            lane_cache: false,
            ..s
        },
    ] {
        loads_and_stores_by_parts(&access_module(shape), &format!("{shape:?}"));
    }
}

/// [`access_module`]'s lanes over chunks mapped by parts ([`map_by_parts`]) and guest chunk 0
/// mapped whole. The loads walk: most stay in the chunk of the access before (the lane cache's
/// answers again, for other parts and across a part's or the chunk's end), some jump to another
/// chunk, to chunk 0 (a lane's first access below the cache's first values' reach: the program's
/// first `Hit` must answer nothing), to unmapped memory, far away and to the last bytes
/// of the address space. The stores go to every place once, a lane's to one chunk.
fn loads_and_stores_by_parts(words: &[u32], what_shape: &str) {
    let Some(ctx) = context() else { return };
    let first = 0x40_0000u64;
    let n_chunks = 8u64;
    let mut calls = 0;
    // Guest memory: an import region of one chunk for each import the layouts make.
    let imports = 16;
    let mut memory = ctx
        .host_buffer(imports * CHUNK, "the imports", &mut calls)
        .unwrap();
    let pattern = |o: usize| (o as u32).wrapping_mul(0x9e37_79b9) | 1;
    for (w, b) in memory.bytes_mut().chunks_exact_mut(4).enumerate() {
        b.copy_from_slice(&pattern(4 * w).to_le_bytes());
    }
    let (mem_at, mem_end) = (memory.address, memory.address + imports * CHUNK);
    // Enough far-away chunks that the marks' summary has several blocks.
    let mut table = ChunkTable::build(CHUNK, 16, &fillers(300)).unwrap();
    map_by_parts(&mut table, first, n_chunks, |r| {
        assert!((r as u64) < imports - 1);
        mem_at + r as u64 * CHUNK
    });
    table.insert(0, mem_at + (imports - 1) * CHUNK).unwrap();
    assert!(table.capacity() > 2 * MARK_BLOCK_SLOTS, "{table:?}");
    // Eight places in every part, of every size, one across its end into the next part (or
    // chunk), never overlapping, so that the stores land apart.
    let mut places: Vec<(u64, u32)> = Vec::new();
    for k in 0..n_chunks {
        for p in 0..16 {
            let at = (first + k) * CHUNK + p * PART;
            places.extend(
                [
                    (32, 16),
                    (256, 16),
                    (512, 8),
                    (1024, 4),
                    (1536, 12),
                    (2048, 8),
                    (3000, 4),
                    (PART - 12, 16),
                    (64, 16),
                    (128, 12),
                    (384, 8),
                    (768, 4),
                    (1280, 16),
                    (1792, 12),
                    (2560, 8),
                    (3500, 16),
                ]
                .map(|(o, size)| (at + o, size)),
            );
        }
    }
    // Each chunk's places shuffled among themselves: a lane's stores lie in one chunk.
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let per_chunk = places.len() / n_chunks as usize;
    for chunk in places.chunks_mut(per_chunk) {
        for i in (1..chunk.len()).rev() {
            chunk.swap(i, rng.below(i as u64 + 1) as usize);
        }
    }
    let n = (LANES * ACCESSES) as usize;
    assert_eq!(places.len(), n);
    // The loads' walk, lane by lane.
    let mut walk = Vec::with_capacity(n);
    for _ in 0..LANES {
        let mut chunk = first + rng.below(n_chunks);
        for j in 0..ACCESSES {
            let size = 4 * (1 + rng.below(4) as u32);
            let within = |rng: &mut Rng, c: u64| {
                let off = match rng.below(6) {
                    0 => CHUNK - 16,
                    1 => CHUNK - 4 * (1 + rng.below(3)),
                    2 => PART * rng.below(16) + PART - 4 * (1 + rng.below(4)),
                    _ => 4 * rng.below(CHUNK / 4),
                };
                c * CHUNK + off
            };
            let addr = match rng.below(16) {
                0 if j == 0 => 4 * rng.below(0xfff0 / 4),
                0 | 1 => within(&mut rng, 0),
                2 => {
                    chunk = first + rng.below(n_chunks);
                    within(&mut rng, chunk)
                }
                3 => {
                    let unmapped = first + n_chunks + rng.below(4);
                    within(&mut rng, unmapped)
                }
                4 => 0x7fff_0000_0000 + 4 * rng.below(1 << 20),
                5 => u64::MAX - 15 - 4 * rng.below(8),
                _ => within(&mut rng, chunk),
            };
            walk.push((addr, size));
        }
    }
    let tbuf = upload(&ctx, &table, &mut calls);
    let mut inbuf = ctx
        .host_buffer(16 * n as u64, "the accesses", &mut calls)
        .unwrap();
    let mut out = ctx
        .host_buffer(16 * n as u64, "the loaded words", &mut calls)
        .unwrap();
    let mut marks = ctx
        .host_buffer(
            4 * mark_buffer_words(table.capacity()) as u64,
            "the marks",
            &mut calls,
        )
        .unwrap();
    marks.bytes_mut().fill(0);
    out.bytes_mut().fill(0xee);
    let mut push = PushBlock::default();
    TablePush::of(&table, tbuf.address).write(&mut push);
    push.set64(0, inbuf.address);
    push.set64(2, out.address);
    push.set64(library::push::MARKS, marks.address);
    let device = |g: u64| table.device_from_guest(g);
    let before: Vec<u8> = memory.bytes().to_vec();
    let word_at = |bytes: &[u8], dev: u64| {
        assert!(
            dev >= mem_at && dev + 4 <= mem_end,
            "{dev:#x} outside the imports"
        );
        le32(bytes, (dev - mem_at) as usize)
    };
    for store in [false, true] {
        // Loads from random places (any lane may read any), then stores, each place once.
        let mut input = Vec::with_capacity(16 * n);
        let chosen: &[(u64, u32)] = if store { &places } else { &walk };
        for &(addr, size) in chosen {
            input.extend_from_slice(&addr.to_le_bytes());
            input.extend_from_slice(&size.to_le_bytes());
            input.extend_from_slice(&u32::from(store).to_le_bytes());
        }
        inbuf.bytes_mut()[..input.len()].copy_from_slice(&input);
        dispatch(&ctx, words, &push, LANES / 64);
        if !store {
            let mut mapped = 0;
            for (i, &(addr, size)) in chosen.iter().enumerate() {
                for w in 0..4u64 {
                    let got = le32(out.bytes(), 16 * i + 4 * w as usize);
                    let g = addr.wrapping_add(4 * w);
                    let want = if w < u64::from(size) / 4 {
                        device(g).map_or(0, |d| {
                            mapped += 1;
                            word_at(&before, d)
                        })
                    } else {
                        0
                    };
                    assert_eq!(got, want, "{what_shape}: load {i} at {addr:#x}, word {w}");
                }
            }
            assert!(mapped > n, "{mapped} mapped words loaded");
            continue;
        }
        // Every word each store reaches (by its part's slot), and nothing else, changed; each
        // slot it hit is marked once for each of its lookups that hit, with its block's summary.
        let mut expected = before.clone();
        let mut want_marks = vec![0u32; table.capacity()];
        for (i, &(addr, size)) in chosen.iter().enumerate() {
            for w in 0..u64::from(size) / 4 {
                if let Some(d) = device(addr + 4 * w) {
                    let v = 0x5000_0000 + 16 * i as u32 + w as u32;
                    let o = (d - mem_at) as usize;
                    expected[o..o + 4].copy_from_slice(&v.to_le_bytes());
                }
            }
            let last = addr + u64::from(size) - 1;
            let s0 = table.slot_of(addr);
            // Two parts of one chunk through one slot mark it once (the CPU reference's C1).
            let s1 = (last / PART != addr / PART)
                .then(|| table.slot_of(last))
                .flatten()
                .filter(|&s| Some(s) != s0);
            for s in [s0, s1].into_iter().flatten() {
                want_marks[s] += 1;
            }
        }
        let changed = (0..before.len() / 4)
            .filter(|&w| le32(memory.bytes(), 4 * w) != le32(&expected, 4 * w))
            .count();
        assert_eq!(
            changed, 0,
            "{what_shape}: {changed} words differ from the CPU's stores"
        );
        let got: Vec<u32> = (0..mark_buffer_words(table.capacity()))
            .map(|w| marks.word(w))
            .collect();
        let (got_marks, summary) = got.split_at(table.capacity());
        assert_eq!(got_marks, &want_marks[..], "{what_shape}: the marks");
        for (b, &flag) in summary.iter().enumerate() {
            let any = want_marks[b * MARK_BLOCK_SLOTS..]
                .iter()
                .take(MARK_BLOCK_SLOTS)
                .any(|&m| m > 0);
            assert_eq!(flag, u32::from(any), "summary word {b}");
        }
        let marked_blocks = summary.iter().filter(|&&f| f != 0).count();
        assert!(marked_blocks >= 2, "{marked_blocks} blocks marked");
        // Stores into chunks reached by parts marked a slot that excludes parts.
        assert!(
            want_marks
                .iter()
                .enumerate()
                .any(|(s, &m)| m > 0 && table.slots()[s].excluded() != 0)
        );
    }
    for b in [tbuf, inbuf, out, marks, memory] {
        ctx.destroy_buffer(b, &mut calls);
    }
    assert_quiet(&ctx);
}

#[test]
fn a_module_of_another_memory_model_is_refused_and_left_as_it_was() {
    let mut b = Builder::new();
    b.memory_model(AddressingModel::Logical, MemoryModel::GLSL450);
    let e = emit_into(&mut b, Variant::Instrumented).unwrap_err();
    assert!(e.to_string().contains("PhysicalStorageBuffer64"), "{e}");
    assert!(b.module_ref().capabilities.is_empty());
}

/// Workgroups [`heat_module`]'s test dispatches over a grid of one workgroup: more than the heat
/// map's [`HEAT_SIDE`](dispatchscope_core::instrument::HEAT_SIDE)² cells, so that a cell past
/// the grid would lie past the instrumentation buffer.
const PAST_THE_GRID: u32 = 1100;

/// A module of the instrumented variant of `shape` (`name` for its errors): lane `local` of
/// workgroup `wg` (the global id's `/ 64` and `% 64`, pixel `(local % 8, local / 8)` of its
/// tile) takes its token, runs `body` with the helpers, its global id and its token, and
/// flushes; the instrumentation buffer at push words 26–27.
fn instrumented_module(
    name: &'static str,
    shape: super::shape::Shape,
    body: impl FnOnce(&mut Asm, &super::library::Helpers, u32, u32) -> super::R<()>,
) -> Vec<u32> {
    let mut a = Asm::new(name);
    let h = super::library::emit_helpers_shaped(&mut a, Variant::Instrumented, shape).unwrap();
    let t = a.t;
    let gid_var = declare_global_id(&mut a);
    let (main, _) = a.begin_function(t.void, &[], "main").unwrap();
    let g = global_x(&mut a, gid_var);
    let lanes = a.c32(64);
    let wg = a.bin(rspirv::spirv::Op::UDiv, t.u32, g, lanes).unwrap();
    let local = a.bin(rspirv::spirv::Op::UMod, t.u32, g, lanes).unwrap();
    let eight = a.c32(8);
    let x = a.bin(rspirv::spirv::Op::UMod, t.u32, local, eight).unwrap();
    let y = a.bin(rspirv::spirv::Op::UDiv, t.u32, local, eight).unwrap();
    let token = a.call(t.u32, h.lane, &[wg, local, lanes, x, y]).unwrap();
    body(&mut a, &h, g, token).unwrap();
    a.call(t.void, h.flush, &[token, lanes]).unwrap();
    a.end_void_function().unwrap();
    a.entry(main, "main", 64);
    let words = a.finish();
    super::validate(name, &words).expect("spirv-val accepts the test's module");
    words
}

/// [`instrumented_module`], shipped: each lane loads 4 bytes at the guest address of push words
/// 0–1 (site 0).
fn heat_module() -> Vec<u32> {
    instrumented_module(
        "heat_test",
        super::shape::Shape::SHIPPED,
        |a, h, _, token| {
            let addr = a.push_u64(0)?;
            let (site, four) = (a.c32(0), a.c32(4));
            a.call(h.vec4, h.load, &[token, site, addr, four])
                .map(|_| ())
        },
    )
}

/// A dispatch larger than the grid its host described (a careless emulator's, or the hung pass
/// of `emulator-host --lose-device`, 131,070 workgroups) writes no heat past the grid: every
/// escape is counted by its site, the grid's one cell holds its workgroup's, no other cell holds
/// any, and the words past the buffer are untouched (they were the process's heap on lavapipe,
/// and the host aborted on a corrupted heap two runs in five).
#[test]
fn a_dispatch_larger_than_its_grid_writes_no_heat_past_the_map() {
    use dispatchscope_core::instrument::{
        self, Grid, HEAT_CELL_WORDS, InstrumentLayout, LaneSelection, SITES_AT, site,
    };
    let words = heat_module();
    let Some(ctx) = context() else { return };
    let mut calls = 0;
    let table = ChunkTable::build(CHUNK, 8, &fillers(16)).unwrap();
    let tbuf = upload(&ctx, &table, &mut calls);
    let layout = InstrumentLayout::with_sites(1);
    let grid = Grid::new(8, 8).unwrap();
    let unmapped = 0x10_0000;
    let init = instrument::initial_words(&layout, &LaneSelection::none(), unmapped + 64, grid);
    let guard = 4096usize;
    let n = init.len() + guard;
    let mut ibuf = ctx
        .host_buffer(4 * n as u64, "the instrumentation", &mut calls)
        .unwrap();
    for (i, b) in ibuf.bytes_mut().chunks_exact_mut(4).enumerate() {
        let w = init.get(i).copied().unwrap_or(0xeeee_eeee);
        b.copy_from_slice(&w.to_le_bytes());
    }
    let mut push = PushBlock::default();
    TablePush::of(&table, tbuf.address).write(&mut push);
    push.set64(0, unmapped);
    push.set64(library::push::INSTRUMENT, ibuf.address);
    dispatch(&ctx, &words, &push, PAST_THE_GRID);
    let word = |i: usize| le32(ibuf.bytes(), 4 * i);
    let wide = |i: usize| u64::from(word(i)) | u64::from(word(i + 1)) << 32;
    let escapes = wide((SITES_AT + 2 * site::ESCAPES) as usize);
    assert_eq!(escapes, u64::from(64 * PAST_THE_GRID), "site 0's escapes");
    let heat = layout.heat_at() as usize;
    let cell = HEAT_CELL_WORDS as usize;
    assert_eq!(
        wide(heat),
        64,
        "the grid's cell holds its workgroup's escapes"
    );
    let [cx, cy] = grid.heat_cells();
    let on_grid = (cx * cy) as usize * cell;
    let stray = (heat + on_grid..init.len())
        .filter(|&i| word(i) != 0)
        .count();
    assert_eq!(stray, 0, "heat words past the grid's cells");
    let past = (init.len()..n).filter(|&i| word(i) != 0xeeee_eeee).count();
    assert_eq!(past, 0, "words past the instrumentation buffer");
    for b in [tbuf, ibuf] {
        ctx.destroy_buffer(b, &mut calls);
    }
    assert_quiet(&ctx);
}

/// `library::crosses_part` against the 64-bit definition, `(addr + size - 1) >> part_shift !=
/// addr >> part_shift` (wrapping), on lavapipe: part shifts 0 to 12, accesses at and around
/// every part's end, of 0, 1 to 17 and huge sizes, at the bottom and the top of the address space.
#[test]
fn the_split_in_32_bit_words_is_the_64_bit_one() {
    let mut a = Asm::new("split_test");
    let t = a.t;
    let gid_var = declare_global_id(&mut a);
    let (main, _) = a.begin_function(t.void, &[], "main").unwrap();
    let g = global_x(&mut a, gid_var);
    let input = a.push_u64(0).unwrap();
    let out = a.push_u64(2).unwrap();
    let rec = a.index(input, g, 16).unwrap();
    let addr = a.ld64(rec).unwrap();
    let at = a.add64c(rec, 8).unwrap();
    let size = a.ld32(at).unwrap();
    let at = a.add64c(rec, 12).unwrap();
    let shift = a.ld32(at).unwrap();
    let split = library::crosses_part(&mut a, addr, size, shift).unwrap();
    let (one, z) = (a.c32(1), a.c32(0));
    let w = a.select(t.u32, split, one, z).unwrap();
    let o = a.index(out, g, 4).unwrap();
    a.st32(o, w).unwrap();
    a.end_void_function().unwrap();
    a.entry(main, "main", 64);
    let words = a.finish();
    super::validate("split_test", &words).expect("spirv-val accepts the split_test module");
    let Some(ctx) = context() else { return };
    let mut rng = Rng(0x5851_f42d_4c95_7f2d);
    let mut asks: Vec<(u64, u32, u32)> = Vec::new();
    for shift in 0..=12u32 {
        let part = 1u64 << shift;
        for &base in &[0u64, part * 77, u64::MAX - part + 1, 1 << 47] {
            for back in 0..=18u64 {
                for size in [0u32, 1, 2, 3, 4, 8, 12, 15, 16, 17, 4096, u32::MAX] {
                    asks.push((base.wrapping_add(part).wrapping_sub(back), size, shift));
                }
            }
        }
        for _ in 0..64 {
            let size = [0, 1, 4, 16, rng.below(1 << 32) as u32][rng.below(5) as usize];
            asks.push((rng.next(), size, shift));
        }
    }
    while !asks.len().is_multiple_of(64) {
        asks.push((0, 0, 0));
    }
    let mut calls = 0;
    let mut inbuf = ctx
        .host_buffer(16 * asks.len() as u64, "the accesses", &mut calls)
        .unwrap();
    for (i, &(addr, size, shift)) in asks.iter().enumerate() {
        let b = &mut inbuf.bytes_mut()[16 * i..16 * i + 16];
        b[..8].copy_from_slice(&addr.to_le_bytes());
        b[8..12].copy_from_slice(&size.to_le_bytes());
        b[12..].copy_from_slice(&shift.to_le_bytes());
    }
    let mut out = ctx
        .host_buffer(4 * asks.len() as u64, "the splits", &mut calls)
        .unwrap();
    out.bytes_mut().fill(0xee);
    let mut push = PushBlock::default();
    push.set64(0, inbuf.address);
    push.set64(2, out.address);
    dispatch(&ctx, &words, &push, asks.len() as u32 / 64);
    let mut crossing = 0;
    for (i, &(addr, size, shift)) in asks.iter().enumerate() {
        let last = addr.wrapping_add(u64::from(size)).wrapping_sub(1);
        let want = (last >> shift) != (addr >> shift);
        crossing += usize::from(want);
        let got = le32(out.bytes(), 4 * i);
        assert_eq!(
            got,
            u32::from(want),
            "{addr:#x} + {size} at part shift {shift}"
        );
    }
    assert!(
        crossing > asks.len() / 4,
        "{crossing} of {} cross",
        asks.len()
    );
    for b in [inbuf, out] {
        ctx.destroy_buffer(b, &mut calls);
    }
    assert_quiet(&ctx);
}

/// [`instrumented_module`] of `shape`: lane `g` makes [`ACCESSES`] loads, each's guest address
/// (u64) and size at `input + 16 (g ACCESSES + j)` (push words 0–1), at site `j % 4`.
fn counted_module(shape: super::shape::Shape) -> Vec<u32> {
    instrumented_module("counted_test", shape, |a, h, g, token| {
        let t = a.t;
        let v_j = a.var(t.p_fn_u32)?;
        let input = a.push_u64(0)?;
        let n = a.c32(ACCESSES);
        let g_n = a.mul(t.u32, g, n)?;
        a.for_(v_j, n, |a, j| {
            let i = a.add(t.u32, g_n, j)?;
            let (_, addr, size) = record(a, input, i)?;
            let three = a.c32(3);
            let site = a.and(t.u32, j, three)?;
            a.call(h.vec4, h.load, &[token, site, addr, size])
                .map(|_| ())
        })
    })
}

/// The instrumented variant's counts by site, through the lane cache as a span and as a key, over
/// chunks mapped by parts: every access, every split (an access across its part's end, the lane
/// cache answering it or not) and every escape, as the CPU counts them.
#[test]
fn the_instrumented_counts_by_parts_are_the_cpus() {
    use super::shape::Shape;
    use dispatchscope_core::instrument::{
        self, Grid, InstrumentLayout, LaneSelection, SITE_WORDS, SITES_AT, site,
    };
    let s = Shape::SHIPPED;
    let modules = [
        counted_module(s),
        counted_module(Shape {
            cache_span: false,
            ..s
        }),
    ];
    let Some(ctx) = context() else { return };
    let first = 0x40_0000u64;
    let n_chunks = 8u64;
    let mut calls = 0;
    let imports = 16;
    let memory = ctx
        .host_buffer(imports * CHUNK, "the imports", &mut calls)
        .unwrap();
    let mut table = ChunkTable::build(CHUNK, 16, &fillers(40)).unwrap();
    map_by_parts(&mut table, first, n_chunks, |r| {
        memory.address + r as u64 * CHUNK
    });
    // Each lane walks one chunk and its neighbour, every size, often across a part's end.
    let mut rng = Rng(0x1405_7b7e_f767_814f);
    let mut asks: Vec<(u64, u32)> = Vec::new();
    for _ in 0..LANES {
        let chunk = first + rng.below(n_chunks);
        for _ in 0..ACCESSES {
            let size = 4 * (1 + rng.below(4) as u32);
            let c = chunk + rng.below(2);
            let off = match rng.below(3) {
                0 => PART * rng.below(16) + PART - 4 * (1 + rng.below(4)),
                _ => 4 * rng.below(CHUNK / 4),
            };
            asks.push((c * CHUNK + off, size));
        }
    }
    let mut inbuf = ctx
        .host_buffer(16 * asks.len() as u64, "the accesses", &mut calls)
        .unwrap();
    for (i, &(addr, size)) in asks.iter().enumerate() {
        let b = &mut inbuf.bytes_mut()[16 * i..16 * i + 16];
        b[..8].copy_from_slice(&addr.to_le_bytes());
        b[8..12].copy_from_slice(&size.to_le_bytes());
    }
    // What the CPU counts, by site.
    let sites = 4usize;
    let (mut accesses, mut splits, mut escapes) =
        (vec![0u64; sites], vec![0u64; sites], vec![0u64; sites]);
    for (i, &(addr, size)) in asks.iter().enumerate() {
        let site = i % ACCESSES as usize % sites;
        accesses[site] += 1;
        let last = addr + u64::from(size) - 1;
        splits[site] += u64::from(last / PART != addr / PART);
        let escaped =
            (0..u64::from(size) / 4).any(|w| table.device_from_guest(addr + 4 * w).is_none());
        escapes[site] += u64::from(escaped);
    }
    assert!(splits.iter().sum::<u64>() > 100 && escapes.iter().sum::<u64>() > 100);
    let tbuf = upload(&ctx, &table, &mut calls);
    let layout = InstrumentLayout::with_sites(sites as u32);
    let grid = Grid::new(8, 8 * LANES / 64).unwrap();
    for (m, words) in modules.iter().enumerate() {
        let init = instrument::initial_words(&layout, &LaneSelection::none(), 0x10_0000, grid);
        let mut ibuf = ctx
            .host_buffer(4 * init.len() as u64, "the instrumentation", &mut calls)
            .unwrap();
        for (i, b) in ibuf.bytes_mut().chunks_exact_mut(4).enumerate() {
            b.copy_from_slice(&init[i].to_le_bytes());
        }
        let mut push = PushBlock::default();
        TablePush::of(&table, tbuf.address).write(&mut push);
        push.set64(0, inbuf.address);
        push.set64(library::push::INSTRUMENT, ibuf.address);
        dispatch(&ctx, words, &push, LANES / 64);
        let wide = |i: u32| {
            u64::from(le32(ibuf.bytes(), 4 * i as usize))
                | u64::from(le32(ibuf.bytes(), 4 * i as usize + 4)) << 32
        };
        for s in 0..sites {
            let at = |k: u32| wide(SITES_AT + s as u32 * SITE_WORDS + 2 * k);
            let what = format!("module {m} (0 the span cache, 1 the key's), site {s}");
            assert_eq!(at(site::GUEST), accesses[s], "{what}: accesses");
            assert_eq!(at(site::SPLITS), splits[s], "{what}: splits");
            assert_eq!(at(site::ESCAPES), escapes[s], "{what}: escapes");
        }
        ctx.destroy_buffer(ibuf, &mut calls);
    }
    for b in [tbuf, inbuf, memory] {
        ctx.destroy_buffer(b, &mut calls);
    }
    assert_quiet(&ctx);
}
