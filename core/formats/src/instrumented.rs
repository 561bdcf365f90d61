//! The compact binary record of an instrumented pass's report section
//! ([`InstrumentedReport`], issue 14): what a capture's DISPATCH record keeps instead of the
//! section's JSON ([`crate::session::DispatchRecord::to_payload`]).
//!
//! The section's size is bounded by the program's sites and the two logs' capacities, never by its
//! lanes; this record keeps it in columns of fixed-width little-endian values (one column a field,
//! one row a site, escape or captured access), which is about a tenth of its JSON and is read
//! without a parser. Nothing here runs the engine or touches a file.
//!
//! # Byte layout, version 2 (version 1 is the same without the flags and the heat map)
//! All integers little-endian; `uN` is N bits; a column of `n` rows is `n` values back to back.
//!
//! | bytes | field |
//! |---|---|
//! | 4 | magic `DSIR` |
//! | u16 | version ([`VERSION`], 2; 1 is read too) |
//! | u16 | flags: bit 0, a heat map follows the values (version 1: 0) |
//! | u32 ×2 | `grid` (width, height) |
//! | u64 | `lanes` |
//! | u64 | `workgroups` |
//! | u64 ×9 | `counters`: guest, lds, scratch, bound, lookups, hits, misses, escapes, stores_marked |
//! | u64 | `escapes_not_logged` |
//! | u64 | `captured_not_logged` |
//! | u8 | `control`: 0 fired, 1 not fired |
//! | u8 ×3 | reserved, 0 |
//! | u32 ×5 | rows: histogram buckets `h`, sites `s`, escapes `e`, captured accesses `c`, captured value words `v` |
//! | u64 ×h | `probe_histogram` |
//! | sites, `s` rows | u32 site · u64 pc · u8 kind · u8 op · u32 size_bytes · u64 accesses · u64 escapes · u64 lookups · u64 probes_sum · u32 probes_max |
//! | escapes, `e` rows | u32 workgroup · u32 wave · u32 lane · u32 pixel x · u32 pixel y · u32 site · u64 pc · u64 address · u32 size_bytes · u8 op · u32 escaped_bytes · u8 class · u8 reason · u8 nearest flags (bit 0 below, bit 1 above) · u64 below start · u64 below end · u64 above start · u64 above end |
//! | captured, `c` rows | u32 workgroup · u32 wave · u32 lane · u32 pixel x · u32 pixel y · u32 site · u64 pc · u8 op · u8 route · u32 route holder · u64 route offset or address · u8 has slot · u32 slot · u64 slot offset · u32 size_bytes · u32 escaped_bytes · u32 value words |
//! | u32 ×v | every captured access's values, in row order |
//! | heat map, when flagged | u32 scale · u32 cells x · u32 cells y · u64 ×n escapes · u64 ×n extra probes (`n = x · y`, at most 32 · 32) |
//!
//! Codes: kind 0 global, 1 flat, 2 scalar, 3 untyped-buffer, 4 format-buffer, 5 ray-intersection,
//! 6 lds, 7 scratch; op 0 load, 1 store; class 0 no-reservation, 1 not-readable, 2 left-out,
//! 3 dropped, 4 probe-bound; reason 0 none, 1 not-committed, 2 not-private, 3 not-read-write; route
//! 0 bound (holder, offset), 1 device (address), 2 lds (offset), 3 scratch (offset), 4 not-run. A
//! field a row does not use is 0. The value words of a row sum to `v`, and nothing follows them
//! but the heat map.
//!
//! Reading ([`decode`]) checks every length against the bytes left before it allocates, every
//! code against its table, and the totals; a bad record is a named [`InstrumentedError`], never a
//! panic (fuzzed by `core/fuzz/fuzz_targets/instrumented_record.rs`).

use thiserror::Error;

use dispatchscope_core::addr::ByteRange;
use dispatchscope_core::input::Op;
use dispatchscope_core::report::{
    CapturedAccess, ControlStatus, EscapeClass, HeatMap, InstrumentCounters, InstrumentedReport,
    LeftOutReason, LoggedEscape, SiteReport,
};

use crate::bytes::take_at;
// The access kinds, ops and routes by the codes every row encoding of this crate shares.
use crate::codes::{KINDS, kind_code, op_code, route_of_parts, route_parts};

