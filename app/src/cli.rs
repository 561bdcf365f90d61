//! The file subcommands: `explain`, `convert` and `generate`, and what the app prints without a window.
//!
//! Exit status: 0 when a file was explained (refusals are findings, not failures); 2 for bad
//! input, with a message naming the file, the line and column or byte offset, and what was wrong.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use dispatchscope_analysis::explain::{Detail, explain, explain_loss};
use dispatchscope_core::report::{DispatchReport, SCHEMA};
use dispatchscope_formats::checkpoint;
use dispatchscope_formats::sample::Sample;
use dispatchscope_formats::session::{self, Opened};

use crate::load::{BackendChoice, BadInput, PlanLimitArgs, load, parse_number, run_sample};

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
    /// Re-plan against other planning limits.
    #[command(flatten)]
    pub plan: PlanLimitArgs,
    /// Print every access, not the first 16 of each dispatch.
    #[arg(long)]
    pub all_accesses: bool,
    /// Run on this backend: the CPU reference, or a Vulkan device (planned with its real limits).
    #[arg(long, value_enum, default_value_t = BackendChoice::Cpu)]
    pub backend: BackendChoice,
}

/// `dispatchscope explain`.
pub fn explain_cmd(args: &ExplainArgs) -> anyhow::Result<()> {
    let overrides = args.plan.any() || args.backend == BackendChoice::Vulkan;
    // A capture that recorded its reports explains dispatch N from its record alone.
    if let (Some(n), false) = (args.dispatch, overrides)
        && let Ok(Opened::Capture(mut c)) = session::open(&args.file)
    {
        let total = c.n_dispatches();
        let title = c.meta().title.clone();
        let programs = c.meta().programs.clone();
        // A dispatch in flight when the device was lost has no record: its part of the loss.
        if let Some(loss) = c
            .loss()
            .filter(|l| l.in_flight.iter().any(|d| d.index == n))
        {
            eprintln!(
                "dispatchscope: dispatch {n} was in flight when the device was lost: it has no report, the loss report names it"
            );
            return print_reports(args, &title, &programs, &[], Some(loss));
        }
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
            return print_reports(args, &title, &programs, &[report], None);
        }
    }
    let loaded = load(&args.file)?;
    let sample = &loaded.sample;
    let mut limits = sample.device.clone();
    args.plan.apply_to(&mut limits)?;
    let recorded: Option<Vec<DispatchReport>> = loaded.recorded.iter().cloned().collect();
    let reports = match recorded {
        Some(r) if !overrides && !r.is_empty() => r,
        _ => {
            let mut replayed = run_sample(args.backend, sample, &args.file, limits)?;
            session::keep_recorded_sections(&mut replayed, &loaded.recorded);
            replayed
        }
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
    // The loss follows the whole session's dispatches (one dispatch asked for is that one alone).
    let loss = loaded.loss.as_ref().filter(|_| args.dispatch.is_none());
    print_reports(args, &sample.title, &sample.programs, &chosen, loss)
}

/// Prints `reports` (text or `--json`), then `loss`, the device's loss report, when given.
fn print_reports(
    args: &ExplainArgs,
    title: &str,
    programs: &[dispatchscope_formats::sample::Program],
    reports: &[DispatchReport],
    loss: Option<&dispatchscope_core::report::DeviceLossReport>,
) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut out = crate::out::stdout();
    let written = if args.json {
        let mut doc = serde_json::json!({
            "schema": SCHEMA,
            "file": args.file.display().to_string(),
            "title": title,
            "dispatches": reports,
        });
        if let (Some(loss), Some(map)) = (loss, doc.as_object_mut()) {
            map.insert(
                "device_loss".into(),
                serde_json::to_value(loss).context("serialising the loss report")?,
            );
        }
        let text = serde_json::to_string_pretty(&doc).context("serialising the report")?;
        writeln!(out, "{text}")
    } else {
        let detail = Detail {
            max_accesses: if args.all_accesses { usize::MAX } else { 16 },
        };
        writeln!(out, "{} — {title}", args.file.display()).and_then(|()| {
            reports.iter().try_for_each(|r| {
                // The instruction beside each escape, from the programs the session carries.
                let text = explain(r, detail);
                writeln!(out)?;
                write!(
                    out,
                    "{}",
                    crate::disasm_cli::with_instructions(&text, programs)
                )
            })?;
            match loss {
                Some(l) => {
                    writeln!(out)?;
                    write!(out, "{}", explain_loss(l))
                }
                None => Ok(()),
            }
        })
    };
    // A reader that stopped reading (`explain … | head`) is `out::Closed`: a quiet end.
    out.finish(written)
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
        write_capture_replayed(&loaded.sample, input, output)?;
    }
    eprintln!(
        "wrote {} ({} steps, {} dispatches) as a {}",
        output.display(),
        loaded.sample.steps.len(),
        loaded.sample.dispatches().count(),
        if to_sample { "sample" } else { "capture" }
    );
    if loaded.loss.is_some() {
        eprintln!(
            "dispatchscope: note: {} ends with the device's loss report, which a converted file does not carry (it is the recorded session's, not a replay's)",
            input.display()
        );
    }
    Ok(())
}

