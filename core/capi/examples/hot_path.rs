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
use dispatchscope_core::input::{BaseSource, DeviceLimits, DispatchInput, Event, Reason, Slot};
use dispatchscope_core::{ByteRange, Engine};

const N: usize = 2000;

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

fn reserve() -> Event {
    Event::Reserve {
        range: ByteRange::new(0x10_0000, 0x100_0000),
        readable: true,
        writable: true,
        committed: true,
        backing: Default::default(),
    }
}

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
        let input = DispatchInput {
            program: 0x4000,
            push: push.to_vec(),
            reasons,
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
        };
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
