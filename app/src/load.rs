//! Loading shared by the command line and the window: a sample or capture read from a path,
//! told apart by its first bytes, replayed on the chosen backend, with the one warning a capture
//! cut short gets and the one error type, [`BadInput`], that makes the exit status 2.
//!
//! The subcommand modules and `gui` take what they share from here, never from each other.
//! This module never draws and never parses flags.

use std::io::{Read, Seek};
use std::path::Path;

use anyhow::Context as _;
use clap::ValueEnum;
use dispatchscope_core::FailureKind;
use dispatchscope_core::input::DeviceLimits;
use dispatchscope_core::report::DispatchReport;
use dispatchscope_formats::sample::{Sample, SampleError};
use dispatchscope_formats::session::{self, CaptureFile, Opened};
use dispatchscope_vk::{ContextOptions, VulkanBackend};

/// What is wrong with a form the window shows (the what-if limits, the live breakpoints).
#[derive(Debug, thiserror::Error)]
pub enum FormError {
    /// A field that does not parse.
    #[error("{field}: {error}")]
    Field {
        /// The field's name.
        field: &'static str,
        /// Why.
        error: ArgError,
    },
    /// A number too large for its field.
    #[error("{field} {value} is too large")]
    TooLarge {
        /// The field's name.
        field: &'static str,
        /// The number.
        value: u64,
    },
    /// Every field holds the session's own value: nothing to ask.
    #[error("every field holds the session's own limit: change one to ask what if")]
    NothingChanged,
    /// The limits together are not a device's.
    #[error("{0}")]
    Limits(BadInput),
}

/// An error that is the user's input, not ours: exit status 2.
#[derive(Debug)]
pub struct BadInput(pub String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

/// The note for a capture cut short (a recorder that died mid-write), if `file` was; the CLI
/// prints it as a warning, the window shows it above the panels.
pub fn torn_note<R: Read + Seek>(file: &CaptureFile<R>) -> Option<String> {
    file.torn().map(|t| {
        format!(
            "cut short: {t}; the {} dispatches before it were read (a recorder that stopped mid-write leaves this; nothing before it is lost)",
            file.n_dispatches()
        )
    })
}

/// The note for a file of a live session the disk budget wrote as several files
/// (`dispatchscope_live::store::segment_path`: `name.dscap`, `name.0001.dscap`, ...): which part
/// this is, and where the session goes on. Each file opens on its own; `None` for a file alone.
pub fn parts_note(path: &Path) -> Option<String> {
    use dispatchscope_live::store::segment_path;
    let stem = path.file_stem()?.to_string_lossy().into_owned();
    // `name.0003.dscap` is part 3 of `name.dscap`'s session.
    let (first, part) = match stem.rsplit_once('.') {
        Some((base, n)) if n.len() == 4 && n.bytes().all(|b| b.is_ascii_digit()) => {
            let name = match path.extension() {
                Some(ext) => format!("{base}.{}", ext.to_string_lossy()),
                None => base.to_owned(),
            };
            (path.with_file_name(name), n.parse::<usize>().ok()?)
        }
        _ => (path.to_path_buf(), 0),
    };
    let exists = |n: usize| n == part || segment_path(&first, n).exists();
    let last = (part..).take_while(|&n| exists(n)).last().unwrap_or(part);
    let earliest = (0..=part)
        .rev()
        .take_while(|&n| exists(n))
        .last()
        .unwrap_or(part);
    if last == 0 && part == 0 {
        return None;
    }
    let name = |n: usize| {
        segment_path(&first, n)
            .file_name()
            .map_or_else(String::new, |f| f.to_string_lossy().into_owned())
    };
    let mut note = format!(
        "file {} of a live session recorded under a disk budget as {} to {}; each opens on its own",
        part + 1,
        name(earliest),
        name(last)
    );
    if part < last {
        note.push_str(&format!(", and the session goes on in {}", name(part + 1)));
    }
    if earliest > 0 {
        note.push_str(&format!(
            "; its first {earliest} files are no longer on disk"
        ));
    }
    if part > 0 {
        note.push_str(
            "; this file's first dispatch reads its memory and chunk table from the states the file before it left, and a replay of it lacks the session's memory snapshot",
        );
    }
    Some(note)
}

/// Which backend runs the dispatches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum BackendChoice {
    /// The CPU reference.
    #[default]
    Cpu,
    /// The first Vulkan device with VK_EXT_external_memory_host and bufferDeviceAddress.
    Vulkan,
}

