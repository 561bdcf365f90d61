//! The Chunk table panel (T1–T6): the table's summary, a probe-length histogram (egui_plot), the
//! lookups of the selected access or of a typed address probe by probe, and the table as a grid
//! of slots (empty, occupied, marked) with the lookup highlighted.
//!
//! The grid paints only the rows in view, as one mesh with one quad per run of equal slots, so a
//! table of 524,288 slots costs what the screen shows. The panel reads an immutable
//! [`TableSnapshot`]; a typed address is traced on it with [`ChunkTable::trace`], a read.

use std::sync::Arc;

use dispatchscope_core::DispatchReport;
use dispatchscope_core::chunk_table::ChunkTable;
use dispatchscope_core::report::{LookupOutcome, LookupTrace};
use egui::{Color32, Mesh, Pos2, Rect, RichText, Sense, Shape, Stroke, StrokeKind, Vec2};
use egui_plot::{Bar, BarChart, Plot};

use crate::compare::{self, DiffMarks};
use crate::style::{self, hex, mono};
use crate::{Action, Selection};

/// The chunk table as it stood after a dispatch: what the app keeps per dispatch, shared between
/// the dispatches that left it unchanged.
#[derive(Clone, Debug)]
pub struct TableSnapshot {
    /// The table.
    pub table: Arc<ChunkTable>,
    /// The position in the session of the dispatch that last changed it.
    pub from_dispatch: usize,
    /// histogram\[k] = stored chunks that need k probes, computed once.
    pub probe_histogram: Arc<Vec<u64>>,
}

impl TableSnapshot {
    /// A snapshot of `table`, left by the dispatch at `from_dispatch`.
    pub fn new(table: ChunkTable, from_dispatch: usize) -> Self {
        let probe_histogram = Arc::new(table.probe_histogram_hits());
        Self {
            table: Arc::new(table),
            from_dispatch,
            probe_histogram,
        }
    }
}

/// Which lookups the panel traces.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Source {
    /// The selected access's lookups (T5: its first and last byte's chunks).
    Access(usize),
    /// The address typed in the box.
    Typed(u64),
}

/// The Chunk table panel's state.
#[derive(Debug)]
pub struct ChunkTablePanel {
    /// The address box's text.
    pub typed: String,
    source: Option<Source>,
    /// Which of the source's lookups (0 or 1).
    lookup: usize,
    /// How many probes of the lookup are shown (1 = only the home slot).
    step: usize,
    scroll_to: Option<usize>,
    /// Size of a grid cell in points.
    pub cell: f32,
    last_access: Option<usize>,
    /// In a comparison, what differs from the other side (the chunk size and the probes are
    /// highlighted when they changed).
    pub diff: Option<DiffMarks>,
}

impl Default for ChunkTablePanel {
    fn default() -> Self {
        Self {
            typed: String::new(),
            source: None,
            lookup: 0,
            step: 0,
            scroll_to: None,
            cell: 6.0,
            last_access: None,
            diff: None,
        }
    }
}

/// What a slot is, for the grid.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cell {
    Empty,
    Occupied,
    Marked,
}

/// Columns of the grid for `width` points: a power of two, so a row starts at a round slot.
fn columns_for(width: f32, cell: f32) -> usize {
    let fit = (width / cell).max(16.0) as usize;
    let mut c = 16usize;
    while c * 2 <= fit && c < 1024 {
        c *= 2;
    }
    c
}

/// One line per lookup: home slot, each probe, how it ended and why.
pub fn describe_trace(t: &LookupTrace) -> Vec<String> {
    let mut v = vec![format!(
        "chunk {}: home slot {}",
        hex(t.guest_chunk),
        t.home_slot
    )];
    for (i, p) in t.probes.iter().enumerate() {
        let what = match p.key {
            None => "empty: the key is not stored (a miss stops here)".to_owned(),
            Some(k) if k == t.guest_chunk => "the key: hit".to_owned(),
            Some(k) => format!("holds chunk {}: probe on", hex(k)),
        };
        v.push(format!("probe {} at slot {}: {what}", i + 1, p.slot));
    }
    v.push(match t.outcome {
        LookupOutcome::Hit { slot, device_addr } => {
            format!("hit at slot {slot}: device address {}", hex(device_addr))
        }
        LookupOutcome::MissEmpty { slot } => {
            format!("miss: slot {slot} is empty, so no mapping holds the chunk (T4)")
        }
        LookupOutcome::MissBound => {
            "miss: the probe bound was reached (T2: a defect if the chunk is mapped)".to_owned()
        }
    });
    v
}

