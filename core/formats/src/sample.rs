//! Samples: a session as readable JSON, what one developer sends another to say "look at this
//! pass". A sample holds a device description, the guest memory's initial contents, and the steps
//! (memory events and dispatches) in the order the emulator took them.
//!
//! [`Sample::from_json`] turns bad input into a [`SampleError`] naming the line, column and JSON
//! path; [`Sample::run`] replays the steps on an [`Engine`]. The format is documented in
//! `samples/README.md`; [`SAMPLE_VERSION`] moves when it changes, and older versions keep loading.

use serde::{Deserialize, Deserializer, Serialize, Serializer, de};
use thiserror::Error;

use dispatchscope_core::addr::bytes_hex;
use dispatchscope_core::addr::hex;
use dispatchscope_core::backend::Backend;
use dispatchscope_core::engine::{Engine, EngineError, FailureKind};
use dispatchscope_core::input::Event;
use dispatchscope_core::input::{DeviceLimits, DispatchInput};
use dispatchscope_core::report::DispatchReport;

/// The `format` field of every sample.
pub const SAMPLE_FORMAT: &str = "dispatchscope.sample";
/// The newest sample version this build writes; it reads every version from 1 to this.
pub use crate::versions::SAMPLE_VERSION;

/// Where a sample's values come from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    /// The decision records and runs the sample restates.
    #[serde(default)]
    pub records: Vec<String>,
    /// The values the record states.
    #[serde(default)]
    pub stated: Vec<String>,
    /// The values that are ours (invented to make the case run).
    #[serde(default)]
    pub ours: Vec<String>,
}

/// Initial guest bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Contents {
    /// First byte.
    #[serde(with = "hex")]
    pub address: u64,
    /// The bytes, as hex text.
    #[serde(with = "bytes_hex")]
    pub bytes: Vec<u8>,
}

/// One step of a session: a memory event or a dispatch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// A memory event between dispatches.
    Event(Event),
    /// A dispatch.
    Dispatch(Box<DispatchInput>),
}

impl Serialize for Step {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct D<'a> {
            dispatch: &'a DispatchInput,
        }
        match self {
            Step::Event(e) => e.serialize(s),
            Step::Dispatch(d) => D { dispatch: d }.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Step {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        if let Some(dispatch) = v.get("dispatch") {
            if v.as_object().is_some_and(|o| o.len() != 1) {
                return Err(de::Error::custom(
                    "a dispatch step holds only the key \"dispatch\"",
                ));
            }
            serde_path_to_error::deserialize::<_, DispatchInput>(dispatch)
                .map(|d| Step::Dispatch(Box::new(d)))
                .map_err(|e| de::Error::custom(format!("at dispatch.{}: {}", e.path(), e.inner())))
        } else if v.get("event").is_some() {
            Event::deserialize(&v)
                .map(Step::Event)
                .map_err(de::Error::custom)
        } else {
            Err(de::Error::custom(
                "a step is either {\"dispatch\": {…}} or an event {\"event\": \"commit\", …}",
            ))
        }
    }
}

/// A saved session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sample {
    /// Always [`SAMPLE_FORMAT`].
    pub format: String,
    /// The sample format version.
    pub version: u32,
    /// A one-line title.
    pub title: String,
    /// What the sample shows.
    #[serde(default)]
    pub description: String,
    /// Where its values come from.
    #[serde(default)]
    pub provenance: Provenance,
    /// The device it ran against.
    #[serde(default)]
    pub device: DeviceLimits,
    /// Initial guest bytes (loaded after the first steps that reserve their pages).
    #[serde(default)]
    pub contents: Vec<Contents>,
    /// Events and dispatches, in order.
    pub steps: Vec<Step>,
    /// The code of the programs the dispatches name, for listings (absent in older samples).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub programs: Vec<Program>,
}

/// One program's code: the bytes at its address, as the guest holds them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Program {
    /// The program's address (the `program` of its dispatches).
    #[serde(with = "hex")]
    pub address: u64,
    /// Its machine code from that address, as hex text.
    #[serde(with = "bytes_hex")]
    pub code: Vec<u8>,
}

/// A sample that cannot be read or run.
#[derive(Debug, Error)]
pub enum SampleError {
    /// Not JSON, or JSON that is not a sample.
    #[error("line {line}, column {column}, at {path}: {message}")]
    Parse {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// JSON path of the value that failed (`steps[3].dispatch.slots[0].size_bytes`).
        path: String,
        /// What was wrong.
        message: String,
    },
    /// The `format` field is not [`SAMPLE_FORMAT`].
    #[error("not a dispatchscope sample: \"format\" is {0:?}, not \"{SAMPLE_FORMAT}\"")]
    NotASample(String),
    /// A newer version than this build reads.
    #[error("sample version {0} is newer than this build reads ({SAMPLE_VERSION})")]
    TooNew(u32),
    /// Version 0, which no build ever wrote.
    #[error(
        "sample version 0 does not exist: versions start at 1 (this build reads 1 to {SAMPLE_VERSION})"
    )]
    VersionZero,
    /// Contents that no reservation holds when they are loaded (before the first dispatch).
    #[error("contents {index} ({len:#x} bytes at {address:#x}): {error}")]
    Contents {
        /// Index into `contents`.
        index: usize,
        /// Where they start.
        address: u64,
        /// How many bytes.
        len: usize,
        /// Why they cannot be loaded.
        error: EngineError,
    },
    /// A step the engine refused as bad input.
    #[error("step {step} ({what}): {error}")]
    Step {
        /// Index into `steps`.
        step: usize,
        /// "dispatch 3" or "event reserve".
        what: String,
        /// Why.
        error: EngineError,
    },
}

