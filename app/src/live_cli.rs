//! The live subcommands: `demo` (a running target to attach to), `attach` (pause, step or run to a
//! breakpoint, print each report, detach) and `record` (a live session to a crash-safe capture).
//!
//! All the work is `dispatchscope_live`'s and `dispatchscope_demo`'s; this module only
//! parses flags and prints.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, ValueEnum};
use dispatchscope_analysis::explain::{Detail, explain, explain_loss};
use dispatchscope_core::report::{DispatchReport, SCHEMA};
use dispatchscope_demo::{Demo, DemoConfig, RunOptions, Streams};
use dispatchscope_live::protocol::{DEFAULT_LISTEN, PROTOCOL, VERSION};
use dispatchscope_live::{
    Breakpoints, ClientError, ClientOptions, LiveClient, PauseReason, RecordOptions, Tap,
    TapConfig, TapError, ToDebugger, record,
};

use crate::load::BadInput;

/// `demo`'s arguments.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Where to listen. A loopback address needs no token; any other address does.
    #[arg(long, default_value = DEFAULT_LISTEN)]
    pub listen: SocketAddr,
    /// The token a debugger must present (required when --listen is not loopback).
    #[arg(long)]
    pub token: Option<String>,
    /// Stop after N frames; without it the demo runs until it is killed.
    #[arg(long)]
    pub frames: Option<u64>,
    /// Frames per second to aim at; 0 runs as fast as it can.
    #[arg(long, default_value_t = 60.0)]
    pub fps: f64,
    /// The seed of the scene and the rays.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// A refusal (O7 or W2, alternately) every N frames; 0 for never.
    #[arg(long, default_value_t = 50)]
    pub refusal_every: u64,
    /// An escape (T4) every N frames; 0 for never.
    #[arg(long, default_value_t = 50)]
    pub escape_every: u64,
    /// Seconds a paused demo waits for a debugger that says nothing before it runs on.
    #[arg(long, default_value_t = 1.0)]
    pub pause_timeout: f64,
    /// Dispatches a frame makes (at least the scene's own 5); 200 at 60 frames a second is a
    /// game's 12,000 dispatches a second.
    #[arg(long, default_value_t = dispatchscope_demo::GAME_DISPATCHES_PER_FRAME)]
    pub dispatches_per_frame: u32,
    /// Send every dispatch with the access list the CPU reference executed (the tests' oracle),
    /// instead of what a game's emulator has: bound passes through prepare and complete with
    /// their write-back, device-addressed ones with their instrumented section.
    #[arg(long)]
    pub access_lists: bool,
    /// Run the full-screen traversal pass on Vulkan every frame at this grid (e.g. 1920x1080),
    /// one instrumented dispatch a frame streamed to the debugger, instead of the CPU scene
    /// (issue 14; one tap serves one engine, and the pass's engine holds the pass's memory).
    #[arg(long, value_parser = crate::pass_demo::parse_resolution)]
    pub resolution: Option<crate::pass_demo::Resolution>,
    /// The pass, with --resolution.
    #[command(flatten)]
    pub pass: crate::pass_demo::PassOptions,
}

/// What `attach --break-on` runs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BreakOn {
    /// The next dispatch with a refusal.
    Refusal,
    /// The next dispatch with an escape.
    Escape,
}

/// `attach`'s arguments.
#[derive(Debug, Args)]
pub struct AttachArgs {
    /// The target's address.
    #[arg(default_value = DEFAULT_LISTEN)]
    pub addr: String,
    /// The token the target asks for.
    #[arg(long)]
    pub token: Option<String>,
    /// Dispatches to step and print (1 unless --break-on is given; after the breakpoint with it).
    #[arg(long)]
    pub steps: Option<u64>,
    /// Run to the next dispatch that refuses or escapes, and print it.
    #[arg(long, value_enum)]
    pub break_on: Option<BreakOn>,
    /// Print the report schema (JSON) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Seconds to wait for the target at any one point (connecting, pausing, the breakpoint).
    #[arg(long, default_value_t = 30.0)]
    pub wait: f64,
    /// Print every access, not the first 16 of each dispatch.
    #[arg(long)]
    pub all_accesses: bool,
}

