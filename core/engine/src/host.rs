//! The emulator's own memory: the interface through which an engine in host mode reaches the
//! pages an emulator keeps its guest memory in, and the facts about host pages that M3 checks.
//!
//! In host mode (`Engine::with_host`, a [`HostMemory`] given to [`crate::GuestMemory::with_host`])
//! the engine keeps page *state* from events as always, but never keeps guest *contents*: every
//! reservation names the host address where the emulator keeps it (`Event::Reserve`'s
//! `host_base`), a read of guest bytes reads the emulator's pages, a host write (C3's deferred
//! copies, O8's write-back words) is a call into the emulator (which does it through its own
//! write-watch), and M2's commit and guard release are calls into the emulator too: the engine
//! never `mprotect`s, commits or copies the emulator's memory behind its back.
//!
//! Before a piece is handed to the driver, the process's real mapping of it is read
//! ([`HostMemory::real_mappings`]) and compared with what the events said ([`check_real`]):
//! a page the events call private and read-write but the kernel maps shared, file-backed,
//! read-only or not at all is refused by name (`LeftOutReason::RealMapping`), because the
//! drivers measured here disagree about such pages and one of them kills the process
//! ([`DRIVER_FACTS`]).
//!
//! This module only defines the interface and the comparison; the implementation over a real
//! process (`/proc/self/maps`, `PROCMAP_QUERY`, `process_vm_readv`) lives in `dispatchscope-vk`
//! (`host_pages`), since this crate opens no file and makes no system call.

use std::fmt;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::addr::ByteRange;

/// A call into the emulator's memory failed; the message is the emulator's (or the kernel's).
/// It names the call, the host bytes and, where the engine knows it, the guest address they hold.
#[derive(Clone, Debug, PartialEq, Eq, Error, Serialize, Deserialize)]
#[error("the host's {call} of {bytes:#x} bytes at host {host_addr:#x}{} failed: {why}", guest_words(*.guest))]
pub struct HostError {
    /// The call: `commit`, `release-guards`, `read`, `write`, `hand-off`, `real-mapping`.
    pub call: String,
    /// The host address.
    #[serde(with = "crate::addr::hex")]
    pub host_addr: u64,
    /// The bytes.
    #[serde(with = "crate::addr::hex")]
    pub bytes: u64,
    /// The guest address of the first byte, where the engine knows it.
    #[serde(
        with = "crate::addr::hex::option",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub guest: Option<u64>,
    /// What went wrong.
    pub why: String,
}

fn guest_words(guest: Option<u64>) -> String {
    guest.map_or_else(String::new, |g| format!(" (guest {g:#x})"))
}

impl HostError {
    /// A failure of `call` over `bytes` bytes at `host_addr`.
    pub fn new(call: &str, host_addr: u64, bytes: u64, why: impl Into<String>) -> Self {
        Self {
            call: call.to_owned(),
            host_addr,
            bytes,
            guest: None,
            why: why.into(),
        }
    }

    /// The same failure, naming the guest address its first byte holds.
    pub fn at_guest(mut self, guest: u64) -> Self {
        self.guest = Some(guest);
        self
    }
}

/// One run of a batched host write ([`HostMemory::write_runs`]): `bytes` to the emulator's
/// memory at `host_addr`.
#[derive(Clone, Copy, Debug)]
pub struct HostRun<'a> {
    /// Where the run lands, in the emulator's memory.
    pub host_addr: u64,
    /// Its bytes.
    pub bytes: &'a [u8],
}

/// One mapping of the process, as the kernel has it (one line of `/proc/self/maps`).
/// `range` is half-open.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RealMapping {
    /// The host bytes the mapping covers.
    pub range: ByteRange,
    /// `r`.
    pub readable: bool,
    /// `w`.
    pub writable: bool,
    /// `s` rather than `p`: `MAP_SHARED`.
    pub shared: bool,
    /// Backed by a file (a memfd, a tmpfs or disk file, `/dev/zero` shared); anonymous if not.
    pub file_backed: bool,
    /// The mapping's name (`[heap]`, `/memfd:guest (deleted)`), empty for anonymous ones.
    pub name: String,
}

/// Why a piece's real mapping contradicts the events that made it mappable (M3).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum RealRefusal {
    /// Some of the piece is not mapped at all.
    Unmapped {
        /// The first host address no mapping holds.
        #[serde(with = "crate::addr::hex")]
        host_addr: u64,
    },
    /// The kernel maps it shared (`MAP_SHARED`), although the events say private.
    Shared {
        /// The mapping.
        mapping: RealMapping,
    },
    /// The kernel maps it from a file (a memfd `MAP_PRIVATE`), which RADV's userptr path refuses.
    FileBacked {
        /// The mapping.
        mapping: RealMapping,
    },
    /// The kernel maps it without read and write, although the events say read-write.
    NotReadWrite {
        /// The mapping.
        mapping: RealMapping,
    },
}

