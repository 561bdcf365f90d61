//! The debugger side of a live session in the window, and the demo target it starts when run
//! with no arguments.
//!
//! [`LiveLink`] wraps a [`LiveClient`]: each frame the app drains its channel into the open
//! [`Session`] (every dispatch becomes a row; its report joins the window of the latest), and
//! keeps the target's state (running, paused, disconnected) and its [`Stats`] for the status bar.
//! Every message also goes to a [`LiveStore`] writing the whole session to a crash-safe capture in
//! the temporary folder as it arrives, with an index of every dispatch (the client asks for a
//! memory snapshot at attach, so the recording replays on its own). The store is shared with the
//! session ([`SharedStore`]): the dispatch list holds every dispatch since attach, and selecting
//! one that left the session's window of reports reads it back from the store's file (one seek),
//! so memory is bounded by the windows and the rows however long the game runs.
//! Saving the session as a capture, or as a sample up to a dispatch, reads that recording back with
//! `to_sample`. When the target dies, what was received stays. This module never draws.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use dispatchscope_demo::{Demo, DemoConfig, RunOptions};
use dispatchscope_formats::sample::{Sample, Step};
use dispatchscope_formats::session::{self, Opened};
use dispatchscope_live::protocol::Stats;
use dispatchscope_live::{
    Breakpoints, ClientOptions, Incoming, LiveClient, LiveStore, StoreOptions, Tap, TapConfig,
    ToDebugger,
};

use super::session::{Session, SharedStore};
use dispatchscope_views::TargetBytes;
use std::sync::Mutex;
/// The most messages taken from the channel in one frame (the rest wait for the next frame).
const DRAIN_PER_FRAME: usize = 4_096;
/// The longest one frame spends taking messages: the window stays responsive however fast a
/// game sends (what waits is taken next frame; what the channel cannot hold the target counts as
/// dropped).
const DRAIN_BUDGET: std::time::Duration = std::time::Duration::from_millis(8);
/// The messages the window's client holds for it at most (`ClientOptions::channel_capacity`;
/// the headless client's 16,384 held about 190 MB of received dispatches while the window lagged).
const WINDOW_CHANNEL_MESSAGES: usize = 2_048;

/// What the target is doing, as far as this debugger knows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LiveState {
    /// Running freely (or until a breakpoint).
    Running,
    /// Paused before `next_dispatch`.
    Paused {
        /// The dispatch it will run next.
        next_dispatch: u64,
        /// Why it paused, as a sentence.
        why: String,
    },
    /// The connection is gone; what was received stays.
    Disconnected {
        /// Why.
        reason: String,
    },
}

/// What one drain changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Drained {
    /// Dispatches appended to the session.
    pub dispatches: usize,
    /// Whether the target paused.
    pub paused: bool,
    /// Whether more messages wait.
    pub more: bool,
}

/// Why a live operation failed (attach, a request to the target, the recording, the in-process
/// demo): what the window's notice or error panel says.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// The link is detached.
    #[error("not attached to a target")]
    NotAttached,
    /// No live session is open.
    #[error("no live session")]
    NoSession,
    /// Saving a sample up to the selected dispatch with none selected.
    #[error("no dispatch selected")]
    NoDispatchSelected,
    /// Attaching or talking to the target failed.
    #[error(transparent)]
    Client(#[from] dispatchscope_live::ClientError),
    /// The recording could not be written or read back.
    #[error(transparent)]
    Store(#[from] dispatchscope_live::StoreError),
    /// The recording could not be opened or saved as a file.
    #[error(transparent)]
    Session(#[from] dispatchscope_formats::session::SessionError),
    /// The recording was finished and closed.
    #[error("the session's recording was closed")]
    RecordingClosed,
    /// The target has not sent its memory snapshot yet.
    #[error(
        "nothing recorded yet: the target has not sent its memory snapshot (it sends it before its next dispatch)"
    )]
    NothingRecorded,
    /// A write error stopped the recording.
    #[error("the recording stopped: {why}")]
    RecordingStopped {
        /// The write error.
        why: String,
    },
    /// The recording's file is a sample.
    #[error("the recording is not a capture (a bug in dispatchscope)")]
    NotACapture,
    /// The dispatch is not in the recording.
    #[error(
        "dispatch {index} is not in the recording (it began at attach, and dispatches the target dropped are missing)"
    )]
    NotRecorded {
        /// The target's number of the dispatch.
        index: u64,
    },
    /// The in-process demo's tap could not listen.
    #[error("the demo's tap: {0}")]
    DemoTap(dispatchscope_live::TapError),
    /// The in-process demo's tap listens nowhere.
    #[error("the demo's tap has no address")]
    DemoNoAddress,
    /// The in-process demo's engine could not be made.
    #[error("the demo's engine: {0}")]
    DemoEngine(dispatchscope_core::EngineError),
    /// The in-process demo's thread could not start.
    #[error("cannot start the demo's thread: {0}")]
    DemoThread(std::io::Error),
    /// The window could not attach to the demo it started.
    #[error("{why}")]
    DemoAttach {
        /// What the error panel said.
        why: String,
    },
}

