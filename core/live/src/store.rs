//! [`LiveStore`]: the debugger's whole live session, on disk as it arrives, with an index and a
//! window of recent reports in memory, so that memory stays bounded however long the game runs.
//!
//! Every message goes to a [`CaptureRecorder`] (a crash-safe capture: the snapshot, events and
//! DISPATCH records, flushed at least every [`StoreOptions::flush_every`]). A dispatch that came
//! as [`ToDebugger::Received`] is written as the bytes it came in (a version 3 DISPATCH record,
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
//! [`LiveStore::memory_state`] (or [`LiveStore::memory_at`]) and [`LiveStore::table_at`] read a
//! dispatch's back from the file, each rebuilt from its latest whole record and the deltas after it.
//!
//! A lost device's report is recorded as the capture's DEVICE_LOSS record ([`LiveStore::loss`]).
//!
//! The file is a capture like any other: `dispatchscope explain` and the app open it while it is
//! being written (as a capture cut short) and after [`LiveStore::finish`] (through its index).
//!
//! # The disk budget
//!
//! A session is written as segments: files of at most about [`segment_bytes`] of the budget
//! ([`StoreOptions::disk_budget`], [`DEFAULT_DISK_BUDGET`] by default: a working day at a game's
//! rate). When the current file reaches its size, the next dispatch starts a new one
//! ([`CaptureRecorder::roll`]: `name.0001.dscap`, `name.0002.dscap`, ... beside the first), a
//! capture of its own that begins with the session's META and dictionary and, after its first
//! dispatch, the memory and table states the dispatch before it left. A closed file keeps in memory
//! only the offset of every [`DISPATCH_SAMPLE`]-th dispatch record and of its state records; any
//! other dispatch is found by walking at most that many record headers
//! ([`nth_record_from`]). When the files on disk exceed the budget, the oldest are deleted, and
//! their dispatches are *released*: asking for one answers [`StoreError::Released`], and
//! [`LiveStore::released`] says how many there are for the window to show.
//!
//! This module never draws and never opens a socket.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use thiserror::Error;

use std::path::PathBuf;

use crate::checkpoint::{Checkpoint, StatePart};
use crate::protocol::ReceivedDispatch;
use crate::protocol::ToDebugger;
use crate::record::{CaptureRecorder, ClosedFile, RecordError, RecordSummary};
use dispatchscope_core::report::{DispatchReport, Mode};
use dispatchscope_formats::capture::{RecordKind, nth_record_from, read_record_at};
use dispatchscope_formats::checkpoint::{
    MEMORY_STATE, MEMORY_UNKNOWN, MemoryDelta, MemoryState, Rebuild, StateAt, StateIndex,
    TABLE_STATE, TABLE_UNKNOWN, TableState,
};
use dispatchscope_formats::session::DispatchRecord;

/// Dispatches between two sampled record numbers in a [`LiveStore`] (what it keeps per dispatch:
/// 8 bytes over this many).
pub const DISPATCH_SAMPLE: usize = 64;

/// The disk a live session may take by default: a working day at a game's rate. Eight hours at
/// 12,000 dispatches a second is 345.6 million dispatches; at the 459 bytes a game-mode dispatch
/// takes on disk (BENCHMARKS.md, 10^7 dispatches) that is 158.6 GB, and this leaves 8 % over it.
pub const DEFAULT_DISK_BUDGET: u64 = 160 << 30;
/// A segment is about this share of the budget ([`segment_bytes`]): the oldest files go when
/// they and a whole current file would exceed the budget, so that the files on disk keep between
/// 14/16 of the budget and all of it.
pub const SEGMENTS_PER_BUDGET: u64 = 16;
/// The smallest segment a budget makes.
pub const MIN_SEGMENT_BYTES: u64 = 256 << 10;
/// The largest segment a budget makes (a day's budget is about 40 segments).
pub const MAX_SEGMENT_BYTES: u64 = 4 << 30;

/// The size at which a store with disk budget `budget` closes its current file and starts the
/// next one: [`SEGMENTS_PER_BUDGET`]-th of the budget, within [`MIN_SEGMENT_BYTES`] and
/// [`MAX_SEGMENT_BYTES`].
pub fn segment_bytes(budget: u64) -> u64 {
    (budget / SEGMENTS_PER_BUDGET).clamp(MIN_SEGMENT_BYTES, MAX_SEGMENT_BYTES)
}

