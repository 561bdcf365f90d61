//! [`History`]: every write a session made to a few guest bytes, in order, with the bytes before and
//! after each, as plain data that the CLI prints and the app's History window draws.
//!
//! The history is made of what a session records, never by running anything again:
//! the memory [`Event`]s (CPU writes, deferred copies, decommits and releases) and each dispatch's
//! [`DispatchReport`] (the copies C3 wrote before it, its device stores, its write-backs, O8).
//! [`HistoryBuilder`] is fed the session's steps in order and keeps only the watched bytes.
//! Where a report does not say enough to know a byte (a device pass whose uncaptured lanes may have
//! stored there, an access list cut short), the entry says so and the byte is unknown (`??`) from
//! there until a later write sets it again.

use serde::{Deserialize, Serialize};

use dispatchscope_core::addr::{ByteRange, hex};
use dispatchscope_core::input::{DispatchInput, Event, Op};
use dispatchscope_core::report::{DispatchReport, LookupOutcome, Mode, Route};

/// The history schema's version string.
pub const HISTORY_SCHEMA: &str = "dispatchscope.history/1";

/// The most bytes a history watches: an address and a few bytes around it, not a buffer.
pub const MAX_HISTORY_BYTES: u64 = 64;

/// Bytes of the watched range, each known or not.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Watched(pub Vec<Option<u8>>);

impl Watched {
    /// The bytes as text: two hex digits a byte, `??` for a byte the session does not say.
    pub fn text(&self) -> String {
        self.0
            .iter()
            .map(|b| b.map_or_else(|| "??".to_owned(), |b| format!("{b:02x}")))
            .collect()
    }

    /// The bytes as one little-endian number, when they are all known and at most 8.
    pub fn le_value(&self) -> Option<u64> {
        if self.0.len() > 8 {
            return None;
        }
        self.0
            .iter()
            .rev()
            .try_fold(0u64, |v, b| b.map(|b| (v << 8) | u64::from(b)))
    }
}

impl Serialize for Watched {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text())
    }
}

impl<'de> Deserialize<'de> for Watched {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let digits = text.as_bytes();
        if digits.len() % 2 != 0 {
            return Err(serde::de::Error::custom("an odd number of hex digits"));
        }
        digits
            .chunks(2)
            .map(|p| match p {
                b"??" => Ok(None),
                _ => std::str::from_utf8(p)
                    .ok()
                    .and_then(|t| u8::from_str_radix(t, 16).ok())
                    .map(Some)
                    .ok_or_else(|| serde::de::Error::custom(format!("not a byte: {p:?}"))),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Watched)
    }
}

/// How the bytes got their first value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Initial {
    /// The session's initial contents (a sample's `contents`, a capture's MEMORY records); bytes
    /// they do not hold read zero.
    Contents,
}

/// A step of a session: an event or a dispatch, by its number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// The event with this number (counting every event of the session from 0).
    Event(u64),
    /// The dispatch with this index.
    Dispatch(u64),
}

