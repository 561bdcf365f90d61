//! A session: the reports of every dispatch of one opened sample, computed once when it loads,
//! plus what the panels need that a report does not carry (the chunk table as each dispatch left
//! it, shared between dispatches that left it unchanged).
//!
//! Loading runs the engine once, on a background thread for files ([`Loader`]); the views only
//! ever read the result. A capture is read back as a sample (`CaptureFile::to_sample`) and
//! replayed the same way; a torn tail becomes a warning on the session, not an error. Which of
//! the two a file is, and the warning's words, are `crate::load`'s, shared with the CLI.
//! A live session starts empty and grows with [`Session::push_live`] as dispatches arrive.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

use dispatchscope_core::{CpuBackend, DispatchReport, Engine};
use dispatchscope_formats::capture::{self, FILE_MAGIC};
use dispatchscope_formats::sample::{Sample, SampleError};
use dispatchscope_views::{DispatchRow, MemoryView, TableSnapshot};

use crate::load::torn_note;
use dispatchscope_formats::session::{Kind, kind_of};

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

/// Progress of a load, shared with the thread doing it.
#[derive(Debug, Default)]
pub struct Progress {
    /// Steps replayed.
    pub done: AtomicUsize,
    /// Steps in the sample (0 while reading).
    pub total: AtomicUsize,
}

/// Everything the panels draw for one opened sample.
pub struct Session {
    /// Where it came from.
    pub source: Source,
    /// The sample's title.
    pub title: String,
    /// One report per dispatch, in order.
    pub reports: Vec<DispatchReport>,
    /// One table row per dispatch.
    pub rows: Vec<DispatchRow>,
    /// Per dispatch: the chunk table as it stood after the dispatch, if one existed yet.
    pub tables: Vec<Option<TableSnapshot>>,
    /// Per dispatch: guest memory as the dispatch left it, shared while unchanged (empty for a
    /// session made from reports alone).
    pub memory: Vec<Arc<MemoryView>>,
    /// Something the person should know that did not stop the load (a capture's torn tail).
    pub warning: Option<String>,
}

impl Session {
    /// Reads `bytes` (the contents of `source`) as a sample or a capture ([`kind_of`] tells
    /// which) and replays it.
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
            return Self::load_capture(source, bytes, progress);
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

    /// Reads `bytes` as a capture: every complete record back to a sample, then a replay. A torn
    /// tail (a recorder that died) keeps what came before it and becomes [`Session::warning`].
    fn load_capture(
        source: Source,
        bytes: &[u8],
        progress: &Progress,
    ) -> Result<Session, LoadError> {
        use dispatchscope_formats::session::{CaptureFile, SessionError};
        let name = source.display();
        let from_session = |e: SessionError| {
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
                source: name.clone(),
                message: format!("bad capture: {message}"),
                at: None,
                offset_bytes,
            }
        };
        let reader = capture::CaptureReader::from_bytes(bytes.to_vec()).map_err(|error| {
            from_session(SessionError::Capture {
                path: name.clone(),
                error,
            })
        })?;
        let mut file = CaptureFile::from_reader(name.clone(), reader).map_err(from_session)?;
        let torn = torn_note(&file);
        let (sample, _recorded) = file.to_sample().map_err(from_session)?;
        let mut session = Self::replay(source, &sample, progress).map_err(|e| LoadError {
            source: name.clone(),
            message: format!("the capture replays with an error: {e}"),
            at: None,
            offset_bytes: None,
        })?;
        session.warning = torn;
        Ok(session)
    }

    /// An empty live session attached to `addr`.
    pub fn live(addr: &str, title: String) -> Session {
        Self::from_reports(Source::Live(addr.to_owned()), title, Vec::new(), Vec::new())
    }

    /// Appends a dispatch received from a live target (no chunk table or memory view: the
    /// target sends reports, not its engine's state).
    pub fn push_live(&mut self, report: DispatchReport) {
        self.rows.push(DispatchRow::from_report(&report));
        self.reports.push(report);
        self.tables.push(None);
    }

    /// Drops the oldest `n` dispatches (a live session keeps a bounded window).
    pub fn drop_front(&mut self, n: usize) {
        let n = n.min(self.reports.len());
        self.reports.drain(..n);
        self.rows.drain(..n);
        self.tables.drain(..n.min(self.tables.len()));
        self.memory.drain(..n.min(self.memory.len()));
    }

    /// Replays `sample` as [`Sample::run`] does, keeping a snapshot of the chunk table after each
    /// dispatch that changed it.
    pub fn replay(
        source: Source,
        sample: &Sample,
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
        let mut session = Self::from_reports(source, sample.title.clone(), reports, tables);
        session.memory = memory;
        Ok(session)
    }

    /// A session of already computed reports (tests, benches, a capture later).
    pub fn from_reports(
        source: Source,
        title: String,
        reports: Vec<DispatchReport>,
        tables: Vec<Option<TableSnapshot>>,
    ) -> Session {
        let rows = reports.iter().map(DispatchRow::from_report).collect();
        Session {
            source,
            title,
            reports,
            rows,
            tables,
            memory: Vec::new(),
            warning: None,
        }
    }

    /// Guest memory as the dispatch at `pos` left it, if the session kept it.
    pub fn memory(&self, pos: usize) -> Option<&MemoryView> {
        self.memory.get(pos).map(|m| &**m)
    }

    /// The chunk table as the dispatch at `pos` left it.
    pub fn table(&self, pos: usize) -> Option<&TableSnapshot> {
        self.tables.get(pos).and_then(Option::as_ref)
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

/// Reads and replays the file at `path` on this thread.
pub fn load_file(
    path: &std::path::Path,
    source: Source,
    progress: &Progress,
) -> Result<Session, LoadError> {
    let bytes = std::fs::read(path).map_err(|e| LoadError {
        source: source.display(),
        message: format!("could not read the file: {e}"),
        at: None,
        offset_bytes: None,
    })?;
    Session::load(source, &bytes, progress)
}
