//! A dispatch's one binary encoding (issue 18): what the live protocol's dispatch messages carry
//! and what a live recording's DISPATCH records keep, byte for byte, so that a debugger writes the
//! bytes it received to its file without decoding or encoding them again.
//!
//! # A dispatch message
//!
//! | bytes | field |
//! |---|---|
//! | … | a MessagePack map with field names (`rmp-serde`'s `to_vec_named`): `index`, `input`, `report`, `mapping_state` (left out when none), `accesses_left_out`; both access lists empty |
//! | u32 | `r`, the rows' length |
//! | `r` | the input's access block, then the report's: in [`crate::columns`]' fixed-width rows ([`Rows::Fixed`], what version 2 wrote), or in [`crate::packed`]' rows ([`Rows::Packed`], version 3) |
//!
//! The message does not say which rows it has: the live wire's message kind and the record's
//! version word do (kind 3 and [`RECORD_V2`] fixed, kind 4 and [`RECORD_V3`] packed).
//!
//! The rest of a dispatch stays MessagePack with names because the report types skip empty
//! fields, flatten tagged roles and gain fields as the engine grows: a format that does not
//! describe itself would read them wrong.
//! The access lists are nine tenths of a dispatch and of uniform shape, so they are rows.
//! A report that names a mapping state (`mapping_state`) has its three mapping lists (runs,
//! pieces, left-out pieces) empty: the live protocol sends them once, when they change.
//!
//! # A DISPATCH record in this form ([`encode_record`], versions 2 and 3 of [`crate::columns`]' record)
//!
//! | bytes | field |
//! |---|---|
//! | 4 | magic [`crate::columns::RECORD_MAGIC`] (`DSDC`) |
//! | u32 | [`RECORD_V2`] (`0x8000_0002`: fixed-width rows) or [`RECORD_V3`] (`0x8000_0003`: packed rows); a version 1 record has its JSON's length here, always below `2^31` |
//! | u32 | `m`, the message's length |
//! | `m` | a dispatch message, as above |
//! | u32 | `k`, the mapping lists' length (0: the report's lists are as the message has them) |
//! | `k` | the mapping lists its report names, a MessagePack map with names: `runs`, `pieces`, `left_out` |
//!
//! Reading checks every length against the bytes left, and the rows as [`crate::columns`] does;
//! bad bytes are a named [`ColumnsError`], never a panic.
//! [`summary`] reads a message's MessagePack part and skips its rows: what a table row needs.
//!
//! # Every form of a DISPATCH record
//!
//! The table of every form, which are still written and which only read, is
//! [`crate::legacy`]'s; [`crate::legacy::sniff`] tells them apart. Version 2 (fixed-width rows,
//! [`Rows::Fixed`]) is the one form read and no longer written: [`crate::legacy::record_v2`].

use serde::{Deserialize, Serialize};

use crate::columns::{self, ColumnsError, Reader};
use crate::packed;
use dispatchscope_core::input::{Access, DispatchInput};
use dispatchscope_core::report::{
    AccessReport, DispatchReport, LeftOutReport, PieceReport, ReadableRun,
};

pub use crate::versions::{RECORD_V2, RECORD_V3};

/// Which rows a dispatch message's access lists are in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rows {
    /// [`crate::columns`]' fixed-width rows (wire message kind 3, [`RECORD_V2`]).
    Fixed,
    /// [`crate::packed`]' rows (wire message kind 4, [`RECORD_V3`]).
    Packed,
}

impl Rows {
    /// The record version word of a record whose message has these rows.
    pub fn record_version(self) -> u32 {
        match self {
            Rows::Fixed => RECORD_V2,
            Rows::Packed => RECORD_V3,
        }
    }

    /// Appends `input`'s and `report`'s access blocks in these rows to `out`.
    pub fn encode(self, input: &[Access], report: &[AccessReport], out: &mut Vec<u8>) {
        match self {
            Rows::Fixed => crate::legacy::record_v2::encode_rows(input, report, out),
            Rows::Packed => {
                packed::encode_accesses(input, out);
                packed::encode_access_reports(report, out);
            }
        }
    }

