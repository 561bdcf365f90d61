//! The Vulkan backend from the command line: `verify` (`explain --backend vulkan` is
//! `load::run_sample`'s) and `spirv-helper`.
//!
//! `verify FILE` replays a sample or capture on the CPU reference and on the Vulkan device, with
//! the device's real storage-buffer limits for both, and prints every difference in the reports
//! (device addresses put in guest terms) and in guest memory afterwards; it exits with status 1 if
//! there is any, or if the device cannot run. It only wires `dispatchscope_vk::verify` to the terminal.
//!
//! `spirv-helper -o helper.spv [--variant helper|header|flat|instrumented|raw]` writes the lookup helper as a
//! linkable SPIR-V library (`dispatchscope_vk::spirv::library`), for a translator in another
//! language to link its module against with `spirv-link`; no device is needed.
//! The library's contract (its module docs say it whole): every lane of a workgroup calls
//! `dispatchscope_lane(workgroup, local, lanes, x, y)` first and `dispatchscope_flush(token, lanes)`
//! last, both in workgroup-uniform control flow (the instrumented variant has a workgroup barrier
//! in each), and the program declares and exports `dispatchscope_workgroup`, a `Workgroup` array
//! of 532 u32 (2,128 bytes, the instrumented variant's counters), listed in its entry point's
//! interface, as it exports its push block `dispatchscope_push`.

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
    crate::outln!(
        "{} — {} dispatches on {} and {}",
        args.file.display(),
        c.dispatches,
        c.left,
        c.right
    )?;
    for d in &c.differences {
        crate::outln!("  {d}")?;
    }
    let messages = ctx.validation_messages();
    for m in ctx.validation_text() {
        crate::outln!("  validation: {m}")?;
    }
    let total = c.differences.len() as u64 + messages;
    if total == 0 {
        crate::outln!(
            "no differences: values read, marks, escapes, write-back words and guest memory agree{}",
            if args.validation {
                ", and the validation layer said nothing"
            } else {
                ""
            }
        )?;
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

/// `spirv-helper`'s arguments.
#[derive(Debug, Args)]
pub struct SpirvHelperArgs {
    /// Where to write the library module.
    #[arg(short, long)]
    pub output: PathBuf,
    /// Which helper: `helper` (T5 through the chunk table), `header` (the same, its words read
    /// from a 64-byte header whose address is the push block's one 64-bit value, words 30–31),
    /// `instrumented` (with the device-side instrumentation), `capture` (the selected lanes'
    /// accesses alone, the instrumented pass's second dispatch), `flat` (the peer's flat page
    /// table) or `raw` (guest address plus one constant).
    #[arg(long, default_value = "helper")]
    pub variant: String,
}

/// `dispatchscope spirv-helper -o FILE`: the helper library, validated, written whole or not at all.
pub fn spirv_helper_cmd(args: &SpirvHelperArgs) -> anyhow::Result<()> {
    use dispatchscope_vk::spirv::library::{Variant, helper_library};
    let variant = Variant::ALL
        .into_iter()
        .find(|v| v.name() == args.variant)
        .ok_or_else(|| {
            BadInput(format!(
                "--variant {:?}: not one of capture, flat, helper, header, instrumented, raw",
                args.variant
            ))
        })?;
    let words = helper_library(variant).context("building the helper library")?;
    // The library is built unvalidated (no engine call runs a process); a tool may run spirv-val.
    dispatchscope_vk::spirv::validate_linkable("helper_library", &words)
        .context("validating the helper library")?;
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    dispatchscope_formats::capture::write_atomically(&args.output, |f| {
        use std::io::Write as _;
        f.write_all(&bytes)
            .map_err(|source| dispatchscope_formats::capture::CaptureError::Io {
                action: "writing the helper library".into(),
                source,
            })
    })
    .with_context(|| format!("writing {}", args.output.display()))?;
    crate::outln!(
        "{}: the {} helper library, {} bytes (SPIR-V 1.5, Linkage; link with spirv-link; the program exports dispatchscope_push and dispatchscope_workgroup, u32[{}], and every lane calls dispatchscope_lane first and dispatchscope_flush last)",
        args.output.display(),
        variant.name(),
        bytes.len(),
        dispatchscope_core::instrument::WORKGROUP_WORDS
    )?;
    Ok(())
}
