//! [`Tap`]: what an emulator wraps around [`Engine::dispatch`] and [`Engine::apply`] so that a
//! debugger can attach while the game runs.
//!
//! Detached, a tap costs one relaxed atomic load per dispatch and per event, and nothing else: no
//! lock, no clone, no counter. Attached, it writes each dispatch's access lists as rows and clones
//! the rest of its input and report (and each event's report) into a bounded queue that a writer thread drains to the debugger; when the
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
//! An emulator that runs its own dispatches calls [`Tap::before_prepare`], [`Tap::after_prepare`]
//! and [`Tap::after_complete`] around `Engine::prepare` and `Engine::complete`, with many
//! dispatches in flight between (and [`Tap::abandoned`], [`Tap::device_lost`]): the debugger
//! lists each one when it is prepared and gets its report at its complete ([`crate::flight`]).
//!
//! One tap serves one engine, called from the thread that submits its dispatches.
//! The tap never changes what the engine does: the report the emulator gets is the engine's.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::checkpoint::{Copied, Tracker};
use crate::protocol::{
    Breakpoints, PauseReason, ResumeReason, SNAPSHOT_EVENTS_PER_FRAME, SharedMappings, Snapshot,
    ToDebugger,
};
use crate::server::Server;
use crate::shared::{Control, Outgoing, Queue, Release, Shared, TapConfig, TapError, lock};
use crate::snapshot::snapshot_of;
use crate::wire::EncodedDispatch;
use dispatchscope_core::backend::Backend;
use dispatchscope_core::engine::{Engine, EngineError};
use dispatchscope_core::input::DispatchInput;
use dispatchscope_core::input::Event;
use dispatchscope_core::instrument::LaneSelection;
use dispatchscope_core::report::{DispatchReport, EventReport, InstrumentedReport, Mode};
use dispatchscope_formats::sample::Contents;

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
    /// Dispatch slots the writer gave back, ready for the game thread to fill without
    /// allocating.
    pub spare_slots: usize,
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
            spare_slots: c.link.as_ref().map_or(0, |l| l.queue.spare_len()),
        }
    }

    /// Takes the lines the tap logged since the last call: attaches, detaches, refusals, timeouts.
    pub fn take_notices(&self) -> Vec<String> {
        self.shared.take_notices()
    }

    /// Takes the debugger's latest lane request, as [`Tap::take_lane_request`] does.
    pub fn take_lane_request(&self) -> Option<Option<LaneSelection>> {
        self.shared.take_lane_request()
    }
}

/// The emulator's side of live debugging; see the module docs.
pub struct Tap {
    shared: Arc<Shared>,
    server: Option<Server>,
    /// What this session was sent of the engine's state (`checkpoint.rs`).
    checkpoints: Tracker,
    /// The mapping lists of the last dispatch sent, shared with the next ones while they stay
    /// the same ([`EncodedDispatch::of_into_sharing`]).
    last_mappings: Option<Arc<SharedMappings>>,
    /// The dispatches in flight whose prepare a debugger saw, oldest first, each with the session
    /// that saw it: a dispatch is sent only if its beginning was seen (its snapshot and pauses), as
    /// [`Tap::dispatch`] does, and only to that session. Many may be in flight
    /// (`Engine::prepare` … `Engine::complete`, completed in the order prepared); a prepare that
    /// failed leaves its entry until the next prepare takes its index.
    seen: std::collections::VecDeque<(u64, u64)>,
    /// The session's queue, kept from the last attached prepare, so that [`Tap::after_prepare`]
    /// pushes without the control lock (a closed queue takes nothing).
    link_queue: Option<(u64, Arc<Queue>)>,
    /// The program and label of the dispatch being prepared, for its flight message.
    upcoming: (u64, Arc<str>),
    /// Each program's last label, shared with the flight messages (no allocation while a
    /// program's label stays the same).
    labels: std::collections::HashMap<u64, Arc<str>>,
    /// Time the game thread spent paused inside the attached path's current call, left out of
    /// [`Shared::tap_ns`].
    paused: Duration,
}

