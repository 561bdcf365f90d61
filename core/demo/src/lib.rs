//! The demo target: a frame loop that drives an [`Engine`] through a [`Tap`] the way a game's
//! emulator would, so that a debugger has something real to attach to (`dispatchscope demo`).
//!
//! The scene is procedural and deterministic for a seed. Every value in it is ours; only the
//! shapes follow the decision records' cases (the GTA V ray traversal programs and run 305's buffers).
//!
//! Guest memory (every address ours):
//! - `0x6_0000_0000`, 1 page: instance descriptors, 64 bytes each (words 0–1: the bottom level's
//!   base; 2: the instance id; 3: a mask; 4–15: a transform). Instance 16 names a bottom level at
//!   `0x6_6000_0000`, which no reservation holds.
//! - `0x6_1000_0000`, 16 pages: bottom levels 0–11, one page of 64 nodes each.
//! - `0x6_4000_0000`, 8 pages: streamed bottom levels 12–15 in pages 0–3; pages 5–7 are where the
//!   memory events happen.
//! - `0x6_2000_0000`, 2 pages: the hit buffer; page 0 is protected target 7 ("reflection texture").
//! - `0x6_3000_0000`, 1 page: the camera constants. `0x6_5000_0000`, 4 pages: an upload ring,
//!   released and reserved again every 32 frames. `0x2_0000_0000`, 256 KiB: the bound buffers.
//!
//! One frame, in order:
//! 1. Memory events by the frame's phase (frame mod 16): 0 guard the instances (D824); 1 decommit
//!    stream page 5, 3 commit it again (a D968 revisit maps it); 5 lower stream page 7's host
//!    protection to read, 6 make page 6 unreadable (the generation moves; the remap leaves page 7
//!    out, M3), 11 raise page 7 to read-write (a revisit maps it), 13 make page 6 readable again
//!    (the generation moves). Every frame: a CPU write to one instance's transform, a deferred
//!    copy into the hit buffer (C3), and target 7 made again if a store distrusted it (C2).
//! 2. `0x400003e19200` or `0x400003e1ac00` (alternating), bound: run 305's 0x20-byte written range
//!    that a 0xe40f-byte written range ends inside (D953, one set, widened).
//! 3. `0x400003d88400`, bound: a 4-byte written range inside a 0x94-byte range.
//! 4. `0x74005b854a00` and `0x74005b857200`, device-addressed (D753, D758): rays read their
//!    instance with `s_load_dwordx16` from a computed address, push to an LDS stack through the
//!    flat aperture `0x80000000`, then per level read a node (`image_bvh_intersect_ray`), a
//!    `buffer_load_dwordx2` through an unresolved slot whose base the instance names, and keep
//!    their stack in scratch through the flat aperture `0x70000000`; each stores its hit.
//! 5. `0x74005b7e8600`, device-addressed: shades from the hits, a format load through an
//!    unresolved descriptor (W2) from the upload ring, stores through a resolved slot (O8).
//! 6. Every 32nd frame the upload ring is released (it waits for the shading dispatch, M5) and
//!    reserved again; every frame ends with a retire.
//!
//! 7. With [`DemoConfig::dispatches_per_frame`] above the scene's own 5, passes 2–5 again in turn
//!    (update, inside, primary, secondary, shade) until the frame has made that many.
//!
//! Now and then (every [`DemoConfig::refusal_every`] frames, at the middle of the period) a
//! refusal: alternately the update pass's member misaligned by 4 bytes (O7) and an extra compaction
//! pass storing through a format descriptor it cannot resolve (W2); and every
//! [`DemoConfig::escape_every`] frames (a fifth into the period) an escape: one ray enters
//! instance 16, whose bottom level no reservation holds (T4).
//!
//! This module never opens a socket itself (the [`Tap`] does) and never draws.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dispatchscope_core::addr::ByteRange;
use dispatchscope_core::engine::{DeviceRun, HolderRun, Prepared, RanOn as Ran};
use dispatchscope_core::engine::{Engine, EngineError};
use dispatchscope_core::input::{
    Access, AccessKind, DeviceLimits, DispatchInput, DispatchKind, Format, Op, Reason, Slot,
};
use dispatchscope_core::input::{Backing, Event, HostProtection};
use dispatchscope_core::instrument::{DEFAULT_ESCAPE_CAPACITY, Grid, section_of_reference};
use dispatchscope_core::report::{DispatchReport, Mode};
use dispatchscope_formats::generate::Rng;
use dispatchscope_formats::sample::{Program, Sample};
use dispatchscope_live::Tap;

