//! The target's listener: accepts debuggers, shakes hands, and runs one session at a time.
//!
//! Threads: one accept thread for the tap's life, and for each session a reader thread (commands,
//! heartbeats, the silence timeout) and a writer thread (drains the queue to the socket, sends
//! [`Stats`]). The handshake runs on the accept thread, bounded by the handshake timeout.
//! A session's threads end with it and are joined; none of them ever blocks the game thread: the
//! game only takes the control lock, which no thread holds across socket I/O.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use std::sync::Mutex;

use crate::protocol::{
    DebuggerHello, FrameReader, MAX_COMMAND_FRAME_BYTES, MAX_FRAME_BYTES, MAX_MEMORY_READ,
    MAX_MEMORY_READS_PENDING, PROTOCOL, ProtocolError, RefusalReason, Stats, TargetHello,
    ToDebugger, ToTarget, VERSION, decode, encode_frame_into, hello_header, tokens_match,
};
use crate::shared::{DetailRing, Link, Outgoing, Popped, Queue, Release, Shared, TapError, lock};
use crate::wire::Encoder;

/// How often a session's reader wakes to look at the clock when nothing arrives.
const READ_TICK: Duration = Duration::from_millis(50);

/// A running listener.
pub(crate) struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
    shared: Arc<Shared>,
}

