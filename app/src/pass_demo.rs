//! The full-screen traversal pass (issue 14) as a product path: `dispatchscope pass` runs it on a
//! Vulkan device for some frames and writes a capture of its dispatches with their instrumented
//! reports; `dispatchscope demo --resolution WxH` runs it every frame and streams each report to an
//! attached debugger through the demo's `Tap`.
//!
//! Each frame is one dispatch: the engine (`dispatchscope_vk::pass::HostSide`'s CPU engine, which
//! holds the scene's guest memory) plans, maps and syncs the table as for any device-addressed
//! dispatch; the device runs the translated program over the chosen helper variant
//! (`DevicePass`); the engine turns what the instrumented helper wrote into the report's section.
//! With `--check`, the captured lanes of every frame are replayed through the CPU reference and
//! must agree with the device (values, escapes, marks).
//!
//! A capture written here holds the scene's memory (events and contents), each dispatch's input and
//! report (the section in `dispatchscope_formats::instrumented`'s column record), and a memory and
//! table checkpoint, so the app reads its reports from the file instead of replaying it. A replay
//! (`explain --backend …`, or the overrides) re-runs the engine's half of each dispatch (plan,
//! mapping, table) but not the device's run: the inputs record no access (the device ran the
//! program), so a replayed report has no section; the recorded section is the device's.
//!
//! This module parses no file and draws nothing; it imports only `load` of this crate.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::{Args, ValueEnum};
use dispatchscope_core::input::{DispatchInput, Op};
use dispatchscope_core::instrument::{Grid, InstrumentLayout, LaneSelection};
use dispatchscope_core::report::{ControlStatus, DispatchReport, InstrumentedReport};
use dispatchscope_formats::capture::{CaptureWriter, RecordKind};
use dispatchscope_formats::checkpoint::{MEMORY_STATE, MemoryState, TABLE_STATE, TableState};
use dispatchscope_formats::sample::{Contents, Provenance, SAMPLE_VERSION};
use dispatchscope_formats::session::{CAPTURE_FORMAT, CaptureMeta, DispatchRecord};
use dispatchscope_formats::stream::contents_payload;
use dispatchscope_live::Tap;
use dispatchscope_vk::pass::{
    self, DevicePass, Frame, GuestMemoryOn, HostSide, Scene, SceneConfig,
};
use dispatchscope_vk::spirv::library::Variant;
use dispatchscope_vk::spirv::traversal::site;
use dispatchscope_vk::{Context, ContextOptions};

use crate::load::{ArgError, BadInput};

/// A grid size, `WIDTHxHEIGHT` (each a multiple of 8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resolution {
    /// Pixels a row.
    pub width: u32,
    /// Rows.
    pub height: u32,
}

/// Parses `1920x1080`.
pub fn parse_resolution(s: &str) -> Result<Resolution, ArgError> {
    let (w, h) = s
        .split_once(['x', 'X', '×'])
        .ok_or_else(|| ArgError::NotAResolution { text: s.into() })?;
    let n = |t: &str| {
        t.trim().parse::<u32>().map_err(|_| ArgError::NotWhole {
            text: s.into(),
            part: t.into(),
        })
    };
    let (width, height) = (n(w)?, n(h)?);
    Grid::new(width, height).map_err(|error| ArgError::Grid {
        text: s.into(),
        error,
    })?;
    Ok(Resolution { width, height })
}

/// Parses a capture rectangle `X0,Y0,X1,Y1` (pixels, half-open).
pub fn parse_rect(s: &str) -> Result<[u32; 4], ArgError> {
    let not_a_rect = || ArgError::NotARect { text: s.into() };
    let v: Vec<u32> = s
        .split(',')
        .map(|t| t.trim().parse::<u32>())
        .collect::<Result<_, _>>()
        .map_err(|_| not_a_rect())?;
    match v[..] {
        [x0, y0, x1, y1] if x0 < x1 && y0 < y1 => Ok([x0, y0, x1, y1]),
        [_, _, _, _] => Err(ArgError::EmptyRect { text: s.into() }),
        _ => Err(not_a_rect()),
    }
}

/// Which helper the pass calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum PassVariant {
    /// Guest address plus one constant (no table, no instrumentation).
    Raw,
    /// Through the chunk table (T5), misses (T4), marks (C1).
    Helper,
    /// The helper with the device-side instrumentation (the report's section).
    #[default]
    Instrumented,
}

