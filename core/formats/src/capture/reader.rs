//! [`CaptureReader`]: opens a capture through its trailer and index, or by walking the record
//! chain when it has none, and reads records one at a time, each checked against its crc.

use std::fs::File;
use std::io::{self, BufReader, Cursor, Read, Seek, SeekFrom};
use std::path::Path;

use super::format::{
    BUFFER_BYTES, CHECKPOINT_PAYLOAD_BYTES, CaptureError, FILE_HEADER_BYTES, FILE_MAGIC,
    FLAG_DICTIONARY, FLAG_LZ4, FORMAT_VERSION, INDEX_ENTRY_BYTES, KNOWN_RECORD_FLAGS,
    MAX_HEADER_PAYLOAD_BYTES, MAX_RECORD_BYTES, RECORD_HEADER_BYTES, RecordHeader, RecordKind,
    RecordMeta, Result, TRAILER_BYTES, TRAILER_MAGIC, Torn, crc_of, decode_payload, io_error,
    le_u16, le_u32, le_u64,
};

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
    /// The `DICTIONARY` records, if the file has any (boxed: most files have none).
    dictionaries: Option<Box<Dictionaries>>,
}

/// A capture's `DICTIONARY` records and the one read last.
struct Dictionaries {
    /// In seq order.
    records: Vec<RecordMeta>,
    /// The dictionary read last: its seq and bytes.
    read: Option<(u64, Vec<u8>)>,
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
        let dictionaries: Vec<RecordMeta> = all
            .iter()
            .filter(|meta| meta.kind == RecordKind::DICTIONARY)
            .copied()
            .collect();
        let dictionaries = (!dictionaries.is_empty()).then(|| {
            Box::new(Dictionaries {
                records: dictionaries,
                read: None,
            })
        });
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
            dictionaries,
        })
    }

    /// The dictionary `meta` was compressed against (the last `DICTIONARY` record before it),
    /// read once and kept while the records read after it use it too.
    fn dictionary_for(&mut self, meta: &RecordMeta) -> Result<Option<&[u8]>> {
        if !meta.dictionary {
            return Ok(None);
        }
        let Some(d) = self.dictionaries.as_deref_mut() else {
            return Ok(None);
        };
        let at = d.records.partition_point(|r| r.seq < meta.seq);
        let Some(dict) = at.checked_sub(1).and_then(|i| d.records.get(i)).copied() else {
            return Ok(None);
        };
        if d.read.as_ref().is_none_or(|(seq, _)| *seq != dict.seq) {
            let bytes = self.src.read_stored(&dict)?;
            d.read = Some((dict.seq, bytes));
        }
        Ok(d.read.as_ref().map(|(_, b)| b.as_slice()))
    }

    /// The payload the writer gave [`CaptureWriter::create`](super::CaptureWriter::create).
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
        let dictionary = self.dictionary_for(&meta)?;
        decode_payload(&meta, stored, dictionary)
    }

    /// The first `want` bytes of `records()[idx]`'s payload (decompressed when the record is),
    /// reading only as much of the stored payload as they take (a few hundred bytes, more where an
    /// lz4 block opens with a long literal run): enough to learn what a record is about (a MEMORY
    /// record's address) without reading it. The record's crc covers its whole payload, so these
    /// bytes are not checked by it; a caller that keeps the record reads it whole
    /// ([`Self::read_record`]), which checks it.
    pub fn read_prefix(&mut self, idx: usize, want: usize) -> Result<Vec<u8>> {
        let meta = *self.records.get(idx).ok_or(CaptureError::NoSuchRecord {
            idx,
            n_records: self.records.len(),
        })?;
        if meta.dictionary {
            // Its block reaches back into the dictionary: decoded whole (records compressed
            // against one are small).
            let mut whole = self.read_record(idx)?;
            whole.truncate(want);
            return Ok(whole);
        }
        let header = self.src.read_header_at(meta.offset_bytes)?;
        header.check_against(&meta)?;
        let left = self.src.len_bytes.saturating_sub(meta.offset_bytes);
        header.check_shape(meta.offset_bytes, meta.seq, left)?;
        let stored_len = header.stored_len();
        // An lz4 block of incompressible bytes opens with one literal run whose length takes a
        // byte per 255 bytes (4 KiB for a 1 MiB record): one read of 16 KiB is most often enough.
        let mut take = stored_len.min(16 << 10);
        loop {
            let stored = self
                .src
                .read_vec_at(meta.offset_bytes + RECORD_HEADER_BYTES, take)?;
            if !meta.compressed {
                let mut stored = stored;
                stored.truncate(want);
                return Ok(stored);
            }
            let fail = |reason: String| CaptureError::Decompress {
                offset_bytes: meta.offset_bytes,
                reason,
            };
            if stored.len() >= 4 {
                let total = le_u32(&stored, 0) as usize;
                match lz4_prefix(&stored[4..], want.min(total)) {
                    Ok(Some(out)) => return Ok(out),
                    Ok(None) => {}
                    Err(reason) => return Err(fail(reason)),
                }
            }
            if take == stored_len {
                return Err(fail(format!(
                    "the stored payload ({stored_len} bytes) ends before its first {want} bytes"
                )));
            }
            take = stored_len.min(take.saturating_mul(8));
        }
    }

    /// Where and why the capture was cut short, when it was.
    pub fn torn(&self) -> Option<&Torn> {
        self.torn.as_ref()
    }

    /// Whether the capture ends with a good index and trailer, as [`CaptureWriter::finish`](super::CaptureWriter::finish) leaves it.
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

