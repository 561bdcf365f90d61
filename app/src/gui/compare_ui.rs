//! A comparison of the open session (A) with another (B): File ▸ Compare with… (or
//! `dispatchscope A --compare B`) loads B as the window loads any file (a capture through its
//! index), and Session ▸ What if… makes B from A under other limits. The [`SessionDiff`] is made
//! on a thread of its own (`dispatchscope_analysis::diff`, reading each capture's DISPATCH records
//! one at a time, never a replay), with progress; then the window shows both sides: two dispatch
//! lists with a difference column (Δ differs, − only in A, + only in B) and an "only differing"
//! filter, F7 / Shift+F7 to the next / previous dispatch that differs, a selection on one side
//! selecting its match on the other, the selected pair's panels side by side with what differs
//! highlighted, and the Differences panel (the pair's change sentences by category, each a link to
//! its tab).
//!
//! The what-if re-plans where only planning limits change (`dispatchscope_formats::what_if`) and
//! replays on the CPU reference where a limit needs the engine's state, as `diff FILE --LIMIT`
//! does; the diff's notes say which, and from which position only the plan is compared.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, mpsc};

use dispatchscope_analysis::diff::{Matching, SessionDiff, diff_sessions};
use dispatchscope_analysis::what_if::{self, PlanLimits, RePlan, Recorded};
use dispatchscope_core::input::DeviceLimits;
use dispatchscope_core::report::DispatchReport;
use dispatchscope_formats::what_if::{self as session_what_if, RePlanError};
use dispatchscope_views::compare::{self, DIFFERS, plural};
use dispatchscope_views::{
    Action, DiffMarks, DifferencesPanel, DispatchesPanel, Filter, GuestBytes, RowMark, Selection,
    Side, Tab, style,
};
use egui::RichText;

use super::panels::{PanelInput, Panels};
use super::session::{HistorySource, LoadError, Origin, Progress, Session, Source, load_file};
use super::shared::{AppAction, Shared, WhatIfAsk};
use crate::load::{WhatIfLimits, parse_number};

/// What the comparison's thread sends: B once it is loaded, then the diff.
enum Msg {
    Loaded(Box<Result<Session, LoadError>>),
    Diff(Result<SessionDiff, String>),
}

/// A comparison in progress or shown.
pub struct Comparison {
    /// How B is named: its file, or the what-if's limits.
    pub b_name: String,
    /// Whether B is the what-if's (A under other limits).
    pub what_if: bool,
    /// B, once loaded.
    pub b: Option<Session>,
    rx: Option<mpsc::Receiver<Msg>>,
    /// Reports read for the diff so far, of `total`.
    pub progress: Arc<Progress>,
    /// The diff, or why there is none.
    pub diff: Option<Result<SessionDiff, String>>,
    /// A's dispatches' marks, by position.
    pub a_marks: Arc<[RowMark]>,
    /// B's dispatches' marks, by position.
    pub b_marks: Arc<[RowMark]>,
    a_to_b: Vec<Option<usize>>,
    b_to_a: Vec<Option<usize>>,
    /// B's selection (its dispatch follows A's match; the slot, access and table slot are A's).
    pub b_sel: Selection,
    a_list: DispatchesPanel,
    b_list: DispatchesPanel,
    /// A's panels, side by side with B's.
    a_panels: Panels,
    /// B's panels: the same panels as A's, with their own state.
    b_panels: Panels,
}

impl Comparison {
    fn new(
        b_name: String,
        what_if: bool,
        rx: mpsc::Receiver<Msg>,
        progress: Arc<Progress>,
        filter: Filter,
    ) -> Self {
        let mut b_list = DispatchesPanel::default();
        b_list.id_salt = "dispatches-table-b";
        let a_list = DispatchesPanel::new(filter);
        Self {
            b_name,
            what_if,
            b: None,
            rx: Some(rx),
            progress,
            diff: None,
            a_marks: Arc::from(Vec::new()),
            b_marks: Arc::from(Vec::new()),
            a_to_b: Vec::new(),
            b_to_a: Vec::new(),
            b_sel: Selection::default(),
            a_list,
            b_list,
            a_panels: Panels::default(),
            b_panels: Panels::default(),
        }
    }

    /// Whether B or the diff is still being made.
    pub fn pending(&self) -> bool {
        self.rx.is_some()
    }

    /// The diff, once made.
    pub fn session_diff(&self) -> Option<&SessionDiff> {
        self.diff.as_ref().and_then(|d| d.as_ref().ok())
    }