/// Replays `sample` (read from `path`, which errors name) on the chosen backend against `limits`.
pub fn run_sample(
    choice: BackendChoice,
    sample: &Sample,
    path: &Path,
    limits: DeviceLimits,
) -> anyhow::Result<Vec<DispatchReport>> {
    let reports = match choice {
        BackendChoice::Cpu => sample.run_on(limits, dispatchscope_core::CpuBackend::new()),
        BackendChoice::Vulkan => {
            let vk = VulkanBackend::new(&ContextOptions::default())
                .context("opening the Vulkan backend")?;
            sample.run_on(limits, vk)
        }
    };
    reports.map_err(|e| match e.kind() {
        FailureKind::BadInput => BadInput(format!("{}: {e}", path.display())).into(),
        kind => DeviceFailed {
            path: path.display().to_string(),
            kind,
            error: e,
        }
        .into(),
    })
}

/// A replay the engine or its device could not finish: not the user's input (exit status 1, not
/// 2), its kind named first, so that a lost device reads apart from exhausted memory.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {kind}: {error}")]
pub struct DeviceFailed {
    /// The session file.
    pub path: String,
    /// What kind of failure ([`SampleError::kind`]).
    pub kind: FailureKind,
    /// The step that failed, and why.
    pub error: SampleError,
}

/// A session file opened for the CLI: its sample (inputs) and any reports it recorded.
pub struct Loaded {
    /// The steps.
    pub sample: Sample,
    /// Reports a capture recorded, one per dispatch (empty for samples).
    pub recorded: Vec<Option<DispatchReport>>,
    /// The device's loss, when a capture ends with one (its DEVICE_LOSS record).
    pub loss: Option<dispatchscope_core::report::DeviceLossReport>,
}

/// Opens a sample or capture, naming the file in any error; a capture cut short is read up to
/// where it stops, with [`torn_note`] printed as a warning.
pub fn load(path: &Path) -> anyhow::Result<Loaded> {
    match session::open(path).map_err(|e| BadInput(e.to_string()))? {
        Opened::Sample(sample) => Ok(Loaded {
            sample,
            recorded: Vec::new(),
            loss: None,
        }),
        Opened::Capture(mut c) => {
            let torn = torn_note(&c);
            let (sample, recorded) = c.to_sample().map_err(|e| BadInput(e.to_string()))?;
            if let Some(note) = torn {
                eprintln!("dispatchscope: warning: {}: {note}", path.display());
            }
            if let Some(note) = parts_note(path) {
                eprintln!("dispatchscope: note: {}: {note}", path.display());
            }
            let loss = c.loss().cloned();
            Ok(Loaded {
                sample,
                recorded,
                loss,
            })
        }
    }
}

/// A value on the command line that is not what its flag takes: what every `value_parser` of the
/// app returns (`parse_number`, `pass_demo::parse_resolution`, `pass_demo::parse_rect`,
/// `gui::parse_size`), each naming the text it was given.
#[derive(Debug, thiserror::Error)]
pub enum ArgError {
    /// Not a number.
    #[error("{text:?} is not a number (decimal or 0x…)")]
    NotANumber {
        /// The text given.
        text: String,
    },
    /// Not a resolution.
    #[error("{text:?} is not WIDTHxHEIGHT (e.g. 1920x1080)")]
    NotAResolution {
        /// The text given.
        text: String,
    },
    /// A part that is not a whole number.
    #[error("{text:?}: {part:?} is not a whole number")]
    NotWhole {
        /// The text given.
        text: String,
        /// The part.
        part: String,
    },
    /// A grid no pass has.
    #[error("{text:?}: {error}")]
    Grid {
        /// The text given.
        text: String,
        /// Why.
        #[source]
        error: dispatchscope_core::instrument::InstrumentError,
    },
    /// Not a rectangle.
    #[error("{text:?} is not X0,Y0,X1,Y1 (four whole numbers)")]
    NotARect {
        /// The text given.
        text: String,
    },
    /// An empty rectangle.
    #[error("{text:?}: the rectangle is empty (X0 < X1 and Y0 < Y1)")]
    EmptyRect {
        /// The text given.
        text: String,
    },
    /// Not a size.
    #[error("{text:?} is not a size: give bytes, or a number with K, M, G or T")]
    NotASize {
        /// The text given.
        text: String,
    },
    /// A size's unit that is not one.
    #[error("{text:?}: {unit:?} is not a unit: use K, M, G or T")]
    NotAUnit {
        /// The text given.
        text: String,
        /// The unit.
        unit: String,
    },
    /// A size no disk holds.
    #[error("{text:?} is not a size a disk holds")]
    SizeOutOfRange {
        /// The text given.
        text: String,
    },
}

