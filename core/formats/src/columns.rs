//! The compact binary record of a dispatch's bulky parts, its input's access stream and its
//! report's access list (issue 18): what the live protocol's dispatch messages carry and what a
//! live recording's DISPATCH records keep ([`encode_record`], read back by
//! [`crate::session::DispatchRecord::from_payload`]).
//!
//! A demo dispatch has about 120 accesses, each with its lookups and values; as JSON or
//! MessagePack with field names they are nine tenths of the dispatch's bytes and of its encoding
//! time (field names, `"0x…"` strings and a parser's per-field work). Here they are fixed-width
//! little-endian rows with small codes, written with no parser and read with one bounds check per
//! value, about a tenth of the time. The rest of a dispatch (slots, sets, refusals, escapes, the
//! table, marks …) is small, changes shape as the engine grows, and stays serde (JSON here,
//! MessagePack on the wire), so every serde attribute of the report types keeps holding.
//! Nothing here runs the engine or touches a file.
//!
//! # Byte layout of an access block, version 1
//! All integers little-endian; `uN` is N bits.
//!
//! Input accesses ([`encode_accesses`]): `u32` rows `n`, then `n` rows of
//! u32 workgroup · u32 wave · u32 lane · u64 pc · u8 kind · u8 op · u8 present (bit 0 address,
//! 1 slot, 2 offset, 3 index) · u64 address · u32 slot · u64 offset · u32 index · u32 size_bytes ·
//! u32 value words, then every row's value words (`u32` each) in row order.
//!
//! Report accesses ([`encode_access_reports`]): `u32` rows `n`, then `n` rows of
//! u64 index · u32 workgroup · u32 wave · u32 lane · u64 pc · u8 kind · u8 op · u32 size_bytes ·
//! u8 route · u32 route holder · u64 route offset or address · u8 rule · u8 flags (bit 0 escaped,
//! bit 1 has a device address) · u64 device address · u32 lookups · u32 value words;
//! then every lookup in row order: u64 guest_chunk · u64 home slot with the part in bits 48–55 · u8 outcome · u64 outcome slot
//! · u64 outcome device address · u32 probes; then every probe in lookup order: u64 slot · u8 has
//! a key · u64 key; then every value word in row order.
//!
//! Codes: kind 0 global, 1 flat, 2 scalar, 3 untyped-buffer, 4 format-buffer, 5 ray-intersection,
//! 6 lds, 7 scratch; op 0 load, 1 store; route 0 bound (holder, offset), 1 device (address), 2 lds
//! (offset), 3 scratch (offset), 4 not-run; outcome 0 hit (slot, device address), 1 miss-empty
//! (slot), 2 miss-bound; rule: the rule's position in [`Rule::ALL`]. A field a row does not use is
//! 0.
//!
//! # A DISPATCH record in this form ([`encode_record`])
//!
//! | bytes | field |
//! |---|---|
//! | 4 | magic [`RECORD_MAGIC`] (`DSDC`; a JSON record starts with `{`, the framed one with `DSDR`) |
//! | u32 | `j`, the JSON's length |
//! | `j` | the record's JSON (`input`, `report`) with both access lists empty and no instrumented section |
//! | u32 | `s`, the instrumented section's length (0: none) |
//! | `s` | the section in [`crate::instrumented`]'s record |
//! | … | the input's access block, then the report's (0 rows when there is no report) |
//!
//! Reading checks every count against the bytes left before it allocates and every code against
//! its table; bad bytes are a named [`ColumnsError`], never a panic.

use serde::Serialize;
use thiserror::Error;

use dispatchscope_core::addr::hex;
use dispatchscope_core::input::{Access, AccessKind, DispatchInput, DispatchKind, Op, PageBuffer};
use dispatchscope_core::input::{DeviceLimits, Reason};
use dispatchscope_core::report::{
    AccessReport, BeforeDispatch, BindSet, Counts, DispatchReport, Escape, EventReport, HandOff,
    Hazard, HostPathReport, LookupOutcome, LookupTrace, MappingReport, Mark, Mode, ProbeStep,
    Refusal, Route, SlotBinding, TableReport, WriteBack,
};
use dispatchscope_core::rules::Rule;

use crate::bytes::take_at;

