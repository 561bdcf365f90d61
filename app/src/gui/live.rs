//! The debugger side of a live session in the window, and the demo target it starts when run
//! with no arguments.
//!
//! [`LiveLink`] wraps a [`LiveClient`] and an intake thread of its own (`gui::intake`): the
//! client's reader thread decodes what the target sends, the intake takes it as it arrives, writes
//! every message to a [`LiveStore`] (the whole session, a crash-safe capture in the temporary
//! folder, with an index of every dispatch; the client asks for a memory snapshot at attach, so
//! the recording replays on its own) and makes each dispatch's row. Each frame the window's
//! thread only appends what is ready to the open [`Session`] ([`LiveLink::drain`]: the rows, the
//! latest dispatches as they came) and keeps the target's state (running, paused, disconnected)
//! and its [`Stats`] for the status bar; it never writes the store.
//! The store is shared with the session ([`SharedStore`]): the dispatch list holds every dispatch
//! since attach, and selecting one that left the session's window of reports reads it back from
//! the store's file (one seek), so memory is bounded by the windows and the rows however long the
//! game runs. Saving the session as a capture, or as a sample up to a dispatch, reads that
//! recording back with `to_sample`. When the target dies, what was received stays. When the
//! session ends (detach, the target gone, the window closed) the window logs
//! `received N, dropped M` to stderr, as `dispatchscope record` prints it. This module never draws.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dispatchscope_demo::{Demo, DemoConfig, RunOptions};
use dispatchscope_formats::sample::{Sample, Step};
use dispatchscope_formats::session::{self, Opened};
use dispatchscope_live::protocol::Stats;
use dispatchscope_live::store::StoreFigures;
use dispatchscope_live::{
    Breakpoints, ClientOptions, DEFAULT_DISK_BUDGET, Incoming, LiveClient, LiveStore, Released,
    StoreOptions, Tap, TapConfig, ToDebugger,
};

use super::intake::{Counters, Handoff, Inlet, Intake, SharedClient, StopFlag};
use super::session::{Session, SharedStore};
use dispatchscope_views::TargetBytes;
use std::sync::Mutex;
/// The messages the window's client holds for its intake at most
/// (`ClientOptions::channel_capacity`; the intake takes them as they come, so this covers a pause
/// of the intake's thread, about 0.2 s at 12,000 dispatches a second, about 20 MB of them).
const WINDOW_CHANNEL_MESSAGES: usize = 2_048;
/// How long the received rate is measured over.
const RATE_SPAN: Duration = Duration::from_secs(1);

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
    /// Whether the session ended in this drain.
    pub ended: bool,
    /// Whether the target's device was lost in this drain (the session now has its loss).
    pub lost: bool,
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
    /// The disk budget deleted the recording's oldest files, which a sample or capture of the
    /// whole session needs (its first file holds the memory snapshot).
    #[error(
        "the session's oldest {dispatches} dispatches are no longer on disk (the disk budget of {} deleted them, with the memory snapshot a saved session starts from); start dispatchscope with a larger --disk-budget to keep a whole session",
        dispatchscope_live::store::human_bytes(*budget)
    )]
    Released {
        /// Dispatches no longer on disk.
        dispatches: usize,
        /// The budget.
        budget: u64,
    },
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
    /// The recording's files could not be joined into one capture.
    #[error(transparent)]
    Join(#[from] dispatchscope_live::segments::SegmentsError),
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
    /// The intake's thread could not start.
    #[error("cannot start the live intake's thread: {0}")]
    IntakeThread(std::io::Error),
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

/// What [`LiveLink::save_capture`] saved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Saved {
    /// Dispatches in the file.
    pub dispatches: usize,
    /// The session's first dispatches the disk budget had released, not in the file.
    pub released: usize,
}

impl Saved {
    /// What the window tells the person, for the file at `dest`.
    pub fn words(&self, dest: &Path) -> String {
        let mut s = format!(
            "saved {} dispatches as a capture: {}",
            self.dispatches,
            dest.display()
        );
        if self.released > 0 {
            s.push_str(&format!(
                " (what was still on disk: the disk budget had released the session's first {} dispatches, and the capture says so)",
                self.released
            ));
        }
        s
    }
}

/// The note a saved capture carries of what the disk budget released before it was saved.
pub fn released_note(released: dispatchscope_live::Released, budget: u64) -> String {
    format!(
        "Saved from a live session after its disk budget ({}) released its first {} dispatches ({} files, {}): this capture holds the dispatches still on disk, from position {} on; the session's memory snapshot went with its first file, so its recorded reports and checkpoints are what it shows.",
        dispatchscope_live::store::human_bytes(budget),
        released.dispatches,
        released.files,
        dispatchscope_live::store::human_bytes(released.bytes),
        released.dispatches
    )
}