const PAGE: u64 = 0x1000;
/// Instance descriptors.
pub const INSTANCES: u64 = 0x6_0000_0000;
/// Bottom levels 0–11.
pub const BOTTOM_LEVELS: u64 = 0x6_1000_0000;
/// Streamed bottom levels 12–15, and the pages the memory events move.
pub const STREAM: u64 = 0x6_4000_0000;
/// The hit buffer; its first page is protected target [`TARGET_ID`].
pub const HITS: u64 = 0x6_2000_0000;
/// Camera constants.
pub const CAMERA: u64 = 0x6_3000_0000;
/// The upload ring, released and reserved again every 32 frames.
pub const UPLOAD: u64 = 0x6_5000_0000;
/// Where instance 16's bottom level would be: no reservation holds it.
pub const MISSING: u64 = 0x6_6000_0000;
/// The bound buffers.
pub const BUFFERS: u64 = 0x2_0000_0000;
/// The protected target over the hit buffer's first page.
pub const TARGET_ID: u32 = 7;
/// The instance whose bottom level is missing.
pub const ESCAPING_INSTANCE: u64 = 16;

/// The primary ray traversal program.
pub const PRIMARY: u64 = 0x7400_5b85_4a00;
/// The secondary ray traversal program.
pub const SECONDARY: u64 = 0x7400_5b85_7200;
/// The shading program.
pub const SHADE: u64 = 0x7400_5b7e_8600;
/// Run 305's first overlapping-buffers program.
pub const UPDATE_A: u64 = 0x4000_03e1_9200;
/// Run 305's second overlapping-buffers program.
pub const UPDATE_B: u64 = 0x4000_03e1_ac00;
/// Run 305's four-bytes-inside program.
pub const INSIDE: u64 = 0x4000_03d8_8400;
/// The compaction pass that stores through an unresolved format descriptor (W2, refused).
pub const COMPACT: u64 = 0x4000_0410_0400;

const LDS_FLAT: u64 = 0x8000_0000 << 32;
const SCRATCH_FLAT: u64 = 0x7000_0000 << 32;
const N_INSTANCES: u64 = 17;
const NODES_PER_LEVEL: u64 = PAGE / 64;

/// How the demo behaves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DemoConfig {
    /// The seed of the scene and the rays.
    pub seed: u64,
    /// A refusal every this many frames (0: never).
    pub refusal_every: u64,
    /// An escape every this many frames (0: never).
    pub escape_every: u64,
    /// Rays per primary pass (the secondary pass has half); at most 64.
    pub rays: u32,
    /// Levels each ray walks.
    pub depth: u32,
    /// Dispatches a frame makes: the scene's own passes (5, or 6 with a compaction pass), then
    /// its update, inside, ray and shading passes again in turn until there are this many (a
    /// game's frame makes hundreds; `dispatchscope demo` makes [`GAME_DISPATCHES_PER_FRAME`]).
    pub dispatches_per_frame: u32,
    /// What each dispatch carries to the tap.
    pub streams: Streams,
}

/// What each of the demo's dispatches carries to its [`Tap`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Streams {
    /// Every dispatch run by the CPU reference with its executed access list: the oracle the
    /// tests assert on, and what a sample or a capture with access lists holds.
    #[default]
    AccessLists,
    /// What a real emulator streams (`dispatchscope demo` and the window, issue 31): a bound pass
    /// goes through [`Engine::prepare`] and [`Engine::complete`] with its holders' bytes as the
    /// demo's device left them (the plan, the hand-off and the write-back; no access list); a
    /// device-addressed pass carries the instrumented section its accesses give
    /// ([`dispatchscope_core::instrument::section_of_reference`]) in place of the list.
    Game,
}

/// Dispatches a frame of the scene's own passes makes (without the compaction pass).
pub const BASE_DISPATCHES_PER_FRAME: u32 = 5;
/// What `dispatchscope demo` makes a frame by default: at 60 frames a second, 12,000 dispatches a
/// second, a game's rate.
pub const GAME_DISPATCHES_PER_FRAME: u32 = 200;

impl Default for DemoConfig {
    fn default() -> Self {
        Self {
            seed: 1,
            refusal_every: 50,
            escape_every: 50,
            rays: 16,
            depth: 3,
            dispatches_per_frame: BASE_DISPATCHES_PER_FRAME,
            streams: Streams::AccessLists,
        }
    }
}

/// What one frame did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameSummary {
    /// The frame's number, from 0.
    pub frame: u64,
    /// Dispatches it ran.
    pub dispatches: u64,
    /// Events it applied.
    pub events: u64,
    /// Dispatches refused.
    pub refused: u64,
    /// Escapes.
    pub escapes: u64,
}

/// The demo's device: the defaults, named.
pub fn demo_limits() -> DeviceLimits {
    DeviceLimits {
        name: "ours: the demo target's device (cpu reference)".into(),
        ..DeviceLimits::default()
    }
}

