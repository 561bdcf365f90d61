//! The command line: its flags, and which module runs each subcommand ([`run`]); the binary
//! parses the arguments and calls it. With no subcommand, it opens the window.
//!
//! This module only dispatches: every subcommand is its module's, and what they share is `load`'s.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::{cli, diff_cli, disasm_cli, gui, history_cli, live_cli, load, out, pass_demo, vk_cli};

/// dispatchscope: a debugger for a console emulator's GPU compute dispatches.
#[derive(Debug, Parser)]
#[command(name = "dispatchscope", version, about)]
pub struct Cli {
    /// What to do; with none, open the debugger window (on FILE, or on the shipped samples).
    #[command(subcommand)]
    pub command: Option<Command>,
    /// A sample or capture to open in the debugger.
    pub files: Vec<PathBuf>,
    /// Open the window comparing FILE (A) with B, a sample or capture, dispatch by dispatch (as
    /// File ▸ Compare with… does): `dispatchscope A.dscap --compare B.dscap`.
    #[arg(long, value_name = "B")]
    pub compare: Option<PathBuf>,
    /// With no FILE: dispatches a frame the window's own demo target makes, at 60 frames a second
    /// (`dispatchscope demo` makes a game's 200 in a process of its own).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub demo_dispatches_per_frame: Option<u32>,
    /// Open the window attached to a running target (an emulator's tap, `dispatchscope demo`), as
    /// Live ▸ Attach… does: `dispatchscope --attach 127.0.0.1:27953`.
    #[arg(long, value_name = "ADDR", conflicts_with_all = ["files", "compare"])]
    pub attach: Option<String>,
    /// The token the target asks for, with --attach.
    #[arg(long, value_name = "TOKEN", requires = "attach")]
    pub token: Option<String>,
    /// The most disk a live session's recording may take (`500M`, `20G`, `160GiB`, bytes); past
    /// it the oldest of its files are deleted and the window says how many dispatches went. By
    /// default a working day at a game's rate (160 GiB), at most 90 % of what the temporary
    /// folder's disk has free.
    #[arg(long, value_name = "SIZE", value_parser = gui::parse_size)]
    pub disk_budget: Option<u64>,
}

/// A subcommand.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Explain every dispatch of a sample or capture: modes, sets, refusals, mappings, table, escapes.
    Explain(cli::ExplainArgs),
    /// Convert a sample (`.json`) to a capture (`.dscap`) or back, without loss.
    Convert {
        /// The file to read (sample or capture, told apart by its first bytes).
        input: PathBuf,
        /// The file to write: `.json` writes a sample, anything else a capture.
        output: PathBuf,
    },
    /// Write a random valid sample (or capture) of any size, for tests and benches.
    Generate(cli::GenerateArgs),
    /// Run the demo target: a game's frame loop driving the engine, for a debugger to attach to.
    Demo(live_cli::DemoArgs),
    /// Attach to a running target: pause, step N dispatches (or run to a breakpoint), print, detach.
    Attach(live_cli::AttachArgs),
    /// Record a running target's dispatches to a crash-safe capture.
    Record(live_cli::RecordArgs),
    /// Run a sample or capture on the CPU reference and on Vulkan; print every difference (exit 1 if any).
    Verify(vk_cli::VerifyArgs),
    /// Write the lookup helper as a linkable SPIR-V library (`-o helper.spv`), for a translator to link with spirv-link.
    SpirvHelper(vk_cli::SpirvHelperArgs),
    /// Run the full-screen traversal pass on Vulkan (`--resolution 1920x1080 --frames N`) and write a capture of its instrumented dispatches (`-o pass.dscap`).
    Pass(pass_demo::PassArgs),
    /// Export a sample or capture: `--trace OUT.json` writes a Chrome/Perfetto trace (ui.perfetto.dev).
    Export(cli::ExportArgs),
    /// Compare two samples or captures dispatch by dispatch (exit 0 the same, 1 different, 2 bad input); with one file and a limit flag, what if it ran under those limits.
    Diff(diff_cli::DiffArgs),
    /// Every write a session made to the bytes at ADDRESS, in order, with the bytes before and after (`--json` for JSON).
    History(history_cli::HistoryArgs),
    /// List a sample's programs as RDNA2 code (`--program ADDR` for one), or decode raw code (`--raw CODE.bin`).
    Disasm(disasm_cli::DisasmArgs),
}

/// Runs what `cli` asks for and says how it went as the exit status: 0 done, 1 failed, 2 bad
/// input (for `diff`, diff(1)'s 0 the same, 1 different, 2 trouble).
pub fn run(cli: &Cli) -> ExitCode {
    if let Some(Command::Diff(args)) = &cli.command {
        // diff(1)'s statuses: 0 the same, 1 different, 2 trouble (bad input named); a reader
        // that closed the output early does not change them (`diff_cli` made the comparison
        // before it printed it).
        return match diff_cli::diff_cmd(args) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::from(1),
            Err(e) => {
                eprintln!("dispatchscope: {e:#}");
                ExitCode::from(2)
            }
        };
    }
    let result = match &cli.command {
        Some(Command::Explain(args)) => cli::explain_cmd(args),
        Some(Command::Convert { input, output }) => cli::convert_cmd(input, output),
        Some(Command::Generate(args)) => cli::generate_cmd(args),
        Some(Command::Demo(args)) => live_cli::demo_cmd(args),
        Some(Command::Attach(args)) => live_cli::attach_cmd(args),
        Some(Command::Record(args)) => live_cli::record_cmd(args),
        Some(Command::Verify(args)) => vk_cli::verify_cmd(args),
        Some(Command::SpirvHelper(args)) => vk_cli::spirv_helper_cmd(args),
        Some(Command::Pass(args)) => pass_demo::pass_cmd(args),
        Some(Command::Export(args)) => cli::export_cmd(args),
        Some(Command::Disasm(args)) => disasm_cli::disasm_cmd(args),
        Some(Command::Diff(_)) => Ok(()),
        Some(Command::History(args)) => history_cli::history_cmd(args),
        None => gui::run_gui(gui::Start {
            open: cli.files.clone(),
            compare: cli.compare.clone(),
            demo_dispatches_per_frame: cli.demo_dispatches_per_frame,
            attach: cli.attach.clone().map(|a| (a, cli.token.clone())),
            disk_budget: cli.disk_budget,
        }),
    };
    // Every subcommand writes through `out`; what it buffered goes now.
    match result.and_then(|()| out::flush()) {
        Ok(()) => ExitCode::SUCCESS,
        // A reader that stopped reading (`… | head`): a quiet end, as a pipe's writer has.
        Err(e) if out::is_closed(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dispatchscope: {e:#}");
            if e.downcast_ref::<load::BadInput>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