/// What wrote the bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "kind",
    rename_all = "kebab-case",
    rename_all_fields = "kebab-case"
)]
pub enum WriteKind {
    /// The session's initial contents, loaded (as a replay loads them) before the first dispatch,
    /// over bytes an earlier event wrote.
    Contents {
        /// The dispatch they were loaded before.
        dispatch: u64,
    },
    /// A CPU write event (D824 notes it, D720 distrusts targets over it).
    CpuWrite {
        /// The event's number in the session.
        event: u64,
    },
    /// A copy the command processor deferred at `event`, written by C3 before `dispatch` ran
    /// (a device-addressed dispatch writes every deferred copy first; a bound one only those up to
    /// the last one a holder covers).
    DeferredCopy {
        /// The event that deferred it.
        event: u64,
        /// The dispatch before which C3 wrote it.
        dispatch: u64,
    },
    /// A decommit or release event: the host memory went, and its bytes read zero since.
    ContentsLost {
        /// The event's number in the session.
        event: u64,
        /// `decommit` or `release`.
        by: String,
    },
    /// A device store of a device-addressed dispatch that reached guest memory (T5 hit).
    DeviceStore {
        /// The dispatch.
        dispatch: u64,
        /// The access's index in the dispatch's stream.
        access: usize,
        /// Its program counter.
        #[serde(with = "hex")]
        pc: u64,
        /// Workgroup.
        workgroup: u32,
        /// Wave.
        wave: u32,
        /// Lane.
        lane: u32,
    },
    /// A store of a captured lane of a device pass (the instrumented section keeps only the lanes
    /// it was asked to capture).
    CapturedStore {
        /// The dispatch.
        dispatch: u64,
        /// The access site the translator numbered.
        site: u32,
        /// The site's program counter.
        #[serde(with = "hex")]
        pc: u64,
        /// Workgroup.
        workgroup: u32,
        /// Wave.
        wave: u32,
        /// Lane.
        lane: u32,
    },
    /// A holder's write-back after the dispatch (O8), of the words its write mask marks (O9).
    WriteBack {
        /// The dispatch.
        dispatch: u64,
        /// The holder slot whose buffer was written back.
        holder: u32,
        /// The slots whose bound stores set those words, in stream order (the holder's members
        /// included), when the report's accesses say.
        slots: Vec<u32>,
        /// Those stores' access indices.
        stores: Vec<usize>,
    },
    /// A dispatch that may have stored to the bytes, but whose report does not say what: the bytes
    /// are unknown after it.
    NotRecorded {
        /// The dispatch.
        dispatch: u64,
    },
}

impl WriteKind {
    /// The step of the session the write belongs to: an event's number, or a dispatch's.
    pub fn step(&self) -> Step {
        match self {
            WriteKind::CpuWrite { event } | WriteKind::ContentsLost { event, .. } => {
                Step::Event(*event)
            }
            WriteKind::Contents { dispatch }
            | WriteKind::DeferredCopy { dispatch, .. }
            | WriteKind::DeviceStore { dispatch, .. }
            | WriteKind::CapturedStore { dispatch, .. }
            | WriteKind::WriteBack { dispatch, .. }
            | WriteKind::NotRecorded { dispatch } => Step::Dispatch(*dispatch),
        }
    }

    /// The dispatch the write belongs to, if it belongs to one.
    pub fn dispatch(&self) -> Option<u64> {
        match self {
            WriteKind::CpuWrite { .. } | WriteKind::ContentsLost { .. } => None,
            WriteKind::Contents { dispatch }
            | WriteKind::DeferredCopy { dispatch, .. }
            | WriteKind::DeviceStore { dispatch, .. }
            | WriteKind::CapturedStore { dispatch, .. }
            | WriteKind::WriteBack { dispatch, .. }
            | WriteKind::NotRecorded { dispatch } => Some(*dispatch),
        }
    }

    /// A short name: `cpu-write`, `deferred-copy` (C3), `write-back` (O8), …
    pub fn name(&self) -> &'static str {
        match self {
            WriteKind::Contents { .. } => "contents",
            WriteKind::CpuWrite { .. } => "cpu-write",
            WriteKind::DeferredCopy { .. } => "deferred-copy (C3)",
            WriteKind::ContentsLost { .. } => "contents-lost",
            WriteKind::DeviceStore { .. } => "device-store",
            WriteKind::CapturedStore { .. } => "captured-store",
            WriteKind::WriteBack { .. } => "write-back (O8)",
            WriteKind::NotRecorded { .. } => "not-recorded",
        }
    }

    /// One line naming who wrote: the event, or the dispatch and what in it.
    pub fn who(&self) -> String {
        match self {
            WriteKind::Contents { dispatch } => {
                format!("the session's contents, loaded before dispatch {dispatch}")
            }
            WriteKind::CpuWrite { event } => format!("event {event} (write)"),
            WriteKind::DeferredCopy { event, dispatch } => {
                format!("event {event} (defer-copy), written before dispatch {dispatch}")
            }
            WriteKind::ContentsLost { event, by } => format!("event {event} ({by})"),
            WriteKind::DeviceStore {
                dispatch,
                access,
                pc,
                workgroup,
                wave,
                lane,
            } => format!(
                "dispatch {dispatch}, access {access} at pc {pc:#x} (workgroup {workgroup}, wave {wave}, lane {lane})"
            ),
            WriteKind::CapturedStore {
                dispatch,
                site,
                pc,
                workgroup,
                wave,
                lane,
            } => format!(
                "dispatch {dispatch}, site {site} at pc {pc:#x} (workgroup {workgroup}, wave {wave}, lane {lane})"
            ),
            WriteKind::WriteBack {
                dispatch,
                holder,
                slots,
                ..
            } => {
                let via = if slots.is_empty() {
                    String::new()
                } else {
                    let s: Vec<String> = slots.iter().map(u32::to_string).collect();
                    format!(", stored through slot {}", s.join(", "))
                };
                format!("dispatch {dispatch}, holder slot {holder}{via}")
            }
            WriteKind::NotRecorded { dispatch } => format!("dispatch {dispatch}"),
        }
    }
}