/// The demo game; see the module docs.
pub struct Demo {
    engine: Engine,
    config: DemoConfig,
    frame: u64,
    rng: Rng,
    started: bool,
    /// The game thread's time in the tap's calls, a dispatch, over the last frame (game mode).
    tap_times: Vec<u32>,
}

fn every(period: u64, frame: u64, offset: u64) -> bool {
    period > 0 && frame % period == offset % period
}

fn range(start: u64, pages: u64) -> ByteRange {
    ByteRange::new(start, start + pages * PAGE)
}

fn bottom_level(k: u64) -> u64 {
    match k {
        0..12 => BOTTOM_LEVELS + k * PAGE,
        12..16 => STREAM + (k - 12) * PAGE,
        _ => MISSING,
    }
}

fn words(w: &[u32]) -> Vec<u8> {
    w.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn access(lane: u32, pc: u64, kind: AccessKind, op: Op, size_bytes: u32) -> Access {
    Access {
        wave: lane / 32,
        lane: lane % 32,
        pc,
        ..Access::new(kind, op, size_bytes)
    }
}

fn at(mut a: Access, address: u64) -> Access {
    a.address = Some(address);
    a
}

fn through(mut a: Access, slot: u32, offset: u64) -> Access {
    a.slot = Some(slot);
    a.offset = Some(offset);
    a
}

fn storing(mut a: Access, values: Vec<u32>) -> Access {
    a.values = values;
    a
}

/// The sample whose programs' code the demo's ray-traversal and shading programs carry.
pub const PROGRAMS_SAMPLE: &str = "ray-traversal.json";

/// The machine code of the demo's programs that have code: [`PRIMARY`], [`SECONDARY`] and
/// [`SHADE`], the shipped ray-traversal sample's programs (RDNA2 code assembled with llvm-mc-14
/// from `core/rdna/tools/ray_traversal.s`; the demo's addresses are the sample's). The run 305
/// passes have none. The demo hands them to its tap when it sets up, so an attached debugger
/// receives each once before the first dispatch that names it.
pub fn demo_programs() -> Vec<Program> {
    dispatchscope_formats::shipped::sample_text(PROGRAMS_SAMPLE)
        .and_then(|text| Sample::from_json(text).ok())
        .map(|s| s.programs)
        .unwrap_or_default()
}

impl Demo {
    /// A demo on the CPU reference.
    pub fn new(config: DemoConfig) -> Result<Self, EngineError> {
        let rng = Rng::new(config.seed);
        Ok(Self {
            engine: Engine::cpu(demo_limits())?,
            config,
            frame: 0,
            rng,
            started: false,
            tap_times: Vec::new(),
        })
    }

    /// The engine, as it stands between frames.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// In [`Streams::Game`], the time each dispatch of the last frame spent in the tap's calls
    /// ([`Tap::before_prepare`], [`Tap::after_prepare`] and [`Tap::after_complete`]), in
    /// nanoseconds: the tap's cost on
    /// the game thread, attached or not, as a game would measure it around its own calls.
    pub fn tap_times_ns(&self) -> &[u32] {
        &self.tap_times
    }

    /// The number the next frame will have.
    pub fn next_frame(&self) -> u64 {
        self.frame
    }

    fn setup(&mut self, tap: &mut Tap) -> Result<u64, EngineError> {
        for p in demo_programs() {
            tap.add_program(p.address, &p.code);
        }
        let rw = |r: ByteRange| Event::Reserve {
            range: r,
            readable: true,
            writable: true,
            committed: true,
            backing: Backing::Private,
            host_base: None,
        };
        let events = [
            rw(range(INSTANCES, 1)),
            rw(range(BOTTOM_LEVELS, 16)),
            rw(range(STREAM, 8)),
            rw(range(HITS, 2)),
            rw(range(CAMERA, 1)),
            rw(range(UPLOAD, 4)),
            rw(range(BUFFERS, 0x40)),
            Event::AddTarget {
                id: TARGET_ID,
                name: "reflection texture".into(),
                range: range(HITS, 1),
            },
        ];
        for e in &events {
            tap.apply(&mut self.engine, e)?;
        }
        for k in 0..N_INSTANCES {
            let base = bottom_level(k);
            let mut w = vec![base as u32, (base >> 32) as u32, k as u32, 0xff];
            w.extend((0..12).map(|i| (1.0f32 + (k * 12 + i) as f32).to_bits()));
            self.engine.load_contents(INSTANCES + k * 64, &words(&w));
        }
        for k in 0..16 {
            let mut level = Vec::with_capacity(PAGE as usize);
            for n in 0..NODES_PER_LEVEL {
                let mut w = vec![
                    ((n * 5 + 1) % NODES_PER_LEVEL) as u32,
                    ((n * 7 + 3) % NODES_PER_LEVEL) as u32,
                    k as u32,
                    n as u32,
                ];
                w.extend((0..12).map(|_| self.rng.next_u64() as u32));
                level.extend(words(&w));
            }
            self.engine.load_contents(bottom_level(k), &level);
        }
        self.engine.load_contents(
            CAMERA,
            &words(&[
                1.0f32.to_bits(),
                2.0f32.to_bits(),
                3.0f32.to_bits(),
                4.0f32.to_bits(),
            ]),
        );
        let ring: Vec<u8> = (0..0x1100u32).map(|i| (i * 7) as u8).collect();
        self.engine.load_contents(UPLOAD, &ring);
        Ok(events.len() as u64)
    }

    /// Runs one frame through `tap`.
    pub fn frame(&mut self, tap: &mut Tap) -> Result<FrameSummary, EngineError> {
        self.frame_with(tap, |_, _| {})
    }

    /// Runs one frame through `tap`, showing `each` every dispatch's input and report.
    pub fn frame_with(
        &mut self,
        tap: &mut Tap,
        mut each: impl FnMut(&DispatchInput, &DispatchReport),
    ) -> Result<FrameSummary, EngineError> {
        self.frame_each(tap, |_, input, report| each(input, report))
    }

    /// [`Self::frame_with`], showing `each` the engine too, as each dispatch left it (before the
    /// frame's later events): what a test's oracle of the target's state reads.
    pub fn frame_each(
        &mut self,
        tap: &mut Tap,
        mut each: impl FnMut(&Engine, &DispatchInput, &DispatchReport),
    ) -> Result<FrameSummary, EngineError> {
        let f = self.frame;
        let mut summary = FrameSummary {
            frame: f,
            ..FrameSummary::default()
        };
        if !self.started {
            summary.events += self.setup(tap)?;
            self.started = true;
        }
        let mut events = Vec::new();
        match f % 16 {
            0 => events.push(Event::Guard {
                range: range(INSTANCES, 1),
            }),
            1 => events.push(Event::Decommit {
                range: range(STREAM + 5 * PAGE, 1),
            }),
            3 => events.push(Event::Commit {
                range: range(STREAM + 5 * PAGE, 1),
            }),
            5 => events.push(Event::HostProtect {
                range: range(STREAM + 7 * PAGE, 1),
                protection: HostProtection::Read,
            }),
            6 => events.push(Event::Protect {
                range: range(STREAM + 6 * PAGE, 1),
                readable: false,
                writable: false,
            }),
            11 => events.push(Event::HostProtect {
                range: range(STREAM + 7 * PAGE, 1),
                protection: HostProtection::ReadWrite,
            }),
            13 => events.push(Event::Protect {
                range: range(STREAM + 6 * PAGE, 1),
                readable: true,
                writable: true,
            }),
            _ => {}
        }
        let k = f % 16;
        let transform: Vec<u32> = (0..12)
            .map(|i| (f as f32 * 0.01 + i as f32).to_bits())
            .collect();
        events.push(Event::Write {
            address: INSTANCES + k * 64 + 16,
            bytes: words(&transform),
        });
        events.push(Event::DeferCopy {
            address: HITS + PAGE + (f % 64) * 16,
            bytes: words(&[f as u32, 1, 2, 3]),
        });
        if self
            .engine
            .memory()
            .targets()
            .any(|t| t.id == TARGET_ID && !t.trusted)
        {
            events.push(Event::RemoveTarget { id: TARGET_ID });
            events.push(Event::AddTarget {
                id: TARGET_ID,
                name: "reflection texture".into(),
                range: range(HITS, 1),
            });
        }
        for e in &events {
            tap.apply(&mut self.engine, e)?;
        }
        summary.events += events.len() as u64;

        let period = self.config.refusal_every;
        let refusal = every(period, f, period / 2);
        let misaligned = refusal && (f / period.max(1)).is_multiple_of(2);
        let compact = refusal && !misaligned;
        let escape = every(self.config.escape_every, f, self.config.escape_every / 5);
        let rays = self.config.rays.clamp(1, 64);
        let mut inputs = vec![
            self.update_pass(f, misaligned),
            self.inside_pass(f),
            self.ray_pass(PRIMARY, "primary rays", rays, 0, escape),
            self.ray_pass(SECONDARY, "secondary rays", (rays / 2).max(1), 64, false),
            self.shade_pass(f),
        ];
        if compact {
            inputs.push(self.compact_pass());
        }
        self.tap_times.clear();
        let mut extra = 0u32;
        while inputs.len() < self.config.dispatches_per_frame as usize {
            let input = match extra % 5 {
                0 => self.update_pass(f, false),
                1 => self.inside_pass(f),
                2 => self.ray_pass(PRIMARY, "primary rays", rays, 0, false),
                3 => self.ray_pass(SECONDARY, "secondary rays", (rays / 2).max(1), 64, false),
                _ => self.shade_pass(f),
            };
            inputs.push(input);
            extra += 1;
        }
        for input in &inputs {
            let (report, sent) = match self.config.streams {
                Streams::AccessLists => (tap.dispatch(&mut self.engine, input)?, None),
                Streams::Game => {
                    let shell = DispatchInput {
                        accesses: Vec::new(),
                        ..input.clone()
                    };
                    (self.dispatch_as_game(tap, input, &shell)?, Some(shell))
                }
            };
            each(&self.engine, sent.as_ref().unwrap_or(input), &report);
            summary.dispatches += 1;
            summary.refused += u64::from(report.mode == Mode::Refused);
            summary.escapes += report
                .escapes
                .len()
                .max(report.instrumented.as_ref().map_or(0, |s| s.escapes()))
                as u64;
        }
        let mut after = Vec::new();
        if f % 32 == 31 {
            after.push(Event::Release { base: UPLOAD });
            after.push(Event::Reserve {
                range: range(UPLOAD, 4),
                readable: true,
                writable: true,
                committed: true,
                backing: Backing::Private,
                host_base: None,
            });
            let ring: Vec<u8> = (0..0x1100u32).map(|i| (i * 7 + f as u32) as u8).collect();
            after.push(Event::Write {
                address: UPLOAD,
                bytes: ring,
            });
        }
        after.push(Event::Retire);
        for e in &after {
            tap.apply(&mut self.engine, e)?;
        }
        summary.events += after.len() as u64;
        self.frame += 1;
        Ok(summary)
    }

    /// Runs `input` as a game's emulator would and hands the tap what it would have: `shell` is
    /// `input` without its access list, which only the demo's stand-in device reads.
    fn dispatch_as_game(
        &mut self,
        tap: &mut Tap,
        input: &DispatchInput,
        shell: &DispatchInput,
    ) -> Result<DispatchReport, EngineError> {
        let started = Instant::now();
        tap.before_prepare(&self.engine, shell);
        let mut tap_time = started.elapsed();
        let index = self.engine.next_dispatch();
        let mut result = if device_addressed(input) {
            // A device-addressed pass: the device runs the instrumented variant; here the CPU
            // reference runs the accesses and its counts stand in for the device's buffer.
            let lanes = input
                .accesses
                .iter()
                .map(|a| a.wave * 32 + a.lane + 1)
                .max();
            let grid = reference_grid(lanes.unwrap_or(1));
            self.engine.dispatch(input).map(|mut report| {
                report.instrumented = Some(section_of_reference(
                    &report,
                    grid,
                    DEFAULT_ESCAPE_CAPACITY as usize,
                ));
                report.accesses = Vec::new();
                report.escapes = Vec::new();
                report.hazards = Vec::new();
                report
            })
        } else {
            self.engine.prepare(shell).and_then(|prepared| {
                let told = Instant::now();
                tap.after_prepare(&prepared);
                tap_time += told.elapsed();
                let holders = holders_after(&self.engine, &prepared, input);
                let run = DeviceRun {
                    holders: holders
                        .iter()
                        .map(|(slot, data, masks)| HolderRun {
                            slot: *slot,
                            data,
                            masks,
                        })
                        .collect(),
                    ran_on: Some(DEMO_DEVICE),
                    ..DeviceRun::default()
                };
                self.engine.complete(shell, prepared, Ran::Device(run))
            })
        };
        let started = Instant::now();
        tap.after_complete(&self.engine, shell, index, &mut result);
        tap_time += started.elapsed();
        self.tap_times
            .push(u32::try_from(tap_time.as_nanos()).unwrap_or(u32::MAX));
        result
    }

    /// Run 305: a 0x20-byte written range that a 0xe40f-byte written range ends inside.
    fn update_pass(&mut self, f: u64, misaligned: bool) -> DispatchInput {
        let (program, base) = if f.is_multiple_of(2) {
            (UPDATE_A, BUFFERS)
        } else {
            (UPDATE_B, BUFFERS + 0x10000)
        };
        let member = base + 0xf400 + if misaligned { 4 } else { 0 };
        let slots = vec![
            Slot::new(0, base + 0x1000, 0xe40f, true),
            Slot::new(1, member, 0x20, true),
        ];
        let mut accesses = Vec::new();
        let pc = |o: u64| program + 0x100 + o;
        for i in 0..24u32 {
            let a = access(i, pc(0), AccessKind::UntypedBuffer, Op::Store, 8);
            accesses.push(storing(
                through(a, 0, u64::from(i) * 0x600),
                vec![f as u32, i],
            ));
        }
        accesses.push(storing(
            through(
                access(24, pc(8), AccessKind::UntypedBuffer, Op::Store, 8),
                0,
                0xe400,
            ),
            vec![0xaaaa_0001, 0xaaaa_0002],
        ));
        for j in 0..3u32 {
            accesses.push(through(
                access(25 + j, pc(0x10), AccessKind::UntypedBuffer, Op::Load, 8),
                1,
                u64::from(j) * 8,
            ));
        }
        accesses.push(storing(
            through(
                access(28, pc(0x18), AccessKind::UntypedBuffer, Op::Store, 4),
                1,
                0x1c,
            ),
            vec![0xbbbb_0003],
        ));
        accesses.push(through(
            access(0, pc(0x20), AccessKind::UntypedBuffer, Op::Load, 4),
            0,
            0xe40b,
        ));
        let label = if misaligned {
            "run 305 update (ours: member misaligned by 4 bytes)"
        } else {
            "run 305 update"
        };
        DispatchInput {
            kind: DispatchKind::Compute,
            program,
            label: label.into(),
            slots,
            accesses,
            ..DispatchInput::default()
        }
    }

    /// Run 305: a four-byte written range inside a 0x94-byte range.
    fn inside_pass(&mut self, f: u64) -> DispatchInput {
        let slots = vec![
            Slot::new(0, BUFFERS + 0x20000, 0x94, false),
            Slot::new(1, BUFFERS + 0x20040, 4, true),
        ];
        let mut accesses: Vec<Access> = (0..0x94 / 4u32)
            .map(|i| {
                through(
                    access(
                        i % 64,
                        INSIDE + 0x40,
                        AccessKind::UntypedBuffer,
                        Op::Load,
                        4,
                    ),
                    0,
                    u64::from(i) * 4,
                )
            })
            .collect();
        accesses.push(storing(
            through(
                access(0, INSIDE + 0x48, AccessKind::UntypedBuffer, Op::Store, 4),
                1,
                0,
            ),
            vec![f as u32],
        ));
        DispatchInput {
            program: INSIDE,
            label: "run 305 inside".into(),
            slots,
            accesses,
            ..DispatchInput::default()
        }
    }

    /// A ray traversal pass over the two-level hierarchy.
    fn ray_pass(
        &mut self,
        program: u64,
        label: &str,
        rays: u32,
        hit_slot: u64,
        escape: bool,
    ) -> DispatchInput {
        let mut slots = vec![Slot::new(0, CAMERA, 0x10, false)];
        let mut accesses = Vec::new();
        let pc = |o: u64| program + 0x80 + o;
        for ray in 0..rays {
            let lane = ray;
            let k = if escape && ray == 0 {
                ESCAPING_INSTANCE
            } else {
                self.rng.below(16)
            };
            let level = bottom_level(k);
            let slot = 1 + k as u32;
            if !slots.iter().any(|s| s.slot == slot) {
                slots.push(Slot {
                    resolved: false,
                    ..Slot::new(slot, level, PAGE, false)
                });
            }
            accesses.push(through(
                access(lane, pc(0), AccessKind::UntypedBuffer, Op::Load, 16),
                0,
                0,
            ));
            accesses.push(at(
                access(lane, pc(0x10), AccessKind::Scalar, Op::Load, 64),
                INSTANCES + k * 64,
            ));
            accesses.push(storing(
                at(
                    access(lane, pc(0x20), AccessKind::Flat, Op::Store, 4),
                    LDS_FLAT + u64::from(lane) * 64,
                ),
                vec![0],
            ));
            let mut node = self.rng.below(NODES_PER_LEVEL);
            for d in 0..u64::from(self.config.depth) {
                accesses.push(at(
                    access(lane, pc(0x30), AccessKind::RayIntersection, Op::Load, 64),
                    level + node * 64,
                ));
                accesses.push(through(
                    access(lane, pc(0x40), AccessKind::UntypedBuffer, Op::Load, 8),
                    slot,
                    node * 64 + 8,
                ));
                let stack = 0x10 + (d % 64) * 4;
                accesses.push(storing(
                    at(
                        access(lane, pc(0x50), AccessKind::Flat, Op::Store, 4),
                        SCRATCH_FLAT + stack,
                    ),
                    vec![node as u32],
                ));
                accesses.push(through_offset(
                    access(lane, pc(0x58), AccessKind::Scratch, Op::Load, 4),
                    stack,
                ));
                accesses.push(through_offset(
                    access(lane, pc(0x60), AccessKind::Lds, Op::Load, 4),
                    u64::from(lane) * 64,
                ));
                node = (node * 5 + 1 + d) % NODES_PER_LEVEL;
            }
            let hit = HITS + (hit_slot + u64::from(ray)) * 8;
            accesses.push(storing(
                at(
                    access(lane, pc(0x70), AccessKind::Global, Op::Store, 8),
                    hit,
                ),
                vec![k as u32, node as u32],
            ));
        }
        DispatchInput {
            program,
            label: format!("ray traversal, {label}, program {program:#x}"),
            slots,
            reasons: vec![Reason::D753, Reason::D758],
            accesses,
            ..DispatchInput::default()
        }
    }

    /// Shading: hits by address, a format load through an unresolved descriptor, bound stores.
    fn shade_pass(&mut self, f: u64) -> DispatchInput {
        let ring = Slot {
            resolved: false,
            format: Some(Format::R8G8B8A8Unorm),
            stride_bytes: 4,
            index_from_lane: true,
            ..Slot::new(1, UPLOAD, 0x100, false)
        };
        let slots = vec![Slot::new(0, BUFFERS + 0x30000, 0x100, true), ring];
        let mut accesses = Vec::new();
        let pc = |o: u64| SHADE + 0x40 + o;
        for px in 0..16u32 {
            accesses.push(at(
                access(px, pc(0), AccessKind::Global, Op::Load, 8),
                HITS + u64::from(px) * 8,
            ));
            let mut fmt = through(
                access(px, pc(0x10), AccessKind::FormatBuffer, Op::Load, 4),
                1,
                0,
            );
            fmt.index = Some(0);
            accesses.push(fmt);
            accesses.push(at(
                access(px, pc(0x20), AccessKind::Global, Op::Load, 4),
                UPLOAD + PAGE + u64::from(px) * 4,
            ));
            accesses.push(storing(
                through(
                    access(px, pc(0x30), AccessKind::UntypedBuffer, Op::Store, 4),
                    0,
                    u64::from(px) * 4,
                ),
                vec![px + f as u32],
            ));
        }
        DispatchInput {
            program: SHADE,
            label: format!("shading, program {SHADE:#x}"),
            slots,
            reasons: vec![Reason::D753],
            accesses,
            ..DispatchInput::default()
        }
    }

    /// A compaction pass that stores through a format descriptor it cannot resolve: refused (W2).
    fn compact_pass(&mut self) -> DispatchInput {
        let slot = Slot {
            resolved: false,
            format: Some(Format::R32G32B32A32Uint),
            ..Slot::new(0, UPLOAD + 2 * PAGE, 0x100, true)
        };
        let accesses = (0..8u32)
            .map(|i| {
                storing(
                    through(
                        access(i, COMPACT + 0x80, AccessKind::FormatBuffer, Op::Store, 16),
                        0,
                        u64::from(i) * 16,
                    ),
                    vec![i, i + 1, i + 2, i + 3],
                )
            })
            .collect();
        DispatchInput {
            program: COMPACT,
            label: "compaction (ours): a format store through an unresolved descriptor".into(),
            slots: vec![slot],
            reasons: vec![Reason::D753],
            accesses,
            ..DispatchInput::default()
        }
    }
}

fn through_offset(mut a: Access, offset: u64) -> Access {
    a.offset = Some(offset);
    a
}

/// How [`run`] paces frames.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RunOptions {
    /// Stop after this many frames; `None` runs until `stop`.
    pub frames: Option<u64>,
    /// Frames per second to aim at; `None` runs as fast as it can.
    pub fps: Option<f64>,
}

