//! [`Rows`]: every dispatch's row of a session, in columns, so that a session of ten million
//! dispatches keeps ten million rows in a few hundred megabytes at most.
//!
//! A row is split into what repeats and what does not. What repeats across a game's dispatches
//! (program, label, mode, the rules cited) is interned once as a signature, [`Signature`], with its
//! lower-case search text; each row keeps the signature's number (4 bytes) and its four table
//! counts packed a byte each (4 bytes, `PackedCounts`; a row with a count of 255 or more keeps
//! its counts whole in a side list, by position). Report indices and frames change by rule (one
//! more each dispatch; a frame every few hundred), so they are kept as runs, a few bytes per break
//! in the rule. That is 8 bytes a dispatch plus the runs, the side list and the signatures
//! ([`Rows::heap_bytes`] says how many). Nothing here draws.
//!
//! A live session's rows of dispatches its recording released (deleted under the disk budget)
//! are dropped, [`Rows::release_front`]: positions stay what they were (the session's), but the
//! rows before [`Rows::first`] are gone, so that the rows' memory is bounded by what is still on
//! disk however long the session runs.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use dispatchscope_core::DispatchReport;
use dispatchscope_core::report::Mode;

use super::{DispatchRow, RowCounts, RuleSet};

/// What many dispatches share: program, label, mode and the rules cited, interned once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Signature {
    /// The program's guest address.
    pub program: u64,
    /// The label, as a number into the session's labels.
    pub label: u32,
    /// How it ran.
    pub mode: Mode,
    /// The rules its refusals, escapes and hazards cite.
    pub rules: RuleSet,
}

static ROWS_ID: AtomicU64 = AtomicU64::new(1);

/// A row's four counts a byte each (sets, refusals, escapes, marks, from the low byte);
/// [`PackedCounts::WIDE`] in any byte: the row's counts are in [`Rows`]' side list, whole.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PackedCounts(u32);

impl PackedCounts {
    /// The byte that says a count did not fit (every count of such a row is kept whole).
    const WIDE: u32 = 0xff;

    /// `c` packed, or `None` when a count does not fit a byte below [`Self::WIDE`].
    fn of(c: &RowCounts) -> Option<Self> {
        let byte = |x: u32| (x < Self::WIDE).then_some(x);
        Some(Self(
            byte(c.sets)? | byte(c.refusals)? << 8 | byte(c.escapes)? << 16 | byte(c.marks)? << 24,
        ))
    }

    /// The packed word of a row whose counts are kept whole.
    const fn wide() -> Self {
        Self(Self::WIDE)
    }

    fn is_wide(self) -> bool {
        self.0 & 0xff == Self::WIDE
    }

    fn byte(self, at: u32) -> u32 {
        (self.0 >> at) & 0xff
    }

    /// The counts, when they are packed here.
    fn unpack(self) -> Option<RowCounts> {
        (!self.is_wide()).then(|| RowCounts {
            sets: self.byte(0),
            refusals: self.byte(8),
            escapes: self.byte(16),
            marks: self.byte(24),
        })
    }

    /// Whether the row escaped: its escapes' byte is not zero (a wide row keeps its counts
    /// whole, so this asks the side list instead).
    pub(crate) fn has_escapes(self) -> Option<bool> {
        (!self.is_wide()).then(|| self.byte(16) != 0)
    }
}

/// Every row of a session in columns; see the module docs.
#[derive(Debug)]
pub struct Rows {
    /// Tells one session's rows from another's (a copy keeps it: it holds the same rows).
    id: u64,
    /// The position of the first row held: the rows before it were released.
    base: usize,
    /// Per row held (from `base`): its signature's number into `sigs`.
    sig: Vec<u32>,
    /// Per row held: sets, refusals, escapes and marks, a byte each.
    counts: Vec<PackedCounts>,
    /// The counts of every row with a count of 255 or more, by position (ascending).
    wide: Vec<(u64, RowCounts)>,
    /// Runs of consecutive report indices: (first position, its report index), by position.
    index_runs: Vec<(u64, u64)>,
    /// Runs of one frame: (first position, the frame), by position.
    frame_runs: Vec<(u64, u64)>,
    sigs: Vec<Signature>,
    /// Per signature: its search text, lower case ("0x… label mode rule ids").
    sig_text: Vec<Box<str>>,
    sig_ids: HashMap<Signature, u32>,
    labels: Vec<Arc<str>>,
    label_ids: HashMap<Arc<str>, u32>,
}

