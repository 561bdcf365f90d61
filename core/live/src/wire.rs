//! Version 2's binary frames: what a target sends after the handshake, several messages a frame.
//!
//! # Layout of a binary payload (inside the `u32` length of [`crate::protocol`]'s framing)
//!
//! | bytes | field | meaning |
//! |---|---|---|
//! | 0 | magic `u8` | [`BINARY_MAGIC`] (`0xb2`); a JSON payload starts with `{` instead |
//! | 1 | flags `u8` | bit 0: the body is lz4 compressed; a reader refuses any other bit |
//! | 2..6 | count `u32` LE | messages in the body, 1 to [`MAX_MESSAGES_PER_FRAME`] |
//! | 6.. | body | the messages; when compressed: their length `u32` LE (at most [`MAX_BODY_BYTES`], checked before anything is allocated), then one lz4 block (`lz4_flex::block`) |
//!
//! The messages are `count` values back to back, each one byte of kind then its encoding:
//! - kind [`MSG_DEVICE_LOSS`] (7, version 4), the device was lost: the engine's loss report, a
//!   DEVICE_LOSS record's payload ([`dispatchscope_formats::loss`]), after its `u32` LE length;
//! - kind [`MSG_FLIGHT`] (6, version 4), a dispatch prepared or abandoned ([`crate::flight`]'s
//!   layout) after its `u32` LE length;
//! - kind [`MSG_CHECKPOINT`] (5), a checkpoint of engine state ([`crate::checkpoint`]'s layout)
//!   after its `u32` LE length, right after the dispatch that left the state;
//! - kind [`MSG_DISPATCH_PACKED`] (4), what a target sends for every dispatch: a `u32` LE length
//!   and a [`dispatchscope_formats::message`] dispatch message whose access lists are in
//!   [`dispatchscope_formats::packed`]' rows (varints, deltas from the row before): the bytes a
//!   live store writes, unchanged and uncompressed, as a version 3 DISPATCH record;
//! - kind [`MSG_TAGGED`] (0), any other [`ToDebugger`] with its `type` tag, as in the JSON.
//!
//! Kinds 1 to 3 (a dispatch as a MessagePack map with its access lists, then without them and
//! [`dispatchscope_formats::columns`]' fixed-width rows after it, then as a dispatch message with
//! those rows) were written only by targets of protocol version 2, which the handshake refuses
//! ([`crate::protocol::VERSION`] is 4): no peer this side talks to sends them, so they are read
//! as the named error [`RETIRED_KINDS`] gives, not decoded. A version 2 store's records of kind 3
//! still read (the table of record forms in [`dispatchscope_formats::legacy`]).
//!
//! Dispatches go untagged because reading a tagged enum first buffers the whole value in serde's
//! generic form, which for a dispatch costs more than the rest of its decoding.
//!
//! # Why MessagePack with names for the rest, rows of our own for the access lists
//!
//! The report types skip empty fields (`skip_serializing_if`), flatten a tagged role into a slot
//! binding, write addresses as `"0x…"` strings and gain fields as the engine grows. A format that
//! does not describe itself (bincode, postcard) reads such types wrong or not at all, so the small,
//! varied part of a dispatch (slots, sets, refusals, escapes, the table, marks …) stays MessagePack
//! with names: every serde attribute holds, and a new field is carried with no change here.
//!
//! The access lists are different: about 120 accesses a demo dispatch, each with its lookups and
//! values, nine tenths of the dispatch's bytes, and of uniform shape. Measured on the demo at 200
//! dispatches a frame (`cargo bench -p dispatchscope-demo --bench live_rate`, see BENCHMARKS.md):
//! cloning them for the writer thread cost the game thread about 60 µs a dispatch (every access's
//! lookups, probes and values are separate allocations, freed on another thread), and naming their
//! fields in MessagePack cost the writer 260 µs and the debugger 510 µs a dispatch. So the tap
//! writes them into rows on the game thread ([`EncodedDispatch::of`]: no allocation per access,
//! no clone of the list) and clones only the rest, and both ends read rows without a parser. The
//! rows are the same bytes a live recording's DISPATCH records keep
//! ([`dispatchscope_formats::columns::encode_record`]).
//!
//! Field names and hex strings of the rest, and the rows' unused high bytes, repeat from dispatch
//! to dispatch; lz4 over a frame of many messages removes most of that (the bytes per dispatch in
//! BENCHMARKS.md are compressed). Compressing is then the writer thread's largest cost (about a
//! third of its samples under `perf` at 12,000 dispatches a second), while for a debugger on
//! loopback the bytes cost only the kernel's copy, a few times cheaper; so a target's writer sends
//! a loopback debugger uncompressed bodies ([`Encoder::set_compress`]) and any other compressed.
//! The flag bit says which, so a reader never needs to know.
//!
//! The [`Encoder`] also makes a report name its mapping state instead of repeating it, and cuts
//! access lists longer than the tap's bound (see [`crate::protocol`]); the [`Decoder`] puts the
//! state back. Neither ever panics on input: a bad payload is a [`ProtocolError::Malformed`]
//! naming what was wrong.

