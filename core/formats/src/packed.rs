//! A dispatch's access lists as packed rows (issue 18): the fields of [`crate::columns`]' rows,
//! each a LEB128 varint, the ones that move from row to row (lanes, program counters, addresses,
//! chunks, slots) as the zigzag difference from the same field of the row before. What a version
//! 3 dispatch message carries ([`crate::message`], [`crate::message::RECORD_V3`]).
//!
//! Why: [`crate::columns`]' fixed-width rows spend 8 bytes on a program counter that differs from
//! the last one by a few, and a whole zero word on every field a row does not use. A demo dispatch
//! was about 20 KB of rows, which lz4 took to about a third; compressing it cost the debugger's
//! store about 75 µs a dispatch, three quarters of that thread. Packed, the rows are about the
//! size lz4 made of them, for a few µs of varints on the game thread, and nothing compresses them
//! again (measured in BENCHMARKS.md, issue 18).
//!
//! # Byte layout
//! `v` is a LEB128 varint (at most 10 bytes; the value must fit its field), `z` a zigzag varint of
//! the difference from the previous row's same field (0 before the first row; wrapping for 64-bit
//! fields), `u8` one byte.
//!
//! Input accesses ([`encode_accesses`]): `v` rows `n`; `n` rows of `z` workgroup · `z` wave · `z`
//! lane · `z` pc · `u8` kind (bits 0–2) and op (bit 3) and present (bits 4–7: address, slot,
//! offset, index) · `z` address (when present) · `v` slot (when present) · `v` offset (when
//! present) · `v` index (when present) · `v` size_bytes · `v` value words; then every row's value
//! words (`v` each) in row order.
//!
//! Report accesses ([`encode_access_reports`]): `v` rows `n`; `n` rows of `z` index · `z`
//! workgroup · `z` wave · `z` lane · `z` pc · `u8` kind (bits 0–2), op (bit 3), route (bits 4–6)
//! and escaped (bit 7) · `u8` rule · `v` size_bytes · `v` holder (route bound only) · `z` the
//! route's offset or address (not for not-run) · `u8` has a device address (0 or 1) · `z` device
//! address (when it has one) · `v` lookups · `v` value words; then every lookup in row order: `z`
//! guest_chunk · `z` home slot with the part in bits 48–55 (`home_and_part`) · `u8` outcome · `z` slot (hit, miss-empty) · `z` device address
//! (hit) · `v` probes; then every probe in lookup order: `z` slot · `u8` has a key (0 or 1) · `z`
//! key (when it has one); then every value word (`v`) in row order.
//!
//! The codes are [`crate::columns`]'. Reading checks every count against the bytes left before
//! it allocates (a row takes at least 6 bytes, a lookup 4, a probe 2, a value word 1), every code
//! against its table and every value against its field; bad bytes are a named [`ColumnsError`],
//! never a panic.

use crate::columns::{
    ColumnsError, KINDS, Reader, access_row, code, deal, kind_code, op_code, report_row,
    route_of_parts, route_parts, rule_code, usize_of,
};
use dispatchscope_core::input::{Access, AccessKind, Op};
use dispatchscope_core::report::{AccessReport, LookupOutcome, LookupTrace, ProbeStep};
use dispatchscope_core::rules::Rule;

/// The fewest bytes a packed access row (input or report) takes.
const MIN_ROW_BYTES: u64 = 6;
/// The fewest bytes a packed lookup takes.
const MIN_LOOKUP_BYTES: u64 = 4;
/// The fewest bytes a packed probe takes.
const MIN_PROBE_BYTES: u64 = 2;

/// Bytes a row is built in before one copy into the output (the longest row takes 83).
const BUF_BYTES: usize = 128;

/// A row built on the stack, then appended with one copy: pushing byte by byte into the `Vec`
/// measured about three times as slow (a capacity check a byte).
struct Buf {
    b: [u8; BUF_BYTES],
    at: usize,
}

impl Buf {
    fn new() -> Self {
        Self {
            b: [0; BUF_BYTES],
            at: 0,
        }
    }

    #[inline(always)]
    fn u8(&mut self, v: u8) {
        self.b[self.at] = v;
        self.at += 1;
    }

