//! dispatchscope, the debugger: the window, and the command line beside it, as a library the
//! binary (`main.rs`), the tests and the benches link once.
//!
//! This crate only wires things together: `dispatchscope_core` plans and runs, the views draw.
//! [`command`] holds the command line (its flags and which module runs each subcommand); the
//! loading the subcommands and the window share is [`load`]'s, and every subcommand writes its output
//! through [`out`] (a closed pipe ends it quietly). The subcommand modules take what they share
//! from [`load`] and [`out`], never from each other.

pub mod cli;
pub mod command;
pub mod diff_cli;
pub mod disasm_cli;
pub mod gui;
pub mod history_cli;
pub mod live_cli;
pub mod live_feed;
pub mod load;
pub mod out;
pub mod pass_demo;
pub mod vk_cli;