    fn decode(self, r: &mut Reader<'_>) -> Result<(Vec<Access>, Vec<AccessReport>), ColumnsError> {
        Ok(match self {
            Rows::Fixed => crate::legacy::record_v2::decode_rows(r)?,
            Rows::Packed => (
                packed::decode_accesses(r)?,
                packed::decode_access_reports(r)?,
            ),
        })
    }
}
/// Bit 31 of the word after the magic: a versioned record rather than a version 1 JSON length.
pub use crate::versions::RECORD_VERSIONED as VERSIONED;
/// The deepest nesting the MessagePack part may have.
const MAX_DEPTH: usize = 256;

/// A dispatch message's MessagePack part, to write (borrowed).
#[derive(Serialize)]
struct MessageRef<'a> {
    index: u64,
    input: &'a DispatchInput,
    report: &'a DispatchReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    mapping_state: Option<u64>,
    accesses_left_out: u64,
}

/// A dispatch message, read.
#[derive(Debug, Deserialize)]
pub struct Message {
    /// The dispatch's index.
    pub index: u64,
    /// Its input.
    pub input: Box<DispatchInput>,
    /// Its report.
    pub report: Box<DispatchReport>,
    /// The mapping state its report names, if it names one.
    #[serde(default)]
    pub mapping_state: Option<u64>,
    /// Access reports the target left out of the rows.
    #[serde(default)]
    pub accesses_left_out: u64,
}

/// The three mapping lists a report may name instead of carrying, to write (borrowed).
#[derive(Serialize)]
pub struct MappingListsRef<'a> {
    /// The readable runs.
    pub runs: &'a [ReadableRun],
    /// The mapped pieces.
    pub pieces: &'a [PieceReport],
    /// The pieces left out.
    pub left_out: &'a [LeftOutReport],
}

/// The three mapping lists, read.
#[derive(Debug, Default, Deserialize)]
struct MappingLists {
    #[serde(default)]
    runs: Vec<ReadableRun>,
    #[serde(default)]
    pieces: Vec<PieceReport>,
    #[serde(default)]
    left_out: Vec<LeftOutReport>,
}

fn mp(e: impl std::fmt::Display) -> ColumnsError {
    ColumnsError::MessagePack(e.to_string())
}

/// Appends a dispatch message to `out`: `input` and `report` with their access lists left out
/// (whatever they hold), then `rows`, the access blocks already written
/// ([`columns::encode_accesses`] then [`columns::encode_access_reports`]).
pub fn encode(
    index: u64,
    input: &DispatchInput,
    report: &DispatchReport,
    mapping_state: Option<u64>,
    accesses_left_out: u64,
    rows: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), ColumnsError> {
    if !input.accesses.is_empty() || !report.accesses.is_empty() {
        return encode_owned_shells(
            index,
            input,
            report,
            mapping_state,
            accesses_left_out,
            rows,
            out,
        );
    }
    write_parts(
        index,
        input,
        report,
        mapping_state,
        accesses_left_out,
        rows,
        out,
    )
}

/// [`encode`] for an input or report that still holds its access lists: their shells are cloned.
fn encode_owned_shells(
    index: u64,
    input: &DispatchInput,
    report: &DispatchReport,
    mapping_state: Option<u64>,
    accesses_left_out: u64,
    rows: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), ColumnsError> {
    let mut i = input.clone();
    i.accesses.clear();
    let mut r = report.clone();
    r.accesses.clear();
    write_parts(index, &i, &r, mapping_state, accesses_left_out, rows, out)
}

fn write_parts(
    index: u64,
    input: &DispatchInput,
    report: &DispatchReport,
    mapping_state: Option<u64>,
    accesses_left_out: u64,
    rows: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), ColumnsError> {
    let len = u32::try_from(rows.len()).map_err(|_| ColumnsError::Inconsistent {
        row: 0,
        what: format!(
            "{} bytes of access rows, more than a u32 counts",
            rows.len()
        ),
    })?;
    let fields = MessageRef {
        index,
        input,
        report,
        mapping_state,
        accesses_left_out,
    };
    rmp_serde::encode::write_named(out, &fields).map_err(mp)?;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(rows);
    Ok(())
}

/// Appends `input` and `report` as a whole dispatch message, their access lists in `rows`, to
/// `out`.
pub fn encode_whole(
    rows: Rows,
    index: u64,
    input: &DispatchInput,
    report: &DispatchReport,
    out: &mut Vec<u8>,
) -> Result<(), ColumnsError> {
    let mut bytes = Vec::new();
    rows.encode(&input.accesses, &report.accesses, &mut bytes);
    encode(index, input, report, None, 0, &bytes, out)
}

