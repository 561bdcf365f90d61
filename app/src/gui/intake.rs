//! The live session's intake: a thread of its own that takes every message the live client
//! received, as it arrives (not once a frame), writes it to the session's recording
//! (`dispatchscope_live::LiveStore::take_ref`) and makes each dispatch's row, so that the window's thread only
//! appends what is ready ([`Handoff::take`]) and handles the rare messages that change what it
//! shows (paused, resumed, figures, memory read, program, a failed dispatch, a lost device). It
//! keeps the dispatches in flight (prepared, no report yet) and the latest abandoned, handing the
//! window their list when it changed.
//!
//! What waits for the window is bounded where it can be lost and compact where it cannot: every
//! dispatch's row waits (8 bytes a dispatch in [`Rows`], never cut), the dispatches as they came
//! only for the latest [`super::session::LIVE_WINDOW`] (older ones are in the recording), the
//! target's figures only as the latest. Nothing is dropped silently: what the window could not
//! keep is counted ([`Counters::not_kept`]) and said when the session ends.
//! This module never draws.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use dispatchscope_live::protocol::Stats;
use dispatchscope_live::{Incoming, LiveClient, ToDebugger};
use std::collections::{BTreeMap, VecDeque};

use dispatchscope_views::{DispatchRow, DispatchState, PendingRow};

use super::session::{ABANDONED_KEPT, LiveBatch, Recent, SharedStore};

/// The longest the intake holds the client's lock while waiting for a message (a command from
/// the window waits at most this long for it).
const WAIT: Duration = Duration::from_millis(2);

/// The client, shared: the window sends commands through it, the intake takes what it received.
pub type SharedClient = Arc<Mutex<Option<LiveClient>>>;

/// Where the intake takes messages from.
pub enum Inlet {
    /// A connected client (the window's).
    Client(SharedClient),
    /// A channel fed by a test or a bench, standing in for a client.
    Channel(Receiver<Incoming>),
}

/// What one wait on an [`Inlet`] gave.
enum Next {
    Item(Incoming),
    Idle,
    Gone,
}

impl Inlet {
    fn next(&self) -> Next {
        match self {
            Inlet::Client(c) => {
                let guard = c.lock().unwrap_or_else(PoisonError::into_inner);
                let Some(client) = guard.as_ref() else {
                    return Next::Gone;
                };
                match client.receiver().recv_timeout(WAIT) {
                    Ok(i) => Next::Item(i),
                    Err(RecvTimeoutError::Timeout) => Next::Idle,
                    Err(RecvTimeoutError::Disconnected) => Next::Gone,
                }
            }
            Inlet::Channel(rx) => match rx.recv_timeout(WAIT) {
                Ok(i) => Next::Item(i),
                Err(RecvTimeoutError::Timeout) => Next::Idle,
                Err(RecvTimeoutError::Disconnected) => Next::Gone,
            },
        }
    }
}

/// Figures the intake keeps as it goes, read by the window at any time (the status bar, the line
/// logged when the session ends).
#[derive(Debug, Default)]
pub struct Counters {
    /// Dispatches received, counted once recorded and handed to the window.
    pub received: AtomicU64,
    /// Dispatches received that the recording did not take after it had started (it stopped on
    /// a write error, or was closed): listed while in the window of the latest, but not kept.
    pub not_kept: AtomicU64,
    /// Dispatches missing from the indices received (the target dropped them).
    pub gaps: AtomicU64,
    /// What the target's latest figures said it dropped.
    pub target_dropped: AtomicU64,
}

impl Counters {
    /// Dispatches lost: what the target dropped (its latest figures, or the gaps seen since, if
    /// more) and what this window could not keep.
    pub fn dropped(&self) -> u64 {
        let target = self
            .target_dropped
            .load(Ordering::Relaxed)
            .max(self.gaps.load(Ordering::Relaxed));
        target + self.not_kept.load(Ordering::Relaxed)
    }

