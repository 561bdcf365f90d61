//! The escape log and the captured lanes of an instrumented pass: virtualised tables
//! (`TableBuilder` `body.rows`) under header lines that state what was counted, what was logged
//! and what a full log could not keep, so that nothing is lost silently.
//!
//! Both tables follow the pass panel's filter: a selected site, and the lanes of a selected grid
//! cell ([`LaneSelection::selects`], the device's own test).

use dispatchscope_core::instrument::{CANARY_SITE, LaneSelection, WAVE_LANES};
use dispatchscope_core::report::{CapturedAccess, InstrumentedReport, LoggedEscape};
use egui::RichText;
use egui_extras::{Column, TableBuilder};

use crate::accesses::route_text;
use crate::instrumented::sites::count;
use crate::style::{self, hex, mono};

/// What the tables show: the logged entries at one site and in one set of lanes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogFilter {
    /// Only this site.
    pub site: Option<u32>,
    /// Only these lanes.
    pub lanes: Option<LaneSelection>,
}

impl LogFilter {
    /// Whether the lane (`workgroup`, `wave`, `lane`, `pixel`) at `site` passes.
    pub fn passes(&self, site: u32, workgroup: u32, wave: u32, lane: u32, pixel: [u32; 2]) -> bool {
        self.site.is_none_or(|s| s == site)
            && self
                .lanes
                .is_none_or(|l| l.selects(workgroup, wave * WAVE_LANES + lane, pixel))
    }

    /// The filter in words (`"site 3, workgroup 1234"`), or `None` when it passes everything.
    pub fn describe(&self) -> Option<String> {
        let mut parts = Vec::new();
        if let Some(s) = self.site {
            parts.push(format!("site {s}"));
        }
        if let Some(l) = &self.lanes {
            parts.push(describe_lanes(l));
        }
        (!parts.is_empty()).then(|| parts.join(", "))
    }
}

/// A lane selection in words: `"workgroup 1234"` or `"pixels [10, 20) × [5, 6)"` (its `Display`).
pub fn describe_lanes(l: &LaneSelection) -> String {
    l.to_string()
}

/// The escape log's header lines: the counted total, how many were logged, and (when the log was
/// full) how many were counted but not logged.
pub fn escape_header(ir: &InstrumentedReport) -> Vec<String> {
    let mut v = vec![format!(
        "{} escapes counted over {} lanes; {} logged",
        count(ir.counters.escapes),
        count(ir.lanes),
        count(ir.escapes.len() as u64)
    )];
    if ir.escapes_not_logged > 0 {
        v.push(not_logged_escapes(ir.escapes_not_logged));
    }
    v
}

/// `"N escapes were counted but not logged (log full)"`.
pub fn not_logged_escapes(n: u64) -> String {
    format!(
        "{} escape{} counted but not logged (log full)",
        count(n),
        if n == 1 { " was" } else { "s were" }
    )
}

/// The captured accesses' header lines, the same way.
pub fn captured_header(ir: &InstrumentedReport) -> Vec<String> {
    let mut v = vec![format!(
        "{} captured accesses kept",
        count(ir.captured.len() as u64)
    )];
    if ir.captured_not_logged > 0 {
        v.push(not_logged_captured(ir.captured_not_logged));
    }
    v
}

/// `"N captured accesses were counted but not logged (capture full)"`.
pub fn not_logged_captured(n: u64) -> String {
    format!(
        "{} captured access{} counted but not logged (capture full)",
        count(n),
        if n == 1 { " was" } else { "es were" }
    )
}

/// Which bytes of an access of `size_bytes` escaped, one character a byte (`x` escaped, `.` not),
/// in groups of four; the mask covers the first 32 bytes, and a longer access ends in `…`.
pub fn byte_mask(escaped_bytes: u32, size_bytes: u32) -> String {
    let n = size_bytes.min(32);
    let mut s = String::with_capacity(n as usize + n as usize / 4 + 1);
    for i in 0..n {
        if i > 0 && i.is_multiple_of(4) {
            s.push(' ');
        }
        s.push(if (escaped_bytes >> i) & 1 == 1 {
            'x'
        } else {
            '.'
        });
    }
    if size_bytes > 32 {
        s.push('…');
    }
    s
}

/// A site number as the tables show it (the canary by name).
pub fn site_text(site: u32) -> String {
    if site == CANARY_SITE {
        "canary".to_owned()
    } else {
        site.to_string()
    }
}

