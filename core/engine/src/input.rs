//! What an emulator hands the engine for one dispatch: slots, push words, the reasons the host
//! could not know its ranges, and the access stream an instrumented module recorded.
//!
//! Types here are plain data with serde derives (samples and captures store them as they are);
//! [`validate`](crate::engine::validate) turns bad input into a named [`InputError`], never a panic. Nothing
//! here plans or runs anything.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::addr::{ByteRange, bytes_hex, hex};
use crate::rules::DEVICE_TABLE_PUSH_WORD;

/// The limits a dispatch is planned and run against. A real device reports its own; samples state
/// theirs; the defaults are lavapipe's storage-buffer limits and the apertures of P1.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeviceLimits {
    /// Which device these limits describe, for reports ("cpu-reference", a Vulkan device name …).
    pub name: String,
    /// Vulkan's `minStorageBufferOffsetAlignment` (O7). Vulkan allows at most 256.
    #[serde(with = "hex")]
    pub min_storage_buffer_offset_alignment: u64,
    /// Vulkan's `maxStorageBufferRange`: a holder wider than this is refused (our addition to O5).
    #[serde(with = "hex")]
    pub max_storage_buffer_range: u64,
    /// The host's page size in bytes (4 KiB unless a capture states its own).
    #[serde(with = "hex")]
    pub host_page_bytes: u64,
    /// P1: the high 32 bits of a flat address that reach the workgroup's LDS.
    #[serde(with = "hex")]
    pub lds_aperture: u64,
    /// P1: the high 32 bits of a flat address that reach the lane's scratch memory.
    #[serde(with = "hex")]
    pub scratch_aperture: u64,
    /// T2: the most consecutive slots a lookup probes from its home slot.
    pub probe_bound: u32,
    /// Bytes of LDS a workgroup has.
    pub lds_bytes: u32,
    /// Bytes of scratch each lane has.
    pub scratch_bytes_per_lane: u32,
    /// T6: device-local bytes the table may take; above this it lies in host-visible memory.
    #[serde(with = "hex")]
    pub device_local_table_budget_bytes: u64,
}

clone_in_place!(DeviceLimits {
    name,
    min_storage_buffer_offset_alignment,
    max_storage_buffer_range,
    host_page_bytes,
    lds_aperture,
    scratch_aperture,
    probe_bound,
    lds_bytes,
    scratch_bytes_per_lane,
    device_local_table_budget_bytes
});

impl Default for DeviceLimits {
    fn default() -> Self {
        Self {
            name: "cpu-reference".to_owned(),
            min_storage_buffer_offset_alignment: 0x10,
            max_storage_buffer_range: 128 << 20,
            host_page_bytes: 0x1000,
            lds_aperture: 0x8000_0000,
            scratch_aperture: 0x7000_0000,
            probe_bound: 8,
            lds_bytes: 64 << 10,
            scratch_bytes_per_lane: 4 << 10,
            device_local_table_budget_bytes: 256 << 20,
        }
    }
}

/// The largest host page a device may state: 64 KiB, the largest page of the hosts an emulator runs
/// on. Guest contents are kept a host page at a time, so a page size is an allocation size.
pub const MAX_HOST_PAGE_BYTES: u64 = 0x1_0000;

/// The most bytes of LDS a workgroup may state: 1 MiB (AMD's workgroups have 64 KiB; the CPU
/// reference grows a workgroup's LDS to the furthest byte an access reaches, up to this size).
pub const MAX_LDS_BYTES: u32 = 1 << 20;

/// The most bytes of scratch a lane may state: 1 MiB (the CPU reference grows a lane's scratch to
/// the furthest byte an access reaches, up to this size).
pub const MAX_SCRATCH_BYTES_PER_LANE: u32 = 1 << 20;

/// The largest probe bound (T2) a device may state. A lookup never probes more slots than the
/// table has, and the table's probe histogram has one bucket per probe: a larger bound is no
/// bound at all.
pub const MAX_PROBE_BOUND: u32 = 4096;

