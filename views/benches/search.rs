//! Finding and listing dispatches in a session of 1,000,000 (the figures: a search ≤ 100 ms, a
//! frame of the list a few ms).
//!
//! `rows`: building the columns of a million rows (what a session does as they arrive);
//! `search`: a search from scratch (each signature once, then one pass over the rows);
//! `search_digits`: a search for an index's digits (formatted for every row); `keystroke`: one
//! more character typed onto a search (narrowing the last answer); `filter`: a mode and escapes
//! filter with no text; `frame_list`: one headless egui frame of the Dispatches panel over the
//! million rows, scrolling every frame (layout and tessellation, no GPU). Before criterion runs,
//! it prints the rows' heap bytes per dispatch.

#![allow(missing_docs, reason = "bench")]

use criterion::{Criterion, criterion_group, criterion_main};
use dispatchscope_core::Rule;
use dispatchscope_core::report::Mode;
use dispatchscope_views::{DispatchRow, DispatchesPanel, Filter, Finder, RowCounts, Rows, RuleSet};
use egui::{Event, Pos2, RawInput, Rect, vec2};

const N: u64 = 1_000_000;

fn row(i: u64) -> DispatchRow {
    DispatchRow {
        index: i,
        program: 0x4000_0000_0000 + (i % 97) * 0x1000,
        label: format!("ray traversal, pass {}", i % 200),
        mode: [Mode::Bound, Mode::DeviceAddressed, Mode::Refused][(i % 3) as usize],
        counts: RowCounts {
            escapes: u32::from(i.is_multiple_of(101)),
            refusals: u32::from(i % 3 == 2),
            sets: (i % 4) as u32,
            marks: (i % 9) as u32,
        },
        rules: RuleSet::of(if i % 3 == 2 { &[Rule::O7] } else { &[] }),
        frame: i / 200,
    }
}

fn rows() -> Rows {
    let mut rows = Rows::new();
    for i in 0..N {
        rows.push(&row(i));
    }
    rows
}

fn bench(c: &mut Criterion) {
    let rows = rows();
    println!(
        "rows: {} dispatches, {} signatures, {:.1} heap bytes a dispatch",
        rows.len(),
        rows.n_signatures(),
        rows.heap_bytes() as f64 / rows.len() as f64
    );
    let mut g = c.benchmark_group("find_1m");
    g.sample_size(10);
    g.bench_function("rows", |b| {
        b.iter(|| {
            let mut r = Rows::new();
            for i in 0..N {
                r.push(&row(i));
            }
            r.len()
        })
    });
    let search = Filter {
        search: "pass 17 o7".into(),
        ..Filter::default()
    };
    g.bench_function("search", |b| {
        b.iter_batched_ref(
            Finder::default,
            |f| f.find(&rows, &search, &[]).len(),
            criterion::BatchSize::SmallInput,
        )
    });
    let digits = Filter {
        search: "4321".into(),
        ..Filter::default()
    };
    g.bench_function("search_digits", |b| {
        b.iter_batched_ref(
            Finder::default,
            |f| f.find(&rows, &digits, &[]).len(),
            criterion::BatchSize::SmallInput,
        )
    });
    let common = Filter {
        search: "pass 1".into(),
        ..Filter::default()
    };
    let mut typed = Finder::default();
    typed.find(&rows, &common, &[]);
    let longer = Filter {
        search: "pass 17".into(),
        ..Filter::default()
    };
    g.bench_function("keystroke", |b| {
        b.iter_batched_ref(
            || typed.clone(),
            |f| f.find(&rows, &longer, &[]).len(),
            criterion::BatchSize::LargeInput,
        )
    });
    let filter = Filter {
        mode: Some(Mode::Refused),
        has_escapes: true,
        ..Filter::default()
    };
    g.bench_function("filter", |b| {
        b.iter_batched_ref(
            Finder::default,
            |f| f.find(&rows, &filter, &[]).len(),
            criterion::BatchSize::SmallInput,
        )
    });
    // One frame of the list over the million rows, a wheel event over it every frame.
    let ctx = egui::Context::default();
    let mut panel = DispatchesPanel::default();
    let screen = Rect::from_min_size(Pos2::ZERO, vec2(600.0, 900.0));
    let frame = |ctx: &egui::Context, panel: &mut DispatchesPanel, scroll: bool| {
        let input = RawInput {
            screen_rect: Some(screen),
            events: if scroll {
                vec![
                    Event::PointerMoved(Pos2::new(300.0, 500.0)),
                    Event::MouseWheel {
                        unit: egui::MouseWheelUnit::Line,
                        delta: vec2(0.0, -40.0),
                        phase: egui::TouchPhase::Move,
                        source: egui::MouseWheelSource::Wheel,
                        modifiers: egui::Modifiers::NONE,
                    },
                ]
            } else {
                Vec::new()
            },
            ..RawInput::default()
        };
        let out = ctx.run_ui(input, |ui| {
            let _ = panel.ui(ui, &rows, &[], 0);
        });
        ctx.tessellate(out.shapes, out.pixels_per_point).len()
    };
    frame(&ctx, &mut panel, false);
    g.bench_function("frame_list", |b| b.iter(|| frame(&ctx, &mut panel, true)));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
