//! dispatchscope-views: the debugger's egui panels, each drawing one immutable
//! [`DispatchReport`] (and, for the chunk table, an immutable [`ChunkTable`] snapshot).
//!
//! A panel is a small state struct with a `ui` method that takes the report and the shared
//! [`Selection`] and returns the person's intent as [`Action`]s; the app applies them after the
//! frame, so a panel never changes a session, never runs the engine, and never touches a file
//! or a device.
//! Reading a snapshot (a lookup trace of a typed address on an immutable table) is allowed;
//! changing one is not.
//!
//! [`ChunkTable`]: dispatchscope_core::chunk_table::ChunkTable

pub mod accesses;
pub mod after;
pub mod bindings;
pub mod chunk_table;
pub mod compare;
pub mod dispatches;
pub mod history;
pub mod instrumented;
pub mod keys;
pub mod listing;
pub mod loss;
pub mod memory;
pub mod refusals;
pub mod style;
pub mod timeline;

use dispatchscope_core::DispatchReport;
use serde::{Deserialize, Serialize};

pub use accesses::AccessesPanel;
pub use after::AfterPanel;
pub use bindings::BindingsPanel;
pub use chunk_table::{ChunkTablePanel, TableSnapshot};
pub use compare::{DiffMarks, DifferencesPanel, RowMark, Side};
pub use dispatches::find::{Finder, Shown};
pub use dispatches::{
    DispatchRow, DispatchState, DispatchesPanel, Filter, PendingRow, RowCounts, Rows, RuleSet,
};
pub use history::HistoryPanel;
pub use instrumented::PassPanel;
pub use loss::LossPanel;
pub use memory::{GuestBytes, MemoryPanel, MemoryView, TargetBytes};
pub use refusals::RefusalsPanel;
pub use timeline::TimelinePanel;

/// The panels of one dispatch, as tabs of the main area.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Tab {
    /// Slots, sets and the address line (O1–O11).
    #[default]
    Bindings,
    /// A card per refusal.
    Refusals,
    /// Readable runs, pieces and generations (M1–M5).
    Memory,
    /// The chunk table's slots and lookups (T1–T6).
    ChunkTable,
    /// The access stream and its escapes (W1–W3, P1, T4).
    Accesses,
    /// Marks, hand-off, write-back and hazards (C1, C2, O8, L1).
    After,
    /// An instrumented full-screen pass: sites, the escape log, the grid picture (issue 14).
    Pass,
}

impl Tab {
    /// Every tab, in the order the tab bar shows them.
    pub const ALL: [Tab; 7] = [
        Tab::Bindings,
        Tab::Refusals,
        Tab::Memory,
        Tab::ChunkTable,
        Tab::Accesses,
        Tab::After,
        Tab::Pass,
    ];

    /// The tab's title.
    pub fn title(self) -> &'static str {
        match self {
            Tab::Bindings => "Bindings",
            Tab::Refusals => "Refusals",
            Tab::Memory => "Memory",
            Tab::ChunkTable => "Chunk table",
            Tab::Accesses => "Accesses & escapes",
            Tab::After => "After the dispatch",
            Tab::Pass => "Pass",
        }
    }
}

/// What is selected across panels. The app owns it; panels read it and ask for changes with
/// [`Action`]s.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Selection {
    /// Position of the current dispatch in the session (not its report index).
    pub dispatch: usize,
    /// The selected slot of the current dispatch, by slot number.
    pub slot: Option<u32>,
    /// The selected access, by its index in the stream.
    pub access: Option<usize>,
    /// The selected chunk-table slot.
    pub table_slot: Option<usize>,
}

/// What a person asked for in a panel; the app applies it after the frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Go to the dispatch at this position in the session.
    SelectDispatch(usize),
    /// Bookmark the dispatch at this position, or remove its bookmark.
    ToggleBookmark(usize),
    /// Select a slot (or clear the selection) in every panel.
    SelectSlot(Option<u32>),
    /// Select an access (or clear the selection) in every panel.
    SelectAccess(Option<usize>),
    /// Select a chunk-table slot (or clear the selection).
    SelectTableSlot(Option<usize>),
    /// Show a tab.
    ShowTab(Tab),
    /// Read guest bytes from the live target now (the Memory panel's byte view).
    ReadGuest {
        /// The first byte.
        address: u64,
        /// Bytes.
        len: u32,
    },
    /// Open the write history of the bytes at this guest address (an address cell's menu,
    /// [`style::addr_cell`]).
    ShowHistory(u64),
    /// Open the program listing on this pc (the Pass tab's "show in listing", a site's pc).
    ShowInListing(u64),
    /// Select the instrumented pass's site at this pc on the Pass tab (the listing's "show the
    /// escapes at this pc").
    SelectSiteAt(u64),
    /// Show the device's loss report (a lost dispatch's row in the list).
    ShowLoss,
    /// Go to the dispatch whose report index is this (the loss view's last completed run of a
    /// program in flight).
    SelectIndex(u64),
}

/// Whether access `access` of `report` goes through `slot`'s bytes: a bound access whose holder
/// and offset fall in the slot's own range within its holder. (Reports do not say which slot an
/// access named; this infers it from the route.)
pub fn access_uses_slot(report: &DispatchReport, access: usize, slot: u32) -> bool {
    use dispatchscope_core::report::Route;
    let Some(a) = report.accesses.get(access) else {
        return false;
    };
    let Some(b) = report.slots.iter().find(|b| b.slot == slot) else {
        return false;
    };
    match a.route {
        Route::Bound { holder, offset } => {
            b.holder == Some(holder)
                && offset >= b.offset
                && offset < b.offset + b.range.size_bytes()
        }
        _ => false,
    }
}