/// A device description that no device can have: each message names the field and its value.
#[derive(Clone, Debug, PartialEq, Eq, Error, Serialize, Deserialize)]
#[allow(missing_docs, reason = "the messages document the fields")]
pub enum LimitsError {
    #[error(
        "minStorageBufferOffsetAlignment {value:#x} is not a power of two from 1 to 0x100 (Vulkan's limit, O7)"
    )]
    Alignment { value: u64 },
    #[error(
        "maxStorageBufferRange {value:#x} is 0 or above 0xffffffff (Vulkan states it as a 32-bit value)"
    )]
    StorageBufferRange { value: u64 },
    #[error(
        "host page size {value:#x} is not a power of two from 0x100 to {MAX_HOST_PAGE_BYTES:#x}"
    )]
    HostPage { value: u64 },
    #[error("probe bound {value} is not from 1 to {MAX_PROBE_BOUND} (T2)")]
    ProbeBound { value: u32 },
    #[error(
        "LDS of {value:#x} bytes per workgroup is above the {MAX_LDS_BYTES:#x} bytes the CPU reference keeps"
    )]
    Lds { value: u32 },
    #[error(
        "scratch of {value:#x} bytes per lane is above the {MAX_SCRATCH_BYTES_PER_LANE:#x} bytes the CPU reference keeps"
    )]
    Scratch { value: u32 },
    #[error(
        "the {name} aperture {value:#x} is not a 32-bit value (P1 compares an address's high 32 bits)"
    )]
    Aperture { name: &'static str, value: u64 },
}

impl DeviceLimits {
    /// Checks that a device could have these limits: every value a sample or capture states is
    /// checked here before anything is sized by it.
    pub fn check(&self) -> Result<(), LimitsError> {
        let a = self.min_storage_buffer_offset_alignment;
        if !a.is_power_of_two() || a > 0x100 {
            return Err(LimitsError::Alignment { value: a });
        }
        let r = self.max_storage_buffer_range;
        if r == 0 || r > u64::from(u32::MAX) {
            return Err(LimitsError::StorageBufferRange { value: r });
        }
        let p = self.host_page_bytes;
        if !p.is_power_of_two() || !(0x100..=MAX_HOST_PAGE_BYTES).contains(&p) {
            return Err(LimitsError::HostPage { value: p });
        }
        if !(1..=MAX_PROBE_BOUND).contains(&self.probe_bound) {
            return Err(LimitsError::ProbeBound {
                value: self.probe_bound,
            });
        }
        if self.lds_bytes > MAX_LDS_BYTES {
            return Err(LimitsError::Lds {
                value: self.lds_bytes,
            });
        }
        if self.scratch_bytes_per_lane > MAX_SCRATCH_BYTES_PER_LANE {
            return Err(LimitsError::Scratch {
                value: self.scratch_bytes_per_lane,
            });
        }
        for (name, value) in [
            ("LDS", self.lds_aperture),
            ("scratch", self.scratch_aperture),
        ] {
            if value > u64::from(u32::MAX) {
                return Err(LimitsError::Aperture { name, value });
            }
        }
        Ok(())
    }
}

/// Compute or graphics. Only a compute dispatch may run device-addressed (A1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DispatchKind {
    /// A compute dispatch.
    #[default]
    Compute,
    /// A draw's shader stages.
    Graphics,
}

/// Why the host could not know a dispatch's memory ranges before it ran (A1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Reason {
    /// A descriptor computed from what the host cannot know.
    D753,
    /// A branch on an execution mask the host cannot know.
    D758,
    /// A buffer only a host run of the dispatch's groups would find.
    D914,
    /// A buffer only a host run of the dispatch's waves would find.
    D950,
    /// A buffer placed from a sample, found only by a host run (D982 brings it under A1).
    D951,
}

impl Reason {
    /// One sentence saying what the reason means.
    pub fn sentence(self) -> &'static str {
        match self {
            Reason::D753 => "a descriptor is computed from what the host cannot know",
            Reason::D758 => "a branch depends on an execution mask the host cannot know",
            Reason::D914 => "a buffer only a host run of its groups would find",
            Reason::D950 => "a buffer only a host run of its waves would find",
            Reason::D951 => "a buffer placed from a sample only a host run would find",
        }
    }
}

/// Where a slot's base comes from (O10).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "from")]
pub enum BaseSource {
    /// The descriptor's base.
    #[default]
    Descriptor,
    /// D951: a base carried in the push block, 64 bits in words `word` (low) and `word + 1` (high).
    PushBlock {
        /// Index of the low word.
        word: u32,
    },
}