/// The first four bytes of a DISPATCH record in this form.
pub const RECORD_MAGIC: [u8; 4] = *b"DSDC";
/// Bytes of one input access row (its values apart).
pub const ACCESS_ROW_BYTES: usize = 4 * 3 + 8 + 1 + 1 + 1 + 8 + 4 + 8 + 4 + 4 + 4;
/// Bytes of one report access row (its lookups and values apart).
pub const REPORT_ROW_BYTES: usize = 8 + 4 * 3 + 8 + 1 + 1 + 4 + 1 + 4 + 8 + 1 + 1 + 8 + 4 + 4;
/// Bytes of one lookup row (its probes apart).
pub const LOOKUP_ROW_BYTES: usize = 8 + 8 + 1 + 8 + 8 + 4;
/// Bytes of one probe row.
pub const PROBE_ROW_BYTES: usize = 8 + 1 + 8;

/// Why bytes are not an access block or a record of this form.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ColumnsError {
    /// Fewer bytes than a part needs.
    #[error("the {part} at byte {at} needs {need} bytes, {have} are left")]
    Truncated {
        /// The part being read.
        part: &'static str,
        /// Where it starts.
        at: usize,
        /// Bytes it needs.
        need: u64,
        /// Bytes left.
        have: usize,
    },
    /// A code outside its table.
    #[error("row {row}: {column} code {value} is not one this build knows")]
    BadCode {
        /// The column.
        column: &'static str,
        /// The row.
        row: usize,
        /// The value.
        value: u8,
    },
    /// A count that does not fit this machine or the record's own totals.
    #[error("row {row}: {what}")]
    Inconsistent {
        /// The row.
        row: usize,
        /// What does not add up.
        what: String,
    },
    /// A record that does not start with [`RECORD_MAGIC`].
    #[error("a column DISPATCH record starts with {RECORD_MAGIC:?}, not {found:02x?}")]
    BadMagic {
        /// What was there.
        found: Vec<u8>,
    },
    /// The record's JSON part is not a record's.
    #[error("the record's JSON: {0}")]
    Json(String),
    /// The record's instrumented section is not one.
    #[error("the record's instrumented section: {0}")]
    Section(#[source] crate::instrumented::InstrumentedError),
    /// Bytes after the record's last block.
    #[error("{0} bytes after the record's access blocks")]
    Trailing(usize),
    /// A versioned record of a version this build does not read.
    #[error("a DISPATCH record of version word {0:#010x}, not one this build reads")]
    UnknownVersion(u32),
    /// A dispatch message's MessagePack part is not one ([`crate::message`]).
    #[error("the dispatch message's MessagePack: {0}")]
    MessagePack(String),
}

pub(crate) use crate::codes::{KINDS, kind_code, op_code, route_parts, rule_code};

/// One fixed-width row built on the stack, then appended with one copy: writing field by field
/// into the `Vec` measured about twice as slow (a capacity check and a call per field).
struct RowOut<const N: usize> {
    b: [u8; N],
    at: usize,
}

impl<const N: usize> RowOut<N> {
    #[inline(always)]
    fn new() -> Self {
        Self { b: [0; N], at: 0 }
    }
    #[inline(always)]
    fn u8(&mut self, v: u8) {
        self.b[self.at] = v;
        self.at += 1;
    }
    #[inline(always)]
    fn u32(&mut self, v: u32) {
        self.b[self.at..self.at + 4].copy_from_slice(&v.to_le_bytes());
        self.at += 4;
    }
    #[inline(always)]
    fn u64(&mut self, v: u64) {
        self.b[self.at..self.at + 8].copy_from_slice(&v.to_le_bytes());
        self.at += 8;
    }
    #[inline(always)]
    fn put(&self, out: &mut Vec<u8>) {
        debug_assert_eq!(self.at, N);
        out.extend_from_slice(&self.b);
    }
}

