//! The live protocol between a target (an emulator with a [`crate::Tap`]) and a debugger.
//!
//! # Transport and framing
//!
//! TCP. Every message travels in a frame: a `u32` little-endian payload length, then that many
//! bytes. A length above the reader's limit is refused *before* anything is allocated for it: a
//! target reads at most [`MAX_COMMAND_FRAME_BYTES`] from a debugger, a debugger at most
//! [`MAX_FRAME_BYTES`] from a target (a target never sends a bigger frame: it drops the message and
//! counts it). A zero length is malformed.
//!
//! A payload is one of two encodings, told apart by its first byte:
//! - **JSON** (first byte `{`): one message, UTF-8 JSON (serde, the encoding of samples and the
//!   report schema). Both hellos, [`ToDebugger::Attached`], [`ToDebugger::Refused`] and every
//!   command a debugger sends ([`ToTarget`]) are JSON in every version, so a handshake is readable
//!   in a packet dump and a version mismatch is always detected and named.
//! - **Binary** (first byte `wire::BINARY_MAGIC`, version 2): everything else a target
//!   sends after the handshake, several messages to a frame. See [`crate::wire`] for the layout and
//!   why it is MessagePack with field names, compressed with lz4, rather than a layout of our own.
//!
//! # What version 2 sends instead of repeating it
//!
//! - **Mapping state by id.** A dispatch report's mapping state (its readable runs, mapped pieces
//!   and left-out pieces, [`SharedMappings`]) is what the engine keeps until guest memory's
//!   generation moves, so consecutive reports repeat it. The target sends it once, as
//!   [`ToDebugger::MappingState`], whenever it differs from the last one sent, and each
//!   [`ToDebugger::Dispatch`] names it by [`ToDebugger::Dispatch::mapping_state`] with those three
//!   lists left empty. A [`LiveClient`](crate::LiveClient) puts them back, so its users see whole
//!   reports.
//! - **Detail on request.** A dispatch's report carries at most
//!   [`crate::TapConfig::streamed_accesses`] access reports; the rest are counted in
//!   [`ToDebugger::Dispatch::accesses_left_out`], and the target keeps the whole list of its
//!   latest such dispatches (at most [`DETAIL_KEPT`], within [`crate::TapConfig::detail_bytes`]). A debugger asks for one with [`ToTarget::Detail`] (when
//!   a person selects it) and gets [`ToDebugger::Detail`], or [`ToDebugger::DetailGone`] when the
//!   target no longer has it.
//!
//! - **Engine state when it changes.** After a dispatch that changed guest memory's page states
//!   or targets, or the chunk table, the target sends a checkpoint of that state
//!   ([`ToDebugger::Checkpoint`], message kind `wire::MSG_CHECKPOINT`, layout and rules in
//!   [`crate::checkpoint`]), queued with the dispatch so that both or neither are dropped; a
//!   state it could not send is marked unknown, never left stale.
//!
//! - **Dispatches in flight and a lost device.** An emulator that prepares many dispatches before
//!   completing them has the tap send each one's state as it changes: [`ToDebugger::Prepared`],
//!   [`ToDebugger::Abandoned`], and [`ToDebugger::DeviceLost`] with the engine's loss report
//!   (message kinds `wire::MSG_FLIGHT` and `wire::MSG_DEVICE_LOSS`, [`crate::flight`]; version 4).
//!
//! - **Program code once.** When the target knows a program's code ([`crate::Tap::add_program`]),
//!   [`ToDebugger::Program`] carries it once a session, just before the first dispatch that names
//!   the program; a recording keeps it (the capture's META, or a PROGRAM record once the META is
//!   written), so the listing and `dispatchscope disasm` work on a recorded live session.
//!
//! # Address, port and token
//!
//! A target listens on `127.0.0.1:`[`DEFAULT_PORT`] (27953) unless told otherwise.
//! Listening on any address that is not loopback requires a token, and a debugger must present it
//! in its hello; a target on loopback requires one only if it was given one.
//! The token is compared in constant time; it keeps out other people's debuggers and stray
//! connections, it is not encryption (the stream is plain TCP).
//!
//! # Handshake and version rule
//!
//! 1. On accept the target sends [`ToDebugger::Hello`] ([`TargetHello`]).
//! 2. The debugger answers [`ToTarget::Hello`] ([`DebuggerHello`]) with its version and token.
//! 3. The target answers [`ToDebugger::Attached`], or [`ToDebugger::Refused`] and closes.
//!
//! Both sides speak exactly one version, [`VERSION`] (4: a memory checkpoint may be changes since
//! the last, `crate::checkpoint`, and the messages of dispatches in flight and of a lost device,
//! which a version 3 debugger could not read; 3 added memory reads), and talk only to the same
//! version:
//! older peers are refused by name, not served (serving them would mean keeping v1's JSON
//! dispatch frames, the cost this version removes, and a second code path the tests must cover).
//! The framing, both hellos' `type`, `protocol` and `version` fields, and [`ToDebugger::Refused`]
//! never change in any version, so a mismatch is always detected and named on both sides: the
//! debugger sees the target's version in its hello and says so; the target sees the debugger's in
//! its hello, refuses it with a message naming both versions, and keeps running.
//!
//! # What happens to bad input
//!
//! A malformed frame, an oversize frame, a first frame that is not a hello, a wrong protocol name,
//! a wrong version and a wrong or missing token are each answered with [`ToDebugger::Refused`]
//! (a [`RefusalReason`] and a sentence naming the values), the connection is closed, and the
//! target keeps running and keeps listening. After the handshake a bad frame ends the session the
//! same way. This module only encodes and decodes; it never opens sockets and never runs anything.