/// One write to the watched bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteEntry {
    /// What wrote.
    #[serde(flatten)]
    pub kind: WriteKind,
    /// The bytes it wrote (the whole write, which may reach past the watched bytes).
    pub range: ByteRange,
    /// The watched bytes just before.
    pub before: Watched,
    /// The watched bytes just after.
    pub after: Watched,
    /// What the session does not say about this write, or what it says beside it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Every write a session made to some guest bytes, in the order they happened.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    /// [`HISTORY_SCHEMA`].
    pub schema: String,
    /// The watched bytes.
    pub range: ByteRange,
    /// Where the first value came from.
    pub initial_from: Initial,
    /// The bytes before the first write.
    pub initial: Watched,
    /// The writes, in order.
    pub writes: Vec<WriteEntry>,
    /// The bytes after the last step of the session.
    #[serde(rename = "final")]
    pub last: Watched,
    /// Dispatches the session holds.
    pub dispatches: u64,
    /// Events the session holds.
    pub events: u64,
    /// Dispatches read whole to make the history (the others were passed over by what their
    /// records say of the bytes they touch).
    pub dispatches_read: u64,
}

/// Makes a [`History`] from a session's steps, fed in order: [`Self::contents`] first, then
/// [`Self::event`] and [`Self::dispatch`] as they happened.
#[derive(Clone, Debug)]
pub struct HistoryBuilder {
    range: ByteRange,
    bytes: Vec<Option<u8>>,
    initial: Option<Vec<Option<u8>>>,
    /// Every copy still deferred, in order: the event that deferred it, its bytes' range, and its
    /// bytes where it overlaps the watched range.
    deferred: std::collections::VecDeque<(u64, ByteRange, Option<Vec<u8>>)>,
    writes: Vec<WriteEntry>,
    next_event: u64,
    dispatches: u64,
    dispatches_read: u64,
    /// The reservations the events made and have not released, by start (a release names its
    /// reservation by its base).
    reservations: std::collections::BTreeMap<u64, ByteRange>,
    reserved_ever: bool,
}

impl HistoryBuilder {
    /// A builder watching `range` (at most [`MAX_HISTORY_BYTES`]; a longer one is cut to it).
    pub fn new(range: ByteRange) -> Self {
        let len = range.size_bytes().min(MAX_HISTORY_BYTES);
        let range = ByteRange::new(range.start, range.start + len);
        Self {
            range,
            bytes: vec![Some(0); len as usize],
            initial: None,
            deferred: Default::default(),
            writes: Vec::new(),
            next_event: 0,
            dispatches: 0,
            dispatches_read: 0,
            reservations: Default::default(),
            reserved_ever: false,
        }
    }

    /// The watched bytes.
    pub fn range(&self) -> ByteRange {
        self.range
    }

    /// Initial contents at `address`, landed where a replay loads them: before the first dispatch,
    /// after the events that come before it (those make the reservations the contents lie in).
    /// Contents landing over a write an earlier event made are an entry of their own.
    pub fn contents(&mut self, address: u64, bytes: &[u8]) {
        if self.initial.is_some() {
            let dispatch = self.dispatches;
            self.record(WriteKind::Contents { dispatch }, address, bytes, None);
        } else {
            self.land(address, bytes);
        }
    }

