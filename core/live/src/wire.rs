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
//! The messages are `count` values back to back, each one byte of kind then MessagePack as
//! `rmp-serde` writes it with field names (`to_vec_named`): kind [`MSG_DISPATCH`] (1) is a
//! [`ToDebugger::Dispatch`]'s fields as a map (`index`, `input`, `report`, `mapping_state`,
//! `accesses_left_out`), kind [`MSG_TAGGED`] (0) any other [`ToDebugger`] with its `type` tag, as
//! in the JSON. Dispatches go untagged because reading a tagged enum first buffers the whole
//! value in serde's generic form, which for a dispatch costs more than the rest of its decoding.
//! Both keep the JSON's serde shape, optional fields and all, so nothing in the report types needs
//! a second description.
//!
//! # Why MessagePack with names and lz4, not a layout of our own
//!
//! The report types skip empty fields (`skip_serializing_if`), flatten a tagged role into a slot
//! binding, write addresses as `"0x…"` strings and gain fields as the engine grows (an
//! `instrumented` field is on its way). A format that does not describe itself (bincode, postcard)
//! reads such types wrong or not at all; a columnar layout of our own would have to follow every
//! field by hand. MessagePack with names describes itself, so every serde attribute holds, and a
//! new field is carried with no change here. Field names and the hex strings repeat from access
//! to access and from dispatch to dispatch; lz4 over a frame of many messages removes most of
//! that (the demo's dispatches: see BENCHMARKS.md for bytes per dispatch, v1 against v2), at a
//! cost in time far below the encoding's.
//!
//! The [`Encoder`] also makes a report name its mapping state instead of repeating it, and cuts
//! access lists longer than the tap's bound (see [`crate::protocol`]); the [`Decoder`] puts the
//! state back. Neither ever panics on input: a bad payload is a [`ProtocolError::Malformed`]
//! naming what was wrong.

use std::io::Cursor;

use std::io::Read;

use serde::{Deserialize, Serialize};

use crate::protocol::{ProtocolError, SharedMappings, ToDebugger, decode_to_debugger};
use dispatchscope_core::input::DispatchInput;
use dispatchscope_core::report::{AccessReport, DispatchReport};

/// A [`ToDebugger::Dispatch`]'s fields, to write (borrowed).
#[derive(Serialize)]
struct DispatchRef<'a> {
    index: u64,
    input: &'a DispatchInput,
    report: &'a DispatchReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    mapping_state: Option<u64>,
    accesses_left_out: u64,
}

/// A [`ToDebugger::Dispatch`]'s fields, read.
#[derive(Deserialize)]
struct DispatchOwned {
    index: u64,
    input: Box<DispatchInput>,
    report: Box<DispatchReport>,
    #[serde(default)]
    mapping_state: Option<u64>,
    #[serde(default)]
    accesses_left_out: u64,
}

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
/// A message's kind byte: a [`ToDebugger::Dispatch`]'s fields.
pub const MSG_DISPATCH: u8 = 1;
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
    shared: Option<(u64, SharedMappings)>,
    next_id: u64,
    streamed_accesses: usize,
    /// The body being built, uncompressed.
    body: Vec<u8>,
    count: u32,
    /// One message's encoding, before it joins the body.
    one: Vec<u8>,
    max_frame_bytes: u32,
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
        }
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
        mut message: ToDebugger,
        out: &mut Vec<u8>,
        cut: &mut dyn FnMut(u64, Vec<AccessReport>),
    ) -> Result<(), ProtocolError> {
        if let ToDebugger::Dispatch {
            index,
            report,
            mapping_state,
            accesses_left_out,
            ..
        } = &mut message
        {
            if let Some(m) = report.mappings.as_mut() {
                let id = match &self.shared {
                    Some((id, s)) if s.same_as(m) => {
                        m.runs.clear();
                        m.pieces.clear();
                        m.left_out.clear();
                        *id
                    }
                    _ => {
                        let id = self.next_id;
                        self.next_id += 1;
                        let s = SharedMappings::take_from(m);
                        self.add(
                            &ToDebugger::MappingState {
                                id,
                                mappings: Box::new(s.clone()),
                            },
                            out,
                        )?;
                        self.shared = Some((id, s));
                        id
                    }
                };
                *mapping_state = Some(id);
            }
            if report.accesses.len() > self.streamed_accesses {
                let kept = report.accesses[..self.streamed_accesses].to_vec();
                let full = std::mem::replace(&mut report.accesses, kept);
                *accesses_left_out = (full.len() - self.streamed_accesses) as u64;
                cut(*index, full);
            }
        }
        self.add(&message, out)
    }

    fn add(&mut self, message: &ToDebugger, out: &mut Vec<u8>) -> Result<(), ProtocolError> {
        self.one.clear();
        let written = match message {
            ToDebugger::Dispatch {
                index,
                input,
                report,
                mapping_state,
                accesses_left_out,
            } => {
                self.one.push(MSG_DISPATCH);
                let fields = DispatchRef {
                    index: *index,
                    input,
                    report,
                    mapping_state: *mapping_state,
                    accesses_left_out: *accesses_left_out,
                };
                rmp_serde::encode::write_named(&mut self.one, &fields)
            }
            other => {
                self.one.push(MSG_TAGGED);
                rmp_serde::encode::write_named(&mut self.one, other)
            }
        };
        written.map_err(|e| malformed(format!("encoding a {} message: {e}", message.kind())))?;
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
        let compressed = lz4_flex::block::compress(&self.body);
        let (flags, stored_len) = if compressed.len() + 4 < self.body.len() {
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

/// Reads frames on the debugger's side, JSON or binary, and puts the mapping state back into the
/// reports that name it; one per session.
#[derive(Debug, Default)]
pub struct Decoder {
    shared: Option<(u64, SharedMappings)>,
    body: Vec<u8>,
}

impl Decoder {
    /// A decoder that has seen no mapping state yet.
    pub fn new() -> Self {
        Self::default()
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
                MSG_DISPATCH => {
                    let d = DispatchOwned::deserialize(&mut de).map_err(|e| at(&e))?;
                    ToDebugger::Dispatch {
                        index: d.index,
                        input: d.input,
                        report: d.report,
                        mapping_state: d.mapping_state,
                        accesses_left_out: d.accesses_left_out,
                    }
                }
                MSG_TAGGED => ToDebugger::deserialize(&mut de).map_err(|e| at(&e))?,
                other => return Err(at(&format!("unknown message kind {other}"))),
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

    /// Keeps a mapping state, or puts the kept one back into a dispatch that names it.
    fn restore(
        &mut self,
        mut message: ToDebugger,
        out: &mut Vec<ToDebugger>,
    ) -> Result<(), ProtocolError> {
        match &mut message {
            ToDebugger::MappingState { id, mappings } => {
                self.shared = Some((*id, (**mappings).clone()));
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
