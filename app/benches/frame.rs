//! CPU time of one egui frame of the real app (`GuiApp::ui`, layout and tessellation, no GPU),
//! driven headless through a bare `egui::Context`:
//!
//! - `scroll_dispatch_table`: 100,000 dispatches loaded, a wheel event over the dispatch table
//!   every frame (budget 4 ms);
//! - `chunk_table_524288`: the Chunk table tab over a 524,288-slot table at the working load,
//!   scrolling the grid every frame (budget 4 ms);
//! - `step_next_dispatch`: 100,000 dispatches loaded, F10 every frame, so each frame draws a new
//!   dispatch (budget 16 ms).
//!
//! The synthetic dispatches are the shipped samples' reports repeated with new indices and
//! programs. Before criterion runs, each case prints its median, 95th percentile and worst frame.

#![allow(missing_docs, reason = "bench")]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "bench")]

use dispatchscope::gui;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use dispatchscope_core::chunk_table::ChunkTable;
use dispatchscope_core::report::{Mark, TableReport};
use dispatchscope_views::{Tab, TableSnapshot};
use egui::{Event, Key, Modifiers, Pos2, RawInput, Rect, vec2};
use gui::{GuiApp, Progress, Session, Settings, Source, embedded_samples};

const N_DISPATCHES: usize = 100_000;
const SCREEN: (f32, f32) = (1440.0, 900.0);

/// The shipped samples' reports and tables, repeated to `n` dispatches.
fn synthetic_session(n: usize) -> Session {
    let mut templates = Vec::new();
    for (name, text) in embedded_samples() {
        let s = Session::load(
            Source::Embedded(name),
            text.as_bytes(),
            &Progress::default(),
        )
        .unwrap();
        for ((r, t), m) in s
            .reports
            .in_memory_reports()
            .iter()
            .cloned()
            .zip(s.tables)
            .zip(s.memory)
        {
            templates.push((r, t, m));
        }
    }
    let mut reports = Vec::with_capacity(n);
    let mut tables = Vec::with_capacity(n);
    let mut memory = Vec::with_capacity(n);
    for i in 0..n {
        let (r, t, m) = &templates[i % templates.len()];
        let mut r = r.clone();
        r.index = i as u64;
        r.program = r.program.wrapping_add(((i / templates.len()) as u64) << 8);
        reports.push(r);
        tables.push(t.clone());
        memory.push(std::sync::Arc::clone(m));
    }
    let mut s = Session::from_reports(
        Source::Embedded("synthetic"),
        "synthetic".into(),
        reports,
        tables,
    );
    s.memory = memory;
    s
}

/// A session of one device-addressed dispatch over a 524,288-slot table at the working load,
/// with 2,000 marked chunks.
fn big_table_session() -> Session {
    // Runs of 64 consecutive 64 KiB chunks at scattered bases: 149,000 chunks fill 2^19 slots
    // to the working load (2/7).
    let n = 149_000u64;
    let entries: Vec<(u64, u64)> = (0..n)
        .map(|i| {
            let run = i / 64;
            let key = run.wrapping_mul(0x9E37_79B9) % (1 << 30) * 128 + i % 64;
            (key, key << 16)
        })
        .collect();
    let table = ChunkTable::build(0x10000, 16, &entries).unwrap();
    assert_eq!(table.capacity(), 524_288);
    let template = synthetic_session(64)
        .reports
        .in_memory_reports()
        .iter()
        .find(|r| r.table.is_some())
        .cloned()
        .expect("a shipped device-addressed dispatch");
    let mut r = template;
    let occupied: Vec<usize> = table
        .slots()
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.is_empty())
        .map(|(i, _)| i)
        .collect();
    r.marks = occupied
        .iter()
        .step_by(occupied.len() / 2000)
        .map(|&s| Mark {
            table_slot: s,
            guest: dispatchscope_core::ByteRange::new(0, 0x10000),
            stores: 1,
        })
        .collect();
    r.table = Some(TableReport {
        chunk_bytes: 0x10000,
        capacity: table.capacity() as u64,
        n_chunks: table.len() as u64,
        load: table.load(),
        probe_bound: 16,
        probe_histogram: table.probe_histogram_hits(),
        ..r.table.clone().unwrap_or_default()
    });
    let snap = TableSnapshot::new(table, 0);
    Session::from_reports(
        Source::Embedded("big-table"),
        "big table".into(),
        vec![r],
        vec![Some(snap)],
    )
}

/// Drives the app headless, one frame at a time.
struct Driver {
    ctx: egui::Context,
    app: GuiApp,
    time: f64,
}

