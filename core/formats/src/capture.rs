//! Capture files: a crash-safe, indexed, append-only container of records.
//!
//! A live session records to a capture: a file header with a payload the caller supplies, then one
//! record per memory snapshot, event batch or dispatch, each with a payload the caller encodes.
//! This module is only the container: it never looks inside a payload, never rewrites a byte it has
//! written, and never panics on any input: before anything is allocated for a length read from a
//! file, it is checked against [`MAX_RECORD_BYTES`], and a stored length also against the bytes left.
//! A crash leaves a valid prefix plus at most one torn record; the reader keeps the prefix and reports
//! the tail as [`Torn`] instead of failing.
//!
//! # Byte layout, format version 1
//!
//! Every integer is little endian; offsets are from the start of the file.
//!
//! File header, 24 bytes plus its payload (magic and version never move in any later version):
//!
//! | bytes    | field                | meaning |
//! |----------|----------------------|---------|
//! | 0..8     | magic `[u8; 8]`      | `b"DSCAPTUR"` |
//! | 8..12    | version `u32`        | [`FORMAT_VERSION`] = 1; a reader refuses versions newer than its own |
//! | 12..16   | flags `u32`          | 0; a reader refuses bits it does not know |
//! | 16..20   | payload length `u32` | `h`, at most [`MAX_HEADER_PAYLOAD_BYTES`] |
//! | 20..24   | crc32 `u32`          | crc32 (IEEE, as `crc32fast`) over bytes 0..20, then the payload |
//! | 24..24+h | payload              | the caller's bytes, e.g. JSON session metadata |
//!
//! Records follow at byte `24 + h`, back to back, each a 20-byte record header and its stored payload:
//!
//! | bytes   | field               | meaning |
//! |---------|---------------------|---------|
//! | 0       | kind `u8`           | a [`RecordKind`]; 0xf0..=0xff are the container's own |
//! | 1       | flags `u8`          | bit 0: stored payload is lz4 compressed; other bits 0 |
//! | 2..4    | reserved `u16`      | 0 |
//! | 4..12   | seq `u64`           | position among all records of the file, counting from 0, dense |
//! | 12..16  | stored length `u32` | `n`, bytes of stored payload, at most [`MAX_RECORD_BYTES`] |
//! | 16..20  | crc32 `u32`         | crc32 over record bytes 0..16, then the stored payload |
//! | 20..20+n| stored payload      | the caller's bytes, or when bit 0 is set: uncompressed length `u32` (at most [`MAX_RECORD_BYTES`]) then an lz4 block (`lz4_flex::block` format) |
//!
//! Container records, which the caller never appends and [`CaptureReader::records`] never lists:
//!
//! - `CHECKPOINT` (kind 0xfd), 24-byte payload, appended by [`CaptureWriter::flush`] after the records
//!   it covers are on disk: first covered seq `u64`, number of covered records `u64` (every record
//!   since the previous checkpoint), crc32 `u32` over the 20-byte record headers of the covered records
//!   in order, reserved `u32` = 0.
//! - `INDEX` (kind 0xfe), appended by [`CaptureWriter::finish`] as the last record, usually lz4
//!   compressed: entry count `u64` (= the index record's own seq), then one 24-byte entry per earlier
//!   record, checkpoints included, in seq order: kind `u8`, flags `u8`, reserved `u16` = 0,
//!   stored length `u32`, seq `u64`, offset of the record header `u64`.
//!
//! A finished capture ends with a 28-byte trailer right after the index record:
//!
//! | bytes  | field             | meaning |
//! |--------|-------------------|---------|
//! | 0..8   | magic `[u8; 8]`   | `b"DSCINDEX"` |
//! | 8..16  | index offset `u64`| offset of the `INDEX` record header |
//! | 16..24 | index seq `u64`   | seq of the `INDEX` record = number of records before it |
//! | 24..28 | crc32 `u32`       | crc32 over trailer bytes 0..24 |
//!
//! # Opening
//!
//! [`CaptureReader`] first reads the trailer and the index: opening a finished capture reads the
//! header, 28 bytes, and the index, nothing else, and reading record N seeks to it and reads it alone,
//! checking its header against the index and its crc.
//! Without a usable trailer (a capture cut short, or a damaged trailer) it walks the record chain.
//! The walk reads the 20-byte record headers and seeks over payloads; a run of records whose headers
//! hash to what the following checkpoint says is trusted without reading its payloads (each payload's
//! crc is still checked when it is read), and every other record (those after the last checkpoint, or
//! in a run whose checkpoint disagrees) has its crc checked while opening.
//! So reopening a huge unfinished capture that was flushed now and then costs one small read per
//! record plus the bytes after the last flush, not every byte.
//! The walk stops at the first record that is cut, out of sequence, or fails its crc, keeps every record
//! before it, and reports the rest as [`Torn`].

use std::borrow::Cow;
use std::ffi::OsString;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, BufWriter, Cursor, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The first 8 bytes of every capture.
pub const FILE_MAGIC: [u8; 8] = *b"DSCAPTUR";
/// The first 8 bytes of the trailer of a finished capture.
pub const TRAILER_MAGIC: [u8; 8] = *b"DSCINDEX";
/// The format version this build writes, and the newest it reads.
pub const FORMAT_VERSION: u32 = 1;
/// Bytes of the fixed part of the file header, before its payload.
pub const FILE_HEADER_BYTES: u64 = 24;
/// Bytes of a record header, before its stored payload.
pub const RECORD_HEADER_BYTES: u64 = 20;
/// Bytes of the trailer of a finished capture.
pub const TRAILER_BYTES: u64 = 28;
/// Bytes of one entry of the `INDEX` record.
pub const INDEX_ENTRY_BYTES: u64 = 24;
/// Bytes of the payload of a `CHECKPOINT` record.
pub const CHECKPOINT_PAYLOAD_BYTES: u64 = 24;
/// The most bytes a record payload may have, stored or uncompressed; checked before allocating.
pub const MAX_RECORD_BYTES: u32 = 256 << 20;
/// The most bytes the file header payload may have; checked before allocating.
pub const MAX_HEADER_PAYLOAD_BYTES: u32 = 16 << 20;

/// Record flag bit 0: the stored payload is an uncompressed length and an lz4 block.
const FLAG_LZ4: u8 = 1;
/// Every record flag bit this build knows.
const KNOWN_RECORD_FLAGS: u8 = FLAG_LZ4;
/// Buffer size of the writer and of [`CaptureReader::open`]'s reader.
const BUFFER_BYTES: usize = 256 << 10;

/// What a record holds, chosen by the caller; kinds 0xf0..=0xff are reserved for the container.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RecordKind(pub u8);

