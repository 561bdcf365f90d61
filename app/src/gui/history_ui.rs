//! The Write history window, [`HistoryWindow`]: "Write history of 0x…" on any address cell
//! (`views::style::addr_cell`, `Action::ShowHistory`) opens it; the history is made on a thread of its own ([`super::session::Session::history`]) and
//! drawn by `views::HistoryPanel`, each write's dispatch a link that selects it.

use std::sync::mpsc;

use dispatchscope_analysis::history::History;
use dispatchscope_core::ByteRange;
use dispatchscope_views::{Action, HistoryPanel, style};

use super::session::{ReadAgainError, Session};
use super::shared::{AppAction, Shared};

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
    /// Whether the window is open (its close button clears it).
    open: bool,
}

impl HistoryWindow {
    /// The window on the bytes at `address` of `session`, their history started on a thread of
    /// its own.
    pub fn open(session: Option<&Session>, address: u64) -> Self {
        let range = ByteRange::new(address, address.saturating_add(WATCHED_BYTES));
        let (rx, result) = match session.map(|s| s.history(range)) {
            Some(Some(rx)) => (Some(rx), None),
            Some(None) => (None, Some(Err(ReadAgainError::Live))),
            None => (None, Some(Err(ReadAgainError::NoSession))),
        };
        Self {
            range,
            rx,
            result,
            panel: HistoryPanel::default(),
            open: true,
        }
    }

    /// Whether the history is still being made.
    pub fn pending(&self) -> bool {
        self.rx.is_some()
    }

    /// Whether the window is still open.
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// Takes an arrived history, and draws the window; a write's dispatch, clicked, selects it.
    pub fn ui(&mut self, ctx: &egui::Context, _shared: &Shared) -> Vec<AppAction> {
        if let Some(rx) = &self.rx {
            match rx.try_recv() {
                Ok(r) => {
                    self.result = Some(r);
                    self.rx = None;
                }
                Err(mpsc::TryRecvError::Empty) => {
                    ctx.request_repaint_after(std::time::Duration::from_millis(30));
                }
                Err(mpsc::TryRecvError::Disconnected) => {
                    self.result = Some(Err(ReadAgainError::ThreadStopped));
                    self.rx = None;
                }
            }
        }
        let mut select = None;
        let (result, panel, range) = (&self.result, &mut self.panel, self.range);
        egui::Window::new(format!("Write history of {}", style::hex(range.start)))
            .id(egui::Id::unique("write-history"))
            .open(&mut self.open)
            .default_size([760.0, 360.0])
            .resizable(true)
            .show(ctx, |ui| match result {
                None => {
                    ui.horizontal(|ui| {
                        ui.spinner();
                        ui.label(format!("reading the session for {range}…"));
                    });
                }
                Some(Err(e)) => {
                    ui.colored_label(style::REFUSED, e.to_string());
                }
                Some(Ok(h)) => select = panel.ui(ui, h),
            });
        select
            .and_then(|d| usize::try_from(d).ok())
            .map(|d| AppAction::Panel(Action::SelectDispatch(d)))
            .into_iter()
            .collect()
    }
}
