//! A lost device explained: when the emulator's fence reports the device lost, it tells the
//! engine ([`Engine::device_lost`]), which names every dispatch in flight with its plan, its
//! mappings and the table it read, and what its program did in earlier dispatches (escapes and
//! refusals); where the device gave a fault report (`VK_EXT_device_fault`), each faulting address
//! is mapped to its guest reservation, piece and chunk, or named as in no import at all.

use std::collections::HashMap;

use super::Engine;
use crate::addr::ByteRange;
use crate::backend::Backend;
use crate::report::{
    DeviceLossReport, DispatchReport, FaultAddress, FaultLands, FaultReport, LOSS_SCHEMA,
    LostDispatch, Mode, ProgramHistory,
};

/// The device's own fault report, as the emulator read it (`vkGetDeviceFaultInfoEXT`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceFault {
    /// The driver's description.
    pub description: String,
    /// Each faulting address, with what the driver says of it.
    pub addresses: Vec<(u64, String)>,
}

/// What each program did in the dispatches completed so far.
#[derive(Debug, Default)]
pub(super) struct Programs {
    by_program: HashMap<u64, ProgramHistory>,
    completed: u64,
}

impl Programs {
    /// Counts one completed dispatch.
    pub fn note(&mut self, report: &DispatchReport) {
        self.completed += 1;
        let h = self.by_program.entry(report.program).or_default();
        h.runs += 1;
        h.last_dispatch = Some(report.index);
        match report.mode {
            Mode::Refused => h.refused += 1,
            Mode::DeviceAddressed => h.device_addressed += 1,
            Mode::Bound => {}
        }
        for r in &report.refusals {
            match h.refusals.iter_mut().find(|(rule, _)| *rule == r.rule) {
                Some((_, n)) => *n += 1,
                None => h.refusals.push((r.rule, 1)),
            }
        }
        let mut add = |class, n: u64| {
            if n == 0 {
                return;
            }
            match h.escapes.iter_mut().find(|(c, _)| *c == class) {
                Some((_, k)) => *k += n,
                None => h.escapes.push((class, n)),
            }
        };
        for e in &report.escapes {
            add(e.class, 1);
        }
        if let Some(i) = &report.instrumented {
            for e in &i.escapes {
                add(e.class, 1);
            }
        }
        if let Some(e) = report.escapes.last() {
            h.last_escape = Some(e.message.clone());
        } else if let Some(e) = report.instrumented.as_ref().and_then(|i| i.escapes.last()) {
            h.last_escape = Some(format!(
                "{:?} of {:#x} at pc {:#x} ({:?})",
                e.op, e.address, e.pc, e.class
            ));
        }
    }

    fn of(&self, program: u64) -> ProgramHistory {
        self.by_program.get(&program).cloned().unwrap_or_default()
    }
}

impl<B: Backend> Engine<B> {
    /// The emulator's fence reported the device lost (`status`, in its words), with the device's
    /// fault report where it has one: every dispatch in flight is named in the returned report and
    /// forgotten, and nothing more is prepared ([`super::EngineError::Lost`]). Memory events still
    /// apply. A second call returns the first report.
    ///
    /// Nothing a dispatch in flight may still write is given back: a hung device (lavapipe's,
    /// or a GPU whose fence only timed out) goes on running it after the loss is reported. Each
    /// one's mark words stay held by it until the engine is dropped, which the emulator does
    /// once the device is idle or destroyed. (They were zeroed and freed here once; the hung pass
    /// of `emulator-host --lose-device` went on marking the freed words, and the process aborted
    /// on a corrupted heap two runs in five.)
    pub fn device_lost(&mut self, status: &str, fault: Option<&DeviceFault>) -> &DeviceLossReport {
        if self.lost.is_none() {
            let report = self.loss_report(status, fault);
            while let Some(i) = self.flights.oldest() {
                if let Some(f) = self.flights.remove(i) {
                    self.flights.recycle(f);
                }
            }
            self.lost = Some(report);
        }
        self.lost.get_or_insert_with(DeviceLossReport::default)
    }

    /// The loss report, once the device was lost.
    pub fn loss(&self) -> Option<&DeviceLossReport> {
        self.lost.as_ref()
    }

    fn loss_report(&self, status: &str, fault: Option<&DeviceFault>) -> DeviceLossReport {
        let in_flight: Vec<LostDispatch> = self
            .flights
            .iter()
            .map(|f| LostDispatch {
                index: f.index,
                program: f.program,
                label: f.label.clone(),
                mode: f.mode,
                mode_reason: f.mode_reason.clone(),
                slots: f.slots.clone(),
                generation: f.generation,
                mappings_version: f.mappings_version,
                pieces: f.pieces as u64,
                left_out: f.left_out as u64,
                table: f.table.clone(),
                table_version: f.table_at.map_or(0, |(_, v)| v),
                history: self.programs.of(f.program),
            })
            .collect();
        let fault = fault.map(|f| FaultReport {
            description: f.description.clone(),
            addresses: f
                .addresses
                .iter()
                .map(|(a, kind)| FaultAddress {
                    address: *a,
                    kind: kind.clone(),
                    lands: self.fault_lands(*a, &in_flight),
                })
                .collect(),
        });
        let findings = findings(&in_flight, fault.as_ref());
        DeviceLossReport {
            schema: LOSS_SCHEMA.to_owned(),
            status: status.to_owned(),
            next_dispatch: self.next_dispatch,
            in_flight,
            fault,
            completed: self.programs.completed,
            findings,
        }
    }

