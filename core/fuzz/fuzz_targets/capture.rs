//! Fuzzes the capture decoder: the container, its records, and the sample they rebuild.
#![no_main]

use dispatchscope_formats::capture::CaptureReader;
use dispatchscope_formats::session::CaptureFile;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(reader) = CaptureReader::from_bytes(data.to_vec()) else { return };
    let Ok(mut file) = CaptureFile::from_reader("fuzz".into(), reader) else { return };
    let n = file.n_dispatches();
    if n > 0 {
        let _ = file.dispatch(n - 1);
    }
    if let Ok((sample, _)) = file.to_sample() {
        let _ = sample.run();
    }
});
