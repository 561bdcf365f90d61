#!/usr/bin/env python3
"""Assemble tools/ray_traversal.s (offset: instruction lines) with llvm-mc-14 into hex bytes.

Gaps between the given offsets are filled with `s_nop 0`; an instruction that would run into
the next offset is an error. Prints the code as one hex string (the sample's `code`).
"""
import subprocess
import sys

NOP = bytes([0x00, 0x00, 0x80, 0xBF])


def main(path):
    lines = []
    for line in open(path):
        line = line.strip()
        if not line or line.startswith("//"):
            continue
        off, asm = line.split(":", 1)
        lines.append((int(off, 16), asm.strip()))
    out = subprocess.run(["llvm-mc-14", "-arch=amdgcn", "-mcpu=gfx1030", "-show-encoding"],
                         input="\n".join(a for _, a in lines) + "\n", capture_output=True, text=True, check=True)
    encs = []
    for l in out.stdout.splitlines():
        if "; encoding: [" in l:
            enc = l.split("; encoding: [", 1)[1].rstrip("]")
            encs.append(bytes(int(b, 16) for b in enc.split(",")))
    assert len(encs) == len(lines), out.stderr
    code = bytearray()
    for (off, asm), enc in zip(lines, encs):
        if len(code) > off:
            sys.exit("%s at 0x%x overlaps the previous instruction (ends at 0x%x)" % (asm, off, len(code)))
        while len(code) < off:
            code += NOP
        code += enc
    print(code.hex())


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "core/rdna/tools/ray_traversal.s")
