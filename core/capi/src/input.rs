//! The struct forms C hands in: device limits and the hot path's dispatch (slots, push words,
//! reasons; no access stream, which only the JSON form carries), checked and turned into the
//! engine's types.

use std::ffi::c_char;

use dispatchscope_core::input::{
    BaseSource, DeviceLimits, DispatchInput, DispatchKind, Format, Reason, Slot,
};
use dispatchscope_core::report::Mode;

use crate::ffi::{
    Failure, abi_mismatch, check_flags, check_size, ds_status, null, slice_arg, str_arg,
};

/// A device's limits, as [`DeviceLimits`] has them. [`crate::ds_limits_default`] fills one with
/// the CPU reference's defaults (its `size` included), so a caller sets only what its device says.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct ds_limits {
    /// `sizeof(ds_limits)`.
    pub size: u32,
    /// The device's name for reports (NUL-terminated UTF-8), or null for "emulator".
    pub name: *const c_char,
    /// Vulkan's `minStorageBufferOffsetAlignment` (O7): a power of two, at most 256.
    pub min_storage_buffer_offset_alignment: u64,
    /// Vulkan's `maxStorageBufferRange`.
    pub max_storage_buffer_range: u64,
    /// The host's page size in bytes.
    pub host_page_bytes: u64,
    /// P1: the high 32 bits of a flat address that reach LDS.
    pub lds_aperture: u64,
    /// P1: the high 32 bits of a flat address that reach scratch.
    pub scratch_aperture: u64,
    /// T2: the most consecutive slots a lookup probes.
    pub probe_bound: u32,
    /// Bytes of LDS a workgroup has.
    pub lds_bytes: u32,
    /// Bytes of scratch each lane has.
    pub scratch_bytes_per_lane: u32,
    /// T6: device-local bytes the chunk table may take.
    pub device_local_table_budget_bytes: u64,
}

impl ds_limits {
    pub(crate) fn from_limits(l: &DeviceLimits) -> Self {
        Self {
            size: size_of::<Self>() as u32,
            name: std::ptr::null(),
            min_storage_buffer_offset_alignment: l.min_storage_buffer_offset_alignment,
            max_storage_buffer_range: l.max_storage_buffer_range,
            host_page_bytes: l.host_page_bytes,
            lds_aperture: l.lds_aperture,
            scratch_aperture: l.scratch_aperture,
            probe_bound: l.probe_bound,
            lds_bytes: l.lds_bytes,
            scratch_bytes_per_lane: l.scratch_bytes_per_lane,
            device_local_table_budget_bytes: l.device_local_table_budget_bytes,
        }
    }

    /// The limits at `limits`, its `size` checked first.
    ///
    /// # Safety
    /// `limits` must be null (an error) or point at a `ds_limits` (of any version: only its
    /// `size` is read before it is checked) whose `name`, when not null, is a NUL-terminated
    /// string.
    pub(crate) unsafe fn read(limits: *const ds_limits) -> Result<DeviceLimits, Failure> {
        if limits.is_null() {
            return Err(null("limits"));
        }
        // SAFETY: non-null; every version of the struct starts with its size.
        let size = unsafe { (*limits).size };
        check_size::<ds_limits>("ds_limits", "ds_limits", size)?;
        // SAFETY: the size matches; the caller promises the name.
        unsafe { (*limits).to_limits() }
    }

    /// # Safety
    /// `self.name`, when not null, must be a NUL-terminated string.
    unsafe fn to_limits(self) -> Result<DeviceLimits, Failure> {
        let name = if self.name.is_null() {
            "emulator".to_owned()
        } else {
            // SAFETY: the caller promises a NUL-terminated `name` for the call.
            unsafe { str_arg(self.name, "limits.name") }?.to_owned()
        };
        Ok(DeviceLimits {
            name,
            min_storage_buffer_offset_alignment: self.min_storage_buffer_offset_alignment,
            max_storage_buffer_range: self.max_storage_buffer_range,
            host_page_bytes: self.host_page_bytes,
            lds_aperture: self.lds_aperture,
            scratch_aperture: self.scratch_aperture,
            probe_bound: self.probe_bound,
            lds_bytes: self.lds_bytes,
            scratch_bytes_per_lane: self.scratch_bytes_per_lane,
            device_local_table_budget_bytes: self.device_local_table_budget_bytes,
        })
    }
}

/// `ds_slot::flags`: the dispatch writes through the slot.
pub const DS_SLOT_WRITTEN: u32 = 1 << 0;
/// `ds_slot::flags`: the host knew the base before the dispatch.
pub const DS_SLOT_RESOLVED: u32 = 1 << 1;
/// `ds_slot::flags`: the lane id is added to the index (lane-indexed addressing).
pub const DS_SLOT_INDEX_FROM_LANE: u32 = 1 << 2;
/// `ds_slot::flags` (host path): the emulator binds this holder over the guest's own pages
/// (imported): its stores land in place, nothing of it is written back at complete, and a later
/// dispatch of the same submission reads them on the device after a barrier
/// ([`crate::ds_engine_prepare`]).
pub const DS_SLOT_IN_PLACE: u32 = 1 << 3;
const KNOWN_SLOT_FLAGS: u32 =
    DS_SLOT_WRITTEN | DS_SLOT_RESOLVED | DS_SLOT_INDEX_FROM_LANE | DS_SLOT_IN_PLACE;

