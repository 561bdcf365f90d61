//! An instrumented section's column record of version 1 ([`crate::instrumented`]): version 2's
//! layout without the flags (the word is there, always 0) and without the heat map. Written by
//! device passes before issue 30's heat map; still read, so their captures open as they did.

use crate::versions::INSTRUMENTED_VERSION;

/// The version word of a version 1 record.
pub const VERSION_1: u16 = 1;

/// Whether a record of version word `version` is read: the current version, or version 1.
pub fn reads_version(version: u16) -> bool {
    version == INSTRUMENTED_VERSION || version == VERSION_1
}

/// Whether `flags` may stand in a record of `version`: `known` flags in the current version, none
/// in version 1.
pub fn flags_allowed(version: u16, flags: u16, known: u16) -> bool {
    flags & !known == 0 && (version != VERSION_1 || flags == 0)
}
