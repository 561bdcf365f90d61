//! Routes (W1–W3, P1, O6, O8): where each access goes. A resolved slot's access goes through its
//! holder's buffer at the member offset (O6); an unresolved slot's, a global's, a ray's and a
//! scalar load of a descriptor go by device address (W1–W3); a flat address routes by its high
//! half (P1). The backend receives the decided [`Job`]; it decides nothing.

use std::collections::HashMap;

use super::validate::Checked;
use crate::addr::ByteRange;
use crate::aperture::route_flat;
use crate::exec::{Job, Planned, PlannedAccess};
use crate::input::{AccessKind, DeviceLimits, DispatchInput};
use crate::report::{Route, SlotBinding};
use crate::rules::Rule;

/// The decided job and, beside it, what the report says of each access and holder.
pub(super) struct Routed<'a> {
    /// What the backend runs.
    pub job: Job<'a>,
    /// The slot number of each of the job's holders.
    pub holder_slots: Vec<u32>,
    /// Each access's route and the rule that chose it, in stream order.
    pub routes: Vec<(Route, Rule)>,
}

/// Decides each access's route and the holders to upload.
pub(super) fn route<'a>(
    input: &'a DispatchInput,
    checked: &Checked,
    bindings: &[SlotBinding],
    limits: &DeviceLimits,
) -> Routed<'a> {
    let mut holders: Vec<ByteRange> = Vec::new();
    let mut holder_slots: Vec<u32> = Vec::new();
    let mut holder_index: HashMap<u32, usize> = HashMap::new();
    for b in bindings {
        if let Some(h) = b.holder
            && !holder_index.contains_key(&h)
        {
            let widened = ByteRange::new(
                b.range.start - b.offset,
                b.range.start - b.offset + b.binding.end,
            );
            holder_index.insert(h, holders.len());
            holders.push(widened);
            holder_slots.push(h);
        }
    }
    let mut accesses = Vec::with_capacity(input.accesses.len());
    let mut routes = Vec::with_capacity(input.accesses.len());
    for a in &input.accesses {
        // The slot's position: its binding is at the same position.
        let pos = a.slot.and_then(|s| checked.position(input, s));
        let slot = pos.map(|p| &input.slots[p]);
        let format = if a.kind == AccessKind::FormatBuffer {
            slot.and_then(|s| s.format)
        } else {
            None
        };
        let (planned, route, rule) = match a.kind {
            AccessKind::Lds => {
                let offset = a.offset.unwrap_or(0);
                (Planned::Lds { offset }, Route::Lds { offset }, Rule::P1)
            }
            AccessKind::Scratch => {
                let offset = a.offset.unwrap_or(0);
                (
                    Planned::Scratch { offset },
                    Route::Scratch { offset },
                    Rule::P1,
                )
            }
            AccessKind::Flat => {
                let address = a.address.unwrap_or(0);
                let route = route_flat(address, limits.lds_aperture, limits.scratch_aperture);
                let planned = match route {
                    Route::Lds { offset } => Planned::Lds { offset },
                    Route::Scratch { offset } => Planned::Scratch { offset },
                    _ => Planned::Device { address },
                };
                (planned, route, Rule::P1)
            }
            AccessKind::Global | AccessKind::RayIntersection => {
                let address = a.address.unwrap_or(0);
                let rule = if a.kind == AccessKind::Global {
                    Rule::W1
                } else {
                    Rule::W3
                };
                (Planned::Device { address }, Route::Device { address }, rule)
            }
            AccessKind::Scalar | AccessKind::UntypedBuffer | AccessKind::FormatBuffer => {
                match (pos, a.address) {
                    (Some(p), _) => {
                        let s = &input.slots[p];
                        // Validation refused an offset past 2^64.
                        let off = s
                            .addressed_offset(a.index, a.offset.unwrap_or(0), a.lane)
                            .unwrap_or(0);
                        match bindings.get(p).filter(|b| b.resolved) {
                            Some(b) => {
                                let holder = b.holder.unwrap_or(s.slot);
                                let offset = b.offset + off;
                                let rule = if b.offset == 0 { Rule::O8 } else { Rule::O6 };
                                (
                                    Planned::Bound {
                                        holder: holder_index.get(&holder).copied().unwrap_or(0),
                                        offset,
                                    },
                                    Route::Bound { holder, offset },
                                    rule,
                                )
                            }
                            None => {
                                let address = checked.bases[p] + off;
                                let rule = if a.kind == AccessKind::FormatBuffer {
                                    Rule::W2
                                } else {
                                    Rule::W1
                                };
                                (Planned::Device { address }, Route::Device { address }, rule)
                            }
                        }
                    }
                    (None, address) => {
                        let address = address.unwrap_or(0);
                        (
                            Planned::Device { address },
                            Route::Device { address },
                            Rule::W3,
                        )
                    }
                }
            }
        };
        accesses.push(PlannedAccess {
            access: a,
            route: planned,
            format,
        });
        routes.push((route, rule));
    }
    Routed {
        job: Job {
            accesses,
            holders,
            lds_bytes: limits.lds_bytes,
            scratch_bytes_per_lane: limits.scratch_bytes_per_lane,
        },
        holder_slots,
        routes,
    }
}
