//! One instruction from bytes: which encoding the first dword names, its opcode's table entry,
//! the entry's must-be-zero and must-be-one bits, then the operands and the modifiers the
//! encoding prints.
//!
//! Each encoding's function writes the text into the caller's buffer and returns the length in
//! dwords and the memory access, or a named [`Unknown`]; [`decode_into`] turns an `Unknown` into
//! one `.long 0x…, …` line of every dword the encoding's layout gives the instruction (literal
//! included), so a listing never reads the middle of an instruction as one of its own. Nothing
//! here compares strings: the tables' tokens and flags are enums and bits.

use std::fmt::Write as _;

use crate::operand::{self, is_literal, range, scalar, source, vgpr};
use crate::operand::{dec, hex, hex_digits, int};
use crate::table::{Ext, ExtOp, Field, File, Flags, Imm, Op, Opnd, Tok};
use crate::{Direction, Instruction, Kind, Line, Memory, Space, Unknown};
use crate::{tables, tables_ext, tables_mimg};

/// The dwords of one instruction's window: up to five (MIMG with NSA is the longest).
struct Words {
    w: [u32; 5],
    /// How many dwords the bytes held (at most five).
    have: usize,
}

impl Words {
    fn new(bytes: &[u8]) -> Words {
        let mut w = [0u32; 5];
        let mut have = 0;
        for (i, chunk) in bytes.chunks_exact(4).take(5).enumerate() {
            w[i] = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
            have = i + 1;
        }
        Words { w, have }
    }

    /// The first two dwords as one 64-bit value (the second is zero when absent).
    fn lo64(&self) -> u64 {
        u64::from(self.w[0]) | u64::from(self.w[1]) << 32
    }

    /// Fails with `Truncated` unless `n` dwords are present.
    fn need(&self, encoding: &'static str, n: usize) -> Result<(), Unknown> {
        if self.have < n {
            return Err(Unknown::Truncated {
                encoding,
                need_bytes: 4 * n,
                have_bytes: 4 * self.have,
            });
        }
        Ok(())
    }
}

/// What an encoding function returns for a decoded instruction (its text is in the buffer).
struct Decoded {
    dwords: usize,
    memory: Option<Memory>,
}

/// Decodes the instruction at the start of `bytes`, at address `pc`. Never panics: an
/// undecodable instruction is one `.long` line of all its dwords (as its encoding lays them out)
/// with its reason, fewer than four bytes a `.byte` line.
pub fn decode_one(bytes: &[u8], pc: u64) -> Instruction {
    let mut text = String::new();
    let line = decode_into(bytes, pc, &mut text);
    Instruction {
        pc: line.pc,
        len: line.len,
        text,
        kind: line.kind,
        memory: line.memory,
    }
}

/// [`decode_one`] writing the text into `text` (cleared first), a buffer the caller reuses from
/// line to line; the rest comes back as a [`Line`].
pub fn decode_into(bytes: &[u8], pc: u64, text: &mut String) -> Line {
    text.clear();
    if bytes.len() < 4 {
        text.push_str(".byte ");
        for (i, &b) in bytes.iter().enumerate() {
            if i > 0 {
                text.push_str(", ");
            }
            text.push_str("0x");
            hex_digits(text, u32::from(b), 2);
        }
        return Line {
            pc,
            len: bytes.len() as u8,
            kind: Kind::Unknown {
                reason: Unknown::PartialWord { bytes: bytes.len() },
            },
            memory: None,
        };
    }
    let words = Words::new(bytes);
    match dispatch(text, &words) {
        Ok(d) => Line {
            pc,
            len: (4 * d.dwords) as u8,
            kind: Kind::Ok,
            memory: d.memory,
        },
        Err(reason) => {
            // The whole instruction as the encoding lays it out, so the next line starts where
            // the next instruction does; a cut-off instruction takes every dword that is left.
            let dwords = match reason {
                Unknown::Truncated { .. } => words.have,
                _ => layout_dwords(&words).min(words.have),
            }
            .max(1);
            text.clear();
            text.push_str(".long ");
            for (i, &w) in words.w[..dwords].iter().enumerate() {
                if i > 0 {
                    text.push_str(", ");
                }
                text.push_str("0x");
                hex_digits(text, w, 8);
            }
            Line {
                pc,
                len: (4 * dwords) as u8,
                kind: Kind::Unknown { reason },
                memory: None,
            }
        }
    }
}

/// How many dwords an instruction takes by its encoding's layout alone, whatever its opcode:
/// the encoding's length, the extended (DPP, SDWA) second dword, a literal when a source field
/// names one (or the opcode always carries one), MIMG's address dwords. An undecoded word of a
/// known encoding takes this many, so the lines after it stay true.
fn layout_dwords(words: &Words) -> usize {
    let w0 = words.w[0];
    let lit = |v: u32| usize::from(v == 255);
    if w0 >> 31 == 0 {
        let src0 = w0 & 0x1ff;
        // v_fmamk_* and v_fmaak_* (VOP2 0x2c, 0x2d, 0x37, 0x38) always carry their constant.
        let k_literal = matches!(w0 >> 25, 0x2c | 0x2d | 0x37 | 0x38);
        let (short, opcode) = match w0 >> 25 {
            0x3f => (Short::Vop1, (w0 >> 9) & 0xff),
            0x3e => (Short::Vopc, (w0 >> 17) & 0xff),
            op => (Short::Vop2, op & 0x3f),
        };
        // A DPP or SDWA src0 takes a second dword, but a known opcode without that form (other
        // than v_nop) is its 32-bit form, src0 and all, as LLVM reads it.
        let op = short.table().get(opcode as usize).and_then(Option::as_ref);
        let ext = short.ext().get(opcode as usize).and_then(Option::as_ref);
        let extended = match src0 {
            0xfa => ext.is_some_and(|e| e.dpp.is_some()),
            0xf9 => ext.is_some_and(|e| e.sdwa.is_some()),
            0xe9 | 0xea => ext.is_some_and(|e| e.dpp8.is_some()),
            _ => false,
        } || op.is_none_or(|op| op.flags.has(Flags::NOP) && src0 != 0xf9);
        return match (src0, op) {
            (0xf9 | 0xfa | 0xe9 | 0xea, _) if extended => 2,
            _ if k_literal => 2,
            (_, Some(op)) => 1 + usize::from(wants_literal(op, Enc::Vop, words)),
            (_, None) => 1 + lit(src0),
        };
    }
    if w0 >> 30 == 0b10 {
        let (ssrc0, ssrc1) = (w0 & 0xff, (w0 >> 8) & 0xff);
        // A known opcode reads a literal where one of its sources names it; an unknown one
        // wherever a source field does.
        let by_table = |table: &'static [Option<Op>], opcode: u32, fields: usize| {
            1 + match table.get(opcode as usize).and_then(Option::as_ref) {
                Some(op) => usize::from(wants_literal(op, Enc::Sop, words)),
                None => usize::from(ssrc0 == 255 || (fields == 2 && ssrc1 == 255)),
            }
        };
        return match w0 >> 23 {
            0x17d => by_table(&tables::SOP1, (w0 >> 8) & 0xff, 1),
            0x17e => by_table(&tables::SOPC, (w0 >> 16) & 0x7f, 2),
            0x17f => 1,
            // s_setreg_imm32_b32 carries its value in a second dword.
            _ if w0 >> 28 == 0b1011 => 1 + usize::from((w0 >> 23) & 0x1f == 0x15),
            _ => by_table(&tables::SOP2, (w0 >> 23) & 0x7f, 2),
        };
    }
    let w1 = words.w[1];
    match w0 >> 26 {
        0x35 | 0x33 if w0 >> 26 == 0x35 || w0 >> 24 == 0xcc => {
            let op = if w0 >> 26 == 0x35 {
                tables::VOP3.get(((w0 >> 16) & 0x3ff) as usize)
            } else {
                tables::VOP3P.get(((w0 >> 16) & 0x7f) as usize)
            }
            .and_then(Option::as_ref);
            let src = |shift: u32| (w1 >> shift) & 0x1ff == 255;
            2 + match op {
                Some(op) => usize::from(wants_literal(op, Enc::Vop3, words)),
                None => usize::from(src(0) || src(9) || src(18)),
            }
        }
        0x36 | 0x37 | 0x3d | 0x3e => 2,
        0x38 | 0x3a => 2 + lit(w1 >> 24),
        0x3c => 2 + ((w0 >> 1) & 3) as usize,
        _ => 1,
    }
}

/// Picks the encoding from the high bits of the first dword.
fn dispatch(out: &mut String, words: &Words) -> Result<Decoded, Unknown> {
    let w0 = words.w[0];
    if w0 >> 31 == 0 {
        return match w0 >> 25 {
            0x3f => vop_short(out, words, Short::Vop1, (w0 >> 9) & 0xff),
            0x3e => vop_short(out, words, Short::Vopc, (w0 >> 17) & 0xff),
            op => vop_short(out, words, Short::Vop2, op & 0x3f),
        };
    }
    if w0 >> 30 == 0b10 {
        return match w0 >> 23 {
            0x17d => scalar_op(out, words, "SOP1", &tables::SOP1, (w0 >> 8) & 0xff),
            0x17e => scalar_op(out, words, "SOPC", &tables::SOPC, (w0 >> 16) & 0x7f),
            0x17f => sopp(out, words, (w0 >> 16) & 0x7f),
            _ if w0 >> 28 == 0b1011 => sopk(out, words, (w0 >> 23) & 0x1f),
            _ => scalar_op(out, words, "SOP2", &tables::SOP2, (w0 >> 23) & 0x7f),
        };
    }
    match w0 >> 26 {
        0x35 => vop3(out, words, (w0 >> 16) & 0x3ff),
        0x33 if w0 >> 24 == 0xcc => vop3p(out, words, (w0 >> 16) & 0x7f),
        0x36 => ds(out, words, (w0 >> 18) & 0xff),
        0x37 => flat(out, words, (w0 >> 18) & 0x7f, (w0 >> 14) & 3),
        0x38 => buffer(
            out,
            words,
            false,
            ((w0 >> 18) & 0x7f) | ((w0 >> 25) & 1) << 7,
        ),
        0x3a => buffer(
            out,
            words,
            true,
            ((w0 >> 16) & 7) | (words.w[1] >> 21 & 1) << 3,
        ),
        0x3c => mimg(out, words, ((w0 >> 18) & 0x7f) | (w0 & 1) << 7),
        0x3d => smem(out, words, (w0 >> 18) & 0xff),
        0x32 => vintrp(out, words),
        0x3e => exp(out, words),
        _ => Err(Unknown::Encoding {
            word: w0,
            what: "reserved",
        }),
    }
}