    /// Where device address `a` lands: an import of guest memory (mapped or held), a table copy a
    /// dispatch in flight read, or nothing the engine made.
    fn fault_lands(&self, a: u64, in_flight: &[LostDispatch]) -> FaultLands {
        let imports = self.mappings.imports().chain(self.mappings.held());
        let mut nearest: Option<(ByteRange, u64)> = None;
        for i in imports {
            let end = i.device_base.saturating_add(i.guest.size_bytes());
            if (i.device_base..end).contains(&a) {
                let guest = i.guest.start + (a - i.device_base);
                let reservation = self
                    .memory
                    .reservations()
                    .find(|r| r.range.contains(guest))
                    .map_or(i.guest, |r| r.range);
                let piece = self.mappings.piece_at(guest).map(|p| p.guest);
                let chunk = self
                    .table
                    .as_ref()
                    .map_or(guest >> 16, |t| guest >> t.chunk_shift());
                return FaultLands::Guest {
                    guest,
                    reservation,
                    piece,
                    chunk,
                };
            }
            if a >= end && nearest.is_none_or(|(_, past)| a - end < past) {
                nearest = Some((i.guest, a - end));
            }
        }
        for d in in_flight {
            if let Some(t) = &d.table
                && (t.device_address..t.device_address.saturating_add(t.table_bytes)).contains(&a)
            {
                return FaultLands::Table {
                    offset: a - t.device_address,
                };
            }
        }
        FaultLands::Unknown {
            nearest_below: nearest,
        }
    }
}

/// The sentences a person reads first: which dispatch the fault points at, and which dispatches
/// in flight have escaped or been refused before.
fn findings(in_flight: &[LostDispatch], fault: Option<&FaultReport>) -> Vec<String> {
    let mut out = Vec::new();
    if in_flight.is_empty() {
        out.push("no dispatch was in flight: the loss came from work outside the engine's dispatches (or after every one completed)".to_owned());
    }
    for a in fault.iter().flat_map(|f| f.addresses.iter()) {
        out.push(match &a.lands {
            FaultLands::Guest {
                guest,
                reservation,
                piece,
                ..
            } => format!(
                "the device faulted ({}) at {:#x}, guest {guest:#x} in reservation {reservation}{}: memory the helper maps; the access itself was in bounds of an import",
                a.kind,
                a.address,
                piece.map_or(
                    " (in an import held for the dispatches in flight, no longer mapped)".to_owned(),
                    |p| format!(", piece {p}")
                )
            ),
            FaultLands::Table { offset } => format!(
                "the device faulted ({}) at {:#x}, {offset:#x} bytes into the chunk table: a lookup read the table (T2), it did not store there",
                a.kind, a.address
            ),
            FaultLands::Unknown { nearest_below } => format!(
                "the device faulted ({}) at {:#x}, in no import and no buffer of the engine: an address no lookup hands out (an escape computed by hand, a stale or wild pointer){}",
                a.kind,
                a.address,
                nearest_below.map_or(String::new(), |(g, past)| format!(
                    "; the nearest import below holds guest {g}, and the address lies {past:#x} bytes past its end"
                ))
            ),
        });
    }
    let device: Vec<&LostDispatch> = in_flight
        .iter()
        .filter(|d| d.mode == Mode::DeviceAddressed)
        .collect();
    if !device.is_empty() {
        out.push(format!(
            "{} of the {} dispatches in flight ran device-addressed (D964): their addresses came from the program, not the host",
            device.len(),
            in_flight.len()
        ));
    }
    for d in in_flight {
        let h = &d.history;
        let escapes = h.escapes_total();
        if escapes > 0 {
            out.push(format!(
                "dispatch {} (program {:#x}{}) escaped {escapes} time(s) in {} earlier run(s){}",
                d.index,
                d.program,
                if d.label.is_empty() {
                    String::new()
                } else {
                    format!(", {}", d.label)
                },
                h.runs,
                h.last_escape
                    .as_ref()
                    .map_or(String::new(), |e| format!("; the last: {e}"))
            ));
        }
        if h.runs == 0 {
            out.push(format!(
                "dispatch {} (program {:#x}) is its program's first: nothing earlier to compare",
                d.index, d.program
            ));
        }
    }
    out
}