/// `ds_slot::alias_of` when the slot is no D937 copy.
pub const DS_NO_ALIAS: u32 = u32::MAX;
/// `ds_slot::format` when the descriptor names no element format.
pub const DS_FORMAT_NONE: u32 = 0;
/// `ds_slot::base_source`: the descriptor's base.
pub const DS_BASE_DESCRIPTOR: u32 = 0;
/// `ds_slot::base_source`: D951, a 64-bit base in push words `base_word` and `base_word + 1` (O10).
pub const DS_BASE_PUSH_BLOCK: u32 = 1;

/// The element formats `ds_slot::format` names, in this order from 1.
const FORMATS: [Format; 7] = [
    Format::R8Uint,
    Format::R16Uint,
    Format::R32Uint,
    Format::R32Float,
    Format::R32G32Uint,
    Format::R32G32B32A32Uint,
    Format::R8G8B8A8Unorm,
];

/// `ds_dispatch::reasons` bits, in this order from bit 0: D753, D758, D914, D950, D951 (A1).
const REASONS: [Reason; 5] = [
    Reason::D753,
    Reason::D758,
    Reason::D914,
    Reason::D950,
    Reason::D951,
];

/// One buffer binding of a dispatch, as [`Slot`] has it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct ds_slot {
    /// `sizeof(ds_slot)`, in every element of `ds_dispatch::slots`.
    pub size: u32,
    /// The slot index the program binds.
    pub slot: u32,
    /// `DS_SLOT_*` bits; any other bit is `DS_BAD_INPUT`.
    pub flags: u32,
    /// The descriptor's base address.
    pub base: u64,
    /// Bytes the descriptor covers.
    pub size_bytes: u64,
    /// D937: the slot this one copies exactly, or `DS_NO_ALIAS`.
    pub alias_of: u32,
    /// `DS_FORMAT_NONE`, or 1 R8_UINT, 2 R16_UINT, 3 R32_UINT, 4 R32_FLOAT, 5 R32G32_UINT,
    /// 6 R32G32B32A32_UINT, 7 R8G8B8A8_UNORM.
    pub format: u32,
    /// Record stride for indexed accesses; 0 means the format's element size.
    pub stride_bytes: u32,
    /// `DS_BASE_DESCRIPTOR` or `DS_BASE_PUSH_BLOCK`.
    pub base_source: u32,
    /// For `DS_BASE_PUSH_BLOCK`: the push word holding the base's low half.
    pub base_word: u32,
}

/// A dispatch in the hot path's struct form.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct ds_dispatch {
    /// `sizeof(ds_dispatch)`.
    pub size: u32,
    /// The guest address of the program.
    pub program: u64,
    /// 0 compute, 1 graphics.
    pub kind: u32,
    /// A1's reasons as bits: 1 D753, 2 D758, 4 D914, 8 D950, 16 D951; 0 when the host knew every
    /// range. Any other bit is `DS_BAD_INPUT`.
    pub reasons: u32,
    /// `n_slots` slots (null when 0).
    pub slots: *const ds_slot,
    /// How many slots.
    pub n_slots: usize,
    /// `n_push` push-block words (null when 0).
    pub push: *const u32,
    /// How many push words.
    pub n_push: usize,
}

/// A dispatch's mode, as the report has it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum ds_mode {
    /// Every range known and bound (D953).
    DS_MODE_BOUND = 0,
    /// Run device-addressed (D964, A1).
    DS_MODE_DEVICE_ADDRESSED = 1,
    /// Not run.
    DS_MODE_REFUSED = 2,
}

impl From<Mode> for ds_mode {
    fn from(m: Mode) -> Self {
        match m {
            Mode::Bound => Self::DS_MODE_BOUND,
            Mode::DeviceAddressed => Self::DS_MODE_DEVICE_ADDRESSED,
            Mode::Refused => Self::DS_MODE_REFUSED,
        }
    }
}

fn bad(message: String) -> Failure {
    Failure::new(ds_status::DS_BAD_INPUT, message)
}

