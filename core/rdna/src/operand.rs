//! How operands print: registers, the named specials, inline constants and literals, as LLVM 14
//! prints them for gfx10.3.
//!
//! Every function here either writes the operand's text or returns `Err(())`, which the caller
//! turns into a named [`crate::Unknown`]; nothing here panics on any field value.

use crate::table::Imm;

/// Names of the inline float constants 240–247 (the same text at every width).
const INLINE_FLOATS: [&str; 8] = ["0.5", "-0.5", "1.0", "-1.0", "2.0", "-2.0", "4.0", "-4.0"];
/// The f16 bit patterns of 240–248, which a 16-bit integer operand prints in hex.
const INLINE_F16_BITS: [u32; 9] = [
    0x3800, 0xb800, 0x3c00, 0xbc00, 0x4000, 0xc000, 0x4400, 0xc400, 0x3118,
];
/// The f32 bit patterns of 240–247, which a 32-bit literal prints by name when it holds one.
const F32_BITS: [u32; 8] = [
    0x3f00_0000,
    0xbf00_0000,
    0x3f80_0000,
    0xbf80_0000,
    0x4000_0000,
    0xc000_0000,
    0x4080_0000,
    0xc080_0000,
];

/// `v` in decimal, without `fmt` (this is the decoder's hottest path).
#[inline]
pub(crate) fn dec(out: &mut String, v: u32) {
    dec64(out, u64::from(v));
}

/// `v` in decimal.
#[inline]
fn dec64(out: &mut String, mut v: u64) {
    // Register numbers and offsets: most have one or two digits.
    if v < 10 {
        out.push(char::from(b'0' + v as u8));
        return;
    }
    if v < 100 {
        out.push(char::from(b'0' + (v / 10) as u8));
        out.push(char::from(b'0' + (v % 10) as u8));
        return;
    }
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    while v > 0 {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
    }
    for &b in &buf[i..] {
        out.push(char::from(b));
    }
}

/// `v` in decimal with its sign.
pub(crate) fn int(out: &mut String, v: i64) {
    if v < 0 {
        out.push('-');
    }
    dec64(out, v.unsigned_abs());
}

/// `v` as `0x…` in lowercase hex, no leading zeros.
#[inline]
pub(crate) fn hex(out: &mut String, v: u32) {
    out.push_str("0x");
    hex_digits(out, v, 1);
}

/// `v` in lowercase hex digits, at least `min` of them.
#[inline]
pub(crate) fn hex_digits(out: &mut String, v: u32, min: usize) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut buf = [0u8; 8];
    let mut i = buf.len();
    let mut v = v;
    while v > 0 || buf.len() - i < min.min(8) {
        i -= 1;
        buf[i] = DIGITS[(v & 0xf) as usize];
        v >>= 4;
    }
    if i == buf.len() {
        out.push('0');
        return;
    }
    for &b in &buf[i..] {
        out.push(char::from(b));
    }
}

/// A run of `width` registers starting at `first` in the file `prefix` (`v`, `s`, `ttmp`).
#[inline]
pub(crate) fn range(out: &mut String, prefix: &str, first: u32, width: u8) {
    if width <= 1 {
        out.push_str(prefix);
        dec(out, first);
    } else {
        out.push_str(prefix);
        out.push('[');
        dec(out, first);
        out.push(':');
        dec(out, first + u32::from(width) - 1);
        out.push(']');
    }
}

/// A vector register run `v…` from an 8-bit register number; `Err` past v255.
#[inline]
pub(crate) fn vgpr(out: &mut String, n: u32, width: u8) -> Result<(), ()> {
    if n + u32::from(width.max(1)) > 256 {
        return Err(());
    }
    range(out, "v", n, width);
    Ok(())
}

/// The alignment LLVM gives a scalar register run of `width` dwords (it rounds the first down).
fn scalar_align(width: u8) -> u32 {
    match width {
        0 | 1 => 1,
        2 => 2,
        _ => 4,
    }
}

