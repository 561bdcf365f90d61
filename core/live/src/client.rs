//! [`LiveClient`]: the debugger's side of a live session, for the CLI and the app alike.
//!
//! It connects, shakes hands ([`crate::protocol`]), and then a background reader thread decodes
//! every frame ([`crate::wire::Decoder`]: version 2's binary frames, the mapping state put back
//! into each report) and puts every message from the target on a bounded channel ([`Incoming`],
//! [`ClientOptions::channel_capacity`]; while it is full the reader waits, so TCP pushes back), ending with
//! [`Incoming::Disconnected`] when the connection goes, whoever closed it: what was received stays
//! on the channel. The reader thread also sends a [`ToTarget::Ping`] whenever nothing was sent for
//! the heartbeat interval, so a target stays paused for as long as this client lives and resumes
//! within its pause timeout once it dies. Commands are sent from the caller's thread.
//! This module never draws; a window that wants to repaint on each message passes
//! [`ClientOptions::notify`].

use std::fmt;
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::protocol::{
    Breakpoints, DebuggerHello, FrameReader, MAX_COMMAND_FRAME_BYTES, MAX_FRAME_BYTES, PROTOCOL,
    ProtocolError, RefusalReason, TargetHello, ToDebugger, ToTarget, VERSION, decode, hello_header,
    write_frame,
};
use crate::shared::lock;
use crate::wire::Decoder;

/// How a client connects.
#[derive(Clone)]
pub struct ClientOptions {
    /// The token the target asks for, if any.
    pub token: Option<String>,
    /// The most the connection and the handshake may take, and the write timeout after.
    pub timeout: Duration,
    /// What the client calls itself in its hello.
    pub client_name: String,
    /// Ask for a snapshot of guest memory before the next dispatch (to record from).
    pub snapshot: bool,
    /// Send a ping when nothing was sent for this long; keep it well under the target's pause
    /// timeout (1 s by default).
    pub heartbeat: Duration,
    /// Called on the reader thread after each message is queued (a window's repaint request).
    pub notify: Option<Arc<dyn Fn() + Send + Sync>>,
    /// Messages the channel to the caller holds. When it is full the reader stops reading, so
    /// TCP pushes back and the target drops (and counts) what its queue cannot hold: a slow
    /// caller costs dispatches, never unbounded memory here.
    pub channel_capacity: usize,
    /// Hand dispatches over as [`ToDebugger::Received`] (decoded only as far as a table row needs,
    /// their bytes kept for a [`crate::LiveStore`] to write unchanged) rather than whole
    /// [`ToDebugger::Dispatch`]es ([`crate::wire::Decoder::set_keep_received`]). Off by default.
    pub keep_received: bool,
}

impl fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientOptions")
            .field("token", &self.token.as_ref().map(|_| "…"))
            .field("timeout", &self.timeout)
            .field("client_name", &self.client_name)
            .field("snapshot", &self.snapshot)
            .field("heartbeat", &self.heartbeat)
            .field("keep_received", &self.keep_received)
            .finish_non_exhaustive()
    }
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            token: None,
            timeout: Duration::from_secs(5),
            client_name: "dispatchscope".into(),
            snapshot: false,
            heartbeat: Duration::from_millis(250),
            notify: None,
            channel_capacity: 16_384,
            keep_received: false,
        }
    }
}

/// Why a client could not connect, send or receive.
#[derive(Debug, Error)]
pub enum ClientError {
    /// The address did not resolve.
    #[error("{addr}: not an address: {error}")]
    Resolve {
        /// The address as given.
        addr: String,
        /// Why.
        error: std::io::Error,
    },
    /// No connection could be made.
    #[error(
        "cannot connect to {addr}: {error} (is a target listening there? `dispatchscope demo` starts one)"
    )]
    Connect {
        /// The address.
        addr: String,
        /// Why.
        error: std::io::Error,
    },
    /// The peer broke the protocol.
    #[error("{addr}: {during}: {error}")]
    Protocol {
        /// The address.
        addr: String,
        /// What was going on.
        during: &'static str,
        /// Why.
        error: ProtocolError,
    },
    /// The peer is not a dispatchscope target.
    #[error("{addr} is not a dispatchscope target: {message}")]
    NotATarget {
        /// The address.
        addr: String,
        /// What it said instead.
        message: String,
    },
    /// The versions differ.
    #[error(
        "version mismatch: the target at {addr} speaks {PROTOCOL} version {target}, this debugger speaks version {ours}; attach with a dispatchscope of the same protocol version"
    )]
    Version {
        /// The address.
        addr: String,
        /// The target's version.
        target: String,
        /// Ours.
        ours: u32,
    },
    /// The target refused us.
    #[error("the target refused the debugger ({reason}): {message}")]
    Refused {
        /// Why.
        reason: RefusalReason,
        /// Its sentence.
        message: String,
    },
    /// Nothing came in time.
    #[error("{what}: nothing within {ms} ms")]
    Timeout {
        /// What was awaited.
        what: String,
        /// The timeout.
        ms: u128,
    },
    /// The connection is gone.
    #[error("disconnected: {reason}")]
    Disconnected {
        /// Why.
        reason: String,
    },
    /// The reader thread could not start.
    #[error("cannot start the reader thread: {0}")]
    Thread(std::io::Error),
}

