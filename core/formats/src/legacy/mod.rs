//! Every form a file or a peer of an older build may hand this one, in one place, a file a form
//! (as rerun keeps its migrations): what each was, why it is still read (or refused by name), and
//! the one reader of the part that differs; the one sniffer of a DISPATCH record's form,
//! [`sniff`]; the version numbers themselves are [`crate::versions`]'.
//!
//! A form gets a file here when a build stops writing it and keeps reading it; a form no file
//! holds any more is dropped from here with its test.
//!
//! # Every form of a DISPATCH record, and which are still written
//!
//! [`crate::session::DispatchRecord::from_payload`] tells them apart by [`sniff`].
//!
//! | form | first bytes | written by | read by |
//! |---|---|---|---|
//! | JSON | `{` | [`crate::session::DispatchRecord::to_payload`], a report without an instrumented section (a sample turned capture) | `serde_json` |
//! | framed: JSON, then an instrumented section | [`crate::session::FRAMED_DISPATCH_MAGIC`] (`DSDR`) | the same, a report with a section (a device pass, issue 14) | [`crate::instrumented::decode`] for the section |
//! | version 1: JSON and fixed-width rows | `DSDC`, then a length below `2^31` | a live store given a decoded dispatch ([`crate::columns::encode_record`]) | [`crate::columns::decode_record`] |
//! | version 2: a dispatch message with fixed-width rows | `DSDC`, [`RECORD_V2`] | nothing since wire kind 4 (2026-12-02): version 2 targets' kind 3 messages, kept as they came | [`record_v2`] |
//! | version 3: a dispatch message with packed rows | `DSDC`, [`RECORD_V3`] | a live store, from the bytes a target sent | [`crate::message::decode_record`] |
//!
//! # Every form of a MEMORY_STATE record's payload
//!
//! [`crate::checkpoint::decode_memory_state`] and [`crate::checkpoint::check_memory_payload`] tell
//! them apart by their first bytes; the JSON form's reader is `serde_json`, nothing here.
//!
//! | form | first bytes | written by | read by |
//! |---|---|---|---|
//! | JSON, the whole state | `{` | builds before issue 41 (2026-12), and still the app's pass capture | `serde_json` and [`crate::checkpoint::MemoryState::check`] |
//! | binary, the whole state | [`crate::versions::MEMORY_DELTA_MAGIC`] (`DSMD`), [`crate::versions::MEMORY_DELTA_VERSION`], form 0 | [`crate::checkpoint::MemoryWriter`]: live targets, `write_replayed_capture`, a live store's next file | [`crate::checkpoint::MemoryDelta::decode`] |
//! | binary, changes since the record before | `DSMD`, [`crate::versions::MEMORY_DELTA_VERSION`], form 1 | the same, between whole ones | the same, applied by [`crate::checkpoint::StateIndex::rebuild_memory`] |
//!
//! A build from before the binary form reads it as bad JSON: a named error for that dispatch's
//! memory, never a state shown wrong; a binary form of another version is refused by name
//! ([`crate::checkpoint::CheckpointError::MemoryDeltaVersion`]). Live peers from before it speak
//! protocol version 3 and are refused in the handshake.
//!
//! # The old forms
//!
//! - [`record_v2`]: a version 2 DISPATCH record (fixed-width rows inside a dispatch message).
//! - [`instrumented_v1`]: an instrumented section's column record of version 1 (no flags, no heat
//!   map).
//! - [`wire_kinds`]: the live wire's dispatch message kinds 1 to 3, which only protocol version 2
//!   targets sent; refused by name, not decoded (no file holds them).
//!
//! Older live peers (protocol versions 1 and 2) are refused by name in the handshake
//! (`dispatchscope_live::protocol`), by the version number alone: nothing of theirs is decoded.

pub mod instrumented_v1;
pub mod record_v2;
pub mod wire_kinds;

use crate::columns::RECORD_MAGIC;
use crate::versions::{FRAMED_DISPATCH_MAGIC, RECORD_V2, RECORD_V3, RECORD_VERSIONED};

/// The form of a DISPATCH record's payload, from its first eight bytes (the table above).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DispatchForm {
    /// Plain JSON (anything that starts with none of the magics).
    Json,
    /// `DSDR`: JSON, then an instrumented section.
    Framed,
    /// `DSDC`, then a JSON length: version 1.
    ColumnsV1,
    /// `DSDC`, [`RECORD_V2`]: a dispatch message with fixed-width rows (read, no longer written).
    MessageV2,
    /// `DSDC`, [`RECORD_V3`]: a dispatch message with packed rows.
    MessageV3,
    /// `DSDC` and a version word this build does not read (or no word at all).
    UnknownVersion(Option<u32>),
}

impl DispatchForm {
    /// Whether a record of this form is JSON from its first byte (what a lean read can skim).
    pub fn is_json(self) -> bool {
        self == DispatchForm::Json
    }
}

/// The one sniffer of a DISPATCH record's form.
pub fn sniff(bytes: &[u8]) -> DispatchForm {
    if bytes.starts_with(&FRAMED_DISPATCH_MAGIC) {
        return DispatchForm::Framed;
    }
    let Some(rest) = bytes.strip_prefix(&RECORD_MAGIC) else {
        return DispatchForm::Json;
    };
    let Some(word) = rest.first_chunk::<4>().map(|w| u32::from_le_bytes(*w)) else {
        return DispatchForm::UnknownVersion(None);
    };
    match word {
        RECORD_V2 => DispatchForm::MessageV2,
        RECORD_V3 => DispatchForm::MessageV3,
        w if w & RECORD_VERSIONED == 0 => DispatchForm::ColumnsV1,
        w => DispatchForm::UnknownVersion(Some(w)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One case a form: what the sniffer says of each first eight bytes.
    #[test]
    fn every_form_is_told_by_its_first_bytes() {
        let dsdc = |w: u32| [&RECORD_MAGIC[..], &w.to_le_bytes()].concat();
        assert_eq!(sniff(b"{\"input\":{}}"), DispatchForm::Json);
        assert_eq!(sniff(b"DSDR\x02\0\0\0{}"), DispatchForm::Framed);
        assert_eq!(sniff(&dsdc(17)), DispatchForm::ColumnsV1);
        assert_eq!(sniff(&dsdc(RECORD_V2)), DispatchForm::MessageV2);
        assert_eq!(sniff(&dsdc(RECORD_V3)), DispatchForm::MessageV3);
        assert_eq!(
            sniff(&dsdc(RECORD_VERSIONED | 9)),
            DispatchForm::UnknownVersion(Some(RECORD_VERSIONED | 9))
        );
        assert_eq!(sniff(b"DSDC\x01"), DispatchForm::UnknownVersion(None));
    }
}
