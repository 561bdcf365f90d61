//! Matching two sessions dispatch by dispatch and comparing each pair: [`diff_sessions`] →
//! [`SessionDiff`].
//!
//! How two sessions are matched ([`match_dispatches`]): by order when both have the same program
//! at every position; otherwise by program address: the longest common subsequence of the two
//! sequences of program addresses (after their common prefix and suffix), so that a dispatch
//! inserted or removed in one session leaves the rest paired with their counterparts. Where the
//! sequences left between the common prefix and suffix would need more than [`MAX_LCS_CELLS`]
//! cells, that middle is paired by order instead (programs may then differ within a pair, and the
//! diff says so with [`Change::Program`](super::Change::Program)), and
//! [`Matching::ByOrderPastLimit`] says it was.

use serde::{Deserialize, Serialize};

use dispatchscope_core::addr::hex;
use dispatchscope_core::report::DispatchReport;

use super::DIFF_SCHEMA;
use super::reports::{Compared, DispatchDiff, diff_reports};

/// The most cells the program-address alignment fills (the middle's lengths multiplied); past it
/// the middle is paired by order.
pub const MAX_LCS_CELLS: u64 = 1 << 24;

/// How a session diff paired the two sequences of dispatches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Matching {
    /// Position by position: both sessions have the same program at every position.
    ByOrder,
    /// By program address: the longest common subsequence of the program addresses, after the
    /// common prefix and suffix.
    ByProgram,
    /// By program address where the sequences are short enough, and by order in a middle that
    /// would need more than [`MAX_LCS_CELLS`] cells.
    ByOrderPastLimit,
}

/// One dispatch of one session, named for a person.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DispatchRef {
    /// Its position in its session's sequence.
    pub position: usize,
    /// Its dispatch index.
    pub index: u64,
    /// Its program.
    #[serde(with = "hex")]
    pub program: u64,
    /// Its label.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub label: String,
}

impl DispatchRef {
    fn of(position: usize, r: &DispatchReport) -> Self {
        Self {
            position,
            index: r.index,
            program: r.program,
            label: r.label.clone(),
        }
    }
}

/// One limit that differs between the sessions' reports (the premise of a "what if").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitChange {
    /// The limit, as the report's `device` names it.
    pub name: String,
    /// A's value, as JSON writes it.
    pub before: String,
    /// B's value.
    pub after: String,
}

/// Two sessions, dispatch by dispatch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionDiff {
    /// [`DIFF_SCHEMA`].
    pub schema: String,
    /// How the dispatches were paired.
    pub matching: Matching,
    /// Dispatches in A.
    pub a_dispatches: usize,
    /// Dispatches in B.
    pub b_dispatches: usize,
    /// Every pair, as positions `[a, b]`, in order.
    pub pairs: Vec<[usize; 2]>,
    /// Dispatches only A has.
    pub only_a: Vec<DispatchRef>,
    /// Dispatches only B has.
    pub only_b: Vec<DispatchRef>,
    /// The limits of the first pair's reports that differ (none when there is no pair).
    pub limits: Vec<LimitChange>,
    /// The diffs of the pairs that changed, in order (a pair with no change is not listed).
    pub dispatches: Vec<DispatchDiff>,
    /// Pairs whose run was not compared ([`Compared::PlanOnly`]), counted.
    pub plan_only: usize,
    /// What a reader must know to read the diff (how a "what if" was computed, what it could not
    /// re-run), one sentence each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl SessionDiff {
    /// Whether the sessions are the same: every dispatch paired and no pair changed.
    pub fn is_empty(&self) -> bool {
        self.only_a.is_empty() && self.only_b.is_empty() && self.dispatches.is_empty()
    }

    /// Changes in all, over every pair.
    pub fn n_changes(&self) -> usize {
        self.dispatches.iter().map(|d| d.changes.len()).sum()
    }

    /// The diff of the pair whose B dispatch is at `position`, if that pair changed.
    pub fn for_b(&self, position: usize) -> Option<&DispatchDiff> {
        let i = self
            .dispatches
            .binary_search_by_key(&position, |d| d.position[1])
            .ok()?;
        self.dispatches.get(i)
    }

    /// The diff of the pair whose A dispatch is at `position`, if that pair changed.
    pub fn for_a(&self, position: usize) -> Option<&DispatchDiff> {
        let i = self
            .dispatches
            .binary_search_by_key(&position, |d| d.position[0])
            .ok()?;
        self.dispatches.get(i)
    }
}

