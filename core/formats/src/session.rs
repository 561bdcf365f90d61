//! Sessions on disk: a sample (`.json`) or a capture (binary, [`crate::capture`]), opened the same
//! way, converted either way without loss.
//!
//! A capture holds, in [`crate::capture`] records: a META header (the sample's title, provenance
//! and device as JSON), MEMORY records (initial contents: address, length, bytes; lz4), then one
//! EVENTS record per memory event and one DISPATCH record per dispatch, in the order they happened.
//! A DISPATCH record carries the dispatch's input and, when the recorder had it, its report, so
//! dispatch N can be explained without replaying the rest. Beside them: PROGRAM records
//! ([`PROGRAM`]), the checkpoints of engine state ([`crate::checkpoint`]) and a DEVICE_LOSS record
//! when the device was lost ([`crate::loss`]; [`CaptureFile::loss`]).
//!
//! The rule for record kinds: a reader reads the kinds it knows and skips every other kind below the
//! container's own (0xf0 on, [`crate::capture`]), so a kind added later (DEVICE_LOSS, 0x0a, was) is
//! skipped by an older build, never misread; a kind that changes what an old reader would make of
//! the kinds it knows would need a new capture format version instead. This module never draws and
//! never runs a window; it runs the engine only when asked to replay.

use std::path::Path;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::capture::{
    CaptureError, CaptureReader, CaptureWriter, RecordKind, Torn, write_atomically,
};
use crate::sample::{
    Contents, Provenance, SAMPLE_FORMAT, SAMPLE_VERSION, Sample, SampleError, Step,
};
use dispatchscope_core::input::Event;
use dispatchscope_core::input::{DeviceLimits, DispatchInput};
use dispatchscope_core::report::DispatchReport;

/// The META record of a capture.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureMeta {
    /// Always `"dispatchscope.capture"`.
    pub format: String,
    /// The sample version its steps follow.
    pub sample_version: u32,
    /// Title.
    pub title: String,
    /// Description.
    #[serde(default)]
    pub description: String,
    /// Provenance.
    #[serde(default)]
    pub provenance: Provenance,
    /// The device it ran against.
    pub device: DeviceLimits,
    /// The code of the programs its dispatches name (a sample's `programs`; absent in older captures).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub programs: Vec<crate::sample::Program>,
}

/// A PROGRAM record: one program's code (a [`crate::sample::Program`] as JSON) that became known
/// after the META header was written (a live recording learns programs as dispatches name them).
/// Opening a capture reads every PROGRAM record through the index into [`CaptureMeta::programs`].
pub const PROGRAM: RecordKind = RecordKind(0x07);

/// A DISPATCH record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DispatchRecord {
    /// The dispatch.
    pub input: DispatchInput,
    /// Its report, as the recorder saw it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<DispatchReport>,
}

/// The first bytes of a DISPATCH record kept in the framed form ([`DispatchRecord::to_payload`]):
/// a JSON record never starts with them.
pub use crate::versions::FRAMED_DISPATCH_MAGIC;

impl DispatchRecord {
    /// The record's payload in a capture. A report without an instrumented section is the
    /// record's JSON, as every capture before issue 14 holds. A report with one is framed:
    /// [`FRAMED_DISPATCH_MAGIC`], the JSON's length (u32 LE), the record's JSON without the
    /// section, then the section in [`crate::instrumented`]'s column record, so that its size
    /// stays that of the columns, not of their JSON.
    pub fn to_payload(&self) -> Vec<u8> {
        let Some(section) = self.report.as_ref().and_then(|r| r.instrumented.as_ref()) else {
            return json(self);
        };
        let Ok(columns) = crate::instrumented::encode(section) else {
            return json(self);
        };
        let mut lean = DispatchRecord {
            input: self.input.clone(),
            report: None,
        };
        lean.report = self.report.as_ref().map(|r| DispatchReport {
            instrumented: None,
            ..r.clone()
        });
        let text = json(&lean);
        let mut v = Vec::with_capacity(8 + text.len() + columns.len());
        v.extend_from_slice(&FRAMED_DISPATCH_MAGIC);
        v.extend_from_slice(&(text.len() as u32).to_le_bytes());
        v.extend_from_slice(&text);
        v.extend_from_slice(&columns);
        v
    }

