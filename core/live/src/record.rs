//! Recording a live session to a capture ([`dispatchscope_formats::session`]'s layout), crash-safe.
//!
//! [`CaptureRecorder`] takes the messages a [`LiveClient`](crate::client::LiveClient) receives and appends records: the
//! snapshot's contents as MEMORY records and its events as EVENTS records (they rebuild guest
//! memory as it stood when recording began, see [`crate::snapshot`]), then one EVENTS record
//! per event and one DISPATCH record (input and report, the access lists as rows:
//! [`dispatchscope_formats::columns::encode_record`]) per dispatch, in the target's order; a
//! program's code the target sends goes into the META when it comes before the snapshot, and into
//! a PROGRAM record ([`dispatchscope_formats::session::PROGRAM`]) after. The
//! META header is written when the snapshot arrives (it needs the device). It flushes (records and
//! a checkpoint, made durable) at least every [`crate::RecordOptions::flush_every`], so a recorder killed
//! at any moment leaves a capture that opens with every record up to its last flush.
//! Messages before the snapshot are ignored: the snapshot already holds their effects.
//! A checkpoint of engine state ([`crate::checkpoint`]) becomes MEMORY_STATE / TABLE_STATE records
//! (or MEMORY_UNKNOWN / TABLE_UNKNOWN) right after its dispatch's DISPATCH record, in the order
//! `dispatchscope_formats::checkpoint::StateIndex` reads them; a table delta whose base the file
//! lacks is written as unknown.
//!
//! The target's loss report ([`ToDebugger::DeviceLost`]) becomes a DEVICE_LOSS record
//! ([`dispatchscope_formats::loss`]), flushed at once.
//!
//! [`crate::headless::record`] is the headless recorder, through a [`crate::LiveStore`]; a
//! window that streams feeds its messages to a store too, and gaps from drops are counted in
//! [`RecordSummary::missing`].

use std::path::Path;
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::checkpoint::{Checkpoint, StatePart};
use crate::client::ClientError;
use crate::protocol::ToDebugger;
use dispatchscope_formats::capture::{
    CaptureError, CaptureWriter, MAX_DICTIONARY_BYTES, RecordKind,
};
use dispatchscope_formats::checkpoint::{
    MEMORY_STATE, MEMORY_UNKNOWN, StateIndex, TABLE_STATE, TABLE_UNKNOWN, check_memory_payload,
    check_table_payload,
};
use dispatchscope_formats::columns;
use dispatchscope_formats::sample::Program;
use dispatchscope_formats::sample::{Contents, Provenance, SAMPLE_VERSION};
use dispatchscope_formats::session::{CAPTURE_FORMAT, CaptureMeta, PROGRAM};

/// Why a recording failed.
#[derive(Debug, Error)]
pub enum RecordError {
    /// The capture could not be written.
    #[error("{path}: {error}")]
    Capture {
        /// The file.
        path: String,
        /// Why.
        error: CaptureError,
    },
    /// The live session failed.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The session could not go on into its next file (a state of the last one unreadable).
    #[error("rolling the recording into its next file: {0}")]
    Segment(String),
    /// A message could not be encoded.
    #[error("encoding a {kind} record: {message}")]
    Encode {
        /// The record kind.
        kind: &'static str,
        /// Why.
        message: String,
    },
}

/// How a later file of a live session begins its description ([`CaptureRecorder::roll`] writes
/// it): such a file, and a capture joined from files that begin with one
/// (`crate::segments::join`), lacks the session's memory snapshot, so its recorded reports are
/// what it shows (it is not replayed).
pub const LATER_FILE: &str = "A later file of a live session";