    /// B's position paired with A's `pos`, if it has one.
    pub fn b_of(&self, pos: usize) -> Option<usize> {
        self.a_to_b.get(pos).copied().flatten()
    }

    /// A's position paired with B's `pos`, if it has one.
    pub fn a_of(&self, pos: usize) -> Option<usize> {
        self.b_to_a.get(pos).copied().flatten()
    }

    /// Takes the diff: marks every dispatch and pairs the positions.
    fn take_diff(&mut self, d: &SessionDiff) {
        let mut a = vec![RowMark::Same; d.a_dispatches];
        let mut b = vec![RowMark::Same; d.b_dispatches];
        for r in &d.only_a {
            if let Some(m) = a.get_mut(r.position) {
                *m = RowMark::Unmatched;
            }
        }
        for r in &d.only_b {
            if let Some(m) = b.get_mut(r.position) {
                *m = RowMark::Unmatched;
            }
        }
        for x in &d.dispatches {
            if let Some(m) = a.get_mut(x.position[0]) {
                *m = RowMark::Differs;
            }
            if let Some(m) = b.get_mut(x.position[1]) {
                *m = RowMark::Differs;
            }
        }
        self.a_to_b = vec![None; d.a_dispatches];
        self.b_to_a = vec![None; d.b_dispatches];
        for &[i, j] in &d.pairs {
            if let Some(x) = self.a_to_b.get_mut(i) {
                *x = Some(j);
            }
            if let Some(x) = self.b_to_a.get_mut(j) {
                *x = Some(i);
            }
        }
        self.a_marks = Arc::from(a);
        self.b_marks = Arc::from(b);
        self.a_list.row_marks = Some((Side::A, Arc::clone(&self.a_marks)));
        self.b_list.row_marks = Some((Side::B, Arc::clone(&self.b_marks)));
    }

    /// The marks the pair at A's `a` and B's `b` puts on `side`.
    fn marks(&self, side: Side, a: usize, b: Option<usize>) -> Option<DiffMarks> {
        let d = self.session_diff()?;
        match side {
            Side::A => {
                if self.a_marks.get(a) == Some(&RowMark::Unmatched) {
                    return Some(DiffMarks::unmatched(Side::A));
                }
                d.for_a(a).map(|x| DiffMarks::of(x, Side::A))
            }
            Side::B => {
                let b = b?;
                if self.b_marks.get(b) == Some(&RowMark::Unmatched) {
                    return Some(DiffMarks::unmatched(Side::B));
                }
                d.for_b(b).map(|x| DiffMarks::of(x, Side::B))
            }
        }
    }
}

/// Reports in `origin`, or in the session, for the progress bar's total.
fn count(origin: &Origin, s: &Session) -> usize {
    origin.known_len().unwrap_or(s.reports.len())
}

/// The diff of A's and B's reports, read again on this thread.
fn diff_of(a: Origin, b: Origin, progress: &Progress) -> Result<SessionDiff, String> {
    let ra = a.reports(&progress.done).map_err(|e| e.to_string())?;
    let rb = b.reports(&progress.done).map_err(|e| e.to_string())?;
    Ok(diff_sessions(&ra, &rb))
}

/// The What if… dialog's fields.
#[derive(Clone, Debug, Default)]
pub struct WhatIfForm {
    /// minStorageBufferOffsetAlignment (O7).
    pub alignment: String,
    /// maxStorageBufferRange (O5).
    pub range: String,
    /// The chunk table's probe bound (T2).
    pub probe_bound: String,
    /// The host's page size in bytes.
    pub host_page: String,
    /// The limits the fields were filled from.
    pub base: DeviceLimits,
    /// Why the last Run was refused.
    pub error: Option<String>,
}

impl WhatIfForm {
    /// The fields filled from `base`.
    pub fn of(base: DeviceLimits) -> Self {
        Self {
            alignment: style::hex(base.min_storage_buffer_offset_alignment),
            range: style::hex(base.max_storage_buffer_range),
            probe_bound: base.probe_bound.to_string(),
            host_page: style::hex(base.host_page_bytes),
            base,
            error: None,
        }
    }