impl RecordKind {
    /// Session metadata.
    pub const META: Self = Self(0x01);
    /// A memory snapshot.
    pub const MEMORY: Self = Self(0x02);
    /// A batch of memory events.
    pub const EVENTS: Self = Self(0x03);
    /// One dispatch.
    pub const DISPATCH: Self = Self(0x04);
    /// Container: a checkpoint appended by [`CaptureWriter::flush`].
    pub const CHECKPOINT: Self = Self(0xfd);
    /// Container: the index appended by [`CaptureWriter::finish`].
    pub const INDEX: Self = Self(0xfe);
    /// The first kind reserved for the container.
    pub const FIRST_RESERVED: Self = Self(0xf0);

    /// Whether this kind belongs to the container, so the caller may not append it.
    pub fn is_reserved(self) -> bool {
        self.0 >= Self::FIRST_RESERVED.0
    }

    fn name(self) -> Option<&'static str> {
        match self {
            Self::META => Some("META"),
            Self::MEMORY => Some("MEMORY"),
            Self::EVENTS => Some("EVENTS"),
            Self::DISPATCH => Some("DISPATCH"),
            Self::CHECKPOINT => Some("CHECKPOINT"),
            Self::INDEX => Some("INDEX"),
            _ => None,
        }
    }
}

impl fmt::Display for RecordKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => write!(f, "{name} (0x{:02x})", self.0),
            None => write!(f, "0x{:02x}", self.0),
        }
    }
}

/// Where one record lies in a capture and how it is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordMeta {
    /// What the record holds.
    pub kind: RecordKind,
    /// Position among all records of the file, container records included, counting from 0.
    pub seq: u64,
    /// Offset of the record header from the start of the file.
    pub offset_bytes: u64,
    /// Bytes of the stored payload, after compression, without the 20-byte record header.
    pub stored_len_bytes: u32,
    /// Whether the stored payload is lz4 compressed.
    pub compressed: bool,
}

impl RecordMeta {
    /// Offset of the first byte after this record.
    pub fn end_offset_bytes(&self) -> u64 {
        self.offset_bytes
            .saturating_add(RECORD_HEADER_BYTES)
            .saturating_add(u64::from(self.stored_len_bytes))
    }

    fn flags(&self) -> u8 {
        if self.compressed { FLAG_LZ4 } else { 0 }
    }
}

/// The end of a capture that was cut short or damaged: everything from `offset_bytes` on was dropped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Torn {
    /// Offset of the first byte that is not part of a kept record.
    pub offset_bytes: u64,
    /// Why the bytes there do not form a record.
    pub reason: String,
}

impl fmt::Display for Torn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "capture torn at byte 0x{:x}: {}",
            self.offset_bytes, self.reason
        )
    }
}

/// Everything that can go wrong writing or reading a capture.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The operating system refused a read, write, seek or sync.
    #[error("{action}: {source}")]
    Io {
        /// What was being done, with the path or offset.
        action: String,
        /// The operating system's error.
        source: io::Error,
    },
    /// The file ends before its header does.
    #[error(
        "not a dispatchscope capture: the file is {len_bytes} bytes, but its header needs {needed_bytes}"
    )]
    HeaderCut {
        /// Bytes in the file.
        len_bytes: u64,
        /// Bytes the header needs.
        needed_bytes: u64,
    },
    /// The first 8 bytes are not [`FILE_MAGIC`].
    #[error(
        "not a dispatchscope capture: magic bytes {found:02x?} at byte 0x0, expected \"DSCAPTUR\""
    )]
    BadMagic {
        /// The bytes found.
        found: [u8; 8],
    },
    /// The format version is one this build does not read.
    #[error("capture format version {version} is newer than this build reads ({FORMAT_VERSION})")]
    VersionTooNew {
        /// The version at byte 0x8.
        version: u32,
    },
    /// The format version is 0, which no build writes.
    #[error("capture format version 0 at byte 0x8: no build writes it, this build reads 1")]
    VersionZero,
    /// The header length field is over [`MAX_HEADER_PAYLOAD_BYTES`].
    #[error("capture header payload of {len_bytes} bytes exceeds the limit of {max_bytes} bytes")]
    HeaderPayloadTooLarge {
        /// The length asked for.
        len_bytes: u64,
        /// [`MAX_HEADER_PAYLOAD_BYTES`].
        max_bytes: u32,
    },
    /// The header crc does not match.
    #[error("capture header at byte 0x0: checksum 0x{stored:08x}, computed 0x{computed:08x}")]
    HeaderChecksum {
        /// The crc at byte 0x14.
        stored: u32,
        /// The crc of the bytes read.
        computed: u32,
    },
    /// The header flags set bits this build does not know.
    #[error("capture header at byte 0xc: flags 0x{flags:08x} set bits this build does not know")]
    UnknownHeaderFlags {
        /// The flags at byte 0xc.
        flags: u32,
    },
    /// A record crc does not match.
    #[error(
        "record at byte 0x{offset_bytes:x}: checksum 0x{stored:08x}, computed 0x{computed:08x}"
    )]
    RecordChecksum {
        /// Offset of the record header.
        offset_bytes: u64,
        /// The crc in the record header.
        stored: u32,
        /// The crc of the bytes read.
        computed: u32,
    },
    /// A record header disagrees with the index, or its fields are impossible.
    #[error("record at byte 0x{offset_bytes:x}: {field} is {found}, expected {expected}")]
    RecordHeader {
        /// Offset of the record header.
        offset_bytes: u64,
        /// Which field.
        field: &'static str,
        /// The value found.
        found: String,
        /// The value the index or the format asks for.
        expected: String,
    },
    /// A compressed record does not decompress to its stated length.
    #[error("record at byte 0x{offset_bytes:x}: lz4 payload does not decompress: {reason}")]
    Decompress {
        /// Offset of the record header.
        offset_bytes: u64,
        /// What the decompressor said, or which length disagreed.
        reason: String,
    },
    /// A payload is over [`MAX_RECORD_BYTES`].
    #[error("record payload of {len_bytes} bytes exceeds the limit of {max_bytes} bytes")]
    RecordTooLarge {
        /// The length asked for.
        len_bytes: u64,
        /// [`MAX_RECORD_BYTES`].
        max_bytes: u32,
    },
    /// The caller tried to append a kind that belongs to the container.
    #[error("record kind {kind} is reserved for the container (kinds 0xf0..=0xff)")]
    ReservedKind {
        /// The kind asked for.
        kind: RecordKind,
    },
    /// A record index past the end of [`CaptureReader::records`].
    #[error("no record #{idx}: the capture holds {n_records} records")]
    NoSuchRecord {
        /// The index asked for.
        idx: usize,
        /// Records the capture holds.
        n_records: usize,
    },
    /// A record number past the end of its kind.
    #[error("no record #{n} of kind {kind}: the capture holds {n_of_kind} of that kind")]
    NoSuchRecordOfKind {
        /// The kind asked for.
        kind: RecordKind,
        /// The number asked for, counting from 0.
        n: usize,
        /// Records of that kind the capture holds.
        n_of_kind: usize,
    },
    /// An earlier write failed, so the file may end in a partial record; the writer refuses more.
    #[error("capture writer stopped after an earlier error: {first_error}")]
    WriterPoisoned {
        /// The error that stopped it.
        first_error: String,
    },
    /// [`write_atomically`] was given a path it cannot replace.
    #[error("cannot write atomically to {path:?}: {why}")]
    BadDestination {
        /// The destination.
        path: PathBuf,
        /// What is wrong with it.
        why: &'static str,
    },
}

