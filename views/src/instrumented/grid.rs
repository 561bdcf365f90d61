//! The grid picture of an instrumented pass, coloured by its escapes, its probes or its captured
//! accesses, drawn as one egui texture that is built again only when the report or the colouring
//! changes. Escapes and probes come from the section's heat map, which counts every one of them
//! by screen cell (at most 32×32 cells of workgroups); a section recorded before heat maps
//! existed places only its logged escapes, one texel per 8×8 workgroup (a 4K pass is 480×270
//! workgroups). Zoomed in far enough, the logged escapes and captured lanes are drawn pixel by
//! pixel over it.
//!
//! Hover names the cell (workgroup, pixel range, counts); a click selects its lanes as a
//! [`LaneSelection`] (a workgroup, or one pixel when zoomed to pixels), which the pass panel
//! exposes for a live link to capture on the next dispatch and uses to filter a saved pass.
//!
//! Without a heat map only logged escapes can be placed: the device counts every escape, but logs
//! (and so locates) only as many as the log holds. The legend says which the picture shows.

use dispatchscope_core::instrument::{LaneSelection, TILE};
use dispatchscope_core::report::{HeatMap, InstrumentedReport};
use egui::{Color32, ColorImage, Pos2, Rect, RichText, Sense, Stroke, TextureHandle, Vec2};

use crate::instrumented::sites::count;
use crate::style;

/// The most texels a side of the picture has; a larger grid puts several workgroups in a texel.
pub const MAX_TEXELS: u32 = 1024;
/// Points a pixel needs before the picture draws single pixels.
pub const PIXEL_ZOOM: f32 = 3.0;

/// What the cells are coloured by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Colouring {
    /// Escapes in the cell: every one by the heat map, else the logged ones.
    #[default]
    Escapes,
    /// Probes past each lookup's first in the cell (T2), by the heat map.
    Probes,
    /// Captured accesses in the cell.
    Captured,
}

/// Per-cell counts of a section: a cell is `scale × scale` workgroups (1 up to
/// [`MAX_TEXELS`] workgroups a side).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CellCounts {
    /// Workgroups a row and rows of workgroups.
    pub groups: [u32; 2],
    /// Workgroups a cell covers on a side.
    pub scale: u32,
    /// Cells a row and rows of cells.
    pub cells: [u32; 2],
    /// Logged escapes a cell, row by row.
    pub escapes: Vec<u32>,
    /// Captured accesses a cell.
    pub captured: Vec<u32>,
}

impl CellCounts {
    /// Counts the logged escapes and captured accesses of `ir` by cell.
    pub fn of(ir: &InstrumentedReport) -> Self {
        let groups = [ir.grid[0].div_ceil(TILE), ir.grid[1].div_ceil(TILE)];
        let scale = groups[0].max(groups[1]).div_ceil(MAX_TEXELS).max(1);
        let cells = [groups[0].div_ceil(scale), groups[1].div_ceil(scale)];
        let n = cells[0] as usize * cells[1] as usize;
        let mut c = Self {
            groups,
            scale,
            cells,
            escapes: vec![0; n],
            captured: vec![0; n],
        };
        for e in &ir.escapes {
            if let Some(i) = c.cell_of_pixel(e.pixel) {
                c.escapes[i] = c.escapes[i].saturating_add(1);
            }
        }
        for a in &ir.captured {
            if let Some(i) = c.cell_of_pixel(a.pixel) {
                c.captured[i] = c.captured[i].saturating_add(1);
            }
        }
        c
    }

    /// The cell index holding `pixel`, if it lies in the grid.
    pub fn cell_of_pixel(&self, pixel: [u32; 2]) -> Option<usize> {
        let cx = pixel[0] / TILE / self.scale;
        let cy = pixel[1] / TILE / self.scale;
        (cx < self.cells[0] && cy < self.cells[1])
            .then(|| cy as usize * self.cells[0] as usize + cx as usize)
    }

    /// The counts `colouring` uses (probes are only in the heat map: none here).
    pub fn values(&self, colouring: Colouring) -> &[u32] {
        match colouring {
            Colouring::Escapes => &self.escapes,
            Colouring::Probes => &[],
            Colouring::Captured => &self.captured,
        }
    }
}