    /// Reads a payload of any form a DISPATCH record has had ([`crate::legacy`]'s table, told
    /// apart by [`crate::legacy::sniff`]): what [`Self::to_payload`] writes, a live recording's
    /// column record ([`crate::columns::encode_record`]) or message record
    /// ([`crate::message::encode_record`]), version 2 included.
    pub fn from_payload(bytes: &[u8]) -> Result<Self, RecordError> {
        use crate::legacy::DispatchForm;
        match crate::legacy::sniff(bytes) {
            DispatchForm::Json => Ok(serde_json::from_slice(bytes)?),
            DispatchForm::Framed => Self::from_framed(bytes),
            DispatchForm::ColumnsV1 => {
                let (input, report) = crate::columns::decode_record(bytes)?;
                Ok(Self { input, report })
            }
            DispatchForm::MessageV2 | DispatchForm::MessageV3 | DispatchForm::UnknownVersion(_) => {
                let (input, report) = crate::message::decode_record(bytes)?;
                Ok(Self {
                    input,
                    report: Some(report),
                })
            }
        }
    }

    /// The framed form: [`FRAMED_DISPATCH_MAGIC`], the JSON's length, the JSON, the section.
    fn from_framed(bytes: &[u8]) -> Result<Self, RecordError> {
        let rest = bytes.get(FRAMED_DISPATCH_MAGIC.len()..).unwrap_or_default();
        let (len, rest) = rest
            .split_first_chunk::<4>()
            .ok_or(RecordError::FramedCut)?;
        let len = u32::from_le_bytes(*len) as usize;
        if len > rest.len() {
            return Err(RecordError::FramedLength {
                names: len,
                left: rest.len(),
            });
        }
        let (text, columns) = rest.split_at(len);
        let mut record: DispatchRecord = serde_json::from_slice(text)?;
        let section = crate::instrumented::decode(columns)?;
        match record.report.as_mut() {
            Some(r) => r.instrumented = Some(section),
            None => return Err(RecordError::SectionWithoutReport),
        }
        Ok(record)
    }
}