/// A result whose error is a [`CaptureError`].
pub type Result<T, E = CaptureError> = std::result::Result<T, E>;

fn io_error(action: impl Into<String>) -> impl FnOnce(io::Error) -> CaptureError {
    let action = action.into();
    move |source| CaptureError::Io { action, source }
}

fn le_u16(bytes: &[u8], at: usize) -> u16 {
    let mut le = [0u8; 2];
    if let Some(src) = bytes.get(at..at + 2) {
        le.copy_from_slice(src);
    }
    u16::from_le_bytes(le)
}

fn le_u32(bytes: &[u8], at: usize) -> u32 {
    let mut le = [0u8; 4];
    if let Some(src) = bytes.get(at..at + 4) {
        le.copy_from_slice(src);
    }
    u32::from_le_bytes(le)
}

fn le_u64(bytes: &[u8], at: usize) -> u64 {
    let mut le = [0u8; 8];
    if let Some(src) = bytes.get(at..at + 8) {
        le.copy_from_slice(src);
    }
    u64::from_le_bytes(le)
}

fn crc_of(parts: &[&[u8]]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    for part in parts {
        hasher.update(part);
    }
    hasher.finalize()
}

/// The 20-byte header of one record, as read.
#[derive(Clone, Copy)]
struct RecordHeader {
    bytes: [u8; RECORD_HEADER_BYTES as usize],
}

impl RecordHeader {
    fn new(kind: RecordKind, flags: u8, seq: u64, stored: &[u8]) -> Result<Self> {
        let stored_len = u32::try_from(stored.len())
            .ok()
            .filter(|&len| len <= MAX_RECORD_BYTES)
            .ok_or(CaptureError::RecordTooLarge {
                len_bytes: stored.len() as u64,
                max_bytes: MAX_RECORD_BYTES,
            })?;
        let mut bytes = [0u8; RECORD_HEADER_BYTES as usize];
        bytes[0] = kind.0;
        bytes[1] = flags;
        bytes[4..12].copy_from_slice(&seq.to_le_bytes());
        bytes[12..16].copy_from_slice(&stored_len.to_le_bytes());
        let crc = crc_of(&[&bytes[..16], stored]);
        bytes[16..20].copy_from_slice(&crc.to_le_bytes());
        Ok(Self { bytes })
    }

    fn kind(&self) -> RecordKind {
        RecordKind(self.bytes[0])
    }
    fn flags(&self) -> u8 {
        self.bytes[1]
    }
    fn reserved(&self) -> u16 {
        le_u16(&self.bytes, 2)
    }
    fn seq(&self) -> u64 {
        le_u64(&self.bytes, 4)
    }
    fn stored_len(&self) -> u32 {
        le_u32(&self.bytes, 12)
    }
    fn crc(&self) -> u32 {
        le_u32(&self.bytes, 16)
    }

    fn meta(&self, offset_bytes: u64) -> RecordMeta {
        RecordMeta {
            kind: self.kind(),
            seq: self.seq(),
            offset_bytes,
            stored_len_bytes: self.stored_len(),
            compressed: self.flags() & FLAG_LZ4 != 0,
        }
    }

    /// Checks what can be checked without the payload: known flags, reserved zero, the expected seq,
    /// and a length within the limit and within the `left_bytes` the file has after `offset_bytes`.
    fn check_shape(&self, offset_bytes: u64, expected_seq: u64, left_bytes: u64) -> Result<()> {
        let bad = |field, found: String, expected: String| CaptureError::RecordHeader {
            offset_bytes,
            field,
            found,
            expected,
        };
        if self.flags() & !KNOWN_RECORD_FLAGS != 0 {
            return Err(bad(
                "flags",
                format!("0x{:02x}", self.flags()),
                "only bit 0 set".into(),
            ));
        }
        if self.reserved() != 0 {
            return Err(bad(
                "reserved field",
                format!("0x{:04x}", self.reserved()),
                "0".into(),
            ));
        }
        if self.seq() != expected_seq {
            return Err(bad("seq", self.seq().to_string(), expected_seq.to_string()));
        }
        if self.stored_len() > MAX_RECORD_BYTES {
            return Err(bad(
                "stored length",
                self.stored_len().to_string(),
                format!("at most {MAX_RECORD_BYTES}"),
            ));
        }
        let needed = RECORD_HEADER_BYTES + u64::from(self.stored_len());
        if needed > left_bytes {
            return Err(bad(
                "record length",
                format!("{needed} bytes with its header"),
                format!("at most the {left_bytes} bytes left in the file"),
            ));
        }
        Ok(())
    }

    /// Checks this header against the index's record of it.
    fn check_against(&self, meta: &RecordMeta) -> Result<()> {
        let bad = |field, found: String, expected: String| CaptureError::RecordHeader {
            offset_bytes: meta.offset_bytes,
            field,
            found,
            expected,
        };
        if self.kind() != meta.kind {
            return Err(bad("kind", self.kind().to_string(), meta.kind.to_string()));
        }
        if self.flags() != meta.flags() {
            let (found, expected) = (self.flags(), meta.flags());
            return Err(bad(
                "flags",
                format!("0x{found:02x}"),
                format!("0x{expected:02x}"),
            ));
        }
        if self.reserved() != 0 {
            return Err(bad(
                "reserved field",
                format!("0x{:04x}", self.reserved()),
                "0".into(),
            ));
        }
        if self.seq() != meta.seq {
            return Err(bad("seq", self.seq().to_string(), meta.seq.to_string()));
        }
        if self.stored_len() != meta.stored_len_bytes {
            let expected = meta.stored_len_bytes.to_string();
            return Err(bad(
                "stored length",
                self.stored_len().to_string(),
                expected,
            ));
        }
        Ok(())
    }