    /// The limits the fields ask for (a field equal to the session's limit changes nothing), and
    /// the whole, checked as `diff FILE --LIMIT` checks them.
    pub fn limits(&self) -> Result<(WhatIfLimits, DeviceLimits), crate::load::FormError> {
        use crate::load::FormError;
        let field = |name: &'static str, text: &str, base: u64| -> Result<Option<u64>, FormError> {
            let v = parse_number(text.trim())
                .map_err(|error| FormError::Field { field: name, error })?;
            Ok((v != base).then_some(v))
        };
        let b = &self.base;
        let w = WhatIfLimits {
            min_storage_buffer_offset_alignment: field(
                "minStorageBufferOffsetAlignment",
                &self.alignment,
                b.min_storage_buffer_offset_alignment,
            )?,
            max_storage_buffer_range: field(
                "maxStorageBufferRange",
                &self.range,
                b.max_storage_buffer_range,
            )?,
            probe_bound: field("probe bound", &self.probe_bound, u64::from(b.probe_bound))?,
            host_page_bytes: field("host page bytes", &self.host_page, b.host_page_bytes)?,
        };
        if !w.any() {
            return Err(FormError::NothingChanged);
        }
        let limits = w.apply(b).map_err(FormError::Limits)?;
        Ok((w, limits))
    }
}

/// A what-if's B and its diff, made on the comparison's thread
/// (`dispatchscope_analysis::what_if::of_session`, as `diff FILE --LIMIT` makes it).
fn what_if_session(
    origin: Origin,
    source: Source,
    title: String,
    (w, limits): (WhatIfLimits, DeviceLimits),
    base: &DeviceLimits,
    progress: &Progress,
) -> (Result<Session, LoadError>, Result<SessionDiff, String>) {
    let shown = source.display();
    let asked = Asked {
        origin,
        source,
        title,
        progress,
    };
    match what_if::of_session(asked, base, &limits, w.plan(), None) {
        Ok((diff, b)) => (Ok(b), Ok(diff)),
        Err(message) => {
            let e = LoadError {
                source: shown,
                message: message.clone(),
                at: None,
                offset_bytes: None,
            };
            (Err(e), Err(message))
        }
    }
}

/// The session a what-if is asked of: the one the window shows, and what B is called.
struct Asked<'a> {
    origin: Origin,
    source: Source,
    title: String,
    progress: &'a Progress,
}

impl Recorded for Asked<'_> {
    /// B, the session under the new limits.
    type Made = Session;
    /// What the dialog says.
    type Error = String;

    fn re_plan(&mut self, plan: PlanLimits) -> Result<RePlan<Session>, String> {
        let re_planned = match (&self.origin.source, self.origin.reopen()) {
            (Some(HistorySource::Sample(sample)), _) => session_what_if::re_plan(
                sample.dispatches().zip(self.origin.reports.iter().cloned()),
                plan,
            )
            .map_err(RePlanError::from),
            (_, Some(Ok(mut file))) => session_what_if::re_plan_capture(&mut file, plan),
            (_, Some(Err(e))) => return Err(e.to_string()),
            (_, None) => return Err("the session cannot be read again".into()),
        };
        match re_planned {
            Ok(r) => {
                let diff = r.diff();
                self.progress.done.store(r.now.len(), Ordering::Relaxed);
                let b = Session::from_reports(
                    self.source.clone(),
                    self.title.clone(),
                    r.now,
                    Vec::new(),
                );
                Ok(RePlan::Made(diff, b))
            }
            // A capture without reports, or reports another recorder made: replay it.
            Err(e) if e.replay_instead() => Ok(RePlan::ReplayInstead(e.to_string())),
            Err(e) => Err(e.to_string()),
        }
    }

    /// The whole session replayed on the CPU reference under the new limits, and the reports it
    /// recorded.
    fn replay(self, limits: &DeviceLimits) -> Result<(Vec<DispatchReport>, Session), String> {
        let mut sample = match (&self.origin.source, self.origin.reopen()) {
            (Some(HistorySource::Sample(s)), _) => (**s).clone(),
            (_, Some(Ok(mut file))) => file.to_sample().map_err(|e| e.to_string())?.0,
            (_, Some(Err(e))) => return Err(e.to_string()),
            (_, None) => return Err("the session cannot be read again".into()),
        };
        sample.device = limits.clone();
        let mut b = Session::replay(self.source, &sample, self.progress)
            .map_err(|e| format!("the session replays under the new limits with an error: {e}"))?;
        b.title = self.title;
        let before = self
            .origin
            .reports(&std::sync::atomic::AtomicUsize::new(0))
            .map_err(|e| e.to_string())?;
        Ok((before, b))
    }

    fn reports(made: &Session) -> &[DispatchReport] {
        made.reports.in_memory_reports()
    }
}