/// The table entry for `opcode`: the named `Opcode` error where LLVM knows no such opcode,
/// `Unsupported` where the table says the decoder does not decode it.
fn entry(
    encoding: &'static str,
    table: &'static [Option<Op>],
    opcode: u32,
) -> Result<&'static Op, Unknown> {
    let op = table
        .get(opcode as usize)
        .and_then(Option::as_ref)
        .ok_or(Unknown::Opcode { encoding, opcode })?;
    match op.undecoded {
        None => Ok(op),
        Some(what) => Err(Unknown::Unsupported {
            name: op.name,
            what,
        }),
    }
}

/// Fails with `ReservedBits` when any of `zero` (the opcode's must-be-zero bits, or fewer) is
/// set in `bits`, or any of the opcode's must-be-one bits is clear.
fn check_zero(op: &Op, bits: u64, zero: u64) -> Result<(), Unknown> {
    let set = bits & zero | !bits & op.one;
    if set != 0 {
        return Err(Unknown::ReservedBits {
            name: op.name,
            bits: set,
        });
    }
    Ok(())
}

/// The value of an operand field in this encoding's layout.
fn field(f: Field, enc: Enc, w: &Words) -> u32 {
    let lo = w.lo64();
    let bits = |shift: u32, n: u32| ((lo >> shift) & ((1u64 << n) - 1)) as u32;
    match (enc, f) {
        (Enc::Sop, Field::Sdst) => bits(16, 7),
        (Enc::Sop, Field::Ssrc0) => bits(0, 8),
        (Enc::Sop, Field::Ssrc1) => bits(8, 8),
        (Enc::Vop, Field::Vdst) => bits(17, 8),
        (Enc::Vop, Field::Src0) => bits(0, 9),
        (Enc::Vop, Field::Vsrc1) => bits(9, 8),
        (Enc::Vop3, Field::Vdst) => bits(0, 8),
        (Enc::Vop3, Field::Sdst) => bits(8, 7),
        (Enc::Vop3, Field::Src0) => bits(32, 9),
        (Enc::Vop3, Field::Src1) => bits(41, 9),
        (Enc::Vop3, Field::Src2) => bits(50, 9),
        (Enc::Smem, Field::Sdata) => bits(6, 7),
        (Enc::Smem, Field::Sbase) => bits(0, 6) * 2,
        (Enc::Smem, Field::Soffset) => bits(57, 7),
        (Enc::Mem, Field::Vdst) => bits(56, 8),
        (Enc::Mem, Field::Addr | Field::Vaddr) => bits(32, 8),
        (Enc::Mem, Field::Data0 | Field::Vdata) => bits(40, 8),
        (Enc::Mem, Field::Data1) => bits(48, 8),
        (Enc::Mem, Field::Saddr) => bits(48, 7),
        (Enc::Mem, Field::Srsrc) => bits(48, 5) * 4,
        (Enc::Mem, Field::Soffset8) => bits(56, 8),
        _ => 0,
    }
}

/// The field layouts (several encodings share one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Enc {
    Sop,
    Vop,
    Vop3,
    Smem,
    Mem,
}

/// Writes one register-or-constant operand; `Err` names it.
#[allow(clippy::too_many_arguments, reason = "one operand's whole description")]
fn operand(
    out: &mut String,
    op: &Op,
    index: usize,
    f: Field,
    file: File,
    value: u32,
    width: u8,
    imm: Imm,
    lit: Option<u32>,
) -> Result<(), Unknown> {
    let bad = || Unknown::Operand {
        name: op.name,
        operand: index,
        value,
    };
    let is_source = matches!(
        f,
        Field::Src0 | Field::Src1 | Field::Src2 | Field::Ssrc0 | Field::Ssrc1
    );
    match file {
        _ if imm == Imm::Vgpr8 => vgpr(out, value & 0xff, width).map_err(|()| bad()),
        _ if is_source => source(out, value, width, imm, lit).map_err(|()| bad()),
        File::V => vgpr(out, value, width).map_err(|()| bad()),
        // An 8-bit scalar destination names the specials above 127 too, never a constant.
        File::S if value < 128 => scalar(out, value, width).map_err(|()| bad()),
        File::S => source(out, value, width, Imm::RegOnly, None).map_err(|()| bad()),
    }
}

/// Whether the operand list reads the literal dword (a source field holding 255).
fn wants_literal(op: &Op, enc: Enc, w: &Words) -> bool {
    op.opnds.iter().any(|o| match *o {
        Opnd::R(
            f @ (Field::Src0 | Field::Src1 | Field::Src2 | Field::Ssrc0 | Field::Ssrc1),
            _,
            _,
            imm,
        ) => imm != Imm::RegOnly && imm != Imm::Vgpr8 && is_literal(field(f, enc, w)),
        _ => false,
    })
}

/// The literal after `base` dwords, or `Truncated` when it is cut off.
fn literal_after(w: &Words, encoding: &'static str, base: usize) -> Result<u32, Unknown> {
    w.need(encoding, base + 1)?;
    Ok(w.w[base])
}

/// SOP1, SOPC, SOP2: the table's operands, one optional literal.
fn scalar_op(
    out: &mut String,
    w: &Words,
    encoding: &'static str,
    table: &'static [Option<Op>],
    opcode: u32,
) -> Result<Decoded, Unknown> {
    let op = entry(encoding, table, opcode)?;
    check_zero(op, u64::from(w.w[0]), op.zero)?;
    let lit = if wants_literal(op, Enc::Sop, w) {
        Some(literal_after(w, encoding, 1)?)
    } else {
        None
    };
    out.push_str(op.name);
    operands(out, op, Enc::Sop, w, lit, &|_, _| None)?;
    Ok(Decoded {
        dwords: 1 + usize::from(lit.is_some()),
        memory: None,
    })
}

/// Writes `op`'s operand list (with a leading space), asking `wrap` for modifier text around
/// each operand (VOP3's `-` and `|…|`).
fn operands(
    out: &mut String,
    op: &Op,
    enc: Enc,
    w: &Words,
    lit: Option<u32>,
    wrap: &dyn Fn(Field, bool) -> Option<(&'static str, &'static str)>,
) -> Result<(), Unknown> {
    for (i, o) in op.opnds.iter().enumerate() {
        out.push_str(if i == 0 { " " } else { ", " });
        match *o {
            Opnd::T(t) => out.push_str(t.text()),
            Opnd::R(f, file, width, imm) => {
                let value = field(f, enc, w);
                let is_imm = matches!(value, 128..=208 | 240..=248 | 255);
                match wrap(f, is_imm) {
                    Some((pre, post)) => {
                        out.push_str(pre);
                        operand(out, op, i, f, file, value, width, imm, lit)?;
                        out.push_str(post);
                    }
                    None => operand(out, op, i, f, file, value, width, imm, lit)?,
                }
            }
        }
    }
    Ok(())
}

/// The immediate of SOPP and SOPK in the style the table names.
fn simm_style(out: &mut String, style: Tok, simm: u32) {
    match style {
        Tok::Hex => hex(out, simm),
        Tok::Inl if simm > 64 => hex(out, simm),
        _ => dec(out, simm),
    }
}

/// SOPP: immediates by style, `s_waitcnt` by counter, `s_sendmsg` by message.
fn sopp(out: &mut String, w: &Words, opcode: u32) -> Result<Decoded, Unknown> {
    // s_code_end is the oracle's separator word, so the generated table cannot hold it.
    if opcode == 0x1f {
        if w.w[0] & 0xffff != 0 {
            return Err(Unknown::ReservedBits {
                name: "s_code_end",
                bits: u64::from(w.w[0] & 0xffff),
            });
        }
        out.push_str("s_code_end");
        return Ok(Decoded {
            dwords: 1,
            memory: None,
        });
    }
    let op = entry("SOPP", &tables::SOPP, opcode)?;
    check_zero(op, u64::from(w.w[0]), op.zero)?;
    let simm = w.w[0] & 0xffff;
    out.push_str(op.name);
    match op.opnds.first() {
        None => {}
        Some(Opnd::T(Tok::Opt)) if simm == 0 => {}
        Some(Opnd::T(Tok::Opt)) => {
            out.push(' ');
            dec(out, simm);
        }
        Some(Opnd::T(Tok::Special)) if op.flags.has(Flags::WAITCNT) => waitcnt(out, simm),
        Some(Opnd::T(Tok::Special)) if op.flags.has(Flags::SENDMSG) => sendmsg(out, simm),
        Some(Opnd::T(style @ (Tok::Udec | Tok::Hex | Tok::Inl))) => {
            out.push(' ');
            simm_style(out, *style, simm);
        }
        Some(_) => {
            return Err(Unknown::Unsupported {
                name: op.name,
                what: "this operand form",
            });
        }
    }
    Ok(Decoded {
        dwords: 1,
        memory: None,
    })
}

