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
use dispatchscope_formats::sample::Sample;
use dispatchscope_formats::session::{self, Opened};

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
    /// Explain every dispatch of a sample or capture: modes, sets, refusals, mappings, table, escapes.
    Explain(ExplainArgs),
    /// Convert a sample (`.json`) to a capture (`.dscap`) or back, without loss.
    Convert {
        /// The file to read (sample or capture, told apart by its first bytes).
        input: PathBuf,
        /// The file to write: `.json` writes a sample, anything else a capture.
        output: PathBuf,
    },
    /// Write a random valid sample (or capture) of any size, for tests and benches.
    Generate(GenerateArgs),
    /// Run the demo target: a game's frame loop driving the engine, for a debugger to attach to.
    Demo(crate::live_cli::DemoArgs),
    /// Attach to a running target: pause, step N dispatches (or run to a breakpoint), print, detach.
    Attach(crate::live_cli::AttachArgs),
    /// Record a running target's dispatches to a crash-safe capture.
    Record(crate::live_cli::RecordArgs),
    /// Run a sample or capture on the CPU reference and on Vulkan; print every difference (exit 1 if any).
    Verify(crate::vk_cli::VerifyArgs),
}

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
    #[arg(long, value_enum, default_value_t = crate::vk_cli::BackendChoice::Cpu)]
    pub backend: crate::vk_cli::BackendChoice,
}

fn parse_number(s: &str) -> Result<u64, String> {
    dispatchscope_core::addr::parse_u64(s)
        .ok_or_else(|| format!("{s:?} is not a number (decimal or 0x…)"))
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

/// Runs a sample on the CPU reference with optional limit overrides.
pub fn run_sample(
    sample: &Sample,
    path: &Path,
    limits: DeviceLimits,
) -> anyhow::Result<Vec<DispatchReport>> {
    sample
        .run_on(limits, dispatchscope_core::CpuBackend::new())
        .map_err(|e| BadInput(format!("{}: {e}", path.display())).into())
}

/// A session file opened for the CLI: its sample (inputs) and any reports it recorded.
pub struct Loaded {
    /// The steps.
    pub sample: Sample,
    /// Reports a capture recorded, one per dispatch (None for samples).
    pub recorded: Vec<Option<DispatchReport>>,
    /// A note for a capture cut short.
    pub torn: Option<String>,
}

/// Opens a sample or capture, naming the file in any error.
pub fn load(path: &Path) -> anyhow::Result<Loaded> {
    match session::open(path).map_err(|e| BadInput(e.to_string()))? {
        Opened::Sample(sample) => Ok(Loaded {
            sample,
            recorded: Vec::new(),
            torn: None,
        }),
        Opened::Capture(mut c) => {
            let torn = c.torn().map(|t| {
                format!(
                    "{}: cut short: {t}; every complete record before it was read",
                    path.display()
                )
            });
            let (sample, recorded) = c.to_sample().map_err(|e| BadInput(e.to_string()))?;
            Ok(Loaded {
                sample,
                recorded,
                torn,
            })
        }
    }
}

/// `dispatchscope explain`.
pub fn explain_cmd(args: &ExplainArgs) -> anyhow::Result<()> {
    let overrides = args.min_storage_buffer_offset_alignment.is_some()
        || args.max_storage_buffer_range.is_some()
        || args.backend == crate::vk_cli::BackendChoice::Vulkan;
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
    if let Some(t) = &loaded.torn {
        eprintln!("dispatchscope: warning: {t}");
    }
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
        _ => crate::vk_cli::run_sample_on(args.backend, sample, &args.file, limits)?,
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
    if let Some(t) = &loaded.torn {
        eprintln!("dispatchscope: warning: {t}");
    }
    let to_sample = output
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"));
    if to_sample {
        session::write_sample(&loaded.sample, output)?;
    } else {
        let reports = run_sample(&loaded.sample, input, loaded.sample.device.clone())?;
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