/// A buffer element format, for format buffer accesses (W1, W2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Format {
    /// One 8-bit unsigned integer.
    #[serde(rename = "R8_UINT")]
    R8Uint,
    /// One 16-bit unsigned integer.
    #[serde(rename = "R16_UINT")]
    R16Uint,
    /// One 32-bit unsigned integer.
    #[serde(rename = "R32_UINT")]
    R32Uint,
    /// One 32-bit float (values are its bits).
    #[serde(rename = "R32_FLOAT")]
    R32Float,
    /// Two 32-bit unsigned integers.
    #[serde(rename = "R32G32_UINT")]
    R32G32Uint,
    /// Four 32-bit unsigned integers.
    #[serde(rename = "R32G32B32A32_UINT")]
    R32G32B32A32Uint,
    /// Four 8-bit unsigned-normalised values, read as 32-bit float bits.
    #[serde(rename = "R8G8B8A8_UNORM")]
    R8G8B8A8Unorm,
}

impl Format {
    /// Bytes of one element.
    pub fn element_bytes(self) -> u32 {
        match self {
            Format::R8Uint => 1,
            Format::R16Uint => 2,
            Format::R32Uint | Format::R32Float | Format::R8G8B8A8Unorm => 4,
            Format::R32G32Uint => 8,
            Format::R32G32B32A32Uint => 16,
        }
    }

    /// Values (32-bit words) one element converts to.
    pub fn components(self) -> usize {
        match self {
            Format::R8Uint | Format::R16Uint | Format::R32Uint | Format::R32Float => 1,
            Format::R32G32Uint => 2,
            Format::R32G32B32A32Uint | Format::R8G8B8A8Unorm => 4,
        }
    }

    /// Converts one element's bytes to its values.
    pub fn decode(self, bytes: &[u8]) -> Vec<u32> {
        let word = |i: usize| {
            let mut w = [0u8; 4];
            for (k, b) in w.iter_mut().enumerate() {
                *b = bytes.get(i * 4 + k).copied().unwrap_or(0);
            }
            u32::from_le_bytes(w)
        };
        match self {
            Format::R8Uint => vec![u32::from(bytes.first().copied().unwrap_or(0))],
            Format::R16Uint => vec![word(0) & 0xffff],
            Format::R32Uint | Format::R32Float => vec![word(0)],
            Format::R32G32Uint => vec![word(0), word(1)],
            Format::R32G32B32A32Uint => vec![word(0), word(1), word(2), word(3)],
            Format::R8G8B8A8Unorm => (0..4)
                .map(|i| (f32::from(bytes.get(i).copied().unwrap_or(0)) / 255.0).to_bits())
                .collect(),
        }
    }

    /// Converts values to one element's bytes.
    pub fn encode(self, values: &[u32]) -> Vec<u8> {
        let v = |i: usize| values.get(i).copied().unwrap_or(0);
        match self {
            Format::R8Uint => vec![v(0) as u8],
            Format::R16Uint => (v(0) as u16).to_le_bytes().to_vec(),
            Format::R32Uint | Format::R32Float => v(0).to_le_bytes().to_vec(),
            Format::R32G32Uint => [v(0), v(1)].iter().flat_map(|w| w.to_le_bytes()).collect(),
            Format::R32G32B32A32Uint => (0..4).flat_map(|i| v(i).to_le_bytes()).collect(),
            Format::R8G8B8A8Unorm => (0..4)
                .map(|i| {
                    let f = f32::from_bits(v(i));
                    let f = if f.is_nan() { 0.0 } else { f.clamp(0.0, 1.0) };
                    (f * 255.0).round() as u8
                })
                .collect(),
        }
    }
}

/// Slot number → position in a dispatch's slots, for the lookups every access makes (validation,
/// routing). When slot numbers rise in position order, as they mostly do, the slots are searched
/// as they are; otherwise pairs sorted once per dispatch are. Neither scans the slots per access.
#[derive(Clone, Debug)]
pub struct SlotIndex {
    /// `(slot number, position)` sorted, when slot numbers do not rise strictly; else empty.
    sorted: Vec<(u32, u32)>,
    /// Whether slot numbers rise strictly in position order.
    rising: bool,
    /// The position of the first slot whose number an earlier slot has, if any.
    first_repeat: Option<usize>,
}

