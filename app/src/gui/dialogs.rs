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
    /// Whether the path chosen is B, to compare the open session with (File ▸ Compare with…).
    for_compare: bool,
}

impl OpenDialog {
    /// Shows the path field, saying `why` above it (nothing when empty).
    pub(super) fn ask_for_path(&mut self, why: &str) {
        self.typing = true;
        self.note = why.to_owned();
        self.for_compare = false;
    }

    /// Shows the path field for File ▸ Compare with….
    pub(super) fn ask_for_compare_path(&mut self, why: &str) {
        self.typing = true;
        self.note = why.to_owned();
        self.for_compare = true;
    }
}

impl GuiApp {
    /// Starts the file dialog on its own thread; [`GuiApp::poll_open_dialog`] takes its answer.
    pub(super) fn start_open_dialog(&mut self, ctx: &egui::Context) {
        self.start_file_dialog(ctx, false);
    }

    /// File ▸ Compare with…: the file dialog for B, on its own thread.
    pub(super) fn start_compare_dialog(&mut self, ctx: &egui::Context) {
        self.start_file_dialog(ctx, true);
    }

    fn start_file_dialog(&mut self, ctx: &egui::Context, for_compare: bool) {
        let (tx, rx) = mpsc::channel();
        let ctx = ctx.clone();
        let title = if for_compare {
            "Compare the open session with…"
        } else {
            "Open a dispatchscope sample"
        };
        self.dialog.for_compare = for_compare;
        std::thread::spawn(move || {
            let picked = rfd::FileDialog::new()
                .set_title(title)
                .add_filter("dispatchscope sample or capture", &["json", "dscap"])
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
                    self.open_or_compare(ctx, path);
                }
                Ok(None) | Err(mpsc::TryRecvError::Disconnected) => {
                    self.dialog.pending = None;
                    let why = "No file was chosen: the file dialog was cancelled, or this desktop has no file-dialog portal (xdg-desktop-portal). Type a path instead.";
                    if self.dialog.for_compare {
                        self.dialog.ask_for_compare_path(why);
                    } else {
                        self.dialog.ask_for_path(why);
                    }
                }
                Err(mpsc::TryRecvError::Empty) => {}
            }
        }
    }

    /// Opens `path`, or compares the open session with it when the dialog was Compare with….
    fn open_or_compare(&mut self, ctx: &egui::Context, path: PathBuf) {
        if self.dialog.for_compare {
            let ctx = ctx.clone();
            self.compare_with_path(move || ctx.request_repaint(), path);
        } else {
            self.open_path(ctx, path);
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
            let title = if self.dialog.for_compare {
                "Compare with…"
            } else {
                "Open a sample"
            };
            egui::Window::new(title)
                .id(egui::Id::unique("open-path"))
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
                        let verb = if self.dialog.for_compare {
                            "Compare"
                        } else {
                            "Open"
                        };
                        if ui.button(verb).clicked() || enter {
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
                self.open_or_compare(ctx, p);
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
