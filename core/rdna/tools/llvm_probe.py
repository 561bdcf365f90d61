"""Batch disassembly through llvm-mc-14, aligned back to the words that were asked about.

Each case is a list of dwords; cases are laid one after another with six separator words
between them, and llvm-mc is run once over the lot. A case whose first dword llvm-mc rejects is
named on stderr by line and column; the printed lines are grouped by the runs of `s_code_end`
between them, one group a case (the rest of a rejected case may print as other instructions).
"""
import re
import subprocess

# Two separators taken in turn, so that a case that prints nothing still ends a group.
SENTINELS = ([0xBF9F0000] * 6, [0xBFA5000D] * 6)
SENTINEL_TEXT = ("s_code_end", "s_denorm_mode 13")
PER_LINE = 8


def _tokens(words):
    return " ".join(",".join("0x%02x" % ((w >> (8 * i)) & 0xFF) for i in range(4)) for w in words)


def _run(cases):
    stream, starts = [], []
    for i, case in enumerate(cases):
        starts.append(len(stream))
        stream += list(case) + SENTINELS[i % 2]
    lines = [stream[i:i + PER_LINE] for i in range(0, len(stream), PER_LINE)]
    proc = subprocess.run(
        ["llvm-mc-14", "-arch=amdgcn", "-mcpu=gfx1030", "-disassemble"],
        input="\n".join(_tokens(l) for l in lines) + "\n", capture_output=True, text=True)
    if proc.returncode != 0:
        # LLVM 14 crashes on a few words: the batch is halved until the word is alone.
        return "crashed"
    rejected = set()
    for m in re.finditer(r"<stdin>:(\d+):(\d+): warning: invalid instruction encoding", proc.stderr):
        rejected.add((int(m.group(1)) - 1) * PER_LINE + (int(m.group(2)) - 1) // 20)
    groups, cur, last = [], [], None
    for line in proc.stdout.splitlines()[1:]:
        t = line.strip()
        if t in SENTINEL_TEXT:
            if t != last:
                groups.append(cur)
                cur = []
            last = t
        else:
            last = None
            cur.append(t)
    if len(groups) != len(cases):
        return None
    return [None if s in rejected else (g[0] if g else None) for s, g in zip(starts, groups)]


def disassemble(cases):
    """Return, for each case, None (llvm-mc rejected its first word) or the text it printed."""
    if not cases:
        return []
    r = _run(cases)
    if r == "crashed" and len(cases) == 1:
        return [None]
    if r is not None and r != "crashed":
        return r
    if len(cases) == 1:
        return ["<unaligned>"]
    h = len(cases) // 2
    return disassemble(cases[:h]) + disassemble(cases[h:])