use std::io::Cursor;
use std::sync::Arc;

use std::io::Read;

use serde::Deserialize;

use crate::protocol::{ProtocolError, SharedMappings, ToDebugger, decode_to_debugger};
use dispatchscope_core::input::DispatchInput;
use dispatchscope_core::report::{AccessReport, DispatchReport};
use dispatchscope_formats::columns;
use dispatchscope_formats::legacy::wire_kinds;
use dispatchscope_formats::message::{self, Rows};
use dispatchscope_formats::packed;

/// A message's kind byte: a dispatch message of [`dispatchscope_formats::message`] (the rest as
/// MessagePack with names) after its `u32` LE length, its access lists in
/// [`dispatchscope_formats::packed`]' rows (varints and deltas, about a third of the fixed rows):
/// what a target sends for every dispatch, and what a live store writes as a version 3 DISPATCH
/// record ([`dispatchscope_formats::message::RECORD_V3`]).
pub const MSG_DISPATCH_PACKED: u8 = 4;

/// A message's kind byte: a checkpoint of engine state ([`crate::checkpoint`]'s layout) after its
/// `u32` LE length, sent right after the dispatch that left the state.
pub const MSG_CHECKPOINT: u8 = 5;

/// A message's kind byte: a dispatch prepared or abandoned ([`crate::flight`]'s layout) after its
/// `u32` LE length (protocol version 4).
pub const MSG_FLIGHT: u8 = 6;

/// A message's kind byte: the device was lost, the engine's loss report as a DEVICE_LOSS record's
/// payload ([`dispatchscope_formats::loss`]) after its `u32` LE length (protocol version 4).
pub const MSG_DEVICE_LOSS: u8 = 7;

/// The first byte of a binary payload.
pub const BINARY_MAGIC: u8 = 0xb2;
/// Flag bit 0: the body is lz4 compressed.
pub const FLAG_LZ4: u8 = 1;
/// Bytes before the body.
pub const BINARY_HEADER_BYTES: usize = 6;
/// The most messages one frame carries.
pub const MAX_MESSAGES_PER_FRAME: u32 = 1 << 16;
/// The most bytes a frame's body has once decompressed.
pub const MAX_BODY_BYTES: u32 = 64 << 20;
/// A message's kind byte: a tagged [`ToDebugger`].
pub const MSG_TAGGED: u8 = 0;
/// Message kinds only protocol version 2 targets wrote (dispatches with fixed-width rows or
/// none): the decoder names them, as no peer of this version sends them
/// (`dispatchscope_formats::legacy::wire_kinds`, with the other old forms).
pub use dispatchscope_formats::legacy::wire_kinds::RETIRED_KINDS;

/// A dispatch as the tap hands it to a session's writer thread: the input and report without their
/// access lists (cloned), and the lists already written as rows, which is all the game thread pays.
#[derive(Debug)]
pub struct EncodedDispatch {
    /// The dispatch's index.
    pub index: u64,
    /// Its input, with no accesses.
    pub input: DispatchInput,
    /// Its report, with no accesses.
    pub report: DispatchReport,
    /// The input's access block, then the report's (its first `streamed` accesses), in
    /// [`dispatchscope_formats::packed`]' rows.
    pub accesses: Vec<u8>,
    /// Access reports left out of the rows.
    pub accesses_left_out: u64,
    /// The whole access list when some were left out, for detail requests.
    pub cut: Option<Vec<AccessReport>>,
    /// The report's three mapping lists, shared with every dispatch the tap saw with the same
    /// lists (the report's own are then empty); `None` when the report has no mapping report,
    /// or keeps its lists itself.
    pub mappings: Option<Arc<SharedMappings>>,
}

