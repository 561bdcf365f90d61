//! Every version number of dispatchscope's files and wire, in one place (as puffin_http keeps its
//! one `PROTOCOL_VERSION`, "bumped on protocol breakage"): a change of a layout moves its number
//! here, and a form a build still reads but no longer writes gets a file in [`crate::legacy`].
//!
//! The modules that write and read each form re-export their number under the name they always
//! had (`sample::SAMPLE_VERSION`, `capture::format::FORMAT_VERSION`, `instrumented::VERSION`,
//! `message::RECORD_V3`, and the live crate's `protocol::VERSION` and `checkpoint::CHECKPOINT_VERSION`,
//! which it takes from here: the live crate depends on this one, never the reverse).
//! Not here: the JSON schemas' names (`dispatchscope.report/1` and its kin), which the engine and the
//! analysis below this crate define, and the C ABI's `DS_ABI_VERSION`, which its generated header
//! must read as a literal.

/// The first bytes of a DISPATCH record in the framed form (JSON, then an instrumented section;
/// `session::DispatchRecord::to_payload`): a JSON record never starts with them.
pub const FRAMED_DISPATCH_MAGIC: [u8; 4] = *b"DSDR";

/// The sample format (`samples/*.json`, `samples/README.md`); older versions keep loading.
pub const SAMPLE_VERSION: u32 = 1;

/// The capture container's layout ([`crate::capture`]): what this build writes, and the newest it
/// reads.
pub const CAPTURE_FORMAT_VERSION: u32 = 1;

/// Bit 31 of the word after a `DSDC` DISPATCH record's magic: a versioned record (version 2 or
/// later) rather than version 1's JSON length, which is always below `2^31`.
pub const RECORD_VERSIONED: u32 = 0x8000_0000;
/// The word after the magic of a version 2 DISPATCH record: a dispatch message with fixed-width
/// rows. Read, no longer written ([`crate::legacy::record_v2`]).
pub const RECORD_V2: u32 = RECORD_VERSIONED | 2;
/// The word after the magic of a version 3 DISPATCH record: version 2's layout, its message's rows
/// packed ([`crate::packed`]). What a live store writes.
pub const RECORD_V3: u32 = RECORD_VERSIONED | 3;

/// The instrumented section's column record ([`crate::instrumented`]) this build writes; version 1
/// (no flags, no heat map) is still read ([`crate::legacy::instrumented_v1`]).
pub const INSTRUMENTED_VERSION: u16 = 2;

/// The live protocol a target and a debugger speak (`dispatchscope_live::protocol::VERSION`); they
/// talk only when theirs are equal, and an older peer is refused by name. Version 3 added the
/// debugger's memory reads; version 4 a memory checkpoint that may be changes
/// ([`MEMORY_DELTA_MAGIC`], issue 41), and the messages of dispatches in flight and of a lost
/// device (wire kinds 6 and 7), which a version 3 debugger could not read: the handshake refuses
/// it instead of a session that ends at the first dispatch prepared.
pub const PROTOCOL_VERSION: u32 = 4;

/// A live checkpoint message's layout (`dispatchscope_live::checkpoint`); a reader refuses any other.
/// 2 since a memory part may be the binary form ([`MEMORY_DELTA_MAGIC`]: the whole state or its
/// changes); version 1's memory part was JSON alone.
pub const CHECKPOINT_VERSION: u8 = 2;

/// The first bytes of a MEMORY_STATE record's binary form (`checkpoint::MemoryDelta`: the whole
/// state, or its changes since the record before); the JSON form, which older builds wrote and
/// every build reads, starts with `{`.
pub const MEMORY_DELTA_MAGIC: [u8; 4] = *b"DSMD";

/// The word after [`MEMORY_DELTA_MAGIC`]: the binary memory state's layout this build writes and
/// reads; any other is refused by name. A build from before it reads the binary form as bad JSON
/// (a named error, never a state shown wrong).
pub const MEMORY_DELTA_VERSION: u32 = 1;

/// A live flight message's layout (a dispatch prepared or abandoned, `dispatchscope_live::flight`);
/// a reader refuses any other.
pub const FLIGHT_VERSION: u8 = 1;
