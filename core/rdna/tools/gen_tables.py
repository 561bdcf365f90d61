#!/usr/bin/env python3
"""Generate core/rdna/src/tables.rs by asking llvm-mc-14 about every opcode of every encoding.

Run from the repository root: `python3 core/rdna/tools/gen_tables.py > core/rdna/src/tables.rs`;
`python3 core/rdna/tools/gen_tables.py mimg > core/rdna/src/tables_mimg.rs` writes the image
opcodes' table (`mimg_probe.py`), and `… gen_tables.py ext > core/rdna/src/tables_ext.rs` the DPP and
SDWA forms of VOP1, VOP2 and VOPC (`ext_probe.py`).
For each opcode it finds an encoding llvm-mc accepts with as many operand fields set to
distinctive values as it allows, reads the mnemonic and the order, register file and width of
the operands from the text, probes each source field with a literal and inline constants to learn
how immediates print, and flips every other bit once: a flip llvm-mc rejects is a bit that must be
zero for that opcode, a flip that changes nothing is a bit it ignores. The decoder's code, not this
table, knows how each encoding's modifiers print; the oracle tests check both against llvm-mc.
"""
import itertools
import re
import sys

from llvm_probe import disassemble
from table_flags import flags_expr, op_flags, tok, undecoded

LIT = 0xBF9F0000  # what a consumed sentinel reads as


def bits(lo, n):
    return ((1 << n) - 1) << lo


# name: (n_dwords, number of opcodes, fixed(op) -> base word, opcode mask, fields, special)
# field: (name, lo, width, probe value, resting value, class)
# class: s = scalar register number, v = vgpr number, src = 9-bit source, ssrc = 8-bit scalar source,
#        sb2 = smem base (x2), rs4 = resource (x4), k = immediate (not mapped to a register)
ENC = {
    "SOP2": (1, 0x60, lambda op: 0x80000000 | op << 23, bits(23, 9),
             [("Sdst", 16, 7, 16, 0, "s"), ("Ssrc0", 0, 8, 32, 0, "ssrc"), ("Ssrc1", 8, 8, 48, 0, "ssrc")]),
    "SOPK": (1, 0x1D, lambda op: 0xB0000000 | op << 23, bits(23, 9),
             [("Sdst", 16, 7, 16, 0, "s"), ("Simm16", 0, 16, 0x1234, 0, "k")]),
    "SOP1": (1, 0x100, lambda op: 0xBE800000 | op << 8, bits(23, 9) | bits(8, 8),
             [("Sdst", 16, 7, 16, 0, "s"), ("Ssrc0", 0, 8, 32, 0, "ssrc")]),
    "SOPC": (1, 0x80, lambda op: 0xBF000000 | op << 16, bits(23, 9) | bits(16, 7),
             [("Ssrc0", 0, 8, 32, 0, "ssrc"), ("Ssrc1", 8, 8, 48, 0, "ssrc")]),
    "SOPP": (1, 0x80, lambda op: 0xBF800000 | op << 16, bits(23, 9) | bits(16, 7),
             [("Simm16", 0, 16, 3, 0, "k")]),
    "SMEM": (2, 0x100, lambda op: 0xF4000000 | op << 18, bits(26, 6) | bits(18, 8),
             [("Sdata", 6, 7, 16, 0, "s"), ("Sbase", 0, 6, 20, 0, "sb2"), ("Offset21", 32, 21, 0x10, 0, "k"),
              ("Soffset", 57, 7, 4, 0x7D, "s")]),
    "VOP2": (1, 0x40, lambda op: op << 25, bits(31, 1) | bits(25, 6),
             [("Vdst", 17, 8, 16, 0, "v"), ("Src0", 0, 9, 256 + 32, 0, "src"), ("Vsrc1", 9, 8, 48, 0, "v")]),
    "VOP1": (1, 0x100, lambda op: 0x7E000000 | op << 9, bits(25, 7) | bits(9, 8),
             [("Vdst", 17, 8, 16, 0, "v"), ("Src0", 0, 9, 256 + 32, 0, "src")]),
    "VOPC": (1, 0x100, lambda op: 0x7C000000 | op << 17, bits(25, 7) | bits(17, 8),
             [("Src0", 0, 9, 256 + 32, 0, "src"), ("Vsrc1", 9, 8, 48, 0, "v")]),
    "VOP3": (2, 0x400, lambda op: 0xD4000000 | op << 16, bits(26, 6) | bits(16, 10),
             [("Vdst", 0, 8, 16, 0, "v"), ("Src0", 32, 9, 256 + 32, 0, "src"), ("Src1", 41, 9, 256 + 48, 0, "src"),
              ("Src2", 50, 9, 256 + 64, 0, "src"), ("Sdst", 8, 7, 12, 0, "s")]),
    "VOP3P": (2, 0x80, lambda op: 0xCC000000 | op << 16, bits(24, 8) | bits(16, 7),
              [("Vdst", 0, 8, 16, 0, "v"), ("Src0", 32, 9, 256 + 32, 0, "src"), ("Src1", 41, 9, 256 + 48, 0, "src"),
               ("Src2", 50, 9, 256 + 64, 0, "src")]),
    "DS": (2, 0x100, lambda op: 0xD8000000 | op << 18, bits(26, 6) | bits(18, 8),
           [("Vdst", 56, 8, 16, 0, "v"), ("Addr", 32, 8, 32, 0, "v"), ("Data0", 40, 8, 48, 0, "v"),
            ("Data1", 48, 8, 64, 0, "v")]),
    "FLAT": (2, 0x80, lambda op: 0xDC000000 | op << 18, bits(26, 6) | bits(18, 7),
             [("Vdst", 56, 8, 16, 0, "v"), ("Addr", 32, 8, 32, 0, "v"), ("Data0", 40, 8, 48, 0, "v"),
              ("Saddr", 48, 7, 20, 0x7D, "s")]),
    "MUBUF": (2, 0x100, lambda op: 0xE0000000 | (op >> 7) << 25 | (op & 0x7F) << 18, bits(26, 6) | bits(18, 8),
              [("Vdata", 40, 8, 48, 0, "v"), ("Vaddr", 32, 8, 32, 0, "v"), ("Srsrc", 48, 5, 5, 0, "rs4"),
               ("Soffset8", 56, 8, 4, 0x80, "ssrc")]),
    "MTBUF": (2, 0x10, lambda op: 0xE8000000 | (op & 7) << 16 | (op >> 3) << 53, bits(26, 6) | bits(16, 3) | bits(53, 1),
              [("Vdata", 40, 8, 48, 0, "v"), ("Vaddr", 32, 8, 32, 0, "v"), ("Srsrc", 48, 5, 5, 0, "rs4"),
               ("Soffset8", 56, 8, 4, 0x80, "ssrc")]),
}
# FLAT's segment (bits 14-15) is part of its opcode here: three tables.
FLAT_SEGS = {"FLAT": 0, "SCRATCH": 1, "GLOBAL": 2}
# Bits some opcodes need set (LLVM rejects them without): the returning-only atomics need `glc`
# (`buffer_atomic_csub`, `global_atomic_csub`), the GWS and ordered-count DS opcodes `gds`. An
# opcode no probe finds is probed again with these set; the table records them as `one`.
RETRY = {"DS": bits(17, 1), "MUBUF": bits(14, 1), "FLAT": bits(16, 1)}


