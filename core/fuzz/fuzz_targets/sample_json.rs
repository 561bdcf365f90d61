//! Fuzzes the sample decoder and, for what decodes, the engine that replays it.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(sample) = dispatchscope_formats::sample::Sample::from_json(&text) {
        let _ = sample.run();
    }
});
