//! A session written as it happens: the capture's META first, then memory contents, events and
//! dispatches appended in the order they ran, each record durable at the next flush, and a
//! DEVICE_LOSS record ([`crate::loss`]) when the emulator reports its device lost. What an
//! embedding emulator uses to keep a capture of a running game (`dispatchscope-capi`).

use std::path::Path;

use dispatchscope_core::input::Event;
use serde::Serialize;

use crate::capture::{CaptureWriter, RecordKind};
use crate::sample::Contents;
use crate::session::{CaptureMeta, DispatchRecord, SessionError};

/// A capture being written record by record; see the module docs.
pub struct SessionWriter {
    path: String,
    writer: CaptureWriter,
    dispatches: u64,
}

/// The payload of a MEMORY record: address (u64 LE), length (u32 LE), the bytes.
pub fn contents_payload(c: &Contents) -> Vec<u8> {
    let mut v = Vec::with_capacity(12 + c.bytes.len());
    v.extend_from_slice(&c.address.to_le_bytes());
    v.extend_from_slice(&(c.bytes.len() as u32).to_le_bytes());
    v.extend_from_slice(&c.bytes);
    v
}

fn json<T: Serialize>(
    path: &str,
    kind: &str,
    seq: u64,
    value: &T,
) -> Result<Vec<u8>, SessionError> {
    serde_json::to_vec(value).map_err(|e| SessionError::Record {
        path: path.to_owned(),
        seq,
        kind: kind.to_owned(),
        offset: 0,
        error: format!("cannot be encoded: {e}").into(),
    })
}

impl SessionWriter {
    /// Creates `dest` (replacing it) with `meta` as its first record.
    pub fn create(dest: &Path, meta: &CaptureMeta) -> Result<Self, SessionError> {
        let path = dest.display().to_string();
        let header = json(&path, "META", 0, meta)?;
        let writer =
            CaptureWriter::create(dest, &header).map_err(|error| SessionError::Capture {
                path: path.clone(),
                error,
            })?;
        Ok(Self {
            path,
            writer,
            dispatches: 0,
        })
    }

    fn append(
        &mut self,
        kind: RecordKind,
        payload: &[u8],
        compress: bool,
    ) -> Result<(), SessionError> {
        self.writer
            .append(kind, payload, compress)
            .map(|_| ())
            .map_err(|error| SessionError::Capture {
                path: self.path.clone(),
                error,
            })
    }

    /// Appends guest memory contents (a MEMORY record).
    pub fn contents(&mut self, c: &Contents) -> Result<(), SessionError> {
        self.append(RecordKind::MEMORY, &contents_payload(c), true)
    }

    /// Appends a memory event (an EVENTS record).
    pub fn event(&mut self, e: &Event) -> Result<(), SessionError> {
        let payload = json(&self.path, "EVENTS", self.writer.n_records(), e)?;
        self.append(RecordKind::EVENTS, &payload, false)
    }

    /// The device was lost: appends `report` as a DEVICE_LOSS record ([`crate::loss`]) and makes
    /// every record so far durable at once (what follows a lost device may be the process's end).
    pub fn device_lost(
        &mut self,
        report: &dispatchscope_core::report::DeviceLossReport,
    ) -> Result<(), SessionError> {
        let seq = self.writer.n_records();
        let payload = crate::loss::encode(report).map_err(|e| SessionError::Record {
            path: self.path.clone(),
            seq,
            kind: crate::loss::DEVICE_LOSS.to_string(),
            offset: 0,
            error: Box::new(e),
        })?;
        self.append(crate::loss::DEVICE_LOSS, &payload, true)?;
        self.flush()
    }

    /// Appends a dispatch with its report (a DISPATCH record).
    pub fn dispatch(&mut self, record: &DispatchRecord) -> Result<(), SessionError> {
        let payload = json(&self.path, "DISPATCH", self.writer.n_records(), record)?;
        self.append(RecordKind::DISPATCH, &payload, true)?;
        self.dispatches += 1;
        Ok(())
    }

    /// Dispatches written so far.
    pub fn n_dispatches(&self) -> u64 {
        self.dispatches
    }

    /// Makes every record so far durable.
    pub fn flush(&mut self) -> Result<(), SessionError> {
        self.writer.flush().map_err(|error| SessionError::Capture {
            path: self.path.clone(),
            error,
        })
    }

    /// Writes the index and closes the file.
    pub fn finish(self) -> Result<(), SessionError> {
        let path = self.path;
        self.writer
            .finish()
            .map(|_| ())
            .map_err(|error| SessionError::Capture { path, error })
    }
}
