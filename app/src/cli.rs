//! The command line: `explain`, `convert`, and what the app prints without a window.
//!
//! Exit status: 0 when a file was explained (refusals are findings, not failures); 2 for bad
//! input, with a message naming the file, the line and column or byte offset, and what was wrong.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use dispatchscope_core::explain::{Detail, explain};
use dispatchscope_core::input::DeviceLimits;
use dispatchscope_core::report::{DispatchReport, SCHEMA};
use dispatchscope_core::sample::Sample;

/// dispatchscope: a debugger for a console emulator's GPU compute dispatches.
#[derive(Debug, Parser)]
#[command(name = "dispatchscope", version, about)]
pub struct Cli {
    /// What to do; with none, open the debugger window (on FILE, or on the shipped samples).
    #[command(subcommand)]
    pub command: Option<Command>,
    /// A sample or capture to open in the debugger.
    pub files: Vec<PathBuf>,
}

/// A subcommand.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Explain every dispatch of a sample: modes, sets, refusals, mappings, table, escapes.
    Explain(ExplainArgs),
}

/// `explain`'s arguments.
#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The sample (`.json`) to explain.
    pub file: PathBuf,
    /// Explain only dispatch N (0-based).
    #[arg(long)]
    pub dispatch: Option<u64>,
    /// Print the report schema (JSON) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Re-plan against another minStorageBufferOffsetAlignment (e.g. 256 or 0x100).
    #[arg(long, value_parser = parse_number)]
    pub min_storage_buffer_offset_alignment: Option<u64>,
    /// Re-plan against another maxStorageBufferRange.
    #[arg(long, value_parser = parse_number)]
    pub max_storage_buffer_range: Option<u64>,
    /// Print every access, not the first 16 of each dispatch.
    #[arg(long)]
    pub all_accesses: bool,
}

fn parse_number(s: &str) -> Result<u64, String> {
    dispatchscope_core::addr::parse_u64(s).ok_or_else(|| format!("{s:?} is not a number (decimal or 0x…)"))
}

/// An error that is the user's input, not ours: exit status 2.
#[derive(Debug)]
pub struct BadInput(pub String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

/// Reads and parses a sample, naming the file in any error.
pub fn load_sample(path: &Path) -> anyhow::Result<Sample> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| BadInput(format!("{}: cannot read: {e}", path.display())))?;
    Sample::from_json(&text).map_err(|e| BadInput(format!("{}: {e}", path.display())).into())
}

/// Runs a sample on the CPU reference with optional limit overrides.
pub fn run_sample(sample: &Sample, path: &Path, limits: DeviceLimits) -> anyhow::Result<Vec<DispatchReport>> {
    sample
        .run_on(limits, dispatchscope_core::CpuBackend::new())
        .map_err(|e| BadInput(format!("{}: {e}", path.display())).into())
}

/// `dispatchscope explain`.
pub fn explain_cmd(args: &ExplainArgs) -> anyhow::Result<()> {
    let sample = load_sample(&args.file)?;
    let mut limits = sample.device.clone();
    if let Some(a) = args.min_storage_buffer_offset_alignment {
        if !a.is_power_of_two() || a > 256 {
            return Err(BadInput(format!(
                "--min-storage-buffer-offset-alignment {a:#x}: Vulkan requires a power of two of at most 256"
            ))
            .into());
        }
        limits.min_storage_buffer_offset_alignment = a;
    }
    if let Some(m) = args.max_storage_buffer_range {
        limits.max_storage_buffer_range = m;
    }
    let reports = run_sample(&sample, &args.file, limits)?;
    let chosen: Vec<&DispatchReport> = match args.dispatch {
        Some(n) => vec![reports.iter().find(|r| r.index == n).ok_or_else(|| {
            BadInput(format!(
                "{}: --dispatch {n}, but the sample has {} dispatches (0..{})",
                args.file.display(),
                reports.len(),
                reports.len().saturating_sub(1)
            ))
        })?],
        None => reports.iter().collect(),
    };
    if args.json {
        let doc = serde_json::json!({
            "schema": SCHEMA,
            "file": args.file.display().to_string(),
            "title": sample.title,
            "dispatches": chosen,
        });
        println!("{}", serde_json::to_string_pretty(&doc).context("serialising the report")?);
    } else {
        let detail = Detail {
            max_accesses: if args.all_accesses { usize::MAX } else { 16 },
        };
        println!("{} — {}", args.file.display(), sample.title);
        for r in chosen {
            println!();
            print!("{}", explain(r, detail));
        }
    }
    Ok(())
}

/// The shipped samples, built into the binary: the embedded default.
pub const EMBEDDED: &[(&str, &str)] = &[
    ("run305-overlap.json", include_str!("../../samples/run305-overlap.json")),
    ("run305-inside.json", include_str!("../../samples/run305-inside.json")),
    ("run305-d951.json", include_str!("../../samples/run305-d951.json")),
    ("run335-readable-run.json", include_str!("../../samples/run335-readable-run.json")),
    ("ray-traversal.json", include_str!("../../samples/ray-traversal.json")),
];

/// No subcommand: explain the embedded default (the window comes with the app).
pub fn default_cmd(files: &[PathBuf]) -> anyhow::Result<()> {
    if let Some(first) = files.first() {
        return explain_cmd(&ExplainArgs {
            file: first.clone(),
            dispatch: None,
            json: false,
            min_storage_buffer_offset_alignment: None,
            max_storage_buffer_range: None,
            all_accesses: false,
        });
    }
    for (name, text) in EMBEDDED {
        let sample = Sample::from_json(text).with_context(|| format!("embedded sample {name}"))?;
        let reports = sample.run().with_context(|| format!("embedded sample {name}"))?;
        println!("{name} — {}", sample.title);
        for r in &reports {
            println!();
            print!("{}", explain(r, Detail::default()));
        }
        println!();
    }
    Ok(())
}