    /// The next memory event.
    pub fn event(&mut self, event: &Event) {
        let index = self.next_event;
        self.next_event += 1;
        match event {
            Event::Write { address, bytes } => {
                self.record(WriteKind::CpuWrite { event: index }, *address, bytes, None);
            }
            Event::Wrote { range } => self.unknown(index, *range),
            Event::DeferCopy { address, bytes } => {
                let r = ByteRange::new(*address, address.saturating_add(bytes.len() as u64));
                let kept = r.overlaps(&self.range).then(|| bytes.clone());
                self.deferred.push_back((index, r, kept));
            }
            Event::Decommit { range } => self.lost(index, *range, "decommit"),
            Event::Reserve { range, .. } => {
                self.reserved_ever |= range.overlaps(&self.range);
                self.reservations.insert(range.start, *range);
            }
            Event::Release { base } => {
                if let Some(range) = self.reservations.remove(base) {
                    self.lost(index, range, "release");
                }
            }
            _ => {}
        }
    }

    /// Whether a deferred copy waits for C3 (a dispatch's count of copies written matters then).
    pub fn copies_pending(&self) -> bool {
        !self.deferred.is_empty()
    }

    /// Whether a reserve event of the session so far held a watched byte.
    pub fn reserved_ever(&self) -> bool {
        self.reserved_ever
    }

    /// A dispatch that is passed over: its record says it wrote none of the watched bytes, and
    /// that C3 wrote `copies` deferred copies before it.
    pub fn skipped_dispatch(&mut self, copies: usize) {
        self.flush_copies(self.dispatches, copies);
        self.dispatches += 1;
    }

    /// The next dispatch, with its report (a dispatch without one says nothing: the bytes are
    /// unknown after it if it could have written them).
    pub fn dispatch(&mut self, input: &DispatchInput, report: Option<&DispatchReport>) {
        self.dispatches_read += 1;
        let index = self.dispatches;
        self.dispatches += 1;
        let Some(report) = report else {
            self.freeze_initial();
            self.writes.push(WriteEntry {
                kind: WriteKind::NotRecorded { dispatch: index },
                range: self.range,
                before: Watched(self.bytes.clone()),
                after: Watched(vec![None; self.bytes.len()]),
                note: Some("the capture holds no report for this dispatch".into()),
            });
            self.bytes.fill(None);
            return;
        };
        self.flush_copies(index, report.before.copies.len());
        if report.mode == Mode::Refused {
            return;
        }
        self.device_stores(index, report);
        self.instrumented(index, report);
        self.write_backs(index, input, report);
    }

    /// The history so far.
    pub fn finish(mut self) -> History {
        self.freeze_initial();
        History {
            schema: HISTORY_SCHEMA.to_owned(),
            range: self.range,
            initial_from: Initial::Contents,
            initial: Watched(self.initial.clone().unwrap_or_default()),
            writes: self.writes,
            last: Watched(self.bytes),
            dispatches: self.dispatches,
            events: self.next_event,
            dispatches_read: self.dispatches_read,
        }
    }

    fn freeze_initial(&mut self) {
        if self.initial.is_none() {
            self.initial = Some(self.bytes.clone());
        }
    }

    /// Lands `bytes` at `address` in the watched bytes; returns whether any was watched.
    fn land(&mut self, address: u64, bytes: &[u8]) -> bool {
        let w = ByteRange::new(address, address.saturating_add(bytes.len() as u64));
        let Some(i) = w.intersection(&self.range) else {
            return false;
        };
        for a in i.start..i.end {
            self.bytes[(a - self.range.start) as usize] = Some(bytes[(a - address) as usize]);
        }
        true
    }

    fn record(&mut self, kind: WriteKind, address: u64, bytes: &[u8], note: Option<String>) {
        self.freeze_initial();
        let before = Watched(self.bytes.clone());
        if self.land(address, bytes) {
            self.writes.push(WriteEntry {
                kind,
                range: ByteRange::new(address, address.saturating_add(bytes.len() as u64)),
                before,
                after: Watched(self.bytes.clone()),
                note,
            });
        }
    }

