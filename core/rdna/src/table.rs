//! The shape of an opcode table entry: what `tables.rs` (generated) is made of.
//!
//! An entry names the mnemonic, the operands in the order LLVM prints them, and two masks over
//! the instruction's first 64 bits: bits that must be zero for this opcode (LLVM rejects the word
//! otherwise) and bits the opcode ignores (LLVM prints the same text whatever they hold).

/// A bit field of an encoding that an operand is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Field {
    /// Scalar destination (SOP*, bits 16–22; VOP3b, bits 8–14).
    Sdst,
    /// First scalar source (bits 0–7).
    Ssrc0,
    /// Second scalar source (bits 8–15).
    Ssrc1,
    /// SMEM data register.
    Sdata,
    /// SMEM base pair (in units of two registers).
    Sbase,
    /// SMEM offset register.
    Soffset,
    /// Vector destination.
    Vdst,
    /// First source (9 bits: scalar, constant or vector).
    Src0,
    /// Second source (9 bits).
    Src1,
    /// Third source (9 bits).
    Src2,
    /// VOP2/VOPC second source (a vector register).
    Vsrc1,
    /// DS/FLAT address register.
    Addr,
    /// DS/FLAT first data register.
    Data0,
    /// DS second data register.
    Data1,
    /// FLAT scalar address (`off` when 0x7d or 0x7f).
    Saddr,
    /// MUBUF/MTBUF data register.
    Vdata,
    /// MUBUF/MTBUF address register.
    Vaddr,
    /// MUBUF/MTBUF resource (in units of four registers).
    Srsrc,
    /// MUBUF/MTBUF offset register or constant (8 bits).
    Soffset8,
}

/// The register file an operand prints from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum File {
    /// Vector registers (`v…`).
    V,
    /// Scalar registers and the named specials (`s…`, `vcc`, `exec`, …).
    S,
}

/// How an immediate in a source field prints (LLVM's operand types, as far as printing tells).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Imm {
    /// A 32-bit operand: inline floats by f32 pattern, literals in hex.
    B32,
    /// A 64-bit operand: inline floats by f64 pattern, a 32-bit literal in hex.
    B64,
    /// A 16-bit float operand: inline and literal values by f16 pattern.
    F16,
    /// A 16-bit integer operand: inline integers in decimal, everything else in hex.
    I16,
    /// A register-only operand: LLVM prints any constant there as `/*invalid immediate*/`,
    /// which this decoder refuses.
    RegOnly,
    /// A 9-bit field that names a vector register by its low 8 bits (`v_swap_b32`).
    Vgpr8,
}

/// One printed operand.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Opnd {
    /// A register or constant read from a field, with its file, width in dwords and immediate kind.
    R(Field, File, u8, Imm),
    /// Fixed text (an implicit operand such as `vcc_lo`, or `off`).
    T(&'static str),
}

/// One opcode of one encoding.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Op {
    /// The mnemonic as LLVM prints it (with `_e32`/`_e64` where LLVM adds it).
    pub(crate) name: &'static str,
    /// The operands in printed order.
    pub(crate) opnds: &'static [Opnd],
    /// Bits (of the first 64) that must be zero for this opcode.
    pub(crate) zero: u64,
    /// Bits (of the first 64) this opcode ignores.
    pub(crate) ignore: u64,
}

/// One MIMG opcode (other than the ray intersections), as `tables_mimg.rs` holds it.
///
/// LLVM's disassembler widens the data and address registers to the instruction's shape; where
/// no instruction of that shape exists it prints default widths instead, and the generator
/// stores those shapes as 0, which the decoder leaves undecoded.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MimgOp {
    /// The mnemonic.
    pub(crate) name: &'static str,
    /// Whether it takes a sampler (`s[…]` after the resource).
    pub(crate) sampler: bool,
    /// Bits (of the first 64) that must be zero for this opcode.
    pub(crate) zero: u64,
    /// Bits (of the first 64) this opcode ignores.
    pub(crate) ignore: u64,
    /// The data register's width in dwords by `[d16][tfe][dmask population − 1]` (a population
    /// of 0 counts as 1); 0 where LLVM prints a default width.
    pub(crate) data: [u8; 16],
    /// The address registers by `[a16][dim][NSA dwords]`: with no NSA dwords the width of the
    /// one register run, else how many registers the list names; 0 where LLVM rejects the
    /// shape or prints a default.
    pub(crate) addr: [u8; 64],
}

/// One DPP16, DPP8 or SDWA form of a VOP1, VOP2 or VOPC opcode, as `tables_ext.rs` holds it;
/// its operands are the 32-bit form's.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ext {
    /// The mnemonic (`…_dpp`, `…_sdwa`).
    pub(crate) name: &'static str,
    /// Bits of the second dword that must be zero (SDWA's select fields aside: the generator
    /// learnt them from a select of `DWORD`, whose low bit set names no select).
    pub(crate) zero: u32,
    /// Bits of the second dword this form ignores.
    pub(crate) ignore: u32,
    /// Modifier bits of the second dword that print as `sext(…)` (an integer source).
    pub(crate) sext: u32,
    /// SDWA: whether `dst_unused` 3 is taken (LLVM prints it as `UNUSED_PAD`) or rejected.
    pub(crate) pad3: bool,
}

/// The extended forms one VOP1, VOP2 or VOPC opcode has.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ExtOp {
    /// DPP16 (src0 = 0xfa).
    pub(crate) dpp: Option<Ext>,
    /// DPP8 (src0 = 0xe9, or 0xea with `fi:1`).
    pub(crate) dpp8: Option<Ext>,
    /// SDWA (src0 = 0xf9).
    pub(crate) sdwa: Option<Ext>,
}