/// Appends value words to `out`.
fn put_words(out: &mut Vec<u8>, words: &[u32]) {
    for v in words {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

fn len32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Appends the access block of `accesses` (an input's stream) to `out`.
pub fn encode_accesses(accesses: &[Access], out: &mut Vec<u8>) {
    let values: usize = accesses.iter().map(|a| a.values.len()).sum();
    out.reserve(4 + accesses.len() * ACCESS_ROW_BYTES + values * 4);
    out.extend_from_slice(&len32(accesses.len()).to_le_bytes());
    for a in accesses {
        let mut w = RowOut::<ACCESS_ROW_BYTES>::new();
        w.u32(a.workgroup);
        w.u32(a.wave);
        w.u32(a.lane);
        w.u64(a.pc);
        w.u8(kind_code(a.kind));
        w.u8(op_code(a.op));
        w.u8(u8::from(a.address.is_some())
            | u8::from(a.slot.is_some()) << 1
            | u8::from(a.offset.is_some()) << 2
            | u8::from(a.index.is_some()) << 3);
        w.u64(a.address.unwrap_or(0));
        w.u32(a.slot.unwrap_or(0));
        w.u64(a.offset.unwrap_or(0));
        w.u32(a.index.unwrap_or(0));
        w.u32(a.size_bytes);
        w.u32(len32(a.values.len()));
        w.put(out);
    }
    for a in accesses {
        put_words(out, &a.values);
    }
}

/// [`route_parts`]' reverse, for row `row`: an unknown code is named.
pub(crate) fn route_of_parts(
    code: u8,
    holder: u32,
    at: u64,
    row: usize,
) -> Result<Route, ColumnsError> {
    crate::codes::route_of_parts(code, holder, at).ok_or(ColumnsError::BadCode {
        column: "route",
        row,
        value: code,
    })
}

/// Appends the access block of `accesses` (a report's list) to `out`.
pub fn encode_access_reports(accesses: &[AccessReport], out: &mut Vec<u8>) {
    let (mut lookups, mut probes, mut values) = (0usize, 0usize, 0usize);
    for a in accesses {
        lookups += a.lookups.len();
        probes += a.lookups.iter().map(|l| l.probes.len()).sum::<usize>();
        values += a.values.len();
    }
    out.reserve(
        4 + accesses.len() * REPORT_ROW_BYTES
            + lookups * LOOKUP_ROW_BYTES
            + probes * PROBE_ROW_BYTES
            + values * 4,
    );
    out.extend_from_slice(&len32(accesses.len()).to_le_bytes());
    for a in accesses {
        let mut w = RowOut::<REPORT_ROW_BYTES>::new();
        w.u64(a.index as u64);
        w.u32(a.workgroup);
        w.u32(a.wave);
        w.u32(a.lane);
        w.u64(a.pc);
        w.u8(kind_code(a.kind));
        w.u8(op_code(a.op));
        w.u32(a.size_bytes);
        let (route, holder, at) = route_parts(&a.route);
        w.u8(route);
        w.u32(holder);
        w.u64(at);
        w.u8(rule_code(a.rule));
        w.u8(u8::from(a.escaped) | u8::from(a.device_address.is_some()) << 1);
        w.u64(a.device_address.unwrap_or(0));
        w.u32(len32(a.lookups.len()));
        w.u32(len32(a.values.len()));
        w.put(out);
    }
    for l in accesses.iter().flat_map(|a| &a.lookups) {
        let mut w = RowOut::<LOOKUP_ROW_BYTES>::new();
        w.u64(l.guest_chunk);
        w.u64(crate::codes::home_and_part(l));
        let (outcome, slot, device) = match l.outcome {
            LookupOutcome::Hit { slot, device_addr } => (0, slot as u64, device_addr),
            LookupOutcome::MissEmpty { slot } => (1, slot as u64, 0),
            LookupOutcome::MissBound => (2, 0, 0),
        };
        w.u8(outcome);
        w.u64(slot);
        w.u64(device);
        w.u32(len32(l.probes.len()));
        w.put(out);
    }
    for p in accesses
        .iter()
        .flat_map(|a| &a.lookups)
        .flat_map(|l| &l.probes)
    {
        let mut w = RowOut::<PROBE_ROW_BYTES>::new();
        w.u64(p.slot as u64);
        w.u8(u8::from(p.key.is_some()));
        w.u64(p.key.unwrap_or(0));
        w.put(out);
    }
    for a in accesses {
        put_words(out, &a.values);
    }
}

/// A bounds-checked little-endian reader.
#[derive(Debug)]
pub struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, at: 0 }
    }

    /// Bytes read so far.
    pub fn position(&self) -> usize {
        self.at
    }

    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    fn take(&mut self, part: &'static str, need: u64) -> Result<&'a [u8], ColumnsError> {
        let (at, have) = (self.at, self.remaining());
        take_at(self.bytes, &mut self.at, need).ok_or(ColumnsError::Truncated {
            part,
            at,
            need,
            have,
        })
    }

    /// The bytes not read yet.
    pub fn rest(&self) -> &'a [u8] {
        self.bytes.get(self.at..).unwrap_or_default()
    }

    /// Takes the next `need` bytes; `part` names them in the error when fewer are left.
    pub fn take_bytes(&mut self, part: &'static str, need: u64) -> Result<&'a [u8], ColumnsError> {
        self.take(part, need)
    }

    /// Reads a `u32` LE; `part` names it in the error when fewer than 4 bytes are left.
    pub fn u32(&mut self, part: &'static str) -> Result<u32, ColumnsError> {
        let b = self.take(part, 4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
}

/// Fixed-width fields of a row already bounds-checked as one slice.
struct Row<'a> {
    b: &'a [u8],
    at: usize,
}

impl Row<'_> {
    #[inline(always)]
    fn u8(&mut self) -> u8 {
        let v = self.b[self.at];
        self.at += 1;
        v
    }
    #[inline(always)]
    fn u32(&mut self) -> u32 {
        let mut a = [0u8; 4];
        a.copy_from_slice(&self.b[self.at..self.at + 4]);
        self.at += 4;
        u32::from_le_bytes(a)
    }
    #[inline(always)]
    fn u64(&mut self) -> u64 {
        let mut a = [0u8; 8];
        a.copy_from_slice(&self.b[self.at..self.at + 8]);
        self.at += 8;
        u64::from_le_bytes(a)
    }
}

pub(crate) fn code<T: Copy>(
    table: &[T],
    column: &'static str,
    row: usize,
    value: u8,
) -> Result<T, ColumnsError> {
    table
        .get(value as usize)
        .copied()
        .ok_or(ColumnsError::BadCode { column, row, value })
}

pub(crate) fn usize_of(v: u64, row: usize, what: &str) -> Result<usize, ColumnsError> {
    usize::try_from(v).map_err(|_| ColumnsError::Inconsistent {
        row,
        what: format!("{what} {v} does not fit this machine"),
    })
}

/// A run of `n` rows of `width` bytes, checked against the bytes left before anything is made.
fn rows<'a>(
    r: &mut Reader<'a>,
    part: &'static str,
    n: u64,
    width: usize,
) -> Result<&'a [u8], ColumnsError> {
    r.take(part, n.saturating_mul(width as u64))
}

