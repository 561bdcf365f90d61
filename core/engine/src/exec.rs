//! The CPU reference's execution of a prepared access stream: holders with write masks (O8, O9),
//! device-addressed accesses through the chunk table with two lookups each (T5), misses that read
//! zero and store nothing (T4), dirty marks (C1), LDS and scratch (P1).
//!
//! [`run_job`] decides nothing: routes, holders and formats arrive decided in a [`Job`]; the
//! engine reports what came out. A device backend must produce the same [`Outcome`].

use std::collections::HashMap;

use crate::addr::ByteRange;
use crate::chunk_table::ChunkTable;
use crate::host::HostError;
use crate::input::{Access, Format, Op};
use crate::memory::GuestMemory;
use crate::report::{HostFailure, HostFailureKind};

/// Where an access goes, decided by the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Planned {
    /// A holder's buffer (index into [`Job::holders`]) at a byte offset in holder coordinates.
    Bound {
        /// Index into [`Job::holders`].
        holder: usize,
        /// Byte offset in the holder's buffer.
        offset: u64,
    },
    /// Guest memory by device address.
    Device {
        /// The guest address.
        address: u64,
    },
    /// The workgroup's LDS.
    Lds {
        /// Byte offset.
        offset: u64,
    },
    /// The lane's scratch.
    Scratch {
        /// Byte offset.
        offset: u64,
    },
}

/// One access of a job.
#[derive(Clone, Copy, Debug)]
pub struct PlannedAccess<'a> {
    /// The recorded access.
    pub access: &'a Access,
    /// Where it goes.
    pub route: Planned,
    /// The format it converts by, for a format access (W1, W2).
    pub format: Option<Format>,
}

/// A prepared dispatch.
#[derive(Clone, Debug, Default)]
pub struct Job<'a> {
    /// The accesses, in stream order.
    pub accesses: Vec<PlannedAccess<'a>>,
    /// Each holder's widened guest range (O5), uploaded once (O8).
    pub holders: Vec<ByteRange>,
    /// Bytes of LDS per workgroup.
    pub lds_bytes: u32,
    /// Bytes of scratch per lane.
    pub scratch_bytes_per_lane: u32,
}

/// What one access did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccessOutcome {
    /// Values read (load) or written (store).
    pub values: Vec<u32>,
    /// Device address of the first byte, when its chunk was found.
    pub device_address: Option<u64>,
    /// Table slots the two lookups found (T5): first byte's chunk, last byte's chunk.
    pub slots: [Option<usize>; 2],
    /// The first guest address no mapping held (T4).
    pub escaped_at: Option<u64>,
}

/// What a job did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// One per access.
    pub accesses: Vec<AccessOutcome>,
    /// C1: the table slots stores marked, in slot order, each with the number of stores that
    /// marked it (the device's mark words that are not zero).
    pub marks: Vec<(usize, u32)>,
    /// Each holder's buffer after the dispatch.
    pub holders: Vec<Vec<u8>>,
    /// Each holder's write mask: one word per data word (O9).
    pub masks: Vec<Vec<u32>>,
    /// Host mode: loads whose bytes could not be read and stores that did not land.
    pub failures: Vec<HostFailure>,
}

fn bytes_of(access: &Access, format: Option<Format>) -> Vec<u8> {
    match format {
        Some(f) => f.encode(&access.values),
        None => {
            let mut b: Vec<u8> = access.values.iter().flat_map(|v| v.to_le_bytes()).collect();
            b.resize(access.size_bytes as usize, 0);
            b
        }
    }
}

fn values_of(bytes: &[u8], format: Option<Format>) -> Vec<u32> {
    match format {
        Some(f) => f.decode(bytes),
        None => bytes
            .chunks(4)
            .map(|c| {
                let mut w = [0u8; 4];
                w[..c.len()].copy_from_slice(c);
                u32::from_le_bytes(w)
            })
            .collect(),
    }
}

