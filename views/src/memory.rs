//! The Memory panel (M1–M5, C3): the events applied before the dispatch, what was written into
//! guest memory first, the readable runs, the pieces mapped and left out with the reason, the
//! generation, and whether this dispatch mapped again.

use dispatchscope_core::input::Backing;
use dispatchscope_core::memory::{GuestMemory, PageState, ProtectedTarget};
use dispatchscope_core::report::{LeftOutReason, Route};
use dispatchscope_core::{ByteRange, DispatchReport};
use egui::{Pos2, Rect, RichText, Sense, Vec2};

use crate::style::{self, hex, mono};
use crate::{Action, Selection};

/// The Memory panel's state.
#[derive(Debug, Default)]
pub struct MemoryPanel {
    /// The address typed into the byte view, as text.
    address_text: String,
    /// The address the byte view shows (typed, or the selected access's).
    shown: Option<u64>,
}

/// Bytes the byte view shows at once: 16 rows of 16.
pub const BYTES_SHOWN: u32 = 256;

/// Guest bytes a live target read now (`ToDebugger::Memory`): from the emulator's own pages in
/// host mode, the engine's simulated contents otherwise.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetBytes {
    /// The first byte read.
    pub address: u64,
    /// The bytes, or why the target could not read them.
    pub bytes: Result<Vec<u8>, String>,
}

/// Where the byte view's bytes come from.
#[derive(Clone, Copy, Debug)]
pub enum GuestBytes<'a> {
    /// No live target: a saved session shows no bytes.
    Unavailable,
    /// A live target, and what it last answered.
    Live(Option<&'a TargetBytes>),
}

/// What M1 and M3 make of one page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageClass {
    /// The guest left it unreadable: in no readable run (M1).
    Unreadable,
    /// Readable, committed, private and read-write: mapped with its run (M3).
    Mappable,
    /// Readable but left out (M3), and why.
    LeftOut(LeftOutReason),
}

impl PageClass {
    /// The class of `page`.
    pub fn of(page: &PageState) -> Self {
        if !page.guest.readable {
            PageClass::Unreadable
        } else if page.mappable() {
            PageClass::Mappable
        } else if !page.committed {
            PageClass::LeftOut(LeftOutReason::NotCommitted)
        } else if page.backing == Backing::Shared {
            PageClass::LeftOut(LeftOutReason::NotPrivate)
        } else {
            PageClass::LeftOut(LeftOutReason::NotReadWrite)
        }
    }

    fn color(self) -> egui::Color32 {
        match self {
            PageClass::Unreadable => style::EMPTY,
            PageClass::Mappable => style::BOUND,
            PageClass::LeftOut(_) => style::WRITTEN,
        }
    }

    fn text(self) -> &'static str {
        match self {
            PageClass::Unreadable => "not readable by the guest",
            PageClass::Mappable => "committed, private, read-write: mappable (M3)",
            PageClass::LeftOut(r) => r.phrase(),
        }
    }
}

/// Consecutive pages of one class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageRun {
    /// Its bytes.
    pub range: ByteRange,
    /// Pages in it.
    pub pages: u64,
    /// What they are.
    pub class: PageClass,
}

/// A reservation as a dispatch left it: its pages as runs of one class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReservationView {
    /// The reserved bytes.
    pub range: ByteRange,
    /// Its pages, as runs.
    pub runs: Vec<PageRun>,
    /// Pages the write-watch has noted written (D824).
    pub written_pages: u64,
    /// Pages a write-watch guard holds read-only (D824).
    pub guarded_pages: u64,
}

/// Guest memory as a dispatch left it, for the Memory panel: what the report does not carry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryView {
    /// Every reservation.
    pub reservations: Vec<ReservationView>,
    /// The protected targets (D720) and whether each is still trusted.
    pub targets: Vec<ProtectedTarget>,
}

