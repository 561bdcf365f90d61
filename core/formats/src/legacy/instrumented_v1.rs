//! An instrumented section's column record of version 1 ([`crate::instrumented`]): version 2's
//! layout without the flags (the word is there, always 0) and without the heat map. Written by
//! device passes before issue 30's heat map; still read, so their captures open as they did.

use crate::instrumented::InstrumentedError;
use crate::versions::INSTRUMENTED_VERSION;

/// The version word of a version 1 record.
pub const VERSION_1: u16 = 1;

/// Checks a record's version word: the current version, or version 1.
pub fn check_version(version: u16) -> Result<(), InstrumentedError> {
    if version != INSTRUMENTED_VERSION && version != VERSION_1 {
        return Err(InstrumentedError::Version { found: version });
    }
    Ok(())
}

/// Checks a record's flags word: `known` flags in the current version, none in version 1.
pub fn check_flags(version: u16, flags: u16, known: u16) -> Result<(), InstrumentedError> {
    if flags & !known != 0 || (version == VERSION_1 && flags != 0) {
        return Err(InstrumentedError::Flags { version, flags });
    }
    Ok(())
}
