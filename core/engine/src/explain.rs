//! The text explanation of a [`DispatchReport`]: what `dispatchscope explain` prints and what the
//! golden files hold. Every refusal, escape and hazard line names its rule and decision ids.
//!
//! This is formatting only; it reads a report and never runs anything.

use std::fmt::Write;

use crate::report::Role;
use crate::report::{DispatchReport, Mode, Route};
use crate::report::{LookupOutcome, LookupTrace};

/// How much of the access stream to print.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Detail {
    /// Print at most this many accesses (escapes are always printed in full).
    pub max_accesses: usize,
}

impl Default for Detail {
    fn default() -> Self {
        Self { max_accesses: 16 }
    }
}

fn trace_line(t: &LookupTrace) -> String {
    let probes: Vec<String> = t
        .probes
        .iter()
        .map(|p| match p.key {
            Some(k) if k == t.guest_chunk => format!("{}=hit", p.slot),
            Some(k) => format!("{}={k:#x}", p.slot),
            None => format!("{}=empty", p.slot),
        })
        .collect();
    let end = match t.outcome {
        LookupOutcome::Hit { slot, device_addr } => {
            format!("hit at slot {slot} → device {device_addr:#x}")
        }
        LookupOutcome::MissEmpty { slot } => format!("miss: slot {slot} is empty"),
        LookupOutcome::MissBound => "miss: probe bound reached".to_owned(),
    };
    format!(
        "chunk {:#x}, home slot {}, probes [{}]: {end}",
        t.guest_chunk,
        t.home_slot,
        probes.join(", ")
    )
}

/// Writes the explanation of one dispatch.
pub fn explain(r: &DispatchReport, detail: Detail) -> String {
    let mut o = String::new();
    let _ = explain_into(&mut o, r, detail);
    o
}