/// Why a DISPATCH record's payload is not one ([`DispatchRecord::from_payload`]).
#[derive(Debug, Error)]
pub enum RecordError {
    /// A column or message record's bytes ([`crate::columns`], [`crate::message`]).
    #[error(transparent)]
    Columns(#[from] crate::columns::ColumnsError),
    /// The JSON of a JSON or framed record.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// A framed record's instrumented section.
    #[error(transparent)]
    Section(#[from] crate::instrumented::InstrumentedError),
    /// A framed record too short for its JSON's length.
    #[error("a framed DISPATCH record cut short in its JSON length")]
    FramedCut,
    /// A framed record naming more JSON than it holds.
    #[error("a framed DISPATCH record names {names} bytes of JSON, {left} are left")]
    FramedLength {
        /// The bytes of JSON it names.
        names: usize,
        /// The bytes left after the length.
        left: usize,
    },
    /// A framed record with a section and no report to put it in.
    #[error("a framed DISPATCH record with a section but no report")]
    SectionWithoutReport,
}

/// After a replay of a capture: what only the device and the emulator knew comes back from each
/// recorded report, by position. The CPU reference cannot re-run a pass the device ran (its input
/// records no access), so a replay re-plans, re-maps and re-syncs the table (the engine's half) and
/// keeps the device's recorded instrumented section (issue 14), the emulator's device's write-back
/// and hand-off where the replay wrote nothing back (its words are the device's), and what the
/// emulator's memory did (`host_path`: failed calls, waits, the checked mode; issue 39). Returns
/// the reports that kept something.
pub fn keep_recorded_sections(
    replayed: &mut [DispatchReport],
    recorded: &[Option<DispatchReport>],
) -> usize {
    let mut n = 0;
    for (r, rec) in replayed.iter_mut().zip(recorded) {
        let Some(rec) = rec else { continue };
        let mut kept = false;
        if r.instrumented.is_none()
            && let Some(section) = rec.instrumented.as_ref()
        {
            r.instrumented = Some(section.clone());
            kept = true;
        }
        if r.host_path.is_empty() && !rec.host_path.is_empty() {
            r.host_path = rec.host_path.clone();
            kept = true;
        }
        if r.write_back.is_empty() && !rec.write_back.is_empty() {
            r.write_back = rec.write_back.clone();
            r.hand_off = rec.hand_off.clone();
            r.counts = dispatchscope_core::engine::counts_of(r);
            kept = true;
        }
        n += usize::from(kept);
    }
    n
}

/// The `format` of a capture's META record.
pub const CAPTURE_FORMAT: &str = "dispatchscope.capture";

/// Why a session file could not be opened or written.
#[derive(Debug, Error)]
pub enum SessionError {
    /// The file could not be read.
    #[error("{path}: cannot read: {error}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        error: std::io::Error,
    },
    /// A bad sample.
    #[error("{path}: {error}")]
    Sample {
        /// The file.
        path: String,
        /// Why.
        error: SampleError,
    },
    /// A bad capture container.
    #[error("{path}: {error}")]
    Capture {
        /// The file.
        path: String,
        /// Why.
        error: CaptureError,
    },
    /// A record whose payload is not what its kind says.
    #[error("{path}: record {seq} ({kind}) at byte {offset:#x}: {error}")]
    Record {
        /// The file.
        path: String,
        /// Its sequence number.
        seq: u64,
        /// Its kind.
        kind: String,
        /// Its byte offset.
        offset: u64,
        /// What was wrong: the reader's own error (a [`RecordError`], a
        /// [`crate::checkpoint::CheckpointError`], a `serde_json::Error` …), to downcast and match,
        /// or words where there is none.
        error: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Neither a sample nor a capture.
    #[error(
        "{path}: neither a dispatchscope sample (JSON) nor a capture (it starts with {start:02x?})"
    )]
    Unknown {
        /// The file.
        path: String,
        /// Its first bytes.
        start: Vec<u8>,
    },
}

/// An opened capture.
pub struct CaptureFile<R = std::io::BufReader<std::fs::File>> {
    path: String,
    reader: CaptureReader<R>,
    meta: CaptureMeta,
    /// The device's loss, when the capture holds a DEVICE_LOSS record (the last one).
    loss: Option<Box<dispatchscope_core::report::DeviceLossReport>>,
}

/// What a session file turned out to be.
pub enum Opened {
    /// A sample.
    Sample(Sample),
    /// A capture.
    Capture(CaptureFile),
}

/// What a session file is, by its first bytes ([`kind_of`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A sample: JSON text whose first byte that is not ASCII white space is `{`.
    Sample,
    /// A capture: it starts with [`FILE_MAGIC`](crate::capture::FILE_MAGIC).
    Capture,
}

/// How many bytes of a file [`kind_of`] looks at, at most.
pub const SNIFF_BYTES: usize = 4096;

/// What a file whose first bytes are `start` is: a capture if it starts with the capture magic, a
/// sample if its first byte that is not ASCII white space (within [`SNIFF_BYTES`]) is `{`, else
/// neither. The one rule [`open`], the CLI and the app tell the two apart by.
pub fn kind_of(start: &[u8]) -> Option<Kind> {
    let start = &start[..start.len().min(SNIFF_BYTES)];
    if start.starts_with(&crate::capture::FILE_MAGIC) {
        Some(Kind::Capture)
    } else if start.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') {
        Some(Kind::Sample)
    } else {
        None
    }
}

