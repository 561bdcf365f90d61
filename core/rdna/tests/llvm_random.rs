//! The property test against LLVM: random words of each encoding (its fixed bits set, the rest
//! random at varying densities, a random literal after), disassembled by llvm-mc-14 in one batch
//! per encoding and by this decoder, compared as text. Prints, per encoding, how many words LLVM
//! decoded, how many agree, how many this decoder marks unsupported, and how many LLVM rejected.
//! `VOP1-ext`, `VOP2-ext` and `VOPC-ext` are those encodings' DPP16, DPP8 and SDWA forms.
//! Fails on any disagreement, and when llvm-mc-14 is missing.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test")]

mod oracle;

use dispatchscope_rdna::{Kind, Unknown, decode_one};
use oracle::{Oracle, disassemble, is_separator};

/// A small deterministic generator (splitmix64), so a failure repeats with its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn u32(&mut self) -> u32 {
        self.next() as u32
    }
    /// Random bits at a density of 1/2, 1/4 or 1/8, chosen at random.
    fn sparse(&mut self) -> u32 {
        match self.next() % 3 {
            0 => self.u32(),
            1 => self.u32() & self.u32(),
            _ => self.u32() & self.u32() & self.u32(),
        }
    }
    fn literal(&mut self) -> u32 {
        const POOL: [u32; 10] = [
            0x3f00_0000,
            0x3800,
            0xffff,
            0x3e22_f983,
            0x3118,
            0x40,
            0x41,
            0xffff_fff0,
            0x3fe0_0000,
            0x1_0000,
        ];
        match self.next() % 3 {
            0 => POOL[(self.next() % POOL.len() as u64) as usize],
            _ => self.u32(),
        }
    }
}

/// The src0 values that name an extended form: DPP16, DPP8, DPP8 with `fi`, SDWA.
fn ext_src0(r: &mut Rng) -> u32 {
    [0xfa, 0xe9, 0xea, 0xf9][(r.next() % 4) as usize]
}

/// One encoding: its name, the first dword's fixed bits and free bits, its length in dwords.
struct Encoding {
    name: &'static str,
    fixed: fn(&mut Rng) -> u32,
    free: u32,
    dwords: usize,
}

const ENCODINGS: &[Encoding] = &[
    Encoding {
        name: "SOP2",
        fixed: |r| 0x8000_0000 | ((r.u32() % 0x60) << 23),
        free: 0x007f_ffff,
        dwords: 1,
    },
    Encoding {
        name: "SOPK",
        fixed: |r| 0xb000_0000 | ((r.u32() % 0x1d) << 23),
        free: 0x007f_ffff,
        dwords: 1,
    },
    Encoding {
        name: "SOP1",
        fixed: |_| 0xbe80_0000,
        free: 0x007f_ffff,
        dwords: 1,
    },
    Encoding {
        name: "SOPC",
        fixed: |_| 0xbf00_0000,
        free: 0x007f_ffff,
        dwords: 1,
    },
    Encoding {
        name: "SOPP",
        fixed: |_| 0xbf80_0000,
        free: 0x007f_ffff,
        dwords: 1,
    },
    Encoding {
        name: "SMEM",
        fixed: |_| 0xf400_0000,
        free: 0x03ff_ffff,
        dwords: 2,
    },
    Encoding {
        name: "VOP1",
        fixed: |_| 0x7e00_0000,
        free: 0x01ff_ffff,
        dwords: 1,
    },
    Encoding {
        name: "VOP2",
        fixed: |r| (r.u32() % 0x3e) << 25,
        free: 0x01ff_ffff,
        dwords: 1,
    },
    Encoding {
        name: "VOPC",
        fixed: |_| 0x7c00_0000,
        free: 0x01ff_ffff,
        dwords: 1,
    },
    Encoding {
        name: "VOP1-ext",
        fixed: |r| 0x7e00_0000 | ext_src0(r),
        free: 0x01ff_fe00,
        dwords: 2,
    },
    Encoding {
        name: "VOP2-ext",
        fixed: |r| ((r.u32() % 0x3e) << 25) | ext_src0(r),
        free: 0x01ff_fe00,
        dwords: 2,
    },
    Encoding {
        name: "VOPC-ext",
        fixed: |r| 0x7c00_0000 | ext_src0(r),
        free: 0x01ff_fe00,
        dwords: 2,
    },
    Encoding {
        name: "VOP3",
        fixed: |_| 0xd400_0000,
        free: 0x03ff_ffff,
        dwords: 2,
    },
    Encoding {
        name: "VOP3P",
        fixed: |_| 0xcc00_0000,
        free: 0x00ff_ffff,
        dwords: 2,
    },
    Encoding {
        name: "DS",
        fixed: |_| 0xd800_0000,
        free: 0x03ff_ffff,
        dwords: 2,
    },
    Encoding {
        name: "FLAT",
        fixed: |_| 0xdc00_0000,
        free: 0x03ff_3fff,
        dwords: 2,
    },
    Encoding {
        name: "SCRATCH",
        fixed: |_| 0xdc00_4000,
        free: 0x03ff_3fff,
        dwords: 2,
    },
    Encoding {
        name: "GLOBAL",
        fixed: |_| 0xdc00_8000,
        free: 0x03ff_3fff,
        dwords: 2,
    },
    Encoding {
        name: "MUBUF",
        fixed: |_| 0xe000_0000,
        free: 0x03ff_ffff,
        dwords: 2,
    },
    Encoding {
        name: "MTBUF",
        fixed: |_| 0xe800_0000,
        free: 0x03ff_ffff,
        dwords: 2,
    },
    Encoding {
        name: "VINTRP",
        fixed: |_| 0xc800_0000,
        free: 0x03ff_ffff,
        dwords: 1,
    },
    Encoding {
        name: "EXP",
        fixed: |_| 0xf800_0000,
        free: 0x03ff_ffff,
        dwords: 2,
    },
    Encoding {
        name: "MIMG",
        fixed: |r| {
            if r.next() % 2 == 0 {
                0xf000_0000
            } else {
                0xf000_8f01 | ((0x66 + (r.u32() & 1)) << 18)
            }
        },
        free: 0x03ff_ffff,
        dwords: 2,
    },
];