impl ds_slot {
    fn to_slot(self, i: usize) -> Result<Slot, Failure> {
        if self.size as usize != size_of::<ds_slot>() {
            return Err(abi_mismatch(
                &format!("dispatch.slots[{i}]"),
                "ds_slot",
                self.size,
                size_of::<ds_slot>(),
            ));
        }
        if self.flags & !KNOWN_SLOT_FLAGS != 0 {
            check_flags(
                &format!("dispatch.slots[{i}].flags"),
                self.flags,
                KNOWN_SLOT_FLAGS,
            )?;
        }
        let format = match self.format {
            DS_FORMAT_NONE => None,
            n => Some(*FORMATS.get(n as usize - 1).ok_or_else(|| {
                bad(format!(
                    "dispatch.slots[{i}].format is {n}; formats are 0 (none) to {}",
                    FORMATS.len()
                ))
            })?),
        };
        let base_source = match self.base_source {
            DS_BASE_DESCRIPTOR => BaseSource::Descriptor,
            DS_BASE_PUSH_BLOCK => BaseSource::PushBlock {
                word: self.base_word,
            },
            n => {
                return Err(bad(format!(
                    "dispatch.slots[{i}].base_source is {n}; it is 0 (descriptor) or 1 (push block)"
                )));
            }
        };
        Ok(Slot {
            slot: self.slot,
            base: self.base,
            size_bytes: self.size_bytes,
            written: self.flags & DS_SLOT_WRITTEN != 0,
            base_source,
            alias_of: (self.alias_of != DS_NO_ALIAS).then_some(self.alias_of),
            format,
            resolved: self.flags & DS_SLOT_RESOLVED != 0,
            stride_bytes: self.stride_bytes,
            swizzle: None,
            index_from_lane: self.flags & DS_SLOT_INDEX_FROM_LANE != 0,
        })
    }
}

impl ds_dispatch {
    /// The dispatch at `dispatch`, its `size` checked first.
    ///
    /// # Safety
    /// `dispatch` must be null (an error) or point at a `ds_dispatch` (of any version: only its
    /// `size` is read before it is checked) that outlives `'a`.
    pub(crate) unsafe fn arg<'a>(dispatch: *const ds_dispatch) -> Result<&'a ds_dispatch, Failure> {
        if dispatch.is_null() {
            return Err(null("dispatch"));
        }
        // SAFETY: non-null; every version of the struct starts with its size.
        let size = unsafe { (*dispatch).size };
        check_size::<ds_dispatch>("ds_dispatch", "ds_dispatch", size)?;
        // SAFETY: the size matches; the caller promises the struct outlives `'a`.
        Ok(unsafe { &*dispatch })
    }

    /// The slots flagged [`DS_SLOT_IN_PLACE`], into `out`.
    ///
    /// # Safety
    /// As [`ds_dispatch::fill`], which has checked the slots first.
    pub(crate) unsafe fn in_place_slots(&self, out: &mut Vec<u32>) -> Result<(), Failure> {
        out.clear();
        // SAFETY: the caller's promise; `fill` checked the element size.
        let slots = unsafe { slice_arg(self.slots, self.n_slots, "dispatch.slots") }?;
        out.extend(
            slots
                .iter()
                .filter(|s| s.flags & DS_SLOT_IN_PLACE != 0)
                .map(|s| s.slot),
        );
        Ok(())
    }

    /// Fills `into` (kept between calls, so the hot path does not allocate once it has grown)
    /// from this struct form.
    ///
    /// # Safety
    /// `slots` and `push`, when their counts are not 0, must point at that many elements.
    pub(crate) unsafe fn fill(&self, into: &mut DispatchInput) -> Result<(), Failure> {
        if self.n_slots > 0 && !self.slots.is_null() {
            // SAFETY: at least one element; every version of `ds_slot` starts with its size, so
            // the caller's stride is checked before a second element is read at ours.
            let size = unsafe { (*self.slots).size };
            if size as usize != size_of::<ds_slot>() {
                return Err(abi_mismatch(
                    "dispatch.slots[0]",
                    "ds_slot",
                    size,
                    size_of::<ds_slot>(),
                ));
            }
        }
        // SAFETY: the caller promises `n_slots` slots and `n_push` words behind the pointers.
        let slots = unsafe { slice_arg(self.slots, self.n_slots, "dispatch.slots") }?;
        // SAFETY: as above.
        let push = unsafe { slice_arg(self.push, self.n_push, "dispatch.push") }?;
        into.kind = match self.kind {
            0 => DispatchKind::Compute,
            1 => DispatchKind::Graphics,
            n => {
                return Err(bad(format!(
                    "dispatch.kind is {n}; it is 0 (compute) or 1 (graphics)"
                )));
            }
        };
        check_flags("dispatch.reasons", self.reasons, (1 << REASONS.len()) - 1)?;
        into.program = self.program;
        into.label.clear();
        into.page_buffer = None;
        into.accesses.clear();
        into.reasons.clear();
        into.reasons.extend(
            REASONS
                .iter()
                .enumerate()
                .filter(|(bit, _)| self.reasons & (1 << bit) != 0)
                .map(|(_, r)| *r),
        );
        into.push.clear();
        into.push.extend_from_slice(push);
        into.slots.clear();
        for (i, s) in slots.iter().enumerate() {
            into.slots.push(s.to_slot(i)?);
        }
        Ok(())
    }
}