/// A cell's colour: dark when empty, then by `ln(1 + n) / ln(1 + max)` from a dim to a bright tone.
pub fn colour(n: u64, max: u64, colouring: Colouring) -> Color32 {
    if n == 0 || max == 0 {
        return Color32::from_gray(0x26);
    }
    let t = ((1.0 + n as f32).ln() / (1.0 + max as f32).ln()).clamp(0.0, 1.0);
    let (lo, hi) = match colouring {
        Colouring::Escapes => ([0x70, 0x14, 0x14], [0xff, 0xe0, 0x40]),
        Colouring::Probes => ([0x2c, 0x1c, 0x6c], [0xe0, 0x9c, 0xff]),
        Colouring::Captured => ([0x1c, 0x3c, 0x80], [0x8c, 0xe0, 0xff]),
    };
    let mix = |a: u8, b: u8| (f32::from(a) + (f32::from(b) - f32::from(a)) * t).round() as u8;
    Color32::from_rgb(mix(lo[0], hi[0]), mix(lo[1], hi[1]), mix(lo[2], hi[2]))
}

/// The picture: one texel a cell.
pub fn image(c: &CellCounts, colouring: Colouring) -> ColorImage {
    let v = c.values(colouring);
    let max = v.iter().copied().max().unwrap_or(0);
    let pixels = v
        .iter()
        .map(|&n| colour(u64::from(n), u64::from(max), colouring))
        .collect();
    ColorImage::new([c.cells[0] as usize, c.cells[1] as usize], pixels)
}

/// The heat map's counts `colouring` uses, when it has them.
pub fn heat_values(h: &HeatMap, colouring: Colouring) -> Option<&[u64]> {
    match colouring {
        Colouring::Escapes => Some(&h.escapes),
        Colouring::Probes => Some(&h.extra_probes),
        Colouring::Captured => None,
    }
}

/// The heat map's picture: one texel a heat cell.
pub fn heat_image(h: &HeatMap, values: &[u64], colouring: Colouring) -> ColorImage {
    let max = values.iter().copied().max().unwrap_or(0);
    let n = h.cells[0] as usize * h.cells[1] as usize;
    let pixels = (0..n)
        .map(|i| colour(values.get(i).copied().unwrap_or(0), max, colouring))
        .collect();
    ColorImage::new([h.cells[0] as usize, h.cells[1] as usize], pixels)
}

/// The part of a heat map's picture the grid covers: its cells can reach past the grid's last
/// workgroup, so the picture is drawn with these texture coordinates.
pub fn heat_uv(h: &HeatMap, grid: [u32; 2]) -> Rect {
    let covered = |cells: u32, pixels: u32| {
        let c = u64::from(cells) * u64::from(h.scale.max(1)) * u64::from(TILE);
        if c == 0 {
            1.0
        } else {
            (pixels as f32 / c as f32).min(1.0)
        }
    };
    Rect::from_min_max(
        Pos2::ZERO,
        Pos2::new(covered(h.cells[0], grid[0]), covered(h.cells[1], grid[1])),
    )
}

/// The heat cell holding `pixel`.
pub fn heat_cell_of(h: &HeatMap, pixel: [u32; 2]) -> Option<usize> {
    let side = TILE * h.scale.max(1);
    let (cx, cy) = (pixel[0] / side, pixel[1] / side);
    (cx < h.cells[0] && cy < h.cells[1]).then(|| (cy * h.cells[0] + cx) as usize)
}

/// The pixel under `pos` of a picture of a `grid` drawn over `rect`, if it lies on it.
pub fn pixel_at(grid: [u32; 2], rect: Rect, pos: Pos2) -> Option<[u32; 2]> {
    if !rect.contains(pos) || grid[0] == 0 || grid[1] == 0 || rect.width() <= 0.0 {
        return None;
    }
    let fx = (pos.x - rect.min.x) / rect.width();
    let fy = (pos.y - rect.min.y) / rect.height();
    let x = ((fx * grid[0] as f32) as u32).min(grid[0] - 1);
    let y = ((fy * grid[1] as f32) as u32).min(grid[1] - 1);
    Some([x, y])
}

