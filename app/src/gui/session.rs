//! A session: the reports of every dispatch of one opened sample or capture, plus what the panels
//! need that a report does not carry (guest memory and the chunk table as each dispatch left them).
//!
//! A sample (JSON, small) is replayed once, on a background thread for files ([`Loader`]), and
//! everything is kept in memory. A capture is read through its index: opening it reads dispatch
//! 0's report and checkpoints, and selecting dispatch N reads its DISPATCH record and the engine
//! state checkpoints that cover it (`dispatchscope_formats::checkpoint`), a few kept; a background
//! thread reads every report once for the dispatch list's rows. Nothing replays the capture,
//! except a small one that keeps no checkpoints (it is replayed as a sample is). A torn tail
//! becomes a warning on the session, not an error. Which of the two a file is, and the warning's
//! words, are `crate::load`'s, shared with the CLI.
//! A live session starts empty and grows with [`Session::push_batch`] as dispatches arrive (the
//! live link's intake thread stores them and makes their rows; the window appends a batch a
//! frame): a row for every dispatch since attach (the compact [`Rows`]), the latest [`LIVE_WINDOW`] reports in
//! memory, and any older report read back from the live store's file when it is selected (one
//! seek, [`LiveStore::report`]), a few kept; memory is bounded by those two windows plus the rows,
//! however long the game runs. Its Memory and Chunk table panels come from the checkpoints of
//! engine state the target sends when they change, which the store records after their dispatch
//! (`dispatchscope_live::checkpoint`): read for the selected dispatch from the store's file, as a
//! capture's are; a reopened live recording is a capture like any other. Where a state is unknown
//! (the target could not send it) or was not recorded, the panels say so
//! ([`Session::state_note_at`]).

use std::collections::VecDeque;
use std::io::{Read, Seek};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use dispatchscope_analysis::history::History;
use dispatchscope_core::{CpuBackend, DispatchReport, Engine};
use dispatchscope_formats::capture::{self, FILE_MAGIC};
use dispatchscope_formats::checkpoint::{MEMORY_UNKNOWN, StateAt, StateIndex, TABLE_UNKNOWN};
use dispatchscope_formats::history;
use dispatchscope_formats::sample::{Sample, SampleError};
use dispatchscope_formats::session::{CaptureFile, Kind, SNIFF_BYTES, SessionError, kind_of};
use dispatchscope_live::LiveStore;
use dispatchscope_live::protocol::ReceivedDispatch;
use dispatchscope_live::store::StoreFigures;
use dispatchscope_views::{
    DispatchRow, DispatchState, MemoryView, PendingRow, Rows, TableSnapshot,
};

use crate::load::torn_note;

/// Where a session came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A file the person opened.
    File(PathBuf),
    /// A sample built into the binary, by file name.
    Embedded(&'static str),
    /// A live target, by the address attached to.
    Live(String),
}

impl Source {
    /// How the status bar and error panel name it.
    pub fn display(&self) -> String {
        match self {
            Source::File(p) => p.display().to_string(),
            Source::Embedded(name) => format!("{name} (built in)"),
            Source::Live(addr) => format!("live: {addr}"),
        }
    }

    /// The key bookmarks are remembered under.
    pub fn key(&self) -> String {
        match self {
            Source::File(p) => p.display().to_string(),
            Source::Embedded(name) => format!("embedded:{name}"),
            Source::Live(addr) => format!("live:{addr}"),
        }
    }
}

/// Why a file could not be opened: what the error panel shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadError {
    /// The file.
    pub source: String,
    /// What was wrong (for a parse error: line, column, JSON path and message).
    pub message: String,
    /// For a parse error: the 1-based line and column, and the text of that line.
    pub at: Option<(usize, usize, String)>,
    /// For a bad capture record: its byte offset in the file.
    pub offset_bytes: Option<u64>,
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.source, self.message)
    }
}

/// Why a session could not be read again whole, off the window's thread: its write history, a
/// comparison's reports, a what-if's capture.
#[derive(Debug, thiserror::Error)]
pub enum ReadAgainError {
    /// The capture could not be reopened or a record read.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The history could not be made.
    #[error(transparent)]
    History(#[from] dispatchscope_formats::history::HistoryError),
    /// A capture's dispatch recorded without its report.
    #[error(
        "dispatch {pos} carries no report (the recorder did not have it); a comparison needs every report"
    )]
    NoReport {
        /// The dispatch's position.
        pos: usize,
    },
    /// A live session keeps no whole history.
    #[error("a live session keeps no whole history: save it and open the capture")]
    Live,
    /// No session is open.
    #[error("no session is open")]
    NoSession,
    /// The thread making it stopped before it answered.
    #[error("the history's thread stopped")]
    ThreadStopped,
}

/// Progress of a load, shared with the thread doing it.
#[derive(Debug, Default)]
pub struct Progress {
    /// Steps replayed.
    pub done: AtomicUsize,
    /// Steps in the sample (0 while reading).
    pub total: AtomicUsize,
}

impl Progress {
    /// Steps done, steps in all, and the fraction done (0 while the total is not known).
    pub fn fraction(&self) -> (usize, usize, f32) {
        let done = self.done.load(Ordering::Relaxed);
        let total = self.total.load(Ordering::Relaxed);
        let frac = if total == 0 {
            0.0
        } else {
            done as f32 / total as f32
        };
        (done, total, frac)
    }
}

/// How many reports read from a capture or a live store stay in memory (the selection and the
/// last few visited).
pub const REPORT_CACHE: usize = 16;

/// How many of a live session's latest reports stay in memory (the ones the window follows);
/// older ones are read back from the live store's file.
pub const LIVE_WINDOW: usize = 256;

/// The store a live session's reports are read back from, shared with the `LiveLink` writing it
/// (`None` once the link finished it).
pub type SharedStore = Arc<Mutex<Option<LiveStore>>>;

/// What a live session's intake thread hands the window each frame: the rows of the dispatches
/// that arrived, in order, and the latest of them as they came.
#[derive(Default)]
pub struct LiveBatch {
    /// The rows, in order (8 bytes a dispatch; never cut).
    pub rows: Rows,
    /// The latest dispatches as they came, the last being the last row's; at most
    /// [`LIVE_WINDOW`] (older ones are in the store's file).
    pub recent: VecDeque<Recent>,
    /// The session position of the recording's first dispatch, once the recording took one.
    pub store_first: Option<usize>,
}