impl Driver {
    fn new(session: Session, tab: Tab) -> Self {
        let mut app = GuiApp::new(Settings::default());
        app.set_session(session);
        app.shared.settings.tab = tab;
        let ctx = egui::Context::default();
        dispatchscope_views::style::install_fonts(&ctx);
        let mut d = Self {
            ctx,
            app,
            time: 0.0,
        };
        for _ in 0..3 {
            d.frame(Vec::new());
        }
        d
    }

    /// One frame with `events`: the app's ui, then tessellation, as eframe does before painting.
    fn frame(&mut self, events: Vec<Event>) -> usize {
        self.time += 1.0 / 60.0;
        let input = RawInput {
            screen_rect: Some(Rect::from_min_size(Pos2::ZERO, vec2(SCREEN.0, SCREEN.1))),
            time: Some(self.time),
            predicted_dt: 1.0 / 60.0,
            events,
            ..Default::default()
        };
        let app = &mut self.app;
        let out = self.ctx.run_ui(input, |ui| app.ui(ui));
        let prims = self.ctx.tessellate(out.shapes, out.pixels_per_point);
        prims
            .iter()
            .map(|p| match &p.primitive {
                egui::epaint::Primitive::Mesh(m) => m.vertices.len(),
                egui::epaint::Primitive::Callback(_) => 0,
            })
            .sum()
    }
}

fn wheel_at(pos: Pos2, dy: f32) -> Vec<Event> {
    vec![
        Event::PointerMoved(pos),
        Event::MouseWheel {
            unit: egui::MouseWheelUnit::Point,
            delta: vec2(0.0, dy),
            phase: egui::TouchPhase::Move,
            source: egui::MouseWheelSource::Wheel,
            modifiers: Modifiers::NONE,
        },
    ]
}

fn key(k: Key, modifiers: Modifiers) -> Vec<Event> {
    vec![
        Event::Key {
            key: k,
            physical_key: None,
            pressed: true,
            repeat: false,
            modifiers,
        },
        Event::Key {
            key: k,
            physical_key: None,
            pressed: false,
            repeat: false,
            modifiers,
        },
    ]
}

/// The events of frame `i` of a case.
type Events = fn(&Driver, usize) -> Vec<Event>;

fn scroll_table(_: &Driver, i: usize) -> Vec<Event> {
    // Down for 400 frames, then back up: always rows not seen the frame before.
    let dy = if (i / 400).is_multiple_of(2) {
        -120.0
    } else {
        120.0
    };
    wheel_at(Pos2::new(250.0, 450.0), dy)
}

fn scroll_grid(_: &Driver, i: usize) -> Vec<Event> {
    let dy = if (i / 400).is_multiple_of(2) {
        -200.0
    } else {
        200.0
    };
    wheel_at(Pos2::new(1000.0, 700.0), dy)
}

fn step_next(d: &Driver, _: usize) -> Vec<Event> {
    let last = d
        .app
        .shared
        .session
        .as_ref()
        .map_or(0, |s| s.reports.len() - 1);
    if d.app.shared.sel.dispatch >= last {
        key(Key::Home, Modifiers::COMMAND)
    } else {
        key(Key::F10, Modifiers::NONE)
    }
}

fn summary(name: &str, d: &mut Driver, events: Events) {
    let mut vertices = 0;
    let mut times: Vec<Duration> = (0..600)
        .map(|i| {
            let ev = events(d, i);
            let t = Instant::now();
            vertices = d.frame(ev);
            t.elapsed()
        })
        .collect();
    times.sort_unstable();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "{name}: median {:.3} ms, p95 {:.3} ms, worst {:.3} ms over {} frames; {vertices} vertices in the last frame, at dispatch {}",
        ms(times[times.len() / 2]),
        ms(times[times.len() * 95 / 100]),
        ms(times[times.len() - 1]),
        times.len(),
        d.app.shared.sel.dispatch
    );
}

fn bench(c: &mut Criterion) {
    type Case = (&'static str, Box<dyn Fn() -> Driver>, Events);
    let cases: [Case; 3] = [
        (
            "scroll_dispatch_table_100k",
            Box::new(|| Driver::new(synthetic_session(N_DISPATCHES), Tab::Bindings)),
            scroll_table,
        ),
        (
            "chunk_table_524288",
            Box::new(|| Driver::new(big_table_session(), Tab::ChunkTable)),
            scroll_grid,
        ),
        (
            "step_next_dispatch_100k",
            Box::new(|| Driver::new(synthetic_session(N_DISPATCHES), Tab::Bindings)),
            step_next,
        ),
    ];
    for (name, make, events) in cases {
        let mut d = make();
        summary(name, &mut d, events);
        let mut i = 0usize;
        c.bench_function(name, |b| {
            b.iter(|| {
                let ev = events(&d, i);
                i += 1;
                d.frame(ev)
            })
        });
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(50).measurement_time(Duration::from_secs(4)).warm_up_time(Duration::from_secs(1));
    targets = bench
}
criterion_main!(benches);