/// A dispatch of a live session that did not reach the list: the target's engine failed it (with
/// the kind it sent: a lost device, exhausted memory, bad input…), or this window could not read
/// what came.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveFailure {
    /// The dispatch's index.
    pub index: u64,
    /// The target's kind of failure; `None` for what this window could not read, or a target
    /// that did not say.
    pub kind: Option<dispatchscope_core::FailureKind>,
    /// Why, naming the values.
    pub message: String,
}

impl LiveFailure {
    /// The kind in words: the target's, or "not read" for what this window could not read.
    pub fn kind_words(&self) -> &'static str {
        self.kind.map_or("not read", |k| k.words())
    }
}

/// A live session's connection; see the module docs.
pub struct LiveLink {
    client: Option<LiveClient>,
    /// The address attached to.
    pub addr: String,
    /// What the target calls itself.
    pub target_name: String,
    /// Running, paused or disconnected.
    pub state: LiveState,
    /// The target's last figures.
    pub stats: Option<Stats>,
    /// Dispatches the target reported failing, or that this window could not read, newest last.
    pub failures: Vec<LiveFailure>,
    /// The recording, shared with the session that reads older reports back from it (`None`
    /// once it could not be created or was finished).
    shadow: SharedStore,
    /// Whether the recording still takes messages (a write error stops it; what it holds stays
    /// readable).
    recording: bool,
    shadow_path: PathBuf,
    /// Why the shadow recording stopped, if it did.
    pub record_error: Option<String>,
    /// The bytes the target last read for the Memory panel (`ToTarget::ReadMemory`).
    pub memory: Option<TargetBytes>,
    /// The latest read asked: its id, address and length; read again when the target pauses.
    read: Option<(u64, u64, u32)>,
}

static SHADOW_SEQ: AtomicU64 = AtomicU64::new(0);

