//! A what-if over a session on disk: each dispatch's recorded input and report, re-planned under
//! other planning limits by `dispatchscope_analysis::what_if::WhatIf`, and the diff against the
//! recording (what `dispatchscope diff FILE --min-storage-buffer-offset-alignment 256` prints, and
//! what the app's What-if dialog shows).
//!
//! A capture's records are read through its index one DISPATCH record at a time; its MEMORY
//! records (the guest contents) are never read, which is why a what-if over a 1 GiB capture costs
//! what its reports cost, not what its memory does.

use dispatchscope_analysis::diff::{Compared, SessionDiff, diff_sessions_with};
use dispatchscope_analysis::what_if::{Divergence, PlanLimits, WhatIf, WhatIfError};
use dispatchscope_core::input::DispatchInput;
use dispatchscope_core::report::DispatchReport;

use crate::session::{CaptureFile, SessionError};

/// A session re-planned: the recorded reports, the reports under the new limits, and what of each
/// is known.
#[derive(Clone, Debug, Default)]
pub struct RePlanned {
    /// The recorded reports, in order.
    pub recorded: Vec<DispatchReport>,
    /// The reports under the new limits (their runs as recorded where not known: see `compared`).
    pub now: Vec<DispatchReport>,
    /// What of each dispatch is known (the run, or the plan only).
    pub compared: Vec<Compared>,
    /// The first dispatch whose run needs the engine's state, if one did.
    pub divergence: Option<Divergence>,
}

impl RePlanned {
    /// The diff of the recording against the re-plan, with the notes that say how it was made.
    pub fn diff(&self) -> SessionDiff {
        let mut d = diff_sessions_with(&self.recorded, &self.now, |j| {
            self.compared
                .get(j)
                .cloned()
                .unwrap_or(Compared::Everything)
        });
        d.notes.push(
            "what if: re-planned from each dispatch's recorded input without running it (the planning limits are read by the planner alone)".into(),
        );
        d.notes.push(match &self.divergence {
            None => "no dispatch diverged: every run is as recorded, so every decision is compared"
                .into(),
            Some(v) => format!(
                "from position {} on, only the plan (mode, bindings, sets, refusals) is compared: {}; --replay compares the runs too",
                v.position, v.why
            ),
        });
        d
    }
}

/// Why a capture could not be re-planned.
#[derive(Debug, thiserror::Error)]
pub enum RePlanError {
    /// A record could not be read.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// A DISPATCH record carries no report to re-plan against.
    #[error("dispatch {0} recorded no report to re-plan against")]
    NoReport(usize),
    /// The engine refused an input or the limits, or a report is not the engine's.
    #[error(transparent)]
    WhatIf(#[from] WhatIfError),
}

impl RePlanError {
    /// Whether a full replay can stand in for the re-plan: a capture that recorded no report, or
    /// reports another recorder made; not a record that cannot be read, nor an input or limits the
    /// engine refuses (a replay would meet them too).
    pub fn replay_instead(&self) -> bool {
        !matches!(
            self,
            RePlanError::Session(_) | RePlanError::WhatIf(WhatIfError::Engine { .. })
        )
    }
}

/// Re-plans `records` (each dispatch's input and recorded report, in order) under `limits`.
pub fn re_plan<'a>(
    records: impl IntoIterator<Item = (&'a DispatchInput, DispatchReport)>,
    limits: PlanLimits,
) -> Result<RePlanned, WhatIfError> {
    let mut w = WhatIf::new(limits);
    let mut out = RePlanned::default();
    for (i, (input, r)) in records.into_iter().enumerate() {
        let (now, compared) = w.step(i, input, &r)?;
        out.recorded.push(r);
        out.now.push(now);
        out.compared.push(compared);
    }
    out.divergence = w.divergence().cloned();
    Ok(out)
}

/// Re-plans a capture's recorded dispatches under `limits`, reading one DISPATCH record at a time.
pub fn re_plan_capture<R: std::io::Read + std::io::Seek>(
    c: &mut CaptureFile<R>,
    limits: PlanLimits,
) -> Result<RePlanned, RePlanError> {
    let mut w = WhatIf::new(limits);
    let mut out = RePlanned::default();
    for i in 0..c.n_dispatches() {
        let record = c.dispatch(i)?;
        let r = record.report.ok_or(RePlanError::NoReport(i))?;
        let (now, compared) = w.step(i, &record.input, &r)?;
        out.recorded.push(r);
        out.now.push(now);
        out.compared.push(compared);
    }
    out.divergence = w.divergence().cloned();
    Ok(out)
}
