//! "What if": a recorded session's reports under other planning limits, re-planned without
//! re-running execution where the outcome cannot depend on it, and said where it can.
//!
//! [`WhatIf::step`] takes each dispatch's input and its recorded report, in order, and returns the
//! report the engine would have made under the new limits, with how much of it is known
//! ([`Compared`]). Only `min_storage_buffer_offset_alignment` (O7) and `max_storage_buffer_range`
//! (O5) are planning limits: the planner reads them and nothing else does ([`PLAN_LIMITS`]); every
//! other limit changes mapping, table or execution, which need the engine's state at the dispatch,
//! and [`needs_replay`] names them.
//!
//! Exactly when a dispatch is known without running it:
//! - while no earlier dispatch has *diverged* (below), the engine's state before the dispatch is
//!   the recorded session's, so a dispatch whose plan (mode, bindings, sets, refusals) is unchanged
//!   runs exactly as recorded: its report is the recorded one;
//! - a dispatch refused under the new limits runs nothing: its report is the plan and "not run"
//!   (its deferred copies, counted from the recorded report, stay deferred);
//! - a dispatch refused both times is not run either way.
//!
//! A dispatch *diverges* when it ran as recorded and now runs otherwise, or runs now and was
//! refused: its run (values, escapes, marks, write-back, mappings, table) is not known without
//! the engine's state, and what it writes (or no longer writes) can change every later dispatch's.
//! A dispatch that was bound and is now refused does not diverge when its recorded run left the
//! state as it found it: no C3 copy written, no word written back, no mark, no hand-off, no store
//! by device address. From the first divergence on, each dispatch's plan is still exact (the plan
//! reads only the input and the limits), and its run is not compared ([`Compared::PlanOnly`]): a
//! full replay (`dispatchscope diff --replay`) compares it.
//!
//! The reports this assumes are the engine's own: a recorded report whose plan a re-plan under its
//! own limits does not reproduce (a report from another recorder) is [`WhatIfError::NotReproduced`].
//!
//! A what-if over a whole session, re-planned or replayed, is [`of_session`]: the command line's
//! `diff FILE --LIMIT` and the window's What if… both make it there, from a session each holds in
//! its own way ([`Recorded`]).

use thiserror::Error;

use crate::diff::{Compared, SessionDiff, diff_sessions};
use dispatchscope_core::engine::{EngineError, Planned, Replanner, accesses_not_run};
use dispatchscope_core::input::{DeviceLimits, DispatchInput, Op};
use dispatchscope_core::report::{BeforeDispatch, DispatchReport, Mode, Route};

/// The limits a what-if re-plans without running: the only two the planner alone reads.
pub const PLAN_LIMITS: [&str; 2] = [
    "min_storage_buffer_offset_alignment",
    "max_storage_buffer_range",
];

/// The limits of `new` that differ from `base` and are not [`PLAN_LIMITS`] (the device's name
/// aside): each needs the engine's state, so a what-if over them replays the session.
pub fn needs_replay(base: &DeviceLimits, new: &DeviceLimits) -> Vec<&'static str> {
    let mut v = Vec::new();
    let mut differs = |name: &'static str, d: bool| {
        if d {
            v.push(name);
        }
    };
    differs(
        "host_page_bytes",
        base.host_page_bytes != new.host_page_bytes,
    );
    differs("lds_aperture", base.lds_aperture != new.lds_aperture);
    differs(
        "scratch_aperture",
        base.scratch_aperture != new.scratch_aperture,
    );
    differs("probe_bound", base.probe_bound != new.probe_bound);
    differs("lds_bytes", base.lds_bytes != new.lds_bytes);
    differs(
        "scratch_bytes_per_lane",
        base.scratch_bytes_per_lane != new.scratch_bytes_per_lane,
    );
    differs(
        "device_local_table_budget_bytes",
        base.device_local_table_budget_bytes != new.device_local_table_budget_bytes,
    );
    v
}

/// The planning limits a what-if sets; `None` keeps the recorded value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlanLimits {
    /// minStorageBufferOffsetAlignment (O7).
    pub min_storage_buffer_offset_alignment: Option<u64>,
    /// maxStorageBufferRange (O5).
    pub max_storage_buffer_range: Option<u64>,
}