    fn check_crc(&self, offset_bytes: u64, stored: &[u8]) -> Result<()> {
        let computed = crc_of(&[&self.bytes[..16], stored]);
        if computed != self.crc() {
            return Err(CaptureError::RecordChecksum {
                offset_bytes,
                stored: self.crc(),
                computed,
            });
        }
        Ok(())
    }
}

/// Turns a stored payload into the caller's bytes.
fn decode_payload(meta: &RecordMeta, stored: Vec<u8>) -> Result<Vec<u8>> {
    if !meta.compressed {
        return Ok(stored);
    }
    let offset_bytes = meta.offset_bytes;
    let fail = |reason: String| CaptureError::Decompress {
        offset_bytes,
        reason,
    };
    let block = stored.get(4..).ok_or_else(|| {
        fail(format!(
            "stored payload is {} bytes, too short for its 4-byte length",
            stored.len()
        ))
    })?;
    let len_bytes = le_u32(&stored, 0);
    if len_bytes > MAX_RECORD_BYTES {
        return Err(CaptureError::RecordTooLarge {
            len_bytes: u64::from(len_bytes),
            max_bytes: MAX_RECORD_BYTES,
        });
    }
    let mut out = vec![0u8; len_bytes as usize];
    let got = lz4_flex::block::decompress_into(block, &mut out).map_err(|e| fail(e.to_string()))?;
    if got != out.len() {
        return Err(fail(format!(
            "it gave {got} bytes, the record says {len_bytes}"
        )));
    }
    Ok(out)
}

/// Something a [`CaptureWriter`] can write to and make durable.
pub trait CaptureSink: Write {
    /// Makes every byte written so far durable (`fsync` of the data for a file).
    fn sync_data(&mut self) -> io::Result<()>;
}

impl CaptureSink for File {
    fn sync_data(&mut self) -> io::Result<()> {
        File::sync_data(self)
    }
}

