//! The timeline strip: dispatches per frame as bars (egui_plot), the dispatches with refusals and
//! with escapes marked in their own colours on each bar, the current dispatch's frame as a line;
//! a click on a bar selects the first dispatch of that frame (of those refused, or escaped, when
//! the click falls on that part of the bar).
//!
//! A frame is what the emulator ends with a `retire` event ([`crate::DispatchRow::frame`]); a session with
//! no retire (a generated one) is cut into bins of [`BIN_DISPATCHES`] dispatches instead, and the
//! strip says so. A bar per frame is kept and extended as rows arrive (each row is looked at
//! once), and a session with more frames than [`MAX_BARS`] shows several frames a bar, so that a
//! million dispatches cost what a few thousand bars cost.

use egui_plot::{Bar, BarChart, Plot, VLine};

use crate::Action;
use crate::dispatches::Rows;
use crate::style;

/// Dispatches a bar holds when no retire event marks frames.
pub const BIN_DISPATCHES: usize = 100;
/// The most bars the strip draws.
pub const MAX_BARS: usize = 2000;

/// One bar: a frame (or several), as positions in the session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameBar {
    /// The first frame (or bin) it covers.
    pub frame: u64,
    /// Frames (or bins) it covers.
    pub frames: u64,
    /// Position of its first dispatch.
    pub first: usize,
    /// Dispatches in it.
    pub dispatches: usize,
    /// Position of its first dispatch with a refusal, and how many have one.
    pub refused: (Option<usize>, usize),
    /// Position of its first dispatch with an escape, and how many have one.
    pub escaped: (Option<usize>, usize),
}

/// The bars of `rows`: one per frame (or per [`BIN_DISPATCHES`] dispatches when no row is past
/// frame 0), merged so that there are at most [`MAX_BARS`]. Also says whether frames were binned.
pub fn bars(rows: &Rows) -> (Vec<FrameBar>, bool) {
    let mut raw = RawBars::default();
    raw.sync(rows);
    (raw.merged(), raw.binned)
}

/// One bar per frame (or bin), kept up to date as rows arrive: rows are looked at once, when
/// they arrive, however often the strip is drawn.
#[derive(Debug, Default)]
struct RawBars {
    rows_id: u64,
    /// Rows looked at.
    done: usize,
    binned: bool,
    bars: Vec<FrameBar>,
}

impl RawBars {
    /// Brings the bars up to `rows`: from scratch when the rows are another session's, or when a
    /// first frame end turns bins into frames; else for the rows that arrived.
    fn sync(&mut self, rows: &Rows) {
        let binned = rows
            .frame(rows.len().saturating_sub(1))
            .is_none_or(|f| f == 0)
            && rows.len() > BIN_DISPATCHES;
        if rows.id() != self.rows_id || rows.len() < self.done || binned != self.binned {
            *self = Self {
                rows_id: rows.id(),
                binned,
                ..Self::default()
            };
        }
        let runs = rows.frame_runs();
        let mut run = runs.partition_point(|(p, _)| *p <= self.done as u64);
        for pos in self.done..rows.len() {
            while runs.get(run).is_some_and(|(p, _)| *p <= pos as u64) {
                run += 1;
            }
            let frame = run
                .checked_sub(1)
                .and_then(|i| runs.get(i))
                .map_or(0, |r| r.1);
            let key = if binned {
                (pos / BIN_DISPATCHES) as u64
            } else {
                frame
            };
            if self.bars.last().is_none_or(|b| b.frame != key) {
                self.bars.push(FrameBar {
                    frame: key,
                    frames: 1,
                    first: pos,
                    dispatches: 0,
                    refused: (None, 0),
                    escaped: (None, 0),
                });
            }
            let c = rows.counts(pos).unwrap_or_default();
            if let Some(b) = self.bars.last_mut() {
                b.dispatches += 1;
                if c.refusals > 0 {
                    b.refused.0.get_or_insert(pos);
                    b.refused.1 += 1;
                }
                if c.escapes > 0 {
                    b.escaped.0.get_or_insert(pos);
                    b.escaped.1 += 1;
                }
            }
        }
        self.done = rows.len();
    }