def words(n, v):
    return [v & 0xFFFFFFFF] + ([v >> 32] if n == 2 else [])


def set_field(v, f, val):
    _, lo, w, _, _, _ = f
    return (v & ~bits(lo, w)) | ((val & ((1 << w) - 1)) << lo)


def reg_number(f, val):
    cls = f[5]
    if cls == "src":
        return ("v", val - 256) if val >= 256 else ("s", val)
    if cls == "ssrc":
        return ("s", val)
    if cls == "sb2":
        return ("s", val * 2)
    if cls == "rs4":
        return ("s", val * 4)
    return (cls, val)


REG = re.compile(r"^(v|s)(?:(\d+)|\[(\d+):(\d+)\])$")


def split_text(text):
    name, _, rest = text.partition(" ")
    if not rest:
        return name, [], ""
    parts = rest.split(", ")
    last, _, mods = parts[-1].partition(" ")
    return name, parts[:-1] + [last], mods


def analyse(enc, n, fields, base, text, used):
    name, ops, mods = split_text(text)
    items = []
    for tok in ops:
        m = REG.match(tok)
        hit = None
        if m:
            file = m.group(1)
            lo = int(m.group(2) or m.group(3))
            width = 1 if m.group(2) else int(m.group(4)) - lo + 1
            for f in fields:
                if f[0] in used and f[5] != "k":
                    rf, num = reg_number(f, f[3])
                    if num == lo and (rf == file or f[5] in ("v",) and file == "s" or f[5] == "s"):
                        hit = (f[0], file, width)
        items.append(hit if hit else tok)
    return name, items, mods


