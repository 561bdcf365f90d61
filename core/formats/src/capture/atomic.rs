//! Writing a whole file so that a reader sees the old file or the new one, never part of one:
//! a temporary file beside it, synced, renamed over it, and the folder synced.

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::format::{CaptureError, Result, io_error};

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
