//! The timeline strip: dispatches per frame as bars (egui_plot), the dispatches with refusals and
//! with escapes marked in their own colours on each bar, the current dispatch's frame as a line;
//! a click on a bar selects the first dispatch of that frame (of those refused, or escaped, when
//! the click falls on that part of the bar).
//!
//! A frame is what the emulator ends with a `retire` event ([`crate::DispatchRow::frame`]). A
//! session of at least [`MIN_FRAMES`] frames has a bar a frame; one with fewer (a sample of three
//! dispatches, a generated session with no retire) is cut into bins of dispatches instead, of a
//! size that keeps the bars at most [`MAX_BARS`] ([`bin_dispatches`]: 1, 2, 5, 10, … dispatches a
//! bar), so that three dispatches are three bars on a dispatch axis and ten million are two
//! thousand, and the strip says which ([`Unit`]). The x axis is in frames or in dispatch
//! positions, its marks whole numbers ([`whole_marks`]), a bar as wide as what it covers. A bar
//! per frame (or bin) is kept and extended as rows arrive (each row is looked at once); the bars
//! of rows a live recording released go with them.
//! A live session shows its recent frames, a bar each ([`RECENT_FRAMES`] by default, a few seconds
//! of a game: [`TimelinePanel::visible`]), following the newest while the window follows; the
//! wheel scrolls to older frames (Ctrl+wheel zooms), and "whole session" shows every frame, a
//! session with more frames than [`MAX_BARS`] several frames a bar, so that a million dispatches
//! cost what a few thousand bars cost (what a file opens on).

use egui_plot::{Bar, BarChart, Plot, VLine};

use crate::Action;
use crate::dispatches::Rows;
use crate::style;

/// The most bars the strip draws.
pub const MAX_BARS: usize = 2000;
/// The fewest frames a session has a bar a frame for; with fewer, bars are bins of dispatches.
pub const MIN_FRAMES: u64 = 8;
/// Frames the recent view shows by default: 4 s of a game at 60 frames a second.
pub const RECENT_FRAMES: u64 = 240;
/// The fewest frames the recent view zooms in to.
const MIN_SPAN_FRAMES: u64 = 8;

/// What a bar counts in: frames, or bins of this many dispatches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// A bar a frame (or several frames, merged).
    Frames,
    /// A bar a bin of this many dispatches (or several bins, merged); the x axis is dispatch
    /// positions.
    Dispatches(u64),
}

impl Unit {
    /// The x axis's name, for bars of `per` frames or bins each.
    pub fn axis_label(self, per: u64) -> String {
        match self {
            Unit::Frames if per > 1 => format!("frame, {per} to a bar"),
            Unit::Frames => "frame".to_owned(),
            Unit::Dispatches(k) => match k * per {
                1 => "dispatch (position in the session; fewer than 8 frames)".to_owned(),
                n => format!(
                    "dispatch (position in the session), {n} to a bar (fewer than 8 frames)"
                ),
            },
        }
    }
}

/// The dispatches a bin holds when a session of `n` dispatches is cut into bins: the smallest of
/// 1, 2, 5, 10, 20, 50, … that makes at most [`MAX_BARS`] bins.
pub fn bin_dispatches(n: usize) -> u64 {
    let mut k: u64 = 1;
    loop {
        for m in [1, 2, 5] {
            if (n as u64).div_ceil(k * m) <= MAX_BARS as u64 {
                return k * m;
            }
        }
        k *= 10;
    }
}

/// Grid marks at whole numbers only, `1`, `2` or `5` times a power of ten apart, far enough apart
/// for a label each (what the strip's axes show: frames, positions and counts are whole).
pub fn whole_marks(input: egui_plot::GridInput) -> Vec<egui_plot::GridMark> {
    // A label along x wants about a dozen times the plot's smallest step.
    marks_apart(input, 12.0)
}

/// [`whole_marks`] for the y axis, whose labels are a line high: closer together.
pub fn whole_y_marks(input: egui_plot::GridInput) -> Vec<egui_plot::GridMark> {
    marks_apart(input, 4.0)
}