    /// A CPU write whose bytes the event did not give (host mode): the watched bytes it covers
    /// become unknown, never guessed.
    fn unknown(&mut self, event: u64, range: ByteRange) {
        let Some(i) = range.intersection(&self.range) else {
            return;
        };
        self.freeze_initial();
        let before = Watched(self.bytes.clone());
        for a in i.start..i.end {
            self.bytes[(a - self.range.start) as usize] = None;
        }
        self.writes.push(WriteEntry {
            kind: WriteKind::CpuWrite { event },
            range,
            before,
            after: Watched(self.bytes.clone()),
            note: Some(
                "the emulator wrote these bytes in its own pages and did not give them: what was written is unknown".into(),
            ),
        });
    }

    fn lost(&mut self, event: u64, range: ByteRange, by: &str) {
        let Some(i) = range.intersection(&self.range) else {
            return;
        };
        self.freeze_initial();
        let zeros = vec![0u8; i.size_bytes() as usize];
        let before = Watched(self.bytes.clone());
        self.land(i.start, &zeros);
        self.writes.push(WriteEntry {
            kind: WriteKind::ContentsLost {
                event,
                by: by.to_owned(),
            },
            range,
            before,
            after: Watched(self.bytes.clone()),
            note: Some("the host memory went; the bytes read zero since".into()),
        });
        // A deferred copy into memory that went still lands later, as the engine writes it.
    }

    fn flush_copies(&mut self, dispatch: u64, n: usize) {
        for _ in 0..n {
            let Some((event, r, bytes)) = self.deferred.pop_front() else {
                return;
            };
            if let Some(bytes) = bytes {
                self.record(
                    WriteKind::DeferredCopy { event, dispatch },
                    r.start,
                    &bytes,
                    None,
                );
            }
        }
    }

    fn device_stores(&mut self, index: u64, report: &DispatchReport) {
        let Some(chunk_bytes) = report.table.as_ref().map(|t| t.chunk_bytes) else {
            return;
        };
        if chunk_bytes == 0 || !chunk_bytes.is_power_of_two() {
            return;
        }
        for a in &report.accesses {
            let (Op::Store, Route::Device { address }) = (a.op, &a.route) else {
                continue;
            };
            let whole = ByteRange::new(*address, address.saturating_add(u64::from(a.size_bytes)));
            if !whole.overlaps(&self.range) {
                continue;
            }
            let mut bytes: Vec<u8> = a.values.iter().flat_map(|v| v.to_le_bytes()).collect();
            bytes.resize(a.size_bytes as usize, 0);
            // T5: the parts of the access in chunks whose lookup hit reached memory; the rest
            // escaped (T4) and stored nothing.
            self.freeze_initial();
            let before = Watched(self.bytes.clone());
            let mut landed = false;
            for l in &a.lookups {
                if !matches!(l.outcome, LookupOutcome::Hit { .. }) {
                    continue;
                }
                let start = l.guest_chunk.saturating_mul(chunk_bytes);
                let chunk = ByteRange::new(start, start.saturating_add(chunk_bytes));
                if let Some(part) = chunk.intersection(&whole) {
                    let from = (part.start - address) as usize;
                    let to = (part.end - address) as usize;
                    landed |= self.land(part.start, &bytes[from..to]);
                }
            }
            if landed {
                self.writes.push(WriteEntry {
                    kind: WriteKind::DeviceStore {
                        dispatch: index,
                        access: a.index,
                        pc: a.pc,
                        workgroup: a.workgroup,
                        wave: a.wave,
                        lane: a.lane,
                    },
                    range: whole,
                    before,
                    after: Watched(self.bytes.clone()),
                    note: a
                        .escaped
                        .then(|| "part of the store escaped (T4) and stored nothing".to_owned()),
                });
            }
        }
        // An access list cut short (a live session's bound) says nothing of the stores past it.
        if report.counts.accesses > report.accesses.len() && self.marked(report) {
            self.not_recorded(
                index,
                format!(
                    "the report keeps {} of the dispatch's {} accesses, and a device store marked the chunk (C1) of these bytes",
                    report.accesses.len(),
                    report.counts.accesses
                ),
            );
        }
    }

    /// Whether a mark (C1) of the report covers a watched byte.
    fn marked(&self, report: &DispatchReport) -> bool {
        report.marks.iter().any(|m| m.guest.overlaps(&self.range))
    }