/// The record's first four bytes.
pub const MAGIC: [u8; 4] = *b"DSIR";
/// The layout version this module writes and reads (version 1 is read too:
/// [`crate::legacy::instrumented_v1`]).
pub use crate::versions::INSTRUMENTED_VERSION as VERSION;

/// The flag bit saying a heat map follows.
const FLAG_HEAT: u16 = 1;

/// Bytes of the fixed header before the columns.
pub const HEADER_BYTES: usize = 4 + 2 + 2 + 8 + 8 + 8 + 9 * 8 + 8 + 8 + 4 + 5 * 4;
/// Bytes of one site row.
pub const SITE_ROW_BYTES: usize = 4 + 8 + 1 + 1 + 4 + 8 + 8 + 8 + 8 + 4;
/// Bytes of one escape row.
pub const ESCAPE_ROW_BYTES: usize = 6 * 4 + 8 + 8 + 4 + 1 + 4 + 1 + 1 + 1 + 4 * 8;
/// Bytes of one captured-access row (its values apart).
pub const CAPTURED_ROW_BYTES: usize = 6 * 4 + 8 + 1 + 1 + 4 + 8 + 1 + 4 + 8 + 4 + 4 + 4;

/// Why bytes are not an instrumented record.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum InstrumentedError {
    /// The first four bytes are not [`MAGIC`].
    #[error("an instrumented record starts with {MAGIC:?}, not {found:02x?}")]
    BadMagic {
        /// What was there.
        found: Vec<u8>,
    },
    /// Flags this build does not know, or flags in a version 1 record.
    #[error("instrumented record version {version} with flags {flags:#06x}")]
    Flags {
        /// The record's version.
        version: u16,
        /// Its flags.
        flags: u16,
    },
    /// A heat map whose cells do not match its counts, or more cells than a heat map has.
    #[error(
        "instrumented record: a heat map of {cells:?} cells with {escapes} escape and {extra_probes} probe counts"
    )]
    HeatCells {
        /// Cells a row and rows.
        cells: [u32; 2],
        /// Escape counts given.
        escapes: usize,
        /// Probe counts given.
        extra_probes: usize,
    },
    /// A version this build does not read.
    #[error("instrumented record version {found}; this build reads version {VERSION}")]
    Version {
        /// The record's version.
        found: u16,
    },
    /// Fewer bytes than a part needs.
    #[error(
        "the instrumented record is cut short in {part}: it needs {need} bytes at byte {at}, {have} are left"
    )]
    Truncated {
        /// The part being read.
        part: &'static str,
        /// Where it starts.
        at: usize,
        /// Bytes it needs.
        need: u64,
        /// Bytes left.
        have: usize,
    },
    /// A code not in its table.
    #[error("instrumented record: {column} of row {row} is {value}, not a known code")]
    BadCode {
        /// The column.
        column: &'static str,
        /// The row.
        row: usize,
        /// The value.
        value: u8,
    },
    /// The captured rows' value words do not sum to the header's count.
    #[error(
        "instrumented record: the captured accesses name {named} value words, the header says {header}"
    )]
    ValueCount {
        /// What the rows name.
        named: u64,
        /// What the header says.
        header: u32,
    },
    /// Bytes after the last column.
    #[error("instrumented record: {extra} bytes after its last column")]
    Trailing {
        /// How many.
        extra: usize,
    },
    /// A count too large for the layout's u32 row counts (the writer refuses it).
    #[error("instrumented record: {what} has {n} rows, more than a u32 counts")]
    TooMany {
        /// The column group.
        what: &'static str,
        /// Its rows.
        n: usize,
    },
}

const CLASSES: [EscapeClass; 5] = [
    EscapeClass::NoReservation,
    EscapeClass::NotReadable,
    EscapeClass::LeftOut,
    EscapeClass::Dropped,
    EscapeClass::ProbeBound,
];

const REASONS: [LeftOutReason; 3] = [
    LeftOutReason::NotCommitted,
    LeftOutReason::NotPrivate,
    LeftOutReason::NotReadWrite,
];

fn count(what: &'static str, n: usize) -> Result<u32, InstrumentedError> {
    u32::try_from(n).map_err(|_| InstrumentedError::TooMany { what, n })
}

