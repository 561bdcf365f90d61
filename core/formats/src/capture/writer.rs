//! [`CaptureWriter`]: appends records, checkpoints on flush, and the index and trailer on finish.

use std::borrow::Cow;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use super::format::{
    BUFFER_BYTES, CHECKPOINT_PAYLOAD_BYTES, CaptureError, FILE_HEADER_BYTES, FILE_MAGIC,
    FLAG_DICTIONARY, FLAG_LZ4, FORMAT_VERSION, INDEX_ENTRY_BYTES, MAX_DICTIONARY_BYTES,
    MAX_HEADER_PAYLOAD_BYTES, MAX_RECORD_BYTES, RECORD_HEADER_BYTES, RecordHeader, RecordKind,
    RecordMeta, Result, TRAILER_BYTES, TRAILER_MAGIC, crc_of, io_error,
};

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
/// [`CaptureReader`](super::CaptureReader) opens by walking its records.
pub struct CaptureWriter<W: CaptureSink = File> {
    out: BufWriter<W>,
    /// Offset of the next record header.
    offset_bytes: u64,
    /// Every record written, checkpoints included, in seq order: what the index needs, about 5
    /// bytes a record ([`Written`]).
    written: Written,
    /// Seq of the first record the next checkpoint covers.
    segment_first_seq: u64,
    /// crc32 over the headers of the records the next checkpoint covers.
    segment_headers: crc32fast::Hasher,
    /// The first error that left the sink in an unknown state.
    poisoned: Option<String>,
    /// What compressed records are compressed against, once [`Self::set_dictionary`] wrote it.
    dictionary: Option<Vec<u8>>,
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
            written: Written::new(FILE_HEADER_BYTES + u64::from(payload_len)),
            segment_first_seq: 0,
            segment_headers: crc32fast::Hasher::new(),
            poisoned: None,
            dictionary: None,
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

    /// Appends `dictionary` as a `DICTIONARY` record (at most [`MAX_DICTIONARY_BYTES`]) and
    /// compresses every later record that is appended with `compress` against it: lz4 with a
    /// dictionary finds a record's repeats (field names, device limits, the same program's
    /// bindings) in records like it, which a record alone cannot. A later call replaces it for the
    /// records after. Returns the record's seq.
    pub fn set_dictionary(&mut self, dictionary: &[u8]) -> Result<u64> {
        self.check_usable()?;
        let dictionary = &dictionary[dictionary.len().saturating_sub(MAX_DICTIONARY_BYTES)..];
        let seq = self.write_record(RecordKind::DICTIONARY, dictionary, false)?;
        self.dictionary = Some(dictionary.to_vec());
        Ok(seq)
    }

    /// The dictionary compressed records are compressed against, once one was set.
    pub fn dictionary(&self) -> Option<&[u8]> {
        self.dictionary.as_deref()
    }

    /// Writes buffered records to the sink without making them durable: another reader of the same
    /// file sees them (no `fsync`; a crash may still lose them until [`Self::flush`]).
    pub fn write_out(&mut self) -> Result<()> {
        self.check_usable()?;
        let result = self
            .out
            .flush()
            .map_err(io_error("writing buffered records out"));
        result.map_err(|e| self.poison(e))
    }

    /// Writes buffered records, makes them durable, then appends a checkpoint covering them and makes
    /// that durable too (two `fsync`s when records were appended since the last flush, else one).
    pub fn flush(&mut self) -> Result<()> {
        self.check_usable()?;
        let n_covered = self.written.len() - self.segment_first_seq;
        self.sync()?;
        if n_covered > 0 {
            let mut payload = [0u8; CHECKPOINT_PAYLOAD_BYTES as usize];
            payload[0..8].copy_from_slice(&self.segment_first_seq.to_le_bytes());
            payload[8..16].copy_from_slice(&n_covered.to_le_bytes());
            payload[16..20].copy_from_slice(&self.segment_headers.clone().finalize().to_le_bytes());
            self.write_record(RecordKind::CHECKPOINT, &payload, false)?;
            self.segment_first_seq = self.written.len();
            self.segment_headers = crc32fast::Hasher::new();
            self.sync()?;
        }
        Ok(())
    }