impl MemoryView {
    /// A summary of `memory`, read (not changed): one step per run of equal pages.
    pub fn of(memory: &GuestMemory) -> Self {
        let page = memory.page_bytes();
        Self::from_runs(
            page,
            memory.reservations().map(|r| {
                (
                    r.range,
                    r.pages
                        .runs()
                        .map(|(first, end, p)| (end.saturating_sub(first), *p)),
                )
            }),
            memory.targets().cloned().collect(),
        )
    }

    /// A summary of reservations given as `(range, runs)`, each run `(pages, state)` in address
    /// order from the reservation's start (as a capture's memory checkpoint keeps them), with the
    /// protected targets.
    pub fn from_runs<R, P>(page_bytes: u64, reservations: R, targets: Vec<ProtectedTarget>) -> Self
    where
        R: IntoIterator<Item = (ByteRange, P)>,
        P: IntoIterator<Item = (u64, PageState)>,
    {
        let page = page_bytes.max(1);
        let reservations = reservations
            .into_iter()
            .map(|(range, pages)| {
                let mut runs: Vec<PageRun> = Vec::new();
                let (mut written_pages, mut guarded_pages) = (0u64, 0u64);
                let mut start = range.start;
                for (n, p) in pages {
                    let class = PageClass::of(&p);
                    let end = start.saturating_add(n.saturating_mul(page));
                    written_pages += if p.written { n } else { 0 };
                    guarded_pages += if p.guarded { n } else { 0 };
                    match runs.last_mut() {
                        Some(last) if last.class == class && last.range.end == start => {
                            last.range.end = end;
                            last.pages += n;
                        }
                        _ if n > 0 => runs.push(PageRun {
                            range: ByteRange::new(start, end),
                            pages: n,
                            class,
                        }),
                        _ => {}
                    }
                    start = end;
                }
                ReservationView {
                    range,
                    runs,
                    written_pages,
                    guarded_pages,
                }
            })
            .collect();
        Self {
            reservations,
            targets,
        }
    }
}

/// A list of `n` rows: drawn whole when short, else in a scroll area of its own that lays out only
/// the rows in view (a 16 GiB guest cut by a write-watch has thousands of pieces and left-out
/// pages; the panel costs what is on screen).
fn rows(
    ui: &mut egui::Ui,
    id: impl std::hash::Hash + std::fmt::Debug,
    n: usize,
    mut row: impl FnMut(&mut egui::Ui, usize),
) {
    const WHOLE: usize = 64;
    if n <= WHOLE {
        for i in 0..n {
            row(ui, i);
        }
        return;
    }
    ui.label(format!("{n} rows").as_str());
    let height = ui.text_style_height(&egui::TextStyle::Body) + ui.spacing().item_spacing.y;
    egui::ScrollArea::vertical()
        .id_salt(id)
        .max_height(height * 16.0)
        .auto_shrink([false, true])
        .show_rows(ui, height, n, |ui, range| {
            for i in range {
                row(ui, i);
            }
        });
}