/// `s_waitcnt`'s counters as LLVM prints them: each that is not at its maximum, or all three
/// when all are.
fn waitcnt(out: &mut String, simm: u32) {
    let vm = (simm & 0xf) | ((simm >> 14) & 3) << 4;
    let exp = (simm >> 4) & 7;
    let lgkm = (simm >> 8) & 0x3f;
    let all = vm == 63 && exp == 7 && lgkm == 63;
    if vm != 63 || all {
        out.push_str(" vmcnt(");
        dec(out, vm);
        out.push(')');
    }
    if exp != 7 || all {
        out.push_str(" expcnt(");
        dec(out, exp);
        out.push(')');
    }
    if lgkm != 63 || all {
        out.push_str(" lgkmcnt(");
        dec(out, lgkm);
        out.push(')');
    }
}

/// `s_sendmsg`'s operand as LLVM 14 prints it for gfx10.3 (checked against llvm-mc-14 for all
/// 65536 values): the message, operation and stream by name where they are valid together,
/// else the three numbers where the value holds nothing else, else the value in decimal.
fn sendmsg(out: &mut String, simm: u32) {
    const GS_OPS: [&str; 4] = ["GS_OP_NOP", "GS_OP_CUT", "GS_OP_EMIT", "GS_OP_EMIT_CUT"];
    const SYS_OPS: [&str; 5] = [
        "",
        "SYSMSG_OP_ECC_ERR_INTERRUPT",
        "SYSMSG_OP_REG_RD",
        "SYSMSG_OP_HOST_TRAP_ACK",
        "SYSMSG_OP_TTRACE_PC",
    ];
    let (msg, op, stream) = (simm & 0xf, (simm >> 4) & 7, (simm >> 8) & 3);
    let name = match msg {
        1 => Some("MSG_INTERRUPT"),
        2 => Some("MSG_GS"),
        3 => Some("MSG_GS_DONE"),
        4 => Some("MSG_SAVEWAVE"),
        5 => Some("MSG_STALL_WAVE_GEN"),
        6 => Some("MSG_HALT_WAVES"),
        7 => Some("MSG_ORDERED_PS_DONE"),
        9 => Some("MSG_GS_ALLOC_REQ"),
        10 => Some("MSG_GET_DOORBELL"),
        11 => Some("MSG_GET_DDID"),
        15 => Some("MSG_SYSMSG"),
        _ => None,
    };
    let named = match (name, msg) {
        (Some(n), 2 | 3) if (1..=3).contains(&op) => {
            Some(format!("{n}, {}, {stream}", GS_OPS[op as usize]))
        }
        (Some(n), 3) if op == 0 && stream == 0 => Some(format!("{n}, GS_OP_NOP")),
        (Some(n), 15) if (1..=4).contains(&op) && stream == 0 => {
            Some(format!("{n}, {}", SYS_OPS[op as usize]))
        }
        (Some(n), m) if m != 2 && m != 3 && m != 15 && op == 0 && stream == 0 => Some(n.to_owned()),
        _ => None,
    };
    match named {
        Some(args) => {
            let _ = write!(out, " sendmsg({args})");
        }
        None if simm & !0x37f == 0 => {
            let _ = write!(out, " sendmsg({msg}, {op}, {stream})");
        }
        None => {
            let _ = write!(out, " {simm}");
        }
    }
}

/// The names LLVM 14 gives hardware registers on gfx10.3 (others print by number).
fn hwreg_name(id: u32) -> Option<&'static str> {
    Some(match id {
        1 => "HW_REG_MODE",
        2 => "HW_REG_STATUS",
        3 => "HW_REG_TRAPSTS",
        5 => "HW_REG_GPR_ALLOC",
        6 => "HW_REG_LDS_ALLOC",
        7 => "HW_REG_IB_STS",
        15 => "HW_REG_SH_MEM_BASES",
        16 => "HW_REG_TBA_LO",
        17 => "HW_REG_TBA_HI",
        18 => "HW_REG_TMA_LO",
        19 => "HW_REG_TMA_HI",
        20 => "HW_REG_FLAT_SCR_LO",
        21 => "HW_REG_FLAT_SCR_HI",
        23 => "HW_REG_HW_ID1",
        24 => "HW_REG_HW_ID2",
        25 => "HW_REG_POPS_PACKER",
        29 => "HW_REG_SHADER_CYCLES",
        _ => return None,
    })
}

/// `hwreg(…)` of a 16-bit hwreg operand.
fn hwreg(out: &mut String, simm: u32) {
    let id = simm & 0x3f;
    let offset = (simm >> 6) & 0x1f;
    let size = ((simm >> 11) & 0x1f) + 1;
    out.push_str("hwreg(");
    match hwreg_name(id) {
        Some(n) => out.push_str(n),
        None => {
            dec(out, id);
        }
    }
    if offset != 0 || size != 32 {
        out.push_str(", ");
        dec(out, offset);
        out.push_str(", ");
        dec(out, size);
    }
    out.push(')');
}

/// SOPK: a scalar register and a 16-bit immediate (or `hwreg`), `s_setreg_imm32_b32` a literal.
fn sopk(out: &mut String, w: &Words, opcode: u32) -> Result<Decoded, Unknown> {
    let op = entry("SOPK", &tables::SOPK, opcode)?;
    check_zero(op, u64::from(w.w[0]), op.zero)?;
    let simm = w.w[0] & 0xffff;
    let sdst = (w.w[0] >> 16) & 0x7f;
    out.push_str(op.name);
    let mut dwords = 1;
    let bad = |i| Unknown::Operand {
        name: op.name,
        operand: i,
        value: sdst,
    };
    if op.flags.has(Flags::GETREG) {
        out.push(' ');
        scalar(out, sdst, 1).map_err(|()| bad(0))?;
        out.push_str(", ");
        hwreg(out, simm);
    } else if op.flags.has(Flags::SETREG) {
        out.push(' ');
        hwreg(out, simm);
        out.push_str(", ");
        scalar(out, sdst, 1).map_err(|()| bad(1))?;
    } else if op.flags.has(Flags::SETREG_IMM) {
        let lit = literal_after(w, "SOPK", 1)?;
        out.push(' ');
        hwreg(out, simm);
        out.push_str(", ");
        operand::imm32(out, lit);
        dwords = 2;
    } else {
        for (i, o) in op.opnds.iter().enumerate() {
            out.push_str(if i == 0 { " " } else { ", " });
            match *o {
                Opnd::R(_, _, width, _) => scalar(out, sdst, width).map_err(|()| bad(i))?,
                Opnd::T(style) => simm_style(out, style, simm),
            }
        }
    }
    Ok(Decoded {
        dwords,
        memory: None,
    })
}

/// The three 32-bit vector encodings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Short {
    Vop1,
    Vop2,
    Vopc,
}

impl Short {
    fn name(self) -> &'static str {
        match self {
            Short::Vop1 => "VOP1",
            Short::Vop2 => "VOP2",
            Short::Vopc => "VOPC",
        }
    }

    fn table(self) -> &'static [Option<Op>] {
        match self {
            Short::Vop1 => &tables::VOP1,
            Short::Vop2 => &tables::VOP2,
            Short::Vopc => &tables::VOPC,
        }
    }

    fn ext(self) -> &'static [Option<ExtOp>] {
        match self {
            Short::Vop1 => &tables_ext::VOP1_EXT,
            Short::Vop2 => &tables_ext::VOP2_EXT,
            Short::Vopc => &tables_ext::VOPC_EXT,
        }
    }
}

/// VOP1, VOP2, VOPC: the 32-bit forms, with `v_fmamk`/`v_fmaak`'s literal, and their DPP16,
/// DPP8 and SDWA forms.
fn vop_short(out: &mut String, w: &Words, short: Short, opcode: u32) -> Result<Decoded, Unknown> {
    let encoding = short.name();
    let op = entry(encoding, short.table(), opcode)?;
    check_zero(op, u64::from(w.w[0]), op.zero)?;
    let src0 = w.w[0] & 0x1ff;
    if matches!(src0, 249 | 250 | 233 | 234) {
        let ext = short.ext().get(opcode as usize).and_then(Option::as_ref);
        let (form, what) = match src0 {
            250 => (ext.and_then(|e| e.dpp), Form::Dpp16),
            249 => (ext.and_then(|e| e.sdwa), Form::Sdwa),
            _ => (ext.and_then(|e| e.dpp8), Form::Dpp8),
        };
        // Without that form LLVM reads the word as the 32-bit form, src0 and all (`v_nop` with
        // SDWA, `v_swap_b32`'s register src0; an invalid source otherwise).
        if let Some(form) = form {
            return extended(out, w, short, op, &form, what);
        }
        // v_nop has no DPP form in the tables (it has no operands to probe), but LLVM prints
        // its DPP controls where the second dword's source and modifier bits are zero.
        if op.flags.has(Flags::NOP) && what != Form::Sdwa {
            let nop = Ext {
                name: op.name,
                zero: if what == Form::Dpp16 {
                    0x00f0_00ff
                } else {
                    0xff
                },
                ignore: 0,
                sext: 0,
                pad3: false,
            };
            // Where LLVM rejects the DPP dword (or there is none) it prints the 32-bit `v_nop`
            // alone, as here; an invalid control it prints as invalid, which is not decoded.
            let start = out.len();
            match extended(out, w, short, op, &nop, what) {
                Ok(d) => return Ok(d),
                Err(Unknown::ReservedBits { .. } | Unknown::Truncated { .. }) => {
                    out.truncate(start)
                }
                Err(e) => return Err(e),
            }
        }
    }
    // v_fmamk_*/v_fmaak_* carry a constant the table shows as the sentinel literal.
    let k_literal = op.opnds.iter().any(|o| matches!(o, Opnd::T(Tok::K)));
    let lit = if k_literal || wants_literal(op, Enc::Vop, w) {
        Some(literal_after(w, encoding, 1)?)
    } else {
        None
    };
    out.push_str(op.name);
    for (i, o) in op.opnds.iter().enumerate() {
        out.push_str(if i == 0 { " " } else { ", " });
        match *o {
            Opnd::T(Tok::K) => {
                hex(out, lit.unwrap_or(0));
            }
            Opnd::T(t) => out.push_str(t.text()),
            Opnd::R(f, file, width, imm) => {
                operand(out, op, i, f, file, field(f, Enc::Vop, w), width, imm, lit)?
            }
        }
    }
    Ok(Decoded {
        dwords: 1 + usize::from(lit.is_some()),
        memory: None,
    })
}

