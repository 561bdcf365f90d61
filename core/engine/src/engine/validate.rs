//! Validation: every malformed value in a dispatch is a named [`InputError`] before anything runs,
//! and what the checks find (the slots by number, each slot's base, O10) is kept in [`Checked`]
//! for the phases after, so no phase finds it again.

use crate::addr::ByteRange;
use crate::aperture::route_flat;
use crate::input::{
    Access, AccessKind, BaseSource, DeviceLimits, DispatchInput, InputError, Op, Slot, SlotIndex,
    words_for,
};
use crate::report::Route;
use crate::rules::DEVICE_TABLE_PUSH_WORD;

/// Checks a dispatch before anything runs: every malformed value is a named [`InputError`].
pub fn validate(input: &DispatchInput, limits: &DeviceLimits) -> Result<(), InputError> {
    check(input, limits).map(drop)
}

/// What validation found and every later phase reads instead of finding it again.
#[derive(Clone, Debug)]
pub(super) struct Checked {
    /// The slots by number: a slot's position in `input.slots` (and in the plan's bindings).
    pub slots: SlotIndex,
    /// Each slot's base, by position: its descriptor's, or for a D951 slot its push words' (O10).
    pub bases: Vec<u64>,
}

impl Checked {
    /// The position of the slot numbered `slot`.
    pub fn position(&self, input: &DispatchInput, slot: u32) -> Option<usize> {
        self.slots.position(&input.slots, slot)
    }

    /// The guest range slot `pos` covers from the base its accesses are read against (O10).
    pub fn range(&self, input: &DispatchInput, pos: usize) -> ByteRange {
        let base = self.bases[pos];
        ByteRange::new(base, base + input.slots[pos].size_bytes)
    }
}

/// [`validate`], keeping what it found: the slot index and each slot's base.
pub(super) fn check(input: &DispatchInput, limits: &DeviceLimits) -> Result<Checked, InputError> {
    let index = SlotIndex::new(&input.slots);
    let device_addressed = !input.reasons.is_empty();
    if device_addressed && input.push.len() > DEVICE_TABLE_PUSH_WORD as usize {
        return Err(InputError::PushBlockTooLong {
            len: input.push.len(),
        });
    }
    let mut bases = Vec::with_capacity(input.slots.len());
    for (pos, s) in input.slots.iter().enumerate() {
        if index.first_repeat() == Some(pos) {
            return Err(InputError::DuplicateSlot { slot: s.slot });
        }
        if s.size_bytes == 0 {
            return Err(InputError::ZeroSizeSlot { slot: s.slot });
        }
        if let BaseSource::PushBlock { word } = s.base_source
            && device_addressed
            && (word == DEVICE_TABLE_PUSH_WORD || word == DEVICE_TABLE_PUSH_WORD - 1)
        {
            return Err(InputError::PushWordTaken { slot: s.slot, word });
        }
        let base = match (s.effective_base(&input.push), s.base_source) {
            (Some(base), _) => base,
            (None, BaseSource::PushBlock { word }) => {
                return Err(InputError::PushWordMissing {
                    slot: s.slot,
                    word,
                    len: input.push.len(),
                });
            }
            (None, BaseSource::Descriptor) => s.base,
        };
        if base.checked_add(s.size_bytes).is_none() {
            return Err(InputError::SlotOverflow {
                slot: s.slot,
                base,
                size_bytes: s.size_bytes,
            });
        }
        if !s.resolved && !device_addressed {
            return Err(InputError::UnresolvedWithoutReason { slot: s.slot });
        }
        bases.push(base);
    }
    if let Some(pb) = &input.page_buffer
        && let Some(&page) = pb.pages.iter().find(|&&p| {
            p & (limits.host_page_bytes - 1) != 0 || p.checked_add(limits.host_page_bytes).is_none()
        })
    {
        return Err(InputError::PageBufferUnaligned {
            page,
            page_bytes: limits.host_page_bytes,
        });
    }
    let checked = Checked {
        slots: index,
        bases,
    };
    check_copies(input, &checked)?;
    for (i, a) in input.accesses.iter().enumerate() {
        let slot = match a.slot {
            Some(s) => Some(
                checked
                    .position(input, s)
                    .map(|p| &input.slots[p])
                    .ok_or(InputError::UnknownSlot { access: i, slot: s })?,
            ),
            None => None,
        };
        validate_access(i, a, slot, limits, device_addressed)?;
    }
    Ok(checked)
}

/// O3's inputs: a D937 copy names a slot that exists, covers exactly its range, and the chain of
/// copies ends at a slot that copies nothing.
fn check_copies(input: &DispatchInput, checked: &Checked) -> Result<(), InputError> {
    for (pos, s) in input.slots.iter().enumerate() {
        let Some(of) = s.alias_of else { continue };
        let Some(target) = checked.position(input, of) else {
            return Err(InputError::AliasUnknown { slot: s.slot, of });
        };
        let (range, of_range) = (checked.range(input, pos), checked.range(input, target));
        if range != of_range {
            return Err(InputError::AliasMismatch {
                slot: s.slot,
                of,
                range,
                of_range,
            });
        }
        let mut c = &input.slots[target];
        for _ in 0..=input.slots.len() {
            match c.alias_of.and_then(|n| checked.position(input, n)) {
                Some(next) => c = &input.slots[next],
                None => break,
            }
            if c.slot == s.slot {
                return Err(InputError::AliasCycle { slot: s.slot });
            }
        }
        if c.alias_of.is_some() {
            return Err(InputError::AliasCycle { slot: s.slot });
        }
    }
    Ok(())
}