/// The positions of the logged escapes that pass `f`.
pub fn visible_escapes(ir: &InstrumentedReport, f: &LogFilter) -> Vec<usize> {
    ir.escapes
        .iter()
        .enumerate()
        .filter(|(_, e)| f.passes(e.site, e.workgroup, e.wave, e.lane, e.pixel))
        .map(|(i, _)| i)
        .collect()
}

/// The positions of the captured accesses that pass `f`.
pub fn visible_captured(ir: &InstrumentedReport, f: &LogFilter) -> Vec<usize> {
    ir.captured
        .iter()
        .enumerate()
        .filter(|(_, c)| f.passes(c.site, c.workgroup, c.wave, c.lane, c.pixel))
        .map(|(i, _)| i)
        .collect()
}

type Key = (usize, usize, usize, LogFilter);

/// The two tables' state: the filtered rows, kept until the report or the filter changes.
#[derive(Debug, Default)]
pub struct EscapeLogView {
    escapes: Option<(Key, Vec<usize>)>,
    captured: Option<(Key, Vec<usize>)>,
}

fn key(ir: &InstrumentedReport, f: &LogFilter) -> Key {
    (
        ir as *const InstrumentedReport as usize,
        ir.escapes.len(),
        ir.captured.len(),
        *f,
    )
}

impl EscapeLogView {
    /// The logged escapes that pass `f`, in log order.
    pub fn escapes(&mut self, ir: &InstrumentedReport, f: &LogFilter) -> &[usize] {
        let k = key(ir, f);
        if self.escapes.as_ref().is_none_or(|(c, _)| *c != k) {
            self.escapes = Some((k, visible_escapes(ir, f)));
        }
        self.escapes.as_ref().map_or(&[], |(_, v)| v.as_slice())
    }

    /// The captured accesses that pass `f`, in order.
    pub fn captured(&mut self, ir: &InstrumentedReport, f: &LogFilter) -> &[usize] {
        let k = key(ir, f);
        if self.captured.as_ref().is_none_or(|(c, _)| *c != k) {
            self.captured = Some((k, visible_captured(ir, f)));
        }
        self.captured.as_ref().map_or(&[], |(_, v)| v.as_slice())
    }

    /// Draws the escape log, at most `max_height` tall.
    pub fn escapes_ui(
        &mut self,
        ui: &mut egui::Ui,
        ir: &InstrumentedReport,
        f: &LogFilter,
        max_height: f32,
    ) {
        puffin::profile_function!();
        header_lines(ui, escape_header(ir));
        let rows = self.escapes(ir, f).to_vec();
        if let Some(d) = f.describe() {
            ui.label(
                RichText::new(format!(
                    "{} of them logged at {d}",
                    count(rows.len() as u64)
                ))
                .color(style::SELECTED),
            );
        }
        if rows.is_empty() {
            style::nothing(ui, "No logged escape to show.");
            return;
        }
        let columns = [
            ("pixel", 80.0),
            ("wg/wave/lane", 90.0),
            ("site", 36.0),
            ("pc", 110.0),
            ("address", 110.0),
            ("bytes", 36.0),
            ("op", 40.0),
            ("escaped bytes", 130.0),
            ("class", 100.0),
            ("nearest below", 180.0),
            ("nearest above", 180.0),
        ];
        log_table(
            ui,
            "pass-escape-log",
            &columns,
            rows.len(),
            max_height,
            |row| {
                if let Some(e) = rows.get(row.index()).and_then(|&i| ir.escapes.get(i)) {
                    escape_row(row, e);
                }
            },
        );
    }

    /// Draws the captured accesses, at most `max_height` tall.
    pub fn captured_ui(
        &mut self,
        ui: &mut egui::Ui,
        ir: &InstrumentedReport,
        f: &LogFilter,
        max_height: f32,
    ) {
        puffin::profile_function!();
        header_lines(ui, captured_header(ir));
        let rows = self.captured(ir, f).to_vec();
        if let Some(d) = f.describe() {
            ui.label(
                RichText::new(format!("{} of them at {d}", count(rows.len() as u64)))
                    .color(style::SELECTED),
            );
        }
        if rows.is_empty() {
            style::nothing(
                ui,
                if ir.captured.is_empty() {
                    "No lane was captured: select a cell of the grid for the next dispatch."
                } else {
                    "No captured access to show."
                },
            );
            return;
        }
        let columns = [
            ("pixel", 80.0),
            ("wg/wave/lane", 90.0),
            ("site", 36.0),
            ("pc", 110.0),
            ("op", 40.0),
            ("route", 140.0),
            ("bytes", 36.0),
            ("escaped bytes", 130.0),
            ("values", 200.0),
        ];
        log_table(
            ui,
            "pass-captured",
            &columns,
            rows.len(),
            max_height,
            |row| {
                if let Some(c) = rows.get(row.index()).and_then(|&i| ir.captured.get(i)) {
                    captured_row(row, c);
                }
            },
        );
    }
}

