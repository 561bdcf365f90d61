//! The container's byte layout (see the module docs of [`super`]): its constants, record kinds and
//! metadata, the record header's encoding and checks, payload decoding, and the one error type.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// The first 8 bytes of every capture.
pub const FILE_MAGIC: [u8; 8] = *b"DSCAPTUR";
/// The first 8 bytes of the trailer of a finished capture.
pub const TRAILER_MAGIC: [u8; 8] = *b"DSCINDEX";
/// The format version this build writes, and the newest it reads.
pub use crate::versions::CAPTURE_FORMAT_VERSION as FORMAT_VERSION;
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
pub(super) const FLAG_LZ4: u8 = 1;
/// Record flag bit 1, only with bit 0: the lz4 block was compressed against the file's dictionary,
/// the payload of the last `DICTIONARY` record before it.
pub(super) const FLAG_DICTIONARY: u8 = 2;
/// Every record flag bit this build knows.
pub(super) const KNOWN_RECORD_FLAGS: u8 = FLAG_LZ4 | FLAG_DICTIONARY;
/// The most bytes a dictionary may have: lz4 reaches back 64 KiB, so more would never be used.
pub const MAX_DICTIONARY_BYTES: usize = 64 << 10;
/// Buffer size of the writer and of [`CaptureReader::open`]'s reader.
pub(super) const BUFFER_BYTES: usize = 256 << 10;

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
    /// Container: a dictionary the records after it may be compressed against
    /// ([`CaptureWriter::set_dictionary`](super::CaptureWriter::set_dictionary)).
    pub const DICTIONARY: Self = Self(0xfc);
    /// Container: a checkpoint appended by [`CaptureWriter::flush`](super::CaptureWriter::flush).
    pub const CHECKPOINT: Self = Self(0xfd);
    /// Container: the index appended by [`CaptureWriter::finish`](super::CaptureWriter::finish).
    pub const INDEX: Self = Self(0xfe);
    /// The first kind reserved for the container.
    pub const FIRST_RESERVED: Self = Self(0xf0);

    /// Whether this kind belongs to the container, so the caller may not append it.
    pub fn is_reserved(self) -> bool {
        self.0 >= Self::FIRST_RESERVED.0
    }

    pub(super) fn name(self) -> Option<&'static str> {
        match self {
            Self::META => Some("META"),
            Self::MEMORY => Some("MEMORY"),
            Self::EVENTS => Some("EVENTS"),
            Self::DISPATCH => Some("DISPATCH"),
            Self::DICTIONARY => Some("DICTIONARY"),
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
    /// Whether it was compressed against the file's dictionary (the last `DICTIONARY` record
    /// before it); only with `compressed`.
    pub dictionary: bool,
}

impl RecordMeta {
    /// Offset of the first byte after this record.
    pub fn end_offset_bytes(&self) -> u64 {
        self.offset_bytes
            .saturating_add(RECORD_HEADER_BYTES)
            .saturating_add(u64::from(self.stored_len_bytes))
    }