impl SampleError {
    /// Its kind: a step or contents the engine failed say the engine's ([`EngineError::kind`]: a
    /// lost device is not bad input); every other error is the sample's, bad input.
    pub fn kind(&self) -> FailureKind {
        match self {
            SampleError::Contents { error, .. } | SampleError::Step { error, .. } => error.kind(),
            _ => FailureKind::BadInput,
        }
    }
}

impl Sample {
    /// Reads a sample from JSON text.
    pub fn from_json(text: &str) -> Result<Self, SampleError> {
        let de = &mut serde_json::Deserializer::from_str(text);
        let sample: Sample = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            SampleError::Parse {
                line: inner.line(),
                column: inner.column(),
                path,
                message: inner.to_string(),
            }
        })?;
        if sample.format != SAMPLE_FORMAT {
            return Err(SampleError::NotASample(sample.format));
        }
        if sample.version == 0 {
            return Err(SampleError::VersionZero);
        }
        if sample.version > SAMPLE_VERSION {
            return Err(SampleError::TooNew(sample.version));
        }
        Ok(sample)
    }

    /// Writes the sample as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// The dispatch steps, in order.
    pub fn dispatches(&self) -> impl Iterator<Item = &DispatchInput> {
        self.steps.iter().filter_map(|s| match s {
            Step::Dispatch(d) => Some(&**d),
            Step::Event(_) => None,
        })
    }

    /// Replays the sample on a fresh engine over `backend` with `limits` (the sample's device,
    /// or an override) and returns one report per dispatch.
    pub fn run_on<B: Backend>(
        &self,
        limits: DeviceLimits,
        backend: B,
    ) -> Result<Vec<DispatchReport>, SampleError> {
        self.run_on_keeping_engine(limits, backend)
            .map(|(reports, _)| reports)
    }

    /// [`Sample::run_on`], keeping the engine too: its guest memory afterwards, its backend.
    pub fn run_on_keeping_engine<B: Backend>(
        &self,
        limits: DeviceLimits,
        backend: B,
    ) -> Result<(Vec<DispatchReport>, Engine<B>), SampleError> {
        let mut engine = Engine::new(limits, backend).map_err(|error| SampleError::Step {
            step: 0,
            what: "device".into(),
            error,
        })?;
        let mut reports = Vec::new();
        self.replay(&mut engine, |_, _, report| reports.push(report))?;
        Ok((reports, engine))
    }

    /// Replays the steps on `engine`, handing each dispatch's report to `each` with the engine as
    /// the dispatch left it (for a debugger that keeps per-dispatch state, such as the table), and
    /// `done` counting the steps taken. Contents load before the first dispatch.
    pub fn replay<B: Backend>(
        &self,
        engine: &mut Engine<B>,
        mut each: impl FnMut(&Engine<B>, usize, DispatchReport),
    ) -> Result<(), SampleError> {
        let mut contents_loaded = false;
        let mut n = 0usize;
        for (i, step) in self.steps.iter().enumerate() {
            if !contents_loaded && matches!(step, Step::Dispatch(_)) {
                for (index, c) in self.contents.iter().enumerate() {
                    engine
                        .try_load_contents(c.address, &c.bytes)
                        .map_err(|error| SampleError::Contents {
                            index,
                            address: c.address,
                            len: c.bytes.len(),
                            error,
                        })?;
                }
                contents_loaded = true;
            }
            match step {
                Step::Event(e) => {
                    engine.apply(e).map_err(|error| SampleError::Step {
                        step: i,
                        what: format!("event {}", e.name()),
                        error,
                    })?;
                }
                Step::Dispatch(d) => {
                    let report = engine.dispatch(d).map_err(|error| SampleError::Step {
                        step: i,
                        what: format!("dispatch {n}"),
                        error,
                    })?;
                    each(engine, i, report);
                    n += 1;
                }
            }
        }
        Ok(())
    }

    /// Replays the sample on the CPU reference against its own device.
    pub fn run(&self) -> Result<Vec<DispatchReport>, SampleError> {
        self.run_on(
            self.device.clone(),
            dispatchscope_core::backend::CpuBackend::new(),
        )
    }
}