/// The workgroup number of `pixel` (8×8 workgroups, row by row).
pub fn workgroup_of(grid: [u32; 2], pixel: [u32; 2]) -> u32 {
    (pixel[1] / TILE) * grid[0].div_ceil(TILE) + pixel[0] / TILE
}

/// The pixels `[x0, y0, x1, y1)` of workgroup `wg`.
pub fn workgroup_pixels(grid: [u32; 2], wg: u32) -> [u32; 4] {
    let gx = grid[0].div_ceil(TILE).max(1);
    let (x, y) = ((wg % gx) * TILE, (wg / gx) * TILE);
    [x, y, (x + TILE).min(grid[0]), (y + TILE).min(grid[1])]
}

/// What a click on the picture selects: the workgroup under it, or the pixel when zoomed to
/// pixels.
pub fn selection_at(grid: [u32; 2], pixel: [u32; 2], pixels: bool) -> LaneSelection {
    if pixels {
        LaneSelection::rect(pixel[0], pixel[1], pixel[0] + 1, pixel[1] + 1)
    } else {
        LaneSelection::workgroup(workgroup_of(grid, pixel), u64::MAX)
    }
}

type TexKey = (usize, [u32; 2], usize, usize, u64, Colouring);

/// The grid picture's state.
pub struct GridView {
    /// What the cells are coloured by.
    pub colouring: Colouring,
    /// The picture's size over the size that fits the panel (1 = fit).
    pub zoom: f32,
    /// Textures built so far (a test counts them: one per change of report or colouring).
    pub rebuilds: u64,
    /// Where the whole picture was drawn last frame, on screen.
    pub last_rect: Option<Rect>,
    counts: Option<(TexKey, CellCounts)>,
    texture: Option<(TexKey, TextureHandle)>,
}

impl std::fmt::Debug for GridView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GridView")
            .field("colouring", &self.colouring)
            .field("zoom", &self.zoom)
            .field("rebuilds", &self.rebuilds)
            .field("last_rect", &self.last_rect)
            .field("texture", &self.texture.as_ref().map(|(k, t)| (k, t.id())))
            .finish_non_exhaustive()
    }
}

impl Default for GridView {
    fn default() -> Self {
        Self {
            colouring: Colouring::Escapes,
            zoom: 1.0,
            rebuilds: 0,
            last_rect: None,
            counts: None,
            texture: None,
        }
    }
}

fn tex_key(ir: &InstrumentedReport, colouring: Colouring) -> TexKey {
    (
        ir as *const InstrumentedReport as usize,
        ir.grid,
        ir.escapes.len(),
        ir.captured.len(),
        ir.counters.escapes,
        colouring,
    )
}

impl GridView {
    /// The per-cell counts of `ir`, kept until the report changes.
    pub fn counts(&mut self, ir: &InstrumentedReport) -> &CellCounts {
        let key = tex_key(ir, Colouring::Escapes);
        if self.counts.as_ref().is_some_and(|(k, _)| *k != key) {
            self.counts = None;
        }
        &self
            .counts
            .get_or_insert_with(|| (key, CellCounts::of(ir)))
            .1
    }

    fn texture(&mut self, ctx: &egui::Context, ir: &InstrumentedReport) -> TextureHandle {
        let key = tex_key(ir, self.colouring);
        if let Some((k, t)) = &self.texture
            && *k == key
        {
            return t.clone();
        }
        puffin::profile_scope!("grid texture");
        let colouring = self.colouring;
        let img = match ir
            .heat
            .as_ref()
            .and_then(|h| heat_values(h, colouring).map(|v| (h, v)))
        {
            Some((h, v)) => heat_image(h, v, colouring),
            None => image(self.counts(ir), colouring),
        };
        let t = ctx.load_texture("pass-grid", img, egui::TextureOptions::NEAREST);
        self.rebuilds += 1;
        self.texture = Some((key, t.clone()));
        t
    }