    #[inline(always)]
    fn v(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.u8((v as u8) | 0x80);
            v >>= 7;
        }
        self.u8(v as u8);
    }

    /// The zigzag difference of `v` from `*prev`; `v` becomes the previous value.
    #[inline(always)]
    fn z(&mut self, prev: &mut u64, v: u64) {
        let d = v.wrapping_sub(*prev) as i64;
        *prev = v;
        self.v(((d << 1) ^ (d >> 63)) as u64);
    }

    #[inline(always)]
    fn flush(&mut self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.b[..self.at]);
        self.at = 0;
    }

    /// Every word of `words` as a varint.
    fn words(&mut self, words: &[u32], out: &mut Vec<u8>) {
        for &w in words {
            if self.at > BUF_BYTES - 10 {
                self.flush(out);
            }
            self.v(u64::from(w));
        }
    }
}

/// The previous row's fields that rows are written against.
#[derive(Default)]
struct Prev {
    index: u64,
    workgroup: u64,
    wave: u64,
    lane: u64,
    pc: u64,
    address: u64,
    at: u64,
    device: u64,
}

/// Appends the packed access block of `accesses` (an input's stream) to `out`.
pub fn encode_accesses(accesses: &[Access], out: &mut Vec<u8>) {
    let values: usize = accesses.iter().map(|a| a.values.len()).sum();
    out.reserve(10 + accesses.len() * 16 + values * 4);
    let mut w = Buf::new();
    w.v(accesses.len() as u64);
    let mut p = Prev::default();
    for a in accesses {
        w.z(&mut p.workgroup, u64::from(a.workgroup));
        w.z(&mut p.wave, u64::from(a.wave));
        w.z(&mut p.lane, u64::from(a.lane));
        w.z(&mut p.pc, a.pc);
        let present = u8::from(a.address.is_some())
            | u8::from(a.slot.is_some()) << 1
            | u8::from(a.offset.is_some()) << 2
            | u8::from(a.index.is_some()) << 3;
        w.u8(kind_code(a.kind) | op_code(a.op) << 3 | present << 4);
        if let Some(v) = a.address {
            w.z(&mut p.address, v);
        }
        if let Some(v) = a.slot {
            w.v(u64::from(v));
        }
        if let Some(v) = a.offset {
            w.v(v);
        }
        if let Some(v) = a.index {
            w.v(u64::from(v));
        }
        w.v(u64::from(a.size_bytes));
        w.v(a.values.len() as u64);
        w.flush(out);
    }
    for a in accesses {
        w.words(&a.values, out);
    }
    w.flush(out);
}

/// Appends the packed access block of `accesses` (a report's list) to `out`.
pub fn encode_access_reports(accesses: &[AccessReport], out: &mut Vec<u8>) {
    out.reserve(10 + accesses.len() * 40);
    let mut w = Buf::new();
    w.v(accesses.len() as u64);
    let mut p = Prev::default();
    for a in accesses {
        w.z(&mut p.index, a.index as u64);
        w.z(&mut p.workgroup, u64::from(a.workgroup));
        w.z(&mut p.wave, u64::from(a.wave));
        w.z(&mut p.lane, u64::from(a.lane));
        w.z(&mut p.pc, a.pc);
        let (route, holder, at) = route_parts(&a.route);
        w.u8(kind_code(a.kind) | op_code(a.op) << 3 | route << 4 | u8::from(a.escaped) << 7);
        w.u8(rule_code(a.rule));
        w.v(u64::from(a.size_bytes));
        if route == 0 {
            w.v(u64::from(holder));
        }
        if route != 4 {
            w.z(&mut p.at, at);
        }
        w.u8(u8::from(a.device_address.is_some()));
        if let Some(d) = a.device_address {
            w.z(&mut p.device, d);
        }
        w.v(a.lookups.len() as u64);
        w.v(a.values.len() as u64);
        w.flush(out);
    }
    let (mut chunk, mut home, mut slot, mut device) = (0u64, 0u64, 0u64, 0u64);
    for l in accesses.iter().flat_map(|a| &a.lookups) {
        w.z(&mut chunk, l.guest_chunk);
        w.z(&mut home, crate::codes::home_and_part(l));
        match l.outcome {
            LookupOutcome::Hit {
                slot: s,
                device_addr,
            } => {
                w.u8(0);
                w.z(&mut slot, s as u64);
                w.z(&mut device, device_addr);
            }
            LookupOutcome::MissEmpty { slot: s } => {
                w.u8(1);
                w.z(&mut slot, s as u64);
            }
            LookupOutcome::MissBound => w.u8(2),
        }
        w.v(l.probes.len() as u64);
        w.flush(out);
    }
    let (mut slot, mut key) = (0u64, 0u64);
    for q in accesses
        .iter()
        .flat_map(|a| &a.lookups)
        .flat_map(|l| &l.probes)
    {
        w.z(&mut slot, q.slot as u64);
        w.u8(u8::from(q.key.is_some()));
        if let Some(k) = q.key {
            w.z(&mut key, k);
        }
        w.flush(out);
    }
    for a in accesses {
        w.words(&a.values, out);
    }
    w.flush(out);
}

