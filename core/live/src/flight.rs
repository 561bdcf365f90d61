//! Dispatches in flight and a lost device on the live wire (protocol version 4): an emulator that
//! prepares many dispatches before completing them (`Engine::prepare` … `Engine::complete`, in
//! the order prepared) tells an attached debugger each one's state as it changes, so that the
//! debugger lists a dispatch as soon as it is prepared, long before its report comes.
//!
//! - *Prepared* ([`ToDebugger::Prepared`]): the tap's [`crate::Tap::after_prepare`]; index, mode,
//!   program, label. Droppable as a dispatch is (a full queue drops and counts it): the report of
//!   the same index still comes, and a debugger takes any report or failure of index N as the end
//!   of every dispatch in flight up to N (they complete in the order prepared).
//! - *Abandoned* ([`ToDebugger::Abandoned`]): [`crate::Tap::abandoned`]; never dropped (a
//!   debugger would list the dispatch in flight for ever).
//! - *Lost* ([`ToDebugger::DeviceLost`], message kind [`crate::wire::MSG_DEVICE_LOSS`]):
//!   [`crate::Tap::device_lost`], the engine's whole loss report; never dropped. Its bytes are a
//!   DEVICE_LOSS record's payload ([`dispatchscope_formats::loss`]), which a live store writes
//!   unchanged.
//!
//! Completed needs no message of its own: it is the dispatch's report (message kind 4).
//!
//! # Layout of message kind [`crate::wire::MSG_FLIGHT`] (after its `u32` LE length)
//!
//! | bytes | field | meaning |
//! |---|---|---|
//! | 0 | version `u8` | [`FLIGHT_VERSION`] (1); a reader refuses any other |
//! | 1 | state `u8` | [`STATE_PREPARED`] or [`STATE_ABANDONED`] |
//! | 2..10 | index `u64` LE | the dispatch |
//! | 10 | mode `u8` | prepared only: 0 bound, 1 device-addressed, 2 refused |
//! | 11..19 | program `u64` LE | prepared only: the program's guest address |
//! | 19..21 | label length `u16` LE | prepared only: at most [`MAX_LABEL_BYTES`] |
//! | 21.. | label | prepared only: UTF-8 |
//!
//! Nothing follows the last field: a byte more is an error, as is a byte less. Every bad byte is
//! a named [`FlightError`]; nothing here panics on input.
//!
//! What the game thread pays: [`FlightNote`] is what the tap queues (no encoding there, and no
//! allocation once warm: the label is an `Arc<str>` the tap keeps a program, cloned by a count);
//! the writer thread encodes it ([`FlightNote::encode`]).

use std::sync::Arc;

use thiserror::Error;

use crate::protocol::ToDebugger;
use dispatchscope_core::report::Mode;

/// The version of a flight message this build writes and reads (kept with every other version
/// number in `dispatchscope_formats::versions`).
pub use dispatchscope_formats::versions::FLIGHT_VERSION;
/// State: prepared, in flight.
pub const STATE_PREPARED: u8 = 1;
/// State: abandoned, never to complete.
pub const STATE_ABANDONED: u8 = 2;
/// The longest label a flight message carries (a longer one is cut at a character boundary).
pub const MAX_LABEL_BYTES: usize = u16::MAX as usize;

/// A change of a dispatch in flight, as the tap queues it for the writer thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FlightNote {
    /// Prepared: in flight until its report (or an abandon, or the loss).
    Prepared {
        /// The dispatch's index.
        index: u64,
        /// How it was planned.
        mode: Mode,
        /// Its program's guest address.
        program: u64,
        /// Its label, shared with the tap's copy.
        label: Arc<str>,
    },
    /// Abandoned: it will not complete.
    Abandoned {
        /// The dispatch's index.
        index: u64,
    },
}

/// Why a flight message could not be read.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum FlightError {
    /// The message ends before a field.
    #[error("a flight message cut short: {what} needs {need} bytes at byte {at}, {have} are left")]
    Truncated {
        /// The field.
        what: &'static str,
        /// Bytes it needs.
        need: usize,
        /// Where it starts.
        at: usize,
        /// Bytes left.
        have: usize,
    },
    /// A version this build does not read.
    #[error("a flight message of version {found}; this build reads version {FLIGHT_VERSION}")]
    Version {
        /// The version byte.
        found: u8,
    },
    /// A state this build does not know.
    #[error(
        "a flight message of state {found} ({STATE_PREPARED} prepared, {STATE_ABANDONED} abandoned)"
    )]
    State {
        /// The state byte.
        found: u8,
    },
    /// A mode code this build does not know.
    #[error("dispatch {index} prepared in mode {found} (0 bound, 1 device-addressed, 2 refused)")]
    Mode {
        /// The dispatch.
        index: u64,
        /// The mode byte.
        found: u8,
    },
    /// A label that is not UTF-8.
    #[error("dispatch {index}'s label of {len} bytes is not UTF-8")]
    Label {
        /// The dispatch.
        index: u64,
        /// Its length.
        len: usize,
    },
    /// Bytes after the last field.
    #[error("{extra} bytes after a flight message's last field")]
    Trailing {
        /// How many.
        extra: usize,
    },
}

fn mode_code(mode: Mode) -> u8 {
    match mode {
        Mode::Bound => 0,
        Mode::DeviceAddressed => 1,
        Mode::Refused => 2,
    }
}

fn mode_of(code: u8) -> Option<Mode> {
    match code {
        0 => Some(Mode::Bound),
        1 => Some(Mode::DeviceAddressed),
        2 => Some(Mode::Refused),
        _ => None,
    }
}

impl FlightNote {
    /// The dispatch it is about.
    pub fn index(&self) -> u64 {
        match self {
            FlightNote::Prepared { index, .. } | FlightNote::Abandoned { index } => *index,
        }
    }

