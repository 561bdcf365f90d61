//! [`LiveStore`]: the debugger's whole live session, on disk as it arrives, with an index and a
//! window of recent reports in memory, so that memory stays bounded however long the game runs.
//!
//! Every message goes to a [`CaptureRecorder`] (a crash-safe capture: the snapshot, events and
//! DISPATCH records, flushed at least every [`StoreOptions::flush_every`]). A dispatch that came
//! as [`ToDebugger::Received`] is written as the bytes it came in (a version 2 DISPATCH record,
//! `dispatchscope_formats::message`), never decoded or encoded again.
//! The store keeps the record number of every [`DISPATCH_SAMPLE`]-th dispatch; the capture
//! writer's own compact list (about 5 bytes a record: kind and stored length, every 256th offset)
//! finds any dispatch's record and offset from there with no file access. With
//! [`StoreOptions::keep_rows`] it keeps a [`DispatchRow`] a dispatch too (index, program, mode,
//! counts, an interned label and the record's offset: 48 bytes), and it keeps the reports of the
//! latest [`StoreOptions::window`] dispatches. A report older than the window is read back from
//! the file when asked for ([`LiveStore::report`]): one seek and one record, never a walk of the
//! file.
//!
//! What memory grows with, with `keep_rows` off (the window's setting): the writer's 5 bytes a
//! record and the store's 8 bytes every 64 dispatches, about 50 MB at 10,000,000 dispatches (see
//! BENCHMARKS.md for the measured figure). Everything else is bounded by the window.
//!
//! The target's checkpoints of engine state are recorded after their dispatches; the recorder
//! keeps where they are ([`LiveStore::states`], 24 bytes a checkpoint record), and
//! [`LiveStore::memory_state`] and [`LiveStore::table_at`] read a dispatch's back from the file.
//!
//! The file is a capture like any other: `dispatchscope explain` and the app open it while it is
//! being written (as a capture cut short) and after [`LiveStore::finish`] (through its index).
//! This module never draws and never opens a socket.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::path::Path;
use std::time::Duration;

use thiserror::Error;

use crate::protocol::ReceivedDispatch;
use crate::protocol::ToDebugger;
use crate::record::{CaptureRecorder, RecordError, RecordSummary};
use dispatchscope_core::report::{DispatchReport, Mode};
use dispatchscope_formats::capture::{RecordKind, read_record_at};
use dispatchscope_formats::checkpoint::{
    MEMORY_STATE, MemoryState, Rebuild, StateIndex, TABLE_STATE, TableState, decode_memory_state,
};
use dispatchscope_formats::session::DispatchRecord;

/// Dispatches between two sampled record numbers in a [`LiveStore`] (what it keeps per dispatch:
/// 8 bytes over this many).
pub const DISPATCH_SAMPLE: usize = 64;

/// Why the store could not record or read back.
#[derive(Debug, Error)]
pub enum StoreError {
    /// Recording failed (the file could not be written).
    #[error(transparent)]
    Record(#[from] RecordError),
    /// There is no dispatch at this position.
    #[error("there is no dispatch {pos} in this session: it holds {len}")]
    NoSuchDispatch {
        /// The position asked for.
        pos: usize,
        /// How many it holds.
        len: usize,
    },
    /// The file could not be read back.
    #[error("{path}: reading back the dispatch at byte {offset}: {message}")]
    ReadBack {
        /// The file.
        path: String,
        /// Where its record starts.
        offset: u64,
        /// What went wrong.
        message: String,
    },
}

/// How a [`LiveStore`] keeps a session.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    /// Reports kept in memory, the latest ones (0: none, for a caller that keeps its own).
    pub window: usize,
    /// Make the file durable at least this often.
    pub flush_every: Duration,
    /// Keep a [`DispatchRow`] a dispatch ([`LiveStore::rows`]); off for a caller that keeps
    /// rows of its own (the debugger window), so that the store keeps 8 bytes a dispatch, its
    /// record's offset.
    pub keep_rows: bool,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            window: 512,
            flush_every: Duration::from_millis(500),
            keep_rows: true,
        }
    }
}