impl LiveBatch {
    /// Appends one dispatch's recent entry, keeping at most [`LIVE_WINDOW`].
    pub fn keep_recent(&mut self, recent: Recent) {
        if self.recent.len() >= LIVE_WINDOW {
            self.recent.pop_front();
        }
        self.recent.push_back(recent);
    }
}

/// A capture without checkpoints of engine state at most this large is replayed up front, as a
/// sample is, so that its Memory and Chunk table panels are drawn; a larger one is not (opening
/// it must not take the whole session's replay).
pub const REPLAY_UP_FRONT_BYTES: u64 = 64 << 20;

/// Rows are sent from the scanning thread in batches of this many.
const ROW_BATCH: usize = 256;

/// What a capture is read through: a file, or bytes already in memory (tests, a dropped file).
pub trait CaptureSource: Read + Seek + Send {}
impl<T: Read + Seek + Send> CaptureSource for T {}

/// An open capture read on demand.
pub type Capture = CaptureFile<Box<dyn CaptureSource>>;

/// Opens a capture again, for the thread that scans its rows.
type Reopen = Arc<dyn Fn() -> Result<Capture, SessionError> + Send + Sync>;

/// The reports of a session: all in memory (a sample, a live session), or read from a capture
/// through its index when a dispatch is selected ([`Session::prepare`]), a few kept.
pub struct Reports {
    /// Every report, for a session held in memory.
    kept: Vec<DispatchReport>,
    /// The capture they are read from, otherwise.
    disk: Option<Disk>,
    /// A live session's window and its store.
    live: Option<Live>,
}

/// One of a live session's latest dispatches, as the window keeps it.
pub enum Recent {
    /// Its report, whole.
    Report(Box<DispatchReport>),
    /// As it came over the wire: its table row was read from the message's MessagePack part,
    /// and its access rows and mapping lists are decoded only when it is selected
    /// (`Live::prepare`), so that the UI thread does not decode every dispatch of a game.
    Received(Box<ReceivedDispatch>),
}

/// A live session's reports: the latest in memory, the rest in the live store's file.
struct Live {
    store: SharedStore,
    /// The store's figures, read without its lock.
    figures: Arc<StoreFigures>,
    /// The session position of the store's first dispatch (dispatches that arrived before the
    /// recording started, or after it stopped, are in memory only while in the window).
    store_first: Option<usize>,
    /// Dispatches in the session.
    n: usize,
    /// The latest [`LIVE_WINDOW`] dispatches, the last at position `n - 1`.
    recent: VecDeque<Recent>,
    /// Reports read back from the store or decoded from the window, newest last.
    cache: Vec<(usize, DispatchReport)>,
    /// The engine state the target sent for the dispatch prepared last, from the store's
    /// checkpoints (`dispatchscope_live::checkpoint`).
    states: LiveStates,
}

/// A live session's checkpoints as read for one dispatch: guest memory and the chunk table by the
/// store record that held them (kept while the next dispatch's state is the same record), and
/// why one is missing.
#[derive(Default)]
struct LiveStates {
    /// The session position they were read for.
    pos: Option<usize>,
    memory: Option<(usize, Arc<MemoryView>)>,
    /// Whether `memory` is the state at `pos`.
    memory_here: bool,
    table: Option<(usize, TableSnapshot)>,
    table_here: bool,
    note: Option<String>,
    /// The store's state records when they were read (a checkpoint that arrives after its
    /// dispatch was selected makes them be read again).
    records_seen: usize,
}

impl Live {
    /// Reads the report at `pos` unless it is in memory, and the engine state the store's
    /// checkpoints hold for it.
    fn prepare(&mut self, pos: usize) -> Result<(), String> {
        let report = self.prepare_report(pos);
        if pos < self.n {
            self.prepare_states(pos);
        }
        report
    }

    /// Reads dispatch `pos`'s memory and table checkpoints from the store (the records the target
    /// sent after the dispatches that changed them), unless the ones read last still hold; a
    /// state that is not there gets a note saying why.
    fn prepare_states(&mut self, pos: usize) {
        let first = self.store_first;
        let st = &mut self.states;
        st.pos = Some(pos);
        st.records_seen = self.figures.state_records();
        st.memory_here = false;
        st.table_here = false;
        st.note = None;
        let not_stored = || {
            Some(format!(
                "Dispatch {pos} is not in this live session's recording (it arrived before the recording started or after it stopped), so the Memory and Chunk table panels show what its report carries."
            ))
        };
        let Some(spos) = first.and_then(|f| pos.checked_sub(f)) else {
            st.note = not_stored();
            return;
        };
        let Ok(mut guard) = self.store.lock() else {
            st.note = Some("The live store's lock was poisoned (a bug in dispatchscope).".into());
            return;
        };
        let Some(store) = guard.as_mut() else {
            st.note = Some("The live session's recording was closed, so the Memory and Chunk table panels show what the report carries.".into());
            return;
        };
        if spos >= store.len() {
            st.note = not_stored();
            return;
        }
        let base = first.unwrap_or(0);
        let mut notes: Vec<String> = Vec::new();
        let memory_at = store.states().memory_state_at(spos);
        let table_at = store.states().table_state_at(spos);
        match memory_at {
            StateAt::Known { record, .. } => {
                if st.memory.as_ref().is_none_or(|(r, _)| *r != record) {
                    match store.memory_state(record) {
                        Ok(m) => st.memory = Some((record, Arc::new(memory_view(m)))),
                        Err(e) => notes.push(format!("Memory: {e}")),
                    }
                }
                st.memory_here = st.memory.as_ref().is_some_and(|(r, _)| *r == record);
            }
            StateAt::Unknown { from, record } => {
                let why = store
                    .unknown_why(record, MEMORY_UNKNOWN)
                    .unwrap_or_else(|e| e.to_string());
                notes.push(unknown_note("guest memory", from + base, &why));
            }
            StateAt::None => notes.push(NO_MEMORY_CHECKPOINT.into()),
        }
        match table_at {
            StateAt::Known { record, .. } => {
                if st.table.as_ref().is_none_or(|(r, _)| *r != record) {
                    match store.table_at(spos) {
                        Ok(Some((from, idx, t))) => {
                            st.table = Some((idx, TableSnapshot::new(t.table, from + base)));
                        }
                        Ok(None) => {}
                        Err(e) => notes.push(format!("Chunk table: {e}")),
                    }
                }
                st.table_here = st.table.as_ref().is_some_and(|(r, _)| *r == record);
            }
            StateAt::Unknown { from, record } => {
                let why = store
                    .unknown_why(record, TABLE_UNKNOWN)
                    .unwrap_or_else(|e| e.to_string());
                notes.push(unknown_note("chunk table", from + base, &why));
            }
            StateAt::None => {}
        }
        st.note = (!notes.is_empty()).then(|| notes.join(" "));
    }