/// Whole-number marks at least `factor` times the plot's smallest step apart.
fn marks_apart(input: egui_plot::GridInput, factor: f64) -> Vec<egui_plot::GridMark> {
    let (lo, hi) = input.bounds;
    let want = (input.base_step_size * factor).max(1.0);
    let mut step = 1.0;
    'find: loop {
        for m in [1.0, 2.0, 5.0] {
            if step * m >= want {
                step *= m;
                break 'find;
            }
        }
        step *= 10.0;
    }
    let first = (lo / step).ceil() as i64;
    let last = (hi / step).floor() as i64;
    (first..=last.max(first - 1))
        .take(1000)
        .map(|i| egui_plot::GridMark {
            value: i as f64 * step,
            step_size: step,
        })
        .collect()
}

/// One bar: a frame or a bin of dispatches (or several), as positions in the session.
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

impl FrameBar {
    /// Where the bar stands on the x axis in `unit`: its centre and its width (what it covers,
    /// less a tenth for the gap between bars).
    pub fn x(&self, unit: Unit) -> (f64, f64) {
        let (start, span) = self.span(unit);
        (start + (span - 1.0) / 2.0, span * 0.9)
    }

    /// The first x it covers and how many.
    fn span(&self, unit: Unit) -> (f64, f64) {
        match unit {
            Unit::Frames => (self.frame as f64, self.frames as f64),
            Unit::Dispatches(k) => ((self.frame * k) as f64, (self.frames * k) as f64),
        }
    }

    /// Whether x value `x` falls on the bar (or the gap after it).
    fn covers(&self, unit: Unit, x: f64) -> bool {
        let (start, span) = self.span(unit);
        x >= start - 0.5 && x < start + span - 0.5
    }
}

/// The bars of `rows`: one per frame (or per bin of dispatches when they have fewer than
/// [`MIN_FRAMES`] frames), merged so that there are at most [`MAX_BARS`]; and their unit.
pub fn bars(rows: &Rows) -> (Vec<FrameBar>, Unit) {
    let mut raw = RawBars::default();
    raw.sync(rows);
    (raw.merged(), raw.unit)
}

/// The unit `rows` are drawn in: frames when they have at least [`MIN_FRAMES`], else bins.
fn unit_of(rows: &Rows) -> Unit {
    let first = rows.frame(rows.first()).unwrap_or(0);
    let last = rows.frame(rows.len().saturating_sub(1)).unwrap_or(0);
    if last.saturating_sub(first) + 1 >= MIN_FRAMES {
        Unit::Frames
    } else {
        Unit::Dispatches(bin_dispatches(rows.len()))
    }
}

/// One bar per frame (or bin), kept up to date as rows arrive: rows are looked at once, when
/// they arrive, however often the strip is drawn.
#[derive(Debug)]
struct RawBars {
    rows_id: u64,
    /// Rows looked at.
    done: usize,
    unit: Unit,
    bars: Vec<FrameBar>,
}

impl Default for RawBars {
    fn default() -> Self {
        Self {
            rows_id: 0,
            done: 0,
            unit: Unit::Dispatches(1),
            bars: Vec::new(),
        }
    }
}