/// One recorded dispatch, as the index keeps it: what a table row and a search need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DispatchRow {
    /// The target's dispatch index.
    pub index: u64,
    /// Its program.
    pub program: u64,
    /// Where its DISPATCH record starts in the file.
    pub offset: u64,
    /// Its label, as a number into [`LiveStore::label`].
    pub label: u32,
    /// Refusals.
    pub refusals: u32,
    /// Escapes.
    pub escapes: u32,
    /// Accesses.
    pub accesses: u32,
    /// How it ran.
    pub mode: Mode,
    /// L1 hazards.
    pub hazards: u16,
}

/// A report the window keeps: whole, or as it came over the wire (decoded when asked for).
enum Kept {
    Report(Box<DispatchReport>),
    Received(Box<ReceivedDispatch>),
}

/// A live session kept on disk with an index and a window in memory; see the module docs.
pub struct LiveStore {
    recorder: CaptureRecorder,
    /// The DISPATCH record seq of every [`DISPATCH_SAMPLE`]-th recorded dispatch; the capture
    /// writer's own list finds the others and every offset.
    samples: Vec<u64>,
    /// Dispatches recorded.
    n: usize,
    /// Every recorded dispatch's row, when [`StoreOptions::keep_rows`].
    rows: Vec<DispatchRow>,
    keep_rows: bool,
    labels: Vec<String>,
    label_ids: HashMap<String, u32>,
    /// The latest reports, with their positions.
    window: VecDeque<(usize, Kept)>,
    window_len: usize,
    reader: Option<File>,
}

impl LiveStore {
    /// A store writing `dest` once the target's snapshot arrives; `title` names the session.
    pub fn create(dest: &Path, title: &str, options: &StoreOptions) -> Self {
        Self {
            recorder: CaptureRecorder::new(dest, title, options.flush_every),
            samples: Vec::new(),
            n: 0,
            rows: Vec::new(),
            keep_rows: options.keep_rows,
            labels: Vec::new(),
            label_ids: HashMap::new(),
            window: VecDeque::new(),
            window_len: options.window,
            reader: None,
        }
    }

    /// The file being written.
    pub fn path(&self) -> &str {
        self.recorder.path()
    }

    /// Whether the snapshot has arrived and records are being written.
    pub fn started(&self) -> bool {
        self.recorder.started()
    }

    /// What was recorded so far.
    pub fn summary(&self) -> &RecordSummary {
        self.recorder.summary()
    }

    /// Takes one message: records it, and indexes it when it is a recorded dispatch, keeping its
    /// report in the window. Returns whether a dispatch was added.
    pub fn take(&mut self, message: ToDebugger) -> Result<bool, StoreError> {
        if !self.take_ref(&message)? {
            return Ok(false);
        }
        let kept = match message {
            ToDebugger::Dispatch { report, .. } => Kept::Report(report),
            ToDebugger::Received(d) => Kept::Received(d),
            _ => return Ok(true),
        };
        if self.window_len > 0 {
            if self.window.len() == self.window_len {
                self.window.pop_front();
            }
            self.window.push_back((self.len() - 1, kept));
        }
        Ok(true)
    }

    /// [`Self::take`] for a caller that keeps the reports it shows itself: records and indexes
    /// `message`, and keeps nothing of it in the window.
    pub fn take_ref(&mut self, message: &ToDebugger) -> Result<bool, StoreError> {
        let Some(seq) = self.recorder.take_at(message)? else {
            return Ok(false);
        };
        let (index, report) = match message {
            ToDebugger::Dispatch { index, report, .. } => (*index, &**report),
            ToDebugger::Received(d) => (d.index, &d.report),
            _ => return Ok(false),
        };
        if self.n.is_multiple_of(DISPATCH_SAMPLE) {
            self.samples.push(seq);
        }
        self.n += 1;
        if !self.keep_rows {
            return Ok(true);
        }
        let offset = self.recorder.record_offset(seq).unwrap_or(0);
        let label = self.intern(&report.label);
        self.rows.push(DispatchRow {
            index,
            program: report.program,
            offset,
            label,
            refusals: saturate(report.refusals.len()),
            escapes: saturate(report.escapes.len()),
            accesses: saturate(report.counts.accesses),
            mode: report.mode,
            hazards: u16::try_from(report.hazards.len()).unwrap_or(u16::MAX),
        });
        Ok(true)
    }

