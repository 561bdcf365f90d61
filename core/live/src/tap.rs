//! [`Tap`]: what an emulator wraps around [`Engine::dispatch`] and [`Engine::apply`] so that a
//! debugger can attach while the game runs.
//!
//! Detached, a tap costs one relaxed atomic load per dispatch and per event, and nothing else: no
//! lock, no clone, no counter. Attached, it clones each dispatch's input and report (and each
//! event's report) into a bounded queue that a writer thread drains to the debugger; when the
//! queue is full the message is dropped and counted, so a slow debugger never makes the game wait.
//! The game waits only when the debugger asked it to pause, and never longer than the pause
//! timeout after the debugger's last frame ([`TapConfig::pause_timeout`], 1 s by default): a
//! debugger that dies closes its socket and the target resumes at once; one that goes silent is
//! given up on after the timeout, and its breakpoints are cleared so it cannot stop the game again.
//!
//! Where each breakpoint stops is documented on [`Breakpoints`]; in short, the target pauses
//! *before* a dispatch (for a pause request, a step, and the every-dispatch, Nth-dispatch and
//! program breakpoints) or right *after* one, inside its tap call, for what is only known once a
//! dispatch ran (refusal, escape, probes). The tap pauses only at dispatches, never at events.
//!
//! One tap serves one engine, called from the thread that submits its dispatches.
//! The tap never changes what the engine does: the report the emulator gets is the engine's.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::protocol::{
    Breakpoints, DEFAULT_LISTEN, PauseReason, ResumeReason, SNAPSHOT_EVENTS_PER_FRAME, Snapshot,
    ToDebugger,
};
use crate::server::Server;
use crate::snapshot::snapshot_of;
use dispatchscope_core::backend::Backend;
use dispatchscope_core::engine::{Engine, EngineError};
use dispatchscope_core::input::DispatchInput;
use dispatchscope_core::input::Event;
use dispatchscope_core::report::{DispatchReport, EventReport, Mode};

/// How a tap listens and how patient it is.
#[derive(Clone, Debug)]
pub struct TapConfig {
    /// Where to listen; `127.0.0.1:27953` by default. Any address that is not loopback requires
    /// `token`.
    pub listen: SocketAddr,
    /// The token a debugger must present; required when `listen` is not loopback.
    pub token: Option<String>,
    /// What the target calls itself in its hello.
    pub target_name: String,
    /// How long a paused target waits after the debugger's last frame before it resumes on its own.
    pub pause_timeout: Duration,
    /// How long a debugger may stay silent (no frame, not even a ping) before its session ends,
    /// paused or not.
    pub session_timeout: Duration,
    /// How long a connecting debugger has to complete the handshake.
    pub handshake_timeout: Duration,
    /// Messages the queue to the debugger holds before it drops dispatches and events.
    pub queue_capacity: usize,
    /// How often the target sends [`crate::protocol::Stats`].
    pub stats_interval: Duration,
}

impl Default for TapConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], crate::protocol::DEFAULT_PORT)),
            token: None,
            target_name: "dispatchscope target".to_owned(),
            pause_timeout: Duration::from_secs(1),
            session_timeout: Duration::from_secs(10),
            handshake_timeout: Duration::from_secs(2),
            queue_capacity: 1024,
            stats_interval: Duration::from_millis(500),
        }
    }
}

impl TapConfig {
    /// The default configuration listening on `listen`.
    pub fn listening_on(listen: SocketAddr) -> Self {
        Self {
            listen,
            ..Self::default()
        }
    }
}

/// Why a tap could not start listening.
#[derive(Debug, Error)]
pub enum TapError {
    /// A non-loopback address without a token.
    #[error(
        "listening on {addr} lets other machines attach, so it needs a token (--token); only a loopback address (like {DEFAULT_LISTEN}) may go without one"
    )]
    TokenRequired {
        /// The address.
        addr: SocketAddr,
    },
    /// The socket could not be bound.
    #[error("cannot listen on {addr}: {error}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        error: std::io::Error,
    },
    /// A thread could not be started.
    #[error("cannot start the {what} thread: {error}")]
    Thread {
        /// Which.
        what: &'static str,
        /// Why.
        error: std::io::Error,
    },
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The bounded queue from the game thread to one debugger's writer thread.
///
/// Dispatches and events are dropped (and counted) when it is full; control messages (pause,
/// resume, snapshot, refusal) always go in, and are few.
pub(crate) struct Queue {
    inner: Mutex<QueueInner>,
    ready: Condvar,
    capacity: usize,
}

