// The RDNA2 (gfx1030) code the device-addressed pass stands for: what the guest's compute program
// is, as its recompiler saw it. Each `site_N` label is the pc of the helper's site N.
.text
.globl program
program:
  s_load_dwordx8 s[4:11], s[0:1], 0x0          // push: root, out, read-only word, shared word
  s_load_dword s12, s[0:1], 0x20                // push: the frame
  v_and_b32 v1, 7, v0
  v_lshlrev_b32 v1, 4, v1
  s_waitcnt lgkmcnt(0)
  v_add_co_u32 v2, vcc_lo, s4, v1
  v_add_co_ci_u32_e64 v3, vcc_lo, s5, 0, vcc_lo
site_0:
  global_load_dwordx4 v[4:7], v[2:3], off       // the instance (a computed address)
  s_waitcnt vmcnt(0)
  v_cvt_f32_u32 v13, v6
  v_rcp_iflag_f32 v13, v13
  v_mul_f32 v13, 0x4f7ffffe, v13
  v_cvt_u32_f32 v13, v13
  v_mul_hi_u32 v14, v0, v13
  v_mul_lo_u32 v14, v14, v6
  v_sub_nc_u32 v14, v0, v14                     // g % count
  v_lshlrev_b32 v8, 2, v14
  v_add_co_u32 v2, vcc_lo, v4, v8
  v_add_co_ci_u32_e32 v3, vcc_lo, 0, v5, vcc_lo
site_1:
  global_load_dword v9, v[2:3], off             // the bottom level (a computed address)
  s_waitcnt vmcnt(0)
  v_add_nc_u32 v9, v9, v7                       // + bias
  v_mbcnt_lo_u32_b32 v15, -1, 0
  v_lshlrev_b32 v10, 2, v15
  v_mov_b32 v11, 0x80000000                     // the LDS aperture (P1)
site_2:
  flat_store_dword v[10:11], v9                 // LDS through the flat aperture
  s_waitcnt vmcnt(0) lgkmcnt(0)
  flat_load_dword v12, v[10:11]
  s_waitcnt vmcnt(0) lgkmcnt(0)
  v_mul_lo_u32 v12, v12, 3
  v_mov_b32 v16, 8
  v_mov_b32 v17, 0x70000000                     // the scratch aperture (P1)
site_3:
  flat_store_dword v[16:17], v12                // scratch through the flat aperture
  s_waitcnt vmcnt(0) lgkmcnt(0)
  flat_load_dword v18, v[16:17]
  s_waitcnt vmcnt(0) lgkmcnt(0)
  v_add_nc_u32 v18, s12, v18                    // + frame
  v_lshlrev_b32 v19, 2, v0
  v_add_co_u32 v20, vcc_lo, s6, v19
  v_add_co_ci_u32_e64 v21, vcc_lo, s7, 0, vcc_lo
site_4:
  global_store_dword v[20:21], v18, off         // out[g]: a store through a computed address (C1)
  v_cmp_gt_u32 vcc_lo, 4, v0
  s_and_saveexec_b32 s13, vcc_lo
  s_cbranch_execz done
  v_xor_b32 v22, 0xabcd0000, v18
  v_add_co_u32 v24, vcc_lo, s8, v19
  v_add_co_ci_u32_e64 v25, vcc_lo, s9, 0, vcc_lo
site_5:
  global_store_dword v[24:25], v22, off         // the region the guest makes read-only
  v_add_co_u32 v26, vcc_lo, s10, v19
  v_add_co_ci_u32_e64 v27, vcc_lo, s11, 0, vcc_lo
site_6:
  global_load_dword v28, v[26:27], off          // the shared memfd region (left out by M3)
  s_waitcnt vmcnt(0)
  v_add_nc_u32 v28, 1, v28
site_7:
  global_store_dword v[20:21], v28, off offset:512   // out[128 + g]
site_8:
  global_store_dword v[26:27], v18, off offset:256   // shared[0x40 + g]
done:
  s_or_b32 exec_lo, exec_lo, s13
  s_endpgm