    /// Draws the controls, the legend and the picture, at most `max_height` tall; returns the
    /// selection a click made.
    pub fn ui(
        &mut self,
        ui: &mut egui::Ui,
        ir: &InstrumentedReport,
        selected: Option<&LaneSelection>,
        max_height: f32,
    ) -> Option<LaneSelection> {
        puffin::profile_function!();
        if ir.grid[0] == 0 || ir.grid[1] == 0 {
            style::nothing(ui, "The pass's grid is empty.");
            return None;
        }
        ui.horizontal_wrapped(|ui| {
            ui.label("Colour by:");
            ui.selectable_value(&mut self.colouring, Colouring::Escapes, "escapes");
            if ir.heat.is_some() {
                ui.selectable_value(&mut self.colouring, Colouring::Probes, "probes");
            } else if self.colouring == Colouring::Probes {
                self.colouring = Colouring::Escapes;
            }
            ui.selectable_value(
                &mut self.colouring,
                Colouring::Captured,
                "captured accesses",
            );
            ui.separator();
            ui.add(
                egui::Slider::new(&mut self.zoom, 1.0..=64.0)
                    .logarithmic(true)
                    .text("zoom"),
            );
        });
        self.legend_ui(ui, ir);
        let tex = self.texture(ui.ctx(), ir);
        let grid = ir.grid;
        let aspect = grid[1] as f32 / grid[0] as f32;
        let avail = ui.available_width().max(64.0);
        let fit_w = avail.min(max_height / aspect.max(1e-6)).max(32.0);
        let size = Vec2::new(fit_w, fit_w * aspect) * self.zoom;
        let points_per_pixel = size.x / grid[0] as f32;
        let pixels = points_per_pixel >= PIXEL_ZOOM;
        let mut clicked = None;
        egui::ScrollArea::both()
            .id_salt("pass-grid-scroll")
            .max_height(max_height)
            .auto_shrink([true, true])
            .show(ui, |ui| {
                let (rect, resp) = ui.allocate_exact_size(size, Sense::click());
                self.last_rect = Some(rect);
                let painter = ui.painter_at(rect.intersect(ui.clip_rect()));
                let uv = match ir.heat.as_ref() {
                    Some(h) if heat_values(h, self.colouring).is_some() => heat_uv(h, grid),
                    _ => Rect::from_min_max(Pos2::ZERO, Pos2::new(1.0, 1.0)),
                };
                painter.image(tex.id(), rect, uv, Color32::WHITE);
                let to_screen = |x: u32, y: u32| {
                    Pos2::new(
                        rect.min.x + x as f32 * points_per_pixel,
                        rect.min.y + y as f32 * points_per_pixel,
                    )
                };
                if pixels {
                    // Single pixels: only those in view, and only the logged ones (bounded).
                    let view = ui.clip_rect();
                    for e in &ir.escapes {
                        let r = Rect::from_min_size(
                            to_screen(e.pixel[0], e.pixel[1]),
                            Vec2::splat(points_per_pixel),
                        );
                        if view.intersects(r) {
                            painter.rect_filled(r, 0.0, style::REFUSED);
                        }
                    }
                    for a in &ir.captured {
                        let r = Rect::from_min_size(
                            to_screen(a.pixel[0], a.pixel[1]),
                            Vec2::splat(points_per_pixel),
                        );
                        if view.intersects(r) {
                            painter.rect_stroke(
                                r,
                                0.0,
                                Stroke::new(1.0, style::DEVICE),
                                egui::StrokeKind::Inside,
                            );
                        }
                    }
                }
                if let Some(sel) = selected {
                    let [x0, y0, x1, y1] = match sel.workgroup {
                        Some(wg) => workgroup_pixels(grid, wg),
                        None => sel.rect,
                    };
                    let r = Rect::from_min_max(
                        to_screen(x0.min(grid[0]), y0.min(grid[1])),
                        to_screen(x1.min(grid[0]), y1.min(grid[1])),
                    )
                    .expand(1.0);
                    painter.rect_stroke(
                        r,
                        0.0,
                        Stroke::new(2.0, style::SELECTED),
                        egui::StrokeKind::Outside,
                    );
                }
                let hover = resp.hover_pos().and_then(|p| pixel_at(grid, rect, p));
                if let Some(px) = hover {
                    let text = self.hover_text(ir, px, pixels);
                    resp.clone().on_hover_ui_at_pointer(|ui| {
                        ui.label(style::mono(text));
                    });
                }
                if resp.clicked()
                    && let Some(px) = resp
                        .interact_pointer_pos()
                        .and_then(|p| pixel_at(grid, rect, p))
                {
                    clicked = Some(selection_at(grid, px, pixels));
                }
            });
        clicked
    }