use std::io::{self, Read, Write};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use dispatchscope_core::addr::hex;
use dispatchscope_core::input::Event;
use dispatchscope_core::input::{DeviceLimits, DispatchInput};
use dispatchscope_core::report::{
    AccessReport, DispatchReport, EventReport, LeftOutReport, MappingReport, PieceReport,
    ReadableRun,
};
use dispatchscope_core::rules::Rule;
use dispatchscope_formats::message;
use dispatchscope_formats::sample::Contents;

/// The `protocol` field of both hellos.
pub const PROTOCOL: &str = "dispatchscope.live";
/// The protocol version this build speaks; a target and a debugger talk only when theirs are equal
/// (kept with every other version number in `dispatchscope_formats::versions`).
pub use dispatchscope_formats::versions::PROTOCOL_VERSION as VERSION;
/// The port a target listens on by default (on 127.0.0.1).
pub const DEFAULT_PORT: u16 = 27953;
/// The address a target listens on by default.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:27953";
/// Bytes of a frame header (the payload length).
pub const FRAME_HEADER_BYTES: usize = 4;
/// The largest payload a debugger accepts from a target (a dispatch with its report).
pub const MAX_FRAME_BYTES: u32 = 32 << 20;
/// The largest payload a target accepts from a debugger (commands are small).
pub const MAX_COMMAND_FRAME_BYTES: u32 = 64 << 10;
/// The most events one [`ToDebugger::SnapshotEvents`] frame carries.
pub const SNAPSHOT_EVENTS_PER_FRAME: usize = 4096;
/// The most guest bytes one [`ToTarget::ReadMemory`] asks for (a memory view's screen, a lane's
/// values); a longer read is refused by name.
pub const MAX_MEMORY_READ: u32 = 64 << 10;
/// Reads a target holds unanswered at most; one more is answered at once with an error.
pub const MAX_MEMORY_READS_PENDING: usize = 16;
/// The most guest bytes one [`ToDebugger::SnapshotContents`] frame carries.
pub const SNAPSHOT_CONTENTS_BYTES: usize = 1 << 20;
/// Access reports a dispatch frame carries unless the tap is told otherwise
/// ([`crate::TapConfig::streamed_accesses`]); the rest come on request ([`ToTarget::Detail`]).
pub const DEFAULT_STREAMED_ACCESSES: usize = 4096;
/// How many cut dispatches' whole access lists a target keeps for [`ToTarget::Detail`] at most.
pub const DETAIL_KEPT: usize = 64;
/// The most heap bytes of whole access lists a target keeps for [`ToTarget::Detail`] unless told
/// otherwise ([`crate::TapConfig::detail_bytes`]).
pub const DEFAULT_DETAIL_BYTES: usize = 64 << 20;

/// Why a frame could not be read or written.
#[derive(Debug, Error)]
pub enum ProtocolError {
    /// The socket failed.
    #[error("{action}: {error}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The error.
        error: io::Error,
    },
    /// The peer closed the connection.
    #[error("the peer closed the connection{}", if *mid_frame { " in the middle of a frame" } else { "" })]
    Closed {
        /// Whether part of a frame had arrived.
        mid_frame: bool,
    },
    /// A frame longer than the reader accepts; refused before anything was allocated for it.
    #[error("a frame of {len_bytes} bytes is longer than the {max_bytes} bytes this side accepts")]
    Oversize {
        /// The length the header announced.
        len_bytes: u32,
        /// The limit.
        max_bytes: u32,
    },
    /// A frame whose payload is not the encoding of a message.
    #[error("malformed frame: {message}")]
    Malformed {
        /// What was wrong, with serde's line and column.
        message: String,
    },
    /// A message too large to send; it was not sent.
    #[error("a message of {len_bytes} bytes is longer than the {max_bytes}-byte frame limit")]
    TooLargeToSend {
        /// Its encoded length.
        len_bytes: usize,
        /// The limit.
        max_bytes: u32,
    },
}

/// What a target says first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TargetHello {
    /// Always [`PROTOCOL`].
    pub protocol: String,
    /// The version the target speaks.
    pub version: u32,
    /// What the target is ("dispatchscope demo", an emulator's name).
    pub target: String,
    /// Its process id.
    pub pid: u32,
    /// Whether a debugger must present a token.
    pub token_required: bool,
}

/// What a debugger answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DebuggerHello {
    /// Always [`PROTOCOL`].
    pub protocol: String,
    /// The version the debugger speaks.
    pub version: u32,
    /// The token, if the debugger has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// What the debugger is ("dispatchscope attach", "dispatchscope app").
    #[serde(default)]
    pub client: String,
    /// Ask for a [`Snapshot`] of guest memory before the next dispatch (a recorder needs one).
    #[serde(default)]
    pub snapshot: bool,
}

impl DebuggerHello {
    /// A hello of this build's version.
    pub fn new(client: &str, token: Option<String>, snapshot: bool) -> Self {
        Self {
            protocol: PROTOCOL.to_owned(),
            version: VERSION,
            token,
            client: client.to_owned(),
            snapshot,
        }
    }
}

/// Why a target refused a debugger or ended its session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RefusalReason {
    /// The versions differ.
    Version,
    /// The token is wrong or missing.
    Token,
    /// A frame is not the JSON of a message.
    Malformed,
    /// A frame is longer than the target accepts.
    Oversize,
    /// The first frame is not a hello, or a second hello came.
    NotHello,
    /// The hello names another protocol.
    Protocol,
    /// Another debugger is attached.
    Busy,
    /// No hello came in time.
    Timeout,
    /// The target is shutting down.
    ShuttingDown,
}