/// Reads varints and bytes from what a [`Reader`] has left, naming the part in every error;
/// [`In::done`] moves the reader past what was read.
struct In<'a> {
    b: &'a [u8],
    at: usize,
    /// The reader's position where `b` starts.
    base: usize,
}

impl<'a> In<'a> {
    fn new(r: &Reader<'a>) -> Self {
        Self {
            b: r.rest(),
            at: 0,
            base: r.position(),
        }
    }

    fn done(self, r: &mut Reader<'a>) -> Result<(), ColumnsError> {
        r.take_bytes("packed rows", self.at as u64).map(drop)
    }

    fn remaining(&self) -> usize {
        self.b.len() - self.at
    }

    #[inline(always)]
    fn u8(&mut self, part: &'static str) -> Result<u8, ColumnsError> {
        match self.b.get(self.at) {
            Some(&v) => {
                self.at += 1;
                Ok(v)
            }
            None => Err(ColumnsError::Truncated {
                part,
                at: self.base + self.at,
                need: 1,
                have: 0,
            }),
        }
    }

    #[inline(always)]
    fn v(&mut self, part: &'static str, row: usize) -> Result<u64, ColumnsError> {
        match self.b.get(self.at) {
            Some(&v) if v < 0x80 => {
                self.at += 1;
                Ok(u64::from(v))
            }
            _ => self.v_long(part, row),
        }
    }

    fn v_long(&mut self, part: &'static str, row: usize) -> Result<u64, ColumnsError> {
        let mut v = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.u8(part)?;
            let low = u64::from(b & 0x7f);
            if shift == 63 && low > 1 {
                break;
            }
            v |= low << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(ColumnsError::Inconsistent {
            row,
            what: format!("the {part} is a varint past 64 bits"),
        })
    }

    #[inline]
    fn v32(&mut self, part: &'static str, row: usize) -> Result<u32, ColumnsError> {
        let v = self.v(part, row)?;
        fit32(v, part, row)
    }

    /// A zigzag difference from `*prev`, applied (wrapping).
    #[inline]
    fn z(&mut self, part: &'static str, row: usize, prev: &mut u64) -> Result<u64, ColumnsError> {
        let u = self.v(part, row)?;
        let d = ((u >> 1) as i64) ^ -((u & 1) as i64);
        *prev = prev.wrapping_add(d as u64);
        Ok(*prev)
    }

    #[inline]
    fn z32(&mut self, part: &'static str, row: usize, prev: &mut u64) -> Result<u32, ColumnsError> {
        let v = self.z(part, row, prev)?;
        fit32(v, part, row)
    }

    fn usize(
        &mut self,
        part: &'static str,
        row: usize,
        prev: &mut u64,
    ) -> Result<usize, ColumnsError> {
        let v = self.z(part, row, prev)?;
        usize_of(v, row, part)
    }

    /// A count of items that take at least `min` bytes each, checked against the bytes left.
    fn count(&mut self, part: &'static str, min: u64) -> Result<usize, ColumnsError> {
        let n = self.v(part, 0)?;
        self.fits(part, n, min)
    }

    fn fits(&self, part: &'static str, n: u64, min: u64) -> Result<usize, ColumnsError> {
        let have = self.remaining();
        if n.saturating_mul(min) > have as u64 {
            return Err(ColumnsError::Truncated {
                part,
                at: self.base + self.at,
                need: n.saturating_mul(min),
                have,
            });
        }
        usize_of(n, 0, part)
    }