    fn legend_ui(&mut self, ui: &mut egui::Ui, ir: &InstrumentedReport) {
        let colouring = self.colouring;
        let heat = ir
            .heat
            .as_ref()
            .and_then(|h| heat_values(h, colouring).map(|v| (h, v)));
        let c = self.counts(ir);
        let (max, scale) = match heat {
            Some((h, v)) => (v.iter().copied().max().unwrap_or(0), h.scale),
            None => (
                u64::from(c.values(colouring).iter().copied().max().unwrap_or(0)),
                c.scale,
            ),
        };
        ui.horizontal_wrapped(|ui| {
            for (n, label) in [(0, "0".to_owned()), (1, "1".to_owned()), (max, count(max))] {
                if n > max && n > 0 {
                    continue;
                }
                let (r, _) = ui.allocate_exact_size(Vec2::splat(12.0), Sense::hover());
                ui.painter().rect_filled(r, 1.0, colour(n, max, colouring));
                ui.label(RichText::new(label).small());
            }
            let cell = if scale == 1 {
                "a cell is one 8×8 workgroup".to_owned()
            } else {
                format!("a cell is {scale}×{scale} workgroups of 8×8")
            };
            let what = match (colouring, heat) {
                (Colouring::Escapes, Some((_, v))) => format!(
                    "{cell}; every escape placed: {} counted",
                    count(v.iter().sum::<u64>())
                ),
                (Colouring::Probes, Some((_, v))) => format!(
                    "{cell}; probes past each lookup's first: {} in all",
                    count(v.iter().sum::<u64>())
                ),
                (Colouring::Escapes | Colouring::Probes, None) => format!(
                    "{cell}; only logged escapes are placed: {} logged of {} counted (the total is the counter)",
                    count(ir.escapes.len() as u64),
                    count(ir.counters.escapes)
                ),
                (Colouring::Captured, _) => format!(
                    "{cell}; {} captured accesses kept",
                    count(ir.captured.len() as u64)
                ),
            };
            ui.label(RichText::new(what).small().color(style::MUTED));
        });
    }