/// Opens a sample or a capture, by its first bytes ([`kind_of`]).
pub fn open(path: &Path) -> Result<Opened, SessionError> {
    use std::io::Read;
    let name = path.display().to_string();
    let read_error = |error| SessionError::Read {
        path: name.clone(),
        error,
    };
    let mut start = Vec::with_capacity(SNIFF_BYTES);
    std::fs::File::open(path)
        .and_then(|f| f.take(SNIFF_BYTES as u64).read_to_end(&mut start))
        .map_err(read_error)?;
    match kind_of(&start) {
        Some(Kind::Capture) => Ok(Opened::Capture(CaptureFile::open(path)?)),
        Some(Kind::Sample) => {
            let text = std::fs::read_to_string(path).map_err(read_error)?;
            Sample::from_json(&text)
                .map(Opened::Sample)
                .map_err(|error| SessionError::Sample { path: name, error })
        }
        None => Err(SessionError::Unknown {
            path: name,
            start: start[..start.len().min(8)].to_vec(),
        }),
    }
}

/// A MEMORY record's payload: address `u64`, length `u32`, the bytes.
pub(crate) fn contents_bytes(c: &Contents) -> Vec<u8> {
    let mut v = Vec::with_capacity(12 + c.bytes.len());
    v.extend_from_slice(&c.address.to_le_bytes());
    v.extend_from_slice(&(c.bytes.len() as u32).to_le_bytes());
    v.extend_from_slice(&c.bytes);
    v
}

fn json<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}

/// The META record of a capture of `sample`.
pub(crate) fn capture_meta(sample: &Sample) -> CaptureMeta {
    CaptureMeta {
        format: CAPTURE_FORMAT.into(),
        sample_version: sample.version,
        title: sample.title.clone(),
        description: sample.description.clone(),
        provenance: sample.provenance.clone(),
        device: sample.device.clone(),
        programs: sample.programs.clone(),
    }
}

/// Writes `sample` (and the reports of its dispatches, if given) as a capture, atomically: a
/// temporary file in the same folder, then a rename.
pub fn write_capture(
    sample: &Sample,
    reports: Option<&[DispatchReport]>,
    dest: &Path,
) -> Result<(), SessionError> {
    let name = dest.display().to_string();
    let meta = capture_meta(sample);
    write_atomically(dest, |file| {
        let mut w = CaptureWriter::to_sink(&mut *file, &json(&meta))?;
        for c in &sample.contents {
            w.append(RecordKind::MEMORY, &contents_bytes(c), true)?;
        }
        let mut n = 0usize;
        for step in &sample.steps {
            match step {
                Step::Event(e) => {
                    w.append(RecordKind::EVENTS, &json(e), false)?;
                }
                Step::Dispatch(d) => {
                    let record = DispatchRecord {
                        input: (**d).clone(),
                        report: reports.and_then(|r| r.get(n)).cloned(),
                    };
                    n += 1;
                    w.append(RecordKind::DISPATCH, &record.to_payload(), true)?;
                }
            }
        }
        w.finish()?;
        Ok(())
    })
    .map_err(|error| SessionError::Capture { path: name, error })
}

/// Writes `sample` as pretty JSON, atomically.
pub fn write_sample(sample: &Sample, dest: &Path) -> Result<(), SessionError> {
    let name = dest.display().to_string();
    write_atomically(dest, |file| {
        use std::io::Write;
        file.write_all(sample.to_json().as_bytes())
            .and_then(|()| file.write_all(b"\n"))
            .map_err(|source| CaptureError::Io {
                action: "writing the sample".into(),
                source,
            })
    })
    .map_err(|error| SessionError::Capture { path: name, error })
}

impl CaptureFile {
    /// Opens a capture; a torn tail is kept as [`CaptureFile::torn`], not an error.
    pub fn open(path: &Path) -> Result<Self, SessionError> {
        let name = path.display().to_string();
        let reader = CaptureReader::open(path).map_err(|error| SessionError::Capture {
            path: name.clone(),
            error,
        })?;
        CaptureFile::from_reader(name, reader)
    }
}