/// The what-if's name for B: the limits it changed.
fn what_if_name(w: &WhatIfLimits) -> String {
    let mut parts = Vec::new();
    if let Some(a) = w.min_storage_buffer_offset_alignment {
        parts.push(format!("alignment {}", style::hex(a)));
    }
    if let Some(r) = w.max_storage_buffer_range {
        parts.push(format!("max range {}", style::hex(r)));
    }
    if let Some(p) = w.probe_bound {
        parts.push(format!("probe bound {p}"));
    }
    if let Some(h) = w.host_page_bytes {
        parts.push(format!("host page {}", style::hex(h)));
    }
    format!("what if: {}", parts.join(", "))
}

/// The comparison window: the comparison open (if any) and the What if… dialog; the lists and
/// panels of both sides while one is open.
#[derive(Default)]
pub struct CompareWindow {
    /// A comparison with another session (File ▸ Compare with…, Session ▸ What if…), when open.
    pub current: Option<Comparison>,
    /// The What if… dialog, when open.
    pub what_if: Option<WhatIfForm>,
}

/// The error panel's words for a comparison that cannot start.
fn refused(message: String) -> LoadError {
    LoadError {
        source: "the comparison".into(),
        message,
        at: None,
        offset_bytes: None,
    }
}

/// A's origin, or the reason a comparison cannot start.
fn compare_origin(shared: &Shared) -> Result<Origin, String> {
    let s = shared
        .session
        .as_ref()
        .ok_or_else(|| "open a session first: it is A, the session compared from".to_owned())?;
    s.origin().ok_or_else(|| {
        "a live session keeps no whole session to compare: save it and open the capture".into()
    })
}

impl CompareWindow {
    /// Whether a comparison is open.
    pub fn is_open(&self) -> bool {
        self.current.is_some()
    }

    /// A's rows' marks, once the diff is made (what F7 moves along).
    pub fn differences(&self) -> Option<Arc<[RowMark]>> {
        self.current
            .as_ref()
            .filter(|c| c.diff.is_some())
            .map(|c| Arc::clone(&c.a_marks))
    }

    /// Starts comparing the open session with the sample or capture at `path`: B is loaded and
    /// the diff made on a thread of their own. The error to show when it cannot start.
    pub fn start_with_path(
        &mut self,
        shared: &Shared,
        wake: impl Fn() + Send + 'static,
        path: PathBuf,
    ) -> Result<(), LoadError> {
        let a = compare_origin(shared).map_err(refused)?;
        let a_len = shared.n_dispatches();
        let progress = Arc::new(Progress::default());
        let (tx, rx) = mpsc::channel();
        let prog = Arc::clone(&progress);
        let name = path.display().to_string();
        std::thread::spawn(move || {
            let loaded = load_file(&path, Source::File(path.clone()), &Progress::default());
            let b = match loaded {
                Ok(b) => b,
                Err(e) => {
                    let message = e.to_string();
                    let _ = tx.send(Msg::Loaded(Box::new(Err(e))));
                    let _ = tx.send(Msg::Diff(Err(message)));
                    wake();
                    return;
                }
            };
            let origin_b = b.origin();
            let b_len = origin_b.as_ref().map_or(0, |o| count(o, &b));
            prog.total.store(a_len + b_len, Ordering::Relaxed);
            let _ = tx.send(Msg::Loaded(Box::new(Ok(b))));
            wake();
            let diff = match origin_b {
                Some(ob) => diff_of(a, ob, &prog),
                None => Err("B cannot be read again".into()),
            };
            let _ = tx.send(Msg::Diff(diff));
            wake();
        });
        let filter = shared.settings.filter.clone();
        self.current = Some(Comparison::new(name, false, rx, progress, filter));
        Ok(())
    }

    /// Compares the open session with `b`, already made (tests; a session built in memory).
    pub fn start_with_session(
        &mut self,
        shared: &Shared,
        b: Session,
        b_name: &str,
    ) -> Result<(), LoadError> {
        let a = compare_origin(shared).map_err(refused)?;
        let Some(ob) = b.origin() else {
            return Err(refused(
                "a live session keeps no whole session to compare: save it and open the capture"
                    .into(),
            ));
        };
        let progress = Arc::new(Progress::default());
        progress
            .total
            .store(shared.n_dispatches() + b.reports.len(), Ordering::Relaxed);
        let (tx, rx) = mpsc::channel();
        let prog = Arc::clone(&progress);
        std::thread::spawn(move || {
            let _ = tx.send(Msg::Diff(diff_of(a, ob, &prog)));
        });
        let filter = shared.settings.filter.clone();
        let mut c = Comparison::new(b_name.to_owned(), false, rx, progress, filter);
        c.b = Some(b);
        self.current = Some(c);
        Ok(())
    }

