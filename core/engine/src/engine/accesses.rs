//! Each access's part of the report: its route and rule, its two lookups (T5) traced probe by
//! probe, the values it read or wrote, and, where it reached no mapping, its escape (T4).

use super::Engine;
use crate::addr::ByteRange;
use crate::backend::Backend;
use crate::chunk_table::ChunkTable;
use crate::exec::Outcome;
use crate::input::{Access, DispatchInput};
use crate::report::{AccessReport, Escape, LookupOutcome, LookupTrace, Route};
use crate::rules::Rule;

/// A refused dispatch's accesses: none ran (A1).
pub(super) fn not_run(input: &DispatchInput) -> Vec<AccessReport> {
    input
        .accesses
        .iter()
        .enumerate()
        .map(|(i, a)| access_report(i, a, Route::NotRun, Rule::A1, Vec::new()))
        .collect()
}

/// T5: the lookups of each access by device address, probe by probe: the chunk of its first byte,
/// and the chunk of its last byte where that is another.
pub(super) fn trace_lookups(
    input: &DispatchInput,
    routes: &[(Route, Rule)],
    table: Option<&ChunkTable>,
) -> Vec<Vec<LookupTrace>> {
    input
        .accesses
        .iter()
        .zip(routes)
        .map(|(a, (route, _))| {
            let mut lookups = Vec::new();
            if let (Route::Device { address }, Some(t)) = (route, table) {
                let last = address.saturating_add(u64::from(a.size_bytes) - 1);
                let part_shift = t.chunk_shift() - crate::chunk_table::PARTS.trailing_zeros();
                lookups.push(t.trace_addr(*address));
                if last >> part_shift != address >> part_shift {
                    lookups.push(t.trace_addr(last));
                }
            }
            lookups
        })
        .collect()
}

/// The report of every access, its route, lookups and values moved in.
pub(super) fn reports(
    input: &DispatchInput,
    routes: Vec<(Route, Rule)>,
    lookups: Vec<Vec<LookupTrace>>,
    outcome: &mut Outcome,
) -> Vec<AccessReport> {
    input
        .accesses
        .iter()
        .zip(routes)
        .zip(lookups)
        .zip(&mut outcome.accesses)
        .enumerate()
        .map(|(i, (((a, (route, rule)), lookups), o))| {
            let mut ar = access_report(i, a, route, rule, lookups);
            ar.values = std::mem::take(&mut o.values);
            ar.device_address = o.device_address;
            ar.escaped = o.escaped_at.is_some();
            ar
        })
        .collect()
}

impl<B: Backend> Engine<B> {
    /// T4: every access that reached an address no mapping holds, with the lookup that missed.
    pub(super) fn escapes(
        &self,
        input: &DispatchInput,
        routes: &[(Route, Rule)],
        outcome: &Outcome,
        lookups: &[Vec<LookupTrace>],
    ) -> Vec<Escape> {
        let table = self.table.as_ref();
        let mut escapes = Vec::new();
        for (i, (((a, o), lookups), (route, _))) in input
            .accesses
            .iter()
            .zip(&outcome.accesses)
            .zip(lookups)
            .zip(routes)
            .enumerate()
        {
            let Some(at) = o.escaped_at else { continue };
            let landed = landed_bytes(a, route, lookups, table);
            let lookup = match (table, lookups.as_slice()) {
                (Some(t), [first, ..])
                    if at >> t.chunk_shift() == first.guest_chunk
                        && crate::chunk_table::part_of(at, t.chunk_shift()) == first.part =>
                {
                    first.clone()
                }
                (_, [_, second]) => second.clone(),
                (Some(t), _) => t.trace_addr(at),
                (None, _) => LookupTrace {
                    part: 0,
                    guest_chunk: at >> 12,
                    home_slot: 0,
                    probes: Vec::new(),
                    outcome: LookupOutcome::MissBound,
                },
            };
            escapes.push(self.escape(i, a, at, lookup, &landed, &o.values));
        }
        escapes
    }
}

/// The bytes of a device-addressed access that reached guest memory: those in a chunk whose lookup
/// hit (T5; a hit chunk lies in one mapping, T1). The others escaped (T4).
fn landed_bytes(
    a: &Access,
    route: &Route,
    lookups: &[LookupTrace],
    table: Option<&ChunkTable>,
) -> Vec<ByteRange> {
    let (Route::Device { address }, Some(t)) = (route, table) else {
        return Vec::new();
    };
    let whole = ByteRange::new(*address, address.saturating_add(u64::from(a.size_bytes)));
    let mut out: Vec<ByteRange> = lookups
        .iter()
        .filter(|l| matches!(l.outcome, LookupOutcome::Hit { .. }))
        .filter_map(|l| {
            let start = l.guest_chunk << t.chunk_shift();
            ByteRange::new(start, start.saturating_add(t.chunk_bytes())).intersection(&whole)
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

fn access_report(
    i: usize,
    a: &Access,
    route: Route,
    rule: Rule,
    lookups: Vec<LookupTrace>,
) -> AccessReport {
    AccessReport {
        index: i,
        workgroup: a.workgroup,
        wave: a.wave,
        lane: a.lane,
        pc: a.pc,
        kind: a.kind,
        op: a.op,
        size_bytes: a.size_bytes,
        route,
        rule,
        lookups,
        device_address: None,
        values: Vec::new(),
        escaped: false,
    }
}