def main():
    out = []
    enc_list = [(e, e, None) for e in ENC if e != "FLAT"] + [(s, "FLAT", seg) for s, seg in FLAT_SEGS.items()]
    for table, enc, seg in enc_list:
        n, nops, fixed, opmask, fields = ENC[enc]
        opbits = opmask | (bits(14, 2) if enc == "FLAT" else 0)

        def base_of(op):
            b = fixed(op)
            if seg is not None:
                b |= seg << 14
            for f in fields:
                b = set_field(b, f, f[4])
            return b
        # 1. for each opcode, the accepted encoding with the most probe fields set
        subsets = []
        for k in range(len(fields), -1, -1):
            subsets += [set(c) for c in itertools.combinations([f[0] for f in fields], k)]
        found = {}
        one = {}
        for extra in [0] + ([RETRY[enc]] if enc in RETRY else []):
            for sub in subsets:
                ops = [op for op in range(nops) if op not in found]
                if not ops:
                    break
                cases = []
                for op in ops:
                    v = base_of(op) | extra
                    for f in fields:
                        if f[0] in sub:
                            v = set_field(v, f, f[3])
                    cases.append(words(n, v))
                for op, v, r in zip(ops, cases, disassemble(cases)):
                    if r is None:
                        continue
                    # every register field set must show up as an operand, or it changed
                    # something else
                    _, items, _ = analyse(enc, n, fields, v, r, sub)
                    mapped = {it[0] for it in items if isinstance(it, tuple)}
                    if all(f[0] in mapped for f in fields if f[0] in sub and f[5] != "k"):
                        found[op] = (sub, v, r)
                        if extra:
                            one[op] = extra
        # 2. flips of every bit outside the opcode and the used fields
        entries = {}
        flips = []
        for op, (sub, v, text) in sorted(found.items()):
            vv = v[0] | (v[1] << 32 if n == 2 else 0)
            used_mask = 0
            for f in fields:
                if f[0] in sub:
                    used_mask |= bits(f[1], f[2])
            for b in range(32 * n):
                if (opbits | used_mask | one.get(op, 0)) >> b & 1:
                    continue
                flips.append((op, b, words(n, vv ^ (1 << b))))
        results = disassemble([c for _, _, c in flips]) if flips else []
        zero, ignore = {}, {}
        for (op, b, _), r in zip(flips, results):
            text = found[op][2]
            if r is None:
                zero[op] = zero.get(op, 0) | 1 << b
            elif r == text:
                ignore[op] = ignore.get(op, 0) | 1 << b
        # 3. how immediates print in each source field
        probes = []
        for op, (sub, v, text) in sorted(found.items()):
            vv = v[0] | (v[1] << 32 if n == 2 else 0)
            for f in fields:
                if f[0] in sub and f[5] in ("src", "ssrc") and f[0] != "Soffset8":
                    for val, lit in ((255, 0x3800), (248, None), (255, 0xFFFF)):
                        w = words(n, set_field(vv, f, val))
                        probes.append((op, f[0], w + ([lit] if lit is not None else [])))
        presults = disassemble([c for _, _, c in probes]) if probes else []
        kinds = {}
        for (op, fname, _), r in zip(probes, presults):
            kinds.setdefault((op, fname), []).append(r)
        styles = {}
        if enc in ("SOPP", "SOPK"):
            sf = [f for f in fields if f[0] == "Simm16"][0]
            sops = sorted(found)
            cases = [words(n, set_field(found[op][1][0], sf, val)) for op in sops for val in (0, 0x41, 0x8000)]
            rs = disassemble(cases)
            for i, op in enumerate(sops):
                last = [None if t is None else t.rsplit(" ", 1)[-1] for t in rs[3 * i:3 * i + 3]]
                full = rs[3 * i:3 * i + 3]
                if last == ["0", "65", "32768"]:
                    styles[op] = "{udec}"
                elif last == ["0x0", "0x41", "0x8000"]:
                    styles[op] = "{hex}"
                elif last == ["0", "0x41", "0x8000"]:
                    styles[op] = "{inl}"
                elif full[0] is not None and " " not in full[0] and last[1:] == ["65", "32768"]:
                    styles[op] = "{opt}"
        for op, (sub, v, text) in sorted(found.items()):
            name, items, mods = analyse(enc, n, fields, v, text, sub)
            if op in styles:
                probe = "0x1234" if enc == "SOPK" else "3"
                probe2 = "4660" if enc == "SOPK" else "0x3"
                items = [styles[op] if it in (probe, probe2) else it for it in items]
            elif enc in ("SOPP", "SOPK"):
                items = [it for it in items if isinstance(it, tuple)] + (["{special}"] if " " in text else [])
            ks = {}
            for f in fields:
                got = kinds.get((op, f[0]))
                if not got:
                    continue
                base_name, base_items, _ = split_text(text)
                def tok(t):
                    if t is None:
                        return None
                    _, its, _ = split_text(t)
                    idx = [i for i, it in enumerate(items) if isinstance(it, tuple) and it[0] == f[0]]
                    return its[idx[0]] if idx and idx[0] < len(its) else None
                ks[f[0]] = tuple(tok(t) for t in got)
            if enc == "DS":
                # An opcode with no operands prints its `gds` where the operands would be.
                items = [it for it in items if it != "gds"]
            if enc == "FLAT" and op in one:
                # A returning-only atomic: the decoder prints the returned register itself.
                items = [it for it in items if not (isinstance(it, tuple) and it[0] == "Vdst")]
            entries[op] = (name, items, mods, zero.get(op, 0), ignore.get(op, 0), ks, one.get(op, 0))
        out.append((table, enc, nops, entries))
    emit(out)