fn reservations_ui(ui: &mut egui::Ui, view: &MemoryView, addr: Option<u64>) {
    style::section(ui, "Reservations, as this dispatch left them");
    if view.reservations.is_empty() {
        style::nothing(ui, "No reservation.");
    }
    for r in &view.reservations {
        ui.label(mono(format!(
            "{} ({} bytes): {} pages written, {} guarded (D824)",
            r.range,
            hex(r.range.size_bytes()),
            r.written_pages,
            r.guarded_pages
        )));
        // A strip, one stretch per run, widths by pages.
        let total: u64 = r.runs.iter().map(|x| x.pages).sum::<u64>().max(1);
        let width = ui.available_width().max(100.0);
        let (rect, response) = ui.allocate_exact_size(Vec2::new(width, 12.0), Sense::hover());
        let painter = ui.painter_at(rect);
        let mut done = 0u64;
        let mut hovered = None;
        for run in &r.runs {
            let x0 = rect.left() + width * (done as f32 / total as f32);
            done += run.pages;
            let x1 = (rect.left() + width * (done as f32 / total as f32)).max(x0 + 1.0);
            let rr = Rect::from_min_max(Pos2::new(x0, rect.top()), Pos2::new(x1, rect.bottom()));
            painter.rect_filled(rr, 0.0, run.class.color());
            if addr.is_some_and(|a| run.range.contains(a)) {
                painter.rect_stroke(
                    rr,
                    0.0,
                    egui::Stroke::new(2.0, style::SELECTED),
                    egui::StrokeKind::Inside,
                );
            }
            if response.hover_pos().is_some_and(|p| p.x >= x0 && p.x < x1) {
                hovered = Some(run);
            }
        }
        if let Some(run) = hovered {
            response.on_hover_text_at_pointer(format!(
                "{} ({} pages): {}",
                run.range,
                run.pages,
                run.class.text()
            ));
        }
        let odd: Vec<_> = r
            .runs
            .iter()
            .filter(|x| x.class != PageClass::Mappable)
            .collect();
        rows(ui, ("memory-runs", r.range.start), odd.len(), |ui, i| {
            let run = odd[i];
            ui.label(mono(format!("  {}: {}", run.range, run.class.text())).color(style::MUTED));
        });
    }
    if !view.targets.is_empty() {
        style::section(ui, "Protected targets (D720)");
        for t in &view.targets {
            let text = mono(format!(
                "target {} \"{}\" {}: {}",
                t.id,
                t.name,
                t.range,
                if t.trusted { "trusted" } else { "lost trust" }
            ));
            ui.label(if t.trusted {
                text
            } else {
                text.color(style::WRITTEN)
            });
        }
    }
}

/// The guest address the selected access reached, if it went to guest memory.
fn selected_address(report: &DispatchReport, sel: &Selection) -> Option<u64> {
    let a = report.accesses.get(sel.access?)?;
    match a.route {
        Route::Device { address } => Some(address),
        _ => None,
    }
}

impl MemoryPanel {
    /// Draws the panel for `report`; `memory` is guest memory as the dispatch left it, if the
    /// app kept it.
    pub fn ui(
        &mut self,
        ui: &mut egui::Ui,
        report: &DispatchReport,
        memory: Option<&MemoryView>,
        sel: &Selection,
        bytes: GuestBytes<'_>,
    ) -> Vec<Action> {
        puffin::profile_function!();
        let mut actions = Vec::new();
        let addr = selected_address(report, sel);
        let access = sel.access.and_then(|i| report.accesses.get(i));
        let marked =
            addr.map(|a| ByteRange::new(a, a + u64::from(access.map_or(1, |x| x.size_bytes))));
        if let GuestBytes::Live(got) = bytes {
            actions.extend(self.bytes_ui(ui, addr, marked, got));
        }
        egui::ScrollArea::vertical()
            .id_salt("memory-scroll")
            .auto_shrink([false, false])
            .show(ui, |ui| {
                if let Some(a) = addr {
                    ui.horizontal(|ui| {
                        ui.label("the selected access reached guest address");
                        style::addr_cell(ui, a, mono(hex(a)), &mut actions)
                            .on_hover_text("right-click: the write history of these bytes");
                    });
                }
                if let Some(view) = memory {
                    reservations_ui(ui, view, addr);
                }
                mappings_ui(ui, report, addr, &mut actions);
                events_ui(ui, report);
            });
        actions
    }
}

