// The program of samples/ray-traversal.json (ours: the records name the instructions, not the
// code). Each line is `offset: instruction`; tools/build_program.py assembles it with llvm-mc-14
// and fills the gaps with s_nop 0, so that the instructions the accesses name sit at their pcs.
0x00: s_load_dwordx2 s[0:1], s[4:5], 0x0
0x08: s_load_dwordx4 s[8:11], s[4:5], 0x10
0x10: s_mov_b32 s2, 0x70000000
0x18: s_mov_b32 s3, 0x80000000
0x20: v_lshlrev_b32_e32 v1, 4, v0
0x24: v_mov_b32_e32 v7, 0
0x28: s_waitcnt lgkmcnt(0)
0x2c: v_add_co_u32 v2, vcc_lo, s0, v1
0x34: v_mov_b32_e32 v3, s1
0x38: v_add_co_ci_u32_e32 v3, vcc_lo, 0, v3, vcc_lo
0x3c: v_mov_b32_e32 v13, s2
0x40: v_cmp_gt_u32_e32 vcc_lo, 64, v0
0x44: s_and_saveexec_b32 s6, vcc_lo
0x48: s_cbranch_execz 43
0x80: buffer_load_dwordx4 v[4:7], v1, s[8:11], 0 offen
0x88: s_waitcnt vmcnt(0)
0x8c: v_readfirstlane_b32 s12, v4
0x90: s_load_dwordx16 s[16:31], s[12:13], 0x0
0x98: s_waitcnt lgkmcnt(0)
0x9c: v_bfrev_b32_e32 v8, 1
0xa0: flat_store_dword v[7:8], v4
0xa8: v_mov_b32_e32 v16, s16
0xac: v_mov_b32_e32 v17, s17
0xb0: image_bvh_intersect_ray v[12:15], v[16:31], s[20:23]
0xb8: s_waitcnt vmcnt(0)
0xbc: v_lshlrev_b32_e32 v9, 3, v12
0xc0: buffer_load_dwordx2 v[10:11], v9, s[24:27], 0 offen
0xc8: v_med3_u32 v8, v13, s2, s3
0xd0: flat_store_dword v[7:8], v10
0xd8: scratch_load_dword v14, v7, off offset:16
0xe0: ds_read_b32 v15, v7
0xe8: s_waitcnt vmcnt(0) lgkmcnt(0)
0xec: v_add_nc_u32_e32 v10, v14, v15
0xf0: global_store_dwordx2 v[2:3], v[10:11], off
0xf8: s_endpgm
0xfc: s_code_end
