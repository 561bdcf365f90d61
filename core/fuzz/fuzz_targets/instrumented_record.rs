//! Fuzzes the instrumented section's column record (`dispatchscope_formats::instrumented`) and the
//! framed DISPATCH payload that carries it: any bytes are a section or a named error, never a
//! panic, and a section read back encodes to bytes that read back to the same section.
#![no_main]

use dispatchscope_formats::instrumented::{decode, encode};
use dispatchscope_formats::session::DispatchRecord;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(section) = decode(data) {
        let again = encode(&section).expect("a decoded section encodes");
        assert_eq!(decode(&again).expect("re-encoded bytes decode"), section);
    }
    let _ = DispatchRecord::from_payload(data);
});
