//! The corpus test against LLVM: real compute instructions, assembled by llvm-mc-14 at test time
//! (`-show-encoding`), decoded here, and compared as text with what llvm-mc-14 prints when it
//! disassembles the same bytes. Also decodes the corpus as one stream, as a listing would.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test")]

mod oracle;

use dispatchscope_rdna::{Direction, Space, decode, decode_one};
use oracle::{Oracle, assemble, disassemble};

/// What compute programs use (and the instructions the ray-traversal sample names).
const CORPUS: &str = "
s_load_dwordx16 s[0:15], s[2:3], 0x10
s_load_dwordx2 s[0:1], s[2:3], s4
s_load_dwordx4 s[8:11], s[0:1], 0x0
s_load_dword s4, s[0:1], 0x24
s_buffer_load_dwordx2 s[0:1], s[4:7], 0x8
s_buffer_load_dword s0, s[8:11], s12
s_waitcnt vmcnt(0) lgkmcnt(0)
s_waitcnt lgkmcnt(0)
s_waitcnt vmcnt(3)
s_waitcnt_vscnt null, 0x0
s_mov_b32 s0, s1
s_mov_b64 s[0:1], exec
s_mov_b32 s5, 0x12345678
s_movk_i32 s4, 0x1000
s_add_u32 s0, s0, 16
s_addc_u32 s1, s1, 0
s_lshl_b64 s[2:3], s[2:3], 4
s_and_b32 s0, s1, 0xffff
s_and_saveexec_b32 s2, vcc_lo
s_or_b32 exec_lo, exec_lo, s2
s_cmp_eq_u32 s0, 0
s_cmp_lg_u64 s[0:1], 0
s_cselect_b32 s0, s1, s2
s_cbranch_scc1 3
s_cbranch_execz 12
s_cbranch_vccnz -5
s_branch -20
s_getpc_b64 s[0:1]
s_setpc_b64 s[0:1]
s_barrier
s_nop 0
s_endpgm
s_getreg_b32 s0, hwreg(HW_REG_HW_ID1)
s_setreg_b32 hwreg(HW_REG_MODE, 0, 4), s0
v_mov_b32_e32 v0, 0
v_mov_b32_e32 v1, s0
v_mov_b32_e32 v2, 0x3f800000
v_mov_b32_e32 v3, 1.0
v_add_nc_u32_e32 v0, v1, v2
v_add_co_u32 v0, vcc_lo, v1, v2
v_add_co_ci_u32_e32 v1, vcc_lo, 0, v3, vcc_lo
v_add_co_u32 v4, s0, s2, v4
v_sub_nc_u32_e32 v0, 16, v1
v_lshlrev_b32_e32 v0, 2, v1
v_lshlrev_b64 v[0:1], 3, v[2:3]
v_lshrrev_b32_e32 v1, 16, v1
v_and_b32_e32 v0, 0xffff, v0
v_or_b32_e32 v0, v1, v2
v_mul_lo_u32 v0, v1, v2
v_mul_hi_u32 v0, v1, s2
v_mad_u64_u32 v[0:1], s0, v2, v3, v[4:5]
v_mad_u32_u24 v0, v1, v2, v3
v_cndmask_b32_e32 v0, v1, v2, vcc_lo
v_cndmask_b32_e64 v0, 0, 1, s0
v_cmp_eq_u32_e32 vcc_lo, v1, v2
v_cmp_gt_u32_e64 s0, 64, v1
v_cmp_lt_f32_e32 vcc_lo, v0, v1
v_cmp_ne_u64_e32 vcc_lo, 0, v[0:1]
v_cmpx_le_f32_e32 v0, v1
v_add_f32_e32 v0, 0.5, v1
v_add_f32_e32 v0, 0x12345, v1
v_mul_f32_e32 v0, v1, v2
v_fma_f32 v0, v1, v2, v3
v_fma_f32 v0, -v1, |v2|, v3 clamp mul:2
v_fmac_f32_e32 v0, v1, v2
v_fmaak_f32 v0, v1, v2, 0x3f800000
v_fmamk_f32 v0, v1, 0x40000000, v2
v_min_f32_e32 v0, v1, v2
v_max3_f32 v0, v1, v2, v3
v_med3_f32 v0, v1, 0, 1.0
v_rcp_f32_e32 v0, v1
v_sqrt_f32_e32 v0, v1
v_cvt_f32_u32_e32 v0, v1
v_cvt_u32_f32_e32 v0, v1
v_cvt_f16_f32_e32 v0, v1
v_floor_f64_e32 v[0:1], v[2:3]
v_add_f64 v[0:1], v[2:3], v[4:5]
v_bfe_u32 v0, v1, 8, 8
v_bfi_b32 v0, v1, v2, v3
v_alignbit_b32 v0, v1, v2, 16
v_lshl_add_u32 v0, v1, 2, v2
v_add3_u32 v0, v1, v2, v3
v_readfirstlane_b32 s0, v0
v_readlane_b32 s0, v1, 3
v_writelane_b32 v1, s0, 3
v_mbcnt_lo_u32_b32 v0, -1, 0
v_add_f16_e32 v0, v1, v2
v_pk_add_f16 v0, v1, v2
v_pk_fma_f16 v0, v1, v2, v3
v_pk_mul_f16 v0, v1, v2 op_sel_hi:[0,1]
v_dot2_f32_f16 v0, v1, v2, v3
ds_read_b32 v0, v1
ds_read_b32 v0, v1 offset:16
ds_read_b64 v[0:1], v2 offset:256
ds_write_b32 v1, v2 offset:8
ds_write_b64 v1, v[2:3]
ds_read2_b32 v[0:1], v2 offset0:1 offset1:2
ds_write2_b32 v0, v1, v2 offset1:4
ds_add_u32 v0, v1
ds_add_rtn_u32 v0, v1, v2 offset:4
ds_bpermute_b32 v0, v1, v2
scratch_load_dword v0, v1, off offset:16
scratch_load_dword v0, off, s4 offset:8
scratch_store_dword v1, v2, off
scratch_load_dwordx4 v[0:3], v4, off offset:-16
flat_load_dword v0, v[1:2] offset:16
flat_load_dwordx2 v[0:1], v[2:3]
flat_load_dwordx4 v[0:3], v[4:5]
flat_store_dword v[1:2], v0
flat_atomic_add v0, v[1:2], v3 glc
global_load_dword v0, v[1:2], off
global_load_dword v0, v1, s[2:3] offset:-16
global_load_dwordx4 v[0:3], v4, s[0:1]
global_store_dword v[1:2], v0, off
global_atomic_add v0, v1, s[2:3]
global_atomic_cmpswap v0, v[1:2], v[3:4], off glc
buffer_load_dword v0, v1, s[4:7], 0 offen
buffer_load_dwordx2 v[0:1], v2, s[4:7], 0 offen offset:16
buffer_load_dwordx4 v[0:3], off, s[8:11], s12 offset:32
buffer_load_format_xyzw v[0:3], v4, s[0:3], 0 idxen
buffer_store_dword v0, v1, s[4:7], 0 offen glc
buffer_atomic_add v0, v1, s[4:7], 0 offen glc
tbuffer_load_format_x v0, v1, s[4:7], 0 format:[BUF_FMT_32_FLOAT] idxen
tbuffer_store_format_xy v[0:1], v2, s[4:7], 0 format:[BUF_FMT_32_32_UINT] offen
image_bvh_intersect_ray v[0:3], v[0:15], s[4:7]
image_bvh64_intersect_ray v[0:3], v[0:15], s[4:7]
image_bvh_intersect_ray v[4:7], v[8:15], s[4:7] a16
image_load v[0:3], v[4:5], s[8:15] dmask:0xf dim:SQ_RSRC_IMG_2D unorm
image_load_mip v0, v[2:4], s[8:15] dmask:0x1 dim:SQ_RSRC_IMG_2D
image_store v[0:3], v[4:5], s[8:15] dmask:0xf dim:SQ_RSRC_IMG_2D unorm glc
image_sample v[0:3], v[4:5], s[8:15], s[16:19] dmask:0xf dim:SQ_RSRC_IMG_2D
image_sample_lz v[0:1], v[4:5], s[8:15], s[16:19] dmask:0x3 dim:SQ_RSRC_IMG_2D
image_sample_l v[0:3], [v4, v7, v9], s[8:15], s[16:19] dmask:0xf dim:SQ_RSRC_IMG_2D
image_sample_c_lz v0, v[4:6], s[8:15], s[16:19] dmask:0x1 dim:SQ_RSRC_IMG_2D
image_gather4 v[0:3], v[4:5], s[8:15], s[16:19] dmask:0x1 dim:SQ_RSRC_IMG_2D
image_get_resinfo v[0:3], v4, s[8:15] dmask:0xf dim:SQ_RSRC_IMG_2D
image_atomic_add v0, v[4:5], s[8:15] dmask:0x1 dim:SQ_RSRC_IMG_2D glc
image_atomic_cmpswap v[0:1], v[4:5], s[8:15] dmask:0x3 dim:SQ_RSRC_IMG_2D glc
image_load v0, v4, s[8:15] dmask:0x3 dim:SQ_RSRC_IMG_1D d16
image_load v[0:4], v[4:5], s[8:15] dmask:0xf dim:SQ_RSRC_IMG_2D tfe
v_mov_b32_dpp v0, v1 quad_perm:[1,0,3,2] row_mask:0xf bank_mask:0xf
v_add_f32_dpp v0, v1, v2 row_shr:1 row_mask:0xf bank_mask:0xf bound_ctrl:1
v_add_nc_u32_dpp v0, v1, v2 row_share:3 row_mask:0xf bank_mask:0xf fi:1
v_max_f32_dpp v0, -v1, |v2| row_xmask:1 row_mask:0xa bank_mask:0x5
v_mov_b32_dpp v0, v1 dpp8:[7,6,5,4,3,2,1,0]
v_add_nc_u32_dpp v0, v1, v2 dpp8:[1,0,3,2,5,4,7,6] fi:1
v_mov_b32_sdwa v0, v1 dst_sel:WORD_1 dst_unused:UNUSED_PRESERVE src0_sel:BYTE_0
v_add_nc_u32_sdwa v0, v1, v2 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:WORD_0 src1_sel:WORD_1
v_add_f32_sdwa v0, -v1, |v2| clamp dst_sel:BYTE_1 dst_unused:UNUSED_SEXT src0_sel:DWORD src1_sel:BYTE_3
v_cmp_eq_u32_sdwa vcc_lo, v1, v2 src0_sel:BYTE_0 src1_sel:WORD_1
v_cmp_lt_f32_sdwa s10, v1, v2 src0_sel:WORD_0 src1_sel:DWORD
s_sendmsg sendmsg(MSG_INTERRUPT)
s_sendmsg sendmsg(MSG_GS_DONE, GS_OP_NOP)
s_sendmsg sendmsg(MSG_GS, GS_OP_EMIT, 1)
v_fma_mix_f32 v0, -v1, |v2|, v3 op_sel:[0,0,1] op_sel_hi:[1,1,0] clamp
v_fma_mixlo_f16 v0, v1, v2, 1.0 op_sel_hi:[1,1,1]
v_fma_mixhi_f16 v0, v1, s2, v3
buffer_atomic_csub v0, v1, s[4:7], 0 offen glc
global_atomic_csub v0, v1, v2, s[0:1] glc
ds_gws_init v0 gds
ds_gws_barrier v0 offset:8 gds
ds_gws_sema_v gds
ds_gws_sema_release_all gds
ds_ordered_count v0, v1 gds
ds_swizzle_b32 v0, v1 offset:swizzle(SWAP,16)
ds_swizzle_b32 v0, v1 offset:swizzle(QUAD_PERM,0,1,2,3)
ds_swizzle_b32 v0, v1 offset:swizzle(BROADCAST,8,3)
ds_swizzle_b32 v0, v1 offset:swizzle(REVERSE,8)
ds_swizzle_b32 v0, v1 offset:swizzle(BITMASK_PERM,\"01pip\")
ds_swizzle_b32 v0, v1 offset:65535
v_permlane16_b32 v0, v1, s2, s3 op_sel:[1,0]
v_permlanex16_b32 v0, v1, s2, s3 op_sel:[1,1]
v_nop_dpp quad_perm:[1,0,0,0] row_mask:0xd bank_mask:0x2
v_nop dpp8:[1,0,0,0,0,4,4,6] fi:1
";

#[test]
fn corpus_agrees_with_llvm() {
    let assembled = assemble(CORPUS);
    let expected_lines = CORPUS.lines().filter(|l| !l.trim().is_empty()).count();
    assert_eq!(
        assembled.len(),
        expected_lines,
        "llvm-mc-14 assembled every line of the corpus"
    );
    let cases: Vec<Vec<u32>> = assembled
        .iter()
        .map(|(_, b)| {
            b.chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        })
        .collect();
    let oracle = disassemble(&cases);
    let mut failures = Vec::new();
    for ((asm, bytes), llvm) in assembled.iter().zip(oracle) {
        let ours = decode_one(bytes, 0);
        match llvm {
            Oracle::Text(t) if t == ours.text && usize::from(ours.len) == bytes.len() => {}
            other => failures.push(format!(
                "`{asm}` {bytes:02x?}: llvm {other:?}, ours `{}` ({:?})",
                ours.text, ours.kind
            )),
        }
    }
    println!(
        "corpus: {} instructions tested, {} agree",
        assembled.len(),
        assembled.len() - failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // As one stream: the same texts, one after another, at the right pcs.
    let stream: Vec<u8> = assembled.iter().flat_map(|(_, b)| b.clone()).collect();
    let listing: Vec<_> = decode(&stream, 0x1000).collect();
    assert_eq!(listing.len(), assembled.len());
    let mut pc = 0x1000u64;
    for (inst, (_, bytes)) in listing.iter().zip(&assembled) {
        assert_eq!(inst.pc, pc);
        pc += bytes.len() as u64;
    }
}

#[test]
fn memory_instructions_are_marked() {
    let assembled = assemble(
        "s_load_dwordx16 s[0:15], s[2:3], 0x10\nimage_bvh_intersect_ray v[0:3], v[0:15], s[4:7]\n\
         buffer_load_dwordx2 v[0:1], v2, s[4:7], 0 offen\nds_read_b32 v0, v1\nscratch_load_dword v0, v1, off\n\
         flat_load_dword v0, v[1:2]\nglobal_store_dword v[1:2], v0, off\nds_add_rtn_u32 v0, v1, v2\nv_add_nc_u32_e32 v0, v1, v2\n",
    );
    let got: Vec<_> = assembled
        .iter()
        .map(|(_, b)| decode_one(b, 0).memory.map(|m| (m.space, m.direction)))
        .collect();
    use Direction::*;
    use Space::*;
    assert_eq!(
        got,
        vec![
            Some((Scalar, Load)),
            Some((Image, Load)),
            Some((Buffer, Load)),
            Some((Lds, Load)),
            Some((Scratch, Load)),
            Some((Flat, Load)),
            Some((Global, Store)),
            Some((Lds, Atomic)),
            None,
        ]
    );
}
