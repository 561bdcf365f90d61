//! The whole-length rule: an instruction this decoder does not decode, of an encoding it knows,
//! is one `.long` line of every dword its encoding's layout gives it (literal, DPP/SDWA dword and
//! MIMG address dwords included), so the line after it is the next instruction at its true pc.
//!
//! For every encoding an undecoded instruction is planted between `s_nop 0` and `s_endpgm`; its
//! second dword, where it has one, is `v_add_nc_u32_e32 v0, v1, v2` (a word that decodes on its
//! own), so a decoder that stepped one dword would print an instruction the program does not
//! have. llvm-mc-14 confirms that each planted opcode is not an instruction it knows.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test")]

mod oracle;

use dispatchscope_rdna::{Kind, Unknown, decode};
use oracle::{Oracle, disassemble};

/// `v_add_nc_u32_e32 v0, v1, v2`: decodes on its own, so stepping into it would show.
const INNER: u32 = 0x4a00_0501;
/// `s_nop 0` and `s_endpgm`, the known instructions either side.
const BEFORE: u32 = 0xbf80_0000;
const AFTER: u32 = 0xbf81_0000;

/// One planted instruction: its encoding and its dwords.
struct Plant {
    encoding: &'static str,
    words: Vec<u32>,
}

fn plants() -> Vec<Plant> {
    let p = |encoding, words: &[u32]| Plant {
        encoding,
        words: words.to_vec(),
    };
    vec![
        // SOP2 opcode 0xc, ssrc0 a literal.
        p("SOP2", &[0x8600_00ff, INNER]),
        // SOP2 opcode 0xc, ssrc1 a literal.
        p("SOP2", &[0x8600_ff00, INNER]),
        // SOPK opcode 0x11 (one dword).
        p("SOPK", &[0xb880_0000]),
        // SOP1 opcode 0x0, ssrc0 a literal.
        p("SOP1", &[0xbe80_00ff, INNER]),
        // SOPC opcode 0x10, ssrc1 a literal.
        p("SOPC", &[0xbf10_ff00, INNER]),
        // SOPP opcode 0x1c (one dword).
        p("SOPP", &[0xbf9c_0000]),
        // SMEM opcode 0x5.
        p("SMEM", &[0xf414_0000, INNER]),
        // VOP1 opcode 0x9: with a literal, and as DPP16, DPP8 and SDWA.
        p("VOP1", &[0x7e00_12ff, INNER]),
        p("VOP1", &[0x7e00_12fa, INNER]),
        p("VOP1", &[0x7e00_12e9, INNER]),
        p("VOP1", &[0x7e00_12f9, INNER]),
        // VOP2 opcode 0x0 with a literal, and as DPP16.
        p("VOP2", &[0x0000_00ff, INNER]),
        p("VOP2", &[0x0000_00fa, INNER]),
        // VOPC opcode 0x40 with a literal, and as SDWA.
        p("VOPC", &[0x7c80_00ff, INNER]),
        p("VOPC", &[0x7c80_00f9, INNER]),
        // VOP3 opcode 0x40: without a literal, and with src0, src1 or src2 a literal.
        p("VOP3", &[0xd440_0000, INNER]),
        p("VOP3", &[0xd440_0000, 0x0000_00ff, INNER]),
        p("VOP3", &[0xd440_0000, 0x0001_fe00, INNER]),
        p("VOP3", &[0xd440_0000, 0x03fc_0000, INNER]),
        // VOP3P opcode 0x1a, src0 a literal.
        p("VOP3P", &[0xcc1a_0000, 0x1800_00ff, INNER]),
        // DS opcode 0x16.
        p("DS", &[0xd858_0000, INNER]),
        // FLAT, SCRATCH, GLOBAL opcode 0x0.
        p("FLAT", &[0xdc00_0000, INNER]),
        p("SCRATCH", &[0xdc00_4000, INNER]),
        p("GLOBAL", &[0xdc00_8000, INNER]),
        // MUBUF opcode 0x10, and with soffset a literal.
        p("MUBUF", &[0xe040_0000, INNER]),
        p("MUBUF", &[0xe040_0000, 0xff00_0000, INNER]),
        // VINTRP opcode 3 (one dword).
        p("VINTRP", &[0xc817_1311]),
        // MIMG opcode 0x6, and with one and two NSA address dwords.
        p("MIMG", &[0xf018_0000, INNER]),
        p("MIMG", &[0xf018_0002, INNER, INNER]),
        p("MIMG", &[0xf018_0004, INNER, INNER, INNER]),
    ]
}

