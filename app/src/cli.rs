//! The file subcommands: `explain`, `convert` and `generate`, and what the app prints without a window.
//!
//! Exit status: 0 when a file was explained (refusals are findings, not failures); 2 for bad
//! input, with a message naming the file, the line and column or byte offset, and what was wrong.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use dispatchscope_core::explain::{Detail, explain};
use dispatchscope_core::report::{DispatchReport, SCHEMA};
use dispatchscope_formats::session::{self, Opened};

use crate::load::{BackendChoice, BadInput, load, run_sample};

/// `generate`'s arguments.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// Where to write: `.json` writes a sample, anything else a capture.
    pub output: PathBuf,
    /// The seed; the same seed makes the same sample.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Dispatches.
    #[arg(long, default_value_t = 16)]
    pub dispatches: usize,
    /// Slots per dispatch, at most.
    #[arg(long, default_value_t = 8)]
    pub slots: usize,
    /// Accesses per dispatch.
    #[arg(long, default_value_t = 64)]
    pub accesses: usize,
    /// Bytes of initial guest contents (e.g. 0x40000000 for 1 GiB).
    #[arg(long, default_value = "0x10000", value_parser = parse_number)]
    pub contents_bytes: u64,
}

/// `explain`'s arguments.
#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The sample (`.json`) or capture (`.dscap`) to explain.
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
    /// Run on this backend: the CPU reference, or a Vulkan device (planned with its real limits).
    #[arg(long, value_enum, default_value_t = BackendChoice::Cpu)]
    pub backend: BackendChoice,
}

fn parse_number(s: &str) -> Result<u64, String> {
    dispatchscope_core::addr::parse_u64(s)
        .ok_or_else(|| format!("{s:?} is not a number (decimal or 0x…)"))
}

/// `dispatchscope explain`.
pub fn explain_cmd(args: &ExplainArgs) -> anyhow::Result<()> {
    let overrides = args.min_storage_buffer_offset_alignment.is_some()
        || args.max_storage_buffer_range.is_some()
        || args.backend == BackendChoice::Vulkan;
    // A capture that recorded its reports explains dispatch N from its record alone.
    if let (Some(n), false) = (args.dispatch, overrides)
        && let Ok(Opened::Capture(mut c)) = session::open(&args.file)
    {
        let total = c.n_dispatches();
        if n as usize >= total {
            return Err(BadInput(format!(
                "{}: --dispatch {n}, but the capture has {total} dispatches",
                args.file.display()
            ))
            .into());
        }
        let record = c
            .dispatch(n as usize)
            .map_err(|e| BadInput(e.to_string()))?;
        if let Some(report) = record.report {
            let title = c.meta().title.clone();
            return print_reports(args, &title, &[report]);
        }
    }
    let loaded = load(&args.file)?;
    let sample = &loaded.sample;
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
    let recorded: Option<Vec<DispatchReport>> = loaded.recorded.iter().cloned().collect();
    let reports = match recorded {
        Some(r) if !overrides && !r.is_empty() => r,
        _ => run_sample(args.backend, sample, &args.file, limits)?,
    };
    let chosen: Vec<DispatchReport> = match args.dispatch {
        Some(n) => vec![
            reports
                .iter()
                .find(|r| r.index == n)
                .cloned()
                .ok_or_else(|| {
                    BadInput(format!(
                        "{}: --dispatch {n}, but it has {} dispatches (0..{})",
                        args.file.display(),
                        reports.len(),
                        reports.len().saturating_sub(1)
                    ))
                })?,
        ],
        None => reports,
    };
    print_reports(args, &sample.title, &chosen)
}

fn print_reports(
    args: &ExplainArgs,
    title: &str,
    reports: &[DispatchReport],
) -> anyhow::Result<()> {
    if args.json {
        let doc = serde_json::json!({
            "schema": SCHEMA,
            "file": args.file.display().to_string(),
            "title": title,
            "dispatches": reports,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).context("serialising the report")?
        );
    } else {
        let detail = Detail {
            max_accesses: if args.all_accesses { usize::MAX } else { 16 },
        };
        println!("{} — {title}", args.file.display());
        for r in reports {
            println!();
            print!("{}", explain(r, detail));
        }
    }
    Ok(())
}

/// `dispatchscope convert IN OUT`: sample ↔ capture, without loss. A capture made from a sample
/// records each dispatch's report (CPU reference) so that explaining dispatch N reads one record.
pub fn convert_cmd(input: &Path, output: &Path) -> anyhow::Result<()> {
    let loaded = load(input)?;
    let to_sample = output
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"));
    if to_sample {
        session::write_sample(&loaded.sample, output)?;
    } else {
        let reports = run_sample(
            BackendChoice::Cpu,
            &loaded.sample,
            input,
            loaded.sample.device.clone(),
        )?;
        session::write_capture(&loaded.sample, Some(&reports), output)?;
    }
    eprintln!(
        "wrote {} ({} steps, {} dispatches) as a {}",
        output.display(),
        loaded.sample.steps.len(),
        loaded.sample.dispatches().count(),
        if to_sample { "sample" } else { "capture" }
    );
    Ok(())
}

/// `dispatchscope generate`.
pub fn generate_cmd(args: &GenerateArgs) -> anyhow::Result<()> {
    use dispatchscope_formats::generate::{GenConfig, random_sample};
    let reservations = 16;
    let cfg = GenConfig {
        dispatches: args.dispatches,
        slots: args.slots,
        accesses: args.accesses,
        reservations,
        pages_per_reservation: args.contents_bytes / reservations as u64 / 0x1000 + 16,
        contents_bytes: args.contents_bytes,
        events_between: 2,
    };
    let sample = random_sample(args.seed, cfg);
    if args
        .output
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"))
    {
        session::write_sample(&sample, &args.output)?;
    } else {
        let reports = sample
            .run()
            .context("the generated sample did not run: a generator bug")?;
        session::write_capture(&sample, Some(&reports), &args.output)?;
    }
    eprintln!(
        "wrote {} (seed {}, {} dispatches)",
        args.output.display(),
        args.seed,
        args.dispatches
    );
    Ok(())
}