impl EncodedDispatch {
    /// `input` and `report` as a writer thread takes them, with at most `streamed` access reports
    /// in the rows. `report`'s access list is lent out while its shell is cloned and put back: the
    /// caller's report is unchanged.
    pub fn of(
        index: u64,
        input: &DispatchInput,
        report: &mut DispatchReport,
        streamed: usize,
    ) -> Self {
        Self::of_into(index, input, report, streamed, Vec::new())
    }

    /// [`Self::of`], writing the rows into `bytes` (cleared first): a buffer the writer gave back
    /// ([`Encoder::push_dispatch`] returns it), so that the game thread does not allocate tens of
    /// kilobytes a dispatch for another thread to free.
    pub fn of_into(
        index: u64,
        input: &DispatchInput,
        report: &mut DispatchReport,
        streamed: usize,
        bytes: Vec<u8>,
    ) -> Self {
        Self::of_into_sharing(index, input, report, streamed, bytes, &mut None)
    }

    /// [`Self::of_into`], the report's mapping lists not copied when they equal `last`'s (the
    /// lists of the tap's previous dispatch): they are shared, and `last` becomes the lists that
    /// were copied when they differ. The writer then compares one pointer, not the lists.
    pub fn of_into_sharing(
        index: u64,
        input: &DispatchInput,
        report: &mut DispatchReport,
        streamed: usize,
        bytes: Vec<u8>,
        last: &mut Option<Arc<SharedMappings>>,
    ) -> Self {
        let accesses = std::mem::take(&mut report.accesses);
        let lists = report.mappings.as_mut().map(SharedMappings::take_from);
        let shell = report.clone();
        report.accesses = accesses;
        let mut d = Self {
            index,
            input: DispatchInput::default(),
            report: shell,
            accesses: bytes,
            accesses_left_out: 0,
            cut: None,
            mappings: None,
        };
        d.fill_rest(index, input, report, lists, streamed, last);
        d
    }

    /// [`Self::of_into_sharing`] into this dispatch, one the writer is done with: every field is
    /// copied over the last dispatch's with [`Clone::clone_from`], so that a warm ring slot takes
    /// a dispatch's input and report without allocating (issue 31: the game thread's whole share
    /// of an attached dispatch).
    pub fn refill(
        &mut self,
        index: u64,
        input: &DispatchInput,
        report: &mut DispatchReport,
        streamed: usize,
        last: &mut Option<Arc<SharedMappings>>,
    ) {
        let accesses = std::mem::take(&mut report.accesses);
        let lists = report.mappings.as_mut().map(SharedMappings::take_from);
        self.report.clone_from(report);
        report.accesses = accesses;
        self.fill_rest(index, input, report, lists, streamed, last);
    }

    /// What [`Self::of_into_sharing`] and [`Self::refill`] share once the report's shell is
    /// copied: `lists` (taken from `report`) go back into it, shared with `last` when equal.
    fn fill_rest(
        &mut self,
        index: u64,
        input: &DispatchInput,
        report: &mut DispatchReport,
        lists: Option<SharedMappings>,
        streamed: usize,
        last: &mut Option<Arc<SharedMappings>>,
    ) {
        self.index = index;
        input.clone_shell_into(&mut self.input);
        self.mappings = match (lists, report.mappings.as_mut()) {
            (Some(lists), Some(m)) => {
                let shared = match last {
                    Some(a) if **a == lists => Arc::clone(a),
                    _ => {
                        let a = Arc::new(lists.clone());
                        *last = Some(Arc::clone(&a));
                        a
                    }
                };
                m.runs = lists.runs;
                m.pieces = lists.pieces;
                m.left_out = lists.left_out;
                Some(shared)
            }
            _ => None,
        };
        self.accesses.clear();
        packed::encode_accesses(&input.accesses, &mut self.accesses);
        let all = &report.accesses;
        let kept = &all[..all.len().min(streamed)];
        packed::encode_access_reports(kept, &mut self.accesses);
        let left_out = all.len() - kept.len();
        self.accesses_left_out = left_out as u64;
        self.cut = (left_out > 0).then(|| all.clone());
    }
}