impl fmt::Display for RealRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let prot = |m: &RealMapping| {
            format!(
                "{}{}{}",
                if m.readable { 'r' } else { '-' },
                if m.writable { 'w' } else { '-' },
                if m.shared { 's' } else { 'p' }
            )
        };
        let name = |m: &RealMapping| {
            if m.name.is_empty() {
                "anonymous".to_owned()
            } else {
                m.name.clone()
            }
        };
        match self {
            RealRefusal::Unmapped { host_addr } => {
                write!(f, "host {host_addr:#x} is not mapped by the process")
            }
            RealRefusal::Shared { mapping: m } => write!(
                f,
                "the process maps host {} {} ({}), shared, although the events say private",
                m.range,
                prot(m),
                name(m)
            ),
            RealRefusal::FileBacked { mapping: m } => write!(
                f,
                "the process maps host {} {} from a file ({})",
                m.range,
                prot(m),
                name(m)
            ),
            RealRefusal::NotReadWrite { mapping: m } => write!(
                f,
                "the process maps host {} {} ({}), not read-write, although the events say read-write",
                m.range,
                prot(m),
                name(m)
            ),
        }
    }
}

/// What each driver measured here does with a page M3 keeps out, so an explanation says why the
/// rule exists and not only that it fired (TOOLCHAIN.md, "Host pointers on real drivers").
pub const DRIVER_FACTS: &str = "NVIDIA (H200, driver 580) refuses an import whose run holds a page that is not read-write \
(VK_ERROR_OUT_OF_DEVICE_MEMORY) and makes every imported page resident as it maps it; \
RADV refuses shared (MAP_SHARED, memfd) and file-backed pages (VK_ERROR_INVALID_EXTERNAL_HANDLE); \
lavapipe imports anything and then kills the process with SIGSEGV when the device touches a \
page the host protected or unmapped";

/// Checks the real mappings `maps` (in address order, as the kernel lists them) of host bytes
/// `host` against M3's demand (committed, private, read-write, anonymous): the first
/// contradiction, or `None` when every byte is mapped as the events said.
pub fn check_real(host: ByteRange, maps: &[RealMapping]) -> Option<RealRefusal> {
    let mut at = host.start;
    for m in maps {
        if at >= host.end {
            break;
        }
        if m.range.end <= at {
            continue;
        }
        if m.range.start > at {
            return Some(RealRefusal::Unmapped { host_addr: at });
        }
        if let Some(why) = refusal_of(m) {
            return Some(why);
        }
        at = m.range.end;
    }
    (at < host.end).then_some(RealRefusal::Unmapped { host_addr: at })
}

/// What M3 finds wrong with one real mapping, if anything.
fn refusal_of(m: &RealMapping) -> Option<RealRefusal> {
    if m.shared {
        Some(RealRefusal::Shared { mapping: m.clone() })
    } else if m.file_backed {
        Some(RealRefusal::FileBacked { mapping: m.clone() })
    } else if !(m.readable && m.writable) {
        Some(RealRefusal::NotReadWrite { mapping: m.clone() })
    } else {
        None
    }
}

/// M3 by pieces: splits host bytes `host` into maximal stretches that the real mappings `maps`
/// (in address order) let through (`None`: private, anonymous, read-write) or contradict (the
/// first contradiction of the stretch), covering `host` in order. A run with one bad page keeps
/// its good pages: only the bad stretch is left out.
pub fn split_real(host: ByteRange, maps: &[RealMapping]) -> Vec<(ByteRange, Option<RealRefusal>)> {
    let mut out: Vec<(ByteRange, Option<RealRefusal>)> = Vec::new();
    let mut push = |r: ByteRange, why: Option<RealRefusal>| {
        if r.is_empty() {
            return;
        }
        match out.last_mut() {
            Some((last, w)) if last.end == r.start && w.is_none() && why.is_none() => {
                last.end = r.end;
            }
            Some((last, Some(RealRefusal::Unmapped { .. })))
                if last.end == r.start && matches!(why, Some(RealRefusal::Unmapped { .. })) =>
            {
                last.end = r.end;
            }
            _ => out.push((r, why)),
        }
    };
    let mut at = host.start;
    for m in maps {
        if at >= host.end {
            break;
        }
        if m.range.end <= at {
            continue;
        }
        if m.range.start > at {
            let gap_end = m.range.start.min(host.end);
            push(
                ByteRange::new(at, gap_end),
                Some(RealRefusal::Unmapped { host_addr: at }),
            );
            at = gap_end;
            if at >= host.end {
                break;
            }
        }
        let end = m.range.end.min(host.end);
        push(ByteRange::new(at, end), refusal_of(m));
        at = end;
    }
    if at < host.end {
        push(
            ByteRange::new(at, host.end),
            Some(RealRefusal::Unmapped { host_addr: at }),
        );
    }
    out
}