    /// Appends the message (the layout in the module docs) to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(FLIGHT_VERSION);
        match self {
            FlightNote::Prepared {
                index,
                mode,
                program,
                label,
            } => {
                out.push(STATE_PREPARED);
                out.extend_from_slice(&index.to_le_bytes());
                out.push(mode_code(*mode));
                out.extend_from_slice(&program.to_le_bytes());
                let mut end = label.len().min(MAX_LABEL_BYTES);
                while !label.is_char_boundary(end) {
                    end -= 1;
                }
                out.extend_from_slice(&(end as u16).to_le_bytes());
                out.extend_from_slice(&label.as_bytes()[..end]);
            }
            FlightNote::Abandoned { index } => {
                out.push(STATE_ABANDONED);
                out.extend_from_slice(&index.to_le_bytes());
            }
        }
    }

    /// The message a debugger reads for it.
    pub fn to_message(&self) -> ToDebugger {
        match self {
            FlightNote::Prepared {
                index,
                mode,
                program,
                label,
            } => ToDebugger::Prepared {
                index: *index,
                mode: *mode,
                program: *program,
                label: label.to_string(),
            },
            FlightNote::Abandoned { index } => ToDebugger::Abandoned { index: *index },
        }
    }
}

/// Reads a message [`FlightNote::encode`] wrote, as the [`ToDebugger::Prepared`] or
/// [`ToDebugger::Abandoned`] it says.
pub fn decode(bytes: &[u8]) -> Result<ToDebugger, FlightError> {
    let mut c = Cursor { bytes, at: 0 };
    let version = c.u8("the version")?;
    if version != FLIGHT_VERSION {
        return Err(FlightError::Version { found: version });
    }
    let state = c.u8("the state")?;
    let index = c.u64("the index")?;
    let m = match state {
        STATE_PREPARED => {
            let code = c.u8("the mode")?;
            let mode = mode_of(code).ok_or(FlightError::Mode { index, found: code })?;
            let program = c.u64("the program")?;
            let len = usize::from(c.u16("the label's length")?);
            let label = c.take("the label", len)?;
            let label =
                std::str::from_utf8(label).map_err(|_| FlightError::Label { index, len })?;
            ToDebugger::Prepared {
                index,
                mode,
                program,
                label: label.to_owned(),
            }
        }
        STATE_ABANDONED => ToDebugger::Abandoned { index },
        found => return Err(FlightError::State { found }),
    };
    let extra = bytes.len() - c.at;
    if extra > 0 {
        return Err(FlightError::Trailing { extra });
    }
    Ok(m)
}

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, what: &'static str, need: usize) -> Result<&'a [u8], FlightError> {
        let have = self.bytes.len() - self.at;
        if need > have {
            return Err(FlightError::Truncated {
                what,
                need,
                at: self.at,
                have,
            });
        }
        let s = &self.bytes[self.at..self.at + need];
        self.at += need;
        Ok(s)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, FlightError> {
        Ok(self.take(what, 1)?[0])
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, FlightError> {
        let b = self.take(what, 2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, FlightError> {
        let mut w = [0u8; 8];
        w.copy_from_slice(self.take(what, 8)?);
        Ok(u64::from_le_bytes(w))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    fn check(note: FlightNote) {
        let mut b = Vec::new();
        note.encode(&mut b);
        assert_eq!(decode(&b).unwrap(), note.to_message(), "{note:?}");
        // Every cut is named, never a panic.
        for n in 0..b.len() {
            let e = decode(&b[..n]).unwrap_err();
            assert!(
                matches!(e, FlightError::Truncated { .. }),
                "cut at {n}: {e}"
            );
        }
        b.push(0);
        assert_eq!(decode(&b).unwrap_err(), FlightError::Trailing { extra: 1 });
    }

    #[test]
    fn flight_messages_round_trip_and_every_cut_is_named() {
        for mode in [Mode::Bound, Mode::DeviceAddressed, Mode::Refused] {
            check(FlightNote::Prepared {
                index: 7,
                mode,
                program: 0x4000_03e1_9200,
                label: Arc::from("run 305 update · ray"),
            });
        }
        check(FlightNote::Prepared {
            index: u64::MAX,
            mode: Mode::Bound,
            program: 0,
            label: Arc::from(""),
        });
        check(FlightNote::Abandoned { index: 3 });
    }

    #[test]
    fn bad_flight_bytes_are_named_errors() {
        let mut b = Vec::new();
        FlightNote::Prepared {
            index: 5,
            mode: Mode::Bound,
            program: 1,
            label: Arc::from("ab"),
        }
        .encode(&mut b);
        let with = |at: usize, v: u8| {
            let mut c = b.clone();
            c[at] = v;
            decode(&c).unwrap_err()
        };
        assert_eq!(with(0, 9), FlightError::Version { found: 9 });
        assert_eq!(with(1, 0), FlightError::State { found: 0 });
        assert_eq!(with(10, 3), FlightError::Mode { index: 5, found: 3 });
        assert_eq!(with(21, 0xff), FlightError::Label { index: 5, len: 2 });
        assert!(with(0, 9).to_string().contains("version 9"));
        // A label past the bound is cut at a character boundary, not refused.
        let long: String = "é".repeat(MAX_LABEL_BYTES);
        let mut b = Vec::new();
        FlightNote::Prepared {
            index: 1,
            mode: Mode::Refused,
            program: 2,
            label: Arc::from(long.as_str()),
        }
        .encode(&mut b);
        let ToDebugger::Prepared { label, .. } = decode(&b).unwrap() else {
            panic!("not prepared")
        };
        assert_eq!(label.len(), MAX_LABEL_BYTES - 1);
    }
}