impl CaptureSink for Vec<u8> {
    fn sync_data(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<S: CaptureSink + ?Sized> CaptureSink for &mut S {
    fn sync_data(&mut self) -> io::Result<()> {
        (**self).sync_data()
    }
}

/// Appends records to a capture; see the module docs for the layout.
///
/// Dropping a writer without [`CaptureWriter::finish`] leaves an unfinished capture, which
/// [`CaptureReader`] opens by walking its records.
pub struct CaptureWriter<W: CaptureSink = File> {
    out: BufWriter<W>,
    /// Offset of the next record header.
    offset_bytes: u64,
    /// Every record written, checkpoints included; the next seq is its length.
    written: Vec<RecordMeta>,
    /// Seq of the first record the next checkpoint covers.
    segment_first_seq: u64,
    /// crc32 over the headers of the records the next checkpoint covers.
    segment_headers: crc32fast::Hasher,
    /// The first error that left the sink in an unknown state.
    poisoned: Option<String>,
}

impl CaptureWriter<File> {
    /// Creates (or truncates) the file at `path` and writes the file header with `header_payload`.
    pub fn create(path: &Path, header_payload: &[u8]) -> Result<Self> {
        let file = File::create(path).map_err(io_error(format!("creating capture {path:?}")))?;
        Self::to_sink(file, header_payload)
    }
}

impl<W: CaptureSink> CaptureWriter<W> {
    /// Writes the file header with `header_payload` to `sink` and returns a writer appending to it.
    pub fn to_sink(sink: W, header_payload: &[u8]) -> Result<Self> {
        let payload_len = u32::try_from(header_payload.len())
            .ok()
            .filter(|&len| len <= MAX_HEADER_PAYLOAD_BYTES)
            .ok_or(CaptureError::HeaderPayloadTooLarge {
                len_bytes: header_payload.len() as u64,
                max_bytes: MAX_HEADER_PAYLOAD_BYTES,
            })?;
        let mut fixed = [0u8; FILE_HEADER_BYTES as usize];
        fixed[0..8].copy_from_slice(&FILE_MAGIC);
        fixed[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        fixed[16..20].copy_from_slice(&payload_len.to_le_bytes());
        let crc = crc_of(&[&fixed[..20], header_payload]);
        fixed[20..24].copy_from_slice(&crc.to_le_bytes());

        let mut out = BufWriter::with_capacity(BUFFER_BYTES, sink);
        out.write_all(&fixed)
            .and_then(|()| out.write_all(header_payload))
            .map_err(io_error("writing the capture header"))?;
        Ok(Self {
            out,
            offset_bytes: FILE_HEADER_BYTES + u64::from(payload_len),
            written: Vec::new(),
            segment_first_seq: 0,
            segment_headers: crc32fast::Hasher::new(),
            poisoned: None,
        })
    }

    /// Appends one record and returns its seq.
    ///
    /// With `compress`, the payload is stored lz4 compressed when that makes it smaller.
    /// The record reaches the sink when the buffer fills, and disk on [`Self::flush`].
    pub fn append(&mut self, kind: RecordKind, payload: &[u8], compress: bool) -> Result<u64> {
        self.check_usable()?;
        if kind.is_reserved() {
            return Err(CaptureError::ReservedKind { kind });
        }
        self.write_record(kind, payload, compress)
    }

    /// Writes buffered records, makes them durable, then appends a checkpoint covering them and makes
    /// that durable too (two `fsync`s when records were appended since the last flush, else one).
    pub fn flush(&mut self) -> Result<()> {
        self.check_usable()?;
        let n_covered = self.written.len() as u64 - self.segment_first_seq;
        self.sync()?;
        if n_covered > 0 {
            let mut payload = [0u8; CHECKPOINT_PAYLOAD_BYTES as usize];
            payload[0..8].copy_from_slice(&self.segment_first_seq.to_le_bytes());
            payload[8..16].copy_from_slice(&n_covered.to_le_bytes());
            payload[16..20].copy_from_slice(&self.segment_headers.clone().finalize().to_le_bytes());
            self.write_record(RecordKind::CHECKPOINT, &payload, false)?;
            self.segment_first_seq = self.written.len() as u64;
            self.segment_headers = crc32fast::Hasher::new();
            self.sync()?;
        }
        Ok(())
    }

    /// Appends the index and the trailer, makes everything durable, and returns the sink.
    pub fn finish(mut self) -> Result<W> {
        self.check_usable()?;
        let index_offset = self.offset_bytes;
        let index_seq = self.written.len() as u64;
        let index_len = index_seq
            .checked_mul(INDEX_ENTRY_BYTES)
            .and_then(|len| len.checked_add(8))
            .filter(|&len| len <= u64::from(MAX_RECORD_BYTES))
            .ok_or(CaptureError::RecordTooLarge {
                len_bytes: index_seq
                    .saturating_mul(INDEX_ENTRY_BYTES)
                    .saturating_add(8),
                max_bytes: MAX_RECORD_BYTES,
            })?;
        let mut index = Vec::with_capacity(index_len as usize);
        index.extend_from_slice(&index_seq.to_le_bytes());
        for meta in &self.written {
            index.push(meta.kind.0);
            index.push(meta.flags());
            index.extend_from_slice(&[0, 0]);
            index.extend_from_slice(&meta.stored_len_bytes.to_le_bytes());
            index.extend_from_slice(&meta.seq.to_le_bytes());
            index.extend_from_slice(&meta.offset_bytes.to_le_bytes());
        }
        self.write_record(RecordKind::INDEX, &index, true)?;

        let mut trailer = [0u8; TRAILER_BYTES as usize];
        trailer[0..8].copy_from_slice(&TRAILER_MAGIC);
        trailer[8..16].copy_from_slice(&index_offset.to_le_bytes());
        trailer[16..24].copy_from_slice(&index_seq.to_le_bytes());
        let crc = crc_of(&[&trailer[..24]]);
        trailer[24..28].copy_from_slice(&crc.to_le_bytes());
        let at = self.offset_bytes;
        self.out
            .write_all(&trailer)
            .map_err(io_error(format!("writing the trailer at byte 0x{at:x}")))?;
        self.sync()?;
        self.out
            .into_inner()
            .map_err(|e| io_error("flushing the finished capture")(e.into_error()))
    }

    /// Writes buffered records and makes them durable without an index: what a crash right after
    /// [`Self::flush`] leaves. For tests and for handing over a capture that is still open.
    pub fn into_unfinished(mut self) -> Result<W> {
        self.check_usable()?;
        self.sync()?;
        self.out
            .into_inner()
            .map_err(|e| io_error("flushing the unfinished capture")(e.into_error()))
    }

    /// Records appended so far, container records included; the seq the next record gets.
    pub fn n_records(&self) -> u64 {
        self.written.len() as u64
    }

    /// Bytes of the capture so far, buffered ones included.
    pub fn len_bytes(&self) -> u64 {
        self.offset_bytes
    }

    fn check_usable(&self) -> Result<()> {
        match &self.poisoned {
            Some(first_error) => Err(CaptureError::WriterPoisoned {
                first_error: first_error.clone(),
            }),
            None => Ok(()),
        }
    }

    fn poison(&mut self, error: CaptureError) -> CaptureError {
        self.poisoned = Some(error.to_string());
        error
    }

    fn sync(&mut self) -> Result<()> {
        let result = self
            .out
            .flush()
            .and_then(|()| self.out.get_mut().sync_data())
            .map_err(io_error("flushing and syncing the capture"));
        result.map_err(|e| self.poison(e))
    }

    fn write_record(&mut self, kind: RecordKind, payload: &[u8], compress: bool) -> Result<u64> {
        if payload.len() as u64 > u64::from(MAX_RECORD_BYTES) {
            return Err(CaptureError::RecordTooLarge {
                len_bytes: payload.len() as u64,
                max_bytes: MAX_RECORD_BYTES,
            });
        }
        let mut flags = 0;
        let mut stored = Cow::Borrowed(payload);
        if compress {
            let block = lz4_flex::block::compress(payload);
            if block.len() + 4 < payload.len() {
                let mut with_len = Vec::with_capacity(block.len() + 4);
                with_len.extend_from_slice(&(payload.len() as u32).to_le_bytes());
                with_len.extend_from_slice(&block);
                stored = Cow::Owned(with_len);
                flags = FLAG_LZ4;
            }
        }
        let seq = self.written.len() as u64;
        let header = RecordHeader::new(kind, flags, seq, &stored)?;
        let offset_bytes = self.offset_bytes;
        if let Err(source) = self
            .out
            .write_all(&header.bytes)
            .and_then(|()| self.out.write_all(&stored))
        {
            let action = format!("writing record {seq} at byte 0x{offset_bytes:x}");
            return Err(self.poison(CaptureError::Io { action, source }));
        }
        let meta = header.meta(offset_bytes);
        if kind != RecordKind::CHECKPOINT {
            self.segment_headers.update(&header.bytes);
        }
        self.offset_bytes = meta.end_offset_bytes();
        self.written.push(meta);
        Ok(seq)
    }
}

/// A reader that knows its length and where it is, so it can seek relatively (keeping a
/// `BufReader`'s buffer) and never reads past the end.
struct Source<R> {
    inner: R,
    /// Where `inner` is, or `None` after an error left it unknown.
    pos: Option<u64>,
    len_bytes: u64,
}

impl<R: Read + Seek> Source<R> {
    fn new(mut inner: R) -> Result<Self> {
        let len_bytes = inner
            .seek(SeekFrom::End(0))
            .map_err(io_error("seeking to the end of the capture"))?;
        Ok(Self {
            inner,
            pos: None,
            len_bytes,
        })
    }

    fn seek_to(&mut self, offset_bytes: u64) -> io::Result<()> {
        let delta = self.pos.and_then(|pos| {
            if offset_bytes >= pos {
                i64::try_from(offset_bytes - pos).ok()
            } else {
                i64::try_from(pos - offset_bytes).ok().map(|d| -d)
            }
        });
        match delta {
            Some(0) => Ok(()),
            Some(delta) => self.inner.seek_relative(delta),
            None => self.inner.seek(SeekFrom::Start(offset_bytes)).map(|_| ()),
        }
    }

    fn read_at(&mut self, offset_bytes: u64, buf: &mut [u8]) -> Result<()> {
        let result = self
            .seek_to(offset_bytes)
            .and_then(|()| self.inner.read_exact(buf));
        match result {
            Ok(()) => {
                self.pos = Some(offset_bytes + buf.len() as u64);
                Ok(())
            }
            Err(source) => {
                self.pos = None;
                let action = format!("reading {} bytes at byte 0x{offset_bytes:x}", buf.len());
                Err(CaptureError::Io { action, source })
            }
        }
    }

    fn read_vec_at(&mut self, offset_bytes: u64, len_bytes: u32) -> Result<Vec<u8>> {
        // Callers have checked `len_bytes` against MAX_RECORD_BYTES and the bytes left in the file.
        let mut buf = vec![0u8; len_bytes as usize];
        self.read_at(offset_bytes, &mut buf)?;
        Ok(buf)
    }

    fn read_header_at(&mut self, offset_bytes: u64) -> Result<RecordHeader> {
        let mut bytes = [0u8; RECORD_HEADER_BYTES as usize];
        self.read_at(offset_bytes, &mut bytes)?;
        Ok(RecordHeader { bytes })
    }

    /// Reads the record `meta` says is there, checks its header against `meta` and its crc, and
    /// returns its stored payload.
    fn read_stored(&mut self, meta: &RecordMeta) -> Result<Vec<u8>> {
        let header = self.read_header_at(meta.offset_bytes)?;
        header.check_against(meta)?;
        let left = self.len_bytes.saturating_sub(meta.offset_bytes);
        header.check_shape(meta.offset_bytes, meta.seq, left)?;
        let stored =
            self.read_vec_at(meta.offset_bytes + RECORD_HEADER_BYTES, header.stored_len())?;
        header.check_crc(meta.offset_bytes, &stored)?;
        Ok(stored)
    }
}

/// How opening by the trailer went.
enum IndexOutcome {
    /// Every record before the index, checkpoints included.
    Indexed(Vec<RecordMeta>),
    /// No trailer magic at the end: an unfinished capture.
    NoTrailer,
    /// A trailer, but it or the index is damaged.
    Unusable(CaptureError),
}

/// What a walk of the record chain found.
struct Walk {
    /// Every kept record, container records included.
    records: Vec<RecordMeta>,
    torn: Option<Torn>,
}

/// Reads a capture: the header payload, the list of records, and any one record on demand.
pub struct CaptureReader<R = BufReader<File>> {
    src: Source<R>,
    header_payload: Vec<u8>,
    /// The caller's records, in seq order.
    records: Vec<RecordMeta>,
    /// For each kind byte, indices into `records`.
    by_kind: Vec<Vec<usize>>,
    torn: Option<Torn>,
    finished: bool,
}

impl CaptureReader<BufReader<File>> {
    /// Opens the capture at `path`.
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(io_error(format!("opening capture {path:?}")))?;
        Self::from_reader(BufReader::with_capacity(BUFFER_BYTES, file))
    }
}

impl CaptureReader<Cursor<Vec<u8>>> {
    /// Opens a capture held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self> {
        Self::from_reader(Cursor::new(bytes))
    }
}

impl<R: Read + Seek> CaptureReader<R> {
    /// Opens a capture from any seekable reader; see the module docs for what is read.
    ///
    /// Errors only when the file header is missing or bad, or the reader fails; a damaged or cut
    /// record chain opens with the records before the damage and [`Self::torn`] set.
    pub fn from_reader(inner: R) -> Result<Self> {
        let mut src = Source::new(inner)?;
        let header_payload = read_file_header(&mut src)?;
        let header_end = FILE_HEADER_BYTES + header_payload.len() as u64;
        let (all, torn, finished) = match open_indexed(&mut src, header_end)? {
            IndexOutcome::Indexed(all) => (all, None, true),
            IndexOutcome::NoTrailer => {
                let walk = walk(&mut src, header_end, None)?;
                (walk.records, walk.torn, false)
            }
            IndexOutcome::Unusable(why) => {
                tracing::warn!("capture index unusable, walking the records instead: {why}");
                let walk = walk(&mut src, header_end, Some(why))?;
                (walk.records, walk.torn, false)
            }
        };
        if let Some(torn) = &torn {
            tracing::warn!("{torn}");
        }
        let records: Vec<RecordMeta> = all
            .into_iter()
            .filter(|meta| !meta.kind.is_reserved())
            .collect();
        let mut by_kind = vec![Vec::new(); 256];
        for (idx, meta) in records.iter().enumerate() {
            if let Some(of_kind) = by_kind.get_mut(usize::from(meta.kind.0)) {
                of_kind.push(idx);
            }
        }
        Ok(Self {
            src,
            header_payload,
            records,
            by_kind,
            torn,
            finished,
        })
    }

