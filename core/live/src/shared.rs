//! The state a tap's game thread and its server threads share: the control block (attached,
//! paused, breakpoints, stepping), the bounded queue to the debugger's writer thread, the link
//! between them, the figures and the notices. Both `tap.rs` (the game thread) and `server.rs` (the
//! socket threads) import it; neither imports the other's internals.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use thiserror::Error;

use std::collections::HashMap;

use dispatchscope_core::instrument::LaneSelection;

use crate::protocol::{Breakpoints, DEFAULT_LISTEN, ToDebugger};
use crate::wire::EncodedDispatch;

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
    /// Messages the queue to the debugger holds before it drops dispatches and events (4096, a
    /// third of a second of a game's 12,000 dispatches a second).
    pub queue_capacity: usize,
    /// How often the target sends [`crate::protocol::Stats`].
    pub stats_interval: Duration,
    /// Access reports a dispatch's frame carries; the rest wait for [`crate::ToTarget::Detail`]
    /// (the target keeps the whole lists of its latest [`crate::protocol::DETAIL_KEPT`] cut
    /// dispatches).
    pub streamed_accesses: usize,
    /// The most heap bytes the whole access lists kept for [`crate::ToTarget::Detail`] may take
    /// (their reports, lookups, probes and values, counted as `DetailRing` does); the oldest go
    /// first, and a list larger than this alone is not kept (a request for it is answered
    /// [`crate::ToDebugger::DetailGone`]). 64 MiB by default
    /// ([`crate::protocol::DEFAULT_DETAIL_BYTES`]).
    pub detail_bytes: usize,
    /// The share of the game thread's time that copying engine state for checkpoints may take
    /// (`checkpoint.rs`'s budget): 0.02 by default; a change that finds the budget spent is sent as
    /// unknown and copied at a later dispatch. 0 never copies.
    pub checkpoint_share: f64,
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
            queue_capacity: 4096,
            stats_interval: Duration::from_millis(500),
            streamed_accesses: crate::protocol::DEFAULT_STREAMED_ACCESSES,
            detail_bytes: crate::protocol::DEFAULT_DETAIL_BYTES,
            checkpoint_share: 0.02,
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
    /// Dispatches the writer is done with: the ring's slots, refilled by the game thread's next
    /// dispatches ([`EncodedDispatch::refill`]) with no allocation once warm.
    #[allow(
        clippy::vec_box,
        reason = "a slot moves between the queue and the pool as the same box, never copied"
    )]
    spare: Mutex<Vec<Box<EncodedDispatch>>>,
    /// Set by the writer when the game thread must send every state again.
    resend_state: AtomicBool,
}

/// Queued dispatches and events that wake the writer; fewer wait for its tick.
const WAKE_AT: usize = 64;
/// The longest the writer sleeps with messages possibly waiting: what a dispatch may wait in
/// the queue before it goes, when fewer than [`WAKE_AT`] come.
pub(crate) const WRITER_TICK: Duration = Duration::from_millis(2);

/// Slots kept for reuse; more than a writer's usual batch gains nothing.
const SPARE_SLOTS: usize = 256;
/// A slot whose rows took more than this (a dispatch of thousands of accesses) is freed, not kept.
const SPARE_BUFFER_BYTES: usize = 1 << 20;

/// What the game thread queues for the writer: a message, or a dispatch already written as rows.
pub(crate) enum Outgoing {
    Message(ToDebugger),
    Dispatch(Box<EncodedDispatch>),
    /// The engine state the dispatch queued just before it left ([`Queue::push_with_state`]).
    State(Box<crate::checkpoint::StateCopy>),
    /// A dispatch prepared or abandoned ([`crate::flight`]), encoded by the writer.
    Flight(crate::flight::FlightNote),
}