/// `record`'s arguments.
#[derive(Debug, Args)]
pub struct RecordArgs {
    /// The target's address.
    #[arg(default_value = DEFAULT_LISTEN)]
    pub addr: String,
    /// The capture to write.
    #[arg(short, long)]
    pub output: PathBuf,
    /// Stop after N dispatches; without it, record until the target goes or the recorder is
    /// killed (the capture then holds everything up to its last flush, at most 0.5 s old).
    #[arg(long)]
    pub dispatches: Option<u64>,
    /// The token the target asks for.
    #[arg(long)]
    pub token: Option<String>,
    /// Dispatches the target runs per step; it never runs further ahead of the recorder.
    #[arg(long, default_value_t = 64)]
    pub batch: u64,
    /// The most disk the recording may take (`500M`, `20G`): it is written as files of about a
    /// sixteenth of it (OUTPUT, then `name.0001.dscap`, ...), and past it the oldest go. By
    /// default a working day at a game's rate (160 GiB), at most 90 % of the output's free disk.
    #[arg(long, value_name = "SIZE", value_parser = crate::gui::parse_size)]
    pub disk_budget: Option<u64>,
}

fn seconds(s: f64, flag: &str) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(s)
        .map_err(|_| BadInput(format!("{flag} {s}: not a number of seconds")).into())
}

/// Refusals and mismatches are the person's to fix (exit 2); a target that is not there is not.
fn client_error(e: ClientError) -> anyhow::Error {
    match e {
        ClientError::Refused { .. }
        | ClientError::Version { .. }
        | ClientError::Resolve { .. }
        | ClientError::NotATarget { .. } => BadInput(e.to_string()).into(),
        other => anyhow::Error::new(other),
    }
}

