"""The MIMG table: what llvm-mc-14 prints for every image opcode of gfx1030, learnt by probing.

`python3 core/rdna/tools/gen_tables.py mimg > core/rdna/src/tables_mimg.rs` (from the repository
root). For each opcode it learns the mnemonic, whether it takes a sampler, the bits that must be
zero and the bits it ignores (one flip each), how wide the data register prints for each
(d16, tfe, dmask population), and how many address registers print for each (a16, dim, NSA
dwords). LLVM's disassembler widens the data and address registers to the instruction's shape and,
where no instruction of that shape exists, prints its default widths instead (those of the variant
its decoder matched): those shapes are stored as 0, and the defaults it was seen to print, by NSA
dwords, beside them (`default`; `[0, 0]`, not decoded, where it printed none or several). The ray
intersections are decoded by hand.
"""
import re

from llvm_probe import disassemble
from table_flags import flags_expr, op_flags

BASE0 = 0xF0000000
VDATA, VADDR, SRSRC, SSAMP = 1, 0, 3, 1  # v1, v0, s[12:19], s[4:7]
NSA_WORDS = [0x14131211, 0x18171615, 0x1C1B1A19]
BVH = (0xE6, 0xE7)


def word0(op, dmask=1, dim=0, nsa=0, extra=0):
    return BASE0 | (op & 0x7F) << 18 | (op >> 7) | dmask << 8 | dim << 3 | nsa << 1 | extra


def word1(sampler, a16=0, d16=0):
    return VADDR | VDATA << 8 | SRSRC << 16 | (SSAMP << 21 if sampler else 0) | a16 << 30 | d16 << 31


def case(op, sampler, dmask=1, dim=0, nsa=0, a16=0, d16=0, extra=0):
    return [word0(op, dmask, dim, nsa, extra), word1(sampler, a16, d16)] + NSA_WORDS[:nsa]


def operands(text):
    """The vdata width and the address count of an image instruction's text."""
    name, _, rest = text.partition(" ")
    m = re.match(r"v(?:(\d+)|\[(\d+):(\d+)\]), (\[[^\]]*\]|v\d+|v\[\d+:\d+\])", rest)
    if not m:
        return None
    vw = 1 if m.group(1) else int(m.group(3)) - int(m.group(2)) + 1
    a = m.group(4)
    if a.startswith("["):
        aw = len(a.split(","))
    else:
        mm = re.match(r"v(?:(\d+)|\[(\d+):(\d+)\])", a)
        aw = 1 if mm.group(1) else int(mm.group(3)) - int(mm.group(2)) + 1
    return vw, aw


def expected_data(gather, pc, tfe, d16):
    n = 4 if gather else max(pc, 1)
    if d16:
        n = (n + 1) // 2
    return n + tfe