    fn hover_text(&mut self, ir: &InstrumentedReport, px: [u32; 2], pixels: bool) -> String {
        let grid = ir.grid;
        let wg = workgroup_of(grid, px);
        let [x0, y0, x1, y1] = workgroup_pixels(grid, wg);
        let esc = ir.escapes.iter().filter(|e| e.workgroup == wg).count();
        let cap = ir.captured.iter().filter(|a| a.workgroup == wg).count();
        let mut t = format!(
            "workgroup {wg} ({}, {}): pixels [{x0}, {x1}) × [{y0}, {y1})\n{esc} logged escapes, {cap} captured accesses",
            x0 / TILE,
            y0 / TILE
        );
        if let Some(h) = ir.heat.as_ref()
            && let Some(i) = heat_cell_of(h, px)
        {
            let side = TILE * h.scale.max(1);
            t.push_str(&format!(
                "\nheat cell ({}, {}): {} escapes, {} probes past the first",
                px[0] / side,
                px[1] / side,
                count(h.escapes.get(i).copied().unwrap_or(0)),
                count(h.extra_probes.get(i).copied().unwrap_or(0))
            ));
        }
        if pixels {
            let pe = ir.escapes.iter().filter(|e| e.pixel == px).count();
            let pc = ir.captured.iter().filter(|a| a.pixel == px).count();
            t.push_str(&format!(
                "\npixel ({}, {}): {pe} logged escapes, {pc} captured accesses",
                px[0], px[1]
            ));
        }
        t.push_str("\nclick: select these lanes");
        t
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;
    use crate::instrumented::fixture::Fixture;

    #[test]
    fn the_heat_picture_places_every_escape_and_probe_by_its_cell() {
        let ir = Fixture::new(3840, 2160).section();
        let h = ir.heat.as_ref().unwrap();
        let grid = dispatchscope_core::instrument::Grid::new(3840, 2160).unwrap();
        assert_eq!(h.cells, grid.heat_cells());
        assert!(h.cells[0] <= 32 && h.cells[1] <= 32);
        assert_eq!(h.escapes.iter().sum::<u64>(), ir.counters.escapes);
        // A pixel's heat cell is its workgroup's.
        for px in [[0, 0], [3839, 2159], [1234, 987], [8 * 15 * 3 + 1, 8 * 15]] {
            let (wg, _) = grid.lane_of(px);
            assert_eq!(heat_cell_of(h, px), grid.heat_cell_of(wg), "{px:?}");
        }
        assert_eq!(heat_cell_of(h, [3840 * 2, 0]), None);
        for (colouring, values) in [
            (Colouring::Escapes, &h.escapes),
            (Colouring::Probes, &h.extra_probes),
        ] {
            let img = heat_image(h, heat_values(h, colouring).unwrap(), colouring);
            assert_eq!(img.size, [h.cells[0] as usize, h.cells[1] as usize]);
            let hottest = (0..values.len()).max_by_key(|&i| values[i]).unwrap();
            let max = values[hottest];
            assert_eq!(img.pixels[hottest], colour(max, max, colouring));
            let cold = values.iter().position(|&n| n == 0).unwrap();
            assert_eq!(img.pixels[cold], colour(0, max, colouring));
        }
        assert!(heat_values(h, Colouring::Captured).is_none());
        // The cells reach past the grid's last workgroup: the picture is cut to the grid.
        let uv = heat_uv(h, ir.grid);
        assert!(uv.max.x > 0.9 && uv.max.x <= 1.0 && uv.max.y > 0.9 && uv.max.y <= 1.0);
    }

    #[test]
    fn cells_count_the_logged_escapes_of_their_workgroup() {
        let ir = Fixture::new(3840, 2160).section();
        let c = CellCounts::of(&ir);
        assert_eq!(c.cells, [480, 270]);
        assert_eq!(c.scale, 1);
        assert_eq!(
            c.escapes.iter().map(|&n| u64::from(n)).sum::<u64>(),
            ir.escapes.len() as u64
        );
        assert_eq!(c.captured.iter().sum::<u32>() as usize, ir.captured.len());
        for e in &ir.escapes {
            assert_eq!(workgroup_of(ir.grid, e.pixel), e.workgroup);
            assert!(c.escapes[e.workgroup as usize] > 0);
        }
        // A grid of more than MAX_TEXELS workgroups a side shares texels.
        let mut huge = ir.clone();
        huge.grid = [TILE * MAX_TEXELS * 3, TILE * 8];
        let h = CellCounts::of(&huge);
        assert_eq!(h.scale, 3);
        assert_eq!(h.cells, [MAX_TEXELS, 3]);
    }

    #[test]
    fn a_position_maps_to_its_pixel_and_workgroup() {
        let grid = [1920, 1080];
        let rect = Rect::from_min_size(Pos2::new(100.0, 50.0), Vec2::new(960.0, 540.0));
        assert_eq!(pixel_at(grid, rect, Pos2::new(100.0, 50.0)), Some([0, 0]));
        assert_eq!(
            pixel_at(grid, rect, Pos2::new(100.0 + 480.25, 50.0 + 270.25)),
            Some([960, 540])
        );
        assert_eq!(pixel_at(grid, rect, Pos2::new(99.0, 60.0)), None);
        assert_eq!(workgroup_of(grid, [960, 540]), (540 / 8) * 240 + 960 / 8);
        assert_eq!(workgroup_pixels(grid, 241), [8, 8, 16, 16]);
        assert_eq!(
            selection_at(grid, [9, 9], false),
            LaneSelection::workgroup(241, u64::MAX)
        );
        assert_eq!(
            selection_at(grid, [9, 9], true),
            LaneSelection::rect(9, 9, 10, 10)
        );
    }

    #[test]
    fn colours_ramp_from_empty_to_the_most() {
        assert_eq!(colour(0, 10, Colouring::Escapes), Color32::from_gray(0x26));
        assert_ne!(
            colour(1, 10, Colouring::Escapes),
            colour(10, 10, Colouring::Escapes)
        );
        assert_eq!(
            colour(10, 10, Colouring::Escapes),
            Color32::from_rgb(0xff, 0xe0, 0x40)
        );
    }
}