    /// The payload the writer gave [`CaptureWriter::create`].
    pub fn header_payload(&self) -> &[u8] {
        &self.header_payload
    }

    /// The caller's records, in seq order; container records are left out, so seqs may skip.
    pub fn records(&self) -> &[RecordMeta] {
        &self.records
    }

    /// How many records of `kind` the capture holds.
    pub fn len_of_kind(&self, kind: RecordKind) -> usize {
        self.by_kind.get(usize::from(kind.0)).map_or(0, Vec::len)
    }

    /// Reads record `n` (counting from 0) of `kind`, and no other record.
    pub fn nth_of_kind(&mut self, kind: RecordKind, n: usize) -> Result<Vec<u8>> {
        let idx = self
            .by_kind
            .get(usize::from(kind.0))
            .and_then(|of_kind| of_kind.get(n))
            .copied();
        match idx {
            Some(idx) => self.read_record(idx),
            None => Err(CaptureError::NoSuchRecordOfKind {
                kind,
                n,
                n_of_kind: self.len_of_kind(kind),
            }),
        }
    }

    /// Reads `records()[idx]`, checking its crc and decompressing it.
    pub fn read_record(&mut self, idx: usize) -> Result<Vec<u8>> {
        let meta = *self.records.get(idx).ok_or(CaptureError::NoSuchRecord {
            idx,
            n_records: self.records.len(),
        })?;
        let stored = self.src.read_stored(&meta)?;
        decode_payload(&meta, stored)
    }

    /// Where and why the capture was cut short, when it was.
    pub fn torn(&self) -> Option<&Torn> {
        self.torn.as_ref()
    }

    /// Whether the capture ends with a good index and trailer, as [`CaptureWriter::finish`] leaves it.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Bytes in the capture file.
    pub fn len_bytes(&self) -> u64 {
        self.src.len_bytes
    }

    /// Reads every record in seq order; a damaged record is an `Err` and the next one is read after it.
    pub fn iter(&mut self) -> Records<'_, R> {
        Records {
            reader: self,
            next_idx: 0,
        }
    }
}

/// Iterator over every record of a capture, from [`CaptureReader::iter`].
pub struct Records<'a, R> {
    reader: &'a mut CaptureReader<R>,
    next_idx: usize,
}

impl<R: Read + Seek> Iterator for Records<'_, R> {
    type Item = Result<(RecordMeta, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        let idx = self.next_idx;
        let meta = *self.reader.records.get(idx)?;
        self.next_idx += 1;
        Some(self.reader.read_record(idx).map(|payload| (meta, payload)))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.reader.records.len().saturating_sub(self.next_idx);
        (left, Some(left))
    }
}

