//! The sites view: one row per access site of an instrumented pass (pc, kind, op, size, accesses,
//! escapes, lookups, mean and longest probes), sorted by any column (a click on its header; again
//! reverses it). A click on a row selects the site; a click on its pc asks for the listing there.

use dispatchscope_core::input::AccessKind;
use dispatchscope_core::report::{InstrumentedReport, SiteReport};
use egui::{RichText, Sense};
use egui_extras::{Column, TableBuilder};

use crate::style::{self, hex, mono};

/// A column of the sites table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SiteColumn {
    /// The site's number.
    Site,
    /// The guest pc.
    Pc,
    /// The instruction kind.
    Kind,
    /// Load or store.
    Op,
    /// Bytes per access.
    Size,
    /// Accesses made there.
    Accesses,
    /// Accesses with an escaped byte.
    Escapes,
    /// Chunk lookups.
    Lookups,
    /// Probes a lookup, on average.
    MeanProbes,
    /// The longest lookup.
    MaxProbes,
}

impl SiteColumn {
    /// Every column, in the table's order.
    pub const ALL: [SiteColumn; 10] = [
        SiteColumn::Site,
        SiteColumn::Pc,
        SiteColumn::Kind,
        SiteColumn::Op,
        SiteColumn::Size,
        SiteColumn::Accesses,
        SiteColumn::Escapes,
        SiteColumn::Lookups,
        SiteColumn::MeanProbes,
        SiteColumn::MaxProbes,
    ];

    /// The header's text.
    pub fn title(self) -> &'static str {
        match self {
            SiteColumn::Site => "site",
            SiteColumn::Pc => "pc",
            SiteColumn::Kind => "kind",
            SiteColumn::Op => "op",
            SiteColumn::Size => "bytes",
            SiteColumn::Accesses => "accesses",
            SiteColumn::Escapes => "escapes",
            SiteColumn::Lookups => "lookups",
            SiteColumn::MeanProbes => "mean probes",
            SiteColumn::MaxProbes => "max probes",
        }
    }

    /// Whether a first click sorts largest first (the counts) rather than smallest first.
    fn largest_first(self) -> bool {
        matches!(
            self,
            SiteColumn::Accesses
                | SiteColumn::Escapes
                | SiteColumn::Lookups
                | SiteColumn::MeanProbes
                | SiteColumn::MaxProbes
        )
    }
}

/// An access kind as JSON writes it (`untyped-buffer`).
pub fn kind_name(kind: AccessKind) -> &'static str {
    match kind {
        AccessKind::Global => "global",
        AccessKind::Flat => "flat",
        AccessKind::Scalar => "scalar",
        AccessKind::UntypedBuffer => "untyped-buffer",
        AccessKind::FormatBuffer => "format-buffer",
        AccessKind::RayIntersection => "ray-intersection",
        AccessKind::Lds => "lds",
        AccessKind::Scratch => "scratch",
    }
}

/// Probes a lookup at `s`, on average (0 where it made none).
pub fn mean_probes(s: &SiteReport) -> f64 {
    if s.lookups == 0 {
        0.0
    } else {
        s.probes_sum as f64 / s.lookups as f64
    }
}

/// The positions of `sites` in the order of `column` (ties by site number), largest first when
/// `descending`.
pub fn sorted(sites: &[SiteReport], column: SiteColumn, descending: bool) -> Vec<usize> {
    let mut v: Vec<usize> = (0..sites.len()).collect();
    v.sort_by(|&a, &b| {
        let (x, y) = (&sites[a], &sites[b]);
        let o = match column {
            SiteColumn::Site => x.site.cmp(&y.site),
            SiteColumn::Pc => x.pc.cmp(&y.pc),
            SiteColumn::Kind => kind_name(x.kind).cmp(kind_name(y.kind)),
            SiteColumn::Op => format!("{:?}", x.op).cmp(&format!("{:?}", y.op)),
            SiteColumn::Size => x.size_bytes.cmp(&y.size_bytes),
            SiteColumn::Accesses => x.accesses.cmp(&y.accesses),
            SiteColumn::Escapes => x.escapes.cmp(&y.escapes),
            SiteColumn::Lookups => x.lookups.cmp(&y.lookups),
            SiteColumn::MeanProbes => mean_probes(x).total_cmp(&mean_probes(y)),
            SiteColumn::MaxProbes => x.probes_max.cmp(&y.probes_max),
        };
        let o = if descending { o.reverse() } else { o };
        o.then(x.site.cmp(&y.site))
    });
    v
}