impl ChunkTablePanel {
    /// Traces `address` (the typed-address box), as if typed.
    pub fn trace_address(&mut self, address: u64) {
        self.typed = hex(address);
        self.source = Some(Source::Typed(address));
        self.lookup = 0;
        self.step = usize::MAX;
    }

    /// Shows one more probe of the lookup.
    pub fn step_forward(&mut self) {
        self.step = self.step.saturating_add(1);
    }

    /// Shows one probe fewer.
    pub fn step_back(&mut self) {
        self.step = self.step.saturating_sub(1).max(1);
    }

    fn traces(&self, report: &DispatchReport, snap: Option<&TableSnapshot>) -> Vec<LookupTrace> {
        match &self.source {
            Some(Source::Access(i)) => report
                .accesses
                .get(*i)
                .map(|a| a.lookups.clone())
                .unwrap_or_default(),
            Some(Source::Typed(addr)) => snap
                .map(|s| vec![s.table.trace(addr >> s.table.chunk_shift())])
                .unwrap_or_default(),
            None => Vec::new(),
        }
    }

    /// Draws the panel for `report` over `snap`, the table as the dispatch left it.
    pub fn ui(
        &mut self,
        ui: &mut egui::Ui,
        report: &DispatchReport,
        snap: Option<&TableSnapshot>,
        sel: &Selection,
    ) -> Vec<Action> {
        puffin::profile_function!();
        let mut actions = Vec::new();
        if sel.access != self.last_access {
            self.last_access = sel.access;
            if let Some(a) = sel.access
                && report
                    .accesses
                    .get(a)
                    .is_some_and(|a| !a.lookups.is_empty())
            {
                self.source = Some(Source::Access(a));
                self.lookup = 0;
                self.step = usize::MAX;
            }
        }
        summary_ui(ui, report, snap, self.diff.as_ref());
        let Some(snap) = snap else {
            return actions;
        };
        let traces = self.traces(report, Some(snap));
        self.lookup_ui(ui, &traces);
        let probes_differ = self.diff.as_ref().is_some_and(|d| d.probes);
        egui::CollapsingHeader::new(compare::mark_text(
            "Probe lengths of stored chunks",
            probes_differ,
        ))
        .id_salt("probe-hist")
        .default_open(true)
        .show(ui, |ui| histogram_ui(ui, report, snap));
        let trace = traces.get(self.lookup.min(traces.len().saturating_sub(1)));
        let shown = trace
            .map(|t| self.step.clamp(1, t.probes.len().max(1)))
            .unwrap_or(0);
        self.grid_ui(ui, report, snap, sel, trace, shown, &mut actions);
        actions
    }