fn words(r: &mut Reader<'_>, n: u64) -> Result<Vec<u32>, ColumnsError> {
    let b = rows(r, "value words", n, 4)?;
    Ok(b.chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// The present parts of an input access row: address, slot, offset and index.
pub(crate) type Present = (Option<u64>, Option<u32>, Option<u64>, Option<u32>);

/// An input access row as both row encodings read it (this module's and [`crate::packed`]'s), its
/// values dealt to it afterwards: `thread` is its workgroup, wave and lane.
pub(crate) fn access_row(
    thread: [u32; 3],
    pc: u64,
    (kind, op, size_bytes): (AccessKind, Op, u32),
    (address, slot, offset, index): Present,
) -> Access {
    let [workgroup, wave, lane] = thread;
    Access {
        kind,
        op,
        pc,
        workgroup,
        wave,
        lane,
        address,
        slot,
        offset,
        index,
        size_bytes,
        values: Vec::new(),
    }
}

/// Reads an input's access block from `r`.
pub fn decode_accesses(r: &mut Reader<'_>) -> Result<Vec<Access>, ColumnsError> {
    let n = r.u32("access count")?;
    let b = rows(r, "access rows", u64::from(n), ACCESS_ROW_BYTES)?;
    let mut out = Vec::with_capacity(n as usize);
    let mut counts = Vec::with_capacity(n as usize);
    for (i, chunk) in b.chunks_exact(ACCESS_ROW_BYTES).enumerate() {
        let mut c = Row { b: chunk, at: 0 };
        let (thread, pc) = ([c.u32(), c.u32(), c.u32()], c.u64());
        let kind = code(&KINDS, "access kind", i, c.u8())?;
        let op = code(&[Op::Load, Op::Store], "access op", i, c.u8())?;
        let present = c.u8();
        if present & !0xf != 0 {
            return Err(ColumnsError::BadCode {
                column: "access present bits",
                row: i,
                value: present,
            });
        }
        let parts = (
            (present & 1 != 0).then_some(c.u64()),
            (present & 2 != 0).then_some(c.u32()),
            (present & 4 != 0).then_some(c.u64()),
            (present & 8 != 0).then_some(c.u32()),
        );
        let size_bytes = c.u32();
        counts.push(c.u32());
        out.push(access_row(thread, pc, (kind, op, size_bytes), parts));
    }
    let total: u64 = counts.iter().map(|&c| u64::from(c)).sum();
    deal(&mut out, &counts, words(r, total)?, |a, v| a.values = v);
    Ok(out)
}

/// Deals `all` to the rows of `out` in order, `counts[i]` to row `i`, through `set`.
pub(crate) fn deal<T, R>(
    out: &mut [R],
    counts: &[u32],
    all: impl IntoIterator<Item = T>,
    mut set: impl FnMut(&mut R, Vec<T>),
) {
    let mut all = all.into_iter();
    for (row, &k) in out.iter_mut().zip(counts) {
        set(row, all.by_ref().take(k as usize).collect());
    }
}

/// A report access row as both row encodings read it (this module's and [`crate::packed`]'s), its
/// lookups and values dealt to it afterwards ([`deal`]): `thread` is its workgroup, wave and lane.
pub(crate) fn report_row(
    index: usize,
    thread: [u32; 3],
    pc: u64,
    (kind, op, size_bytes): (AccessKind, Op, u32),
    (route, rule): (Route, Rule),
    (device_address, escaped): (Option<u64>, bool),
) -> AccessReport {
    let [workgroup, wave, lane] = thread;
    AccessReport {
        index,
        pc,
        workgroup,
        wave,
        lane,
        kind,
        op,
        size_bytes,
        route,
        rule,
        lookups: Vec::new(),
        device_address,
        values: Vec::new(),
        escaped,
    }
}

/// Reads a report's access block from `r`.
pub fn decode_access_reports(r: &mut Reader<'_>) -> Result<Vec<AccessReport>, ColumnsError> {
    let n = r.u32("access report count")?;
    let b = rows(r, "access report rows", u64::from(n), REPORT_ROW_BYTES)?;
    let mut out = Vec::with_capacity(n as usize);
    let mut n_lookups = Vec::with_capacity(n as usize);
    let mut n_values = Vec::with_capacity(n as usize);
    for (i, chunk) in b.chunks_exact(REPORT_ROW_BYTES).enumerate() {
        let mut c = Row { b: chunk, at: 0 };
        let index = usize_of(c.u64(), i, "access index")?;
        let (thread, pc) = ([c.u32(), c.u32(), c.u32()], c.u64());
        let kind = code(&KINDS, "access kind", i, c.u8())?;
        let op = code(&[Op::Load, Op::Store], "access op", i, c.u8())?;
        let size_bytes = c.u32();
        let (route, holder, at) = (c.u8(), c.u32(), c.u64());
        let route = route_of_parts(route, holder, at, i)?;
        let rule = code(Rule::ALL, "rule", i, c.u8())?;
        let flags = c.u8();
        if flags & !3 != 0 {
            return Err(ColumnsError::BadCode {
                column: "access flags",
                row: i,
                value: flags,
            });
        }
        let device = (flags & 2 != 0).then_some(c.u64());
        n_lookups.push(c.u32());
        n_values.push(c.u32());
        let codes = (kind, op, size_bytes);
        let at = (device, flags & 1 != 0);
        out.push(report_row(index, thread, pc, codes, (route, rule), at));
    }
    let total_lookups: u64 = n_lookups.iter().map(|&c| u64::from(c)).sum();
    let lb = rows(r, "lookup rows", total_lookups, LOOKUP_ROW_BYTES)?;
    let mut lookups = Vec::with_capacity(total_lookups as usize);
    let mut n_probes = Vec::with_capacity(total_lookups as usize);
    for (i, chunk) in lb.chunks_exact(LOOKUP_ROW_BYTES).enumerate() {
        let mut c = Row { b: chunk, at: 0 };
        let guest_chunk = c.u64();
        let (home_slot, part) = crate::codes::split_home(c.u64());
        let (outcome, slot, device_addr) = (c.u8(), c.u64(), c.u64());
        let outcome = match outcome {
            0 => LookupOutcome::Hit {
                slot: usize_of(slot, i, "hit slot")?,
                device_addr,
            },
            1 => LookupOutcome::MissEmpty {
                slot: usize_of(slot, i, "empty slot")?,
            },
            2 => LookupOutcome::MissBound,
            value => {
                return Err(ColumnsError::BadCode {
                    column: "lookup outcome",
                    row: i,
                    value,
                });
            }
        };
        n_probes.push(c.u32());
        lookups.push(LookupTrace {
            part,
            guest_chunk,
            home_slot,
            probes: Vec::new(),
            outcome,
        });
    }
    let total_probes: u64 = n_probes.iter().map(|&c| u64::from(c)).sum();
    let pb = rows(r, "probe rows", total_probes, PROBE_ROW_BYTES)?;
    let probes = pb
        .chunks_exact(PROBE_ROW_BYTES)
        .enumerate()
        .map(|(i, chunk)| {
            let mut c = Row { b: chunk, at: 0 };
            let slot = usize_of(c.u64(), i, "probe slot")?;
            let has = c.u8();
            let key = c.u64();
            match has {
                0 => Ok(ProbeStep { slot, key: None }),
                1 => Ok(ProbeStep {
                    slot,
                    key: Some(key),
                }),
                value => Err(ColumnsError::BadCode {
                    column: "probe has a key",
                    row: i,
                    value,
                }),
            }
        });
    let probes = probes.collect::<Result<Vec<_>, _>>()?;
    deal(&mut lookups, &n_probes, probes, |l, v| l.probes = v);
    deal(&mut out, &n_lookups, lookups, |a, v| a.lookups = v);
    let total_values: u64 = n_values.iter().map(|&c| u64::from(c)).sum();
    deal(&mut out, &n_values, words(r, total_values)?, |a, v| {
        a.values = v
    });
    Ok(out)
}

/// An input without its access stream, by reference, serialised as [`DispatchInput`] is with an
/// empty `accesses`.
#[derive(Serialize)]
pub struct InputShell<'a> {
    kind: &'a DispatchKind,
    #[serde(with = "hex")]
    program: &'a u64,
    #[serde(skip_serializing_if = "String::is_empty")]
    label: &'a String,
    slots: &'a [dispatchscope_core::input::Slot],
    push: &'a [u32],
    reasons: &'a [Reason],
    #[serde(skip_serializing_if = "Option::is_none")]
    page_buffer: &'a Option<PageBuffer>,
    accesses: [(); 0],
}

impl<'a> InputShell<'a> {
    /// `input` without its accesses. Every field is named here (no `..`), so a field added to
    /// [`DispatchInput`] stops the build until it is added here too.
    pub fn of(input: &'a DispatchInput) -> Self {
        let DispatchInput {
            kind,
            program,
            label,
            slots,
            push,
            reasons,
            page_buffer,
            accesses: _,
        } = input;
        Self {
            kind,
            program,
            label,
            slots,
            push,
            reasons,
            page_buffer,
            accesses: [],
        }
    }

    /// The input without its accesses, owned (what the live wire keeps of a dispatch's input
    /// beside its access rows).
    pub fn to_input(&self) -> DispatchInput {
        DispatchInput {
            kind: *self.kind,
            program: *self.program,
            label: self.label.clone(),
            slots: self.slots.to_vec(),
            push: self.push.to_vec(),
            reasons: self.reasons.to_vec(),
            page_buffer: self.page_buffer.clone(),
            accesses: Vec::new(),
        }
    }
}

/// A report without its access list and instrumented section, by reference, serialised as
/// [`DispatchReport`] is with an empty `accesses` and no `instrumented`.
#[derive(Serialize)]
pub struct ReportShell<'a> {
    schema: &'a String,
    index: &'a u64,
    #[serde(with = "hex")]
    program: &'a u64,
    #[serde(skip_serializing_if = "String::is_empty")]
    label: &'a String,
    kind: &'a DispatchKind,
    mode: &'a Mode,
    backend: &'a String,
    device: &'a DeviceLimits,
    reasons: &'a [Reason],
    mode_reason: &'a String,
    slots: &'a [SlotBinding],
    sets: &'a [BindSet],
    refusals: &'a [Refusal],
    events_before: &'a [EventReport],
    before: &'a BeforeDispatch,
    #[serde(skip_serializing_if = "Option::is_none")]
    mappings: &'a Option<MappingReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    table: &'a Option<TableReport>,
    accesses: [(); 0],
    escapes: &'a [Escape],
    marks: &'a [Mark],
    hand_off: &'a HandOff,
    write_back: &'a [WriteBack],
    hazards: &'a [Hazard],
    counts: &'a Counts,
    #[serde(skip_serializing_if = "HostPathReport::is_empty")]
    host_path: &'a HostPathReport,
}