    fn get(&self, pos: usize) -> Option<&DispatchReport> {
        let first_recent = self.n - self.recent.len();
        if pos >= first_recent
            && let Some(Recent::Report(r)) = self.recent.get(pos - first_recent)
        {
            return Some(r);
        }
        self.cache
            .iter()
            .rev()
            .find(|(p, _)| *p == pos)
            .map(|(_, r)| r)
    }

    /// Reads the report at `pos` back from the store unless it is in memory.
    fn prepare_report(&mut self, pos: usize) -> Result<(), String> {
        if pos >= self.n {
            return Ok(());
        }
        let first_recent = self.n - self.recent.len();
        if let Some(Recent::Report(_)) = pos
            .checked_sub(first_recent)
            .and_then(|i| self.recent.get(i))
        {
            return Ok(());
        }
        if let Some(i) = self.cache.iter().position(|(p, _)| *p == pos) {
            let hit = self.cache.remove(i);
            self.cache.push(hit);
            return Ok(());
        }
        if let Some(Recent::Received(d)) = pos
            .checked_sub(first_recent)
            .and_then(|i| self.recent.get(i))
        {
            let (_, report) = d
                .decode()
                .map_err(|e| format!("dispatch {}'s rows or mapping lists: {e}", d.index))?;
            self.keep(pos, report);
            return Ok(());
        }
        let not_stored = || {
            format!(
                "dispatch {pos} of this live session is not in its recording (it arrived before the recording started or after it stopped), and it left the window of the latest {LIVE_WINDOW}"
            )
        };
        let spos = self
            .store_first
            .and_then(|f| pos.checked_sub(f))
            .ok_or_else(not_stored)?;
        let mut guard = self.store.lock().map_err(|_| {
            "the live store's lock was poisoned (a bug in dispatchscope)".to_owned()
        })?;
        let store = guard
            .as_mut()
            .ok_or_else(|| "the live session's recording was closed".to_owned())?;
        if spos >= store.len() {
            return Err(not_stored());
        }
        let report = store.report(spos).map_err(|e| e.to_string())?;
        drop(guard);
        self.keep(pos, report);
        Ok(())
    }

    /// Keeps `report` (of `pos`) among the last [`REPORT_CACHE`] read.
    fn keep(&mut self, pos: usize, report: DispatchReport) {
        if self.cache.len() >= REPORT_CACHE {
            self.cache.remove(0);
        }
        self.cache.push((pos, report));
    }

    /// Appends `n_new` dispatches, of which `recent` are the latest (the oldest in the window
    /// leave memory; the store's file keeps them).
    fn push(&mut self, n_new: usize, recent: VecDeque<Recent>, store_first: Option<usize>) {
        if self.store_first.is_none() {
            self.store_first = store_first;
        }
        if recent.len() < n_new {
            // The intake kept only the latest of them: the window starts again from those.
            self.recent.clear();
        }
        for r in recent {
            if self.recent.len() >= LIVE_WINDOW {
                self.recent.pop_front();
            }
            self.recent.push_back(r);
        }
        self.n += n_new;
    }
}

/// A capture's reports and checkpoints, read on demand.
struct Disk {
    file: Capture,
    n: usize,
    /// Recently read reports, newest last.
    cache: Vec<(usize, DispatchReport)>,
    states: StateIndex,
    /// The memory checkpoint last read: its record, and the view made from it.
    memory: Option<(usize, Arc<MemoryView>)>,
    /// The table checkpoint last read: its record, and the snapshot made from it.
    table: Option<(usize, TableSnapshot)>,
    /// Why the dispatch prepared last lacks a state the capture's checkpoints otherwise give.
    note: Option<(usize, String)>,
}

/// What the panels say of a dispatch that no memory checkpoint reaches.
const NO_MEMORY_CHECKPOINT: &str = "No checkpoint of guest memory reaches this dispatch (the recording holds none at or before it), so the Memory panel shows what the report carries.";

/// The note for a state a checkpoint says is unknown from dispatch `from` on.
fn unknown_note(what: &str, from: usize, why: &str) -> String {
    format!(
        "The target's {what} is not known from dispatch {from} until its next checkpoint: {why}. The panel shows what the report carries."
    )
}

/// The Memory panel's view of a checkpoint.
fn memory_view(m: dispatchscope_formats::checkpoint::MemoryState) -> MemoryView {
    MemoryView::from_runs(
        m.page_bytes,
        m.reservations
            .into_iter()
            .map(|r| (r.range, r.runs.into_iter().map(|x| (x.pages, x.page)))),
        m.targets,
    )
}

impl Reports {
    fn in_memory(kept: Vec<DispatchReport>) -> Self {
        Self {
            kept,
            disk: None,
            live: None,
        }
    }

    /// Dispatches in the session.
    pub fn len(&self) -> usize {
        if let Some(l) = &self.live {
            return l.n;
        }
        self.disk.as_ref().map_or(self.kept.len(), |d| d.n)
    }

    /// Whether the session has no dispatch.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The report at `pos`, if it is in memory: always for a session held in memory; for a
    /// capture, once [`Session::prepare`] read it.
    pub fn get(&self, pos: usize) -> Option<&DispatchReport> {
        if let Some(l) = &self.live {
            return l.get(pos);
        }
        match &self.disk {
            None => self.kept.get(pos),
            Some(d) => d
                .cache
                .iter()
                .rev()
                .find(|(p, _)| *p == pos)
                .map(|(_, r)| r),
        }
    }

    /// Every report held in memory, in order (a capture's are read one at a time instead).
    pub fn in_memory_reports(&self) -> &[DispatchReport] {
        &self.kept
    }

    /// Whether reports are read from a capture on demand.
    pub fn on_disk(&self) -> bool {
        self.disk.is_some()
    }

    /// Reports held in memory now: the session's own, or a live session's window and the ones
    /// read back, or a capture's cache (what stays bounded however long a live session runs).
    pub fn held(&self) -> usize {
        match (&self.live, &self.disk) {
            (Some(l), _) => l.recent.len() + l.cache.len(),
            (None, Some(d)) => d.cache.len(),
            (None, None) => self.kept.len(),
        }
    }
}