struct QueueInner {
    items: VecDeque<ToDebugger>,
    closed: bool,
    dropped: u64,
}

pub(crate) enum Popped {
    Some,
    Empty,
    Closed,
}

impl Queue {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            inner: Mutex::new(QueueInner {
                items: VecDeque::new(),
                closed: false,
                dropped: 0,
            }),
            ready: Condvar::new(),
            capacity: capacity.max(1),
        }
    }

    /// Queues a dispatch or event; drops it when the queue is full.
    pub(crate) fn push(&self, message: ToDebugger) -> bool {
        let mut q = lock(&self.inner);
        if q.closed {
            return false;
        }
        if q.items.len() >= self.capacity {
            q.dropped += 1;
            return false;
        }
        q.items.push_back(message);
        drop(q);
        self.ready.notify_one();
        true
    }

    /// Queues a control message, whatever the queue holds.
    pub(crate) fn push_control(&self, message: ToDebugger) {
        let mut q = lock(&self.inner);
        if q.closed {
            return;
        }
        q.items.push_back(message);
        drop(q);
        self.ready.notify_one();
    }

    /// Moves every queued message into `out`, waiting up to `wait` for the first. After
    /// [`Queue::close`], what was queued still comes out, then `Closed`.
    pub(crate) fn pop_all(&self, wait: Duration, out: &mut Vec<ToDebugger>) -> Popped {
        let mut q = lock(&self.inner);
        if q.items.is_empty() && !q.closed {
            q = self
                .ready
                .wait_timeout(q, wait)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        if !q.items.is_empty() {
            out.extend(q.items.drain(..));
            return Popped::Some;
        }
        if q.closed {
            Popped::Closed
        } else {
            Popped::Empty
        }
    }

    pub(crate) fn close(&self) {
        lock(&self.inner).closed = true;
        self.ready.notify_all();
    }

    /// (queued, dropped so far).
    pub(crate) fn figures(&self) -> (usize, u64) {
        let q = lock(&self.inner);
        (q.items.len(), q.dropped)
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }
}

/// The attached debugger, as the game thread sees it.
pub(crate) struct Link {
    pub(crate) id: u64,
    pub(crate) queue: Arc<Queue>,
    pub(crate) last_heard: Instant,
    pub(crate) peer: SocketAddr,
}

/// What a paused target was told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Release {
    Continue,
    Step(u64),
}

/// Everything the game thread and the session threads share, under one lock.
#[derive(Default)]
pub(crate) struct Control {
    pub(crate) link: Option<Link>,
    pub(crate) pause_requested: bool,
    /// Dispatches left to run before pausing, and the step's size.
    pub(crate) steps: Option<(u64, u64)>,
    pub(crate) release: Option<Release>,
    pub(crate) breakpoints: Breakpoints,
    pub(crate) snapshot_wanted: bool,
    pub(crate) paused: bool,
    /// The session the game is paused for: a pause outlives its session for the moment the game
    /// thread takes to wake, and the next session's commands must not be taken for its.
    pub(crate) paused_for: Option<u64>,
}

impl Control {
    /// Forgets everything the debugger asked for.
    pub(crate) fn disarm(&mut self) {
        self.pause_requested = false;
        self.steps = None;
        self.release = None;
        self.breakpoints = Breakpoints::default();
        self.snapshot_wanted = false;
    }
}

/// State shared by the tap, its server threads and every [`TapHandle`].
pub(crate) struct Shared {
    /// The one flag the detached path reads.
    pub(crate) attached: AtomicBool,
    pub(crate) control: Mutex<Control>,
    /// The game thread waits on it while paused.
    pub(crate) wake: Condvar,
    pub(crate) config: TapConfig,
    notices: Mutex<VecDeque<String>>,
    /// Counted only while attached.
    pub(crate) dispatches: AtomicU64,
    pub(crate) events: AtomicU64,
}