/// Pairs two sequences of program addresses (see the module docs): the pairs `[a, b]` of positions,
/// in order, and how they were made.
pub fn match_dispatches(a: &[u64], b: &[u64]) -> (Vec<[usize; 2]>, Matching) {
    if a == b {
        return ((0..a.len()).map(|i| [i, i]).collect(), Matching::ByOrder);
    }
    let prefix = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let suffix = a[prefix..]
        .iter()
        .rev()
        .zip(b[prefix..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (ma, mb) = (&a[prefix..a.len() - suffix], &b[prefix..b.len() - suffix]);
    let mut pairs: Vec<[usize; 2]> = (0..prefix).map(|i| [i, i]).collect();
    let cells = (ma.len() as u64).saturating_mul(mb.len() as u64);
    let matching = if cells <= MAX_LCS_CELLS {
        pairs.extend(
            lcs(ma, mb)
                .into_iter()
                .map(|[i, j]| [prefix + i, prefix + j]),
        );
        Matching::ByProgram
    } else {
        pairs.extend((0..ma.len().min(mb.len())).map(|i| [prefix + i, prefix + i]));
        Matching::ByOrderPastLimit
    };
    pairs.extend((0..suffix).map(|k| [a.len() - suffix + k, b.len() - suffix + k]));
    (pairs, matching)
}

/// The longest common subsequence of `a` and `b`, as pairs of positions in order; of several, the
/// one that pairs earliest in `a` (ties go to the earlier element).
fn lcs(a: &[u64], b: &[u64]) -> Vec<[usize; 2]> {
    let (n, m) = (a.len(), b.len());
    if n == 0 || m == 0 {
        return Vec::new();
    }
    // len[i][j]: the LCS of a[i..] and b[j..], row by row (u32: the cells are bounded).
    let w = m + 1;
    let mut len = vec![0u32; (n + 1) * w];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            len[i * w + j] = if a[i] == b[j] {
                len[(i + 1) * w + j + 1] + 1
            } else {
                len[(i + 1) * w + j].max(len[i * w + j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::with_capacity(len[0] as usize);
    while i < n && j < m {
        if a[i] == b[j] {
            out.push([i, j]);
            i += 1;
            j += 1;
        } else if len[(i + 1) * w + j] >= len[i * w + j + 1] {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// The limits that differ between two reports' `device`, by name.
pub fn limit_changes(a: &DispatchReport, b: &DispatchReport) -> Vec<LimitChange> {
    let (Ok(serde_json::Value::Object(x)), Ok(serde_json::Value::Object(y))) = (
        serde_json::to_value(&a.device),
        serde_json::to_value(&b.device),
    ) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (name, va) in &x {
        let vb = y.get(name).cloned().unwrap_or(serde_json::Value::Null);
        if *va != vb {
            out.push(LimitChange {
                name: name.clone(),
                before: json_text(va),
                after: json_text(&vb),
            });
        }
    }
    out
}

fn json_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Two sessions' reports, matched ([`match_dispatches`]) and compared pair by pair, everything.
pub fn diff_sessions(a: &[DispatchReport], b: &[DispatchReport]) -> SessionDiff {
    diff_sessions_with(a, b, |_| Compared::Everything)
}

/// [`diff_sessions`], comparing the pair whose B dispatch is at position `j` as `compared(j)` says.
pub fn diff_sessions_with(
    a: &[DispatchReport],
    b: &[DispatchReport],
    compared: impl Fn(usize) -> Compared,
) -> SessionDiff {
    let pa: Vec<u64> = a.iter().map(|r| r.program).collect();
    let pb: Vec<u64> = b.iter().map(|r| r.program).collect();
    let (pairs, matching) = match_dispatches(&pa, &pb);
    let mut in_a = vec![false; a.len()];
    let mut in_b = vec![false; b.len()];
    let mut dispatches = Vec::new();
    let mut plan_only = 0;
    for &[i, j] in &pairs {
        in_a[i] = true;
        in_b[j] = true;
        let how = compared(j);
        if !how.everything() {
            plan_only += 1;
        }
        let mut d = diff_reports(&a[i], &b[j], how);
        d.position = [i, j];
        if !d.is_empty() {
            dispatches.push(d);
        }
    }
    let only = |reports: &[DispatchReport], seen: &[bool]| -> Vec<DispatchRef> {
        reports
            .iter()
            .enumerate()
            .filter(|(k, _)| !seen[*k])
            .map(|(k, r)| DispatchRef::of(k, r))
            .collect()
    };
    SessionDiff {
        schema: DIFF_SCHEMA.to_owned(),
        matching,
        a_dispatches: a.len(),
        b_dispatches: b.len(),
        limits: pairs
            .first()
            .map(|&[i, j]| limit_changes(&a[i], &b[j]))
            .unwrap_or_default(),
        only_a: only(a, &in_a),
        only_b: only(b, &in_b),
        pairs,
        dispatches,
        plan_only,
        notes: Vec::new(),
    }
}