/// Replays `sample` (read from `input`, which errors name) on the CPU reference and writes it to
/// `output` as a capture with every report and the checkpoints of engine state the window's
/// Memory and Chunk table panels read (`dispatchscope_formats::checkpoint`), one report at a time.
fn write_capture_replayed(sample: &Sample, input: &Path, output: &Path) -> anyhow::Result<()> {
    use dispatchscope_formats::session::SessionError;
    checkpoint::write_replayed_capture(sample, output, |_| {}).map_err(|e| match e {
        SessionError::Sample { error, .. } => {
            BadInput(format!("{}: {error}", input.display())).into()
        }
        other => anyhow::Error::new(other),
    })?;
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
        write_capture_replayed(&sample, Path::new("the generated sample"), &args.output)
            .context("a generator bug")?;
    }
    eprintln!(
        "wrote {} (seed {}, {} dispatches)",
        args.output.display(),
        args.seed,
        args.dispatches
    );
    Ok(())
}

/// `export`'s arguments.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The sample (`.json`) or capture (`.dscap`) to export.
    pub file: PathBuf,
    /// Write the session as a Chrome/Perfetto trace (Trace Event Format JSON) here; open it in
    /// ui.perfetto.dev or chrome://tracing.
    #[arg(long, value_name = "OUT.json")]
    pub trace: PathBuf,
}

/// Microseconds each dispatch takes on the trace's time axis: reports carry no times, so the
/// axis counts dispatches (the order is the session's; widths say nothing about cost).
pub const TRACE_DISPATCH_US: u64 = 10;

/// `dispatchscope export --trace OUT.json FILE`: the session as a Trace Event Format file, one
/// `"X"` slice per frame (frames end at `retire` events) with its dispatches as slices nested in
/// it, and `"C"` counters of each dispatch's escapes and refusals. A capture that recorded its
/// reports is read one record at a time; a sample (or a capture without reports) is replayed on
/// the CPU reference first.
pub fn export_cmd(args: &ExportArgs) -> anyhow::Result<()> {
    let (title, reports) = export_reports(&args.file)?;
    let n = trace_to(&args.trace, &title, reports).map_err(|e| {
        if e.is::<BadInput>() {
            e
        } else {
            BadInput(format!(
                "{}: cannot write the trace: {e:#}",
                args.trace.display()
            ))
            .into()
        }
    })?;
    eprintln!(
        "wrote {} ({n} dispatches as a Chrome/Perfetto trace; open it in ui.perfetto.dev)",
        args.trace.display()
    );
    Ok(())
}

/// What the export reads: the title and each report, in order, one at a time.
type ReportStream = Box<dyn Iterator<Item = anyhow::Result<DispatchReport>>>;

fn export_reports(file: &Path) -> anyhow::Result<(String, ReportStream)> {
    if let Opened::Capture(mut c) = session::open(file).map_err(|e| BadInput(e.to_string()))? {
        let n = c.n_dispatches();
        let all_recorded = n > 0
            && c.dispatch(0)
                .map_err(|e| BadInput(e.to_string()))?
                .report
                .is_some();
        if all_recorded {
            let title = c.meta().title.clone();
            let stream = (0..n).map(move |i| {
                let record = c.dispatch(i).map_err(|e| BadInput(e.to_string()))?;
                record.report.ok_or_else(|| {
                    BadInput(format!("dispatch {i} of the capture carries no report")).into()
                })
            });
            return Ok((title, Box::new(stream)));
        }
    }
    let loaded = load(file)?;
    let reports = run_sample(
        BackendChoice::Cpu,
        &loaded.sample,
        file,
        loaded.sample.device.clone(),
    )?;
    Ok((loaded.sample.title, Box::new(reports.into_iter().map(Ok))))
}