const MAX_NOTICES: usize = 256;

impl Shared {
    pub(crate) fn new(config: TapConfig) -> Self {
        Self {
            attached: AtomicBool::new(false),
            control: Mutex::new(Control::default()),
            wake: Condvar::new(),
            config,
            notices: Mutex::new(VecDeque::new()),
            dispatches: AtomicU64::new(0),
            events: AtomicU64::new(0),
        }
    }

    /// Keeps a line for the target's log (the demo prints them; tests read them).
    pub(crate) fn notice(&self, line: String) {
        tracing::info!(target: "dispatchscope::live", "{line}");
        let mut n = lock(&self.notices);
        if n.len() == MAX_NOTICES {
            n.pop_front();
        }
        n.push_back(line);
    }

    /// Ends session `id` if it is the attached one: the game runs on, the queue closes.
    pub(crate) fn end_session(&self, id: u64, why: &str) {
        let mut c = lock(&self.control);
        if c.link.as_ref().is_some_and(|l| l.id == id) {
            if let Some(link) = c.link.take() {
                link.queue.close();
                self.notice(format!("debugger {} detached: {why}", link.peer));
            }
            self.attached.store(false, Ordering::Relaxed);
            c.disarm();
            drop(c);
            self.wake.notify_all();
        }
    }
}

/// A cheap, cloneable view of a tap for other threads: attached or not, figures, the log.
#[derive(Clone)]
pub struct TapHandle {
    shared: Arc<Shared>,
}

/// A tap's figures, from [`TapHandle::figures`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TapFigures {
    /// Whether a debugger is attached.
    pub attached: bool,
    /// Whether the game is paused.
    pub paused: bool,
    /// Messages waiting for the debugger.
    pub queued: usize,
    /// Messages dropped for the attached debugger (0 when none is attached).
    pub dropped: u64,
}

impl TapHandle {
    /// Whether a debugger is attached.
    pub fn is_attached(&self) -> bool {
        self.shared.attached.load(Ordering::Relaxed)
    }

    /// The tap's figures now.
    pub fn figures(&self) -> TapFigures {
        let c = lock(&self.shared.control);
        let (queued, dropped) = c.link.as_ref().map_or((0, 0), |l| l.queue.figures());
        TapFigures {
            attached: c.link.is_some(),
            paused: c.paused,
            queued,
            dropped,
        }
    }

    /// Takes the lines the tap logged since the last call: attaches, detaches, refusals, timeouts.
    pub fn take_notices(&self) -> Vec<String> {
        lock(&self.shared.notices).drain(..).collect()
    }
}

/// The emulator's side of live debugging; see the module docs.
pub struct Tap {
    shared: Arc<Shared>,
    server: Option<Server>,
}

impl Tap {
    /// A tap that never listens, so never attaches: what an emulator runs with live debugging off
    /// (and what the detached benchmark measures).
    pub fn detached() -> Self {
        Self {
            shared: Arc::new(Shared::new(TapConfig::default())),
            server: None,
        }
    }

    /// Listens for debuggers as `config` says. Refuses a non-loopback address without a token.
    pub fn listen(mut config: TapConfig) -> Result<Self, TapError> {
        config.token = config.token.filter(|t| !t.is_empty());
        if !config.listen.ip().is_loopback() && config.token.is_none() {
            return Err(TapError::TokenRequired {
                addr: config.listen,
            });
        }
        let shared = Arc::new(Shared::new(config));
        let server = Server::start(Arc::clone(&shared))?;
        Ok(Self {
            shared,
            server: Some(server),
        })
    }

