//! The planning phases alone (validate, O1–O11, A1/W2), for a "what if" over a recorded session:
//! [`Replanner::plan`] decides what [`Engine::dispatch`](super::Engine::dispatch) would decide of a
//! dispatch's mode, bindings, sets and refusals under other limits, without memory, mappings,
//! table or backend.
//!
//! The engine's own dispatch goes through the same function (`plan_phases`), so a re-plan can never
//! say what the engine would not.
//! The plan reads only the dispatch's input and the limits: `min_storage_buffer_offset_alignment`
//! (O7) and `max_storage_buffer_range` (O5) are read by the planner and by nothing else, so under
//! other values of those two a dispatch whose plan is unchanged runs exactly as it ran.

use super::mode;
use super::validate::{self, Checked};
use super::{EngineError, accesses};
use crate::input::{DeviceLimits, DispatchInput};
use crate::overlap::{BindPlan, Planner};
use crate::report::{AccessReport, BindSet, Mode, Refusal, SlotBinding};

/// What the planning phases decided of one dispatch: the report's plan-level fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Planned {
    /// Bound, device-addressed or refused.
    pub mode: Mode,
    /// Why, in one sentence (the report's `mode_reason`).
    pub mode_reason: String,
    /// Every slot's binding.
    pub slots: Vec<SlotBinding>,
    /// Sets of two or more slots.
    pub sets: Vec<BindSet>,
    /// The planner's refusals, then A1's, then W2's.
    pub refusals: Vec<Refusal>,
}

/// Re-plans dispatches one after another, keeping the planner's working arrays between them.
#[derive(Debug, Default)]
pub struct Replanner {
    planner: Planner,
}

impl Replanner {
    /// A re-planner with empty working arrays.
    pub fn new() -> Self {
        Self::default()
    }

    /// What the engine would plan for `input` under `limits`: a malformed input (or one the limits
    /// make malformed) is the engine's own named error.
    pub fn plan(
        &mut self,
        input: &DispatchInput,
        limits: &DeviceLimits,
    ) -> Result<Planned, EngineError> {
        limits.check()?;
        plan_phases(&mut self.planner, input, limits).map(|(_, p)| p)
    }
}

/// The accesses of a dispatch that did not run, as its report lists them (each not run, A1).
pub fn accesses_not_run(input: &DispatchInput) -> Vec<AccessReport> {
    accesses::not_run(input)
}

/// Validation, the planner and the mode: the first three phases of every dispatch.
pub(super) fn plan_phases(
    planner: &mut Planner,
    input: &DispatchInput,
    limits: &DeviceLimits,
) -> Result<(Checked, Planned), EngineError> {
    let checked = validate::check(input, limits)?;
    let BindPlan {
        sets,
        bindings,
        refusals,
    } = planner.plan(
        &input.slots,
        &checked.bases,
        limits,
        input.page_buffer.as_ref(),
    );
    let decision = mode::choose(input, &checked, &bindings, refusals);
    Ok((
        checked,
        Planned {
            mode: decision.mode,
            mode_reason: decision.reason,
            slots: bindings,
            sets,
            refusals: decision.refusals,
        },
    ))
}