/// A writer starts a new frame once its body reaches this many bytes.
pub const FRAME_TARGET_BYTES: usize = 1 << 20;

fn malformed(message: impl Into<String>) -> ProtocolError {
    ProtocolError::Malformed {
        message: message.into(),
    }
}

/// Builds binary frames on the target's side; one per session (it remembers which mapping state
/// the debugger has).
#[derive(Debug)]
pub struct Encoder {
    /// The mapping state last sent, and its id.
    shared: Option<(u64, Arc<SharedMappings>)>,
    next_id: u64,
    streamed_accesses: usize,
    /// The body being built, uncompressed.
    body: Vec<u8>,
    count: u32,
    /// One message's encoding, before it joins the body.
    one: Vec<u8>,
    max_frame_bytes: u32,
    compress: bool,
}

impl Encoder {
    /// An encoder that keeps at most `streamed_accesses` access reports in a dispatch's report and
    /// makes frames of at most `max_frame_bytes` payload.
    pub fn new(streamed_accesses: usize, max_frame_bytes: u32) -> Self {
        Self {
            shared: None,
            next_id: 1,
            streamed_accesses,
            body: Vec::new(),
            count: 0,
            one: Vec::new(),
            max_frame_bytes,
            compress: true,
        }
    }

    /// Whether frames' bodies are lz4 compressed (by default they are, where that makes them
    /// smaller). A target's writer turns it off for a debugger on loopback, where the socket's
    /// copy costs less than compressing (see the module docs).
    pub fn set_compress(&mut self, on: bool) {
        self.compress = on;
    }

    /// Messages waiting in the frame being built.
    pub fn pending(&self) -> u32 {
        self.count
    }

    /// Adds `message` to the frame being built; a finished frame goes to `out` first when the
    /// message would not fit. A dispatch's mapping lists become a state id (a
    /// [`ToDebugger::MappingState`] goes first when they changed), and access reports past the
    /// bound are cut and handed to `cut` with the dispatch's index.
    ///
    /// A message whose encoding alone is longer than a frame is not sent:
    /// [`ProtocolError::TooLargeToSend`], and the frame being built is kept.
    pub fn push(
        &mut self,
        message: ToDebugger,
        out: &mut Vec<u8>,
        cut: &mut dyn FnMut(u64, Vec<AccessReport>),
    ) -> Result<(), ProtocolError> {
        match message {
            ToDebugger::Dispatch {
                index,
                input,
                mut report,
                ..
            } => {
                let mut d = EncodedDispatch::of(index, &input, &mut report, self.streamed_accesses);
                self.push_dispatch(&mut d, out, cut)
            }
            ToDebugger::Checkpoint(c) => self.push_checkpoint(&c, out),
            ToDebugger::Prepared {
                index,
                mode,
                program,
                label,
            } => self.push_flight(
                &crate::flight::FlightNote::Prepared {
                    index,
                    mode,
                    program,
                    label: Arc::from(label),
                },
                out,
            ),
            ToDebugger::Abandoned { index } => {
                self.push_flight(&crate::flight::FlightNote::Abandoned { index }, out)
            }
            ToDebugger::DeviceLost(report) => self.push_loss(&report, out),
            other => self.add(&other, out),
        }
    }

    /// Adds a dispatch prepared or abandoned (message kind [`MSG_FLIGHT`]) to the frame being
    /// built.
    pub fn push_flight(
        &mut self,
        note: &crate::flight::FlightNote,
        out: &mut Vec<u8>,
    ) -> Result<(), ProtocolError> {
        self.one.clear();
        self.one.push(MSG_FLIGHT);
        self.one.extend_from_slice(&[0; 4]);
        note.encode(&mut self.one);
        self.finish_sized(out)
    }

    /// Adds the device's loss report (message kind [`MSG_DEVICE_LOSS`]) to the frame being built.
    pub fn push_loss(
        &mut self,
        report: &dispatchscope_core::report::DeviceLossReport,
        out: &mut Vec<u8>,
    ) -> Result<(), ProtocolError> {
        self.one.clear();
        self.one.push(MSG_DEVICE_LOSS);
        self.one.extend_from_slice(&[0; 4]);
        let payload = dispatchscope_formats::loss::encode(report)
            .map_err(|e| malformed(format!("encoding the loss report: {e}")))?;
        self.one.extend_from_slice(&payload);
        self.finish_sized(out)
    }

