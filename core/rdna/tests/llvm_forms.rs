//! Exhaustive checks against llvm-mc-14 of forms whose syntax depends on a whole field: every
//! one of the 65536 offsets of `ds_swizzle_b32` (`swizzle(QUAD_PERM,…)`, `SWAP`, `REVERSE`,
//! `BROADCAST`, `BITMASK_PERM` or a number), and every `op_sel` of the two permlanes (two fields,
//! not a VOP3's four). Fails on any difference, and when llvm-mc-14 is missing.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test")]

mod oracle;

use dispatchscope_rdna::decode_one;
use oracle::{Oracle, disassemble};

/// Decodes each case and compares it with llvm-mc-14's text; returns the differences.
fn differences(cases: &[Vec<u32>]) -> (usize, Vec<String>) {
    let mut agree = 0;
    let mut diffs = Vec::new();
    for (case, llvm) in cases.iter().zip(disassemble(cases)) {
        let bytes: Vec<u8> = case.iter().flat_map(|w| w.to_le_bytes()).collect();
        let ours = decode_one(&bytes, 0);
        match llvm {
            Oracle::Text(t) if t == ours.text && usize::from(ours.len) == bytes.len() => agree += 1,
            other => diffs.push(format!(
                "{case:08x?}: llvm {other:?}, ours `{}` ({:?})",
                ours.text, ours.kind
            )),
        }
    }
    (agree, diffs)
}

#[test]
fn every_swizzle_offset_prints_as_llvm_prints_it() {
    // ds_swizzle_b32 v5, v1 offset:X, and the same with gds.
    let cases: Vec<Vec<u32>> = (0..=0xffffu32)
        .map(|x| vec![0xd8d4_0000 | x | (x & 1) << 17, 0x0500_0001])
        .collect();
    let (agree, diffs) = differences(&cases);
    println!("ds_swizzle_b32: {agree} of {} offsets agree", cases.len());
    assert!(
        diffs.is_empty(),
        "{} differ:\n{}",
        diffs.len(),
        diffs[..diffs.len().min(20)].join("\n")
    );
}

#[test]
fn every_permlane_op_sel_prints_as_llvm_prints_it() {
    let mut cases = Vec::new();
    for opcode in [0x377u32, 0x378] {
        for opsel in 0..4u32 {
            // v_permlane*16_b32 v0, v1, s2, s3 with op_sel bits 11 and 12; then with a literal.
            cases.push(vec![0xd400_0000 | opcode << 16 | opsel << 11, 0x000c_0501]);
            cases.push(vec![
                0xd400_0000 | opcode << 16 | opsel << 11,
                0x000d_ff01,
                0x1234_5678,
            ]);
        }
    }
    let (agree, diffs) = differences(&cases);
    assert_eq!(agree, cases.len(), "{}", diffs.join("\n"));
}