/// Runs a job on the CPU. `translate` turns a device address into the guest address behind it
/// and how many bytes from there stay contiguous in the same import (the CPU reference's simulated
/// address space), so that a device access is read or written a contiguous run at a time, with each
/// byte going where translating it alone would send it.
pub fn run_job(
    job: &Job<'_>,
    table: Option<&ChunkTable>,
    memory: &mut GuestMemory,
    translate: &dyn Fn(u64) -> Option<(u64, u64)>,
) -> Result<Outcome, HostError> {
    puffin::profile_function!();
    let mut out = Outcome {
        failures: Vec::new(),
        accesses: Vec::with_capacity(job.accesses.len()),
        marks: Vec::new(),
        holders: Vec::with_capacity(job.holders.len()),
        masks: Vec::with_capacity(job.holders.len()),
    };
    // O8: each holder uploaded once, from its widened range.
    // A holder is at most maxStorageBufferRange bytes (O5's range limit refuses a wider one, and
    // that limit is a 32-bit value), so its size fits a `usize` and rounds up to words without
    // overflow. Only the pages whose contents are held are copied into the zeroed buffer.
    for h in &job.holders {
        let size = usize::try_from(h.size_bytes()).unwrap_or(usize::MAX);
        let words = size.div_ceil(4);
        let mut buf = vec![0u8; words.saturating_mul(4)];
        memory
            .read_bytes_into_zeroed(h.start, &mut buf[..size])
            .map_err(|e| HostError {
                why: format!(
                    "{} (the upload of holder {h} (O8) needs every byte of it)",
                    e.why
                ),
                ..e
            })?;
        out.holders.push(buf);
        out.masks.push(vec![0; words]);
    }
    // C1: the slot of each chunk each store hit, counted per slot at the end.
    let mut marked: Vec<usize> = Vec::new();
    let mut lds: HashMap<u32, Vec<u8>> = HashMap::new();
    let mut scratch: HashMap<(u32, u32, u32), Vec<u8>> = HashMap::new();
    for pa in &job.accesses {
        let a = pa.access;
        let size = a.size_bytes as usize;
        let mut res = AccessOutcome::default();
        match pa.route {
            Planned::Bound { holder, offset } => {
                let (buf, mask) = (&mut out.holders[holder], &mut out.masks[holder]);
                let o = offset as usize;
                match a.op {
                    Op::Load => res.values = values_of(&buf[o..o + size], pa.format),
                    Op::Store => {
                        let bytes = bytes_of(a, pa.format);
                        buf[o..o + bytes.len()].copy_from_slice(&bytes);
                        // O9: every word the store touches.
                        mask[o / 4..=(o + bytes.len() - 1) / 4].fill(1);
                        res.values = a.values.clone();
                    }
                }
            }
            Planned::Lds { offset } | Planned::Scratch { offset } => {
                let (mem, capacity) = match pa.route {
                    Planned::Lds { .. } => {
                        (lds.entry(a.workgroup).or_default(), job.lds_bytes as usize)
                    }
                    _ => (
                        scratch.entry((a.workgroup, a.wave, a.lane)).or_default(),
                        job.scratch_bytes_per_lane as usize,
                    ),
                };
                let o = offset as usize;
                let bytes = match a.op {
                    Op::Load => Vec::new(),
                    Op::Store => bytes_of(a, pa.format),
                };
                // Each workgroup's LDS and each lane's scratch start zeroed and grow, up to their
                // size, only as far as an access reaches: the bytes past that would read zero.
                let end = (o + size.max(bytes.len())).min(capacity);
                if mem.len() < end {
                    mem.resize(end, 0);
                }
                match a.op {
                    Op::Load => res.values = values_of(&mem[o..o + size], pa.format),
                    Op::Store => {
                        mem[o..o + bytes.len()].copy_from_slice(&bytes);
                        res.values = a.values.clone();
                    }
                }
            }
            Planned::Device { address } => {
                let Some(table) = table else {
                    res.escaped_at = Some(address);
                    res.values = values_of(&vec![0; size], pa.format);
                    out.accesses.push(res);
                    continue;
                };
                // T5: two lookups, the first byte's chunk and the last byte's chunk (each by the
                // part of the chunk the byte lies in: a chunk may be reached in parts, a sixteenth
                // each, through two imports or with pages cut out).
                let shift = table.chunk_shift();
                let part_shift = shift - crate::chunk_table::PARTS.trailing_zeros();
                let last = address.saturating_add(size as u64 - 1);
                let (c0, c1) = (address >> part_shift, last >> part_shift);
                let s0 = table.slot_of(address);
                let s1 = if c1 == c0 { s0 } else { table.slot_of(last) };
                res.slots = [s0, if c1 == c0 { None } else { s1 }];
                let chunk_mask = (1u64 << shift) - 1;
                let part_mask = (1u64 << part_shift) - 1;
                let dev = |slot: Option<usize>, addr: u64| {
                    slot.map(|s| table.slots()[s].device_addr + (addr & chunk_mask))
                };
                res.device_address = dev(s0, address);
                let mut bytes = match a.op {
                    Op::Load => vec![0u8; size],
                    Op::Store => bytes_of(a, pa.format),
                };
                // Byte `i` goes through the first byte's slot if it is in the first byte's part of a
                // chunk, else through the last byte's. Each step covers the bytes from `i` that stay
                // in one part and one contiguous import, so each goes where it would alone; a byte
                // with no slot or no import escapes (T4): it reads zero and stores nothing.
                let mut i = 0usize;
                let mut load_failed = false;
                while i < bytes.len() {
                    let addr = address + i as u64;
                    let slot = if addr >> part_shift == c0 { s0 } else { s1 };
                    let in_chunk = ((addr | part_mask) - addr + 1) as usize;
                    let in_chunk = in_chunk.min(bytes.len() - i);
                    let Some((g, contiguous)) = dev(slot, addr).and_then(translate) else {
                        res.escaped_at.get_or_insert(addr);
                        i += if slot.is_none() { in_chunk } else { 1 };
                        continue;
                    };
                    let n = in_chunk
                        .min(usize::try_from(contiguous).unwrap_or(usize::MAX))
                        .max(1);
                    match a.op {
                        Op::Load => {
                            if let Err(e) = memory.read_bytes(g, &mut bytes[i..i + n]) {
                                load_failed = true;
                                out.failures.push(HostFailure {
                                    kind: HostFailureKind::Load,
                                    error: e,
                                    lost: None,
                                    bytes: Vec::new(),
                                });
                            }
                        }
                        Op::Store => {
                            if let Err(failed) = memory.write_bytes(g, &bytes[i..i + n]) {
                                for f in failed {
                                    let from = i + (f.guest.start - g) as usize;
                                    let to = i + (f.guest.end - g) as usize;
                                    out.failures.push(HostFailure {
                                        kind: HostFailureKind::Store,
                                        error: f.error,
                                        lost: Some(f.guest),
                                        bytes: bytes[from..to].to_vec(),
                                    });
                                }
                            }
                        }
                    }
                    i += n;
                }
                match a.op {
                    // A load whose bytes could not be read has no values: never made-up zeros.
                    Op::Load if load_failed => res.values = Vec::new(),
                    Op::Load => res.values = values_of(&bytes, pa.format),
                    Op::Store => {
                        // C1: each store marks its chunks' slots.
                        // (Two parts of one chunk reached through one slot mark it once.)
                        let second = if c1 == c0 || s1 == s0 { None } else { s1 };
                        marked.extend([s0, second].into_iter().flatten());
                        res.values = a.values.clone();
                    }
                }
            }
        }
        out.accesses.push(res);
    }
    marked.sort_unstable();
    for slot in marked {
        match out.marks.last_mut() {
            Some((last, n)) if *last == slot => *n += 1,
            _ => out.marks.push((slot, 1)),
        }
    }
    Ok(out)
}