    /// Writes the length of the sized message in `one` (its kind byte, then a `u32` LE length
    /// word, then the body) and moves it into the frame being built.
    fn finish_sized(&mut self, out: &mut Vec<u8>) -> Result<(), ProtocolError> {
        let len = u32::try_from(self.one.len() - 5).map_err(|_| ProtocolError::TooLargeToSend {
            len_bytes: self.one.len(),
            max_bytes: self.max_frame_bytes,
        })?;
        self.one[1..5].copy_from_slice(&len.to_le_bytes());
        self.add_one(out)
    }

    /// Adds a checkpoint (message kind [`MSG_CHECKPOINT`]) to the frame being built.
    pub fn push_checkpoint(
        &mut self,
        c: &crate::checkpoint::Checkpoint,
        out: &mut Vec<u8>,
    ) -> Result<(), ProtocolError> {
        self.one.clear();
        self.one.push(MSG_CHECKPOINT);
        self.one.extend_from_slice(&[0; 4]);
        c.encode(&mut self.one);
        let len = u32::try_from(self.one.len() - 5).map_err(|_| ProtocolError::TooLargeToSend {
            len_bytes: self.one.len(),
            max_bytes: self.max_frame_bytes,
        })?;
        self.one[1..5].copy_from_slice(&len.to_le_bytes());
        self.add_one(out)
    }

    /// [`Self::push`] for a dispatch the tap already wrote as rows; `d` is left to be refilled
    /// ([`EncodedDispatch::refill`]) by the tap's next dispatch.
    pub fn push_dispatch(
        &mut self,
        d: &mut EncodedDispatch,
        out: &mut Vec<u8>,
        cut: &mut dyn FnMut(u64, Vec<AccessReport>),
    ) -> Result<(), ProtocolError> {
        let mut mapping_state = None;
        let lists = d.mappings.take();
        if let Some(m) = d.report.mappings.as_mut() {
            let same = match (&self.shared, &lists) {
                (Some((_, s)), Some(l)) => Arc::ptr_eq(s, l) || **s == **l,
                (Some((_, s)), None) => s.same_as(m),
                (None, _) => false,
            };
            let id = match &self.shared {
                Some((id, _)) if same => {
                    m.runs.clear();
                    m.pieces.clear();
                    m.left_out.clear();
                    *id
                }
                _ => {
                    let id = self.next_id;
                    self.next_id += 1;
                    let s = lists.unwrap_or_else(|| Arc::new(SharedMappings::take_from(m)));
                    m.runs.clear();
                    m.pieces.clear();
                    m.left_out.clear();
                    self.add(
                        &ToDebugger::MappingState {
                            id,
                            mappings: Box::new((*s).clone()),
                        },
                        out,
                    )?;
                    self.shared = Some((id, s));
                    id
                }
            };
            mapping_state = Some(id);
        }
        if let Some(full) = d.cut.take() {
            cut(d.index, full);
        }
        self.one.clear();
        self.one.push(MSG_DISPATCH_PACKED);
        self.one.extend_from_slice(&[0; 4]);
        message::encode(
            d.index,
            &d.input,
            &d.report,
            mapping_state,
            d.accesses_left_out,
            &d.accesses,
            &mut self.one,
        )
        .map_err(|e| malformed(format!("encoding a dispatch message: {e}")))?;
        let len = u32::try_from(self.one.len() - 5).map_err(|_| ProtocolError::TooLargeToSend {
            len_bytes: self.one.len(),
            max_bytes: self.max_frame_bytes,
        })?;
        self.one[1..5].copy_from_slice(&len.to_le_bytes());
        self.add_one(out)?;
        d.accesses.clear();
        Ok(())
    }

    /// Adds a message that is not a dispatch or a checkpoint (message kind [`MSG_TAGGED`]).
    fn add(&mut self, message: &ToDebugger, out: &mut Vec<u8>) -> Result<(), ProtocolError> {
        self.one.clear();
        self.one.push(MSG_TAGGED);
        rmp_serde::encode::write_named(&mut self.one, message)
            .map_err(|e| malformed(format!("encoding a {} message: {e}", message.kind())))?;
        self.add_one(out)
    }

