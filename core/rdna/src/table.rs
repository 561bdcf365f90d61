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