/// Reads the one record whose header starts at `offset_bytes` of `src`, as a caller that kept its
/// records' offsets does (a live store reading back what it wrote): checks its kind, its header's
/// shape and its crc, and returns its payload decompressed; `dictionary` is the file's, for a
/// record compressed against it.
pub fn read_record_at<R: Read + Seek>(
    src: R,
    offset_bytes: u64,
    kind: RecordKind,
    dictionary: Option<&[u8]>,
) -> Result<Vec<u8>> {
    let mut src = Source::new(src)?;
    let header = src.read_header_at(offset_bytes)?;
    let meta = header.meta(offset_bytes);
    if meta.kind != kind {
        return Err(CaptureError::RecordHeader {
            offset_bytes,
            field: "kind",
            found: meta.kind.to_string(),
            expected: kind.to_string(),
        });
    }
    let left = src.len_bytes.saturating_sub(offset_bytes);
    header.check_shape(offset_bytes, meta.seq, left)?;
    let stored = src.read_stored(&meta)?;
    decode_payload(&meta, stored, dictionary)
}

/// Where the `n`-th record of `kind` after the one at `offset_bytes` starts (`n = 0`: that one,
/// which must be of `kind`), found by walking record headers forward: at most the records
/// between the two are read, a header each. What a reader does that keeps only every k-th
/// record's offset of a file (a live store's closed segments), not the file's whole index.
pub fn nth_record_from<R: Read + Seek>(
    src: R,
    offset_bytes: u64,
    kind: RecordKind,
    n: u64,
) -> Result<u64> {
    let mut src = Source::new(src)?;
    let mut at = offset_bytes;
    let mut seen = 0u64;
    let mut expected_seq = None;
    loop {
        let header = src.read_header_at(at)?;
        let meta = header.meta(at);
        let seq = *expected_seq.get_or_insert(meta.seq);
        let left = src.len_bytes.saturating_sub(at);
        header.check_shape(at, seq, left)?;
        if meta.kind == kind {
            if seen == n {
                return Ok(at);
            }
            seen += 1;
        } else if seen == 0 {
            return Err(CaptureError::RecordHeader {
                offset_bytes: at,
                field: "kind",
                found: meta.kind.to_string(),
                expected: kind.to_string(),
            });
        }
        at = meta.end_offset_bytes();
        expected_seq = Some(seq + 1);
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
        .and_then(|stored| decode_payload(&index_meta, stored, None))
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
            dictionary: flags & FLAG_DICTIONARY != 0,
        };
        if flags & !KNOWN_RECORD_FLAGS != 0 || le_u16(entry, 2) != 0 {
            return Err((
                "index entry flags",
                format!("0x{flags:02x}"),
                "only bits 0 and 1 set".into(),
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

/// The first `want` bytes an lz4 block (`lz4_flex::block`'s format) decodes to, from a prefix of
/// the block: `Ok(None)` when the prefix ends first, `Err` when the block is not lz4.
fn lz4_prefix(block: &[u8], want: usize) -> std::result::Result<Option<Vec<u8>>, String> {
    let mut out: Vec<u8> = Vec::with_capacity(want);
    let mut i = 0usize;
    // A length's extension: bytes of 255 and one below it, each added.
    let extend = |i: &mut usize, mut n: usize| -> Option<usize> {
        loop {
            let b = *block.get(*i)?;
            *i += 1;
            n = n.saturating_add(usize::from(b));
            if b != 255 {
                return Some(n);
            }
        }
    };
    while out.len() < want {
        let Some(&token) = block.get(i) else {
            return Ok(None);
        };
        i += 1;
        let mut literals = usize::from(token >> 4);
        if literals == 15 {
            let Some(n) = extend(&mut i, literals) else {
                return Ok(None);
            };
            literals = n;
        }
        let available = block.len().saturating_sub(i);
        let copy = literals.min(available).min(want - out.len());
        out.extend_from_slice(&block[i..i + copy]);
        if out.len() >= want {
            break;
        }
        if copy < literals {
            return Ok(None);
        }
        i += literals;
        let Some(offset) = block.get(i..i + 2) else {
            return Ok(None);
        };
        let offset = usize::from(u16::from_le_bytes([offset[0], offset[1]]));
        i += 2;
        let mut len = usize::from(token & 15);
        if len == 15 {
            let Some(n) = extend(&mut i, len) else {
                return Ok(None);
            };
            len = n;
        }
        len += 4;
        if offset == 0 || offset > out.len() {
            return Err(format!(
                "a match {offset} bytes back, {} bytes into the block",
                out.len()
            ));
        }
        let from = out.len() - offset;
        for k in 0..len.min(want - out.len()) {
            let b = out[from + k];
            out.push(b);
        }
    }
    Ok(Some(out))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod prefix_tests {
    use super::lz4_prefix;

    /// Every prefix length of blocks that repeat, and of one long literal run, decodes to what
    /// the whole block decodes to; a cut block asks for more; a bad match is an error.
    #[test]
    fn lz4_prefixes_match_the_whole_block() {
        let mut noisy = Vec::new();
        let mut x = 7u32;
        for _ in 0..5000 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            noisy.push((x >> 24) as u8);
        }
        let repeating: Vec<u8> = (0..3000u32).map(|i| (i % 7) as u8).collect();
        for data in [noisy, repeating] {
            let block = lz4_flex::block::compress(&data);
            for want in [0, 1, 12, 100, data.len()] {
                let got = lz4_prefix(&block, want).unwrap().unwrap();
                assert_eq!(got, data[..want], "want {want}");
            }
            assert_eq!(lz4_prefix(&block[..2], 100).unwrap(), None);
        }
        assert!(lz4_prefix(&[0x10, 1, 9, 0], 10).is_err());
    }
}
