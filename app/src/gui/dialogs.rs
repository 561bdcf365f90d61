//! The app's own windows, [`Dialogs`]: File ▸ Open (a file dialog on its own thread, then, if it
//! gives no path, a field to type one), Go to dispatch, the key list (F1), and the profiler's
//! error. The live session's windows are `live_ui`'s. Opening a path is an [`AppAction`] the app
//! hands to the loader; these windows never read a file.

use std::path::PathBuf;
use std::sync::mpsc;

use dispatchscope_views::keys;

use super::shared::{AppAction, Shared};

/// The File ▸ Open flow: a file dialog on its own thread, then, if it gives no path (no desktop
/// portal, or cancelled), a field to type one.
#[derive(Debug, Default)]
struct OpenDialog {
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

/// The app's own windows and their state.
#[derive(Debug, Default)]
pub struct Dialogs {
    open: OpenDialog,
    /// The Go to dispatch field, when its window is open.
    pub goto: Option<String>,
    /// Whether the F1 key list is open.
    pub show_keys: bool,
    /// Why the profiler could not start, shown until closed.
    pub profiler_error: Option<String>,
}

impl Dialogs {
    /// Shows the path field, saying `why` above it (nothing when empty); `compare`: the path is
    /// B, to compare the open session with.
    pub fn ask_for_path(&mut self, why: &str, compare: bool) {
        self.open.typing = true;
        self.open.note = why.to_owned();
        self.open.for_compare = compare;
    }

    /// Starts the file dialog on its own thread ([`Self::ui`] takes its answer): to open a file,
    /// or (`compare`) to pick B.
    pub fn start_file_dialog(&mut self, ctx: &egui::Context, compare: bool) {
        let (tx, rx) = mpsc::channel();
        let ctx = ctx.clone();
        let title = if compare {
            "Compare the open session with…"
        } else {
            "Open a dispatchscope sample"
        };
        self.open.for_compare = compare;
        std::thread::spawn(move || {
            let picked = rfd::FileDialog::new()
                .set_title(title)
                .add_filter("dispatchscope sample or capture", &["json", "dscap"])
                .add_filter("any file", &["*"])
                .pick_file();
            let _ = tx.send(picked);
            ctx.request_repaint();
        });
        self.open.pending = Some(rx);
    }

    /// Opens `path`, or compares the open session with it when the dialog was Compare with….
    fn open_or_compare(&self, path: PathBuf) -> AppAction {
        if self.open.for_compare {
            AppAction::CompareWith(path)
        } else {
            AppAction::OpenPath(path)
        }
    }

    /// Takes the file dialog's answer: the path it gave; with none (cancelled, or no portal),
    /// the path field.
    fn poll(&mut self) -> Option<AppAction> {
        let rx = self.open.pending.as_ref()?;
        match rx.try_recv() {
            Ok(Some(path)) => {
                self.open.pending = None;
                Some(self.open_or_compare(path))
            }
            Ok(None) | Err(mpsc::TryRecvError::Disconnected) => {
                self.open.pending = None;
                let why = "No file was chosen: the file dialog was cancelled, or this desktop has no file-dialog portal (xdg-desktop-portal). Type a path instead.";
                self.ask_for_path(why, self.open.for_compare);
                None
            }
            Err(mpsc::TryRecvError::Empty) => None,
        }
    }

    /// Draws the windows that are open; returns what they asked for.
    pub fn ui(&mut self, ctx: &egui::Context, shared: &Shared) -> Vec<AppAction> {
        let mut actions: Vec<AppAction> = self.poll().into_iter().collect();
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
                            if shared.session.is_some()
                                && let Some(n) = dispatchscope_core::addr::parse_u64(text)
                            {
                                actions.push(AppAction::GoTo(n));
                            }
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
        }
        if self.open.typing {
            let mut close = false;
            let mut open = None;
            let title = if self.open.for_compare {
                "Compare with…"
            } else {
                "Open a sample"
            };
            let o = &mut self.open;
            egui::Window::new(title)
                .id(egui::Id::unique("open-path"))
                .collapsible(false)
                .show(ctx, |ui| {
                    if !o.note.is_empty() {
                        ui.label(&o.note);
                    }
                    ui.horizontal(|ui| {
                        let label = ui.label("Path");
                        let edit = ui
                            .add(egui::TextEdit::singleline(&mut o.path).desired_width(400.0))
                            .labelled_by(label.id);
                        let enter =
                            edit.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter));
                        let verb = if o.for_compare { "Compare" } else { "Open" };
                        if ui.button(verb).clicked() || enter {
                            open = Some(PathBuf::from(o.path.trim()));
                            close = true;
                        }
                        if ui.button("Cancel").clicked() {
                            close = true;
                        }
                    });
                });
            if close {
                self.open.typing = false;
            }
            if let Some(p) = open.filter(|p| !p.as_os_str().is_empty()) {
                actions.push(self.open_or_compare(p));
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
        actions
    }
}