/// Writes the trace of `reports` to `dest` (atomically); returns how many dispatches it holds.
fn trace_to(dest: &Path, title: &str, reports: ReportStream) -> anyhow::Result<usize> {
    use std::io::Write;
    let tmp = dest.with_extension("json.tmp");
    let file =
        std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    let mut out = std::io::BufWriter::new(file);
    let result = (|| -> anyhow::Result<usize> {
        write!(out, "{{\"displayTimeUnit\":\"ms\",\"otherData\":")?;
        serde_json::to_writer(
            &mut out,
            &serde_json::json!({
                "title": title,
                "time axis": format!("synthetic: each dispatch {TRACE_DISPATCH_US} µs, in session order (reports carry no times)"),
            }),
        )?;
        write!(out, ",\"traceEvents\":[")?;
        let mut first = true;
        let mut event = |out: &mut std::io::BufWriter<std::fs::File>,
                         v: serde_json::Value|
         -> anyhow::Result<()> {
            if !std::mem::take(&mut first) {
                out.write_all(b",\n")?;
            }
            serde_json::to_writer(&mut *out, &v)?;
            Ok(())
        };
        event(
            &mut out,
            serde_json::json!({"name": "thread_name", "ph": "M", "pid": 1, "tid": 1, "args": {"name": "frames and dispatches"}}),
        )?;
        event(
            &mut out,
            serde_json::json!({"name": "process_name", "ph": "M", "pid": 1, "args": {"name": format!("dispatchscope: {title}")}}),
        )?;
        let mut prev: Option<dispatchscope_views::DispatchRow> = None;
        let mut frame_start: Option<(u64, u64, usize)> = None;
        let mut n = 0usize;
        let end_frame = |out: &mut std::io::BufWriter<std::fs::File>,
                         event: &mut dyn FnMut(
            &mut std::io::BufWriter<std::fs::File>,
            serde_json::Value,
        ) -> anyhow::Result<()>,
                         frame: (u64, u64, usize),
                         end_us: u64|
         -> anyhow::Result<()> {
            let (f, ts, count) = frame;
            event(
                out,
                serde_json::json!({"name": format!("frame {f}"), "cat": "frame", "ph": "X", "pid": 1, "tid": 1,
                    "ts": ts, "dur": end_us - ts, "args": {"dispatches": count}}),
            )
        };
        for report in reports {
            let report = report?;
            let row = dispatchscope_views::DispatchRow::after(&report, prev.as_ref());
            let ts = n as u64 * TRACE_DISPATCH_US;
            match frame_start {
                Some((f, _, _)) if f == row.frame => {}
                Some(done) => {
                    end_frame(&mut out, &mut event, done, ts)?;
                    frame_start = Some((row.frame, ts, 0));
                }
                None => frame_start = Some((row.frame, ts, 0)),
            }
            if let Some(f) = &mut frame_start {
                f.2 += 1;
            }
            let name = if report.label.is_empty() {
                format!("dispatch {}", report.index)
            } else {
                format!("dispatch {}: {}", report.index, report.label)
            };
            let rules: Vec<&str> = row.rules.iter().map(|r| r.id()).collect();
            event(
                &mut out,
                serde_json::json!({"name": name, "cat": report.mode.as_str(), "ph": "X", "pid": 1, "tid": 1,
                    "ts": ts, "dur": TRACE_DISPATCH_US,
                    "args": {"index": report.index, "program": format!("{:#x}", report.program),
                        "mode": report.mode.as_str(), "sets": report.counts.sets,
                        "refusals": report.counts.refusals, "escapes": report.counts.escapes,
                        "marks": report.counts.marks, "rules": rules}}),
            )?;
            for (counter, value) in [
                ("escapes", report.counts.escapes),
                ("refusals", report.counts.refusals),
            ] {
                event(
                    &mut out,
                    serde_json::json!({"name": counter, "ph": "C", "pid": 1, "ts": ts, "args": {counter: value}}),
                )?;
            }
            prev = Some(row);
            n += 1;
        }
        if let Some(done) = frame_start {
            end_frame(&mut out, &mut event, done, n as u64 * TRACE_DISPATCH_US)?;
        }
        write!(out, "]}}")?;
        out.flush()?;
        Ok(n)
    })();
    match result {
        Ok(n) => {
            drop(out);
            std::fs::rename(&tmp, dest)
                .with_context(|| format!("renaming {} to {}", tmp.display(), dest.display()))?;
            Ok(n)
        }
        Err(e) => {
            drop(out);
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}