    /// The line a live session's end logs, worded as `dispatchscope record` prints it.
    pub fn end_line(&self) -> String {
        format!(
            "received {}, dropped {}",
            self.received.load(Ordering::Relaxed),
            self.dropped()
        )
    }
}

/// How a session's intake ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ended {
    /// Why, as the window says it.
    pub reason: String,
}

/// What waits for the window: filled by the intake, emptied by the window each frame.
#[derive(Default)]
pub struct Pending {
    /// Rows and the latest dispatches.
    pub batch: LiveBatch,
    /// The rare messages, in order (paused, resumed, memory, program, failed dispatches).
    pub controls: Vec<ToDebugger>,
    /// The target's latest figures.
    pub stats: Option<Stats>,
    /// The dispatches without a report as they stand now (in flight, then the latest
    /// abandoned), by index, when they changed since the window last took them.
    pub unfinished: Option<Vec<PendingRow>>,
    /// Why the recording stopped, if it did since the last take.
    pub record_error: Option<String>,
    /// Set once, when the intake ended.
    pub ended: Option<Ended>,
    /// Whether the window was woken for what waits.
    notified: bool,
}

/// The hand-off between the intake thread and the window.
#[derive(Default)]
pub struct Handoff {
    pending: Mutex<Pending>,
}

impl Handoff {
    /// Everything that waits, leaving nothing (the window's one call a frame).
    pub fn take(&self) -> Pending {
        std::mem::take(&mut *self.pending.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Runs `f` on what waits; returns whether the window should be woken.
    fn with(&self, f: impl FnOnce(&mut Pending)) -> bool {
        let mut p = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut p);
        !std::mem::replace(&mut p.notified, true)
    }
}

/// The intake's own state, on its thread.
pub struct Intake {
    store: SharedStore,
    /// Whether the recording still takes messages.
    recording: bool,
    /// Whether it took a dispatch yet (the target's snapshot came).
    recording_started: bool,
    /// Whether the session position of the recording's first dispatch was handed over.
    store_first_sent: bool,
    /// Dispatches taken: the session position of the next one.
    n: usize,
    /// The frame of the last row.
    frame: u64,
    /// The index the next dispatch should have.
    next_index: Option<u64>,
    /// The dispatches in flight (prepared, no report yet), by index.
    in_flight: BTreeMap<u64, PendingRow>,
    /// The latest abandoned, oldest first, at most [`ABANDONED_KEPT`].
    abandoned: VecDeque<PendingRow>,
    /// Whether those changed since they were last handed over.
    unfinished_changed: bool,
    handoff: Arc<Handoff>,
    counters: Arc<Counters>,
    notify: Arc<dyn Fn() + Send + Sync>,
}

/// How the window asks the intake to end.
#[derive(Debug, Default)]
pub struct StopFlag {
    stop: AtomicBool,
    /// For a client: detach within this many milliseconds (what arrives meanwhile is still taken).
    detach_ms: AtomicU64,
}

impl StopFlag {
    /// Asks the intake to detach within `timeout` and end.
    pub fn stop(&self, timeout: Duration) {
        let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        self.detach_ms.store(ms, Ordering::Relaxed);
        self.stop.store(true, Ordering::Release);
    }

    fn stopping(&self) -> Option<Duration> {
        self.stop
            .load(Ordering::Acquire)
            .then(|| Duration::from_millis(self.detach_ms.load(Ordering::Relaxed)))
    }
}

impl Intake {
    /// An intake writing `store`, handing over through `handoff`, counting in `counters`;
    /// `notify` wakes the window when something waits for it.
    pub fn new(
        store: SharedStore,
        handoff: Arc<Handoff>,
        counters: Arc<Counters>,
        notify: Arc<dyn Fn() + Send + Sync>,
    ) -> Self {
        Self {
            store,
            recording: true,
            recording_started: false,
            store_first_sent: false,
            n: 0,
            frame: 0,
            next_index: None,
            in_flight: BTreeMap::new(),
            abandoned: VecDeque::new(),
            unfinished_changed: false,
            handoff,
            counters,
            notify,
        }
    }

