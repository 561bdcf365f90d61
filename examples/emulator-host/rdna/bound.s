// The RDNA2 (gfx1030) code the bound pass stands for (run 305's two shapes): buffer accesses
// through the four slots' descriptors, which the emulator binds as ds_engine_prepare says (D953).
.text
.globl program
program:
  s_load_dwordx16 s[4:19], s[0:1], 0x0          // the four slots' descriptors
  s_load_dword s20, s[0:1], 0x40                // push: the frame
  v_lshlrev_b32 v1, 2, v0
  v_cmp_gt_u32 vcc_lo, 8, v0
  s_waitcnt lgkmcnt(0)
  s_and_saveexec_b32 s21, vcc_lo
  s_cbranch_execz whole
  buffer_load_dword v2, v1, s[8:11], 0 offen    // slot 1 (0x20 bytes at 0xe400 of slot 0)
  buffer_load_dword v3, v1, s[4:7], 0 offen     // slot 0
  s_waitcnt vmcnt(0)
  v_xor_b32 v2, v2, v3
  v_add3_u32 v2, v2, 0x305, s20
  buffer_store_dword v2, v1, s[8:11], 0 offen   // slot 1
whole:
  s_or_b32 exec_lo, exec_lo, s21
  buffer_load_dword v4, v1, s[4:7], 0 offen offset:256
  s_waitcnt vmcnt(0)
  v_lshl_add_u32 v4, v4, 1, v0
  buffer_store_dword v4, v1, s[4:7], 0 offen offset:256   // slot 0, words 64 + l
  v_cmp_eq_u32 vcc_lo, 0, v0
  s_and_saveexec_b32 s21, vcc_lo
  s_cbranch_execz done
  s_buffer_load_dwordx8 s[24:31], s[12:15], 0x0 // slot 2 (0x94 bytes)
  s_waitcnt lgkmcnt(0)
  s_add_u32 s24, s24, s25
  s_add_u32 s24, s24, s20
  v_mov_b32 v5, s24
  v_mov_b32 v6, 0
  buffer_store_dword v5, v6, s[16:19], 0 offen  // slot 3 (4 bytes at 0x10 of slot 2)
done:
  s_endpgm