/// What the reader thread hands over.
#[derive(Clone, Debug, PartialEq)]
pub enum Incoming {
    /// A message from the target.
    Message(ToDebugger),
    /// The connection is gone; always the last item.
    Disconnected {
        /// Why.
        reason: String,
        /// Whether it ended as asked (this client detached or closed it).
        clean: bool,
    },
}

struct ClientShared {
    stop: AtomicBool,
    detaching: AtomicBool,
    connected: AtomicBool,
    last_write: Mutex<Instant>,
}

/// A connected debugger; see the module docs.
pub struct LiveClient {
    addr: String,
    peer: SocketAddr,
    target: TargetHello,
    session: u64,
    writer: Arc<Mutex<TcpStream>>,
    shared: Arc<ClientShared>,
    rx: Receiver<Incoming>,
    reader: Option<JoinHandle<()>>,
}

impl fmt::Debug for LiveClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LiveClient")
            .field("peer", &self.peer)
            .field("target", &self.target.target)
            .field("session", &self.session)
            .finish()
    }
}

const READ_TICK: Duration = Duration::from_millis(50);

fn read_one(
    stream: &mut TcpStream,
    reader: &mut FrameReader,
    deadline: Instant,
    addr: &str,
    during: &'static str,
    timeout: Duration,
) -> Result<Vec<u8>, ClientError> {
    loop {
        match reader.read_frame(stream) {
            Ok(Some(p)) => return Ok(p),
            Ok(None) if Instant::now() < deadline => {}
            Ok(None) => {
                return Err(ClientError::Timeout {
                    what: format!("{addr}: {during}"),
                    ms: timeout.as_millis(),
                });
            }
            Err(error) => {
                return Err(ClientError::Protocol {
                    addr: addr.to_owned(),
                    during,
                    error,
                });
            }
        }
    }
}

impl LiveClient {
    /// Connects to the target at `addr` (`host:port`) with `token`, within `timeout`.
    pub fn connect(
        addr: &str,
        token: Option<&str>,
        timeout: Duration,
    ) -> Result<Self, ClientError> {
        Self::connect_with(
            addr,
            &ClientOptions {
                token: token.map(str::to_owned),
                timeout,
                ..ClientOptions::default()
            },
        )
    }