/// A number on the command line, decimal or `0x…` (clap's `value_parser` for every numeric flag).
pub fn parse_number(s: &str) -> Result<u64, ArgError> {
    dispatchscope_core::addr::parse_u64(s).ok_or_else(|| ArgError::NotANumber { text: s.into() })
}

/// `--min-storage-buffer-offset-alignment A`, checked as Vulkan bounds it: a power of two of at
/// most 256.
pub fn check_alignment(a: u64) -> Result<(), BadInput> {
    if a.is_power_of_two() && a <= 256 {
        return Ok(());
    }
    Err(BadInput(format!(
        "--min-storage-buffer-offset-alignment {a:#x}: Vulkan requires a power of two of at most 256"
    )))
}

/// The planning limits' flags (O5, O7) of `explain` and `diff`, written once: a re-plan against
/// other limits changes no engine state, so both subcommands take them the same way.
#[derive(Clone, Copy, Debug, Default, clap::Args)]
pub struct PlanLimitArgs {
    /// Plan against another minStorageBufferOffsetAlignment (O7), e.g. 256 or 0x100.
    #[arg(long, value_parser = parse_number)]
    pub min_storage_buffer_offset_alignment: Option<u64>,
    /// Plan against another maxStorageBufferRange (O5).
    #[arg(long, value_parser = parse_number)]
    pub max_storage_buffer_range: Option<u64>,
}

impl PlanLimitArgs {
    /// Whether either flag is given.
    pub fn any(&self) -> bool {
        self.min_storage_buffer_offset_alignment.is_some()
            || self.max_storage_buffer_range.is_some()
    }

    /// Sets the limits given in `limits`, the alignment checked as Vulkan bounds it
    /// ([`check_alignment`]).
    pub fn apply_to(&self, limits: &mut DeviceLimits) -> Result<(), BadInput> {
        if let Some(a) = self.min_storage_buffer_offset_alignment {
            check_alignment(a)?;
            limits.min_storage_buffer_offset_alignment = a;
        }
        if let Some(m) = self.max_storage_buffer_range {
            limits.max_storage_buffer_range = m;
        }
        Ok(())
    }
}

/// The what-if's limits, as `diff FILE --LIMIT` and the window's What if… dialog take them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WhatIfLimits {
    /// minStorageBufferOffsetAlignment (O7).
    pub min_storage_buffer_offset_alignment: Option<u64>,
    /// maxStorageBufferRange (O5).
    pub max_storage_buffer_range: Option<u64>,
    /// The chunk table's probe bound (T2).
    pub probe_bound: Option<u64>,
    /// The host's page size in bytes.
    pub host_page_bytes: Option<u64>,
}

impl WhatIfLimits {
    /// Whether any limit is set.
    pub fn any(&self) -> bool {
        *self != WhatIfLimits::default()
    }

    /// The planning limits among them (O5, O7), which a re-plan changes without a replay.
    pub fn plan(&self) -> dispatchscope_analysis::what_if::PlanLimits {
        dispatchscope_analysis::what_if::PlanLimits {
            min_storage_buffer_offset_alignment: self.min_storage_buffer_offset_alignment,
            max_storage_buffer_range: self.max_storage_buffer_range,
        }
    }

    /// `base` with every limit set, each checked by name: the alignment as Vulkan bounds it
    /// ([`check_alignment`]), the probe bound in 32 bits, and the whole by
    /// [`DeviceLimits::check`] (limits no device has).
    pub fn apply(&self, base: &DeviceLimits) -> Result<DeviceLimits, BadInput> {
        if let Some(a) = self.min_storage_buffer_offset_alignment {
            check_alignment(a)?;
        }
        let mut l = self.plan().apply(base);
        if let Some(p) = self.probe_bound {
            l.probe_bound = u32::try_from(p)
                .map_err(|_| BadInput(format!("--probe-bound {p}: more than 2^32 - 1")))?;
        }
        if let Some(h) = self.host_page_bytes {
            l.host_page_bytes = h;
        }
        l.check()
            .map_err(|e| BadInput(format!("the limits asked for describe no device: {e}")))?;
        Ok(l)
    }
}
