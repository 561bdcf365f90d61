//! A live session's files as one session: a recording under a disk budget is written as segments
//! (`name.dscap`, `name.0001.dscap`, … beside it: [`crate::store::segment_path`]), each a capture
//! of its own, and the budget deletes the oldest. [`session_files`] finds the files of the session
//! one file (or its folder) belongs to, in order; [`join`] writes them as one capture, record by
//! record (never the whole session in memory), with a note in its META of what is no longer on
//! disk. What a window opens as one session and saves whole.
//!
//! Each later segment begins with the session's META and, after its first dispatch, the memory
//! and table states the dispatch before it left, so its records go on from the file before it:
//! the joined capture's states are read through its index as each segment's are. This module
//! never draws and never opens a socket.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use dispatchscope_formats::capture::{CaptureError, CaptureReader, CaptureWriter, RecordKind};
use dispatchscope_formats::session::{CaptureFile, PROGRAM};
use thiserror::Error;

use crate::store::segment_path;

pub use crate::record::LATER_FILE;

/// Whether a capture whose META has `description` starts after its session's memory snapshot
/// (a later file of a live session, or files joined from one): replaying it would not give the
/// target's reports.
pub fn starts_late(description: &str) -> bool {
    description.contains(LATER_FILE)
}

/// Why a session's files could not be found or joined.
#[derive(Debug, Error)]
pub enum SegmentsError {
    /// A file could not be read or the joined one written.
    #[error("{path}: {error}")]
    Capture {
        /// The file.
        path: String,
        /// Why.
        error: CaptureError,
    },
    /// A file's META could not be read as a capture's.
    #[error("{path}: {message}")]
    Meta {
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
    /// The folder holds no capture.
    #[error("{0}: no capture (.dscap) in this folder")]
    NoFiles(String),
    /// The folder could not be listed.
    #[error("{path}: {error}")]
    Folder {
        /// The folder.
        path: String,
        /// Why.
        error: std::io::Error,
    },
}

/// `path`'s place in a session's files: the session's first file's path and the part number
/// (`name.0003.dscap` is part 3 of `name.dscap`'s session; any other file is part 0 of its own).
pub fn part_of(path: &Path) -> (PathBuf, usize) {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    match stem.rsplit_once('.') {
        Some((base, n)) if n.len() == 4 && n.bytes().all(|b| b.is_ascii_digit()) => {
            let name = match path.extension() {
                Some(ext) => format!("{base}.{}", ext.to_string_lossy()),
                None => base.to_owned(),
            };
            (path.with_file_name(name), n.parse().unwrap_or(0))
        }
        _ => (path.to_path_buf(), 0),
    }
}

/// The files of the live session `path` belongs to, still on disk, oldest first, with the number
/// of the first (0 unless the disk budget deleted the earliest): from `path`'s own part back to
/// the earliest there and on to the last. A folder holds the session whose files it has most of.
/// One file alone is a session of one.
pub fn session_files(path: &Path) -> Result<(Vec<PathBuf>, usize), SegmentsError> {
    let path = if path.is_dir() {
        folder_session(path)?
    } else {
        path.to_path_buf()
    };
    let (first, part) = part_of(&path);
    let exists = |n: usize| n == part || segment_path(&first, n).exists();
    let earliest = (0..=part)
        .rev()
        .take_while(|&n| exists(n))
        .last()
        .unwrap_or(part);
    let files = (earliest..)
        .take_while(|&n| exists(n))
        .map(|n| {
            if n == part {
                path.clone()
            } else {
                segment_path(&first, n)
            }
        })
        .collect();
    Ok((files, earliest))
}

/// The earliest file of the session a folder has most files of.
fn folder_session(dir: &Path) -> Result<PathBuf, SegmentsError> {
    let listing = std::fs::read_dir(dir).map_err(|error| SegmentsError::Folder {
        path: dir.display().to_string(),
        error,
    })?;
    let mut sessions: BTreeMap<PathBuf, Vec<usize>> = BTreeMap::new();
    for e in listing.flatten() {
        let p = e.path();
        if p.is_file() && p.extension().is_some_and(|x| x == "dscap") {
            let (first, part) = part_of(&p);
            sessions.entry(first).or_default().push(part);
        }
    }
    let (first, mut parts) = sessions
        .into_iter()
        .max_by_key(|(_, parts)| parts.len())
        .ok_or_else(|| SegmentsError::NoFiles(dir.display().to_string()))?;
    parts.sort_unstable();
    Ok(segment_path(&first, parts.first().copied().unwrap_or(0)))
}

/// What [`join`] wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Joined {
    /// Dispatches in the joined capture.
    pub dispatches: usize,
    /// Files joined.
    pub files: usize,
}