/// Reads and checks the file header; returns its payload.
fn read_file_header<R: Read + Seek>(src: &mut Source<R>) -> Result<Vec<u8>> {
    let len_bytes = src.len_bytes;
    if len_bytes < FILE_HEADER_BYTES {
        return Err(CaptureError::HeaderCut {
            len_bytes,
            needed_bytes: FILE_HEADER_BYTES,
        });
    }
    let mut fixed = [0u8; FILE_HEADER_BYTES as usize];
    src.read_at(0, &mut fixed)?;
    let mut magic = [0u8; 8];
    magic.copy_from_slice(&fixed[0..8]);
    if magic != FILE_MAGIC {
        return Err(CaptureError::BadMagic { found: magic });
    }
    let version = le_u32(&fixed, 8);
    if version == 0 {
        return Err(CaptureError::VersionZero);
    }
    if version > FORMAT_VERSION {
        return Err(CaptureError::VersionTooNew { version });
    }
    let payload_len = le_u32(&fixed, 16);
    if payload_len > MAX_HEADER_PAYLOAD_BYTES {
        return Err(CaptureError::HeaderPayloadTooLarge {
            len_bytes: u64::from(payload_len),
            max_bytes: MAX_HEADER_PAYLOAD_BYTES,
        });
    }
    let needed_bytes = FILE_HEADER_BYTES + u64::from(payload_len);
    if len_bytes < needed_bytes {
        return Err(CaptureError::HeaderCut {
            len_bytes,
            needed_bytes,
        });
    }
    let payload = src.read_vec_at(FILE_HEADER_BYTES, payload_len)?;
    let stored = le_u32(&fixed, 20);
    let computed = crc_of(&[&fixed[..20], &payload]);
    if stored != computed {
        return Err(CaptureError::HeaderChecksum { stored, computed });
    }
    let flags = le_u32(&fixed, 12);
    if flags != 0 {
        return Err(CaptureError::UnknownHeaderFlags { flags });
    }
    Ok(payload)
}

/// Opens by the trailer and the index; an `Err` only for a failing reader.
fn open_indexed<R: Read + Seek>(src: &mut Source<R>, header_end: u64) -> Result<IndexOutcome> {
    let len_bytes = src.len_bytes;
    let Some(trailer_offset) = len_bytes.checked_sub(TRAILER_BYTES) else {
        return Ok(IndexOutcome::NoTrailer);
    };
    if trailer_offset < header_end + RECORD_HEADER_BYTES {
        return Ok(IndexOutcome::NoTrailer);
    }
    let mut trailer = [0u8; TRAILER_BYTES as usize];
    src.read_at(trailer_offset, &mut trailer)?;
    if trailer[0..8] != TRAILER_MAGIC {
        return Ok(IndexOutcome::NoTrailer);
    }
    let unusable = |field, found: String, expected: String| {
        Ok(IndexOutcome::Unusable(CaptureError::RecordHeader {
            offset_bytes: trailer_offset,
            field,
            found,
            expected,
        }))
    };
    let stored_crc = le_u32(&trailer, 24);
    let computed = crc_of(&[&trailer[..24]]);
    if stored_crc != computed {
        return Ok(IndexOutcome::Unusable(CaptureError::RecordChecksum {
            offset_bytes: trailer_offset,
            stored: stored_crc,
            computed,
        }));
    }
    let index_offset = le_u64(&trailer, 8);
    let index_seq = le_u64(&trailer, 16);
    if index_offset < header_end || index_offset > trailer_offset - RECORD_HEADER_BYTES {
        return unusable(
            "trailer's index offset",
            format!("0x{index_offset:x}"),
            format!("within 0x{header_end:x}..0x{trailer_offset:x}"),
        );
    }
    let header = src.read_header_at(index_offset)?;
    let left = trailer_offset - index_offset;
    if let Err(why) = header.check_shape(index_offset, index_seq, left) {
        return Ok(IndexOutcome::Unusable(why));
    }
    let index_meta = header.meta(index_offset);
    if index_meta.kind != RecordKind::INDEX {
        return unusable(
            "index record kind",
            index_meta.kind.to_string(),
            RecordKind::INDEX.to_string(),
        );
    }
    if index_meta.end_offset_bytes() != trailer_offset {
        let end = index_meta.end_offset_bytes();
        return unusable(
            "index record end",
            format!("0x{end:x}"),
            format!("the trailer's offset 0x{trailer_offset:x}"),
        );
    }
    let index = match src
        .read_stored(&index_meta)
        .and_then(|stored| decode_payload(&index_meta, stored))
    {
        Ok(index) => index,
        Err(CaptureError::Io { action, source }) => {
            return Err(CaptureError::Io { action, source });
        }
        Err(why) => return Ok(IndexOutcome::Unusable(why)),
    };
    match parse_index(&index, index_seq, header_end, index_offset) {
        Ok(all) => Ok(IndexOutcome::Indexed(all)),
        Err((field, found, expected)) => unusable(field, found, expected),
    }
}

/// Parses and checks an index payload: dense seqs, records back to back from `header_end` to
/// `index_offset`.
fn parse_index(
    index: &[u8],
    index_seq: u64,
    header_end: u64,
    index_offset: u64,
) -> std::result::Result<Vec<RecordMeta>, (&'static str, String, String)> {
    let n_entries = le_u64(index, 0);
    if index.len() < 8 || n_entries != index_seq {
        return Err((
            "index entry count",
            n_entries.to_string(),
            format!("{index_seq}, the trailer's"),
        ));
    }
    let expected_len = n_entries
        .checked_mul(INDEX_ENTRY_BYTES)
        .and_then(|len| len.checked_add(8));
    if expected_len != Some(index.len() as u64) {
        return Err((
            "index length",
            index.len().to_string(),
            format!("8 + {INDEX_ENTRY_BYTES} * {n_entries}"),
        ));
    }
    let mut all = Vec::with_capacity(index.len() / INDEX_ENTRY_BYTES as usize);
    let mut expected_offset = header_end;
    for (seq, entry) in (0u64..).zip(index.get(8..).unwrap_or_default().chunks_exact(24)) {
        let kind = RecordKind(entry[0]);
        let flags = entry[1];
        let stored_len = le_u32(entry, 4);
        let meta = RecordMeta {
            kind,
            seq: le_u64(entry, 8),
            offset_bytes: le_u64(entry, 16),
            stored_len_bytes: stored_len,
            compressed: flags & FLAG_LZ4 != 0,
        };
        if flags & !KNOWN_RECORD_FLAGS != 0 || le_u16(entry, 2) != 0 {
            return Err((
                "index entry flags",
                format!("0x{flags:02x}"),
                "only bit 0 set".into(),
            ));
        }
        if meta.seq != seq {
            return Err(("index entry seq", meta.seq.to_string(), seq.to_string()));
        }
        if meta.offset_bytes != expected_offset {
            return Err((
                "index entry offset",
                format!("0x{:x} for seq {seq}", meta.offset_bytes),
                format!("0x{expected_offset:x}"),
            ));
        }
        if stored_len > MAX_RECORD_BYTES {
            return Err((
                "index entry length",
                stored_len.to_string(),
                format!("at most {MAX_RECORD_BYTES}"),
            ));
        }
        expected_offset = meta.end_offset_bytes();
        if expected_offset > index_offset {
            return Err((
                "index entry end",
                format!("0x{expected_offset:x} for seq {seq}"),
                format!("at most the index offset 0x{index_offset:x}"),
            ));
        }
        all.push(meta);
    }
    if expected_offset != index_offset {
        return Err((
            "end of the last indexed record",
            format!("0x{expected_offset:x}"),
            format!("the index offset 0x{index_offset:x}"),
        ));
    }
    Ok(all)
}

