//! `disasm`: a listing of a sample's programs (`dispatchscope disasm FILE [--program ADDR]`),
//! or raw code decoded from its first byte (`dispatchscope disasm --raw CODE.bin`), one
//! instruction a line exactly as LLVM 14's `llvm-mc -mcpu=gfx1030 -disassemble` prints it.
//!
//! The decoding is `dispatchscope_rdna`'s; this module reads the file, picks the program and
//! prints. An unreadable file, a file with no code, or a program the file does not carry is a
//! [`BadInput`] (exit status 2); an undecodable word is a `.long 0x…` line, its reason on stderr.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::load::{self, BadInput};
use dispatchscope_rdna::{Kind, decode};

/// The flags of `disasm`.
#[derive(Debug, clap::Args)]
pub struct DisasmArgs {
    /// A sample or capture whose programs to list; with `--raw`, a file of raw little-endian code.
    pub file: PathBuf,
    /// Decode FILE as raw code from its first byte: one instruction a line, nothing else on it.
    #[arg(long)]
    pub raw: bool,
    /// List only the program at this address (`0x…` or decimal).
    #[arg(long, value_parser = parse_address, conflicts_with = "raw")]
    pub program: Option<u64>,
}

/// Reads `0x…` or a decimal number.
fn parse_address(s: &str) -> Result<u64, String> {
    let parsed = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    };
    parsed.map_err(|_| format!("{s:?} is not an address (0x… or decimal)"))
}

/// Runs `disasm`.
pub fn disasm_cmd(args: &DisasmArgs) -> anyhow::Result<()> {
    let text = if args.raw {
        raw(&args.file)?
    } else {
        listing(&args.file, args.program)?
    };
    crate::out!("{text}")?;
    Ok(())
}

/// The raw decode of a file: one line an instruction; reasons for undecodable words on stderr.
fn raw(path: &Path) -> anyhow::Result<String> {
    let code = std::fs::read(path).map_err(|e| BadInput(format!("{}: {e}", path.display())))?;
    if code.is_empty() {
        return Err(BadInput(format!(
            "{}: the file is empty: there is no code to decode",
            path.display()
        ))
        .into());
    }
    let mut out = String::with_capacity(code.len() * 8);
    for inst in decode(&code, 0) {
        if let Kind::Unknown { reason } = &inst.kind {
            eprintln!(
                "dispatchscope: warning: {}: offset {:#x}: {reason}",
                path.display(),
                inst.pc
            );
        }
        out.push_str(&inst.text);
        out.push('\n');
    }
    Ok(out)
}

/// The listing of a session file's programs (or of the one at `only`), each line its pc, its
/// text and how many of the session's accesses name that pc.
fn listing(path: &Path, only: Option<u64>) -> anyhow::Result<String> {
    let loaded = load::load(path)?;
    let sample = &loaded.sample;
    if sample.programs.is_empty() {
        return Err(BadInput(format!(
            "{}: carries no program code (a sample's \"programs\" field)",
            path.display()
        ))
        .into());
    }
    let programs: Vec<_> = match only {
        None => sample.programs.iter().collect(),
        Some(addr) => {
            let found: Vec<_> = sample
                .programs
                .iter()
                .filter(|p| p.address == addr)
                .collect();
            if found.is_empty() {
                let carried: Vec<String> = sample
                    .programs
                    .iter()
                    .map(|p| format!("{:#x}", p.address))
                    .collect();
                return Err(BadInput(format!(
                    "{}: no program at {addr:#x}; it carries {}",
                    path.display(),
                    carried.join(", ")
                ))
                .into());
            }
            found
        }
    };
    let mut accesses: HashMap<(u64, u64), usize> = HashMap::new();
    for step in &sample.steps {
        if let dispatchscope_formats::sample::Step::Dispatch(d) = step {
            for a in &d.accesses {
                *accesses.entry((d.program, a.pc)).or_default() += 1;
            }
        }
    }
    let mut out = String::new();
    for p in programs {
        let _ = writeln!(out, "program {:#x} ({} bytes)", p.address, p.code.len());
        for inst in decode(&p.code, p.address) {
            let _ = write!(out, "  {:#014x}  {}", inst.pc, inst.text);
            if let Some(n) = accesses.get(&(p.address, inst.pc)) {
                let _ = write!(out, "    ; {n} access{}", if *n == 1 { "" } else { "es" });
            }
            if let Kind::Unknown { reason } = &inst.kind {
                let _ = write!(out, "    ; {reason}");
            }
            out.push('\n');
        }
    }
    Ok(out)
}

/// The decoded instruction at `pc` in whichever of `programs` holds it, or `None` when no
/// program the session carries covers `pc`.
pub fn instruction_at(
    programs: &[dispatchscope_formats::sample::Program],
    pc: u64,
) -> Option<dispatchscope_rdna::Instruction> {
    let p = programs
        .iter()
        .find(|p| pc >= p.address && pc - p.address < p.code.len() as u64)?;
    let offset = usize::try_from(pc - p.address).ok()?;
    Some(dispatchscope_rdna::decode_one(p.code.get(offset..)?, pc))
}

/// `explain`'s text with the instruction beside each escape: after every `ESCAPE` line whose pc
/// lies in a program the session carries, a line `at 0x…: <instruction as LLVM prints it>`.
/// Lines are otherwise unchanged, so the text stays what `dispatchscope_analysis::explain` wrote.
pub fn with_instructions(
    text: &str,
    programs: &[dispatchscope_formats::sample::Program],
) -> String {
    if programs.is_empty() {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for line in text.split_inclusive('\n') {
        out.push_str(line);
        let trimmed = line.trim_start();
        if !trimmed.starts_with("ESCAPE") {
            continue;
        }
        let Some(pc) = escape_pc(trimmed) else {
            continue;
        };
        if let Some(inst) = instruction_at(programs, pc) {
            if !line.ends_with('\n') {
                out.push('\n');
            }
            let indent = line.len() - trimmed.len();
            let _ = writeln!(out, "{:indent$}  at {pc:#x}: {}", "", inst.text);
        }
    }
    out
}

/// The `pc 0x…` an escape line names.
fn escape_pc(line: &str) -> Option<u64> {
    let at = line.find("pc 0x")?;
    let hex: String = line[at + 5..]
        .chars()
        .take_while(char::is_ascii_hexdigit)
        .collect();
    u64::from_str_radix(&hex, 16).ok()
}
