//! Random valid samples of any size, for tests, benches, fuzzing seeds and the differential runs
//! of a device backend against the CPU reference.
//!
//! Every sample it makes passes validation: slots lie in reservations, accesses lie in their slots
//! or in mapped or deliberately unmapped guest memory, stores carry the right number of values.
//! It is deterministic for a seed (a small xorshift, no global state) and never touches files.

use crate::sample::{Contents, Provenance, SAMPLE_FORMAT, SAMPLE_VERSION, Sample, Step};
use dispatchscope_core::addr::ByteRange;
use dispatchscope_core::input::{
    Access, AccessKind, BaseSource, DeviceLimits, DispatchInput, Op, Reason, Slot,
};
use dispatchscope_core::input::{Backing, Event, HostProtection};

/// How big a sample to make.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GenConfig {
    /// Dispatches.
    pub dispatches: usize,
    /// Slots per dispatch (at most).
    pub slots: usize,
    /// Accesses per dispatch.
    pub accesses: usize,
    /// Reservations.
    pub reservations: usize,
    /// Pages per reservation.
    pub pages_per_reservation: u64,
    /// Bytes of initial contents in all (spread over the reservations' pages).
    pub contents_bytes: u64,
    /// Memory events between dispatches (at most).
    pub events_between: usize,
}

impl Default for GenConfig {
    fn default() -> Self {
        Self {
            dispatches: 4,
            slots: 6,
            accesses: 32,
            reservations: 3,
            pages_per_reservation: 16,
            contents_bytes: 4096,
            events_between: 2,
        }
    }
}

/// A tiny deterministic generator (xorshift64*).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A value in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }

    /// True with probability `p_percent` / 100.
    pub fn chance(&mut self, p_percent: u64) -> bool {
        self.below(100) < p_percent
    }
}

const PAGE: u64 = 0x1000;