    /// Opens the What if… dialog, filled from the selected dispatch's limits.
    pub fn open_what_if(&mut self, shared: &Shared) -> Result<(), LoadError> {
        let base = shared
            .session
            .as_ref()
            .and_then(|s| s.reports.get(shared.sel.dispatch))
            .map(|r| r.device.clone());
        match base {
            Some(b) => {
                self.what_if = Some(WhatIfForm::of(b));
                Ok(())
            }
            None => Err(refused(
                "open a session with a dispatch first: the what-if changes its limits".into(),
            )),
        }
    }

    /// Runs the what-if `ask`; a session that cannot be compared stays in the dialog as its
    /// error.
    pub fn run_what_if(
        &mut self,
        shared: &Shared,
        ask: WhatIfAsk,
        wake: impl Fn() + Send + 'static,
    ) {
        let origin = match compare_origin(shared) {
            Ok(o) => o,
            Err(e) => {
                if let Some(f) = &mut self.what_if {
                    f.error = Some(e);
                }
                return;
            }
        };
        self.what_if = None;
        let Some(s) = &shared.session else { return };
        let name = what_if_name(&ask.changed);
        let (source, title) = (s.source.clone(), format!("{} ({name})", s.title));
        let progress = Arc::new(Progress::default());
        progress.total.store(s.reports.len(), Ordering::Relaxed);
        let (tx, rx) = mpsc::channel();
        let prog = Arc::clone(&progress);
        std::thread::spawn(move || {
            let asked = (ask.changed, ask.limits);
            let (b, diff) = what_if_session(origin, source, title, asked, &ask.base, &prog);
            let _ = tx.send(Msg::Loaded(Box::new(b)));
            let _ = tx.send(Msg::Diff(diff));
            wake();
        });
        let filter = shared.settings.filter.clone();
        self.current = Some(Comparison::new(name, true, rx, progress, filter));
    }

    /// Ends the comparison.
    pub fn close(&mut self) {
        self.current = None;
    }

    /// Takes what the comparison's thread sent; B, once loaded, follows `sel`. Returns the
    /// errors to show.
    pub fn poll(&mut self, ctx: &egui::Context, sel: &Selection) -> Vec<AppAction> {
        let mut actions = Vec::new();
        let Some(c) = &mut self.current else {
            return actions;
        };
        if let Some(b) = &mut c.b
            && b.scanning()
        {
            b.poll_rows();
            ctx.request_repaint_after(std::time::Duration::from_millis(50));
        }
        let Some(rx) = &c.rx else { return actions };
        let mut loaded = false;
        loop {
            match rx.try_recv() {
                Ok(Msg::Loaded(b)) => match *b {
                    Ok(b) => {
                        c.b = Some(b);
                        loaded = true;
                    }
                    Err(e) => actions.push(AppAction::Error(e)),
                },
                Ok(Msg::Diff(d)) => {
                    if let Ok(d) = &d {
                        c.take_diff(d);
                    }
                    c.diff = Some(d);
                    c.rx = None;
                    loaded = true;
                    break;
                }
                Err(mpsc::TryRecvError::Empty) => {
                    ctx.request_repaint_after(std::time::Duration::from_millis(30));
                    break;
                }
                Err(mpsc::TryRecvError::Disconnected) => {
                    c.diff = Some(Err("the comparison's thread stopped".into()));
                    c.rx = None;
                    break;
                }
            }
        }
        if c.b.is_none() && c.rx.is_none() {
            // B never loaded: nothing to show side by side.
            self.close();
            return actions;
        }
        if loaded {
            actions.extend(self.sync(sel).map(AppAction::Error));
        }
        actions
    }

    /// Makes B's selection follow A's `sel`: its match, and A's slot, access and table slot;
    /// reads what B's panels need. The error to show, when B's record cannot be read.
    pub fn sync(&mut self, sel: &Selection) -> Option<LoadError> {
        let c = self.current.as_mut()?;
        if let Some(p) = c.b_of(sel.dispatch) {
            c.b_sel.dispatch = p;
        } else if c.session_diff().is_none() {
            c.b_sel.dispatch = sel.dispatch;
        }
        c.b_sel.slot = sel.slot;
        c.b_sel.access = sel.access;
        c.b_sel.table_slot = sel.table_slot;
        let b = c.b.as_mut()?;
        let n = b.reports.len();
        if n > 0 {
            c.b_sel.dispatch = c.b_sel.dispatch.min(n - 1);
        }
        b.prepare(c.b_sel.dispatch)
            .err()
            .map(|e| super::session::capture_error(&b.source.display(), e))
    }

