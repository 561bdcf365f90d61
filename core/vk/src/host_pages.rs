//! The emulator's own pages as an engine in host mode reaches them (`dispatchscope_core::host`):
//! the process's real mappings, read from the kernel, and reads of guest bytes that fail instead
//! of crashing on a page the process cannot read.
//!
//! - [`real_mappings`] asks the kernel about the mappings over a host range: Linux 6.11's
//!   `PROCMAP_QUERY` ioctl on `/proc/self/maps` answers for one address without the file being
//!   formatted and parsed; older kernels fall back to [`parse_maps`] over the whole file.
//! - [`read_process`] copies bytes with `process_vm_readv` on this process, which returns `EFAULT`
//!   for a page that is unmapped or unreadable where a plain load would kill the process.
//! - [`ProcessHost`] is a [`HostMemory`] over both, with the calls only the emulator can make (a
//!   host write through its write-watch, its lazy commit, its guard release, C2's hand-off) left to
//!   a [`HostCalls`] the emulator gives; the engine never `mprotect`s or writes the emulator's
//!   pages itself.
//!
//! Linux only; elsewhere the real-mapping check says it cannot tell, and the engine's report says
//! the check was skipped.

use std::fs::File;
use std::io::Read;
#[cfg(target_os = "linux")]
use std::os::fd::AsRawFd;
use std::sync::OnceLock;

use dispatchscope_core::addr::ByteRange;
use dispatchscope_core::host::{HostError, HostMemory, HostRun, RealMapping};

/// Why one of the emulator's own calls ([`HostCalls`]) did not do what it was asked; the engine
/// keeps it, in words, as the `why` of its [`HostError`].
#[derive(Debug, thiserror::Error)]
pub enum HostCallError {
    /// A C callback answered with a status other than 0 (the C ABI's `ds_host_callbacks`).
    #[error("the emulator's {call} callback returned {status}")]
    Status {
        /// The callback, as the C ABI names it (`write`, `commit`, `release_guards` …).
        call: &'static str,
        /// What it returned.
        status: i32,
    },
    /// A batch callback of O8's runs answered with a status other than 0 at run `run`.
    #[error("the emulator's {call} callback returned {status} at run {run} of {runs}")]
    RunStatus {
        /// The callback (`write_runs`).
        call: &'static str,
        /// What it returned.
        status: i32,
        /// The first run that did not land.
        run: usize,
        /// The runs of the batch.
        runs: usize,
    },
    /// The operating system refused the emulator's call (an `mprotect`, a `process_vm_writev`).
    #[error("{what}: {source}")]
    Os {
        /// What the emulator asked of it.
        what: String,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// The emulator refused for a reason of its own (its write-watch, its guest memory), in its
    /// words.
    #[error("{0}")]
    Refused(String),
}

/// The calls of host mode that only the emulator can make, each with its own error.
pub trait HostCalls: Send + Sync {
    /// A host write of guest bytes through the emulator's write-watch (C3, O8).
    fn write(&self, host_addr: u64, bytes: &[u8]) -> Result<(), HostCallError>;
    /// O8's runs of written words in one call (`HostMemory::write_runs`): `Err((k, why))` where
    /// run `k` did not land (the runs before it did). The default writes run by run.
    fn write_runs(&self, runs: &[HostRun<'_>]) -> Result<(), (usize, HostCallError)> {
        for (k, r) in runs.iter().enumerate() {
            self.write(r.host_addr, r.bytes).map_err(|e| (k, e))?;
        }
        Ok(())
    }
    /// M2: commit `bytes` at `host_addr`.
    fn commit(&self, host_addr: u64, bytes: u64) -> Result<(), HostCallError>;
    /// M2: release the write-watch's guards over `bytes` at `host_addr`.
    fn release_guards(&self, host_addr: u64, bytes: u64) -> Result<(), HostCallError>;
    /// C2: the device stored into `guest` at `host_addr`.
    fn hand_off(&self, guest: ByteRange, host_addr: u64) -> Result<(), HostCallError>;
}

impl<T: HostCalls + ?Sized> HostCalls for std::sync::Arc<T> {
    fn write(&self, host_addr: u64, bytes: &[u8]) -> Result<(), HostCallError> {
        (**self).write(host_addr, bytes)
    }
    fn write_runs(&self, runs: &[HostRun<'_>]) -> Result<(), (usize, HostCallError)> {
        (**self).write_runs(runs)
    }
    fn commit(&self, host_addr: u64, bytes: u64) -> Result<(), HostCallError> {
        (**self).commit(host_addr, bytes)
    }
    fn release_guards(&self, host_addr: u64, bytes: u64) -> Result<(), HostCallError> {
        (**self).release_guards(host_addr, bytes)
    }
    fn hand_off(&self, guest: ByteRange, host_addr: u64) -> Result<(), HostCallError> {
        (**self).hand_off(guest, host_addr)
    }
}

/// How [`real_mappings`] asks the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapsSource {
    /// `PROCMAP_QUERY` on `/proc/self/maps`, one ioctl a mapping (Linux 6.11 and later).
    Query,
    /// The text of `/proc/self/maps`, parsed whole.
    Text,
}

/// A [`HostMemory`] over this process's own pages: reads by `process_vm_readv`, real mappings
/// from the kernel, and the emulator's own calls for the rest.
pub struct ProcessHost<C> {
    calls: C,
    source: MapsSource,
}

impl<C: HostCalls> ProcessHost<C> {
    /// Host memory over this process, asking the kernel the fastest way it answers.
    pub fn new(calls: C) -> Self {
        Self {
            calls,
            source: preferred_source(),
        }
    }