/// Which extended form of VOP1/VOP2/VOPC a word is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    Dpp16,
    Dpp8,
    Sdwa,
}

/// The names LLVM prints for SDWA's selects.
const SDWA_SELS: [&str; 7] = [
    "BYTE_0", "BYTE_1", "BYTE_2", "BYTE_3", "WORD_0", "WORD_1", "DWORD",
];

/// The DPP16, DPP8 and SDWA forms: the 32-bit form's operands with src0 (and SDWA's src1) from
/// the second dword, their modifiers, then the form's controls as LLVM prints them.
fn extended(
    out: &mut String,
    w: &Words,
    short: Short,
    op: &Op,
    ext: &Ext,
    form: Form,
) -> Result<Decoded, Unknown> {
    w.need(if form == Form::Sdwa { "SDWA" } else { "DPP" }, 2)?;
    let (w0, w1) = (w.w[0], w.w[1]);
    // SDWA's select fields: the generator saw their low bits rejected only as `DWORD | 1`
    // (VOP1 has no src1 select: it was probed as zero, and must be).
    let zero = match (form, short) {
        (Form::Sdwa, Short::Vop1) => ext.zero & !0x0001_0100,
        (Form::Sdwa, _) => ext.zero & !0x0101_0100,
        _ => ext.zero,
    };
    if w1 & zero != 0 {
        return Err(Unknown::ReservedBits {
            name: ext.name,
            bits: u64::from(w1 & zero) << 32,
        });
    }
    let live = !ext.ignore;
    let bit = |n: u32| w1 >> n & 1 & (live >> n) == 1;
    let bad = |i: usize, value: u32| Unknown::Operand {
        name: ext.name,
        operand: i,
        value,
    };
    let vopc = short == Short::Vopc;
    out.push_str(ext.name);
    let mut sdst_done = false;
    for (i, o) in op.opnds.iter().enumerate() {
        out.push_str(if i == 0 { " " } else { ", " });
        match *o {
            // VOPC's SDWA form names its scalar destination when `sd` is set.
            Opnd::T(Tok::VccLo) if vopc && form == Form::Sdwa && !sdst_done => {
                sdst_done = true;
                if bit(15) {
                    let v = w1 >> 8 & 0x7f;
                    scalar(out, v, 1).map_err(|()| bad(i, v))?;
                } else {
                    out.push_str("vcc_lo");
                }
            }
            Opnd::T(t) => out.push_str(t.text()),
            Opnd::R(f @ (Field::Src0 | Field::Vsrc1), _, width, imm) => {
                let first = f == Field::Src0;
                // The bit positions of this source's neg, abs and sext, and where it is read.
                let (n, a, x, scalar_src, v) = match (form, first) {
                    (Form::Sdwa, true) => (20, 21, 19, bit(23), w1 & 0xff),
                    (Form::Sdwa, false) => (28, 29, 27, bit(31), w0 >> 9 & 0xff),
                    (Form::Dpp16, true) => (20, 21, 20, false, w1 & 0xff),
                    (Form::Dpp16, false) => (22, 23, 22, false, w0 >> 9 & 0xff),
                    (Form::Dpp8, true) => (32, 32, 32, false, w1 & 0xff),
                    (Form::Dpp8, false) => (32, 32, 32, false, w0 >> 9 & 0xff),
                };
                let on = |b: u32| b < 32 && bit(b);
                let is_sext = |b: u32| b < 32 && ext.sext >> b & 1 == 1;
                let sext = (on(x) && is_sext(x)) || (on(n) && is_sext(n));
                let neg = on(n) && !is_sext(n);
                let abs = on(a) && !is_sext(a);
                // An integer second source of a 16-bit operation reads constants as 16-bit
                // integers; otherwise it reads them as the first source does.
                let src0_imm = op.opnds.iter().find_map(|o| match *o {
                    Opnd::R(Field::Src0, _, _, imm) => Some(imm),
                    _ => None,
                });
                let imm = match (first, src0_imm) {
                    (true, _) | (false, None) => imm,
                    (false, Some(Imm::F16 | Imm::I16)) if is_sext(x) => Imm::I16,
                    (false, Some(k)) => k,
                };
                let is_imm = scalar_src && matches!(v, 128..=208 | 240..=248);
                let (pre, post) = match (neg, abs, sext) {
                    (_, _, true) => ("sext(", ")"),
                    (true, true, _) => ("-|", "|"),
                    (true, false, _) if is_imm => ("neg(", ")"),
                    (true, false, _) => ("-", ""),
                    (false, true, _) => ("|", "|"),
                    _ => ("", ""),
                };
                out.push_str(pre);
                if scalar_src {
                    // SDWA's scalar source takes constants even where the 32-bit form reads a
                    // register only (`v_movrels*`): LLVM prints them as 32-bit values.
                    let imm = if imm == Imm::RegOnly { Imm::B32 } else { imm };
                    source(out, v, width, imm, None).map_err(|()| bad(i, v))?;
                } else {
                    vgpr(out, v, width).map_err(|()| bad(i, v))?;
                }
                out.push_str(post);
            }
            Opnd::R(f, file, width, imm) => {
                operand(out, op, i, f, file, field(f, Enc::Vop, w), width, imm, None)?
            }
        }
    }
    match form {
        Form::Dpp16 => {
            let ctrl = w1 >> 8 & 0x1ff;
            // LLVM 14 takes only `row_newbcast`'s values (0x150–0x15f, gfx10's `row_share`)
            // with a 64-bit src0 and marks any other control invalid.
            let wide = op
                .opnds
                .iter()
                .any(|o| matches!(o, Opnd::R(Field::Src0, _, width, _) if *width >= 2));
            if wide && !(0x150..=0x15f).contains(&ctrl) {
                return Err(bad(op.opnds.len(), ctrl));
            }
            match ctrl {
                0..=0xff => {
                    out.push_str(" quad_perm:[");
                    for k in 0..4 {
                        if k > 0 {
                            out.push(',');
                        }
                        dec(out, ctrl >> (2 * k) & 3);
                    }
                    out.push(']');
                }
                0x101..=0x10f => {
                    out.push_str(" row_shl:");
                    dec(out, ctrl & 0xf);
                }
                0x111..=0x11f => {
                    out.push_str(" row_shr:");
                    dec(out, ctrl & 0xf);
                }
                0x121..=0x12f => {
                    out.push_str(" row_ror:");
                    dec(out, ctrl & 0xf);
                }
                0x140 => out.push_str(" row_mirror"),
                0x141 => out.push_str(" row_half_mirror"),
                0x150..=0x15f => {
                    out.push_str(" row_share:");
                    dec(out, ctrl & 0xf);
                }
                0x160..=0x16f => {
                    out.push_str(" row_xmask:");
                    dec(out, ctrl & 0xf);
                }
                // LLVM prints these as an invalid control (or one only gfx8/9 had).
                _ => return Err(bad(op.opnds.len(), ctrl)),
            }
            out.push_str(" row_mask:");
            hex(out, w1 >> 28);
            out.push_str(" bank_mask:");
            hex(out, w1 >> 24 & 0xf);
            if bit(19) {
                out.push_str(" bound_ctrl:1");
            }
            if bit(18) {
                out.push_str(" fi:1");
            }
        }
        Form::Dpp8 => {
            out.push_str(" dpp8:[");
            for k in 0..8 {
                if k > 0 {
                    out.push(',');
                }
                dec(out, w1 >> (8 + 3 * k) & 7);
            }
            out.push(']');
            if w0 & 0x1ff == 234 {
                out.push_str(" fi:1");
            }
        }
        Form::Sdwa => {
            let sel = |shift: u32| -> Result<&'static str, Unknown> {
                let v = w1 >> shift & 7;
                SDWA_SELS
                    .get(v as usize)
                    .copied()
                    .ok_or_else(|| bad(op.opnds.len(), v))
            };
            if !vopc {
                if bit(13) {
                    out.push_str(" clamp");
                }
                match w1 >> 14 & 3 & (live >> 14) {
                    1 => out.push_str(" mul:2"),
                    2 => out.push_str(" mul:4"),
                    3 => out.push_str(" div:2"),
                    _ => {}
                }
                out.push_str(" dst_sel:");
                out.push_str(sel(8)?);
                let unused = w1 >> 11 & 3;
                out.push_str(" dst_unused:");
                out.push_str(match unused {
                    0 => "UNUSED_PAD",
                    3 if ext.pad3 => "UNUSED_PAD",
                    1 => "UNUSED_SEXT",
                    2 => "UNUSED_PRESERVE",
                    _ => return Err(bad(op.opnds.len(), unused)),
                });
            }
            out.push_str(" src0_sel:");
            out.push_str(sel(16)?);
            if short != Short::Vop1 {
                out.push_str(" src1_sel:");
                out.push_str(sel(24)?);
            }
        }
    }
    Ok(Decoded {
        dwords: 2,
        memory: None,
    })
}

/// The source index (0–2) of a source field.
fn src_index(f: Field) -> Option<usize> {
    match f {
        Field::Src0 => Some(0),
        Field::Src1 => Some(1),
        Field::Src2 => Some(2),
        _ => None,
    }
}

