//! The text explanation of a [`DispatchReport`]: what `dispatchscope explain` prints and what the
//! golden files hold. Every refusal, escape and hazard line names its rule and decision ids.
//! [`explain_loss`] explains a lost device's report, which follows a capture's dispatches.
//!
//! This is formatting only; it reads a report and never runs anything.

use std::fmt::Write;

use dispatchscope_core::report::{CapturedAccess, ControlStatus, InstrumentedReport};
use dispatchscope_core::report::{DeviceLossReport, FaultLands};
use dispatchscope_core::report::{DispatchReport, HostPathReport, Mode, Route};
use dispatchscope_core::report::{LookupOutcome, LookupTrace};
use dispatchscope_core::report::{Role, SlotBinding};

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
            dispatchscope_core::input::DispatchKind::Compute => "compute",
            dispatchscope_core::input::DispatchKind::Graphics => "graphics",
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
            slot_line(o, "    ", s)?;
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
            w.words_written(),
            w.words_total
        )?;
        if !w.lists_every_word() {
            writeln!(
                o,
                "    {} words listed; {} more written back, not listed, in {} runs{}",
                w.words.len(),
                w.words_not_listed,
                w.runs.len() as u64 + w.runs_not_listed,
                if w.runs_not_listed > 0 {
                    format!(
                        " ({} placed below, {} not)",
                        w.runs.len(),
                        w.runs_not_listed
                    )
                } else {
                    String::new()
                }
            )?;
            for run in w.runs.iter().take(detail.max_accesses) {
                writeln!(o, "    run {run}: {} words", run.size_bytes().div_ceil(4))?;
            }
        }
        for word in w.words.iter().take(detail.max_accesses) {
            writeln!(
                o,
                "    {:#x}: {} → {}{}",
                word.address,
                word.old_text(),
                word.new_text(),
                if !word.changed() {
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
    explain_host_path(o, &r.host_path)?;
    if let Some(ir) = &r.instrumented {
        explain_instrumented(o, ir, detail)?;
    }
    Ok(())
}

/// One slot's line: its range, base, role and binding (O3–O7, O10, W1), after `indent`.
fn slot_line(o: &mut String, indent: &str, s: &SlotBinding) -> std::fmt::Result {
    let role = match s.role {
        Role::Alone => "alone".to_owned(),
        Role::Holder => "holder".to_owned(),
        Role::Member => "member".to_owned(),
        Role::Copy { of } => format!("exact copy of slot {of} (O3)"),
        Role::Unbound => "unresolved: by device address (W1)".to_owned(),
    };
    let src = match s.base_source {
        dispatchscope_core::input::BaseSource::Descriptor => "descriptor".to_owned(),
        dispatchscope_core::input::BaseSource::PushBlock { word } => {
            format!("push word {word} (D951, O10)")
        }
    };
    write!(
        o,
        "{indent}slot {:>3} {} {} base from {src}: {role}",
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
    writeln!(o)
}

/// Host mode: what the emulator's memory did to the dispatch: the events that waited for it (M5),
/// the checked mode's look at the real mappings, and every call that failed with what it lost.
fn explain_host_path(o: &mut String, h: &HostPathReport) -> std::fmt::Result {
    for w in &h.waited {
        writeln!(
            o,
            "  WAITED (M5): a {} of {} touched {}, which this dispatch could reach: refused until its complete",
            w.event, w.range, w.reached
        )?;
    }
    if let Some(c) = &h.checked {
        writeln!(
            o,
            "  checked mode: the real mappings of {} piece(s), {:#x} host bytes, read again before the device ran; {} contradiction(s){}",
            c.pieces,
            c.bytes,
            c.contradictions.len(),
            if c.unknown > 0 {
                format!(", {} piece(s) the host could not tell about", c.unknown)
            } else {
                String::new()
            }
        )?;
        for d in &c.contradictions {
            writeln!(o, "    {d}")?;
        }
    }
    for f in &h.failures {
        writeln!(o, "  HOST CALL FAILED ({}): {}", f.kind.words(), f.error)?;
        if let Some(lost) = f.lost {
            writeln!(
                o,
                "    lost: guest {lost}, the device's bytes {}",
                f.bytes
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>()
            )?;
        }
    }
    if h.failures_not_listed > 0 {
        writeln!(o, "  … {} more failed calls", h.failures_not_listed)?;
    }
    Ok(())
}

/// A route in a few words, for the captured lanes.
fn captured_route(c: &CapturedAccess) -> String {
    let mut t = match c.route {
        Route::Bound { holder, offset } => format!("slot {holder}'s buffer +{offset:#x}"),
        Route::Device { address } => format!("device {address:#x}"),
        Route::Lds { offset } => format!("LDS +{offset:#x}"),
        Route::Scratch { offset } => format!("scratch +{offset:#x}"),
        Route::NotRun => "not run".to_owned(),
    };
    if let Some((slot, off)) = c.slot {
        t.push_str(&format!(" (slot {slot} +{off:#x})"));
    }
    t
}

/// Which bytes escaped, one character a byte of the first 32 (`x` escaped, `.` not).
fn escaped_mask(escaped_bytes: u32, size_bytes: u32) -> String {
    let mut s: String = (0..size_bytes.min(32))
        .map(|i| {
            if (escaped_bytes >> i) & 1 == 1 {
                'x'
            } else {
                '.'
            }
        })
        .collect();
    if size_bytes > 32 {
        s.push('…');
    }
    s
}

/// An access kind as JSON writes it (`untyped-buffer`).
fn kind_name(kind: dispatchscope_core::input::AccessKind) -> String {
    serde_json::to_value(kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{kind:?}"))
}

/// A site number as printed (the positive control's canary by name).
fn site_name(site: u32) -> String {
    if site == dispatchscope_core::instrument::CANARY_SITE {
        "canary".to_owned()
    } else {
        site.to_string()
    }
}

/// Writes an instrumented pass's section (issue 14): the control, the counters, the probe
/// histogram, the sites, the first `detail.max_accesses` logged escapes and captured accesses, and
/// how many more were logged and how many were counted but not logged.
pub fn explain_instrumented(
    o: &mut String,
    ir: &InstrumentedReport,
    detail: Detail,
) -> std::fmt::Result {
    let c = &ir.counters;
    writeln!(
        o,
        "  instrumented pass: grid {}×{}, {} lanes, {} workgroups of 8×8",
        ir.grid[0], ir.grid[1], ir.lanes, ir.workgroups
    )?;
    match ir.control {
        ControlStatus::Fired => writeln!(
            o,
            "    control: fired (the canary lookup escaped and was counted: the miss path works)"
        )?,
        ControlStatus::NotFired => writeln!(
            o,
            "    control: NOT FIRED: this pass's instrumentation is not validated: its canary did not escape"
        )?,
    }
    writeln!(
        o,
        "    accesses: {} to guest memory, {} bound, {} LDS, {} scratch; {} device stores marked (C1)",
        c.guest, c.bound, c.lds, c.scratch, c.stores_marked
    )?;
    writeln!(
        o,
        "    lookups (T5): {}, {} hits, {} misses; {} escapes (T4)",
        c.lookups, c.hits, c.misses, c.escapes
    )?;
    let last = ir.probe_histogram.len();
    let buckets: Vec<String> = ir
        .probe_histogram
        .iter()
        .enumerate()
        .filter(|(_, n)| **n > 0)
        .map(|(i, n)| {
            let plus = if i + 1 == last { "+" } else { "" };
            format!("{}{plus}: {n}", i + 1)
        })
        .collect();
    if !buckets.is_empty() {
        writeln!(o, "    probes a lookup (T2): {}", buckets.join(", "))?;
    }
    if let Some(h) = &ir.heat {
        let hottest = |v: &[u64]| {
            (0..v.len())
                .max_by_key(|&i| (v[i], std::cmp::Reverse(i)))
                .filter(|&i| v[i] > 0)
                .map(|i| {
                    let w = h.cells[0].max(1) as usize;
                    format!("hottest cell ({}, {}) with {}", i % w, i / w, v[i])
                })
                .unwrap_or_else(|| "none".to_owned())
        };
        writeln!(
            o,
            "    heat map: {}×{} cells of {s}×{s} workgroups; escapes: {}; probes past the first: {}",
            h.cells[0],
            h.cells[1],
            hottest(&h.escapes),
            hottest(&h.extra_probes),
            s = h.scale
        )?;
    }
    if !ir.sites.is_empty() {
        writeln!(o, "    sites:")?;
        writeln!(
            o,
            "      {:>4}  {:<16}  {:<16}  {:<5}  {:>5}  {:>12}  {:>10}  {:>12}  {:>11}  {:>10}",
            "site",
            "pc",
            "kind",
            "op",
            "bytes",
            "accesses",
            "escapes",
            "lookups",
            "mean probes",
            "max probes"
        )?;
        for s in &ir.sites {
            let (mean, max) = if s.lookups == 0 {
                ("-".to_owned(), "-".to_owned())
            } else {
                (
                    format!("{:.3}", s.probes_sum as f64 / s.lookups as f64),
                    s.probes_max.to_string(),
                )
            };
            writeln!(
                o,
                "      {:>4}  {:<16}  {:<16}  {:<5}  {:>5}  {:>12}  {:>10}  {:>12}  {:>11}  {:>10}",
                s.site,
                format!("{:#x}", s.pc),
                kind_name(s.kind),
                format!("{:?}", s.op).to_lowercase(),
                s.size_bytes,
                s.accesses,
                s.escapes,
                s.lookups,
                mean,
                max
            )?;
        }
    }
    let n = detail.max_accesses;
    write!(
        o,
        "    escape log (T4): {} counted, {} logged",
        c.escapes,
        ir.escapes.len()
    )?;
    if ir.escapes_not_logged > 0 {
        write!(
            o,
            "; {} counted but not logged (log full)",
            ir.escapes_not_logged
        )?;
    }
    writeln!(o)?;
    for e in ir.escapes.iter().take(n) {
        let class = match e.reason {
            Some(r) => format!("{} ({})", e.class.as_str(), r.phrase()),
            None => e.class.as_str().to_owned(),
        };
        let near = |r: Option<dispatchscope_core::ByteRange>| {
            r.map_or("none".to_owned(), |r| r.to_string())
        };
        writeln!(
            o,
            "      pixel ({}, {}) wg {} wave {} lane {} · site {} pc {:#x} · {} {} bytes at {:#x} · escaped [{}] · {class} · nearest below {}, above {}",
            e.pixel[0],
            e.pixel[1],
            e.workgroup,
            e.wave,
            e.lane,
            site_name(e.site),
            e.pc,
            format!("{:?}", e.op).to_lowercase(),
            e.size_bytes,
            e.address,
            escaped_mask(e.escaped_bytes, e.size_bytes),
            near(e.nearest_below),
            near(e.nearest_above),
        )?;
    }
    let more = ir.escapes.len().saturating_sub(n);
    if more > 0 || (ir.escapes_not_logged > 0 && !ir.escapes.is_empty()) {
        writeln!(
            o,
            "      … and {more} more logged, {} not logged",
            ir.escapes_not_logged
        )?;
    }
    write!(o, "    captured lanes: {} accesses kept", ir.captured.len())?;
    if ir.captured_not_logged > 0 {
        write!(
            o,
            "; {} counted but not logged (capture full)",
            ir.captured_not_logged
        )?;
    }
    writeln!(o)?;
    for a in ir.captured.iter().take(n) {
        let values: Vec<String> = a.values.iter().map(|v| format!("{v:#010x}")).collect();
        writeln!(
            o,
            "      pixel ({}, {}) wg {} wave {} lane {} · site {} pc {:#x} · {} {} bytes, {} · [{}]{}",
            a.pixel[0],
            a.pixel[1],
            a.workgroup,
            a.wave,
            a.lane,
            site_name(a.site),
            a.pc,
            format!("{:?}", a.op).to_lowercase(),
            a.size_bytes,
            captured_route(a),
            values.join(" "),
            if a.escaped_bytes != 0 {
                format!(
                    " · escaped [{}]",
                    escaped_mask(a.escaped_bytes, a.size_bytes)
                )
            } else {
                String::new()
            }
        )?;
    }
    let more = ir.captured.len().saturating_sub(n);
    if more > 0 || (ir.captured_not_logged > 0 && !ir.captured.is_empty()) {
        writeln!(
            o,
            "      … and {more} more kept, {} not logged",
            ir.captured_not_logged
        )?;
    }
    Ok(())
}

/// The text explanation of a lost device ([`DeviceLossReport`]): what `dispatchscope explain`
/// prints after a capture's dispatches when the capture has a DEVICE_LOSS record. The status, each
/// dispatch in flight with its plan (mode, slots, the mappings and table it was prepared against)
/// and its program's history (escapes by class, refusals by rule, the last escape's sentence),
/// each fault address and where it lands, then the findings.
pub fn explain_loss(loss: &DeviceLossReport) -> String {
    let mut o = String::new();
    let _ = explain_loss_into(&mut o, loss);
    o
}

fn explain_loss_into(o: &mut String, l: &DeviceLossReport) -> std::fmt::Result {
    writeln!(o, "device lost: {}", l.status)?;
    writeln!(
        o,
        "  {} completed before the loss; the next would have been dispatch {}; {} in flight ({})",
        count(l.completed, "dispatch", "dispatches"),
        l.next_dispatch,
        l.in_flight.len(),
        l.schema
    )?;
    if !l.in_flight.is_empty() {
        writeln!(o, "  in flight, oldest first:")?;
    }
    for d in &l.in_flight {
        writeln!(
            o,
            "    dispatch {} · program {:#x} · {}{}",
            d.index,
            d.program,
            d.mode.as_str(),
            if d.label.is_empty() {
                String::new()
            } else {
                format!(" · {}", d.label)
            }
        )?;
        if !d.mode_reason.is_empty() {
            writeln!(o, "      {}", d.mode_reason)?;
        }
        for s in &d.slots {
            slot_line(o, "      ", s)?;
        }
        write!(
            o,
            "      mapped against generation {} (M4), mappings version {}: {} mapped, {} left out",
            d.generation,
            d.mappings_version,
            count(d.pieces, "piece", "pieces"),
            d.left_out
        )?;
        match &d.table {
            Some(t) => writeln!(
                o,
                "; table version {}, {} slots at {:#x} ({:#x} bytes), chunks of {:#x} bytes (T1–T3)",
                d.table_version, t.capacity, t.device_address, t.table_bytes, t.chunk_bytes
            )?,
            None => writeln!(o, "; no table")?,
        }
        let h = &d.history;
        if h.runs == 0 {
            writeln!(o, "      its program's first dispatch: no history")?;
            continue;
        }
        writeln!(
            o,
            "      its program before: {} ({} refused, {} device-addressed){}",
            count(h.runs, "run", "runs"),
            h.refused,
            h.device_addressed,
            h.last_dispatch
                .map_or(String::new(), |n| format!(", the last dispatch {n}"))
        )?;
        if !h.escapes.is_empty() {
            let by_class: Vec<String> = h
                .escapes
                .iter()
                .map(|(c, n)| format!("{} {n}", c.as_str()))
                .collect();
            writeln!(
                o,
                "      escapes (T4): {} ({})",
                h.escapes_total(),
                by_class.join(", ")
            )?;
        }
        if !h.refusals.is_empty() {
            let by_rule: Vec<String> = h
                .refusals
                .iter()
                .map(|(r, n)| format!("{} ×{n}", r.id()))
                .collect();
            writeln!(o, "      refused by: {}", by_rule.join(", "))?;
        }
        if let Some(e) = &h.last_escape {
            writeln!(o, "      the last escape: {e}")?;
        }
    }
    match &l.fault {
        None => writeln!(
            o,
            "  no fault report from the device (VK_EXT_device_fault gave none, or the emulator passed none)"
        )?,
        Some(f) => {
            writeln!(
                o,
                "  the device's fault report: {}",
                if f.description.is_empty() {
                    "(no description)"
                } else {
                    &f.description
                }
            )?;
            for a in &f.addresses {
                writeln!(
                    o,
                    "    {:#x} {}: {}",
                    a.address,
                    a.kind,
                    fault_lands(&a.lands)
                )?;
            }
        }
    }
    if !l.findings.is_empty() {
        writeln!(o, "  findings:")?;
        for f in &l.findings {
            writeln!(o, "    - {f}")?;
        }
    }
    Ok(())
}

/// Where a fault address lands, in words (the views' loss panel says the same).
pub fn fault_lands(lands: &FaultLands) -> String {
    match lands {
        FaultLands::Guest {
            guest,
            reservation,
            piece,
            chunk,
        } => format!(
            "guest {guest:#x} in reservation {reservation}, chunk {chunk:#x}, {}",
            piece.map_or(
                "in an import held for the dispatches in flight, no longer mapped".to_owned(),
                |p| format!("mapped piece {p}")
            )
        ),
        FaultLands::Table { offset } => {
            format!("{offset:#x} bytes into the chunk table the helper reads (T2)")
        }
        FaultLands::Unknown { nearest_below } => format!(
            "in no import and no buffer of the engine{}",
            nearest_below.map_or(String::new(), |(g, past)| format!(
                "; {past:#x} bytes past the end of the nearest import below (guest {g})"
            ))
        ),
    }
}

/// `n` and its noun, singular or plural.
fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod instrumented_tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;
    use dispatchscope_core::ByteRange;
    use dispatchscope_core::input::{AccessKind, Op};
    use dispatchscope_core::report::{
        EscapeClass, InstrumentCounters, LeftOutReason, LoggedEscape, SiteReport,
    };

    fn section(control: ControlStatus) -> InstrumentedReport {
        let escape = |k: u32| LoggedEscape {
            workgroup: 5 + k,
            wave: 1,
            lane: 3,
            pixel: [40 + 8 * k, 4],
            site: 1,
            pc: 0x7400_5b85_4a90,
            address: 0x7f_0000_0000 + u64::from(k) * 0x40,
            size_bytes: 8,
            op: Op::Load,
            escaped_bytes: 0xf0,
            class: if k == 1 {
                EscapeClass::LeftOut
            } else {
                EscapeClass::NoReservation
            },
            reason: (k == 1).then_some(LeftOutReason::NotReadWrite),
            nearest_below: Some(ByteRange::new(0x6_1000_0000, 0x6_1010_0000)),
            nearest_above: None,
        };
        InstrumentedReport {
            grid: [64, 16],
            lanes: 1024,
            workgroups: 16,
            counters: InstrumentCounters {
                guest: 2048,
                lds: 1024,
                scratch: 0,
                bound: 1024,
                lookups: 2050,
                hits: 2042,
                misses: 8,
                escapes: 8,
                stores_marked: 1024,
            },
            heat: Some(dispatchscope_core::report::HeatMap {
                scale: 1,
                cells: [8, 2],
                escapes: (0..16).map(|i| u64::from(i == 5) * 8).collect(),
                extra_probes: (0..16).map(|i| u64::from(i % 3 == 0) * 3).collect(),
            }),
            probe_histogram: vec![2000, 50, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            sites: vec![
                SiteReport {
                    site: 0,
                    pc: 0x7400_5b85_4a80,
                    kind: AccessKind::UntypedBuffer,
                    op: Op::Load,
                    size_bytes: 16,
                    accesses: 1024,
                    escapes: 0,
                    lookups: 0,
                    probes_sum: 0,
                    probes_max: 0,
                },
                SiteReport {
                    site: 1,
                    pc: 0x7400_5b85_4a90,
                    kind: AccessKind::Scalar,
                    op: Op::Load,
                    size_bytes: 8,
                    accesses: 2048,
                    escapes: 8,
                    lookups: 2050,
                    probes_sum: 2100,
                    probes_max: 2,
                },
            ],
            escapes: (0..3).map(escape).collect(),
            escapes_not_logged: 5,
            captured: vec![CapturedAccess {
                workgroup: 5,
                wave: 1,
                lane: 3,
                pixel: [43, 4],
                site: 0,
                pc: 0x7400_5b85_4a80,
                op: Op::Load,
                route: Route::Bound {
                    holder: 0,
                    offset: 0x40,
                },
                slot: Some((0, 0x40)),
                size_bytes: 8,
                values: vec![1, 2],
                escaped_bytes: 0,
            }],
            captured_not_logged: 0,
            control,
        }
    }

    #[test]
    fn the_section_says_what_was_counted_logged_and_not_logged() {
        let mut o = String::new();
        explain_instrumented(
            &mut o,
            &section(ControlStatus::Fired),
            Detail { max_accesses: 2 },
        )
        .unwrap();
        let expected = "  instrumented pass: grid 64×16, 1024 lanes, 16 workgroups of 8×8
    control: fired (the canary lookup escaped and was counted: the miss path works)
    accesses: 2048 to guest memory, 1024 bound, 1024 LDS, 0 scratch; 1024 device stores marked (C1)
    lookups (T5): 2050, 2042 hits, 8 misses; 8 escapes (T4)
    probes a lookup (T2): 1: 2000, 2: 50
    heat map: 8×2 cells of 1×1 workgroups; escapes: hottest cell (5, 0) with 8; probes past the first: hottest cell (0, 0) with 3
    sites:
      site  pc                kind              op     bytes      accesses     escapes       lookups  mean probes  max probes
         0  0x74005b854a80    untyped-buffer    load      16          1024           0             0            -           -
         1  0x74005b854a90    scalar            load       8          2048           8          2050        1.024           2
    escape log (T4): 8 counted, 3 logged; 5 counted but not logged (log full)
      pixel (40, 4) wg 5 wave 1 lane 3 · site 1 pc 0x74005b854a90 · load 8 bytes at 0x7f00000000 · escaped [....xxxx] · no-reservation · nearest below 0x610000000..0x610100000, above none
      pixel (48, 4) wg 6 wave 1 lane 3 · site 1 pc 0x74005b854a90 · load 8 bytes at 0x7f00000040 · escaped [....xxxx] · left-out (host pages not read-write) · nearest below 0x610000000..0x610100000, above none
      … and 1 more logged, 5 not logged
    captured lanes: 1 accesses kept
      pixel (43, 4) wg 5 wave 1 lane 3 · site 0 pc 0x74005b854a80 · load 8 bytes, slot 0's buffer +0x40 (slot 0 +0x40) · [0x00000001 0x00000002]
";
        assert_eq!(o, expected, "\n{o}");
    }

    #[test]
    fn a_control_that_did_not_fire_is_said_and_a_full_capture_counted() {
        let mut ir = section(ControlStatus::NotFired);
        ir.captured_not_logged = 7;
        let mut o = String::new();
        explain_instrumented(&mut o, &ir, Detail::default()).unwrap();
        assert!(o.contains("control: NOT FIRED: this pass's instrumentation is not validated: its canary did not escape"), "{o}");
        assert!(
            o.contains("captured lanes: 1 accesses kept; 7 counted but not logged (capture full)"),
            "{o}"
        );
        assert!(o.contains("      … and 0 more logged, 5 not logged"), "{o}");
        assert!(o.contains("      … and 0 more kept, 7 not logged"), "{o}");
    }
}