/// Writes `section` in the layout above. Errs only when a column has more rows than a u32 counts.
pub fn encode(section: &InstrumentedReport) -> Result<Vec<u8>, InstrumentedError> {
    let s = section;
    let n_values: usize = s.captured.iter().map(|c| c.values.len()).sum();
    let (h, ns, ne, nc, nv) = (
        count("probe_histogram", s.probe_histogram.len())?,
        count("sites", s.sites.len())?,
        count("escapes", s.escapes.len())?,
        count("captured", s.captured.len())?,
        count("captured values", n_values)?,
    );
    let mut o = Vec::with_capacity(
        HEADER_BYTES
            + 8 * s.probe_histogram.len()
            + SITE_ROW_BYTES * s.sites.len()
            + ESCAPE_ROW_BYTES * s.escapes.len()
            + CAPTURED_ROW_BYTES * s.captured.len()
            + 4 * n_values,
    );
    let u8_ = |o: &mut Vec<u8>, v: u8| o.push(v);
    let u16_ = |o: &mut Vec<u8>, v: u16| o.extend_from_slice(&v.to_le_bytes());
    let u32_ = |o: &mut Vec<u8>, v: u32| o.extend_from_slice(&v.to_le_bytes());
    let u64_ = |o: &mut Vec<u8>, v: u64| o.extend_from_slice(&v.to_le_bytes());
    o.extend_from_slice(&MAGIC);
    u16_(&mut o, VERSION);
    u16_(&mut o, if s.heat.is_some() { FLAG_HEAT } else { 0 });
    u32_(&mut o, s.grid[0]);
    u32_(&mut o, s.grid[1]);
    u64_(&mut o, s.lanes);
    u64_(&mut o, s.workgroups);
    let c = &s.counters;
    for v in [
        c.guest,
        c.lds,
        c.scratch,
        c.bound,
        c.lookups,
        c.hits,
        c.misses,
        c.escapes,
        c.stores_marked,
    ] {
        u64_(&mut o, v);
    }
    u64_(&mut o, s.escapes_not_logged);
    u64_(&mut o, s.captured_not_logged);
    u8_(
        &mut o,
        match s.control {
            ControlStatus::Fired => 0,
            ControlStatus::NotFired => 1,
        },
    );
    o.extend_from_slice(&[0, 0, 0]);
    for n in [h, ns, ne, nc, nv] {
        u32_(&mut o, n);
    }
    for &b in &s.probe_histogram {
        u64_(&mut o, b);
    }
    // Columns: one field of every row, then the next field.
    macro_rules! column {
        ($rows:expr, $put:ident, |$r:ident| $v:expr) => {
            for $r in $rows {
                $put(&mut o, $v);
            }
        };
    }
    let sites = &s.sites;
    column!(sites, u32_, |r| r.site);
    column!(sites, u64_, |r| r.pc);
    column!(sites, u8_, |r| kind_code(r.kind));
    column!(sites, u8_, |r| op_code(r.op));
    column!(sites, u32_, |r| r.size_bytes);
    column!(sites, u64_, |r| r.accesses);
    column!(sites, u64_, |r| r.escapes);
    column!(sites, u64_, |r| r.lookups);
    column!(sites, u64_, |r| r.probes_sum);
    column!(sites, u32_, |r| r.probes_max);
    let esc = &s.escapes;
    column!(esc, u32_, |r| r.workgroup);
    column!(esc, u32_, |r| r.wave);
    column!(esc, u32_, |r| r.lane);
    column!(esc, u32_, |r| r.pixel[0]);
    column!(esc, u32_, |r| r.pixel[1]);
    column!(esc, u32_, |r| r.site);
    column!(esc, u64_, |r| r.pc);
    column!(esc, u64_, |r| r.address);
    column!(esc, u32_, |r| r.size_bytes);
    column!(esc, u8_, |r| op_code(r.op));
    column!(esc, u32_, |r| r.escaped_bytes);
    column!(
        esc,
        u8_,
        |r| CLASSES.iter().position(|x| *x == r.class).unwrap_or(0) as u8
    );
    column!(esc, u8_, |r| r
        .reason
        .and_then(|x| REASONS.iter().position(|y| *y == x))
        .map_or(0, |i| i as u8 + 1));
    column!(esc, u8_, |r| u8::from(r.nearest_below.is_some())
        | u8::from(r.nearest_above.is_some()) << 1);
    column!(esc, u64_, |r| r.nearest_below.map_or(0, |b| b.start));
    column!(esc, u64_, |r| r.nearest_below.map_or(0, |b| b.end));
    column!(esc, u64_, |r| r.nearest_above.map_or(0, |b| b.start));
    column!(esc, u64_, |r| r.nearest_above.map_or(0, |b| b.end));
    let cap = &s.captured;
    column!(cap, u32_, |r| r.workgroup);
    column!(cap, u32_, |r| r.wave);
    column!(cap, u32_, |r| r.lane);
    column!(cap, u32_, |r| r.pixel[0]);
    column!(cap, u32_, |r| r.pixel[1]);
    column!(cap, u32_, |r| r.site);
    column!(cap, u64_, |r| r.pc);
    column!(cap, u8_, |r| op_code(r.op));
    column!(cap, u8_, |r| route_parts(&r.route).0);
    column!(cap, u32_, |r| route_parts(&r.route).1);
    column!(cap, u64_, |r| route_parts(&r.route).2);
    column!(cap, u8_, |r| u8::from(r.slot.is_some()));
    column!(cap, u32_, |r| r.slot.map_or(0, |s| s.0));
    column!(cap, u64_, |r| r.slot.map_or(0, |s| s.1));
    column!(cap, u32_, |r| r.size_bytes);
    column!(cap, u32_, |r| r.escaped_bytes);
    column!(cap, u32_, |r| r.values.len() as u32);
    for r in cap {
        for &v in &r.values {
            u32_(&mut o, v);
        }
    }
    if let Some(h) = &s.heat {
        let n = h.cells[0] as usize * h.cells[1] as usize;
        if h.escapes.len() != n || h.extra_probes.len() != n {
            return Err(InstrumentedError::HeatCells {
                cells: h.cells,
                escapes: h.escapes.len(),
                extra_probes: h.extra_probes.len(),
            });
        }
        u32_(&mut o, h.scale);
        u32_(&mut o, h.cells[0]);
        u32_(&mut o, h.cells[1]);
        for &v in h.escapes.iter().chain(&h.extra_probes) {
            u64_(&mut o, v);
        }
    }
    Ok(o)
}