/// `dispatchscope demo`.
pub fn demo_cmd(args: &DemoArgs) -> anyhow::Result<()> {
    let config = TapConfig {
        listen: args.listen,
        token: args.token.clone(),
        target_name: "dispatchscope demo".into(),
        pause_timeout: seconds(args.pause_timeout, "--pause-timeout")?,
        ..TapConfig::default()
    };
    let mut tap = Tap::listen(config).map_err(|e| match e {
        TapError::TokenRequired { .. } => BadInput(e.to_string()).into(),
        other => anyhow::Error::new(other),
    })?;
    let addr = tap.local_addr().context("the tap has no address")?;
    let token = if args.token.is_some() {
        "a token is required"
    } else {
        "no token"
    };
    crate::outln!(
        "dispatchscope demo: listening on {addr} ({PROTOCOL} version {VERSION}; {token})"
    )?;
    let mut reach = addr;
    if reach.ip().is_unspecified() {
        reach.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    let flag = if args.token.is_some() {
        " --token …"
    } else {
        ""
    };
    crate::outln!("  attach with: dispatchscope attach {reach}{flag} --steps 3")?;
    if let Some(res) = args.resolution {
        let fps = (args.fps > 0.0).then_some(args.fps);
        return crate::pass_demo::demo_pass(&mut tap, res, &args.pass, args.frames, fps);
    }
    let mut demo = Demo::new(DemoConfig {
        seed: args.seed,
        refusal_every: args.refusal_every,
        escape_every: args.escape_every,
        dispatches_per_frame: args.dispatches_per_frame,
        streams: if args.access_lists {
            Streams::AccessLists
        } else {
            Streams::Game
        },
        ..DemoConfig::default()
    })
    .context("starting the demo's engine")?;
    let handle = tap.handle();
    let stop = AtomicBool::new(false);
    let options = RunOptions {
        frames: args.frames,
        fps: (args.fps > 0.0).then_some(args.fps),
    };
    // A closed output stops the frame loop; the demo then ends quietly (`out::Closed`).
    let mut closed = None;
    dispatchscope_demo::run(&mut demo, &mut tap, options, &stop, |rate| {
        let f = handle.figures();
        let state = match (f.attached, f.paused) {
            (false, _) => "no debugger".to_owned(),
            (true, true) => "debugger attached, paused".to_owned(),
            (true, false) => format!("debugger attached, {} dropped", f.dropped),
        };
        let written = handle
            .take_notices()
            .iter()
            .try_for_each(|n| crate::outln!("  {n}"))
            .and_then(|()| {
                crate::outln!(
                    "frame {} · {:.1} frames/s · {:.0} dispatches/s · {} refused · {} escapes · {state}",
                    rate.frames,
                    rate.frames_per_s,
                    rate.dispatches_per_s,
                    rate.refused,
                    rate.escapes
                )
            });
        if let Err(e) = written {
            closed = Some(e);
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    })
    .context("the demo's frame loop")?;
    closed.map_or(Ok(()), Err)
}

/// `dispatchscope attach`.
pub fn attach_cmd(args: &AttachArgs) -> anyhow::Result<()> {
    let wait = seconds(args.wait, "--wait")?;
    let options = ClientOptions {
        token: args.token.clone(),
        timeout: wait.min(Duration::from_secs(10)),
        client_name: "dispatchscope attach".into(),
        ..ClientOptions::default()
    };
    let client = LiveClient::connect_with(&args.addr, &options).map_err(client_error)?;
    let mut status = vec![format!(
        "attached to {} at {} (session {})",
        client.target().target,
        client.peer(),
        client.session()
    )];
    let mut reports: Vec<DispatchReport> = Vec::new();
    let mut seen = Vec::new();
    // A lost device prepares nothing more, so it never pauses: its loss report ends the waits.
    let is_paused =
        |m: &ToDebugger| matches!(m, ToDebugger::Paused { .. } | ToDebugger::DeviceLost(_));
    let mut loss: Option<Box<dispatchscope_core::report::DeviceLossReport>> = None;
    let paused_line = |m: &ToDebugger| match m {
        ToDebugger::Paused {
            next_dispatch, why, ..
        } => format!("paused before dispatch {next_dispatch}: {}", why.sentence()),
        _ => String::new(),
    };
    match args.break_on {
        Some(b) => {
            let breakpoints = Breakpoints {
                refusal: b == BreakOn::Refusal,
                escape: b == BreakOn::Escape,
                ..Breakpoints::default()
            };
            client.set_breakpoints(&breakpoints).map_err(client_error)?;
            let paused = client
                .wait_for(wait, &mut seen, is_paused)
                .context("waiting for the breakpoint")?;
            if let ToDebugger::DeviceLost(r) = &paused {
                loss = Some(r.clone());
            } else {
                status.push(paused_line(&paused));
            }
            if let ToDebugger::Paused { why, .. } = &paused
                && let Some(n) = why.after_dispatch()
            {
                let report = seen.iter().rev().find_map(|m| match m {
                    ToDebugger::Dispatch { index, report, .. } if *index == n => {
                        Some((**report).clone())
                    }
                    _ => None,
                });
                match report {
                    Some(r) => reports.push(r),
                    None => status.push(format!("dispatch {n}'s report was dropped by the target (this debugger was too slow)")),
                }
            }
            client
                .set_breakpoints(&Breakpoints::default())
                .map_err(client_error)?;
        }
        None => {
            client.pause().map_err(client_error)?;
            let paused = client
                .wait_for(wait, &mut seen, is_paused)
                .context("waiting for the target to reach a dispatch and pause")?;
            if let ToDebugger::DeviceLost(r) = paused {
                loss = Some(r);
            } else {
                status.push(paused_line(&paused));
            }
        }
    }
    let steps = args
        .steps
        .unwrap_or(if args.break_on.is_some() { 0 } else { 1 });
    if steps > 0 && loss.is_none() {
        seen.clear();
        client.step(steps).map_err(client_error)?;
        let paused = client
            .wait_for(wait, &mut seen, |m| {
                matches!(
                    m,
                    ToDebugger::Paused {
                        why: PauseReason::Step { .. },
                        ..
                    } | ToDebugger::DeviceLost(_)
                )
            })
            .context("stepping")?;
        reports.extend(seen.iter().filter_map(|m| match m {
            ToDebugger::Dispatch { report, .. } => Some((**report).clone()),
            _ => None,
        }));
        if let ToDebugger::DeviceLost(r) = paused {
            loss = Some(r);
        } else {
            status.push(paused_line(&paused));
        }
    }
    if let Some(l) = &loss {
        status.push(format!(
            "the target's device was lost ({}) with {} in flight",
            l.status,
            l.in_flight.len()
        ));
    }
    match client.detach(Duration::from_secs(2)) {
        Ok(_) => status.push("detached; the target runs on".into()),
        Err(e) => status.push(format!(
            "detaching: {e} (the target runs on once the connection closes)"
        )),
    }
    if args.json {
        let mut doc =
            serde_json::json!({ "schema": SCHEMA, "target": args.addr, "dispatches": reports });
        if let (Some(l), Some(map)) = (&loss, doc.as_object_mut()) {
            map.insert(
                "device_loss".into(),
                serde_json::to_value(l).context("serialising the loss report")?,
            );
        }
        crate::outln!(
            "{}",
            serde_json::to_string_pretty(&doc).context("serialising the reports")?
        )?;
        for s in &status {
            eprintln!("dispatchscope: {s}");
        }
    } else {
        for s in &status {
            crate::outln!("{s}")?;
        }
        let detail = Detail {
            max_accesses: if args.all_accesses { usize::MAX } else { 16 },
        };
        for r in &reports {
            crate::outln!()?;
            crate::out!("{}", explain(r, detail))?;
        }
        if let Some(l) = &loss {
            crate::outln!()?;
            crate::out!("{}", explain_loss(l))?;
        }
    }
    Ok(())
}

/// `dispatchscope record`.
pub fn record_cmd(args: &RecordArgs) -> anyhow::Result<()> {
    let folder = match args.output.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let (disk_budget, why) = crate::gui::recording_budget(args.disk_budget, &folder);
    if let Some(why) = why {
        eprintln!("dispatchscope: {why}");
    }
    let options = RecordOptions {
        dispatches: args.dispatches,
        batch: args.batch.max(1),
        disk_budget: Some(disk_budget),
        ..RecordOptions::default()
    };
    let stop = AtomicBool::new(false);
    let mut last_report = std::time::Instant::now();
    let summary = record(
        &args.addr,
        args.token.as_deref(),
        &args.output,
        &options,
        &stop,
        |s| {
            if last_report.elapsed() >= Duration::from_secs(1) {
                eprintln!(
                    "recording: {} dispatches, {} events, {:.1} MiB",
                    s.dispatches,
                    s.events,
                    s.bytes as f64 / f64::from(1 << 20)
                );
                last_report = std::time::Instant::now();
            }
        },
    )
    .map_err(|e| match e {
        dispatchscope_live::record::RecordError::Client(c) => client_error(c),
        other => anyhow::Error::new(other),
    })?;
    let span = match (summary.first_dispatch, summary.last_dispatch) {
        (Some(a), Some(b)) => format!(" (the target's dispatches {a}..={b})"),
        _ => String::new(),
    };
    eprintln!(
        "wrote {}: {} dispatches{span}, {} events, a snapshot of {} events and {} contents records, {:.1} MiB",
        args.output.display(),
        summary.dispatches,
        summary.events,
        summary.snapshot_events,
        summary.contents,
        summary.bytes as f64 / f64::from(1 << 20)
    );
    if summary.files > 1 {
        eprintln!(
            "the recording is {} files under the disk budget ({}, then {} and on); the oldest holding {} dispatches were deleted",
            summary.files,
            args.output.display(),
            dispatchscope_live::store::segment_path(&args.output, 1).display(),
            summary.released
        );
    }
    if summary.device_lost {
        eprintln!(
            "the target's device was lost: the capture ends with its loss report (`dispatchscope explain {}` prints it)",
            args.output.display()
        );
    }
    if summary.missing > 0 {
        eprintln!(
            "dispatchscope: warning: {} dispatches or events are missing (the target dropped them)",
            summary.missing
        );
    }
    crate::outln!(
        "received {}, dropped {}",
        summary.dispatches,
        summary.dropped
    )?;
    Ok(())
}