impl<R: std::io::Read + std::io::Seek> CaptureFile<R> {
    /// Wraps an opened container.
    pub fn from_reader(path: String, reader: CaptureReader<R>) -> Result<Self, SessionError> {
        let meta: CaptureMeta =
            serde_json::from_slice(reader.header_payload()).map_err(|e| SessionError::Record {
                path: path.clone(),
                seq: 0,
                kind: "header".into(),
                offset: crate::capture::FILE_HEADER_BYTES,
                error: format!("the header is not a capture's META: {e}").into(),
            })?;
        if meta.format != CAPTURE_FORMAT {
            return Err(SessionError::Record {
                path,
                seq: 0,
                kind: "header".into(),
                offset: crate::capture::FILE_HEADER_BYTES,
                error: format!("format is {:?}, not {CAPTURE_FORMAT:?}", meta.format).into(),
            });
        }
        let mut file = Self {
            path,
            reader,
            meta,
            loss: None,
        };
        file.read_programs()?;
        file.read_loss()?;
        Ok(file)
    }

    /// Reads the last DEVICE_LOSS record, if any (through the index: one record).
    fn read_loss(&mut self) -> Result<(), SessionError> {
        let kind = crate::loss::DEVICE_LOSS;
        let Some(n) = self.reader.len_of_kind(kind).checked_sub(1) else {
            return Ok(());
        };
        let bytes = self
            .reader
            .nth_of_kind(kind, n)
            .map_err(|error| SessionError::Capture {
                path: self.path.clone(),
                error,
            })?;
        let report = crate::loss::decode(&bytes).map_err(|e| self.bad(kind, n, e))?;
        self.loss = Some(Box::new(report));
        Ok(())
    }

    /// The device's loss report, when the session ended with the device lost (a DEVICE_LOSS
    /// record): the dispatches in flight, where the fault landed, the findings.
    pub fn loss(&self) -> Option<&dispatchscope_core::report::DeviceLossReport> {
        self.loss.as_deref()
    }

    /// Adds the code of every PROGRAM record to the META's programs (a program the META names
    /// keeps the META's code).
    fn read_programs(&mut self) -> Result<(), SessionError> {
        for n in 0..self.reader.len_of_kind(PROGRAM) {
            let bytes =
                self.reader
                    .nth_of_kind(PROGRAM, n)
                    .map_err(|error| SessionError::Capture {
                        path: self.path.clone(),
                        error,
                    })?;
            let p: crate::sample::Program = serde_json::from_slice(&bytes)
                .map_err(|e| self.bad(PROGRAM, n, format!("not a program's code: {e}")))?;
            if !self.meta.programs.iter().any(|q| q.address == p.address) {
                self.meta.programs.push(p);
            }
        }
        Ok(())
    }

    /// The header.
    pub fn meta(&self) -> &CaptureMeta {
        &self.meta
    }

    /// Where a capture cut short stops being readable, if it was.
    pub fn torn(&self) -> Option<&Torn> {
        self.reader.torn()
    }

    /// Dispatches the capture holds.
    pub fn n_dispatches(&self) -> usize {
        self.reader.len_of_kind(RecordKind::DISPATCH)
    }