/// A live session's connection; see the module docs.
pub struct LiveLink {
    /// The client: commands go through it; the intake takes what it received (`None` once
    /// detached or gone).
    client: SharedClient,
    /// Whether the session is still attached, as far as the window has taken its messages.
    attached: bool,
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
    /// The recording's figures, read each frame without its lock.
    figures: Arc<StoreFigures>,
    shadow_path: PathBuf,
    /// Every file the recording made, once it is finished (to remove them).
    shadow_files: Vec<PathBuf>,
    /// The most disk the recording may take.
    pub disk_budget: u64,
    /// Why the shadow recording stopped, if it did.
    pub record_error: Option<String>,
    /// The bytes the target last read for the Memory panel (`ToTarget::ReadMemory`).
    pub memory: Option<TargetBytes>,
    /// The latest read asked: its id, address and length; read again when the target pauses.
    read: Option<(u64, u64, u32)>,
    /// What the intake hands the window.
    handoff: Arc<Handoff>,
    /// The intake's figures.
    counters: Arc<Counters>,
    stop: Arc<StopFlag>,
    intake: Option<JoinHandle<()>>,
    /// Received counts over the last [`RATE_SPAN`], for the received rate.
    rate: std::collections::VecDeque<(Instant, u64)>,
    /// Whether the end of the session was logged.
    logged: bool,
}

static SHADOW_SEQ: AtomicU64 = AtomicU64::new(0);

/// The share of the recording folder's free disk a recording may take at most.
const FREE_SHARE: f64 = 0.9;

/// The disk budget of a live session recorded in `folder`: `requested` (`--disk-budget`), else
/// [`DEFAULT_DISK_BUDGET`] (a working day at a game's rate); at most 90 % of what `folder`'s disk
/// has free when the session starts, so that a recording never fills the disk. With a sentence
/// saying so when it is less than asked.
pub fn recording_budget(requested: Option<u64>, folder: &Path) -> (u64, Option<String>) {
    use dispatchscope_live::store::human_bytes;
    let wanted = requested.unwrap_or(DEFAULT_DISK_BUDGET);
    let free = match rustix::fs::statvfs(folder) {
        Ok(s) => s.f_bavail.saturating_mul(s.f_frsize),
        Err(_) => return (wanted, None),
    };
    let most = (free as f64 * FREE_SHARE) as u64;
    if wanted <= most {
        return (wanted, None);
    }
    let why = format!(
        "the live recording's disk budget is {}, 90 % of what {} has free, not the {} {}",
        human_bytes(most),
        folder.display(),
        human_bytes(wanted),
        if requested.is_some() {
            "asked for"
        } else {
            "a working day at a game's rate takes"
        }
    );
    (most, Some(why))
}

/// A size as `--disk-budget` takes it: bytes, or a number with `K`, `M`, `G`, `T` (powers of
/// 1024; `KiB`, `GB` and the like read the same).
pub fn parse_size(text: &str) -> Result<u64, crate::load::ArgError> {
    use crate::load::ArgError;
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let n: f64 = number
        .parse()
        .map_err(|_| ArgError::NotASize { text: text.into() })?;
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        other => {
            return Err(ArgError::NotAUnit {
                text: text.into(),
                unit: other.into(),
            });
        }
    };
    let bytes = n * (1u64 << shift) as f64;
    if !(1.0..=u64::MAX as f64).contains(&bytes) {
        return Err(ArgError::SizeOutOfRange { text: text.into() });
    }
    Ok(bytes as u64)
}

impl LiveLink {
    /// Attaches to the target at `addr`; `notify` is called when something waits for the window
    /// (a repaint).
    /// Its recording takes at most `disk_budget` on disk ([`recording_budget`]).
    pub fn attach(
        addr: &str,
        token: Option<String>,
        disk_budget: Option<u64>,
        notify: Arc<dyn Fn() + Send + Sync>,
    ) -> Result<Self, LiveError> {
        let options = ClientOptions {
            token,
            timeout: Duration::from_secs(3),
            client_name: "dispatchscope window".into(),
            snapshot: true,
            // The intake wakes the window when a batch is ready, not the reader on each message.
            notify: None,
            // Dispatches come with their bytes, which the store writes as they came; the rows
            // are read from the parts already decoded, on the intake's thread.
            keep_received: true,
            // What waits for the intake is held as it came, about 10 KB a dispatch; past that TCP
            // pushes back and the target counts what it cannot queue as dropped.
            channel_capacity: WINDOW_CHANNEL_MESSAGES,
            ..ClientOptions::default()
        };
        let client = LiveClient::connect_with(addr, &options)?;
        let target_name = client.target().target.clone();
        let shared: SharedClient = Arc::new(Mutex::new(Some(client)));
        Self::start(
            addr,
            target_name,
            Inlet::Client(Arc::clone(&shared)),
            shared,
            disk_budget,
            notify,
        )
    }

