//! Escapes (T4): an access that reached a guest address no mapping holds read zero or stored
//! nothing; each is explained by what kept the address out (no reservation, not readable, a
//! left-out piece, a dropped mapping, or, a table defect, the probe bound) and what would let it in.

use super::Engine;
use crate::backend::Backend;
use crate::input::{Access, Op};
use crate::report::{Escape, EscapeClass, LookupTrace};
use crate::rules::Rule;

impl<B: Backend> Engine<B> {
    /// T4 (or T2 at the probe bound): access `index` reached `at`, which no mapping held.
    pub(super) fn escape(&self, index: usize, a: &Access, at: u64, lookup: LookupTrace) -> Escape {
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
        let verb = if a.op == Op::Load {
            "read zero"
        } else {
            "stored nothing"
        };
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
                    "the page of {at:#x} lies in a piece left out of its readable run: {} (M3)",
                    reason.map_or("not mappable", |r| r.phrase())
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