    /// Starts the intake's thread over `inlet`; it ends when the connection goes or `stop` is
    /// set.
    pub fn spawn(self, inlet: Inlet, stop: Arc<StopFlag>) -> std::io::Result<JoinHandle<()>> {
        std::thread::Builder::new()
            .name("dispatchscope live intake".into())
            .spawn(move || self.run(&inlet, &stop))
    }

    fn run(mut self, inlet: &Inlet, stop: &StopFlag) {
        let reason = loop {
            if let Some(timeout) = stop.stopping() {
                break self.detach(inlet, timeout);
            }
            match inlet.next() {
                Next::Item(Incoming::Message(m)) => self.take(m),
                Next::Item(Incoming::Disconnected { reason, clean }) => {
                    if let Inlet::Client(c) = inlet {
                        // The reader ended; dropping the client joins it.
                        drop(c.lock().unwrap_or_else(PoisonError::into_inner).take());
                    }
                    break if clean {
                        reason
                    } else {
                        format!("the target went away: {reason}")
                    };
                }
                // Quiet (a paused target with dispatches in flight): what changed goes now.
                Next::Idle => self.hand_over_unfinished(true),
                Next::Gone => break "the connection closed".into(),
            }
        };
        self.flush();
        self.hand_over_unfinished(true);
        let wake = self.handoff.with(|p| p.ended = Some(Ended { reason }));
        if wake {
            (self.notify)();
        }
    }

    /// Detaches the client (the target runs on), taking what arrives meanwhile.
    fn detach(&mut self, inlet: &Inlet, timeout: Duration) -> String {
        if let Inlet::Client(c) = inlet {
            let client = c.lock().unwrap_or_else(PoisonError::into_inner).take();
            if let Some(client) = client {
                // What came before the close is the session's too.
                if let Ok(seen) = client.detach(timeout) {
                    for m in seen {
                        self.take(m);
                    }
                }
            }
        }
        "detached; the target runs on".into()
    }

    fn flush(&mut self) {
        let mut guard = self.store.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(Err(e)) = guard.as_mut().map(|s| s.flush()) {
            drop(guard);
            self.handoff.with(|p| p.record_error = Some(e.to_string()));
        }
    }

    /// Takes one message: to the recording first, then its row (a dispatch) or to the window's
    /// controls (the rest).
    pub fn take(&mut self, m: ToDebugger) {
        let stored = self.record(&m);
        let wake = match m {
            ToDebugger::Received(d) => {
                let row = DispatchRow::after_frame(&d.report, self.frame);
                let index = d.index;
                self.left_flight(index);
                self.dispatch(&row, index, stored, Recent::Received(d))
            }
            ToDebugger::Dispatch { report, .. } => {
                let row = DispatchRow::after_frame(&report, self.frame);
                let index = report.index;
                self.left_flight(index);
                self.dispatch(&row, index, stored, Recent::Report(report))
            }
            ToDebugger::Prepared {
                index,
                mode,
                program,
                label,
            } => {
                self.in_flight.insert(
                    index,
                    PendingRow {
                        index,
                        program,
                        label: Arc::from(label),
                        mode,
                        state: DispatchState::InFlight,
                    },
                );
                self.unfinished_changed = true;
                false
            }
            ToDebugger::Abandoned { index } => {
                if let Some(mut row) = self.in_flight.remove(&index) {
                    row.state = DispatchState::Abandoned;
                    if self.abandoned.len() >= ABANDONED_KEPT {
                        self.abandoned.pop_front();
                    }
                    self.abandoned.push_back(row);
                    self.unfinished_changed = true;
                }
                false
            }
            m @ ToDebugger::DeviceLost(_) => {
                self.in_flight.clear();
                self.unfinished_changed = true;
                self.handoff.with(|p| p.controls.push(m))
            }
            m @ ToDebugger::DispatchFailed { index, .. } => {
                self.left_flight(index);
                self.handoff.with(|p| p.controls.push(m))
            }
            ToDebugger::Stats(s) => {
                self.counters
                    .target_dropped
                    .store(s.dropped, Ordering::Relaxed);
                self.handoff.with(|p| p.stats = Some(s))
            }
            m @ (ToDebugger::Paused { .. }
            | ToDebugger::Resumed { .. }
            | ToDebugger::Memory { .. }
            | ToDebugger::Program { .. }) => self.handoff.with(|p| p.controls.push(m)),
            // The snapshot, events and checkpoints are the recording's alone.
            _ => false,
        };
        if wake {
            (self.notify)();
        }
        self.hand_over_unfinished(false);
    }