impl SlotIndex {
    /// The index of `slots`.
    pub fn new(slots: &[Slot]) -> Self {
        let rising = slots.windows(2).all(|w| w[0].slot < w[1].slot);
        if rising {
            return Self {
                sorted: Vec::new(),
                rising,
                first_repeat: None,
            };
        }
        let mut sorted: Vec<(u32, u32)> = (0..)
            .zip(slots)
            .map(|(i, s): (u32, &Slot)| (s.slot, i))
            .collect();
        sorted.sort_unstable();
        // In a run of one number, the second position is where a pass in position order
        // first meets the number again.
        let first_repeat = sorted
            .windows(2)
            .filter(|w| w[0].0 == w[1].0)
            .map(|w| w[1].1 as usize)
            .min();
        Self {
            sorted,
            rising,
            first_repeat,
        }
    }

    /// The position of the first slot numbered `slot` in `slots` (the slots it was made of).
    pub fn position(&self, slots: &[Slot], slot: u32) -> Option<usize> {
        if self.rising {
            slots.binary_search_by_key(&slot, |s| s.slot).ok()
        } else {
            let k = self.sorted.partition_point(|&(s, _)| s < slot);
            self.sorted
                .get(k)
                .filter(|&&(s, _)| s == slot)
                .map(|&(_, i)| i as usize)
        }
    }

    /// The position of the first slot whose number an earlier slot already has.
    pub fn first_repeat(&self) -> Option<usize> {
        self.first_repeat
    }
}

/// A descriptor's swizzled addressing (D967 carries it out for unresolved descriptors too).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Swizzle {
    /// Bytes of one swizzled element (2, 4, 8 or 16).
    pub element_bytes: u32,
    /// Records interleaved per swizzle block (8, 16, 32 or 64).
    pub index_stride: u32,
}

/// One buffer binding a dispatch makes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Slot {
    /// The slot index the program binds.
    pub slot: u32,
    /// The descriptor's base address. For a [`BaseSource::PushBlock`] slot the binding starts at
    /// the push block's base instead (O10).
    #[serde(with = "hex")]
    pub base: u64,
    /// Bytes the descriptor covers.
    #[serde(with = "hex")]
    pub size_bytes: u64,
    /// Whether the dispatch writes through the slot.
    #[serde(default)]
    pub written: bool,
    /// Where the base its accesses are read against comes from.
    #[serde(default)]
    pub base_source: BaseSource,
    /// D937: this slot binds exactly the range of that slot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias_of: Option<u32>,
    /// The element format the descriptor names, for format accesses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<Format>,
    /// Whether the host knew the base before the dispatch.
    #[serde(default = "yes")]
    pub resolved: bool,
    /// Record stride for indexed accesses; 0 means the format's element size.
    #[serde(default)]
    pub stride_bytes: u32,
    /// Swizzled addressing, if the descriptor enables it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swizzle: Option<Swizzle>,
    /// Whether the lane id is added to the index (lane-indexed addressing).
    #[serde(default)]
    pub index_from_lane: bool,
}

fn yes() -> bool {
    true
}

impl Slot {
    /// A resolved, descriptor-based slot: the common case, for tests and generators.
    pub fn new(slot: u32, base: u64, size_bytes: u64, written: bool) -> Self {
        Self {
            slot,
            base,
            size_bytes,
            written,
            base_source: BaseSource::Descriptor,
            alias_of: None,
            format: None,
            resolved: true,
            stride_bytes: 0,
            swizzle: None,
            index_from_lane: false,
        }
    }

    /// The base its accesses are read against (O10): the push block's for a D951 slot.
    pub fn effective_base(&self, push: &[u32]) -> Option<u64> {
        match self.base_source {
            BaseSource::Descriptor => Some(self.base),
            BaseSource::PushBlock { word } => {
                let lo = *push.get(word as usize)?;
                let hi = *push.get(word as usize + 1)?;
                Some(u64::from(lo) | (u64::from(hi) << 32))
            }
        }
    }