/// The path of a session's file number `n` when its first is `first`: `first` itself for 0,
/// else `stem.NNNN.ext` beside it.
pub fn segment_path(first: &Path, n: usize) -> PathBuf {
    if n == 0 {
        return first.to_path_buf();
    }
    let stem = first
        .file_stem()
        .map_or_else(|| "session".into(), |s| s.to_string_lossy().into_owned());
    let name = match first.extension() {
        Some(ext) => format!("{stem}.{n:04}.{}", ext.to_string_lossy()),
        None => format!("{stem}.{n:04}"),
    };
    first.with_file_name(name)
}

/// `bytes` as a person reads a size: "160 GiB", "768 KiB", "12 B".
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = bytes as f64;
    let mut unit = 0;
    while x >= 1024.0 && unit + 1 < UNITS.len() {
        x /= 1024.0;
        unit += 1;
    }
    if unit == 0 || x >= 100.0 || x.fract() == 0.0 {
        format!("{x:.0} {}", UNITS[unit])
    } else {
        format!("{x:.1} {}", UNITS[unit])
    }
}

/// What the disk budget released so far: the oldest files of the session, deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Released {
    /// Dispatches no longer on disk: positions `0..dispatches`.
    pub dispatches: usize,
    /// Files deleted.
    pub files: usize,
    /// Their bytes.
    pub bytes: u64,
}

/// A store's figures, published as it takes each message for another thread to read without the
/// store's lock: a window's status bar reads them every frame while its intake thread records,
/// and a lock would make the frame wait out a file's roll (a flush, an index, the states read
/// back). Each figure is the store's as of the last message it took; two figures read one after
/// the other may be of different messages.
#[derive(Debug, Default)]
pub struct StoreFigures {
    dispatches: AtomicUsize,
    state_records: AtomicUsize,
    bytes_on_disk: AtomicU64,
    released_dispatches: AtomicUsize,
    released_files: AtomicUsize,
    released_bytes: AtomicU64,
    finished: AtomicBool,
}

impl StoreFigures {
    /// Dispatches recorded ([`LiveStore::len`]).
    pub fn dispatches(&self) -> usize {
        self.dispatches.load(Ordering::Relaxed)
    }

    /// State records the store has indexed ([`LiveStore::states`]' length): when it changes, a
    /// dispatch's state may have arrived.
    pub fn state_records(&self) -> usize {
        self.state_records.load(Ordering::Relaxed)
    }

    /// Bytes the session's files take on disk ([`LiveStore::bytes_on_disk`]).
    pub fn bytes_on_disk(&self) -> u64 {
        self.bytes_on_disk.load(Ordering::Relaxed)
    }

    /// What the disk budget released ([`LiveStore::released`]).
    pub fn released(&self) -> Released {
        Released {
            dispatches: self.released_dispatches.load(Ordering::Relaxed),
            files: self.released_files.load(Ordering::Relaxed),
            bytes: self.released_bytes.load(Ordering::Relaxed),
        }
    }

