//! Checkpoints of engine state in a live session: guest memory's page states and targets, and the
//! chunk table, sent when they change, so that a debugger's Memory and Chunk table panels are
//! rebuilt for any recorded dispatch from two records, as a file capture's are
//! (`dispatchscope_formats::checkpoint`).
//!
//! # How the target knows, and what the game thread pays
//!
//! After each dispatch the tap reads two things: [`GuestMemory::state_changes`](dispatchscope_core::memory::GuestMemory::state_changes) (one load; it
//! moves with every change of a page's state or a target, in events and in the dispatch's own
//! commits, write-backs and hand-offs) and the dispatch's [`TableReport`](dispatchscope_core::report::TableReport) (the table changes only
//! when a dispatch inserts, removes or rebuilds, which its report says). When neither moved since
//! the last checkpoint that went into the queue, nothing more happens. When one did, the game
//! thread copies what changed and queues the copy *together with the dispatch*, as one item: both
//! go into the bounded queue or neither does. What changed is, for memory, the runs over the pages
//! the engine's log says changed since the count last queued ([`MemoryDelta::since`], over
//! [`GuestMemory::changed_since`](dispatchscope_core::memory::GuestMemory::changed_since)), and
//! for the table the slots the dispatch changed; where the log no longer reaches back, or the
//! writer holds no state to change, the whole state is copied ([`MemoryState::of`]: one pass over
//! the reservations' runs, not their pages; [`TableImage::of`]: one copy of the slots). Encoding
//! (each state as a delta against the last one sent, or whole) is the writer thread's.
//!
//! The whole copies are bounded by a budget (the copies of changes are not: they cost what
//! changed): the game thread spends at most
//! [`crate::TapConfig::checkpoint_share`] of its time making them (a bucket of time that fills at
//! that share of the wall clock, at most [`CHECKPOINT_BURST`]); a change that finds the bucket
//! empty is sent as *unknown* instead (a few bytes, no copy), and the state is copied at the first
//! dispatch after the bucket refills. Measured figures are in BENCHMARKS.md.
//!
//! # Why a dropped checkpoint never shows a wrong state
//!
//! A checkpoint is queued with the dispatch that left the state. Under back-pressure the pair is
//! dropped whole (and counted, as every dropped message is): the debugger never sees that
//! dispatch, and the tap, whose state is still unsent, copies it again after the next dispatch
//! and queues it with that one. So every dispatch a debugger records is followed by the state it
//! left whenever that state differs from the one recorded before it. Where the state is not known
//! (the budget, a state too large for a frame, a dispatch the writer could not send), the
//! checkpoint says *unknown* and the store writes a `MEMORY_UNKNOWN` or `TABLE_UNKNOWN` record: the
//! panels say so from that dispatch until the next known state.
//!
//! # Layout of message kind [`crate::wire::MSG_CHECKPOINT`] (after its `u32` LE length)
//!
//! | bytes | field | meaning |
//! |---|---|---|
//! | 0 | version `u8` | [`CHECKPOINT_VERSION`] (2); a reader refuses any other (version 1's memory part was JSON alone) |
//! | 1..9 | dispatch `u64` LE | the dispatch that left this state (sent right after it) |
//! | 9 | parts `u8` | 1 or 2 |
//! | 10.. | parts | each: kind `u8` ([`PART_MEMORY`], [`PART_TABLE`], [`PART_MEMORY_UNKNOWN`], [`PART_TABLE_UNKNOWN`]), length `u32` LE, bytes |
//!
//! A memory part is a `MEMORY_STATE` record's payload (whole, or a delta against the last memory
//! part of the session: [`MemoryDelta`]'s binary form), a table part a `TABLE_STATE` record's
//! (full, or a delta against the last table part of the session), an unknown part its reason
//! (UTF-8, at most [`MAX_REASON_BYTES`]); the store writes them unchanged. Each state appears at most once.
//! Every bad byte is a named [`CheckpointError`]; nothing here panics on input.

use std::time::{Duration, Instant};

use thiserror::Error;

use dispatchscope_core::backend::Backend;
use dispatchscope_core::engine::Engine;
use dispatchscope_core::report::DispatchReport;
use dispatchscope_formats::checkpoint::{
    MemoryDelta, MemoryState, MemoryWriter, TableImage, TableWriter, check_memory_payload,
    check_table_payload,
};

/// The version of a checkpoint message this build writes and reads (kept with every other version
/// number in `dispatchscope_formats::versions`).
pub use dispatchscope_formats::versions::CHECKPOINT_VERSION;
/// Part kind: guest memory's state (a `MEMORY_STATE` payload).
pub const PART_MEMORY: u8 = 1;
/// Part kind: the chunk table (a `TABLE_STATE` payload).
pub const PART_TABLE: u8 = 2;
/// Part kind: guest memory's state is unknown from this dispatch on; the reason.
pub const PART_MEMORY_UNKNOWN: u8 = 3;
/// Part kind: the chunk table is unknown from this dispatch on; the reason.
pub const PART_TABLE_UNKNOWN: u8 = 4;
/// The longest reason an unknown part carries.
pub const MAX_REASON_BYTES: usize = 4096;
/// The most game-thread time the checkpoint budget saves up (what one burst of changes may take
/// before changes are sent as unknown).
pub const CHECKPOINT_BURST: Duration = Duration::from_millis(20);

/// One state in a [`Checkpoint`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StatePart {
    /// The record payload that holds it.
    Known(Vec<u8>),
    /// It is not known from this dispatch on, and why.
    Unknown(String),
}

