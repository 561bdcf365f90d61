//! A write-watch and an emulator's protection that toggle pages every frame, over a reservation
//! far larger than what they touch: the table follows at the cost of the pages toggled (a slot
//! a page, no build, no import), and T1/T2 hold after 10^5 random toggles, against a plain model
//! of which pages are mapped.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails by panicking"
)]

use dispatchscope_core::addr::ByteRange;
use dispatchscope_core::chunk_table::{ChunkTable, MAX_CHUNK_BYTES};
use dispatchscope_core::input::{Backing, HostProtection, Op, Reason};
use dispatchscope_core::report::EscapeClass;
use dispatchscope_core::{
    Access, AccessKind, DeviceLimits, DispatchInput, DispatchReport, Engine, Event,
};

const BASE: u64 = 0x1_0000_0000;
const PAGE: u64 = 0x1000;

fn r(start: u64, end: u64) -> ByteRange {
    ByteRange::new(start, end)
}

fn reserved(bytes: u64) -> Engine {
    let mut e = Engine::cpu(DeviceLimits::default()).unwrap();
    e.apply(&Event::Reserve {
        range: r(BASE, BASE + bytes),
        readable: true,
        writable: true,
        committed: true,
        backing: Backing::Private,
        host_base: None,
    })
    .unwrap();
    e
}

fn protect(e: &mut Engine, page: u64, protection: HostProtection) {
    let at = BASE + page * PAGE;
    e.apply(&Event::HostProtect {
        range: r(at, at + PAGE),
        protection,
    })
    .unwrap();
}

fn loads(addrs: &[u64]) -> DispatchInput {
    DispatchInput {
        program: 1,
        reasons: vec![Reason::D758],
        accesses: addrs
            .iter()
            .map(|&a| Access {
                address: Some(a),
                pc: 0x100,
                ..Access::new(AccessKind::Global, Op::Load, 4)
            })
            .collect(),
        ..DispatchInput::default()
    }
}

fn dispatch(e: &mut Engine, addrs: &[u64]) -> DispatchReport {
    e.dispatch(&loads(addrs)).unwrap()
}

#[test]
fn one_page_toggled_read_only_and_back_costs_one_slot_each_way() {
    // 1 GiB: 16,384 chunks of 64 KiB.
    let mut e = reserved(1 << 30);
    let first = dispatch(&mut e, &[]);
    let t = first.table.as_ref().unwrap();
    assert_eq!((t.chunk_bytes, t.n_chunks), (MAX_CHUNK_BYTES, 16_384));
    let page = 0x1_2345;
    protect(&mut e, page, HostProtection::Read);
    let at = BASE + page * PAGE;
    let cut = dispatch(&mut e, &[at, at + PAGE, at - 4]);
    let t = cut.table.as_ref().unwrap();
    assert_eq!(t.rebuilt, None, "no build");
    assert_eq!((t.inserted, t.removed), (0, 1), "one slot's reach changed");
    assert_eq!(t.chunk_bytes, MAX_CHUNK_BYTES, "the chunk stays 64 KiB");
    let m = cut.mappings.as_ref().unwrap();
    assert_eq!(
        (m.imports_made, m.imports_dropped),
        (0, 0),
        "the driver is not asked"
    );
    assert!(cut.accesses[0].escaped, "the read-only page escapes");
    assert_eq!(cut.escapes[0].class, EscapeClass::LeftOut);
    assert!(
        !cut.accesses[1].escaped && !cut.accesses[2].escaped,
        "its neighbours in the chunk do not"
    );
    protect(&mut e, page, HostProtection::ReadWrite);
    let back = dispatch(&mut e, &[at]);
    let t = back.table.as_ref().unwrap();
    assert_eq!((t.rebuilt.as_deref(), t.inserted, t.removed), (None, 1, 0));
    assert!(!back.accesses[0].escaped);
    let m = back.mappings.as_ref().unwrap();
    assert_eq!((m.imports_made, m.imports_dropped), (0, 0));
    assert_eq!(m.pieces.len(), 1, "the import is one piece again");
    // A toggle undone before the next dispatch costs nothing at all.
    protect(&mut e, page, HostProtection::Read);
    protect(&mut e, page, HostProtection::ReadWrite);
    let t = dispatch(&mut e, &[]).table.unwrap();
    assert_eq!((t.inserted, t.removed), (0, 0));
}