/// Reads a message's MessagePack part from the start of `bytes`: the message with both access
/// lists empty, and where its rows' length word starts.
fn read_head(bytes: &[u8]) -> Result<(Message, usize), ColumnsError> {
    // Found first, so that the MessagePack is read from a slice: field names and strings are
    // borrowed, not copied through a reader one by one (a quarter of a dispatch's decode).
    let at = messagepack_len(bytes)?;
    let mut de = rmp_serde::Deserializer::from_read_ref(&bytes[..at]);
    de.set_max_depth(MAX_DEPTH);
    let m = Message::deserialize(&mut de).map_err(mp)?;
    Ok((m, at))
}

/// The length of the one MessagePack value at the start of `bytes`, found from its markers
/// without decoding it: every length checked against the bytes left.
pub fn messagepack_len(bytes: &[u8]) -> Result<usize, ColumnsError> {
    let short = |at: usize| mp(format!("a value cut short at byte {at} of {}", bytes.len()));
    let be = |at: usize, n: usize| -> Result<u64, ColumnsError> {
        let b = bytes.get(at..at + n).ok_or_else(|| short(at))?;
        Ok(b.iter().fold(0u64, |v, &x| v << 8 | u64::from(x)))
    };
    let (mut at, mut pending) = (0usize, 1u64);
    while pending > 0 {
        pending -= 1;
        let m = *bytes.get(at).ok_or_else(|| short(at))?;
        at += 1;
        // (values that follow, bytes that follow)
        let (items, skip): (u64, u64) = match m {
            0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => (0, 0),
            0x80..=0x8f => (u64::from(m & 0x0f) * 2, 0),
            0x90..=0x9f => (u64::from(m & 0x0f), 0),
            0xa0..=0xbf => (0, u64::from(m & 0x1f)),
            0xc4 | 0xd9 => (0, be(at, 1)? + 1),
            0xc5 | 0xda => (0, be(at, 2)? + 2),
            0xc6 | 0xdb => (0, be(at, 4)? + 4),
            0xc7 => (0, be(at, 1)? + 2),
            0xc8 => (0, be(at, 2)? + 3),
            0xc9 => (0, be(at, 4)? + 5),
            0xcc | 0xd0 => (0, 1),
            0xcd | 0xd1 | 0xd4 => (0, 2),
            0xd5 => (0, 3),
            0xca | 0xce | 0xd2 => (0, 4),
            0xd6 => (0, 5),
            0xcb | 0xcf | 0xd3 => (0, 8),
            0xd7 => (0, 9),
            0xd8 => (0, 17),
            0xdc => (be(at, 2)?, 2),
            0xdd => (be(at, 4)?, 4),
            0xde => (be(at, 2)? * 2, 2),
            0xdf => (be(at, 4)? * 2, 4),
            0xc1 => return Err(mp(format!("marker 0xc1 (never used) at byte {}", at - 1))),
        };
        let end = u64::try_from(at)
            .ok()
            .and_then(|a| a.checked_add(skip))
            .filter(|&e| e <= bytes.len() as u64)
            .ok_or_else(|| short(at))?;
        at = end as usize;
        pending += items;
        // Every value takes a byte at least.
        if pending > (bytes.len() - at) as u64 {
            return Err(short(at));
        }
    }
    Ok(at)
}

/// Reads the rows at `r` into `m`'s two access lists, checking their length word.
fn read_rows(rows: Rows, r: &mut Reader<'_>, m: &mut Message) -> Result<(), ColumnsError> {
    let len = r.u32("access rows length")?;
    let start = r.position();
    (m.input.accesses, m.report.accesses) = rows.decode(r)?;
    let took = r.position() - start;
    if took != len as usize {
        return Err(ColumnsError::Inconsistent {
            row: 0,
            what: format!("the access rows take {took} bytes, their length says {len}"),
        });
    }
    Ok(())
}

/// Reads a dispatch message whose access lists are in `rows` from the start of `bytes`, access
/// lists included; returns it and the bytes it took (a message may be followed by others).
pub fn decode(rows: Rows, bytes: &[u8]) -> Result<(Message, usize), ColumnsError> {
    let (mut m, at) = read_head(bytes)?;
    let rest = bytes.get(at..).unwrap_or_default();
    let mut r = Reader::new(rest);
    read_rows(rows, &mut r, &mut m)?;
    Ok((m, at + r.position()))
}