impl RefusalReason {
    /// The reason as the protocol writes it (`"version"`, `"token"` …).
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalReason::Version => "version",
            RefusalReason::Token => "token",
            RefusalReason::Malformed => "malformed",
            RefusalReason::Oversize => "oversize",
            RefusalReason::NotHello => "not-hello",
            RefusalReason::Protocol => "protocol",
            RefusalReason::Busy => "busy",
            RefusalReason::Timeout => "timeout",
            RefusalReason::ShuttingDown => "shutting-down",
        }
    }
}

impl std::fmt::Display for RefusalReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The breakpoints a debugger sets; each is documented where it stops.
///
/// Stops *before* a dispatch (the dispatch is known, it has not run; the events the emulator
/// applied since the previous dispatch have been applied and sent):
/// - `every_dispatch`: before every dispatch.
/// - `dispatch`: before the dispatch with this index (the engine's count from 0).
/// - `programs`: before any dispatch of one of these programs.
///
/// Stops *after* a dispatch, because what they look for is only known once it was planned and run:
/// the target stops inside the tap's call for dispatch N, after the engine returned its report and
/// the report was sent, before the report goes back to the emulator. Nothing has happened since
/// dispatch N (no event, no dispatch); the pause says "before dispatch N+1" and names N:
/// - `refusal`: after a dispatch with at least one refusal (planning refused it, O7, O11, W2 …).
/// - `escape`: after a dispatch with at least one escape (T4; known only after it ran).
/// - `probes_over`: after a dispatch in which some lookup (T5) read more than k table slots.
///
/// The refusal, escape and probe breakpoints stay set: each stops at the next such dispatch.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Breakpoints {
    /// Stop before every dispatch.
    pub every_dispatch: bool,
    /// Stop after a dispatch that was refused.
    pub refusal: bool,
    /// Stop after a dispatch that had an escape.
    pub escape: bool,
    /// Stop after a dispatch with a lookup of more than this many probes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probes_over: Option<u32>,
    /// Stop before a dispatch of one of these programs.
    #[serde(with = "hex::vec", skip_serializing_if = "Vec::is_empty")]
    pub programs: Vec<u64>,
    /// Stop before the dispatch with this index.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dispatch: Option<u64>,
}

impl Breakpoints {
    /// Whether none is set.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// Why a target paused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum PauseReason {
    /// The debugger sent [`ToTarget::Pause`].
    Requested,
    /// The dispatches of a [`ToTarget::Step`] ran.
    Step {
        /// How many the step ran.
        n: u64,
    },
    /// The every-dispatch breakpoint.
    EveryDispatch,
    /// The Nth-dispatch breakpoint.
    Nth {
        /// Its index.
        dispatch: u64,
    },
    /// A program breakpoint.
    Program {
        /// The program.
        #[serde(with = "hex")]
        program: u64,
    },
    /// Dispatch `dispatch` was refused.
    Refusal {
        /// The dispatch.
        dispatch: u64,
        /// The rules its refusals cite.
        rules: Vec<Rule>,
    },
    /// Dispatch `dispatch` had escapes.
    Escape {
        /// The dispatch.
        dispatch: u64,
        /// How many.
        escapes: usize,
    },
    /// A lookup of dispatch `dispatch` read more than `more_than` slots.
    Probes {
        /// The dispatch.
        dispatch: u64,
        /// The access whose lookup it was.
        access: usize,
        /// Slots it read.
        probes: usize,
        /// The breakpoint's k.
        more_than: u32,
    },
}

impl PauseReason {
    /// One sentence for a status line.
    pub fn sentence(&self) -> String {
        match self {
            PauseReason::Requested => "paused at the debugger's request".into(),
            PauseReason::Step { n } => {
                format!("stepped {n} dispatch{}", if *n == 1 { "" } else { "es" })
            }
            PauseReason::EveryDispatch => "breakpoint: before every dispatch".into(),
            PauseReason::Nth { dispatch } => format!("breakpoint: before dispatch {dispatch}"),
            PauseReason::Program { program } => {
                format!("breakpoint: before a dispatch of program {program:#x}")
            }
            PauseReason::Refusal { dispatch, rules } => {
                let ids: Vec<&str> = rules.iter().map(|r| r.id()).collect();
                format!(
                    "breakpoint: dispatch {dispatch} was refused ({})",
                    ids.join(", ")
                )
            }
            PauseReason::Escape { dispatch, escapes } => {
                format!(
                    "breakpoint: dispatch {dispatch} had {escapes} escape{} (T4)",
                    if *escapes == 1 { "" } else { "s" }
                )
            }
            PauseReason::Probes {
                dispatch,
                access,
                probes,
                more_than,
            } => format!(
                "breakpoint: access {access} of dispatch {dispatch} looked up a chunk in {probes} probes (more than {more_than})"
            ),
        }
    }

    /// The dispatch that made an after-dispatch breakpoint stop, if this is one.
    pub fn after_dispatch(&self) -> Option<u64> {
        match self {
            PauseReason::Refusal { dispatch, .. }
            | PauseReason::Escape { dispatch, .. }
            | PauseReason::Probes { dispatch, .. } => Some(*dispatch),
            _ => None,
        }
    }
}