/// VOP3 (a and b): source modifiers, `op_sel`, `clamp`, output modifier, one optional literal.
fn vop3(out: &mut String, w: &Words, opcode: u32) -> Result<Decoded, Unknown> {
    let op = entry("VOP3", &tables::VOP3, opcode)?;
    w.need("VOP3", 2)?;
    let bits = w.lo64();
    check_zero(op, bits, op.zero)?;
    let lit = if wants_literal(op, Enc::Vop3, w) {
        Some(literal_after(w, "VOP3", 2)?)
    } else {
        None
    };
    let live = !op.ignore;
    let is_b = op
        .opnds
        .iter()
        .any(|o| matches!(o, Opnd::R(Field::Sdst, ..)));
    let neg = (bits >> 61) & 7 & (live >> 61);
    let abs = if is_b {
        0
    } else {
        (bits >> 8) & 7 & (live >> 8)
    };
    let n_src = op
        .opnds
        .iter()
        .filter(|o| matches!(o, Opnd::R(Field::Src0 | Field::Src1 | Field::Src2, ..)))
        .count();
    out.push_str(op.name);
    let wrap = |f: Field, is_imm: bool| -> Option<(&'static str, &'static str)> {
        let i = src_index(f)?;
        let (n, a) = (neg >> i & 1 == 1, abs >> i & 1 == 1);
        // The integer sources of v_cvt_pk_u8_f32 and v_ldexp_* take `sext`, never `|…|` (LLVM
        // ignores that bit there).
        if (op.flags.has(Flags::SEXT_SRC12) && i > 0) || (op.flags.has(Flags::SEXT_SRC1) && i == 1)
        {
            return n.then_some(("sext(", ")"));
        }
        match (n, a) {
            (false, false) => None,
            (true, false) if is_imm => Some(("neg(", ")")),
            (true, false) => Some(("-", "")),
            (false, true) => Some(("|", "|")),
            (true, true) => Some(("-|", "|")),
        }
    };
    if op.flags.has(Flags::INTERP) {
        interp_operands(out, op, w, &wrap)?;
        // The f16 interpolations' `high` is src0's bit 8 (the f32 ones must have it zero).
        if (bits >> 40) & 1 & (live >> 40) == 1 {
            out.push_str(" high");
        }
    } else {
        operands(out, op, Enc::Vop3, w, lit, &wrap)?;
    }
    if op.flags.has(Flags::PERMLANE) {
        // LLVM prints the permlanes' op_sel as `[fi,bound_ctrl]`, from sources 0 and 1 alone.
        let opsel = (bits >> 11) & 3 & (live >> 11);
        if opsel != 0 {
            flag_list(out, "op_sel", opsel, 2);
        }
    } else if !is_b {
        let opsel = (bits >> 11) & 0xf & (live >> 11);
        if opsel != 0 {
            out.push_str(" op_sel:[");
            for i in 0..n_src {
                dec(out, (opsel >> i & 1) as u32);
                out.push(',');
            }
            dec(out, (opsel >> 3 & 1) as u32);
            out.push(']');
        }
    }
    if (bits >> 15) & 1 & (live >> 15) == 1 {
        out.push_str(" clamp");
    }
    match (bits >> 59) & 3 & (live >> 59) {
        1 => out.push_str(" mul:2"),
        2 => out.push_str(" mul:4"),
        3 => out.push_str(" div:2"),
        _ => {}
    }
    Ok(Decoded {
        dwords: 2 + usize::from(lit.is_some()),
        memory: None,
    })
}

/// The VOP3 interpolations' operands: src0 holds the attribute (`attr<N>.<chan>`, and `high`
/// in its bit 8, which the caller prints after the operands), src1 the
/// i/j register or, for `v_interp_mov_f32_e64`, the parameter slot (`p10`, `p20`, `p0`, else
/// LLVM's `invalid_param_<N>`); sources take `-` and `|…|` as other VOP3s.
fn interp_operands(
    out: &mut String,
    op: &Op,
    w: &Words,
    wrap: &dyn Fn(Field, bool) -> Option<(&'static str, &'static str)>,
) -> Result<(), Unknown> {
    for (i, o) in op.opnds.iter().enumerate() {
        out.push_str(if i == 0 { " " } else { ", " });
        match *o {
            Opnd::T(Tok::Attr0X) => {
                let a = field(Field::Src0, Enc::Vop3, w);
                interp_attr(out, a & 0x3f, a >> 6 & 3);
            }
            Opnd::T(Tok::P10) => interp_slot(out, field(Field::Src1, Enc::Vop3, w)),
            Opnd::T(t) => out.push_str(t.text()),
            Opnd::R(f, file, width, imm) => {
                let value = field(f, Enc::Vop3, w);
                let is_imm = matches!(value, 128..=208 | 240..=248 | 255);
                let (pre, post) = wrap(f, is_imm).unwrap_or(("", ""));
                out.push_str(pre);
                operand(out, op, i, f, file, value, width, imm, None)?;
                out.push_str(post);
            }
        }
    }
    Ok(())
}

/// An interpolation's attribute and channel: `attr<N>.<x|y|z|w>`.
fn interp_attr(out: &mut String, attr: u32, chan: u32) {
    out.push_str("attr");
    dec(out, attr);
    out.push('.');
    out.push(['x', 'y', 'z', 'w'][(chan & 3) as usize]);
}

/// `v_interp_mov_f32`'s parameter slot: `p10`, `p20`, `p0`, else LLVM's `invalid_param_<N>`.
fn interp_slot(out: &mut String, slot: u32) {
    match slot {
        0 => out.push_str("p10"),
        1 => out.push_str("p20"),
        2 => out.push_str("p0"),
        _ => {
            out.push_str("invalid_param_");
            dec(out, slot);
        }
    }
}

/// VINTRP: `v_interp_p1_f32_e32`, `v_interp_p2_f32_e32` (destination, i/j register,
/// attribute) and `v_interp_mov_f32_e32` (destination, slot, attribute); opcode 3 is none.
fn vintrp(out: &mut String, w: &Words) -> Result<Decoded, Unknown> {
    let w0 = w.w[0];
    let (vsrc, chan, attr, opcode, vdst) = (
        w0 & 0xff,
        w0 >> 8 & 3,
        w0 >> 10 & 0x3f,
        w0 >> 16 & 3,
        w0 >> 18 & 0xff,
    );
    out.push_str(match opcode {
        0 => "v_interp_p1_f32_e32",
        1 => "v_interp_p2_f32_e32",
        2 => "v_interp_mov_f32_e32",
        _ => {
            return Err(Unknown::Opcode {
                encoding: "VINTRP",
                opcode,
            });
        }
    });
    out.push_str(" v");
    dec(out, vdst);
    out.push_str(", ");
    if opcode == 2 {
        interp_slot(out, vsrc);
    } else {
        out.push('v');
        dec(out, vsrc);
    }
    out.push_str(", ");
    interp_attr(out, attr, chan);
    Ok(Decoded {
        dwords: 1,
        memory: None,
    })
}

/// EXP: the target by name (`mrt0`–`mrt7`, `mrtz`, `null`, `pos0`–`pos4`, `prim`, `param0`–
/// `param31`, else LLVM's `invalid_target_<N>`), four sources (`off` where `en` clears them;
/// `compr` prints the first source twice, then the second twice), `done`, `compr`, `vm`. Bits
/// 13–25 are ignored, as LLVM ignores them.
fn exp(out: &mut String, w: &Words) -> Result<Decoded, Unknown> {
    w.need("EXP", 2)?;
    let (w0, w1) = (w.w[0], w.w[1]);
    let (en, target) = (w0 & 0xf, w0 >> 4 & 0x3f);
    let (compr, done, vm) = (w0 >> 10 & 1 == 1, w0 >> 11 & 1 == 1, w0 >> 12 & 1 == 1);
    out.push_str("exp ");
    match target {
        0..=7 => {
            out.push_str("mrt");
            dec(out, target);
        }
        8 => out.push_str("mrtz"),
        9 => out.push_str("null"),
        12..=16 => {
            out.push_str("pos");
            dec(out, target - 12);
        }
        20 => out.push_str("prim"),
        32..=63 => {
            out.push_str("param");
            dec(out, target - 32);
        }
        _ => {
            out.push_str("invalid_target_");
            dec(out, target);
        }
    }
    for n in 0..4u32 {
        out.push_str(if n == 0 { " " } else { ", " });
        let src = if compr { n / 2 } else { n };
        if en >> n & 1 == 1 {
            out.push('v');
            dec(out, w1 >> (8 * src) & 0xff);
        } else {
            out.push_str("off");
        }
    }
    for (on, flag) in [(done, " done"), (compr, " compr"), (vm, " vm")] {
        if on {
            out.push_str(flag);
        }
    }
    Ok(Decoded {
        dwords: 2,
        memory: None,
    })
}

/// Writes ` name:[a,b,c]` for `n` one-bit flags.
fn flag_list(out: &mut String, name: &str, flags: u64, n: usize) {
    out.push(' ');
    out.push_str(name);
    out.push_str(":[");
    for i in 0..n {
        if i > 0 {
            out.push(',');
        }
        dec(out, (flags >> i & 1) as u32);
    }
    out.push(']');
}

/// VOP3P: packed math with `op_sel`, `op_sel_hi`, `neg_lo`, `neg_hi`, `clamp`.
fn vop3p(out: &mut String, w: &Words, opcode: u32) -> Result<Decoded, Unknown> {
    let op = entry("VOP3P", &tables::VOP3P, opcode)?;
    w.need("VOP3P", 2)?;
    let bits = w.lo64();
    check_zero(op, bits, op.zero)?;
    let lit = if wants_literal(op, Enc::Vop3, w) {
        Some(literal_after(w, "VOP3P", 2)?)
    } else {
        None
    };
    let live = !op.ignore;
    let n_src = op
        .opnds
        .iter()
        .filter(|o| matches!(o, Opnd::R(Field::Src0 | Field::Src1 | Field::Src2, ..)))
        .count();
    let mask = (1u64 << n_src) - 1;
    out.push_str(op.name);
    if op.flags.has(Flags::MIX) {
        return mix(out, op, w, lit, n_src);
    }
    // Packed immediates print as 32-bit values when they do not fit 16 bits.
    operands_packed(out, op, w, lit)?;
    let opsel = (bits >> 11) & 7 & (live >> 11) & mask;
    let opsel_hi = (((bits >> 59) & 3) | ((bits >> 14) & 1) << 2) & mask;
    let neg_lo = (bits >> 61) & 7 & mask;
    let neg_hi = (bits >> 8) & 7 & mask;
    if opsel != 0 {
        flag_list(out, "op_sel", opsel, n_src);
    }
    if opsel_hi != mask {
        flag_list(out, "op_sel_hi", opsel_hi, n_src);
    }
    if neg_lo != 0 {
        flag_list(out, "neg_lo", neg_lo, n_src);
    }
    if neg_hi != 0 {
        flag_list(out, "neg_hi", neg_hi, n_src);
    }
    if (bits >> 15) & 1 & (live >> 15) == 1 {
        out.push_str(" clamp");
    }
    Ok(Decoded {
        dwords: 2 + usize::from(lit.is_some()),
        memory: None,
    })
}

