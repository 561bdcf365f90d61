//! The Vulkan backend from the command line: `verify` (`explain --backend vulkan` is
//! `load::run_sample`'s).
//!
//! `verify FILE` replays a sample or capture on the CPU reference and on the Vulkan device, with
//! the device's real storage-buffer limits for both, and prints every difference in the reports
//! (device addresses put in guest terms) and in guest memory afterwards; it exits with status 1 if
//! there is any, or if the device cannot run. It only wires `dispatchscope_vk::verify` to the terminal.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;
use dispatchscope_core::CpuBackend;
use dispatchscope_vk::{ContextOptions, VulkanBackend, verify};

use crate::load::{BadInput, load};

/// `verify`'s arguments.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The sample (`.json`) or capture (`.dscap`) to run on both backends.
    pub file: PathBuf,
    /// Also run VK_LAYER_KHRONOS_validation; each of its messages counts as a difference.
    #[arg(long)]
    pub validation: bool,
}

/// `dispatchscope verify FILE`.
pub fn verify_cmd(args: &VerifyArgs) -> anyhow::Result<()> {
    let loaded = load(&args.file)?;
    let vk = VulkanBackend::new(&ContextOptions {
        validation: args.validation,
        ..ContextOptions::default()
    })
    .context("opening the Vulkan backend")?;
    let ctx = std::sync::Arc::clone(vk.context());
    let c = verify::compare(&loaded.sample, CpuBackend::new(), vk)
        .map_err(|e| BadInput(format!("{}: {e}", args.file.display())))?;
    println!(
        "{} — {} dispatches on {} and {}",
        args.file.display(),
        c.dispatches,
        c.left,
        c.right
    );
    for d in &c.differences {
        println!("  {d}");
    }
    let messages = ctx.validation_messages();
    for m in ctx.validation_text() {
        println!("  validation: {m}");
    }
    let total = c.differences.len() as u64 + messages;
    if total == 0 {
        println!(
            "no differences: values read, marks, escapes, write-back words and guest memory agree{}",
            if args.validation {
                ", and the validation layer said nothing"
            } else {
                ""
            }
        );
        Ok(())
    } else {
        Err(anyhow::anyhow!(
            "{} differences between {} and {}{}",
            c.differences.len(),
            c.left,
            c.right,
            if messages > 0 {
                format!(", and {messages} validation messages")
            } else {
                String::new()
            }
        ))
    }
}
