//! The hot path through the C ABI (struct form, tap detached) against the Rust call it wraps, on
//! the same dispatch, in the same process. Goal: within 10 % of the Rust call.
#![allow(clippy::unwrap_used, clippy::expect_used, unsafe_code, missing_docs)]

use criterion::{Criterion, criterion_group, criterion_main};
use dispatchscope_capi::*;
use dispatchscope_core::input::{BaseSource, DeviceLimits, DispatchInput, Event, Reason, Slot};
use dispatchscope_core::{ByteRange, Engine};

/// Sixteen written slots in four overlapping runs and eight read-only ones: a busy bound pass.
fn slots() -> Vec<ds_slot> {
    (0..24u32)
        .map(|i| {
            let written = i < 16;
            let base = if written {
                0x10_0000 + u64::from(i / 4) * 0x1_0000 + u64::from(i % 4) * 0x800
            } else {
                0x80_0000 + u64::from(i) * 0x1000
            };
            ds_slot {
                slot: i,
                flags: DS_SLOT_RESOLVED | if written { DS_SLOT_WRITTEN } else { 0 },
                base,
                size_bytes: 0x1000,
                alias_of: DS_NO_ALIAS,
                format: DS_FORMAT_NONE,
                stride_bytes: 0,
                base_source: DS_BASE_DESCRIPTOR,
                base_word: 0,
            }
        })
        .collect()
}

fn rust_input(slots: &[ds_slot], reasons: &[Reason], push: &[u32]) -> DispatchInput {
    DispatchInput {
        program: 0x4000,
        push: push.to_vec(),
        reasons: reasons.to_vec(),
        slots: slots
            .iter()
            .map(|s| Slot {
                slot: s.slot,
                base: s.base,
                size_bytes: s.size_bytes,
                written: s.flags & DS_SLOT_WRITTEN != 0,
                base_source: BaseSource::Descriptor,
                alias_of: None,
                format: None,
                resolved: true,
                stride_bytes: 0,
                swizzle: None,
                index_from_lane: false,
            })
            .collect(),
        ..DispatchInput::default()
    }
}

fn reserve() -> Event {
    Event::Reserve {
        range: ByteRange::new(0x10_0000, 0x100_0000),
        readable: true,
        writable: true,
        committed: true,
        backing: Default::default(),
    }
}

fn bench(c: &mut Criterion) {
    let slots = slots();
    let push = [0u32; 16];
    for (name, reasons, bits) in [
        ("bound", vec![], 0u32),
        ("device-addressed", vec![Reason::D753], 1u32),
    ] {
        let mut group = c.benchmark_group(format!("capi/{name}"));
        let mut engine = Engine::cpu(DeviceLimits::default()).unwrap();
        engine.apply(&reserve()).unwrap();
        let input = rust_input(&slots, &reasons, &push);
        group.bench_function("rust", |b| b.iter(|| engine.dispatch(&input).unwrap()));

        let mut handle: ds_engine = 0;
        let limits = serde_json::to_vec(&DeviceLimits::default()).unwrap();
        // SAFETY: valid pointers for the call.
        let status = unsafe { ds_engine_create_json(limits.as_ptr(), limits.len(), &mut handle) };
        assert_eq!(status, ds_status::DS_OK);
        let event = serde_json::to_vec(&reserve()).unwrap();
        // SAFETY: valid pointers.
        let status = unsafe { ds_engine_apply_json(handle, event.as_ptr(), event.len()) };
        assert_eq!(status, ds_status::DS_OK);
        let d = ds_dispatch {
            program: 0x4000,
            kind: 0,
            reasons: bits,
            slots: slots.as_ptr(),
            n_slots: slots.len(),
            push: push.as_ptr(),
            n_push: push.len(),
        };
        group.bench_function("c-abi", |b| {
            b.iter(|| {
                // SAFETY: `d` points at live slots and push words.
                let status = unsafe { ds_engine_dispatch(handle, &d) };
                assert_eq!(status, ds_status::DS_OK);
            })
        });
        assert_eq!(ds_engine_destroy(handle), ds_status::DS_OK);
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