impl<'a> ReportShell<'a> {
    /// `report` without its accesses and section; every field is named, as in [`InputShell::of`].
    pub fn of(report: &'a DispatchReport) -> Self {
        let DispatchReport {
            schema,
            index,
            program,
            label,
            kind,
            mode,
            backend,
            device,
            reasons,
            mode_reason,
            slots,
            sets,
            refusals,
            events_before,
            before,
            mappings,
            table,
            accesses: _,
            escapes,
            marks,
            hand_off,
            write_back,
            hazards,
            counts,
            instrumented: _,
            host_path,
        } = report;
        Self {
            schema,
            index,
            program,
            label,
            kind,
            mode,
            backend,
            device,
            reasons,
            mode_reason,
            slots,
            sets,
            refusals,
            events_before,
            before,
            mappings,
            table,
            accesses: [],
            escapes,
            marks,
            hand_off,
            write_back,
            hazards,
            counts,
            host_path,
        }
    }
}

#[derive(Serialize)]
struct RecordShell<'a> {
    input: InputShell<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    report: Option<ReportShell<'a>>,
}

/// Appends `input` and `report` as a DISPATCH record of this form to `out` (see the module docs).
pub fn encode_record(input: &DispatchInput, report: Option<&DispatchReport>, out: &mut Vec<u8>) {
    out.extend_from_slice(&RECORD_MAGIC);
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    let shell = RecordShell {
        input: InputShell::of(input),
        report: report.map(ReportShell::of),
    };
    // Serialising plain data into memory cannot fail; an error would leave the JSON empty and
    // the record unreadable by name, never wrong.
    let _ = serde_json::to_writer(&mut *out, &shell);
    let len = len32(out.len() - at - 4);
    out[at..at + 4].copy_from_slice(&len.to_le_bytes());
    let section = report
        .and_then(|r| r.instrumented.as_ref())
        .and_then(|s| crate::instrumented::encode(s).ok());
    match section {
        Some(s) => {
            out.extend_from_slice(&len32(s.len()).to_le_bytes());
            out.extend_from_slice(&s);
        }
        None => out.extend_from_slice(&0u32.to_le_bytes()),
    }
    encode_accesses(&input.accesses, out);
    encode_access_reports(report.map_or(&[][..], |r| &r.accesses), out);
}