    fn instrumented(&mut self, index: u64, report: &DispatchReport) {
        let Some(section) = report.instrumented.as_ref() else {
            return;
        };
        for c in &section.captured {
            let (Op::Store, Route::Device { address }) = (c.op, &c.route) else {
                continue;
            };
            let whole = ByteRange::new(*address, address.saturating_add(u64::from(c.size_bytes)));
            if !whole.overlaps(&self.range) {
                continue;
            }
            let mut bytes: Vec<u8> = c.values.iter().flat_map(|v| v.to_le_bytes()).collect();
            bytes.resize(c.size_bytes as usize, 0);
            self.freeze_initial();
            let before = Watched(self.bytes.clone());
            let mut landed = false;
            for (i, &b) in bytes.iter().enumerate().take(32) {
                if c.escaped_bytes & (1 << i) == 0 {
                    landed |= self.land(address.saturating_add(i as u64), &[b]);
                }
            }
            if landed {
                self.writes.push(WriteEntry {
                    kind: WriteKind::CapturedStore {
                        dispatch: index,
                        site: c.site,
                        pc: c.pc,
                        workgroup: c.workgroup,
                        wave: c.wave,
                        lane: c.lane,
                    },
                    range: whole,
                    before,
                    after: Watched(self.bytes.clone()),
                    note: None,
                });
            }
        }
        let in_piece = report
            .mappings
            .as_ref()
            .is_some_and(|m| m.pieces.iter().any(|p| p.guest.overlaps(&self.range)));
        if section.counters.stores_marked > 0 && (in_piece || self.marked(report)) {
            self.not_recorded(
                index,
                format!(
                    "a device pass: {} stores reached guest memory and the section keeps only its captured lanes' accesses, so a lane not captured may have stored here",
                    section.counters.stores_marked
                ),
            );
        }
    }

    fn not_recorded(&mut self, dispatch: u64, note: String) {
        self.freeze_initial();
        let before = Watched(self.bytes.clone());
        self.bytes.fill(None);
        self.writes.push(WriteEntry {
            kind: WriteKind::NotRecorded { dispatch },
            range: self.range,
            before,
            after: Watched(self.bytes.clone()),
            note: Some(note),
        });
    }

    fn write_backs(&mut self, index: u64, input: &DispatchInput, report: &DispatchReport) {
        for wb in &report.write_back {
            if !wb.range.overlaps(&self.range) {
                continue;
            }
            for w in &wb.words {
                let word = ByteRange::new(w.address, w.address + u64::from(w.bytes.min(4)));
                if !word.overlaps(&self.range) {
                    continue;
                }
                let old = w.old.map(u64::to_le_bytes);
                let new = w.new.to_le_bytes();
                let n = word.size_bytes() as usize;
                // The report says the word's old bytes: they fill in what the history lost.
                let mut note = None;
                for a in word.start..word.end {
                    if let (Some(i), Some(old)) = (self.index_of(a), old) {
                        let o = old[(a - word.start) as usize];
                        match self.bytes[i] {
                            None => self.bytes[i] = Some(o),
                            Some(b) if b != o => {
                                note = Some(format!(
                                    "the report's word before the write-back ({}) differs from the bytes this history followed",
                                    w.old_text()
                                ));
                            }
                            Some(_) => {}
                        }
                    }
                }
                let (slots, stores) = bound_stores(input, report, wb.holder, wb.range.start, word);
                self.record(
                    WriteKind::WriteBack {
                        dispatch: index,
                        holder: wb.holder,
                        slots,
                        stores,
                    },
                    w.address,
                    &new[..n],
                    note,
                );
            }
            if !wb.lists_every_word() {
                self.unlisted_write_back(index, wb);
            }
        }
    }