impl Default for Rows {
    fn default() -> Self {
        Self {
            id: ROWS_ID.fetch_add(1, Ordering::Relaxed),
            base: 0,
            sig: Vec::new(),
            counts: Vec::new(),
            wide: Vec::new(),
            index_runs: Vec::new(),
            frame_runs: Vec::new(),
            sigs: Vec::new(),
            sig_text: Vec::new(),
            sig_ids: HashMap::new(),
            labels: Vec::new(),
            label_ids: HashMap::new(),
        }
    }
}

impl Clone for Rows {
    fn clone(&self) -> Self {
        Self {
            id: self.id,
            base: self.base,
            sig: self.sig.clone(),
            counts: self.counts.clone(),
            wide: self.wide.clone(),
            index_runs: self.index_runs.clone(),
            frame_runs: self.frame_runs.clone(),
            sigs: self.sigs.clone(),
            sig_text: self.sig_text.clone(),
            sig_ids: self.sig_ids.clone(),
            labels: self.labels.clone(),
            label_ids: self.label_ids.clone(),
        }
    }
}

impl PartialEq for Rows {
    /// Rows are equal when they list the same dispatches (however they were interned).
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.base == other.base && self.iter().eq(other.iter())
    }
}

/// The run holding position `pos` in `runs` (sorted by first position), and the run's value.
fn run_at(runs: &[(u64, u64)], pos: u64) -> Option<(u64, u64)> {
    let i = runs.partition_point(|(p, _)| *p <= pos);
    runs.get(i.checked_sub(1)?).copied()
}

impl Rows {
    /// No rows.
    pub fn new() -> Self {
        Self::default()
    }