    fn lookup_ui(&mut self, ui: &mut egui::Ui, traces: &[LookupTrace]) {
        ui.horizontal(|ui| {
            let label = ui.label("Trace address");
            let edit = ui
                .add(
                    egui::TextEdit::singleline(&mut self.typed)
                        .hint_text("0x…")
                        .desired_width(160.0),
                )
                .labelled_by(label.id);
            let go = ui
                .button("Trace")
                .on_hover_text("Look the address up in this table, probe by probe");
            if go.clicked() || (edit.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter)))
            {
                match dispatchscope_core::addr::parse_u64(&self.typed) {
                    Some(a) => self.trace_address(a),
                    None => self.source = None,
                }
            }
            match &self.source {
                Some(Source::Access(i)) => {
                    ui.label(format!("showing the lookups of access {i}"));
                }
                Some(Source::Typed(a)) => {
                    ui.label(format!("showing the lookup of {}", hex(*a)));
                }
                None => {
                    style::nothing(ui, "Select an access or type an address to see its lookup.");
                }
            }
        });
        if traces.is_empty() {
            return;
        }
        if traces.len() > 1 {
            ui.horizontal(|ui| {
                ui.label("T5: the access's lookups:");
                for (i, t) in traces.iter().enumerate() {
                    let which = if i == 0 { "first byte" } else { "last byte" };
                    if ui
                        .selectable_label(
                            self.lookup == i,
                            format!("{which}: chunk {}", hex(t.guest_chunk)),
                        )
                        .clicked()
                    {
                        self.lookup = i;
                        self.step = usize::MAX;
                    }
                }
            });
        }
        let Some(t) = traces.get(self.lookup.min(traces.len() - 1)) else {
            return;
        };
        let n = t.probes.len().max(1);
        let shown = self.step.clamp(1, n);
        ui.horizontal(|ui| {
            if ui
                .add_enabled(shown > 1, egui::Button::new("Previous probe"))
                .on_hover_text("Step back through the probes")
                .clicked()
            {
                self.step = shown - 1;
                self.scroll_to = t.probes.get(shown - 2).map(|p| p.slot);
            }
            ui.label(mono(format!("probe {shown} of {}", t.probes.len())));
            if ui
                .add_enabled(shown < n, egui::Button::new("Next probe"))
                .on_hover_text("Step forward through the probes")
                .clicked()
            {
                self.step = shown + 1;
                self.scroll_to = t.probes.get(shown).map(|p| p.slot);
            }
            if ui.button("Show home slot").clicked() {
                self.scroll_to = Some(t.home_slot);
            }
        });
        let lines = describe_trace(t);
        for (i, line) in lines.iter().enumerate() {
            // Line 0 is the home slot; lines 1..=n the probes; the last the outcome.
            let visible = i == 0 || i <= shown || (i == lines.len() - 1 && shown >= n);
            if !visible {
                continue;
            }
            let text = mono(line);
            ui.label(if i == shown {
                text.color(style::SELECTED)
            } else {
                text
            });
        }
    }

    #[allow(
        clippy::too_many_arguments,
        reason = "one call site; the arguments are the panel's inputs"
    )]
    fn grid_ui(
        &mut self,
        ui: &mut egui::Ui,
        report: &DispatchReport,
        snap: &TableSnapshot,
        sel: &Selection,
        trace: Option<&LookupTrace>,
        shown: usize,
        actions: &mut Vec<Action>,
    ) {
        puffin::profile_function!();
        let table = &snap.table;
        let slots = table.slots();
        let cap = slots.len();
        // Small tables get larger cells; a large one keeps the person's size.
        let cell = match cap {
            0..=1024 => 16.0,
            1025..=16384 => 10.0,
            _ => self.cell.max(2.0),
        };
        let cols = columns_for(ui.available_width() - 60.0, cell);
        let rows = cap.div_ceil(cols);
        let mut marks: Vec<usize> = report.marks.iter().map(|m| m.table_slot).collect();
        marks.sort_unstable();
        ui.horizontal(|ui| {
            ui.label(RichText::new("■ empty").color(style::EMPTY.gamma_multiply(2.0)));
            ui.label(RichText::new("■ occupied").color(style::OCCUPIED));
            ui.label(RichText::new("■ marked (C1)").color(style::WRITTEN));
            ui.label(RichText::new("□ lookup").color(style::SELECTED));
            ui.label(format!("{cap} slots, {cols} a row"));
        });
        let mut area = egui::ScrollArea::vertical()
            .id_salt("chunk-grid")
            .auto_shrink([false, false]);
        if let Some(slot) = self.scroll_to.take() {
            let row = (slot / cols) as f32;
            area = area.vertical_scroll_offset((row * cell - 100.0).max(0.0));
        }
        area.show_viewport(ui, |ui, viewport| {
            let size = Vec2::new(60.0 + cols as f32 * cell, rows as f32 * cell + 8.0);
            let (rect, response) = ui.allocate_exact_size(size, Sense::click());
            let origin = rect.min + Vec2::new(60.0, 4.0);
            let first = (((viewport.min.y - 4.0) / cell).floor().max(0.0)) as usize;
            let last = ((((viewport.max.y - 4.0).max(0.0) / cell).ceil()) as usize).min(rows);
            let painter = ui.painter();
            let visible = Rect::from_min_max(
                Pos2::new(origin.x, origin.y + first as f32 * cell),
                Pos2::new(origin.x + cols as f32 * cell, origin.y + last as f32 * cell),
            );
            painter.rect_filled(visible, 0.0, style::EMPTY);
            let mut mesh = Mesh::default();
            let font = egui::FontId::monospace(9.0);
            let mut mark_i = marks.partition_point(|&m| m < first * cols);
            for row in first..last {
                let y = origin.y + row as f32 * cell;
                let start = row * cols;
                let end = (start + cols).min(cap);
                if row % 8 == 0 {
                    painter.text(
                        Pos2::new(rect.left(), y),
                        egui::Align2::LEFT_TOP,
                        start.to_string(),
                        font.clone(),
                        style::MUTED,
                    );
                }
                let mut run: Option<(usize, Cell)> = None;
                let flush = |mesh: &mut Mesh, from: usize, to: usize, c: Cell| {
                    let color = match c {
                        Cell::Empty => return,
                        Cell::Occupied => style::OCCUPIED,
                        Cell::Marked => style::WRITTEN,
                    };
                    let r = Rect::from_min_max(
                        Pos2::new(origin.x + (from - start) as f32 * cell, y),
                        Pos2::new(origin.x + (to - start) as f32 * cell - 0.5, y + cell - 0.5),
                    );
                    mesh.add_colored_rect(r, color);
                };
                for (i, s) in slots.iter().enumerate().take(end).skip(start) {
                    let mut c = if s.is_empty() {
                        Cell::Empty
                    } else {
                        Cell::Occupied
                    };
                    while mark_i < marks.len() && marks[mark_i] < i {
                        mark_i += 1;
                    }
                    if marks.get(mark_i) == Some(&i) {
                        c = Cell::Marked;
                    }
                    match run {
                        Some((_, rc)) if rc == c => {}
                        Some((from, rc)) => {
                            flush(&mut mesh, from, i, rc);
                            run = Some((i, c));
                        }
                        None => run = Some((i, c)),
                    }
                }
                if let Some((from, rc)) = run {
                    flush(&mut mesh, from, end, rc);
                }
            }
            painter.add(Shape::mesh(mesh));
            let cell_rect = |slot: usize| {
                let (row, col) = (slot / cols, slot % cols);
                Rect::from_min_size(
                    Pos2::new(origin.x + col as f32 * cell, origin.y + row as f32 * cell),
                    Vec2::splat(cell),
                )
            };
            if let Some(t) = trace {
                painter.rect_stroke(
                    cell_rect(t.home_slot).expand(1.5),
                    0.0,
                    Stroke::new(1.5, Color32::WHITE),
                    StrokeKind::Outside,
                );
                for (i, p) in t.probes.iter().take(shown).enumerate() {
                    let hit = p.key == Some(t.guest_chunk);
                    let color = if hit {
                        style::BOUND
                    } else if i + 1 == shown {
                        style::SELECTED
                    } else {
                        style::SELECTED.gamma_multiply(0.6)
                    };
                    painter.rect_stroke(
                        cell_rect(p.slot).expand(0.5),
                        0.0,
                        Stroke::new(1.5, color),
                        StrokeKind::Outside,
                    );
                }
            }
            if let Some(s) = sel.table_slot.filter(|s| *s < cap) {
                painter.rect_stroke(
                    cell_rect(s).expand(2.0),
                    0.0,
                    Stroke::new(2.0, style::SELECTED),
                    StrokeKind::Outside,
                );
            }
            let slot_at = |p: Pos2| -> Option<usize> {
                let v = p - origin;
                if v.x < 0.0 || v.y < 0.0 {
                    return None;
                }
                let (col, row) = ((v.x / cell) as usize, (v.y / cell) as usize);
                (col < cols)
                    .then_some(row * cols + col)
                    .filter(|s| *s < cap)
            };
            let hovered = response.hover_pos().and_then(slot_at);
            if let Some(s) = hovered {
                let text = slot_tooltip(table, report, s, &marks);
                response.clone().on_hover_text_at_pointer(text);
            }
            if response.clicked() {
                actions.push(Action::SelectTableSlot(hovered));
            }
        });
    }
}