    fn flag(&mut self, column: &'static str, row: usize) -> Result<bool, ColumnsError> {
        match self.u8(column)? {
            0 => Ok(false),
            1 => Ok(true),
            value => Err(ColumnsError::BadCode { column, row, value }),
        }
    }

    /// `n` value words into `out`, without a vector of their own in between.
    fn words_into(&mut self, n: usize, out: &mut Vec<u32>) -> Result<(), ColumnsError> {
        out.reserve_exact(n);
        for row in 0..n {
            out.push(self.v32("value word", row)?);
        }
        Ok(())
    }
}

fn fit32(v: u64, part: &'static str, row: usize) -> Result<u32, ColumnsError> {
    u32::try_from(v).map_err(|_| ColumnsError::Inconsistent {
        row,
        what: format!("the {part} {v} does not fit 32 bits"),
    })
}

/// The sum of `counts`, checked against the bytes left at `min` bytes an item.
fn total(i: &In<'_>, part: &'static str, counts: &[u32], min: u64) -> Result<u64, ColumnsError> {
    let t: u64 = counts.iter().map(|&c| u64::from(c)).sum();
    i.fits(part, t, min)?;
    Ok(t)
}

/// The head both row kinds begin with: workgroup, wave and lane, pc (each a difference from the
/// row before), and the codes byte with its kind (bits 0–2) and op (bit 3).
fn row_head(
    i: &mut In<'_>,
    row: usize,
    p: &mut Prev,
) -> Result<([u32; 3], u64, u8, AccessKind, Op), ColumnsError> {
    let thread = [
        i.z32("access workgroup", row, &mut p.workgroup)?,
        i.z32("access wave", row, &mut p.wave)?,
        i.z32("access lane", row, &mut p.lane)?,
    ];
    let pc = i.z("access pc", row, &mut p.pc)?;
    let b = i.u8("access codes")?;
    let kind = code(&KINDS, "access kind", row, b & 7)?;
    let op = code(&[Op::Load, Op::Store], "access op", row, b >> 3 & 1)?;
    Ok((thread, pc, b, kind, op))
}

/// Reads a packed input access block from `r`.
pub fn decode_accesses(r: &mut Reader<'_>) -> Result<Vec<Access>, ColumnsError> {
    let mut i = In::new(r);
    let n = i.count("access rows", MIN_ROW_BYTES)?;
    let mut out = Vec::with_capacity(n);
    let mut counts = Vec::with_capacity(n);
    let mut p = Prev::default();
    for row in 0..n {
        let (thread, pc, b, kind, op) = row_head(&mut i, row, &mut p)?;
        let present = b >> 4;
        let address = match present & 1 {
            0 => None,
            _ => Some(i.z("access address", row, &mut p.address)?),
        };
        let slot = match present & 2 {
            0 => None,
            _ => Some(i.v32("access slot", row)?),
        };
        let offset = match present & 4 {
            0 => None,
            _ => Some(i.v("access offset", row)?),
        };
        let index = match present & 8 {
            0 => None,
            _ => Some(i.v32("access index", row)?),
        };
        let size_bytes = i.v32("access size", row)?;
        counts.push(i.v32("access value count", row)?);
        let parts = (address, slot, offset, index);
        out.push(access_row(thread, pc, (kind, op, size_bytes), parts));
    }
    total(&i, "value words", &counts, 1)?;
    for (a, &k) in out.iter_mut().zip(&counts) {
        i.words_into(k as usize, &mut a.values)?;
    }
    i.done(r)?;
    Ok(out)
}

