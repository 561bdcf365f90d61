//! The keyboard shortcuts, as one list: the app binds them and the F1 window lists them from here,
//! so the two never disagree.

use egui::{Key, KeyboardShortcut, Modifiers};

/// Something a key does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Command {
    /// Next dispatch.
    Next,
    /// Previous dispatch.
    Previous,
    /// First dispatch.
    First,
    /// Last dispatch.
    Last,
    /// Next dispatch with a refusal.
    NextRefusal,
    /// Previous dispatch with a refusal.
    PreviousRefusal,
    /// Next dispatch with an escape.
    NextEscape,
    /// Previous dispatch with an escape.
    PreviousEscape,
    /// Go to dispatch N.
    GoTo,
    /// Open a file.
    Open,
    /// Find (the dispatch search box).
    Find,
    /// Bookmark the current dispatch.
    Bookmark,
    /// Jump to bookmark 1–9.
    JumpToBookmark(u8),
    /// List the keys.
    Help,
    /// Pause a running live target, or let a paused one continue (F5).
    PauseContinue,
    /// Show the Pass tab: an instrumented pass's sites, escape log and grid picture.
    ShowPass,
    /// Show or hide the Program panel: the listing around the selected access's pc.
    ShowListing,
    /// In a comparison, the next dispatch that differs from the other session (or has no
    /// counterpart there).
    NextDifference,
    /// In a comparison, the previous dispatch that differs.
    PreviousDifference,
    /// Show the device's loss report (a session whose device was lost).
    ShowLoss,
}

/// Every binding, in the order F1 lists them.
pub fn bindings() -> Vec<(KeyboardShortcut, Command, &'static str)> {
    let none = Modifiers::NONE;
    let shift = Modifiers::SHIFT;
    let cmd = Modifiers::COMMAND;
    let mut v = vec![
        (
            KeyboardShortcut::new(none, Key::F5),
            Command::PauseContinue,
            "live: pause the target, or continue it",
        ),
        (
            KeyboardShortcut::new(none, Key::F10),
            Command::Next,
            "next dispatch (live, attached and paused: step the target)",
        ),
        (
            KeyboardShortcut::new(shift, Key::F10),
            Command::Previous,
            "previous dispatch",
        ),
        (
            KeyboardShortcut::new(cmd, Key::Home),
            Command::First,
            "first dispatch",
        ),
        (
            KeyboardShortcut::new(cmd, Key::End),
            Command::Last,
            "last dispatch",
        ),
        (
            KeyboardShortcut::new(none, Key::End),
            Command::Last,
            "last dispatch (live: follow the newest again)",
        ),
        (
            KeyboardShortcut::new(none, Key::F8),
            Command::NextRefusal,
            "next dispatch with a refusal",
        ),
        (
            KeyboardShortcut::new(shift, Key::F8),
            Command::PreviousRefusal,
            "previous dispatch with a refusal",
        ),
        (
            KeyboardShortcut::new(none, Key::F7),
            Command::NextDifference,
            "comparison: next dispatch that differs (or has no counterpart)",
        ),
        (
            KeyboardShortcut::new(shift, Key::F7),
            Command::PreviousDifference,
            "comparison: previous dispatch that differs",
        ),
        (
            KeyboardShortcut::new(none, Key::F9),
            Command::NextEscape,
            "next dispatch with an escape",
        ),
        (
            KeyboardShortcut::new(shift, Key::F9),
            Command::PreviousEscape,
            "previous dispatch with an escape",
        ),
        (
            KeyboardShortcut::new(cmd, Key::G),
            Command::GoTo,
            "go to dispatch N",
        ),
        (
            KeyboardShortcut::new(cmd, Key::O),
            Command::Open,
            "open a sample",
        ),
        (
            KeyboardShortcut::new(cmd, Key::F),
            Command::Find,
            "find a dispatch",
        ),
        (
            KeyboardShortcut::new(cmd, Key::B),
            Command::Bookmark,
            "bookmark this dispatch (again: remove)",
        ),
        (
            KeyboardShortcut::new(cmd, Key::I),
            Command::ShowPass,
            "show the instrumented pass (sites, escape log, grid)",
        ),
        (
            KeyboardShortcut::new(cmd, Key::L),
            Command::ShowListing,
            "show or hide the program listing (RDNA2, at the selected access)",
        ),
        (
            KeyboardShortcut::new(cmd, Key::D),
            Command::ShowLoss,
            "show the device's loss report (a session whose device was lost)",
        ),
    ];
    let digits = [
        Key::Num1,
        Key::Num2,
        Key::Num3,
        Key::Num4,
        Key::Num5,
        Key::Num6,
        Key::Num7,
        Key::Num8,
        Key::Num9,
    ];
    for (i, k) in digits.into_iter().enumerate() {
        let n = i as u8 + 1;
        v.push((
            KeyboardShortcut::new(cmd, k),
            Command::JumpToBookmark(n),
            "jump to bookmark N",
        ));
    }
    v.push((
        KeyboardShortcut::new(none, Key::F1),
        Command::Help,
        "list the keys",
    ));
    v
}

/// Takes the commands whose keys were pressed this frame out of the input.
pub fn consume(ctx: &egui::Context) -> Vec<Command> {
    // Shift+F10 before F10: consume_shortcut matches modifiers logically, so the longer one first.
    let mut all = bindings();
    all.sort_by_key(|(s, _, _)| {
        std::cmp::Reverse(s.modifiers.shift as u8 + s.modifiers.command as u8)
    });
    ctx.input_mut(|i| {
        all.iter()
            .filter(|(s, _, _)| i.consume_shortcut(s))
            .map(|(_, c, _)| *c)
            .collect()
    })
}

/// The F1 list: one line per binding (bookmarks 1–9 as one line).
pub fn help_ui(ui: &mut egui::Ui) {
    let ctx = ui.ctx().clone();
    egui::Grid::new("keys-grid")
        .striped(true)
        .num_columns(2)
        .show(ui, |ui| {
            for (s, c, what) in bindings() {
                match c {
                    Command::JumpToBookmark(n) if n > 1 => continue,
                    Command::JumpToBookmark(_) => {
                        ui.label(
                            egui::RichText::new(format!("{}…9", ctx.format_shortcut(&s)))
                                .monospace(),
                        );
                    }
                    _ => {
                        ui.label(egui::RichText::new(ctx.format_shortcut(&s)).monospace());
                    }
                }
                ui.label(what);
                ui.end_row();
            }
        });
}
