//! The numbered rules, their decision records, and their text: the one place the code cites for a
//! rule (the specification they come from is not shipped with the code).
//!
//! Every refusal, escape and hazard in a report names a [`Rule`]; the CLI and the app print its id,
//! its decision id and the sentence below. The text is shipped here so that the app can show a rule
//! without the specification at hand. This module only names rules; it enforces none.

use std::fmt;

use serde::{Deserialize, Serialize};

macro_rules! rules {
    ($($variant:ident = $id:literal, $decision:literal, $title:literal, $text:literal;)*) => {
        /// A rule, by its id.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub enum Rule {
            $(
                #[doc = $title]
                #[serde(rename = $id)]
                $variant,
            )*
        }

        impl Rule {
            /// Every rule, in the specification's order.
            pub const ALL: &'static [Rule] = &[$(Rule::$variant),*];

            /// The rule's id, like `"O7"`.
            pub fn id(self) -> &'static str {
                match self { $(Rule::$variant => $id,)* }
            }

            /// The decision record behind the rule, like `"D953"`.
            pub fn decision(self) -> &'static str {
                match self { $(Rule::$variant => $decision,)* }
            }

            /// The rule's short name.
            pub fn title(self) -> &'static str {
                match self { $(Rule::$variant => $title,)* }
            }

            /// The rule's text.
            pub fn text(self) -> &'static str {
                match self { $(Rule::$variant => $text,)* }
            }

            /// The rule with id `id` (`"O7"`), if there is one.
            pub fn from_id(id: &str) -> Option<Rule> {
                match id { $($id => Some(Rule::$variant),)* _ => None }
            }
        }
    };
}