/// Reads the whole of `bytes` as one dispatch message whose access lists are in `rows`, access
/// lists included.
pub fn decode_exact(rows: Rows, bytes: &[u8]) -> Result<Message, ColumnsError> {
    let (m, used) = decode(rows, bytes)?;
    if used != bytes.len() {
        return Err(ColumnsError::Trailing(bytes.len() - used));
    }
    Ok(m)
}

/// Reads the whole of `bytes` as one dispatch message without decoding its rows: the message with
/// both access lists empty, and the rows' bytes (checked only for their length), for
/// [`fill_rows`] later.
pub fn summary(bytes: &[u8]) -> Result<(Message, std::ops::Range<usize>), ColumnsError> {
    let (m, at) = read_head(bytes)?;
    let rest = bytes.get(at..).unwrap_or_default();
    let mut r = Reader::new(rest);
    let len = r.u32("access rows length")?;
    let start = at + 4;
    let have = bytes.len() - start;
    if have != len as usize {
        return Err(ColumnsError::Inconsistent {
            row: 0,
            what: format!("the message's rows have {have} bytes, their length says {len}"),
        });
    }
    Ok((m, start..bytes.len()))
}

/// Decodes `rows` (a message's rows in `format`, without their length word, as [`summary`] gives
/// their range) into `input`'s and `report`'s access lists.
pub fn fill_rows(
    format: Rows,
    rows: &[u8],
    input: &mut DispatchInput,
    report: &mut DispatchReport,
) -> Result<(), ColumnsError> {
    let mut r = Reader::new(rows);
    (input.accesses, report.accesses) = format.decode(&mut r)?;
    if r.remaining() != 0 {
        return Err(ColumnsError::Trailing(r.remaining()));
    }
    Ok(())
}

/// Appends the MessagePack encoding of three mapping lists (what a version 2 record carries after
/// its message) to `out`.
pub fn encode_mapping_lists(
    lists: &MappingListsRef<'_>,
    out: &mut Vec<u8>,
) -> Result<(), ColumnsError> {
    rmp_serde::encode::write_named(out, lists).map_err(mp)
}

/// Appends a versioned DISPATCH record to `out`: `message` (a dispatch message whose access lists
/// are in `rows`, as it came) and `mapping_lists` (the encoded lists its report names, or empty).
/// Packed rows make a version 3 record, what a live store writes; fixed ones a version 2 record,
/// which only the tests of reading old records still make (the table in the module docs).
pub fn encode_record(rows: Rows, message: &[u8], mapping_lists: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&columns::RECORD_MAGIC);
    out.extend_from_slice(&rows.record_version().to_le_bytes());
    out.extend_from_slice(&len32(message.len()).to_le_bytes());
    out.extend_from_slice(message);
    out.extend_from_slice(&len32(mapping_lists.len()).to_le_bytes());
    out.extend_from_slice(mapping_lists);
}

fn len32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Whether `bytes` is a versioned DISPATCH record (version 2 or later) rather than version 1.
pub fn is_versioned_record(bytes: &[u8]) -> bool {
    use crate::legacy::DispatchForm;
    matches!(
        crate::legacy::sniff(bytes),
        DispatchForm::MessageV2 | DispatchForm::MessageV3 | DispatchForm::UnknownVersion(Some(_))
    )
}

/// Which rows a version 2 or 3 record's message has, from its version word.
pub fn rows_of_record(bytes: &[u8]) -> Result<Rows, ColumnsError> {
    let Some(rest) = bytes.strip_prefix(&columns::RECORD_MAGIC) else {
        return Err(ColumnsError::BadMagic {
            found: bytes.iter().take(4).copied().collect(),
        });
    };
    use crate::legacy::DispatchForm;
    match crate::legacy::sniff(bytes) {
        DispatchForm::MessageV2 => Ok(Rows::Fixed),
        DispatchForm::MessageV3 => Ok(Rows::Packed),
        _ => Err(ColumnsError::UnknownVersion(
            Reader::new(rest).u32("version word")?,
        )),
    }
}

/// The parts of a version 2 or 3 record: which rows its message has, the message and its mapping
/// lists (maybe empty).
pub fn record_parts(bytes: &[u8]) -> Result<(Rows, &[u8], &[u8]), ColumnsError> {
    let Some(rest) = bytes.strip_prefix(&columns::RECORD_MAGIC) else {
        return Err(ColumnsError::BadMagic {
            found: bytes.iter().take(4).copied().collect(),
        });
    };
    let rows = rows_of_record(bytes)?;
    let mut r = Reader::new(rest);
    r.u32("version word")?;
    let m = r.u32("message length")?;
    let message = r.take_bytes("message", u64::from(m))?;
    let k = r.u32("mapping lists length")?;
    let lists = r.take_bytes("mapping lists", u64::from(k))?;
    if r.remaining() != 0 {
        return Err(ColumnsError::Trailing(r.remaining()));
    }
    Ok((rows, message, lists))
}

