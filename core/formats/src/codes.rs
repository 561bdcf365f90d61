//! The codes every binary row encoding of this crate shares ([`crate::columns`]' fixed-width rows,
//! [`crate::packed`]' rows, [`crate::instrumented`]'s columns): an access's kind, op, rule and
//! route as small numbers, written once so that no two encodings can disagree.

use dispatchscope_core::input::{AccessKind, Op};
use dispatchscope_core::report::Route;
use dispatchscope_core::rules::Rule;

/// The access kinds by their codes.
pub(crate) const KINDS: [AccessKind; 8] = [
    AccessKind::Global,
    AccessKind::Flat,
    AccessKind::Scalar,
    AccessKind::UntypedBuffer,
    AccessKind::FormatBuffer,
    AccessKind::RayIntersection,
    AccessKind::Lds,
    AccessKind::Scratch,
];

/// An access kind's code, its position in [`KINDS`].
pub(crate) fn kind_code(k: AccessKind) -> u8 {
    match k {
        AccessKind::Global => 0,
        AccessKind::Flat => 1,
        AccessKind::Scalar => 2,
        AccessKind::UntypedBuffer => 3,
        AccessKind::FormatBuffer => 4,
        AccessKind::RayIntersection => 5,
        AccessKind::Lds => 6,
        AccessKind::Scratch => 7,
    }
}

/// An op's code: 0 load, 1 store.
pub(crate) fn op_code(op: Op) -> u8 {
    match op {
        Op::Load => 0,
        Op::Store => 1,
    }
}

/// A rule's code, its position in [`Rule::ALL`].
pub(crate) fn rule_code(r: Rule) -> u8 {
    // Rule::ALL lists the variants in declaration order, so the discriminant is the position.
    r as u8
}

/// A route as a row stores it: its code, its holder (bound routes) and its offset or address.
pub(crate) fn route_parts(r: &Route) -> (u8, u32, u64) {
    match *r {
        Route::Bound { holder, offset } => (0, holder, offset),
        Route::Device { address } => (1, 0, address),
        Route::Lds { offset } => (2, 0, offset),
        Route::Scratch { offset } => (3, 0, offset),
        Route::NotRun => (4, 0, 0),
    }
}

/// [`route_parts`]' reverse; `None` for a code no route has.
pub(crate) fn route_of_parts(code: u8, holder: u32, at: u64) -> Option<Route> {
    Some(match code {
        0 => Route::Bound { holder, offset: at },
        1 => Route::Device { address: at },
        2 => Route::Lds { offset: at },
        3 => Route::Scratch { offset: at },
        4 => Route::NotRun,
        _ => return None,
    })
}

/// A lookup's home slot and the part of its chunk it looked up (`LookupTrace::part`), as one row
/// value: the part in bits 48–55 (a home slot is below 2^28), so that a row written before parts
/// existed reads as part 0. Both row formats store it so.
pub(crate) fn home_and_part(l: &dispatchscope_core::report::LookupTrace) -> u64 {
    (l.home_slot as u64 & HOME_BITS) | (u64::from(l.part) << 48)
}

/// [`home_and_part`] read back: the home slot and the part.
pub(crate) fn split_home(v: u64) -> (usize, u32) {
    ((v & HOME_BITS) as usize, ((v >> 48) & 0xff) as u32)
}

/// The bits of [`home_and_part`] that hold the home slot.
const HOME_BITS: u64 = (1 << 48) - 1;