    fn intern(&mut self, label: &str) -> u32 {
        if let Some(&id) = self.label_ids.get(label) {
            return id;
        }
        let id = saturate(self.labels.len());
        self.labels.push(label.to_owned());
        self.label_ids.insert(label.to_owned(), id);
        id
    }

    /// The code of the programs the target sent so far (the listing's input; the capture keeps
    /// them too).
    pub fn programs(&self) -> &[dispatchscope_formats::sample::Program] {
        self.recorder.programs()
    }

    /// Dispatches recorded.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Whether none was recorded.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Every recorded dispatch's row, in order (none unless [`StoreOptions::keep_rows`]).
    pub fn rows(&self) -> &[DispatchRow] {
        &self.rows
    }

    /// A row's label.
    pub fn label(&self, row: &DispatchRow) -> &str {
        self.labels
            .get(row.label as usize)
            .map_or("", String::as_str)
    }

    /// Positions whose report is in memory: the window.
    pub fn window(&self) -> std::ops::Range<usize> {
        match (self.window.front(), self.window.back()) {
            (Some((a, _)), Some((b, _))) => *a..*b + 1,
            _ => 0..0,
        }
    }

    /// The report at position `pos` if it is in the window (decoded now when the window keeps it
    /// as it came over the wire).
    pub fn recent(&self, pos: usize) -> Option<Result<DispatchReport, StoreError>> {
        let first = self.window.front()?.0;
        let (p, kept) = self.window.get(pos.checked_sub(first)?)?;
        if *p != pos {
            return None;
        }
        Some(match kept {
            Kept::Report(r) => Ok((**r).clone()),
            Kept::Received(d) => d
                .decode()
                .map(|(_, r)| r)
                .map_err(|e| StoreError::ReadBack {
                    path: self.recorder.path().to_owned(),
                    offset: 0,
                    message: format!("dispatch {} as it came: {e}", d.index),
                }),
        })
    }

    /// The report at position `pos`: from the window, or read back from the file (flushing first
    /// when the record is not durable yet).
    pub fn report(&mut self, pos: usize) -> Result<DispatchReport, StoreError> {
        if let Some(r) = self.recent(pos) {
            return r;
        }
        Ok(self.record(pos)?.1)
    }

    /// The input and report at position `pos`, read back from the file.
    pub fn record(
        &mut self,
        pos: usize,
    ) -> Result<(dispatchscope_core::input::DispatchInput, DispatchReport), StoreError> {
        let offset = self.offset_of(pos)?;
        if offset >= self.recorder.durable_bytes() {
            self.recorder.flush()?;
        }
        let path = self.recorder.path().to_owned();
        let fail = |message: String| StoreError::ReadBack {
            path: path.clone(),
            offset,
            message,
        };
        if self.reader.is_none() {
            let f = File::open(&path).map_err(|e| fail(e.to_string()))?;
            self.reader = Some(f);
        }
        let Some(file) = self.reader.as_mut() else {
            return Err(fail("the file is not open".into()));
        };
        let payload = read_record_at(
            file,
            offset,
            RecordKind::DISPATCH,
            self.recorder.dictionary(),
        )
        .map_err(|e| fail(e.to_string()))?;
        let record = DispatchRecord::from_payload(&payload)
            .map_err(|e| fail(format!("the DISPATCH record is not one: {e}")))?;
        let report = record
            .report
            .ok_or_else(|| fail("the DISPATCH record has no report".into()))?;
        if let Some(row) = self.rows.get(pos)
            && report.index != row.index
        {
            return Err(fail(format!(
                "the record holds dispatch {}, not {}",
                report.index, row.index
            )));
        }
        Ok((record.input, report))
    }

    /// Where dispatch `pos`'s DISPATCH record starts in the file: its sample's seq, a walk of at
    /// most [`DISPATCH_SAMPLE`] dispatches along the capture writer's list of kinds, and the
    /// writer's offset of that record.
    fn offset_of(&self, pos: usize) -> Result<u64, StoreError> {
        let missing = StoreError::NoSuchDispatch { pos, len: self.n };
        if pos >= self.n {
            return Err(missing);
        }
        let from = *self.samples.get(pos / DISPATCH_SAMPLE).ok_or(missing)?;
        let n = (pos % DISPATCH_SAMPLE) as u64;
        let fail = |message: &str| StoreError::ReadBack {
            path: self.recorder.path().to_owned(),
            offset: 0,
            message: format!("dispatch {pos}: {message}"),
        };
        let seq = self
            .recorder
            .nth_dispatch_from(from, n)
            .ok_or_else(|| fail("the capture writer lists no such DISPATCH record"))?;
        self.recorder
            .record_offset(seq)
            .ok_or_else(|| fail("the capture writer lists no offset for its record"))
    }