/// A bounds-checked reader over the record's bytes.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, part: &'static str, need: u64) -> Result<&'a [u8], InstrumentedError> {
        let (at, have) = (self.at, self.bytes.len() - self.at);
        take_at(self.bytes, &mut self.at, need).ok_or(InstrumentedError::Truncated {
            part,
            at,
            need,
            have,
        })
    }

    fn u8(&mut self, part: &'static str) -> Result<u8, InstrumentedError> {
        Ok(self.take(part, 1)?.first().copied().unwrap_or(0))
    }

    fn u16(&mut self, part: &'static str) -> Result<u16, InstrumentedError> {
        let b = self.take(part, 2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self, part: &'static str) -> Result<u32, InstrumentedError> {
        let b = self.take(part, 4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self, part: &'static str) -> Result<u64, InstrumentedError> {
        let b = self.take(part, 8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    /// A column of `n` values of `width` bytes, checked against the bytes left first.
    fn column<T>(
        &mut self,
        part: &'static str,
        n: u32,
        width: usize,
        read: impl Fn(&[u8]) -> T,
    ) -> Result<Vec<T>, InstrumentedError> {
        let bytes = self.take(part, u64::from(n) * width as u64)?;
        Ok(bytes.chunks_exact(width).map(read).collect())
    }

    fn c8(&mut self, part: &'static str, n: u32) -> Result<Vec<u8>, InstrumentedError> {
        self.column(part, n, 1, |b| b[0])
    }

    fn c32(&mut self, part: &'static str, n: u32) -> Result<Vec<u32>, InstrumentedError> {
        self.column(part, n, 4, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn c64(&mut self, part: &'static str, n: u32) -> Result<Vec<u64>, InstrumentedError> {
        self.column(part, n, 8, |b| {
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            u64::from_le_bytes(a)
        })
    }
}

fn code<T: Copy>(
    table: &[T],
    column: &'static str,
    row: usize,
    value: u8,
) -> Result<T, InstrumentedError> {
    table
        .get(value as usize)
        .copied()
        .ok_or(InstrumentedError::BadCode { column, row, value })
}

fn op_of(column: &'static str, row: usize, value: u8) -> Result<Op, InstrumentedError> {
    code(&[Op::Load, Op::Store], column, row, value)
}

/// Reads a record [`encode`] wrote. Every bad byte is a named error; it never panics, and it
/// allocates no more than the bytes given can fill.
pub fn decode(bytes: &[u8]) -> Result<InstrumentedReport, InstrumentedError> {
    let mut r = Cursor { bytes, at: 0 };
    let magic = r
        .take("the magic", 4)
        .map_err(|_| InstrumentedError::BadMagic {
            found: bytes.get(..bytes.len().min(4)).unwrap_or_default().to_vec(),
        })?;
    if magic != MAGIC {
        return Err(InstrumentedError::BadMagic {
            found: magic.to_vec(),
        });
    }
    let version = r.u16("the version")?;
    if !crate::legacy::instrumented_v1::reads_version(version) {
        return Err(InstrumentedError::Version { found: version });
    }
    let flags = r.u16("the header")?;
    if !crate::legacy::instrumented_v1::flags_allowed(version, flags, FLAG_HEAT) {
        return Err(InstrumentedError::Flags { version, flags });
    }
    let grid = [r.u32("the header")?, r.u32("the header")?];
    let lanes = r.u64("the header")?;
    let workgroups = r.u64("the header")?;
    let mut c = [0u64; 9];
    for v in &mut c {
        *v = r.u64("the counters")?;
    }
    let counters = InstrumentCounters {
        guest: c[0],
        lds: c[1],
        scratch: c[2],
        bound: c[3],
        lookups: c[4],
        hits: c[5],
        misses: c[6],
        escapes: c[7],
        stores_marked: c[8],
    };
    let escapes_not_logged = r.u64("the header")?;
    let captured_not_logged = r.u64("the header")?;
    let control = code(
        &[ControlStatus::Fired, ControlStatus::NotFired],
        "control",
        0,
        r.u8("the header")?,
    )?;
    r.take("the header", 3)?;
    let mut n = [0u32; 5];
    for v in &mut n {
        *v = r.u32("the row counts")?;
    }
    let [h, ns, ne, nc, nv] = n;
    let probe_histogram = r.c64("probe_histogram", h)?;

    let site = r.c32("sites.site", ns)?;
    let pc = r.c64("sites.pc", ns)?;
    let kind = r.c8("sites.kind", ns)?;
    let op = r.c8("sites.op", ns)?;
    let size = r.c32("sites.size_bytes", ns)?;
    let accesses = r.c64("sites.accesses", ns)?;
    let escapes = r.c64("sites.escapes", ns)?;
    let lookups = r.c64("sites.lookups", ns)?;
    let probes_sum = r.c64("sites.probes_sum", ns)?;
    let probes_max = r.c32("sites.probes_max", ns)?;
    let mut sites = Vec::with_capacity(ns as usize);
    for i in 0..ns as usize {
        sites.push(SiteReport {
            site: site[i],
            pc: pc[i],
            kind: code(&KINDS, "sites.kind", i, kind[i])?,
            op: op_of("sites.op", i, op[i])?,
            size_bytes: size[i],
            accesses: accesses[i],
            escapes: escapes[i],
            lookups: lookups[i],
            probes_sum: probes_sum[i],
            probes_max: probes_max[i],
        });
    }

    let wg = r.c32("escapes.workgroup", ne)?;
    let wave = r.c32("escapes.wave", ne)?;
    let lane = r.c32("escapes.lane", ne)?;
    let px = r.c32("escapes.pixel", ne)?;
    let py = r.c32("escapes.pixel", ne)?;
    let esite = r.c32("escapes.site", ne)?;
    let epc = r.c64("escapes.pc", ne)?;
    let addr = r.c64("escapes.address", ne)?;
    let esize = r.c32("escapes.size_bytes", ne)?;
    let eop = r.c8("escapes.op", ne)?;
    let ebytes = r.c32("escapes.escaped_bytes", ne)?;
    let class = r.c8("escapes.class", ne)?;
    let reason = r.c8("escapes.reason", ne)?;
    let near = r.c8("escapes.nearest", ne)?;
    let bs = r.c64("escapes.nearest_below", ne)?;
    let be = r.c64("escapes.nearest_below", ne)?;
    let as_ = r.c64("escapes.nearest_above", ne)?;
    let ae = r.c64("escapes.nearest_above", ne)?;
    let mut logged = Vec::with_capacity(ne as usize);
    for i in 0..ne as usize {
        if near[i] > 3 {
            return Err(InstrumentedError::BadCode {
                column: "escapes.nearest",
                row: i,
                value: near[i],
            });
        }
        logged.push(LoggedEscape {
            workgroup: wg[i],
            wave: wave[i],
            lane: lane[i],
            pixel: [px[i], py[i]],
            site: esite[i],
            pc: epc[i],
            address: addr[i],
            size_bytes: esize[i],
            op: op_of("escapes.op", i, eop[i])?,
            escaped_bytes: ebytes[i],
            class: code(&CLASSES, "escapes.class", i, class[i])?,
            reason: match reason[i] {
                0 => None,
                v => Some(code(&REASONS, "escapes.reason", i, v - 1)?),
            },
            nearest_below: (near[i] & 1 != 0).then(|| ByteRange::new(bs[i], be[i])),
            nearest_above: (near[i] & 2 != 0).then(|| ByteRange::new(as_[i], ae[i])),
        });
    }

    let cwg = r.c32("captured.workgroup", nc)?;
    let cwave = r.c32("captured.wave", nc)?;
    let clane = r.c32("captured.lane", nc)?;
    let cpx = r.c32("captured.pixel", nc)?;
    let cpy = r.c32("captured.pixel", nc)?;
    let csite = r.c32("captured.site", nc)?;
    let cpc = r.c64("captured.pc", nc)?;
    let cop = r.c8("captured.op", nc)?;
    let route = r.c8("captured.route", nc)?;
    let holder = r.c32("captured.route_holder", nc)?;
    let roff = r.c64("captured.route_offset", nc)?;
    let has_slot = r.c8("captured.has_slot", nc)?;
    let slot = r.c32("captured.slot", nc)?;
    let soff = r.c64("captured.slot_offset", nc)?;
    let csize = r.c32("captured.size_bytes", nc)?;
    let cesc = r.c32("captured.escaped_bytes", nc)?;
    let nvals = r.c32("captured.value_words", nc)?;
    let named: u64 = nvals.iter().map(|&x| u64::from(x)).sum();
    if named != u64::from(nv) {
        return Err(InstrumentedError::ValueCount { named, header: nv });
    }
    let values = r.c32("captured values", nv)?;
    let mut captured = Vec::with_capacity(nc as usize);
    let mut at = 0usize;
    for i in 0..nc as usize {
        let route =
            route_of_parts(route[i], holder[i], roff[i]).ok_or(InstrumentedError::BadCode {
                column: "captured.route",
                row: i,
                value: route[i],
            })?;
        let slot = match has_slot[i] {
            0 => None,
            1 => Some((slot[i], soff[i])),
            value => {
                return Err(InstrumentedError::BadCode {
                    column: "captured.has_slot",
                    row: i,
                    value,
                });
            }
        };
        let end = at + nvals[i] as usize;
        captured.push(CapturedAccess {
            workgroup: cwg[i],
            wave: cwave[i],
            lane: clane[i],
            pixel: [cpx[i], cpy[i]],
            site: csite[i],
            pc: cpc[i],
            op: op_of("captured.op", i, cop[i])?,
            route,
            slot,
            size_bytes: csize[i],
            values: values.get(at..end).unwrap_or_default().to_vec(),
            escaped_bytes: cesc[i],
        });
        at = end;
    }
    let heat = if flags & FLAG_HEAT != 0 {
        let scale = r.u32("the heat map")?;
        let cells = [r.u32("the heat map")?, r.u32("the heat map")?];
        let n = u64::from(cells[0]) * u64::from(cells[1]);
        let side = u64::from(dispatchscope_core::instrument::HEAT_SIDE);
        if n > side * side || cells[0] == 0 || cells[1] == 0 {
            return Err(InstrumentedError::HeatCells {
                cells,
                escapes: 0,
                extra_probes: 0,
            });
        }
        Some(HeatMap {
            scale,
            cells,
            escapes: r.c64("heat.escapes", n as u32)?,
            extra_probes: r.c64("heat.extra_probes", n as u32)?,
        })
    } else {
        None
    };
    let extra = bytes.len() - r.at;
    if extra != 0 {
        return Err(InstrumentedError::Trailing { extra });
    }
    Ok(InstrumentedReport {
        grid,
        lanes,
        workgroups,
        counters,
        probe_histogram,
        sites,
        escapes: logged,
        escapes_not_logged,
        captured,
        captured_not_logged,
        control,
        heat,
    })
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::expect_used,
        reason = "tests: a panic is the test failing"
    )]

    use super::*;
    use dispatchscope_core::report::Route;
    use proptest::prelude::*;

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![Just(Op::Load), Just(Op::Store)]
    }

    fn range() -> impl Strategy<Value = Option<ByteRange>> {
        proptest::option::of((any::<u64>(), any::<u64>()).prop_map(|(a, b)| ByteRange::new(a, b)))
    }

    fn route() -> impl Strategy<Value = Route> {
        prop_oneof![
            (any::<u32>(), any::<u64>())
                .prop_map(|(holder, offset)| Route::Bound { holder, offset }),
            any::<u64>().prop_map(|address| Route::Device { address }),
            any::<u64>().prop_map(|offset| Route::Lds { offset }),
            any::<u64>().prop_map(|offset| Route::Scratch { offset }),
            Just(Route::NotRun),
        ]
    }

    fn site() -> impl Strategy<Value = SiteReport> {
        (
            any::<u32>(),
            any::<u64>(),
            0..8usize,
            op(),
            any::<u32>(),
            any::<[u64; 4]>(),
            any::<u32>(),
        )
            .prop_map(|(site, pc, k, op, size_bytes, n, probes_max)| SiteReport {
                site,
                pc,
                kind: KINDS[k],
                op,
                size_bytes,
                accesses: n[0],
                escapes: n[1],
                lookups: n[2],
                probes_sum: n[3],
                probes_max,
            })
    }

    fn escape() -> impl Strategy<Value = LoggedEscape> {
        (
            any::<[u32; 6]>(),
            any::<[u64; 2]>(),
            any::<[u32; 2]>(),
            op(),
            0..5usize,
            0..4usize,
            range(),
            range(),
        )
            .prop_map(|(w, a, s, op, class, reason, below, above)| LoggedEscape {
                workgroup: w[0],
                wave: w[1],
                lane: w[2],
                pixel: [w[3], w[4]],
                site: w[5],
                pc: a[0],
                address: a[1],
                size_bytes: s[0],
                op,
                escaped_bytes: s[1],
                class: CLASSES[class],
                reason: reason.checked_sub(1).map(|i| REASONS[i]),
                nearest_below: below,
                nearest_above: above,
            })
    }

    fn captured() -> impl Strategy<Value = CapturedAccess> {
        (
            any::<[u32; 6]>(),
            any::<u64>(),
            op(),
            route(),
            proptest::option::of((any::<u32>(), any::<u64>())),
            any::<[u32; 2]>(),
            proptest::collection::vec(any::<u32>(), 0..5),
        )
            .prop_map(|(w, pc, op, route, slot, s, values)| CapturedAccess {
                workgroup: w[0],
                wave: w[1],
                lane: w[2],
                pixel: [w[3], w[4]],
                site: w[5],
                pc,
                op,
                route,
                slot,
                size_bytes: s[0],
                values,
                escaped_bytes: s[1],
            })
    }

    fn section() -> impl Strategy<Value = InstrumentedReport> {
        (
            any::<[u32; 2]>(),
            any::<[u64; 13]>(),
            any::<bool>(),
            proptest::collection::vec(any::<u64>(), 0..12),
            proptest::collection::vec(site(), 0..8),
            proptest::collection::vec(escape(), 0..8),
            proptest::collection::vec(captured(), 0..16),
            proptest::option::of((any::<u32>(), 1u32..6, 1u32..6, any::<u64>())),
        )
            .prop_map(
                |(grid, n, fired, probe_histogram, sites, escapes, captured, heat)| {
                    InstrumentedReport {
                        heat: heat.map(|(scale, x, y, seed)| {
                            let n = (x * y) as u64;
                            HeatMap {
                                scale,
                                cells: [x, y],
                                escapes: (0..n).map(|i| seed.wrapping_mul(i + 1)).collect(),
                                extra_probes: (0..n).map(|i| seed.rotate_left(i as u32)).collect(),
                            }
                        }),
                        grid,
                        lanes: n[0],
                        workgroups: n[1],
                        counters: InstrumentCounters {
                            guest: n[2],
                            lds: n[3],
                            scratch: n[4],
                            bound: n[5],
                            lookups: n[6],
                            hits: n[7],
                            misses: n[8],
                            escapes: n[9],
                            stores_marked: n[10],
                        },
                        probe_histogram,
                        sites,
                        escapes,
                        escapes_not_logged: n[11],
                        captured,
                        captured_not_logged: n[12],
                        control: if fired {
                            ControlStatus::Fired
                        } else {
                            ControlStatus::NotFired
                        },
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn a_section_round_trips(s in section()) {
            let bytes = encode(&s).unwrap();
            let n_values: usize = s.captured.iter().map(|c| c.values.len()).sum();
            prop_assert_eq!(
                bytes.len(),
                HEADER_BYTES
                    + 8 * s.probe_histogram.len()
                    + SITE_ROW_BYTES * s.sites.len()
                    + ESCAPE_ROW_BYTES * s.escapes.len()
                    + CAPTURED_ROW_BYTES * s.captured.len()
                    + 4 * n_values
                    + s.heat.as_ref().map_or(0, |h| 12 + 16 * h.escapes.len())
            );
            prop_assert_eq!(decode(&bytes).unwrap(), s);
        }

        #[test]
        fn every_cut_and_flip_is_an_error_or_a_section(s in section(), cut in any::<usize>(), flip in any::<(usize, u8)>()) {
            let bytes = encode(&s).unwrap();
            let cut = cut % (bytes.len() + 1);
            if cut < bytes.len() {
                prop_assert!(decode(&bytes[..cut]).is_err());
            }
            let mut b = bytes.clone();
            let at = flip.0 % b.len();
            b[at] ^= flip.1;
            let _ = decode(&b);
        }
    }

    #[test]
    fn bad_records_are_named() {
        assert!(matches!(
            decode(b"JSON"),
            Err(InstrumentedError::BadMagic { .. })
        ));
        assert!(matches!(
            decode(b"DS"),
            Err(InstrumentedError::BadMagic { .. })
        ));
        let mut v = MAGIC.to_vec();
        v.extend_from_slice(&7u16.to_le_bytes());
        assert_eq!(decode(&v), Err(InstrumentedError::Version { found: 7 }));
        // A header that names 4 billion sites with no bytes for them: refused before allocating.
        let mut s = empty();
        s.sites.clear();
        let mut b = encode(&s).unwrap();
        let rows_at = HEADER_BYTES - 5 * 4 + 4;
        b[rows_at..rows_at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        let e = decode(&b).unwrap_err();
        assert!(
            matches!(
                e,
                InstrumentedError::Truncated {
                    part: "sites.site",
                    ..
                }
            ),
            "{e}"
        );
        let mut b = encode(&empty()).unwrap();
        b.push(0);
        assert_eq!(decode(&b), Err(InstrumentedError::Trailing { extra: 1 }));
    }

    fn empty() -> InstrumentedReport {
        InstrumentedReport {
            grid: [8, 8],
            lanes: 64,
            workgroups: 1,
            counters: InstrumentCounters::default(),
            probe_histogram: vec![0; 8],
            sites: Vec::new(),
            escapes: Vec::new(),
            escapes_not_logged: 0,
            captured: Vec::new(),
            captured_not_logged: 0,
            control: ControlStatus::Fired,
            heat: None,
        }
    }

    /// A version 1 record (no flags, no heat map) still reads; flags in one, or unknown flags,
    /// are named; a heat map of more cells than any grid has is refused before allocating.
    #[test]
    fn version_1_reads_and_bad_flags_and_heat_are_named() {
        let mut b = encode(&empty()).unwrap();
        b[4..6].copy_from_slice(&1u16.to_le_bytes());
        assert_eq!(decode(&b).unwrap(), empty());
        b[6..8].copy_from_slice(&FLAG_HEAT.to_le_bytes());
        assert_eq!(
            decode(&b),
            Err(InstrumentedError::Flags {
                version: 1,
                flags: FLAG_HEAT
            })
        );
        let mut b = encode(&empty()).unwrap();
        b[6..8].copy_from_slice(&4u16.to_le_bytes());
        assert!(matches!(decode(&b), Err(InstrumentedError::Flags { .. })));
        let mut s = empty();
        s.heat = Some(HeatMap {
            scale: 1,
            cells: [2, 1],
            escapes: vec![3, 4],
            extra_probes: vec![5, 6],
        });
        let mut b = encode(&s).unwrap();
        assert_eq!(decode(&b).unwrap(), s);
        let cells_at = b.len() - 4 * 8 - 8;
        b[cells_at..cells_at + 4].copy_from_slice(&100_000u32.to_le_bytes());
        assert!(matches!(
            decode(&b),
            Err(InstrumentedError::HeatCells { .. })
        ));
        s.heat.as_mut().unwrap().escapes.pop();
        assert!(matches!(
            encode(&s),
            Err(InstrumentedError::HeatCells { .. })
        ));
    }
}
