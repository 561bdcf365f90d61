//! A job encoded for the replay shader: each access as an 8-word record ([`record`]), the values of
//! its stores, and the run of dispatches ([`Segment`]s) that bind at most as many slots as a dispatch
//! has descriptors.
//!
//! O6 is decided here: each slot binds its holder at its member offset, exact from an access with
//! no index, else the lowest offset its accesses reach aligned down to
//! minStorageBufferOffsetAlignment. An access the replay could not carry out safely (outside its
//! holder, its LDS or scratch, or the address space) is an error naming it. Nothing here calls Vulkan.

use std::collections::HashMap;

use crate::VkError;
use crate::spirv::record;
use dispatchscope_core::exec::{Job, Planned};
use dispatchscope_core::input::{Format, Op, words_for};

/// A job encoded for the replay shader.
pub(crate) struct Encoded {
    /// Each slot's binding offset, in the order first used.
    pub(crate) slot_offsets: Vec<(Option<u32>, u64)>,
    pub(crate) records: Vec<u32>,
    pub(crate) values: Vec<u32>,
    pub(crate) segments: Vec<Segment>,
    pub(crate) lds_regions: usize,
    pub(crate) scratch_regions: usize,
}

/// Consecutive accesses that one dispatch replays, with the slot bindings they use.
pub(crate) struct Segment {
    pub(crate) first: u32,
    pub(crate) count: u32,
    /// Per descriptor index: (holder, member offset in bytes).
    pub(crate) bindings: Vec<(usize, u64)>,
}

/// A slot and the holder it binds.
type SlotKey = (Option<u32>, usize);

/// O6: the member offset each slot binds its holder at.
struct MemberOffsets {
    /// minStorageBufferOffsetAlignment (at least 4).
    align: u64,
    /// The member offset an access with no index gives: its offset in the holder less its offset
    /// in the slot.
    exact: HashMap<SlotKey, u64>,
    /// The lowest offset in the holder the slot's accesses reach.
    lowest: HashMap<SlotKey, u64>,
}

impl MemberOffsets {
    fn of(job: &Job<'_>, align: u64) -> Self {
        let mut exact: HashMap<SlotKey, u64> = HashMap::new();
        let mut lowest: HashMap<SlotKey, u64> = HashMap::new();
        for pa in &job.accesses {
            if let Planned::Bound { holder, offset } = pa.route {
                let key = (pa.access.slot, holder);
                let low = lowest.entry(key).or_insert(offset);
                *low = (*low).min(offset);
                if pa.access.index.is_none()
                    && let Some(m) = offset.checked_sub(pa.access.offset.unwrap_or(0))
                {
                    let e = exact.entry(key).or_insert(m);
                    *e = (*e).min(m);
                }
            }
        }
        Self {
            align,
            exact,
            lowest,
        }
    }

    /// The exact offset where it is aligned and reaches every access, else the lowest aligned down.
    fn offset(&self, key: SlotKey) -> u64 {
        let low = self.lowest.get(&key).copied().unwrap_or(0);
        match self.exact.get(&key) {
            Some(&m) if m % self.align == 0 && m <= low => m,
            _ => low / self.align * self.align,
        }
    }
}

/// P1: bytes `offset..offset + size` of a region of `region_bytes` (`what`, one per `owner`), or why not.
fn within(
    offset: u64,
    size: u64,
    region_bytes: u32,
    what: &str,
    owner: &str,
) -> Result<(), String> {
    if offset + size > u64::from(region_bytes) {
        return Err(format!(
            "{what} bytes {offset:#x}..{:#x} pass the {region_bytes:#x} bytes {owner} has",
            offset + size
        ));
    }
    Ok(())
}