struct QueueInner {
    items: VecDeque<Outgoing>,
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
            spare: Mutex::new(Vec::new()),
            resend_state: AtomicBool::new(false),
        }
    }

    /// A slot to copy a dispatch into: one the writer gave back, if any.
    pub(crate) fn spare_slot(&self) -> Option<Box<EncodedDispatch>> {
        lock(&self.spare).pop()
    }

    /// Slots given back and not taken yet.
    pub(crate) fn spare_len(&self) -> usize {
        lock(&self.spare).len()
    }

    /// Gives a slot back for reuse.
    pub(crate) fn give_back(&self, slot: Box<EncodedDispatch>) {
        if slot.accesses.capacity() > SPARE_BUFFER_BYTES {
            return;
        }
        let mut s = lock(&self.spare);
        if s.len() < SPARE_SLOTS {
            s.push(slot);
        }
    }

    /// Queues a dispatch or event; drops it when the queue is full.
    pub(crate) fn push(&self, message: Outgoing) -> bool {
        self.push_items(message, None)
    }

    /// Queues a dispatch and the state it left as one: both, or (when the queue is full, counted
    /// as one dropped message) neither, so that a state never reaches the debugger without its
    /// dispatch (`checkpoint.rs`).
    pub(crate) fn push_with_state(
        &self,
        dispatch: Outgoing,
        state: Box<crate::checkpoint::StateCopy>,
    ) -> bool {
        self.push_items(dispatch, Some(Outgoing::State(state)))
    }

    /// Queues `first` and `then` together, or drops both (one message counted).
    fn push_items(&self, first: Outgoing, then: Option<Outgoing>) -> bool {
        let mut q = lock(&self.inner);
        if q.closed {
            return false;
        }
        if q.items.len() >= self.capacity {
            q.dropped += 1;
            return false;
        }
        // The writer drains everything at once and looks again every `WRITER_TICK` on its own;
        // the game thread wakes it only for a batch. Waking it for each dispatch cost the game
        // thread a system call and, on two cores, the writer taking its core at once: 19.7 µs a
        // dispatch measured (issue 31, BENCHMARKS.md).
        q.items.push_back(first);
        q.items.extend(then);
        let wake = q.items.len() == WAKE_AT;
        drop(q);
        if wake {
            self.ready.notify_one();
        }
        true
    }

    /// Asks the game thread to send every state again (the writer could not send a dispatch
    /// that carried one).
    pub(crate) fn want_state(&self) {
        self.resend_state
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether [`Self::want_state`] was asked since the last call.
    pub(crate) fn take_want_state(&self) -> bool {
        self.resend_state.load(std::sync::atomic::Ordering::Relaxed)
            && self
                .resend_state
                .swap(false, std::sync::atomic::Ordering::Relaxed)
    }

    /// Queues a control message, whatever the queue holds.
    pub(crate) fn push_control(&self, message: ToDebugger) {
        self.push_control_item(Outgoing::Message(message));
    }

    /// Queues an item that must not be dropped (a control message, an abandon), whatever the
    /// queue holds.
    pub(crate) fn push_control_item(&self, item: Outgoing) {
        let mut q = lock(&self.inner);
        if q.closed {
            return;
        }
        q.items.push_back(item);
        drop(q);
        self.ready.notify_one();
    }

    /// Moves every queued message into `out`, waiting up to `wait` for the first. After
    /// [`Queue::close`], what was queued still comes out, then `Closed`.
    pub(crate) fn pop_all(&self, wait: Duration, out: &mut Vec<Outgoing>) -> Popped {
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

/// The whole access lists of a session's latest cut dispatches, for [`crate::ToTarget::Detail`]:
/// the writer thread keeps them, the reader thread answers from them. Bounded by count
/// ([`crate::protocol::DETAIL_KEPT`]) and by heap bytes ([`TapConfig::detail_bytes`]).
pub(crate) struct DetailRing {
    kept: VecDeque<(u64, Vec<dispatchscope_core::report::AccessReport>, usize)>,
    bytes: usize,
    max_bytes: usize,
}

impl Default for DetailRing {
    fn default() -> Self {
        Self::with_max_bytes(crate::protocol::DEFAULT_DETAIL_BYTES)
    }
}

/// The heap bytes an access list holds: its reports, their lookups, probes and values.
pub(crate) fn access_list_bytes(accesses: &[dispatchscope_core::report::AccessReport]) -> usize {
    use dispatchscope_core::report::{AccessReport, LookupTrace, ProbeStep};
    accesses
        .iter()
        .fold(std::mem::size_of_val(accesses), |n, a: &AccessReport| {
            n + a.lookups.len() * std::mem::size_of::<LookupTrace>()
                + a.lookups
                    .iter()
                    .map(|l| l.probes.len() * std::mem::size_of::<ProbeStep>())
                    .sum::<usize>()
                + a.values.len() * 4
        })
}

impl DetailRing {
    /// A ring that keeps at most `max_bytes` of access lists.
    pub(crate) fn with_max_bytes(max_bytes: usize) -> Self {
        Self {
            kept: VecDeque::new(),
            bytes: 0,
            max_bytes,
        }
    }

    /// Heap bytes of the lists kept now.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    pub(crate) fn keep(
        &mut self,
        dispatch: u64,
        accesses: Vec<dispatchscope_core::report::AccessReport>,
    ) {
        let n = access_list_bytes(&accesses);
        if n > self.max_bytes {
            return;
        }
        while self.kept.len() >= crate::protocol::DETAIL_KEPT
            || (self.bytes + n > self.max_bytes && !self.kept.is_empty())
        {
            if let Some((_, _, b)) = self.kept.pop_front() {
                self.bytes -= b;
            }
        }
        self.bytes += n;
        self.kept.push_back((dispatch, accesses, n));
    }

    /// The answer to a request for `dispatch`'s detail.
    pub(crate) fn answer(&self, dispatch: u64) -> ToDebugger {
        match self.kept.iter().find(|(d, _, _)| *d == dispatch) {
            Some((_, accesses, _)) => ToDebugger::Detail {
                dispatch,
                accesses: accesses.clone(),
            },
            None => {
                let held = match (self.kept.front(), self.kept.back()) {
                    (Some((a, _, _)), Some((b, _, _))) => format!(
                        "it holds the whole access lists of {} cut dispatches, {a} to {b}",
                        self.kept.len()
                    ),
                    _ => "it holds none".to_owned(),
                };
                ToDebugger::DetailGone {
                    dispatch,
                    message: format!(
                        "the target has no cut access list of dispatch {dispatch} (a dispatch whose accesses all fit in its frame has none to fetch); {held}"
                    ),
                }
            }
        }
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
    /// A lane request ([`crate::ToTarget::CaptureLanes`]) the emulator has not yet taken: `Some(None)`
    /// gives the choice back to the emulator.
    pub(crate) lane_request: Option<Option<LaneSelection>>,
    /// Whether the session's debugger chose the lanes, so that its end gives the choice back.
    pub(crate) lanes_chosen: bool,
    /// Reads ([`crate::ToTarget::ReadMemory`]) the game's thread has yet to answer: id, address,
    /// length; at most [`crate::protocol::MAX_MEMORY_READS_PENDING`].
    pub(crate) memory_reads: Vec<(u64, u64, u32)>,
}

impl Control {
    /// Forgets everything the debugger asked for.
    pub(crate) fn disarm(&mut self) {
        self.pause_requested = false;
        self.steps = None;
        self.release = None;
        self.breakpoints = Breakpoints::default();
        self.snapshot_wanted = false;
        self.memory_reads.clear();
        if std::mem::take(&mut self.lanes_chosen) {
            self.lane_request = Some(None);
        }
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
    /// Nanoseconds the game thread spent in the tap's attached path since the debugger attached,
    /// pauses left out ([`crate::protocol::Stats::tap_ns_per_dispatch`]).
    pub(crate) tap_ns: AtomicU64,
    /// The code of the programs the emulator told the tap about, by address.
    pub(crate) programs: Mutex<HashMap<u64, Arc<[u8]>>>,
    /// The engine's loss report, once the emulator said its device was lost: sent to the
    /// debugger attached then, and to each one that attaches later.
    pub(crate) loss: Mutex<Option<Arc<dispatchscope_core::report::DeviceLossReport>>>,
}

const MAX_NOTICES: usize = 256;

impl Shared {
    /// The lane request the emulator has not yet taken (see [`crate::Tap::take_lane_request`]).
    pub(crate) fn take_lane_request(&self) -> Option<Option<LaneSelection>> {
        lock(&self.control).lane_request.take()
    }

    pub(crate) fn new(config: TapConfig) -> Self {
        Self {
            attached: AtomicBool::new(false),
            control: Mutex::new(Control::default()),
            wake: Condvar::new(),
            config,
            notices: Mutex::new(VecDeque::new()),
            dispatches: AtomicU64::new(0),
            events: AtomicU64::new(0),
            tap_ns: AtomicU64::new(0),
            programs: Mutex::new(HashMap::new()),
            loss: Mutex::new(None),
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

    /// Takes the lines kept since the last call.
    pub(crate) fn take_notices(&self) -> Vec<String> {
        lock(&self.notices).drain(..).collect()
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;
    use dispatchscope_core::input::{AccessKind, Op};
    use dispatchscope_core::report::{AccessReport, Route};
    use dispatchscope_core::rules::Rule;

    fn list(n: usize, values: usize) -> Vec<AccessReport> {
        (0..n)
            .map(|index| AccessReport {
                index,
                workgroup: 0,
                wave: 0,
                lane: 0,
                pc: 0,
                kind: AccessKind::Global,
                op: Op::Load,
                size_bytes: 4,
                route: Route::NotRun,
                rule: Rule::ALL[0],
                lookups: Vec::new(),
                device_address: None,
                values: vec![7; values],
                escaped: false,
            })
            .collect()
    }

    #[test]
    fn the_detail_ring_is_bounded_by_bytes_and_drops_the_oldest_first() {
        let one = access_list_bytes(&list(100, 16));
        assert!(one >= 100 * (std::mem::size_of::<AccessReport>() + 64));
        let mut ring = DetailRing::with_max_bytes(3 * one);
        for d in 0..10 {
            ring.keep(d, list(100, 16));
            assert!(ring.bytes() <= 3 * one, "after {d}: {}", ring.bytes());
        }
        assert!(matches!(
            ring.answer(9),
            ToDebugger::Detail { dispatch: 9, .. }
        ));
        assert!(matches!(
            ring.answer(7),
            ToDebugger::Detail { dispatch: 7, .. }
        ));
        assert!(matches!(ring.answer(6), ToDebugger::DetailGone { .. }));
        // A list larger than the whole bound alone is not kept, and the others stay.
        ring.keep(10, list(400, 16));
        assert!(matches!(ring.answer(10), ToDebugger::DetailGone { .. }));
        assert!(matches!(ring.answer(9), ToDebugger::Detail { .. }));
        // The count bound still holds for small lists.
        let mut ring = DetailRing::with_max_bytes(usize::MAX);
        for d in 0..(crate::protocol::DETAIL_KEPT as u64 + 5) {
            ring.keep(d, list(1, 0));
        }
        assert!(matches!(ring.answer(4), ToDebugger::DetailGone { .. }));
        assert!(matches!(ring.answer(5), ToDebugger::Detail { .. }));
    }
}
