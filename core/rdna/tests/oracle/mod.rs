//! llvm-mc-14 as the oracle: batch disassembly aligned back to the cases asked about, and
//! assembly to bytes. A missing llvm-mc-14 fails the test that asks (it never skips).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    dead_code,
    reason = "test harness"
)]

use std::io::Write as _;
use std::process::{Command, Stdio};

/// The two separators laid between cases in turn (six dwords each), and how llvm-mc prints them.
const SEPARATORS: [(u32, &str); 2] = [
    (0xbf9f_0000, "s_code_end"),
    (0xbfa5_000d, "s_denorm_mode 13"),
];
const SEPARATOR_DWORDS: usize = 6;
const PER_LINE: usize = 8;

/// Whether a dword is one of the separators (a case must not start with one).
pub fn is_separator(w: u32) -> bool {
    SEPARATORS.iter().any(|&(s, _)| s == w)
}

/// Runs llvm-mc-14 over `input`; `None` when it crashed (LLVM 14 aborts on some words).
fn try_llvm_mc(args: &[&str], input: &str) -> Option<(String, String)> {
    let mut child = Command::new("llvm-mc-14")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("llvm-mc-14 is the oracle of these tests and must be installed (apt-get install llvm-14)");
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_owned();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()).unwrap());
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    if !out.status.success() {
        return None;
    }
    Some((
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    ))
}

fn run_llvm_mc(args: &[&str], input: &str) -> (String, String) {
    try_llvm_mc(args, input).expect("llvm-mc-14 failed")
}

/// What llvm-mc made of one case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Oracle {
    /// It rejected the case's first dword ("invalid instruction encoding").
    Rejected,
    /// It printed this text for the case.
    Text(String),
    /// It crashed on this case alone (an LLVM 14 bug; nothing to compare with).
    Crashed,
}

/// Why a batch gave no answer.
enum Failed {
    Crashed,
    Unaligned,
}

fn run(cases: &[Vec<u32>]) -> Result<Vec<Oracle>, Failed> {
    let mut stream = Vec::new();
    let mut starts = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        starts.push(stream.len());
        stream.extend_from_slice(case);
        stream.extend(std::iter::repeat_n(SEPARATORS[i % 2].0, SEPARATOR_DWORDS));
    }
    let mut input = String::with_capacity(stream.len() * 20);
    for line in stream.chunks(PER_LINE) {
        for (j, w) in line.iter().enumerate() {
            if j > 0 {
                input.push(' ');
            }
            let b = w.to_le_bytes();
            input.push_str(&format!(
                "0x{:02x},0x{:02x},0x{:02x},0x{:02x}",
                b[0], b[1], b[2], b[3]
            ));
        }
        input.push('\n');
    }
    let (stdout, stderr) = try_llvm_mc(&["-arch=amdgcn", "-mcpu=gfx1030", "-disassemble"], &input)
        .ok_or(Failed::Crashed)?;
    let mut rejected = std::collections::HashSet::new();
    for line in stderr.lines() {
        let Some(rest) = line.strip_prefix("<stdin>:") else {
            continue;
        };
        if !rest.ends_with("warning: invalid instruction encoding") {
            continue;
        }
        let mut parts = rest.split(':');
        let l: usize = parts.next().unwrap().parse().unwrap();
        let c: usize = parts.next().unwrap().parse().unwrap();
        rejected.insert((l - 1) * PER_LINE + (c - 1) / 20);
    }
    let mut groups: Vec<Vec<String>> = Vec::new();
    let mut cur = Vec::new();
    let mut last: Option<&str> = None;
    for line in stdout.lines().skip(1) {
        let t = line.trim();
        if let Some(&(_, sep)) = SEPARATORS.iter().find(|&&(_, s)| s == t) {
            if last != Some(sep) {
                groups.push(std::mem::take(&mut cur));
            }
            last = Some(sep);
        } else {
            last = None;
            cur.push(t.to_owned());
        }
    }
    if groups.len() != cases.len() {
        return Err(Failed::Unaligned);
    }
    Ok(starts
        .iter()
        .zip(groups)
        .map(|(s, g)| match g.into_iter().next() {
            Some(t) if !rejected.contains(s) => Oracle::Text(t),
            _ => Oracle::Rejected,
        })
        .collect())
}

/// Disassembles every case (a list of dwords) in as few llvm-mc runs as alignment allows.
pub fn disassemble(cases: &[Vec<u32>]) -> Vec<Oracle> {
    if cases.is_empty() {
        return Vec::new();
    }
    match run(cases) {
        Ok(r) => return r,
        Err(Failed::Crashed) if cases.len() == 1 => return vec![Oracle::Crashed],
        Err(Failed::Unaligned) if cases.len() == 1 => panic!(
            "llvm-mc's output for case {:08x?} could not be aligned",
            cases[0]
        ),
        Err(_) => {}
    }
    let (a, b) = cases.split_at(cases.len() / 2);
    let mut r = disassemble(a);
    r.extend(disassemble(b));
    r
}

/// Disassembles one stream of dwords whole, as a listing: the lines llvm-mc-14 prints, one an
/// instruction, and the indices of the dwords it rejected (each prints no line, a warning on
/// stderr, and LLVM goes on at the next dword). Panics when llvm-mc-14 crashes.
pub fn disassemble_stream(words: &[u32]) -> (Vec<String>, std::collections::HashSet<usize>) {
    let mut input = String::with_capacity(words.len() * 20);
    for line in words.chunks(PER_LINE) {
        for (j, w) in line.iter().enumerate() {
            if j > 0 {
                input.push(' ');
            }
            let b = w.to_le_bytes();
            input.push_str(&format!(
                "0x{:02x},0x{:02x},0x{:02x},0x{:02x}",
                b[0], b[1], b[2], b[3]
            ));
        }
        input.push('\n');
    }
    let (stdout, stderr) = run_llvm_mc(&["-arch=amdgcn", "-mcpu=gfx1030", "-disassemble"], &input);
    let mut rejected = std::collections::HashSet::new();
    for line in stderr.lines() {
        let Some(rest) = line.strip_prefix("<stdin>:") else {
            continue;
        };
        if !rest.ends_with("warning: invalid instruction encoding") {
            continue;
        }
        let mut parts = rest.split(':');
        let l: usize = parts.next().unwrap().parse().unwrap();
        let c: usize = parts.next().unwrap().parse().unwrap();
        rejected.insert((l - 1) * PER_LINE + (c - 1) / 20);
    }
    let lines = stdout
        .lines()
        .skip(1)
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect();
    (lines, rejected)
}

/// Assembles `source` (one instruction a line) with `-show-encoding` and returns each line's bytes.
pub fn assemble(source: &str) -> Vec<(String, Vec<u8>)> {
    let (stdout, stderr) =
        run_llvm_mc(&["-arch=amdgcn", "-mcpu=gfx1030", "-show-encoding"], source);
    assert!(
        !stderr.contains("error"),
        "llvm-mc-14 could not assemble the corpus:\n{stderr}"
    );
    let mut out = Vec::new();
    for line in stdout.lines() {
        let Some((text, enc)) = line.split_once("; encoding: [") else {
            continue;
        };
        let bytes = enc
            .trim_end_matches(']')
            .split(',')
            .map(|b| u8::from_str_radix(b.trim().trim_start_matches("0x"), 16).unwrap())
            .collect();
        out.push((text.trim().to_owned(), bytes));
    }
    out
}