/// A log's header lines: the first strong, the rest (what was not logged) in the written colour.
fn header_lines(ui: &mut egui::Ui, lines: impl IntoIterator<Item = String>) {
    for (i, line) in lines.into_iter().enumerate() {
        let t = RichText::new(line);
        ui.label(if i == 0 {
            t.strong()
        } else {
            t.color(style::WRITTEN)
        });
    }
}

/// A virtualised log table of `n` rows under `columns` (title, least width), at most `max_height`
/// tall; `row` fills one row's cells.
fn log_table(
    ui: &mut egui::Ui,
    id: &str,
    columns: &[(&str, f32)],
    n: usize,
    max_height: f32,
    mut row: impl FnMut(&mut egui_extras::TableRow<'_, '_>),
) {
    let row_h = ui.text_style_height(&egui::TextStyle::Body) + 4.0;
    ui.push_id(id, |ui| {
        ui.style_mut().interaction.selectable_labels = false;
        ui.style_mut().wrap_mode = Some(egui::TextWrapMode::Extend);
        let mut t = TableBuilder::new(ui)
            .id_salt(format!("{id}-table"))
            .striped(true)
            .min_scrolled_height(0.0)
            .max_scroll_height(max_height)
            .auto_shrink([false, true]);
        for &(_, w) in columns {
            t = t.column(Column::auto().at_least(w));
        }
        t.header(row_h, |mut h| {
            for &(title, _) in columns {
                h.col(|ui| {
                    ui.strong(title);
                });
            }
        })
        .body(|body| body.rows(row_h, n, |mut r| row(&mut r)));
    });
}

fn lane_cells(
    row: &mut egui_extras::TableRow<'_, '_>,
    pixel: [u32; 2],
    wg: u32,
    wave: u32,
    lane: u32,
) {
    row.col(|ui| {
        ui.label(mono(format!("({}, {})", pixel[0], pixel[1])));
    });
    row.col(|ui| {
        ui.label(mono(format!("{wg}/{wave}/{lane}")));
    });
}

fn escape_row(row: &mut egui_extras::TableRow<'_, '_>, e: &LoggedEscape) {
    lane_cells(row, e.pixel, e.workgroup, e.wave, e.lane);
    row.col(|ui| {
        ui.label(mono(site_text(e.site)));
    });
    row.col(|ui| {
        ui.label(mono(hex(e.pc)));
    });
    row.col(|ui| {
        ui.label(mono(hex(e.address)));
    });
    row.col(|ui| {
        ui.label(mono(e.size_bytes.to_string()));
    });
    row.col(|ui| {
        ui.label(format!("{:?}", e.op).to_lowercase());
    });
    row.col(|ui| {
        ui.label(mono(byte_mask(e.escaped_bytes, e.size_bytes)).color(style::REFUSED))
            .on_hover_text(format!("mask {:#010x}", e.escaped_bytes));
    });
    row.col(|ui| {
        let t = match e.reason {
            Some(r) => format!("{} ({})", e.class.as_str(), r.phrase()),
            None => e.class.as_str().to_owned(),
        };
        ui.label(t);
    });
    row.col(|ui| {
        ui.label(mono(
            e.nearest_below.map_or("none".into(), |r| r.to_string()),
        ));
    });
    row.col(|ui| {
        ui.label(mono(
            e.nearest_above.map_or("none".into(), |r| r.to_string()),
        ));
    });
}