/// What a recording holds so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordSummary {
    /// DISPATCH records.
    pub dispatches: u64,
    /// EVENTS records after the snapshot.
    pub events: u64,
    /// Events that rebuild the snapshot.
    pub snapshot_events: u64,
    /// MEMORY records.
    pub contents: u64,
    /// Dispatches the target dropped (gaps in the indices), with events dropped likewise.
    pub missing: u64,
    /// Dispatches the target dropped alone (gaps in the dispatch indices after the first one
    /// recorded).
    pub dropped: u64,
    /// Index of the first dispatch recorded.
    pub first_dispatch: Option<u64>,
    /// Index of the last dispatch recorded.
    pub last_dispatch: Option<u64>,
    /// Bytes written so far.
    pub bytes: u64,
    /// Checkpoint records of engine state (MEMORY_STATE, TABLE_STATE and their unknowns).
    pub checkpoints: u64,
    /// Files the recording was written as (more than one under a disk budget).
    pub files: u64,
    /// Dispatches in the files the disk budget deleted.
    pub released: u64,
    /// Whether the target's device was lost (a DEVICE_LOSS record was written).
    pub device_lost: bool,
}

/// Appends a live session's messages to a capture; see the module docs.
pub struct CaptureRecorder {
    path: String,
    title: String,
    writer: Option<CaptureWriter>,
    event_frames_left: u64,
    contents_left: u64,
    next_dispatch: Option<u64>,
    next_event: Option<u64>,
    summary: RecordSummary,
    last_flush: Instant,
    flush_every: Duration,
    durable_bytes: u64,
    /// The code of every program the target sent, for the META or PROGRAM records.
    programs: Vec<Program>,
    /// A DISPATCH record's payload, kept to reuse its allocation.
    payload: Vec<u8>,
    /// Where each recorded dispatch's checkpoints are (record numbers are seqs).
    states: StateIndex,
    /// Bytes written out to the file (not necessarily durable) by [`Self::write_out`].
    written_out: u64,
    /// Whether a full table record was written since the start or the last unknown table, so
    /// that a delta has its base in the file.
    table_base: bool,
    /// The same for memory: a whole MEMORY_STATE record since the start or the last unknown one.
    memory_base: bool,
    /// A checkpoint of a dispatch the file does not hold (it came before its dispatch was
    /// recorded): the state of the next recorded dispatch unless that one brings its own.
    pending: Option<Checkpoint>,
    /// The first DISPATCH records' payloads, until they become the file's dictionary.
    dictionary: Dictionary,
    /// The META of the session's first file, which every later file of it repeats
    /// ([`Self::roll`]).
    meta: Option<CaptureMeta>,
    /// Records in the files closed by [`Self::roll`]: a record's number in [`Self::states`] is
    /// this plus its seq in its file.
    record_base: u64,
    /// Bytes of the files closed by [`Self::roll`] ([`RecordSummary::bytes`] counts them).
    bytes_before: u64,
    /// The current file's state records: seq and offset (what a closed file's reader needs).
    state_offsets: Vec<(u64, u64)>,
}

/// A file of a session that [`CaptureRecorder::roll`] closed: what reading it back needs
/// without its index in memory.
#[derive(Clone, Debug)]
pub struct ClosedFile {
    /// The file.
    pub path: String,
    /// Its records, container records included (its seqs are `0..records`).
    pub records: u64,
    /// Its bytes, index and trailer included.
    pub bytes: u64,
    /// Its dictionary, when its records are compressed against one.
    pub dictionary: Option<Vec<u8>>,
    /// Its state records' seqs and offsets, in order.
    pub state_offsets: Vec<(u64, u64)>,
}

/// DISPATCH records sampled for the dictionary before it is written: enough to hold each of a
/// frame's kinds of pass (a game's frame repeats a few dozen programs).
pub const DICTIONARY_DISPATCHES: usize = 64;

/// The file's lz4 dictionary as it is being gathered: the payloads of the session's first
/// [`DICTIONARY_DISPATCHES`] DISPATCH records (or [`MAX_DICTIONARY_BYTES`] of them), written as
/// its DICTIONARY record once complete. Every DISPATCH record after it is compressed against it:
/// a record then stores what differs from dispatches like it (its index, its values), not the
/// field names, device limits and bindings every dispatch of its program repeats. Measured in
/// BENCHMARKS.md ("The disk holds a day").
#[derive(Debug, Default)]
enum Dictionary {
    #[default]
    None,
    Gathering(Vec<u8>, usize),
    Written,
}