    /// The same, asking the kernel by `source` (the fallback is tested with it).
    pub fn with_source(calls: C, source: MapsSource) -> Self {
        Self { calls, source }
    }

    /// The emulator's calls.
    pub fn calls(&self) -> &C {
        &self.calls
    }
}

impl<C: HostCalls> HostMemory for ProcessHost<C> {
    fn name(&self) -> String {
        "the emulator's pages".to_owned()
    }

    fn read(&self, host_addr: u64, out: &mut [u8]) -> Result<(), HostError> {
        let len = out.len() as u64;
        read_process_until(host_addr, out).map_err(|(done, e)| {
            let at = host_addr + done as u64;
            HostError::new(
                "read",
                at,
                len - done as u64,
                format!("{e}: the process cannot read host {at:#x}"),
            )
        })
    }

    fn write(&self, host_addr: u64, bytes: &[u8]) -> Result<(), HostError> {
        self.calls
            .write(host_addr, bytes)
            .map_err(|e| HostError::new("write", host_addr, bytes.len() as u64, e.to_string()))
    }

    fn write_runs(&self, runs: &[HostRun<'_>]) -> Result<(), (usize, HostError)> {
        self.calls.write_runs(runs).map_err(|(k, e)| {
            let r = runs.get(k).copied().unwrap_or(HostRun {
                host_addr: 0,
                bytes: &[],
            });
            (
                k,
                HostError::new("write", r.host_addr, r.bytes.len() as u64, e.to_string()),
            )
        })
    }

    fn commit(&self, host_addr: u64, bytes: u64) -> Result<(), HostError> {
        self.calls
            .commit(host_addr, bytes)
            .map_err(|e| HostError::new("commit", host_addr, bytes, e.to_string()))
    }

    fn release_guards(&self, host_addr: u64, bytes: u64) -> Result<(), HostError> {
        self.calls
            .release_guards(host_addr, bytes)
            .map_err(|e| HostError::new("release-guards", host_addr, bytes, e.to_string()))
    }

    fn hand_off(&self, guest: ByteRange, host_addr: u64) -> Result<(), HostError> {
        self.calls
            .hand_off(guest, host_addr)
            .map_err(|e| HostError::new("hand-off", host_addr, guest.size_bytes(), e.to_string()))
    }

    fn real_mappings(&self, host_addr: u64, bytes: u64) -> Option<Vec<RealMapping>> {
        real_mappings_by(self.source, host_addr, bytes).ok()
    }
}

/// `PROCMAP_QUERY` when the kernel answers it, the text otherwise (asked once a process).
pub fn preferred_source() -> MapsSource {
    static SOURCE: OnceLock<MapsSource> = OnceLock::new();
    *SOURCE.get_or_init(|| {
        let probe = preferred_probe_addr();
        match query_mappings(probe, 1) {
            Ok(_) => MapsSource::Query,
            Err(_) => MapsSource::Text,
        }
    })
}

/// An address surely mapped: this function's own code.
fn preferred_probe_addr() -> u64 {
    preferred_probe_addr as *const () as u64
}

/// The process's mappings over `bytes` bytes at `host_addr`, in address order, the fastest way
/// the kernel answers.
pub fn real_mappings(host_addr: u64, bytes: u64) -> std::io::Result<Vec<RealMapping>> {
    real_mappings_by(preferred_source(), host_addr, bytes)
}

/// [`real_mappings`] asked by `source`.
pub fn real_mappings_by(
    source: MapsSource,
    host_addr: u64,
    bytes: u64,
) -> std::io::Result<Vec<RealMapping>> {
    match source {
        MapsSource::Query => query_mappings(host_addr, bytes),
        MapsSource::Text => {
            let mut text = String::new();
            File::open("/proc/self/maps")?.read_to_string(&mut text)?;
            let end = host_addr.saturating_add(bytes);
            Ok(parse_maps(&text)
                .filter(|m| m.range.end > host_addr && m.range.start < end)
                .collect())
        }
    }
}

/// Every mapping of a `/proc/PID/maps` text, in its order; lines that do not parse are skipped.
pub fn parse_maps(text: &str) -> impl Iterator<Item = RealMapping> + '_ {
    text.lines().filter_map(parse_maps_line)
}

/// One line of `/proc/PID/maps`: `start-end perms offset dev inode [name]`.
pub fn parse_maps_line(line: &str) -> Option<RealMapping> {
    let mut f = line.split_ascii_whitespace();
    let (start, end) = f.next()?.split_once('-')?;
    let perms = f.next()?.as_bytes();
    let _offset = f.next()?;
    let _dev = f.next()?;
    let inode: u64 = f.next()?.parse().ok()?;
    let name = f.collect::<Vec<_>>().join(" ");
    if perms.len() < 4 {
        return None;
    }
    Some(RealMapping {
        range: ByteRange::new(
            u64::from_str_radix(start, 16).ok()?,
            u64::from_str_radix(end, 16).ok()?,
        ),
        readable: perms[0] == b'r',
        writable: perms[1] == b'w',
        shared: perms[3] == b's',
        file_backed: inode != 0,
        name,
    })
}

/// `struct procmap_query` of `<linux/fs.h>` (Linux 6.11).
#[cfg(target_os = "linux")]
#[repr(C)]
#[derive(Default)]
struct ProcmapQuery {
    size: u64,
    query_flags: u64,
    query_addr: u64,
    vma_start: u64,
    vma_end: u64,
    vma_flags: u64,
    vma_page_size: u64,
    vma_offset: u64,
    inode: u64,
    dev_major: u32,
    dev_minor: u32,
    vma_name_size: u32,
    build_id_size: u32,
    vma_name_addr: u64,
    build_id_addr: u64,
}

#[cfg(target_os = "linux")]
mod procmap {
    /// `_IOWR('f', 17, struct procmap_query)`.
    pub(super) const PROCMAP_QUERY: u64 =
        (3 << 30) | ((size_of::<super::ProcmapQuery>() as u64) << 16) | ((b'f' as u64) << 8) | 17;
    /// The mapping covering the address, or the next one after it.
    pub(super) const COVERING_OR_NEXT_VMA: u64 = 0x10;
    pub(super) const VMA_READABLE: u64 = 0x1;
    pub(super) const VMA_WRITABLE: u64 = 0x2;
    pub(super) const VMA_SHARED: u64 = 0x8;
}

/// The mappings over `bytes` bytes at `host_addr` by `PROCMAP_QUERY`, one ioctl a mapping.
#[cfg(target_os = "linux")]
fn query_mappings(host_addr: u64, bytes: u64) -> std::io::Result<Vec<RealMapping>> {
    thread_local! {
        static MAPS: std::cell::RefCell<Option<File>> = const { std::cell::RefCell::new(None) };
    }
    MAPS.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(File::open("/proc/self/maps")?);
        }
        let Some(file) = slot.as_ref() else {
            return Ok(Vec::new());
        };
        let end = host_addr.saturating_add(bytes.max(1));
        let mut at = host_addr;
        let mut out = Vec::new();
        let mut name = [0u8; 256];
        while at < end {
            let mut q = ProcmapQuery {
                size: size_of::<ProcmapQuery>() as u64,
                query_flags: procmap::COVERING_OR_NEXT_VMA,
                query_addr: at,
                vma_name_size: name.len() as u32,
                vma_name_addr: name.as_mut_ptr() as u64,
                ..ProcmapQuery::default()
            };
            // SAFETY: the fd is /proc/self/maps, `q` is a procmap_query whose size field says its
            // size, and the name buffer it points at lives across the call with the size given.
            let r = unsafe {
                libc::ioctl(
                    file.as_raw_fd(),
                    procmap::PROCMAP_QUERY as libc::Ioctl,
                    &mut q as *mut ProcmapQuery,
                )
            };
            if r != 0 {
                let e = std::io::Error::last_os_error();
                // ENOENT: no mapping at or after `at`.
                if e.raw_os_error() == Some(libc::ENOENT) {
                    break;
                }
                return Err(e);
            }
            if q.vma_start >= end {
                break;
            }
            let n = (q.vma_name_size as usize).saturating_sub(1).min(name.len());
            out.push(RealMapping {
                range: ByteRange::new(q.vma_start, q.vma_end),
                readable: q.vma_flags & procmap::VMA_READABLE != 0,
                writable: q.vma_flags & procmap::VMA_WRITABLE != 0,
                shared: q.vma_flags & procmap::VMA_SHARED != 0,
                file_backed: q.inode != 0,
                name: String::from_utf8_lossy(&name[..n]).into_owned(),
            });
            at = q.vma_end;
        }
        Ok(out)
    })
}