/// Walks the record chain from `header_end`; see the module docs. `index_failure` is why the trailer
/// could not be used, reported when the walk ends at the index record.
fn walk<R: Read + Seek>(
    src: &mut Source<R>,
    header_end: u64,
    index_failure: Option<CaptureError>,
) -> Result<Walk> {
    let len_bytes = src.len_bytes;
    let mut records: Vec<RecordMeta> = Vec::new();
    let mut torn: Option<Torn> = None;
    // Records from `unchecked_from` on have not had their crc checked, nor been vouched for by a
    // checkpoint; `unchecked_headers` hashes their headers, checkpoints left out.
    let mut unchecked_from = 0usize;
    let mut unchecked_headers = crc32fast::Hasher::new();
    let mut pos = header_end;
    while pos < len_bytes {
        let left = len_bytes - pos;
        if left < RECORD_HEADER_BYTES {
            let reason = format!("{left} bytes after the last record, too few for a record header");
            torn = Some(Torn {
                offset_bytes: pos,
                reason,
            });
            break;
        }
        let header = src.read_header_at(pos)?;
        if let Err(why) = header.check_shape(pos, records.len() as u64, left) {
            torn = Some(Torn {
                offset_bytes: pos,
                reason: why.to_string(),
            });
            break;
        }
        let meta = header.meta(pos);
        if meta.kind == RecordKind::CHECKPOINT {
            let vouched = match src.read_stored(&meta) {
                Ok(payload) => {
                    checkpoint_vouches(&payload, unchecked_from, records.len(), &unchecked_headers)
                }
                Err(e @ CaptureError::Io { .. }) => return Err(e),
                Err(why) => {
                    torn = Some(Torn {
                        offset_bytes: pos,
                        reason: why.to_string(),
                    });
                    break;
                }
            };
            let unchecked = records.get(unchecked_from..).unwrap_or_default();
            if !vouched && let Some((bad_at, bad)) = check_crcs(src, unchecked)? {
                records.truncate(unchecked_from + bad_at);
                return Ok(Walk {
                    records,
                    torn: Some(bad),
                });
            }
            records.push(meta);
            unchecked_from = records.len();
            unchecked_headers = crc32fast::Hasher::new();
        } else {
            unchecked_headers.update(&header.bytes);
            records.push(meta);
        }
        pos = meta.end_offset_bytes();
        if meta.kind == RecordKind::INDEX {
            if pos < len_bytes {
                let reason = match &index_failure {
                    Some(why) => {
                        format!("bytes after the index record are no usable trailer: {why}")
                    }
                    None => "bytes after the index record are no trailer".to_owned(),
                };
                torn = Some(Torn {
                    offset_bytes: pos,
                    reason,
                });
            }
            break;
        }
    }
    if let Some(bad) = check_crcs(src, records.get(unchecked_from..).unwrap_or_default())? {
        records.truncate(unchecked_from + bad.0);
        torn = Some(bad.1);
    }
    Ok(Walk { records, torn })
}

/// Whether a checkpoint payload covers exactly the records `from..to` and their headers hash to it.
fn checkpoint_vouches(payload: &[u8], from: usize, to: usize, headers: &crc32fast::Hasher) -> bool {
    payload.len() as u64 == CHECKPOINT_PAYLOAD_BYTES
        && le_u64(payload, 0) == from as u64
        && le_u64(payload, 8) == (to - from) as u64
        && le_u32(payload, 16) == headers.clone().finalize()
        && le_u32(payload, 20) == 0
}

/// Checks the crc of each record; returns the position in `records` of the first bad one and why.
fn check_crcs<R: Read + Seek>(
    src: &mut Source<R>,
    records: &[RecordMeta],
) -> Result<Option<(usize, Torn)>> {
    for (at, meta) in records.iter().enumerate() {
        match src.read_stored(meta) {
            Ok(_) => {}
            Err(e @ CaptureError::Io { .. }) => return Err(e),
            Err(why) => {
                return Ok(Some((
                    at,
                    Torn {
                        offset_bytes: meta.offset_bytes,
                        reason: why.to_string(),
                    },
                )));
            }
        }
    }
    Ok(None)
}

/// Bumps so that two calls in one process never pick the same temporary name.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes a file whole or not at all: `write` fills a temporary file in `dest`'s directory, which is
/// synced and renamed over `dest`, and then the directory is synced.
///
/// When `write` or any step fails, the temporary file is removed and `dest` is untouched.
pub fn write_atomically(dest: &Path, write: impl FnOnce(&mut File) -> Result<()>) -> Result<()> {
    let bad = |why| CaptureError::BadDestination {
        path: dest.to_path_buf(),
        why,
    };
    let file_name = dest.file_name().ok_or_else(|| bad("it names no file"))?;
    let dir = match dest.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let (temp_path, mut file) = create_temp_beside(&dir, file_name)?;
    let written = write(&mut file).and_then(|()| {
        file.sync_all()
            .map_err(io_error(format!("syncing temporary file {temp_path:?}")))
    });
    drop(file);
    let renamed = written.and_then(|()| {
        fs::rename(&temp_path, dest)
            .map_err(io_error(format!("renaming {temp_path:?} over {dest:?}")))
    });
    if let Err(error) = renamed {
        // The error that matters is the one above; a temporary file left behind is only clutter.
        let _ = fs::remove_file(&temp_path);
        return Err(error);
    }
    sync_dir(&dir)
}

fn create_temp_beside(dir: &Path, file_name: &std::ffi::OsStr) -> Result<(PathBuf, File)> {
    let mut last_error = None;
    for _ in 0..64 {
        let mut name = OsString::from(".");
        name.push(file_name);
        let counter = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        name.push(format!(".{}-{counter}.tmp", std::process::id()));
        let path = dir.join(name);
        match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(file) => return Ok((path, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last_error = Some(e),
            Err(e) => return Err(io_error(format!("creating temporary file {path:?}"))(e)),
        }
    }
    let source = last_error.unwrap_or_else(|| io::Error::other("no name tried"));
    Err(io_error(format!("creating a temporary file in {dir:?}"))(
        source,
    ))
}

#[cfg(unix)]
fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_error(format!("syncing directory {dir:?}")))
}

#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> Result<()> {
    // Only unix lets a directory be opened and synced; elsewhere the rename is as durable as it gets.
    Ok(())
}