fn slot_tooltip(
    table: &ChunkTable,
    report: &DispatchReport,
    slot: usize,
    marks: &[usize],
) -> String {
    let Some(s) = table.slots().get(slot) else {
        return String::new();
    };
    if s.is_empty() {
        return format!("slot {slot}: empty");
    }
    let home = table.home_slot(s.chunk());
    let distance = (slot + table.capacity() - home) % table.capacity();
    let mut t = format!(
        "slot {slot}: chunk {} (guest {}) → device {}\nhome slot {home}, found on probe {}",
        hex(s.chunk()),
        hex(s.chunk() << table.chunk_shift()),
        hex(s.device_addr),
        distance + 1
    );
    if s.excluded() != 0 {
        // T1 by parts: pages cut out of the chunk after its import (the write-watch or the
        // emulator's protection) are parts this slot does not reach.
        t.push_str(&format!(
            "\nreaches {} of its 16 parts (mask {:#06x}); the others escape",
            s.reach().count_ones(),
            s.reach()
        ));
    }
    if marks.binary_search(&slot).is_ok() {
        let stores: u32 = report
            .marks
            .iter()
            .filter(|m| m.table_slot == slot)
            .map(|m| m.stores)
            .sum();
        t.push_str(&format!("\nmarked by {stores} device stores (C1)"));
    }
    t
}