/// Decodes `s_nop 0`, the plant, `s_endpgm` as one stream and checks the three lines.
fn check(plant: &Plant) -> Result<(), String> {
    let mut words = vec![BEFORE];
    words.extend(&plant.words);
    words.push(AFTER);
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let lines: Vec<_> = decode(&bytes, 0x100).collect();
    let texts: Vec<&str> = lines.iter().map(|i| i.text.as_str()).collect();
    let want_long = format!(
        ".long {}",
        plant
            .words
            .iter()
            .map(|w| format!("0x{w:08x}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let end_pc = 0x104 + 4 * plant.words.len() as u64;
    let ok = lines.len() == 3
        && lines[0].text == "s_nop 0"
        && lines[1].pc == 0x104
        && usize::from(lines[1].len) == 4 * plant.words.len()
        && lines[1].text == want_long
        && matches!(
            &lines[1].kind,
            Kind::Unknown { reason } if !matches!(reason, Unknown::Truncated { .. })
        )
        && lines[2].pc == end_pc
        && lines[2].text == "s_endpgm";
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{} {:08x?}: lines {texts:?} at {:x?}, want [\"s_nop 0\", {want_long:?}, \"s_endpgm\"] at 0x100, 0x104, {end_pc:#x}",
            plant.encoding,
            plant.words,
            lines.iter().map(|i| i.pc).collect::<Vec<_>>()
        ))
    }
}

#[test]
fn an_undecoded_instruction_takes_its_whole_length_in_every_encoding() {
    let plants = plants();
    let failures: Vec<String> = plants.iter().filter_map(|p| check(p).err()).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Each plant's opcode is one LLVM does not know either.
    let cases: Vec<Vec<u32>> = plants.iter().map(|p| p.words.clone()).collect();
    for (plant, llvm) in plants.iter().zip(disassemble(&cases)) {
        assert_eq!(
            llvm,
            Oracle::Rejected,
            "{} {:08x?}: llvm-mc-14 knows this opcode",
            plant.encoding,
            plant.words
        );
    }
}

#[test]
fn every_encoding_is_planted() {
    let planted: std::collections::BTreeSet<&str> = plants().iter().map(|p| p.encoding).collect();
    for enc in [
        "SOP2", "SOPK", "SOP1", "SOPC", "SOPP", "SMEM", "VOP1", "VOP2", "VOPC", "VOP3", "VOP3P",
        "DS", "FLAT", "SCRATCH", "GLOBAL", "MUBUF", "VINTRP", "MIMG",
    ] {
        assert!(planted.contains(enc), "{enc} has no plant");
    }
}

#[test]
fn a_known_opcode_that_does_not_decode_takes_its_whole_length() {
    // MTBUF knows all sixteen opcodes: tbuffer_load_format_x whose resource field names no
    // four-register run (31, from m0 on), a known opcode this decoder does not decode.
    let plant = Plant {
        encoding: "MTBUF",
        words: vec![0xe808_0000, INNER | 0x001f_0000],
    };
    check(&plant).unwrap();
}

#[test]
fn a_cut_off_instruction_takes_every_dword_left() {
    // VOP3 v_fma_f32 with src0 a literal, the literal cut off: one line of both dwords.
    let bytes: Vec<u8> = [0xd54b_0000u32, 0x0000_00ff]
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect();
    let lines: Vec<_> = decode(&bytes, 0).collect();
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0].text, ".long 0xd54b0000, 0x000000ff");
    assert_eq!(lines[0].len, 8);
    assert!(matches!(
        lines[0].kind,
        Kind::Unknown {
            reason: Unknown::Truncated {
                need_bytes: 12,
                have_bytes: 8,
                ..
            }
        }
    ));
}