impl PassVariant {
    fn variant(self) -> Variant {
        match self {
            PassVariant::Raw => Variant::Raw,
            PassVariant::Helper => Variant::Helper,
            PassVariant::Instrumented => Variant::Instrumented,
        }
    }
}

/// What the pass runs and captures, shared by `pass` and `demo --resolution`.
#[derive(Clone, Debug, Args)]
pub struct PassOptions {
    /// The helper variant.
    #[arg(long, value_enum, default_value_t = PassVariant::Instrumented)]
    pub variant: PassVariant,
    /// The lanes whose every access the device captures: a pixel rectangle X0,Y0,X1,Y1.
    #[arg(long, value_parser = parse_rect, default_value = "0,0,8,1")]
    pub capture_rect: [u32; 4],
    /// Instances of the scene's top level (a power of two, 4 to 128).
    #[arg(long, default_value_t = 64)]
    pub instances: u32,
    /// Primitives per bottom level (a power of two, 2 to 32).
    #[arg(long, default_value_t = 32)]
    pub primitives: u32,
    /// Turn the Vulkan validation layer on (its messages are counted and must be none).
    #[arg(long)]
    pub validation: bool,
    /// Replay every frame's captured lanes through the CPU reference and fail unless they agree
    /// with the device (values, escapes, marks).
    #[arg(long)]
    pub check: bool,
}

/// `pass`'s arguments.
#[derive(Debug, Args)]
pub struct PassArgs {
    /// The grid, one lane a pixel.
    #[arg(long, value_parser = parse_resolution, default_value = "256x256")]
    pub resolution: Resolution,
    /// The capture to write.
    #[arg(short, long)]
    pub output: PathBuf,
    /// Frames (one dispatch each).
    #[arg(long, default_value_t = 1)]
    pub frames: u64,
    /// The pass.
    #[command(flatten)]
    pub pass: PassOptions,
}

/// The pass on a device: the engine's half, the device's half, the oracle.
pub struct PassRunner {
    ctx: Arc<Context>,
    host: HostSide,
    device: DevicePass,
    oracle: Option<HostSide>,
    variant: Variant,
    /// The lanes captured now: the debugger's request, else `own_selection`.
    selection: LaneSelection,
    /// The lanes `--capture-rect` chose.
    own_selection: LaneSelection,
    input: DispatchInput,
}

/// One frame's figures.
#[derive(Clone, Copy, Debug, Default)]
pub struct FrameFigures {
    /// The frame's wall time (the engine, the device's run, the section).
    pub frame: Duration,
    /// The device's time (GPU timestamps where the queue has them).
    pub gpu: Duration,
    /// Accesses the device counted (instrumented variant; 0 otherwise).
    pub accesses: u64,
}

impl PassRunner {
    /// Builds the scene at `res`, maps it on the engine, imports it and builds the pipelines.
    pub fn new(res: Resolution, opts: &PassOptions) -> anyhow::Result<Self> {
        let grid = Grid::new(res.width, res.height).map_err(|e| BadInput(e.to_string()))?;
        let cfg = SceneConfig {
            instances: opts.instances,
            primitives: opts.primitives,
            ..SceneConfig::default()
        };
        let scene = Scene::new(cfg, grid).ok_or_else(|| {
            BadInput(format!(
                "--instances {} --primitives {}: a scene needs a power of two of instances from 4 to 128 and of primitives from 2 to 32",
                cfg.instances, cfg.primitives
            ))
        })?;
        let ctx = Context::new(&ContextOptions {
            validation: opts.validation,
            stage_table: false,
        })
        .context("opening the Vulkan device")?;
        let host = HostSide::with_limits(scene.clone(), ctx.limits())
            .context("mapping the scene on the engine")?;
        let layout = InstrumentLayout::with_sites(site::COUNT);
        let device = DevicePass::new(&ctx, &host, layout, false, GuestMemoryOn::Imported)
            .context("setting the pass up on the device")?;
        let oracle = if opts.check {
            Some(HostSide::new(scene).context("the CPU reference's copy of the scene")?)
        } else {
            None
        };
        let [x0, y0, x1, y1] = opts.capture_rect;
        let input = host.frame_input();
        let own_selection = LaneSelection::rect(x0, y0, x1, y1);
        Ok(Self {
            ctx,
            host,
            device,
            oracle,
            variant: opts.variant.variant(),
            selection: own_selection,
            own_selection,
            input,
        })
    }