rules! {
    O1 = "O1", "D953", "join",
        "Two slots whose ranges share at least one byte are joined when at least one of them is written. Two read-only slots over the same bytes are never joined: they agree (D746).";
    O2 = "O2", "D953", "sets",
        "Sets are the connected parts of the join relation: a slot joins a set through any member.";
    O3 = "O3", "D937", "exact copies",
        "A slot bound to exactly another slot's range follows that slot into its set and gets the same binding.";
    O4 = "O4", "D953", "holder",
        "A set is held by the member with the lowest base; on a tie, the earliest slot.";
    O5 = "O5", "D953", "widening",
        "The holder's binding ends where the set's last member ends.";
    O6 = "O6", "D953", "members",
        "Every other member binds the holder's buffer at offset member.base - holder.base, and its binding runs to the holder's (widened) end: the bytes past its own range are the holder's on the guest too.";
    O7 = "O7", "D953", "alignment",
        "A member offset that is not a multiple of the device's minStorageBufferOffsetAlignment (Vulkan allows up to 256), or that falls outside the holder, is refused by name: the refusal names the slot, the offset, the limit and the holder.";
    O8 = "O8", "D953", "one upload, one write-back",
        "The holder is uploaded once, from the widened range, and read wherever any member reads. It is written back once, with only the words the dispatch changed or stored.";
    O9 = "O9", "D953", "write masks",
        "Each slot's write mask is bound at the same offset as the slot: one mask word for each data word, in holder coordinates. A store sets the mask word of every word it writes.";
    O10 = "O10", "D951", "slot base",
        "A slot's binding starts at the base its accesses are read against: its descriptor's, or for a D951 buffer the base in the push block. Such a buffer joins a set like any other, holder or member.";
    O11 = "O11", "D961", "page buffer",
        "The dispatch's global buffer of pages holds pages behind a table, not a range. A slot lying on one of its pages, where either is written, is refused.";
    A1 = "A1", "D964", "trigger",
        "A compute dispatch whose memory ranges the host cannot know before it runs is run device-addressed instead of refused: a descriptor computed from what the host cannot know (D753), a branch on an execution mask the host cannot know (D758), or a buffer only a host run of its groups or waves would find (D914, D950, D951; D982). The host does not run its waves (relaxes D900).";
    M1 = "M1", "D964", "what is mapped",
        "Every reservation's readable runs are mapped whole into the device's address space (VK_EXT_external_memory_host + bufferDeviceAddress).";
    M2 = "M2", "D964", "commit first",
        "Each run is committed before it is mapped (the driver touches every page). The write-watch's read-only guards over it are released, and its pages are noted written (D824).";
    M3 = "M3", "D964", "pieces",
        "Only the pieces of a run whose host pages are then committed, private and read-write are mapped. A page the guest may not write is left out; an access that reaches it is an escape. (Run 335: giving the driver a whole run made it fault inside vkAllocateMemory.)";
    M4 = "M4", "D964", "generations",
        "The memory manager keeps the runs and a generation that moves when they change. The backend maps again only when the generation has moved, and drops a mapping before its reservation's host memory is released.";
    M5 = "M5", "D968", "revisits",
        "A left-out piece is looked at again whenever a host page is committed or reprotected, and what has become committed and read-write in it is mapped. A release waits for any dispatch still reading the mapping.";
    T1 = "T1", "D964", "chunks",
        "A table keyed by chunk turns a guest address into a device address. A chunk is a power of two, at most 64 KiB, and never coarser than any mapping's alignment, so one chunk lies in one mapping.";
    T2 = "T2", "D961", "table",
        "The slots form a bounded-probe hash table (as D961's pages do): a key's probes are consecutive 16-byte slots from its home slot, at most a fixed bound of them. An insert that finds no room within the bound grows the table; it never leaves a mapped chunk unreachable.";
    T3 = "T3", "D964", "push block",
        "The push block names the table at DEVICE_TABLE_PUSH_WORD.";
    T4 = "T4", "D964", "misses",
        "An address no mapping holds reads zero and stores nothing, and is noted as an escape.";
    T5 = "T5", "D969", "one helper",
        "The lookup is one helper function that every access calls. An access's words share two lookups: the chunk of its first byte and the chunk of its last byte.";
    T6 = "T6", "D969", "placement",
        "The table lies in device-local memory where the device has room for it.";
    W1 = "W1", "D964", "what goes by device address",
        "Global and flat accesses, and scalar and untyped buffer accesses whose descriptor or base the host could not resolve. Buffers the host did resolve stay bound (O-rules), and a format access through them converts by the format the host read.";
    W2 = "W2", "D967", "format accesses",
        "A format load through a descriptor the host cannot resolve converts by the format the descriptor names, decoded as the module runs; swizzled and lane-indexed addressing is carried out. A format store through such a descriptor is still refused.";
    W3 = "W3", "D970", "rays and image descriptors",
        "A ray intersection reads its node by device address. A scalar load of an image descriptor from a table is read by device address too.";
    P1 = "P1", "D964", "apertures",
        "A flat access routes by its address's high 32 bits before it reaches guest memory: 0x80000000 reaches the workgroup's local data share (LDS), 0x70000000 the lane's private (scratch) memory; any other value reaches guest memory.";
    C1 = "C1", "D969", "dirty marks",
        "A device store passes the write-watch and page protection by, so each store marks its chunk's slot. The marks lie apart from the table, in host memory, one word per slot.";
    C2 = "C2", "D964", "hand-off",
        "After the dispatch the marked chunks go to the command processor, which treats each as a host write: a protected target over it loses its trust (D720), and the write-watch notes its pages written (D824).";
    C3 = "C3", "D964", "before the dispatch",
        "The frame pending on the device and every deferred copy are written into guest memory first, because the dispatch may read anywhere.";
    L1 = "L1", "D964", "known limit",
        "A resolved buffer is still bound and written back after the dispatch. Where the dispatch also stores to the same bytes by device address, the write-back lands last. The engine must detect and report this case when it happens.";
}

/// Where the word for [`Rule::T3`] lives: the push-block word index that holds the chunk table's
/// device address (two words, low then high). The records name the constant but not its value; 30
/// is ours: the last two words of a 128-byte push block (Vulkan's guaranteed minimum), so that a
/// program's own push words keep their indices from 0.
pub const DEVICE_TABLE_PUSH_WORD: u32 = 30;

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_are_unique() {
        for rule in Rule::ALL {
            assert_eq!(Rule::from_id(rule.id()), Some(*rule));
            assert!(rule.decision().starts_with('D'));
            assert!(!rule.text().is_empty());
        }
        let mut ids: Vec<_> = Rule::ALL.iter().map(|r| r.id()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), Rule::ALL.len());
        assert_eq!(
            Rule::ALL.len(),
            31,
            "there are 31 rules: O1–O11, A1, M1–M5, T1–T6, W1–W3, P1, C1–C3, L1"
        );
    }

    #[test]
    fn rule_serialises_as_its_id() {
        assert_eq!(
            serde_json::to_string(&Rule::O7).ok().as_deref(),
            Some("\"O7\"")
        );
    }
}