    pub(super) fn flags(&self) -> u8 {
        match (self.compressed, self.dictionary) {
            (false, _) => 0,
            (true, false) => FLAG_LZ4,
            (true, true) => FLAG_LZ4 | FLAG_DICTIONARY,
        }
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
    /// A record index past the end of [`CaptureReader::records`](super::CaptureReader::records).
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
    /// [`write_atomically`](super::write_atomically) was given a path it cannot replace.
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

pub(super) fn io_error(action: impl Into<String>) -> impl FnOnce(io::Error) -> CaptureError {
    let action = action.into();
    move |source| CaptureError::Io { action, source }
}

pub(super) fn le_u16(bytes: &[u8], at: usize) -> u16 {
    let mut le = [0u8; 2];
    if let Some(src) = bytes.get(at..at + 2) {
        le.copy_from_slice(src);
    }
    u16::from_le_bytes(le)
}

pub(super) fn le_u32(bytes: &[u8], at: usize) -> u32 {
    let mut le = [0u8; 4];
    if let Some(src) = bytes.get(at..at + 4) {
        le.copy_from_slice(src);
    }
    u32::from_le_bytes(le)
}

pub(super) fn le_u64(bytes: &[u8], at: usize) -> u64 {
    let mut le = [0u8; 8];
    if let Some(src) = bytes.get(at..at + 8) {
        le.copy_from_slice(src);
    }
    u64::from_le_bytes(le)
}

pub(super) fn crc_of(parts: &[&[u8]]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    for part in parts {
        hasher.update(part);
    }
    hasher.finalize()
}

/// The 20-byte header of one record, as read.
#[derive(Clone, Copy)]
pub(super) struct RecordHeader {
    pub(super) bytes: [u8; RECORD_HEADER_BYTES as usize],
}

impl RecordHeader {
    pub(super) fn new(kind: RecordKind, flags: u8, seq: u64, stored: &[u8]) -> Result<Self> {
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

    pub(super) fn kind(&self) -> RecordKind {
        RecordKind(self.bytes[0])
    }
    pub(super) fn flags(&self) -> u8 {
        self.bytes[1]
    }
    pub(super) fn reserved(&self) -> u16 {
        le_u16(&self.bytes, 2)
    }
    pub(super) fn seq(&self) -> u64 {
        le_u64(&self.bytes, 4)
    }
    pub(super) fn stored_len(&self) -> u32 {
        le_u32(&self.bytes, 12)
    }
    pub(super) fn crc(&self) -> u32 {
        le_u32(&self.bytes, 16)
    }

    pub(super) fn meta(&self, offset_bytes: u64) -> RecordMeta {
        RecordMeta {
            kind: self.kind(),
            seq: self.seq(),
            offset_bytes,
            stored_len_bytes: self.stored_len(),
            compressed: self.flags() & FLAG_LZ4 != 0,
            dictionary: self.flags() & FLAG_DICTIONARY != 0,
        }
    }

    /// Checks what can be checked without the payload: known flags, reserved zero, the expected seq,
    /// and a length within the limit and within the `left_bytes` the file has after `offset_bytes`.
    pub(super) fn check_shape(
        &self,
        offset_bytes: u64,
        expected_seq: u64,
        left_bytes: u64,
    ) -> Result<()> {
        let bad = |field, found: String, expected: String| CaptureError::RecordHeader {
            offset_bytes,
            field,
            found,
            expected,
        };
        let flags = self.flags();
        if flags & !KNOWN_RECORD_FLAGS != 0 || flags == FLAG_DICTIONARY {
            return Err(bad(
                "flags",
                format!("0x{flags:02x}"),
                "only bits 0 and 1 set, bit 1 only with bit 0".into(),
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
    pub(super) fn check_against(&self, meta: &RecordMeta) -> Result<()> {
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

    pub(super) fn check_crc(&self, offset_bytes: u64, stored: &[u8]) -> Result<()> {
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

/// Turns a stored payload into the caller's bytes; `dictionary` is the file's dictionary for a
/// record compressed against it.
pub(super) fn decode_payload(
    meta: &RecordMeta,
    stored: Vec<u8>,
    dictionary: Option<&[u8]>,
) -> Result<Vec<u8>> {
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
    let got = match (meta.dictionary, dictionary) {
        (false, _) => lz4_flex::block::decompress_into(block, &mut out),
        (true, Some(dict)) => lz4_flex::block::decompress_into_with_dict(block, &mut out, dict),
        (true, None) => {
            return Err(fail(
                "it was compressed against a dictionary, and no DICTIONARY record comes before it"
                    .into(),
            ));
        }
    }
    .map_err(|e| fail(e.to_string()))?;
    if got != out.len() {
        return Err(fail(format!(
            "it gave {got} bytes, the record says {len_bytes}"
        )));
    }
    Ok(out)
}