impl PlanLimits {
    /// `base` with these limits set.
    pub fn apply(&self, base: &DeviceLimits) -> DeviceLimits {
        let mut l = base.clone();
        if let Some(a) = self.min_storage_buffer_offset_alignment {
            l.min_storage_buffer_offset_alignment = a;
        }
        if let Some(m) = self.max_storage_buffer_range {
            l.max_storage_buffer_range = m;
        }
        l
    }
}

/// Why a what-if could not go on.
#[derive(Debug, Error)]
pub enum WhatIfError {
    /// The engine refused the input or the limits.
    #[error("dispatch at position {position}: {error}")]
    Engine {
        /// The dispatch's position in the session.
        position: usize,
        /// The engine's error.
        error: EngineError,
    },
    /// The recorded report is not what the engine plans of its input under its own limits.
    #[error(
        "dispatch at position {position}: its recorded report is not what the engine plans of its input under the limits it records, so it cannot be re-planned without a replay"
    )]
    NotReproduced {
        /// The dispatch's position in the session.
        position: usize,
    },
}

/// Where a what-if stopped knowing the run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Divergence {
    /// The first diverging dispatch's position.
    pub position: usize,
    /// Why it diverged, one sentence.
    pub why: String,
}

/// A what-if over one session, dispatch by dispatch.
#[derive(Debug, Default)]
pub struct WhatIf {
    limits: PlanLimits,
    replanner: Replanner,
    diverged: Option<Divergence>,
}

fn same_plan(p: &Planned, r: &DispatchReport) -> bool {
    p.mode == r.mode
        && p.mode_reason == r.mode_reason
        && p.slots == r.slots
        && p.sets == r.sets
        && p.refusals == r.refusals
}

/// Whether a recorded run left the engine's state as it found it (see the module docs).
fn left_state_alone(r: &DispatchReport) -> bool {
    r.mode == Mode::Bound
        && r.before.copies.is_empty()
        && r.write_back.iter().all(|w| w.words.is_empty())
        && r.marks.is_empty()
        && r.hand_off.pages_noted_written.is_empty()
        && r.hand_off.targets_distrusted.is_empty()
        && !r
            .accesses
            .iter()
            .any(|a| a.op == Op::Store && matches!(a.route, Route::Device { .. }))
}

impl WhatIf {
    /// A what-if under `limits`.
    pub fn new(limits: PlanLimits) -> Self {
        Self {
            limits,
            ..Self::default()
        }
    }

    /// The first divergence so far, if there was one.
    pub fn divergence(&self) -> Option<&Divergence> {
        self.diverged.as_ref()
    }

    /// The report of the dispatch at `position` under the new limits, from its input and its
    /// recorded report, and what of it is known. Call it for every dispatch, in order.
    pub fn step(
        &mut self,
        position: usize,
        input: &DispatchInput,
        recorded: &DispatchReport,
    ) -> Result<(DispatchReport, Compared), WhatIfError> {
        let engine = |error| WhatIfError::Engine { position, error };
        let limits = self.limits.apply(&recorded.device);
        let planned = self.replanner.plan(input, &limits).map_err(engine)?;
        let mut report = recorded.clone();
        report.device = limits;
        if same_plan(&planned, recorded) {
            return Ok((report, self.compared()));
        }
        let own = self
            .replanner
            .plan(input, &recorded.device)
            .map_err(engine)?;
        if !same_plan(&own, recorded) {
            return Err(WhatIfError::NotReproduced { position });
        }
        let was = recorded.mode;
        let now = planned.mode;
        let diverges = match (was, now) {
            (Mode::Refused, Mode::Refused) => None,
            (_, Mode::Refused) if left_state_alone(recorded) => None,
            (_, Mode::Refused) => Some(format!(
                "dispatch {} ran {} and is now refused: what it wrote before is no longer written, so later dispatches' runs can change",
                recorded.index,
                was.as_str()
            )),
            (Mode::Refused, _) => Some(format!(
                "dispatch {} was refused and now runs {}: its run needs the engine's state",
                recorded.index,
                now.as_str()
            )),
            _ => Some(format!(
                "dispatch {} runs {} with other bindings (was {}): its run needs the engine's state",
                recorded.index,
                now.as_str(),
                was.as_str()
            )),
        };
        if now == Mode::Refused && self.diverged.is_none() {
            // Nothing runs: every copy deferred before the dispatch stays deferred.
            let deferred = recorded.before.still_deferred + recorded.before.copies.len();
            report.before = BeforeDispatch {
                still_deferred: deferred,
                ..BeforeDispatch::default()
            };
            report.mappings = None;
            report.table = None;
            report.accesses = accesses_not_run(input);
            report.escapes.clear();
            report.marks.clear();
            report.hand_off = Default::default();
            report.write_back.clear();
            report.hazards.clear();
        }
        report.mode = planned.mode;
        report.mode_reason = planned.mode_reason;
        report.slots = planned.slots;
        report.sets = planned.sets;
        report.refusals = planned.refusals;
        report.counts = dispatchscope_core::engine::counts_of(&report);
        let compared = match (&diverges, &self.diverged) {
            (Some(why), None) => {
                // A dispatch now refused is known even as it diverges: it runs nothing.
                let here = if now == Mode::Refused {
                    Compared::Everything
                } else {
                    Compared::PlanOnly {
                        why: format!("not re-run: {why}"),
                    }
                };
                self.diverged = Some(Divergence {
                    position,
                    why: why.clone(),
                });
                here
            }
            _ => self.compared(),
        };
        Ok((report, compared))
    }

