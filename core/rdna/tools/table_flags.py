"""What the generated tables say about each opcode beyond its operands, as Rust expressions:
the fixed operand tokens as `Tok` variants and the per-opcode `Flags`, both worked out here from
the mnemonic once, so the decoder compares no strings at decode time.

`gen_tables.py` (and `mimg_probe.py`) emit through these functions; `UNDECODED` names the
opcodes LLVM decodes that the decoder does not, and why.
"""

# Fixed operand text as llvm-mc prints it -> the `Tok` variant. The two separator words are the
# constant v_fmamk/v_fmaak carry (the probe printed its sentinel there); `{…}` are SOPP/SOPK
# immediate styles.
TOKENS = {
    "off": "Tok::Off",
    "vcc_lo": "Tok::VccLo",
    "0": "Tok::Zero",
    "attr0.x": "Tok::Attr0X",
    "p10": "Tok::P10",
    "0xbf9f0000": "Tok::K",
    "0xbfa5000d": "Tok::K",
    "{udec}": "Tok::Udec",
    "{hex}": "Tok::Hex",
    "{inl}": "Tok::Inl",
    "{opt}": "Tok::Opt",
    "{special}": "Tok::Special",
}


def tok(text):
    return "Opnd::T(%s)" % TOKENS[text]


def _direction(name):
    if "atomic" in name or "_rtn" in name or "wrxchg" in name or "_add_" in name:
        return ["ATOMIC"]
    if "store" in name or "write" in name:
        return ["STORE"]
    return []


def op_flags(table, name):
    """The flag names of one opcode of `table` (an encoding's table name)."""
    f = []
    if table in ("DS", "FLAT", "SCRATCH", "GLOBAL", "MUBUF", "MTBUF"):
        f += _direction(name)
    if "atomic" in name:
        f.append("NAME_ATOMIC")
    if "cmpswap" in name:
        f.append("CMPSWAP")
    if table == "SOPP":
        if name == "s_waitcnt":
            f.append("WAITCNT")
        if name.startswith("s_sendmsg"):
            f.append("SENDMSG")
    if table == "SOPK":
        f += {"s_getreg_b32": ["GETREG"], "s_setreg_b32": ["SETREG"],
              "s_setreg_imm32_b32": ["SETREG_IMM"]}.get(name, [])
    if name == "v_nop":
        f.append("NOP")
    if name.startswith("v_interp"):
        f.append("INTERP")
    if name == "v_cvt_pk_u8_f32":
        f.append("SEXT_SRC12")
    if name.startswith("v_ldexp"):
        f.append("SEXT_SRC1")
    if name.startswith("v_fma_mix"):
        f.append("MIX")
    if name.startswith("v_permlane"):
        f.append("PERMLANE")
    if name.startswith("s_atc_probe"):
        f.append("ATC_PROBE")
    if name.startswith("s_load") or name.startswith("s_buffer_load"):
        f.append("SCALAR_LOAD")
    if name == "ds_swizzle_b32":
        f.append("SWIZZLE")
    if table == "DS" and ("read2" in name or "write2" in name or "wrxchg2" in name):
        f.append("TWO_OFFSETS")
    if table == "DS" and any(name.startswith(p) for p in (
            "ds_nop", "ds_permute", "ds_bpermute", "ds_swizzle", "ds_gws", "ds_append", "ds_consume")):
        f.append("LANE_OP")
    if name.startswith("image_store"):
        f.append("IMAGE_STORE")
    if name.startswith("image_get_"):
        f.append("IMAGE_GET")
    return f


def flags_expr(names):
    if not names:
        return "Flags::NONE"
    e = "Flags::%s" % names[0]
    for n in names[1:]:
        e += ".or(Flags::%s)" % n
    return e


# Opcodes LLVM decodes that the decoder does not print yet, by mnemonic prefix, with the reason
# the decoder gives (`Unknown::Unsupported`).
UNDECODED = [
]


def undecoded(table, name):
    """Why the decoder does not decode this opcode, or None when it does."""
    for prefix, why in UNDECODED:
        if name.startswith(prefix):
            return why
    return None