    /// A link fed by the caller instead of a target (tests and benches): what is sent on the
    /// channel goes through the intake exactly as a client's messages do; dropping the sender ends
    /// the session. Commands to the target fail with [`LiveError::NotAttached`].
    pub fn fed(
        addr: &str,
        target_name: &str,
        notify: Arc<dyn Fn() + Send + Sync>,
    ) -> Result<(Self, SyncSender<Incoming>), LiveError> {
        Self::fed_with_budget(addr, target_name, None, notify)
    }

    /// [`Self::fed`], its recording under `disk_budget` ([`recording_budget`]).
    pub fn fed_with_budget(
        addr: &str,
        target_name: &str,
        disk_budget: Option<u64>,
        notify: Arc<dyn Fn() + Send + Sync>,
    ) -> Result<(Self, SyncSender<Incoming>), LiveError> {
        let (tx, rx): (_, Receiver<_>) = std::sync::mpsc::sync_channel(WINDOW_CHANNEL_MESSAGES);
        let link = Self::start(
            addr,
            target_name.to_owned(),
            Inlet::Channel(rx),
            Arc::new(Mutex::new(None)),
            disk_budget,
            notify,
        )?;
        Ok((link, tx))
    }

    fn start(
        addr: &str,
        target_name: String,
        inlet: Inlet,
        client: SharedClient,
        disk_budget: Option<u64>,
        notify: Arc<dyn Fn() + Send + Sync>,
    ) -> Result<Self, LiveError> {
        let folder = std::env::temp_dir();
        let (disk_budget, why) = recording_budget(disk_budget, &folder);
        if let Some(why) = why {
            eprintln!("dispatchscope: {why}");
        }
        let shadow_path = folder.join(format!(
            "dispatchscope-live-{}-{}.dscap",
            std::process::id(),
            SHADOW_SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let shadow = LiveStore::create(
            &shadow_path,
            &format!("live session of {target_name} at {addr}"),
            &StoreOptions {
                // The session keeps the reports it shows and the rows; the store keeps the
                // records' offsets and the file.
                window: 0,
                flush_every: Duration::from_millis(500),
                keep_rows: false,
                disk_budget: Some(disk_budget),
            },
        );
        let figures = shadow.figures();
        let shadow: SharedStore = Arc::new(Mutex::new(Some(shadow)));
        let handoff = Arc::new(Handoff::default());
        let counters = Arc::new(Counters::default());
        let stop = Arc::new(StopFlag::default());
        let intake = Intake::new(
            Arc::clone(&shadow),
            Arc::clone(&handoff),
            Arc::clone(&counters),
            notify,
        )
        .spawn(inlet, Arc::clone(&stop))
        .map_err(LiveError::IntakeThread)?;
        Ok(Self {
            client,
            attached: true,
            addr: addr.to_owned(),
            target_name,
            state: LiveState::Running,
            stats: None,
            failures: Vec::new(),
            shadow,
            figures,
            shadow_path,
            shadow_files: Vec::new(),
            disk_budget,
            record_error: None,
            memory: None,
            read: None,
            handoff,
            counters,
            stop,
            intake: Some(intake),
            rate: std::collections::VecDeque::new(),
            logged: false,
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

    /// Whether the connection is up (as far as the window has taken the intake's messages).
    pub fn is_attached(&self) -> bool {
        self.attached
    }

    /// Whether the target is paused (and attached).
    pub fn is_paused(&self) -> bool {
        matches!(self.state, LiveState::Paused { .. })
    }

    /// Runs `f` on the client (a command to the target).
    fn send(
        &self,
        f: impl FnOnce(&LiveClient) -> Result<(), dispatchscope_live::ClientError>,
    ) -> Result<(), LiveError> {
        if !self.attached {
            return Err(LiveError::NotAttached);
        }
        let guard = self
            .client
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(f(guard.as_ref().ok_or(LiveError::NotAttached)?)?)
    }

    /// Asks the target to pause before its next dispatch.
    pub fn pause(&self) -> Result<(), LiveError> {
        self.send(LiveClient::pause)
    }

    /// Lets a paused target run on.
    pub fn resume(&self) -> Result<(), LiveError> {
        self.send(LiveClient::resume)
    }

    /// Runs `n` dispatches, then pauses.
    pub fn step(&self, n: u64) -> Result<(), LiveError> {
        self.send(|c| c.step(n))
    }

    /// Ask the target to capture `lanes` on its next instrumented pass (`None`: its own choice).
    pub fn capture_lanes(
        &self,
        lanes: Option<dispatchscope_core::instrument::LaneSelection>,
    ) -> Result<(), LiveError> {
        self.send(|c| c.capture_lanes(lanes))
    }

    /// Asks the target for `len` guest bytes at `address` (the Memory panel's byte view); the
    /// answer lands in [`LiveLink::memory`], and the same bytes are read again each time the
    /// target pauses.
    pub fn read_memory(&mut self, address: u64, len: u32) -> Result<(), LiveError> {
        let id = self.read.map_or(1, |(id, ..)| id + 1);
        self.read = Some((id, address, len));
        self.send(|c| c.read_memory(id, address, len))
    }

    /// Replaces the target's breakpoints.
    pub fn set_breakpoints(&self, breakpoints: &Breakpoints) -> Result<(), LiveError> {
        self.send(|c| c.set_breakpoints(breakpoints))
    }

    /// Detaches, leaving the target running; what was received stays (what the intake took
    /// meanwhile reaches the session at the next [`Self::drain`]).
    pub fn detach(&mut self) {
        self.end_intake(Duration::from_millis(500));
        self.attached = false;
        self.flush_shadow();
        self.state = LiveState::Disconnected {
            reason: "detached; the target runs on".into(),
        };
        self.log_end();
    }

    /// Stops the intake (detaching its client within `timeout`) and waits for its thread.
    fn end_intake(&mut self, timeout: Duration) {
        self.stop.stop(timeout);
        if let Some(t) = self.intake.take() {
            let _ = t.join();
        }
    }

    /// Logs `received N, dropped M` to stderr, once a session.
    fn log_end(&mut self) {
        if !std::mem::replace(&mut self.logged, true) {
            eprintln!("{}", self.end_line());
        }
    }

    /// The line the session's end logs: `received N, dropped M`, as `dispatchscope record` says
    /// it (received: dispatches this window got; dropped: what the target dropped, by its last
    /// figures or the gaps in the indices received if more, and what this window could not keep).
    pub fn end_line(&self) -> String {
        self.counters.end_line()
    }

    /// Dispatches this window received.
    pub fn received(&self) -> u64 {
        self.counters.received.load(Ordering::Acquire)
    }

    /// Dispatches lost: the target's drops and this window's (see [`Self::end_line`]).
    pub fn dropped(&self) -> u64 {
        self.counters.dropped()
    }

    /// Dispatches this window received a second, over the last second.
    pub fn received_per_s(&self) -> Option<f64> {
        let (&(t0, n0), &(t1, n1)) = (self.rate.front()?, self.rate.back()?);
        let secs = t1.duration_since(t0).as_secs_f64();
        (secs >= 0.25).then(|| (n1 - n0) as f64 / secs)
    }

    fn sample_rate(&mut self) {
        let now = Instant::now();
        self.rate.push_back((now, self.received()));
        while self
            .rate
            .get(1)
            .is_some_and(|(t, _)| now.duration_since(*t) >= RATE_SPAN)
        {
            self.rate.pop_front();
        }
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
        if let Some(r) = store {
            self.shadow_files = r.files_made();
            if let Err(e) = r.finish() {
                self.record_error = Some(e.to_string());
            }
        }
    }

    /// Appends what the intake made ready to `session` (the window's one call a frame: rows and
    /// the latest dispatches, then the rare messages in order).
    pub fn drain(&mut self, session: &mut Session) -> Drained {
        let mut out = Drained::default();
        let pending = self.handoff.take();
        self.sample_rate();
        out.dispatches = pending.batch.rows.len();
        if out.dispatches > 0 {
            session.push_batch(pending.batch);
        }
        for m in pending.controls {
            self.take(m, session, &mut out);
        }
        if let Some(s) = pending.stats {
            self.stats = Some(s);
        }
        if let Some(rows) = pending.unfinished {
            session.set_unfinished(rows);
        }
        if let Some(e) = pending.record_error {
            self.record_error = Some(e);
        }
        if let Some(ended) = pending.ended {
            self.attached = false;
            if let Some(t) = self.intake.take() {
                let _ = t.join();
            }
            self.flush_shadow();
            self.state = LiveState::Disconnected {
                reason: ended.reason,
            };
            out.ended = true;
            self.log_end();
        }
        out
    }

    /// One of the rare messages the intake hands over.
    fn take(&mut self, m: ToDebugger, session: &mut Session, out: &mut Drained) {
        match m {
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
            ToDebugger::DeviceLost(report) => {
                session.set_loss(Some(*report));
                out.lost = true;
            }
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
        if self.figures.finished() {
            0
        } else {
            self.figures.dispatches()
        }
    }

    /// What the disk budget deleted of the recording so far: its oldest dispatches, no longer
    /// on disk.
    pub fn released(&self) -> Released {
        self.figures.released()
    }

    /// Bytes the recording's files take on disk now.
    pub fn bytes_on_disk(&self) -> u64 {
        self.figures.bytes_on_disk()
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
        let (files, released) = self
            .with_store(|s| (s.files(), s.released()))
            .ok_or(LiveError::RecordingClosed)?;
        if released.dispatches > 0 {
            return Err(LiveError::Released {
                dispatches: released.dispatches,
                budget: self.disk_budget,
            });
        }
        // The first file holds the snapshot; each later one goes on from where it ended.
        let mut whole: Option<(Sample, Vec<Option<dispatchscope_core::DispatchReport>>)> = None;
        for f in files {
            let Opened::Capture(mut c) = session::open(&f)? else {
                return Err(LiveError::NotACapture);
            };
            let (part, reports) = c.to_sample()?;
            match &mut whole {
                None => whole = Some((part, reports)),
                Some((sample, all)) => {
                    sample.steps.extend(part.steps);
                    for p in part.programs {
                        sample.programs.retain(|q| q.address != p.address);
                        sample.programs.push(p);
                    }
                    all.extend(reports);
                }
            }
        }
        whole.ok_or(LiveError::NothingRecorded)
    }

    /// Writes everything recorded since attaching that is still on disk as a capture at `dest`,
    /// with the target's reports. When the disk budget released the oldest files, what is left
    /// is joined file by file (`dispatchscope_live::segments::join`, the records as they are:
    /// their checkpoints of engine state too), with a note of what was released in the capture's
    /// description; the answer says it too.
    pub fn save_capture(&mut self, dest: &Path) -> Result<Saved, LiveError> {
        let released = self.with_store(|s| s.released()).unwrap_or_default();
        if released.dispatches == 0 {
            let (sample, reports) = self.recorded()?;
            let all: Option<Vec<_>> = reports.into_iter().collect();
            session::write_capture(&sample, all.as_deref(), dest)?;
            return Ok(Saved {
                dispatches: all.map_or(0, |a| a.len()),
                released: 0,
            });
        }
        if let Some(e) = &self.record_error {
            return Err(LiveError::RecordingStopped { why: e.clone() });
        }
        let files = self
            .with_store(|s| s.flush().map(|()| s.files()))
            .ok_or(LiveError::RecordingClosed)??;
        let note = released_note(released, self.disk_budget);
        let joined = dispatchscope_live::segments::join(&files, dest, Some(&note))?;
        Ok(Saved {
            dispatches: joined.dispatches,
            released: released.dispatches,
        })
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
        self.end_intake(Duration::from_millis(200));
        if self.attached {
            self.log_end();
        }
        self.finish_shadow();
        let _ = std::fs::remove_file(&self.shadow_path);
        for f in &self.shadow_files {
            let _ = std::fs::remove_file(f);
        }
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

    /// [`Self::start`] with `dispatches_per_frame` a frame (at least the scene's own 5), streaming
    /// what a game streams ([`dispatchscope_demo::Streams::Game`]).
    pub fn start_with(fps: Option<f64>, dispatches_per_frame: u32) -> Result<Self, LiveError> {
        Self::start_streaming(fps, dispatches_per_frame, dispatchscope_demo::Streams::Game)
    }

    /// [`Self::start_with`], each dispatch carrying what `streams` says (the tests that select an
    /// executed access take [`dispatchscope_demo::Streams::AccessLists`]).
    pub fn start_streaming(
        fps: Option<f64>,
        dispatches_per_frame: u32,
        streams: dispatchscope_demo::Streams,
    ) -> Result<Self, LiveError> {
        let config = TapConfig {
            target_name: "dispatchscope demo (in the window's process)".into(),
            ..TapConfig::listening_on(SocketAddr::from(([127, 0, 0, 1], 0)))
        };
        let mut tap = Tap::listen(config).map_err(LiveError::DemoTap)?;
        let addr = tap.local_addr().ok_or(LiveError::DemoNoAddress)?;
        let mut demo = Demo::new(DemoConfig {
            dispatches_per_frame,
            streams,
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