#[cfg(not(target_os = "linux"))]
fn query_mappings(_host_addr: u64, _bytes: u64) -> std::io::Result<Vec<RealMapping>> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "PROCMAP_QUERY is Linux's",
    ))
}

/// Copies `out.len()` bytes of this process at `host_addr` into `out`; an unmapped or unreadable
/// page is an error (`EFAULT`), never a crash.
#[cfg(target_os = "linux")]
pub fn read_process(host_addr: u64, out: &mut [u8]) -> std::io::Result<()> {
    read_process_until(host_addr, out).map_err(|(_, e)| e)
}

/// [`read_process`], saying how many bytes were read before the failure (the first byte the
/// process cannot read is at `host_addr` plus that count).
#[cfg(target_os = "linux")]
fn read_process_until(host_addr: u64, out: &mut [u8]) -> Result<(), (usize, std::io::Error)> {
    let mut done = 0usize;
    while done < out.len() {
        let local = libc::iovec {
            iov_base: out[done..].as_mut_ptr().cast(),
            iov_len: out.len() - done,
        };
        let remote = libc::iovec {
            iov_base: (host_addr + done as u64) as *mut libc::c_void,
            iov_len: out.len() - done,
        };
        // SAFETY: `local` is the unwritten tail of `out`, which lives across the call; the remote
        // side is only read by the kernel, which checks it and answers EFAULT instead of faulting.
        let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
        if n < 0 {
            return Err((done, std::io::Error::last_os_error()));
        }
        if n == 0 {
            return Err((done, std::io::Error::from_raw_os_error(libc::EFAULT)));
        }
        done += n as usize;
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn read_process_until(host_addr: u64, out: &mut [u8]) -> Result<(), (usize, std::io::Error)> {
    read_process(host_addr, out).map_err(|e| (0, e))
}

/// Elsewhere host reads are not supported.
#[cfg(not(target_os = "linux"))]
pub fn read_process(_host_addr: u64, _out: &mut [u8]) -> std::io::Result<()> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "host reads are Linux's",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_parse() {
        let m = parse_maps_line(
            "7f1c2a000000-7f1c2a010000 rw-s 00000000 00:01 2051   /memfd:guest (deleted)",
        )
        .unwrap();
        assert_eq!(m.range, ByteRange::new(0x7f1c2a000000, 0x7f1c2a010000));
        assert!(m.readable && m.writable && m.shared && m.file_backed);
        assert_eq!(m.name, "/memfd:guest (deleted)");
        let a = parse_maps_line("55d0c0a00000-55d0c0a21000 rw-p 00000000 00:00 0 [heap]").unwrap();
        assert!(!a.shared && !a.file_backed);
        let anon = parse_maps_line("7f00-8f00 r--p 00000000 00:00 0").unwrap();
        assert!(anon.readable && !anon.writable && anon.name.is_empty());
        assert!(parse_maps_line("garbage").is_none());
        assert!(parse_maps_line("zz-10 rw-p 0 00:00 0").is_none());
    }

    /// The ioctl and the text agree on this process's own heap and stack.
    #[test]
    fn query_and_text_agree() {
        let v = vec![7u8; 1 << 20];
        let addr = v.as_ptr() as u64;
        let text = real_mappings_by(MapsSource::Text, addr, 1 << 20).unwrap();
        assert!(!text.is_empty());
        assert!(text[0].readable && text[0].writable && !text[0].shared);
        if preferred_source() == MapsSource::Query {
            let q = real_mappings_by(MapsSource::Query, addr, 1 << 20).unwrap();
            assert_eq!(q, text);
        }
    }

    #[test]
    fn reads_fail_instead_of_crashing() {
        let v = [1u8, 2, 3, 4];
        let mut out = [0u8; 4];
        read_process(v.as_ptr() as u64, &mut out).unwrap();
        assert_eq!(out, v);
        assert!(read_process(8, &mut out).is_err());
    }
}