    /// Whether [`LiveStore::finish`] closed the store: the figures are its last.
    pub fn finished(&self) -> bool {
        self.finished.load(Ordering::Relaxed)
    }
}

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
    /// The dispatch (or state record) was in a file the disk budget deleted.
    #[error(
        "dispatch {pos} is no longer on disk: the disk budget of {} deleted the session's oldest {released} dispatches",
        human_bytes(*budget)
    )]
    Released {
        /// The position asked for (for a state record, the first position kept).
        pos: usize,
        /// Dispatches released.
        released: usize,
        /// The budget.
        budget: u64,
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
    /// The most bytes the session's files may take on disk (see the module docs); `None` keeps
    /// everything in one file.
    pub disk_budget: Option<u64>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            window: 512,
            flush_every: Duration::from_millis(500),
            keep_rows: true,
            disk_budget: Some(DEFAULT_DISK_BUDGET),
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
    /// Where its DISPATCH record starts in its file (the session's file it is in).
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

/// A file of the session that is closed and still on disk.
struct Segment {
    file: ClosedFile,
    /// The position of its first dispatch.
    first: usize,
    /// Its dispatches.
    n: usize,
    /// The number of its first record in the session's numbering ([`LiveStore::states`]).
    first_record: u64,
    /// The offset of every [`DISPATCH_SAMPLE`]-th of its dispatch records.
    samples: Vec<u64>,
}

/// A live session kept on disk with an index and a window in memory; see the module docs.
pub struct LiveStore {
    recorder: CaptureRecorder,
    /// The DISPATCH record seq and offset of every [`DISPATCH_SAMPLE`]-th dispatch of the current
    /// file; the capture writer's own list finds the others.
    samples: Vec<(u64, u64)>,
    /// The position of the current file's first dispatch.
    current_first: usize,
    /// The session's closed files still on disk, oldest first.
    closed: VecDeque<Segment>,
    /// Their bytes.
    closed_bytes: u64,
    /// What the budget deleted.
    released: Released,
    /// Records numbered below this were in deleted files.
    released_records: u64,
    /// The session's first file; the others are named after it ([`segment_path`]).
    first_path: PathBuf,
    /// Files made so far.
    files_made: usize,
    budget: Option<u64>,
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
    /// The file last read, kept open.
    reader: Option<(String, File)>,
    /// The figures another thread reads without the lock.
    figures: Arc<StoreFigures>,
    /// The target's loss report, once its device was lost (recorded as a DEVICE_LOSS record).
    loss: Option<Box<dispatchscope_core::report::DeviceLossReport>>,
}

impl LiveStore {
    /// A store writing `dest` once the target's snapshot arrives; `title` names the session.
    pub fn create(dest: &Path, title: &str, options: &StoreOptions) -> Self {
        Self {
            recorder: CaptureRecorder::new(dest, title, options.flush_every),
            samples: Vec::new(),
            current_first: 0,
            closed: VecDeque::new(),
            closed_bytes: 0,
            released: Released::default(),
            released_records: 0,
            first_path: dest.to_path_buf(),
            files_made: 1,
            budget: options.disk_budget,
            n: 0,
            rows: Vec::new(),
            keep_rows: options.keep_rows,
            labels: Vec::new(),
            label_ids: HashMap::new(),
            window: VecDeque::new(),
            window_len: options.window,
            reader: None,
            figures: Arc::default(),
            loss: None,
        }
    }

    /// The target's loss report, once its device was lost (the capture's DEVICE_LOSS record).
    pub fn loss(&self) -> Option<&dispatchscope_core::report::DeviceLossReport> {
        self.loss.as_deref()
    }

    /// The store's figures, kept up to date as it takes messages: for a thread that shows them
    /// without taking the store's lock.
    pub fn figures(&self) -> Arc<StoreFigures> {
        Arc::clone(&self.figures)
    }

    /// Publishes the figures after a message.
    fn publish(&self) {
        let f = &self.figures;
        f.dispatches.store(self.n, Ordering::Relaxed);
        f.state_records
            .store(self.recorder.states().len(), Ordering::Relaxed);
        f.bytes_on_disk
            .store(self.bytes_on_disk(), Ordering::Relaxed);
        f.released_dispatches
            .store(self.released.dispatches, Ordering::Relaxed);
        f.released_files
            .store(self.released.files, Ordering::Relaxed);
        f.released_bytes
            .store(self.released.bytes, Ordering::Relaxed);
    }

    /// The file being written.
    pub fn path(&self) -> &str {
        self.recorder.path()
    }

    /// The session's files on disk, oldest first (the current one last).
    pub fn files(&self) -> Vec<PathBuf> {
        self.closed
            .iter()
            .map(|s| PathBuf::from(&s.file.path))
            .chain(std::iter::once(PathBuf::from(self.recorder.path())))
            .collect()
    }

    /// Every file this session made, deleted ones included (to clean up after a temporary one).
    pub fn files_made(&self) -> Vec<PathBuf> {
        (0..self.files_made)
            .map(|n| segment_path(&self.first_path, n))
            .collect()
    }

    /// What the disk budget released so far.
    pub fn released(&self) -> Released {
        self.released
    }

    /// Bytes the session's files take on disk now.
    pub fn bytes_on_disk(&self) -> u64 {
        self.closed_bytes + self.recorder.file_bytes()
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
        let taken = self.record_message(message);
        self.publish();
        taken
    }

    /// [`Self::take_ref`] but for publishing the figures.
    fn record_message(&mut self, message: &ToDebugger) -> Result<bool, StoreError> {
        let dispatch = matches!(
            message,
            ToDebugger::Dispatch { .. } | ToDebugger::Received(_)
        );
        if dispatch
            && let Some(budget) = self.budget
            && self.recorder.started()
            && self.n > self.current_first
            && self.recorder.file_bytes() >= segment_bytes(budget)
        {
            self.roll(budget)?;
        }
        let Some(seq) = self.recorder.take_at(message)? else {
            if let ToDebugger::DeviceLost(report) = message
                && self.recorder.started()
            {
                self.loss = Some(report.clone());
            }
            return Ok(false);
        };
        let (index, report) = match message {
            ToDebugger::Dispatch { index, report, .. } => (*index, &**report),
            ToDebugger::Received(d) => (d.index, &d.report),
            _ => return Ok(false),
        };
        let offset = || self.recorder.record_offset(seq).unwrap_or(0);
        if (self.n - self.current_first).is_multiple_of(DISPATCH_SAMPLE) {
            self.samples.push((seq, offset()));
        }
        self.n += 1;
        if !self.keep_rows {
            return Ok(true);
        }
        let offset = offset();
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

    /// Closes the current file and starts the next one, carrying the states the last dispatch
    /// left; then deletes the oldest files while the session's files exceed `budget`.
    fn roll(&mut self, budget: u64) -> Result<(), StoreError> {
        let last = self.n - 1;
        let carried = self.carried_states(last)?;
        let next = segment_path(&self.first_path, self.files_made);
        let first_record = self.recorder.record_base();
        let file = self.recorder.roll(&next, carried)?;
        self.files_made += 1;
        self.reader = None;
        self.closed_bytes += file.bytes;
        self.closed.push_back(Segment {
            file,
            first: self.current_first,
            n: self.n - self.current_first,
            first_record,
            samples: std::mem::take(&mut self.samples)
                .into_iter()
                .map(|(_, offset)| offset)
                .collect(),
        });
        self.current_first = self.n;
        // Room for the current file to grow to its size: the files never exceed the budget by
        // more than the record that closes the current one.
        while self.closed_bytes + segment_bytes(budget) > budget
            && let Some(old) = self.closed.pop_front()
        {
            if let Err(e) = std::fs::remove_file(&old.file.path) {
                tracing::warn!(path = %old.file.path, error = %e, "the disk budget could not delete a file it released");
            }
            self.closed_bytes -= old.file.bytes;
            self.released.dispatches = old.first + old.n;
            self.released.files += 1;
            self.released.bytes += old.file.bytes;
            self.released_records = old.first_record + old.file.records;
        }
        Ok(())
    }

    /// The memory and table states dispatch `pos` left, read back from the files, for the next
    /// file to begin with; a state that cannot be read is carried as unknown, saying why.
    fn carried_states(&mut self, pos: usize) -> Result<Checkpoint, StoreError> {
        self.flush_for_states()?;
        let memory_at = self.recorder.states().memory_state_at(pos);
        let table_at = self.recorder.states().table_state_at(pos);
        let memory = match memory_at {
            StateAt::Known { .. } => Some(match self.memory_at(pos) {
                Ok(Some((_, _, m))) => StatePart::Known(MemoryDelta::whole_of(&m).encode()),
                Ok(None) => StatePart::Unknown("guest memory could not be rebuilt".into()),
                Err(e) => StatePart::Unknown(carry_failed(&e)),
            }),
            at => self.carried_part(at, MEMORY_STATE, MEMORY_UNKNOWN),
        };
        let table = match table_at {
            StateAt::Known { .. } => Some(match self.table_at(pos) {
                Ok(Some((_, _, t))) => StatePart::Known(TableState::encode(&t.table)),
                Ok(None) => StatePart::Unknown("the chunk table could not be rebuilt".into()),
                Err(e) => StatePart::Unknown(carry_failed(&e)),
            }),
            at => self.carried_part(at, TABLE_STATE, TABLE_UNKNOWN),
        };
        Ok(Checkpoint {
            dispatch: self.recorder.summary().last_dispatch.unwrap_or(0),
            memory,
            table,
        })
    }

    /// One state as [`Self::carried_states`] carries it: the record's bytes, or why not.
    fn carried_part(
        &mut self,
        at: StateAt,
        known: RecordKind,
        unknown: RecordKind,
    ) -> Option<StatePart> {
        match at {
            StateAt::None => None,
            StateAt::Known { record, .. } => Some(
                self.read_numbered(record, known)
                    .map_or_else(|e| StatePart::Unknown(carry_failed(&e)), StatePart::Known),
            ),
            StateAt::Unknown { record, .. } => Some(StatePart::Unknown(
                self.read_numbered(record, unknown).map_or_else(
                    |e| carry_failed(&e),
                    |b| String::from_utf8_lossy(&b).into_owned(),
                ),
            )),
        }
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

    /// The input and report at position `pos`, read back from its file.
    pub fn record(
        &mut self,
        pos: usize,
    ) -> Result<(dispatchscope_core::input::DispatchInput, DispatchReport), StoreError> {
        let (path, offset) = self.offset_of(pos)?;
        if pos >= self.current_first && offset >= self.recorder.durable_bytes() {
            self.recorder.flush()?;
        }
        let fail = |message: String| StoreError::ReadBack {
            path: path.clone(),
            offset,
            message,
        };
        let dictionary = match pos.checked_sub(self.current_first) {
            Some(_) => self.recorder.dictionary(),
            None => self
                .closed
                .iter()
                .find(|s| s.file.path == path)
                .and_then(|s| s.file.dictionary.as_deref()),
        };
        let payload = read_at(
            &mut self.reader,
            &path,
            offset,
            RecordKind::DISPATCH,
            dictionary,
        )?;
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

    /// Which file holds dispatch `pos`'s DISPATCH record, and where it starts there. In the
    /// current file: its sample's seq, a walk of at most [`DISPATCH_SAMPLE`] dispatches along the
    /// capture writer's list of kinds, and the writer's offset of that record. In a closed file:
    /// its sample's offset and a walk of the file's record headers from there.
    fn offset_of(&mut self, pos: usize) -> Result<(String, u64), StoreError> {
        if pos >= self.n {
            return Err(StoreError::NoSuchDispatch { pos, len: self.n });
        }
        if pos < self.released.dispatches {
            return Err(self.released_error(pos));
        }
        let fail = |path: &str, message: &str| StoreError::ReadBack {
            path: path.to_owned(),
            offset: 0,
            message: format!("dispatch {pos}: {message}"),
        };
        if let Some(k) = pos.checked_sub(self.current_first) {
            let path = self.recorder.path().to_owned();
            let &(from, _) = self
                .samples
                .get(k / DISPATCH_SAMPLE)
                .ok_or_else(|| fail(&path, "no sampled record"))?;
            let seq = self
                .recorder
                .nth_dispatch_from(from, (k % DISPATCH_SAMPLE) as u64)
                .ok_or_else(|| fail(&path, "the capture writer lists no such DISPATCH record"))?;
            let offset = self
                .recorder
                .record_offset(seq)
                .ok_or_else(|| fail(&path, "the capture writer lists no offset for its record"))?;
            return Ok((path, offset));
        }
        let i = self.closed.partition_point(|s| s.first <= pos);
        let segment = i
            .checked_sub(1)
            .and_then(|i| self.closed.get(i))
            .ok_or_else(|| fail(self.recorder.path(), "no file of the session holds it"))?;
        let k = pos - segment.first;
        let path = segment.file.path.clone();
        let from = *segment
            .samples
            .get(k / DISPATCH_SAMPLE)
            .ok_or_else(|| fail(&path, "no sampled record"))?;
        let file = open_kept(&mut self.reader, &path)?;
        let offset = nth_record_from(
            file,
            from,
            RecordKind::DISPATCH,
            (k % DISPATCH_SAMPLE) as u64,
        )
        .map_err(|e| StoreError::ReadBack {
            path: path.clone(),
            offset: from,
            message: format!("walking to dispatch {pos}: {e}"),
        })?;
        Ok((path, offset))
    }

    fn released_error(&self, pos: usize) -> StoreError {
        let (pos, released, budget) = self.released_at(pos);
        StoreError::Released {
            pos,
            released,
            budget,
        }
    }

    /// [`StoreError::Released`]'s values for position `pos`.
    fn released_at(&self, pos: usize) -> (usize, usize, u64) {
        (
            pos,
            self.released.dispatches,
            self.budget.unwrap_or(u64::MAX),
        )
    }

    /// Where each recorded dispatch's checkpoints of engine state are, by the store's positions
    /// (record numbers are seqs): what the target sent after each dispatch that changed them.
    pub fn states(&self) -> &StateIndex {
        self.recorder.states()
    }

    /// Guest memory's state as the MEMORY_STATE record `record` that [`Self::states`] names left
    /// it: rebuilt from the latest whole record at or before it and the deltas after that
    /// (`StateIndex::rebuild_memory_record`), so the Memory panel always gets a whole state.
    pub fn memory_state(&mut self, record: usize) -> Result<MemoryState, StoreError> {
        self.flush_for_states()?;
        let files = Files {
            recorder: &self.recorder,
            closed: &self.closed,
            released_records: self.released_records,
            released: self.released_at(self.released.dispatches.saturating_sub(1)),
        };
        let reader = &mut self.reader;
        let rebuilt = files
            .recorder
            .states()
            .rebuild_memory_record(record, |r| files.read(reader, r, MEMORY_STATE))
            .map_err(|e| match e {
                Rebuild::Read(e) => e,
                Rebuild::Bad { record, error } => self.state_error(record, error.to_string()),
            })?;
        rebuilt
            .map(|(_, _, m)| m)
            .ok_or_else(|| self.state_error(record, "no memory state is recorded there".into()))
    }

    /// Guest memory as dispatch `pos` left it, rebuilt ([`Self::memory_state`]), with the dispatch
    /// that wrote it and its record; `None` when none was recorded up to `pos` or it is unknown
    /// there.
    pub fn memory_at(
        &mut self,
        pos: usize,
    ) -> Result<Option<(usize, usize, MemoryState)>, StoreError> {
        self.flush_for_states()?;
        let files = Files {
            recorder: &self.recorder,
            closed: &self.closed,
            released_records: self.released_records,
            released: self.released_at(pos),
        };
        let reader = &mut self.reader;
        files
            .recorder
            .states()
            .rebuild_memory(pos, |record| files.read(reader, record, MEMORY_STATE))
            .map_err(|e| match e {
                Rebuild::Read(e) => e,
                Rebuild::Bad { record, error } => self.state_error(record, error.to_string()),
            })
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
        let files = Files {
            recorder: &self.recorder,
            closed: &self.closed,
            released_records: self.released_records,
            released: self.released_at(pos),
        };
        let reader = &mut self.reader;
        files
            .recorder
            .states()
            .rebuild_table(pos, |record| files.read(reader, record, TABLE_STATE))
            .map_err(|e| match e {
                Rebuild::Read(e) => e,
                Rebuild::Bad { record, error } => self.state_error(record, error.to_string()),
            })
    }

    /// Reads state record `record` (in the session's numbering) of `kind`, writing out first what
    /// is not in the file yet.
    fn read_state(&mut self, record: usize, kind: RecordKind) -> Result<Vec<u8>, StoreError> {
        self.flush_for_states()?;
        self.read_numbered(record, kind)
    }

    /// Reads record `record` (in the session's numbering) of `kind`, from whichever file holds it.
    fn read_numbered(&mut self, record: usize, kind: RecordKind) -> Result<Vec<u8>, StoreError> {
        let files = Files {
            recorder: &self.recorder,
            closed: &self.closed,
            released_records: self.released_records,
            released: self.released_at(self.released.dispatches.saturating_sub(1)),
        };
        files.read(&mut self.reader, record, kind)
    }

    /// Writes buffered records out to the file when the latest is not there yet (a window that
    /// follows the newest dispatch reads its state right after it was written): no `fsync`,
    /// which the periodic flush does.
    fn flush_for_states(&mut self) -> Result<(), StoreError> {
        if self.recorder.file_bytes() > self.recorder.written_out_bytes() {
            self.recorder.write_out()?;
        }
        Ok(())
    }

    fn state_error(&self, record: usize, message: String) -> StoreError {
        StoreError::ReadBack {
            path: self.recorder.path().to_owned(),
            offset: 0,
            message: format!("the state record {record}: {message}"),
        }
    }

    /// Makes every record so far durable.
    pub fn flush(&mut self) -> Result<(), StoreError> {
        Ok(self.recorder.flush()?)
    }

    /// Writes the current file's index and trailer and closes it; the summary counts the
    /// session's files and what the budget released.
    pub fn finish(self) -> Result<RecordSummary, StoreError> {
        self.figures.finished.store(true, Ordering::Relaxed);
        let released = self.released.dispatches;
        let mut summary = self.recorder.finish()?;
        summary.released = released as u64;
        Ok(summary)
    }
}

/// The session's files as a state record's reader sees them.
struct Files<'a> {
    recorder: &'a CaptureRecorder,
    closed: &'a VecDeque<Segment>,
    released_records: u64,
    /// What to answer for a record in a deleted file: the position it names, the dispatches
    /// released and the budget ([`StoreError::Released`]).
    released: (usize, usize, u64),
}

impl Files<'_> {
    /// Reads record `record` (in the session's numbering, [`LiveStore::states`]) of `kind`: from
    /// the current file through the capture writer's list of offsets, from a closed one through
    /// the offsets it kept of its state records.
    fn read(
        &self,
        reader: &mut Option<(String, File)>,
        record: usize,
        kind: RecordKind,
    ) -> Result<Vec<u8>, StoreError> {
        let record = record as u64;
        let base = self.recorder.record_base();
        let missing = |path: &str| StoreError::ReadBack {
            path: path.to_owned(),
            offset: 0,
            message: format!("the session lists no record {record}"),
        };
        if let Some(seq) = record.checked_sub(base) {
            let path = self.recorder.path();
            let offset = self
                .recorder
                .record_offset(seq)
                .ok_or_else(|| missing(path))?;
            return read_at(reader, path, offset, kind, self.recorder.dictionary());
        }
        if record < self.released_records {
            let (pos, released, budget) = self.released;
            return Err(StoreError::Released {
                pos,
                released,
                budget,
            });
        }
        let i = self.closed.partition_point(|s| s.first_record <= record);
        let segment = i
            .checked_sub(1)
            .and_then(|i| self.closed.get(i))
            .ok_or_else(|| missing(self.recorder.path()))?;
        let seq = record - segment.first_record;
        let offsets = &segment.file.state_offsets;
        let offset = offsets
            .binary_search_by_key(&seq, |&(s, _)| s)
            .map(|i| offsets[i].1)
            .map_err(|_| missing(&segment.file.path))?;
        read_at(
            reader,
            &segment.file.path,
            offset,
            kind,
            segment.file.dictionary.as_deref(),
        )
    }
}

/// `path`, kept open in `reader` (reopened when the last read was of another file).
fn open_kept<'r>(
    reader: &'r mut Option<(String, File)>,
    path: &str,
) -> Result<&'r mut File, StoreError> {
    let (kept, file) = match reader.take() {
        Some((p, f)) if p == path => (p, f),
        _ => {
            let f = File::open(path).map_err(|e| StoreError::ReadBack {
                path: path.to_owned(),
                offset: 0,
                message: e.to_string(),
            })?;
            (path.to_owned(), f)
        }
    };
    Ok(&mut reader.insert((kept, file)).1)
}

/// Reads the record of `kind` at `offset` in `path`.
fn read_at(
    reader: &mut Option<(String, File)>,
    path: &str,
    offset: u64,
    kind: RecordKind,
    dictionary: Option<&[u8]>,
) -> Result<Vec<u8>, StoreError> {
    let file = open_kept(reader, path)?;
    read_record_at(file, offset, kind, dictionary).map_err(|e| StoreError::ReadBack {
        path: path.to_owned(),
        offset,
        message: e.to_string(),
    })
}

/// Why a state could not be carried into the session's next file.
fn carry_failed(e: &StoreError) -> String {
    format!("the state could not be carried into the session's next file: {e}")
}

fn saturate(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