/// `later` over `earlier`: each state the later one carries replaces the earlier one's. Two parts
/// of a state cannot be merged where the later is a delta (it needs the one before it in the
/// file), so that state is unknown.
fn merge(earlier: Option<Checkpoint>, later: &Checkpoint) -> Checkpoint {
    let Some(mut c) = earlier else {
        return later.clone();
    };
    c.dispatch = later.dispatch;
    match (&c.memory, &later.memory) {
        (_, None) => {}
        (None, m) => c.memory.clone_from(m),
        (Some(_), Some(StatePart::Known(b))) if check_memory_payload(b) == Ok(true) => {
            c.memory = Some(StatePart::Unknown(
                "two memory states came before their dispatch was recorded".into(),
            ));
        }
        (Some(_), Some(_)) => c.memory.clone_from(&later.memory),
    }
    match (&c.table, &later.table) {
        (_, None) => {}
        (None, t) => c.table.clone_from(t),
        (Some(_), Some(StatePart::Known(b))) if check_table_payload(b) == Ok(false) => {
            c.table = later.table.clone();
        }
        (Some(_), Some(_)) => {
            c.table = Some(StatePart::Unknown(
                "two chunk tables came before their dispatch was recorded".into(),
            ));
        }
    }
    c
}

fn json<T: serde::Serialize>(kind: &'static str, value: &T) -> Result<Vec<u8>, RecordError> {
    serde_json::to_vec(value).map_err(|e| RecordError::Encode {
        kind,
        message: e.to_string(),
    })
}

fn contents_bytes(c: &Contents) -> Vec<u8> {
    let mut v = Vec::with_capacity(12 + c.bytes.len());
    v.extend_from_slice(&c.address.to_le_bytes());
    v.extend_from_slice(&(c.bytes.len() as u32).to_le_bytes());
    v.extend_from_slice(&c.bytes);
    v
}

impl CaptureRecorder {
    /// A recorder that will write `dest` once the snapshot arrives; `title` names the session.
    pub fn new(dest: &Path, title: &str, flush_every: Duration) -> Self {
        Self {
            path: dest.display().to_string(),
            title: title.to_owned(),
            writer: None,
            event_frames_left: 0,
            contents_left: 0,
            next_dispatch: None,
            next_event: None,
            summary: RecordSummary::default(),
            last_flush: Instant::now(),
            flush_every,
            durable_bytes: 0,
            programs: Vec::new(),
            payload: Vec::new(),
            states: StateIndex::default(),
            written_out: 0,
            table_base: false,
            memory_base: false,
            pending: None,
            dictionary: Dictionary::None,
            meta: None,
            record_base: 0,
            bytes_before: 0,
            state_offsets: Vec::new(),
        }
    }