impl Tap {
    /// A tap that never listens, so never attaches: what an emulator runs with live debugging off
    /// (and what the detached benchmark measures).
    pub fn detached() -> Self {
        Self {
            shared: Arc::new(Shared::new(TapConfig::default())),
            server: None,
            checkpoints: Tracker::new(0.0),
            last_mappings: None,
            seen: std::collections::VecDeque::new(),
            link_queue: None,
            upcoming: (0, Arc::from("")),
            labels: std::collections::HashMap::new(),
            paused: Duration::ZERO,
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
        let checkpoints = Tracker::new(config.checkpoint_share);
        let shared = Arc::new(Shared::new(config));
        let server = Server::start(Arc::clone(&shared))?;
        Ok(Self {
            shared,
            server: Some(server),
            checkpoints,
            last_mappings: None,
            seen: std::collections::VecDeque::new(),
            link_queue: None,
            upcoming: (0, Arc::from("")),
            labels: std::collections::HashMap::new(),
            paused: Duration::ZERO,
        })
    }

    /// The address it listens on (with the port the system chose for port 0).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.server.as_ref().map(Server::local_addr)
    }

    /// Tells the tap the machine code of the program at `address` (its bytes from there), so that
    /// an attached debugger gets it before the first dispatch that names the program
    /// ([`ToDebugger::Program`], once a session). A second call for one address replaces the code.
    /// Detached, this costs a lock and a map insert, once per program.
    pub fn add_program(&self, address: u64, code: &[u8]) {
        lock(&self.shared.programs).insert(address, Arc::from(code));
    }

    /// Takes the lanes an attached debugger asked to capture ([`crate::ToTarget::CaptureLanes`])
    /// since the last call: `None` when nothing changed, `Some(Some(lanes))` for a new selection,
    /// `Some(None)` when the debugger (or its session's end) gave the choice back to the emulator.
    /// An emulator calls it once before each instrumented pass and keeps what it got; it costs
    /// one uncontended lock.
    pub fn take_lane_request(&self) -> Option<Option<LaneSelection>> {
        self.shared.take_lane_request()
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
        self.dispatch_attached(engine, input, |e, i| e.dispatch(i))
    }

