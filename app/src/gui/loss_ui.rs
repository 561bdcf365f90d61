//! The Device lost window, [`LossWindow`]: the session's loss report
//! (`dispatchscope_views::LossPanel`) in a window of its own, which opens by itself when a session
//! with a loss opens or a live target's device is lost, from the banner, a lost dispatch's row in
//! the list, or Ctrl+D. It draws from [`Shared`] and returns [`AppAction`]s; it changes nothing.

use dispatchscope_views::LossPanel;

use super::shared::{AppAction, Shared, panel_actions};

/// The Device lost window's state.
#[derive(Default)]
pub struct LossWindow {
    /// Whether it is shown (when the session has a loss).
    pub open: bool,
    /// The report's view.
    pub panel: LossPanel,
}

impl LossWindow {
    /// Opens it on the session's loss, its dispatches in flight closed.
    pub fn show(&mut self) {
        self.open = true;
        self.panel.selected = None;
    }

    /// Draws it while open and the session has a loss.
    pub fn ui(&mut self, ctx: &egui::Context, shared: &Shared) -> Vec<AppAction> {
        let Some(loss) = shared.session.as_ref().and_then(|s| s.loss.as_ref()) else {
            return Vec::new();
        };
        let mut actions = Vec::new();
        let mut open = self.open;
        egui::Window::new("Device lost")
            .open(&mut open)
            .default_size([640.0, 520.0])
            .resizable(true)
            .show(ctx, |ui| {
                actions.extend(panel_actions(self.panel.ui(ui, loss)));
            });
        self.open = open;
        actions
    }
}