/// Makes a random valid sample.
pub fn random_sample(seed: u64, cfg: GenConfig) -> Sample {
    let mut rng = Rng::new(seed);
    let mut steps = Vec::new();
    let mut reservations = Vec::new();
    for r in 0..cfg.reservations.max(1) {
        let base = 0x10_0000_0000 + (r as u64) * 0x1_0000_0000 + rng.below(16) * 0x10_0000;
        let size = cfg.pages_per_reservation.max(1) * PAGE;
        reservations.push(ByteRange::new(base, base + size));
        steps.push(Step::Event(Event::Reserve {
            range: ByteRange::new(base, base + size),
            readable: true,
            writable: true,
            committed: rng.chance(80),
            backing: Backing::Private,
            host_base: None,
        }));
        // A few pages in other states, so that M3 has something to leave out.
        let n = cfg.pages_per_reservation.max(1);
        if n > 4 {
            let p = base + rng.below(n) * PAGE;
            steps.push(Step::Event(Event::Protect {
                range: ByteRange::new(p, p + PAGE),
                readable: true,
                writable: false,
            }));
            let p = base + rng.below(n) * PAGE;
            steps.push(Step::Event(Event::SetBacking {
                range: ByteRange::new(p, p + PAGE),
                backing: Backing::Shared,
            }));
        }
    }
    // Contents, in page-sized pieces at random places.
    let mut contents = Vec::new();
    let mut left = cfg.contents_bytes;
    while left > 0 {
        let r = reservations[rng.below(reservations.len() as u64) as usize];
        let len = left.min(r.size_bytes()).min(1 << 20);
        let start = r.start + rng.below((r.size_bytes() - len) / 4 + 1) * 4;
        let mut bytes = vec![0u8; len as usize];
        for chunk in bytes.chunks_mut(8) {
            let v = rng.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
        contents.push(Contents {
            address: start,
            bytes,
        });
        left -= len;
    }
    for d in 0..cfg.dispatches {
        for _ in 0..rng.below(cfg.events_between as u64 + 1) {
            let r = reservations[rng.below(reservations.len() as u64) as usize];
            let p = r.start + rng.below(r.size_bytes() / PAGE) * PAGE;
            let range = ByteRange::new(p, p + PAGE);
            steps.push(Step::Event(match rng.below(5) {
                0 => Event::Commit { range },
                1 => Event::Decommit { range },
                2 => Event::Protect {
                    range,
                    readable: rng.chance(70),
                    writable: rng.chance(70),
                },
                3 => Event::HostProtect {
                    range,
                    protection: HostProtection::ReadWrite,
                },
                _ => Event::Write {
                    address: p + rng.below(PAGE / 4) * 4,
                    bytes: rng.next_u64().to_le_bytes()[..4].to_vec(),
                },
            }));
        }
        steps.push(Step::Dispatch(Box::new(random_dispatch(
            &mut rng,
            d,
            &reservations,
            cfg,
        ))));
    }
    Sample {
        format: SAMPLE_FORMAT.into(),
        version: SAMPLE_VERSION,
        title: format!("generated sample, seed {seed}"),
        description: format!("random valid sample: {cfg:?}"),
        provenance: Provenance {
            records: Vec::new(),
            stated: Vec::new(),
            ours: vec!["everything: generated".into()],
        },
        device: DeviceLimits::default(),
        contents,
        steps,
        programs: Vec::new(),
    }
}

fn random_dispatch(
    rng: &mut Rng,
    d: usize,
    reservations: &[ByteRange],
    cfg: GenConfig,
) -> DispatchInput {
    let device_addressed = rng.chance(60);
    let mut slots = Vec::new();
    let n_slots = rng.below(cfg.slots as u64 + 1) as usize;
    let home = reservations[rng.below(reservations.len() as u64) as usize];
    for i in 0..n_slots {
        let size = 16 * (1 + rng.below(32));
        let base = home.start + 16 * rng.below((home.size_bytes().min(0x4000) - size) / 16);
        let mut s = Slot::new(i as u32, base, size, rng.chance(50));
        s.resolved = !device_addressed || rng.chance(70);
        if !s.resolved {
            s.written = false;
        }
        if i > 0 && rng.chance(10) {
            let of = rng.below(i as u64) as usize;
            let t: &Slot = &slots[of];
            if t.alias_of.is_none()
                && t.resolved == s.resolved
                && t.base_source == BaseSource::Descriptor
            {
                s.base = t.base;
                s.size_bytes = t.size_bytes;
                s.alias_of = Some(t.slot);
            }
        }
        slots.push(s);
    }
    let mut accesses = Vec::new();
    for _ in 0..cfg.accesses {
        let lane = rng.below(64) as u32;
        let size = [1u32, 2, 4, 4, 4, 8, 16][rng.below(7) as usize];
        let op = if rng.chance(40) { Op::Store } else { Op::Load };
        let values = |rng: &mut Rng| -> Vec<u32> {
            if op == Op::Store {
                (0..size.div_ceil(4))
                    .map(|_| rng.next_u64() as u32)
                    .collect()
            } else {
                Vec::new()
            }
        };
        let mut a = Access {
            workgroup: 0,
            wave: lane / 32,
            lane: lane % 32,
            pc: 0x4000_0000_0000 + 0x10 * rng.below(64),
            kind: AccessKind::UntypedBuffer,
            op,
            address: None,
            slot: None,
            offset: None,
            index: None,
            size_bytes: size,
            values: Vec::new(),
        };
        let pick = rng.below(10);
        if !slots.is_empty() && (pick < 5 || !device_addressed) {
            let s = &slots[rng.below(slots.len() as u64) as usize];
            a.slot = Some(s.slot);
            a.offset = Some(rng.below(s.size_bytes - u64::from(size) + 1));
            if op == Op::Store && !s.written {
                a.op = Op::Load;
            }
        } else if device_addressed && pick < 8 {
            a.kind = if rng.chance(80) {
                AccessKind::Global
            } else {
                AccessKind::Flat
            };
            let r = reservations[rng.below(reservations.len() as u64) as usize];
            // Mostly inside a reservation; now and then just past it or nowhere.
            let addr = match rng.below(20) {
                0 => r.end + rng.below(PAGE),
                1 => 0x7_0000_0000 + rng.below(PAGE),
                _ => r.start + rng.below(r.size_bytes() - u64::from(size)),
            };
            a.address = Some(addr);
        } else if device_addressed && pick < 9 {
            a.kind = AccessKind::Lds;
            a.offset = Some(rng.below(1024) * 4);
        } else {
            a.kind = AccessKind::Scratch;
            a.offset = Some(rng.below(256) * 4);
        }
        if a.op == Op::Store {
            a.values = values(rng);
        }
        accesses.push(a);
    }
    DispatchInput {
        kind: dispatchscope_core::input::DispatchKind::Compute,
        program: 0x4000_0000_0000 + (d as u64) * 0x1000,
        label: format!("generated dispatch {d}"),
        slots,
        push: Vec::new(),
        reasons: if device_addressed {
            vec![Reason::D753]
        } else {
            Vec::new()
        },
        page_buffer: None,
        accesses,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_samples_are_valid_and_run() {
        for seed in 0..200 {
            let s = random_sample(seed, GenConfig::default());
            let reports = s.run().unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            assert_eq!(reports.len(), 4);
        }
    }

    #[test]
    fn same_seed_same_sample() {
        assert_eq!(
            random_sample(7, GenConfig::default()),
            random_sample(7, GenConfig::default())
        );
    }
}