    /// [`Tap::dispatch`] for a dispatch the emulator runs itself: `run` is called once, with the
    /// engine and `input`, where [`Tap::dispatch`] calls [`Engine::dispatch`], and its report is
    /// what an attached debugger sees (for a pass run on a device, the engine's report with the
    /// instrumented section the device's buffers gave, issue 14). Pauses, steps, breakpoints and
    /// snapshots are those of [`Tap::dispatch`]; `run`'s error is sent as the dispatch's failure.
    /// Detached, it costs what [`Tap::dispatch`] does: one relaxed load, then `run`.
    /// (Issue 14's demo runs its device pass through it, `app/src/pass_demo.rs`.)
    pub fn dispatch_with<B: Backend, E: std::fmt::Display + 'static>(
        &mut self,
        engine: &mut Engine<B>,
        input: &DispatchInput,
        run: impl FnOnce(&mut Engine<B>, &DispatchInput) -> Result<DispatchReport, E>,
    ) -> Result<DispatchReport, E> {
        if !self.is_attached() {
            return run(engine, input);
        }
        self.dispatch_attached(engine, input, run)
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
                    queue.push(Outgoing::Message(ToDebugger::Event {
                        report: Box::new((*report).clone()),
                    }));
                }
                Err(e) => {
                    queue.push(Outgoing::Message(ToDebugger::EventFailed {
                        event: Box::new(event.clone()),
                        message: e.to_string(),
                    }));
                }
            }
        }
        result
    }

    /// The attached path of [`Tap::dispatch`] and [`Tap::dispatch_with`]: `run` is the dispatch.
    #[cold]
    #[inline(never)]
    fn dispatch_attached<B: Backend, E: std::fmt::Display + 'static>(
        &mut self,
        engine: &mut Engine<B>,
        input: &DispatchInput,
        run: impl FnOnce(&mut Engine<B>, &DispatchInput) -> Result<DispatchReport, E>,
    ) -> Result<DispatchReport, E> {
        let started = Instant::now();
        let index = engine.next_dispatch();
        let linked = self.before_attached(engine, input, index);
        self.charge(started);
        let Some(session) = linked else {
            return run(engine, input);
        };
        let mut result = run(engine, input);
        let started = Instant::now();
        self.after_attached(engine, input, index, session, &mut result);
        self.charge(started);
        result
    }

    /// Adds the attached path's time since `started`, pauses left out, to the figure a debugger
    /// reads ([`crate::protocol::Stats::tap_ns_per_dispatch`]).
    fn charge(&mut self, started: Instant) {
        let spent = started
            .elapsed()
            .saturating_sub(std::mem::take(&mut self.paused));
        self.shared
            .tap_ns
            .fetch_add(spent.as_nanos() as u64, Ordering::Relaxed);
    }

    /// After [`Engine::prepare`] handed out `prepared`: an attached debugger that saw its
    /// [`Tap::before_prepare`] learns it is in flight ([`ToDebugger::Prepared`], its index, mode,
    /// program and label): one push onto the session's queue, dropped and counted when the queue
    /// is full, as a dispatch is. Many dispatches may be in flight; each one's report goes at its
    /// [`Tap::after_complete`]. Detached, one field read.
    #[inline]
    pub fn after_prepare(&mut self, prepared: &dispatchscope_core::engine::Prepared) {
        if self
            .seen
            .back()
            .is_some_and(|&(index, _)| index == prepared.index)
        {
            self.after_prepare_attached(prepared);
        }
    }

    #[cold]
    #[inline(never)]
    fn after_prepare_attached(&mut self, prepared: &dispatchscope_core::engine::Prepared) {
        let started = Instant::now();
        if let (Some(&(_, session)), Some((linked, queue))) = (self.seen.back(), &self.link_queue)
            && session == *linked
        {
            let (program, label) = &self.upcoming;
            queue.push(Outgoing::Flight(crate::flight::FlightNote::Prepared {
                index: prepared.index,
                mode: prepared.mode,
                program: *program,
                label: Arc::clone(label),
            }));
        }
        self.charge(started);
    }

    /// After [`Engine::abandon`]: dispatch `index` will not complete. An attached debugger that
    /// saw it prepared learns so ([`ToDebugger::Abandoned`], never dropped). Detached, one field
    /// read.
    pub fn abandoned(&mut self, index: u64) {
        let Some(at) = self.seen.iter().position(|&(i, _)| i == index) else {
            return;
        };
        let Some((_, session)) = self.seen.remove(at) else {
            return;
        };
        if let Some((linked, queue)) = &self.link_queue
            && *linked == session
        {
            queue.push_control_item(Outgoing::Flight(crate::flight::FlightNote::Abandoned {
                index,
            }));
        }
    }

    /// After [`Engine::device_lost`]: the engine's loss report goes to the attached debugger (never
    /// dropped), and to every debugger that attaches later, first thing; the dispatches in flight
    /// are forgotten (the report names them).
    pub fn device_lost(&mut self, report: &dispatchscope_core::report::DeviceLossReport) {
        self.seen.clear();
        let c = lock(&self.shared.control);
        *lock(&self.shared.loss) = Some(Arc::new(report.clone()));
        if let Some(link) = &c.link {
            link.queue
                .push_control(ToDebugger::DeviceLost(Box::new(report.clone())));
        }
    }

    /// For a dispatch the emulator runs itself through [`Engine::prepare`] and
    /// [`Engine::complete`]: call it before prepare (and [`Tap::after_prepare`] after it). A pause
    /// the debugger asked for (a step, a breakpoint known beforehand) stops the calling thread
    /// here, before anything of the dispatch happened. With many dispatches in flight a step of n
    /// counts n reports ([`Tap::after_complete`]) and pauses at the first prepare after them: the
    /// dispatches already prepared complete as the emulator completes them, and a debugger lists
    /// them in flight meanwhile. Detached, one relaxed load.
    #[inline]
    pub fn before_prepare<B: Backend>(&mut self, engine: &Engine<B>, input: &DispatchInput) {
        if self.is_attached() {
            self.before_prepare_attached(engine, input);
        }
    }

    #[cold]
    #[inline(never)]
    fn before_prepare_attached<B: Backend>(&mut self, engine: &Engine<B>, input: &DispatchInput) {
        let started = Instant::now();
        let index = engine.next_dispatch();
        if let Some(session) = self.before_attached(engine, input, index) {
            // A prepare that failed left its entry: this one takes its index.
            while self.seen.back().is_some_and(|&(i, _)| i >= index) {
                self.seen.pop_back();
            }
            self.seen.push_back((index, session));
            let label = match self.labels.get(&input.program) {
                Some(l) if **l == *input.label => Arc::clone(l),
                _ => {
                    if self.labels.len() >= MAX_LABELS_KEPT {
                        self.labels.clear();
                    }
                    let l: Arc<str> = Arc::from(input.label.as_str());
                    self.labels.insert(input.program, Arc::clone(&l));
                    l
                }
            };
            self.upcoming = (input.program, label);
        }
        self.charge(started);
    }

    /// After [`Engine::complete`] (or its failure) of dispatch `index`: the report goes to the
    /// attached debugger that saw its prepare, and a breakpoint on what it shows (a refusal, an
    /// escape) stops the calling thread here. Detached, one field read.
    #[inline]
    pub fn after_complete<B: Backend, E: std::fmt::Display + 'static>(
        &mut self,
        engine: &Engine<B>,
        input: &DispatchInput,
        index: u64,
        result: &mut Result<DispatchReport, E>,
    ) {
        if !self.seen.is_empty() {
            self.after_complete_seen(engine, input, index, result);
        }
    }

    #[cold]
    #[inline(never)]
    fn after_complete_seen<B: Backend, E: std::fmt::Display + 'static>(
        &mut self,
        engine: &Engine<B>,
        input: &DispatchInput,
        index: u64,
        result: &mut Result<DispatchReport, E>,
    ) {
        // Dispatches complete in the order prepared: an entry older than `index` is one whose
        // prepare failed or that left flight unseen.
        while self.seen.front().is_some_and(|&(i, _)| i < index) {
            self.seen.pop_front();
        }
        let Some(&(i, session)) = self.seen.front() else {
            return;
        };
        if i != index {
            return;
        }
        self.seen.pop_front();
        if self.is_attached() {
            let started = Instant::now();
            self.after_attached(engine, input, index, session, result);
            self.charge(started);
        }
    }

    /// Before the dispatch: a snapshot if one was asked for, then the pauses known beforehand.
    /// Returns the session of the debugger linked (the dispatch is then sent to it after it ran).
    #[cold]
    #[inline(never)]
    fn before_attached<B: Backend>(
        &mut self,
        engine: &Engine<B>,
        input: &DispatchInput,
        index: u64,
    ) -> Option<u64> {
        let shared = Arc::clone(&self.shared);
        let mut c = lock(&shared.control);
        let link = c.link.as_ref()?;
        let session = link.id;
        if self
            .link_queue
            .as_ref()
            .is_none_or(|(id, _)| *id != session)
        {
            self.link_queue = Some((session, Arc::clone(&link.queue)));
        }
        if c.snapshot_wanted {
            c.snapshot_wanted = false;
            send_snapshot(&c, engine);
            // A recorder begins at the snapshot: the states after it go whole, so that the deltas
            // that follow have their base in its file.
            self.checkpoints.resend();
        }
        let read = reader(engine);
        answer_reads(&mut c, &read);
        if let Some(why) = pause_before(&c, index, input) {
            let paused = Instant::now();
            drop(pause(&shared, c, index, why, Some(input), &read));
            self.paused += paused.elapsed();
        }
        Some(session)
    }

    /// After the dispatch: its report (or failure) to the debugger of `session`, the one that saw
    /// it begin, then a pause it asked for.
    #[cold]
    #[inline(never)]
    fn after_attached<B: Backend, E: std::fmt::Display + 'static>(
        &mut self,
        engine: &Engine<B>,
        input: &DispatchInput,
        index: u64,
        session: u64,
        result: &mut Result<DispatchReport, E>,
    ) {
        let shared = Arc::clone(&self.shared);
        let queue = lock(&shared.control)
            .link
            .as_ref()
            .filter(|l| l.id == session)
            .map(|l| (Arc::clone(&l.queue), l.id));
        let Some((queue, session)) = queue else {
            return;
        };
        shared.dispatches.fetch_add(1, Ordering::Relaxed);
        match result {
            Ok(report) => {
                // The access lists go as rows written here; the rest is copied into a slot the
                // writer gave back, over the last dispatch it held (wire.rs).
                let streamed = shared.config.streamed_accesses;
                let slot = match queue.spare_slot() {
                    Some(mut slot) => {
                        slot.refill(index, input, report, streamed, &mut self.last_mappings);
                        slot
                    }
                    None => Box::new(EncodedDispatch::of_into_sharing(
                        index,
                        input,
                        report,
                        streamed,
                        Vec::new(),
                        &mut self.last_mappings,
                    )),
                };
                let item = Outgoing::Dispatch(slot);
                self.queue_dispatch(&queue, session, engine, report, index, item);
                let mut c = lock(&shared.control);
                if let Some((left, _)) = c.steps.as_mut() {
                    *left = left.saturating_sub(1);
                }
                let read = reader(engine);
                answer_reads(&mut c, &read);
                if let Some(why) = pause_after(&c.breakpoints, report) {
                    let paused = Instant::now();
                    drop(pause(&shared, c, index + 1, why, None, &read));
                    self.paused += paused.elapsed();
                }
            }
            Err(e) => {
                queue.push(Outgoing::Message(ToDebugger::DispatchFailed {
                    index,
                    program: input.program,
                    message: e.to_string(),
                    kind: crate::protocol::failure_kind_of(&*e),
                }));
            }
        }
    }
}

