//! The timeline strip: dispatches per frame as bars (egui_plot), the dispatches with refusals and
//! with escapes marked in their own colours on each bar, the current dispatch's frame as a line;
//! a click on a bar selects the first dispatch of that frame (of those refused, or escaped, when
//! the click falls on that part of the bar).
//!
//! A frame is what the emulator ends with a `retire` event ([`crate::DispatchRow::frame`]); a session with
//! no retire (a generated one) is cut into bins of [`BIN_DISPATCHES`] dispatches instead, and the
//! strip says so. A bar per frame is kept and extended as rows arrive (each row is looked at
//! once).
//! A live session shows its recent frames, a bar each ([`RECENT_FRAMES`] by default, a few seconds
//! of a game: [`TimelinePanel::visible`]), following the newest while the window follows; the
//! wheel scrolls to older frames (Ctrl+wheel zooms), and "whole session" shows every frame, a
//! session with more frames than [`MAX_BARS`] several frames a bar, so that a million dispatches
//! cost what a few thousand bars cost (what a file opens on).

use egui_plot::{Bar, BarChart, Plot, VLine};

use crate::Action;
use crate::dispatches::Rows;
use crate::style;

/// Dispatches a bar holds when no retire event marks frames.
pub const BIN_DISPATCHES: usize = 100;
/// The most bars the strip draws.
pub const MAX_BARS: usize = 2000;
/// Frames the recent view shows by default: 4 s of a game at 60 frames a second.
pub const RECENT_FRAMES: u64 = 240;
/// The fewest frames the recent view zooms in to.
const MIN_SPAN_FRAMES: u64 = 8;

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
/// made again only when rows arrived; which frames the recent view shows.
#[derive(Debug)]
pub struct TimelinePanel {
    raw: RawBars,
    cache: Option<TimelineCache>,
    /// Whether the session is live (the app sets it): it opens on its recent frames, a file on
    /// the whole session.
    pub live: bool,
    /// Whether the window follows the newest dispatch (the app sets it): the recent view ends
    /// with the newest frame.
    pub follow: bool,
    /// The person's choice of view: `Some(true)` the recent frames, `Some(false)` the whole
    /// session, `None` what suits the session (recent when live).
    pub recent: Option<bool>,
    /// Frames the recent view spans.
    pub span_frames: u64,
    /// The last bar (by its frame key) the recent view shows when it does not follow the newest.
    view_end: Option<u64>,
    was_following: bool,
}

impl Default for TimelinePanel {
    fn default() -> Self {
        Self {
            raw: RawBars::default(),
            cache: None,
            live: false,
            follow: false,
            recent: None,
            span_frames: RECENT_FRAMES,
            view_end: None,
            was_following: false,
        }
    }
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

    /// Whether the recent view is shown.
    pub fn shows_recent(&self) -> bool {
        self.recent.unwrap_or(self.live)
    }

    /// The bars the strip draws now: in the recent view, one a frame (or bin), the last
    /// [`Self::span_frames`] of them up to the newest (following) or to where the person
    /// scrolled; else the whole session's, merged to at most [`MAX_BARS`].
    pub fn visible(&mut self, rows: &Rows) -> (Vec<FrameBar>, bool) {
        if self.follow && !self.was_following {
            self.view_end = None;
        }
        self.was_following = self.follow;
        if !self.shows_recent() {
            let (b, binned) = self.bars(rows);
            return (b.to_vec(), binned);
        }
        self.raw.sync(rows);
        let bars = &self.raw.bars;
        let newest = bars.last().map_or(0, |b| b.frame);
        if !self.follow && self.view_end.is_none() {
            // Not following: the view stays where it is as frames arrive.
            self.view_end = Some(newest);
        }
        let end = self.view_end.map_or(newest, |e| e.min(newest));
        let start = end.saturating_sub(self.span_frames.saturating_sub(1));
        let from = bars.partition_point(|b| b.frame < start);
        let to = bars.partition_point(|b| b.frame <= end);
        (bars.get(from..to).unwrap_or(&[]).to_vec(), self.raw.binned)
    }

    /// Scrolls the recent view by `frames` (negative: older), staying within the session.
    pub fn scroll_frames(&mut self, frames: i64) {
        let newest = self.raw.bars.last().map_or(0, |b| b.frame);
        let first = self.raw.bars.first().map_or(0, |b| b.frame);
        let end = self.view_end.unwrap_or(newest);
        let moved = end.saturating_add_signed(frames);
        let lowest = first
            .saturating_add(self.span_frames.saturating_sub(1))
            .min(newest);
        self.view_end = Some(moved.clamp(lowest, newest));
    }