    /// The engine's half (its memory, mappings and the setup dispatch's report).
    pub fn host(&self) -> &HostSide {
        &self.host
    }

    /// The device.
    pub fn device_name(&self) -> String {
        self.ctx.info().name.clone()
    }

    /// The lanes the pass captures now.
    pub fn selection(&self) -> LaneSelection {
        self.selection
    }

    /// Runs one frame through `tap` (a debugger attached to it sees the report); with `--check`,
    /// replays the captured lanes through the CPU reference and fails where they disagree.
    /// The lanes captured are the attached debugger's latest request
    /// ([`Tap::take_lane_request`]), else `--capture-rect`'s.
    pub fn frame(&mut self, tap: &mut Tap) -> anyhow::Result<(DispatchInput, Frame, FrameFigures)> {
        let started = Instant::now();
        if let Some(request) = tap.take_lane_request() {
            self.selection = request.unwrap_or(self.own_selection);
        }
        let HostSide {
            engine,
            scene,
            slots,
            ..
        } = &mut self.host;
        let (device, variant, selection) = (&mut self.device, self.variant, self.selection);
        let mut frame = None;
        let report = tap.dispatch_with(engine, &self.input, |engine, input| {
            let f = pass::run_frame(engine, input, slots, scene, device, variant, &selection)?;
            let report = f.report.clone();
            frame = Some(f);
            Ok::<DispatchReport, dispatchscope_vk::VkError>(report)
        })?;
        let mut frame = frame.context("the tap did not run the frame")?;
        frame.report = report;
        if let (Some(oracle), Some(section)) =
            (self.oracle.as_mut(), frame.report.instrumented.as_ref())
        {
            check_against_reference(oracle, section, &self.device)?;
        }
        if self.ctx.validation_messages() > 0 {
            bail!(
                "the validation layer spoke:\n{}",
                self.ctx.validation_text().join("\n")
            );
        }
        let accesses = frame.report.instrumented.as_ref().map_or(0, |s| {
            let c = s.counters;
            c.guest + c.lds + c.scratch + c.bound
        });
        let figures = FrameFigures {
            frame: started.elapsed(),
            gpu: frame.run.device,
            accesses,
        };
        Ok((self.input.clone(), frame, figures))
    }
}

/// The captured lanes of `section`, replayed through the CPU reference, against the device:
/// every load's values, every access's escape, and every chunk the reference marked (C1) among
/// those the device marked.
fn check_against_reference(
    oracle: &mut HostSide,
    section: &InstrumentedReport,
    device: &DevicePass,
) -> anyhow::Result<()> {
    let report = oracle
        .replay_captured(section)
        .context("replaying the captured lanes")?;
    if report.accesses.len() != section.captured.len() {
        bail!(
            "the CPU reference ran {} of the {} captured accesses",
            report.accesses.len(),
            section.captured.len()
        );
    }
    for (i, (c, a)) in section.captured.iter().zip(&report.accesses).enumerate() {
        if c.op == Op::Load && c.values != a.values {
            bail!(
                "captured access {i} (site {}, lane {} of workgroup {}): the device loaded {:x?}, the CPU reference {:x?}",
                c.site,
                c.wave * 32 + c.lane,
                c.workgroup,
                c.values,
                a.values
            );
        }
        if (c.escaped_bytes != 0) != a.escaped {
            bail!(
                "captured access {i} (site {}): the device says escaped {}, the CPU reference {}",
                c.site,
                c.escaped_bytes != 0,
                a.escaped
            );
        }
    }
    let device_marks: Vec<_> = device.marked_chunks().into_iter().map(|(r, _)| r).collect();
    if let Some(m) = report
        .marks
        .iter()
        .find(|m| !device_marks.contains(&m.guest))
    {
        bail!(
            "the CPU reference marked {:#x}..{:#x} (C1), the device did not",
            m.guest.start,
            m.guest.end
        );
    }
    Ok(())
}

