//! The Vulkan backend from the command line: `verify` (`explain --backend vulkan` is
//! `load::run_sample`'s) and `spirv-helper`.
//!
//! `verify FILE` replays a sample or capture on the CPU reference and on the Vulkan device, with
//! the device's real storage-buffer limits for both, and prints every difference in the reports
//! (device addresses put in guest terms) and in guest memory afterwards; it exits with status 1 if
//! there is any, or if the device cannot run. It only wires `dispatchscope_vk::verify` to the terminal.
//!
//! `spirv-helper -o helper.spv [--variant helper|header|flat|capture|instrumented|raw]
//! [--shape lean|key|issue30] [--no-subgroup-arithmetic] [--no-int64-atomics]` writes the lookup
//! helper as a linkable SPIR-V library (`dispatchscope_vk::spirv::library`), for a translator in
//! another language to link its module against with `spirv-link`; no device is needed.
//! The library's contract (its module docs say it whole): every lane of a workgroup calls
//! `dispatchscope_lane(workgroup, local, lanes, x, y)` first and `dispatchscope_flush(token, lanes)`
//! last, both in workgroup-uniform control flow (the instrumented variant has a workgroup barrier
//! in each), and the program declares and exports `dispatchscope_workgroup`, a `Workgroup` array
//! of 532 u32 (2,128 bytes, the instrumented variant's counters), and `dispatchscope_lane_escapes`,
//! a `Workgroup` array of 320 u32 (each lane's first escape, which the lean instrumented library
//! imports and the others leave unused), both listed in its entry point's interface, as it exports
//! its push block `dispatchscope_push`. The instrumented library is issue 42's lean one by default
//! (`Shape::LINKED`): its device needs subgroup arithmetic and vote in compute shaders and
//! `shaderBufferInt64Atomics` enabled, unless `--no-subgroup-arithmetic` / `--no-int64-atomics`
//! leave them out (one workgroup atomic a lane for the program's counts; a 32-bit flush with a
//! carry); `--shape issue30` builds issue 30's (every access counted, every escape logged as it
//! happens, the selected lanes captured in the pass).

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;
use dispatchscope_core::CpuBackend;
use dispatchscope_vk::spirv::library::{self, Shape, Variant, symbol};
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
    /// Which shape: `lean` (issue 42's, what the modules built by dispatchscope ship), `key`
    /// (the same with issue 41's lane cache, keyed by the slot's key, for an A/B of the span
    /// cache on a device) or `issue30` (every access counted, every escape logged and the
    /// selected lanes captured as each access happens).
    #[arg(long, default_value = "lean")]
    pub shape: String,
    /// Leave out what needs subgroup arithmetic and vote (the program's counts then take one
    /// workgroup atomic a lane instead of one a subgroup), for a device without them.
    #[arg(long)]
    pub no_subgroup_arithmetic: bool,
    /// Leave out what needs `shaderBufferInt64Atomics` (the workgroup's counters then reach the
    /// buffer's 64-bit counters by a 32-bit atomic and a carry), for a device without it.
    #[arg(long)]
    pub no_int64_atomics: bool,
}

/// What the library of `variant` built as `shape` asks of the device that runs it, beyond what
/// every library asks (`shaderInt64`, `bufferDeviceAddress`): `None`, or the features.
fn library_needs(variant: Variant, shape: Shape) -> Option<String> {
    if variant != Variant::Instrumented {
        return None;
    }
    let mut needs = Vec::new();
    if shape.subgroup_counts || shape.subgroup_rare {
        needs.push("subgroup arithmetic and vote in compute shaders");
    }
    if shape.wide_atomics {
        needs.push("shaderBufferInt64Atomics enabled");
    }
    (!needs.is_empty()).then(|| needs.join(" and "))
}

/// `dispatchscope spirv-helper -o FILE`: the helper library, validated, written whole or not at all.
pub fn spirv_helper_cmd(args: &SpirvHelperArgs) -> anyhow::Result<()> {
    let variant = Variant::ALL
        .into_iter()
        .find(|v| v.name() == args.variant)
        .ok_or_else(|| {
            BadInput(format!(
                "--variant {:?}: not one of capture, flat, helper, header, instrumented, raw",
                args.variant
            ))
        })?;
    let shape = match args.shape.as_str() {
        "lean" => Shape::LINKED,
        "key" => Shape {
            cache_span: false,
            ..Shape::LINKED
        },
        "issue30" => Shape::ISSUE_30,
        other => {
            return Err(
                BadInput(format!("--shape {other:?}: not one of lean, key, issue30")).into(),
            );
        }
    }
    .fit(!args.no_subgroup_arithmetic, !args.no_int64_atomics);
    let words =
        library::helper_library_shaped(variant, shape).context("building the helper library")?;
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
    let shape_name = match variant {
        Variant::Instrumented if shape == Shape::ISSUE_30 => " (issue 30's)",
        Variant::Instrumented => " (lean)",
        _ => "",
    };
    // What the program exports: the workgroup counters always, each lane's first escape where
    // the library imports it (a program may export it for every library: the others leave it).
    let escapes = if library::keeps_lane_escapes(variant, shape) {
        format!(
            " and {}, u32[{}]",
            symbol::LANE_ESCAPES,
            library::MAX_LANES * library::LANE_ESCAPE_WORDS
        )
    } else {
        String::new()
    };
    crate::outln!(
        "{}: the {} helper library{shape_name}, {} bytes (SPIR-V 1.5, Linkage; link with spirv-link; the program exports dispatchscope_push, {}, u32[{}]{escapes}, and every lane calls dispatchscope_lane first and dispatchscope_flush last){}",
        args.output.display(),
        variant.name(),
        bytes.len(),
        symbol::WORKGROUP,
        dispatchscope_core::instrument::WORKGROUP_WORDS,
        library_needs(variant, shape)
            .map(|n| format!("; its device needs {n}"))
            .unwrap_or_default()
    )?;
    Ok(())
}