    /// The rows of `reports`, in order (frames counted on from one to the next).
    pub fn of_reports<'a>(reports: impl IntoIterator<Item = &'a DispatchReport>) -> Self {
        let mut rows = Self::new();
        for r in reports {
            rows.push_report(r);
        }
        rows
    }

    /// Tells this session's rows from another's; a copy has the same.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Rows in the session: the position after the last (released rows included).
    pub fn len(&self) -> usize {
        self.base + self.sig.len()
    }

    /// Whether the session has none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The position of the first row held (0 unless rows were released).
    pub fn first(&self) -> usize {
        self.base
    }

    /// Rows held: [`Self::len`] less those released.
    pub fn held(&self) -> usize {
        self.sig.len()
    }

    /// Drops the rows before position `pos` (a live recording's disk budget released their
    /// dispatches): positions do not move, but those rows answer `None` from now on, and their
    /// memory is given back. Returns how many were dropped.
    pub fn release_front(&mut self, pos: usize) -> usize {
        let pos = pos.min(self.len());
        let Some(k) = pos.checked_sub(self.base).filter(|&k| k > 0) else {
            return 0;
        };
        self.sig.drain(..k);
        self.counts.drain(..k);
        self.base = pos;
        // Grown by doubling while the session ran: keep what the held rows and their growth need.
        if self.sig.capacity() > 2 * self.sig.len() + 1024 {
            self.sig.shrink_to(self.sig.len() * 3 / 2);
            self.counts.shrink_to(self.counts.len() * 3 / 2);
        }
        let first = pos as u64;
        self.wide.retain(|(p, _)| *p >= first);
        for runs in [&mut self.index_runs, &mut self.frame_runs] {
            // The run that holds `pos` stays (it says what `pos` is); those before it go.
            let holding = runs.partition_point(|(p, _)| *p <= first).saturating_sub(1);
            runs.drain(..holding);
        }
        k
    }

    /// Where the row at `pos` is held, if it is.
    fn at(&self, pos: usize) -> Option<usize> {
        pos.checked_sub(self.base).filter(|&i| i < self.sig.len())
    }

    /// Appends the row of `report`, which follows the last row: its frame counts on by the
    /// `retire` events before it.
    pub fn push_report(&mut self, report: &DispatchReport) {
        let prev_frame = self.last_frame();
        let row = DispatchRow::after_frame(report, prev_frame);
        self.push(&row);
    }

    /// The frame of the last row (0 when none).
    fn last_frame(&self) -> u64 {
        self.frame_runs.last().map_or(0, |(_, f)| *f)
    }

    /// Appends `row`.
    pub fn push(&mut self, row: &DispatchRow) {
        let pos = self.len() as u64;
        let label = self.intern_label(&row.label);
        let sig = Signature {
            program: row.program,
            label,
            mode: row.mode,
            rules: row.rules,
        };
        let id = match self.sig_ids.get(&sig) {
            Some(&id) => id,
            None => {
                let id = u32::try_from(self.sigs.len()).unwrap_or(u32::MAX);
                let text =
                    DispatchRow::signature_text(row.program, &row.label, row.mode, row.rules);
                self.sigs.push(sig);
                self.sig_text.push(text.into_boxed_str());
                self.sig_ids.insert(sig, id);
                id
            }
        };
        let expected = self.index_runs.last().map(|(p, i)| i.wrapping_add(pos - p));
        if expected != Some(row.index) {
            self.index_runs.push((pos, row.index));
        }
        if self.frame_runs.last().map(|(_, f)| *f) != Some(row.frame) {
            self.frame_runs.push((pos, row.frame));
        }
        self.sig.push(id);
        match PackedCounts::of(&row.counts) {
            Some(p) => self.counts.push(p),
            None => {
                self.counts.push(PackedCounts::wide());
                self.wide.push((pos, row.counts));
            }
        }
    }

    /// Appends every row of `rows`.
    pub fn extend<'a>(&mut self, rows: impl IntoIterator<Item = &'a DispatchRow>) {
        for r in rows {
            self.push(r);
        }
    }

    /// Appends every row of `other` (rows made elsewhere, a live session's intake thread's
    /// batch): its signatures are interned here once each, then its columns and runs are copied,
    /// so that appending costs a copy of 8 bytes a row, not a row's interning.
    pub fn append(&mut self, other: &Rows) {
        let base = self.len() as u64;
        let map: Vec<u32> = other
            .sigs
            .iter()
            .zip(&other.sig_text)
            .map(|(s, text)| {
                let label = other.labels.get(s.label as usize).map_or("", |l| &**l);
                let sig = Signature {
                    label: self.intern_label(label),
                    ..*s
                };
                match self.sig_ids.get(&sig) {
                    Some(&id) => id,
                    None => {
                        let id = u32::try_from(self.sigs.len()).unwrap_or(u32::MAX);
                        self.sigs.push(sig);
                        self.sig_text.push(text.clone());
                        self.sig_ids.insert(sig, id);
                        id
                    }
                }
            })
            .collect();
        self.sig.extend(
            other
                .sig
                .iter()
                .map(|&i| map.get(i as usize).copied().unwrap_or(u32::MAX)),
        );
        self.counts.extend_from_slice(&other.counts);
        self.wide
            .extend(other.wide.iter().map(|&(p, c)| (p + base, c)));
        for &(p, index) in &other.index_runs {
            let pos = p + base;
            let expected = self
                .index_runs
                .last()
                .map(|(lp, li)| li.wrapping_add(pos - lp));
            if expected != Some(index) {
                self.index_runs.push((pos, index));
            }
        }
        for &(p, frame) in &other.frame_runs {
            if self.frame_runs.last().map(|(_, f)| *f) != Some(frame) {
                self.frame_runs.push((p + base, frame));
            }
        }
    }

    fn intern_label(&mut self, label: &str) -> u32 {
        if let Some(&id) = self.label_ids.get(label) {
            return id;
        }
        let id = u32::try_from(self.labels.len()).unwrap_or(u32::MAX);
        let a: Arc<str> = Arc::from(label);
        self.labels.push(Arc::clone(&a));
        self.label_ids.insert(a, id);
        id
    }

    /// The report index of the row at `pos`.
    pub fn index(&self, pos: usize) -> Option<u64> {
        self.at(pos)?;
        let (first, index) = run_at(&self.index_runs, pos as u64)?;
        Some(index.wrapping_add(pos as u64 - first))
    }

    /// The frame of the row at `pos`.
    pub fn frame(&self, pos: usize) -> Option<u64> {
        self.at(pos)?;
        run_at(&self.frame_runs, pos as u64).map(|(_, f)| f)
    }

    /// The counts of the row at `pos`.
    pub fn counts(&self, pos: usize) -> Option<RowCounts> {
        let p = self.counts.get(self.at(pos)?)?;
        p.unpack().or_else(|| self.wide_counts(pos))
    }

    /// The counts of a row kept whole in the side list.
    fn wide_counts(&self, pos: usize) -> Option<RowCounts> {
        let i = self
            .wide
            .binary_search_by_key(&(pos as u64), |(p, _)| *p)
            .ok()?;
        self.wide.get(i).map(|(_, c)| *c)
    }

    /// Whether the row at `pos` escaped (false when there is none).
    pub(crate) fn has_escapes(&self, pos: usize) -> bool {
        match self.at(pos).and_then(|i| self.counts.get(i)) {
            None => false,
            Some(p) => p
                .has_escapes()
                .unwrap_or_else(|| self.wide_counts(pos).is_some_and(|c| c.escapes > 0)),
        }
    }

    /// The signature of the row at `pos`.
    pub fn signature(&self, pos: usize) -> Option<Signature> {
        self.sigs
            .get(*self.sig.get(self.at(pos)?)? as usize)
            .copied()
    }

    /// The label of the row at `pos`.
    pub fn label(&self, pos: usize) -> &str {
        self.signature(pos)
            .and_then(|s| self.labels.get(s.label as usize))
            .map_or("", |l| &**l)
    }

    /// The row at `pos`, whole.
    pub fn get(&self, pos: usize) -> Option<DispatchRow> {
        let s = self.signature(pos)?;
        Some(DispatchRow {
            index: self.index(pos)?,
            program: s.program,
            label: self.label(pos).to_owned(),
            mode: s.mode,
            counts: self.counts(pos)?,
            rules: s.rules,
            frame: self.frame(pos)?,
        })
    }

    /// The position of the row with report index `index`, if one has it.
    pub fn position_of(&self, index: u64) -> Option<usize> {
        let n = self.len() as u64;
        self.index_runs
            .iter()
            .enumerate()
            .find_map(|(i, &(first, at))| {
                let end = self.index_runs.get(i + 1).map_or(n, |r| r.0);
                let off = index.checked_sub(at)?;
                (off < end - first).then(|| (first + off) as usize)
            })
            .filter(|&p| p >= self.base)
    }

    /// Every row held, whole, in order.
    pub fn iter(&self) -> impl Iterator<Item = DispatchRow> + '_ {
        (self.base..self.len()).filter_map(|p| self.get(p))
    }

    /// Per row held, its signature's number (for [`super::find::Finder`]): the row at position
    /// `p` is at `p - first()`.
    pub(crate) fn sig_column(&self) -> &[u32] {
        &self.sig
    }

    /// The signatures, by number, with their search text.
    pub(crate) fn signatures(&self) -> impl ExactSizeIterator<Item = (&Signature, &str)> + '_ {
        self.sigs.iter().zip(self.sig_text.iter().map(|t| &**t))
    }

    /// Runs of report indices: (first position, its report index).
    pub(crate) fn index_runs(&self) -> &[(u64, u64)] {
        &self.index_runs
    }

    /// Runs of one frame: (first position, the frame).
    pub fn frame_runs(&self) -> &[(u64, u64)] {
        &self.frame_runs
    }

    /// The largest count any row shows (at least 254, the most a packed count holds).
    pub fn widest_count(&self) -> u32 {
        self.wide
            .iter()
            .map(|(_, c)| c.sets.max(c.refusals).max(c.escapes).max(c.marks))
            .fold(254, u32::max)
    }

    /// Distinct signatures held.
    pub fn n_signatures(&self) -> usize {
        self.sigs.len()
    }

    /// Bytes these rows hold on the heap (capacity, not length: what the allocator gave), counted
    /// from the columns, the runs and the interned signatures and labels.
    pub fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        let sig_entry = size_of::<Signature>() + size_of::<u32>() + 8;
        let label_entry = 2 * size_of::<Arc<str>>() + size_of::<u32>() + 8;
        self.sig.capacity() * size_of::<u32>()
            + self.counts.capacity() * size_of::<PackedCounts>()
            + self.wide.capacity() * size_of::<(u64, RowCounts)>()
            + (self.index_runs.capacity() + self.frame_runs.capacity()) * 16
            + self.sigs.capacity() * size_of::<Signature>()
            + self.sig_text.iter().map(|t| t.len() + 16).sum::<usize>()
            + self.sig_ids.capacity() * sig_entry
            + self.labels.iter().map(|l| l.len() + 16).sum::<usize>()
            + self.label_ids.capacity() * label_entry
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    fn row(index: u64, frame: u64, label: &str) -> DispatchRow {
        DispatchRow {
            index,
            program: 0x4000 + (index % 3) * 0x100,
            label: label.into(),
            mode: Mode::Bound,
            counts: RowCounts {
                escapes: (index % 2) as u32,
                ..RowCounts::default()
            },
            rules: RuleSet::default(),
            frame,
        }
    }

    #[test]
    fn rows_read_back_as_pushed_with_gaps_in_indices_and_frames() {
        let mut rows = Rows::new();
        let mut want = Vec::new();
        // Indices 0..10, then a gap (the target dropped some), then 100..110; frames every 4.
        for i in (0..10).chain(100..110) {
            let r = row(i, i / 4, if i % 2 == 0 { "even" } else { "odd" });
            rows.push(&r);
            want.push(r);
        }
        assert_eq!(rows.len(), 20);
        assert_eq!(rows.iter().collect::<Vec<_>>(), want);
        assert_eq!(rows.position_of(105), Some(15));
        assert_eq!(rows.position_of(50), None);
        assert_eq!(rows.position_of(10), None);
        assert_eq!(rows.index(20), None);
        // Six signatures at most (3 programs × 2 labels), however many rows.
        assert!(rows.n_signatures() <= 6);
    }

    #[test]
    fn rows_appended_in_batches_equal_rows_pushed_one_by_one() {
        let all: Vec<DispatchRow> = (0..5_000u64)
            .chain(6_000..6_500)
            .map(|i| DispatchRow {
                counts: RowCounts {
                    escapes: if i % 97 == 0 { 300 } else { (i % 2) as u32 },
                    ..RowCounts::default()
                },
                ..row(i, i / 7, ["a", "b", "c", "d"][(i % 4) as usize])
            })
            .collect();
        let mut one_by_one = Rows::new();
        one_by_one.extend(&all);
        let mut appended = Rows::new();
        for chunk in all.chunks(333) {
            let mut batch = Rows::new();
            batch.extend(chunk);
            appended.append(&batch);
        }
        assert_eq!(appended, one_by_one);
        assert_eq!(appended.index_runs, one_by_one.index_runs);
        assert_eq!(appended.frame_runs, one_by_one.frame_runs);
        assert_eq!(appended.wide, one_by_one.wide);
        assert_eq!(appended.n_signatures(), one_by_one.n_signatures());
    }

    #[test]
    fn counts_past_a_byte_read_back_whole_and_escapes_are_found_either_way() {
        let mut rows = Rows::new();
        let counts = [
            RowCounts::default(),
            RowCounts {
                sets: 254,
                refusals: 1,
                escapes: 2,
                marks: 3,
            },
            RowCounts {
                escapes: 255,
                ..RowCounts::default()
            },
            RowCounts {
                sets: u32::MAX,
                marks: 300,
                ..RowCounts::default()
            },
            RowCounts {
                refusals: 7,
                ..RowCounts::default()
            },
        ];
        for (i, c) in counts.iter().enumerate() {
            rows.push(&DispatchRow {
                counts: *c,
                ..row(i as u64, 0, "x")
            });
        }
        for (i, c) in counts.iter().enumerate() {
            assert_eq!(rows.counts(i), Some(*c), "row {i}");
            assert_eq!(rows.has_escapes(i), c.escapes > 0, "row {i}");
        }
        assert_eq!(rows.counts(counts.len()), None);
        assert!(!rows.has_escapes(counts.len()));
        assert_eq!(
            rows.wide.len(),
            2,
            "only the rows that need it are kept whole"
        );
        assert_eq!(rows.clone(), rows);
    }

    /// A live session's released dispatches: their rows go, the rest keep their positions, and
    /// the rows' memory follows what is held, not what the session ever had.
    #[test]
    fn released_rows_are_dropped_and_positions_stay() {
        let mut rows = Rows::new();
        let all: Vec<DispatchRow> = (0..10_000u64)
            .map(|i| DispatchRow {
                counts: RowCounts {
                    escapes: if i % 1000 == 3 { 300 } else { (i % 2) as u32 },
                    ..RowCounts::default()
                },
                ..row(i, i / 100, "x")
            })
            .collect();
        rows.extend(&all);
        assert_eq!(rows.release_front(6_000), 6_000);
        assert_eq!(
            (rows.first(), rows.len(), rows.held()),
            (6_000, 10_000, 4_000)
        );
        assert_eq!(rows.get(5_999), None);
        assert_eq!(rows.counts(0), None);
        assert!(!rows.has_escapes(5_999));
        for p in [6_000, 6_003, 7_777, 9_999] {
            assert_eq!(rows.get(p).as_ref(), Some(&all[p]), "position {p}");
        }
        assert_eq!(rows.position_of(42), None, "released");
        assert_eq!(rows.position_of(8_000), Some(8_000));
        assert_eq!(rows.iter().count(), 4_000);
        // Releasing again, or less, does nothing more; more rows go on at their positions.
        assert_eq!(rows.release_front(100), 0);
        rows.push(&row(10_000, 100, "y"));
        assert_eq!(rows.get(10_000).map(|r| r.index), Some(10_000));
        // A game that runs on with its oldest released: the memory stays bounded.
        let mut live = Rows::new();
        let mut peak = 0;
        for i in 0..400_000u64 {
            live.push(&row(i, i / 200, "pass"));
            if i % 50_000 == 49_999 {
                live.release_front(live.len().saturating_sub(100_000));
                peak = peak.max(live.heap_bytes());
            }
        }
        assert_eq!(live.held(), 100_000);
        assert!(peak < 100_000 * 17, "{peak} bytes for 100,000 rows held");
    }

    #[test]
    fn a_million_rows_of_a_repeating_game_cost_about_8_bytes_each() {
        let mut rows = Rows::new();
        for i in 0..1_000_000u64 {
            rows.push(&row(
                i,
                i / 200,
                ["pass a", "pass b", "pass c"][(i % 3) as usize],
            ));
        }
        let per_row = rows.heap_bytes() as f64 / 1e6;
        // 8 bytes of columns a row (grown by doubling: up to twice that), plus runs of frames.
        assert!(per_row < 17.0, "{per_row} bytes a row");
        assert!(rows.n_signatures() <= 9);
    }
}