/// A scalar operand 0–127: `s…`, `vcc_lo`, `ttmp…`, `m0`, `null`, `exec…`; `Err` where LLVM
/// has no register of that width there.
pub(crate) fn scalar(out: &mut String, n: u32, width: u8) -> Result<(), ()> {
    let w = u32::from(width.max(1));
    match n {
        0..=105 => {
            let first = n & !(scalar_align(width) - 1);
            if first + w > 106 {
                return Err(());
            }
            range(out, "s", first, width);
        }
        106 => match w {
            1 => out.push_str("vcc_lo"),
            2 => out.push_str("vcc"),
            _ => return Err(()),
        },
        107 if w == 1 => out.push_str("vcc_hi"),
        108..=123 => {
            let first = (n - 108) & !(scalar_align(width) - 1);
            if first + w > 16 {
                return Err(());
            }
            range(out, "ttmp", first, width);
        }
        124 if w == 1 => out.push_str("m0"),
        // LLVM has a 32- and a 64-bit `null`, no wider one.
        125 if w <= 2 => out.push_str("null"),
        126 => match w {
            1 => out.push_str("exec_lo"),
            2 => out.push_str("exec"),
            _ => return Err(()),
        },
        127 if w == 1 => out.push_str("exec_hi"),
        _ => return Err(()),
    }
    Ok(())
}

/// Whether a 9-bit source value reads the literal dword that follows the instruction.
pub(crate) fn is_literal(val: u32) -> bool {
    val == 255
}

/// A 9-bit source (an 8-bit scalar source is the same below 256): registers, specials, inline
/// constants, and the literal `lit` for 255. `Err` for values LLVM rejects or marks invalid.
pub(crate) fn source(
    out: &mut String,
    val: u32,
    width: u8,
    imm: Imm,
    lit: Option<u32>,
) -> Result<(), ()> {
    let wide = width >= 2;
    match val {
        0..=127 => scalar(out, val, width),
        128..=208 if imm != Imm::RegOnly => {
            let n = if val <= 192 {
                val as i32 - 128
            } else {
                192 - val as i32
            };
            int(out, i64::from(n));
            Ok(())
        }
        // The named specials are registers to LLVM: a register-only operand takes them too.
        235..=239 => {
            out.push_str(
                [
                    "src_shared_base",
                    "src_shared_limit",
                    "src_private_base",
                    "src_private_limit",
                    "src_pops_exiting_wave_id",
                ][(val - 235) as usize],
            );
            Ok(())
        }
        240..=248 if imm != Imm::RegOnly => {
            let i = (val - 240) as usize;
            if imm == Imm::I16 {
                hex(out, INLINE_F16_BITS[i]);
            } else if i < 8 {
                out.push_str(INLINE_FLOATS[i]);
            } else if wide {
                out.push_str("0.15915494309189532");
            } else {
                out.push_str("0.15915494");
            }
            Ok(())
        }
        251..=253 => {
            out.push_str(["src_vccz", "src_execz", "src_scc"][(val - 251) as usize]);
            Ok(())
        }
        254 if !wide => {
            out.push_str("src_lds_direct");
            Ok(())
        }
        255 if imm != Imm::RegOnly => {
            let v = lit.ok_or(())?;
            literal(out, v, width, imm);
            Ok(())
        }
        256..=511 => vgpr(out, val - 256, width),
        _ => Err(()),
    }
}

/// Whether `v`, read as a signed 32-bit value, is one of the inline integers −16…64.
fn inline_int(v: i64) -> bool {
    (-16..=64).contains(&v)
}

/// A 32-bit immediate as LLVM's printImmediate32 prints it.
pub(crate) fn imm32(out: &mut String, v: u32) {
    let s = v as i32;
    if inline_int(i64::from(s)) {
        int(out, i64::from(s));
    } else if let Some(i) = F32_BITS.iter().position(|&b| b == v) {
        out.push_str(INLINE_FLOATS[i]);
    } else if v == 0x3e22_f983 {
        out.push_str("0.15915494");
    } else {
        hex(out, v);
    }
}

/// A 16-bit float immediate as LLVM's printImmediate16 prints it.
fn imm16(out: &mut String, v: u32) {
    let s = v as u16 as i16;
    if inline_int(i64::from(s)) {
        int(out, i64::from(s));
    } else if let Some(i) = INLINE_F16_BITS[..8].iter().position(|&b| b == v) {
        out.push_str(INLINE_FLOATS[i]);
    } else if v == 0x3118 {
        out.push_str("0.15915494");
    } else {
        hex(out, v & 0xffff);
    }
}

/// A literal dword in an operand of the given width and kind.
pub(crate) fn literal(out: &mut String, v: u32, width: u8, imm: Imm) {
    match imm {
        _ if width >= 2 => {
            if v <= 64 {
                dec(out, v);
            } else {
                hex(out, v);
            }
        }
        Imm::F16 => imm16(out, v),
        Imm::I16 => {
            let s = v as u16 as i16;
            if inline_int(i64::from(s)) {
                int(out, i64::from(s));
            } else {
                // A 16-bit operand reads the literal's low half.
                hex(out, v & 0xffff);
            }
        }
        _ => imm32(out, v),
    }
}