    /// Closes the current file (its index and trailer) and goes on in a new one at `next`, a
    /// capture of its own: the session's META (its description names the dispatch it starts
    /// at), the dictionary, and then `carried` (the memory and table states the last recorded
    /// dispatch left) written after its first DISPATCH record, so that its first dispatch reads
    /// its states from the file itself. [`Self::states`] goes on numbering records across files
    /// (the record base grows by the closed file's records); [`Self::record_offset`] and
    /// [`Self::nth_dispatch_from`] answer for the new file. What a live store's disk budget
    /// rolls segments with.
    pub fn roll(&mut self, next: &Path, carried: Checkpoint) -> Result<ClosedFile, RecordError> {
        let Some(w) = self.writer.take() else {
            return Err(RecordError::Encode {
                kind: "segment",
                message: "the recording has not started: nothing to roll".into(),
            });
        };
        let path = std::mem::replace(&mut self.path, next.display().to_string());
        let dictionary = w.dictionary().map(<[u8]>::to_vec);
        let records = w.n_records();
        let bytes = w.len_bytes();
        w.finish().map_err(|error| RecordError::Capture {
            path: path.clone(),
            error,
        })?;
        self.bytes_before += bytes;
        self.record_base += records;
        let mut meta = self.meta.clone().ok_or_else(|| RecordError::Encode {
            kind: "META",
            message: "the recording has no META to repeat".into(),
        })?;
        meta.programs.clone_from(&self.programs);
        let next_dispatch = self.next_dispatch.unwrap_or(0);
        meta.description = format!(
            "{}, from dispatch {next_dispatch} on: the session's first file holds its snapshot of guest memory, so this one replays only as far as its dispatches' recorded reports go. Its first dispatch's records give guest memory's page states and the chunk table as the dispatch before it left them. {}",
            LATER_FILE, meta.description
        );
        let header = json("META", &meta)?;
        let mut w = CaptureWriter::create(next, &header).map_err(self.err())?;
        if let Some(d) = &dictionary {
            w.set_dictionary(d).map_err(self.err())?;
        }
        self.summary.bytes = self.bytes_before + w.len_bytes();
        self.summary.files += 1;
        self.writer = Some(w);
        self.durable_bytes = 0;
        self.written_out = 0;
        self.table_base = false;
        self.memory_base = false;
        self.pending = Some(match self.pending.take() {
            Some(p) => merge(Some(carried), &p),
            None => carried,
        });
        Ok(ClosedFile {
            path,
            records,
            bytes,
            dictionary,
            state_offsets: std::mem::take(&mut self.state_offsets),
        })
    }

    /// Records in the files [`Self::roll`] closed: what a record number in [`Self::states`]
    /// counts from in the current file.
    pub fn record_base(&self) -> u64 {
        self.record_base
    }

    /// Bytes of the current file so far.
    pub fn file_bytes(&self) -> u64 {
        self.writer.as_ref().map_or(0, CaptureWriter::len_bytes)
    }

    /// Where each recorded dispatch's checkpoints of engine state are: positions are dispatches
    /// in recording order, record numbers seqs ([`Self::record_offset`] finds them).
    pub fn states(&self) -> &StateIndex {
        &self.states
    }

    /// Writes checkpoint `c`'s states as the records of the dispatch recorded last: a known state
    /// as its MEMORY_STATE or TABLE_STATE payload unchanged, an unknown one (or a delta whose base
    /// this file lacks) as MEMORY_UNKNOWN or TABLE_UNKNOWN with why.
    fn write_checkpoint(&mut self, c: &Checkpoint) -> Result<(), RecordError> {
        let Some(pos) = (self.summary.dispatches as usize).checked_sub(1) else {
            return Ok(());
        };
        if let Some(part) = &c.memory {
            let late = "the recording began after the target's last whole memory state, so guest memory is not known until the next one";
            let (kind, bytes) = match part {
                StatePart::Known(b) => match check_memory_payload(b) {
                    Ok(false) => {
                        self.memory_base = true;
                        (MEMORY_STATE, b.as_slice())
                    }
                    Ok(true) if self.memory_base => (MEMORY_STATE, b.as_slice()),
                    _ => {
                        self.memory_base = false;
                        (MEMORY_UNKNOWN, late.as_bytes())
                    }
                },
                StatePart::Unknown(why) => {
                    self.memory_base = false;
                    (MEMORY_UNKNOWN, why.as_bytes())
                }
            };
            let seq = self.append(kind, bytes, true)?;
            self.push_state(kind, pos, seq);
        }
        if let Some(part) = &c.table {
            let late = "the recording began after the target's last full chunk table, so the table is not known until the next one";
            let (kind, bytes) = match part {
                StatePart::Known(b) => match check_table_payload(b) {
                    Ok(false) => {
                        self.table_base = true;
                        (TABLE_STATE, b.as_slice())
                    }
                    Ok(true) if self.table_base => (TABLE_STATE, b.as_slice()),
                    _ => (TABLE_UNKNOWN, late.as_bytes()),
                },
                StatePart::Unknown(why) => {
                    self.table_base = false;
                    (TABLE_UNKNOWN, why.as_bytes())
                }
            };
            let seq = self.append(kind, bytes, true)?;
            self.push_state(kind, pos, seq);
        }
        Ok(())
    }