/// Why a paused target runs again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum ResumeReason {
    /// [`ToTarget::Continue`].
    Continue,
    /// [`ToTarget::Step`].
    Step {
        /// Dispatches it will run before pausing again.
        n: u64,
    },
    /// The debugger said nothing for the pause timeout: the target resumed on its own and cleared
    /// every breakpoint, so that a silent debugger cannot stop it again.
    Silent {
        /// Milliseconds of silence.
        silent_ms: u64,
    },
}

/// The target's figures, sent about twice a second while a debugger is attached.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Dispatches since this debugger attached.
    pub dispatches: u64,
    /// Events since this debugger attached.
    pub events: u64,
    /// Dispatches per second over the last interval.
    pub dispatches_per_s: f64,
    /// Messages sent to this debugger.
    pub sent: u64,
    /// Messages dropped because the queue to this debugger was full (a slow debugger), since it
    /// attached. Dropped dispatches leave gaps in the indices the debugger sees.
    pub dropped: u64,
    /// Messages waiting in the queue.
    pub queued: usize,
    /// The queue's bound.
    pub queue_capacity: usize,
    /// Whether the target is paused.
    pub paused: bool,
    /// What the tap cost the game's thread a dispatch since this debugger attached, in
    /// nanoseconds: its attached path's own time (copying the dispatch into the ring, the
    /// checkpoints, the breakpoint checks), the dispatch itself and pauses left out. 0 from a
    /// target older than the figure.
    #[serde(default)]
    pub tap_ns_per_dispatch: f64,
}

/// Guest memory as it stood before dispatch `next_dispatch`: `n_event_frames`
/// [`ToDebugger::SnapshotEvents`] frames follow, whose events rebuild it on an empty engine, then
/// `n_contents` [`ToDebugger::SnapshotContents`] frames (see [`crate::snapshot`] for what it
/// restores exactly).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The dispatch it was taken before. Every [`ToDebugger::Event`] and [`ToDebugger::Dispatch`]
    /// sent after the snapshot happened after it; those sent before it are in it.
    pub next_dispatch: u64,
    /// The device.
    pub device: DeviceLimits,
    /// Events frames that follow.
    pub n_event_frames: u64,
    /// Contents frames that follow them.
    pub n_contents: u64,
}

/// The part of a report's [`MappingReport`] that stays the same from dispatch to dispatch until
/// guest memory's generation moves: sent once per change as [`ToDebugger::MappingState`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedMappings {
    /// The readable runs (M1).
    pub runs: Vec<ReadableRun>,
    /// The mapped pieces (M3).
    pub pieces: Vec<PieceReport>,
    /// The pieces left out, and why (M3).
    pub left_out: Vec<LeftOutReport>,
}

impl SharedMappings {
    /// Moves the three shared lists out of `m`, leaving them empty.
    pub fn take_from(m: &mut MappingReport) -> Self {
        Self {
            runs: std::mem::take(&mut m.runs),
            pieces: std::mem::take(&mut m.pieces),
            left_out: std::mem::take(&mut m.left_out),
        }
    }

    /// Whether `m`'s three lists are these.
    pub fn same_as(&self, m: &MappingReport) -> bool {
        self.runs == m.runs && self.pieces == m.pieces && self.left_out == m.left_out
    }

    /// Puts copies of the three lists into `m`.
    pub fn restore_into(&self, m: &mut MappingReport) {
        m.runs.clone_from(&self.runs);
        m.pieces.clone_from(&self.pieces);
        m.left_out.clone_from(&self.left_out);
    }
}

