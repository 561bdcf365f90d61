//! The dispatchscope binary: parses the command line and runs it through the library
//! ([`dispatchscope::command::run`]); everything else is the library's.

use std::process::ExitCode;

use clap::Parser as _;
use dispatchscope::command::{Cli, run};

fn main() -> ExitCode {
    run(&Cli::parse())
}
