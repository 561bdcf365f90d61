//! The chunk table (T1–T2) against what it replaces: lookups beside `hashbrown::HashMap` and a flat
//! array over a dense range (the flat-array limit), a full build, and one incremental insert.
//! See `benches/README.md` for which number matters.

use std::hint::black_box;

use criterion::{BatchSize, Criterion, Throughput, criterion_main};
use dispatchscope_core::chunk_table::{
    ChunkTable, DEFAULT_PROBE_BOUND, random_hash_probes_per_hit,
};

/// 4 KiB chunks: the host page, the chunk T1 gives when mappings are page-aligned.
const CHUNK_BYTES: u64 = 4096;
/// Mapped chunks in the large case (1 GiB of guest memory at 4 KiB chunks) and in the in-cache case.
const N_LARGE: usize = 262_144;
const N_SMALL: usize = 16_384;
/// Runs of consecutive chunks (readable runs, M1) the keys form.
const N_RUNS: usize = 64;
/// Lookups per iteration.
const N_LOOKUPS: usize = 4096;

/// splitmix64: a fixed, dependency-free stream of pseudo-random numbers.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// `n` mapped chunks as `N_RUNS` runs of consecutive chunks of varied length, at scattered 64 KiB-aligned
/// bases in four guest regions like the records' (0x4000_0000_0000 and 0x7400_5b80_0000 among them).
/// Each chunk maps to its own device page. Returns `(guest_chunk, device_addr)` in run order.
fn mapped_chunks(n: usize, rng: &mut Rng) -> Vec<(u64, u64)> {
    const REGIONS: [u64; 4] = [
        0x4000_0000_0000,
        0x7400_5b80_0000,
        0x0002_0000_0000,
        0x7ffe_0000_0000,
    ];
    let weights: Vec<u64> = (0..N_RUNS).map(|_| 1 + rng.below(100)).collect();
    let total: u64 = weights.iter().sum();
    let mut lens: Vec<u64> = weights
        .iter()
        .map(|w| (w * n as u64 / total).max(1))
        .collect();
    let short = n as u64 - lens.iter().sum::<u64>();
    lens[0] += short;
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for (i, &len) in lens.iter().enumerate() {
        loop {
            let offset = rng.below(1 << 36) & !0xffff;
            let first = (REGIONS[i % REGIONS.len()] + offset) / CHUNK_BYTES;
            let clear = runs
                .iter()
                .all(|&(f, l)| first + len + 1 < f || f + l + 1 < first);
            if clear {
                runs.push((first, len));
                break;
            }
        }
    }
    let mut device_addr = 0x1_0000_0000u64;
    let mut chunks = Vec::with_capacity(n);
    for (first, len) in runs {
        for k in first..first + len {
            chunks.push((k, device_addr));
            device_addr += CHUNK_BYTES;
        }
    }
    chunks
}

fn build_table(chunks: &[(u64, u64)]) -> ChunkTable {
    match ChunkTable::build(CHUNK_BYTES, DEFAULT_PROBE_BOUND, chunks) {
        Ok(t) => t,
        Err(e) => panic!("building the bench table: {e}"),
    }
}

fn print_table_stats(name: &str, t: &ChunkTable) {
    let histogram = t.probe_histogram_hits();
    let longest = histogram.iter().rposition(|&c| c > 0).unwrap_or(0);
    eprintln!(
        "chunk_table {name}: {} chunks in {} slots ({} MiB), load {:.3}, multiplier {:#x}, mean probes per hit {:.3} (a random hash: {:.3}), per miss {:.3}, longest {longest}, bound {}, {} placement pass(es); hits by probes {:?}",
        t.len(),
        t.capacity(),
        (t.capacity() * 16) >> 20,
        t.load(),
        t.multiplier(),
        t.mean_probes_hit(),
        random_hash_probes_per_hit(t.load()),
        t.mean_probes_miss(),
        t.probe_bound(),
        t.rebuilds(),
        &histogram[1..=longest.max(1)],
    );
}

