//! Decoding 1 MiB of code into listing lines: the figure that matters is the time per MiB (goal:
//! at most 20 ms); `decode_1mib` is the traversal loop, `decode_1mib_mixed` adds image, DPP and
//! SDWA instructions. Both take each line as an owned [`dispatchscope_rdna::Instruction`], as a
//! listing keeps them; `decode_1mib_mixed_reused` writes every line into one buffer instead
//! (`Decoder::next_line`), as a printer that does not keep them can.

use criterion::{Criterion, Throughput, criterion_main};

/// A MiB of plausible compute code: the instructions of a traversal loop, repeated.
fn mib_of_code() -> Vec<u8> {
    let loop_body: &[u32] = &[
        0xf4100001, 0xfa000010, // s_load_dwordx16 s[0:15], s[2:3], 0x10
        0xbf8c0070, // s_waitcnt vmcnt(0) lgkmcnt(0)
        0xd70f6a00, 0x00020501, // v_add_co_u32 v0, vcc_lo, v1, v2
        0x4a000501, // v_add_nc_u32_e32 v0, v1, v2
        0x060002ff, 0x00012345, // v_add_f32_e32 v0, 0x12345, v1
        0xd54b8200, 0x2c0e0501, // v_fma_f32 v0, -v1, |v2|, v3 clamp mul:2
        0xf1989f01, 0x00010000, // image_bvh_intersect_ray v[0:3], v[0:15], s[4:7]
        0xe0341010, 0x80010002, // buffer_load_dwordx2 v[0:1], v2, s[4:7], 0 offen offset:16
        0xd8d80010, 0x00000001, // ds_read_b32 v0, v1 offset:16
        0xdc304010, 0x007d0001, // scratch_load_dword v0, v1, off offset:16
        0xdc300010, 0x007d0001, // flat_load_dword v0, v[1:2] offset:16
        0x7d840501, // v_cmp_eq_u32_e32 vcc_lo, v1, v2
        0xbf820005, // s_branch 5
    ];
    let mut out = Vec::with_capacity(1 << 20);
    while out.len() + 4 * loop_body.len() <= 1 << 20 {
        for w in loop_body {
            out.extend_from_slice(&w.to_le_bytes());
        }
    }
    while out.len() < 1 << 20 {
        out.extend_from_slice(&0xbf800000u32.to_le_bytes()); // s_nop 0
    }
    out
}

/// A MiB of the traversal loop with image, DPP and SDWA instructions between its iterations.
fn mib_of_mixed_code() -> Vec<u8> {
    let extra: &[u32] = &[
        0xf0800f1a, 0x00030100,
        0x04030201, // image_sample v[1:4], [v0, v1, v2], s[12:19], s[0:3] …
        0xf0000f00,
        0x00030100, // image_load v[1:4], v0, s[12:19] dmask:0xf dim:SQ_RSRC_IMG_1D
        0x7e0002fa,
        0xff00e401, // v_mov_b32_dpp v0, v1 quad_perm:[0,1,2,3] row_mask:0xf bank_mask:0xf
        0x060204f9, 0x06060601, // v_add_f32_sdwa v1, v1, v2 dst_sel:DWORD …
        0x060204e9, 0x00fac601, // v_add_f32_dpp v1, v1, v2 dpp8:[6,0,3,5,7,1,0,0]
    ];
    let body = mib_of_code();
    let mut out = Vec::with_capacity(1 << 20);
    for chunk in body.chunks(4 * 22) {
        if out.len() + chunk.len() + 4 * extra.len() > 1 << 20 {
            break;
        }
        out.extend_from_slice(chunk);
        for w in extra {
            out.extend_from_slice(&w.to_le_bytes());
        }
    }
    while out.len() < 1 << 20 {
        out.extend_from_slice(&0xbf800000u32.to_le_bytes()); // s_nop 0
    }
    out
}

fn bench(c: &mut Criterion) {
    let code = mib_of_code();
    let mixed = mib_of_mixed_code();
    let mut g = c.benchmark_group("rdna");
    g.throughput(Throughput::Bytes(code.len() as u64));
    g.bench_function("decode_1mib", |b| {
        b.iter(|| {
            let mut n = 0usize;
            for inst in dispatchscope_rdna::decode(std::hint::black_box(&code), 0) {
                n += inst.text.len();
            }
            n
        })
    });
    g.bench_function("decode_1mib_mixed", |b| {
        b.iter(|| {
            let mut n = 0usize;
            for inst in dispatchscope_rdna::decode(std::hint::black_box(&mixed), 0) {
                n += inst.text.len();
            }
            n
        })
    });
    g.bench_function("decode_1mib_mixed_reused", |b| {
        let mut text = String::with_capacity(128);
        b.iter(|| {
            let mut n = 0usize;
            let mut lines = dispatchscope_rdna::decode(std::hint::black_box(&mixed), 0);
            while lines.next_line(&mut text).is_some() {
                n += text.len();
            }
            n
        })
    });
    g.finish();
}

mod group {
    #![allow(
        missing_docs,
        reason = "criterion_group! declares an undocumented `pub fn benches`"
    )]
    use super::bench;
    criterion::criterion_group!(benches, bench);
}

criterion_main!(group::benches);
