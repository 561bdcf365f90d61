//! A session: the reports of every dispatch of one opened sample, computed once when it loads,
//! plus what the panels need that a report does not carry (the chunk table as each dispatch left
//! it, shared between dispatches that left it unchanged).
//!
//! Loading runs the engine once, on a background thread for files ([`Loader`]); the views only
//! ever read the result.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

use dispatchscope_core::capture;
use dispatchscope_core::sample::{Sample, SampleError, Step};
use dispatchscope_core::{CpuBackend, DispatchReport, Engine};
use dispatchscope_views::{DispatchRow, MemoryView, TableSnapshot};

/// Where a session came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A file the person opened.
    File(PathBuf),
    /// A sample built into the binary, by file name.
    Embedded(&'static str),
}

impl Source {
    /// How the status bar and error panel name it.
    pub fn display(&self) -> String {
        match self {
            Source::File(p) => p.display().to_string(),
            Source::Embedded(name) => format!("{name} (built in)"),
        }
    }

    /// The key bookmarks are remembered under.
    pub fn key(&self) -> String {
        match self {
            Source::File(p) => p.display().to_string(),
            Source::Embedded(name) => format!("embedded:{name}"),
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
}

/// The magic a capture file starts with.
const CAPTURE_MAGIC: &[u8] = b"DSCAPTUR";

impl Session {
    /// Reads `bytes` (the contents of `source`) as a sample and replays it.
    pub fn load(source: Source, bytes: &[u8], progress: &Progress) -> Result<Session, LoadError> {
        puffin::profile_function!();
        let name = source.display();
        let err = |message: String, at| LoadError {
            source: name.clone(),
            message,
            at,
        };
        if bytes.starts_with(CAPTURE_MAGIC) {
            return Err(err(
                format!(
                    "this is a dispatchscope capture (format {}); opening captures is not yet supported: open a sample (.json)",
                    capture::FORMAT_VERSION
                ),
                None,
            ));
        }
        let text = std::str::from_utf8(bytes).map_err(|e| {
            err(
                format!("not a dispatchscope sample: not UTF-8 text ({e}); only samples (.json) can be opened, captures are not yet supported"),
                None,
            )
        })?;
        if !text.trim_start().starts_with('{') {
            return Err(err(
                "not a dispatchscope sample: a sample is a JSON object; captures and other files are not yet supported".into(),
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
        let mut reports = Vec::new();
        let mut tables: Vec<Option<TableSnapshot>> = Vec::new();
        let mut memory: Vec<Arc<MemoryView>> = Vec::new();
        let mut contents_loaded = false;
        for (i, step) in sample.steps.iter().enumerate() {
            if !contents_loaded && matches!(step, Step::Dispatch(_)) {
                for c in &sample.contents {
                    engine.load_contents(c.address, &c.bytes);
                }
                contents_loaded = true;
            }
            match step {
                Step::Event(e) => {
                    engine.apply(e).map_err(|error| SampleError::Step {
                        step: i,
                        what: format!("event {}", dispatchscope_core::sample::event_name(e)),
                        error,
                    })?;
                }
                Step::Dispatch(d) => {
                    let n = reports.len();
                    let report = engine.dispatch(d).map_err(|error| SampleError::Step {
                        step: i,
                        what: format!("dispatch {n}"),
                        error,
                    })?;
                    let prev = tables.last().cloned().flatten();
                    let snap = match (engine.table(), prev) {
                        (None, _) => None,
                        // A dispatch that did not use the table left it as it was.
                        (Some(_), Some(p)) if report.table.is_none() => Some(p),
                        (Some(t), Some(p))
                            if p.table.capacity() == t.capacity()
                                && p.table.slots() == t.slots() =>
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
                }
            }
            progress.done.store(i + 1, Ordering::Relaxed);
        }
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
    })?;
    Session::load(source, &bytes, progress)
}