    /// Appends the index and the trailer, makes everything durable, and returns the sink.
    ///
    /// The index is written in pieces from the compact list the writer keeps (uncompressed, its
    /// crc computed in a first pass), so finishing a long recording never holds the whole index in
    /// memory.
    pub fn finish(mut self) -> Result<W> {
        self.check_usable()?;
        let index_offset = self.offset_bytes;
        let index_seq = self.written.len();
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
        let mut head = [0u8; RECORD_HEADER_BYTES as usize];
        head[0] = RecordKind::INDEX.0;
        head[4..12].copy_from_slice(&index_seq.to_le_bytes());
        head[12..16].copy_from_slice(&(index_len as u32).to_le_bytes());
        let mut crc = crc32fast::Hasher::new();
        crc.update(&head[..16]);
        self.written
            .index_pieces(|piece| {
                crc.update(piece);
                Ok(())
            })
            .map_err(io_error("building the index"))?;
        head[16..20].copy_from_slice(&crc.finalize().to_le_bytes());
        let out = &mut self.out;
        let written = &self.written;
        let result = out
            .write_all(&head)
            .and_then(|()| written.index_pieces(|piece| out.write_all(piece)));
        if let Err(source) = result {
            let action = format!("writing the index at byte 0x{index_offset:x}");
            return Err(self.poison(CaptureError::Io { action, source }));
        }
        self.offset_bytes = index_offset + RECORD_HEADER_BYTES + index_len;

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
        self.written.len()
    }

    /// The kind of record `seq`, if it was written.
    pub fn record_kind(&self, seq: u64) -> Option<RecordKind> {
        self.written.kind(seq)
    }

    /// Where record `seq`'s header starts in the file, if it was written (found from the
    /// writer's compact list: a sampled offset and at most `OFFSET_SAMPLE` lengths after it).
    pub fn record_offset(&self, seq: u64) -> Option<u64> {
        self.written.offset(seq)
    }

    /// The seq of the `n`-th record of `kind` from record `from` on (`n = 0`: the first at or
    /// after `from`), walking the writer's list of kinds; `None` when there is none yet.
    pub fn nth_of_kind(&self, from: u64, kind: RecordKind, n: u64) -> Option<u64> {
        self.written.nth_of_kind(from, kind, n)
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
            let block = match &self.dictionary {
                Some(dict) => {
                    flags = FLAG_DICTIONARY;
                    lz4_flex::block::compress_with_dict(payload, dict)
                }
                None => lz4_flex::block::compress(payload),
            };
            if block.len() + 4 < payload.len() {
                let mut with_len = Vec::with_capacity(block.len() + 4);
                with_len.extend_from_slice(&(payload.len() as u32).to_le_bytes());
                with_len.extend_from_slice(&block);
                stored = Cow::Owned(with_len);
                flags |= FLAG_LZ4;
            } else {
                flags = 0;
            }
        }
        let seq = self.written.len();
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
        self.written
            .push(meta.kind, meta.stored_len_bytes, meta.flags());
        Ok(seq)
    }
}

/// Records between two sampled offsets in [`Written`].
pub const OFFSET_SAMPLE: u64 = 256;

/// Bit 31 of a [`Written`] length: the record is stored compressed (a stored length is at most
/// [`MAX_RECORD_BYTES`], below `2^30`).
const LEN_COMPRESSED: u32 = 1 << 31;
/// Bit 30 of a [`Written`] length: compressed against the dictionary.
const LEN_DICTIONARY: u32 = 1 << 30;
const LEN_FLAGS: u32 = LEN_COMPRESSED | LEN_DICTIONARY;