impl Server {
    pub(crate) fn start(shared: Arc<Shared>) -> Result<Self, TapError> {
        let want = shared.config.listen;
        let listener =
            TcpListener::bind(want).map_err(|error| TapError::Bind { addr: want, error })?;
        let addr = listener
            .local_addr()
            .map_err(|error| TapError::Bind { addr: want, error })?;
        let stop = Arc::new(AtomicBool::new(false));
        let accept = {
            let (shared, stop) = (Arc::clone(&shared), Arc::clone(&stop));
            std::thread::Builder::new()
                .name("ds-live-accept".into())
                .spawn(move || accept_loop(&listener, &shared, &stop))
                .map_err(|error| TapError::Thread {
                    what: "accept",
                    error,
                })?
        };
        Ok(Self {
            addr,
            stop,
            accept: Some(accept),
            shared,
        })
    }

    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Ends the session, stops accepting and joins every thread.
    pub(crate) fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let id = lock(&self.shared.control).link.as_ref().map(|l| {
            let message = "the target is shutting down".to_owned();
            l.queue.push_control(ToDebugger::Refused {
                reason: RefusalReason::ShuttingDown,
                message,
            });
            l.id
        });
        if let Some(id) = id {
            self.shared.end_session(id, "the target is shutting down");
        }
        // Wake the accept call with a connection of our own.
        let mut wake = self.addr;
        if wake.ip().is_unspecified() {
            wake.set_ip(if wake.is_ipv4() {
                [127, 0, 0, 1].into()
            } else {
                std::net::Ipv6Addr::LOCALHOST.into()
            });
        }
        let _ = TcpStream::connect_timeout(&wake, Duration::from_secs(1));
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>, stop: &AtomicBool) {
    let mut sessions: Vec<JoinHandle<()>> = Vec::new();
    let next_id = AtomicU64::new(1);
    for conn in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        // Join the sessions that have ended.
        let (done, live): (Vec<_>, Vec<_>) = sessions.drain(..).partition(|h| h.is_finished());
        sessions = live;
        for h in done {
            let _ = h.join();
        }
        match conn {
            Ok(stream) => {
                let id = next_id.fetch_add(1, Ordering::Relaxed);
                if let Some(h) = handshake(stream, shared, id) {
                    sessions.push(h);
                }
            }
            Err(e) => {
                shared.notice(format!("accept failed: {e}"));
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    for h in sessions {
        let _ = h.join();
    }
}

/// Sends a refusal, lets the peer read it, and closes.
fn refuse(
    mut stream: TcpStream,
    shared: &Shared,
    peer: SocketAddr,
    reason: RefusalReason,
    message: String,
) {
    shared.notice(format!("refused debugger {peer}: {message}"));
    let mut frame = Vec::new();
    if encode_frame_into(
        &ToDebugger::Refused { reason, message },
        MAX_FRAME_BYTES,
        &mut frame,
    )
    .is_ok()
    {
        let _ = stream.write_all(&frame);
    }
    linger_close(stream);
}

/// Half-closes, then reads what the peer still sends for a moment, so that closing does not reset
/// the connection before the peer has read the last frame.
fn linger_close(mut stream: TcpStream) {
    let _ = stream.shutdown(Shutdown::Write);
    let _ = stream.set_read_timeout(Some(Duration::from_millis(50)));
    let deadline = Instant::now() + Duration::from_millis(250);
    let mut sink = [0u8; 4096];
    let mut total = 0usize;
    while Instant::now() < deadline && total < (1 << 20) {
        match stream.read(&mut sink) {
            Ok(0) => break,
            Ok(n) => total += n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
}

fn refusal_for(e: &ProtocolError) -> RefusalReason {
    match e {
        ProtocolError::Oversize { .. } => RefusalReason::Oversize,
        _ => RefusalReason::Malformed,
    }
}

/// The handshake, on the accept thread; on success, starts the session's threads.
fn handshake(mut stream: TcpStream, shared: &Arc<Shared>, id: u64) -> Option<JoinHandle<()>> {
    let cfg = &shared.config;
    let peer = stream.peer_addr().ok()?;
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(Some(cfg.handshake_timeout));
    let _ = stream.set_read_timeout(Some(READ_TICK));
    let hello = TargetHello {
        protocol: PROTOCOL.into(),
        version: VERSION,
        target: cfg.target_name.clone(),
        pid: std::process::id(),
        token_required: cfg.token.is_some(),
    };
    let mut frame = Vec::new();
    if encode_frame_into(&ToDebugger::Hello(hello), MAX_FRAME_BYTES, &mut frame).is_err()
        || stream.write_all(&frame).is_err()
    {
        return None;
    }
    let hello = match receive_hello(&mut stream, shared, peer).and_then(|h| {
        check_token(cfg.token.as_deref(), h.token.as_deref())?;
        Ok(h)
    }) {
        Ok(h) => h,
        Err(Some(Refused(reason, message))) => {
            refuse(stream, shared, peer, reason, message);
            return None;
        }
        Err(None) => return None,
    };
    let queue = match register(shared, &hello, id, peer) {
        Ok(q) => q,
        Err(Refused(reason, message)) => {
            refuse(stream, shared, peer, reason, message);
            return None;
        }
    };
    let client = if hello.client.is_empty() {
        "a debugger".to_owned()
    } else {
        hello.client.clone()
    };
    shared.notice(format!("debugger {peer} attached ({client}, session {id})"));
    let session_shared = Arc::clone(shared);
    let spawned = std::thread::Builder::new()
        .name("ds-live-read".into())
        .spawn(move || session(stream, &session_shared, id, queue));
    match spawned {
        Ok(h) => Some(h),
        Err(e) => {
            shared.end_session(id, &format!("cannot start its thread: {e}"));
            None
        }
    }
}

/// Why a handshake is refused: the reason the debugger is told, and the sentence.
struct Refused(RefusalReason, String);

/// Reads the debugger's hello within the handshake timeout and checks its header (type, protocol,
/// version) before its body. `Err(None)` when the peer closed first (nothing to tell it).
fn receive_hello(
    stream: &mut TcpStream,
    shared: &Shared,
    peer: SocketAddr,
) -> Result<DebuggerHello, Option<Refused>> {
    let cfg = &shared.config;
    let deadline = Instant::now() + cfg.handshake_timeout;
    let mut reader = FrameReader::new(MAX_COMMAND_FRAME_BYTES);
    let refused = |reason, message: String| Some(Refused(reason, message));
    let payload = loop {
        match reader.read_frame(stream) {
            Ok(Some(p)) => break p,
            Ok(None) if Instant::now() < deadline => {}
            Ok(None) => {
                let ms = cfg.handshake_timeout.as_millis();
                return Err(refused(
                    RefusalReason::Timeout,
                    format!("no hello within {ms} ms"),
                ));
            }
            Err(ProtocolError::Closed { .. }) => {
                shared.notice(format!(
                    "debugger {peer} closed the connection before its hello"
                ));
                return Err(None);
            }
            Err(e) => {
                return Err(refused(
                    refusal_for(&e),
                    format!("the hello frame was refused: {e}"),
                ));
            }
        }
    };
    let header = hello_header(&payload).map_err(|e| {
        refused(
            RefusalReason::Malformed,
            format!("the hello frame was refused: {e}"),
        )
    })?;
    if header.kind.as_deref() != Some("hello") {
        let kind = header.kind.unwrap_or_else(|| "no type".into());
        return Err(refused(
            RefusalReason::NotHello,
            format!("the first frame must be a hello, not {kind:?}"),
        ));
    }
    if header.protocol.as_deref() != Some(PROTOCOL) {
        let p = header.protocol.unwrap_or_else(|| "none".into());
        return Err(refused(
            RefusalReason::Protocol,
            format!("the hello names protocol {p:?}, not {PROTOCOL:?}"),
        ));
    }
    if header.version != Some(u64::from(VERSION)) {
        let v = header
            .version
            .map_or_else(|| "no version".to_owned(), |v| format!("version {v}"));
        return Err(refused(
            RefusalReason::Version,
            format!(
                "version mismatch: this target speaks {PROTOCOL} version {VERSION}, the debugger speaks {v}; attach with a dispatchscope of the same protocol version"
            ),
        ));
    }
    match decode::<ToTarget>(&payload) {
        Ok(ToTarget::Hello(h)) => Ok(h),
        Ok(_) => Err(refused(
            RefusalReason::NotHello,
            "the first frame must be a hello".into(),
        )),
        Err(e) => Err(refused(
            RefusalReason::Malformed,
            format!("the hello frame was refused: {e}"),
        )),
    }
}

/// The token rule: a target that has a token admits only a debugger that presents it.
fn check_token(expected: Option<&str>, given: Option<&str>) -> Result<(), Option<Refused>> {
    match (expected, given) {
        (None, _) => Ok(()),
        (Some(_), None) => Err(Some(Refused(
            RefusalReason::Token,
            "this target requires a token (--token) and the debugger gave none".into(),
        ))),
        (Some(e), Some(t)) if !tokens_match(e, t) => {
            Err(Some(Refused(RefusalReason::Token, "wrong token".into())))
        }
        (Some(_), Some(_)) => Ok(()),
    }
}

/// Links session `id` to the game thread, unless another debugger is attached.
fn register(
    shared: &Shared,
    hello: &DebuggerHello,
    id: u64,
    peer: SocketAddr,
) -> Result<Arc<Queue>, Refused> {
    let queue = Arc::new(Queue::new(shared.config.queue_capacity));
    let mut c = lock(&shared.control);
    if let Some(other) = c.link.as_ref().map(|l| l.peer) {
        return Err(Refused(
            RefusalReason::Busy,
            format!("another debugger ({other}) is attached"),
        ));
    }
    c.disarm();
    c.snapshot_wanted = hello.snapshot;
    c.link = Some(Link {
        id,
        queue: Arc::clone(&queue),
        last_heard: Instant::now(),
        peer,
    });
    queue.push_control(ToDebugger::Attached { session: id });
    // A device lost before this debugger attached: it learns of it first (under the control
    // lock, which the tap's `device_lost` holds while it keeps the report).
    if let Some(loss) = lock(&shared.loss).as_ref() {
        queue.push_control(ToDebugger::DeviceLost(Box::new((**loss).clone())));
    }
    shared.dispatches.store(0, Ordering::Relaxed);
    shared.events.store(0, Ordering::Relaxed);
    shared.tap_ns.store(0, Ordering::Relaxed);
    shared.attached.store(true, Ordering::Relaxed);
    Ok(queue)
}

/// One session: starts the writer, reads commands until the session ends, then joins the writer.
fn session(stream: TcpStream, shared: &Arc<Shared>, id: u64, queue: Arc<Queue>) {
    let details = Arc::new(Mutex::new(DetailRing::with_max_bytes(
        shared.config.detail_bytes,
    )));
    let writer = stream.try_clone().ok().and_then(|w| {
        let (shared, queue, details) =
            (Arc::clone(shared), Arc::clone(&queue), Arc::clone(&details));
        let (done_tx, done_rx) = mpsc::channel::<()>();
        std::thread::Builder::new()
            .name("ds-live-write".into())
            .spawn(move || {
                write_loop(w, &shared, id, &queue, &details);
                let _ = done_tx.send(());
            })
            .ok()
            .map(|h| (h, done_rx))
    });
    let Some((writer, writer_done)) = writer else {
        shared.end_session(id, "cannot start its writer thread");
        return;
    };
    let why = read_loop(&stream, shared, id, &queue, &details);
    shared.end_session(id, &why);
    // The writer sends what is queued (a refusal last), then stops; a debugger that reads nothing
    // does not hold it: the socket closes under it.
    if writer_done
        .recv_timeout(Duration::from_millis(500))
        .is_err()
    {
        let _ = stream.shutdown(Shutdown::Both);
    }
    let _ = writer.join();
    linger_close(stream);
}

/// Reads commands until the session ends; returns why it ended.
fn read_loop(
    stream: &TcpStream,
    shared: &Shared,
    id: u64,
    queue: &Queue,
    details: &Mutex<DetailRing>,
) -> String {
    let mut stream_r = stream;
    let _ = stream.set_read_timeout(Some(READ_TICK));
    let mut reader = FrameReader::new(MAX_COMMAND_FRAME_BYTES);
    let session_timeout = shared.config.session_timeout;
    let mut last_heard = Instant::now();
    loop {
        if lock(&shared.control)
            .link
            .as_ref()
            .is_none_or(|l| l.id != id)
        {
            return "its session was ended by the target".into();
        }
        let payload = match reader.read_frame(&mut stream_r) {
            Ok(Some(p)) => p,
            Ok(None) => {
                if last_heard.elapsed() >= session_timeout {
                    return format!("it said nothing for {} s", last_heard.elapsed().as_secs());
                }
                continue;
            }
            Err(ProtocolError::Closed { mid_frame }) => {
                return if mid_frame {
                    "it closed the connection in the middle of a frame".into()
                } else {
                    "it closed the connection".into()
                };
            }
            Err(e @ (ProtocolError::Oversize { .. } | ProtocolError::Malformed { .. })) => {
                let message = format!("frame refused: {e}");
                queue.push_control(ToDebugger::Refused {
                    reason: refusal_for(&e),
                    message: message.clone(),
                });
                return message;
            }
            Err(e) => return e.to_string(),
        };
        last_heard = Instant::now();
        let command = match decode::<ToTarget>(&payload) {
            Ok(c) => c,
            Err(e) => {
                let message = format!("frame refused: {e}");
                queue.push_control(ToDebugger::Refused {
                    reason: RefusalReason::Malformed,
                    message: message.clone(),
                });
                return message;
            }
        };
        let mut c = lock(&shared.control);
        match c.link.as_mut() {
            Some(l) if l.id == id => l.last_heard = last_heard,
            _ => return "its session was ended by the target".into(),
        }
        // Paused for this session (not for one that just ended).
        let paused = c.paused_for == Some(id);
        match command {
            ToTarget::Hello(_) => {
                drop(c);
                let message = "a second hello in one session".to_owned();
                queue.push_control(ToDebugger::Refused {
                    reason: RefusalReason::NotHello,
                    message: message.clone(),
                });
                return message;
            }
            ToTarget::Pause => {
                // Already paused and not yet released: nothing to do.
                if !(paused && c.release.is_none()) {
                    c.pause_requested = true;
                }
            }
            ToTarget::Continue => {
                c.pause_requested = false;
                c.steps = None;
                if paused {
                    c.release = Some(Release::Continue);
                }
            }
            ToTarget::Step { n: 0 } => {}
            ToTarget::Step { n } => {
                c.pause_requested = false;
                if paused {
                    c.release = Some(match c.release {
                        Some(Release::Step(k)) => Release::Step(k.saturating_add(n)),
                        _ => Release::Step(n),
                    });
                } else {
                    c.steps = Some(match c.steps {
                        Some((left, size)) if left > 0 => {
                            (left.saturating_add(n), size.saturating_add(n))
                        }
                        _ => (n, n),
                    });
                }
            }
            ToTarget::SetBreakpoints { breakpoints } => c.breakpoints = breakpoints,
            ToTarget::Ping => {}
            ToTarget::Detail { dispatch } => {
                drop(c);
                queue.push_control(lock(details).answer(dispatch));
                continue;
            }
            ToTarget::CaptureLanes { lanes } => {
                c.lanes_chosen = lanes.is_some();
                c.lane_request = Some(lanes);
            }
            ToTarget::ReadMemory { id, address, len } => {
                let refused = if len > MAX_MEMORY_READ {
                    Some(format!(
                        "a read of {len} bytes at {address:#x} is longer than the {MAX_MEMORY_READ} bytes one read may take"
                    ))
                } else if c.memory_reads.len() >= MAX_MEMORY_READS_PENDING {
                    Some(format!(
                        "{MAX_MEMORY_READS_PENDING} reads are waiting for the game's thread (it answers while paused or at its next dispatch)"
                    ))
                } else {
                    c.memory_reads.push((id, address, len));
                    None
                };
                if let Some(error) = refused {
                    drop(c);
                    queue.push_control(ToDebugger::Memory {
                        id,
                        contents: None,
                        error: Some(error),
                    });
                    continue;
                }
            }
            ToTarget::Detach => return "it detached".into(),
        }
        drop(c);
        shared.wake.notify_all();
    }
}

/// Adds program `program`'s code to the frame being built when the tap knows it and this session
/// was not sent it yet (before the first message that names the program); returns the messages
/// added (0 or 1).
fn send_program(
    shared: &Shared,
    program: u64,
    programs_sent: &mut std::collections::HashSet<u64>,
    encoder: &mut Encoder,
    out: &mut Vec<u8>,
) -> u64 {
    if programs_sent.contains(&program) {
        return 0;
    }
    let Some(code) = lock(&shared.programs).get(&program).cloned() else {
        return 0;
    };
    programs_sent.insert(program);
    let code = ToDebugger::Program {
        address: program,
        code: code.to_vec(),
    };
    match encoder.push(code, out, &mut |_, _| {}) {
        Ok(()) => 1,
        Err(e) => {
            shared.notice(format!(
                "the code of program {program:#x} was not sent: {e}"
            ));
            0
        }
    }
}

/// Drains the queue to the socket and sends stats, until the queue closes or the socket fails.
/// Messages go as binary frames ([`crate::wire`]), several to a frame; `attached` and a refusal go
/// as JSON, as in every version.
fn write_loop(
    mut stream: TcpStream,
    shared: &Shared,
    id: u64,
    queue: &Queue,
    details: &Mutex<DetailRing>,
) {
    let interval = shared.config.stats_interval;
    let _ = stream.set_write_timeout(Some(shared.config.session_timeout));
    let mut encoder = Encoder::new(shared.config.streamed_accesses, MAX_FRAME_BYTES);
    // A loopback debugger gets uncompressed bodies: the copy costs less than lz4 (wire.rs).
    encoder.set_compress(!stream.peer_addr().is_ok_and(|a| a.ip().is_loopback()));
    let mut batch = Vec::new();
    let mut out = Vec::with_capacity(1 << 16);
    let mut frame = Vec::new();
    let mut sent = 0u64;
    let mut last_stats = Instant::now();
    let mut last_count = 0u64;
    let mut keep = |dispatch: u64, accesses| lock(details).keep(dispatch, accesses);
    let mut programs_sent = std::collections::HashSet::new();
    // Checkpoints of engine state: a table as a delta against the last one sent (checkpoint.rs).
    let mut states = crate::checkpoint::Writer::default();
    let max_part = (MAX_FRAME_BYTES as usize - 1024) / 2;
    let mut last_dispatch_sent: Option<u64> = None;
    loop {
        let wait = interval
            .saturating_sub(last_stats.elapsed())
            .min(crate::shared::WRITER_TICK);
        let state = queue.pop_all(wait, &mut batch);
        out.clear();
        let mut items = batch.drain(..).peekable();
        while let Some(item) = items.next() {
            let message = match item {
                Outgoing::Message(m) => m,
                Outgoing::State(copy) => {
                    // Sent only after its dispatch; a state whose dispatch was not sent is owed.
                    let c = if last_dispatch_sent == Some(copy.dispatch) {
                        let c = states.message(*copy, max_part);
                        if states.take_want_whole() {
                            queue.want_state();
                        }
                        c
                    } else {
                        states.not_sent();
                        queue.want_state();
                        None
                    };
                    if let Some(c) = c
                        && let Err(e) = encoder.push_checkpoint(&c, &mut out)
                    {
                        shared.notice(format!("a checkpoint was not sent: {e}"));
                        states.not_sent();
                        queue.want_state();
                    }
                    continue;
                }
                Outgoing::Flight(note) => {
                    if let crate::flight::FlightNote::Prepared { program, .. } = &note {
                        sent += send_program(
                            shared,
                            *program,
                            &mut programs_sent,
                            &mut encoder,
                            &mut out,
                        );
                    }
                    match encoder.push_flight(&note, &mut out) {
                        Ok(()) => sent += 1,
                        Err(e) => shared.notice(format!(
                            "dispatch {}'s flight message was not sent: {e}",
                            note.index()
                        )),
                    }
                    continue;
                }
                Outgoing::Dispatch(mut d) => {
                    let index = d.index;
                    sent += send_program(
                        shared,
                        d.input.program,
                        &mut programs_sent,
                        &mut encoder,
                        &mut out,
                    );
                    let pushed = encoder.push_dispatch(&mut d, &mut out, &mut keep);
                    queue.give_back(d);
                    match pushed {
                        Ok(()) => {
                            sent += 1;
                            last_dispatch_sent = Some(index);
                            // A state an unsent dispatch owes is unknown from here.
                            if !matches!(items.peek(), Some(Outgoing::State(_)))
                                && let Some(c) = states.after(index)
                                && encoder.push_checkpoint(&c, &mut out).is_ok()
                            {
                                sent += 1;
                            }
                        }
                        Err(e) => {
                            last_dispatch_sent = None;
                            shared.notice(format!("a dispatch message was not sent: {e}"));
                        }
                    }
                    continue;
                }
            };
            if matches!(
                message,
                ToDebugger::Refused { .. } | ToDebugger::Attached { .. }
            ) {
                encoder.finish_frame(&mut out);
                if encode_frame_into(&message, MAX_FRAME_BYTES, &mut frame).is_ok() {
                    out.extend_from_slice(&frame);
                    sent += 1;
                }
                continue;
            }
            let kind = message.kind();
            match encoder.push(message, &mut out, &mut keep) {
                Ok(()) => sent += 1,
                Err(e) => shared.notice(format!("a {kind} message was not sent: {e}")),
            }
        }
        if last_stats.elapsed() >= interval {
            let elapsed = last_stats.elapsed().as_secs_f64();
            let dispatches = shared.dispatches.load(Ordering::Relaxed);
            let (queued, dropped) = queue.figures();
            let stats = Stats {
                dispatches,
                events: shared.events.load(Ordering::Relaxed),
                dispatches_per_s: (dispatches - last_count.min(dispatches)) as f64
                    / elapsed.max(1e-9),
                sent,
                dropped,
                queued,
                queue_capacity: queue.capacity(),
                paused: lock(&shared.control).paused,
                tap_ns_per_dispatch: shared.tap_ns.load(Ordering::Relaxed) as f64
                    / dispatches.max(1) as f64,
            };
            if encoder
                .push(ToDebugger::Stats(stats), &mut out, &mut keep)
                .is_ok()
            {
                sent += 1;
            }
            last_stats = Instant::now();
            last_count = dispatches;
        }
        encoder.finish_frame(&mut out);
        if !out.is_empty()
            && let Err(e) = stream.write_all(&out)
        {
            shared.end_session(id, &format!("writing to it failed: {e}"));
            let _ = stream.shutdown(Shutdown::Both);
            return;
        }
        if matches!(state, Popped::Closed) {
            let _ = stream.flush();
            return;
        }
    }
}