/// What [`run`] reports about once a second.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Rate {
    /// Frames so far.
    pub frames: u64,
    /// Dispatches so far.
    pub dispatches: u64,
    /// Frames per second over the last interval.
    pub frames_per_s: f64,
    /// Dispatches per second over the last interval.
    pub dispatches_per_s: f64,
    /// Refused dispatches so far.
    pub refused: u64,
    /// Escapes so far.
    pub escapes: u64,
    /// Whether a debugger is attached.
    pub attached: bool,
}

/// A frame loop's pacing to a rate (`dispatchscope demo`'s frame loop, [`run`], and its traversal
/// pass, the app's `demo --resolution`): [`Pacer::wait`] after each frame sleeps until the next
/// one is due; a loop far behind (a pause) starts again from now rather than racing to catch up.
#[derive(Clone, Copy, Debug)]
pub struct Pacer {
    frame_time: Option<Duration>,
    next: Instant,
}

impl Pacer {
    /// Pacing to `fps` frames a second; none (or not above 0): no pacing.
    pub fn new(fps: Option<f64>) -> Self {
        Self {
            frame_time: fps
                .filter(|f| *f > 0.0)
                .map(|f| Duration::from_secs_f64(1.0 / f)),
            next: Instant::now(),
        }
    }

    /// Waits until the next frame is due.
    pub fn wait(&mut self) {
        let Some(ft) = self.frame_time else {
            return;
        };
        self.next += ft;
        let now = Instant::now();
        if self.next > now {
            std::thread::sleep(self.next - now);
        } else if now - self.next > ft * 4 {
            self.next = now; // far behind (a pause): do not race to catch up
        }
    }
}