/// What the writer keeps of every record for the index, compactly: its kind (1 byte) and stored
/// length with the compressed flag (4 bytes); its seq is its position, and its offset the file
/// header's end plus every earlier record's header and stored length, so only every
/// [`OFFSET_SAMPLE`]-th offset is kept. About 5 bytes a record (16 before, 32 before that).
#[derive(Debug, Default)]
struct Written {
    kinds: Vec<u8>,
    lens: Vec<u32>,
    /// The offset of records 0, [`OFFSET_SAMPLE`], 2·[`OFFSET_SAMPLE`], …
    samples: Vec<u64>,
    /// Where the next record starts.
    next_offset: u64,
}

impl Written {
    fn new(first_offset: u64) -> Self {
        Self {
            next_offset: first_offset,
            ..Self::default()
        }
    }

    fn len(&self) -> u64 {
        self.kinds.len() as u64
    }

    fn push(&mut self, kind: RecordKind, stored_len: u32, flags: u8) {
        if self.len().is_multiple_of(OFFSET_SAMPLE) {
            self.samples.push(self.next_offset);
        }
        self.kinds.push(kind.0);
        let mut len = stored_len;
        if flags & FLAG_LZ4 != 0 {
            len |= LEN_COMPRESSED;
        }
        if flags & FLAG_DICTIONARY != 0 {
            len |= LEN_DICTIONARY;
        }
        self.lens.push(len);
        self.next_offset += RECORD_HEADER_BYTES + u64::from(stored_len);
    }

    fn kind(&self, seq: u64) -> Option<RecordKind> {
        self.kinds
            .get(usize::try_from(seq).ok()?)
            .map(|&k| RecordKind(k))
    }

    fn offset(&self, seq: u64) -> Option<u64> {
        if seq >= self.len() {
            return None;
        }
        let base = seq - seq % OFFSET_SAMPLE;
        let mut at = *self
            .samples
            .get(usize::try_from(base / OFFSET_SAMPLE).ok()?)?;
        let (from, to) = (usize::try_from(base).ok()?, usize::try_from(seq).ok()?);
        for &len in self.lens.get(from..to)? {
            at += RECORD_HEADER_BYTES + u64::from(len & !LEN_FLAGS);
        }
        Some(at)
    }

    fn nth_of_kind(&self, from: u64, kind: RecordKind, n: u64) -> Option<u64> {
        let start = usize::try_from(from).ok()?;
        let mut left = n;
        for (i, &k) in self.kinds.get(start..)?.iter().enumerate() {
            if k == kind.0 {
                if left == 0 {
                    return Some(from + i as u64);
                }
                left -= 1;
            }
        }
        None
    }

    /// Hands the INDEX record's payload to `put` in pieces of up to 64 KiB: the count, then
    /// every record's entry.
    fn index_pieces(&self, mut put: impl FnMut(&[u8]) -> io::Result<()>) -> io::Result<()> {
        const PIECE: usize = 64 << 10;
        let mut piece = Vec::with_capacity(PIECE + INDEX_ENTRY_BYTES as usize);
        piece.extend_from_slice(&self.len().to_le_bytes());
        let mut offset = self.samples.first().copied().unwrap_or(self.next_offset);
        for (seq, (&kind, &len)) in self.kinds.iter().zip(&self.lens).enumerate() {
            let stored = len & !LEN_FLAGS;
            let meta = RecordMeta {
                kind: RecordKind(kind),
                seq: seq as u64,
                offset_bytes: offset,
                stored_len_bytes: stored,
                compressed: len & LEN_COMPRESSED != 0,
                dictionary: len & LEN_DICTIONARY != 0,
            };
            piece.push(meta.kind.0);
            piece.push(meta.flags());
            piece.extend_from_slice(&[0, 0]);
            piece.extend_from_slice(&meta.stored_len_bytes.to_le_bytes());
            piece.extend_from_slice(&meta.seq.to_le_bytes());
            piece.extend_from_slice(&meta.offset_bytes.to_le_bytes());
            offset += RECORD_HEADER_BYTES + u64::from(stored);
            if piece.len() >= PIECE {
                put(&piece)?;
                piece.clear();
            }
        }
        if !piece.is_empty() {
            put(&piece)?;
        }
        Ok(())
    }
}