/// Reads a packed report access block from `r`.
pub fn decode_access_reports(r: &mut Reader<'_>) -> Result<Vec<AccessReport>, ColumnsError> {
    let mut i = In::new(r);
    let n = i.count("access report rows", MIN_ROW_BYTES)?;
    let mut out = Vec::with_capacity(n);
    let mut n_lookups = Vec::with_capacity(n);
    let mut n_values = Vec::with_capacity(n);
    let mut p = Prev::default();
    for row in 0..n {
        let index = i.usize("access index", row, &mut p.index)?;
        let (thread, pc, b, kind, op) = row_head(&mut i, row, &mut p)?;
        let route = b >> 4 & 7;
        let escaped = b & 0x80 != 0;
        let rule = code(Rule::ALL, "rule", row, i.u8("access rule")?)?;
        let size_bytes = i.v32("access size", row)?;
        let (holder, at) = match route {
            0 => (
                i.v32("route holder", row)?,
                i.z("route offset", row, &mut p.at)?,
            ),
            1..=3 => (0, i.z("route offset or address", row, &mut p.at)?),
            _ => (0, 0),
        };
        let route = route_of_parts(route, holder, at, row)?;
        let device_address = match i.flag("access has a device address", row)? {
            false => None,
            true => Some(i.z("access device address", row, &mut p.device)?),
        };
        n_lookups.push(i.v32("access lookup count", row)?);
        n_values.push(i.v32("access value count", row)?);
        let codes = (kind, op, size_bytes);
        let at = (device_address, escaped);
        out.push(report_row(index, thread, pc, codes, (route, rule), at));
    }
    let t = total(&i, "lookup rows", &n_lookups, MIN_LOOKUP_BYTES)?;
    let mut lookups = Vec::with_capacity(usize_of(t, 0, "lookups")?);
    let mut n_probes = Vec::with_capacity(lookups.capacity());
    let (mut chunk, mut home, mut slot, mut device) = (0u64, 0u64, 0u64, 0u64);
    for row in 0..lookups.capacity() {
        let guest_chunk = i.z("lookup guest chunk", row, &mut chunk)?;
        let (home_slot, part) =
            crate::codes::split_home(i.z("lookup home slot", row, &mut home)?);
        let outcome = match i.u8("lookup outcome")? {
            0 => LookupOutcome::Hit {
                slot: i.usize("hit slot", row, &mut slot)?,
                device_addr: i.z("hit device address", row, &mut device)?,
            },
            1 => LookupOutcome::MissEmpty {
                slot: i.usize("empty slot", row, &mut slot)?,
            },
            2 => LookupOutcome::MissBound,
            value => {
                return Err(ColumnsError::BadCode {
                    column: "lookup outcome",
                    row,
                    value,
                });
            }
        };
        n_probes.push(i.v32("lookup probe count", row)?);
        lookups.push(LookupTrace {
            part,
            guest_chunk,
            home_slot,
            probes: Vec::new(),
            outcome,
        });
    }
    let t = total(&i, "probe rows", &n_probes, MIN_PROBE_BYTES)?;
    let mut probes = Vec::with_capacity(usize_of(t, 0, "probes")?);
    let (mut slot, mut key) = (0u64, 0u64);
    for row in 0..probes.capacity() {
        let s = i.usize("probe slot", row, &mut slot)?;
        let k = match i.flag("probe has a key", row)? {
            false => None,
            true => Some(i.z("probe key", row, &mut key)?),
        };
        probes.push(ProbeStep { slot: s, key: k });
    }
    deal(&mut lookups, &n_probes, probes, |l, v| l.probes = v);
    deal(&mut out, &n_lookups, lookups, |a, v| a.lookups = v);
    total(&i, "value words", &n_values, 1)?;
    for (a, &k) in out.iter_mut().zip(&n_values) {
        i.words_into(k as usize, &mut a.values)?;
    }
    i.done(r)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    fn put_v(out: &mut Vec<u8>, v: u64) {
        let mut w = Buf::new();
        w.v(v);
        w.flush(out);
    }

    fn put_z(out: &mut Vec<u8>, prev: &mut u64, v: u64) {
        let mut w = Buf::new();
        w.z(prev, v);
        w.flush(out);
    }

    fn blocks() -> (Vec<Access>, Vec<AccessReport>, Vec<u8>) {
        let (input, report) = crate::columns::tests::report();
        assert!(!input.accesses.is_empty() && !report.accesses.is_empty());
        let mut b = Vec::new();
        encode_accesses(&input.accesses, &mut b);
        encode_access_reports(&report.accesses, &mut b);
        (input.accesses, report.accesses, b)
    }

    fn read(b: &[u8]) -> Result<(Vec<Access>, Vec<AccessReport>), ColumnsError> {
        let mut r = Reader::new(b);
        let a = decode_accesses(&mut r)?;
        let ar = decode_access_reports(&mut r)?;
        if r.remaining() != 0 {
            return Err(ColumnsError::Trailing(r.remaining()));
        }
        Ok((a, ar))
    }

    #[test]
    fn packed_blocks_round_trip_and_are_smaller_than_fixed_rows() {
        let (a, ar, b) = blocks();
        assert_eq!(read(&b).unwrap(), (a.clone(), ar.clone()));
        let mut fixed = Vec::new();
        crate::columns::encode_accesses(&a, &mut fixed);
        crate::columns::encode_access_reports(&ar, &mut fixed);
        assert!(
            b.len() * 2 < fixed.len(),
            "{} against {}",
            b.len(),
            fixed.len()
        );
    }

    #[test]
    fn extreme_values_round_trip() {
        let (mut a, mut ar, _) = blocks();
        a[0].pc = u64::MAX;
        a[0].address = Some(0);
        a[0].workgroup = u32::MAX;
        a[0].offset = Some(u64::MAX);
        ar[0].pc = 0;
        ar[0].device_address = Some(u64::MAX);
        ar[0].index = usize::MAX;
        if let Some(l) = ar.iter_mut().flat_map(|x| &mut x.lookups).next() {
            l.guest_chunk = u64::MAX;
            l.probes.push(ProbeStep {
                slot: usize::MAX,
                key: Some(1),
            });
        }
        let mut b = Vec::new();
        encode_accesses(&a, &mut b);
        encode_access_reports(&ar, &mut b);
        assert_eq!(read(&b).unwrap(), (a, ar));
    }

    #[test]
    fn every_cut_is_an_error_and_no_flip_panics() {
        let (_, _, b) = blocks();
        for cut in 0..b.len() {
            assert!(read(&b[..cut]).is_err(), "cut at {cut}");
        }
        for at in 0..b.len() {
            for x in [0x01, 0x80, 0xff] {
                let mut m = b.clone();
                m[at] ^= x;
                let _ = read(&m);
            }
        }
    }

    #[test]
    fn bad_bytes_are_named() {
        // A count far past the bytes left is refused before anything is allocated.
        let mut b = Vec::new();
        put_v(&mut b, u64::MAX);
        assert!(matches!(
            read(&b).unwrap_err(),
            ColumnsError::Truncated {
                part: "access rows",
                ..
            }
        ));
        // A varint past 64 bits.
        let b = [0xffu8; 11];
        assert!(matches!(
            read(&b).unwrap_err(),
            ColumnsError::Inconsistent { .. }
        ));
        // A workgroup past 32 bits.
        let mut b = Vec::new();
        put_v(&mut b, 1);
        put_v(&mut b, 2 << 33);
        b.extend_from_slice(&[0; 16]);
        assert!(matches!(
            read(&b).unwrap_err(),
            ColumnsError::Inconsistent { .. }
        ));
        // An unknown route code.
        let (a, mut ar, _) = blocks();
        ar.truncate(1);
        let mut b = Vec::new();
        encode_accesses(&a, &mut b);
        let at = b.len();
        encode_access_reports(&ar, &mut b);
        // n, then five one-byte-or-more varints: find the codes byte by re-encoding the prefix.
        let mut prefix = Vec::new();
        put_v(&mut prefix, 1);
        let mut p = Prev::default();
        let r = &ar[0];
        put_z(&mut prefix, &mut p.index, r.index as u64);
        put_z(&mut prefix, &mut p.workgroup, u64::from(r.workgroup));
        put_z(&mut prefix, &mut p.wave, u64::from(r.wave));
        put_z(&mut prefix, &mut p.lane, u64::from(r.lane));
        put_z(&mut prefix, &mut p.pc, r.pc);
        let codes = at + prefix.len();
        b[codes] = (b[codes] & 0x8f) | 5 << 4;
        assert!(matches!(
            read(&b).unwrap_err(),
            ColumnsError::BadCode {
                column: "route",
                ..
            }
        ));
        b[codes] &= 0x8f;
        b[codes + 1] = 0xfe;
        assert!(matches!(
            read(&b).unwrap_err(),
            ColumnsError::BadCode { column: "rule", .. }
        ));
    }
}