/// `v_fma_mix_f32`, `v_fma_mixlo_f16`, `v_fma_mixhi_f16` (after the mnemonic): `neg_lo` prints
/// as each source's `-`, `neg_hi` as its `|…|`; `op_sel` and `op_sel_hi` (each source's f16
/// half, off by default) one field a source with no destination field; `clamp`.
fn mix(
    out: &mut String,
    op: &Op,
    w: &Words,
    lit: Option<u32>,
    n_src: usize,
) -> Result<Decoded, Unknown> {
    let bits = w.lo64();
    let live = !op.ignore;
    let neg = (bits >> 61) & 7;
    let abs = (bits >> 8) & 7;
    let wrap = |f: Field, is_imm: bool| -> Option<(&'static str, &'static str)> {
        let i = src_index(f)?;
        match (neg >> i & 1 == 1, abs >> i & 1 == 1) {
            (false, false) => None,
            (true, false) if is_imm => Some(("neg(", ")")),
            (true, false) => Some(("-", "")),
            (false, true) => Some(("|", "|")),
            (true, true) => Some(("-|", "|")),
        }
    };
    operands(out, op, Enc::Vop3, w, lit, &wrap)?;
    let opsel = (bits >> 11) & 7 & (live >> 11);
    let opsel_hi = ((bits >> 59) & 3) | ((bits >> 14) & 1) << 2;
    if opsel != 0 {
        flag_list(out, "op_sel", opsel, n_src);
    }
    if opsel_hi != 0 {
        flag_list(out, "op_sel_hi", opsel_hi, n_src);
    }
    if (bits >> 15) & 1 & (live >> 15) == 1 {
        out.push_str(" clamp");
    }
    Ok(Decoded {
        dwords: 2 + usize::from(lit.is_some()),
        memory: None,
    })
}

/// VOP3P's operands: a literal that does not fit 16 bits prints as a 32-bit value.
fn operands_packed(out: &mut String, op: &Op, w: &Words, lit: Option<u32>) -> Result<(), Unknown> {
    for (i, o) in op.opnds.iter().enumerate() {
        out.push_str(if i == 0 { " " } else { ", " });
        match *o {
            Opnd::T(t) => out.push_str(t.text()),
            Opnd::R(f, file, width, imm) => {
                let value = field(f, Enc::Vop3, w);
                let imm = match (imm, lit) {
                    (Imm::F16 | Imm::I16, Some(l)) if is_literal(value) && l > 0xffff => Imm::B32,
                    _ => imm,
                };
                operand(out, op, i, f, file, value, width, imm, lit)?;
            }
        }
    }
    Ok(())
}

/// SMEM: data, base, then the offset register and/or the immediate offset; `glc`, `dlc`.
fn smem(out: &mut String, w: &Words, opcode: u32) -> Result<Decoded, Unknown> {
    let op = entry("SMEM", &tables::SMEM, opcode)?;
    w.need("SMEM", 2)?;
    let bits = w.lo64();
    check_zero(op, bits, op.zero)?;
    let live = !op.ignore;
    out.push_str(op.name);
    let soffset = field(Field::Soffset, Enc::Smem, w);
    let offset = (bits >> 32) & 0x1f_ffff;
    let mut first = true;
    let mut printed_offset = false;
    for (i, o) in op.opnds.iter().enumerate() {
        out.push_str(if first { " " } else { ", " });
        first = false;
        match *o {
            Opnd::T(_) if op.flags.has(Flags::ATC_PROBE) && i == 0 => {
                simm_style(out, Tok::Inl, field(Field::Sdata, Enc::Smem, w));
            }
            Opnd::R(Field::Soffset, ..) => {
                if soffset == 0x7d {
                    smem_offset(out, offset);
                    printed_offset = true;
                } else {
                    scalar(out, soffset, 1).map_err(|()| Unknown::Operand {
                        name: op.name,
                        operand: i,
                        value: soffset,
                    })?;
                }
            }
            Opnd::T(_) => {
                // The probe's immediate offset: the offset stands where it stood.
                if soffset == 0x7d {
                    smem_offset(out, offset);
                    printed_offset = true;
                } else {
                    scalar(out, soffset, 1).map_err(|()| Unknown::Operand {
                        name: op.name,
                        operand: i,
                        value: soffset,
                    })?;
                }
            }
            Opnd::R(f, _, width, _) => {
                let v = field(f, Enc::Smem, w);
                // A four-register operand also reads `vcc`, `null` and `exec` by their names
                // (checked against llvm-mc-14); any other register with no name at its width
                // is left undecoded rather than guessed.
                let special = match (width, v) {
                    (4, 106) => Some("vcc"),
                    (4, 125) => Some("null"),
                    (4, 126) => Some("exec"),
                    _ => None,
                };
                match special {
                    Some(name) => out.push_str(name),
                    None => scalar(out, v, width).map_err(|()| Unknown::Unsupported {
                        name: op.name,
                        what: "this register at this width",
                    })?,
                }
            }
        }
    }
    // With an offset register, LLVM 14 prints no immediate offset for gfx10.
    let _ = printed_offset;
    if bits >> 16 & 1 & (live >> 16) == 1 {
        out.push_str(" glc");
    }
    if bits >> 14 & 1 & (live >> 14) == 1 {
        out.push_str(" dlc");
    }
    let memory = if op.flags.has(Flags::SCALAR_LOAD) {
        Some(Memory {
            space: Space::Scalar,
            direction: Direction::Load,
        })
    } else {
        None
    };
    Ok(Decoded { dwords: 2, memory })
}

/// SMEM's 21-bit immediate offset, signed, as LLVM prints it (`-0x…` below zero).
fn smem_offset(out: &mut String, offset: u64) {
    let signed = ((offset as i64) << 43) >> 43;
    if signed < 0 {
        out.push('-');
        hex(out, signed.unsigned_abs() as u32);
    } else {
        hex(out, signed as u32);
    }
}

/// What a memory instruction does, by the flags its mnemonic gave it.
fn direction(flags: Flags) -> Direction {
    if flags.has(Flags::ATOMIC) {
        Direction::Atomic
    } else if flags.has(Flags::STORE) {
        Direction::Store
    } else {
        Direction::Load
    }
}

/// Writes a vector register operand of a memory instruction.
fn mem_vgpr(out: &mut String, op: &Op, i: usize, v: u32, width: u8) -> Result<(), Unknown> {
    vgpr(out, v, width).map_err(|()| Unknown::Operand {
        name: op.name,
        operand: i,
        value: v,
    })
}

/// DS: registers, `offset:`/`offset0:`/`offset1:`, `gds`.
fn ds(out: &mut String, w: &Words, opcode: u32) -> Result<Decoded, Unknown> {
    let op = entry("DS", &tables::DS, opcode)?;
    w.need("DS", 2)?;
    let bits = w.lo64();
    check_zero(op, bits, op.zero)?;
    out.push_str(op.name);
    for (i, o) in op.opnds.iter().enumerate() {
        out.push_str(if i == 0 { " " } else { ", " });
        match *o {
            Opnd::R(f, _, width, _) => mem_vgpr(out, op, i, field(f, Enc::Mem, w), width)?,
            Opnd::T(t) => out.push_str(t.text()),
        }
    }
    let (o0, o1) = ((bits & 0xff) as u32, (bits >> 8 & 0xff) as u32);
    let live = !op.ignore;
    let two = op.flags.has(Flags::TWO_OFFSETS);
    if two {
        if o0 != 0 && live & 0xff != 0 {
            out.push_str(" offset0:");
            dec(out, o0);
        }
        if o1 != 0 && live & 0xff00 != 0 {
            out.push_str(" offset1:");
            dec(out, o1);
        }
    } else if op.flags.has(Flags::SWIZZLE) {
        swizzle(out, (o0 | o1 << 8) & (live as u32 & 0xffff));
    } else {
        let off = o0 | o1 << 8;
        if off & (live as u32 & 0xffff) != 0 {
            out.push_str(" offset:");
            dec(out, off & (live as u32 & 0xffff));
        }
    }
    let gds = bits >> 17 & 1 & (live >> 17) == 1;
    if gds {
        out.push_str(" gds");
    }
    let lane_op = op.flags.has(Flags::LANE_OP);
    let memory = (!lane_op).then(|| Memory {
        space: if gds { Space::Gds } else { Space::Lds },
        direction: direction(op.flags),
    });
    Ok(Decoded { dwords: 2, memory })
}