    /// Selects B's dispatch at `pos` (a click in B's list): the action that selects its match in
    /// A, if it has one; else B's alone is read (and the error, if it cannot be).
    pub fn select_in_b(&mut self, pos: usize) -> Option<AppAction> {
        let c = self.current.as_mut()?;
        c.b_sel.dispatch = pos;
        if let Some(a) = c.a_of(pos) {
            return Some(AppAction::Panel(Action::SelectDispatch(a)));
        }
        let b = c.b.as_mut()?;
        b.prepare(c.b_sel.dispatch)
            .err()
            .map(|e| AppAction::Error(super::session::capture_error(&b.source.display(), e)))
    }

    /// The left panel in a comparison: A's list above B's.
    pub fn lists_ui(&mut self, ui: &mut egui::Ui, shared: &Shared) -> Vec<AppAction> {
        let mut actions = Vec::new();
        let (Some(s), Some(c)) = (&shared.session, &mut self.current) else {
            return actions;
        };
        let bookmarks = shared.bookmarks();
        let half = (ui.available_height() / 2.0 - 24.0).max(120.0);
        ui.label(RichText::new(format!("A: {}", s.source.display())).strong())
            .on_hover_text("The session compared from");
        ui.allocate_ui(egui::vec2(ui.available_width(), half), |ui| {
            ui.push_id("list-a", |ui| {
                let a = c.a_list.ui(ui, &s.rows, &bookmarks, shared.sel.dispatch);
                actions.extend(a.into_iter().map(AppAction::Panel));
            });
        });
        ui.separator();
        ui.label(RichText::new(format!("B: {}", c.b_name)).strong())
            .on_hover_text("The session compared to");
        match &c.b {
            Some(b) => {
                ui.push_id("list-b", |ui| {
                    let b_actions = c.b_list.ui(ui, &b.rows, &[], c.b_sel.dispatch);
                    actions.extend(b_actions.into_iter().filter_map(of_b));
                });
            }
            None => {
                ui.horizontal(|ui| {
                    ui.spinner();
                    ui.label("loading B…");
                });
            }
        }
        actions
    }

    /// The comparison's header: what is compared, how, its notes, and its progress.
    fn header_ui(c: &Comparison, ui: &mut egui::Ui, actions: &mut Vec<AppAction>) {
        ui.horizontal_wrapped(|ui| {
            ui.label(
                RichText::new(if c.what_if { "What if" } else { "Comparing" })
                    .heading()
                    .color(DIFFERS),
            );
            ui.label(RichText::new(format!("B: {}", c.b_name)).strong());
            if ui.button("Close comparison").clicked() {
                actions.push(AppAction::CloseComparison);
            }
        });
        match &c.diff {
            None => {
                let (done, total, frac) = c.progress.fraction();
                ui.horizontal(|ui| {
                    ui.spinner();
                    ui.add(
                        egui::ProgressBar::new(frac.min(1.0))
                            .desired_width(240.0)
                            .text(if c.b.is_none() && !c.what_if {
                                "loading B…".to_owned()
                            } else if total == 0 || done >= total {
                                "comparing…".to_owned()
                            } else {
                                format!("reading reports: {done} of {total}")
                            }),
                    );
                });
            }
            Some(Err(e)) => {
                ui.colored_label(style::REFUSED, format!("The comparison failed: {e}"));
            }
            Some(Ok(d)) => {
                ui.label(summary(d));
                for l in &d.limits {
                    ui.label(style::mono(format!(
                        "limit {}: {} → {}",
                        l.name, l.before, l.after
                    )));
                }
                for n in &d.notes {
                    ui.label(RichText::new(n).color(style::MUTED));
                }
            }
        }
    }

