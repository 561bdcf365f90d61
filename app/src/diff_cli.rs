//! `dispatchscope diff A B [--json]`: two sessions compared dispatch by dispatch
//! (`dispatchscope_analysis::diff`); and the "what if", `dispatchscope diff FILE --LIMIT VALUE`: one
//! session against itself under other limits (`dispatchscope_analysis::what_if`).
//!
//! A sample's reports are its replay on the CPU reference; a capture's are the reports it
//! recorded, read through its index one DISPATCH record at a time (a capture that recorded none is
//! replayed as a sample is).
//!
//! A what-if over the planning limits (`--min-storage-buffer-offset-alignment`,
//! `--max-storage-buffer-range`) re-plans each dispatch from its recorded input without running
//! it, and compares the run only up to the first dispatch that diverges (the output says which,
//! and why); `--probe-bound` and `--host-page-bytes` change the mapping and the table, so the
//! session is replayed whole on the CPU reference, as `--replay` does for any limit.
//!
//! Exit status as diff(1): 0 the same, 1 different, 2 bad input (a named error) or any trouble.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::Args;
use dispatchscope_analysis::diff::{
    Compared, DIFF_SCHEMA, DispatchDiff, SessionDiff, diff_sessions,
};
use dispatchscope_analysis::what_if::{self, PlanLimits, RePlan, Recorded};
use dispatchscope_core::input::DeviceLimits;
use dispatchscope_core::report::DispatchReport;
use dispatchscope_formats::session::{self, Opened};
use dispatchscope_formats::what_if::{self as session_what_if, RePlanError};

use crate::load::{
    BackendChoice, BadInput, PlanLimitArgs, WhatIfLimits, load, parse_number, run_sample,
};

/// `diff`'s arguments.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// A: the sample (`.json`) or capture (`.dscap`) compared from.
    pub a: PathBuf,
    /// B: the session compared to. Without it, a limit flag makes a "what if": A under those limits.
    pub b: Option<PathBuf>,
    /// Print the diff as JSON (schema `dispatchscope.diff/1`, `samples/diff.schema.json`).
    #[arg(long)]
    pub json: bool,
    /// What if: the planning limits (O5, O7).
    #[command(flatten)]
    pub plan: PlanLimitArgs,
    /// What if: the chunk table's probe bound (T2); replays the session.
    #[arg(long, value_parser = parse_number)]
    pub probe_bound: Option<u64>,
    /// What if: the host's page size in bytes; replays the session.
    #[arg(long, value_parser = parse_number)]
    pub host_page_bytes: Option<u64>,
    /// Replay the whole session under the new limits on the CPU reference instead of re-planning.
    #[arg(long)]
    pub replay: bool,
}

fn bad(message: String) -> anyhow::Error {
    BadInput(message).into()
}

impl DiffArgs {
    fn what_if(&self) -> bool {
        self.what_if_limits().any()
    }

    fn what_if_limits(&self) -> WhatIfLimits {
        WhatIfLimits {
            min_storage_buffer_offset_alignment: self.plan.min_storage_buffer_offset_alignment,
            max_storage_buffer_range: self.plan.max_storage_buffer_range,
            probe_bound: self.probe_bound,
            host_page_bytes: self.host_page_bytes,
        }
    }

    fn plan_limits(&self) -> PlanLimits {
        self.what_if_limits().plan()
    }

    /// `base` with every limit the flags set, each checked by name.
    fn limits(&self, base: &DeviceLimits) -> anyhow::Result<DeviceLimits> {
        Ok(self.what_if_limits().apply(base)?)
    }
}

/// `dispatchscope diff`: returns whether the two are the same (exit 0) or not (exit 1).
pub fn diff_cmd(args: &DiffArgs) -> anyhow::Result<bool> {
    let diff = match (&args.b, args.what_if()) {
        (Some(b), false) => {
            let a_reports = reports_of(&args.a)?;
            let b_reports = reports_of(b)?;
            diff_sessions(&a_reports, &b_reports)
        }
        (None, true) => what_if_diff(args)?,
        (Some(_), true) => {
            return Err(bad(
                "diff: a what-if (a limit flag) takes one file, A, and compares it with itself under the new limits; give B or the flags, not both".into(),
            ));
        }
        (None, false) => {
            return Err(bad(
                "diff: give two sessions (diff A B), or one and the limits to change (diff FILE --min-storage-buffer-offset-alignment 256)".into(),
            ));
        }
    };
    let b_name = args
        .b
        .as_ref()
        .map_or_else(|| "(what if)".to_owned(), |b| b.display().to_string());
    let printed = if args.json {
        let doc = serde_json::json!({
            "schema": DIFF_SCHEMA,
            "a": args.a.display().to_string(),
            "b": b_name,
            "same": diff.is_empty(),
            "diff": diff,
        });
        crate::outln!(
            "{}",
            serde_json::to_string_pretty(&doc).context("serialising the diff")?
        )
    } else {
        crate::out!("{}", text(&args.a.display().to_string(), &b_name, &diff))
    };
    match printed.and_then(|()| crate::out::flush()) {
        // A reader that closed the output early does not change what the comparison found.
        Err(e) if !crate::out::is_closed(&e) => Err(e),
        _ => Ok(diff.is_empty()),
    }
}