/// `ds_swizzle_b32`'s offset as LLVM 14 prints it (`printSwizzle`): nothing for 0, a
/// `swizzle(QUAD_PERM,…)` when the high byte is 0x80, one of `SWAP`, `REVERSE`, `BROADCAST` or a
/// `BITMASK_PERM` pattern when bit 15 is clear, else the offset in decimal.
fn swizzle(out: &mut String, imm: u32) {
    if imm == 0 {
        return;
    }
    out.push_str(" offset:");
    if imm & 0xff00 == 0x8000 {
        out.push_str("swizzle(QUAD_PERM");
        for k in 0..4 {
            out.push(',');
            dec(out, imm >> (2 * k) & 3);
        }
        out.push(')');
        return;
    }
    if imm & 0x8000 != 0 {
        dec(out, imm);
        return;
    }
    let (and, or, xor) = (imm & 0x1f, imm >> 5 & 0x1f, imm >> 10 & 0x1f);
    if and == 0x1f && or == 0 && xor.count_ones() == 1 {
        out.push_str("swizzle(SWAP,");
        dec(out, xor);
    } else if and == 0x1f && or == 0 && xor > 0 && (xor + 1).is_power_of_two() {
        out.push_str("swizzle(REVERSE,");
        dec(out, xor + 1);
    } else {
        let group = 0x1f - and + 1;
        if group > 1 && group.is_power_of_two() && or < group && xor == 0 {
            out.push_str("swizzle(BROADCAST,");
            dec(out, group);
            out.push(',');
            dec(out, or);
        } else {
            out.push_str("swizzle(BITMASK_PERM,\"");
            let probe0 = or ^ xor;
            let probe1 = (0x1f & and | or) ^ xor;
            for bit in (0..5).rev() {
                let (p0, p1) = (probe0 >> bit & 1, probe1 >> bit & 1);
                out.push(match (p0 == p1, p0) {
                    (true, 0) => '0',
                    (true, _) => '1',
                    (false, 0) => 'p',
                    (false, _) => 'i',
                });
            }
            out.push('"');
        }
    }
    out.push(')');
}

/// Writes the cache-policy bits in LLVM's order.
fn cache_bits(out: &mut String, glc: bool, slc: bool, dlc: bool) {
    if glc {
        out.push_str(" glc");
    }
    if slc {
        out.push_str(" slc");
    }
    if dlc {
        out.push_str(" dlc");
    }
}

/// FLAT, SCRATCH, GLOBAL (the segment picks the table): address forms with `off`, offset, cache bits.
fn flat(out: &mut String, w: &Words, opcode: u32, seg: u32) -> Result<Decoded, Unknown> {
    let (encoding, table, space): (&'static str, &'static [Option<Op>], Space) = match seg {
        0 => ("FLAT", &tables::FLAT, Space::Flat),
        1 => ("SCRATCH", &tables::SCRATCH, Space::Scratch),
        2 => ("GLOBAL", &tables::GLOBAL, Space::Global),
        _ => {
            return Err(Unknown::Encoding {
                word: w.w[0],
                what: "FLAT segment 3",
            });
        }
    };
    let op = entry(encoding, table, opcode)?;
    w.need(encoding, 2)?;
    let bits = w.lo64();
    let glc = bits >> 16 & 1 == 1;
    let atomic = op.flags.has(Flags::NAME_ATOMIC);
    let vdst_bits = 0xffu64 << 56;
    let saddr_bits = 0x7fu64 << 48;
    let zero = if atomic && glc {
        op.zero & !vdst_bits
    } else {
        op.zero
    } & !saddr_bits;
    check_zero(op, bits, zero)?;
    let saddr = field(Field::Saddr, Enc::Mem, w);
    // FLAT takes no scalar address (0x7d only); GLOBAL takes one or `off` (0x7d); SCRATCH takes
    // one, `off` with a vector address (0x7d), or neither (0x7f).
    let saddr_off = saddr == 0x7d || (seg == 1 && saddr == 0x7f);
    if (seg == 0 && saddr != 0x7d) || (seg == 2 && saddr == 0x7f) {
        return Err(Unknown::ReservedBits {
            name: op.name,
            bits: bits & saddr_bits,
        });
    }
    out.push_str(op.name);
    let mut i = 0usize;
    let sep = |out: &mut String, i: &mut usize| {
        out.push_str(if *i == 0 { " " } else { ", " });
        *i += 1;
    };
    let data_width = op.opnds.iter().find_map(|o| match *o {
        Opnd::R(Field::Data0, _, width, _) => Some(width),
        _ => None,
    });
    if atomic && glc {
        sep(out, &mut i);
        let width = data_width.unwrap_or(1);
        let width = if op.flags.has(Flags::CMPSWAP) {
            width.div_ceil(2)
        } else {
            width
        };
        mem_vgpr(out, op, 0, field(Field::Vdst, Enc::Mem, w), width)?;
    }
    for o in op.opnds {
        match *o {
            Opnd::R(Field::Addr, _, width, _) => {
                sep(out, &mut i);
                let v = field(Field::Addr, Enc::Mem, w);
                match seg {
                    2 => mem_vgpr(out, op, i, v, if saddr_off { 2 } else { 1 })?,
                    1 if saddr != 0x7d => out.push_str("off"),
                    _ => mem_vgpr(out, op, i, v, width)?,
                }
            }
            Opnd::R(Field::Saddr, ..) | Opnd::T(Tok::Off) => {
                sep(out, &mut i);
                if saddr_off {
                    out.push_str("off");
                } else {
                    let width = if seg == 2 { 2 } else { 1 };
                    scalar(out, saddr, width).map_err(|()| Unknown::Operand {
                        name: op.name,
                        operand: i,
                        value: saddr,
                    })?;
                }
            }
            Opnd::R(f, _, width, _) => {
                sep(out, &mut i);
                mem_vgpr(out, op, i, field(f, Enc::Mem, w), width)?;
            }
            Opnd::T(t) => {
                sep(out, &mut i);
                out.push_str(t.text());
            }
        }
    }
    let raw = (bits & 0xfff) as i32;
    let offset = if seg == 0 { raw } else { (raw << 20) >> 20 };
    if offset != 0 {
        out.push_str(" offset:");
        int(out, i64::from(offset));
    }
    let live = !op.ignore;
    cache_bits(
        out,
        glc,
        bits >> 17 & 1 & (live >> 17) == 1,
        bits >> 12 & 1 & (live >> 12) == 1,
    );
    if bits >> 13 & 1 & (live >> 13) == 1 {
        out.push_str(" lds");
    }
    Ok(Decoded {
        dwords: 2,
        memory: Some(Memory {
            space,
            direction: direction(op.flags),
        }),
    })
}

/// MUBUF and MTBUF: data, address (`off`, one register, or two with `idxen offen`), resource,
/// offset register or constant, `format:`, `offen`/`idxen`, `offset:`, cache bits, `lds`, `tfe`.
fn buffer(out: &mut String, w: &Words, typed: bool, opcode: u32) -> Result<Decoded, Unknown> {
    let (encoding, table): (&'static str, &'static [Option<Op>]) = if typed {
        ("MTBUF", &tables::MTBUF)
    } else {
        ("MUBUF", &tables::MUBUF)
    };
    let op = entry(encoding, table, opcode)?;
    w.need(encoding, 2)?;
    let bits = w.lo64();
    check_zero(op, bits, op.zero)?;
    let live = !op.ignore;
    let bit = |n: u32| bits >> n & 1 & (live >> n) == 1;
    let (offen, idxen) = (bit(12), bit(13));
    let lds = !typed && bit(16);
    // With `lds` LLVM prints no `tfe`.
    let tfe = bit(55) && !lds;
    let soffset_literal = field(Field::Soffset8, Enc::Mem, w) == 255;
    let lit = if soffset_literal {
        Some(literal_after(w, encoding, 2)?)
    } else {
        None
    };
    out.push_str(op.name);
    for (i, o) in op.opnds.iter().enumerate() {
        out.push_str(if i == 0 { " " } else { ", " });
        match *o {
            Opnd::R(Field::Vdata, _, width, _) => {
                mem_vgpr(out, op, i, field(Field::Vdata, Enc::Mem, w), width)?;
            }
            Opnd::R(Field::Vaddr, ..) | Opnd::T(Tok::Off) => {
                let v = field(Field::Vaddr, Enc::Mem, w);
                match (offen, idxen) {
                    (false, false) => out.push_str("off"),
                    (true, true) => mem_vgpr(out, op, i, v, 2)?,
                    _ => mem_vgpr(out, op, i, v, 1)?,
                }
            }
            Opnd::R(Field::Srsrc, ..) => {
                let v = field(Field::Srsrc, Enc::Mem, w);
                scalar(out, v, 4).map_err(|()| Unknown::Operand {
                    name: op.name,
                    operand: i,
                    value: v,
                })?;
            }
            Opnd::R(Field::Soffset8, ..) => {
                let v = field(Field::Soffset8, Enc::Mem, w);
                source(out, v, 1, Imm::B32, lit).map_err(|()| Unknown::Operand {
                    name: op.name,
                    operand: i,
                    value: v,
                })?;
            }
            Opnd::R(f, _, width, _) => mem_vgpr(out, op, i, field(f, Enc::Mem, w), width)?,
            Opnd::T(t) => out.push_str(t.text()),
        }
    }
    if typed {
        let fmt = tables::MTBUF_FORMATS[(bits >> 19 & 0x7f) as usize];
        if !fmt.is_empty() {
            out.push(' ');
            out.push_str(fmt);
        }
    }
    match (offen, idxen) {
        (true, true) => out.push_str(" idxen offen"),
        (true, false) => out.push_str(" offen"),
        (false, true) => out.push_str(" idxen"),
        _ => {}
    }
    let offset = bits & 0xfff & live;
    if offset != 0 {
        out.push_str(" offset:");
        dec(out, offset as u32);
    }
    cache_bits(out, bit(14), bit(54), bit(15));
    if lds {
        out.push_str(" lds");
    }
    if tfe {
        out.push_str(" tfe");
    }
    let space = if typed {
        Space::TypedBuffer
    } else {
        Space::Buffer
    };
    Ok(Decoded {
        dwords: 2 + usize::from(lit.is_some()),
        memory: Some(Memory {
            space,
            direction: direction(op.flags),
        }),
    })
}