fn explain_into(o: &mut String, r: &DispatchReport, detail: Detail) -> std::fmt::Result {
    writeln!(
        o,
        "dispatch {} · program {:#x} · {} · {}{}",
        r.index,
        r.program,
        match r.kind {
            crate::input::DispatchKind::Compute => "compute",
            crate::input::DispatchKind::Graphics => "graphics",
        },
        r.mode.as_str(),
        if r.label.is_empty() {
            String::new()
        } else {
            format!(" · {}", r.label)
        }
    )?;
    writeln!(o, "  {}", r.mode_reason)?;
    writeln!(
        o,
        "  device {}: minStorageBufferOffsetAlignment {:#x}, maxStorageBufferRange {:#x}, page {:#x}, probe bound {} · backend {}",
        r.device.name,
        r.device.min_storage_buffer_offset_alignment,
        r.device.max_storage_buffer_range,
        r.device.host_page_bytes,
        r.device.probe_bound,
        r.backend
    )?;
    if !r.events_before.is_empty() {
        writeln!(o, "  events before:")?;
        for e in &r.events_before {
            let name = serde_json::to_value(&e.event)
                .ok()
                .and_then(|v| v.get("event").and_then(|n| n.as_str()).map(str::to_owned))
                .unwrap_or_default();
            writeln!(o, "    #{} {name}", e.index)?;
            for line in &e.effects {
                writeln!(o, "      {line}")?;
            }
        }
    }
    if !r.slots.is_empty() {
        writeln!(o, "  slots:")?;
        for s in &r.slots {
            let role = match s.role {
                Role::Alone => "alone".to_owned(),
                Role::Holder => "holder".to_owned(),
                Role::Member => "member".to_owned(),
                Role::Copy { of } => format!("exact copy of slot {of} (O3)"),
                Role::Unbound => "unresolved: by device address (W1)".to_owned(),
            };
            let src = match s.base_source {
                crate::input::BaseSource::Descriptor => "descriptor".to_owned(),
                crate::input::BaseSource::PushBlock { word } => {
                    format!("push word {word} (D951, O10)")
                }
            };
            write!(
                o,
                "    slot {:>3} {} {} base from {src}: {role}",
                s.slot,
                s.range,
                if s.written { "written  " } else { "read-only" },
            )?;
            if let Some(h) = s.holder
                && s.role != Role::Unbound
            {
                write!(
                    o,
                    ", binds slot {h} at {:#x}, binding {}",
                    s.offset, s.binding
                )?;
                if !s.aligned {
                    write!(o, " (misaligned, O7)")?;
                }
            }
            writeln!(o)?;
        }
    }
    for (i, set) in r.sets.iter().enumerate() {
        writeln!(
            o,
            "  set {i}: holder slot {} {:#x}..{:#x} widened to {:#x} bytes (O4, O5){}",
            set.holder,
            set.base,
            set.end,
            set.end - set.base,
            if set.written { "" } else { ", read only" }
        )?;
        let tied: Vec<String> = r
            .slots
            .iter()
            .filter(|b| b.set == Some(i) && b.offset == 0 && b.role == Role::Member)
            .map(|b| b.slot.to_string())
            .collect();
        if !tied.is_empty() {
            writeln!(
                o,
                "    O4 tie: slot {} and slot {} share the lowest base {:#x}; the earliest slot holds the set, read as the lowest slot number (whatever order the slots are listed in)",
                set.holder,
                tied.join(", slot "),
                set.base
            )?;
        }
        for m in &set.members {
            writeln!(
                o,
                "    member slot {} at offset {:#x}, binding {} (O6)",
                m.slot, m.offset, m.binding
            )?;
        }
        for j in &set.joins {
            writeln!(
                o,
                "    joined: slots {} and {} share {} (O1)",
                j.a, j.b, j.overlap
            )?;
        }
    }
    for f in &r.refusals {
        writeln!(
            o,
            "  REFUSED {} ({}){}: {}",
            f.rule.id(),
            f.decision,
            if f.ours {
                " [dispatchscope's addition]"
            } else {
                ""
            },
            f.message
        )?;
        let values: Vec<String> = f
            .values
            .iter()
            .map(|v| format!("{} {}", v.name, v.value))
            .collect();
        writeln!(o, "    values: {}", values.join(", "))?;
        writeln!(o, "    {}", f.would_run_if)?;
    }
    if !r.before.copies.is_empty() {
        let copies: Vec<String> = r.before.copies.iter().map(|c| c.to_string()).collect();
        let why = if r.mode == Mode::Bound {
            "a holder's binding covers them (the last such copy and every older one, in order)"
        } else {
            "the dispatch may read anywhere"
        };
        writeln!(
            o,
            "  C3: deferred copies written into guest memory first, because {why}: {}",
            copies.join(", ")
        )?;
        for t in &r.before.targets_distrusted {
            writeln!(
                o,
                "    target {} {} {} lost its trust (D720) by {}",
                t.id, t.name, t.range, t.by
            )?;
        }
    }
    if r.before.still_deferred > 0 {
        let why = if r.mode == Mode::Refused {
            "the dispatch did not run"
        } else {
            "no binding of this bound dispatch covers them, and it reads only its bindings"
        };
        writeln!(
            o,
            "  C3: {} deferred copies stay deferred: {why}",
            r.before.still_deferred
        )?;
    }
    if let Some(m) = &r.mappings {
        writeln!(
            o,
            "  mappings: generation {}, mapped for {}, {} ({} full mappings so far), imports +{} -{}",
            m.generation,
            m.mapped_generation,
            if m.remapped {
                "remapped by this dispatch (M4)"
            } else {
                "unchanged, no remap (M4)"
            },
            m.remaps_total,
            m.imports_made,
            m.imports_dropped
        )?;
        if m.remapped {
            writeln!(
                o,
                "    M2: committed {} pages, released {} guards, noted {} pages written",
                m.committed_pages, m.guards_released, m.pages_noted_written
            )?;
        }
        for run in &m.runs {
            writeln!(o, "    readable run {} (M1)", run.range)?;
        }
        for p in &m.pieces {
            writeln!(
                o,
                "    mapped {} → device {:#x}{}",
                p.guest,
                p.device_base,
                if p.by_revisit { " (M5 revisit)" } else { "" }
            )?;
        }
        for l in &m.left_out {
            writeln!(o, "    left out {}: {} (M3)", l.guest, l.reason.phrase())?;
        }
    }
    if let Some(t) = &r.table {
        writeln!(
            o,
            "  table: chunk {:#x} bytes, {} chunks in {} slots (load {:.3}), probe bound {}, hash multiplier {:#x}, mean probes {:.3} per hit, {:.3} per miss, {:?}, {:#x} bytes at {:#x} (push word {}, T3)",
            t.chunk_bytes,
            t.n_chunks,
            t.capacity,
            t.load,
            t.probe_bound,
            t.multiplier,
            t.mean_probes_hit,
            t.mean_probes_miss,
            t.placement,
            t.table_bytes,
            t.device_address,
            t.push_word
        )?;
        writeln!(o, "    {}", t.chunk_reason)?;
        match &t.rebuilt {
            Some(why) => writeln!(o, "    built whole: {why}")?,
            None => writeln!(
                o,
                "    updated in place: {} chunks inserted, {} removed",
                t.inserted, t.removed
            )?,
        }
    }
    if r.mode != Mode::Refused && !r.accesses.is_empty() {
        writeln!(o, "  accesses ({}):", r.accesses.len())?;
        for a in r.accesses.iter().take(detail.max_accesses) {
            let route = match &a.route {
                Route::Bound { holder, offset } => format!("slot {holder}'s buffer +{offset:#x}"),
                Route::Device { address } => format!("device address of {address:#x}"),
                Route::Lds { offset } => format!("LDS +{offset:#x}"),
                Route::Scratch { offset } => format!("scratch +{offset:#x}"),
                Route::NotRun => "not run".to_owned(),
            };
            let values: Vec<String> = a.values.iter().map(|v| format!("{v:#x}")).collect();
            writeln!(
                o,
                "    #{} wg {} wave {} lane {} pc {:#x} {:?} {:?} {}B → {route} ({}) [{}]{}",
                a.index,
                a.workgroup,
                a.wave,
                a.lane,
                a.pc,
                a.kind,
                a.op,
                a.size_bytes,
                a.rule.id(),
                values.join(" "),
                if a.escaped { " ESCAPED" } else { "" }
            )?;
        }
        if r.accesses.len() > detail.max_accesses {
            writeln!(o, "    … {} more", r.accesses.len() - detail.max_accesses)?;
        }
    }
    for e in &r.escapes {
        writeln!(
            o,
            "  ESCAPE {} ({}) {}: {}",
            e.rule.id(),
            e.decision,
            e.class.as_str(),
            e.message
        )?;
        writeln!(o, "    probe trace: {}", trace_line(&e.lookup))?;
        writeln!(o, "    {}", e.would_run_if)?;
    }
    if !r.marks.is_empty() {
        let marks: Vec<String> = r
            .marks
            .iter()
            .map(|m| format!("slot {} {} ×{}", m.table_slot, m.guest, m.stores))
            .collect();
        writeln!(o, "  marks (C1): {}", marks.join(", "))?;
    }
    if !r.hand_off.pages_noted_written.is_empty() || !r.hand_off.targets_distrusted.is_empty() {
        let pages: Vec<String> = r
            .hand_off
            .pages_noted_written
            .iter()
            .map(|p| p.to_string())
            .collect();
        let how = if r.marks.is_empty() {
            "after the dispatch (write-back, O8)"
        } else {
            "hand-off (C2) and write-back (O8)"
        };
        writeln!(
            o,
            "  {how}: pages noted written (D824): {}",
            pages.join(", ")
        )?;
        for t in &r.hand_off.targets_distrusted {
            writeln!(
                o,
                "    target {} {} {} lost its trust (D720) by {}",
                t.id, t.name, t.range, t.by
            )?;
        }
    }
    for w in &r.write_back {
        writeln!(
            o,
            "  write-back (O8): holder slot {} {}: {} of {} words",
            w.holder,
            w.range,
            w.words.len(),
            w.words_total
        )?;
        for word in w.words.iter().take(detail.max_accesses) {
            writeln!(
                o,
                "    {:#x}: {:#010x} → {:#010x}{}",
                word.address,
                word.old,
                word.new,
                if word.old == word.new {
                    " (stored, unchanged)"
                } else {
                    ""
                }
            )?;
        }
        if w.words.len() > detail.max_accesses {
            writeln!(o, "    … {} more", w.words.len() - detail.max_accesses)?;
        }
    }
    for h in &r.hazards {
        writeln!(
            o,
            "  HAZARD {} ({}): {}",
            h.rule.id(),
            h.decision,
            h.message
        )?;
    }
    Ok(())
}
