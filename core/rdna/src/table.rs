//! The shape of an opcode table entry: what `tables.rs` (generated) is made of.
//!
//! An entry names the mnemonic, the operands in the order LLVM prints them, three masks over
//! the instruction's first 64 bits: bits that must be zero or one for this opcode (LLVM rejects
//! the word otherwise) and bits the opcode ignores (LLVM prints the same text whatever they hold),
//! what the mnemonic says about it as [`Flags`], and whether the decoder decodes it (and why not).
//! An opcode LLVM 14 decodes no word of is `None` in its table.

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

/// A fixed operand: implicit text, the constant `v_fmamk`/`v_fmaak` carry, or how SOPP and SOPK
/// print their 16-bit immediate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tok {
    /// `off` (no address register).
    Off,
    /// `vcc_lo` (VOP2/VOPC's implicit carry or condition).
    VccLo,
    /// `0`.
    Zero,
    /// `attr0.x` (interpolation).
    Attr0X,
    /// `p10` (interpolation).
    P10,
    /// The 32-bit constant `v_fmamk_*`/`v_fmaak_*` carry after the instruction, in hex.
    K,
    /// The immediate in decimal, unsigned.
    Udec,
    /// The immediate in hex.
    Hex,
    /// The immediate in decimal up to 64, else in hex.
    Inl,
    /// The immediate in decimal, left out when it is 0.
    Opt,
    /// The immediate in the opcode's own syntax (`s_waitcnt`'s counters, `sendmsg(…)`).
    Special,
}

impl Tok {
    /// The text a fixed operand prints (empty for the immediate styles, which print a value).
    pub(crate) fn text(self) -> &'static str {
        match self {
            Tok::Off => "off",
            Tok::VccLo => "vcc_lo",
            Tok::Zero => "0",
            Tok::Attr0X => "attr0.x",
            Tok::P10 => "p10",
            Tok::K | Tok::Udec | Tok::Hex | Tok::Inl | Tok::Opt | Tok::Special => "",
        }
    }
}

/// One printed operand.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Opnd {
    /// A register or constant read from a field, with its file, width in dwords and immediate kind.
    R(Field, File, u8, Imm),
    /// A fixed operand.
    T(Tok),
}

/// What the generator knew of an opcode from its mnemonic (`tools/table_flags.py`), so the
/// decoder compares no names: a set of the constants below.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Flags(u32);

impl Flags {
    /// None of them.
    pub(crate) const NONE: Flags = Flags(0);
    /// A memory instruction that reads and writes in one operation.
    pub(crate) const ATOMIC: Flags = Flags(1);
    /// A memory instruction that writes.
    pub(crate) const STORE: Flags = Flags(1 << 1);
    /// Its name says `atomic` (FLAT's returning form, MIMG's atomics).
    pub(crate) const NAME_ATOMIC: Flags = Flags(1 << 2);
    /// A compare-and-swap (its returned value is half its data).
    pub(crate) const CMPSWAP: Flags = Flags(1 << 3);
    /// `s_waitcnt`.
    pub(crate) const WAITCNT: Flags = Flags(1 << 4);
    /// `s_sendmsg`, `s_sendmsghalt`.
    pub(crate) const SENDMSG: Flags = Flags(1 << 5);
    /// `s_getreg_b32`.
    pub(crate) const GETREG: Flags = Flags(1 << 6);
    /// `s_setreg_b32`.
    pub(crate) const SETREG: Flags = Flags(1 << 7);
    /// `s_setreg_imm32_b32`.
    pub(crate) const SETREG_IMM: Flags = Flags(1 << 8);
    /// `v_nop`.
    pub(crate) const NOP: Flags = Flags(1 << 9);
    /// `v_interp_*`.
    pub(crate) const INTERP: Flags = Flags(1 << 10);
    /// Sources 1 and 2 are integers that take `sext(…)` (`v_cvt_pk_u8_f32`).
    pub(crate) const SEXT_SRC12: Flags = Flags(1 << 11);
    /// Source 1 is an integer that takes `sext(…)` (`v_ldexp_*`).
    pub(crate) const SEXT_SRC1: Flags = Flags(1 << 12);
    /// `v_fma_mix*`.
    pub(crate) const MIX: Flags = Flags(1 << 13);
    /// `s_atc_probe*`.
    pub(crate) const ATC_PROBE: Flags = Flags(1 << 14);
    /// `s_load_*`, `s_buffer_load_*`.
    pub(crate) const SCALAR_LOAD: Flags = Flags(1 << 15);
    /// `ds_swizzle_b32`.
    pub(crate) const SWIZZLE: Flags = Flags(1 << 16);
    /// A DS instruction with two 8-bit offsets (`read2`, `write2`, `wrxchg2`).
    pub(crate) const TWO_OFFSETS: Flags = Flags(1 << 17);
    /// A DS instruction that moves data between lanes, not to memory.
    pub(crate) const LANE_OP: Flags = Flags(1 << 18);
    /// `image_store*`.
    pub(crate) const IMAGE_STORE: Flags = Flags(1 << 19);
    /// `image_get_*` (no memory access).
    pub(crate) const IMAGE_GET: Flags = Flags(1 << 20);
    /// `v_permlane16_b32`, `v_permlanex16_b32`: `op_sel` is `[fi,bound_ctrl]`, two fields.
    pub(crate) const PERMLANE: Flags = Flags(1 << 21);

    /// Both sets.
    pub(crate) const fn or(self, other: Flags) -> Flags {
        Flags(self.0 | other.0)
    }

    /// Whether every flag of `f` is set.
    pub(crate) const fn has(self, f: Flags) -> bool {
        self.0 & f.0 == f.0
    }
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
    /// Bits (of the first 64) that must be one (`glc` of the returning-only atomics, `gds` of
    /// the GWS opcodes): LLVM rejects the word without them.
    pub(crate) one: u64,
    /// Bits (of the first 64) this opcode ignores.
    pub(crate) ignore: u64,
    /// What its mnemonic says about it.
    pub(crate) flags: Flags,
    /// Why the decoder does not decode this opcode, which LLVM does (`None`: it does).
    pub(crate) undecoded: Option<&'static str>,
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
    /// What its mnemonic says about it.
    pub(crate) flags: Flags,
    /// The data register's width in dwords by `[d16][tfe][dmask population − 1]` (a population
    /// of 0 counts as 1); 0 where LLVM prints a default width.
    pub(crate) data: [u8; 16],
    /// The address registers by `[a16][dim][NSA dwords]`: with no NSA dwords the width of the
    /// one register run, else how many registers the list names; 0 where LLVM rejects the
    /// shape or prints a default.
    pub(crate) addr: [u8; 64],
    /// By NSA dwords, the `[data, address]` widths LLVM prints for a shape it has no instruction
    /// of (those of the variant its decoder matched); `[0, 0]` where the probe saw none or
    /// several, which the decoder leaves undecoded.
    pub(crate) default: [[u8; 2]; 4],
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