    /// Zooms the recent view: `factor` above 1 shows more frames.
    pub fn zoom(&mut self, factor: f64) {
        let span = (self.span_frames as f64 * factor).round() as u64;
        self.span_frames = span.clamp(MIN_SPAN_FRAMES, MAX_BARS as u64);
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
        let (bars, binned) = self.visible(rows);
        let bars = &bars[..];
        let recent = self.shows_recent();
        ui.horizontal(|ui| {
            ui.strong("Timeline");
            if ui
                .selectable_label(recent, format!("recent {} frames", self.span_frames))
                .on_hover_text("The recent frames, a bar each; the wheel scrolls to older frames, Ctrl+wheel zooms")
                .clicked()
            {
                self.recent = Some(true);
            }
            if ui
                .selectable_label(!recent, "whole session")
                .on_hover_text("Every frame of the session, several to a bar when there are many")
                .clicked()
            {
                self.recent = Some(false);
            }
            if recent
                && self.view_end.is_some()
                && ui
                    .small_button("newest")
                    .on_hover_text("Show the newest frames")
                    .clicked()
            {
                self.view_end = None;
            }
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
        let mut plot = Plot::new("timeline")
            .height(height)
            .allow_zoom([!recent, false])
            .allow_drag([!recent, false])
            .allow_scroll(false);
        if recent {
            // The recent view's x range is its frames, whatever the plot remembered.
            let end = bars.last().map_or(0.0, |b| b.frame as f64);
            let start = end - (self.span_frames.saturating_sub(1)) as f64;
            plot = plot
                .default_x_bounds(start - 0.5, end + 0.5)
                .auto_bounds([false, true]);
        }
        let x_range = recent.then(|| {
            let end = bars.last().map_or(0.0, |b| b.frame as f64);
            (end - self.span_frames.saturating_sub(1) as f64 - 0.5)..=(end + 0.5)
        });
        let response = plot
            .allow_boxed_zoom(false)
            .include_y(0.0)
            .show_grid([false, true])
            .x_axis_label(x_label)
            .y_axis_label("dispatches")
            .show(ui, |plot| {
                if let Some(r) = x_range.clone() {
                    plot.set_plot_bounds_x(r);
                }
                plot.bar_chart(BarChart::new("dispatches", total).color(style::DEVICE));
                plot.bar_chart(BarChart::new("with refusals", refused).color(style::REFUSED));
                plot.bar_chart(BarChart::new("with escapes", escaped).color(style::WRITTEN));
                if let Some(x) = current_x {
                    plot.vline(VLine::new("current", x).color(style::SELECTED));
                }
            });
        if recent && response.response.hovered() {
            let (scroll, zoom) = ui.input(|i| (i.smooth_scroll_delta, i.modifiers.command));
            let notch = if scroll.y.abs() > scroll.x.abs() {
                scroll.y
            } else {
                scroll.x
            };
            if notch != 0.0 {
                if zoom {
                    self.zoom(if notch > 0.0 { 0.8 } else { 1.25 });
                } else {
                    // A notch of the wheel (about 50 points) moves a tenth of the view.
                    let frames =
                        (f64::from(notch) / 50.0 * self.span_frames as f64 / 10.0).round() as i64;
                    self.scroll_frames(if frames == 0 {
                        notch.signum() as i64
                    } else {
                        frames
                    });
                }
            }
        }
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

    /// A live game's 200 dispatches a frame: the recent view shows a bar a frame (not merged),
    /// the last `RECENT_FRAMES` up to the newest while following, and older ones when scrolled.
    #[test]
    fn the_recent_view_shows_a_bar_a_frame_of_the_latest_frames() {
        let all: Vec<DispatchRow> = (0..200 * 3_000u64).map(|i| row(i, i / 200, 0, 0)).collect();
        let mut rows = Rows::new();
        rows.extend(&all);
        let mut panel = TimelinePanel {
            live: true,
            follow: true,
            ..TimelinePanel::default()
        };
        let (b, binned) = panel.visible(&rows);
        assert!(!binned);
        assert_eq!(b.len() as u64, RECENT_FRAMES);
        assert!(b.iter().all(|b| b.frames == 1 && b.dispatches == 200));
        assert_eq!(b.last().map(|b| b.frame), Some(2_999));
        // More frames arrive: the view follows them.
        let more: Vec<DispatchRow> = (200 * 3_000..200 * 3_010u64)
            .map(|i| row(i, i / 200, 0, 0))
            .collect();
        rows.extend(&more);
        assert_eq!(panel.visible(&rows).0.last().map(|b| b.frame), Some(3_009));
        // Scrolled to older frames, with the window no longer following: it stays there.
        panel.follow = false;
        panel.scroll_frames(-1_000);
        let (b, _) = panel.visible(&rows);
        assert_eq!(b.last().map(|b| b.frame), Some(2_009));
        assert_eq!(b.len() as u64, RECENT_FRAMES);
        rows.extend(&[row(200 * 3_010, 3_010, 0, 0)]);
        assert_eq!(panel.visible(&rows).0.last().map(|b| b.frame), Some(2_009));
        // Zoomed out, more frames a view; following again ends it at the newest.
        panel.zoom(2.0);
        assert_eq!(panel.visible(&rows).0.len() as u64, 2 * RECENT_FRAMES);
        panel.follow = true;
        assert_eq!(panel.visible(&rows).0.last().map(|b| b.frame), Some(3_010));
        // The whole session: merged bars, every dispatch counted.
        panel.recent = Some(false);
        let (b, _) = panel.visible(&rows);
        assert!(b.len() <= MAX_BARS);
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