    /// Moves the message in `one` into the frame being built.
    fn add_one(&mut self, out: &mut Vec<u8>) -> Result<(), ProtocolError> {
        let room = (self.max_frame_bytes as usize).saturating_sub(BINARY_HEADER_BYTES + 4);
        if self.one.len() > room {
            return Err(ProtocolError::TooLargeToSend {
                len_bytes: self.one.len(),
                max_bytes: self.max_frame_bytes,
            });
        }
        if self.body.len() + self.one.len() > room || self.count == MAX_MESSAGES_PER_FRAME {
            self.finish_frame(out);
        }
        self.body.extend_from_slice(&self.one);
        self.count += 1;
        if self.body.len() >= FRAME_TARGET_BYTES {
            self.finish_frame(out);
        }
        Ok(())
    }

    /// Appends the frame being built (length, header, body) to `out`; nothing when it is empty.
    /// The body is stored compressed when that makes it smaller.
    pub fn finish_frame(&mut self, out: &mut Vec<u8>) {
        if self.count == 0 {
            return;
        }
        let compressed = if self.compress {
            lz4_flex::block::compress(&self.body)
        } else {
            Vec::new()
        };
        let (flags, stored_len) = if self.compress && compressed.len() + 4 < self.body.len() {
            (FLAG_LZ4, 4 + compressed.len())
        } else {
            (0, self.body.len())
        };
        let payload_len = (BINARY_HEADER_BYTES + stored_len) as u32;
        out.extend_from_slice(&payload_len.to_le_bytes());
        out.push(BINARY_MAGIC);
        out.push(flags);
        out.extend_from_slice(&self.count.to_le_bytes());
        if flags & FLAG_LZ4 != 0 {
            out.extend_from_slice(&(self.body.len() as u32).to_le_bytes());
            out.extend_from_slice(&compressed);
        } else {
            out.extend_from_slice(&self.body);
        }
        self.body.clear();
        self.count = 0;
    }
}

/// The body of a sized message (a `u32` LE length, then that many bytes) at `de`'s position in
/// `body`; `de` moves past it.
fn sized<'b>(
    de: &mut rmp_serde::Deserializer<rmp_serde::decode::ReadReader<Cursor<&'b [u8]>>>,
    body: &'b [u8],
    what: &'static str,
) -> Result<&'b [u8], columns::ColumnsError> {
    let from = de.position() as usize;
    let mut r = columns::Reader::new(body.get(from..).unwrap_or_default());
    let bytes = r
        .u32(what)
        .and_then(|len| r.take_bytes(what, u64::from(len)))?;
    de.get_mut().set_position((from + r.position()) as u64);
    Ok(bytes)
}

/// Reads frames on the debugger's side, JSON or binary, and puts the mapping state back into the
/// reports that name it; one per session.
#[derive(Debug, Default)]
pub struct Decoder {
    shared: Option<(u64, SharedMappings)>,
    /// The last mapping state's three lists in a version 2 record's encoding.
    shared_lists: Vec<u8>,
    body: Vec<u8>,
    keep_received: bool,
}

impl Decoder {
    /// A decoder that has seen no mapping state yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether dispatch messages are handed over as [`ToDebugger::Received`] (decoded only as far
    /// as a table row needs, their bytes kept for a store) instead of whole
    /// [`ToDebugger::Dispatch`]es. Off by default.
    pub fn set_keep_received(&mut self, on: bool) {
        self.keep_received = on;
    }

    /// Decodes one frame's payload, appending its messages to `out` in order. On `Err` nothing is
    /// appended.
    pub fn decode(
        &mut self,
        payload: &[u8],
        out: &mut Vec<ToDebugger>,
    ) -> Result<(), ProtocolError> {
        let start = out.len();
        let result = self.decode_inner(payload, out);
        if result.is_err() {
            out.truncate(start);
        }
        result
    }