/// What a target sends.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum ToDebugger {
    /// The first frame on every connection.
    Hello(TargetHello),
    /// The target refuses the debugger, or ends its session; the connection closes after it.
    Refused {
        /// Why.
        reason: RefusalReason,
        /// One sentence naming the values.
        message: String,
    },
    /// The handshake succeeded.
    Attached {
        /// The session's number in this target's life.
        session: u64,
    },
    /// Guest memory before `next_dispatch` (only when the debugger's hello asked for it).
    Snapshot(Box<Snapshot>),
    /// Events of a snapshot (reservations, page states, guards, write-watch notes, targets,
    /// deferred copies), at most [`SNAPSHOT_EVENTS_PER_FRAME`] a frame.
    SnapshotEvents {
        /// The events, in order.
        events: Vec<Event>,
    },
    /// Guest bytes of a snapshot.
    SnapshotContents {
        /// The bytes.
        contents: Contents,
    },
    /// A memory event the emulator applied, and what it did.
    Event {
        /// The engine's report of it.
        report: Box<EventReport>,
    },
    /// A memory event the engine refused as bad input.
    EventFailed {
        /// The event.
        event: Box<Event>,
        /// Why.
        message: String,
    },
    /// The mapping state that the dispatches after it name by `id` (version 2).
    MappingState {
        /// Its number, from 1, in this session.
        id: u64,
        /// The lists.
        mappings: Box<SharedMappings>,
    },
    /// A program's machine code (its bytes from `address`), sent once a session, before the first
    /// dispatch that names the program, when the target knows its code ([`crate::Tap::add_program`]).
    Program {
        /// The program's address (the `program` of its dispatches).
        #[serde(with = "hex")]
        address: u64,
        /// Its machine code from that address.
        code: Vec<u8>,
    },
    /// A dispatch ran.
    Dispatch {
        /// Its index.
        index: u64,
        /// Its input.
        input: Box<DispatchInput>,
        /// Its report.
        report: Box<DispatchReport>,
        /// On the wire, the [`ToDebugger::MappingState`] whose lists the report's mapping state
        /// left out; a [`LiveClient`](crate::LiveClient) has put them back.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mapping_state: Option<u64>,
        /// Access reports cut from the end of `report.accesses` (beyond the tap's
        /// [`crate::TapConfig::streamed_accesses`]); [`ToTarget::Detail`] fetches them.
        #[serde(default, skip_serializing_if = "is_zero")]
        accesses_left_out: u64,
    },
    /// A dispatch as a `wire::Decoder` set to
    /// `wire::Decoder::set_keep_received` hands it over: decoded only as far as a table
    /// row needs, with its bytes as they came (what a live store writes unchanged); never on the
    /// wire itself.
    #[serde(skip)]
    Received(Box<ReceivedDispatch>),
    /// The engine state the dispatch just before it left, where it changed (message kind
    /// `wire::MSG_CHECKPOINT`; see [`crate::checkpoint`]); only in binary frames.
    #[serde(skip)]
    Checkpoint(Box<crate::checkpoint::Checkpoint>),
    /// A dispatch was prepared and is in flight: its report ([`ToDebugger::Dispatch`] of the same
    /// index) comes at its complete, possibly after later dispatches were prepared (message kind
    /// `wire::MSG_FLIGHT`, [`crate::flight`]; version 4, only in binary frames). A report or failure
    /// of index N ends every dispatch in flight up to N: they complete in the order prepared.
    #[serde(skip)]
    Prepared {
        /// Its index.
        index: u64,
        /// How it was planned.
        mode: dispatchscope_core::report::Mode,
        /// Its program.
        program: u64,
        /// Its label.
        label: String,
    },
    /// A dispatch in flight was abandoned: it will not complete (message kind `wire::MSG_FLIGHT`).
    #[serde(skip)]
    Abandoned {
        /// Its index.
        index: u64,
    },
    /// The device was lost: the engine's report, every dispatch in flight named in it (message
    /// kind `wire::MSG_DEVICE_LOSS`, a DEVICE_LOSS record's payload; version 4, only in binary
    /// frames). Nothing more is prepared on that engine.
    #[serde(skip)]
    DeviceLost(Box<dispatchscope_core::report::DeviceLossReport>),
    /// The whole access list of a dispatch, as [`ToTarget::Detail`] asked.
    Detail {
        /// The dispatch.
        dispatch: u64,
        /// Every access report of it.
        accesses: Vec<AccessReport>,
    },
    /// Guest bytes as [`ToTarget::ReadMemory`] asked, read from the emulator's own memory (host
    /// mode) or the engine's simulated contents, on the game's thread between dispatches.
    Memory {
        /// The request's id.
        id: u64,
        /// The bytes read, from the address asked; `None` when the read failed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        contents: Option<Contents>,
        /// Why it failed (a page the process cannot read, a read too long, too many pending),
        /// naming the values.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// The target no longer holds (or never cut) the access list [`ToTarget::Detail`] asked for.
    DetailGone {
        /// The dispatch.
        dispatch: u64,
        /// Why, naming the values.
        message: String,
    },
    /// A dispatch the engine could not run (bad input, or its device failed); it took no index.
    DispatchFailed {
        /// The index it would have had.
        index: u64,
        /// Its program.
        #[serde(with = "hex")]
        program: u64,
        /// Why.
        message: String,
        /// What kind of failure (a lost device, exhausted memory, bad input…), from
        /// `EngineError::kind`; absent from a target that did not send it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kind: Option<dispatchscope_core::FailureKind>,
    },
    /// The target paused before dispatch `next_dispatch`.
    Paused {
        /// The dispatch it will run next.
        next_dispatch: u64,
        /// Why it paused.
        why: PauseReason,
        /// The dispatch about to run, for a pause before a dispatch; `None` after one (the
        /// refusal, escape and probe breakpoints stop before the emulator made the next one).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        upcoming: Option<Box<DispatchInput>>,
    },
    /// A paused target runs again.
    Resumed {
        /// The dispatch it will run next.
        next_dispatch: u64,
        /// Why.
        why: ResumeReason,
    },
    /// Figures.
    Stats(Stats),
}

/// The kind of a dispatch's failure for [`ToDebugger::DispatchFailed`], where the error is the
/// engine's or its backend's ([`dispatchscope_core::EngineError::kind`]); `None` for an error of
/// the emulator's own (a device pass it ran itself), which says its kind in its words alone.
pub fn failure_kind_of<E: 'static>(e: &E) -> Option<dispatchscope_core::FailureKind> {
    let any: &dyn std::any::Any = e;
    any.downcast_ref::<dispatchscope_core::EngineError>()
        .map(dispatchscope_core::EngineError::kind)
        .or_else(|| {
            any.downcast_ref::<dispatchscope_core::backend::BackendError>()
                .map(dispatchscope_core::backend::BackendError::kind)
        })
}

impl ToDebugger {
    /// The message's `type`, for logs.
    pub fn kind(&self) -> &'static str {
        match self {
            ToDebugger::Hello(_) => "hello",
            ToDebugger::Refused { .. } => "refused",
            ToDebugger::Attached { .. } => "attached",
            ToDebugger::Snapshot(_) => "snapshot",
            ToDebugger::SnapshotEvents { .. } => "snapshot-events",
            ToDebugger::SnapshotContents { .. } => "snapshot-contents",
            ToDebugger::Event { .. } => "event",
            ToDebugger::EventFailed { .. } => "event-failed",
            ToDebugger::MappingState { .. } => "mapping-state",
            ToDebugger::Program { .. } => "program",
            ToDebugger::Dispatch { .. } | ToDebugger::Received(_) => "dispatch",
            ToDebugger::Checkpoint(_) => "checkpoint",
            ToDebugger::Prepared { .. } => "prepared",
            ToDebugger::Abandoned { .. } => "abandoned",
            ToDebugger::DeviceLost(_) => "device-lost",
            ToDebugger::Detail { .. } => "detail",
            ToDebugger::DetailGone { .. } => "detail-gone",
            ToDebugger::Memory { .. } => "memory",
            ToDebugger::DispatchFailed { .. } => "dispatch-failed",
            ToDebugger::Paused { .. } => "paused",
            ToDebugger::Resumed { .. } => "resumed",
            ToDebugger::Stats(_) => "stats",
        }
    }
}

