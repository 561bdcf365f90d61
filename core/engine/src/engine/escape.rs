//! Escapes (T4): an access that reached a guest address no mapping holds read zero or stored
//! nothing; each is explained by what kept the address out (no reservation, not readable, a
//! left-out piece, a dropped mapping, or, a table defect, the probe bound) and what would let it in.

use super::Engine;
use super::events::Aspect;
use crate::addr::ByteRange;
use crate::backend::Backend;
use crate::input::{Access, Op};
use crate::report::{Escape, EscapeClass, LeftOutReason, LookupTrace};
use crate::rules::Rule;

impl<B: Backend> Engine<B> {
    /// Which aspect of a page's state kept it out, for naming the event that set it.
    fn left_out_aspect(&self, reason: Option<LeftOutReason>, at: u64) -> Aspect {
        match reason {
            Some(LeftOutReason::NotCommitted) => Aspect::Commit,
            Some(LeftOutReason::NotPrivate) => Aspect::Backing,
            _ if self.memory.page_at(at).is_some_and(|p| !p.guest.writable) => Aspect::View,
            _ => Aspect::Protection,
        }
    }

    /// T4 (or T2 at the probe bound): access `index` reached `at`, which no mapping held.
    ///
    /// `landed` holds the bytes of the access that did reach guest memory (an access whose words
    /// straddle a mapped and an unmapped chunk escapes in part), and `values` what it read or wrote,
    /// so that the sentence says which bytes escaped and which did not.
    pub(super) fn escape(
        &self,
        index: usize,
        a: &Access,
        at: u64,
        lookup: LookupTrace,
        landed: &[ByteRange],
        values: &[u32],
    ) -> Escape {
        let (class, reason, since) = self.mappings.classify_miss(&self.memory, at);
        let (below, above) = self.mappings.neighbours(at);
        let near = match (below, above) {
            (Some(b), Some(u)) => {
                format!("; nearest mappings {} below and {} above", b.guest, u.guest)
            }
            (Some(b), None) => format!("; nearest mapping {} below", b.guest),
            (None, Some(u)) => format!("; nearest mapping {} above", u.guest),
            (None, None) => "; nothing is mapped".to_owned(),
        };
        let verb = escape_verb(a, at, landed, values);
        let (what, would) = match class {
            EscapeClass::NoReservation => (
                format!("no reservation holds {at:#x}"),
                format!("would reach guest memory if a reservation held {at:#x}"),
            ),
            EscapeClass::NotReadable => (
                format!("the guest left the page of {at:#x} unreadable, so no readable run holds it (M1)"),
                "would reach guest memory if the guest left the page readable".to_owned(),
            ),
            EscapeClass::LeftOut => (
                format!(
                    "the page of {at:#x} lies in a piece left out of its readable run: {}{} (M3){}",
                    reason.map_or("not mappable", |r| r.phrase()),
                    match self.memory.page_at(at) {
                        Some(p) if reason == Some(LeftOutReason::NotReadWrite) && !p.guest.writable => {
                            ", because the guest may not write it"
                        }
                        Some(p) if p.guarded && p.protection == crate::input::HostProtection::ReadWrite => {
                            ", because a write-watch guard holds it read-only (D824)"
                        }
                        _ => "",
                    },
                    match self.page_events.at(self.left_out_aspect(reason, at), at) {
                        Some((w, name)) => format!(
                            ", as event {} ({name}) before dispatch {} left it",
                            w.event, w.before_dispatch
                        ),
                        None => String::new(),
                    }
                ),
                "would reach guest memory once the page is committed, private and read-write (M5 maps it then)".to_owned(),
            ),
            EscapeClass::Dropped => {
                let released = self.memory.reservation_at(at).is_none();
                (
                    format!(
                        "the page of {at:#x} was mapped, and its mapping was dropped at event {} before dispatch {} when its reservation was {} (M4)",
                        since.map_or(0, |w| w.event),
                        since.map_or(0, |w| w.before_dispatch),
                        if released { "released" } else { "decommitted" }
                    ),
                    if released {
                        "would reach guest memory if a reservation held it again and the guest left it readable".to_owned()
                    } else {
                        "would reach guest memory once the page is committed again (M5 maps it then)".to_owned()
                    },
                )
            }
            EscapeClass::ProbeBound => (
                format!("the chunk of {at:#x} is mapped but its lookup stopped at the probe bound: a table defect (T2)"),
                "would reach guest memory if the table kept every mapped chunk within the probe bound (T2)".to_owned(),
            ),
        };
        let rule = if class == EscapeClass::ProbeBound {
            Rule::T2
        } else {
            Rule::T4
        };
        Escape {
            access: index,
            lane: a.lane,
            wave: a.wave,
            pc: a.pc,
            address: at,
            op: a.op,
            class,
            rule,
            decision: rule.decision().into(),
            reason,
            since,
            message: format!(
                "access {index} (lane {}, pc {:#x}, {:?} {:?}) escaped at {at:#x} and {verb}: {what}{near}",
                a.lane, a.pc, a.kind, a.op
            ),
            would_run_if: would,
            lookup,
        }
    }
}

/// What the access did at its escape: all of it ("read zero", "stored nothing"), or, when some of
/// its bytes landed, which bytes escaped and which did not.
fn escape_verb(a: &Access, at: u64, landed: &[ByteRange], values: &[u32]) -> String {
    let done = if a.op == Op::Load {
        "read zero"
    } else {
        "stored nothing"
    };
    if landed.is_empty() {
        return done.to_owned();
    }
    // The access's bytes: from its first landed or escaped byte, `size_bytes` long.
    let start = landed.first().map_or(at, |l| l.start.min(at));
    let whole = ByteRange::new(start, start.saturating_add(u64::from(a.size_bytes)));
    let mut escaped: Vec<String> = Vec::new();
    let mut from = whole.start;
    for l in landed {
        if l.start > from {
            escaped.push(ByteRange::new(from, l.start).to_string());
        }
        from = from.max(l.end);
    }
    if from < whole.end {
        escaped.push(ByteRange::new(from, whole.end).to_string());
    }
    let landed_text: Vec<String> = landed.iter().map(ToString::to_string).collect();
    let values_text: Vec<String> = values.iter().map(|v| format!("{v:#x}")).collect();
    format!(
        "bytes {} reached no mapping and {done}, while bytes {} reached guest memory{}",
        escaped.join(", "),
        landed_text.join(", "),
        if a.op == Op::Load {
            format!("; the load returned [{}]", values_text.join(", "))
        } else {
            " and were stored".to_owned()
        }
    )
}