/// What a person did in the sites table this frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SitesOutcome {
    /// A row was clicked: select this site, or clear the selection.
    pub select: Option<Option<u32>>,
    /// A pc was clicked: show the listing there.
    pub show_pc: Option<u64>,
}

/// What an order was computed for: the report (address, sites) and the sort.
type OrderKey = (usize, usize, SiteColumn, bool);

/// The sites table's state: the sort, and the order it last computed.
#[derive(Debug)]
pub struct SitesView {
    /// The column sorted by.
    pub column: SiteColumn,
    /// Largest first.
    pub descending: bool,
    order: Option<(OrderKey, Vec<usize>)>,
}

impl Default for SitesView {
    fn default() -> Self {
        Self {
            column: SiteColumn::Escapes,
            descending: true,
            order: None,
        }
    }
}

impl SitesView {
    /// A click on `column`'s header: sort by it, or reverse it if it is already the sort.
    pub fn click(&mut self, column: SiteColumn) {
        if self.column == column {
            self.descending = !self.descending;
        } else {
            self.column = column;
            self.descending = column.largest_first();
        }
    }

    /// The rows in the current order, kept until the report or the sort changes.
    pub fn order(&mut self, ir: &InstrumentedReport) -> &[usize] {
        let key = (
            ir as *const InstrumentedReport as usize,
            ir.sites.len(),
            self.column,
            self.descending,
        );
        if self.order.as_ref().is_none_or(|(k, _)| *k != key) {
            self.order = Some((key, sorted(&ir.sites, self.column, self.descending)));
        }
        self.order.as_ref().map_or(&[], |(_, v)| v.as_slice())
    }

    /// Draws the table; `selected` is the selected site.
    pub fn ui(
        &mut self,
        ui: &mut egui::Ui,
        ir: &InstrumentedReport,
        selected: Option<u32>,
    ) -> SitesOutcome {
        puffin::profile_function!();
        let mut out = SitesOutcome::default();
        if ir.sites.is_empty() {
            style::nothing(ui, "The translator numbered no access sites.");
            return out;
        }
        let order = self.order(ir).to_vec();
        let row_h = ui.text_style_height(&egui::TextStyle::Body) + 4.0;
        ui.style_mut().interaction.selectable_labels = false;
        ui.style_mut().wrap_mode = Some(egui::TextWrapMode::Extend);
        let mut clicked_header = None;
        let mut table = TableBuilder::new(ui)
            .id_salt("pass-sites-table")
            .striped(true)
            .sense(Sense::click())
            .min_scrolled_height(0.0)
            .max_scroll_height(row_h * 14.0)
            .auto_shrink([false, true]);
        for c in SiteColumn::ALL {
            table = table.column(match c {
                SiteColumn::Pc => Column::auto().at_least(110.0),
                _ => Column::auto().at_least(40.0),
            });
        }
        table
            .header(row_h, |mut h| {
                for c in SiteColumn::ALL {
                    h.col(|ui| {
                        let arrow = if c == self.column {
                            if self.descending { " ▼" } else { " ▲" }
                        } else {
                            ""
                        };
                        let b = egui::Button::new(
                            RichText::new(format!("{}{arrow}", c.title())).strong(),
                        )
                        .frame(false);
                        if ui.add(b).clicked() {
                            clicked_header = Some(c);
                        }
                    });
                }
            })
            .body(|body| {
                body.rows(row_h, order.len(), |mut row| {
                    let Some(s) = order.get(row.index()).and_then(|&i| ir.sites.get(i)) else {
                        return;
                    };
                    row.set_selected(selected == Some(s.site));
                    row.col(|ui| {
                        ui.label(mono(s.site.to_string()));
                    });
                    row.col(|ui| {
                        let r = ui.add(
                            egui::Label::new(mono(hex(s.pc)).underline())
                                .wrap_mode(egui::TextWrapMode::Extend)
                                .sense(Sense::click()),
                        );
                        if r.on_hover_text("show the listing at this pc").clicked() {
                            out.show_pc = Some(s.pc);
                        }
                    });
                    row.col(|ui| {
                        ui.label(kind_name(s.kind));
                    });
                    row.col(|ui| {
                        ui.label(format!("{:?}", s.op).to_lowercase());
                    });
                    row.col(|ui| {
                        ui.label(mono(s.size_bytes.to_string()));
                    });
                    row.col(|ui| {
                        ui.label(mono(count(s.accesses)));
                    });
                    row.col(|ui| {
                        let t = mono(count(s.escapes));
                        ui.label(if s.escapes > 0 {
                            t.color(style::REFUSED)
                        } else {
                            t
                        });
                    });
                    row.col(|ui| {
                        ui.label(mono(count(s.lookups)));
                    });
                    row.col(|ui| {
                        ui.label(mono(if s.lookups == 0 {
                            "–".to_owned()
                        } else {
                            format!("{:.3}", mean_probes(s))
                        }));
                    });
                    row.col(|ui| {
                        ui.label(mono(if s.lookups == 0 {
                            "–".to_owned()
                        } else {
                            s.probes_max.to_string()
                        }));
                    });
                    if out.show_pc.is_none() && row.response().clicked() {
                        out.select = Some(if selected == Some(s.site) {
                            None
                        } else {
                            Some(s.site)
                        });
                    }
                });
            });
        if let Some(c) = clicked_header {
            self.click(c);
        }
        out
    }
}

