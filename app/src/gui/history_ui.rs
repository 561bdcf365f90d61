//! The Write history window: "Write history of 0x…" on any address cell (`views::style::addr_cell`)
//! opens it; the history is made on a thread of its own ([`super::session::Session::history`]) and
//! drawn by `views::HistoryPanel`, each write's dispatch a link that selects it.

use std::sync::mpsc;

use dispatchscope_analysis::history::History;
use dispatchscope_core::ByteRange;
use dispatchscope_views::{Action, HistoryPanel, style};

use super::GuiApp;
use super::session::ReadAgainError;

/// Bytes the window watches from the address asked for: one word.
pub const WATCHED_BYTES: u64 = 4;

/// The Write history window's state.
pub struct HistoryWindow {
    /// The bytes watched.
    pub range: ByteRange,
    /// The history being made, until it arrives.
    rx: Option<mpsc::Receiver<Result<History, ReadAgainError>>>,
    /// The history, or why there is none.
    pub result: Option<Result<History, ReadAgainError>>,
    panel: HistoryPanel,
}

impl HistoryWindow {
    /// Whether the history is still being made.
    pub fn pending(&self) -> bool {
        self.rx.is_some()
    }
}

impl GuiApp {
    /// Opens the Write history window on the bytes at `address`, starting their history.
    pub fn open_history(&mut self, address: u64) {
        let range = ByteRange::new(address, address.saturating_add(WATCHED_BYTES));
        let (rx, result) = match self.session.as_ref().map(|s| s.history(range)) {
            Some(Some(rx)) => (Some(rx), None),
            Some(None) => (None, Some(Err(ReadAgainError::Live))),
            None => (None, Some(Err(ReadAgainError::NoSession))),
        };
        self.history = Some(HistoryWindow {
            range,
            rx,
            result,
            panel: HistoryPanel::default(),
        });
    }

    /// Takes an arrived history, and draws the window (an address cell's menu opens it:
    /// `Action::ShowHistory`).
    pub(super) fn history_window(&mut self, ctx: &egui::Context) {
        let Some(w) = &mut self.history else {
            return;
        };
        if let Some(rx) = &w.rx {
            match rx.try_recv() {
                Ok(r) => {
                    w.result = Some(r);
                    w.rx = None;
                }
                Err(mpsc::TryRecvError::Empty) => {
                    ctx.request_repaint_after(std::time::Duration::from_millis(30));
                }
                Err(mpsc::TryRecvError::Disconnected) => {
                    w.result = Some(Err(ReadAgainError::ThreadStopped));
                    w.rx = None;
                }
            }
        }
        let mut open = true;
        let mut select = None;
        egui::Window::new(format!("Write history of {}", style::hex(w.range.start)))
            .id(egui::Id::unique("write-history"))
            .open(&mut open)
            .default_size([760.0, 360.0])
            .resizable(true)
            .show(ctx, |ui| match &w.result {
                None => {
                    ui.horizontal(|ui| {
                        ui.spinner();
                        ui.label(format!("reading the session for {}…", w.range));
                    });
                }
                Some(Err(e)) => {
                    ui.colored_label(style::REFUSED, e.to_string());
                }
                Some(Ok(h)) => select = w.panel.ui(ui, h),
            });
        if !open {
            self.history = None;
        }
        if let Some(d) = select.and_then(|d| usize::try_from(d).ok()) {
            self.apply(Action::SelectDispatch(d));
        }
    }
}