impl RawBars {
    /// Brings the bars up to `rows`: from scratch when the rows are another session's, or when
    /// the unit changes (enough frames end, or the bins grow); else for the rows that arrived.
    /// The bars of rows released go.
    fn sync(&mut self, rows: &Rows) {
        let unit = unit_of(rows);
        if rows.id() != self.rows_id || rows.len() < self.done || unit != self.unit {
            *self = Self {
                rows_id: rows.id(),
                unit,
                ..Self::default()
            };
        }
        let held = rows.first();
        if self.bars.first().is_some_and(|b| b.first < held) {
            let gone = self
                .bars
                .partition_point(|b| b.first + b.dispatches <= held);
            self.bars.drain(..gone);
        }
        let runs = rows.frame_runs();
        let from = self.done.max(held);
        let mut run = runs.partition_point(|(p, _)| *p <= from as u64);
        for pos in from..rows.len() {
            while runs.get(run).is_some_and(|(p, _)| *p <= pos as u64) {
                run += 1;
            }
            let frame = run
                .checked_sub(1)
                .and_then(|i| runs.get(i))
                .map_or(0, |r| r.1);
            let key = match unit {
                Unit::Dispatches(k) => pos as u64 / k,
                Unit::Frames => frame,
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
        let n_frames = match (self.bars.first(), self.bars.last()) {
            (Some(a), Some(b)) => b.frame - a.frame + 1,
            _ => 0,
        };
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

/// The rows the bars were made from (their session, the first held, how many), the bars, and
/// their unit.
type TimelineCache = ((u64, usize, usize), Vec<FrameBar>, Unit);

impl TimelinePanel {
    /// The bars of `rows`, made again only when the rows changed.
    pub fn bars(&mut self, rows: &Rows) -> (&[FrameBar], Unit) {
        let key = (rows.id(), rows.first(), rows.len());
        if self.cache.as_ref().is_none_or(|(k, _, _)| *k != key) {
            self.raw.sync(rows);
            self.cache = Some((key, self.raw.merged(), self.raw.unit));
        }
        self.cache
            .as_ref()
            .map_or((&[][..], Unit::Frames), |(_, b, unit)| {
                (b.as_slice(), *unit)
            })
    }

    /// Whether the recent view is shown.
    pub fn shows_recent(&self) -> bool {
        self.recent.unwrap_or(self.live)
    }

    /// The bars the strip draws now: in the recent view, one a frame (or bin), the last
    /// [`Self::span_frames`] of them up to the newest (following) or to where the person
    /// scrolled; else the whole session's, merged to at most [`MAX_BARS`].
    pub fn visible(&mut self, rows: &Rows) -> (Vec<FrameBar>, Unit) {
        if self.follow && !self.was_following {
            self.view_end = None;
        }
        self.was_following = self.follow;
        if !self.shows_recent() {
            let (b, unit) = self.bars(rows);
            return (b.to_vec(), unit);
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
        (bars.get(from..to).unwrap_or(&[]).to_vec(), self.raw.unit)
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
        let (bars, unit) = self.visible(rows);
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
            ui.label(egui::RichText::new("click a bar to go to its dispatches").color(style::MUTED));
        });
        let height = (height - ui.spacing().interact_size.y - 4.0).max(40.0);
        if bars.is_empty() {
            style::nothing(ui, "No dispatches yet.");
            return actions;
        }
        let per = bars.first().map_or(1, |b| b.frames);
        let x_label = unit.axis_label(per);
        let bar = |b: &FrameBar, height: usize, narrow: bool| {
            let (x, w) = b.x(unit);
            let bar = Bar::new(x, height as f64).width(if narrow { w * 0.55 } else { w });
            if narrow { bar.base_offset(0.0) } else { bar }
        };
        let total: Vec<Bar> = bars.iter().map(|b| bar(b, b.dispatches, false)).collect();
        let refused: Vec<Bar> = bars
            .iter()
            .filter(|b| b.refused.1 > 0)
            .map(|b| bar(b, b.refused.1, false))
            .collect();
        let escaped: Vec<Bar> = bars
            .iter()
            .filter(|b| b.escaped.1 > 0)
            .map(|b| bar(b, b.escaped.1, true))
            .collect();
        // The current dispatch: its position on a dispatch axis, its frame on a frame axis.
        let current_x = match unit {
            Unit::Dispatches(_) => (current < rows.len()).then_some(current as f64),
            Unit::Frames => rows.frame(current).map(|f| f as f64),
        };
        // Where frames begin, on a dispatch axis of a few frames.
        let frame_starts: Vec<f64> = match unit {
            Unit::Dispatches(_) => rows
                .frame_runs()
                .iter()
                .skip(1)
                .take(MIN_FRAMES as usize)
                .map(|(p, _)| *p as f64 - 0.5)
                .collect(),
            Unit::Frames => Vec::new(),
        };
        let mut plot = Plot::new("timeline")
            .height(height)
            .allow_zoom([!recent, false])
            .allow_drag([!recent, false])
            .allow_scroll(false)
            .x_grid_spacer(whole_marks)
            .y_grid_spacer(whole_y_marks);
        // The x range: the bars', a little more than they cover; in the recent view, its span.
        let (lo, hi) = match (bars.first(), bars.last()) {
            (Some(a), Some(b)) => {
                let (a, aw) = a.x(unit);
                let (b, bw) = b.x(unit);
                (a - aw / 0.9 / 2.0, b + bw / 0.9 / 2.0)
            }
            _ => (-0.5, 0.5),
        };
        let x_range = if recent {
            // The span's frames up to the newest, from the first there is (a session younger
            // than the span does not show frames before its first).
            let end = bars.last().map_or(0.0, |b| b.frame as f64);
            let first = bars.first().map_or(0.0, |b| b.frame as f64);
            let start = (end - self.span_frames.saturating_sub(1) as f64).max(first);
            let to_x = |f: f64| match unit {
                Unit::Frames => f,
                Unit::Dispatches(k) => f * k as f64,
            };
            let k = match unit {
                Unit::Frames => 1.0,
                Unit::Dispatches(k) => k as f64,
            };
            (to_x(start) - 0.5)..=(to_x(end) + k - 0.5)
        } else {
            lo..=hi
        };
        if recent {
            // The recent view's x range is its frames, whatever the plot remembered.
            plot = plot
                .default_x_bounds(*x_range.start(), *x_range.end())
                .auto_bounds([false, true]);
        } else {
            plot = plot.include_x(lo).include_x(hi);
        }
        // Room above the tallest bar, so that its count is marked on the axis.
        let tallest = bars.iter().map(|b| b.dispatches).max().unwrap_or(1);
        let response = plot
            .allow_boxed_zoom(false)
            .include_y(0.0)
            .include_y(tallest as f64 * 1.25)
            .show_grid([false, true])
            .x_axis_label(x_label)
            .y_axis_label("dispatches")
            .show(ui, |plot| {
                if recent {
                    plot.set_plot_bounds_x(x_range.clone());
                }
                plot.bar_chart(BarChart::new("dispatches", total).color(style::DEVICE));
                plot.bar_chart(BarChart::new("with refusals", refused).color(style::REFUSED));
                plot.bar_chart(BarChart::new("with escapes", escaped).color(style::WRITTEN));
                for x in frame_starts {
                    plot.vline(VLine::new("frame", x).color(style::MUTED));
                }
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
            if let Some(p) = pick(bars, unit, at.x, at.y) {
                actions.push(Action::SelectDispatch(p));
            }
        }
        actions
    }
}

/// The dispatch a click at plot coordinates `(x, y)` selects: in the bar under `x` (of bars in
/// `unit`), the first refused dispatch when `y` falls on the refused part, else the first escaped
/// on the escaped part, else the bar's first dispatch.
pub fn pick(bars: &[FrameBar], unit: Unit, x: f64, y: f64) -> Option<usize> {
    let b = bars.iter().find(|b| b.covers(unit, x))?;
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
            row(6, 9, 0, 0),
        ];
        let (b, unit) = bars(&columns(&rows));
        assert_eq!(unit, Unit::Frames);
        assert_eq!(b.len(), 4);
        assert_eq!((b[0].frame, b[0].first, b[0].dispatches), (0, 0, 2));
        assert_eq!(b[0].refused, (Some(1), 1));
        assert_eq!(b[1].escaped, (Some(2), 2));
        assert_eq!(b[1].refused, (Some(4), 1));
        assert_eq!((b[2].frame, b[2].first), (3, 5));
        // A click low on frame 1's bar lands on its refused part; high, on the bar's first.
        let f = Unit::Frames;
        assert_eq!(pick(&b, f, 1.1, 0.5), Some(4));
        assert_eq!(pick(&b, f, 1.0, 2.5), Some(2));
        assert_eq!(pick(&b, f, 0.9, 10.0), Some(2));
        assert_eq!(pick(&b, f, 3.0, 0.5), Some(5));
        assert_eq!(pick(&b, f, 7.0, 0.5), None);
    }

    /// Three dispatches of one frame (a shipped sample): three bars on a dispatch axis, each as
    /// wide as a dispatch, the axis marked at 0, 1 and 2 (not one wide band over −0.4…0.4).
    #[test]
    fn three_dispatches_are_three_bars_on_a_dispatch_axis() {
        let rows = vec![row(0, 0, 0, 0), row(1, 0, 1, 0), row(2, 0, 0, 1)];
        let (b, unit) = bars(&columns(&rows));
        assert_eq!(unit, Unit::Dispatches(1));
        assert_eq!(b.len(), 3);
        let xs: Vec<(f64, f64)> = b.iter().map(|b| b.x(unit)).collect();
        assert_eq!(xs, vec![(0.0, 0.9), (1.0, 0.9), (2.0, 0.9)]);
        assert_eq!(pick(&b, unit, 1.2, 0.5), Some(1));
        assert_eq!(pick(&b, unit, 2.0, 0.5), Some(2));
        assert_eq!(pick(&b, unit, 3.0, 0.5), None);
        assert!(unit.axis_label(1).starts_with("dispatch"));
        let marks: Vec<f64> = whole_marks(egui_plot::GridInput {
            bounds: (-0.6, 2.6),
            base_step_size: 0.01,
        })
        .iter()
        .map(|m| m.value)
        .collect();
        assert_eq!(marks, vec![0.0, 1.0, 2.0]);
    }

    /// Marks are whole, 1, 2 or 5 times a power of ten apart, and a dozen or so at most.
    #[test]
    fn axis_marks_are_whole_and_few() {
        for (lo, hi, base) in [
            (-0.5, 2.5, 0.001),
            (0.0, 1.0e7, 1.0e4),
            (-3.0, 250.0, 0.5),
            (0.0, 1.0, 0.0001),
        ] {
            let marks = whole_marks(egui_plot::GridInput {
                bounds: (lo, hi),
                base_step_size: base,
            });
            assert!(!marks.is_empty(), "{lo}..{hi}");
            let step = marks[0].step_size;
            let mantissa = step / 10f64.powf(step.log10().floor());
            assert!(
                [1.0, 2.0, 5.0].iter().any(|m| (m - mantissa).abs() < 1e-9),
                "step {step}"
            );
            assert!(
                step >= base * 12.0 && step >= 1.0,
                "step {step} for base {base}"
            );
            for m in &marks {
                assert_eq!(m.value.fract(), 0.0);
                assert!(m.value >= lo && m.value <= hi);
            }
        }
    }

    /// No retire: bins of 1, 2, 5, 10, … dispatches, as many as `MAX_BARS` at most; a million
    /// dispatches are 2,000 bars of 500, and ten million would be bins of 5,000.
    #[test]
    fn no_retire_bins_dispatches_and_many_frames_share_bars() {
        assert_eq!(bin_dispatches(3), 1);
        assert_eq!(bin_dispatches(MAX_BARS), 1);
        assert_eq!(bin_dispatches(MAX_BARS + 1), 2);
        assert_eq!(bin_dispatches(10_000_000), 5_000);
        let rows: Vec<DispatchRow> = (0..1000).map(|i| row(i, 0, 0, 0)).collect();
        let (b, unit) = bars(&columns(&rows));
        assert_eq!(unit, Unit::Dispatches(1));
        assert_eq!(b.len(), 1000);
        let mut many = Rows::new();
        for i in 0..1_000_000 {
            many.push(&row(i, 0, u32::from(i % 1000 == 7), 0));
        }
        let (b, unit) = bars(&many);
        assert_eq!(unit, Unit::Dispatches(500));
        assert_eq!(b.len(), MAX_BARS);
        assert_eq!(b.iter().map(|b| b.dispatches).sum::<usize>(), 1_000_000);
        assert_eq!(b.iter().map(|b| b.refused.1).sum::<usize>(), 1_000);
        // The last bar covers the last dispatch; a click there selects its bin's first.
        let (x, w) = b[MAX_BARS - 1].x(unit);
        assert!((x + w / 0.9 / 2.0 - 999_999.5).abs() < 1e-6, "{x} {w}");
        assert_eq!(pick(&b, unit, 999_999.0, 1e9), Some(999_500));
        let rows: Vec<DispatchRow> = (0..10 * MAX_BARS as u64).map(|i| row(i, i, 0, 0)).collect();
        let (b, unit) = bars(&columns(&rows));
        assert_eq!(unit, Unit::Frames);
        assert!(b.len() <= MAX_BARS, "{}", b.len());
        assert_eq!(b.iter().map(|b| b.dispatches).sum::<usize>(), rows.len());
    }

    /// Rows released by a live recording's disk budget take their bars with them.
    #[test]
    fn released_rows_take_their_bars() {
        let all: Vec<DispatchRow> = (0..20_000u64).map(|i| row(i, i / 100, 0, 0)).collect();
        let mut rows = Rows::new();
        rows.extend(&all);
        let mut panel = TimelinePanel::default();
        assert_eq!(panel.bars(&rows).0.len(), 200);
        rows.release_front(15_000);
        let (b, unit) = panel.bars(&rows);
        assert_eq!(unit, Unit::Frames);
        assert_eq!(b.len(), 50);
        assert_eq!(b.first().map(|b| b.first), Some(15_000));
        assert!(panel.raw.bars.len() <= 50);
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
        let (b, unit) = panel.visible(&rows);
        assert_eq!(unit, Unit::Frames);
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