    /// Connects as `options` say.
    pub fn connect_with(addr: &str, options: &ClientOptions) -> Result<Self, ClientError> {
        let timeout = options.timeout;
        let deadline = Instant::now() + timeout;
        let addrs: Vec<SocketAddr> = addr
            .to_socket_addrs()
            .map_err(|error| ClientError::Resolve {
                addr: addr.to_owned(),
                error,
            })?
            .collect();
        let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, "no address");
        let mut stream = None;
        for a in &addrs {
            match TcpStream::connect_timeout(a, timeout) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = e,
            }
        }
        let mut stream = stream.ok_or(ClientError::Connect {
            addr: addr.to_owned(),
            error: last,
        })?;
        let peer = stream.peer_addr().map_err(|error| ClientError::Connect {
            addr: addr.to_owned(),
            error,
        })?;
        let _ = stream.set_nodelay(true);
        let _ = stream.set_read_timeout(Some(READ_TICK));
        let _ = stream.set_write_timeout(Some(timeout));
        let mut reader = FrameReader::new(MAX_FRAME_BYTES);
        let first = read_one(
            &mut stream,
            &mut reader,
            deadline,
            addr,
            "waiting for the target's hello",
            timeout,
        )?;
        let header = hello_header(&first).map_err(|error| ClientError::Protocol {
            addr: addr.to_owned(),
            during: "reading the target's hello",
            error,
        })?;
        if header.kind.as_deref() == Some("refused")
            && let Ok(ToDebugger::Refused { reason, message }) = decode(&first)
        {
            return Err(ClientError::Refused { reason, message });
        }
        if header.kind.as_deref() != Some("hello") || header.protocol.as_deref() != Some(PROTOCOL) {
            return Err(ClientError::NotATarget {
                addr: addr.to_owned(),
                message: format!(
                    "its first frame is a {:?} of protocol {:?}",
                    header.kind, header.protocol
                ),
            });
        }
        let hello = DebuggerHello::new(
            &options.client_name,
            options.token.clone(),
            options.snapshot,
        );
        let send = |stream: &mut TcpStream, during| {
            write_frame(
                stream,
                &ToTarget::Hello(hello.clone()),
                MAX_COMMAND_FRAME_BYTES,
            )
            .map_err(|error| ClientError::Protocol {
                addr: addr.to_owned(),
                during,
                error,
            })
        };
        if header.version != Some(u64::from(VERSION)) {
            // Say ours anyway, so that the target names the mismatch too.
            let _ = send(&mut stream, "sending the hello");
            let target = header
                .version
                .map_or_else(|| "(none given)".to_owned(), |v| v.to_string());
            return Err(ClientError::Version {
                addr: addr.to_owned(),
                target,
                ours: VERSION,
            });
        }
        let target = match decode::<ToDebugger>(&first) {
            Ok(ToDebugger::Hello(h)) => h,
            Ok(other) => {
                return Err(ClientError::NotATarget {
                    addr: addr.to_owned(),
                    message: format!("its first frame is a {}", other.kind()),
                });
            }
            Err(error) => {
                return Err(ClientError::Protocol {
                    addr: addr.to_owned(),
                    during: "reading the target's hello",
                    error,
                });
            }
        };
        send(&mut stream, "sending the hello")?;
        let second = read_one(
            &mut stream,
            &mut reader,
            deadline,
            addr,
            "waiting for the target to accept the hello",
            timeout,
        )?;
        let session = match decode::<ToDebugger>(&second) {
            Ok(ToDebugger::Attached { session }) => session,
            Ok(ToDebugger::Refused { reason, message }) => {
                return Err(ClientError::Refused { reason, message });
            }
            Ok(other) => {
                return Err(ClientError::NotATarget {
                    addr: addr.to_owned(),
                    message: format!("it answered the hello with a {}", other.kind()),
                });
            }
            Err(error) => {
                return Err(ClientError::Protocol {
                    addr: addr.to_owned(),
                    during: "reading the answer to the hello",
                    error,
                });
            }
        };
        let shared = Arc::new(ClientShared {
            stop: AtomicBool::new(false),
            detaching: AtomicBool::new(false),
            connected: AtomicBool::new(true),
            last_write: Mutex::new(Instant::now()),
        });
        let read_stream = stream.try_clone().map_err(|error| ClientError::Connect {
            addr: addr.to_owned(),
            error,
        })?;
        let writer = Arc::new(Mutex::new(stream));
        let (tx, rx) = mpsc::sync_channel(options.channel_capacity.max(1));
        let reader_thread = {
            let (shared, writer, notify, heartbeat) = (
                Arc::clone(&shared),
                Arc::clone(&writer),
                options.notify.clone(),
                options.heartbeat,
            );
            let mut decoder = Decoder::new();
            decoder.set_keep_received(options.keep_received);
            std::thread::Builder::new()
                .name("ds-client-read".into())
                .spawn(move || {
                    read_loop(
                        read_stream,
                        (reader, decoder),
                        &tx,
                        &shared,
                        &writer,
                        notify.as_deref(),
                        heartbeat,
                    )
                })
                .map_err(ClientError::Thread)?
        };
        Ok(Self {
            addr: addr.to_owned(),
            peer,
            target,
            session,
            writer,
            shared,
            rx,
            reader: Some(reader_thread),
        })
    }

    /// The target's hello.
    pub fn target(&self) -> &TargetHello {
        &self.target
    }

    /// The target's address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// The session number the target gave.
    pub fn session(&self) -> u64 {
        self.session
    }

    /// Whether the connection is up (the reader has not seen it close).
    pub fn is_connected(&self) -> bool {
        self.shared.connected.load(Ordering::Relaxed)
    }

    /// Sends one command.
    pub fn send(&self, command: &ToTarget) -> Result<(), ClientError> {
        if !self.is_connected() {
            return Err(ClientError::Disconnected {
                reason: "the connection is closed".into(),
            });
        }
        let mut w = lock(&self.writer);
        write_frame(&mut *w, command, MAX_COMMAND_FRAME_BYTES).map_err(|e| {
            ClientError::Disconnected {
                reason: e.to_string(),
            }
        })?;
        *lock(&self.shared.last_write) = Instant::now();
        Ok(())
    }

    /// Pause before the next dispatch.
    pub fn pause(&self) -> Result<(), ClientError> {
        self.send(&ToTarget::Pause)
    }

    /// Run freely until a breakpoint.
    pub fn resume(&self) -> Result<(), ClientError> {
        self.send(&ToTarget::Continue)
    }

    /// Run `n` dispatches, then pause.
    pub fn step(&self, n: u64) -> Result<(), ClientError> {
        self.send(&ToTarget::Step { n })
    }

    /// Ask for the whole access list of dispatch `dispatch` (when its frame carried only part of
    /// it, [`ToDebugger::Dispatch::accesses_left_out`]); the answer arrives on the channel as
    /// [`ToDebugger::Detail`] or [`ToDebugger::DetailGone`].
    pub fn request_detail(&self, dispatch: u64) -> Result<(), ClientError> {
        self.send(&ToTarget::Detail { dispatch })
    }

    /// Ask the target to capture `lanes` on its next instrumented pass and each after it
    /// ([`ToTarget::CaptureLanes`]); `None` gives the choice back to the target.
    pub fn capture_lanes(
        &self,
        lanes: Option<dispatchscope_core::instrument::LaneSelection>,
    ) -> Result<(), ClientError> {
        self.send(&ToTarget::CaptureLanes { lanes })
    }

    /// Ask for `len` guest bytes at `address` ([`ToTarget::ReadMemory`]); the answer arrives on
    /// the channel as [`ToDebugger::Memory`] with the same `id`: at once while the target is
    /// paused, else at its next dispatch.
    pub fn read_memory(&self, id: u64, address: u64, len: u32) -> Result<(), ClientError> {
        self.send(&ToTarget::ReadMemory { id, address, len })
    }

    /// Replace the breakpoints.
    pub fn set_breakpoints(&self, breakpoints: &Breakpoints) -> Result<(), ClientError> {
        self.send(&ToTarget::SetBreakpoints {
            breakpoints: breakpoints.clone(),
        })
    }

    /// The channel of everything received.
    pub fn receiver(&self) -> &Receiver<Incoming> {
        &self.rx
    }

    /// The next item, waiting up to `timeout`.
    pub fn recv_timeout(&self, timeout: Duration) -> Option<Incoming> {
        self.rx.recv_timeout(timeout).ok()
    }

    /// The next item, if one is there.
    pub fn try_recv(&self) -> Option<Incoming> {
        self.rx.try_recv().ok()
    }

    /// Receives until a message matches `want`, which it returns; every message before it goes to
    /// `seen`, in order. Fails on a disconnect or after `timeout`.
    pub fn wait_for(
        &self,
        timeout: Duration,
        seen: &mut Vec<ToDebugger>,
        mut want: impl FnMut(&ToDebugger) -> bool,
    ) -> Result<ToDebugger, ClientError> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(Incoming::Message(m)) if want(&m) => return Ok(m),
                Ok(Incoming::Message(m)) => seen.push(m),
                Ok(Incoming::Disconnected { reason, .. }) => {
                    return Err(ClientError::Disconnected { reason });
                }
                Err(RecvTimeoutError::Timeout) => {
                    return Err(ClientError::Timeout {
                        what: format!("{}: waiting for the target", self.addr),
                        ms: timeout.as_millis(),
                    });
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(ClientError::Disconnected {
                        reason: "the reader thread ended".into(),
                    });
                }
            }
        }
    }

    /// Detaches: the target clears the breakpoints, runs on and closes the connection. Waits up to
    /// `timeout` for the close and returns what arrived meanwhile.
    pub fn detach(self, timeout: Duration) -> Result<Vec<ToDebugger>, ClientError> {
        self.shared.detaching.store(true, Ordering::Relaxed);
        self.send(&ToTarget::Detach)?;
        let deadline = Instant::now() + timeout;
        let mut seen = Vec::new();
        loop {
            match self
                .rx
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(Incoming::Message(m)) => seen.push(m),
                Ok(Incoming::Disconnected { .. }) | Err(RecvTimeoutError::Disconnected) => {
                    return Ok(seen);
                }
                Err(RecvTimeoutError::Timeout) => {
                    return Err(ClientError::Timeout {
                        what: format!(
                            "{}: waiting for the target to close after detach",
                            self.addr
                        ),
                        ms: timeout.as_millis(),
                    });
                }
            }
        }
    }
}