    fn decode_inner(
        &mut self,
        payload: &[u8],
        out: &mut Vec<ToDebugger>,
    ) -> Result<(), ProtocolError> {
        match payload.first() {
            Some(b'{') => {
                let m = decode_to_debugger(payload)?;
                return self.restore(m, out);
            }
            Some(&BINARY_MAGIC) => {}
            Some(other) => {
                return Err(malformed(format!(
                    "a payload starting with byte {other:#04x}, neither JSON ('{{') nor binary ({BINARY_MAGIC:#04x})"
                )));
            }
            None => return Err(malformed("an empty payload")),
        }
        if payload.len() < BINARY_HEADER_BYTES {
            return Err(malformed(format!(
                "a binary payload of {} bytes, shorter than its {BINARY_HEADER_BYTES}-byte header",
                payload.len()
            )));
        }
        let flags = payload[1];
        if flags & !FLAG_LZ4 != 0 {
            return Err(malformed(format!("unknown flag bits {flags:#04x}")));
        }
        let count = u32::from_le_bytes([payload[2], payload[3], payload[4], payload[5]]);
        if count == 0 || count > MAX_MESSAGES_PER_FRAME {
            return Err(malformed(format!(
                "a frame of {count} messages (1 to {MAX_MESSAGES_PER_FRAME})"
            )));
        }
        let stored = &payload[BINARY_HEADER_BYTES..];
        let body: &[u8] = if flags & FLAG_LZ4 != 0 {
            let Some((len, block)) = stored.split_first_chunk::<4>() else {
                return Err(malformed("a compressed body without its length"));
            };
            let len = u32::from_le_bytes(*len);
            if len > MAX_BODY_BYTES {
                return Err(malformed(format!(
                    "a body of {len} bytes decompressed, more than the {MAX_BODY_BYTES} this side accepts"
                )));
            }
            self.body.clear();
            self.body.resize(len as usize, 0);
            let n = lz4_flex::block::decompress_into(block, &mut self.body)
                .map_err(|e| malformed(format!("the lz4 body does not decompress: {e}")))?;
            if n != len as usize {
                return Err(malformed(format!(
                    "the lz4 body decompressed to {n} bytes, not the {len} it announced"
                )));
            }
            &self.body
        } else {
            stored
        };
        let mut de = rmp_serde::Deserializer::new(Cursor::new(body));
        de.set_max_depth(256);
        let mut messages = Vec::with_capacity(count.min(1024) as usize);
        for i in 0..count {
            let at = |e: &dyn std::fmt::Display| malformed(format!("message {i} of {count}: {e}"));
            let mut kind = [0u8; 1];
            de.get_mut()
                .read_exact(&mut kind)
                .map_err(|e| at(&format!("its kind byte: {e}")))?;
            let m = match kind[0] {
                MSG_DISPATCH_PACKED => {
                    let from = de.position() as usize;
                    let mut r = columns::Reader::new(body.get(from..).unwrap_or_default());
                    let bytes = r
                        .u32("dispatch message length")
                        .and_then(|len| r.take_bytes("dispatch message", u64::from(len)))
                        .map_err(|e| at(&e))?;
                    de.get_mut().set_position((from + r.position()) as u64);
                    self.dispatch_message(bytes).map_err(|e| at(&e))?
                }
                MSG_CHECKPOINT => {
                    let from = de.position() as usize;
                    let mut r = columns::Reader::new(body.get(from..).unwrap_or_default());
                    let bytes = r
                        .u32("checkpoint length")
                        .and_then(|len| r.take_bytes("checkpoint", u64::from(len)))
                        .map_err(|e| at(&e))?;
                    de.get_mut().set_position((from + r.position()) as u64);
                    let c = crate::checkpoint::Checkpoint::decode(bytes).map_err(|e| at(&e))?;
                    ToDebugger::Checkpoint(Box::new(c))
                }
                MSG_FLIGHT => {
                    let bytes = sized(&mut de, body, "flight message").map_err(|e| at(&e))?;
                    crate::flight::decode(bytes).map_err(|e| at(&e))?
                }
                MSG_DEVICE_LOSS => {
                    let bytes = sized(&mut de, body, "loss report").map_err(|e| at(&e))?;
                    let report = dispatchscope_formats::loss::decode(bytes).map_err(|e| at(&e))?;
                    ToDebugger::DeviceLost(Box::new(report))
                }
                MSG_TAGGED => ToDebugger::deserialize(&mut de).map_err(|e| at(&e))?,
                other => {
                    wire_kinds::check(other, MSG_DISPATCH_PACKED).map_err(|e| at(&e))?;
                    return Err(at(&format!(
                        "unknown message kind {other}, from a target of another version (this side speaks protocol version {}: kinds {MSG_TAGGED}, {MSG_DISPATCH_PACKED} to {MSG_DEVICE_LOSS})",
                        crate::protocol::VERSION
                    )));
                }
            };
            messages.push(m);
        }
        let used = de.position();
        if used != body.len() as u64 {
            return Err(malformed(format!(
                "{} bytes after the frame's {count} messages",
                body.len() as u64 - used
            )));
        }
        for m in messages {
            self.restore(m, out)?;
        }
        Ok(())
    }