/// Runs frames until `options.frames` or `stop`, calling `each_second` about once a second (and at
/// the end). Returns the figures at the end.
pub fn run(
    demo: &mut Demo,
    tap: &mut Tap,
    options: RunOptions,
    stop: &AtomicBool,
    mut each_second: impl FnMut(&Rate),
) -> Result<Rate, EngineError> {
    let mut rate = Rate::default();
    let mut window = (Instant::now(), 0u64, 0u64);
    let mut pacer = Pacer::new(options.fps);
    while !stop.load(Ordering::Relaxed) && options.frames.is_none_or(|n| rate.frames < n) {
        let s = demo.frame(tap)?;
        rate.frames += 1;
        rate.dispatches += s.dispatches;
        rate.refused += s.refused;
        rate.escapes += s.escapes;
        if window.0.elapsed() >= Duration::from_secs(1) {
            let dt = window.0.elapsed().as_secs_f64();
            rate.frames_per_s = (rate.frames - window.1) as f64 / dt;
            rate.dispatches_per_s = (rate.dispatches - window.2) as f64 / dt;
            rate.attached = tap.is_attached();
            each_second(&rate);
            window = (Instant::now(), rate.frames, rate.dispatches);
        }
        pacer.wait();
    }
    let dt = window.0.elapsed().as_secs_f64().max(1e-9);
    rate.frames_per_s = (rate.frames - window.1) as f64 / dt;
    rate.dispatches_per_s = (rate.dispatches - window.2) as f64 / dt;
    rate.attached = tap.is_attached();
    each_second(&rate);
    Ok(rate)
}

