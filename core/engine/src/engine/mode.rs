//! The mode (A1, W2): bound by D953, device-addressed by D964, or refused, with the sentence that
//! says why. A dispatch with reasons the host cannot know (D753, D758, D914 …) runs
//! device-addressed unless it is a graphics dispatch (A1) or stores by format through a descriptor
//! the host could not resolve (W2); any refusal, the planner's (O5, O7, O11) included, refuses it.

use super::validate::Checked;
use crate::input::{AccessKind, DispatchInput, DispatchKind, Op};
use crate::report::{Mode, Refusal, SlotBinding, Value};
use crate::rules::Rule;

/// How a dispatch will run, and every refusal that decided it.
#[derive(Debug)]
pub(super) struct Decision {
    /// Bound, device-addressed or refused.
    pub mode: Mode,
    /// Why, in one sentence.
    pub reason: String,
    /// The planner's refusals, then A1's, then W2's.
    pub refusals: Vec<Refusal>,
}

/// A1 and W2 over the planner's refusals: the dispatch's mode.
pub(super) fn choose(
    input: &DispatchInput,
    checked: &Checked,
    bindings: &[SlotBinding],
    mut refusals: Vec<Refusal>,
) -> Decision {
    let device_addressed = !input.reasons.is_empty();
    if device_addressed && input.kind == DispatchKind::Graphics {
        refusals.push(graphics_refusal(input));
    }
    if device_addressed {
        refusals.extend(format_store_refusals(input, checked, bindings));
    }
    let mode = if !refusals.is_empty() {
        Mode::Refused
    } else if device_addressed {
        Mode::DeviceAddressed
    } else {
        Mode::Bound
    };
    Decision {
        mode,
        reason: mode_reason(input, mode, &refusals),
        refusals,
    }
}

/// A1 runs only compute dispatches device-addressed: a graphics one the host cannot know is refused.
fn graphics_refusal(input: &DispatchInput) -> Refusal {
    let reasons: Vec<String> = input
        .reasons
        .iter()
        .map(|r| format!("{r:?} ({})", r.sentence()))
        .collect();
    Refusal {
        rule: Rule::A1,
        decision: Rule::A1.decision().into(),
        slot: None,
        values: vec![
            Value::hex("program", input.program),
            Value::text("reasons", reasons.join(", ")),
        ],
        message: format!(
            "graphics program {:#x} has ranges the host cannot know ({}); A1 runs only compute dispatches device-addressed",
            input.program,
            reasons.join(", ")
        ),
        would_run_if: "would run device-addressed if it were a compute dispatch, or bound if the host could know its ranges".into(),
        ours: false,
    }
}

/// W2: a format store through a descriptor the host could not resolve is refused, one refusal each.
/// Whether the descriptor is resolved is the planner's word (the slot's binding), not the slot's own
/// flag: a D937 copy follows the slot it copies everywhere (O3), so a copy of an unresolved slot is
/// unresolved whatever its input says, and a store through it is refused as one through that slot.
fn format_store_refusals(
    input: &DispatchInput,
    checked: &Checked,
    bindings: &[SlotBinding],
) -> Vec<Refusal> {
    let mut out = Vec::new();
    for (i, a) in input.accesses.iter().enumerate() {
        if a.kind != AccessKind::FormatBuffer || a.op != Op::Store {
            continue;
        }
        let Some(pos) = a.slot.and_then(|s| checked.position(input, s)) else {
            continue;
        };
        let slot = &input.slots[pos];
        let resolved = bindings.get(pos).map_or(slot.resolved, |b| b.resolved);
        if resolved {
            continue;
        }
        // The slot whose descriptor decided it: the end of the copy chain (O3).
        let copy_of = copied_slot(input, checked, pos);
        let through = match copy_of {
            Some(of) => format!(
                "slot {}, an exact copy (D937) of slot {of}, whose descriptor the host could not resolve; a copy follows its slot everywhere (O3), this refusal included",
                slot.slot
            ),
            None => format!(
                "slot {}, whose descriptor the host could not resolve",
                slot.slot
            ),
        };
        out.push(Refusal {
            rule: Rule::W2,
            decision: Rule::W2.decision().into(),
            slot: Some(slot.slot),
            values: vec![
                Value::int("access", i as u64),
                Value::hex("pc", a.pc),
                Value::text("format", slot.format.map_or("none".into(), |f| format!("{f:?}"))),
            ],
            message: format!(
                "access {i} (pc {:#x}) is a format store through {through}; D967 carries out format loads through such a descriptor, not stores",
                a.pc
            ),
            would_run_if: format!(
                "would run if the host resolved slot {}'s descriptor (the store would convert by the format the host read), or if the store were untyped",
                copy_of.unwrap_or(slot.slot)
            ),
            ours: false,
        });
    }
    out
}

/// The slot at the end of slot `pos`'s D937 copy chain, if it is a copy (validation has refused
/// chains that loop or name missing slots).
fn copied_slot(input: &DispatchInput, checked: &Checked, pos: usize) -> Option<u32> {
    let mut at = pos;
    for _ in 0..input.slots.len() {
        match input.slots[at]
            .alias_of
            .and_then(|of| checked.position(input, of))
        {
            Some(next) => at = next,
            None => break,
        }
    }
    (at != pos).then(|| input.slots[at].slot)
}

/// The sentence that says why the dispatch runs as it does.
fn mode_reason(input: &DispatchInput, mode: Mode, refusals: &[Refusal]) -> String {
    match mode {
        Mode::Refused => {
            let rules: Vec<&str> = refusals.iter().map(|r| r.rule.id()).collect();
            format!("refused by {}", rules.join(", "))
        }
        Mode::Bound => "the host knew every range before the dispatch: bound by D953".into(),
        Mode::DeviceAddressed => {
            let reasons: Vec<String> = input
                .reasons
                .iter()
                .map(|r| format!("{r:?}: {}", r.sentence()))
                .collect();
            format!(
                "A1: the host could not know its ranges ({}), so it runs device-addressed instead of refused",
                reasons.join("; ")
            )
        }
    }
}