/// A count with a comma every three digits: `8,294,400`.
pub fn count(n: u64) -> String {
    let s = n.to_string();
    let mut o = String::with_capacity(s.len() + s.len() / 3);
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            o.push(',');
        }
        o.push(ch);
    }
    o
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;
    use crate::instrumented::fixture::Fixture;

    #[test]
    fn sorts_by_every_column_and_a_second_click_reverses() {
        let ir = Fixture::new(256, 256).section();
        let mut v = SitesView::default();
        // The default: most escapes first; the node reads (four a lane) escape most, then the
        // instance read.
        let order = v.order(&ir).to_vec();
        assert_eq!(
            ir.sites[order[0]].site,
            crate::instrumented::fixture::NODE_SITE
        );
        assert_eq!(
            ir.sites[order[1]].site,
            crate::instrumented::fixture::ESCAPING_SITE
        );
        for c in SiteColumn::ALL {
            v.click(c);
            let asc_or_desc = v.descending;
            let order = v.order(&ir).to_vec();
            assert_eq!(order.len(), ir.sites.len());
            let keyed: Vec<f64> = order
                .iter()
                .map(|&i| {
                    let s = &ir.sites[i];
                    match c {
                        SiteColumn::Site => f64::from(s.site),
                        SiteColumn::Pc => s.pc as f64,
                        SiteColumn::Size => f64::from(s.size_bytes),
                        SiteColumn::Accesses => s.accesses as f64,
                        SiteColumn::Escapes => s.escapes as f64,
                        SiteColumn::Lookups => s.lookups as f64,
                        SiteColumn::MeanProbes => mean_probes(s),
                        SiteColumn::MaxProbes => f64::from(s.probes_max),
                        SiteColumn::Kind | SiteColumn::Op => 0.0,
                    }
                })
                .collect();
            for w in keyed.windows(2) {
                if asc_or_desc {
                    assert!(w[0] >= w[1], "{c:?} descending: {keyed:?}");
                } else {
                    assert!(w[0] <= w[1], "{c:?} ascending: {keyed:?}");
                }
            }
            v.click(c);
            assert_eq!(
                v.descending, !asc_or_desc,
                "a second click on {c:?} reverses"
            );
            let again = v.order(&ir).to_vec();
            if c == SiteColumn::Site || c == SiteColumn::Pc {
                let mut rev = order.clone();
                rev.reverse();
                assert_eq!(again, rev, "{c:?}: distinct keys reverse exactly");
            }
        }
        // Counts sort largest first on a first click, names and numbers smallest first.
        v.click(SiteColumn::Lookups);
        assert!(v.descending);
        v.click(SiteColumn::Pc);
        assert!(!v.descending);
        assert_eq!(v.order(&ir)[0], 0);
    }

    #[test]
    fn counts_read_in_thousands() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1,000");
        assert_eq!(count(8_294_400), "8,294,400");
    }
}