    /// The bars merged so that there are at most [`MAX_BARS`].
    fn merged(&self) -> Vec<FrameBar> {
        let n_frames = self.bars.last().map_or(0, |b| b.frame + 1);
        let per_bar = n_frames.div_ceil(MAX_BARS as u64).max(1);
        let mut out: Vec<FrameBar> = Vec::new();
        for b in &self.bars {
            let f = b.frame / per_bar * per_bar;
            match out.last_mut() {
                Some(o) if o.frame == f => {
                    o.dispatches += b.dispatches;
                    if o.refused.0.is_none() {
                        o.refused.0 = b.refused.0;
                    }
                    o.refused.1 += b.refused.1;
                    if o.escaped.0.is_none() {
                        o.escaped.0 = b.escaped.0;
                    }
                    o.escaped.1 += b.escaped.1;
                }
                _ => out.push(FrameBar {
                    frame: f,
                    frames: per_bar,
                    ..b.clone()
                }),
            }
        }
        out
    }
}

/// The timeline's state: a bar per frame, extended as rows arrive, and the merged bars drawn,
/// made again only when rows arrived.
#[derive(Debug, Default)]
pub struct TimelinePanel {
    raw: RawBars,
    cache: Option<TimelineCache>,
}

/// The rows the bars were made from (their session, how many), the bars, and whether frames were
/// binned.
type TimelineCache = ((u64, usize), Vec<FrameBar>, bool);

impl TimelinePanel {
    /// The bars of `rows`, made again only when the rows changed.
    pub fn bars(&mut self, rows: &Rows) -> (&[FrameBar], bool) {
        let key = (rows.id(), rows.len());
        if self.cache.as_ref().is_none_or(|(k, _, _)| *k != key) {
            self.raw.sync(rows);
            self.cache = Some((key, self.raw.merged(), self.raw.binned));
        }
        self.cache
            .as_ref()
            .map_or((&[][..], false), |(_, b, binned)| (b.as_slice(), *binned))
    }

    /// Draws the strip, `height` points tall; `current` is the position of the dispatch shown.
    pub fn ui(
        &mut self,
        ui: &mut egui::Ui,
        rows: &Rows,
        current: usize,
        height: f32,
    ) -> Vec<Action> {
        puffin::profile_function!();
        let mut actions = Vec::new();
        let (bars, binned) = self.bars(rows);
        ui.horizontal(|ui| {
            ui.strong("Timeline");
            ui.label(egui::RichText::new("■ dispatches").color(style::DEVICE));
            ui.label(egui::RichText::new("■ with refusals").color(style::REFUSED));
            ui.label(egui::RichText::new("■ with escapes").color(style::WRITTEN));
            ui.label(egui::RichText::new("click a bar to go to its frame").color(style::MUTED));
        });
        let height = (height - ui.spacing().interact_size.y - 4.0).max(40.0);
        if bars.is_empty() {
            style::nothing(ui, "No dispatches yet.");
            return actions;
        }
        let unit = if binned {
            format!("{BIN_DISPATCHES} dispatches (no retire event marks frames)")
        } else {
            "frame".to_owned()
        };
        let per = bars.first().map_or(1, |b| b.frames);
        let x_label = if per > 1 {
            format!("{unit}, {per} to a bar")
        } else {
            unit
        };
        let total: Vec<Bar> = bars
            .iter()
            .map(|b| Bar::new(b.frame as f64, b.dispatches as f64).width(per as f64 * 0.9))
            .collect();
        let refused: Vec<Bar> = bars
            .iter()
            .filter(|b| b.refused.1 > 0)
            .map(|b| Bar::new(b.frame as f64, b.refused.1 as f64).width(per as f64 * 0.9))
            .collect();
        let escaped: Vec<Bar> = bars
            .iter()
            .filter(|b| b.escaped.1 > 0)
            .map(|b| {
                Bar::new(b.frame as f64, b.escaped.1 as f64)
                    .width(per as f64 * 0.5)
                    .base_offset(0.0)
            })
            .collect();
        let current_x = bars
            .iter()
            .rev()
            .find(|b| b.first <= current)
            .map(|b| b.frame as f64);
        let response = Plot::new("timeline")
            .height(height)
            .allow_zoom([true, false])
            .allow_drag([true, false])
            .allow_scroll(false)
            .allow_boxed_zoom(false)
            .include_y(0.0)
            .show_grid([false, true])
            .x_axis_label(x_label)
            .y_axis_label("dispatches")
            .show(ui, |plot| {
                plot.bar_chart(BarChart::new("dispatches", total).color(style::DEVICE));
                plot.bar_chart(BarChart::new("with refusals", refused).color(style::REFUSED));
                plot.bar_chart(BarChart::new("with escapes", escaped).color(style::WRITTEN));
                if let Some(x) = current_x {
                    plot.vline(VLine::new("current", x).color(style::SELECTED));
                }
            });
        if response.response.clicked()
            && let Some(pos) = response.response.interact_pointer_pos()
        {
            let at = response.transform.value_from_position(pos);
            if let Some(p) = pick(bars, at.x, at.y) {
                actions.push(Action::SelectDispatch(p));
            }
        }
        actions
    }
}