/// Rows arriving from the thread that scans a capture's reports.
struct RowScan {
    rx: mpsc::Receiver<Result<Vec<DispatchRow>, String>>,
}

/// Everything the panels draw for one opened session.
pub struct Session {
    /// Where it came from.
    pub source: Source,
    /// The sample's title.
    pub title: String,
    /// The reports, in order.
    pub reports: Reports,
    /// One table row per dispatch, in columns (for a capture, filled in by a background scan).
    pub rows: Rows,
    /// Per dispatch: the chunk table as it stood after the dispatch, if one existed yet (a
    /// session held in memory; a capture's come from its checkpoints).
    pub tables: Vec<Option<TableSnapshot>>,
    /// Per dispatch: guest memory as the dispatch left it, shared while unchanged (a session held
    /// in memory).
    pub memory: Vec<Arc<MemoryView>>,
    /// Something the person should know that did not stop the load (a capture's torn tail).
    pub warning: Option<String>,
    /// Why the Memory and Chunk table panels lack engine state, when they do.
    pub state_note: Option<String>,
    /// The code of the programs the session carries (a sample's `programs`, a capture's META),
    /// for the listing.
    pub programs: Vec<dispatchscope_formats::sample::Program>,
    rows_scan: Option<RowScan>,
    /// What a write history is made from ([`Session::history`]); none for a live session.
    history_source: Option<HistorySource>,
    /// The file a live session's files were joined into, kept while the session (and the
    /// threads that read it again) read it.
    joined: Option<Arc<JoinedFile>>,
    /// The device's loss, when the session ended with it (a capture's DEVICE_LOSS record, a live
    /// target's loss message): the Device lost view's report.
    pub loss: Option<Arc<dispatchscope_core::report::DeviceLossReport>>,
    /// The dispatches without a report, by index: in flight (a live session's, prepared and not
    /// completed), abandoned (the latest [`ABANDONED_KEPT`]), lost (the loss report's); the list
    /// shows them after the completed ones.
    pub unfinished: Vec<PendingRow>,
}

/// Abandoned dispatches a live session keeps listing, the latest.
pub const ABANDONED_KEPT: usize = 64;

/// What a session's write histories, comparisons and what-ifs are made from, on a thread of
/// their own.
#[derive(Clone)]
pub enum HistorySource {
    /// A sample, whose reports the session holds.
    Sample(Arc<Sample>),
    /// A capture, opened again on the history's thread and read through its index.
    Capture(Reopen),
}

impl Session {
    /// Reads `bytes` (the contents of `source`) as a sample or a capture ([`kind_of`] tells
    /// which); a sample is replayed, a capture read through its index.
    pub fn load(source: Source, bytes: &[u8], progress: &Progress) -> Result<Session, LoadError> {
        puffin::profile_function!();
        let name = source.display();
        let err = |message: String, at| LoadError {
            source: name.clone(),
            message,
            at,
            offset_bytes: None,
        };
        let kind = kind_of(bytes);
        if kind == Some(Kind::Capture) {
            let bytes: Arc<[u8]> = Arc::from(bytes);
            let reopen: Reopen = {
                let (bytes, name) = (Arc::clone(&bytes), name.clone());
                Arc::new(move || open_capture_bytes(&name, Arc::clone(&bytes)))
            };
            let file = open_capture_bytes(&name, bytes).map_err(|e| capture_error(&name, e))?;
            return Self::load_capture(source, file, reopen, progress);
        }
        let magic = String::from_utf8_lossy(&FILE_MAGIC);
        let text = std::str::from_utf8(bytes).map_err(|e| {
            err(
                format!("neither a dispatchscope sample (not UTF-8 text: {e}) nor a capture (it does not start with {magic:?})"),
                None,
            )
        })?;
        if kind.is_none() {
            return Err(err(
                format!(
                    "neither a dispatchscope sample (a JSON object) nor a capture (it does not start with {magic:?})"
                ),
                None,
            ));
        }
        let sample = Sample::from_json(text).map_err(|e| {
            let at = match &e {
                SampleError::Parse { line, column, .. } => {
                    let l = text
                        .lines()
                        .nth(line.saturating_sub(1))
                        .unwrap_or("")
                        .to_owned();
                    Some((*line, *column, l))
                }
                _ => None,
            };
            err(e.to_string(), at)
        })?;
        Self::replay(source, &sample, progress).map_err(|e| err(e.to_string(), None))
    }

    /// Opens a capture: with checkpoints of engine state (or too large to replay), through its
    /// index: dispatch 0's report and checkpoints now, every row from a background scan; a small
    /// capture without checkpoints is read back as a sample and replayed. A torn tail (a
    /// recorder that died) keeps what came before it and becomes [`Session::warning`].
    fn load_capture(
        source: Source,
        mut file: Capture,
        reopen: Reopen,
        progress: &Progress,
    ) -> Result<Session, LoadError> {
        puffin::profile_function!();
        let name = source.display();
        let torn = torn_note(&file);
        let states = file.states();
        let size = file.len_bytes();
        // A later file of a live session (or files joined from one) has no snapshot to replay
        // from: its recorded reports are what it shows.
        let late = dispatchscope_live::segments::starts_late(&file.meta().description);
        if !states.has_memory() && size <= REPLAY_UP_FRONT_BYTES && !late {
            let (sample, recorded) = file.to_sample().map_err(|e| capture_error(&name, e))?;
            let mut session =
                Self::replay_keeping(source, &sample, &recorded, progress).map_err(|e| {
                    LoadError {
                        source: name.clone(),
                        message: format!("the capture replays with an error: {e}"),
                        at: None,
                        offset_bytes: None,
                    }
                })?;
            session.warning = torn;
            session.set_loss(file.loss().cloned());
            return Ok(session);
        }
        let loss = file.loss().cloned();
        let n = file.n_dispatches();
        let title = file.meta().title.clone();
        let state_note = (!states.has_memory()).then(|| {
            format!(
                "This capture ({} MiB) keeps no checkpoints of engine state, so the Memory and Chunk table panels show what the report carries only; `dispatchscope convert` it to a new capture to add them.",
                size >> 20
            )
        });
        let programs = file.meta().programs.clone();
        let mut session = Session {
            source,
            title,
            programs,
            reports: Reports {
                kept: Vec::new(),
                disk: Some(Disk {
                    file,
                    n,
                    cache: Vec::new(),
                    states,
                    memory: None,
                    table: None,
                    note: None,
                }),
                live: None,
            },
            rows: Rows::new(),
            tables: Vec::new(),
            memory: Vec::new(),
            warning: torn,
            state_note,
            rows_scan: None,
            history_source: Some(HistorySource::Capture(Arc::clone(&reopen))),
            joined: None,
            loss: None,
            unfinished: Vec::new(),
        };
        session.set_loss(loss);
        if n > 0 {
            session.prepare(0).map_err(|e| capture_error(&name, e))?;
        }
        session.rows_scan = Some(scan_rows(reopen, n));
        progress.total.store(n, Ordering::Relaxed);
        Ok(session)
    }