    /// A write-back that counts words past those it lists (a device pass's output): the bytes
    /// of its runs that no listed word holds, and every byte past its last listed run when some
    /// runs were not listed, were (or may have been) written, their values not recorded.
    fn unlisted_write_back(&mut self, index: u64, wb: &dispatchscope_core::report::WriteBack) {
        let listed = |a: u64| {
            wb.words
                .iter()
                .any(|w| a >= w.address && a < w.address + u64::from(w.bytes.min(4)))
        };
        let past = wb
            .runs
            .last()
            .filter(|_| wb.runs_not_listed > 0)
            .map(|r| ByteRange::new(r.end, wb.range.end));
        let unknown = |a: u64| {
            !listed(a)
                && (wb.runs.iter().any(|r| r.contains(a)) || past.is_some_and(|p| p.contains(a)))
        };
        let hit: Vec<u64> = (self.range.start..self.range.end)
            .filter(|&a| unknown(a))
            .collect();
        let (Some(&first), Some(&last)) = (hit.first(), hit.last()) else {
            return;
        };
        self.freeze_initial();
        let before = Watched(self.bytes.clone());
        for a in hit {
            if let Some(i) = self.index_of(a) {
                self.bytes[i] = None;
            }
        }
        self.writes.push(WriteEntry {
            kind: WriteKind::WriteBack {
                dispatch: index,
                holder: wb.holder,
                slots: Vec::new(),
                stores: Vec::new(),
            },
            range: ByteRange::new(first, last + 1),
            before,
            after: Watched(self.bytes.clone()),
            note: Some(format!(
                "the device's write-back lists {} of its {} words with their values; these bytes were written back{}, their values not recorded",
                wb.words.len(),
                wb.words_written(),
                if wb.runs_not_listed > 0 {
                    " or may have been (not every run is listed)"
                } else {
                    ""
                }
            )),
        });
    }

    fn index_of(&self, a: u64) -> Option<usize> {
        self.range
            .contains(a)
            .then(|| (a - self.range.start) as usize)
    }
}

/// The bound stores through holder `holder` (whose buffer starts at guest `base`) that touched
/// `word`: their slots (deduplicated, in order) and access indices.
fn bound_stores(
    input: &DispatchInput,
    report: &DispatchReport,
    holder: u32,
    base: u64,
    word: ByteRange,
) -> (Vec<u32>, Vec<usize>) {
    let mut slots = Vec::new();
    let mut stores = Vec::new();
    for a in &report.accesses {
        let (Op::Store, Route::Bound { holder: h, offset }) = (a.op, &a.route) else {
            continue;
        };
        if *h != holder {
            continue;
        }
        let start = base.saturating_add(*offset);
        let r = ByteRange::new(start, start.saturating_add(u64::from(a.size_bytes)));
        if !r.overlaps(&word) {
            continue;
        }
        stores.push(a.index);
        if let Some(s) = input.accesses.get(a.index).and_then(|x| x.slot)
            && !slots.contains(&s)
        {
            slots.push(s);
        }
    }
    (slots, stores)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn watched_bytes_round_trip_with_unknowns() {
        let w = Watched(vec![Some(0xab), None, Some(0)]);
        let text = serde_json::to_string(&w).unwrap();
        assert_eq!(text, "\"ab??00\"");
        assert_eq!(serde_json::from_str::<Watched>(&text).unwrap(), w);
        assert!(serde_json::from_str::<Watched>("\"a\"").is_err());
        assert!(serde_json::from_str::<Watched>("\"zz\"").is_err());
        assert_eq!(Watched(vec![Some(1), Some(2)]).le_value(), Some(0x0201));
        assert_eq!(w.le_value(), None);
    }

    #[test]
    fn writes_and_copies_are_followed_in_order() {
        let mut b = HistoryBuilder::new(ByteRange::new(0x1002, 0x1004));
        b.contents(0x1000, &[1, 2, 3, 4, 5, 6]);
        b.event(&Event::Write {
            address: 0x1003,
            bytes: vec![9, 9],
        });
        b.event(&Event::DeferCopy {
            address: 0x2000,
            bytes: vec![7],
        });
        b.event(&Event::DeferCopy {
            address: 0x1000,
            bytes: vec![8; 3],
        });
        b.skipped_dispatch(1);
        b.skipped_dispatch(1);
        let h = b.finish();
        assert_eq!(h.initial.text(), "0304");
        assert_eq!(h.writes.len(), 2);
        assert_eq!(h.writes[0].after.text(), "0309");
        assert_eq!(
            h.writes[1].kind,
            WriteKind::DeferredCopy {
                event: 2,
                dispatch: 1
            }
        );
        assert_eq!(h.last.text(), "0809");
    }
}