impl MemoryPanel {
    /// The byte view of a live target: an address (typed, or the selected access's), a read, and
    /// the bytes as the target last answered, the selected access's bytes marked.
    fn bytes_ui(
        &mut self,
        ui: &mut egui::Ui,
        selected: Option<u64>,
        marked: Option<ByteRange>,
        got: Option<&TargetBytes>,
    ) -> Option<Action> {
        let mut action = None;
        style::section(ui, "Bytes, read from the target now");
        let start = |a: u64| a & !0xf;
        ui.horizontal(|ui| {
            ui.label("address");
            let edit = ui.add(
                egui::TextEdit::singleline(&mut self.address_text)
                    .desired_width(150.0)
                    .font(egui::TextStyle::Monospace)
                    .hint_text(selected.map_or("0x…".to_owned(), hex)),
            );
            let typed = parse_address(&self.address_text);
            let wanted = typed.or(selected).map(start);
            let enter = edit.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter));
            let read = ui
                .add_enabled(wanted.is_some(), egui::Button::new("Read"))
                .on_hover_text("read these bytes from the emulator's memory now (Enter)");
            // A new address is read at once; the button reads the same bytes again.
            if let Some(a) = wanted
                && (read.clicked() || enter || self.shown != Some(a))
            {
                self.shown = Some(a);
                action = Some(Action::ReadGuest {
                    address: a,
                    len: BYTES_SHOWN,
                });
            }
            if !self.address_text.is_empty() && typed.is_none() {
                ui.label(RichText::new("not an address").color(style::WRITTEN));
            }
        });
        match got {
            None if self.shown.is_some() => style::nothing(
                ui,
                "Asked; the target answers while paused, or at its next dispatch.",
            ),
            None => style::nothing(ui, "Select an access or type an address."),
            Some(TargetBytes {
                address,
                bytes: Err(e),
            }) => {
                ui.label(RichText::new(format!("{}: {e}", hex(*address))).color(style::WRITTEN));
            }
            Some(TargetBytes {
                address,
                bytes: Ok(b),
            }) => hex_dump(ui, *address, b, marked),
        }
        action
    }
}

/// `0x…` or decimal.
fn parse_address(text: &str) -> Option<u64> {
    let t = text.trim().replace('_', "");
    match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => t.parse().ok(),
    }
}

/// Rows of 16 bytes: the address, the bytes in hex, the bytes as text; `marked` bytes stand out.
fn hex_dump(ui: &mut egui::Ui, address: u64, bytes: &[u8], marked: Option<ByteRange>) {
    egui::Grid::new("memory-bytes")
        .num_columns(3)
        .spacing([12.0, 2.0])
        .show(ui, |ui| {
            for (row, chunk) in bytes.chunks(16).enumerate() {
                let at = address + 16 * row as u64;
                ui.label(mono(hex(at)).color(style::MUTED));
                ui.horizontal(|ui| {
                    ui.spacing_mut().item_spacing.x = 4.0;
                    for (i, b) in chunk.iter().enumerate() {
                        let a = at + i as u64;
                        let text = mono(format!("{b:02x}"));
                        ui.label(if marked.is_some_and(|m| m.contains(a)) {
                            text.color(style::SELECTED).strong()
                        } else {
                            text
                        });
                    }
                });
                let text: String = chunk
                    .iter()
                    .map(|&b| if b.is_ascii_graphic() { b as char } else { '.' })
                    .collect();
                ui.label(mono(text).color(style::MUTED));
                ui.end_row();
            }
        });
}