    /// The byte offset in the slot that `(index, offset)` addresses for lane `lane`: plain
    /// `index * stride + offset`, or AMD's swizzled pattern when the descriptor enables it.
    /// `None` when the arithmetic passes 2^64 (no slot is that large, so validation refuses it
    /// as [`InputError::AccessOutsideSlot`]); every step is checked, since each operand is input.
    pub fn addressed_offset(&self, index: Option<u32>, offset: u64, lane: u32) -> Option<u64> {
        let Some(index) = index else {
            return Some(offset);
        };
        let index = u64::from(index)
            + if self.index_from_lane {
                u64::from(lane)
            } else {
                0
            };
        let stride = u64::from(if self.stride_bytes == 0 {
            self.format.map_or(4, Format::element_bytes)
        } else {
            self.stride_bytes
        });
        match self.swizzle {
            None => index.checked_mul(stride)?.checked_add(offset),
            Some(Swizzle {
                element_bytes,
                index_stride,
            }) => {
                let elem = u64::from(element_bytes.max(1));
                let istride = u64::from(index_stride.max(1));
                let blocks = (index / istride)
                    .checked_mul(stride)?
                    .checked_mul(istride)?;
                let elements = (offset / elem).checked_mul(elem)?.checked_mul(istride)?;
                blocks
                    .checked_add(elements)?
                    .checked_add((index % istride) * elem)?
                    .checked_add(offset % elem)
            }
        }
    }
}

/// Each slot's base (O10, [`Slot::effective_base`]), by position; a D951 slot whose push words are
/// missing falls back to its descriptor's base. Validation finds the same bases and refuses the
/// missing words instead; this is for callers that plan slots they checked themselves.
pub fn slot_bases(slots: &[Slot], push: &[u32]) -> Vec<u64> {
    slots
        .iter()
        .map(|s| s.effective_base(push).unwrap_or(s.base))
        .collect()
}

/// What kind of instruction made an access.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AccessKind {
    /// `global_load`/`global_store`: a guest address.
    Global,
    /// `flat_load`/`flat_store`: an address routed by its high half (P1).
    Flat,
    /// `s_load`/`s_buffer_load`: through a slot or from an address.
    Scalar,
    /// `buffer_load_dword…`: an untyped access through a slot.
    UntypedBuffer,
    /// `buffer_load_format…`: an access through a slot that converts by a format.
    FormatBuffer,
    /// `image_bvh_intersect_ray`: reads a node by address (W3).
    RayIntersection,
    /// `ds_read`/`ds_write`: the workgroup's LDS.
    Lds,
    /// `scratch_load`/`scratch_store`: the lane's private memory.
    Scratch,
}

/// Load or store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Op {
    /// Reads `size_bytes`.
    Load,
    /// Writes `values`.
    Store,
}

/// One access of the recorded stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Access {
    /// The workgroup the lane belongs to (its LDS).
    #[serde(default)]
    pub workgroup: u32,
    /// The wave the lane belongs to.
    #[serde(default)]
    pub wave: u32,
    /// The lane within its wave.
    #[serde(default)]
    pub lane: u32,
    /// The guest program counter of the instruction.
    #[serde(with = "hex", default)]
    pub pc: u64,
    /// What kind of instruction made it.
    pub kind: AccessKind,
    /// Load or store.
    pub op: Op,
    /// The address, for global, flat, ray and address-based scalar accesses.
    #[serde(with = "hex::option", default, skip_serializing_if = "Option::is_none")]
    pub address: Option<u64>,
    /// The slot, for buffer and slot-based scalar accesses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<u32>,
    /// The byte offset: in the slot, in LDS, or in the lane's scratch.
    #[serde(with = "hex::option", default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// The record index, for indexed buffer accesses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    /// Bytes accessed.
    pub size_bytes: u32,
    /// For a store, the values written: one word per 4 bytes (the low bytes for a smaller store),
    /// or one word per component for a format store.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<u32>,
}

impl Access {
    /// An access of `kind` by lane 0 of wave 0 at pc 0, with no operand and no stored values: the
    /// start of one, for tests and generators, which set what they need.
    pub fn new(kind: AccessKind, op: Op, size_bytes: u32) -> Self {
        Self {
            workgroup: 0,
            wave: 0,
            lane: 0,
            pc: 0,
            kind,
            op,
            address: None,
            slot: None,
            offset: None,
            index: None,
            size_bytes,
            values: Vec::new(),
        }
    }
}

/// Everything the engine needs about one dispatch.
#[derive(Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DispatchInput {
    /// Compute or graphics.
    #[serde(default)]
    pub kind: DispatchKind,
    /// The guest address of the program.
    #[serde(with = "hex")]
    pub program: u64,
    /// A label for people ("run 305, program 0x400003e19200"), not used by the rules.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub label: String,
    /// The buffer bindings.
    #[serde(default)]
    pub slots: Vec<Slot>,
    /// The push block's words.
    #[serde(default)]
    pub push: Vec<u32>,
    /// Why the host could not know its ranges; empty when it could (A1).
    #[serde(default)]
    pub reasons: Vec<Reason>,
    /// D961: the pages of the dispatch's global buffer of pages, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_buffer: Option<PageBuffer>,
    /// The recorded access stream, in recorded order.
    #[serde(default)]
    pub accesses: Vec<Access>,
}

