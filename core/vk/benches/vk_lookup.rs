//! The lookup helper (T5) on a Vulkan device against raw device addresses and a flat page table,
//! over 1 GiB mapped in many pieces; and the import cost of M1–M5. Prints ratios, the numbers that
//! matter (absolute times on lavapipe say little about a GPU).
//!
//! `cargo bench --bench vk_lookup` runs everything (about a minute on lavapipe, 3 GiB of memory);
//! `-- --quick` maps 256 MiB and does fewer loads;
//! `-- --write-cuda-inputs DIR` writes the CUDA port's inputs (`core/vk/benches/cuda/`) and exits.

#![allow(clippy::print_stdout, reason = "a benchmark prints its figures")]

use std::path::PathBuf;
use std::sync::Arc;

use dispatchscope_core::input::DeviceLimits;
use dispatchscope_vk::bench::{
    LayoutConfig, LookupConfig, LookupFigures, import_bench, lookup_bench, write_cuda_inputs,
};
use dispatchscope_vk::{Context, ContextOptions};

fn mib(b: u64) -> f64 {
    b as f64 / f64::from(1u32 << 20)
}

fn show(name: &str, f: &LookupFigures) {
    println!(
        "{name}: {} pieces, {:.0} MiB mapped, chunk {:#x}, table {} slots ({:.1} MiB, {:.3} probes per hit), flat table {:.1} MiB, {} loads, import {:.2} s",
        f.pieces,
        mib(f.mapped_bytes),
        f.chunk_bytes,
        f.table_slots,
        mib(f.table_slots as u64 * 16),
        f.mean_probes_hit,
        mib(f.flat_table_bytes),
        f.loads,
        f.import.as_secs_f64()
    );
    for (k, t) in [("helper", f.helper), ("raw", f.raw), ("flat", f.flat)] {
        println!(
            "  {k:<6} median {:>8.2} ms (min {:>8.2} ms), {:>6.2} ns/load",
            t.median.as_secs_f64() * 1e3,
            t.min.as_secs_f64() * 1e3,
            t.ns_per_load
        );
    }
    println!(
        "  ratios: helper/raw {:.2}, flat/raw {:.2}, helper/flat {:.2}",
        f.helper_over_raw(),
        f.flat_over_raw(),
        f.helper_over_flat()
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--write-cuda-inputs") {
        let dir = PathBuf::from(args.get(i + 1).map_or("cuda-inputs", String::as_str));
        for (name, cfg) in [
            ("4k", LayoutConfig::gib_4k()),
            ("64k", LayoutConfig::gib_64k()),
            ("scattered", LayoutConfig::gib_scattered()),
        ] {
            match write_cuda_inputs(&dir.join(name), &cfg, DeviceLimits::default().probe_bound) {
                Ok(w) => println!(
                    "wrote {}: {} pieces, chunk {:#x}, {} table slots",
                    dir.join(name).display(),
                    w.pieces,
                    w.chunk_bytes,
                    w.table_slots
                ),
                Err(e) => {
                    eprintln!("writing {}: {e}", dir.display());
                    std::process::exit(1);
                }
            }
        }
        return;
    }
    let quick = args.iter().any(|a| a == "--quick");
    let ctx: Arc<Context> = match Context::new(&ContextOptions::default()) {
        Ok(c) => c,
        Err(e) => {
            println!("skipped: {e}");
            return;
        }
    };
    println!("device: {}", ctx.device_name());
    let scale = |mut l: LayoutConfig| {
        if quick {
            l.mapped_bytes /= 4;
        }
        l
    };
    for (name, layout) in [
        ("4 KiB-aligned pieces", scale(LayoutConfig::gib_4k())),
        ("64 KiB-aligned pieces", scale(LayoutConfig::gib_64k())),
        (
            "4 KiB-aligned pieces scattered over ~17 GiB",
            scale(LayoutConfig::gib_scattered()),
        ),
    ] {
        let cfg = LookupConfig {
            layout,
            loads: if quick { 1 << 20 } else { 1 << 23 },
            ..LookupConfig::default()
        };
        match lookup_bench(&ctx, &cfg) {
            Ok(f) => show(name, &f),
            Err(e) => {
                eprintln!("{name}: {e}");
                std::process::exit(1);
            }
        }
    }
    let bytes = if quick { 1 << 28 } else { 1 << 30 };
    match import_bench(&ctx, bytes) {
        Ok(f) => {
            println!(
                "import: {} pieces of 4 KiB ({:.0} MiB) in {:.3} s, {:.2} µs a piece (mirrors {:.3} s, Vulkan {:.3} s); released in {:.3} s",
                f.pieces,
                mib(f.mapped_bytes),
                f.import.as_secs_f64(),
                f.import.as_secs_f64() * 1e6 / f.pieces as f64,
                f.import_mirror.as_secs_f64(),
                f.import_vulkan.as_secs_f64(),
                f.release.as_secs_f64()
            );
            println!(
                "engine: first device-addressed dispatch over {:.0} MiB (every 8th page shared: {} pieces, table {} slots) {:.3} s; unchanged {:.2} ms; one page committed + next dispatch {:.2} ms",
                mib(f.mapped_bytes),
                f.engine_pieces,
                f.engine_table_slots,
                f.engine_first.as_secs_f64(),
                f.engine_unchanged.as_secs_f64() * 1e3,
                f.engine_after_commit.as_secs_f64() * 1e3
            );
        }
        Err(e) => {
            eprintln!("import: {e}");
            std::process::exit(1);
        }
    }
}