/// A session's reports: a capture's recorded ones through its index, else a CPU replay.
fn reports_of(path: &Path) -> anyhow::Result<Vec<DispatchReport>> {
    let opened = session::open(path).map_err(|e| bad(e.to_string()))?;
    match opened {
        Opened::Sample(sample) => {
            run_sample(BackendChoice::Cpu, &sample, path, sample.device.clone())
        }
        Opened::Capture(mut c) => {
            if let Some(note) = crate::load::torn_note(&c) {
                eprintln!("dispatchscope: warning: {}: {note}", path.display());
            }
            let n = c.n_dispatches();
            let mut reports = Vec::with_capacity(n);
            for i in 0..n {
                let record = c.dispatch(i).map_err(|e| bad(e.to_string()))?;
                match record.report {
                    Some(r) => reports.push(r),
                    None => return replayed(path),
                }
            }
            Ok(reports)
        }
    }
}

/// A capture that did not record its reports, replayed on the CPU reference (keeping any
/// instrumented section it recorded).
fn replayed(path: &Path) -> anyhow::Result<Vec<DispatchReport>> {
    let loaded = load(path)?;
    replay_keeping_sections(&loaded, path, loaded.sample.device.clone())
}

/// `loaded` (read from `path`) replayed on the CPU reference under `limits`, keeping any
/// instrumented section it recorded (the CPU reference cannot re-run a device pass).
fn replay_keeping_sections(
    loaded: &crate::load::Loaded,
    path: &Path,
    limits: DeviceLimits,
) -> anyhow::Result<Vec<DispatchReport>> {
    let mut r = run_sample(BackendChoice::Cpu, &loaded.sample, path, limits)?;
    session::keep_recorded_sections(&mut r, &loaded.recorded);
    Ok(r)
}

/// The what-if: the re-plan where only planning limits change, else a full replay
/// (`dispatchscope_analysis::what_if::of_session`, as the window makes it).
fn what_if_diff(args: &DiffArgs) -> anyhow::Result<SessionDiff> {
    let path = &args.a;
    let opened = session::open(path).map_err(|e| bad(e.to_string()))?;
    let base = match &opened {
        Opened::Sample(s) => s.device.clone(),
        Opened::Capture(c) => c.meta().device.clone(),
    };
    let limits = args.limits(&base)?;
    let forced = args.replay.then_some("--replay");
    let at = AtPath { path, opened };
    let (diff, _) = what_if::of_session(at, &base, &limits, args.plan_limits(), forced)?;
    Ok(diff)
}

/// The session a what-if is asked of, read from its path.
struct AtPath<'a> {
    path: &'a Path,
    opened: Opened,
}

impl Recorded for AtPath<'_> {
    /// The reports under the new limits.
    type Made = Vec<DispatchReport>;
    type Error = anyhow::Error;

    fn re_plan(&mut self, plan: PlanLimits) -> anyhow::Result<RePlan<Vec<DispatchReport>>> {
        let path = self.path;
        let re_planned = match &mut self.opened {
            Opened::Sample(sample) => {
                let base_reports =
                    run_sample(BackendChoice::Cpu, sample, path, sample.device.clone())?;
                session_what_if::re_plan(sample.dispatches().zip(base_reports), plan)
                    .map_err(RePlanError::from)
            }
            Opened::Capture(c) => {
                if let Some(note) = crate::load::torn_note(c) {
                    eprintln!("dispatchscope: warning: {}: {note}", path.display());
                }
                session_what_if::re_plan_capture(c, plan)
            }
        };
        match re_planned {
            Ok(r) => Ok(RePlan::Made(r.diff(), r.now)),
            // A capture without reports, or reports another recorder made: replay it.
            Err(e) if e.replay_instead() => Ok(RePlan::ReplayInstead(e.to_string())),
            Err(e) => Err(bad(format!("{}: {e}", path.display()))),
        }
    }

    /// The session replayed whole under `limits` on the CPU reference, and its recorded reports
    /// (a sample's: its replay under its own limits).
    fn replay(self, limits: &DeviceLimits) -> anyhow::Result<(Vec<DispatchReport>, Self::Made)> {
        let path = self.path;
        drop(self.opened);
        let loaded = load(path)?;
        let all_recorded: Option<Vec<DispatchReport>> = loaded.recorded.iter().cloned().collect();
        let before = match all_recorded {
            Some(r) if !r.is_empty() => r,
            _ => replay_keeping_sections(&loaded, path, loaded.sample.device.clone())?,
        };
        let after = replay_keeping_sections(&loaded, path, limits.clone())?;
        Ok((before, after))
    }

    fn reports(made: &Vec<DispatchReport>) -> &[DispatchReport] {
        made
    }
}