/// Writes `files` (one session's, oldest first: [`session_files`]) as one capture at `dest`:
/// the first file's META with every file's programs, `note` (what is no longer on disk, if
/// anything) at the head of its description, then every record of every file in order (their
/// PROGRAM records are in the META). Record by record: memory holds one record at a time.
pub fn join(files: &[PathBuf], dest: &Path, note: Option<&str>) -> Result<Joined, SegmentsError> {
    let name = |p: &Path| p.display().to_string();
    let capture_err = |p: &Path| {
        let path = name(p);
        move |error| SegmentsError::Capture { path, error }
    };
    let first = files
        .first()
        .ok_or_else(|| SegmentsError::NoFiles(name(dest)))?;
    // The META: the first file's, with the programs every file learned.
    let mut programs = Vec::new();
    for f in files {
        let meta_err = |e: dispatchscope_formats::session::SessionError| SegmentsError::Meta {
            path: name(f),
            message: e.to_string(),
        };
        let c = CaptureFile::open(f).map_err(meta_err)?;
        for p in &c.meta().programs {
            if !programs
                .iter()
                .any(|q: &dispatchscope_formats::sample::Program| q.address == p.address)
            {
                programs.push(p.clone());
            }
        }
    }
    let reader = CaptureReader::open(first).map_err(capture_err(first))?;
    let mut meta: serde_json::Value =
        serde_json::from_slice(reader.header_payload()).map_err(|e| SegmentsError::Meta {
            path: name(first),
            message: format!("its META is not JSON: {e}"),
        })?;
    drop(reader);
    if let Some(m) = meta.as_object_mut() {
        let description = m
            .get("description")
            .and_then(|d| d.as_str())
            .unwrap_or("")
            .to_owned();
        let joined = format!(
            "A live session's {} as one capture.",
            if files.len() == 1 {
                "file".to_owned()
            } else {
                format!("{} files", files.len())
            }
        );
        let text = match note {
            Some(n) => format!("{n} {joined} {description}"),
            None => format!("{joined} {description}"),
        };
        m.insert("description".into(), text.trim().into());
        m.insert(
            "programs".into(),
            serde_json::to_value(&programs).map_err(|e| SegmentsError::Meta {
                path: name(first),
                message: format!("its programs: {e}"),
            })?,
        );
    }
    let header = serde_json::to_vec(&meta).map_err(|e| SegmentsError::Meta {
        path: name(dest),
        message: e.to_string(),
    })?;
    let mut out = CaptureWriter::create(dest, &header).map_err(capture_err(dest))?;
    let mut dispatches = 0;
    for f in files {
        let mut r = CaptureReader::open(f).map_err(capture_err(f))?;
        let records = r.records().to_vec();
        for (i, m) in records.iter().enumerate() {
            if m.kind == PROGRAM {
                continue;
            }
            let payload = r.read_record(i).map_err(capture_err(f))?;
            out.append(m.kind, &payload, m.compressed)
                .map_err(capture_err(dest))?;
            if m.kind == RecordKind::DISPATCH {
                dispatches += 1;
            }
        }
    }
    out.finish().map_err(capture_err(dest))?;
    Ok(Joined {
        dispatches,
        files: files.len(),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn a_files_part_and_its_sessions_files() {
        let dir = std::env::temp_dir().join(format!("ds-segments-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let first = dir.join("s.dscap");
        assert_eq!(part_of(&first), (first.clone(), 0));
        assert_eq!(part_of(&segment_path(&first, 12)), (first.clone(), 12));
        assert_eq!(part_of(&dir.join("s.v2.dscap")).1, 0, "not four digits");
        // Parts 2, 3 and 4 on disk (0 and 1 deleted), and a file of another session.
        for n in [2, 3, 4] {
            std::fs::write(segment_path(&first, n), b"").unwrap();
        }
        std::fs::write(dir.join("other.dscap"), b"").unwrap();
        let want: Vec<PathBuf> = [2, 3, 4].iter().map(|&n| segment_path(&first, n)).collect();
        for from in [
            segment_path(&first, 3),
            segment_path(&first, 2),
            dir.clone(),
        ] {
            assert_eq!(session_files(&from).unwrap(), (want.clone(), 2), "{from:?}");
        }
        let lone = dir.join("other.dscap");
        assert_eq!(session_files(&lone).unwrap(), (vec![lone.clone()], 0));
        assert!(starts_late(&format!("{LATER_FILE}, from dispatch 7 on")));
        assert!(!starts_late("a capture"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