    /// Dispatch `index` completed or failed: it and every dispatch in flight before it left
    /// flight (they complete in the order prepared; a report whose prepare message was dropped
    /// ends it too).
    fn left_flight(&mut self, index: u64) {
        if self
            .in_flight
            .first_key_value()
            .is_some_and(|(&first, _)| first <= index)
        {
            self.in_flight = self.in_flight.split_off(&index.saturating_add(1));
            self.unfinished_changed = true;
        }
    }

    /// Hands the dispatches without a report to the window when they changed: at once when the
    /// window took the last ones (so a burst costs one list a frame), and on `quiet` in any case
    /// (a paused target shows what is in flight).
    fn hand_over_unfinished(&mut self, quiet: bool) {
        if !self.unfinished_changed {
            return;
        }
        let (in_flight, abandoned) = (&self.in_flight, &self.abandoned);
        let mut handed = false;
        let wake = self.handoff.with(|p| {
            if p.unfinished.is_none() || quiet {
                let mut rows: Vec<PendingRow> = abandoned
                    .iter()
                    .chain(in_flight.values())
                    .cloned()
                    .collect();
                rows.sort_by_key(|r| r.index);
                p.unfinished = Some(rows);
                handed = true;
            }
        });
        if handed {
            self.unfinished_changed = false;
            if wake {
                (self.notify)();
            }
        }
    }

    /// Writes `m` to the recording; whether it took it as a dispatch.
    fn record(&mut self, m: &ToDebugger) -> bool {
        let is_dispatch = matches!(m, ToDebugger::Received(_) | ToDebugger::Dispatch { .. });
        if !self.recording {
            if is_dispatch && self.recording_started {
                self.counters.not_kept.fetch_add(1, Ordering::Relaxed);
            }
            return false;
        }
        let result = {
            let mut guard = self.store.lock().unwrap_or_else(PoisonError::into_inner);
            guard.as_mut().map(|s| s.take_ref(m))
        };
        match result {
            Some(Ok(stored)) => {
                self.recording_started |= stored;
                stored
            }
            Some(Err(e)) => {
                self.recording = false;
                if is_dispatch && self.recording_started {
                    self.counters.not_kept.fetch_add(1, Ordering::Relaxed);
                }
                self.handoff.with(|p| p.record_error = Some(e.to_string()));
                false
            }
            None => {
                self.recording = false;
                false
            }
        }
    }

    /// One dispatch: its row and its recent entry wait for the window.
    fn dispatch(&mut self, row: &DispatchRow, index: u64, stored: bool, recent: Recent) -> bool {
        self.frame = row.frame;
        if let Some(want) = self.next_index
            && index > want
        {
            self.counters
                .gaps
                .fetch_add(index - want, Ordering::Relaxed);
        }
        self.next_index = Some(index.wrapping_add(1));
        let pos = self.n;
        self.n += 1;
        let first_stored = stored && !std::mem::replace(&mut self.store_first_sent, stored);
        let wake = self.handoff.with(|p| {
            if first_stored {
                p.batch.store_first = Some(pos);
            }
            p.batch.rows.push(row);
            p.batch.keep_recent(recent);
        });
        // Counted once recorded and handed over: a thread that reads the count (Acquire) finds
        // the dispatch in the recording and its row waiting for the window.
        self.counters.received.fetch_add(1, Ordering::Release);
        wake
    }
}