/// The text form: a header, then each dispatch that changed and what changed, in a debugger's terms.
pub fn text(a: &str, b: &str, d: &SessionDiff) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "A: {a} ({} dispatches)", d.a_dispatches);
    let _ = writeln!(out, "B: {b} ({} dispatches)", d.b_dispatches);
    for l in &d.limits {
        let _ = writeln!(out, "limit {}: {} → {}", l.name, l.before, l.after);
    }
    let how = match d.matching {
        dispatchscope_analysis::diff::Matching::ByOrder => "matched by order",
        dispatchscope_analysis::diff::Matching::ByProgram => {
            "matched by program address (longest common subsequence)"
        }
        dispatchscope_analysis::diff::Matching::ByOrderPastLimit => {
            "matched by program address, and by order where the sequences were too long to align"
        }
    };
    let _ = writeln!(out, "{how}: {} pairs", d.pairs.len());
    for n in &d.notes {
        let _ = writeln!(out, "note: {n}");
    }
    for r in &d.only_a {
        let _ = writeln!(
            out,
            "only in A: dispatch {} (program {:#x}{})",
            r.index,
            r.program,
            label(&r.label)
        );
    }
    for r in &d.only_b {
        let _ = writeln!(
            out,
            "only in B: dispatch {} (program {:#x}{})",
            r.index,
            r.program,
            label(&r.label)
        );
    }
    for x in &d.dispatches {
        out.push('\n');
        dispatch_text(&mut out, x);
    }
    out.push('\n');
    if d.is_empty() {
        let _ = writeln!(out, "the same: no decision changed");
    } else {
        let _ = writeln!(
            out,
            "{} of {} paired dispatches changed ({} changes); {} only in A, {} only in B",
            d.dispatches.len(),
            d.pairs.len(),
            d.n_changes(),
            d.only_a.len(),
            d.only_b.len()
        );
    }
    if d.plan_only > 0 {
        let _ = writeln!(
            out,
            "{} paired dispatches compared by plan only (their runs were not re-run)",
            d.plan_only
        );
    }
    out
}

fn label(l: &str) -> String {
    if l.is_empty() {
        String::new()
    } else {
        format!(", {l:?}")
    }
}

/// The most changes of one category printed for a dispatch before "… and N more".
const MAX_LINES_PER_CATEGORY: usize = 8;

fn dispatch_text(out: &mut String, x: &DispatchDiff) {
    use std::fmt::Write as _;
    let index = if x.a == x.b {
        format!("dispatch {}", x.a)
    } else {
        format!("dispatch {} (B's {})", x.a, x.b)
    };
    let _ = writeln!(
        out,
        "{index} (program {:#x}{}): {} change{}",
        x.program,
        label(&x.label),
        x.changes.len(),
        if x.changes.len() == 1 { "" } else { "s" }
    );
    let mut shown = 0;
    let mut category = None;
    let mut hidden = 0;
    for c in &x.changes {
        if category != Some(c.category()) {
            if hidden > 0 {
                let _ = writeln!(out, "  … and {hidden} more");
            }
            category = Some(c.category());
            shown = 0;
            hidden = 0;
        }
        if shown < MAX_LINES_PER_CATEGORY {
            let _ = writeln!(out, "  {}", c.sentence());
            shown += 1;
        } else {
            hidden += 1;
        }
    }
    if hidden > 0 {
        let _ = writeln!(out, "  … and {hidden} more");
    }
    if let Compared::PlanOnly { why } = &x.compared {
        let _ = writeln!(out, "  (run not compared: {why})");
    }
}