#[test]
fn write_watch_guards_cost_the_table_nothing() {
    let mut e = reserved(64 << 20);
    dispatch(&mut e, &[]);
    for page in (0..16_384).step_by(7) {
        let at = BASE + page * PAGE;
        e.apply(&Event::Guard {
            range: r(at, at + PAGE),
        })
        .unwrap();
    }
    let t = dispatch(&mut e, &[BASE + 7 * PAGE]).table.unwrap();
    assert_eq!((t.rebuilt, t.inserted, t.removed), (None, 0, 0));
}

/// xorshift64*: the test's own random numbers, the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

#[test]
fn t1_t2_hold_after_100_000_random_toggles() {
    const PAGES: u64 = 16_384; // 64 MiB
    let mut e = reserved(PAGES * PAGE);
    dispatch(&mut e, &[]);
    let mut read_only = vec![false; PAGES as usize];
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut builds = None;
    for round in 0..100 {
        for _ in 0..1_000 {
            // Mostly pages near others already toggled, so that runs of them form and split.
            let page = if rng.next() % 4 == 0 {
                rng.next() % PAGES
            } else {
                (rng.next() % 64) * 256 + rng.next() % 8
            };
            let ro = rng.next() % 2 == 0;
            read_only[page as usize] = ro;
            let p = if ro {
                HostProtection::Read
            } else {
                HostProtection::ReadWrite
            };
            protect(&mut e, page, p);
        }
        let probes: Vec<u64> = (0..16)
            .map(|_| BASE + (rng.next() % PAGES) * PAGE)
            .collect();
        let report = dispatch(&mut e, &probes);
        let m = report.mappings.as_ref().unwrap();
        let t = report.table.as_ref().unwrap();
        // T1: the chunk stays 64 KiB (one import, cut by pages), and nothing is built again.
        assert_eq!(t.chunk_bytes, MAX_CHUNK_BYTES, "round {round}");
        assert_eq!(
            *builds.get_or_insert(t.builds_total),
            t.builds_total,
            "round {round}"
        );
        // M3: the pieces are the model's runs of read-write pages.
        let mut want = Vec::new();
        let mut p = 0;
        while p < PAGES {
            if read_only[p as usize] {
                p += 1;
                continue;
            }
            let start = p;
            while p < PAGES && !read_only[p as usize] {
                p += 1;
            }
            want.push(r(BASE + start * PAGE, BASE + p * PAGE));
        }
        let got: Vec<ByteRange> = m.pieces.iter().map(|p| p.guest).collect();
        assert_eq!(got, want, "round {round}");
        // T1/T2 through the table itself: every page is reached exactly when the model maps it,
        // at its piece's device address, within the bound.
        let table = e.table().unwrap();
        for page in 0..PAGES {
            let at = BASE + page * PAGE + 8;
            let piece = m.pieces.iter().find(|p| p.guest.contains(at));
            assert_eq!(
                table.device_from_guest(at),
                piece.map(|p| p.device_base + (at - p.guest.start)),
                "round {round}, page {page}"
            );
            if let Some(s) = table.slot_of(at) {
                let home = table.home_slot(table.slots()[s].chunk());
                let distance = s.wrapping_sub(home) & (table.capacity() - 1);
                assert!(distance < table.probe_bound() as usize);
            }
        }
        // The statistics kept as the table changed equal a count over every slot.
        let counted = ChunkTable::from_slots(
            table.chunk_bytes(),
            table.probe_bound(),
            table.multiplier(),
            table.slots(),
        )
        .unwrap();
        assert_eq!(table.probe_histogram_hits(), counted.probe_histogram_hits());
        assert!((table.mean_probes_miss() - counted.mean_probes_miss()).abs() < 1e-9);
        assert_eq!(t.probe_histogram, counted.probe_histogram_hits());
    }
}