/// Puts `lists` (encoded by [`encode_mapping_lists`]; empty: nothing) into `report`'s mapping
/// report.
pub fn restore_mapping_lists(
    lists: &[u8],
    report: &mut DispatchReport,
) -> Result<(), ColumnsError> {
    if lists.is_empty() {
        return Ok(());
    }
    let mut de = rmp_serde::Deserializer::new(std::io::Cursor::new(lists));
    de.set_max_depth(MAX_DEPTH);
    let l = MappingLists::deserialize(&mut de).map_err(mp)?;
    let used = usize::try_from(de.position()).map_err(mp)?;
    if used != lists.len() {
        return Err(ColumnsError::Trailing(lists.len() - used));
    }
    let Some(m) = report.mappings.as_mut() else {
        return Err(ColumnsError::Inconsistent {
            row: 0,
            what: "mapping lists for a report without a mapping report".into(),
        });
    };
    m.runs = l.runs;
    m.pieces = l.pieces;
    m.left_out = l.left_out;
    Ok(())
}

/// Reads a version 2 or 3 DISPATCH record: the input and report, mapping lists put back.
pub fn decode_record(bytes: &[u8]) -> Result<(DispatchInput, DispatchReport), ColumnsError> {
    let (rows, message, lists) = record_parts(bytes)?;
    let m = decode_exact(rows, message)?;
    let (input, mut report) = (*m.input, *m.report);
    restore_mapping_lists(lists, &mut report)?;
    Ok((input, report))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;
    use crate::session::DispatchRecord;

    /// A whole message with fixed-width rows, as a version 2 target sent it.
    fn whole() -> (DispatchInput, DispatchReport, Vec<u8>) {
        let (input, report) = crate::columns::tests::report();
        let mut out = Vec::new();
        encode_whole(Rows::Fixed, report.index, &input, &report, &mut out).unwrap();
        (input, report, out)
    }

    /// A record whose report names its mapping lists instead of carrying them, as a live store
    /// writes it: the message without the lists, and the lists beside it.
    fn record_naming_lists() -> (DispatchInput, DispatchReport, Vec<u8>) {
        record_naming_lists_with(Rows::Fixed)
    }

    fn record_naming_lists_with(format: Rows) -> (DispatchInput, DispatchReport, Vec<u8>) {
        let (input, report) = crate::columns::tests::report();
        let m = report.mappings.as_ref().unwrap();
        assert!(!m.runs.is_empty(), "the engine's report has readable runs");
        let mut lists = Vec::new();
        let named = MappingListsRef {
            runs: &m.runs,
            pieces: &m.pieces,
            left_out: &m.left_out,
        };
        encode_mapping_lists(&named, &mut lists).unwrap();
        let mut shell = report.clone();
        let sm = shell.mappings.as_mut().unwrap();
        sm.runs.clear();
        sm.pieces.clear();
        sm.left_out.clear();
        let mut rows = Vec::new();
        format.encode(&input.accesses, &report.accesses, &mut rows);
        let mut message = Vec::new();
        encode(7, &input, &shell, Some(3), 0, &rows, &mut message).unwrap();
        let mut record = Vec::new();
        encode_record(format, &message, &lists, &mut record);
        (input, report, record)
    }

    #[test]
    fn messagepack_lengths_are_found_from_the_markers() {
        #[derive(Serialize)]
        struct Many {
            small: u8,
            big: u64,
            neg: i64,
            f: f64,
            g: f32,
            s: String,
            long: String,
            bytes: serde_bytes_like::Bytes,
            list: Vec<u32>,
            map: std::collections::BTreeMap<String, Option<bool>>,
            nested: Vec<Vec<i16>>,
        }
        mod serde_bytes_like {
            pub struct Bytes(pub Vec<u8>);
            impl serde::Serialize for Bytes {
                fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                    s.serialize_bytes(&self.0)
                }
            }
        }
        for n in [0usize, 1, 15, 16, 31, 32, 255, 256, 70_000] {
            let v = Many {
                small: 7,
                big: u64::MAX - n as u64,
                neg: -(n as i64) - 40_000,
                f: 1.5,
                g: 2.5,
                s: "x".repeat(n.min(40)),
                long: "y".repeat(n),
                bytes: serde_bytes_like::Bytes(vec![1; n]),
                list: (0..n as u32).collect(),
                map: (0..n.min(300))
                    .map(|i| (i.to_string(), (i % 3 != 0).then_some(i % 2 == 0)))
                    .collect(),
                nested: vec![vec![-1, 300, -30_000]; n.min(20)],
            };
            let mut b = rmp_serde::to_vec_named(&v).unwrap();
            assert_eq!(messagepack_len(&b).unwrap(), b.len(), "n {n}");
            for cut in [0, 1, b.len() / 2, b.len() - 1] {
                assert!(messagepack_len(&b[..cut]).is_err(), "n {n} cut {cut}");
            }
            b.extend_from_slice(&[1, 2, 3]);
            assert_eq!(messagepack_len(&b).unwrap(), b.len() - 3);
        }
        assert!(messagepack_len(&[0xc1]).is_err());
        assert!(messagepack_len(&[0xdf, 0xff, 0xff, 0xff, 0xff]).is_err());
    }

    #[test]
    fn a_version_3_record_with_packed_rows_round_trips_and_is_smaller() {
        let (input, report, v3) = record_naming_lists_with(Rows::Packed);
        let (_, _, v2) = record_naming_lists();
        assert_eq!(v3[4..8], RECORD_V3.to_le_bytes());
        assert!(is_versioned_record(&v3));
        assert!(v3.len() < v2.len(), "{} >= {}", v3.len(), v2.len());
        let r = DispatchRecord::from_payload(&v3).unwrap();
        assert_eq!((r.input, r.report), (input.clone(), Some(report.clone())));
        // A packed message read as fixed rows (or the other way) is an error, not a wrong report.
        let (rows, message, _) = record_parts(&v3).unwrap();
        assert_eq!(rows, Rows::Packed);
        assert!(decode_exact(Rows::Fixed, message).is_err());
        let (mut s, range) = summary(message).unwrap();
        fill_rows(Rows::Packed, &message[range], &mut s.input, &mut s.report).unwrap();
        assert_eq!(s.input.accesses, input.accesses);
        assert_eq!(s.report.accesses, report.accesses);
        for cut in 0..v3.len() {
            assert!(decode_record(&v3[..cut]).is_err(), "cut at {cut}");
        }
        for at in 0..v3.len() {
            let mut b = v3.clone();
            b[at] ^= 0xa5;
            let _ = decode_record(&b);
        }
    }

    #[test]
    fn a_message_round_trips_whole_and_by_its_summary() {
        let (input, report, bytes) = whole();
        let m = decode_exact(Rows::Fixed, &bytes).unwrap();
        assert_eq!(*m.input, input);
        assert_eq!(*m.report, report);
        assert_eq!(m.mapping_state, None);
        let (mut s, rows) = summary(&bytes).unwrap();
        assert!(s.input.accesses.is_empty() && s.report.accesses.is_empty());
        assert_eq!(s.report.counts, report.counts);
        fill_rows(Rows::Fixed, &bytes[rows], &mut s.input, &mut s.report).unwrap();
        assert_eq!((*s.input, *s.report), (input, report));
    }

    /// A message as version 2 wrote it before addresses went as numbers: the same MessagePack
    /// with names, its addresses `"0x…"` strings.
    fn message_with_string_addresses(input: &DispatchInput, report: &DispatchReport) -> Vec<u8> {
        let (mut i, mut r) = (input.clone(), report.clone());
        let mut rows = Vec::new();
        columns::encode_accesses(&i.accesses, &mut rows);
        columns::encode_access_reports(&r.accesses, &mut rows);
        i.accesses.clear();
        r.accesses.clear();
        let fields = MessageRef {
            index: r.index,
            input: &i,
            report: &r,
            mapping_state: None,
            accesses_left_out: 0,
        };
        let mut out = Vec::new();
        let mut ser = rmp_serde::Serializer::new(&mut out)
            .with_struct_map()
            .with_human_readable();
        fields.serialize(&mut ser).unwrap();
        out.extend_from_slice(&(rows.len() as u32).to_le_bytes());
        out.extend_from_slice(&rows);
        out
    }

    #[test]
    fn addresses_go_as_numbers_and_messages_with_address_strings_still_read() {
        let (input, report, bytes) = whole();
        let old = message_with_string_addresses(&input, &report);
        let text = |b: &[u8]| b.windows(6).filter(|w| *w == b"0x1000").count();
        // The report's sentences still name addresses; its address fields do not.
        assert!(
            text(&old) > text(&bytes),
            "the old form spells address fields out, the new carries them as numbers"
        );
        assert!(bytes.len() < old.len(), "{} >= {}", bytes.len(), old.len());
        let m = decode_exact(Rows::Fixed, &old).unwrap();
        assert_eq!((*m.input, *m.report), (input.clone(), report.clone()));
        let mut record = Vec::new();
        encode_record(Rows::Fixed, &old, &[], &mut record);
        let r = DispatchRecord::from_payload(&record).unwrap();
        assert_eq!((r.input, r.report), (input, Some(report)));
    }

    #[test]
    fn a_version_2_record_puts_its_mapping_lists_back_and_old_records_still_read() {
        let (input, report, record) = record_naming_lists();
        assert!(is_versioned_record(&record));
        let r = DispatchRecord::from_payload(&record).unwrap();
        assert_eq!(r.input, input);
        assert_eq!(r.report.as_ref(), Some(&report));
        // Version 1 (JSON rest) and plain JSON records read as before.
        let mut v1 = Vec::new();
        columns::encode_record(&input, Some(&report), &mut v1);
        assert!(!is_versioned_record(&v1));
        let r1 = DispatchRecord::from_payload(&v1).unwrap();
        assert_eq!((r1.input, r1.report), (input.clone(), Some(report.clone())));
        let json = serde_json::to_vec(&DispatchRecord {
            input: input.clone(),
            report: Some(report.clone()),
        })
        .unwrap();
        let r0 = DispatchRecord::from_payload(&json).unwrap();
        assert_eq!((r0.input, r0.report), (input, Some(report)));
    }

    #[test]
    fn every_cut_of_a_version_2_record_is_an_error_and_no_flip_panics() {
        let (_, _, record) = record_naming_lists();
        for cut in 0..record.len() {
            assert!(decode_record(&record[..cut]).is_err(), "cut at {cut}");
        }
        for at in 0..record.len() {
            let mut b = record.clone();
            b[at] ^= 0xa5;
            let _ = decode_record(&b);
            let _ = DispatchRecord::from_payload(&b);
        }
    }

    #[test]
    fn bad_version_2_records_are_named() {
        let (_, _, record) = record_naming_lists();
        let mut b = record.clone();
        b[4..8].copy_from_slice(&0x8000_0004u32.to_le_bytes());
        assert_eq!(
            decode_record(&b).unwrap_err(),
            ColumnsError::UnknownVersion(0x8000_0004)
        );
        let mut b = record.clone();
        b.push(0);
        assert_eq!(decode_record(&b).unwrap_err(), ColumnsError::Trailing(1));
        let mut b = record.clone();
        b[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            decode_record(&b).unwrap_err(),
            ColumnsError::Truncated {
                part: "message",
                ..
            }
        ));
        // The message's first byte (a MessagePack map) smashed.
        let mut b = record.clone();
        b[12] = 0xc1;
        assert!(matches!(
            decode_record(&b).unwrap_err(),
            ColumnsError::MessagePack(_)
        ));
        // Mapping lists for a report without a mapping report.
        let (input, mut report, _) = whole();
        report.mappings = None;
        let mut message = Vec::new();
        encode_whole(Rows::Fixed, 1, &input, &report, &mut message).unwrap();
        let mut lists = Vec::new();
        let named = MappingListsRef {
            runs: &[],
            pieces: &[],
            left_out: &[],
        };
        encode_mapping_lists(&named, &mut lists).unwrap();
        let mut b = Vec::new();
        encode_record(Rows::Fixed, &message, &lists, &mut b);
        assert!(matches!(
            decode_record(&b).unwrap_err(),
            ColumnsError::Inconsistent { .. }
        ));
        // A message whose rows' length word disagrees with its rows.
        let (_, _, mut m) = whole();
        let n = m.len();
        m.push(0);
        assert!(summary(&m).is_err());
        assert!(decode_exact(Rows::Fixed, &m).is_err());
        m.truncate(n - 1);
        assert!(decode_exact(Rows::Fixed, &m).is_err());
    }
}
