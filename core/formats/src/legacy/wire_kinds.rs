//! The live wire's dispatch message kinds 1 to 3 (`dispatchscope_live::wire`): a dispatch as JSON
//! (1), with fixed-width rows and no rows (2, 3). Only targets of protocol version 2 sent them; the
//! handshake refuses such a target, and no file holds the messages (a version 2 store's kind 3
//! messages became [`super::record_v2`] records), so they are refused by name, never decoded.

use thiserror::Error;

use crate::versions::PROTOCOL_VERSION;

/// The retired kinds.
pub const RETIRED_KINDS: std::ops::RangeInclusive<u8> = 1..=3;

/// A message of a retired kind.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error(
    "message kind {kind}, a dispatch as only protocol version 2 targets sent it; this side speaks version {PROTOCOL_VERSION} (kind {current})"
)]
pub struct RetiredKind {
    /// The kind byte.
    pub kind: u8,
    /// The dispatch kind this side speaks.
    pub current: u8,
}

/// `Err` naming `kind` when it is a retired dispatch kind; `current` is the kind that replaced it.
pub fn check(kind: u8, current: u8) -> Result<(), RetiredKind> {
    if RETIRED_KINDS.contains(&kind) {
        return Err(RetiredKind { kind, current });
    }
    Ok(())
}
