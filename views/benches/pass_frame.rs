//! CPU time of one headless egui frame of the Pass tab with a 4K instrumented pass selected and
//! its grid picture shown (issue 14's figure: ≤ 4 ms a frame, p95), layout and tessellation
//! included, no GPU:
//!
//! - `pass_4k_hover`: the pointer moves over the picture every frame (the hover card names a new
//!   workgroup each time);
//! - `pass_4k_pixels`: zoomed in to single pixels, the pointer moving;
//! - `pass_4k_recolour`: the colouring toggled every frame, so the 480×270 texture is built and
//!   uploaded every frame (the worst case; in use it is built once per report).
//!
//! The pass is `instrumented::fixture`'s (3840×2160, 11 sites, a full log of 384 escapes, a 2×1
//! lane capture). Before criterion runs, each case prints its median, 95th percentile and worst.
//! Run: `cargo bench -p dispatchscope-views --features fixture --bench pass_frame`.

#![allow(missing_docs, reason = "bench")]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "bench")]

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use dispatchscope_core::DispatchReport;
use dispatchscope_views::instrumented::fixture::Fixture;
use dispatchscope_views::instrumented::{Colouring, PassPanel};
use egui::{Event, Pos2, RawInput, Rect, vec2};

const SCREEN: (f32, f32) = (1440.0, 900.0);

struct Driver {
    ctx: egui::Context,
    panel: PassPanel,
    report: DispatchReport,
    time: f64,
}

impl Driver {
    fn new(zoom: f32) -> Self {
        let ctx = egui::Context::default();
        dispatchscope_views::style::install_fonts(&ctx);
        let mut panel = PassPanel::default();
        panel.grid.zoom = zoom;
        let mut d = Self {
            ctx,
            panel,
            report: Fixture::new(3840, 2160).report(),
            time: 0.0,
        };
        for _ in 0..3 {
            d.frame(Vec::new());
        }
        d
    }

    /// One frame: the panel's ui, then tessellation, as eframe does before painting.
    fn frame(&mut self, events: Vec<Event>) -> usize {
        self.time += 1.0 / 60.0;
        let input = RawInput {
            screen_rect: Some(Rect::from_min_size(Pos2::ZERO, vec2(SCREEN.0, SCREEN.1))),
            time: Some(self.time),
            predicted_dt: 1.0 / 60.0,
            events,
            ..Default::default()
        };
        let (panel, report) = (&mut self.panel, &self.report);
        let mut out = self.ctx.run_ui(input, |ui| {
            egui::CentralPanel::default().show(ui, |ui| panel.ui(ui, report));
        });
        // No renderer here: the texture uploads (the font atlas, the picture) are dropped.
        out.textures_delta.clear();
        let prims = self.ctx.tessellate(out.shapes, out.pixels_per_point);
        prims
            .iter()
            .map(|p| match &p.primitive {
                egui::epaint::Primitive::Mesh(m) => m.vertices.len(),
                egui::epaint::Primitive::Callback(_) => 0,
            })
            .sum()
    }

    /// A point over the picture, moving across it frame by frame.
    fn over_picture(&self, i: usize) -> Vec<Event> {
        let r = self.panel.grid.last_rect.unwrap_or(Rect::ZERO);
        let f = (i % 97) as f32 / 97.0;
        let g = (i % 61) as f32 / 61.0;
        let view = r.intersect(Rect::from_min_size(Pos2::ZERO, vec2(SCREEN.0, SCREEN.1)));
        vec![Event::PointerMoved(Pos2::new(
            view.min.x + f * view.width(),
            view.min.y + g * view.height(),
        ))]
    }
}

type Step = fn(&mut Driver, usize) -> Vec<Event>;

fn hover(d: &mut Driver, i: usize) -> Vec<Event> {
    d.over_picture(i)
}

fn recolour(d: &mut Driver, i: usize) -> Vec<Event> {
    d.panel.grid.colouring = if i.is_multiple_of(2) {
        Colouring::Captured
    } else {
        Colouring::Escapes
    };
    d.over_picture(i)
}

fn summary(name: &str, d: &mut Driver, step: Step) {
    let mut vertices = 0;
    let before = d.panel.grid.rebuilds;
    let mut times: Vec<Duration> = (0..600)
        .map(|i| {
            let ev = step(d, i);
            let t = Instant::now();
            vertices = d.frame(ev);
            t.elapsed()
        })
        .collect();
    times.sort_unstable();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "{name}: median {:.3} ms, p95 {:.3} ms, worst {:.3} ms over {} frames; {vertices} vertices in the last frame; {} texture builds",
        ms(times[times.len() / 2]),
        ms(times[times.len() * 95 / 100]),
        ms(times[times.len() - 1]),
        times.len(),
        d.panel.grid.rebuilds - before,
    );
}

fn bench(c: &mut Criterion) {
    let cases: [(&str, f32, Step); 3] = [
        ("pass_4k_hover", 1.0, hover),
        ("pass_4k_pixels", 40.0, hover),
        ("pass_4k_recolour", 1.0, recolour),
    ];
    let mut g = c.benchmark_group("pass_frame");
    g.sample_size(20);
    for (name, zoom, step) in cases {
        let mut d = Driver::new(zoom);
        summary(name, &mut d, step);
        let mut i = 0;
        g.bench_function(name, |b| {
            b.iter(|| {
                i += 1;
                let ev = step(&mut d, i);
                d.frame(ev)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