    /// An empty live session attached to `addr`, whose older reports are read back from `store`
    /// (the live link's recording).
    pub fn live(addr: &str, title: String, store: SharedStore) -> Session {
        // The figures the store publishes, read each frame without its lock.
        let figures = store
            .lock()
            .ok()
            .and_then(|g| g.as_ref().map(LiveStore::figures))
            .unwrap_or_default();
        let mut s =
            Self::from_reports(Source::Live(addr.to_owned()), title, Vec::new(), Vec::new());
        s.reports.live = Some(Live {
            store,
            figures,
            store_first: None,
            n: 0,
            recent: VecDeque::new(),
            cache: Vec::new(),
            states: LiveStates::default(),
        });
        s
    }

    /// Keeps the device's loss (`None` changes nothing): its dispatches in flight become the
    /// list's lost rows, in place of the ones listed in flight; the abandoned stay.
    pub fn set_loss(&mut self, loss: Option<dispatchscope_core::report::DeviceLossReport>) {
        let Some(loss) = loss else { return };
        self.unfinished
            .retain(|p| p.state == DispatchState::Abandoned);
        self.unfinished
            .extend(loss.in_flight.iter().map(|d| PendingRow {
                index: d.index,
                program: d.program,
                label: Arc::from(d.label.as_str()),
                mode: d.mode,
                state: DispatchState::Lost,
            }));
        self.unfinished.sort_by_key(|p| p.index);
        self.loss = Some(Arc::new(loss));
    }

    /// Replaces the dispatches listed in flight and abandoned with a live intake's latest
    /// (`rows`, by index); once the device was lost, the lost ones stay.
    pub fn set_unfinished(&mut self, rows: Vec<PendingRow>) {
        if self.loss.is_some() {
            return;
        }
        self.unfinished = rows;
    }

    /// Appends what a live session's intake thread took since the last frame
    /// (`super::live::LiveLink::drain`): every row, and the latest dispatches as they came to the
    /// window of the latest (the oldest there leave memory; the store's file keeps them). A
    /// dispatch's chunk table and memory view come from the checkpoints the target sent, which
    /// the store recorded after it, when it is prepared ([`Self::prepare`]). A session that is
    /// not live takes the rows alone.
    pub fn push_batch(&mut self, batch: LiveBatch) {
        let n_new = batch.rows.len();
        self.rows.append(&batch.rows);
        if let Some(l) = &mut self.reports.live {
            l.push(n_new, batch.recent, batch.store_first);
        }
        self.release_rows();
    }

    /// Drops the rows of the dispatches a live recording's disk budget released (and of any
    /// before its first), so that the rows' memory is bounded by what is on disk: a selection
    /// or a search cannot reach them any more, and the store cannot read them back.
    pub fn release_rows(&mut self) -> usize {
        let Some(l) = &self.reports.live else {
            return 0;
        };
        let released = l.figures.released().dispatches;
        match l.store_first {
            Some(first) if released > 0 => self.rows.release_front(first + released),
            _ => 0,
        }
    }

    /// Replays `sample` as [`Sample::run`] does, keeping a snapshot of the chunk table after each
    /// dispatch that changed it.
    pub fn replay(
        source: Source,
        sample: &Sample,
        progress: &Progress,
    ) -> Result<Session, SampleError> {
        Self::replay_keeping(source, sample, &[], progress)
    }

    /// [`Self::replay`] of a capture, keeping from each recorded report what only the device and
    /// the emulator knew (`session::keep_recorded_sections`).
    pub fn replay_keeping(
        source: Source,
        sample: &Sample,
        recorded: &[Option<DispatchReport>],
        progress: &Progress,
    ) -> Result<Session, SampleError> {
        puffin::profile_function!();
        progress.total.store(sample.steps.len(), Ordering::Relaxed);
        let mut engine =
            Engine::new(sample.device.clone(), CpuBackend::new()).map_err(|error| {
                SampleError::Step {
                    step: 0,
                    what: "device".into(),
                    error,
                }
            })?;
        let mut reports: Vec<DispatchReport> = Vec::new();
        let mut tables: Vec<Option<TableSnapshot>> = Vec::new();
        let mut memory: Vec<Arc<MemoryView>> = Vec::new();
        sample.replay(&mut engine, |engine, step, report| {
            let n = reports.len();
            let prev = tables.last().cloned().flatten();
            let snap = match (engine.table(), prev) {
                (None, _) => None,
                // A dispatch that did not use the table left it as it was.
                (Some(_), Some(p)) if report.table.is_none() => Some(p),
                (Some(t), Some(p))
                    if p.table.capacity() == t.capacity() && p.table.slots() == t.slots() =>
                {
                    Some(p)
                }
                (Some(t), _) => Some(TableSnapshot::new(t.clone(), n)),
            };
            tables.push(snap);
            let view = MemoryView::of(engine.memory());
            let view = match memory.last() {
                Some(prev) if **prev == view => Arc::clone(prev),
                _ => Arc::new(view),
            };
            memory.push(view);
            reports.push(report);
            progress.done.store(step + 1, Ordering::Relaxed);
        })?;
        progress.done.store(sample.steps.len(), Ordering::Relaxed);
        dispatchscope_formats::session::keep_recorded_sections(&mut reports, recorded);
        let mut session = Self::from_reports(source, sample.title.clone(), reports, tables);
        session.memory = memory;
        session.programs = sample.programs.clone();
        session.history_source = Some(HistorySource::Sample(Arc::new(sample.clone())));
        Ok(session)
    }

    /// A session of already computed reports (tests, benches, a live session).
    pub fn from_reports(
        source: Source,
        title: String,
        reports: Vec<DispatchReport>,
        tables: Vec<Option<TableSnapshot>>,
    ) -> Session {
        let rows = Rows::of_reports(&reports);
        Session {
            source,
            title,
            reports: Reports::in_memory(reports),
            rows,
            tables,
            memory: Vec::new(),
            warning: None,
            state_note: None,
            programs: Vec::new(),
            rows_scan: None,
            history_source: None,
            joined: None,
            loss: None,
            unfinished: Vec::new(),
        }
    }