/// A capture of the pass, written as it runs (crash-safe: each record durable at the next flush).
pub struct PassCapture {
    path: PathBuf,
    writer: CaptureWriter,
    last_memory: Option<MemoryState>,
    last_table: Option<Vec<u8>>,
    dispatches: u64,
}

fn json<T: serde::Serialize>(v: &T) -> anyhow::Result<Vec<u8>> {
    serde_json::to_vec(v).context("encoding a record")
}

impl PassCapture {
    /// Creates `path` with the META record, the scene's memory (events and contents) and the
    /// setup dispatch.
    pub fn create(path: &Path, runner: &PassRunner, res: Resolution) -> anyhow::Result<Self> {
        let host = runner.host();
        let meta = CaptureMeta {
            format: CAPTURE_FORMAT.into(),
            sample_version: SAMPLE_VERSION,
            title: format!(
                "ray traversal pass {}x{} ({}, issue 14)",
                res.width,
                res.height,
                runner.variant.name()
            ),
            description: format!(
                "dispatchscope pass on {}: one instrumented dispatch a frame; the inputs record no access (the device ran the program), the reports carry the device's section",
                runner.device_name()
            ),
            provenance: Provenance::default(),
            device: host.engine.limits().clone(),
            programs: Vec::new(),
        };
        let writer = CaptureWriter::create(path, &json(&meta)?)
            .with_context(|| format!("creating {}", path.display()))?;
        let mut c = Self {
            path: path.to_owned(),
            writer,
            last_memory: None,
            last_table: None,
            dispatches: 0,
        };
        for r in &host.scene.regions {
            if !r.bytes.is_empty() {
                let contents = Contents {
                    address: r.range.start,
                    bytes: r.bytes.clone(),
                };
                c.append(RecordKind::MEMORY, &contents_payload(&contents))?;
            }
        }
        for e in HostSide::events(&host.scene) {
            c.append(RecordKind::EVENTS, &json(&e)?)?;
        }
        let setup = DispatchRecord {
            input: HostSide::setup_input(&host.scene),
            report: Some(host.setup.clone()),
        };
        c.dispatch(&setup, host)?;
        Ok(c)
    }

    fn append(&mut self, kind: RecordKind, payload: &[u8]) -> anyhow::Result<()> {
        self.writer
            .append(kind, payload, true)
            .with_context(|| format!("writing {}", self.path.display()))?;
        Ok(())
    }

    /// Appends a dispatch and the checkpoints of what it changed.
    pub fn dispatch(&mut self, record: &DispatchRecord, host: &HostSide) -> anyhow::Result<()> {
        self.append(RecordKind::DISPATCH, &record.to_payload())?;
        self.dispatches += 1;
        let memory = MemoryState::of(host.engine.memory());
        if self.last_memory.as_ref() != Some(&memory) {
            self.append(MEMORY_STATE, &json(&memory)?)?;
            self.last_memory = Some(memory);
        }
        if let Some(t) = host.engine.table() {
            let bytes = TableState::encode(t);
            if self.last_table.as_ref() != Some(&bytes) {
                self.append(TABLE_STATE, &bytes)?;
                self.last_table = Some(bytes);
            }
        }
        Ok(())
    }

    /// Writes the index and closes the file; returns the dispatches written.
    pub fn finish(self) -> anyhow::Result<u64> {
        self.writer
            .finish()
            .with_context(|| format!("finishing {}", self.path.display()))?;
        Ok(self.dispatches)
    }
}

/// A short text of a section, for the commands' output.
pub fn section_line(s: &InstrumentedReport) -> String {
    let c = s.counters;
    format!(
        "{} lanes, {} accesses (guest {}, lds {}, scratch {}, bound {}), {} lookups ({} misses), {} escapes ({} logged, {} not), {} captured ({} not kept), control {}",
        s.lanes,
        c.guest + c.lds + c.scratch + c.bound,
        c.guest,
        c.lds,
        c.scratch,
        c.bound,
        c.lookups,
        c.misses,
        c.escapes,
        s.escapes.len(),
        s.escapes_not_logged,
        s.captured.len(),
        s.captured_not_logged,
        match s.control {
            ControlStatus::Fired => "fired",
            ControlStatus::NotFired => "NOT FIRED (the instrumentation is not validated)",
        }
    )
}