/// The engine state a dispatch left, as a target sends it right after the dispatch: the states
/// that changed since the last checkpoint (or that became unknown).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    /// The dispatch that left it.
    pub dispatch: u64,
    /// Guest memory's state, if it changed.
    pub memory: Option<StatePart>,
    /// The chunk table, if it changed.
    pub table: Option<StatePart>,
}

/// Why a checkpoint message could not be read.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum CheckpointError {
    /// The message ends before a field.
    #[error("a checkpoint cut short: {what} needs {need} bytes at byte {at}, {have} are left")]
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
    #[error("a checkpoint of version {found}; this build reads version {CHECKPOINT_VERSION}")]
    Version {
        /// The version byte.
        found: u8,
    },
    /// A part count other than 1 or 2.
    #[error("a checkpoint of {parts} parts (1 or 2)")]
    Parts {
        /// The count.
        parts: u8,
    },
    /// A part kind this build does not know.
    #[error("checkpoint part {part}: unknown kind {kind}")]
    PartKind {
        /// The part's number.
        part: usize,
        /// Its kind byte.
        kind: u8,
    },
    /// One state twice.
    #[error("checkpoint part {part}: a second {state} part")]
    Twice {
        /// The part's number.
        part: usize,
        /// "memory" or "table".
        state: &'static str,
    },
    /// A memory part that is no memory state.
    #[error("checkpoint of dispatch {dispatch}: {message}")]
    Memory {
        /// The dispatch.
        dispatch: u64,
        /// What is wrong.
        message: String,
    },
    /// A table part that is no table state.
    #[error("checkpoint of dispatch {dispatch}: the table state: {message}")]
    Table {
        /// The dispatch.
        dispatch: u64,
        /// What is wrong.
        message: String,
    },
    /// A reason that is not UTF-8 or too long.
    #[error(
        "checkpoint part {part}: a reason of {len} bytes that is not UTF-8 of at most {MAX_REASON_BYTES} bytes"
    )]
    Reason {
        /// The part's number.
        part: usize,
        /// Its length.
        len: usize,
    },
    /// Bytes after the last part.
    #[error("{extra} bytes after the checkpoint's last part")]
    Trailing {
        /// How many.
        extra: usize,
    },
}

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, what: &'static str, need: usize) -> Result<&'a [u8], CheckpointError> {
        let have = self.bytes.len() - self.at;
        if have < need {
            return Err(CheckpointError::Truncated {
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

    fn u8(&mut self, what: &'static str) -> Result<u8, CheckpointError> {
        Ok(self.take(what, 1)?[0])
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, CheckpointError> {
        let mut b = [0u8; 4];
        b.copy_from_slice(self.take(what, 4)?);
        Ok(u32::from_le_bytes(b))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, CheckpointError> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(what, 8)?);
        Ok(u64::from_le_bytes(b))
    }
}

impl Checkpoint {
    /// Whether it carries no part (nothing to send).
    pub fn is_empty(&self) -> bool {
        self.memory.is_none() && self.table.is_none()
    }

    /// Bytes of its parts' payloads.
    pub fn payload_bytes(&self) -> usize {
        [&self.memory, &self.table]
            .into_iter()
            .flatten()
            .map(|p| match p {
                StatePart::Known(b) => b.len(),
                StatePart::Unknown(w) => w.len(),
            })
            .sum()
    }

    /// Appends the message (the layout in the module docs) to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(CHECKPOINT_VERSION);
        out.extend_from_slice(&self.dispatch.to_le_bytes());
        let parts = [
            (&self.memory, PART_MEMORY, PART_MEMORY_UNKNOWN),
            (&self.table, PART_TABLE, PART_TABLE_UNKNOWN),
        ];
        out.push(parts.iter().filter(|(p, _, _)| p.is_some()).count() as u8);
        for (part, known, unknown) in parts {
            let (kind, bytes) = match part {
                None => continue,
                Some(StatePart::Known(b)) => (known, b.as_slice()),
                Some(StatePart::Unknown(w)) => {
                    let mut end = w.len().min(MAX_REASON_BYTES);
                    while !w.is_char_boundary(end) {
                        end -= 1;
                    }
                    (unknown, &w.as_bytes()[..end])
                }
            };
            out.push(kind);
            out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            out.extend_from_slice(bytes);
        }
    }

    /// Reads a message [`Self::encode`] wrote, checking every field and each state's payload
    /// (a memory state's runs against its reservations, a memory delta's every field, a table's
    /// header, slots and delta entries).
    pub fn decode(bytes: &[u8]) -> Result<Checkpoint, CheckpointError> {
        let mut c = Cursor { bytes, at: 0 };
        let version = c.u8("the version")?;
        if version != CHECKPOINT_VERSION {
            return Err(CheckpointError::Version { found: version });
        }
        let dispatch = c.u64("the dispatch")?;
        let parts = c.u8("the part count")?;
        if !(1..=2).contains(&parts) {
            return Err(CheckpointError::Parts { parts });
        }
        let mut out = Checkpoint {
            dispatch,
            memory: None,
            table: None,
        };
        for part in 0..parts as usize {
            let kind = c.u8("a part's kind")?;
            let len = c.u32("a part's length")? as usize;
            let body = c.take("a part's bytes", len)?;
            let (slot, state) = match kind {
                PART_MEMORY | PART_MEMORY_UNKNOWN => (&mut out.memory, "memory"),
                PART_TABLE | PART_TABLE_UNKNOWN => (&mut out.table, "table"),
                kind => return Err(CheckpointError::PartKind { part, kind }),
            };
            if slot.is_some() {
                return Err(CheckpointError::Twice { part, state });
            }
            *slot = Some(match kind {
                PART_MEMORY => {
                    check_memory_payload(body).map_err(|message| CheckpointError::Memory {
                        dispatch,
                        message: message.to_string(),
                    })?;
                    StatePart::Known(body.to_vec())
                }
                PART_TABLE => {
                    check_table_payload(body).map_err(|message| CheckpointError::Table {
                        dispatch,
                        message: message.to_string(),
                    })?;
                    StatePart::Known(body.to_vec())
                }
                _ => {
                    let why = std::str::from_utf8(body)
                        .ok()
                        .filter(|w| w.len() <= MAX_REASON_BYTES)
                        .ok_or(CheckpointError::Reason { part, len })?;
                    StatePart::Unknown(why.to_owned())
                }
            });
        }
        let extra = bytes.len() - c.at;
        if extra > 0 {
            return Err(CheckpointError::Trailing { extra });
        }
        Ok(out)
    }
}

/// A state as the game thread hands it to the writer: copied, or unknown and why.
#[derive(Debug)]
pub(crate) enum Copied<T> {
    State(T),
    Unknown(String),
}

/// What the tap copied out of the engine after a dispatch that changed its state, queued with
/// that dispatch.
#[derive(Debug)]
pub(crate) struct StateCopy {
    pub(crate) dispatch: u64,
    pub(crate) memory: Option<Copied<MemoryCopy>>,
    pub(crate) table: Option<Copied<TableCopy>>,
}

/// Guest memory as the tap copied it: whole, or (where the engine's log reaches back to the count
/// last queued) what changed since, so that a debugger attached to a game with 16 GiB mapped and
/// a write-watch toggling pages copies the runs over the toggled pages, not every run.
#[derive(Debug)]
pub(crate) enum MemoryCopy {
    /// The whole state, at [`GuestMemory::state_changes`](dispatchscope_core::memory::GuestMemory::state_changes) `changes`.
    Whole {
        /// The state.
        state: MemoryState,
        /// The count it was copied at.
        changes: u64,
    },
    /// What took the state from count `from` to `to`.
    Changes {
        /// The count they change.
        from: u64,
        /// The count they make.
        to: u64,
        /// The changes.
        delta: MemoryDelta,
    },
}

/// The chunk table as the tap copied it: whole, or (where the last table it queued is the one the
/// engine's last change started from) only the slots that change changed, so that a debugger
/// attached to a game with a 16 MiB table copies a few slots a dispatch, not the table.
#[derive(Debug)]
pub(crate) enum TableCopy {
    /// Every slot, of the table at `version` ([`dispatchscope_core::chunk_table::ChunkTable::version`]).
    Whole {
        /// The slots.
        image: TableImage,
        /// The table's version.
        version: u64,
    },
    /// The slots that took the table from version `from` to `to`: index and new value.
    Changes {
        /// The version they change.
        from: u64,
        /// The version they make.
        to: u64,
        /// The slots.
        slots: Vec<(usize, dispatchscope_core::chunk_table::TableSlot)>,
    },
}

/// What a tap remembers, on the game thread, of the state it queued this session.
#[derive(Debug)]
pub(crate) struct Tracker {
    session: Option<u64>,
    /// [`GuestMemory::state_changes`](dispatchscope_core::memory::GuestMemory::state_changes) when memory was last queued (`None`: not this session).
    memory_sent: Option<u64>,
    /// Whether the table was queued as it stands.
    table_sent: bool,
    /// The table version ([`dispatchscope_core::chunk_table::ChunkTable::version`]) last queued,
    /// whole or by its changes, this session.
    table_version: Option<u64>,
    /// The table version the last copy made, until it is queued ([`Self::queued_parts`]): a copy
    /// the queue dropped leaves `table_version` where it was, so that the next copy is whole
    /// rather than changes to a table the writer never got.
    table_copied: Option<u64>,
    /// Game-thread time the budget holds.
    bucket: Duration,
    refilled: Instant,
    share: f64,
}

impl Tracker {
    pub(crate) fn new(share: f64) -> Self {
        Self {
            session: None,
            memory_sent: None,
            table_sent: false,
            table_version: None,
            table_copied: None,
            // A share of 0 never copies: every change is sent as unknown.
            bucket: if share > 0.0 {
                CHECKPOINT_BURST
            } else {
                Duration::ZERO
            },
            refilled: Instant::now(),
            share: if share.is_finite() {
                share.clamp(0.0, 1.0)
            } else {
                0.0
            },
        }
    }

    /// The state to queue with dispatch `index` (whose report is `report`) of session `session`:
    /// `None` when nothing changed since the state last queued. Call [`Self::queued`] when it
    /// went into the queue.
    pub(crate) fn copy<B: Backend>(
        &mut self,
        session: u64,
        engine: &Engine<B>,
        report: &DispatchReport,
        index: u64,
    ) -> Option<StateCopy> {
        if self.session != Some(session) {
            self.session = Some(session);
            self.memory_sent = None;
            self.table_sent = false;
            self.table_version = None;
        }
        self.table_copied = None;
        if report
            .table
            .as_ref()
            .is_some_and(|t| t.rebuilt.is_some() || t.inserted > 0 || t.removed > 0)
        {
            self.table_sent = false;
        }
        let changes = engine.memory().state_changes();
        let memory_due = self.memory_sent != Some(changes);
        let table = engine.table().filter(|_| !self.table_sent);
        if !memory_due && table.is_none() {
            return None;
        }
        let now = Instant::now();
        let earned = now.duration_since(self.refilled).mul_f64(self.share);
        self.bucket = (self.bucket + earned).min(CHECKPOINT_BURST);
        self.refilled = now;
        let over = |what: &str| {
            format!(
                "the target's checkpoint budget ({:.1}% of its time) was spent, so the {what} after dispatch {index} was not copied; the next checkpoint sends it",
                self.share * 100.0
            )
        };
        let afford = !self.bucket.is_zero();
        let memory = memory_due.then(|| {
            let m = engine.memory();
            // Its changes: what changed, whatever the budget. The writer checks that it holds the
            // state they change (a copy the queue dropped is covered: the count stays the one
            // last queued).
            match self
                .memory_sent
                .and_then(|from| Some((from, MemoryDelta::since(m, from)?)))
            {
                Some((from, delta)) => Copied::State(MemoryCopy::Changes {
                    from,
                    to: changes,
                    delta,
                }),
                None if afford => Copied::State(MemoryCopy::Whole {
                    state: MemoryState::of(m),
                    changes,
                }),
                None => Copied::Unknown(over("memory state")),
            }
        });
        let table = table.map(|t| {
            use dispatchscope_core::chunk_table::Changed;
            let changes = match engine.table_changes() {
                Some((from, to, Changed::Slots(slots)))
                    if self.table_version == Some(from) && to == t.version() =>
                {
                    Some((from, slots))
                }
                _ => None,
            };
            match changes {
                // Its changes: a few slots, whatever the budget. The writer checks that it holds
                // the version they change (a copy the queue dropped would break the chain).
                Some((from, slots)) => {
                    self.table_copied = Some(t.version());
                    Copied::State(TableCopy::Changes {
                        from,
                        to: t.version(),
                        slots: slots
                            .iter()
                            .filter_map(|&i| t.slots().get(i).map(|s| (i, *s)))
                            .collect(),
                    })
                }
                None if afford => {
                    self.table_copied = Some(t.version());
                    Copied::State(TableCopy::Whole {
                        image: TableImage::of(t),
                        version: t.version(),
                    })
                }
                None => {
                    self.table_version = None;
                    Copied::Unknown(over("chunk table"))
                }
            }
        });
        let spent = now.elapsed();
        self.bucket = self.bucket.saturating_sub(spent);
        Some(StateCopy {
            dispatch: index,
            memory,
            table,
        })
    }

    /// A copy went into the queue with the engine's memory at `changes`: `(memory, table)` say
    /// which states it copied (they are sent); a state sent as unknown is still owed.
    pub(crate) fn queued_parts(&mut self, (memory, table): (bool, bool), changes: u64) {
        if memory {
            self.memory_sent = Some(changes);
        }
        if table {
            self.table_sent = true;
            self.table_version = self.table_copied.take();
        }
    }

    /// Forgets what was queued, so that the next dispatch sends every state (the writer could not
    /// send one).
    pub(crate) fn resend(&mut self) {
        self.memory_sent = None;
        self.table_sent = false;
        self.table_version = None;
        self.table_copied = None;
    }
}

/// The writer thread's side: encodes the copies of the dispatches it sent, each state as a delta
/// against the last one it sent (or whole), and says *unknown* where a state could not be sent.
#[derive(Debug, Default)]
pub(crate) struct Writer {
    tables: TableWriter,
    /// A state came as changes to one this writer does not hold: the game thread must copy the
    /// next ones whole ([`Writer::take_want_whole`]).
    want_whole: bool,
    /// The version of the table `tables` last took, if it holds one.
    table_version: Option<u64>,
    memories: MemoryWriter,
    /// The memory's state count `memories` last took, if it holds a state.
    memory_version: Option<u64>,
    /// The state of a dispatch that could not be sent is owed: the next dispatch sent says it is
    /// unknown unless it carries its own.
    owed: bool,
}

impl Writer {
    /// Whether the game thread must copy its states whole next (asked once).
    pub(crate) fn take_want_whole(&mut self) -> bool {
        std::mem::take(&mut self.want_whole)
    }

    /// Forgets the memory state sent: the next must be whole.
    fn reset_memory(&mut self) {
        self.memories.reset();
        self.memory_version = None;
    }

    /// The message to send after dispatch `copy.dispatch`, which was sent; `None` when the copies
    /// repeat what was sent. A part longer than `max_part_bytes` is sent as unknown.
    pub(crate) fn message(&mut self, copy: StateCopy, max_part_bytes: usize) -> Option<Checkpoint> {
        let too_large = |what: &str, n: usize| {
            StatePart::Unknown(format!(
                "the {what} after dispatch {} takes {n} bytes, more than the {max_part_bytes} a frame carries",
                copy.dispatch
            ))
        };
        let memory = copy.memory.and_then(|m| {
            let (sent, to) = match m {
                Copied::State(MemoryCopy::Whole { state, changes }) => {
                    (Ok(self.memories.next_state(&state)), changes)
                }
                Copied::State(MemoryCopy::Changes { from, to, delta }) => {
                    let sent = if self.memory_version == Some(from) {
                        self.memories.next_delta(&delta).map_err(|_| ())
                    } else {
                        Err(())
                    };
                    (sent, to)
                }
                Copied::Unknown(why) => {
                    self.reset_memory();
                    return Some(StatePart::Unknown(why));
                }
            };
            match sent {
                Ok(None) => {
                    self.memory_version = Some(to);
                    None
                }
                Ok(Some(bytes)) if bytes.len() <= max_part_bytes => {
                    self.memory_version = Some(to);
                    Some(StatePart::Known(bytes))
                }
                Ok(Some(bytes)) => {
                    self.reset_memory();
                    Some(too_large("memory state", bytes.len()))
                }
                // Not the state the changes change (none sent, or a copy between them dropped):
                // unknown until a whole one is, which the game thread is asked for.
                Err(()) => {
                    self.reset_memory();
                    self.want_whole = true;
                    Some(StatePart::Unknown(format!(
                        "guest memory after dispatch {} came as changes to a state this session did not send",
                        copy.dispatch
                    )))
                }
            }
        });
        let table = copy.table.and_then(|t| match t {
            Copied::State(TableCopy::Changes { from, to, slots }) => match (self.table_version
                == Some(from))
            .then(|| self.tables.next_changes(&slots))
            {
                Some(Ok(None)) => {
                    self.table_version = Some(to);
                    None
                }
                Some(Ok(Some(bytes))) if bytes.len() <= max_part_bytes => {
                    self.table_version = Some(to);
                    Some(StatePart::Known(bytes))
                }
                Some(Ok(Some(bytes))) => {
                    self.tables.reset();
                    self.table_version = None;
                    Some(too_large("chunk table", bytes.len()))
                }
                // Not the table the changes change (none sent, or a copy between them dropped):
                // unknown until a whole one is, which the game thread is asked for.
                _ => {
                    self.tables.reset();
                    self.table_version = None;
                    self.want_whole = true;
                    Some(StatePart::Unknown(format!(
                    "the chunk table after dispatch {} came as changes to a table this session did not send",
                    copy.dispatch
                )))
                }
            },
            Copied::State(TableCopy::Whole { image, version }) => {
                self.table_version = Some(version);
                let bytes = self.tables.next_image(image)?;
                if bytes.len() > max_part_bytes {
                    self.tables.reset();
                    self.table_version = None;
                    Some(too_large("chunk table", bytes.len()))
                } else {
                    Some(StatePart::Known(bytes))
                }
            }
            Copied::Unknown(why) => {
                self.tables.reset();
                self.table_version = None;
                Some(StatePart::Unknown(why))
            }
        });
        let mut c = Checkpoint {
            dispatch: copy.dispatch,
            memory,
            table,
        };
        self.settle(&mut c);
        (!c.is_empty()).then_some(c)
    }

    /// The message to send after dispatch `dispatch`, sent with no copy of its own: unknown
    /// states where one is owed.
    pub(crate) fn after(&mut self, dispatch: u64) -> Option<Checkpoint> {
        if !self.owed {
            return None;
        }
        let mut c = Checkpoint {
            dispatch,
            memory: None,
            table: None,
        };
        self.settle(&mut c);
        Some(c)
    }

    /// A dispatch that carried a copy could not be sent: its state is owed.
    pub(crate) fn not_sent(&mut self) {
        self.owed = true;
    }

    /// Fills the parts a previous unsent dispatch owes with unknown, once.
    fn settle(&mut self, c: &mut Checkpoint) {
        if !std::mem::take(&mut self.owed) {
            return;
        }
        let why = || {
            StatePart::Unknown(format!(
                "a dispatch before {} that changed this state could not be sent, so it is not known until the target sends it again",
                c.dispatch
            ))
        };
        if c.memory.is_none() {
            c.memory = Some(why());
            self.reset_memory();
        }
        if c.table.is_none() {
            c.table = Some(why());
            self.tables.reset();
            self.table_version = None;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]
mod tests {
    use super::*;
    use dispatchscope_core::chunk_table::ChunkTable;

    /// Bytes before the parts.
    const HEADER_BYTES: usize = 10;

    fn sample() -> Checkpoint {
        let memory = MemoryState {
            page_bytes: 0x1000,
            ..MemoryState::default()
        };
        let t = ChunkTable::build(0x1000, 8, &[(1, 0x1000), (2, 0x2000)]).unwrap();
        Checkpoint {
            dispatch: 41,
            memory: Some(StatePart::Known(MemoryDelta::whole_of(&memory).encode())),
            table: Some(StatePart::Known(TableImage::of(&t).encode())),
        }
    }

    #[test]
    fn a_checkpoint_round_trips() {
        for c in [
            sample(),
            Checkpoint {
                table: Some(StatePart::Unknown("budget spent".into())),
                ..sample()
            },
            Checkpoint {
                memory: None,
                ..sample()
            },
            // The JSON form older targets sent is still a memory part.
            Checkpoint {
                memory: Some(StatePart::Known(
                    dispatchscope_formats::checkpoint::encode_memory_state(&MemoryState {
                        page_bytes: 0x1000,
                        ..MemoryState::default()
                    }),
                )),
                ..sample()
            },
        ] {
            let mut bytes = Vec::new();
            c.encode(&mut bytes);
            assert_eq!(Checkpoint::decode(&bytes).unwrap(), c);
        }
    }

    /// A checkpoint travels in a binary frame as message kind 5, between other messages, and a
    /// frame cut anywhere inside it is a named error.
    #[test]
    fn a_checkpoint_round_trips_through_a_frame() {
        use crate::protocol::ToDebugger;
        use crate::wire::{Decoder, Encoder};
        for compress in [false, true] {
            let mut enc = Encoder::new(16, 1 << 20);
            enc.set_compress(compress);
            let mut out = Vec::new();
            let c = sample();
            let mut cut = |_: u64, _: Vec<_>| {};
            enc.push(ToDebugger::Attached { session: 1 }, &mut out, &mut cut)
                .unwrap();
            enc.push(
                ToDebugger::Checkpoint(Box::new(c.clone())),
                &mut out,
                &mut cut,
            )
            .unwrap();
            enc.push(
                ToDebugger::Stats(crate::protocol::Stats::default()),
                &mut out,
                &mut cut,
            )
            .unwrap();
            enc.finish_frame(&mut out);
            let payload = &out[4..];
            let mut got = Vec::new();
            Decoder::new().decode(payload, &mut got).unwrap();
            assert!(
                got.contains(&ToDebugger::Checkpoint(Box::new(c))),
                "{got:?}"
            );
            if !compress {
                for n in 6..payload.len() {
                    let mut got = Vec::new();
                    let e = Decoder::new().decode(&payload[..n], &mut got).unwrap_err();
                    assert!(!e.to_string().is_empty());
                    assert!(got.is_empty());
                }
            }
        }
    }

    /// Every truncation, every flipped byte of the header and every bad field is a named error,
    /// never a panic.
    #[test]
    fn every_bad_byte_is_named() {
        let mut bytes = Vec::new();
        sample().encode(&mut bytes);
        for n in 0..bytes.len() {
            let e = Checkpoint::decode(&bytes[..n]).unwrap_err();
            assert!(!e.to_string().is_empty());
        }
        for i in 0..bytes.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut b = bytes.clone();
                b[i] ^= flip;
                // A flip inside a payload may leave a valid one (a slot's address); none panics.
                let _ = Checkpoint::decode(&b);
            }
        }
        let named = |b: &[u8]| Checkpoint::decode(b).unwrap_err();
        let mut b = bytes.clone();
        // Version 1 (memory parts in JSON alone) and a future one are refused by name.
        for found in [1, CHECKPOINT_VERSION + 1] {
            b[0] = found;
            assert_eq!(named(&b), CheckpointError::Version { found });
            assert!(
                named(&b)
                    .to_string()
                    .contains(&format!("this build reads version {CHECKPOINT_VERSION}")),
                "{}",
                named(&b)
            );
        }
        let mut b = bytes.clone();
        b[9] = 3;
        assert_eq!(named(&b), CheckpointError::Parts { parts: 3 });
        let mut b = bytes.clone();
        b[10] = 9;
        assert!(matches!(
            named(&b),
            CheckpointError::PartKind { kind: 9, .. }
        ));
        let mut b = bytes.clone();
        b[10] = PART_TABLE;
        assert!(matches!(named(&b), CheckpointError::Table { .. }));
        let mut b = bytes.clone();
        b.push(0);
        assert_eq!(named(&b), CheckpointError::Trailing { extra: 1 });
        // A second memory part.
        let c = Checkpoint {
            table: None,
            ..sample()
        };
        let mut one = Vec::new();
        c.encode(&mut one);
        let part = one[HEADER_BYTES..].to_vec();
        one[9] = 2;
        one.extend_from_slice(&part);
        assert!(matches!(
            named(&one),
            CheckpointError::Twice {
                state: "memory",
                ..
            }
        ));
        // A reason that is not UTF-8.
        let mut b = vec![CHECKPOINT_VERSION];
        b.extend_from_slice(&7u64.to_le_bytes());
        b.extend_from_slice(&[1, PART_MEMORY_UNKNOWN, 2, 0, 0, 0, 0xff, 0xfe]);
        assert!(matches!(named(&b), CheckpointError::Reason { .. }));
        // A memory state whose runs do not cover its reservation.
        let mut b = vec![CHECKPOINT_VERSION];
        b.extend_from_slice(&7u64.to_le_bytes());
        let m = br#"{"page_bytes":4096,"reservations":[{"range":{"start":"0x0","end":"0x2000"},"runs":[{"pages":1,"page":{"guest":{"readable":true,"writable":true},"committed":true,"backing":"private","protection":"read-write","guarded":false,"written":false}}]}],"targets":[]}"#;
        b.push(1);
        b.push(PART_MEMORY);
        b.extend_from_slice(&(m.len() as u32).to_le_bytes());
        b.extend_from_slice(m);
        let e = named(&b);
        assert!(
            matches!(e, CheckpointError::Memory { dispatch: 7, .. }),
            "{e}"
        );
    }

    /// The writer skips what repeats, sends a table as a delta after the first, sends an oversize
    /// state as unknown, and follows an unsent dispatch with unknown states once.
    #[test]
    fn the_writer_sends_changes_and_owes_unsent_ones() {
        let mut w = Writer::default();
        let memory = MemoryState {
            page_bytes: 0x1000,
            ..MemoryState::default()
        };
        let mut t = ChunkTable::build(0x1000, 8, &[(1, 0x1000)]).unwrap();
        let copy = |d, m: &MemoryState, t: &ChunkTable| StateCopy {
            dispatch: d,
            memory: Some(Copied::State(MemoryCopy::Whole {
                state: m.clone(),
                changes: 0,
            })),
            table: Some(Copied::State(TableCopy::Whole {
                image: TableImage::of(t),
                version: t.version(),
            })),
        };
        let first = w.message(copy(0, &memory, &t), 1 << 20).unwrap();
        assert!(matches!(first.memory, Some(StatePart::Known(_))));
        assert!(
            w.message(copy(1, &memory, &t), 1 << 20).is_none(),
            "nothing changed"
        );
        t.insert(5, 0x5000).unwrap();
        let second = w.message(copy(2, &memory, &t), 1 << 20).unwrap();
        assert!(second.memory.is_none());
        let Some(StatePart::Known(delta)) = &second.table else {
            panic!("{second:?}")
        };
        assert!(check_table_payload(delta).unwrap(), "a delta");
        t.insert(6, 0x6000).unwrap();
        let big = w.message(copy(3, &memory, &t), 8).unwrap();
        assert!(matches!(big.table, Some(StatePart::Unknown(ref w)) if w.contains("bytes")));
        w.not_sent();
        let owed = w.after(4).unwrap();
        assert!(matches!(owed.memory, Some(StatePart::Unknown(_))));
        assert!(matches!(owed.table, Some(StatePart::Unknown(_))));
        assert!(w.after(5).is_none(), "owed once");
        let again = w.message(copy(6, &memory, &t), 1 << 20).unwrap();
        let Some(StatePart::Known(full)) = &again.table else {
            panic!("{again:?}")
        };
        assert!(
            !check_table_payload(full).unwrap(),
            "a full table after an unknown one"
        );
        assert!(matches!(again.memory, Some(StatePart::Known(_))));
    }

    /// The tap copies the slots a dispatch changed, not the table, once the writer holds the table
    /// they change; the writer sends them as a delta of those slots; changes to a table it does
    /// not hold are unknown and ask for a whole one.
    #[test]
    fn a_table_follows_by_the_slots_its_last_change_changed() {
        use dispatchscope_core::addr::ByteRange;
        use dispatchscope_core::input::{Backing, HostProtection, Reason};
        use dispatchscope_core::{DeviceLimits, DispatchInput, Engine, Event};
        let mut e = Engine::cpu(DeviceLimits::default()).unwrap();
        let base = 0x1_0000_0000u64;
        e.apply(&Event::Reserve {
            range: ByteRange::new(base, base + (256 << 20)),
            readable: true,
            writable: true,
            committed: true,
            backing: Backing::Private,
            host_base: None,
        })
        .unwrap();
        let input = DispatchInput {
            program: 1,
            reasons: vec![Reason::D758],
            ..DispatchInput::default()
        };
        let mut tracker = Tracker::new(1.0);
        let mut w = Writer::default();
        let r = e.dispatch(&input).unwrap();
        let first = tracker.copy(1, &e, &r, 0).unwrap();
        assert!(matches!(
            first.table,
            Some(Copied::State(TableCopy::Whole { .. }))
        ));
        tracker.queued_parts((true, true), e.memory().state_changes());
        let m = w.message(first, 64 << 20).unwrap();
        assert!(matches!(m.table, Some(StatePart::Known(_))));
        // One page made read-only: one slot changes.
        e.apply(&Event::HostProtect {
            range: ByteRange::new(base + 0x5000, base + 0x6000),
            protection: HostProtection::Read,
        })
        .unwrap();
        let r = e.dispatch(&input).unwrap();
        let copy = tracker.copy(1, &e, &r, 1).unwrap();
        let Some(Copied::State(TableCopy::Changes { slots, .. })) = &copy.table else {
            panic!("{:?}", copy.table)
        };
        assert_eq!(
            slots.len(),
            1,
            "the one slot, not the {} of the table",
            e.table().unwrap().capacity()
        );
        tracker.queued_parts((true, true), e.memory().state_changes());
        let m = w.message(copy, 64 << 20).unwrap();
        let Some(StatePart::Known(delta)) = &m.table else {
            panic!("{m:?}")
        };
        assert!(check_table_payload(delta).unwrap(), "a delta");
        assert!(
            delta.len() < 256,
            "one slot's entry and a header: {} bytes",
            delta.len()
        );
        // A copy the queue dropped: the next copy is the whole table, never changes to a table the
        // writer did not get.
        let toggle = |e: &mut Engine, p: HostProtection| {
            e.apply(&Event::HostProtect {
                range: ByteRange::new(base + 0x9000, base + 0xa000),
                protection: p,
            })
            .unwrap();
            e.dispatch(&input).unwrap()
        };
        let r = toggle(&mut e, HostProtection::Read);
        let dropped = tracker.copy(1, &e, &r, 2).unwrap();
        drop(dropped);
        let r = toggle(&mut e, HostProtection::ReadWrite);
        let next = tracker.copy(1, &e, &r, 3).unwrap();
        assert!(
            matches!(next.table, Some(Copied::State(TableCopy::Whole { .. }))),
            "changes past a dropped copy are never sent: {:?}",
            next.table
        );
        tracker.queued_parts((true, true), e.memory().state_changes());
        // The table is back as the writer last sent it: nothing to send, and nothing unknown.
        let m = w.message(next, 64 << 20);
        assert!(
            m.as_ref()
                .is_none_or(|m| !matches!(m.table, Some(StatePart::Unknown(_)))),
            "{m:?}"
        );
        assert!(!w.take_want_whole());
        // A writer that never held the table cannot take changes: unknown, and a whole one asked for.
        let mut fresh = Writer::default();
        e.apply(&Event::HostProtect {
            range: ByteRange::new(base + 0x5000, base + 0x6000),
            protection: HostProtection::ReadWrite,
        })
        .unwrap();
        let r = e.dispatch(&input).unwrap();
        let copy = tracker.copy(1, &e, &r, 2).unwrap();
        let m = fresh.message(copy, 64 << 20).unwrap();
        assert!(matches!(m.table, Some(StatePart::Unknown(_))));
        assert!(fresh.take_want_whole());
    }

    /// Guest memory follows by what changed once the writer holds a state: the tap copies the
    /// runs over the toggled pages (a few, not the thousands of a 16 GiB state with a busy
    /// write-watch), the writer sends them as a delta; a copy the queue dropped is covered by the
    /// next; changes to a state the writer does not hold are unknown and ask for a whole one.
    #[test]
    fn memory_follows_by_what_changed() {
        use dispatchscope_core::addr::ByteRange;
        use dispatchscope_core::input::{Backing, Reason};
        use dispatchscope_core::{DeviceLimits, DispatchInput, Engine, Event};
        use dispatchscope_formats::checkpoint::{MemoryImage, decode_memory_state};
        let mut e = Engine::cpu(DeviceLimits::default()).unwrap();
        let base = 0x1_0000_0000u64;
        e.apply(&Event::Reserve {
            range: ByteRange::new(base, base + (16 << 30)),
            readable: true,
            writable: true,
            committed: true,
            backing: Backing::Private,
            host_base: None,
        })
        .unwrap();
        let page = |n: u64| ByteRange::new(base + n * 0x1000, base + (n + 1) * 0x1000);
        let input = DispatchInput {
            program: 1,
            reasons: vec![Reason::D758],
            ..DispatchInput::default()
        };
        // The first dispatch maps the memory (M2 notes every page written); then a write-watch
        // guards 2,000 pages: 4,000 runs.
        e.dispatch(&input).unwrap();
        for n in 0..2_000u64 {
            e.apply(&Event::Guard {
                range: page(n * 97),
            })
            .unwrap();
        }
        let n_runs = MemoryState::of(e.memory()).reservations[0].runs.len();
        assert!(n_runs >= 4_000, "{n_runs} runs");
        let mut tracker = Tracker::new(1.0);
        let mut w = Writer::default();
        let step = |e: &mut Engine,
                    tracker: &mut Tracker,
                    w: &mut Writer,
                    index: u64,
                    queued: bool|
         -> Option<StatePart> {
            let r = e.dispatch(&input).unwrap();
            let copy = tracker.copy(1, e, &r, index)?;
            if !queued {
                return None;
            }
            tracker.queued_parts((true, true), e.memory().state_changes());
            w.message(copy, 64 << 20)?.memory
        };
        let Some(StatePart::Known(whole)) = step(&mut e, &mut tracker, &mut w, 0, true) else {
            panic!("the first state whole")
        };
        assert!(!check_memory_payload(&whole).unwrap());
        let mut image = Some(MemoryImage::of(&decode_memory_state(&whole).unwrap()).unwrap());
        let mut follow = |bytes: &[u8], e: &Engine| {
            let d = MemoryDelta::decode(bytes).unwrap();
            let i = image.as_mut().unwrap();
            i.apply(&d).unwrap();
            assert_eq!(i.state(), MemoryState::of(e.memory()));
            d
        };
        // Five pages toggled: the tap copies their runs, not the state's.
        for n in 0..5u64 {
            e.apply(&Event::Unguard {
                range: page(n * 97),
            })
            .unwrap();
        }
        let at = e.memory().state_changes();
        let r = e.dispatch(&input).unwrap();
        let copy = tracker.copy(1, &e, &r, 1).unwrap();
        let Some(Copied::State(MemoryCopy::Changes { delta, .. })) = &copy.memory else {
            panic!("{:?}", copy.memory)
        };
        assert!(delta.n_runs() <= 5, "{} runs", delta.n_runs());
        assert!(at <= e.memory().state_changes());
        tracker.queued_parts((true, true), e.memory().state_changes());
        let m = w.message(copy, 64 << 20).unwrap();
        let Some(StatePart::Known(bytes)) = &m.memory else {
            panic!("{m:?}")
        };
        assert!(check_memory_payload(bytes).unwrap(), "a delta");
        assert!(
            bytes.len() < 64,
            "{} bytes, whole {}",
            bytes.len(),
            whole.len()
        );
        follow(bytes, &e);
        // A copy the queue dropped: the next copy's changes reach back past it.
        e.apply(&Event::Unguard { range: page(970) }).unwrap();
        assert!(step(&mut e, &mut tracker, &mut w, 2, false).is_none());
        e.apply(&Event::Guard { range: page(5) }).unwrap();
        let Some(StatePart::Known(bytes)) = step(&mut e, &mut tracker, &mut w, 3, true) else {
            panic!("a state after the dropped one")
        };
        let d = follow(&bytes, &e);
        assert!(d.n_runs() <= 4, "both changes: {d:?}");
        // A writer that holds no state cannot take changes: unknown, and a whole one asked for.
        let mut fresh = Writer::default();
        e.apply(&Event::Unguard { range: page(5) }).unwrap();
        let r = e.dispatch(&input).unwrap();
        let copy = tracker.copy(1, &e, &r, 4).unwrap();
        let m = fresh.message(copy, 64 << 20).unwrap();
        assert!(matches!(m.memory, Some(StatePart::Unknown(_))));
        assert!(fresh.take_want_whole());
        // Asked to resend, the tap copies the whole state.
        tracker.resend();
        e.apply(&Event::Guard { range: page(5) }).unwrap();
        let r = e.dispatch(&input).unwrap();
        let copy = tracker.copy(1, &e, &r, 5).unwrap();
        assert!(matches!(
            copy.memory,
            Some(Copied::State(MemoryCopy::Whole { .. }))
        ));
    }
}
