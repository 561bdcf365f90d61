//! Differential checking: a sample replayed on two backends, and every difference between the two runs
//! named by dispatch, field path and both values, and by guest address for guest memory afterwards.
//!
//! Device addresses differ between devices by nature, so before comparing, each report's device
//! addresses are put back into guest terms: a piece's device base becomes its guest start, an access's
//! or a lookup's device address the guest address it stands for, and the table's address 0. The
//! backend's and the device's names are blanked. Everything else is compared as it is.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use dispatchscope_core::backend::Backend;
use dispatchscope_core::memory::GuestMemory;
use dispatchscope_core::report::DispatchReport;
use dispatchscope_core::report::LookupOutcome;
use dispatchscope_formats::sample::{Sample, SampleError};

/// The report with its device addresses in guest terms and the device's names blanked.
pub fn normalized(report: &DispatchReport) -> DispatchReport {
    let mut r = report.clone();
    r.backend = String::new();
    r.device.name = String::new();
    let pieces: BTreeMap<u64, (u64, u64)> = r
        .mappings
        .as_ref()
        .map(|m| {
            m.pieces
                .iter()
                .map(|p| (p.device_base, (p.guest.start, p.guest.size_bytes())))
                .collect()
        })
        .unwrap_or_default();
    // A device address stands for the guest address at the same offset in its piece; one no piece
    // holds is kept with its top bit set, so that it still differs if it differs.
    let guest = |device: u64| -> u64 {
        match pieces.range(..=device).next_back() {
            Some((base, (start, size))) if device - base < *size => start + (device - base),
            _ => device | (1 << 63),
        }
    };
    let fix = |o: &mut LookupOutcome| {
        if let LookupOutcome::Hit { device_addr, .. } = o {
            *device_addr = guest(*device_addr);
        }
    };
    if let Some(m) = r.mappings.as_mut() {
        for p in &mut m.pieces {
            p.device_base = p.guest.start;
        }
    }
    if let Some(t) = r.table.as_mut() {
        t.device_address = 0;
    }
    for a in &mut r.accesses {
        a.device_address = a.device_address.map(guest);
        for l in &mut a.lookups {
            fix(&mut l.outcome);
        }
    }
    for e in &mut r.escapes {
        fix(&mut e.lookup.outcome);
    }
    r
}

/// Every difference between two JSON values, as "path: left vs right".
fn diff_values(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match (x.get(k), y.get(k)) {
                    (Some(u), Some(v)) => diff_values(&p, u, v, out),
                    (u, v) => out.push(format!("{p}: {} vs {}", show(u), show(v))),
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (u, v)) in x.iter().zip(y).enumerate() {
                diff_values(&format!("{path}[{i}]"), u, v, out);
            }
        }
        _ if a != b => out.push(format!("{path}: {a} vs {b}")),
        _ => {}
    }
}

fn show(v: Option<&Value>) -> String {
    v.map_or_else(|| "(absent)".to_owned(), Value::to_string)
}

/// Every difference between two runs' reports (left vs right), each naming the dispatch and field.
pub fn report_differences(left: &[DispatchReport], right: &[DispatchReport]) -> Vec<String> {
    let mut out = Vec::new();
    if left.len() != right.len() {
        out.push(format!("dispatches: {} vs {}", left.len(), right.len()));
    }
    for (a, b) in left.iter().zip(right) {
        let (Ok(x), Ok(y)) = (
            serde_json::to_value(normalized(a)),
            serde_json::to_value(normalized(b)),
        ) else {
            out.push(format!("dispatch {}: a report does not serialise", a.index));
            continue;
        };
        let mut d = Vec::new();
        diff_values("", &x, &y, &mut d);
        out.extend(d.into_iter().map(|s| format!("dispatch {}: {s}", a.index)));
    }
    out
}

/// Every guest byte that differs between two memories, as runs "guest 0x…: left … vs right …".
pub fn memory_differences(left: &GuestMemory, right: &GuestMemory) -> Vec<String> {
    let page = left.page_bytes();
    let pages: BTreeSet<u64> = left
        .content_pages()
        .map(|(a, _)| a)
        .chain(right.content_pages().map(|(a, _)| a))
        .collect();
    let mut out = Vec::new();
    let (mut x, mut y) = (vec![0u8; page as usize], vec![0u8; page as usize]);
    for p in pages {
        if let Err(e) = left
            .read_bytes(p, &mut x)
            .and_then(|()| right.read_bytes(p, &mut y))
        {
            out.push(format!("page {p:#x} could not be read: {e}"));
            continue;
        }
        let mut i = 0;
        while i < x.len() {
            if x[i] == y[i] {
                i += 1;
                continue;
            }
            let start = i;
            while i < x.len() && x[i] != y[i] && i - start < 16 {
                i += 1;
            }
            out.push(format!(
                "guest memory at {:#x}: {} vs {}",
                p + start as u64,
                hex(&x[start..i]),
                hex(&y[start..i])
            ));
        }
    }
    out
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

/// The outcome of running one sample on two backends.
#[derive(Debug)]
pub struct Comparison {
    /// Dispatches compared.
    pub dispatches: usize,
    /// Every difference, reports first, then guest memory.
    pub differences: Vec<String>,
    /// The left backend's name.
    pub left: String,
    /// The right backend's name.
    pub right: String,
    /// The right backend's reports.
    pub reports: Vec<DispatchReport>,
}

/// Runs `sample` on both backends against the same limits (the right backend's real storage-buffer
/// limits, if it has any, so both plan alike) and compares reports and guest memory afterwards.
pub fn compare<L: Backend, R: Backend>(
    sample: &Sample,
    left: L,
    right: R,
) -> Result<Comparison, SampleError> {
    let mut limits = sample.device.clone();
    if let Some(real) = right.limits().or_else(|| left.limits()) {
        limits.min_storage_buffer_offset_alignment = real.min_storage_buffer_offset_alignment;
        limits.max_storage_buffer_range = real.max_storage_buffer_range;
    }
    let (l_reports, l_engine) = sample.run_on_keeping_engine(limits.clone(), left)?;
    let (r_reports, r_engine) = sample.run_on_keeping_engine(limits, right)?;
    let mut differences = report_differences(&l_reports, &r_reports);
    differences.extend(memory_differences(l_engine.memory(), r_engine.memory()));
    Ok(Comparison {
        dispatches: l_reports.len(),
        differences,
        left: l_engine.backend().name(),
        right: r_engine.backend().name(),
        reports: r_reports,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "in a test, an unwrap is an assertion")]
mod tests {
    use super::*;
    use dispatchscope_core::backend::CpuBackend;

    #[test]
    fn a_run_agrees_with_itself() {
        let s = dispatchscope_formats::generate::random_sample(
            3,
            dispatchscope_formats::generate::GenConfig::default(),
        );
        let c = compare(&s, CpuBackend::new(), CpuBackend::new()).unwrap();
        assert_eq!(c.dispatches, 4);
        assert!(c.differences.is_empty(), "{:#?}", c.differences);
    }

    #[test]
    fn differences_name_the_field_and_both_values() {
        let s = dispatchscope_formats::generate::random_sample(
            5,
            dispatchscope_formats::generate::GenConfig::default(),
        );
        let (a, _) = s
            .run_on_keeping_engine(s.device.clone(), CpuBackend::new())
            .unwrap();
        let mut b = a.clone();
        b[1].counts.accesses += 1;
        let d = report_differences(&a, &b);
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(
            d[0].starts_with("dispatch 1: counts.accesses: "),
            "{}",
            d[0]
        );
    }
}