/// The dispatch a click at plot coordinates `(x, y)` selects: in the bar under `x`, the first
/// refused dispatch when `y` falls on the refused part, else the first escaped on the escaped
/// part, else the bar's first dispatch.
pub fn pick(bars: &[FrameBar], x: f64, y: f64) -> Option<usize> {
    let per = bars.first().map_or(1, |b| b.frames) as f64;
    let b = bars
        .iter()
        .find(|b| (x - b.frame as f64).abs() <= per * 0.5)?;
    if y >= 0.0
        && y <= b.refused.1 as f64
        && let Some(p) = b.refused.0
    {
        return Some(p);
    }
    if y >= 0.0
        && y <= b.escaped.1 as f64
        && let Some(p) = b.escaped.0
    {
        return Some(p);
    }
    Some(b.first)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;
    use crate::dispatches::{DispatchRow, RowCounts};
    use dispatchscope_core::report::Mode;

    fn row(index: u64, frame: u64, refusals: u32, escapes: u32) -> DispatchRow {
        DispatchRow {
            index,
            program: 0x4000,
            label: String::new(),
            mode: Mode::Bound,
            counts: RowCounts {
                refusals,
                escapes,
                ..RowCounts::default()
            },
            rules: Default::default(),
            frame,
        }
    }

    fn columns(rows: &[DispatchRow]) -> Rows {
        let mut r = Rows::new();
        r.extend(rows);
        r
    }

    #[test]
    fn a_bar_per_frame_with_refusals_and_escapes_counted() {
        let rows = vec![
            row(0, 0, 0, 0),
            row(1, 0, 1, 0),
            row(2, 1, 0, 2),
            row(3, 1, 0, 0),
            row(4, 1, 1, 1),
            row(5, 3, 0, 0),
        ];
        let (b, binned) = bars(&columns(&rows));
        assert!(!binned);
        assert_eq!(b.len(), 3);
        assert_eq!((b[0].frame, b[0].first, b[0].dispatches), (0, 0, 2));
        assert_eq!(b[0].refused, (Some(1), 1));
        assert_eq!(b[1].escaped, (Some(2), 2));
        assert_eq!(b[1].refused, (Some(4), 1));
        assert_eq!((b[2].frame, b[2].first), (3, 5));
        // A click low on frame 1's bar lands on its refused part; high, on the bar's first.
        assert_eq!(pick(&b, 1.1, 0.5), Some(4));
        assert_eq!(pick(&b, 1.0, 2.5), Some(2));
        assert_eq!(pick(&b, 0.9, 10.0), Some(2));
        assert_eq!(pick(&b, 3.0, 0.5), Some(5));
        assert_eq!(pick(&b, 7.0, 0.5), None);
    }

    #[test]
    fn no_retire_bins_dispatches_and_many_frames_share_bars() {
        let rows: Vec<DispatchRow> = (0..1000).map(|i| row(i, 0, 0, 0)).collect();
        let (b, binned) = bars(&columns(&rows));
        assert!(binned);
        assert_eq!(b.len(), 1000 / BIN_DISPATCHES);
        let rows: Vec<DispatchRow> = (0..10 * MAX_BARS as u64).map(|i| row(i, i, 0, 0)).collect();
        let (b, _) = bars(&columns(&rows));
        assert!(b.len() <= MAX_BARS, "{}", b.len());
        assert_eq!(b.iter().map(|b| b.dispatches).sum::<usize>(), rows.len());
    }

    #[test]
    fn bars_made_as_rows_arrive_equal_bars_made_at_once() {
        let all: Vec<DispatchRow> = (0..50_000u64)
            .map(|i| row(i, i / 7, u32::from(i % 13 == 0), u32::from(i % 17 == 0)))
            .collect();
        let mut growing = Rows::new();
        let mut panel = TimelinePanel::default();
        for chunk in all.chunks(3_001) {
            growing.extend(chunk);
            let _ = panel.bars(&growing);
            assert_eq!(panel.raw.done, growing.len(), "each row looked at once");
        }
        let (at_once, _) = bars(&columns(&all));
        assert_eq!(panel.bars(&growing).0, &at_once[..]);
        assert!(at_once.len() <= MAX_BARS);
    }
}