    /// Starts making the write history of `range` on a thread of its own: a sample's from the
    /// reports the session holds, a capture's read through its index (issue 15's 1 GiB capture
    /// takes well under a second). `None` for a live session, whose history the store does not
    /// keep whole.
    pub fn history(
        &self,
        range: dispatchscope_core::ByteRange,
    ) -> Option<mpsc::Receiver<Result<History, ReadAgainError>>> {
        let source = self.history_source.clone()?;
        let reports = match source {
            HistorySource::Sample(_) => self.reports.in_memory_reports().to_vec(),
            HistorySource::Capture(_) => Vec::new(),
        };
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let h = match source {
                HistorySource::Sample(sample) => {
                    history::of_sample(&sample, &reports, range).map_err(ReadAgainError::from)
                }
                HistorySource::Capture(reopen) => reopen()
                    .map_err(ReadAgainError::from)
                    .and_then(|mut f| Ok(history::of_capture(&mut f, range)?)),
            };
            let _ = tx.send(h);
        });
        Some(rx)
    }

    /// What a thread reads this session's reports from again ([`Origin::reports`]): a sample's
    /// replay (copied), a capture reopened and read through its index; `None` for a live
    /// session, which keeps no whole session.
    pub fn origin(&self) -> Option<Origin> {
        if self.reports.live.is_some() {
            return None;
        }
        let source = self.history_source.clone();
        let reports = match source {
            Some(HistorySource::Capture(_)) => Vec::new(),
            _ => self.reports.in_memory_reports().to_vec(),
        };
        Some(Origin { source, reports })
    }

    /// Reads the engine state of a live session's dispatch `pos` when it was not read for it, or
    /// again when checkpoints arrived since (a dispatch's checkpoint follows it on the wire, and
    /// may come in a later batch than its row): what the window does each frame while attached.
    pub fn refresh_live_states(&mut self, pos: usize) {
        let Some(l) = &mut self.reports.live else {
            return;
        };
        if pos >= l.n {
            return;
        }
        // The figures, not the store: its lock would make the frame wait out a file's roll.
        let records = l.figures.state_records();
        if l.states.pos != Some(pos) || records != l.states.records_seen {
            l.prepare_states(pos);
        }
    }

    /// Makes what the panels of dispatch `pos` draw ready: for a capture, its report and its
    /// checkpoints, read through the index unless already read; for a session in memory, nothing.
    pub fn prepare(&mut self, pos: usize) -> Result<(), SessionError> {
        puffin::profile_function!();
        if let Some(l) = &mut self.reports.live {
            // The store's file is read as any file is: a failure is a read error on it.
            return l.prepare(pos).map_err(|message| SessionError::Read {
                path: self.source.display(),
                error: std::io::Error::other(message),
            });
        }
        let Some(d) = &mut self.reports.disk else {
            return Ok(());
        };
        if pos >= d.n {
            return Ok(());
        }
        if let Some(i) = d.cache.iter().position(|(p, _)| *p == pos) {
            let hit = d.cache.remove(i);
            d.cache.push(hit);
        } else {
            let record = d.file.dispatch(pos)?;
            let report = match record.report {
                Some(r) => r,
                None => {
                    let idx = dispatch_record(&d.file, pos);
                    return Err(d.file.bad_record(
                        idx,
                        format!("dispatch {pos} carries no report (the recorder did not have it); replay it with `dispatchscope explain`"),
                    ));
                }
            };
            if d.cache.len() >= REPORT_CACHE {
                d.cache.remove(0);
            }
            d.cache.push((pos, report));
        }
        if let Some((_, idx)) = d.states.memory_at(pos)
            && d.memory.as_ref().is_none_or(|(i, _)| *i != idx)
            && let Some((_, idx, m)) = d.file.memory_at(&d.states, pos)?
        {
            d.memory = Some((idx, Arc::new(memory_view(m))));
        }
        // A state a live target could not send is unknown from its record on (checkpoint.rs).
        let mut notes: Vec<String> = Vec::new();
        if d.states.has_memory() {
            match d.states.memory_state_at(pos) {
                StateAt::Unknown { from, record } => {
                    let why = d.file.unknown_why(record)?;
                    notes.push(unknown_note("guest memory", from, &why));
                }
                StateAt::None => notes.push(NO_MEMORY_CHECKPOINT.into()),
                StateAt::Known { .. } => {}
            }
        }
        if let StateAt::Unknown { from, record } = d.states.table_state_at(pos) {
            let why = d.file.unknown_why(record)?;
            notes.push(unknown_note("chunk table", from, &why));
        }
        d.note = (!notes.is_empty()).then(|| (pos, notes.join(" ")));
        if let Some((_, idx)) = d.states.table_at(pos)
            && d.table.as_ref().is_none_or(|(i, _)| *i != idx)
            && let Some((from, idx, t)) = d.file.table_at(&d.states, pos)?
        {
            d.table = Some((idx, TableSnapshot::new(t.table, from)));
        }
        Ok(())
    }

    /// Why the Memory and Chunk table panels of dispatch `pos` lack engine state, when they do:
    /// the session's own note, or the one [`Self::prepare`] made for `pos` (a state a live target
    /// could not send, a dispatch before a recording's first checkpoint, one not recorded).
    pub fn state_note_at(&self, pos: usize) -> Option<&str> {
        if let Some(l) = &self.reports.live {
            return l
                .states
                .note
                .as_deref()
                .filter(|_| l.states.pos == Some(pos));
        }
        if let Some((p, note)) = self.reports.disk.as_ref().and_then(|d| d.note.as_ref())
            && *p == pos
        {
            return Some(note);
        }
        self.state_note.as_deref()
    }

    /// Guest memory as the dispatch at `pos` left it, if the session kept it.
    pub fn memory(&self, pos: usize) -> Option<&MemoryView> {
        if let Some(l) = &self.reports.live {
            let st = &l.states;
            return st
                .memory
                .as_ref()
                .filter(|_| st.pos == Some(pos) && st.memory_here)
                .map(|(_, m)| &**m);
        }
        match &self.reports.disk {
            None => self.memory.get(pos).map(|m| &**m),
            Some(d) => {
                let (_, idx) = d.states.memory_at(pos)?;
                d.memory
                    .as_ref()
                    .filter(|(i, _)| *i == idx)
                    .map(|(_, m)| &**m)
            }
        }
    }

    /// The chunk table as the dispatch at `pos` left it.
    pub fn table(&self, pos: usize) -> Option<&TableSnapshot> {
        if let Some(l) = &self.reports.live {
            let st = &l.states;
            return st
                .table
                .as_ref()
                .filter(|_| st.pos == Some(pos) && st.table_here)
                .map(|(_, t)| t);
        }
        match &self.reports.disk {
            None => self.tables.get(pos).and_then(Option::as_ref),
            Some(d) => {
                let (_, idx) = d.states.table_at(pos)?;
                d.table.as_ref().filter(|(i, _)| *i == idx).map(|(_, t)| t)
            }
        }
    }

    /// Per dispatch, the chunk table kept in memory (empty for a capture read on demand).
    pub fn tables_in_memory(&self) -> &[Option<TableSnapshot>] {
        &self.tables
    }

    /// Whether rows are still arriving from the background scan.
    pub fn scanning(&self) -> bool {
        self.rows_scan.is_some()
    }

    /// Takes the rows the background scan has sent; a bad record ends the scan with a warning
    /// (the rows before it stay). Returns whether any arrived.
    pub fn poll_rows(&mut self) -> bool {
        let Some(scan) = &self.rows_scan else {
            return false;
        };
        let mut any = false;
        loop {
            match scan.rx.try_recv() {
                Ok(Ok(batch)) => {
                    any = true;
                    self.rows.extend(&batch);
                }
                Ok(Err(message)) => {
                    self.warning = Some(format!(
                        "the dispatch list stops at {}: {message}",
                        self.rows.len()
                    ));
                    self.rows_scan = None;
                    return true;
                }
                Err(mpsc::TryRecvError::Empty) => return any,
                Err(mpsc::TryRecvError::Disconnected) => {
                    self.rows_scan = None;
                    return true;
                }
            }
        }
    }

    /// Waits until every row has arrived (tests, and a window that must have them all).
    pub fn finish_rows(&mut self) {
        while let Some(scan) = &self.rows_scan {
            match scan.rx.recv() {
                Ok(Ok(batch)) => self.rows.extend(&batch),
                Ok(Err(message)) => {
                    self.warning = Some(format!(
                        "the dispatch list stops at {}: {message}",
                        self.rows.len()
                    ));
                    self.rows_scan = None;
                }
                Err(_) => self.rows_scan = None,
            }
        }
    }
}