fn summary_ui(
    ui: &mut egui::Ui,
    report: &DispatchReport,
    snap: Option<&TableSnapshot>,
    diff: Option<&DiffMarks>,
) {
    let chunk_differs = diff.is_some_and(|d| d.chunk_bytes);
    let probes_differ = diff.is_some_and(|d| d.probes);
    match (&report.table, snap) {
        (Some(t), _) => {
            egui::CollapsingHeader::new("Table (T1–T6)")
                .id_salt("table-summary")
                .default_open(true)
                .show(ui, |ui| {
                    egui::Grid::new("table-summary-grid")
                        .num_columns(4)
                        .show(ui, |ui| {
                            ui.label(compare::mark_text("chunk (T1)", chunk_differs));
                            ui.label(mono(hex(t.chunk_bytes)));
                            ui.label("why");
                            // T1's reason can name the import that set the chunk: a line cut to
                            // the panel, whole on hover, so that the grid stays the panel's width.
                            ui.add(egui::Label::new(&t.chunk_reason).truncate())
                                .on_hover_text(&t.chunk_reason);
                            ui.end_row();
                            ui.label(compare::mark_text("slots", probes_differ));
                            ui.label(mono(t.capacity.to_string()));
                            ui.label(compare::mark_text("chunks stored", probes_differ));
                            ui.label(mono(format!("{} (load {:.3})", t.n_chunks, t.load)));
                            ui.end_row();
                            ui.label(compare::mark_text("probe bound (T2)", probes_differ));
                            ui.label(mono(t.probe_bound.to_string()));
                            ui.label("mean probes hit / miss");
                            ui.label(mono(format!(
                                "{:.2} / {:.2}",
                                t.mean_probes_hit, t.mean_probes_miss
                            )));
                            ui.end_row();
                            ui.label("hash multiplier (T2)")
                                .on_hover_text("home slot = (chunk × multiplier) >> (64 − log2 slots); the build chose it for these chunks");
                            ui.label(mono(format!("{:#x}", t.multiplier)));
                            ui.end_row();
                            ui.label("built before this dispatch");
                            let rebuilt = t.rebuilt.as_deref().unwrap_or("no: kept");
                            ui.add(egui::Label::new(rebuilt).truncate())
                                .on_hover_text(rebuilt);
                            ui.label("inserted / removed");
                            ui.label(mono(format!("{} / {}", t.inserted, t.removed)));
                            ui.end_row();
                            ui.label("placement (T6)");
                            ui.label(format!("{:?}, {} bytes", t.placement, t.table_bytes));
                            ui.label("push block (T3)");
                            ui.label(mono(format!(
                                "word {}: {}",
                                t.push_word,
                                hex(t.device_address)
                            )));
                            ui.end_row();
                        });
                });
        }
        (None, Some(s)) => {
            style::nothing(
                ui,
                &format!(
                    "This dispatch did not use the table; shown as dispatch {} left it ({} slots, {} chunks).",
                    s.from_dispatch,
                    s.table.capacity(),
                    s.table.len()
                ),
            );
        }
        (None, None) => {
            style::nothing(
                ui,
                "No device-addressed dispatch has needed a chunk table yet.",
            );
        }
    }
}

fn histogram_ui(ui: &mut egui::Ui, report: &DispatchReport, snap: &TableSnapshot) {
    let hist: &[u64] = match &report.table {
        Some(t) if !t.probe_histogram.is_empty() => &t.probe_histogram,
        _ => &snap.probe_histogram,
    };
    let bars: Vec<Bar> = hist
        .iter()
        .enumerate()
        .filter(|(k, _)| *k > 0)
        .map(|(k, n)| Bar::new(k as f64, *n as f64).width(0.8))
        .collect();
    Plot::new("probe-histogram")
        .height(110.0)
        .allow_zoom(false)
        .allow_drag(false)
        .allow_scroll(false)
        .allow_boxed_zoom(false)
        .x_axis_label("probes to find a stored chunk")
        .y_axis_label("chunks")
        .show(ui, |plot| {
            plot.bar_chart(BarChart::new("chunks", bars).color(style::OCCUPIED));
        });
}