/// What a debugger sends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum ToTarget {
    /// The answer to the target's hello; only as the first frame.
    Hello(DebuggerHello),
    /// Pause before the next dispatch.
    Pause,
    /// Run freely (until a breakpoint).
    Continue,
    /// Run `n` dispatches, then pause before the next one; `n = 0` does nothing.
    Step {
        /// Dispatches to run.
        n: u64,
    },
    /// Replace every breakpoint.
    SetBreakpoints {
        /// The new set.
        breakpoints: Breakpoints,
    },
    /// Nothing but "still here": a paused target resumes after the pause timeout without any frame.
    Ping,
    /// End the session: breakpoints go, a paused target runs, the target closes the connection.
    Detach,
    /// Send the whole access list of dispatch `dispatch` (version 2; see the module docs).
    Detail {
        /// The dispatch.
        dispatch: u64,
    },
    /// Capture these lanes' every access on the target's next device pass that captures lanes
    /// (a person selected a cell of the Pass tab's grid), and on each after it, until another
    /// request; `None` gives the choice back to the emulator. The emulator reads the request
    /// with [`crate::Tap::take_lane_request`] before it runs its pass; a session's end gives the
    /// choice back too. A target that runs no instrumented pass ignores it.
    CaptureLanes {
        /// The lanes, or `None` for the emulator's own selection.
        lanes: Option<dispatchscope_core::instrument::LaneSelection>,
    },
    /// Read `len` guest bytes at `address` (at most [`MAX_MEMORY_READ`]): the values a memory
    /// view, a lane or a write history shows, from the emulator's own pages in host mode. The
    /// game's thread answers ([`ToDebugger::Memory`] with the same `id`) at once while paused,
    /// else at its next dispatch.
    ReadMemory {
        /// Echoed in the answer.
        id: u64,
        /// The first guest byte.
        #[serde(with = "hex")]
        address: u64,
        /// Bytes to read.
        len: u32,
    },
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Encodes `message` as one frame (header and payload) into `out`, which is cleared first.
pub fn encode_frame_into<T: Serialize>(
    message: &T,
    max_bytes: u32,
    out: &mut Vec<u8>,
) -> Result<(), ProtocolError> {
    out.clear();
    out.extend_from_slice(&[0; FRAME_HEADER_BYTES]);
    serde_json::to_writer(&mut *out, message).map_err(|e| ProtocolError::Malformed {
        message: e.to_string(),
    })?;
    let len = out.len() - FRAME_HEADER_BYTES;
    let len32 = u32::try_from(len).ok().filter(|&l| l <= max_bytes).ok_or(
        ProtocolError::TooLargeToSend {
            len_bytes: len,
            max_bytes,
        },
    )?;
    out[..FRAME_HEADER_BYTES].copy_from_slice(&len32.to_le_bytes());
    Ok(())
}

/// Encodes `message` as one frame.
pub fn encode_frame<T: Serialize>(message: &T, max_bytes: u32) -> Result<Vec<u8>, ProtocolError> {
    let mut out = Vec::new();
    encode_frame_into(message, max_bytes, &mut out)?;
    Ok(out)
}

/// Writes `message` as one frame.
pub fn write_frame<T: Serialize>(
    w: &mut impl Write,
    message: &T,
    max_bytes: u32,
) -> Result<(), ProtocolError> {
    let frame = encode_frame(message, max_bytes)?;
    w.write_all(&frame).map_err(|error| ProtocolError::Io {
        action: "writing a frame",
        error,
    })
}

/// Decodes a frame's payload.
pub fn decode<T: DeserializeOwned>(payload: &[u8]) -> Result<T, ProtocolError> {
    serde_json::from_slice(payload).map_err(|e| ProtocolError::Malformed {
        message: e.to_string(),
    })
}

/// Decodes a JSON frame from a target (version 1's only encoding; since version 2 the
/// handshake's). A dispatch frame is decoded straight into its fields (a [`message::Message`]:
/// the `type` field is ignored) rather than through the tagged enum, which would first buffer the
/// whole report.
pub fn decode_to_debugger(payload: &[u8]) -> Result<ToDebugger, ProtocolError> {
    if payload.starts_with(br#"{"type":"dispatch","#) {
        return decode::<message::Message>(payload).map(ToDebugger::from);
    }
    decode(payload)
}

impl From<message::Message> for ToDebugger {
    fn from(m: message::Message) -> Self {
        ToDebugger::Dispatch {
            index: m.index,
            input: m.input,
            report: m.report,
            mapping_state: m.mapping_state,
            accesses_left_out: m.accesses_left_out,
        }
    }
}

/// The `type`, `protocol` and `version` of a hello, read without knowing its version's shape
/// (these three fields never change). `None` fields are absent or of the wrong type.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HelloHeader {
    /// The `type` field.
    pub kind: Option<String>,
    /// The `protocol` field.
    pub protocol: Option<String>,
    /// The `version` field.
    pub version: Option<u64>,
}