clone_in_place!(DispatchInput {
    kind,
    program,
    label,
    slots,
    push,
    reasons,
    page_buffer,
    accesses
});

impl DispatchInput {
    /// Copies everything but the access list into `out` (whose list is emptied), reusing `out`'s
    /// allocations: what a live tap's ring slot keeps of the input ([`Clone::clone_from`] is the
    /// same with the list).
    pub fn clone_shell_into(&self, out: &mut Self) {
        let Self {
            kind,
            program,
            label,
            slots,
            push,
            reasons,
            page_buffer,
            accesses: _,
        } = self;
        out.kind = *kind;
        out.program = *program;
        out.label.clone_from(label);
        out.slots.clone_from(slots);
        out.push.clone_from(push);
        out.reasons.clone_from(reasons);
        out.page_buffer.clone_from(page_buffer);
        out.accesses.clear();
    }
}

/// D961: the dispatch's global buffer of pages.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageBuffer {
    /// Guest addresses of the pages it holds (each page is `host_page_bytes` long).
    #[serde(with = "hex::vec")]
    pub pages: Vec<u64>,
    /// Whether the dispatch writes through it.
    #[serde(default)]
    pub written: bool,
}

/// Bad input: a dispatch the engine cannot even plan. Each message names the values.
#[derive(Clone, Debug, PartialEq, Eq, Error, Serialize, Deserialize)]
#[allow(missing_docs, reason = "the messages document the fields")]
pub enum InputError {
    #[error("slot {slot} appears twice")]
    DuplicateSlot { slot: u32 },
    #[error("slot {slot} has size 0")]
    ZeroSizeSlot { slot: u32 },
    #[error(
        "slot {slot}: base {base:#x} + size {size_bytes:#x} passes the end of the address space"
    )]
    SlotOverflow {
        slot: u32,
        base: u64,
        size_bytes: u64,
    },
    #[error("slot {slot} takes its base from push words {word} and {} but the push block has {len} words", u64::from(*word) + 1)]
    PushWordMissing { slot: u32, word: u32, len: usize },
    #[error("slot {slot} takes its base from push word {word}, which T3 reserves for the chunk table's address (words {DEVICE_TABLE_PUSH_WORD} and {})", DEVICE_TABLE_PUSH_WORD + 1)]
    PushWordTaken { slot: u32, word: u32 },
    #[error("the push block has {len} words; a device-addressed dispatch keeps words {DEVICE_TABLE_PUSH_WORD} and {} for the table (T3)", DEVICE_TABLE_PUSH_WORD + 1)]
    PushBlockTooLong { len: usize },
    #[error("slot {slot} is an exact copy of slot {of}, which the dispatch does not bind")]
    AliasUnknown { slot: u32, of: u32 },
    #[error(
        "slot {slot} claims to be an exact copy of slot {of} (D937) but binds {range} where slot {of} binds {of_range}"
    )]
    AliasMismatch {
        slot: u32,
        of: u32,
        range: ByteRange,
        of_range: ByteRange,
    },
    #[error("slot {slot}'s exact-copy chain (D937) loops back on itself")]
    AliasCycle { slot: u32 },
    #[error(
        "slot {slot} is unresolved, but the dispatch names no reason the host could not know it (D753, D758, D914, D950, D951)"
    )]
    UnresolvedWithoutReason { slot: u32 },
    #[error("access {access}: a {kind:?} access needs {what}")]
    MissingOperand {
        access: usize,
        kind: AccessKind,
        what: &'static str,
    },
    #[error("access {access} names slot {slot}, which the dispatch does not bind")]
    UnknownSlot { access: usize, slot: u32 },
    #[error("access {access}: bytes {offset:#x}..{end:#x} of slot {slot} lie outside its {size_bytes:#x} bytes", end = u128::from(*offset) + u128::from(*size))]
    AccessOutsideSlot {
        access: usize,
        slot: u32,
        offset: u64,
        size: u32,
        size_bytes: u64,
    },
    #[error(
        "access {access}: index {index} and offset {offset:#x} address a byte past 2^64 in slot {slot}, which has {size_bytes:#x} bytes"
    )]
    OffsetOverflow {
        access: usize,
        slot: u32,
        index: u32,
        offset: u64,
        size_bytes: u64,
    },
    #[error(
        "access {access}: a store through slot {slot}, which the dispatch declares read-only (written: false); O1 joins slots by that flag, so the input contradicts itself"
    )]
    StoreThroughReadOnlySlot { access: usize, slot: u32 },
    #[error("access {access}: a ray intersection only reads its node (W3); it cannot be a store")]
    RayStore { access: usize },
    #[error(
        "access {access}: {size} bytes at {address:#x} pass the end of the 64-bit address space"
    )]
    AddressWraps {
        access: usize,
        address: u64,
        size: u32,
    },
    #[error(
        "page {page:#x} of the page buffer (D961) is not aligned to the {page_bytes:#x}-byte host page"
    )]
    PageBufferUnaligned { page: u64, page_bytes: u64 },
    #[error("access {access}: size {size} bytes; an access is 1 to 64 bytes")]
    BadSize { access: usize, size: u32 },
    #[error("access {access}: a store of {size} bytes carries {got} values, not {expected}")]
    StoreValueCount {
        access: usize,
        size: u32,
        expected: usize,
        got: usize,
    },
    #[error("access {access}: a load carries {got} values; only stores carry values")]
    LoadWithValues { access: usize, got: usize },
    #[error(
        "access {access}: a format access through slot {slot}, whose descriptor names no format"
    )]
    FormatMissing { access: usize, slot: u32 },
    #[error(
        "access {access}: {size} bytes through format {format:?}, whose element is {element} bytes"
    )]
    FormatSize {
        access: usize,
        size: u32,
        format: Format,
        element: u32,
    },
    #[error(
        "access {access}: a {kind:?} access at {address:#x} goes by device address, but the dispatch names no reason the host could not know its ranges (A1); the host would have bound it"
    )]
    NeedsDeviceAddress {
        access: usize,
        kind: AccessKind,
        address: u64,
    },
    #[error(
        "access {access}: {kind:?} offset {offset:#x} + {size} bytes passes the {limit:#x} bytes the device gives it"
    )]
    ApertureOutOfRange {
        access: usize,
        kind: AccessKind,
        offset: u64,
        size: u32,
        limit: u64,
    },
}