fn mappings_ui(
    ui: &mut egui::Ui,
    report: &DispatchReport,
    addr: Option<u64>,
    actions: &mut Vec<Action>,
) {
    {
        let Some(m) = &report.mappings else {
            style::section(ui, "Mappings (M1–M5)");
            style::nothing(
                ui,
                "This dispatch did not run device-addressed: nothing was mapped for it (M1–M5 apply to device-addressed dispatches).",
            );
            return;
        };
        style::section(ui, "Generation (M4)");
        egui::Grid::new("memory-gen").num_columns(2).show(ui, |ui| {
            ui.label("generation");
            ui.label(mono(m.generation.to_string()));
            ui.end_row();
            ui.label("mapped for generation");
            ui.label(mono(m.mapped_generation.to_string()));
            ui.end_row();
            ui.label("this dispatch");
            ui.label(if m.remapped {
                RichText::new("mapped again: the generation had moved").color(style::WRITTEN)
            } else {
                RichText::new("kept the mappings")
            });
            ui.end_row();
            ui.label("full mappings so far");
            ui.label(mono(m.remaps_total.to_string()));
            ui.end_row();
            ui.label("M2 pages committed / guards released / noted written");
            ui.label(mono(format!(
                "{} / {} / {}",
                m.committed_pages, m.guards_released, m.pages_noted_written
            )));
            ui.end_row();
            ui.label("imports made / dropped since the previous dispatch");
            ui.label(mono(format!("{} / {}", m.imports_made, m.imports_dropped)));
            ui.end_row();
        });
        style::section(ui, "Readable runs (M1)");
        if m.runs.is_empty() {
            style::nothing(ui, "No reservation has a readable run.");
        }
        rows(ui, "memory-readable-runs", m.runs.len(), |ui, i| {
            let r = &m.runs[i];
            ui.label(mono(format!(
                "{} in reservation {}",
                r.range,
                hex(r.reservation)
            )));
        });
        style::section(ui, "Pieces mapped (M3)");
        if m.pieces.is_empty() {
            style::nothing(ui, "None.");
        }
        ui.horizontal(|ui| {
            for h in [
                "guest bytes",
                "device base",
                "mapped before dispatch",
                "how",
            ] {
                ui.strong(h);
                ui.add_space(24.0);
            }
        });
        rows(ui, "memory-pieces", m.pieces.len(), |ui, i| {
            ui.horizontal(|ui| {
                let p = &m.pieces[i];
                let hit = addr.is_some_and(|a| p.guest.contains(a));
                let t = mono(p.guest.to_string());
                style::addr_cell(
                    ui,
                    p.guest.start,
                    if hit { t.color(style::SELECTED) } else { t },
                    actions,
                );
                ui.label(mono(hex(p.device_base)));
                ui.label(mono(p.mapped_before_dispatch.to_string()));
                ui.label(if p.by_revisit {
                    "M5 revisit"
                } else {
                    "full mapping"
                });
            });
        });
        style::section(ui, "Pieces left out (M3)");
        if m.left_out.is_empty() {
            style::nothing(ui, "None.");
        }
        rows(ui, "memory-left-out", m.left_out.len(), |ui, i| {
            let l = &m.left_out[i];
            let hit = addr.is_some_and(|a| l.guest.contains(a));
            let t = mono(format!("{}: {}", l.guest, l.reason.phrase()));
            ui.label(if hit {
                t.color(style::SELECTED)
            } else {
                t.color(style::WRITTEN)
            });
        });
    }
}

fn events_ui(ui: &mut egui::Ui, report: &DispatchReport) {
    style::section(ui, "Events before this dispatch");
    if report.events_before.is_empty() {
        style::nothing(ui, "None.");
    }
    for e in &report.events_before {
        let name = e.event.name();
        egui::CollapsingHeader::new(format!("event {}: {name}", e.index))
            .id_salt(("event", e.index))
            .default_open(!e.effects.is_empty())
            .show(ui, |ui| {
                if e.generation_moved {
                    ui.label("M4: the generation moved");
                }
                if let Some(d) = e.waited_for {
                    ui.label(format!("M5: waited for dispatch {d}"));
                }
                for line in &e.effects {
                    ui.label(line);
                }
            });
    }
    style::section(ui, "Before the dispatch (C3)");
    if report.before.copies.is_empty() {
        style::nothing(ui, "No deferred copy was written.");
    }
    for c in &report.before.copies {
        ui.label(mono(format!("copy written to {c}")));
    }
    if report.before.still_deferred > 0 {
        ui.label(format!(
            "{} copies still deferred",
            report.before.still_deferred
        ));
    }
}