/// Reads a frame's [`HelloHeader`]; `Err` when the payload is not a JSON object.
pub fn hello_header(payload: &[u8]) -> Result<HelloHeader, ProtocolError> {
    let v: serde_json::Value = decode(payload)?;
    let obj = v.as_object().ok_or_else(|| ProtocolError::Malformed {
        message: "the frame is JSON but not an object".into(),
    })?;
    Ok(HelloHeader {
        kind: obj.get("type").and_then(|t| t.as_str()).map(str::to_owned),
        protocol: obj
            .get("protocol")
            .and_then(|t| t.as_str())
            .map(str::to_owned),
        version: obj.get("version").and_then(serde_json::Value::as_u64),
    })
}

/// Reads frames from a stream that may time out, keeping a partial frame across timeouts.
///
/// The header's length is checked against the limit before the payload buffer grows, and the
/// buffer then grows with the bytes that arrive (64 KiB at first, then doubling), so a peer cannot
/// make the reader allocate more than the limit, nor much more than it sent.
#[derive(Debug)]
pub struct FrameReader {
    max_bytes: u32,
    header: [u8; FRAME_HEADER_BYTES],
    header_filled: usize,
    payload: Vec<u8>,
    payload_len: Option<usize>,
    payload_filled: usize,
}

impl FrameReader {
    /// A reader accepting payloads of at most `max_bytes`.
    pub fn new(max_bytes: u32) -> Self {
        Self {
            max_bytes,
            header: [0; FRAME_HEADER_BYTES],
            header_filled: 0,
            payload: Vec::new(),
            payload_len: None,
            payload_filled: 0,
        }
    }

    /// Whether part of a frame has been read.
    pub fn mid_frame(&self) -> bool {
        self.header_filled > 0
    }

    /// Reads until one whole frame is in and returns its payload; `Ok(None)` when the stream's
    /// read timeout passed first (what was read is kept for the next call).
    pub fn read_frame(&mut self, r: &mut impl Read) -> Result<Option<Vec<u8>>, ProtocolError> {
        loop {
            let step = match self.payload_len {
                None => r.read(&mut self.header[self.header_filled..]),
                Some(len) => {
                    // The buffer grows with the bytes that came, not with what the header
                    // claims: when it is full it doubles (64 KiB at first), up to the length.
                    let at = self.payload_filled;
                    if at == self.payload.len() {
                        let grown = (2 * at).max(READ_STEP_BYTES).min(len);
                        self.payload.resize(grown, 0);
                    }
                    r.read(&mut self.payload[at..])
                }
            };
            let n = match step {
                Ok(0) => {
                    return Err(ProtocolError::Closed {
                        mid_frame: self.mid_frame(),
                    });
                }
                Ok(n) => n,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Ok(None);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => {
                    return Err(ProtocolError::Io {
                        action: "reading a frame",
                        error,
                    });
                }
            };
            match self.payload_len {
                None => {
                    self.header_filled += n;
                    if self.header_filled == FRAME_HEADER_BYTES {
                        let len = u32::from_le_bytes(self.header);
                        if len > self.max_bytes {
                            return Err(ProtocolError::Oversize {
                                len_bytes: len,
                                max_bytes: self.max_bytes,
                            });
                        }
                        if len == 0 {
                            return Err(ProtocolError::Malformed {
                                message: "an empty frame (length 0)".into(),
                            });
                        }
                        self.payload.clear();
                        self.payload_len = Some(len as usize);
                        self.payload_filled = 0;
                    }
                }
                Some(len) => {
                    self.payload_filled += n;
                    if self.payload_filled == len {
                        self.header_filled = 0;
                        self.payload_len = None;
                        let payload = std::mem::take(&mut self.payload);
                        return Ok(Some(payload));
                    }
                }
            }
        }
    }
}

/// What a frame's payload buffer holds at first; it doubles each time it fills, so a frame of `n`
/// bytes zeroes each byte once, in about `log2(n / READ_STEP_BYTES)` steps, and a header that
/// claims more than was sent costs at most twice what was sent.
const READ_STEP_BYTES: usize = 64 * 1024;

/// Compares two tokens in time independent of where they differ.
pub fn tokens_match(expected: &str, given: &str) -> bool {
    let (a, b) = (expected.as_bytes(), given.as_bytes());
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        diff |= usize::from(a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0));
    }
    diff == 0
}

/// A dispatch as it came over the wire, decoded only as far as a table row needs: its input and
/// report without their access lists (and without the mapping lists when the report names a
/// mapping state), and its version 3 DISPATCH record
/// ([`dispatchscope_formats::message::encode_record`]): the message's bytes as they came and the
/// mapping lists it names, what a live store writes unchanged. [`Self::decode`] reads the whole
/// dispatch from it when someone asks.
#[derive(Clone, Debug, PartialEq)]
pub struct ReceivedDispatch {
    /// The dispatch's index.
    pub index: u64,
    /// Its input, with no accesses.
    pub input: DispatchInput,
    /// Its report, with no accesses, and with no mapping lists when it names a mapping state.
    pub report: DispatchReport,
    /// Access reports the target left out of the rows.
    pub accesses_left_out: u64,
    /// The version 3 DISPATCH record.
    pub(crate) record: Vec<u8>,
    /// Where the message's rows are in `record` (without their length word).
    pub(crate) rows: std::ops::Range<usize>,
    /// Where the mapping lists are in `record` (empty: none).
    pub(crate) lists: std::ops::Range<usize>,
    /// The mapping state it names, until the decoder puts its lists into `record`.
    pub(crate) names_state: Option<u64>,
}