#[derive(Default, Debug)]
struct Counts {
    tested: usize,
    agree: usize,
    unsupported: usize,
    llvm_invalid: usize,
    rejected_both: usize,
    llvm_crashed: usize,
    disagree: Vec<String>,
}

fn cases_per_encoding() -> usize {
    std::env::var("RDNA_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1200)
}

fn seed() -> u64 {
    std::env::var("RDNA_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_0017u64)
}

/// The random cases of every encoding (first dword, more, a literal), and each one's encoding.
fn generate(seed: u64) -> (Vec<Vec<u32>>, Vec<usize>) {
    let mut rng = Rng(seed);
    let mut all_cases = Vec::new();
    let mut owner = Vec::new();
    for (e, enc) in ENCODINGS.iter().enumerate() {
        for _ in 0..cases_per_encoding() {
            let w0 = (enc.fixed)(&mut rng) | (rng.sparse() & enc.free);
            if is_separator(w0) {
                continue;
            }
            let mut w0 = w0;
            let mut case = vec![w0];
            for _ in 1..enc.dwords {
                case.push(rng.sparse());
            }
            // Bias towards words LLVM takes: no scalar address for FLAT half the time, and VOP3
            // without modifiers (or without a third source) half the time.
            match enc.name {
                "FLAT" | "SCRATCH" | "GLOBAL" if rng.next().is_multiple_of(2) => {
                    case[1] = (case[1] & !(0x7f << 16)) | (0x7d << 16)
                }
                "VOP3" if rng.next().is_multiple_of(2) => {
                    w0 &= !0xff00;
                    case[0] = w0;
                    case[1] &= !(0x1f << 27);
                    if rng.next().is_multiple_of(2) {
                        case[1] &= !(0x1ff << 18);
                    }
                }
                _ => {}
            }
            case.push(rng.literal());
            if enc.name == "MIMG" {
                case.extend([rng.u32(), rng.u32()]);
            }
            all_cases.push(case);
            owner.push(e);
        }
    }
    (all_cases, owner)
}

#[test]
fn random_words_agree_with_llvm() {
    let seed = seed();
    let (all_cases, owner) = generate(seed);
    let oracle = disassemble(&all_cases);
    let mut counts: Vec<Counts> = ENCODINGS.iter().map(|_| Counts::default()).collect();
    for ((case, &e), llvm) in all_cases.iter().zip(&owner).zip(oracle) {
        let bytes: Vec<u8> = case.iter().flat_map(|w| w.to_le_bytes()).collect();
        let ours = decode_one(&bytes, 0);
        let c = &mut counts[e];
        match llvm {
            Oracle::Crashed => {
                c.llvm_crashed += 1;
                eprintln!("llvm-mc-14 crashes on {case:08x?}; ours `{}`", ours.text);
            }
            Oracle::Rejected => {
                if ours.is_ok() {
                    c.disagree
                        .push(format!("{case:08x?}: llvm rejects, ours `{}`", ours.text));
                } else {
                    c.rejected_both += 1;
                }
            }
            Oracle::Text(t) if t.contains("/*") => {
                c.llvm_invalid += 1;
                if ours.is_ok() {
                    c.disagree.push(format!(
                        "{case:08x?}: llvm `{t}` (invalid operand), ours `{}`",
                        ours.text
                    ));
                }
            }
            Oracle::Text(t) => {
                c.tested += 1;
                match &ours.kind {
                    Kind::Ok if ours.text == t => c.agree += 1,
                    Kind::Unknown {
                        reason: reason @ (Unknown::Unsupported { .. } | Unknown::Opcode { .. }),
                    } => {
                        c.unsupported += 1;
                        if std::env::var_os("RDNA_SHOW_UNSUPPORTED").is_some() {
                            println!("{}: llvm `{t}`, ours: {reason}", ENCODINGS[e].name);
                        }
                    }
                    _ => c.disagree.push(format!(
                        "{case:08x?}: llvm `{t}`, ours `{}` ({:?})",
                        ours.text, ours.kind
                    )),
                }
            }
        }
    }
    println!(
        "{:<8} {:>7} {:>7} {:>11} {:>13} {:>13} {:>12} {:>9}",
        "encoding",
        "tested",
        "agree",
        "unsupported",
        "llvm-invalid",
        "both-reject",
        "llvm-crashed",
        "disagree"
    );
    let mut failures = Vec::new();
    for (enc, c) in ENCODINGS.iter().zip(&counts) {
        println!(
            "{:<8} {:>7} {:>7} {:>11} {:>13} {:>13} {:>12} {:>9}",
            enc.name,
            c.tested,
            c.agree,
            c.unsupported,
            c.llvm_invalid,
            c.rejected_both,
            c.llvm_crashed,
            c.disagree.len()
        );
        failures.extend(
            c.disagree
                .iter()
                .take(15)
                .map(|d| format!("{}: {d}", enc.name)),
        );
    }
    assert!(
        failures.is_empty(),
        "disagreements with llvm-mc-14 (seed {seed:#x}):\n{}",
        failures.join("\n")
    );
}

/// The listing test: every random case LLVM decodes, cut to the length this decoder gives it and
/// laid one after another in a shuffled stream of every encoding, disassembled whole by llvm-mc-14
/// and by this decoder. Line for line, each of this decoder's lines is LLVM's line at the same
/// place, or a `.long` where LLVM rejected the word (a warning, no line): one instruction taken
/// at the wrong length shifts every line after it. Prints how many lines agree.
#[test]
fn a_random_stream_lists_line_for_line_as_llvm_does() {
    let seed = seed();
    let (all_cases, owner) = generate(seed);
    let oracle = disassemble(&all_cases);
    let mut pieces: Vec<(usize, Vec<u32>)> = Vec::new();
    for ((case, &e), llvm) in all_cases.iter().zip(&owner).zip(oracle) {
        let Oracle::Text(t) = llvm else {
            continue;
        };
        let bytes: Vec<u8> = case.iter().flat_map(|w| w.to_le_bytes()).collect();
        // A v_nop with a DPP src0 whose DPP dword was rejected is one dword here, but takes the
        // next piece's first dword when that one reads as a DPP dword (in LLVM as here).
        let dpp_nop = t == "v_nop" && matches!(case[0] & 0x1ff, 0xe9 | 0xea | 0xfa);
        if t.contains("/*") || dpp_nop {
            continue;
        }
        let n = usize::from(decode_one(&bytes, 0).len) / 4;
        pieces.push((e, case[..n.clamp(1, case.len())].to_vec()));
    }
    // A deterministic shuffle, so that every encoding follows every other.
    let mut rng = Rng(seed ^ 0x5717_ea11);
    for i in (1..pieces.len()).rev() {
        let j = (rng.next() % (i as u64 + 1)) as usize;
        pieces.swap(i, j);
    }
    let stream: Vec<u32> = pieces.iter().flat_map(|(_, p)| p.iter().copied()).collect();
    let (llvm, rejected) = oracle::disassemble_stream(&stream);
    let bytes: Vec<u8> = stream.iter().flat_map(|w| w.to_le_bytes()).collect();
    let ours: Vec<_> = dispatchscope_rdna::decode(&bytes, 0).collect();
    let piece_at: std::collections::HashMap<u64, usize> = pieces
        .iter()
        .scan(0u64, |pc, (e, p)| {
            let at = *pc;
            *pc += 4 * p.len() as u64;
            Some((at, *e))
        })
        .collect();
    let mut llvm_lines = llvm.iter();
    let mut agree = 0usize;
    let mut first_difference = None;
    for inst in &ours {
        let enc = ENCODINGS[piece_at.get(&inst.pc).copied().unwrap_or(0)].name;
        let llvm_line = if rejected.contains(&((inst.pc / 4) as usize)) {
            None
        } else {
            llvm_lines.next()
        };
        match llvm_line {
            Some(l) if *l == inst.text => agree += 1,
            None if !inst.is_ok() => agree += 1,
            Some(_) if !inst.is_ok() => {}
            other => {
                first_difference.get_or_insert(format!(
                    "pc {:#x} ({enc}, {} piece): llvm {other:?}, ours `{}`",
                    inst.pc,
                    if piece_at.contains_key(&inst.pc) {
                        "a"
                    } else {
                        "inside a"
                    },
                    inst.text
                ));
            }
        }
    }
    let left = llvm_lines.count();
    println!(
        "stream of {} instructions ({} dwords): llvm {} lines and {} rejected words, ours {} lines, \
         {agree} identical or both undecoded ({:.1} %)",
        pieces.len(),
        stream.len(),
        llvm.len(),
        rejected.len(),
        ours.len(),
        100.0 * agree as f64 / ours.len().max(1) as f64
    );
    assert!(
        first_difference.is_none() && left == 0,
        "seed {seed:#x}: {} LLVM lines left over; first difference: {}",
        left,
        first_difference.unwrap_or_default()
    );
}