    /// The address it listens on (with the port the system chose for port 0).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.server.as_ref().map(Server::local_addr)
    }

    /// A handle for other threads.
    pub fn handle(&self) -> TapHandle {
        TapHandle {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Whether a debugger is attached: the one relaxed load of the detached path.
    #[inline(always)]
    pub fn is_attached(&self) -> bool {
        self.shared.attached.load(Ordering::Relaxed)
    }

    /// Runs `input` on `engine` as [`Engine::dispatch`] does, and lets an attached debugger see it
    /// and stop the game around it.
    #[inline]
    pub fn dispatch<B: Backend>(
        &mut self,
        engine: &mut Engine<B>,
        input: &DispatchInput,
    ) -> Result<DispatchReport, EngineError> {
        if !self.is_attached() {
            return engine.dispatch(input);
        }
        self.dispatch_attached(engine, input)
    }

    /// Applies `event` as [`Engine::apply`] does, and sends it to an attached debugger. Events
    /// never pause the game.
    #[inline]
    pub fn apply<'e, B: Backend>(
        &mut self,
        engine: &'e mut Engine<B>,
        event: &Event,
    ) -> Result<&'e EventReport, EngineError> {
        if !self.is_attached() {
            return engine.apply(event);
        }
        self.apply_attached(engine, event)
    }

    #[cold]
    #[inline(never)]
    fn apply_attached<'e, B: Backend>(
        &mut self,
        engine: &'e mut Engine<B>,
        event: &Event,
    ) -> Result<&'e EventReport, EngineError> {
        let result = engine.apply(event);
        let queue = lock(&self.shared.control)
            .link
            .as_ref()
            .map(|l| Arc::clone(&l.queue));
        if let Some(queue) = queue {
            self.shared.events.fetch_add(1, Ordering::Relaxed);
            match &result {
                Ok(report) => {
                    queue.push(ToDebugger::Event {
                        report: Box::new((*report).clone()),
                    });
                }
                Err(e) => {
                    queue.push(ToDebugger::EventFailed {
                        event: Box::new(event.clone()),
                        message: e.to_string(),
                    });
                }
            }
        }
        result
    }

    #[cold]
    #[inline(never)]
    fn dispatch_attached<B: Backend>(
        &mut self,
        engine: &mut Engine<B>,
        input: &DispatchInput,
    ) -> Result<DispatchReport, EngineError> {
        let index = engine.next_dispatch();
        let shared = Arc::clone(&self.shared);
        // Before the dispatch: a snapshot if one was asked for, then the pauses known beforehand.
        {
            let mut c = lock(&shared.control);
            if c.link.is_none() {
                drop(c);
                return engine.dispatch(input);
            }
            if c.snapshot_wanted {
                c.snapshot_wanted = false;
                send_snapshot(&c, engine);
            }
            if let Some(why) = pause_before(&c, index, input) {
                drop(pause(&shared, c, index, why, Some(input)));
            }
        }
        let result = engine.dispatch(input);
        let queue = lock(&shared.control)
            .link
            .as_ref()
            .map(|l| Arc::clone(&l.queue));
        let Some(queue) = queue else { return result };
        shared.dispatches.fetch_add(1, Ordering::Relaxed);
        match &result {
            Ok(report) => {
                queue.push(ToDebugger::Dispatch {
                    index,
                    input: Box::new(input.clone()),
                    report: Box::new(report.clone()),
                });
                let mut c = lock(&shared.control);
                if let Some((left, _)) = c.steps.as_mut() {
                    *left = left.saturating_sub(1);
                }
                if let Some(why) = pause_after(&c.breakpoints, report) {
                    drop(pause(&shared, c, index + 1, why, None));
                }
            }
            Err(e) => {
                queue.push(ToDebugger::DispatchFailed {
                    index,
                    program: input.program,
                    message: e.to_string(),
                });
            }
        }
        result
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            server.stop();
        }
    }
}

/// The pause a dispatch meets before it runs, if any.
fn pause_before(c: &Control, index: u64, input: &DispatchInput) -> Option<PauseReason> {
    if let Some((0, n)) = c.steps {
        return Some(PauseReason::Step { n });
    }
    if c.pause_requested {
        return Some(PauseReason::Requested);
    }
    let b = &c.breakpoints;
    if b.every_dispatch {
        return Some(PauseReason::EveryDispatch);
    }
    if b.dispatch == Some(index) {
        return Some(PauseReason::Nth { dispatch: index });
    }
    if b.programs.contains(&input.program) {
        return Some(PauseReason::Program {
            program: input.program,
        });
    }
    None
}