/// Reads a version 1 record [`encode_record`] wrote: the input and, if it had one, the report; a
/// version 2 record is [`ColumnsError::UnknownVersion`] here.
pub fn decode_record(
    bytes: &[u8],
) -> Result<(DispatchInput, Option<DispatchReport>), ColumnsError> {
    let Some(rest) = bytes.strip_prefix(&RECORD_MAGIC) else {
        return Err(ColumnsError::BadMagic {
            found: bytes.iter().take(4).copied().collect(),
        });
    };
    let mut r = Reader::new(rest);
    let j = r.u32("JSON length")?;
    // A version 2 record (`message.rs`) has its version here, with the top bit set: its reader is
    // `message::decode_record`, which [`crate::session::DispatchRecord::from_payload`] chooses.
    if j & crate::versions::RECORD_VERSIONED != 0 {
        return Err(ColumnsError::UnknownVersion(j));
    }
    let text = r.take("JSON", u64::from(j))?;
    #[derive(serde::Deserialize)]
    struct Shell {
        input: DispatchInput,
        #[serde(default)]
        report: Option<DispatchReport>,
    }
    let shell: Shell =
        serde_json::from_slice(text).map_err(|e| ColumnsError::Json(e.to_string()))?;
    let s = r.u32("section length")?;
    let section = if s == 0 {
        None
    } else {
        let b = r.take("instrumented section", u64::from(s))?;
        Some(crate::instrumented::decode(b).map_err(ColumnsError::Section)?)
    };
    let (mut input, mut report) = (shell.input, shell.report);
    input.accesses = decode_accesses(&mut r)?;
    let accesses = decode_access_reports(&mut r)?;
    match report.as_mut() {
        Some(rep) => {
            rep.accesses = accesses;
            rep.instrumented = section;
        }
        None if accesses.is_empty() && section.is_none() => {}
        None => {
            return Err(ColumnsError::Inconsistent {
                row: 0,
                what: "a record without a report holds report accesses or a section".into(),
            });
        }
    }
    if r.remaining() != 0 {
        return Err(ColumnsError::Trailing(r.remaining()));
    }
    Ok((input, report))
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;
    use dispatchscope_core::input::{DeviceLimits, Event, Slot};
    use dispatchscope_core::{CpuBackend, Engine};

    fn accesses() -> Vec<Access> {
        let mut v = Vec::new();
        for (i, kind) in KINDS.iter().enumerate() {
            let mut a = Access::new(*kind, if i % 2 == 0 { Op::Load } else { Op::Store }, 4);
            a.workgroup = i as u32;
            a.wave = 2;
            a.lane = 31;
            a.pc = 0x7400_5b85_4a00 + i as u64 * 8;
            a.address = (i % 2 == 0).then_some(0x6_0000_0000 + i as u64);
            a.slot = (i % 3 == 0).then_some(i as u32);
            a.offset = (i % 4 == 0).then_some(0x40);
            a.index = (i % 5 == 0).then_some(9);
            a.values = (0..i as u32).collect();
            v.push(a);
        }
        v
    }

    pub(crate) fn report() -> (DispatchInput, DispatchReport) {
        let mut e = Engine::<CpuBackend>::cpu(DeviceLimits::default()).unwrap();
        let base = 0x1000_0000u64;
        e.apply(&Event::Reserve {
            range: dispatchscope_core::addr::ByteRange::new(base, base + 0x2000),
            readable: true,
            writable: true,
            committed: true,
            backing: dispatchscope_core::input::Backing::Private,
            host_base: None,
        })
        .unwrap();
        let mut store = Access::new(AccessKind::Global, Op::Store, 4);
        store.address = Some(base + 8);
        store.values = vec![7];
        let mut load = Access::new(AccessKind::Global, Op::Load, 8);
        load.address = Some(base + 0x1ffc);
        let mut miss = Access::new(AccessKind::Global, Op::Load, 4);
        miss.address = Some(0x9000_0000);
        let mut bound = Access::new(AccessKind::UntypedBuffer, Op::Load, 4);
        bound.slot = Some(0);
        bound.offset = Some(4);
        let input = DispatchInput {
            program: 0x4000,
            label: "columns".into(),
            slots: vec![Slot::new(0, base, 0x100, false)],
            reasons: vec![Reason::D753],
            accesses: vec![store, load, miss, bound],
            ..DispatchInput::default()
        };
        let report = e.dispatch(&input).unwrap();
        (input, report)
    }

    #[test]
    fn input_accesses_round_trip() {
        let a = accesses();
        let mut out = Vec::new();
        encode_accesses(&a, &mut out);
        let mut r = Reader::new(&out);
        assert_eq!(decode_accesses(&mut r).unwrap(), a);
        assert_eq!(r.remaining(), 0);
    }

    #[test]
    fn a_record_round_trips_with_lookups_escapes_and_routes() {
        let (input, report) = report();
        assert!(report.accesses.iter().any(|a| !a.lookups.is_empty()));
        assert!(report.accesses.iter().any(|a| a.escaped));
        let mut out = Vec::new();
        encode_record(&input, Some(&report), &mut out);
        let (i, r) = decode_record(&out).unwrap();
        assert_eq!(i, input);
        assert_eq!(r.as_ref(), Some(&report));
        // The JSON of the decoded report is the engine's, field for field.
        assert_eq!(
            serde_json::to_value(r.unwrap()).unwrap(),
            serde_json::to_value(&report).unwrap()
        );
        let mut out = Vec::new();
        encode_record(&input, None, &mut out);
        assert_eq!(decode_record(&out).unwrap(), (input, None));
    }

    #[test]
    fn every_cut_and_flip_is_an_error_or_a_record() {
        let (input, report) = report();
        let mut out = Vec::new();
        encode_record(&input, Some(&report), &mut out);
        for cut in 0..out.len() {
            assert!(decode_record(&out[..cut]).is_err(), "cut at {cut}");
        }
        for at in 0..out.len() {
            let mut b = out.clone();
            b[at] ^= 0xa5;
            let _ = decode_record(&b);
        }
        let mut b = out.clone();
        b.push(0);
        assert_eq!(decode_record(&b), Err(ColumnsError::Trailing(1)));
    }

    #[test]
    fn bad_codes_and_counts_are_named() {
        let mut out = Vec::new();
        encode_accesses(&accesses()[..1], &mut out);
        out[4 + 20] = 9; // kind
        let e = decode_accesses(&mut Reader::new(&out)).unwrap_err();
        assert!(
            matches!(
                e,
                ColumnsError::BadCode {
                    column: "access kind",
                    ..
                }
            ),
            "{e}"
        );
        let huge = u32::MAX.to_le_bytes();
        let e = decode_access_reports(&mut Reader::new(&huge)).unwrap_err();
        assert!(
            matches!(
                e,
                ColumnsError::Truncated {
                    part: "access report rows",
                    ..
                }
            ),
            "{e}"
        );
        assert!(matches!(
            decode_record(b"{\"input\":{}}"),
            Err(ColumnsError::BadMagic { .. })
        ));
    }
}
