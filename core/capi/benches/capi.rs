//! The hot path through the C ABI (struct form, tap detached) against the Rust call it wraps, on
//! the same dispatch, in the same process. Goal: within 10 % of the Rust call.
#![allow(clippy::unwrap_used, clippy::expect_used, unsafe_code, missing_docs)]

use criterion::{Criterion, criterion_group, criterion_main};
use dispatchscope_capi::*;
use dispatchscope_core::Engine;
use dispatchscope_core::input::{DeviceLimits, Reason};

use dispatchscope_capi::fixture::{reserve, rust_input, slots};

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
            size: size_of::<ds_dispatch>() as u32,
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