/// The pause a dispatch's report calls for, if any.
fn pause_after(b: &Breakpoints, r: &DispatchReport) -> Option<PauseReason> {
    if b.refusal && (r.mode == Mode::Refused || !r.refusals.is_empty()) {
        let mut rules: Vec<_> = r.refusals.iter().map(|f| f.rule).collect();
        rules.sort_unstable();
        rules.dedup();
        return Some(PauseReason::Refusal {
            dispatch: r.index,
            rules,
        });
    }
    if b.escape && !r.escapes.is_empty() {
        return Some(PauseReason::Escape {
            dispatch: r.index,
            escapes: r.escapes.len(),
        });
    }
    if let Some(k) = b.probes_over {
        for a in &r.accesses {
            if let Some(l) = a.lookups.iter().find(|l| l.probes.len() > k as usize) {
                return Some(PauseReason::Probes {
                    dispatch: r.index,
                    access: a.index,
                    probes: l.probes.len(),
                    more_than: k,
                });
            }
        }
    }
    None
}

fn send_snapshot<B: Backend>(c: &Control, engine: &Engine<B>) {
    let Some(link) = &c.link else { return };
    let (events, contents) = snapshot_of(engine.memory());
    let chunks: Vec<&[Event]> = events.chunks(SNAPSHOT_EVENTS_PER_FRAME).collect();
    link.queue
        .push_control(ToDebugger::Snapshot(Box::new(Snapshot {
            next_dispatch: engine.next_dispatch(),
            device: engine.limits().clone(),
            n_event_frames: chunks.len() as u64,
            n_contents: contents.len() as u64,
        })));
    for chunk in chunks {
        link.queue.push_control(ToDebugger::SnapshotEvents {
            events: chunk.to_vec(),
        });
    }
    for contents in contents {
        link.queue
            .push_control(ToDebugger::SnapshotContents { contents });
    }
}

/// Pauses the game thread before dispatch `next_dispatch` until the debugger releases it, detaches,
/// dies, or stays silent for the pause timeout.
fn pause<'a>(
    shared: &'a Shared,
    mut c: MutexGuard<'a, Control>,
    next_dispatch: u64,
    why: PauseReason,
    upcoming: Option<&DispatchInput>,
) -> MutexGuard<'a, Control> {
    let Some(link) = c.link.as_ref() else {
        return c;
    };
    let session = link.id;
    link.queue.push_control(ToDebugger::Paused {
        next_dispatch,
        why,
        upcoming: upcoming.map(|i| Box::new(i.clone())),
    });
    c.pause_requested = false;
    c.steps = None;
    c.release = None;
    c.paused = true;
    c.paused_for = Some(session);
    let timeout = shared.config.pause_timeout;
    // A detached or gone debugger ends the loop: the game runs on.
    while let Some((silent, peer, queue)) = c
        .link
        .as_ref()
        .filter(|l| l.id == session)
        .map(|l| (l.last_heard.elapsed(), l.peer, Arc::clone(&l.queue)))
    {
        if let Some(release) = c.release.take() {
            let why = match release {
                Release::Continue => ResumeReason::Continue,
                Release::Step(n) => {
                    c.steps = Some((n, n));
                    ResumeReason::Step { n }
                }
            };
            queue.push_control(ToDebugger::Resumed { next_dispatch, why });
            break;
        }
        if silent >= timeout {
            let silent_ms = silent.as_millis() as u64;
            queue.push_control(ToDebugger::Resumed {
                next_dispatch,
                why: ResumeReason::Silent { silent_ms },
            });
            c.disarm();
            shared.notice(format!(
                "debugger {peer} said nothing for {silent_ms} ms while the target was paused: resumed and cleared its breakpoints"
            ));
            break;
        }
        let wait = timeout - silent + Duration::from_millis(1);
        c = shared
            .wake
            .wait_timeout(c, wait)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
    c.paused = false;
    c.paused_for = None;
    c
}
