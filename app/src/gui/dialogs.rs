//! The app's own windows: File ▸ Open (a file dialog on its own thread, then, if it gives no
//! path, a field to type one), Go to dispatch, the key list (F1), and the profiler's error.
//! The live session's windows are `live_ui`'s. Opening a path hands it to the loader; these
//! windows never read a file.

use std::path::PathBuf;
use std::sync::mpsc;

use dispatchscope_views::Action;
use dispatchscope_views::keys;

use super::{GuiApp, LoadError};

/// The File ▸ Open flow: a file dialog on its own thread, then, if it gives no path (no desktop
/// portal, or cancelled), a field to type one.
#[derive(Default)]
pub(super) struct OpenDialog {
    /// The running dialog, if any.
    pending: Option<mpsc::Receiver<Option<PathBuf>>>,
    /// Show the path field.
    typing: bool,
    /// Why the path field is shown.
    note: String,
    /// The path field.
    path: String,
}

impl OpenDialog {
    /// Shows the path field, saying `why` above it (nothing when empty).
    pub(super) fn ask_for_path(&mut self, why: &str) {
        self.typing = true;
        self.note = why.to_owned();
    }
}

impl GuiApp {
    /// Starts the file dialog on its own thread; [`GuiApp::poll_open_dialog`] takes its answer.
    pub(super) fn start_open_dialog(&mut self, ctx: &egui::Context) {
        let (tx, rx) = mpsc::channel();
        let ctx = ctx.clone();
        std::thread::spawn(move || {
            let picked = rfd::FileDialog::new()
                .set_title("Open a dispatchscope sample")
                .add_filter("dispatchscope sample", &["json"])
                .add_filter("any file", &["*"])
                .pick_file();
            let _ = tx.send(picked);
            ctx.request_repaint();
        });
        self.dialog.pending = Some(rx);
    }

    /// Opens the path the file dialog gave; with none (cancelled, or no portal), the path field.
    pub(super) fn poll_open_dialog(&mut self, ctx: &egui::Context) {
        if let Some(rx) = &self.dialog.pending {
            match rx.try_recv() {
                Ok(Some(path)) => {
                    self.dialog.pending = None;
                    self.open_path(ctx, path);
                }
                Ok(None) | Err(mpsc::TryRecvError::Disconnected) => {
                    self.dialog.pending = None;
                    self.dialog.ask_for_path("No file was chosen: the file dialog was cancelled, or this desktop has no file-dialog portal (xdg-desktop-portal). Type a path instead.");
                }
                Err(mpsc::TryRecvError::Empty) => {}
            }
        }
    }

    /// Draws the windows that are open, the live session's first.
    pub(super) fn windows(&mut self, ctx: &egui::Context) {
        self.live_windows(ctx);
        if self.show_keys {
            let mut open = true;
            egui::Window::new("Keys")
                .open(&mut open)
                .resizable(false)
                .show(ctx, keys::help_ui);
            self.show_keys = open;
        }
        if let Some(text) = &mut self.goto {
            let mut close = false;
            let mut go = None;
            egui::Window::new("Go to dispatch")
                .collapsible(false)
                .resizable(false)
                .show(ctx, |ui| {
                    let label = ui.label("Dispatch");
                    let edit = ui
                        .add(egui::TextEdit::singleline(text).hint_text("index"))
                        .labelled_by(label.id);
                    edit.request_focus();
                    let enter = edit.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter));
                    ui.horizontal(|ui| {
                        if ui.button("Jump").clicked() || enter {
                            go = dispatchscope_core::addr::parse_u64(text);
                            close = true;
                        }
                        if ui.button("Cancel").clicked()
                            || ui.input(|i| i.key_pressed(egui::Key::Escape))
                        {
                            close = true;
                        }
                    });
                });
            if close {
                self.goto = None;
            }
            if let (Some(n), Some(s)) = (go, &self.session) {
                let pos = s.rows.position_of(n);
                match pos {
                    Some(p) => self.apply(Action::SelectDispatch(p)),
                    None => {
                        self.error = Some(LoadError {
                            source: s.source.display(),
                            message: if s.scanning() {
                                format!(
                                    "dispatch {n} is not among the {} listed yet (the list is still being read)",
                                    s.rows.len()
                                )
                            } else {
                                format!(
                                    "there is no dispatch {n} in this session (it has {})",
                                    s.reports.len()
                                )
                            },
                            at: None,
                            offset_bytes: None,
                        })
                    }
                }
            }
        }
        if self.dialog.typing {
            let mut close = false;
            let mut open = None;
            egui::Window::new("Open a sample")
                .collapsible(false)
                .show(ctx, |ui| {
                    if !self.dialog.note.is_empty() {
                        ui.label(&self.dialog.note);
                    }
                    ui.horizontal(|ui| {
                        let label = ui.label("Path");
                        let edit = ui
                            .add(
                                egui::TextEdit::singleline(&mut self.dialog.path)
                                    .desired_width(400.0),
                            )
                            .labelled_by(label.id);
                        let enter =
                            edit.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter));
                        if ui.button("Open").clicked() || enter {
                            open = Some(PathBuf::from(self.dialog.path.trim()));
                            close = true;
                        }
                        if ui.button("Cancel").clicked() {
                            close = true;
                        }
                    });
                });
            if close {
                self.dialog.typing = false;
            }
            if let Some(p) = open.filter(|p| !p.as_os_str().is_empty()) {
                self.open_path(ctx, p);
            }
        }
        if let Some(e) = &self.profiler_error {
            let mut open = true;
            egui::Window::new("Profiler")
                .open(&mut open)
                .show(ctx, |ui| {
                    ui.label(e);
                });
            if !open {
                self.profiler_error = None;
            }
        }
    }
}