    /// One dispatch message: whole, or as [`crate::protocol::ReceivedDispatch`] when [`Self::set_keep_received`].
    fn dispatch_message(&self, bytes: &[u8]) -> Result<ToDebugger, columns::ColumnsError> {
        if !self.keep_received {
            return message::decode_exact(Rows::Packed, bytes).map(ToDebugger::from);
        }
        let (m, rows) = message::summary(bytes)?;
        let mut record = Vec::with_capacity(bytes.len() + 16 + self.shared_lists.len());
        message::encode_record(Rows::Packed, bytes, &[], &mut record);
        // The message starts after the magic, the version word and its length.
        let base = 12;
        let end = record.len();
        Ok(ToDebugger::Received(Box::new(
            crate::protocol::ReceivedDispatch {
                index: m.index,
                input: *m.input,
                report: *m.report,
                accesses_left_out: m.accesses_left_out,
                record,
                rows: base + rows.start..base + rows.end,
                lists: end..end,
                names_state: m.mapping_state,
            },
        )))
    }

    /// Keeps a mapping state, or puts the kept one back into a dispatch that names it.
    fn restore(
        &mut self,
        mut message: ToDebugger,
        out: &mut Vec<ToDebugger>,
    ) -> Result<(), ProtocolError> {
        match &mut message {
            ToDebugger::MappingState { id, mappings } => {
                self.shared_lists.clear();
                if self.keep_received {
                    let lists = message::MappingListsRef {
                        runs: &mappings.runs,
                        pieces: &mappings.pieces,
                        left_out: &mappings.left_out,
                    };
                    message::encode_mapping_lists(&lists, &mut self.shared_lists)
                        .map_err(|e| malformed(format!("mapping state {id}: {e}")))?;
                }
                self.shared = Some((*id, (**mappings).clone()));
            }
            ToDebugger::Received(d) => {
                if let Some(id) = d.names_state.take() {
                    match &self.shared {
                        Some((have, _)) if *have == id => {}
                        other => {
                            return Err(malformed(format!(
                                "dispatch {} names mapping state {id}, but {}",
                                d.index,
                                match other {
                                    None => "none was sent".to_owned(),
                                    Some((have, _)) => format!("the last one sent is {have}"),
                                }
                            )));
                        }
                    }
                    if d.report.mappings.is_none() {
                        return Err(malformed(format!(
                            "dispatch {} names mapping state {id}, but its report has no mapping state",
                            d.index
                        )));
                    }
                    let end = d.record.len();
                    d.record.truncate(end - 4);
                    let len = u32::try_from(self.shared_lists.len()).unwrap_or(u32::MAX);
                    d.record.extend_from_slice(&len.to_le_bytes());
                    let start = d.record.len();
                    d.record.extend_from_slice(&self.shared_lists);
                    d.lists = start..d.record.len();
                }
            }
            ToDebugger::Dispatch {
                index,
                report,
                mapping_state: Some(id),
                ..
            } => {
                let (Some((have, s)), Some(m)) = (&self.shared, report.mappings.as_mut()) else {
                    return Err(malformed(format!(
                        "dispatch {index} names mapping state {id}, but {}",
                        if self.shared.is_none() {
                            "none was sent"
                        } else {
                            "its report has no mapping state"
                        }
                    )));
                };
                if have != id {
                    return Err(malformed(format!(
                        "dispatch {index} names mapping state {id}, but the last one sent is {have}"
                    )));
                }
                s.restore_into(m);
            }
            _ => {}
        }
        out.push(message);
        Ok(())
    }
}