fn bench_lookups(c: &mut Criterion, n: usize) {
    let mut rng = Rng(0x0D96_4000 + n as u64);
    let chunks = mapped_chunks(n, &mut rng);
    let table = build_table(&chunks);
    print_table_stats(&format!("N={n}"), &table);
    let map: hashbrown::HashMap<u64, u64> = chunks.iter().copied().collect();
    let keys: Vec<u64> = (0..N_LOOKUPS)
        .map(|_| chunks[rng.below(n as u64) as usize].0)
        .collect();
    // The flat-array limit: one word per chunk over a dense range of the same length.
    let min_chunk = 0x4000_0000_0000 / CHUNK_BYTES;
    let flat: Vec<u64> = chunks.iter().map(|&(_, a)| a).collect();
    let flat_keys: Vec<u64> = (0..N_LOOKUPS)
        .map(|_| min_chunk + rng.below(n as u64))
        .collect();

    let mut group = c.benchmark_group(format!("lookup/N={n}"));
    group.throughput(Throughput::Elements(N_LOOKUPS as u64));
    group.bench_function("chunk_table", |b| {
        b.iter(|| {
            let mut sum = 0u64;
            for &k in black_box(&keys) {
                sum = sum.wrapping_add(table.lookup(k).unwrap_or(0));
            }
            black_box(sum)
        })
    });
    group.bench_function("hashbrown", |b| {
        b.iter(|| {
            let mut sum = 0u64;
            for k in black_box(&keys) {
                sum = sum.wrapping_add(map.get(k).copied().unwrap_or(0));
            }
            black_box(sum)
        })
    });
    group.bench_function("flat_array", |b| {
        b.iter(|| {
            let mut sum = 0u64;
            for &k in black_box(&flat_keys) {
                sum = sum.wrapping_add(
                    flat.get(k.wrapping_sub(min_chunk) as usize)
                        .copied()
                        .unwrap_or(0),
                );
            }
            black_box(sum)
        })
    });
    // The floor of any T2 lookup over this table: the hash and one read of the home slot's address,
    // with no key compare and no probe (wrong for the keys not on their home slot, which is why it is
    // a comparator and not a lookup). `chunk_table / table_home_slot_read` is what the compare and
    // the probes cost; `table_home_slot_read / flat_array` what the hash and the table's memory cost.
    let slots = table.slots();
    group.bench_function("table_home_slot_read", |b| {
        b.iter(|| {
            let mut sum = 0u64;
            for &k in black_box(&keys) {
                sum = sum.wrapping_add(slots.get(table.home_slot(k)).map_or(0, |s| s.device_addr));
            }
            black_box(sum)
        })
    });
    group.finish();
}

fn lookups(c: &mut Criterion) {
    bench_lookups(c, N_LARGE);
    bench_lookups(c, N_SMALL);
}

fn build_and_insert(c: &mut Criterion) {
    let mut rng = Rng(0x0D96_4001);
    let chunks = mapped_chunks(N_LARGE, &mut rng);
    let table = build_table(&chunks);
    // A newly committed page: the chunk just past the end of the first run.
    let new_chunk = (0u64..)
        .map(|i| chunks[0].0 + i)
        .find(|&k| table.lookup(k).is_none())
        .unwrap_or(0);

    let mut group = c.benchmark_group(format!("table/N={N_LARGE}"));
    group.sample_size(20);
    group.bench_function("build", |b| b.iter(|| build_table(black_box(&chunks))));
    // The same build with the multiplier the first one chose, given: what choosing it costs.
    group.bench_function("build_multiplier_given", |b| {
        b.iter(|| {
            ChunkTable::build_with_multiplier(
                CHUNK_BYTES,
                DEFAULT_PROBE_BOUND,
                black_box(&chunks),
                table.multiplier(),
            )
        })
    });
    group.bench_function("insert_one_new_chunk", |b| {
        b.iter_batched(
            || table.clone(),
            |mut t| {
                let outcome = t.insert(black_box(new_chunk), 0x9_0000_0000);
                // Returned, so the table is dropped outside the timed part.
                (t, outcome)
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

mod group {
    #![allow(
        missing_docs,
        reason = "criterion_group! declares an undocumented `pub fn benches`"
    )]
    use super::{build_and_insert, lookups};
    criterion::criterion_group!(benches, lookups, build_and_insert);
}

criterion_main!(group::benches);
