//! What the GUI tests share: a kittest harness around the real [`GuiApp`], the window size and
//! fonts the app uses, so that every GUI test (and every image snapshot) sees the same frame.
//!
//! Each test crate links the app library (`dispatchscope::gui`) and includes this module with
//! `mod common;`.

use egui_kittest::Harness;

use dispatchscope::gui::GuiApp;

/// A harness that draws `app` in a 1280×800 window with the app's fonts.
pub fn harness(app: GuiApp) -> Harness<'static, GuiApp> {
    Harness::builder()
        .with_size(egui::vec2(1280.0, 800.0))
        .with_context_setup(dispatchscope_views::style::install_fonts)
        .build_ui_state(|ui, app: &mut GuiApp| app.ui(ui), app)
}