/// A session's reports as a thread reads them again: what a comparison and a what-if start from.
#[derive(Clone)]
pub struct Origin {
    /// The sample (with its replay in `reports`), or the capture to reopen; none for reports
    /// made in memory alone (tests, a what-if's re-plan), which `reports` holds.
    pub source: Option<HistorySource>,
    /// A sample's reports (empty for a capture).
    pub reports: Vec<DispatchReport>,
}

impl Origin {
    /// Dispatches in the session, where known without reading it (a sample's).
    pub fn known_len(&self) -> Option<usize> {
        match self.source {
            Some(HistorySource::Capture(_)) => None,
            _ => Some(self.reports.len()),
        }
    }

    /// Every report, in order: a sample's as held, a capture's read one DISPATCH record at a
    /// time through its index (never its MEMORY records), counting each in `done`.
    pub fn reports(self, done: &AtomicUsize) -> Result<Vec<DispatchReport>, ReadAgainError> {
        match self.source {
            None | Some(HistorySource::Sample(_)) => {
                done.fetch_add(self.reports.len(), Ordering::Relaxed);
                Ok(self.reports)
            }
            Some(HistorySource::Capture(reopen)) => {
                let mut file = reopen()?;
                let n = file.n_dispatches();
                let mut out = Vec::with_capacity(n);
                for pos in 0..n {
                    let record = file.dispatch(pos)?;
                    let r = record.report.ok_or(ReadAgainError::NoReport { pos })?;
                    out.push(r);
                    done.fetch_add(1, Ordering::Relaxed);
                }
                Ok(out)
            }
        }
    }

    /// The capture, reopened through its index (a what-if re-plans it record by record).
    pub fn reopen(&self) -> Option<Result<Capture, SessionError>> {
        match &self.source {
            Some(HistorySource::Capture(reopen)) => Some(reopen()),
            _ => None,
        }
    }
}

/// The index in `file.records()` of DISPATCH record `pos`, for an error's offset.
fn dispatch_record(file: &Capture, pos: usize) -> usize {
    file.records()
        .iter()
        .enumerate()
        .filter(|(_, m)| m.kind == capture::RecordKind::DISPATCH)
        .nth(pos)
        .map_or(0, |(i, _)| i)
}

/// Reads every report of the capture `reopen` opens, in order, on a thread of its own, and sends
/// their rows in batches; the window shows the first dispatch meanwhile.
fn scan_rows(reopen: Reopen, n: usize) -> RowScan {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut file = match reopen() {
            Ok(f) => f,
            Err(e) => {
                let _ = tx.send(Err(e.to_string()));
                return;
            }
        };
        let mut batch: Vec<DispatchRow> = Vec::with_capacity(ROW_BATCH.min(n));
        let mut prev: Option<DispatchRow> = None;
        for pos in 0..n {
            let row = file.dispatch(pos).map_err(|e| e.to_string()).and_then(|r| {
                r.report
                    .as_ref()
                    .map(|r| DispatchRow::after(r, batch.last().or(prev.as_ref())))
                    .ok_or_else(|| format!("dispatch {pos} carries no report"))
            });
            match row {
                Ok(row) => batch.push(row),
                Err(e) => {
                    let _ = tx.send(Ok(std::mem::take(&mut batch)));
                    let _ = tx.send(Err(e));
                    return;
                }
            }
            if batch.len() == ROW_BATCH {
                prev = batch.last().cloned();
                if tx.send(Ok(std::mem::take(&mut batch))).is_err() {
                    return;
                }
            }
        }
        let _ = tx.send(Ok(batch));
    });
    RowScan { rx }
}

/// Opens the capture at `path` through its index (reading nothing else).
fn open_capture_path(path: &Path) -> Result<Capture, SessionError> {
    let name = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|error| SessionError::Read {
        path: name.clone(),
        error,
    })?;
    let inner: Box<dyn CaptureSource> = Box::new(std::io::BufReader::new(file));
    let reader =
        capture::CaptureReader::from_reader(inner).map_err(|error| SessionError::Capture {
            path: name.clone(),
            error,
        })?;
    CaptureFile::from_reader(name, reader)
}