    fn compared(&self) -> Compared {
        match &self.diverged {
            None => Compared::Everything,
            Some(d) => Compared::PlanOnly {
                why: format!(
                    "not re-run: a what-if re-plans without running, and the first divergence ({}) can change this dispatch's run",
                    d.why
                ),
            },
        }
    }
}

/// What a re-plan of a whole session came to ([`Recorded::re_plan`]).
#[derive(Clone, Debug)]
pub enum RePlan<M> {
    /// Made: the diff, and what the caller keeps.
    Made(SessionDiff, M),
    /// The re-plan cannot go on, for the reason given: the what-if replays the session instead.
    ReplayInstead(String),
}

/// A recorded session a what-if is asked of, as its caller holds it: the command line reads it
/// from a path (`dispatchscope diff FILE --LIMIT`), the window from the session it shows (Session ▸
/// What if…). [`of_session`] makes the what-if from it, the one way both make it.
pub trait Recorded {
    /// What the caller keeps of the session under the new limits, beside the diff (the window: the
    /// session it shows as B); its reports are [`Recorded::reports`].
    type Made;
    /// A trouble that ends the what-if (a session that cannot be read again, an input the engine
    /// refuses).
    type Error;

    /// Every dispatch re-planned from its recorded input under `plan` without running it
    /// ([`WhatIf::step`]): the diff and what the caller keeps; or, where the re-plan cannot go on
    /// (a capture that recorded no report, reports another recorder made), why not, and the
    /// what-if replays the session instead.
    fn re_plan(&mut self, plan: PlanLimits) -> Result<RePlan<Self::Made>, Self::Error>;

    /// The session's recorded reports, and the session replayed whole on the CPU reference under
    /// `limits`.
    fn replay(
        self,
        limits: &DeviceLimits,
    ) -> Result<(Vec<DispatchReport>, Self::Made), Self::Error>;

    /// The reports of what [`Recorded::replay`] made, in order.
    fn reports(made: &Self::Made) -> &[DispatchReport];
}