/// Words a store of `size_bytes` carries.
pub fn words_for(size_bytes: u32) -> usize {
    (size_bytes as usize).div_ceil(4)
}

// --- Memory events: what the emulator does to guest memory between dispatches. ---

/// Whether the host page behind a guest page is the guest's alone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backing {
    /// Private to this guest page.
    #[default]
    Private,
    /// Aliased with another mapping (shared).
    Shared,
}

/// The host protection of a host page.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum HostProtection {
    /// No access.
    #[default]
    None,
    /// Read only.
    Read,
    /// Read and write.
    ReadWrite,
}

/// Something that happens to guest memory between dispatches.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Event {
    /// Reserve a range; every page starts with the states given.
    Reserve {
        /// Page-aligned range to reserve.
        range: ByteRange,
        /// Guest may read.
        #[serde(default)]
        readable: bool,
        /// Guest may write.
        #[serde(default)]
        writable: bool,
        /// Host pages committed.
        #[serde(default)]
        committed: bool,
        /// Private or shared.
        #[serde(default)]
        backing: Backing,
        /// Host mode: the host address where the emulator keeps the reservation's first byte
        /// (page-aligned). Simulated memory keeps it for the record only.
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            with = "crate::addr::hex::option"
        )]
        host_base: Option<u64>,
    },
    /// Release a reservation (M4: its mappings are dropped first; M5: after in-flight dispatches).
    Release {
        /// Start of the reservation.
        #[serde(with = "hex")]
        base: u64,
    },
    /// Commit host pages (M5 revisits left-out pieces over them).
    Commit {
        /// Pages to commit.
        range: ByteRange,
    },
    /// Decommit host pages: their contents are lost and any mapping over them is dropped first.
    Decommit {
        /// Pages to decommit.
        range: ByteRange,
    },
    /// The guest changes its view of pages; the host protection follows it.
    Protect {
        /// Pages to protect.
        range: ByteRange,
        /// Guest may read.
        readable: bool,
        /// Guest may write.
        writable: bool,
    },
    /// The host changes a page's protection without the guest (M5 revisits).
    HostProtect {
        /// Pages to reprotect.
        range: ByteRange,
        /// The new host protection.
        protection: HostProtection,
    },
    /// Host pages become shared (aliased) or private again.
    SetBacking {
        /// Pages.
        range: ByteRange,
        /// Private or shared.
        backing: Backing,
    },
    /// D824: the write-watch places read-only guards and clears its notes.
    Guard {
        /// Pages to guard.
        range: ByteRange,
    },
    /// D824: the write-watch lifted its guards over these pages (a CPU write faulted and the
    /// handler made the page writable again, or the emulator stopped watching it); its notes stay.
    /// Without it, the engine keeps a lifted guard as placed and leaves the page out (M3) until
    /// M2 releases it again.
    Unguard {
        /// Pages no longer guarded.
        range: ByteRange,
    },
    /// A CPU write into guest memory: noted by the write-watch, distrusts targets over it (D720).
    Write {
        /// First byte written.
        #[serde(with = "hex")]
        address: u64,
        /// The bytes, as hex text.
        #[serde(with = "bytes_hex")]
        bytes: Vec<u8>,
    },
    /// A CPU write whose bytes the emulator did not give (host mode: they lie in its own pages
    /// already): the write-watch notes it and targets over it lose trust, as for
    /// [`Event::Write`], but what was written is not known here, and what is made from events
    /// (write histories, captures, the debugger's memory view) says the bytes are unknown rather
    /// than inventing them.
    Wrote {
        /// The guest bytes written.
        range: ByteRange,
    },
    /// A copy the command processor deferred; C3 writes it into guest memory before a
    /// device-addressed dispatch.
    DeferCopy {
        /// Destination.
        #[serde(with = "hex")]
        address: u64,
        /// The bytes, as hex text.
        #[serde(with = "bytes_hex")]
        bytes: Vec<u8>,
    },
    /// A protected target is made from guest pages (D720).
    AddTarget {
        /// Its id.
        id: u32,
        /// What it is.
        #[serde(default)]
        name: String,
        /// Its bytes.
        range: ByteRange,
    },
    /// A protected target is dropped.
    RemoveTarget {
        /// Its id.
        id: u32,
    },
    /// The emulator waited on every fence: no dispatch is in flight any more.
    Retire,
}

