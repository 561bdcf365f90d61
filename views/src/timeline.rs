//! The timeline strip: dispatches per frame as bars (egui_plot), the dispatches with refusals and
//! with escapes marked in their own colours on each bar, the current dispatch's frame as a line;
//! a click on a bar selects the first dispatch of that frame (of those refused, or escaped, when
//! the click falls on that part of the bar).
//!
//! A frame is what the emulator ends with a `retire` event ([`DispatchRow::frame`]); a session with
//! no retire (a generated one) is cut into bins of [`BIN_DISPATCHES`] dispatches instead, and the
//! strip says so. Bars are made once per session state (the rows' count and first row), and a
//! session with more frames than [`MAX_BARS`] shows several frames a bar, so that a million
//! dispatches cost what a few thousand bars cost.

use egui_plot::{Bar, BarChart, Plot, VLine};

use crate::Action;
use crate::dispatches::DispatchRow;
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
pub fn bars(rows: &[DispatchRow]) -> (Vec<FrameBar>, bool) {
    let binned = rows.last().is_none_or(|r| r.frame == 0) && rows.len() > BIN_DISPATCHES;
    let key = |pos: usize, r: &DispatchRow| {
        if binned {
            (pos / BIN_DISPATCHES) as u64
        } else {
            r.frame
        }
    };
    let n_frames = rows.last().map_or(0, |r| key(rows.len() - 1, r) + 1);
    let per_bar = n_frames.div_ceil(MAX_BARS as u64).max(1);
    let mut out: Vec<FrameBar> = Vec::new();
    for (pos, r) in rows.iter().enumerate() {
        let f = key(pos, r) / per_bar * per_bar;
        if out.last().is_none_or(|b| b.frame != f) {
            out.push(FrameBar {
                frame: f,
                frames: per_bar,
                first: pos,
                dispatches: 0,
                refused: (None, 0),
                escaped: (None, 0),
            });
        }
        if let Some(b) = out.last_mut() {
            b.dispatches += 1;
            if r.counts.refusals > 0 {
                b.refused.0.get_or_insert(pos);
                b.refused.1 += 1;
            }
            if r.counts.escapes > 0 {
                b.escaped.0.get_or_insert(pos);
                b.escaped.1 += 1;
            }
        }
    }
    (out, binned)
}

/// The timeline's state: the bars, kept until the rows change.
#[derive(Debug, Default)]
pub struct TimelinePanel {
    cache: Option<TimelineCache>,
}

/// The rows the bars were made from (how many, the first's index), the bars, and whether a
/// frame ended at a `retire` event anywhere.
type TimelineCache = ((usize, Option<u64>), Vec<FrameBar>, bool);

impl TimelinePanel {
    /// The bars of `rows`, made again only when the rows changed.
    pub fn bars(&mut self, rows: &[DispatchRow]) -> (&[FrameBar], bool) {
        let key = (rows.len(), rows.first().map(|r| r.index));
        if self.cache.as_ref().is_none_or(|(k, _, _)| *k != key) {
            let (b, binned) = bars(rows);
            self.cache = Some((key, b, binned));
        }
        self.cache
            .as_ref()
            .map_or((&[][..], false), |(_, b, binned)| (b.as_slice(), *binned))
    }

    /// Draws the strip, `height` points tall; `current` is the position of the dispatch shown.
    pub fn ui(
        &mut self,
        ui: &mut egui::Ui,
        rows: &[DispatchRow],
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
    use dispatchscope_core::report::{Counts, Mode};

    fn row(index: u64, frame: u64, refusals: usize, escapes: usize) -> DispatchRow {
        DispatchRow {
            index,
            program: 0x4000,
            label: String::new(),
            mode: Mode::Bound,
            counts: Counts {
                refusals,
                escapes,
                ..Counts::default()
            },
            rules: Default::default(),
            frame,
        }
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
        let (b, binned) = bars(&rows);
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
        let (b, binned) = bars(&rows);
        assert!(binned);
        assert_eq!(b.len(), 1000 / BIN_DISPATCHES);
        let rows: Vec<DispatchRow> = (0..10 * MAX_BARS as u64).map(|i| row(i, i, 0, 0)).collect();
        let (b, _) = bars(&rows);
        assert!(b.len() <= MAX_BARS, "{}", b.len());
        assert_eq!(b.iter().map(|b| b.dispatches).sum::<usize>(), rows.len());
    }
}