impl LiveLink {
    /// Attaches to the target at `addr`; `notify` is called on each message (a repaint).
    pub fn attach(
        addr: &str,
        token: Option<String>,
        notify: Arc<dyn Fn() + Send + Sync>,
    ) -> Result<Self, LiveError> {
        let options = ClientOptions {
            token,
            timeout: Duration::from_secs(3),
            client_name: "dispatchscope window".into(),
            snapshot: true,
            notify: Some(notify),
            // Dispatches come with their bytes, which the store writes as they came; the rows
            // are decoded here, after (`take_message`).
            keep_received: true,
            // What waits for the window is held as it came, about 10 KB a dispatch: 2,048 of
            // them (0.7 s at 3,000 a second) bound it to about 20 MB; past that TCP pushes back
            // and the target counts what it cannot queue as dropped.
            channel_capacity: WINDOW_CHANNEL_MESSAGES,
            ..ClientOptions::default()
        };
        let client = LiveClient::connect_with(addr, &options)?;
        let shadow_path = std::env::temp_dir().join(format!(
            "dispatchscope-live-{}-{}.dscap",
            std::process::id(),
            SHADOW_SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let target_name = client.target().target.clone();
        let shadow = LiveStore::create(
            &shadow_path,
            &format!("live session of {target_name} at {addr}"),
            &StoreOptions {
                // The session keeps the reports it shows and the rows; the store keeps the
                // records' offsets and the file.
                window: 0,
                flush_every: Duration::from_millis(500),
                keep_rows: false,
            },
        );
        Ok(Self {
            client: Some(client),
            addr: addr.to_owned(),
            target_name,
            state: LiveState::Running,
            stats: None,
            failures: Vec::new(),
            shadow: Arc::new(Mutex::new(Some(shadow))),
            recording: true,
            shadow_path,
            record_error: None,
            memory: None,
            read: None,
        })
    }

    /// The recording, for the session that reads older reports back from it.
    pub fn store(&self) -> SharedStore {
        Arc::clone(&self.shadow)
    }

    /// Runs `f` on the recording, if it is open.
    fn with_store<T>(&self, f: impl FnOnce(&mut LiveStore) -> T) -> Option<T> {
        let mut guard = self
            .shadow
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        guard.as_mut().map(f)
    }

    /// The recording's file (in the temporary folder; removed when the link is dropped).
    pub fn recording_path(&self) -> &Path {
        &self.shadow_path
    }

    /// Whether the connection is up.
    pub fn is_attached(&self) -> bool {
        self.client.is_some()
    }

    /// Whether the target is paused (and attached).
    pub fn is_paused(&self) -> bool {
        matches!(self.state, LiveState::Paused { .. })
    }

    fn client(&self) -> Result<&LiveClient, LiveError> {
        self.client.as_ref().ok_or(LiveError::NotAttached)
    }

    /// Asks the target to pause before its next dispatch.
    pub fn pause(&self) -> Result<(), LiveError> {
        Ok(self.client()?.pause()?)
    }

    /// Lets a paused target run on.
    pub fn resume(&self) -> Result<(), LiveError> {
        Ok(self.client()?.resume()?)
    }

    /// Runs `n` dispatches, then pauses.
    pub fn step(&self, n: u64) -> Result<(), LiveError> {
        Ok(self.client()?.step(n)?)
    }

    /// Ask the target to capture `lanes` on its next instrumented pass (`None`: its own choice).
    pub fn capture_lanes(
        &self,
        lanes: Option<dispatchscope_core::instrument::LaneSelection>,
    ) -> Result<(), LiveError> {
        Ok(self.client()?.capture_lanes(lanes)?)
    }

    /// Asks the target for `len` guest bytes at `address` (the Memory panel's byte view); the
    /// answer lands in [`LiveLink::memory`], and the same bytes are read again each time the
    /// target pauses.
    pub fn read_memory(&mut self, address: u64, len: u32) -> Result<(), LiveError> {
        let id = self.read.map_or(1, |(id, ..)| id + 1);
        self.read = Some((id, address, len));
        Ok(self.client()?.read_memory(id, address, len)?)
    }

    /// Replaces the target's breakpoints.
    pub fn set_breakpoints(&self, breakpoints: &Breakpoints) -> Result<(), LiveError> {
        Ok(self.client()?.set_breakpoints(breakpoints)?)
    }

    /// Detaches, leaving the target running; what was received stays.
    pub fn detach(&mut self) {
        if let Some(c) = self.client.take() {
            let _ = c.detach(Duration::from_millis(500));
        }
        self.flush_shadow();
        self.state = LiveState::Disconnected {
            reason: "detached; the target runs on".into(),
        };
    }

    /// Makes the recording durable when the connection ends; the store stays open for reading
    /// back (it is finished, index and all, when the link is dropped).
    fn flush_shadow(&mut self) {
        if let Some(Err(e)) = self.with_store(|r| r.flush()) {
            self.record_error = Some(e.to_string());
        }
    }

    fn finish_shadow(&mut self) {
        let store = self
            .shadow
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(r) = store
            && let Err(e) = r.finish()
        {
            self.record_error = Some(e.to_string());
        }
    }

    /// Takes what arrived into `session`.
    pub fn drain(&mut self, session: &mut Session) -> Drained {
        let mut out = Drained::default();
        let started = std::time::Instant::now();
        for _ in 0..DRAIN_PER_FRAME {
            if started.elapsed() >= DRAIN_BUDGET {
                break;
            }
            let Some(incoming) = self.client.as_ref().and_then(LiveClient::try_recv) else {
                return out;
            };
            match incoming {
                Incoming::Message(m) => self.take_message(m, session, &mut out),
                Incoming::Disconnected { reason, clean } => {
                    self.client = None;
                    self.flush_shadow();
                    self.state = LiveState::Disconnected {
                        reason: if clean {
                            reason
                        } else {
                            format!("the target went away: {reason}")
                        },
                    };
                    return out;
                }
            }
        }
        out.more = true;
        out
    }

    /// Takes one message as [`Self::drain`] does: to the recording first, then into `session`
    /// (benches feed a session this way without a socket).
    pub fn take_message(&mut self, m: ToDebugger, session: &mut Session, out: &mut Drained) {
        let mut stored = false;
        if self.recording {
            match self.with_store(|r| r.take_ref(&m)) {
                Some(Ok(s)) => stored = s,
                Some(Err(e)) => {
                    self.record_error = Some(e.to_string());
                    self.recording = false;
                }
                None => self.recording = false,
            }
        }
        // A dispatch that came with its bytes: the store wrote them; the window keeps them and
        // decodes the rest only when the dispatch is selected (`Session::push_received`).
        match m {
            ToDebugger::Received(d) => {
                let index = d.index;
                if let Some(e) = session.push_received(d, stored) {
                    self.failures.push(LiveFailure {
                        index,
                        kind: None,
                        message: e.to_string(),
                    });
                }
                out.dispatches += 1;
            }
            m => self.take(m, stored, session, out),
        }
    }

    fn take(&mut self, m: ToDebugger, stored: bool, session: &mut Session, out: &mut Drained) {
        match m {
            ToDebugger::Dispatch { report, .. } => {
                session.push_live(*report, stored);
                out.dispatches += 1;
            }
            ToDebugger::DispatchFailed {
                index,
                message,
                kind,
                ..
            } => {
                self.failures.push(LiveFailure {
                    index,
                    kind,
                    message,
                });
            }
            ToDebugger::Paused {
                next_dispatch, why, ..
            } => {
                self.state = LiveState::Paused {
                    next_dispatch,
                    why: why.sentence(),
                };
                out.paused = true;
                // What the byte view shows is read again as the paused target has it.
                if let Some((_, address, len)) = self.read {
                    let _ = self.read_memory(address, len);
                }
            }
            // An answer to a read the view no longer waits for is dropped (the `_` arm).
            ToDebugger::Memory {
                id,
                contents,
                error,
            } if self.read.is_some_and(|(want, ..)| want == id) => {
                let address = self.read.map_or(0, |(_, a, _)| a);
                self.memory = Some(TargetBytes {
                    address,
                    bytes: contents
                        .map(|c| c.bytes)
                        .ok_or_else(|| error.unwrap_or_else(|| "the target sent no bytes".into())),
                });
            }
            ToDebugger::Resumed { .. } => self.state = LiveState::Running,
            ToDebugger::Stats(s) => self.stats = Some(s),
            ToDebugger::Program { address, code } => {
                // Sent once a session; a target that attaches again may send it again.
                session.programs.retain(|p| p.address != address);
                session
                    .programs
                    .push(dispatchscope_formats::sample::Program { address, code });
            }
            _ => {}
        }
    }

    /// Dispatches in the whole session (the store's index), the window's and the older ones.
    pub fn stored(&self) -> usize {
        self.with_store(|s| s.len()).unwrap_or(0)
    }

    /// The report of the recording's dispatch at position `pos` (from 0 at attach), read back
    /// from the store's file (what the session does for a dispatch that left its window).
    pub fn stored_report(
        &self,
        pos: usize,
    ) -> Result<dispatchscope_core::DispatchReport, LiveError> {
        self.with_store(|s| s.report(pos).map_err(LiveError::from))
            .unwrap_or(Err(LiveError::RecordingClosed))
    }

    /// The recording so far, read back as a sample and the target's reports.
    pub fn recorded(
        &mut self,
    ) -> Result<(Sample, Vec<Option<dispatchscope_core::DispatchReport>>), LiveError> {
        if let Some(r) = self.with_store(|r| r.flush().map(|()| r.started()))
            && !r?
        {
            return Err(LiveError::NothingRecorded);
        }
        if let Some(e) = &self.record_error {
            return Err(LiveError::RecordingStopped { why: e.clone() });
        }
        match session::open(&self.shadow_path)? {
            Opened::Capture(mut c) => Ok(c.to_sample()?),
            Opened::Sample(_) => Err(LiveError::NotACapture),
        }
    }

    /// Writes everything recorded since attaching as a capture at `dest`, with the target's
    /// reports; returns how many dispatches it holds.
    pub fn save_capture(&mut self, dest: &Path) -> Result<usize, LiveError> {
        let (sample, reports) = self.recorded()?;
        let all: Option<Vec<_>> = reports.into_iter().collect();
        session::write_capture(&sample, all.as_deref(), dest)?;
        Ok(all.map_or(0, |a| a.len()))
    }

    /// Writes the recording as a sample that ends with dispatch `index` (the target's number);
    /// returns how many dispatches it holds.
    pub fn save_sample(&mut self, index: u64, dest: &Path) -> Result<usize, LiveError> {
        let (mut sample, reports) = self.recorded()?;
        let pos = reports
            .iter()
            .position(|r| r.as_ref().is_some_and(|r| r.index == index))
            .ok_or(LiveError::NotRecorded { index })?;
        let mut seen = 0;
        let cut = sample
            .steps
            .iter()
            .position(|s| {
                if matches!(s, Step::Dispatch(_)) {
                    seen += 1;
                }
                seen == pos + 1
            })
            .map_or(sample.steps.len(), |p| p + 1);
        sample.steps.truncate(cut);
        sample.title = format!("{} (up to dispatch {index})", sample.title);
        session::write_sample(&sample, dest)?;
        Ok(pos + 1)
    }
}

impl Drop for LiveLink {
    fn drop(&mut self) {
        if let Some(c) = self.client.take() {
            let _ = c.detach(Duration::from_millis(200));
        }
        self.finish_shadow();
        let _ = std::fs::remove_file(&self.shadow_path);
    }
}

/// The demo target running on a thread of this process (what `dispatchscope` with no arguments
/// attaches to). Dropping it stops the frame loop.
pub struct DemoTarget {
    /// Where its tap listens.
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<(), String>>>,
}

impl DemoTarget {
    /// Starts the demo on `127.0.0.1:0` at `fps` frames per second (`None`: as fast as it can),
    /// with the scene's own dispatches a frame.
    pub fn start(fps: Option<f64>) -> Result<Self, LiveError> {
        Self::start_with(fps, dispatchscope_demo::BASE_DISPATCHES_PER_FRAME)
    }

    /// [`Self::start`] with `dispatches_per_frame` a frame (at least the scene's own 5).
    pub fn start_with(fps: Option<f64>, dispatches_per_frame: u32) -> Result<Self, LiveError> {
        let config = TapConfig {
            target_name: "dispatchscope demo (in the window's process)".into(),
            ..TapConfig::listening_on(SocketAddr::from(([127, 0, 0, 1], 0)))
        };
        let mut tap = Tap::listen(config).map_err(LiveError::DemoTap)?;
        let addr = tap.local_addr().ok_or(LiveError::DemoNoAddress)?;
        let mut demo = Demo::new(DemoConfig {
            dispatches_per_frame,
            ..DemoConfig::default()
        })
        .map_err(LiveError::DemoEngine)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("dispatchscope demo".into())
            .spawn(move || {
                let options = RunOptions { frames: None, fps };
                dispatchscope_demo::run(&mut demo, &mut tap, options, &flag, |_| {})
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })
            .map_err(LiveError::DemoThread)?;
        Ok(Self {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    /// Whether its frame loop still runs.
    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }
}

impl Drop for DemoTarget {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