/// Checks access `i`, whose slot, when it names one, is `slot` (known to exist).
fn validate_access(
    i: usize,
    a: &Access,
    slot: Option<&Slot>,
    limits: &DeviceLimits,
    device_addressed: bool,
) -> Result<(), InputError> {
    let missing = |what| InputError::MissingOperand {
        access: i,
        kind: a.kind,
        what,
    };
    if a.size_bytes == 0 || a.size_bytes > 64 {
        return Err(InputError::BadSize {
            access: i,
            size: a.size_bytes,
        });
    }
    if let Some(address) = a.address
        && address.checked_add(u64::from(a.size_bytes)).is_none()
    {
        return Err(InputError::AddressWraps {
            access: i,
            address,
            size: a.size_bytes,
        });
    }
    if a.kind == AccessKind::RayIntersection && a.op == Op::Store {
        return Err(InputError::RayStore { access: i });
    }
    if a.op == Op::Store
        && let Some(s) = slot
        && !s.written
    {
        return Err(InputError::StoreThroughReadOnlySlot {
            access: i,
            slot: s.slot,
        });
    }
    let format = if a.kind == AccessKind::FormatBuffer {
        let s = slot.ok_or(missing("a slot and an offset"))?;
        let f = s.format.ok_or(InputError::FormatMissing {
            access: i,
            slot: s.slot,
        })?;
        if a.size_bytes != f.element_bytes() {
            return Err(InputError::FormatSize {
                access: i,
                size: a.size_bytes,
                format: f,
                element: f.element_bytes(),
            });
        }
        Some(f)
    } else {
        None
    };
    match a.op {
        Op::Load if !a.values.is_empty() => {
            return Err(InputError::LoadWithValues {
                access: i,
                got: a.values.len(),
            });
        }
        Op::Store => {
            let expected = format.map_or(words_for(a.size_bytes), |f| f.components());
            if a.values.len() != expected {
                return Err(InputError::StoreValueCount {
                    access: i,
                    size: a.size_bytes,
                    expected,
                    got: a.values.len(),
                });
            }
        }
        Op::Load => {}
    }
    let aperture = |kind: AccessKind, offset: u64, limit: u32| {
        if offset.saturating_add(u64::from(a.size_bytes)) > u64::from(limit) {
            Err(InputError::ApertureOutOfRange {
                access: i,
                kind,
                offset,
                size: a.size_bytes,
                limit: u64::from(limit),
            })
        } else {
            Ok(())
        }
    };
    let needs_device = |address: u64| {
        if device_addressed {
            Ok(())
        } else {
            Err(InputError::NeedsDeviceAddress {
                access: i,
                kind: a.kind,
                address,
            })
        }
    };
    match a.kind {
        AccessKind::Lds => aperture(
            a.kind,
            a.offset.ok_or(missing("an LDS offset"))?,
            limits.lds_bytes,
        )?,
        AccessKind::Scratch => aperture(
            a.kind,
            a.offset.ok_or(missing("a scratch offset"))?,
            limits.scratch_bytes_per_lane,
        )?,
        AccessKind::Flat => {
            let address = a.address.ok_or(missing("an address"))?;
            match route_flat(address, limits.lds_aperture, limits.scratch_aperture) {
                Route::Lds { offset } => aperture(AccessKind::Lds, offset, limits.lds_bytes)?,
                Route::Scratch { offset } => {
                    aperture(AccessKind::Scratch, offset, limits.scratch_bytes_per_lane)?
                }
                _ => needs_device(address)?,
            }
        }
        AccessKind::Global | AccessKind::RayIntersection => {
            needs_device(a.address.ok_or(missing("an address"))?)?
        }
        AccessKind::Scalar | AccessKind::UntypedBuffer | AccessKind::FormatBuffer => match slot {
            Some(s) => {
                let offset = a.offset.ok_or(missing("an offset in its slot"))?;
                let off = s.addressed_offset(a.index, offset, a.lane).ok_or(
                    InputError::OffsetOverflow {
                        access: i,
                        slot: s.slot,
                        index: a.index.unwrap_or(0),
                        offset,
                        size_bytes: s.size_bytes,
                    },
                )?;
                if off.saturating_add(u64::from(a.size_bytes)) > s.size_bytes {
                    return Err(InputError::AccessOutsideSlot {
                        access: i,
                        slot: s.slot,
                        offset: off,
                        size: a.size_bytes,
                        size_bytes: s.size_bytes,
                    });
                }
            }
            None if a.kind == AccessKind::Scalar => needs_device(
                a.address
                    .ok_or(missing("a slot and an offset, or an address"))?,
            )?,
            None => return Err(missing("a slot and an offset")),
        },
    }
    Ok(())
}