/// Encodes `job`, binding its holders at offsets aligned to `offset_align`
/// (minStorageBufferOffsetAlignment) and at most `slots` of them per dispatch.
pub(crate) fn encode(job: &Job<'_>, offset_align: u64, slots: usize) -> Result<Encoded, VkError> {
    let align = offset_align.max(4);
    let padded = |h: usize| {
        job.holders
            .get(h)
            .map_or(0, |r| r.size_bytes().div_ceil(4) * 4)
    };
    let members = MemberOffsets::of(job, align);
    let mut records = Vec::with_capacity(job.accesses.len() * record::WORDS);
    let mut values = Vec::new();
    let mut segments: Vec<Segment> = Vec::new();
    let mut cur = Segment {
        first: 0,
        count: 0,
        bindings: Vec::new(),
    };
    let mut cur_keys: Vec<SlotKey> = Vec::new();
    let mut lds: HashMap<u32, u32> = HashMap::new();
    let mut scratch: HashMap<(u32, u32, u32), u32> = HashMap::new();
    let mut slot_offsets: Vec<(Option<u32>, u64)> = Vec::new();
    for (i, pa) in job.accesses.iter().enumerate() {
        let a = pa.access;
        let bad = |why: String| VkError::BadAccess { access: i, why };
        if a.size_bytes == 0 || a.size_bytes > 64 {
            return Err(bad(format!(
                "{} bytes; an access is 1 to 64 bytes",
                a.size_bytes
            )));
        }
        let size = u64::from(a.size_bytes);
        let (route, addr, bind) = match pa.route {
            Planned::Bound { holder, offset } => {
                let key = (a.slot, holder);
                let m = members.offset(key);
                if !slot_offsets.contains(&(a.slot, m)) {
                    slot_offsets.push((a.slot, m));
                }
                if offset + size > padded(holder) {
                    return Err(bad(format!(
                        "bytes {offset:#x}..{:#x} of holder {holder} pass its {:#x} bytes",
                        offset + size,
                        padded(holder)
                    )));
                }
                let idx = match cur_keys.iter().position(|&x| x == key) {
                    Some(p) => p,
                    None => {
                        if cur_keys.len() == slots {
                            let next = Segment {
                                first: i as u32,
                                count: 0,
                                bindings: Vec::new(),
                            };
                            segments.push(std::mem::replace(&mut cur, next));
                            cur_keys.clear();
                        }
                        cur_keys.push(key);
                        cur.bindings.push((holder, m));
                        cur_keys.len() - 1
                    }
                };
                (record::BOUND, offset - m, idx as u32)
            }
            Planned::Device { address } => {
                if address.checked_add(size).is_none() {
                    return Err(bad(format!(
                        "{size} bytes at {address:#x} pass the end of the address space"
                    )));
                }
                (record::DEVICE, address, 0)
            }
            Planned::Lds { offset } => {
                within(offset, size, job.lds_bytes, "LDS", "a workgroup").map_err(bad)?;
                let n = lds.len() as u32;
                (record::LDS, offset, *lds.entry(a.workgroup).or_insert(n))
            }
            Planned::Scratch { offset } => {
                within(
                    offset,
                    size,
                    job.scratch_bytes_per_lane,
                    "scratch",
                    "a lane",
                )
                .map_err(bad)?;
                let n = scratch.len() as u32;
                let r = *scratch.entry((a.workgroup, a.wave, a.lane)).or_insert(n);
                (record::SCRATCH, offset, r)
            }
        };
        let unorm = pa.format == Some(Format::R8G8B8A8Unorm);
        let store = a.op == Op::Store;
        let vbase = values.len() as u32;
        if store {
            let nv = if unorm { 4 } else { words_for(a.size_bytes) };
            values.extend((0..nv).map(|j| a.values.get(j).copied().unwrap_or(0)));
        }
        let w0 =
            route | if store { record::STORE } else { 0 } | if unorm { record::UNORM } else { 0 };
        records.extend_from_slice(&[
            w0,
            a.size_bytes,
            addr as u32,
            (addr >> 32) as u32,
            bind,
            vbase,
            0,
            0,
        ]);
        cur.count += 1;
    }
    segments.push(cur);
    Ok(Encoded {
        slot_offsets,
        records,
        values,
        segments,
        lds_regions: lds.len(),
        scratch_regions: scratch.len(),
    })
}