impl ReceivedDispatch {
    /// The DISPATCH record of this dispatch (what a capture keeps): version 3, its message's rows
    /// packed (wire kind 4).
    pub fn record(&self) -> &[u8] {
        &self.record
    }

    /// The whole input and report: the access lists decoded from the rows, the mapping lists put
    /// back.
    pub fn decode(&self) -> Result<(DispatchInput, DispatchReport), ProtocolError> {
        let (mut input, mut report) = (self.input.clone(), self.report.clone());
        self.fill(&mut input, &mut report)?;
        Ok((input, report))
    }

    /// [`Self::decode`] as a [`ToDebugger::Dispatch`] (the shells moved, not cloned).
    pub fn into_dispatch(self) -> Result<ToDebugger, ProtocolError> {
        match self.into_dispatch_or_shell() {
            (m, None) => Ok(m),
            (_, Some(e)) => Err(e),
        }
    }

    /// [`Self::into_dispatch`], and when the rows or mapping lists do not decode, the dispatch
    /// with its shells alone (no accesses) and why: a caller that must keep one report a
    /// dispatch (a window's rows line up with its store's records) keeps that.
    pub fn into_dispatch_or_shell(self) -> (ToDebugger, Option<ProtocolError>) {
        let ReceivedDispatch {
            index,
            mut input,
            mut report,
            accesses_left_out,
            record,
            rows,
            lists,
            ..
        } = self;
        let filled = message::rows_of_record(&record)
            .and_then(|format| {
                message::fill_rows(
                    format,
                    record.get(rows).unwrap_or_default(),
                    &mut input,
                    &mut report,
                )
            })
            .and_then(|()| {
                message::restore_mapping_lists(record.get(lists).unwrap_or_default(), &mut report)
            });
        let error = filled.err().map(|e| {
            input.accesses.clear();
            report.accesses.clear();
            malformed_dispatch(format!("dispatch {index}'s rows or mapping lists: {e}"))
        });
        let m = ToDebugger::Dispatch {
            index,
            input: Box::new(input),
            report: Box::new(report),
            mapping_state: None,
            accesses_left_out,
        };
        (m, error)
    }

    fn fill(
        &self,
        input: &mut DispatchInput,
        report: &mut DispatchReport,
    ) -> Result<(), ProtocolError> {
        let rows = self.record.get(self.rows.clone()).unwrap_or_default();
        let lists = self.record.get(self.lists.clone()).unwrap_or_default();
        message::rows_of_record(&self.record)
            .and_then(|format| message::fill_rows(format, rows, input, report))
            .and_then(|()| message::restore_mapping_lists(lists, report))
            .map_err(|e| {
                malformed_dispatch(format!(
                    "dispatch {}'s rows or mapping lists: {e}",
                    self.index
                ))
            })
    }
}

fn malformed_dispatch(message: String) -> ProtocolError {
    ProtocolError::Malformed { message }
}

#[cfg(test)]
mod tests {
    use std::io::{self, Read};

    use super::{FRAME_HEADER_BYTES, FrameReader, ProtocolError, READ_STEP_BYTES};

    /// A stream that gives at most `step` bytes a read and, every other read, times out.
    struct Trickle<'a> {
        data: &'a [u8],
        step: usize,
        stall: bool,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.stall = !self.stall;
            if self.stall {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let n = self.step.min(buf.len()).min(self.data.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    fn framed(payload: &[u8]) -> Vec<u8> {
        let mut out = (payload.len() as u32).to_le_bytes().to_vec();
        out.extend_from_slice(payload);
        out
    }

    #[test]
    fn a_frame_read_in_pieces_across_timeouts_is_the_payload_sent() {
        let payload: Vec<u8> = (0..3 * READ_STEP_BYTES + 17)
            .map(|i| (i * 7) as u8)
            .collect();
        let mut bytes = framed(&payload);
        bytes.extend(framed(b"next"));
        for step in [1, 3, 4096, 1 << 20] {
            let mut s = Trickle {
                data: &bytes,
                step,
                stall: false,
            };
            let mut r = FrameReader::new(1 << 24);
            let mut got = Vec::new();
            while got.len() < 2 {
                if let Some(p) = r.read_frame(&mut s).unwrap() {
                    got.push(p);
                }
            }
            assert_eq!(got[0], payload, "step {step}");
            assert_eq!(got[1], b"next", "step {step}");
        }
    }

    #[test]
    fn a_header_that_claims_more_than_was_sent_costs_what_was_sent() {
        let mut bytes = (30u32 << 20).to_le_bytes().to_vec();
        bytes.extend_from_slice(&[9; 10]);
        let mut r = FrameReader::new(32 << 20);
        let err = r.read_frame(&mut &bytes[..]).unwrap_err();
        assert!(
            matches!(err, ProtocolError::Closed { mid_frame: true }),
            "{err:?}"
        );
        assert_eq!(r.payload_filled, 10);
        assert!(
            r.payload.capacity() <= READ_STEP_BYTES,
            "{}",
            r.payload.capacity()
        );
    }

    #[test]
    fn a_header_past_the_limit_is_refused_before_any_payload() {
        let bytes = (1u32 << 20).to_le_bytes();
        let mut r = FrameReader::new(1 << 10);
        let err = r.read_frame(&mut &bytes[..]).unwrap_err();
        assert!(
            matches!(
                err,
                ProtocolError::Oversize {
                    len_bytes: 1048576,
                    max_bytes: 1024
                }
            ),
            "{err:?}"
        );
        assert_eq!(r.payload.capacity(), 0);
        assert_eq!(FRAME_HEADER_BYTES, 4);
    }
}
