//! Planning the bound path (O1–O11) of dispatches with random overlaps: 32 slots (a large real
//! dispatch), then 10,000 and 100,000 slots, whose ratio shows how the planner scales. The engine
//! keeps one [`Planner`] and plans every dispatch with it, so the `plan_bindings/N` cases do too
//! (its working arrays are reused, the plan is allocated anew each call); `plan_bindings_fresh/N`
//! is the free function `plan_bindings`, a fresh planner per call, for comparison. See
//! `benches/README.md` for which number matters.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_main};
use dispatchscope_core::Slot;
use dispatchscope_core::input::DeviceLimits;
use dispatchscope_core::input::slot_bases;
use dispatchscope_core::overlap::{Planner, plan_bindings};

/// xorshift64*: a fixed, dependency-free stream of pseudo-random numbers.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// `n` slots whose overlaps look the same at every `n`: bases spread over `n * 256` bytes of a
/// guest region (so a slot overlaps about one other on average, and sets of two to a handful
/// form), sizes 16..512 bytes, half of them written; 1 % exact copies of an earlier slot (O3,
/// D937) and 1 % unresolved. Bases are 16-aligned (the default device's alignment) except for
/// one in `1 / aligned_odds` slots, whose member offsets O7 refuses.
fn slots(n: usize, seed: u64, aligned_odds: u64) -> Vec<Slot> {
    let mut rng = Rng(seed | 1);
    let region = 0x4000_0000_0000u64;
    let span = n as u64 * 256;
    let mut out: Vec<Slot> = Vec::with_capacity(n);
    for i in 0..n {
        let mut base = region + rng.below(span);
        if rng.below(aligned_odds) != 0 {
            base &= !0xf;
        }
        let mut s = Slot::new(i as u32, base, 16 + rng.below(496), rng.below(2) == 0);
        match rng.below(100) {
            0 if i > 0 => {
                let of = &out[rng.below(i as u64) as usize];
                if of.alias_of.is_none() && of.resolved {
                    s.base = of.base;
                    s.size_bytes = of.size_bytes;
                    s.alias_of = Some(of.slot);
                }
            }
            1 => s.resolved = false,
            _ => {}
        }
        out.push(s);
    }
    out
}

fn planning(c: &mut Criterion) {
    let limits = DeviceLimits::default();
    let inputs: Vec<(&str, usize, Vec<Slot>)> = [
        ("32", 32usize, 100u64),
        ("10000", 10_000, 100),
        ("100000", 100_000, 100),
        ("32_half_misaligned", 32, 2),
    ]
    .into_iter()
    .map(|(name, n, odds)| (name, n, slots(n, 0xD953 + n as u64, odds)))
    .collect();
    let mut group = c.benchmark_group("plan_bindings");
    // 32, 10k, 100k slots with 1 % misaligned bases; and 32 slots with half of them misaligned,
    // where the named O7 refusals (their text formatted) dominate.
    for (name, n, input) in &inputs {
        let (name, n) = (*name, *n);
        let plan = plan_bindings(input, &[], &limits, None);
        eprintln!(
            "plan_bindings/{name}: {} sets, {} slots in sets, {} refusals",
            plan.sets.len(),
            plan.sets.iter().map(|s| s.members.len() + 1).sum::<usize>(),
            plan.refusals.len()
        );
        group.sample_size(if n >= 100_000 { 20 } else { 100 });
        group.throughput(Throughput::Elements(n as u64));
        // The engine's path: one planner, reused from call to call.
        // The bases are validation's (the engine finds them once per dispatch, before planning).
        let bases = slot_bases(input, &[]);
        let mut planner = Planner::new();
        group.bench_with_input(BenchmarkId::from_parameter(name), input, |b, input| {
            b.iter(|| planner.plan(black_box(input), &bases, &limits, None))
        });
    }
    group.finish();
    let mut group = c.benchmark_group("plan_bindings_fresh");
    for (name, n, input) in &inputs {
        group.sample_size(if *n >= 100_000 { 20 } else { 100 });
        group.throughput(Throughput::Elements(*n as u64));
        group.bench_with_input(BenchmarkId::from_parameter(name), input, |b, input| {
            b.iter(|| plan_bindings(black_box(input), &[], &limits, None))
        });
    }
    group.finish();
}

mod group {
    #![allow(
        missing_docs,
        reason = "criterion_group! declares an undocumented `pub fn benches`"
    )]
    use super::planning;
    criterion::criterion_group!(benches, planning);
}

criterion_main!(group::benches);