/// The emulator's memory, as an engine in host mode reaches it. Host addresses are the
/// emulator's own pointers (a reservation's `host_base` plus the offset into it).
///
/// Every call may fail; a failure is an [`HostError`] the engine returns as it is (nothing the
/// engine changed is left half done: a failed commit leaves the run unmapped).
pub trait HostMemory: Send + Sync {
    /// What to call this memory in reports ("emulator pages").
    fn name(&self) -> String;

    /// Reads host bytes at `host_addr` into `out`. An implementation must not crash on a page
    /// the process cannot read: it fails instead.
    fn read(&self, host_addr: u64, out: &mut [u8]) -> Result<(), HostError>;

    /// A host write of guest bytes (C3's deferred copy, O8's write-back words), done by the
    /// emulator through its own write-watch (it notes the pages, drops the trust of textures).
    fn write(&self, host_addr: u64, bytes: &[u8]) -> Result<(), HostError>;

    /// O8's write-back of one holder group: every run in `runs` is a host write, in order (in
    /// address order, none overlapping). `Err((k, e))` says run `k` did not land and why; the runs
    /// before it landed, and the engine goes on from run `k + 1` (an emulator may stop at the first
    /// failure). The default writes run by run through [`HostMemory::write`].
    fn write_runs(&self, runs: &[HostRun<'_>]) -> Result<(), (usize, HostError)> {
        for (k, r) in runs.iter().enumerate() {
            self.write(r.host_addr, r.bytes).map_err(|e| (k, e))?;
        }
        Ok(())
    }

    /// M2: the emulator commits `bytes` bytes at `host_addr` (it committed lazily).
    fn commit(&self, host_addr: u64, bytes: u64) -> Result<(), HostError>;

    /// M2: the emulator releases its write-watch guards over `bytes` bytes at `host_addr` (the
    /// engine notes the pages written, as M2 says).
    fn release_guards(&self, host_addr: u64, bytes: u64) -> Result<(), HostError>;

    /// C2: the device stored into the marked chunk `guest` (at `host_addr`): the emulator's
    /// write-watch notes its pages written and textures over it lose their trust.
    fn hand_off(&self, guest: ByteRange, host_addr: u64) -> Result<(), HostError>;

    /// The process's real mappings over `bytes` bytes at `host_addr`, in address order, or `None`
    /// when this host cannot tell (the check is then skipped and the report says so).
    fn real_mappings(&self, host_addr: u64, bytes: u64) -> Option<Vec<RealMapping>>;
}

/// Counts of what host mode did with the emulator's bytes, kept by [`crate::GuestMemory`] so an
/// embedder can check that nothing is copied behind its back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostTraffic {
    /// Bytes read from the emulator's pages (the CPU reference's loads, a holder's upload, the
    /// debugger's reads).
    pub bytes_read: u64,
    /// Bytes written through the emulator (C3 copies, O8 write-back words, the CPU reference's
    /// stores).
    pub bytes_written: u64,
    /// Calls into the emulator that failed (each also returned or recorded as an error).
    pub failures: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(start: u64, end: u64, rw: bool, shared: bool, file: bool) -> RealMapping {
        RealMapping {
            range: ByteRange::new(start, end),
            readable: true,
            writable: rw,
            shared,
            file_backed: file,
            name: if file {
                "/memfd:guest".into()
            } else {
                String::new()
            },
        }
    }

    fn check(host: (u64, u64), maps: &[RealMapping], expected: Option<&str>) {
        let got = check_real(ByteRange::new(host.0, host.1), maps).map(|r| r.to_string());
        assert_eq!(got.as_deref(), expected);
    }

    #[test]
    fn real_mapping_against_the_events() {
        let rw = map(0x1000, 0x5000, true, false, false);
        check((0x1000, 0x5000), std::slice::from_ref(&rw), None);
        check((0x2000, 0x3000), std::slice::from_ref(&rw), None);
        check(
            (0x1000, 0x6000),
            std::slice::from_ref(&rw),
            Some("host 0x5000 is not mapped by the process"),
        );
        check(
            (0x0000, 0x2000),
            std::slice::from_ref(&rw),
            Some("host 0x0 is not mapped by the process"),
        );
        let two = [rw.clone(), map(0x5000, 0x6000, true, true, true)];
        check(
            (0x1000, 0x6000),
            &two,
            Some(
                "the process maps host 0x5000..0x6000 rws (/memfd:guest), shared, although the events say private",
            ),
        );
        let ro = [rw.clone(), map(0x5000, 0x6000, false, false, false)];
        check(
            (0x4000, 0x6000),
            &ro,
            Some(
                "the process maps host 0x5000..0x6000 r-p (anonymous), not read-write, although the events say read-write",
            ),
        );
        let file = [map(0x1000, 0x2000, true, false, true)];
        assert!(matches!(
            check_real(ByteRange::new(0x1000, 0x2000), &file),
            Some(RealRefusal::FileBacked { .. })
        ));
        let gap = [rw, map(0x6000, 0x7000, true, false, false)];
        check(
            (0x4000, 0x7000),
            &gap,
            Some("host 0x5000 is not mapped by the process"),
        );
    }
}
