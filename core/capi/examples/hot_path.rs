//! A fixed number of hot-path dispatches, through Rust and through the C ABI, for counting
//! instructions under callgrind (deterministic where wall-clock benches on a shared machine are
//! not):
//!
//! ```sh
//! cargo build --release -p dispatchscope-capi --example hot_path
//! valgrind --tool=callgrind --toggle-collect='*hot_path::rust_loop*' target/release/examples/hot_path
//! valgrind --tool=callgrind --toggle-collect='*hot_path::c_loop*' target/release/examples/hot_path
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used, unsafe_code, missing_docs)]

use dispatchscope_capi::*;
use dispatchscope_core::Engine;
use dispatchscope_core::input::{DeviceLimits, DispatchInput, Reason};

use dispatchscope_capi::fixture::{reserve, rust_input, slots};

const N: usize = 2000;

#[inline(never)]
fn rust_loop(engine: &mut Engine, input: &DispatchInput) {
    for _ in 0..N {
        std::hint::black_box(engine.dispatch(input).unwrap());
    }
}

#[inline(never)]
fn c_loop(handle: ds_engine, d: &ds_dispatch) {
    for _ in 0..N {
        // SAFETY: `d` points at live slots and push words.
        let status = unsafe { ds_engine_dispatch(handle, d) };
        assert_eq!(status, ds_status::DS_OK);
    }
}

fn main() {
    let slots = slots();
    let push = [0u32; 16];
    for (reasons, bits) in [(vec![], 0u32), (vec![Reason::D753], 1u32)] {
        let mut engine = Engine::cpu(DeviceLimits::default()).unwrap();
        engine.apply(&reserve()).unwrap();
        let input = rust_input(&slots, &reasons, &push);
        rust_loop(&mut engine, &input);

        let mut handle: ds_engine = 0;
        let limits = serde_json::to_vec(&DeviceLimits::default()).unwrap();
        // SAFETY: valid pointers.
        assert_eq!(
            unsafe { ds_engine_create_json(limits.as_ptr(), limits.len(), &mut handle) },
            ds_status::DS_OK
        );
        let event = serde_json::to_vec(&reserve()).unwrap();
        // SAFETY: valid pointers.
        assert_eq!(
            unsafe { ds_engine_apply_json(handle, event.as_ptr(), event.len()) },
            ds_status::DS_OK
        );
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
        c_loop(handle, &d);
        assert_eq!(ds_engine_destroy(handle), ds_status::DS_OK);
    }
}