fn captured_row(row: &mut egui_extras::TableRow<'_, '_>, c: &CapturedAccess) {
    lane_cells(row, c.pixel, c.workgroup, c.wave, c.lane);
    row.col(|ui| {
        ui.label(mono(site_text(c.site)));
    });
    row.col(|ui| {
        ui.label(mono(hex(c.pc)));
    });
    row.col(|ui| {
        ui.label(format!("{:?}", c.op).to_lowercase());
    });
    row.col(|ui| {
        let mut t = route_text(&c.route);
        if let dispatchscope_core::report::Route::Device { address } = c.route {
            t = format!("device {}", hex(address));
        }
        if let Some((slot, off)) = c.slot {
            t.push_str(&format!(" (slot {slot} +{})", hex(off)));
        }
        ui.label(mono(t));
    });
    row.col(|ui| {
        ui.label(mono(c.size_bytes.to_string()));
    });
    row.col(|ui| {
        let t = mono(byte_mask(c.escaped_bytes, c.size_bytes));
        ui.label(if c.escaped_bytes != 0 {
            t.color(style::REFUSED)
        } else {
            t.color(style::MUTED)
        });
    });
    row.col(|ui| {
        let vals: Vec<String> = c.values.iter().map(|v| format!("{v:08x}")).collect();
        ui.label(mono(vals.join(" ")));
    });
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;
    use crate::instrumented::fixture::{ESCAPING_SITE, Fixture};

    #[test]
    fn the_header_says_what_was_counted_logged_and_not_logged() {
        let ir = Fixture::new(1920, 1080).section();
        assert!(ir.escapes_not_logged > 0, "the fixture's log is full");
        let lines = escape_header(&ir);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].contains(&count(ir.counters.escapes)), "{lines:?}");
        assert!(lines[0].contains("384 logged"), "{lines:?}");
        assert_eq!(
            lines[1],
            format!(
                "{} escapes were counted but not logged (log full)",
                count(ir.escapes_not_logged)
            )
        );
        assert_eq!(
            not_logged_escapes(1),
            "1 escape was counted but not logged (log full)"
        );
        // The capture kept everything: no second line.
        assert_eq!(
            captured_header(&ir),
            vec!["128 captured accesses kept".to_owned()]
        );
        let small = Fixture {
            capture_capacity: 100,
            ..Fixture::new(256, 256)
        }
        .section();
        assert_eq!(
            captured_header(&small)[1],
            "28 captured accesses were counted but not logged (capture full)"
        );
        // A log that kept everything says nothing of what it did not keep.
        let roomy = Fixture {
            escape_capacity: 1 << 20,
            ..Fixture::new(256, 256)
        }
        .section();
        assert_eq!(roomy.escapes_not_logged, 0);
        assert_eq!(escape_header(&roomy).len(), 1);
    }

    #[test]
    fn byte_masks_show_each_byte() {
        assert_eq!(byte_mask(0b0110, 4), ".xx.");
        assert_eq!(byte_mask(0xff00, 16), ".... .... xxxx xxxx");
        assert!(byte_mask(u32::MAX, 64).ends_with('…'));
        assert_eq!(site_text(CANARY_SITE), "canary");
    }

    #[test]
    fn filters_by_site_and_by_lanes() {
        let fx = Fixture::new(1920, 1080);
        let ir = fx.section();
        let all = visible_escapes(&ir, &LogFilter::default());
        assert_eq!(all.len(), ir.escapes.len());
        let at_site = visible_escapes(
            &ir,
            &LogFilter {
                site: Some(ESCAPING_SITE),
                lanes: None,
            },
        );
        assert!(!at_site.is_empty() && at_site.len() < all.len());
        assert!(at_site.iter().all(|&i| ir.escapes[i].site == ESCAPING_SITE));
        let e = &ir.escapes[0];
        let wg = LogFilter {
            site: None,
            lanes: Some(LaneSelection::workgroup(e.workgroup, u64::MAX)),
        };
        let in_wg = visible_escapes(&ir, &wg);
        assert!(in_wg.contains(&0));
        assert!(
            in_wg
                .iter()
                .all(|&i| ir.escapes[i].workgroup == e.workgroup)
        );
        let [x0, y0, x1, y1] = fx.captured_rect();
        let rect = LogFilter {
            site: Some(ESCAPING_SITE),
            lanes: Some(LaneSelection::rect(x0, y0, x1, y1)),
        };
        let caps = visible_captured(&ir, &rect);
        // Two lanes, six instance reads each.
        assert_eq!(caps.len(), 12);
        assert_eq!(
            describe_lanes(&LaneSelection::rect(3, 4, 4, 5)),
            "pixel (3, 4)"
        );
        assert_eq!(
            rect.describe().unwrap(),
            format!("site 3, pixels [{x0}, {x1}) × [{y0}, {y1})")
        );
    }
}