impl Tap {
    /// Queues an attached dispatch, and with it (as one item) a copy of the engine state it left
    /// when that state changed since the state last queued this session (`checkpoint.rs`).
    fn queue_dispatch<B: Backend>(
        &mut self,
        queue: &Queue,
        session: u64,
        engine: &Engine<B>,
        report: &DispatchReport,
        index: u64,
        item: Outgoing,
    ) {
        if queue.take_want_state() {
            self.checkpoints.resend();
        }
        match self.checkpoints.copy(session, engine, report, index) {
            None => {
                queue.push(item);
            }
            Some(copy) => {
                let changes = engine.memory().state_changes();
                let copy = Box::new(copy);
                let flags = (
                    matches!(copy.memory, Some(Copied::State(_))),
                    matches!(copy.table, Some(Copied::State(_))),
                );
                if queue.push_with_state(item, copy) {
                    self.checkpoints.queued_parts(flags, changes);
                }
            }
        }
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            server.stop();
        }
    }
}

/// Programs whose labels a tap keeps for its flight messages; past it the map starts again.
const MAX_LABELS_KEPT: usize = 4096;

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
    // An emulator's own pass has no access list: its escapes are those its instrumented buffer
    // counted (the report's section), when it ran the instrumented variant.
    let escapes = r.escapes.len().max(
        r.instrumented
            .as_ref()
            .map_or(0, InstrumentedReport::escapes),
    );
    if b.escape && escapes > 0 {
        return Some(PauseReason::Escape {
            dispatch: r.index,
            escapes,
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

/// How the game's thread reads guest bytes for a debugger: the engine's view (the emulator's own
/// pages in host mode, never a crash on a page the process cannot read).
type ReadGuest<'e> = dyn Fn(u64, &mut [u8]) -> Result<(), String> + 'e;

fn reader<B: Backend>(engine: &Engine<B>) -> impl Fn(u64, &mut [u8]) -> Result<(), String> + '_ {
    |address, out| engine.read_guest(address, out).map_err(|e| e.to_string())
}

/// Answers the debugger's pending reads ([`crate::ToTarget::ReadMemory`]) on the game's thread.
fn answer_reads(c: &mut Control, read: &ReadGuest<'_>) {
    if c.memory_reads.is_empty() {
        return;
    }
    let reads = std::mem::take(&mut c.memory_reads);
    let Some(link) = &c.link else { return };
    for (id, address, len) in reads {
        let mut bytes = vec![0; len as usize];
        let answer = match read(address, &mut bytes) {
            Ok(()) => ToDebugger::Memory {
                id,
                contents: Some(Contents { address, bytes }),
                error: None,
            },
            Err(e) => ToDebugger::Memory {
                id,
                contents: None,
                error: Some(format!("{len} bytes at {address:#x}: {e}")),
            },
        };
        link.queue.push_control(answer);
    }
}

/// Pauses the game thread before dispatch `next_dispatch` until the debugger releases it, detaches,
/// dies, or stays silent for the pause timeout; reads the debugger asks for meanwhile are answered
/// with `read`.
fn pause<'a>(
    shared: &'a Shared,
    mut c: MutexGuard<'a, Control>,
    next_dispatch: u64,
    why: PauseReason,
    upcoming: Option<&DispatchInput>,
    read: &ReadGuest<'_>,
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
        answer_reads(&mut c, read);
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
