//! [`super::library::emit_into`] from a caller's side: a small compute module written with rspirv's
//! own builder (not this crate's `Asm`), the helper emitted into it, validated by spirv-val, and
//! run on the device (lavapipe here, validation layer on) against the CPU's lookup, chunk by chunk.

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

use super::library::{EmittedHelpers, Variant, emit_into};
use super::record::NO_SLOT;
use crate::commands::Commands;
use crate::pipeline::Pipeline;
use crate::push::PushBlock;
use crate::table::TablePush;
use crate::{Context, ContextOptions, VkError};
use dispatchscope_core::chunk_table::ChunkTable;
use dispatchscope_core::report::LookupOutcome;

const LANES: u32 = 256;

/// The caller's module: lane `i` looks up chunk `first + i` (push words 0–1) and writes
/// `{device_addr, slot, probes}` to 16 bytes at `out + 16 i` (push words 2–3).
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
    let (c0, c1, c2, c3, c32) = (
        c(&mut b, 0),
        c(&mut b, 1),
        c(&mut b, 2),
        c(&mut b, 3),
        c(&mut b, 32),
    );
    let c8 = b.constant_bit64(u64_, 8);
    let c12 = b.constant_bit64(u64_, 12);
    let c16 = b.constant_bit64(u64_, 16);
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
    let chunk = b.i_add(u64_, None, first, x64).unwrap();
    let hit = b
        .function_call(h.hit_type, None, h.lookup.unwrap(), [chunk])
        .unwrap();
    let dev = b.composite_extract(u64_, None, hit, [0]).unwrap();
    let slot = b.composite_extract(u32_, None, hit, [1]).unwrap();
    let probes = b.composite_extract(u32_, None, hit, [2]).unwrap();
    let off = b.i_mul(u64_, None, x64, c16).unwrap();
    let at = b.i_add(u64_, None, out, off).unwrap();
    let at8 = b.i_add(u64_, None, at, c8).unwrap();
    let at12 = b.i_add(u64_, None, at, c12).unwrap();
    for (addr, value, ty, align) in [
        (at, dev, p_u64, 8),
        (at8, slot, p_u32, 4),
        (at12, probes, p_u32, 4),
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

#[test]
fn a_caller_module_with_the_emitted_helper_looks_up_as_the_cpu_does() {
    let (words, h) = caller_module();
    assert!(h.lookup.is_some());
    let Some(ctx) = context() else { return };
    // Every other chunk of a run is mapped, some keys far away: hits, misses and longer probes.
    let first = 0x40_0000u64;
    let mut entries: Vec<(u64, u64)> = (0..u64::from(LANES))
        .filter(|i| i % 2 == 0)
        .map(|i| (first + i, 0x7000_0000_0000 + i * 0x1_0000))
        .collect();
    entries.extend((0..64u64).map(|i| (0x9_0000_0000 + i * 977, 0x5000_0000_0000 + i)));
    let table = ChunkTable::build(0x1_0000, 8, &entries).unwrap();
    let mut calls = 0;
    let bytes = table.to_le_bytes();
    let mut tbuf = ctx
        .host_buffer(bytes.len() as u64, "the table", &mut calls)
        .unwrap();
    tbuf.bytes_mut()[..bytes.len()].copy_from_slice(&bytes);
    let mut out = ctx
        .host_buffer(16 * u64::from(LANES), "the results", &mut calls)
        .unwrap();
    out.bytes_mut().fill(0xee);
    let pipeline = Pipeline::new(&ctx.device, &words, c"main", 1).unwrap();
    let commands = Commands::new(&ctx).unwrap();
    let mut push = PushBlock::default();
    TablePush::of(&table, tbuf.address).write(&mut push);
    push.set64(0, first);
    push.set64(2, out.address);
    let d = &ctx.device;
    let cmd = commands.cmd;
    // SAFETY: the command buffer is not pending; the pipeline and buffers are live until the
    // submit below is waited for; the push block is 128 bytes.
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
        d.cmd_dispatch(cmd, LANES / 64, 1, 1);
        commands
            .finish_for_host(
                vk::PipelineStageFlags::COMPUTE_SHADER,
                vk::AccessFlags::SHADER_WRITE,
            )
            .unwrap();
    }
    let (mut hits, mut longer) = (0, 0);
    for i in 0..LANES as usize {
        let r = &out.bytes()[16 * i..16 * i + 16];
        let dev = u64::from_le_bytes(r[..8].try_into().unwrap());
        let slot = u32::from_le_bytes(r[8..12].try_into().unwrap());
        let probes = u32::from_le_bytes(r[12..16].try_into().unwrap());
        let chunk = first + i as u64;
        let t = table.trace(chunk);
        assert_eq!(probes as usize, t.probes.len(), "chunk {chunk:#x}: probes");
        match t.outcome {
            LookupOutcome::Hit {
                slot: s,
                device_addr,
            } => {
                assert_eq!((dev, slot), (device_addr, s as u32), "chunk {chunk:#x}");
                hits += 1;
            }
            _ => assert_eq!((dev, slot), (0, NO_SLOT), "chunk {chunk:#x}: a miss"),
        }
        longer += usize::from(probes > 1);
    }
    assert_eq!(hits, LANES / 2);
    assert!(longer > 0, "no lookup read more than one slot");
    pipeline.destroy(d);
    drop(commands);
    ctx.destroy_buffer(tbuf, &mut calls);
    ctx.destroy_buffer(out, &mut calls);
    assert_eq!(
        ctx.validation_messages(),
        0,
        "{}",
        ctx.validation_text().join("\n")
    );
}

#[test]
fn a_module_of_another_memory_model_is_refused_and_left_as_it_was() {
    let mut b = Builder::new();
    b.memory_model(AddressingModel::Logical, MemoryModel::GLSL450);
    let e = emit_into(&mut b, Variant::Instrumented).unwrap_err();
    assert!(e.to_string().contains("PhysicalStorageBuffer64"), "{e}");
    assert!(b.module_ref().capabilities.is_empty());
}
