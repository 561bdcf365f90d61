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
//! | 1       | flags `u8`          | bit 0: stored payload is lz4 compressed; bit 1 (only with bit 0): the lz4 block was compressed against the file's dictionary; other bits 0 |
//! | 2..4    | reserved `u16`      | 0 |
//! | 4..12   | seq `u64`           | position among all records of the file, counting from 0, dense |
//! | 12..16  | stored length `u32` | `n`, bytes of stored payload, at most [`MAX_RECORD_BYTES`] |
//! | 16..20  | crc32 `u32`         | crc32 over record bytes 0..16, then the stored payload |
//! | 20..20+n| stored payload      | the caller's bytes, or when bit 0 is set: uncompressed length `u32` (at most [`MAX_RECORD_BYTES`]) then an lz4 block (`lz4_flex::block` format) |
//!
//! The caller's kinds are 0x00..=0xef; the container stores and indexes any of them alike, and
//! never refuses one it has no name for. Which kinds a session holds, and that a reader skips a kind
//! it does not know (so that a kind added later, such as DEVICE_LOSS 0x0a, is skipped by an older
//! build), is `crate::session`'s rule.
//!
//! Container records, which the caller never appends and [`CaptureReader::records`] never lists:
//!
//! - `DICTIONARY` (kind 0xfc), appended by [`CaptureWriter::set_dictionary`]: at most
//!   [`MAX_DICTIONARY_BYTES`] of bytes like the records to come (a live session's first
//!   dispatches), stored uncompressed. A record with flag bit 1 is an lz4 block compressed against
//!   the last `DICTIONARY` record before it (`lz4_flex::block::compress_with_dict`): a small record
//!   that repeats its neighbours' field names and values stores only what differs. A reader that
//!   does not know bit 1 refuses such a record by its flags, never misreads it.
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
//!
//! # Where each part lives
//!
//! `format.rs` the layout, record kinds and errors; `writer.rs` [`CaptureWriter`]; `reader.rs`
//! [`CaptureReader`] (index and walk); `atomic.rs` [`write_atomically`].

mod atomic;
mod format;
mod reader;
mod writer;

pub use atomic::write_atomically;
pub use format::{
    CHECKPOINT_PAYLOAD_BYTES, CaptureError, FILE_HEADER_BYTES, FILE_MAGIC, FORMAT_VERSION,
    INDEX_ENTRY_BYTES, MAX_DICTIONARY_BYTES, MAX_HEADER_PAYLOAD_BYTES, MAX_RECORD_BYTES,
    RECORD_HEADER_BYTES, RecordKind, RecordMeta, Result, TRAILER_BYTES, TRAILER_MAGIC, Torn,
};
pub use reader::{CaptureReader, Records, nth_record_from, read_record_at};
pub use writer::{CaptureSink, CaptureWriter};
