//! Fuzzes the live protocol's frame decoder as a debugger meets it: the framing (lengths checked
//! before anything is allocated), then each payload through one version 2 `Decoder` (JSON or
//! binary, lz4, MessagePack, mapping states named by later dispatches), the same payload as a
//! window's client keeps dispatches (as they came, then decoded whole, and as the store's record),
//! and the hello header.
//! Any input must give frames or named errors, never a panic or an unbounded allocation.
#![no_main]

use std::io::Cursor;

use dispatchscope_live::protocol::{FrameReader, MAX_FRAME_BYTES, hello_header};
use dispatchscope_live::wire::Decoder;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut reader = FrameReader::new(MAX_FRAME_BYTES);
    let mut stream = Cursor::new(data);
    let mut decoder = Decoder::new();
    let mut out = Vec::new();
    while let Ok(Some(payload)) = reader.read_frame(&mut stream) {
        let _ = hello_header(&payload);
        if decoder.decode(&payload, &mut out).is_err() {
            break;
        }
        out.clear();
    }
    // A bare payload too, without the framing in the way.
    let _ = Decoder::new().decode(data, &mut out);
    // As a window's client decodes it: dispatches kept as they came, then decoded whole.
    let mut received = Decoder::new();
    received.set_keep_received(true);
    out.clear();
    if received.decode(data, &mut out).is_ok() {
        for m in out.drain(..) {
            if let dispatchscope_live::ToDebugger::Received(d) = m {
                let _ = d.decode();
                let _ = dispatchscope_formats::session::DispatchRecord::from_payload(d.record());
                let _ = d.into_dispatch_or_shell();
            }
        }
    }
});