/// `dispatchscope pass`: runs the pass for `--frames` frames and writes the capture.
pub fn pass_cmd(args: &PassArgs) -> anyhow::Result<()> {
    if args.frames == 0 {
        return Err(BadInput("--frames 0: at least one frame".into()).into());
    }
    let res = args.resolution;
    let mut runner = PassRunner::new(res, &args.pass)?;
    eprintln!(
        "dispatchscope pass: {}x{} on {} ({} variant), {} frames",
        res.width,
        res.height,
        runner.device_name(),
        runner.variant.name(),
        args.frames
    );
    let mut capture = PassCapture::create(&args.output, &runner, res)?;
    let mut tap = Tap::detached();
    let mut total = 0u64;
    for f in 0..args.frames {
        let (input, frame, fig) = runner.frame(&mut tap)?;
        total += fig.accesses;
        let section_bytes = frame
            .report
            .instrumented
            .as_ref()
            .map(|s| serde_json::to_vec(s).map_or(0, |v| v.len()));
        eprintln!(
            "  frame {f}: {:.1} ms ({:.1} ms on the device{}){}",
            fig.frame.as_secs_f64() * 1e3,
            fig.gpu.as_secs_f64() * 1e3,
            if frame.run.timestamps {
                ""
            } else {
                ", host clock"
            },
            section_bytes.map_or(String::new(), |b| format!(
                "; section {b} bytes of JSON, built in {:.2} ms",
                frame.section_build.as_secs_f64() * 1e3
            ))
        );
        if let Some(s) = &frame.report.instrumented {
            eprintln!("    {}", section_line(s));
        }
        if args.pass.check {
            eprintln!("    captured lanes agree with the CPU reference (values, escapes, marks)");
        }
        let record = DispatchRecord {
            input,
            report: Some(frame.report),
        };
        capture.dispatch(&record, runner.host())?;
    }
    let n = capture.finish()?;
    crate::outln!(
        "wrote {}: {n} dispatches ({} frames of the pass and the setup dispatch), {total} accesses counted on the device",
        args.output.display(),
        args.frames
    )?;
    Ok(())
}

/// `dispatchscope demo --resolution WxH`: the pass every frame through `tap`, until `frames` (or
/// forever), paced to `fps`; frame time and the device's time on stderr every few seconds.
pub fn demo_pass(
    tap: &mut Tap,
    res: Resolution,
    opts: &PassOptions,
    frames: Option<u64>,
    fps: Option<f64>,
) -> anyhow::Result<()> {
    let mut runner = PassRunner::new(res, opts)?;
    eprintln!(
        "  the traversal pass at {}x{} on {} ({} variant), one dispatch a frame",
        res.width,
        res.height,
        runner.device_name(),
        runner.variant.name()
    );
    let handle = tap.handle();
    let mut pacer = dispatchscope_demo::Pacer::new(fps);
    let mut window = (Instant::now(), 0u64, Duration::ZERO, Duration::ZERO);
    let mut done = 0u64;
    let mut capturing = runner.selection();
    while frames.is_none_or(|n| done < n) {
        let (_, _, fig) = runner.frame(tap)?;
        if runner.selection() != capturing {
            capturing = runner.selection();
            eprintln!(
                "  from frame {}: capturing {} (the debugger's choice, else --capture-rect)",
                done + 1,
                capturing
            );
        }
        done += 1;
        window.1 += 1;
        window.2 += fig.frame;
        window.3 += fig.gpu;
        let last = frames.is_some_and(|n| done == n);
        if window.0.elapsed() >= Duration::from_secs(3) || last {
            for n in handle.take_notices() {
                eprintln!("  {n}");
            }
            let k = window.1.max(1) as u32;
            let f = handle.figures();
            eprintln!(
                "frame {done} · {:.1} ms a frame · {:.2} ms on the device · {} accesses a frame · {}",
                (window.2 / k).as_secs_f64() * 1e3,
                (window.3 / k).as_secs_f64() * 1e3,
                fig.accesses,
                if f.attached {
                    format!("debugger attached, {} dropped", f.dropped)
                } else {
                    "no debugger".into()
                }
            );
            window = (Instant::now(), 0, Duration::ZERO, Duration::ZERO);
        }
        pacer.wait();
    }
    Ok(())
}
