//! The dispatchscope binary: the debugger window, and the command line beside it.
//!
//! This crate only wires things together: `dispatchscope_core` plans and runs, the views draw.

mod cli;
mod gui;
mod live_cli;
mod vk_cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let result = match &cli.command {
        Some(cli::Command::Explain(args)) => cli::explain_cmd(args),
        Some(cli::Command::Convert { input, output }) => cli::convert_cmd(input, output),
        Some(cli::Command::Generate(args)) => cli::generate_cmd(args),
        Some(cli::Command::Demo(args)) => live_cli::demo_cmd(args),
        Some(cli::Command::Attach(args)) => live_cli::attach_cmd(args),
        Some(cli::Command::Record(args)) => live_cli::record_cmd(args),
        Some(cli::Command::Verify(args)) => vk_cli::verify_cmd(args),
        None => gui::run_gui(cli.files.clone()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dispatchscope: {e:#}");
            if e.downcast_ref::<cli::BadInput>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
