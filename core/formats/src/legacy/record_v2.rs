//! A version 2 DISPATCH record ([`crate::versions::RECORD_V2`]): the layout of version 3
//! ([`crate::message`]'s record: magic, version word, a dispatch message, mapping lists), its
//! message's access lists in [`crate::columns`]' fixed-width rows instead of packed ones.
//!
//! Written by a live store from a protocol version 2 target's wire kind 3 messages, kept as they
//! came, until wire kind 4 (2026-12-02); nothing writes it since. It stays readable because it
//! costs one arm of [`crate::message::Rows`] (its rows are version 1's, which a live store still
//! writes): a live recording made before packed rows opens as it did. Its tests make it with
//! [`crate::message::encode_record`] and [`crate::message::Rows::Fixed`].

use crate::columns::{self, ColumnsError, Reader};
use dispatchscope_core::input::Access;
use dispatchscope_core::report::AccessReport;

/// Appends `input`'s and `report`'s access blocks in version 2's fixed-width rows (what its
/// messages carry; only tests and the wire bench make them now).
pub fn encode_rows(input: &[Access], report: &[AccessReport], out: &mut Vec<u8>) {
    columns::encode_accesses(input, out);
    columns::encode_access_reports(report, out);
}

/// Reads a version 2 message's access blocks: the input's, then the report's.
pub fn decode_rows(r: &mut Reader<'_>) -> Result<(Vec<Access>, Vec<AccessReport>), ColumnsError> {
    Ok((
        columns::decode_accesses(r)?,
        columns::decode_access_reports(r)?,
    ))
}