/// A what-if over a whole session: `session` (recorded under `base`) under `limits`, of which
/// `plan` are the planning limits the caller set.
///
/// Where only planning limits change, each dispatch is re-planned from its recorded input
/// ([`Recorded::re_plan`]); where a limit needs the engine's state ([`needs_replay`]), where
/// `forced_replay` says why the caller wants a replay (the command line's `--replay`), or where the
/// re-plan cannot go on, the session is replayed whole on the CPU reference
/// ([`Recorded::replay`]), every decision is compared, and the diff's notes say why.
pub fn of_session<S: Recorded>(
    mut session: S,
    base: &DeviceLimits,
    limits: &DeviceLimits,
    plan: PlanLimits,
    forced_replay: Option<&str>,
) -> Result<(SessionDiff, S::Made), S::Error> {
    let state = needs_replay(base, limits);
    let why = match forced_replay {
        Some(why) => why.to_owned(),
        None if !state.is_empty() => format!(
            "{} change the mapping or the table, which need the engine's state",
            state.join(", ")
        ),
        None => match session.re_plan(plan)? {
            RePlan::Made(diff, made) => return Ok((diff, made)),
            RePlan::ReplayInstead(why) => format!("the re-plan could not go on: {why}"),
        },
    };
    let (before, made) = session.replay(limits)?;
    let mut diff = diff_sessions(&before, S::reports(&made));
    diff.notes.push(format!(
        "what if: the session replayed whole on the CPU reference ({why}); every decision is compared"
    ));
    Ok((diff, made))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a test fails by panicking")]

    use super::*;
    use crate::diff::diff_sessions;

    /// A session whose re-plan answers `re_plan`, and that says which of its two ways ran.
    struct Fake {
        re_plan: Option<RePlan<Vec<DispatchReport>>>,
        asked: Vec<&'static str>,
    }

    impl Recorded for &mut Fake {
        type Made = Vec<DispatchReport>;
        type Error = String;

        fn re_plan(&mut self, _: PlanLimits) -> Result<RePlan<Self::Made>, String> {
            self.asked.push("re-plan");
            self.re_plan.take().ok_or_else(|| "asked twice".to_owned())
        }

        fn replay(self, _: &DeviceLimits) -> Result<(Vec<DispatchReport>, Self::Made), String> {
            self.asked.push("replay");
            Ok((Vec::new(), Vec::new()))
        }

        fn reports(made: &Self::Made) -> &[DispatchReport] {
            made
        }
    }

    fn ask(
        re_plan: RePlan<Vec<DispatchReport>>,
        limits: &DeviceLimits,
        forced: Option<&str>,
    ) -> (Vec<&'static str>, Vec<String>) {
        let mut fake = Fake {
            re_plan: Some(re_plan),
            asked: Vec::new(),
        };
        let base = DeviceLimits::default();
        let (diff, _) =
            of_session(&mut fake, &base, limits, PlanLimits::default(), forced).unwrap();
        (fake.asked, diff.notes)
    }

    fn made() -> RePlan<Vec<DispatchReport>> {
        let mut d = diff_sessions(&[], &[]);
        d.notes.push("re-planned".into());
        RePlan::Made(d, Vec::new())
    }

    #[test]
    fn planning_limits_alone_re_plan_and_never_replay() {
        let limits = DeviceLimits {
            min_storage_buffer_offset_alignment: 256,
            ..DeviceLimits::default()
        };
        assert_eq!(
            ask(made(), &limits, None),
            (vec!["re-plan"], vec!["re-planned".into()])
        );
    }

    #[test]
    fn a_limit_that_needs_the_engines_state_replays_without_re_planning() {
        let limits = DeviceLimits {
            probe_bound: 2,
            ..DeviceLimits::default()
        };
        let (asked, notes) = ask(made(), &limits, None);
        assert_eq!(asked, vec!["replay"]);
        assert_eq!(
            notes,
            vec!["what if: the session replayed whole on the CPU reference (probe_bound change the mapping or the table, which need the engine's state); every decision is compared".to_owned()]
        );
    }

    #[test]
    fn a_replay_the_caller_asks_for_says_why() {
        let (asked, notes) = ask(made(), &DeviceLimits::default(), Some("--replay"));
        assert_eq!(asked, vec!["replay"]);
        assert!(notes[0].contains("(--replay)"), "{notes:?}");
    }

    #[test]
    fn a_re_plan_that_cannot_go_on_replays_and_says_why() {
        let (asked, notes) = ask(
            RePlan::ReplayInstead("dispatch 3 recorded no report".into()),
            &DeviceLimits::default(),
            None,
        );
        assert_eq!(asked, vec!["re-plan", "replay"]);
        assert!(
            notes[0].contains("(the re-plan could not go on: dispatch 3 recorded no report)"),
            "{notes:?}"
        );
    }
}