    /// Where each recorded dispatch's checkpoints of engine state are, by the store's positions
    /// (record numbers are seqs): what the target sent after each dispatch that changed them.
    pub fn states(&self) -> &StateIndex {
        self.recorder.states()
    }

    /// Guest memory's state from the MEMORY_STATE record `record` that [`Self::states`] names.
    pub fn memory_state(&mut self, record: usize) -> Result<MemoryState, StoreError> {
        let bytes = self.read_state(record, MEMORY_STATE)?;
        decode_memory_state(&bytes).map_err(|e| self.state_error(record, e.to_string()))
    }

    /// Why the MEMORY_UNKNOWN or TABLE_UNKNOWN record `record` says a state is unknown.
    pub fn unknown_why(&mut self, record: usize, kind: RecordKind) -> Result<String, StoreError> {
        let bytes = self.read_state(record, kind)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The chunk table as dispatch `pos` left it, from the TABLE_STATE records [`Self::states`]
    /// names (the latest full one and its deltas), with the dispatch that wrote it and its
    /// record; `None` when none was recorded up to `pos` or it is unknown there.
    pub fn table_at(
        &mut self,
        pos: usize,
    ) -> Result<Option<(usize, usize, TableState)>, StoreError> {
        self.flush_for_states()?;
        let (recorder, reader) = (&self.recorder, &mut self.reader);
        recorder
            .states()
            .rebuild_table(pos, |seq| read_seq(recorder, reader, seq, TABLE_STATE))
            .map_err(|e| match e {
                Rebuild::Read(e) => e,
                Rebuild::Bad { record, error } => self.state_error(record, error.to_string()),
            })
    }

    /// Reads state record `record` (a seq) of `kind`, flushing first when it is not durable.
    fn read_state(&mut self, record: usize, kind: RecordKind) -> Result<Vec<u8>, StoreError> {
        self.flush_for_states()?;
        read_seq(&self.recorder, &mut self.reader, record, kind)
    }

    /// Writes buffered records out to the file when the latest is not there yet (a window that
    /// follows the newest dispatch reads its state right after it was written): no `fsync`,
    /// which the periodic flush does.
    fn flush_for_states(&mut self) -> Result<(), StoreError> {
        if self.recorder.summary().bytes > self.recorder.written_out_bytes() {
            self.recorder.write_out()?;
        }
        Ok(())
    }

    fn state_error(&self, record: usize, message: String) -> StoreError {
        StoreError::ReadBack {
            path: self.recorder.path().to_owned(),
            offset: self.recorder.record_offset(record as u64).unwrap_or(0),
            message: format!("the state record {record}: {message}"),
        }
    }

    /// Makes every record so far durable.
    pub fn flush(&mut self) -> Result<(), StoreError> {
        Ok(self.recorder.flush()?)
    }

    /// Writes the capture's index and trailer and closes it.
    pub fn finish(self) -> Result<RecordSummary, StoreError> {
        Ok(self.recorder.finish()?)
    }
}

/// Reads record `seq` of `kind` through the capture writer's list of offsets.
fn read_seq(
    recorder: &CaptureRecorder,
    reader: &mut Option<File>,
    seq: usize,
    kind: RecordKind,
) -> Result<Vec<u8>, StoreError> {
    let path = recorder.path().to_owned();
    let offset = recorder.record_offset(seq as u64);
    let fail = |message: String| StoreError::ReadBack {
        path: path.clone(),
        offset: offset.unwrap_or(0),
        message,
    };
    let offset = offset.ok_or_else(|| fail(format!("the capture writer lists no record {seq}")))?;
    if reader.is_none() {
        *reader = Some(File::open(&path).map_err(|e| fail(e.to_string()))?);
    }
    let Some(file) = reader.as_mut() else {
        return Err(fail("the file is not open".into()));
    };
    read_record_at(file, offset, kind, recorder.dictionary()).map_err(|e| fail(e.to_string()))
}

fn saturate(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