    /// The central area in a comparison: the header, the Differences panel, the tabs, and the
    /// selected pair's panels side by side.
    pub fn central_ui(&mut self, ui: &mut egui::Ui, shared: &Shared) -> Vec<AppAction> {
        let mut actions = Vec::new();
        let Some(c) = &mut self.current else {
            return actions;
        };
        Self::header_ui(c, ui, &mut actions);
        let a_pos = shared.sel.dispatch;
        let b_pos = c.b_of(a_pos).or(match c.b_marks.get(c.b_sel.dispatch) {
            Some(RowMark::Unmatched) => Some(c.b_sel.dispatch),
            _ => None,
        });
        let b_pos = if c.session_diff().is_none() {
            Some(c.b_sel.dispatch)
        } else {
            b_pos
        };
        let a_marks = c.marks(Side::A, a_pos, b_pos);
        let b_marks = c.marks(Side::B, a_pos, b_pos);
        // The Differences panel: the selected pair's sentences.
        let pair = c.session_diff().and_then(|d| d.for_a(a_pos)).cloned();
        let has_diff = c.session_diff().is_some();
        let a_unmatched = a_marks.as_ref().is_some_and(|m| m.unmatched);
        let b_unmatched = b_pos.is_some_and(|b| c.b_marks.get(b) == Some(&RowMark::Unmatched));
        let mut differences = DifferencesPanel::default();
        egui::CollapsingHeader::new(
            RichText::new(match &pair {
                Some(p) => format!("Differences ({})", p.changes.len()),
                None => "Differences".to_owned(),
            })
            .strong(),
        )
        .id_salt("differences-panel")
        .default_open(true)
        .show(ui, |ui| {
            egui::ScrollArea::vertical()
                .id_salt("differences-scroll")
                .max_height(170.0)
                .auto_shrink([false, true])
                .show(ui, |ui| {
                    if a_unmatched {
                        style::nothing(
                            ui,
                            "This dispatch is only in A: B has no counterpart (removed).",
                        );
                    } else if b_unmatched {
                        style::nothing(
                            ui,
                            "B's selected dispatch is only in B: A has no counterpart (added).",
                        );
                    } else if has_diff {
                        let d = differences.ui(ui, pair.as_ref());
                        actions.extend(d.into_iter().map(AppAction::Panel));
                    }
                });
        });
        let Some(s) = &shared.session else {
            return actions;
        };
        let a_report = s.reports.get(a_pos);
        // The tabs: those compared (the Pass tab is not: a comparison opened on it shows
        // Bindings, A's and B's), Δ on those that show something that differs.
        let tab = c.a_panels.shown_tab(shared.settings.tab, true);
        if let Some(r) = a_report {
            let title = |t: Tab, text: String| match (&a_marks, &b_marks) {
                (Some(m), _) | (_, Some(m)) if tab_differs(t, m) => {
                    RichText::new(format!("{} {text}", compare::GLYPH)).color(DIFFERS)
                }
                _ => RichText::new(text),
            };
            if let Some(t) = c.a_panels.tabs_ui(ui, tab, r, true, title) {
                actions.push(AppAction::Panel(Action::ShowTab(t)));
            }
        }
        ui.separator();
        c.a_panels.set_diff(a_marks);
        c.b_panels.set_diff(b_marks);
        let sel = &shared.sel;
        let b_sel = c.b_sel.clone();
        let (a_panels, b_panels, b_session) = (&mut c.a_panels, &mut c.b_panels, c.b.as_ref());
        ui.columns(2, |cols| {
            // A side's content never draws over the other's (a wide table scrolls or is cut at
            // its column's edge).
            for col in cols.iter_mut() {
                let clip = col.max_rect().intersect(col.clip_rect());
                col.set_clip_rect(clip);
            }
            cols[0].push_id("side-a", |ui| {
                side_heading(ui, Side::A, a_report.map(|r| r.index), Some(sel.dispatch));
                match a_report {
                    Some(report) => {
                        let input = PanelInput {
                            report,
                            session: s,
                            sel,
                            bytes: GuestBytes::Unavailable,
                        };
                        let a = a_panels.tab_ui(ui, tab, &input, true);
                        actions.extend(a.into_iter().map(AppAction::Panel));
                    }
                    None => style::nothing(ui, "This dispatch's record could not be read."),
                }
            });
            cols[1].push_id("side-b", |ui| {
                let Some(b) = b_session else {
                    ui.spinner();
                    return;
                };
                let shown = b_pos.and_then(|p| b.reports.get(p).map(|r| (p, r)));
                side_heading(ui, Side::B, shown.map(|(_, r)| r.index), b_pos);
                match shown {
                    Some((_, report)) => {
                        let input = PanelInput {
                            report,
                            session: b,
                            sel: &b_sel,
                            bytes: GuestBytes::Unavailable,
                        };
                        let b_actions = b_panels.tab_ui(ui, tab, &input, true);
                        actions.extend(b_actions.into_iter().filter_map(of_b));
                    }
                    None => style::nothing(
                        ui,
                        "No counterpart in B: this dispatch is only in A (removed).",
                    ),
                }
            });
        });
        actions
    }