    /// Indexes state record `seq` of the current file, written after dispatch `pos`.
    fn push_state(&mut self, kind: RecordKind, pos: usize, seq: u64) {
        self.states
            .push(kind, pos, (self.record_base + seq) as usize);
        if let Some(offset) = self.record_offset(seq) {
            self.state_offsets.push((seq, offset));
        }
        self.summary.checkpoints += 1;
    }

    /// Whether the snapshot has arrived and records are being written.
    pub fn started(&self) -> bool {
        self.writer.is_some()
    }

    /// What was recorded so far.
    pub fn summary(&self) -> &RecordSummary {
        &self.summary
    }

    fn err(&self) -> impl Fn(CaptureError) -> RecordError + '_ {
        move |error| RecordError::Capture {
            path: self.path.clone(),
            error,
        }
    }

    /// Appends a record; returns its seq (its number in the file).
    fn append(
        &mut self,
        kind: RecordKind,
        payload: &[u8],
        compress: bool,
    ) -> Result<u64, RecordError> {
        let path = self.path.clone();
        let Some(w) = self.writer.as_mut() else {
            return Ok(0);
        };
        let seq = w
            .append(kind, payload, compress)
            .map_err(|error| RecordError::Capture { path, error })?;
        self.summary.bytes = self.bytes_before + w.len_bytes();
        Ok(seq)
    }

    /// Adds a DISPATCH payload to the dictionary being gathered, and writes the dictionary when
    /// it is complete. Returns whether the record is to be compressed against it.
    fn gather_dictionary(&mut self, payload: &[u8]) -> Result<bool, RecordError> {
        if self.writer.is_none() {
            return Ok(false);
        }
        let (bytes, n) = match &mut self.dictionary {
            Dictionary::Written => return Ok(true),
            Dictionary::None => {
                self.dictionary = Dictionary::Gathering(Vec::new(), 0);
                return self.gather_dictionary(payload);
            }
            Dictionary::Gathering(bytes, n) => (bytes, n),
        };
        let room = MAX_DICTIONARY_BYTES.saturating_sub(bytes.len());
        bytes.extend_from_slice(&payload[..payload.len().min(room)]);
        *n += 1;
        if *n < DICTIONARY_DISPATCHES && bytes.len() < MAX_DICTIONARY_BYTES {
            return Ok(false);
        }
        let bytes = std::mem::take(bytes);
        self.dictionary = Dictionary::Written;
        let path = self.path.clone();
        if let Some(w) = self.writer.as_mut() {
            w.set_dictionary(&bytes)
                .map_err(|error| RecordError::Capture { path, error })?;
        }
        Ok(true)
    }

    /// The file's dictionary, once written: what its later records are compressed against.
    pub fn dictionary(&self) -> Option<&[u8]> {
        self.writer.as_ref()?.dictionary()
    }

    /// Where record `seq`'s header starts in the file (from the capture writer's own list).
    pub fn record_offset(&self, seq: u64) -> Option<u64> {
        self.writer.as_ref()?.record_offset(seq)
    }

    /// The seq of the `n`-th DISPATCH record from record `from` on (`n = 0`: the first at or
    /// after `from`), from the capture writer's own list.
    pub fn nth_dispatch_from(&self, from: u64, n: u64) -> Option<u64> {
        self.writer
            .as_ref()?
            .nth_of_kind(from, RecordKind::DISPATCH, n)
    }

    /// Appends dispatch `index`'s DISPATCH record, counting any gap before it; `compress`: lz4
    /// it where that makes it smaller.
    fn append_dispatch(
        &mut self,
        index: u64,
        payload: &[u8],
        compress: bool,
    ) -> Result<u64, RecordError> {
        if let Some(n) = self.next_dispatch
            && index > n
        {
            self.summary.missing += index - n;
            self.summary.dropped += index - n;
        }
        self.next_dispatch = Some(index + 1);
        let compress = self.gather_dictionary(payload)? || compress;
        let at = self.append(RecordKind::DISPATCH, payload, compress)?;
        self.summary.dispatches += 1;
        self.summary.first_dispatch.get_or_insert(index);
        self.summary.last_dispatch = Some(index);
        if let Some(c) = self.pending.take() {
            self.write_checkpoint(&c)?;
        }
        Ok(at)
    }

    /// The code of the programs the target sent so far (written to the capture as they came).
    pub fn programs(&self) -> &[Program] {
        &self.programs
    }

    /// Bytes of the file made durable by the last flush (every record that ends there or before
    /// can be read back from the file).
    pub fn durable_bytes(&self) -> u64 {
        self.durable_bytes
    }

    /// The file being written.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Takes one message: records it if it belongs in the capture, and flushes when it is time.
    pub fn take(&mut self, message: &ToDebugger) -> Result<(), RecordError> {
        self.take_at(message).map(|_| ())
    }

    /// [`Self::take`], returning the seq of the DISPATCH record it wrote, if it wrote one
    /// ([`Self::record_offset`] finds it in the file).
    pub fn take_at(&mut self, message: &ToDebugger) -> Result<Option<u64>, RecordError> {
        let mut dispatch_at = None;
        match message {
            ToDebugger::Snapshot(s) if self.writer.is_none() => {
                let meta = CaptureMeta {
                    format: CAPTURE_FORMAT.into(),
                    sample_version: SAMPLE_VERSION,
                    title: self.title.clone(),
                    description: format!(
                        "Recorded live from dispatch {} on. The first records rebuild guest memory as it stood then (a snapshot: reservations, page states, guards, write-watch notes, targets, deferred copies, contents); mappings and the chunk table are not part of it, so a replay maps afresh. Reports are the target's, with its dispatch numbers.",
                        s.next_dispatch
                    ),
                    provenance: Provenance {
                        records: Vec::new(),
                        stated: Vec::new(),
                        ours: vec!["everything: recorded live from a running target".into()],
                    },
                    device: s.device.clone(),
                    programs: self.programs.clone(),
                };
                let header = json("META", &meta)?;
                let w =
                    CaptureWriter::create(Path::new(&self.path), &header).map_err(self.err())?;
                self.writer = Some(w);
                self.meta = Some(meta);
                self.summary.files = 1;
                self.event_frames_left = s.n_event_frames;
                self.contents_left = s.n_contents;
                self.next_dispatch = Some(s.next_dispatch);
            }
            ToDebugger::SnapshotEvents { events } if self.event_frames_left > 0 => {
                self.event_frames_left -= 1;
                for e in events {
                    let payload = json("EVENTS", e)?;
                    self.append(RecordKind::EVENTS, &payload, false)?;
                    self.summary.snapshot_events += 1;
                }
            }
            ToDebugger::SnapshotContents { contents } if self.contents_left > 0 => {
                self.contents_left -= 1;
                self.append(RecordKind::MEMORY, &contents_bytes(contents), true)?;
                self.summary.contents += 1;
            }
            ToDebugger::Program { address, code } => {
                let program = Program {
                    address: *address,
                    code: code.clone(),
                };
                self.programs.retain(|p| p.address != *address);
                self.programs.push(program.clone());
                if self.writer.is_some() {
                    let payload = json("PROGRAM", &program)?;
                    self.append(PROGRAM, &payload, true)?;
                }
            }
            ToDebugger::Event { report } if self.writer.is_some() => {
                if let Some(n) = self.next_event
                    && report.index > n
                {
                    self.summary.missing += report.index - n;
                }
                self.next_event = Some(report.index + 1);
                let payload = json("EVENTS", &report.event)?;
                self.append(RecordKind::EVENTS, &payload, false)?;
                self.summary.events += 1;
            }
            ToDebugger::Dispatch {
                index,
                input,
                report,
                ..
            } if self.writer.is_some() => {
                // The access lists as rows, the rest as JSON (`dispatchscope_formats::columns`):
                // a tenth of the JSON record's encoding time, read back by every capture reader.
                self.payload.clear();
                columns::encode_record(input, Some(report), &mut self.payload);
                let payload = std::mem::take(&mut self.payload);
                let at = self.append_dispatch(*index, &payload, true);
                self.payload = payload;
                dispatch_at = Some(at?);
            }
            // The state the dispatch recorded last left, right after it (StateIndex's order); one
            // of a dispatch not recorded waits for the next that is.
            ToDebugger::Checkpoint(c) if self.writer.is_some() => {
                if self.summary.last_dispatch == Some(c.dispatch) {
                    self.write_checkpoint(c)?;
                } else {
                    self.pending = Some(merge(self.pending.take(), c));
                }
            }
            // The loss, as the capture's DEVICE_LOSS record, durable at once: what follows a lost
            // device may be the target's end, or the debugger's.
            ToDebugger::DeviceLost(report) if self.writer.is_some() => {
                let payload = dispatchscope_formats::loss::encode(report).map_err(|e| {
                    RecordError::Encode {
                        kind: "DEVICE_LOSS",
                        message: e.to_string(),
                    }
                })?;
                self.append(dispatchscope_formats::loss::DEVICE_LOSS, &payload, true)?;
                self.summary.device_lost = true;
                self.flush()?;
            }
            // The bytes as they came (`dispatchscope_formats::message`'s version 3 record, the
            // only one the wire's decoder makes): no decoding or encoding again. Its rows are
            // packed, its largest part already about as small as lz4 made the fixed rows, so it
            // is not compressed: lz4 over the rest was most of the store thread's time at a
            // game's rate (issue 18, BENCHMARKS.md).
            ToDebugger::Received(d) if self.writer.is_some() => {
                dispatch_at = Some(self.append_dispatch(d.index, d.record(), false)?);
            }
            _ => {}
        }
        if self.last_flush.elapsed() >= self.flush_every {
            self.flush()?;
        }
        Ok(dispatch_at)
    }

    /// Writes every record so far to the file without making it durable, so that a reader of the
    /// file sees them (a live store reading a checkpoint it just wrote).
    pub fn write_out(&mut self) -> Result<(), RecordError> {
        let path = self.path.clone();
        if let Some(w) = self.writer.as_mut() {
            w.write_out()
                .map_err(|error| RecordError::Capture { path, error })?;
            self.written_out = w.len_bytes();
        }
        Ok(())
    }

    /// Bytes of the file a reader sees: what the last [`Self::write_out`] or flush wrote out.
    pub fn written_out_bytes(&self) -> u64 {
        self.written_out.max(self.durable_bytes)
    }

    /// Makes every record so far durable.
    pub fn flush(&mut self) -> Result<(), RecordError> {
        self.last_flush = Instant::now();
        let path = self.path.clone();
        if let Some(w) = self.writer.as_mut() {
            w.flush()
                .map_err(|error| RecordError::Capture { path, error })?;
            self.durable_bytes = w.len_bytes();
        }
        Ok(())
    }

    /// Writes the index and trailer and closes the file.
    pub fn finish(mut self) -> Result<RecordSummary, RecordError> {
        let path = self.path.clone();
        if let Some(w) = self.writer.take() {
            self.summary.bytes = self.bytes_before + w.len_bytes();
            w.finish()
                .map_err(|error| RecordError::Capture { path, error })?;
        }
        Ok(self.summary)
    }
}