/// Opens a capture held in memory.
fn open_capture_bytes(name: &str, bytes: Arc<[u8]>) -> Result<Capture, SessionError> {
    let inner: Box<dyn CaptureSource> = Box::new(std::io::Cursor::new(bytes));
    let reader =
        capture::CaptureReader::from_reader(inner).map_err(|error| SessionError::Capture {
            path: name.to_owned(),
            error,
        })?;
    CaptureFile::from_reader(name.to_owned(), reader)
}

/// A capture's error as the error panel shows it: "bad capture: …", the record's offset.
pub fn capture_error(name: &str, e: SessionError) -> LoadError {
    let offset_bytes = match &e {
        SessionError::Record { offset, .. } => Some(*offset),
        _ => None,
    };
    // The panel names the file already; drop the "path: " prefix of the message.
    let text = e.to_string();
    let message = text
        .strip_prefix(&format!("{name}: "))
        .unwrap_or(&text)
        .to_owned();
    LoadError {
        source: name.to_owned(),
        message: format!("bad capture: {message}"),
        at: None,
        offset_bytes,
    }
}

/// A load in progress on a background thread.
pub struct Loader {
    /// What is being loaded.
    pub source: Source,
    /// How far it got.
    pub progress: Arc<Progress>,
    rx: mpsc::Receiver<Result<Session, LoadError>>,
}

impl Loader {
    /// Starts reading and replaying `path`; `wake` is called when it is done.
    pub fn spawn(path: PathBuf, wake: impl Fn() + Send + 'static) -> Loader {
        let source = Source::File(path.clone());
        let progress = Arc::new(Progress::default());
        let (tx, rx) = mpsc::channel();
        let (src, prog) = (source.clone(), Arc::clone(&progress));
        std::thread::spawn(move || {
            let result = load_file(&path, src, &prog);
            let _ = tx.send(result);
            wake();
        });
        Loader {
            source,
            progress,
            rx,
        }
    }

    /// The result, once the thread is done.
    pub fn poll(&self) -> Option<Result<Session, LoadError>> {
        match self.rx.try_recv() {
            Ok(r) => Some(r),
            Err(mpsc::TryRecvError::Empty) => None,
            Err(mpsc::TryRecvError::Disconnected) => Some(Err(LoadError {
                source: self.source.display(),
                message: "the loading thread stopped without a result (a bug in dispatchscope)"
                    .into(),
                at: None,
                offset_bytes: None,
            })),
        }
    }
}

/// A live session's files joined into one capture in the temporary folder, removed when the
/// session that reads it is dropped.
#[derive(Debug)]
pub struct JoinedFile {
    path: PathBuf,
}

impl JoinedFile {
    /// A new name in the temporary folder.
    fn new() -> Self {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let name = format!("dispatchscope-joined-{}-{n}.dscap", std::process::id());
        Self {
            path: std::env::temp_dir().join(name),
        }
    }
}

impl Drop for JoinedFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Opens the file at `path` on this thread: a sample is read and replayed; a capture is opened
/// through its index, never read whole. A live session's folder, or any file of a live session
/// written as several (`name.dscap`, `name.0001.dscap`, …), opens the whole session as one: its
/// files still on disk joined into one capture ([`dispatchscope_live::segments::join`]), with a
/// warning that says which files, and which the disk budget deleted.
pub fn load_file(path: &Path, source: Source, progress: &Progress) -> Result<Session, LoadError> {
    let err = |message: String| LoadError {
        source: source.display(),
        message,
        at: None,
        offset_bytes: None,
    };
    let is_capture = path.extension().is_some_and(|x| x == "dscap");
    if !path.is_dir() && !is_capture {
        return load_one_file(path, source, progress);
    }
    let (files, earliest) =
        dispatchscope_live::segments::session_files(path).map_err(|e| err(e.to_string()))?;
    if files.len() < 2 {
        let one = files.first().map_or(path, PathBuf::as_path);
        return load_one_file(one, source, progress);
    }
    let joined = JoinedFile::new();
    let name = |p: &Path| {
        p.file_name()
            .map_or_else(String::new, |f| f.to_string_lossy().into_owned())
    };
    let mut note = format!(
        "a live session's {} files, {} to {}, opened as one session",
        files.len(),
        files.first().map_or_else(String::new, |f| name(f)),
        files.last().map_or_else(String::new, |f| name(f)),
    );
    if earliest > 0 {
        note.push_str(&format!(
            "; its first {earliest} {} no longer on disk (the recording's disk budget deleted {}), so it starts where the files left begin",
            if earliest == 1 { "file is" } else { "files are" },
            if earliest == 1 { "it" } else { "them" },
        ));
    }
    let description = format!("Opened as one session: {note}.");
    dispatchscope_live::segments::join(&files, &joined.path, Some(&description))
        .map_err(|e| err(format!("joining the session's files: {e}")))?;
    let mut session = load_one_file(&joined.path, source, progress)?;
    session.warning = Some(match session.warning.take() {
        Some(w) => format!("{note}; {w}"),
        None => note,
    });
    session.joined = Some(Arc::new(joined));
    Ok(session)
}

/// [`load_file`] of one file.
fn load_one_file(path: &Path, source: Source, progress: &Progress) -> Result<Session, LoadError> {
    use std::io::Read as _;
    let read_error = |e: std::io::Error| LoadError {
        source: source.display(),
        message: format!("could not read the file: {e}"),
        at: None,
        offset_bytes: None,
    };
    let mut start = Vec::with_capacity(SNIFF_BYTES);
    std::fs::File::open(path)
        .and_then(|f| f.take(SNIFF_BYTES as u64).read_to_end(&mut start))
        .map_err(read_error)?;
    if kind_of(&start) == Some(Kind::Capture) {
        let name = source.display();
        let file = open_capture_path(path).map_err(|e| capture_error(&name, e))?;
        let again = path.to_path_buf();
        let reopen: Reopen = Arc::new(move || open_capture_path(&again));
        let mut session = Session::load_capture(source, file, reopen, progress)?;
        if let Some(parts) = crate::load::parts_note(path) {
            session.warning = Some(match session.warning.take() {
                Some(w) => format!("{w}; {parts}"),
                None => parts,
            });
        }
        return Ok(session);
    }
    let bytes = std::fs::read(path).map_err(read_error)?;
    Session::load(source, &bytes, progress)
}
