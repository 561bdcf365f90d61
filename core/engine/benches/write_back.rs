//! O8 for a device pass (issue 14): `Engine::write_back_from_device` of a 1080p output holder
//! (two words a pixel, 15.8 MiB) whose every word the device's masks set, against a plain copy of
//! the same bytes in the same run, and of a holder with every other word set (the worst case for
//! runs: one host write a word).

use criterion::{BenchmarkId, Criterion, criterion_main};
use dispatchscope_core::addr::ByteRange;
use dispatchscope_core::input::{Backing, Event};
use dispatchscope_core::{DeviceLimits, DispatchInput, Engine, Slot};

const BASE: u64 = 0x1_0000_0000;
const HOLDER: u64 = 1920 * 1080 * 8;

fn write_back(c: &mut Criterion) {
    let mut g = c.benchmark_group("write_back");
    g.sample_size(10);
    let mut e = Engine::cpu(DeviceLimits::default()).unwrap_or_else(|e| panic!("{e}"));
    e.apply(&Event::Reserve {
        range: ByteRange::new(BASE, BASE + 2 * HOLDER),
        readable: true,
        writable: true,
        committed: true,
        backing: Backing::Private,
        host_base: None,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let input = DispatchInput {
        program: 0x4000_0000_1000,
        slots: vec![
            Slot::new(0, BASE, HOLDER, true),
            Slot::new(1, BASE + 0x100, HOLDER - 0x100, true),
        ],
        ..DispatchInput::default()
    };
    let report = e.dispatch(&input).unwrap_or_else(|e| panic!("{e}"));
    let data: Vec<u8> = (0..HOLDER).map(|i| i as u8).collect();
    for (name, every) in [("all words", 1usize), ("every other word", 2)] {
        let mut masks = vec![0u8; HOLDER as usize];
        for w in (0..masks.len() / 4).step_by(every) {
            masks[4 * w] = 1;
        }
        g.bench_function(BenchmarkId::new("from_device", name), |b| {
            b.iter(|| {
                let mut r = report.clone();
                e.write_back_from_device(&mut r, 0, &data, &masks, 16)
                    .unwrap_or_else(|e| panic!("{e}"));
                r.counts.words_written_back
            });
        });
    }
    let mut guest = vec![0u8; HOLDER as usize];
    g.bench_function("plain_copy", |b| {
        b.iter(|| {
            guest.copy_from_slice(&data);
            guest[7]
        });
    });
    g.finish();
}

fn benches() {
    let mut c = Criterion::default().configure_from_args();
    write_back(&mut c);
}

criterion_main!(benches);