impl Drop for LiveClient {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        let _ = lock(&self.writer).shutdown(Shutdown::Both);
        if let Some(h) = self.reader.take() {
            let _ = h.join();
        }
    }
}

/// Hands `item` to the caller, waiting while the channel is full (still sending heartbeats, and
/// giving up when this client stops). `false` when the caller is gone.
fn hand_over(
    tx: &SyncSender<Incoming>,
    mut item: Incoming,
    shared: &ClientShared,
    writer: &Mutex<TcpStream>,
    heartbeat: Duration,
) -> bool {
    loop {
        match tx.try_send(item) {
            Ok(()) => return true,
            Err(TrySendError::Disconnected(_)) => return false,
            Err(TrySendError::Full(back)) => {
                if shared.stop.load(Ordering::Relaxed) {
                    return false;
                }
                item = back;
                ping_if_due(shared, writer, heartbeat);
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }
}

fn ping_if_due(shared: &ClientShared, writer: &Mutex<TcpStream>, heartbeat: Duration) {
    let due = lock(&shared.last_write).elapsed() >= heartbeat;
    if due && !shared.stop.load(Ordering::Relaxed) {
        let mut w = lock(writer);
        if write_frame(&mut *w, &ToTarget::Ping, MAX_COMMAND_FRAME_BYTES).is_ok() {
            *lock(&shared.last_write) = Instant::now();
        }
    }
}

fn read_loop(
    mut stream: TcpStream,
    (mut reader, mut decoder): (FrameReader, Decoder),
    tx: &SyncSender<Incoming>,
    shared: &ClientShared,
    writer: &Mutex<TcpStream>,
    notify: Option<&(dyn Fn() + Send + Sync)>,
    heartbeat: Duration,
) {
    let end = |reason: String, clean: bool| {
        shared.connected.store(false, Ordering::Relaxed);
        // The last item: wait for room unless the caller is gone or this client stops.
        let _ = hand_over(
            tx,
            Incoming::Disconnected { reason, clean },
            shared,
            writer,
            heartbeat,
        );
        if let Some(n) = notify {
            n();
        }
    };
    let mut messages = Vec::new();
    loop {
        if shared.stop.load(Ordering::Relaxed) {
            end("closed by this debugger".into(), true);
            return;
        }
        match reader.read_frame(&mut stream) {
            Ok(Some(payload)) => match decoder.decode(&payload, &mut messages) {
                Ok(()) => {
                    for m in messages.drain(..) {
                        if !hand_over(tx, Incoming::Message(m), shared, writer, heartbeat) {
                            shared.connected.store(false, Ordering::Relaxed);
                            return;
                        }
                    }
                    if let Some(n) = notify {
                        n();
                    }
                }
                Err(e) => {
                    end(
                        format!("the target sent a frame this debugger cannot read: {e}"),
                        false,
                    );
                    return;
                }
            },
            Ok(None) => {}
            Err(ProtocolError::Closed { mid_frame }) => {
                let detaching =
                    shared.detaching.load(Ordering::Relaxed) || shared.stop.load(Ordering::Relaxed);
                let reason = match (detaching, mid_frame) {
                    (true, _) => "detached".to_owned(),
                    (false, true) => {
                        "the target closed the connection in the middle of a frame".to_owned()
                    }
                    (false, false) => "the target closed the connection".to_owned(),
                };
                end(reason, detaching);
                return;
            }
            Err(e) => {
                let stopping = shared.stop.load(Ordering::Relaxed);
                end(
                    if stopping {
                        "closed by this debugger".into()
                    } else {
                        format!("the connection failed: {e}")
                    },
                    stopping,
                );
                return;
            }
        }
        ping_if_due(shared, writer, heartbeat);
    }
}