    fn bad(
        &self,
        kind: RecordKind,
        n: usize,
        error: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> SessionError {
        let meta = self
            .reader
            .records()
            .iter()
            .filter(|r| r.kind == kind)
            .nth(n);
        SessionError::Record {
            path: self.path.clone(),
            seq: meta.map_or(0, |m| m.seq),
            kind: kind.to_string(),
            offset: meta.map_or(0, |m| m.offset_bytes),
            error: error.into(),
        }
    }

    /// Bytes in the capture file.
    pub fn len_bytes(&self) -> u64 {
        self.reader.len_bytes()
    }

    /// The capture's records (the caller's, in seq order), from its index.
    pub fn records(&self) -> &[crate::capture::RecordMeta] {
        self.reader.records()
    }

    /// Reads `records()[idx]` alone.
    pub fn read_record(&mut self, idx: usize) -> Result<Vec<u8>, SessionError> {
        self.reader
            .read_record(idx)
            .map_err(|error| SessionError::Capture {
                path: self.path.clone(),
                error,
            })
    }

    /// The first `want` bytes of `records()[idx]`'s payload, reading little more than them; not
    /// checked by the record's crc ([`CaptureReader::read_prefix`]).
    pub fn read_prefix(&mut self, idx: usize, want: usize) -> Result<Vec<u8>, SessionError> {
        self.reader
            .read_prefix(idx, want)
            .map_err(|error| SessionError::Capture {
                path: self.path.clone(),
                error,
            })
    }

    /// The error for record `records()[idx]` whose payload is not what its kind says.
    pub fn bad_record(
        &self,
        idx: usize,
        error: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> SessionError {
        let meta = self.reader.records().get(idx);
        SessionError::Record {
            path: self.path.clone(),
            seq: meta.map_or(0, |m| m.seq),
            kind: meta.map_or_else(String::new, |m| m.kind.to_string()),
            offset: meta.map_or(0, |m| m.offset_bytes),
            error: error.into(),
        }
    }

    /// Dispatch `n` (its input and recorded report), reading only its record.
    pub fn dispatch(&mut self, n: usize) -> Result<DispatchRecord, SessionError> {
        let bytes = self
            .reader
            .nth_of_kind(RecordKind::DISPATCH, n)
            .map_err(|error| SessionError::Capture {
                path: self.path.clone(),
                error,
            })?;
        DispatchRecord::from_payload(&bytes).map_err(|e| self.bad(RecordKind::DISPATCH, n, e))
    }

    /// Reads the whole capture back as a sample (every complete record; a torn tail is dropped).
    pub fn to_sample(&mut self) -> Result<(Sample, Vec<Option<DispatchReport>>), SessionError> {
        let mut sample = Sample {
            format: SAMPLE_FORMAT.into(),
            version: self.meta.sample_version.clamp(1, SAMPLE_VERSION),
            title: self.meta.title.clone(),
            description: self.meta.description.clone(),
            provenance: self.meta.provenance.clone(),
            device: self.meta.device.clone(),
            contents: Vec::new(),
            steps: Vec::new(),
            programs: self.meta.programs.clone(),
        };
        let mut reports = Vec::new();
        let records = self.reader.records().to_vec();
        for (i, m) in records.iter().enumerate() {
            let bytes = self
                .reader
                .read_record(i)
                .map_err(|error| SessionError::Capture {
                    path: self.path.clone(),
                    error,
                })?;
            let bad = |error: Box<dyn std::error::Error + Send + Sync>| SessionError::Record {
                path: self.path.clone(),
                seq: m.seq,
                kind: m.kind.to_string(),
                offset: m.offset_bytes,
                error,
            };
            match m.kind {
                RecordKind::MEMORY => {
                    if bytes.len() < 12 {
                        return Err(bad(format!(
                            "{} bytes, less than a contents header",
                            bytes.len()
                        )
                        .into()));
                    }
                    let mut a = [0u8; 8];
                    a.copy_from_slice(&bytes[..8]);
                    let mut l = [0u8; 4];
                    l.copy_from_slice(&bytes[8..12]);
                    let len = u32::from_le_bytes(l) as usize;
                    if bytes.len() != 12 + len {
                        return Err(bad(format!(
                            "says {len} bytes of contents but holds {}",
                            bytes.len() - 12
                        )
                        .into()));
                    }
                    sample.contents.push(Contents {
                        address: u64::from_le_bytes(a),
                        bytes: bytes[12..].to_vec(),
                    });
                }
                RecordKind::EVENTS => {
                    let e: Event = serde_json::from_slice(&bytes).map_err(|e| bad(e.into()))?;
                    sample.steps.push(Step::Event(e));
                }
                RecordKind::DISPATCH => {
                    let d = DispatchRecord::from_payload(&bytes).map_err(|e| bad(e.into()))?;
                    sample.steps.push(Step::Dispatch(Box::new(d.input)));
                    reports.push(d.report);
                }
                _ => {}
            }
        }
        Ok((sample, reports))
    }
}
