//! Colours and small widgets the panels share. Nothing here reads a report beyond the value it is
//! handed.

use dispatchscope_core::report::Mode;
use egui::{Color32, RichText};

use crate::Action;

/// A bound dispatch.
pub const BOUND: Color32 = Color32::from_rgb(0x4c, 0xaf, 0x50);
/// A device-addressed dispatch.
pub const DEVICE: Color32 = Color32::from_rgb(0x42, 0x8b, 0xf5);
/// A refused dispatch, a refusal, an escape.
pub const REFUSED: Color32 = Color32::from_rgb(0xe5, 0x48, 0x48);
/// A highlight: the selection, a probe being stepped through.
pub const SELECTED: Color32 = Color32::from_rgb(0xff, 0xc1, 0x07);
/// A written overlap (the join that made a set), a marked chunk.
pub const WRITTEN: Color32 = Color32::from_rgb(0xff, 0x8a, 0x3d);
/// An occupied chunk-table slot.
pub const OCCUPIED: Color32 = Color32::from_rgb(0x5d, 0x8a, 0xa8);
/// An empty chunk-table slot.
pub const EMPTY: Color32 = Color32::from_gray(0x30);
/// Something unbound or not run.
pub const MUTED: Color32 = Color32::from_gray(0x80);

/// The colour of a mode.
pub fn mode_color(mode: Mode) -> Color32 {
    match mode {
        Mode::Bound => BOUND,
        Mode::DeviceAddressed => DEVICE,
        Mode::Refused => REFUSED,
    }
}

/// A mode as coloured text.
pub fn mode_text(mode: Mode) -> RichText {
    RichText::new(mode.as_str()).color(mode_color(mode))
}

/// A value as monospace text.
pub fn mono(text: impl Into<String>) -> RichText {
    RichText::new(text.into()).monospace()
}

/// A label that never wraps (an address split over two lines reads as two numbers): it takes
/// the width it needs, and a table column holding it grows to fit.
pub fn addr_label(ui: &mut egui::Ui, text: impl Into<egui::WidgetText>) -> egui::Response {
    ui.add(egui::Label::new(text).wrap_mode(egui::TextWrapMode::Extend))
}

/// An address cell: [`addr_label`] with a context menu whose "Write history of 0x…" asks the app
/// for the history of the bytes at `address`: [`Action::ShowHistory`] onto the panel's `actions`.
pub fn addr_cell(
    ui: &mut egui::Ui,
    address: u64,
    text: impl Into<egui::WidgetText>,
    actions: &mut Vec<Action>,
) -> egui::Response {
    let response = ui.add(
        egui::Label::new(text)
            .wrap_mode(egui::TextWrapMode::Extend)
            .sense(egui::Sense::click()),
    );
    response.context_menu(|ui| {
        if ui.button(history_menu_text(address)).clicked() {
            actions.push(Action::ShowHistory(address));
            ui.close();
        }
    });
    response
}

/// The context menu's entry for `address`.
pub fn history_menu_text(address: u64) -> String {
    format!("Write history of {}", hex(address))
}

/// `one` when `n` is 1, else `many`: "1 write", "2 writes".
pub fn plural(n: usize, one: &'static str, many: &'static str) -> &'static str {
    if n == 1 { one } else { many }
}

/// `n` and its noun: "1 write", "0 writes", "3 writes".
pub fn count(n: usize, one: &'static str, many: &'static str) -> String {
    format!("{n} {}", plural(n, one, many))
}

/// `0x…`.
pub fn hex(v: u64) -> String {
    format!("{v:#x}")
}

/// A heading for a section of a panel.
pub fn section(ui: &mut egui::Ui, text: &str) {
    ui.add_space(4.0);
    ui.label(RichText::new(text).strong());
}

/// A line saying there is nothing to show, and why.
pub fn nothing(ui: &mut egui::Ui, text: &str) {
    ui.label(RichText::new(text).italics().color(MUTED));
}

/// Installs the fonts the panels need: egui's defaults, with Hack after Ubuntu in the
/// proportional family, so arrows and geometric shapes the reports and panels use (→, ■, ▸)
/// have a glyph. Call it before the first frame (a font set during a frame applies from the next).
pub fn install_fonts(ctx: &egui::Context) {
    let mut fonts = egui::FontDefinitions::default();
    if let Some(p) = fonts.families.get_mut(&egui::FontFamily::Proportional)
        && !p.iter().any(|n| n == "Hack")
    {
        p.push("Hack".to_owned());
    }
    ctx.set_fonts(fonts);
}