/// The names LLVM prints for MIMG's `dim` field.
const DIMS: [&str; 8] = [
    "SQ_RSRC_IMG_1D",
    "SQ_RSRC_IMG_2D",
    "SQ_RSRC_IMG_3D",
    "SQ_RSRC_IMG_CUBE",
    "SQ_RSRC_IMG_1D_ARRAY",
    "SQ_RSRC_IMG_2D_ARRAY",
    "SQ_RSRC_IMG_2D_MSAA",
    "SQ_RSRC_IMG_2D_MSAA_ARRAY",
];

/// MIMG other than the ray intersections: data, address (one run, or the NSA list), resource,
/// sampler, then `dmask`, `dim` and the flags in LLVM's order; widths from the table's shapes.
fn image(out: &mut String, w: &Words, opcode: u32) -> Result<Decoded, Unknown> {
    let op = tables_mimg::MIMG
        .get(opcode as usize)
        .and_then(Option::as_ref)
        .ok_or(Unknown::Opcode {
            encoding: "MIMG",
            opcode,
        })?;
    w.need("MIMG", 2)?;
    let bits = w.lo64();
    let set = bits & op.zero;
    if set != 0 {
        return Err(Unknown::ReservedBits {
            name: op.name,
            bits: set,
        });
    }
    let live = !op.ignore;
    let bit = |n: u32| bits >> n & 1 & (live >> n) == 1;
    let nsa = (bits >> 1 & 3) as usize;
    let dim = (bits >> 3 & 7) as usize;
    let dmask = (bits >> 8 & 0xf) as u32;
    let (a16, d16, tfe) = (bit(62), bit(63), bit(16));
    let shape = Unknown::Unsupported {
        name: op.name,
        what: "this data or address shape (LLVM prints default widths)",
    };
    let data = op.data
        [usize::from(d16) * 8 + usize::from(tfe) * 4 + (dmask.count_ones().max(1) as usize - 1)];
    let addr = op.addr[usize::from(a16) * 32 + dim * 4 + nsa];
    let vaddr0 = (bits >> 32 & 0xff) as u32;
    let vdata = (bits >> 40 & 0xff) as u32;
    // A shape LLVM has no instruction of, or one whose widened registers would run past v255,
    // prints with the matched variant's widths.
    let fits = |data: u8, addr: u8| {
        data != 0
            && addr != 0
            && vdata + u32::from(data) <= 256
            && (nsa > 0 || vaddr0 + u32::from(addr) <= 256)
    };
    // LLVM first reads the registers at the matched variant's widths: where those run past
    // v255 it rejects the word, whatever shape it would widen to.
    let [d0, a0] = op.default[nsa];
    if d0 != 0 && a0 != 0 && !fits(d0, a0) {
        return Err(Unknown::Operand {
            name: op.name,
            operand: usize::from(vdata + u32::from(d0) <= 256),
            value: if vdata + u32::from(d0) <= 256 {
                vaddr0
            } else {
                vdata
            },
        });
    }
    let [data, addr] = if fits(data, addr) {
        [data, addr]
    } else {
        op.default[nsa]
    };
    if !fits(data, addr) {
        return Err(shape);
    }
    let dwords = 2 + nsa;
    w.need("MIMG", dwords)?;
    let srsrc = (bits >> 48 & 0x1f) as u32 * 4;
    let ssamp = (bits >> 53 & 0x1f) as u32 * 4;
    out.push_str(op.name);
    out.push(' ');
    vgpr(out, vdata, data).map_err(|()| shape.clone())?;
    out.push_str(", ");
    if nsa == 0 {
        vgpr(out, vaddr0, addr).map_err(|()| shape.clone())?;
    } else {
        out.push('[');
        for k in 0..usize::from(addr) {
            let v = if k == 0 {
                vaddr0
            } else {
                w.w[2 + (k - 1) / 4] >> (8 * ((k - 1) % 4)) & 0xff
            };
            if k > 0 {
                out.push_str(", ");
            }
            range(out, "v", v, 1);
        }
        out.push(']');
    }
    out.push_str(", ");
    scalar(out, srsrc, 8).map_err(|()| Unknown::Operand {
        name: op.name,
        operand: 2,
        value: srsrc,
    })?;
    if op.sampler {
        out.push_str(", ");
        scalar(out, ssamp, 4).map_err(|()| Unknown::Operand {
            name: op.name,
            operand: 3,
            value: ssamp,
        })?;
    }
    if dmask != 0 {
        out.push_str(" dmask:");
        hex(out, dmask);
    }
    out.push_str(" dim:");
    out.push_str(DIMS[dim]);
    for (on, flag) in [
        (bit(12), " unorm"),
        (bit(13), " glc"),
        (bit(25), " slc"),
        (bit(7), " dlc"),
        (bit(15), " r128"),
        (a16, " a16"),
        (tfe, " tfe"),
        (bit(17), " lwe"),
        (d16, " d16"),
    ] {
        if on {
            out.push_str(flag);
        }
    }
    let direction = if op.flags.has(Flags::NAME_ATOMIC) {
        Some(Direction::Atomic)
    } else if op.flags.has(Flags::IMAGE_STORE) {
        Some(Direction::Store)
    } else if op.flags.has(Flags::IMAGE_GET) {
        None
    } else {
        Some(Direction::Load)
    };
    Ok(Decoded {
        dwords,
        memory: direction.map(|direction| Memory {
            space: Space::Image,
            direction,
        }),
    })
}

/// MIMG: the two ray-intersection instructions by hand, every other image instruction by table.
fn mimg(out: &mut String, w: &Words, opcode: u32) -> Result<Decoded, Unknown> {
    let (name, n_addr, n_addr_a16) = match opcode {
        0xe6 => ("image_bvh_intersect_ray", 11u32, 8u32),
        0xe7 => ("image_bvh64_intersect_ray", 12, 9),
        _ => return image(out, w, opcode),
    };
    w.need("MIMG", 2)?;
    let bits = w.lo64();
    let a16 = bits >> 62 & 1 == 1;
    let nsa = (bits >> 1 & 3) as usize;
    // dmask 0xf, bits 12 and 15 set; dim, bit 7, glc, tfe, lwe, slc, the sampler and d16 zero
    // (bits 6, 14 and 58–61 are ignored, as llvm-mc ignores them).
    let fixed_ok = bits >> 8 & 0xf == 0xf && bits >> 12 & 1 == 1 && bits >> 15 & 1 == 1;
    let reserved = bits & (0x38 | 0x80 | 0x2000 | 0x1_0000 | 0x2_0000 | 0x200_0000)
        | bits & (0x1f << 53)
        | bits & (1 << 63);
    if !fixed_ok || reserved != 0 {
        return Err(Unknown::ReservedBits {
            name,
            bits: reserved | if fixed_ok { 0 } else { 0x8f00 },
        });
    }
    let n = if a16 { n_addr_a16 } else { n_addr };
    let dwords = 2 + nsa;
    w.need("MIMG", dwords)?;
    let vdata = (bits >> 40 & 0xff) as u32;
    let vaddr0 = (bits >> 32 & 0xff) as u32;
    let srsrc = (bits >> 48 & 0x1f) as u32 * 4;
    out.push_str(name);
    out.push(' ');
    vgpr(out, vdata, 4).map_err(|()| Unknown::Operand {
        name,
        operand: 0,
        value: vdata,
    })?;
    out.push_str(", ");
    if nsa == 0 {
        let width = n.next_power_of_two() as u8;
        vgpr(out, vaddr0, width).map_err(|()| Unknown::Operand {
            name,
            operand: 1,
            value: vaddr0,
        })?;
    } else {
        if (n as usize - 1).div_ceil(4) != nsa {
            return Err(Unknown::ReservedBits {
                name,
                bits: bits & 6,
            });
        }
        out.push('[');
        for k in 0..n as usize {
            let v = if k == 0 {
                vaddr0
            } else {
                w.w[2 + (k - 1) / 4] >> (8 * ((k - 1) % 4)) & 0xff
            };
            if k > 0 {
                out.push_str(", ");
            }
            vgpr(out, v, 1).map_err(|()| Unknown::Operand {
                name,
                operand: 1,
                value: v,
            })?;
        }
        out.push(']');
    }
    out.push_str(", ");
    scalar(out, srsrc, 4).map_err(|()| Unknown::Operand {
        name,
        operand: 2,
        value: srsrc,
    })?;
    if a16 {
        out.push_str(" a16");
    }
    Ok(Decoded {
        dwords,
        memory: Some(Memory {
            space: Space::Image,
            direction: Direction::Load,
        }),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test")]

    use super::{Words, decode_into, layout_dwords};

    /// The layout's length is the decoded length for every word that decodes (whose length the
    /// oracle tests check against LLVM), so an undecoded word of the same shape takes as many
    /// dwords as it would have: random words of every encoding's high bits, a million of them.
    #[test]
    fn the_layout_length_is_the_decoded_length() {
        const HIGHS: [u32; 21] = [
            0x8000_0000,
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
            0x0200_0000,
            0x5800_0000,
            0x7e00_00fa,
        ];
        let mut state = 0x5eed_1e57_u64;
        let mut next = || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 32) as u32
        };
        let mut text = String::new();
        let (mut decoded, mut checked) = (0, 0);
        for i in 0..1_000_000u32 {
            let high = HIGHS[(i % 21) as usize];
            let mask = !(high | high >> 1 | high >> 2 | high >> 3) & (next() & next() | next());
            let words = [high | mask, next(), next() & next(), next(), next()];
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            let line = decode_into(&bytes, 0, &mut text);
            checked += 1;
            if !line.is_ok() {
                continue;
            }
            decoded += 1;
            // v_nop with a DPP src0 whose DPP dword LLVM rejects is the 32-bit v_nop alone.
            if text == "v_nop" {
                continue;
            }
            assert_eq!(
                4 * layout_dwords(&Words::new(&bytes)),
                usize::from(line.len),
                "{words:08x?}: `{text}`"
            );
        }
        assert!(decoded > checked / 10, "{decoded} of {checked} decoded");
    }
}
