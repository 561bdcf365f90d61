//! Guest memory events at scale (issue 13): N reserve events of one page each at scattered bases,
//! then a protect that splits one of them, on a fresh `GuestMemory`. A reserve looks for an overlap
//! in O(log n) and keeps its pages as one run, so N reserves are n log n; the linear overlap scan
//! they replaced made 50,000 of them quadratic. Also: reserving and protecting inside one
//! reservation of 1 TiB, which costs what a 4 KiB one does.

use criterion::{BenchmarkId, Criterion, criterion_main};
use dispatchscope_core::addr::ByteRange;
use dispatchscope_core::input::{Backing, Event};
use dispatchscope_core::memory::GuestMemory;

/// `n` one-page reservations at scattered, distinct 64 KiB-aligned bases.
fn reserves(n: u64) -> Vec<Event> {
    // An odd multiplier modulo 2^24 is a bijection: distinct bases, scattered.
    (0..n)
        .map(|i| {
            let base = ((i.wrapping_mul(0x9E37_79B9) & 0xff_ffff) + 1) << 16;
            Event::Reserve {
                range: ByteRange::new(base, base + 0x1000),
                readable: true,
                writable: true,
                committed: true,
                backing: Backing::Private,
                host_base: None,
            }
        })
        .collect()
}

fn memory_events(c: &mut Criterion) {
    let mut g = c.benchmark_group("memory");
    g.sample_size(10);
    for n in [5_000u64, 50_000] {
        let events = reserves(n);
        g.bench_with_input(BenchmarkId::new("reserve", n), &events, |b, events| {
            b.iter(|| {
                let mut m = GuestMemory::new(0x1000).unwrap_or_else(|e| panic!("{e}"));
                for e in events {
                    m.apply(e).unwrap_or_else(|e| panic!("{e}"));
                }
                m
            });
        });
    }
    for (name, bytes) in [("4KiB", 0x1000u64), ("1TiB", 1 << 40)] {
        g.bench_function(BenchmarkId::new("reserve_protect_release", name), |b| {
            b.iter(|| {
                let mut m = GuestMemory::new(0x1000).unwrap_or_else(|e| panic!("{e}"));
                let base = 0x1_0000_0000u64;
                let apply = |m: &mut GuestMemory, e: Event| {
                    m.apply(&e).unwrap_or_else(|e| panic!("{e}"));
                };
                apply(
                    &mut m,
                    Event::Reserve {
                        range: ByteRange::new(base, base + bytes),
                        readable: true,
                        writable: true,
                        committed: false,
                        backing: Backing::Private,
                        host_base: None,
                    },
                );
                apply(
                    &mut m,
                    Event::Protect {
                        range: ByteRange::new(base, base + 0x1000),
                        readable: true,
                        writable: false,
                    },
                );
                let runs = m.readable_runs().len();
                apply(&mut m, Event::Release { base });
                runs
            });
        });
    }
    g.finish();
}

mod group {
    #![allow(
        missing_docs,
        reason = "criterion_group! declares an undocumented `pub fn benches`"
    )]
    criterion::criterion_group!(benches, super::memory_events);
}

criterion_main!(group::benches);
