//! Fuzz-style: any bytes at all (truncated words, cut-off literals, unknown opcodes) decode to
//! instructions that cover the input exactly, without a panic; an undecodable instruction is one
//! `.long` line of the dwords it covers.
#![allow(clippy::unwrap_used, reason = "test")]

use dispatchscope_rdna::{Kind, Unknown, decode, decode_one};
use proptest::prelude::*;

/// Words whose high bits name each encoding, so the fuzzing reaches every decoder.
fn encoding_word() -> impl Strategy<Value = u32> {
    let highs = prop::sample::select(vec![
        0x8000_0000u32,
        0xb000_0000,
        0xbe80_0000,
        0xbf00_0000,
        0xbf80_0000,
        0xf400_0000,
        0x7e00_0000,
        0x0000_0000,
        0x7c00_0000,
        0xd400_0000,
        0xcc00_0000,
        0xd800_0000,
        0xdc00_0000,
        0xe000_0000,
        0xe800_0000,
        0xf000_0000,
        0xc800_0000,
        0xf800_0000,
    ]);
    (highs, any::<u32>()).prop_map(|(h, r)| h | (r & !(h | (h >> 1) | (h >> 2))))
}

fn check(bytes: &[u8]) {
    let mut covered = 0usize;
    for inst in decode(bytes, 0x4000) {
        assert_eq!(inst.pc, 0x4000 + covered as u64);
        assert!(inst.len > 0);
        if let Kind::Unknown { reason } = &inst.kind {
            match reason {
                Unknown::PartialWord { bytes } => {
                    assert!(inst.text.starts_with(".byte") && *bytes < 4)
                }
                _ => {
                    // One `.long` of every dword the line covers, as the bytes hold them.
                    assert!(inst.len % 4 == 0 && inst.len <= 20, "{}", inst.text);
                    let start = covered;
                    let words: Vec<String> = bytes[start..start + usize::from(inst.len)]
                        .chunks(4)
                        .map(|c| {
                            let w = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                            format!("0x{w:08x}")
                        })
                        .collect();
                    assert_eq!(inst.text, format!(".long {}", words.join(", ")));
                }
            }
            assert!(!reason.to_string().is_empty());
        }
        covered += usize::from(inst.len);
    }
    assert_eq!(covered, bytes.len());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        check(&bytes);
    }

    #[test]
    fn encoding_words_never_panic(words in prop::collection::vec(encoding_word(), 1..8), cut in 0usize..4) {
        let mut bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let keep = bytes.len().saturating_sub(cut);
        bytes.truncate(keep);
        check(&bytes);
    }
}

#[test]
fn cut_off_literal_is_named() {
    // v_add_f32_e32 v0, <literal>, v1 with the literal missing.
    let inst = decode_one(&[0xff, 0x02, 0x00, 0x06], 0);
    assert_eq!(inst.text, ".long 0x060002ff");
    assert_eq!(
        inst.kind,
        Kind::Unknown {
            reason: Unknown::Truncated {
                encoding: "VOP2",
                need_bytes: 8,
                have_bytes: 4
            }
        }
    );
}

#[test]
fn truncated_second_dword_is_named() {
    // The first half of s_load_dwordx16.
    let inst = decode_one(&[0x01, 0x00, 0x10, 0xf4], 0);
    assert_eq!(
        inst.kind,
        Kind::Unknown {
            reason: Unknown::Truncated {
                encoding: "SMEM",
                need_bytes: 8,
                have_bytes: 4
            }
        }
    );
}

#[test]
fn partial_word_and_unknown_opcode_are_named() {
    let insts: Vec<_> = decode(&[0x00, 0x00, 0x80, 0xbf, 0x12, 0x34], 0).collect();
    assert_eq!(insts[0].text, "s_nop 0");
    assert_eq!(insts[1].text, ".byte 0x12, 0x34");
    assert_eq!(
        insts[1].kind,
        Kind::Unknown {
            reason: Unknown::PartialWord { bytes: 2 }
        }
    );
    assert_eq!(
        decode_one(&0xbf9f_0000u32.to_le_bytes(), 0).text,
        "s_code_end"
    );
    // SOPP opcode 0x7e is not an instruction.
    let inst = decode_one(&0xbffe_0000u32.to_le_bytes(), 0);
    assert_eq!(
        inst.kind,
        Kind::Unknown {
            reason: Unknown::Opcode {
                encoding: "SOPP",
                opcode: 0x7e
            }
        }
    );
}

#[test]
fn cut_off_extended_forms_are_named() {
    // v_mov_b32_dpp, v_mov_b32_sdwa and v_add_f32_dpp (dpp8) with their second dword missing.
    for w in [0x7e00_02fau32, 0x7e00_02f9, 0x0602_04e9] {
        let inst = decode_one(&w.to_le_bytes(), 0);
        assert_eq!(inst.text, format!(".long 0x{w:08x}"));
        assert!(
            matches!(
                inst.kind,
                Kind::Unknown {
                    reason: Unknown::Truncated {
                        need_bytes: 8,
                        have_bytes: 4,
                        ..
                    }
                }
            ),
            "{:?}",
            inst.kind
        );
    }
    // image_sample with one NSA dword (three addresses) whose address dword is missing.
    let bytes: Vec<u8> = [0xf080_0f1au32, 0x0003_0100]
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect();
    assert_eq!(
        decode_one(&bytes, 0).kind,
        Kind::Unknown {
            reason: Unknown::Truncated {
                encoding: "MIMG",
                need_bytes: 12,
                have_bytes: 8
            }
        }
    );
    // With the dword it decodes, as llvm-mc-14 prints it.
    let mut full = bytes.clone();
    full.extend_from_slice(&0x0403_0201u32.to_le_bytes());
    assert_eq!(
        decode_one(&full, 0).text,
        "image_sample v[1:4], [v0, v1, v2], s[12:19], s[0:3] dmask:0xf dim:SQ_RSRC_IMG_CUBE"
    );
}