impl Event {
    /// The event's name as samples and captures write it (`"commit"`, `"defer-copy"`).
    pub fn name(&self) -> &'static str {
        match self {
            Event::Reserve { .. } => "reserve",
            Event::Release { .. } => "release",
            Event::Commit { .. } => "commit",
            Event::Decommit { .. } => "decommit",
            Event::Protect { .. } => "protect",
            Event::HostProtect { .. } => "host-protect",
            Event::SetBacking { .. } => "set-backing",
            Event::Guard { .. } => "guard",
            Event::Unguard { .. } => "unguard",
            Event::Write { .. } => "write",
            Event::Wrote { .. } => "wrote",
            Event::DeferCopy { .. } => "defer-copy",
            Event::AddTarget { .. } => "add-target",
            Event::RemoveTarget { .. } => "remove-target",
            Event::Retire => "retire",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Slot, SlotIndex};

    /// The index finds what a scan finds, and its first repeat is where a pass in position order
    /// first meets a number again: rising, falling, shuffled and repeated numbers.
    #[test]
    fn slot_index_agrees_with_a_scan() {
        let mut below = crate::test_rng(0x5107_1de5);
        for round in 0..2000 {
            let n = below(40) as u32;
            let numbers: Vec<u32> = (0..n)
                .map(|i| match round % 4 {
                    0 => i * 2,
                    1 => n - i,
                    2 => below(u64::from(n) * 4) as u32,
                    _ => below(u64::from(n / 2 + 1)) as u32,
                })
                .collect();
            let slots: Vec<Slot> = numbers.iter().map(|&s| Slot::new(s, 0, 1, false)).collect();
            let index = SlotIndex::new(&slots);
            for probe in 0..n * 4 + 2 {
                assert_eq!(
                    index.position(&slots, probe),
                    slots.iter().position(|s| s.slot == probe),
                    "{numbers:?} {probe}"
                );
            }
            let mut seen = std::collections::HashSet::new();
            let first_repeat = numbers.iter().position(|&s| !seen.insert(s));
            assert_eq!(index.first_repeat(), first_repeat, "{numbers:?}");
        }
    }
}