/// The device a game-mode demo names in its bound passes' reports.
const DEMO_DEVICE: &str = "the demo's device (the CPU standing in for a game's GPU)";

/// Whether the demo built `input` as a device-addressed pass (it names D753: an address the host
/// cannot know before the pass runs).
fn device_addressed(input: &DispatchInput) -> bool {
    input.reasons.contains(&Reason::D753)
}

/// The smallest grid of whole workgroups that holds `lanes` lanes, one row of workgroups.
fn reference_grid(lanes: u32) -> Grid {
    let tile = dispatchscope_core::instrument::TILE;
    let groups = lanes.div_ceil(tile * tile).max(1);
    Grid {
        width: groups * tile,
        height: tile,
    }
}

/// Each written holder's bytes as the demo's device leaves them after `input`'s stores, with
/// their write masks (O8, O9): the guest bytes the holder's buffer was uploaded with, then every
/// store through a slot it holds, at the slot's descriptor offset. A store past the buffer is
/// dropped, as robust buffer access does.
fn holders_after(
    engine: &Engine,
    prepared: &Prepared,
    input: &DispatchInput,
) -> Vec<(u32, Vec<u8>, Vec<u8>)> {
    let mut holders: Vec<(u32, Vec<u8>, Vec<u8>)> = prepared
        .bindings
        .iter()
        .filter(|b| {
            b.holder == b.slot
                && prepared
                    .bindings
                    .iter()
                    .any(|m| m.holder == b.slot && m.written)
        })
        .map(|b| {
            let len = (b.buffer.end - b.buffer.start) as usize;
            let mut data = vec![0; len];
            // Bytes the host cannot read are uploaded as zeros.
            let _ = engine.read_guest(b.buffer.start, &mut data);
            (b.slot, data, vec![0; len.div_ceil(4) * 4])
        })
        .collect();
    for a in input.accesses.iter().filter(|a| a.op == Op::Store) {
        let (Some(slot), Some(offset)) = (a.slot, a.offset) else {
            continue;
        };
        let Some(plan) = prepared.bindings.iter().find(|b| b.slot == slot) else {
            continue;
        };
        let Some((_, data, masks)) = holders.iter_mut().find(|h| h.0 == plan.holder) else {
            continue;
        };
        let at = plan.offset_bytes + offset;
        for (w, value) in a.values.iter().enumerate() {
            let pos = at as usize + 4 * w;
            if let Some(word) = data.get_mut(pos..pos + 4) {
                word.copy_from_slice(&value.to_le_bytes());
                masks[pos / 4 * 4..pos / 4 * 4 + 4].copy_from_slice(&u32::MAX.to_le_bytes());
            }
        }
    }
    holders
}