def probe():
    # 1. mnemonics, with and without a sampler
    ops = [op for op in range(256) if op not in BVH]
    r0 = disassemble([case(op, False) for op in ops])
    r1 = disassemble([case(op, True) for op in ops])
    info = {}
    for op, a, b in zip(ops, r0, r1):
        if b is not None and b.startswith("image_") and ", s[4:7]" in b:
            info[op] = {"name": b.split(" ")[0], "sampler": True, "text": b}
        elif a is not None and a.startswith("image_"):
            info[op] = {"name": a.split(" ")[0], "sampler": False, "text": a}
    # 2. single flips: bits that must be zero, bits ignored
    flip_bits = [6, 7, 12, 13, 14, 15, 16, 17, 25, 58, 59, 60, 61, 62, 63] + list(range(53, 58))
    flips = []
    for op, d in info.items():
        c = case(op, d["sampler"])
        v = c[0] | c[1] << 32
        for b in flip_bits:
            if d["sampler"] and 53 <= b <= 57:
                continue
            vv = v ^ (1 << b)
            flips.append((op, b, [vv & 0xFFFFFFFF, vv >> 32]))
    for (op, b, _), r in zip(flips, disassemble([c for _, _, c in flips])):
        d = info[op]
        if r is None:
            d["zero"] = d.get("zero", 0) | 1 << b
        elif r == d["text"]:
            d["ignore"] = d.get("ignore", 0) | 1 << b
    # 3. data widths by (d16, tfe, dmask population), at the first dim/a16 that decodes
    data_cases = []
    for op, d in info.items():
        d["gather"] = "gather4" in d["name"]
        for d16 in (0, 1):
            for tfe in (0, 1):
                for pc, dmask in ((1, 1), (2, 3), (3, 7), (4, 15)):
                    data_cases.append(((op, d16, tfe, pc), case(op, d["sampler"], dmask, d16=d16, extra=tfe << 16)))
    for (key, _), r in zip(data_cases, disassemble([c for _, c in data_cases])):
        op, d16, tfe, pc = key
        d = info[op]
        got = operands(r) if r else None
        ok = got is not None and got[0] == expected_data(d["gather"], pc, tfe, d16)
        d.setdefault("data", {})[(d16, tfe, pc)] = got[0] if ok else 0
        if got is not None and not ok:
            d.setdefault("fallback", {}).setdefault(0, set()).add(got)
    # 4. address counts by (a16, dim, nsa): the same at every dmask whose data width is not a fallback
    addr_cases = []
    for op, d in info.items():
        for a16 in (0, 1):
            for dim in range(8):
                for nsa in range(4):
                    for pc, dmask in ((1, 1), (2, 3), (4, 15)):
                        for tfe in (0, 1):
                            addr_cases.append(((op, a16, dim, nsa, pc, tfe),
                                               case(op, d["sampler"], dmask, dim, nsa, a16, extra=tfe << 16)))
    seen = {}
    for (key, _), r in zip(addr_cases, disassemble([c for _, c in addr_cases])):
        op, a16, dim, nsa, pc, tfe = key
        d = info[op]
        got = operands(r) if r else None
        want = d["data"].get((0, tfe, pc), 0)
        seen.setdefault((op, a16, dim, nsa), []).append((want, got))
    for (op, a16, dim, nsa), obs in seen.items():
        d = info[op]
        counts = set()
        good = True
        for want, got in obs:
            if got is None:
                good = False
                break
            if not want:
                continue  # a data shape LLVM falls back on: its address is the default too
            if got[0] != want:
                good = False
            counts.add(got[1])
        if nsa and good and counts:
            # an NSA list longer than the words carry cannot print in full
            good = max(counts) <= 1 + 4 * nsa
        d.setdefault("addr", {})[(a16, dim, nsa)] = counts.pop() if good and len(counts) == 1 else 0
    # 5. the default widths LLVM prints for a shape it has no instruction of: the widths of the
    # variant its decoder matched, the same for every such shape of an opcode and NSA count
    for (op, a16, dim, nsa), obs in seen.items():
        d = info[op]
        for want, got in obs:
            if got is not None and (not want or not d["addr"][(a16, dim, nsa)]):
                d.setdefault("fallback", {}).setdefault(nsa, set()).add(got)
    # widened registers that would run past v255 fall back too: the widest shape of each NSA
    # count, its address (or data) register placed so that it overruns by one
    over = []
    for op, d in info.items():
        for nsa in range(4):
            shapes = [(a, a16, dim) for (a16, dim, n), a in d["addr"].items() if n == nsa and a]
            if not shapes:
                continue
            a, a16, dim = max(shapes)
            c = case(op, d["sampler"], 1, dim, nsa, a16)
            if nsa == 0 and a > 1:
                c[1] = (c[1] & ~0xFF) | (257 - a)
                over.append((op, nsa, c))
            c = case(op, d["sampler"], 15, dim, nsa, a16, extra=1 << 16)
            c[1] = (c[1] & ~0xFF00) | 252 << 8
            over.append((op, nsa, c))
    for (op, nsa, _), r in zip(over, disassemble([c for _, _, c in over])):
        got = operands(r) if r else None
        if got is not None:
            info[op].setdefault("fallback", {}).setdefault(nsa, set()).add(got)
    for op, d in info.items():
        fb = d.get("fallback", {})
        d["default"] = [list(fb[nsa])[0] if len(fb.get(nsa, ())) == 1 else (0, 0) for nsa in range(4)]
    return info


def emit(w):
    info = probe()
    w("// @generated by core/rdna/tools/gen_tables.py mimg (tools/mimg_probe.py) from llvm-mc-14 (gfx1030); do not edit.\n")
    w("//! The MIMG opcodes: mnemonic, sampler, must-be-zero and ignored bits, data widths and address counts.\n\n")
    w("use crate::table::{Flags, MimgOp};\n\n")
    w("/// The MIMG opcodes other than the ray intersections (%d of 256 known to LLVM 14).\n" % len(info))
    w("pub(crate) static MIMG: [Option<MimgOp>; 256] = [\n")
    for op in range(256):
        d = info.get(op)
        if d is None:
            w("    None, // 0x%x\n" % op)
            continue
        data = [d["data"][(d16, tfe, pc)] for d16 in (0, 1) for tfe in (0, 1) for pc in (1, 2, 3, 4)]
        addr = [d["addr"][(a16, dim, nsa)] for a16 in (0, 1) for dim in range(8) for nsa in range(4)]
        w("    Some(MimgOp { name: %s, sampler: %s, zero: 0x%x, ignore: 0x%x, flags: %s, data: %s, addr: %s, default: %s }), // 0x%x\n" % (
            '"%s"' % d["name"], "true" if d["sampler"] else "false", d.get("zero", 0), d.get("ignore", 0),
            flags_expr(op_flags("MIMG", d["name"])),
            "[%s]" % ", ".join(map(str, data)), "[%s]" % ", ".join(map(str, addr)),
            "[%s]" % ", ".join("[%d, %d]" % tuple(x) for x in d["default"]), op))
    w("];\n")