KIND = {
    ("0x3800", "0.15915494", "0xffff"): "B32",
    ("0.5", "0.15915494", "-1"): "F16",
    ("0x3800", "0x3118", "-1"): "I16",
    ("0x3800", "0.15915494309189532", "0xffff"): "B64",
}


def emit(out):
    w = sys.stdout.write
    w("// @generated by core/rdna/tools/gen_tables.py from llvm-mc-14 (gfx1030); do not edit.\n")
    w("//! Opcode tables: mnemonic, operands in printed order, bits that must be zero or one, bits ignored,\n")
    w("//! what the mnemonic says (flags) and, where the decoder does not decode an opcode, why not.\n")
    w("//! An opcode LLVM 14 decodes no word of is `None`.\n\n")
    w("use crate::table::{Field as F, File, Flags, Imm, Op, Opnd, Tok};\n\n")
    unknown = set()
    for table, enc, nops, entries in out:
        w("/// The %s opcodes (%d of %d known to LLVM 14).\n" % (table, len(entries), nops))
        w("pub(crate) static %s: [Option<Op>; %d] = [\n" % (table, nops))
        for op in range(nops):
            if op not in entries:
                w("    None, // 0x%x: llvm-mc-14 decodes no word with this opcode\n" % op)
                continue
            name, items, mods, zero, ign, ks, one = entries[op]
            parts = []
            for it in items:
                if isinstance(it, tuple):
                    f, file, width = it
                    kv = ks.get(f)
                    if kv is None:
                        k = "B64" if width == 2 else "B32"
                    else:
                        k = KIND.get(kv)
                        if k is None and all(t is not None and t.startswith("/*invalid") for t in kv):
                            k = "RegOnly"
                        if kv == ("v255", "v248", "v255"):
                            k = "Vgpr8"
                        if k is None:
                            unknown.add((table, name, f, kv))
                            k = "RegOnly"
                        if k == "B32" and width == 2:
                            k = "B64"
                    parts.append("Opnd::R(F::%s, File::%s, %d, Imm::%s)" % (f, file.upper(), width, k))
                else:
                    parts.append(tok(it))
            why = undecoded(table, name)
            w("    Some(Op { name: %s, opnds: &[%s], zero: 0x%x, one: 0x%x, ignore: 0x%x, flags: %s, undecoded: %s }), // 0x%x\n" % (
                '"%s"' % name, ", ".join(parts), zero, one, ign, flags_expr(op_flags(table, name)),
                'Some("%s")' % why if why else "None", op))
        w("];\n\n")
    from llvm_probe import disassemble as dis
    r = dis([[0xE8000000 | (f << 19) | (1 << 12), 0x80000000 | (1 << 16) | (48 << 8) | 32] for f in range(128)])
    w("/// How LLVM prints each MTBUF format value (empty: the default, not printed).\n")
    w("pub(crate) static MTBUF_FORMATS: [&str; 128] = [\n")
    for t in r:
        m = re.search(r" 0 (format:\S+) offen$", t or "")
        w('    "%s",\n' % (m.group(1) if m else ""))
    w("];\n")
    for u in sorted(unknown, key=str):
        sys.stderr.write("unknown immediate kind: %r\n" % (u,))


if __name__ == "__main__":
    if sys.argv[1:] == ["mimg"]:
        import mimg_probe
        mimg_probe.emit(sys.stdout.write)
    elif sys.argv[1:] == ["ext"]:
        import ext_probe
        ext_probe.emit(sys.stdout.write)
    else:
        main()