    /// The What if… dialog, when open: Run asks for the what-if its fields say, a bad field
    /// stays in the dialog as its error.
    pub fn what_if_ui(&mut self, ctx: &egui::Context, _shared: &Shared) -> Vec<AppAction> {
        let mut actions = Vec::new();
        let Some(form) = &mut self.what_if else {
            return actions;
        };
        let mut run = false;
        let mut cancel = false;
        egui::Window::new("What if…")
            .id(egui::Id::unique("what-if"))
            .collapsible(false)
            .resizable(false)
            .default_width(420.0)
            .show(ctx, |ui| {
                ui.label("Re-plan the session under other limits and compare it with itself:");
                egui::Grid::new("what-if-grid")
                    .num_columns(2)
                    .show(ui, |ui| {
                        for (name, field, tip) in [
                            (
                                "minStorageBufferOffsetAlignment",
                                &mut form.alignment,
                                "O7: a power of two of at most 256; re-planned without a replay",
                            ),
                            (
                                "maxStorageBufferRange",
                                &mut form.range,
                                "O5: re-planned without a replay",
                            ),
                            (
                                "probe bound",
                                &mut form.probe_bound,
                                "T2: changes the table, so the session is replayed",
                            ),
                            (
                                "host page bytes",
                                &mut form.host_page,
                                "the host's page size: changes the mapping, so the session is replayed",
                            ),
                        ] {
                            let label = ui.label(name).on_hover_text(tip);
                            ui.add_sized(
                                [160.0, ui.spacing().interact_size.y],
                                egui::TextEdit::singleline(field),
                            )
                            .labelled_by(label.id)
                            .on_hover_text(tip);
                            ui.end_row();
                        }
                    });
                ui.label(
                    RichText::new(
                        "Decimal or 0x…. The alignment and the range re-plan each dispatch from its recorded input; the probe bound and the host page replay the session on the CPU reference.",
                    )
                    .small()
                    .color(style::MUTED),
                );
                if let Some(e) = &form.error {
                    ui.colored_label(style::REFUSED, e);
                }
                ui.horizontal(|ui| {
                    run = ui.button("Run").clicked();
                    cancel = ui.button("Cancel").clicked();
                });
            });
        if cancel {
            self.what_if = None;
        } else if run {
            match form.limits() {
                Ok((changed, limits)) => actions.push(AppAction::RunWhatIf(Box::new(WhatIfAsk {
                    changed,
                    limits,
                    base: form.base.clone(),
                }))),
                Err(e) => form.error = Some(e.to_string()),
            }
        }
        actions
    }
}

/// An action from B's list or panels as the app's: a dispatch selects B's and its match in A
/// (or B's alone, where it has none); a bookmark is A's alone; the rest are A's actions.
fn of_b(action: Action) -> Option<AppAction> {
    match action {
        Action::SelectDispatch(p) => Some(AppAction::SelectInB(p)),
        Action::ToggleBookmark(_) => None,
        other => Some(AppAction::Panel(other)),
    }
}

/// Whether tab `t` shows something `m` marks.
fn tab_differs(t: Tab, m: &DiffMarks) -> bool {
    match t {
        Tab::Bindings => !m.slots.is_empty() || !m.sets.is_empty(),
        Tab::Refusals => m.mode || !m.refusals.is_empty(),
        Tab::Memory => !m.pieces.is_empty(),
        Tab::ChunkTable => m.chunk_bytes || m.probes,
        Tab::Accesses => !m.accesses.is_empty(),
        Tab::After => !m.marks.is_empty() || !m.words.is_empty() || !m.hazards.is_empty(),
        Tab::Pass => false,
    }
}

/// "A · dispatch 4" above a side's panel.
fn side_heading(ui: &mut egui::Ui, side: Side, index: Option<u64>, pos: Option<usize>) {
    let text = match (index, pos) {
        (Some(i), Some(p)) => format!("{} · dispatch {i} (position {p})", side.name()),
        _ => format!("{} · no counterpart", side.name()),
    };
    ui.label(RichText::new(text).strong());
}

/// The one-line summary of a diff.
pub fn summary(d: &SessionDiff) -> String {
    let how = match d.matching {
        Matching::ByOrder => "matched by order",
        Matching::ByProgram => "matched by program address",
        Matching::ByOrderPastLimit => {
            "matched by program address, by order past the alignment's limit"
        }
    };
    if d.is_empty() {
        return format!(
            "the same: no decision differs ({} {}, {how})",
            d.pairs.len(),
            plural(d.pairs.len(), "pair", "pairs")
        );
    }
    let n = d.dispatches.len();
    let changes = d.n_changes();
    format!(
        "{n} of {} paired {} {} ({changes} {}); {} only in A, {} only in B; {how}",
        d.pairs.len(),
        plural(d.pairs.len(), "dispatch", "dispatches"),
        plural(n, "differs", "differ"),
        plural(changes, "change", "changes"),
        d.only_a.len(),
        d.only_b.len(),
    )
}
