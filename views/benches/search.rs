//! Finding dispatches in a session of 1,000,000 (the figure: a search ≤ 100 ms).
//!
//! `index`: building the search index once; `search`: a search from scratch (one scan of the
//! index, then the structured conditions); `keystroke`: one more character typed onto a search
//! (narrowing the last answer); `filter`: a mode and escapes filter with no text.

#![allow(missing_docs, reason = "bench")]

use criterion::{Criterion, criterion_group, criterion_main};
use dispatchscope_core::Rule;
use dispatchscope_core::report::{Counts, Mode};
use dispatchscope_views::dispatches::RuleSet;
use dispatchscope_views::{DispatchIndex, DispatchRow, Filter, Finder};

const N: u64 = 1_000_000;

fn rows() -> Vec<DispatchRow> {
    (0..N)
        .map(|i| DispatchRow {
            index: i,
            program: 0x4000_0000_0000 + (i % 97) * 0x1000,
            label: format!("ray traversal, pass {}, frame {}", i % 200, i / 200),
            mode: [Mode::Bound, Mode::DeviceAddressed, Mode::Refused][(i % 3) as usize],
            counts: Counts {
                escapes: usize::from(i % 101 == 0),
                refusals: usize::from(i % 3 == 2),
                ..Counts::default()
            },
            rules: RuleSet::of(if i % 3 == 2 { &[Rule::O7] } else { &[] }),
            frame: i / 200,
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let rows = rows();
    let mut g = c.benchmark_group("find_1m");
    g.sample_size(10);
    g.bench_function("index", |b| {
        b.iter(|| {
            let mut index = DispatchIndex::default();
            index.sync(&rows);
            index.len()
        })
    });
    let mut warm = Finder::default();
    warm.find(&rows, &Filter::default(), &[]);
    let search = Filter {
        search: "frame 4321".into(),
        ..Filter::default()
    };
    g.bench_function("search", |b| {
        b.iter_batched_ref(
            || warm.clone(),
            |f| f.find(&rows, &search, &[]).len(),
            criterion::BatchSize::LargeInput,
        )
    });
    let common = Filter {
        search: "pass 1".into(),
        ..Filter::default()
    };
    let mut typed = warm.clone();
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
            || warm.clone(),
            |f| f.find(&rows, &filter, &[]).len(),
            criterion::BatchSize::LargeInput,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
